//! The sequencer's duties (Amoeba paper section 5.2; the member table of Fig. 10): assigning sequence numbers to
//! requests, joins and leaves, tracking where every member stands, and deciding acceptance
//! (resilience degree `r`) and stability (what every member delivered, purged everywhere).

use super::engine::{Phase, Sequencer, MAX_RETRANS_QUEUE};
use super::history::Entry;
use super::packet::{self, EntryKind, ReqEntry};
use crate::common::view_bytes;
use crate::engine::{Event, NodeId, Time};
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// What the sequencer knows of one member (Amoeba's `member` struct, Fig. 10).
#[derive(Clone, Debug)]
pub(super) struct MemberState {
    pub(super) id: NodeId,
    /// Next sequence number it will deliver (m_expect).
    pub(super) expect: u64,
    /// It holds every sequence number below this.
    pub(super) held_next: u64,
    /// Last protocol number ordered for it (m_messid): duplicates are at or below.
    pub(super) last_pnum: u64,
    /// Where its join was ordered.
    pub(super) join_seq: u64,
    /// Some but not all fragments of its current message are ordered.
    pub(super) mid_message: bool,
    /// Set once its leave is ordered: (leave seq, give-up time).
    pub(super) departed: Option<(u64, Time)>,
    /// The last gap in its requests it was asked to fill: (first missing protocol number,
    /// when), so that one gap is asked for once per repair timeout.
    pub(super) gap_asked: Option<(u64, Time)>,
}

impl MemberState {
    /// Whether it counts towards acceptance: a current member other than the sequencer.
    fn vouches(&self, me: NodeId) -> bool {
        self.id != me && self.departed.is_none()
    }
}

/// A request that waits for its turn at the sequencer.
#[derive(Clone, Debug)]
pub(super) struct Waiting {
    pub(super) frag_index: u16,
    pub(super) frag_count: u16,
    pub(super) payload: Bytes,
    pub(super) bb: bool,
}

/// State only the sequencer keeps.
///
/// Invariants: `bcast_next <= next_seq`; the queues of joins and nudges hold at most [`MAX_RETRANS_QUEUE`] members.
#[derive(Clone, Debug)]
pub(super) struct Ordering {
    pub(super) next_seq: u64,
    /// First sequence number not yet multicast.
    pub(super) bcast_next: u64,
    /// Ordering view: current members in rank order, and departed ones still lingering.
    pub(super) members: Vec<MemberState>,
    pub(super) view_id: u64,
    /// Members that sent a duplicate request and get a unicast of where the sequencer stands.
    pub(super) nudge: VecDeque<NodeId>,
    /// Gaps in senders' request streams to ask them to fill: (sender, from, to).
    pub(super) gap_asks: VecDeque<(NodeId, u64, u64)>,
    /// Requests received ahead of their turn (history full, an earlier one lost, a join
    /// waiting), keyed by sender and protocol number; bounded by half the history capacity.
    pub(super) waiting: BTreeMap<(NodeId, u64), Waiting>,
    /// Joins waiting until no message is half ordered, so that a joiner receives every message
    /// ordered after its join whole (no new message starts meanwhile).
    pub(super) pending_joins: VecDeque<NodeId>,
    pub(super) last_multicast: Time,
    pub(super) last_sync: Time,
    pub(super) sync_due: bool,
    /// Acceptance moved since the last packet that carried it.
    pub(super) accept_due: bool,
    /// Sequence number of this sequencer's own leave, once ordered.
    pub(super) leaving: Option<u64>,
    /// Who takes over when this sequencer leaves.
    pub(super) successor: Option<NodeId>,
    pub(super) leave_deadline: Time,
}

