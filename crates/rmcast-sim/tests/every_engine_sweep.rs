//! Every engine through one simulator gauntlet: each seed draws its own faults (loss up to 30%,
//! duplication, reordering, partitions that heal, pauses, joins and leaves, crashes) and the run
//! is held to every checker the engine's declaration selects at the QoS used. The per-engine
//! sweeps next to this file probe each engine's own corners at fixed fault levels; this one
//! spreads every engine over the same space of faults, many seeds deep.
//!
//! Crashes stay within what an engine declares: the Sequencer and the Ring rebuild the group
//! (up to the resilience degree of the run; the Ring at K-resilient levels), Gossip and Txn
//! members only see the crashed member fall silent (no crash recovery is declared, so crashes
//! of ordinary members only), and the Tree's single sender never crashes.
//!
//! CI runs 100 seeds per engine (less the known failures named in [`KNOWN_FAILURES`]). The
//! long sweeps, 10,000 seeds each:
//! `cargo test --release -p rmcast-sim --test every_engine_sweep -- --ignored`
//! (or one engine: `... --ignored ring_10000_seeds`). A failing seed prints the command that
//! replays it: `EVERY_ENGINE=ring EVERY_SEED=17 cargo test -p rmcast-sim --test
//! every_engine_sweep replay -- --ignored --nocapture`.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rmcast_proto::txn::{Config as TxnConfig, TxnFactory};
use rmcast_proto::{EngineChoice, NodeId, Qos};
use rmcast_sim::checkers;
use rmcast_sim::txn_check::check_transactions_apart;
use rmcast_sim::{ChurnEvent, ChurnKind, RunSummary, Scenario, SimConfig};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Random stream for a seed's scenario, kept apart from the run's RNG and its schedules.
const STREAM: u64 = 0xe7e2_e461_5eed_0a11;

/// X_MRopen's `min` in the Txn runs.
const TXN_MIN: usize = 1;

/// The engines, by their registry names.
const ENGINES: [&str; 5] = ["sequencer", "ring", "gossip", "tree", "txn"];

