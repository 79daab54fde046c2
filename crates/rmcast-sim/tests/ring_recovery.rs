//! The `ring` engine's fault recovery (RMP's reformation, section 4.4 of "RMP: Fault-Tolerant
//! Group Communication" by Whetten, Montgomery and Kaplan) through the simulator: crashes,
//! crashes during a reformation, partitions that heal, paused members and churn, with loss,
//! duplication and reordering, at every QoS level. Each level is checked for what it promises
//! across failures ([`Guarantees::at_qos`]): K-resilient messages survive K failures, majority
//! resilient ones any failures after which a majority goes on, totally resilient ones any
//! failures a member survives; below that, the survivors agree. Beyond the checkers, every run's
//! record is read for two rules of the reformation itself: no view id is installed with two
//! different member lists, and a reformation forms a view only from a majority of the view
//! before it (so the minority side of a partition stops).
//!
//! Longer sweeps (1,260 seeds): `cargo test -p rmcast-sim --test ring_recovery -- --ignored`.

use rmcast_proto::{EngineChoice, Event, Guarantees, NodeId, Qos, Recovery};
use rmcast_sim::{Record, Scenario};
use std::collections::BTreeMap;

fn ring() -> EngineChoice {
    EngineChoice::named("ring").expect("ring is registered")
}

/// Every level, with K = 2.
fn levels() -> [Qos; 7] {
    Qos::levels(2)
}

/// Crashes (the first one of host 0, the creator and first token site; a second one during the
/// reformation it causes) under loss, duplication and reordering.
fn crashes(qos: Qos) -> Scenario {
    let mut sc = Scenario {
        engine: ring(),
        members: 5,
        loss: 0.05,
        dup: 0.05,
        reorder_ms: 2.0,
        senders: 3,
        in_flight: 4,
        messages: 50,
        crashes: 2,
        crash_sequencer: true,
        crash_in_recovery: true,
        qos: Some(qos),
        ..Scenario::default()
    };
    if qos == Qos::Unreliable {
        // A best-effort run ends once the network is quiet; a ring that went quiescent looks
        // for crashed members only every two seconds. Traffic that lasts past the crashes
        // keeps the ring busy, so that the crashes are found within the run.
        sc.rate = Some(40.0);
        sc.messages = 100;
    }
    sc
}

/// A partition longer than failure detection (the sides reform apart), that heals; members
/// left out come back as new members.
fn partitions(qos: Qos) -> Scenario {
    Scenario {
        engine: ring(),
        members: 5,
        loss: 0.05,
        dup: 0.05,
        reorder_ms: 2.0,
        senders: 3,
        in_flight: 4,
        messages: 100,
        partitions: 1,
        partition_ms: 3000,
        heal: true,
        qos: Some(qos),
        ..Scenario::default()
    }
}

/// Joins and leaves, a member paused long enough to be taken for failed (it is left out and
/// comes back), and a crash, at 10% loss.
fn churn_pauses(qos: Qos) -> Scenario {
    Scenario {
        engine: ring(),
        members: 5,
        loss: 0.1,
        dup: 0.05,
        reorder_ms: 2.0,
        senders: 3,
        in_flight: 4,
        messages: 60,
        churn: 2,
        pauses: 1,
        pause_ms: 1500,
        crashes: 1,
        crash_sequencer: true,
        heal: true,
        qos: Some(qos),
        ..Scenario::default()
    }
}

/// The reformation's own rules, read from a run's record: one member list per view id, and
/// every view a reformation forms holds a majority of the view before it. Returns how many
/// reformations the run committed and how many attempts a minority gave up.
fn reformation_rules(rec: &Record) -> (usize, usize) {
    let mut lists: BTreeMap<u64, (NodeId, Vec<NodeId>)> = BTreeMap::new();
    let (mut resets, mut refused) = (0, 0);
    for h in &rec.hosts {
        let mut prev: Option<Vec<NodeId>> = None;
        let mut after_reset = false;
        for e in &h.events {
            match &e.event {
                Event::View(v) => {
                    let (by, members) = lists.entry(v.id).or_insert((h.id, v.members.clone()));
                    assert_eq!(
                        *members, v.members,
                        "seed {}: view {} is {:?} at host {} but {:?} at host {}",
                        rec.seed, v.id, members, by, v.members, h.id
                    );
                    if let (true, Some(before)) = (after_reset, prev.as_ref()) {
                        assert!(
                            2 * v.members.len() > before.len(),
                            "seed {}: host {} installed view {} {:?} after a reset, not a \
                             majority of {:?}",
                            rec.seed,
                            h.id,
                            v.id,
                            v.members,
                            before
                        );
                        resets += 1;
                    }
                    after_reset = false;
                    prev = Some(v.members.clone());
                }
                Event::Recovery(Recovery::Reset { .. }) => after_reset = true,
                Event::Recovery(Recovery::ResetFailed { .. }) => refused += 1,
                _ => {}
            }
        }
    }
    (resets, refused)
}

