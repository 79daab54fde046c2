//! Unit tests of the RMTP engine on a tiny deterministic network: hosts with hop counts
//! between them (the TTL a datagram arrives with), a fixed latency and seeded loss.

use super::*;
use crate::engine::{Destination, Event, Qos, SendError, Time};
use crate::registry::{EngineParams, EngineSettings, Role};
use crate::testnet::Observer;
use bytes::Bytes;
use std::time::Duration;

const MS: u64 = 1_000_000;

/// How the hosts are made, and the payloads each delivered: the network's [`Observer`].
struct Hosts {
    cfg: TreeConfig,
    stored: bool,
    delivered: Vec<Vec<Bytes>>,
}

impl Observer<Tree> for Hosts {
    fn polled(&mut self, i: usize, _: &mut Tree, events: &[Event]) {
        for e in events {
            if let Event::Deliver(d) = e {
                self.delivered[i].push(d.payload.clone());
            }
        }
    }
}

type Net = crate::testnet::Net<Tree, Hosts>;

fn fast() -> TreeConfig {
    TreeConfig {
        send_window_pkts: 16,
        recv_window_pkts: 32,
        t_send_ms: 10,
        t_retx_ms: 5,
        t_rtt_ms: 50,
        t_sap_ms: 30,
        t_dally_ms: 500,
        packet_size_bytes: 100,
        cache_size_pkts: 64,
        cong_thresh: None,
        child_silence_ms: 300,
        child_stall_ms: 0,
        ..TreeConfig::default()
    }
}

impl Net {
    /// Host 0 (the sender) started; the others are started with [`Net::start`], in order. A
    /// datagram takes 1 ms per link on the way (`hops` routers), and `loss` of them are lost.
    fn new(cfg: TreeConfig, hops: Vec<Vec<u8>>, loss: f64, stored: bool) -> Net {
        let n = hops.len();
        let mut net = Net::with(Hosts {
            cfg,
            stored,
            delivered: vec![Vec::new(); n],
        });
        net.latency = Duration::from_millis(1);
        net.hops = Some(hops);
        if loss > 0.0 {
            let mut rng = 0x1234_5678u64;
            net.drop = Some(Box::new(move |_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                ((rng >> 11) as f64 / (1u64 << 53) as f64) < loss
            }));
        }
        net.start(0);
        net
    }

    fn start(&mut self, i: usize) {
        assert_eq!(i, self.nodes.len(), "hosts start in order");
        let settings = EngineSettings::default();
        let p = EngineParams {
            role: if i == 0 { Role::Create } else { Role::Join },
            group: 7,
            me: NodeId(i as u32),
            max_datagram_bytes: 1472,
            now: self.now,
            seed: i as u64,
            settings: &settings,
        };
        let stored = self.x.stored;
        let store: Option<Box<dyn DataStore>> = stored.then(|| Box::new(MemStore::default()) as _);
        self.add(Box::new(Tree::new(&p, self.x.cfg.clone(), store, stored)));
        self.poll(i);
    }

    /// Runs until `end`, `sender` working on host 0 at every instant.
    fn step_until(&mut self, end: Time, mut sender: impl FnMut(&mut Tree, Time)) {
        if self.now >= end {
            return;
        }
        self.run_until_with(end, |net| {
            if !net.down[0] {
                sender(&mut net.nodes[0], net.now);
            }
        });
    }
}

fn payload(i: u64) -> Bytes {
    Bytes::from(format!("packet {i:06} ").repeat(5))
}

/// A closure that submits `n` packets as fast as the window lets it, then leaves.
fn feed(n: u64, leave: bool) -> impl FnMut(&mut Tree, Time) {
    let mut next = 0;
    let mut left = false;
    move |s, now| {
        while next < n {
            match s.submit(now, payload(next), Qos::SourceOrdered) {
                Ok(_) => next += 1,
                Err(SendError::WouldBlock) => break,
                Err(e) => panic!("{e}"),
            }
        }
        if next == n && leave && !left {
            left = true;
            s.leave(now);
        }
    }
}

fn flat(n: usize, hops: u8) -> Vec<Vec<u8>> {
    (0..n)
        .map(|a| (0..n).map(|b| if a == b { 0 } else { hops }).collect())
        .collect()
}

