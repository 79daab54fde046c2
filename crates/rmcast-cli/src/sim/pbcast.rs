//! `rmcast sim --experiment pbcast`: the experiment of "Throughput Stability of Reliable
//! Multicast Protocols" (Öznur Özkasap and Kenneth P. Birman) in the simulator: one sender at
//! 200 messages a second, groups of 8 to 64 members (128 on request), `f = 1` and `f = n/4`
//! perturbed members that sleep 100 ms with probability `p` every 100 ms, `p` from 0.1 to 0.9;
//! throughput at the unperturbed members in 500 ms windows, for the gossip engine (Pbcast) and
//! the sequencer engine (the virtually synchronous baseline) with two history buffers
//! ([`rmcast_sim::stability`] makes and measures each run).
//!
//! Prints one table per figure of the paper (Figures 2 and 3: throughput; Figure 5: gossip's
//! throughput variance; Figure 7: gossip's retransmissions against the `2p` bound; and the
//! loss up-calls), and with `--plot FILE` draws the four figures into one SVG. The exit code
//! is 0 only if every run passed every checker and no member was taken for failed.

use super::args::{Perturbed, SimArgs};
use super::parallel::run_parallel;
use crate::plot::{Panel, Series};
use anyhow::bail;
use plotters::chart::SeriesLabelPosition;
use rmcast_sim::stability::{default_history, Point, Protocol, Setup, AMOEBA_HISTORY};
use std::io::Write;
use std::process::ExitCode;

/// Group sizes without `--members` (128 takes as long as all of these together).
const DEFAULT_MEMBERS: [u32; 4] = [8, 16, 32, 64];
/// Perturb rates without `--p`.
const DEFAULT_P: [f64; 9] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9];
/// Perturbed members without `--perturbed`.
const DEFAULT_PERTURBED: [Perturbed; 2] = [Perturbed::Count(1), Perturbed::Quarter];

/// One run: a protocol, a group size, the perturbed members, a perturb rate.
#[derive(Copy, Clone, Debug, PartialEq)]
struct Job {
    protocol: Protocol,
    members: u32,
    perturbed: u32,
    p: f64,
}

/// The grid of the runs.
#[derive(Clone, Debug, PartialEq)]
struct Grid {
    members: Vec<u32>,
    perturbed: Vec<Perturbed>,
    ps: Vec<f64>,
    protocols: Vec<Protocol>,
}

impl Grid {
    fn from_args(args: &SimArgs) -> anyhow::Result<Grid> {
        let or = |v: &Vec<u32>, d: &[u32]| if v.is_empty() { d.to_vec() } else { v.clone() };
        let members = or(&args.members, &DEFAULT_MEMBERS);
        let perturbed = if args.perturbed.is_empty() {
            DEFAULT_PERTURBED.to_vec()
        } else {
            args.perturbed.clone()
        };
        let ps = if args.perturb_rates.is_empty() {
            DEFAULT_P.to_vec()
        } else {
            args.perturb_rates.clone()
        };
        let histories = if args.gossip_only {
            Vec::new()
        } else if args.history.is_empty() {
            vec![AMOEBA_HISTORY, default_history()]
        } else {
            args.history.clone()
        };
        for &p in &ps {
            if !(0.0..=1.0).contains(&p) {
                bail!("--p: every perturb rate must be in [0, 1], got {p}");
            }
        }
        for &n in &members {
            if !(3..=1024).contains(&n) {
                bail!("--members: every group size must be in 3..=1024, got {n}");
            }
            for f in &perturbed {
                if f.of(n) > n - 2 {
                    bail!(
                        "--perturbed {f}: {} of {n} members is too many (the sender, host 1, \
                         and host 0 are never perturbed)",
                        f.of(n)
                    );
                }
            }
        }
        // The sequencer engine refuses joins beyond its largest group: such a run would only
        // show members that never got in.
        let largest = rmcast_proto::sequencer::Config::new(0).max_members;
        if let Some(n) = members.iter().find(|n| **n as usize > largest) {
            if !histories.is_empty() {
                bail!(
                    "--members {n}: the sequencer engine takes groups of at most {largest} \
                     members; add --gossip-only to run the gossip engine alone"
                );
            }
        }
        for &h in &histories {
            if !(16..=1 << 20).contains(&h) {
                bail!("--history: every history must be in 16..=1048576 messages, got {h}");
            }
        }
        let mut protocols = vec![Protocol::Gossip];
        for h in histories {
            let p = Protocol::Sequencer { history: h };
            if !protocols.contains(&p) {
                protocols.push(p);
            }
        }
        Ok(Grid {
            members,
            perturbed,
            ps,
            protocols,
        })
    }

