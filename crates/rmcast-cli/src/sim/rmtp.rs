//! `rmcast sim --experiment rmtp`: the measurements of "Reliable Multicast Transport Protocol
//! (RMTP)" (Paul, Sabnani, Lin and Bhattacharyya), Tables IV to VI, in the simulator
//! ([`rmcast_sim::rmtp`]): 18 receivers in five areas, a 1 MB file with Table III's
//! parameters, ten runs (seeds) of each measurement M1 (area A1), M2 (A1 to A4) and M3 (all
//! areas), and M3 again with the DRs switched off. Prints one table per measurement as the
//! paper does (throughput of the slowest, average and fastest receiver; retransmissions by the
//! sender and each DR and duplicates per area in percent of the file; slow starts) and with
//! `--plot FILE` draws the retransmissions of M3 per run, with and without DRs, and the
//! throughput of the three measurements. Under each table, the paper's own table
//! ([`rmcast_sim::rmtp::paper`]) and ours summed up the same way ([`Summary`]): each column's
//! mean over the runs, the range of the runs' average throughput, and the runs in which a DR
//! retransmitted more than the sender.

use super::args::SimArgs;
use crate::plot::{Panel, Series};
use plotters::chart::SeriesLabelPosition;
use rmcast_sim::rmtp::{paper, Measurement, Outcome, Setup, Summary};
use std::io::Write;
use std::process::ExitCode;

/// Runs per measurement (the paper's ten experiments).
const RUNS: u64 = 10;

#[derive(Clone, Copy)]
struct Job {
    m: Measurement,
    drs: bool,
    seed: u64,
}

