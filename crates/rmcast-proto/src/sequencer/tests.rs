//! Unit tests of the sequencer engine over a tiny in-memory network (lossless unless a test
//! drops datagrams itself). The simulator (`rmcast-sim`) sweeps seeds under faults.

use super::packet::{self, ptype};
use super::{Config, Sequencer};
use crate::engine::{Engine, Event, NodeId, Qos, Recovery, SendError, Time};
use bytes::Bytes;
use std::time::Duration;

type Net = crate::testnet::Net<Sequencer>;

impl Net {
    /// Node 1 creates the group, the others join; a clock that ticks every millisecond.
    fn new(n: usize, cfg: Config) -> Net {
        let mut net = Net::with(());
        net.tick = Some(Duration::from_millis(1));
        net.add(Box::new(Sequencer::create(
            cfg.clone(),
            NodeId(1),
            Time::ZERO,
        )));
        for i in 1..n {
            let id = NodeId(i as u32 + 1);
            net.add(Box::new(Sequencer::join(cfg.clone(), id, Time::ZERO)));
        }
        net.run_for(Duration::from_millis(500));
        net
    }

    /// Packet types of the datagrams sent (since the log was last cleared).
    fn sent_types(&self) -> Vec<u8> {
        self.sent.iter().map(|s| s.ptype).collect()
    }

    fn deliveries(&self, i: usize) -> Vec<(u64, NodeId, u64, Bytes)> {
        self.events[i]
            .iter()
            .filter_map(|e| match e {
                Event::Deliver(d) => Some((d.seq, d.sender, d.msg, d.payload.clone())),
                _ => None,
            })
            .collect()
    }
}

/// One of the engine's own counters, by name (0 if it does not report it).
fn engine_counter(node: &Sequencer, name: &str) -> u64 {
    node.engine_counters()
        .into_iter()
        .find(|c| c.0 == name)
        .map_or(0, |c| c.1)
}

fn cfg(r: u8) -> Config {
    let mut c = Config::new(7);
    c.resilience = r;
    c
}

/// The paper's costs: resilience r alone decides when a send completes (no majority policy).
fn cfg_paper(r: u8) -> Config {
    let mut c = cfg(r);
    c.min_members = 1;
    c
}

#[test]
fn members_join_and_agree_on_total_order() {
    let mut net = Net::new(3, cfg(0));
    for i in 0..3 {
        assert_eq!(net.nodes[i].info().members.len(), 3, "node {i} view");
    }
    for round in 0..20u32 {
        for i in 0..3 {
            let p = Bytes::from(format!("m{i}-{round}"));
            net.nodes[i]
                .submit(net.now, p, Qos::TotallyOrdered)
                .unwrap();
        }
    }
    net.run_for(Duration::from_millis(200));
    let d0 = net.deliveries(0);
    assert_eq!(d0.len(), 60);
    for i in 1..3 {
        // Members joined before any data, so they deliver exactly the same sequence.
        assert_eq!(net.deliveries(i), d0);
    }
    // FIFO per sender.
    for s in 1..=3 {
        let msgs: Vec<u64> = d0
            .iter()
            .filter(|d| d.1 == NodeId(s))
            .map(|d| d.2)
            .collect();
        assert!(msgs.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(msgs.len(), 20);
    }
    let completes = net.events[1]
        .iter()
        .filter(|e| matches!(e, Event::SendComplete { .. }))
        .count();
    assert_eq!(completes, 20);
}

#[test]
fn pb_costs_two_datagrams_per_broadcast() {
    let mut net = Net::new(4, cfg_paper(0));
    net.sent.clear();
    for k in 0..10 {
        net.nodes[2]
            .submit(net.now, Bytes::from(vec![k; 10]), Qos::default())
            .unwrap();
        net.flush();
    }
    assert_eq!(net.sent_types().len(), 20, "{:?}", net.sent_types());
    assert!(net.deliveries(3).len() == 10);
}

#[test]
fn resilience_costs_three_plus_r_and_completes_after_r_acks() {
    for r in 1..=3u8 {
        let mut net = Net::new(5, cfg_paper(r));
        net.sent.clear();
        for k in 0..10 {
            net.nodes[4]
                .submit(net.now, Bytes::from(vec![k; 10]), Qos::default())
                .unwrap();
            net.flush();
        }
        assert_eq!(
            net.sent_types().len(),
            10 * (3 + r as usize),
            "r={r}: {:?}",
            net.sent_types()
        );
        assert_eq!(net.deliveries(1).len(), 10);
        assert_eq!(
            net.sent_types()
                .iter()
                .filter(|t| **t == ptype::STATUS)
                .count(),
            10 * r as usize
        );
    }
}

/// The majority policy (the default): a send completes only once a majority of the view holds
/// it. In a group of n = 5 that is the sequencer and two others, so an isolated broadcast costs
/// what r = 2 costs in the paper (3 + 2 datagrams), and acceptance (delivery) does not wait.
#[test]
fn majority_policy_completes_once_a_majority_holds_the_message() {
    let mut net = Net::new(5, cfg(0));
    net.sent.clear();
    for k in 0..10 {
        net.nodes[4]
            .submit(net.now, Bytes::from(vec![k; 10]), Qos::default())
            .unwrap();
        net.flush();
    }
    assert_eq!(net.deliveries(1).len(), 10);
    let statuses = net
        .sent_types()
        .iter()
        .filter(|t| **t == ptype::STATUS)
        .count();
    assert_eq!(statuses, 10 * 2, "{:?}", net.sent_types());
    let completes = net.events[4]
        .iter()
        .filter(|e| matches!(e, Event::SendComplete { .. }))
        .count();
    assert_eq!(completes, 10);
}

/// A sequencer cut off with a minority of its view (2 of 5) still orders and delivers, but no
/// send there completes: the majority side may rebuild the group without those messages.
#[test]
fn no_send_completes_on_a_minority_side() {
    let mut net = Net::new(5, cfg(0));
    // Node 0 orders; nodes 2, 3 and 4 are cut off (to this side, they have gone silent).
    for i in [2, 3, 4] {
        net.down[i] = true;
    }
    let before = net.events[1].len();
    for k in 0..5 {
        let _ = net.nodes[1].submit(net.now, Bytes::from(vec![k; 10]), Qos::default());
        net.flush();
    }
    assert!(
        net.deliveries(1).len() >= 5,
        "ordered and delivered on the minority side"
    );
    assert!(
        !net.events[1][before..]
            .iter()
            .any(|e| matches!(e, Event::SendComplete { .. })),
        "{:?}",
        &net.events[1][before..]
    );
}

#[test]
fn large_messages_use_bb_and_are_reassembled() {
    let mut net = Net::new(3, cfg(0));
    let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    net.sent.clear();
    let id = net.nodes[1]
        .submit(net.now, Bytes::from(big.clone()), Qos::default())
        .unwrap();
    net.run_for(Duration::from_millis(100));
    for i in 0..3 {
        let d = net.deliveries(i);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].3.as_ref(), &big[..]);
        assert_eq!(d[0].2, id);
    }
    assert!(net.sent_types().contains(&ptype::BCAST_REQ_BB));
    assert!(!net.sent_types().contains(&ptype::BCAST_REQ_PB));
    // Lossless: nobody, the sender included, had to ask for anything again.
    assert!(!net.sent_types().contains(&ptype::RETRANS));
    assert_eq!(net.nodes[1].counters().retransmissions, 0);
}

