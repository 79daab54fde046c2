//! Gossip groups on a tiny instant network: a multicast lost in the first phase is recovered by
//! gossip, delivery is FIFO per sender whatever the arrival order, garbage collection keeps
//! buffers bounded (stability early, age otherwise), a message nobody can give any more is
//! reported lost and delivery goes on, sends push back on a full own buffer, the membership
//! spreads and settles, a silent member leaves the view, and malformed datagrams are counted.

use super::{packet, Config, GossipFactory};
use crate::engine::{Engine, Event, Loss, NodeId, Qos, SendError};
use crate::registry::{EngineFactory, EngineParams, EngineSettings, Role};
use crate::testnet::{Copy, Observer};
use crate::wire::{EngineKind, Header};
use bytes::Bytes;
use std::time::Duration;

impl Copy<'_> {
    /// `(origin, message number)` of a data packet.
    fn data(&self) -> Option<(u32, u64)> {
        (self.ptype == packet::DATA).then(|| {
            let (o, m, _) = packet::decode_data(self.body).unwrap();
            (o.0, m)
        })
    }
}

/// The largest buffer any member reported (info().buffered_msgs) whenever it was polled.
#[derive(Default)]
struct MaxBuffered {
    max_buffered: usize,
}

impl Observer<dyn Engine> for MaxBuffered {
    fn polled(&mut self, _: usize, node: &mut (dyn Engine + 'static), _: &[Event]) {
        self.max_buffered = self.max_buffered.max(node.info().buffered_msgs);
    }
}

type Net = crate::testnet::Net<dyn Engine, MaxBuffered>;

fn cfg() -> Config {
    Config {
        gc_rounds: 10,
        loss_rounds: 15,
        buffer_msgs: 64,
        ..Config::default()
    }
}

impl Net {
    /// Member 0 creates the group, the others join through whoever answers (ids are indices).
    fn new(n: u32, cfg: Config) -> Net {
        let mut net = Net::with(MaxBuffered::default());
        let factory = GossipFactory::with_config(cfg);
        net.start(&factory, Role::Create);
        for _ in 1..n {
            net.start(&factory, Role::Join);
            net.run_for(Duration::from_millis(100));
        }
        net.run_for(Duration::from_millis(300));
        net
    }

    fn start(&mut self, factory: &GossipFactory, role: Role) -> usize {
        let i = self.nodes.len();
        let mut e = factory.build(&EngineParams {
            role,
            group: 7,
            me: NodeId(i as u32),
            max_datagram_bytes: 1400,
            now: self.now,
            seed: 1000 + i as u64,
            settings: &EngineSettings::default(),
        });
        e.handle_timeout(self.now);
        self.add(e);
        self.poll(i);
        i
    }

    fn node(&mut self, i: usize) -> &mut Box<dyn Engine> {
        assert!(!self.down[i], "running");
        &mut self.nodes[i]
    }

    fn send(&mut self, from: usize, k: u64) -> Vec<u64> {
        (0..k)
            .map(|c| {
                let now = self.now;
                let m = self
                    .node(from)
                    .submit(now, Bytes::from(vec![c as u8; 16]), Qos::SourceOrdered)
                    .unwrap();
                self.poll(from);
                m
            })
            .collect()
    }

    /// Message numbers of `sender` delivered by `i`, in delivery order.
    fn delivered(&self, i: usize, sender: usize) -> Vec<u64> {
        (self.events[i].iter())
            .filter_map(|e| match e {
                Event::Deliver(d) if d.sender.0 as usize == sender => Some(d.msg),
                _ => None,
            })
            .collect()
    }

    fn losses(&self, i: usize) -> Vec<Loss> {
        (self.events[i].iter())
            .filter_map(|e| match e {
                Event::Loss(l) => Some(l.clone()),
                _ => None,
            })
            .collect()
    }

    fn counter(&self, i: usize, name: &str) -> u64 {
        (self.nodes[i].engine_counters().into_iter())
            .find(|c| c.0 == name)
            .map(|c| c.1)
            .unwrap()
    }

    fn last_view(&self, i: usize) -> (u64, Vec<NodeId>) {
        (self.events[i].iter().rev())
            .find_map(|e| match e {
                Event::View(v) => Some((v.id, v.members.clone())),
                _ => None,
            })
            .expect("a view")
    }

