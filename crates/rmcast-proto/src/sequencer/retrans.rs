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
//!
//! What was sent to a member is not sent to it again for a while (`Budget::hold`): on a
//! shared medium the answer to a NACK may wait long in the sequencer's own output queue (it
//! gets one turn in as many as there are hosts sending, and sends most of the datagrams), and
//! a member that asked again meanwhile had everything still queued sent a second time. In the
//! Amoeba experiment's run of 2 KB BB messages from 24 members, two thirds of the entries
//! retransmitted were already held where they arrived, with 416 datagrams queued on average
//! before the sequencer. A repeat the hold keeps back is deferred, never dropped: if the
//! member still asks for it when the hold ends (its newer NACK replaces the older), it is sent
//! then without waiting for another NACK, so a lost repair costs at most the hold, and the
//! answer no longer depends on a later NACK getting through. The hold is as long as the
//! member's measured repair round (at most `Budget::hold`), so that on a fast network a lost
//! repair waits about a round, not the longest hold; it applies only while this member orders.

use super::config::Config;
use super::engine::NACK_BACKOFF;
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
    /// What was sent to it since `sent_since`: not sent again before `sent_since` plus the
    /// hold (an over-estimate when more ranges than a NACK names, which only defers them).
    sent: SeqRanges,
    sent_since: Time,
    /// What of `sent` went to it alone (not to the group): another member that lacks it
    /// too makes the next copy a multicast.
    alone: SeqRanges,
    /// What it asked for again of `sent` within the hold: sent when the hold ends.
    deferred: SeqRanges,
    /// A repair on its way: when it was sent and the entries `[from, end)` it covered, until
    /// a request shows whether it arrived.
    probe: Option<(Time, u64, u64)>,
    /// How long a repair takes to reach it, as its requests show (smoothed): sent, queued
    /// behind what this member sends, carried, and no longer asked for.
    round: Option<Duration>,
}

impl Owed {
    /// How long what was sent to it is held back: its measured repair round, at most the
    /// budget's hold; none before a round was measured.
    fn hold(&self, budget: Budget) -> Duration {
        self.round.map_or(Duration::ZERO, |d| d.min(budget.hold))
    }

    /// How long a multicast repair is held back from it: its own measured round (a member
    /// slow to answer, one paused, must not hold back the others' repairs), else the
    /// group's `longest`.
    fn group_hold(&self, budget: Budget, longest: Duration) -> Duration {
        self.round.map_or(longest, |d| d.min(budget.hold))
    }

    /// A request from it at `now` asks for `ranges`: a repair on its way that it no longer
    /// asks for has arrived, which measures the round; one it still asks for after the
    /// longest hold was lost or waits that long, which measures at least that much.
    fn measure(&mut self, ranges: &SeqRanges, now: Time, budget: Budget) {
        let Some((at, from, end)) = self.probe else {
            return;
        };
        let sample = now.saturating_since(at);
        let probe = SeqRanges::single(from, end);
        if probe.without(ranges) == probe || sample >= budget.hold {
            self.probe = None;
            self.round = Some(match self.round {
                None => sample,
                Some(r) => (r * 7 + sample) / 8,
            });
        }
    }
}

