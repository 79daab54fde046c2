//! `rmcast sim --experiment txn`: the measurements of "The Multidriver: A Reliable Multicast
//! Service Using the Xpress Transfer Protocol" (Dempsey, Fenton and Weaver), section 5, in the
//! simulator ([`rmcast_sim::multidriver`]): Table 1 (a 350,000-byte file by one multicast
//! transaction beside a series of unicast ones), Tables 2-3 (the round trip of a 1-byte
//! transaction beside a series of unicast round trips) and the implosion control of section
//! 5.2, with the paper's values beside ours ([`rmcast_sim::multidriver::paper`]). With
//! `--plot FILE`, Tables 1 and 2 as an SVG. The same on real processes: `rmcast txn-bench`.

use super::args::SimArgs;
use super::parallel::run_parallel;
use crate::plot::{Panel, Series};
use plotters::chart::SeriesLabelPosition;
use rmcast_sim::multidriver::{paper, Job, Measured, FILE_BYTES, RECEIVERS, ROUND_TRIPS};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// The implosion runs: a label, the backoff unit, and whether every packet is answered after
/// a backoff (the use-backoff flag) or only the first.
const IMPLOSION: [(&str, Duration, bool); 3] = [
    ("backoff off", Duration::ZERO, false),
    (
        "backoff 500 us (first packet)",
        Duration::from_micros(500),
        false,
    ),
    (
        "backoff 500 us (use-backoff)",
        Duration::from_micros(500),
        true,
    ),
];

fn jobs() -> Vec<Job> {
    let mut v = vec![Job::UnicastFile];
    v.extend(RECEIVERS.map(Job::File));
    v.push(Job::UnicastLatency);
    v.extend(RECEIVERS.map(Job::Latency));
    v.extend(IMPLOSION.map(|(_, unit, every)| Job::Implosion(unit, every)));
    v
}

/// A paper's value, or a dash where it has none.
fn or_dash(v: Option<f64>, decimals: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.decimals$}"))
}

/// Runs the experiment on `threads` threads.
pub fn run(args: &SimArgs, threads: usize, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    writeln!(out, "rmcast sim --experiment txn")?;
    writeln!(
        out,
        "the txn engine on one shared 4 Mbit/s medium (the paper's ProNET-4 token ring, \
         charged Ethernet framing), 100 us latency, every receiver answering each transaction \
         with one byte; virtual time, deterministic"
    )?;
    let jobs = jobs();
    let results: Vec<Measured> = run_parallel(&jobs, threads, |j| j.run());
    let find = |job: Job| results.iter().find(|m| m.job == job);
    let mut ok = results
        .iter()
        .filter(|m| !matches!(m.job, Job::Implosion(..)))
        .all(|m| m.completed == m.sent && m.sent > 0);
    let bits = FILE_BYTES as f64 * 8.0;

    writeln!(
        out,
        "\nTable 1: a {FILE_BYTES}-byte file, one multicast transaction beside a series of \
         unicast ones (series / multicast: the series' throughput over the multicast's; below \
         1, multicast is faster)"
    )?;
    writeln!(
        out,
        "{:>9} {:>11} {:>14} {:>11} {:>15} | {:>21} {:>15}",
        "receivers",
        "multicast",
        "multicast kb/s",
        "series ms",
        "series/mcast",
        "paper multicast kb/s",
        "paper series/mcast"
    )?;
    let unicast_ms = find(Job::UnicastFile).map_or(0.0, |m| m.completed_ms);
    for n in RECEIVERS {
        let Some(m) = find(Job::File(n)) else {
            continue;
        };
        let series = unicast_ms * f64::from(n);
        let paper_kbps = paper::TABLE_1_KBPS
            .iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| *v);
        writeln!(
            out,
            "{n:>9} {:>8.0} ms {:>14.1} {:>11.0} {:>15.2} | {:>21} {:>15}",
            m.completed_ms,
            bits / m.completed_ms,
            series,
            m.completed_ms / series.max(1e-9),
            or_dash(paper_kbps, 1),
            or_dash(paper::series_over_multicast(n), 2),
        )?;
    }
    writeln!(
        out,
        "(unicast to one receiver: ours {:.1} kbit/s, the paper's {:.1} kbit/s; its receivers \
         were PCs of different speeds, ours are all alike)",
        bits / unicast_ms.max(1e-9),
        paper::UNICAST_KBPS
    )?;

    writeln!(
        out,
        "\nTables 2-3: a 1-byte transaction, mean of {ROUND_TRIPS}: to its commit and to the \
         last reply, beside a series of unicast round trips (ms; series / multicast: the \
         series' time over the last reply's; above 1, multicast is faster)"
    )?;
    writeln!(
        out,
        "{:>9} {:>9} {:>13} {:>11} {:>13} | {:>15} {:>13} {:>18}",
        "receivers",
        "commit",
        "last reply",
        "series",
        "series/mcast",
        "paper multicast",
        "paper series",
        "paper series/mcast"
    )?;
    let unicast_rtt = find(Job::UnicastLatency).map_or(0.0, |m| m.answered_ms);
    for n in RECEIVERS {
        let Some(m) = find(Job::Latency(n)) else {
            continue;
        };
        ok &= m.answered == m.sent;
        let series = unicast_rtt * f64::from(n);
        let paper_ms = paper::TABLE_2_MS
            .iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| *v);
        writeln!(
            out,
            "{n:>9} {:>9.3} {:>13.3} {:>11.3} {:>13.2} | {:>15} {:>13} {:>18}",
            m.completed_ms,
            m.answered_ms,
            series,
            series / m.answered_ms.max(1e-9),
            or_dash(paper_ms, 1),
            or_dash(paper::series_ms(n), 2),
            or_dash(paper_ms.zip(paper::series_ms(n)).map(|(m, s)| s / m), 2),
        )?;
    }
    writeln!(
        out,
        "(a unicast round trip: ours {unicast_rtt:.3} ms, the paper's {:.2} ms to its fastest \
         receiver, ten times below its multicast's; the paper expected multicast to win only \
         beyond 8-10 receivers)",
        paper::TABLE_3_MS[0]
    )?;

    writeln!(
        out,
        "\nImplosion (section 5.2): 16 receivers answering at once on a switched network, the \
         sender's receive buffer 8 datagrams, 20 transactions (the paper saw none on its \
         testbed of five)"
    )?;
    for (label, unit, every) in IMPLOSION {
        let Some(m) = find(Job::Implosion(unit, every)) else {
            continue;
        };
        writeln!(
            out,
            "  {label:<30} {:>5} datagrams dropped at the receive buffer, {:>2} of {} \
             answered by all, round trip {:.3} ms",
            m.rx_drops, m.answered, m.sent, m.answered_ms
        )?;
    }

    if let Some(path) = &args.plot {
        plot(path, &results, unicast_ms, unicast_rtt)?;
        writeln!(out, "\nfigure written to {}", path.display())?;
    }
    if ok {
        writeln!(
            out,
            "\nevery transaction of Tables 1-3 committed and was answered by every receiver"
        )?;
        Ok(ExitCode::SUCCESS)
    } else {
        writeln!(
            out,
            "\nnot every transaction of Tables 1-3 committed or was answered by every receiver"
        )?;
        Ok(ExitCode::from(1))
    }
}

