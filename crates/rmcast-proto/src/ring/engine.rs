//! The ring engine: the token site's duties, ACK processing, NACKs, List Change Requests.

use super::multirpc::{Client, GroupState};
use super::order::{DataList, Entry, OrderingQ};
use super::packet::{self, Ack, AckBody, Nack, NewList};
use super::reform::RecoveryState;
use super::RingFactory;
use crate::common::shell::{self, EventQueue, Gate, OutQueue, Shelled};
use crate::common::{
    packet_size, CongestionWindow, Deadlines, DetectorParams, FailureDetector, GapTracker,
    LossCache, ReplayWindow, RttEstimator, SplitMix64,
};
use crate::engine::{
    Counters, Delivery, Destination, Engine, Event, GroupInfo, NodeId, Qos, SendError, Time,
    Transmit, View,
};
use crate::guarantees::Guarantees;
use crate::registry::{EngineParams, EngineSettings, RecoveryPolicy, Role};
use crate::wire::{self, EngineKind, Header, Packet};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::time::Duration;

/// Own messages not yet stable at most (the send window): sends push back beyond it.
pub(super) const WINDOW: u64 = 1024;
/// Events held for the driver at most before delivery pauses.
const MAX_EVENTS: usize = 1024;
/// Datagrams queued for the driver at most (a token visit's repairs and data fit many times).
const MAX_OUT: usize = 8192;
/// Slots ordered but not stable at most: the token site orders no more beyond it.
const MAX_UNSTABLE: u64 = 4096;
/// A member with this many slots not yet delivered does not accept the token (so that a slow
/// application stops the ring rather than filling memory).
const MAX_BACKLOG: u64 = 2048;
/// ACKs received ahead of the next one to apply, at most.
const MAX_EARLY_ACKS: u64 = 512;
/// List Change Requests held at most.
const MAX_LCRS: usize = 32;
/// New Lists that removed a member, kept to answer a late leaver.
const MAX_REMOVED: usize = 16;
/// How long a token site with nothing to order waits before it passes a NULL ACK.
const NULL_DELAY: Duration = Duration::from_millis(2);
/// First wait before the token is passed again when the next site did not take it.
const PASS_RETRY: Duration = Duration::from_millis(20);
/// Longest wait between two passes of the same token (exponential backoff).
const PASS_RETRY_MAX: Duration = Duration::from_millis(320);
/// Own unordered data is sent again after the retransmission timeout (section 4.6: RTT variance
/// estimation, doubled on every expiry and clamped at 2 s); this is its first value and floor.
const DATA_RETRY: Duration = Duration::from_millis(40);
const DATA_RETRY_MIN: Duration = Duration::from_millis(10);
const DATA_RETRY_MAX: Duration = Duration::from_secs(2);
/// The smallest packet Fig. 4.2 sends (the silly-window rule waits for more room than this).
const MIN_PACKET: usize = 256;
/// The byte window's first and largest sizes (section 4.6); its floor is one largest packet.
const WINDOW_INITIAL_BYTES: usize = 64 * 1024;
const WINDOW_MAX_BYTES: usize = 16 * 1024 * 1024;
/// Own messages reported lost by NACKs remembered (RMP keeps three).
const LOSS_CACHE: usize = 3;
/// List Change Requests are repeated this often.
const LCR_RETRY: Duration = Duration::from_millis(50);
/// Grace before a gap is asked for (reordered datagrams arrive in it), and NACK retry.
const NACK_GRACE: Duration = Duration::from_millis(3);
const NACK_RETRY: Duration = Duration::from_millis(25);
/// Unanswered NACKs to the last token site before the ring is asked (its owners first: the
/// senders of the ACKs and the origins of the data), and as many again before every member
/// that holds what is missing answers (so that one lossy member does not draw an answer from
/// every member of a busy ring).
const NACK_ESCALATE: u32 = 2;
/// Own data packets sent again per retry at most.
const DATA_RETRY_BURST: u64 = 32;
/// A member waiting for stability or its leave asks for ACKs after this long without one.
const STALL: Duration = Duration::from_millis(60);
/// A quiescent ring looks for crashed members this often (a probing round).
const IDLE_PROBE: Duration = Duration::from_secs(2);
/// How long slots a leaver may lack are kept for it when its goodbye is not heard.
const DEPART_LINGER: Duration = Duration::from_secs(2);

/// An applied ACK kept until it is stable, to answer NACKs.
pub(super) struct Logged {
    pub(super) bytes: Vec<u8>,
    pub(super) sender: NodeId,
    pub(super) first_ts: u64,
    pub(super) end_ts: u64,
}

/// Where one origin's packets stand for source order: every sequence number below `next` was
/// delivered, and so were those in `above`.
#[derive(Default)]
pub(super) struct SourceCursor {
    next: u64,
    above: BTreeSet<u64>,
}

impl SourceCursor {
    fn mark(&mut self, sseq: u64) {
        if sseq == self.next {
            self.next += 1;
            while self.above.remove(&self.next) {
                self.next += 1;
            }
        } else if sseq > self.next {
            self.above.insert(sseq);
        }
    }
}

/// A sender's flow and congestion control (section 4.6): a window of bytes in transit, from a
/// packet's sending to the first ACK that orders it, grown by slow start and halved when the
/// retransmission timer expires or a NACK names one of this sender's packets.
pub(super) struct Flow {
    pub(super) window: CongestionWindow,
    pub(super) in_flight: usize,
    /// Own packets in transit, oldest first: (sseq, sent at, bytes, sent again).
    pub(super) sent: VecDeque<(u64, Time, usize, bool)>,
    pub(super) rtt: RttEstimator,
    pub(super) losses: LossCache,
    /// Times the window was halved.
    pub(super) halved: u64,
}

impl Flow {
    fn new(max_packet: usize) -> Flow {
        let max = WINDOW_MAX_BYTES.max(max_packet);
        Flow {
            window: CongestionWindow::with_unit(
                WINDOW_INITIAL_BYTES.max(2 * max_packet),
                max_packet,
                max,
                max_packet.min(1472),
            ),
            in_flight: 0,
            sent: VecDeque::new(),
            rtt: RttEstimator::new(DATA_RETRY, DATA_RETRY_MIN, DATA_RETRY_MAX),
            losses: LossCache::new(LOSS_CACHE),
            halved: 0,
        }
    }

    /// Whether a packet of `len` bytes may go now (Fig. 4.2; a message is never split, so it
    /// goes whole once the rule allows that many bytes, or alone when nothing is in transit).
    fn admits(&self, len: usize, max_packet: usize) -> bool {
        let w = self.window.get();
        let room = w.saturating_sub(self.in_flight);
        self.in_flight == 0 || packet_size(w, room, len, MIN_PACKET, max_packet) >= Some(len)
    }

    fn on_send(&mut self, sseq: u64, now: Time, len: usize) {
        debug_assert!(self.sent.back().is_none_or(|last| last.0 < sseq));
        self.in_flight += len;
        self.sent.push_back((sseq, now, len, false));
        self.check_invariants();
    }

    /// What holds between calls (checked in debug builds): the bytes in flight are exactly
    /// those of the own packets in transit, which are kept in the order they were sent.
    fn check_invariants(&self) {
        debug_assert_eq!(self.in_flight, self.sent.iter().map(|p| p.2).sum::<usize>());
        debug_assert!(self
            .sent
            .iter()
            .zip(self.sent.iter().skip(1))
            .all(|(a, b)| a.0 < b.0));
    }

    /// The first ACK ordering own packet `sseq` arrived.
    fn on_ordered(&mut self, sseq: u64, now: Time) {
        while let Some(&(s, at, len, resent)) = self.sent.front() {
            if s > sseq {
                break;
            }
            self.sent.pop_front();
            self.in_flight -= len;
            self.window.on_ack(len);
            // New data acknowledged: the timer need not stay backed off (Karn).
            self.rtt.on_progress();
            if s == sseq && !resent {
                self.rtt.on_sample(now.saturating_since(at));
            }
        }
        self.check_invariants();
    }

    fn on_loss(&mut self) {
        self.window.on_loss();
        self.halved += 1;
    }
}

