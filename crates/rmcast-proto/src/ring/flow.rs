//! The send flow (section 4.6): own messages from submission until stable, and the flow and
//! congestion control that paces them.

use super::config::Config;
use crate::common::{packet_size, CongestionWindow, LossCache, RttEstimator};
use crate::engine::Time;
use std::collections::VecDeque;

/// A sender's own messages and its flow control: a window of bytes in transit, from a
/// packet's sending to the first ACK that orders it, grown by slow start and halved when the
/// retransmission timer expires with nothing ordered after the token went by (or with the ring
/// quiescent), or a NACK names one of this sender's packets.
#[derive(Clone)]
pub(super) struct SendFlow {
    pub(super) window: CongestionWindow,
    pub(super) in_flight: usize,
    /// Own packets in transit, oldest first: (sseq, sent at, bytes, sent again).
    pub(super) sent: VecDeque<(u64, Time, usize, bool)>,
    pub(super) rtt: RttEstimator,
    pub(super) losses: LossCache,
    /// Times the window was halved.
    pub(super) halved: u64,
    /// The smallest packet Fig. 4.2 sends.
    min_packet: usize,
    /// Next own sequence number (ordered stream).
    pub(super) own_next: u64,
    /// Own ordered messages not yet stable: (sseq, timestamp). The send window counts from the
    /// oldest of them; a send completes (resilience 0) once ordered and delivered here.
    pub(super) own_ordered: VecDeque<(u64, u64)>,
    /// Every own message below this is stable.
    pub(super) own_stable: u64,
    /// Own unreliable messages sent (numbered apart from the ordered stream).
    pub(super) own_unreliable: u64,
    /// Own messages submitted and not yet sent: they go out together, in as few packets as
    /// Fig. 4.2 allows, when the driver next takes datagrams (or before this site's ACK).
    pub(super) outbox: Vec<super::engine::Outgoing>,
    /// How far own messages were ordered when the retransmission timer was last armed.
    pub(super) data_retry_mark: u64,
    /// The highest ACK heard when the retransmission timer was last armed (None: none, or
    /// own packets go again whatever the token does, after a reformation).
    pub(super) data_retry_heard: Option<u64>,
    /// Expiries of the retransmission timer that neither resent nor halved: the token had
    /// not moved since it was armed.
    pub(super) retry_deferred: u64,
    /// Own packets numbered below this were sent before the window last halved for a NACK: a
    /// loss among them is part of the loss event that halved it (NewReno's recovery point,
    /// RFC 6582), not a new one.
    pub(super) recover: u64,
}

impl SendFlow {
    /// No message sent yet; packets of at most `max_packet` bytes.
    pub(super) fn new(max_packet: usize, cfg: &Config) -> SendFlow {
        let max = cfg.window_max_bytes.max(max_packet);
        SendFlow {
            window: CongestionWindow::with_unit(
                cfg.window_initial_bytes.max(2 * max_packet),
                max_packet,
                max,
                max_packet.min(1472),
            ),
            in_flight: 0,
            sent: VecDeque::new(),
            rtt: RttEstimator::new(cfg.data_retry, cfg.data_retry_min, cfg.data_retry_max),
            losses: LossCache::new(cfg.loss_cache),
            halved: 0,
            min_packet: cfg.min_packet,
            own_next: 0,
            own_ordered: VecDeque::new(),
            own_stable: 0,
            own_unreliable: 0,
            outbox: Vec::new(),
            data_retry_mark: 0,
            data_retry_heard: None,
            retry_deferred: 0,
            recover: 0,
        }
    }

    /// Whether a packet of `len` bytes may go now (Fig. 4.2; a message is never split, so it
    /// goes whole once the rule allows that many bytes, or alone when nothing is in transit).
    pub(super) fn admits(&self, len: usize, max_packet: usize) -> bool {
        let w = self.window.get();
        let room = w.saturating_sub(self.in_flight);
        self.in_flight == 0 || packet_size(w, room, len, self.min_packet, max_packet) >= Some(len)
    }

    /// Whether the fragments of one message, `len` bytes in all, may go now: all at once
    /// within the window, or alone when nothing is in transit (a message larger than the
    /// window still goes, so that it never waits for ever).
    pub(super) fn admits_all(&self, len: usize) -> bool {
        self.in_flight == 0 || self.in_flight + len <= self.window.get()
    }

