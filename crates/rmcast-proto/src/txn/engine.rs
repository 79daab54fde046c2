//! The transaction engine's state machine: the source side (forward channels and the response
//! contexts of their sets) and the receiver side (receive contexts and their return contexts),
//! after sections 3.2 and 3.3 of the Multidriver paper (see the module docs of [`super`]).

use super::packet::{self as pk, Key};
use super::Config;
use crate::common::shell::{self, EventQueue, Gate, OutQueue, Shelled};
use crate::common::{Deadlines, RttEstimator, SplitMix64};
use crate::engine::{
    Counters, Delivery, Destination, Engine, Event, GroupInfo, IdList, Loss, NodeId, Qos, Reply,
    SendError, Time, Transmit, View,
};
use crate::guarantees::Guarantees;
use crate::registry::EngineParams;
use crate::wire::{self, EngineKind, Header, Packet};
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// Outcomes remembered (released, aborted, not ours) to answer queries and ignore late copies.
const MAX_OUTCOMES: usize = 4096;
/// Control datagrams queued at most; more are dropped and counted (every one is repeated by a
/// timer or answered again).
const MAX_OUT: usize = 8192;
/// Id of the one view of a member (no membership: it names nobody).
const VIEW_ID: u64 = 1;
/// Outcome "this receiver is not in the transaction's set": never sent in a RESOLVE.
const OUTCOME_NOT_MINE: u8 = 0;
/// Reasons of failed transactions kept for [`Engine::take_failure`] (the runtime takes each
/// as soon as it sees the failure; the bound only matters to a driver that never asks).
const MAX_FAILURES: usize = 256;
/// Epochs whose source this member knows (the member that opened the first transaction of the
/// epoch here), at most; the oldest is forgotten first.
const MAX_EPOCHS: usize = 4096;
/// BACKOFF_TIME per receiver taken from a FIRST or CNTL at most, in microseconds (the largest
/// [`Config::backoff_unit`] a configuration may have).
const MAX_BACKOFF_UNIT_US: u32 = 1_000_000;

/// Why this source gave a transaction up.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum AbortCause {
    /// Fewer than `min` receivers answered the open.
    OpenFailed,
    /// Receivers of the set fell silent or closed, and fewer than `min` were left.
    Dropped,
    /// This member left before the commit.
    Leaving,
}

/// Where a transaction of this source stands.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// X_MRopen: FIRST sent (and repeated), response channels accepted up to `max`.
    Opening { deadline: Time },
    /// The set is fixed; data flows until every receiver of the set holds the message.
    Transfer,
    /// Deliver-to sent; waiting for every receiver of the set to confirm delivery.
    Released,
}

/// A receiver of a transaction's set as the source sees it (the paper's response context).
#[derive(Clone, Debug)]
struct ResponseContext {
    /// One plus the last byte it received in order.
    next: u32,
    /// One plus the last byte it will accept.
    limit: u32,
    /// Its BURST and RATE.
    burst: u32,
    rate: u32,
    /// It confirmed delivery.
    delivered: bool,
    /// Last heard (any report or reply).
    heard_at: Time,
    /// Next byte of its reply stream expected in order.
    reply_next: u32,
    /// The reply message being received (bounded by `max_reply_bytes`).
    reply_buf: Vec<u8>,
}

/// A transaction of this source: its forward channel and the response contexts of its set.
#[derive(Clone, Debug)]
struct Forward {
    key: Key,
    payload: Bytes,
    total: u32,
    phase: Phase,
    set: BTreeMap<NodeId, ResponseContext>,
    /// Go-back-N: the next byte to send.
    send_next: u32,
    /// Highest byte sent so far (bytes below it sent again count as retransmissions).
    sent_high: u32,
    /// Repeat FIRST at this time while opening.
    open_retry_at: Time,
    /// Retransmission timer: status request, go back, drop silent receivers.
    rto_at: Option<Time>,
    /// No go-back before this time (one per round trip, not one per report).
    goback_at: Time,
    /// A status request sent and not yet answered: when (round-trip sample).
    sreq_at: Option<Time>,
    /// Rate control: byte credits and when they were counted.
    tokens: u64,
    tokens_at: Time,
    /// Retransmission timeouts in a row without progress.
    tries: u32,
    /// The last status request sent on a timeout (its number), where the data stood when it
    /// left, and when: a report echoing it shows what was lost of the data sent before it.
    probe: u32,
    probe_mark: u32,
    probe_at: Option<Time>,
    /// FIRST packets sent.
    open_tries: u32,
    /// Receivers dropped from the set (silent, or closed), for the failure's reason.
    dropped: Vec<NodeId>,
    /// Late answers to an open decided early ([`Config::early_open`]) that made the next set
    /// wait for one more: each late receiver counts once.
    late: Vec<NodeId>,
}

impl Forward {
    /// What holds between calls (checked in debug builds), go-back-N on the forward channel:
    /// the next byte to send never passes the highest sent, which never passes the message's
    /// end, and no response context has received more than the message holds.
    fn check_invariants(&self) {
        debug_assert_eq!(self.payload.len() as u64, u64::from(self.total));
        debug_assert!(self.send_next <= self.sent_high);
        debug_assert!(self.sent_high <= self.total);
        debug_assert!(self.set.values().all(|r| r.next <= self.total));
    }
}

/// A committed transaction whose response channels stay open for replies.
#[derive(Clone, Debug)]
struct Lingering {
    key: Key,
    until: Time,
    set: BTreeMap<NodeId, ResponseContext>,
}

/// The reply stream of one return context (X_MRreply), go-back-N.
#[derive(Clone, Debug, Default)]
struct ReplyOut {
    /// Offset of `buf[0]`: everything below is acknowledged.
    base: u32,
    /// Bytes not yet acknowledged: reply messages, each after its length (4 bytes).
    buf: Vec<u8>,
    /// Next offset to send.
    sent: u32,
    /// Retransmission timer.
    rto_at: Option<Time>,
    /// Use-backoff: the next packet goes no earlier than this.
    backoff_at: Option<Time>,
    goback_at: Time,
}

impl ReplyOut {
    /// What holds between calls (checked in debug builds): the next offset to send lies
    /// between the acknowledged edge and the end of what is buffered.
    fn check_invariants(&self) {
        debug_assert!(self.base <= self.sent);
        debug_assert!(u64::from(self.sent - self.base) <= self.buf.len() as u64);
    }
}

/// A transaction of another source as this receiver sees it: the receive context and its
/// return context.
#[derive(Clone, Debug)]
struct Inbound {
    total: u32,
    /// Bytes received in order (`len() == next` until delivered, then freed).
    buf: Vec<u8>,
    next: u32,
    /// ACCEPT seen: in the set (`Some(true)`) or not.
    accepted: Option<bool>,
    set_size: u16,
    backoff_unit_us: u32,
    use_backoff: bool,
    /// A report is due at this time (after its backoff).
    status_at: Option<Time>,
    status_gap: bool,
    /// Repeat the opening report until the source accepts or refuses it.
    answer_retry_at: Option<Time>,
    /// The deliver-to point received.
    deliver_to: u32,
    delivered: bool,
    /// The application took the delivery ([`Engine::poll_event`] returned it): only then is
    /// delivery confirmed to the source, so that a committed transaction means that every
    /// receiver's application has the request, not only its engine (a starved or busy
    /// application takes it late; the source waits for it, asking, as for a lost report).
    taken: bool,
    /// Last datagram of this transaction from its source.
    heard_at: Time,
    /// Asks sent since the source went silent.
    queries: u32,
    gap_reported_at: Option<Time>,
    /// Opening reports sent without an answer.
    answer_tries: u32,
    /// The last status request number seen (echoed in reports).
    echo: u32,
    /// The set, as a release named it: shared with the other transactions this member holds
    /// or remembers that name the same set ([`Txn::shared_set`]).
    set: Arc<[NodeId]>,
    reply: ReplyOut,
}

/// What a member remembers of a transaction: its outcome, deliver-to point and (released) set.
type Outcome = (u8, u32, Arc<[NodeId]>);

/// The transaction engine (see the module docs of [`super`]).
#[derive(Clone)]
pub struct Txn {
    cfg: Config,
    group: u32,
    me: NodeId,
    epoch: u32,
    max_datagram_bytes: usize,
    rng: SplitMix64,
    rtt: RttEstimator,
    next_msg: u64,
    forwards: BTreeMap<u64, Forward>,
    lingering: VecDeque<Lingering>,
    inbound: BTreeMap<(NodeId, Key), Inbound>,
    held_bytes: usize,
    /// Outcome, deliver-to point and (released) set of transactions this member knows. A set
    /// equal to the one remembered just before is shared with it: transactions one after the
    /// other name the same set, and a copy each made a member of a group of 10,000 keep 4,096
    /// lists of 40 KB (n^2 memory across the group).
    outcomes: BTreeMap<(NodeId, Key), Outcome>,
    outcome_order: VecDeque<(NodeId, Key)>,
    /// The source of each epoch heard of, fixed by the first FIRST of the epoch that opened a
    /// receive context here (as the Tree fixes its session's origin): packets of that epoch's
    /// forward channel are taken only from it. At most [`MAX_EPOCHS`].
    sources: BTreeMap<u32, NodeId>,
    source_order: VecDeque<u32>,
    out: OutQueue,
    events: EventQueue,
    /// Why own transactions failed, for [`Engine::take_failure`] (at most [`MAX_FAILURES`]).
    failures: VecDeque<(u64, String)>,
    /// Round-robin cursor over forwards for data segments.
    cursor: u64,
    /// Announced views (with `announce_sets`).
    view_id: u64,
    /// Largest set answered lately: the set size named in FIRST.
    set_estimate: usize,
    /// Whether `set_estimate` was learnt from a decided set: until then it is a guess (at most
    /// 8), and an open decided early on a guess would leave out every receiver past it.
    estimate_learnt: bool,
    left: bool,
    /// The latest time an input brought (for what [`Engine::poll_event`] sends: it has none).
    now: Time,
    counters: Counters,
    extra: Extra,
}

