//! Window flow control (Van Jacobson's slow start and congestion avoidance, as RMP section 4.6
//! applies it to multicast): how much a sender keeps in flight, the packet-size rule of RMP's
//! Fig. 4.2, and the cache that keeps several NACKs of one loss from shrinking a window more
//! than once.

use std::collections::VecDeque;

/// A congestion window, in messages or in bytes.
#[derive(Clone, Debug)]
pub struct CongestionWindow {
    cwnd: usize,
    ssthresh: usize,
    /// Fractional growth in congestion avoidance.
    acked: usize,
    min: usize,
    max: usize,
    /// Growth per window acknowledged in congestion avoidance (one message, or one packet's
    /// bytes).
    unit: usize,
}

impl CongestionWindow {
    /// A window starting at `initial` messages, kept within `[min, max]`.
    pub fn new(initial: usize, min: usize, max: usize) -> Self {
        Self::with_unit(initial, min, max, 1)
    }

    /// A window counted in bytes (or any unit) that grows by `unit` per window acknowledged
    /// once past slow start.
    pub fn with_unit(initial: usize, min: usize, max: usize, unit: usize) -> Self {
        assert!(min >= 1 && min <= max && unit >= 1);
        CongestionWindow {
            cwnd: initial.clamp(min, max),
            ssthresh: max,
            acked: 0,
            min,
            max,
            unit,
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
                self.cwnd = (self.cwnd + self.unit).min(self.max);
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

/// RMP's packet-size rule (Fig. 4.2): how many bytes a sender puts in its next packet, given
/// its window `w`, the room left in it `a` and what is offered `p`; `None` when it should wait
/// for an ACK instead (the silly-window rule: less than a minimum packet of room, and the
/// window not that small itself). Up to half the window goes at a time, at least `min_packet`,
/// never more than the room or `max_packet`.
pub fn packet_size(
    w: usize,
    a: usize,
    p: usize,
    min_packet: usize,
    max_packet: usize,
) -> Option<usize> {
    if a < min_packet && a < w {
        return None;
    }
    Some(p.min(w / 2).max(min_packet).min(a).min(max_packet))
}

/// The last few of a sender's own messages that another member reported lost (RMP keeps three):
/// a loss lowers the window once however many NACKs name it.
#[derive(Clone, Debug)]
pub struct LossCache {
    recent: VecDeque<u64>,
    cap: usize,
}

impl LossCache {
    /// A cache of the last `cap` lost messages.
    pub fn new(cap: usize) -> Self {
        LossCache {
            recent: VecDeque::with_capacity(cap),
            cap,
        }
    }

    /// A NACK named message `msg`: true the first time (the window should shrink).
    pub fn first_report(&mut self, msg: u64) -> bool {
        if self.recent.contains(&msg) {
            return false;
        }
        if self.recent.len() == self.cap {
            self.recent.pop_front();
        }
        self.recent.push_back(msg);
        true
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

    #[test]
    fn a_byte_window_grows_by_a_packet_per_window_past_slow_start() {
        let mut w = CongestionWindow::with_unit(4000, 1000, 100_000, 1000);
        w.on_ack(4000);
        assert_eq!(w.get(), 8000);
        w.on_loss();
        assert_eq!(w.get(), 4000);
        w.on_ack(4000);
        assert_eq!(w.get(), 5000);
    }

    #[test]
    fn packet_size_follows_fig_4_2() {
        // Half the window at a time, at least a minimum packet, at most the room and the maximum.
        assert_eq!(packet_size(8000, 8000, 6000, 500, 1400), Some(1400));
        assert_eq!(packet_size(2000, 2000, 6000, 500, 1400), Some(1000));
        assert_eq!(packet_size(600, 600, 6000, 500, 1400), Some(500));
        assert_eq!(packet_size(8000, 700, 6000, 500, 1400), Some(700));
        assert_eq!(packet_size(8000, 8000, 100, 500, 1400), Some(500));
        // Silly window: less than a minimum packet of room in a larger window waits.
        assert_eq!(packet_size(8000, 400, 6000, 500, 1400), None);
        assert_eq!(packet_size(400, 400, 6000, 500, 1400), Some(400));
    }

    #[test]
    fn a_loss_is_counted_once_however_many_nacks_name_it() {
        let mut c = LossCache::new(3);
        assert!(c.first_report(7));
        assert!(!c.first_report(7));
        assert!(c.first_report(8) && c.first_report(9) && c.first_report(10));
        assert!(c.first_report(7), "fell out of the cache of three");
    }
}
