//! A token site that stood still (SIGSTOP, a VM pause) while the others reformed without it
//! must order nothing in its old view on waking: the gauntlet's one failed `stop-10s` run, in
//! the few members and datagrams that make it (the simulator's form, over seeds:
//! `rmcast-sim`'s `stalled_orderer`).

use super::engine::Ring;
use super::sweep_tests::{ring, slots_of, RingNet};
use crate::engine::{Engine, Event, Qos};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::time::Duration;

/// The member holding the token of a quiescent ring.
fn token_site(net: &RingNet) -> usize {
    (0..net.nodes.len())
        .find(|&i| net.nodes[i].describe().contains("holding=true"))
        .expect("a quiescent ring keeps the token at one member")
}

/// Member `sender` submits one totally ordered message every 50 ms for `d`.
fn send_for(net: &mut RingNet, sender: usize, d: Duration) -> Vec<u64> {
    let mut sent = Vec::new();
    let end = net.now + d;
    while net.now < end {
        let k = sent.len() as u8;
        let now = net.now;
        if let Ok(m) = net.nodes[sender].submit(now, Bytes::from(vec![k; 8]), Qos::TotallyOrdered) {
            sent.push(m);
        }
        net.poll(sender);
        net.run_for(Duration::from_millis(50));
    }
    sent
}

/// Every message of `sender` has one slot wherever it was delivered, and the stopped `site`
/// delivered no message in a slot where the others delivered something else (a view
/// included).
fn one_slot_each(net: &RingNet, site: usize, sender: usize, msgs: &[u64]) {
    for &m in msgs {
        let slots = slots_of(net, sender, m);
        assert!(
            slots.windows(2).all(|w| w[0].1 == w[1].1),
            "message {m} of member {sender} in two slots: {slots:?}"
        );
    }
    let what = |e: &Event| match e {
        Event::Deliver(d) => Some((d.seq, format!("{}#{}", d.sender.0, d.msg))),
        Event::View(v) => Some((v.seq, format!("view {}", v.id))),
        _ => None,
    };
    let others: BTreeMap<u64, String> = (0..net.nodes.len())
        .filter(|&i| i != site)
        .flat_map(|i| net.events[i].iter().filter_map(what))
        .collect();
    for e in &net.events[site] {
        if let (Event::Deliver(_), Some((seq, here))) = (e, what(e)) {
            if let Some(there) = others.get(&seq) {
                assert_eq!(&here, there, "slot {seq} at the site and at the others");
            }
        }
    }
}

fn counter(node: &Ring, name: &str) -> u64 {
    node.engine_counters()
        .into_iter()
        .find(|c| c.0 == name)
        .map_or(0, |c| c.1)
}

/// A member of a ring of three, another sending a message every 50 ms, is stopped for 10 s
/// (the token comes to it meanwhile). The other two find it failed and reform without it. It is continued
/// with the clock it read before the stop (its I/O loop read the clock, then was stopped before
/// it read its sockets), so the gap it would take for a stall shows nowhere; it reads the
/// unicast datagrams first (the runtime reads its unicast socket before its multicast one),
/// the peers' failure-detector probes among them, then the ACK and data of the old view. It
/// used to order the sender's messages in its old view at the slots of the others' New List
/// and after. Two probes of one peer's failure detector read at one instant now tell it that
/// it stood still (the peer retried before it read either): it fences its order, and learns it
/// was expelled.
#[test]
fn a_token_site_woken_with_the_clock_of_its_stop_orders_nothing_in_its_old_view() {
    let mut net = ring(3);
    let site = token_site(&net);
    let sender = (site + 1) % 3;
    // A second of traffic first: a site that had been idle that long would take the gap
    // before the stop for a stall whatever the clock says.
    let mut sent = send_for(&mut net, sender, Duration::from_secs(1));
    let stopped_at = net.now;
    net.stopped[site] = true;
    sent.extend(send_for(&mut net, sender, Duration::from_secs(10)));
    assert_eq!(
        net.nodes[sender].info().members.len(),
        2,
        "the others reformed without the stopped site"
    );
    net.wake(site, stopped_at);
    sent.extend(send_for(&mut net, sender, Duration::from_secs(3)));
    net.run_for(Duration::from_secs(5));
    assert!(
        counter(&net.nodes[site], "fences_raised") >= 1,
        "{}",
        net.nodes[site].describe()
    );
    one_slot_each(&net, site, sender, &sent);
}

/// The token site of a quiescent ring fences its order when data comes after the long idle
/// time (it may have been left out meanwhile), multicasts its probe, and is stopped for 10 s
/// before the answers arrive. They wait in its socket while the others reform without it. On
/// waking it reads them first: they answer the probe of before the stop, so they must not lift
/// the fence. A stall now discards a fence that was up, and the fresh one's probe is answered by
/// members of another view.
#[test]
fn answers_that_waited_through_a_stop_do_not_lift_the_fence() {
    let mut net = ring(3);
    net.latency = Duration::from_millis(1);
    net.run_for(Duration::from_secs(3));
    let site = token_site(&net);
    let sender = (site + 1) % 3;
    let (raised, lifted) = (
        counter(&net.nodes[site], "fences_raised"),
        counter(&net.nodes[site], "fences_lifted"),
    );
    let now = net.now;
    let first = net.nodes[sender]
        .submit(now, Bytes::from_static(b"first"), Qos::TotallyOrdered)
        .unwrap();
    net.poll(sender);
    // The data reaches the site 1 ms later, its probe goes out, and the site stops with the
    // fence up.
    net.run_for(Duration::from_millis(1));
    let fenced = |net: &RingNet| {
        (
            counter(&net.nodes[site], "fences_raised") - raised,
            counter(&net.nodes[site], "fences_lifted") - lifted,
        )
    };
    assert_eq!(fenced(&net), (1, 0), "{}", net.nodes[site].describe());
    net.stopped[site] = true;
    let mut sent = vec![first];
    sent.extend(send_for(&mut net, sender, Duration::from_secs(10)));
    assert_eq!(net.nodes[sender].info().members.len(), 2);
    let now = net.now;
    net.wake(site, now);
    net.run_for(Duration::from_secs(5));
    let (raised_since, lifted_since) = fenced(&net);
    assert_eq!(lifted_since, 0, "{}", net.nodes[site].describe());
    assert!(raised_since >= 2, "a fresh fence after waking");
    one_slot_each(&net, site, sender, &sent);
}