fn expect_all(net: &Net, n: u64, hosts: impl IntoIterator<Item = usize>) {
    let want: Vec<Bytes> = (0..n).map(payload).collect();
    for i in hosts {
        assert_eq!(net.x.delivered[i].len(), n as usize, "host {i}");
        assert!(net.x.delivered[i] == want, "host {i} delivered other bytes");
    }
}

fn counter(t: &Tree, name: &str) -> u64 {
    t.engine_counters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, v)| v)
}

#[test]
fn every_receiver_gets_every_packet_in_order_without_loss() {
    let mut net = Net::new(fast(), flat(4, 1), 0.0, true);
    for i in 1..4 {
        net.start(i);
    }
    net.step_until(Time(2_000 * MS), feed(200, false));
    expect_all(&net, 200, 0..4);
    let s = &net.nodes[0];
    assert_eq!(s.counters().retransmissions, 0);
    // Every send completed once the receivers acknowledged it.
    let done = net.events[0]
        .iter()
        .filter(|e| matches!(e, Event::SendComplete { .. }))
        .count();
    assert_eq!(done, 200);
}

#[test]
fn losses_are_repaired_and_memory_stays_within_the_cache() {
    let mut net = Net::new(fast(), flat(5, 1), 0.2, true);
    for i in 1..5 {
        net.start(i);
    }
    let mut most = 0;
    let mut f = feed(300, true);
    net.step_until(Time(20_000 * MS), |s, now| {
        f(s, now);
        most = most.max(s.info().buffered_msgs);
    });
    expect_all(&net, 300, 0..5);
    assert!(most <= 64, "cache held {most} packets in memory");
    let s = &net.nodes[0];
    assert!(s.counters().retransmissions > 0);
    assert!(counter(s, "slow_starts") >= 1);
}

#[test]
fn a_late_joiner_catches_up_from_the_cache_with_ack_txnow() {
    let mut net = Net::new(fast(), flat(3, 1), 0.0, true);
    net.start(1);
    let mut f = feed(400, false);
    let mut joined = false;
    let mut t = 0;
    while t < 6_000 {
        t += 50;
        net.step_until(Time(t * MS), &mut f);
        if t >= 1_000 && !joined {
            joined = true;
            net.start(2);
        }
    }
    expect_all(&net, 400, 0..3);
    let late = &net.nodes[2];
    assert!(counter(late, "txnow_sent") >= 1);
    let s = &net.nodes[0];
    assert!(counter(s, "txnow_received") >= 1);
    assert!(
        counter(s, "cache_spilled") > 0,
        "the cache spilled to the store"
    );
}

#[test]
fn without_a_store_a_late_joiner_is_told_what_is_gone() {
    let mut net = Net::new(fast(), flat(3, 1), 0.0, false);
    net.start(1);
    let mut f = feed(300, false);
    let mut t = 0;
    while t < 6_000 {
        t += 50;
        net.step_until(Time(t * MS), &mut f);
        if t == 2_000 {
            net.start(2);
        }
    }
    let lost: u64 = net.events[2]
        .iter()
        .filter_map(|e| match e {
            Event::Loss(l) => Some(l.count),
            _ => None,
        })
        .sum();
    assert!(lost > 0);
    assert_eq!(lost + net.x.delivered[2].len() as u64, 300);
    let g = net.nodes[2].guarantees();
    assert_eq!(g.delivery, crate::DeliveryPromise::Probabilistic);
    expect_all(&net, 300, 0..2);
}

/// Fig. 9 in small: the sender (0) far from two areas; area A holds DR 1 and receivers 2, 3;
/// area B holds DR 4 and receiver 5. Routers: 3 hops to each area, 0 inside it.
fn areas() -> Vec<Vec<u8>> {
    let area = |i: usize| match i {
        0 => 0,
        1..=3 => 1,
        _ => 2,
    };
    (0..6)
        .map(|a| {
            (0..6)
                .map(|b| match (area(a), area(b)) {
                    (x, y) if x == y => 0,
                    (0, _) | (_, 0) => 3,
                    _ => 6,
                })
                .collect()
        })
        .collect()
}