/// The scenario of `seed` for engine `name`, and the QoS it sends at.
fn scenario(name: &str, seed: u64) -> Scenario {
    let mut r = ChaCha8Rng::seed_from_u64(seed ^ STREAM);
    let members: u32 = r.gen_range(3..=7);
    // Half the seeds lossy, a tenth of them at 20-30%.
    let loss = match r.gen_range(0..10) {
        0..=4 => 0.0,
        5..=8 => r.gen_range(0.0..0.1),
        _ => r.gen_range(0.2..0.3),
    };
    let base = Scenario {
        members,
        loss,
        dup: if r.gen_bool(0.5) {
            r.gen_range(0.0..0.05)
        } else {
            0.0
        },
        reorder_ms: if r.gen_bool(0.5) {
            r.gen_range(0.0..3.0)
        } else {
            0.0
        },
        partitions: u32::from(r.gen_bool(0.25)),
        partition_ms: r.gen_range(200..=2500),
        pauses: u32::from(r.gen_bool(0.3)),
        pause_ms: r.gen_range(100..=1500),
        churn: if r.gen_bool(0.3) {
            r.gen_range(1..members.min(3))
        } else {
            0
        },
        senders: r.gen_range(1..=members),
        in_flight: r.gen_range(1..=8),
        messages: r.gen_range(10..=40),
        fault_window_ms: 1000,
        heal: true,
        ..Scenario::default()
    };
    // A crash beside a partition or leaves can take the group below the majority a reset
    // needs; it then waits by its declared policy, which is no failure. Runs with crashes keep
    // a majority: no partition, no leaves, and at least 2c + 2 members for c crashes (a paused
    // member may be taken for failed as well).
    let crash_safe = |sc: Scenario| -> Scenario {
        if sc.crashes == 0 {
            return sc;
        }
        Scenario {
            partitions: 0,
            churn: 0,
            members: sc.members.max(2 * sc.crashes + 2),
            ..sc
        }
    };
    let sc = match name {
        "sequencer" => {
            let resilience: u8 = r.gen_range(0..=2);
            let crashes = r.gen_range(0..=u32::from(resilience)).min(members / 2);
            Scenario {
                engine: EngineChoice::sequencer(resilience),
                crashes,
                crash_sequencer: crashes > 0 && r.gen_bool(0.5),
                crash_in_recovery: crashes > 1 && r.gen_bool(0.5),
                ..base
            }
        }
        "ring" | "ring-batched" => {
            let qos = *[
                Qos::TotallyOrdered,
                Qos::KResilient(1),
                Qos::KResilient(2),
                Qos::MajorityResilient,
            ]
            .get(r.gen_range(0..4))
            .expect("in range");
            let crashes = match qos {
                Qos::KResilient(k) => r.gen_range(0..=u32::from(k)).min((members - 1) / 2),
                Qos::MajorityResilient => r.gen_range(0..=1),
                _ => 0,
            };
            Scenario {
                engine: ring_engine(name),
                qos: Some(qos),
                crashes,
                crash_sequencer: crashes > 0 && r.gen_bool(0.5),
                ..base
            }
        }
        "gossip" => {
            let crashes = r.gen_range(0..=1);
            Scenario {
                engine: EngineChoice::named("gossip").expect("registered"),
                crashes,
                // An idle gossip group stops its rounds and notices a crash only once it
                // wakes (as the engine documents): runs with a crash stream past it.
                rate: (crashes > 0).then_some(40.0),
                messages: if crashes > 0 { 100 } else { base.messages },
                ..base
            }
        }
        // One sender, the group's creator; receivers join and leave and lose packets, the
        // sender stays.
        "tree" => Scenario {
            engine: EngineChoice::named("tree").expect("registered"),
            senders: 1,
            partitions: 0,
            ..base
        },
        "txn" => {
            let crashes = r.gen_range(0..=1);
            let members = members.max(2 * crashes + 2);
            Scenario {
                // Every other member asked into every transaction's set, one enough. A member
                // cut off by a partition or a pause through the open, or silent past the
                // receiver timeout, is left out of the set (X_MRopen's rule); the sets are
                // announced and the run held to the transaction rules
                // ([`rmcast_sim::txn_check`]), which follow them.
                engine: EngineChoice::custom(Arc::new(TxnFactory::with_config(TxnConfig {
                    min_receivers: TXN_MIN,
                    max_receivers: members as usize - 1,
                    announce_sets: true,
                    ..TxnConfig::default()
                }))),
                members,
                senders: base.senders.min(members),
                crashes,
                churn: 0,
                ..base
            }
        }
        other => panic!("no engine {other}"),
    };
    crash_safe(sc)
}

/// The ring: `ring` as registered, `ring-batched` admitting the joiners waiting together in
/// rings of every size (`Config::batch_joins_from` 1; 64 by default, which rings of 3-7 never
/// reach), with the same scenarios.
fn ring_engine(name: &str) -> EngineChoice {
    if name == "ring-batched" {
        return EngineChoice::ring_with(rmcast_proto::ring::Config {
            batch_joins_from: 1,
            ..rmcast_proto::ring::Config::default()
        });
    }
    EngineChoice::named("ring").expect("registered")
}

/// The simulator configuration of `seed` for engine `name`.
fn config(name: &str, seed: u64) -> SimConfig {
    let mut cfg = drawn_config(name, seed);
    if name == "sequencer" || name.starts_with("ring") {
        keep_a_member_per_side(&mut cfg);
    }
    cfg
}

