//! The sequencer's duties (Amoeba paper section 5.2; the member table of Fig. 10): assigning sequence numbers to
//! requests, joins and leaves, tracking where every member stands, and deciding acceptance
//! (resilience degree `r`) and stability (what every member delivered, purged everywhere).

use super::config::Config;
use super::history::{Entry, History};
use super::packet::{self, ptype, EntryKind, ReqEntry, SeqRanges};
use super::retrans::{Budget, Retransmissions};
use super::sender::Sender;
use super::shared::{SeqTimers, Stats, Timer, MAX_RETRANS_QUEUE};
use crate::common::{view_bytes, Fence};
use crate::engine::{Counters, NodeId, Time};
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
    /// The last BC_SYNC round it reported its state in (see [`Ordering::sync_round`]).
    pub(super) answered_round: u64,
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

/// State only the sequencer keeps, and its duties (section 5.2): the member holds one while it
/// orders, and hands it a [`Member`] for each step.
///
/// Invariants: `bcast_next <= next_seq`; the queues of joins, nudges and gap asks hold at most
/// [`MAX_RETRANS_QUEUE`] entries; a member is in the table once, and reports no more than was
/// ordered (`held_next` and `join_seq` at most `next_seq`); waiting requests are bounded by
/// half the history; a departing sequencer names a successor other than itself.
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
    /// Senders that repeated a request waiting here, to tell that it is held: (sender, its
    /// protocol number).
    pub(super) queued: VecDeque<(NodeId, u64)>,
    /// Joiners to tell that the group is full.
    pub(super) refuse: VecDeque<NodeId>,
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
    /// Who takes over when this sequencer leaves (its give-up time is the member's
    /// [`Timer::Handover`]).
    pub(super) successor: Option<NodeId>,
    /// Set after a stall: nothing is ordered until a majority confirms the view (see
    /// [`Fence`]).
    pub(super) fence: Option<Fence>,
    /// Fences raised so far (the next token).
    pub(super) fences: u32,
    /// BC_SYNC rounds so far; members that have not reported their state since the last
    /// one; and stability when it went out.
    pub(super) sync_round: u64,
    pub(super) sync_unanswered: usize,
    pub(super) stable_at_sync: u64,
    /// BC_SYNC rounds in a row after which stability had not moved: each one doubles the
    /// wait before the next (up to [`MAX_SYNC_BACKOFF`] doublings).
    pub(super) sync_fruitless: u32,
}