#[test]
fn losses_are_repaired() {
    let mut net = Net::new(4, cfg(1));
    // Drop every 5th datagram from now on.
    net.drop = Some(Box::new(|c| c.index % 5 == 3));
    for k in 0..200u32 {
        let i = (k % 4) as usize;
        net.nodes[i]
            .submit(
                net.now,
                Bytes::from(k.to_be_bytes().to_vec()),
                Qos::default(),
            )
            .unwrap();
        if k % 7 == 0 {
            net.run_for(Duration::from_millis(1));
        }
    }
    net.run_for(Duration::from_secs(3));
    let d0 = net.deliveries(0);
    assert_eq!(d0.len(), 200);
    for i in 1..4 {
        assert_eq!(net.deliveries(i), d0, "member {i}");
    }
    let c: u64 = net.nodes.iter().map(|n| n.counters().nacks_sent).sum();
    assert!(c > 0, "losses should have caused NACKs");
}

#[test]
fn full_window_pushes_back_and_nothing_is_lost() {
    let mut c = cfg(0);
    c.send_window_msgs = 4;
    let mut net = Net::new(2, c);
    let mut accepted = 0;
    let mut refused = 0;
    for k in 0..10u8 {
        match net.nodes[1].submit(net.now, Bytes::from(vec![k]), Qos::default()) {
            Ok(_) => accepted += 1,
            Err(SendError::WouldBlock) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!((accepted, refused), (4, 6));
    assert!(!net.nodes[1].can_submit());
    net.run_for(Duration::from_millis(50));
    assert!(net.nodes[1].can_submit());
    assert_eq!(net.deliveries(0).len(), 4);
}

/// The window in bytes: 1000-byte messages stop at 3 with a 3000-byte window although the
/// window in messages has room for 1024; one-byte messages do not feel it.
#[test]
fn the_window_in_bytes_pushes_back_large_messages_only() {
    let mut c = cfg(0);
    c.send_window_bytes = 3000;
    let mut net = Net::new(2, c);
    let mut accepted = 0;
    while net.nodes[1]
        .submit(net.now, Bytes::from(vec![7; 1000]), Qos::default())
        .is_ok()
    {
        accepted += 1;
    }
    assert_eq!(accepted, 3);
    assert!(!net.nodes[1].can_submit());
    net.run_for(Duration::from_millis(50));
    assert_eq!(net.deliveries(0).len(), 3);
    let small = (0..100u8)
        .filter(|k| {
            net.nodes[1]
                .submit(net.now, Bytes::from(vec![*k]), Qos::default())
                .is_ok()
        })
        .count();
    assert_eq!(small, 100);
}

#[test]
fn history_full_blocks_until_members_report() {
    let mut c = cfg(0);
    c.history_capacity_msgs = 16;
    c.state_interval_msgs = 1_000_000; // only BC_SYNC can free the history
    let mut net = Net::new(3, c);
    for k in 0..200u32 {
        while net.nodes[0]
            .submit(
                net.now,
                Bytes::from(k.to_be_bytes().to_vec()),
                Qos::default(),
            )
            .is_err()
        {
            net.run_for(Duration::from_millis(5));
        }
    }
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.deliveries(2).len(), 200);
    let syncs = net.nodes[0].engine_counters();
    assert!(syncs.iter().any(|&(name, n)| name == "syncs_sent" && n > 0));
    assert!(net.nodes.iter().all(|n| n.info().buffered_msgs <= 16));
}

/// Members that held `bytes_budget` bytes at most in a run of 100-byte messages, and the most
/// the sequencer's history held at any step.
fn history_bytes_run(bytes_budget: usize) -> (usize, usize) {
    let mut c = cfg(0);
    c.history_capacity_bytes = bytes_budget;
    c.state_interval_msgs = 1_000_000; // only BC_SYNC can free the history
    let mut net = Net::new(3, c);
    let mut most = 0;
    for k in 0..200u32 {
        let mut p = vec![0u8; 100];
        p[..4].copy_from_slice(&k.to_be_bytes());
        while net.nodes[1]
            .submit(net.now, Bytes::from(p.clone()), Qos::default())
            .is_err()
        {
            net.run_for(Duration::from_millis(5));
            most = most.max(net.nodes[0].hist.payload_bytes);
        }
        net.flush();
        most = most.max(net.nodes[0].hist.payload_bytes);
    }
    net.run_for(Duration::from_millis(500));
    (net.deliveries(2).len(), most)
}

#[test]
fn history_bytes_bound_what_the_sequencer_orders() {
    // 1000 bytes: ten 100-byte messages (the last one ordered may overshoot by one).
    let (delivered, most) = history_bytes_run(1000);
    assert_eq!(delivered, 200);
    assert!(
        most <= 1100,
        "history held {most} bytes over a 1000-byte budget"
    );
    // The same run without the byte bound holds more: the bound is what kept it down.
    let (delivered, most) = history_bytes_run(16 << 20);
    assert_eq!(delivered, 200);
    assert!(most > 1100, "the run never needed the bound ({most} bytes)");
}

#[test]
fn leave_is_ordered_and_sequencer_hands_over() {
    let mut net = Net::new(3, cfg(0));
    for k in 0..5u8 {
        net.nodes[1]
            .submit(net.now, Bytes::from(vec![k]), Qos::default())
            .unwrap();
    }
    // The sequencer (node 1) leaves; node 2 takes over.
    net.nodes[0].leave(net.now);
    net.run_for(Duration::from_millis(300));
    assert!(net.events[0].iter().any(|e| matches!(e, Event::Left)));
    let info = net.nodes[1].info();
    assert_eq!(info.members, vec![NodeId(2), NodeId(3)]);
    assert_eq!(info.coordinator, Some(NodeId(2)));
    for k in 0..5u8 {
        net.nodes[2]
            .submit(net.now, Bytes::from(vec![100 + k]), Qos::default())
            .unwrap();
    }
    net.run_for(Duration::from_millis(300));
    assert_eq!(net.deliveries(1), net.deliveries(2));
    assert_eq!(net.deliveries(1).len(), 10);
    // Node 3 leaves: it receives its own leave, then Left.
    net.nodes[2].leave(net.now);
    net.run_for(Duration::from_millis(300));
    let last_view = net.events[2].iter().rev().find_map(|e| match e {
        Event::View(v) => Some(v.clone()),
        _ => None,
    });
    assert_eq!(last_view.unwrap().left, Some(NodeId(3)));
    assert!(matches!(net.events[2].last(), Some(Event::Left)));
    assert_eq!(net.nodes[1].info().members, vec![NodeId(2)]);
}

#[test]
fn joiner_receives_exactly_what_follows_its_join() {
    let mut net = Net::new(2, cfg(0));
    for k in 0..5u8 {
        net.nodes[0]
            .submit(net.now, Bytes::from(vec![k]), Qos::default())
            .unwrap();
    }
    net.run_for(Duration::from_millis(50));
    net.add(Box::new(Sequencer::join(cfg(0), NodeId(9), net.now)));
    net.run_for(Duration::from_millis(300));
    for k in 0..5u8 {
        net.nodes[1]
            .submit(net.now, Bytes::from(vec![50 + k]), Qos::default())
            .unwrap();
    }
    net.run_for(Duration::from_millis(100));
    let joined = net.deliveries(2);
    assert_eq!(joined.len(), 5);
    assert!(joined.iter().all(|d| d.3[0] >= 50));
    assert_eq!(net.deliveries(0)[5..], joined[..]);
}

/// A group at its member limit refuses a joiner at once (it would otherwise wait, unanswered,
/// for as long as nobody leaves): the joiner gets `Recovery::Refused` naming the limit, takes
/// no part in the group, and the members go on.
#[test]
fn a_joiner_past_the_member_limit_is_refused_at_once_naming_the_limit() {
    let small = || Config {
        max_members: 2,
        ..cfg(0)
    };
    let mut net = Net::new(1, small());
    net.add(Box::new(Sequencer::join(small(), NodeId(2), net.now)));
    net.run_for(Duration::from_millis(100));
    assert_eq!(net.nodes[0].info().members, vec![NodeId(1), NodeId(2)]);
    net.add(Box::new(Sequencer::join(small(), NodeId(3), net.now)));
    // Well within one join retry: the refusal answers the first request.
    net.run_for(Duration::from_millis(30));
    assert!(
        net.events[2]
            .iter()
            .any(|e| matches!(e, Event::Recovery(Recovery::Refused { limit: 2 }))),
        "the joiner was told, with the limit: {:?}",
        kinds(&net.events[2])
    );
    assert!(engine_counter(&net.nodes[0], "joins_refused") >= 1);
    net.run_for(Duration::from_millis(500));
    // It stopped asking, and the group is as it was and still works.
    assert_eq!(engine_counter(&net.nodes[0], "joins_refused"), 1);
    assert!(!net.nodes[2].info().members.contains(&NodeId(3)));
    net.nodes[1]
        .submit(net.now, Bytes::from_static(b"on"), Qos::default())
        .unwrap();
    net.run_for(Duration::from_millis(100));
    assert_eq!(net.deliveries(0).len(), 1);
    assert!(net.deliveries(2).is_empty());
}

/// Two groups of one name (created apart) both hear a join request. A node merging into one of
/// them names its sequencer: only that group admits it, and the other does not take in a member
/// that never comes (which it would keep until it found it failed).
#[test]
fn a_merging_joiner_is_admitted_by_the_group_it_names_only() {
    let mut net = Net::new(1, cfg(0));
    for id in [2, 3] {
        net.add(Box::new(Sequencer::create(cfg(0), NodeId(id), net.now)));
    }
    net.run_for(Duration::from_millis(50));
    // Node 1 answers first on this network: without the name it would win the joiner.
    net.nodes[2].rejoin(net.now, Some(NodeId(2))).unwrap();
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.nodes[0].info().members, vec![NodeId(1)]);
    assert_eq!(net.nodes[1].info().members, vec![NodeId(2), NodeId(3)]);
    assert_eq!(net.nodes[2].info().members, vec![NodeId(2), NodeId(3)]);
    // Untargeted, the first group to answer admits it (and the other keeps a ghost): the case
    // the name exists for.
    net.nodes[2].rejoin(net.now, None).unwrap();
    net.run_for(Duration::from_millis(500));
    assert!(net.nodes[0].info().members.contains(&NodeId(3)));
}