#[test]
fn receivers_choose_the_nearest_dr_and_drs_repair_their_area() {
    let cfg = TreeConfig {
        designated_receivers: vec![NodeId(1), NodeId(4)],
        mcast_thresh: 1,
        ..fast()
    };
    let mut net = Net::new(cfg, areas(), 0.1, true);
    for i in 1..6 {
        net.start(i);
    }
    net.step_until(Time(15_000 * MS), feed(300, true));
    expect_all(&net, 300, 0..6);
    let ap = |i: usize| counter(&net.nodes[i], "ap");
    assert_eq!((ap(1), ap(4)), (0, 0), "DRs report to the sender");
    assert_eq!(
        (ap(2), ap(3), ap(5)),
        (1, 1, 4),
        "receivers report to their DR"
    );
    for dr in [1, 4] {
        let e = &net.nodes[dr];
        assert!(e.counters().retransmissions > 0, "DR {dr} repaired");
        assert_eq!(e.entity(), Entity::Designated);
        assert_eq!(counter(e, "level"), 1);
    }
    let scoped: u64 = [1, 4]
        .iter()
        .map(|&i| counter(&net.nodes[i], "retx_scoped"))
        .sum();
    assert!(scoped > 0, "repairs to many went to the DR's area only");
}

#[test]
fn a_dr_behind_a_dr_is_a_second_level() {
    // 0: sender; 1: DR one router away; 2: DR two routers behind 1; 3: receiver next to 2.
    let d = [[0, 2, 4, 4], [2, 0, 2, 2], [4, 2, 0, 0], [4, 2, 0, 0]];
    let hops = d.iter().map(|r| r.to_vec()).collect();
    let cfg = TreeConfig {
        designated_receivers: vec![NodeId(1), NodeId(2)],
        ..fast()
    };
    let mut net = Net::new(cfg, hops, 0.05, true);
    for i in 1..4 {
        net.start(i);
    }
    net.step_until(Time(10_000 * MS), feed(200, true));
    expect_all(&net, 200, 0..4);
    let c = |i: usize, n: &str| counter(&net.nodes[i], n);
    assert_eq!((c(1, "ap"), c(2, "ap"), c(3, "ap")), (0, 1, 2));
    assert_eq!((c(1, "level"), c(2, "level")), (1, 2));
}

#[test]
fn the_sender_ends_after_t_dally_and_receivers_stop_acking() {
    let mut net = Net::new(fast(), flat(3, 1), 0.0, true);
    net.start(1);
    net.start(2);
    net.step_until(Time(5_000 * MS), feed(50, true));
    expect_all(&net, 50, 0..3);
    assert!(
        net.events[0].contains(&Event::Left),
        "sender dallied then ended"
    );
    for i in 1..3 {
        let r = &net.nodes[i];
        assert_eq!(r.poll_timeout(), None, "receiver {i} is quiet");
    }
}

#[test]
fn reset_closes_every_receiver() {
    let mut net = Net::new(fast(), flat(3, 1), 0.0, true);
    net.start(1);
    net.start(2);
    let mut f = feed(1000, false);
    net.step_until(Time(300 * MS), &mut f);
    let now = net.now;
    net.nodes[0].abort(now);
    net.poll(0);
    net.step_until(Time(400 * MS), |_, _| {});
    for i in 0..3 {
        assert!(net.events[i].contains(&Event::Left), "host {i}");
    }
}

#[test]
fn a_full_window_pushes_back() {
    let mut net = Net::new(fast(), flat(2, 1), 0.0, true);
    let s = &mut net.nodes[0];
    let mut ok = 0;
    while s.submit(Time::ZERO, payload(ok), Qos::Reliable).is_ok() {
        ok += 1;
    }
    assert_eq!(ok, 16, "W_s packets ahead of swin_lb");
    assert_eq!(
        s.submit(Time::ZERO, payload(0), Qos::Reliable),
        Err(SendError::WouldBlock)
    );
    assert!(!s.can_submit());
    assert_eq!(
        s.submit(Time::ZERO, Bytes::from(vec![0; 101]), Qos::Reliable),
        Err(SendError::WouldBlock).or(Err(SendError::TooLarge))
    );
    assert_eq!(
        s.submit(Time::ZERO, payload(0), Qos::TotallyOrdered),
        Err(SendError::Unsupported)
    );
    let r = net.nodes.get(1);
    assert!(r.is_none());
}

