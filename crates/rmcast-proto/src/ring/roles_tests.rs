//! Roles, not claims: ring members forge the packets that carry ordering and membership (an
//! ACK passing the token, a New List, EXPELLED, an admission) without being the member entitled
//! to send them; every one is refused and counted (`roles_refused`), and the ring goes on with
//! one order. Each test forges every variant on a group of its own and lists those taken (all
//! of them, with the checks taken out). And the checks leave a member that missed a
//! reformation a way out: it is told it is out by fewer members than a majority of its view.

use super::membership::Membership;
use super::packet::{self, Ack, AckBody, NewList};
use super::RingFactory;
use crate::engine::{Engine, Event, NodeId, Qos, Time};
use crate::registry::{EngineFactory, EngineParams, EngineSettings, Role};
use crate::testnet::Net;
use crate::wire;
use bytes::Bytes;
use std::time::Duration;

type RingNet = Net<dyn Engine>;

/// A ring engine of `role` with id `id` in group 7.
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

/// Node 0 creates the ring, nodes `1..n` join one by one (ids are indices); then it goes
/// quiescent.
fn ring(n: u32) -> RingNet {
    let mut net = RingNet::with(());
    net.add(build(Role::Create, 0, Time::ZERO));
    for i in 1..n {
        let mut e = build(Role::Join, i, net.now);
        e.handle_timeout(net.now);
        net.add(e);
        net.run_for(Duration::from_millis(200));
    }
    net.run_for(Duration::from_secs(1));
    net
}

fn counter(net: &RingNet, i: usize, name: &str) -> u64 {
    (net.nodes[i].engine_counters().into_iter())
        .find(|c| c.0 == name)
        .map(|c| c.1)
        .expect("a ring counter")
}

/// A field of the engine's one-line description (`name=value`, up to the next space).
fn described(net: &RingNet, i: usize, name: &str) -> String {
    let d = net.nodes[i].describe();
    let at = d.find(&format!(" {name}=")).expect("described") + name.len() + 2;
    d[at..].split(' ').next().unwrap_or("").to_string()
}

/// The lineage of member `i`'s ring.
fn lineage(net: &RingNet, i: usize) -> u64 {
    u64::from_str_radix(&described(net, i, "lineage"), 16).expect("a lineage")
}

/// The next ACK number, the OrderingQ's end and the view at member `i`.
fn position(net: &RingNet, i: usize) -> (u64, u64, u64) {
    let q = described(net, i, "q");
    let end = q.split("..").nth(1).expect("a range").parse().unwrap();
    let view = described(net, i, "view").parse().unwrap();
    (counter(net, i, "next_ack"), end, view)
}

/// In a quiescent ring of three: the token site, the member that passed it the token (the
/// sender of the last ACK), and the third, entitled to nothing.
fn roles(net: &RingNet) -> (usize, usize, usize) {
    let site = (0..3)
        .find(|&i| net.nodes[i].describe().contains("token(holding=true"))
        .expect("a quiescent ring keeps the token at one member");
    let passer = net.nodes[site].info().coordinator.expect("a member").0 as usize;
    assert_ne!(site, passer);
    let other = (0..3).find(|&i| i != site && i != passer).unwrap();
    (site, passer, other)
}

fn datagram(from: usize, ptype: u8, body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut b = Vec::new();
    wire::Header {
        engine: wire::EngineKind::Ring,
        ptype,
        flags: 0,
        group: 7,
        incarnation: 0,
        sender: NodeId(from as u32),
    }
    .encode(&mut b);
    body(&mut b);
    b
}

/// Hands `datagram` from `from` to each member in `to` and runs their output.
fn inject(net: &mut RingNet, from: usize, to: &[usize], datagram: &[u8]) {
    for &i in to {
        net.nodes[i].handle_datagram(net.now, NodeId(from as u32), datagram);
        net.poll(i);
    }
}

fn expelled(net: &RingNet, i: usize) -> bool {
    (net.events[i].iter())
        .any(|e| matches!(e, Event::Recovery(crate::engine::Recovery::Expelled { .. })))
}