/// The token as this member sees it.
#[derive(Default)]
pub(super) struct TokenSite {
    /// This member holds the token.
    pub(super) holding: bool,
    /// NULL ACKs in a row up to the one that passed it here.
    pub(super) idle: u32,
    /// When a NULL ACK is due.
    pub(super) null_at: Option<Time>,
    /// The ACK naming this member, not accepted yet.
    pub(super) named: Option<u64>,
    /// The last ACK whose token this member accepted, and who passed it.
    pub(super) accepted: Option<(u64, NodeId)>,
    /// An ACK this member passed the token with, not yet confirmed: number, next site,
    /// when to pass it again, backoff.
    pub(super) passing: Option<(u64, NodeId, Time, Duration)>,
    /// This site keeps the token of a quiescent ring and said so.
    pub(super) quiet: bool,
}

/// The ring engine (see the module docs).
pub struct Ring {
    pub(super) group: u32,
    pub(super) me: NodeId,
    pub(super) max_datagram_bytes: usize,
    pub(super) counters: Counters,
    pub(super) out: OutQueue,
    pub(super) events: EventQueue,
    /// A member (installed a view).
    pub(super) member: bool,
    pub(super) leaving: bool,
    /// The view removing this member was ordered.
    pub(super) removed: bool,
    pub(super) left: bool,
    /// The ring as of the last applied ACK.
    pub(super) ring: Vec<NodeId>,
    pub(super) view_id: u64,
    /// The view as of the last delivered slot.
    pub(super) delivered_view: View,
    /// Next sequence number to be ordered, per ring member.
    pub(super) ordered_next: BTreeMap<NodeId, u64>,
    pub(super) data: DataList,
    pub(super) q: OrderingQ,
    pub(super) next_ack: u64,
    pub(super) early_acks: BTreeMap<u64, (NodeId, Vec<u8>)>,
    pub(super) log: BTreeMap<u64, Logged>,
    pub(super) highest_heard: Option<u64>,
    pub(super) last_site: NodeId,
    pub(super) stable_ts: u64,
    pub(super) token: TokenSite,
    /// Pending List Change Requests: kind, and for a join the joiner's next sequence number
    /// (a member that comes back goes on numbering where it was).
    pub(super) lcrs: BTreeMap<NodeId, (u8, u64)>,
    pub(super) removed_lists: VecDeque<(NodeId, Vec<u8>)>,
    /// Members removed by a New List that may still lack slots up to and including it:
    /// (member, what was stable when it was removed, the oldest ACK kept then, until when).
    /// Stability stays there, and every ACK from that one on is kept, until the member says
    /// goodbye or the time is up, so that NACKs of a leaver catching up are still answered
    /// (a NULL ACK it lacks would otherwise go as soon as the slots before it are stable).
    pub(super) departing: Vec<(NodeId, u64, u64, Time)>,
    pub(super) own_next: u64,
    /// Own ordered messages not yet stable: (sseq, timestamp). The send window counts from the
    /// oldest of them; a send completes (resilience 0) once ordered and delivered here.
    pub(super) own_ordered: VecDeque<(u64, u64)>,
    pub(super) own_stable: u64,
    pub(super) data_retry_at: Option<Time>,
    pub(super) data_retry_mark: u64,
    pub(super) lcr_at: Option<Time>,
    pub(super) gaps: GapTracker,
    pub(super) nack_tries: u32,
    /// While this member waits for something (own messages to become stable, its leave), it
    /// asks for ACKs after the last it applied when none came for a while: trailing ACKs
    /// lost before the ring went quiescent are otherwise never noticed.
    pub(super) stall_at: Option<Time>,
    pub(super) stall_mark: u64,
    pub(super) stall_tries: u32,
    /// Messages delivered ahead of their slot (reliable and source-ordered levels, delivered
    /// when received, Fig. 3.2): their slot is passed over without a second delivery.
    pub(super) early: HashSet<(NodeId, u64)>,
    /// Source order per origin: what was delivered.
    pub(super) sources: BTreeMap<NodeId, SourceCursor>,
    /// Source-ordered packets held, waiting for an earlier packet of their origin.
    pub(super) pending_src: BTreeMap<(NodeId, u64), Bytes>,
    /// Own unreliable messages sent (numbered apart from the ordered stream).
    pub(super) own_unreliable: u64,
    /// Unreliable messages seen per member (duplicates are dropped: best effort).
    pub(super) unreliable_seen: BTreeMap<NodeId, ReplayWindow>,
    /// Unreliable messages dropped because the application's queue was full.
    pub(super) unreliable_dropped: u64,
    /// Delivery stopped at a slot that is not yet resilient enough for its level: the token
    /// must move on for it, so the backlog does not stop this member from accepting it.
    pub(super) resilience_wait: bool,
    pub(super) flow: Flow,
    /// Own messages submitted and not yet sent: they go out together, in as few packets as
    /// Fig. 4.2 allows, when the driver next takes datagrams (or before this site's ACK).
    pub(super) outbox: Vec<(u64, Qos, Bytes)>,
    /// At the token site: members whose next packet to order is missing while later ones are
    /// here, the number, and when to ask for it (again).
    pub(super) data_gaps: BTreeMap<NodeId, (u64, Time)>,
    /// Fault recovery (section 4.4): the reformation under way, versions seen.
    pub(super) rec: RecoveryState,
    /// The common failure detector on the ring's other members (none when switched off).
    pub(super) detector: Option<FailureDetector>,
    /// The failure was reported to an application that resets by hand (`auto_reset` off).
    pub(super) failure_reported: bool,
    pub(super) policy: RecoveryPolicy,
    pub(super) settings: EngineSettings,
    pub(super) rng: SplitMix64,
    /// A reformation left this member out.
    pub(super) expelled: bool,
    /// A joiner's admission (the ACK number of its New List, and the site that sent it), until
    /// the ring is seen to go on after it; nothing is delivered before.
    pub(super) admission: Option<(u64, NodeId)>,
    /// Locks and non-members (section 4.5), kept with the ring in every New List.
    pub(super) gs: GroupState,
    /// This process is not a member but a non-member sending requests (multi-RPC).
    pub(super) client: Option<Client>,
    /// Members that cannot receive multicast, as of the last applied New List (section 3.4),
    /// and joiners that asked in as such.
    pub(super) unicast_members: BTreeSet<NodeId>,
    pub(super) unicast_joiners: BTreeSet<NodeId>,
    /// While joining to merge into another ring of this name: a member of that ring, so that
    /// only it admits us ([`Engine::rejoin`]).
    pub(super) join_into: Option<NodeId>,
}

impl Ring {
    /// A ring member: the creator holds the token of a one-member ring, a joiner asks in.
    pub fn new(p: &EngineParams<'_>) -> Ring {
        let mut r = Ring {
            group: p.group,
            me: p.me,
            max_datagram_bytes: p.max_datagram_bytes,
            counters: Counters::default(),
            out: OutQueue::new(MAX_OUT),
            events: EventQueue::new(MAX_EVENTS),
            member: false,
            leaving: false,
            removed: false,
            left: false,
            ring: vec![],
            view_id: 0,
            delivered_view: View {
                id: 0,
                seq: 0,
                members: vec![],
                coordinator: p.me,
                joined: None,
                left: None,
            },
            ordered_next: BTreeMap::new(),
            data: DataList::default(),
            q: OrderingQ::new(0),
            next_ack: 0,
            early_acks: BTreeMap::new(),
            log: BTreeMap::new(),
            highest_heard: None,
            last_site: p.me,
            stable_ts: 0,
            token: TokenSite::default(),
            lcrs: BTreeMap::new(),
            removed_lists: VecDeque::new(),
            departing: Vec::new(),
            own_next: 0,
            own_ordered: VecDeque::new(),
            own_stable: 0,
            data_retry_at: None,
            data_retry_mark: 0,
            lcr_at: None,
            gaps: GapTracker::new(),
            nack_tries: 0,
            stall_at: None,
            stall_mark: 0,
            stall_tries: 0,
            early: HashSet::new(),
            sources: BTreeMap::new(),
            pending_src: BTreeMap::new(),
            own_unreliable: 0,
            unreliable_seen: BTreeMap::new(),
            unreliable_dropped: 0,
            resilience_wait: false,
            flow: Flow::new(p.max_datagram_bytes.min(wire::MAX_DATAGRAM_LEN)),
            outbox: Vec::new(),
            data_gaps: BTreeMap::new(),
            rec: RecoveryState::default(),
            detector: (p.settings.recovery.alive_interval_ms > 0).then(|| {
                let r = &p.settings.recovery;
                FailureDetector::new(DetectorParams {
                    interval: Duration::from_millis(r.alive_interval_ms),
                    retries: r.alive_retries.max(1),
                    min_timeout: Duration::from_millis(r.alive_timeout_ms),
                })
            }),
            failure_reported: false,
            policy: p.settings.recovery,
            settings: *p.settings,
            rng: SplitMix64::new(p.seed),
            expelled: false,
            admission: None,
            gs: GroupState::default(),
            client: (p.role == Role::Client).then(Client::default),
            unicast_members: BTreeSet::new(),
            unicast_joiners: BTreeSet::new(),
            join_into: None,
        };
        if p.role == Role::Create {
            if p.settings.unicast_only {
                r.unicast_members.insert(p.me);
            }
            r.member = true;
            r.ring = vec![p.me];
            r.view_id = 1;
            r.ordered_next.insert(p.me, 0);
            r.q.push(Entry::View(View {
                id: 1,
                seq: 0,
                members: vec![p.me],
                coordinator: p.me,
                joined: Some(p.me),
                left: None,
            }));
            // A ring of one is quiescent with the token at its only member.
            r.token.holding = true;
            r.token.idle = 1;
            r.deliver();
        } else if p.role == Role::Join {
            r.lcr_at = Some(p.now);
        }
        r
    }

