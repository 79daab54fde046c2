//! `rmcast bench --experiment amoeba`: the measurements of "Efficient Reliable Group
//! Communication for Distributed Systems" (Kaashoek and Tanenbaum), section 6.2, Figures 21,
//! 23-25 and 27-28, on real member processes over loopback multicast on this host: the
//! sequencer engine by the PB and by the BB method, the same tables and figures as the
//! simulator's form (`rmcast sim --experiment amoeba`), printed by the same code.
//!
//! Delay (Figures 21, 23, 27, 28): one sender that is not the sequencer (member 2) sends one
//! message at a time, paced at [`DELAY_RATE`] a second; the delay is the median time from its
//! send to its own delivery (which waits for the r acknowledgements when r > 0), as the
//! paper's delay is that of a SendToGroup that returns once the message is ordered.
//! Throughput (Figures 24, 25): every member sends as fast as its window lets it (the paper's
//! members had one message in flight each; ours pipeline), the mean of the members' rates.
//! Messages of 24 bytes stand for the paper's 0 bytes: a benchmark message carries its send
//! time and a sequence number. Group sizes stop at 16 processes on this 2-core host.

use super::{run_rmcast, BenchArgs, Limit, Measurement, RunConfig};
use crate::sim::amoeba::{jobs, report, Grid, Job};
use anyhow::Result;
use rmcast_sim::amoeba::{Method, Point};
use std::process::ExitCode;

/// The runs on real processes: group sizes this host carries, the smallest message a
/// benchmark carries for the paper's 0 bytes.
const GRID: Grid = Grid {
    groups: &[2, 4, 8, 16],
    delay_sizes: &[24, 1024, 4096, 8000],
    throughput_sizes: &[24, 1024, 4096],
    resilience: &[1, 2, 3, 5, 7],
    resilience_sizes: &[24, 1024, 4096],
    retransmissions: false,
};

/// Messages a second of the delay runs: each message alone on the network (its delay is far
/// below the gap).
pub const DELAY_RATE: u64 = 100;

/// Messages the sender of a delay run sends [default: the paper's 200].
const DELAY_MESSAGES: u64 = 200;

/// Run the experiment with `base` for what the grid does not set (timeouts, interface, keys).
pub(super) fn run(args: &BenchArgs, base: &RunConfig) -> Result<ExitCode> {
    let jobs = jobs(&GRID);
    let delay_messages = args.messages.unwrap_or(DELAY_MESSAGES);
    println!(
        "rmcast bench --experiment amoeba: {} runs of real member processes on loopback \
         multicast; delay: member 2 sends {delay_messages} messages, {DELAY_RATE} a second; \
         throughput: every member sends for {} s",
        jobs.len(),
        args.duration_secs
    );
    let mut points = Vec::new();
    let mut failed = 0;
    for (i, job) in jobs.iter().enumerate() {
        let cfg = config(base, job, delay_messages, args.duration_secs);
        eprintln!("[{}/{}] {job:?}", i + 1, jobs.len());
        let point = match run_rmcast(&cfg) {
            Ok(m) => point(job, &cfg, &m),
            Err(e) => {
                eprintln!("  {e:#}");
                failed_point(job, &format!("{e:#}"))
            }
        };
        if !point.complete {
            failed += 1;
        }
        points.push(point);
    }
    let mut parallel = Vec::new();
    for (i, &(groups, members)) in PARALLEL.iter().enumerate() {
        eprintln!(
            "[{}/{}] {groups} groups of {members} side by side",
            i + 1,
            PARALLEL.len()
        );
        let p = parallel_point(base, groups, members, args.duration_secs);
        if !p.complete {
            failed += 1;
        }
        parallel.push(p);
    }
    let pairs: Vec<(Job, &Point)> = jobs.iter().copied().zip(&points).collect();
    report(
        &mut std::io::stdout().lock(),
        &pairs,
        &parallel,
        &GRID,
        args.plot.as_deref(),
    )?;
    if failed == 0 {
        println!("\nevery run delivered every message at every member");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("\n{failed} run(s) did not deliver everything (marked !)");
        Ok(ExitCode::FAILURE)
    }
}

/// Figure 26 on this host: (groups, members of each) side by side, every member sending
/// 24-byte messages by PB, as far as 2 cores carry (16 processes at most).
const PARALLEL: [(u32, u32); 7] = [(1, 2), (2, 2), (4, 2), (8, 2), (1, 4), (2, 4), (4, 4)];

