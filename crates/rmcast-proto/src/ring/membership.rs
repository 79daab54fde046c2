//! Membership (sections 3.1 and 4.3): where this process stands towards the ring (its
//! [`Phase`]), the ring as of the last applied ACK, the views, and the List Change Requests
//! and leavers the token site and the members keep track of.

use super::packet;
use crate::engine::{NodeId, Time, View};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Where this process stands towards the ring. Transitions go through
/// [`Membership::enter`], which checks (in debug builds) that the protocol makes it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Asking in (or a non-member sending requests): no view installed yet.
    Joining,
    /// A member of the ring.
    Member,
    /// A member that asked to leave; its leave is not ordered yet.
    Leaving,
    /// The New List removing this member was ordered (`asked`: it had asked to leave); it
    /// delivers up to that view, then stops.
    Removed {
        /// It had asked to leave (a rejoin is refused).
        asked: bool,
    },
    /// Stopped after a leave, or after the view that removed it.
    Left {
        /// It had asked to leave (a rejoin is refused).
        asked: bool,
        /// It had installed a view.
        member: bool,
    },
    /// A reformation formed a view without it: it may come back only as a new member.
    Expelled {
        /// It had asked to leave (a rejoin is refused).
        asked: bool,
    },
}

impl Phase {
    /// Installed a view (and still counts as having done so after stopping).
    pub(super) fn is_member(self) -> bool {
        !matches!(self, Phase::Joining | Phase::Left { member: false, .. })
    }

    /// Asked to leave.
    pub(super) fn asked_to_leave(self) -> bool {
        matches!(
            self,
            Phase::Leaving
                | Phase::Removed { asked: true }
                | Phase::Left { asked: true, .. }
                | Phase::Expelled { asked: true }
        )
    }

    /// Stopped: nothing is sent, received or delivered any more.
    pub(super) fn is_stopped(self) -> bool {
        matches!(self, Phase::Left { .. } | Phase::Expelled { .. })
    }

    /// Whether the protocol ever goes from `self` to `to`.
    fn may_become(self, to: Phase) -> bool {
        use Phase::*;
        match (self, to) {
            (Joining, Member) => true,
            (Joining, Left { member: false, .. }) => true,
            (Member, Leaving) => true,
            (Member, Removed { asked: false }) | (Leaving, Removed { asked: true }) => true,
            // Asked to leave after an unasked removal: goes on as a leaver.
            (Removed { asked: false }, Removed { asked: true }) => true,
            (Leaving | Removed { .. }, Left { member: true, .. }) => true,
            (Member | Leaving | Removed { .. }, Expelled { .. }) => true,
            _ => false,
        }
    }
}

/// The membership part: the phase, the ring and its views, pending List Change Requests, and
/// the members that left lately.
#[derive(Clone)]
pub(super) struct Membership {
    phase: Phase,
    /// The ring as of the last applied ACK (changed only by [`Membership::set_ring`]).
    pub(super) ring: Vec<NodeId>,
    /// [`packet::ring_digest`] of `ring`, kept with it: every ACK sent and applied carries or
    /// checks it, and hashing a ring of a thousand each time would cost 4 KB an ACK.
    pub(super) ring_digest: u32,
    /// The ring's lineage ([`packet::lineage`]): set by its creator, taken by a joiner from
    /// the ACK that admits it, 0 before either. An ACK or EXPELLED of another lineage is
    /// another ring's, whatever its view id says.
    pub(super) lineage: u64,
    pub(super) view_id: u64,
    /// The view as of the last delivered slot.
    pub(super) delivered_view: View,
    /// Pending List Change Requests: kind, and for a join the joiner's next sequence number
    /// (a member that comes back goes on numbering where it was).
    pub(super) lcrs: BTreeMap<NodeId, (u8, u64)>,
    /// New Lists that removed a member, kept to answer a late leaver.
    pub(super) removed_lists: VecDeque<(NodeId, Vec<u8>)>,
    /// Members removed by a New List that may still lack slots up to and including it:
    /// (member, what was stable when it was removed, the oldest ACK kept then, until when).
    /// Stability stays there, and every ACK from that one on is kept, until the member says
    /// goodbye or the time is up, so that NACKs of a leaver catching up are still answered
    /// (a NULL ACK it lacks would otherwise go as soon as the slots before it are stable).
    pub(super) departing: Vec<(NodeId, u64, u64, Time)>,
    /// A joiner's admission (the ACK number of its New List, and the site that sent it), until
    /// the ring is seen to go on after it; nothing is delivered before.
    pub(super) admission: Option<(u64, NodeId)>,
    /// Members that cannot receive multicast, as of the last applied New List (section 3.4),
    /// and joiners that asked in as such.
    pub(super) unicast_members: BTreeSet<NodeId>,
    pub(super) unicast_joiners: BTreeSet<NodeId>,
    /// While joining to merge into another ring of this name: a member of that ring, so that
    /// only it admits us ([`crate::Engine::rejoin`]).
    pub(super) join_into: Option<NodeId>,
    /// The view in which each member this member saw admitted joined (members of the ring
    /// only). A member's own view never falls below it: one that says it is in an older view
    /// is in another ring of this name.
    pub(super) admitted_in: BTreeMap<NodeId, u64>,
    /// When the last New List was applied here (joins are gathered after it).
    pub(super) list_at: Time,
}