#[test]
fn malformed_datagrams_are_counted_never_a_panic() {
    let mut net = Net::new(fast(), flat(2, 1), 0.0, true);
    net.start(1);
    let r = &mut net.nodes[1];
    let mut x = 99u64;
    for len in 0..200 {
        let mut d: Vec<u8> = (0..len)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                (x >> 33) as u8
            })
            .collect();
        r.handle_datagram(Time::ZERO, NodeId(0), &d);
        // A valid header with a garbage body.
        let mut h = Vec::new();
        crate::wire::Header {
            engine: crate::wire::EngineKind::Tree,
            ptype: (len % 11) as u8,
            flags: 0,
            group: 7,
            incarnation: 0,
            sender: NodeId(0),
        }
        .encode(&mut h);
        h.append(&mut d);
        r.handle_datagram_with_ttl(Time::ZERO, NodeId(0), &h, Some(3));
    }
    assert!(r.counters().malformed_dropped > 100);
}

#[test]
fn the_registry_offers_tree_with_honest_guarantees() {
    let f = crate::catalog::find("tree").expect("registered");
    let g = f.guarantees(&EngineSettings::default());
    assert_eq!(g.senders, crate::Senders::Creator);
    assert_eq!(g.order, crate::Order::Fifo);
    assert!(!g.virtual_synchrony && !g.crash_recovery);
    let stored = TreeFactory::new(fast()).with_store(std::sync::Arc::new(|_, _| {
        Box::new(MemStore::default()) as Box<dyn DataStore>
    }));
    assert!(stored
        .guarantees(&EngineSettings::default())
        .all_or_nothing());
    assert!(f.validate(&EngineSettings::default(), 1472).is_ok());
    assert!(f.validate(&EngineSettings::default(), 100).is_err());
    let _ = Duration::ZERO;
}

#[test]
fn leaving_receivers_are_forgotten_at_once_not_after_their_silence() {
    let mut net = Net::new(fast(), flat(4, 1), 0.0, true);
    for i in 1..4 {
        net.start(i);
    }
    // Receiver 3 hears part of the stream and leaves halfway (left early); 1 and 2 finish.
    let mut f = feed(300, false);
    net.step_until(Time(50 * MS), &mut f);
    net.down[3] = true;
    net.step_until(Time(100 * MS), &mut f);
    net.down[3] = false;
    net.nodes[3].leave(net.now);
    net.poll(3);
    let mut t = 100;
    while net.x.delivered[1..3].iter().any(|d| d.len() < 300) && t < 5_000 {
        t += 5;
        net.step_until(Time(t * MS), &mut f);
    }
    expect_all(&net, 300, 0..3);
    for i in 1..3 {
        net.nodes[i].leave(net.now);
        net.poll(i);
    }
    // Well within child_silence_ms (300 ms): only ACK_FIN can have told the sender.
    net.step_until(Time((t + 10) * MS), &mut f);
    let s = &net.nodes[0];
    assert_eq!(counter(s, "children"), 0);
    assert_eq!(counter(s, "children_done"), 2);
    assert_eq!(counter(s, "children_left"), 1);
    assert_eq!(counter(s, "children_silent"), 0);
}

