//! The stateful harness every engine target shares: a few live engines of one group on an
//! instant in-memory network, brought into a real state (the group created, the others joined
//! through exchanged datagrams, some messages sent), then driven by the fuzzer's bytes as a
//! program of operations: forged datagrams that start with a valid header (the engine's kind,
//! the group, the current incarnation and a member's sender id, as the peer last sent them)
//! followed by fuzzer bytes, recorded real datagrams with fuzzer bytes written over their body,
//! clock advances with the timers they fire, sends, requests, replies, locks, leaves, resets and
//! spurious timeouts. Every output is moved or drained. Nothing may panic.
//!
//! The live group is built once per process ([`base`]) and cloned for every input: setting it
//! up (a Txn group's is a few hundred datagrams) cost far more than running an input.

// Each target uses one engine's builder.
#![allow(dead_code)]

use bytes::Bytes;
use rmcast_proto::registry::{EngineParams, EngineSettings, Role};
use rmcast_proto::wire::HEADER_LEN;
use rmcast_proto::{Destination, Engine, Event, NodeId, Qos, Time};
use std::time::Duration;

/// Real datagrams kept from the setup (and later traffic) as material for the mutating ops.
const RECORDED: usize = 48;
/// Rounds of datagram exchange one step may take: a storm of answers is cut there.
const EXCHANGE_ROUNDS: usize = 16;
/// Datagrams one node may emit in one round before the round moves on.
const PER_POLL: usize = 64;
/// Most operations one input runs (libFuzzer inputs are bounded too; this bounds the time).
const MAX_OPS: usize = 96;

/// Group id of every target.
pub const GROUP: u32 = 0x00f0_0d42;

/// The fuzzer's bytes, read as small numbers; past the end everything reads as zero.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }
    /// Up to `max` bytes, the count given by the next byte.
    pub fn bytes(&mut self, max: usize) -> &'a [u8] {
        let n = (usize::from(self.u8())).min(max).min(self.data.len());
        let (b, rest) = self.data.split_at(n);
        self.data = rest;
        b
    }
}

/// The members and the clock.
#[derive(Clone)]
pub struct Net<E> {
    pub nodes: Vec<E>,
    pub now: Time,
    /// The header each member last sent (engine kind, group, incarnation, sender).
    headers: Vec<Option<[u8; HEADER_LEN]>>,
    /// Real datagrams: (sender index, bytes); `Bytes`, so that cloning the group copies none.
    recorded: Vec<(usize, Bytes)>,
    /// Deliveries that ask for a reply: (member index, sender, msg).
    to_answer: Vec<(usize, NodeId, u64)>,
    buf: Vec<u8>,
    /// What the setup cost.
    pub stats: Stats,
}

/// Work counts.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub timer_steps: u64,
    pub datagrams: u64,
}

/// Node ids of the members: index i is `NodeId(i + 1)`.
pub fn id(i: usize) -> NodeId {
    NodeId(i as u32 + 1)
}

/// Builds one member: (role, id, now, seed).
pub type Build<E> = fn(Role, NodeId, Time, u64) -> E;

/// The live group every input of this process starts from: built on first use, then cloned.
pub fn base<E: Engine + Clone + 'static>(
    cell: &'static std::thread::LocalKey<std::cell::OnceCell<Net<E>>>,
    build: Build<E>,
    roles: &[Role],
    msgs: usize,
) -> Net<E> {
    cell.with(|c| c.get_or_init(|| Net::new(build, roles, msgs)).clone())
}