/// Leaves never take away the whole of one side of a partition, as it was when the partition
/// began: one of its members stays until the partition heals (its last leave is dropped).
///
/// Why: a member leaves with its history, and only lingers a bounded time for the others to
/// fetch what they lack. When every member on one side leaves while cut off, what was
/// completed on that side is held by nobody the other side can reach once the partition
/// heals (a member that joined there since holds only what came after its join), and a side
/// that held the whole group leaves joiners on the other side no group to join. The Sequencer
/// declares resilience against `r` crashes, not against a group that leaves while cut off
/// (sequencer seeds 411, 7177: sends completed in view 3 were held by the two members that
/// then left; 7064, 9045: the creator, alone on its side, left before anyone was admitted).
///
/// The Ring as well: a member cut off from its ring reforms only with a majority of its old
/// view (or the configured minimum), and waits by that policy otherwise; it learns that the
/// ring went on without it only from a member of that ring (an EXPELLED from anyone else may
/// come from another ring of this name, which says nothing of its own). When every member of
/// the other side leaves while cut off, nobody who knows the ring's fate is left to tell it,
/// and it waits for ever: a minority that the Ring declares may wait (ring seeds 6739, 7177,
/// 9304: the two members of the majority side left, the one or two cut off waited in their
/// reformation while the joiners admitted on the other side formed the group).
fn keep_a_member_per_side(cfg: &mut SimConfig) {
    let joiners: Vec<NodeId> = (cfg.churn.iter())
        .filter(|c| c.kind == ChurnKind::Join)
        .map(|c| c.node)
        .collect();
    for p in cfg.faults.partitions.clone() {
        for side in [&p.a, &p.b] {
            // The members on this side when the partition began.
            let on_side: Vec<NodeId> = (side.iter())
                .filter(|n| {
                    let joined_before = (cfg.churn.iter())
                        .any(|c| c.node == **n && c.kind == ChurnKind::Join && c.at < p.start);
                    let left_before = (cfg.churn.iter())
                        .any(|c| c.node == **n && c.kind == ChurnKind::Leave && c.at < p.start);
                    (!joiners.contains(n) || joined_before) && !left_before
                })
                .copied()
                .collect();
            let leaves_during = |c: &ChurnEvent| {
                c.kind == ChurnKind::Leave
                    && on_side.contains(&c.node)
                    && c.at >= p.start
                    && c.at < p.end
            };
            let leaving = cfg.churn.iter().filter(|c| leaves_during(c)).count();
            if on_side.is_empty() || leaving < on_side.len() {
                continue;
            }
            let last = (cfg.churn.iter().enumerate())
                .filter(|(_, c)| leaves_during(c))
                .max_by_key(|(_, c)| c.at)
                .map(|(i, _)| i);
            if let Some(i) = last {
                cfg.churn.remove(i);
            }
        }
    }
}

/// The simulator configuration of `seed` for engine `name` as drawn, before the rules that
/// keep a run within what the engine declares.
fn drawn_config(name: &str, seed: u64) -> SimConfig {
    let sc = scenario(name, seed);
    if let Err(e) = sc.validate() {
        panic!("{name} seed {seed}: invalid scenario: {e}");
    }
    let mut cfg = sc.config(seed);
    if name == "tree" {
        // The Tree serves its creator as the one sender, who stays.
        cfg.workload.senders = vec![NodeId(0)];
        cfg.churn.retain(|c| c.node != NodeId(0));
        // The run gets the time Table III's slow timers need, as the engine declares it
        // (`Scenario::config` gives it).
        assert_eq!(
            cfg.limits.quiescence_timeout,
            rmcast_proto::tree::SETTLE_TIME
        );
    }
    cfg
}

/// The command that replays `seed` of `name`.
fn replay_command(name: &str, seed: u64) -> String {
    format!(
        "EVERY_ENGINE={name} EVERY_SEED={seed} cargo test -p rmcast-sim \
         --test every_engine_sweep replay -- --ignored --nocapture"
    )
}

/// `None` if `seed` of `name` passes, else what failed and how to replay it.
fn check(name: &str, seed: u64) -> Option<String> {
    let cfg = config(name, seed);
    let failed = if name == "txn" {
        txn_violations(&cfg)
    } else {
        let run = RunSummary::run_caught(&cfg);
        (!run.passed()).then(|| run.summary())
    };
    failed.map(|what| format!("{name} {what}\n  replay: {}", replay_command(name, seed)))
}

