//! The ring's faults found by the every-engine sweep (`rmcast-sim`'s `every_engine_sweep`),
//! each reduced to the few members and datagrams that make it: a resilient slot delivered by
//! a token site cut off alone, NACKs repeated at the pace of a round slowed by the repairs
//! themselves, a voter waiting for an initiator that came back as a new member, and a joiner
//! whose admission was lost while the site that admitted it reformed.

use super::engine::Ring;
use super::packet::{self, RecoveryVote, SyncPoint};
use super::Config;
use crate::engine::{Destination, Engine, Event, NodeId, Qos, Recovery, Time};
use crate::registry::{EngineParams, EngineSettings, Role};
use crate::testnet::Net;
use crate::wire::{EngineKind, Header};
use bytes::Bytes;
use std::time::Duration;

pub(super) type RingNet = Net<Ring>;

pub(super) fn build(role: Role, id: u32, now: Time) -> Box<Ring> {
    build_with(role, id, now, Config::default())
}

/// [`build`] with configuration `cfg`.
pub(super) fn build_with(role: Role, id: u32, now: Time, cfg: Config) -> Box<Ring> {
    Box::new(Ring::with_config(
        &EngineParams {
            role,
            group: 7,
            me: NodeId(id),
            max_datagram_bytes: 1400,
            now,
            seed: u64::from(id),
            settings: &EngineSettings::default(),
        },
        cfg,
    ))
}

/// Node 0 creates the ring, nodes `1..n` join one by one; the ring is then quiescent.
pub(super) fn ring(n: u32) -> RingNet {
    let mut net = RingNet::with(());
    net.add(build(Role::Create, 0, Time::ZERO));
    for i in 1..n {
        let mut e = build(Role::Join, i, net.now);
        e.handle_timeout(net.now);
        net.add(e);
        net.run_for(Duration::from_millis(300));
    }
    net.run_for(Duration::from_secs(1));
    for i in 0..n as usize {
        assert_eq!(net.nodes[i].info().members.len(), n as usize, "member {i}");
    }
    net
}

/// The slot each member delivered `sender`'s message `msg` in.
pub(super) fn slots_of(net: &RingNet, sender: usize, msg: u64) -> Vec<(usize, u64)> {
    (0..net.nodes.len())
        .flat_map(|i| {
            net.events[i].iter().filter_map(move |e| match e {
                Event::Deliver(d) if d.sender == NodeId(sender as u32) && d.msg == msg => {
                    Some((i, d.seq))
                }
                _ => None,
            })
        })
        .collect()
}

/// The token site of a quiescent ring of three orders a K-resilient(1) message of another
/// member and is cut off alone right after: nothing it sends arrives. The others reform without
/// it and order the message again, after the New List, in a slot of their new view. The site
/// used to count itself as the one member other than the origin that held the slot and deliver
/// it in the old slot: two members delivered one message in two places (every-engine sweep
/// seed 491). Only members that sent an ACK after a slot hold its place (the origin's copy of
/// its packet holds no place), so K = 1 needs two of them: the site alone never delivers it.
/// This small case passes without that rule too (the site here is not reached by the slot's
/// ordering in time to deliver it); seed 491, replayed by `every_engine_sweep`'s
/// `seeds_once_failing`, is what fails without it.
#[test]
fn a_token_site_cut_off_alone_delivers_no_resilient_slot_by_itself() {
    let mut net = ring(3);
    let site = (0..3)
        .find(|&i| net.nodes[i].describe().contains("holding=true"))
        .expect("a quiescent ring keeps the token at one member");
    let sender = (site + 1) % 3;
    net.drop = Some(Box::new(move |c| c.from == site));
    let msg = net.nodes[sender]
        .submit(net.now, Bytes::from_static(b"k1"), Qos::KResilient(1))
        .unwrap();
    net.poll(sender);
    net.run_for(Duration::from_secs(5));
    let slots = slots_of(&net, sender, msg);
    let survivors: Vec<usize> = (0..3).filter(|&i| i != site).collect();
    for &i in &survivors {
        assert!(
            slots.iter().any(|&(m, _)| m == i),
            "member {i} delivered the message: {}",
            net.nodes[i].describe()
        );
    }
    let first = slots[0].1;
    assert!(
        slots.iter().all(|&(_, s)| s == first),
        "one message, one slot: {slots:?} (the site is member {site})"
    );
}