/// Runs `groups` groups of `members` at once, each its own group of worker processes, and
/// gives the total of their messages a second (the paper's Figure 26).
fn parallel_point(base: &RunConfig, groups: u32, members: u32, secs: u64) -> Point {
    let job = Job::Throughput(Method::Pb, members, 24);
    let cfg = RunConfig {
        method: Method::Pb,
        ..config(base, &job, 0, secs)
    };
    let runs: Vec<Result<Measurement>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..groups).map(|_| s.spawn(|| run_rmcast(&cfg))).collect();
        (handles.into_iter())
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a run panicked")))
            })
            .collect()
    });
    let mut p = Point {
        method: Method::Pb,
        members,
        senders: members * groups,
        r: 0,
        message_bytes: 24,
        delay_ms: f64::NAN,
        throughput: 0.0,
        datagrams_per_message: f64::NAN,
        retransmissions: 0,
        rx_drops: 0,
        complete: true,
        passed: true,
        summary: "parallel groups".to_string(),
    };
    for r in runs {
        match r {
            Ok(m) => {
                p.throughput += m.mean_rate();
                p.complete &= m.lost() == 0 && m.members.len() == cfg.members;
            }
            Err(e) => {
                eprintln!("  {e:#}");
                p.complete = false;
                p.summary = format!("{e:#}");
            }
        }
    }
    p.passed = p.complete;
    p
}

/// The measurement of one run.
fn config(base: &RunConfig, job: &Job, delay_messages: u64, secs: u64) -> RunConfig {
    let (method, members, r, size) = match *job {
        Job::Delay(m, n, r, b) => (m, n, r, b),
        Job::Throughput(m, n, b) => (m, n, 0, b),
    };
    let delay = matches!(job, Job::Delay(..));
    RunConfig {
        size,
        members: members as usize,
        senders: if delay { 1 } else { members as usize },
        // The paper's sender is not the sequencer (member 1 creates the group and orders).
        first_sender: if delay { 2 } else { 1 },
        limit: if delay {
            Limit::Messages(delay_messages)
        } else {
            Limit::Duration(std::time::Duration::from_secs(secs))
        },
        rate: delay.then_some(DELAY_RATE),
        engine: "sequencer".to_string(),
        resilience: r,
        method,
        ..base.clone()
    }
}

/// What the run measured, as the simulator's form reports it.
fn point(job: &Job, cfg: &RunConfig, m: &Measurement) -> Point {
    let sender = m.members.get(cfg.first_sender - 1);
    let complete = m.lost() == 0 && m.members.len() == cfg.members;
    Point {
        method: cfg.method,
        members: cfg.members as u32,
        senders: cfg.senders as u32,
        r: cfg.resilience,
        message_bytes: cfg.size,
        delay_ms: sender.map_or(f64::NAN, |s| s.latency_p50_us / 1000.0),
        throughput: m.mean_rate(),
        datagrams_per_message: f64::NAN,
        retransmissions: 0,
        rx_drops: 0,
        complete,
        passed: complete,
        summary: match job {
            Job::Delay(..) => "delay run".to_string(),
            Job::Throughput(..) => "throughput run".to_string(),
        },
    }
}

/// A run that could not be made.
fn failed_point(job: &Job, why: &str) -> Point {
    let (method, members, senders, r, size) = match *job {
        Job::Delay(m, n, r, b) => (m, n, 1, r, b),
        Job::Throughput(m, n, b) => (m, n, n, 0, b),
    };
    Point {
        method,
        members,
        senders,
        r,
        message_bytes: size,
        delay_ms: f64::NAN,
        throughput: f64::NAN,
        datagrams_per_message: f64::NAN,
        retransmissions: 0,
        rx_drops: 0,
        complete: false,
        passed: false,
        summary: why.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every run fits the host's limits: r + 1 members at least, a sender that is not the
    /// sequencer in delay runs, sizes the benchmark carries.
    #[test]
    fn every_run_is_one_the_benchmark_can_make() {
        for job in jobs(&GRID) {
            match job {
                Job::Delay(m, n, r, b) => {
                    assert!(n >= 2 && u32::from(r) < n, "{job:?}");
                    assert!(b >= 24, "{job:?}");
                    assert!(matches!(m, Method::Pb | Method::Bb));
                }
                Job::Throughput(_, n, b) => assert!(n >= 2 && b >= 24, "{job:?}"),
            }
        }
    }
}