/// The Txn rules on a run with announced sets: integrity, no livelock, and the transaction
/// rules (nobody delivers before the release or outside the set, every receiver of a
/// released transaction's set that stays delivers it, every transaction completes or fails
/// naming who was missing).
fn txn_violations(cfg: &SimConfig) -> Option<String> {
    let mut cfg = cfg.clone();
    // Announced sets keep views apart, so the run never counts as quiescent: it ends at the
    // deadline, which must leave room for every transaction the workload submits. Every timer
    // of the engine is below 10 s; and X_MRopen waits for `max` answers or its timer, so once
    // a member crashed (`max` names every other member) each open takes the whole timer, and
    // a sender with one transaction in flight needs `open_timeout` per message after the
    // crash (seed 593: 36 messages, 21 of them after the crash at 0.8 s, #35 submitted at
    // 10.6 s and still opening when a deadline of heal + 10 s ended the run at 10.8 s).
    let opens = TxnConfig::default().open_timeout * cfg.workload.messages_per_sender as u32;
    cfg.limits.quiescence_timeout = Duration::from_secs(10) + opens;
    // And it must never end earlier: when the only source that announced sets crashes, the
    // survivors' views agree and the quiescence rule finds nothing owed (a message only its
    // crashed sender delivered is nobody's), so the run ended at the crash while the release
    // was on its way to the set (seed 3181: #17 released 0.3 ms before the crash, delivered
    // by all three receivers 1-2 ms after it once the run goes on).
    cfg.limits.run_to_deadline = true;
    let rec =
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rmcast_sim::simulate(&cfg)))
        {
            Ok(rec) => rec,
            Err(_) => return Some(format!("seed {}: panicked", cfg.seed)),
        };
    let mut bad = Vec::new();
    if let Err(v) = checkers::integrity(&rec) {
        bad.push(format!("integrity: {}", v[0]));
    }
    if let Some(l) = &rec.livelock {
        bad.push(format!("livelock: {l}"));
    }
    if let Err(v) = check_transactions_apart(&rec, TXN_MIN, &cfg.faults.partitions) {
        bad.extend(v.into_iter().take(5).map(|x| format!("transactions: {x}")));
    }
    (!bad.is_empty()).then(|| format!("seed {}: {}", cfg.seed, bad.join("\n  ")))
}

/// Seeds of the CI sweeps that fail in the engine, found by this sweep and not fixed yet; the
/// CI sweeps skip them by name and `known_failures` replays them (it fails until they are
/// fixed). None at present (ring 97, a leaver that a reformation left out and that retried
/// its own reformation for ever, was fixed with 40 other seeds of the 10,000, 112 among them).
const KNOWN_FAILURES: &[(&str, u64)] = &[];

/// The CI sweep of `name`: seeds `0..100`, less its known failures.
fn ci_sweep(name: &str) {
    let seeds = (0..100).filter(|s| !KNOWN_FAILURES.contains(&(name, *s)));
    sweep_seeds(name, seeds.collect());
}

/// Runs `seeds` of `name` on every core; panics naming the failing seeds, the first failures
/// and their replay commands.
fn sweep(name: &str, seeds: std::ops::Range<u64>) {
    sweep_seeds(name, seeds.collect())
}

