//! What the generalised engine contract adds to the runtime: per-message QoS checked against the
//! engine's guarantees, typed configuration errors, the reply path, addresses known from the
//! view (HELLO exchange), and transmits cut into segments and scoped by TTL.

mod common;

use bytes::Bytes;
use common::toy::ToyFactory;
use common::*;
use rmcast::{
    ConfigError, EngineChoice, EngineFactory, EngineParams, EngineSettings, Error, GroupEvent,
    OpenMode, Qos, TrySendError,
};
use rmcast_proto::wire::{self, EngineKind, Header};
use rmcast_proto::{
    Counters, Delivery, Destination, Engine, Event, GroupInfo, Guarantees, NodeId, SendError, Time,
    Transmit, View,
};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn toy() -> EngineChoice {
    EngineChoice::custom(Arc::new(ToyFactory))
}

#[test]
fn a_qos_the_engine_does_not_serve_is_refused_before_the_engine() {
    let n = node(1101);
    let mut g = n
        .open_group(cfg(&unique_name("qos"), &toy(), OpenMode::Create))
        .unwrap();
    let mut seen = Seen::default();
    recv_until(&mut g, &mut seen, Duration::from_secs(5), view_has(1));
    assert!(!g.guarantees().qos.contains(Qos::Unreliable));
    for qos in [Qos::Unreliable, Qos::KResilient(1)] {
        assert!(matches!(
            g.send_with("x", qos),
            Err(Error::Send(SendError::Unsupported))
        ));
        assert!(matches!(
            g.send_nowait_with("x", qos),
            Err(Error::Send(SendError::Unsupported))
        ));
        match g.try_send_with("kept", qos) {
            Err(TrySendError::Unsupported(b)) => assert_eq!(b, "kept"),
            other => panic!("expected Unsupported, got {other:?}"),
        }
        let r = futures_block_on(g.send_async_with("x", qos));
        assert!(matches!(r, Err(Error::Send(SendError::Unsupported))));
    }
    // None of them reached the engine.
    assert_eq!(g.counters().unwrap().submitted, 0);
    // A level it serves goes through.
    let msg = g.send_with("ok", Qos::Reliable).unwrap();
    recv_until(&mut g, &mut seen, Duration::from_secs(5), |s| {
        s.deliveries.iter().any(|d| d.msg == msg)
    });
    // A group whose default QoS the engine does not serve is refused up front.
    let mut c = cfg(&unique_name("qos2"), &toy(), OpenMode::Create);
    c.qos = Qos::Unreliable;
    assert!(matches!(
        n.open_group(c),
        Err(Error::Config(ConfigError::Invalid { field: "qos", .. }))
    ));
    g.leave().unwrap();
}

#[test]
fn configuration_errors_are_typed() {
    let n = node(1201);
    let mut c = cfg("x", &toy(), OpenMode::Create);
    c.max_datagram_bytes = Some(100);
    assert_eq!(
        c.validate(),
        Err(ConfigError::OutOfRange {
            field: "max_datagram_bytes",
            value: 100,
            min: rmcast::MIN_DATAGRAM_BYTES as u64,
            max: rmcast::MAX_DATAGRAM_BYTES as u64,
        })
    );
    assert!(matches!(
        n.open_group(c),
        Err(Error::Config(ConfigError::OutOfRange {
            field: "max_datagram_bytes",
            ..
        }))
    ));
    let mut c = cfg("x", &toy(), OpenMode::Create);
    c.send_queue_capacity = 0;
    assert!(matches!(
        c.validate(),
        Err(ConfigError::OutOfRange {
            field: "send_queue_capacity",
            value: 0,
            ..
        })
    ));
    // Engine settings are checked by the engine's factory, and reported as it types them.
    let mut engine = EngineChoice::sequencer(1);
    engine.settings.recovery.alive_retries = 0;
    let c = cfg("x", &engine, OpenMode::Create);
    assert!(matches!(
        n.open_group(c),
        Err(Error::Config(ConfigError::Invalid {
            field: "alive_retries",
            ..
        }))
    ));
    let c = cfg("x", &toy(), OpenMode::Create).addr(rmcast::GroupAddr::Multicast(
        "127.0.0.1:5000".parse().unwrap(),
    ));
    assert!(matches!(
        c.validate(),
        Err(ConfigError::Invalid { field: "addr", .. })
    ));
    assert!(matches!(
        EngineChoice::named("no-such-engine"),
        Err(ConfigError::UnknownEngine(_))
    ));
}

