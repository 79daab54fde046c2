//! `rmcast sim --experiment rmp`: the experiments of "RMP: Fault-Tolerant Group
//! Communication" (Whetten, Montgomery, Kaplan), Figures 5.1 to 5.3, in the simulator on one
//! shared 10 Mbit/s medium, with the ring engine (RMP) and the sequencer engine side by side in
//! the same invocation ([`rmcast_sim::experiment`] makes and measures each run). The other
//! experiment, `--experiment pbcast`, is in [`super::pbcast`]; both run on [`run_parallel`].
//!
//! - Figure 5.1: aggregate throughput (payload of all senders times the destinations, the
//!   senders being destinations too) for 2 to 8 members and 1, 2, 4 and 8 sources.
//! - Figure 5.2: single-sender throughput with the source apart from 1 to 8 destinations, beside
//!   the bound of any protocol that sends one unicast per destination (bandwidth / N).
//! - Figure 5.3: latency against the members for 1, 2, 4 and 8 sources, each sender with one
//!   message in flight (the paper ping-pongs a single message); and, for one source, the ring
//!   at source-ordered beside its totally ordered latency (the paper: about half).
//!
//! Prints one table per figure with the paper's values beside ours where its text gives them
//! ([`rmcast_sim::experiment::paper`]), and with `--plot FILE` draws the three figures into one
//! SVG.
//! The exit code is 0 only if every run delivered everything and passed every checker.

use super::args::SimArgs;
use super::parallel::run_parallel;
use crate::plot::{Panel, Series};
use plotters::chart::SeriesLabelPosition;
use rmcast_proto::Qos;
use rmcast_sim::experiment::{paper, Point, Setup, ETHERNET_MBPS};
use std::io::Write;
use std::process::ExitCode;

/// The engines compared, in table order.
const ENGINES: [&str; 2] = ["ring", "sequencer"];
/// Sources of Figure 5.1.
const SOURCES: [u32; 4] = [1, 2, 4, 8];
/// Largest group of Figure 5.1, and most destinations of Figure 5.2.
const MAX_MEMBERS: u32 = 8;
/// The lower quality of service Figure 5.3 sets beside total order (the paper: a totally
/// ordered packet takes about twice as long as a source-ordered one).
const LOWER_QOS: Qos = Qos::SourceOrdered;