/// BC_BCAST of another group of the test group's name, from `from` in `incarnation`: the
/// admission of `joiner` at `seq` into a view of `members` coordinated by `from`.
fn foreign_admission(
    from: u32,
    incarnation: u32,
    joiner: u32,
    seq: u64,
    members: &[u32],
) -> Vec<u8> {
    let members: Vec<NodeId> = members.iter().map(|&m| NodeId(m)).collect();
    let view = crate::common::view_bytes(2, NodeId(from), &members);
    let header = crate::wire::Header {
        incarnation,
        ..forged_header(ptype::ORDERED, from)
    };
    let state = packet::SeqState {
        accepted_next: seq + 1,
        stable: seq,
        next_seq: seq + 1,
        complete_next: seq + 1,
    };
    let mut buf = Vec::new();
    let mut w = packet::OrderedWriter::new(&mut buf, &header, state, seq);
    w.push(&packet::OrderedEntry {
        kind: packet::EntryKind::Join,
        has_payload: true,
        sender: NodeId(joiner),
        pnum: 0,
        frag_index: 0,
        frag_count: 1,
        payload: &view,
    });
    buf
}

/// A joiner hears another group of the name, of a newer incarnation, before its own admission
/// (formation seed 1492: a group reset during a merge admits a member, and its joiners ask
/// in that incarnation): that group's ordered entries, its sync and another joiner's request
/// do not move the joiner to their incarnation, where it dropped its own group's admission
/// as older until it gave up. It is admitted in its group's incarnation.
#[test]
fn a_joiner_stays_in_the_incarnation_of_the_group_that_admits_it() {
    let mut net = Net::new(2, cfg(0));
    let j = net.add(Box::new(Sequencer::join(cfg(0), NodeId(9), net.now)));
    let sync = {
        let mut buf = Vec::new();
        let state = packet::SeqState {
            accepted_next: 3,
            stable: 3,
            next_seq: 3,
            complete_next: 3,
        };
        let header = crate::wire::Header {
            incarnation: 1,
            ..forged_header(ptype::SYNC, 4)
        };
        packet::encode_control(&mut buf, &header, &packet::Body::Sync(state));
        buf
    };
    let join_req = {
        let mut buf = Vec::new();
        let header = crate::wire::Header {
            incarnation: 1,
            ..forged_header(ptype::JOIN_REQ, 5)
        };
        packet::encode_control(&mut buf, &header, &packet::Body::JoinReq { into: None });
        buf
    };
    let now = net.now;
    let node = &mut net.nodes[j];
    node.handle_datagram(now, NodeId(4), &foreign_admission(4, 1, 5, 2, &[4, 6, 5]));
    node.handle_datagram(now, NodeId(4), &sync);
    node.handle_datagram(now, NodeId(5), &join_req);
    assert_eq!(
        node.info().incarnation,
        0,
        "moved by another group's traffic"
    );
    assert!(node.counters().foreign_dropped >= 1);
    net.run_for(Duration::from_millis(300));
    let members = vec![NodeId(1), NodeId(2), NodeId(9)];
    for i in [0, 1, j] {
        assert_eq!(net.nodes[i].info().members, members, "node {i}");
    }
    assert_eq!(net.nodes[j].info().incarnation, 0);
    net.nodes[j]
        .submit(net.now, Bytes::from_static(b"in"), Qos::default())
        .unwrap();
    net.run_for(Duration::from_millis(100));
    assert_eq!(net.deliveries(0).len(), 1);
    assert_eq!(net.deliveries(j).len(), 1);
}

/// A joiner still follows a newer incarnation whose ordered entries admit it (its group was
/// reset while it joined, and the new sequencer took its request).
#[test]
fn a_joiner_follows_a_newer_incarnation_that_admits_it() {
    let mut joiner = Sequencer::join(cfg(0), NodeId(9), Time::ZERO);
    joiner.handle_datagram(
        Time::ZERO,
        NodeId(4),
        &foreign_admission(4, 2, 9, 5, &[4, 9]),
    );
    let info = joiner.info();
    assert_eq!(info.incarnation, 2);
    assert_eq!(info.members, vec![NodeId(4), NodeId(9)]);
}

#[test]
fn malformed_and_foreign_datagrams_are_counted_and_dropped() {
    let mut net = Net::new(2, cfg(0));
    let before = net.deliveries(1).len();
    net.nodes[1].handle_datagram(net.now, NodeId(99), b"garbage");
    net.nodes[1].handle_datagram(net.now, NodeId(99), &[]);
    let mut buf = Vec::new();
    let h = crate::wire::Header {
        engine: crate::wire::EngineKind::Sequencer,
        ptype: ptype::JOIN_REQ,
        flags: 0,
        group: 12345,
        incarnation: 0,
        sender: NodeId(99),
    };
    packet::encode_control(&mut buf, &h, &packet::Body::JoinReq { into: None });
    net.nodes[0].handle_datagram(net.now, NodeId(99), &buf);
    assert_eq!(net.nodes[1].counters().malformed_dropped, 2);
    assert_eq!(net.nodes[0].counters().foreign_dropped, 1);
    assert_eq!(net.deliveries(1).len(), before);
    assert_eq!(net.nodes[0].info().members.len(), 2);
}

