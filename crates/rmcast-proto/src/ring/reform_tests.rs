//! Reformations that must end with the ring whole: a member suspected wrongly (it was only
//! cut off for a while) is brought back in by the reformation instead of being given up.

use super::RingFactory;
use crate::engine::{Engine, Event, NodeId, Qos, Recovery, Time};
use crate::registry::{EngineFactory, EngineParams, EngineSettings, Role};
use crate::testnet::Net;
use bytes::Bytes;
use std::time::Duration;

type RingNet = Net<dyn Engine>;

fn build(role: Role, id: u32, now: Time) -> Box<dyn Engine> {
    RingFactory::DEFAULT.build(&EngineParams {
        role,
        group: 7,
        me: NodeId(id),
        max_datagram_bytes: 1400,
        now,
        seed: u64::from(id),
        settings: &EngineSettings::default(),
    })
}

/// A ring of two: node 0 creates it, node 1 joins.
fn ring_of_two() -> RingNet {
    let mut net = RingNet::with(());
    net.add(build(Role::Create, 0, Time::ZERO));
    let mut e = build(Role::Join, 1, net.now);
    e.handle_timeout(net.now);
    net.add(e);
    net.run_for(Duration::from_secs(1));
    for i in 0..2 {
        assert_eq!(net.nodes[i].info().members.len(), 2, "member {i}");
    }
    net
}

/// A ring of two in which one member stops hearing the other long enough to find it failed
/// (the other is alive: only its datagrams are lost). A reformation of two needs both, so the
/// initiator must poll the other with its Recovery Start; it used to decide in its first round,
/// alone (all but one had answered: itself), give up, and do so again at every retry without
/// ever sending the Start, while the other stopped its token: the ring never recovered (the
/// every-engine sweep's ring seed 108). Now the two reform together and go on.
#[test]
fn a_ring_of_two_reforms_with_a_member_wrongly_found_failed() {
    let mut net = ring_of_two();
    net.drop = Some(Box::new(|c| c.from == 1 && c.to == 0));
    net.run_for(Duration::from_secs(3));
    let failed = |net: &RingNet, i: usize| {
        (net.events[i].iter()).any(|e| matches!(e, Event::Recovery(Recovery::Failed { .. })))
    };
    assert!(failed(&net, 0), "node 0 found node 1 failed");
    net.drop = None;
    net.run_for(Duration::from_secs(10));
    for i in 0..2 {
        let info = net.nodes[i].info();
        assert_eq!(info.members.len(), 2, "member {i}");
        assert!(!info.recovering, "member {i}");
    }
    let before: Vec<usize> = (0..2).map(|i| net.events[i].len()).collect();
    for i in 0..2 {
        net.nodes[i]
            .submit(net.now, Bytes::from_static(b"after"), Qos::TotallyOrdered)
            .unwrap();
        net.poll(i);
    }
    net.run_for(Duration::from_secs(1));
    let got = |i: usize| -> Vec<(NodeId, u64)> {
        (net.events[i][before[i]..].iter())
            .filter_map(|e| match e {
                Event::Deliver(d) => Some((d.sender, d.msg)),
                _ => None,
            })
            .collect()
    };
    assert_eq!(got(0).len(), 2);
    assert_eq!(got(1), got(0));
}

/// A ring of three whose member 2 asks to leave while nothing it sends arrives (it hears the
/// others): its leave is never ordered, the others find it failed and reform without it. Once
/// its datagrams arrive again, they tell it it is out; it is in no reformation of its own (it
/// never found anyone failed), and a leaver used to take that for its own removal, to be
/// caught up with, and wait for ever for ACKs nobody keeps (every-engine ring seeds 3119, 7265,
/// 9533, 9576). Still not one ACK further once the others let go of what it lacks, it ends.
/// This small case ends without that rule as well; the four seeds, replayed by
/// `every_engine_sweep`'s `seeds_once_failing`, are what fail without it.
#[test]
fn a_leaver_the_ring_reformed_without_ends() {
    let mut net = RingNet::with(());
    net.add(build(Role::Create, 0, Time::ZERO));
    for i in 1..3 {
        let mut e = build(Role::Join, i, net.now);
        e.handle_timeout(net.now);
        net.add(e);
        net.run_for(Duration::from_millis(300));
    }
    net.run_for(Duration::from_secs(1));
    net.drop = Some(Box::new(|c| c.from == 2));
    net.nodes[2].leave(net.now);
    net.poll(2);
    net.run_for(Duration::from_secs(4));
    for i in 0..2 {
        assert_eq!(net.nodes[i].info().members.len(), 2, "member {i}");
    }
    net.drop = None;
    net.run_for(Duration::from_secs(5));
    let ended = (net.events[2].iter())
        .any(|e| matches!(e, Event::Left | Event::Recovery(Recovery::Expelled { .. })));
    assert!(ended, "{}", net.nodes[2].describe());
}

/// A reformation that removes a member recovers that member's packets from the next number it
/// had ordered, up to `MAX_RECOVERED` more. A forged ACK can put that number at the last one,
/// `u64::MAX`: the range's end used to be `from + MAX_RECOVERED` and wrapped (`ring_state`
/// fuzzing, `fuzz/corpus/ring_state/bug-recovered-range-at-the-last-number`); it saturates
/// now. Nothing is held there, so the list is the New List alone, naming the members kept and
/// the removed member's next number left as it was.
#[test]
fn a_recovered_range_at_the_last_sequence_number_does_not_overflow() {
    use super::packet::{self, AckBody, SyncPoint};
    let net = super::sweep_tests::ring(3);
    let mut site = net.nodes.into_iter().next().expect("member 0");
    let removed = NodeId(2);
    site.order.ordered_next.insert(removed, u64::MAX);
    let old = site.membership.ring.clone();
    assert!(old.contains(&removed));
    let kept: Vec<NodeId> = old.iter().copied().filter(|&m| m != removed).collect();
    let target = SyncPoint {
        acks: site.order.next_ack,
        data: vec![(removed, u64::MAX)],
        lost: vec![],
    };
    let list = site.build_new_list(9, &old, &kept, &target);
    assert_eq!(list.version, 9);
    assert_eq!(
        list.acks.len(),
        1,
        "no recovered entries, only the New List"
    );
    let datagram = crate::wire::decode(&list.acks[0]).expect("an ACK datagram");
    let ack = packet::Ack::decode(datagram.body).expect("an ACK");
    match ack.body {
        AckBody::NewList(l) => assert_eq!(l.members, kept),
        AckBody::Entries(e) => panic!("recovered entries {e:?}"),
    }
}