/// The limits of the grants: `datagrams` per request, one grant per `interval`; what was sent
/// to a member is sent to it again only after its measured repair round, at most `hold`,
/// after the first of what was sent to it since.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Budget {
    pub(super) datagrams: usize,
    pub(super) interval: Duration,
    pub(super) hold: Duration,
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
            // As long as a member's fruitless NACK waits at most before it is repeated: a
            // repair still queued after that long is rare, one lost is sent again then.
            hold: Duration::from_millis(cfg.retrans_timeout_ms) * NACK_BACKOFF,
        }
    }

    /// The same grants with no hold: for repairs during a recovery, where members serve each
    /// other from histories that may end differently, and nothing measured before applies.
    pub(super) fn without_hold(self) -> Budget {
        Budget {
            hold: Duration::ZERO,
            ..self
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
    /// Ranges multicast lately, oldest first, each with when it went: held back from every
    /// member for the group's hold (at most [`MAX_GROUP_HELD`]).
    group: VecDeque<(u64, u64, Time)>,
}

/// Multicast repairs remembered for the group's hold; an older one is forgotten early, which
/// costs at most a copy sent again.
const MAX_GROUP_HELD: usize = 64;

impl Retransmissions {
    /// `to` asks for `ranges` (already cut to what this member can send) at `now`. Its newest
    /// request says best what it lacks, so it replaces what was still owed; what of it was
    /// sent within the hold is deferred to the hold's end. A new grant of `budget.datagrams`
    /// is made unless one was made less than `budget.interval` ago. Returns whether the
    /// request was cut (its destination's grant is spent: it asks again).
    #[must_use]
    pub(super) fn owe(&mut self, to: NodeId, ranges: SeqRanges, now: Time, budget: Budget) -> bool {
        if ranges.is_empty() {
            return false;
        }
        while (self.group.front()).is_some_and(|g| now.saturating_since(g.2) >= budget.hold) {
            self.group.pop_front();
        }
        let ghold = self.group_hold(budget);
        let group = &self.group;
        let multicast = |hold: Duration| {
            let mut m = SeqRanges::new();
            for &(f, e, at) in group {
                if now.saturating_since(at) < hold {
                    m.insert(f, e);
                }
            }
            m
        };
        if let Some(r) = self.queue.iter_mut().find(|r| r.to == to) {
            r.measure(&ranges, now, budget);
            let multicast = multicast(r.group_hold(budget, ghold));
            if now.saturating_since(r.sent_since) >= r.hold(budget) {
                r.sent.clear();
                r.alone.clear();
                r.sent_since = now;
            }
            r.ranges = ranges.without(&r.sent).without(&multicast);
            r.deferred = ranges.without(&r.ranges);
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
                !r.ranges.is_empty()
                    || !r.deferred.is_empty()
                    || now.saturating_since(r.granted_at) < budget.interval
                    || now.saturating_since(r.sent_since) < r.hold(budget)
            });
        }
        if self.queue.len() < MAX_RETRANS_QUEUE {
            let owed = ranges.without(&multicast(ghold));
            self.queue.push_back(Owed {
                to,
                ranges: owed,
                allowance: budget.datagrams,
                granted_at: now,
                sent: SeqRanges::new(),
                sent_since: now,
                alone: SeqRanges::new(),
                deferred: ranges.without(&owed),
                probe: None,
                round: None,
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

    /// A datagram to `to` covered `[from, end)` of its first range at `now` (`end == from`:
    /// nothing of it could be written, and it is dropped): one datagram of its grant is spent.
    /// Returns whether that spent the grant with ranges left, which are cut (the member asks
    /// again).
    #[must_use]
    pub(super) fn sent(&mut self, to: NodeId, from: u64, end: u64, now: Time) -> bool {
        self.record(to, from, end, now, true)
    }

    /// [`Retransmissions::sent`], `alone` if the datagram went to `to` only.
    fn record(&mut self, to: NodeId, from: u64, end: u64, now: Time, alone: bool) -> bool {
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
            if r.sent.is_empty() {
                // The hold runs from the first of what it holds back.
                r.sent_since = now;
            }
            r.sent.insert(from, end);
            if alone {
                r.alone.insert(from, end);
            }
            if r.probe.is_none() {
                r.probe = Some((now, from, end));
            }
        }
        if r.allowance == 0 && !r.ranges.is_empty() {
            r.ranges.clear();
            return true;
        }
        false
    }

    /// Whether a destination other than `to` lacks part of `[from, until)` as well: it asks
    /// for it (owed or deferred), or it was sent to it alone within its hold. One multicast
    /// then serves them all (see [`Retransmissions::sent_to_group`]); what was multicast
    /// already is held back from everyone, and a member that still lacks it after its hold
    /// gets it alone unless another does too.
    pub(super) fn shared(&self, to: NodeId, from: u64, until: u64) -> bool {
        let want = SeqRanges::single(from, until);
        let meets = |s: &SeqRanges| want.without(s) != want;
        self.queue
            .iter()
            .any(|r| r.to != to && (meets(&r.ranges) || meets(&r.deferred) || meets(&r.alone)))
    }

    /// As [`Retransmissions::sent`], for a datagram that went to the whole group: `[from, end)`
    /// is no longer owed to anyone, and is held back from every member for its measured round
    /// (the longest measured for one not measured yet: the repair waits in this member's one
    /// output queue, whoever asked); the repair times the round of each member that asked
    /// for it. Only `to`'s grant is spent (the datagram was its).
    #[must_use]
    pub(super) fn sent_to_group(&mut self, to: NodeId, from: u64, end: u64, now: Time) -> bool {
        let cut = self.record(to, from, end, now, false);
        if end > from {
            let served = SeqRanges::single(from, end);
            for r in self.queue.iter_mut().filter(|r| r.to != to) {
                let asked = r.ranges.without(&served) != r.ranges
                    || r.deferred.without(&served) != r.deferred;
                r.ranges = r.ranges.without(&served);
                r.deferred = r.deferred.without(&served);
                if asked && r.probe.is_none() {
                    r.probe = Some((now, from, end));
                }
            }
            if self.group.len() >= MAX_GROUP_HELD {
                self.group.pop_front();
            }
            self.group.push_back((from, end, now));
        }
        cut
    }

    /// How long a multicast repair is held back from a member whose round was not measured:
    /// the longest measured round, at most the budget's hold; none before a round was
    /// measured.
    fn group_hold(&self, budget: Budget) -> Duration {
        (self.queue.iter().filter_map(|r| r.round).max())
            .map_or(Duration::ZERO, |d| d.min(budget.hold))
    }

    /// When `r`'s deferred repeats fall due: at the end of its own hold and of its hold of
    /// every multicast they were part of.
    fn due(&self, r: &Owed, budget: Budget) -> Time {
        let ghold = r.group_hold(budget, self.group_hold(budget));
        let own = r.sent_since + r.hold(budget);
        let meets = |&&(f, e, _): &&(u64, u64, Time)| {
            let g = SeqRanges::single(f, e);
            g.without(&r.deferred) != g
        };
        (self.group.iter().filter(meets))
            .map(|g| g.2 + ghold)
            .fold(own, Time::max)
    }

    /// When the first deferred repeat falls due.
    pub(super) fn deadline(&self, budget: Budget) -> Option<Time> {
        self.queue
            .iter()
            .filter(|r| !r.deferred.is_empty())
            .map(|r| self.due(r, budget))
            .min()
    }

    /// The holds that ended by `now` end: what was deferred in them is owed now, with a new
    /// grant (the member asked for it and waited the hold).
    pub(super) fn release(&mut self, now: Time, budget: Budget) {
        let due: Vec<bool> = (self.queue.iter())
            .map(|r| !r.deferred.is_empty() && self.due(r, budget) <= now)
            .collect();
        for (r, due) in self.queue.iter_mut().zip(due) {
            if !due {
                continue;
            }
            for (f, t) in r.deferred.iter() {
                r.ranges.insert(f, t);
            }
            r.deferred.clear();
            r.sent.clear();
            r.alone.clear();
            r.sent_since = now;
            r.allowance = budget.datagrams;
            r.granted_at = now;
        }
    }

    /// Forget every debt and hold (the order they refer to has ended: a reset may number
    /// other entries as those sent); the grants stay remembered, and so do the measured rounds.
    pub(super) fn clear(&mut self) {
        for r in &mut self.queue {
            r.ranges.clear();
            r.sent.clear();
            r.alone.clear();
            r.deferred.clear();
            r.probe = None;
        }
        self.group.clear();
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
            hold: ms(0),
        };
        let mut ranges = SeqRanges::single(10, 20);
        ranges.insert(30, 31);
        let mut r = Retransmissions::default();
        assert!(!r.owe(NodeId(1), ranges, t0, budget));
        assert!(!r.owe(NodeId(2), SeqRanges::single(5, 6), t0, budget));
        assert_eq!(r.next(), Some((NodeId(1), 10, 20)));
        assert!(!r.sent(NodeId(1), 10, 15, t0));
        assert_eq!(r.next(), Some((NodeId(1), 15, 20)));
        // The second datagram spends the grant: the rest (30) is cut, the member asks again.
        assert!(r.sent(NodeId(1), 15, 20, t0));
        assert_eq!(r.next(), Some((NodeId(2), 5, 6)));
        // Nothing could be written: that range is dropped.
        assert!(!r.sent(NodeId(2), 5, 5, t0));
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

    /// 8 datagrams a millisecond, repeats held for at most 100 ms.
    fn hold_budget() -> Budget {
        Budget {
            datagrams: 8,
            interval: Duration::from_millis(1),
            hold: Duration::from_millis(100),
        }
    }

    #[test]
    fn a_repeat_within_the_measured_hold_is_deferred_to_its_end_never_dropped() {
        let ms = Duration::from_millis;
        let (t0, budget, to) = (Time::ZERO, hold_budget(), NodeId(1));
        let mut r = Retransmissions::default();
        assert!(!r.owe(to, SeqRanges::single(10, 20), t0, budget));
        assert!(!r.sent(to, 10, 15, t0));
        // No round measured yet: no hold, a repeat is answered at once.
        assert!(!r.owe(to, SeqRanges::single(10, 20), t0 + ms(1), budget));
        assert_eq!(r.next(), Some((to, 10, 20)));
        // It no longer asks for 10..15, sent 40 ms before: its round is 40 ms.
        assert!(!r.owe(to, SeqRanges::single(15, 20), t0 + ms(40), budget));
        assert_eq!(r.next(), Some((to, 15, 20)));
        assert!(!r.sent(to, 15, 20, t0 + ms(40)));
        assert_eq!(r.next(), None);
        assert_eq!(r.deadline(budget), None);
        // Asked again 10 ms later: 15..20 may still be on its way, it is deferred.
        assert!(!r.owe(to, SeqRanges::single(15, 20), t0 + ms(50), budget));
        assert_eq!(r.next(), None);
        assert_eq!(r.deadline(budget), Some(t0 + ms(80)));
        // A newer NACK says what is still lacking: only that stays deferred.
        assert!(!r.owe(to, SeqRanges::single(16, 18), t0 + ms(60), budget));
        assert_eq!(r.next(), None);
        r.release(t0 + ms(79), budget);
        assert_eq!(r.next(), None);
        // At the hold's end it is sent without another NACK.
        r.release(t0 + ms(80), budget);
        assert_eq!(r.deadline(budget), None);
        assert_eq!(r.next(), Some((to, 16, 18)));
        assert!(!r.sent(to, 16, 18, t0 + ms(80)));
        // Without the hold (a recovery's repairs) the same repeat is answered at once.
        assert!(!r.owe(
            to,
            SeqRanges::single(16, 18),
            t0 + ms(81),
            budget.without_hold()
        ));
        assert_eq!(r.next(), Some((to, 16, 18)));
    }

    #[test]
    fn what_two_members_lack_goes_to_the_group_once_and_is_held_from_all() {
        let ms = Duration::from_millis;
        let (t0, budget) = (Time::ZERO, hold_budget());
        let (a, b, c) = (NodeId(1), NodeId(2), NodeId(3));
        let mut r = Retransmissions::default();
        // A alone lacks 10..20: it is sent to A alone.
        assert!(!r.owe(a, SeqRanges::single(10, 20), t0, budget));
        assert!(!r.shared(a, 10, 20));
        assert!(!r.sent(a, 10, 20, t0));
        // A's next request measures its round (20 ms): the group's hold is that long.
        assert!(!r.owe(a, SeqRanges::single(30, 31), t0 + ms(20), budget));
        assert!(!r.sent(a, 30, 31, t0 + ms(20)));
        // B lacks part of what went to A alone, and C asks for 15..16 too: one multicast.
        assert!(!r.owe(b, SeqRanges::single(12, 14), t0 + ms(21), budget));
        assert!(!r.owe(c, SeqRanges::single(15, 16), t0 + ms(21), budget));
        assert_eq!(r.next(), Some((b, 12, 14)));
        assert!(r.shared(b, 12, 16));
        assert!(!r.sent_to_group(b, 12, 16, t0 + ms(21)));
        // C was served by it: nothing is owed to anyone.
        assert_eq!(r.next(), None);
        // C asks again within the group's hold: deferred to its end, then sent.
        assert!(!r.owe(c, SeqRanges::single(15, 16), t0 + ms(30), budget));
        assert_eq!(r.next(), None);
        assert_eq!(r.deadline(budget), Some(t0 + ms(41)));
        r.release(t0 + ms(41), budget);
        assert_eq!(r.next(), Some((c, 15, 16)));
        // What went to the group is not a reason for the next multicast: C alone lacks it.
        assert!(!r.shared(c, 15, 16));
        // After the group's hold B's repeat is served at once (destinations in the order
        // they first asked).
        assert!(!r.owe(b, SeqRanges::single(12, 14), t0 + ms(60), budget));
        assert_eq!(r.next(), Some((b, 12, 14)));
        assert!(!r.sent(b, 12, 14, t0 + ms(60)));
        assert_eq!(r.next(), Some((c, 15, 16)));
    }

    #[test]
    fn a_repair_still_asked_for_after_the_longest_hold_measures_that_much() {
        let ms = Duration::from_millis;
        let (t0, budget, to) = (Time::ZERO, hold_budget(), NodeId(1));
        let mut r = Retransmissions::default();
        assert!(!r.owe(to, SeqRanges::single(10, 20), t0, budget));
        assert!(!r.sent(to, 10, 20, t0));
        // Still asked for within the hold: lost or queued, nothing measured.
        assert!(!r.owe(to, SeqRanges::single(10, 20), t0 + ms(99), budget));
        assert_eq!(r.next(), Some((to, 10, 20)));
        assert!(!r.sent(to, 10, 20, t0 + ms(99)));
        // Still asked for 300 ms after the first copy: at least the longest hold now.
        assert!(!r.owe(to, SeqRanges::single(10, 20), t0 + ms(300), budget));
        assert!(!r.sent(to, 10, 20, t0 + ms(300)));
        assert!(!r.owe(to, SeqRanges::single(10, 20), t0 + ms(350), budget));
        assert_eq!(r.next(), None);
        assert_eq!(r.deadline(budget), Some(t0 + ms(400)));
        // A reset ends every hold.
        r.clear();
        assert_eq!(r.deadline(budget), None);
    }
}
