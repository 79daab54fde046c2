//! Roles: every packet of a transaction is taken only from the member entitled to send it. A
//! member that is not the source (node 9, which the network does not know, or a receiver of
//! the set) forges each packet type; each is refused and counted (`not_from_source`,
//! `not_in_set`), and the transaction commits at every receiver of its set as if nothing had
//! been sent. Also the bounds on what a packet may make a receiver hold or wait.

use super::*;
use crate::wire::{EngineKind, Header};

/// The forger: a member of the group (it holds the key, if any), not a node of the network.
const FORGER: u32 = 9;

/// A datagram of type `ptype` from `from` with `body`.
fn forged(ptype: u8, from: u32, body: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    Header {
        engine: EngineKind::Txn,
        ptype,
        flags: 0,
        group: 7,
        incarnation: 0,
        sender: NodeId(from),
    }
    .encode(&mut b);
    b.extend_from_slice(body);
    b
}

/// Node `to` receives `d` from the forger now.
fn inject(net: &mut Net, to: usize, d: &[u8]) {
    let now = net.now;
    net.nodes[to].handle_datagram(now, NodeId(FORGER), d);
    net.poll(to);
}

fn counter(net: &Net, i: usize, name: &str) -> u64 {
    (net.nodes[i].engine_counters().into_iter())
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no counter {name}"))
}

/// Datagrams sent to the forger so far.
fn sent_to_forger(net: &Net) -> usize {
    (net.sent.iter())
        .filter(|s| s.destination == Destination::Peer(NodeId(FORGER)))
        .count()
}

/// Source 0 and receivers 1 and 2 (the set); `key` is the transaction of `m`.
fn three() -> Net {
    Net::new(
        3,
        Config {
            max_receivers: 2,
            ..cfg()
        },
    )
}

fn key_of(net: &mut Net, m: u64) -> pk::Key {
    pk::Key {
        epoch: net.node(0).epoch(),
        txn: m,
    }
}

/// Source 0 sends a 5,000-byte message; node 1 has answered the open and holds only the
/// FIRST's segment (the source's DATA to it is lost until the drop rule is lifted).
fn mid_transfer(net: &mut Net) -> (u64, pk::Key, Vec<u8>) {
    net.drop = Some(Box::new(|c| c.ptype == pk::DATA && c.to == 1));
    let payload = body(5000, 3);
    let m = net.submit(0, &payload);
    net.run_for(20 * MS);
    assert!(!net.delivered(1, 0, m));
    let key = key_of(net, m);
    (m, key, payload)
}

/// Lift the drop rule and run: every member delivers `payload` once, the source completes.
fn commits_intact(net: &mut Net, m: u64, payload: &[u8]) {
    net.drop = None;
    net.run_for(Duration::from_secs(1));
    assert!(net.completed(0, m));
    for i in 0..3 {
        let d: Vec<_> = (net.deliveries(i).into_iter())
            .filter(|(s, msg, _)| s.0 == 0 && *msg == m)
            .collect();
        assert_eq!(d.len(), 1, "node {i}");
        assert_eq!(&d[0].2[..], payload, "node {i}");
    }
}

