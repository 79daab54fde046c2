//! The sender side (Amoeba paper section 5.2, SendToGroup): own messages split into fragments, the
//! send window, and the requests to the sequencer that carry them.
//!
//! A member sends each fragment to the sequencer (PB method, point to point) or multicasts it
//! (BB method) and keeps it until it is delivered back in the total order; requests not seen
//! ordered within the retransmission timeout are sent again (go back N). The number of requests
//! in flight is limited by a congestion window, their timeout by the measured round-trip time.

use super::config::Config;
use super::packet::{
    ReqEntry, ReqWriter, ORDERED_ENTRY_OVERHEAD, ORDERED_FIXED, REQ_ENTRY_OVERHEAD, REQ_FIXED,
};
use crate::common::{CongestionWindow, Fragmenter, Fragments, RttEstimator, TooLarge};
use crate::engine::Time;
use bytes::Bytes;
use std::collections::VecDeque;
use std::time::Duration;

/// An own fragment waiting to be ordered and delivered back.
#[derive(Clone, Debug)]
pub(super) struct OutFrag {
    pub(super) pnum: u64,
    /// Sent by the BB method (the whole message is at least `large_threshold_bytes`).
    pub(super) bb: bool,
    pub(super) frag_index: u16,
    pub(super) frag_count: u16,
    pub(super) payload: Bytes,
}

/// Own messages on their way through the sequencer.
///
/// Invariants: `outq` holds consecutive protocol numbers, all below `next_pnum`; the first
/// `unsent` of them were sent in the current round (`unsent <= outq.len()`); every fragment at
/// or below `own_ordered` was seen ordered; `max_sent_pnum < next_pnum`.
#[derive(Clone, Debug)]
pub(super) struct Sender {
    /// Protocol number of the next own fragment (Amoeba's message id).
    pub(super) next_pnum: u64,
    /// Own fragments submitted and not yet delivered back, in protocol-number order.
    pub(super) outq: VecDeque<OutFrag>,
    /// Payload bytes in `outq` (the send window in bytes).
    pub(super) outq_bytes: usize,
    /// Index in `outq` of the first fragment not sent in the current round.
    pub(super) unsent: usize,
    /// Highest own protocol number seen ordered.
    pub(super) own_ordered: u64,
    /// When unanswered requests are sent again.
    pub(super) req_deadline: Option<Time>,
    /// Highest own protocol number ever sent.
    pub(super) max_sent_pnum: u64,
    /// A fresh request being timed: (its last pnum, when sent).
    pub(super) rtt_probe: Option<(u64, Time)>,
    /// The probe after its request was repeated on a timeout: no sample (which copy was
    /// answered?) unless the sequencer says it held the request when the repeat came
    /// (BC_QUEUED), which makes it a sample of the first copy again. Without that, a
    /// sequencer that makes requests wait longer than the timeout is never timed: every
    /// probe is repeated, and the timeout stays short.
    pub(super) repeated_probe: Option<(u64, Time)>,
    pub(super) rtt: RttEstimator,
    pub(super) cwnd: CongestionWindow,
    /// Own messages delivered back whose send has not completed yet: (sequence number of the
    /// last fragment, message number), in order. Bounded by the history window: each lies at
    /// or above the completion point, which never falls below stability.
    pub(super) awaiting_complete: VecDeque<(u64, u64)>,
    /// Own fragments the sequencer asked for again (BC_REQGAP), `[next, end)` by protocol
    /// number: sent to it before anything new.
    pub(super) repair: Option<(u64, u64)>,
    /// After a timeout: the last fragment sent, sent again after the first unordered one, so
    /// that a sequencer that lost a run of requests sees where the run ended and asks for it.
    pub(super) tail_probe: Option<u64>,
    /// The sequencer said it holds our requests through this number (BC_QUEUED): until all of
    /// them are ordered, our timeouts are its queue, so answers keep the backed-off timer
    /// (as Karn's rule would). Without that word a timeout is taken for a loss, and the
    /// first answer after it resets the backoff.
    pub(super) queued: Option<u64>,
    pub(super) fragmenter: Fragmenter,
}

