//! `rmcast sim --experiment amoeba`: the measurements of "Efficient Reliable Group
//! Communication for Distributed Systems" (Kaashoek and Tanenbaum), section 6.2, Figures 21 and
//! 23-28, in the simulator with the paper's machine ([`rmcast_sim::amoeba`]: a shared 10 Mbit/s
//! Ethernet, 32-packet interface buffers, 800 µs of processor per received datagram, a history
//! of 128 messages), the sequencer engine by the PB and by the BB method.
//!
//! Prints one table per figure with the paper's values beside ours where its text gives them,
//! and with `--plot FILE` draws the six figures into one SVG. The exit code is 0 only if every
//! run delivered everything and passed every checker.

use super::args::SimArgs;
use super::parallel::run_parallel;
use crate::plot::{Panel, Series};
use plotters::chart::SeriesLabelPosition;
use rmcast_sim::amoeba::{paper, Method, Point, Setup, PAPER_SIZES};
use std::io::Write;
use std::process::ExitCode;

/// Group sizes of Figures 21 and 23-25 (the paper's machines: up to 30).
const GROUPS: [u32; 8] = [2, 4, 8, 12, 16, 20, 24, 30];
/// Message sizes of the throughput figures (the paper could not measure 8,000 bytes there).
const THROUGHPUT_SIZES: [usize; 4] = [0, 1024, 2048, 4096];
/// Resilience degrees of Figures 27 and 28 (group size r + 1).
const RESILIENCE: [u8; 8] = [1, 2, 3, 5, 7, 9, 11, 15];
/// Message sizes of Figures 27 and 28.
const RESILIENCE_SIZES: [usize; 3] = [0, 1024, 4096];
const METHODS: [Method; 2] = [Method::Pb, Method::Bb];
/// Figure 26: sizes of the parallel groups, and how many such groups at most (the paper had
/// machines for up to 3 groups of 8; 6 groups of 2 show where its curve turns).
const PARALLEL: [(u32, u32); 3] = [(2, 6), (4, 6), (8, 3)];

/// Figure 26's runs: (groups, members of each), every member sending 0-byte messages by PB.
fn parallel_jobs() -> Vec<(u32, u32)> {
    (PARALLEL.iter())
        .flat_map(|&(size, most)| (1..=most).map(move |k| (k, size)))
        .collect()
}

/// The runs of one form of the experiment: group sizes, message sizes, resilience degrees.
pub(crate) struct Grid {
    /// Group sizes of Figures 21 and 23-25.
    pub groups: &'static [u32],
    /// Message sizes of Figures 21 and 23.
    pub delay_sizes: &'static [usize],
    /// Message sizes of Figures 24 and 25.
    pub throughput_sizes: &'static [usize],
    /// Resilience degrees of Figures 27 and 28 (group size r + 1).
    pub resilience: &'static [u8],
    /// Message sizes of Figures 27 and 28.
    pub resilience_sizes: &'static [usize],
    /// Whether the tables give the retransmissions (the simulator counts them per run).
    pub retransmissions: bool,
}

/// The simulator's grid: the paper's group sizes, message sizes and resilience degrees.
const SIM_GRID: Grid = Grid {
    groups: &GROUPS,
    delay_sizes: &PAPER_SIZES,
    throughput_sizes: &THROUGHPUT_SIZES,
    resilience: &RESILIENCE,
    resilience_sizes: &RESILIENCE_SIZES,
    retransmissions: true,
};

/// One run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Job {
    /// Figures 21, 23, 27, 28: method, members, r, bytes.
    Delay(Method, u32, u8, usize),
    /// Figures 24, 25: method, members (all sending), bytes.
    Throughput(Method, u32, usize),
}

