//! Messages larger than a datagram on the ring (1,400-byte datagrams, so that 10,000 bytes are
//! 8 fragments): delivered once, whole, in the place of their last fragment, at every member
//! and every level; refused above the maximum; fragments without their beginning dropped and
//! counted; at the unreliable level a lost fragment loses its message and nothing else; a
//! partial message of a member that crashed is dropped by every survivor at the view that
//! removes it, and its buffer freed.

use super::packet;
use super::{Config, Ring};
use crate::engine::{Engine, Event, NodeId, Qos, SendError, Time};
use crate::registry::{EngineParams, EngineSettings, Role};
use crate::testnet::{DropRule, Observer};
use crate::wire;
use bytes::Bytes;
use std::time::Duration;

type Net<X = ()> = crate::testnet::Net<Ring, X>;

const DATAGRAM: usize = 1400;

fn build(role: Role, id: u32, now: Time, cfg: Config) -> Box<Ring> {
    build_sized(role, id, now, cfg, DATAGRAM)
}

fn build_sized(role: Role, id: u32, now: Time, cfg: Config, datagram: usize) -> Box<Ring> {
    Box::new(Ring::with_config(
        &EngineParams {
            role,
            group: 7,
            me: NodeId(id),
            max_datagram_bytes: datagram,
            now,
            seed: u64::from(id),
            settings: &EngineSettings::default(),
        },
        cfg,
    ))
}

/// Node 0 creates the ring, the others join one by one (ids are indices).
fn ring(n: u32, cfg: Config) -> Net {
    ring_with(n, cfg, ())
}

fn ring_with<X: Observer<Ring>>(n: u32, cfg: Config, x: X) -> Net<X> {
    let mut net = Net::with(x);
    net.add(build(Role::Create, 0, Time::ZERO, cfg));
    for i in 1..n {
        let mut e = build(Role::Join, i, net.now, cfg);
        e.handle_timeout(net.now);
        net.add(e);
        net.run_for(Duration::from_millis(200));
    }
    net
}

/// A drop rule on (from, to, packet type, body).
fn rule(mut f: impl FnMut(usize, usize, u8, &[u8]) -> bool + 'static) -> Option<DropRule> {
    Some(Box::new(move |c| f(c.from, c.to, c.ptype, c.body)))
}

/// A recognisable message of `len` bytes.
fn big(len: usize, salt: u8) -> Bytes {
    Bytes::from((0..len).map(|i| (i % 251) as u8 ^ salt).collect::<Vec<_>>())
}

/// Every delivery at `i`: (seq, sender, msg, payload).
fn delivered<X>(net: &Net<X>, i: usize) -> Vec<(u64, NodeId, u64, Bytes)> {
    (net.events[i].iter())
        .filter_map(|e| match e {
            Event::Deliver(d) => Some((d.seq, d.sender, d.msg, d.payload.clone())),
            _ => None,
        })
        .collect()
}

fn completed<X>(net: &Net<X>, i: usize) -> Vec<u64> {
    (net.events[i].iter())
        .filter_map(|e| match e {
            Event::SendComplete { msg } => Some(*msg),
            _ => None,
        })
        .collect()
}

fn submit<X: Observer<Ring>>(net: &mut Net<X>, i: usize, payload: Bytes, qos: Qos) -> u64 {
    let m = net.nodes[i].submit(net.now, payload, qos).unwrap();
    net.poll(i);
    m
}