    /// Every member idle: no timer, and nothing more is sent.
    fn quiet(&self) -> bool {
        (self.nodes.iter().zip(&self.down)).all(|(n, down)| *down || n.poll_timeout().is_none())
    }
}

#[test]
fn members_join_through_any_member_and_agree_on_the_view() {
    let mut net = Net::new(4, cfg());
    let ids: Vec<NodeId> = (0..4).map(NodeId).collect();
    let v0 = net.last_view(0);
    assert_eq!(v0.1, ids);
    for i in 1..4 {
        assert_eq!(net.last_view(i), v0, "member {i}");
    }
    // With nothing to do, every member stops gossiping: the network goes quiet.
    net.run_for(Duration::from_secs(3));
    assert!(net.quiet(), "{:?}", net.nodes[0].describe());
    let before = net.datagrams;
    net.run_for(Duration::from_secs(5));
    assert_eq!(net.datagrams, before);
}

#[test]
fn a_multicast_lost_in_the_first_phase_is_recovered_by_gossip() {
    let mut net = Net::new(4, cfg());
    // Member 3 misses the first-phase copy of every message of member 1.
    net.drop = Some(Box::new(|c| c.multicast && c.to == 3 && c.data().is_some()));
    let sent = net.send(1, 5);
    net.run_for(Duration::ZERO);
    assert!(
        net.delivered(3, 1).is_empty(),
        "nothing came in the first phase"
    );
    for i in [0, 2] {
        assert_eq!(net.delivered(i, 1), sent, "member {i}");
    }
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.delivered(3, 1), sent, "recovered by gossip");
    assert!(net.counter(3, "solicited_msgs") >= 5);
    let retrans: u64 = (0..4)
        .map(|i| net.nodes[i].counters().retransmissions)
        .sum();
    assert!(retrans >= 5, "{retrans}");
    assert!(net.losses(3).is_empty());
    // Each send completed (once multicast), and the messages became stable: the buffer emptied.
    let done = (net.events[1].iter())
        .filter(|e| matches!(e, Event::SendComplete { .. }))
        .count();
    assert_eq!(done, 5);
    assert!(net.counter(1, "gc_by_stability") >= 5);
}

#[test]
fn delivery_is_fifo_per_sender_whatever_the_arrival_order() {
    let mut net = Net::new(4, cfg());
    // Member 2 misses the first phase of messages 0..4 of member 0: 4..10 arrive first.
    net.drop = Some(Box::new(|c| {
        c.multicast && c.to == 2 && c.data().is_some_and(|(o, m)| o == 0 && m < 4)
    }));
    let a = net.send(0, 10);
    let b = net.send(3, 10);
    net.run_for(Duration::from_millis(20));
    assert!(net.delivered(2, 0).is_empty(), "4..10 wait for 0..4 (FIFO)");
    assert_eq!(net.delivered(2, 3), b, "another sender is not held up");
    net.run_for(Duration::from_secs(2));
    for i in 0..4 {
        assert_eq!(net.delivered(i, 0), a, "member {i}");
        assert_eq!(net.delivered(i, 3), b, "member {i}");
    }
}

#[test]
fn garbage_collection_keeps_buffers_bounded_stability_first_then_age() {
    let c = cfg();
    let cap = c.buffer_msgs;
    let mut net = Net::new(3, c.clone());
    // Everyone gossips: messages become stable and go long before gc_rounds.
    for _ in 0..10 {
        net.send(1, 20);
        net.run_for(Duration::from_millis(400));
    }
    assert!(net.x.max_buffered <= cap, "{} > {cap}", net.x.max_buffered);
    net.run_for(Duration::from_millis(500));
    for i in 0..3 {
        assert_eq!(net.nodes[i].info().buffered_msgs, 0);
        assert_eq!(net.delivered(i, 1).len(), 200);
    }
    assert!(net.counter(1, "gc_by_stability") > 150);
    // Member 2's digests are lost: nothing is known stable any more, and messages go by age
    // (gc_rounds rounds after they arrived).
    net.drop = Some(Box::new(|c| c.from == 2 && c.ptype == packet::GOSSIP));
    net.send(1, 20);
    let age_before = net.counter(1, "gc_by_age");
    net.run_for(c.round * (c.gc_rounds - 2));
    assert_eq!(net.nodes[1].info().buffered_msgs, 20);
    net.run_for(c.round * 4);
    assert_eq!(net.nodes[1].info().buffered_msgs, 0);
    assert_eq!(net.counter(1, "gc_by_age") - age_before, 20);
    assert!(net.x.max_buffered <= cap);
}