/// One run of the experiment.
#[derive(Clone, Copy)]
enum Job {
    /// Figure 5.1: members, senders.
    Aggregate(&'static str, u32, u32),
    /// Figure 5.2: destinations.
    Separate(&'static str, u32),
    /// Figure 5.3: members, senders, every message at this quality of service (`None`: the
    /// strongest the engine serves, total order).
    Latency(&'static str, u32, u32, Option<Qos>),
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
    for members in 2..=MAX_MEMBERS {
        for senders in SOURCES.into_iter().filter(|s| *s <= members) {
            for e in ENGINES {
                v.push(Job::Latency(e, members, senders, None));
            }
            if senders == 1 {
                v.push(Job::Latency("ring", members, 1, Some(LOWER_QOS)));
            }
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

/// The RMP experiment (Figures 5.1 to 5.3).
pub fn run(args: &SimArgs, threads: usize, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let setup = setup(args);
    // Every run's scenario is checked before any runs (they differ in members and senders).
    setup
        .scenario(
            rmcast_proto::EngineChoice::sequencer(0),
            MAX_MEMBERS,
            MAX_MEMBERS,
            None,
        )
        .validate()
        .map_err(anyhow::Error::msg)?;
    let in_flight = setup
        .in_flight
        .map_or("as many as the engine accepts".to_string(), |k| {
            k.to_string()
        });
    writeln!(
        out,
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
    )?;
    writeln!(
        out,
        "one shared {} Mbit/s medium ({:.0} KB/s, 1 KB = 1000 bytes; {} bytes of framing and \
         IP/UDP headers per datagram), {}-byte totally ordered messages, {} per sender, in \
         flight per sender: {in_flight}",
        setup.bandwidth_mbps,
        setup.bandwidth_mbps * 125.0,
        rmcast_sim::config::ETHERNET_FRAME_OVERHEAD_BYTES,
        setup.message_bytes,
        setup.messages,
    )?;
    let jobs = jobs();
    let points = run_jobs(&setup, &jobs, threads)?;
    let pick = |want: fn(&Job) -> bool| -> Vec<&Point> {
        (jobs.iter().zip(&points))
            .filter(|(j, _)| want(j))
            .map(|(_, p)| p)
            .collect()
    };
    let agg = pick(|j| matches!(j, Job::Aggregate(..)));
    let sep = pick(|j| matches!(j, Job::Separate(..)));
    let lat = pick(|j| matches!(j, Job::Latency(..)));

    writeln!(
        out,
        "\nFigure 5.1: aggregate throughput, every member a destination (single-sender KB/s: \
         what each destination receives, aggregate / members)"
    )?;
    print_table(out, &agg)?;
    let ours = |engine: &str, points: &[&Point], members: u32, senders: u32| {
        points
            .iter()
            .find(|p| p.engine == engine && p.members == members && p.senders == senders)
            .map(|p| p.aggregate_kb_s)
    };
    writeln!(
        out,
        "(the paper, 1 source and 8 members on 10 Mb/s Ethernet: {:.0} KB/s, {:.2}x the \
         Ethernet; ours: ring {}, sequencer {})",
        paper::AGGREGATE_1_SOURCE_8_MEMBERS_KB_S,
        paper::AGGREGATE_1_SOURCE_8_MEMBERS_KB_S / 1250.0,
        kb_s(ours("ring", &agg, MAX_MEMBERS, 1)),
        kb_s(ours("sequencer", &agg, MAX_MEMBERS, 1)),
    )?;
    writeln!(
        out,
        "\nFigure 5.2: single-sender throughput, the source apart from its destinations \
         (a unicast protocol gets at most bandwidth / destinations)"
    )?;
    print_table(out, &sep)?;
    let to_one = |engine: &str| {
        sep.iter()
            .find(|p| p.engine == engine && p.destinations == 1)
            .map(|p| p.per_destination_kb_s)
    };
    writeln!(
        out,
        "(the paper: {:.0} KB/s to one destination, \"roughly constant\" as destinations are \
         added; ours to one destination: ring {}, sequencer {})",
        paper::ONE_DESTINATION_KB_S,
        kb_s(to_one("ring")),
        kb_s(to_one("sequencer")),
    )?;
    writeln!(
        out,
        "\nFigure 5.3: latency, each sender with one message in flight; from submit to the \
         delivery at each other member, median and 99th percentile (ms)"
    )?;
    print_latency(out, &lat)?;
    let one_dest = |engine: &str, qos: Option<Qos>| {
        lat.iter()
            .find(|p| p.engine == engine && p.members == 2 && p.senders == 1 && p.qos == qos)
            .map(|p| p.latency_p50_ms)
    };
    let ratios: Vec<String> = (2..=MAX_MEMBERS)
        .filter_map(|n| {
            let at = |qos| {
                lat.iter()
                    .find(|p| {
                        p.engine == "ring" && p.members == n && p.senders == 1 && p.qos == qos
                    })
                    .map(|p| p.latency_p50_ms)
            };
            Some(format!("{:.2}", at(None)? / at(Some(LOWER_QOS))?))
        })
        .collect();
    writeln!(
        out,
        "(the paper: {:.1} ms for a totally ordered packet to one destination, the curve \
         \"almost constant\" in the members; a totally ordered packet about {:.0}x a \
         source-ordered one. Ours to one destination: ring {} ms, sequencer {} ms; ring \
         totally ordered / source-ordered, 2 to {MAX_MEMBERS} members, one source: {})",
        paper::ONE_DESTINATION_LATENCY_MS,
        paper::TOTAL_OVER_SOURCE_ORDERED_LATENCY,
        ms(one_dest("ring", None)),
        ms(one_dest("sequencer", None)),
        ratios.join(", "),
    )?;

    if let Some(path) = &args.plot {
        plot(path, &agg, &sep, &lat)?;
        writeln!(out, "\nfigures written to {}", path.display())?;
    }
    let bad: Vec<&Point> = points.iter().filter(|p| !p.passed || !p.complete).collect();
    if bad.is_empty() {
        writeln!(
            out,
            "\nevery run delivered everything and passed every checker"
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "\n{} run(s) did not deliver everything or failed a checker:",
        bad.len()
    )?;
    for p in bad.iter().take(args.show_failures) {
        writeln!(
            out,
            "{} with {} members and {} sender(s){}{}:",
            label(p),
            p.members,
            p.senders,
            if p.source_separate {
                " (source apart)"
            } else {
                ""
            },
            p.in_flight
                .map_or(String::new(), |k| format!(", {k} in flight"))
        )?;
        for line in p.summary.lines().take(6) {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(ExitCode::from(1))
}

/// Runs every job on `threads` threads; the points come back in job order.
fn run_jobs(setup: &Setup, jobs: &[Job], threads: usize) -> anyhow::Result<Vec<Point>> {
    run_parallel(jobs, threads, |job| match *job {
        Job::Aggregate(e, m, k) => setup.aggregate(e, m, k),
        Job::Separate(e, d) => setup.separate_source(e, d),
        Job::Latency(e, m, k, qos) => setup.latency(e, m, k, qos),
    })
    .into_iter()
    .map(|r| r.map_err(anyhow::Error::msg))
    .collect()
}

fn print_table(out: &mut dyn Write, points: &[&Point]) -> std::io::Result<()> {
    writeln!(
        out,
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
    )?;
    for p in points {
        let verdict = verdict(p);
        writeln!(
            out,
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
        )?;
    }
    Ok(())
}

/// A throughput for the paper's lines, or why there is none.
fn kb_s(v: Option<f64>) -> String {
    v.map_or("not run".into(), |v| format!("{v:.0} KB/s"))
}

/// A latency for the paper's lines, or why there is none.
fn ms(v: Option<f64>) -> String {
    v.map_or("not run".into(), |v| format!("{v:.2}"))
}

/// The engine and, below total order, the quality of service of a point.
fn label(p: &Point) -> String {
    match p.qos {
        None => p.engine.clone(),
        Some(q) => format!("{} ({q})", p.engine),
    }
}

/// Figure 5.3's table.
fn print_latency(out: &mut dyn Write, points: &[&Point]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:>7} {:>7} {:<26} {:>8} {:>8} {:>13} {:>8} {:>6}  verdict",
        "members", "senders", "engine", "p50 ms", "p99 ms", "datagrams/msg", "retrans", "drops"
    )?;
    for p in points {
        writeln!(
            out,
            "{:>7} {:>7} {:<26} {:>8.2} {:>8.2} {:>13.2} {:>8} {:>6}  {}",
            p.members,
            p.senders,
            label(p),
            p.latency_p50_ms,
            p.latency_p99_ms,
            p.datagrams_per_message,
            p.retransmissions,
            p.drops,
            verdict(p)
        )?;
    }
    Ok(())
}

/// A point's verdict column.
fn verdict(p: &Point) -> String {
    if p.passed && p.complete {
        "ok".to_string()
    } else if p.failed_checkers.is_empty() {
        "incomplete".to_string()
    } else {
        format!("FAILED {}", p.failed_checkers.join(", "))
    }
}

/// The three figures side by side: aggregate throughput against the group size per engine and
/// number of sources, with the medium's bandwidth; single-sender throughput against the
/// destinations per engine, with the unicast bound.
fn plot(
    path: &std::path::Path,
    agg: &[&Point],
    sep: &[&Point],
    lat: &[&Point],
) -> anyhow::Result<()> {
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
    let mut fig3 = Vec::new();
    for k in SOURCES {
        let mut labels: Vec<String> = lat
            .iter()
            .filter(|p| p.senders == k)
            .map(|p| label(p))
            .collect();
        labels.dedup();
        labels.sort();
        labels.dedup();
        for l in labels {
            let s = if k == 1 { "source" } else { "sources" };
            fig3.push(Series {
                name: format!("{l}, {k} {s}"),
                points: lat
                    .iter()
                    .filter(|p| p.senders == k && label(p) == l)
                    .map(|p| (p.members as f64, p.latency_p50_ms))
                    .collect(),
            });
        }
    }
    let paper_latency = [Series {
        name: format!(
            "the paper: {:.1} ms to one destination, \"almost constant\"",
            paper::ONE_DESTINATION_LATENCY_MS
        ),
        points: vec![
            (2.0, paper::ONE_DESTINATION_LATENCY_MS),
            (MAX_MEMBERS as f64, paper::ONE_DESTINATION_LATENCY_MS),
        ],
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
            Panel {
                title: "Fig. 5.3: latency, one message in flight per sender",
                x_label: "group members (senders are destinations too)",
                y_label: "median ms, submit to delivery",
                series: &fig3,
                references: &paper_latency,
                markers: true,
                legend: SeriesLabelPosition::UpperLeft,
            },
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runs_cover_the_three_figures_with_both_engines() {
        let jobs = jobs();
        let count = |want: fn(&Job) -> bool| jobs.iter().filter(|j| want(j)).count();
        let agg = count(|j| matches!(j, Job::Aggregate(..)));
        // Members 2..=8 with 1 and 2 sources (7 each), 4 sources (5), 8 sources (1).
        assert_eq!(agg, 20 * ENGINES.len());
        assert_eq!(count(|j| matches!(j, Job::Separate(..))), 8 * ENGINES.len());
        // Figure 5.3: the grid of Figure 5.1, and the ring at the lower QoS for one source.
        assert_eq!(
            count(|j| matches!(j, Job::Latency(_, _, _, None))),
            20 * ENGINES.len()
        );
        assert_eq!(
            count(|j| matches!(j, Job::Latency("ring", _, 1, Some(LOWER_QOS)))),
            7
        );
        assert_eq!(jobs.len(), 48 * ENGINES.len() + 7);
        assert!(jobs
            .iter()
            .all(|j| !matches!(j, Job::Aggregate(_, m, k) if k > m)));
    }
}
