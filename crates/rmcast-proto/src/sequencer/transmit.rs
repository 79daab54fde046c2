//! What a member sends, in order of urgency: control answers and recovery traffic first, then
//! the sequencer's broadcasts (new entries, retransmissions, accepts, BC_SYNC), then the
//! member's own datagrams (joins, NACKs, status reports, requests, leaves).

use super::engine::{Phase, Sequencer, MAX_RETRANS_QUEUE};
use super::packet::{
    encode_control, ptype, Body, OrderedEntry, OrderedWriter, ORDERED_ENTRY_OVERHEAD,
};
use crate::engine::{Destination, NodeId, Time};
use std::collections::VecDeque;
use std::time::Duration;

/// A retransmission this member owes: `[from, until)` to `to`, in `sent` datagrams so far.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Owed {
    pub(super) to: NodeId,
    pub(super) from: u64,
    pub(super) until: u64,
    pub(super) sent: usize,
}

/// Retransmissions this member answers (the sequencer, or anyone during recovery), served in
/// the order asked, a bounded burst at a time.
///
/// Invariants: at most [`MAX_RETRANS_QUEUE`] destinations, each at most once.
#[derive(Clone, Debug, Default)]
pub(super) struct Retransmissions {
    queue: VecDeque<Owed>,
}

impl Retransmissions {
    /// Owe `[from, until)` to `to` (merged with what it is owed already).
    pub(super) fn owe(&mut self, to: NodeId, from: u64, until: u64) {
        debug_assert!(from < until);
        if let Some(r) = self.queue.iter_mut().find(|r| r.to == to) {
            r.from = r.from.min(from);
            r.until = r.until.max(until);
        } else if self.queue.len() < MAX_RETRANS_QUEUE {
            self.queue.push_back(Owed {
                to,
                from,
                until,
                sent: 0,
            });
        }
        debug_assert!(self.queue.len() <= MAX_RETRANS_QUEUE);
    }

    /// The retransmission to serve next.
    pub(super) fn next(&self) -> Option<Owed> {
        self.queue.front().copied()
    }

    /// A datagram for the next retransmission covered `[from, end)`: it is done when `end`
    /// reached its end, nothing more could be sent, or its burst reached `max_sent` datagrams.
    pub(super) fn sent_next(&mut self, from: u64, end: u64, max_sent: usize) {
        let Some(r) = self.queue.front_mut() else {
            return;
        };
        let sent = r.sent;
        r.from = end;
        r.sent += 1;
        if end >= r.until || end == from || sent + 1 >= max_sent {
            self.queue.pop_front();
        }
    }

    /// Forget every debt (the order they refer to has ended).
    pub(super) fn clear(&mut self) {
        self.queue.clear();
    }
}

impl Sequencer {
    /// The next datagram to send, written into `buf`, and where it goes.
    pub(super) fn transmit(&mut self, now: Time, buf: &mut Vec<u8>) -> Option<Destination> {
        self.now = self.now.max(now);
        if self.pump_due {
            self.pump();
        }
        if let Some(dest) = self.farewell.take() {
            self.write_status(buf);
            self.counters.datagrams_sent += 1;
            self.counters.bytes_sent += buf.len() as u64;
            return Some(dest);
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
        if let Some((to, from, until)) = self.ord.as_mut().expect("sequencer").gap_asks.pop_front()
        {
            let header = self.header(ptype::REQ_GAP);
            encode_control(buf, &header, &Body::ReqGap { from, to: until });
            return Some(Destination::Peer(to));
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
            self.syncs_sent += 1;
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
        self.retrans.owe(to, from, until);
    }

    /// The next queued retransmission, written into `buf`.
    pub(super) fn transmit_retrans(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        while let Some(r) = self.retrans.next() {
            let from = r.from.max(self.hist.buffer.base());
            let end = self.write_ordered(buf, from, r.until, true);
            // Bound the burst per request: the member asks again for what is still missing.
            self.retrans
                .sent_next(from, end, self.cfg.max_retrans_datagrams);
            if end > from {
                self.counters.retransmissions += end - from;
                return Some(Destination::Peer(r.to));
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
        let into = self.join_into;
        encode_control(buf, &header, &Body::JoinReq { into });
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
    fn write_status(&mut self, buf: &mut Vec<u8>) {
        let header = self.header(ptype::STATUS);
        let body = Body::Status {
            expect: self.hist.next_deliver,
            held_next: self.hist.held_next,
            ask: std::mem::take(&mut self.ask_state),
        };
        encode_control(buf, &header, &body);
    }

    /// BC_LEAVE once every own message is delivered, so that nothing sent is cut off.
    fn transmit_leave(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        let now = self.now;
        if !self.leave_requested
            || self.is_sequencer()
            || !self.sender.outq.is_empty()
            || !self.sender.awaiting_complete.is_empty()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retransmissions_merge_per_destination_and_bound_bursts() {
        let mut r = Retransmissions::default();
        r.owe(NodeId(1), 10, 20);
        r.owe(NodeId(2), 5, 6);
        r.owe(NodeId(1), 8, 25);
        let first = r.next().unwrap();
        assert_eq!((first.to, first.from, first.until), (NodeId(1), 8, 25));
        r.sent_next(8, 15, 2);
        assert_eq!(r.next().map(|o| (o.from, o.sent)), Some((15, 1)));
        // The second datagram reaches the burst bound.
        r.sent_next(15, 20, 2);
        assert_eq!(r.next().map(|o| o.to), Some(NodeId(2)));
        // Nothing could be written: done with it.
        r.sent_next(5, 5, 2);
        assert_eq!(r.next(), None);
        r.owe(NodeId(3), 1, 2);
        r.clear();
        assert_eq!(r.next(), None);
    }
}