/// Seeds `seeds` of `sc`: every checker passes, and the reformation's rules hold.
fn sweep(sc: &Scenario, seeds: std::ops::Range<u64>) -> (usize, usize) {
    let (mut resets, mut refused) = (0, 0);
    for seed in seeds {
        let rep = sc.run_expect_pass(seed);
        let (a, b) = reformation_rules(&rep.record);
        resets += a;
        refused += b;
    }
    (resets, refused)
}

#[test]
fn ring_declares_crash_recovery_and_each_level_its_promise_across_failures() {
    let g: Guarantees = ring().guarantees();
    assert!(g.crash_recovery && g.virtual_synchrony && g.all_or_nothing());
    assert_eq!(g.at_qos(Qos::TotallyOrdered).resilience, 0);
    assert_eq!(g.at_qos(Qos::KResilient(2)).resilience, 2);
    assert!(g.at_qos(Qos::MajorityResilient).majority_safe);
    assert_eq!(g.at_qos(Qos::TotallyResilient).resilience, u8::MAX);
    assert!(!g.at_qos(Qos::Reliable).virtual_synchrony);
}

#[test]
fn ring_reforms_after_crashes_at_every_level() {
    let mut resets = 0;
    for q in levels() {
        resets += sweep(&crashes(q), 0..12).0;
    }
    // The crashes were found and the ring reformed (not merely ended with nobody checking).
    assert!(resets >= 7 * 12, "{resets} reformations");
}

#[test]
fn ring_partitions_reform_on_the_majority_side_and_heal() {
    let (mut resets, mut refused) = (0, 0);
    for q in [Qos::Reliable, Qos::TotallyOrdered, Qos::MajorityResilient] {
        let (a, b) = sweep(&partitions(q), 0..10);
        resets += a;
        refused += b;
    }
    assert!(resets > 0, "no side reformed");
    // The minority side tried, found too few members, and stopped (it comes back later as
    // new members, which the checkers' liveness rule sees).
    assert!(refused > 0, "no minority ever refused to form a view");
}

#[test]
fn ring_survives_churn_pauses_and_crashes() {
    for q in [
        Qos::SourceOrdered,
        Qos::KResilient(2),
        Qos::TotallyResilient,
    ] {
        sweep(&churn_pauses(q), 0..10);
    }
}

#[test]
#[ignore = "long: 1,260 seeds"]
fn ring_recovery_long_sweeps() {
    for q in levels() {
        sweep(&crashes(q), 0..80);
        sweep(&partitions(q), 0..50);
        sweep(&churn_pauses(q), 0..50);
    }
}

#[test]
fn ring_without_faults_never_reforms_and_leavers_leave() {
    // Joins and leaves under loss, nobody crashes, pauses or is cut off: no member may be found
    // failed, reformed away or told it was left out (a leaver that applies the next member's
    // leave after its own is leaving, not expelled).
    let sc = Scenario {
        engine: ring(),
        members: 5,
        loss: 0.1,
        dup: 0.05,
        reorder_ms: 2.0,
        senders: 3,
        messages: 40,
        churn: 3,
        ..Scenario::default()
    };
    for seed in 0..100 {
        let rep = sc.run_expect_pass(seed);
        for h in &rep.record.hosts {
            for e in &h.events {
                assert!(
                    !matches!(e.event, Event::Recovery(_)),
                    "seed {seed}: host {} had {:?}",
                    h.id,
                    e.event
                );
            }
        }
    }
}