/// A member whose measured round grew to seconds (its packets took that long to be ordered, the
/// repairs of a lossy ring included) loses every ACK for a while: it repeats its NACKs at most
/// `Config::nack_retry_max` apart. The wait followed the round up to `data_retry_max` (2 s), so
/// that under heavy loss a slow round made the repairs slower, and those the round slower
/// still, until the ring crawled (every-engine sweep seeds 2615, 7432, 9508: 29% loss).
#[test]
fn nacks_are_repeated_within_their_ceiling_however_slow_the_round() {
    let mut net = ring(3);
    let slow = 1;
    for _ in 0..8 {
        net.nodes[slow].flow.rtt.on_sample(Duration::from_secs(2));
    }
    let max = Config::default().nack_retry_max;
    assert!(net.nodes[slow].flow.rtt.base_rto() > 2 * max);
    // Member 1 hears only the odd-numbered ACKs (so it knows of the others), and its NACKs
    // are not answered.
    let even = |body: &[u8]| packet::Ack::decode(body).is_ok_and(|a| a.num % 2 == 0);
    net.drop = Some(Box::new(move |c| {
        (c.to == slow && c.ptype == packet::ACK && even(c.body))
            || (c.from == slow && c.ptype == packet::NACK)
    }));
    net.sent.clear();
    for k in 0..4u8 {
        net.nodes[0]
            .submit(net.now, Bytes::from(vec![k; 8]), Qos::TotallyOrdered)
            .unwrap();
        net.poll(0);
        net.run_for(Duration::from_millis(50));
    }
    net.run_for(Duration::from_secs(3));
    let nacks: Vec<Time> = (net.sent.iter())
        .filter(|s| s.from == slow && s.ptype == packet::NACK)
        .map(|s| s.at)
        .collect();
    assert!(nacks.len() >= 4, "NACKs sent: {nacks:?}");
    for w in nacks.windows(2) {
        assert!(
            w[1].saturating_since(w[0]) <= max * 2,
            "NACKs {:?} apart ({nacks:?})",
            w[1].saturating_since(w[0])
        );
    }
    // Once the ACKs arrive, it catches up.
    net.drop = None;
    net.run_for(Duration::from_secs(2));
    let got = |i: usize| -> Vec<(u64, NodeId, u64)> {
        (net.events[i].iter())
            .filter_map(|e| match e {
                Event::Deliver(d) => Some((d.seq, d.sender, d.msg)),
                _ => None,
            })
            .collect()
    };
    assert_eq!(got(slow).len(), 4);
    assert_eq!(got(slow), got(2));
}

/// A Recovery Vote from a process outside the ring (one cut off through a reformation, voting
/// in its own that the initiator, left out too and back as a new member, never answers) is
/// answered with EXPELLED, which the voter takes from a member of its view. It used to be
/// ignored; the voter's wait for a silent initiator had grown past the run with the loss its
/// detector observed through the partition (every-engine sweep seeds 6818, 9481).
#[test]
fn a_vote_from_outside_the_ring_is_told_it_is_out() {
    let mut net = ring(2);
    let outsider = NodeId(9);
    let vote = RecoveryVote {
        version: 40,
        holds_all: true,
        at: SyncPoint {
            acks: 3,
            data: vec![],
            lost: vec![],
        },
    };
    let mut datagram = Vec::new();
    Header {
        engine: EngineKind::Ring,
        ptype: packet::RECOVERY_VOTE,
        flags: 0,
        group: 7,
        incarnation: 0,
        sender: outsider,
    }
    .encode(&mut datagram);
    vote.encode(&mut datagram);
    net.sent.clear();
    let now = net.now;
    net.nodes[0].handle_datagram(now, outsider, &datagram);
    net.poll(0);
    let told = (net.sent.iter()).any(|s| {
        s.from == 0 && s.ptype == packet::EXPELLED && s.destination == Destination::Peer(outsider)
    });
    assert!(told, "sent: {:?}", net.sent);
}

