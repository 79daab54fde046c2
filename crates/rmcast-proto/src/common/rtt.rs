//! Round-trip time estimation and retransmission timeout (RFC 6298: Jacobson and Karels).
//!
//! Engines sample the time from a request to its answer, never for retransmitted requests
//! (Karn's rule), and time their retransmissions with [`RttEstimator::rto`], doubled on every
//! timeout so that an overloaded peer is not flooded with repeats.

use std::time::Duration;

/// Smoothed RTT, its variation, and the resulting retransmission timeout.
#[derive(Clone, Debug)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    backoff: u32,
    initial: Duration,
    min: Duration,
    max: Duration,
}

impl RttEstimator {
    /// An estimator whose timeout starts at `initial` and stays within `[min, max]`.
    pub fn new(initial: Duration, min: Duration, max: Duration) -> Self {
        assert!(min <= max);
        RttEstimator {
            srtt: None,
            rttvar: Duration::ZERO,
            backoff: 0,
            initial,
            min,
            max,
        }
    }

    /// Feed one round-trip sample; resets the backoff.
    pub fn on_sample(&mut self, rtt: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                let diff = srtt.abs_diff(rtt);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((srtt * 7 + rtt) / 8);
            }
        }
        self.backoff = 0;
    }

    /// A retransmission timed out: double the timeout (up to the maximum).
    pub fn on_timeout(&mut self) {
        self.backoff = (self.backoff + 1).min(16);
    }

    /// The smoothed round-trip time, if any sample was taken.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// The peer made progress (an answer to new data) without a usable sample: the timeout need
    /// not stay backed off.
    pub fn on_progress(&mut self) {
        self.backoff = 0;
    }

    /// The timeout without backoff: for repair requests (NACKs), which are not repeats of the
    /// same unanswered request and need no exponential backoff.
    pub fn base_rto(&self) -> Duration {
        self.base_rto_at_least(self.min)
    }

    /// [`RttEstimator::base_rto`] with another lower bound: one estimator can time two kinds
    /// of repeats whose floors differ.
    pub fn base_rto_at_least(&self, min: Duration) -> Duration {
        let base = match self.srtt {
            None => self.initial,
            Some(srtt) => srtt + (self.rttvar * 4).max(Duration::from_millis(1)),
        };
        base.clamp(min.min(self.max), self.max)
    }

    /// The current retransmission timeout, backed off after timeouts.
    pub fn rto(&self) -> Duration {
        self.base_rto()
            .saturating_mul(1 << self.backoff)
            .clamp(self.min, self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_samples_and_backs_off() {
        let ms = Duration::from_millis;
        let mut r = RttEstimator::new(ms(40), ms(2), ms(2000));
        assert_eq!(r.rto(), ms(40));
        for _ in 0..50 {
            r.on_sample(ms(10));
        }
        assert!(r.rto() >= ms(10) && r.rto() < ms(15), "{:?}", r.rto());
        let before = r.rto();
        r.on_timeout();
        assert_eq!(r.rto(), before * 2);
        for _ in 0..20 {
            r.on_timeout();
        }
        assert_eq!(r.rto(), ms(2000));
        r.on_sample(ms(10));
        assert!(r.rto() < ms(100));
        r.on_timeout();
        assert_eq!(r.base_rto() * 2, r.rto());
        r.on_progress();
        assert_eq!(r.base_rto(), r.rto());
    }
}