#[test]
fn everyone_leaves_at_once() {
    for lossy in [false, true] {
        let mut net = Net::new(3, cfg(0));
        for i in 0..3 {
            net.nodes[i]
                .submit(net.now, Bytes::from(vec![i as u8]), Qos::default())
                .unwrap();
        }
        if lossy {
            net.drop = Some(Box::new(|c| c.index % 4 == 1));
        }
        for i in [2, 0, 1] {
            net.nodes[i].leave(net.now);
        }
        net.run_for(Duration::from_secs(12));
        for i in 0..3 {
            assert!(
                matches!(net.events[i].last(), Some(Event::Left)),
                "lossy={lossy} node {i}: {:?}",
                &net.events[i][net.events[i].len().saturating_sub(3)..]
            );
            // A leaver delivers what is ordered before its leave, its own message included.
            let d = net.deliveries(i);
            assert!(
                d.iter().any(|d| d.1 == NodeId(i as u32 + 1)),
                "lossy={lossy} node {i}"
            );
            let d0 = net.deliveries(0);
            let n = d.len().min(d0.len());
            assert_eq!(d[..n], d0[..n], "same order");
        }
    }
}

// ----- crash recovery (Amoeba paper section 5.3) ------------------------------------------------

/// Every view id names the same members at every node that installed it.
fn assert_views_agree(net: &Net) {
    let mut seen: std::collections::HashMap<u64, (usize, Vec<NodeId>)> = Default::default();
    for (i, events) in net.events.iter().enumerate() {
        for e in events {
            if let Event::View(v) = e {
                let (j, members) = seen.entry(v.id).or_insert((i, v.members.clone()));
                assert_eq!(
                    *members, v.members,
                    "view {} at node {j} and node {i}",
                    v.id
                );
            }
        }
    }
}

fn kinds(events: &[Event]) -> Vec<&'static str> {
    events
        .iter()
        .map(|e| match e {
            Event::Deliver(_) => "deliver",
            Event::View(_) => "view",
            Event::SendComplete { .. } => "complete",
            Event::Left => "left",
            Event::Loss(_) => "loss",
            Event::Reply(_) => "reply",
            Event::Lock(_) => "lock",
            Event::Forwarded(_) => "forwarded",
            Event::Recovery(Recovery::Failed { .. }) => "failed",
            Event::Recovery(Recovery::ResetFailed { .. }) => "reset-failed",
            Event::Recovery(Recovery::Reset { .. }) => "reset",
            Event::Recovery(Recovery::Expelled { .. }) => "expelled",
            Event::Recovery(Recovery::Merging { .. }) => "merging",
            Event::Recovery(Recovery::Refused { .. }) => "refused",
        })
        .collect()
}

fn last_view(events: &[Event]) -> Option<&crate::engine::View> {
    events.iter().rev().find_map(|e| match e {
        Event::View(v) => Some(v),
        _ => None,
    })
}

/// With r = 1 the sequencer crashes with messages in flight: the survivors detect it, reset,
/// agree on everything that completed, and go on under a new sequencer and incarnation.
#[test]
fn sequencer_crash_is_detected_and_the_group_resets() {
    let mut net = Net::new(4, cfg(1));
    for i in 0..20u32 {
        let sender = 1 + (i as usize % 3);
        let _ = net.nodes[sender].submit(net.now, Bytes::from(vec![i as u8; 10]), Qos::default());
        net.run_for(Duration::from_millis(1));
    }
    // Crash the sequencer (node 1) with requests still in flight.
    for i in 0..6u32 {
        let _ = net.nodes[2].submit(
            net.now,
            Bytes::from(vec![100 + i as u8; 10]),
            Qos::default(),
        );
    }
    net.down[0] = true;
    net.run_for(Duration::from_secs(3));
    for i in 1..4 {
        let k = kinds(&net.events[i]);
        assert!(k.contains(&"failed"), "node {i}: {k:?}");
        assert!(k.contains(&"reset"), "node {i}: {k:?}");
        let v = last_view(&net.events[i]).unwrap();
        assert_eq!(v.members, vec![NodeId(2), NodeId(3), NodeId(4)]);
        assert!(v.members.contains(&v.coordinator));
        let info = net.nodes[i].info();
        assert_eq!(info.incarnation, 1);
        assert!(!info.recovering);
        assert_eq!(info.rank, Some(i - 1));
    }
    // Same deliveries everywhere (total order), every completed send delivered.
    let d1 = net.deliveries(1);
    for i in 2..4 {
        assert_eq!(net.deliveries(i), d1, "node {i} disagrees");
    }
    for i in 1..4 {
        for e in &net.events[i] {
            if let Event::SendComplete { msg } = e {
                let me = net.nodes[i].node_id();
                assert!(d1.iter().any(|d| d.1 == me && d.2 == *msg));
            }
        }
    }
    // The messages submitted during the crash were resent to the new sequencer and delivered.
    assert!(
        d1.iter()
            .filter(|d| d.1 == NodeId(3) && d.3[0] >= 100)
            .count()
            == 6
    );
    // The group works again.
    let m = net.nodes[1].submit(net.now, Bytes::from_static(b"after"), Qos::default());
    assert!(m.is_ok());
    net.run_for(Duration::from_millis(200));
    for i in 1..4 {
        assert!(net.deliveries(i).iter().any(|d| &d.3[..] == b"after"));
    }
}

/// A member (not the sequencer) crashes: the sequencer notices it, and the reset leaves it out.
#[test]
fn member_crash_is_detected_by_the_sequencer() {
    let mut net = Net::new(4, cfg(0));
    net.down[3] = true;
    let _ = net.nodes[1].submit(net.now, Bytes::from_static(b"x"), Qos::default());
    net.run_for(Duration::from_secs(3));
    for i in 0..3 {
        let k = kinds(&net.events[i]);
        assert!(k.contains(&"reset"), "node {i}: {k:?}");
        assert_eq!(
            last_view(&net.events[i]).unwrap().members,
            vec![NodeId(1), NodeId(2), NodeId(3)]
        );
    }
    assert_eq!(net.nodes[0].counters().failures_detected, 1);
    assert!(net.deliveries(2).iter().any(|d| &d.3[..] == b"x"));
}

/// Manual policy: sends fail in recovery mode until the application calls ResetGroup; with
/// fewer reachable members than required, the reset fails and the group waits.
#[test]
fn manual_reset_and_min_members() {
    let mut c = cfg(0);
    c.auto_reset = false;
    let mut net = Net::new(3, c);
    net.down[0] = true;
    net.run_for(Duration::from_secs(2));
    for i in 1..3 {
        let k = kinds(&net.events[i]);
        assert!(k.contains(&"failed") && !k.contains(&"reset"), "{k:?}");
        assert_eq!(
            net.nodes[i].submit(net.now, Bytes::from_static(b"no"), Qos::default()),
            Err(SendError::GroupFailed)
        );
        assert!(net.nodes[i].info().recovering);
    }
    // Asking for all three members cannot succeed: the reset fails and keeps waiting.
    net.nodes[1].reset(net.now, 3).unwrap();
    net.run_for(Duration::from_secs(2));
    assert!(kinds(&net.events[1]).contains(&"reset-failed"));
    assert!(!kinds(&net.events[1]).contains(&"reset"));
    // Two will do.
    net.nodes[2].reset(net.now, 2).unwrap();
    net.nodes[1].reset(net.now, 2).unwrap();
    net.run_for(Duration::from_secs(2));
    for i in 1..3 {
        assert!(
            kinds(&net.events[i]).contains(&"reset"),
            "{:?}",
            kinds(&net.events[i])
        );
    }
    assert!(net.nodes[2]
        .submit(net.now, Bytes::from_static(b"yes"), Qos::default())
        .is_ok());
    net.run_for(Duration::from_millis(200));
    assert!(net.deliveries(1).iter().any(|d| &d.3[..] == b"yes"));
}