impl Ordering {
    /// Ordering from `next_seq` on, for `members`, in view `view_id`.
    pub(super) fn new(
        next_seq: u64,
        members: Vec<MemberState>,
        view_id: u64,
        now: Time,
        sync_due: bool,
    ) -> Ordering {
        Ordering {
            next_seq,
            bcast_next: next_seq,
            members,
            view_id,
            nudge: VecDeque::new(),
            gap_asks: VecDeque::new(),
            pending_joins: VecDeque::new(),
            waiting: BTreeMap::new(),
            last_multicast: now,
            last_sync: now,
            sync_due,
            accept_due: false,
            leaving: None,
            successor: None,
            leave_deadline: now,
        }
    }

    pub(super) fn check_invariants(&self) {
        debug_assert!(self.bcast_next <= self.next_seq);
        debug_assert!(self.pending_joins.len() <= MAX_RETRANS_QUEUE);
        debug_assert!(self.nudge.len() <= MAX_RETRANS_QUEUE);
        debug_assert!(self.gap_asks.len() <= MAX_RETRANS_QUEUE);
    }

    /// Current members (not departed), in rank order.
    pub(super) fn current_member_ids(&self) -> Vec<NodeId> {
        self.members
            .iter()
            .filter(|m| m.departed.is_none())
            .map(|m| m.id)
            .collect()
    }

    pub(super) fn member_index(&self, id: NodeId) -> Option<usize> {
        self.members.iter().position(|m| m.id == id)
    }

    /// Member `i` reported where it stands (never beyond what was ordered).
    pub(super) fn note_member_state(&mut self, i: usize, expect: u64, held: u64) {
        let next_seq = self.next_seq;
        let m = &mut self.members[i];
        m.expect = m.expect.max(expect.min(next_seq));
        m.held_next = m.held_next.max(held.min(next_seq));
    }

    /// Who takes over when `leaving` (this sequencer) leaves: the most up-to-date member (the
    /// lowest-ranked among equals), as the invitation protocol picks the member with the highest
    /// sequence number. It should hold the history others may still need: joined before the
    /// stable point.
    fn successor_for(&self, leaving: NodeId, stable: u64) -> Option<NodeId> {
        let best = |holds_all: bool| {
            self.members
                .iter()
                .enumerate()
                .filter(|(_, m)| m.id != leaving && m.departed.is_none())
                .filter(|(_, m)| !holds_all || m.join_seq <= stable)
                .max_by_key(|(rank, m)| (m.held_next, std::cmp::Reverse(*rank)))
                .map(|(_, m)| m.id)
        };
        best(true).or_else(|| best(false))
    }

    /// Departed members are waited for until they have their leave, or until they time out;
    /// requests of removed members can never be ordered.
    fn drop_departed(&mut self, me: NodeId, now: Time) {
        let before = self.members.len();
        self.members.retain(|m| match m.departed {
            Some((seq, deadline)) => m.id != me && m.expect <= seq && now < deadline,
            None => true,
        });
        if self.members.len() != before && !self.waiting.is_empty() {
            let members = &self.members;
            self.waiting
                .retain(|(id, _), _| members.iter().any(|m| m.id == *id && m.departed.is_none()));
        }
    }

    /// How many other members must hold an entry (`min(r, others)`), and the `r`-th highest
    /// holding point among them: that many hold everything below it. `r` is small, so the top
    /// `r` are kept in a small array on the stack (no allocation, and no clearing of more than
    /// `r` slots, per input: this runs on every submit).
    fn rth_highest_held(&self, me: NodeId, r: usize) -> (usize, u64) {
        if r == 0 {
            return (0, 0);
        }
        let mut small = [0u64; 16];
        let mut large = Vec::new();
        let top: &mut [u64] = if r <= small.len() {
            &mut small[..r]
        } else {
            large.resize(r, 0);
            &mut large
        };
        let mut others = 0usize;
        for m in self.members.iter().filter(|m| m.vouches(me)) {
            others += 1;
            let k = r.min(others);
            if k == 0 {
                continue;
            }
            // Insert m.held_next into the descending top-k list.
            let mut i = k - 1;
            if others > r && m.held_next <= top[i] {
                continue;
            }
            top[i] = m.held_next;
            while i > 0 && top[i] > top[i - 1] {
                top.swap(i, i - 1);
                i -= 1;
            }
        }
        let need = r.min(others);
        debug_assert!(top[..need].windows(2).all(|w| w[0] >= w[1]));
        (need, if need == 0 { 0 } else { top[need - 1] })
    }

