//! A group of two whose ordering member leaves: the Sequencer's sequencer (host 0, which
//! created the group) or the member of a Ring of two that holds the token. Users of JGroups or
//! Corosync expect the other member to go on as a group of one, every time: it installs a view
//! of itself alone, orders (is the sequencer or token site), and delivers what it sends after;
//! it never takes the leave for a failure (a group of two cannot reset with one member under
//! the default majority rule, so such a failure wedges it). Swept over seeds with loss,
//! duplication and reordering, the leave at a different instant in each seed.

use rmcast_proto::{EngineChoice, Event, NodeId, Recovery};
use rmcast_sim::config::{ChurnEvent, ChurnKind};
use rmcast_sim::{run, Scenario};
use std::time::Duration;

/// Two members, both sending at a steady rate for about 3 s, so that the survivor still sends
/// well after the leave.
fn pair(engine: EngineChoice, loss: f64) -> Scenario {
    Scenario {
        engine,
        members: 2,
        senders: 2,
        messages: 60,
        rate: Some(20.0),
        loss,
        dup: loss / 2.0,
        reorder_ms: 1.0,
        ..Scenario::default()
    }
}

/// Run `seeds` seeds of `sc` with host `leaver` leaving between 0.5 and 1.5 s (a different
/// instant per seed); every checker must pass and host `1 - leaver` must go on alone.
/// Returns how many seeds had the survivor order its own messages after the leave.
fn sweep_leave(sc: &Scenario, leaver: u32, seeds: u64) -> u64 {
    sc.validate().expect("valid scenario");
    let survivor = NodeId(1 - leaver);
    let mut failing = Vec::new();
    let mut went_on = 0;
    for seed in 0..seeds {
        let mut cfg = sc.config(seed);
        let at = rmcast_proto::Time::ZERO
            + Duration::from_millis(500)
            + Duration::from_micros((seed * 7919) % 1_000_000);
        cfg.churn.push(ChurnEvent {
            at,
            node: NodeId(leaver),
            kind: ChurnKind::Leave,
        });
        let rep = run(&cfg);
        let mut why = Vec::new();
        if !rep.passed() {
            why.push(rep.summary());
        }
        let hosts = &rep.record.hosts;
        let gone = &hosts[leaver as usize];
        if !gone.events.iter().any(|e| matches!(e.event, Event::Left)) {
            why.push("the leaver never left".to_string());
        }
        let h = &hosts[survivor.0 as usize];
        if let Some(e) = h.events.iter().find(|e| {
            matches!(
                e.event,
                Event::Recovery(Recovery::Failed { .. } | Recovery::ResetFailed { .. })
            )
        }) {
            why.push(format!("the survivor recorded {:?} at {:?}", e.event, e.at));
        }
        // The view of one, with the survivor ordering, and when it came.
        let alone = h.events.iter().find_map(|e| match &e.event {
            Event::View(v) if v.members == [survivor] && v.left == Some(NodeId(leaver)) => {
                Some((e.at, v.coordinator))
            }
            _ => None,
        });
        match alone {
            None => why.push("the survivor never installed a view of one".to_string()),
            Some((_, c)) if c != survivor => {
                why.push(format!("the view of one names {c} to order"))
            }
            Some((t, _)) => {
                // Its own messages sent after the leave are delivered (the liveness checker
                // holds every one of them; this says the run tested it).
                let after = h.events.iter().any(|e| {
                    e.at > t && matches!(&e.event, Event::Deliver(d) if d.sender == survivor)
                });
                if after {
                    went_on += 1;
                }
            }
        }
        if !why.is_empty() {
            failing.push(format!("seed {seed}: {}", why.join("; ")));
        }
    }
    assert!(
        failing.is_empty(),
        "{} of {seeds} seeds failed:\n{}",
        failing.len(),
        failing.join("\n")
    );
    went_on
}

/// The sequencer (host 0, the creator) leaves a group of two, with the defaults of
/// `rmcast member` (r = 0, the majority rule, automatic reset).
#[test]
fn the_sequencer_of_two_leaves_and_the_other_goes_on_alone() {
    for loss in [0.0, 0.05, 0.15] {
        let sc = pair(EngineChoice::sequencer(0), loss);
        let went_on = sweep_leave(&sc, 0, 100);
        assert!(
            went_on >= 90,
            "loss {loss}: {went_on} of 100 sent after the leave"
        );
    }
}

/// The same at r = 1 (a send completes once both hold it).
#[test]
fn the_sequencer_of_two_leaves_at_resilience_one() {
    let sc = pair(EngineChoice::sequencer(1), 0.05);
    let went_on = sweep_leave(&sc, 0, 100);
    assert!(went_on >= 90, "{went_on} of 100 sent after the leave");
}

/// The member that is not the sequencer leaves: the sequencer goes on alone.
#[test]
fn the_other_of_two_leaves_and_the_sequencer_goes_on_alone() {
    let sc = pair(EngineChoice::sequencer(0), 0.05);
    let went_on = sweep_leave(&sc, 1, 100);
    assert!(went_on >= 90, "{went_on} of 100 sent after the leave");
}

/// A Ring of two: each member leaves in half of the seeds, at instants spread over a second of
/// traffic, so that the leaver holds the token in some and not in others.
#[test]
fn a_ring_of_two_loses_a_member_and_the_other_goes_on_alone() {
    let ring = EngineChoice::named("ring").expect("ring is registered");
    for loss in [0.0, 0.05, 0.15] {
        let sc = pair(ring.clone(), loss);
        let mut went_on = 0;
        for leaver in [0, 1] {
            went_on += sweep_leave(&sc, leaver, 50);
        }
        assert!(
            went_on >= 90,
            "loss {loss}: {went_on} of 100 sent after the leave"
        );
    }
}