/// A ring of one admits a joiner whose copy of the New List is lost, and finds it failed (it
/// never answers as a member). Reforming needs both of the two, and the joiner, not knowing it
/// was admitted, answered no Recovery Start while the site ignored its joins: the ring waited
/// for ever (every-engine sweep seed 3839). The site now answers the join with the New List
/// again, the joiner answers the reformation, and the two go on.
#[test]
fn a_joiner_whose_admission_was_lost_joins_the_reformation() {
    let mut net = RingNet::with(());
    net.add(build(Role::Create, 0, Time::ZERO));
    // Node 1's first join arrives; nothing else does, either way, until the cut heals.
    let t0 = net.now;
    net.drop = Some(Box::new(move |c| {
        (c.from == 0 && c.to == 1) || (c.from == 1 && c.at > t0 + Duration::from_millis(100))
    }));
    let mut e = build(Role::Join, 1, net.now);
    e.handle_timeout(net.now);
    net.add(e);
    net.run_for(Duration::from_secs(3));
    assert_eq!(
        net.nodes[0].info().members.len(),
        2,
        "node 0 admitted node 1"
    );
    assert!(
        net.nodes[0].info().recovering,
        "{}",
        net.nodes[0].describe()
    );
    assert!(net.events[1].is_empty(), "node 1 heard nothing");
    net.drop = None;
    net.run_for(Duration::from_secs(10));
    for i in 0..2 {
        let info = net.nodes[i].info();
        assert_eq!(info.members.len(), 2, "{}", net.nodes[i].describe());
        assert!(!info.recovering, "{}", net.nodes[i].describe());
    }
    let reset = (net.events[0].iter()).any(
        |e| matches!(e, Event::Recovery(Recovery::Reset { removed, .. }) if removed.is_empty()),
    );
    assert!(reset, "the reformation kept both");
}

/// Joiners that ask while a New List was just ordered are admitted together by one New List
/// (issue 31: one New List a joiner cost a ring of a thousand O(n^3) bytes to form): they stand
/// right after the site that made it, the first takes the token, and every one of them, not
/// only the first, is a member that sends and delivers in the same order as the others. (Rings
/// batch joins from `Config::batch_joins_from` members, 64 by default; here from 2.)
#[test]
fn joiners_asking_together_are_admitted_by_one_new_list() {
    let cfg = Config {
        batch_joins_from: 2,
        ..Config::default()
    };
    let mut net = RingNet::with(());
    net.add(build_with(Role::Create, 0, Time::ZERO, cfg));
    let mut e = build_with(Role::Join, 1, net.now, cfg);
    e.handle_timeout(net.now);
    net.add(e);
    net.run_for(Duration::from_millis(300));
    for id in 2..6 {
        let mut e = build_with(Role::Join, id, net.now, cfg);
        e.handle_timeout(net.now);
        net.add(e);
    }
    net.run_for(Duration::from_secs(1));
    let views: Vec<Vec<NodeId>> = (net.events[0].iter())
        .filter_map(|e| match e {
            Event::View(v) => Some(v.members.clone()),
            _ => None,
        })
        .collect();
    let last = views.last().expect("views");
    assert_eq!(last.len(), 6, "{views:?}");
    // From two members to six in fewer than four views: some New List admitted several.
    let from_two = views
        .iter()
        .position(|v| v.len() == 2)
        .expect("the view of two");
    assert!(views.len() - 1 - from_two < 4, "{views:?}");
    for i in 2..6 {
        let first = net.events[i].iter().find_map(|e| match e {
            Event::View(v) => Some(v.clone()),
            _ => None,
        });
        let first = first.expect("admitted");
        assert_eq!(
            first.joined,
            Some(NodeId(i as u32)),
            "a joiner's view names it"
        );
    }
    // Every joiner sends; every member delivers the four messages in one order.
    for i in 2..6 {
        net.nodes[i]
            .submit(net.now, Bytes::from(vec![i as u8]), Qos::TotallyOrdered)
            .expect("a member sends");
        net.poll(i);
    }
    net.run_for(Duration::from_secs(1));
    let order = |i: usize| -> Vec<NodeId> {
        (net.events[i].iter())
            .filter_map(|e| match e {
                Event::Deliver(d) => Some(d.sender),
                _ => None,
            })
            .collect()
    };
    assert_eq!(order(0).len(), 4, "{:?}", order(0));
    for i in 1..6 {
        assert_eq!(order(i), order(0), "member {i}");
    }
}