#[test]
fn a_repair_goes_out_before_new_data_already_queued() {
    let cfg = TreeConfig {
        send_window_pkts: 64,
        cache_size_pkts: 64,
        ..fast()
    };
    let mut net = Net::new(cfg, flat(2, 1), 0.0, true);
    let s = &mut net.nodes[0];
    for i in 0..64 {
        s.submit(Time::ZERO, payload(i), Qos::SourceOrdered)
            .unwrap();
    }
    // T_send ticks queue new data; nobody drains it yet.
    for k in 0..8 {
        s.handle_timeout(Time(k * 10 * MS));
    }
    let mut ack = Vec::new();
    crate::wire::Header {
        engine: crate::wire::EngineKind::Tree,
        ptype: packet::ACK_TXNOW,
        flags: 0,
        group: 7,
        incarnation: 0,
        sender: NodeId(1),
    }
    .encode(&mut ack);
    packet::Packet::Ack {
        txnow: true,
        l: 0,
        nbits: 1,
        bits: &[0],
    }
    .encode(&mut ack);
    s.handle_datagram_with_ttl(Time(80 * MS), NodeId(1), &ack, Some(63));
    let mut buf = Vec::new();
    let mut order = Vec::new();
    while let Some(t) = s.poll_transmit(Time(80 * MS), &mut buf) {
        order.push(t.destination);
    }
    let repair = order
        .iter()
        .position(|d| *d == Destination::Peer(NodeId(1)))
        .expect("the repair was sent");
    let data_after = order[repair..]
        .iter()
        .filter(|d| **d == Destination::Group)
        .count();
    assert_eq!(repair, 0, "queued first: {order:?}");
    assert!(data_after > 1, "no new data was queued: {order:?}");
}

#[test]
fn another_node_forging_the_sessions_data_is_ignored() {
    let mut net = Net::new(fast(), flat(3, 1), 0.0, true);
    for i in 1..3 {
        net.start(i);
    }
    // Node 9 (a key holder) forges DATA and DATA_EOF naming host 0 as their origin, and
    // advertises itself as the top of the tree: before the session starts, and during it.
    let forge = |net: &mut Net| {
        let mut forged = Vec::new();
        for seq in 0..40u64 {
            let mut b = Vec::new();
            crate::wire::Header {
                engine: crate::wire::EngineKind::Tree,
                ptype: packet::DATA,
                flags: 0,
                group: 7,
                incarnation: 0,
                sender: NodeId(9),
            }
            .encode(&mut b);
            b.extend(0u32.to_be_bytes());
            b.extend(seq.to_be_bytes());
            b.extend_from_slice(b"forged");
            forged.push(b);
        }
        let mut eof = Vec::new();
        crate::wire::Header {
            engine: crate::wire::EngineKind::Tree,
            ptype: packet::DATA_EOF,
            flags: 0,
            group: 7,
            incarnation: 0,
            sender: NodeId(9),
        }
        .encode(&mut eof);
        eof.extend(0u32.to_be_bytes());
        eof.extend(3u64.to_be_bytes());
        forged.push(eof);
        for i in 1..3 {
            for d in &forged {
                let now = net.now;
                net.nodes[i].handle_datagram(now, NodeId(9), d);
            }
            net.poll(i);
        }
    };
    forge(&mut net);
    let mut f = feed(100, false);
    net.step_until(Time(200 * MS), &mut f);
    forge(&mut net);
    net.step_until(Time(3_000 * MS), &mut f);
    expect_all(&net, 100, 0..3);
    for i in 1..3 {
        assert_eq!(
            counter(&net.nodes[i], "not_from_origin"),
            2 * 41,
            "host {i}"
        );
    }
}

/// A receiver past what its ACK processor keeps is refused at once, naming the limit (it would
/// otherwise ACK for ever into a processor that drops its ACKs), and gives up when no other
/// ACK processor is left; the receivers within the limit get every packet.
#[test]
fn a_receiver_past_the_children_limit_is_refused_at_once_naming_the_limit() {
    let cfg = TreeConfig {
        max_children: 2,
        ..fast()
    };
    let mut net = Net::new(cfg, flat(4, 1), 0.0, true);
    for i in 1..4 {
        net.start(i);
    }
    let mut f = feed(20, false);
    net.step_until(Time(500 * MS), &mut f);
    let refused: Vec<usize> = (1..4)
        .filter(|&i| {
            net.events[i].iter().any(|e| {
                matches!(
                    e,
                    Event::Recovery(crate::engine::Recovery::Refused { limit: 2 })
                )
            })
        })
        .collect();
    assert_eq!(refused.len(), 1, "one receiver past the limit: {refused:?}");
    let r = refused[0];
    // At once: its first ACK was answered (well within the run above, a T_ack or two).
    net.step_until(Time(3_000 * MS), &mut f);
    expect_all(&net, 20, (1..4).filter(|&i| i != r));
    assert!(counter(&net.nodes[0], "children_refused") >= 1);
}