/// Doublings of the pause between BC_SYNC rounds that free nothing. With the history full
/// and a member that lacks entries holding stability back, rounds every half repair timeout
/// were answered by every member each time, and in the Amoeba experiment (30 members, 800 µs
/// of processor a datagram) their answers took more than the sequencer's whole processor:
/// its receive buffer overflowed and the lagging member's NACKs were lost there, for good
/// (BB, 0 bytes from 30 members). A round is only worth repeating soon when the last one
/// freed history; the rounds still go at least every 4 repair timeouts.
const MAX_SYNC_BACKOFF: u32 = 3;

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
            queued: VecDeque::new(),
            refuse: VecDeque::new(),
            pending_joins: VecDeque::new(),
            waiting: BTreeMap::new(),
            last_multicast: now,
            last_sync: now,
            sync_due,
            accept_due: false,
            leaving: None,
            successor: None,
            fence: None,
            fences: 0,
            sync_round: 0,
            sync_unanswered: usize::MAX,
            stable_at_sync: 0,
            sync_fruitless: 0,
        }
    }

    pub(super) fn check_invariants(&self, me: NodeId, history_capacity: usize) {
        debug_assert!(self.bcast_next <= self.next_seq);
        debug_assert!(self.pending_joins.len() <= MAX_RETRANS_QUEUE);
        debug_assert!(self.nudge.len() <= MAX_RETRANS_QUEUE);
        debug_assert!(self.gap_asks.len() <= MAX_RETRANS_QUEUE);
        debug_assert!(self.queued.len() <= MAX_RETRANS_QUEUE);
        debug_assert!(self.waiting.len() <= history_capacity / 2);
        debug_assert!(self.successor != Some(me), "a successor is another member");
        if cfg!(debug_assertions) {
            for (k, m) in self.members.iter().enumerate() {
                debug_assert!(
                    self.members[..k].iter().all(|o| o.id != m.id),
                    "one entry per member"
                );
                debug_assert!(m.held_next <= self.next_seq && m.join_seq <= self.next_seq);
            }
        }
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
        if m.answered_round != self.sync_round && m.departed.is_none() {
            m.answered_round = self.sync_round;
            self.sync_unanswered = self.sync_unanswered.saturating_sub(1);
        }
    }

    /// The earliest the next BC_SYNC may go: half a repair timeout after the last one, or as
    /// soon as every member answered it if that round freed history (stability moved). When
    /// the history is full and only these rounds free it (no member's state arrives
    /// otherwise), they set the pace of ordering, and a round trip is enough for one. After
    /// rounds that freed nothing the pause doubles (see [`MAX_SYNC_BACKOFF`]).
    fn next_sync_allowed(&self, hist: &History, rto: Duration) -> Time {
        if hist.stable > self.stable_at_sync {
            if self.sync_unanswered == 0 {
                return self.last_sync;
            }
            return self.last_sync + rto / 2;
        }
        self.last_sync + rto / 2 * (1 << self.sync_fruitless.min(MAX_SYNC_BACKOFF))
    }

    /// A BC_SYNC goes out at `now`, a new round of state reports.
    fn start_sync_round(&mut self, me: NodeId, stable: u64, now: Time) {
        self.sync_due = false;
        self.last_sync = now;
        self.last_multicast = now;
        self.sync_round += 1;
        // The round before freed nothing when stability stands where it stood then.
        self.sync_fruitless = if stable > self.stable_at_sync || self.sync_round == 1 {
            0
        } else {
            self.sync_fruitless.saturating_add(1)
        };
        self.stable_at_sync = stable;
        let n = self.members.iter().filter(|x| x.vouches(me)).count();
        // With no other member there is no one to answer: never early.
        self.sync_unanswered = if n == 0 { usize::MAX } else { n };
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

/// The member an [`Ordering`] runs at, borrowed for one step: what the sequencer's duties
/// read and move besides its own state (the history it assigns into, its own messages, the
/// retransmissions it owes, its counters and timers).
pub(super) struct Member<'a> {
    pub(super) cfg: &'a Config,
    pub(super) me: NodeId,
    pub(super) now: Time,
    pub(super) hist: &'a mut History,
    pub(super) sender: &'a mut Sender,
    pub(super) retrans: &'a mut Retransmissions,
    pub(super) counters: &'a mut Counters,
    pub(super) stats: &'a mut Stats,
    pub(super) timers: &'a mut SeqTimers,
}

/// A short datagram the sequencer owes after its new entries and retransmissions.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Announce {
    /// BC_REQGAP: ask `to` for its requests `[from, until)`.
    ReqGap { to: NodeId, from: u64, until: u64 },
    /// A unicast BC_ACCEPT: tell `to` where the sequence stands.
    Nudge(NodeId),
    /// Tell `to` that its request `pnum` waits here.
    Queued { to: NodeId, pnum: u64 },
    /// BC_JOINREFUSED: tell joiner `to` that the group is full.
    Refuse(NodeId),
    /// A multicast BC_ACCEPT: acceptance moved.
    Accept,
    /// BC_SYNC: ask every member where it stands.
    Sync,
}

impl Ordering {
    /// Whether the sequencer may assign another sequence number: every member has room for it,
    /// and for one more entry (a reset that ends this order must fit at every member).
    pub(super) fn has_room(&self, m: &Member<'_>) -> bool {
        self.fence.is_none()
            && self.leaving.is_none()
            && m.hist.has_slot(self.next_seq)
            && m.hist.payload_bytes < m.cfg.history_capacity_bytes
    }

