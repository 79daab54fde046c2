//! The DataList (data received but not yet ordered) and the OrderingQ (slots in timestamp
//! order, each missing, requested, received or delivered), section 4.2.

use super::packet::{Frag, SyncPoint};
use crate::common::{GapTracker, ReplayWindow};
use crate::engine::{NodeId, Qos, View};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

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
    /// Its data is held by no member of the ring a reformation formed, which skips it: passed
    /// over at delivery, never filled.
    Lost,
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
        /// Its place in a message larger than a datagram (known once the payload is here).
        frag: Option<Frag>,
        /// From a process outside the ring (multi-RPC): the payload starts with the flags and
        /// the handler number.
        client: bool,
    },
    /// A membership change (delivered as a view), and every member it admitted (the view
    /// names one).
    View(View, Vec<NodeId>),
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

/// A held data packet: its payload, QoS, and place in its message when it is a fragment.
pub type Held = (Bytes, Qos, Option<Frag>);

/// Data packets received but not yet ordered, by `(origin, sseq)`, with their QoS.
///
/// Kept per origin in sequence-number order (`slots[i]` is packet `base + i`), since each
/// origin's packets arrive and are ordered nearly in sequence: a lookup per packet is an index,
/// not a tree walk (a `BTreeMap` keyed by `(origin, sseq)` was a tenth of a receiver's time).
#[derive(Clone, Default)]
pub struct DataList {
    streams: BTreeMap<NodeId, Stream>,
    len: usize,
}

/// One origin's held packets.
#[derive(Clone, Default)]
struct Stream {
    base: u64,
    slots: VecDeque<Option<Held>>,
}

impl Stream {
    /// Empty slots at either end go: the first and the last slot kept hold a packet.
    fn trim(&mut self) {
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.base += 1;
        }
        while let Some(None) = self.slots.back() {
            self.slots.pop_back();
        }
    }

    fn get(&self, sseq: u64) -> Option<&Held> {
        let i = sseq.checked_sub(self.base)?;
        self.slots.get(usize::try_from(i).ok()?)?.as_ref()
    }
}

impl DataList {
    /// The widest span of sequence numbers held for one origin (the send windows are far
    /// narrower, [`super::Config::validate`]): packets further behind the newest one are
    /// dropped, so that one never taken (a New List moved its origin's numbering past it)
    /// does not keep the span growing with the traffic.
    pub const MAX_SPAN: u64 = 1 << 16;