/// Every member sends a few messages: all three deliver the same sequence, all of them.
fn one_order_after(net: &mut RingNet) {
    let before: Vec<usize> = (0..3).map(|i| net.events[i].len()).collect();
    for k in 0..5u8 {
        for i in 0..3 {
            net.nodes[i]
                .submit(net.now, Bytes::from(vec![k; 8]), Qos::TotallyOrdered)
                .unwrap();
            net.poll(i);
        }
    }
    net.run_for(Duration::from_secs(1));
    let seq = |i: usize| -> Vec<(NodeId, u64)> {
        (net.events[i][before[i]..].iter())
            .filter_map(|e| match e {
                Event::Deliver(d) => Some((d.sender, d.msg)),
                _ => None,
            })
            .collect()
    };
    assert_eq!(seq(0).len(), 15);
    assert_eq!(seq(1), seq(0));
    assert_eq!(seq(2), seq(0));
}

/// The third member of a quiescent ring of three (neither the token site nor the member that
/// passed it the token) forges the next ACK, with the right number, view and first timestamp:
/// one ordering its own packet, one passing the token to itself, and one carrying a New List
/// that removes the member that passed the token. The site and the passer refuse each (their
/// next ACK stays the same, nobody is removed), and the ring goes on with one order.
#[test]
fn an_ack_from_a_member_that_does_not_hold_the_token_is_refused() {
    // Each forgery on a ring of its own: those a member applied.
    let mut applied = Vec::new();
    for k in 0..3 {
        let mut net = ring(3);
        let (site, passer, forger) = roles(&net);
        let (num, end, view) = position(&net, site);
        assert_eq!(position(&net, passer), (num, end, view));
        let without_passer: Vec<NodeId> = (net.nodes[site].info().members.into_iter())
            .filter(|&m| m != NodeId(passer as u32))
            .collect();
        let body = match k {
            // Its own packet ordered.
            0 => AckBody::Entries(vec![(NodeId(forger as u32), 0)]),
            // The token passed to itself.
            1 => AckBody::Entries(vec![]),
            // A New List removing the member that passed the token.
            _ => AckBody::NewList(NewList {
                view_id: view + 1,
                next_sseq: vec![0; without_passer.len()],
                members: without_passer,
                joined: vec![],
                left: Some(NodeId(passer as u32)),
                lock_op: None,
                locks: vec![],
                clients: vec![],
                unicast_only: vec![],
            }),
        };
        let ack = Ack {
            num,
            view,
            first_ts: end,
            next_site: NodeId(forger as u32),
            idle: 0,
            ring: packet::ring_digest(&net.nodes[site].info().members),
            lineage: lineage(&net, site),
            body,
        };
        let forged = datagram(forger, packet::ACK, |b| ack.encode(b));
        inject(&mut net, forger, &[site, passer], &forged);
        for i in [site, passer] {
            if position(&net, i) != (num, end, view) || net.nodes[i].info().members.len() != 3 {
                applied.push((k, i));
            } else {
                assert_eq!(
                    counter(&net, i, "roles_refused"),
                    1,
                    "forgery {k}, member {i}"
                );
            }
        }
        net.run_for(Duration::from_millis(500));
        if applied.is_empty() {
            for i in 0..3 {
                assert_eq!(net.nodes[i].info().members.len(), 3, "member {i}");
                assert!(!expelled(&net, i), "member {i}");
            }
            one_order_after(&mut net);
        }
    }
    assert!(
        applied.is_empty(),
        "forgeries applied (forgery, member): {applied:?}"
    );
}

