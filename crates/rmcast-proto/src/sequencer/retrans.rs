//! Retransmissions a member owes (the sequencer, or anyone during recovery): whom, which
//! sequence numbers, and how much of its budget each destination has left.
//!
//! Why selective and budgeted: a member names the ranges it lacks (BC_RETRANS), and only those
//! are sent; repeating from its first hole up sent mostly what it held, and on a congested
//! medium that waste is what lost the repairs (the Amoeba experiment's large-message runs, and
//! receivers overrun on loopback). Each request grants at most `budget` datagrams, and at most
//! one grant per interval per destination, so that repairs are clocked by the member's
//! requests, as acknowledgements clock TCP, and a flood of requests (forged or not) costs the
//! sequencer a bounded amount per member.

use super::config::Config;
use super::packet::SeqRanges;
use super::shared::MAX_RETRANS_QUEUE;
use crate::engine::{NodeId, Time};
use std::collections::VecDeque;
use std::time::Duration;

/// What this member owes `to`: the ranges still to send, and the datagrams its grant allows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Owed {
    pub(super) to: NodeId,
    /// What is still to be sent, lowest first.
    pub(super) ranges: SeqRanges,
    /// Datagrams the current grant still allows.
    allowance: usize,
    /// When the current grant was made: no new one before an interval has passed.
    granted_at: Time,
}

/// The limits of the grants: `datagrams` per request, one grant per `interval`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Budget {
    pub(super) datagrams: usize,
    pub(super) interval: Duration,
}

impl Budget {
    /// `max_retrans_datagrams` per grant, one grant per quarter of the shortest repair
    /// timeout: a member waits at least that long between two requests (its grace after
    /// progress is a quarter of its timeout), so a member that follows the protocol is never
    /// refused a grant.
    pub(super) fn of(cfg: &Config) -> Budget {
        Budget {
            datagrams: cfg.max_retrans_datagrams,
            interval: Duration::from_millis(cfg.min_retrans_timeout_ms) / 4,
        }
    }
}

/// Retransmissions this member answers (the sequencer, or anyone during recovery), served in
/// the order asked.
///
/// Invariants: at most [`MAX_RETRANS_QUEUE`] destinations, each at most once; a destination
/// whose allowance is spent has no ranges left (its debt was cut, it asks again).
#[derive(Clone, Debug, Default)]
pub(super) struct Retransmissions {
    queue: VecDeque<Owed>,
}

impl Retransmissions {
    /// `to` asks for `ranges` (already cut to what this member can send) at `now`. Its newest
    /// request says best what it lacks, so it replaces what was still owed; a new grant of
    /// `budget.datagrams` is made unless one was made less than `budget.interval` ago.
    /// Returns whether the request was cut (its destination's grant is spent: it asks again).
    #[must_use]
    pub(super) fn owe(&mut self, to: NodeId, ranges: SeqRanges, now: Time, budget: Budget) -> bool {
        if ranges.is_empty() {
            return false;
        }
        if let Some(r) = self.queue.iter_mut().find(|r| r.to == to) {
            r.ranges = ranges;
            if now.saturating_since(r.granted_at) >= budget.interval {
                r.allowance = budget.datagrams;
                r.granted_at = now;
            }
            if r.allowance == 0 {
                r.ranges.clear();
                return true;
            }
            return false;
        }
        if self.queue.len() >= MAX_RETRANS_QUEUE {
            // Destinations served and out of their interval are only remembered for the
            // budget: the first to go.
            self.queue.retain(|r| {
                !r.ranges.is_empty() || now.saturating_since(r.granted_at) < budget.interval
            });
        }
        if self.queue.len() < MAX_RETRANS_QUEUE {
            self.queue.push_back(Owed {
                to,
                ranges,
                allowance: budget.datagrams,
                granted_at: now,
            });
        }
        debug_assert!(self.queue.len() <= MAX_RETRANS_QUEUE);
        false
    }

    /// The retransmission to serve next: the first destination with something left to send.
    pub(super) fn next(&self) -> Option<(NodeId, u64, u64)> {
        self.queue
            .iter()
            .find_map(|r| r.ranges.first().map(|(f, t)| (r.to, f, t)))
    }

    /// A datagram to `to` covered `[from, end)` of its first range (`end == from`: nothing of
    /// it could be written, and it is dropped): one datagram of its grant is spent. Returns
    /// whether that spent the grant with ranges left, which are cut (the member asks again).
    #[must_use]
    pub(super) fn sent(&mut self, to: NodeId, from: u64, end: u64) -> bool {
        let Some(r) = self.queue.iter_mut().find(|r| r.to == to) else {
            return false;
        };
        match r.ranges.first() {
            Some((_, t)) if end == from => r.ranges.consume_first(t),
            Some(_) => r.ranges.consume_first(end),
            None => {}
        }
        if end > from {
            r.allowance = r.allowance.saturating_sub(1);
        }
        if r.allowance == 0 && !r.ranges.is_empty() {
            r.ranges.clear();
            return true;
        }
        false
    }

    /// Forget every debt (the order they refer to has ended); the grants stay remembered.
    pub(super) fn clear(&mut self) {
        for r in &mut self.queue {
            r.ranges.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_ranges_asked_within_a_budget_per_interval() {
        let ms = Duration::from_millis;
        let t0 = Time::ZERO;
        let budget = Budget {
            datagrams: 2,
            interval: ms(5),
        };
        let mut ranges = SeqRanges::single(10, 20);
        ranges.insert(30, 31);
        let mut r = Retransmissions::default();
        assert!(!r.owe(NodeId(1), ranges, t0, budget));
        assert!(!r.owe(NodeId(2), SeqRanges::single(5, 6), t0, budget));
        assert_eq!(r.next(), Some((NodeId(1), 10, 20)));
        assert!(!r.sent(NodeId(1), 10, 15));
        assert_eq!(r.next(), Some((NodeId(1), 15, 20)));
        // The second datagram spends the grant: the rest (30) is cut, the member asks again.
        assert!(r.sent(NodeId(1), 15, 20));
        assert_eq!(r.next(), Some((NodeId(2), 5, 6)));
        // Nothing could be written: that range is dropped.
        assert!(!r.sent(NodeId(2), 5, 5));
        assert_eq!(r.next(), None);
        // Asked again within the interval: no new grant.
        assert!(r.owe(NodeId(1), SeqRanges::single(30, 31), t0 + ms(4), budget));
        assert_eq!(r.next(), None);
        // After it: a new grant, for the newest request only.
        assert!(!r.owe(NodeId(1), SeqRanges::single(30, 31), t0 + ms(5), budget));
        assert_eq!(r.next(), Some((NodeId(1), 30, 31)));
        r.clear();
        assert_eq!(r.next(), None);
    }
}
