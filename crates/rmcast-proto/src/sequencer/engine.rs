//! The sequencer state machine: one struct plays every role of the Amoeba paper's section 5.2 — sender,
//! member, and (when it created the group or inherited the role) sequencer. Its parts keep
//! their own state and invariants: [`Sender`] (own messages), [`History`] (the history buffer
//! and delivery), [`Ordering`] (the sequencer's duties), [`Succession`] (what a new sequencer
//! inherits) and [`RecoveryState`] (crash recovery). This file holds the struct, its
//! construction, and the inputs every part reacts to: datagrams, timers, and the `pump` that
//! follows every input.

use super::config::Config;
use super::history::History;
use super::ordering::{Member, MemberState, Ordering};
use super::packet::{self, ptype, Body, SeqRanges, SeqState};
use super::recovery::state::RecoveryState;
use super::retrans::{Budget, Retransmissions};
use super::sender::Sender;
use super::shared::{Phase, SeqTimers, Stats, Timer};
use super::succession::Succession;
use crate::common::shell::{self, EventQueue};
use crate::common::{PartsIn, PartsOut, Reassembly, Run, TooLarge};
use crate::engine::{Counters, Destination, Event, GroupInfo, NodeId, Qos, SendError, Time, View};
use crate::wire::{self, EngineKind, Header};
use bytes::Bytes;
use std::time::Duration;

/// How many times the repair timeout a fruitless NACK's repeat waits at most (160 ms at the
/// default 40 ms): long enough to let a congested sequencer drain, short enough that a member
/// catches up soon once it does. Measured on the Amoeba experiment's large-message runs, with
/// backoff from the first fruitless NACK: 4 of its 8 slowest runs complete with 4, 3 with 8
/// or 16, 2 with 2.
pub(super) const NACK_BACKOFF: u32 = 4;

/// One member's instance of the sequencer protocol; it becomes the sequencer when it creates the
/// group or inherits the role when the sequencer leaves.
#[derive(Clone)]
pub struct Sequencer {
    pub(super) cfg: Config,
    pub(super) me: NodeId,
    pub(super) phase: Phase,
    pub(super) incarnation: u32,
    pub(super) now: Time,
    /// The view delivered last.
    pub(super) view: View,
    /// The member side: history buffer, delivery, gap repair.
    pub(super) hist: History,
    /// The sequencer side, while this member orders.
    pub(super) ord: Option<Ordering>,
    /// Where requests, NACKs and status go: the node heard ordering the newest messages.
    pub(super) sequencer_hint: NodeId,
    /// The sender side: own messages until they are delivered back.
    pub(super) sender: Sender,
    /// The member's own timers (join, leave, completion, handover), by [`Timer`].
    pub(super) timers: SeqTimers,
    /// While joining to merge into another group of this name: a member of that group (its
    /// coordinator when the merge was decided). Only a group that has it admits us; other
    /// groups that heard an untargeted request would each admit us, and keep a member that
    /// never comes until they found it failed.
    pub(super) join_into: Option<NodeId>,
    /// The incarnation in which this joiner gave up its join, having told a coordinator of a
    /// reset that it holds nothing ([`VoteKind::Joining`](super::packet::VoteKind)): its join
    /// entry of that incarnation is ignored, so that it never votes in a reset of it.
    pub(super) renounced: Option<u32>,
    /// The next status report asks the sequencer for its state (completion stalled).
    pub(super) ask_state: bool,
    /// A last status owed to whoever waits to see us have a leave: the departing sequencer
    /// (when it handed over), or the group (when we left: the sequencer that ordered our leave,
    /// and a member that may take over from it before it hears from us).
    pub(super) farewell: Option<Destination>,
    pub(super) leave_requested: bool,
    /// What a new sequencer inherits from the delivered order.
    pub(super) succession: Succession,
    /// Retransmissions this member answers (the sequencer, or anyone during recovery).
    pub(super) retrans: Retransmissions,
    /// Failure detection and crash recovery (see `recovery`).
    pub(super) rec: RecoveryState,
    pub(super) events: EventQueue,
    /// A submit happened since the last [`Sequencer::pump`]: submits only queue, and the next
    /// poll pumps once for all of them, so that a burst of sends is ordered, delivered and
    /// accounted in one pass instead of one pass per message.
    pub(super) pump_due: bool,
    pub(super) counters: Counters,
    /// Datagrams longer than the path takes (a view of many members, a reset's result), cut
    /// into parts still to go.
    pub(super) parts_out: PartsOut,
    /// Such datagrams from others, put together again.
    pub(super) parts_in: PartsIn,
    /// The sequencer's own counters ([`Engine::engine_counters`](crate::Engine::engine_counters)).
    pub(super) stats: Stats,
}

