//! The Amoeba sequencer engine on the real runtime: three nodes in one process over loopback
//! multicast and over unicast only.

mod common;

use common::*;
use rmcast::{EngineChoice, GroupAddr, NodeId, OpenMode};
use rmcast_proto::sequencer::packet::{self, ptype};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

#[test]
fn sequencer_same_order_over_multicast() {
    let r = three_members_same_order(EngineChoice::sequencer(0), |_| GroupAddr::FromName, 300);
    assert_eq!(r.messages, 900);
}

#[test]
fn sequencer_resilient_same_order_over_multicast() {
    let r = three_members_same_order(EngineChoice::sequencer(1), |_| GroupAddr::FromName, 100);
    assert_eq!(r.messages, 300);
}

#[test]
fn sequencer_same_order_over_unicast() {
    let r = three_members_same_order(
        EngineChoice::sequencer(0),
        |addrs| GroupAddr::Unicast(addrs.to_vec()),
        300,
    );
    assert_eq!(r.messages, 900);
}

/// A socket that hears what is multicast to `addr` on loopback, as a member's does.
fn observer(addr: SocketAddr) -> UdpSocket {
    use socket2::{Domain, Protocol, Socket, Type};
    let SocketAddr::V4(addr) = addr else {
        panic!("an IPv4 group")
    };
    let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    sock.set_reuse_address(true).unwrap();
    sock.bind(&SocketAddr::V4(addr).into()).unwrap();
    sock.join_multicast_v4(addr.ip(), &Ipv4Addr::LOCALHOST)
        .unwrap();
    sock.set_nonblocking(true).unwrap();
    sock.into()
}

/// `leave` returns only once the member's last datagram is on the wire: its farewell to the
/// group (a BC_STATE saying it has its leave), which the member left behind, as sequencer,
/// waits for before it may go itself. An application that exits as soon as `leave` returns
/// must not take the farewell with it (the last member then waited out its whole linger, 5 s,
/// and a leave-at-once under load failed). An observer on the group's address finds the
/// farewell queued the moment `leave` returns, every round.
#[test]
fn leave_returns_once_the_farewell_is_on_the_wire() {
    let engine = EngineChoice::sequencer(0);
    for round in 0..20 {
        let name = unique_name("farewell");
        let (a, b) = (node(41), node(42));
        let mut ga = a.open_group(cfg(&name, &engine, OpenMode::Create)).unwrap();
        let mut gb = b.open_group(cfg(&name, &engine, OpenMode::Join)).unwrap();
        let obs = observer(ga.multicast_addr().expect("a multicast group"));
        let (mut sa, mut sb) = (Seen::default(), Seen::default());
        recv_until(&mut ga, &mut sa, Duration::from_secs(10), view_has(2));
        recv_until(&mut gb, &mut sb, Duration::from_secs(10), view_has(2));
        gb.leave().expect("leave");
        let mut buf = vec![0u8; 65536];
        let mut farewell = false;
        while let Ok((n, _)) = obs.recv_from(&mut buf) {
            if let Ok((h, packet::Body::Status { .. })) = packet::decode(&buf[..n]) {
                farewell |= h.ptype == ptype::STATUS && h.sender == NodeId(42);
            }
        }
        assert!(
            farewell,
            "round {round}: leave returned before the farewell was sent"
        );
        ga.leave().expect("leave");
    }
}

/// The group uses its smallest member's datagram size: a member whose path takes 64 KiB
/// datagrams (loopback) creates the group, one whose configuration says 1472 bytes (an
/// Ethernet path) joins, and from then on the first writes no datagram larger than 1472 bytes
/// either (its `info()` says so), while a 20 KB message still arrives whole.
#[test]
fn the_group_writes_datagrams_its_smallest_path_takes() {
    let engine = EngineChoice::sequencer(0);
    let name = unique_name("smallest");
    let (a, b) = (node(51), node(52));
    let mut ga = a.open_group(cfg(&name, &engine, OpenMode::Create)).unwrap();
    assert!(
        ga.info().unwrap().max_datagram_bytes > 60_000,
        "loopback's size"
    );
    let mut small = cfg(&name, &engine, OpenMode::Join);
    small.max_datagram_bytes = Some(1472);
    let mut gb = b.open_group(small).unwrap();
    let obs = observer(ga.multicast_addr().expect("a multicast group"));
    let (mut sa, mut sb) = (Seen::default(), Seen::default());
    recv_until(&mut ga, &mut sa, Duration::from_secs(10), view_has(2));
    recv_until(&mut gb, &mut sb, Duration::from_secs(10), view_has(2));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while ga.info().unwrap().max_datagram_bytes != 1472 {
        assert!(
            std::time::Instant::now() < deadline,
            "the creator still writes {} bytes",
            ga.info().unwrap().max_datagram_bytes
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let big: Vec<u8> = (0..20_000u32).map(|i| i as u8).collect();
    ga.send(big.clone()).expect("send");
    recv_until(&mut gb, &mut sb, Duration::from_secs(10), |s| {
        !s.deliveries.is_empty()
    });
    assert_eq!(sb.deliveries[0].payload[..], big[..]);
    let mut buf = vec![0u8; 65536];
    let mut largest = 0;
    while let Ok((n, _)) = obs.recv_from(&mut buf) {
        largest = largest.max(n);
    }
    assert!(largest > 0, "the observer heard the group");
    assert!(largest <= 1472, "a datagram of {largest} bytes");
    ga.leave().expect("leave");
    gb.leave().expect("leave");
}

/// A group at its member limit refuses a joiner at once: `open_group` fails with
/// `Error::GroupFull` naming the limit, well before the join timeout, and the members go on.
#[test]
fn a_joiner_past_the_member_limit_fails_at_once_with_the_limit() {
    let engine = EngineChoice::sequencer_with(rmcast_proto::sequencer::Config {
        max_members: 2,
        ..rmcast_proto::sequencer::Config::new(0)
    });
    let name = unique_name("full");
    let (a, b, c) = (node(61), node(62), node(63));
    let ga = a.open_group(cfg(&name, &engine, OpenMode::Create)).unwrap();
    let _gb = b.open_group(cfg(&name, &engine, OpenMode::Join)).unwrap();
    let started = std::time::Instant::now();
    let err = c
        .open_group(cfg(&name, &engine, OpenMode::Join).join_timeout(Duration::from_secs(20)))
        .map(|_| ())
        .expect_err("a third member of a group of at most two");
    assert!(
        matches!(err, rmcast::Error::GroupFull { limit: 2 }),
        "refused, naming the limit: {err}"
    );
    assert!(err.to_string().contains("at most 2 members"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "at once, not at the join timeout: {:?}",
        started.elapsed()
    );
    ga.sender().send(&b"still on"[..]).unwrap();
}