#[test]
fn an_unrecoverable_message_is_reported_lost_and_delivery_goes_on() {
    let mut net = Net::new(3, cfg());
    // Member 2 never gets message 3 of member 1, neither first nor again.
    net.drop = Some(Box::new(|c| c.to == 2 && c.data() == Some((1, 3))));
    let sent = net.send(1, 8);
    net.run_for(Duration::from_millis(50));
    assert_eq!(net.delivered(2, 1), vec![0, 1, 2], "4.. wait for 3");
    net.run_for(Duration::from_secs(4));
    assert_eq!(
        net.losses(2),
        vec![Loss {
            sender: NodeId(1),
            first_seq: 3,
            count: 1
        }]
    );
    let expected: Vec<u64> = sent.iter().copied().filter(|m| *m != 3).collect();
    assert_eq!(net.delivered(2, 1), expected);
    // The loss comes in its place: after 2, before 4.
    let pos = |pred: &dyn Fn(&Event) -> bool| net.events[2].iter().position(pred).unwrap();
    let loss = pos(&|e| matches!(e, Event::Loss(_)));
    let d2 = pos(&|e| matches!(e, Event::Deliver(d) if d.sender == NodeId(1) && d.msg == 2));
    let d4 = pos(&|e| matches!(e, Event::Deliver(d) if d.sender == NodeId(1) && d.msg == 4));
    assert!(d2 < loss && loss < d4);
    assert_eq!(net.counter(2, "lost_msgs"), 1);
    // The others lost nothing, and the message is not delivered late when the network heals.
    net.drop = None;
    net.run_for(Duration::from_secs(2));
    assert!(net.losses(0).is_empty() && net.losses(1).is_empty());
    assert_eq!(net.delivered(2, 1), expected);
}

#[test]
fn a_member_far_behind_its_buffer_gives_up_the_oldest_at_once() {
    // No loss by time in this test: only the buffer bound can make member 2 give up.
    let c = Config {
        loss_rounds: 100_000,
        ..cfg()
    };
    let cap = c.buffer_msgs as u64;
    let mut net = Net::new(3, c);
    // Member 2 never gets member 1's first 10 messages, and hears no digest for a while (so
    // it learns of messages only from those that reach it, and asks for nothing).
    let starved = std::rc::Rc::new(std::cell::Cell::new(true));
    let s2 = starved.clone();
    net.drop = Some(Box::new(move |c| {
        c.to == 2
            && (c.data().is_some_and(|(o, m)| o == 1 && m < 10)
                || (s2.get() && c.ptype == packet::GOSSIP))
    }));
    let n = cap + 40;
    let mut next = 0;
    for _ in 0..2000 {
        if next == n {
            break;
        }
        let now = net.now;
        if net
            .node(1)
            .submit(now, Bytes::from(vec![1; 8]), Qos::SourceOrdered)
            .is_ok()
        {
            next += 1;
        }
        net.poll(1);
        net.run_for(Duration::from_millis(10));
    }
    assert_eq!(next, n, "every message was sent (after back-pressure)");
    net.run_for(Duration::from_millis(500));
    let lost = net.losses(2);
    assert_eq!(lost.iter().map(|l| l.count).sum::<u64>(), 10, "{lost:?}");
    assert_eq!(lost[0].first_seq, 0);
    assert!(net.counter(2, "beyond_window") > 0);
    // With digests again, it recovers what did not fit its buffer when it came, or reports
    // lost what the others no longer hold either: every message is accounted for, once.
    starved.set(false);
    net.run_for(Duration::from_secs(3));
    let got = net.delivered(2, 1);
    let lost_after: Vec<u64> = (net.losses(2).iter())
        .flat_map(|l| l.first_seq..l.first_seq + l.count)
        .collect();
    println!("delivered {} of {n}, lost {lost_after:?}", got.len());
    assert!(got.windows(2).all(|w| w[0] < w[1]), "FIFO");
    let mut all: Vec<u64> = got.iter().chain(&lost_after).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..n).collect::<Vec<_>>());
    assert!(
        got.len() as u64 > cap,
        "most of what did not fit came back by gossip"
    );
}