    /// Where acceptance may move from `accepted`: every entry below it is held by enough
    /// members other than the sequencer (section 5.1).
    fn accept_point(&self, me: NodeId, r: usize, accepted: u64) -> u64 {
        let (need, rth) = self.rth_highest_held(me, r);
        if need == 0 {
            self.next_seq
        } else if self
            .members
            .iter()
            .filter(|m| m.vouches(me))
            .all(|m| m.join_seq <= accepted)
        {
            rth.min(self.next_seq)
        } else {
            self.walk_accept_point(me, need, accepted)
        }
    }

    /// A member that joined beyond the acceptance point holds nothing below its join: walk the
    /// acceptance point forward while enough members hold each sequence number (a member holds
    /// `[join_seq, held_next)`). Only while a join is unaccepted; each step passes a join or a
    /// holding point, so at most two per member.
    fn walk_accept_point(&self, me: NodeId, need: usize, accepted: u64) -> u64 {
        let mut p = accepted;
        for _ in 0..=2 * self.members.len() {
            if p >= self.next_seq {
                break;
            }
            let holders = self.members.iter().filter(|m| m.vouches(me));
            // Entries ordered while the group was smaller need only as many holders as there
            // were members then.
            let eligible = holders.clone().filter(|m| m.join_seq <= p).count();
            let count = holders
                .clone()
                .filter(|m| m.join_seq <= p && p < m.held_next)
                .count();
            if count < need.min(eligible) {
                break;
            }
            let next = holders
                .map(|m| {
                    if m.join_seq > p {
                        m.join_seq
                    } else if m.held_next > p {
                        m.held_next
                    } else {
                        u64::MAX
                    }
                })
                .min()
                .unwrap_or(u64::MAX);
            p = next.min(self.next_seq);
        }
        p
    }

    /// Every member delivered below this (and so did we, up to `next_deliver`).
    fn stable_point(&self, next_deliver: u64) -> u64 {
        self.members
            .iter()
            .map(|m| m.expect)
            .min()
            .unwrap_or(next_deliver)
            .min(next_deliver)
    }
}

impl Sequencer {
    /// Whether the sequencer may assign another sequence number: every member has room for it,
    /// and for one more entry (a reset that ends this order must fit at every member).
    pub(super) fn has_room(&self) -> bool {
        let o = self.ord.as_ref().expect("sequencer");
        o.leaving.is_none()
            && self.history_has_slot(o.next_seq)
            && self.hist.payload_bytes < self.cfg.history_capacity_bytes
    }

    /// Whether `seq` and the slot after it fit in the history window.
    pub(super) fn history_has_slot(&self, seq: u64) -> bool {
        self.hist.buffer.in_window(seq + 1)
    }

    pub(super) fn assign(&mut self, entry: Entry) -> u64 {
        let o = self.ord.as_mut().expect("sequencer");
        let seq = o.next_seq;
        let inserted = self.hist.insert(seq, entry);
        assert_eq!(
            inserted,
            Ok(true),
            "assigned slot must be free and in window"
        );
        o.next_seq += 1;
        self.hist.held_next = o.next_seq;
        self.hist.seq_next_known = o.next_seq;
        seq
    }

    /// Order the join of `id` (BC_JOIN): a totally ordered entry carrying the new view.
    pub(super) fn order_join(&mut self, id: NodeId) {
        let mut members = self.current_member_ids();
        members.push(id);
        let o = self.ord.as_mut().expect("sequencer");
        o.view_id += 1;
        let payload = view_bytes(o.view_id, self.me, &members);
        let seq = o.next_seq;
        o.members.push(MemberState {
            id,
            expect: seq,
            held_next: seq,
            last_pnum: 0,
            join_seq: seq,
            mid_message: false,
            departed: None,
            gap_asked: None,
        });
        self.assign(Entry {
            kind: EntryKind::Join,
            sender: id,
            pnum: 0,
            frag_index: 0,
            frag_count: 1,
            payload: Some(payload),
            bb: false,
        });
    }

