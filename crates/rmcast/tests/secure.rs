//! Secure groups over real loopback sockets, and an attacker on the same network: three members
//! of one engine (every engine of the registry in turn) stream messages while a test tool
//! injects random bytes, each packet type of the engine and of group formation forged with a
//! member's id (plain and with a forged authentication block), replays of captured datagrams
//! and captured datagrams with one bit flipped, to the group's multicast address and to each
//! member's unicast address.
//!
//! With a key, every injected datagram must be refused and counted by every member that
//! received it (the sum of the rejection counters equals the receipts, exactly), the members
//! deliver exactly what they sent, with no view change, and their logs pass the log verifier
//! against what the engine declares at the strongest QoS it serves. Without a key the same
//! injection documents what an attacker can do.
//!
//! The default run injects tens of thousands of datagrams per engine; the million-injection
//! runs (one per engine) are `cargo test --release -p rmcast --test secure -- --ignored
//! million` (about a minute each).

mod common;

use common::*;
use rmcast::{
    EngineChoice, Group, GroupEvent, GroupKey, Keyring, Node, NodeCounters, NodeId, OpenMode, Qos,
};
use rmcast_proto::guarantees::Senders;
use rmcast_proto::wire::{self, EngineKind, Header, FLAG_AUTH};
use rmcast_sim::scenario::strongest_qos;
use std::collections::{HashSet, VecDeque};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A small deterministic RNG (xorshift64*), enough to vary forgeries.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// The rejection counters a forged datagram can land in: each received injection is counted
/// in exactly one of them.
fn rejections(c: &NodeCounters) -> u64 {
    c.malformed
        + c.foreign_dropped
        + c.auth_failed
        + c.auth_unknown_key
        + c.auth_missing
        + c.auth_unexpected
        + c.replays_dropped
}

/// What the attacker does, one datagram at a time.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
enum Kind {
    RandomBytes,
    /// A plain packet of every sequencer type (and the runtime's HELLO) with a member's id.
    ForgedPlain,
    /// The same with an authentication block under the group's key id and a random tag.
    ForgedSealed,
    /// The same under a key id the group does not hold.
    ForgedUnknownKey,
    Replay,
    BitFlip,
}

const KINDS: [Kind; 6] = [
    Kind::RandomBytes,
    Kind::ForgedPlain,
    Kind::ForgedSealed,
    Kind::ForgedUnknownKey,
    Kind::Replay,
    Kind::BitFlip,
];

/// The test tool: listens to the group's multicast like any host on the network can, and
/// sends forgeries from its own socket.
struct Attacker {
    sniff: UdpSocket,
    out: UdpSocket,
    group_addr: SocketAddr,
    members: Vec<(NodeId, SocketAddr)>,
    gid: u32,
    /// The engine whose packets are forged (and, one time in four, group formation's).
    engine: EngineKind,
    captured: VecDeque<Vec<u8>>,
    rng: Rng,
    /// Bit to flip next (cycles through every bit of the captured datagrams).
    flip: usize,
    injected: u64,
    /// Receipts expected: a multicast injection reaches every member.
    receipts: u64,
}

const CAPTURE: usize = 512;

