//! A sender and one receiver driven by hand, for the Tree's regression tests that need to
//! lose one chosen datagram (`ack_repeat`, `last_packet`): what the wire does with each copy is
//! the test's, through a state `W` and a rule over it.

use super::*;
use crate::engine::{Destination, Event, Qos, Time};
use crate::registry::{EngineParams, EngineSettings, Role};
use bytes::Bytes;
use std::time::Duration;

/// Whether the copy node `from` put on the wire is lost, given the test's wire state.
pub(super) type LoseRule<W> = fn(&mut W, usize, &[u8]) -> bool;

/// A sender (0) and one receiver (1), 1 ms apart.
pub(super) struct Pair<W> {
    pub(super) e: [Tree; 2],
    pub(super) now: Time,
    /// Datagrams on their way: (arrival, to, bytes).
    flight: Vec<(Time, usize, Vec<u8>)>,
    /// What the test keeps about the wire (which copies to lose, what it saw).
    pub(super) wire: W,
    lose: LoseRule<W>,
    /// What the receiver delivered: sequence numbers.
    pub(super) delivered: Vec<u64>,
    /// The sender's completed sends.
    pub(super) completed: Vec<u64>,
}

impl<W> Pair<W> {
    pub(super) fn new(cfg: TreeConfig, wire: W, lose: LoseRule<W>) -> Pair<W> {
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
            Tree::new(&p, cfg.clone(), None, false)
        };
        Pair {
            e: [mk(0, Role::Create), mk(1, Role::Join)],
            now: Time::ZERO,
            flight: Vec::new(),
            wire,
            lose,
            delivered: Vec::new(),
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
            if (self.lose)(&mut self.wire, i, &buf) {
                continue;
            }
            self.flight
                .push((self.now + Duration::from_millis(1), to, buf.clone()));
        }
        while let Some(ev) = self.e[i].poll_event() {
            match ev {
                Event::SendComplete { msg } => self.completed.push(msg),
                Event::Deliver(d) if i == 1 => self.delivered.push(d.seq),
                _ => {}
            }
        }
    }

    /// Runs datagrams and timers up to `end`.
    pub(super) fn run_until(&mut self, end: Time) {
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

    /// The sender sends an 8-byte message of `n`s.
    pub(super) fn submit(&mut self, n: u8) {
        let now = self.now;
        self.e[0]
            .submit(now, Bytes::from(vec![n; 8]), Qos::SourceOrdered)
            .expect("the window has room");
        self.flush(0);
    }

    /// Engine counter `name` of node `i`.
    pub(super) fn counter(&self, i: usize, name: &str) -> u64 {
        self.e[i]
            .engine_counters()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| v)
    }
}
