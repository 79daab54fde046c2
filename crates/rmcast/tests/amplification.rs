//! No amplification in groups without a key (`crate::peers` of the runtime): a host that sends
//! requests from an address the group never validated gets back at most three times the bytes
//! it sent, whatever the request.
//!
//! The measurement: running groups without a key (sequencer, ring, tree, txn), and a plain UDP
//! socket on 127.0.0.1 with a port of its own, which spoofs nothing (its own address stands for
//! a victim's). For each request type that makes members answer, built with the engines' own
//! codecs on a real member's header (the member's id, the group's incarnation) and on a new id,
//! it sends a few to every member's unicast address, then to the group's multicast address,
//! and counts the bytes that come back to it. A multicast datagram is received by every
//! member, and each receiver keeps its own budget: its bytes in count once per member. The
//! table is printed (`cargo test -p rmcast --test amplification -- --nocapture`).

mod common;

use common::*;
use rmcast::txn::{TxnEvent, TxnGroup, TxnOptions};
use rmcast::{EngineChoice, Group, GroupKey, Keyring, Node, NodeCounters, NodeId, OpenMode};
use rmcast_proto::formation::hello::{self, Hello};
use rmcast_proto::sequencer::packet::{self as seq, Body};
use rmcast_proto::wire::{self, EngineKind, Header};
use rmcast_proto::{ring, tree, txn};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most a group may send an address it did not validate, per byte received from it.
const FACTOR: f64 = 3.0;
/// Requests of one type sent to each destination.
const ROUNDS: usize = 8;
/// How long the probe listens after its last request: longer than the runtime holds a
/// unicast for an address that does not validate (500 ms), so that nothing held is missed.
const LISTEN: Duration = Duration::from_millis(900);

/// One line of the table.
struct Row {
    kind: String,
    via: &'static str,
    /// Bytes the probe sent.
    sent: u64,
    /// Bytes the members received from it (a multicast datagram counts once per member).
    received: u64,
    /// Bytes that came back to the probe.
    back: u64,
}

impl Row {
    fn ratio(&self) -> f64 {
        self.back as f64 / self.received.max(1) as f64
    }
}

/// The probe: a plain UDP socket on a port of its own, never validated by anyone.
struct Probe {
    sock: UdpSocket,
    sent: u64,
    received: u64,
    back: u64,
}

impl Probe {
    fn new() -> Probe {
        let sock = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind probe");
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        Probe {
            sock,
            sent: 0,
            received: 0,
            back: 0,
        }
    }

    /// Send `d` to `to`, where `receivers` members read it.
    fn send(&mut self, d: &[u8], to: SocketAddr, receivers: u64) {
        self.sock.send_to(d, to).expect("probe send");
        self.sent += d.len() as u64;
        self.received += d.len() as u64 * receivers;
        self.read();
    }

    /// Read whatever came back so far.
    fn read(&mut self) {
        let mut buf = vec![0u8; 65536];
        self.sock.set_nonblocking(true).unwrap();
        while let Ok((n, _)) = self.sock.recv_from(&mut buf) {
            self.back += n as u64;
        }
        self.sock.set_nonblocking(false).unwrap();
    }

    /// Listen for [`LISTEN`], counting what comes back.
    fn listen(&mut self) {
        let until = Instant::now() + LISTEN;
        let mut buf = vec![0u8; 65536];
        while Instant::now() < until {
            if let Ok((n, _)) = self.sock.recv_from(&mut buf) {
                self.back += n as u64;
            }
        }
    }
}

/// Where the requests go: every member's unicast address, and the group's multicast address.
struct Target {
    members: Vec<SocketAddr>,
    group: Option<SocketAddr>,
}

