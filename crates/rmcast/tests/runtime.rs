//! The runtime with a toy engine (tests/common/toy.rs), over real loopback sockets: these tests
//! exercise sockets, address learning, timers, queues and back-pressure independently of the
//! real protocols.

mod common;

use common::toy::{ToyFactory, MAX_EVENTS};
use common::*;
use rmcast::{EngineChoice, Error, GroupAddr, GroupEvent, OpenMode, TrySendError};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

fn toy() -> EngineChoice {
    EngineChoice::custom(Arc::new(ToyFactory))
}

#[test]
fn three_nodes_same_order_over_multicast() {
    let r = three_members_same_order(toy(), |_| GroupAddr::FromName, 200);
    assert_eq!(r.messages, 600);
}

#[test]
fn three_nodes_same_order_over_unicast() {
    let r = three_members_same_order(toy(), |addrs| GroupAddr::Unicast(addrs.to_vec()), 200);
    assert_eq!(r.messages, 600);
}

#[test]
fn explicit_multicast_address() {
    let (ip, _) = rmcast_proto::common::multicast_endpoint(&unique_name("explicit"));
    let port = 20_000 + (std::process::id() % 10_000) as u16; // below the ephemeral ports
    let addr = std::net::SocketAddrV4::new(ip.into(), port);
    three_members_same_order(toy(), move |_| GroupAddr::multicast(addr), 20);
}

