//! Failure detection by probing, after "SWIM: Scalable Weakly-consistent Infection-style
//! Process Group Membership Protocol" by Abhinandan Das, Indranil Gupta and Ashish Motivala,
//! used in groups larger than [`super::Config::probing_above`].
//!
//! Each round a member probes one other member ([`super::packet::PROBE`]), taken in turn
//! along a path through the peers that differs per member and per pass (SWIM's round robin
//! over a shuffled list, without a list: a random start and a random step coprime with the
//! group's size visit every position once a pass, so the detector costs a member no memory per
//! peer). A member that has not answered within [`super::Config::probe_timeout`] is probed
//! through [`super::Config::indirect_probes`] others ([`super::packet::PROBE_REQ`]), which
//! relay its answer; one that has not answered by the next round is suspected at its current
//! version (its incarnation). A suspicion, the departure that confirms it once it is
//! [`super::Config::silence_timeout`] old, and the refutation of a live member (its entry alive
//! at a higher version) spread as [`Update`]s piggybacked on the digests and probes a member
//! sends anyway, each sent about `3 log2 n` times by every member that took it in as news (the
//! infection style). So the time to find a crashed member (a probe of it comes about once a
//! round, then the timeout) and a member's cost per round (one probe, one answer, sometimes a
//! few requests, a bounded number of updates) do not grow with the group; with gossiped
//! heartbeats both did (news of a member comes in about n / (fanout · rows a digest) rounds).
//!
//! Departures and refutations are membership table entries ([`super::membership`]), so they
//! merge, refute and stay bounded as any entry; a suspicion is kept here only, beside the table
//! (it changes no view), and is void once the table holds its member at a later version.

use super::packet::Update;
use crate::common::SplitMix64;
use crate::engine::{NodeId, Time};
use std::collections::{BTreeMap, VecDeque};

/// Updates waiting to be piggybacked, at most (the oldest sends dropped first beyond).
const MAX_BUFFERED: usize = 64;
/// Probes relayed for others and still awaited, at most (the oldest dropped beyond).
const MAX_RELAYS: usize = 64;
/// Each update is piggybacked this many times `log2 n` by a member that took it in (SWIM's
/// λ log n).
const SENDS_PER_LOG2: u32 = 3;

/// The probe under way.
#[derive(Clone, Debug)]
pub(super) struct Pending {
    /// Its id (answers name it).
    pub id: u32,
    /// The member probed.
    pub target: NodeId,
    /// When to ask others to probe it if it has not answered; `None` once asked.
    pub indirect_at: Option<Time>,
    /// The members asked to probe it (only they, or the target, may answer for it).
    pub asked: Vec<NodeId>,
    /// It answered, directly or through another.
    pub acked: bool,
}

/// A probe sent on another member's behalf.
#[derive(Copy, Clone, Debug)]
struct Relay {
    /// The id of the probe this member sent.
    id: u32,
    target: NodeId,
    requester: NodeId,
    /// The requester's probe id, named in the answer relayed.
    their_id: u32,
    until: Time,
}

/// A member suspected at a version, since a time.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Suspicion {
    pub version: u32,
    pub since: Time,
}

