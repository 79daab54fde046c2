//! The sequencer state machine: one struct plays every role of seed 002 section 5.2 — sender,
//! member, and (when it created the group or inherited the role) sequencer.

use super::packet::{
    self, decode_view, encode_control, encode_view, ptype, Body, EntryKind, OrderedEntry,
    OrderedWriter, ReqEntry, ReqWriter, SeqState, ORDERED_ENTRY_OVERHEAD, ORDERED_FIXED,
    REQ_ENTRY_OVERHEAD, REQ_FIXED,
};
use crate::common::{CongestionWindow, FailureDetector, HistoryBuffer, RttEstimator};
use crate::engine::{
    Counters, Delivery, Destination, Event, GroupInfo, NodeId, Qos, Recovery, SendError, Time, View,
};
use crate::wire::{EngineKind, Header, HEADER_LEN};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use super::recovery::{AwaitAcks, Control, RecoveryMode, ResultRecord};

/// Configuration of a sequencer group. Every member of a group must use the same values for
/// `group`, `resilience` and `history_capacity_msgs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Group id carried in every header (see [`crate::common::group_id`]).
    pub group: u32,
    /// Resilience degree r: a send completes once r + 1 members hold the message.
    pub resilience: u8,
    /// Messages of at least this many bytes use the BB method (Amoeba's `g_large`).
    pub large_threshold_bytes: usize,
    /// Largest datagram the engine writes (path MTU minus IP and UDP headers).
    pub max_datagram_bytes: usize,
    /// Largest application message; larger ones are refused with [`SendError::TooLarge`].
    pub max_message_bytes: usize,
    /// Slots in the history buffer.
    pub history_capacity_msgs: usize,
    /// Own messages (fragments) submitted and not yet delivered back, at most.
    pub send_window_msgs: usize,
    /// A member that delivered this many messages without sending reports its state (BC_STATE).
    pub state_interval_msgs: u64,
    /// Initial retransmission timeout for requests and NACKs, before RTT samples adapt it.
    pub retrans_timeout_ms: u64,
    /// Lower bound of the adaptive retransmission timeout.
    pub min_retrans_timeout_ms: u64,
    /// Upper bound of the adaptive retransmission timeout (after backoff).
    pub max_retrans_timeout_ms: u64,
    /// The sequencer sends BC_SYNC when it has been quiet this long with its tail unconfirmed.
    pub sync_interval_ms: u64,
    /// A joiner repeats its join request this often.
    pub join_retry_ms: u64,
    /// Events (deliveries) held for the application before delivery pauses (back-pressure).
    pub max_pending_events: usize,
    /// Largest group (also bounded by how many members a view entry can carry in a datagram).
    pub max_members: usize,
    /// How long a departed member (or departing sequencer) is waited for to catch up.
    pub leave_linger_ms: u64,
    /// Datagrams the sequencer sends at most to answer one retransmission request.
    pub max_retrans_datagrams: usize,
    /// A peer not heard from this long is probed (BC_ALIVEREQ): the sequencer watches the
    /// members, a member the sequencer. 0 turns failure detection off.
    pub alive_interval_ms: u64,
    /// Probes without an answer before the peer is declared failed (also: request timeouts
    /// with nothing heard from the sequencer). More retries: fewer false suspicions of a slow
    /// or paused member, slower detection of a crash.
    pub alive_retries: u32,
    /// Shortest wait for the answer to one probe (and one round of the recovery protocol); it
    /// grows with the measured round-trip time. A crash is noticed about
    /// `alive_interval_ms + alive_retries × alive_timeout_ms` after the member was last heard.
    pub alive_timeout_ms: u64,
    /// Reset the group automatically once a failure is found (the policy users of today's
    /// group communication systems expect). Off: the application calls ResetGroup itself
    /// ([`crate::Engine::reset`]), as in the paper.
    pub auto_reset: bool,
    /// Smallest group an automatic reset may form; 0 means a majority of the view the reset
    /// replaces (members whose leave was ordered do not count), so that of two sides of a
    /// partition at most one goes on.
    pub min_members: usize,
}

impl Config {
    /// Defaults for a group id.
    pub fn new(group: u32) -> Self {
        Config {
            group,
            resilience: 0,
            large_threshold_bytes: 1400,
            max_datagram_bytes: 1472,
            max_message_bytes: 16 << 20,
            history_capacity_msgs: 4096,
            send_window_msgs: 1024,
            state_interval_msgs: 1024,
            retrans_timeout_ms: 40,
            min_retrans_timeout_ms: 5,
            max_retrans_timeout_ms: 2000,
            sync_interval_ms: 100,
            join_retry_ms: 100,
            max_pending_events: 8192,
            max_members: 256,
            leave_linger_ms: 5000,
            max_retrans_datagrams: 32,
            alive_interval_ms: 300,
            alive_retries: 4,
            alive_timeout_ms: 100,
            auto_reset: true,
            min_members: 0,
        }
    }

    /// Payload bytes per fragment, so that one fragment always fits in one ordered datagram.
    pub(super) fn fragment_bytes(&self) -> usize {
        self.max_datagram_bytes - HEADER_LEN - ORDERED_FIXED - ORDERED_ENTRY_OVERHEAD
    }

    pub(super) fn max_members_effective(&self) -> usize {
        // A view entry (8 + 4 + 2 + 4n bytes) must fit in one fragment.
        self.max_members.min((self.fragment_bytes() - 14) / 4)
    }

    pub(super) fn validate(&self) {
        assert!(
            self.max_datagram_bytes >= 256
                && self.max_datagram_bytes <= crate::wire::MAX_DATAGRAM_LEN,
            "max_datagram_bytes out of range"
        );
        assert!(self.history_capacity_msgs >= 16, "history too small");
        assert!(self.send_window_msgs >= 1 && self.max_pending_events >= 1);
        assert!(
            self.alive_interval_ms == 0 || (self.alive_retries >= 1 && self.alive_timeout_ms >= 1),
            "failure detection needs at least one probe with a positive timeout"
        );
    }
}

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

/// An own fragment waiting to be ordered and delivered back.
#[derive(Clone, Debug)]
pub(super) struct OutFrag {
    pub(super) pnum: u64,
    /// Sent by the BB method (the whole message is at least `large_threshold_bytes`).
    pub(super) bb: bool,
    pub(super) frag_index: u16,
    pub(super) frag_count: u16,
    pub(super) payload: Bytes,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Joining,
    Member,
    Left,
}

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

/// What the failure detector's watch list depends on: the view, the ordering view (id and
/// size), the sequencer, and whether detection runs (a member in normal operation).
pub(super) type DetectorKey = (u64, Option<(u64, usize)>, NodeId, bool);

/// Leaves remembered for a sequencer handover.
pub(super) const MAX_RECENT_LEAVES: usize = 64;

/// Bound on queued retransmission requests and nudges at the sequencer.
pub(super) const MAX_RETRANS_QUEUE: usize = 256;

