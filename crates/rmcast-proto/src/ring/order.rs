//! The DataList (data received but not yet ordered) and the OrderingQ (slots in timestamp
//! order, each missing, requested, received or delivered), section 4.2.

use crate::engine::{NodeId, Qos, View};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Where a slot of the OrderingQ stands.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// Ordered by an ACK, data not here.
    Missing,
    /// Missing and asked for by a NACK.
    Requested,
    /// Data here, not yet delivered.
    Received,
    /// Delivered to the application (kept until stable, to answer NACKs).
    Delivered,
}

/// What a slot holds.
#[derive(Clone, Debug)]
pub enum Entry {
    /// A data packet `(origin, sseq)`, its payload once received.
    Data {
        /// The original sender.
        origin: NodeId,
        /// Its sequence number.
        sseq: u64,
        /// The payload.
        payload: Option<Bytes>,
        /// Its quality of service (as sent; `TotallyOrdered` until the payload is here).
        qos: Qos,
        /// From a process outside the ring (multi-RPC): the payload starts with the flags and
        /// the handler number.
        client: bool,
    },
    /// A membership change (delivered as a view).
    View(View),
    /// A lock request or release (delivered as a lock change).
    Lock(super::packet::LockOp),
}

/// One slot.
#[derive(Clone, Debug)]
pub struct Slot {
    /// Its state.
    pub state: SlotState,
    /// Its content.
    pub entry: Entry,
}

/// Data packets received but not yet ordered, by `(origin, sseq)`, with their QoS.
#[derive(Default)]
pub struct DataList {
    map: BTreeMap<(NodeId, u64), (Bytes, Qos)>,
}

impl DataList {
    /// Keep a packet; false when already held.
    pub fn insert(&mut self, origin: NodeId, sseq: u64, payload: Bytes, qos: Qos) -> bool {
        match self.map.entry((origin, sseq)) {
            std::collections::btree_map::Entry::Occupied(_) => false,
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert((payload, qos));
                true
            }
        }
    }
    /// Take a packet out (it is being ordered).
    pub fn take(&mut self, origin: NodeId, sseq: u64) -> Option<(Bytes, Qos)> {
        self.map.remove(&(origin, sseq))
    }
    /// Whether a packet is held.
    pub fn has(&self, origin: NodeId, sseq: u64) -> bool {
        self.map.contains_key(&(origin, sseq))
    }
    /// Whether a packet of `origin` numbered above `sseq` is held.
    pub fn has_after(&self, origin: NodeId, sseq: u64) -> bool {
        sseq < u64::MAX
            && self
                .map
                .range((origin, sseq + 1)..=(origin, u64::MAX))
                .next()
                .is_some()
    }
    /// A held packet.
    pub fn get(&self, origin: NodeId, sseq: u64) -> Option<&(Bytes, Qos)> {
        self.map.get(&(origin, sseq))
    }
    /// Forget everything of `origin` below `sseq` (ordered already) or all of it.
    pub fn drop_below(&mut self, origin: NodeId, sseq: u64) {
        self.map.retain(|&(o, q), _| o != origin || q >= sseq);
    }
    /// Packets held.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// The OrderingQ: slots `base..end` by timestamp.
pub struct OrderingQ {
    base: u64,
    slots: VecDeque<Slot>,
    /// First slot not delivered.
    deliver_next: u64,
    /// First slot whose data is not here (every slot below is received or delivered).
    held_next: u64,
    /// Missing data slots by `(origin, sseq)`.
    missing: HashMap<(NodeId, u64), u64>,
}

impl OrderingQ {
    /// An empty queue whose next slot is `base`.
    pub fn new(base: u64) -> Self {
        OrderingQ {
            base,
            slots: VecDeque::new(),
            deliver_next: base,
            held_next: base,
            missing: HashMap::new(),
        }
    }