/// Counters of this engine only ([`Engine::engine_counters`]).
#[derive(Clone, Debug, Default)]
struct Extra {
    opens: u64,
    opens_failed: u64,
    first_sent: u64,
    answers_sent: u64,
    accepted: u64,
    refused: u64,
    go_backs: u64,
    releases: u64,
    aborts: u64,
    receivers_dropped: u64,
    replies_sent: u64,
    replies_received: u64,
    queries_sent: u64,
    resolves_sent: u64,
    gave_up: u64,
    backoffs: u64,
    opens_not_answered: u64,
    out_dropped: u64,
    unreliable_sent: u64,
    /// Packets of a transaction's forward channel (FIRST, DATA, CNTL, ACCEPT, REPLY_ACK) from a
    /// member other than its source, and RESOLVEs from a member not entitled to resolve it:
    /// refused.
    not_from_source: u64,
    /// REPLY segments from a member not in the transaction's set: refused.
    not_in_set: u64,
    /// Unreliable messages dropped because the application's event queue was full.
    unreliable_dropped: u64,
}

impl Txn {
    /// A new engine: it listens to the group at once (the Multidriver has no membership, so
    /// creating and joining are the same) and installs its one view naming nobody.
    pub fn new(cfg: Config, p: &EngineParams<'_>) -> Txn {
        let mut rng = SplitMix64::new(p.seed);
        let epoch = rng.next_u64() as u32;
        let rtt = RttEstimator::new(cfg.rto_initial, cfg.rto_min, cfg.rto_max);
        let mut t = Txn {
            group: p.group,
            me: p.me,
            epoch,
            max_datagram_bytes: p.max_datagram_bytes,
            rng,
            rtt,
            next_msg: 0,
            forwards: BTreeMap::new(),
            lingering: VecDeque::new(),
            inbound: BTreeMap::new(),
            held_bytes: 0,
            outcomes: BTreeMap::new(),
            outcome_order: VecDeque::new(),
            sources: BTreeMap::new(),
            source_order: VecDeque::new(),
            out: OutQueue::new(MAX_OUT),
            events: EventQueue::ungated(cfg.max_events),
            failures: VecDeque::new(),
            cursor: 0,
            view_id: VIEW_ID,
            set_estimate: cfg.max_receivers.min(8),
            estimate_learnt: false,
            left: false,
            now: p.now,
            counters: Counters::default(),
            extra: Extra::default(),
            cfg,
        };
        t.counters.view_changes += 1;
        t.events.push_back(Event::View(View {
            id: VIEW_ID,
            seq: 0,
            members: Vec::new(),
            coordinator: p.me,
            joined: None,
            left: None,
        }));
        t
    }

    /// This engine's epoch (drawn at start; a restarted node's transactions never mix with its
    /// old ones).
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// The receivers in transaction `msg`'s set (still open, or lingering for replies).
    pub fn set_of(&self, msg: u64) -> Option<Vec<NodeId>> {
        if let Some(f) = self.forwards.get(&msg) {
            return Some(f.set.keys().copied().collect());
        }
        (self.lingering.iter())
            .find(|l| l.key.txn == msg)
            .map(|l| l.set.keys().copied().collect())
    }

    /// Whether transaction `msg` is still opening (X_MRopen not decided).
    pub fn is_opening(&self, msg: u64) -> bool {
        (self.forwards.get(&msg)).is_some_and(|f| matches!(f.phase, Phase::Opening { .. }))
    }

    fn segment_bytes(&self) -> usize {
        self.max_datagram_bytes
            .saturating_sub(wire::HEADER_LEN + pk::FIRST_OVERHEAD)
            .max(64)
    }

    fn header(&self, ptype: u8) -> Vec<u8> {
        let mut b = Vec::with_capacity(64);
        Header {
            engine: EngineKind::Txn,
            ptype,
            flags: 0,
            group: self.group,
            incarnation: 0,
            sender: self.me,
        }
        .encode(&mut b);
        b
    }

    fn push_out(&mut self, to: Destination, b: Vec<u8>) {
        if !self.out.push_back((to, b)) {
            self.extra.out_dropped += 1;
        }
    }

    fn record_outcome(&mut self, source: NodeId, key: Key, outcome: u8, deliver_to: u32) {
        let k = (source, key);
        let set = self.set_for(source, key);
        if self
            .outcomes
            .insert(k, (outcome, deliver_to, set))
            .is_none()
        {
            self.outcome_order.push_back(k);
            while self.outcome_order.len() > MAX_OUTCOMES {
                if let Some(old) = self.outcome_order.pop_front() {
                    self.outcomes.remove(&old);
                }
            }
        }
        // Outcomes are remembered for a bounded number of transactions (oldest forgotten).
        debug_assert!(
            self.outcomes.len() <= MAX_OUTCOMES && self.outcome_order.len() <= MAX_OUTCOMES
        );
    }

    /// The retransmission timeout after `tries` unanswered tries: the measured one (not
    /// backed off: each channel backs off on its own, so that one slow transaction does not
    /// slow the others) doubled per try, at most `rto_max`.
    fn rto_after(&self, tries: u32) -> Duration {
        (self.rtt.base_rto().saturating_mul(1 << tries.min(16))).min(self.cfg.rto_max)
    }

    /// The longest wait between two FIRSTs of an open, or two opening reports: a sixteenth
    /// of the open's timer, so that a receiver gets about sixteen chances to make it in
    /// whatever the measured round trip says (a paused member measures its pause).
    fn open_retry_max(&self) -> Duration {
        (self.cfg.open_timeout / 16).max(Duration::from_millis(1))
    }

    /// Outcomes remembered, and how many distinct copies of their sets they keep.
    #[cfg(test)]
    pub(super) fn outcome_sets(&self) -> (usize, usize) {
        let mut copies: Vec<*const NodeId> = self.outcomes.values().map(|o| o.2.as_ptr()).collect();
        copies.sort();
        copies.dedup();
        (self.outcomes.len(), copies.len())
    }

    /// Transactions received whose set is known, and how many distinct copies of sets they and
    /// the outcomes keep together.
    #[cfg(test)]
    pub(super) fn inbound_sets(&self) -> (usize, usize) {
        let known: Vec<&Arc<[NodeId]>> = self
            .inbound
            .values()
            .map(|i| &i.set)
            .filter(|s| !s.is_empty())
            .collect();
        let mut copies: Vec<*const NodeId> = (known.iter().map(|s| s.as_ptr()))
            .chain(self.outcomes.values().map(|o| o.2.as_ptr()))
            .collect();
        copies.sort();
        copies.dedup();
        (known.len(), copies.len())
    }

    /// The set of a transaction as far as this member knows it (the source's own, or the one
    /// a release named).
    fn set_for(&self, source: NodeId, key: Key) -> Arc<[NodeId]> {
        if source == self.me {
            if let Some(f) = self.forwards.get(&key.txn) {
                return self.shared_set(f.set.keys().copied().collect());
            }
        }
        (self.inbound.get(&(source, key))).map_or_else(|| Arc::from([]), |i| Arc::clone(&i.set))
    }

    /// `set`, as the copy of it that the last outcome remembered or the last transaction
    /// received already holds, if either names the same set: transactions one after the other
    /// name the same set, and a copy each made every member of a group of n hold n ids for
    /// each transaction it has open or remembers (at 10,000 members and a transaction every
    /// 10 ms, about 50 open at once at each member, so 20 GB across the group).
    fn shared_set(&self, set: Vec<NodeId>) -> Arc<[NodeId]> {
        let last_outcome = (self.outcome_order.back())
            .and_then(|p| self.outcomes.get(p))
            .map(|o| &o.2);
        let last_inbound = self
            .inbound
            .values()
            .rev()
            .map(|i| &i.set)
            .find(|s| !s.is_empty());
        match [last_outcome, last_inbound]
            .into_iter()
            .flatten()
            .find(|s| ***s == set[..])
        {
            Some(s) => Arc::clone(s),
            None => Arc::from(set),
        }
    }

    /// BACKOFF_TIME for a set of `set_size` receivers, in nanoseconds: both come from the
    /// source's packets, so the unit is taken at most [`MAX_BACKOFF_UNIT_US`] and the time at
    /// most `cap` (the open's timer: an answer later than that comes too late anyway).
    fn backoff_ns(set_size: u16, unit_us: u32, cap: Duration) -> u64 {
        let ns = u64::from(set_size.max(1)) * u64::from(unit_us.min(MAX_BACKOFF_UNIT_US)) * 1000;
        ns.min(cap.as_nanos().min(u128::from(u64::MAX)) as u64)
    }

    /// BACKOFF_TIME per receiver that this source's FIRST and CNTL packets carry, in
    /// microseconds: [`Config::backoff_unit`], scaled down so that the whole BACKOFF_TIME for
    /// the expected set takes at most half the open's timer. The paper's BACKOFF_TIME grows
    /// with the set; unscaled, past `open_timeout / unit` receivers (5,000 at the defaults) the
    /// answers drawn last reached the source after it had decided the open, and those
    /// receivers were left out of the set. The other half of the timer is for the answer's trip
    /// and one repeat of it.
    fn advertised_unit_us(&self) -> u32 {
        let unit = self.cfg.backoff_unit.as_micros().min(u128::from(u32::MAX)) as u32;
        let set = self.set_estimate.clamp(1, usize::from(u16::MAX)) as u128;
        let room = ((self.cfg.open_timeout / 2).as_micros() / set).max(1);
        unit.min(room.min(u128::from(u32::MAX)) as u32)
    }