#[test]
fn a_first_in_another_members_epoch_opens_nothing() {
    let mut net = three();
    let m = net.submit(0, b"real");
    net.run_for(50 * MS);
    assert!(net.completed(0, m));
    let opens = counter(&net, 1, "opens_answered");
    // The forger opens "transaction m + 1" of the source's epoch, and one of node 1's own.
    for epoch in [net.node(0).epoch(), net.node(1).epoch()] {
        let mut b = Vec::new();
        pk::encode_first(
            &mut b,
            &pk::First {
                key: pk::Key { epoch, txn: m + 1 },
                flags: 0,
                set_size: 1,
                backoff_unit_us: 0,
                total: 5,
                data: b"evil!",
            },
        );
        inject(&mut net, 1, &forged(pk::FIRST, FORGER, &b));
    }
    net.run_for(300 * MS);
    assert_eq!(counter(&net, 1, "opens_answered"), opens);
    assert_eq!(counter(&net, 1, "not_from_source"), 2);
    assert_eq!(sent_to_forger(&net), 0, "no answer to a refused open");
    // The forger's own epoch is its own: its transactions are answered.
    let mut b = Vec::new();
    pk::encode_first(
        &mut b,
        &pk::First {
            key: pk::Key {
                epoch: 0x0bad_f00d,
                txn: 0,
            },
            flags: 0,
            set_size: 1,
            backoff_unit_us: 0,
            total: 4,
            data: b"mine",
        },
    );
    inject(&mut net, 1, &forged(pk::FIRST, FORGER, &b));
    assert_eq!(counter(&net, 1, "opens_answered"), opens + 1);
}

#[test]
fn data_of_the_sources_transaction_from_another_member_is_refused() {
    let mut net = three();
    let (m, key, payload) = mid_transfer(&mut net);
    // At the start, and overlapping the end of the FIRST's segment that node 1 holds.
    for offset in [0, 1000] {
        let mut b = Vec::new();
        pk::encode_data(
            &mut b,
            &pk::Data {
                key,
                flags: pk::DATA_SREQ,
                offset,
                data: &[0xee; 1000],
            },
        );
        inject(&mut net, 1, &forged(pk::DATA, FORGER, &b));
    }
    assert_eq!(counter(&net, 1, "not_from_source"), 2);
    commits_intact(&mut net, m, &payload);
}

#[test]
fn control_of_the_sources_transaction_from_another_member_is_refused() {
    let mut net = three();
    let (m, key, payload) = mid_transfer(&mut net);
    // Abort, close, and a release of what node 1 holds.
    for (flags, deliver_to) in [
        (pk::CNTL_ABORT | pk::CNTL_CLOSE, 0),
        (pk::CNTL_CLOSE, 0),
        (pk::CNTL_DELIVER_TO, 5000),
    ] {
        let mut b = Vec::new();
        pk::encode_cntl(
            &mut b,
            &pk::Cntl {
                key,
                flags,
                deliver_to,
                backoff_unit_us: 0,
                set_size: 2,
                probe: 0,
            },
            &[NodeId(1), NodeId(2)],
        );
        inject(&mut net, 1, &forged(pk::CNTL, FORGER, &b));
    }
    assert_eq!(counter(&net, 1, "not_from_source"), 3);
    commits_intact(&mut net, m, &payload);
}

#[test]
fn an_accept_from_another_member_is_refused() {
    let mut net = three();
    let (m, key, payload) = mid_transfer(&mut net);
    let mut b = Vec::new();
    pk::encode_accept(&mut b, key, false);
    inject(&mut net, 1, &forged(pk::ACCEPT, FORGER, &b));
    assert_eq!(counter(&net, 1, "not_from_source"), 1);
    commits_intact(&mut net, m, &payload);
}

#[test]
fn a_reply_ack_from_another_member_is_refused() {
    let mut net = three();
    let m = net.submit(0, b"question");
    net.run_for(50 * MS);
    assert!(net.completed(0, m));
    let key = key_of(&mut net, m);
    // Node 1's reply is held back; the forger acknowledges all of it.
    net.drop = Some(Box::new(|c| c.ptype == pk::REPLY));
    net.reply(1, 0, m, b"answer");
    let mut b = Vec::new();
    pk::encode_reply_ack(&mut b, key, 4 + 6);
    inject(&mut net, 1, &forged(pk::REPLY_ACK, FORGER, &b));
    assert_eq!(counter(&net, 1, "not_from_source"), 1);
    // Node 1 still holds its reply and sends it again once the network lets it.
    net.drop = None;
    net.run_for(300 * MS);
    assert_eq!(
        net.replies(0),
        vec![(NodeId(1), m, Bytes::from_static(b"answer"))]
    );
}

