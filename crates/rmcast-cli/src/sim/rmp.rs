//! `rmcast sim --experiment rmp`: the throughput experiment of "RMP: Fault-Tolerant Group
//! Communication" (Whetten, Montgomery, Kaplan), Figures 5.1 and 5.2, in the simulator on one
//! shared 10 Mbit/s medium, with the ring engine (RMP) and the sequencer engine side by side in
//! the same invocation ([`rmcast_sim::experiment`] makes and measures each run). The other
//! experiment, `--experiment pbcast`, is in [`super::pbcast`]; both run on [`run_parallel`].
//!
//! - Figure 5.1: aggregate throughput (payload of all senders times the destinations, the
//!   senders being destinations too) for 2 to 8 members and 1, 2, 4 and 8 sources.
//! - Figure 5.2: single-sender throughput with the source apart from 1 to 8 destinations, beside
//!   the bound of any protocol that sends one unicast per destination (bandwidth / N).
//!
//! Prints one table per figure, and with `--plot FILE` draws both figures into one SVG.
//! The exit code is 0 only if every run delivered everything and passed every checker.

use super::args::SimArgs;
use super::parallel::run_parallel;
use crate::plot::{Panel, Series};
use plotters::chart::SeriesLabelPosition;
use rmcast_sim::experiment::{Point, Setup, ETHERNET_MBPS};
use std::process::ExitCode;

/// The engines compared, in table order.
const ENGINES: [&str; 2] = ["ring", "sequencer"];
/// Sources of Figure 5.1.
const SOURCES: [u32; 4] = [1, 2, 4, 8];
/// Largest group of Figure 5.1, and most destinations of Figure 5.2.
const MAX_MEMBERS: u32 = 8;
/// The paper's figure for one source and 8 members, in KB/s.
const PAPER_AGGREGATE_KB_S: f64 = 7384.0;

