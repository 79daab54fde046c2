//! Crash recovery (Amoeba paper sections 3, 4 and 5.3): failure detection, recovery mode, and
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

mod control;
mod reset;
pub(super) mod state;

use super::engine::Sequencer;
use super::packet::{ptype, Body, EntryKind, SeqRanges};
use super::shared::Phase;
use crate::common::decode_view;
use crate::engine::{Event, NodeId, Recovery, SendError, Time};
use state::{Coord, RecoveryMode, Role, VoteHeld};
use std::time::Duration;

impl Sequencer {
    /// A datagram of the failure detector or the recovery protocol (probes, invitations,
    /// votes, result acknowledgements).
    pub(super) fn on_recovery_body(&mut self, from: NodeId, body: Body<'_>) {
        match body {
            // A fenced sequencer's probe (a token) is answered only from normal operation: a
            // member in recovery mode may be resetting the group without it.
            Body::AliveReq { token } => {
                if self.phase == Phase::Member
                    && self.view.members.contains(&from)
                    && (token == 0 || !self.recovering())
                {
                    self.rec.control.alive(from, token);
                }
            }
            Body::Alive { token: 0 } => {}
            Body::Alive { token } => self.on_fence_answer(from, token),
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
                base,
                round,
                kind,
            } => self.on_vote(
                from,
                kind,
                coordinator,
                coordinator_held,
                VoteHeld {
                    held_next,
                    expect,
                    base,
                },
                round,
            ),
            Body::ResultAck {
                incarnation,
                last_pnum,
                mid_message,
            } => self.on_result_ack(from, incarnation, last_pnum, mid_message),
            _ => unreachable!("not a recovery datagram"),
        }
    }

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
        if let Some(r) = self.rec.mode.as_mut() {
            r.suspect_found = true;
        }
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
            self.set_phase(Phase::Left);
            self.ord = None;
            self.events.push_back(Event::Left);
            return;
        }
        if self.leave_requested
            && self
                .known_members()
                .iter()
                .all(|&m| m == self.me || m == suspect)
        {
            // Leaving a group of two whose other member is gone: that member was the
            // sequencer and ordered this leave but left (the last one) before this member
            // heard it. Nobody is left to rebuild the group with; the leave is done.
            self.set_phase(Phase::Left);
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
            suspect_found: false,
            old_members,
            min_members,
            role: Role::Idle,
            next_at: None,
            vote_due: false,
            invite_due: false,
            voted_for: Vec::new(),
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
        self.sender.repeated_probe = None;
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

    /// Whether this member is in recovery mode with nobody to rebuild the group with: every
    /// other member of the newest view it holds is the suspect, and no member has answered this
    /// attempt (no reset by another member has our vote, no vote came to ours). The survivor of
    /// a group of two whose peer crashed, waiting under the majority rule (or for a manual
    /// reset): asked to leave, it has nobody to tell, so it leaves at once rather than wait
    /// out the driver's leave timeout for a confirmation that cannot come.
    pub(super) fn alone_in_recovery(&self) -> bool {
        let Some(r) = self.rec.mode.as_ref() else {
            return false;
        };
        let unanswered = match &r.role {
            Role::Idle => true,
            Role::Coordinator(c) => c.voters.is_empty() && c.target.is_none(),
            Role::Participant { .. } => false,
        };
        unanswered
            && self
                .known_members()
                .iter()
                .all(|&m| m == self.me || m == r.suspect)
    }

    /// ResetGroup: become a coordinator unless a coordinator already has our vote.
    pub(super) fn reset_group(&mut self, min_members: usize) -> Result<(), SendError> {
        if self.phase != Phase::Member {
            return Err(SendError::NotMember);
        }
        if self.rec.mode.is_none() {
            let suspect = self.sequencer_hint;
            self.enter_recovery(suspect);
            if let Some(r) = self.rec.mode.as_mut() {
                r.suspect_found = true;
            }
        }
        // Entering recovery may end in leaving instead (our own leave is ordered, or nobody is
        // left to rebuild the group with): then there is nothing to reset.
        let Some(r) = self.rec.mode.as_mut() else {
            return Err(SendError::NotMember);
        };
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
        // The suspect an invitation named is not taken on its word: it is waited for (it may
        // be alive, and a forged invitation must not make the reset go on without it).
        let mut suspects: Vec<NodeId> = r.suspect_found.then_some(r.suspect).into_iter().collect();
        if let Role::Participant { coordinator, .. } = r.role {
            suspects.push(coordinator);
        }
        r.role = Role::Coordinator(Coord {
            round: 0,
            voters: Vec::new(),
            suspects,
            renounced: Vec::new(),
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

    /// A node that asks to join while the group recovers, although its join was ordered (it is
    /// in the view): it missed every copy of its join entry before the sequencer failed, so it
    /// is still a joiner and cannot take part in the reset, and a majority may need it. The
    /// coordinator sends it the history from its join entry on, as the sequencer would have; it
    /// then is a member and answers the invitations.
    pub(super) fn serve_admitted_joiner(&mut self, id: NodeId) {
        let Some(r) = &self.rec.mode else { return };
        if !matches!(r.role, Role::Coordinator(_)) || !self.recovery_invites(id) {
            return;
        }
        if let Some(seq) = self.admitted_join_seq(id) {
            let until = self.hist.held_next;
            self.queue_retrans(id, SeqRanges::single(seq, until));
        }
    }

    /// Where `id`'s join was ordered: as delivered here, or else in the part of the history we
    /// hold but have not delivered (the sequencer failed before accepting it, so no member may
    /// have delivered it, and the reset still needs the joiner among its voters).
    fn admitted_join_seq(&self, id: NodeId) -> Option<u64> {
        if let Some(&seq) = self.succession.join_seqs.get(&id) {
            return Some(seq);
        }
        (self.hist.next_deliver..self.hist.held_next).find(|&s| {
            self.hist
                .buffer
                .get(s)
                .is_some_and(|e| e.kind == EntryKind::Join && e.sender == id)
        })
    }

    /// Our vote: the highest sequence number we hold contiguously.
    fn my_vote(&self) -> u64 {
        self.hist.held_next
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
                self.set_phase(Phase::Left);
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

    /// The members of the newest view we hold, delivered or not.
    fn known_members(&self) -> Vec<NodeId> {
        self.view_at(self.hist.held_next)
            .map_or_else(|| self.view.members.clone(), |v| v.1)
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

    /// A datagram of a newer incarnation came from `from`: ask it what happened.
    pub(super) fn note_newer(&mut self, from: NodeId) {
        if self.phase != Phase::Member {
            return;
        }
        let gap = self.round_timeout();
        self.rec.control.query(from, self.now, gap);
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

    /// Whether `from` is where this member repairs from in recovery mode: the coordinator it
    /// follows, or (as coordinator) the best member.
    pub(super) fn recovery_source(&self, from: NodeId) -> bool {
        let Some(r) = self.rec.mode.as_ref() else {
            return false;
        };
        match &r.role {
            Role::Participant { coordinator, .. } => *coordinator == from,
            Role::Coordinator(_) => self.rec.repair_from == Some(from),
            Role::Idle => false,
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
}