#[test]
fn a_reply_from_outside_the_set_is_refused() {
    let mut net = three();
    let m = net.submit(0, b"question");
    net.run_for(50 * MS);
    assert!(net.completed(0, m));
    let key = key_of(&mut net, m);
    let mut stream = 4u32.to_be_bytes().to_vec();
    stream.extend_from_slice(b"evil");
    let mut b = Vec::new();
    pk::encode_reply(
        &mut b,
        &pk::ReplySeg {
            key,
            flags: 0,
            offset: 0,
            data: &stream,
        },
    );
    inject(&mut net, 0, &forged(pk::REPLY, FORGER, &b));
    assert_eq!(counter(&net, 0, "not_in_set"), 1);
    assert!(net.replies(0).is_empty());
    assert_eq!(sent_to_forger(&net), 0, "no acknowledgement either");
}

#[test]
fn a_status_from_outside_the_set_after_the_open_changes_nothing() {
    let mut net = three();
    let (m, key, payload) = mid_transfer(&mut net);
    // "I hold it all and delivered it", and "I left", from a member that is not in the set.
    for flags in [
        pk::STATUS_DELIVERED | pk::STATUS_ACCEPTED,
        pk::STATUS_CLOSED,
    ] {
        let mut b = Vec::new();
        pk::encode_status(
            &mut b,
            &pk::Status {
                key,
                flags,
                next: 5000,
                limit: 5000,
                burst: 1024,
                rate: 1024,
                echo: 0,
            },
        );
        inject(&mut net, 0, &forged(pk::STATUS, FORGER, &b));
    }
    assert!(!net.node(0).set_of(m).unwrap().contains(&NodeId(FORGER)));
    // The report is refused (the open is decided); the close of a channel it never had is
    // nothing to refuse.
    assert_eq!(counter(&net, 0, "channels_refused"), 1);
    commits_intact(&mut net, m, &payload);
}

/// Source 0's message is complete at node 1 but not released (node 2 still lacks data).
fn complete_not_released(net: &mut Net) -> (u64, pk::Key, Vec<u8>) {
    net.drop = Some(Box::new(|c| c.ptype == pk::DATA && c.to == 2));
    let payload = body(3000, 5);
    let m = net.submit(0, &payload);
    net.run_for(30 * MS);
    assert!(net.node(1).describe().contains("3000 bytes held"));
    assert!(!net.delivered(1, 0, m) && !net.delivered(0, 0, m));
    let key = key_of(net, m);
    (m, key, payload)
}

fn resolve(key: pk::Key, outcome: u8, set: &[NodeId]) -> Vec<u8> {
    let mut b = Vec::new();
    pk::encode_resolve(&mut b, NodeId(0), key, outcome, 3000, set);
    b
}

#[test]
fn only_the_source_resolves_a_transaction_as_aborted() {
    let mut net = three();
    let (m, key, payload) = complete_not_released(&mut net);
    let set = [NodeId(1), NodeId(2)];
    // From outside the set, and from a receiver of the set: neither may abort.
    let b = resolve(key, pk::OUTCOME_ABORTED, &set);
    inject(&mut net, 1, &forged(pk::RESOLVE, FORGER, &b));
    inject(&mut net, 1, &forged(pk::RESOLVE, 2, &b));
    assert_eq!(counter(&net, 1, "not_from_source"), 2);
    commits_intact(&mut net, m, &payload);
}