/// A member cut off for longer than the failure timeout is left out of the new group; when it
/// comes back it learns so from the newer incarnation and is expelled, without disturbing it.
#[test]
fn a_member_that_comes_back_is_expelled() {
    let mut net = Net::new(4, cfg(0));
    net.down[3] = true;
    net.run_for(Duration::from_secs(3));
    assert!(kinds(&net.events[0]).contains(&"reset"));
    net.down[3] = false;
    let before = net.deliveries(1).len();
    let _ = net.nodes[1].submit(net.now, Bytes::from_static(b"new"), Qos::default());
    net.run_for(Duration::from_secs(3));
    assert!(
        kinds(&net.events[3]).contains(&"expelled"),
        "{:?}",
        kinds(&net.events[3])
    );
    assert_eq!(net.deliveries(1).len(), before + 1);
    assert!(net
        .nodes
        .iter()
        .take(3)
        .any(|n| n.counters().foreign_dropped > 0));
    assert_eq!(last_view(&net.events[1]).unwrap().members.len(), 3);
}

/// An expelled member that joins again (`Engine::rejoin`) is admitted as a new member, and its
/// message numbering goes on, so its next message is ordered at once (the sequencer learns where
/// its stream stands from the request) and never confused with one it sent before.
#[test]
fn an_expelled_member_rejoins_and_its_stream_goes_on() {
    let mut net = Net::new(4, cfg(0));
    let first = net.nodes[3]
        .submit(net.now, Bytes::from_static(b"before"), Qos::default())
        .unwrap();
    net.run_for(Duration::from_millis(100));
    net.down[3] = true;
    net.run_for(Duration::from_secs(3));
    net.down[3] = false;
    let _ = net.nodes[1].submit(net.now, Bytes::from_static(b"new"), Qos::default());
    net.run_for(Duration::from_secs(3));
    assert!(kinds(&net.events[3]).contains(&"expelled"));
    net.nodes[3].rejoin(net.now, None).unwrap();
    net.run_for(Duration::from_secs(2));
    assert_eq!(last_view(&net.events[0]).unwrap().members.len(), 4);
    assert_eq!(net.nodes[3].info().members.len(), 4);
    let again = net.nodes[3]
        .submit(net.now, Bytes::from_static(b"after"), Qos::default())
        .unwrap();
    assert!(
        again > first,
        "message numbers go on: {again} after {first}"
    );
    net.run_for(Duration::from_secs(1));
    for i in 0..4 {
        assert!(
            net.deliveries(i)
                .iter()
                .any(|d| d.1 == NodeId(4) && d.2 == again),
            "member {i} delivered the rejoined member's message"
        );
    }
    assert!(net.events[3]
        .iter()
        .any(|e| matches!(e, Event::SendComplete { msg } if *msg == again)));
}

/// The coordinator of a recovery crashes in the middle of it, just before it would send the
/// result: the others notice its silence, invite in turn, and the group is rebuilt from the
/// three that are left (r = 2).
#[test]
fn coordinator_crash_during_recovery_restarts_it() {
    let mut net = Net::new(5, cfg(2));
    for i in 0..10u8 {
        let sender = 1 + i as usize % 4;
        let _ = net.nodes[sender].submit(net.now, Bytes::from(vec![i; 8]), Qos::default());
        net.run_for(Duration::from_millis(1));
    }
    // Node 2 has the lowest id among equals: it will coordinate, and crash instead of sending
    // the result.
    net.crash_on_send = Some((1, ptype::RESULT));
    net.down[0] = true;
    net.run_for(Duration::from_secs(5));
    assert!(net.down[1], "the coordinator never got to send its result");
    for i in 2..5 {
        let k = kinds(&net.events[i]);
        assert!(k.contains(&"reset"), "node {i}: {k:?}");
        assert_eq!(
            last_view(&net.events[i]).unwrap().members,
            vec![NodeId(3), NodeId(4), NodeId(5)]
        );
    }
    assert_eq!(net.deliveries(2), net.deliveries(3));
    assert_eq!(net.deliveries(2), net.deliveries(4));
    assert_eq!(net.deliveries(2).len(), 10);
}

/// A member that lags (it lost every ordered datagram since the third message, the joiner's
/// join included) when the sequencer crashes, with a joiner that ranks first among the
/// votes (the lowest id, holding as much as the best): the joiner holds the history from its
/// join on only, so it cannot give the laggard what it lacks and must hand the reset over to a
/// member that can. The others delivered what the laggard lacks, and still hold it (the
/// laggard keeps stability below it). Judging the holder by what it has not delivered yet, the
/// joiner found none, and the reset waited for ever (the crash sweep's seeds 22 and 56 of
/// `an_old_sequencer_wakes_with_joins_in_its_buffer`).
#[test]
fn a_joiner_coordinator_hands_a_laggard_to_a_member_that_still_holds_what_it_lacks() {
    let cfg = cfg(1);
    let mut net = Net::with(());
    net.tick = Some(Duration::from_millis(1));
    net.add(Box::new(Sequencer::create(
        cfg.clone(),
        NodeId(2),
        Time::ZERO,
    )));
    for id in 3..=5 {
        net.add(Box::new(Sequencer::join(
            cfg.clone(),
            NodeId(id),
            Time::ZERO,
        )));
    }
    net.run_for(Duration::from_millis(500));
    for i in 0..3u8 {
        let _ = net.nodes[1].submit(net.now, Bytes::from(vec![i; 8]), Qos::default());
        net.run_for(Duration::from_millis(5));
    }
    net.run_for(Duration::from_millis(100));
    assert_eq!(net.deliveries(3).len(), 3);
    // Node 5 (index 3) lags from here: it loses everything ordered, repairs included.
    net.drop = Some(Box::new(|c| c.to == 3 && c.ptype == ptype::ORDERED));
    let send = |net: &mut Net, i: u8| {
        let _ =
            net.nodes[1 + i as usize % 2].submit(net.now, Bytes::from(vec![i; 8]), Qos::default());
        net.run_for(Duration::from_millis(5));
    };
    for i in 0..4 {
        send(&mut net, i);
    }
    net.run_for(Duration::from_millis(100));
    let joiner = net.add(Box::new(Sequencer::join(cfg.clone(), NodeId(1), net.now)));
    net.run_for(Duration::from_millis(300));
    assert_eq!(
        net.nodes[joiner].info().members.len(),
        5,
        "the join was ordered"
    );
    for i in 4..10 {
        send(&mut net, i);
    }
    net.run_for(Duration::from_millis(200));
    let delivered = net.deliveries(1).len();
    assert_eq!(delivered, 13);
    assert_eq!(net.deliveries(2).len(), delivered);
    assert_eq!(net.deliveries(3).len(), 3, "node 5 lags");
    // The sequencer crashes; from now on nothing is lost.
    net.down[0] = true;
    net.drop = None;
    net.run_for(Duration::from_secs(10));
    for i in 1..5 {
        let k = kinds(&net.events[i]);
        assert!(k.contains(&"reset"), "node {i}: {k:?}");
        assert_eq!(
            last_view(&net.events[i]).unwrap().members.len(),
            4,
            "node {i}: {:?}",
            last_view(&net.events[i])
        );
    }
    assert_eq!(
        net.deliveries(3),
        net.deliveries(1),
        "the laggard caught up"
    );
    assert_eq!(net.deliveries(3).len(), delivered);
}