    /// Put `entry` at the next sequence number.
    fn assign(&mut self, m: &mut Member<'_>, entry: Entry) -> u64 {
        let seq = self.next_seq;
        let inserted = m.hist.insert(seq, entry);
        assert_eq!(
            inserted,
            Ok(true),
            "assigned slot must be free and in window"
        );
        self.next_seq += 1;
        m.hist.held_next = self.next_seq;
        m.hist.seq_next_known = self.next_seq;
        seq
    }

    /// Order the join of `id` (BC_JOIN): a totally ordered entry carrying the new view.
    pub(super) fn order_join(&mut self, m: &mut Member<'_>, id: NodeId) {
        debug_assert!(self.member_index(id).is_none(), "a member joins once");
        let mut members = self.current_member_ids();
        members.push(id);
        self.view_id += 1;
        let payload = view_bytes(self.view_id, m.me, &members);
        let seq = self.next_seq;
        self.members.push(MemberState {
            id,
            expect: seq,
            held_next: seq,
            last_pnum: 0,
            join_seq: seq,
            mid_message: false,
            departed: None,
            gap_asked: None,
            answered_round: 0,
        });
        self.assign(m, Entry::membership(EntryKind::Join, id, payload));
    }

    /// Order the leave of `id` (BC_LEAVE). When the sequencer itself leaves, the role passes to
    /// the lowest-ranked remaining member, named in the new view.
    pub(super) fn order_leave(&mut self, m: &mut Member<'_>, id: NodeId) {
        debug_assert!(
            self.leaving.is_none(),
            "nothing is ordered after our own leave"
        );
        let me = m.me;
        let members: Vec<NodeId> = self
            .current_member_ids()
            .into_iter()
            .filter(|x| *x != id)
            .collect();
        let next_sequencer = if id == me {
            self.successor_for(id, m.hist.stable).unwrap_or(me)
        } else {
            me
        };
        let linger = Duration::from_millis(m.cfg.leave_linger_ms);
        let now = m.now;
        self.view_id += 1;
        let payload = view_bytes(self.view_id, next_sequencer, &members);
        let seq = self.next_seq;
        if let Some(x) = self.members.iter_mut().find(|x| x.id == id) {
            x.departed = Some((seq, now + linger));
        }
        if id == me {
            self.successor = (next_sequencer != me).then_some(next_sequencer);
            self.leaving = Some(seq);
            m.timers.arm(Timer::Handover, now + linger);
        }
        self.assign(m, Entry::membership(EntryKind::Leave, id, payload));
    }

