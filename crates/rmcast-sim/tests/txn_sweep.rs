//! The `txn` engine (Multidriver transactions, after "The Multidriver: A Reliable Multicast
//! Service Using the Xpress Transfer Protocol" by Dempsey, Fenton and Weaver) through the
//! simulator.
//!
//! Two kinds of sweeps:
//! - **The common checkers** (integrity, agreement, liveness, livelock: what the declaration,
//!   unordered all-or-nothing delivery, selects) under loss, duplication, reordering, pauses and
//!   crashes, with X_MRopen's `max` set to every other member and `min` to one, so that every
//!   member that stays is in every transaction's set.
//! - **Transactions that fail** ([`rmcast_sim::txn_check`]): `min` = every other member, so
//!   that a crash fails the transactions it touches. Checked: no receiver delivers before the
//!   release (deliver-to) or outside the set, nobody delivers a failed transaction, every
//!   receiver of a released one's set that stays delivers it, and every transaction of a source
//!   that stays completes or fails naming who was missing (a crashed host).
//!
//! Longer sweeps: `cargo test -p rmcast-sim --test txn_sweep -- --ignored`.

use rmcast_proto::txn::{Config, TxnFactory};
use rmcast_proto::{DeliveryPromise, EngineChoice, Event, Order, Qos};
use rmcast_sim::multidriver::{engine, mean, run, Run};
use rmcast_sim::txn_check::{check_transactions, TxnOutcomes};
use rmcast_sim::{Scenario, SweepReport};
use std::sync::Arc;
use std::time::Duration;

/// The engine with `max` = every other member of `members`, and `min`.
fn txn(members: u32, min: usize, announce: bool) -> EngineChoice {
    EngineChoice::custom(Arc::new(TxnFactory::with_config(Config {
        min_receivers: min,
        max_receivers: members as usize - 1,
        announce_sets: announce,
        ..Config::default()
    })))
}

fn faulty(members: u32, loss: f64, crashes: u32, pauses: u32) -> Scenario {
    Scenario {
        engine: txn(members, 1, false),
        members,
        loss,
        dup: 0.05,
        reorder_ms: 2.0,
        pauses,
        pause_ms: 200,
        crashes,
        senders: 3,
        in_flight: 4,
        messages: 20,
        // Several segments per message: go-back-N has something to do.
        message_bytes: 4000,
        ..Scenario::default()
    }
}

fn sweep(sc: &Scenario, seeds: u64) -> SweepReport {
    sc.sweep_expect_pass(seeds)
}

#[test]
fn txn_declares_unordered_all_or_nothing_with_replies() {
    let g = EngineChoice::named("txn").expect("registered").guarantees();
    assert_eq!(g.order, Order::Unordered);
    assert_eq!(g.delivery, DeliveryPromise::AllOrNothing);
    assert!(g.replies && !g.virtual_synchrony && !g.crash_recovery);
    assert!(g.qos.contains(Qos::Reliable) && g.qos.contains(Qos::Unreliable));
    for name in ["integrity", "agreement", "liveness", "livelock"] {
        assert!(rmcast_sim::checkers::applies(name, &g), "{name}");
    }
    for name in ["total_order", "fifo", "virtual_synchrony", "resilience"] {
        assert!(!rmcast_sim::checkers::applies(name, &g), "{name}");
    }
}

#[test]
fn txn_passes_the_common_checkers_under_loss_duplication_reordering_and_pauses() {
    let sc = faulty(6, 0.2, 0, 1);
    let started = std::time::Instant::now();
    let rep = sweep(&sc, 200);
    let secs = started.elapsed().as_secs_f64();
    let sum =
        |f: fn(&rmcast_sim::Figures) -> u64| rep.runs.iter().map(|r| f(&r.figures)).sum::<u64>();
    assert!(sum(|f| f.drops_loss) > 0);
    assert!(sum(|f| f.duplicated) > 0);
    assert!(sum(|f| f.retransmissions) > 0, "go-back-N never sent again");
    assert!(rep.runs.iter().all(|r| r.figures.messages == 60));
    let dpm = rep.mean_figures().datagrams_per_broadcast;
    println!("txn, 20% loss: 200 seeds pass in {secs:.1} s, {dpm:.1} datagrams per message");
}

