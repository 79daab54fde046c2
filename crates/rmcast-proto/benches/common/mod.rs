//! What the engine benchmarks share: a few engines exchanging their datagrams in memory, in
//! virtual time, and a loop that submits a batch and runs until every member delivered it.
//!
//! No sockets, no threads: what is measured is the protocol core only (encoding, decoding,
//! ordering, history, delivery), which bounds from above what the runtime can reach on the hot
//! path; the runtime adds system calls and wake-ups on top.

use bytes::Bytes;
use rmcast_proto::{Destination, Engine, Event, NodeId, Qos, SendError, Time};
use std::collections::VecDeque;
use std::time::Duration;

/// Virtual time per step of the loop: short, so that no timer fires early on a lossless
/// network and only the data path is measured.
const STEP: Duration = Duration::from_micros(1);
/// Bound on steps for one batch: a livelock fails loudly instead of hanging the benchmark.
const MAX_STEPS: usize = 1_000_000;

/// Engines and the datagrams in flight between them.
pub struct Cluster {
    nodes: Vec<Box<dyn Engine>>,
    now: Time,
    /// (from, destination, datagram) in send order.
    queue: VecDeque<(usize, Destination, Vec<u8>)>,
    /// Spent datagram buffers, reused so that the loop itself does not allocate.
    pool: Vec<Vec<u8>>,
    /// Messages delivered at each member.
    pub delivered: Vec<u64>,
}

impl Cluster {
    /// `members` engines made by `make(index, now)` (index 0 creates the group, the others
    /// join), run in 1 ms steps until every member sees all of them.
    pub fn new(members: usize, make: impl Fn(usize, Time) -> Box<dyn Engine>) -> Cluster {
        let mut c = Cluster {
            nodes: (0..members).map(|i| make(i, Time::ZERO)).collect(),
            now: Time::ZERO,
            queue: VecDeque::new(),
            pool: Vec::new(),
            delivered: vec![0; members],
        };
        // Joins are retried on a timer.
        for _ in 0..10_000 {
            if c.nodes.iter().all(|n| n.info().members.len() == members) {
                // Drain what formation left (views, timers due) before measuring.
                c.delivered.iter_mut().for_each(|d| *d = 0);
                return c;
            }
            c.step();
            c.now = c.now + Duration::from_millis(1);
            c.fire_timers();
        }
        panic!("members did not join");
    }

    fn index(&self, id: NodeId) -> usize {
        self.nodes
            .iter()
            .position(|n| n.node_id() == id)
            .expect("known node")
    }

    fn fire_timers(&mut self) {
        for n in &mut self.nodes {
            if n.poll_timeout().is_some_and(|t| t <= self.now) {
                n.handle_timeout(self.now);
            }
        }
    }

    /// Collect every engine's datagrams and events, then deliver what was queued. Returns
    /// whether anything happened.
    fn step(&mut self) -> bool {
        let mut busy = false;
        for i in 0..self.nodes.len() {
            loop {
                let mut buf = self.pool.pop().unwrap_or_default();
                match self.nodes[i].poll_transmit(self.now, &mut buf) {
                    Some(t) => self.queue.push_back((i, t.destination, buf)),
                    None => {
                        self.pool.push(buf);
                        break;
                    }
                }
            }
            while let Some(e) = self.nodes[i].poll_event() {
                if let Event::Deliver(d) = e {
                    std::hint::black_box(&d.payload);
                    self.delivered[i] += 1;
                }
            }
        }
        while let Some((from, dest, buf)) = self.queue.pop_front() {
            busy = true;
            let from_id = self.nodes[from].node_id();
            match dest {
                // The network does not loop the sender's own copy back here (the engine would
                // ignore it anyway).
                Destination::Group | Destination::Scoped { .. } => {
                    for j in 0..self.nodes.len() {
                        if j != from {
                            self.nodes[j].handle_datagram(self.now, from_id, &buf);
                        }
                    }
                }
                Destination::Peer(id) => {
                    let j = self.index(id);
                    self.nodes[j].handle_datagram(self.now, from_id, &buf);
                }
            }
            self.pool.push(buf);
        }
        busy
    }

    /// Nothing in flight: on to the next timer (at least one step), so that the loop spends
    /// its time in the engines, not in waiting out a timer a microsecond at a time.
    fn tick(&mut self) {
        let next = self.nodes.iter().filter_map(|n| n.poll_timeout()).min();
        self.now = next
            .map_or(self.now, |t| t.max(self.now))
            .max(self.now + STEP);
        self.fire_timers();
    }

    /// Submit `batch / senders.len()` copies of `payload` at each of `senders`, and run until
    /// every member delivered all of them.
    pub fn batch(&mut self, senders: &[usize], batch: usize, payload: &Bytes) {
        let target: Vec<u64> = self.delivered.iter().map(|d| d + batch as u64).collect();
        let per_sender = batch / senders.len();
        let mut left = vec![per_sender; senders.len()];
        let mut steps = 0;
        while left.iter().any(|&l| l > 0) || self.delivered.iter().zip(&target).any(|(d, t)| d < t)
        {
            for (k, &s) in senders.iter().enumerate() {
                while left[k] > 0 {
                    match self.nodes[s].submit(self.now, payload.clone(), Qos::TotallyOrdered) {
                        Ok(_) => left[k] -= 1,
                        // Back-pressure: let the engines move, then submit the rest.
                        Err(SendError::WouldBlock) => break,
                        Err(e) => panic!("submit: {e}"),
                    }
                }
            }
            if !self.step() {
                self.tick();
            }
            steps += 1;
            assert!(steps < MAX_STEPS, "engines stopped making progress");
        }
    }

    /// Whether every member delivered the same number of messages (nothing left behind).
    pub fn agree(&self) -> bool {
        self.delivered.iter().all(|&d| d == self.delivered[0])
    }
}
