//! Fault recovery: RMP's reformation (section 4.4), on the common failure detector.
//!
//! A member that finds another failed (the common [`crate::common::FailureDetector`]: a peer
//! answers none of its probes; a busy ring needs no probes, since anything heard counts)
//! becomes the *initiator*. It multicasts a Recovery Start with a new version (view id) and
//! the sync point the members are to reach; every member of the old view that may join that
//! version stops the token, answers with its own sync point (Recovery Vote), and fetches what
//! it lacks: ACKs and ordered slots by NACK, and the unordered packets of members that did not
//! answer by Recovery Fetch. The initiator raises the shared sync point to the highest one
//! reported, so that nothing any survivor holds is lost. Once every member that answered
//! reached it, and all but one of the old view answered or no progress was made for a few
//! rounds, the initiator builds the new list from the members at the sync point and checks it
//! against the minimum partition size (a majority of the old view by default, or the
//! configured constant). It commits the list in two phases: a Recovery New List carrying the
//! ACKs that end the old view (one ordering the recovered packets of the removed members, then
//! the New List), acknowledged by every member of the new list; then the commit, which the
//! initiator multicasts (Recovery Commit) together with the first ACK of the new view, sent as
//! its token site. A member bound to the New List commits on the Recovery Commit only (an ACK
//! proves nothing: the initiator may have given the list up, and another reformation may have
//! gone on from the same ACK number); one that missed it asks again with its acknowledgement.
//!
//! A member joins only a version larger than any it joined (versions are ordered with the
//! initiator's id as tie-break) and one reformation at a time; once it acknowledged a New List
//! it is bound to that version and joins only larger ones. A smaller competing initiator is
//! told to abort and joins the larger one when it hears its Start. A member that the new view
//! left out is told so ([`super::packet::EXPELLED`]) when it next acts as a member, and may
//! come back only as a new member ([`crate::Engine::rejoin`]).

use super::engine::{Ring, RingTimer};
use super::membership::Phase;
use super::order::{Entry, OrderingQ, SlotState};
use super::packet::{
    self, Ack, AckBody, NewList, RecoveryNewList, RecoveryStart, RecoveryVote, SyncPoint,
};
use super::recovery::{Commit, Poll, Reformation};
use crate::engine::{Destination, Event, NodeId, Recovery, Time};
use crate::wire::{self, Reader};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Most members of a ring that recovers (the sync point names each origin once).
const MAX_RING: usize = SyncPoint::MAX_ORIGINS;
/// Unordered packets of one removed member recovered at most per reformation (they go into at
/// most three ACKs before the New List).
const MAX_RECOVERED: usize = 3 * packet::MAX_ENTRIES;

impl Ring {
    /// Whether this member is in recovery with nobody to reform the ring with: every other
    /// member of its ring is the one found failed, and nobody has answered (no vote for our
    /// reformation, no New List of another's holds us). The survivor of a ring of two whose
    /// peer crashed, waiting for a majority (or for a manual reset): asked to leave, it has
    /// nobody to tell, so it leaves at once rather than wait out the driver's leave timeout.
    pub(super) fn alone_in_recovery(&self) -> bool {
        if !self.recovering() {
            return false;
        }
        let mut others = self.membership.ring.iter().filter(|&&m| m != self.me);
        match &self.rec.current {
            // A failure reported for a manual reset: the detector found one of the others.
            None => others.count() <= 1,
            Some(r) => {
                r.new_list.is_none()
                    && r.poll
                        .as_ref()
                        .is_none_or(|p| p.votes.keys().all(|&m| m == self.me))
                    && r.suspect.is_some_and(|s| others.all(|&m| m == s))
            }
        }
    }

    /// The initiator's and the members' round length.
    fn round(&self) -> Duration {
        self.cfg.reform_round.max(self.flow.rtt.base_rto())
    }

    /// Whether the ring is doing anything this member knows of: the token goes round, or this
    /// member waits for something (its packets to be ordered or to become stable, its leave,
    /// ACKs or slots it lacks). Only then are failures looked for.
    pub(super) fn ring_active(&self) -> bool {
        (self.token.idle as usize) < self.membership.ring.len()
            || self.order.ordered_next.get(&self.me).copied().unwrap_or(0) < self.flow.own_next
            || !self.flow.own_ordered.is_empty()
            || self.leaving()
            || self.order.lacks()
    }

    /// Whether failure detection runs at its slow pace: the ring is quiescent and no probing
    /// round is under way.
    pub(super) fn detector_idle(&self) -> bool {
        !self.ring_active() && !self.rec.detector.as_ref().is_some_and(|d| d.probing())
    }

    /// Whether a failure may be declared or recovery run by this member now.
    pub(super) fn in_ring(&self) -> bool {
        self.member() && !self.left() && !self.removed()
    }

