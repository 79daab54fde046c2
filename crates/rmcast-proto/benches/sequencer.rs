//! Sequencer engine benchmark: ordered 64-byte messages per second through three engines alone.
//!
//! Three [`Sequencer`] engines (one creates the group, two join) exchange their datagrams in
//! memory: no sockets, no threads, virtual time. What is measured is therefore the protocol core
//! only (encoding, decoding, ordering, history, delivery), which bounds from above what the
//! runtime can reach on the hot path: the runtime adds system calls and wake-ups on top.
//!
//! Each iteration submits a batch of 64-byte messages and runs the engines until every member has
//! delivered all of them; throughput is messages delivered (at every member) per second. Three
//! cases: the sequencer itself sends, one other member sends (PB method: request to the sequencer,
//! then the ordered multicast), and all three send.
//!
//! `cargo bench -p rmcast-proto --bench sequencer`

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rmcast_proto::sequencer::{Config, Sequencer};
use rmcast_proto::{Destination, Engine, Event, NodeId, Qos, SendError, Time};
use std::collections::VecDeque;
use std::time::Duration;

const MEMBERS: usize = 3;
/// Messages per iteration; a multiple of `MEMBERS` so that "all send" splits evenly.
const BATCH: usize = 240;
static PAYLOAD: [u8; 64] = [0x5a; 64];
/// Virtual time per step of the loop: short, so that no timer fires on a lossless network and
/// only the data path is measured.
const STEP: Duration = Duration::from_micros(1);
/// Bound on steps for one batch: a livelock fails loudly instead of hanging the benchmark.
const MAX_STEPS: usize = 1_000_000;

/// Three engines and the datagrams in flight between them.
struct Cluster {
    nodes: Vec<Sequencer>,
    now: Time,
    /// (from, destination, datagram) in send order.
    queue: VecDeque<(usize, Destination, Vec<u8>)>,
    /// Spent datagram buffers, reused so that the loop itself does not allocate.
    pool: Vec<Vec<u8>>,
    delivered: Vec<u64>,
}

impl Cluster {
    fn new() -> Cluster {
        let cfg = Config::new(0xbe_4c);
        let mut nodes = vec![Sequencer::create(cfg.clone(), NodeId(1), Time::ZERO)];
        for i in 1..MEMBERS {
            nodes.push(Sequencer::join(
                cfg.clone(),
                NodeId(i as u32 + 1),
                Time::ZERO,
            ));
        }
        let mut c = Cluster {
            nodes,
            now: Time::ZERO,
            queue: VecDeque::new(),
            pool: Vec::new(),
            delivered: vec![0; MEMBERS],
        };
        // Joins are retried on a timer: run in 1 ms steps until every member sees everyone.
        for _ in 0..10_000 {
            if c.nodes.iter().all(|n| n.info().members.len() == MEMBERS) {
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

    fn tick(&mut self) {
        self.now = self.now + STEP;
        self.fire_timers();
    }

    /// Submit `BATCH / senders.len()` messages at each of `senders`, and run until every member
    /// delivered all of them.
    fn batch(&mut self, senders: &[usize]) {
        let target: Vec<u64> = self.delivered.iter().map(|d| d + BATCH as u64).collect();
        let per_sender = BATCH / senders.len();
        let mut left = vec![per_sender; senders.len()];
        let mut steps = 0;
        while left.iter().any(|&l| l > 0) || self.delivered.iter().zip(&target).any(|(d, t)| d < t)
        {
            for (k, &s) in senders.iter().enumerate() {
                while left[k] > 0 {
                    let p = Bytes::from_static(&PAYLOAD);
                    match self.nodes[s].submit(self.now, p, Qos::TotallyOrdered) {
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
}

fn sequencer(c: &mut Criterion) {
    let mut g = c.benchmark_group("sequencer_engine_3_members_64B");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (name, senders) in [
        ("sequencer_sends", &[0usize][..]),
        ("member_sends", &[1][..]),
        ("all_send", &[0, 1, 2][..]),
    ] {
        let mut cluster = Cluster::new();
        g.bench_function(name, |b| b.iter(|| cluster.batch(senders)));
        // Every member delivered the same number of messages: nothing was left behind.
        assert!(cluster.delivered.iter().all(|&d| d == cluster.delivered[0]));
    }
    g.finish();
}

criterion_group!(benches, sequencer);
criterion_main!(benches);