/// Node 1303 joins last, so it never hears from node 1302 (whose only multicast, its join,
/// went out before 1303 existed, and whose requests go to the sequencer point to point). Its
/// answer to 1302's message is its first datagram for 1302: the HELLO exchange started by the
/// view must have told it where 1302 lives, so nothing goes to the whole group instead.
#[test]
fn addresses_are_known_from_the_view_and_replies_reach_the_sender() {
    let name = unique_name("hello");
    let nodes = [node(1301), node(1302), node(1303)];
    let mut groups = Vec::new();
    let mut seen: Vec<Seen> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let mode = if i == 0 {
            OpenMode::Create
        } else {
            OpenMode::Join
        };
        groups.push(n.open_group(cfg(&name, &toy(), mode)).unwrap());
        seen.push(Seen::default());
    }
    for (g, s) in groups.iter_mut().zip(seen.iter_mut()) {
        recv_until(g, s, Duration::from_secs(10), view_has(3));
    }
    let msg = groups[1].send("question").unwrap();
    recv_until(&mut groups[2], &mut seen[2], Duration::from_secs(5), |s| {
        s.deliveries.iter().any(|d| d.msg == msg)
    });
    // The answers to the joiner's ask have long arrived (they were sent before the message
    // was even ordered); give a slow machine a moment all the same.
    let deadline = Instant::now() + Duration::from_secs(2);
    while nodes[2].counters().hellos_received < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let c = nodes[2].counters();
    assert!(c.hellos_sent > 0 && c.hellos_received >= 2, "{c:?}");
    groups[2]
        .reply(NodeId(1302), msg, "answer")
        .expect("the toy answers");
    let deadline = Instant::now() + Duration::from_secs(5);
    let reply = loop {
        match groups[1].recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(GroupEvent::Reply(r)) => break r,
            Ok(_) => {}
            Err(e) => panic!("no reply: {e}"),
        }
    };
    assert_eq!(reply.from, NodeId(1303));
    assert_eq!(reply.request, msg);
    assert_eq!(reply.payload, "answer");
    for n in &nodes {
        assert_eq!(n.counters().peer_unknown, 0, "node {}", n.id());
    }
    // The sequencer has no response channel.
    let seq = nodes[0]
        .open_group(cfg(
            &unique_name("noreply"),
            &EngineChoice::sequencer(0),
            OpenMode::Create,
        ))
        .unwrap();
    assert!(matches!(
        seq.reply(NodeId(1302), 1, "x"),
        Err(Error::Send(SendError::Unsupported))
    ));
    // Counters only the sequencer keeps come through by name.
    let own = seq.engine_counters().unwrap();
    assert!(own.iter().any(|(name, _)| *name == "syncs_sent"), "{own:?}");
    seq.leave().unwrap();
    for g in groups.iter().rev() {
        g.leave().unwrap();
    }
}

/// An engine without membership that multicasts each message as a buffer of several
/// datagrams (`segment_size`) to a TTL scope, and delivers every datagram it receives.
struct Blaster {
    group: u32,
    me: NodeId,
    out: VecDeque<Vec<u8>>,
    events: VecDeque<Event>,
    next_msg: u64,
    counters: Counters,
}

/// Datagrams per message.
const SEGMENTS: usize = 3;
/// Bytes of each datagram: header and body.
const SEGMENT: usize = wire::HEADER_LEN + 16;

struct BlasterFactory;

impl EngineFactory for BlasterFactory {
    fn name(&self) -> &str {
        "blaster"
    }
    fn guarantees(&self, _: &EngineSettings) -> Guarantees {
        let mut g = Guarantees::reliable_fifo();
        g.qos.unreliable = true;
        g
    }
    fn build(&self, p: &EngineParams<'_>) -> Box<dyn Engine> {
        let view = View {
            id: 1,
            seq: 0,
            members: vec![p.me],
            coordinator: p.me,
            joined: Some(p.me),
            left: None,
        };
        Box::new(Blaster {
            group: p.group,
            me: p.me,
            out: VecDeque::new(),
            events: VecDeque::from([Event::View(view)]),
            next_msg: 1,
            counters: Counters::default(),
        })
    }
}