    /// The failure detector found `suspect` failed (or an attempt is due again): lead a
    /// reformation with a version above any seen.
    pub(super) fn start_reformation(&mut self, now: Time, suspect: Option<NodeId>) {
        if !self.in_ring() || self.membership.ring.len() > MAX_RING {
            return;
        }
        self.rec.failure_reported = false;
        let version = self
            .membership
            .view_id
            .max(self.rec.seen.0)
            .max(self.rec.bound)
            + 1;
        if self.rec.current.is_none() {
            self.events.push_back(Event::Recovery(Recovery::Failed {
                suspect: suspect.unwrap_or(self.me),
            }));
        }
        let began = self.rec.current.as_ref().map_or(now, |r| r.began);
        self.rec.seen = (version, self.me);
        self.timers.clear(RingTimer::ReformRetry);
        self.halt_token();
        let own = self.order.sync_point(MAX_RING);
        // A version above every one seen, bound to, or installed: reformations are ordered.
        debug_assert!(version > self.rec.bound && version > self.membership.view_id);
        let mut votes = BTreeMap::new();
        votes.insert(
            self.me,
            RecoveryVote {
                version,
                holds_all: self.order.q.holds_all(),
                at: own.clone(),
            },
        );
        self.rec.current = Some(Reformation {
            version,
            initiator: self.me,
            suspect,
            target: own,
            new_list: None,
            poll: Some(Poll {
                old: self.membership.ring.clone(),
                votes,
                progress: (0, 0, 0),
                stalled: 0,
                commit: None,
            }),
            next_at: now,
            heard_at: now,
            began,
        });
        self.reform_round(now);
    }

    /// The reformation's timer: the initiator's round, a member's repeats, or giving up on a
    /// silent initiator.
    pub(super) fn reform_timeout(&mut self, now: Time) {
        if self.timers.due(RingTimer::ReformRetry, now) {
            self.timers.clear(RingTimer::ReformRetry);
            let suspect = self.rec.current.as_ref().and_then(|r| r.suspect);
            self.start_reformation(now, suspect);
            return;
        }
        let Some(r) = &self.rec.current else { return };
        if now < r.next_at {
            return;
        }
        if r.poll.is_some() {
            return self.reform_round(now);
        }
        // A member: repeat its answer; give up on an initiator silent for longer than a crash
        // takes to be found, and lead instead.
        let silent = now.saturating_since(r.heard_at);
        if silent > self.give_up_after() {
            let suspect = Some(r.initiator);
            self.rec.current = None;
            return self.start_reformation(now, suspect);
        }
        self.answer(now);
    }

    /// How long a member waits for a silent initiator.
    fn give_up_after(&self) -> Duration {
        self.rec
            .detector
            .as_ref()
            .map_or(Duration::from_secs(1), |d| d.failure_timeout())
            .max(self.round() * 8)
    }

    /// A member's answer, repeated each round: its vote (or its acknowledgement of the New
    /// List), and requests for what it lacks to reach the shared sync point.
    fn answer(&mut self, now: Time) {
        let round = self.round();
        let Some(r) = self.rec.current.as_mut() else {
            return;
        };
        r.next_at = now + round;
        let (version, to) = (r.version, r.initiator);
        if r.new_list.is_some() {
            self.send(Destination::Peer(to), packet::RECOVERY_ACK_NEW_LIST, |b| {
                b.extend_from_slice(&version.to_be_bytes())
            });
            return;
        }
        let target = r.target.clone();
        let vote = RecoveryVote {
            version,
            holds_all: self.order.q.holds_all(),
            at: self.order.sync_point(MAX_RING),
        };
        self.send(Destination::Peer(to), packet::RECOVERY_VOTE, |b| {
            vote.encode(b)
        });
        self.fetch_towards(now, &target, &vote.at);
    }

    /// Asks for what is missing between `own` and `target`: ACKs and slots by the NACK path
    /// (to the whole ring), the unordered packets of members gone by Recovery Fetch.
    fn fetch_towards(&mut self, now: Time, target: &SyncPoint, own: &SyncPoint) {
        if target.acks > self.order.next_ack {
            self.order.highest_heard =
                Some(self.order.highest_heard.unwrap_or(0).max(target.acks - 1));
        }
        // The NACK path starts on its own only after progress; here nothing progressed.
        self.watch_gaps(now);
        for &(o, s) in &target.data {
            let have = own.reached(o);
            if have < s {
                let end = s.min(have + packet::MAX_ENTRIES as u64);
                self.send(Destination::Group, packet::RECOVERY_FETCH, |b| {
                    b.extend_from_slice(&o.0.to_be_bytes());
                    b.extend_from_slice(&have.to_be_bytes());
                    b.extend_from_slice(&end.to_be_bytes());
                });
            }
        }
    }

    /// Whether `v` stands at `target`: it holds every slot but those the target says are lost.
    fn at_target(v: &RecoveryVote, target: &SyncPoint) -> bool {
        let held = v.holds_all
            || (v.at.lost.len() <= SyncPoint::MAX_LOST
                && v.at.lost.iter().all(|ts| target.lost.contains(ts)));
        held && v.at.acks == target.acks && target.data.iter().all(|&(o, s)| v.at.reached(o) >= s)
    }

    /// The slots no voter holds whose origin did not vote: lost with it (a token site that
    /// ordered its own packet and crashed before any other member had it). Without this the
    /// members never stood at the sync point, and the reformation tried for ever (every-engine
    /// sweep seed 1927). A slot some voter holds is fetched instead; one of a voter is held by
    /// it (a member keeps its own packets until they are stable).
    fn lost_slots(q: &OrderingQ, votes: &BTreeMap<NodeId, RecoveryVote>) -> Vec<u64> {
        let mut lists = votes.values().map(|v| &v.at.lost);
        let Some(first) = lists.next() else {
            return vec![];
        };
        let mut lost: Vec<u64> = first.clone();
        for l in lists {
            lost.retain(|ts| l.contains(ts));
        }
        lost.retain(|&ts| match q.get(ts).map(|s| &s.entry) {
            Some(Entry::Data { origin, .. }) => !votes.contains_key(origin),
            _ => false,
        });
        lost.truncate(SyncPoint::MAX_LOST);
        lost
    }

