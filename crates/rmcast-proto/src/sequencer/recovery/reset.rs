//! The invitation protocol (Amoeba paper section 4, ResetGroup): following and yielding between
//! coordinators, the coordinator's two phases, the commit of the result, and its installation
//! at every member of the new group.

use super::state::{better, AwaitAcks, RecoveryMode, ResultRecord, Role, VoteHeld, Voter};
use crate::common::{decode_view, view_bytes};
use crate::engine::{Event, NodeId, Recovery, Time};
use crate::sequencer::engine::Sequencer;
use crate::sequencer::history::Entry;
use crate::sequencer::packet::{EntryKind, VoteKind};
use crate::sequencer::shared::Phase;
use bytes::Bytes;
use std::time::Duration;

impl Sequencer {
    /// Follow coordinator `c` (it beats whoever we followed or were).
    pub(super) fn follow(
        &mut self,
        c: NodeId,
        c_held: u64,
        target: u64,
        round: u32,
        interval_ms: u32,
    ) {
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
    pub(in crate::sequencer) fn on_reform_req(
        &mut self,
        from: NodeId,
        held: u64,
        target: u64,
        suspect: NodeId,
        round: u32,
        interval_ms: u32,
    ) {
        if self.phase == Phase::Joining {
            self.renounce_join(from);
            return;
        }
        if self.phase != Phase::Member {
            return;
        }
        let vouched = self.may_hold_our_missing_joins(held);
        if !(vouched || self.view.members.contains(&from) || self.known_members().contains(&from)) {
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
        if !self.recovery_invites(from) && !vouched {
            return;
        }
        let Some(r) = self.rec.mode.as_mut() else {
            return;
        };
        let invitation = Invitation {
            from,
            held,
            target,
            round,
        };
        let (follow, repair, forward) = r.invited(&invitation, me, mine, now, silence);
        if follow {
            self.follow(from, held, target, round, interval_ms);
        } else if repair {
            self.check_gap();
        }
        if let Some(c) = forward {
            self.rec.control.forward(c, from, held);
        }
    }

    /// Whether a coordinator that advertises `held` and is not a member of the newest view we
    /// hold may be one whose join we lack: we are already recovering (an invitation from a
    /// stranger never starts a recovery), we lack entries that the old sequencer told us it
    /// ordered (`seq_next_known`), and it holds some of them, no more than exist. Such a member
    /// joined in the entries we lack; it holds more than we do, so it is a better coordinator
    /// than we are, and it may be the only one left that can give us those entries. Ignoring
    /// its invitations, a member that lost the joins of the others before the sequencer failed
    /// waited for ever for a majority of the old view it knew, while they waited for its vote.
    ///
    /// Only following is opened to it, never counting: its votes count nowhere until our
    /// history names it a member (`recovery_invites`), and its result is installed only if the
    /// history it served up to the result names it a member (`result_entitled`).
    /// Nothing is kept about it beyond the role of the coordinator followed.
    fn may_hold_our_missing_joins(&self, held: u64) -> bool {
        self.rec.mode.is_some()
            && self.hist.held_next < self.hist.seq_next_known
            && held > self.hist.held_next
            && held <= self.hist.seq_next_known
    }

    /// A joiner invited by `from` into a reset of the group it joins: its join may be ordered
    /// (it may be in the view the reset replaces) but it never learnt so and holds nothing. It
    /// gives up that join in this incarnation and says so; the coordinator then counts it out
    /// of the majority. Safe against two groups: a joiner that said so never votes in a reset of
    /// this incarnation (it ignores its join entry of it), so every majority is one of the
    /// members that may vote, whichever of these joiners each coordinator heard from, and any
    /// two such majorities share a member. The joiner joins the reset group anew, as its join
    /// requests go on and it follows the newer incarnation.
    fn renounce_join(&mut self, from: NodeId) {
        self.renounced = Some(self.incarnation);
        self.rec
            .control
            .word(from, VoteKind::Joining, from, self.hist.held_next);
    }

    /// The majority of `members` a reset needs: joiners that gave up their join
    /// ([`VoteKind::Joining`]) are not counted.
    fn majority_of(&self, members: &[NodeId]) -> usize {
        let out = match self.rec.mode.as_ref().map(|r| &r.role) {
            Some(Role::Coordinator(c)) => {
                c.renounced.iter().filter(|m| members.contains(m)).count()
            }
            _ => 0,
        };
        (members.len() - out) / 2 + 1
    }

    /// BC_VOTE from `from`: a vote for us; word from a member that follows us of a better
    /// coordinator (`Forward`); or word from the coordinator we follow that it yielded to
    /// `cand` (`Redirect`), which is never answered, so that no two members bounce words.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::sequencer) fn on_vote(
        &mut self,
        from: NodeId,
        kind: VoteKind,
        cand: NodeId,
        cand_held: u64,
        vote: VoteHeld,
        round: u32,
    ) {
        let me = self.me;
        let now = self.now;
        // The coordinator we follow may not be a member of the views we hold yet (see
        // `may_hold_our_missing_joins`): its word to follow another is taken, never a vote.
        let from_ours = self.rec.mode.as_ref().is_some_and(
            |r| matches!(r.role, Role::Participant { coordinator, .. } if coordinator == from),
        );
        if !(self.recovery_invites(from) || (kind == VoteKind::Redirect && from_ours)) {
            return;
        }
        let Some(r) = self.rec.mode.as_mut() else {
            return;
        };
        match (kind, &mut r.role) {
            (VoteKind::Joining, Role::Coordinator(c))
                if cand == me && r.old_members.contains(&from) && !c.renounced.contains(&from) =>
            {
                c.renounced.push(from);
                c.voters.retain(|v| v.id != from);
                self.coordinate(false);
            }
            (VoteKind::Vote, Role::Coordinator(c)) if cand == me => {
                match c.voters.iter_mut().find(|v| v.id == from) {
                    Some(v) => {
                        v.held_next = v.held_next.max(vote.held_next);
                        v.expect = v.expect.max(vote.expect);
                        // Its history's base only rises (purges) within an incarnation.
                        v.base = v.base.max(vote.base);
                        v.heard_at = now;
                        v.round = v.round.max(round);
                    }
                    None => c.voters.push(Voter {
                        id: from,
                        held_next: vote.held_next,
                        expect: vote.expect,
                        base: vote.base,
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

    /// The coordinator's step: on a round timer (`tick`) or when a vote or repair arrived.
    /// Phase 1 invites; phase 2 sets the target, fetches what we lack, and commits once every
    /// member of the new group holds everything below the target.
    pub(super) fn coordinate(&mut self, tick: bool) {
        if !self.invitations_done(tick) {
            return;
        }
        let Some((best, target)) = self.phase2_target(tick) else {
            return;
        };
        if let Some((next, held)) = self.serving_voter(target) {
            // We cannot give a voter what it lacks: hand the recovery over to one that can
            // (we tell it, and our voters follow it).
            self.follow(next, held, target, 0, 0);
            return;
        }
        if self.my_vote() < target {
            // Fetch what we lack from the best member first.
            self.rec.repair_from = Some(best);
            self.check_gap();
            return;
        }
        self.rec.repair_from = None;
        if let Some((voters, explicit_min)) = self.fresh_votes() {
            self.try_commit(target, &voters, explicit_min);
        }
    }

    /// Phase 2: a voter that needs entries this coordinator no longer or never held (below its
    /// history's base: a joiner holds the history from its own join on), and a voter that holds
    /// all of them and everything below `target` (its vote's `base` at or below them). Every
    /// member repairs from its coordinator only, so without handing over such a reset waited
    /// for ever: a joiner whose vote ranked first, coordinating a member that had lost the
    /// joins before it.
    ///
    /// The holder is judged by its history's base, not by what it has not delivered yet
    /// (`expect`): a member keeps what it delivered until it is stable, and a member that lags
    /// keeps the group's stability below what it lacks, so the others that delivered it still
    /// hold it. Judged by `expect`, no voter qualified once all but the lagging one had
    /// delivered past its gap, and the reset waited for ever (crash sweep seeds 22 and 56 of
    /// `an_old_sequencer_wakes_with_joins_in_its_buffer`, with members slowed by the hold of
    /// repeated repairs).
    fn serving_voter(&self, target: u64) -> Option<(NodeId, u64)> {
        let r = self.rec.mode.as_ref()?;
        let Role::Coordinator(c) = &r.role else {
            return None;
        };
        let lowest = (c.voters.iter().map(|v| v.held_next))
            .filter(|&h| h < target)
            .min()?;
        if lowest >= self.hist.buffer.base() {
            return None;
        }
        (c.voters.iter())
            .find(|v| v.base <= lowest && v.held_next >= target)
            .map(|v| (v.id, v.held_next))
    }

    /// Phase 1: invite until every member of the old view answered or stayed silent. Whether
    /// phase 2 runs (with enough voters: a majority of the members of the newest view we hold,
    /// by default).
    pub(super) fn invitations_done(&mut self, tick: bool) -> bool {
        let now = self.now;
        let round_timeout = self.round_timeout();
        let retries = self.cfg.alive_retries.max(1);
        let me = self.me;
        let known = self.known_members();
        let majority = self.majority_of(&known);
        let Some(r) = self.rec.mode.as_mut() else {
            return false;
        };
        let Role::Coordinator(c) = &mut r.role else {
            return false;
        };
        if c.target.is_some() {
            return true;
        }
        let waiting_for = r
            .old_members
            .iter()
            .filter(|m| **m != me && !c.suspects.contains(m) && !c.renounced.contains(m))
            .filter(|m| !c.voters.iter().any(|v| v.id == **m))
            .count();
        let done = c.round > retries || (c.round >= 1 && waiting_for == 0);
        if !done {
            if tick {
                c.round += 1;
                r.invite_due = true;
                r.next_at = Some(now + round_timeout);
            }
            return false;
        }
        let needed = r.min_members.unwrap_or(majority);
        if c.voters.len() + 1 < needed {
            let reachable = c.voters.len() + 1;
            self.fail_attempt(reachable, needed);
            return false;
        }
        c.target = Some(0);
        true
    }

    /// Phase 2: voters that went silent crashed during recovery and are dropped (too few left:
    /// back to phase 1); the target is the highest vote. Returns the best member and the target.
    pub(super) fn phase2_target(&mut self, tick: bool) -> Option<(NodeId, u64)> {
        let now = self.now;
        let round_timeout = self.round_timeout();
        let silence = self.recovery_silence();
        let retries = self.cfg.alive_retries.max(1);
        let mine = self.my_vote();
        let me = self.me;
        let majority = self.majority_of(&self.known_members());
        let r = self.rec.mode.as_mut()?;
        let Role::Coordinator(c) = &mut r.role else {
            return None;
        };
        c.voters.retain(|v| now < v.heard_at + silence);
        if c.voters.len() + 1 < r.min_members.unwrap_or(majority) {
            c.target = None;
            c.round = retries + 1;
            r.next_at = Some(now);
            return None;
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
        Some((best, target))
    }

    /// The votes that count towards the commit, as (member, holding point, expect), and the
    /// explicit minimum group size; `None` while some vote is stale.
    ///
    /// Only votes answering this round or the one before count: a participant that answered
    /// them heard us within two rounds, and leaves us only after `alive_retries + 1` silent
    /// rounds, so it cannot be counted by another coordinator now. A voter whose newest vote is
    /// older is waited for (its vote may have been lost), until it has been silent for long
    /// enough to be dropped.
    #[allow(clippy::type_complexity)]
    pub(super) fn fresh_votes(&self) -> Option<(Vec<(NodeId, u64, u64)>, Option<usize>)> {
        let r = self.rec.mode.as_ref()?;
        let Role::Coordinator(c) = &r.role else {
            return None;
        };
        let fresh = c.round.saturating_sub(1);
        if c.voters.iter().any(|v| v.round < fresh) {
            return None;
        }
        let voters = c
            .voters
            .iter()
            .map(|v| (v.id, v.held_next, v.expect))
            .collect();
        Some((voters, r.min_members))
    }

    /// Commit the reset at `target` once the new group is large enough and every member of it
    /// holds everything below the target.
    pub(super) fn try_commit(
        &mut self,
        target: u64,
        voters: &[(NodeId, u64, u64)],
        explicit_min: Option<usize>,
    ) {
        let me = self.me;
        let Some((view_id, members)) = self.view_at(target) else {
            return;
        };
        let needed = explicit_min.unwrap_or(self.majority_of(&members));
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
        if all_hold {
            self.commit_reset(target, view_id, &members, voters);
        }
    }

    /// Every member of the new group holds everything below the target: install the result
    /// here, multicast it, and wait for the acknowledgements.
    pub(super) fn commit_reset(
        &mut self,
        target: u64,
        view_id: u64,
        members: &[NodeId],
        voters: &[(NodeId, u64, u64)],
    ) {
        let me = self.me;
        let stable = voters
            .iter()
            .filter(|v| members.contains(&v.0))
            .map(|v| v.2)
            .fold(self.hist.next_deliver, u64::min)
            .max(self.hist.stable);
        let result = ResultRecord {
            incarnation: self.incarnation.wrapping_add(1),
            seq: target,
            stable,
            view: view_bytes(view_id + 1, me, members),
        };
        let pending: Vec<NodeId> = members.iter().copied().filter(|m| *m != me).collect();
        self.install_result(me, &result);
        self.rec.awaiting = Some(AwaitAcks {
            pending,
            rounds: 0,
            next_at: self.now,
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

    /// This reset attempt found only `reachable` members: the group waits, and a new attempt
    /// invites everyone again after a pause.
    pub(super) fn fail_attempt(&mut self, reachable: usize, needed: usize) {
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

    /// One round of the result: multicast it to the members that did not acknowledge; after
    /// `alive_retries` silent rounds the new group recovers in turn.
    pub(super) fn result_round(&mut self) {
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
    pub(in crate::sequencer) fn on_result_ack(
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
    pub(in crate::sequencer) fn on_result(
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
        let Ok((_, coordinator, members)) = decode_view(view) else {
            return;
        };
        let mine = members.contains(&self.me);
        if !self.result_entitled(from, incarnation, seq, coordinator, &members) {
            self.stats.results_refused += 1;
            return;
        }
        self.rec.detector.heard(from, self.now);
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
            if !self.hist.buffer.in_window(seq) {
                // No slot here for the reset entry: a coordinator that counted this member's
                // vote starts at or above what it holds, within its window. A forged result
                // (sequencer_state found one) is refused, not installed half.
                self.stats.results_refused += 1;
                return;
            }
            // The coordinator it names orders next and waits for our acknowledgement, whoever
            // of its group answered us with it.
            self.install_result(coordinator, &res);
            self.rec.control.ack(coordinator);
            return;
        }
        if incarnation == self.incarnation.wrapping_add(1) {
            // Left out of the next incarnation: what lies below its start is the agreed
            // order, so deliver what we hold of it before going.
            self.rec.mode = None;
            self.ord = None;
            self.hist.truncate(seq);
            self.hist.accepted_next = seq;
            self.deliver();
        }
        if self.phase == Phase::Member {
            self.expel(incarnation);
        }
    }

    /// Whether `from` may send this member the result of a reset (incarnation `incarnation`,
    /// entry at `seq`, founding `members` with `coordinator` as sequencer). It passes the
    /// incarnation filter, so the roles are checked here:
    ///
    /// - whoever sends a result built it or installed it: it is a member of the group it founds
    ///   (a result that removes everybody, its sender included, comes from nobody);
    /// - a result installed here makes the coordinator it names our sequencer: only while we
    ///   take part in a recovery, only if we voted for that coordinator in it (a group names us
    ///   only if its coordinator counted our vote), and never one naming us (we would have
    ///   built it);
    /// - a result that leaves us out (or is further ahead) ends our membership: while we take
    ///   part in a recovery any member of the group that went on may answer our invitations
    ///   with it, unless it names as coordinator the member we follow (which counted our votes;
    ///   our own leave ordered aside); in normal operation only its coordinator or our own sequencer (which answers
    ///   our probes with it), and under the majority policy only for a group that holds a
    ///   majority of our view (a reset needs one), so that one member's datagram cannot expel
    ///   the rest. A refused result does not count as hearing from its sender: a member whose
    ///   sequencer answers its probes only with results finds it failed, and in recovery takes
    ///   the result from any member of the group that went on.
    fn result_entitled(
        &self,
        from: NodeId,
        incarnation: u32,
        seq: u64,
        coordinator: NodeId,
        members: &[NodeId],
    ) -> bool {
        if !members.contains(&from) {
            return false;
        }
        if incarnation <= self.incarnation {
            // Ours (an acknowledgement lost; a second group of ours that settled, acted on only
            // in recovery) or older (ignored).
            return true;
        }
        let took_part = self.recovering() || self.rec.awaiting.is_some();
        let install = incarnation == self.incarnation.wrapping_add(1)
            && members.contains(&self.me)
            && self.hist.held_next >= seq;
        let mode = self.rec.mode.as_ref();
        if install {
            // Not one naming us: we would have built it. And only from a coordinator we voted
            // for in this recovery: its result names only members whose votes it counted.
            // The coordinator must be a member by the history we hold up to the result: one
            // we followed before we knew it (`may_hold_our_missing_joins`) proved so by the
            // entries it served us.
            return took_part
                && coordinator != self.me
                && mode.is_some_and(|r| r.voted_for.contains(&coordinator))
                && (self.view.members.contains(&coordinator)
                    || self.known_members().contains(&coordinator));
        }
        if took_part {
            // A result that leaves us out, of the coordinator we follow (we answered its
            // invitations and have not left it): it counted our votes, so it cannot leave us
            // out, unless our own leave is ordered. Should its result really have gone on
            // without us (our votes lost), we take it once we stop following it, after its
            // silence, from any member of its group answering our own invitations.
            let follows = mode.is_some_and(
                |r| matches!(r.role, Role::Participant { coordinator: c, .. } if c == coordinator),
            );
            return !follows || !self.known_members().contains(&self.me);
        }
        let held = members
            .iter()
            .filter(|m| self.view.members.contains(m))
            .count();
        (from == coordinator || from == self.sequencer_hint || from == self.view.coordinator)
            && (!self.cfg.majority_policy() || held > self.view.members.len() / 2)
    }

    /// Where our own stream of requests stands after a reset: the last protocol number ordered
    /// below it, and whether the next fragment continues a message begun there.
    pub(super) fn own_stream(&self) -> (u64, bool) {
        let mid = self
            .sender
            .outq
            .iter()
            .find(|f| f.pnum > self.sender.own_ordered)
            .is_some_and(|f| f.frag_index > 0);
        (self.sender.own_ordered, mid)
    }

    /// Leave the group for good: it went on without us.
    pub(super) fn expel(&mut self, incarnation: u32) {
        self.set_phase(Phase::Left);
        self.rec.mode = None;
        self.ord = None;
        self.rec.awaiting = None;
        self.rec.detector.clear();
        self.events
            .push_back(Event::Recovery(Recovery::Expelled { incarnation }));
    }

    /// Install a reset: the new incarnation, the reset entry at `res.seq`, nothing of the old
    /// order beyond it. `coordinator` orders next.
    pub(in crate::sequencer) fn install_result(&mut self, coordinator: NodeId, res: &ResultRecord) {
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
        let inserted = self.hist.insert(
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
        // Every member of the new group, which a reset forms only with enough members, holds
        // everything below `t`: sends there are complete.
        self.hist.complete_next = self.hist.complete_next.max(t);
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
        // An entry in our name numbered at or past our next number was never sent by us (a
        // forged request the old sequencer ordered): ours end below `next_pnum` (found by
        // the `sequencer_state` fuzz target: the next own fragment was then taken for one
        // already ordered).
        self.sender.own_ordered = own.min(self.sender.next_pnum - 1);
        self.sender.resend_unordered();
        self.sender.rtt_probe = None;
        self.sender.repeated_probe = None;
        self.rec.silent_req_timeouts = 0;
        self.hist.gaps.clear();
        self.refresh_detector();
    }
}

/// A coordinator's invitation (BC_REFORMREQ) as a member reads it.
struct Invitation {
    from: NodeId,
    /// The coordinator's vote.
    held: u64,
    /// Its phase 2 target (0: none yet).
    target: u64,
    round: u32,
}

impl RecoveryMode {
    /// Our role's reaction at `now` to `inv` (we are `me`, with vote `mine`; our coordinator
    /// counts as gone after `silence` without being heard): whether to follow the inviter, whether the repair
    /// target moved, and which coordinator to tell of a better one.
    fn invited(
        &mut self,
        inv: &Invitation,
        me: NodeId,
        mine: u64,
        now: Time,
        silence: Duration,
    ) -> (bool, bool, Option<NodeId>) {
        match &mut self.role {
            Role::Idle => (true, false, None),
            Role::Participant {
                coordinator,
                coordinator_held,
                target: t,
                heard_at,
                round: rd,
            } => {
                if *coordinator == inv.from {
                    *coordinator_held = inv.held;
                    *heard_at = now;
                    *rd = (*rd).max(inv.round);
                    self.next_at = Some(now + silence);
                    self.vote_due = true;
                    let repair = *t != inv.target;
                    *t = inv.target;
                    (false, repair, None)
                } else if better(inv.held, inv.from, *coordinator_held, *coordinator) {
                    // Tell our coordinator of the better one: if it already yielded to it (and
                    // its word to us was lost), it tells us again whom to follow.
                    (false, false, Some(*coordinator))
                } else {
                    (false, false, None)
                }
            }
            Role::Coordinator(_) => {
                // The suspect the other coordinator names is not adopted: a member alive is
                // waited for until it answers or the rounds run out (`Coord::suspects`).
                // A weaker coordinator yields to our own invitations in turn.
                (better(inv.held, inv.from, mine, me), false, None)
            }
        }
    }
}
