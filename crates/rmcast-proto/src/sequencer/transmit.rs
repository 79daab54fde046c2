//! What a member sends, in order of urgency: control answers and recovery traffic first, then
//! the sequencer's broadcasts (new entries, retransmissions, accepts, BC_SYNC), then the
//! member's own datagrams (joins, NACKs, status reports, requests, leaves).

use super::engine::{Phase, Sequencer, MAX_RETRANS_QUEUE};
use super::packet::{
    encode_control, ptype, Body, OrderedEntry, OrderedWriter, ORDERED_ENTRY_OVERHEAD,
};
use crate::engine::{Destination, NodeId, Time};
use std::time::Duration;

impl Sequencer {
    /// The next datagram to send, written into `buf`, and where it goes.
    pub(super) fn transmit(&mut self, now: Time, buf: &mut Vec<u8>) -> Option<Destination> {
        self.now = self.now.max(now);
        if let Some(to) = self.farewell.take() {
            self.write_status(buf);
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

    pub(super) fn transmit_sequencer(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        let now = self.now;
        let o = self.ord.as_ref()?;
        // New entries first: they are what everyone waits for. Entries every member already
        // delivered (a lone sequencer's own) need no broadcast.
        let from = o.bcast_next.max(self.hist.buffer.base());
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

    /// Queue a retransmission of `[from, until)` to `to`, of what this member holds (the
    /// sequencer everything it ordered, any member during recovery its contiguous history).
    pub(super) fn queue_retrans(&mut self, to: NodeId, from: u64, until: u64) {
        let base = self.hist.buffer.base();
        let held = self
            .ord
            .as_ref()
            .map_or(self.hist.held_next, |o| o.next_seq);
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
            let from = from.max(self.hist.buffer.base());
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
            let Some(e) = self.hist.buffer.get(seq) else {
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

    /// The member's own datagrams: join requests, NACKs, status reports, requests, leaves.
    pub(super) fn transmit_member(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        if self.phase == Phase::Joining {
            return self.transmit_join(buf);
        }
        if self.phase != Phase::Member {
            return None;
        }
        if let Some(dest) = self.transmit_nack(buf) {
            return Some(dest);
        }
        if self.recovering() {
            // Recovery mode: no requests, status reports or leaves until the reset.
            return None;
        }
        if self.hist.need_status && !self.is_sequencer() {
            self.hist.need_status = false;
            self.hist.delivered_since_report = 0;
            self.write_status(buf);
            self.counters.acks_sent += 1;
            return Some(Destination::Peer(self.sequencer_hint));
        }
        if let Some(dest) = self.transmit_requests(buf) {
            return Some(dest);
        }
        self.transmit_leave(buf)
    }

    /// BC_JOINREQ, repeated every `join_retry_ms` until the join is ordered.
    fn transmit_join(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        let now = self.now;
        if self.join_deadline.is_none_or(|d| now < d) {
            return None;
        }
        let header = self.header(ptype::JOIN_REQ);
        encode_control(buf, &header, &Body::JoinReq);
        self.join_deadline = Some(now + Duration::from_millis(self.cfg.join_retry_ms));
        Some(Destination::Group)
    }

    /// BC_RETRANS for the gap, when its timer made a request due.
    fn transmit_nack(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        if !self.hist.gaps.take_request() {
            return None;
        }
        let (peer, limit) = self.repair_target()?;
        if self.hist.held_next >= limit {
            return None;
        }
        let header = self.header(ptype::RETRANS);
        let body = Body::Retrans {
            from: self.hist.held_next,
            to: limit,
            expect: self.hist.next_deliver,
        };
        encode_control(buf, &header, &body);
        self.counters.nacks_sent += 1;
        Some(Destination::Peer(peer))
    }

    /// BC_STATE: where this member stands (also the farewell to a departing sequencer).
    fn write_status(&self, buf: &mut Vec<u8>) {
        let header = self.header(ptype::STATUS);
        let body = Body::Status {
            expect: self.hist.next_deliver,
            held_next: self.hist.held_next,
        };
        encode_control(buf, &header, &body);
    }

    /// BC_LEAVE once every own message is delivered, so that nothing sent is cut off.
    fn transmit_leave(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        let now = self.now;
        if !self.leave_requested
            || self.is_sequencer()
            || !self.sender.outq.is_empty()
            || self.leave_deadline.is_none_or(|d| now < d)
        {
            return None;
        }
        let header = self.header(ptype::LEAVE_REQ);
        let body = Body::LeaveReq {
            expect: self.hist.next_deliver,
        };
        encode_control(buf, &header, &body);
        self.leave_deadline = Some(now + self.repair_rto());
        Some(Destination::Peer(self.sequencer_hint))
    }
}
