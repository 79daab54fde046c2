//! What the recovery keeps (Amoeba paper sections 3, 4 and 5.3): the failure detector, recovery
//! mode with the part this member plays in it (participant, coordinator), the result of the
//! newest reset, and the small answers owed to single members.
//!
//! Why apart from the protocol (`recovery`, `reset`, `control`): the member holds this state,
//! and the protocol works on the member; here the state imports nothing of the member.

use crate::common::{DetectorParams, FailureDetector};
use crate::engine::{NodeId, Time};
use crate::sequencer::config::Config;
use crate::sequencer::packet::VoteKind;
use crate::sequencer::shared::MAX_RETRANS_QUEUE;
use bytes::Bytes;
use std::collections::VecDeque;
use std::time::Duration;

/// A coordinator's record of one member's vote.
#[derive(Clone, Debug)]
pub(in crate::sequencer) struct Voter {
    pub(in crate::sequencer::recovery) id: NodeId,
    pub(in crate::sequencer::recovery) held_next: u64,
    pub(in crate::sequencer::recovery) expect: u64,
    /// The lowest entry it still holds: what it can repair from.
    pub(in crate::sequencer::recovery) base: u64,
    pub(in crate::sequencer::recovery) heard_at: Time,
    /// The newest invitation round it answered.
    pub(in crate::sequencer::recovery) round: u32,
}

/// What a vote says the voter holds: `[base, held_next)`, delivered below `expect`.
#[derive(Copy, Clone, Debug)]
pub(in crate::sequencer) struct VoteHeld {
    pub(in crate::sequencer) held_next: u64,
    pub(in crate::sequencer) expect: u64,
    pub(in crate::sequencer) base: u64,
}

/// What a coordinator knows.
#[derive(Clone, Debug)]
pub(in crate::sequencer) struct Coord {
    /// Invitation rounds sent in this attempt.
    pub(in crate::sequencer::recovery) round: u32,
    /// Members that voted for us (never ourselves).
    pub(in crate::sequencer::recovery) voters: Vec<Voter>,
    /// Members believed failed (not waited for in phase 1): found so here (the suspect this
    /// member found failed, a coordinator it followed that fell silent), never on another
    /// member's word, so that an invitation cannot make a coordinator go on without a member
    /// that is alive.
    pub(in crate::sequencer::recovery) suspects: Vec<NodeId>,
    /// Members of the old view that answered as joiners ([`VoteKind::Joining`]): they never
    /// learnt of their admission, hold nothing, and gave up their join in this incarnation;
    /// they are neither waited for nor counted in the majority.
    pub(in crate::sequencer::recovery) renounced: Vec<NodeId>,
    /// Phase 2: every member of the new group must hold everything below this.
    pub(in crate::sequencer::recovery) target: Option<u64>,
}

/// The part a member plays in a recovery.
#[derive(Clone, Debug)]
pub(in crate::sequencer) enum Role {
    /// In recovery mode; no reset called here and no invitation accepted yet.
    Idle,
    /// Voted for `coordinator`, waits for its result.
    Participant {
        coordinator: NodeId,
        /// The coordinator's vote as it advertised it (to compare with other coordinators).
        coordinator_held: u64,
        /// Phase 2 target the coordinator announced (0: none yet).
        target: u64,
        /// When the coordinator was last heard.
        heard_at: Time,
        /// The newest invitation round heard from it.
        round: u32,
    },
    /// Invites the members of the old view.
    Coordinator(Coord),
}