/// Every run of `grid`, both methods.
pub(crate) fn jobs(grid: &Grid) -> Vec<Job> {
    let mut v = Vec::new();
    for m in METHODS {
        for &b in grid.delay_sizes {
            for &n in grid.groups {
                v.push(Job::Delay(m, n, 0, b));
            }
        }
    }
    for m in METHODS {
        for &b in grid.throughput_sizes {
            for &n in grid.groups {
                v.push(Job::Throughput(m, n, b));
            }
        }
    }
    for m in METHODS {
        for &b in grid.resilience_sizes {
            for &r in grid.resilience {
                v.push(Job::Delay(m, u32::from(r) + 1, r, b));
            }
        }
    }
    v
}

fn setup(args: &SimArgs) -> Setup {
    let d = Setup::default();
    Setup {
        messages: args.messages.unwrap_or(d.messages),
        bandwidth_mbps: args.bandwidth_mbps.unwrap_or(d.bandwidth_mbps),
        seed: args.seed.unwrap_or(0),
        ..d
    }
}

/// The Amoeba experiment.
pub fn run(args: &SimArgs, threads: usize, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let setup = setup(args);
    if setup.messages == 0 {
        anyhow::bail!("--messages must be at least 1");
    }
    setup
        .scenario(Method::Pb, 0, 30, 30, 8000)
        .validate()
        .map_err(anyhow::Error::msg)?;
    writeln!(
        out,
        "rmcast sim --experiment amoeba --messages {} --bandwidth-mbps {} --seed {}",
        setup.messages, setup.bandwidth_mbps, setup.seed
    )?;
    writeln!(
        out,
        "one shared {} Mbit/s Ethernet, {} us of processor per received datagram, {}-packet \
         interface buffers, a history of {} messages; {} messages per sender, one at a time",
        setup.bandwidth_mbps,
        setup.cost.per_datagram.as_micros(),
        setup.rx_buffer,
        rmcast_sim::amoeba::PAPER_HISTORY,
        setup.messages
    )?;
    let jobs = jobs(&SIM_GRID);
    let points: Vec<Point> = run_parallel(&jobs, threads, |j| match *j {
        Job::Delay(m, n, r, b) => setup.delay(m, n, r, b),
        Job::Throughput(m, n, b) => setup.throughput(m, n, b),
    })
    .into_iter()
    .map(|r| r.map_err(anyhow::Error::msg))
    .collect::<anyhow::Result<_>>()?;
    let pairs: Vec<(Job, &Point)> = jobs.iter().copied().zip(&points).collect();
    let parallel: Vec<Point> = run_parallel(&parallel_jobs(), threads, |&(k, n)| {
        setup.parallel(Method::Pb, k, n, 0)
    })
    .into_iter()
    .map(|r| r.map_err(anyhow::Error::msg))
    .collect::<anyhow::Result<_>>()?;
    report(out, &pairs, &parallel, &SIM_GRID, args.plot.as_deref())?;
    let bad: Vec<&Point> = (points.iter().chain(&parallel))
        .filter(|p| !p.passed || !p.complete)
        .collect();
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
            "{} with {} members, {} sender(s), r = {}, {} bytes:",
            p.method, p.members, p.senders, p.r, p.message_bytes
        )?;
        for line in p.summary.lines().take(6) {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(ExitCode::from(1))
}

