//! Crash recovery (Amoeba paper section 5.3) on the real runtime with the real sequencer engine:
//! three nodes in one process over loopback multicast, one of them crashed or cut off by the
//! fault-injecting wrapper of `common::crash`. What the application sees is checked: the
//! events in order, sends refused in recovery mode, ResetGroup by hand, expulsion, `info()`,
//! and the logs through the independent verifier.

mod common;

use common::crash::CrashFactory;
use common::*;
use rmcast::{
    EngineChoice, Error, Group, GroupEvent, Node, NodeId, OpenMode, Recovery, TrySendError,
};
use rmcast_proto::sequencer;
use rmcast_sim::log::verify_logs;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bound on every wait for a recovery step; generous, since the test threads share two cores.
const RECOVERY_BOUND: Duration = Duration::from_secs(20);

struct Trio {
    factory: Arc<CrashFactory>,
    // Declared before the nodes: groups are dropped first.
    groups: Vec<Group>,
    seen: Vec<Seen>,
    /// Kept alive for the groups (dropping a node stops its I/O thread).
    _nodes: Vec<Node>,
}

/// Nodes 11 (creator, hence sequencer), 12 and 13 in one group with resilience 1.
fn trio(tag: &str, auto_reset: bool) -> Trio {
    let mut seq = sequencer::Config::new(0);
    seq.resilience = 1;
    seq.auto_reset = auto_reset;
    let factory = CrashFactory::new(seq);
    let engine = EngineChoice::custom(factory.clone());
    let name = unique_name(tag);
    let nodes = vec![node(11), node(12), node(13)];
    let mut groups = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let mode = if i == 0 {
            OpenMode::Create
        } else {
            OpenMode::Join
        };
        let mut c = cfg(&name, &engine, mode);
        c.completion_events = true;
        // Without healing: a member the group left out is expelled and its group closes (with
        // it, the default, it would join again as a new member).
        c.heal = None;
        groups.push(n.open_group(c).expect("open group"));
    }
    let mut seen: Vec<Seen> = (0..3).map(|_| Seen::default()).collect();
    for (g, s) in groups.iter_mut().zip(seen.iter_mut()) {
        recv_until(g, s, Duration::from_secs(10), view_has(3));
    }
    Trio {
        factory,
        groups,
        seen,
        _nodes: nodes,
    }
}

impl Trio {
    /// Every member sends `n` messages, and all deliver all of them.
    fn exchange(&mut self, tag: &str, n: usize) {
        let before: Vec<usize> = self.seen.iter().map(|s| s.deliveries.len()).collect();
        for g in &self.groups {
            for k in 0..n {
                g.send_nowait(format!("{tag}-{}-{k}", g.me())).unwrap();
            }
        }
        let done_before: Vec<usize> = self.seen.iter().map(completions).collect();
        for (i, (g, s)) in self.groups.iter_mut().zip(self.seen.iter_mut()).enumerate() {
            let want = before[i] + 3 * n;
            // Delivered everywhere, and every member's own sends completed: under the majority
            // policy a completion follows the delivery (the acknowledgements), so a crash right
            // after the deliveries could otherwise leave completed sends uncounted.
            recv_until(g, s, Duration::from_secs(10), |s| {
                s.deliveries.len() >= want && completions(s) >= done_before[i] + n
            });
        }
    }
}

/// Sends of this member that completed so far.
fn completions(s: &Seen) -> usize {
    s.other
        .iter()
        .filter(|e| matches!(e, GroupEvent::SendComplete { .. }))
        .count()
}

fn has_reset(s: &Seen) -> bool {
    recovery_events(s).any(|r| matches!(r, Recovery::Reset { .. }))
}

/// The recovery events a member saw, in order.
fn recovery_events(s: &Seen) -> impl Iterator<Item = &Recovery> {
    s.other.iter().filter_map(|e| match e {
        GroupEvent::Recovery(r) => Some(r),
        _ => None,
    })
}