#[test]
fn a_large_message_arrives_whole_and_in_order_among_small_ones_at_every_member() {
    let mut net = ring(3, Config::default());
    // Member 2 misses the first copy of every other fragment: NACKs repair them.
    let mut seen = 0u64;
    net.drop = rule(move |_, to, ptype, _| {
        if to == 2 && ptype == packet::DATA_FRAG {
            seen += 1;
            return seen % 2 == 1;
        }
        false
    });
    let payload = big(10_000, 0);
    let before = submit(
        &mut net,
        1,
        Bytes::from_static(b"before"),
        Qos::TotallyOrdered,
    );
    let m = submit(&mut net, 0, payload.clone(), Qos::TotallyOrdered);
    // 10,000 bytes in 1,400-byte datagrams: 8 fragments, numbered 0..8; the message is 7.
    assert_eq!(m, 7);
    let after = submit(
        &mut net,
        2,
        Bytes::from_static(b"after"),
        Qos::TotallyOrdered,
    );
    let more = submit(
        &mut net,
        0,
        Bytes::from_static(b"more"),
        Qos::TotallyOrdered,
    );
    assert_eq!(more, 8, "the next message follows the fragments");
    net.run_for(Duration::from_secs(2));
    let d0 = delivered(&net, 0);
    assert_eq!(d0.len(), 4, "one delivery per message, none per fragment");
    for i in 1..3 {
        assert_eq!(
            delivered(&net, i),
            d0,
            "member {i}: one order, same messages"
        );
    }
    let whole: Vec<_> = d0.iter().filter(|d| d.1 == NodeId(0) && d.2 == m).collect();
    assert_eq!(whole.len(), 1);
    assert_eq!(whole[0].3, payload, "delivered whole");
    // Its place is its last fragment's: after the small message sent before it.
    let pos = |sender: u32, msg: u64| d0.iter().position(|d| (d.1, d.2) == (NodeId(sender), msg));
    assert!(pos(1, before) < pos(0, m));
    assert!(pos(0, m) < pos(0, more));
    assert!(pos(2, after).is_some());
    // The send completes once, under the message's number.
    assert_eq!(completed(&net, 0), vec![m, more]);
    for i in 0..3 {
        assert_eq!(
            net.nodes[i].fragments_dropped, 0,
            "member {i}: nothing dropped"
        );
        assert!(!net.nodes[i].reassembly.in_progress(NodeId(0)));
    }
}

#[test]
fn large_messages_of_every_level_are_delivered_whole_once_beside_small_ones() {
    let mut net = ring(3, Config::default());
    // Member 1 loses a tenth of what it would receive: repairs fill the holes at every level.
    let mut k = 0u64;
    net.drop = rule(move |_, to, _, _| {
        k += 1;
        to == 1 && k % 10 == 3
    });
    let levels = [
        Qos::Reliable,
        Qos::SourceOrdered,
        Qos::TotallyOrdered,
        Qos::KResilient(1),
        Qos::MajorityResilient,
        Qos::TotallyResilient,
    ];
    let mut sent = Vec::new();
    for (n, &qos) in levels.iter().enumerate() {
        let from = n % 2;
        let p = big(5_000 + 700 * n, n as u8);
        let m = submit(&mut net, from, p.clone(), qos);
        sent.push((NodeId(from as u32), m, p));
        let s = submit(&mut net, 2, Bytes::from(vec![n as u8; 20]), qos);
        sent.push((NodeId(2), s, Bytes::from(vec![n as u8; 20])));
    }
    net.run_for(Duration::from_secs(3));
    for i in 0..3 {
        let got = delivered(&net, i);
        assert_eq!(got.len(), sent.len(), "member {i}");
        for (sender, msg, p) in &sent {
            let d: Vec<_> = got
                .iter()
                .filter(|d| (d.1, d.2) == (*sender, *msg))
                .collect();
            assert_eq!(d.len(), 1, "member {i}: {sender:?} {msg} once");
            assert_eq!(&d[0].3, p, "member {i}: {sender:?} {msg} whole");
        }
        // Each sender's messages in its order.
        for s in 0..3 {
            let mine: Vec<u64> = (got.iter())
                .filter(|d| d.1 == NodeId(s))
                .map(|d| d.2)
                .collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]), "member {i}: {mine:?}");
        }
        assert_eq!(net.nodes[i].fragments_dropped, 0);
    }
    // The totally ordered levels in one order everywhere.
    let total = |i: usize| -> Vec<(NodeId, u64)> {
        (net.events[i].iter())
            .filter_map(|e| match e {
                Event::Deliver(d) => Some((d.sender, d.msg)),
                _ => None,
            })
            .filter(|(s, m)| {
                sent.iter()
                    .position(|x| (x.0, x.1) == (*s, *m))
                    .is_some_and(|k| levels[k / 2].is_total())
            })
            .collect()
    };
    assert_eq!(total(1), total(0));
    assert_eq!(total(2), total(0));
    let done = completed(&net, 0);
    let own: Vec<u64> = (sent.iter())
        .filter(|s| s.0 == NodeId(0))
        .map(|s| s.1)
        .collect();
    let mut d = done.clone();
    d.sort();
    assert_eq!(
        d, own,
        "member 0's sends complete once each, under their numbers"
    );
}