    pub(super) fn header(&self, ptype: u8) -> Vec<u8> {
        let mut buf = Vec::new();
        Header {
            engine: EngineKind::Ring,
            ptype,
            flags: 0,
            group: self.group,
            incarnation: 0,
            sender: self.me,
        }
        .encode(&mut buf);
        buf
    }

    pub(super) fn send(&mut self, to: Destination, ptype: u8, body: impl FnOnce(&mut Vec<u8>)) {
        let mut buf = self.header(ptype);
        body(&mut buf);
        self.out.push_back((to, buf));
    }

    fn send_data(&mut self, to: Destination, origin: NodeId, sseq: u64, qos: Qos, p: &Bytes) {
        self.send(to, packet::DATA, |b| {
            packet::encode_data(b, origin, sseq, std::iter::once((qos, &p[..])))
        });
    }

    /// Sends `msgs` (consecutive numbers of `origin`) in as few data packets as Fig. 4.2
    /// allows: up to half the window each, at least a minimum packet, at most a datagram.
    pub(super) fn send_runs(
        &mut self,
        to: Destination,
        origin: NodeId,
        msgs: &[(u64, Qos, Bytes)],
    ) {
        let max_packet = self.max_datagram_bytes.min(wire::MAX_DATAGRAM_LEN);
        let limit = (self.flow.window.get() / 2).max(MIN_PACKET).min(max_packet);
        let mut rest = msgs;
        while let Some(&(first, ..)) = rest.first() {
            let mut size = wire::HEADER_LEN + packet::DATA_FIXED;
            let mut n = 0;
            for (i, (sseq, _, p)) in rest.iter().enumerate() {
                let add = packet::DATA_PER_MSG + p.len();
                let next = first + i as u64 == *sseq;
                if n > 0 && (size + add > limit || !next || n == usize::from(u16::MAX)) {
                    break;
                }
                size += add;
                n += 1;
            }
            let (run, tail) = rest.split_at(n);
            rest = tail;
            self.send(to, packet::DATA, |b| {
                packet::encode_data(b, origin, first, run.iter().map(|(_, q, p)| (*q, &p[..])))
            });
        }
    }

    /// Own messages submitted since the last datagrams went out, bundled.
    fn flush_outbox(&mut self) {
        if self.outbox.is_empty() {
            return;
        }
        let msgs: Vec<(u64, Qos, Bytes)> = self.outbox.drain(..).collect();
        self.send_runs(Destination::Group, self.me, &msgs);
    }

    fn idx(&self, m: NodeId) -> Option<usize> {
        self.ring.iter().position(|&x| x == m)
    }

    /// The member after `m` in `ring`.
    fn successor(ring: &[NodeId], m: NodeId) -> NodeId {
        let i = ring.iter().position(|&x| x == m).unwrap_or(0);
        ring[(i + 1) % ring.len()]
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
        if self.highest_heard.is_none_or(|h| ack.num >= h) {
            self.highest_heard = Some(ack.num);
            self.last_site = from;
        }
        if self.admission.is_some() {
            if let AckBody::NewList(l) = &ack.body {
                if l.joined == Some(self.me) && l.view_id > self.view_id && !self.leaving {
                    // Admitted again, into a newer view, before the first admission was
                    // confirmed: the first came from a token site the ring went on without.
                    let _ = self.rejoin(now, None);
                }
            }
        }
        if self.member && !self.ring.is_empty() && !self.ring.contains(&from) {
            if let AckBody::NewList(l) = &ack.body {
                if l.joined == Some(self.me) {
                    // Another ring of this name heard our join too and admitted us: say no to
                    // its site, which takes its token back and removes us (`on_expelled`).
                    return self.tell_expelled(now, from);
                }
            }
        }
        if !self.member {
            match &ack.body {
                AckBody::NewList(l) if l.joined == Some(self.me) && !self.leaving => {
                    self.start_at(&ack);
                    self.admission = Some((ack.num, from));
                }
                _ => return,
            }
        }
        if ack.num < self.next_ack {
            self.counters.duplicates += 1;
            if self.member && !self.ring.is_empty() && !self.ring.contains(&from) {
                // A token site of a view the ring went on without (it was paused through a
                // reformation, or a joiner admitted by one): tell it.
                self.tell_expelled(now, from);
            }
            if ack.next_site == self.me && self.token.accepted == Some((ack.num, from)) {
                self.confirm(from, ack.num);
            }
            return;
        }
        if ack.num >= self.next_ack + MAX_EARLY_ACKS {
            return; // asked for again later
        }
        self.early_acks.insert(ack.num, (from, bytes.to_vec()));
        self.apply_ready(now);
    }

    /// A joiner starts its OrderingQ at the New List that admits it.
    fn start_at(&mut self, ack: &Ack) {
        if let AckBody::NewList(l) = &ack.body {
            // The locks held when this member joins: what its handlers follow from here on.
            self.gs.delivered_locks = l.locks.iter().copied().collect();
        }
        self.member = true;
        self.view_id = ack.view;
        self.lcr_at = None;
        self.next_ack = ack.num;
        self.q = OrderingQ::new(ack.first_ts);
        self.stable_ts = ack.first_ts;
        self.early_acks.clear();
    }