impl Engine for Blaster {
    fn handle_datagram(&mut self, _now: Time, from: NodeId, datagram: &[u8]) {
        let Ok(p) = wire::decode(datagram) else {
            return;
        };
        if p.header.group != self.group || p.header.engine != EngineKind::Gossip {
            return;
        }
        self.counters.delivered += 1;
        self.events.push_back(Event::Deliver(Delivery {
            respond: false,
            seq: self.counters.delivered,
            sender: from,
            msg: u64::from(p.header.ptype),
            view: 1,
            payload: Bytes::copy_from_slice(p.body),
        }));
    }
    fn handle_timeout(&mut self, _now: Time) {}
    fn submit(&mut self, _now: Time, payload: Bytes, _qos: Qos) -> Result<u64, SendError> {
        let msg = self.next_msg;
        self.next_msg += 1;
        let mut buf = Vec::new();
        for k in 0..SEGMENTS {
            Header {
                engine: EngineKind::Gossip,
                ptype: k as u8,
                flags: 0,
                group: self.group,
                incarnation: 0,
                sender: self.me,
            }
            .encode(&mut buf);
            let mut body = payload.to_vec();
            body.resize(SEGMENT - wire::HEADER_LEN, b'.');
            buf.extend_from_slice(&body);
        }
        self.out.push_back(buf);
        self.events.push_back(Event::SendComplete { msg });
        Ok(msg)
    }
    fn leave(&mut self, _now: Time) {
        self.events.push_back(Event::Left);
    }
    fn poll_transmit(&mut self, _now: Time, buf: &mut Vec<u8>) -> Option<Transmit> {
        let data = self.out.pop_front()?;
        buf.clear();
        buf.extend_from_slice(&data);
        Some(Transmit {
            destination: Destination::Scoped { ttl: 1 },
            segment_size: Some(SEGMENT),
        })
    }
    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
    fn poll_timeout(&self) -> Option<Time> {
        None
    }
    fn node_id(&self) -> NodeId {
        self.me
    }
    fn guarantees(&self) -> Guarantees {
        BlasterFactory.guarantees(&EngineSettings::default())
    }
    fn info(&self) -> GroupInfo {
        GroupInfo {
            me: self.me,
            view: 1,
            members: vec![self.me],
            rank: Some(0),
            coordinator: Some(self.me),
            recovering: false,
            incarnation: 0,
            guarantees: self.guarantees(),
            buffered_msgs: 0,
            buffer_capacity_msgs: 0,
            max_datagram_bytes: 0,
        }
    }
    fn counters(&self) -> &Counters {
        &self.counters
    }
    fn can_submit(&self) -> bool {
        true
    }
}

#[test]
fn segmented_scoped_transmits_arrive_datagram_by_datagram() {
    let name = unique_name("segments");
    let engine = EngineChoice::custom(Arc::new(BlasterFactory));
    let (a, b) = (node(1401), node(1402));
    let mut c = cfg(&name, &engine, OpenMode::Create);
    c.qos = Qos::Unreliable;
    let ga = a.open_group(c.clone()).unwrap();
    let mut gb = b.open_group(c).unwrap();
    ga.send("hi").unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < SEGMENTS {
        match gb.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(GroupEvent::Deliver(d)) => got.push(d),
            Ok(_) => {}
            Err(e) => panic!("{} of {SEGMENTS} datagrams: {e}", got.len()),
        }
    }
    assert_eq!(
        got.iter().map(|d| d.msg).collect::<Vec<_>>(),
        (0..SEGMENTS as u64).collect::<Vec<_>>()
    );
    assert!(got.iter().all(|d| d.sender == NodeId(1401)
        && d.payload.len() == SEGMENT - wire::HEADER_LEN
        && d.payload.starts_with(b"hi")));
    ga.leave().unwrap();
    gb.leave().unwrap();
}

/// Run a future to completion on this thread (it completes at once here).
fn futures_block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The contract's second engine through the same registry as the sequencer: the `toy` engine
/// (unordered reliable multicast with NACKs, FIFO per sender) found by name, three real nodes
/// over loopback multicast, every message delivered by every member, and the logs verified by
/// the rules its declaration selects (FIFO and agreement, not total order).
#[test]
fn the_registered_toy_engine_runs_in_the_runtime() {
    let engine = EngineChoice::named("toy").expect("the testing feature registers the toy");
    assert_eq!(engine.guarantees(), Guarantees::reliable_fifo());
    let name = unique_name("registry-toy");
    let nodes = [node(1201), node(1202), node(1203)];
    // The toy serves source-ordered QoS, not the default total order.
    let open = |mode| {
        let mut c = cfg(&name, &engine, mode);
        c.qos = Qos::SourceOrdered;
        c
    };
    let mut groups = vec![nodes[0].open_group(open(OpenMode::Create)).unwrap()];
    for n in &nodes[1..] {
        groups.push(n.open_group(open(OpenMode::Join)).unwrap());
    }
    let mut seen: Vec<Seen> = (0..3).map(|_| Seen::default()).collect();
    for (g, s) in groups.iter_mut().zip(&mut seen) {
        recv_until(g, s, Duration::from_secs(10), view_has(3));
    }
    const PER_MEMBER: usize = 20;
    for g in &groups {
        for i in 0..PER_MEMBER {
            g.send_nowait(format!("{}-{i}", g.me())).unwrap();
        }
    }
    for (g, s) in groups.iter_mut().zip(&mut seen) {
        recv_until(g, s, Duration::from_secs(20), |s| {
            s.deliveries.len() == 3 * PER_MEMBER
        });
    }
    let logs: Vec<_> = seen.iter().map(|s| s.records()).collect();
    let report = rmcast_sim::log::verify_logs_for(&logs, &engine.guarantees())
        .unwrap_or_else(|v| panic!("{v:?}"));
    assert_eq!(report.members, 3);
    for g in &groups {
        assert_eq!(g.engine_kind(), "toy");
    }
}