/// Recovery mode: from a detected failure (or an invitation) until a reset is installed.
#[derive(Clone, Debug)]
pub(in crate::sequencer) struct RecoveryMode {
    /// The member whose failure started it.
    pub(in crate::sequencer::recovery) suspect: NodeId,
    /// Whether this member found the suspect failed itself (its probes, or the application's
    /// ResetGroup), rather than being told so by an invitation: only then does it, as
    /// coordinator, stop waiting for the suspect's vote before the rounds run out.
    pub(in crate::sequencer::recovery) suspect_found: bool,
    /// The view before the failure: who is invited.
    pub(in crate::sequencer::recovery) old_members: Vec<NodeId>,
    /// Smallest group the reset may form; `None`: a majority of the view it replaces (the
    /// newest view below the target, so that members whose leave is ordered do not count).
    pub(in crate::sequencer::recovery) min_members: Option<usize>,
    pub(in crate::sequencer::recovery) role: Role,
    /// When the next round is due (coordinator) or the coordinator counts as gone
    /// (participant).
    pub(in crate::sequencer::recovery) next_at: Option<Time>,
    /// A vote is owed to the coordinator.
    pub(in crate::sequencer::recovery) vote_due: bool,
    /// An invitation is due (coordinator).
    pub(in crate::sequencer::recovery) invite_due: bool,
    /// The coordinators this member voted for in this recovery (each once; members of the
    /// views it invites, so bounded by them): only their results may make it install a reset,
    /// since a coordinator's result names only members whose votes it counted.
    pub(in crate::sequencer::recovery) voted_for: Vec<NodeId>,
}

/// The result of the newest reset this member took part in (BC_RESULT), kept to answer members
/// of older incarnations.
#[derive(Clone, Debug)]
pub(in crate::sequencer) struct ResultRecord {
    pub(in crate::sequencer) incarnation: u32,
    pub(in crate::sequencer) seq: u64,
    pub(in crate::sequencer) stable: u64,
    pub(in crate::sequencer) view: Bytes,
}

/// A coordinator waiting for every member of the new group to acknowledge the result.
#[derive(Clone, Debug)]
pub(in crate::sequencer) struct AwaitAcks {
    pub(in crate::sequencer::recovery) pending: Vec<NodeId>,
    pub(in crate::sequencer::recovery) rounds: u32,
    pub(in crate::sequencer::recovery) next_at: Time,
}

/// What the failure detector's watch list depends on: the view, the ordering view (id and
/// size), the sequencer, and whether detection runs (a member in normal operation).
pub(in crate::sequencer) type DetectorKey = (u64, Option<(u64, usize)>, NodeId, bool);

/// Failure detection and crash recovery: the part of a member that watches its peers and, after
/// a failure, rebuilds the group.
///
/// Invariants: the detector watches nobody while `mode` or `awaiting` is set (recovery rounds
/// detect silence themselves); `awaiting` is only set on the coordinator of the newest reset.
#[derive(Clone, Debug)]
pub(in crate::sequencer) struct RecoveryState {
    /// BC_ALIVEREQ / BC_ALIVE failure detection.
    pub(in crate::sequencer) detector: FailureDetector,
    /// What the detector's watch list was computed from.
    pub(in crate::sequencer) detector_key: Option<DetectorKey>,
    /// Request timeouts in a row with nothing heard from the sequencer.
    pub(in crate::sequencer) silent_req_timeouts: u32,
    /// Whether the sequencer was heard since the last request timeout.
    pub(in crate::sequencer) heard_sequencer: bool,
    /// When the sequencer was last heard.
    pub(in crate::sequencer) last_heard_sequencer: Time,
    /// Recovery mode: from a detected failure until the group is reset.
    pub(in crate::sequencer) mode: Option<RecoveryMode>,
    /// As coordinator of a reset: the members that have not acknowledged it yet.
    pub(in crate::sequencer) awaiting: Option<AwaitAcks>,
    /// The newest reset installed here.
    pub(in crate::sequencer) last_result: Option<ResultRecord>,
    /// A coordinator fetches what it lacks from this member.
    pub(in crate::sequencer) repair_from: Option<NodeId>,
    /// As the new sequencer after a reset: where each member's stream of requests stands, as
    /// its acknowledgement said: (member, last protocol number ordered, mid-message).
    pub(in crate::sequencer) reset_streams: Vec<(NodeId, u64, bool)>,
    /// Small answers owed to single members.
    pub(in crate::sequencer) control: Control,
}

