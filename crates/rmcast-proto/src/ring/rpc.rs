//! The multi-RPC part (sections 3.3, 4.3 and 4.5): the group state every New List carries
//! (locks, non-members) and a non-member's requests. The protocol is `multirpc.rs`.

use crate::engine::{NodeId, Qos, Time};
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// The multi-RPC part of a ring engine.
#[derive(Clone, Default)]
pub(super) struct MultiRpc {
    /// Locks and non-members (section 4.5), kept with the ring in every New List.
    pub(super) gs: GroupState,
    /// This process is not a member but a non-member sending requests (multi-RPC).
    pub(super) client: Option<Client>,
}

/// What a ring knows of one non-member (applied with the ACKs).
#[derive(Clone, Copy, Debug)]
pub(super) struct ClientSeen {
    /// Its next sequence number to order.
    pub(super) next: u64,
    /// When it was last ordered (a counter of orderings): the least recent is flushed first.
    pub(super) last: u64,
}

/// The group state that rides in every New List besides the ring: locks and non-members.
#[derive(Clone, Default)]
pub(super) struct GroupState {
    /// Locks held, as of the last applied ACK.
    pub(super) locks: BTreeMap<u16, NodeId>,
    /// Locks held, as of the last delivered slot (what [`crate::Delivery::respond`] follows).
    pub(super) delivered_locks: BTreeMap<u16, NodeId>,
    /// Non-members, as of the last applied ACK.
    pub(super) clients: BTreeMap<NodeId, ClientSeen>,
    pub(super) client_clock: u64,
    /// Non-members whose first packet is held, not yet ordered: the sequence number it has.
    pub(super) first_seen: BTreeMap<NodeId, u64>,
    /// Per non-member, the next sequence number not yet delivered here.
    pub(super) delivered: BTreeMap<NodeId, u64>,
    /// Replies this member sent to non-members: ((origin, request), reply).
    pub(super) replies: VecDeque<((NodeId, u64), Bytes)>,
    /// Requests this member handed on: ((origin, request), to whom, the request), sent again
    /// when the origin asks again and nobody answered yet.
    pub(super) forwarded: VecDeque<((NodeId, u64), NodeId, Bytes)>,
    /// Requests handed to this member (a repeated hand-over is not shown twice).
    pub(super) forwards_in: VecDeque<(NodeId, u64)>,
    /// This member's own lock request under way (the lock timer says when to send it again).
    pub(super) lock_pending: Option<(u16, bool)>,
}

/// A lock table as a New List carries it: (lock, holder).
pub(super) type Locks = Vec<(u16, NodeId)>;
/// Non-members as a New List carries them: (sender, next sequence number), least recently
/// ordered first.
pub(super) type Clients = Vec<(NodeId, u64)>;

impl GroupState {
    /// The lock table and non-members a New List that keeps `members` carries: the locks of
    /// members not in it are freed; non-members least recently ordered first.
    pub(super) fn state_for(
        &self,
        members: &[NodeId],
        locks: &BTreeMap<u16, NodeId>,
    ) -> (Locks, Clients) {
        let locks = locks
            .iter()
            .filter(|(_, h)| members.contains(h))
            .map(|(&k, &h)| (k, h))
            .collect();
        let mut clients: Vec<(NodeId, ClientSeen)> =
            self.clients.iter().map(|(&c, &s)| (c, s)).collect();
        clients.sort_by_key(|(c, s)| (s.last, *c));
        (
            locks,
            clients.into_iter().map(|(c, s)| (c, s.next)).collect(),
        )
    }

    /// A New List was applied: its lock table and non-members are the ring's from here on.
    /// The non-members it no longer names.
    pub(super) fn apply(
        &mut self,
        locks: &[(u16, NodeId)],
        clients: &[(NodeId, u64)],
    ) -> Vec<NodeId> {
        self.locks = locks.iter().copied().collect();
        let old = std::mem::take(&mut self.clients);
        for &(c, next) in clients {
            self.client_clock += 1;
            let last = self.client_clock;
            self.clients.insert(c, ClientSeen { next, last });
        }
        old.into_keys()
            .filter(|c| !self.clients.contains_key(c))
            .collect()
    }
}

/// One request of a non-member, until acknowledged (and answered, if it names a handler).
#[derive(Clone)]
pub(super) struct Pending {
    pub(super) payload: Bytes,
    pub(super) qos: Qos,
    pub(super) handler: u8,
    pub(super) acked: bool,
    pub(super) replied: bool,
    pub(super) tries: u32,
    /// When it is sent again.
    pub(super) at: Time,
    pub(super) rto: Duration,
}

/// A process outside the ring that sends it requests (section 4.5).
#[derive(Clone, Default)]
pub(super) struct Client {
    /// Its next request number.
    pub(super) next: u64,
    /// Requests not yet acknowledged and answered.
    pub(super) pending: BTreeMap<u64, Pending>,
    /// Requests answered lately (duplicate replies are dropped).
    pub(super) done: VecDeque<u64>,
    /// Whether the ring acknowledged anything of this sender (it knows its numbering).
    pub(super) known: bool,
    /// The view id of the last acknowledgement (the cached view of section 4.5).
    pub(super) view: u64,
}

impl Client {
    /// When a request is due to be sent again.
    pub(super) fn next_timeout(&self) -> Option<Time> {
        self.pending.values().map(|p| p.at).min()
    }

    /// Requests not yet done.
    pub(super) fn pending(&self) -> usize {
        self.pending.len()
    }
}