impl Sender {
    pub(super) fn new(cfg: &Config) -> Sender {
        Sender {
            next_pnum: 1,
            outq: VecDeque::new(),
            outq_bytes: 0,
            unsent: 0,
            own_ordered: 0,
            req_deadline: None,
            max_sent_pnum: 0,
            rtt_probe: None,
            repeated_probe: None,
            awaiting_complete: VecDeque::new(),
            repair: None,
            tail_probe: None,
            queued: None,
            rtt: RttEstimator::new(
                Duration::from_millis(cfg.retrans_timeout_ms),
                Duration::from_millis(cfg.min_request_timeout_ms),
                Duration::from_millis(cfg.max_retrans_timeout_ms),
            ),
            cwnd: CongestionWindow::new(64, 4, cfg.send_window_msgs.max(4)),
            fragmenter: cfg.fragmenter(),
        }
    }

    /// Timeout for repair traffic (NACKs, BC_SYNC): the RTT-based timeout without backoff, and
    /// no longer than the configured initial timeout. Request RTTs include queueing at the
    /// sequencer (a full history makes them long); repair must not slow down with them, or a
    /// member that fell behind keeps everyone's history full.
    pub(super) fn repair_rto(&self, cfg: &Config) -> Duration {
        self.rtt
            .base_rto()
            .min(Duration::from_millis(cfg.retrans_timeout_ms))
    }

    pub(super) fn check_invariants(&self) {
        debug_assert!(self.unsent <= self.outq.len());
        if let (Some(first), Some(last)) = (self.outq.front(), self.outq.back()) {
            debug_assert_eq!(last.pnum - first.pnum + 1, self.outq.len() as u64);
            debug_assert!(last.pnum < self.next_pnum);
        }
        debug_assert!(self.max_sent_pnum < self.next_pnum);
        debug_assert!(!self.outq.is_empty() || self.outq_bytes == 0);
    }

    /// Split `payload` into fragments (refused beyond the maximum message size).
    pub(super) fn split(&self, payload: Bytes) -> Result<Fragments, TooLarge> {
        // Ordered entries carry more header than requests, so a fragment fits both.
        const { assert!(REQ_FIXED + REQ_ENTRY_OVERHEAD <= ORDERED_FIXED + ORDERED_ENTRY_OVERHEAD) };
        self.fragmenter.split(payload)
    }

    /// Queue the fragments of one message; returns its id (the first fragment's number).
    pub(super) fn push_message(&mut self, fragments: Fragments, bb: bool) -> u64 {
        let msg = self.next_pnum;
        for f in fragments {
            self.outq_bytes += f.payload.len();
            self.outq.push_back(OutFrag {
                pnum: self.next_pnum,
                bb,
                frag_index: f.index,
                frag_count: f.count,
                payload: f.payload,
            });
            self.next_pnum += 1;
        }
        self.check_invariants();
        msg
    }

    /// The payload of an own fragment still waiting to be delivered back.
    pub(super) fn own_fragment(&self, pnum: u64) -> Option<Bytes> {
        let first = self.outq.front()?.pnum;
        let f = self.outq.get(pnum.checked_sub(first)? as usize)?;
        debug_assert_eq!(f.pnum, pnum);
        Some(f.payload.clone())
    }

    /// Own fragments sent to the sequencer and not yet seen ordered.
    pub(super) fn in_flight(&self) -> usize {
        let ordered = match self.outq.front() {
            Some(f) => (self.own_ordered + 1).saturating_sub(f.pnum) as usize,
            None => 0,
        };
        self.unsent.saturating_sub(ordered.min(self.outq.len()))
    }

    /// Whether some own fragment is not yet seen ordered.
    pub(super) fn has_unordered(&self) -> bool {
        self.outq.iter().any(|f| f.pnum > self.own_ordered)
    }

    /// Index in `outq` of the first fragment not seen ordered.
    pub(super) fn first_unordered(&self) -> Option<usize> {
        self.outq.iter().position(|f| f.pnum > self.own_ordered)
    }

    /// Own fragments up to `pnum` were seen ordered: sample the RTT, open the window, and
    /// restart the retransmission timer (it measures lack of progress, not age).
    pub(super) fn on_ordered(&mut self, pnum: u64, now: Time) {
        // A number never sent cannot have been ordered: a forged entry in our name is ignored
        // (it would open the window by billions).
        if pnum <= self.own_ordered || pnum >= self.next_pnum {
            return;
        }
        let newly = (pnum - self.own_ordered) as usize;
        self.own_ordered = pnum;
        self.cwnd.on_ack(newly);
        // After a loss the answer shows the path works again: the timer need not stay backed
        // off. After a timeout that was the sequencer's queue it must: reset at every answer,
        // each request timed out about three times (PB, 4 KB from 30 members).
        if self.queued.is_none_or(|q| pnum >= q) {
            self.queued = None;
            self.rtt.on_progress();
        }
        if self.repeated_probe.is_some_and(|(p, _)| pnum >= p) {
            self.repeated_probe = None;
        }
        if let Some((probe, sent)) = self.rtt_probe {
            if pnum >= probe {
                self.rtt.on_sample(now.saturating_since(sent));
                self.rtt_probe = None;
            }
        }
        self.req_deadline = (self.in_flight() > 0).then(|| now + self.rtt.rto());
    }