#[test]
fn a_member_overrun_within_a_round_keeps_delivering_what_arrives() {
    // A sender far faster than a gossip round (the bench's hundreds of thousands of messages a
    // second against 100 ms rounds): member 2 misses one message, and the next buffer's worth
    // arrives before any digest could repair it. What arrives past its window must be taken
    // at once, giving up the oldest missing message, not dropped until the next round (which
    // left members that lost one datagram delivering a few percent of the stream for good).
    let c = Config {
        loss_rounds: 100_000,
        ..cfg()
    };
    let cap = c.buffer_msgs as u64;
    let mut net = Net::new(3, c);
    net.drop = Some(Box::new(|c| c.to == 2 && c.data() == Some((1, 5))));
    let n = 4 * cap;
    let sent = net.send(1, n);
    assert_eq!(sent.len() as u64, n);
    // Well within one round: no digest has had a chance to repair message 5.
    net.run_for(Duration::from_millis(5));
    let lost = net.losses(2);
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!((lost[0].first_seq, lost[0].count), (5, 1));
    let got = net.delivered(2, 1);
    assert_eq!(
        got.len() as u64,
        n - 1,
        "every message that arrived was delivered"
    );
    assert!(got.windows(2).all(|w| w[0] < w[1]), "FIFO");
    assert!(net.counter(2, "lagged") >= 1);
}

#[test]
fn a_full_own_buffer_drops_its_oldest_and_the_sender_never_waits() {
    let c = cfg();
    let cap = c.buffer_msgs;
    let mut net = Net::new(2, c.clone());
    // Member 1 hears nothing: member 0's messages never become stable.
    net.drop = Some(Box::new(|c| c.to == 1));
    let n = 3 * cap;
    for k in 0..n {
        let now = net.now;
        // Accepted at once, whatever member 1 holds, and complete once multicast.
        assert_eq!(
            net.node(0)
                .submit(now, Bytes::from_static(b"x"), Qos::Reliable),
            Ok(k as u64)
        );
        net.poll(0);
        assert!(net.nodes[0].can_submit());
        assert!(net.nodes[0].info().buffered_msgs <= cap);
    }
    let done: Vec<u64> = (net.events[0].iter())
        .filter_map(|e| match e {
            Event::SendComplete { msg } => Some(*msg),
            _ => None,
        })
        .collect();
    assert_eq!(done, (0..n as u64).collect::<Vec<_>>());
    assert_eq!(net.counter(0, "evicted_own"), (n - cap) as u64);
    let now = net.now;
    assert_eq!(
        net.node(0).submit(now, Bytes::new(), Qos::TotallyOrdered),
        Err(SendError::Unsupported)
    );
    // Member 1 hears again: it gets what member 0 still holds (the last `cap`) and reports
    // the rest lost, each message accounted for once, in order.
    net.drop = None;
    net.run_for(Duration::from_secs(5));
    let got = net.delivered(1, 0);
    let lost: u64 = net.losses(1).iter().map(|l| l.count).sum();
    assert_eq!(lost + got.len() as u64, n as u64);
    assert!(lost >= (n - cap) as u64, "lost {lost}");
    assert!(got.windows(2).all(|w| w[0] < w[1]), "FIFO");
    assert!(net.counter(1, "lagged") > 0);
}

#[test]
fn a_sender_buffer_is_bounded_by_bytes_too() {
    let c = Config {
        buffer_bytes: 40_000,
        ..cfg()
    };
    let mut net = Net::new(2, c);
    net.drop = Some(Box::new(|c| c.to == 1));
    for _ in 0..200 {
        let now = net.now;
        net.node(0)
            .submit(now, Bytes::from(vec![7; 1000]), Qos::Reliable)
            .expect("never refused");
        net.poll(0);
        assert!(net.counter(0, "buffered_bytes") <= 40_000);
    }
    // 64 messages would fit the count bound; 40 of 1,000 bytes fill the byte bound.
    assert_eq!(net.counter(0, "buffered"), 40);
    assert_eq!(net.counter(0, "evicted_own"), 160);
}