#[test]
fn a_release_from_another_member_while_the_source_is_heard_is_refused() {
    let mut net = three();
    let (m, key, payload) = complete_not_released(&mut net);
    // From a member outside the set it names: refused and counted.
    let b = resolve(key, pk::OUTCOME_RELEASED, &[NodeId(1), NodeId(2)]);
    inject(&mut net, 1, &forged(pk::RESOLVE, FORGER, &b));
    assert_eq!(counter(&net, 1, "not_from_source"), 1);
    // From a member it names, unasked (the source is heard): not an answer to this receiver.
    let b = resolve(
        key,
        pk::OUTCOME_RELEASED,
        &[NodeId(1), NodeId(2), NodeId(9)],
    );
    inject(&mut net, 1, &forged(pk::RESOLVE, FORGER, &b));
    inject(&mut net, 1, &forged(pk::RESOLVE, 2, &b));
    // And a RESOLVE naming another source for the source's epoch.
    let mut b = Vec::new();
    pk::encode_resolve(
        &mut b,
        NodeId(2),
        key,
        pk::OUTCOME_RELEASED,
        3000,
        &[NodeId(1)],
    );
    inject(&mut net, 1, &forged(pk::RESOLVE, 2, &b));
    assert_eq!(counter(&net, 1, "not_from_source"), 2);
    assert!(
        !net.delivered(1, 0, m),
        "delivered before the source released"
    );
    commits_intact(&mut net, m, &payload);
    // Node 1 delivered after the source released it, not before.
    let at = |i: usize| {
        (net.events[i].iter().zip(&net.taken_at[i]))
            .find(|(e, _)| matches!(e, Event::Deliver(d) if d.msg == m))
            .map(|(_, t)| *t)
            .unwrap()
    };
    assert!(at(1) >= at(0));
}

#[test]
fn a_query_from_outside_the_set_makes_nobody_multicast() {
    let mut net = three();
    let m = net.submit(0, b"done");
    net.run_for(50 * MS);
    assert!(net.completed(0, m));
    let key = key_of(&mut net, m);
    let mut b = Vec::new();
    pk::encode_query(&mut b, NodeId(0), key);
    let resolves = |net: &Net| {
        (0..3)
            .map(|i| counter(net, i, "resolves_sent"))
            .sum::<u64>()
    };
    let before = resolves(&net);
    for i in 0..3 {
        inject(&mut net, i, &forged(pk::QUERY, FORGER, &b));
    }
    assert_eq!(resolves(&net), before);
    // A receiver of the set that asks is answered, by the source and the other receiver.
    for i in [0, 2] {
        let now = net.now;
        net.nodes[i].handle_datagram(now, NodeId(1), &forged(pk::QUERY, 1, &b));
        net.poll(i);
    }
    assert_eq!(resolves(&net), before + 2);
}

#[test]
fn unreliable_messages_beyond_the_event_queue_are_dropped_and_counted() {
    let mut net = three();
    net.paused[1] = true;
    let max = cfg().max_events;
    for n in 0..3 * max as u64 {
        let mut b = Vec::new();
        pk::encode_udata(
            &mut b,
            pk::Key {
                epoch: 0x0bad_f00d,
                txn: n,
            },
            b"flood",
        );
        inject(&mut net, 1, &forged(pk::UDATA, FORGER, &b));
    }
    net.resume(1);
    let got = (net.deliveries(1).iter())
        .filter(|d| d.0 == NodeId(FORGER))
        .count();
    assert!(got <= max, "{got} delivered, {max} held at most");
    assert_eq!(
        got as u64 + counter(&net, 1, "unreliable_dropped"),
        3 * max as u64
    );
}

#[test]
fn a_backoff_from_the_wire_is_bounded_by_the_open_timer() {
    let mut net = three();
    // A source announcing the largest set and unit the fields hold: without a bound the
    // receiver would answer in about nine years.
    let mut b = Vec::new();
    pk::encode_first(
        &mut b,
        &pk::First {
            key: pk::Key {
                epoch: 0x0bad_f00d,
                txn: 0,
            },
            flags: pk::FIRST_USE_BACKOFF,
            set_size: u16::MAX,
            backoff_unit_us: u32::MAX,
            total: 4,
            data: b"slow",
        },
    );
    inject(&mut net, 1, &forged(pk::FIRST, FORGER, &b));
    net.run_for(cfg().open_timeout + MS);
    assert!(
        sent_to_forger(&net) >= 1,
        "no answer within the open's timer"
    );
}
