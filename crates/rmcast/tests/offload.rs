//! Segmentation offload on real loopback sockets: members that send runs of datagrams in one
//! `UDP_SEGMENT` send and receive them whole (`UDP_GRO`) deliver exactly what was sent, in one
//! order, keyed (each datagram opened alone) and not, by multicast and by unicast; and so do
//! members whose receive offload is off (the kernel cuts the runs for them).

mod common;

use common::*;
use rmcast::{EngineChoice, GroupAddr, GroupKey, Keyring, NodeConfig, NodeId};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Messages the one sender streams; 1,000 bytes each, so that every datagram of 1,472 bytes
/// carries one and consecutive ones are of one size (the runs offload sends).
const MESSAGES: usize = 3000;

/// Three members with segmentation offload on and receive offload as `gro` (`None`: the
/// default, which follows segmentation offload), `engine`,
/// datagrams of 1,472 bytes, keyed or not, at the address `addr` makes of the nodes'
/// addresses; member 101 streams [`MESSAGES`] messages.
/// Checks that every member delivers all of them, as sent, in one order; returns how many
/// datagrams the members received several to one receive.
fn stream(
    engine: EngineChoice,
    keys: Option<Keyring>,
    gro: Option<bool>,
    addr: impl Fn(&[SocketAddr]) -> GroupAddr,
) -> u64 {
    let (nodes, mut groups, mut seen) = three_groups(
        |id| {
            let mut c = NodeConfig::default()
                .id(NodeId(id))
                .segmentation_offload(true);
            c.receive_offload = gro;
            c
        },
        &engine,
        addr,
        |c| {
            let c = c.max_datagram_bytes(1472);
            match &keys {
                Some(k) => c.keys(k.clone()),
                None => c,
            }
        },
    );
    let payload = |k: usize| {
        let mut p = format!("{k:08}").into_bytes();
        p.resize(1000, (k % 251) as u8);
        p
    };
    let sender = groups[0].sender();
    let t = std::thread::spawn(move || {
        for k in 0..MESSAGES {
            sender.send_nowait(payload(k)).expect("send");
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.iter().any(|s| s.deliveries.len() < MESSAGES) {
        for (g, s) in groups.iter_mut().zip(seen.iter_mut()) {
            while let Ok(Some(ev)) = g.try_recv() {
                s.record(g.me(), ev);
            }
        }
        assert!(
            Instant::now() < deadline,
            "timed out: delivered {:?} of {MESSAGES}",
            seen.iter().map(|s| s.deliveries.len()).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    t.join().unwrap();
    for s in &seen {
        let got: Vec<&[u8]> = s.deliveries.iter().map(|d| &d.payload[..]).collect();
        let want: Vec<Vec<u8>> = (0..MESSAGES).map(payload).collect();
        assert_eq!(got, want.iter().map(|p| &p[..]).collect::<Vec<_>>());
        assert!(s.deliveries.iter().all(|d| d.sender == NodeId(101)));
    }
    for n in &nodes {
        let c = n.counters();
        assert_eq!(c.malformed, 0);
        assert_eq!(c.recv_errors, 0);
    }
    let coalesced = nodes.iter().map(|n| n.counters().datagrams_coalesced).sum();
    for g in groups.iter().rev() {
        g.leave().expect("leave");
    }
    coalesced
}

#[test]
fn a_keyed_sequencer_group_delivers_with_offload_by_multicast() {
    let keys = Keyring::new(GroupKey::generate().unwrap());
    // Receive offload left to its default: on with segmentation offload.
    let coalesced = stream(EngineChoice::sequencer(0), Some(keys), None, |_| {
        GroupAddr::FromName
    });
    assert!(coalesced > 0, "no receive held a run");
}

#[test]
fn a_keyed_ring_group_delivers_with_offload_by_multicast() {
    let keys = Keyring::new(GroupKey::generate().unwrap());
    let engine = EngineChoice::named("ring").expect("ring engine");
    let coalesced = stream(engine, Some(keys), Some(true), |_| GroupAddr::FromName);
    assert!(coalesced > 0, "no receive held a run");
}

#[test]
fn a_sequencer_group_delivers_with_offload_by_unicast() {
    let coalesced = stream(EngineChoice::sequencer(0), None, Some(true), |addrs| {
        GroupAddr::unicast(addrs.iter().copied())
    });
    assert!(coalesced > 0, "no receive held a run");
}

#[test]
fn receivers_without_receive_offload_get_segmented_runs_one_datagram_a_receive() {
    let keys = Keyring::new(GroupKey::generate().unwrap());
    let coalesced = stream(EngineChoice::sequencer(0), Some(keys), Some(false), |_| {
        GroupAddr::FromName
    });
    assert_eq!(coalesced, 0);
}
