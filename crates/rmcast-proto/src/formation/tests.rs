//! Formation over a tiny lossless network with a fixed 1 ms latency (the simulator sweeps it
//! under faults).

use super::*;
use crate::engine::View;
use crate::testnet::Observer;

/// The last view and the notices of each node: the network's [`Observer`].
#[derive(Default)]
struct Formed {
    views: Vec<Option<View>>,
    notices: Vec<Vec<Notice>>,
}

impl Observer<Formation> for Formed {
    fn polled(&mut self, i: usize, node: &mut Formation, events: &[Event]) {
        self.views.resize(self.views.len().max(i + 1), None);
        self.notices
            .resize(self.notices.len().max(i + 1), Vec::new());
        for e in events {
            if let Event::View(v) = e {
                self.views[i] = Some(v.clone());
            }
        }
        while let Some(x) = node.poll_notice() {
            self.notices[i].push(x);
        }
    }
}

/// A network with 1 ms links and a clock that ticks every millisecond.
type Net = crate::testnet::Net<Formation, Formed>;

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
        let mut net = Net::with(Formed::default());
        net.tick = Some(Duration::from_millis(1));
        net.latency = Duration::from_millis(1);
        net
    }

    fn start(&mut self, c: FormationConfig) {
        let i = self.add(Box::new(Formation::new(c, self.now)));
        self.poll(i);
    }

    /// Run for `ms` milliseconds; `cut(a, b)` drops datagrams between nodes a and b.
    fn run(&mut self, ms: u64, cut: impl Fn(usize, usize) -> bool + 'static) {
        self.drop = Some(Box::new(move |c| cut(c.from, c.to)));
        self.run_for(Duration::from_millis(ms));
        self.drop = None;
    }

    fn members(&self, i: usize) -> Vec<NodeId> {
        self.x.views[i]
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
        net.start(cfg(me, Entry::JoinOrCreate, None));
    }
    net.run(3000, |_, _| false);
    let all: Vec<NodeId> = (0..4).map(NodeId).collect();
    for i in 0..4 {
        let mut m = net.members(i);
        m.sort();
        assert_eq!(m, all, "node {i}: {:?}", net.x.notices[i]);
    }
    assert!(net.x.notices[0].contains(&Notice::Created));
    for i in 1..4 {
        assert!(
            !net.x.notices[i].contains(&Notice::Created),
            "node {i} created too"
        );
        assert!(net.x.notices[i].contains(&Notice::Admitted));
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
        net.start(cfg(me, entry, heal));
    }
    // Two groups: {0, 1, 2} and {3, 4}, apart for two seconds.
    let side = |i: usize| i < 3;
    net.run(2000, move |a, b| side(a) != side(b));
    assert_eq!(net.members(4).len(), 2, "{:?}", net.x.views[4]);
    assert_eq!(net.members(0).len(), 3, "{:?}", net.x.views[0]);
    net.run(5000, |_, _| false);
    for i in 0..5 {
        assert_eq!(net.members(i).len(), 5, "node {i}: {:?}", net.x.notices[i]);
    }
    // The smaller side moved.
    assert!(net.x.notices[3].contains(&Notice::Rejoined(Rejoin::Merge { into: NodeId(0) })));
    assert!(!net.x.notices[1]
        .iter()
        .any(|n| matches!(n, Notice::Rejoined(_))));
}

#[test]
fn a_smaller_path_limits_the_group_s_datagrams() {
    let mut net = Net::new();
    net.start(cfg(0, Entry::Create, None));
    let mut small = cfg(1, Entry::Join { give_up: false }, None);
    small.path_bytes = 600;
    small.engine_datagram_bytes = 600;
    net.start(small);
    net.run(1000, |_, _| false);
    assert_eq!(net.members(0).len(), 2);
    assert!(net.x.notices[0].contains(&Notice::DatagramsLimited { bytes: 600 }));
    assert_eq!(net.nodes[0].info().max_datagram_bytes, 600);
}

#[test]
fn a_join_nobody_answers_times_out() {
    let mut net = Net::new();
    net.start(cfg(0, Entry::Join { give_up: true }, None));
    net.run(1000, |_, _| false);
    assert_eq!(net.x.notices[0], vec![Notice::JoinTimedOut]);
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