/// Send `make(round)` to every member, then (a fresh probe) to the group, `ROUNDS` times each;
/// two rows.
fn measure(kind: &str, target: &Target, mut make: impl FnMut(usize) -> Vec<u8>) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut p = Probe::new();
    for r in 0..ROUNDS {
        for (i, m) in target.members.iter().enumerate() {
            p.send(&make(r * target.members.len() + i), *m, 1);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    p.listen();
    rows.push(Row {
        kind: kind.to_string(),
        via: "unicast",
        sent: p.sent,
        received: p.received,
        back: p.back,
    });
    if let Some(g) = target.group {
        let mut p = Probe::new();
        let n = target.members.len() as u64;
        for r in 0..ROUNDS {
            p.send(&make(1000 + r), g, n);
            std::thread::sleep(Duration::from_millis(5));
        }
        p.listen();
        rows.push(Row {
            kind: kind.to_string(),
            via: "multicast",
            sent: p.sent,
            received: p.received,
            back: p.back,
        });
    }
    rows
}

fn header(engine: EngineKind, ptype: u8, group: u32, incarnation: u32, sender: NodeId) -> Header {
    Header {
        engine,
        ptype,
        flags: 0,
        group,
        incarnation,
        sender,
    }
}

/// A host listening to the group's multicast address, as any host on the network can: it
/// learns the incarnation the engine runs in.
struct Sniffer(UdpSocket);

impl Sniffer {
    fn new(maddr: SocketAddrV4) -> Sniffer {
        let s = socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )
        .unwrap();
        s.set_reuse_address(true).unwrap();
        s.bind(&SocketAddr::V4(maddr).into()).unwrap();
        s.join_multicast_v4(maddr.ip(), &Ipv4Addr::LOCALHOST)
            .unwrap();
        s.set_nonblocking(true).unwrap();
        Sniffer(s.into())
    }

    /// The last datagrams of `engine` heard so far (decoded by `f`).
    fn last<T>(&self, engine: EngineKind, f: impl Fn(&wire::Packet<'_>) -> Option<T>) -> Option<T> {
        let mut buf = vec![0u8; 65536];
        let mut found = None;
        while let Ok(n) = self.0.recv(&mut buf) {
            if let Ok(p) = wire::decode(&buf[..n]) {
                if p.header.engine == engine {
                    if let Some(t) = f(&p) {
                        found = Some(t);
                    }
                }
            }
        }
        found
    }
}

/// `n` members of a group without a key running `engine`, formed, each having sent
/// `per_member` messages of 1,000 bytes, all delivered.
fn formed(
    tag: &str,
    engine: &EngineChoice,
    ids: &[u32],
    per_member: usize,
) -> (Vec<Node>, Vec<Group>, String) {
    let name = unique_name(tag);
    let nodes: Vec<Node> = ids.iter().map(|i| node(*i)).collect();
    let mut groups = Vec::new();
    let mut seen = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let mode = if i == 0 {
            OpenMode::Create
        } else {
            OpenMode::Join
        };
        groups.push(n.open_group(cfg(&name, engine, mode)).expect("open"));
        seen.push(Seen::default());
    }
    for (g, s) in groups.iter_mut().zip(seen.iter_mut()) {
        recv_until(g, s, Duration::from_secs(20), view_has(ids.len()));
    }
    for g in &groups {
        for _ in 0..per_member {
            g.send_nowait(vec![b'm'; 1000]).expect("send");
        }
    }
    let total = groups.len() * per_member;
    for (g, s) in groups.iter_mut().zip(seen.iter_mut()) {
        recv_until(g, s, Duration::from_secs(20), |s| {
            s.deliveries.len() >= total
        });
    }
    (nodes, groups, name)
}

fn target(nodes: &[Node], group: &Group) -> Target {
    Target {
        members: nodes.iter().map(|n| n.local_addr()).collect(),
        group: group.multicast_addr(),
    }
}

/// A node id no member has.
fn stranger(k: usize) -> NodeId {
    NodeId(0x5000_0000 + k as u32)
}