/// One run of the experiment.
#[derive(Clone, Copy)]
enum Job {
    /// Figure 5.1: members, senders.
    Aggregate(&'static str, u32, u32),
    /// Figure 5.2: destinations.
    Separate(&'static str, u32),
}

/// The runs, in table order: Figure 5.1 by members and sources, then Figure 5.2.
fn jobs() -> Vec<Job> {
    let mut v = Vec::new();
    for members in 2..=MAX_MEMBERS {
        for senders in SOURCES.into_iter().filter(|s| *s <= members) {
            for e in ENGINES {
                v.push(Job::Aggregate(e, members, senders));
            }
        }
    }
    for d in 1..=MAX_MEMBERS {
        for e in ENGINES {
            v.push(Job::Separate(e, d));
        }
    }
    v
}

/// The experiment's settings from the command line.
fn setup(args: &SimArgs) -> Setup {
    let d = Setup::default();
    Setup {
        message_bytes: args.message_bytes.unwrap_or(d.message_bytes),
        messages: args.messages.unwrap_or(d.messages),
        bandwidth_mbps: args.bandwidth_mbps.unwrap_or(ETHERNET_MBPS),
        latency_ms: args.latency,
        in_flight: args.in_flight,
        seed: args.seed.unwrap_or(0),
    }
}

/// The RMP experiment (Figures 5.1 and 5.2).
pub fn run(args: &SimArgs, threads: usize) -> anyhow::Result<ExitCode> {
    let setup = setup(args);
    // Every run's scenario is checked before any runs (they differ in members and senders).
    setup
        .scenario(
            rmcast_proto::EngineChoice::sequencer(0),
            MAX_MEMBERS,
            MAX_MEMBERS,
        )
        .validate()
        .map_err(anyhow::Error::msg)?;
    let in_flight = setup
        .in_flight
        .map_or("as many as the engine accepts".to_string(), |k| {
            k.to_string()
        });
    println!(
        "rmcast sim --experiment rmp --messages {} --message-bytes {} --latency {} \
         --bandwidth-mbps {} --seed {}{}",
        setup.messages,
        setup.message_bytes,
        setup.latency_ms,
        setup.bandwidth_mbps,
        setup.seed,
        setup
            .in_flight
            .map_or(String::new(), |k| format!(" --in-flight {k}"))
    );
    println!(
        "one shared {} Mbit/s medium ({:.0} KB/s, 1 KB = 1000 bytes; {} bytes of framing and \
         IP/UDP headers per datagram), {}-byte totally ordered messages, {} per sender, in \
         flight per sender: {in_flight}",
        setup.bandwidth_mbps,
        setup.bandwidth_mbps * 125.0,
        rmcast_sim::config::ETHERNET_FRAME_OVERHEAD_BYTES,
        setup.message_bytes,
        setup.messages,
    );
    let jobs = jobs();
    let points = run_jobs(&setup, &jobs, threads)?;
    let (agg, sep): (Vec<&Point>, Vec<&Point>) = points.iter().partition(|p| !p.source_separate);

    println!(
        "\nFigure 5.1: aggregate throughput, every member a destination (single-sender KB/s: \
         what each destination receives, aggregate / members)"
    );
    print_table(&agg);
    println!(
        "(the paper, 1 source and 8 members on 10 Mb/s Ethernet: {PAPER_AGGREGATE_KB_S:.0} KB/s, \
         {:.2}x the Ethernet)",
        PAPER_AGGREGATE_KB_S / 1250.0
    );
    println!(
        "\nFigure 5.2: single-sender throughput, the source apart from its destinations \
         (a unicast protocol gets at most bandwidth / destinations)"
    );
    print_table(&sep);

    if let Some(path) = &args.plot {
        plot(path, &agg, &sep)?;
        println!("\nfigures written to {}", path.display());
    }
    let bad: Vec<&Point> = points.iter().filter(|p| !p.passed || !p.complete).collect();
    if bad.is_empty() {
        println!("\nevery run delivered everything and passed every checker");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "\n{} run(s) did not deliver everything or failed a checker:",
        bad.len()
    );
    for p in bad.iter().take(args.show_failures) {
        println!(
            "{} with {} members and {} sender(s){}:",
            p.engine,
            p.members,
            p.senders,
            if p.source_separate {
                " (source apart)"
            } else {
                ""
            }
        );
        for line in p.summary.lines().take(6) {
            println!("  {line}");
        }
    }
    Ok(ExitCode::from(1))
}

/// Runs every job on `threads` threads; the points come back in job order.
fn run_jobs(setup: &Setup, jobs: &[Job], threads: usize) -> anyhow::Result<Vec<Point>> {
    run_parallel(jobs, threads, |job| match *job {
        Job::Aggregate(e, m, k) => setup.aggregate(e, m, k),
        Job::Separate(e, d) => setup.separate_source(e, d),
    })
    .into_iter()
    .map(|r| r.map_err(anyhow::Error::msg))
    .collect()
}

fn print_table(points: &[&Point]) {
    println!(
        "{:>7} {:>7} {:>5} {:<10} {:>18} {:>14} {:>16} {:>13} {:>8}  verdict",
        "members",
        "senders",
        "dests",
        "engine",
        "single-sender KB/s",
        "aggregate KB/s",
        "aggregate/medium",
        "datagrams/msg",
        "retrans"
    );
    for p in points {
        let verdict = if p.passed && p.complete {
            "ok".to_string()
        } else if p.failed_checkers.is_empty() {
            "incomplete".to_string()
        } else {
            format!("FAILED {}", p.failed_checkers.join(", "))
        };
        println!(
            "{:>7} {:>7} {:>5} {:<10} {:>18.0} {:>14.0} {:>16.2} {:>13.2} {:>8}  {verdict}",
            p.members,
            p.senders,
            p.destinations,
            p.engine,
            p.per_destination_kb_s,
            p.aggregate_kb_s,
            p.aggregate_ratio(),
            p.datagrams_per_message,
            p.retransmissions
        );
    }
}

/// Both figures side by side: aggregate throughput against the group size per engine and
/// number of sources, with the medium's bandwidth; single-sender throughput against the
/// destinations per engine, with the unicast bound.
fn plot(path: &std::path::Path, agg: &[&Point], sep: &[&Point]) -> anyhow::Result<()> {
    let medium = agg.first().or(sep.first()).map_or(0.0, |p| p.medium_kb_s);
    let mut fig1 = Vec::new();
    for e in ENGINES {
        for k in SOURCES {
            let points: Vec<(f64, f64)> = agg
                .iter()
                .filter(|p| p.engine == e && p.senders == k)
                .map(|p| (p.members as f64, p.aggregate_kb_s))
                .collect();
            if !points.is_empty() {
                let s = if k == 1 { "source" } else { "sources" };
                fig1.push(Series {
                    name: format!("{e}, {k} {s}"),
                    points,
                });
            }
        }
    }
    let limit = [Series {
        name: "medium bandwidth (the unicast limit)".into(),
        points: vec![(2.0, medium), (MAX_MEMBERS as f64, medium)],
    }];
    let fig2: Vec<Series> = ENGINES
        .iter()
        .map(|e| Series {
            name: e.to_string(),
            points: sep
                .iter()
                .filter(|p| p.engine == *e)
                .map(|p| (p.destinations as f64, p.per_destination_kb_s))
                .collect(),
        })
        .collect();
    let bound = [Series {
        name: "unicast bound: bandwidth / N".into(),
        points: (1..=MAX_MEMBERS)
            .map(|n| (n as f64, medium / n as f64))
            .collect(),
    }];
    crate::plot::panels(
        path,
        &[
            Panel {
                title: "Fig. 5.1: aggregate throughput",
                x_label: "group members (senders are destinations too)",
                y_label: "aggregate KB/s",
                series: &fig1,
                references: &limit,
                markers: true,
                legend: SeriesLabelPosition::UpperLeft,
            },
            Panel {
                title: "Fig. 5.2: single-sender throughput",
                x_label: "destinations (the source apart)",
                y_label: "KB/s per destination",
                series: &fig2,
                references: &bound,
                markers: true,
                legend: SeriesLabelPosition::UpperRight,
            },
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runs_cover_both_figures_with_both_engines() {
        let jobs = jobs();
        let agg = jobs
            .iter()
            .filter(|j| matches!(j, Job::Aggregate(..)))
            .count();
        // Members 2..=8 with 1 and 2 sources (7 each), 4 sources (5), 8 sources (1).
        assert_eq!(agg, 20 * ENGINES.len());
        assert_eq!(jobs.len() - agg, 8 * ENGINES.len());
        assert!(jobs
            .iter()
            .all(|j| !matches!(j, Job::Aggregate(_, m, k) if k > m)));
    }
}