    /// BC_BCASTREQ from `from`, which reports `(expect, held_next, ordered_through)`.
    pub(super) fn on_request(
        &mut self,
        m: &mut Member<'_>,
        from: NodeId,
        (expect, held, ordered_through): (u64, u64, u64),
        entries: packet::ReqIter<'_>,
        (bb, data): (bool, &Bytes),
    ) {
        let Some(i) = self.member_index(from) else {
            return;
        };
        self.note_member_state(i, expect, held);
        self.learn_stream(i, ordered_through, entries.clone().next());
        let mut duplicate = false;
        let mut refused = false;
        // A repeat of a request waiting here, and the highest number the datagram carried
        // (after a timeout, the sender's last one sent: its tail probe).
        let mut repeated_waiting = false;
        let mut highest = 0;
        for e in entries {
            highest = highest.max(e.pnum);
            let (departed, last_pnum) = (self.members[i].departed, self.members[i].last_pnum);
            if departed.is_some() {
                break;
            }
            if e.pnum <= last_pnum {
                m.counters.duplicates += 1;
                duplicate = true;
                continue;
            }
            // No sender has more than its send window in flight beyond what was ordered: a
            // request further ahead would only sit in the shared table of waiting requests
            // (and a flood of them would block everyone).
            if e.pnum - last_pnum > m.cfg.send_window_msgs as u64 {
                m.stats.requests_far_ahead += 1;
                continue;
            }
            // A message of more fragments than the largest message needs is never ordered:
            // every member would refuse it at reassembly.
            if usize::from(e.frag_count) > m.cfg.fragmenter().max_fragments() {
                m.stats.requests_oversized += 1;
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
            if e.pnum == last_pnum + 1 && self.may_order_next(m, i, e.frag_index) {
                self.order_request(m, i, w);
                continue;
            }
            // Requests wait in the third part of the history until they are next in their
            // sender's stream and there is room (Amoeba paper, Fig. 11): a lost request or a full
            // history then costs the sender no timeout for the requests behind it.
            let key = (from, e.pnum);
            if self.waiting.contains_key(&key) {
                m.counters.duplicates += 1;
                repeated_waiting = true;
            } else if self.waiting.len() < m.cfg.history_capacity_msgs / 2 {
                self.waiting.insert(key, w);
            } else {
                refused = true;
            }
        }
        if refused {
            // The sender keeps the data and repeats it after its timeout.
            m.counters.backpressure_refusals += 1;
            self.sync_due = true;
        }
        self.order_waiting(m, i);
        self.ask_for_gap(m, i);
        if duplicate {
            // The sender missed the broadcast of something already ordered: tell it where the
            // sequence stands so that it asks for what it lacks (section 5.2).
            self.nudge(from);
        }
        // PB and BB alike: a repeat goes to this sequencer only, whatever its method, so it
        // repairs nothing at the members (it was kept from BB while BB repeats were
        // multicast). BB, 4 KB from 30 members: 13,035 request timeouts sent 25,191 repeated
        // 4 KB fragments here, and the run did not complete; with this answer 361 and 714.
        if repeated_waiting && self.waits_for_room(i, highest) {
            let pnum = highest;
            // The sender timed out on our queue, not on a loss: tell it we hold the request,
            // so that it keeps its backed-off timer rather than repeat it again and again
            // (each repeat costs this sequencer a receive; PB, 4 KB from 30 members: half of
            // all it received).
            if self.queued.len() < MAX_RETRANS_QUEUE && !self.queued.iter().any(|q| q.0 == from) {
                self.queued.push_back((from, pnum));
            }
        }
    }

    /// A sender saw its stream ordered through `ordered_through`, further than this sequencer
    /// knows: it took over ordering without having delivered those (they were ordered before it
    /// joined). Its stream continues from there, with the request's first entry, which must be
    /// the next one (so that a message begun before is known to be mid-way). The claim only
    /// concerns the sender's own stream, so an authenticated member can skip nothing but its
    /// own messages.
    fn learn_stream(&mut self, i: usize, ordered_through: u64, first: Option<ReqEntry<'_>>) {
        let m = &mut self.members[i];
        let Some(first) = first else { return };
        if ordered_through <= m.last_pnum || ordered_through.checked_add(1) != Some(first.pnum) {
            return;
        }
        m.last_pnum = ordered_through;
        m.mid_message = first.frag_index > 0;
        let id = m.id;
        // Requests of that stream already waiting are duplicates now.
        let stale: Vec<(NodeId, u64)> = self
            .waiting
            .range((id, 0)..=(id, ordered_through))
            .map(|(k, _)| *k)
            .collect();
        for k in stale {
            self.waiting.remove(&k);
        }
    }

    /// Member `i`'s next request is missing while later ones wait: ask it for the missing run
    /// at once (once per repair timeout for one gap), rather than leave the requests behind
    /// the gap waiting for the sender's timeout. Loss of requests at the sequencer is mostly
    /// its receive buffer overflowing under load, where a timeout followed by go-back-N costs
    /// the most.
    fn ask_for_gap(&mut self, m: &mut Member<'_>, i: usize) {
        let (now, rto) = (m.now, m.sender.repair_rto(m.cfg));
        let x = &self.members[i];
        let next = x.last_pnum + 1;
        if x.departed.is_some() || self.waiting.contains_key(&(x.id, next)) {
            return;
        }
        let Some((&(_, ahead), _)) = self
            .waiting
            .range((x.id, next + 1)..=(x.id, u64::MAX))
            .next()
        else {
            return;
        };
        if x.gap_asked
            .is_some_and(|(f, at)| f == next && now < at + rto)
        {
            return;
        }
        if self.gap_asks.len() >= MAX_RETRANS_QUEUE {
            return;
        }
        let id = x.id;
        debug_assert!(
            next < ahead,
            "the gap lies before the first waiting request"
        );
        self.members[i].gap_asked = Some((next, now));
        self.gap_asks.push_back((id, next, ahead));
        m.stats.request_gaps_asked += 1;
    }

    /// Whether member `i`'s requests up to `pnum` wait here only for their turn: every one
    /// from the next in its stream on is held. Requests that wait behind a lost one, or were
    /// refused (the table of waiting requests full), are not answered as queued: that
    /// sender's timeout was a loss, and its timer must not stay backed off.
    fn waits_for_room(&self, i: usize, pnum: u64) -> bool {
        let x = &self.members[i];
        let next = x.last_pnum + 1;
        pnum >= next
            && self.waiting.range((x.id, next)..=(x.id, pnum)).count() as u64 == pnum - next + 1
    }

    /// Tell `from` where the sequence stands (a unicast BC_ACCEPT), once per queue turn.
    pub(super) fn nudge(&mut self, from: NodeId) {
        if self.nudge.len() < MAX_RETRANS_QUEUE && !self.nudge.contains(&from) {
            self.nudge.push_back(from);
        }
    }

    /// Order the waiting requests of member `i` that are next in its stream, while there is room.
    fn order_waiting(&mut self, m: &mut Member<'_>, i: usize) {
        loop {
            let x = &self.members[i];
            let key = (x.id, x.last_pnum + 1);
            let Some(w) = self.waiting.get(&key) else {
                return;
            };
            if !self.may_order_next(m, i, w.frag_index) {
                return;
            }
            if let Some(w) = self.waiting.remove(&key) {
                self.order_request(m, i, w);
            }
        }
    }

    /// Order every member's waiting requests that are next in its stream.
    pub(super) fn order_all_waiting(&mut self, m: &mut Member<'_>) {
        if self.waiting.is_empty() {
            return;
        }
        for i in 0..self.members.len() {
            self.order_waiting(m, i);
        }
    }

    /// Whether member `i`'s next request (fragment `frag_index`) may be ordered now: the member
    /// is still in, the history has room, the sequencer is not handing over, and no join waits
    /// for a message boundary. Notes a needed sync when the history is what stops it.
    fn may_order_next(&mut self, m: &Member<'_>, i: usize, frag_index: u16) -> bool {
        let room = self.has_room(m);
        if self.members[i].departed.is_some() || !room {
            self.sync_due = true;
            return false;
        }
        frag_index != 0 || self.pending_joins.is_empty()
    }

    /// Order member `i`'s next request.
    fn order_request(&mut self, m: &mut Member<'_>, i: usize, w: Waiting) {
        let x = &mut self.members[i];
        x.last_pnum += 1;
        x.mid_message = w.frag_index + 1 < w.frag_count;
        let (id, pnum) = (x.id, x.last_pnum);
        // A copy that waited (a repeat arrived while it was next) would never be taken out
        // again, and would hold a place in the bounded table for good.
        self.waiting.remove(&(id, pnum));
        self.assign(
            m,
            Entry {
                kind: EntryKind::Data,
                sender: id,
                pnum,
                frag_index: w.frag_index,
                frag_count: w.frag_count,
                payload: Some(w.payload),
                bb: w.bb,
            },
        );
    }

    /// Owe `to` the entries `[from, until)` of what this sequencer ordered and still holds.
    fn owe(&self, m: &mut Member<'_>, to: NodeId, mut ranges: SeqRanges) {
        ranges.clip(m.hist.buffer.base(), self.next_seq);
        if m.retrans.owe(to, ranges, m.now, Budget::of(m.cfg)) {
            m.stats.retrans_cut += 1;
        }
    }

    /// BC_JOINREQ from `from`.
    pub(super) fn on_join_req(&mut self, m: &mut Member<'_>, from: NodeId) {
        if let Some(x) = self.members.iter().find(|x| x.id == from) {
            if x.departed.is_none() {
                // Its join is ordered but it missed the broadcast: send it again.
                let from_seq = x.join_seq.max(m.hist.buffer.base());
                self.owe(m, from, SeqRanges::single(from_seq, self.next_seq));
            }
            return;
        }
        if self.leaving.is_some() {
            return; // the successor admits it
        }
        if !self.pending_joins.contains(&from) && self.pending_joins.len() < MAX_RETRANS_QUEUE {
            self.pending_joins.push_back(from);
        }
        self.order_pending_joins(m);
    }

    /// Whether a new message may start: not while joins wait for half-ordered messages.
    fn may_start_message(&self) -> bool {
        self.pending_joins.is_empty()
    }

    /// Order waiting joins once no message is half ordered (a joiner could not reassemble it).
    pub(super) fn order_pending_joins(&mut self, m: &mut Member<'_>) {
        while let Some(&id) = self.pending_joins.front() {
            if self.leaving.is_some()
                || self.members.iter().any(|x| x.mid_message)
                || !self.has_room(m)
            {
                return;
            }
            self.pending_joins.pop_front();
            if self.current_member_ids().len() >= m.cfg.max_members_effective() {
                // Full: the joiner is told at once (a joiner that waited would wait for as
                // long as nobody leaves, without knowing why).
                m.counters.backpressure_refusals += 1;
                m.stats.joins_refused += 1;
                if self.refuse.len() < MAX_RETRANS_QUEUE && !self.refuse.contains(&id) {
                    self.refuse.push_back(id);
                }
                continue;
            }
            self.order_join(m, id);
        }
    }

    /// BC_LEAVEREQ from `from`, which delivered below `expect`.
    pub(super) fn on_leave_req(&mut self, m: &mut Member<'_>, from: NodeId, expect: u64) {
        let Some(i) = self.member_index(from) else {
            return;
        };
        self.note_member_state(i, expect, 0);
        match self.members[i].departed {
            Some((seq, _)) => self.owe(m, from, SeqRanges::single(seq, seq + 1)),
            // Fenced: the leaver asks again.
            None if self.leaving.is_none() && self.fence.is_none() => {
                if m.hist.has_slot(self.next_seq) {
                    self.order_leave(m, from);
                } else {
                    m.counters.backpressure_refusals += 1;
                    self.sync_due = true;
                }
            }
            None => {}
        }
    }

    /// BC_STATE from `from`: note where it stands and, when asked, nudge it. `false`: not a
    /// member of the ordering view.
    pub(super) fn on_status(&mut self, from: NodeId, expect: u64, held: u64, ask: bool) -> bool {
        let Some(i) = self.member_index(from) else {
            return false;
        };
        self.note_member_state(i, expect, held);
        if ask {
            self.nudge(from);
        }
        true
    }

    /// BC_RETRANS for `ranges` from a member that delivered below `expect`.
    pub(super) fn on_retrans(
        &mut self,
        m: &mut Member<'_>,
        from: NodeId,
        ranges: SeqRanges,
        expect: u64,
    ) {
        if let Some(i) = self.member_index(from) {
            self.note_member_state(i, expect, 0);
            self.owe(m, from, ranges);
        }
    }

    /// A departing sequencer whose successor orders knows the successor delivered its leave.
    pub(super) fn note_successor_orders(&mut self, from: NodeId, ptype: u8) {
        let (Some(seq), Some(succ)) = (self.leaving, self.successor) else {
            return;
        };
        let sequencing = matches!(ptype, ptype::ORDERED | ptype::ACCEPT | ptype::SYNC);
        if from == succ && sequencing {
            if let Some(x) = self.members.iter_mut().find(|x| x.id == succ) {
                x.expect = x.expect.max(seq + 1);
            }
        }
    }

    /// Order own fragments locally (the sequencer needs no network to reach itself).
    pub(super) fn order_local(&mut self, m: &mut Member<'_>) {
        if m.sender.unsent < m.sender.outq.len() && !self.has_room(m) {
            // History full: ask the members where they stand so that it can be purged.
            self.sync_due = true;
        }
        while m.sender.unsent < m.sender.outq.len() && self.has_room(m) {
            let f = m.sender.outq[m.sender.unsent].clone();
            if f.frag_index == 0 && !self.may_start_message() {
                break;
            }
            let me = m.me;
            if let Some(i) = self.member_index(me) {
                let x = &mut self.members[i];
                x.last_pnum = f.pnum;
                x.mid_message = f.frag_index + 1 < f.frag_count;
            }
            self.assign(
                m,
                Entry {
                    kind: EntryKind::Data,
                    sender: me,
                    pnum: f.pnum,
                    frag_index: f.frag_index,
                    frag_count: f.frag_count,
                    payload: Some(f.payload),
                    // The sequencer's own messages always go out with their data (Fig. 14).
                    bb: false,
                },
            );
            debug_assert!(
                f.pnum > m.sender.own_ordered,
                "own fragments are ordered in order"
            );
            m.sender.own_ordered = f.pnum;
            m.sender.unsent += 1;
        }
    }

    /// Recompute acceptance and stability from the members' reports, purge what everyone has.
    pub(super) fn bookkeeping(&mut self, m: &mut Member<'_>) {
        let me = m.me;
        let r = m.cfg.resilience as usize;
        let next_deliver = m.hist.next_deliver;
        let now = m.now;
        let next_seq = self.next_seq;
        if let Some(x) = self.members.iter_mut().find(|x| x.id == me) {
            x.expect = next_deliver;
            x.held_next = next_seq;
        }
        self.drop_departed(me, now);
        let (accepted_before, stable_before) = (m.hist.accepted_next, m.hist.stable);
        let accept_point = self.accept_point(me, r, m.hist.accepted_next);
        if accept_point > m.hist.accepted_next {
            m.hist.accepted_next = accept_point;
            self.accept_due = true;
        }
        let stable = self.stable_point(next_deliver);
        m.hist.stable = m.hist.stable.max(stable);
        // Completion: as many holders as a reset needs (a majority under the majority policy),
        // so that every group formed after a failure holds a completed send.
        let n = self.members.iter().filter(|x| x.departed.is_none()).count();
        let need = m.cfg.completion_holders(n);
        let complete = if need <= r {
            m.hist.accepted_next
        } else {
            self.accept_point(me, need, m.hist.complete_next)
        };
        let complete = complete.max(m.hist.stable).min(m.hist.accepted_next);
        if complete > m.hist.complete_next {
            m.hist.complete_next = complete;
            self.accept_due = true;
        }
        // Acceptance and stability only move forward; nothing is accepted before it is
        // ordered.
        debug_assert!(m.hist.accepted_next >= accepted_before && m.hist.stable >= stable_before);
        debug_assert!(accept_point <= self.next_seq);
        self.check_invariants(me, m.cfg.history_capacity_msgs);
    }

    /// Whether the sequencer's own leave may be ordered: not ordered yet, and room for it.
    pub(super) fn may_leave(&self, hist: &History) -> bool {
        self.fence.is_none() && self.leaving.is_none() && hist.has_slot(self.next_seq)
    }

    /// This sequencer stood still until `now`: fence the order (see [`Fence`]).
    pub(super) fn raise_fence(&mut self, me: NodeId, now: Time) {
        self.fences = self.fences.wrapping_add(1).max(1);
        self.fence = Fence::raise(me, &self.current_member_ids(), self.fences, now);
    }

    /// BC_ALIVE with `token` from `from`. Returns `true` if it lifted the fence.
    pub(super) fn on_alive(&mut self, me: NodeId, from: NodeId, token: u32) -> bool {
        let members = self.current_member_ids();
        let lifted = self
            .fence
            .as_mut()
            .is_some_and(|f| f.answer(me, &members, from, token));
        if lifted {
            self.fence = None;
        }
        lifted
    }

    /// The fence's probe, if one is due at `now`: its token.
    pub(super) fn fence_probe(&mut self, now: Time, timeout: Duration) -> Option<u32> {
        self.fence.as_mut()?.probe(now, timeout)
    }

    /// When the fence's next probe is due.
    pub(super) fn fence_deadline(&self) -> Option<Time> {
        self.fence.as_ref().map(Fence::deadline)
    }

    /// Whether a departing sequencer is done: its leave delivered here and its successor has
    /// it (or, with no successor, every member whose leave it ordered has it), or the handover
    /// timer ran out.
    pub(super) fn handed_over(&self, m: &Member<'_>) -> bool {
        let Some(seq) = self.leaving else {
            return false;
        };
        if m.hist.next_deliver <= seq {
            return false;
        }
        // Once the successor has the handover it holds everything up to it and answers the
        // others (they follow whoever orders the newest messages), so we may go. Without a
        // successor that has it the group would have no sequencer: wait for it, up to the
        // linger bound (it may have left in turn; one that never got the handover is a case
        // for crash recovery).
        let done = match self.successor {
            Some(id) => self.members.iter().any(|x| x.id == id && x.expect > seq),
            // The last member: nobody takes over the members whose leaves we ordered, and one
            // that lacks its leave can only get it from us. Gone at once, we would strand it:
            // it would find us failed and, with the others that lack theirs, reset the group
            // into views that reuse the ids of ours. So wait until each has its leave
            // (`drop_departed` forgets them then), up to the linger bound.
            None => !self
                .members
                .iter()
                .any(|x| x.id != m.me && x.departed.is_some()),
        };
        done || m.timers.due(Timer::Handover, m.now)
    }

    /// When the sequencer must next send BC_SYNC: when asked for (history full, new role), or
    /// when it has been quiet with its tail unaccepted (r > 0: an acknowledgement was lost) or
    /// unconfirmed (a member may have missed the last broadcast). Rate-limited to one per half
    /// `rto`. `handle_timeout`, `poll_timeout` and `poll_transmit` all use this one rule, so a
    /// due timer always leads to a transmission.
    pub(super) fn sync_at(
        &self,
        hist: &History,
        rto: Duration,
        interval: Duration,
    ) -> Option<Time> {
        let allowed = self.next_sync_allowed(hist, rto);
        let quiet_since = self.last_multicast.max(self.last_sync);
        let at = if self.sync_due {
            allowed
        } else if hist.accepted_next < self.next_seq || hist.complete_next < self.next_seq {
            quiet_since + rto
        } else if hist.stable < self.next_seq {
            quiet_since + interval
        } else {
            return None;
        };
        Some(at.max(allowed))
    }

    /// When the first departed member still waited for times out.
    pub(super) fn linger_deadline(&self) -> Option<Time> {
        self.members
            .iter()
            .filter_map(|x| x.departed.map(|d| d.1))
            .min()
    }

    /// New entries to multicast, `[from, until)`, none below `base` (entries every member
    /// delivered, such as a lone sequencer's own, need no broadcast).
    pub(super) fn unsent(&mut self, base: u64) -> Option<(u64, u64)> {
        let from = self.bcast_next.max(base);
        if from < self.next_seq {
            return Some((from, self.next_seq));
        }
        self.bcast_next = from;
        None
    }

    /// Entries up to `end` went out at `now` (acceptance with them).
    pub(super) fn multicast_sent(&mut self, end: u64, now: Time) {
        debug_assert!(self.bcast_next < end && end <= self.next_seq);
        self.bcast_next = end;
        self.last_multicast = now;
        self.accept_due = false;
    }

    /// The next short datagram owed, in order: gap asks, nudges, acceptance, then BC_SYNC (no
    /// more than one per half `rto`).
    pub(super) fn next_announce(
        &mut self,
        now: Time,
        rto: Duration,
        hist: &History,
        me: NodeId,
    ) -> Option<Announce> {
        if let Some((to, from, until)) = self.gap_asks.pop_front() {
            return Some(Announce::ReqGap { to, from, until });
        }
        if let Some(to) = self.nudge.pop_front() {
            return Some(Announce::Nudge(to));
        }
        if let Some((to, pnum)) = self.queued.pop_front() {
            return Some(Announce::Queued { to, pnum });
        }
        if let Some(to) = self.refuse.pop_front() {
            return Some(Announce::Refuse(to));
        }
        if self.accept_due {
            self.accept_due = false;
            self.last_multicast = now;
            return Some(Announce::Accept);
        }
        if self.sync_due && now >= self.next_sync_allowed(hist, rto) {
            self.start_sync_round(me, hist.stable, now);
            return Some(Announce::Sync);
        }
        None
    }
}