    /// The numbers of perturbed members of a group of `n`, without repeats, in `--perturbed`
    /// order.
    fn fs(&self, n: u32) -> Vec<u32> {
        let mut v = Vec::new();
        for f in &self.perturbed {
            if !v.contains(&f.of(n)) {
                v.push(f.of(n));
            }
        }
        v
    }

    /// The runs, in table order: protocol, group size, perturbed members, perturb rate.
    fn jobs(&self) -> Vec<Job> {
        let mut v = Vec::new();
        for &protocol in &self.protocols {
            for &members in &self.members {
                for perturbed in self.fs(members) {
                    for &p in &self.ps {
                        v.push(Job {
                            protocol,
                            members,
                            perturbed,
                            p,
                        });
                    }
                }
            }
        }
        v
    }
}

/// The experiment's settings from the command line.
fn setup(args: &SimArgs) -> Setup {
    let d = Setup::default();
    Setup {
        rate: args.rate.unwrap_or(d.rate),
        seconds: args.seconds.unwrap_or(d.seconds),
        message_bytes: args.message_bytes.unwrap_or(d.message_bytes),
        latency_ms: args.latency,
        loss: args.loss.unwrap_or(d.loss),
        rx_buffer: args.rx_buffer,
        seed: args.seed.unwrap_or(0),
        ..d
    }
}

fn list<T: ToString>(v: &[T]) -> String {
    v.iter().map(T::to_string).collect::<Vec<_>>().join(",")
}

