//! Scale runs (issue 31): the sequencer and the ring with 1,024 members at the peak, with loss,
//! members joining and leaving throughout and a crash, every checker passing, and no datagram
//! longer than the engines' datagram size (views and New Lists of 1,024 members go in parts).
//!
//! Each is one command, in release, one at a time (a 1,000-member run holds every host's
//! engine and the whole record; see docs/RELIABILITY.md for times and memory):
//!
//! ```sh
//! /usr/bin/time -v cargo test --release -p rmcast-sim --test scale -- --ignored sequencer_1024
//! /usr/bin/time -v cargo test --release -p rmcast-sim --test scale -- --ignored ring_1024
//! ```

use rmcast_proto::Qos;
use rmcast_sim::{EngineChoice, Scenario};
use std::time::Instant;

/// 1,020 members at the start and 4 joins during traffic (1,024 at the peak, the default
/// limit of both engines), 4 leaves, one crash, 1% loss on every copy, 4 senders.
/// `SCALE_MEMBERS=n` starts with `n` members instead (to see how the cost grows).
fn at_1024(engine: EngineChoice, qos: Option<Qos>) -> Scenario {
    let members = std::env::var("SCALE_MEMBERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1020);
    Scenario {
        engine,
        qos,
        members,
        churn: 4,
        crashes: 1,
        loss: 0.01,
        reorder_ms: 1.0,
        senders: 4,
        messages: 25,
        rate: Some(20.0),
        fault_window_ms: 2000,
        ..Scenario::default()
    }
}

fn run(sc: &Scenario, seed: u64) {
    sc.validate().expect("a valid scenario");
    let t = Instant::now();
    let rep = sc.run(seed);
    if !rep.passed() {
        // `SCALE_SHOW=0,354` prints those hosts' final state and counters, to see where a
        // member stopped.
        let show = std::env::var("SCALE_SHOW").unwrap_or_default();
        for h in show.split(',').filter_map(|v| v.parse::<usize>().ok()) {
            if let Some(r) = rep.record.hosts.get(h) {
                eprintln!("host {h}: {}\n  {:?}", r.final_state, r.counters);
            }
        }
        panic!("{}\n{}", rep.summary(), sc.replay_command(seed));
    }
    let n = &rep.record.net;
    if std::env::var("SCALE_COUNTERS").is_ok() {
        // `SCALE_COUNTERS=1`: every host's counters summed, to see what the datagrams were.
        let mut sum: Vec<(&'static str, u64)> = Vec::new();
        for h in &rep.record.hosts {
            for (i, f) in h.counters.described().into_iter().enumerate() {
                match sum.get_mut(i) {
                    Some(s) => s.1 += f.value,
                    None => sum.push((f.name, f.value)),
                }
            }
        }
        eprintln!("counters summed over the hosts: {sum:?}");
    }
    eprintln!(
        "{} members: pass in {:.1} s of wall time, {:.1} s virtual; {} datagrams, {} steps",
        sc.members,
        t.elapsed().as_secs_f64(),
        rep.record.end_time.0 as f64 / 1e9,
        n.transmitted,
        n.steps
    );
    assert_eq!(
        n.oversized,
        0,
        "datagrams longer than the path\n{}",
        sc.replay_command(seed)
    );
}

#[test]
#[ignore]
fn sequencer_1024_members_with_loss_churn_and_a_crash() {
    run(&at_1024(EngineChoice::sequencer(1), None), 1);
}

#[test]
#[ignore]
fn ring_1024_members_with_loss_churn_and_a_crash() {
    run(
        &at_1024(
            EngineChoice::named("ring").expect("registered"),
            Some(Qos::KResilient(1)),
        ),
        1,
    );
}
