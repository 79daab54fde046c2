//! The gossip engine: first-phase multicast, gossip rounds (digests, solicitations,
//! retransmissions), FIFO delivery with the loss up-call, garbage collection and stability
//! detection, and the gossiped membership.

use super::history::{Held, Insert, SenderHistory};
use super::membership::{MemberEntry, Membership, Merged};
use super::packet::{
    self, Digest, KnowledgeRow, Members, Probe, SenderSummary, Solicitation, Update, UpdateKind,
    Welcome, WireEntry,
};
use super::peers::{Peers, Stability};
use super::swim::{Detector, Pending, Suspicion};
use super::{Config, GossipFactory};
use crate::common::shell::{self, EventQueue, Gate, OutQueue, Shelled};
use crate::common::Deadlines;
use crate::common::SplitMix64;
use crate::common::{Fragmenter, Fragments, Reassembly};
use crate::engine::{
    Counters, Delivery, Destination, Engine, Event, GroupInfo, Loss, NodeId, Qos, SendError, Time,
    Transmit, View,
};
use crate::guarantees::Guarantees;
use crate::registry::{EngineParams, Role};
use crate::wire::{self, EngineKind, Header, Packet, WriteExt};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::time::Duration;

/// Datagrams queued for the driver at most: a round's gossip, answers and repairs fit many
/// times over.
const MAX_OUT: usize = 8192;
/// Digests a settling member sends per round, at most (see `Gossip::targets`): a bound on the
/// burst with which a large group goes idle.
const MAX_SETTLE_FANOUT: usize = 16;

/// Agreements with its table a settling member must hear before it goes idle: from every
/// other member in a group of up to this many more, from this many distinct ones in a larger
/// group, where every other member must also have been heard of (its heartbeat rose) since
/// the member went quiet (in a group that probes, `2 log2 n` rounds must have gone by instead:
/// see `Gossip::watched`). Every member that goes idle has heard its table confirmed; one whose
/// table differs hears no agreement and goes on gossiping (and exchanging tables) until the
/// tables meet, so the group still converges; a crashed member is never heard of again, so
/// the group stays awake until it is found silent, as when every member had to agree. Going
/// idle so costs a member of a group of n a constant number of digests rather than n (at
/// 10,000 members, n of them at 16 a round and as many replies took 30 s); the heartbeats
/// come in the rows of the digests a member gets anyway.
const AGREEMENTS: usize = 32;
/// A group this large hands the application a new view at most once a round; one of n members
/// waits n / VIEW_BATCH rounds between views (changes in between go into the next): a view of
/// n members costs every member n to hand over, so that the cost of views per member and round
/// stays bounded as the group grows (forming a group of 10,000 changes its table 10,000 times).
const VIEW_BATCH: usize = 256;

/// Counters of this engine only ([`Engine::engine_counters`]).
#[derive(Clone, Debug, Default)]
struct Stats {
    rounds: u64,
    digests: u64,
    digest_replies: u64,
    solicited_msgs: u64,
    /// Messages sent unasked to a gossiper whose digest showed it lacked them.
    pushed: u64,
    stale_solicitations: u64,
    lost_msgs: u64,
    loss_events: u64,
    gc_by_age: u64,
    gc_by_stability: u64,
    evicted: u64,
    /// Own messages dropped from a full buffer (by count or bytes) before their age.
    evicted_own: u64,
    /// Times this member found itself further behind a sender than its buffer reaches.
    lagged: u64,
    beyond_window: u64,
    suspected: u64,
    refutations: u64,
    joins_admitted: u64,
    welcomes_sent: u64,
    table_exchanges: u64,
    /// Table exchanges that sent one part of a table larger than a datagram.
    table_deltas: u64,
    table_full: u64,
    idle_periods: u64,
    unknown_origin: u64,
    /// Membership entries refused: a version too far ahead (see [`super::membership`]).
    forged_entries: u64,
    /// Probes sent (failure detection by probing, see `super::swim`).
    probes: u64,
    /// Members asked to probe another for this one.
    indirect_probes: u64,
    /// Probes sent on another member's behalf.
    relayed_probes: u64,
    /// Members this one suspected, or took in another's suspicion of.
    suspicions: u64,
}

/// The gossip engine (see the module docs).
#[derive(Clone)]
pub struct Gossip {
    cfg: Config,
    group: u32,
    me: NodeId,
    max_datagram_bytes: usize,
    rng: SplitMix64,
    counters: Counters,
    stats: Stats,
    out: OutQueue,
    events: EventQueue,
    /// Welcomed (or the creator).
    member: bool,
    /// While joining: when the join request goes out again.
    join_at: Option<Time>,
    /// Leaving since this round.
    leaving: Option<u64>,
    left: bool,
    table: Membership,
    /// The table's id ([`Membership::view_id`]): digests carry it, equal ids are agreement.
    view_id: u64,
    /// The id of the last view handed to the application (deliveries are tagged with it).
    shown_view: u64,
    /// When that view was handed over.
    shown_at: Time,
    /// The table changed since the last view handed over: `(members added, the last of them,
    /// members removed, the last of them)`.
    view_due: Option<(usize, NodeId, usize, NodeId)>,
    /// The other members (alive in the table).
    peers: Peers,
    /// Stability detection's reports (kept in groups of up to [`Stability::MAX_MEMBERS`]).
    stability: Stability,
    /// Peers whose agreement came at or after `quiet_since`.
    agreements: usize,
    /// The last entry of the part of the table sent last (see [`Gossip::exchange_table`]).
    part_cursor: NodeId,
    /// The round from which [`Gossip::all_heard`] looks at the peers again.
    heard_check_round: u64,
    /// Message histories per sender (this member's own included).
    streams: BTreeMap<NodeId, SenderHistory>,
    round: u64,
    heartbeat: u64,
    next_round: Option<Time>,
    last_round_at: Option<Time>,
    /// Retransmissions left in this round.
    budget: usize,
    /// Since when nothing happened here (nothing held or missing, the table unchanged).
    quiet_since: Option<Time>,
    /// No gossip rounds: nothing to gossip about, and every member agreed on the table.
    idle: bool,
    sender_rotation: usize,
    /// The last member whose row went into a digest: the next digest's rows start after it,
    /// so that every member's row goes out in turn whatever the group's size.
    row_cursor: NodeId,
    /// Departed members sent the table this round (see [`Gossip::nudge`]).
    nudged: BTreeSet<NodeId>,
    /// Own messages submitted and not yet handed to the driver: their first phase goes as one
    /// run (see [`Gossip::flush_run`]).
    run: OwnRun,
    /// Splits messages larger than a datagram.
    fragmenter: Fragmenter,
    /// Messages of other senders being put together from their fragments.
    reassembly: Reassembly<NodeId>,
    /// Failure detection by probing (in a group larger than [`Config::probing_above`]).
    detector: Detector,
    /// This member probes (else it watches gossiped heartbeats).
    probing: bool,
}

/// Own messages waiting for their first-phase multicast, numbers `first..first + len`.
#[derive(Clone, Debug, Default)]
struct OwnRun {
    first: u64,
    payloads: Vec<Bytes>,
    /// Bytes of the run body so far.
    bytes: usize,
}

impl Gossip {
    /// A member: the creator is a group of one at once, a joiner asks any member in.
    pub fn new(cfg: Config, p: &EngineParams<'_>) -> Gossip {
        let max_datagram_bytes = p.max_datagram_bytes.min(wire::MAX_DATAGRAM_LEN);
        let fragmenter = Fragmenter::new(
            cfg.max_message_bytes,
            max_datagram_bytes
                .saturating_sub(wire::HEADER_LEN + packet::FRAG_FIXED)
                .max(1),
        );
        let mut g = Gossip {
            reassembly: Reassembly::new(&fragmenter),
            fragmenter,
            table: Membership::with_owner(cfg.max_members, p.me),
            budget: cfg.max_retransmissions_per_round,
            events: EventQueue::new(cfg.max_events),
            cfg,
            group: p.group,
            me: p.me,
            max_datagram_bytes,
            rng: SplitMix64::new(p.seed),
            counters: Counters::default(),
            stats: Stats::default(),
            out: OutQueue::new(MAX_OUT),
            member: false,
            join_at: None,
            leaving: None,
            left: false,
            view_id: 0,
            shown_view: 0,
            shown_at: p.now,
            view_due: None,
            peers: Peers::default(),
            stability: Stability::default(),
            agreements: 0,
            part_cursor: NodeId(0),
            heard_check_round: 0,
            streams: BTreeMap::new(),
            round: 0,
            heartbeat: 0,
            next_round: None,
            last_round_at: None,
            quiet_since: None,
            idle: false,
            sender_rotation: 0,
            row_cursor: NodeId(0),
            nudged: BTreeSet::new(),
            run: OwnRun::default(),
            detector: Detector::default(),
            probing: false,
        };
        match p.role {
            Role::Create => {
                g.table.admit(g.me);
                g.streams.insert(
                    g.me,
                    SenderHistory::new(0, g.cfg.buffer_msgs, g.cfg.buffer_bytes, 0),
                );
                g.member = true;
                g.view_update(p.now);
                g.next_round = Some(p.now + g.cfg.round);
            }
            Role::Join | Role::Client => g.join_at = Some(p.now),
        }
        g
    }