#[test]
fn txn_passes_the_common_checkers_with_crashes() {
    let sc = faulty(6, 0.1, 2, 0);
    let started = std::time::Instant::now();
    let rep = sweep(&sc, 100);
    assert!(rep.runs.iter().all(|r| r.figures.crashes >= 1));
    println!(
        "txn, 10% loss, 2 crashes: 100 seeds pass in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Runs `seeds` of the failing-transactions scenario and checks every run.
fn failing_sweep(
    members: u32,
    loss: f64,
    crashes: u32,
    seeds: std::ops::Range<u64>,
) -> TxnOutcomes {
    let sc = Scenario {
        engine: txn(members, members as usize - 1, true),
        crashes,
        pauses: 0,
        senders: 2,
        // Spread over the fault window, so that crashes fall amid transactions.
        rate: Some(25.0),
        ..faulty(members, loss, crashes, 0)
    };
    sc.validate().expect("valid scenario");
    let mut total = TxnOutcomes::default();
    let mut failures = Vec::new();
    for seed in seeds {
        let mut cfg = sc.config(seed);
        // Announced sets keep views apart, so the run never counts as quiescent: it ends at
        // the deadline; a short one suffices (every timer of the engine is below 10 s).
        cfg.limits.quiescence_timeout = Duration::from_secs(10);
        let rec = rmcast_sim::simulate(&cfg);
        if let Err(v) = rmcast_sim::checkers::integrity(&rec) {
            failures.push(format!("seed {seed}: integrity: {}", v[0]));
        }
        if let Some(l) = &rec.livelock {
            failures.push(format!("seed {seed}: livelock: {l}"));
        }
        match check_transactions(&rec, members as usize - 1) {
            Ok(o) => {
                total.submitted += o.submitted;
                total.committed += o.committed;
                total.failed += o.failed;
                total.failed_open += o.failed_open;
                total.dropped += o.dropped;
                total.receiver_deliveries += o.receiver_deliveries;
            }
            Err(v) => failures.push(format!(
                "seed {seed}: {} violation(s), first: {}",
                v.len(),
                v[0]
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    total
}

#[test]
fn transactions_touched_by_a_crash_fail_by_name_and_nobody_delivers_them() {
    let started = std::time::Instant::now();
    let o = failing_sweep(5, 0.1, 1, 0..150);
    println!(
        "150 seeds in {:.1} s: {o:?}",
        started.elapsed().as_secs_f64()
    );
    // Crashes did fail transactions, some at the open and some by dropping a receiver, and
    // the others committed.
    assert!(o.failed > 0 && o.failed_open > 0 && o.dropped > 0, "{o:?}");
    assert!(o.committed > o.failed, "{o:?}");
}

/// The sender's view of one transaction in a crash-free run: every member delivers, the sender
/// completes every message, and the run needed no more than a few datagrams per receiver.
#[test]
fn a_crash_free_run_commits_everything_at_everyone() {
    let o = failing_sweep(5, 0.2, 0, 0..20);
    assert_eq!(o.failed, 0, "{o:?}");
    assert_eq!(o.committed, o.submitted);
    assert_eq!(o.receiver_deliveries, o.submitted * 4);
    let _ = Event::<()>::Left;
}

/// 1000 seeds with the common checkers and 1000 of failing transactions, 8 members.
#[test]
#[ignore]
fn txn_long_sweep() {
    let started = std::time::Instant::now();
    let sc = Scenario {
        messages: 30,
        ..faulty(8, 0.2, 2, 1)
    };
    let rep = sweep(&sc, 1000);
    println!(
        "common checkers: {} seeds passed in {:.1} s",
        rep.runs.len(),
        started.elapsed().as_secs_f64()
    );
    let o = failing_sweep(8, 0.2, 2, 0..1000);
    println!(
        "failing transactions: 1000 seeds in {:.1} s: {o:?}",
        started.elapsed().as_secs_f64()
    );
}

/// Tables 1 to 3 of the paper and its implosion control, in shape, in the simulator (virtual
/// time: deterministic). Printed; the shapes the paper found are asserted: one multicast
/// transaction beats sequential unicast from two receivers on, and the transaction round trip
/// grows far slower than sequential unicast round trips.
#[test]
#[ignore]
fn txn_tables_in_the_simulator() {
    let unit = Duration::from_micros(100);
    println!("Table 1: a 350,000-byte file, one transaction vs sequential unicast (4 Mb/s shared)");
    let uni = run(1, 350_000, 1, engine(1, unit, false), None).completed_ms;
    let t1 = uni[0];
    for n in [1u32, 2, 3, 4, 5, 8] {
        let Run {
            completed_ms: mc,
            record: rec,
            ..
        } = run(n, 350_000, 1, engine(n as usize, unit, false), None);
        assert_eq!(
            mc.len(),
            1,
            "{:?} {:?} {}",
            rec.livelock,
            rec.workload_errors,
            rec.end_time.0
        );
        let seq = t1 * f64::from(n);
        println!(
            "  {n} receiver(s): multicast {:.0} ms = {:.1} kbit/s; sequential unicast {:.0} ms = {:.1} kbit/s; unicast {:+.1}% slower",
            mc[0],
            350_000.0 * 8.0 / mc[0],
            seq,
            350_000.0 * 8.0 / seq,
            (seq / mc[0] - 1.0) * 100.0
        );
        if n >= 2 {
            assert!(mc[0] < seq, "{n}: {} vs {seq}", mc[0]);
        }
    }
    println!("Tables 2-3: 1-byte transactions, round trip to the last reply (mean of 50)");
    let u = run(1, 12, 50, engine(1, unit, false), None).answered_ms;
    let unicast = mean(&u);
    println!("  unicast round trip (1 receiver): {unicast:.3} ms");
    let mut lat = Vec::new();
    for n in [1u32, 2, 3, 4, 5, 8] {
        let Run {
            completed_ms: c,
            answered_ms: a,
            ..
        } = run(n, 12, 50, engine(n as usize, unit, false), None);
        lat.push(mean(&a));
        println!(
            "  {n} receiver(s): commit {:.3} ms, all replies {:.3} ms; {n} sequential unicast round trips {:.3} ms",
            mean(&c),
            mean(&a),
            unicast * f64::from(n)
        );
    }
    assert!(lat[5] < 8.0 * unicast);
    println!(
        "Implosion: 16 receivers answering at once (switched, 1 ms), the sender's receive \
         buffer 8 datagrams"
    );
    for (label, unit, every) in [
        ("backoff off", Duration::ZERO, false),
        (
            "backoff on (first packet)",
            Duration::from_micros(500),
            false,
        ),
        ("backoff on (use-backoff)", Duration::from_micros(500), true),
    ] {
        let Run {
            answered_ms: a,
            record: rec,
            ..
        } = run(16, 12, 20, engine(16, unit, every), Some(8));
        println!(
            "  {label}: {} datagrams dropped at the receive buffer, {} of 20 transactions answered by all, round trip {:.3} ms",
            rec.net.drops_rx_overflow,
            a.len(),
            mean(&a)
        );
    }
}

/// Two seeds of the every-engine sweep's txn runs (`every_engine_sweep.rs`), their scenarios
/// copied here, held to the transaction rules with that sweep's run bounds. Each failed for a
/// bound, not for the engine: seed 593 (a crashed member makes every open wait out its timer,
/// and the deadline came before the last transaction's) needs the deadline to leave
/// `open_timeout` per message; seed 3181 (the only source crashed just after a release, and the
/// run ended as quiescent at the crash with the release on its way) needs
/// `Limits::run_to_deadline`.
#[test]
fn every_engine_seeds_593_and_3181_keep_the_transaction_rules() {
    let engine = |members: u32| txn(members, 1, true);
    let cases = [
        (
            593,
            Scenario {
                engine: engine(6),
                members: 6,
                reorder_ms: 1.5436723103105998,
                loss: 0.21234381166323632,
                dup: 0.0,
                messages: 36,
                message_bytes: 64,
                senders: 4,
                in_flight: 1,
                partition_ms: 508,
                pause_ms: 1492,
                crashes: 1,
                fault_window_ms: 1000,
                heal: true,
                ..Scenario::default()
            },
        ),
        (
            3181,
            Scenario {
                engine: engine(4),
                members: 4,
                reorder_ms: 1.0283688181476944,
                loss: 0.2939171410114252,
                dup: 0.005513662665679631,
                messages: 40,
                message_bytes: 64,
                senders: 1,
                in_flight: 2,
                partition_ms: 326,
                pause_ms: 852,
                crashes: 1,
                fault_window_ms: 1000,
                heal: true,
                ..Scenario::default()
            },
        ),
    ];
    for (seed, sc) in cases {
        sc.validate().expect("valid scenario");
        let mut cfg = sc.config(seed);
        let opens = Config::default().open_timeout * cfg.workload.messages_per_sender as u32;
        cfg.limits.quiescence_timeout = Duration::from_secs(10) + opens;
        cfg.limits.run_to_deadline = true;
        let rec = rmcast_sim::simulate(&cfg);
        assert!(
            rec.hosts.iter().any(|h| h.crashed_at.is_some()),
            "seed {seed}"
        );
        let out = rmcast_sim::txn_check::check_transactions_apart(&rec, 1, &cfg.faults.partitions)
            .unwrap_or_else(|v| panic!("seed {seed}: {v:#?}"));
        assert!(out.receiver_deliveries > 0, "seed {seed}");
    }
}