    /// Order the leave of `id` (BC_LEAVE). When the sequencer itself leaves, the role passes to
    /// the lowest-ranked remaining member, named in the new view.
    pub(super) fn order_leave(&mut self, id: NodeId) {
        let members: Vec<NodeId> = self
            .current_member_ids()
            .into_iter()
            .filter(|m| *m != id)
            .collect();
        let next_sequencer = if id == self.me {
            let o = self.ord.as_ref().expect("sequencer");
            o.successor_for(id, self.hist.stable).unwrap_or(self.me)
        } else {
            self.me
        };
        let linger = Duration::from_millis(self.cfg.leave_linger_ms);
        let now = self.now;
        let o = self.ord.as_mut().expect("sequencer");
        o.view_id += 1;
        let payload = view_bytes(o.view_id, next_sequencer, &members);
        let seq = o.next_seq;
        if let Some(m) = o.members.iter_mut().find(|m| m.id == id) {
            m.departed = Some((seq, now + linger));
        }
        if id == self.me {
            o.successor = (next_sequencer != self.me).then_some(next_sequencer);
            o.leaving = Some(seq);
            o.leave_deadline = now + linger;
        }
        self.assign(Entry {
            kind: EntryKind::Leave,
            sender: id,
            pnum: 0,
            frag_index: 0,
            frag_count: 1,
            payload: Some(payload),
            bb: false,
        });
    }

    /// BC_BCASTREQ from `from`, which reports `(expect, held_next, ordered_through)`.
    pub(super) fn on_request(
        &mut self,
        from: NodeId,
        (expect, held, ordered_through): (u64, u64, u64),
        entries: packet::ReqIter<'_>,
        bb: bool,
        data: &Bytes,
    ) {
        let Some(i) = self.member_index(from) else {
            return;
        };
        self.note_member_state(i, expect, held);
        self.learn_stream(i, ordered_through, entries.clone().next());
        let mut duplicate = false;
        let mut refused = false;
        for e in entries {
            let o = self.ord.as_mut().expect("sequencer");
            let m = &o.members[i];
            if m.departed.is_some() {
                break;
            }
            if e.pnum <= m.last_pnum {
                self.counters.duplicates += 1;
                duplicate = true;
                continue;
            }
            // No sender has more than its send window in flight beyond what was ordered: a
            // request further ahead would only sit in the shared table of waiting requests
            // (and a flood of them would block everyone).
            if e.pnum - m.last_pnum > self.cfg.send_window_msgs as u64 {
                self.requests_far_ahead += 1;
                continue;
            }
            // A message of more fragments than the largest message needs is never ordered:
            // every member would refuse it at reassembly.
            if usize::from(e.frag_count) > self.cfg.fragmenter().max_fragments() {
                self.requests_oversized += 1;
                continue;
            }
            let w = Waiting {
                frag_index: e.frag_index,
                frag_count: e.frag_count,
                payload: data.slice_ref(e.payload),
                bb,
            };
            // The usual case: next in its sender's stream, with room to order it. It is ordered
            // at once, without a trip through `waiting`.
            if e.pnum == m.last_pnum + 1 && self.may_order_next(i, e.frag_index) {
                self.order_request(i, w);
                continue;
            }
            let o = self.ord.as_mut().expect("sequencer");
            // Requests wait in the third part of the history until they are next in their
            // sender's stream and there is room (Amoeba paper, Fig. 11): a lost request or a full
            // history then costs the sender no timeout for the requests behind it.
            let key = (from, e.pnum);
            if o.waiting.contains_key(&key) {
                self.counters.duplicates += 1;
            } else if o.waiting.len() < self.cfg.history_capacity_msgs / 2 {
                o.waiting.insert(key, w);
            } else {
                refused = true;
            }
        }
        if refused {
            // The sender keeps the data and repeats it after its timeout.
            self.counters.backpressure_refusals += 1;
            self.ord.as_mut().expect("sequencer").sync_due = true;
        }
        self.order_waiting(i);
        self.ask_for_gap(i);
        if duplicate {
            // The sender missed the broadcast of something already ordered: tell it where the
            // sequence stands so that it asks for what it lacks (section 5.2).
            self.nudge(from);
        }
    }

