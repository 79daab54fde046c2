//! Helpers shared by the runtime's integration tests. Every wait has a deadline, so a broken
//! engine or runtime fails a test instead of hanging it.

#![allow(dead_code)]

pub mod crash;
pub mod toy;

use rmcast::{
    EngineChoice, Group, GroupAddr, GroupConfig, GroupEvent, Node, NodeConfig, NodeId, OpenMode,
};
use rmcast_sim::log::{verify_logs, LogRecord, LogWriter, VerifyReport};
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A group name no other test (or concurrent test run) uses, so that hashed multicast
/// addresses do not collide.
pub fn unique_name(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "test-{tag}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The IPv4 address of a group or node of these tests (all on 127.0.0.1 unless said).
pub fn v4(a: SocketAddr) -> SocketAddrV4 {
    match a {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(a) => panic!("{a}: an IPv4 address was expected"),
    }
}

pub fn node(id: u32) -> Node {
    Node::new(NodeConfig::default().id(NodeId(id))).expect("node starts")
}

pub fn cfg(name: &str, engine: &EngineChoice, mode: OpenMode) -> GroupConfig {
    let mut c = GroupConfig::new(name).mode(mode).engine(engine.clone());
    c.join_timeout = Duration::from_secs(5);
    c
}

/// Everything a member received, and its log.
#[derive(Default)]
pub struct Seen {
    pub deliveries: Vec<rmcast::Delivery>,
    pub views: Vec<rmcast::View>,
    /// Every other event (completions, failures, resets, expulsion), in order.
    pub other: Vec<GroupEvent>,
    /// The member's log; kept across events, since it remembers the current view.
    writer: Option<LogWriter<Vec<u8>>>,
}

impl Seen {
    pub fn record(&mut self, me: NodeId, ev: GroupEvent) {
        let mut w = self
            .writer
            .take()
            .unwrap_or_else(|| LogWriter::new(Vec::new(), me.0));
        w.event(&ev).unwrap();
        match ev {
            GroupEvent::Deliver(d) => self.deliveries.push(d),
            GroupEvent::View(v) => self.views.push(v),
            other => self.other.push(other),
        }
        self.writer = Some(w);
    }

    /// The log lines written so far.
    pub fn log(&self) -> &[u8] {
        self.writer.as_ref().map_or(&[], |w| w.get_ref())
    }

    pub fn records(&self) -> Vec<LogRecord> {
        rmcast_sim::log::parse_log(self.log()).unwrap()
    }
}

/// Receive until `done` holds, or panic at the deadline.
pub fn recv_until(g: &mut Group, seen: &mut Seen, timeout: Duration, done: impl Fn(&Seen) -> bool) {
    let deadline = Instant::now() + timeout;
    while !done(seen) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "timed out: {} deliveries, views {:?}",
            seen.deliveries.len(),
            seen.views
                .iter()
                .map(|v| (v.id, v.members.clone()))
                .collect::<Vec<_>>()
        );
        match g.recv_timeout(left) {
            Ok(ev) => seen.record(g.me(), ev),
            // Nothing came while the group is in recovery mode: a timeout too.
            Err(rmcast::Error::Timeout | rmcast::Error::MemberFailed { .. }) => {}
            Err(e) => panic!("receive failed: {e}"),
        }
    }
}

pub fn view_has(n: usize) -> impl Fn(&Seen) -> bool {
    move |s: &Seen| s.views.last().is_some_and(|v| v.members.len() == n)
}

/// Three nodes form a group (one creates, two join), each sends `per_member` messages while
/// all receive, then they check that everyone delivered the same messages in the same order,
/// and leave. Returns the verifier's report.
pub fn three_members_same_order(
    engine: EngineChoice,
    addr: impl Fn(&[SocketAddr]) -> GroupAddr,
    per_member: usize,
) -> VerifyReport {
    three_members_same_order_on(NodeConfig::default(), engine, addr, per_member)
}