    /// One round of the initiator: raise the shared sync point, decide, or repeat.
    fn reform_round(&mut self, now: Time) {
        let round = self.round();
        let own = RecoveryVote {
            version: 0,
            holds_all: self.order.q.holds_all(),
            at: self.order.sync_point(MAX_RING),
        };
        let needed = self
            .rec
            .current
            .as_ref()
            .and_then(|r| r.poll.as_ref())
            .map_or(1, |p| self.rec.needed(p.old.len()));
        let Some(r) = self.rec.current.as_mut() else {
            return;
        };
        let Some(poll) = r.poll.as_mut() else { return };
        r.next_at = now + round;
        if let Some(c) = poll.commit.as_mut() {
            c.rounds += 1;
            if c.rounds > self.cfg.commit_rounds {
                // Some member of the list never acknowledged: form the list again.
                return self.abort_own(now);
            }
            let list = c.list.clone();
            self.send(Destination::Group, packet::RECOVERY_NEW_LIST, |b| {
                list.encode(b)
            });
            return;
        }
        poll.votes.insert(
            self.me,
            RecoveryVote {
                version: r.version,
                ..own.clone()
            },
        );
        // The shared sync point: the highest ACK count reported, and for every member that
        // did not answer, the furthest any member holds of its packets.
        let mut target = SyncPoint {
            acks: poll.votes.values().map(|v| v.at.acks).max().unwrap_or(0),
            data: Vec::new(),
            lost: Vec::new(),
        };
        for &o in &poll.old {
            if !poll.votes.contains_key(&o) {
                let s = poll.votes.values().map(|v| v.at.reached(o)).max();
                if let Some(s) = s.filter(|&s| s > 0) {
                    target.data.push((o, s));
                }
            }
        }
        target.lost = Self::lost_slots(&self.order.q, &poll.votes);
        let voters = poll.votes.len();
        let reached: Vec<NodeId> = poll
            .old
            .iter()
            .copied()
            .filter(|m| {
                poll.votes
                    .get(m)
                    .is_some_and(|v| Self::at_target(v, &target))
            })
            .collect();
        let progress = (voters, reached.len(), target.acks);
        if progress == poll.progress {
            poll.stalled += 1;
        } else {
            poll.progress = progress;
            poll.stalled = 0;
        }
        r.target = target.clone();
        // All but one answered and stand at the sync point: decide now, if they are enough to
        // go on. If they are not (a ring of two: the initiator alone is all but one), the one
        // missing may be alive and only slow to answer (a suspicion from loss or a pause):
        // wait for it until the rounds stall, or the initiator gives up at once, every time,
        // without ever sending its Start.
        let all_but_one =
            voters + 1 >= poll.old.len() && reached.len() == voters && voters >= needed;
        let done = all_but_one || poll.stalled >= self.cfg.stalled_rounds;
        if !done {
            let start = RecoveryStart {
                version: r.version,
                suspect: r.suspect,
                target: target.clone(),
            };
            self.send(Destination::Group, packet::RECOVERY_START, |b| {
                start.encode(b)
            });
            self.fetch_towards(now, &target, &own.at);
            return;
        }
        if !reached.contains(&self.me) {
            // The initiator cannot reach the shared sync point itself (section 4.4): abort.
            return self.abort_own(now);
        }
        if reached.len() < needed {
            self.rec.came_up_short = true;
            self.events
                .push_back(Event::Recovery(Recovery::ResetFailed {
                    reachable: reached.len(),
                    needed,
                }));
            return self.abort_own(now);
        }
        let version = r.version;
        let old = poll.old.clone();
        let list = self.build_new_list(version, &old, &reached, &target);
        let Some(r) = self.rec.current.as_mut() else {
            return;
        };
        let Some(poll) = r.poll.as_mut() else { return };
        // The initiator is bound to its own list too, until it commits or gives it up.
        self.rec.bound = self.rec.bound.max(version);
        poll.commit = Some(Commit {
            members: reached.clone(),
            acked: BTreeSet::from([self.me]),
            list: list.clone(),
            rounds: 0,
        });
        self.send(Destination::Group, packet::RECOVERY_NEW_LIST, |b| {
            list.encode(b)
        });
        if reached == [self.me] {
            self.commit(now);
        }
    }