    /// The BACKOFF_TIME that this source's packets announce for the expected set.
    fn advertised_backoff(&self) -> Duration {
        let set = self.set_estimate.clamp(1, usize::from(u16::MAX)) as u64;
        Duration::from_micros(set * u64::from(self.advertised_unit_us()))
    }

    /// Whether a packet of the forward channel of transaction `key` may come from `from`: not
    /// if its epoch is this member's own, or the epoch's source (fixed by the first FIRST of it
    /// that opened a receive context here) is another member. Refusals are counted.
    fn sent_by_source(&mut self, from: NodeId, key: Key) -> bool {
        let source = if key.epoch == self.epoch {
            Some(self.me)
        } else {
            self.sources.get(&key.epoch).copied()
        };
        if source.is_some_and(|s| s != from) {
            self.extra.not_from_source += 1;
            return false;
        }
        true
    }

    /// `from` opened a transaction of epoch `epoch` here: it is the epoch's source from now on.
    fn bind_source(&mut self, epoch: u32, from: NodeId) {
        if self.sources.insert(epoch, from).is_none() {
            self.source_order.push_back(epoch);
            while self.source_order.len() > MAX_EPOCHS {
                if let Some(old) = self.source_order.pop_front() {
                    self.sources.remove(&old);
                }
            }
        }
        debug_assert!(self.sources.len() <= MAX_EPOCHS);
    }

    // ----- the source side -----

    fn cntl(&mut self, key: Key, flags: u8, deliver_to: u32, to: Destination) {
        self.cntl_probe(key, flags, deliver_to, to, 0);
    }

    fn cntl_probe(&mut self, key: Key, flags: u8, deliver_to: u32, to: Destination, probe: u32) {
        // A deliver-to names the set: a receiver of it that missed its ACCEPT learns it here.
        let set = if flags & pk::CNTL_DELIVER_TO != 0 {
            match (
                self.forwards.get(&key.txn),
                self.outcomes.get(&(self.me, key)),
            ) {
                (Some(f), _) => f.set.keys().copied().collect(),
                (None, Some(o)) => o.2.to_vec(),
                (None, None) => Vec::new(),
            }
        } else {
            Vec::new()
        };
        let mut b = self.header(pk::CNTL);
        pk::encode_cntl(
            &mut b,
            &pk::Cntl {
                key,
                flags,
                deliver_to,
                backoff_unit_us: self.advertised_unit_us(),
                set_size: self.set_estimate.min(u16::MAX as usize) as u16,
                probe,
            },
            &set,
        );
        self.push_out(to, b);
    }

    fn send_first(&mut self, txn: u64) {
        let seg = self.segment_bytes();
        let set_size = self.set_estimate.min(u16::MAX as usize) as u16;
        let unit = self.advertised_unit_us();
        let flags = if self.cfg.use_backoff {
            pk::FIRST_USE_BACKOFF
        } else {
            0
        };
        let Some(f) = self.forwards.get_mut(&txn) else {
            return;
        };
        let n = (f.total as usize).min(seg);
        let data = f.payload.slice(..n);
        let (key, total) = (f.key, f.total);
        f.sent_high = f.sent_high.max(n as u32);
        if f.send_next < n as u32 {
            f.send_next = n as u32;
        }
        f.check_invariants();
        let mut b = self.header(pk::FIRST);
        pk::encode_first(
            &mut b,
            &pk::First {
                key,
                flags,
                set_size,
                backoff_unit_us: unit,
                total,
                data: &data,
            },
        );
        self.extra.first_sent += 1;
        self.push_out(Destination::Group, b);
    }

    fn announce(&mut self, txn: u64, left: Option<NodeId>) {
        if !self.cfg.announce_sets {
            return;
        }
        let Some(f) = self.forwards.get(&txn) else {
            return;
        };
        let mut members = vec![self.me];
        members.extend(f.set.keys().copied().filter(|&m| m != self.me));
        self.view_id += 1;
        self.counters.view_changes += 1;
        self.events.push_back(Event::View(View {
            id: self.view_id,
            seq: txn,
            members,
            coordinator: self.me,
            joined: None,
            left,
        }));
    }

    /// X_MRopen's timer ran out or `max` answered: go on with the set, or fail.
    fn decide_open(&mut self, now: Time, txn: u64) {
        let Some(f) = self.forwards.get_mut(&txn) else {
            return;
        };
        if !matches!(f.phase, Phase::Opening { .. }) {
            return;
        }
        let n = f.set.len();
        if n > 0 {
            self.set_estimate = n;
            self.estimate_learnt = true;
        }
        self.announce(txn, None);
        if n < self.cfg.min_receivers {
            self.extra.opens_failed += 1;
            self.abort(now, txn, AbortCause::OpenFailed);
            return;
        }
        let rto = self.rto_after(0);
        if let Some(f) = self.forwards.get_mut(&txn) {
            debug_assert!(
                matches!(f.phase, Phase::Opening { .. }),
                "opening, then transfer"
            );
            f.phase = Phase::Transfer;
            f.tries = 0;
            f.rto_at = Some(now + rto);
        }
        self.maybe_release(now, txn);
    }

    fn abort(&mut self, _now: Time, txn: u64, cause: AbortCause) {
        let Some(f) = self.forwards.remove(&txn) else {
            return;
        };
        self.extra.aborts += 1;
        let set: Vec<NodeId> = f.set.keys().copied().collect();
        let min = self.cfg.min_receivers;
        // The same words as the library's `TxnError`, so that both name the receivers alike.
        let reason = match cause {
            AbortCause::OpenFailed => format!(
                "only {} receiver(s) answered the open, {min} needed: {}",
                set.len(),
                IdList(&set)
            ),
            AbortCause::Dropped => format!(
                "aborted: receiver(s) {} fell silent or closed, {} left of {min} needed: {}",
                IdList(&f.dropped),
                set.len(),
                IdList(&set)
            ),
            AbortCause::Leaving => {
                format!("this member left before the commit (set {})", IdList(&set))
            }
        };
        if self.failures.len() >= MAX_FAILURES {
            self.failures.pop_front();
        }
        self.failures.push_back((txn, reason));
        self.record_outcome(self.me, f.key, pk::OUTCOME_ABORTED, 0);
        // Twice: receivers that miss both find out by asking (QUERY) or by their report.
        for _ in 0..2 {
            self.cntl(
                f.key,
                pk::CNTL_ABORT | pk::CNTL_CLOSE,
                0,
                Destination::Group,
            );
        }
        self.events.push_back(Event::Loss(Loss {
            sender: self.me,
            first_seq: txn,
            count: 1,
        }));
    }

    /// Every receiver of the set holds the whole message: deliver-to its end.
    fn maybe_release(&mut self, now: Time, txn: u64) {
        let Some(f) = self.forwards.get_mut(&txn) else {
            return;
        };
        if f.phase != Phase::Transfer || f.set.values().any(|r| r.next < f.total) {
            return self.maybe_complete(now, txn);
        }
        // Released (deliver-to the end) only once every receiver of the set holds all of it.
        debug_assert!(f.set.values().all(|r| r.next >= f.total));
        f.phase = Phase::Released;
        f.tries = 0;
        let rto = self.rto_after(0);
        let Some(f) = self.forwards.get_mut(&txn) else {
            return;
        };
        f.rto_at = Some(now + rto);
        let (key, total, payload) = (f.key, f.total, f.payload.clone());
        self.extra.releases += 1;
        self.record_outcome(self.me, key, pk::OUTCOME_RELEASED, total);
        self.cntl(
            key,
            pk::CNTL_DELIVER_TO | pk::CNTL_SREQ,
            total,
            Destination::Group,
        );
        self.counters.delivered += 1;
        self.events.push_back(Event::Deliver(Delivery {
            respond: false,
            seq: txn,
            sender: self.me,
            msg: txn,
            view: VIEW_ID,
            payload,
        }));
        self.maybe_complete(now, txn);
    }

    /// Every receiver of the set confirmed delivery: the send is complete; the response
    /// channels linger for replies.
    fn maybe_complete(&mut self, now: Time, txn: u64) {
        let Some(f) = self.forwards.get(&txn) else {
            return;
        };
        if f.phase != Phase::Released || f.set.values().any(|r| !r.delivered) {
            return;
        }
        let f = self.forwards.remove(&txn).expect("present");
        debug_assert!(
            self.lingering.iter().all(|l| l.key != f.key),
            "a transaction completes once"
        );
        self.events.push_back(Event::SendComplete { msg: txn });
        self.lingering.push_back(Lingering {
            key: f.key,
            until: now + self.cfg.reply_linger,
            set: f.set,
        });
        while self.lingering.len() > self.cfg.max_lingering {
            self.close_lingering();
        }
        debug_assert!(self.lingering.len() <= self.cfg.max_lingering);
    }

    fn close_lingering(&mut self) {
        if let Some(l) = self.lingering.pop_front() {
            // X_MRclose: both directions; deliver-to again for a receiver that missed it.
            let total = self.outcomes.get(&(self.me, l.key)).map_or(0, |o| o.1);
            self.cntl(
                l.key,
                pk::CNTL_CLOSE | pk::CNTL_DELIVER_TO,
                total,
                Destination::Group,
            );
        }
    }

