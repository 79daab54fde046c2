//! What a member remembers of the delivered order so that it can take over as sequencer
//! (Amoeba paper section 5.2: the sequencer role passes on a leave, and after a reset, to a member
//! that must continue duplicate detection and keep serving members that may still lack their
//! join or leave).

use crate::engine::NodeId;
use std::collections::{HashMap, VecDeque};

/// Leaves remembered for a sequencer handover.
pub(super) const MAX_RECENT_LEAVES: usize = 64;

/// Joins, leaves and protocol numbers as delivered here.
///
/// Invariant: at most [`MAX_RECENT_LEAVES`] recent leaves and as many early farewells; a member
/// has a join sequence number only while it is in the delivered view.
#[derive(Clone, Debug, Default)]
pub(super) struct Succession {
    /// Where each member's join was ordered, as delivered here: a new sequencer can resend a
    /// joiner that missed it its join entry.
    pub(super) join_seqs: HashMap<NodeId, u64>,
    /// Recent leaves as delivered here (bounded): a new sequencer keeps serving those leavers
    /// that may still lack their leave.
    pub(super) recent_leaves: VecDeque<(NodeId, u64)>,
    /// Farewells heard before the leave they confirm was delivered here (bounded): a leaver
    /// says it has its leave once, and it may say so before the leave reaches us (the
    /// sequencer's broadcast on its way, or held behind a gap), after which we would take over
    /// and wait for it to say so again until the linger bound.
    pub(super) early_farewells: VecDeque<(NodeId, u64)>,
    /// Last protocol number delivered per sender: a new sequencer continues duplicate detection.
    pub(super) last_delivered_pnum: HashMap<NodeId, u64>,
}

impl Succession {
    /// `id` joined at `seq`: it starts its message numbers afresh.
    pub(super) fn joined(&mut self, id: NodeId, seq: u64) {
        self.last_delivered_pnum.remove(&id);
        self.join_seqs.insert(id, seq);
    }

    /// `id` left at `seq`; `ordered_it`: it was the sequencer, which holds its own leave, so
    /// that no later sequencer waits for it to have it.
    pub(super) fn left(&mut self, id: NodeId, seq: u64, ordered_it: bool) {
        self.last_delivered_pnum.remove(&id);
        self.join_seqs.remove(&id);
        if ordered_it {
            return;
        }
        if let Some(k) = self
            .early_farewells
            .iter()
            .position(|&(m, expect)| m == id && expect > seq)
        {
            // It told us already that it has this leave.
            self.early_farewells.remove(k);
            return;
        }
        if self.recent_leaves.len() >= MAX_RECENT_LEAVES {
            self.recent_leaves.pop_front();
        }
        self.recent_leaves.push_back((id, seq));
        debug_assert!(self.recent_leaves.len() <= MAX_RECENT_LEAVES);
    }

    /// `id` delivered everything below `expect`: a leave of it there is held.
    pub(super) fn has_leave(&mut self, id: NodeId, expect: u64) {
        let before = self.recent_leaves.len();
        self.recent_leaves
            .retain(|&(m, seq)| m != id || seq >= expect);
        if self.recent_leaves.len() < before {
            return;
        }
        // Its leave is not delivered here yet: remember the farewell for when it is.
        self.early_farewells.retain(|&(m, _)| m != id);
        if self.early_farewells.len() >= MAX_RECENT_LEAVES {
            self.early_farewells.pop_front();
        }
        self.early_farewells.push_back((id, expect));
        debug_assert!(self.early_farewells.len() <= MAX_RECENT_LEAVES);
    }

    /// `id` was removed by a reset.
    pub(super) fn removed(&mut self, id: NodeId) {
        self.join_seqs.remove(&id);
    }

    /// Message `pnum` of `sender` was delivered.
    pub(super) fn delivered(&mut self, sender: NodeId, pnum: u64) {
        self.last_delivered_pnum.insert(sender, pnum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A leaver's farewell that arrives before its leave is delivered here still counts: a
    /// member that takes over as sequencer then does not wait for it (it would wait out the
    /// whole linger, and its own leave with it). Seen with every member leaving at once: the
    /// leaver's farewell overtook the departing sequencer's broadcast of the leave.
    #[test]
    fn a_farewell_before_the_leave_is_remembered_for_the_leave() {
        let mut s = Succession::default();
        s.has_leave(NodeId(7), 10);
        s.left(NodeId(7), 9, false);
        assert!(s.recent_leaves.is_empty(), "{:?}", s.recent_leaves);
        assert!(s.early_farewells.is_empty());
        // A status from before the leave (expect at or below it) is no farewell for it.
        s.has_leave(NodeId(8), 12);
        s.left(NodeId(8), 12, false);
        assert_eq!(s.recent_leaves, [(NodeId(8), 12)]);
        // And the usual order: the leave first, then the farewell.
        s.has_leave(NodeId(8), 13);
        assert!(s.recent_leaves.is_empty());
        // Bounded, whatever arrives.
        for id in 0..1000 {
            s.has_leave(NodeId(id), 5);
        }
        assert!(s.early_farewells.len() <= MAX_RECENT_LEAVES);
    }
}
