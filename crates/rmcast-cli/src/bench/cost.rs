//! `rmcast bench --experiment cost`: what one message costs as the group grows, on real member
//! processes over loopback multicast on this host; the real-process form of `rmcast sim
//! --experiment cost`. Member 1 multicasts [`MESSAGE_BYTES`]-byte messages at [`RATE`] a
//! second for `--duration` to groups of 3, 8, 16 and 32 member processes, each engine of
//! `--engine` in turn. Per message:
//!
//! - **datagrams sent** by every member's node together, from the send start until every
//!   member was done (group formation left out; failure-detection probes, gossip rounds and
//!   token passes in);
//! - **CPU per delivery**: the member processes' CPU time over the same span (every thread,
//!   user and system, the benchmark's own bookkeeping included) over their deliveries.
//!
//! Paced well below what the host carries, so that CPU per delivery is the cost of a message
//! and not of a queue: 32 processes on 2 cores stay mostly idle.

use super::{run_rmcast, BenchArgs, Limit, RunConfig};
use crate::plot::Series;
use crate::sim::cost::predicted;
use anyhow::Result;
use std::process::ExitCode;

/// Group sizes, in member processes.
pub const SIZES: [usize; 4] = [3, 8, 16, 32];
/// Messages a second from the one sender.
pub const RATE: u64 = 200;
/// Payload bytes of each message.
pub const MESSAGE_BYTES: usize = 64;

/// One row of the table.
struct Row {
    engine: String,
    members: usize,
    datagrams_per_message: f64,
    cpu_us_per_delivery: f64,
    lost: u64,
}

/// Run the experiment with `base` for what it does not set (timeouts, interface, keys).
pub(super) fn run(args: &BenchArgs, base: &RunConfig) -> Result<ExitCode> {
    println!(
        "rmcast bench --experiment cost: member 1 sends {MESSAGE_BYTES}-byte messages at {RATE} \
         a second for {} s to groups of {} member processes on loopback multicast; engines: {}",
        args.duration_secs,
        SIZES.map(|n| n.to_string()).join(", "),
        args.engine.join(", ")
    );
    let mut rows = Vec::new();
    let mut failed = 0;
    for engine in &args.engine {
        for members in SIZES {
            let cfg = RunConfig {
                size: MESSAGE_BYTES,
                members,
                senders: 1,
                first_sender: 1,
                limit: Limit::Duration(std::time::Duration::from_secs(args.duration_secs)),
                rate: Some(RATE),
                engine: engine.clone(),
                qos: super::qos_for(args.qos, engine)?,
                ..base.clone()
            };
            eprintln!("[{engine}, {members} members]");
            match run_rmcast(&cfg) {
                Ok(m) => {
                    let deliveries: u64 = m.members.iter().map(|f| f.received).sum();
                    let datagrams: u64 = m.members.iter().map(|f| f.datagrams_sent).sum();
                    let cpu: f64 = m.members.iter().map(|f| f.cpu_s).sum();
                    rows.push(Row {
                        engine: engine.clone(),
                        members,
                        datagrams_per_message: datagrams as f64 / m.sent.max(1) as f64,
                        cpu_us_per_delivery: cpu * 1e6 / deliveries.max(1) as f64,
                        lost: m.lost(),
                    });
                }
                Err(e) => {
                    failed += 1;
                    eprintln!("  {e:#}");
                }
            }
        }
    }
    println!(
        "\n{:<10} {:>7} {:>14} {:>18} {:>18} {:>20}  lost",
        "engine", "members", "datagrams/msg", "per member", "CPU us/delivery", "the paper"
    );
    for r in &rows {
        failed += usize::from(r.lost > 0);
        println!(
            "{:<10} {:>7} {:>14.2} {:>18.3} {:>18.1} {:>20}  {}",
            r.engine,
            r.members,
            r.datagrams_per_message,
            r.datagrams_per_message / r.members as f64,
            r.cpu_us_per_delivery,
            predicted(&r.engine, r.members as u32),
            r.lost
        );
    }
    println!(
        "\nCPU per delivery: the member processes' CPU time (every thread, the benchmark's own \
         work included) from the send start until every member was done, over their deliveries."
    );
    if let Some(path) = &args.plot {
        let mut per_member: Vec<Series> = Vec::new();
        let mut cpu: Vec<Series> = Vec::new();
        for r in &rows {
            let x = (r.members as f64).log10();
            let push = |v: &mut Vec<Series>, y: f64| match v.iter_mut().find(|s| s.name == r.engine)
            {
                Some(s) => s.points.push((x, y)),
                None => v.push(Series {
                    name: r.engine.clone(),
                    points: vec![(x, y)],
                }),
            };
            if r.engine != "txn" {
                push(&mut per_member, r.datagrams_per_message / r.members as f64);
            }
            push(&mut cpu, r.cpu_us_per_delivery);
        }
        let sizes: Vec<u32> = SIZES.iter().map(|&n| n as u32).collect();
        let title = "CPU per delivery (member processes, the benchmark's work included)";
        crate::sim::cost::plot(path, &sizes, &per_member, &cpu, title)?;
        println!("figure written to {}", path.display());
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        println!("{failed} run(s) failed or lost messages");
        ExitCode::FAILURE
    })
}