#[test]
fn leaves_and_silent_members_leave_the_view_and_a_refuted_suspicion_heals() {
    let c = Config {
        silence_timeout: Some(Duration::from_secs(1)),
        ..cfg()
    };
    let mut net = Net::new(5, c);
    let sent = net.send(4, 3);
    let now = net.now;
    net.node(4).leave(now);
    net.run_for(Duration::from_secs(2));
    assert!(matches!(net.events[4].last(), Some(Event::Left)));
    for i in 0..4 {
        assert_eq!(net.delivered(i, 4), sent, "member {i}");
        assert_eq!(net.last_view(i).1, (0..4).map(NodeId).collect::<Vec<_>>());
    }
    // Member 3 crashes: it is dropped after the silence timeout (the others keep gossiping
    // while they have not all heard from it).
    net.down[3] = true;
    net.send(0, 1);
    net.run_for(Duration::from_secs(3));
    for i in 0..3 {
        assert_eq!(net.last_view(i).1, (0..3).map(NodeId).collect::<Vec<_>>());
    }
    assert!((0..3).map(|i| net.counter(i, "suspected")).sum::<u64>() >= 1);
    // Member 2 hears nothing for a while: the others drop it, it refutes, all agree again.
    net.drop = Some(Box::new(|c| c.to == 2));
    net.send(0, 1);
    net.run_for(Duration::from_millis(1500));
    assert_eq!(net.last_view(0).1, vec![NodeId(0), NodeId(1)]);
    net.drop = None;
    net.send(1, 1);
    net.run_for(Duration::from_secs(3));
    let v = net.last_view(0);
    assert_eq!(v.1, (0..3).map(NodeId).collect::<Vec<_>>());
    assert_eq!(net.last_view(1), v);
    assert_eq!(net.last_view(2), v);
    assert!(net.counter(2, "refutations") >= 1);
    net.run_for(Duration::from_secs(3));
    assert!(net.quiet());
}

#[test]
fn without_failure_detection_a_crashed_member_does_not_keep_the_group_awake() {
    // More members than the agreements a member needs, so that waiting for news of every
    // member is not implied by the agreements (it was the rule with detection off).
    const N: u32 = 40;
    let c = Config {
        silence_timeout: None,
        ..cfg()
    };
    let mut net = Net::new(N, c);
    net.down[N as usize - 1] = true;
    let sent = net.send(0, 1);
    net.run_for(Duration::from_secs(10));
    for i in 0..N as usize - 1 {
        assert_eq!(net.delivered(i, 0), sent, "member {i}");
        // Nothing finds the crash: the member stays in every view.
        assert_eq!(net.last_view(i).1.len(), N as usize, "member {i}");
    }
    // Nobody waits for news of it: the group goes idle.
    assert!(net.quiet(), "{}", net.nodes[0].describe());
    let before = net.datagrams;
    net.run_for(Duration::from_secs(5));
    assert_eq!(net.datagrams, before);
}

#[test]
fn two_sides_of_a_long_partition_merge_when_a_message_crosses() {
    let c = Config {
        silence_timeout: Some(Duration::from_secs(1)),
        ..cfg()
    };
    let mut net = Net::new(4, c);
    let side = |i: usize| i < 2;
    net.drop = Some(Box::new(move |c| side(c.from) != side(c.to)));
    net.send(0, 2);
    net.send(3, 2);
    net.run_for(Duration::from_secs(3));
    assert_eq!(net.last_view(0).1, vec![NodeId(0), NodeId(1)]);
    assert_eq!(net.last_view(3).1, vec![NodeId(2), NodeId(3)]);
    // Healed, and both sides idle: nothing crosses until somebody sends.
    net.drop = None;
    net.run_for(Duration::from_secs(3));
    assert!(net.quiet());
    assert_eq!(net.last_view(0).1, vec![NodeId(0), NodeId(1)]);
    // A multicast reaches the other side, whose members send their table back: one group.
    let sent = net.send(1, 3);
    net.run_for(Duration::from_secs(3));
    let v = net.last_view(0);
    assert_eq!(v.1, (0..4).map(NodeId).collect::<Vec<_>>());
    for i in 1..4 {
        assert_eq!(net.last_view(i), v, "member {i}");
        assert_eq!(net.delivered(i, 1)[..], sent[..], "member {i}");
    }
    assert!(net.quiet());
}