/// The tables of Figures 21, 23-25 and 27-28 of `pairs` (and of Figure 26 of `parallel`,
/// where there are any) with the paper's values beside them, and with `plot_path` the figures
/// as one SVG: shared by the simulator's form and the real processes' (`rmcast bench
/// --experiment amoeba`).
pub(crate) fn report(
    out: &mut dyn Write,
    pairs: &[(Job, &Point)],
    parallel: &[Point],
    grid: &Grid,
    plot_path: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let delay = |m: Method, r0: bool| -> Vec<&Point> {
        (pairs.iter())
            .filter(|(j, _)| matches!(j, Job::Delay(jm, _, r, _) if *jm == m && (*r == 0) == r0))
            .map(|(_, p)| *p)
            .collect()
    };
    let thr = |m: Method| -> Vec<&Point> {
        (pairs.iter())
            .filter(|(j, _)| matches!(j, Job::Throughput(jm, ..) if *jm == m))
            .map(|(_, p)| *p)
            .collect()
    };
    for (fig, m) in [(21, Method::Pb), (23, Method::Bb)] {
        writeln!(
            out,
            "\nFigure {fig}: delay of one sender's SendToGroup, {m} method, r = 0 (ms)"
        )?;
        print_grid(
            out,
            grid,
            &delay(m, true),
            grid.delay_sizes,
            |p| p.members,
            |p| p.delay_ms,
        )?;
    }
    writeln!(
        out,
        "(the paper, PB: {:.1} ms for 0 bytes in a group of 2, {:.1} ms in a group of 30; \
         8,000 bytes add about {:.0} ms; BB: 0 bytes alike, large messages far better)",
        paper::DELAY_0B_2_MS,
        paper::DELAY_0B_30_MS,
        paper::PB_8000B_EXTRA_MS
    )?;
    for (fig, m) in [(24, Method::Pb), (25, Method::Bb)] {
        writeln!(
            out,
            "\nFigure {fig}: messages a second, every member sending, {m} method"
        )?;
        print_grid(
            out,
            grid,
            &thr(m),
            grid.throughput_sizes,
            |p| p.members,
            |p| p.throughput,
        )?;
    }
    writeln!(
        out,
        "(the paper: at most {:.0} 0-byte messages a second; the sequencer's 800 us a message \
         bound it by 1,250)",
        paper::MAX_THROUGHPUT
    )?;
    if !parallel.is_empty() {
        print_parallel(out, parallel, grid.retransmissions)?;
    }
    for (fig, m) in [(27, Method::Pb), (28, Method::Bb)] {
        writeln!(
            out,
            "\nFigure {fig}: delay against the resilience degree r (group r + 1), {m} (ms)"
        )?;
        print_grid(
            out,
            grid,
            &delay(m, false),
            grid.resilience_sizes,
            |p| u32::from(p.r),
            |p| p.delay_ms,
        )?;
    }
    writeln!(
        out,
        "(the paper, PB, 0 bytes: {:.1} ms at r = 1, {:.1} ms at r = 15: about 600 us an \
         acknowledgement)",
        paper::DELAY_R1_MS,
        paper::DELAY_R15_MS
    )?;
    if let Some(path) = plot_path {
        plot(path, pairs, parallel, grid)?;
        writeln!(out, "\nfigures written to {}", path.display())?;
    }
    Ok(())
}

/// Figure 26: one row per number of groups, one column per group size; total messages a
/// second of all the groups. `simulated`: the simulator's Ethernet (its retransmissions and
/// the model's note), else real processes on this host.
fn print_parallel(out: &mut dyn Write, parallel: &[Point], simulated: bool) -> std::io::Result<()> {
    let groups = |p: &Point| p.senders / p.members.max(1);
    let mut sizes: Vec<u32> = parallel.iter().map(|p| p.members).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut rows: Vec<u32> = parallel.iter().map(groups).collect();
    rows.sort_unstable();
    rows.dedup();
    writeln!(
        out,
        "\nFigure 26: total messages a second of groups side by side, every member sending \
         0-byte messages, PB method"
    )?;
    write!(out, "{:>8}", "groups")?;
    for size in &sizes {
        write!(out, " {:>10}", format!("of {size}"))?;
    }
    writeln!(out, "{}", if simulated { "  retrans" } else { "" })?;
    for k in rows {
        write!(out, "{k:>8}")?;
        let mut retrans = 0;
        for &size in &sizes {
            match (parallel.iter()).find(|p| p.members == size && groups(p) == k) {
                Some(p) => {
                    retrans += p.retransmissions;
                    let mark = if p.passed && p.complete { "" } else { "!" };
                    write!(out, " {:>10}", format!("{:.0}{mark}", p.throughput))?;
                }
                None => write!(out, " {:>10}", "-")?,
            }
        }
        if simulated {
            write!(out, "  {retrans:>7}")?;
        }
        writeln!(out)?;
    }
    writeln!(
        out,
        "(the paper: at most {:.0} a second, with 5 groups of 2 on one Ethernet, then falling, \
         which it puts down to collisions; groups of 8 lower still. {})",
        paper::MAX_PARALLEL,
        if simulated {
            "The model has no collisions: one frame on the medium at a time, in turn"
        } else {
            "Here every group shares this host's cores and its loopback"
        }
    )
}