impl Attacker {
    fn new(group: &Group, gid: u32, nodes: &[Node], engine: EngineKind) -> Attacker {
        let maddr = v4(group.multicast_addr().expect("multicast group"));
        let sniff = socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )
        .unwrap();
        sniff.set_reuse_address(true).unwrap();
        sniff.bind(&SocketAddr::V4(maddr).into()).unwrap();
        sniff
            .join_multicast_v4(maddr.ip(), &Ipv4Addr::LOCALHOST)
            .unwrap();
        sniff.set_nonblocking(true).unwrap();
        let out = socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )
        .unwrap();
        out.set_multicast_if_v4(&Ipv4Addr::LOCALHOST).unwrap();
        out.set_multicast_ttl_v4(0).unwrap();
        out.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())
            .unwrap();
        let out: UdpSocket = out.into();
        Attacker {
            sniff: sniff.into(),
            out,
            group_addr: SocketAddr::V4(maddr),
            members: nodes.iter().map(|n| (n.id(), n.local_addr())).collect(),
            gid,
            engine,
            captured: VecDeque::new(),
            rng: Rng(0x9e37_79b9_7f4a_7c15),
            flip: 0,
            injected: 0,
            receipts: 0,
        }
    }

    /// Read what the group multicast since last time.
    fn capture(&mut self) {
        let mut buf = [0u8; 65536];
        let me = self.out.local_addr().unwrap();
        while let Ok((n, from)) = self.sniff.recv_from(&mut buf) {
            if from == me || n == 0 {
                // Our own injections are no capture.
                continue;
            }
            if self.captured.len() == CAPTURE {
                self.captured.pop_front();
            }
            self.captured.push_back(buf[..n].to_vec());
        }
    }

    /// A captured datagram from the older half (so every member has long read it).
    fn old_capture(&mut self) -> Vec<u8> {
        let half = self.captured.len().div_ceil(2).max(1);
        let i = self.rng.below(half as u64) as usize;
        self.captured[i].clone()
    }

    fn forged(&mut self, flags: u8, key_id: Option<u32>) -> Vec<u8> {
        let (member, _) = self.members[self.rng.below(self.members.len() as u64) as usize];
        // Every engine numbers its packet types below 32.
        let ptype = match self.rng.below(33) {
            32 => 0xFF,
            t => t as u8,
        };
        let engine = if self.rng.below(4) == 0 {
            EngineKind::Formation
        } else {
            self.engine
        };
        let incarnation = self
            .captured
            .back()
            .and_then(|c| wire::decode(c).ok())
            .map_or(0, |p| p.header.incarnation);
        let mut buf = Vec::new();
        Header {
            engine,
            ptype,
            flags,
            group: self.gid,
            incarnation,
            sender: member,
        }
        .encode(&mut buf);
        if let Some(k) = key_id {
            buf.extend_from_slice(&k.to_be_bytes());
            // Session id (12 bytes) and counter (8).
            buf.extend_from_slice(&member.0.to_be_bytes());
            buf.extend_from_slice(&self.rng.next().to_be_bytes());
            buf.extend_from_slice(&self.rng.next().to_be_bytes());
        }
        let body = self.rng.below(120) as usize;
        let bytes = self.rng.bytes(body + if key_id.is_some() { 16 } else { 0 });
        buf.extend_from_slice(&bytes);
        buf
    }

    fn make(&mut self, kind: Kind, key_id: u32) -> Vec<u8> {
        match kind {
            Kind::RandomBytes => {
                let n = self.rng.below(300) as usize;
                let mut b = self.rng.bytes(n);
                // Half of them look like rmcast at first sight.
                if n >= 3 && self.rng.below(2) == 0 {
                    b[..3].copy_from_slice(&[b'R', b'M', wire::VERSION]);
                }
                b
            }
            Kind::ForgedPlain => self.forged(0, None),
            Kind::ForgedSealed => self.forged(FLAG_AUTH, Some(key_id)),
            Kind::ForgedUnknownKey => {
                let k = key_id ^ (1 + self.rng.below(u32::MAX as u64 - 1) as u32);
                self.forged(FLAG_AUTH, Some(k))
            }
            Kind::Replay => self.old_capture(),
            Kind::BitFlip => {
                let mut b = self.old_capture();
                let bit = self.flip % (b.len() * 8);
                self.flip = self.flip.wrapping_add(1);
                b[bit / 8] ^= 1 << (bit % 8);
                b
            }
        }
    }

    /// Inject one datagram of `kind`, to the group or to one member.
    fn inject(&mut self, kind: Kind, key_id: u32) {
        let d = self.make(kind, key_id);
        let to = match self.rng.below(2) {
            0 => {
                self.receipts += self.members.len() as u64;
                self.group_addr
            }
            _ => {
                self.receipts += 1;
                self.members[self.rng.below(self.members.len() as u64) as usize].1
            }
        };
        loop {
            match self.out.send_to(&d, to) {
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("inject: {e}"),
            }
        }
        self.injected += 1;
    }
}

struct Outcome {
    /// The QoS every message was sent at.
    qos: Qos,
    /// Views each member had installed when the attack began.
    views_formed: Vec<usize>,
    injected: u64,
    receipts: u64,
    rejected: u64,
    counters: Vec<NodeCounters>,
    seen: Vec<Seen>,
    delivered_all: bool,
    /// Members that streamed (the tree: its sender alone).
    sending: usize,
}