/// A member of the ring that neither holds nor passed the token, and leads no reformation,
/// tells the others they were expelled in a far newer view: refused and counted, nobody
/// leaves, and the ring goes on with one order.
#[test]
fn expelled_from_a_member_that_may_not_expel_is_refused() {
    // Each view number on a ring of its own: those a member took.
    let mut taken = Vec::new();
    for k in 0..4 {
        let mut net = ring(3);
        let (site, passer, forger) = roles(&net);
        let (_, _, view) = position(&net, site);
        let v = [view, view + 1, view + 1000, u64::MAX][k];
        let own = lineage(&net, forger);
        let forged = datagram(forger, packet::EXPELLED, |b| {
            packet::encode_expelled(b, v, own, None)
        });
        inject(&mut net, forger, &[site, passer], &forged);
        for i in [site, passer] {
            if expelled(&net, i) || net.nodes[i].info().members.len() != 3 {
                taken.push((v - view, i));
            }
        }
        if k > 0 && taken.is_empty() {
            // The view's own number is no news (nothing to refuse); a newer one is refused.
            for i in [site, passer] {
                assert_eq!(counter(&net, i, "roles_refused"), 1, "view {v}, member {i}");
            }
        }
        net.run_for(Duration::from_millis(500));
        if taken.is_empty() {
            one_order_after(&mut net);
        }
    }
    assert!(
        taken.is_empty(),
        "EXPELLED taken (views ahead, member): {taken:?}"
    );
}

/// A joiner takes its admission only from the token site that ran it: the member right before
/// it in the New List, naming it the next site. A member elsewhere in the list (or outside it)
/// forging the admission is refused, and the joiner is admitted by the ring afterwards.
#[test]
fn an_admission_from_a_member_that_did_not_run_the_join_is_refused() {
    let mut net = ring(3);
    let (site, _, _) = roles(&net);
    let (num, end, view) = position(&net, site);
    let asking = |now| {
        let mut joiner = build(Role::Join, 3, now);
        joiner.handle_timeout(now);
        while joiner.poll_transmit(now, &mut Vec::new()).is_some() {}
        joiner
    };
    // Each forgery to a joiner of its own: those it took.
    let mut taken = Vec::new();
    let members = net.nodes[site].info().members;
    let mut with_joiner = members.clone();
    with_joiner.push(NodeId(3));
    // The joiner is last: only the member before it (the list's third) may admit it.
    let entitled = with_joiner[2].0 as usize;
    for (k, from) in [with_joiner[0].0 as usize, with_joiner[1].0 as usize, 9]
        .into_iter()
        .enumerate()
    {
        let ack = Ack {
            num,
            view,
            first_ts: end,
            next_site: NodeId(3),
            idle: 0,
            ring: packet::ring_digest(&members),
            lineage: lineage(&net, site),
            body: AckBody::NewList(NewList {
                view_id: view + 1,
                next_sseq: vec![0; 4],
                members: with_joiner.clone(),
                joined: vec![NodeId(3)],
                left: None,
                lock_op: None,
                locks: vec![],
                clients: vec![],
                unicast_only: vec![],
            }),
        };
        assert_ne!(from, entitled);
        let forged = datagram(from, packet::ACK, |b| ack.encode(b));
        let mut joiner = asking(net.now);
        joiner.handle_datagram(net.now, NodeId(from as u32), &forged);
        if !joiner.describe().contains(" member=false ") {
            taken.push(from);
            continue;
        }
        let refused = joiner
            .engine_counters()
            .into_iter()
            .find(|c| c.0 == "roles_refused");
        assert_eq!(refused.map(|c| c.1), Some(1), "forgery {k}");
    }
    assert!(taken.is_empty(), "admissions taken from: {taken:?}");
    let j = net.add(asking(net.now));
    net.run_for(Duration::from_secs(2));
    let mut got = net.nodes[j].info().members;
    got.sort();
    assert_eq!(got, (0..4).map(NodeId).collect::<Vec<_>>());
}