    /// A sender saw its stream ordered through `ordered_through`, further than this sequencer
    /// knows: it took over ordering without having delivered those (they were ordered before it
    /// joined). Its stream continues from there, with the request's first entry, which must be
    /// the next one (so that a message begun before is known to be mid-way). The claim only
    /// concerns the sender's own stream, so an authenticated member can skip nothing but its
    /// own messages.
    fn learn_stream(&mut self, i: usize, ordered_through: u64, first: Option<ReqEntry<'_>>) {
        let o = self.ord.as_mut().expect("sequencer");
        let m = &mut o.members[i];
        let Some(first) = first else { return };
        if ordered_through <= m.last_pnum || ordered_through.checked_add(1) != Some(first.pnum) {
            return;
        }
        m.last_pnum = ordered_through;
        m.mid_message = first.frag_index > 0;
        let id = m.id;
        // Requests of that stream already waiting are duplicates now.
        let stale: Vec<(NodeId, u64)> = o
            .waiting
            .range((id, 0)..=(id, ordered_through))
            .map(|(k, _)| *k)
            .collect();
        for k in stale {
            o.waiting.remove(&k);
        }
    }

    /// Member `i`'s next request is missing while later ones wait: ask it for the missing run
    /// at once (once per repair timeout for one gap), rather than leave the requests behind
    /// the gap waiting for the sender's timeout. Loss of requests at the sequencer is mostly
    /// its receive buffer overflowing under load, where a timeout followed by go-back-N costs
    /// the most.
    fn ask_for_gap(&mut self, i: usize) {
        let (now, rto) = (self.now, self.repair_rto());
        let o = self.ord.as_mut().expect("sequencer");
        let m = &o.members[i];
        let next = m.last_pnum + 1;
        if m.departed.is_some() || o.waiting.contains_key(&(m.id, next)) {
            return;
        }
        let Some((&(_, ahead), _)) = o.waiting.range((m.id, next + 1)..=(m.id, u64::MAX)).next()
        else {
            return;
        };
        if m.gap_asked
            .is_some_and(|(f, at)| f == next && now < at + rto)
        {
            return;
        }
        if o.gap_asks.len() >= MAX_RETRANS_QUEUE {
            return;
        }
        let id = m.id;
        o.members[i].gap_asked = Some((next, now));
        o.gap_asks.push_back((id, next, ahead));
        self.request_gaps_asked += 1;
    }

    /// Tell `from` where the sequence stands (a unicast BC_ACCEPT), once per queue turn.
    pub(super) fn nudge(&mut self, from: NodeId) {
        let o = self.ord.as_mut().expect("sequencer");
        if o.nudge.len() < MAX_RETRANS_QUEUE && !o.nudge.contains(&from) {
            o.nudge.push_back(from);
        }
    }

    /// Order the waiting requests of member `i` that are next in its stream, while there is room.
    pub(super) fn order_waiting(&mut self, i: usize) {
        loop {
            let o = self.ord.as_ref().expect("sequencer");
            let m = &o.members[i];
            let Some(w) = o.waiting.get(&(m.id, m.last_pnum + 1)) else {
                return;
            };
            if !self.may_order_next(i, w.frag_index) {
                return;
            }
            let o = self.ord.as_mut().expect("sequencer");
            let m = &o.members[i];
            let w = o.waiting.remove(&(m.id, m.last_pnum + 1)).expect("present");
            self.order_request(i, w);
        }
    }

