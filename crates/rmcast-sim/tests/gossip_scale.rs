//! The `gossip` engine (Bimodal Multicast, after "Bimodal Multicast" by Birman, Hayden,
//! Ozkasap, Xiao, Budiu and Minsky) at the scale it was designed for (issue 31): 10,000 members
//! at the start, 20 joining and 20 leaving while 4 senders multicast, 2 crashes, 1% of every
//! copy lost and 1 ms of reordering; every checker must pass and no datagram may be longer than
//! the path (`NetStats::oversized`: the membership table of 10,000 goes in parts).
//!
//! One command, in release (its wall time, simulated time and peak memory are in
//! docs/RELIABILITY.md; `GOSSIP_SCALE_MEMBERS=n` starts with `n` members instead, to see how
//! the cost grows; `GOSSIP_SCALE_SEED=n` draws another schedule, seed 1 without it):
//!
//! ```sh
//! /usr/bin/time -v cargo test --release -p rmcast-sim --test gossip_scale -- --ignored --nocapture
//! ```

use rmcast_proto::gossip::{Config, GossipFactory};
use rmcast_proto::{EngineChoice, Event, Qos};
use rmcast_sim::Scenario;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// How long a member may go unheard of before it is suspected, in a group of `members`.
/// A member hears of another from rows in the digests it gets: a digest holds R rows (about
/// 115 when it names no sender, 30 while 4 senders are named) and a member gets about
/// `fanout` (2) digests a round, so news of a given member comes once in about
/// n / (fanout · R) rounds: 0.4 s at 1,000 members, 4 s at 10,000, 17 s at 10,000 while
/// the senders are named. The timeout must be many of those long, or among the n^2 pairs
/// some live member is suspected: the default 5 s would be at 10,000; 30 s up to 2,500,
/// 12 ms a member beyond.
fn silence_timeout(members: u32) -> Duration {
    Duration::from_secs(30).max(Duration::from_millis(12) * members)
}

fn scenario(members: u32) -> Scenario {
    let cfg = Config {
        silence_timeout: Some(silence_timeout(members)),
        ..Config::default()
    };
    Scenario {
        engine: EngineChoice::custom(Arc::new(GossipFactory::with_config(cfg))),
        qos: Some(Qos::SourceOrdered),
        members,
        churn: 20,
        crashes: 2,
        loss: 0.01,
        reorder_ms: 1.0,
        senders: 4,
        messages: 25,
        rate: Some(20.0),
        fault_window_ms: 2000,
        ..Scenario::default()
    }
}

#[test]
#[ignore = "scale run: 10,000 members, long (see docs/RELIABILITY.md)"]
fn gossip_10000_members_with_loss_churn_and_crashes() {
    let members = env("GOSSIP_SCALE_MEMBERS", 10_000) as u32;
    let seed = env("GOSSIP_SCALE_SEED", 1);
    let sc = scenario(members);
    sc.validate().expect("a valid scenario");
    let mut cfg = sc.config(seed);
    // `Scenario::config` raises the bounds with the group (`Limits::for_members`); a scale run
    // lifts them altogether, to see how long it takes rather than stop at a bound.
    cfg.limits.max_steps = u64::MAX;
    cfg.limits.max_queue_len = usize::MAX;
    // The crashed members are found silent only after the timeout: the run gets that long
    // after the faults, and the default time to deliver on top.
    cfg.limits.quiescence_timeout += silence_timeout(members);
    let t = Instant::now();
    let rep = rmcast_sim::run(&cfg);
    let rec = &rep.record;
    let n = &rec.net;
    let f = &rep.figures;
    let at_end: Vec<_> = rec.members_at_end().collect();
    // Members found silent, summed over the members (a crash is found by each on its own,
    // or learnt from another's table): beyond about 2 n, live members were suspected.
    let suspected: u64 = rec.hosts.iter().map(|h| h.counters.failures_detected).sum();
    let views: u64 = rec.hosts.iter().map(|h| h.counters.view_changes).sum();
    let lost: usize = (at_end.iter())
        .flat_map(|h| &h.events)
        .filter(|e| matches!(e.event, Event::Loss(_)))
        .count();
    eprintln!(
        "{members} members: {} in {:.1} s of wall time, {:.1} s simulated; {} members at the \
         end; {} datagrams ({} oversized), {} steps, {} lost copies; latency p50 {:.0} ms, p99 \
         {:.0} ms; {lost} loss reports; {suspected} suspicions, {views} views in all",
        if rep.passed() { "pass" } else { "FAIL" },
        t.elapsed().as_secs_f64(),
        rec.end_time.0 as f64 / 1e9,
        at_end.len(),
        n.transmitted,
        n.oversized,
        n.steps,
        n.drops_loss,
        f.latency_p50_ms,
        f.latency_p99_ms,
    );
    assert!(
        rep.passed(),
        "{}\n{}",
        rep.summary(),
        sc.replay_command(seed)
    );
    assert_eq!(n.oversized, 0, "datagrams longer than the path");
    assert_eq!(at_end.len() as u32, members - 2, "all but the 2 crashed");
    assert!(n.drops_loss > 0, "1% of the copies were lost");
}