/// Run the experiment.
pub fn run(args: &SimArgs, threads: usize, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let mut setup = Setup::default();
    if let Some(n) = args.messages {
        setup.packets = n;
    }
    let base = args.seed.unwrap_or(0);
    writeln!(
        out,
        "rmcast sim --experiment rmtp --messages {} --seed {base}: {} packets of {} bytes, \
         W_s {}, T_send {} ms, T_retx {} ms, CONG_thresh {:?}, MCAST_thresh {}",
        setup.packets,
        setup.packets,
        setup.params.packet_size_bytes,
        setup.params.send_window_pkts,
        setup.params.t_send_ms,
        setup.params.t_retx_ms,
        setup.params.cong_thresh,
        setup.params.mcast_thresh
    )?;
    let mut jobs = Vec::new();
    for (m, drs) in [
        (Measurement::M1, true),
        (Measurement::M2, true),
        (Measurement::M3, true),
        (Measurement::M3, false),
    ] {
        for i in 0..RUNS {
            jobs.push(Job {
                m,
                drs,
                seed: base + i,
            });
        }
    }
    let results = super::parallel::run_parallel(&jobs, threads, |j| setup.run(j.m, j.drs, j.seed));
    let mut ok = true;
    let mut tables: Vec<(Measurement, bool, Vec<&Outcome>)> = Vec::new();
    for (j, o) in jobs.iter().zip(&results) {
        ok &= o.passed;
        match tables.last_mut() {
            Some((m, d, v)) if *m == j.m && *d == j.drs => v.push(o),
            _ => tables.push((j.m, j.drs, vec![o])),
        }
    }
    for (m, drs, rows) in &tables {
        print_table(out, *m, *drs, rows)?;
    }
    if let Some(path) = &args.plot {
        plot(path, &tables)?;
        writeln!(out, "plot written to {}", path.display())?;
    }
    if !ok {
        writeln!(
            out,
            "some runs did not deliver the whole file to every receiver"
        )?;
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(
    out: &mut dyn Write,
    m: Measurement,
    drs: bool,
    rows: &[&Outcome],
) -> std::io::Result<()> {
    let areas = m.areas();
    writeln!(out)?;
    writeln!(
        out,
        "{m:?}: areas A1..A{areas}{}",
        if drs { "" } else { ", DRs off" }
    )?;
    let mut head = format!(
        "{:>3} {:>8} {:>8} {:>8} | {:>7}",
        "No.", "min", "avg", "max", "sender"
    );
    if drs {
        for i in 1..=areas {
            head += &format!(" {:>6}", format!("DR{i}"));
        }
    }
    head += " |";
    for i in 1..=areas {
        head += &format!(" {:>6}", format!("A{i}"));
    }
    head += " | slow starts";
    writeln!(
        out,
        "    throughput (kbit/s)         | retransmissions (% of the file) | duplicates (%)"
    )?;
    writeln!(out, "{head}")?;
    for (i, o) in rows.iter().enumerate() {
        let (min, avg, max) = o.throughput_kbps;
        let mut line = format!(
            "{:>3} {min:>8.2} {avg:>8.2} {max:>8.2} | {:>7.2}",
            i + 1,
            o.sender_retx_pct
        );
        for r in &o.dr_retx_pct {
            line += &format!(" {r:>6.2}");
        }
        line += " |";
        for d in &o.dup_pct {
            line += &format!(" {d:>6.2}");
        }
        line += &format!(
            " | {}{}",
            o.slow_starts,
            if o.passed { "" } else { "  FAILED" }
        );
        writeln!(out, "{line}")?;
    }
    let ours = Summary::of(&rows.iter().map(|o| (*o).clone()).collect::<Vec<_>>());
    writeln!(out, "mean throughput: {:.2} kbit/s", ours.mean_kbps)?;
    if !drs {
        writeln!(
            out,
            "(the paper has no run without DRs; ours: {})",
            summary_line(&ours)
        )?;
        return Ok(());
    }
    let (name, table) = paper::table(m);
    let theirs = Summary::of(&table.iter().map(paper::Run::outcome).collect::<Vec<_>>());
    writeln!(
        out,
        "beside the paper's {name} (its 10 runs on the Internet of January 1995), each \
         column's mean over the runs:"
    )?;
    writeln!(out, "  paper: {}", summary_line(&theirs))?;
    writeln!(out, "  ours:  {}", summary_line(&ours))?;
    let above = |s: &Summary| {
        (s.dr_above_sender.iter().enumerate())
            .map(|(i, n)| format!("DR{} {n}", i + 1))
            .collect::<Vec<_>>()
            .join(", ")
    };
    writeln!(
        out,
        "  runs in which a DR retransmitted more than the sender: paper {}; ours {}",
        above(&theirs),
        above(&ours)
    )?;
    Ok(())
}

/// A measurement summed up on one line: mean throughput (the runs' averages from lowest to
/// highest), the largest gap between a run's fastest and slowest receiver, retransmissions,
/// duplicates and slow starts.
fn summary_line(s: &Summary) -> String {
    let cols = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut line = format!(
        "{:.2} kbit/s ({:.2} - {:.2}), receivers within {:.1}% | sender {:.2}",
        s.mean_kbps, s.avg_range_kbps.0, s.avg_range_kbps.1, s.max_spread_pct, s.sender_retx_pct
    );
    if !s.dr_retx_pct.is_empty() {
        line += &format!(", DRs {}", cols(&s.dr_retx_pct));
    }
    line += &format!(
        " | duplicates {} | slow starts {:.1}",
        cols(&s.dup_pct),
        s.slow_starts
    );
    line
}

fn plot(
    path: &std::path::Path,
    tables: &[(Measurement, bool, Vec<&Outcome>)],
) -> anyhow::Result<()> {
    let find = |m: Measurement, drs: bool| {
        tables
            .iter()
            .find(|(x, d, _)| *x == m && *d == drs)
            .map(|(_, _, v)| v.clone())
            .unwrap_or_default()
    };
    let pts = |rows: &[&Outcome], f: &dyn Fn(&Outcome) -> f64| -> Vec<(f64, f64)> {
        rows.iter()
            .enumerate()
            .map(|(i, o)| ((i + 1) as f64, f(o)))
            .collect()
    };
    let m3 = find(Measurement::M3, true);
    let off = find(Measurement::M3, false);
    let mut retx = vec![Series {
        name: "sender".into(),
        points: pts(&m3, &|o| o.sender_retx_pct),
    }];
    for i in 0..m3.first().map_or(0, |o| o.dr_retx_pct.len()) {
        retx.push(Series {
            name: format!("DR{}", i + 1),
            points: pts(&m3, &|o| o.dr_retx_pct[i]),
        });
    }
    retx.push(Series {
        name: "sender, DRs off".into(),
        points: pts(&off, &|o| o.sender_retx_pct),
    });
    let mut tput = Vec::new();
    for (m, name) in [
        (Measurement::M1, "M1 (A1)"),
        (Measurement::M2, "M2 (A1-A4)"),
        (Measurement::M3, "M3 (all areas)"),
    ] {
        tput.push(Series {
            name: name.into(),
            points: pts(&find(m, true), &|o| o.throughput_kbps.1),
        });
    }
    tput.push(Series {
        name: "M3, DRs off".into(),
        points: pts(&off, &|o| o.throughput_kbps.1),
    });
    crate::plot::panels(
        path,
        &[
            Panel {
                title: "RMTP M3: retransmissions (Table VI)",
                x_label: "run",
                y_label: "% of the file",
                series: &retx,
                references: &[],
                markers: true,
                legend: SeriesLabelPosition::UpperRight,
            },
            Panel {
                title: "RMTP: average throughput (Fig. 10)",
                x_label: "run",
                y_label: "kbit/s",
                series: &tput,
                references: &[],
                markers: true,
                legend: SeriesLabelPosition::UpperRight,
            },
        ],
    )
}