impl RecoveryState {
    pub(in crate::sequencer) fn new(cfg: &Config, now: Time) -> RecoveryState {
        RecoveryState {
            detector: FailureDetector::new(detector_params(cfg)),
            detector_key: None,
            silent_req_timeouts: 0,
            heard_sequencer: false,
            last_heard_sequencer: now,
            mode: None,
            awaiting: None,
            last_result: None,
            repair_from: None,
            reset_streams: Vec::new(),
            control: Control::default(),
        }
    }
}

/// The detector's parameters from the configuration.
fn detector_params(cfg: &Config) -> DetectorParams {
    DetectorParams {
        interval: Duration::from_millis(cfg.alive_interval_ms),
        retries: cfg.alive_retries.max(1),
        min_timeout: Duration::from_millis(cfg.alive_timeout_ms),
    }
}

/// Whether coordinator `a` (with vote `a_held`) beats coordinator `b`.
pub(in crate::sequencer::recovery) fn better(
    a_held: u64,
    a: NodeId,
    b_held: u64,
    b: NodeId,
) -> bool {
    a_held > b_held || (a_held == b_held && a < b)
}

/// Small answers owed to single members, each queue bounded.
#[derive(Clone, Debug, Default)]
pub(in crate::sequencer) struct Control {
    /// BC_ALIVE owed: to whom, with the token of the probe.
    pub(in crate::sequencer::recovery) alive: VecDeque<(NodeId, u32)>,
    /// BC_RESULTACK owed.
    pub(in crate::sequencer::recovery) acks: VecDeque<NodeId>,
    /// Whom to follow, told to members that followed us, or a better coordinator told to the
    /// one we follow: (to, coordinator, its vote).
    pub(in crate::sequencer::recovery) redirects: VecDeque<(NodeId, VoteKind, NodeId, u64)>,
    /// Members of older incarnations owed the newest result.
    pub(in crate::sequencer::recovery) results: VecDeque<NodeId>,
    /// Multicast the result (coordinator, until acknowledged).
    pub(super) result_multicast: bool,
    /// A member of a newer incarnation to ask what happened, and when we last asked.
    pub(in crate::sequencer::recovery) query_to: Option<NodeId>,
    pub(in crate::sequencer::recovery) last_query: Option<Time>,
}

fn push_bounded<T: PartialEq>(q: &mut VecDeque<T>, x: T) {
    if q.len() < MAX_RETRANS_QUEUE && !q.contains(&x) {
        q.push_back(x);
    }
}

impl Control {
    pub(in crate::sequencer) fn alive(&mut self, to: NodeId, token: u32) {
        push_bounded(&mut self.alive, (to, token));
    }

    /// Ask `to` what happened (it is of a newer incarnation), at most once per `gap`.
    pub(super) fn query(&mut self, to: NodeId, now: Time, gap: std::time::Duration) {
        if self.last_query.is_some_and(|t| now < t + gap) {
            return;
        }
        self.last_query = Some(now);
        self.query_to = Some(to);
    }

    pub(super) fn ack(&mut self, to: NodeId) {
        push_bounded(&mut self.acks, to);
    }

    pub(super) fn redirect(&mut self, to: NodeId, c: NodeId, c_held: u64) {
        self.word(to, VoteKind::Redirect, c, c_held);
    }

    pub(super) fn forward(&mut self, to: NodeId, c: NodeId, c_held: u64) {
        self.word(to, VoteKind::Forward, c, c_held);
    }

    /// One word per destination is enough: the newest replaces an older one.
    pub(super) fn word(&mut self, to: NodeId, kind: VoteKind, c: NodeId, c_held: u64) {
        match self.redirects.iter_mut().find(|r| r.0 == to) {
            Some(r) => *r = (to, kind, c, c_held),
            None => push_bounded(&mut self.redirects, (to, kind, c, c_held)),
        }
    }

    pub(super) fn answer_stale(&mut self, to: NodeId) {
        push_bounded(&mut self.results, to);
    }
}