    /// The ACKs that end the old view: the recovered packets of the removed members, then the
    /// New List (the initiator keeps the token).
    pub(super) fn build_new_list(
        &self,
        version: u64,
        old: &[NodeId],
        members: &[NodeId],
        target: &SyncPoint,
    ) -> RecoveryNewList {
        let mut entries = Vec::new();
        for &o in old.iter().filter(|o| !members.contains(o)) {
            let from = self.order.ordered_next.get(&o).copied().unwrap_or(0);
            let end = target
                .reached(o)
                .min(from.saturating_add(MAX_RECOVERED as u64));
            entries.extend(
                (from..end)
                    .filter(|&s| self.order.data.has(o, s))
                    .map(|s| (o, s)),
            );
        }
        let mut acks = Vec::new();
        // Locks of the members left out are freed.
        let (locks, clients) = self.rpc.gs.state_for(members, &self.rpc.gs.locks);
        let (mut num, mut ts) = (self.order.next_ack, self.order.q.end());
        let mut next_sseq: BTreeMap<NodeId, u64> = self.order.ordered_next.clone();
        for chunk in entries.chunks(packet::MAX_ENTRIES).take(3) {
            for &(o, s) in chunk {
                next_sseq.insert(o, s + 1);
            }
            acks.push(self.ack_datagram(Ack {
                num,
                view: self.membership.view_id,
                first_ts: ts,
                next_site: self.me,
                idle: 0,
                ring: self.membership.ring_digest,
                lineage: self.membership.lineage,
                body: AckBody::Entries(chunk.to_vec()),
            }));
            num += 1;
            ts += chunk.len() as u64;
        }
        acks.push(
            self.ack_datagram(Ack {
                num,
                view: self.membership.view_id,
                first_ts: ts,
                next_site: self.me,
                idle: 0,
                ring: self.membership.ring_digest,
                lineage: self.membership.lineage,
                body: AckBody::NewList(NewList {
                    view_id: version,
                    members: members.to_vec(),
                    joined: vec![],
                    left: None,
                    next_sseq: members
                        .iter()
                        .map(|m| next_sseq.get(m).copied().unwrap_or(0))
                        .collect(),
                    lock_op: None,
                    locks,
                    clients,
                    unicast_only: self.membership.unicast_only_of(members),
                }),
            }),
        );
        RecoveryNewList {
            version,
            acks,
            lost: target.lost.clone(),
        }
    }

    fn ack_datagram(&self, ack: Ack) -> Vec<u8> {
        let mut buf = self.header(packet::ACK);
        ack.encode(&mut buf);
        buf
    }

    /// The initiator gives up this attempt; it tries again with a larger version after a
    /// random delay (section 4.4), unless another initiator's Start comes first.
    fn abort_own(&mut self, now: Time) {
        let Some(r) = self.rec.current.as_ref() else {
            return;
        };
        let version = r.version;
        self.send(Destination::Group, packet::RECOVERY_ABORT, |b| {
            b.extend_from_slice(&version.to_be_bytes());
            b.push(packet::ABORT_GAVE_UP);
        });
        // Stay out of the ring's normal operation meanwhile: the reformation is not over.
        if let Some(r) = self.rec.current.as_mut() {
            r.poll = None;
            r.initiator = self.me;
            r.next_at = Time(u64::MAX);
        }
        let delay = self.round() * (2 + self.rng.below(8) as u32);
        self.timers.arm(RingTimer::ReformRetry, now + delay);
    }