    /// Whether member `i`'s next request (fragment `frag_index`) may be ordered now: the member
    /// is still in, the history has room, the sequencer is not handing over, and no join waits
    /// for a message boundary. Notes a needed sync when the history is what stops it.
    fn may_order_next(&mut self, i: usize, frag_index: u16) -> bool {
        let room = self.has_room();
        let o = self.ord.as_mut().expect("sequencer");
        if o.members[i].departed.is_some() || !room {
            o.sync_due = true;
            return false;
        }
        frag_index != 0 || o.pending_joins.is_empty()
    }

    /// Order member `i`'s next request.
    fn order_request(&mut self, i: usize, w: Waiting) {
        let o = self.ord.as_mut().expect("sequencer");
        let m = &mut o.members[i];
        m.last_pnum += 1;
        m.mid_message = w.frag_index + 1 < w.frag_count;
        let (id, pnum) = (m.id, m.last_pnum);
        self.assign(Entry {
            kind: EntryKind::Data,
            sender: id,
            pnum,
            frag_index: w.frag_index,
            frag_count: w.frag_count,
            payload: Some(w.payload),
            bb: w.bb,
        });
    }

    pub(super) fn on_join_req(&mut self, from: NodeId) {
        let Some(o) = self.ord.as_ref() else { return };
        if let Some(m) = o.members.iter().find(|m| m.id == from) {
            if m.departed.is_none() {
                // Its join is ordered but it missed the broadcast: send it again.
                let (from_seq, to) = (m.join_seq.max(self.hist.buffer.base()), o.next_seq);
                self.queue_retrans(from, from_seq, to);
            }
            return;
        }
        let o = self.ord.as_mut().expect("sequencer");
        if o.leaving.is_some() {
            return; // the successor admits it
        }
        if !o.pending_joins.contains(&from) && o.pending_joins.len() < MAX_RETRANS_QUEUE {
            o.pending_joins.push_back(from);
        }
        self.order_pending_joins();
    }

    /// Whether a new message may start: not while joins wait for half-ordered messages.
    pub(super) fn may_start_message(&self) -> bool {
        self.ord
            .as_ref()
            .is_some_and(|o| o.pending_joins.is_empty())
    }

    /// Order waiting joins once no message is half ordered (a joiner could not reassemble it).
    pub(super) fn order_pending_joins(&mut self) {
        loop {
            let Some(o) = self.ord.as_ref() else { return };
            let Some(&id) = o.pending_joins.front() else {
                return;
            };
            if o.leaving.is_some() || o.members.iter().any(|m| m.mid_message) || !self.has_room() {
                return;
            }
            self.ord
                .as_mut()
                .expect("sequencer")
                .pending_joins
                .pop_front();
            if self.current_member_ids().len() >= self.cfg.max_members_effective() {
                // Full: refused; the joiner keeps asking and gets in once someone leaves.
                self.counters.backpressure_refusals += 1;
                continue;
            }
            self.order_join(id);
        }
    }

    pub(super) fn on_leave_req(&mut self, from: NodeId, expect: u64) {
        let Some(i) = self.member_index(from) else {
            return;
        };
        self.note_member_state(i, expect, 0);
        let o = self.ord.as_ref().expect("sequencer");
        match o.members[i].departed {
            Some((seq, _)) => self.queue_retrans(from, seq, seq + 1),
            None if o.leaving.is_none() => {
                if self.history_has_slot(o.next_seq) {
                    self.order_leave(from);
                } else {
                    self.counters.backpressure_refusals += 1;
                    self.ord.as_mut().expect("sequencer").sync_due = true;
                }
            }
            None => {}
        }
    }