#[test]
fn crashed_sequencer_is_replaced_automatically() {
    let mut t = trio("crash-auto", true);
    assert_eq!(t.groups[1].info().unwrap().coordinator, Some(NodeId(11)));
    t.exchange("before", 30);
    let crash_at = Instant::now();
    t.factory.crash(NodeId(11));
    for i in 1..3 {
        let (g, s) = (&mut t.groups[i], &mut t.seen[i]);
        recv_until(g, s, RECOVERY_BOUND, |s| {
            has_reset(s) && s.views.last().is_some_and(|v| v.members.len() == 2)
        });
        eprintln!(
            "member {}: recovered {:?} after the crash",
            g.me(),
            crash_at.elapsed()
        );
        // Failed, then Reset, then the new view (the view is last in `views`).
        let evs: Vec<Recovery> = recovery_events(s).cloned().collect();
        assert_eq!(
            evs,
            [
                Recovery::Failed {
                    suspect: NodeId(11)
                },
                Recovery::Reset {
                    incarnation: 1,
                    removed: vec![NodeId(11)]
                },
            ]
        );
        let info = g.info().unwrap();
        assert_eq!(info.incarnation, 1);
        assert!(!info.recovering);
        assert_eq!(info.members, vec![NodeId(12), NodeId(13)]);
        assert_eq!(info.rank, Some(i - 1));
        assert!(matches!(info.coordinator, Some(NodeId(12 | 13))));
    }
    // The survivors go on: blocking sends complete and everyone delivers them.
    for g in &t.groups[1..] {
        g.send(format!("after-{}", g.me()))
            .expect("send after the reset");
    }
    for i in 1..3 {
        let (g, s) = (&mut t.groups[i], &mut t.seen[i]);
        recv_until(g, s, Duration::from_secs(10), |s| {
            ["after-12", "after-13"]
                .iter()
                .all(|p| s.deliveries.iter().any(|d| d.payload == p.as_bytes()))
        });
    }
    // The logs, the crashed member's included, show one order and no completed send lost.
    let report = verify_logs(&t.seen.iter().map(Seen::records).collect::<Vec<_>>())
        .unwrap_or_else(|v| panic!("log violations: {v:#?}"));
    assert_eq!(report.resets, 1);
    assert!(report.completions >= 90, "{report}");
    for g in &t.groups[1..] {
        g.leave().expect("leave");
    }
}

