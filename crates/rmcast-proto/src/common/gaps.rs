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
//! Engines whose NACKs name exactly what is missing (the sequencer's) also back off: a request
//! repeated although nothing arrived since the previous one waits twice as long as that one
//! did, never less than the measured round from a request to its first answer, so that a
//! congested sender is not asked again and again for the same numbers
//! ([`GapTracker::on_timeout_backoff`]). Under heavy random loss this leaves a member behind
//! for longer; the sequencer's recovery copes with a member that still lacks the joins of others
//! when the sequencer fails (it follows a coordinator that holds them).
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
    /// When the last request was made due, and whether it repeated a fruitless one (its
    /// answer then gives no round sample: Karn's rule); `None` once answered.
    requested: Option<(Time, bool)>,
    /// A request went out and nothing asked for arrived since.
    fruitless: bool,
    /// Doublings of the retry interval (repeats of fruitless requests in a row).
    backoff: u32,
    /// Smoothed time from a request to its first answer.
    round: Option<Duration>,
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
            None => {
                self.deadline = None;
                self.requested = None;
                self.fruitless = false;
                self.backoff = 0;
            }
        }
    }

    /// Repairs moved `held_next` from `before` to `after` and `known` is still ahead: ask for the
    /// next part after a grace period.
    pub fn progress(&mut self, now: Time, before: u64, after: u64, known: u64, grace: Duration) {
        if after > before && after < known {
            self.deadline = Some(now + grace);
        }
    }

    /// The last request was answered in full and the gap is still open (the member is far
    /// behind, more than one request names): ask for the next part at once, so that it catches
    /// up at the pace of round trips, not of retry intervals.
    pub fn ask_now(&mut self, now: Time) {
        self.deadline = Some(now);
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

    /// [`GapTracker::on_timeout`] with backoff: when due and the gap is still `open`, a request
    /// becomes due; if the previous one brought nothing ([`GapTracker::answered`] not called
    /// since), the interval to the next doubles, up to `ceiling`, else it is `retry` again.
    /// Neither is shorter than the measured round. Returns whether the request made due
    /// repeats a fruitless one.
    pub fn on_timeout_backoff(
        &mut self,
        now: Time,
        open: bool,
        retry: Duration,
        ceiling: Duration,
    ) -> bool {
        if self.deadline.is_none_or(|d| now < d) {
            return false;
        }
        self.deadline = None;
        if !open {
            return false;
        }
        let repeat = self.fruitless;
        self.backoff = if repeat {
            (self.backoff + 1).min(16)
        } else {
            0
        };
        let retry = retry.max(self.round.unwrap_or_default());
        let interval = retry
            .saturating_mul(1 << self.backoff)
            .min(ceiling.max(retry));
        self.ask = true;
        self.fruitless = true;
        self.requested = Some((now, repeat));
        self.deadline = Some(now + interval);
        repeat
    }

    /// Something asked for arrived at `now`: the request was not fruitless, and if it was not
    /// a repeat its round is sampled.
    pub fn answered(&mut self, now: Time) {
        self.fruitless = false;
        if let Some((at, false)) = self.requested.take() {
            let sample = now.saturating_since(at);
            self.round = Some(match self.round {
                None => sample,
                Some(r) => (r * 7 + sample) / 8,
            });
        }
    }

    /// The smoothed round from a request to its first answer, once measured.
    pub fn round(&self) -> Option<Duration> {
        self.round
    }

    /// Whether a request is due; taking it clears it.
    pub fn take_request(&mut self) -> bool {
        std::mem::take(&mut self.ask)
    }

    /// Stop the timer (the request already due, if any, stays due).
    pub fn stop_timer(&mut self) {
        self.deadline = None;
    }

    /// Forget the gap: no timer, no request, no backoff (the measured round stays).
    pub fn clear(&mut self) {
        self.deadline = None;
        self.ask = false;
        self.requested = None;
        self.fruitless = false;
        self.backoff = 0;
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

    #[test]
    fn fruitless_requests_back_off_never_faster_than_the_round() {
        let t0 = Time::ZERO;
        let mut g = GapTracker::new();
        g.watch(t0, 5, Some(8), MS * 10);
        assert!(!g.on_timeout_backoff(t0 + MS * 10, true, MS * 40, MS * 320));
        assert!(g.take_request());
        assert_eq!(g.deadline(), Some(t0 + MS * 50));
        // Nothing came: the repeat waits twice as long, then four times, up to the ceiling.
        assert!(g.on_timeout_backoff(t0 + MS * 50, true, MS * 40, MS * 320));
        assert_eq!(g.deadline(), Some(t0 + MS * 130));
        assert!(g.on_timeout_backoff(t0 + MS * 130, true, MS * 40, MS * 320));
        assert_eq!(g.deadline(), Some(t0 + MS * 290));
        for _ in 0..5 {
            let d = g.deadline().unwrap();
            g.on_timeout_backoff(d, true, MS * 40, MS * 320);
        }
        let d = g.deadline().unwrap();
        g.on_timeout_backoff(d, true, MS * 40, MS * 320);
        assert_eq!(g.deadline(), Some(d + MS * 320));
        // An answer to a repeat gives no round sample, but ends the backoff.
        g.answered(d + MS * 5);
        assert_eq!(g.round(), None);
        let d = g.deadline().unwrap();
        assert!(!g.on_timeout_backoff(d, true, MS * 40, MS * 320));
        assert_eq!(g.deadline(), Some(d + MS * 40));
        // A first request answered after 100 ms: the round is measured, and no retry is
        // shorter than it.
        g.answered(d + MS * 100);
        assert_eq!(g.round(), Some(MS * 100));
        let d = g.deadline().unwrap();
        g.on_timeout_backoff(d, true, MS * 40, MS * 320);
        assert_eq!(g.deadline(), Some(d + MS * 100));
        // The gap closed: the backoff is forgotten.
        g.on_timeout_backoff(d + MS * 100, true, MS * 40, MS * 320);
        g.watch(d + MS * 150, 8, Some(8), MS * 10);
        g.watch(d + MS * 160, 8, Some(9), MS * 10);
        assert!(!g.on_timeout_backoff(d + MS * 170, true, MS * 40, MS * 320));
    }
}