impl<E: Engine> Net<E> {
    /// `roles.len()` members built by `build`, the first creating, the others joining one
    /// after the other, then `msgs` messages from each member.
    pub fn new(build: Build<E>, roles: &[Role], msgs: usize) -> Net<E> {
        let mut net = Net {
            nodes: Vec::new(),
            now: Time(1_000_000_000),
            headers: Vec::new(),
            recorded: Vec::new(),
            to_answer: Vec::new(),
            buf: Vec::with_capacity(2048),
            stats: Stats::default(),
        };
        for (i, role) in roles.iter().enumerate() {
            let mut e = build(*role, id(i), net.now, i as u64 + 7);
            e.handle_timeout(net.now);
            net.nodes.push(e);
            net.headers.push(None);
            net.run_for(Duration::from_millis(300));
        }
        for _ in 0..msgs {
            for i in 0..net.nodes.len() {
                let _ = net.nodes[i].submit(
                    net.now,
                    Bytes::from_static(b"setup message"),
                    Qos::default(),
                );
                let _ =
                    net.nodes[i].submit(net.now, Bytes::from_static(b"reliable"), Qos::Reliable);
            }
            net.run_for(Duration::from_millis(20));
        }
        net.run_for(Duration::from_millis(100));
        net
    }

    /// Every pending datagram moved (multicast to all others, unicast to its peer), every
    /// event drained, for at most `EXCHANGE_ROUNDS` rounds.
    pub fn exchange(&mut self) {
        for _ in 0..EXCHANGE_ROUNDS {
            let mut moved = false;
            for i in 0..self.nodes.len() {
                for _ in 0..PER_POLL {
                    self.buf.clear();
                    let Some(t) = self.nodes[i].poll_transmit(self.now, &mut self.buf) else {
                        break;
                    };
                    moved = true;
                    self.stats.datagrams += 1;
                    let from = self.nodes[i].node_id();
                    let dgs: Vec<Vec<u8>> = t.datagrams(&self.buf).map(|d| d.to_vec()).collect();
                    for dg in dgs {
                        self.record(i, &dg);
                        for j in 0..self.nodes.len() {
                            let hit = match t.destination {
                                Destination::Peer(p) => p == self.nodes[j].node_id(),
                                Destination::Group | Destination::Scoped { .. } => j != i,
                            };
                            if hit {
                                self.nodes[j].handle_datagram_with_ttl(
                                    self.now,
                                    from,
                                    &dg,
                                    Some(1),
                                );
                            }
                        }
                    }
                }
            }
            self.drain();
            if !moved {
                break;
            }
        }
    }

    fn record(&mut self, i: usize, dg: &[u8]) {
        if dg.len() >= HEADER_LEN {
            self.headers[i] = Some(dg[..HEADER_LEN].try_into().unwrap());
            if self.recorded.len() < RECORDED {
                self.recorded.push((i, Bytes::copy_from_slice(dg)));
            } else {
                // Keep the newest ones too, spread over the slots.
                let slot = (dg.len() + dg[HEADER_LEN.min(dg.len() - 1)] as usize) % RECORDED;
                self.recorded[slot] = (i, Bytes::copy_from_slice(dg));
            }
        }
    }

    /// Every member's events taken (and their bookkeeping calls made).
    pub fn drain(&mut self) {
        for i in 0..self.nodes.len() {
            while let Some(e) = self.nodes[i].poll_event() {
                if let Event::Deliver(d) = &e {
                    if d.respond && self.to_answer.len() < 16 {
                        self.to_answer.push((i, d.sender, d.msg));
                    }
                }
                if let Event::SendComplete { msg } = e {
                    let _ = self.nodes[i].take_failure(msg);
                }
            }
            let n = &self.nodes[i];
            let _ = (n.poll_timeout(), n.info(), n.counters(), n.can_submit());
        }
    }

    /// Fire the timers due by now.
    pub fn fire(&mut self) {
        for n in &mut self.nodes {
            if n.poll_timeout().is_some_and(|t| t <= self.now) {
                n.handle_timeout(self.now);
            }
        }
    }