/// One member's instance of the sequencer protocol; it becomes the sequencer when it creates the
/// group or inherits the role when the sequencer leaves.
pub struct Sequencer {
    pub(super) cfg: Config,
    pub(super) me: NodeId,
    pub(super) phase: Phase,
    pub(super) incarnation: u32,
    pub(super) now: Time,
    pub(super) view: View,
    pub(super) history: HistoryBuffer<Entry>,
    /// Next sequence number to deliver (g_nextseqno).
    pub(super) next_deliver: u64,
    /// Every sequence number below this is held with its payload.
    pub(super) held_next: u64,
    pub(super) accepted_next: u64,
    pub(super) stable: u64,
    /// Highest `next_seq` heard from the sequencer: anything between `held_next` and it is a gap.
    pub(super) seq_next_known: u64,
    /// BB data that arrived before its accept, bounded; (sender, pnum) -> payload.
    pub(super) bb_pending: HashMap<(NodeId, u64), Bytes>,
    pub(super) bb_order: VecDeque<(NodeId, u64)>,
    /// Accepts seen before their BB data: (sender, pnum) -> seq.
    pub(super) bb_missing: HashMap<(NodeId, u64), u64>,
    pub(super) ord: Option<Ordering>,
    /// Where requests, NACKs and status go: the node heard ordering the newest messages.
    pub(super) sequencer_hint: NodeId,
    // Sender side.
    pub(super) next_pnum: u64,
    pub(super) outq: VecDeque<OutFrag>,
    /// Index in `outq` of the first fragment not sent in the current round.
    pub(super) unsent: usize,
    /// Highest own protocol number seen ordered.
    pub(super) own_ordered: u64,
    pub(super) req_deadline: Option<Time>,
    /// Highest own protocol number ever sent.
    pub(super) max_sent_pnum: u64,
    /// A fresh request being timed: (its last pnum, when sent).
    pub(super) rtt_probe: Option<(u64, Time)>,
    pub(super) rtt: RttEstimator,
    pub(super) cwnd: CongestionWindow,
    // Member side.
    pub(super) need_status: bool,
    pub(super) need_nack: bool,
    pub(super) nack_deadline: Option<Time>,
    pub(super) delivered_since_report: u64,
    pub(super) join_deadline: Option<Time>,
    /// A last status owed to a member that waits to see us have a leave: the departing
    /// sequencer (when it handed over), or the sequencer (when we left).
    pub(super) farewell: Option<NodeId>,
    pub(super) leave_requested: bool,
    pub(super) leave_deadline: Option<Time>,
    /// Fragments of a message being reassembled, per sender (fragments of one sender arrive in
    /// order, so one buffer per sender suffices).
    pub(super) reassembly: HashMap<NodeId, Vec<u8>>,
    /// Where each member's join was ordered, as delivered here: a new sequencer can resend a
    /// joiner that missed it its join entry.
    pub(super) join_seqs: HashMap<NodeId, u64>,
    /// Recent leaves as delivered here (bounded): a new sequencer keeps serving those leavers
    /// that may still lack their leave.
    pub(super) recent_leaves: VecDeque<(NodeId, u64)>,
    /// Last protocol number delivered per sender: a new sequencer continues duplicate detection.
    pub(super) last_delivered_pnum: HashMap<NodeId, u64>,
    /// Pending retransmissions this member answers (the sequencer, or anyone during recovery):
    /// (to, from, until exclusive, datagrams sent for it).
    pub(super) retrans: VecDeque<(NodeId, u64, u64, usize)>,
    // Crash recovery (see `recovery`).
    /// BC_ALIVEREQ / BC_ALIVE failure detection.
    pub(super) detector: FailureDetector,
    /// What the detector's watch list was computed from.
    pub(super) detector_key: Option<DetectorKey>,
    /// Request timeouts in a row with nothing heard from the sequencer.
    pub(super) silent_req_timeouts: u32,
    /// Whether the sequencer was heard since the last request timeout.
    pub(super) heard_sequencer: bool,
    /// When the sequencer was last heard.
    pub(super) last_heard_sequencer: Time,
    /// Recovery mode: from a detected failure until the group is reset.
    pub(super) recovery: Option<RecoveryMode>,
    /// As coordinator of a reset: the members that have not acknowledged it yet.
    pub(super) awaiting: Option<AwaitAcks>,
    /// The newest reset installed here.
    pub(super) last_result: Option<ResultRecord>,
    /// A coordinator fetches what it lacks from this member.
    pub(super) repair_from: Option<NodeId>,
    /// As the new sequencer after a reset: where each member's stream of requests stands, as
    /// its acknowledgement said: (member, last protocol number ordered, mid-message).
    pub(super) reset_streams: Vec<(NodeId, u64, bool)>,
    /// Small answers owed to single members.
    pub(super) control: Control,
    pub(super) events: VecDeque<Event>,
    pub(super) counters: Counters,
}

