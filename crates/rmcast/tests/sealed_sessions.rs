//! Sessions bound to a challenge, over real loopback sockets: captures of a keyed sender session
//! that is gone, replayed to a member started after the capture, never reach its engine (they
//! are held, challenged, and dropped unanswered), while a live sender's messages are delivered,
//! its first datagrams once its session answered the challenge (see `crates/rmcast/src/
//! sessions.rs`).
//!
//! Two cases: a tree receiver fed a finished transfer (the receiver of `rmcast receive
//! --keep-listening` after a transfer, or any receiver started after a capture), and a
//! restarted sequencer fed a captured join.

mod common;

use common::*;
use rmcast::{
    EngineChoice, Group, GroupConfig, GroupKey, Keyring, Node, NodeCounters, NodeId, OpenMode, Qos,
};
use rmcast_proto::tree::{TreeConfig, TreeFactory};
use rmcast_proto::wire::{self, EngineKind};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Packet type of the runtime's session challenge (a formation datagram, sealed).
const SESSION_CHALLENGE: u8 = 0x12;
/// Packet type of the sequencer's join request.
const JOIN_REQ: u8 = 8;

/// A host on the group's network: it records what the group multicasts, and replays it later
/// from its own socket.
struct Capture {
    sniff: UdpSocket,
    out: UdpSocket,
    group: SocketAddr,
    captured: Vec<Vec<u8>>,
}

impl Capture {
    fn new(name: &str) -> Capture {
        let (ip, port) = rmcast_proto::common::multicast_endpoint(name);
        let maddr = SocketAddrV4::new(Ipv4Addr::from(ip), port);
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
        out.set_nonblocking(true).unwrap();
        Capture {
            sniff: sniff.into(),
            out,
            group: SocketAddr::V4(maddr),
            captured: Vec::new(),
        }
    }

    /// Record what was multicast since last time (sealed datagrams only).
    fn capture(&mut self) {
        let mut buf = [0u8; 65536];
        while let Ok((n, _)) = self.sniff.recv_from(&mut buf) {
            if wire::decode(&buf[..n]).is_ok_and(|p| p.auth.is_some()) {
                self.captured.push(buf[..n].to_vec());
            }
        }
    }