    /// Drop receiver `r` from transaction `txn`'s set (silent, or closed its channel).
    fn drop_receiver(&mut self, now: Time, txn: u64, r: NodeId) {
        let Some(f) = self.forwards.get_mut(&txn) else {
            return;
        };
        if f.set.remove(&r).is_none() {
            return;
        }
        f.dropped.push(r);
        self.extra.receivers_dropped += 1;
        self.counters.failures_detected += 1;
        // Released is committed: a receiver lost now cannot undo it (it held the message).
        let transfer = f.phase == Phase::Transfer;
        self.announce(txn, Some(r));
        let n = self.forwards.get(&txn).map_or(0, |f| f.set.len());
        if transfer && n < self.cfg.min_receivers {
            self.abort(now, txn, AbortCause::Dropped);
            return;
        }
        self.maybe_release(now, txn);
    }

    fn on_status(&mut self, now: Time, from: NodeId, s: pk::Status) {
        if s.key.epoch != self.epoch {
            self.counters.foreign_dropped += 1;
            return;
        }
        let txn = s.key.txn;
        let lingering = (self.lingering.iter_mut())
            .find(|l| l.key == s.key)
            .and_then(|l| l.set.get_mut(&from));
        if let Some(r) = lingering {
            r.heard_at = now;
            if s.flags & pk::STATUS_DELIVERED == 0 {
                // It missed the deliver-to (and its retransmissions): once more.
                let total = self.outcomes.get(&(self.me, s.key)).map_or(0, |o| o.1);
                self.cntl(s.key, pk::CNTL_DELIVER_TO, total, Destination::Peer(from));
            }
            return;
        }
        let max = self.cfg.max_receivers;
        let Some(f) = self.forwards.get_mut(&txn) else {
            // Done with it, and this receiver was not in the set (every receiver of a
            // completed set confirmed delivery; an aborted one delivers nothing): it is not
            // in, whatever it holds. Never a reply it could answer again: no ping-pong.
            self.accept(from, s.key, false);
            return;
        };
        if s.flags & pk::STATUS_CLOSED != 0 {
            return self.drop_receiver(now, txn, from);
        }
        let opening = matches!(f.phase, Phase::Opening { .. });
        if !f.set.contains_key(&from) {
            if opening && f.set.len() < max {
                f.set.insert(
                    from,
                    ResponseContext {
                        next: 0,
                        limit: 0,
                        burst: u32::MAX,
                        rate: u32::MAX,
                        delivered: false,
                        heard_at: now,
                        reply_next: 0,
                        reply_buf: Vec::new(),
                    },
                );
                self.extra.accepted += 1;
                let enough =
                    self.cfg.early_open && self.estimate_learnt && f.set.len() >= self.set_estimate;
                let full = f.set.len() >= max || enough;
                self.accept(from, s.key, true);
                if full {
                    self.decide_open(now, txn);
                }
                // Fall through to take the report itself.
            } else {
                self.extra.refused += 1;
                if self.cfg.early_open && !opening && !f.late.contains(&from) && f.late.len() < max
                {
                    // Late for a set decided early: the next set waits for one more.
                    f.late.push(from);
                    self.set_estimate = (self.set_estimate + 1).min(max);
                }
                self.accept(from, s.key, false);
                return;
            }
        } else if s.flags & pk::STATUS_ACCEPTED == 0 {
            self.accept(from, s.key, true);
        }
        let Some(f) = self.forwards.get_mut(&txn) else {
            return;
        };
        let Some(r) = f.set.get_mut(&from) else {
            return;
        };
        let total = f.total;
        let progress =
            s.next.min(total) > r.next || (!r.delivered && s.flags & pk::STATUS_DELIVERED != 0);
        r.next = r.next.max(s.next.min(total));
        r.limit = s.limit.max(r.next);
        r.burst = s.burst.max(1024);
        r.rate = s.rate.max(1024);
        r.delivered |= s.flags & pk::STATUS_DELIVERED != 0;
        r.heard_at = now;
        let rnext = r.next;
        let answers_probe = f.probe > 0 && s.echo == f.probe;
        if answers_probe {
            if let Some(t) = f.probe_at.take() {
                self.rtt.on_sample(now.saturating_since(t));
            }
        } else if s.flags & pk::STATUS_GAP == 0 {
            if let Some(t) = f.sreq_at.take() {
                self.rtt.on_sample(now.saturating_since(t));
            }
        }
        // Go-back-N from the first byte this receiver lacks: on a gap it saw, or when its
        // answer to the last timeout's request shows data sent before it missing.
        let lost = if answers_probe {
            rnext < f.probe_mark.min(f.send_next)
        } else {
            s.flags & pk::STATUS_GAP != 0 && rnext < f.send_next
        };
        // Several answers to one request may each show an earlier loss: go back to the
        // earliest of them.
        if lost && (answers_probe || now >= f.goback_at) {
            f.send_next = f.send_next.min(rnext);
            f.goback_at = now + self.rtt.base_rto();
            self.extra.go_backs += 1;
        }
        // While opening the timer waits for the open's decision (see `forward_timeout`).
        if progress && !matches!(f.phase, Phase::Opening { .. }) {
            f.tries = 0;
            f.rto_at = Some(now + self.rtt.base_rto());
        }
        self.maybe_release(now, txn);
    }

    fn accept(&mut self, to: NodeId, key: Key, yes: bool) {
        let mut b = self.header(pk::ACCEPT);
        pk::encode_accept(&mut b, key, yes);
        self.push_out(Destination::Peer(to), b);
    }

    fn on_reply(&mut self, now: Time, from: NodeId, s: pk::ReplySeg<'_>) {
        if s.key.epoch != self.epoch {
            self.counters.foreign_dropped += 1;
            return;
        }
        let full = self.events.is_full();
        let max_reply = self.cfg.max_reply_bytes;
        let set = if let Some(f) = self.forwards.get_mut(&s.key.txn) {
            &mut f.set
        } else if let Some(l) = self.lingering.iter_mut().find(|l| l.key == s.key) {
            &mut l.set
        } else {
            // Closed: no channel any more; the replier gives up on its idle timeout.
            return;
        };
        let Some(r) = set.get_mut(&from) else {
            self.extra.not_in_set += 1;
            return;
        };
        r.heard_at = now;
        let mut done = Vec::new();
        if s.offset == r.reply_next && !full {
            r.reply_buf.extend_from_slice(s.data);
            r.reply_next += s.data.len() as u32;
            // The reply stream is length-prefixed messages: boundaries (and empty replies)
            // survive any segmentation.
            while r.reply_buf.len() >= 4 {
                let len =
                    u32::from_be_bytes(r.reply_buf[..4].try_into().expect("4 bytes")) as usize;
                if len > max_reply {
                    // Not a stream this engine writes: stop taking it.
                    self.counters.malformed_dropped += 1;
                    r.reply_buf.clear();
                    r.reply_next = u32::MAX;
                    break;
                }
                if r.reply_buf.len() < 4 + len {
                    break;
                }
                done.push(Bytes::copy_from_slice(&r.reply_buf[4..4 + len]));
                r.reply_buf.drain(..4 + len);
            }
        } else if s.offset < r.reply_next {
            self.counters.duplicates += 1;
        }
        let next = r.reply_next;
        for payload in done {
            self.extra.replies_received += 1;
            self.events.push_back(Event::Reply(Reply {
                from,
                request: s.key.txn,
                payload,
            }));
        }
        let mut b = self.header(pk::REPLY_ACK);
        pk::encode_reply_ack(&mut b, s.key, next);
        self.counters.acks_sent += 1;
        self.push_out(Destination::Peer(from), b);
    }

    fn forward_timeout(&mut self, now: Time, txn: u64) {
        let Some(f) = self.forwards.get_mut(&txn) else {
            return;
        };
        if let Phase::Opening { deadline } = f.phase {
            if now >= deadline {
                self.decide_open(now, txn);
                return self.forward_timeout(now, txn);
            }
            if now >= f.open_retry_at {
                f.open_tries += 1;
                // Backed off at most twofold: a receiver that lost the FIRST and its first
                // repeats must still make it within the open's timer.
                let tries = f.open_tries.min(1);
                // Not more often than a quarter of the backoff the receivers were told: they
                // answer over all of it, so a repeat sooner reaches a group still drawing its
                // answers, and costs every member a datagram (at thousands of receivers the
                // repeats were most of the run's datagrams).
                let retry = (self.rto_after(tries).min(self.open_retry_max()))
                    .max(self.advertised_backoff() / 4);
                if let Some(f) = self.forwards.get_mut(&txn) {
                    f.open_retry_at = now + retry;
                }
                self.send_first(txn);
            }
            // No status requests while opening: the FIRST's repeats ask for the answers, and
            // the retransmission timer starts once the open is decided. A request multicast
            // every round trip of an open was answered by every receiver already in the set;
            // at 10,000 receivers, 16 of them a transaction, each with 10,000 answers, while
            // the open's own answers were still coming in. (Data sent meanwhile arms the
            // timer; disarmed here, it is armed again at the decision.)
            if let Some(f) = self.forwards.get_mut(&txn) {
                f.rto_at = None;
            }
            return;
        }
        let Some(f) = self.forwards.get_mut(&txn) else {
            return;
        };
        if f.rto_at.is_none_or(|t| now < t) {
            return;
        }
        let total = f.total;
        let waiting: Vec<NodeId> = match f.phase {
            Phase::Released => f
                .set
                .iter()
                .filter(|(_, r)| !r.delivered)
                .map(|(&id, _)| id)
                .collect(),
            _ => f
                .set
                .iter()
                .filter(|(_, r)| r.next < total)
                .map(|(&id, _)| id)
                .collect(),
        };
        let opening = matches!(f.phase, Phase::Opening { .. });
        if waiting.is_empty() && !opening {
            f.rto_at = None;
            return;
        }
        // Receivers silent while asked are dropped (they are named by the announced view).
        if let Some(limit) = self.cfg.receiver_timeout {
            let silent: Vec<NodeId> = waiting
                .iter()
                .copied()
                .filter(|id| {
                    f.set
                        .get(id)
                        .is_some_and(|r| now.saturating_since(r.heard_at) >= limit)
                })
                .collect();
            for r in silent {
                self.drop_receiver(now, txn, r);
            }
        }
        let Some(f) = self.forwards.get_mut(&txn) else {
            return;
        };
        let key = f.key;
        let released = f.phase == Phase::Released;
        // No rewind on the timer itself: the data may still be queued below us (a slow
        // medium). The status request goes behind it; the reports that echo it say what was
        // lost, and go-back-N starts there (XTP's CNTL exchange).
        f.probe += 1;
        f.probe_mark = f.send_next;
        f.probe_at = Some(now);
        let probe = f.probe;
        f.sreq_at = None;
        f.tries += 1;
        // Backed off at most eightfold, and at least eight requests within the receivers'
        // silence timeout: a live receiver is never dropped for lost requests alone.
        let tries = f.tries.min(3);
        let cap = self
            .cfg
            .receiver_timeout
            .map_or(self.cfg.rto_max, |t| t / 8);
        let rto = self.rto_after(tries).min(cap);
        let Some(f) = self.forwards.get_mut(&txn) else {
            return;
        };
        f.rto_at = Some(now + rto);
        let flags = if released {
            pk::CNTL_SREQ | pk::CNTL_DELIVER_TO
        } else {
            pk::CNTL_SREQ | pk::CNTL_RREQ
        };
        let deliver_to = if released { total } else { 0 };
        self.cntl_probe(key, flags, deliver_to, Destination::Group, probe);
    }

