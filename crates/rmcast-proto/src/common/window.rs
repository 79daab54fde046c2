//! Window flow control (Van Jacobson's slow start and congestion avoidance, as RMP section 4.4
//! applies it to multicast): how many requests a sender keeps in flight.

/// A congestion window counted in messages.
#[derive(Clone, Debug)]
pub struct CongestionWindow {
    cwnd: usize,
    ssthresh: usize,
    /// Fractional growth in congestion avoidance.
    acked: usize,
    min: usize,
    max: usize,
}

impl CongestionWindow {
    /// A window starting at `initial` messages, kept within `[min, max]`.
    pub fn new(initial: usize, min: usize, max: usize) -> Self {
        assert!(min >= 1 && min <= max);
        CongestionWindow {
            cwnd: initial.clamp(min, max),
            ssthresh: max,
            acked: 0,
            min,
            max,
        }
    }

    /// Messages that may be in flight.
    pub fn get(&self) -> usize {
        self.cwnd
    }

    /// `n` messages were acknowledged: grow exponentially below the threshold, then linearly.
    pub fn on_ack(&mut self, n: usize) {
        if self.cwnd < self.ssthresh {
            self.cwnd = (self.cwnd + n).min(self.max);
        } else {
            self.acked += n;
            if self.acked >= self.cwnd {
                self.acked -= self.cwnd;
                self.cwnd = (self.cwnd + 1).min(self.max);
            }
        }
    }

    /// A loss (retransmission timeout): halve the window.
    pub fn on_loss(&mut self) {
        self.ssthresh = (self.cwnd / 2).max(self.min);
        self.cwnd = self.ssthresh;
        self.acked = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_then_avoidance_then_halving() {
        let mut w = CongestionWindow::new(4, 2, 64);
        w.on_ack(4);
        assert_eq!(w.get(), 8);
        w.on_loss();
        assert_eq!(w.get(), 4);
        w.on_ack(4);
        assert_eq!(w.get(), 5);
        for _ in 0..1000 {
            w.on_ack(10);
        }
        assert_eq!(w.get(), 64);
        for _ in 0..10 {
            w.on_loss();
        }
        assert_eq!(w.get(), 2);
    }
}