/// Roles, not claims: an ordered-data packet (a real one, recorded) claiming a sender that is not
/// a member of the view changes nothing at a member, and is counted.
#[test]
fn ordering_state_only_from_members_of_the_view() {
    let mut net = Net::new(3, cfg(0));
    net.nodes[0]
        .submit(net.now, Bytes::from_static(b"real"), Qos::default())
        .unwrap();
    let mut buf = Vec::new();
    let mut ordered = None;
    while let Some(_t) = net.nodes[0].poll_transmit(net.now, &mut buf) {
        if buf[4] == ptype::ORDERED {
            ordered = Some(buf.clone());
        }
    }
    let mut forged = ordered.expect("the sequencer multicast the message");
    // The header's sender field: an id nobody in the view has.
    forged[16..20].copy_from_slice(&99u32.to_be_bytes());
    let before = net.deliveries(1).len();
    net.nodes[1].handle_datagram(net.now, NodeId(99), &forged);
    while let Some(e) = net.nodes[1].poll_event() {
        net.events[1].push(e);
    }
    assert_eq!(net.deliveries(1).len(), before);
    let refused = net.nodes[1]
        .engine_counters()
        .into_iter()
        .find(|(n, _)| *n == "ordering_refused")
        .map(|(_, v)| v);
    assert_eq!(refused, Some(1));
}

/// A flood of requests far ahead of a member's stream does not fill the sequencer's table of
/// waiting requests, and a request announcing too many fragments is not ordered: both are
/// refused and counted, and the members' messages still go through.
#[test]
fn far_ahead_requests_are_refused_and_counted() {
    use crate::wire::{EngineKind, Header};
    let mut net = Net::new(3, cfg(0));
    let header = Header {
        engine: EngineKind::Sequencer,
        ptype: ptype::BCAST_REQ_PB,
        flags: 0,
        group: 7,
        incarnation: 0,
        sender: NodeId(2),
    };
    let mut buf = Vec::new();
    for k in 0..10_000u64 {
        let mut w = packet::ReqWriter::new(&mut buf, &header, 0, 0, 0);
        w.push(&packet::ReqEntry {
            pnum: 1_000_000 + k,
            frag_index: 0,
            frag_count: 1,
            payload: b"far",
        });
        net.nodes[0].handle_datagram(net.now, NodeId(2), &buf);
    }
    let far = net.nodes[0]
        .engine_counters()
        .into_iter()
        .find(|(n, _)| *n == "requests_far_ahead")
        .map(|(_, v)| v);
    assert_eq!(far, Some(10_000));
    // A fragment count beyond what the largest message needs is not ordered either.
    let mut w = packet::ReqWriter::new(&mut buf, &header, 0, 0, 0);
    w.push(&packet::ReqEntry {
        pnum: 1,
        frag_index: 0,
        frag_count: u16::MAX,
        payload: b"huge",
    });
    net.nodes[0].handle_datagram(net.now, NodeId(2), &buf);
    let oversized = net.nodes[0]
        .engine_counters()
        .into_iter()
        .find(|(n, _)| *n == "requests_oversized")
        .map(|(_, v)| v);
    assert_eq!(oversized, Some(1));
    for i in 0..3 {
        net.nodes[i]
            .submit(net.now, Bytes::from(vec![i as u8]), Qos::default())
            .unwrap();
    }
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.deliveries(1).len(), 3);
}

/// A request lost on its way to the sequencer while a later one arrives: the sequencer asks
/// for the missing one at once (BC_REQGAP) and the sender repeats only it, long before its
/// retransmission timeout (1 s here) would have.
#[test]
fn a_lost_request_is_asked_for_at_once() {
    let mut c = cfg_paper(0);
    c.retrans_timeout_ms = 1000;
    c.min_retrans_timeout_ms = 1000;
    c.min_request_timeout_ms = 1000;
    c.max_retrans_timeout_ms = 1000;
    let mut net = Net::new(3, c);
    net.sent.clear();
    let lost = net.datagrams;
    net.drop = Some(Box::new(move |c| c.index == lost));
    net.nodes[1]
        .submit(net.now, Bytes::from_static(b"first"), Qos::default())
        .unwrap();
    net.flush();
    assert_eq!(
        net.sent_types(),
        vec![ptype::BCAST_REQ_PB],
        "the lost request"
    );
    assert!(net.deliveries(2).is_empty());
    net.nodes[1]
        .submit(net.now, Bytes::from_static(b"second"), Qos::default())
        .unwrap();
    net.run_for(Duration::from_millis(20));
    assert!(
        net.sent_types().contains(&ptype::REQ_GAP),
        "{:?}",
        net.sent_types()
    );
    for i in 0..3 {
        let got: Vec<Bytes> = net.deliveries(i).into_iter().map(|d| d.3).collect();
        assert_eq!(got, vec![&b"first"[..], &b"second"[..]], "node {i}");
    }
    assert_eq!(engine_counter(&net.nodes[0], "request_gaps_asked"), 1);
    assert_eq!(engine_counter(&net.nodes[1], "request_gaps_filled"), 1);
    // Only the missing request was repeated: no go-back-N.
    let requests = net
        .sent_types()
        .iter()
        .filter(|t| **t == ptype::BCAST_REQ_PB)
        .count();
    assert_eq!(requests, 3, "{:?}", net.sent_types());
}

/// Three requests in a row lost on their way to the sequencer, nothing after them: the
/// sender's timer fires once and sends the first and the last again (not the whole window);
/// the sequencer sees the gap between them and asks for it; all three are delivered
/// everywhere, in order, after one timeout.
#[test]
fn a_lost_run_of_requests_is_recovered_with_one_timeout() {
    let mut c = cfg_paper(0);
    c.retrans_timeout_ms = 50;
    c.min_retrans_timeout_ms = 50;
    c.min_request_timeout_ms = 50;
    c.max_retrans_timeout_ms = 50;
    let mut net = Net::new(3, c);
    net.sent.clear();
    let lost = net.datagrams;
    net.drop = Some(Box::new(move |c| (lost..lost + 3).contains(&c.index)));
    for p in [&b"one"[..], b"two", b"three"] {
        net.nodes[1]
            .submit(net.now, Bytes::from_static(p), Qos::default())
            .unwrap();
        net.flush();
    }
    assert_eq!(
        net.sent_types(),
        vec![ptype::BCAST_REQ_PB; 3],
        "the lost requests"
    );
    net.run_for(Duration::from_millis(80));
    for i in 0..3 {
        let got: Vec<Bytes> = net.deliveries(i).into_iter().map(|d| d.3).collect();
        assert_eq!(got, vec![&b"one"[..], b"two", b"three"], "node {i}");
    }
    assert_eq!(engine_counter(&net.nodes[1], "request_timeouts"), 1);
    assert_eq!(engine_counter(&net.nodes[0], "request_gaps_asked"), 1);
    // First and last after the timeout, then the middle one the sequencer asked for.
    let requests = net
        .sent_types()
        .iter()
        .filter(|t| **t == ptype::BCAST_REQ_PB)
        .count();
    assert_eq!(requests, 6, "{:?}", net.sent_types());
}

/// An ask for a gap that the sender has since seen ordered is stale (the request was queued
/// behind others at the sequencer, and the order overtook the ask): it is ignored, and does
/// not halve the window; a live ask sets the repair.
#[test]
fn a_stale_gap_ask_is_ignored() {
    let mut s = super::sender::Sender::new(&cfg(0));
    s.own_ordered = 5;
    s.max_sent_pnum = 9;
    let window = s.cwnd.get();
    assert!(!s.on_gap(3, 8, Time::ZERO));
    assert!(s.repair.is_none());
    assert_eq!(s.cwnd.get(), window);
    assert!(s.on_gap(7, 12, Time::ZERO));
    assert_eq!(s.repair, Some((7, 10)), "clipped to what was sent");
}