/// A table: one row per `row(p)` (group size or r), one column per message size.
fn print_grid(
    out: &mut dyn Write,
    grid: &Grid,
    points: &[&Point],
    sizes: &[usize],
    row: impl Fn(&Point) -> u32,
    value: impl Fn(&Point) -> f64,
) -> std::io::Result<()> {
    let mut rows: Vec<u32> = points.iter().map(|p| row(p)).collect();
    rows.dedup();
    rows.sort_unstable();
    rows.dedup();
    write!(out, "{:>8}", "")?;
    for b in sizes {
        write!(out, " {:>10}", format!("{b} B"))?;
    }
    if grid.retransmissions {
        write!(out, "  retrans")?;
    }
    writeln!(out)?;
    for r in rows {
        write!(out, "{r:>8}")?;
        let mut retrans = 0;
        for b in sizes {
            match points.iter().find(|p| row(p) == r && p.message_bytes == *b) {
                Some(p) => {
                    retrans += p.retransmissions;
                    let mark = if p.passed && p.complete { "" } else { "!" };
                    write!(out, " {:>10}", format!("{:.2}{mark}", value(p)))?;
                }
                None => write!(out, " {:>10}", "-")?,
            }
        }
        if grid.retransmissions {
            write!(out, "  {retrans:>7}")?;
        }
        writeln!(out)?;
    }
    Ok(())
}

fn series(
    pairs: &[(Job, &Point)],
    keep: impl Fn(&Job) -> bool,
    sizes: &[usize],
    x: impl Fn(&Point) -> f64,
    y: impl Fn(&Point) -> f64,
) -> Vec<Series> {
    sizes
        .iter()
        .map(|b| Series {
            name: format!("{b} bytes"),
            points: (pairs.iter())
                .filter(|(j, p)| keep(j) && p.message_bytes == *b)
                .map(|(_, p)| (x(p), y(p)))
                .collect(),
        })
        .collect()
}

