//! Gap tracking for NACK-based loss recovery: which numbers of one stream are missing below
//! the highest known one, and when to ask for them (again).

use crate::engine::Time;
use std::time::Duration;

/// One receiver's view of one sender's numbered stream.
///
/// Invariant: `next <= known`; numbers in `next..known` that were not received are missing.
#[derive(Clone, Debug, Default)]
pub struct GapTracker {
    /// The first number not yet received contiguously.
    next: u64,
    /// One past the highest number known to exist.
    known: u64,
    /// When the last request for the current gap went out.
    asked_at: Option<Time>,
}

impl GapTracker {
    /// A number was received (or announced): everything up to it exists.
    pub fn saw(&mut self, seq: u64) {
        self.saw_below(seq.saturating_add(1));
    }

    /// Every number below `end` exists (a sender's announcement of its next number).
    pub fn saw_below(&mut self, end: u64) {
        self.known = self.known.max(end);
    }

    /// Everything below `next` was received: the gap, if any, starts there.
    pub fn delivered_below(&mut self, next: u64) {
        if next > self.next {
            self.next = next;
            self.asked_at = None;
        }
        self.known = self.known.max(self.next);
        debug_assert!(self.next <= self.known);
    }

    /// Whether numbers are missing.
    pub fn has_gap(&self) -> bool {
        self.next < self.known
    }

    /// The missing range `next..known` to ask for now, if there is one and the last request
    /// for it is at least `interval` old; remembers that it was asked.
    pub fn due(&mut self, now: Time, interval: Duration) -> Option<(u64, u64)> {
        if !self.has_gap() || self.asked_at.is_some_and(|t| now < t + interval) {
            return None;
        }
        self.asked_at = Some(now);
        Some((self.next, self.known))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_for_gaps_once_per_interval() {
        let mut g = GapTracker::default();
        let ms = |n: u64| Time(n * 1_000_000);
        assert_eq!(g.due(ms(0), Duration::from_millis(10)), None);
        g.saw(4);
        assert_eq!(g.due(ms(0), Duration::from_millis(10)), Some((0, 5)));
        assert_eq!(g.due(ms(5), Duration::from_millis(10)), None);
        assert_eq!(g.due(ms(10), Duration::from_millis(10)), Some((0, 5)));
        g.delivered_below(3);
        assert_eq!(g.due(ms(11), Duration::from_millis(10)), Some((3, 5)));
        g.delivered_below(5);
        assert!(!g.has_gap());
        g.saw_below(2);
        assert!(!g.has_gap());
    }
}