/// How member `joiner` opens a group of `engine`, as `rmcast member` does: RMTP receivers join
/// silently (nobody admits them: a tree joiner opens a receiver, in create mode) and run the LAN
/// parameters; a txn endpoint keeps no membership and opens its own, deciding each open once
/// the last set's receivers answered.
fn member_of(engine: &EngineChoice, joiner: bool) -> (EngineChoice, OpenMode) {
    let join = if joiner {
        OpenMode::Join
    } else {
        OpenMode::Create
    };
    let custom = |f: Arc<dyn rmcast_proto::EngineFactory>| {
        let mut e = EngineChoice::custom(f);
        e.settings = engine.settings;
        e
    };
    match engine.name() {
        "tree" => {
            let f = rmcast_proto::tree::TreeFactory::new(rmcast_proto::tree::TreeConfig::lan());
            if joiner {
                (custom(Arc::new(f.receiver())), OpenMode::Create)
            } else {
                (custom(Arc::new(f)), join)
            }
        }
        "txn" => (
            custom(Arc::new(rmcast_proto::txn::TxnFactory::with_config(
                rmcast_proto::txn::Config {
                    early_open: true,
                    ..rmcast_proto::txn::Config::from_settings(&engine.settings)
                },
            ))),
            OpenMode::Create,
        ),
        _ => (engine.clone(), join),
    }
}