    /// Moves datagrams and fires timers for `d`, as a lossless instant network would.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        for _ in 0..10_000 {
            self.exchange();
            let next = self.nodes.iter().filter_map(|n| n.poll_timeout()).min();
            match next {
                Some(t) if t <= end => {
                    self.stats.timer_steps += 1;
                    self.now = self.now.max(t);
                    self.fire();
                }
                _ => break,
            }
        }
        self.now = self.now.max(end);
    }

    /// Runs the fuzzer's program.
    pub fn run(&mut self, input: &mut Input<'_>) {
        let n = self.nodes.len();
        for _ in 0..MAX_OPS {
            if input.is_empty() {
                break;
            }
            let op = input.u8();
            match op % 12 {
                // A forged datagram: a member's real header, a fuzzer-chosen packet type, flags
                // kept, then fuzzer bytes.
                0..=3 => {
                    let from = usize::from(input.u8()) % n;
                    let to = (from + 1 + usize::from(input.u8()) % (n - 1).max(1)) % n;
                    let ptype = input.u8();
                    let body = input.bytes(255);
                    let Some(h) = self.headers[from] else {
                        continue;
                    };
                    let mut dg = h.to_vec();
                    dg[4] = ptype;
                    dg.extend_from_slice(body);
                    let from_id = self.nodes[from].node_id();
                    self.nodes[to].handle_datagram(self.now, from_id, &dg);
                    self.drain();
                }
                // A recorded real datagram with fuzzer bytes written over part of its body.
                4..=5 => {
                    if self.recorded.is_empty() {
                        continue;
                    }
                    let k = usize::from(input.u8()) % self.recorded.len();
                    let at = usize::from(input.u16());
                    let patch = input.bytes(32);
                    let to_pick = input.u8();
                    let (from, ref dg) = self.recorded[k];
                    let mut dg = dg.to_vec();
                    let body = dg.len() - HEADER_LEN;
                    if body > 0 {
                        let at = HEADER_LEN + at % body;
                        for (d, p) in dg[at..].iter_mut().zip(patch) {
                            *d = *p;
                        }
                    }
                    if op & 0x80 != 0 {
                        // Cut short, or grown.
                        let len = HEADER_LEN + usize::from(to_pick) % (body + 8);
                        dg.resize(len, to_pick);
                    }
                    let to = (from + 1 + usize::from(to_pick) % (n - 1).max(1)) % n;
                    let from_id = self.nodes[from].node_id();
                    self.nodes[to].handle_datagram(self.now, from_id, &dg);
                    self.drain();
                }
                // The clock moves on; the timers due fire; the network runs.
                6 => {
                    let step = u64::from(input.u16()) * 100_000 * u64::from(input.u8() % 8 + 1);
                    self.now = Time(self.now.0 + step);
                    self.fire();
                    self.exchange();
                }
                // The network runs.
                7 => self.exchange(),
                // A send from a member.
                8 => {
                    let i = usize::from(input.u8()) % n;
                    let q = input.u8();
                    let qos = match q % 8 {
                        0 => Qos::Unreliable,
                        1 => Qos::Reliable,
                        2 => Qos::SourceOrdered,
                        3 => Qos::TotallyOrdered,
                        4 => Qos::KResilient(q >> 4),
                        5 => Qos::MajorityResilient,
                        6 => Qos::TotallyResilient,
                        _ => Qos::default(),
                    };
                    let len = usize::from(input.u16() % 4096);
                    let payload = Bytes::from(vec![q; len]);
                    if q & 0x80 != 0 {
                        let handler = (q & 0x40 != 0).then_some(q & 3);
                        let _ = self.nodes[i].request(self.now, payload, qos, handler);
                    } else {
                        let _ = self.nodes[i].submit(self.now, payload, qos);
                    }
                    self.drain();
                }
                // A reply to a delivery that asked for one, or a lock.
                9 => {
                    let sel = input.u8();
                    if sel & 1 == 0 && !self.to_answer.is_empty() {
                        let (i, to, msg) = self
                            .to_answer
                            .swap_remove(usize::from(sel >> 1) % self.to_answer.len());
                        let _ = self.nodes[i].reply(self.now, to, msg, Bytes::from_static(b"re"));
                    } else {
                        let i = usize::from(sel >> 1) % n;
                        let _ = self.nodes[i].lock(self.now, u16::from(sel >> 4), sel & 2 != 0);
                    }
                    self.drain();
                }
                // A spurious timeout (not yet due).
                10 => {
                    let i = usize::from(input.u8()) % n;
                    self.nodes[i].handle_timeout(self.now);
                    self.drain();
                }
                // Rare: a leave or a reset.
                _ => {
                    let sel = input.u8();
                    let i = usize::from(sel) % n;
                    match sel >> 5 {
                        0 => self.nodes[i].leave(self.now),
                        1 => {
                            let _ = self.nodes[i].reset(self.now, 1);
                        }
                        _ => {}
                    }
                    self.drain();
                }
            }
        }
        // Settle: the network runs a little longer so the answers to the last ops are handled.
        self.now = Time(self.now.0 + 50_000_000);
        self.fire();
        self.exchange();
    }
}