/// [`sweep`] over a list of seeds.
fn sweep_seeds(name: &str, seeds: Vec<u64>) {
    let n = seeds.len();
    let next = AtomicUsize::new(0);
    let failures: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&seed) = seeds.get(i) else { break };
                if let Some(what) = check(name, seed) {
                    failures
                        .lock()
                        .expect("no panic holds it")
                        .push((seed, what));
                }
            });
        }
    });
    let mut failures = failures.into_inner().expect("no panic holds it");
    failures.sort_by_key(|(s, _)| *s);
    let failed: Vec<u64> = failures.iter().map(|(s, _)| *s).collect();
    assert!(
        failures.is_empty(),
        "{} of {n} {name} seeds failed ({failed:?}); the first:\n{}",
        failures.len(),
        failures
            .iter()
            .take(3)
            .map(|(_, w)| w.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    println!(
        "{name}: {n} seeds passed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// The seeds draw the faults the module promises, for every engine (a sweep over a space
/// that silently lost its crashes or its heavy loss would pass and prove less).
#[test]
fn the_seeds_cover_every_fault() {
    for name in ENGINES {
        let scs: Vec<Scenario> = (0..200).map(|s| scenario(name, s)).collect();
        let count = |f: &dyn Fn(&Scenario) -> bool| scs.iter().filter(|s| f(s)).count();
        assert!(count(&|s| s.loss >= 0.2) >= 5, "{name}: heavy loss");
        assert!(count(&|s| s.dup > 0.0) >= 50, "{name}: duplication");
        assert!(count(&|s| s.reorder_ms > 0.0) >= 50, "{name}: reordering");
        assert!(count(&|s| s.pauses > 0) >= 30, "{name}: pauses");
        if name != "tree" {
            assert!(count(&|s| s.partitions > 0) >= 20, "{name}: partitions");
            assert!(count(&|s| s.crashes > 0) >= 20, "{name}: crashes");
        }
        if name != "txn" {
            assert!(count(&|s| s.churn > 0) >= 30, "{name}: churn");
        }
        for (seed, sc) in scs.iter().enumerate() {
            assert!(
                sc.validate().is_ok(),
                "{name} seed {seed}: {:?}",
                sc.validate()
            );
        }
    }
}

/// Sequencer seeds of the 10,000 that failed in the engine until it was fixed, each run as
/// drawn (before [`keep_a_member_per_side`]): a reset that waited for members that never learnt
/// their admission (2820, 4302, 8336, 8515), and a member that took the join requests of a
/// sequencer that did not know it was one for signs of life (8192). With selective repair:
/// NACKs backed off from the first fruitless one under 26-29% loss, so that a member still
/// lacked the joins of others when the sequencer crashed early, ignored their invitations, and
/// no reset gathered a majority (4606, 6034); fixed in the recovery: such a member follows a
/// coordinator that holds the entries it lacks, and a coordinator that cannot give a voter
/// what it lacks (a joiner, holding the history from its join on) hands the reset over to a
/// voter that can (4606).
const SEQUENCER_FIXED: &[u64] = &[2820, 4302, 4606, 6034, 8192, 8336, 8515];

#[test]
fn sequencer_fixed_seeds() {
    for &seed in SEQUENCER_FIXED {
        let run = RunSummary::run_caught(&drawn_config("sequencer", seed));
        assert!(run.passed(), "sequencer seed {seed}: {}", run.summary());
    }
}

/// The partition rule drops exactly the leave that would empty a side, and only then.
#[test]
fn a_partition_side_keeps_a_member() {
    // Seed 7064: host 0, alone on its side, leaves during the partition.
    let drawn = drawn_config("sequencer", 7064);
    let kept = config("sequencer", 7064);
    assert_eq!(drawn.churn.len(), kept.churn.len() + 1);
    assert!(!kept
        .churn
        .iter()
        .any(|c| c.node == NodeId(0) && c.kind == ChurnKind::Leave));
    // Seed 8336: a member stays on each side; nothing changes.
    assert_eq!(
        drawn_config("sequencer", 8336).churn,
        config("sequencer", 8336).churn
    );
}

#[test]
fn sequencer_100_seeds() {
    ci_sweep("sequencer");
}

#[test]
fn ring_100_seeds() {
    ci_sweep("ring");
}

#[test]
fn ring_batched_100_seeds() {
    ci_sweep("ring-batched");
}

#[test]
fn gossip_100_seeds() {
    ci_sweep("gossip");
}

#[test]
fn tree_100_seeds() {
    ci_sweep("tree");
}

#[test]
fn txn_100_seeds() {
    ci_sweep("txn");
}

#[test]
#[ignore]
fn sequencer_10000_seeds() {
    sweep("sequencer", 0..10_000);
}

#[test]
#[ignore]
fn ring_10000_seeds() {
    sweep("ring", 0..10_000);
}

#[test]
#[ignore]
fn ring_batched_10000_seeds() {
    sweep("ring-batched", 0..10_000);
}

#[test]
#[ignore]
fn gossip_10000_seeds() {
    sweep("gossip", 0..10_000);
}

#[test]
#[ignore]
fn tree_10000_seeds() {
    sweep("tree", 0..10_000);
}

#[test]
#[ignore]
fn txn_10000_seeds() {
    sweep("txn", 0..10_000);
}

/// The known failures, replayed: fails until the engines are fixed.
#[test]
#[ignore]
fn known_failures() {
    for (name, seed) in KNOWN_FAILURES {
        sweep_seeds(name, vec![*seed]);
    }
}

/// Replays one seed, printing what every checker said: `EVERY_ENGINE=ring EVERY_SEED=17 cargo
/// test -p rmcast-sim --test every_engine_sweep replay -- --ignored --nocapture`.
#[test]
#[ignore]
fn replay() {
    let name = std::env::var("EVERY_ENGINE").unwrap_or_else(|_| "sequencer".into());
    let seed: u64 = std::env::var("EVERY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    println!("{:#?}", scenario(&name, seed));
    if name == "txn" {
        let bad = txn_violations(&config(&name, seed));
        assert!(bad.is_none(), "{}", bad.unwrap_or_default());
        return;
    }
    let cfg = config(&name, seed);
    if std::env::var_os("EVERY_EVENTS").is_some() {
        println!(
            "churn {:?}\npartitions {:?}\npauses {:?}\ncrashes {:?}",
            cfg.churn, cfg.faults.partitions, cfg.faults.pauses, cfg.faults.crashes
        );
    }
    let rep = rmcast_sim::run(&cfg);
    // Each host's engine at the end, as the engine describes itself, and with `EVERY_EVENTS`
    // set every event it gave (deliveries aside).
    for h in &rep.record.hosts {
        println!("host {}: {}", h.id, h.final_state);
        if std::env::var_os("EVERY_EVENTS").is_some() {
            for e in &h.events {
                if std::env::var_os("EVERY_DELIVERIES").is_some()
                    || !matches!(e.event, rmcast_proto::Event::Deliver(_))
                {
                    println!("  {:?} {:?}", e.at, e.event);
                }
            }
        }
    }
    println!("{}", rep.summary());
    assert!(rep.passed(), "{}", replay_command(&name, seed));
}

/// Seeds of the 10,000 that once failed and were fixed, replayed on every run so that they stay
/// fixed (ring: a reformation of two that gave up alone, 108 and others; a leaver reformed out
/// while in no reformation that waited for ever, 3119, 7265, 9533, 9576; a token site cut off
/// alone that delivered a K-resilient slot it alone held, 491; NACKs repeated every 2 s under
/// 29% loss, 2615, 7432, 9508; a voter waiting for an initiator back as a new member, 6818,
/// 9481; a joiner whose admission was lost while its site reformed, 3839, and the stale
/// admissions the first fix of it sent, 430, 1588; the whole majority side leaving while cut
/// off, 6739, 7177, 9304, now kept to [`keep_a_member_per_side`]; the first version of the
/// ring's role checks, which believed another member's EXPELLED only from a majority of an old
/// ring whose members had left or crashed, 387, 502, 711, 970; a token site that ordered its
/// own packet and crashed before any other member had it, which no reformation could then
/// reach the sync point past, 1927 (drawn once joiners were admitted together); tree: the
/// last packet of a burst lost, with the three advertisements of T_sap after it, by a receiver
/// the sender then forgot as silent, 4194).
#[test]
fn seeds_once_failing() {
    sweep_seeds(
        "ring",
        vec![
            108, 387, 430, 491, 502, 711, 970, 1588, 1927, 2615, 2820, 2963, 3119, 3839, 4881,
            6082, 6739, 6818, 6948, 7009, 7064, 7177, 7265, 7432, 8517, 9304, 9481, 9508, 9533,
            9567, 9576,
        ],
    );
    sweep_seeds("tree", vec![4194]);
}