/// The token site's own ACK, with the right number, naming a member other than the one after
/// it in the ring: a token site always passes to the next member (or keeps the token), so the
/// others take it for an ACK of another ring of this name and drop it; the ring goes on with
/// one order.
#[test]
fn an_ack_passing_the_token_past_the_next_member_is_dropped() {
    let mut net = ring(3);
    let (site, passer, _) = roles(&net);
    let (num, end, view) = position(&net, site);
    let next = Membership::successor(&net.nodes[site].info().members, NodeId(site as u32));
    assert_ne!(
        next,
        NodeId(passer as u32),
        "in a ring of three the passer is not next"
    );
    let ack = Ack {
        num,
        view,
        first_ts: end,
        next_site: NodeId(passer as u32),
        idle: 0,
        ring: packet::ring_digest(&net.nodes[site].info().members),
        lineage: lineage(&net, site),
        body: AckBody::Entries(vec![]),
    };
    let forged = datagram(site, packet::ACK, |b| ack.encode(b));
    let others: Vec<usize> = (0..3).filter(|&i| i != site).collect();
    inject(&mut net, site, &others, &forged);
    for &i in &others {
        assert_eq!(position(&net, i), (num, end, view), "member {i}");
    }
    net.run_for(Duration::from_millis(500));
    one_order_after(&mut net);
}

/// The token site's ACK with the right number, view, timestamp and next site, made in another
/// ring of this name (another member list, so another ring digest): two rings that admitted
/// the same joiners together count alike and put them in the same order, so only the digest
/// tells such an ACK apart (formation sweep ring seed 8064 with joins batched). The others
/// drop it; the ring goes on with one order.
#[test]
fn an_ack_of_another_ring_at_the_same_view_and_number_is_dropped() {
    let mut net = ring(3);
    let (site, _, _) = roles(&net);
    let (num, end, view) = position(&net, site);
    let members = net.nodes[site].info().members;
    let next = Membership::successor(&members, NodeId(site as u32));
    // The other ring: the same members in the same order, and one more.
    let mut other_ring = members.clone();
    other_ring.push(NodeId(9));
    assert_ne!(
        packet::ring_digest(&other_ring),
        packet::ring_digest(&members)
    );
    let ack = Ack {
        num,
        view,
        first_ts: end,
        next_site: next,
        idle: 0,
        ring: packet::ring_digest(&other_ring),
        lineage: lineage(&net, site),
        body: AckBody::Entries(vec![]),
    };
    let forged = datagram(site, packet::ACK, |b| ack.encode(b));
    let others: Vec<usize> = (0..3).filter(|&i| i != site).collect();
    let dropped: Vec<u64> = (0..3)
        .map(|i| net.nodes[i].counters().foreign_dropped)
        .collect();
    inject(&mut net, site, &others, &forged);
    for &i in &others {
        assert_eq!(position(&net, i), (num, end, view), "member {i}");
        assert_eq!(
            net.nodes[i].counters().foreign_dropped,
            dropped[i] + 1,
            "member {i} dropped it as another ring's"
        );
    }
    net.run_for(Duration::from_millis(500));
    one_order_after(&mut net);
}

/// A member of a ring of five is cut off while the other four reform without it; then the two
/// members of its token's chain (the token site and the member that passed it the token) leave.
/// Two members of its old view are left to tell it that it is out, fewer than the three a
/// reformation of that view needs, and neither may expel it alone. Its own reformation finds
/// nobody and comes up short, which backs their word: it stops, and may come back as a new
/// member. (The first version of the role checks waited for three for ever: every-engine
/// sweep seeds 387, 502, 711, 970.)
#[test]
fn a_member_left_out_believes_its_ring_once_its_own_reformation_comes_up_short() {
    let mut net = ring(5);
    let site = (0..5)
        .find(|&i| net.nodes[i].describe().contains("token(holding=true"))
        .expect("a quiescent ring keeps the token at one member");
    let passer = net.nodes[site].info().coordinator.expect("a member").0 as usize;
    let cut = (0..5).find(|&i| i != site && i != passer).unwrap();
    let rest: Vec<usize> = (0..5)
        .filter(|&i| i != cut && i != site && i != passer)
        .collect();
    net.drop = Some(Box::new(move |c| c.from == cut || c.to == cut));
    // Traffic, so that the others find it gone.
    for k in 0..3u8 {
        net.nodes[rest[0]]
            .submit(net.now, Bytes::from(vec![k; 8]), Qos::TotallyOrdered)
            .unwrap();
        net.poll(rest[0]);
        net.run_for(Duration::from_millis(100));
    }
    net.run_for(Duration::from_secs(10));
    for i in (0..5).filter(|&i| i != cut) {
        assert_eq!(
            net.nodes[i].info().members.len(),
            4,
            "{}",
            net.nodes[i].describe()
        );
    }
    for leaver in [site, passer] {
        net.nodes[leaver].leave(net.now);
        net.poll(leaver);
    }
    net.run_for(Duration::from_secs(5));
    for &i in &rest {
        assert_eq!(net.nodes[i].info().members.len(), 2, "member {i}");
    }
    assert!(!expelled(&net, cut), "{}", net.nodes[cut].describe());
    net.drop = None;
    net.run_for(Duration::from_secs(30));
    assert!(expelled(&net, cut), "{}", net.nodes[cut].describe());
    for &i in &rest {
        assert_eq!(net.nodes[i].info().members.len(), 2, "member {i}");
        assert!(!expelled(&net, i), "member {i}");
    }
}