    /// Replay everything captured to the group's address and to `member`, paced so that no
    /// socket buffer overflows.
    fn replay(&self, member: SocketAddr) {
        for (i, d) in self.captured.iter().enumerate() {
            let _ = self.out.send_to(d, self.group);
            let _ = self.out.send_to(d, member);
            if i % 32 == 31 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }

    /// Session challenges that came back to the replaying socket: the runtime challenged the
    /// address the captures came from.
    fn challenges_received(&self) -> usize {
        let mut buf = [0u8; 65536];
        let mut n = 0;
        while let Ok((len, _)) = self.out.recv_from(&mut buf) {
            if wire::decode(&buf[..len]).is_ok_and(|p| {
                p.auth.is_some()
                    && p.header.engine == EngineKind::Formation
                    && p.header.ptype == SESSION_CHALLENGE
            }) {
                n += 1;
            }
        }
        n
    }
}

fn key() -> Keyring {
    Keyring::new(GroupKey::generate().unwrap())
}

/// A keyed tree sender (`receiver` false) or receiver of group `name`: RMTP's receivers join
/// silently, so both open at once.
fn tree(name: &str, keys: &Keyring, receiver: bool) -> GroupConfig {
    let f = TreeFactory::new(TreeConfig::lan());
    let f = if receiver { f.receiver() } else { f };
    let mut c = cfg(name, &EngineChoice::custom(Arc::new(f)), OpenMode::Create);
    c.keys = Some(keys.clone());
    c.qos = Qos::SourceOrdered;
    c
}

/// Every event `g` has now.
fn drain(g: &mut Group, seen: &mut Seen) {
    while let Ok(Some(ev)) = g.try_recv() {
        seen.record(g.me(), ev);
    }
}

/// Wait (at most 20 s) until `node`'s counters satisfy `done`, reading `g`'s events meanwhile.
fn wait_counters(
    node: &Node,
    g: &mut Group,
    seen: &mut Seen,
    what: &str,
    done: impl Fn(&NodeCounters) -> bool,
) -> NodeCounters {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        drain(g, seen);
        let c = node.counters();
        if done(&c) {
            return c;
        }
        assert!(Instant::now() < deadline, "{what}: {c:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn payloads(seen: &Seen) -> Vec<String> {
    seen.deliveries
        .iter()
        .map(|d| String::from_utf8_lossy(&d.payload).into_owned())
        .collect()
}

/// A keyed tree sender's session is captured, the sender and its receiver stop; a receiver
/// started afterwards (with the same id, as a restarted one) is fed the capture: it delivers
/// nothing, the capture's datagrams are held, challenged and dropped. A new live sender then
/// gets its messages delivered, its first datagrams released once its session answered.
#[test]
fn a_captured_session_replayed_to_a_new_receiver_is_never_delivered() {
    let keys = key();
    let name = unique_name("sealed-tree");
    let mut cap = Capture::new(&name);
    // The transfer that is captured.
    let (old_sender, old_receiver) = (node(501), node(502));
    let tx = old_sender.open_group(tree(&name, &keys, false)).unwrap();
    let mut rx = old_receiver.open_group(tree(&name, &keys, true)).unwrap();
    let mut seen = Seen::default();
    for k in 0..10 {
        tx.sender().send_nowait(format!("old-{k}")).unwrap();
    }
    recv_until(&mut rx, &mut seen, Duration::from_secs(20), |s| {
        s.deliveries.len() >= 10
    });
    assert_eq!(payloads(&seen)[0], "old-0");
    // What the receiver heard of the sender's session, before it forgot it.
    let first = old_receiver.counters();
    assert!(first.sessions_confirmed >= 1, "{first:?}");
    assert_eq!(first.session_dropped, 0, "{first:?}");
    std::thread::sleep(Duration::from_millis(100));
    cap.capture();
    let sender_datagrams = cap
        .captured
        .iter()
        .filter(|d| wire::decode(d).is_ok_and(|p| p.header.sender == NodeId(501)))
        .count();
    assert!(sender_datagrams >= 10, "captured {sender_datagrams}");
    drop((tx, rx));
    old_sender.shutdown();
    old_receiver.shutdown();

    // A receiver started after the capture, fed it (twice: the second time is refused by the
    // replay windows the first made).
    let receiver = node(502);
    let mut rx = receiver.open_group(tree(&name, &keys, true)).unwrap();
    let mut seen = Seen::default();
    let at = receiver.local_addr();
    cap.replay(at);
    cap.replay(at);
    let c = wait_counters(
        &receiver,
        &mut rx,
        &mut seen,
        "the replayed capture was not held and dropped",
        |c| c.session_held >= sender_datagrams as u64 && c.session_dropped == c.session_held,
    );
    assert_eq!(c.session_released, 0, "{c:?}");
    assert_eq!(c.sessions_confirmed, 0, "{c:?}");
    assert!(c.session_challenges >= 1, "{c:?}");
    assert!(c.replays_dropped >= sender_datagrams as u64, "{c:?}");
    drain(&mut rx, &mut seen);
    assert!(
        seen.deliveries.is_empty(),
        "delivered from a capture: {:?}",
        payloads(&seen)
    );
    assert!(cap.challenges_received() >= 1, "no challenge came back");

    // A live sender: its messages are delivered, the first after its session answered.
    let sender = node(503);
    let tx = sender.open_group(tree(&name, &keys, false)).unwrap();
    for k in 0..5 {
        tx.sender().send_nowait(format!("new-{k}")).unwrap();
    }
    recv_until(&mut rx, &mut seen, Duration::from_secs(20), |s| {
        s.deliveries.len() >= 5
    });
    std::thread::sleep(Duration::from_millis(100));
    drain(&mut rx, &mut seen);
    assert_eq!(
        payloads(&seen),
        (0..5).map(|k| format!("new-{k}")).collect::<Vec<_>>()
    );
    assert!(seen.deliveries.iter().all(|d| d.sender == NodeId(503)));
    let after = receiver.counters();
    assert!(after.sessions_confirmed >= 1, "{after:?}");
    assert!(after.session_released >= 1, "{after:?}");
    assert_eq!(after.session_dropped, c.session_dropped, "{after:?}");
    println!(
        "replayed {} captured datagrams twice: {} held, {} dropped unanswered, {} refused as \
         replays, 0 delivered; the live sender's 5 messages delivered ({} of its datagrams \
         held until its session answered)",
        cap.captured.len(),
        c.session_held,
        c.session_dropped,
        c.replays_dropped,
        after.session_released
    );
    drop((tx, rx));
    sender.shutdown();
    receiver.shutdown();
}

/// A keyed sequencer group forms (a creator and a joiner) and is captured; both stop. The
/// creator, restarted, makes the group anew and is fed the capture: the captured join admits
/// nobody, and nothing is delivered. A live joiner is then admitted.
#[test]
fn a_captured_join_replayed_to_a_restarted_sequencer_admits_nobody() {
    let keys = key();
    let name = unique_name("sealed-seq");
    let engine = EngineChoice::named("sequencer").unwrap();
    let open = |n: &Node, mode: OpenMode| {
        let mut c = cfg(&name, &engine, mode);
        c.keys = Some(keys.clone());
        n.open_group(c).expect("open")
    };
    let mut cap = Capture::new(&name);
    let (a, b) = (node(511), node(512));
    let mut ga = open(&a, OpenMode::Create);
    let mut gb = open(&b, OpenMode::Join);
    let (mut sa, mut sb) = (Seen::default(), Seen::default());
    recv_until(&mut ga, &mut sa, Duration::from_secs(20), view_has(2));
    gb.sender().send("from-512").unwrap();
    recv_until(&mut ga, &mut sa, Duration::from_secs(20), |s| {
        !s.deliveries.is_empty()
    });
    recv_until(&mut gb, &mut sb, Duration::from_secs(20), |s| {
        !s.deliveries.is_empty()
    });
    std::thread::sleep(Duration::from_millis(100));
    cap.capture();
    let joiner = cap
        .captured
        .iter()
        .filter(|d| wire::decode(d).is_ok_and(|p| p.header.sender == NodeId(512)))
        .count();
    // The capture holds the joiner's join request (the sequencer's JOIN_REQ, multicast).
    let join_req = cap.captured.iter().any(|d| {
        wire::decode(d).is_ok_and(|p| {
            p.header.sender == NodeId(512)
                && p.header.engine == EngineKind::Sequencer
                && p.header.ptype == JOIN_REQ
        })
    });
    assert!(
        join_req,
        "no join request captured ({joiner} datagrams of the joiner)"
    );
    drop((ga, gb));
    a.shutdown();
    b.shutdown();

    // The sequencer restarts and makes the group anew; the capture is replayed to it.
    let a = node(511);
    let mut ga = open(&a, OpenMode::Create);
    let mut sa = Seen::default();
    recv_until(&mut ga, &mut sa, Duration::from_secs(20), view_has(1));
    let at = a.local_addr();
    cap.replay(at);
    let c = wait_counters(
        &a,
        &mut ga,
        &mut sa,
        "the replayed join was not held and dropped",
        |c| c.session_held >= joiner as u64 && c.session_dropped == c.session_held,
    );
    assert_eq!((c.session_released, c.sessions_confirmed), (0, 0), "{c:?}");
    drain(&mut ga, &mut sa);
    assert!(sa.deliveries.is_empty(), "{:?}", payloads(&sa));
    assert!(
        sa.views.iter().all(|v| v.members == vec![NodeId(511)]),
        "a capture joined: {:?}",
        sa.views
    );

    // A live joiner is admitted (its join held one round trip).
    let c_node = node(513);
    let mut gc = open(&c_node, OpenMode::Join);
    let mut sc = Seen::default();
    recv_until(&mut ga, &mut sa, Duration::from_secs(20), view_has(2));
    assert_eq!(
        sa.views.last().unwrap().members,
        vec![NodeId(511), NodeId(513)]
    );
    gc.sender().send("from-513").unwrap();
    recv_until(&mut gc, &mut sc, Duration::from_secs(20), |s| {
        !s.deliveries.is_empty()
    });
    recv_until(&mut ga, &mut sa, Duration::from_secs(20), |s| {
        !s.deliveries.is_empty()
    });
    assert_eq!(payloads(&sa), vec!["from-513".to_string()]);
    let after = a.counters();
    assert!(
        after.sessions_confirmed >= 1 && after.session_released >= 1,
        "{after:?}"
    );
    println!(
        "restarted sequencer fed {} captured datagrams ({joiner} of the old joiner): {} held, \
         {} dropped unanswered, nobody admitted; a live joiner admitted",
        cap.captured.len(),
        c.session_held,
        c.session_dropped
    );
    drop((ga, gc));
    c_node.shutdown();
    a.shutdown();
}