/// The parameters of one member (datagrams of 1,400 bytes, the group [`GROUP`]).
fn params(
    role: Role,
    me: NodeId,
    now: Time,
    seed: u64,
    settings: &EngineSettings,
) -> EngineParams<'_> {
    EngineParams {
        role,
        group: GROUP,
        me,
        max_datagram_bytes: 1400,
        now,
        seed,
        settings,
    }
}

// The engines configured for fuzzing: the defaults with small buffers, so that a group is set up
// quickly (not with the 16,384-slot history of the defaults) and the fuzzer reaches full buffers,
// window edges and wrap-arounds within a few operations.

/// A Sequencer member (resilience 1, a history of 64 messages).
pub fn sequencer(
    role: Role,
    me: NodeId,
    now: Time,
    _seed: u64,
) -> rmcast_proto::sequencer::Sequencer {
    use rmcast_proto::sequencer::{Config, Sequencer, SequencerFactory};
    let base = Config {
        resilience: 1,
        history_capacity_msgs: 64,
        history_capacity_bytes: 256 << 10,
        send_window_msgs: 16,
        state_interval_msgs: 16,
        max_pending_events: 64,
        ..Config::new(GROUP)
    };
    // The settings `EngineChoice::sequencer_with` gives, applied as its factory applies them.
    let settings = EngineSettings {
        resilience: base.resilience,
        recovery: base.recovery_policy(),
        unicast_only: false,
    };
    let cfg = SequencerFactory::with_config(base).config(GROUP, 1400, &settings);
    match role {
        Role::Create => Sequencer::create(cfg, me, now),
        Role::Join | Role::Client => Sequencer::join(cfg, me, now),
    }
}

/// A Ring member (the defaults).
pub fn ring(role: Role, me: NodeId, now: Time, seed: u64) -> rmcast_proto::ring::Ring {
    use rmcast_proto::ring::{Ring, RingFactory};
    let settings = EngineSettings::default();
    Ring::with_config(
        &params(role, me, now, seed, &settings),
        RingFactory::DEFAULT.config(),
    )
}

/// A Gossip member (a buffer of 64 messages).
pub fn gossip(role: Role, me: NodeId, now: Time, seed: u64) -> rmcast_proto::gossip::Gossip {
    use rmcast_proto::gossip::{Config, Gossip};
    let settings = EngineSettings::default();
    let cfg = Config {
        buffer_msgs: 64,
        max_events: 64,
        ..Config::from_settings(&settings)
    };
    Gossip::new(cfg, &params(role, me, now, seed, &settings))
}

/// A Txn member (messages of 64 KiB at most).
pub fn txn(role: Role, me: NodeId, now: Time, seed: u64) -> rmcast_proto::txn::Txn {
    use rmcast_proto::txn::{Config, Txn};
    let settings = EngineSettings::default();
    let cfg = Config {
        max_events: 64,
        max_message_bytes: 64 << 10,
        ..Config::from_settings(&settings)
    };
    Txn::new(cfg, &params(role, me, now, seed, &settings))
}

/// A Tree member: the sender (the creator), the designated receiver (member 2) or a receiver in
/// its region; no store.
pub fn tree(role: Role, me: NodeId, now: Time, seed: u64) -> rmcast_proto::tree::Tree {
    use rmcast_proto::tree::{Tree, TreeConfig};
    let settings = EngineSettings::default();
    let cfg = TreeConfig {
        designated_receivers: vec![id(1)],
        ..TreeConfig::default()
    };
    Tree::new(&params(role, me, now, seed, &settings), cfg, None, false)
}
