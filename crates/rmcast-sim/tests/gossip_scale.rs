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

/// The time a suspected member has to refute before it is confirmed departed: the default.
/// Past [`Config::probing_above`] (256) members the engine finds failed members by probing
/// (SWIM), so the time to find a crash does not grow with the group; with gossiped heartbeats
/// it had to (12 ms a member: 120 s at 10,000), since news of a member came once in about
/// n / (fanout · rows a digest) rounds.
fn silence_timeout() -> Duration {
    Config::default()
        .silence_timeout
        .expect("failure detection on")
}

fn scenario(members: u32) -> Scenario {
    Scenario {
        engine: EngineChoice::custom(Arc::new(GossipFactory::with_config(Config::default()))),
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
    cfg.limits.quiescence_timeout += silence_timeout();
    let t = Instant::now();
    let rep = rmcast_sim::run(&cfg);
    let rec = &rep.record;
    let n = &rec.net;
    let f = &rep.figures;
    let at_end: Vec<_> = rec.members_at_end().collect();
    // Members found failed, summed over the members (a crash is confirmed by each member that
    // took in the suspicion and saw it time out, or learnt from another).
    let suspected: u64 = rec.hosts.iter().map(|h| h.counters.failures_detected).sum();
    let views: u64 = rec.hosts.iter().map(|h| h.counters.view_changes).sum();

    let lost: usize = (at_end.iter())
        .flat_map(|h| &h.events)
        .filter(|e| matches!(e.event, Event::Loss(_)))
        .count();
    // How long after each crash the members at the end showed a view without the crashed
    // member: the time to find it, plus the wait of a large group between two views (one in
    // n / 256 rounds), so an upper bound on detection.
    let mut found: Vec<f64> = Vec::new();
    for c in rec.hosts.iter().filter(|h| h.crashed_at.is_some()) {
        let crashed = c.crashed_at.expect("filtered");
        let last = at_end.iter().filter_map(|h| {
            h.events.iter().find_map(|e| match &e.event {
                Event::View(v) if e.at >= crashed && v.members.binary_search(&c.id).is_err() => {
                    Some(e.at.saturating_since(crashed).as_secs_f64())
                }
                _ => None,
            })
        });
        found.push(last.fold(0.0, f64::max));
    }
    eprintln!(
        "{members} members: crashed members out of every view {:.1?} s after their crash",
        found
    );
    eprintln!(
        "{members} members: {} in {:.1} s of wall time, {:.1} s simulated; {} members at the \
         end; {} datagrams ({} oversized), {} steps, {} lost copies; latency p50 {:.0} ms, p99 \
         {:.0} ms; {lost} loss reports; {suspected} found failed, {views} views in all",
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
    if !rep.passed() {
        // What kept the group awake: the members still gossiping at the end.
        let awake: Vec<&str> = (at_end.iter())
            .map(|h| h.final_state.as_str())
            .filter(|s| s.contains("idle=false"))
            .collect();
        eprintln!("{} members awake at the end", awake.len());
        for s in awake.iter().take(5) {
            eprintln!("  {s}");
        }
    }
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