impl Membership {
    /// Outside any ring, `me` coordinating its own empty view.
    pub(super) fn new(me: NodeId) -> Membership {
        Membership {
            phase: Phase::Joining,
            ring: vec![],
            ring_digest: packet::ring_digest(&[]),
            lineage: 0,
            view_id: 0,
            delivered_view: View {
                id: 0,
                seq: 0,
                members: vec![],
                coordinator: me,
                joined: None,
                left: None,
            },
            lcrs: BTreeMap::new(),
            removed_lists: VecDeque::new(),
            departing: Vec::new(),
            admission: None,
            unicast_members: BTreeSet::new(),
            unicast_joiners: BTreeSet::new(),
            join_into: None,
            admitted_in: BTreeMap::new(),
            list_at: Time::ZERO,
        }
    }

    /// The ring from now on; returns the one before.
    pub(super) fn set_ring(&mut self, ring: Vec<NodeId>) -> Vec<NodeId> {
        self.ring_digest = packet::ring_digest(&ring);
        std::mem::replace(&mut self.ring, ring)
    }

    /// Where this process stands.
    pub(super) fn phase(&self) -> Phase {
        self.phase
    }

    /// Goes to phase `to`: only along a transition the protocol makes.
    pub(super) fn enter(&mut self, to: Phase) {
        debug_assert!(
            self.phase.may_become(to),
            "ring phase {:?} -> {:?}",
            self.phase,
            to
        );
        self.phase = to;
    }

    /// `m`'s place in the ring.
    pub(super) fn idx(&self, m: NodeId) -> Option<usize> {
        self.ring.iter().position(|&x| x == m)
    }

    /// The member after `m` in `ring` (the first when `m` is not in it).
    pub(super) fn successor(ring: &[NodeId], m: NodeId) -> NodeId {
        let i = ring.iter().position(|&x| x == m).unwrap_or(0);
        ring[(i + 1) % ring.len()]
    }

    /// The members of `members` that cannot receive multicast (section 3.4).
    pub(super) fn unicast_only_of(&self, members: &[NodeId]) -> Vec<NodeId> {
        members
            .iter()
            .copied()
            .filter(|m| self.unicast_members.contains(m))
            .collect()
    }

    /// Keeps the New List that removed `gone` (bounded: the oldest goes first), and for
    /// another member what it may still lack: stable up to `stable`, ACKs from `oldest` on,
    /// until `until`.
    pub(super) fn note_removed(
        &mut self,
        me: NodeId,
        gone: NodeId,
        list: Vec<u8>,
        kept: (u64, u64, Time),
        max: usize,
    ) {
        if self.removed_lists.len() >= max {
            self.removed_lists.pop_front();
        }
        if gone != me && self.departing.len() < max {
            self.departing.push((gone, kept.0, kept.1, kept.2));
        }
        self.removed_lists.push_back((gone, list));
        debug_assert!(self.removed_lists.len() <= max.max(1));
        debug_assert!(self.departing.len() <= max);
    }

    /// Stability may not pass what a leaver still lacks: the smallest stable point and oldest
    /// ACK kept for one (`u64::MAX` when none).
    pub(super) fn departing_bounds(&self) -> (u64, u64) {
        let cap = self.departing.iter().map(|d| d.1).min().unwrap_or(u64::MAX);
        let keep = self.departing.iter().map(|d| d.2).min().unwrap_or(u64::MAX);
        (cap, keep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_move_only_forward() {
        let mut m = Membership::new(NodeId(1));
        m.enter(Phase::Member);
        m.enter(Phase::Leaving);
        m.enter(Phase::Removed { asked: true });
        m.enter(Phase::Left {
            asked: true,
            member: true,
        });
        assert!(m.phase().is_stopped() && m.phase().asked_to_leave() && m.phase().is_member());
        assert!(!Phase::Left {
            asked: true,
            member: true
        }
        .may_become(Phase::Member));
        assert!(!Phase::Joining.may_become(Phase::Leaving));
        assert!(!Phase::Expelled { asked: false }.may_become(Phase::Member));
    }
}