/// The detector's state at one member (see the module docs).
#[derive(Clone, Debug, Default)]
pub(super) struct Detector {
    /// The position probed last, the step between positions, and positions left this pass.
    pos: u64,
    step: u64,
    left: u64,
    next_id: u32,
    pub pending: Option<Pending>,
    relays: VecDeque<Relay>,
    /// Members suspected, each at one version.
    pub suspects: BTreeMap<NodeId, Suspicion>,
    /// Updates to piggyback, each with the sends it has left.
    buffered: Vec<(Update, u32)>,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Detector {
    /// The position (in `0..n`) of the next member to probe: every position once a pass, in an
    /// order drawn anew each pass.
    pub fn next_position(&mut self, n: usize, rng: &mut SplitMix64) -> usize {
        let n = n.max(1) as u64;
        if self.left == 0 || self.step >= n.max(2) {
            self.pos = rng.below(n);
            self.step = 1;
            if n > 2 {
                // A step coprime with n visits every position once in n steps; most draws are.
                loop {
                    let s = 1 + rng.below(n - 1);
                    if gcd(s, n) == 1 {
                        self.step = s;
                        break;
                    }
                }
            }
            self.left = n;
        }
        self.left -= 1;
        self.pos = (self.pos + self.step) % n;
        self.pos as usize
    }

    /// A new probe id.
    pub fn new_id(&mut self) -> u32 {
        self.next_id = self.next_id.wrapping_add(1);
        self.next_id
    }

    /// Note a probe sent on `requester`'s behalf (its id `their_id`) as this member's `id`.
    pub fn relay(
        &mut self,
        id: u32,
        target: NodeId,
        requester: NodeId,
        their_id: u32,
        until: Time,
    ) {
        if self.relays.len() >= MAX_RELAYS {
            self.relays.pop_front();
        }
        self.relays.push_back(Relay {
            id,
            target,
            requester,
            their_id,
            until,
        });
    }

    /// An answer `id` from `from` that `member` is alive: the requester and its probe id if it
    /// answers a probe relayed (and still awaited) for another.
    pub fn relayed_answer(&mut self, now: Time, from: NodeId, id: u32) -> Option<(NodeId, u32)> {
        while self.relays.front().is_some_and(|r| r.until < now) {
            self.relays.pop_front();
        }
        let i = (self.relays.iter()).position(|r| r.id == id && r.target == from)?;
        let r = self.relays.remove(i)?;
        Some((r.requester, r.their_id))
    }

    /// An answer `id` from `from` says `member` is alive: whether it answers the probe under
    /// way (only its target, or a member asked to probe it, may answer).
    pub fn answered(&mut self, from: NodeId, id: u32, member: NodeId) -> bool {
        match &mut self.pending {
            Some(p)
                if p.id == id
                    && p.target == member
                    && (from == member || p.asked.contains(&from)) =>
            {
                p.acked = true;
                true
            }
            _ => false,
        }
    }

    /// Queue `u` to be piggybacked about `3 log2 n` times (replacing an older one about its
    /// member).
    pub fn spread(&mut self, u: Update, members: usize) {
        self.buffered.retain(|(b, _)| b.member != u.member);
        if self.buffered.len() >= MAX_BUFFERED {
            // The one with the fewest sends left goes: it has spread the most.
            if let Some(i) = (0..self.buffered.len()).min_by_key(|&i| self.buffered[i].1) {
                self.buffered.swap_remove(i);
            }
        }
        let log2 = u64::BITS - (members as u64).leading_zeros();
        self.buffered.push((u, SENDS_PER_LOG2 * log2.max(1)));
    }

    /// Up to `k` updates for a packet to `to`: those about `to` itself first (a suspect learns
    /// of its suspicion from the probe itself), then those with the most sends left.
    pub fn take(&mut self, k: usize, to: NodeId) -> Vec<Update> {
        if self.buffered.is_empty() || k == 0 {
            return Vec::new();
        }
        self.buffered
            .sort_by_key(|(u, left)| (u.member != to, std::cmp::Reverse(*left)));
        let k = k.min(self.buffered.len());
        let out: Vec<Update> = self.buffered[..k].iter().map(|(u, _)| *u).collect();
        for b in &mut self.buffered[..k] {
            b.1 -= 1;
        }
        self.buffered.retain(|(_, left)| *left > 0);
        out
    }

    /// Updates waiting to be piggybacked.
    #[cfg(test)]
    pub fn buffered(&self) -> usize {
        self.buffered.len()
    }

    /// Forget what is under way (the member stalls, goes idle, or stops probing); suspicions
    /// and updates stay.
    pub fn pause(&mut self) {
        self.pending = None;
        self.relays.clear();
        self.left = 0;
    }

    /// Forget everything (probing is off).
    pub fn clear(&mut self) {
        *self = Detector {
            next_id: self.next_id,
            ..Detector::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::super::packet::UpdateKind;
    use super::*;

    #[test]
    fn a_pass_probes_every_position_once() {
        let mut d = Detector::default();
        let mut rng = SplitMix64::new(7);
        for n in [1usize, 2, 3, 10, 97, 100] {
            d.left = 0;
            let mut seen: Vec<usize> = (0..n).map(|_| d.next_position(n, &mut rng)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "n = {n}");
        }
    }

    #[test]
    fn only_the_target_or_a_member_asked_answers_a_probe() {
        let mut d = Detector::default();
        let id = d.new_id();
        d.pending = Some(Pending {
            id,
            target: NodeId(5),
            indirect_at: None,
            asked: vec![NodeId(7)],
            acked: false,
        });
        assert!(!d.answered(NodeId(6), id, NodeId(5)), "not asked");
        assert!(!d.answered(NodeId(5), id + 1, NodeId(5)), "another probe");
        assert!(
            !d.answered(NodeId(7), id, NodeId(6)),
            "about another member"
        );
        assert!(d.answered(NodeId(7), id, NodeId(5)));
        assert!(d.pending.as_ref().unwrap().acked);
    }

    #[test]
    fn a_relayed_probe_is_answered_once_and_only_from_its_target() {
        let mut d = Detector::default();
        let t = Time(1_000);
        d.relay(3, NodeId(5), NodeId(9), 44, t);
        assert_eq!(d.relayed_answer(t, NodeId(6), 3), None, "not the target");
        assert_eq!(d.relayed_answer(t, NodeId(5), 3), Some((NodeId(9), 44)));
        assert_eq!(d.relayed_answer(t, NodeId(5), 3), None, "once");
        d.relay(4, NodeId(5), NodeId(9), 45, t);
        assert_eq!(d.relayed_answer(Time(2_000), NodeId(5), 4), None, "expired");
    }

    #[test]
    fn updates_are_sent_a_bounded_number_of_times_the_recipients_own_first() {
        let mut d = Detector::default();
        let u = |m: u32, kind| Update {
            member: NodeId(m),
            version: 1,
            kind,
        };
        d.spread(u(1, UpdateKind::Suspect), 2);
        d.spread(u(2, UpdateKind::Departed), 2);
        d.spread(u(1, UpdateKind::Alive), 2);
        assert_eq!(d.buffered(), 2, "one update a member");
        // Two members: log2 2 = 2 bits, so 6 sends each.
        let first = d.take(1, NodeId(2));
        assert_eq!(first, [u(2, UpdateKind::Departed)]);
        let mut sends = 1;
        while !d.take(2, NodeId(0)).is_empty() {
            sends += 1;
        }
        // Member 2's update once, then member 1's six times (the last take finds none).
        assert_eq!(sends, 1 + 6);
        assert_eq!(d.buffered(), 0);
        for m in 0..(MAX_BUFFERED as u32 + 10) {
            d.spread(u(m, UpdateKind::Suspect), 1000);
        }
        assert_eq!(d.buffered(), MAX_BUFFERED, "bounded");
    }
}
