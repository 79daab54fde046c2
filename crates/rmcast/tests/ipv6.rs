//! The runtime over IPv6 on the loopback interface (`::1`): three nodes in one process deliver
//! in one total order, by multicast where this host routes IPv6 multicast on loopback and by
//! unicast everywhere `::1` exists.
//!
//! Linux turns any route through `lo` to a non-loopback prefix into a reject route unless it is
//! of type `local`, and installs its only `ff00::/8` route on the first multicast-capable
//! interface, so by default a socket whose multicast interface is `lo` gets `ENETUNREACH` and
//! the multicast test skips (saying why). It runs where `ff00::/8` is routed as local on `lo`,
//! e.g. in a network namespace of its own (docs/ARCHITECTURE.md, section 3, has the commands):
//!
//! ```sh
//! ip netns add rmcast-v6test
//! ip netns exec rmcast-v6test ip link set lo up
//! ip netns exec rmcast-v6test ip -6 route add local ff00::/8 dev lo table local
//! ip netns exec rmcast-v6test cargo test -p rmcast --test ipv6
//! ip netns del rmcast-v6test
//! ```

mod common;

use common::*;
use rmcast::{EngineChoice, GroupAddr, GroupConfig, Node, NodeConfig, OpenMode};
use socket2::{Domain, Protocol, Socket, Type};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::time::Duration;

/// The node configuration of these tests: interface `::1`, hop limit 0 (this host only).
fn v6_node() -> NodeConfig {
    NodeConfig::default().interface(Ipv6Addr::LOCALHOST)
}

/// The index of the interface that holds `::1`, or why there is none.
fn loopback_index() -> Result<u32, String> {
    // Binding `::1` fails where the host has no IPv6 loopback.
    std::net::UdpSocket::bind("[::1]:0").map_err(|e| format!("cannot bind [::1]: {e}"))?;
    // Linux names it `lo`, the BSDs and macOS `lo0`.
    ["lo", "lo0"]
        .into_iter()
        .find_map(rmcast::interface_index)
        .ok_or_else(|| "no loopback interface (lo, lo0) found".to_string())
}

/// Whether a datagram multicast on the loopback interface over IPv6 comes back to a socket
/// joined there; `Err` says why not. The probe's sender names the interface explicitly, as the
/// runtime does, so that nothing leaves by another interface.
fn ipv6_loopback_multicast() -> Result<(), String> {
    let index = loopback_index()?;
    let group: Ipv6Addr = "ff18::4d43:7631".parse().unwrap();
    let rx =
        Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP)).map_err(|e| e.to_string())?;
    rx.set_only_v6(true).map_err(|e| e.to_string())?;
    rx.bind(&SocketAddr::V6(SocketAddrV6::new(group, 0, 0, index)).into())
        .map_err(|e| format!("binding the probe's group address: {e}"))?;
    let port = rx
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .map(|a| a.port())
        .ok_or("no port")?;
    rx.join_multicast_v6(&group, index)
        .map_err(|e| format!("IPV6_JOIN_GROUP on interface {index}: {e}"))?;
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .map_err(|e| e.to_string())?;
    let tx =
        Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP)).map_err(|e| e.to_string())?;
    tx.set_multicast_if_v6(index).map_err(|e| e.to_string())?;
    tx.set_multicast_hops_v6(0).map_err(|e| e.to_string())?;
    tx.set_multicast_loop_v6(true).map_err(|e| e.to_string())?;
    tx.bind(&SocketAddr::from((Ipv6Addr::LOCALHOST, 0)).into())
        .map_err(|e| e.to_string())?;
    let to = SocketAddr::V6(SocketAddrV6::new(group, port, 0, index));
    tx.send_to(b"probe", &to.into()).map_err(|e| {
        format!(
            "sending to {group} on interface {index}: {e} (no route for IPv6 multicast on \
             loopback: the kernel's ff00::/8 route is on another interface)"
        )
    })?;
    let mut buf = [std::mem::MaybeUninit::new(0u8); 16];
    match rx.recv(&mut buf) {
        Ok(5) => Ok(()),
        Ok(n) => Err(format!("the probe came back as {n} bytes")),
        Err(e) => Err(format!("the probe multicast on ::1 did not come back: {e}")),
    }
}

/// Three nodes on `::1` open a group at the name's IPv6 address (ff18::/96), each streams
/// messages, and all deliver the same messages in the same order (the logs verified).
#[test]
fn three_members_in_total_order_over_ipv6_multicast_on_loopback() {
    if let Err(why) = ipv6_loopback_multicast() {
        eprintln!("skipped: IPv6 multicast on loopback is not available here: {why}");
        return;
    }
    let r = three_members_same_order_on(
        v6_node(),
        EngineChoice::sequencer(0),
        |addrs| {
            for a in addrs {
                assert_eq!(a.ip(), IpAddr::V6(Ipv6Addr::LOCALHOST), "{a}");
            }
            GroupAddr::FromName
        },
        200,
    );
    assert_eq!(r.messages, 600);
}