    /// The next data segment of some forward channel, if window and rate allow.
    fn next_segment(&mut self, now: Time) -> Option<Vec<u8>> {
        let seg = self.segment_bytes();
        let initial = self.cfg.initial_window_bytes;
        let own_rate = self.cfg.rate_bytes_per_sec;
        let own_burst = self.cfg.burst_bytes;
        let keys: Vec<u64> = self
            .forwards
            .range(self.cursor..)
            .chain(self.forwards.range(..self.cursor))
            .map(|(&k, _)| k)
            .collect();
        for txn in keys {
            let f = self.forwards.get_mut(&txn).expect("listed");
            if f.send_next >= f.total || f.phase == Phase::Released {
                continue;
            }
            // Window and rate: the minimum over the receivers that reported.
            let window = f.set.values().map(|r| r.limit).min().unwrap_or(initial);
            let window = if f.set.is_empty() { initial } else { window };
            if f.send_next >= window {
                continue;
            }
            let rate = f.set.values().map(|r| r.rate).min().unwrap_or(own_rate);
            let burst = f.set.values().map(|r| r.burst).min().unwrap_or(own_burst);
            let elapsed = now.saturating_since(f.tokens_at).as_nanos();
            let add = (elapsed * u128::from(rate) / 1_000_000_000).min(u128::from(u64::MAX));
            f.tokens = (f.tokens.saturating_add(add as u64)).min(u64::from(burst));
            if add > 0 {
                f.tokens_at = now;
            }
            let len = (seg as u32)
                .min(f.total - f.send_next)
                .min(window - f.send_next);
            if f.tokens < u64::from(len.min(burst)) {
                continue;
            }
            f.tokens = f.tokens.saturating_sub(u64::from(len));
            let offset = f.send_next;
            f.send_next += len;
            if offset < f.sent_high {
                self.counters.retransmissions += 1;
            }
            f.sent_high = f.sent_high.max(f.send_next);
            f.check_invariants();
            // The flow/error control request rides on the last segment of a burst.
            let last = f.send_next >= f.total.min(window);
            let flags = if last { pk::DATA_SREQ } else { 0 };
            if last && f.sreq_at.is_none() {
                f.sreq_at = Some(now);
            }
            if f.rto_at.is_none() {
                f.rto_at = Some(now + self.rtt.base_rto());
            }
            let data = f.payload.slice(offset as usize..(offset + len) as usize);
            let key = f.key;
            self.cursor = txn + 1;
            let mut b = self.header(pk::DATA);
            pk::encode_data(
                &mut b,
                &pk::Data {
                    key,
                    flags,
                    offset,
                    data: &data,
                },
            );
            return Some(b);
        }
        None
    }

    /// When a forward channel blocked on its rate has credit again.
    fn pace_deadline(&self, f: &Forward) -> Option<Time> {
        if f.send_next >= f.total || f.phase == Phase::Released {
            return None;
        }
        let window = if f.set.is_empty() {
            self.cfg.initial_window_bytes
        } else {
            f.set.values().map(|r| r.limit).min().unwrap_or(0)
        };
        if f.send_next >= window {
            return None;
        }
        let rate = f
            .set
            .values()
            .map(|r| r.rate)
            .min()
            .unwrap_or(self.cfg.rate_bytes_per_sec);
        let burst = f
            .set
            .values()
            .map(|r| r.burst)
            .min()
            .unwrap_or(self.cfg.burst_bytes);
        let need = (self.segment_bytes() as u64).min(u64::from(burst));
        if f.tokens >= need {
            return None;
        }
        let ns = (need - f.tokens) as u128 * 1_000_000_000 / u128::from(rate.max(1));
        Some(f.tokens_at + Duration::from_nanos(ns.min(u128::from(u64::MAX)) as u64 + 1))
    }

    // ----- the receiver side -----

    fn rx_limit(&self, i: &Inbound) -> u32 {
        if i.delivered {
            return i.total;
        }
        let budget = self.cfg.rx_budget_bytes.saturating_sub(self.held_bytes);
        let room = (self.cfg.rx_window_bytes as usize).min(budget) as u64;
        (u64::from(i.next) + room).min(u64::from(i.total)) as u32
    }

    /// Ask for a report from `k`'s return context, after a backoff if the first one or with
    /// the use-backoff flag.
    fn want_status(&mut self, now: Time, k: (NodeId, Key), gap: bool) {
        let Some(i) = self.inbound.get(&k) else {
            return;
        };
        let first = i.accepted.is_none();
        let backoff = if first || i.use_backoff {
            Self::backoff_ns(i.set_size, i.backoff_unit_us, self.cfg.open_timeout)
        } else {
            0
        };
        let delay = if backoff > 0 {
            self.extra.backoffs += 1;
            self.rng.up_to(backoff)
        } else {
            0
        };
        let i = self.inbound.get_mut(&k).expect("present");
        i.status_gap |= gap;
        let at = now + Duration::from_nanos(delay);
        i.status_at = Some(i.status_at.map_or(at, |t| t.min(at)));
    }

    fn send_status(&mut self, k: (NodeId, Key), closed: bool) {
        let Some(i) = self.inbound.get(&k) else {
            return;
        };
        let mut flags = 0;
        if i.status_gap {
            flags |= pk::STATUS_GAP;
        }
        if i.delivered && i.taken {
            flags |= pk::STATUS_DELIVERED;
        }
        if i.accepted == Some(true) {
            flags |= pk::STATUS_ACCEPTED;
        }
        if closed {
            flags |= pk::STATUS_CLOSED;
        }
        let st = pk::Status {
            key: k.1,
            flags,
            next: i.next,
            limit: self.rx_limit(i),
            burst: self.cfg.burst_bytes,
            rate: self.cfg.rate_bytes_per_sec,
            echo: i.echo,
        };
        let i = self.inbound.get_mut(&k).expect("present");
        i.status_at = None;
        i.status_gap = false;
        let mut b = self.header(pk::STATUS);
        pk::encode_status(&mut b, &st);
        self.counters.acks_sent += 1;
        self.extra.answers_sent += 1;
        self.push_out(Destination::Peer(k.0), b);
    }

    /// Send the reports and reply segments of `k` that are due.
    fn flush_inbound(&mut self, now: Time, k: (NodeId, Key)) {
        let Some(i) = self.inbound.get(&k) else {
            return;
        };
        if i.status_at.is_some_and(|t| t <= now) {
            self.send_status(k, false);
            let tries = self.inbound.get(&k).map_or(0, |i| i.answer_tries.min(1));
            let retry = self.rto_after(tries).min(self.open_retry_max());
            if let Some(i) = self.inbound.get_mut(&k) {
                if i.accepted.is_none() {
                    i.answer_tries += 1;
                    i.answer_retry_at = Some(now + retry);
                }
            }
        }
        self.pump_reply(now, k);
    }

    fn on_first(&mut self, now: Time, source: NodeId, f: pk::First<'_>) {
        let k = (source, f.key);
        if !self.cfg.receive {
            self.extra.opens_not_answered += 1;
            return;
        }
        if self.outcomes.contains_key(&k) {
            self.counters.duplicates += 1;
            return;
        }
        if !self.inbound.contains_key(&k) {
            if self.inbound.len() >= self.cfg.max_inbound {
                // Make room by closing the longest-idle context that is done: delivered, its
                // replies all acknowledged (its source only waits for more replies).
                let done = (self.inbound.iter())
                    .filter(|(_, i)| i.delivered && i.taken && i.reply.buf.is_empty())
                    .min_by_key(|(_, i)| i.heard_at)
                    .map(|(&k, _)| k);
                if let Some(old) = done {
                    self.inbound.remove(&old);
                }
            }
            if self.inbound.len() >= self.cfg.max_inbound
                || f.total as usize > self.cfg.max_message_bytes
            {
                self.extra.opens_not_answered += 1;
                return;
            }
            self.extra.opens += 1;
            self.bind_source(f.key.epoch, source);
            self.inbound.insert(
                k,
                Inbound {
                    total: f.total,
                    buf: Vec::new(),
                    next: 0,
                    accepted: None,
                    set_size: f.set_size,
                    backoff_unit_us: f.backoff_unit_us,
                    use_backoff: f.flags & pk::FIRST_USE_BACKOFF != 0,
                    status_at: None,
                    status_gap: false,
                    answer_retry_at: None,
                    deliver_to: 0,
                    delivered: false,
                    taken: false,
                    heard_at: now,
                    queries: 0,
                    gap_reported_at: None,
                    answer_tries: 0,
                    echo: 0,
                    set: Arc::from([]),
                    reply: ReplyOut::default(),
                },
            );
        } else {
            self.counters.duplicates += 1;
        }
        let i = self.inbound.get_mut(&k).expect("present");
        i.heard_at = now;
        i.queries = 0;
        let answer = i.accepted.is_none() && i.status_at.is_none();
        self.take_data(now, k, 0, f.data, false);
        if answer {
            self.want_status(now, k, false);
        }
        self.flush_inbound(now, k);
    }