impl Sequencer {
    pub(super) fn new(cfg: Config, me: NodeId, now: Time, phase: Phase) -> Sequencer {
        cfg.validate();
        let cap = cfg.history_capacity_msgs;
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
            history: HistoryBuffer::new(cap, 0),
            next_deliver: 0,
            held_next: 0,
            accepted_next: 0,
            stable: 0,
            seq_next_known: 0,
            bb_pending: HashMap::new(),
            bb_order: VecDeque::new(),
            bb_missing: HashMap::new(),
            ord: None,
            sequencer_hint: me,
            next_pnum: 1,
            outq: VecDeque::new(),
            unsent: 0,
            own_ordered: 0,
            req_deadline: None,
            max_sent_pnum: 0,
            rtt_probe: None,
            rtt: RttEstimator::new(
                Duration::from_millis(cfg.retrans_timeout_ms),
                Duration::from_millis(cfg.min_retrans_timeout_ms),
                Duration::from_millis(cfg.max_retrans_timeout_ms),
            ),
            cwnd: CongestionWindow::new(64, 4, cfg.send_window_msgs.max(4)),
            need_status: false,
            need_nack: false,
            nack_deadline: None,
            delivered_since_report: 0,
            join_deadline: None,
            farewell: None,
            leave_requested: false,
            leave_deadline: None,
            reassembly: HashMap::new(),
            last_delivered_pnum: HashMap::new(),
            join_seqs: HashMap::new(),
            recent_leaves: VecDeque::new(),
            retrans: VecDeque::new(),
            detector: FailureDetector::new(Self::detector_params(&cfg)),
            detector_key: None,
            silent_req_timeouts: 0,
            heard_sequencer: false,
            last_heard_sequencer: now,
            recovery: None,
            awaiting: None,
            last_result: None,
            repair_from: None,
            reset_streams: Vec::new(),
            control: Control::default(),
            events: VecDeque::new(),
            counters: Counters::default(),
            cfg,
        }
    }

    /// Create a new group with this node as its only member and sequencer.
    pub fn create(cfg: Config, me: NodeId, now: Time) -> Sequencer {
        let mut s = Sequencer::new(cfg, me, now, Phase::Member);
        s.ord = Some(Ordering {
            next_seq: 0,
            bcast_next: 0,
            members: Vec::new(),
            view_id: 0,
            nudge: VecDeque::new(),
            pending_joins: VecDeque::new(),
            waiting: BTreeMap::new(),
            last_multicast: now,
            last_sync: now,
            sync_due: false,
            accept_due: false,
            leaving: None,
            successor: None,
            leave_deadline: now,
        });
        s.order_join(me);
        s.pump();
        s
    }

    /// Start joining an existing group; an [`Event::View`] including this node follows.
    pub fn join(cfg: Config, me: NodeId, now: Time) -> Sequencer {
        let mut s = Sequencer::new(cfg, me, now, Phase::Joining);
        s.join_deadline = Some(now);
        s
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

    /// Timeout for repeating a request to the sequencer (backed off while unanswered).
    pub(super) fn rto(&self) -> Duration {
        self.rtt.rto()
    }

    /// Timeout for repair traffic (NACKs, BC_SYNC): the RTT-based timeout without backoff, and
    /// no longer than the configured initial timeout. Request RTTs include queueing at the
    /// sequencer (a full history makes them long); repair must not slow down with them, or a
    /// member that fell behind keeps everyone's history full.
    pub(super) fn repair_rto(&self) -> Duration {
        self.rtt
            .base_rto()
            .min(Duration::from_millis(self.cfg.retrans_timeout_ms))
    }

    /// The payload of an own fragment still waiting to be delivered back.
    pub(super) fn own_fragment(&self, pnum: u64) -> Option<Bytes> {
        let first = self.outq.front()?.pnum;
        let f = self.outq.get(pnum.checked_sub(first)? as usize)?;
        debug_assert_eq!(f.pnum, pnum);
        Some(f.payload.clone())
    }

    /// Own fragments sent to the sequencer and not yet seen ordered.
    pub(super) fn in_flight(&self) -> usize {
        let ordered = match self.outq.front() {
            Some(f) => (self.own_ordered + 1).saturating_sub(f.pnum) as usize,
            None => 0,
        };
        self.unsent.saturating_sub(ordered.min(self.outq.len()))
    }

    /// Own fragments up to `pnum` were seen ordered: sample the RTT, open the window, and
    /// restart the retransmission timer (it measures lack of progress, not age).
    pub(super) fn own_progress(&mut self, pnum: u64) {
        if pnum <= self.own_ordered {
            return;
        }
        let newly = (pnum - self.own_ordered) as usize;
        self.own_ordered = pnum;
        self.cwnd.on_ack(newly);
        self.rtt.on_progress();
        if let Some((probe, sent)) = self.rtt_probe {
            if pnum >= probe {
                self.rtt.on_sample(self.now.saturating_since(sent));
                self.rtt_probe = None;
            }
        }
        self.req_deadline = (self.in_flight() > 0).then(|| self.now + self.rto());
    }

    pub(super) fn is_sequencer(&self) -> bool {
        self.ord.is_some()
    }

    pub(super) fn seq_state(&self) -> SeqState {
        let next_seq = self
            .ord
            .as_ref()
            .map(|o| o.next_seq)
            .unwrap_or(self.seq_next_known);
        SeqState {
            accepted_next: self.accepted_next,
            stable: self.stable.min(self.accepted_next),
            next_seq,
        }
    }

    // ----- sequencer role -------------------------------------------------------------------

    /// Whether the sequencer may assign another sequence number: every member has room for it,
    /// and for one more entry (a reset that ends this order must fit at every member).
    pub(super) fn has_room(&self) -> bool {
        let o = self.ord.as_ref().expect("sequencer");
        o.leaving.is_none() && self.history_has_slot(o.next_seq)
    }

    /// Whether `seq` and the slot after it fit in the history window.
    pub(super) fn history_has_slot(&self, seq: u64) -> bool {
        self.history.in_window(seq + 1)
    }

    pub(super) fn assign(&mut self, entry: Entry) -> u64 {
        let o = self.ord.as_mut().expect("sequencer");
        let seq = o.next_seq;
        let inserted = self.history.insert(seq, entry);
        assert_eq!(
            inserted,
            Ok(true),
            "assigned slot must be free and in window"
        );
        o.next_seq += 1;
        self.held_next = o.next_seq;
        self.seq_next_known = o.next_seq;
        seq
    }

    pub(super) fn current_member_ids(&self) -> Vec<NodeId> {
        let o = self.ord.as_ref().expect("sequencer");
        o.members
            .iter()
            .filter(|m| m.departed.is_none())
            .map(|m| m.id)
            .collect()
    }

    pub(super) fn view_payload(view_id: u64, sequencer: NodeId, members: &[NodeId]) -> Bytes {
        let mut buf = Vec::with_capacity(14 + 4 * members.len());
        encode_view(&mut buf, view_id, sequencer, members);
        Bytes::from(buf)
    }

    /// Order the join of `id` (BC_JOIN): a totally ordered entry carrying the new view.
    pub(super) fn order_join(&mut self, id: NodeId) {
        let mut members = self.current_member_ids();
        members.push(id);
        let o = self.ord.as_mut().expect("sequencer");
        o.view_id += 1;
        let payload = Self::view_payload(o.view_id, self.me, &members);
        let seq = o.next_seq;
        o.members.push(MemberState {
            id,
            expect: seq,
            held_next: seq,
            last_pnum: 0,
            join_seq: seq,
            mid_message: false,
            departed: None,
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
            // The most up-to-date member takes over (the lowest-ranked among equals), as the
            // invitation protocol picks the member with the highest sequence number. It must
            // hold the history others may still need: it joined before the stable point.
            let o = self.ord.as_ref().expect("sequencer");
            let stable = self.stable;
            let best = |holds_all: bool| {
                o.members
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| m.id != id && m.departed.is_none())
                    .filter(|(_, m)| !holds_all || m.join_seq <= stable)
                    .max_by_key(|(rank, m)| (m.held_next, std::cmp::Reverse(*rank)))
                    .map(|(_, m)| m.id)
            };
            best(true).or_else(|| best(false)).unwrap_or(self.me)
        } else {
            self.me
        };
        let linger = Duration::from_millis(self.cfg.leave_linger_ms);
        let now = self.now;
        let o = self.ord.as_mut().expect("sequencer");
        o.view_id += 1;
        let payload = Self::view_payload(o.view_id, next_sequencer, &members);
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

    pub(super) fn on_request(
        &mut self,
        from: NodeId,
        expect: u64,
        held: u64,
        entries: packet::ReqIter<'_>,
        bb: bool,
        data: &Bytes,
    ) {
        let Some(i) = self.member_index(from) else {
            return;
        };
        self.note_member_state(i, expect, held);
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
            // Requests wait in the third part of the history until they are next in their
            // sender's stream and there is room (seed 002 Fig. 11): a lost request or a full
            // history then costs the sender no timeout for the requests behind it.
            let key = (from, e.pnum);
            if o.waiting.contains_key(&key) {
                self.counters.duplicates += 1;
            } else if o.waiting.len() < self.cfg.history_capacity_msgs / 2 {
                o.waiting.insert(
                    key,
                    Waiting {
                        frag_index: e.frag_index,
                        frag_count: e.frag_count,
                        payload: data.slice_ref(e.payload),
                        bb,
                    },
                );
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
        if duplicate {
            // The sender missed the broadcast of something already ordered: tell it where the
            // sequence stands so that it asks for what it lacks (section 5.2).
            let o = self.ord.as_mut().expect("sequencer");
            if o.nudge.len() < MAX_RETRANS_QUEUE && !o.nudge.contains(&from) {
                o.nudge.push_back(from);
            }
        }
    }

    /// Order the waiting requests of member `i` that are next in its stream, while there is room.
    pub(super) fn order_waiting(&mut self, i: usize) {
        loop {
            let o = self.ord.as_mut().expect("sequencer");
            let m = &o.members[i];
            let (id, next) = (m.id, m.last_pnum + 1);
            let Some(w) = o.waiting.get(&(id, next)) else {
                return;
            };
            if m.departed.is_some()
                || !self.history.in_window(o.next_seq + 1)
                || o.leaving.is_some()
            {
                o.sync_due = true;
                return;
            }
            if w.frag_index == 0 && !o.pending_joins.is_empty() {
                return;
            }
            let w = o.waiting.remove(&(id, next)).expect("present");
            let m = &mut o.members[i];
            m.last_pnum = next;
            m.mid_message = w.frag_index + 1 < w.frag_count;
            self.assign(Entry {
                kind: EntryKind::Data,
                sender: id,
                pnum: next,
                frag_index: w.frag_index,
                frag_count: w.frag_count,
                payload: Some(w.payload),
                bb: w.bb,
            });
        }
    }

    pub(super) fn member_index(&self, id: NodeId) -> Option<usize> {
        self.ord.as_ref()?.members.iter().position(|m| m.id == id)
    }

    pub(super) fn note_member_state(&mut self, i: usize, expect: u64, held: u64) {
        let o = self.ord.as_mut().expect("sequencer");
        let next_seq = o.next_seq;
        let m = &mut o.members[i];
        m.expect = m.expect.max(expect.min(next_seq));
        m.held_next = m.held_next.max(held.min(next_seq));
    }

    pub(super) fn on_join_req(&mut self, from: NodeId) {
        let Some(o) = self.ord.as_ref() else { return };
        if let Some(m) = o.members.iter().find(|m| m.id == from) {
            if m.departed.is_none() {
                // Its join is ordered but it missed the broadcast: send it again.
                let (from_seq, to) = (m.join_seq.max(self.history.base()), o.next_seq);
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

    /// Queue a retransmission of `[from, until)` to `to`, of what this member holds (the
    /// sequencer everything it ordered, any member during recovery its contiguous history).
    pub(super) fn queue_retrans(&mut self, to: NodeId, from: u64, until: u64) {
        let base = self.history.base();
        let held = self.ord.as_ref().map_or(self.held_next, |o| o.next_seq);
        let until = until.min(held);
        let from = from.max(base);
        if from >= until {
            return;
        }
        if let Some(r) = self.retrans.iter_mut().find(|r| r.0 == to) {
            r.1 = r.1.min(from);
            r.2 = r.2.max(until);
        } else if self.retrans.len() < MAX_RETRANS_QUEUE {
            self.retrans.push_back((to, from, until, 0));
        }
    }

    /// The next queued retransmission, written into `buf`.
    pub(super) fn transmit_retrans(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        while let Some((to, from, until, sent)) = self.retrans.front().copied() {
            let from = from.max(self.history.base());
            let end = self.write_ordered(buf, from, until, true);
            let max_sent = self.cfg.max_retrans_datagrams;
            let r = self.retrans.front_mut().expect("front");
            r.1 = end;
            r.3 += 1;
            // Bound the burst per request: the member asks again for what is still missing.
            if end >= until || end == from || sent + 1 >= max_sent {
                self.retrans.pop_front();
            }
            if end > from {
                self.counters.retransmissions += end - from;
                return Some(Destination::Peer(to));
            }
        }
        None
    }

    /// Order own fragments locally (the sequencer needs no network to reach itself).
    pub(super) fn order_local(&mut self) {
        if self.unsent < self.outq.len() && !self.has_room() {
            // History full: ask the members where they stand so that it can be purged.
            self.ord.as_mut().expect("sequencer").sync_due = true;
        }
        while self.unsent < self.outq.len() && self.has_room() {
            let f = self.outq[self.unsent].clone();
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
            self.own_ordered = f.pnum;
            self.unsent += 1;
        }
    }

    /// Recompute acceptance and stability from the members' reports, purge what everyone has.
    pub(super) fn sequencer_bookkeeping(&mut self) {
        let me = self.me;
        let r = self.cfg.resilience as usize;
        let next_deliver = self.next_deliver;
        let now = self.now;
        let o = self.ord.as_mut().expect("sequencer");
        if let Some(m) = o.members.iter_mut().find(|m| m.id == me) {
            m.expect = next_deliver;
            m.held_next = o.next_seq;
        }
        // Departed members are waited for until they have their leave, or until they time out.
        let before = o.members.len();
        o.members.retain(|m| match m.departed {
            Some((seq, deadline)) => m.id != me && m.expect <= seq && now < deadline,
            None => true,
        });
        if o.members.len() != before && !o.waiting.is_empty() {
            // Requests of removed members can never be ordered.
            let members = &o.members;
            o.waiting
                .retain(|(id, _), _| members.iter().any(|m| m.id == *id && m.departed.is_none()));
        }
        // The r-th highest holding point among the other members: r of them hold everything
        // below it. r is small, so keep the top r in a fixed array (no allocation per input).
        let mut top = [0u64; 256];
        let mut others = 0usize;
        for m in o
            .members
            .iter()
            .filter(|m| m.id != me && m.departed.is_none())
        {
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
        let accepted = self.accepted_next;
        let vouching = |m: &&MemberState| m.id != me && m.departed.is_none();
        let accept_point = if need == 0 {
            o.next_seq
        } else if o
            .members
            .iter()
            .filter(vouching)
            .all(|m| m.join_seq <= accepted)
        {
            top[need - 1].min(o.next_seq)
        } else {
            // A member that joined beyond the acceptance point holds nothing below its join:
            // walk the acceptance point forward while enough members hold each sequence number
            // (a member holds `[join_seq, held_next)`). Only while a join is unaccepted; each
            // step passes a join or a holding point, so at most two per member.
            let mut p = accepted;
            for _ in 0..=2 * o.members.len() {
                if p >= o.next_seq {
                    break;
                }
                let holders = o.members.iter().filter(vouching);
                // Entries ordered while the group was smaller need only as many holders as
                // there were members then.
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
                p = next.min(o.next_seq);
            }
            p
        };
        if accept_point > self.accepted_next {
            self.accepted_next = accept_point;
            o.accept_due = true;
        }
        let stable = o
            .members
            .iter()
            .map(|m| m.expect)
            .min()
            .unwrap_or(next_deliver)
            .min(next_deliver);
        self.stable = self.stable.max(stable);
    }

    // ----- member role ----------------------------------------------------------------------

    pub(super) fn apply_state(&mut self, from: NodeId, s: SeqState) {
        if self.is_sequencer() {
            return;
        }
        if s.next_seq >= self.seq_next_known {
            // Whoever orders the newest sequence numbers is the sequencer now, even when our
            // view still names its predecessor (we have not delivered the handover yet, and the
            // predecessor may be gone): requests and repairs go there.
            self.sequencer_hint = from;
        }
        self.accepted_next = self.accepted_next.max(s.accepted_next);
        self.seq_next_known = self.seq_next_known.max(s.next_seq);
        self.stable = self.stable.max(s.stable);
    }

    pub(super) fn on_ordered(
        &mut self,
        from: NodeId,
        state: SeqState,
        base_seq: u64,
        entries: packet::OrderedIter<'_>,
        data: &Bytes,
    ) {
        if self.is_sequencer() {
            // The sequencer holds everything it ordered; a departing one ignores its successor.
            return;
        }
        if self.phase == Phase::Joining {
            let mine = entries
                .clone()
                .enumerate()
                .find(|(_, e)| e.kind == EntryKind::Join && e.sender == self.me);
            let Some((i, _)) = mine else { return };
            let s = base_seq + i as u64;
            self.history = HistoryBuffer::new(self.cfg.history_capacity_msgs, s);
            self.next_deliver = s;
            self.held_next = s;
            self.accepted_next = s;
            // `stable` stays as learned (0 at first): below our join we know nothing.
            self.seq_next_known = s;
            self.view.coordinator = from;
            self.sequencer_hint = from;
            self.phase = Phase::Member;
            self.join_deadline = None;
        }
        if self.phase != Phase::Member {
            return;
        }
        if self.recovering() {
            // Only repairs arrive now, and only stability (a fact of the old order) is taken
            // from them: acceptance stays where the old sequencer left it.
            self.stable = self.stable.max(state.stable.min(self.next_deliver));
        } else {
            self.apply_state(from, state);
        }
        self.purge();
        let held_before = self.held_next;
        for (i, e) in entries.enumerate() {
            let seq = base_seq + i as u64;
            if seq < self.next_deliver {
                self.counters.duplicates += 1;
                continue;
            }
            if e.sender == self.me && e.kind == EntryKind::Data {
                self.own_progress(e.pnum);
            }
            let payload = if e.has_payload {
                Some(data.slice_ref(e.payload))
            } else if e.sender == self.me {
                // Our own BB message: the network does not loop it back to us, we hold it.
                self.own_fragment(e.pnum)
            } else {
                self.bb_pending.remove(&(e.sender, e.pnum))
            };
            if let Some(existing) = self.history.get_mut(seq) {
                if existing.payload.is_none() && payload.is_some() {
                    existing.payload = payload;
                    self.bb_missing.remove(&(e.sender, e.pnum));
                } else {
                    self.counters.duplicates += 1;
                }
                continue;
            }
            if payload.is_none() {
                self.bb_missing.insert((e.sender, e.pnum), seq);
            }
            let entry = Entry {
                kind: e.kind,
                sender: e.sender,
                pnum: e.pnum,
                frag_index: e.frag_index,
                frag_count: e.frag_count,
                payload,
                bb: !e.has_payload,
            };
            // The sequencer never assigns beyond every member's window, so this only fails for
            // a stray datagram; what it carried is fetched again through a NACK.
            let _ = self.history.insert(seq, entry);
            self.seq_next_known = self.seq_next_known.max(seq + 1);
        }
        self.advance_held();
        if self.held_next > held_before && self.recovering() {
            self.recovery_progress();
        } else if self.held_next > held_before && self.ack_duty() {
            self.need_status = true;
        }
        if self.held_next > held_before && self.held_next < self.seq_next_known {
            // Repair is making progress: ask for the next part soon, not a whole RTO later, so
            // that a member far behind catches up at the pace of round trips.
            self.nack_deadline = Some(self.now + self.repair_rto() / 4);
        }
    }

    pub(super) fn on_bb_data(&mut self, from: NodeId, entries: packet::ReqIter<'_>, data: &Bytes) {
        for e in entries {
            let key = (from, e.pnum);
            let payload = data.slice_ref(e.payload);
            if let Some(seq) = self.bb_missing.remove(&key) {
                if let Some(entry) = self.history.get_mut(seq) {
                    if entry.payload.is_none() {
                        entry.payload = Some(payload);
                    }
                }
                continue;
            }
            if self.bb_pending.contains_key(&key) {
                continue;
            }
            if self.bb_order.len() >= self.cfg.history_capacity_msgs {
                // Bounded: the oldest stashed data goes; if it is still needed, a NACK fetches it.
                if let Some(old) = self.bb_order.pop_front() {
                    self.bb_pending.remove(&old);
                }
            }
            self.bb_pending.insert(key, payload);
            self.bb_order.push_back(key);
        }
        self.advance_held();
    }

    pub(super) fn advance_held(&mut self) {
        while self
            .history
            .get(self.held_next)
            .is_some_and(|e| e.payload.is_some())
        {
            self.held_next += 1;
        }
        if self.held_next < self.next_deliver {
            self.held_next = self.next_deliver;
        }
    }

    /// Whether this member is one of the r lowest-ranked members other than the sequencer, which
    /// acknowledge every message at once (section 5.1).
    pub(super) fn ack_duty(&self) -> bool {
        let r = self.cfg.resilience as usize;
        r > 0
            && self
                .view
                .members
                .iter()
                .filter(|m| **m != self.view.coordinator)
                .take(r)
                .any(|m| *m == self.me)
    }

    pub(super) fn purge(&mut self) {
        let upto = self.stable.min(self.next_deliver);
        if upto > self.history.base() {
            self.history.advance(upto);
            let base = upto;
            self.bb_missing.retain(|_, seq| *seq >= base);
        }
    }

    /// Where NACKs go and up to where: the sequencer, or during recovery the coordinator (or,
    /// for a coordinator, the best member).
    pub(super) fn repair_target(&self) -> Option<(NodeId, u64)> {
        if self.phase != Phase::Member || self.is_sequencer() {
            return None;
        }
        if self.recovering() {
            return self.recovery_repair();
        }
        Some((self.sequencer_hint, self.seq_next_known))
    }

    pub(super) fn check_gap(&mut self) {
        let Some((_, limit)) = self.repair_target() else {
            self.nack_deadline = None;
            return;
        };
        if self.held_next < limit {
            if self.nack_deadline.is_none() {
                // A short grace period lets reordered datagrams arrive before a NACK is sent.
                self.nack_deadline = Some(self.now + self.repair_rto() / 4);
            }
        } else {
            self.nack_deadline = None;
        }
    }

    /// Deliver what is accepted and held, in sequence order (`processrec`, Fig. 18).
    pub(super) fn deliver(&mut self) {
        while self.phase == Phase::Member
            && self.next_deliver < self.accepted_next
            && self.events.len() < self.cfg.max_pending_events
        {
            let seq = self.next_deliver;
            let Some(e) = self.history.get(seq) else {
                break;
            };
            let Some(payload) = e.payload.clone() else {
                break;
            };
            let e = Entry {
                payload: None,
                ..e.clone()
            };
            self.next_deliver += 1;
            self.delivered_since_report += 1;
            match e.kind {
                EntryKind::Data => self.deliver_data(seq, &e, payload),
                EntryKind::Join | EntryKind::Leave | EntryKind::Reset => {
                    self.install_view(seq, &e, &payload)
                }
            }
        }
        if self.delivered_since_report >= self.cfg.state_interval_msgs && !self.is_sequencer() {
            self.need_status = true;
        }
        self.advance_held();
        self.purge();
    }

    pub(super) fn deliver_data(&mut self, seq: u64, e: &Entry, payload: Bytes) {
        self.last_delivered_pnum.insert(e.sender, e.pnum);
        let last = e.frag_index + 1 == e.frag_count;
        let whole = if e.frag_count == 1 {
            Some(payload)
        } else {
            if e.frag_index > 0 && !self.reassembly.contains_key(&e.sender) {
                // Joins are ordered between messages, so a member sees every fragment of what
                // it delivers; anything else is a protocol bug.
                debug_assert!(false, "fragment without its beginning from {}", e.sender);
                return;
            }
            let buf = self.reassembly.entry(e.sender).or_default();
            if e.frag_index == 0 {
                buf.clear();
            }
            buf.extend_from_slice(&payload);
            if last {
                self.reassembly.remove(&e.sender).map(Bytes::from)
            } else {
                None
            }
        };
        let msg = e.pnum - e.frag_index as u64;
        if e.sender == self.me {
            let mut popped = 0;
            while self.outq.front().is_some_and(|f| f.pnum <= e.pnum) {
                self.outq.pop_front();
                popped += 1;
            }
            self.unsent = self.unsent.saturating_sub(popped);
            if last {
                self.events.push_back(Event::SendComplete { msg });
            }
        }
        if let Some(payload) = whole {
            self.counters.delivered += 1;
            self.events.push_back(Event::Deliver(Delivery {
                seq,
                sender: e.sender,
                msg,
                view: self.view.id,
                payload,
            }));
        }
    }

    pub(super) fn install_view(&mut self, seq: u64, e: &Entry, payload: &[u8]) {
        let Ok((id, coordinator, members)) = decode_view(payload) else {
            // Written by the sequencer itself; a bad one is a bug, not input to tolerate.
            debug_assert!(false, "undecodable view entry");
            return;
        };
        let old_coordinator = self.view.coordinator;
        // Entries below the newest reset installed here belong to an order that has ended:
        // they change the view, but not who orders.
        let current = self.last_result.as_ref().is_none_or(|r| seq >= r.seq);
        match e.kind {
            EntryKind::Join => {
                // A member that joins starts its message numbers afresh.
                self.last_delivered_pnum.remove(&e.sender);
                self.join_seqs.insert(e.sender, seq);
            }
            EntryKind::Leave => {
                self.last_delivered_pnum.remove(&e.sender);
                self.join_seqs.remove(&e.sender);
                if self.recent_leaves.len() >= MAX_RECENT_LEAVES {
                    self.recent_leaves.pop_front();
                }
                self.recent_leaves.push_back((e.sender, seq));
            }
            EntryKind::Reset => {
                let removed: Vec<NodeId> = self
                    .view
                    .members
                    .iter()
                    .copied()
                    .filter(|m| !members.contains(m))
                    .collect();
                for m in &removed {
                    // A removed member's half-delivered message never completes.
                    self.reassembly.remove(m);
                    self.join_seqs.remove(m);
                }
                self.events.push_back(Event::Recovery(Recovery::Reset {
                    incarnation: e.pnum as u32,
                    removed,
                }));
            }
            EntryKind::Data => unreachable!("views come from membership entries"),
        }
        self.view = View {
            id,
            seq,
            members,
            coordinator,
            joined: (e.kind == EntryKind::Join).then_some(e.sender),
            left: (e.kind == EntryKind::Leave).then_some(e.sender),
        };
        self.counters.view_changes += 1;
        self.events.push_back(Event::View(self.view.clone()));
        if e.kind == EntryKind::Leave && e.sender == self.me {
            self.leave_deadline = None;
            if self.is_sequencer() {
                // Keep serving retransmissions until the others have the leave (see timeout).
                return;
            }
            self.phase = Phase::Left;
            self.need_status = false;
            self.farewell = Some(old_coordinator);
            self.events.push_back(Event::Left);
            return;
        }
        if !current || self.recovering() {
            // The reset decides who orders next.
            return;
        }
        if e.kind == EntryKind::Leave
            && e.sender == old_coordinator
            && coordinator != old_coordinator
        {
            // The departing sequencer lingers until it knows we have its leave.
            self.farewell = Some(old_coordinator);
        }
        if coordinator != old_coordinator {
            self.sequencer_hint = coordinator;
        }
        if coordinator == self.me && !self.is_sequencer() && self.awaiting.is_none() {
            self.become_sequencer(seq + 1);
        }
        if coordinator != old_coordinator && self.unsent > 0 {
            // The new sequencer has not seen our unordered requests: resend them at once.
            self.unsent = self
                .outq
                .iter()
                .position(|f| f.pnum > self.own_ordered)
                .unwrap_or(self.outq.len());
            self.req_deadline = None;
        }
    }

    /// Take over ordering after the sequencer left: everything up to its leave is delivered here.
    pub(super) fn become_sequencer(&mut self, next_seq: u64) {
        let floor = self.stable;
        let members = self
            .view
            .members
            .iter()
            .map(|&id| MemberState {
                id,
                expect: if id == self.me { next_seq } else { floor },
                held_next: if id == self.me { next_seq } else { floor },
                last_pnum: self
                    .reset_streams
                    .iter()
                    .find(|s| s.0 == id)
                    .map(|s| s.1)
                    .or_else(|| self.last_delivered_pnum.get(&id).copied())
                    .unwrap_or(0),
                join_seq: self.join_seqs.get(&id).copied().unwrap_or(floor),
                mid_message: self
                    .reset_streams
                    .iter()
                    .find(|s| s.0 == id)
                    .map_or_else(|| self.reassembly.contains_key(&id), |s| s.2),
                departed: None,
            })
            .collect::<Vec<_>>();
        // Leavers that may still lack their leave (the old sequencer counted them in `stable`
        // until they had it, so those below the floor are done) are waited for here too.
        let deadline = self.now + Duration::from_millis(self.cfg.leave_linger_ms);
        let mut members = members;
        for &(id, seq) in &self.recent_leaves {
            if seq >= floor && id != self.me && !members.iter().any(|m| m.id == id) {
                members.push(MemberState {
                    id,
                    expect: floor,
                    held_next: floor,
                    last_pnum: 0,
                    join_seq: floor,
                    mid_message: false,
                    departed: Some((seq, deadline)),
                });
            }
        }
        self.ord = Some(Ordering {
            next_seq,
            bcast_next: next_seq,
            members,
            view_id: self.view.id,
            nudge: VecDeque::new(),
            pending_joins: VecDeque::new(),
            waiting: BTreeMap::new(),
            last_multicast: self.now,
            last_sync: self.now,
            // Learn where every member stands before history fills or acceptance stalls.
            sync_due: true,
            accept_due: false,
            leaving: None,
            successor: None,
            leave_deadline: self.now,
        });
        self.held_next = next_seq;
        self.seq_next_known = next_seq;
        self.nack_deadline = None;
        self.own_ordered = self
            .outq
            .front()
            .map(|f| f.pnum - 1)
            .unwrap_or(self.own_ordered);
        self.unsent = 0;
        self.req_deadline = None;
    }

    /// Everything that follows an input: order, account, deliver, look for gaps.
    pub(super) fn pump(&mut self) {
        self.refresh_detector();
        if self.is_sequencer() && self.phase == Phase::Member {
            self.order_pending_joins();
            let members = self.ord.as_ref().map_or(0, |o| o.members.len());
            if self.ord.as_ref().is_some_and(|o| !o.waiting.is_empty()) {
                for i in 0..members {
                    self.order_waiting(i);
                }
            }
            self.order_local();
            self.sequencer_bookkeeping();
        }
        self.deliver();
        if self.is_sequencer() && self.phase == Phase::Member {
            // Delivery may have moved our own expect; recompute stability.
            self.sequencer_bookkeeping();
            self.purge();
            self.finish_sequencer_leave();
        }
        self.check_gap();
        self.refresh_detector();
    }

    /// A sequencer leaves once its own messages are ordered and there is room for the leave.
    pub(super) fn sequencer_can_leave(&self) -> bool {
        self.leave_requested
            && self.leave_deadline.is_some()
            && self.unsent == self.outq.len()
            && self
                .ord
                .as_ref()
                .is_some_and(|o| o.leaving.is_none() && self.history_has_slot(o.next_seq))
    }

    pub(super) fn finish_sequencer_leave(&mut self) {
        let Some(o) = self.ord.as_ref() else { return };
        let Some(seq) = o.leaving else { return };
        if self.next_deliver <= seq {
            return;
        }
        // Once the successor has the handover it holds everything up to it and answers the
        // others (they follow whoever orders the newest messages), so we may go. Without a
        // successor that has it the group would have no sequencer: wait for it, up to the
        // linger bound (it may have left in turn; one that never got the handover is a case
        // for crash recovery).
        let successor_has_it = o
            .successor
            .is_none_or(|id| o.members.iter().any(|m| m.id == id && m.expect > seq));
        if successor_has_it || self.now >= o.leave_deadline {
            self.phase = Phase::Left;
            self.events.push_back(Event::Left);
        }
    }

    // ----- transmission ---------------------------------------------------------------------

    pub(super) fn write_ordered(
        &mut self,
        buf: &mut Vec<u8>,
        from: u64,
        until: u64,
        with_payloads: bool,
    ) -> u64 {
        let header = self.header(ptype::ORDERED);
        let state = self.seq_state();
        let max = self.cfg.max_datagram_bytes;
        let mut w = OrderedWriter::new(buf, &header, state, from);
        let mut seq = from;
        while seq < until {
            let Some(e) = self.history.get(seq) else {
                break;
            };
            let payload = e.payload.as_deref().unwrap_or(&[]);
            let has_payload = e.payload.is_some() && (with_payloads || !e.bb);
            let len = ORDERED_ENTRY_OVERHEAD + if has_payload { payload.len() } else { 0 };
            if !w.is_empty() && w.len() + len > max {
                break;
            }
            w.push(&OrderedEntry {
                kind: e.kind,
                has_payload,
                sender: e.sender,
                pnum: e.pnum,
                frag_index: e.frag_index,
                frag_count: e.frag_count,
                payload: if has_payload { payload } else { &[] },
            });
            seq += 1;
        }
        seq
    }

    pub(super) fn transmit_sequencer(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        let now = self.now;
        let o = self.ord.as_ref()?;
        // New entries first: they are what everyone waits for. Entries every member already
        // delivered (a lone sequencer's own) need no broadcast.
        let from = o.bcast_next.max(self.history.base());
        if from < o.next_seq {
            let until = o.next_seq;
            let end = self.write_ordered(buf, from, until, false);
            assert!(end > from, "an ordered entry always fits in a datagram");
            let o = self.ord.as_mut().expect("sequencer");
            o.bcast_next = end;
            o.last_multicast = now;
            o.accept_due = false;
            return Some(Destination::Group);
        }
        self.ord.as_mut().expect("sequencer").bcast_next = from;
        if let Some(dest) = self.transmit_retrans(buf) {
            return Some(dest);
        }
        if let Some(to) = self.ord.as_mut().expect("sequencer").nudge.pop_front() {
            let header = self.header(ptype::ACCEPT);
            encode_control(buf, &header, &Body::Accept(self.seq_state()));
            return Some(Destination::Peer(to));
        }
        let o = self.ord.as_ref().expect("sequencer");
        if o.accept_due {
            let header = self.header(ptype::ACCEPT);
            encode_control(buf, &header, &Body::Accept(self.seq_state()));
            let o = self.ord.as_mut().expect("sequencer");
            o.accept_due = false;
            o.last_multicast = now;
            return Some(Destination::Group);
        }
        if o.sync_due && now >= o.last_sync + self.repair_rto() / 2 {
            let header = self.header(ptype::SYNC);
            encode_control(buf, &header, &Body::Sync(self.seq_state()));
            let o = self.ord.as_mut().expect("sequencer");
            o.sync_due = false;
            o.last_sync = now;
            o.last_multicast = now;
            self.counters.syncs_sent += 1;
            return Some(Destination::Group);
        }
        None
    }

    pub(super) fn transmit_member(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        let now = self.now;
        let to = Destination::Peer(self.sequencer_hint);
        if self.phase == Phase::Joining {
            if self.join_deadline.is_some_and(|d| now >= d) {
                let header = self.header(ptype::JOIN_REQ);
                encode_control(buf, &header, &Body::JoinReq);
                self.join_deadline = Some(now + Duration::from_millis(self.cfg.join_retry_ms));
                return Some(Destination::Group);
            }
            return None;
        }
        if self.phase != Phase::Member {
            return None;
        }
        if self.need_nack {
            self.need_nack = false;
            if let Some((peer, limit)) = self.repair_target() {
                if self.held_next < limit {
                    let header = self.header(ptype::RETRANS);
                    encode_control(
                        buf,
                        &header,
                        &Body::Retrans {
                            from: self.held_next,
                            to: limit,
                            expect: self.next_deliver,
                        },
                    );
                    self.counters.nacks_sent += 1;
                    return Some(Destination::Peer(peer));
                }
            }
        }
        if self.recovering() {
            // Recovery mode: no requests, status reports or leaves until the reset.
            return None;
        }
        if self.need_status && !self.is_sequencer() {
            self.need_status = false;
            self.delivered_since_report = 0;
            let header = self.header(ptype::STATUS);
            encode_control(
                buf,
                &header,
                &Body::Status {
                    expect: self.next_deliver,
                    held_next: self.held_next,
                },
            );
            self.counters.acks_sent += 1;
            return Some(to);
        }
        if !self.is_sequencer()
            && self.unsent < self.outq.len()
            && self.in_flight() < self.cwnd.get()
        {
            let bb = self.outq[self.unsent].bb;
            let header = self.header(if bb {
                ptype::BCAST_REQ_BB
            } else {
                ptype::BCAST_REQ_PB
            });
            let max = self.cfg.max_datagram_bytes;
            let mut w = ReqWriter::new(buf, &header, self.next_deliver, self.held_next);
            let window_end = self.unsent + (self.cwnd.get() - self.in_flight());
            let mut last = 0;
            while self.unsent < self.outq.len().min(window_end) {
                let f = &self.outq[self.unsent];
                last = f.pnum;
                if f.bb != bb
                    || (!w.is_empty() && w.len() + REQ_ENTRY_OVERHEAD + f.payload.len() > max)
                {
                    break;
                }
                w.push(&ReqEntry {
                    pnum: f.pnum,
                    frag_index: f.frag_index,
                    frag_count: f.frag_count,
                    payload: &f.payload,
                });
                self.unsent += 1;
            }
            self.delivered_since_report = 0;
            if last > self.max_sent_pnum {
                // Karn's rule: only a request sent for the first time measures the RTT.
                if self.rtt_probe.is_none() && self.outq[self.unsent - 1].pnum > self.max_sent_pnum
                {
                    self.rtt_probe = Some((last, now));
                }
                self.max_sent_pnum = last;
            }
            if self.req_deadline.is_none() {
                self.req_deadline = Some(now + self.rto());
            }
            return Some(if bb { Destination::Group } else { to });
        }
        // Leave once every own message is delivered, so that nothing sent is cut off.
        if self.leave_requested
            && !self.is_sequencer()
            && self.outq.is_empty()
            && self.leave_deadline.is_some_and(|d| now >= d)
        {
            let header = self.header(ptype::LEAVE_REQ);
            encode_control(
                buf,
                &header,
                &Body::LeaveReq {
                    expect: self.next_deliver,
                },
            );
            self.leave_deadline = Some(now + self.repair_rto());
            return Some(to);
        }
        None
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
        } else if self.accepted_next < o.next_seq {
            quiet_since + self.repair_rto()
        } else if self.stable < o.next_seq {
            quiet_since + Duration::from_millis(self.cfg.sync_interval_ms)
        } else {
            return None;
        };
        Some(at.max(allowed))
    }

    /// The earliest deadline among the engine's timers.
    pub(super) fn next_timeout(&self) -> Option<Time> {
        if self.phase == Phase::Left {
            return None;
        }
        let mut t: Option<Time> = None;
        let mut at = |d: Option<Time>| {
            if let Some(d) = d {
                t = Some(t.map_or(d, |x| x.min(d)));
            }
        };
        at(self.join_deadline);
        at(self.nack_deadline);
        // The leave timer only runs while the leave can go out; otherwise an input unblocks it
        // (in recovery mode, the reset).
        if (self.is_sequencer() && self.sequencer_can_leave())
            || (!self.is_sequencer() && self.outq.is_empty() && !self.recovering())
        {
            at(self.leave_deadline);
        }
        if !self.is_sequencer() && self.outq.iter().any(|f| f.pnum > self.own_ordered) {
            at(self.req_deadline);
        }
        at(self.sync_at());
        at(self.detector.next_timeout());
        at(self.recovery_deadline());
        if let Some(o) = &self.ord {
            if o.leaving.is_some() && o.leave_deadline > self.now {
                at(Some(o.leave_deadline));
            }
            if let Some(d) = o
                .members
                .iter()
                .filter_map(|m| m.departed.map(|d| d.1))
                .min()
            {
                at(Some(d));
            }
        }
        t
    }
}

impl Sequencer {
    /// Whether a datagram of another incarnation is taken anyway: a joiner follows the newest
    /// incarnation it hears of, and joins are welcome from any. Other ones are dropped; a newer
    /// one makes us ask what happened, an older one's sender may be told (see `recovery`).
    pub(super) fn accept_incarnation(&mut self, header: &Header) -> bool {
        let newer = header.incarnation > self.incarnation;
        match self.phase {
            Phase::Joining if newer => {
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
}

impl Sequencer {
    pub(super) fn on_datagram(&mut self, now: Time, _from: NodeId, datagram: &[u8]) {
        self.now = self.now.max(now);
        if self.phase == Phase::Left {
            return;
        }
        // One copy per datagram; every payload in it is a slice of this buffer (no per-message
        // allocation).
        let data = Bytes::copy_from_slice(datagram);
        let (header, body) = match packet::decode(&data) {
            Ok(p) => p,
            Err(_) => {
                self.counters.malformed_dropped += 1;
                return;
            }
        };
        if header.group != self.cfg.group {
            self.counters.foreign_dropped += 1;
            return;
        }
        if header.sender == self.me {
            return; // our own multicast, looped back
        }
        let from = header.sender;
        if let Body::Result {
            incarnation,
            seq,
            stable,
            settled,
            view,
        } = body
        {
            // A result names its incarnation itself: it reaches members of older ones.
            self.counters.datagrams_received += 1;
            self.detector.heard(from, now);
            self.on_result(from, incarnation, seq, stable, settled, view);
            self.pump();
            return;
        }
        if header.incarnation != self.incarnation && !self.accept_incarnation(&header) {
            self.counters.foreign_dropped += 1;
            return;
        }
        self.counters.datagrams_received += 1;
        self.detector.heard(from, now);
        if from == self.sequencer_hint {
            self.heard_sequencer = true;
            self.last_heard_sequencer = now;
        }
        let seq_role = self.is_sequencer();
        if let Some(o) = self.ord.as_mut() {
            if let (Some(seq), Some(succ)) = (o.leaving, o.successor) {
                let sequencing =
                    matches!(header.ptype, ptype::ORDERED | ptype::ACCEPT | ptype::SYNC);
                if from == succ && sequencing {
                    // Our successor orders: it has delivered our leave.
                    if let Some(m) = o.members.iter_mut().find(|m| m.id == succ) {
                        m.expect = m.expect.max(seq + 1);
                    }
                }
            }
        }
        let recovering = self.recovering();
        match body {
            // In recovery mode only what the recovery needs is taken (seed 002 section 4):
            // repairs, invitations, votes; nothing that moves the old order.
            Body::BcastReq { .. }
            | Body::Accept(_)
            | Body::Sync(_)
            | Body::Status { .. }
            | Body::LeaveReq { .. }
                if recovering => {}
            Body::JoinReq if recovering => {}
            Body::BcastReq {
                bb,
                expect,
                held_next,
                entries,
            } => {
                if seq_role {
                    self.on_request(from, expect, held_next, entries, bb, &data);
                } else if bb && self.phase == Phase::Member {
                    self.on_bb_data(from, entries, &data);
                }
            }
            Body::Ordered {
                state,
                base_seq,
                entries,
            } => self.on_ordered(from, state, base_seq, entries, &data),
            Body::Accept(s) => self.apply_state(from, s),
            Body::Sync(s) => {
                self.apply_state(from, s);
                if self.phase == Phase::Member && !seq_role {
                    self.need_status = true;
                }
                if self.phase == Phase::Member && (seq_role || from != self.sequencer_hint) {
                    // A departing sequencer asks who has its leave (its successor included):
                    // answer it directly.
                    self.farewell = Some(from);
                }
            }
            Body::Status { expect, held_next } => {
                if let Some(i) = self.member_index(from) {
                    self.note_member_state(i, expect, held_next);
                }
            }
            Body::Retrans {
                from: f,
                to,
                expect,
            } => {
                self.counters.nacks_received += 1;
                if recovering {
                    if self.recovery_invites(from) {
                        self.queue_retrans(from, f, to);
                    }
                } else if let Some(i) = self.member_index(from) {
                    self.note_member_state(i, expect, 0);
                    self.queue_retrans(from, f, to);
                }
            }
            Body::JoinReq => self.on_join_req(from),
            Body::LeaveReq { expect } => self.on_leave_req(from, expect),
            Body::AliveReq => {
                if self.phase == Phase::Member && self.view.members.contains(&from) {
                    self.control.alive(from);
                }
            }
            Body::Alive => {}
            Body::ReformReq {
                held_next,
                target,
                suspect,
                round,
                interval_ms,
            } => self.on_reform_req(from, held_next, target, suspect, round, interval_ms),
            Body::Vote {
                coordinator,
                coordinator_held,
                held_next,
                expect,
                round,
                kind,
            } => self.on_vote(
                from,
                kind,
                coordinator,
                coordinator_held,
                held_next,
                expect,
                round,
            ),
            Body::Result { .. } => unreachable!("handled above"),
            Body::ResultAck {
                incarnation,
                last_pnum,
                mid_message,
            } => self.on_result_ack(from, incarnation, last_pnum, mid_message),
        }
        self.pump();
    }

    pub(super) fn on_timeout(&mut self, now: Time) {
        self.now = self.now.max(now);
        if self.phase == Phase::Left {
            return;
        }
        if self.req_deadline.is_some_and(|d| now >= d) {
            self.req_deadline = None;
            // A sender that hears nothing from the sequencer over its retries declares it
            // failed (seed 002 section 5.2, SendToGroup).
            if self.heard_sequencer {
                self.silent_req_timeouts = 0;
            } else {
                self.silent_req_timeouts += 1;
            }
            self.heard_sequencer = false;
            // Never sooner than the probes would: a paused sequencer is not declared dead by
            // the backed-off retries of an impatient sender.
            let silent_for = now.saturating_since(self.last_heard_sequencer);
            if self.cfg.alive_interval_ms > 0
                && self.silent_req_timeouts > self.cfg.alive_retries
                && silent_for >= self.detector.failure_timeout()
            {
                let suspect = self.sequencer_hint;
                self.member_failed(suspect);
            }
            self.rtt.on_timeout();
            self.cwnd.on_loss();
            self.rtt_probe = None;
            // Go back N: resend everything not yet seen ordered.
            if let Some(i) = self.outq.iter().position(|f| f.pnum > self.own_ordered) {
                if i < self.unsent {
                    self.counters.retransmissions += (self.unsent - i) as u64;
                }
                self.unsent = self.unsent.min(i);
            }
        }
        let rto = self.repair_rto();
        if self.nack_deadline.is_some_and(|d| now >= d) {
            self.nack_deadline = None;
            if self
                .repair_target()
                .is_some_and(|(_, limit)| self.held_next < limit)
            {
                self.need_nack = true;
                self.nack_deadline = Some(now + rto);
            }
        }
        if self.sync_at().is_some_and(|t| now >= t) {
            self.ord.as_mut().expect("sequencer").sync_due = true;
        }
        if let Some(suspect) = self.detector.on_timeout(now) {
            self.member_failed(suspect);
        }
        self.recovery_timeout(now);
        self.pump();
    }

    pub(super) fn submit_message(
        &mut self,
        now: Time,
        payload: Bytes,
        _qos: Qos,
    ) -> Result<u64, SendError> {
        self.now = self.now.max(now);
        if self.phase == Phase::Member && self.recovering() {
            return Err(SendError::GroupFailed);
        }
        if self.phase != Phase::Member
            || self.leave_requested
            || self.ord.as_ref().is_some_and(|o| o.leaving.is_some())
        {
            return Err(SendError::NotMember);
        }
        if payload.len() > self.cfg.max_message_bytes {
            return Err(SendError::TooLarge);
        }
        // Ordered entries carry more header than requests, so this size fits both.
        let frag = self.cfg.fragment_bytes();
        const { assert!(REQ_FIXED + REQ_ENTRY_OVERHEAD <= ORDERED_FIXED + ORDERED_ENTRY_OVERHEAD) };
        let bb = payload.len() >= self.cfg.large_threshold_bytes;
        let count = payload.len().div_ceil(frag).max(1);
        if count > u16::MAX as usize {
            return Err(SendError::TooLarge);
        }
        if self.outq.len() + count > self.cfg.send_window_msgs && !self.outq.is_empty() {
            return Err(SendError::WouldBlock);
        }
        let msg = self.next_pnum;
        for i in 0..count {
            let part =
                payload.slice((i * frag).min(payload.len())..((i + 1) * frag).min(payload.len()));
            self.outq.push_back(OutFrag {
                pnum: self.next_pnum,
                bb,
                frag_index: i as u16,
                frag_count: count as u16,
                payload: part,
            });
            self.next_pnum += 1;
        }
        self.counters.submitted += 1;
        self.pump();
        Ok(msg)
    }

    pub(super) fn request_leave(&mut self, now: Time) {
        self.now = self.now.max(now);
        match self.phase {
            Phase::Joining => {
                self.phase = Phase::Left;
                self.events.push_back(Event::Left);
            }
            Phase::Member if !self.leave_requested => {
                self.leave_requested = true;
                self.leave_deadline = Some(now);
                self.pump();
            }
            _ => {}
        }
    }

    pub(super) fn transmit(&mut self, now: Time, buf: &mut Vec<u8>) -> Option<Destination> {
        self.now = self.now.max(now);
        if let Some(to) = self.farewell.take() {
            let header = self.header(ptype::STATUS);
            let body = Body::Status {
                expect: self.next_deliver,
                held_next: self.held_next,
            };
            encode_control(buf, &header, &body);
            self.counters.datagrams_sent += 1;
            self.counters.bytes_sent += buf.len() as u64;
            return Some(Destination::Peer(to));
        }
        if self.phase == Phase::Left {
            return None;
        }
        if let Some(dest) = self
            .transmit_control(buf)
            .or_else(|| self.transmit_recovery(buf))
            .or_else(|| {
                // Repairs this member serves during recovery.
                if self.recovering() {
                    self.transmit_retrans(buf)
                } else {
                    None
                }
            })
        {
            self.counters.datagrams_sent += 1;
            self.counters.bytes_sent += buf.len() as u64;
            return Some(dest);
        }
        if self.sequencer_can_leave() {
            let me = self.me;
            self.leave_deadline = None;
            self.order_leave(me);
            self.pump();
        }
        let dest = if self.is_sequencer() {
            self.transmit_sequencer(buf)
                .or_else(|| self.transmit_member(buf))
        } else {
            self.transmit_member(buf)
        };
        if dest.is_some() {
            self.counters.datagrams_sent += 1;
            self.counters.bytes_sent += buf.len() as u64;
        }
        dest
    }

    pub(super) fn next_event(&mut self) -> Option<Event> {
        let e = self.events.pop_front();
        if self.events.is_empty() && self.next_deliver < self.accepted_next {
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
            resilience: self.cfg.resilience,
            incarnation: self.incarnation,
            history_used: self.history.len(),
            history_capacity: self.history.capacity(),
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
            self.next_deliver,
            self.held_next,
            self.accepted_next,
            self.seq_next_known,
            self.stable,
            self.history.base(),
            self.outq.len(),
            self.unsent,
            self.own_ordered,
            self.recovery,
            self.awaiting,
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
            && self.outq.len() < self.cfg.send_window_msgs
    }
}