    /// The largest data packet to bundle own messages into: half the window, at least a
    /// minimum packet, at most `max_packet`.
    pub(super) fn run_limit(&self, max_packet: usize) -> usize {
        (self.window.get() / 2).max(self.min_packet).min(max_packet)
    }

    /// Own message `sseq` of `len` bytes was submitted at `now`: numbered, in transit.
    pub(super) fn on_send(&mut self, sseq: u64, now: Time, len: usize) {
        debug_assert!(self.sent.back().is_none_or(|last| last.0 < sseq));
        debug_assert_eq!(
            sseq + 1,
            self.own_next,
            "own messages are numbered in order"
        );
        self.in_flight += len;
        self.sent.push_back((sseq, now, len, false));
        self.check_invariants();
    }

    /// What holds between calls (checked in debug builds): the bytes in flight are exactly
    /// those of the own packets in transit, which are kept in the order they were sent, all
    /// numbered below the next. (What ACKs say of own packets is not checked here: a forged
    /// ACK may name any number.)
    pub(super) fn check_invariants(&self) {
        debug_assert_eq!(self.in_flight, self.sent.iter().map(|p| p.2).sum::<usize>());
        debug_assert!(self
            .sent
            .iter()
            .zip(self.sent.iter().skip(1))
            .all(|(a, b)| a.0 < b.0));
        debug_assert!(self.sent.back().is_none_or(|p| p.0 < self.own_next));
    }

    /// The first ACK ordering own packet `sseq` arrived.
    pub(super) fn on_ordered(&mut self, sseq: u64, now: Time) {
        while let Some(&(s, at, len, resent)) = self.sent.front() {
            if s > sseq {
                break;
            }
            self.sent.pop_front();
            self.in_flight -= len;
            self.window.on_ack(len);
            // New data acknowledged: the timer need not stay backed off (Karn).
            self.rtt.on_progress();
            if s == sseq && !resent {
                self.rtt.on_sample(now.saturating_since(at));
            }
        }
        self.check_invariants();
    }

    /// A loss: the window halves.
    pub(super) fn on_loss(&mut self) {
        self.window.on_loss();
        self.halved += 1;
    }

    /// A NACK named own packet `sseq`: the window halves once per loss event. A burst of
    /// datagrams dropped by an overrun receiver comes back as NACKs naming dozens of packets
    /// sent before the first halving; halving for each (the loss cache only keeps one packet
    /// from counting twice) took the window from 16 MB to its floor within one round trip
    /// (1,841 halvings in a 3 s loopback run) and the ring to a third of its rate.
    pub(super) fn on_nacked(&mut self, sseq: u64) {
        if sseq >= self.recover && self.losses.first_report(sseq) {
            self.on_loss();
            self.recover = self.own_next;
        }
    }

    /// Own packets below `end` were sent again: no RTT sample from them (Karn).
    pub(super) fn mark_resent(&mut self, end: u64) {
        for e in self.sent.iter_mut().take_while(|e| e.0 < end) {
            e.3 = true;
        }
    }

    /// Every slot below `stable_ts` is stable: own messages ordered there are done.
    pub(super) fn on_stable(&mut self, stable_ts: u64) {
        while let Some(&(sseq, _)) = self.own_ordered.front().filter(|o| o.1 < stable_ts) {
            self.own_ordered.pop_front();
            self.own_stable = sseq.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(flow: &mut SendFlow, n: u64) {
        for _ in 0..n {
            let s = flow.own_next;
            flow.own_next += 1;
            flow.on_send(s, Time::ZERO, 100);
        }
    }

    /// A burst of NACKs for packets sent before the window halved is one loss event: the
    /// window halves once, and again only for a packet sent after that halving.
    #[test]
    fn nacks_for_one_burst_halve_the_window_once() {
        let mut flow = SendFlow::new(1472, &Config::default());
        sent(&mut flow, 100);
        let before = flow.window.get();
        for s in 10..50 {
            flow.on_nacked(s);
        }
        assert_eq!(flow.halved, 1);
        assert!(flow.window.get() < before);
        sent(&mut flow, 50);
        flow.on_nacked(99); // sent before the halving: the same event
        assert_eq!(flow.halved, 1);
        flow.on_nacked(120); // sent after it: a new loss
        assert_eq!(flow.halved, 2);
        flow.on_nacked(120); // the same packet named again
        flow.on_nacked(130); // sent before the second halving
        assert_eq!(flow.halved, 2);
    }
}
