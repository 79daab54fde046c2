//! A member's history (Amoeba paper section 5.2, Fig. 11): the history buffer of sequenced
//! messages, the points that divide it, and BB data that arrived before its accept.
//!
//! The buffer holds the window `[base, base + capacity)`. Below `next_deliver` (Amoeba's
//! `g_nextseqno`) messages are delivered and kept until every member has them (purged at
//! `stable`); below `held_next` every message is held with its payload; below `accepted_next`
//! messages may be delivered (with resilience `r`, once `r + 1` members hold them); up to
//! `seq_next_known` the sequencer is known to have assigned numbers, so `[held_next,
//! seq_next_known)` is a gap to repair.

use super::packet::{EntryKind, SeqRanges, SeqState};
use crate::common::{GapTracker, HistoryBuffer, Reassembly};
use crate::engine::NodeId;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// An entry of the history buffer.
#[derive(Clone, Debug)]
pub(super) struct Entry {
    pub(super) kind: EntryKind,
    pub(super) sender: NodeId,
    pub(super) pnum: u64,
    pub(super) frag_index: u16,
    pub(super) frag_count: u16,
    /// `None` while only the BB accept is known and the data has not arrived.
    pub(super) payload: Option<Bytes>,
    /// Arrived by the BB method: the first broadcast of it carries no payload.
    pub(super) bb: bool,
}

impl Entry {
    /// A join or leave of `sender`: one unfragmented entry whose payload is the new view.
    pub(super) fn membership(kind: EntryKind, sender: NodeId, view: Bytes) -> Entry {
        Entry {
            kind,
            sender,
            pnum: 0,
            frag_index: 0,
            frag_count: 1,
            payload: Some(view),
            bb: false,
        }
    }
}

/// BB data and accepts that arrived in the wrong order (the third part of the history).
///
/// Invariant: `order` lists every key of `pending`, oldest first (and may still list keys
/// taken since, until the next compaction); `pending` holds at most the history capacity.
#[derive(Clone, Debug, Default)]
pub(super) struct BbStash {
    /// BB data that arrived before its accept: (sender, pnum) -> payload.
    pub(super) pending: BTreeMap<(NodeId, u64), Bytes>,
    pub(super) order: VecDeque<(NodeId, u64)>,
    /// Accepts seen before their BB data: (sender, pnum) -> seq.
    pub(super) missing: HashMap<(NodeId, u64), u64>,
}

impl BbStash {
    /// Keep `payload` until its accept arrives; beyond `capacity` the oldest goes (if it is
    /// still needed, a NACK fetches it).
    fn stash(&mut self, key: (NodeId, u64), payload: Bytes, capacity: usize) {
        if self.pending.contains_key(&key) {
            return;
        }
        if self.order.len() >= capacity {
            // Only data still waiting counts against the bound. Counting the keys already
            // taken evicted data that was still needed whenever its accept came later than
            // `capacity` other BB fragments (a request the sequencer had to ask for again),
            // and then every member fetched it from the sequencer, one unicast each (the
            // Amoeba experiment's BB runs with 24 and 30 members).
            let pending = &self.pending;
            self.order.retain(|k| pending.contains_key(k));
        }
        if self.order.len() >= capacity {
            if let Some(old) = self.order.pop_front() {
                self.pending.remove(&old);
            }
        }
        self.pending.insert(key, payload);
        self.order.push_back(key);
        debug_assert!(self.pending.len() <= capacity.max(1));
    }

    /// The ordered entry `(sender, pnum)` arrived: its stashed data, if any, leaves the stash,
    /// and so does the sender's older data, which can no longer be ordered (a sender's stream
    /// is ordered in protocol-number order; an older entry this member lacks comes with its
    /// payload in a retransmission).
    pub(super) fn take(&mut self, sender: NodeId, pnum: u64) -> Option<Bytes> {
        let stale: Vec<(NodeId, u64)> = (self.pending.range((sender, 0)..(sender, pnum)))
            .map(|(k, _)| *k)
            .collect();
        for k in stale {
            self.pending.remove(&k);
        }
        self.pending.remove(&(sender, pnum))
    }
}