    /// Bytes `offset..` of `k`'s message arrived: keep them if they continue the in-order
    /// prefix (go-back-N receivers keep nothing out of order).
    fn take_data(&mut self, now: Time, k: (NodeId, Key), offset: u32, data: &[u8], sreq: bool) {
        let limit = match self.inbound.get(&k) {
            Some(i) => self.rx_limit(i),
            None => return,
        };
        let i = self.inbound.get_mut(&k).expect("present");
        let end = offset as u64 + data.len() as u64;
        let mut gap = false;
        let mut took = 0usize;
        if i.delivered || end <= u64::from(i.next) {
            if !data.is_empty() {
                self.counters.duplicates += 1;
            }
        } else if offset > i.next {
            gap = true;
        } else {
            let skip = (i.next - offset) as usize;
            let room = (limit.saturating_sub(i.next)) as usize;
            let take = (data.len() - skip).min(room);
            i.buf.extend_from_slice(&data[skip..skip + take]);
            i.next += take as u32;
            took = take;
            // Bytes are kept in order until delivered, and never beyond the message's end.
            debug_assert_eq!(i.buf.len(), i.next as usize);
            debug_assert!(i.next <= i.total);
        }
        self.held_bytes += took;
        let complete = i.next >= i.total && took > 0;
        let report_gap = gap
            && i.gap_reported_at
                .is_none_or(|t| now >= t + self.cfg.rto_min);
        if report_gap {
            i.gap_reported_at = Some(now);
        }
        if sreq || complete || report_gap {
            self.want_status(now, k, report_gap);
        }
        self.try_deliver(k);
    }

