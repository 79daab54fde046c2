//! The ring engine: the parts a ring member is made of, ACK processing, the token site's
//! duties, NACKs, List Change Requests, and the [`Engine`] interface.
//!
//! `Ring` holds the parts; each keeps its own state, and what it can decide from that state
//! alone is its own method: the token site ([`TokenSite`]), the send flow ([`SendFlow`]), the
//! ordering ([`Ordering`]: the OrderingQ, the DataList, stability, NACKs), the membership
//! phase ([`Membership`]) and its reformation ([`RecoveryState`], `reform.rs`), and
//! multi-RPC ([`MultiRpc`], `multirpc.rs`). The methods here tie them together.

use super::config::Config;
use super::flow::SendFlow;
use super::membership::{Membership, Phase};
use super::order::{Entry, Ordering, SourceCursor};
use super::packet::{self, Ack, AckBody, Frag, Nack, NewList};
use super::recovery::RecoveryState;
use super::rpc::{Client, MultiRpc};
use super::token::TokenSite;
use crate::common::shell::{self, EventQueue, Gate, OutQueue, Shelled};
use crate::common::{
    Deadlines, Fence, Fragmenter, PacketPool, PartsIn, PartsOut, Reassembly, Run, SplitMix64,
    TimerKey, Timers,
};
use crate::engine::{
    Counters, Delivery, Destination, Engine, Event, GroupInfo, NodeId, Qos, SendError, Time,
    Transmit, View,
};
use crate::guarantees::{Capabilities, DeliveryPromise, Guarantees, Order, QosLevels, Senders};
use crate::registry::{EngineParams, EngineSettings, Role};
use crate::wire::{self, EngineKind, Header, Packet};
use bytes::{BufMut, Bytes};
use std::collections::BTreeMap;
use std::time::Duration;

/// Bytes of datagram buffers a ring keeps for reuse ([`Ring`]'s `spare_bufs`): the data
/// packets one token pass makes at 1 KiB from a fast sender (about 8 of 64 KiB), and a
/// bounded cost per member.
pub(super) const SPARE_BYTES: usize = 1 << 20;

/// Rings left that a member remembers ([`Ring`]'s `rings_left`): a joiner takes old
/// admissions only from rings it was in lately.
pub(super) const RINGS_KEPT: usize = 16;

/// Bytes of received data packets' buffers a member keeps for reuse ([`Ring`]'s `pool`): what
/// a step of stability frees at 1 KiB from a fast sender (a token round's packets, about 16
/// of 64 KiB), twice over.
pub(super) const POOL_BYTES: usize = 2 << 20;

/// An own message on its way out: its number, QoS, payload, and place in its message when it
/// is a fragment.
pub(super) type Outgoing = (u64, Qos, Bytes, Option<Frag>);

/// Where `part`, a slice of `whole`, lies in it.
fn sub_range(whole: &[u8], part: &[u8]) -> std::ops::Range<usize> {
    let start = (part.as_ptr() as usize) - (whole.as_ptr() as usize);
    debug_assert!(start + part.len() <= whole.len(), "a slice of the whole");
    start..start + part.len()
}

/// The ring's own timers (the failure detector, the gap tracker, a reformation's rounds and a
/// non-member's requests keep theirs).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum RingTimer {
    /// The token site passes a NULL ACK.
    Null,
    /// The token is passed again (the next site did not take it).
    Pass,
    /// Own unordered data is sent again.
    DataRetry,
    /// A List Change Request (join or leave) is sent again.
    Lcr,
    /// A member waiting asks for ACKs it may have missed.
    Stall,
    /// A quiescent ring's next probing round.
    IdleProbe,
    /// A failed reformation is tried again.
    ReformRetry,
    /// This member's lock request is sent again.
    Lock,
}

impl TimerKey for RingTimer {
    const ALL: &'static [RingTimer] = &[
        RingTimer::Null,
        RingTimer::Pass,
        RingTimer::DataRetry,
        RingTimer::Lcr,
        RingTimer::Stall,
        RingTimer::IdleProbe,
        RingTimer::ReformRetry,
        RingTimer::Lock,
    ];

    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static str {
        match self {
            RingTimer::Null => "null",
            RingTimer::Pass => "pass",
            RingTimer::DataRetry => "data",
            RingTimer::Lcr => "lcr",
            RingTimer::Stall => "stall",
            RingTimer::IdleProbe => "probe",
            RingTimer::ReformRetry => "reform retry",
            RingTimer::Lock => "lock",
        }
    }
}

/// The ring engine (see the module docs).
#[derive(Clone)]
pub struct Ring {
    pub(super) group: u32,
    pub(super) me: NodeId,
    pub(super) max_datagram_bytes: usize,
    pub(super) cfg: Config,
    pub(super) settings: EngineSettings,
    pub(super) counters: Counters,
    /// Datagrams longer than the path takes (a New List, a reformation's sync point, of a
    /// large ring), cut into parts still to go.
    pub(super) parts_out: PartsOut,
    /// Such datagrams from others, put together again.
    pub(super) parts_in: PartsIn,
    pub(super) out: OutQueue,
    /// Datagram buffers the runtime handed back in [`Engine::poll_transmit`], written again by
    /// the next data packets: a data packet is up to 64 KiB, and allocating each anew and
    /// freeing the last one made the allocator give pages back and fault them in again
    /// (the sending thread's largest cost at 1 KiB on loopback). At most [`SPARE_BYTES`].
    pub(super) spare_bufs: Vec<Vec<u8>>,
    /// The capacity of `spare_bufs`, in bytes.
    pub(super) spare_bytes: usize,
    /// Buffers of received data packets, kept until stable and delivered, reused once the last
    /// handle on one is dropped (at most [`POOL_BYTES`]): a fresh allocation each, freed in
    /// order, made the allocator give pages back and fault them in again.
    pub(super) pool: PacketPool,
    pub(super) events: EventQueue,
    pub(super) rng: SplitMix64,
    /// The highest view id this member held in any ring it was in (kept across
    /// [`Ring::start_over`]): a ring it creates anew numbers its views above.
    pub(super) views_seen: u64,
    /// The rings this member was in before it started over (kept across
    /// [`Ring::start_over`]): each lineage with the highest view id it held there, the latest
    /// last, at most [`RINGS_KEPT`]. A New List admitting it into one of those views or an
    /// older one admitted an earlier incarnation of it (a retransmission, or an answer to a
    /// join it sent then), never this one.
    pub(super) rings_left: std::collections::VecDeque<(u64, u64)>,
    pub(super) timers: Timers<RingTimer>,
    /// The membership phase, the ring and its views, List Change Requests, leavers.
    pub(super) membership: Membership,
    /// The token as this member sees it.
    pub(super) token: TokenSite,
    /// Own messages and their flow control.
    pub(super) flow: SendFlow,
    /// ACKs, the OrderingQ and DataList, stability, delivery ahead of the order, NACKs.
    pub(super) order: Ordering,
    /// Fault recovery (section 4.4): failure detection and the reformation under way.
    pub(super) rec: RecoveryState,
    /// Locks, non-members, and a non-member's own requests.
    pub(super) rpc: MultiRpc,
    /// Packets refused because their sender was not entitled to send them: an ACK not from
    /// the token's chain, an admission not from the site that ran it, an EXPELLED from a
    /// member that may not expel this one.
    pub(super) roles_refused: u64,
    /// Cuts messages larger than a datagram into fragments.
    pub(super) fragmenter: Fragmenter,
    /// Ordered-stream messages being put together, one per origin: an origin's messages are
    /// delivered in its numbering's order whatever their level, so its fragments come in order.
    pub(super) reassembly: Reassembly<NodeId>,
    /// Unreliable messages being put together, one per origin, and the number its next
    /// fragment must have (a fragment lost or out of order loses the message).
    pub(super) unreliable_parts: Reassembly<NodeId>,
    pub(super) unreliable_next: BTreeMap<NodeId, u64>,
    /// Fragments dropped at delivery: without their beginning (a forged or stray one, one
    /// after an unreliable fragment was lost) or too large to be put together.
    pub(super) fragments_dropped: u64,
}

impl Ring {
    /// A ring member with the default [`Config`]: the creator holds the token of a one-member
    /// ring, a joiner asks in.
    pub fn new(p: &EngineParams<'_>) -> Ring {
        Ring::with_config(p, Config::default())
    }

    /// A ring member with configuration `cfg`.
    pub fn with_config(p: &EngineParams<'_>, cfg: Config) -> Ring {
        Ring::build(p, cfg, 1)
    }

    /// [`Ring::with_config`], a creator's first view numbered `first_view`.
    fn build(p: &EngineParams<'_>, cfg: Config, first_view: u64) -> Ring {
        let max_packet = p.max_datagram_bytes.min(wire::MAX_DATAGRAM_LEN);
        let fragmenter = Fragmenter::new(cfg.max_message_bytes, packet::fragment_bytes(max_packet));
        // A member with smaller datagrams cuts a message into more fragments: reassembly takes
        // as many as any sender may send (its bytes stay bounded by the maximum message).
        let most = cfg.max_fragments().max(1);
        let widest = Fragmenter::new(
            cfg.max_message_bytes,
            cfg.max_message_bytes.div_ceil(most).max(1),
        );
        let mut reassembly = Reassembly::new(&fragmenter);
        reassembly.allow(&widest);
        let mut r = Ring {
            unreliable_parts: reassembly.clone(),
            reassembly,
            unreliable_next: BTreeMap::new(),
            fragmenter,
            fragments_dropped: 0,
            group: p.group,
            me: p.me,
            max_datagram_bytes: p.max_datagram_bytes,
            cfg,
            settings: *p.settings,
            counters: Counters::default(),
            parts_out: PartsOut::new(),
            parts_in: PartsIn::new(),
            out: OutQueue::new(cfg.max_out),
            spare_bufs: Vec::new(),
            spare_bytes: 0,
            pool: PacketPool::new(POOL_BYTES),
            events: EventQueue::new(cfg.max_events),
            rng: SplitMix64::new(p.seed),
            views_seen: 0,
            rings_left: std::collections::VecDeque::new(),
            timers: Timers::new(),
            membership: Membership::new(p.me),
            token: TokenSite::default(),
            flow: SendFlow::new(p.max_datagram_bytes.min(wire::MAX_DATAGRAM_LEN), &cfg),
            order: Ordering::new(p.me),
            rec: RecoveryState::new(p.settings.recovery),
            rpc: MultiRpc {
                client: (p.role == Role::Client).then(Client::default),
                ..MultiRpc::default()
            },
            roles_refused: 0,
        };
        if p.role == Role::Create {
            if p.settings.unicast_only {
                r.membership.unicast_members.insert(p.me);
            }
            r.membership.enter(Phase::Member);
            r.membership.set_ring(vec![p.me]);
            r.membership.view_id = first_view;
            r.membership.lineage = packet::lineage(p.me, first_view, p.seed);
            r.order.ordered_next.insert(p.me, 0);
            r.order.chain = Some((p.me, p.me));
            r.order.q.push(Entry::View(
                View {
                    id: first_view,
                    seq: 0,
                    members: vec![p.me],
                    coordinator: p.me,
                    joined: Some(p.me),
                    left: None,
                },
                vec![p.me],
            ));
            // A ring of one is quiescent with the token at its only member.
            r.token.holding = true;
            r.token.idle = 1;
            r.deliver();
        } else if p.role == Role::Join {
            r.timers.arm(RingTimer::Lcr, p.now);
        }
        r
    }

    /// What the ring promises (settings do not change it).
    pub fn declared() -> Guarantees {
        Guarantees {
            order: Order::Total,
            virtual_synchrony: true,
            resilience: 0,
            majority_safe: false,
            delivery: DeliveryPromise::AllOrNothing,
            qos: QosLevels::rmp(),
            senders: Senders::Any,
            crash_recovery: true,
            replies: true,
            capabilities: Capabilities {
                locks: true,
                requests: true,
                forwarding: true,
                replies: true,
                reset: true,
                rejoin: true,
                ttl_input: false,
                datagram_limit: false,
            },
        }
    }

    // ---- the phase ------------------------------------------------------------------------

    /// A member (installed a view).
    pub(super) fn member(&self) -> bool {
        self.membership.phase().is_member()
    }

    /// Asked to leave.
    pub(super) fn leaving(&self) -> bool {
        self.membership.phase().asked_to_leave()
    }

    /// The view removing this member was ordered (not yet delivered).
    pub(super) fn removed(&self) -> bool {
        matches!(self.membership.phase(), Phase::Removed { .. })
    }

    /// The most members the ring admits.
    pub(super) fn max_members(&self) -> usize {
        self.cfg.max_members.min(packet::MAX_MEMBERS)
    }