/// The same over unicast to the three nodes' `[::1]:port` addresses: IPv6 sockets, the
/// batched calls with IPv6 addresses, and peers learnt from IPv6 sources, on any host with
/// `::1` (no multicast route needed).
#[test]
fn three_members_in_total_order_over_ipv6_unicast() {
    if let Err(why) = loopback_index() {
        eprintln!("skipped: no IPv6 loopback here: {why}");
        return;
    }
    let r = three_members_same_order_on(
        v6_node(),
        EngineChoice::sequencer(0),
        |addrs| GroupAddr::unicast(addrs.iter().copied()),
        200,
    );
    assert_eq!(r.messages, 600);
}

/// A node on `::1` takes the name's address in its own family, and the group reports it; the
/// datagram size leaves room for the IPv6 header; a socket joined to that address on the
/// loopback interface hears the node's multicast, sent from the node's `[::1]` address.
#[test]
fn an_ipv6_node_multicasts_to_the_names_ipv6_address() {
    if let Err(why) = ipv6_loopback_multicast() {
        eprintln!("skipped: IPv6 multicast on loopback is not available here: {why}");
        return;
    }
    let index = loopback_index().unwrap();
    let n = Node::new(v6_node()).unwrap();
    let name = unique_name("v6addr");
    let want = GroupConfig::new(&name)
        .multicast_addr_for(IpAddr::V6(Ipv6Addr::LOCALHOST))
        .unwrap();
    let SocketAddr::V6(group) = want else {
        panic!("{want}: not IPv6")
    };
    assert_eq!(group.ip().segments()[0], 0xff18);
    let obs = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    obs.set_reuse_address(true).unwrap();
    obs.set_only_v6(true).unwrap();
    obs.bind(&SocketAddr::V6(SocketAddrV6::new(*group.ip(), group.port(), 0, index)).into())
        .unwrap();
    obs.join_multicast_v6(group.ip(), index).unwrap();
    obs.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let g = n
        .open_group(GroupConfig::new(&name).mode(OpenMode::Create))
        .unwrap();
    assert_eq!(g.multicast_addr(), Some(want));
    assert_eq!(n.local_addr().ip(), IpAddr::V6(Ipv6Addr::LOCALHOST));
    assert!(
        g.max_datagram_bytes() <= 65_536 - 48,
        "{}",
        g.max_datagram_bytes()
    );
    g.send("to the group").unwrap();
    let mut buf = vec![std::mem::MaybeUninit::new(0u8); 65_536];
    let (len, from) = obs
        .recv_from(&mut buf)
        .expect("the node's multicast is heard");
    assert!(len > 0);
    assert_eq!(from.as_socket(), Some(n.local_addr()));
    g.leave().unwrap();
}

/// Addresses of the other family are refused with the field named, before any socket is
/// opened; an IPv6 node on `::` (no interface holds it) refuses multicast without an index
/// rather than let the routing table choose the interface.
#[test]
fn families_do_not_mix_and_ipv6_multicast_needs_an_interface() {
    if let Err(why) = loopback_index() {
        eprintln!("skipped: no IPv6 loopback here: {why}");
        return;
    }
    let v6 = Node::new(v6_node()).unwrap();
    let e = v6
        .open_group(
            GroupConfig::new(unique_name("mix"))
                .mode(OpenMode::Create)
                .addr(GroupAddr::multicast(([239, 1, 2, 3], 7400))),
        )
        .unwrap_err();
    assert!(e.to_string().contains("address family"), "{e}");
    let v4 = node(7);
    let e = v4
        .open_group(
            GroupConfig::new(unique_name("mix"))
                .mode(OpenMode::Create)
                .addr(GroupAddr::unicast(["[::1]:7400"
                    .parse::<SocketAddr>()
                    .unwrap()])),
        )
        .unwrap_err();
    assert!(e.to_string().contains("address family"), "{e}");
    let any = Node::new(NodeConfig::default().interface(Ipv6Addr::UNSPECIFIED)).unwrap();
    let e = any
        .open_group(GroupConfig::new(unique_name("any")).mode(OpenMode::Create))
        .unwrap_err();
    assert!(e.to_string().contains("interface_index"), "{e}");
    // Unicast needs no multicast interface.
    any.open_group(
        GroupConfig::new(unique_name("any"))
            .mode(OpenMode::Create)
            .addr(GroupAddr::unicast(["[::1]:9"
                .parse::<SocketAddr>()
                .unwrap()])),
    )
    .unwrap()
    .leave()
    .unwrap();
}