/// Runs the experiment on `threads` threads.
pub fn run(args: &SimArgs, threads: usize, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let grid = Grid::from_args(args)?;
    let setup = setup(args);
    setup.validate().map_err(anyhow::Error::msg)?;
    let histories: Vec<usize> = (grid.protocols.iter())
        .filter_map(|p| match p {
            Protocol::Sequencer { history } => Some(*history),
            Protocol::Gossip => None,
        })
        .collect();
    let protocols = if histories.is_empty() {
        "--gossip-only".to_string()
    } else {
        format!("--history {}", list(&histories))
    };
    writeln!(
        out,
        "rmcast sim --experiment pbcast --members {} --perturbed {} --p {} {protocols} \
         --duration {} --rate {} --loss {} --rx-buffer {} --message-bytes {} --latency {} \
         --seed {}",
        list(&grid.members),
        list(&grid.perturbed),
        list(&grid.ps),
        setup.seconds,
        setup.rate,
        setup.loss,
        setup.rx_buffer,
        setup.message_bytes,
        setup.latency_ms,
        setup.seed
    )?;
    let rec = setup.recovery();
    writeln!(
        out,
        "one sender (host 1) multicasts {} msgs/s of {} bytes for {} s of virtual time; the f \
         perturbed members (the last hosts) draw every {} ms whether to sleep {} ms \
         (probability p), holding at most {} datagrams meanwhile; {}% of the datagram copies \
         are lost; throughput is counted at the unperturbed members other than the sender, in \
         {} ms windows",
        setup.rate,
        setup.message_bytes,
        setup.seconds,
        setup.period.as_millis(),
        setup.sleep.as_millis(),
        setup.rx_buffer,
        setup.loss * 100.0,
        setup.window.as_millis(),
    )?;
    if !histories.is_empty() {
        writeln!(
            out,
            "sequencer/H: the sequencer engine with a history of H messages ({AMOEBA_HISTORY}: \
             the Amoeba paper's; {}: the engine's default); a member is probed after {} ms of \
             silence and taken for failed after {} unanswered probes of {} ms, longer than any \
             sleep of a run",
            default_history(),
            rec.alive_interval_ms,
            rec.alive_retries,
            rec.alive_timeout_ms
        )?;
    }
    let jobs = grid.jobs();
    let points: Vec<Point> = run_parallel(&jobs, threads, |j| {
        setup.measure(j.protocol, j.members, j.perturbed, j.p)
    })
    .into_iter()
    .collect::<Result<_, String>>()
    .map_err(anyhow::Error::msg)?;

    print_throughput(out, &grid, &points, setup.rate)?;
    print_variance(out, &grid, &points)?;
    print_retransmissions(out, &grid, &points)?;
    print_losses(out, &grid, &points)?;
    print_sleep(out, &grid, &points)?;

    if let Some(path) = &args.plot {
        plot(path, &grid, &points, setup.rate)?;
        writeln!(out, "\nfigures written to {}", path.display())?;
    }
    let bad: Vec<&Point> = (points.iter())
        .filter(|p| !p.passed || p.failed_members > 0)
        .collect();
    if bad.is_empty() {
        writeln!(
            out,
            "\nevery run passed every checker, and no member was taken for failed in any run"
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "\n{} run(s) failed a checker or lost a member:",
        bad.len()
    )?;
    for p in bad.iter().take(args.show_failures) {
        writeln!(
            out,
            "{} with {} members, {} perturbed, p = {}: {} member(s) taken for failed",
            p.protocol, p.members, p.perturbed, p.p, p.failed_members
        )?;
        for line in p.summary.lines().take(6) {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(ExitCode::from(1))
}

fn find(points: &[Point], protocol: Protocol, n: u32, f: u32, p: f64) -> Option<&Point> {
    points
        .iter()
        .find(|x| x.protocol == protocol && x.members == n && x.perturbed == f && x.p == p)
}

/// One row of cells per protocol (of `protocols`), group size and number of perturbed
/// members, one column per perturb rate.
fn table(
    out: &mut dyn Write,
    grid: &Grid,
    points: &[Point],
    protocols: &[Protocol],
    width: usize,
    cell: impl Fn(&Point) -> String,
) -> std::io::Result<()> {
    write!(out, "{:<15} {:>4} {:>3}", "protocol", "n", "f")?;
    for p in &grid.ps {
        write!(out, " {:>width$}", format!("p={p}"))?;
    }
    writeln!(out)?;
    for &protocol in protocols {
        for &n in &grid.members {
            for f in grid.fs(n) {
                write!(out, "{:<15} {n:>4} {f:>3}", protocol.to_string())?;
                for &p in &grid.ps {
                    let c = find(points, protocol, n, f, p).map_or("-".into(), &cell);
                    write!(out, " {c:>width$}")?;
                }
                writeln!(out)?;
            }
        }
    }
    Ok(())
}

fn print_throughput(
    out: &mut dyn Write,
    grid: &Grid,
    points: &[Point],
    rate: f64,
) -> std::io::Result<()> {
    writeln!(
        out,
        "\nFigures 2 and 3: throughput at the unperturbed members, msgs/s (mean over the \
         windows and members; the lowest window in brackets); {rate} msgs/s are sent"
    )?;
    table(out, grid, points, &grid.protocols, 10, |x| {
        format!("{:.0} ({:.0})", x.throughput_mean, x.throughput_min)
    })?;
    Ok(())
}

fn print_variance(out: &mut dyn Write, grid: &Grid, points: &[Point]) -> std::io::Result<()> {
    writeln!(
        out,
        "\nFigure 5: variance of the throughput at the unperturbed members, (msgs/s)^2, over \
         the windows and members"
    )?;
    table(out, grid, points, &grid.protocols, 8, |x| {
        format!("{:.0}", x.throughput_variance)
    })?;
    Ok(())
}

fn print_retransmissions(
    out: &mut dyn Write,
    grid: &Grid,
    points: &[Point],
) -> std::io::Result<()> {
    writeln!(
        out,
        "\nFigure 7: gossip's retransmissions at an unperturbed member, % of the messages sent \
         in the window (mean over the windows and members; the highest window in brackets); \
         the paper's worst-case bound is 2p:"
    )?;
    write!(out, "{:<24}", "bound")?;
    for p in &grid.ps {
        write!(out, " {:>10}", format!("{:.0}%", 200.0 * p))?;
    }
    writeln!(out)?;
    table(out, grid, points, &[Protocol::Gossip], 10, |x| {
        format!("{:.1} ({:.0})", x.retrans_pct_mean, x.retrans_pct_max)
    })?;
    Ok(())
}

fn print_losses(out: &mut dyn Write, grid: &Grid, points: &[Point]) -> std::io::Result<()> {
    writeln!(
        out,
        "\nLoss up-calls: messages the gossip engine reported lost at the perturbed members \
         (at the unperturbed ones in brackets)"
    )?;
    table(out, grid, points, &[Protocol::Gossip], 9, |x| {
        format!("{} ({})", x.lost_perturbed, x.lost_unperturbed)
    })?;
    Ok(())
}

fn print_sleep(out: &mut dyn Write, grid: &Grid, points: &[Point]) -> std::io::Result<()> {
    write!(
        out,
        "\nfraction of the time the perturbed members slept, mean over the runs:"
    )?;
    for &p in &grid.ps {
        let v: Vec<f64> = (points.iter())
            .filter(|x| x.p == p)
            .map(|x| x.asleep)
            .collect();
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        write!(out, " {mean:.2} (p={p})")?;
    }
    writeln!(out)?;
    for &protocol in &grid.protocols {
        let refused: u64 = (points.iter())
            .filter(|x| x.protocol == protocol)
            .map(|x| x.refusals)
            .sum();
        let overflow: u64 = (points.iter())
            .filter(|x| x.protocol == protocol)
            .map(|x| x.overflow_drops)
            .sum();
        writeln!(
            out,
            "{protocol}: {overflow} datagrams lost to full receive buffers of sleepers, {refused} \
             submissions refused by flow control (retried), over all runs"
        )?;
    }
    Ok(())
}

/// The four figures side by side: throughput against p at the largest group (Figure 2),
/// throughput against the group size at the largest p (Figure 3), gossip's throughput variance
/// against the group size (Figure 5), gossip's retransmissions against p with the 2p bound
/// (Figure 7).
fn plot(path: &std::path::Path, grid: &Grid, points: &[Point], rate: f64) -> anyhow::Result<()> {
    let n_max = *grid.members.iter().max().expect("at least one group size");
    let p_max = grid.ps.iter().copied().fold(f64::MIN, f64::max);
    let p_min = grid.ps.iter().copied().fold(f64::MAX, f64::min);
    let n_min = *grid.members.iter().min().expect("at least one group size");
    let fig2: Vec<Series> = (grid.protocols.iter())
        .flat_map(|&protocol| {
            grid.fs(n_max).into_iter().map(move |f| Series {
                name: format!("{protocol}, f = {f}"),
                points: (grid.ps.iter())
                    .filter_map(|&p| find(points, protocol, n_max, f, p))
                    .map(|x| (x.p, x.throughput_mean))
                    .collect(),
            })
        })
        .collect();
    let sent_p = [Series {
        name: format!("sending rate, {rate} msgs/s"),
        points: vec![(p_min, rate), (p_max, rate)],
    }];
    let sent_n = [Series {
        name: format!("sending rate, {rate} msgs/s"),
        points: vec![(n_min as f64, rate), (n_max as f64, rate)],
    }];
    // Figure 3: against the group size, for each protocol and each `--perturbed` choice.
    let fig3: Vec<Series> = (grid.protocols.iter())
        .flat_map(|&protocol| {
            grid.perturbed.iter().map(move |&spec| Series {
                name: format!("{protocol}, f = {spec}"),
                points: (grid.members.iter())
                    .filter_map(|&n| find(points, protocol, n, spec.of(n), p_max))
                    .map(|x| (x.members as f64, x.throughput_mean))
                    .collect(),
            })
        })
        .collect();
    let fig5: Vec<Series> = (grid.perturbed.iter())
        .map(|&spec| Series {
            name: format!("gossip, f = {spec} (mean over p)"),
            points: (grid.members.iter())
                .map(|&n| {
                    let v: Vec<f64> = (grid.ps.iter())
                        .filter_map(|&p| find(points, Protocol::Gossip, n, spec.of(n), p))
                        .map(|x| x.throughput_variance)
                        .collect();
                    (n as f64, v.iter().sum::<f64>() / v.len().max(1) as f64)
                })
                .collect(),
        })
        .collect();
    let spec = *grid.perturbed.last().expect("at least one --perturbed");
    let fig7: Vec<Series> = (grid.members.iter())
        .map(|&n| Series {
            name: format!("gossip, n = {n}, f = {spec}"),
            points: (grid.ps.iter())
                .filter_map(|&p| find(points, Protocol::Gossip, n, spec.of(n), p))
                .map(|x| (x.p, x.retrans_pct_mean))
                .collect(),
        })
        .collect();
    let bound = [Series {
        name: "worst-case bound, 2p".into(),
        points: (grid.ps.iter()).map(|&p| (p, 200.0 * p)).collect(),
    }];
    let t2 = format!("Figs. 2-3: throughput at unperturbed members, n = {n_max}");
    let t3 = format!("Fig. 3: throughput against group size, p = {p_max}");
    crate::plot::panels(
        path,
        &[
            Panel {
                title: &t2,
                x_label: "perturb rate p",
                y_label: "msgs/s (mean of 500 ms windows)",
                series: &fig2,
                references: &sent_p,
                markers: true,
                legend: SeriesLabelPosition::LowerLeft,
            },
            Panel {
                title: &t3,
                x_label: "group members n",
                y_label: "msgs/s (mean of 500 ms windows)",
                series: &fig3,
                references: &sent_n,
                markers: true,
                legend: SeriesLabelPosition::LowerLeft,
            },
            Panel {
                title: "Fig. 5: gossip throughput variance",
                x_label: "group members n",
                y_label: "variance of 500 ms windows, (msgs/s)^2",
                series: &fig5,
                references: &[],
                markers: true,
                legend: SeriesLabelPosition::LowerRight,
            },
            Panel {
                title: "Fig. 7: gossip retransmissions at an unperturbed member",
                x_label: "perturb rate p",
                y_label: "% of the messages sent (mean of 500 ms windows)",
                series: &fig7,
                references: &bound,
                markers: true,
                legend: SeriesLabelPosition::UpperLeft,
            },
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::parse_args as parse;

    #[test]
    fn the_default_grid_is_the_papers_without_128_members() {
        let g = Grid::from_args(&parse("--experiment pbcast")).unwrap();
        assert_eq!(g.members, vec![8, 16, 32, 64]);
        assert_eq!(g.ps.len(), 9);
        assert_eq!(
            g.protocols,
            vec![
                Protocol::Gossip,
                Protocol::Sequencer { history: 128 },
                Protocol::Sequencer {
                    history: default_history()
                }
            ]
        );
        // f = 1 and f = n/4 for each of the four sizes, nine rates, three protocols.
        assert_eq!(g.jobs().len(), 3 * 4 * 2 * 9);
        assert_eq!(g.fs(8), vec![1, 2]);
    }

    #[test]
    fn the_grid_is_chosen_by_flags_and_checked() {
        let g = Grid::from_args(&parse(
            "--members 4,16 --p 0.1,0.5 --perturbed n/4 --history 64",
        ))
        .unwrap();
        assert_eq!(g.members, vec![4, 16]);
        assert_eq!(g.ps, vec![0.1, 0.5]);
        assert_eq!(g.fs(16), vec![4]);
        assert_eq!(g.jobs().len(), 2 * 2 * 2);
        // n/4 of 4 is 1, the same as --perturbed 1: run once.
        let g = Grid::from_args(&parse("--members 4 --perturbed 1,n/4")).unwrap();
        assert_eq!(g.fs(4), vec![1]);
        let e = Grid::from_args(&parse("--members 4 --perturbed 3")).unwrap_err();
        assert!(e.to_string().contains("too many"), "{e}");
        // Up to 1,024 members, the sequencer's largest group by default too: both engines run.
        let g = Grid::from_args(&parse("--members 1024 --gossip-only")).unwrap();
        assert_eq!(g.protocols, vec![Protocol::Gossip]);
        assert!(rmcast_proto::sequencer::Config::new(0).max_members >= 1024);
        assert!(Grid::from_args(&parse("--members 1024 --history 128")).is_ok());
        assert!(crate::sim::try_parse_args(["sim", "--gossip-only", "--history", "64"]).is_err());
        let e = Grid::from_args(&parse("--members 1025")).unwrap_err();
        assert!(e.to_string().contains("3..=1024"), "{e}");
        let e = Grid::from_args(&parse("--p 1.5")).unwrap_err();
        assert!(e.to_string().contains("--p"), "{e}");
        assert!(crate::sim::try_parse_args(["sim", "--perturbed", "half"]).is_err());
    }
}