/// Three members of `engine` with `keys`, each streaming `per_member` messages at the
/// strongest QoS the engine serves while the attacker injects `injections` datagrams, in batches
/// after which it waits until every member has counted what it sent (for a secure group), so
/// that the socket buffers never overflow and the accounting is exact.
fn attack(
    engine: &EngineChoice,
    keys: Option<Keyring>,
    per_member: usize,
    injections: u64,
) -> Outcome {
    let name = unique_name(if keys.is_some() { "secure" } else { "open" });
    let qos = strongest_qos(&engine.guarantees());
    let nodes = [node(301), node(302), node(303)];
    let mut groups = Vec::new();
    let mut seen: Vec<Seen> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let (member_engine, mode) = member_of(engine, i > 0);
        let mut c = cfg(&name, &member_engine, mode);
        c.keys = keys.clone();
        c.qos = qos;
        c.completion_events = true;
        c.event_queue_capacity = 1 << 16;
        groups.push(n.open_group(c).expect("open group"));
        seen.push(Seen::default());
    }
    let declared = engine.guarantees();
    // Engines without membership (the tree's receivers, the txn's endpoints) install one view
    // naming nobody; they are formed once every member delivered a probe of the first member.
    recv_until(&mut groups[0], &mut seen[0], Duration::from_secs(10), |s| {
        !s.views.is_empty()
    });
    let silent = seen[0].views[0].members.is_empty();
    if silent {
        let probe = groups[0].sender();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut n = 0;
        while !seen.iter().all(|s| !s.deliveries.is_empty()) {
            assert!(Instant::now() < deadline, "a silent group did not form");
            probe.send_nowait(format!("warmup-{n}")).expect("probe");
            n += 1;
            std::thread::sleep(Duration::from_millis(50));
            for (g, s) in groups.iter_mut().zip(seen.iter_mut()) {
                while let Ok(Some(ev)) = g.try_recv() {
                    s.record(g.me(), ev);
                }
            }
        }
    } else {
        for (g, s) in groups.iter_mut().zip(seen.iter_mut()) {
            recv_until(g, s, Duration::from_secs(10), view_has(3));
        }
    }
    // Who sends: every member, or the creator alone (RMTP's one sender).
    let sending = if declared.senders == Senders::Any {
        3
    } else {
        1
    };
    let views_formed: Vec<usize> = seen.iter().map(|s| s.views.len()).collect();
    let before: Vec<u64> = nodes.iter().map(|n| rejections(&n.counters())).collect();
    if keys.is_some() {
        assert_eq!(before, vec![0; 3], "honest traffic was refused");
    }
    let key_id = keys.as_ref().map_or(0x0bad_cafe, |k| k.current().id());
    let gid = rmcast_proto::common::group_id(&name);
    let kind = match engine.name() {
        "sequencer" => EngineKind::Sequencer,
        "ring" => EngineKind::Ring,
        "gossip" => EngineKind::Gossip,
        "tree" => EngineKind::Tree,
        "txn" => EngineKind::Txn,
        other => panic!("no wire kind for engine {other}"),
    };
    let mut attacker = Attacker::new(&groups[0], gid, &nodes, kind);
    // Let some traffic be captured first.
    let warmup: Vec<_> = groups.iter().take(sending).map(|g| g.sender()).collect();
    for s in &warmup {
        s.send("warmup").expect("warmup send");
    }
    let senders: Vec<_> = groups
        .iter()
        .take(sending)
        .map(|g| {
            let s = g.sender();
            std::thread::spawn(move || {
                for k in 0..per_member {
                    // Paced, so that the stream lasts through the injection.
                    if s.send_nowait(format!("{}:{k}", s.me())).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
            })
        })
        .collect();
    let batch = 500;
    let mut k = 0u64;
    while k < injections {
        attacker.capture();
        for _ in 0..batch.min(injections - k) {
            let kind = KINDS[(k % KINDS.len() as u64) as usize];
            attacker.inject(kind, key_id);
            k += 1;
        }
        if keys.is_some() {
            // Wait until every receipt is counted: flow control for the attacker, and the
            // proof that each injection was refused.
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let now: u64 = nodes.iter().map(|n| rejections(&n.counters())).sum();
                let done = now - before.iter().sum::<u64>();
                if done == attacker.receipts {
                    break;
                }
                assert!(
                    done < attacker.receipts,
                    "more rejections ({done}) than injected receipts ({})",
                    attacker.receipts
                );
                assert!(
                    Instant::now() < deadline,
                    "only {done} of {} injected receipts were refused: some were accepted or lost",
                    attacker.receipts
                );
                std::thread::sleep(Duration::from_micros(200));
            }
        } else {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    for t in senders {
        t.join().unwrap();
    }
    // Every member's stream is delivered everywhere, unless the attack broke the group (only
    // possible without a key).
    let total = sending * per_member;
    // Without a key the group may well be broken by now: a shorter wait.
    let wait = if keys.is_some() { 20 } else { 3 };
    let deadline = Instant::now() + Duration::from_secs(wait);
    let mut delivered_all = false;
    while Instant::now() < deadline {
        for (g, s) in groups.iter_mut().zip(seen.iter_mut()) {
            while let Ok(Some(ev)) = g.try_recv() {
                s.record(g.me(), ev);
            }
        }
        if seen.iter().all(|s| stream_deliveries(s) >= total) {
            delivered_all = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Late events (a forged view, say) get a moment to arrive.
    std::thread::sleep(Duration::from_millis(200));
    for (g, s) in groups.iter_mut().zip(seen.iter_mut()) {
        while let Ok(Some(ev)) = g.try_recv() {
            s.record(g.me(), ev);
        }
    }
    let counters: Vec<NodeCounters> = nodes.iter().map(|n| n.counters()).collect();
    let rejected = counters.iter().map(rejections).sum::<u64>() - before.iter().sum::<u64>();
    for g in groups.iter().rev() {
        let _ = g.leave();
    }
    Outcome {
        qos,
        views_formed,
        injected: attacker.injected,
        receipts: attacker.receipts,
        rejected,
        counters,
        seen,
        delivered_all,
        sending,
    }
}

/// Deliveries of the members' streams (the warmups and the probes, `warmup-N`, aside).
fn stream_deliveries(seen: &Seen) -> usize {
    seen.deliveries
        .iter()
        .filter(|d| !d.payload.starts_with(b"warmup"))
        .count()
}

/// The payloads a member delivered that no member sent (or sent once and delivered twice).
fn foreign_deliveries(seen: &Seen, per_member: usize) -> usize {
    let mut ok: HashSet<(NodeId, String)> = HashSet::new();
    let mut bad = 0;
    for d in &seen.deliveries {
        let text = String::from_utf8_lossy(&d.payload).to_string();
        let legit = text.starts_with("warmup")
            || text
                .split_once(':')
                .and_then(|(s, k)| Some((s.parse::<u32>().ok()?, k.parse::<usize>().ok()?)))
                .is_some_and(|(s, k)| NodeId(s) == d.sender && k < per_member);
        if !legit || !ok.insert((d.sender, text)) {
            bad += 1;
        }
    }
    bad
}

fn key() -> Keyring {
    Keyring::new(GroupKey::generate().unwrap())
}

fn check_secure(engine: &str, per_member: usize, injections: u64) {
    let engine = EngineChoice::named(engine).expect("registered engine");
    let o = attack(&engine, Some(key()), per_member, injections);
    assert_eq!(o.injected, injections);
    // Every receipt of every injection was refused and counted: none was accepted.
    assert_eq!(o.rejected, o.receipts);
    assert!(o.delivered_all, "the stream did not complete under attack");
    for ((s, c), formed) in o.seen.iter().zip(&o.counters).zip(&o.views_formed) {
        assert_eq!(foreign_deliveries(s, per_member), 0);
        // The views of the three joins, and no other.
        assert_eq!(
            s.views.len(),
            *formed,
            "a view change under attack: {:?}",
            s.views
        );
        // Three members, or nobody where the engine keeps no membership.
        let last = s.views.last().expect("a view");
        assert!(
            matches!(last.members.len(), 0 | 3) && s.views.iter().all(|v| v.left.is_none()),
            "{:?}",
            s.views
        );
        assert!(
            !s.other.iter().any(|e| matches!(e, GroupEvent::Recovery(_))),
            "recovery under attack: {:?}",
            s.other
        );
        // Every kind of forgery shows in the counters.
        assert!(
            c.auth_failed > 0 && c.auth_missing > 0 && c.auth_unknown_key > 0,
            "{c:?}"
        );
        assert!(
            c.replays_dropped > 0 && c.malformed > 0 && c.foreign_dropped > 0,
            "{c:?}"
        );
        assert_eq!(c.auth_unexpected, 0);
    }
    let report = rmcast_sim::log::verify_logs_for(
        &o.seen.iter().map(Seen::records).collect::<Vec<_>>(),
        &engine.guarantees().at_qos(o.qos),
    )
    .expect("logs verify");
    let total = o.sending * per_member;
    assert_eq!(
        o.seen.iter().map(stream_deliveries).collect::<Vec<_>>(),
        vec![total; 3]
    );
    assert_eq!(report.members, 3);
    let sum = |f: fn(&NodeCounters) -> u64| o.counters.iter().map(f).sum::<u64>();
    println!(
        "{} (secure, {:?}): {} injected, {} receipts, {} refused (auth_failed {}, \
         auth_unknown_key {}, auth_missing {}, replays_dropped {}, malformed {}, foreign_dropped \
         {}), 0 accepted; {} messages delivered by each member, logs verified",
        engine.name(),
        o.qos,
        o.injected,
        o.receipts,
        o.rejected,
        sum(|c| c.auth_failed),
        sum(|c| c.auth_unknown_key),
        sum(|c| c.auth_missing),
        sum(|c| c.replays_dropped),
        sum(|c| c.malformed),
        sum(|c| c.foreign_dropped),
        total
    );
}

/// Every engine of the registry (the file's engines are tried by `rmcast-cli`'s keyed tests).
const ENGINES: [&str; 5] = ["sequencer", "ring", "gossip", "tree", "txn"];

#[test]
fn a_secure_group_refuses_every_injection_sequencer() {
    check_secure("sequencer", 150, 30_000);
}

#[test]
fn a_secure_group_refuses_every_injection_ring() {
    check_secure("ring", 150, 20_000);
}

#[test]
fn a_secure_group_refuses_every_injection_gossip() {
    check_secure("gossip", 150, 20_000);
}

#[test]
fn a_secure_group_refuses_every_injection_tree() {
    check_secure("tree", 150, 20_000);
}

#[test]
fn a_secure_group_refuses_every_injection_txn() {
    check_secure("txn", 150, 20_000);
}

/// The million-injection runs, one per engine: `cargo test --release -p rmcast --test secure
/// -- --ignored million` (or `RMCAST_ENGINES=ring,tree` for some of them).
#[test]
#[ignore]
fn a_secure_group_refuses_a_million_injections() {
    let only = std::env::var("RMCAST_ENGINES").ok();
    for e in ENGINES {
        if only.as_deref().is_none_or(|o| o.split(',').any(|x| x == e)) {
            check_secure(e, 2_000, 1_000_000);
        }
    }
}

/// The same attacker against a group without a key: forged and replayed datagrams reach the
/// engines. This documents what an attacker can do there; it asserts only what the runtime
/// itself promises (datagrams with an authentication block are dropped).
#[test]
fn a_group_without_a_key_trusts_its_network() {
    let per_member = 100;
    let o = attack(&EngineChoice::sequencer(1), None, per_member, 12_000);
    let foreign: Vec<usize> = o
        .seen
        .iter()
        .map(|s| foreign_deliveries(s, per_member))
        .collect();
    let views: Vec<(u64, usize)> = o
        .seen
        .iter()
        .map(|s| s.views.last().map_or((0, 0), |v| (v.id, v.members.len())))
        .collect();
    let delivered: Vec<usize> = o.seen.iter().map(|s| s.deliveries.len()).collect();
    let recoveries: Vec<usize> = o
        .seen
        .iter()
        .map(|s| {
            s.other
                .iter()
                .filter(|e| matches!(e, GroupEvent::Recovery(_)))
                .count()
        })
        .collect();
    let verdict =
        rmcast_sim::log::verify_logs(&o.seen.iter().map(Seen::records).collect::<Vec<_>>());
    for c in &o.counters {
        // Forgeries with an authentication block are dropped; nothing else is checked.
        assert!(c.auth_unexpected > 0, "{c:?}");
        assert_eq!(c.auth_failed + c.auth_missing + c.replays_dropped, 0);
    }
    println!(
        "group without a key: {} injected, {} receipts, {} dropped by the runtime (malformed or \
         carrying an authentication block), the rest handed to the engines; stream completed: {} \
         (deliveries per member {:?} of {}); deliveries nobody sent per member {:?}; last view \
         (id, members) per member {:?}; recovery events {:?}; log verifier: {}",
        o.injected,
        o.receipts,
        o.rejected,
        o.delivered_all,
        delivered,
        o.sending * per_member,
        foreign,
        views,
        recoveries,
        match verdict {
            Ok(_) => "passes".to_string(),
            Err(v) => format!("{} violations", v.len()),
        }
    );
}

#[test]
fn a_member_without_the_key_cannot_join_and_a_rotation_keeps_the_group() {
    let name = unique_name("keys");
    let engine = EngineChoice::sequencer(0);
    let old = GroupKey::generate().unwrap();
    let new = GroupKey::generate().unwrap();
    let a = node(311);
    let mut ga = a
        .open_group(cfg(&name, &engine, OpenMode::Create).keys(Keyring::new(old.clone())))
        .unwrap();
    // Another key: never admitted, and its datagrams are counted as sealed with an unknown key.
    let b = node(312);
    let mut c = cfg(&name, &engine, OpenMode::Join).keys(key());
    c.join_timeout = Duration::from_millis(800);
    assert!(matches!(b.open_group(c), Err(rmcast::Error::JoinTimeout)));
    assert!(a.counters().auth_unknown_key > 0);
    // No key at all: not admitted either.
    let mut c = cfg(&name, &engine, OpenMode::Join);
    c.join_timeout = Duration::from_millis(800);
    assert!(matches!(b.open_group(c), Err(rmcast::Error::JoinTimeout)));
    assert!(a.counters().auth_missing > 0);
    // Rotation: a member sealing with the new key and accepting the old one joins the member
    // still on the old key that accepts the new one.
    let mut sa = Seen::default();
    recv_until(&mut ga, &mut sa, Duration::from_secs(5), view_has(1));
    let _ = ga.leave();
    let name = unique_name("rotate");
    let mut ga = a
        .open_group(
            cfg(&name, &engine, OpenMode::Create)
                .keys(Keyring::new(old.clone()).accept(new.clone())),
        )
        .unwrap();
    let mut gb = b
        .open_group(cfg(&name, &engine, OpenMode::Join).keys(Keyring::new(new).accept(old)))
        .unwrap();
    let mut sa = Seen::default();
    let mut sb = Seen::default();
    recv_until(&mut ga, &mut sa, Duration::from_secs(5), view_has(2));
    recv_until(&mut gb, &mut sb, Duration::from_secs(5), view_has(2));
    gb.send("across keys").unwrap();
    recv_until(&mut ga, &mut sa, Duration::from_secs(5), |s| {
        !s.deliveries.is_empty()
    });
    assert_eq!(&sa.deliveries[0].payload[..], b"across keys");
    let _ = gb.leave();
    let _ = ga.leave();
}

#[test]
fn secure_group_datagram_size_leaves_room_for_the_seal() {
    let mut c = cfg(
        &unique_name("size"),
        &EngineChoice::sequencer(0),
        OpenMode::Create,
    );
    c.max_datagram_bytes = Some(rmcast::MIN_DATAGRAM_BYTES);
    assert!(c.validate().is_ok());
    let c = c.keys(key());
    assert!(c.validate().is_err());
    assert_eq!(
        c.engine_datagram_bytes(),
        rmcast::MIN_DATAGRAM_BYTES - rmcast_proto::secure::AUTH_OVERHEAD
    );
}

/// Two runtimes with one key and one node id (a copied `--id`, workers numbered alike, a
/// restored VM) both send while plain sockets joined to their groups capture every datagram:
/// no (key, nonce) pair appears twice, since each runtime seals under its own random session.
/// Each runtime has a group of its own (same key): two members with one id in one group are
/// a configuration error the runtime refuses, which would stop one of the senders.
#[test]
fn one_key_and_one_id_in_two_runtimes_never_repeat_a_nonce() {
    let engine = EngineChoice::sequencer(0);
    let keys = key();
    let nodes = [node(777), node(777)];
    // A second member in each group, so that what node 777 sends goes on the wire.
    let partners = [node(778), node(779)];
    let mut groups: Vec<Group> = Vec::new();
    let mut others: Vec<Group> = Vec::new();
    for (n, p) in nodes.iter().zip(&partners) {
        let name = unique_name("nonce");
        let mut c = cfg(&name, &engine, OpenMode::Create).keys(keys.clone());
        // Small datagrams, one message each: many datagrams to look at.
        c.max_datagram_bytes = Some(1472);
        groups.push(n.open_group(c.clone()).expect("open group"));
        others.push(p.open_group(c.mode(OpenMode::Join)).expect("join group"));
    }
    let sniffers: Vec<UdpSocket> = groups
        .iter()
        .map(|g| {
            let maddr = v4(g.multicast_addr().expect("multicast group"));
            let sniff = socket2::Socket::new(
                socket2::Domain::IPV4,
                socket2::Type::DGRAM,
                Some(socket2::Protocol::UDP),
            )
            .unwrap();
            sniff.set_reuse_address(true).unwrap();
            sniff.set_recv_buffer_size(8 << 20).unwrap();
            sniff.bind(&SocketAddr::V4(maddr).into()).unwrap();
            sniff
                .join_multicast_v4(maddr.ip(), &Ipv4Addr::LOCALHOST)
                .unwrap();
            sniff.set_nonblocking(true).unwrap();
            sniff.into()
        })
        .collect();
    let senders: Vec<_> = groups.iter().map(|g| g.sender()).collect();
    for i in 0..300u32 {
        for s in &senders {
            // What a group of one sends is multicast, sealed. A full queue only means fewer
            // datagrams to look at.
            let _ = s.try_send(vec![i as u8; 1000]);
        }
    }
    let mut seen = HashSet::new();
    let mut sessions: Vec<HashSet<[u8; 12]>> = vec![HashSet::new(); 2];
    let mut counted = [0usize; 2];
    let mut buf = [0u8; 65536];
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && counted.iter().any(|n| *n < 300) {
        let mut quiet = true;
        for (i, sniff) in sniffers.iter().enumerate() {
            while let Ok((n, _)) = sniff.recv_from(&mut buf) {
                quiet = false;
                let p = wire::decode(&buf[..n]).expect("every datagram decodes");
                if p.header.sender != NodeId(777) {
                    continue;
                }
                let a = p.auth.expect("every datagram of a keyed group is sealed");
                assert!(
                    seen.insert((a.key_id, a.session, a.counter)),
                    "a (key, nonce) pair was seen twice: session {:?} counter {}",
                    a.session,
                    a.counter
                );
                sessions[i].insert(a.session);
                counted[i] += 1;
            }
        }
        // Keep the groups' event queues from filling.
        for g in groups.iter_mut().chain(others.iter_mut()) {
            while let Ok(Some(_)) = g.try_recv() {}
        }
        if quiet {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    // Both runtimes were heard at length, each under its own session.
    for n in counted {
        assert!(
            n >= 100,
            "only {n} datagrams captured from one runtime: {counted:?}"
        );
    }
    assert!(sessions[0].is_disjoint(&sessions[1]));
    drop(groups);
    drop(others);
    for n in nodes.into_iter().chain(partners) {
        n.shutdown();
    }
}