    fn period(&self) -> Duration {
        self.cfg.round
    }

    fn send(&mut self, to: Destination, ptype: u8, body: impl FnOnce(&mut Vec<u8>)) {
        let mut buf = Vec::new();
        Header {
            engine: EngineKind::Gossip,
            ptype,
            flags: 0,
            group: self.group,
            incarnation: 0,
            sender: self.me,
        }
        .encode(&mut buf);
        body(&mut buf);
        self.out.push_back((to, buf));
    }

    fn send_data(&mut self, to: Destination, origin: NodeId, msg: u64, payload: &Bytes) {
        self.send(to, packet::DATA, |b| {
            packet::encode_data(b, origin, msg, payload)
        });
    }

    /// Send a held message again as it first went, a whole message or a fragment. Returns
    /// whether it was held.
    fn resend(&mut self, to: NodeId, origin: NodeId, msg: u64) -> bool {
        let Some((p, frag)) = (self.streams.get(&origin))
            .and_then(|s| s.get(msg))
            .map(|h| (h.payload.clone(), h.frag))
        else {
            return false;
        };
        match frag {
            None => self.send_data(Destination::Peer(to), origin, msg, &p),
            Some(f) => self.send(Destination::Peer(to), packet::DATA_FRAG, |b| {
                packet::encode_frag(b, origin, msg, f, &p)
            }),
        }
        true
    }

    /// Submit a message larger than a datagram: each fragment a message of its own (FIFO,
    /// repaired by gossip), multicast alone; the whole is delivered here at once under the
    /// number of its last fragment, which is what `submit` returns.
    fn submit_fragments(&mut self, now: Time, payload: Bytes, frags: Fragments) -> u64 {
        self.flush_run();
        let mut last = 0;
        for f in frags {
            let held = Held {
                payload: f.payload.clone(),
                round: self.round,
                frag: Some((f.index, f.count)),
            };
            let Some(own) = self.streams.get_mut(&self.me) else {
                break;
            };
            let (msg, evicted) = own.push_own(held);
            self.stats.evicted_own += evicted as u64;
            let me = self.me;
            self.send(Destination::Group, packet::DATA_FRAG, |b| {
                packet::encode_frag(b, me, msg, (f.index, f.count), &f.payload)
            });
            last = msg;
        }
        self.counters.submitted += 1;
        self.counters.delivered += 1;
        self.events.push_back(Event::Deliver(Delivery {
            respond: false,
            seq: last,
            sender: self.me,
            msg: last,
            view: self.shown_view,
            payload,
        }));
        self.events.push_back(Event::SendComplete { msg: last });
        self.activity(now);
        last
    }

    /// Queue own message `msg` for its first-phase multicast: with the messages submitted
    /// before it and not yet sent when they fit one datagram together.
    fn queue_own(&mut self, msg: u64, payload: Bytes) {
        let room = self.max_datagram_bytes - wire::HEADER_LEN - packet::RUN_FIXED;
        let add = packet::RUN_ENTRY_FIXED + payload.len();
        if !self.run.payloads.is_empty()
            && (self.run.bytes + add > room || self.run.payloads.len() == u16::MAX as usize)
        {
            self.flush_run();
        }
        if self.run.payloads.is_empty() {
            self.run.first = msg;
        }
        debug_assert_eq!(self.run.first + self.run.payloads.len() as u64, msg);
        self.run.payloads.push(payload);
        self.run.bytes += add;
    }

    /// Multicast the queued own messages: one alone as a plain message, several as a run.
    fn flush_run(&mut self) {
        let payloads = std::mem::take(&mut self.run.payloads);
        self.run.bytes = 0;
        let (me, first) = (self.me, self.run.first);
        match payloads.as_slice() {
            [] => {}
            [one] => self.send_data(Destination::Group, me, first, one),
            many => self.send(Destination::Group, packet::DATA_RUN, |b| {
                packet::encode_run(b, me, first, many)
            }),
        }
    }

    /// Something happened: the member is not quiet, and gossips again if it was idle.
    fn activity(&mut self, now: Time) {
        self.quiet_since = None;
        if self.idle {
            self.idle = false;
            // Nobody was watched while idle: silence counts from now.
            self.peers.all_heard_at(now);
            self.next_round = Some(now + self.period());
        }
    }

    /// The history of `origin`, made if the membership table knows it (histories stay as
    /// bounded as the table, whatever the datagrams name).
    fn stream(&mut self, origin: NodeId) -> Option<&mut SenderHistory> {
        let (cap, bytes, round) = (self.cfg.buffer_msgs, self.cfg.buffer_bytes, self.round);
        if !self.streams.contains_key(&origin) && self.table.get(origin).is_none() {
            self.stats.unknown_origin += 1;
            return None;
        }
        // A sender this member had no start for: its messages from the first on (it joined
        // after the welcome, or the admitter did not know it).
        Some(
            self.streams
                .entry(origin)
                .or_insert_with(|| SenderHistory::new(0, cap, bytes, round)),
        )
    }

    // ---- membership -----------------------------------------------------------------------

    /// Entry `id` of the table may have changed: the peers follow the table (a member alive
    /// in it is a peer, one departed is not).
    fn sync_peer(&mut self, now: Time, id: NodeId) {
        if id == self.me {
            return;
        }
        if self.table.is_alive(id) {
            if self.peers.add(id, now) {
                self.note_change(true, id);
            }
        } else if let Some(p) = self.peers.remove(id) {
            self.stability.forget(id);
            if self.quiet_since.is_some_and(|q| p.agreed_at >= q) {
                self.agreements -= 1;
            }
            self.note_change(false, id);
        }
    }

    /// Count a member added to (or removed from) the view to come.
    fn note_change(&mut self, added: bool, id: NodeId) {
        let d = self.view_due.get_or_insert((0, id, 0, id));
        if added {
            d.0 += 1;
            d.1 = id;
        } else {
            d.2 += 1;
            d.3 = id;
        }
    }

    /// After the table changed: refute a false departure; a view for the application is due.
    fn view_update(&mut self, now: Time) {
        if self.member && self.leaving.is_none() && !self.table.is_alive(self.me) {
            // Found silent (or a stale or forged leave) while alive: the next version says
            // otherwise; versions wrap, so there is always a next one.
            let version = self
                .table
                .get(self.me)
                .map_or(1, |e| e.version.wrapping_add(1));
            self.table.merge(
                self.me,
                MemberEntry {
                    version,
                    alive: true,
                },
            );
            self.sync_peer(now, self.me);
            self.stats.refutations += 1;
            self.spread(self.me, version, UpdateKind::Alive);
        }
        let id = self.table.view_id();
        if id == self.view_id {
            return;
        }
        self.view_id = id;
        self.set_detector(now);
        self.view_due.get_or_insert((0, self.me, 0, self.me));
        self.stability.resize(self.table.alive_count());
        debug_assert_eq!(
            self.peers.len() + usize::from(self.table.is_alive(self.me)),
            self.table.alive_count()
        );
        self.activity(now);
        // The first view at once (it makes this member one); the next as often as the
        // group's size allows.
        self.show_view(now, self.shown_view == 0);
    }

    /// The members (this one included while it is alive in the table), in id order.
    fn members(&self) -> Vec<NodeId> {
        let mut m: Vec<NodeId> = self.peers.iter().map(|(id, _)| id).collect();
        if self.table.is_alive(self.me) {
            let i = m.partition_point(|x| *x < self.me);
            m.insert(i, self.me);
        }
        m
    }

    /// Hand the application the view due, if one is and it is time (or `now_anyway`).
    fn show_view(&mut self, now: Time, now_anyway: bool) {
        let Some((added, last_added, removed, last_removed)) = self.view_due else {
            return;
        };
        if self.leaving.is_some() || !self.member {
            self.view_due = None;
            return;
        }
        let n = self.table.alive_count();
        let gap = self.period() * (n / VIEW_BATCH) as u32;
        if !now_anyway && now < self.shown_at + gap {
            return;
        }
        self.view_due = None;
        let members = self.members();
        let first = self.shown_view == 0;
        let one = |k: usize, id: NodeId, other: usize| (k == 1 && other == 0).then_some(id);
        // A joiner's first view names it as the member that joined.
        let joined = if first {
            Some(self.me)
        } else {
            one(added, last_added, removed)
        };
        self.shown_view = self.view_id;
        self.shown_at = now;
        self.counters.view_changes += 1;
        self.events.push_back(Event::View(View {
            id: self.view_id,
            seq: 0,
            coordinator: members.first().copied().unwrap_or(self.me),
            members,
            joined,
            left: one(removed, last_removed, added),
        }));
    }