/// The member side of the protocol: what is held, delivered, accepted, stable.
///
/// Invariants: `buffer.base() <= next_deliver <= held_next` once `advance_held` ran; every
/// sequence number in `[next_deliver, held_next)` is in the buffer with its payload.
#[derive(Clone, Debug)]
pub(super) struct History {
    pub(super) buffer: HistoryBuffer<Entry>,
    /// Next sequence number to deliver (g_nextseqno).
    pub(super) next_deliver: u64,
    /// Every sequence number below this is held with its payload.
    pub(super) held_next: u64,
    /// Sequence numbers below this may be delivered.
    pub(super) accepted_next: u64,
    /// Every member delivered below this: purged here.
    pub(super) stable: u64,
    /// Enough members hold everything below this for a send to complete
    /// ([`super::packet::SeqState::complete_next`]).
    pub(super) complete_next: u64,
    /// Highest `next_seq` heard from the sequencer: anything between `held_next` and it is a gap.
    pub(super) seq_next_known: u64,
    pub(super) bb: BbStash,
    /// Fragments of a message being reassembled, per sender (fragments of one sender arrive in
    /// order, so one buffer per sender suffices).
    pub(super) reassembly: Reassembly<NodeId>,
    /// The gap below `seq_next_known` and its NACK timer.
    pub(super) gaps: GapTracker,
    /// A status report (BC_STATE) is owed to the sequencer.
    pub(super) need_status: bool,
    pub(super) delivered_since_report: u64,
    /// Payload bytes held in `buffer`: the sequencer's flow control in bytes
    /// ([`super::Config::history_capacity_bytes`]) beside the one in slots. Every change to
    /// the buffer goes through the methods below, which keep it.
    pub(super) payload_bytes: usize,
}

impl History {
    pub(super) fn new(capacity: usize, reassembly: Reassembly<NodeId>) -> History {
        History {
            buffer: HistoryBuffer::new(capacity, 0),
            next_deliver: 0,
            held_next: 0,
            accepted_next: 0,
            stable: 0,
            complete_next: 0,
            seq_next_known: 0,
            bb: BbStash::default(),
            reassembly,
            gaps: GapTracker::new(),
            need_status: false,
            delivered_since_report: 0,
            payload_bytes: 0,
        }
    }

    fn entry_bytes(e: &Entry) -> usize {
        e.payload.as_ref().map_or(0, Bytes::len)
    }

    /// Payload bytes of the entries in `[from, to)`.
    fn bytes_in(&self, from: u64, to: u64) -> usize {
        (from.max(self.buffer.base())..to.min(self.buffer.limit()))
            .filter_map(|s| self.buffer.get(s))
            .map(Self::entry_bytes)
            .sum()
    }

    /// Insert `entry` at `seq` (see [`HistoryBuffer::insert`]).
    pub(super) fn insert(
        &mut self,
        seq: u64,
        entry: Entry,
    ) -> Result<bool, crate::common::OutOfWindow> {
        let bytes = Self::entry_bytes(&entry);
        let inserted = self.buffer.insert(seq, entry);
        if inserted == Ok(true) {
            self.payload_bytes += bytes;
        }
        inserted
    }

    /// Whether `seq` and the slot after it fit in the history window (a reset that ends the
    /// order must still fit after it).
    pub(super) fn has_slot(&self, seq: u64) -> bool {
        self.buffer.in_window(seq + 1)
    }

    /// Check the invariants (of a member: a joiner has no history yet).
    pub(super) fn check_invariants(&self) {
        debug_assert!(self.buffer.base() <= self.next_deliver);
        debug_assert!(self.next_deliver <= self.held_next);
        debug_assert!(
            self.next_deliver == self.held_next
                || self
                    .buffer
                    .get(self.next_deliver)
                    .is_some_and(|e| e.payload.is_some()),
            "the next message to deliver is held"
        );
    }

    /// A joiner's history starts at its join entry `s`: below it, it knows nothing (`stable`
    /// stays as learned).
    pub(super) fn start_at(&mut self, s: u64) {
        self.buffer = HistoryBuffer::new(self.buffer.capacity(), s);
        self.payload_bytes = 0;
        self.next_deliver = s;
        self.held_next = s;
        self.accepted_next = s;
        self.complete_next = s;
        self.seq_next_known = s;
    }

    /// Take the sequencer's acceptance, stability and sequence numbers.
    pub(super) fn learn(&mut self, s: SeqState) {
        self.accepted_next = self.accepted_next.max(s.accepted_next);
        self.seq_next_known = self.seq_next_known.max(s.next_seq);
        self.stable = self.stable.max(s.stable);
        self.complete_next = self.complete_next.max(s.complete_next);
    }