    /// The ring refused our join (it is full): a joiner stops asking and says so; anybody else
    /// ignores it (a forged refusal cannot remove a member).
    fn on_join_refused(&mut self, body: &[u8]) {
        let Ok(limit) = packet::decode_join_refused(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        if self.membership.phase() != Phase::Joining || self.rpc.client.is_some() {
            return;
        }
        self.membership.enter(Phase::Left {
            asked: false,
            member: false,
        });
        self.timers.clear(RingTimer::Lcr);
        self.events
            .push_back(Event::Recovery(crate::engine::Recovery::Refused { limit }));
    }

    /// Stopped (left, or expelled).
    pub(super) fn left(&self) -> bool {
        self.membership.phase().is_stopped()
    }

    /// A reformation left this member out.
    pub(super) fn expelled(&self) -> bool {
        matches!(self.membership.phase(), Phase::Expelled { .. })
    }

    /// Stops after a leave (or the view that removed this member): the driver hears `Left`.
    pub(super) fn finish_leave(&mut self) {
        let phase = self.membership.phase();
        self.membership.enter(Phase::Left {
            asked: phase.asked_to_leave(),
            member: phase.is_member(),
        });
        self.events.push_back(Event::Left);
    }

    /// Own ordered-stream messages numbered and not yet ordered: what the send window counts
    /// (section 4.6: a packet is in transit until the first ACK that orders it). Ordered ones
    /// wait for stability under the token site's bound on unstable slots
    /// ([`Config::max_unstable`]), not in the sender's window: counted to stability, the window
    /// waited for a whole round of the token after each ACK and bounded the ring's throughput
    /// by it.
    pub(super) fn own_unordered(&self) -> u64 {
        let ordered = self.order.ordered_next.get(&self.me).copied().unwrap_or(0);
        self.flow.own_next.saturating_sub(ordered)
    }

    /// A pass is no longer repeated.
    pub(super) fn stop_passing(&mut self) {
        self.token.passing = None;
        self.timers.clear(RingTimer::Pass);
    }

    /// The token stops here (a reformation, a failure waiting for a reset, an expulsion).
    pub(super) fn halt_token(&mut self) {
        self.token.halt();
        self.timers.clear(RingTimer::Pass);
        self.timers.clear(RingTimer::Null);
    }

    /// A datagram of `ptype` with its header written.
    pub(super) fn header(&self, ptype: u8) -> Vec<u8> {
        let mut buf = Vec::new();
        self.write_header(ptype, &mut buf);
        buf
    }

    fn write_header(&self, ptype: u8, buf: &mut Vec<u8>) {
        Header {
            engine: EngineKind::Ring,
            ptype,
            flags: 0,
            group: self.group,
            incarnation: 0,
            sender: self.me,
        }
        .encode(buf);
    }

    pub(super) fn send(&mut self, to: Destination, ptype: u8, body: impl FnOnce(&mut Vec<u8>)) {
        self.send_sized(to, ptype, 0, body);
    }

    /// [`Ring::send`] of a body of about `body_bytes`, written into a spare buffer with room
    /// for it: a data packet grown by doubling up to 64 KiB was copied at every step.
    pub(super) fn send_sized(
        &mut self,
        to: Destination,
        ptype: u8,
        body_bytes: usize,
        body: impl FnOnce(&mut Vec<u8>),
    ) {
        let mut buf = self.spare_bufs.pop().unwrap_or_default();
        self.spare_bytes -= buf.capacity();
        buf.clear();
        buf.reserve(wire::HEADER_LEN + body_bytes);
        self.write_header(ptype, &mut buf);
        body(&mut buf);
        self.out.push_back((to, buf));
    }

    /// An own unreliable message whose last packet is numbered `n` (outside the ordered
    /// stream): delivered here at once, whole, and its send complete. Returns its number.
    fn deliver_own_unreliable(&mut self, n: u64, payload: Bytes) -> u64 {
        let msg = n | packet::UNRELIABLE_BIT;
        self.counters.delivered += 1;
        self.events.push_back(Event::Deliver(Delivery {
            respond: false,
            seq: msg,
            sender: self.me,
            msg,
            view: self.membership.delivered_view.id,
            payload,
        }));
        self.events.push_back(Event::SendComplete { msg });
        msg
    }

    fn send_data(
        &mut self,
        to: Destination,
        origin: NodeId,
        sseq: u64,
        (qos, frag): (Qos, Option<Frag>),
        p: &Bytes,
    ) {
        match frag {
            None => {
                let size = packet::DATA_FIXED + packet::DATA_PER_MSG + p.len();
                self.send_sized(to, packet::DATA, size, |b| {
                    packet::encode_data(b, origin, sseq, std::iter::once((qos, &p[..])))
                })
            }
            Some(f) => {
                let size = packet::FRAG_FIXED + p.len();
                self.send_sized(to, packet::DATA_FRAG, size, |b| {
                    packet::encode_frag(b, origin, sseq, qos, f, p)
                })
            }
        }
    }

    /// Sends `msgs` (consecutive numbers of `origin`) in as few data packets as Fig. 4.2
    /// allows: up to half the window each, at least a minimum packet, at most a datagram. A
    /// fragment fills a datagram: it goes alone.
    pub(super) fn send_runs(&mut self, to: Destination, origin: NodeId, msgs: &[Outgoing]) {
        let max_packet = self.max_datagram_bytes.min(wire::MAX_DATAGRAM_LEN);
        let limit = self.flow.run_limit(max_packet);
        let mut rest = msgs;
        while let Some((first, qos, p, frag)) = rest.first() {
            if frag.is_some() {
                self.send_data(to, origin, *first, (*qos, *frag), p);
                rest = &rest[1..];
                continue;
            }
            let first = *first;
            let mut size = wire::HEADER_LEN + packet::DATA_FIXED;
            let mut n = 0;
            for (i, (sseq, _, p, frag)) in rest.iter().enumerate() {
                let add = packet::DATA_PER_MSG + p.len();
                let next = first + i as u64 == *sseq;
                if n > 0
                    && (size + add > limit || !next || n == usize::from(u16::MAX) || frag.is_some())
                {
                    break;
                }
                size += add;
                n += 1;
            }
            let (run, tail) = rest.split_at(n);
            rest = tail;
            let body = size - wire::HEADER_LEN;
            self.send_sized(to, packet::DATA, body, |b| {
                packet::encode_data(b, origin, first, run.iter().map(|m| (m.1, &m.2[..])))
            });
        }
    }

    /// Own messages submitted since the last datagrams went out, bundled.
    fn flush_outbox(&mut self) {
        if self.flow.outbox.is_empty() {
            return;
        }
        let msgs: Vec<Outgoing> = self.flow.outbox.drain(..).collect();
        self.send_runs(Destination::Group, self.me, &msgs);
    }

    // ---- ACK processing -------------------------------------------------------------------

    fn on_ack(&mut self, now: Time, from: NodeId, bytes: &[u8], body: &[u8]) {
        let Ok(ack) = Ack::decode(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        if let Some(target) = self.rec.current.as_ref().map(|r| r.target.acks) {
            // The old view's token is stopped: only what leads to the sync point is taken (an
            // ACK of the new view is asked for again after the commit).
            if ack.num >= target {
                return;
            }
        }
        if self.order.highest_heard.is_none_or(|h| ack.num >= h) {
            self.order.highest_heard = Some(ack.num);
            self.order.last_site = from;
        }
        if self.membership.admission.is_some() {
            if let AckBody::NewList(l) = &ack.body {
                if l.joined.contains(&self.me)
                    && l.view_id > self.membership.view_id
                    && !self.leaving()
                    && self.admits_me(from, &ack)
                {
                    // Admitted again, into a newer view, before the first admission was
                    // confirmed: the first came from a token site the ring went on without.
                    let _ = self.rejoin(now, None);
                }
            }
        }
        if self.member()
            && !self.membership.ring.is_empty()
            && !self.membership.ring.contains(&from)
        {
            if let AckBody::NewList(l) = &ack.body {
                if l.joined.contains(&self.me) {
                    // Another ring of this name heard our join too and admitted us: say no to
                    // its site, which takes its token back and removes us (`on_expelled`).
                    return self.tell_expelled(now, from, Some(ack.num));
                }
            }
        }
        if self.in_ring() && from != self.me && ack.lineage != self.membership.lineage {
            // Another ring of this name, whatever its view and numbers (they may be ours).
            // Only its sender's word says where it is now (this ACK may be older than its
            // move into this ring), so nothing is decided here.
            self.counters.foreign_dropped += 1;
            let names_me = ack.next_site == self.me
                || matches!(&ack.body, AckBody::NewList(l) if l.joined.contains(&self.me));
            if names_me || !self.membership.ring.contains(&from) {
                // Its site may wait for this member, which is elsewhere: tell it, even when it
                // is in this ring's list too (formation sweep batched seeds 19460, 19687: two
                // rings admitted the same joiners in crossed order, each passed the token to
                // a member living in the other, and neither ever heard why).
                self.tell_elsewhere(now, from, Some(ack.num));
            }
            return;
        }
        if !self.member() {
            match &ack.body {
                AckBody::NewList(l) if l.joined.contains(&self.me) && !self.leaving() => {
                    if !self.admits_me(from, &ack) {
                        self.roles_refused += 1;
                        return;
                    }
                    let left_at = self.rings_left.iter().find(|r| r.0 == ack.lineage);
                    if left_at.is_some_and(|&(_, view)| l.view_id <= view) {
                        // It admitted an earlier incarnation of this member into a ring it has
                        // since left (formation sweep ring seed 22249, batched 33295: taken,
                        // the joiner went on from an old view while the ring was far ahead).
                        self.counters.duplicates += 1;
                        return;
                    }
                    self.start_at(&ack);
                    self.membership.admission = Some((ack.num, from));
                }
                _ => return,
            }
        }
        if ack.num < self.order.next_ack {
            self.counters.duplicates += 1;
            if self.member()
                && !self.membership.ring.is_empty()
                && !self.membership.ring.contains(&from)
            {
                // A token site of a view the ring went on without (it was paused through a
                // reformation, or a joiner admitted by one): tell it.
                self.tell_expelled(now, from, Some(ack.num));
            }
            if from != self.me
                && !self.leaving()
                && self.passing_to(from)
                && ack.num + 1 == self.order.next_ack
                && ack.view < self.membership.view_id
                && (self.order.log.get(&ack.num)).is_some_and(|e| e.sender != from)
            {
                // The member this site just passed its ACK to made an ACK of the same number in
                // an older view: it is the token site of another ring of this name whose list
                // has this site too, never of ours (formation sweep ring seed 15366 with joins
                // batched: two joiners that swapped rings passed each other their ACK 4 for
                // ever, each taking the other's for a copy of its own). Ordered out here, it
                // then tells the other, by its next ACK in a newer view, that it is out.
                return self.order_out_of_ring(now, from);
            }
            if ack.next_site == self.me && self.token.accepted == Some((ack.num, from)) {
                self.confirm(from, ack.num);
            }
            if ack.next_site == self.me && self.token.named == Some(ack.num) {
                // The pass repeated: this member did not take the token when it was named
                // (its application was behind: a delivery backlog past `max_backlog`), and
                // nothing else makes it look again once the application has caught up. Without
                // this the ring stopped for good under a slow reader.
                self.after_progress(now);
            }
            return;
        }
        if ack.num >= self.order.next_ack + self.cfg.max_early_acks {
            return; // asked for again later
        }
        self.order
            .early_acks
            .insert(ack.num, (from, bytes.to_vec()));
        self.apply_ready(now);
    }

    /// Whether `ack`, from `from`, may admit this joiner: a New List (not a lock change)
    /// made by the token site that ran the join, which puts the joiners it admits right after
    /// itself, in the order of the list's `joined`, and names the first the next site. The
    /// joiner knows nothing else of the ring yet, so this is all it can check; a member
    /// elsewhere in the list (or outside it) cannot admit it.
    fn admits_me(&self, from: NodeId, ack: &Ack) -> bool {
        match &ack.body {
            AckBody::NewList(l) => {
                let n = l.members.len();
                let site = l.members.iter().position(|&m| m == from);
                l.lock_op.is_none()
                    && l.joined.contains(&self.me)
                    && from != self.me
                    && l.joined.first() == Some(&ack.next_site)
                    && site.is_some_and(|i| {
                        l.joined.len() < n
                            && (l.joined.iter().enumerate())
                                .all(|(k, &j)| l.members[(i + 1 + k) % n] == j)
                    })
            }
            AckBody::Entries(_) => false,
        }
    }

    /// Whether `from` may send the next ACK: it is in the token's chain
    /// ([`Ordering::site_may_send`]: the site the last ACK applied named, or its sender taking
    /// the token back; a reformation's initiator after its commit). A member already removed
    /// by a New List takes the ACKs after it from any member of the view that removed it: it
    /// takes part in no reformation of that view, so cannot follow the token through one, and
    /// what it delivers ends at its own removal, which the chain put in its order; the ACKs
    /// after it only tell that another member holds it (without this, every-engine sweep seed
    /// 502: a leaver whose ring reformed just after its removal waited for ever).
    fn may_send_next(&self, from: NodeId) -> bool {
        self.order.site_may_send(from) || (self.removed() && self.membership.ring.contains(&from))
    }

    /// A joiner starts its OrderingQ at the New List that admits it.
    fn start_at(&mut self, ack: &Ack) {
        if let AckBody::NewList(l) = &ack.body {
            // The locks held when this member joins: what its handlers follow from here on.
            self.rpc.gs.delivered_locks = l.locks.iter().copied().collect();
        }
        self.membership.enter(Phase::Member);
        self.membership.view_id = ack.view;
        // The ring it joins is the one whose ACK admitted it.
        self.membership.lineage = ack.lineage;
        self.timers.clear(RingTimer::Lcr);
        self.order.start_at(ack.num, ack.first_ts);
    }

    pub(super) fn apply_ready(&mut self, now: Time) {
        while let Some((from, bytes)) = self.order.early_acks.remove(&self.order.next_ack) {
            if self
                .rec
                .current
                .as_ref()
                .is_some_and(|r| self.order.next_ack >= r.target.acks)
            {
                // Beyond the sync point of a reformation: kept until it commits.
                self.order
                    .early_acks
                    .insert(self.order.next_ack, (from, bytes));
                break;
            }
            // Decoded before it was kept.
            let Ok(pkt) = wire::decode(&bytes) else { break };
            let Ok(ack) = Ack::decode(pkt.body) else {
                break;
            };
            if ack.first_ts != self.order.q.end() {
                self.counters.malformed_dropped += 1;
                break;
            }
            if !self.may_send_next(from) {
                // Roles, not claims: only the site the last ACK named, or the one that named
                // it taking the token back, sends the next one (a member's forged ACK would
                // put its entries, or a New List, into everyone's order). The ACK of that
                // number is asked for again.
                self.roles_refused += 1;
                break;
            }
            if self.member() && ack.lineage != self.membership.lineage {
                // Another ring's (its view id says nothing of ours). Asked for again.
                self.counters.foreign_dropped += 1;
                break;
            }
            if self.member() && !self.removed() && ack.view != self.membership.view_id {
                if ack.view > self.membership.view_id {
                    // The ring went on in a newer view from here on without this member: a
                    // reformation left it out (it was paused, or cut off).
                    self.expel(ack.view);
                    return;
                }
                // Made by a token site the ring went on without, in an older view.
                self.counters.foreign_dropped += 1;
                self.tell_expelled(now, from, Some(ack.num));
                break;
            }
            if self.member()
                && !self.membership.ring.is_empty()
                && ack.view == self.membership.view_id
                && ack.ring != self.membership.ring_digest
            {
                // Made in another ring of this name at the same view and number (a joiner both
                // admitted, whose place in each had the same neighbours). The ACK of that
                // number is asked for again.
                self.counters.foreign_dropped += 1;
                break;
            }
            if self.member()
                && !self.membership.ring.is_empty()
                && !self.membership.ring.contains(&from)
            {
                // From a token site of a view this member is not in: a member the ring went on
                // without. The ACK of that number is asked for again.
                self.counters.foreign_dropped += 1;
                self.tell_expelled(now, from, Some(ack.num));
                break;
            }
            let after = match &ack.body {
                AckBody::NewList(l) if l.lock_op.is_none() => &l.members,
                _ => &self.membership.ring,
            };
            if self.member() && !after.is_empty() && !after.contains(&ack.next_site) {
                // The token goes to a member of another ring of this name: the ACK is that
                // ring's, sent by a joiner both admitted (same view id and numbers by chance).
                self.counters.foreign_dropped += 1;
                break;
            }
            if self.member()
                && after.contains(&from)
                && ack.next_site != from
                && Membership::successor(after, from) != ack.next_site
            {
                // A token site passes to the member after it (or keeps the token: a ring of
                // one, a reformation's initiator). This one passes elsewhere: an ACK of another
                // ring of this name held early, from a member that was in it before it came to
                // ours with the same number and view (formation seed 3093 once the chain was
                // checked: applied, it named a site that never took the token).
                self.counters.foreign_dropped += 1;
                break;
            }
            self.apply(now, from, ack, bytes);
            if self.left() {
                return;
            }
        }
        self.after_progress(now);
    }

    fn apply(&mut self, now: Time, from: NodeId, ack: Ack, bytes: Vec<u8>) {
        let first_ts = ack.first_ts;
        match ack.body {
            AckBody::Entries(entries) => {
                for (origin, sseq) in entries {
                    let held = self.order.data.take(origin, sseq);
                    // Ring members' packets are ordered only while they are in the ring:
                    // any other origin is a non-member (multi-RPC).
                    let client = !self.order.ordered_next.contains_key(&origin);
                    if client {
                        self.client_ordered(origin, sseq);
                    } else {
                        let next = self.order.ordered_next.entry(origin).or_insert(0);
                        *next = (*next).max(sseq + 1);
                    }
                    if origin == self.me {
                        self.flow.own_ordered.push_back((sseq, self.order.q.end()));
                        self.flow.on_ordered(sseq, now);
                    }
                    self.order.q.push(Entry::Data {
                        origin,
                        sseq,
                        qos: held.as_ref().map_or(Qos::TotallyOrdered, |h| h.1),
                        frag: held.as_ref().and_then(|h| h.2),
                        payload: held.map(|h| h.0),
                        client,
                    });
                }
            }
            AckBody::NewList(l) if l.lock_op.is_some() => {
                let op = l.lock_op.expect("matched");
                self.apply_lock_op(op, &l.locks);
                self.order.q.push(Entry::Lock(op));
            }
            AckBody::NewList(l) => {
                self.apply_group_state(&l.locks, &l.clients);
                self.membership.unicast_members = l.unicast_only.iter().copied().collect();
                let old_next = std::mem::replace(
                    &mut self.order.ordered_next,
                    l.members.iter().copied().zip(l.next_sseq).collect(),
                );
                for (&m, &next) in &self.order.ordered_next {
                    self.order
                        .sources
                        .entry(m)
                        .or_insert_with(|| SourceCursor::from(next));
                }
                if self.member()
                    && !self.removed()
                    && !l.members.contains(&self.me)
                    && l.left != Some(self.me)
                {
                    // A reformation went on without this member (it lagged behind its sync
                    // point): it may come back only as a new member.
                    return self.expel(l.view_id);
                }
                let old = self.membership.set_ring(l.members.clone());
                self.membership.view_id = l.view_id;
                self.membership.list_at = now;
                for &j in &l.joined {
                    self.membership.admitted_in.insert(j, l.view_id);
                }
                let ring: std::collections::BTreeSet<NodeId> =
                    self.membership.ring.iter().copied().collect();
                self.membership.admitted_in.retain(|m, _| ring.contains(m));
                debug_assert!(self.membership.admitted_in.len() <= ring.len());
                self.drop_removed(&old, &old_next);
                self.watch_ring(now);
                if let Some(gone) = l.left {
                    if gone == self.me {
                        if !self.removed() {
                            let asked = self.leaving();
                            self.membership.enter(Phase::Removed { asked });
                        }
                        self.timers.clear(RingTimer::Lcr);
                    }
                    let oldest = self.order.log.keys().next().copied().unwrap_or(ack.num);
                    let kept = (self.order.stable_ts, oldest, now + self.cfg.depart_linger);
                    let max = self.cfg.max_removed;
                    self.membership
                        .note_removed(self.me, gone, bytes.clone(), kept, max);
                }
                for j in &l.joined {
                    self.membership.lcrs.remove(j);
                    self.membership.unicast_joiners.remove(j);
                }
                // The view names one joiner: a joiner itself, the first of them elsewhere (the
                // others are in its members); the slot keeps them all.
                let named = if l.joined.contains(&self.me) {
                    Some(self.me)
                } else {
                    l.joined.first().copied()
                };
                self.order.q.push(Entry::View(
                    View {
                        id: l.view_id,
                        seq: first_ts,
                        members: l.members,
                        coordinator: from,
                        joined: named,
                        left: l.left,
                    },
                    l.joined,
                ));
            }
        }
        self.order.log_applied(ack.num, from, first_ts, bytes);
        self.order.chain = Some((from, ack.next_site));
        if from != self.me {
            // The ring goes on here: whatever this member's reformation found is past.
            self.rec.came_up_short = false;
        }
        let named = ack.next_site == self.me && !self.removed();
        self.token
            .on_applied(ack.num, from == self.me, named, ack.idle);
        if self.token.passing.is_none() {
            self.timers.clear(RingTimer::Pass);
        }
        if from != self.me {
            self.timers.clear(RingTimer::Null);
        }
        if let Some((n, by)) = self.membership.admission {
            // The ring goes on after this member's admission: a member other than the one that
            // admitted it (or, in a ring of two, that one again) ordered after it.
            if from != self.me && ack.num > n && (from != by || self.membership.ring.len() <= 2) {
                self.membership.admission = None;
            }
        }
        self.update_stable();
    }

    /// Stability moves on (see [`Ordering::update_stable`]); own messages ordered below it
    /// are done.
    fn update_stable(&mut self) {
        let bounds = self.membership.departing_bounds();
        self.order.update_stable(&self.membership.ring, bounds);
        self.flow.on_stable(self.order.stable_ts);
    }

    pub(super) fn after_progress(&mut self, now: Time) {
        self.deliver();
        if self.leave_alone() {
            return;
        }
        self.try_accept(now);
        self.token_work(now);
        self.watch_gaps(now);
        self.arm_stall(now);
    }

    /// The last member leaves at once, or once the members that left before it said goodbye
    /// (until then it still answers their NACKs).
    fn leave_alone(&mut self) -> bool {
        if !self.leaving()
            || self.left()
            || self.membership.ring != [self.me]
            || !self.membership.departing.is_empty()
        {
            return false;
        }
        self.finish_leave();
        true
    }

    /// Whether this member waits for ACKs it may never hear of otherwise: its own messages to
    /// be ordered or to become stable, its leave, or slots to become resilient enough to
    /// deliver (the last ACKs of a ring going quiescent may be lost). Own messages not yet
    /// ordered count because the retransmission timer resends them only once an ACK was
    /// heard or the ring is known quiescent (`token_stood_still`): a member that missed the
    /// NULL ACKs that made the ring quiescent learns of them by asking.
    fn waiting(&self) -> bool {
        self.member()
            && !self.left()
            && (!self.flow.own_ordered.is_empty()
                || self.own_unordered() > 0
                || self.leaving()
                || self.order.resilience_wait)
    }

    /// How long to wait for an ACK before asking for it: the fixed floor, or more when a
    /// round of the token is measured to take longer (a busy ring), so that the requests do
    /// not feed the congestion that delays the ACKs (section 4.6's timers, applied to NACKs);
    /// never more than twice [`Ring::nack_retry`]'s ceiling.
    fn stall_wait(&self) -> Duration {
        self.cfg.stall.max(self.measured_round() * 2)
    }

    /// How long a NACK waits before it is repeated: the fixed floor, or the measured round.
    fn nack_retry(&self) -> Duration {
        self.cfg.nack_retry.max(self.measured_round())
    }

    /// The round the NACK timers follow: the base RTO of own packets (submission to order),
    /// at most `Config::nack_retry_max`. The samples include the repairs themselves: under
    /// heavy loss a round slowed by lost ACKs made the repairs slower still, until a NACK was
    /// repeated only every `data_retry_max` (2 s) and the ring crawled (every-engine sweep
    /// seed 2615: 29% loss, 12 of 34 messages per sender left after 60 s).
    fn measured_round(&self) -> Duration {
        self.flow.rtt.base_rto().min(self.cfg.nack_retry_max)
    }

    fn arm_stall(&mut self, now: Time) {
        if !self.waiting() {
            self.timers.clear(RingTimer::Stall);
        } else if !self.timers.is_armed(RingTimer::Stall) {
            self.timers.arm(RingTimer::Stall, now + self.stall_wait());
            self.order.stall_mark = self.order.next_ack;
            self.order.stall_tries = 0;
        }
    }

    fn stall(&mut self, now: Time) {
        if !self.timers.due(RingTimer::Stall, now) {
            return;
        }
        self.timers.clear(RingTimer::Stall);
        if !self.waiting() {
            return;
        }
        if self.order.next_ack == self.order.stall_mark && !self.token.holding {
            self.order.stall_tries += 1;
            let (to, everyone) = self.nack_scope(self.order.stall_tries);
            self.counters.nacks_sent += 1;
            let n = Nack {
                acks: self.order.next_ack..self.order.next_ack + 32,
                slots: vec![],
                everyone,
            };
            self.send(to, packet::NACK, |b| n.encode(b));
        } else {
            self.order.stall_tries = 0;
        }
        self.order.stall_mark = self.order.next_ack;
        self.timers.arm(RingTimer::Stall, now + self.stall_wait());
    }

    fn deliver(&mut self) {
        self.order.resilience_wait = false;
        if self.membership.admission.is_some() {
            // Admitted, not yet confirmed by the ring: an admission by a token site that the
            // ring went on without (paused through a reformation) must never show as a view.
            return;
        }
        while !self.left() && self.events.room() {
            if self.bound_lost(self.order.q.deliver_next()) {
                // Bound to a reformation's list that skips this slot (its data came later).
                break;
            }
            if self.order.q.pass_lost() {
                continue;
            }
            let Some((ts, entry)) = self.order.q.deliverable() else {
                break;
            };
            match entry {
                Entry::Data {
                    origin,
                    sseq,
                    payload,
                    qos,
                    frag,
                    client,
                } => {
                    let (origin, sseq, qos, frag) = (*origin, *sseq, *qos, *frag);
                    if !self.resilient(ts, origin, qos) {
                        self.order.resilience_wait = true;
                        break;
                    }
                    if *client {
                        let p = payload.clone().unwrap_or_default();
                        self.order.q.delivered();
                        self.deliver_client(ts, origin, sseq, p);
                        continue;
                    }
                    // Both sets are empty unless messages below total order were sent:
                    // no lookups per message then.
                    let early =
                        !self.order.early.is_empty() && self.order.early.remove(&(origin, sseq));
                    if !early {
                        let p = payload.clone().unwrap_or_default();
                        if !self.order.pending_src.is_empty() {
                            self.order.pending_src.remove(&(origin, sseq));
                        }
                        // Below total order a message is placed by its sender's numbering.
                        let seq = if qos.is_total() { ts } else { sseq };
                        self.deliver_whole(origin, sseq, seq, p, frag);
                        self.order.mark_source(origin, sseq);
                        self.source_chain(origin);
                    }
                    // Resilience 0: ordered, and so delivered by every member that stays; a
                    // message in fragments once its last fragment is.
                    if origin == self.me && frag.is_none_or(|(i, n)| i + 1 == n) {
                        self.events.push_back(Event::SendComplete { msg: sseq });
                    }
                }
                Entry::View(v, joined) => {
                    // A view is shown once a member other than the one that made it and the
                    // one it admits holds it too (the token went on after it): a token site
                    // the ring went on without (paused through a reformation) never shows a
                    // view of its own making, not even with a joiner it admitted.
                    let mut makers = vec![v.coordinator];
                    makers.extend(joined);
                    if !self.held_by_another(ts, &makers) {
                        self.order.resilience_wait = true;
                        break;
                    }
                    let v = v.clone();
                    self.counters.view_changes += 1;
                    // A member gone from the view sends nothing more in it: what it had begun
                    // of a message in fragments never completes (every member drops it here,
                    // in the same place), and its buffer is freed.
                    let old = std::mem::take(&mut self.membership.delivered_view.members);
                    // A set, not a scan per member: 17% of a 1,020-member run's CPU.
                    let now_in: std::collections::BTreeSet<NodeId> =
                        v.members.iter().copied().collect();
                    for gone in old.iter().filter(|m| !now_in.contains(m)) {
                        self.forget_parts(*gone);
                    }
                    self.membership.delivered_view = v.clone();
                    let gone = v.left == Some(self.me);
                    // Applying the New List that removes this member made it Removed.
                    debug_assert!(!gone || self.removed());
                    let (members, joined_me) = (v.members.clone(), v.joined == Some(self.me));
                    self.events.push_back(Event::View(v));
                    self.deliver_view_locks(&members, joined_me);
                    if gone {
                        // Twice: a lost goodbye only delays stability by `Config::depart_linger`.
                        for _ in 0..2 {
                            self.send(Destination::Group, packet::GOODBYE, |_| {});
                        }
                        if self.membership.phase().asked_to_leave() {
                            self.finish_leave();
                        } else {
                            // Ordered out without asking (a joiner the site took for the
                            // joiner of another ring): an expulsion, after which the member
                            // may join again, not a leave.
                            let id = self.membership.delivered_view.id;
                            self.expel(id);
                        }
                    }
                }
                Entry::Lock(op) => {
                    let op = *op;
                    self.deliver_lock_op(op);
                }
            }
            self.order.q.delivered();
        }
    }

    /// Whether slot `ts` may be delivered at its level (Fig. 3.2): the K-resilient levels wait
    /// until enough members hold it. A member holds every slot below the end of each ACK it
    /// sent (a token site holds all it orders, and accepted the token only holding everything
    /// before), and the origin holds its own packet. K counts members other than the origin
    /// (as [`Qos::KResilient`] says; the paper's K counts the origin's site too) and is capped
    /// by the ring's size; the majority is of the largest view the slot may belong to (MaxN).
    /// Whether this member is bound to a reformation's list (its own, at the initiator) that
    /// skips slot `ts`: it must not deliver it, whatever arrives.
    fn bound_lost(&self, ts: u64) -> bool {
        let Some(r) = self.rec.current.as_ref() else {
            return false;
        };
        let own = r
            .poll
            .as_ref()
            .and_then(|p| p.commit.as_ref())
            .map(|c| &c.list);
        r.new_list
            .as_ref()
            .or(own)
            .is_some_and(|l| l.lost.contains(&ts))
    }

    fn resilient(&self, ts: u64, origin: NodeId, qos: Qos) -> bool {
        let ring = &self.membership.ring;
        let max_n = ring.len().max(self.membership.delivered_view.members.len());
        self.order.resilient(ts, origin, qos, ring, max_n)
    }

    /// Whether slot `ts` is held by a ring member outside `makers` (or there is none).
    fn held_by_another(&self, ts: u64, makers: &[NodeId]) -> bool {
        self.order
            .held_by_another(ts, makers, &self.membership.ring)
    }

    /// A packet of a level below total order arrived (or was sent here): reliable packets are
    /// delivered at once, source-ordered ones once every earlier packet of their origin was.
    fn deliver_early(
        &mut self,
        origin: NodeId,
        sseq: u64,
        qos: Qos,
        payload: &Bytes,
        frag: Option<Frag>,
    ) {
        if self.membership.admission.is_some() || self.rec.current.is_some() {
            // In its slot: once the admission is confirmed, or once the reformation committed
            // (what a member delivers ahead of the order must be what its vote reported).
            return;
        }
        if matches!(qos, Qos::Reliable | Qos::SourceOrdered) {
            // Both go in their origin's order: what a member delivered ahead of the total order
            // is then a prefix of each origin's packets, which a reformation's sync point names
            // and brings every survivor to (section 4.4), whoever crashes.
            self.order
                .pending_src
                .insert((origin, sseq), (payload.clone(), frag));
            self.source_chain(origin);
        }
    }

    fn push_early(&mut self, origin: NodeId, sseq: u64, payload: Bytes, frag: Option<Frag>) {
        self.order.early.insert((origin, sseq));
        self.deliver_whole(origin, sseq, sseq, payload, frag);
        self.order.mark_source(origin, sseq);
    }

    /// Delivers ordered-stream message `sseq` of `origin` at `seq`; a fragment goes into its
    /// message, which is delivered whole in the place of its last fragment (RMP orders
    /// packets: the message's place in the total order is where it completes).
    fn deliver_whole(
        &mut self,
        origin: NodeId,
        sseq: u64,
        seq: u64,
        payload: Bytes,
        frag: Option<Frag>,
    ) {
        let payload = match frag {
            None => payload,
            Some((index, count)) => match self.reassembly.push(origin, index, count, payload) {
                Ok(Some(whole)) => whole,
                Ok(None) => return,
                Err(_) => {
                    // Its beginning was never delivered here (a forged or stray fragment, or
                    // one of a message begun before this member joined): dropped, counted.
                    self.fragments_dropped += 1;
                    return;
                }
            },
        };
        self.counters.delivered += 1;
        self.events.push_back(Event::Deliver(Delivery {
            respond: false,
            seq,
            sender: origin,
            msg: sseq,
            view: self.membership.delivered_view.id,
            payload,
        }));
    }

    /// Frees what `origin` had begun of messages in fragments (it left the ring).
    pub(super) fn forget_parts(&mut self, origin: NodeId) {
        self.reassembly.forget(origin);
        self.unreliable_parts.forget(origin);
        self.unreliable_next.remove(&origin);
    }

    /// Delivers the source-ordered packets of `origin` whose predecessors are all delivered.
    fn source_chain(&mut self, origin: NodeId) {
        while self.events.room() && !self.order.pending_src.is_empty() {
            let next = self.order.sources.get(&origin).map_or(0, |c| c.next);
            let Some((p, frag)) = self.order.pending_src.remove(&(origin, next)) else {
                break;
            };
            self.push_early(origin, next, p, frag);
        }
    }

    /// An unreliable packet: delivered at once, once, never asked for again (Fig. 3.2). A
    /// fragment is put together with the ones numbered right before it: one lost (or
    /// reordered) loses its message, never delivered in part, and holds nothing up.
    fn on_unreliable(&mut self, origin: NodeId, n: u64, payload: &[u8], frag: Option<Frag>) {
        if !self.order.ordered_next.contains_key(&origin) || self.membership.admission.is_some() {
            self.counters.foreign_dropped += 1;
            return;
        }
        if self
            .order
            .unreliable_seen
            .entry(origin)
            .or_default()
            .accept(n)
            .is_err()
        {
            self.counters.duplicates += 1;
            return;
        }
        let payload = match frag {
            None => Bytes::copy_from_slice(payload),
            Some((index, count)) => {
                if index > 0 && self.unreliable_next.get(&origin) != Some(&n) {
                    // The fragment before it was lost: so is the message.
                    self.unreliable_parts.forget(origin);
                }
                let p = Bytes::copy_from_slice(payload);
                match self.unreliable_parts.push(origin, index, count, p) {
                    Ok(Some(whole)) => {
                        self.unreliable_next.remove(&origin);
                        whole
                    }
                    Ok(None) => {
                        self.unreliable_next.insert(origin, n.wrapping_add(1));
                        return;
                    }
                    Err(_) => {
                        self.unreliable_next.remove(&origin);
                        self.fragments_dropped += 1;
                        return;
                    }
                }
            }
        };
        if !self.events.room() {
            self.order.unreliable_dropped += 1;
            return;
        }
        let msg = n | packet::UNRELIABLE_BIT;
        self.counters.delivered += 1;
        self.events.push_back(Event::Deliver(Delivery {
            respond: false,
            seq: msg,
            sender: origin,
            msg,
            view: self.membership.delivered_view.id,
            payload,
        }));
    }

    // ---- the token site -------------------------------------------------------------------

    fn try_accept(&mut self, now: Time) {
        if self.rec.current.is_some() {
            return;
        }
        let Some(n) = self.token.named else { return };
        let backlog = self.order.q.end() - self.order.q.deliver_next();
        let full = backlog > self.cfg.max_backlog && !self.order.resilience_wait;
        if n + 1 != self.order.next_ack || !self.order.q.holds_all() || full {
            return;
        }
        let passer = self.order.log.get(&n).map_or(self.me, |e| e.sender);
        self.token.accept(n, passer);
        let _ = now;
    }

    fn confirm(&mut self, to: NodeId, num: u64) {
        if to != self.me {
            self.send(Destination::Peer(to), packet::CONFIRM, |b| {
                b.extend_from_slice(&num.to_be_bytes())
            });
        }
    }

    /// What the token site does now: order a membership change, order data, pass a NULL
    /// ACK after a short wait, or keep the token when the ring is quiescent.
    pub(super) fn token_work(&mut self, now: Time) {
        if !self.token.holding
            || self.removed()
            || self.left()
            || self.rec.current.is_some()
            || self.fence_if_stalled(now)
        {
            // A null pass due while the token may not move waits for whatever unblocks it
            // (each calls this again); left armed in the past it would fire for ever.
            if self.timers.due(RingTimer::Null, now) {
                self.timers.clear(RingTimer::Null);
            }
            return;
        }
        if let Some(list) = self.next_change(now) {
            let next = Membership::successor(&list.members, self.me);
            return self.pass(now, next, 0, AckBody::NewList(list));
        }
        let room = self.order.stable_ts + self.cfg.max_unstable > self.order.q.end();
        let entries = if room { self.orderable() } else { vec![] };
        self.ask_data_gaps(now);
        let next = Membership::successor(&self.membership.ring, self.me);
        if !entries.is_empty() {
            return self.pass(now, next, 0, AckBody::Entries(entries));
        }
        // Data waits for room, or this member leaves: the token must go on.
        let busy = !room || self.leaving();
        if busy && self.membership.ring.len() > 1 {
            return self.pass(now, next, 0, AckBody::Entries(vec![]));
        }
        if (self.token.idle as usize) < self.membership.ring.len() {
            let at = self
                .timers
                .arm_once(RingTimer::Null, now + self.cfg.null_delay);
            if now >= at {
                let idle = self.token.idle + 1;
                self.pass(now, next, idle, AckBody::Entries(vec![]));
            }
        } else if let Some(at) = self.token.join_wait {
            // Quiescent with joins waiting to be gathered: order them then.
            self.timers.arm(RingTimer::Null, at);
        } else if !self.token.quiet {
            // Quiescent: keep the token; tell the site that passed it, once.
            self.token.quiet = true;
            if let Some((n, from)) = self.token.accepted {
                self.confirm(from, n);
            }
        }
    }

    /// The token site orders each member's packets in sequence, so one it lacks while it holds
    /// later ones blocks that member. It asks the origin for it after a grace (the first copy
    /// was lost) instead of waiting for the origin's retransmission timer, as the sequencer
    /// asks for a gap in a sender's requests.
    fn ask_data_gaps(&mut self, now: Time) {
        debug_assert!(self.token.holding, "only the token site asks for data gaps");
        let ring = &self.membership.ring;
        self.token.data_gaps.retain(|m, _| ring.contains(m));
        let mut asks = Vec::new();
        for &m in &self.membership.ring {
            if m == self.me {
                continue;
            }
            let next = self.order.ordered_next.get(&m).copied().unwrap_or(0);
            let gap = !self.order.data.has(m, next) && self.order.data.has_after(m, next);
            match self.token.data_gaps.get(&m).copied() {
                _ if !gap => {
                    self.token.data_gaps.remove(&m);
                }
                Some((s, at)) if s == next => {
                    if now >= at {
                        asks.push((m, next));
                        self.token
                            .data_gaps
                            .insert(m, (next, now + self.nack_retry()));
                    }
                }
                _ => {
                    self.token
                        .data_gaps
                        .insert(m, (next, now + self.cfg.nack_grace));
                }
            }
        }
        for (m, from) in asks {
            self.counters.nacks_sent += 1;
            self.send(Destination::Peer(m), packet::DATA_NACK, |b| {
                b.extend_from_slice(&from.to_be_bytes())
            });
        }
    }

    /// The token site lacks own packets from `from` on: send them again (a burst), and take it
    /// as a loss (section 4.6: a NACK naming this sender halves its window, once per loss).
    fn on_data_nack(&mut self, to: NodeId, body: &[u8]) {
        let Ok(from) = wire::Reader::new(body).u64() else {
            self.counters.malformed_dropped += 1;
            return;
        };
        self.counters.nacks_received += 1;
        let ordered = self.order.ordered_next.get(&self.me).copied().unwrap_or(0);
        let start = from.max(ordered);
        let end = self
            .flow
            .own_next
            .min(start.saturating_add(self.cfg.data_retry_burst));
        let again: Vec<Outgoing> = (start..end)
            .filter_map(|s| {
                self.order
                    .data
                    .get(self.me, s)
                    .map(|(p, q, f)| (s, *q, p.clone(), *f))
            })
            .collect();
        if again.is_empty() {
            return;
        }
        self.flow.on_nacked(start);
        self.flow.mark_resent(end);
        self.counters.retransmissions += again.len() as u64;
        self.send_runs(Destination::Peer(to), self.me, &again);
    }

    /// The next valid List Change Request as a New List: a leave, a lock change, or every
    /// join waiting (up to [`packet::MAX_JOINED`] and the ring's limit) in one New List. RMP
    /// orders membership changes as New Lists in the token's order; admitting the joiners
    /// waiting together changes nothing any member sees but the number of views in between,
    /// and one New List of a thousand members costs every member its 16 KB: a ring formed one
    /// joiner at a time cost O(n^3) bytes.
    ///
    /// Joins wait until [`Config::join_gather`] per member of the ring has passed since the
    /// last New List applied here, so that those asking meanwhile go in one New List (a ring
    /// of a thousand forming from joiners asking every millisecond made a New List of four
    /// every few milliseconds); the token then goes on, or stays here until then.
    fn next_change(&mut self, now: Time) -> Option<NewList> {
        let batch = self.membership.ring.len() >= self.cfg.batch_joins_from;
        let gather_until =
            self.membership.list_at + self.cfg.join_gather * self.membership.ring.len() as u32;
        let joins_wait = batch && now < gather_until;
        self.token.join_wait = None;
        loop {
            // Removals first: a member ordered out (one that joined another ring of this name)
            // must not be passed the token by a New List that changes something else.
            let lcrs = &self.membership.lcrs;
            let leave = lcrs.iter().find(|(w, (k, _))| {
                *k == packet::LCR_LEAVE && **w != self.me && self.membership.ring.contains(w)
            });
            let next = leave.or_else(|| {
                lcrs.iter()
                    .find(|(_, (k, _))| !joins_wait || *k != packet::LCR_JOIN)
            });
            let Some((&who, &(kind, first_sseq))) = next else {
                if joins_wait && !lcrs.is_empty() {
                    self.token.join_wait = Some(gather_until);
                }
                return None;
            };
            self.membership.lcrs.remove(&who);
            let mut members = self.membership.ring.clone();
            let (joined, left) = match kind {
                packet::LCR_JOIN
                    if !members.contains(&who) && members.len() >= self.max_members() =>
                {
                    self.refuse_join(who);
                    continue;
                }
                packet::LCR_JOIN if !members.contains(&who) => {
                    // Every other join waiting goes into the same New List (in a ring that
                    // large).
                    let more: Vec<(NodeId, u64)> = (self.membership.lcrs.iter())
                        .filter(|(_, (k, _))| batch && *k == packet::LCR_JOIN)
                        .map(|(&w, &(_, s))| (w, s))
                        .collect();
                    let ring: std::collections::BTreeSet<NodeId> =
                        members.iter().copied().collect();
                    let mut joined = vec![(who, first_sseq)];
                    for (w, s) in more {
                        if ring.contains(&w) {
                            continue;
                        }
                        if members.len() + joined.len() >= self.max_members() {
                            self.membership.lcrs.remove(&w);
                            self.refuse_join(w);
                        } else if joined.len() < packet::MAX_JOINED {
                            self.membership.lcrs.remove(&w);
                            joined.push((w, s));
                        }
                    }
                    let i = self.membership.idx(self.me).unwrap_or(0);
                    members.splice(i + 1..i + 1, joined.iter().map(|j| j.0));
                    (joined, None)
                }
                // A leaver never orders its own leave: it needs the token to move on.
                packet::LCR_LEAVE if members.contains(&who) && who != self.me => {
                    members.retain(|&m| m != who);
                    (vec![], Some(who))
                }
                packet::LCR_LOCK | packet::LCR_UNLOCK if members.contains(&who) => {
                    let acquire = kind == packet::LCR_LOCK;
                    return Some(self.lock_change(who, first_sseq as u16, acquire));
                }
                _ => continue,
            };
            let (locks, clients) = self.rpc.gs.state_for(&members, &self.rpc.gs.locks);
            let mut unicast_only = self.membership.unicast_only_of(&members);
            for &(j, _) in &joined {
                if self.membership.unicast_joiners.remove(&j) {
                    unicast_only.push(j);
                }
            }
            let joiners: BTreeMap<NodeId, u64> = joined.iter().copied().collect();
            let next_sseq = members
                .iter()
                .map(|m| match self.order.ordered_next.get(m) {
                    Some(&n) => n,
                    None => joiners.get(m).copied().unwrap_or(0),
                })
                .collect();
            let joined: Vec<NodeId> = joined.into_iter().map(|j| j.0).collect();
            // A token site never orders a list without itself (a leaver does not order its
            // own leave).
            debug_assert!(members.contains(&self.me));
            return Some(NewList {
                view_id: self.membership.view_id + 1,
                members,
                joined,
                left,
                next_sseq,
                lock_op: None,
                locks,
                clients,
                unicast_only,
            });
        }
    }

    /// Full: joiner `who` is told at once (asking on, it would wait unanswered for as long as
    /// nobody leaves). Only the token site gets here: one answer.
    fn refuse_join(&mut self, who: NodeId) {
        self.counters.backpressure_refusals += 1;
        let limit = self.max_members() as u32;
        self.send(Destination::Peer(who), packet::JOIN_REFUSED, |b| {
            b.put_u32(limit)
        });
    }

    /// Data this site holds that can be ordered: each member's packets in sequence, a message
    /// in fragments all in one ACK or not yet (so that no New List falls inside it: a joiner
    /// would be in the view where it is delivered without its beginning).
    fn orderable(&self) -> Vec<(NodeId, u64)> {
        let mut out = Vec::new();
        // Called only with room: the slots not yet stable stay within their bound.
        debug_assert!(self.order.q.end() < self.order.stable_ts + self.cfg.max_unstable);
        let room = (self.order.stable_ts + self.cfg.max_unstable - self.order.q.end()) as usize;
        let max = packet::MAX_ENTRIES.min(room);
        // Start after this site, so that no member is always served first.
        let start = self.membership.idx(self.me).map_or(0, |i| i + 1);
        for k in 0..self.membership.ring.len() {
            let m = self.membership.ring[(start + k) % self.membership.ring.len()];
            let mut s = self.order.ordered_next.get(&m).copied().unwrap_or(0);
            let first = out.len();
            while out.len() < max && self.order.data.has(m, s) {
                out.push((m, s));
                s += 1;
            }
            // The run ends inside a message begun in it: that message waits for its other
            // fragments (or for room). One begun before (ordered in parts by a reformation, or
            // a forgery) goes as it is.
            let last = out.last().filter(|_| out.len() > first);
            if let Some((_, _, Some((i, n)))) = last.and_then(|&(o, q)| self.order.data.get(o, q)) {
                let begun = out.len() - first;
                if i + 1 < *n && usize::from(*i) < begun {
                    out.truncate(out.len() - usize::from(*i) - 1);
                }
            }
        }
        self.orderable_clients(&mut out, max);
        debug_assert!(out.len() <= max, "one ACK orders at most its room");
        out
    }

    fn pass(&mut self, now: Time, next: NodeId, idle: u32, body: AckBody) {
        // Only the token site passes, and never while the ring reforms.
        debug_assert!(self.token.holding && self.rec.current.is_none());
        // Own data goes before the ACK that orders it.
        self.flush_outbox();
        let ack = Ack {
            num: self.order.next_ack,
            view: self.membership.view_id,
            first_ts: self.order.q.end(),
            next_site: next,
            idle,
            ring: self.membership.ring_digest,
            lineage: self.membership.lineage,
            body,
        };
        self.counters.acks_sent += 1;
        let mut buf = self.header(packet::ACK);
        ack.encode(&mut buf);
        self.out.push_back((Destination::Group, buf.clone()));
        self.token.holding = false;
        self.timers.clear(RingTimer::Null);
        self.order.highest_heard = Some(ack.num);
        self.order.last_site = self.me;
        let num = ack.num;
        self.apply(now, self.me, ack, buf);
        if next != self.me {
            self.token.passing = Some((num, next, self.cfg.pass_retry));
            self.timers.arm(RingTimer::Pass, now + self.cfg.pass_retry);
        }
        self.deliver();
        self.try_accept(now);
        // A ring of one passes to itself: go on at once (bounded by what there is to do).
        if next == self.me && self.token.holding {
            self.token_work(now);
        }
    }

    // ---- NACKs ------------------------------------------------------------------------------

    pub(super) fn watch_gaps(&mut self, now: Time) {
        let gap = self.member() && !self.left() && self.order.lacks();
        self.order
            .gaps
            .watch(now, 0, gap.then_some(1), self.cfg.nack_grace);
        let answered =
            (self.order.asked_through).is_some_and(|through| self.order.q.held_next() >= through);
        if !gap || answered {
            self.order.nack_tries = 0;
            self.order.asked_through = None;
        }
        if gap && answered {
            // One lost datagram of bundled messages leaves hundreds of slots missing, more
            // than one NACK names: asking for the rest only once per retry interval made a
            // receiver overrun on loopback lag ~575 ms behind. The answer came, so the peer
            // asked is there and not overrun by this: ask for the next part now.
            self.order.gaps.ask_now(now);
            self.nack(now);
        }
    }

    fn nack(&mut self, now: Time) {
        self.order
            .gaps
            .on_timeout(now, self.member() && !self.left(), self.nack_retry());
        if !self.order.gaps.take_request() {
            return;
        }
        let acks = match self.order.highest_heard {
            // Saturating: an ACK numbered 2^64 - 1 (forged; found by `ring_state`) is heard too.
            Some(h) if h >= self.order.next_ack => self.order.next_ack..h.saturating_add(1),
            _ => self.order.next_ack..self.order.next_ack,
        };
        let slots = self.order.q.request_missing(packet::MAX_NACK_SLOTS);
        if acks.is_empty() && slots.is_empty() {
            return;
        }
        self.order.asked_through = slots.last().map(|&ts| ts + 1);
        self.order.nack_tries += 1;
        let (to, everyone) = self.nack_scope(self.order.nack_tries);
        self.counters.nacks_sent += 1;
        let n = Nack {
            acks,
            slots,
            everyone,
        };
        self.send(to, packet::NACK, |b| n.encode(b));
    }

    /// Where try `tries` of a NACK goes, and whether every member is to answer it.
    fn nack_scope(&self, tries: u32) -> (Destination, bool) {
        if self.rec.current.is_some() {
            // Reforming: whoever holds it answers (the last token site may be the one gone).
            return (Destination::Group, true);
        }
        if tries <= self.cfg.nack_escalate && self.order.last_site != self.me {
            (Destination::Peer(self.order.last_site), true)
        } else {
            (Destination::Group, tries > 2 * self.cfg.nack_escalate)
        }
    }

    fn on_nack(&mut self, now: Time, from: NodeId, body: &[u8]) {
        let Ok(n) = Nack::decode(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        // A member the ring went on without asks for what it will never get: tell it.
        self.tell_expelled(now, from, None);
        self.counters.nacks_received += 1;
        let to = Destination::Peer(from);
        let end = n.acks.end.min(n.acks.start.saturating_add(32));
        for a in n.acks.start..end {
            if let Some(e) = self
                .order
                .log
                .get(&a)
                .filter(|e| n.everyone || e.sender == self.me)
            {
                let b = e.bytes.clone();
                self.counters.retransmissions += 1;
                self.out.push_back((to, b));
            }
        }
        // Slots of one origin's consecutive packets (one lost datagram of bundled messages)
        // go back bundled too: one datagram instead of one per slot.
        let mut again: Vec<(NodeId, Vec<Outgoing>)> = Vec::new();
        for ts in n.slots {
            if let Some(Entry::Data { origin, sseq, .. }) = self.order.q.get(ts).map(|s| &s.entry) {
                // A NACK naming one of this sender's packets: a member was overrun (4.6).
                if *origin == self.me {
                    self.flow.on_nacked(*sseq);
                }
            }
            if let Some(Entry::Data {
                origin,
                sseq,
                payload: Some(p),
                qos,
                frag,
                client,
            }) = self.order.q.get(ts).map(|s| s.entry.clone())
            {
                // A non-member's packet is owned by the site that ordered it.
                let owner =
                    origin == self.me || (client && self.order.orderer_of(ts) == Some(self.me));
                if !n.everyone && !owner {
                    continue;
                }
                self.counters.retransmissions += 1;
                match again.last_mut() {
                    Some((o, run)) if *o == origin => run.push((sseq, qos, p, frag)),
                    _ => again.push((origin, vec![(sseq, qos, p, frag)])),
                }
            }
        }
        for (origin, run) in again {
            self.send_runs(to, origin, &run);
        }
    }

    // ---- data and List Change Requests ----------------------------------------------------

    fn on_data(&mut self, now: Time, body: &[u8]) {
        let Ok(run) = packet::decode_data(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        if !self.member() {
            return;
        }
        // One copy of the body, which the run's messages are slices of: a copy (and an
        // allocation) per message was a measurable part of a receiver's time. Into a buffer
        // of the pool, back there once every message of it is stable and delivered.
        let data = self.pool.copy(body);
        let mut filled = false;
        let mut fresh = false;
        for (sseq, (qos, payload)) in (run.first..).zip(run.msgs) {
            if qos == Qos::Unreliable {
                self.on_unreliable(run.origin, sseq, payload, None);
                continue;
            }
            match self.on_data_msg(
                run.origin,
                sseq,
                (qos, None),
                data.slice(sub_range(body, payload)),
            ) {
                Some(true) => filled = true,
                Some(false) => fresh = true,
                None => {}
            }
        }
        if filled {
            self.after_progress(now);
        } else if fresh {
            self.token_work(now);
        }
    }

    /// A fragment of a message larger than a datagram: a message of its own in its origin's
    /// stream (or among its unreliable messages), put together at delivery.
    fn on_frag(&mut self, now: Time, body: &[u8]) {
        let Ok(f) = packet::decode_frag(body, self.cfg.max_fragments()) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        if !self.member() {
            return;
        }
        if f.qos == Qos::Unreliable {
            return self.on_unreliable(f.origin, f.sseq, f.payload, Some(f.frag));
        }
        let payload = Bytes::copy_from_slice(f.payload);
        match self.on_data_msg(f.origin, f.sseq, (f.qos, Some(f.frag)), payload) {
            Some(true) => self.after_progress(now),
            Some(false) => self.token_work(now),
            None => {}
        }
    }

    /// One ordered-stream message of a data packet: `Some(true)` when it filled an ordered slot,
    /// `Some(false)` when it was kept for ordering, `None` when it was not needed.
    fn on_data_msg(
        &mut self,
        origin: NodeId,
        sseq: u64,
        (qos, frag): (Qos, Option<Frag>),
        payload: Bytes,
    ) -> Option<bool> {
        if self.order.q.waits_for(origin, sseq) {
            self.order
                .q
                .fill(origin, sseq, (payload.clone(), qos, frag));
            self.deliver_early(origin, sseq, qos, &payload, frag);
            return Some(true);
        }
        let Some(&next) = self.order.ordered_next.get(&origin) else {
            self.counters.foreign_dropped += 1;
            return None;
        };
        if sseq < next || sseq >= next + self.cfg.window_msgs || self.order.data.has(origin, sseq) {
            self.counters.duplicates += 1;
            return None;
        }
        // Only the reliable and source-ordered levels are delivered ahead of their slot
        // (`deliver_early`): a second handle on the payload only for them.
        let early = matches!(qos, Qos::Reliable | Qos::SourceOrdered).then(|| payload.clone());
        self.order.data.insert(origin, sseq, (payload, qos, frag));
        if let Some(p) = early {
            self.deliver_early(origin, sseq, qos, &p, frag);
        }
        Some(false)
    }

    fn on_lcr(&mut self, now: Time, from: NodeId, body: &[u8]) {
        let Some(&kind) = body.first() else {
            self.counters.malformed_dropped += 1;
            return;
        };
        // A joiner that was a member before goes on numbering where it was; a lock request
        // names its lock.
        let first_sseq = match (kind, body.get(1..3), body.get(1..9)) {
            (packet::LCR_LOCK | packet::LCR_UNLOCK, Some(b), _) => {
                u64::from(u16::from_be_bytes(b.try_into().expect("2 bytes")))
            }
            (packet::LCR_LOCK | packet::LCR_UNLOCK, None, _) => {
                self.counters.malformed_dropped += 1;
                return;
            }
            (_, _, Some(b)) => u64::from_be_bytes(b.try_into().expect("8 bytes")),
            _ => 0,
        };
        if !self.member() || self.removed() {
            return;
        }
        let member = self.membership.ring.contains(&from);
        if self.rec.current.is_some() {
            // Reforming, a member asks in: its admission may never have reached it (it was
            // cut off as the New List went out), and without it the member answers no
            // Recovery Start, so a reformation needing it never forms (every-engine sweep
            // seed 3839: a ring of two whose joiner was cut off at its admission waited for it
            // for ever). The New List again lets it answer: only the site that made it, of the
            // view this member is in, to a joiner never heard as a member since (a member that
            // took part and asks in again was left out by a reformation elsewhere, and must
            // join that ring, never this stale one: seeds 430, 1588).
            if kind == packet::LCR_JOIN && member {
                if let Some(b) = self.unconfirmed_admission(from) {
                    self.out.push_back((Destination::Peer(from), b));
                }
            }
            return;
        }
        let flags = body.get(9).copied().unwrap_or(0);
        if kind == packet::LCR_JOIN && flags & packet::JOIN_TARGETED != 0 {
            let Some(b) = body.get(10..14) else {
                self.counters.malformed_dropped += 1;
                return;
            };
            let into = NodeId(u32::from_be_bytes(b.try_into().expect("4 bytes")));
            if !self.membership.ring.contains(&into) {
                return; // for another ring of this name
            }
        }
        match kind {
            packet::LCR_JOIN
                if member
                    && self.membership.lcrs.get(&from).map(|l| l.0) == Some(packet::LCR_LEAVE) =>
            {
                // Being ordered out (it took part in another ring): its old admission is
                // void; it joins afresh once the removal is ordered.
            }
            packet::LCR_JOIN if member => {
                // Admitted already: the New List again, to the joiner only, from the site that
                // made it (or any member once that one is gone): from every member, a joiner
                // of a ring of a thousand that lost a part of it got a thousand copies.
                let ring = &self.membership.ring;
                let list = self.order.log.values().find(|e| {
                    (e.sender == self.me || !ring.contains(&e.sender))
                        && wire::decode(&e.bytes)
                        .ok()
                        .and_then(|p| Ack::decode(p.body).ok())
                        .is_some_and(
                            |a| matches!(a.body, AckBody::NewList(l) if l.joined.contains(&from)),
                        )
                });
                if let Some(e) = list {
                    let b = e.bytes.clone();
                    self.out.push_back((Destination::Peer(from), b));
                }
            }
            packet::LCR_LEAVE if !member => {
                if let Some((_, b)) = self
                    .membership
                    .removed_lists
                    .iter()
                    .find(|(m, _)| *m == from)
                {
                    let b = b.clone();
                    self.out.push_back((Destination::Peer(from), b));
                }
            }
            packet::LCR_LOCK | packet::LCR_UNLOCK if !member => {
                self.counters.foreign_dropped += 1;
            }
            packet::LCR_JOIN | packet::LCR_LEAVE | packet::LCR_LOCK | packet::LCR_UNLOCK => {
                if self.membership.lcrs.len() < self.cfg.max_lcrs
                    || self.membership.lcrs.contains_key(&from)
                {
                    self.membership.lcrs.insert(from, (kind, first_sseq));
                    let unicast = flags & packet::JOIN_UNICAST_ONLY != 0;
                    if kind == packet::LCR_JOIN
                        && unicast
                        && self.membership.unicast_joiners.len() < self.cfg.max_lcrs
                    {
                        self.membership.unicast_joiners.insert(from);
                    }
                    debug_assert!(self.membership.lcrs.len() <= self.cfg.max_lcrs.max(1));
                    debug_assert!(self.membership.unicast_joiners.len() <= self.cfg.max_lcrs);
                }
                if self.token.holding {
                    self.token.idle = 0;
                    self.timers.clear(RingTimer::Null);
                    self.token_work(now);
                }
            }
            _ => self.counters.malformed_dropped += 1,
        }
    }

    /// The New List that admitted `joiner` into the current view, if this member made it and
    /// has applied no ACK of the joiner's since (it never acted as a member).
    fn unconfirmed_admission(&self, joiner: NodeId) -> Option<Vec<u8>> {
        if self.membership.admitted_in.get(&joiner) != Some(&self.membership.view_id) {
            return None;
        }
        let (&num, e) = self.order.log.iter().find(|(_, e)| {
            e.sender == self.me
                && wire::decode(&e.bytes)
                    .ok()
                    .and_then(|p| Ack::decode(p.body).ok())
                    .is_some_and(|a| {
                        matches!(a.body, AckBody::NewList(l)
                            if l.joined.contains(&joiner) && l.view_id == self.membership.view_id)
                    })
        })?;
        let heard = (self.order.log.range(num + 1..)).any(|(_, e)| e.sender == joiner);
        (!heard).then(|| e.bytes.clone())
    }

    /// Whether the ring is in recovery mode here: a reformation is under way, or a failure
    /// waits for the application's reset.
    pub(super) fn recovering(&self) -> bool {
        self.rec.current.is_some()
            || self.timers.is_armed(RingTimer::ReformRetry)
            || self.rec.failure_reported
    }

    /// The member runs at `now` (every input: a datagram, a timer, a call). If it stood still
    /// long enough for the others to have reformed without it, its token site is fenced the
    /// next time it would order ([`Ring::fence_if_stalled`]).
    ///
    /// While the ring is active the member runs at least every half stall bound (the
    /// detector's heartbeat), so a longer gap is a stall; a quiescent ring keeps no timer (it
    /// stays silent), so there a long idle time counts as one too (without the detector's
    /// forgiveness): after it, a member's first turn as token site waits one round trip. (Its
    /// socket may hold the token, passed while it stood still by a ring gone active.) A fence
    /// up at a stall is raised afresh.
    fn run(&mut self, now: Time) {
        let beating = self.in_ring() && !self.detector_idle();
        let run = match self.rec.detector.as_mut() {
            Some(d) => d.run(now, beating),
            None => return,
        };
        if !self.in_ring() {
            return;
        }
        match run {
            Run::Stalled => {
                self.rec.stalls += 1;
                self.token.stalled = true;
            }
            Run::LongIdle => self.token.stalled = true,
            Run::OnTime => return,
        }
        // A fence raised before the stall is lifted only by answers to a probe sent after it:
        // answers to the old one may have waited in the socket through the stall.
        if self.token.fence.take().is_some() && self.token.holding {
            self.fence_if_stalled(now);
        }
    }

    /// At the token site, before it orders: if this member stood still since it last confirmed
    /// its place, fence the order until a majority of the ring confirms it ([`Fence`]), and ask
    /// them. Returns whether the order is fenced.
    fn fence_if_stalled(&mut self, now: Time) -> bool {
        if self.token.stalled && self.token.fence.is_none() {
            self.token.stalled = false;
            let token = self.rng.next_u64() as u32;
            self.token.fence = Fence::raise(self.me, &self.membership.ring, token, now);
            if self.token.fence.is_some() {
                self.rec.fences_raised += 1;
                self.probe_fence(now);
            }
        }
        self.token.fence.is_some()
    }

    /// The fence's probe, if one is due: one multicast asks the whole ring.
    fn probe_fence(&mut self, now: Time) {
        let timeout = self.rec.detector.as_ref().map(|d| d.probe_timeout());
        let (Some(f), Some(timeout)) = (self.token.fence.as_mut(), timeout) else {
            return;
        };
        if let Some(token) = f.probe(now, timeout) {
            self.send(Destination::Group, packet::PROBE, |b| b.put_u32(token));
        }
    }

    /// A PROBE_ACK that answers a fence's probe (`token`): lift it once a majority answered.
    fn on_fence_answer(&mut self, now: Time, from: NodeId, token: u32) {
        let (me, ring) = (self.me, &self.membership.ring);
        if self
            .token
            .fence
            .as_mut()
            .is_some_and(|f| f.answer(me, ring, from, token))
        {
            self.token.fence = None;
            self.rec.fences_lifted += 1;
            self.after_progress(now);
        }
    }

    /// The failure detector's timers: probes to send, and a member found failed.
    fn detect(&mut self, now: Time) {
        if !self.in_ring() || self.recovering() {
            return;
        }
        if self.detector_idle() {
            // A quiescent ring is nearly silent: one probing round every `Config::idle_probe` finds a
            // member that crashed meanwhile (section 4.4 finds failures through retries, and
            // a quiescent ring retries nothing).
            if self.timers.due(RingTimer::IdleProbe, now) {
                self.timers
                    .arm(RingTimer::IdleProbe, now + self.cfg.idle_probe);
            } else {
                self.timers
                    .arm_once(RingTimer::IdleProbe, now + self.cfg.idle_probe);
                return;
            }
        } else {
            self.timers.clear(RingTimer::IdleProbe);
        }
        let Some(d) = self.rec.detector.as_mut() else {
            return;
        };
        let failed = d.on_timeout(now);
        let mut probes = Vec::new();
        while let Some(p) = d.poll_probe() {
            probes.push(p);
        }
        for p in probes {
            // Token 0: the detector's probe.
            self.send(Destination::Peer(p), packet::PROBE, |b| b.put_u32(0));
        }
        let Some(suspect) = failed else { return };
        if self.rec.policy.auto_reset {
            self.start_reformation(now, Some(suspect));
        } else {
            // Recovery by hand (`reset`), as in the Amoeba paper.
            self.rec.failure_reported = true;
            self.halt_token();
            self.events
                .push_back(Event::Recovery(crate::engine::Recovery::Failed { suspect }));
        }
    }

    /// Every running timer, by name: the table's (own unordered data waits while a
    /// reformation runs; the idle probe counts only while the ring is quiescent), and the
    /// parts' own deadlines.
    fn timers(&self) -> Deadlines {
        let reforming = self.rec.current.is_some();
        let mut d = self.timers.deadlines(|k| match k {
            RingTimer::DataRetry => !reforming,
            RingTimer::IdleProbe => false,
            _ => true,
        });
        d.at("nack", self.order.gaps.deadline())
            .at("data gaps", self.token.data_gap_deadline())
            .at(
                "depart",
                self.membership.departing.iter().map(|d| d.3).min(),
            )
            .at(
                "probe",
                (self.in_ring() && !self.recovering())
                    .then(|| match self.timers.get(RingTimer::IdleProbe) {
                        Some(t) if self.detector_idle() => Some(t),
                        _ => self.rec.detector.as_ref().and_then(|d| d.next_timeout()),
                    })
                    .flatten(),
            )
            .at("reform", self.rec.current.as_ref().map(|r| r.next_at))
            .at("fence", self.token.fence.as_ref().map(Fence::deadline))
            .at(
                "heartbeat",
                (self.in_ring() && !self.detector_idle())
                    .then(|| self.rec.detector.as_ref().and_then(|d| d.heartbeat()))
                    .flatten(),
            )
            .at(
                "requests",
                self.rpc.client.as_ref().and_then(|c| c.next_timeout()),
            );
        d
    }
}

impl Ring {
    /// A fresh engine in `role` in place of this one ([`Engine::rejoin`],
    /// [`Engine::start_alone`]): counters and message numbering go on.
    fn start_over(&mut self, now: Time, role: Role) -> Result<(), SendError> {
        if self.leaving() {
            return Err(SendError::NotMember);
        }
        let settings = self.settings;
        // A ring started over numbers its views above every view this member saw: the ring it
        // left may go on with the old numbers (a member still counting us), and an EXPELLED
        // from us must not read to it as news from an older view.
        let views_seen = self.views_seen.max(self.membership.view_id);
        let first_view = views_seen + 1;
        let mut fresh = Ring::build(
            &EngineParams {
                role,
                group: self.group,
                me: self.me,
                max_datagram_bytes: self.max_datagram_bytes,
                now,
                seed: self.rng.next_u64(),
                settings: &settings,
            },
            self.cfg,
            first_view,
        );
        fresh.counters = self.counters.clone();
        fresh.roles_refused = self.roles_refused;
        fresh.fragments_dropped = self.fragments_dropped;
        fresh.views_seen = views_seen;
        fresh.rings_left = std::mem::take(&mut self.rings_left);
        if self.membership.lineage != 0 {
            let here = (self.membership.lineage, self.membership.view_id);
            fresh.rings_left.retain(|r| r.0 != here.0);
            if fresh.rings_left.len() == RINGS_KEPT {
                fresh.rings_left.pop_front();
            }
            fresh.rings_left.push_back(here);
        }
        debug_assert!(fresh.rings_left.len() <= RINGS_KEPT);
        // Message numbers go on, so that no message is taken for one sent before.
        fresh.flow.own_next = self.flow.own_next;
        fresh.flow.own_stable = self.flow.own_next;
        fresh.flow.own_unreliable = self.flow.own_unreliable;
        if role == Role::Create {
            // Its ring orders its messages from there on (a joiner's New List says so).
            let next = self.flow.own_next;
            fresh.order.ordered_next.insert(self.me, next);
            fresh
                .order
                .sources
                .insert(self.me, SourceCursor::from(next));
        }
        fresh.rec.seen = self.rec.seen;
        fresh.rec.bound = self.rec.bound;
        fresh.rec.committed = self.rec.committed;
        *self = fresh;
        Ok(())
    }

    /// Own ordered-stream messages were just numbered: the retransmission timer runs, and the
    /// token site may order them.
    fn sent_own(&mut self, now: Time) {
        if !self.timers.is_armed(RingTimer::DataRetry) {
            self.timers
                .arm(RingTimer::DataRetry, now + self.flow.rtt.rto());
            self.flow.data_retry_mark = self.order.ordered_next.get(&self.me).copied().unwrap_or(0);
            self.flow.data_retry_heard = self.order.highest_heard;
        }
        self.token_work(now);
        self.arm_stall(now);
    }

    /// Whether no ACK was heard since the retransmission timer was armed while the token was
    /// moving: the last ACK heard passed it on (it did not leave it with a quiescent site) to
    /// another member. Then the timer's expiry tells of a late token, not of lost packets.
    fn token_stood_still(&self) -> bool {
        let n = self.membership.ring.len();
        self.flow.data_retry_heard.is_some()
            && self.flow.data_retry_heard == self.order.highest_heard
            && n > 1
            && (self.token.idle as usize) < n
            && !self.token.holding
    }

    /// Submits a message larger than a datagram: each fragment a message of its own at the
    /// message's QoS, numbered consecutively, so that the token site orders each (RMP orders
    /// packets) and every member puts them together in its origin's order. Returns the last
    /// fragment's number: the message is delivered (and its send completes) there.
    fn submit_fragments(&mut self, now: Time, payload: Bytes, qos: Qos) -> Result<u64, SendError> {
        let Ok(frags) = self.fragmenter.split(payload.clone()) else {
            return Err(SendError::TooLarge);
        };
        let count = frags.len();
        // Longer than one data packet holds, so at least two fragments (a count of one is no
        // fragment on the wire).
        debug_assert!(count >= 2, "a message in fragments has two at least");
        // A message whose fragments could never be in the send window (or the datagram
        // queue) together would wait for ever, and the token site orders it in one ACK within
        // its bound on unstable slots: beyond those, refused as too large, not pushed back.
        if count > self.cfg.max_fragments() {
            return Err(SendError::TooLarge);
        }
        let free = (self.out.capacity() - self.out.len()).saturating_sub(self.flow.outbox.len());
        let bytes = payload.len() + count * packet::FRAG_FIXED;
        if !self.can_submit()
            || free < count + 1
            || (qos != Qos::Unreliable
                && (self.own_unordered() + count as u64 > self.cfg.window_msgs
                    || !self.flow.admits_all(bytes)))
        {
            self.counters.backpressure_refusals += 1;
            return Err(SendError::WouldBlock);
        }
        self.counters.submitted += 1;
        if qos == Qos::Unreliable {
            // Sent once each, outside the ordered stream; delivered here whole, and done.
            let mut last = 0;
            for f in frags {
                let n = self.flow.own_unreliable;
                self.flow.own_unreliable += 1;
                let frag = Some((f.index, f.count));
                self.send_data(Destination::Group, self.me, n, (qos, frag), &f.payload);
                last = n;
            }
            return Ok(self.deliver_own_unreliable(last, payload));
        }
        let mut last = 0;
        for f in frags {
            let n = self.flow.own_next;
            self.flow.own_next += 1;
            let frag = Some((f.index, f.count));
            self.flow.outbox.push((n, qos, f.payload.clone(), frag));
            self.flow
                .on_send(n, now, f.payload.len() + packet::FRAG_FIXED);
            (self.order.data).insert(self.me, n, (f.payload.clone(), qos, frag));
            self.deliver_early(self.me, n, qos, &f.payload, frag);
            last = n;
        }
        // Checked above: the send window holds every fragment.
        debug_assert!(self.own_unordered() <= self.cfg.window_msgs);
        self.sent_own(now);
        Ok(last)
    }
}

impl Shelled for Ring {
    const KIND: EngineKind = EngineKind::Ring;
    /// The ring numbers reformations and views in the header's incarnation field (no
    /// incarnation filter); members of one ring tell reformations apart by the bodies.
    fn gate(&mut self) -> Gate<'_> {
        Gate::new(self.group, self.me, self.left(), None, &mut self.counters)
    }

    fn clock(&mut self, now: Time) {
        self.run(now);
    }

    fn parts_in(&mut self) -> Option<&mut PartsIn> {
        Some(&mut self.parts_in)
    }

    fn on_packet(&mut self, now: Time, _: NodeId, pkt: Packet<'_>, datagram: &[u8], _: Option<u8>) {
        let h = pkt.header;
        if h.ptype == packet::JOIN_REFUSED {
            self.on_join_refused(pkt.body);
            return;
        }
        if self.rpc.client.is_some() {
            // A non-member hears only its acknowledgements and replies.
            if matches!(h.ptype, packet::NM_ACK | packet::NM_REPLY) {
                self.on_client_packet(h.sender, h.ptype, pkt.body);
            }
            return;
        }
        if let Some(d) = self.rec.detector.as_mut() {
            d.heard(h.sender, now);
        }
        match h.ptype {
            packet::PROBE => {
                let Ok(token) = packet::decode_probe(pkt.body) else {
                    self.counters.malformed_dropped += 1;
                    return;
                };
                if !(self.in_ring() && self.membership.ring.contains(&h.sender)) {
                    self.tell_expelled(now, h.sender, None);
                } else if token == 0 || !self.recovering() {
                    if token == 0 && self.token.probed_again(h.sender, now) {
                        // Two of a peer's failure-detector probes at one instant waited in
                        // the socket together: the peer retried before this member read
                        // either, so it stood still, whatever its clock says (a process
                        // stopped after its I/O loop read the clock reads its backlog at the
                        // time before the stop, and `run` sees no gap). Order nothing more
                        // before a majority answers a fresh probe.
                        self.token.stalled = true;
                    }
                    // A fenced member's probe (a token) is answered only outside a
                    // reformation: one under way may be forming a ring without it.
                    let next = self.order.next_ack;
                    self.send(Destination::Peer(h.sender), packet::PROBE_ACK, |b| {
                        b.put_u64(next);
                        b.put_u32(token);
                    });
                }
            }
            packet::PROBE_ACK => {
                let Ok((n, token)) = packet::decode_probe_ack(pkt.body) else {
                    self.counters.malformed_dropped += 1;
                    return;
                };
                // The answer says how far the ring went: the last ACKs before it went
                // quiescent may have been lost here, and nothing else would tell.
                if n > self.order.next_ack && self.in_ring() {
                    self.order.highest_heard =
                        Some(self.order.highest_heard.unwrap_or(0).max(n - 1));
                    self.watch_gaps(now);
                }
                if token != 0 {
                    self.on_fence_answer(now, h.sender, token);
                }
            }
            packet::EXPELLED => self.on_expelled(now, h.sender, pkt.body),
            packet::RECOVERY_START => self.on_recovery_start(now, h.sender, pkt.body),
            packet::RECOVERY_VOTE => self.on_recovery_vote(now, h.sender, pkt.body),
            packet::RECOVERY_FETCH => self.on_recovery_fetch(h.sender, pkt.body),
            packet::RECOVERY_NEW_LIST => self.on_recovery_new_list(now, h.sender, pkt.body),
            packet::RECOVERY_ACK_NEW_LIST => self.on_recovery_ack_new_list(now, h.sender, pkt.body),
            packet::RECOVERY_ABORT => self.on_recovery_abort(now, h.sender, pkt.body),
            packet::RECOVERY_COMMIT => self.on_recovery_commit(now, h.sender, pkt.body),
            packet::DATA => self.on_data(now, pkt.body),
            packet::DATA_FRAG => self.on_frag(now, pkt.body),
            packet::ACK => self.on_ack(now, h.sender, datagram, pkt.body),
            packet::NACK => self.on_nack(now, h.sender, pkt.body),
            packet::LCR => self.on_lcr(now, h.sender, pkt.body),
            packet::GOODBYE => {
                self.membership.departing.retain(|d| d.0 != h.sender);
                self.update_stable();
                self.after_progress(now);
            }
            packet::DATA_NACK => self.on_data_nack(h.sender, pkt.body),
            packet::NM_DATA => self.on_nm_data(now, h.sender, pkt.body),
            packet::FORWARD => self.on_forward(h.sender, pkt.body),
            packet::NM_ACK => self.counters.foreign_dropped += 1,
            packet::NM_REPLY => self.counters.foreign_dropped += 1,
            packet::CONFIRM => {
                let mut r = wire::Reader::new(pkt.body);
                match r.u64() {
                    Ok(n) if self.token.passing.is_some_and(|p| p.0 == n) => {
                        self.stop_passing();
                        if self
                            .membership
                            .admission
                            .is_some_and(|(_, by)| by != h.sender)
                        {
                            self.membership.admission = None;
                            self.after_progress(now);
                        }
                    }
                    Ok(_) => {}
                    Err(_) => self.counters.malformed_dropped += 1,
                }
            }
            _ => self.counters.malformed_dropped += 1,
        }
    }
}

impl Engine for Ring {
    fn handle_datagram(&mut self, now: Time, from: NodeId, datagram: &[u8]) {
        shell::receive(self, now, from, datagram, None)
    }

    fn handle_timeout(&mut self, now: Time) {
        if self.left() {
            return;
        }
        self.run(now);
        self.probe_fence(now);
        if self.rpc.client.is_some() {
            return self.client_timeout(now);
        }
        self.lock_timeout(now);
        self.detect(now);
        self.reform_timeout(now);
        if self.left() {
            return;
        }
        if self.timers.due(RingTimer::Pass, now) {
            match self.token.passing {
                Some((n, next, backoff)) => {
                    if let Some(e) = self.order.log.get(&n) {
                        let b = e.bytes.clone();
                        self.counters.retransmissions += 1;
                        self.out.push_back((Destination::Peer(next), b));
                    }
                    let backoff = (backoff * 2).min(self.cfg.pass_retry_max);
                    self.token.passing = Some((n, next, backoff));
                    self.timers.arm(RingTimer::Pass, now + backoff);
                }
                None => self.timers.clear(RingTimer::Pass),
            }
        }
        if self.timers.due(RingTimer::Lcr, now) {
            self.timers.arm(RingTimer::Lcr, now + self.cfg.lcr_retry);
            let kind = if self.member() {
                packet::LCR_LEAVE
            } else {
                packet::LCR_JOIN
            };
            // A leaver asks once its own messages are all ordered.
            let ready = !self.member()
                || self.order.ordered_next.get(&self.me) == Some(&self.flow.own_next);
            if ready {
                let own_next = self.flow.own_next;
                let unicast = self.settings.unicast_only;
                let into = self.membership.join_into;
                let flags = if unicast {
                    packet::JOIN_UNICAST_ONLY
                } else {
                    0
                } | if into.is_some() {
                    packet::JOIN_TARGETED
                } else {
                    0
                };
                self.send(Destination::Group, packet::LCR, |b| {
                    b.push(kind);
                    if kind == packet::LCR_JOIN && (own_next > 0 || flags != 0) {
                        b.extend_from_slice(&own_next.to_be_bytes());
                    }
                    if kind == packet::LCR_JOIN && flags != 0 {
                        b.push(flags);
                    }
                    if let (packet::LCR_JOIN, Some(into)) = (kind, into) {
                        b.extend_from_slice(&into.0.to_be_bytes());
                    }
                });
                if self.member() && self.token.holding {
                    self.token_work(now);
                }
            }
        }
        if self.timers.due(RingTimer::DataRetry, now) && self.rec.current.is_none() {
            let ordered = self.order.ordered_next.get(&self.me).copied().unwrap_or(0);
            if ordered >= self.flow.own_next || self.removed() {
                self.timers.clear(RingTimer::DataRetry);
            } else {
                if ordered == self.flow.data_retry_mark && self.token_stood_still() {
                    // Expired with nothing ordered, but no ACK came either: the token is late
                    // (a site, or this member, kept off a busy CPU), which says nothing of this
                    // sender's packets. A token site orders every packet it holds, this member
                    // its own at its turn, and a site that lacks one asks for it
                    // (`ask_data_gaps`): resending to every member and halving the window for
                    // a late token (most expiries of a loaded host) took a 1 KiB loopback run
                    // from 16 MB to 1 MB and to half its rate. Once ACKs come without these
                    // packets, or the ring is quiescent, the next expiry resends.
                    self.flow.retry_deferred += 1;
                } else if ordered == self.flow.data_retry_mark {
                    // Expired with nothing ordered: congestion (section 4.6).
                    self.flow.on_loss();
                    self.flow.rtt.on_timeout();
                    let end = self
                        .flow
                        .own_next
                        .min(ordered.saturating_add(self.cfg.data_retry_burst));
                    let again: Vec<Outgoing> = (ordered..end)
                        .filter_map(|s| {
                            self.order
                                .data
                                .get(self.me, s)
                                .map(|(p, q, f)| (s, *q, p.clone(), *f))
                        })
                        .collect();
                    self.counters.retransmissions += again.len() as u64;
                    self.send_runs(Destination::Group, self.me, &again);
                    self.flow.mark_resent(end); // Karn: no RTT sample from these
                }
                self.flow.data_retry_mark = ordered;
                self.flow.data_retry_heard = self.order.highest_heard;
                self.timers
                    .arm(RingTimer::DataRetry, now + self.flow.rtt.rto());
            }
        }
        if self.membership.departing.iter().any(|d| now >= d.3) {
            self.membership.departing.retain(|d| now < d.3);
            self.update_stable();
            self.after_progress(now);
        }
        self.nack(now);
        self.stall(now);
        self.token_work(now);
        self.arm_stall(now);
    }

    fn submit(&mut self, now: Time, payload: Bytes, qos: Qos) -> Result<u64, SendError> {
        self.run(now);
        if !self.guarantees().qos.contains(qos) {
            return Err(SendError::Unsupported);
        }
        if self.rpc.client.is_some() {
            return self.client_request(now, payload, qos, None);
        }
        if !self.member() || self.leaving() || self.removed() || self.left() {
            return Err(SendError::NotMember);
        }
        if self.recovering() {
            return Err(SendError::GroupFailed);
        }
        let room = self.max_datagram_bytes.min(wire::MAX_DATAGRAM_LEN);
        if payload.len() + wire::HEADER_LEN + packet::DATA_FIXED + packet::DATA_PER_MSG > room {
            return self.submit_fragments(now, payload, qos);
        }
        let len = payload.len() + packet::DATA_PER_MSG;
        if !self.can_submit() || (qos != Qos::Unreliable && !self.flow.admits(len, room)) {
            self.counters.backpressure_refusals += 1;
            return Err(SendError::WouldBlock);
        }
        self.counters.submitted += 1;
        if qos == Qos::Unreliable {
            // Sent once, outside the ordered stream; delivered here at once, and done.
            let n = self.flow.own_unreliable;
            self.flow.own_unreliable += 1;
            self.send_data(Destination::Group, self.me, n, (qos, None), &payload);
            return Ok(self.deliver_own_unreliable(n, payload));
        }
        let n = self.flow.own_next;
        self.flow.own_next += 1;
        // Checked by `can_submit` just above: the send window holds.
        debug_assert!(self.own_unordered() <= self.cfg.window_msgs);
        self.flow.outbox.push((n, qos, payload.clone(), None));
        self.flow.on_send(n, now, len);
        self.order
            .data
            .insert(self.me, n, (payload.clone(), qos, None));
        self.deliver_early(self.me, n, qos, &payload, None);
        self.sent_own(now);
        Ok(n)
    }

    fn request(
        &mut self,
        now: Time,
        payload: Bytes,
        qos: Qos,
        handler: Option<u8>,
    ) -> Result<u64, SendError> {
        if !self.guarantees().qos.contains(qos) || self.rpc.client.is_none() {
            return Err(SendError::Unsupported);
        }
        self.client_request(now, payload, qos, handler)
    }

    fn reply(
        &mut self,
        _now: Time,
        to: NodeId,
        request: u64,
        payload: Bytes,
    ) -> Result<(), SendError> {
        self.send_reply(to, request, payload)
    }

    fn forward(
        &mut self,
        _now: Time,
        to: NodeId,
        sender: NodeId,
        request: u64,
        payload: Bytes,
    ) -> Result<(), SendError> {
        self.forward_request(to, sender, request, payload)
    }

    fn lock(&mut self, now: Time, lock: u16, acquire: bool) -> Result<(), SendError> {
        self.request_lock(now, lock, acquire)
    }

    fn leave(&mut self, now: Time) {
        self.run(now);
        if self.left() || self.leaving() {
            return;
        }
        match self.membership.phase() {
            Phase::Joining => {
                // Not in a ring yet (or a non-member): nothing to tell anybody.
                self.membership.enter(Phase::Left {
                    asked: true,
                    member: false,
                });
                self.events.push_back(Event::Left);
                return;
            }
            Phase::Member => self.membership.enter(Phase::Leaving),
            Phase::Removed { .. } => self.membership.enter(Phase::Removed { asked: true }),
            _ => return,
        }
        if self.leave_alone() {
            return;
        }
        if self.alone_in_recovery() {
            // Nobody is left to order the leave or to hear it: done.
            self.finish_leave();
            return;
        }
        self.timers.arm(RingTimer::Lcr, now);
        self.token_work(now);
    }

    fn poll_transmit(&mut self, _now: Time, buf: &mut Vec<u8>) -> Option<Transmit> {
        if let Some(to) = self.parts_out.next(buf) {
            shell::count_sent(&mut self.counters, buf.len());
            return Some(Transmit::single(to));
        }
        self.flush_outbox();
        let (to, data) = self.out.pop_front()?;
        if to == Destination::Group && !self.settings.unicast_only {
            // Section 3.4: members that cannot receive multicast get a unicast copy (one that
            // cannot send multicast fans out to every member by itself).
            for &m in self.membership.unicast_members.iter().rev() {
                if m != self.me {
                    self.out.push_front((Destination::Peer(m), data.clone()));
                }
            }
        }
        let spare = std::mem::replace(buf, data);
        if spare.capacity() > 0 && self.spare_bytes + spare.capacity() <= SPARE_BYTES {
            self.spare_bytes += spare.capacity();
            self.spare_bufs.push(spare);
        }
        // What a large ring says in one step (a New List names every member) goes in parts;
        // `packet::MAX_MEMBERS` keeps it within what parts carry. On a path too small for
        // parts (below `parts::MIN_DATAGRAM`) it goes whole, as it did before parts existed.
        let _ = self.parts_out.cut(buf, to, self.max_datagram_bytes);
        shell::count_sent(&mut self.counters, buf.len());
        self.counters.out_refused = self.out.refused();
        Some(Transmit::single(to))
    }

    fn poll_event(&mut self) -> Option<Event> {
        let (e, resume) = self.events.pop();
        if resume {
            // Delivery paused on a full queue; there is room again.
            self.deliver();
        }
        e
    }

    fn poll_timeout(&self) -> Option<Time> {
        shell::deadline(self.left(), || self.timers().earliest())
    }

    fn node_id(&self) -> NodeId {
        self.me
    }

    fn guarantees(&self) -> Guarantees {
        Ring::declared()
    }

    fn info(&self) -> GroupInfo {
        GroupInfo {
            view: self.membership.view_id,
            rank: self.membership.idx(self.me),
            coordinator: self.member().then_some(self.order.last_site),
            recovering: self.recovering(),
            incarnation: self.rec.bound as u32,
            buffered_msgs: self.order.q.len() + self.order.data.len(),
            buffer_capacity_msgs: self.cfg.max_unstable as usize,
            ..shell::info(
                self.me,
                self.membership.ring.clone(),
                self.guarantees(),
                self.max_datagram_bytes,
            )
        }
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn engine_counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("next_ack", self.order.next_ack),
            ("stable_ts", self.order.stable_ts),
            ("unordered", self.order.data.len() as u64),
            ("unreliable_dropped", self.order.unreliable_dropped),
            ("window_bytes", self.flow.window.get() as u64),
            ("in_flight_bytes", self.flow.in_flight as u64),
            ("window_halved", self.flow.halved),
            ("retry_deferred", self.flow.retry_deferred),
            ("rto_us", self.flow.rtt.rto().as_micros() as u64),
            ("reformations", self.rec.committed),
            ("last_reformation_us", self.rec.last_took.as_micros() as u64),
            ("stalls", self.rec.stalls),
            ("fences_raised", self.rec.fences_raised),
            ("fences_lifted", self.rec.fences_lifted),
            ("roles_refused", self.roles_refused),
            ("fragments_dropped", self.fragments_dropped),
        ]
    }

    fn reset(&mut self, now: Time, min_members: usize) -> Result<(), SendError> {
        if !self.in_ring() {
            return Err(SendError::NotMember);
        }
        self.rec.policy.min_members = min_members;
        self.rec.failure_reported = false;
        self.start_reformation(now, None);
        Ok(())
    }

    fn rejoin(&mut self, now: Time, merging_into: Option<NodeId>) -> Result<(), SendError> {
        self.start_over(now, Role::Join)?;
        self.membership.join_into = merging_into;
        if let Some(into) = merging_into {
            self.events
                .push_back(Event::Recovery(crate::engine::Recovery::Merging { into }));
        }
        Ok(())
    }

    fn start_alone(&mut self, now: Time) -> Result<(), SendError> {
        self.start_over(now, Role::Create)
    }

    fn can_submit(&self) -> bool {
        if let Some(c) = &self.rpc.client {
            return c.pending() < self.cfg.client_window;
        }
        !self.recovering()
            && self.own_unordered() < self.cfg.window_msgs
            && !self.events.is_full()
            && self.out.has_room()
            && self.flow.in_flight < self.flow.window.get()
    }

    fn describe(&self) -> String {
        format!(
            "ring me={} member={} ring={:?} view={} lineage={:x} next_ack={} heard={:?} q={}..{} deliver={} \
             held_all={} stable={} token(holding={} idle={} named={:?} passing={:?} fenced={} stalled={}) \
             own={}/{} \
             unordered={} lcrs={:?} leaving={} removed={} next_slot={:?} departing={:?} \
             reform={:?} seen={:?} bound={} retry={:?} expelled={} chain={:?} refused={} \
             next_timer={:?}",
            self.me,
            self.member(),
            self.membership.ring.iter().map(|m| m.0).collect::<Vec<_>>(),
            self.membership.view_id,
            self.membership.lineage,
            self.order.next_ack,
            self.order.highest_heard,
            self.order.q.end() - self.order.q.len() as u64,
            self.order.q.end(),
            self.order.q.deliver_next(),
            self.order.q.holds_all(),
            self.order.stable_ts,
            self.token.holding,
            self.token.idle,
            self.token.named,
            self.token.passing.map(|p| (p.0, p.1 .0)),
            self.token.fence.is_some(),
            self.token.stalled,
            self.flow.own_stable,
            self.flow.own_next,
            self.order.data.len(),
            self.membership.lcrs,
            self.leaving(),
            self.removed(),
            self.order.q.get(self.order.q.deliver_next()).map(|s| (
                s.state,
                match &s.entry {
                    Entry::Data { origin, sseq, .. } => (origin.0, *sseq),
                    Entry::View(v, _) => (u32::MAX, v.id),
                    Entry::Lock(op) => (op.by.0, u64::from(op.lock)),
                }
            )),
            self.membership.departing,
            self.rec.current.as_ref().map(|r| (
                r.version,
                r.initiator.0,
                r.target.acks,
                r.new_list.is_some(),
                r.poll.is_some()
            )),
            self.rec.seen,
            self.rec.bound,
            self.timers.get(RingTimer::ReformRetry),
            self.expelled(),
            self.order.chain.map(|(s, n)| (s.0, n.0)),
            self.roles_refused,
            self.timers().earliest_named(),
        )
    }
}