    /// Order own fragments locally (the sequencer needs no network to reach itself).
    pub(super) fn order_local(&mut self) {
        if self.sender.unsent < self.sender.outq.len() && !self.has_room() {
            // History full: ask the members where they stand so that it can be purged.
            self.ord.as_mut().expect("sequencer").sync_due = true;
        }
        while self.sender.unsent < self.sender.outq.len() && self.has_room() {
            let f = self.sender.outq[self.sender.unsent].clone();
            if f.frag_index == 0 && !self.may_start_message() {
                break;
            }
            let me = self.me;
            if let Some(i) = self.member_index(me) {
                let m = &mut self.ord.as_mut().expect("sequencer").members[i];
                m.last_pnum = f.pnum;
                m.mid_message = f.frag_index + 1 < f.frag_count;
            }
            self.assign(Entry {
                kind: EntryKind::Data,
                sender: me,
                pnum: f.pnum,
                frag_index: f.frag_index,
                frag_count: f.frag_count,
                payload: Some(f.payload),
                // The sequencer's own messages always go out with their data (Fig. 14).
                bb: false,
            });
            self.sender.own_ordered = f.pnum;
            self.sender.unsent += 1;
        }
    }

    /// Recompute acceptance and stability from the members' reports, purge what everyone has.
    pub(super) fn sequencer_bookkeeping(&mut self) {
        let me = self.me;
        let r = self.cfg.resilience as usize;
        let next_deliver = self.hist.next_deliver;
        let now = self.now;
        let o = self.ord.as_mut().expect("sequencer");
        if let Some(m) = o.members.iter_mut().find(|m| m.id == me) {
            m.expect = next_deliver;
            m.held_next = o.next_seq;
        }
        o.drop_departed(me, now);
        let accept_point = o.accept_point(me, r, self.hist.accepted_next);
        if accept_point > self.hist.accepted_next {
            self.hist.accepted_next = accept_point;
            o.accept_due = true;
        }
        let stable = o.stable_point(next_deliver);
        self.hist.stable = self.hist.stable.max(stable);
        // Completion: as many holders as a reset needs (a majority under the majority policy),
        // so that every group formed after a failure holds a completed send.
        let n = o.members.iter().filter(|m| m.departed.is_none()).count();
        let need = self.cfg.completion_holders(n);
        let complete = if need <= r {
            self.hist.accepted_next
        } else {
            o.accept_point(me, need, self.hist.complete_next)
        };
        let complete = complete.max(self.hist.stable).min(self.hist.accepted_next);
        if complete > self.hist.complete_next {
            self.hist.complete_next = complete;
            o.accept_due = true;
        }
        o.check_invariants();
    }

    /// Take over ordering after the sequencer left: everything up to its leave is delivered here.
    pub(super) fn become_sequencer(&mut self, next_seq: u64) {
        let floor = self.hist.stable;
        let mut members: Vec<MemberState> = self
            .view
            .members
            .iter()
            .map(|&id| self.inherited_member(id, next_seq, floor))
            .collect();
        // Leavers that may still lack their leave (the old sequencer counted them in `stable`
        // until they had it, so those below the floor are done) are waited for here too.
        let deadline = self.now + Duration::from_millis(self.cfg.leave_linger_ms);
        for &(id, seq) in &self.succession.recent_leaves {
            if seq >= floor && id != self.me && !members.iter().any(|m| m.id == id) {
                members.push(MemberState {
                    id,
                    expect: floor,
                    held_next: floor,
                    last_pnum: 0,
                    join_seq: floor,
                    mid_message: false,
                    departed: Some((seq, deadline)),
                    gap_asked: None,
                });
            }
        }
        // Learn where every member stands before history fills or acceptance stalls.
        let o = Ordering::new(next_seq, members, self.view.id, self.now, true);
        self.ord = Some(o);
        self.hist.held_next = next_seq;
        self.hist.seq_next_known = next_seq;
        self.hist.gaps.stop_timer();
        self.sender.become_local();
    }