    /// A release named the set (`set`, 4 bytes per id): keep it (to answer queries), and if
    /// this receiver is in it, it is accepted even if its ACCEPT was lost.
    fn learn_set(&mut self, k: (NodeId, Key), set: &[u8]) {
        let me = self.me;
        let Some(i) = self.inbound.get_mut(&k) else {
            return;
        };
        if set.is_empty() || !i.set.is_empty() {
            return;
        }
        let limit = self.cfg.max_receivers.min(set.len() / 4);
        let ids: Vec<NodeId> = (set.chunks_exact(4))
            .take(limit)
            .map(|c| NodeId(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
            .collect();
        let shared = self.shared_set(ids);
        let Some(i) = self.inbound.get_mut(&k) else {
            return;
        };
        i.set = shared;
        if pk::set_contains(set, me) && i.accepted.is_none() {
            i.accepted = Some(true);
            i.answer_retry_at = None;
        }
    }

    fn try_deliver(&mut self, k: (NodeId, Key)) {
        let Some(i) = self.inbound.get_mut(&k) else {
            return;
        };
        // Only a receiver of the set delivers: `max` bounds who commits.
        if i.delivered || i.next < i.total || i.deliver_to < i.total || i.accepted != Some(true) {
            return;
        }
        i.delivered = true;
        let payload = Bytes::from(std::mem::take(&mut i.buf));
        self.held_bytes = self.held_bytes.saturating_sub(payload.len());
        let total = i.total;
        // Delivered whole: every byte of the message, in order, none past its end.
        debug_assert_eq!(payload.len() as u64, u64::from(total));
        self.record_outcome(k.0, k.1, pk::OUTCOME_RELEASED, total);
        self.counters.delivered += 1;
        self.events.push_back(Event::Deliver(Delivery {
            respond: false,
            seq: k.1.txn,
            sender: k.0,
            msg: k.1.txn,
            view: VIEW_ID,
            payload,
        }));
        // Confirmed once the application takes it (`handed_over`); until then the reports
        // say "held, not delivered", and the source keeps asking.
    }

    /// The application took the delivery of `sender`'s transaction `msg`: confirm it to the
    /// source at once (the source completes the send on it).
    fn handed_over(&mut self, sender: NodeId, msg: u64) {
        let lo = (sender, Key { epoch: 0, txn: msg });
        let hi = (
            sender,
            Key {
                epoch: u32::MAX,
                txn: msg,
            },
        );
        let Some(k) = (self.inbound.range(lo..=hi))
            .find(|(k, i)| k.1.txn == msg && i.delivered && !i.taken)
            .map(|(&k, _)| k)
        else {
            return;
        };
        if let Some(i) = self.inbound.get_mut(&k) {
            i.taken = true;
        }
        let now = self.now;
        self.want_status(now, k, false);
        self.flush_inbound(now, k);
    }

    fn discard(&mut self, k: (NodeId, Key), outcome: u8) {
        if let Some(i) = self.inbound.remove(&k) {
            self.held_bytes = self.held_bytes.saturating_sub(i.buf.len());
        }
        self.record_outcome(k.0, k.1, outcome, 0);
    }

    fn on_cntl(&mut self, now: Time, source: NodeId, c: pk::Cntl, set: &[u8]) {
        let k = (source, c.key);
        let Some(i) = self.inbound.get_mut(&k) else {
            return;
        };
        i.heard_at = now;
        i.queries = 0;
        if c.flags & pk::CNTL_SREQ != 0 {
            i.echo = i.echo.max(c.probe);
        }
        if c.flags & pk::CNTL_USE_BACKOFF != 0 {
            i.use_backoff = true;
            i.backoff_unit_us = c.backoff_unit_us;
            i.set_size = c.set_size;
        }
        if c.flags & pk::CNTL_ABORT != 0 {
            return self.discard(k, pk::OUTCOME_ABORTED);
        }
        if c.flags & pk::CNTL_DELIVER_TO != 0 {
            i.deliver_to = i.deliver_to.max(c.deliver_to);
            self.learn_set(k, set);
            self.try_deliver(k);
        }
        if c.flags & pk::CNTL_CLOSE != 0 {
            // X_MRclose closes both directions; what was not delivered never will be here.
            let delivered = self.inbound.get(&k).is_some_and(|i| i.delivered);
            if delivered {
                self.inbound.remove(&k);
            } else {
                self.discard(k, OUTCOME_NOT_MINE);
            }
            return;
        }
        if c.flags & (pk::CNTL_SREQ | pk::CNTL_RREQ | pk::CNTL_DELIVER_TO) != 0 {
            self.want_status(now, k, false);
        }
        self.flush_inbound(now, k);
    }

    fn on_accept(&mut self, now: Time, source: NodeId, key: Key, yes: bool) {
        let k = (source, key);
        let Some(i) = self.inbound.get_mut(&k) else {
            return;
        };
        i.heard_at = now;
        if !yes {
            return self.discard(k, OUTCOME_NOT_MINE);
        }
        i.accepted = Some(true);
        i.answer_retry_at = None;
        self.try_deliver(k);
    }

    /// A RESOLVE from `from` of `source`'s transaction `key`. The source's own is taken as it
    /// is. Another member's is an answer to a QUERY, taken only if it says "released" (only the
    /// source aborts: a receiver that missed an abort gives up after its asks, which delivers
    /// nothing just the same), only from a member of the set (the set the source named here,
    /// or, if this receiver missed every packet naming it, the set the answer names), and only
    /// once this receiver asked (its source has been silent): a member outside the set cannot
    /// resolve, and a member of it cannot release a transaction whose source is still heard.
    fn on_resolve(
        &mut self,
        from: NodeId,
        source: NodeId,
        key: Key,
        outcome: u8,
        deliver_to: u32,
        set: &[u8],
    ) {
        let k = (source, key);
        let Some(i) = self.inbound.get_mut(&k) else {
            return;
        };
        if from != source {
            let in_set = if i.set.is_empty() {
                pk::set_contains(set, from)
            } else {
                i.set.contains(&from)
            };
            if outcome != pk::OUTCOME_RELEASED || !in_set {
                self.extra.not_from_source += 1;
                return;
            }
            if i.queries == 0 || i.delivered {
                // An answer to another receiver's question.
                return;
            }
        }
        let Some(i) = self.inbound.get_mut(&k) else {
            return;
        };
        if outcome == pk::OUTCOME_ABORTED {
            return self.discard(k, pk::OUTCOME_ABORTED);
        }
        // (No reset of the asks: an answer that does not let this receiver deliver must not
        // make it ask again at once.)
        i.deliver_to = i.deliver_to.max(deliver_to);
        self.learn_set(k, set);
        self.try_deliver(k);
    }

    /// A receiver asks what became of `source`'s transaction `key`. Answered (to the group) by
    /// the source, and by a receiver that delivered it if it was released; a release only to
    /// an asker of its set (nobody else may deliver it), so that a QUERY from outside the set
    /// makes nobody multicast.
    fn on_query(&mut self, asker: NodeId, source: NodeId, key: Key) {
        let Some((o, d, set)) = self.outcomes.get(&(source, key)) else {
            return;
        };
        let answer = match *o {
            pk::OUTCOME_RELEASED => set.contains(&asker),
            pk::OUTCOME_ABORTED => source == self.me,
            _ => false,
        };
        if !answer {
            return;
        }
        let (o, d, set) = (*o, *d, Arc::clone(set));
        let mut b = self.header(pk::RESOLVE);
        pk::encode_resolve(&mut b, source, key, o, d, &set);
        self.extra.resolves_sent += 1;
        self.push_out(Destination::Group, b);
    }

    fn pump_reply(&mut self, now: Time, k: (NodeId, Key)) {
        let seg = self.segment_bytes();
        let window = self.cfg.reply_window_bytes;
        let rto = self.rto_after(1);
        let Some(i) = self.inbound.get(&k) else {
            return;
        };
        let (use_backoff, backoff) = (
            i.use_backoff,
            Self::backoff_ns(i.set_size, i.backoff_unit_us, self.cfg.open_timeout),
        );
        loop {
            let Some(i) = self.inbound.get_mut(&k) else {
                return;
            };
            let r = &mut i.reply;
            let end = r.base + r.buf.len() as u32;
            if r.sent >= end || r.sent >= r.base.saturating_add(window) {
                return;
            }
            if r.backoff_at.is_some_and(|t| now < t) {
                return;
            }
            let len = (seg as u32).min(end - r.sent);
            let from = (r.sent - r.base) as usize;
            let data = r.buf[from..from + len as usize].to_vec();
            let flags = 0;
            let offset = r.sent;
            r.sent += len;
            r.check_invariants();
            if r.rto_at.is_none() {
                r.rto_at = Some(now + rto);
            }
            let mut b = self.header(pk::REPLY);
            pk::encode_reply(
                &mut b,
                &pk::ReplySeg {
                    key: k.1,
                    flags,
                    offset,
                    data: &data,
                },
            );
            self.push_out(Destination::Peer(k.0), b);
            if use_backoff && backoff > 0 {
                // Implosion control: the next packet of this channel after a random backoff.
                let d = self.rng.up_to(backoff);
                self.extra.backoffs += 1;
                if let Some(i) = self.inbound.get_mut(&k) {
                    i.reply.backoff_at = Some(now + Duration::from_nanos(d.max(1)));
                }
            }
        }
    }

    fn on_reply_ack(&mut self, now: Time, source: NodeId, key: Key, next: u32) {
        let rto = self.rto_after(1);
        let k = (source, key);
        let Some(i) = self.inbound.get_mut(&k) else {
            return;
        };
        i.heard_at = now;
        let r = &mut i.reply;
        let end = r.base + r.buf.len() as u32;
        if next > r.base && next <= end {
            r.buf.drain(..(next - r.base) as usize);
            r.base = next;
            r.sent = r.sent.max(next);
            r.rto_at = (r.sent > r.base).then_some(now + rto);
        } else if next == r.base && r.sent > next && now >= r.goback_at {
            r.sent = next;
            r.goback_at = now + rto;
        }
        r.check_invariants();
        self.pump_reply(now, k);
    }

    fn inbound_timeout(&mut self, now: Time, k: (NodeId, Key)) {
        let rto = self.rto_after(1);
        let query_after = self.cfg.query_after;
        let idle =
            self.cfg.reply_linger + self.cfg.open_timeout + query_after * self.cfg.query_limit;
        let Some(i) = self.inbound.get_mut(&k) else {
            return;
        };
        if i.answer_retry_at.is_some_and(|t| now >= t) && i.accepted.is_none() {
            i.answer_retry_at = Some(now + rto);
            i.status_at.get_or_insert(now);
        }
        if i.reply.rto_at.is_some_and(|t| now >= t) {
            // Go-back-N on the reply stream.
            i.reply.sent = i.reply.base;
            i.reply.rto_at = None;
            i.reply.backoff_at = None;
            self.counters.retransmissions += 1;
        }
        let silent = now.saturating_since(i.heard_at);
        if i.delivered {
            if silent >= idle {
                self.inbound.remove(&k);
                return;
            }
        } else if silent >= query_after * (i.queries + 1) {
            if i.queries >= self.cfg.query_limit {
                // Nobody who knows the outcome answered: give up on it.
                self.extra.gave_up += 1;
                return self.discard(k, OUTCOME_NOT_MINE);
            }
            i.queries += 1;
            if i.next >= i.total && i.accepted != Some(false) {
                // Complete and not released, source silent: ask the group what became of it
                // (the answer names the set, should this receiver's ACCEPT have been lost).
                let mut b = self.header(pk::QUERY);
                pk::encode_query(&mut b, k.0, k.1);
                self.extra.queries_sent += 1;
                self.push_out(Destination::Group, b);
            }
        }
        self.flush_inbound(now, k);
    }

    fn inbound_deadline(&self, i: &Inbound) -> Option<Time> {
        let mut d = Deadlines::new();
        d.at("status", i.status_at)
            .at("answer", i.answer_retry_at.filter(|_| i.accepted.is_none()))
            .at("reply_rto", i.reply.rto_at)
            .at(
                "reply_backoff",
                i.reply
                    .backoff_at
                    .filter(|_| i.reply.sent < i.reply.base + i.reply.buf.len() as u32),
            );
        let idle = if i.delivered {
            self.cfg.reply_linger
                + self.cfg.open_timeout
                + self.cfg.query_after * self.cfg.query_limit
        } else {
            self.cfg.query_after * (i.queries + 1)
        };
        d.at("silence", Some(i.heard_at + idle));
        d.earliest()
    }

    fn unreliable(&mut self, payload: Bytes) -> Result<u64, SendError> {
        if payload.len() + wire::HEADER_LEN + 12 > self.max_datagram_bytes {
            return Err(SendError::TooLarge);
        }
        let msg = self.next_msg;
        self.next_msg += 1;
        let key = Key {
            epoch: self.epoch,
            txn: msg,
        };
        let mut b = self.header(pk::UDATA);
        pk::encode_udata(&mut b, key, &payload);
        self.push_out(Destination::Group, b);
        self.extra.unreliable_sent += 1;
        self.counters.submitted += 1;
        self.counters.delivered += 1;
        self.events.push_back(Event::Deliver(Delivery {
            respond: false,
            seq: msg,
            sender: self.me,
            msg,
            view: VIEW_ID,
            payload,
        }));
        self.events.push_back(Event::SendComplete { msg });
        Ok(msg)
    }

    fn dispatch(&mut self, now: Time, h: &Header, body: &[u8]) -> Result<(), wire::WireError> {
        self.now = self.now.max(now);
        let from = h.sender;
        match h.ptype {
            pk::FIRST => {
                let f = pk::decode_first(body)?;
                if self.sent_by_source(from, f.key) {
                    self.on_first(now, from, f);
                }
            }
            pk::DATA => {
                let d = pk::decode_data(body)?;
                if !self.sent_by_source(from, d.key) {
                    return Ok(());
                }
                let k = (from, d.key);
                if let Some(i) = self.inbound.get_mut(&k) {
                    i.heard_at = now;
                    i.queries = 0;
                    self.take_data(now, k, d.offset, d.data, d.flags & pk::DATA_SREQ != 0);
                    self.flush_inbound(now, k);
                }
            }
            pk::CNTL => {
                let (c, set) = pk::decode_cntl(body)?;
                if self.sent_by_source(from, c.key) {
                    self.on_cntl(now, from, c, set);
                }
            }
            pk::STATUS => {
                let s = pk::decode_status(body)?;
                self.on_status(now, from, s);
            }
            pk::ACCEPT => {
                let (key, yes) = pk::decode_accept(body)?;
                if self.sent_by_source(from, key) {
                    self.on_accept(now, from, key, yes);
                }
            }
            pk::REPLY => {
                let s = pk::decode_reply(body)?;
                self.on_reply(now, from, s);
            }
            pk::REPLY_ACK => {
                let (key, next) = pk::decode_reply_ack(body)?;
                if self.sent_by_source(from, key) {
                    self.on_reply_ack(now, from, key, next);
                }
            }
            pk::UDATA => {
                let (key, data) = pk::decode_udata(body)?;
                let k = (from, key);
                if !self.sent_by_source(from, key) {
                    return Ok(());
                }
                if self.outcomes.contains_key(&k) {
                    self.counters.duplicates += 1;
                } else if self.events.is_full() {
                    // Unreliable: no repair, so dropped (and counted) rather than queued past
                    // what the application is allowed to hold.
                    self.extra.unreliable_dropped += 1;
                } else {
                    self.record_outcome(from, key, OUTCOME_NOT_MINE, 0);
                    self.counters.delivered += 1;
                    self.events.push_back(Event::Deliver(Delivery {
                        respond: false,
                        seq: key.txn,
                        sender: from,
                        msg: key.txn,
                        view: VIEW_ID,
                        payload: Bytes::copy_from_slice(data),
                    }));
                }
            }
            pk::QUERY => {
                let (source, key) = pk::decode_query(body)?;
                self.on_query(from, source, key);
            }
            pk::RESOLVE => {
                let (source, key, o, d, set) = pk::decode_resolve(body)?;
                if self.sent_by_source(source, key) {
                    self.on_resolve(from, source, key, o, d, set);
                }
            }
            t => return Err(wire::WireError::BadType(t)),
        }
        Ok(())
    }
}

impl Shelled for Txn {
    const KIND: EngineKind = EngineKind::Txn;
    fn gate(&mut self) -> Gate<'_> {
        Gate::new(self.group, self.me, self.left, Some(0), &mut self.counters)
    }

    fn on_packet(&mut self, now: Time, _: NodeId, p: Packet<'_>, _: &[u8], _: Option<u8>) {
        if self.dispatch(now, &p.header, p.body).is_err() {
            self.counters.malformed_dropped += 1;
        }
    }
}

impl Engine for Txn {
    fn handle_datagram(&mut self, now: Time, from: NodeId, datagram: &[u8]) {
        shell::receive(self, now, from, datagram, None)
    }