    /// Store an ordered entry at `seq` (its payload, if known). Returns false for a duplicate.
    pub(super) fn store(&mut self, seq: u64, entry: Entry) -> bool {
        let key = (entry.sender, entry.pnum);
        if let Some(existing) = self.buffer.get_mut(seq) {
            if existing.payload.is_none() && entry.payload.is_some() {
                self.payload_bytes += Self::entry_bytes(&entry);
                existing.payload = entry.payload;
                self.bb.missing.remove(&key);
                return true;
            }
            return false;
        }
        if entry.payload.is_none() {
            self.bb.missing.insert(key, seq);
        }
        // The sequencer never assigns beyond every member's window, so this only fails for
        // a stray datagram; what it carried is fetched again through a NACK.
        let _ = self.insert(seq, entry);
        self.seq_next_known = self.seq_next_known.max(seq + 1);
        true
    }

    /// BB data from `from`: fill the entry whose accept came first, or stash it.
    pub(super) fn on_bb_data(&mut self, from: NodeId, pnum: u64, payload: Bytes) {
        let key = (from, pnum);
        if let Some(seq) = self.bb.missing.remove(&key) {
            if let Some(entry) = self.buffer.get_mut(seq) {
                if entry.payload.is_none() {
                    self.payload_bytes += payload.len();
                    entry.payload = Some(payload);
                }
            }
            return;
        }
        let capacity = self.buffer.capacity();
        self.bb.stash(key, payload, capacity);
    }

    /// Move `held_next` past every entry held with its payload.
    pub(super) fn advance_held(&mut self) {
        while self
            .buffer
            .get(self.held_next)
            .is_some_and(|e| e.payload.is_some())
        {
            self.held_next += 1;
        }
        if self.held_next < self.next_deliver {
            self.held_next = self.next_deliver;
        }
        debug_assert!(self.buffer.base() <= self.next_deliver);
    }

    /// What is missing below `limit`: every number from `held_next` on that this member's
    /// window holds no payload for, as ranges (the body of a NACK). More holes than a NACK
    /// names are asked for with the numbers between the closest ones (see
    /// [`SeqRanges::insert`]).
    pub(super) fn missing(&self, limit: u64) -> SeqRanges {
        let mut out = SeqRanges::new();
        let end = limit.min(self.buffer.limit());
        let mut hole: Option<u64> = None;
        for s in self.held_next..end {
            let held = self.buffer.get(s).is_some_and(|e| e.payload.is_some());
            match (held, hole) {
                (false, None) => hole = Some(s),
                (true, Some(h)) => {
                    out.insert(h, s);
                    hole = None;
                }
                _ => {}
            }
        }
        if let Some(h) = hole {
            out.insert(h, end);
        }
        out
    }

    /// Purge what every member delivered.
    pub(super) fn purge(&mut self) {
        let upto = self.stable.min(self.next_deliver);
        if upto > self.buffer.base() {
            self.payload_bytes -= self.bytes_in(self.buffer.base(), upto);
            self.buffer.advance(upto);
            debug_assert!(!self.buffer.is_empty() || self.payload_bytes == 0);
            self.bb.missing.retain(|_, seq| *seq >= upto);
        }
        debug_assert!(self.buffer.base() <= self.next_deliver);
    }

    /// Drop everything at or beyond `t` (a reset ends the old order there).
    pub(super) fn truncate(&mut self, t: u64) {
        self.payload_bytes -= self.bytes_in(t, u64::MAX);
        self.buffer.truncate(t);
        self.bb.missing.retain(|_, s| *s < t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Data whose accept came is no longer counted against the stash's bound: data still
    /// waiting survives any number of others stashed and taken after it; a sender's older data
    /// leaves with a newer entry of its stream.
    #[test]
    fn stash_bounds_only_data_still_waiting() {
        let (a, b) = (NodeId(1), NodeId(2));
        let data = Bytes::from_static(b"x");
        let mut s = BbStash::default();
        s.stash((a, 1), data.clone(), 4);
        for p in 1..=20 {
            s.stash((b, p), data.clone(), 4);
            assert_eq!(s.take(b, p), Some(data.clone()));
        }
        assert_eq!(s.take(a, 1), Some(data.clone()));
        // Full of data still waiting: the oldest goes.
        for p in 1..=5 {
            s.stash((b, p), data.clone(), 4);
        }
        assert_eq!(s.pending.len(), 4);
        assert!(!s.pending.contains_key(&(b, 1)));
        // (b, 5) ordered: (b, 2..5) can no longer be.
        assert_eq!(s.take(b, 5), Some(data));
        assert!(s.pending.is_empty());
    }
}