    /// What a new sequencer knows of member `id`: its stream as its reset acknowledgement said
    /// or as delivered here, and where its join was delivered.
    fn inherited_member(&self, id: NodeId, next_seq: u64, floor: u64) -> MemberState {
        let stream = self.rec.reset_streams.iter().find(|s| s.0 == id);
        let point = if id == self.me { next_seq } else { floor };
        MemberState {
            id,
            expect: point,
            held_next: point,
            last_pnum: stream
                .map(|s| s.1)
                .or_else(|| self.succession.last_delivered_pnum.get(&id).copied())
                .unwrap_or(0),
            join_seq: self.succession.join_seqs.get(&id).copied().unwrap_or(floor),
            mid_message: stream.map_or_else(|| self.hist.reassembly.in_progress(id), |s| s.2),
            departed: None,
            gap_asked: None,
        }
    }

    /// A sequencer leaves once its own messages are ordered and there is room for the leave.
    pub(super) fn sequencer_can_leave(&self) -> bool {
        self.leave_requested
            && self.leave_deadline.is_some()
            && self.sender.unsent == self.sender.outq.len()
            && self.sender.awaiting_complete.is_empty()
            && self
                .ord
                .as_ref()
                .is_some_and(|o| o.leaving.is_none() && self.history_has_slot(o.next_seq))
    }

    pub(super) fn finish_sequencer_leave(&mut self) {
        let Some(o) = self.ord.as_ref() else { return };
        let Some(seq) = o.leaving else { return };
        if self.hist.next_deliver <= seq {
            return;
        }
        // Once the successor has the handover it holds everything up to it and answers the
        // others (they follow whoever orders the newest messages), so we may go. Without a
        // successor that has it the group would have no sequencer: wait for it, up to the
        // linger bound (it may have left in turn; one that never got the handover is a case
        // for crash recovery).
        let done = match o.successor {
            Some(id) => o.members.iter().any(|m| m.id == id && m.expect > seq),
            // The last member: nobody takes over the members whose leaves we ordered, and one
            // that lacks its leave can only get it from us. Gone at once, we would strand it:
            // it would find us failed and, with the others that lack theirs, reset the group
            // into views that reuse the ids of ours. So wait until each has its leave
            // (`drop_departed` forgets them then), up to the linger bound.
            None => !o
                .members
                .iter()
                .any(|m| m.id != self.me && m.departed.is_some()),
        };
        if done || self.now >= o.leave_deadline {
            self.phase = Phase::Left;
            self.events.push_back(Event::Left);
        }
    }

    /// When the sequencer must next send BC_SYNC: when asked for (history full, new role), or
    /// when it has been quiet with its tail unaccepted (r > 0: an acknowledgement was lost) or
    /// unconfirmed (a member may have missed the last broadcast). Rate-limited to one per half
    /// RTO. `handle_timeout`, `poll_timeout` and `poll_transmit` all use this one rule, so a due
    /// timer always leads to a transmission.
    pub(super) fn sync_at(&self) -> Option<Time> {
        let o = self.ord.as_ref()?;
        let allowed = o.last_sync + self.repair_rto() / 2;
        let quiet_since = o.last_multicast.max(o.last_sync);
        let at = if o.sync_due {
            allowed
        } else if self.hist.accepted_next < o.next_seq || self.hist.complete_next < o.next_seq {
            quiet_since + self.repair_rto()
        } else if self.hist.stable < o.next_seq {
            quiet_since + Duration::from_millis(self.cfg.sync_interval_ms)
        } else {
            return None;
        };
        Some(at.max(allowed))
    }

    pub(super) fn current_member_ids(&self) -> Vec<NodeId> {
        self.ord.as_ref().expect("sequencer").current_member_ids()
    }

    pub(super) fn member_index(&self, id: NodeId) -> Option<usize> {
        self.ord.as_ref()?.member_index(id)
    }

    pub(super) fn note_member_state(&mut self, i: usize, expect: u64, held: u64) {
        self.ord
            .as_mut()
            .expect("sequencer")
            .note_member_state(i, expect, held);
    }
}
