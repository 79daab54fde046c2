//! Regression: a lost ACK of the last packet sent. RMTP's ACKs are periodic (section III-B4 of
//! "Reliable Multicast Transport Protocol (RMTP)" by Paul, Sabnani, Lin and Bhattacharyya), so
//! the next one makes good a lost one; a receiver that fell silent once it held everything it
//! knew of left the sender's window waiting `child_silence_ms` for it, one lost ACK at a time
//! (a closed-loop sender, one message in flight, took minutes over a lossy network).

use super::*;
use crate::engine::{Destination, Event, Qos, Time};
use crate::registry::{EngineParams, EngineSettings, Role};
use crate::tree::packet::Packet;
use crate::wire;
use bytes::Bytes;
use std::time::Duration;

const MS: u64 = 1_000_000;
/// The sender forgets a silent child after this long: the repair must come well before.
const SILENCE_MS: u64 = 5_000;

fn cfg() -> TreeConfig {
    TreeConfig {
        t_send_ms: 10,
        t_retx_ms: 5,
        t_rtt_ms: 50,
        t_sap_ms: 1_000,
        t_dally_ms: 60_000,
        cong_thresh: None,
        child_silence_ms: SILENCE_MS,
        child_stall_ms: 0,
        ..TreeConfig::default()
    }
}

/// A sender (0) and one receiver (1), 1 ms apart, driven by hand.
struct Pair {
    e: [Tree; 2],
    now: Time,
    /// Datagrams on their way: (arrival, to, bytes).
    flight: Vec<(Time, usize, Vec<u8>)>,
    /// Drop the receiver's next ACK reporting this L.
    drop_ack: Option<u64>,
    /// The L of every ACK the receiver sent, in order.
    acks: Vec<u64>,
    completed: Vec<u64>,
}

impl Pair {
    fn new() -> Pair {
        let settings = EngineSettings::default();
        let mk = |me: u32, role| {
            let p = EngineParams {
                role,
                group: 7,
                me: NodeId(me),
                max_datagram_bytes: 1472,
                now: Time::ZERO,
                seed: u64::from(me),
                settings: &settings,
            };
            Tree::new(&p, cfg(), None, false)
        };
        Pair {
            e: [mk(0, Role::Create), mk(1, Role::Join)],
            now: Time::ZERO,
            flight: Vec::new(),
            drop_ack: None,
            acks: Vec::new(),
            completed: Vec::new(),
        }
    }

    fn flush(&mut self, i: usize) {
        let mut buf = Vec::new();
        while let Some(t) = self.e[i].poll_transmit(self.now, &mut buf) {
            let to = match t.destination {
                Destination::Peer(p) => p.0 as usize,
                _ => 1 - i,
            };
            let p = wire::decode(&buf).expect("own datagram decodes");
            if p.header.ptype == packet::ACK {
                if let Ok(Packet::Ack { l, .. }) = Packet::decode(packet::ACK, p.body) {
                    self.acks.push(l);
                    if self.drop_ack == Some(l) {
                        self.drop_ack = None;
                        continue;
                    }
                }
            }
            self.flight
                .push((self.now + Duration::from_millis(1), to, buf.clone()));
        }
        while let Some(ev) = self.e[i].poll_event() {
            if let Event::SendComplete { msg } = ev {
                self.completed.push(msg);
            }
        }
    }

    fn run_until(&mut self, end: Time) {
        loop {
            let timer = self.e.iter().filter_map(|e| e.poll_timeout()).min();
            let dgram = self.flight.iter().map(|f| f.0).min();
            let Some(next) = [timer, dgram].into_iter().flatten().min() else {
                break;
            };
            if next > end {
                break;
            }
            self.now = self.now.max(next);
            let (due, later): (Vec<_>, Vec<_>) =
                self.flight.drain(..).partition(|f| f.0 <= self.now);
            self.flight = later;
            for (_, to, data) in due {
                self.e[to].handle_datagram(self.now, NodeId(1 - to as u32), &data);
                self.flush(to);
            }
            for i in 0..2 {
                if self.e[i].poll_timeout().is_some_and(|t| t <= self.now) {
                    self.e[i].handle_timeout(self.now);
                    self.flush(i);
                }
            }
        }
        self.now = self.now.max(end);
    }

    fn submit(&mut self, n: u8) {
        let now = self.now;
        self.e[0]
            .submit(now, Bytes::from(vec![n; 8]), Qos::SourceOrdered)
            .expect("the window has room");
        self.flush(0);
    }
}

#[test]
fn a_lost_ack_of_the_last_packet_is_repeated_and_the_repeats_stop() {
    let mut p = Pair::new();
    // The receiver becomes a child of the sender with packet 0.
    p.submit(0);
    p.run_until(Time(500 * MS));
    assert_eq!(p.completed, [0]);
    // Packet 1 is the last for now, and the ACK that reports it is lost.
    p.drop_ack = Some(2);
    p.submit(1);
    p.run_until(Time(1_500 * MS));
    assert_eq!(p.drop_ack, None, "the ACK of packet 1 was sent and dropped");
    assert_eq!(
        p.completed,
        [0, 1],
        "a repeated ACK completed packet 1 long before the sender would give up on a silent child"
    );
    // The repeats thin out and stop once the sender would no longer wait anyway: the idle
    // receiver falls silent.
    p.run_until(Time((1_000 + 2 * SILENCE_MS) * MS));
    assert_eq!(p.e[1].poll_timeout(), None, "the idle receiver is quiet");
    let repeats = p.acks.iter().filter(|&&l| l == 2).count();
    assert!(
        (2..=16).contains(&repeats),
        "the ACK of packet 1 was sent {repeats} times"
    );
}
