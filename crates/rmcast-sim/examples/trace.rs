//! Print what every host of one simulated run did, except deliveries (counted): views, resets,
//! failures, completions, leaves, crashes. For debugging a failing seed:
//! `cargo run --release -p rmcast-sim --example trace -- <seed> <rmcast sim arguments...>` is not
//! parsed here; edit the scenario below instead.

use rmcast_sim::record::RecEvent;
use rmcast_sim::{EngineChoice, Scenario};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seed: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let get = |name: &str, default: f64| -> f64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let has = |name: &str| args.iter().any(|a| a == name);
    let sc = Scenario {
        engine: EngineChoice::Sequencer {
            resilience: get("--resilience", 1.0) as u8,
        },
        members: get("--members", 6.0) as u32,
        senders: get("--senders", 6.0) as u32,
        messages: get("--messages", 60.0) as u64,
        loss: get("--loss", 0.0),
        dup: get("--dup", 0.0),
        reorder_ms: get("--reorder", 0.0),
        crashes: get("--crashes", 0.0) as u32,
        crash_sequencer: has("--crash-sequencer"),
        crash_in_recovery: has("--crash-in-recovery"),
        churn: get("--churn", 0.0) as u32,
        partitions: get("--partition", 0.0) as u32,
        partition_ms: get("--partition-ms", 300.0) as u64,
        pauses: get("--pause", 0.0) as u32,
        pause_ms: get("--pause-ms", 200.0) as u64,
        fault_window_ms: get("--fault-window-ms", 1000.0) as u64,
        min_members: get("--min-members", 0.0) as u32,
        message_bytes: get("--message-bytes", 64.0) as usize,
        latency_ms: get("--latency", 1.0),
        in_flight: get("--in-flight", 4.0) as u32,
        rate: args
            .iter()
            .position(|a| a == "--rate")
            .map(|i| args[i + 1].parse().unwrap()),
        bandwidth_mbps: args
            .iter()
            .position(|a| a == "--bandwidth-mbps")
            .map(|i| args[i + 1].parse().unwrap()),
        rx_buffer: get("--rx-buffer", 64.0) as usize,
    };
    if let Some(i) = args.iter().position(|a| a == "--seeds") {
        let n: u64 = args[i + 1].parse().unwrap();
        let seeds: Vec<u64> = (0..n).collect();
        let rep = sc.sweep_parallel(&seeds, 2, &|| {});
        println!("failing seeds {:?}", rep.failing_seeds());
        println!("{}", rep.failure_summary(3));
        let f = rep.mean_figures();
        println!(
            "detection {:.1} ms, recovery {:.1} ms, expelled {}, dpb {:.3}",
            f.detection_ms, f.recovery_ms, f.expelled, f.datagrams_per_broadcast
        );
        return;
    }
    let rep = sc.run(seed);
    println!("{}", rep.summary());
    for h in &rep.record.hosts {
        println!(
            "host {} started {:?} crashed {:?} leave {:?}",
            h.id, h.started_at, h.crashed_at, h.leave_requested_at
        );
        let mut delivered = 0;
        for e in &h.events {
            let t = e.at.0 as f64 / 1e6;
            match &e.event {
                RecEvent::Deliver(_) => delivered += 1,
                RecEvent::SendComplete { .. } => {}
                other => println!("  {t:10.3} [{delivered} delivered] {other:?}"),
            }
        }
        println!("  total delivered {delivered}; counters {:?}", h.counters);
        println!("  state: {}", h.final_state);
    }
}