fn sequencer_rows() -> (Vec<Row>, Vec<NodeCounters>) {
    let engine = EngineChoice::sequencer(1);
    let ids = [701, 702, 703];
    let (nodes, groups, name) = formed("amp-seq", &engine, &ids, 40);
    let gid = groups[0].group_id();
    let sniff = Sniffer::new(v4(groups[0].multicast_addr().expect("multicast")));
    groups[1].send(vec![b'x'; 10]).expect("a datagram to sniff");
    std::thread::sleep(Duration::from_millis(50));
    let inc = sniff
        .last(EngineKind::Sequencer, |p| Some(p.header.incarnation))
        .unwrap_or(0);
    let t = target(&nodes, &groups[0]);
    let mut rows = Vec::new();
    let mut buf = Vec::new();
    let retrans = Body::Retrans {
        ranges: seq::SeqRanges::single(0, 10_000),
        expect: 0,
    };
    rows.extend(measure("sequencer RETRANS, member's id", &t, |_| {
        let h = header(
            EngineKind::Sequencer,
            seq::ptype::RETRANS,
            gid,
            inc,
            NodeId(702),
        );
        seq::encode_control(&mut buf, &h, &retrans);
        buf.clone()
    }));
    rows.extend(measure("sequencer RETRANS, new id", &t, |k| {
        let h = header(
            EngineKind::Sequencer,
            seq::ptype::RETRANS,
            gid,
            inc,
            stranger(k),
        );
        seq::encode_control(&mut buf, &h, &retrans);
        buf.clone()
    }));
    rows.extend(measure("formation HELLO ask, new id", &t, |k| {
        let mut b = Vec::new();
        hello::encode(gid, stranger(100 + k), Hello::Ask, 1400, &mut b);
        b
    }));
    rows.extend(measure("formation HELLO looking, new id", &t, |k| {
        let mut b = Vec::new();
        hello::encode(gid, stranger(200 + k), Hello::Looking, 1400, &mut b);
        b
    }));
    // Last: a join of a node that never answers again disturbs the group.
    rows.extend(measure("sequencer JOIN_REQ, new id", &t, |k| {
        let h = header(
            EngineKind::Sequencer,
            seq::ptype::JOIN_REQ,
            gid,
            inc,
            stranger(300 + k),
        );
        seq::encode_control(&mut buf, &h, &Body::JoinReq { into: None });
        buf.clone()
    }));
    let counters = nodes.iter().map(Node::counters).collect();
    let _ = name;
    for g in groups.iter().rev() {
        let _ = g.leave_timeout(Duration::from_millis(300));
    }
    (rows, counters)
}

fn ring_rows() -> (Vec<Row>, Vec<NodeCounters>) {
    let engine = EngineChoice::named("ring").expect("ring");
    let ids = [711, 712, 713];
    let (nodes, groups, _) = formed("amp-ring", &engine, &ids, 40);
    let gid = groups[0].group_id();
    let sniff = Sniffer::new(v4(groups[0].multicast_addr().expect("multicast")));
    groups[1].send(vec![b'x'; 10]).expect("a datagram to sniff");
    std::thread::sleep(Duration::from_millis(50));
    let inc = sniff
        .last(EngineKind::Ring, |p| Some(p.header.incarnation))
        .unwrap_or(0);
    let t = target(&nodes, &groups[0]);
    let nack = |sender: NodeId| {
        let mut b = Vec::new();
        header(EngineKind::Ring, ring::packet::NACK, gid, inc, sender).encode(&mut b);
        ring::packet::Nack {
            acks: 0..1000,
            slots: Vec::new(),
            everyone: true,
        }
        .encode(&mut b);
        b
    };
    let mut rows = Vec::new();
    rows.extend(measure("ring NACK everyone, member's id", &t, |_| {
        nack(NodeId(712))
    }));
    rows.extend(measure("ring NACK everyone, new id", &t, |k| {
        nack(stranger(k))
    }));
    let counters = nodes.iter().map(Node::counters).collect();
    for g in groups.iter().rev() {
        let _ = g.leave_timeout(Duration::from_millis(300));
    }
    (rows, counters)
}

fn tree_rows() -> (Vec<Row>, Vec<NodeCounters>) {
    // As `rmcast send` and `rmcast receive` open it: a sender and receivers that join
    // silently (each opens in create mode; a receiver's engine is a receiver whatever the
    // mode). 200 packets of 1,000 bytes in the sender's cache.
    let name = unique_name("amp-tree");
    let nodes: Vec<Node> = [721, 722, 723].iter().map(|i| node(*i)).collect();
    let mut groups = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let f = tree::TreeFactory::new(tree::TreeConfig::lan());
        let f = if i == 0 { f } else { f.receiver() };
        let mut c = cfg(&name, &EngineChoice::custom(Arc::new(f)), OpenMode::Create);
        c.qos = rmcast::Qos::SourceOrdered;
        groups.push(n.open_group(c).expect("open"));
    }
    for _ in 0..200 {
        groups[0].send_nowait(vec![b'm'; 1000]).expect("send");
    }
    for g in groups.iter_mut().skip(1) {
        let mut s = Seen::default();
        recv_until(g, &mut s, Duration::from_secs(20), |s| {
            s.deliveries.len() >= 200
        });
    }
    let gid = groups[0].group_id();
    let t = target(&nodes, &groups[0]);
    let bits = vec![0u8; tree::packet::MAX_ACK_BITS / 8];
    let txnow = |sender: NodeId| {
        let p = tree::packet::Packet::Ack {
            txnow: true,
            l: 0,
            nbits: tree::packet::MAX_ACK_BITS as u16,
            bits: &bits,
        };
        let mut b = Vec::new();
        header(EngineKind::Tree, p.ptype(), gid, 0, sender).encode(&mut b);
        p.encode(&mut b);
        b
    };
    let mut rows = Vec::new();
    rows.extend(measure("tree ACK_TXNOW, member's id", &t, |_| {
        txnow(NodeId(722))
    }));
    rows.extend(measure("tree ACK_TXNOW, new id", &t, |k| {
        txnow(stranger(k))
    }));
    let counters = nodes.iter().map(Node::counters).collect();
    for g in groups.iter().rev() {
        let _ = g.leave_timeout(Duration::from_millis(300));
    }
    (rows, counters)
}

