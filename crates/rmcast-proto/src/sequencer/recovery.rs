//! Crash recovery (seed 002 sections 3, 4 and 5.3): failure detection, recovery mode, and
//! ResetGroup by the invitation protocol.
//!
//! - **Detection.** The sequencer watches the members, a member watches the sequencer (a
//!   [`FailureDetector`]: BC_ALIVEREQ / BC_ALIVE with bounded retries); a sender whose requests
//!   go unanswered with nothing heard from the sequencer after `alive_retries` timeouts also
//!   declares it failed.
//! - **Recovery mode.** A member that found a failure, or was invited by a coordinator, stops
//!   ordering and sending and ignores the old sequencer's acceptance: only what was accepted
//!   before is delivered, so nothing a survivor delivers can be ordered differently later.
//! - **Phase 1.** Every member that calls ResetGroup becomes a coordinator and multicasts
//!   BC_REFORMREQ with its vote (the highest sequence number it holds contiguously), its round
//!   and its round interval; members answer BC_VOTE. Between coordinators the one with the
//!   higher vote (lower id on a tie) wins: the other yields, votes for it and redirects its
//!   voters to it. A participant stays with its coordinator until told otherwise or until that
//!   one is silent for `alive_retries + 1` of its rounds, and a coordinator counts only votes of
//!   its last two rounds, so no vote counts for two coordinators. A coordinator stops inviting
//!   once every member of the old view voted for it or stayed silent for `alive_retries` rounds.
//! - **Phase 2.** With at least `min_members` (itself included; by default a majority of the
//!   view the reset replaces) the coordinator sets the target `T`, the highest vote: it fetches
//!   what it lacks from the best member, every member fetches what it lacks from the
//!   coordinator, and once every member of the new group holds everything below `T` it installs
//!   BC_RESULT (new incarnation, members, itself as sequencer) as the entry at `T` and multicasts
//!   it. Members install it, acknowledge (BC_RESULTACK, with where their request stream stands)
//!   and go back to normal operation; the coordinator starts ordering only once all of them
//!   acknowledged (the group is then *settled*).
//! - **Crashes during recovery** restart it: a silent voter is dropped, a silent coordinator is
//!   replaced by its voters, a member that never acknowledges the result makes the new group
//!   recover in turn. Fewer than `min_members` reachable: [`Recovery::ResetFailed`] and the group
//!   waits, inviting again. A member whose leave is ordered votes but does not coordinate.
//! - **Incarnations.** Datagrams of an older incarnation are ignored; a member that sends one
//!   (it was cut off) is answered with the newest BC_RESULT, which tells it whether it belongs to
//!   the new group or was left out ([`Recovery::Expelled`]). A result that reached only part of
//!   its members (a partition cut it) may leave them in a second group of the same incarnation
//!   that never settles: when they hear from the settled one, they give way.
//!
//! Why this is safe: entries below `T` were all assigned by the old incarnation's one
//! sequencer, so any member that holds one holds the same; every member of the new group holds
//! all of them before anything new is ordered; and a completed send was held contiguously by
//! `r + 1` members, so with at most `r` of them gone some voter holds it and `T` covers it.
//!
//! [`FailureDetector`]: crate::common::FailureDetector

use super::engine::{Phase, Sequencer, MAX_RETRANS_QUEUE};
use super::history::Entry;
use super::packet::{encode_control, ptype, Body, EntryKind, VoteKind};
use super::Config;
use crate::common::{decode_view, view_bytes, DetectorParams, FailureDetector};
use crate::engine::{Destination, Event, NodeId, Recovery, SendError, Time};
use bytes::Bytes;
use std::collections::VecDeque;
use std::time::Duration;

/// A coordinator's record of one member's vote.
#[derive(Clone, Debug)]
pub(super) struct Voter {
    id: NodeId,
    held_next: u64,
    expect: u64,
    heard_at: Time,
    /// The newest invitation round it answered.
    round: u32,
}

/// What a coordinator knows.
#[derive(Clone, Debug)]
pub(super) struct Coord {
    /// Invitation rounds sent in this attempt.
    round: u32,
    /// Members that voted for us (never ourselves).
    voters: Vec<Voter>,
    /// Members believed failed (not waited for in phase 1).
    suspects: Vec<NodeId>,
    /// Phase 2: every member of the new group must hold everything below this.
    target: Option<u64>,
}