#[test]
fn try_send_pushes_back_and_loses_nothing() {
    let n = node(201);
    let mut c = cfg(&unique_name("bp"), &toy(), OpenMode::Create);
    c.event_queue_capacity = 8;
    c.send_queue_capacity = 4;
    let mut g = n.open_group(c).unwrap();
    assert!(g.created());
    assert_eq!(g.engine_kind(), "toy");
    // Nobody receives: the event queue fills, the runtime stops taking events from the toy,
    // whose own bounded event queue fills, so it stops taking messages; the send queue fills,
    // and try_send hands messages back.
    let mut accepted = 0u64;
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        match g.try_send(format!("m{accepted}")) {
            Ok(()) => accepted += 1,
            Err(TrySendError::Full(b)) => break b,
            Err(e) => panic!("unexpected {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "no back-pressure after {accepted} messages"
        );
        // Let the I/O thread move messages along.
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(refused, format!("m{accepted}").as_bytes());
    assert!(accepted >= 4, "accepted {accepted}");
    // Each delivery of an own message is two events (delivery and completion); a few more may
    // be in flight between the queues.
    let bound = (MAX_EVENTS + 8 + 4 + 4) as u64;
    assert!(
        accepted <= bound,
        "accepted {accepted}: queues are not bounded"
    );
    // Drain: every accepted message is delivered, in the order sent.
    let mut seen = Seen::default();
    recv_until(&mut g, &mut seen, Duration::from_secs(10), |s| {
        s.deliveries.len() as u64 == accepted
    });
    for (k, d) in seen.deliveries.iter().enumerate() {
        assert_eq!(d.payload, format!("m{k}").as_bytes());
    }
    // And the queue takes messages again.
    g.try_send("again").unwrap();
    recv_until(&mut g, &mut seen, Duration::from_secs(5), |s| {
        s.deliveries.len() as u64 == accepted + 1
    });
    assert!(n.counters().event_queue_stalls > 0);
    g.leave().unwrap();
}

#[test]
fn join_without_group_times_out_and_join_or_create_creates() {
    let n = node(301);
    let name = unique_name("alone");
    let mut c = cfg(&name, &toy(), OpenMode::Join);
    c.join_timeout = Duration::from_millis(300);
    let t = Instant::now();
    assert!(matches!(n.open_group(c.clone()), Err(Error::JoinTimeout)));
    assert!(t.elapsed() >= Duration::from_millis(300));
    let mut g = n.open_group(c.mode(OpenMode::JoinOrCreate)).unwrap();
    assert!(g.created());
    match g.recv_timeout(Duration::from_secs(2)).unwrap() {
        GroupEvent::View(v) => assert_eq!(v.members, vec![n.id()]),
        other => panic!("expected a view, got {other:?}"),
    }
    let info = g.info().unwrap();
    assert_eq!(info.members, vec![n.id()]);
    assert_eq!(info.coordinator, Some(n.id()));
    // A second node's join-or-create now joins.
    let n2 = node(302);
    let mut c2 = cfg(&name, &toy(), OpenMode::JoinOrCreate);
    c2.join_timeout = Duration::from_secs(5);
    let g2 = n2.open_group(c2).unwrap();
    assert!(!g2.created());
    let mut seen = Seen::default();
    recv_until(&mut g, &mut seen, Duration::from_secs(5), view_has(2));
}

/// Polls a future to completion on this thread (no runtime needed, as the docs promise).
fn run<F: Future>(fut: F) -> F::Output {
    struct W(std::thread::Thread);
    impl Wake for W {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(W(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        assert!(Instant::now() < deadline, "future did not complete");
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

#[test]
fn async_send_and_receive() {
    let n = node(401);
    let mut g = n
        .open_group(cfg(&unique_name("async"), &toy(), OpenMode::Create))
        .unwrap();
    run(async {
        assert!(matches!(g.recv_async().await, Some(GroupEvent::View(_))));
        let msg = g.send_async("hello").await.unwrap();
        match g.recv_async().await {
            Some(GroupEvent::Deliver(d)) => {
                assert_eq!(d.msg, msg);
                assert_eq!(d.payload, "hello");
            }
            other => panic!("expected a delivery, got {other:?}"),
        }
        g.leave_async().await.unwrap();
        assert_eq!(g.recv_async().await, None);
    });
}

#[test]
fn sends_started_in_a_row_are_sent_in_order_and_each_tells_its_completion() {
    let n = node(403);
    let mut g = n
        .open_group(cfg(&unique_name("started"), &toy(), OpenMode::Create))
        .unwrap();
    // Queued one after the other without waiting: all in flight at once.
    let pending: Vec<_> = (0..50)
        .map(|k| g.start_send_with(format!("m{k}"), g.qos()).unwrap())
        .collect();
    let mut seen = Seen::default();
    recv_until(&mut g, &mut seen, Duration::from_secs(10), |s| {
        s.deliveries.len() == 50
    });
    let numbers: Vec<u64> = pending.into_iter().map(|p| p.wait().unwrap()).collect();
    for (k, d) in seen.deliveries.iter().enumerate() {
        assert_eq!(d.payload, format!("m{k}").as_bytes());
        assert_eq!(d.msg, numbers[k], "message {k}'s completion names it");
    }
    // Awaited as well; and on a closed group, refused.
    let p = g.start_send_with("last", g.qos()).unwrap();
    let msg = run(p).unwrap();
    assert!(msg > numbers[49]);
    g.leave().unwrap();
    let after = g
        .start_send_with("after", g.qos())
        .and_then(rmcast::PendingSend::wait);
    assert!(matches!(after, Err(Error::Closed)), "{after:?}");
}

#[test]
fn dropped_member_leaves_in_the_background() {
    let name = unique_name("drop");
    let n1 = node(501);
    let n2 = node(502);
    let mut g1 = n1.open_group(cfg(&name, &toy(), OpenMode::Create)).unwrap();
    let g2 = n2.open_group(cfg(&name, &toy(), OpenMode::Join)).unwrap();
    let mut seen = Seen::default();
    recv_until(&mut g1, &mut seen, Duration::from_secs(5), view_has(2));
    drop(g2);
    recv_until(&mut g1, &mut seen, Duration::from_secs(5), view_has(1));
    // Shutting a node down stops it whatever handles of its groups remain.
    let t = Instant::now();
    n1.shutdown();
    assert!(t.elapsed() < Duration::from_secs(3));
    loop {
        match g1.recv_timeout(Duration::from_secs(2)) {
            Ok(_) => {}
            Err(Error::Closed) => break,
            Err(e) => panic!("expected Closed, got {e}"),
        }
    }
    assert!(matches!(g1.info(), Err(Error::Closed)));
}

/// Opens a group on a node of its own and returns only the group: the node is dropped here.
fn open_alone(id: u32, name: &str, mode: OpenMode) -> (rmcast::Group, std::net::SocketAddr) {
    let n = node(id);
    let addr = n.local_addr();
    (n.open_group(cfg(name, &toy(), mode)).unwrap(), addr)
}

#[test]
fn a_group_keeps_its_node_running_and_its_last_handle_stops_it() {
    let name = unique_name("outlive");
    let (mut g1, _) = open_alone(511, &name, OpenMode::Create);
    let (g2, addr2) = open_alone(512, &name, OpenMode::Join);
    let mut seen = Seen::default();
    recv_until(&mut g1, &mut seen, Duration::from_secs(5), view_has(2));
    // Both nodes are gone, their groups work: a borrowed line is sent and delivered.
    let line = String::from("sent after the node was dropped");
    g2.send(line.as_str()).unwrap();
    recv_until(&mut g1, &mut seen, Duration::from_secs(5), |s: &Seen| {
        s.deliveries.iter().any(|d| d.payload == line.as_bytes())
    });
    // The last handle dropped: the member leaves and its node's thread stops, which frees
    // its unicast port.
    drop(g2);
    recv_until(&mut g1, &mut seen, Duration::from_secs(5), view_has(1));
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::UdpSocket::bind(addr2).is_err() {
        assert!(
            Instant::now() < deadline,
            "the node's socket was never closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bad_configurations_are_refused() {
    let n = node(601);
    let mut c = cfg("x", &toy(), OpenMode::Create);
    c.max_datagram_bytes = Some(100_000);
    assert!(matches!(n.open_group(c), Err(Error::Config(_))));
    let c = cfg("x", &toy(), OpenMode::Create)
        .addr(GroupAddr::Multicast("127.0.0.1:5000".parse().unwrap()));
    assert!(matches!(n.open_group(c), Err(Error::Config(_))));
    let c = cfg("x", &toy(), OpenMode::Create).addr(GroupAddr::Unicast(vec![]));
    assert!(matches!(n.open_group(c), Err(Error::Config(_))));
    // Unicast peers on another host from a node bound to loopback: refused with the cure.
    let c = cfg("x", &toy(), OpenMode::Create)
        .addr(GroupAddr::Unicast(vec!["10.1.2.3:5000".parse().unwrap()]));
    match n.open_group(c) {
        Err(Error::Config(e)) => assert!(e.to_string().contains("interface"), "{e}"),
        other => panic!("{other:?}"),
    }
    // Failure detection with no probe, or probes without a timeout, would assert in the
    // engine on the I/O thread: refused up front.
    for (retries, timeout_ms) in [(0, 100), (4, 0)] {
        let mut engine = EngineChoice::sequencer(1);
        engine.settings.recovery.alive_retries = retries;
        engine.settings.recovery.alive_timeout_ms = timeout_ms;
        let c = cfg("x", &engine, OpenMode::Create);
        assert!(matches!(n.open_group(c), Err(Error::Config(_))));
    }
    // Detection off needs neither.
    let mut policy = rmcast::RecoveryPolicy {
        alive_interval_ms: 0,
        ..Default::default()
    };
    policy.alive_retries = 0;
    let engine = EngineChoice::sequencer(0).recovery(policy);
    let g = n
        .open_group(cfg(&unique_name("nodetect"), &engine, OpenMode::Create))
        .unwrap();
    g.leave().unwrap();
}

#[test]
fn completion_events_come_in_order_and_reset_needs_an_engine_that_recovers() {
    let n = node(701);
    let mut c = cfg(&unique_name("complete"), &toy(), OpenMode::Create);
    c.completion_events = true;
    let mut g = n.open_group(c).unwrap();
    let mut seen = Seen::default();
    recv_until(&mut g, &mut seen, Duration::from_secs(5), view_has(1));
    for k in 0..5 {
        g.try_send(format!("m{k}")).unwrap();
    }
    recv_until(&mut g, &mut seen, Duration::from_secs(5), |s| {
        s.deliveries.len() == 5 && s.other.len() == 5
    });
    // Each completion names a delivered message (the toy completes after delivering).
    let done: Vec<u64> = seen
        .other
        .iter()
        .map(|e| match e {
            GroupEvent::SendComplete { msg } => *msg,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    let delivered: Vec<u64> = seen.deliveries.iter().map(|d| d.msg).collect();
    assert_eq!(done, delivered);
    let report = rmcast_sim::log::verify_logs(&[seen.records()]).unwrap();
    assert_eq!(report.completions, 5);
    // The toy has no crash recovery.
    assert!(matches!(
        g.reset(0),
        Err(Error::Send(rmcast_proto::SendError::Unsupported))
    ));
    let info = g.info().unwrap();
    assert!(!info.recovering);
    g.leave().unwrap();
    assert!(matches!(g.reset(0), Err(Error::Closed)));
}

#[test]
fn a_duplicate_node_id_is_refused_not_made_a_second_group() {
    let name = unique_name("dup");
    let a = node(401);
    let mut ga = a
        .open_group(cfg(&name, &EngineChoice::sequencer(0), OpenMode::Create))
        .unwrap();
    for mode in [OpenMode::Join, OpenMode::JoinOrCreate] {
        let b = node(401);
        let mut c = cfg(&name, &EngineChoice::sequencer(0), mode);
        c.join_timeout = Duration::from_secs(3);
        match b.open_group(c) {
            Err(Error::DuplicateId { id, .. }) => assert_eq!(id.0, 401),
            Err(e) => panic!("{mode:?}: expected DuplicateId, got {e}"),
            Ok(g) => panic!("{mode:?}: joined (created: {})", g.created()),
        }
    }
    // The first node keeps its group, alone.
    assert_eq!(ga.info().unwrap().members, vec![a.id()]);
    ga.send("still works").unwrap();
    let _ = ga.recv_timeout(Duration::from_secs(1));
}

#[test]
fn a_member_that_only_sends_never_waits_for_a_reader() {
    let n = node(531);
    let mut c = cfg(&unique_name("sendonly"), &toy(), OpenMode::Create);
    c.event_queue_capacity = 8;
    c.send_queue_capacity = 4;
    // Kept as a `Group` and never read, this member stops after a few messages
    // (`try_send_pushes_back_and_loses_nothing`); as a sender only, its deliveries are let go.
    let s = n.open_group(c).unwrap().into_sender();
    let total = 20 * MAX_EVENTS as u64;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut sent = 0u64;
    while sent < total {
        match s.try_send(format!("m{sent}")) {
            Ok(()) => sent += 1,
            Err(TrySendError::Full(_)) => {
                assert!(
                    Instant::now() < deadline,
                    "a send-only member stopped after {sent} of {total} messages"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
    // And a blocking send completes too.
    s.send("last").unwrap();
    s.leave().unwrap();
}

/// Feature `stream`: a group's events read as a `Stream` come in the group's order, two
/// members' alike, and the stream ends once the group is left and drained.
#[test]
fn events_as_a_stream_arrive_in_order_and_end_after_the_leave() {
    use futures_util::StreamExt;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let name = unique_name("stream");
        let engine = EngineChoice::sequencer(0);
        let (n1, n2) = (node(1), node(2));
        let mut a = n1
            .open_group_async(cfg(&name, &engine, OpenMode::Create))
            .await
            .expect("create");
        let mut b = n2
            .open_group_async(cfg(&name, &engine, OpenMode::Join))
            .await
            .expect("join");
        let sent: Vec<String> = (0..50).map(|i| format!("line {i}")).collect();
        for (i, line) in sent.iter().enumerate() {
            let g = if i % 2 == 0 { &a } else { &b };
            g.send_async(line.as_str()).await.expect("send");
        }
        let mut orders = Vec::new();
        for g in [&mut a, &mut b] {
            let got: Vec<String> = tokio::time::timeout(
                Duration::from_secs(10),
                g.filter_map(|e| async move {
                    match e {
                        GroupEvent::Deliver(d) => {
                            Some(String::from_utf8_lossy(&d.payload).into_owned())
                        }
                        _ => None,
                    }
                })
                .take(sent.len())
                .collect(),
            )
            .await
            .expect("every line within 10 s");
            orders.push(got);
        }
        let mut sorted = orders[0].clone();
        sorted.sort();
        let mut want = sent.clone();
        want.sort();
        assert_eq!(sorted, want, "every line once");
        assert_eq!(orders[0], orders[1], "one total order");
        b.leave_async().await.expect("leave");
        // After the leave the stream yields what is left and then ends.
        let rest = tokio::time::timeout(Duration::from_secs(10), (&mut b).count())
            .await
            .expect("the stream ends after the leave");
        assert!(
            rest < 16,
            "only the last views and completions remain: {rest}"
        );
        a.leave_async().await.expect("leave");
    });
}

/// An interface address this host does not have is refused when the node starts, and the
/// error names the address and the likely cause rather than only the OS's "Cannot assign
/// requested address". 192.0.2.1 is TEST-NET-1: never a local address; nothing is sent.
#[test]
fn an_interface_address_not_on_this_host_is_named_in_the_error() {
    let err = match rmcast::Node::new(rmcast::NodeConfig::default().interface([192, 0, 2, 1])) {
        Ok(_) => panic!("a node started on 192.0.2.1"),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert!(matches!(err, Error::Io(_)), "{msg}");
    assert!(
        msg.contains("interface 192.0.2.1") && msg.contains("is it an address of this host"),
        "{msg}"
    );
}