/// The end of `rmcast demo --kill-sequencer` as CI once saw it: after a reset, the two other
/// members leave and then the sequencer, which as the last member hands over to nobody; the
/// multicasts of the leaves are lost. A sequencer that went at once stranded both leavers: they
/// found it failed, were a majority of the last view they held, and reset into a view 6 of
/// their own, while the sequencer's view 6 had one of them leave. It must stay until each
/// leaver has its leave (repaired once the loss ends), and every view id names one membership.
#[test]
fn the_last_sequencer_stays_until_the_leavers_have_their_leaves() {
    let mut net = Net::new(4, cfg(1));
    net.down[0] = true;
    net.run_for(Duration::from_secs(3));
    let coordinator = last_view(&net.events[1]).unwrap().coordinator;
    let s = (net.nodes.iter())
        .position(|n| n.node_id() == coordinator)
        .unwrap();
    for i in (1..4).filter(|&i| i != s) {
        net.nodes[i].leave(net.now);
    }
    // Its ordered data is lost for 20 ms.
    let until = net.now + Duration::from_millis(20);
    net.drop = Some(Box::new(move |c| {
        c.from == s && c.ptype == ptype::ORDERED && c.at < until
    }));
    net.run_for(Duration::from_millis(2));
    net.nodes[s].leave(net.now);
    net.run_for(Duration::from_secs(10));
    assert_views_agree(&net);
    for i in 1..4 {
        let k = kinds(&net.events[i]);
        assert_eq!(
            k.iter().filter(|k| **k == "reset").count(),
            1,
            "node {i}: {k:?}"
        );
        assert_eq!(k.last(), Some(&"left"), "node {i}: {k:?}");
    }
    // The sequencer ordered both leaves before its own, and went only once they were held.
    let v = last_view(&net.events[s]).unwrap();
    assert_eq!((v.members.len(), v.left), (0, Some(coordinator)));
}

/// A group of two whose sequencer leaves (the two-person chat): the other member installs a
/// view of itself alone as sequencer, never takes the leave for a failure, and sends and
/// delivers afterwards; the leaver's leave completes. Each run loses one datagram sent after the
/// leave (the leave's broadcast, the farewell, a sync, an answer...), or two in a row, so
/// that every message of the handover is lost once; with r = 0 and r = 1, under the default
/// majority rule.
#[test]
fn the_sequencer_of_two_leaves_and_the_other_goes_on_alone() {
    for r in [0u8, 1] {
        for (first, count) in (0..24u64).map(|k| (k, 1)).chain((0..24u64).map(|k| (k, 2))) {
            let mut net = Net::new(2, cfg(r));
            net.nodes[1]
                .submit(net.now, Bytes::from_static(b"before"), Qos::default())
                .unwrap();
            net.run_for(Duration::from_millis(200));
            let base = net.datagrams;
            net.drop = Some(Box::new(move |c| {
                c.index >= base + first && c.index < base + first + count
            }));
            net.nodes[0].leave(net.now);
            net.run_for(Duration::from_millis(3000));
            let case = format!(
                "r {r}, datagrams {first}..{} after the leave lost",
                first + count
            );
            assert!(
                net.events[0].iter().any(|e| matches!(e, Event::Left)),
                "{case}: the sequencer did not leave: {}",
                net.nodes[0].describe()
            );
            let k = kinds(&net.events[1]);
            assert!(
                !k.contains(&"failed") && !k.contains(&"reset-failed"),
                "{case}: {k:?}"
            );
            let v = last_view(&net.events[1]).expect("a view");
            assert_eq!(v.members, [NodeId(2)], "{case}");
            assert_eq!(v.coordinator, NodeId(2), "{case}");
            assert_eq!(v.left, Some(NodeId(1)), "{case}");
            let info = net.nodes[1].info();
            assert!(!info.recovering, "{case}");
            // It orders alone now: what it sends is delivered and completes.
            net.nodes[1]
                .submit(net.now, Bytes::from_static(b"alone"), Qos::default())
                .unwrap();
            net.run_for(Duration::from_millis(100));
            let d = net.deliveries(1);
            assert_eq!(
                d.iter().map(|d| &d.3[..]).collect::<Vec<_>>(),
                [&b"before"[..], b"alone"],
                "{case}"
            );
            assert_eq!(
                net.events[1]
                    .iter()
                    .filter(|e| matches!(e, Event::SendComplete { .. }))
                    .count(),
                2,
                "{case}"
            );
            // Long after: still alone, still no failure.
            net.run_for(Duration::from_millis(3000));
            let k = kinds(&net.events[1]);
            assert!(!k.contains(&"failed"), "{case}: {k:?}");
        }
    }
}

/// The survivor of a group of two whose peer crashed (kill -9) waits in recovery mode under
/// the default majority rule (it may be the minority side of a partition); asked to leave, it
/// has nobody to order or hear its leave, and leaves at once instead of waiting out the
/// driver's leave timeout. With the peer alive and voting, a leave in recovery still waits for
/// the reset.
#[test]
fn the_survivor_of_two_waiting_in_recovery_leaves_at_once() {
    for sequencer_crashes in [false, true] {
        let mut net = Net::new(2, cfg(0));
        let (gone, stay) = if sequencer_crashes { (0, 1) } else { (1, 0) };
        net.down[gone] = true;
        net.run_for(Duration::from_secs(3));
        let k = kinds(&net.events[stay]);
        assert!(
            k.contains(&"failed") && k.contains(&"reset-failed"),
            "{k:?}"
        );
        assert!(net.nodes[stay].info().recovering);
        net.nodes[stay].leave(net.now);
        while let Some(e) = net.nodes[stay].poll_event() {
            net.events[stay].push(e);
        }
        assert_eq!(
            kinds(&net.events[stay]).last(),
            Some(&"left"),
            "sequencer crashed: {sequencer_crashes}"
        );
        assert_eq!(net.nodes[stay].poll_timeout(), None);
    }
    // Three members, one crashed: the two others reset together, and a leave asked for during
    // the recovery waits for it (it is ordered in the new group).
    let mut net = Net::new(3, cfg(0));
    net.down[2] = true;
    net.run_for(Duration::from_millis(1500));
    assert!(net.nodes[1].info().recovering || kinds(&net.events[1]).contains(&"reset"));
    net.nodes[1].leave(net.now);
    net.run_for(Duration::from_secs(3));
    let k = kinds(&net.events[1]);
    assert!(k.contains(&"reset") && k.last() == Some(&"left"), "{k:?}");
    assert_eq!(last_view(&net.events[0]).unwrap().members, [NodeId(1)]);
}

/// A header for a datagram forged by member `from` of the test group, in incarnation 0.
fn forged_header(ptype: u8, from: u32) -> crate::wire::Header {
    crate::wire::Header {
        engine: crate::wire::EngineKind::Sequencer,
        ptype,
        flags: 0,
        group: 7,
        incarnation: 0,
        sender: NodeId(from),
    }
}

/// BC_RESULT forged by member `from`: a reset to `incarnation` at `seq`, founding `members`
/// with `coordinator` as sequencer.
fn forged_result(
    from: u32,
    incarnation: u32,
    seq: u64,
    coordinator: u32,
    members: &[u32],
) -> Vec<u8> {
    let members: Vec<NodeId> = members.iter().map(|&m| NodeId(m)).collect();
    let view = crate::common::view_bytes(1, NodeId(coordinator), &members);
    let mut buf = Vec::new();
    packet::encode_control(
        &mut buf,
        &forged_header(ptype::RESULT, from),
        &packet::Body::Result {
            incarnation,
            seq,
            stable: 0,
            settled: true,
            view: &view,
        },
    );
    buf
}