impl Sequencer {
    fn new(cfg: Config, me: NodeId, now: Time, phase: Phase) -> Sequencer {
        if let Err(e) = cfg.validate() {
            panic!("invalid sequencer::Config: {e}");
        }
        Sequencer {
            me,
            phase,
            incarnation: 0,
            now,
            view: View {
                id: 0,
                seq: 0,
                members: Vec::new(),
                coordinator: me,
                joined: None,
                left: None,
            },
            hist: History::new(
                cfg.history_capacity_msgs,
                Reassembly::new(&cfg.fragmenter()),
            ),
            ord: None,
            sequencer_hint: me,
            sender: Sender::new(&cfg),
            timers: SeqTimers::new(),
            join_into: None,
            renounced: None,
            farewell: None,
            ask_state: false,
            leave_requested: false,
            succession: Succession::default(),
            retrans: Retransmissions::default(),
            rec: RecoveryState::new(&cfg, now),
            events: EventQueue::new(cfg.max_pending_events),
            pump_due: false,
            counters: Counters::default(),
            parts_out: PartsOut::new(),
            parts_in: PartsIn::new(),
            stats: Stats::default(),
            cfg,
        }
    }

    /// Create a new group with this node as its only member and sequencer.
    pub fn create(cfg: Config, me: NodeId, now: Time) -> Sequencer {
        let mut s = Sequencer::new(cfg, me, now, Phase::Member);
        s.ord = Some(Ordering::new(0, Vec::new(), 0, now, false));
        s.ordering(|o, m| o.order_join(m, me));
        s.pump();
        s
    }

    /// Start joining an existing group; an [`Event::View`] including this node follows.
    pub fn join(cfg: Config, me: NodeId, now: Time) -> Sequencer {
        let mut s = Sequencer::new(cfg, me, now, Phase::Joining);
        s.timers.arm(Timer::Join, now);
        s
    }

    /// Join again as a new member ([`crate::Engine::rejoin`]), or with `alone` create a group
    /// of one ([`crate::Engine::start_alone`]): a fresh state, with the message numbering, the
    /// counters and the events not yet taken kept. The stream goes on after the last number
    /// used, and the first request says so (`ordered_through`), so the sequencer that admits us
    /// orders it at once (alone, we order our own locally, from any number).
    pub(super) fn start_over(&mut self, now: Time, alone: bool) {
        let now = now.max(self.now);
        let mut fresh = if alone {
            Sequencer::create(self.cfg.clone(), self.me, now)
        } else {
            Sequencer::join(self.cfg.clone(), self.me, now)
        };
        let next = self.sender.next_pnum;
        fresh.sender.next_pnum = next;
        fresh.sender.own_ordered = next - 1;
        fresh.sender.max_sent_pnum = next - 1;
        fresh.counters = std::mem::take(&mut self.counters);
        fresh.stats = self.stats;
        // The old events first; a new group's first view after them.
        let mut events = std::mem::replace(&mut self.events, EventQueue::new(1));
        events.append(&mut fresh.events);
        fresh.events = events;
        *self = fresh;
    }

    /// [`crate::Engine::limit_datagram_bytes`]: new messages are cut for `max`-byte
    /// datagrams, runs of ordered messages and repairs are packed to it, and messages cut that
    /// small by others are taken whole. Refused (`false`) below what a fragment needs.
    pub(super) fn limit_datagram_bytes(&mut self, max: usize) -> bool {
        if max >= self.cfg.max_datagram_bytes {
            return true;
        }
        let mut cfg = self.cfg.clone();
        cfg.max_datagram_bytes = max;
        if cfg.validate().is_err() {
            return false;
        }
        self.cfg.max_datagram_bytes = max;
        let fragmenter = self.cfg.fragmenter();
        self.hist.reassembly.allow(&fragmenter);
        self.sender.fragmenter = fragmenter;
        true
    }