    /// A Recovery Start from `from`.
    pub(super) fn on_recovery_start(&mut self, now: Time, from: NodeId, body: &[u8]) {
        let Ok(st) = RecoveryStart::decode(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        if !self.in_ring() {
            return;
        }
        if !self.membership.ring.contains(&from) {
            // A member the ring went on without: it may only come back as a new member.
            return self.tell_expelled(now, from, None);
        }
        let offered = (st.version, from);
        match &mut self.rec.current {
            Some(r) if (r.version, r.initiator) == offered => {
                r.heard_at = now;
                if r.poll.is_none() && r.new_list.is_none() {
                    r.target = st.target;
                    self.answer(now);
                }
                return;
            }
            _ => {}
        }
        let current = self.rec.current.as_ref().map(|r| (r.version, r.initiator));
        let joinable = offered > self.rec.seen
            && st.version > self.rec.bound
            && st.version > self.membership.view_id
            && current.is_none_or(|c| offered > c)
            && self.rec.current.as_ref().is_none_or(|r| {
                r.new_list.is_none() && r.poll.as_ref().is_none_or(|p| p.commit.is_none())
            });
        if !joinable {
            let mine = current.map_or(self.rec.seen.0.max(self.membership.view_id), |c| c.0);
            self.send(Destination::Peer(from), packet::RECOVERY_ABORT, |b| {
                b.extend_from_slice(&mine.to_be_bytes());
                b.push(packet::ABORT_YIELD);
            });
            return;
        }
        if self.rec.current.is_none() {
            self.events.push_back(Event::Recovery(Recovery::Failed {
                suspect: st.suspect.unwrap_or(from),
            }));
        }
        let began = self.rec.current.as_ref().map_or(now, |r| r.began);
        debug_assert!(
            st.version > self.rec.bound,
            "a member joins only larger versions"
        );
        self.rec.seen = offered;
        self.timers.clear(RingTimer::ReformRetry);
        self.halt_token();
        self.rec.current = Some(Reformation {
            version: st.version,
            initiator: from,
            suspect: st.suspect,
            target: st.target,
            new_list: None,
            poll: None,
            next_at: now,
            heard_at: now,
            began,
        });
        self.answer(now);
    }

    /// A Recovery Vote, at the initiator.
    pub(super) fn on_recovery_vote(&mut self, now: Time, from: NodeId, body: &[u8]) {
        let Ok(v) = RecoveryVote::decode(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        // A member the ring went on without votes in a reformation whose initiator was left
        // out as well, and came back as a new member since (it never answers that vote, and a
        // voter waits for a silent initiator as long as its failure detector allows, which
        // after a long partition is longer than a run): tell it (every-engine sweep seed
        // 9481). It acts on that only from a member of its own view, as this one was.
        self.tell_expelled(now, from, None);
        let Some(r) = self.rec.current.as_mut() else {
            return;
        };
        let Some(poll) = r.poll.as_mut() else { return };
        if v.version != r.version || !poll.old.contains(&from) || poll.commit.is_some() {
            return;
        }
        let first = poll.votes.insert(from, v).is_none();
        // A new voter may change the decision at once (all but one answered).
        if first && poll.votes.len() + 1 >= poll.old.len() {
            r.next_at = r.next_at.min(now);
        }
    }

    /// Data a member lacks to reach the sync point: any holder answers from its DataList.
    pub(super) fn on_recovery_fetch(&mut self, from: NodeId, body: &[u8]) {
        let mut rd = Reader::new(body);
        let (Ok(o), Ok(a), Ok(z)) = (rd.u32(), rd.u64(), rd.u64()) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        let o = NodeId(o);
        let end = z.min(a.saturating_add(packet::MAX_ENTRIES as u64));
        let again: Vec<_> = (a..end)
            .map_while(|s| (self.order.data.get(o, s)).map(|(p, q, f)| (s, *q, p.clone(), *f)))
            .collect();
        if !again.is_empty() {
            self.counters.retransmissions += again.len() as u64;
            self.send_runs(Destination::Peer(from), o, &again);
        }
    }

    /// The first phase of the commit, at a member.
    pub(super) fn on_recovery_new_list(&mut self, now: Time, from: NodeId, body: &[u8]) {
        let Ok(nl) = RecoveryNewList::decode(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        let next_ack = self.order.next_ack;
        // Holding every slot but those the list skips, none of which is held here (one that
        // came after the vote might have been delivered: the initiator forms the list again).
        let q = &self.order.q;
        let missing = q.missing_slots(SyncPoint::MAX_LOST);
        let holds_all = (missing.len() <= SyncPoint::MAX_LOST)
            && missing.iter().all(|ts| nl.lost.contains(ts))
            && nl.lost.iter().all(|&ts| {
                q.get(ts)
                    .is_some_and(|s| matches!(s.state, SlotState::Missing | SlotState::Requested))
            });
        let me = self.me;
        let Some(r) = self.rec.current.as_mut() else {
            return;
        };
        if r.version != nl.version || r.initiator != from || r.poll.is_some() {
            return;
        }
        r.heard_at = now;
        if r.new_list.is_none() {
            // Bound only to a list that names this member and starts where it stands.
            let first = nl
                .acks
                .first()
                .and_then(|d| wire::decode(d).ok())
                .and_then(|p| Ack::decode(p.body).ok());
            let last = nl
                .acks
                .last()
                .and_then(|d| wire::decode(d).ok())
                .and_then(|p| Ack::decode(p.body).ok());
            let fits = first.is_some_and(|a| a.num == next_ack)
                && holds_all
                && last.is_some_and(
                    |a| matches!(&a.body, AckBody::NewList(l) if l.members.contains(&me)),
                );
            if !fits {
                return;
            }
            self.rec.bound = self.rec.bound.max(nl.version);
            if let Some(r) = self.rec.current.as_mut() {
                r.new_list = Some(nl);
            }
        }
        self.answer(now);
    }

    /// A member acknowledged the New List: commit once every member of the list did.
    pub(super) fn on_recovery_ack_new_list(&mut self, now: Time, from: NodeId, body: &[u8]) {
        let Ok(version) = Reader::new(body).u64() else {
            self.counters.malformed_dropped += 1;
            return;
        };
        let Some(r) = self.rec.current.as_mut() else {
            // Committed already: the member missed the commit.
            if version == self.rec.last_committed && self.membership.ring.contains(&from) {
                self.send(Destination::Peer(from), packet::RECOVERY_COMMIT, |b| {
                    b.extend_from_slice(&version.to_be_bytes())
                });
            }
            return;
        };
        let Some(c) = r.poll.as_mut().and_then(|p| p.commit.as_mut()) else {
            return;
        };
        if version != r.version || !c.members.contains(&from) {
            return;
        }
        c.acked.insert(from);
        if c.members.iter().all(|m| c.acked.contains(m)) {
            self.commit(now);
        }
    }

    /// A Recovery Abort: a larger reformation goes first, or the ring committed a newer view.
    pub(super) fn on_recovery_abort(&mut self, now: Time, from: NodeId, body: &[u8]) {
        let mut rd = Reader::new(body);
        let (Ok(version), Ok(kind)) = (rd.u64(), rd.u8()) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        let Some(r) = self.rec.current.as_ref() else {
            return;
        };
        // A refusal of this member's own Start aborts its attempt only while it still leads it
        // (it may have joined the refuser's meanwhile); an initiator giving up its own attempt
        // frees the members that joined it.
        let ours = kind == packet::ABORT_YIELD
            && r.poll.as_ref().is_some_and(|p| p.commit.is_none())
            && version >= r.version;
        let from_leader = kind == packet::ABORT_GAVE_UP
            && r.poll.is_none()
            && r.initiator == from
            && version == r.version;
        if ours || from_leader {
            if ours {
                self.abort_own(now);
            } else if let Some(r) = self.rec.current.as_mut() {
                // Our initiator gave up (it never commits that version now, so a member bound
                // to its New List is free again): wait for its next attempt or lead one.
                r.new_list = None;
                r.heard_at = now;
                r.initiator = self.me;
                r.next_at = Time(u64::MAX);
                let delay = self.round() * (4 + self.rng.below(8) as u32);
                self.timers.arm(RingTimer::ReformRetry, now + delay);
            }
        }
    }

    /// Commits the New List of the current reformation: its ACKs are applied like any other,
    /// and the initiator, named token site, sends the first ACK of the new view.
    pub(super) fn commit(&mut self, now: Time) {
        let Some(r) = self.rec.current.take() else {
            return;
        };
        let list = match (r.new_list, r.poll) {
            (Some(l), _) => l,
            (
                None,
                Some(Poll {
                    commit: Some(c), ..
                }),
            ) => c.list,
            _ => return,
        };
        self.rec.on_commit(list.version, r.began, now);
        self.timers.clear(RingTimer::ReformRetry);
        // Every member of the new ring skips the same slots: none of them held them.
        for &ts in &list.lost {
            self.order.q.skip_lost(ts);
        }
        let mut removed = Vec::new();
        for d in &list.acks {
            let Ok(p) = wire::decode(d) else { continue };
            let Ok(ack) = Ack::decode(p.body) else {
                continue;
            };
            if let AckBody::NewList(l) = &ack.body {
                removed = self
                    .membership
                    .ring
                    .iter()
                    .copied()
                    .filter(|m| !l.members.contains(m))
                    .collect();
            }
            // The initiator made them, whatever their headers say.
            self.order
                .early_acks
                .insert(ack.num, (r.initiator, d.clone()));
            self.order.highest_heard = Some(self.order.highest_heard.unwrap_or(0).max(ack.num));
        }
        self.events.push_back(Event::Recovery(Recovery::Reset {
            incarnation: list.version as u32,
            removed,
        }));
        if r.initiator == self.me {
            let version = list.version;
            self.send(Destination::Group, packet::RECOVERY_COMMIT, |b| {
                b.extend_from_slice(&version.to_be_bytes())
            });
        }
        self.order.last_site = r.initiator;
        // The old view's token stopped at the sync point: the ACKs from there on are the
        // initiator's (it keeps the token, and names itself next in each).
        self.order.chain = Some((r.initiator, r.initiator));
        if self.timers.is_armed(RingTimer::DataRetry) {
            // Own packets not ordered yet go out again to the new ring, soon.
            self.timers.arm(RingTimer::DataRetry, now);
            self.flow.data_retry_mark = self.order.ordered_next.get(&self.me).copied().unwrap_or(0);
            // Whatever the token did: the new ring may lack them.
            self.flow.data_retry_heard = None;
        }
        self.apply_ready(now);
        self.watch_ring(now);
    }

    /// The initiator committed the New List this member is bound to.
    pub(super) fn on_recovery_commit(&mut self, now: Time, from: NodeId, body: &[u8]) {
        let Ok(version) = Reader::new(body).u64() else {
            self.counters.malformed_dropped += 1;
            return;
        };
        if self
            .rec
            .current
            .as_ref()
            .is_some_and(|r| r.initiator == from && r.version == version && r.new_list.is_some())
        {
            self.commit(now);
        }
    }

    /// Tells `to`, which acts as a member, that it is not in this ring (at most every
    /// [`self.cfg.expelled_every`]); `answers` is the number of the ACK from `to` that prompted
    /// it, if one did.
    pub(super) fn tell_expelled(&mut self, now: Time, to: NodeId, answers: Option<u64>) {
        if self.membership.ring.contains(&to) {
            return;
        }
        self.tell_elsewhere(now, to, answers);
    }

    /// Tells `to`, which acts as a member of another ring (a view of another lineage), that
    /// this member is in a ring of its own: EXPELLED with this ring's view and lineage, which
    /// `to` reads as news of where this member is, not of its own ring (at most every
    /// [`self.cfg.expelled_every`]).
    pub(super) fn tell_elsewhere(&mut self, now: Time, to: NodeId, answers: Option<u64>) {
        if !self.in_ring() {
            return;
        }
        if let Some(&t) = self.rec.told.get(&to) {
            if now.saturating_since(t) < self.cfg.expelled_every {
                return;
            }
        }
        if self.rec.told.len() >= self.cfg.expelled_peers && !self.rec.told.contains_key(&to) {
            if let Some(&k) = self.rec.told.keys().next() {
                self.rec.told.remove(&k);
            }
        }
        self.rec.told.insert(to, now);
        debug_assert!(self.rec.told.len() <= self.cfg.expelled_peers.max(1));
        let (view, lineage) = (self.membership.view_id, self.membership.lineage);
        self.send(Destination::Peer(to), packet::EXPELLED, |b| {
            packet::encode_expelled(b, view, lineage, answers)
        });
    }

    /// A member of this member's ring committed a newer view without it.
    pub(super) fn on_expelled(&mut self, now: Time, from: NodeId, body: &[u8]) {
        let Ok((view, lineage, answers)) = packet::decode_expelled(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        // The sender is in another ring of this name: its view id, however it compares with
        // ours, is that ring's, and says where the sender is, never that ours went on
        // without this member.
        let foreign = self.member() && lineage != self.membership.lineage;
        if foreign
            && !self.leaving()
            && (self.membership.admission).is_some_and(|(_, by)| by == from)
        {
            // The site whose admission of this member is not confirmed lives in another ring:
            // the admission is void (ordering that site out would leave this member alone in
            // a ring nobody confirms, showing no view for ever: formation sweep ring seed
            // 1472), and this member joins again.
            return self.expel(self.membership.view_id);
        }
        let passed_to_it = self.passing_to(from);
        // Said in answer to an ACK older than the sender's admission here: it may have taken
        // the admission since, and the token with it (taken back on this word, the token
        // made two ACKs of one number: formation sweep batched seeds 27720, 36832).
        let before_admission =
            answers.is_some_and(|n| self.admitted_at(from).is_some_and(|at| n < at));
        if foreign && before_admission {
            return;
        }
        // The joiner this site just admitted joined another ring of this name instead (its
        // untargeted join was heard by both): it never takes the token. So is a member this
        // site passed the token to that says it lives in another ring.
        // Not for a leaver: the joiner that took its token orders its leave first (removals
        // go first) and then says it is out, which is its leave, caught up below; taken for
        // the joiner being elsewhere, it ordered the joiner out in a view of its own while the
        // ring went on (ring_recovery's fault-free test, seed 21, once joins were gathered).
        let just_admitted_elsewhere = passed_to_it
            && !self.leaving()
            && !before_admission
            && (foreign || self.admission_unconfirmed(from));
        // A view of our ring older than the one it was admitted in: it is the member of
        // another ring of this name (a joiner that gave up waiting and created its own while
        // its join was admitted here), and never takes part in ours. (A view of another
        // lineage says nothing against ours.)
        let older_than_its_admission = !foreign
            && self.in_ring()
            && !self.leaving()
            && (self.membership.admitted_in.get(&from)).is_some_and(|&v| view < v);
        if just_admitted_elsewhere || older_than_its_admission {
            return self.order_out_of_ring(now, from);
        }
        if foreign && self.admission_unconfirmed(from) {
            // A joiner this ring admitted that never acted in it, living in another ring (two
            // rings admitted it): nothing of ours. The site that passes it the token hears it
            // itself (formation sweep ring seed 22249: host 5, admitted into a view 6 by two
            // rings, told host 3 it was out with its own ring's view 6, host 3 took it for
            // its own ring's, left a ring that went on, and came back taking old New Lists).
            return;
        }
        // A leaver behind its own removal is told it is out: that is its leave, which it
        // finishes by catching up (the others keep what it lacks for it). A leaver in a
        // reformation told of a newer view was left out by a reformation: no New List removes
        // it, there is nothing to catch up to, and its reformation would try for ever.
        let leaver_reformed_out =
            self.leaving() && self.rec.current.is_some() && view > self.membership.view_id;
        // A leaver outside any reformation told of a newer view, and still not one ACK further
        // once the others would have let go of what it lacks (`Config::depart_linger`): no
        // New List removing it is kept for it; a reformation left it out (it was cut off),
        // and waiting for its leave to be ordered would last for ever.
        let newer = self.leaving() && view > self.membership.view_id;
        let mut leaver_stuck = false;
        if newer && self.rec.current.is_none() && self.membership.ring.contains(&from) {
            let next = self.order.next_ack;
            match self.rec.leaver_told {
                Some((n, first)) if n == next => {
                    leaver_stuck = now.saturating_since(first) >= self.cfg.depart_linger;
                }
                _ => self.rec.leaver_told = Some((next, now)),
            }
        }
        let leaver_reformed_out = leaver_reformed_out || leaver_stuck;
        // Backed by what this member sees itself: a leaver that got nowhere for as long as the
        // others keep what it lacks, or a member whose own reformation found too few members.
        let corroborated = leaver_stuck || self.rec.came_up_short;
        if !self.in_ring()
            || (self.leaving() && !leaver_reformed_out)
            || !self.membership.ring.contains(&from)
            || view < self.membership.view_id
        {
            return;
        }
        // A member of our view whose view of the same id lacks us is not behind (that view
        // would be older): it left our ring to merge into another ring of this name, whose
        // traffic keeps our failure detector from ever finding it gone. Without it our ring
        // cannot go on; we are out too, and join again.
        if view == self.membership.view_id && self.rec.current.is_some() {
            return;
        }
        if view <= self.rec.bound && self.rec.current.is_some() {
            // Our own reformation may still include us; its initiator decides.
            return;
        }
        if !self.may_expel_me(from, corroborated) {
            self.roles_refused += 1;
            return;
        }
        self.expel(view);
    }

    /// Whether this site's last ACK passed the token to `to` and is not taken yet.
    pub(super) fn passing_to(&self, to: NodeId) -> bool {
        (self.token.passing).is_some_and(|p| p.1 == to && p.0 + 1 == self.order.next_ack)
    }

    /// Orders `member` out (it is in another ring of this name); a token just passed to it
    /// comes back.
    pub(super) fn order_out_of_ring(&mut self, now: Time, member: NodeId) {
        if self.passing_to(member) {
            self.token.passing = None;
            self.token.holding = true;
            self.timers.clear(RingTimer::Pass);
        }
        self.membership.lcrs.insert(member, (packet::LCR_LEAVE, 0));
        self.after_progress(now);
    }

    /// Whether `from`, a member of this member's ring telling it that it is out, may: roles,
    /// not claims, or any member could stop any other with one datagram. This member cannot
    /// see the view that left it out, so it takes the word of a member that could have put it
    /// out through the order anyway: the sender of the last ACK applied or the site it named
    /// (a token site orders New Lists), the site whose admission of this member is not
    /// confirmed yet (it may have gone on in another ring of this name), the initiator of a
    /// reformation it joined beyond its view. Any other member of its ring is believed only
    /// when this member's own state backs it (`corroborated`: its own reformation came up
    /// short, or it is a leaver that got nowhere), or once as many members of its ring as a
    /// reformation needs told it apart.
    ///
    /// A majority alone is not enough for liveness: members of the old view leave and crash,
    /// so the members left to tell a member cut off through a reformation may be fewer (the
    /// first version of this check waited for them for ever: every-engine sweep seeds 387,
    /// 502, 711, 970). Such a member finds its ring silent, reforms, and comes up short.
    fn may_expel_me(&mut self, from: NodeId, corroborated: bool) -> bool {
        let chain = self
            .order
            .chain
            .is_some_and(|(sender, next)| from == sender || from == next);
        let leads = self
            .rec
            .current
            .as_ref()
            .is_some_and(|r| r.initiator == from)
            || (self.rec.seen.1 == from && self.rec.seen.0 > self.membership.view_id);
        let admitter = self.membership.admission.is_some_and(|(_, by)| by == from);
        if chain || leads || admitter || corroborated {
            return true;
        }
        let view = self.membership.view_id;
        if self.rec.expel_claims.0 != view {
            self.rec.expel_claims = (view, BTreeSet::new());
        }
        // Only members of the ring are counted: the set stays within its size.
        self.rec.expel_claims.1.insert(from);
        debug_assert!(self.rec.expel_claims.1.len() <= self.membership.ring.len());
        self.rec.expel_claims.1.len() >= self.rec.needed(self.membership.ring.len())
    }

    /// Whether `joiner` was admitted by a New List this member holds and has sent no ACK in
    /// this ring since: the token never reached it as a member here. (Its admission stays in
    /// the log until then: stability waits for an ACK of every member.) A joiner admitted with
    /// others that took part in another ring of this name is found so wherever it stands in
    /// the list, not only when it is the first (formation sweep seed 5227, once joiners
    /// were admitted together: the second of two stayed in both rings).
    fn admission_unconfirmed(&self, joiner: NodeId) -> bool {
        let Some(num) = self.admitted_at(joiner) else {
            return false;
        };
        !(self.order.log.range(num + 1..)).any(|(_, e)| e.sender == joiner)
    }

    /// The number of the latest New List in the log that admitted `joiner` (made by another
    /// member).
    fn admitted_at(&self, joiner: NodeId) -> Option<u64> {
        let admitted = self.order.log.iter().rev().find(|(_, e)| {
            e.sender != joiner
                && wire::decode(&e.bytes)
                    .ok()
                    .and_then(|p| Ack::decode(p.body).ok())
                    .is_some_and(|a| {
                        matches!(a.body, AckBody::NewList(l)
                            if l.lock_op.is_none() && l.joined.contains(&joiner))
                    })
        });
        admitted.map(|(&num, _)| num)
    }

    /// This member is out: a reformation formed view `view` without it.
    pub(super) fn expel(&mut self, view: u64) {
        if self.left() {
            return;
        }
        self.rec.current = None;
        self.timers.clear(RingTimer::ReformRetry);
        self.halt_token();
        let asked = self.leaving();
        self.membership.enter(Phase::Expelled { asked });
        self.events.push_back(Event::Recovery(Recovery::Expelled {
            incarnation: view as u32,
        }));
    }

    /// Watch the ring's other members with the failure detector: the
    /// [`super::Config::watched`] members after this one in ring order (all the others in a
    /// ring that small). Each member is then watched by as many before it, so a crash is still
    /// found, while the probes of a ring of a thousand stay a few per member instead of a
    /// thousand (a member is heard once a token round, which at that size outlasts the
    /// detector's interval: every member probed every other, a million probes a round).
    pub(super) fn watch_ring(&mut self, now: Time) {
        let ring = &self.membership.ring;
        let n = ring.len();
        let start = self.membership.idx(self.me).map_or(0, |i| i + 1);
        let watched: Vec<NodeId> = (0..n)
            .map(|k| ring[(start + k) % n])
            .filter(|&m| m != self.me)
            .take(self.cfg.watched)
            .collect();
        if let Some(d) = self.rec.detector.as_mut() {
            d.watch(watched, now);
        }
    }

    /// Forgets what members of `old` that are no longer in the ring left unordered or
    /// half-delivered (a leave or a reformation removed them).
    /// What was ordered of them stays: its slots are delivered (or skipped, when delivered
    /// early) as any other; `old_next` says where their ordered packets end.
    pub(super) fn drop_removed(&mut self, old: &[NodeId], old_next: &BTreeMap<NodeId, u64>) {
        // A set, not a scan per member: in a ring of a thousand every view change cost each
        // member a million comparisons.
        let ring: BTreeSet<NodeId> = self.membership.ring.iter().copied().collect();
        for &gone in old.iter().filter(|m| !ring.contains(m)) {
            let ordered = old_next.get(&gone).copied().unwrap_or(0);
            self.order.data.drop_below(gone, u64::MAX);
            self.order.unreliable_seen.remove(&gone);
            self.membership.lcrs.remove(&gone);
            self.order.sources.remove(&gone);
            self.order
                .pending_src
                .retain(|&(o, s), _| o != gone || s < ordered);
            self.order.early.retain(|&(o, s)| o != gone || s < ordered);
        }
    }
}