/// A joiner both rings of a name admitted, living in the other one, tells a member of this
/// ring that it is out, with the view id of its own ring, the same number as this one's
/// (formation sweep ring seed 22249: host 5, admitted into a view 6 by two rings, told host
/// 3, whose last ACK named it the next site). Its ring's lineage is not ours: the member stays
/// (it used to leave a ring that went on, and came back taking old New Lists for its own); the
/// site that passed the joiner the token orders it out, and the ring goes on.
#[test]
fn an_expelled_from_a_joiner_living_in_another_ring_expels_nobody() {
    let mut net = ring(3);
    let (site, passer, other) = roles(&net);
    let (_, _, view) = position(&net, site);
    let foreign = lineage(&net, site) ^ 0x5a5a;
    // Host 9 asks in (no engine answers for it: it lives elsewhere); the site admits it.
    let join = datagram(9, packet::LCR, |b| {
        b.push(packet::LCR_JOIN);
        b.extend_from_slice(&0u64.to_be_bytes());
        b.push(0);
    });
    inject(&mut net, 9, &[site, passer, other], &join);
    net.run_for(Duration::from_millis(5));
    for i in 0..3 {
        assert_eq!(net.nodes[i].info().members.len(), 4, "member {i}");
        assert_eq!(position(&net, i).2, view + 1, "member {i}");
    }
    let told = datagram(9, packet::EXPELLED, |b| {
        packet::encode_expelled(b, view + 1, foreign, None)
    });
    inject(&mut net, 9, &[passer, other], &told);
    for i in [passer, other] {
        assert!(
            !expelled(&net, i),
            "member {i}: {}",
            net.nodes[i].describe()
        );
    }
    // The site, which passes it the token, hears it too and orders it out.
    inject(&mut net, 9, &[site], &told);
    net.run_for(Duration::from_millis(500));
    for i in 0..3 {
        assert!(!expelled(&net, i), "member {i}");
        assert_eq!(net.nodes[i].info().members.len(), 3, "member {i}");
    }
    one_order_after(&mut net);
}