    /// Own fragments up to `pnum` were delivered back: they leave the queue.
    pub(super) fn on_delivered(&mut self, pnum: u64) {
        let mut popped = 0;
        while self.outq.front().is_some_and(|f| f.pnum <= pnum) {
            if let Some(f) = self.outq.pop_front() {
                self.outq_bytes -= f.payload.len();
            }
            popped += 1;
        }
        self.unsent = self.unsent.saturating_sub(popped);
    }

    /// The request timer fired: back off, shrink the window, and send again the first fragment
    /// not seen ordered and the last one sent (a tail probe), to the sequencer only. Under
    /// load a timeout is most often the sequencer's queue rather than loss, so a go-back-N of
    /// the whole window would only add to that queue (and by the BB method to every member's);
    /// if requests were lost, the probe lets the sequencer see the gap and ask for exactly
    /// what it lacks (BC_REQGAP). Returns the number of fragments to be sent again.
    pub(super) fn on_request_timeout(&mut self, now: Time) -> u64 {
        self.rtt.on_timeout();
        self.cwnd.on_loss();
        let Some(i) = self.first_unordered().filter(|i| *i < self.unsent) else {
            self.rtt_probe = None;
            return 0;
        };
        let (first, last) = (self.outq[i].pnum, self.outq[self.unsent - 1].pnum);
        // Karn's rule: a repeated request cannot be timed (unless the sequencer turns out to
        // have held it); a probe among those sent once still can.
        if let Some((p, t)) = self.rtt_probe {
            if p == first || p == last {
                self.rtt_probe = None;
                self.repeated_probe = Some((p, t));
            }
        }
        self.repair = Some((first, first + 1));
        self.tail_probe = (last > first).then_some(last);
        // The repeat is timed like the first send: if it is lost too, the timer fires again.
        self.req_deadline = Some(now + self.rtt.rto());
        1 + u64::from(last > first)
    }

    /// The sequencer lacks our fragments `[from, to)` while later ones reached it: its
    /// receive buffer overflowed, so send those again at once, and only those, and slow down
    /// as after a loss. Fragments not sent yet, or already seen ordered, are not repeated.
    pub(super) fn on_gap(&mut self, from: u64, to: u64, now: Time) -> bool {
        // Stale: the sequencer has ordered `from` since it asked (the request was only queued
        // behind others, and the order overtook the ask). If a gap is left it asks again.
        if from <= self.own_ordered {
            return false;
        }
        let to = to.min(self.max_sent_pnum + 1);
        if from >= to {
            return false;
        }
        self.repair = Some(match self.repair {
            Some((f, t)) => (f.min(from), t.max(to)),
            None => (from, to),
        });
        self.cwnd.on_loss();
        // Karn's rule: a repeated fragment must not time the round trip (and this one was lost).
        self.rtt_probe = self.rtt_probe.filter(|(p, _)| !(from..to).contains(p));
        self.repeated_probe = self.repeated_probe.filter(|(p, _)| !(from..to).contains(p));
        self.req_deadline = Some(now + self.rtt.rto());
        true
    }

    /// The sequencer holds our requests through `pnum` and waits to order them: keep the
    /// timer backed off until they are ordered, and restart it, for they are not lost.
    pub(super) fn on_queued(&mut self, pnum: u64, now: Time) {
        if pnum <= self.own_ordered || pnum > self.max_sent_pnum {
            return;
        }
        self.queued = Some(self.queued.map_or(pnum, |q| q.max(pnum)));
        // The first copy of the repeated probe was held (or a repeat was, if the first was
        // lost: the sample is then too long, which errs on the safe side).
        if let Some((p, t)) = self.repeated_probe.filter(|(p, _)| *p <= pnum) {
            self.repeated_probe = None;
            if self.rtt_probe.is_none_or(|(q, _)| p < q) {
                self.rtt_probe = Some((p, t));
            }
        }
        self.req_deadline = Some(now + self.rtt.rto());
    }