#[test]
fn a_message_above_the_maximum_is_refused_and_the_largest_goes_through() {
    let mut net = ring(2, Config::default());
    let now = net.now;
    assert_eq!(
        net.nodes[0].submit(
            now,
            Bytes::from(vec![0; (1 << 20) + 1]),
            Qos::TotallyOrdered
        ),
        Err(SendError::TooLarge)
    );
    // The largest message (770 fragments) fits the default window of 1,024 messages.
    let largest = big(1 << 20, 9);
    let m = submit(&mut net, 0, largest.clone(), Qos::TotallyOrdered);
    net.run_for(Duration::from_secs(3));
    for i in 0..2 {
        let got = delivered(&net, i);
        assert_eq!(got.len(), 1, "member {i}");
        assert_eq!((got[0].2, &got[0].3), (m, &largest), "member {i}");
    }
    assert_eq!(completed(&net, 0), vec![m]);
    // A message whose fragments could never all be in the send window would wedge its
    // sender: refused as too large, not pushed back.
    let small_window = Config {
        window_msgs: 4,
        ..Config::default()
    };
    let mut net = ring(2, small_window);
    let now = net.now;
    assert_eq!(
        net.nodes[0].submit(now, big(10_000, 0), Qos::TotallyOrdered),
        Err(SendError::TooLarge)
    );
    // Four fragments fit it.
    let p = big(4 * packet::fragment_bytes(DATAGRAM), 1);
    let m = submit(&mut net, 0, p.clone(), Qos::TotallyOrdered);
    assert_eq!(m, 3);
    net.run_for(Duration::from_secs(1));
    assert_eq!(delivered(&net, 1).last().map(|d| d.3.clone()), Some(p));
    // A maximum that needs more fragments than the window holds even in the largest
    // datagrams is refused by the configuration's check.
    let bad = Config {
        window_msgs: 4,
        max_message_bytes: 1 << 20,
        ..Config::default()
    };
    let err = bad.validate().unwrap_err();
    assert!(err.to_string().contains("max_message_bytes"), "{err}");
}

#[test]
fn messages_around_the_datagram_boundary_go_whole() {
    let mut net = ring(2, Config::default());
    // The longest message one data packet holds goes as before, in a data packet of its own
    // (the same bytes as before fragments existed), never as a fragment.
    let one = DATAGRAM - wire::HEADER_LEN - packet::DATA_FIXED - packet::DATA_PER_MSG;
    let p = big(one, 9);
    let mut want = Vec::new();
    packet::encode_data(
        &mut want,
        NodeId(0),
        0,
        std::iter::once((Qos::TotallyOrdered, &p[..])),
    );
    let seen = std::rc::Rc::new(std::cell::Cell::new((0, 0)));
    let s = seen.clone();
    net.drop = rule(move |from, _, ptype, body| {
        let (data, frags) = s.get();
        if from == 0 && ptype == packet::DATA && body == &want[..] {
            s.set((data + 1, frags));
        }
        if ptype == packet::DATA_FRAG {
            s.set((data, frags + 1));
        }
        false
    });
    let m = submit(&mut net, 0, p.clone(), Qos::TotallyOrdered);
    net.run_for(Duration::from_millis(200));
    assert_eq!(m, 0);
    assert!(seen.get().0 > 0 && seen.get().1 == 0, "{:?}", seen.get());
    net.drop = None;
    // Each length around the boundary, up to two fragments.
    let lens: Vec<usize> = (one - 1..one + 4)
        .chain([2 * packet::fragment_bytes(DATAGRAM)])
        .collect();
    let mut sent = vec![(m, p)];
    for (k, &len) in lens.iter().enumerate() {
        let p = big(len, k as u8);
        sent.push((submit(&mut net, 0, p.clone(), Qos::TotallyOrdered), p));
    }
    net.run_for(Duration::from_secs(1));
    for i in 0..2 {
        let got: Vec<(u64, Bytes)> = (delivered(&net, i).into_iter())
            .map(|d| (d.2, d.3))
            .collect();
        assert_eq!(got, sent, "member {i}");
    }
}