/// Two transaction servers that answer every request with 16 KiB (as `txn-serve --exec` may
/// answer with much), and a client whose real transaction the probe then asks about.
fn txn_rows() -> (Vec<Row>, Vec<NodeCounters>) {
    let name = unique_name("amp-txn");
    let stop = Arc::new(AtomicBool::new(false));
    let servers: Vec<Node> = [731, 732].iter().map(|i| node(*i)).collect();
    let mut threads = Vec::new();
    for n in &servers {
        let mut g = TxnGroup::open(n, &name, TxnOptions::server()).expect("server");
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if let Ok(Some(TxnEvent::Request(d))) = g.next_event(Duration::from_millis(20)) {
                    let _ = g.reply(d.sender, d.msg, vec![b'r'; 16 * 1024]);
                }
            }
            let _ = g.group().leave_timeout(Duration::from_millis(300));
        }));
    }
    let client = node(733);
    let maddr = v4(rmcast::GroupConfig::new(&name)
        .multicast_addr()
        .expect("multicast"));
    let sniff = Sniffer::new(maddr);
    let mut c = TxnGroup::open(&client, &name, TxnOptions::client().min(2).max(2)).expect("client");
    // A real transaction, answered by both servers: the probe's QUERY names it.
    let _ = c.request("warmup", rmcast::txn::Until::All);
    let real = sniff
        .last(EngineKind::Txn, |p| {
            (p.header.ptype == txn::packet::FIRST)
                .then(|| {
                    txn::packet::decode_first(p.body)
                        .ok()
                        .map(|f| (p.header.sender, f.key))
                })
                .flatten()
        })
        .expect("the client's FIRST was heard");
    let gid = rmcast_proto::common::group_id(&name);
    let t = Target {
        members: servers.iter().map(|n| n.local_addr()).collect(),
        group: Some(SocketAddr::V4(maddr)),
    };
    let set: Vec<NodeId> = servers.iter().map(Node::id).collect();
    // A whole request in one datagram: FIRST, then CNTL releasing it (deliver-to its end).
    let request = |sender: NodeId, k: usize| {
        let key = txn::packet::Key {
            epoch: 9,
            txn: k as u64 + 1,
        };
        let data = [b'q'; 64];
        let mut b = Vec::new();
        header(EngineKind::Txn, txn::packet::FIRST, gid, 0, sender).encode(&mut b);
        txn::packet::encode_first(
            &mut b,
            &txn::packet::First {
                key,
                flags: 0,
                set_size: 2,
                backoff_unit_us: 0,
                total: data.len() as u32,
                data: &data,
            },
        );
        let mut c = Vec::new();
        header(EngineKind::Txn, txn::packet::CNTL, gid, 0, sender).encode(&mut c);
        txn::packet::encode_cntl(
            &mut c,
            &txn::packet::Cntl {
                key,
                flags: txn::packet::CNTL_DELIVER_TO | txn::packet::CNTL_SREQ,
                deliver_to: data.len() as u32,
                backoff_unit_us: 0,
                set_size: 2,
                probe: 1,
            },
            &set,
        );
        (b, c)
    };
    let mut rows = Vec::new();
    for (kind, sender) in [
        ("txn request (FIRST+CNTL), new id", None),
        ("txn request (FIRST+CNTL), client's id", Some(client.id())),
    ] {
        let mut p = Probe::new();
        for r in 0..ROUNDS {
            for (i, m) in t.members.iter().enumerate() {
                let k = r * 2 + i;
                let s = sender.unwrap_or(stranger(400 + k));
                let (first, cntl) = request(s, 100 + k);
                p.send(&first, *m, 1);
                p.send(&cntl, *m, 1);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        p.listen();
        rows.push(Row {
            kind: kind.to_string(),
            via: "unicast",
            sent: p.sent,
            received: p.received,
            back: p.back,
        });
    }
    rows.extend(measure("txn QUERY, new id", &t, |k| {
        let mut b = Vec::new();
        header(
            EngineKind::Txn,
            txn::packet::QUERY,
            gid,
            0,
            stranger(500 + k),
        )
        .encode(&mut b);
        txn::packet::encode_query(&mut b, real.0, real.1);
        b
    }));
    let mut counters: Vec<NodeCounters> = servers.iter().map(Node::counters).collect();
    counters.push(client.counters());
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    let _ = c.group().leave_timeout(Duration::from_millis(300));
    (rows, counters)
}

fn print(rows: &[Row]) {
    println!(
        "\n{:<42} {:<9} {:>10} {:>12} {:>10} {:>6}",
        "request", "via", "bytes sent", "bytes in", "bytes out", "ratio"
    );
    for r in rows {
        println!(
            "{:<42} {:<9} {:>10} {:>12} {:>10} {:>6.2}",
            r.kind,
            r.via,
            r.sent,
            r.received,
            r.back,
            r.ratio()
        );
    }
}

fn check(rows: &[Row], counters: &[NodeCounters]) {
    print(rows);
    for r in rows {
        assert!(
            r.ratio() <= FACTOR,
            "{} by {}: {} bytes back for {} in (ratio {:.2})",
            r.kind,
            r.via,
            r.back,
            r.received,
            r.ratio()
        );
        if r.via == "unicast" {
            // Sent to one member each: every byte in is a byte the probe sent.
            assert!(r.back as f64 <= FACTOR * r.sent as f64);
        }
    }
    // The probe was challenged (it never answered), and members validated each other.
    assert!(counters.iter().map(|c| c.path_challenges).sum::<u64>() > 0);
    assert!(counters.iter().map(|c| c.paths_validated).sum::<u64>() > 0);
}

#[test]
fn sequencer_requests_from_an_unvalidated_address_get_at_most_three_times_their_bytes() {
    let (rows, counters) = sequencer_rows();
    check(&rows, &counters);
    // The forged RETRANS with a member's id did not move that member's address.
    assert!(counters.iter().map(|c| c.peer_address_kept).sum::<u64>() > 0);
}

#[test]
fn ring_nacks_from_an_unvalidated_address_get_at_most_three_times_their_bytes() {
    let (rows, counters) = ring_rows();
    check(&rows, &counters);
}

#[test]
fn tree_ack_txnow_from_an_unvalidated_address_gets_at_most_three_times_its_bytes() {
    let (rows, counters) = tree_rows();
    check(&rows, &counters);
    // The sender wanted to send much more: the budget held it back.
    assert!(
        counters
            .iter()
            .map(|c| c.amplification_limited)
            .sum::<u64>()
            > 0
    );
}

#[test]
fn txn_requests_from_an_unvalidated_address_get_at_most_three_times_their_bytes() {
    let (rows, counters) = txn_rows();
    check(&rows, &counters);
}

/// Members of a group without a key validate each other as they form (one round trip): no
/// unicast of theirs waits until it is dropped, and their messages flow.
#[test]
fn members_validate_each_other_and_nothing_they_send_is_dropped() {
    let engine = EngineChoice::sequencer(1);
    let start = Instant::now();
    let (nodes, groups, _) = formed("amp-clean", &engine, &[741, 742, 743], 20);
    // Every member validated the other two (each pair once per direction, at least).
    let deadline = Instant::now() + Duration::from_secs(10);
    while nodes.iter().any(|n| n.counters().paths_validated < 2) {
        assert!(
            Instant::now() < deadline,
            "members did not validate each other"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    println!(
        "three members formed, validated each other and delivered 60 messages in {:?}",
        start.elapsed()
    );
    for n in &nodes {
        let c = n.counters();
        assert_eq!(c.amplification_dropped, 0, "{c:?}");
    }
    for g in groups.iter().rev() {
        let _ = g.leave_timeout(Duration::from_millis(300));
    }
}

/// One peer table per group: a node in a group without a key and in a keyed group learns
/// addresses for each apart. The probe takes over a member's id in the group without a key
/// (it answers the challenge: it really receives at its address, so the group without a key
/// may send it that member's unicasts); the keyed group's unicasts to that member still go to
/// the member, and none reaches the probe.
#[test]
fn an_unkeyed_group_cannot_redirect_a_keyed_groups_unicasts() {
    let nodes = [node(751), node(752)];
    let engine = EngineChoice::sequencer(1);
    let keys = Keyring::new(GroupKey::generate().unwrap());
    let open_name = unique_name("amp-open");
    let keyed_name = unique_name("amp-keyed");
    let mut open = Vec::new();
    let mut keyed = Vec::new();
    let mut seen_open = [Seen::default(), Seen::default()];
    // Node 751 creates the open group; node 752 creates the keyed one and orders it, so
    // that node 751's messages there go to node 752 point to point.
    for (i, n) in nodes.iter().enumerate() {
        let mode = if i == 0 {
            OpenMode::Create
        } else {
            OpenMode::Join
        };
        open.push(n.open_group(cfg(&open_name, &engine, mode)).unwrap());
    }
    for (i, n) in nodes.iter().enumerate().rev() {
        let mode = if i == 1 {
            OpenMode::Create
        } else {
            OpenMode::Join
        };
        let mut c = cfg(&keyed_name, &engine, mode);
        c.keys = Some(keys.clone());
        keyed.push(n.open_group(c).unwrap());
    }
    // keyed[0] is node 752's, keyed[1] node 751's.
    let mut seen_keyed = [Seen::default(), Seen::default()];
    for (g, s) in open.iter_mut().zip(seen_open.iter_mut()) {
        recv_until(g, s, Duration::from_secs(20), view_has(2));
    }
    for (g, s) in keyed.iter_mut().zip(seen_keyed.iter_mut()) {
        recv_until(g, s, Duration::from_secs(20), view_has(2));
    }
    // The probe speaks as node 752 in the open group and answers every challenge.
    let probe = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    probe
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let gid_open = open[0].group_id();
    let gid_keyed = keyed[0].group_id();
    let victim = NodeId(752);
    let to = nodes[0].local_addr();
    let status = Body::Status {
        expect: 0,
        held_next: 0,
        ask: true,
    };
    let mut buf = Vec::new();
    let mut took_over = false;
    let mut keyed_at_probe = 0;
    let mut answer = vec![0u8; 65536];
    let until = Instant::now() + Duration::from_secs(10);
    // Until the probe took the id over (it answered a challenge; or a second passed), then
    // while node 751 sends 200 messages in the keyed group, and a moment after.
    let mut keyed_from = None;
    let start = Instant::now();
    while Instant::now() < until {
        let h = header(
            EngineKind::Sequencer,
            seq::ptype::STATUS,
            gid_open,
            0,
            victim,
        );
        seq::encode_control(&mut buf, &h, &status);
        probe.send_to(&buf, to).unwrap();
        let ready = took_over || start.elapsed() > Duration::from_secs(1);
        if ready && keyed_from.is_none() {
            keyed_from = Some(Instant::now());
            // The keyed group's traffic: node 751 sends to its sequencer, node 752, point to
            // point.
            for _ in 0..200 {
                keyed[1].send_nowait(vec![b'k'; 100]).unwrap();
            }
        }
        if keyed_from.is_some_and(|t| t.elapsed() > Duration::from_millis(500)) {
            break;
        }
        while let Ok((n, _)) = probe.recv_from(&mut answer) {
            let Ok(p) = wire::decode(&answer[..n]) else {
                continue;
            };
            if p.header.group == gid_keyed {
                keyed_at_probe += 1;
            }
            if p.header.group == gid_open
                && p.header.engine == EngineKind::Formation
                && p.header.ptype == 0x10
                && n == wire::HEADER_LEN + 8
            {
                // A path challenge: answer it, as node 752.
                let mut r = Vec::new();
                header(EngineKind::Formation, 0x11, gid_open, 0, victim).encode(&mut r);
                r.extend_from_slice(&answer[wire::HEADER_LEN..n]);
                probe.send_to(&r, to).unwrap();
                took_over = true;
            }
        }
    }
    assert_eq!(keyed_at_probe, 0, "keyed unicasts reached the probe");
    assert!(took_over, "the probe was never challenged");
    assert!(
        nodes[0].counters().paths_validated > 0,
        "{:?}",
        nodes[0].counters()
    );
    // The keyed group still works between the two nodes.
    recv_until(
        &mut keyed[0],
        &mut seen_keyed[0],
        Duration::from_secs(20),
        |s| s.deliveries.len() >= 200,
    );
    for g in keyed.iter().chain(open.iter()).rev() {
        let _ = g.leave_timeout(Duration::from_millis(300));
    }
}