#[test]
fn malformed_datagrams_are_counted_and_dropped() {
    let mut net = Net::new(2, cfg());
    let header = |ptype: u8| {
        let mut b = Vec::new();
        Header {
            engine: EngineKind::Gossip,
            ptype,
            flags: 0,
            group: 7,
            incarnation: 0,
            sender: NodeId(1),
        }
        .encode(&mut b);
        b
    };
    let before = net.nodes[0].counters().malformed_dropped;
    let mut bad: Vec<Vec<u8>> = vec![vec![], vec![0x52, 0x4d, 1]];
    for ptype in [
        packet::DATA,
        packet::GOSSIP,
        packet::SOLICIT,
        packet::WELCOME,
        packet::MEMBERS,
        packet::LEAVE,
        packet::PROBE,
        packet::PROBE_REQ,
        packet::PROBE_ACK,
        99,
    ] {
        bad.push(header(ptype)); // every body type needs more than nothing
    }
    let mut join = header(packet::JOIN);
    join.push(1);
    bad.push(join);
    for d in &bad {
        let now = net.now;
        net.node(0).handle_datagram(now, NodeId(1), d);
    }
    let after = net.nodes[0].counters().malformed_dropped;
    assert_eq!(after - before, bad.len() as u64);
    // Random bodies of every type: never a panic; whatever does not decode is counted.
    let mut x = 0x1234_5678_9abc_def0u64;
    for k in 0..5000u64 {
        let mut d = header([1, 2, 3, 4, 5, 6, 7, 11, 12, 13][(k % 10) as usize]);
        for _ in 0..(k % 97) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            d.push(x as u8);
        }
        let now = net.now;
        net.node(0).handle_datagram(now, NodeId(1), &d);
        net.poll(0);
    }
    // The group still works.
    let sent = net.send(0, 3);
    net.run_for(Duration::from_secs(1));
    let got = net.delivered(1, 0);
    assert!(got.ends_with(&sent), "{got:?}");
}

#[test]
fn forged_departures_are_refuted_or_refused_and_the_member_stays() {
    let mut net = Net::new(4, cfg());
    let all: Vec<NodeId> = (0..4).map(NodeId).collect();
    // Member 3 (a key holder) forges: a LEAVE in member 1's name, and tables declaring member
    // 1 departed at the top of the version range, far ahead of its version, and just ahead.
    let forged = |ptype: u8, body: &dyn Fn(&mut Vec<u8>)| {
        let sender = if ptype == packet::LEAVE { 1 } else { 3 };
        let mut b = Vec::new();
        Header {
            engine: EngineKind::Gossip,
            ptype,
            flags: 0,
            group: 7,
            incarnation: 0,
            sender: NodeId(sender),
        }
        .encode(&mut b);
        body(&mut b);
        b
    };
    let members = |version: u32| {
        forged(packet::MEMBERS, &|b| {
            packet::Members {
                want_reply: false,
                view_id: 0,
                entries: vec![(NodeId(1), version, false)],
            }
            .encode(b)
        })
    };
    let leave = |version: u32| forged(packet::LEAVE, &|b| b.extend(version.to_be_bytes()));
    let far = super::membership::MAX_VERSION_STEP + 10;
    for d in [
        members(u32::MAX),
        leave(u32::MAX),
        members(far),
        leave(far),
        members(3),
    ] {
        for i in [0, 1, 2] {
            let now = net.now;
            net.node(i).handle_datagram(now, NodeId(3), &d);
            net.poll(i);
        }
        net.run_for(Duration::from_secs(1));
        for i in 0..4 {
            assert_eq!(net.last_view(i).1, all, "member {i}");
        }
    }
    // The far jumps were refused and counted; the near one was refuted by member 1 itself.
    for i in [0, 2] {
        assert_eq!(net.counter(i, "forged_entries"), 2, "member {i}");
    }
    assert!(net.counter(1, "refutations") >= 1);
    // Member 1 still receives and is received.
    let a = net.send(0, 3);
    let b = net.send(1, 3);
    net.run_for(Duration::from_secs(2));
    for i in 0..4 {
        if i != 0 {
            assert_eq!(net.delivered(i, 0), a, "member {i}");
        }
        if i != 1 {
            assert_eq!(net.delivered(i, 1), b, "member {i}");
        }
    }
}