/// A member of this ring (so in this ring's list) that answers the token from another ring:
/// two rings admitted the same joiners in crossed order, and each passed the token to a
/// member that lives in the other (formation sweep batched seeds 19460, 19687: nobody told
/// either site, since each is in the other's list too, and both waited for ever). The member
/// an ACK of another lineage names tells its sender, with its own ring's lineage; the site,
/// hearing from the member it passed the token to that it lives in another ring, orders it
/// out instead of taking it for news that its own ring went on without it.
#[test]
fn a_member_named_by_another_rings_ack_tells_its_site_which_orders_it_out() {
    let mut net = ring(3);
    let (site, passer, next) = roles(&net);
    assert_eq!(
        Membership::successor(&net.nodes[site].info().members, NodeId(site as u32)),
        NodeId(next as u32)
    );
    let (num, end, view) = position(&net, site);
    let other_ring = lineage(&net, site) ^ 0x5a5a;
    // An ACK of another ring from the site's id, naming `next`.
    let ack = Ack {
        num,
        view,
        first_ts: end,
        next_site: NodeId(next as u32),
        idle: 0,
        ring: packet::ring_digest(&net.nodes[site].info().members),
        lineage: other_ring,
        body: AckBody::Entries(vec![]),
    };
    let forged = datagram(site, packet::ACK, |b| ack.encode(b));
    net.sent.clear();
    inject(&mut net, site, &[next], &forged);
    assert_eq!(position(&net, next), (num, end, view), "not applied");
    let told = (net.sent.iter()).any(|s| {
        s.from == next
            && s.ptype == packet::EXPELLED
            && s.destination == crate::engine::Destination::Peer(NodeId(site as u32))
    });
    assert!(told, "sent: {:?}", net.sent);
    // Now the site passes `next` the token, which never answers here; `next` says it lives
    // in another ring.
    net.drop = Some(Box::new(move |c| c.from == next));
    net.nodes[site]
        .submit(net.now, Bytes::from_static(b"x"), Qos::TotallyOrdered)
        .unwrap();
    net.poll(site);
    net.run_for(Duration::from_millis(5));
    let d = net.nodes[site].describe();
    assert!(d.contains(&format!(", {next})) fenced=")), "{d}");
    let elsewhere = datagram(next, packet::EXPELLED, |b| {
        packet::encode_expelled(b, view + 7, other_ring, None)
    });
    inject(&mut net, next, &[site], &elsewhere);
    net.run_for(Duration::from_millis(500));
    for i in [site, passer] {
        assert!(
            !expelled(&net, i),
            "member {i}: {}",
            net.nodes[i].describe()
        );
        assert_eq!(net.nodes[i].info().members.len(), 2, "member {i}");
    }
}

/// EXPELLED names the sender's ring's lineage and the ACK it answers; a body without them (8
/// bytes, as before lineages) is malformed, counted and dropped, and expels nobody.
#[test]
fn an_expelled_without_a_lineage_is_malformed() {
    let mut net = ring(3);
    let (site, passer, _) = roles(&net);
    let (_, _, view) = position(&net, site);
    let before = net.nodes[site].counters().malformed_dropped;
    let short = datagram(passer, packet::EXPELLED, |b| {
        b.extend_from_slice(&(view + 1).to_be_bytes())
    });
    inject(&mut net, passer, &[site], &short);
    assert_eq!(net.nodes[site].counters().malformed_dropped, before + 1);
    assert!(!expelled(&net, site));
}

/// A member that started over (expelled, or merging into another ring) takes no New List
/// admitting it into a view of a ring it already held: that New List admitted an earlier
/// incarnation of it (a retransmission, or the answer to a join it sent then), and taken, the
/// joiner went on from an old view while the ring was far ahead (formation sweep ring seed
/// 22249, batched 33295). An admission into a newer view of that ring is taken.
#[test]
fn a_joiner_takes_no_admission_into_a_view_of_a_ring_it_held() {
    let mut net = ring(3);
    let (site, _, _) = roles(&net);
    let j = (0..3).find(|&i| i != site).unwrap();
    let (num, end, view) = position(&net, j);
    let l = lineage(&net, j);
    net.nodes[j].rejoin(net.now, None).unwrap();
    assert_eq!(described(&net, j, "member"), "false");
    for (view_id, taken) in [(view, false), (view - 1, false), (view + 1, true)] {
        let members = vec![NodeId(site as u32), NodeId(j as u32)];
        let ack = Ack {
            num,
            view: view_id - 1,
            first_ts: end,
            next_site: NodeId(j as u32),
            idle: 0,
            ring: packet::ring_digest(&[NodeId(site as u32)]),
            lineage: l,
            body: AckBody::NewList(NewList {
                view_id,
                next_sseq: vec![0; 2],
                members,
                joined: vec![NodeId(j as u32)],
                left: None,
                lock_op: None,
                locks: vec![],
                clients: vec![],
                unicast_only: vec![],
            }),
        };
        let admission = datagram(site, packet::ACK, |b| ack.encode(b));
        let now = net.now;
        net.nodes[j].handle_datagram(now, NodeId(site as u32), &admission);
        assert_eq!(
            described(&net, j, "member") == "true",
            taken,
            "view {view_id} (held {view})"
        );
    }
}