    /// What is left to repair, as indices in `outq` (dropping a repair that is done or moot),
    /// and the method of its first fragment; the tail probe once the repair is done.
    fn repair_range(&mut self) -> Option<(usize, usize, bool)> {
        if self.repair.is_none() {
            self.repair = self.tail_probe.take().map(|t| (t, t + 1));
        }
        let (next, end) = self.repair?;
        let first = self.outq.front().map(|f| f.pnum);
        let range = first.and_then(|first| {
            let next = next.max(first).max(self.own_ordered + 1);
            let end = end.min(first + self.unsent as u64);
            (next < end).then(|| ((next - first) as usize, (end - first) as usize))
        });
        let Some((start, end)) = range else {
            self.repair = None;
            return None;
        };
        Some((start, end, self.outq[start].bb))
    }

    /// The method of the next fragment to repair, if any.
    pub(super) fn repair_method(&mut self) -> Option<bool> {
        self.repair_range().map(|r| r.2)
    }

    /// Write the next fragments the sequencer asked for again after `w`'s header (all of the
    /// method [`Sender::repair_method`] said).
    pub(super) fn write_repair(&mut self, w: &mut ReqWriter<'_>, max: usize) {
        let Some((start, end, bb)) = self.repair_range() else {
            return;
        };
        let end_pnum = self.outq[0].pnum + end as u64;
        let n = write_entries(&self.outq, start..end, bb, w, max);
        let next = self.outq[start].pnum + n as u64;
        self.repair = (next < end_pnum).then_some((next, end_pnum));
    }

    /// Whoever orders now has not seen our unordered requests: send them again at once.
    pub(super) fn resend_unordered(&mut self) {
        self.unsent = self.first_unordered().unwrap_or(self.outq.len());
        self.req_deadline = None;
        self.queued = None;
        self.repair = None;
        self.tail_probe = None;
    }

    /// We order our own fragments from now on (we became the sequencer at `own_ordered`'s
    /// successor): whatever was in flight is ordered again locally.
    pub(super) fn become_local(&mut self) {
        self.own_ordered = self
            .outq
            .front()
            .map(|f| f.pnum - 1)
            .unwrap_or(self.own_ordered);
        self.unsent = 0;
        self.req_deadline = None;
    }

    /// Write the next batch of requests (fragments of one method, within the window) after
    /// `w`'s header; returns the highest protocol number written.
    pub(super) fn write_batch(&mut self, w: &mut ReqWriter<'_>, bb: bool, max: usize) -> u64 {
        let window_end = self.unsent + (self.cwnd.get() - self.in_flight());
        let end = self.outq.len().min(window_end);
        let n = write_entries(&self.outq, self.unsent..end, bb, w, max);
        self.unsent += n;
        match n {
            0 => 0,
            _ => self.outq[self.unsent - 1].pnum,
        }
    }

    /// A batch up to `last` went out at `now`: time it (Karn's rule: only a request sent for
    /// the first time measures the RTT) and arm the retransmission timer.
    pub(super) fn sent_batch(&mut self, last: u64, now: Time) {
        if last > self.max_sent_pnum {
            if self.rtt_probe.is_none() && self.outq[self.unsent - 1].pnum > self.max_sent_pnum {
                self.rtt_probe = Some((last, now));
            }
            self.max_sent_pnum = last;
        }
        if self.req_deadline.is_none() {
            self.req_deadline = Some(now + self.rtt.rto());
        }
        self.check_invariants();
    }
}

/// Write the fragments `outq[range]` of method `bb` after `w`'s header, in order, while they
/// fit in `max` bytes (the first always does); returns how many were written.
fn write_entries(
    outq: &VecDeque<OutFrag>,
    range: std::ops::Range<usize>,
    bb: bool,
    w: &mut ReqWriter<'_>,
    max: usize,
) -> usize {
    let mut n = 0;
    for f in outq.range(range) {
        if f.bb != bb || (!w.is_empty() && w.len() + REQ_ENTRY_OVERHEAD + f.payload.len() > max) {
            break;
        }
        w.push(&ReqEntry {
            pnum: f.pnum,
            frag_index: f.frag_index,
            frag_count: f.frag_count,
            payload: &f.payload,
        });
        n += 1;
    }
    n
}