#[test]
fn messages_submitted_together_go_as_one_run_and_a_lost_run_is_repaired() {
    let c = Config {
        buffer_msgs: 1024,
        ..cfg()
    };
    let mut net = Net::new(3, c);
    let runs = std::rc::Rc::new(std::cell::Cell::new(0));
    let r = runs.clone();
    // Member 2 misses every run: gossip sends it each message again.
    net.drop = Some(Box::new(move |c| {
        if c.ptype == packet::DATA_RUN && c.to == 1 {
            r.set(r.get() + 1);
        }
        c.ptype == packet::DATA_RUN && c.to == 2
    }));
    // 300 messages of 16 bytes before the driver takes a datagram: runs of 68 (20 bytes
    // each in 1,400-byte datagrams), 5 of them.
    let now = net.now;
    for k in 0..300u64 {
        let m = net
            .node(0)
            .submit(now, Bytes::from(vec![k as u8; 16]), Qos::SourceOrdered)
            .unwrap();
        assert_eq!(m, k);
    }
    net.poll(0);
    net.run_for(Duration::ZERO);
    assert_eq!(runs.get(), 5);
    assert_eq!(net.delivered(1, 0), (0..300).collect::<Vec<_>>());
    assert!(net.delivered(2, 0).is_empty());
    net.run_for(Duration::from_secs(3));
    assert_eq!(net.delivered(2, 0), (0..300).collect::<Vec<_>>());
    let payloads: Vec<Bytes> = (net.events[2].iter())
        .filter_map(|e| match e {
            Event::Deliver(d) => Some(d.payload.clone()),
            _ => None,
        })
        .collect();
    assert!((payloads.iter().enumerate()).all(|(k, p)| p[..] == [k as u8; 16]));
}

