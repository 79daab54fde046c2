//! What a member sends, in order of urgency: control answers and recovery traffic first, then
//! the sequencer's broadcasts (new entries, retransmissions, accepts, BC_SYNC), then the
//! member's own datagrams (joins, NACKs, status reports, requests, leaves).

use super::engine::Sequencer;
use super::ordering::Announce;
use super::packet::{
    encode_control, ptype, Body, OrderedEntry, OrderedWriter, ReqWriter, SeqRanges,
    ORDERED_ENTRY_OVERHEAD,
};
use super::shared::{Phase, Timer};
use crate::engine::{Destination, NodeId, Time};
use std::time::Duration;

impl Sequencer {
    /// The next datagram to send, written into `buf`, and where it goes.
    pub(super) fn transmit(&mut self, now: Time, buf: &mut Vec<u8>) -> Option<Destination> {
        self.run(now);
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
            self.timers.clear(Timer::Leave);
            self.ordering(|o, m| {
                let me = m.me;
                o.order_leave(m, me);
            });
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

    /// The sequencer's broadcasts: new entries first (they are what everyone waits for), then
    /// retransmissions, then the short datagrams it owes.
    pub(super) fn transmit_sequencer(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        let now = self.now;
        let base = self.hist.buffer.base();
        if let Some((from, until)) = self.ord.as_mut()?.unsent(base) {
            let end = self.write_ordered(buf, from, until, false);
            assert!(end > from, "an ordered entry always fits in a datagram");
            if let Some(o) = self.ord.as_mut() {
                o.multicast_sent(end, now);
            }
            return Some(Destination::Group);
        }
        if let Some(dest) = self.transmit_retrans(buf) {
            return Some(dest);
        }
        let rto = self.repair_rto();
        let (ptype, body, dest) = match self
            .ord
            .as_mut()?
            .next_announce(now, rto, &self.hist, self.me)?
        {
            Announce::ReqGap { to, from, until } => (
                ptype::REQ_GAP,
                Body::ReqGap { from, to: until },
                Destination::Peer(to),
            ),
            Announce::Nudge(to) => (
                ptype::ACCEPT,
                Body::Accept(self.seq_state()),
                Destination::Peer(to),
            ),
            Announce::Queued { to, pnum } => {
                (ptype::QUEUED, Body::Queued { pnum }, Destination::Peer(to))
            }
            Announce::Refuse(to) => (
                ptype::JOIN_REFUSED,
                Body::JoinRefused {
                    limit: self.cfg.max_members_effective() as u32,
                },
                Destination::Peer(to),
            ),
            Announce::Accept => (
                ptype::ACCEPT,
                Body::Accept(self.seq_state()),
                Destination::Group,
            ),
            Announce::Sync => {
                self.stats.syncs_sent += 1;
                (
                    ptype::SYNC,
                    Body::Sync(self.seq_state()),
                    Destination::Group,
                )
            }
        };
        encode_control(buf, &self.header(ptype), &body);
        Some(dest)
    }

    /// Queue a retransmission of `ranges` to `to`, of what this member holds (the sequencer
    /// everything it ordered, any member during recovery its contiguous history).
    pub(super) fn queue_retrans(&mut self, to: NodeId, mut ranges: SeqRanges) {
        let held = self
            .ord
            .as_ref()
            .map_or(self.hist.held_next, |o| o.next_seq);
        ranges.clip(self.hist.buffer.base(), held);
        if self
            .retrans
            .owe(to, ranges, self.now, self.retrans_budget())
        {
            self.stats.retrans_cut += 1;
        }
    }

    /// The next queued retransmission, written into `buf`: one datagram of the first range
    /// still owed to a destination. While this member orders, a datagram that another
    /// member lacks part of as well goes to the whole group: on a shared medium losses are
    /// correlated (every member's receive buffer fills with the same multicasts), and in the
    /// Amoeba experiment's run of 4 KB BB messages from 30 members each entry repaired was
    /// sent some 70 times, one member at a time, until those repairs filled the medium. A
    /// member that holds it already drops the copy as a duplicate. During a recovery repairs
    /// stay point-to-point (members serve each other from histories that may differ).
    pub(super) fn transmit_retrans(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        let ordering = self.is_sequencer() && !self.recovering();
        while let Some((to, first, until)) = self.retrans.next() {
            // Purged since it was asked for: every member has it, nothing to send.
            let from = first.max(self.hist.buffer.base());
            let end = if from < until {
                self.write_ordered(buf, from, until, true)
            } else {
                from
            };
            let group = ordering && end > from && self.retrans.shared(to, from, end);
            let cut = if group {
                self.retrans.sent_to_group(to, from, end, self.now)
            } else {
                self.retrans.sent(to, from, end, self.now)
            };
            if cut {
                self.stats.retrans_cut += 1;
            }
            if group {
                self.stats.retrans_multicast += 1;
                self.counters.retransmissions += end - from;
                return Some(Destination::Group);
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
        if !self.timers.due(Timer::Join, now) {
            return None;
        }
        let header = self.header(ptype::JOIN_REQ);
        let into = self.join_into;
        encode_control(buf, &header, &Body::JoinReq { into });
        self.timers.arm(
            Timer::Join,
            now + Duration::from_millis(self.cfg.join_retry_ms),
        );
        Some(Destination::Group)
    }

    /// BC_RETRANS for what is missing below the repair limit, when the NACK timer made a
    /// request due.
    fn transmit_nack(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        if !self.hist.gaps.take_request() {
            return None;
        }
        let (peer, limit) = self.repair_target()?;
        let ranges = self.hist.missing(limit);
        if ranges.is_empty() {
            return None;
        }
        let header = self.header(ptype::RETRANS);
        let body = Body::Retrans {
            ranges,
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
            || !self.timers.due(Timer::Leave, now)
        {
            return None;
        }
        let header = self.header(ptype::LEAVE_REQ);
        let body = Body::LeaveReq {
            expect: self.hist.next_deliver,
        };
        encode_control(buf, &header, &body);
        self.timers.arm(Timer::Leave, now + self.repair_rto());
        Some(Destination::Peer(self.sequencer_hint))
    }

    /// A BC_BCASTREQ of the PB or BB method with our state, into `buf`, ready for entries.
    fn request_writer<'b>(&self, buf: &'b mut Vec<u8>, bb: bool) -> ReqWriter<'b> {
        let header = self.header(if bb {
            ptype::BCAST_REQ_BB
        } else {
            ptype::BCAST_REQ_PB
        });
        ReqWriter::new(
            buf,
            &header,
            self.hist.next_deliver,
            self.hist.held_next,
            self.sender.own_ordered,
        )
    }

    /// Fragments the sequencer asked for again: to the sequencer only, whatever their method
    /// (by the BB method the members hold the data already; one that does not asks the
    /// sequencer for it once it is ordered).
    fn transmit_repair(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        if self.sender.repair.is_none() && self.sender.tail_probe.is_none() {
            return None;
        }
        if self.is_sequencer() {
            self.sender.repair = None;
            self.sender.tail_probe = None;
            return None;
        }
        let bb = self.sender.repair_method()?;
        let max = self.cfg.max_datagram_bytes;
        let mut w = self.request_writer(buf, bb);
        self.sender.write_repair(&mut w, max);
        self.stats.request_gaps_filled += 1;
        Some(Destination::Peer(self.sequencer_hint))
    }

    /// The next batch of requests to the sequencer (PB) or the group (BB), if the window has
    /// room and something is unsent.
    pub(super) fn transmit_requests(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        if let Some(d) = self.transmit_repair(buf) {
            return Some(d);
        }
        let s = &self.sender;
        if self.is_sequencer() || s.unsent >= s.outq.len() || s.in_flight() >= s.cwnd.get() {
            return None;
        }
        let bb = s.outq[s.unsent].bb;
        let max = self.cfg.max_datagram_bytes;
        let mut w = self.request_writer(buf, bb);
        let last = self.sender.write_batch(&mut w, bb, max);
        self.hist.delivered_since_report = 0;
        self.sender.sent_batch(last, self.now);
        Some(if bb {
            Destination::Group
        } else {
            Destination::Peer(self.sequencer_hint)
        })
    }
}