#[test]
fn members_with_smaller_datagrams_send_more_fragments_that_others_take() {
    let mut net = ring(2, Config::default());
    // Member 2 writes 300-byte datagrams: 10,000 bytes are 39 fragments to it, 8 to the others.
    let mut e = build_sized(Role::Join, 2, net.now, Config::default(), 300);
    e.handle_timeout(net.now);
    net.add(e);
    net.run_for(Duration::from_millis(300));
    let (a, b) = (big(10_000, 5), big(10_000, 6));
    let ma = submit(&mut net, 2, a.clone(), Qos::TotallyOrdered);
    let mb = submit(&mut net, 0, b.clone(), Qos::TotallyOrdered);
    assert_eq!(
        ma + 1,
        10_000u64.div_ceil(packet::fragment_bytes(300) as u64)
    );
    assert_eq!(ma, 38);
    net.run_for(Duration::from_secs(2));
    for i in 0..3 {
        let got: Vec<(NodeId, u64, Bytes)> = (delivered(&net, i).into_iter())
            .map(|d| (d.1, d.2, d.3))
            .collect();
        assert_eq!(got.len(), 2, "member {i}");
        assert!(got.contains(&(NodeId(2), ma, a.clone())), "member {i}");
        assert!(got.contains(&(NodeId(0), mb, b.clone())), "member {i}");
        assert_eq!(net.nodes[i].counters().malformed_dropped, 0);
    }
}

/// A fragment datagram from `sender` (as its header says).
fn forged_fragment(sender: u32, origin: u32, sseq: u64, qos: Qos, frag: (u16, u16)) -> Vec<u8> {
    let mut b = Vec::new();
    wire::Header {
        engine: wire::EngineKind::Ring,
        ptype: packet::DATA_FRAG,
        flags: 0,
        group: 7,
        incarnation: 0,
        sender: NodeId(sender),
    }
    .encode(&mut b);
    packet::encode_frag(&mut b, NodeId(origin), sseq, qos, frag, b"stray");
    b
}

#[test]
fn a_fragment_without_its_beginning_is_dropped_and_counted() {
    for qos in [Qos::Reliable, Qos::TotallyOrdered, Qos::Unreliable] {
        let mut net = ring(3, Config::default());
        // Fragment 1 of 3 of member 1's first message, which member 1 never sent.
        let forged = forged_fragment(1, 1, 0, qos, (1, 3));
        net.nodes[2].handle_datagram(net.now, NodeId(1), &forged);
        net.poll(2);
        // A count beyond what the largest message needs is refused by the decoder.
        let before = net.nodes[2].counters().malformed_dropped;
        let huge = forged_fragment(1, 1, 0, qos, (0, u16::MAX));
        net.nodes[2].handle_datagram(net.now, NodeId(1), &huge);
        assert_eq!(net.nodes[2].counters().malformed_dropped, before + 1);
        net.run_for(Duration::from_secs(1));
        // The ring goes on: a message after it arrives everywhere.
        let m = submit(&mut net, 0, big(3_000, 4), Qos::TotallyOrdered);
        net.run_for(Duration::from_secs(1));
        assert!(net.nodes[2].fragments_dropped >= 1, "{qos:?}: counted");
        for i in 0..3 {
            let got = delivered(&net, i);
            assert!(
                got.iter().all(|d| d.1 != NodeId(1)),
                "{qos:?}: member {i} delivered part of a message"
            );
            assert!(got.iter().any(|d| (d.1, d.2) == (NodeId(0), m)), "{qos:?}");
            assert!(!net.nodes[i].reassembly.in_progress(NodeId(1)));
        }
    }
}