    /// One past the last slot.
    pub fn end(&self) -> u64 {
        self.base + self.slots.len() as u64
    }
    /// First slot not delivered.
    pub fn deliver_next(&self) -> u64 {
        self.deliver_next
    }
    /// Whether every slot is held.
    pub fn holds_all(&self) -> bool {
        self.held_next == self.end()
    }
    /// Slots kept.
    pub fn len(&self) -> usize {
        self.slots.len()
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Append the next slot.
    pub fn push(&mut self, entry: Entry) {
        let ts = self.end();
        let state = match &entry {
            Entry::Data {
                origin,
                sseq,
                payload: None,
                ..
            } => {
                self.missing.insert((*origin, *sseq), ts);
                SlotState::Missing
            }
            _ => SlotState::Received,
        };
        self.slots.push_back(Slot { state, entry });
        self.advance_held();
        self.check_invariants();
    }

    /// What holds between calls (checked in debug builds): slots are delivered in timestamp
    /// order, never past one that is not held (`base <= deliver_next <= held_next <= end`),
    /// every slot below `deliver_next` still kept is delivered and none at or above it is, and
    /// each missing entry names a kept slot at or above `deliver_next`.
    fn check_invariants(&self) {
        debug_assert!(self.base <= self.deliver_next);
        debug_assert!(self.deliver_next <= self.held_next);
        debug_assert!(self.held_next <= self.end());
        debug_assert!(self.missing.len() <= self.slots.len());
        debug_assert!(self
            .deliver_next
            .checked_sub(1)
            .and_then(|ts| self.get(ts))
            .is_none_or(|s| s.state == SlotState::Delivered));
        debug_assert!(self
            .get(self.deliver_next)
            .is_none_or(|s| s.state != SlotState::Delivered));
    }

    fn advance_held(&mut self) {
        while let Some(s) = self.get(self.held_next) {
            if matches!(s.state, SlotState::Missing | SlotState::Requested) {
                break;
            }
            self.held_next += 1;
        }
    }

    /// A slot.
    pub fn get(&self, ts: u64) -> Option<&Slot> {
        ts.checked_sub(self.base)
            .and_then(|i| self.slots.get(i as usize))
    }

    /// Data for a missing slot arrived: its timestamp, or `None` when no slot waited for it.
    pub fn fill(&mut self, origin: NodeId, sseq: u64, data: Bytes, level: Qos) -> Option<u64> {
        let ts = self.missing.remove(&(origin, sseq))?;
        if let Some(s) = ts
            .checked_sub(self.base)
            .and_then(|i| self.slots.get_mut(i as usize))
        {
            if let Entry::Data { payload, qos, .. } = &mut s.entry {
                *payload = Some(data);
                *qos = level;
                s.state = SlotState::Received;
            }
        }
        self.advance_held();
        self.check_invariants();
        Some(ts)
    }

    /// Slots whose data is missing, at most `max`, marked requested.
    pub fn request_missing(&mut self, max: usize) -> Vec<u64> {
        let mut out = Vec::new();
        let mut ts = self.held_next;
        while out.len() < max {
            let Some(i) = ts.checked_sub(self.base) else {
                break;
            };
            let Some(s) = self.slots.get_mut(i as usize) else {
                break;
            };
            if matches!(s.state, SlotState::Missing | SlotState::Requested) {
                s.state = SlotState::Requested;
                out.push(ts);
            }
            ts += 1;
        }
        out
    }

    /// The next slot to deliver, if its data is here; the caller delivers it and calls
    /// [`OrderingQ::delivered`].
    pub fn deliverable(&self) -> Option<(u64, &Entry)> {
        let s = self.get(self.deliver_next)?;
        (s.state == SlotState::Received).then_some((self.deliver_next, &s.entry))
    }

    /// The slot at `deliver_next` was delivered.
    pub fn delivered(&mut self) {
        if let Some(i) = self.deliver_next.checked_sub(self.base) {
            if let Some(s) = self.slots.get_mut(i as usize) {
                // Only a held slot is delivered, and only once.
                debug_assert_eq!(s.state, SlotState::Received);
                s.state = SlotState::Delivered;
                self.deliver_next += 1;
            }
        }
        self.check_invariants();
    }

    /// Forget delivered slots below `ts` (stable: everyone holds them).
    pub fn prune(&mut self, ts: u64) {
        while self.base < ts.min(self.deliver_next) {
            self.slots.pop_front();
            self.base += 1;
        }
        self.check_invariants();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_go_missing_requested_received_delivered() {
        let mut q = OrderingQ::new(10);
        let d = |s, p: Option<&'static [u8]>| Entry::Data {
            origin: NodeId(1),
            sseq: s,
            payload: p.map(Bytes::from_static),
            qos: Qos::TotallyOrdered,
            client: false,
        };
        q.push(d(0, Some(b"a")));
        q.push(d(1, None));
        q.push(d(2, Some(b"c")));
        assert!(!q.holds_all());
        assert_eq!(q.request_missing(8), vec![11]);
        assert_eq!(q.get(11).unwrap().state, SlotState::Requested);
        assert_eq!(q.deliverable().map(|(t, _)| t), Some(10));
        q.delivered();
        assert!(q.deliverable().is_none());
        let b = || Bytes::from_static(b"b");
        assert_eq!(q.fill(NodeId(1), 1, b(), Qos::Reliable), Some(11));
        assert_eq!(q.fill(NodeId(1), 1, b(), Qos::Reliable), None);
        assert!(q.holds_all());
        q.delivered();
        q.prune(100);
        assert_eq!(q.len(), 1);
        assert_eq!(q.end(), 13);
    }
}
