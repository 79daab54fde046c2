//! The reformation part (section 4.4): the reformation under way, the versions seen and
//! bound, and the failure detector that starts one. The protocol itself is `reform.rs`.

use super::packet::{RecoveryNewList, RecoveryVote, SyncPoint};
use crate::common::{DetectorParams, FailureDetector};
use crate::engine::{NodeId, Time};
use crate::registry::RecoveryPolicy;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A reformation this member takes part in.
#[derive(Clone)]
pub(super) struct Reformation {
    /// The version (view id) being formed.
    pub version: u64,
    /// Who leads it.
    pub initiator: NodeId,
    /// The member found failed, as the initiator said.
    pub suspect: Option<NodeId>,
    /// The shared sync point as last heard from the initiator (at the initiator: the highest
    /// reported).
    pub target: SyncPoint,
    /// The New List of the first phase, once held (this member is then bound to it).
    pub new_list: Option<RecoveryNewList>,
    /// The initiator's own state.
    pub poll: Option<Poll>,
    /// When this member next repeats what it sends.
    pub next_at: Time,
    /// When the initiator was last heard (a participant gives up after a silence).
    pub heard_at: Time,
    /// When the reformation began here.
    pub began: Time,
}

/// The initiator's side: the old view, the votes, progress.
#[derive(Clone)]
pub(super) struct Poll {
    /// The old view.
    pub(super) old: Vec<NodeId>,
    /// The votes of its members.
    pub(super) votes: BTreeMap<NodeId, RecoveryVote>,
    /// Voters, members at the sync point, and the sync point's ACKs, as of the last round.
    pub(super) progress: (usize, usize, u64),
    /// Rounds in a row without progress.
    pub(super) stalled: u32,
    /// The commit's first phase, once under way.
    pub(super) commit: Option<Commit>,
}

/// The first phase of the commit at the initiator.
#[derive(Clone)]
pub(super) struct Commit {
    /// The new list's members.
    pub(super) members: Vec<NodeId>,
    /// Those that acknowledged it.
    pub(super) acked: BTreeSet<NodeId>,
    /// The New List sent.
    pub(super) list: RecoveryNewList,
    /// Rounds it was sent in.
    pub(super) rounds: u32,
}

/// The reformation part: failure detection and what a member keeps about reformations
/// between them. (Its timers, the probing round of a quiescent ring and the retry after a
/// failed attempt, are in the engine's timer table.)
#[derive(Clone)]
pub(super) struct RecoveryState {
    /// The current reformation, if any.
    pub current: Option<Reformation>,
    /// The largest (version, initiator) joined.
    pub seen: (u64, NodeId),
    /// The largest version whose New List this member acknowledged: it joins only larger ones.
    pub bound: u64,
    /// The last version this member committed.
    pub last_committed: u64,
    /// When each peer was last told it is not a member.
    pub told: BTreeMap<NodeId, Time>,
    /// This leaver was first told it is out while its next ACK to apply was `.0`, at `.1`.
    pub leaver_told: Option<(u64, Time)>,
    /// Members of this member's ring that told it it was expelled, while it held view `.0`
    /// (none of them entitled alone; see `Ring::may_expel_me`).
    pub expel_claims: (u64, BTreeSet<NodeId>),
    /// This member's own last reformation found fewer members at its sync point than it needs
    /// (`ResetFailed`), and nothing went on here since (no commit, no other member's ACK): its
    /// view cannot go on, which backs a ring member's word that it is out.
    pub came_up_short: bool,
    /// Reformations this member committed.
    pub committed: u64,
    /// How long the last committed reformation took here, from its start to the commit.
    pub last_took: Duration,
    /// The common failure detector on the ring's other members (none when switched off).
    pub detector: Option<FailureDetector>,
    /// The failure was reported to an application that resets by hand (`auto_reset` off).
    pub failure_reported: bool,
    /// What a reformation needs, and whether it starts by itself.
    pub policy: RecoveryPolicy,
    /// Times this member found it had stood still ([`FailureDetector::run`]), and the fences
    /// it raised and lifted then ([`crate::common::Fence`]).
    pub stalls: u64,
    pub fences_raised: u64,
    pub fences_lifted: u64,
}

impl RecoveryState {
    /// No reformation yet; failures found with the detector `policy` asks for.
    pub(super) fn new(policy: RecoveryPolicy) -> RecoveryState {
        RecoveryState {
            current: None,
            seen: (0, NodeId(0)),
            bound: 0,
            last_committed: 0,
            told: BTreeMap::new(),
            leaver_told: None,
            expel_claims: (0, BTreeSet::new()),
            came_up_short: false,
            committed: 0,
            last_took: Duration::ZERO,
            detector: (policy.alive_interval_ms > 0).then(|| {
                FailureDetector::new(DetectorParams {
                    interval: Duration::from_millis(policy.alive_interval_ms),
                    retries: policy.alive_retries.max(1),
                    min_timeout: Duration::from_millis(policy.alive_timeout_ms),
                })
            }),
            failure_reported: false,
            policy,
            stalls: 0,
            fences_raised: 0,
            fences_lifted: 0,
        }
    }

    /// The smallest new list the policy accepts, out of an old view of `old` members.
    pub(super) fn needed(&self, old: usize) -> usize {
        match self.policy.min_members {
            0 => old / 2 + 1,
            n => n.min(old.max(1)),
        }
    }

    /// Commits version `version`, begun at `began`: it binds, and counts.
    pub(super) fn on_commit(&mut self, version: u64, began: Time, now: Time) {
        debug_assert!(self.current.is_none(), "a reformation commits once");
        self.bound = self.bound.max(version);
        self.came_up_short = false;
        debug_assert!(version >= self.last_committed, "versions only grow");
        self.last_committed = version;
        self.committed += 1;
        self.last_took = now.saturating_since(began);
    }
}
