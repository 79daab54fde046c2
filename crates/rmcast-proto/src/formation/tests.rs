//! Formation over a tiny lossless network with a fixed 1 ms latency (the simulator sweeps it
//! under faults).

use super::*;
use crate::engine::View;

/// Nodes, and datagrams in flight: (due, to, from, bytes).
struct Net {
    nodes: Vec<Formation>,
    wire: Vec<(Time, usize, NodeId, Vec<u8>)>,
    views: Vec<Option<View>>,
    notices: Vec<Vec<Notice>>,
    now: Time,
}

fn cfg(me: u32, entry: Entry, heal: Option<Duration>) -> FormationConfig {
    FormationConfig {
        group: 9,
        me: NodeId(me),
        engine: EngineChoice::sequencer(0),
        entry,
        join_timeout: Duration::from_millis(300),
        heal,
        engine_datagram_bytes: 1400,
        path_bytes: 1400,
        seed: u64::from(me),
        address_exchange: true,
    }
}

impl Net {
    fn new() -> Net {
        Net {
            nodes: Vec::new(),
            wire: Vec::new(),
            views: Vec::new(),
            notices: Vec::new(),
            now: Time::ZERO,
        }
    }

    fn add(&mut self, c: FormationConfig) {
        self.nodes.push(Formation::new(c, self.now));
        self.views.push(None);
        self.notices.push(Vec::new());
    }

    /// Run for `ms` milliseconds; `cut(a, b)` drops datagrams between nodes a and b.
    fn run(&mut self, ms: u64, cut: impl Fn(usize, usize) -> bool) {
        let mut buf = Vec::new();
        for _ in 0..ms {
            self.now = self.now + Duration::from_millis(1);
            let now = self.now;
            let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.wire)
                .into_iter()
                .partition(|w| w.0 <= now);
            self.wire = later;
            for (_, to, from, d) in due {
                self.nodes[to].handle_datagram(now, from, &d);
            }
            let count = self.nodes.len();
            for i in 0..count {
                let n = &mut self.nodes[i];
                if n.poll_timeout().is_some_and(|t| t <= now) {
                    n.handle_timeout(now);
                }
                while let Some(t) = n.poll_transmit(now, &mut buf) {
                    let to: Vec<usize> = match t.destination {
                        Destination::Peer(p) => vec![p.0 as usize],
                        _ => (0..count).filter(|j| *j != i).collect(),
                    };
                    for j in to.into_iter().filter(|j| !cut(i, *j)) {
                        let at = now + Duration::from_millis(1);
                        self.wire.push((at, j, NodeId(i as u32), buf.clone()));
                    }
                }
                let n = &mut self.nodes[i];
                while let Some(ev) = n.poll_event() {
                    if let Event::View(v) = ev {
                        self.views[i] = Some(v);
                    }
                }
                while let Some(x) = self.nodes[i].poll_notice() {
                    self.notices[i].push(x);
                }
            }
        }
    }

    fn members(&self, i: usize) -> Vec<NodeId> {
        self.views[i]
            .as_ref()
            .map(|v| v.members.clone())
            .unwrap_or_default()
    }
}

#[test]
fn nodes_started_together_form_one_group_created_by_the_lowest_id() {
    let mut net = Net::new();
    // A node's id is its index in the net.
    for me in 0..4 {
        net.add(cfg(me, Entry::JoinOrCreate, None));
    }
    net.run(3000, |_, _| false);
    let all: Vec<NodeId> = (0..4).map(NodeId).collect();
    for i in 0..4 {
        let mut m = net.members(i);
        m.sort();
        assert_eq!(m, all, "node {i}: {:?}", net.notices[i]);
    }
    assert!(net.notices[0].contains(&Notice::Created));
    for i in 1..4 {
        assert!(
            !net.notices[i].contains(&Notice::Created),
            "node {i} created too"
        );
        assert!(net.notices[i].contains(&Notice::Admitted));
    }
}

#[test]
fn groups_created_apart_merge_into_one() {
    let heal = Some(Duration::from_millis(100));
    let mut net = Net::new();
    for me in 0..5 {
        let entry = if me == 0 || me == 3 {
            Entry::Create
        } else {
            Entry::Join { give_up: false }
        };
        net.add(cfg(me, entry, heal));
    }
    // Two groups: {0, 1, 2} and {3, 4}, apart for two seconds.
    let side = |i: usize| i < 3;
    net.run(2000, |a, b| side(a) != side(b));
    assert_eq!(net.members(4).len(), 2, "{:?}", net.views[4]);
    assert_eq!(net.members(0).len(), 3, "{:?}", net.views[0]);
    net.run(5000, |_, _| false);
    for i in 0..5 {
        assert_eq!(net.members(i).len(), 5, "node {i}: {:?}", net.notices[i]);
    }
    // The smaller side moved.
    assert!(net.notices[3].contains(&Notice::Rejoined(Rejoin::Merge { into: NodeId(0) })));
    assert!(!net.notices[1]
        .iter()
        .any(|n| matches!(n, Notice::Rejoined(_))));
}

#[test]
fn a_smaller_path_limits_the_group_s_datagrams() {
    let mut net = Net::new();
    net.add(cfg(0, Entry::Create, None));
    let mut small = cfg(1, Entry::Join { give_up: false }, None);
    small.path_bytes = 600;
    small.engine_datagram_bytes = 600;
    net.add(small);
    net.run(1000, |_, _| false);
    assert_eq!(net.members(0).len(), 2);
    assert!(net.notices[0].contains(&Notice::DatagramsLimited { bytes: 600 }));
    assert_eq!(net.nodes[0].info().max_datagram_bytes, 600);
}

#[test]
fn a_join_nobody_answers_times_out() {
    let mut net = Net::new();
    net.add(cfg(0, Entry::Join { give_up: true }, None));
    net.run(1000, |_, _| false);
    assert_eq!(net.notices[0], vec![Notice::JoinTimedOut]);
    assert!(net.nodes[0].joining() || net.members(0).is_empty());
}

#[test]
fn asks_are_answered_within_the_bound_and_bad_hellos_reach_no_engine() {
    let mut f = Formation::new(cfg(0, Entry::Create, None), Time::ZERO);
    let now = Time::ZERO + Duration::from_millis(1);
    let mut buf = Vec::new();
    for asker in 1..=(MAX_ANSWERS + 10) {
        hello::encode(9, NodeId(asker), Hello::Ask, 1400, {
            buf.clear();
            &mut buf
        });
        f.handle_datagram(now, NodeId(asker), &buf);
    }
    let mut answers = 0;
    let mut out = Vec::new();
    while let Some(t) = f.poll_transmit(now, &mut out) {
        if hello::decode(&out).is_ok_and(|r| r.hello == Hello::Answer) {
            assert!(matches!(t.destination, Destination::Peer(_)));
            answers += 1;
        }
    }
    assert_eq!(answers, MAX_ANSWERS);
    assert_eq!(f.formation_counters().answers_refused, 10);
    // A cut HELLO and one of another group: counted, and the engine sees neither.
    let before = f.counters().clone();
    f.handle_datagram(now, NodeId(1), &buf[..buf.len() - 1]);
    hello::encode(8, NodeId(1), Hello::Ask, 1400, {
        buf.clear();
        &mut buf
    });
    f.handle_datagram(now, NodeId(1), &buf);
    assert_eq!(f.formation_counters().hellos_malformed, 1);
    assert_eq!(f.formation_counters().hellos_foreign, 1);
    assert_eq!(*f.counters(), before);
}