    pub(super) fn apply_ready(&mut self, now: Time) {
        while let Some((from, bytes)) = self.early_acks.remove(&self.next_ack) {
            if self
                .rec
                .current
                .as_ref()
                .is_some_and(|r| self.next_ack >= r.target.acks)
            {
                // Beyond the sync point of a reformation: kept until it commits.
                self.early_acks.insert(self.next_ack, (from, bytes));
                break;
            }
            // Decoded before it was kept.
            let Ok(pkt) = wire::decode(&bytes) else { break };
            let Ok(ack) = Ack::decode(pkt.body) else {
                break;
            };
            if ack.first_ts != self.q.end() {
                self.counters.malformed_dropped += 1;
                break;
            }
            if self.member && !self.removed && ack.view != self.view_id {
                if ack.view > self.view_id {
                    // The ring went on in a newer view from here on without this member: a
                    // reformation left it out (it was paused, or cut off).
                    self.expel(ack.view);
                    return;
                }
                // Made by a token site the ring went on without, in an older view.
                self.counters.foreign_dropped += 1;
                self.tell_expelled(now, from);
                break;
            }
            if self.member && !self.ring.is_empty() && !self.ring.contains(&from) {
                // From a token site of a view this member is not in: a member the ring went on
                // without. The ACK of that number is asked for again.
                self.counters.foreign_dropped += 1;
                self.tell_expelled(now, from);
                break;
            }
            let after = match &ack.body {
                AckBody::NewList(l) if l.lock_op.is_none() => &l.members,
                _ => &self.ring,
            };
            if self.member && !after.is_empty() && !after.contains(&ack.next_site) {
                // The token goes to a member of another ring of this name: the ACK is that
                // ring's, sent by a joiner both admitted (same view id and numbers by chance).
                self.counters.foreign_dropped += 1;
                break;
            }
            self.apply(now, from, ack, bytes);
            if self.left {
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
                    let held = self.data.take(origin, sseq);
                    // Ring members' packets are ordered only while they are in the ring:
                    // any other origin is a non-member (multi-RPC).
                    let client = !self.ordered_next.contains_key(&origin);
                    if client {
                        self.client_ordered(origin, sseq);
                    } else {
                        let next = self.ordered_next.entry(origin).or_insert(0);
                        *next = (*next).max(sseq + 1);
                    }
                    if origin == self.me {
                        self.own_ordered.push_back((sseq, self.q.end()));
                        self.flow.on_ordered(sseq, now);
                    }
                    self.q.push(Entry::Data {
                        origin,
                        sseq,
                        qos: held.as_ref().map_or(Qos::TotallyOrdered, |h| h.1),
                        payload: held.map(|h| h.0),
                        client,
                    });
                }
            }
            AckBody::NewList(l) if l.lock_op.is_some() => {
                let op = l.lock_op.expect("matched");
                self.apply_lock_op(op, &l.locks);
                self.q.push(Entry::Lock(op));
            }
            AckBody::NewList(l) => {
                self.apply_group_state(&l.locks, &l.clients);
                self.unicast_members = l.unicast_only.iter().copied().collect();
                let old_next = std::mem::replace(
                    &mut self.ordered_next,
                    l.members.iter().copied().zip(l.next_sseq).collect(),
                );
                for (&m, &next) in &self.ordered_next {
                    self.sources.entry(m).or_insert(SourceCursor {
                        next,
                        above: BTreeSet::new(),
                    });
                }
                if self.member
                    && !self.removed
                    && !l.members.contains(&self.me)
                    && l.left != Some(self.me)
                {
                    // A reformation went on without this member (it lagged behind its sync
                    // point): it may come back only as a new member.
                    return self.expel(l.view_id);
                }
                let old = std::mem::replace(&mut self.ring, l.members.clone());
                self.view_id = l.view_id;
                self.drop_removed(&old, &old_next);
                self.watch_ring(now);
                if let Some(gone) = l.left {
                    if gone == self.me {
                        self.removed = true;
                        self.lcr_at = None;
                    }
                    if self.removed_lists.len() >= MAX_REMOVED {
                        self.removed_lists.pop_front();
                    }
                    if gone != self.me && self.departing.len() < MAX_REMOVED {
                        let oldest = self.log.keys().next().copied().unwrap_or(ack.num);
                        self.departing
                            .push((gone, self.stable_ts, oldest, now + DEPART_LINGER));
                    }
                    self.removed_lists.push_back((gone, bytes.clone()));
                }
                if let Some(j) = l.joined {
                    self.lcrs.remove(&j);
                    self.unicast_joiners.remove(&j);
                }
                self.q.push(Entry::View(View {
                    id: l.view_id,
                    seq: first_ts,
                    members: l.members,
                    coordinator: from,
                    joined: l.joined,
                    left: l.left,
                }));
            }
        }
        self.log.insert(
            ack.num,
            Logged {
                bytes,
                sender: from,
                first_ts,
                end_ts: self.q.end(),
            },
        );
        self.next_ack = ack.num + 1;
        if let Some((n, ..)) = self.token.passing {
            if ack.num > n {
                self.token.passing = None;
            }
        }
        if from != self.me {
            self.token.holding = false;
            self.token.null_at = None;
        }
        self.token.named = (ack.next_site == self.me && !self.removed).then_some(ack.num);
        self.token.idle = ack.idle;
        if let Some((n, by)) = self.admission {
            // The ring goes on after this member's admission: a member other than the one that
            // admitted it (or, in a ring of two, that one again) ordered after it.
            if from != self.me && ack.num > n && (from != by || self.ring.len() <= 2) {
                self.admission = None;
            }
        }
        self.update_stable();
    }

    /// Stable: everything up to the ACK before the oldest of the latest ACKs whose senders
    /// cover the ring (each of them accepted the token, so held it all).
    fn update_stable(&mut self) {
        let mut need: BTreeSet<NodeId> = self.ring.iter().copied().collect();
        let mut cut = None;
        for (&n, e) in self.log.iter().rev() {
            need.remove(&e.sender);
            if need.is_empty() {
                cut = Some((n, e.first_ts));
                break;
            }
        }
        if let Some((n, ts)) = cut {
            let cap = self.departing.iter().map(|d| d.1).min().unwrap_or(u64::MAX);
            let keep = self.departing.iter().map(|d| d.2).min().unwrap_or(u64::MAX);
            let stable = self.stable_ts.max(ts.min(cap));
            self.stable_ts = stable;
            self.log
                .retain(|&k, e| k >= n.min(keep) || e.end_ts > stable);
        }
        while self
            .own_ordered
            .front()
            .is_some_and(|&(_, ts)| ts < self.stable_ts)
        {
            let (sseq, _) = self.own_ordered.pop_front().expect("front checked");
            self.own_stable = sseq + 1;
        }
        self.q.prune(self.stable_ts);
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
        if !self.leaving || self.left || self.ring != [self.me] || !self.departing.is_empty() {
            return false;
        }
        self.left = true;
        self.events.push_back(Event::Left);
        true
    }

    /// Whether this member waits for ACKs it may never hear of otherwise: its own messages to
    /// become stable, its leave, or slots to become resilient enough to deliver (the last ACKs
    /// of a ring going quiescent may be lost).
    fn waiting(&self) -> bool {
        self.member
            && !self.left
            && (!self.own_ordered.is_empty() || self.leaving || self.resilience_wait)
    }

    /// How long to wait for an ACK before asking for it: the fixed floor, or more when a
    /// round of the token is measured to take longer (a busy ring), so that the requests do
    /// not feed the congestion that delays the ACKs (section 4.6's timers, applied to NACKs).
    fn stall_wait(&self) -> Duration {
        STALL.max(self.flow.rtt.base_rto() * 2)
    }

    fn nack_retry(&self) -> Duration {
        NACK_RETRY.max(self.flow.rtt.base_rto())
    }

    fn arm_stall(&mut self, now: Time) {
        if !self.waiting() {
            self.stall_at = None;
        } else if self.stall_at.is_none() {
            self.stall_at = Some(now + self.stall_wait());
            self.stall_mark = self.next_ack;
            self.stall_tries = 0;
        }
    }

    fn stall(&mut self, now: Time) {
        if self.stall_at.is_none_or(|t| now < t) {
            return;
        }
        self.stall_at = None;
        if !self.waiting() {
            return;
        }
        if self.next_ack == self.stall_mark && !self.token.holding {
            self.stall_tries += 1;
            let (to, everyone) = self.nack_scope(self.stall_tries);
            self.counters.nacks_sent += 1;
            let n = Nack {
                acks: self.next_ack..self.next_ack + 32,
                slots: vec![],
                everyone,
            };
            self.send(to, packet::NACK, |b| n.encode(b));
        } else {
            self.stall_tries = 0;
        }
        self.stall_mark = self.next_ack;
        self.stall_at = Some(now + self.stall_wait());
    }

    fn deliver(&mut self) {
        self.resilience_wait = false;
        if self.admission.is_some() {
            // Admitted, not yet confirmed by the ring: an admission by a token site that the
            // ring went on without (paused through a reformation) must never show as a view.
            return;
        }
        while !self.left && self.events.room() {
            let Some((ts, entry)) = self.q.deliverable() else {
                break;
            };
            match entry {
                Entry::Data {
                    origin,
                    sseq,
                    payload,
                    qos,
                    client,
                } => {
                    let (origin, sseq, qos) = (*origin, *sseq, *qos);
                    if !self.resilient(ts, origin, qos) {
                        self.resilience_wait = true;
                        break;
                    }
                    if *client {
                        let p = payload.clone().unwrap_or_default();
                        self.q.delivered();
                        self.deliver_client(ts, origin, sseq, p);
                        continue;
                    }
                    if !self.early.remove(&(origin, sseq)) {
                        self.pending_src.remove(&(origin, sseq));
                        self.counters.delivered += 1;
                        self.events.push_back(Event::Deliver(Delivery {
                            respond: false,
                            // Below total order a message is placed by its sender's numbering.
                            seq: if qos.is_total() { ts } else { sseq },
                            sender: origin,
                            msg: sseq,
                            view: self.delivered_view.id,
                            payload: payload.clone().unwrap_or_default(),
                        }));
                        self.mark_source(origin, sseq);
                        self.source_chain(origin);
                    }
                    // Resilience 0: ordered, and so delivered by every member that stays.
                    if origin == self.me {
                        self.events.push_back(Event::SendComplete { msg: sseq });
                    }
                }
                Entry::View(v) => {
                    // A view is shown once a member other than the one that made it and the
                    // one it admits holds it too (the token went on after it): a token site
                    // the ring went on without (paused through a reformation) never shows a
                    // view of its own making, not even with a joiner it admitted.
                    let mut makers = vec![v.coordinator];
                    makers.extend(v.joined);
                    if !self.held_by_another(ts, &makers) {
                        self.resilience_wait = true;
                        break;
                    }
                    let v = v.clone();
                    self.counters.view_changes += 1;
                    self.delivered_view = v.clone();
                    let gone = v.left == Some(self.me);
                    let (members, joined_me) = (v.members.clone(), v.joined == Some(self.me));
                    self.events.push_back(Event::View(v));
                    self.deliver_view_locks(&members, joined_me);
                    if gone {
                        // Twice: a lost goodbye only delays stability by DEPART_LINGER.
                        for _ in 0..2 {
                            self.send(Destination::Group, packet::GOODBYE, |_| {});
                        }
                        self.left = true;
                        self.events.push_back(Event::Left);
                    }
                }
                Entry::Lock(op) => {
                    let op = *op;
                    self.deliver_lock_op(op);
                }
            }
            self.q.delivered();
        }
    }

    /// Whether slot `ts` may be delivered at its level (Fig. 3.2): the K-resilient levels wait
    /// until enough members hold it. A member holds every slot below the end of each ACK it
    /// sent (a token site holds all it orders, and accepted the token only holding everything
    /// before), and the origin holds its own packet. K counts members other than the origin
    /// (as [`Qos::KResilient`] says; the paper's K counts the origin's site too) and is capped
    /// by the ring's size; the majority is of the largest view the slot may belong to (MaxN).
    fn resilient(&self, ts: u64, origin: NodeId, qos: Qos) -> bool {
        let need_others = match qos {
            Qos::KResilient(k) => usize::from(k),
            Qos::MajorityResilient => {
                let max_n = self.ring.len().max(self.delivered_view.members.len());
                max_n / 2 // with the origin: a majority
            }
            Qos::TotallyResilient => usize::MAX,
            _ => return true,
        };
        if ts < self.stable_ts {
            return true;
        }
        let mut holders: BTreeSet<NodeId> = self
            .log
            .values()
            .filter(|e| e.end_ts > ts)
            .map(|e| e.sender)
            .collect();
        holders.remove(&origin);
        let others = self.ring.iter().filter(|&&m| m != origin).count();
        holders.len() >= need_others.min(others)
    }

    /// Whether slot `ts` is held by a ring member outside `makers` (or there is none).
    fn held_by_another(&self, ts: u64, makers: &[NodeId]) -> bool {
        if ts < self.stable_ts || self.ring.iter().all(|m| makers.contains(m)) {
            return true;
        }
        self.log
            .values()
            .any(|e| e.end_ts > ts && !makers.contains(&e.sender))
    }

    /// A packet of a level below total order arrived (or was sent here): reliable packets are
    /// delivered at once, source-ordered ones once every earlier packet of their origin was.
    fn deliver_early(&mut self, origin: NodeId, sseq: u64, qos: Qos, payload: &Bytes) {
        if self.admission.is_some() || self.rec.current.is_some() {
            // In its slot: once the admission is confirmed, or once the reformation committed
            // (what a member delivers ahead of the order must be what its vote reported).
            return;
        }
        if matches!(qos, Qos::Reliable | Qos::SourceOrdered) {
            // Both go in their origin's order: what a member delivered ahead of the total order
            // is then a prefix of each origin's packets, which a reformation's sync point names
            // and brings every survivor to (section 4.4), whoever crashes.
            self.pending_src.insert((origin, sseq), payload.clone());
            self.source_chain(origin);
        }
    }

    fn push_early(&mut self, origin: NodeId, sseq: u64, payload: Bytes) {
        self.early.insert((origin, sseq));
        self.counters.delivered += 1;
        self.events.push_back(Event::Deliver(Delivery {
            respond: false,
            seq: sseq,
            sender: origin,
            msg: sseq,
            view: self.delivered_view.id,
            payload,
        }));
        self.mark_source(origin, sseq);
    }

    /// `origin`'s packet `sseq` was delivered: source order goes on from it (for ring members;
    /// the packets of a member gone are delivered in their slots only).
    fn mark_source(&mut self, origin: NodeId, sseq: u64) {
        if self.ordered_next.contains_key(&origin) {
            self.sources.entry(origin).or_default().mark(sseq);
        }
    }

    /// Delivers the source-ordered packets of `origin` whose predecessors are all delivered.
    fn source_chain(&mut self, origin: NodeId) {
        while self.events.room() {
            let next = self.sources.get(&origin).map_or(0, |c| c.next);
            let Some(p) = self.pending_src.remove(&(origin, next)) else {
                break;
            };
            self.push_early(origin, next, p);
        }
    }

    /// An unreliable packet: delivered at once, once, never asked for again (Fig. 3.2).
    fn on_unreliable(&mut self, origin: NodeId, n: u64, payload: &[u8]) {
        if !self.ordered_next.contains_key(&origin) || self.admission.is_some() {
            self.counters.foreign_dropped += 1;
            return;
        }
        if self
            .unreliable_seen
            .entry(origin)
            .or_default()
            .accept(n)
            .is_err()
        {
            self.counters.duplicates += 1;
            return;
        }
        if !self.events.room() {
            self.unreliable_dropped += 1;
            return;
        }
        let msg = n | packet::UNRELIABLE_BIT;
        self.counters.delivered += 1;
        self.events.push_back(Event::Deliver(Delivery {
            respond: false,
            seq: msg,
            sender: origin,
            msg,
            view: self.delivered_view.id,
            payload: Bytes::copy_from_slice(payload),
        }));
    }

    // ---- the token site -------------------------------------------------------------------

    fn try_accept(&mut self, now: Time) {
        if self.rec.current.is_some() {
            return;
        }
        let Some(n) = self.token.named else { return };
        let backlog = self.q.end() - self.q.deliver_next();
        let full = backlog > MAX_BACKLOG && !self.resilience_wait;
        if n + 1 != self.next_ack || !self.q.holds_all() || full {
            return;
        }
        self.token.named = None;
        self.token.holding = true;
        self.token.quiet = false;
        let passer = self.log.get(&n).map_or(self.me, |e| e.sender);
        self.token.accepted = Some((n, passer));
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
        if !self.token.holding || self.removed || self.left || self.rec.current.is_some() {
            return;
        }
        if let Some(list) = self.next_change() {
            let next = Self::successor(&list.members, self.me);
            return self.pass(now, next, 0, AckBody::NewList(list));
        }
        let room = self.stable_ts + MAX_UNSTABLE > self.q.end();
        let entries = if room { self.orderable() } else { vec![] };
        self.ask_data_gaps(now);
        let next = Self::successor(&self.ring, self.me);
        if !entries.is_empty() {
            return self.pass(now, next, 0, AckBody::Entries(entries));
        }
        // Data waits for room, or this member leaves: the token must go on.
        let busy = !room || self.leaving;
        if busy && self.ring.len() > 1 {
            return self.pass(now, next, 0, AckBody::Entries(vec![]));
        }
        if (self.token.idle as usize) < self.ring.len() {
            let at = *self.token.null_at.get_or_insert(now + NULL_DELAY);
            if now >= at {
                let idle = self.token.idle + 1;
                self.pass(now, next, idle, AckBody::Entries(vec![]));
            }
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
        let ring = &self.ring;
        self.data_gaps.retain(|m, _| ring.contains(m));
        let mut asks = Vec::new();
        for &m in &self.ring {
            if m == self.me {
                continue;
            }
            let next = self.ordered_next.get(&m).copied().unwrap_or(0);
            let gap = !self.data.has(m, next) && self.data.has_after(m, next);
            match self.data_gaps.get(&m).copied() {
                _ if !gap => {
                    self.data_gaps.remove(&m);
                }
                Some((s, at)) if s == next => {
                    if now >= at {
                        asks.push((m, next));
                        self.data_gaps.insert(m, (next, now + self.nack_retry()));
                    }
                }
                _ => {
                    self.data_gaps.insert(m, (next, now + NACK_GRACE));
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
        let ordered = self.ordered_next.get(&self.me).copied().unwrap_or(0);
        let start = from.max(ordered);
        let end = self.own_next.min(start + DATA_RETRY_BURST);
        let again: Vec<(u64, Qos, Bytes)> = (start..end)
            .filter_map(|s| self.data.get(self.me, s).map(|(p, q)| (s, *q, p.clone())))
            .collect();
        if again.is_empty() {
            return;
        }
        if self.flow.losses.first_report(start) {
            self.flow.on_loss();
        }
        for e in self.flow.sent.iter_mut().take_while(|e| e.0 < end) {
            e.3 = true;
        }
        self.counters.retransmissions += again.len() as u64;
        self.send_runs(Destination::Peer(to), self.me, &again);
    }

    /// The next valid List Change Request as a New List.
    fn next_change(&mut self) -> Option<NewList> {
        while let Some((&who, &(kind, first_sseq))) = self.lcrs.iter().next() {
            self.lcrs.remove(&who);
            let mut members = self.ring.clone();
            let (joined, left) = match kind {
                packet::LCR_JOIN if !members.contains(&who) => {
                    let i = self.idx(self.me).unwrap_or(0);
                    members.insert(i + 1, who);
                    (Some(who), None)
                }
                // A leaver never orders its own leave: it needs the token to move on.
                packet::LCR_LEAVE if members.contains(&who) && who != self.me => {
                    members.retain(|&m| m != who);
                    (None, Some(who))
                }
                packet::LCR_LOCK | packet::LCR_UNLOCK if members.contains(&who) => {
                    let acquire = kind == packet::LCR_LOCK;
                    return Some(self.lock_change(who, first_sseq as u16, acquire));
                }
                _ => continue,
            };
            let (locks, clients) = self.group_state_for(&members, &self.gs.locks);
            let mut unicast_only = self.unicast_only_of(&members);
            if joined.is_some() && self.unicast_joiners.remove(&who) {
                unicast_only.push(who);
            }
            let next_sseq = members
                .iter()
                .map(|m| match self.ordered_next.get(m) {
                    Some(&n) => n,
                    None if *m == who => first_sseq,
                    None => 0,
                })
                .collect();
            return Some(NewList {
                view_id: self.view_id + 1,
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
        None
    }

    /// Data this site holds that can be ordered: each member's packets in sequence.
    fn orderable(&self) -> Vec<(NodeId, u64)> {
        let mut out = Vec::new();
        let room = (self.stable_ts + MAX_UNSTABLE - self.q.end()) as usize;
        let max = packet::MAX_ENTRIES.min(room);
        // Start after this site, so that no member is always served first.
        let start = self.idx(self.me).map_or(0, |i| i + 1);
        for k in 0..self.ring.len() {
            let m = self.ring[(start + k) % self.ring.len()];
            let mut s = self.ordered_next.get(&m).copied().unwrap_or(0);
            while out.len() < max && self.data.has(m, s) {
                out.push((m, s));
                s += 1;
            }
        }
        self.orderable_clients(&mut out, max);
        out
    }

    fn pass(&mut self, now: Time, next: NodeId, idle: u32, body: AckBody) {
        // Own data goes before the ACK that orders it.
        self.flush_outbox();
        let ack = Ack {
            num: self.next_ack,
            view: self.view_id,
            first_ts: self.q.end(),
            next_site: next,
            idle,
            body,
        };
        self.counters.acks_sent += 1;
        let mut buf = self.header(packet::ACK);
        ack.encode(&mut buf);
        self.out.push_back((Destination::Group, buf.clone()));
        self.token.holding = false;
        self.token.null_at = None;
        self.highest_heard = Some(ack.num);
        self.last_site = self.me;
        let num = ack.num;
        self.apply(now, self.me, ack, buf);
        if next != self.me {
            self.token.passing = Some((num, next, now + PASS_RETRY, PASS_RETRY));
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
        let acks_missing = self.highest_heard.is_some_and(|h| h >= self.next_ack);
        let gap = self.member && !self.left && (acks_missing || !self.q.holds_all());
        self.gaps.watch(now, 0, gap.then_some(1), NACK_GRACE);
        if !gap {
            self.nack_tries = 0;
        }
    }

    fn nack(&mut self, now: Time) {
        self.gaps
            .on_timeout(now, self.member && !self.left, self.nack_retry());
        if !self.gaps.take_request() {
            return;
        }
        let acks = match self.highest_heard {
            Some(h) if h >= self.next_ack => self.next_ack..h + 1,
            _ => self.next_ack..self.next_ack,
        };
        let slots = self.q.request_missing(packet::MAX_NACK_SLOTS);
        if acks.is_empty() && slots.is_empty() {
            return;
        }
        self.nack_tries += 1;
        let (to, everyone) = self.nack_scope(self.nack_tries);
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
        if tries <= NACK_ESCALATE && self.last_site != self.me {
            (Destination::Peer(self.last_site), true)
        } else {
            (Destination::Group, tries > 2 * NACK_ESCALATE)
        }
    }

    fn on_nack(&mut self, now: Time, from: NodeId, body: &[u8]) {
        let Ok(n) = Nack::decode(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        // A member the ring went on without asks for what it will never get: tell it.
        self.tell_expelled(now, from);
        self.counters.nacks_received += 1;
        let to = Destination::Peer(from);
        let end = n.acks.end.min(n.acks.start.saturating_add(32));
        for a in n.acks.start..end {
            if let Some(e) = self
                .log
                .get(&a)
                .filter(|e| n.everyone || e.sender == self.me)
            {
                let b = e.bytes.clone();
                self.counters.retransmissions += 1;
                self.out.push_back((to, b));
            }
        }
        for ts in n.slots {
            if let Some(Entry::Data { origin, sseq, .. }) = self.q.get(ts).map(|s| &s.entry) {
                // A NACK naming one of this sender's packets: a member was overrun (4.6).
                if *origin == self.me && self.flow.losses.first_report(*sseq) {
                    self.flow.on_loss();
                }
            }
            if let Some(Entry::Data {
                origin,
                sseq,
                payload: Some(p),
                qos,
                client,
            }) = self.q.get(ts).map(|s| s.entry.clone())
            {
                // A non-member's packet is owned by the site that ordered it.
                let owner = origin == self.me || (client && self.orderer_of(ts) == Some(self.me));
                if !n.everyone && !owner {
                    continue;
                }
                self.counters.retransmissions += 1;
                self.send_data(to, origin, sseq, qos, &p);
            }
        }
    }

    // ---- data and List Change Requests ----------------------------------------------------

    fn on_data(&mut self, now: Time, body: &[u8]) {
        let Ok(run) = packet::decode_data(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        if !self.member {
            return;
        }
        let mut filled = false;
        let mut fresh = false;
        for (sseq, (qos, payload)) in (run.first..).zip(run.msgs) {
            if qos == Qos::Unreliable {
                self.on_unreliable(run.origin, sseq, payload);
                continue;
            }
            match self.on_data_msg(run.origin, sseq, qos, payload) {
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

    /// One ordered-stream message of a data packet: `Some(true)` when it filled an ordered slot,
    /// `Some(false)` when it was kept for ordering, `None` when it was not needed.
    fn on_data_msg(&mut self, origin: NodeId, sseq: u64, qos: Qos, payload: &[u8]) -> Option<bool> {
        let payload = Bytes::copy_from_slice(payload);
        if self.q.fill(origin, sseq, payload.clone(), qos).is_some() {
            self.deliver_early(origin, sseq, qos, &payload);
            return Some(true);
        }
        let Some(&next) = self.ordered_next.get(&origin) else {
            self.counters.foreign_dropped += 1;
            return None;
        };
        if sseq < next
            || sseq >= next + WINDOW
            || !self.data.insert(origin, sseq, payload.clone(), qos)
        {
            self.counters.duplicates += 1;
            return None;
        }
        self.deliver_early(origin, sseq, qos, &payload);
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
        if !self.member || self.removed || self.rec.current.is_some() {
            return;
        }
        let member = self.ring.contains(&from);
        let flags = body.get(9).copied().unwrap_or(0);
        if kind == packet::LCR_JOIN && flags & packet::JOIN_TARGETED != 0 {
            let Some(b) = body.get(10..14) else {
                self.counters.malformed_dropped += 1;
                return;
            };
            let into = NodeId(u32::from_be_bytes(b.try_into().expect("4 bytes")));
            if !self.ring.contains(&into) {
                return; // for another ring of this name
            }
        }
        match kind {
            packet::LCR_JOIN if member => {
                // Admitted already: the New List again, to the joiner only.
                let list = self.log.values().find(|e| {
                    wire::decode(&e.bytes)
                        .ok()
                        .and_then(|p| Ack::decode(p.body).ok())
                        .is_some_and(
                            |a| matches!(a.body, AckBody::NewList(l) if l.joined == Some(from)),
                        )
                });
                if let Some(e) = list {
                    let b = e.bytes.clone();
                    self.out.push_back((Destination::Peer(from), b));
                }
            }
            packet::LCR_LEAVE if !member => {
                if let Some((_, b)) = self.removed_lists.iter().find(|(m, _)| *m == from) {
                    let b = b.clone();
                    self.out.push_back((Destination::Peer(from), b));
                }
            }
            packet::LCR_LOCK | packet::LCR_UNLOCK if !member => {
                self.counters.foreign_dropped += 1;
            }
            packet::LCR_JOIN | packet::LCR_LEAVE | packet::LCR_LOCK | packet::LCR_UNLOCK => {
                if self.lcrs.len() < MAX_LCRS || self.lcrs.contains_key(&from) {
                    self.lcrs.insert(from, (kind, first_sseq));
                    let unicast = flags & packet::JOIN_UNICAST_ONLY != 0;
                    if kind == packet::LCR_JOIN && unicast && self.unicast_joiners.len() < MAX_LCRS
                    {
                        self.unicast_joiners.insert(from);
                    }
                }
                if self.token.holding {
                    self.token.idle = 0;
                    self.token.null_at = None;
                    self.token_work(now);
                }
            }
            _ => self.counters.malformed_dropped += 1,
        }
    }

    /// Whether the ring is in recovery mode here: a reformation is under way, or a failure
    /// waits for the application's reset.
    pub(super) fn recovering(&self) -> bool {
        self.rec.current.is_some() || self.rec.retry_at.is_some() || self.failure_reported
    }

    /// The failure detector's timers: probes to send, and a member found failed.
    fn detect(&mut self, now: Time) {
        if !self.in_ring() || self.recovering() {
            return;
        }
        if self.detector_idle() {
            // A quiescent ring is nearly silent: one probing round every IDLE_PROBE finds a
            // member that crashed meanwhile (section 4.4 finds failures through retries, and
            // a quiescent ring retries nothing).
            match self.rec.idle_probe_at {
                Some(t) if now >= t => self.rec.idle_probe_at = Some(now + IDLE_PROBE),
                _ => {
                    self.rec.idle_probe_at.get_or_insert(now + IDLE_PROBE);
                    return;
                }
            }
        } else {
            self.rec.idle_probe_at = None;
        }
        let Some(d) = self.detector.as_mut() else {
            return;
        };
        let failed = d.on_timeout(now);
        let mut probes = Vec::new();
        while let Some(p) = d.poll_probe() {
            probes.push(p);
        }
        for p in probes {
            self.send(Destination::Peer(p), packet::PROBE, |_| {});
        }
        let Some(suspect) = failed else { return };
        if self.policy.auto_reset {
            self.start_reformation(now, Some(suspect));
        } else {
            // Recovery by hand (`reset`), as in the Amoeba paper.
            self.failure_reported = true;
            self.halt_token();
            self.events
                .push_back(Event::Recovery(crate::engine::Recovery::Failed { suspect }));
        }
    }

    fn timers(&self) -> Deadlines {
        let mut d = Deadlines::new();
        d.at("null", self.token.null_at)
            .at("pass", self.token.passing.map(|p| p.2))
            .at(
                "data",
                self.data_retry_at.filter(|_| self.rec.current.is_none()),
            )
            .at("lcr", self.lcr_at)
            .at("nack", self.gaps.deadline())
            .at("stall", self.stall_at)
            .at(
                "data gaps",
                (self.token.holding)
                    .then(|| self.data_gaps.values().map(|g| g.1).min())
                    .flatten(),
            )
            .at("depart", self.departing.iter().map(|d| d.3).min())
            .at(
                "probe",
                (self.in_ring() && !self.recovering())
                    .then(|| match self.rec.idle_probe_at {
                        Some(t) if self.detector_idle() => Some(t),
                        _ => self.detector.as_ref().and_then(|d| d.next_timeout()),
                    })
                    .flatten(),
            )
            .at("reform", self.rec.current.as_ref().map(|r| r.next_at))
            .at("reform retry", self.rec.retry_at)
            .at("lock", self.gs.lock_at)
            .at(
                "requests",
                self.client.as_ref().and_then(|c| c.next_timeout()),
            );
        d
    }
}

impl Ring {
    /// A fresh engine in `role` in place of this one ([`Engine::rejoin`],
    /// [`Engine::start_alone`]): counters and message numbering go on.
    fn start_over(&mut self, now: Time, role: Role) -> Result<(), SendError> {
        if self.leaving {
            return Err(SendError::NotMember);
        }
        let settings = self.settings;
        let mut fresh = Ring::new(&EngineParams {
            role,
            group: self.group,
            me: self.me,
            max_datagram_bytes: self.max_datagram_bytes,
            now,
            seed: self.rng.next_u64(),
            settings: &settings,
        });
        fresh.counters = self.counters.clone();
        // Message numbers go on, so that no message is taken for one sent before.
        fresh.own_next = self.own_next;
        fresh.own_stable = self.own_next;
        fresh.own_unreliable = self.own_unreliable;
        fresh.rec.seen = self.rec.seen;
        fresh.rec.bound = self.rec.bound;
        fresh.rec.committed = self.rec.committed;
        *self = fresh;
        Ok(())
    }
}

impl Shelled for Ring {
    const KIND: EngineKind = EngineKind::Ring;
    /// The ring numbers reformations and views in the header's incarnation field (no
    /// incarnation filter); members of one ring tell reformations apart by the bodies.
    fn gate(&mut self) -> Gate<'_> {
        Gate::new(self.group, self.me, self.left, None, &mut self.counters)
    }

    fn on_packet(&mut self, now: Time, _: NodeId, pkt: Packet<'_>, datagram: &[u8], _: Option<u8>) {
        let h = pkt.header;
        if self.client.is_some() {
            // A non-member hears only its acknowledgements and replies.
            if matches!(h.ptype, packet::NM_ACK | packet::NM_REPLY) {
                self.on_client_packet(h.sender, h.ptype, pkt.body);
            }
            return;
        }
        if let Some(d) = self.detector.as_mut() {
            d.heard(h.sender, now);
        }
        match h.ptype {
            packet::PROBE => {
                if self.in_ring() && self.ring.contains(&h.sender) {
                    let next = self.next_ack;
                    self.send(Destination::Peer(h.sender), packet::PROBE_ACK, |b| {
                        b.extend_from_slice(&next.to_be_bytes())
                    });
                } else {
                    self.tell_expelled(now, h.sender);
                }
            }
            packet::PROBE_ACK => {
                // The answer says how far the ring went: the last ACKs before it went
                // quiescent may have been lost here, and nothing else would tell.
                match wire::Reader::new(pkt.body).u64() {
                    Ok(n) if n > self.next_ack && self.in_ring() => {
                        self.highest_heard = Some(self.highest_heard.unwrap_or(0).max(n - 1));
                        self.watch_gaps(now);
                    }
                    Ok(_) => {}
                    Err(_) => self.counters.malformed_dropped += 1,
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
            packet::ACK => self.on_ack(now, h.sender, datagram, pkt.body),
            packet::NACK => self.on_nack(now, h.sender, pkt.body),
            packet::LCR => self.on_lcr(now, h.sender, pkt.body),
            packet::GOODBYE => {
                self.departing.retain(|d| d.0 != h.sender);
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
                        self.token.passing = None;
                        if self.admission.is_some_and(|(_, by)| by != h.sender) {
                            self.admission = None;
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
        if self.left {
            return;
        }
        if self.client.is_some() {
            return self.client_timeout(now);
        }
        self.lock_timeout(now);
        self.detect(now);
        self.reform_timeout(now);
        if self.left {
            return;
        }
        if let Some((n, next, at, backoff)) = self.token.passing {
            if now >= at {
                if let Some(e) = self.log.get(&n) {
                    let b = e.bytes.clone();
                    self.counters.retransmissions += 1;
                    self.out.push_back((Destination::Peer(next), b));
                }
                let backoff = (backoff * 2).min(PASS_RETRY_MAX);
                self.token.passing = Some((n, next, now + backoff, backoff));
            }
        }
        if self.lcr_at.is_some_and(|t| now >= t) {
            self.lcr_at = Some(now + LCR_RETRY);
            let kind = if self.member {
                packet::LCR_LEAVE
            } else {
                packet::LCR_JOIN
            };
            // A leaver asks once its own messages are all ordered.
            let ready = !self.member || self.ordered_next.get(&self.me) == Some(&self.own_next);
            if ready {
                let own_next = self.own_next;
                let unicast = self.settings.unicast_only;
                let into = self.join_into;
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
                if self.member && self.token.holding {
                    self.token_work(now);
                }
            }
        }
        if self.data_retry_at.is_some_and(|t| now >= t) && self.rec.current.is_none() {
            let ordered = self.ordered_next.get(&self.me).copied().unwrap_or(0);
            if ordered >= self.own_next || self.removed {
                self.data_retry_at = None;
            } else {
                if ordered == self.data_retry_mark {
                    // Expired with nothing ordered: congestion (section 4.6).
                    self.flow.on_loss();
                    self.flow.rtt.on_timeout();
                    let end = self.own_next.min(ordered + DATA_RETRY_BURST);
                    let again: Vec<(u64, Qos, Bytes)> = (ordered..end)
                        .filter_map(|s| self.data.get(self.me, s).map(|(p, q)| (s, *q, p.clone())))
                        .collect();
                    self.counters.retransmissions += again.len() as u64;
                    self.send_runs(Destination::Group, self.me, &again);
                    for e in self.flow.sent.iter_mut().take_while(|e| e.0 < end) {
                        e.3 = true; // Karn: no RTT sample from a packet sent twice
                    }
                }
                self.data_retry_mark = ordered;
                self.data_retry_at = Some(now + self.flow.rtt.rto());
            }
        }
        if self.departing.iter().any(|d| now >= d.3) {
            self.departing.retain(|d| now < d.3);
            self.update_stable();
            self.after_progress(now);
        }
        self.nack(now);
        self.stall(now);
        self.token_work(now);
        self.arm_stall(now);
    }

    fn submit(&mut self, now: Time, payload: Bytes, qos: Qos) -> Result<u64, SendError> {
        if !self.guarantees().qos.contains(qos) {
            return Err(SendError::Unsupported);
        }
        if self.client.is_some() {
            return self.client_request(now, payload, qos, None);
        }
        if !self.member || self.leaving || self.removed || self.left {
            return Err(SendError::NotMember);
        }
        if self.recovering() {
            return Err(SendError::GroupFailed);
        }
        let room = self.max_datagram_bytes.min(wire::MAX_DATAGRAM_LEN);
        if payload.len() + wire::HEADER_LEN + packet::DATA_FIXED + packet::DATA_PER_MSG > room {
            return Err(SendError::TooLarge);
        }
        let len = payload.len() + packet::DATA_PER_MSG;
        if !self.can_submit() || (qos != Qos::Unreliable && !self.flow.admits(len, room)) {
            self.counters.backpressure_refusals += 1;
            return Err(SendError::WouldBlock);
        }
        self.counters.submitted += 1;
        if qos == Qos::Unreliable {
            // Sent once, outside the ordered stream; delivered here at once, and done.
            let n = self.own_unreliable;
            self.own_unreliable += 1;
            self.send_data(Destination::Group, self.me, n, qos, &payload);
            let msg = n | packet::UNRELIABLE_BIT;
            self.counters.delivered += 1;
            self.events.push_back(Event::Deliver(Delivery {
                respond: false,
                seq: msg,
                sender: self.me,
                msg,
                view: self.delivered_view.id,
                payload,
            }));
            self.events.push_back(Event::SendComplete { msg });
            return Ok(msg);
        }
        let n = self.own_next;
        self.own_next += 1;
        self.outbox.push((n, qos, payload.clone()));
        self.flow.on_send(n, now, len);
        self.data.insert(self.me, n, payload.clone(), qos);
        self.deliver_early(self.me, n, qos, &payload);
        if self.data_retry_at.is_none() {
            self.data_retry_at = Some(now + self.flow.rtt.rto());
            self.data_retry_mark = self.ordered_next.get(&self.me).copied().unwrap_or(0);
        }
        self.token_work(now);
        Ok(n)
    }

    fn request(
        &mut self,
        now: Time,
        payload: Bytes,
        qos: Qos,
        handler: Option<u8>,
    ) -> Result<u64, SendError> {
        if !self.guarantees().qos.contains(qos) || self.client.is_none() {
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
        if self.left || self.leaving {
            return;
        }
        self.leaving = true;
        if !self.member {
            self.left = true;
            self.events.push_back(Event::Left);
            return;
        }
        if self.leave_alone() {
            return;
        }
        if self.alone_in_recovery() {
            // Nobody is left to order the leave or to hear it: done.
            self.left = true;
            self.events.push_back(Event::Left);
            return;
        }
        self.lcr_at = Some(now);
        self.token_work(now);
    }

    fn poll_transmit(&mut self, _now: Time, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.flush_outbox();
        let (to, data) = self.out.pop_front()?;
        if to == Destination::Group && !self.settings.unicast_only {
            // Section 3.4: members that cannot receive multicast get a unicast copy (one that
            // cannot send multicast fans out to every member by itself).
            for &m in self.unicast_members.iter().rev() {
                if m != self.me {
                    self.out.push_front((Destination::Peer(m), data.clone()));
                }
            }
        }
        *buf = data;
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
        shell::deadline(self.left, || self.timers().earliest())
    }

    fn node_id(&self) -> NodeId {
        self.me
    }

    fn guarantees(&self) -> Guarantees {
        RingFactory::declared()
    }

    fn info(&self) -> GroupInfo {
        GroupInfo {
            view: self.view_id,
            rank: self.idx(self.me),
            coordinator: self.member.then_some(self.last_site),
            recovering: self.recovering(),
            incarnation: self.rec.bound as u32,
            buffered_msgs: self.q.len() + self.data.len(),
            buffer_capacity_msgs: MAX_UNSTABLE as usize,
            ..shell::info(
                self.me,
                self.ring.clone(),
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
            ("next_ack", self.next_ack),
            ("stable_ts", self.stable_ts),
            ("unordered", self.data.len() as u64),
            ("unreliable_dropped", self.unreliable_dropped),
            ("window_bytes", self.flow.window.get() as u64),
            ("in_flight_bytes", self.flow.in_flight as u64),
            ("window_halved", self.flow.halved),
            ("rto_us", self.flow.rtt.rto().as_micros() as u64),
            ("reformations", self.rec.committed),
            ("last_reformation_us", self.rec.last_took.as_micros() as u64),
        ]
    }

    fn reset(&mut self, now: Time, min_members: usize) -> Result<(), SendError> {
        if !self.in_ring() {
            return Err(SendError::NotMember);
        }
        self.policy.min_members = min_members;
        self.failure_reported = false;
        self.start_reformation(now, None);
        Ok(())
    }

    fn rejoin(&mut self, now: Time, merging_into: Option<NodeId>) -> Result<(), SendError> {
        self.start_over(now, Role::Join)?;
        self.join_into = merging_into;
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
        if let Some(c) = &self.client {
            return c.pending() < super::multirpc::CLIENT_WINDOW;
        }
        !self.recovering()
            && self.own_next - self.own_stable < WINDOW
            && !self.events.is_full()
            && self.out.has_room()
            && self.flow.in_flight < self.flow.window.get()
    }

    fn describe(&self) -> String {
        format!(
            "ring me={} member={} ring={:?} view={} next_ack={} heard={:?} q={}..{} deliver={} \
             held_all={} stable={} token(holding={} idle={} named={:?} passing={:?}) own={}/{} \
             unordered={} lcrs={:?} leaving={} removed={} next_slot={:?} departing={:?} \
             reform={:?} seen={:?} bound={} retry={:?} expelled={} next_timer={:?}",
            self.me,
            self.member,
            self.ring.iter().map(|m| m.0).collect::<Vec<_>>(),
            self.view_id,
            self.next_ack,
            self.highest_heard,
            self.q.end() - self.q.len() as u64,
            self.q.end(),
            self.q.deliver_next(),
            self.q.holds_all(),
            self.stable_ts,
            self.token.holding,
            self.token.idle,
            self.token.named,
            self.token.passing.map(|p| (p.0, p.1 .0)),
            self.own_stable,
            self.own_next,
            self.data.len(),
            self.lcrs,
            self.leaving,
            self.removed,
            self.q.get(self.q.deliver_next()).map(|s| (
                s.state,
                match &s.entry {
                    Entry::Data { origin, sseq, .. } => (origin.0, *sseq),
                    Entry::View(v) => (u32::MAX, v.id),
                    Entry::Lock(op) => (op.by.0, u64::from(op.lock)),
                }
            )),
            self.departing,
            self.rec.current.as_ref().map(|r| (
                r.version,
                r.initiator.0,
                r.target.acks,
                r.new_list.is_some(),
                r.poll.is_some()
            )),
            self.rec.seen,
            self.rec.bound,
            self.rec.retry_at,
            self.expelled,
            self.timers().earliest_named(),
        )
    }
}