/// Table 1's throughput and Table 2's round trip against the receivers, ours and the paper's.
fn plot(
    path: &std::path::Path,
    results: &[Measured],
    unicast_ms: f64,
    unicast_rtt: f64,
) -> anyhow::Result<()> {
    let bits = FILE_BYTES as f64 * 8.0;
    let ours = |f: &dyn Fn(&Measured) -> Option<(f64, f64)>| -> Vec<(f64, f64)> {
        results.iter().filter_map(f).collect()
    };
    let t1 = [
        Series {
            name: "ours: one multicast transaction".into(),
            points: ours(&|m| match m.job {
                Job::File(n) => Some((f64::from(n), bits / m.completed_ms)),
                _ => None,
            }),
        },
        Series {
            name: "ours: a series of unicasts".into(),
            points: RECEIVERS
                .iter()
                .map(|&n| (f64::from(n), bits / unicast_ms.max(1e-9) / f64::from(n)))
                .collect(),
        },
    ];
    let t1_paper = [
        Series {
            name: "the paper: multicast (Table 1)".into(),
            points: paper::TABLE_1_KBPS
                .iter()
                .map(|&(n, v)| (f64::from(n), v))
                .collect(),
        },
        Series {
            name: "the paper: a series of unicasts".into(),
            points: (1..=5u32)
                .map(|n| (f64::from(n), paper::UNICAST_KBPS / f64::from(n)))
                .collect(),
        },
    ];
    let t2 = [
        Series {
            name: "ours: one transaction, last reply".into(),
            points: ours(&|m| match m.job {
                Job::Latency(n) => Some((f64::from(n), m.answered_ms)),
                _ => None,
            }),
        },
        Series {
            name: "ours: a series of unicast round trips".into(),
            points: RECEIVERS
                .iter()
                .map(|&n| (f64::from(n), unicast_rtt * f64::from(n)))
                .collect(),
        },
    ];
    let t2_paper = [
        Series {
            name: "the paper: multicast (Table 2)".into(),
            points: paper::TABLE_2_MS
                .iter()
                .map(|&(n, v)| (f64::from(n), v))
                .collect(),
        },
        Series {
            name: "the paper: a series of unicasts (Table 3)".into(),
            points: (1..=5u32)
                .filter_map(|n| Some((f64::from(n), paper::series_ms(n)?)))
                .collect(),
        },
    ];
    crate::plot::panels(
        path,
        &[
            Panel {
                title: "Multidriver Table 1: a 350,000-byte file",
                x_label: "receivers",
                y_label: "kbit/s",
                series: &t1,
                references: &t1_paper,
                markers: true,
                legend: SeriesLabelPosition::UpperRight,
            },
            Panel {
                title: "Multidriver Tables 2-3: a 1-byte transaction",
                x_label: "receivers",
                y_label: "round trip, ms",
                series: &t2,
                references: &t2_paper,
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
    fn the_runs_cover_the_three_tables_and_implosion() {
        let jobs = jobs();
        let count = |want: fn(&Job) -> bool| jobs.iter().filter(|j| want(j)).count();
        assert_eq!(count(|j| matches!(j, Job::File(_))), RECEIVERS.len());
        assert_eq!(count(|j| matches!(j, Job::Latency(_))), RECEIVERS.len());
        assert_eq!(count(|j| matches!(j, Job::Implosion(..))), IMPLOSION.len());
        assert_eq!(
            count(|j| matches!(j, Job::UnicastFile | Job::UnicastLatency)),
            2
        );
    }
}