    /// Table entries in one MEMBERS datagram.
    fn entries_per_datagram(&self) -> usize {
        let room = self
            .max_datagram_bytes
            .saturating_sub(wire::HEADER_LEN + Members::FIXED);
        (room / packet::ENTRY_LEN).clamp(1, u16::MAX as usize)
    }

    /// Two tables differ: send `to` ours. A table that fits one datagram goes whole; a larger
    /// one sends its next part in turn (one datagram of entries in id order, after those of
    /// the part before), so that a member's exchanges go round its whole table.
    ///
    /// Forming a group of 10,000, where joins arrive every millisecond and nearly every digest
    /// shows a different table, whole tables (63 datagrams each) on every difference were most
    /// of the simulation's work. The latest changes instead (up to 160, the way until
    /// 64c529ef) were nearly all known to the receiver already: the join multicasts bring
    /// them to nearly every member within milliseconds, and what a member lacks are the joins
    /// it lost (1% of them at 1% loss), which are old. Parts in turn mend those: at 10,000
    /// members a member gets about four exchanges a round from random members, so the part
    /// holding a given entry within about 16 rounds, where the whole table once in 63 rounds
    /// from one member did it in 63. A part in id order is also merged a step or two after
    /// the entry before ([`Membership::merge_near`]) rather than by a binary search of a
    /// cold table per entry.
    fn exchange_table(&mut self, to: NodeId, want_reply: bool) {
        let per = self.entries_per_datagram();
        if self.table.len() <= per {
            self.send_table(to, want_reply);
            return;
        }
        let part = self.table.part_after(self.part_cursor, per);
        if let Some((last, _)) = part.last() {
            self.part_cursor = *last;
        }
        let entries: Vec<WireEntry> = (part.iter())
            .map(|(id, e)| (*id, e.version, e.alive))
            .collect();
        let m = Members {
            want_reply,
            view_id: self.view_id,
            entries,
        };
        self.send(Destination::Peer(to), packet::MEMBERS, |b| m.encode(b));
        self.stats.table_deltas += 1;
    }

    /// Send the whole table to `to`, in as many datagrams as it takes.
    fn send_table(&mut self, to: NodeId, want_reply: bool) {
        let per = self.entries_per_datagram();
        let n = self.table.len().div_ceil(per);
        for i in 0..n {
            let entries: Vec<WireEntry> = (self.table.entries().skip(i * per).take(per))
                .map(|(id, e)| (id, e.version, e.alive))
                .collect();
            let m = Members {
                // Asked on the last part only, so that one exchange gets one answer.
                want_reply: want_reply && i + 1 == n,
                view_id: self.view_id,
                entries,
            };
            self.send(Destination::Peer(to), packet::MEMBERS, |b| m.encode(b));
        }
        self.stats.table_exchanges += 1;
    }

    fn merge_entries(&mut self, now: Time, entries: &[WireEntry]) -> bool {
        let mut changed = false;
        // Tables and their parts come in id order: each entry is looked for after the last.
        let mut hint = usize::MAX;
        for &(id, version, alive) in entries {
            match (self.table).merge_near(id, MemberEntry { version, alive }, &mut hint) {
                Merged::Changed => {
                    changed = true;
                    self.sync_peer(now, id);
                }
                Merged::Full => self.stats.table_full += 1,
                Merged::Forged => self.stats.forged_entries += 1,
                Merged::Unchanged => {}
            }
        }
        if changed {
            self.view_update(now);
        }
        changed
    }

    fn on_join(&mut self, now: Time, from: NodeId) {
        if !self.member || self.leaving.is_some() {
            return;
        }
        match self.table.admit(from) {
            Merged::Changed => {
                self.stats.joins_admitted += 1;
                self.sync_peer(now, from);
                self.view_update(now);
            }
            Merged::Full => {
                self.stats.table_full += 1;
                // Full: the joiner is told at once (it would otherwise ask on, unanswered,
                // for as long as the table stays full), by about `fanout` members as below.
                if self.answers_join(from) {
                    let limit = self.cfg.max_members as u32;
                    self.send(Destination::Peer(from), packet::JOIN_REFUSED, |b| {
                        b.put_u32(limit)
                    });
                }
                return;
            }
            Merged::Forged => {
                self.stats.forged_entries += 1;
                return;
            }
            Merged::Unchanged => {}
        }
        if !self.answers_join(from) {
            return;
        }
        let budget = self.max_datagram_bytes.saturating_sub(wire::HEADER_LEN + 4);
        let mut members: Vec<WireEntry> = Vec::new();
        if let Some(e) = self.table.get(from) {
            members.push((from, e.version, e.alive));
        }
        let mut used = packet::ENTRY_LEN * members.len();
        let mut starts = Vec::new();
        for (origin, s) in &self.streams {
            if used + packet::START_LEN > budget {
                break;
            }
            // The joiner delivers what is sent from here on: everything this member knows to
            // exist was sent before the joiner was let in.
            starts.push((*origin, s.known));
            used += packet::START_LEN;
        }
        for (id, e) in self.table.entries() {
            if id == from {
                continue;
            }
            if used + packet::ENTRY_LEN > budget {
                break;
            }
            members.push((id, e.version, e.alive));
            used += packet::ENTRY_LEN;
        }
        let partial = members.len() < self.table.len();
        let w = Welcome { starts, members };
        self.send(Destination::Peer(from), packet::WELCOME, |b| w.encode(b));
        self.stats.welcomes_sent += 1;
        if partial {
            // The joiner would otherwise hold a partial table until exchanges have brought
            // every part: in a large group, an exchange sends one part only.
            self.send_table(from, false);
        }
    }

    /// Whether this member answers `from`'s join request. Every member that hears it lets the
    /// joiner in; about `fanout` of them answer, so that the answers do not grow with the
    /// group. Only members heard gossiping count: others in the table may be joiners still
    /// waiting for an answer.
    fn answers_join(&mut self, from: NodeId) -> bool {
        let from_heard = self.peers.get(from).is_some_and(|p| p.heartbeat > 0);
        let answering = 1 + self.peers.heard() - usize::from(from_heard);
        self.rng.below(answering as u64) < self.cfg.fanout as u64
    }