#[test]
fn a_message_larger_than_a_datagram_arrives_whole_and_lost_fragments_are_repaired() {
    let mut net = Net::new(3, cfg());
    // Member 2 misses the first phase of every other fragment: gossip repairs them.
    net.drop = Some(Box::new(|c| {
        c.ptype == packet::DATA_FRAG && c.multicast && c.to == 2 && c.index % 2 == 0
    }));
    let big: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    let now = net.now;
    let m = net
        .node(0)
        .submit(now, Bytes::from(big.clone()), Qos::SourceOrdered)
        .unwrap();
    net.poll(0);
    // 10,000 bytes in 1,400-byte datagrams: 8 fragments, numbered 0..8; the message is 7.
    assert_eq!(m, 7);
    let small = net.send(0, 1);
    assert_eq!(small, vec![8]);
    net.run_for(Duration::from_secs(2));
    for i in 0..3 {
        let got: Vec<(u64, Bytes)> = (net.events[i].iter())
            .filter_map(|e| match e {
                Event::Deliver(d) => Some((d.msg, d.payload.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(got.len(), 2, "member {i}");
        assert_eq!((got[0].0, &got[0].1[..]), (7, &big[..]), "member {i}");
        assert_eq!(got[1].0, 8);
        assert!(net.losses(i).is_empty());
    }
    assert!(net.counter(2, "solicited_msgs") + net.counter(0, "pushed") > 0);
    // Larger than the maximum message: refused, saying so.
    let now = net.now;
    assert_eq!(
        net.node(0)
            .submit(now, Bytes::from(vec![0; (1 << 20) + 1]), Qos::SourceOrdered),
        Err(SendError::TooLarge)
    );
}

#[test]
fn a_message_whose_fragment_nobody_holds_is_reported_lost_under_its_number() {
    let c = Config {
        loss_rounds: 5,
        ..cfg()
    };
    let mut net = Net::new(3, c);
    // Fragment 1 of the message never reaches member 2, first phase or repair.
    net.drop = Some(Box::new(|c| {
        c.to == 2 && c.ptype == packet::DATA_FRAG && packet::decode_frag(c.body).unwrap().1 == 1
    }));
    let now = net.now;
    let m = net
        .node(0)
        .submit(now, Bytes::from(vec![5; 5000]), Qos::SourceOrdered)
        .unwrap();
    net.poll(0);
    let after = net.send(0, 1);
    net.run_for(Duration::from_secs(3));
    assert_eq!(net.delivered(1, 0), vec![m, after[0]]);
    // Member 2: the lost fragment, then the message itself under its number, then what came
    // after, delivered.
    assert_eq!(net.delivered(2, 0), after);
    let lost = net.losses(2);
    assert!(
        lost.iter().any(|l| l.first_seq == m && l.count == 1),
        "{lost:?}"
    );
    assert!(
        lost.iter().any(|l| l.first_seq == 1 && l.count == 1),
        "{lost:?}"
    );
}

/// A group whose membership table is full refuses a joiner at once, naming the limit (asking
/// on, it would wait unanswered for as long as the table stays full), and goes on as it was.
#[test]
fn a_joiner_past_the_member_limit_is_refused_at_once_naming_the_limit() {
    let small = Config {
        max_members: 3,
        ..cfg()
    };
    let mut net = Net::new(3, small.clone());
    assert_eq!(net.last_view(0).1.len(), 3);
    let j = net.start(&GossipFactory::with_config(small), Role::Join);
    // A few join retries (50 ms) at most: about `fanout` members answer each request.
    net.run_for(Duration::from_millis(200));
    assert!(
        net.events[j].iter().any(|e| matches!(
            e,
            Event::Recovery(crate::engine::Recovery::Refused { limit: 3 })
        )),
        "the joiner was told, with the limit: {:?}",
        net.events[j]
    );
    let asked = net.datagrams;
    net.run_for(Duration::from_secs(1));
    assert_eq!(net.last_view(0).1.len(), 3);
    // It stopped asking: the group went quiet again.
    net.run_for(Duration::from_secs(5));
    let before = net.datagrams;
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.datagrams, before, "{asked}");
}

/// A group that probes (SWIM) whatever its size, with a short suspicion timeout.
fn probing() -> Config {
    Config {
        probing_above: 0,
        silence_timeout: Some(Duration::from_secs(1)),
        ..cfg()
    }
}

fn sum(net: &Net, name: &str) -> u64 {
    (0..net.nodes.len()).map(|i| net.counter(i, name)).sum()
}

#[test]
fn probing_finds_a_crashed_member_and_a_suspected_live_member_refutes() {
    let mut net = Net::new(6, probing());
    let all = |n: u32| (0..n).map(NodeId).collect::<Vec<_>>();
    net.send(0, 2);
    net.run_for(Duration::from_secs(1));
    assert!(sum(&net, "probes") > 0);
    assert_eq!(
        sum(&net, "suspicions"),
        0,
        "nobody suspected on a sound network"
    );
    // Member 5 crashes: probed, probed through others, suspected, confirmed departed.
    net.down[5] = true;
    net.send(0, 1);
    net.run_for(Duration::from_secs(3));
    for i in 0..5 {
        assert_eq!(net.last_view(i).1, all(5), "member {i}");
    }
    assert!(sum(&net, "indirect_probes") > 0);
    assert!(sum(&net, "relayed_probes") > 0);
    assert!(sum(&net, "suspected") >= 1);
    // Member 4 hears nothing for less than the suspicion timeout while the others send: it is
    // suspected, learns of it once it hears again (updates about a member go first in a probe
    // to it), refutes, and stays.
    let before = net.counter(4, "refutations");
    let suspicions = sum(&net, "suspicions");
    net.drop = Some(Box::new(|c| c.to == 4));
    for _ in 0..4 {
        net.send(0, 1);
        net.run_for(Duration::from_millis(100));
    }
    net.drop = None;
    net.send(1, 1);
    net.run_for(Duration::from_secs(3));
    assert!(
        sum(&net, "suspicions") > suspicions,
        "member 4 was suspected"
    );
    assert!(net.counter(4, "refutations") > before, "and refuted it");
    let v = net.last_view(0);
    assert_eq!(v.1, all(5));
    for i in 1..5 {
        assert_eq!(net.last_view(i), v, "member {i}");
    }
    net.run_for(Duration::from_secs(3));
    assert!(net.quiet());
}

#[test]
fn a_forged_suspicion_is_refuted_and_the_member_stays() {
    let mut net = Net::new(4, probing());
    let all: Vec<NodeId> = (0..4).map(NodeId).collect();
    // Member 3 (a key holder) tells members 1 and 2 that member 1 is suspected, at every
    // version it may have.
    let mut d = Vec::new();
    Header {
        engine: EngineKind::Gossip,
        ptype: packet::PROBE,
        flags: 0,
        group: 7,
        incarnation: 0,
        sender: NodeId(3),
    }
    .encode(&mut d);
    packet::Probe {
        id: 1,
        member: NodeId(9),
        updates: (0..packet::MAX_UPDATES as u32)
            .map(|version| packet::Update {
                member: NodeId(1),
                version,
                kind: packet::UpdateKind::Suspect,
            })
            .collect(),
    }
    .encode(&mut d);
    for i in [2, 1] {
        let now = net.now;
        net.node(i).handle_datagram(now, NodeId(3), &d);
        net.poll(i);
    }
    assert_eq!(net.counter(2, "suspicions"), 1, "member 2 took it in");
    assert_eq!(net.counter(1, "refutations"), 1, "member 1 refuted at once");
    net.run_for(Duration::from_secs(3));
    for i in 0..4 {
        assert_eq!(net.last_view(i).1, all, "member {i}");
    }
    assert_eq!(sum(&net, "suspected"), 0, "nobody confirmed it");
    assert!(net.quiet());
}