/// The part a member plays in a recovery.
#[derive(Clone, Debug)]
pub(super) enum Role {
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
pub(super) struct RecoveryMode {
    /// The member whose failure started it.
    suspect: NodeId,
    /// The view before the failure: who is invited.
    old_members: Vec<NodeId>,
    /// Smallest group the reset may form; `None`: a majority of the view it replaces (the
    /// newest view below the target, so that members whose leave is ordered do not count).
    min_members: Option<usize>,
    role: Role,
    /// When the next round is due (coordinator) or the coordinator counts as gone
    /// (participant).
    next_at: Option<Time>,
    /// A vote is owed to the coordinator.
    vote_due: bool,
    /// An invitation is due (coordinator).
    invite_due: bool,
}

/// The result of the newest reset this member took part in (BC_RESULT), kept to answer members
/// of older incarnations.
#[derive(Clone, Debug)]
pub(super) struct ResultRecord {
    pub(super) incarnation: u32,
    pub(super) seq: u64,
    pub(super) stable: u64,
    pub(super) view: Bytes,
}

/// A coordinator waiting for every member of the new group to acknowledge the result.
#[derive(Clone, Debug)]
pub(super) struct AwaitAcks {
    pending: Vec<NodeId>,
    rounds: u32,
    next_at: Time,
}

/// What the failure detector's watch list depends on: the view, the ordering view (id and
/// size), the sequencer, and whether detection runs (a member in normal operation).
pub(super) type DetectorKey = (u64, Option<(u64, usize)>, NodeId, bool);

/// Failure detection and crash recovery: the part of a member that watches its peers and, after
/// a failure, rebuilds the group.
///
/// Invariants: the detector watches nobody while `mode` or `awaiting` is set (recovery rounds
/// detect silence themselves); `awaiting` is only set on the coordinator of the newest reset.
#[derive(Debug)]
pub(super) struct RecoveryState {
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
    pub(super) mode: Option<RecoveryMode>,
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
}

impl RecoveryState {
    pub(super) fn new(cfg: &Config, now: Time) -> RecoveryState {
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
fn better(a_held: u64, a: NodeId, b_held: u64, b: NodeId) -> bool {
    a_held > b_held || (a_held == b_held && a < b)
}

impl Sequencer {
    /// Whether the group is in recovery mode here.
    pub(super) fn recovering(&self) -> bool {
        self.rec.mode.is_some()
    }

    /// How long a round of the recovery protocol waits for answers.
    fn round_timeout(&self) -> Duration {
        self.rec.detector.probe_timeout()
    }

    /// Silence after which a voter or a coordinator counts as gone during recovery.
    fn recovery_silence(&self) -> Duration {
        self.round_timeout() * (self.cfg.alive_retries.max(1) + 1)
    }

    /// Silence after which a participant counts its coordinator as gone: as many of the
    /// coordinator's rounds (`interval_ms`, as it announced them) as a coordinator waits of its
    /// own, and never fewer than of ours. A coordinator counts only votes of its last two
    /// rounds, so a participant it counts has not left it for another.
    fn coordinator_silence(&self, interval_ms: u32) -> Duration {
        let rounds = self.cfg.alive_retries.max(1) + 1;
        self.recovery_silence()
            .max(Duration::from_millis(interval_ms.into()) * rounds)
    }

    /// Who the failure detector watches: the members (sequencer) or the sequencer (member);
    /// nobody in recovery mode, where the protocol's own rounds detect silence.
    pub(super) fn refresh_detector(&mut self) {
        let key = (
            self.view.id,
            self.ord.as_ref().map(|o| (o.view_id, o.members.len())),
            self.sequencer_hint,
            self.phase == Phase::Member && self.rec.mode.is_none() && self.rec.awaiting.is_none(),
        );
        if self.rec.detector_key == Some(key) {
            return;
        }
        self.rec.detector_key = Some(key);
        let now = self.now;
        if !key.3 || self.cfg.alive_interval_ms == 0 {
            self.rec.detector.clear();
        } else if let Some(o) = &self.ord {
            let me = self.me;
            let ids: Vec<NodeId> = o
                .members
                .iter()
                .filter(|m| m.id != me && m.departed.is_none())
                .map(|m| m.id)
                .collect();
            self.rec.detector.watch(ids, now);
        } else if self.sequencer_hint != self.me {
            self.rec.detector.watch([self.sequencer_hint], now);
        } else {
            self.rec.detector.clear();
        }
    }

    /// A failure was found here (probes unanswered): enter recovery mode and, with the
    /// automatic policy, start a reset.
    pub(super) fn member_failed(&mut self, suspect: NodeId) {
        if self.phase != Phase::Member || self.rec.mode.is_some() {
            return;
        }
        self.counters.failures_detected += 1;
        self.enter_recovery(suspect);
        if self.cfg.auto_reset {
            self.start_coordinating();
        }
    }

    /// Recovery mode: stop ordering and sending, freeze acceptance.
    pub(super) fn enter_recovery(&mut self, suspect: NodeId) {
        if self.phase != Phase::Member || self.rec.mode.is_some() {
            return;
        }
        if self.view.id > 0 && !self.view.members.contains(&self.me) {
            // A departing sequencer that lingers after its leave was delivered: the group's
            // recovery is no longer its business.
            self.phase = Phase::Left;
            self.ord = None;
            self.events.push_back(Event::Left);
            return;
        }
        // The newest membership we hold (a joiner may hold its join without having delivered
        // it yet): everyone in it is invited.
        let old_members = self.known_members();
        let min_members = (self.cfg.min_members > 0).then_some(self.cfg.min_members);
        self.rec.mode = Some(RecoveryMode {
            suspect,
            old_members,
            min_members,
            role: Role::Idle,
            next_at: None,
            vote_due: false,
            invite_due: false,
        });
        // The old order ends here: a sequencer stops ordering (its waiting requests are
        // resent by their senders to whoever orders next).
        self.ord = None;
        self.rec.awaiting = None;
        self.retrans.clear();
        self.hist.gaps.clear();
        self.hist.need_status = false;
        self.sender.req_deadline = None;
        self.sender.rtt_probe = None;
        if self.cfg.auto_reset {
            let silence = self.recovery_silence();
            if let Some(r) = self.rec.mode.as_mut() {
                r.next_at = Some(self.now + silence);
            }
        }
        self.refresh_detector();
        self.events
            .push_back(Event::Recovery(Recovery::Failed { suspect }));
    }

    /// ResetGroup: become a coordinator unless a coordinator already has our vote.
    pub(super) fn reset_group(&mut self, min_members: usize) -> Result<(), SendError> {
        if self.phase != Phase::Member {
            return Err(SendError::NotMember);
        }
        if self.rec.mode.is_none() {
            let suspect = self.sequencer_hint;
            self.enter_recovery(suspect);
        }
        let r = self.rec.mode.as_mut().expect("in recovery");
        if min_members > 0 {
            r.min_members = Some(min_members);
        }
        if matches!(r.role, Role::Idle) {
            self.start_coordinating();
        }
        Ok(())
    }

    fn start_coordinating(&mut self) {
        let now = self.now;
        if !self.known_members().contains(&self.me) {
            // Our own leave is ordered: the new group will not have us, so we do not build it;
            // we vote when invited, and go if nobody invites us for a while.
            let silence = self.recovery_silence();
            if let Some(r) = self.rec.mode.as_mut() {
                r.role = Role::Idle;
                r.next_at = Some(now + silence);
            }
            return;
        }
        let Some(r) = self.rec.mode.as_mut() else {
            return;
        };
        let mut suspects = vec![r.suspect];
        if let Role::Participant { coordinator, .. } = r.role {
            suspects.push(coordinator);
        }
        r.role = Role::Coordinator(Coord {
            round: 0,
            voters: Vec::new(),
            suspects,
            target: None,
        });
        r.next_at = Some(now);
        r.vote_due = false;
    }

    /// Whether `id` takes part in the recovery: it is in the view we delivered last, or was in
    /// the newest we held when the recovery began, or is in the newest we hold now (repairs may
    /// have brought a join). A member whose leave is ordered still votes: it may hold what
    /// others lack, and the reset delivers its leave to it.
    pub(super) fn recovery_invites(&self, id: NodeId) -> bool {
        match &self.rec.mode {
            Some(r) => {
                self.view.members.contains(&id)
                    || r.old_members.contains(&id)
                    || self.known_members().contains(&id)
            }
            None => false,
        }
    }

    /// Our vote: the highest sequence number we hold contiguously.
    fn my_vote(&self) -> u64 {
        self.hist.held_next
    }

    /// Follow coordinator `c` (it beats whoever we followed or were).
    fn follow(&mut self, c: NodeId, c_held: u64, target: u64, round: u32, interval_ms: u32) {
        let now = self.now;
        let silence = self.coordinator_silence(interval_ms);
        let Some(r) = self.rec.mode.as_mut() else {
            return;
        };
        if let Role::Coordinator(co) = &r.role {
            // Yielding: our voters follow the winner too (they would not switch on their own).
            for v in &co.voters {
                self.rec.control.redirect(v.id, c, c_held);
            }
        }
        r.role = Role::Participant {
            coordinator: c,
            coordinator_held: c_held,
            target,
            heard_at: now,
            round,
        };
        r.vote_due = true;
        r.invite_due = false;
        r.next_at = Some(now + silence);
        self.check_gap();
    }

    /// BC_REFORMREQ from `from`.
    ///
    /// Who follows whom: an idle member follows the first coordinator that invites it; a
    /// coordinator yields to a better one it hears itself; a participant stays with its
    /// coordinator until that one yields (and tells it) or goes silent. So a vote counted by a
    /// coordinator is never counted by another at the same time.
    pub(super) fn on_reform_req(
        &mut self,
        from: NodeId,
        held: u64,
        target: u64,
        suspect: NodeId,
        round: u32,
        interval_ms: u32,
    ) {
        if self.phase != Phase::Member {
            return;
        }
        if !(self.view.members.contains(&from) || self.known_members().contains(&from)) {
            if self.rec.mode.is_none()
                && self.rec.awaiting.is_none()
                && self.rec.last_result.is_some()
            {
                // A member of a reset of our incarnation that never completed (its result
                // reached only some members) invites: tell it which group went on.
                self.rec.control.answer_stale(from);
            }
            return;
        }
        if self.rec.mode.is_none() {
            self.enter_recovery(suspect);
        }
        let mine = self.my_vote();
        let me = self.me;
        let now = self.now;
        let silence = self.coordinator_silence(interval_ms);
        if !self.recovery_invites(from) {
            return;
        }
        let Some(r) = self.rec.mode.as_mut() else {
            return;
        };
        let mut repair = false;
        let mut forward = None;
        let follow = match &mut r.role {
            Role::Idle => true,
            Role::Participant {
                coordinator,
                coordinator_held,
                target: t,
                heard_at,
                round: rd,
            } => {
                if *coordinator == from {
                    *coordinator_held = held;
                    *heard_at = now;
                    *rd = (*rd).max(round);
                    r.next_at = Some(now + silence);
                    r.vote_due = true;
                    repair = *t != target;
                    *t = target;
                } else if better(held, from, *coordinator_held, *coordinator) {
                    // Tell our coordinator of the better one: if it already yielded to it (and
                    // its word to us was lost), it tells us again whom to follow.
                    forward = Some(*coordinator);
                }
                false
            }
            Role::Coordinator(c) => {
                if !c.suspects.contains(&suspect) && suspect != me {
                    c.suspects.push(suspect);
                }
                // A weaker coordinator yields to our own invitations in turn.
                better(held, from, mine, me)
            }
        };
        if follow {
            self.follow(from, held, target, round, interval_ms);
        } else if repair {
            self.check_gap();
        }
        if let Some(c) = forward {
            self.rec.control.forward(c, from, held);
        }
    }

    /// BC_VOTE from `from`: a vote for us; word from a member that follows us of a better
    /// coordinator (`Forward`); or word from the coordinator we follow that it yielded to
    /// `cand` (`Redirect`), which is never answered, so that no two members bounce words.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_vote(
        &mut self,
        from: NodeId,
        kind: VoteKind,
        cand: NodeId,
        cand_held: u64,
        held: u64,
        expect: u64,
        round: u32,
    ) {
        let me = self.me;
        let now = self.now;
        if !self.recovery_invites(from) {
            return;
        }
        let Some(r) = self.rec.mode.as_mut() else {
            return;
        };
        match (kind, &mut r.role) {
            (VoteKind::Vote, Role::Coordinator(c)) if cand == me => {
                match c.voters.iter_mut().find(|v| v.id == from) {
                    Some(v) => {
                        v.held_next = v.held_next.max(held);
                        v.expect = v.expect.max(expect);
                        v.heard_at = now;
                        v.round = v.round.max(round);
                    }
                    None => c.voters.push(Voter {
                        id: from,
                        held_next: held,
                        expect,
                        heard_at: now,
                        round,
                    }),
                }
                self.coordinate(false);
            }
            (VoteKind::Redirect, Role::Participant { coordinator, .. }) if *coordinator == from => {
                if cand == me {
                    // Our coordinator hands the recovery over to us.
                    self.start_coordinating();
                } else {
                    self.follow(cand, cand_held, 0, 0, 0);
                }
            }
            (
                VoteKind::Forward,
                Role::Participant {
                    coordinator,
                    coordinator_held,
                    ..
                },
            ) if *coordinator != from => {
                // A member that followed us tells us of another coordinator: we follow
                // someone else now, so should it.
                let (c, c_held) = (*coordinator, *coordinator_held);
                self.rec.control.redirect(from, c, c_held);
            }
            _ => {}
        }
    }

    /// Timers of the recovery: invitation rounds, coordinator silence, result resends.
    pub(super) fn recovery_timeout(&mut self, now: Time) {
        if let Some(a) = &self.rec.awaiting {
            if now >= a.next_at {
                self.result_round();
            }
        }
        let Some(r) = &self.rec.mode else { return };
        if r.next_at.is_none_or(|t| now < t) {
            return;
        }
        match &r.role {
            // Invited by a coordinator that stayed silent: with the automatic policy, invite
            // in turn.
            Role::Idle if !self.known_members().contains(&self.me) => {
                // Our leave was ordered and nobody needs us for the reset: the group goes on
                // without us, which is what we asked for.
                self.rec.mode = None;
                self.phase = Phase::Left;
                self.rec.detector.clear();
                self.events.push_back(Event::Left);
            }
            Role::Idle if self.cfg.auto_reset => self.start_coordinating(),
            Role::Idle => {}
            Role::Participant { .. } => {
                // The coordinator went silent: recovery starts again, with us inviting.
                self.start_coordinating();
            }
            Role::Coordinator(_) => self.coordinate(true),
        }
    }

    /// When the recovery's timers are next due.
    pub(super) fn recovery_deadline(&self) -> Option<Time> {
        let a = self.rec.awaiting.as_ref().map(|a| a.next_at);
        let r = self.rec.mode.as_ref().and_then(|r| r.next_at);
        match (a, r) {
            (Some(a), Some(r)) => Some(a.min(r)),
            (a, r) => a.or(r),
        }
    }

    /// The coordinator's step: on a round timer (`tick`) or when a vote or repair arrived.
    fn coordinate(&mut self, tick: bool) {
        let now = self.now;
        let round_timeout = self.round_timeout();
        let silence = self.recovery_silence();
        let retries = self.cfg.alive_retries.max(1);
        let mine = self.my_vote();
        let me = self.me;
        // Members of the newest view we hold: a majority of them is needed by default.
        let known = self.known_members().len();
        let Some(r) = self.rec.mode.as_mut() else {
            return;
        };
        let Role::Coordinator(c) = &mut r.role else {
            return;
        };
        if c.target.is_none() {
            // Phase 1: invite until every member of the old view answered or stayed silent.
            let waiting_for = r
                .old_members
                .iter()
                .filter(|m| **m != me && !c.suspects.contains(m))
                .filter(|m| !c.voters.iter().any(|v| v.id == **m))
                .count();
            let done = c.round > retries || (c.round >= 1 && waiting_for == 0);
            if !done {
                if tick {
                    c.round += 1;
                    r.invite_due = true;
                    r.next_at = Some(now + round_timeout);
                }
                return;
            }
            let needed = r.min_members.unwrap_or(known / 2 + 1);
            if c.voters.len() + 1 < needed {
                let reachable = c.voters.len() + 1;
                self.fail_attempt(reachable, needed);
                return;
            }
            c.target = Some(0);
        }
        // Phase 2. Voters that went silent crashed during recovery: recovery goes on without.
        c.voters.retain(|v| now < v.heard_at + silence);
        if c.voters.len() + 1 < r.min_members.unwrap_or(known / 2 + 1) {
            c.target = None;
            c.round = retries + 1;
            r.next_at = Some(now);
            return;
        }
        let (best, target) = c.voters.iter().fold((me, mine), |(b, t), v| {
            if v.held_next > t {
                (v.id, v.held_next)
            } else {
                (b, t)
            }
        });
        c.target = Some(target);
        if tick {
            r.invite_due = true;
            r.next_at = Some(now + round_timeout);
        }
        if mine < target {
            // Fetch what we lack from the best member first.
            self.rec.repair_from = Some(best);
            self.check_gap();
            return;
        }
        self.rec.repair_from = None;
        // Only votes answering this round or the one before count towards the commit: a
        // participant that answered them heard us within two rounds, and leaves us only after
        // `alive_retries + 1` silent rounds, so it cannot be counted by another coordinator now.
        // A voter whose newest vote is older is waited for (its vote may have been lost),
        // until it has been silent for long enough to be dropped above.
        let fresh = c.round.saturating_sub(1);
        if c.voters.iter().any(|v| v.round < fresh) {
            return;
        }
        let voters: Vec<(NodeId, u64, u64)> = c
            .voters
            .iter()
            .map(|v| (v.id, v.held_next, v.expect))
            .collect();
        let explicit_min = r.min_members;
        let Some((view_id, members)) = self.view_at(target) else {
            return;
        };
        let needed = explicit_min.unwrap_or(members.len() / 2 + 1);
        let members: Vec<NodeId> = members
            .into_iter()
            .filter(|m| *m == me || voters.iter().any(|v| v.0 == *m))
            .collect();
        if !members.contains(&me) {
            // Our own leave is ordered below the target: the member of the new group that
            // ranks first takes over as coordinator (we tell it, and our voters follow it).
            if let Some(&(next, held, _)) = members
                .first()
                .and_then(|m| voters.iter().find(|v| v.0 == *m))
            {
                self.follow(next, held, target, 0, 0);
            }
            return;
        }
        if members.len() < needed {
            // Fewer members than required once the joins and leaves below the target are
            // counted: this attempt fails; the next one invites everyone again.
            let reachable = members.len();
            self.fail_attempt(reachable, needed);
            return;
        }
        let all_hold = members
            .iter()
            .all(|m| *m == me || voters.iter().any(|v| v.0 == *m && v.1 >= target));
        if !all_hold {
            return;
        }
        // Every member of the new group holds everything below the target: commit.
        let stable = voters
            .iter()
            .filter(|v| members.contains(&v.0))
            .map(|v| v.2)
            .fold(self.hist.next_deliver, u64::min)
            .max(self.hist.stable);
        let incarnation = self.incarnation.wrapping_add(1);
        let result = ResultRecord {
            incarnation,
            seq: target,
            stable,
            view: view_bytes(view_id + 1, me, &members),
        };
        let pending: Vec<NodeId> = members.iter().copied().filter(|m| *m != me).collect();
        self.install_result(me, &result);
        self.rec.awaiting = Some(AwaitAcks {
            pending,
            rounds: 0,
            next_at: now,
        });
        self.result_round();
        let (last_pnum, mid) = self.own_stream();
        self.rec
            .awaiting
            .as_mut()
            .expect("just set")
            .pending
            .push(me);
        self.on_result_ack(me, self.incarnation, last_pnum, mid);
    }

    /// The members of the newest view we hold, delivered or not.
    fn known_members(&self) -> Vec<NodeId> {
        self.view_at(self.hist.held_next)
            .map_or_else(|| self.view.members.clone(), |v| v.1)
    }

    /// This reset attempt found only `reachable` members: the group waits, and a new attempt
    /// invites everyone again after a pause.
    fn fail_attempt(&mut self, reachable: usize, needed: usize) {
        let next = self.now + self.recovery_silence();
        let Some(r) = self.rec.mode.as_mut() else {
            return;
        };
        let Role::Coordinator(c) = &mut r.role else {
            return;
        };
        c.round = 0;
        c.voters.clear();
        c.target = None;
        r.next_at = Some(next);
        self.events
            .push_back(Event::Recovery(Recovery::ResetFailed { reachable, needed }));
    }

    /// The view in force just before `seq`, from our history: (view id, members).
    fn view_at(&self, seq: u64) -> Option<(u64, Vec<NodeId>)> {
        let mut view = (self.view.id, self.view.members.clone());
        for s in self.hist.next_deliver..seq {
            let e = self.hist.buffer.get(s)?;
            if e.kind != EntryKind::Data {
                let (id, _, members) = decode_view(e.payload.as_deref()?).ok()?;
                view = (id, members);
            }
        }
        Some(view)
    }

    /// One round of the result: multicast it to the members that did not acknowledge; after
    /// `alive_retries` silent rounds the new group recovers in turn.
    fn result_round(&mut self) {
        let now = self.now;
        let round_timeout = self.round_timeout();
        let retries = self.cfg.alive_retries.max(1);
        let Some(a) = self.rec.awaiting.as_mut() else {
            return;
        };
        if a.pending.is_empty() {
            return;
        }
        if a.rounds > retries {
            let suspect = a.pending[0];
            self.rec.awaiting = None;
            self.member_failed(suspect);
            return;
        }
        a.rounds += 1;
        a.next_at = now + round_timeout;
        self.rec.control.result_multicast = true;
    }

    /// BC_RESULTACK from `from`.
    pub(super) fn on_result_ack(
        &mut self,
        from: NodeId,
        incarnation: u32,
        last_pnum: u64,
        mid_message: bool,
    ) {
        if incarnation != self.incarnation {
            return;
        }
        let Some(a) = self.rec.awaiting.as_mut() else {
            return;
        };
        if !a.pending.contains(&from) {
            return;
        }
        a.pending.retain(|m| *m != from);
        self.rec.reset_streams.push((from, last_pnum, mid_message));
        if !a.pending.is_empty() {
            return;
        }
        // Everyone installed the new group: the reset entry is accepted here too, and
        // delivering it makes us the sequencer.
        self.rec.awaiting = None;
        self.rec.control.result_multicast = false;
        if let Some(res) = &self.rec.last_result {
            self.hist.accepted_next = self.hist.accepted_next.max(res.seq + 1);
        }
    }

    /// BC_RESULT from `from`, in any incarnation.
    pub(super) fn on_result(
        &mut self,
        from: NodeId,
        incarnation: u32,
        seq: u64,
        stable: u64,
        settled: bool,
        view: &[u8],
    ) {
        if self.phase != Phase::Member {
            return;
        }
        let Ok((_, _, members)) = decode_view(view) else {
            return;
        };
        let mine = members.contains(&self.me);
        if incarnation == self.incarnation {
            let same = self
                .rec
                .last_result
                .as_ref()
                .is_some_and(|r| r.seq == seq && r.view[..] == *view);
            if same && mine {
                self.rec.control.ack(from); // our acknowledgement was lost
            } else if !same && settled && (self.recovering() || self.rec.awaiting.is_some()) {
                // Two resets of the same group were installed on the two sides of a partition
                // (a result that reached only some of its members); the other one has a
                // running sequencer, ours never ordered anything: ours lost.
                self.expel(incarnation);
            }
            return;
        }
        if incarnation < self.incarnation {
            return;
        }
        let res = ResultRecord {
            incarnation,
            seq,
            stable,
            view: Bytes::copy_from_slice(view),
        };
        if incarnation == self.incarnation.wrapping_add(1) && mine && self.hist.held_next >= seq {
            self.install_result(from, &res);
            self.rec.control.ack(from);
            return;
        }
        if incarnation == self.incarnation.wrapping_add(1) {
            // Left out of the next incarnation: what lies below its start is the agreed
            // order, so deliver what we hold of it before going.
            self.rec.mode = None;
            self.ord = None;
            self.hist.buffer.truncate(seq);
            self.hist.accepted_next = seq;
            self.deliver();
        }
        if self.phase == Phase::Member {
            self.expel(incarnation);
        }
    }

    /// Where our own stream of requests stands after a reset: the last protocol number ordered
    /// below it, and whether the next fragment continues a message begun there.
    fn own_stream(&self) -> (u64, bool) {
        let mid = self
            .sender
            .outq
            .iter()
            .find(|f| f.pnum > self.sender.own_ordered)
            .is_some_and(|f| f.frag_index > 0);
        (self.sender.own_ordered, mid)
    }

    /// Leave the group for good: it went on without us.
    fn expel(&mut self, incarnation: u32) {
        self.phase = Phase::Left;
        self.rec.mode = None;
        self.ord = None;
        self.rec.awaiting = None;
        self.rec.detector.clear();
        self.events
            .push_back(Event::Recovery(Recovery::Expelled { incarnation }));
    }

    /// Install a reset: the new incarnation, the reset entry at `res.seq`, nothing of the old
    /// order beyond it. `coordinator` orders next.
    pub(super) fn install_result(&mut self, coordinator: NodeId, res: &ResultRecord) {
        let t = res.seq;
        self.incarnation = res.incarnation;
        self.rec.mode = None;
        self.ord = None;
        self.rec.repair_from = None;
        self.retrans.clear();
        self.rec.reset_streams.clear();
        // Everyone in the new group delivered below `stable`, and holds the rest below `t`.
        self.hist.stable = self.hist.stable.max(res.stable.min(self.hist.next_deliver));
        self.hist.purge();
        self.hist.truncate(t);
        let inserted = self.hist.buffer.insert(
            t,
            Entry {
                kind: EntryKind::Reset,
                sender: coordinator,
                // A reset entry's "protocol number" is the incarnation it starts.
                pnum: res.incarnation as u64,
                frag_index: 0,
                frag_count: 1,
                payload: Some(res.view.clone()),
                bb: false,
            },
        );
        debug_assert_eq!(
            inserted,
            Ok(true),
            "reset entry fits: the sequencer keeps a slot"
        );
        self.hist.held_next = t + 1;
        self.hist.seq_next_known = t + 1;
        // Members may deliver the reset at once; the coordinator waits for the acknowledgements.
        self.hist.accepted_next = if coordinator == self.me { t } else { t + 1 };
        self.sequencer_hint = coordinator;
        self.rec.last_result = Some(res.clone());
        self.counters.resets += 1;
        // Own fragments the old order assigned at or beyond `t` are lost: send them again.
        let me = self.me;
        let mut own = self
            .succession
            .last_delivered_pnum
            .get(&me)
            .copied()
            .unwrap_or(0);
        for s in self.hist.next_deliver..t {
            if let Some(e) = self.hist.buffer.get(s) {
                if e.kind == EntryKind::Data && e.sender == me {
                    own = own.max(e.pnum);
                }
            }
        }
        self.sender.own_ordered = own;
        self.sender.resend_unordered();
        self.sender.rtt_probe = None;
        self.rec.silent_req_timeouts = 0;
        self.hist.gaps.clear();
        self.refresh_detector();
    }

    /// A datagram of a newer incarnation came from `from`: ask it what happened.
    pub(super) fn note_newer(&mut self, from: NodeId) {
        let now = self.now;
        if self.phase != Phase::Member {
            return;
        }
        if self
            .rec
            .control
            .last_query
            .is_some_and(|t| now < t + self.round_timeout())
        {
            return;
        }
        self.rec.control.last_query = Some(now);
        self.rec.control.query_to = Some(from);
    }

    /// A datagram of an older incarnation came from `from`: if it asks to take part, tell it
    /// how the group was rebuilt.
    pub(super) fn note_older(&mut self, from: NodeId, ptype: u8) {
        if matches!(ptype, ptype::REFORM_REQ | ptype::VOTE | ptype::ALIVE_REQ)
            && self.rec.last_result.is_some()
        {
            self.rec.control.answer_stale(from);
        }
    }

    /// Where NACKs go and up to where, in recovery mode: a participant repairs from its
    /// coordinator up to the announced target, a coordinator from the best member.
    pub(super) fn recovery_repair(&self) -> Option<(NodeId, u64)> {
        let r = self.rec.mode.as_ref()?;
        match &r.role {
            Role::Participant {
                coordinator,
                target,
                ..
            } if *target > 0 => Some((*coordinator, *target)),
            Role::Coordinator(Coord {
                target: Some(t), ..
            }) => self.rec.repair_from.map(|b| (b, *t)),
            _ => None,
        }
    }

    /// Our holding point moved during recovery: tell the coordinator, or re-check as one.
    pub(super) fn recovery_progress(&mut self) {
        let Some(r) = self.rec.mode.as_mut() else {
            return;
        };
        match &r.role {
            Role::Participant { target, .. } if *target > 0 && self.hist.held_next >= *target => {
                r.vote_due = true;
            }
            Role::Coordinator(_) => self.coordinate(false),
            _ => {}
        }
    }

    /// The recovery's datagrams (after the control answers every member owes).
    pub(super) fn transmit_recovery(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        let held = self.hist.held_next;
        let expect = self.hist.next_deliver;
        let interval = self.round_timeout();
        let r = self.rec.mode.as_mut()?;
        let invite = match &r.role {
            Role::Coordinator(c) if r.invite_due => Some((c.target.unwrap_or(0), c.round)),
            _ => None,
        };
        r.invite_due = false;
        if let Some((target, round)) = invite {
            let suspect = r.suspect;
            let interval_ms = u32::try_from(interval.as_millis()).unwrap_or(u32::MAX);
            let header = self.header(ptype::REFORM_REQ);
            encode_control(
                buf,
                &header,
                &Body::ReformReq {
                    held_next: held,
                    target,
                    suspect,
                    round,
                    interval_ms,
                },
            );
            self.counters.recovery_sent += 1;
            return Some(Destination::Group);
        }
        if r.vote_due {
            r.vote_due = false;
            let Role::Participant {
                coordinator,
                coordinator_held,
                round,
                ..
            } = r.role
            else {
                return None;
            };
            let header = self.header(ptype::VOTE);
            encode_control(
                buf,
                &header,
                &Body::Vote {
                    coordinator,
                    coordinator_held,
                    held_next: held,
                    expect,
                    round,
                    kind: VoteKind::Vote,
                },
            );
            self.counters.recovery_sent += 1;
            return Some(Destination::Peer(coordinator));
        }
        None
    }

    /// Answers owed to single members (probes, stale members, acknowledgements, redirects) and
    /// the result multicast.
    pub(super) fn transmit_control(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        if let Some(to) = self.rec.control.alive.pop_front() {
            let header = self.header(ptype::ALIVE);
            encode_control(buf, &header, &Body::Alive);
            self.counters.probes_sent += 1;
            return Some(Destination::Peer(to));
        }
        if let Some(to) = self.rec.detector.poll_probe() {
            let header = self.header(ptype::ALIVE_REQ);
            encode_control(buf, &header, &Body::AliveReq);
            self.counters.probes_sent += 1;
            return Some(Destination::Peer(to));
        }
        let dest = if let Some(to) = self.rec.control.acks.pop_front() {
            let header = self.header(ptype::RESULT_ACK);
            let (last_pnum, mid_message) = self.own_stream();
            let body = Body::ResultAck {
                incarnation: self.incarnation,
                last_pnum,
                mid_message,
            };
            encode_control(buf, &header, &body);
            Destination::Peer(to)
        } else if let Some((to, kind, c, c_held)) = self.rec.control.redirects.pop_front() {
            let header = self.header(ptype::VOTE);
            let body = Body::Vote {
                coordinator: c,
                coordinator_held: c_held,
                held_next: self.hist.held_next,
                expect: self.hist.next_deliver,
                round: 0,
                kind,
            };
            encode_control(buf, &header, &body);
            Destination::Peer(to)
        } else if let Some(to) = self.rec.control.query_to.take() {
            // "What happened?": a vote in our incarnation, answered with the newest result.
            let header = self.header(ptype::VOTE);
            let body = Body::Vote {
                coordinator: to,
                coordinator_held: 0,
                held_next: self.hist.held_next,
                expect: self.hist.next_deliver,
                round: 0,
                kind: VoteKind::Vote,
            };
            encode_control(buf, &header, &body);
            Destination::Peer(to)
        } else if self.rec.control.result_multicast || !self.rec.control.results.is_empty() {
            let to = match self.rec.control.results.pop_front() {
                Some(to) => Destination::Peer(to),
                None => {
                    self.rec.control.result_multicast = false;
                    Destination::Group
                }
            };
            let settled = self.rec.mode.is_none() && self.rec.awaiting.is_none();
            let res = self.rec.last_result.as_ref()?;
            let header = self.header(ptype::RESULT);
            let body = Body::Result {
                incarnation: res.incarnation,
                seq: res.seq,
                stable: res.stable,
                settled,
                view: &res.view,
            };
            encode_control(buf, &header, &body);
            to
        } else {
            return None;
        };
        self.counters.recovery_sent += 1;
        Some(dest)
    }
}

/// Small answers owed to single members, each queue bounded.
#[derive(Clone, Debug, Default)]
pub(super) struct Control {
    /// BC_ALIVE owed.
    alive: VecDeque<NodeId>,
    /// BC_RESULTACK owed.
    acks: VecDeque<NodeId>,
    /// Whom to follow, told to members that followed us, or a better coordinator told to the
    /// one we follow: (to, coordinator, its vote).
    redirects: VecDeque<(NodeId, VoteKind, NodeId, u64)>,
    /// Members of older incarnations owed the newest result.
    results: VecDeque<NodeId>,
    /// Multicast the result (coordinator, until acknowledged).
    pub(super) result_multicast: bool,
    /// A member of a newer incarnation to ask what happened, and when we last asked.
    query_to: Option<NodeId>,
    last_query: Option<Time>,
}

fn push_bounded<T: PartialEq>(q: &mut VecDeque<T>, x: T) {
    if q.len() < MAX_RETRANS_QUEUE && !q.contains(&x) {
        q.push_back(x);
    }
}

impl Control {
    pub(super) fn alive(&mut self, to: NodeId) {
        push_bounded(&mut self.alive, to);
    }

    fn ack(&mut self, to: NodeId) {
        push_bounded(&mut self.acks, to);
    }

    fn redirect(&mut self, to: NodeId, c: NodeId, c_held: u64) {
        self.word(to, VoteKind::Redirect, c, c_held);
    }

    fn forward(&mut self, to: NodeId, c: NodeId, c_held: u64) {
        self.word(to, VoteKind::Forward, c, c_held);
    }

    /// One word per destination is enough: the newest replaces an older one.
    fn word(&mut self, to: NodeId, kind: VoteKind, c: NodeId, c_held: u64) {
        match self.redirects.iter_mut().find(|r| r.0 == to) {
            Some(r) => *r = (to, kind, c, c_held),
            None => push_bounded(&mut self.redirects, (to, kind, c, c_held)),
        }
    }

    fn answer_stale(&mut self, to: NodeId) {
        push_bounded(&mut self.results, to);
    }
}