    /// The group refused our join (its membership table is full): a joiner stops asking and
    /// says so; a member ignores it (a forged refusal cannot remove anybody).
    fn on_join_refused(&mut self, body: &[u8]) {
        let Ok(limit) = packet::decode_join_refused(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        if self.member || self.left || self.join_at.is_none() {
            return;
        }
        self.join_at = None;
        self.left = true;
        self.events
            .push_back(Event::Recovery(crate::engine::Recovery::Refused { limit }));
    }

    fn on_welcome(&mut self, now: Time, body: &[u8]) {
        let Ok(w) = Welcome::decode(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        if self.member {
            // A second answer to the same request: its table still counts.
            self.merge_entries(now, &w.members);
            return;
        }
        if self.join_at.is_none() {
            return;
        }
        let mut hint = usize::MAX;
        for &(id, version, alive) in &w.members {
            match (self.table).merge_near(id, MemberEntry { version, alive }, &mut hint) {
                Merged::Full => self.stats.table_full += 1,
                Merged::Forged => self.stats.forged_entries += 1,
                Merged::Changed => self.sync_peer(now, id),
                Merged::Unchanged => {}
            }
        }
        self.table.admit(self.me);
        self.sync_peer(now, self.me);
        let (cap, bytes) = (self.cfg.buffer_msgs, self.cfg.buffer_bytes);
        for &(origin, start) in &w.starts {
            self.streams
                .insert(origin, SenderHistory::new(start, cap, bytes, self.round));
        }
        self.streams
            .entry(self.me)
            .or_insert_with(|| SenderHistory::new(0, cap, bytes, 0));
        self.member = true;
        self.join_at = None;
        self.view_update(now);
        // The first round at a random point of the period: members that joined together do
        // not gossip in step.
        let offset = self.rng.below(self.period().as_nanos().max(1) as u64);
        self.next_round = Some(now + Duration::from_nanos(offset));
    }

    fn on_members(&mut self, now: Time, from: NodeId, body: &[u8]) {
        let Ok(m) = Members::decode(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        if !self.member {
            return;
        }
        self.merge_entries(now, &m.entries);
        if m.want_reply && m.view_id != self.view_id {
            self.exchange_table(from, false);
        }
    }

    fn on_leave(&mut self, now: Time, from: NodeId, body: &[u8]) {
        let mut r = wire::Reader::new(body);
        let Ok(version) = r.u32() else {
            self.counters.malformed_dropped += 1;
            return;
        };
        if r.finish().is_err() {
            self.counters.malformed_dropped += 1;
            return;
        }
        // A LEAVE names no member: it is its sender's own (a member leaves by itself; others
        // find it silent), so nobody can leave for another. Its version is bounded as any entry.
        if self.member {
            self.merge_entries(now, &[(from, version, false)]);
        }
    }

    // ---- data -----------------------------------------------------------------------------

    /// A datagram came from a member this one counts as departed: it is alive after all (a
    /// partition healed, a long pause ended). Send it the table, once a round, so that the
    /// two find out and merge (it refutes, or learns that it was left).
    fn nudge(&mut self, from: NodeId) {
        if !self.member || self.table.is_alive(from) || self.table.get(from).is_none() {
            return;
        }
        if self.nudged.insert(from) {
            self.exchange_table(from, true);
        }
    }

    fn on_data(&mut self, now: Time, body: &[u8]) {
        let Ok((origin, msg, payload)) = packet::decode_data(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        self.on_message(now, origin, msg, None, || Bytes::copy_from_slice(payload));
    }

    fn on_frag(&mut self, now: Time, body: &[u8]) {
        let Ok((origin, msg, frag, payload)) = packet::decode_frag(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        self.on_message(now, origin, msg, Some(frag), || {
            Bytes::copy_from_slice(payload)
        });
    }

    /// A run of messages: the body is copied once, and each payload is a slice of it.
    fn on_run(&mut self, now: Time, body: &[u8]) {
        let Ok((origin, first, ranges)) = packet::decode_run(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        let all = Bytes::copy_from_slice(body);
        for (k, r) in ranges.into_iter().enumerate() {
            self.on_message(now, origin, first + k as u64, None, || all.slice(r));
        }
    }

    fn on_message(
        &mut self,
        now: Time,
        origin: NodeId,
        msg: u64,
        frag: Option<(u16, u16)>,
        payload: impl FnOnce() -> Bytes,
    ) {
        if !self.member || self.leaving.is_some() {
            return;
        }
        if origin == self.me {
            self.counters.duplicates += 1;
            return;
        }
        let round = self.round;
        let held = Held {
            payload: payload(),
            round,
            frag,
        };
        let Some(s) = self.stream(origin) else {
            return;
        };
        // Room is made by dropping delivered messages, however young: the per-sender buffer
        // is bounded.
        let (mut result, mut evicted) = s.insert(msg, held.clone());
        if result == Insert::BeyondWindow && s.give_up_behind(msg + 1, round) {
            // A sender faster than a round overran this member's buffer while it waited for a
            // repair: it falls behind now, at the arrival, not at the next round. Waiting left
            // every arrival until then beyond the window, dropped, to be repaired by gossip a
            // few hundred a round while the sender went on: a member that lost one datagram
            // delivered a few percent of the stream for good.
            self.stats.lagged += 1;
            self.deliver(origin);
            let s = self.stream(origin).expect("the history was just used");
            let (again, more) = s.insert(msg, held);
            if again != Insert::BeyondWindow {
                // Counted as an arrival beyond the window all the same.
                self.stats.beyond_window += 1;
            }
            (result, evicted) = (again, evicted + more);
        }
        let Some(s) = self.stream(origin) else {
            return;
        };
        if result == Insert::Stored {
            // What a later message shows missing is noted now, so that the next digest that
            // comes is answered with a solicitation (not one a round later: FIFO delivery
            // waits on it).
            s.scan_gaps(now);
        }
        self.stats.evicted += evicted as u64;
        match result {
            Insert::Stored => {
                self.activity(now);
                self.deliver(origin);
            }
            Insert::Duplicate => self.counters.duplicates += 1,
            Insert::BeyondWindow => {
                self.stats.beyond_window += 1;
                if self
                    .stream(origin)
                    .is_some_and(|s| s.learn(msg.saturating_add(1), round))
                {
                    self.activity(now);
                }
            }
        }
    }

    /// Deliver what `origin`'s history allows, in FIFO order; report what was given up on.
    fn deliver(&mut self, origin: NodeId) {
        let view = self.shown_view;
        let Some(s) = self.streams.get_mut(&origin) else {
            return;
        };
        while self.events.room() {
            if let Some(count) = s.lost_run() {
                debug_assert!(count > 0, "a loss is of at least one message");
                s.skip(count);
                // A message in fragments that lost some never completes: what follows of it
                // is refused below, and its last fragment (its number) reported lost.
                self.reassembly.forget(origin);
                self.stats.lost_msgs = self.stats.lost_msgs.saturating_add(count);
                self.stats.loss_events += 1;
                self.events.push_back(Event::Loss(Loss {
                    sender: origin,
                    first_seq: s.next - count,
                    count,
                }));
                continue;
            }
            let Some(h) = s.get(s.next) else { break };
            let (payload, frag) = (h.payload.clone(), h.frag);
            let msg = s.next;
            s.advance();
            // FIFO per sender: each message once, right after the one before it.
            debug_assert_eq!(s.next, msg + 1, "delivery moves one message at a time");
            let payload = match frag {
                None => payload,
                Some((index, count)) => {
                    match self.reassembly.push(origin, index, count, payload) {
                        Ok(Some(whole)) => whole,
                        Ok(None) => continue,
                        Err(_) => {
                            // Its beginning was lost (or it is too large): the message is
                            // lost, reported once, under its number (its last fragment's).
                            if index + 1 == count {
                                self.stats.lost_msgs += 1;
                                self.stats.loss_events += 1;
                                self.events.push_back(Event::Loss(Loss {
                                    sender: origin,
                                    first_seq: msg,
                                    count: 1,
                                }));
                            }
                            continue;
                        }
                    }
                }
            };
            self.counters.delivered += 1;
            self.events.push_back(Event::Deliver(Delivery {
                respond: false,
                seq: msg,
                sender: origin,
                msg,
                view,
                payload,
            }));
        }
    }

    fn deliver_all(&mut self) {
        let origins: Vec<NodeId> = self.streams.keys().copied().collect();
        for o in origins {
            if o != self.me {
                self.deliver(o);
            }
        }
    }

    // ---- gossip ---------------------------------------------------------------------------

    /// Every member holds every message of `origin` below this: stability.
    fn stable_point(&self, origin: NodeId) -> u64 {
        let own = self.streams.get(&origin).map_or(0, |s| s.next);
        let stable = own.min(self.stability.stable(origin, &self.peers));
        // Stable means every member has it, this one included: never past our own delivery.
        debug_assert!(stable <= own);
        stable
    }

    /// The histories worth a line in a digest: something held, missing or given up on, or
    /// a change recent enough that a member may still lack its news.
    fn reported(&self) -> Vec<NodeId> {
        let recent = u64::from(self.cfg.gc_rounds + self.cfg.loss_rounds);
        (self.streams.iter())
            // A history with no message known says nothing (a member's own before it sent).
            .filter(|(_, s)| s.known > 0)
            .filter(|(_, s)| !s.is_quiet() || self.round.saturating_sub(s.touched) <= recent)
            .map(|(o, _)| *o)
            .collect()
    }

    fn build_digest(&mut self, to: NodeId, flags: u8) -> Digest {
        let updates = self.detector.take(packet::MAX_UPDATES, to);
        let budget = self.max_datagram_bytes.min(packet::MAX_DIGEST_BYTES)
            - wire::HEADER_LEN
            - packet::DIGEST_FIXED
            - Digest::updates_len(updates.len());
        let mut candidates = self.reported();
        if !candidates.is_empty() {
            let k = self.sender_rotation % candidates.len();
            candidates.rotate_left(k);
            self.sender_rotation = self.sender_rotation.wrapping_add(1);
        }
        let mut senders: Vec<SenderSummary> = Vec::new();
        let mut used = 0;
        for o in candidates {
            if senders.len() == packet::MAX_DIGEST_ORIGINS {
                break;
            }
            let s = &self.streams[&o];
            let summary = SenderSummary {
                origin: o,
                prefix: s.next.min(s.known),
                known: s.known,
                held: s.held_ranges(packet::MAX_RANGES),
            };
            // Room for this member's own row with one more sender.
            if used + summary.len() + Digest::row_len(senders.len() + 1) > budget {
                break;
            }
            used += summary.len();
            senders.push(summary);
        }
        let row_len = Digest::row_len(senders.len());
        let mut rows = vec![KnowledgeRow {
            member: self.me,
            heartbeat: self.heartbeat,
        }];
        let mut prefixes: Vec<u64> = senders.iter().map(|s| s.prefix).collect();
        used += row_len;
        // The peers after the cursor, then from the first: only as many as fit are visited,
        // so a digest costs its rows, not the group's size.
        let mut cursor = self.row_cursor;
        for (m, p) in self.peers.turn_after(self.row_cursor) {
            if used + row_len > budget {
                break;
            }
            rows.push(KnowledgeRow {
                member: m,
                heartbeat: p.heartbeat,
            });
            let st = &self.stability;
            prefixes.extend((senders.iter()).map(|s| st.prefix_of(s.origin, m)));
            used += row_len;
            cursor = m;
        }
        self.row_cursor = cursor;
        Digest {
            round: self.round as u32,
            flags,
            view_id: self.view_id,
            senders,
            rows,
            prefixes,
            updates,
        }
    }

    fn send_digest(&mut self, to: NodeId, flags: u8) {
        let d = self.build_digest(to, flags);
        self.send(Destination::Peer(to), packet::GOSSIP, |b| d.encode(b));
        self.counters.acks_sent += 1;
        if flags & packet::FLAG_REPLY != 0 {
            self.stats.digest_replies += 1;
        } else {
            self.stats.digests += 1;
        }
    }

    fn on_gossip(&mut self, now: Time, from: NodeId, body: &[u8]) {
        let Ok(d) = Digest::decode(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        if !self.member {
            return;
        }
        self.apply_updates(now, &d.updates);
        let is_reply = d.flags & packet::FLAG_REPLY != 0;
        if d.view_id == self.view_id {
            let before = self.peers.agreed(from, now);
            if let (Some(q), Some(b)) = (self.quiet_since, before) {
                if b < q && now >= q {
                    self.agreements += 1;
                }
            }
        } else {
            // Different tables: send ours, and ask for theirs if they differ still.
            self.exchange_table(from, true);
        }
        let round = self.round;
        let mut news = false;
        // Looked up once, not once a sender: a binary search of a cold list at 10,000 members.
        let from_peer = self.peers.contains(from);
        for s in &d.senders {
            if self.table.get(s.origin).is_none() {
                self.stats.unknown_origin += 1;
                continue;
            }
            if s.origin != self.me && self.leaving.is_none() && s.known > 0 {
                if let Some(st) = self.stream(s.origin) {
                    if st.learn(s.known, round) {
                        st.scan_gaps(now);
                        news = true;
                    }
                }
            }
            // Reports only of senders this member keeps a history of (stability and the loss
            // floor are of those): not n senders' worth from n members.
            if from_peer && self.streams.contains_key(&s.origin) {
                self.stability.prefix(s.origin, from, s.prefix);
                self.stability.base(s.origin, from, s.base());
            }
        }
        // The rows are in id order (from the gossiper's cursor, round once): each is looked
        // for after the last.
        let mut hint = usize::MAX;
        for (i, row) in d.rows.iter().enumerate() {
            if row.member == self.me {
                continue;
            }
            let peer = self
                .peers
                .heartbeat(row.member, row.heartbeat, now, &mut hint);
            if !peer || !self.stability.on() {
                continue;
            }
            for (s, pref) in d.senders.iter().zip(d.row_prefixes(i)) {
                if self.streams.contains_key(&s.origin) {
                    self.stability.prefix(s.origin, row.member, *pref);
                }
            }
        }
        if news {
            self.activity(now);
        }
        if self.leaving.is_none() {
            self.solicit(now, from, &d);
        }
        self.push_missing(from, &d);
        // An idle member, or one that does not count the gossiper as a member (a leaver, a
        // member found silent), answers with its own digest: the gossiper learns what it
        // holds and that it is alive. Replies are never answered.
        let want = d.flags & packet::FLAG_WANT_REPLY != 0;
        if !is_reply && (want || self.idle || !self.table.is_alive(from)) {
            self.heartbeat += 1;
            self.send_digest(from, packet::FLAG_REPLY);
        }
    }

    /// Ask the gossiper of `d` for the messages it holds and this member lacks, the oldest
    /// first (they hold up FIFO delivery), each at most once per round, in bounded number.
    fn solicit(&mut self, now: Time, from: NodeId, d: &Digest) {
        let period = self.period();
        let mut left = self.cfg.max_solicit;
        let mut wanted: Vec<(NodeId, Range<u64>)> = Vec::new();
        for s in &d.senders {
            if s.origin == self.me || s.held.is_empty() || left == 0 {
                continue;
            }
            let Some(st) = self.streams.get_mut(&s.origin) else {
                continue;
            };
            for (msg, gap) in st.gaps.iter_mut() {
                if left == 0 || wanted.len() == packet::MAX_SOLICIT_RANGES {
                    break;
                }
                if !s.holds(*msg) || gap.asked.is_some_and(|t| now < t + period) {
                    continue;
                }
                gap.asked = Some(now);
                left -= 1;
                match wanted.last_mut() {
                    Some((o, r)) if *o == s.origin && r.end == *msg => r.end += 1,
                    _ => wanted.push((s.origin, *msg..*msg + 1)),
                }
            }
        }
        if wanted.is_empty() {
            return;
        }
        let n: u64 = wanted.iter().map(|(_, r)| r.end - r.start).sum();
        self.stats.solicited_msgs += n;
        self.counters.nacks_sent += 1;
        let sol = Solicitation {
            round: d.round,
            wanted,
        };
        self.send(Destination::Peer(from), packet::SOLICIT, |b| sol.encode(b));
    }

    /// Send the gossiper of `d` what its digest shows it lacks and this member holds: the
    /// holes below what it knows to exist (push as well as pull, as in the anti-entropy of
    /// "Epidemic Algorithms for Replicated Database Maintenance" by Demers et al.): a member
    /// that lost a first-phase copy is repaired in its own round, not only when a digest comes
    /// to it, so that FIFO delivery waits less. Within the same round budget as solicitations,
    /// and at most [`Config::max_solicit`] messages a digest.
    fn push_missing(&mut self, from: NodeId, d: &Digest) {
        let mut left = self.cfg.max_solicit.min(self.budget);
        for s in &d.senders {
            if left == 0 {
                break;
            }
            let Some(st) = self.streams.get(&s.origin) else {
                continue;
            };
            // Where the digest says what it holds: everything below `known` if its ranges
            // were not cut short, else up to the last range.
            let described = if s.held.len() < packet::MAX_RANGES {
                s.known
            } else {
                s.held.last().map_or(s.known, |r| r.end)
            };
            let end = described.min(st.known).min(st.next);
            let mut msg = s.prefix.max(st.base());
            let mut looked = 0;
            let mut holes: Vec<u64> = Vec::new();
            while msg < end && left > 0 && looked < 4 * self.cfg.max_solicit {
                looked += 1;
                if let Some(r) = s.held.iter().find(|r| r.contains(&msg)) {
                    msg = r.end;
                    continue;
                }
                if st.get(msg).is_some() {
                    holes.push(msg);
                    left -= 1;
                }
                msg += 1;
            }
            for msg in holes {
                if self.resend(from, s.origin, msg) {
                    self.budget -= 1;
                    self.counters.retransmissions += 1;
                    self.stats.pushed += 1;
                }
            }
        }
    }

    fn on_solicit(&mut self, from: NodeId, body: &[u8]) {
        let Ok(sol) = Solicitation::decode(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        if !self.member {
            return;
        }
        self.counters.nacks_received += 1;
        // A solicitation answers a digest of this round or the one before; older ones are
        // dropped (the soliciting member may have what it asked for by now).
        if (self.round as u32).wrapping_sub(sol.round) > 1 {
            self.stats.stale_solicitations += 1;
            return;
        }
        let cap = self.cfg.buffer_msgs as u64;
        for (origin, r) in sol.wanted {
            for msg in r.start..r.end.min(r.start.saturating_add(cap)) {
                if self.budget == 0 {
                    return;
                }
                if self.resend(from, origin, msg) {
                    self.budget -= 1;
                    self.counters.retransmissions += 1;
                }
            }
        }
    }

    // ---- rounds ---------------------------------------------------------------------------

    /// Garbage collection: stable messages go at once, the others once they are `gc_rounds`
    /// rounds old; a history that fell further behind than its buffer gives up its oldest.
    fn collect(&mut self) {
        let origins: Vec<NodeId> = self.streams.keys().copied().collect();
        let cap = self.cfg.buffer_msgs as u64;
        for o in origins {
            // Stability only frees held messages: a history holding none (most of them, in a
            // large group) is spared the pass over every member.
            let held = self.streams.get(&o).is_some_and(|s| s.held_count() > 0);
            let stable = if held { self.stable_point(o) } else { 0 };
            let (round, gc) = (self.round, u64::from(self.cfg.gc_rounds));
            let s = self.streams.get_mut(&o).expect("listed");
            let (dropped, stable_n) = s.collect(stable, round, gc);
            self.stats.gc_by_stability += stable_n as u64;
            self.stats.gc_by_age += (dropped.len() - stable_n) as u64;
            if o == self.me {
                continue;
            }
            if s.known > s.base().saturating_add(cap) {
                let upto = s.next.min(s.known - cap);
                self.stats.evicted += s.evict_below(upto).len() as u64;
            }
            // Fell further behind than the buffer reaches, as news in digests shows: what it
            // cannot hold is given up on (the loss up-call when delivery reaches it).
            if s.give_up_behind(s.known, round) {
                self.stats.lagged += 1;
            }
        }
    }

    /// The loss up-call: a missing message is given up on once it has been missing for
    /// `loss_rounds` rounds, or once every other member said it no longer holds it.
    fn detect_losses(&mut self, now: Time) {
        let timeout = self.period() * self.cfg.loss_rounds;
        let origins: Vec<NodeId> = self.streams.keys().copied().collect();
        for o in origins {
            if o == self.me {
                continue;
            }
            let round = self.round;
            let s = self.streams.get_mut(&o).expect("listed");
            s.scan_gaps(now);
            if s.gaps.is_empty() {
                continue;
            }
            // The oldest message any other member may still hold (everyone reported).
            let floor = self.stability.floor(o, &self.peers);
            let s = self.streams.get_mut(&o).expect("listed");
            let gone: Vec<u64> = (s.gaps.iter())
                .filter(|(msg, g)| now >= g.since + timeout || floor.is_some_and(|f| **msg < f))
                .map(|(m, _)| *m)
                .collect();
            for msg in gone {
                s.give_up(msg, round);
            }
        }
    }

    // ---- failure detection by probing (SWIM, see `swim.rs`) ------------------------------

    /// Probe (a group larger than [`Config::probing_above`], failure detection on) or watch
    /// heartbeats, as the group's size says now.
    fn set_detector(&mut self, now: Time) {
        let on =
            self.cfg.silence_timeout.is_some() && self.table.alive_count() > self.cfg.probing_above;
        if on != self.probing {
            self.probing = on;
            if !on {
                self.detector.clear();
            }
            self.peers.watch_silence(!on, now);
        }
    }

    /// Piggyback an update about `member` on what this member sends next (while probing: in a
    /// smaller group the table exchanges and heartbeats carry it, as they always did).
    fn spread(&mut self, member: NodeId, version: u32, kind: UpdateKind) {
        if self.probing {
            let u = Update {
                member,
                version,
                kind,
            };
            self.detector.spread(u, self.table.alive_count());
        }
    }

    fn send_probe(&mut self, to: NodeId, ptype: u8, id: u32, member: NodeId) {
        let p = Probe {
            id,
            member,
            updates: self.detector.take(packet::MAX_UPDATES, to),
        };
        self.send(Destination::Peer(to), ptype, |b| p.encode(b));
    }

    /// A round's probing: the probe of the last round, unanswered, makes its target suspected;
    /// suspicions old enough are confirmed; the next member in turn is probed.
    fn probe_round(&mut self, now: Time) {
        if let Some(p) = self.detector.pending.take() {
            if !p.acked {
                self.suspect(now, p.target, None);
            }
        }
        self.confirm_suspicions(now);
        if self.peers.len() == 0 || self.leaving.is_some() {
            return;
        }
        let target = (self.peers).at(self.detector.next_position(self.peers.len(), &mut self.rng));
        let id = self.detector.new_id();
        self.detector.pending = Some(Pending {
            id,
            target,
            indirect_at: Some(now + self.cfg.probe_timeout),
            asked: Vec::new(),
            acked: false,
        });
        self.stats.probes += 1;
        self.send_probe(target, packet::PROBE, id, target);
    }

    /// The probe under way went unanswered for the probe timeout: others are asked to probe.
    fn probe_indirectly(&mut self, now: Time) {
        let Some(p) = self.detector.pending.as_mut() else {
            return;
        };
        if p.acked || p.indirect_at.is_none_or(|t| now < t) {
            return;
        }
        p.indirect_at = None;
        let (id, target) = (p.id, p.target);
        let n = self.peers.len();
        let k = self.cfg.indirect_probes.min(n.saturating_sub(1));
        let mut asked: Vec<NodeId> = Vec::with_capacity(k);
        // Random draws among the peers (k of n, n large: few repeats); bounded tries.
        for _ in 0..4 * k {
            if asked.len() == k {
                break;
            }
            let m = self.peers.at(self.rng.below(n as u64) as usize);
            if m != target && !asked.contains(&m) {
                asked.push(m);
            }
        }
        for m in &asked {
            self.send_probe(*m, packet::PROBE_REQ, id, target);
        }
        self.stats.indirect_probes += asked.len() as u64;
        if let Some(p) = self.detector.pending.as_mut() {
            p.asked = asked;
        }
    }

    /// Suspect `m` (at `version`, or its version in the table): it did not answer, or another
    /// member says so. A suspicion at another version than the table's is not taken in (a later
    /// one waits for the table to catch up; an earlier one was refuted).
    fn suspect(&mut self, now: Time, m: NodeId, version: Option<u32>) {
        let Some(e) = self.table.get(m).filter(|e| e.alive) else {
            return;
        };
        if m == self.me
            || version.is_some_and(|v| v != e.version)
            || (self.detector.suspects.get(&m)).is_some_and(|s| s.version == e.version)
        {
            return;
        }
        let s = Suspicion {
            version: e.version,
            since: now,
        };
        self.detector.suspects.insert(m, s);
        self.stats.suspicions += 1;
        self.spread(m, e.version, UpdateKind::Suspect);
        self.activity(now);
    }

    /// Suspicions [`Config::silence_timeout`] old, their members still alive at the version
    /// suspected, are confirmed: the member departs (and the departure spreads).
    fn confirm_suspicions(&mut self, now: Time) {
        let Some(timeout) = self.cfg.silence_timeout else {
            return;
        };
        let table = &self.table;
        // Void once the table holds the member at another version (refuted) or departed.
        (self.detector.suspects).retain(|m, s| {
            table
                .get(*m)
                .is_some_and(|e| e.alive && e.version == s.version)
        });
        let due: Vec<NodeId> = (self.detector.suspects.iter())
            .filter(|(_, s)| now >= s.since + timeout)
            .map(|(m, _)| *m)
            .collect();
        if due.is_empty() {
            return;
        }
        for m in due {
            self.detector.suspects.remove(&m);
            if self.table.depart(m) {
                self.stats.suspected += 1;
                self.counters.failures_detected += 1;
                self.sync_peer(now, m);
                if let Some(e) = self.table.get(m) {
                    self.spread(m, e.version, UpdateKind::Departed);
                }
            }
        }
        self.view_update(now);
    }

    /// Updates piggybacked on a digest or a probe: departures and refutations merge into the
    /// table (and spread on, if news); a suspicion of this member is refuted at once, one of
    /// another member taken in (while probing).
    fn apply_updates(&mut self, now: Time, updates: &[Update]) {
        if !self.member || updates.is_empty() {
            return;
        }
        let mut changed = false;
        // A suspicion of this member is refuted once a packet, after its other updates: one
        // packet naming several versions raises this member's version by one at most.
        let mut refute: Vec<u32> = Vec::new();
        for u in updates {
            if u.kind == UpdateKind::Suspect {
                if u.member == self.me {
                    refute.push(u.version);
                } else if self.probing {
                    self.suspect(now, u.member, Some(u.version));
                }
                continue;
            }
            let e = MemberEntry {
                version: u.version,
                alive: u.kind == UpdateKind::Alive,
            };
            match self.table.merge(u.member, e) {
                Merged::Changed => {
                    changed = true;
                    self.sync_peer(now, u.member);
                    self.spread(u.member, u.version, u.kind);
                }
                Merged::Full => self.stats.table_full += 1,
                Merged::Forged => self.stats.forged_entries += 1,
                Merged::Unchanged => {}
            }
        }
        if changed {
            self.view_update(now);
        }
        if let Some(v) = (self.table.get(self.me)).filter(|e| refute.contains(&e.version)) {
            self.refute(now, v.version);
        }
    }

    /// This member is suspected at `version`: if that is its version, it says it is alive at
    /// the next (SWIM's refutation by incarnation). Older suspicions were refuted already.
    fn refute(&mut self, now: Time, version: u32) {
        let Some(e) = self.table.get(self.me) else {
            return;
        };
        if !e.alive || e.version != version || self.leaving.is_some() {
            return;
        }
        let v = e.version.wrapping_add(1);
        self.table.merge(
            self.me,
            MemberEntry {
                version: v,
                alive: true,
            },
        );
        self.sync_peer(now, self.me);
        self.stats.refutations += 1;
        // Spread even while not probing: the suspecter is.
        let u = Update {
            member: self.me,
            version: v,
            kind: UpdateKind::Alive,
        };
        self.detector.spread(u, self.table.alive_count());
        self.view_update(now);
    }

    fn on_probe(&mut self, now: Time, from: NodeId, ptype: u8, body: &[u8]) {
        let Ok(p) = Probe::decode(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        if !self.member {
            return;
        }
        self.apply_updates(now, &p.updates);
        match ptype {
            packet::PROBE | packet::PROBE_REQ if p.member == self.me => {
                self.send_probe(from, packet::PROBE_ACK, p.id, self.me);
            }
            packet::PROBE_REQ if self.peers.contains(p.member) && self.peers.contains(from) => {
                let id = self.detector.new_id();
                let until = now + self.period();
                self.detector.relay(id, p.member, from, p.id, until);
                self.stats.relayed_probes += 1;
                self.send_probe(p.member, packet::PROBE, id, p.member);
            }
            packet::PROBE_ACK => {
                let mine = self.detector.answered(from, p.id, p.member);
                // Not an answer to this member's own probe: perhaps one it relayed for another.
                let relayed = (!mine && p.member == from)
                    .then(|| self.detector.relayed_answer(now, from, p.id))
                    .flatten();
                if let Some((to, id)) = relayed {
                    self.send_probe(to, packet::PROBE_ACK, id, from);
                }
            }
            _ => {}
        }
    }

    /// Members not heard of for the silence timeout leave the view.
    fn detect_silence(&mut self, now: Time) {
        let Some(timeout) = self.cfg.silence_timeout else {
            return;
        };
        let silent = self.peers.silent(now, timeout);
        if silent.is_empty() {
            return;
        }
        for m in silent {
            if self.table.depart(m) {
                self.stats.suspected += 1;
                self.counters.failures_detected += 1;
                self.sync_peer(now, m);
            }
        }
        self.view_update(now);
    }

    /// Whether every other member was heard of since `q` (see [`AGREEMENTS`]): implied by
    /// their agreements in a group of up to [`AGREEMENTS`] others; in a larger one, looked at
    /// (a pass over the peers) once in [`Config::idle_rounds`] rounds at most.
    fn all_heard(&mut self, q: Time) -> bool {
        if self.peers.len() <= AGREEMENTS || self.round < self.heard_check_round {
            return self.peers.len() <= AGREEMENTS;
        }
        let all = self.peers.iter().all(|(_, p)| p.news_at >= q);
        if !all {
            self.heard_check_round = self.round + u64::from(self.cfg.idle_rounds);
        }
        all
    }

    /// Whether this member, quiet since `q`, has watched long enough that a crashed member
    /// would have shown (see [`AGREEMENTS`]). With heartbeats: every other member was heard
    /// of since `q` ([`Gossip::all_heard`]; a crashed one never is). While probing: `q` is at
    /// least `2 log2 n` rounds ago. Every member is probed by some member in a round with
    /// probability about 1 - 1/e, so a crashed member escapes that many rounds of probing
    /// with probability about e^-(2 log2 n) = n^-2.9, and once suspected the suspicion wakes whoever it
    /// reaches. Hearing from every member instead took a group of 5,000 more than a minute of
    /// settling (news of an idle member comes only from the digests it answers), and the
    /// group no longer needs it to find a crash. Without failure detection
    /// ([`Config::silence_timeout`] `None`) nothing would act on a crash seen, so there is
    /// nothing to watch for: waiting for news of every member only kept a group of 10,000
    /// gossiping for more than a minute after its last message.
    fn watched(&mut self, now: Time, q: Time) -> bool {
        if self.cfg.silence_timeout.is_none() {
            return true;
        }
        if !self.probing {
            return self.all_heard(q);
        }
        let n = self.peers.len() as u64 + 1;
        let log2 = u64::BITS - n.leading_zeros();
        now >= q + self.period() * (2 * log2)
    }

    /// Agreements this member must hear before it goes idle (see [`AGREEMENTS`]).
    fn agreements_needed(&self) -> usize {
        self.peers.len().min(AGREEMENTS)
    }

    /// `fanout` gossip targets at random; or, while this member is settling before it goes
    /// idle, as many as it takes to hear the agreements it needs within about
    /// [`Config::idle_rounds`] rounds (each digest sent brings a reply, and about as many come
    /// in): at least `fanout`, at most [`MAX_SETTLE_FANOUT`]; in a group of up to
    /// [`AGREEMENTS`] others, those whose agreement with its table is the oldest.
    fn targets(&mut self, settling: bool) -> Vec<NodeId> {
        let n = self.peers.len();
        let mut k = self.cfg.fanout.min(n);
        if settling {
            let per_round = 2 * self.cfg.idle_rounds.max(1) as usize;
            let want = self
                .agreements_needed()
                .div_ceil(per_round)
                .min(MAX_SETTLE_FANOUT);
            k = k.max(want).min(n);
            if n <= AGREEMENTS {
                return self.peers.oldest_agreements(self.me, k);
            }
        }
        // The first k of a Fisher-Yates shuffle of the peers (in id order), the positions it
        // moved kept aside: k draws, whatever the group's size.
        let mut moved: BTreeMap<usize, usize> = BTreeMap::new();
        let mut out = Vec::with_capacity(k);
        for i in 0..k {
            let j = i + self.rng.below((n - i) as u64) as usize;
            let at_j = moved.get(&j).copied().unwrap_or(j);
            let at_i = moved.get(&i).copied().unwrap_or(i);
            moved.insert(j, at_i);
            out.push(self.peers.at(at_j));
        }
        out
    }

    fn finish_leave(&mut self) {
        // Phases: member, leaving (lingers while its messages spread), left; once each.
        debug_assert!(self.member && self.leaving.is_some() && !self.left);
        if let Some(e) = self.table.get(self.me) {
            self.send(Destination::Group, packet::LEAVE, |b| b.put_u32(e.version));
        }
        self.left = true;
        self.next_round = None;
        self.events.push_back(Event::Left);
    }

    fn gossip_round(&mut self, now: Time) {
        debug_assert!(!self.left, "no rounds after the leave");
        if self
            .last_round_at
            .is_some_and(|t| now.saturating_since(t) > self.period() * 3)
        {
            // This member itself was stalled (paused): it cannot tell who was silent, nor
            // whether its probe went unanswered.
            self.peers.all_heard_at(now);
            self.detector.pause();
        }
        self.last_round_at = Some(now);
        self.round += 1;
        self.heartbeat += 1;
        self.budget = self.cfg.max_retransmissions_per_round;
        self.nudged.clear();
        self.stats.rounds += 1;
        self.collect();
        self.detect_losses(now);
        self.deliver_all();
        if self.probing {
            self.probe_round(now);
        } else {
            self.detect_silence(now);
        }
        if let Some(since) = self.leaving {
            let own_done = self
                .streams
                .get(&self.me)
                .is_none_or(|s| s.held_count() == 0);
            if own_done && self.round >= since + u64::from(self.cfg.leave_linger_rounds) {
                self.finish_leave();
                return;
            }
        }
        self.show_view(now, false);
        // A suspicion under way keeps the member awake until it is refuted or confirmed.
        let quiet = self.leaving.is_none()
            && self.detector.suspects.is_empty()
            && self.streams.values().all(SenderHistory::is_quiet);
        if !quiet {
            self.quiet_since = None;
        } else if self.quiet_since.is_none() {
            self.quiet_since = Some(now);
            // Agreements heard at this very instant count (rarely any: one pass a quiet
            // period).
            self.agreements = self
                .peers
                .iter()
                .filter(|(_, p)| p.agreed_at >= now)
                .count();
        }
        let mut settling = false;
        if let Some(q) = self.quiet_since {
            debug_assert_eq!(
                self.agreements,
                self.peers.iter().filter(|(_, p)| p.agreed_at >= q).count()
            );
            let agreed = self.agreements >= self.agreements_needed();
            // In a large group, once enough agreed, the plain rounds carry what is still
            // awaited (heartbeats): no extra digests while a crashed member is found silent.
            settling = self.peers.len() <= AGREEMENTS || !agreed;
            if agreed && now >= q + self.period() * self.cfg.idle_rounds && self.watched(now, q) {
                // The view due, if any, before the group goes quiet.
                self.show_view(now, true);
                self.detector.pause();
                self.idle = true;
                self.stats.idle_periods += 1;
                self.next_round = None;
                return;
            }
        }
        let flags = if settling { packet::FLAG_WANT_REPLY } else { 0 };
        for t in self.targets(settling) {
            self.send_digest(t, flags);
        }
        self.next_round = Some(now + self.period());
    }

    fn timers(&self) -> Deadlines {
        let mut d = Deadlines::new();
        let probe =
            (self.detector.pending.as_ref()).and_then(|p| p.indirect_at.filter(|_| !p.acked));
        d.at("round", self.next_round)
            .at("join", self.join_at)
            .at("probe", probe);
        d
    }
}

impl Shelled for Gossip {
    const KIND: EngineKind = EngineKind::Gossip;
    fn gate(&mut self) -> Gate<'_> {
        Gate::new(self.group, self.me, self.left, Some(0), &mut self.counters)
    }

    fn on_packet(&mut self, now: Time, _: NodeId, pkt: Packet<'_>, _: &[u8], _: Option<u8>) {
        let h = pkt.header;
        self.peers.heard_from(h.sender, now);
        let from = h.sender;
        match h.ptype {
            packet::DATA => {
                self.nudge(from);
                self.on_data(now, pkt.body);
            }
            packet::DATA_RUN => {
                self.nudge(from);
                self.on_run(now, pkt.body);
            }
            packet::DATA_FRAG => {
                self.nudge(from);
                self.on_frag(now, pkt.body);
            }
            packet::GOSSIP => self.on_gossip(now, from, pkt.body),
            packet::SOLICIT => self.on_solicit(from, pkt.body),
            packet::JOIN => {
                if pkt.body.is_empty() {
                    self.on_join(now, from);
                } else {
                    self.counters.malformed_dropped += 1;
                }
            }
            packet::WELCOME => self.on_welcome(now, pkt.body),
            packet::JOIN_REFUSED => self.on_join_refused(pkt.body),
            packet::MEMBERS => self.on_members(now, from, pkt.body),
            packet::LEAVE => self.on_leave(now, from, pkt.body),
            packet::PROBE | packet::PROBE_REQ | packet::PROBE_ACK => {
                self.nudge(from);
                self.on_probe(now, from, h.ptype, pkt.body);
            }
            _ => self.counters.malformed_dropped += 1,
        }
    }
}

impl Engine for Gossip {
    fn handle_datagram(&mut self, now: Time, from: NodeId, datagram: &[u8]) {
        shell::receive(self, now, from, datagram, None)
    }

    fn handle_timeout(&mut self, now: Time) {
        if self.left {
            return;
        }
        if self.join_at.is_some_and(|t| now >= t) {
            self.send(Destination::Group, packet::JOIN, |_| {});
            self.join_at = Some(now + self.cfg.join_retry);
        }
        if self.next_round.is_some_and(|t| now >= t) {
            self.gossip_round(now);
        }
        if !self.left {
            self.probe_indirectly(now);
        }
    }

    fn submit(&mut self, now: Time, payload: Bytes, qos: Qos) -> Result<u64, SendError> {
        if !self.guarantees().qos.contains(qos) {
            return Err(SendError::Unsupported);
        }
        if !self.member || self.leaving.is_some() || self.left {
            return Err(SendError::NotMember);
        }
        if payload.len() > self.cfg.max_message_bytes {
            return Err(SendError::TooLarge);
        }
        if payload.len() + wire::HEADER_LEN + packet::DATA_FIXED > self.max_datagram_bytes {
            let Ok(frags) = self.fragmenter.split(payload.clone()) else {
                return Err(SendError::TooLarge);
            };
            // Every fragment goes out at once: the datagram queue must take them all.
            if !self.can_submit() || self.out.capacity() - self.out.len() < frags.len() + 1 {
                self.counters.backpressure_refusals += 1;
                return Err(SendError::WouldBlock);
            }
            return Ok(self.submit_fragments(now, payload, frags));
        }
        // Only what is local pushes back (the application's event queue, the datagrams
        // waiting for the socket), never what other members hold: the sender does not wait
        // for the slowest member.
        if !self.can_submit() {
            self.counters.backpressure_refusals += 1;
            return Err(SendError::WouldBlock);
        }
        let held = Held {
            payload: payload.clone(),
            round: self.round,
            frag: None,
        };
        let Some(own) = self.streams.get_mut(&self.me) else {
            return Err(SendError::NotMember);
        };
        // A full buffer drops its oldest messages: members that still lack them report them
        // lost, the sender goes on.
        let (msg, evicted) = own.push_own(held);
        self.stats.evicted_own += evicted as u64;
        // Own messages are numbered in order, each delivered here at once (next moved past it).
        debug_assert!(self
            .streams
            .get(&self.me)
            .is_some_and(|s| s.next == msg + 1));
        // The first phase: one unreliable multicast (with the messages submitted with it);
        // gossip repairs what it missed.
        self.queue_own(msg, payload.clone());
        self.counters.submitted += 1;
        self.counters.delivered += 1;
        self.events.push_back(Event::Deliver(Delivery {
            respond: false,
            seq: msg,
            sender: self.me,
            msg,
            view: self.shown_view,
            payload,
        }));
        // The engine promises nothing beyond the first phase (resilience 0): the send is
        // complete once its multicast is queued.
        self.events.push_back(Event::SendComplete { msg });
        self.activity(now);
        Ok(msg)
    }

    fn leave(&mut self, now: Time) {
        if self.left || self.leaving.is_some() {
            return;
        }
        if !self.member {
            self.left = true;
            self.join_at = None;
            self.events.push_back(Event::Left);
            return;
        }
        self.flush_run();
        self.leaving = Some(self.round);
        self.table.depart(self.me);
        self.sync_peer(now, self.me);
        self.view_update(now);
        if let Some(e) = self.table.get(self.me) {
            self.send(Destination::Group, packet::LEAVE, |b| b.put_u32(e.version));
        }
        // Gossip goes on until the own messages are stable or collected, so that they spread.
        self.idle = false;
        if self.next_round.is_none() {
            self.next_round = Some(now + self.period());
        }
    }

    fn poll_transmit(&mut self, _now: Time, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.flush_run();
        shell::transmit(&mut self.out, &mut self.counters, buf)
    }

    fn poll_event(&mut self) -> Option<Event> {
        let (e, resume) = self.events.pop();
        if resume && self.member {
            // Delivery paused on a full queue; there is room again.
            self.deliver_all();
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
        GossipFactory::declared()
    }

    fn info(&self) -> GroupInfo {
        GroupInfo {
            view: self.shown_view,
            coordinator: self.members().first().copied(),
            buffered_msgs: self.streams.values().map(SenderHistory::held_count).sum(),
            buffer_capacity_msgs: self.cfg.buffer_msgs,
            ..shell::info(
                self.me,
                self.members(),
                self.guarantees(),
                self.max_datagram_bytes,
            )
        }
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn engine_counters(&self) -> Vec<(&'static str, u64)> {
        let s = &self.stats;
        vec![
            ("rounds", s.rounds),
            ("digests", s.digests),
            ("digest_replies", s.digest_replies),
            ("solicited_msgs", s.solicited_msgs),
            ("pushed", s.pushed),
            ("stale_solicitations", s.stale_solicitations),
            ("lost_msgs", s.lost_msgs),
            ("loss_events", s.loss_events),
            ("gc_by_age", s.gc_by_age),
            ("gc_by_stability", s.gc_by_stability),
            ("evicted", s.evicted),
            ("evicted_own", s.evicted_own),
            ("lagged", s.lagged),
            ("beyond_window", s.beyond_window),
            ("suspected", s.suspected),
            ("refutations", s.refutations),
            ("joins_admitted", s.joins_admitted),
            ("welcomes_sent", s.welcomes_sent),
            ("table_exchanges", s.table_exchanges),
            ("table_deltas", s.table_deltas),
            ("table_full", s.table_full),
            ("idle_periods", s.idle_periods),
            ("unknown_origin", s.unknown_origin),
            ("forged_entries", s.forged_entries),
            ("probes", s.probes),
            ("indirect_probes", s.indirect_probes),
            ("relayed_probes", s.relayed_probes),
            ("suspicions", s.suspicions),
            (
                "buffered",
                self.streams.values().map(|h| h.held_count() as u64).sum(),
            ),
            (
                "buffered_bytes",
                self.streams.values().map(|h| h.held_bytes() as u64).sum(),
            ),
        ]
    }

    fn can_submit(&self) -> bool {
        self.member
            && self.leaving.is_none()
            && !self.left
            && !self.events.is_full()
            && self.out.has_room()
            && self.streams.contains_key(&self.me)
    }

    fn describe(&self) -> String {
        let streams: Vec<String> = (self.streams.iter())
            .map(|(o, s)| {
                format!(
                    "{}:next={} known={} base={} held={} gaps={} lost={}",
                    o,
                    s.next,
                    s.known,
                    s.base(),
                    s.held_count(),
                    s.gaps.len(),
                    s.lost.len()
                )
            })
            .collect();
        format!(
            "gossip me={} member={} leaving={} left={} view={:#x} members={} round={} idle={} \
             quiet_since={:?} next_round={:?} probing={} suspects={:?} suspicions={} \
             refutations={} agreements={} streams=[{}]",
            self.me,
            self.member,
            self.leaving.is_some(),
            self.left,
            self.view_id,
            // A group of thousands is described by its size: every simulated member's
            // description is kept to the end of a run.
            if self.peers.len() < 64 {
                format!(
                    "{:?}",
                    self.members().iter().map(|m| m.0).collect::<Vec<_>>()
                )
            } else {
                format!("<{}>", self.peers.len() + 1)
            },
            self.round,
            self.idle,
            self.quiet_since.map(|t| t.0),
            self.next_round.map(|t| t.0),
            self.probing,
            self.detector
                .suspects
                .keys()
                .map(|m| m.0)
                .collect::<Vec<_>>(),
            self.stats.suspicions,
            self.stats.refutations,
            self.agreements,
            streams.join(", ")
        )
    }
}
