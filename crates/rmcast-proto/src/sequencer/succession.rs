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
/// Invariant: at most [`MAX_RECENT_LEAVES`] recent leaves; a member has a join sequence number
/// only while it is in the delivered view.
#[derive(Clone, Debug, Default)]
pub(super) struct Succession {
    /// Where each member's join was ordered, as delivered here: a new sequencer can resend a
    /// joiner that missed it its join entry.
    pub(super) join_seqs: HashMap<NodeId, u64>,
    /// Recent leaves as delivered here (bounded): a new sequencer keeps serving those leavers
    /// that may still lack their leave.
    pub(super) recent_leaves: VecDeque<(NodeId, u64)>,
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
        if self.recent_leaves.len() >= MAX_RECENT_LEAVES {
            self.recent_leaves.pop_front();
        }
        self.recent_leaves.push_back((id, seq));
        debug_assert!(self.recent_leaves.len() <= MAX_RECENT_LEAVES);
    }

    /// `id` delivered everything below `expect`: a leave of it there is held.
    pub(super) fn has_leave(&mut self, id: NodeId, expect: u64) {
        self.recent_leaves
            .retain(|&(m, seq)| m != id || seq >= expect);
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
