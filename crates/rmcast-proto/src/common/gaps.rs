//! Gap tracking and NACK timing: which sequence numbers a member lacks below the highest it
//! knows of, and when to ask for them.
//!
//! Why here: every engine with negative acknowledgements repairs gaps the same way (Amoeba paper
//! section 5.2, BC_RETRANS). A member holds everything below `held_next`; anything in
//! `[held_next, limit)`, where `limit` is the highest sequence number known to exist, is a gap.
//! Suppression: a gap is first given a short grace period (reordered datagrams arrive in it) and
//! only then asked for; while it stays open the request is repeated once per retry interval;
//! when repairs make progress without closing it, the next part is asked for after a grace
//! period again rather than a whole retry interval later, so that a member far behind catches
//! up at the pace of round trips.
//!
//! Invariant: a request is only ever due for a gap that was open when its timer fired.

use crate::engine::Time;
use std::ops::Range;
use std::time::Duration;

/// The NACK timer and the request it makes due.
#[derive(Clone, Debug, Default)]
pub struct GapTracker {
    /// When the open gap is (next) asked for.
    deadline: Option<Time>,
    /// A request is due: the next transmission asks for the gap.
    ask: bool,
}

impl GapTracker {
    /// No gap, no request.
    pub fn new() -> Self {
        GapTracker::default()
    }

    /// The sequence numbers missing below `limit` for a member that holds everything below
    /// `held_next`.
    pub fn missing(held_next: u64, limit: u64) -> Option<Range<u64>> {
        (held_next < limit).then_some(held_next..limit)
    }

    /// Look at the gap after an input: `limit` is where repair could reach (`None`: nobody to
    /// ask). A new gap starts the grace period; no gap stops the timer.
    pub fn watch(&mut self, now: Time, held_next: u64, limit: Option<u64>, grace: Duration) {
        match limit.and_then(|l| Self::missing(held_next, l)) {
            Some(_) => {
                if self.deadline.is_none() {
                    self.deadline = Some(now + grace);
                }
            }
            None => self.deadline = None,
        }
    }

    /// Repairs moved `held_next` from `before` to `after` and `known` is still ahead: ask for the
    /// next part after a grace period.
    pub fn progress(&mut self, now: Time, before: u64, after: u64, known: u64, grace: Duration) {
        if after > before && after < known {
            self.deadline = Some(now + grace);
        }
    }

    /// Timer check at `now`: when due and the gap is still `open`, a request becomes due and the
    /// next one is timed `retry` later.
    pub fn on_timeout(&mut self, now: Time, open: bool, retry: Duration) {
        if self.deadline.is_some_and(|d| now >= d) {
            self.deadline = None;
            if open {
                self.ask = true;
                self.deadline = Some(now + retry);
            }
        }
    }

    /// Whether a request is due; taking it clears it.
    pub fn take_request(&mut self) -> bool {
        std::mem::take(&mut self.ask)
    }

    /// Stop the timer (the request already due, if any, stays due).
    pub fn stop_timer(&mut self) {
        self.deadline = None;
    }

    /// Forget the gap: no timer, no request.
    pub fn clear(&mut self) {
        self.deadline = None;
        self.ask = false;
    }

    /// When the timer fires.
    pub fn deadline(&self) -> Option<Time> {
        self.deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn grace_then_repeat_then_close() {
        let t0 = Time::ZERO;
        let mut g = GapTracker::new();
        assert_eq!(GapTracker::missing(5, 5), None);
        assert_eq!(GapTracker::missing(5, 8), Some(5..8));
        g.watch(t0, 5, Some(8), MS * 10);
        assert_eq!(g.deadline(), Some(t0 + MS * 10));
        // A later look does not push the deadline back.
        g.watch(t0 + MS * 5, 5, Some(9), MS * 10);
        assert_eq!(g.deadline(), Some(t0 + MS * 10));
        g.on_timeout(t0 + MS * 9, true, MS * 40);
        assert!(!g.take_request());
        g.on_timeout(t0 + MS * 10, true, MS * 40);
        assert!(g.take_request());
        assert!(!g.take_request());
        assert_eq!(g.deadline(), Some(t0 + MS * 50));
        g.progress(t0 + MS * 12, 5, 7, 9, MS * 10);
        assert_eq!(g.deadline(), Some(t0 + MS * 22));
        g.on_timeout(t0 + MS * 22, false, MS * 40);
        assert_eq!(g.deadline(), None);
        assert!(!g.take_request());
        g.watch(t0, 5, None, MS);
        assert_eq!(g.deadline(), None);
        g.watch(t0, 5, Some(6), MS);
        g.clear();
        assert_eq!(g.deadline(), None);
    }
}