    /// Keep a packet; false when already held.
    pub fn insert(&mut self, origin: NodeId, sseq: u64, held: Held) -> bool {
        let st = self.streams.entry(origin).or_default();
        if st.slots.is_empty() {
            st.base = sseq;
        }
        if sseq < st.base {
            if st.base - sseq >= Self::MAX_SPAN {
                return false; // far behind what is held: never ordered
            }
            for _ in sseq..st.base {
                st.slots.push_front(None);
            }
            st.base = sseq;
        }
        // Too wide: the oldest go (see `MAX_SPAN`).
        while sseq - st.base >= Self::MAX_SPAN {
            if let Some(Some(_)) = st.slots.pop_front() {
                self.len -= 1;
            }
            st.base += 1;
            st.trim();
            if st.slots.is_empty() {
                st.base = sseq;
            }
        }
        let i = (sseq - st.base) as usize;
        if i >= st.slots.len() {
            // The common case: the next in sequence.
            st.slots.resize_with(i, || None);
            st.slots.push_back(Some(held));
            self.len += 1;
            return true;
        }
        if st.slots[i].is_some() {
            return false;
        }
        st.slots[i] = Some(held);
        self.len += 1;
        true
    }
    /// Take a packet out (it is being ordered).
    pub fn take(&mut self, origin: NodeId, sseq: u64) -> Option<Held> {
        let st = self.streams.get_mut(&origin)?;
        let i = usize::try_from(sseq.checked_sub(st.base)?).ok()?;
        let held = st.slots.get_mut(i)?.take()?;
        self.len -= 1;
        // An emptied stream stays, with its buffer: the origin sends again soon.
        st.trim();
        Some(held)
    }
    /// Whether a packet is held.
    pub fn has(&self, origin: NodeId, sseq: u64) -> bool {
        self.get(origin, sseq).is_some()
    }
    /// Whether a packet of `origin` numbered above `sseq` is held.
    pub fn has_after(&self, origin: NodeId, sseq: u64) -> bool {
        // The last slot is held (`Stream::trim`): the newest packet is `base + len - 1`.
        self.streams
            .get(&origin)
            .is_some_and(|st| !st.slots.is_empty() && st.base + (st.slots.len() as u64 - 1) > sseq)
    }
    /// A held packet.
    pub fn get(&self, origin: NodeId, sseq: u64) -> Option<&Held> {
        self.streams.get(&origin)?.get(sseq)
    }
    /// Forget everything of `origin` below `sseq` (ordered already) or all of it.
    pub fn drop_below(&mut self, origin: NodeId, sseq: u64) {
        let Some(st) = self.streams.get_mut(&origin) else {
            return;
        };
        while st.base < sseq {
            let Some(slot) = st.slots.pop_front() else {
                break;
            };
            if slot.is_some() {
                self.len -= 1;
            }
            st.base += 1;
        }
        st.trim();
        if sseq == u64::MAX {
            // The origin is gone (see the callers): so is its buffer.
            self.streams.remove(&origin);
        }
    }
    /// Packets held.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The OrderingQ: slots `base..end` by timestamp.
#[derive(Clone)]
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
    /// First slot whose data is not here.
    pub fn held_next(&self) -> u64 {
        self.held_next
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

    /// Whether a slot waits for packet `sseq` of `origin` (ordered, data not here).
    pub fn waits_for(&self, origin: NodeId, sseq: u64) -> bool {
        // The common case, data ahead of its ACK: no hashing.
        !self.missing.is_empty() && self.missing.contains_key(&(origin, sseq))
    }

    /// Data for a missing slot arrived: its timestamp, or `None` when no slot waited for it.
    pub fn fill(&mut self, origin: NodeId, sseq: u64, held: Held) -> Option<u64> {
        let (data, level, place) = held;
        let ts = self.missing.remove(&(origin, sseq))?;
        // A missing slot is at or above the first one not held (never delivered or pruned).
        debug_assert!(ts >= self.held_next && ts < self.end());
        if let Some(s) = ts
            .checked_sub(self.base)
            .and_then(|i| self.slots.get_mut(i as usize))
        {
            if let Entry::Data {
                payload, qos, frag, ..
            } = &mut s.entry
            {
                *payload = Some(data);
                *qos = level;
                *frag = place;
                s.state = SlotState::Received;
            }
        }
        self.advance_held();
        self.check_invariants();
        Some(ts)
    }

    /// The slots whose data is missing, by timestamp: all of them, or the first `max` and one
    /// more when there are more.
    pub fn missing_slots(&self, max: usize) -> Vec<u64> {
        let mut ts: Vec<u64> = self.missing.values().copied().collect();
        ts.sort_unstable();
        ts.truncate(max + 1);
        ts
    }

    /// Slot `ts` is skipped (a reformation found its data held by none of its members): it
    /// counts as held, is passed over at delivery and never filled. (Data that came after the
    /// vote is passed over too: every member of the new ring skips the slot.)
    pub fn skip_lost(&mut self, ts: u64) {
        let Some(s) = ts
            .checked_sub(self.base)
            .and_then(|i| self.slots.get_mut(i as usize))
        else {
            return;
        };
        if let Entry::Data { origin, sseq, .. } = &s.entry {
            // Nothing lost is delivered: the member bound to the list held it back.
            debug_assert_ne!(s.state, SlotState::Delivered, "a lost slot was delivered");
            if s.state != SlotState::Delivered {
                self.missing.remove(&(*origin, *sseq));
                s.state = SlotState::Lost;
            }
        }
        self.advance_held();
        self.check_invariants();
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
        debug_assert!(out.len() <= max && out.iter().all(|&t| t >= self.held_next));
        out
    }

    /// The next slot to deliver, if its data is here; the caller delivers it and calls
    /// [`OrderingQ::delivered`].
    pub fn deliverable(&self) -> Option<(u64, &Entry)> {
        let s = self.get(self.deliver_next)?;
        (s.state == SlotState::Received).then_some((self.deliver_next, &s.entry))
    }

    /// Passes over the slot at `deliver_next` if it is lost (see [`OrderingQ::skip_lost`]):
    /// whether it was.
    pub fn pass_lost(&mut self) -> bool {
        let Some(i) = self.deliver_next.checked_sub(self.base) else {
            return false;
        };
        match self.slots.get_mut(i as usize) {
            Some(s) if s.state == SlotState::Lost => {
                s.state = SlotState::Delivered;
                self.deliver_next += 1;
                self.check_invariants();
                true
            }
            _ => false,
        }
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

/// An applied ACK kept until it is stable, to answer NACKs.
#[derive(Clone)]
pub(super) struct Logged {
    pub(super) bytes: Vec<u8>,
    pub(super) sender: NodeId,
    pub(super) first_ts: u64,
    pub(super) end_ts: u64,
}

/// Where one origin's packets stand for source order: every sequence number below `next` was
/// delivered, and so were those in `above`.
#[derive(Clone, Default)]
pub(super) struct SourceCursor {
    pub(super) next: u64,
    above: BTreeSet<u64>,
}

impl SourceCursor {
    /// Source order of an origin goes on from `next`.
    pub(super) fn from(next: u64) -> SourceCursor {
        SourceCursor {
            next,
            above: BTreeSet::new(),
        }
    }

    fn mark(&mut self, sseq: u64) {
        if sseq == self.next {
            self.next += 1;
            while self.above.remove(&self.next) {
                self.next += 1;
            }
        } else if sseq > self.next {
            self.above.insert(sseq);
        }
        debug_assert!(self.above.iter().all(|&s| s > self.next));
    }
}

/// The ordering part (section 4.2): the ACKs applied and kept, the OrderingQ and the DataList,
/// stability, what was delivered ahead of the total order, and the NACKs asking for what is
/// missing.
#[derive(Clone)]
pub(super) struct Ordering {
    /// Next sequence number to be ordered, per ring member.
    pub(super) ordered_next: BTreeMap<NodeId, u64>,
    pub(super) data: DataList,
    pub(super) q: OrderingQ,
    /// The next ACK to apply.
    pub(super) next_ack: u64,
    /// ACKs received ahead of `next_ack` (by number: sender, datagram).
    pub(super) early_acks: BTreeMap<u64, (NodeId, Vec<u8>)>,
    /// Applied ACKs not yet stable.
    pub(super) log: BTreeMap<u64, Logged>,
    /// The latest ACK in `log` of each member of `latest_ring` (`None`: none yet), kept as ACKs
    /// are logged and rebuilt when the ring changes, so that stability does not walk the log
    /// over the whole ring at every ACK (see [`Ordering::update_stable`]).
    latest_of: HashMap<NodeId, Option<u64>>,
    /// The same ACKs by number: the first is the oldest of the members' latest ACKs.
    latest: BTreeSet<(u64, NodeId)>,
    /// The ring `latest_of` and `latest` are for.
    latest_ring: Vec<NodeId>,
    pub(super) highest_heard: Option<u64>,
    /// The token's chain: the sender of the last ACK applied and the next site it named (the
    /// reformation's initiator, twice, once it committed; unknown to a joiner before its
    /// admission). Only they may send the next ACK: the named site, or the one that named it
    /// taking the token back (the next site never took it).
    pub(super) chain: Option<(NodeId, NodeId)>,
    /// The last token site heard of.
    pub(super) last_site: NodeId,
    /// Every slot below is stable (held by every member).
    pub(super) stable_ts: u64,
    /// Messages delivered ahead of their slot (reliable and source-ordered levels, delivered
    /// when received, Fig. 3.2): their slot is passed over without a second delivery.
    pub(super) early: HashSet<(NodeId, u64)>,
    /// Source order per origin: what was delivered.
    pub(super) sources: BTreeMap<NodeId, SourceCursor>,
    /// Source-ordered packets held, waiting for an earlier packet of their origin.
    pub(super) pending_src: BTreeMap<(NodeId, u64), (Bytes, Option<Frag>)>,
    /// Unreliable messages seen per member (duplicates are dropped: best effort).
    pub(super) unreliable_seen: BTreeMap<NodeId, ReplayWindow>,
    /// Unreliable messages dropped because the application's queue was full.
    pub(super) unreliable_dropped: u64,
    /// Delivery stopped at a slot that is not yet resilient enough for its level: the token
    /// must move on for it, so the backlog does not stop this member from accepting it.
    pub(super) resilience_wait: bool,
    pub(super) gaps: GapTracker,
    pub(super) nack_tries: u32,
    /// One past the last slot the latest NACK named, until every slot below it is held.
    pub(super) asked_through: Option<u64>,
    /// While this member waits for something (own messages to become stable, its leave), it
    /// asks for ACKs after the last it applied when none came for a while: trailing ACKs
    /// lost before the ring went quiescent are otherwise never noticed.
    pub(super) stall_mark: u64,
    pub(super) stall_tries: u32,
}

impl Ordering {
    /// Nothing ordered yet; `me` is the last token site known.
    pub(super) fn new(me: NodeId) -> Ordering {
        Ordering {
            ordered_next: BTreeMap::new(),
            data: DataList::default(),
            q: OrderingQ::new(0),
            next_ack: 0,
            early_acks: BTreeMap::new(),
            log: BTreeMap::new(),
            latest_of: HashMap::new(),
            latest: BTreeSet::new(),
            latest_ring: Vec::new(),
            highest_heard: None,
            chain: None,
            last_site: me,
            stable_ts: 0,
            early: HashSet::new(),
            sources: BTreeMap::new(),
            pending_src: BTreeMap::new(),
            unreliable_seen: BTreeMap::new(),
            unreliable_dropped: 0,
            resilience_wait: false,
            gaps: GapTracker::new(),
            nack_tries: 0,
            asked_through: None,
            stall_mark: 0,
            stall_tries: 0,
        }
    }

    /// Starts at the New List that admits this member: ACK `num`, slot `first_ts`.
    pub(super) fn start_at(&mut self, num: u64, first_ts: u64) {
        self.next_ack = num;
        self.q = OrderingQ::new(first_ts);
        self.stable_ts = first_ts;
        self.early_acks.clear();
        self.chain = None;
    }

    /// Whether `from` may send the next ACK: it is in the token's chain (see
    /// [`Ordering::chain`]), or the chain is not known yet.
    pub(super) fn site_may_send(&self, from: NodeId) -> bool {
        self.chain
            .is_none_or(|(sender, next)| from == sender || from == next)
    }

    /// Keeps ACK `num` applied, from `sender`, ordering `first_ts..` up to the queue's end.
    pub(super) fn log_applied(&mut self, num: u64, sender: NodeId, first_ts: u64, bytes: Vec<u8>) {
        debug_assert_eq!(num, self.next_ack, "ACKs are applied in order");
        debug_assert!(first_ts <= self.q.end());
        self.log.insert(
            num,
            Logged {
                bytes,
                sender,
                first_ts,
                end_ts: self.q.end(),
            },
        );
        if let Some(last) = self.latest_of.get_mut(&sender) {
            if let Some(old) = last.replace(num) {
                self.latest.remove(&(old, sender));
            }
            self.latest.insert((num, sender));
        }
        self.next_ack = num + 1;
    }

    /// `latest_of` and `latest` for `ring`, from the log.
    fn rebuild_latest(&mut self, ring: &[NodeId]) {
        self.latest_ring = ring.to_vec();
        self.latest_of = ring.iter().map(|&m| (m, None)).collect();
        for (&n, e) in &self.log {
            if let Some(last) = self.latest_of.get_mut(&e.sender) {
                *last = Some(n);
            }
        }
        self.latest = (self.latest_of.iter())
            .filter_map(|(&m, n)| n.map(|n| (n, m)))
            .collect();
    }

    /// The ACK before which everything is held by every member of `ring`: the oldest of their
    /// latest ACKs (each of them accepted the token, so held it all), if each sent one.
    fn stability_cut(&mut self, ring: &[NodeId]) -> Option<u64> {
        if self.latest_ring != ring {
            self.rebuild_latest(ring);
        }
        let cut = if ring.is_empty() {
            self.log.keys().next_back().copied()
        } else if self.latest.len() == self.latest_of.len() {
            self.latest.first().map(|&(n, _)| n)
        } else {
            None
        };
        debug_assert_eq!(
            cut,
            self.stability_cut_by_walk(ring),
            "the kept cut is the walked one"
        );
        cut
    }

    /// [`Ordering::stability_cut`] the long way, walking the log back until an ACK of every
    /// member of `ring` was seen: what the kept one is checked against in debug builds.
    fn stability_cut_by_walk(&self, ring: &[NodeId]) -> Option<u64> {
        let mut need: BTreeSet<NodeId> = ring.iter().copied().collect();
        for (&n, e) in self.log.iter().rev() {
            need.remove(&e.sender);
            if need.is_empty() {
                return Some(n);
            }
        }
        None
    }

    /// Stable: everything up to the ACK before the oldest of the latest ACKs whose senders
    /// cover `ring` (each of them accepted the token, so held it all), but not past what a
    /// leaver still lacks (`cap`), keeping ACKs from `keep` on. The ACKs and slots below are
    /// forgotten.
    pub(super) fn update_stable(&mut self, ring: &[NodeId], (cap, keep): (u64, u64)) {
        let before = self.stable_ts;
        if let Some(n) = self.stability_cut(ring) {
            let ts = self.log[&n].first_ts;
            let stable = self.stable_ts.max(ts.min(cap));
            self.stable_ts = stable;
            // Forget the ACKs below the cut (and below `keep`) whose slots are all stable; only
            // those below the cut are looked at, not the whole log. None is a member's latest.
            let gone: Vec<u64> = (self.log.range(..n.min(keep)))
                .filter(|(_, e)| e.end_ts <= stable)
                .map(|(&k, _)| k)
                .collect();
            for k in gone {
                self.log.remove(&k);
            }
        }
        self.q.prune(self.stable_ts);
        debug_assert!(self.stable_ts >= before, "stability never goes back");
        self.check_invariants();
    }

    /// What holds between calls (checked in debug builds): nothing is stable that is not
    /// ordered, and the ACKs kept were applied (all below the next to apply).
    pub(super) fn check_invariants(&self) {
        debug_assert!(self.stable_ts <= self.q.end(), "stable beyond the order");
        debug_assert!(self
            .log
            .keys()
            .next_back()
            .is_none_or(|&k| k < self.next_ack));
    }

    /// `origin`'s packet `sseq` was delivered: source order goes on from it (for ring
    /// members; the packets of a member gone are delivered in their slots only).
    pub(super) fn mark_source(&mut self, origin: NodeId, sseq: u64) {
        if self.ordered_next.contains_key(&origin) {
            self.sources.entry(origin).or_default().mark(sseq);
        }
    }

    /// Whether slot `ts` is held by enough members of `ring` for `qos` (Fig. 3.2): its data
    /// *and its place*, which only the members that sent an ACK after it are known to hold
    /// (see [`Ordering::holders_beyond`]). The origin's copy of its packet does not count
    /// unless it sent such an ACK too: a reformation that lost every holder of the ACK would
    /// order the packet again in another slot, while a member that delivered it in this one
    /// (the token site that ordered it, cut off alone right after) would disagree. So K other
    /// members and the origin hold it once `K + 1` members hold the ACK (then `K` of them are
    /// not the origin); a majority of MaxN (`max_n`, the largest view the slot may belong to)
    /// holds it once that many hold the ACK. The count is capped by the ring's size.
    pub(super) fn resilient(
        &self,
        ts: u64,
        origin: NodeId,
        qos: Qos,
        ring: &[NodeId],
        max_n: usize,
    ) -> bool {
        let need = match qos {
            Qos::KResilient(k) => usize::from(k) + 1,
            Qos::MajorityResilient => max_n / 2 + 1,
            Qos::TotallyResilient => usize::MAX,
            _ => return true,
        };
        if ts < self.stable_ts {
            return true;
        }
        let holders = self.holders_beyond(ts);
        let others = holders.iter().filter(|&&m| m != origin).count();
        let ring_others = ring.iter().filter(|&&m| m != origin).count();
        // K others: never more than the ring has; K + 1 in all: never more than the ring.
        let need_others = need.saturating_sub(1).min(ring_others);
        holders.len() >= need.min(ring.len()) && others >= need_others
    }

    /// The members known to hold slot `ts`: the senders of the ACKs kept that end after it (a
    /// token site holds all it orders, and accepted the token only holding everything before).
    fn holders_beyond(&self, ts: u64) -> BTreeSet<NodeId> {
        self.log
            .values()
            .filter(|e| e.end_ts > ts)
            .map(|e| e.sender)
            .collect()
    }

    /// Whether slot `ts` is held by a member of `ring` outside `makers` (or there is none).
    pub(super) fn held_by_another(&self, ts: u64, makers: &[NodeId], ring: &[NodeId]) -> bool {
        if ts < self.stable_ts || ring.iter().all(|m| makers.contains(m)) {
            return true;
        }
        self.log
            .values()
            .any(|e| e.end_ts > ts && !makers.contains(&e.sender))
    }

    /// The site that ordered slot `ts`, while its ACK is kept.
    pub(super) fn orderer_of(&self, ts: u64) -> Option<NodeId> {
        self.log
            .values()
            .rev()
            .find(|e| e.first_ts <= ts && ts < e.end_ts)
            .map(|e| e.sender)
    }

    /// This member's sync point: ACKs applied, and per ring member (and per origin whose
    /// packets it holds, at most `max_origins`) how far its consecutive packets reach.
    pub(super) fn sync_point(&self, max_origins: usize) -> SyncPoint {
        let mut data = Vec::new();
        for (&o, &next) in self.ordered_next.iter().take(max_origins) {
            let mut s = next;
            while self.data.has(o, s) {
                s += 1;
            }
            data.push((o, s));
        }
        SyncPoint {
            acks: self.next_ack,
            data,
            lost: self.q.missing_slots(SyncPoint::MAX_LOST),
        }
    }

    /// Whether ACKs or slots are known to be missing here.
    pub(super) fn lacks(&self) -> bool {
        self.highest_heard.is_some_and(|h| h >= self.next_ack) || !self.q.holds_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_datalist_holds_each_origin_in_sequence() {
        let h = || (Bytes::from_static(b"p"), Qos::TotallyOrdered, None);
        let (a, b) = (NodeId(1), NodeId(2));
        let mut d = DataList::default();
        assert!(d.insert(a, 5, h()));
        assert!(!d.insert(a, 5, h()), "held already");
        assert!(d.insert(a, 8, h()));
        assert!(d.insert(a, 3, h()), "below the first held");
        assert!(d.insert(b, 0, h()));
        assert_eq!(d.len(), 4);
        assert!(d.has(a, 3) && d.has(a, 5) && d.has(a, 8) && !d.has(a, 4) && !d.has(a, 9));
        assert!(d.has_after(a, 7) && !d.has_after(a, 8) && !d.has_after(b, 0));
        assert!(d.take(a, 4).is_none());
        assert!(d.take(a, 8).is_some());
        assert!(!d.has_after(a, 5), "the newest went");
        assert!(d.take(a, 3).is_some() && d.get(a, 5).is_some());
        d.drop_below(a, 6);
        assert!(!d.has(a, 5));
        assert_eq!(d.len(), 1);
        d.drop_below(b, u64::MAX);
        assert!(d.is_empty());
        // A packet far beyond the oldest held pushes the oldest out: the span stays bounded.
        assert!(d.insert(a, 0, h()));
        assert!(d.insert(a, DataList::MAX_SPAN + 3, h()));
        assert!(!d.has(a, 0) && d.len() == 1);
        assert!(!d.insert(a, 0, h()), "far behind what is held");
    }

    #[test]
    fn slots_go_missing_requested_received_delivered() {
        let mut q = OrderingQ::new(10);
        let d = |s, p: Option<&'static [u8]>| Entry::Data {
            origin: NodeId(1),
            sseq: s,
            payload: p.map(Bytes::from_static),
            qos: Qos::TotallyOrdered,
            frag: None,
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
        assert_eq!(q.fill(NodeId(1), 1, (b(), Qos::Reliable, None)), Some(11));
        assert_eq!(q.fill(NodeId(1), 1, (b(), Qos::Reliable, None)), None);
        assert!(q.holds_all());
        q.delivered();
        q.prune(100);
        assert_eq!(q.len(), 1);
        assert_eq!(q.end(), 13);
    }
}
