//! The `ring` engine (RMP, after "RMP: Fault-Tolerant Group Communication" by Whetten,
//! Montgomery and Kaplan) through the simulator: its declaration (total order, virtual
//! synchrony, all-or-nothing, crash recovery) selects integrity, agreement, FIFO, total
//! order, virtual synchrony, resilience and liveness, and the sweeps below pass them under loss,
//! duplication, reordering, joins and leaves, for every QoS level it serves. The datagrams per
//! message fall toward 1 as the load grows (one ACK orders many data packets).
//!
//! Crashes, partitions and pauses: `ring_recovery.rs`. Longer sweeps:
//! `cargo test -p rmcast-sim --test ring_sweep -- --ignored`.

use rmcast_proto::{EngineChoice, Event, Order, Qos};
use rmcast_sim::{Scenario, SweepReport};

fn ring() -> EngineChoice {
    EngineChoice::named("ring").expect("ring is registered")
}

fn faulty(members: u32, churn: u32) -> Scenario {
    Scenario {
        engine: ring(),
        members,
        loss: 0.1,
        dup: 0.05,
        reorder_ms: 2.0,
        churn,
        senders: 3,
        in_flight: 4,
        messages: 30,
        ..Scenario::default()
    }
}

/// Seeds `seeds` of `sc`, every message sent with `qos`; panics naming the failing seeds.
fn sweep_qos(sc: &Scenario, qos: Qos, seeds: u64) -> SweepReport {
    let sc = Scenario {
        qos: Some(qos),
        ..sc.clone()
    };
    // The replay command names the level (`--qos`).
    sc.sweep_expect_pass(seeds)
}

#[test]
fn ring_declares_total_order_virtual_synchrony_and_crash_recovery() {
    let g = ring().guarantees();
    assert_eq!(g.order, Order::Total);
    assert!(g.virtual_synchrony && g.all_or_nothing() && g.crash_recovery);
    for q in Qos::levels(u8::MAX) {
        assert!(g.qos.contains(q), "{q:?}");
    }
}

#[test]
fn ring_survives_loss_duplication_reordering_joins_and_leaves() {
    let sc = faulty(5, 2);
    let rep = sweep_qos(&sc, Qos::TotallyOrdered, 200);
    let sum =
        |f: fn(&rmcast_sim::Figures) -> u64| rep.runs.iter().map(|r| f(&r.figures)).sum::<u64>();
    // The faults were there, and NACKs repaired them.
    assert!(sum(|f| f.drops_loss) > 0);
    assert!(sum(|f| f.duplicated) > 0);
    assert!(sum(|f| f.nacks) > 0);
    assert!(rep.runs.iter().all(|r| r.figures.messages == 90));
    // The checkers the declaration selects ran.
    for name in [
        "integrity",
        "agreement",
        "total_order",
        "fifo",
        "virtual_synchrony",
        "liveness",
    ] {
        assert!(rep.runs[0].verdicts.contains_key(name), "{name}");
    }
    // Members joined and left while traffic flowed (views ordered with the data).
    let (mut joins, mut leaves) = (0, 0);
    for seed in 0..20 {
        let rec = rmcast_sim::simulate(&sc.config(seed));
        for h in &rec.hosts {
            for e in &h.events {
                match &e.event {
                    Event::View(v) if v.joined == Some(h.id) && v.id > 1 => joins += 1,
                    Event::Left => leaves += 1,
                    _ => {}
                }
            }
        }
    }
    println!("20 seeds: {joins} joins, {leaves} leaves");
    assert!(
        joins >= 20 && leaves >= 20,
        "{joins} joins, {leaves} leaves"
    );
}

/// Every level of Fig. 3.2 over 200 seeds, held to what that level promises (the run's
/// declaration is the engine's weakened to the level, `Guarantees::at_qos`): integrity always;
/// agreement from reliable up; FIFO from source ordered up; total order and virtual synchrony
/// from totally ordered up. The totally ordered level is swept above.
#[test]
fn every_qos_level_passes_its_checkers() {
    let sc = faulty(5, 2);
    for qos in Qos::levels(2) {
        if qos == Qos::TotallyOrdered {
            continue;
        }
        let rep = sweep_qos(&sc, qos, 200);
        let g = rep.runs[0].verdicts.clone();
        let ran = |n: &str| g.contains_key(n);
        assert!(ran("integrity") && ran("liveness"), "{qos}");
        let promised = ring().guarantees().at_qos(qos);
        assert_eq!(
            promised.fifo(),
            qos != Qos::Unreliable && qos != Qos::Reliable
        );
        assert_eq!(promised.order == Order::Total, qos.is_total());
        assert_eq!(promised.all_or_nothing(), qos != Qos::Unreliable);
        let dpm: f64 = rep
            .runs
            .iter()
            .map(|r| r.figures.datagrams_per_broadcast)
            .sum::<f64>()
            / rep.runs.len() as f64;
        println!("{qos}: 200 seeds pass, {dpm:.2} datagrams per message");
    }
}

#[test]
fn datagrams_per_message_fall_toward_one_under_load() {
    let mut per = Vec::new();
    for in_flight in [1, 4, 16, 64] {
        let sc = Scenario {
            engine: ring(),
            members: 5,
            senders: 5,
            in_flight,
            messages: 200,
            ..Scenario::default()
        };
        let r = sc.run(1);
        assert!(r.passed(), "{:?}", r.verdicts);
        per.push((in_flight, r.figures.datagrams_per_broadcast));
    }
    println!("ring, 5 members, 5 senders: (in flight per sender, datagrams per message) {per:?}");
    assert!(per.windows(2).all(|w| w[1].1 <= w[0].1 + 0.05), "{per:?}");
    assert!(per.last().unwrap().1 < 1.3, "{per:?}");
}

/// 1000 seeds per QoS level, 8 members, more churn (a few minutes).
#[test]
#[ignore]
fn ring_long_sweep() {
    let sc = Scenario {
        messages: 60,
        ..faulty(8, 3)
    };
    for qos in Qos::levels(3) {
        let rep = sweep_qos(&sc, qos, 1000);
        println!("{qos:?}: {} seeds passed", rep.runs.len());
    }
}