#[test]
fn manual_reset_refuses_sends_until_the_application_resets() {
    let mut t = trio("crash-manual", false);
    t.exchange("before", 10);
    t.factory.crash(NodeId(11));
    for i in 1..3 {
        let (g, s) = (&mut t.groups[i], &mut t.seen[i]);
        recv_until(g, s, RECOVERY_BOUND, |s| {
            recovery_events(s).any(|r| matches!(r, Recovery::Failed { .. }))
        });
    }
    let g = &mut t.groups[1];
    // Sends fail, and say why; try_send hands the message back.
    match g.try_send("during") {
        Err(TrySendError::MemberFailed { suspect, payload }) => {
            assert_eq!(suspect, NodeId(11));
            assert_eq!(payload, "during");
        }
        other => panic!("expected MemberFailed, got {other:?}"),
    }
    assert!(matches!(
        g.send("during"),
        Err(Error::MemberFailed {
            suspect: NodeId(11)
        })
    ));
    assert!(matches!(
        g.send_nowait("during"),
        Err(Error::MemberFailed { .. })
    ));
    // Receives report recovery mode once nothing else is queued.
    let mut others = 0;
    let failed = loop {
        match g.try_recv() {
            Ok(Some(ev)) => {
                t.seen[1].record(g.me(), ev);
                others += 1;
                assert!(others < 10_000, "events never ran out");
            }
            Ok(None) => panic!("recovery mode not reported by try_recv"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(
            failed,
            Error::MemberFailed {
                suspect: NodeId(11)
            }
        ),
        "{failed}"
    );
    assert!(matches!(
        g.recv_timeout(Duration::from_millis(50)),
        Err(Error::MemberFailed { .. })
    ));
    let info = g.info().unwrap();
    assert!(info.recovering);
    assert_eq!(info.incarnation, 0);
    // Nobody resets by themselves under the manual policy.
    assert!(matches!(
        t.groups[2].recv_timeout(Duration::from_secs(1)),
        Err(Error::MemberFailed { .. })
    ));

    // ResetGroup by hand, at one member: both come back.
    t.groups[1].reset(0).expect("reset");
    for i in 1..3 {
        let (g, s) = (&mut t.groups[i], &mut t.seen[i]);
        recv_until(g, s, RECOVERY_BOUND, |s| {
            has_reset(s) && s.views.last().is_some_and(|v| v.members.len() == 2)
        });
        assert!(!g.info().unwrap().recovering);
    }
    let msg = t.groups[2].send("after").expect("send after the reset");
    for i in 1..3 {
        let (g, s) = (&mut t.groups[i], &mut t.seen[i]);
        recv_until(g, s, Duration::from_secs(10), |s| {
            s.deliveries
                .iter()
                .any(|d| d.sender == NodeId(13) && d.msg == msg)
        });
    }
    verify_logs(&t.seen.iter().map(Seen::records).collect::<Vec<_>>())
        .unwrap_or_else(|v| panic!("log violations: {v:#?}"));
    for g in &t.groups[1..] {
        g.leave().expect("leave");
    }
}

#[test]
fn a_member_cut_off_is_expelled_and_its_group_closes() {
    let mut t = trio("cut-off", true);
    t.exchange("before", 10);
    t.factory.cut_off(NodeId(13), true);
    // The others rebuild the group without it ...
    for i in 0..2 {
        let (g, s) = (&mut t.groups[i], &mut t.seen[i]);
        recv_until(g, s, RECOVERY_BOUND, |s| {
            has_reset(s) && s.views.last().is_some_and(|v| v.members.len() == 2)
        });
        assert!(
            recovery_events(s).any(|r| matches!(
                r,
                Recovery::Reset { removed, .. } if removed == &[NodeId(13)]
            )),
            "{:?}",
            s.other
        );
    }
    // ... while it, alone, cannot (it needs two of three).
    let (g, s) = (&mut t.groups[2], &mut t.seen[2]);
    recv_until(g, s, RECOVERY_BOUND, |s| {
        recovery_events(s).any(|r| {
            matches!(
                r,
                Recovery::ResetFailed {
                    reachable: 1,
                    needed: 2
                }
            )
        })
    });
    // Back on the network, it learns that the group went on without it.
    t.factory.cut_off(NodeId(13), false);
    let deadline = Instant::now() + RECOVERY_BOUND;
    let end = loop {
        assert!(Instant::now() < deadline, "never expelled: {:?}", s.other);
        match g.recv_timeout(Duration::from_millis(200)) {
            Ok(ev) => s.record(NodeId(13), ev),
            Err(Error::MemberFailed { .. } | Error::Timeout) => {}
            Err(e) => break e,
        }
    };
    assert!(matches!(end, Error::Closed), "{end}");
    assert!(
        matches!(
            s.other.last(),
            Some(GroupEvent::Recovery(Recovery::Expelled { incarnation: 1 }))
        ),
        "{:?}",
        s.other
    );
    assert!(matches!(g.send("late"), Err(Error::Closed)));
    assert!(matches!(g.try_send("late"), Err(TrySendError::Closed(_))));
    verify_logs(&t.seen.iter().map(Seen::records).collect::<Vec<_>>())
        .unwrap_or_else(|v| panic!("log violations: {v:#?}"));
    for g in &t.groups[..2] {
        g.leave().expect("leave");
    }
}

/// Self-healing when the group to merge into does not admit: node 21's group and node 22's
/// group have one name and one member each, so 22 (the higher id) merges into 21's. With 21's
/// engine cut off (its runtime still announces the group), the join is never answered: after
/// its join wait, 22 starts a group of one again instead of waiting for ever, and once 21 is
/// back on the network the next merge succeeds.
#[test]
fn a_merge_that_nobody_admits_falls_back_to_a_group_of_one_and_heals_later() {
    let factory = CrashFactory::new(sequencer::Config::new(0));
    let engine = EngineChoice::custom(factory.clone());
    let name = unique_name("merge-unanswered");
    let nodes = [node(21), node(22)];
    factory.cut_off(NodeId(21), true);
    let mut groups = Vec::new();
    let mut seen: Vec<Seen> = (0..2).map(|_| Seen::default()).collect();
    for (i, n) in nodes.iter().enumerate() {
        let mut c = cfg(&name, &engine, OpenMode::Create);
        c.heal = Some(Duration::from_millis(100));
        c.join_timeout = Duration::from_millis(600);
        groups.push(n.open_group(c).expect("open group"));
        recv_until(&mut groups[i], &mut seen[i], RECOVERY_BOUND, view_has(1));
    }
    let (g, s) = (&mut groups[1], &mut seen[1]);
    let merging = |s: &Seen| {
        recovery_events(s)
            .filter(|r| matches!(r, Recovery::Merging { into } if *into == NodeId(21)))
            .count()
    };
    recv_until(g, s, RECOVERY_BOUND, |s| merging(s) == 1);
    let views_then = s.views.len();
    // Not admitted: a new group of one, its own.
    recv_until(g, s, RECOVERY_BOUND, |s| s.views.len() > views_then);
    let v = s.views.last().unwrap();
    assert_eq!(
        (v.members.clone(), v.coordinator),
        (vec![NodeId(22)], NodeId(22))
    );
    factory.cut_off(NodeId(21), false);
    recv_until(g, s, RECOVERY_BOUND, view_has(2));
    let (g0, s0) = (&mut groups[0], &mut seen[0]);
    recv_until(g0, s0, RECOVERY_BOUND, view_has(2));
    for g in &groups {
        g.leave().expect("leave");
    }
}