    pub(super) fn header(&self, ptype: u8) -> Header {
        Header {
            engine: EngineKind::Sequencer,
            ptype,
            flags: 0,
            group: self.cfg.group,
            incarnation: self.incarnation,
            sender: self.me,
        }
    }

    /// Timeout for repair traffic (see [`Sender::repair_rto`]).
    pub(super) fn repair_rto(&self) -> Duration {
        self.sender.repair_rto(&self.cfg)
    }

    /// The limits of the retransmissions this member sends: the hold of repeats only while it
    /// orders (see [`Budget::without_hold`]).
    pub(super) fn retrans_budget(&self) -> Budget {
        let budget = Budget::of(&self.cfg);
        if self.is_sequencer() {
            budget
        } else {
            budget.without_hold()
        }
    }

    pub(super) fn is_sequencer(&self) -> bool {
        self.ord.is_some()
    }

    /// Run `f` on the ordering part with this member's state, if this member orders.
    pub(super) fn ordering<R>(
        &mut self,
        f: impl FnOnce(&mut Ordering, &mut Member<'_>) -> R,
    ) -> Option<R> {
        let o = self.ord.as_mut()?;
        let mut m = Member {
            cfg: &self.cfg,
            me: self.me,
            now: self.now,
            hist: &mut self.hist,
            sender: &mut self.sender,
            retrans: &mut self.retrans,
            counters: &mut self.counters,
            stats: &mut self.stats,
            timers: &mut self.timers,
        };
        Some(f(o, &mut m))
    }

    /// Go to phase `to` (see [`Phase`] for the transitions).
    pub(super) fn set_phase(&mut self, to: Phase) {
        debug_assert!(self.phase.may_become(to), "{:?} -> {to:?}", self.phase);
        self.phase = to;
    }

    /// Take over ordering after the sequencer left: everything up to its leave is delivered here.
    pub(super) fn become_sequencer(&mut self, next_seq: u64) {
        debug_assert!(self.ord.is_none(), "one ordering part at a time");
        // Stability is learnt from what the sequencer claims: never past what is ordered.
        let floor = self.hist.stable.min(next_seq);
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
                    answered_round: 0,
                });
            }
        }
        // Learn where every member stands before history fills or acceptance stalls.
        let o = Ordering::new(next_seq, members, self.view.id, self.now, true);
        self.ord = Some(o);
        // No hold from before applies to what this sequencer sends.
        self.retrans.clear();
        // Entries held at or past the first number we assign belong to no order we go on
        // with (another sequencer's of this incarnation, forged or cut off: found by the
        // `sequencer_state` fuzz target, whose sequencer then found its next slot taken).
        self.hist.truncate(next_seq);
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
            answered_round: 0,
        }
    }

    /// A sequencer leaves once its own messages are ordered and there is room for the leave.
    pub(super) fn sequencer_can_leave(&self) -> bool {
        self.leave_requested
            && self.timers.is_armed(Timer::Leave)
            && self.sender.unsent == self.sender.outq.len()
            && self.sender.awaiting_complete.is_empty()
            && self.ord.as_ref().is_some_and(|o| o.may_leave(&self.hist))
    }

    /// When the sequencer must next send BC_SYNC (see [`Ordering::sync_at`]).
    pub(super) fn sync_at(&self) -> Option<Time> {
        let interval = Duration::from_millis(self.cfg.sync_interval_ms);
        self.ord
            .as_ref()?
            .sync_at(&self.hist, self.repair_rto(), interval)
    }

    pub(super) fn submit_message(
        &mut self,
        now: Time,
        payload: Bytes,
        _qos: Qos,
    ) -> Result<u64, SendError> {
        self.run(now);
        if self.phase == Phase::Member && self.recovering() {
            return Err(SendError::GroupFailed);
        }
        if self.phase != Phase::Member
            || self.leave_requested
            || self.ord.as_ref().is_some_and(|o| o.leaving.is_some())
        {
            return Err(SendError::NotMember);
        }
        let payload_len = payload.len();
        let bb = payload_len >= self.cfg.bb_threshold();
        let fragments = self
            .sender
            .split(payload)
            .map_err(|TooLarge| SendError::TooLarge)?;
        // A message larger than the window goes alone.
        let queued = self.sender.outq.len();
        let full = queued + fragments.fragment_count() > self.cfg.send_window_msgs
            || self.sender.outq_bytes + payload_len > self.cfg.send_window_bytes;
        if full && queued > 0 {
            return Err(SendError::WouldBlock);
        }
        let msg = self.sender.push_message(fragments, bb);
        self.counters.submitted += 1;
        self.pump_due = true;
        Ok(msg)
    }

    /// Where the sequence stands as this member piggybacks it.
    pub(super) fn seq_state(&self) -> SeqState {
        let next_seq = self
            .ord
            .as_ref()
            .map(|o| o.next_seq)
            .unwrap_or(self.hist.seq_next_known);
        let stable = self.hist.stable.min(self.hist.accepted_next);
        SeqState {
            accepted_next: self.hist.accepted_next,
            stable,
            next_seq,
            complete_next: self
                .hist
                .complete_next
                .clamp(stable, self.hist.accepted_next),
        }
    }

    /// Everything that follows an input: order, account, deliver, look for gaps.
    pub(super) fn pump(&mut self) {
        self.pump_due = false;
        self.refresh_detector();
        if self.phase == Phase::Member {
            self.ordering(|o, m| {
                o.order_pending_joins(m);
                o.order_all_waiting(m);
                o.order_local(m);
                o.bookkeeping(m);
            });
        }
        self.deliver();
        if self.phase == Phase::Member {
            // Delivery may have moved our own expect; recompute stability. A departing
            // sequencer goes once its successor has the handover.
            let handed_over = self.ordering(|o, m| {
                o.bookkeeping(m);
                m.hist.purge();
                o.handed_over(m)
            });
            if handed_over == Some(true) {
                self.set_phase(Phase::Left);
                self.events.push_back(Event::Left);
            }
        }
        self.release_completions();
        self.check_gap();
        self.refresh_detector();
        self.sender.check_invariants();
        if self.phase == Phase::Member {
            self.hist.check_invariants();
        }
    }

    /// The earliest deadline among the engine's timers.
    pub(super) fn next_timeout(&self) -> Option<Time> {
        if self.phase == Phase::Left {
            return None;
        }
        if self.pump_due {
            // Submitted messages wait for a poll: one is due now.
            return Some(self.now);
        }
        // The member's own timers, and the deadlines of its parts, in one table.
        let mut t = self.timers.clone();
        // The leave timer only runs while the leave can go out; otherwise an input unblocks it
        // (in recovery mode, the reset).
        let leave_can_go = if self.is_sequencer() {
            self.sequencer_can_leave()
        } else {
            self.sender.outq.is_empty()
                && self.sender.awaiting_complete.is_empty()
                && !self.recovering()
        };
        if !leave_can_go {
            t.clear(Timer::Leave);
        }
        let requests = !self.is_sequencer() && self.sender.has_unordered();
        t.set(
            Timer::Request,
            self.sender.req_deadline.filter(|_| requests),
        );
        t.set(Timer::Nack, self.hist.gaps.deadline());
        t.set(Timer::Sync, self.sync_at());
        t.set(Timer::Probe, self.rec.detector.next_timeout());
        t.set(Timer::Recovery, self.recovery_deadline());
        let handover = self.ord.as_ref().filter(|o| o.leaving.is_some());
        if handover.is_none() || self.timers.get(Timer::Handover) <= Some(self.now) {
            t.clear(Timer::Handover);
        }
        t.set(
            Timer::Linger,
            self.ord.as_ref().and_then(Ordering::linger_deadline),
        );
        t.set(
            Timer::Fence,
            self.ord.as_ref().and_then(Ordering::fence_deadline),
        );
        t.set(Timer::Hold, self.retrans.deadline(self.retrans_budget()));
        t.earliest().map(|(at, _)| at)
    }

    /// Whether a datagram of another incarnation is taken anyway: a joiner follows a newer
    /// incarnation that speaks to its join, and joins are welcome from any. Other ones are
    /// dropped; a newer one makes us ask what happened, an older one's sender may be told (see
    /// `recovery`).
    ///
    /// A joiner moves only for the ordered entries that admit it (looked into first, in
    /// [`Sequencer::on_packet`]), a refusal, or an invitation into a reset. Several groups of
    /// one name may be heard while it joins (a merge): when any datagram of a newer
    /// incarnation moved it, another group's traffic, or another joiner's request, took it
    /// away from the incarnation of the group that admitted it, whose admission it then
    /// dropped as older, for as long as it went on hearing them (formation seed 1492: 10 s).
    pub(super) fn accept_incarnation(&mut self, header: &Header) -> bool {
        let newer = header.incarnation > self.incarnation;
        match self.phase {
            Phase::Joining if newer && header.ptype == ptype::ORDERED => true,
            Phase::Joining
                if newer && matches!(header.ptype, ptype::REFORM_REQ | ptype::JOIN_REFUSED) =>
            {
                self.incarnation = header.incarnation;
                true
            }
            Phase::Member if header.ptype == ptype::JOIN_REQ => true,
            Phase::Member if newer => {
                self.note_newer(header.sender);
                false
            }
            Phase::Member => {
                self.note_older(header.sender, header.ptype);
                false
            }
            _ => false,
        }
    }

    /// A datagram the shell took (of this group, and of this incarnation or one
    /// [`Sequencer::accept_incarnation`] takes, or a BC_RESULT): decode the body, dispatch,
    /// pump.
    pub(super) fn on_packet(&mut self, now: Time, pkt: wire::Packet<'_>, datagram: &[u8]) {
        // One copy per datagram; every payload in it is a slice of this buffer (no per-message
        // allocation).
        let data = Bytes::copy_from_slice(datagram);
        let header = pkt.header;
        let body = match packet::decode_body(header.ptype, &data[shell::body_range(&pkt, datagram)])
        {
            Ok(b) => b,
            Err(_) => {
                self.counters.malformed_dropped += 1;
                return;
            }
        };
        let from = header.sender;
        if let Body::Result {
            incarnation,
            seq,
            stable,
            settled,
            view,
        } = body
        {
            // A result names its incarnation itself: it reaches members of older ones. Its
            // sender counts as heard only if it was entitled to send it (`on_result`).
            self.on_result(from, incarnation, seq, stable, settled, view);
            self.pump();
            return;
        }
        if header.incarnation != self.incarnation && header.ptype == ptype::ORDERED {
            // A joiner's BC_BCAST of a newer incarnation (`accept_incarnation`): its group is
            // that incarnation's only if the entries admit it.
            match &body {
                Body::Ordered { entries, .. } if self.names_own_join(entries.clone()) => {
                    self.incarnation = header.incarnation;
                }
                _ => {
                    self.counters.foreign_dropped += 1;
                    return;
                }
            }
        }
        debug_assert!(
            header.incarnation == self.incarnation || header.ptype == ptype::JOIN_REQ,
            "of another incarnation, the shell hands over only what accept_incarnation takes"
        );
        // A join request from the member we take for the sequencer says that it does not know
        // it is a member (it missed its admission and the handover to it, cut off): no sign
        // that anyone orders. Counted as one, it kept the group waiting for ever on a sequencer
        // that never would.
        let sequencer_joining =
            header.ptype == ptype::JOIN_REQ && from == self.sequencer_hint && !self.is_sequencer();
        if !sequencer_joining {
            self.rec.detector.heard(from, now);
            if from == self.sequencer_hint {
                self.rec.heard_sequencer = true;
                self.rec.last_heard_sequencer = now;
            }
        }
        if let Some(o) = self.ord.as_mut() {
            o.note_successor_orders(from, header.ptype);
        }
        self.dispatch(from, body, &data);
        self.pump();
    }

    /// Hand a decoded body to its handler. In recovery mode only what the recovery needs is
    /// taken (Amoeba paper section 4): repairs, invitations, votes; nothing that moves the old order.
    fn dispatch(&mut self, from: NodeId, body: Body<'_>, data: &Bytes) {
        let seq_role = self.is_sequencer();
        let recovering = self.recovering();
        // Roles, not claims: a member takes ordering state only from the member entitled to
        // order here (see `orders_here`), never from another member of the view or an id it
        // does not know: one forged BC_BCAST would otherwise put its entries in the total order.
        // A joiner admitted before it installed any view (its first view entry is still on the
        // way, perhaps from a sequencer that took over since) has no roles to check yet.
        let claim = match &body {
            Body::Ordered { state, .. } | Body::Accept(state) | Body::Sync(state) => {
                Some(state.next_seq)
            }
            _ => None,
        };
        if claim.is_some_and(|next_seq| {
            self.phase == Phase::Member
                && !self.view.members.is_empty()
                && !self.orders_here(from, next_seq)
        }) {
            self.stats.ordering_refused += 1;
            return;
        }
        match body {
            Body::BcastReq { .. }
            | Body::Accept(_)
            | Body::Sync(_)
            | Body::Status { .. }
            | Body::LeaveReq { .. }
            | Body::ReqGap { .. }
            | Body::Queued { .. }
                if recovering => {}
            // A merging joiner wants the group that has `into`, not ours.
            Body::JoinReq { into } if into.is_some_and(|m| !self.view.members.contains(&m)) => {}
            Body::JoinReq { .. } if recovering => self.serve_admitted_joiner(from),
            Body::BcastReq {
                bb,
                expect,
                held_next,
                ordered_through,
                entries,
            } => {
                if seq_role {
                    let report = (expect, held_next, ordered_through);
                    self.ordering(|o, m| o.on_request(m, from, report, entries, (bb, data)));
                } else if bb && self.phase == Phase::Member {
                    self.on_bb_data(from, entries, data);
                }
            }
            Body::Ordered {
                state,
                base_seq,
                entries,
            } => self.on_ordered(from, state, base_seq, entries, data),
            Body::Accept(s) => self.apply_state(from, s),
            Body::Sync(s) => self.on_sync(from, s, seq_role),
            Body::Status {
                expect,
                held_next,
                ask,
            } => {
                let known = self
                    .ord
                    .as_mut()
                    .is_some_and(|o| o.on_status(from, expect, held_next, ask));
                if !known && self.phase == Phase::Member {
                    // A leaver's farewell: should we take over, we need not wait for it.
                    self.succession.has_leave(from, expect);
                }
            }
            Body::Retrans { ranges, expect } => self.on_retrans(from, ranges, expect, recovering),
            Body::ReqGap { from: f, to } => {
                // Only the sequencer of our view asks; what it asks for is our own stream.
                if !seq_role && self.phase == Phase::Member && from == self.sequencer_hint {
                    let now = self.now;
                    if !self.sender.on_gap(f, to, now) {
                        self.stats.request_gaps_stale += 1;
                    }
                }
            }
            Body::Queued { pnum } => {
                // Only the sequencer of our view answers for our own stream.
                if !seq_role && self.phase == Phase::Member && from == self.sequencer_hint {
                    let now = self.now;
                    self.sender.on_queued(pnum, now);
                }
            }
            Body::JoinReq { .. } => {
                self.ordering(|o, m| o.on_join_req(m, from));
            }
            Body::JoinRefused { limit } => {
                // Only a joiner takes it, and only once: a member ignores it (a forged one
                // cannot expel anybody).
                if self.phase == Phase::Joining {
                    self.set_phase(Phase::Left);
                    self.events
                        .push_back(Event::Recovery(crate::Recovery::Refused { limit }));
                }
            }
            Body::LeaveReq { expect } => {
                self.ordering(|o, m| o.on_leave_req(m, from, expect));
            }
            Body::Result { .. } => unreachable!("handled in on_datagram"),
            other => self.on_recovery_body(from, other),
        }
    }

    /// Whether `from` may send ordering state (claiming numbers up to `next_seq`) to this
    /// member: the sequencer of its view, the one it follows (after a reset, a handover), the
    /// successor named by a handover it holds but has not delivered yet, and in recovery the
    /// member it repairs from (the repairs are the old order's entries, which only they hold for
    /// it). A member that missed the handover altogether cannot know the successor, and its
    /// old sequencer goes once the successor has the handover: another member of the view that
    /// orders beyond all we know is followed, but only once the sequencer we follow has left a
    /// probe unanswered (a live one is heard within that time, so a member cannot take its
    /// role while it runs).
    fn orders_here(&self, from: NodeId, next_seq: u64) -> bool {
        from == self.view.coordinator
            || from == self.sequencer_hint
            || self.recovery_source(from)
            || self.named_by_held_view(from)
            || (!self.recovering()
                && self.view.members.contains(&from)
                && next_seq >= self.hist.seq_next_known
                && self.sequencer_quiet())
    }

    /// Whether the sequencer this member follows has been silent for longer than it takes a
    /// live one to answer a probe.
    fn sequencer_quiet(&self) -> bool {
        let answer =
            Duration::from_millis(self.cfg.alive_interval_ms) + self.rec.detector.probe_timeout();
        self.now.saturating_since(self.rec.last_heard_sequencer) >= answer
    }

    /// Whether a membership entry held here and not yet delivered names `from` as the
    /// sequencer: its successor orders the numbers after a handover before this member
    /// delivers it. Entries here came from members entitled to order, so the name is theirs.
    fn named_by_held_view(&self, from: NodeId) -> bool {
        // `seq_next_known` is what a sequencer claimed (up to 2^64): only the buffer's window
        // can hold an entry.
        let end = self.hist.seq_next_known.min(self.hist.buffer.limit());
        (self.hist.next_deliver..end).any(|s| {
            self.hist.buffer.get(s).is_some_and(|e| {
                e.kind != packet::EntryKind::Data
                    && e.payload
                        .as_deref()
                        .and_then(|p| crate::common::decode_view(p).ok())
                        .is_some_and(|(_, coordinator, _)| coordinator == from)
            })
        })
    }

    /// BC_SYNC: report where we stand.
    fn on_sync(&mut self, from: NodeId, s: SeqState, seq_role: bool) {
        self.apply_state(from, s);
        if self.phase == Phase::Member && !seq_role {
            self.hist.need_status = true;
        }
        if self.phase == Phase::Member && (seq_role || from != self.sequencer_hint) {
            // A departing sequencer asks who has its leave (its successor included): answer it
            // directly.
            self.farewell = Some(Destination::Peer(from));
        }
    }

    /// BC_RETRANS for `ranges`: served by the sequencer, or by a member during recovery.
    fn on_retrans(&mut self, from: NodeId, ranges: SeqRanges, expect: u64, recovering: bool) {
        self.counters.nacks_received += 1;
        if recovering {
            if self.recovery_invites(from) {
                self.queue_retrans(from, ranges);
            }
        } else {
            self.ordering(|o, m| o.on_retrans(m, from, ranges, expect));
        }
    }

    /// The member runs at `now` (every input: a datagram, a timer, a call). If it stood still
    /// long enough for the others to have gone on without it, a sequencer fences its order
    /// until a majority confirms its view ([`Fence`](crate::common::Fence)).
    pub(super) fn run(&mut self, now: Time) {
        self.now = self.now.max(now);
        // The detector's timer includes its heartbeat whenever it watches anyone.
        if self.rec.detector.run(now, true) != Run::Stalled || self.phase != Phase::Member {
            return;
        }
        self.stats.stalls += 1;
        let me = self.me;
        if let Some(o) = self.ord.as_mut() {
            o.raise_fence(me, now);
            if o.fence.is_some() {
                self.stats.fences_raised += 1;
            }
        }
    }

    /// BC_ALIVE answering a fence's probe (`token`): lift the fence once a majority answered.
    pub(super) fn on_fence_answer(&mut self, from: NodeId, token: u32) {
        let me = self.me;
        if self
            .ord
            .as_mut()
            .is_some_and(|o| o.on_alive(me, from, token))
        {
            self.stats.fences_lifted += 1;
        }
    }

    /// Timers fired at `now`.
    pub(super) fn on_timeout(&mut self, now: Time) {
        self.run(now);
        if self.phase == Phase::Left {
            return;
        }
        if self.sender.req_deadline.is_some_and(|d| now >= d) {
            self.on_request_timeout(now);
        }
        self.retrans.release(now, self.retrans_budget());
        let rto = self.repair_rto();
        let open = self
            .repair_target()
            .is_some_and(|(_, limit)| self.hist.held_next < limit);
        // A NACK that brought nothing is repeated later and later, up to NACK_BACKOFF times
        // the timeout (and the configured ceiling), and never sooner than the measured round.
        let ceiling =
            (rto * NACK_BACKOFF).min(Duration::from_millis(self.cfg.max_retrans_timeout_ms));
        if self.hist.gaps.on_timeout_backoff(now, open, rto, ceiling) {
            self.stats.nacks_backed_off += 1;
        }
        if self.sync_at().is_some_and(|t| now >= t) {
            if let Some(o) = self.ord.as_mut() {
                o.sync_due = true;
            }
        }
        if self.timers.due(Timer::Complete, now) {
            // Own sends wait for completion and nothing moved: ask where the sequence stands.
            self.timers.arm(Timer::Complete, now + 2 * rto);
            if !self.is_sequencer() {
                self.hist.need_status = true;
                self.ask_state = true;
            }
        }
        if let Some(suspect) = self.rec.detector.on_timeout(now) {
            self.member_failed(suspect);
        }
        self.recovery_timeout(now);
        self.pump();
    }

    /// Own requests went unanswered: resend them, and suspect a silent sequencer.
    fn on_request_timeout(&mut self, now: Time) {
        self.sender.req_deadline = None;
        // A sender that hears nothing from the sequencer over its retries declares it failed
        // (Amoeba paper section 5.2, SendToGroup).
        if self.rec.heard_sequencer {
            self.rec.silent_req_timeouts = 0;
        } else {
            self.rec.silent_req_timeouts += 1;
        }
        self.rec.heard_sequencer = false;
        // Never sooner than the probes would: a paused sequencer is not declared dead by the
        // backed-off retries of an impatient sender.
        let silent_for = now.saturating_since(self.rec.last_heard_sequencer);
        if self.cfg.alive_interval_ms > 0
            && self.rec.silent_req_timeouts > self.rec.detector.retries()
            && silent_for >= self.rec.detector.failure_timeout()
        {
            let suspect = self.sequencer_hint;
            self.member_failed(suspect);
        }
        self.counters.retransmissions += self.sender.on_request_timeout(now);
        self.stats.request_timeouts += 1;
    }

    pub(super) fn request_leave(&mut self, now: Time) {
        self.run(now);
        match self.phase {
            Phase::Joining => {
                self.set_phase(Phase::Left);
                self.events.push_back(Event::Left);
            }
            Phase::Member if !self.leave_requested => {
                self.leave_requested = true;
                self.timers.arm(Timer::Leave, now);
                if self.alone_in_recovery() {
                    // Nobody is left to order the leave or to hear it: done.
                    self.set_phase(Phase::Left);
                    self.ord = None;
                    self.refresh_detector();
                    self.events.push_back(Event::Left);
                    return;
                }
                self.pump();
            }
            _ => {}
        }
    }

    pub(super) fn next_event(&mut self) -> Option<Event> {
        if self.pump_due {
            self.pump();
        }
        let (e, resume) = self.events.pop();
        if resume && self.hist.next_deliver < self.hist.accepted_next {
            // Delivery paused on a full event queue; the application has made room.
            self.pump();
        }
        e
    }

    pub(super) fn group_info(&self) -> GroupInfo {
        GroupInfo {
            me: self.me,
            view: self.view.id,
            members: self.view.members.clone(),
            rank: self.view.members.iter().position(|m| *m == self.me),
            coordinator: (self.view.id > 0).then_some(self.view.coordinator),
            recovering: self.recovering(),
            incarnation: self.incarnation,
            guarantees: super::guarantees(self.cfg.resilience, self.cfg.majority_policy()),
            buffered_msgs: self.hist.buffer.len(),
            buffer_capacity_msgs: self.hist.buffer.capacity(),
            max_datagram_bytes: self.cfg.max_datagram_bytes,
        }
    }

    pub(super) fn describe_state(&self) -> String {
        format!(
            "phase {:?} inc {} view {} {:?} seq {:?} hint {} deliver {} held {} accepted {} \
             known {} stable {} base {} outq {} unsent {} own_ordered {} recovery {:?} \
             awaiting {:?} repair {:?}",
            self.phase,
            self.incarnation,
            self.view.id,
            self.view.members,
            self.ord.as_ref().map(|o| o.next_seq),
            self.sequencer_hint,
            self.hist.next_deliver,
            self.hist.held_next,
            self.hist.accepted_next,
            self.hist.seq_next_known,
            self.hist.stable,
            self.hist.buffer.base(),
            self.sender.outq.len(),
            self.sender.unsent,
            self.sender.own_ordered,
            self.rec.mode,
            self.rec.awaiting,
            self.repair_target(),
        )
    }

    pub(super) fn request_reset(&mut self, now: Time, min_members: usize) -> Result<(), SendError> {
        self.now = self.now.max(now);
        let r = self.reset_group(min_members);
        self.pump();
        r
    }

    pub(super) fn may_submit(&self) -> bool {
        self.phase == Phase::Member
            && !self.recovering()
            && !self.leave_requested
            && self.sender.outq.len() < self.cfg.send_window_msgs
            && self.sender.outq_bytes < self.cfg.send_window_bytes
    }
}