/// Roles, not claims: a member that is not the sequencer forges BC_RESULT (which passes the
/// incarnation filter) to the other members of a 3-member group in normal operation: one that
/// removes everybody (its sender included), one that names the sequencer as coordinator of a
/// group without the receiver, one that founds a group of the forger alone, and one that makes
/// the forger the sequencer. Each is refused and counted; nobody is expelled or reset, the view
/// and the incarnation stay, and the group goes on delivering in one total order.
#[test]
fn a_forged_result_from_a_member_changes_nothing() {
    let cases: [(&str, u32, u32, &[u32]); 4] = [
        ("removes everybody", 1, 1, &[]),
        ("not from the coordinator it names", 1, 1, &[1, 3]),
        ("a group of the forger alone", 1, 3, &[3]),
        ("installs the forger as sequencer", 1, 3, &[1, 2, 3]),
    ];
    for (case, incarnation, coordinator, members) in cases {
        let mut net = Net::new(3, cfg(0));
        net.nodes[0]
            .submit(net.now, Bytes::from_static(b"before"), Qos::default())
            .unwrap();
        net.run_for(Duration::from_millis(100));
        let views: Vec<_> = (0..3).map(|i| net.nodes[i].info().members).collect();
        for to in 0..2 {
            let seq = net.nodes[to].hist.held_next;
            let forged = forged_result(3, incarnation, seq, coordinator, members);
            net.nodes[to].handle_datagram(net.now, NodeId(3), &forged);
        }
        for round in 0..5u8 {
            for i in 0..3 {
                let _ =
                    net.nodes[i].submit(net.now, Bytes::from(vec![i as u8, round]), Qos::default());
            }
            net.run_for(Duration::from_millis(20));
        }
        net.run_for(Duration::from_millis(500));
        for (i, view) in views.iter().enumerate() {
            let k = kinds(&net.events[i]);
            assert!(
                !k.contains(&"expelled") && !k.contains(&"reset") && !k.contains(&"failed"),
                "{case}: node {i}: {k:?}"
            );
            let info = net.nodes[i].info();
            assert_eq!(info.incarnation, 0, "{case}: node {i}");
            assert_eq!(&info.members, view, "{case}: node {i}");
            assert_eq!(net.deliveries(i).len(), 16, "{case}: node {i}");
        }
        assert_eq!(net.deliveries(0), net.deliveries(1), "{case}");
        assert_eq!(net.deliveries(0), net.deliveries(2), "{case}");
        for to in 0..2 {
            let refused = engine_counter(&net.nodes[to], "results_refused");
            assert_eq!(refused, 1, "{case}: node {to}");
        }
    }
}

/// Roles, not claims: a member of the view that is not the sequencer forges ordered data (a
/// message of its own at the next sequence number, accepted at once) and an accept to another
/// member. Both are refused and counted: the member delivers only what the sequencer ordered,
/// in the same order as the others.
#[test]
fn ordered_data_and_accepts_only_from_the_sequencer() {
    let mut net = Net::new(3, cfg(1));
    net.nodes[0]
        .submit(net.now, Bytes::from_static(b"before"), Qos::default())
        .unwrap();
    net.run_for(Duration::from_millis(100));
    // Forged while the sequencer runs (heard within the last 100 ms): no member may take its
    // role.
    let next = net.nodes[0].seq_state().next_seq;
    let state = packet::SeqState {
        accepted_next: next + 1,
        stable: 0,
        next_seq: next + 1,
        complete_next: next + 1,
    };
    let mut buf = Vec::new();
    let mut w =
        packet::OrderedWriter::new(&mut buf, &forged_header(ptype::ORDERED, 3), state, next);
    w.push(&packet::OrderedEntry {
        kind: packet::EntryKind::Data,
        has_payload: true,
        sender: NodeId(3),
        pnum: 1_000,
        frag_index: 0,
        frag_count: 1,
        payload: b"forged",
    });
    net.nodes[1].handle_datagram(net.now, NodeId(3), &buf);
    let mut accept = Vec::new();
    packet::encode_control(
        &mut accept,
        &forged_header(ptype::ACCEPT, 3),
        &packet::Body::Accept(state),
    );
    net.nodes[1].handle_datagram(net.now, NodeId(3), &accept);
    for round in 0..5u8 {
        for i in 0..3 {
            let _ = net.nodes[i].submit(net.now, Bytes::from(vec![i as u8, round]), Qos::default());
        }
        net.run_for(Duration::from_millis(20));
    }
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.deliveries(1).len(), 16);
    assert!(net.deliveries(1).iter().all(|d| &d.3[..] != b"forged"));
    assert_eq!(net.deliveries(0), net.deliveries(1));
    assert_eq!(net.deliveries(0), net.deliveries(2));
    assert_views_agree(&net);
    assert_eq!(engine_counter(&net.nodes[1], "ordering_refused"), 2);
}

// ----- views longer than a datagram -------------------------------------------------------------

/// A group whose views outgrow a datagram: 120 members with 256-byte datagrams (a view entry of
/// 494 bytes), every datagram on the wire within the size, one part in seven lost. Every member
/// installs every view, a crash resets the group (its BC_RESULT goes in parts too), and the group
/// still orders messages afterwards.
#[test]
fn views_longer_than_a_datagram_go_in_parts() {
    use std::cell::Cell;
    use std::rc::Rc;
    let n = 120;
    let c = Config {
        max_datagram_bytes: 256,
        ..cfg(0)
    };
    let largest = Rc::new(Cell::new(0usize));
    let parts = Rc::new(Cell::new(0u64));
    let (l, p) = (largest.clone(), parts.clone());
    let mut net = Net::with(());
    net.tick = Some(Duration::from_millis(1));
    net.drop = Some(Box::new(move |copy| {
        l.set(l.get().max(crate::wire::HEADER_LEN + copy.body.len()));
        if copy.ptype == crate::common::parts::PTYPE_PARTS {
            p.set(p.get() + 1);
            return p.get() % 7 == 0;
        }
        false
    }));
    net.add(Box::new(Sequencer::create(
        c.clone(),
        NodeId(1),
        Time::ZERO,
    )));
    for i in 1..n {
        let id = NodeId(i as u32 + 1);
        net.add(Box::new(Sequencer::join(c.clone(), id, Time::ZERO)));
    }
    net.run_for(Duration::from_secs(3));
    let all: Vec<NodeId> = (1..=n as u32).map(NodeId).collect();
    for i in 0..n {
        let mut m = net.nodes[i].info().members;
        m.sort();
        assert_eq!(m, all, "node {i}");
    }
    assert!(parts.get() > 0, "views went in parts");
    assert!(largest.get() <= 256, "a {}-byte datagram", largest.get());
    assert_views_agree(&net);
    // A member crashes: the reset's result names 119 members.
    net.down[n - 1] = true;
    net.run_for(Duration::from_secs(5));
    for i in 0..n - 1 {
        let k = kinds(&net.events[i]);
        assert!(k.contains(&"reset"), "node {i}: {k:?}");
        assert_eq!(net.nodes[i].info().members.len(), n - 1, "node {i}");
        assert!(!net.nodes[i].info().recovering);
    }
    assert_views_agree(&net);
    net.nodes[3]
        .submit(net.now, Bytes::from_static(b"after"), Qos::default())
        .unwrap();
    net.run_for(Duration::from_millis(500));
    for i in 0..n - 1 {
        assert!(
            net.deliveries(i).iter().any(|d| &d.3[..] == b"after"),
            "node {i}"
        );
    }
    assert!(largest.get() <= 256, "a {}-byte datagram", largest.get());
}