/// The six figures, two rows of three: delay (21, 23), throughput (24, 25), resilience (27, 28);
/// the paper's values from its text as reference points.
fn plot(
    path: &std::path::Path,
    pairs: &[(Job, &Point)],
    parallel: &[Point],
    grid: &Grid,
) -> anyhow::Result<()> {
    let members = |p: &Point| f64::from(p.members);
    let r = |p: &Point| f64::from(p.r);
    let delay = |m: Method, r0: bool| move |j: &Job| matches!(j, Job::Delay(jm, _, r, _) if *jm == m && (*r == 0) == r0);
    let thr = |m: Method| move |j: &Job| matches!(j, Job::Throughput(jm, ..) if *jm == m);
    let f21 = series(
        pairs,
        delay(Method::Pb, true),
        grid.delay_sizes,
        members,
        |p| p.delay_ms,
    );
    let f23 = series(
        pairs,
        delay(Method::Bb, true),
        grid.delay_sizes,
        members,
        |p| p.delay_ms,
    );
    let f24 = series(
        pairs,
        thr(Method::Pb),
        grid.throughput_sizes,
        members,
        |p| p.throughput,
    );
    let f25 = series(
        pairs,
        thr(Method::Bb),
        grid.throughput_sizes,
        members,
        |p| p.throughput,
    );
    let f27 = series(
        pairs,
        delay(Method::Pb, false),
        grid.resilience_sizes,
        r,
        |p| p.delay_ms,
    );
    let f28 = series(
        pairs,
        delay(Method::Bb, false),
        grid.resilience_sizes,
        r,
        |p| p.delay_ms,
    );
    let paper_delay = [Series {
        name: "the paper, 0 bytes".into(),
        points: vec![(2.0, paper::DELAY_0B_2_MS), (30.0, paper::DELAY_0B_30_MS)],
    }];
    let paper_thr = [Series {
        name: "the paper's maximum, 0 bytes".into(),
        points: vec![(2.0, paper::MAX_THROUGHPUT), (30.0, paper::MAX_THROUGHPUT)],
    }];
    let paper_r = [Series {
        name: "the paper, 0 bytes (r = 1 and 15)".into(),
        points: vec![(1.0, paper::DELAY_R1_MS), (15.0, paper::DELAY_R15_MS)],
    }];
    let panel = |title, x_label, y_label, series, references, legend| Panel {
        title,
        x_label,
        y_label,
        series,
        references,
        markers: true,
        legend,
    };
    let f26: Vec<Series> = (PARALLEL.iter())
        .map(|&(size, _)| Series {
            name: format!("groups of {size}"),
            points: (parallel.iter())
                .filter(|p| p.members == size)
                .map(|p| (f64::from(p.senders / p.members), p.throughput))
                .collect(),
        })
        .collect();
    let paper_parallel = [Series {
        name: "the paper's maximum (5 groups of 2)".into(),
        points: vec![(5.0, paper::MAX_PARALLEL)],
    }];
    use SeriesLabelPosition::{LowerRight, UpperLeft, UpperRight};
    let mut panels = vec![
        panel(
            "Fig. 21: delay, PB",
            "group size",
            "ms",
            &f21,
            &paper_delay,
            UpperLeft,
        ),
        panel(
            "Fig. 24: throughput, PB",
            "senders (= group size)",
            "messages/s",
            &f24,
            &paper_thr,
            UpperRight,
        ),
        panel(
            "Fig. 27: delay against r, PB",
            "resilience degree r (group r + 1)",
            "ms",
            &f27,
            &paper_r,
            UpperLeft,
        ),
        panel(
            "Fig. 23: delay, BB",
            "group size",
            "ms",
            &f23,
            &paper_delay,
            UpperLeft,
        ),
        panel(
            "Fig. 25: throughput, BB",
            "senders (= group size)",
            "messages/s",
            &f25,
            &paper_thr,
            LowerRight,
        ),
        panel(
            "Fig. 28: delay against r, BB",
            "resilience degree r (group r + 1)",
            "ms",
            &f28,
            &paper_r,
            UpperLeft,
        ),
    ];
    if !parallel.is_empty() {
        panels.push(panel(
            "Fig. 26: parallel groups, PB, 0 bytes",
            "groups",
            "messages/s, all groups",
            &f26,
            &paper_parallel,
            UpperLeft,
        ));
    }
    crate::plot::grid(path, &panels, 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runs_cover_every_figure_with_both_methods() {
        let jobs = jobs(&SIM_GRID);
        let delays = jobs
            .iter()
            .filter(|j| matches!(j, Job::Delay(_, _, 0, _)))
            .count();
        assert_eq!(delays, 2 * PAPER_SIZES.len() * GROUPS.len());
        let thr = jobs
            .iter()
            .filter(|j| matches!(j, Job::Throughput(..)))
            .count();
        assert_eq!(thr, 2 * THROUGHPUT_SIZES.len() * GROUPS.len());
        assert!(jobs
            .iter()
            .all(|j| !matches!(j, Job::Delay(_, n, r, _) if *r > 0 && *n != u32::from(*r) + 1)));
    }
}
