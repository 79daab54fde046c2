//! Unit tests of the RMTP engine on a tiny deterministic network: hosts with hop counts
//! between them (the TTL a datagram arrives with), a fixed latency and seeded loss.

use super::*;
use crate::engine::{Destination, Event, Qos, SendError, Time};
use crate::registry::{EngineParams, EngineSettings, Role};
use bytes::Bytes;
use std::collections::BinaryHeap;
use std::time::Duration;

const MS: u64 = 1_000_000;

/// A datagram on its way: (arrival ns, order, to, from, bytes, TTL), earliest first.
type Flight = std::cmp::Reverse<(u64, u64, usize, usize, Vec<u8>, Option<u8>)>;

struct Net {
    engines: Vec<Option<Tree>>,
    /// hops[a][b]: routers between a and b.
    hops: Vec<Vec<u8>>,
    loss: f64,
    rng: u64,
    now: Time,
    queue: BinaryHeap<Flight>,
    order: u64,
    delivered: Vec<Vec<Bytes>>,
    events: Vec<Vec<Event>>,
    cfg: TreeConfig,
    stored: bool,
}

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
    fn new(cfg: TreeConfig, hops: Vec<Vec<u8>>, loss: f64, stored: bool) -> Net {
        let n = hops.len();
        let mut net = Net {
            engines: (0..n).map(|_| None).collect(),
            hops,
            loss,
            rng: 0x1234_5678,
            now: Time::ZERO,
            queue: BinaryHeap::new(),
            order: 0,
            delivered: vec![Vec::new(); n],
            events: vec![Vec::new(); n],
            cfg,
            stored,
        };
        net.start(0);
        net
    }

    fn start(&mut self, i: usize) {
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
        let store: Option<Box<dyn DataStore>> =
            self.stored.then(|| Box::new(MemStore::default()) as _);
        self.engines[i] = Some(Tree::new(&p, self.cfg.clone(), store, self.stored));
        self.flush(i);
    }

    fn rand(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    fn put(&mut self, from: usize, to: usize, data: &[u8], ttl0: u8) {
        let hops = self.hops[from][to];
        if hops >= ttl0 || self.engines[to].is_none() {
            return;
        }
        if self.loss > 0.0 && self.rand() < self.loss {
            return;
        }
        self.order += 1;
        let at = self.now.0 + MS * (1 + hops as u64);
        self.queue.push(std::cmp::Reverse((
            at,
            self.order,
            to,
            from,
            data.to_vec(),
            Some(ttl0 - hops),
        )));
    }

    fn flush(&mut self, i: usize) {
        let now = self.now;
        let mut buf = Vec::new();
        loop {
            let Some(e) = self.engines[i].as_mut() else {
                return;
            };
            let Some(t) = e.poll_transmit(now, &mut buf) else {
                break;
            };
            let data = buf.clone();
            match t.destination {
                Destination::Group => {
                    for to in 0..self.engines.len() {
                        if to != i {
                            self.put(i, to, &data, 64);
                        }
                    }
                }
                Destination::Scoped { ttl } => {
                    for to in 0..self.engines.len() {
                        if to != i {
                            self.put(i, to, &data, ttl);
                        }
                    }
                }
                Destination::Peer(p) => self.put(i, p.0 as usize, &data, 64),
            }
        }
        let e = self.engines[i].as_mut().expect("running");
        while let Some(ev) = e.poll_event() {
            if let Event::Deliver(d) = &ev {
                self.delivered[i].push(d.payload.clone());
            }
            self.events[i].push(ev);
        }
    }

    fn step_until(&mut self, end: Time, mut sender: impl FnMut(&mut Tree, Time)) {
        while self.now < end {
            // Next instant: a datagram or a timer.
            let timer = (0..self.engines.len())
                .filter_map(|i| Some((self.engines[i].as_ref()?.poll_timeout()?, i)))
                .min();
            let dgram = self.queue.peek().map(|r| r.0 .0);
            let next = match (timer, dgram) {
                (Some((t, _)), Some(d)) => t.0.min(d),
                (Some((t, _)), None) => t.0,
                (None, Some(d)) => d,
                (None, None) => end.0,
            }
            .max(self.now.0)
            .min(end.0);
            self.now = Time(next);
            if let Some(s) = self.engines[0].as_mut() {
                sender(s, self.now);
            }
            self.flush(0);
            while self.queue.peek().is_some_and(|r| r.0 .0 <= next) {
                let std::cmp::Reverse((_, _, to, from, data, ttl)) =
                    self.queue.pop().expect("peeked");
                if let Some(e) = self.engines[to].as_mut() {
                    e.handle_datagram_with_ttl(self.now, NodeId(from as u32), &data, ttl);
                    self.flush(to);
                }
            }
            for i in 0..self.engines.len() {
                let due = self.engines[i]
                    .as_ref()
                    .and_then(|e| e.poll_timeout())
                    .is_some_and(|t| t <= self.now);
                if due {
                    self.engines[i]
                        .as_mut()
                        .expect("running")
                        .handle_timeout(self.now);
                    self.flush(i);
                }
            }
        }
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
        assert_eq!(net.delivered[i].len(), n as usize, "host {i}");
        assert!(net.delivered[i] == want, "host {i} delivered other bytes");
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
    let s = net.engines[0].as_ref().unwrap();
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
    let s = net.engines[0].as_ref().unwrap();
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
    let late = net.engines[2].as_ref().unwrap();
    assert!(counter(late, "txnow_sent") >= 1);
    let s = net.engines[0].as_ref().unwrap();
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
    assert_eq!(lost + net.delivered[2].len() as u64, 300);
    let g = net.engines[2].as_ref().unwrap().guarantees();
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
    let ap = |i: usize| counter(net.engines[i].as_ref().unwrap(), "ap");
    assert_eq!((ap(1), ap(4)), (0, 0), "DRs report to the sender");
    assert_eq!(
        (ap(2), ap(3), ap(5)),
        (1, 1, 4),
        "receivers report to their DR"
    );
    for dr in [1, 4] {
        let e = net.engines[dr].as_ref().unwrap();
        assert!(e.counters().retransmissions > 0, "DR {dr} repaired");
        assert_eq!(e.entity(), Entity::Designated);
        assert_eq!(counter(e, "level"), 1);
    }
    let scoped: u64 = [1, 4]
        .iter()
        .map(|&i| counter(net.engines[i].as_ref().unwrap(), "retx_scoped"))
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
    let c = |i: usize, n: &str| counter(net.engines[i].as_ref().unwrap(), n);
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
        let r = net.engines[i].as_ref().unwrap();
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
    net.engines[0].as_mut().unwrap().abort(now);
    net.flush(0);
    net.step_until(Time(400 * MS), |_, _| {});
    for i in 0..3 {
        assert!(net.events[i].contains(&Event::Left), "host {i}");
    }
}

#[test]
fn a_full_window_pushes_back() {
    let mut net = Net::new(fast(), flat(2, 1), 0.0, true);
    let s = net.engines[0].as_mut().unwrap();
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
    let r = net.engines[1].as_mut();
    assert!(r.is_none());
}

#[test]
fn malformed_datagrams_are_counted_never_a_panic() {
    let mut net = Net::new(fast(), flat(2, 1), 0.0, true);
    net.start(1);
    let r = net.engines[1].as_mut().unwrap();
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
    let r3 = net.engines[3].take();
    net.step_until(Time(100 * MS), &mut f);
    net.engines[3] = r3;
    net.engines[3].as_mut().unwrap().leave(net.now);
    net.flush(3);
    let mut t = 100;
    while net.delivered[1..3].iter().any(|d| d.len() < 300) && t < 5_000 {
        t += 5;
        net.step_until(Time(t * MS), &mut f);
    }
    expect_all(&net, 300, 0..3);
    for i in 1..3 {
        net.engines[i].as_mut().unwrap().leave(net.now);
        net.flush(i);
    }
    // Well within child_silence_ms (300 ms): only ACK_FIN can have told the sender.
    net.step_until(Time((t + 10) * MS), &mut f);
    let s = net.engines[0].as_ref().unwrap();
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
    let s = net.engines[0].as_mut().unwrap();
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
