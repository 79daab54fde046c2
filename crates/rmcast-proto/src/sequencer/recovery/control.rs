//! What the recovery sends: invitations and votes, and the small answers owed to single
//! members (probes, stale members, acknowledgements, redirects) with the result multicast.

use super::state::Role;
use crate::engine::{Destination, NodeId};
use crate::sequencer::config::MAX_VIEW_MEMBERS;
use crate::sequencer::engine::Sequencer;
use crate::sequencer::packet::{encode_control, ptype, Body, VoteKind};

impl Sequencer {
    /// The recovery's datagrams (after the control answers every member owes).
    pub(in crate::sequencer) fn transmit_recovery(
        &mut self,
        buf: &mut Vec<u8>,
    ) -> Option<Destination> {
        let held = self.hist.held_next;
        let expect = self.hist.next_deliver;
        let base = self.hist.buffer.base();
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
            // Bounded: a coordinator not yet known to be a member may be followed too.
            if !r.voted_for.contains(&coordinator) && r.voted_for.len() < MAX_VIEW_MEMBERS {
                r.voted_for.push(coordinator);
            }
            let header = self.header(ptype::VOTE);
            encode_control(
                buf,
                &header,
                &Body::Vote {
                    coordinator,
                    coordinator_held,
                    held_next: held,
                    expect,
                    base,
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
    pub(in crate::sequencer) fn transmit_control(
        &mut self,
        buf: &mut Vec<u8>,
    ) -> Option<Destination> {
        if let Some((to, token)) = self.rec.control.alive.pop_front() {
            let header = self.header(ptype::ALIVE);
            encode_control(buf, &header, &Body::Alive { token });
            self.counters.probes_sent += 1;
            return Some(Destination::Peer(to));
        }
        if let Some(to) = self.rec.detector.poll_probe() {
            let header = self.header(ptype::ALIVE_REQ);
            encode_control(buf, &header, &Body::AliveReq { token: 0 });
            self.counters.probes_sent += 1;
            return Some(Destination::Peer(to));
        }
        let (now, timeout) = (self.now, self.rec.detector.probe_timeout());
        if let Some(token) = self.ord.as_mut().and_then(|o| o.fence_probe(now, timeout)) {
            // One multicast asks every member at once whether this sequencer still orders.
            let header = self.header(ptype::ALIVE_REQ);
            encode_control(buf, &header, &Body::AliveReq { token });
            self.counters.probes_sent += 1;
            return Some(Destination::Group);
        }
        let dest = if let Some(to) = self.rec.control.acks.pop_front() {
            self.write_result_ack(buf);
            Destination::Peer(to)
        } else if let Some((to, kind, c, c_held)) = self.rec.control.redirects.pop_front() {
            self.write_vote(buf, c, c_held, kind);
            Destination::Peer(to)
        } else if let Some(to) = self.rec.control.query_to.take() {
            // "What happened?": a vote in our incarnation, answered with the newest result.
            self.write_vote(buf, to, 0, VoteKind::Vote);
            Destination::Peer(to)
        } else if self.rec.control.result_multicast || !self.rec.control.results.is_empty() {
            self.write_result(buf)?
        } else {
            return None;
        };
        self.counters.recovery_sent += 1;
        Some(dest)
    }

    /// BC_RESULTACK, with where our stream of requests stands.
    fn write_result_ack(&self, buf: &mut Vec<u8>) {
        let header = self.header(ptype::RESULT_ACK);
        let (last_pnum, mid_message) = self.own_stream();
        let body = Body::ResultAck {
            incarnation: self.incarnation,
            last_pnum,
            mid_message,
        };
        encode_control(buf, &header, &body);
    }

    /// BC_VOTE of `kind` naming coordinator `c` (with its vote `c_held`), outside the rounds.
    fn write_vote(&self, buf: &mut Vec<u8>, c: NodeId, c_held: u64, kind: VoteKind) {
        let header = self.header(ptype::VOTE);
        let body = Body::Vote {
            coordinator: c,
            coordinator_held: c_held,
            held_next: self.hist.held_next,
            expect: self.hist.next_deliver,
            base: self.hist.buffer.base(),
            round: 0,
            kind,
        };
        encode_control(buf, &header, &body);
    }

    /// BC_RESULT: to a member of an older incarnation, or multicast (the coordinator, until
    /// acknowledged). `None` if no reset was installed here.
    fn write_result(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
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
        Some(to)
    }
}