    fn handle_timeout(&mut self, now: Time) {
        if self.left {
            return;
        }
        self.now = self.now.max(now);
        let txns: Vec<u64> = self.forwards.keys().copied().collect();
        for txn in txns {
            self.forward_timeout(now, txn);
        }
        while self.lingering.front().is_some_and(|l| l.until <= now) {
            self.close_lingering();
        }
        let keys: Vec<(NodeId, Key)> = self
            .inbound
            .iter()
            .filter(|(_, i)| self.inbound_deadline(i).is_some_and(|t| t <= now))
            .map(|(&k, _)| k)
            .collect();
        for k in keys {
            self.inbound_timeout(now, k);
        }
    }

    fn submit(&mut self, now: Time, payload: Bytes, qos: Qos) -> Result<u64, SendError> {
        if !self.guarantees().qos.contains(qos) {
            return Err(SendError::Unsupported);
        }
        if self.left {
            return Err(SendError::NotMember);
        }
        if qos == Qos::Unreliable {
            return self.unreliable(payload);
        }
        if payload.len() > self.cfg.max_message_bytes {
            return Err(SendError::TooLarge);
        }
        self.now = self.now.max(now);
        if !self.can_submit() {
            self.counters.backpressure_refusals += 1;
            return Err(SendError::WouldBlock);
        }
        let msg = self.next_msg;
        self.next_msg += 1;
        self.counters.submitted += 1;
        let total = payload.len() as u32;
        let burst = u64::from(self.cfg.burst_bytes);
        // The first repeat of the FIRST no later than the others (a sixteenth of the open's
        // timer): the measured round trip may be far longer than the open (this member was
        // paused, and measured its pause), and a FIRST lost to every receiver would then be
        // the only one sent, failing the open with nobody asked twice.
        let first_retry = self.rto_after(0).min(self.open_retry_max());
        self.forwards.insert(
            msg,
            Forward {
                key: Key {
                    epoch: self.epoch,
                    txn: msg,
                },
                payload,
                total,
                phase: Phase::Opening {
                    deadline: now + self.cfg.open_timeout,
                },
                set: BTreeMap::new(),
                send_next: 0,
                sent_high: 0,
                open_retry_at: now + first_retry,
                rto_at: None,
                goback_at: now,
                sreq_at: None,
                tokens: burst,
                tokens_at: now,
                tries: 0,
                open_tries: 0,
                probe: 0,
                probe_mark: 0,
                probe_at: None,
                dropped: Vec::new(),
                late: Vec::new(),
            },
        );
        self.send_first(msg);
        if self.cfg.max_receivers == 0 {
            self.decide_open(now, msg);
        }
        Ok(msg)
    }

    fn reply(
        &mut self,
        now: Time,
        to: NodeId,
        request: u64,
        payload: Bytes,
    ) -> Result<(), SendError> {
        if self.left {
            return Err(SendError::NotMember);
        }
        if payload.len() > self.cfg.max_reply_bytes {
            return Err(SendError::TooLarge);
        }
        self.now = self.now.max(now);
        let Some((&k, i)) = self
            .inbound
            .iter_mut()
            .find(|((s, key), _)| *s == to && key.txn == request)
        else {
            return Err(SendError::NotMember);
        };
        if i.accepted == Some(false) {
            return Err(SendError::NotMember);
        }
        let r = &mut i.reply;
        if r.buf.len() + payload.len() + 4 > self.cfg.max_reply_bytes + 4 {
            self.counters.backpressure_refusals += 1;
            return Err(SendError::WouldBlock);
        }
        r.buf
            .extend_from_slice(&(payload.len() as u32).to_be_bytes());
        r.buf.extend_from_slice(&payload);
        self.extra.replies_sent += 1;
        if i.use_backoff && r.backoff_at.is_none() {
            let b = Self::backoff_ns(i.set_size, i.backoff_unit_us, self.cfg.open_timeout);
            let d = self.rng.up_to(b);
            if let Some(i) = self.inbound.get_mut(&k) {
                i.reply.backoff_at = Some(now + Duration::from_nanos(d));
            }
        }
        self.pump_reply(now, k);
        Ok(())
    }

    fn take_failure(&mut self, msg: u64) -> Option<String> {
        let i = self.failures.iter().position(|f| f.0 == msg)?;
        self.failures.remove(i).map(|f| f.1)
    }

    fn leave(&mut self, now: Time) {
        if self.left {
            return;
        }
        // Close every return context (the sources drop this receiver at once) and every
        // forward channel: what is not released is aborted.
        let keys: Vec<(NodeId, Key)> = self.inbound.keys().copied().collect();
        for k in keys {
            if self
                .inbound
                .get(&k)
                .is_some_and(|i| i.accepted != Some(false))
            {
                self.send_status(k, true);
            }
        }
        self.inbound.clear();
        self.held_bytes = 0;
        let txns: Vec<u64> = self.forwards.keys().copied().collect();
        for txn in txns {
            if self
                .forwards
                .get(&txn)
                .is_some_and(|f| f.phase == Phase::Released)
            {
                let f = self.forwards.remove(&txn).expect("present");
                self.lingering.push_back(Lingering {
                    key: f.key,
                    until: now,
                    set: f.set,
                });
            } else {
                self.abort(now, txn, AbortCause::Leaving);
            }
        }
        while !self.lingering.is_empty() {
            self.close_lingering();
        }
        self.left = true;
        self.events.push_back(Event::Left);
    }

    fn poll_transmit(&mut self, now: Time, buf: &mut Vec<u8>) -> Option<Transmit> {
        let (to, data) = match self.out.pop_front() {
            Some(x) => x,
            None => {
                if self.left {
                    return None;
                }
                (Destination::Group, self.next_segment(now)?)
            }
        };
        *buf = data;
        shell::count_sent(&mut self.counters, buf.len());
        self.counters.out_refused = self.out.refused();
        Some(Transmit::single(to))
    }

    fn poll_event(&mut self) -> Option<Event> {
        let ev = self.events.pop_front()?;
        if let Event::Deliver(d) = &ev {
            if d.sender != self.me {
                self.handed_over(d.sender, d.msg);
            }
        }
        Some(ev)
    }

    fn poll_timeout(&self) -> Option<Time> {
        if self.left {
            return None;
        }
        let mut d = Deadlines::new();
        for f in self.forwards.values() {
            if let Phase::Opening { deadline } = f.phase {
                d.at("open", Some(deadline));
                d.at("open_retry", Some(f.open_retry_at));
            }
            d.at("rto", f.rto_at);
            d.at("pace", self.pace_deadline(f));
        }
        d.at("linger", self.lingering.front().map(|l| l.until));
        for i in self.inbound.values() {
            d.at("inbound", self.inbound_deadline(i));
        }
        d.earliest()
    }

    fn node_id(&self) -> NodeId {
        self.me
    }

    fn guarantees(&self) -> Guarantees {
        super::TxnFactory::declared()
    }

    fn info(&self) -> GroupInfo {
        GroupInfo {
            me: self.me,
            view: VIEW_ID,
            members: Vec::new(),
            rank: None,
            coordinator: None,
            recovering: false,
            incarnation: 0,
            guarantees: self.guarantees(),
            buffered_msgs: self.forwards.len(),
            buffer_capacity_msgs: self.cfg.max_open_txns,
            max_datagram_bytes: self.max_datagram_bytes,
        }
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn engine_counters(&self) -> Vec<(&'static str, u64)> {
        let e = &self.extra;
        vec![
            ("opens_answered", e.opens),
            ("opens_not_answered", e.opens_not_answered),
            ("opens_failed", e.opens_failed),
            ("first_sent", e.first_sent),
            ("reports_sent", e.answers_sent),
            ("channels_accepted", e.accepted),
            ("channels_refused", e.refused),
            ("go_backs", e.go_backs),
            ("releases", e.releases),
            ("aborts", e.aborts),
            ("receivers_dropped", e.receivers_dropped),
            ("replies_sent", e.replies_sent),
            ("replies_received", e.replies_received),
            ("queries_sent", e.queries_sent),
            ("resolves_sent", e.resolves_sent),
            ("gave_up", e.gave_up),
            ("backoffs", e.backoffs),
            ("control_dropped", e.out_dropped),
            ("unreliable_sent", e.unreliable_sent),
            ("unreliable_dropped", e.unreliable_dropped),
            ("not_from_source", e.not_from_source),
            ("not_in_set", e.not_in_set),
        ]
    }

    fn can_submit(&self) -> bool {
        !self.left && self.forwards.len() < self.cfg.max_open_txns && !self.events.is_full()
    }

    fn describe(&self) -> String {
        let f: Vec<String> = self
            .forwards
            .values()
            .map(|f| {
                let set: Vec<String> = f
                    .set
                    .iter()
                    .map(|(id, r)| format!("{id}:{}{}", r.next, if r.delivered { "d" } else { "" }))
                    .collect();
                format!(
                    "txn {} {:?} {}/{} set [{}]",
                    f.key.txn,
                    f.phase,
                    f.send_next,
                    f.total,
                    set.join(" ")
                )
            })
            .collect();
        format!(
            "epoch {:08x}; {} open, {} lingering, {} inbound ({} bytes held); {}",
            self.epoch,
            self.forwards.len(),
            self.lingering.len(),
            self.inbound.len(),
            self.held_bytes,
            f.join("; ")
        )
    }
}