/// Nodes 101, 102 and 103 (`node(id)` configures each), the first creating a group of `engine`
/// at the address `addr` makes of their addresses and the others joining it, each group
/// configured further by `group`; returns once every member's view holds the three.
pub fn three_groups(
    node: impl Fn(u32) -> NodeConfig,
    engine: &EngineChoice,
    addr: impl Fn(&[SocketAddr]) -> GroupAddr,
    group: impl Fn(GroupConfig) -> GroupConfig,
) -> (Vec<Node>, Vec<Group>, Vec<Seen>) {
    let name = unique_name(engine.name());
    let nodes: Vec<Node> = [101, 102, 103]
        .into_iter()
        .map(|id| Node::new(node(id)).expect("node starts"))
        .collect();
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.local_addr()).collect();
    let addr = addr(&addrs);
    let mut groups = Vec::new();
    let mut seen: Vec<Seen> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let mode = if i == 0 {
            OpenMode::Create
        } else {
            OpenMode::Join
        };
        let g = n
            .open_group(group(cfg(&name, engine, mode).addr(addr.clone())))
            .expect("open group");
        assert_eq!(g.me(), n.id());
        assert_eq!(g.created(), i == 0);
        groups.push(g);
        seen.push(Seen::default());
    }
    for (g, s) in groups.iter_mut().zip(seen.iter_mut()) {
        recv_until(g, s, Duration::from_secs(10), view_has(3));
    }
    (nodes, groups, seen)
}

/// [`three_members_same_order`] with nodes configured as `node_cfg` (their ids aside): on
/// another interface, say.
pub fn three_members_same_order_on(
    node_cfg: NodeConfig,
    engine: EngineChoice,
    addr: impl Fn(&[SocketAddr]) -> GroupAddr,
    per_member: usize,
) -> VerifyReport {
    let (nodes, mut groups, mut seen) =
        three_groups(|id| node_cfg.clone().id(NodeId(id)), &engine, addr, |c| c);
    let info = groups[1].info().unwrap();
    assert_eq!(info.members.len(), 3);
    assert_eq!(info.me, NodeId(102));

    // Each member streams its messages from its own thread while the test thread receives.
    let senders: Vec<_> = groups
        .iter()
        .map(|g| {
            let s = g.sender();
            std::thread::spawn(move || {
                for k in 0..per_member {
                    let payload = format!("{}:{k}", s.me());
                    if k % 10 == 0 {
                        s.send(payload).expect("send");
                    } else {
                        s.send_nowait(payload).expect("send_nowait");
                    }
                }
            })
        })
        .collect();
    let total = 3 * per_member;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut all = true;
        for (g, s) in groups.iter_mut().zip(seen.iter_mut()) {
            while let Ok(Some(ev)) = g.try_recv() {
                s.record(g.me(), ev);
            }
            all &= s.deliveries.len() >= total;
        }
        if all {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "timed out: delivered {:?} of {total}",
            seen.iter().map(|s| s.deliveries.len()).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    for t in senders {
        t.join().unwrap();
    }
    let order = |s: &Seen| {
        s.deliveries
            .iter()
            .map(|d| (d.seq, d.sender, d.msg, d.payload.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(order(&seen[0]), order(&seen[1]));
    assert_eq!(order(&seen[0]), order(&seen[2]));
    let report =
        verify_logs(&seen.iter().map(Seen::records).collect::<Vec<_>>()).expect("logs verify");
    assert_eq!(
        report.per_member.iter().map(|p| p.1).collect::<Vec<_>>(),
        vec![total; 3]
    );

    let c = groups[0].counters().unwrap();
    assert!(c.datagrams_sent > 0);
    assert!(nodes[1].counters().datagrams_received > 0);
    // Leave the joiners first, then the creator.
    for g in groups.iter().rev() {
        g.leave().expect("leave");
    }
    for mut g in groups {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match g.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(_) => {}
                Err(rmcast::Error::Closed) => break,
                Err(e) => panic!("expected the group to close after leave: {e}"),
            }
        }
        assert!(matches!(g.send("late"), Err(rmcast::Error::Closed)));
    }
    report
}