#[test]
fn an_unreliable_message_that_lost_a_fragment_is_lost_whole_and_holds_nothing_up() {
    let mut net = ring(3, Config::default());
    // Member 2 loses the third fragment of the first message (its third DATA_FRAG).
    let mut to_2 = 0;
    net.drop = rule(move |_, to, ptype, _| {
        if to == 2 && ptype == packet::DATA_FRAG {
            to_2 += 1;
            return to_2 == 3;
        }
        false
    });
    let first = big(10_000, 1);
    let second = big(9_000, 2);
    let a = submit(&mut net, 0, first.clone(), Qos::Unreliable);
    let b = submit(&mut net, 0, second.clone(), Qos::Unreliable);
    let c = submit(&mut net, 0, Bytes::from_static(b"small"), Qos::Unreliable);
    assert!([a, b, c].iter().all(|m| m & packet::UNRELIABLE_BIT != 0));
    assert_eq!(
        completed(&net, 0),
        vec![a, b, c],
        "unreliable sends complete at once"
    );
    net.run_for(Duration::from_secs(1));
    let msgs = |i: usize| -> Vec<(u64, Bytes)> {
        (delivered(&net, i).into_iter())
            .filter(|d| d.1 == NodeId(0))
            .map(|d| (d.2, d.3))
            .collect()
    };
    let all = vec![
        (a, first),
        (b, second.clone()),
        (c, Bytes::from_static(b"small")),
    ];
    assert_eq!(msgs(0), all);
    assert_eq!(msgs(1), all);
    // Member 2: the first message is lost (never in part), what follows arrives.
    assert_eq!(msgs(2), all[1..].to_vec());
    assert!(net.nodes[2].fragments_dropped >= 1);
    assert!(!net.nodes[2].unreliable_parts.in_progress(NodeId(0)));
}

/// Whether some member ever held part of a message of `gone`.
struct Partial {
    gone: NodeId,
    seen: bool,
}

impl Observer<Ring> for Partial {
    fn polled(&mut self, _: usize, node: &mut Ring, _: &[Event]) {
        self.seen |= node.reassembly.in_progress(self.gone);
    }
}

#[test]
fn a_partial_message_of_a_crashed_member_is_dropped_by_every_survivor_and_freed() {
    // Over several rings (the crash falls at another point of the token's round each time),
    // at least one reformation orders the beginning the survivors hold.
    let mut partial_seen = 0;
    for wait in [0u64, 3, 7, 12, 20] {
        partial_seen += u32::from(crash_in_a_message(wait));
    }
    assert!(partial_seen > 0, "no reformation ordered a partial message");
}

/// Member 1 sends a 10,000-byte message whose fragments from the fourth on never leave it,
/// and crashes `wait` ms later. Returns whether a survivor held part of it at some point.
fn crash_in_a_message(wait: u64) -> bool {
    let gone = NodeId(1);
    let mut net = ring_with(3, Config::default(), Partial { gone, seen: false });
    net.run_for(Duration::from_millis(500));
    net.drop = rule(move |from, _, ptype, body| {
        from == 1
            && ptype == packet::DATA_FRAG
            && packet::decode_frag(body, usize::MAX).is_ok_and(|f| f.frag.0 >= 3)
    });
    submit(&mut net, 1, big(10_000, 3), Qos::TotallyOrdered);
    net.run_for(Duration::from_millis(wait));
    // The token site orders a message in fragments whole or not at all: nobody delivered any
    // of it, and the survivors hold its beginning unordered.
    for i in [0, 2] {
        assert!(delivered(&net, i).iter().all(|d| d.1 != gone));
    }
    net.down[1] = true;
    net.run_for(Duration::from_secs(8));
    let after = submit(&mut net, 0, Bytes::from_static(b"on"), Qos::TotallyOrdered);
    net.run_for(Duration::from_secs(1));
    for i in [0, 2] {
        let mut members = net.nodes[i].info().members;
        members.sort();
        assert_eq!(
            members,
            vec![NodeId(0), NodeId(2)],
            "member {i}: reformed without the crashed member"
        );
        assert!(
            !net.nodes[i].reassembly.in_progress(gone),
            "member {i}: freed"
        );
        let got = delivered(&net, i);
        assert!(
            got.iter().all(|d| d.1 != gone),
            "member {i}: nothing in part"
        );
        assert!(got.iter().any(|d| (d.1, d.2) == (NodeId(0), after)));
    }
    assert_eq!(delivered(&net, 0), delivered(&net, 2));
    net.x.seen
}
