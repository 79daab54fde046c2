//! `rmcast sim`: run an engine in the deterministic simulator under faults, check every run, and
//! print the verdicts and the figures.
//!
//! The arguments describe an [`rmcast_sim::Scenario`]; each seed draws its own fault and churn
//! schedule from it, so `--seed N` with the same other arguments replays one run exactly, and a
//! failing seed is printed as that command. `--message-counts` prints the cost of a broadcast
//! for r = 0..3 (the sequencer paper's 2 and 3 + r datagrams) with one message in flight and
//! under load. `--experiment rmp` measures throughput on a shared 10 Mb/s medium as the RMP
//! paper's Figures 5.1 and 5.2 do ([`rmp`]); `--experiment pbcast` measures
//! throughput stability under perturbed members as "Throughput Stability of Reliable Multicast
//! Protocols" does ([`pbcast`]); `--experiment bimodal` counts how many members deliver each
//! message of the gossip engine beside the prediction of "Bimodal Multicast" ([`bimodal`]).
//!
//! ```text
//! rmcast sim --members 16 --loss 0.1 --dup 0.05 --reorder 2 --churn --partition --pause --seeds 200
//! rmcast sim <the same arguments> --seed 49        # replay one seed, with its fault schedule
//! rmcast sim --message-counts
//! rmcast sim --experiment rmp --plot rmp.svg
//! rmcast sim --experiment pbcast --members 8,16,32 --p 0.1,0.5,0.9 --plot pbcast.svg
//! rmcast sim --experiment bimodal --members 50,128 --plot bimodal.svg
//! ```
//!
//! The exit code is 0 only if every checker passed on every seed, 1 if one failed, 2 on bad
//! arguments.

mod all;
pub(crate) mod amoeba;
mod args;
mod bimodal;
pub(crate) mod cost;
mod parallel;
mod pbcast;
mod rmp;
mod rmtp;
mod txn;

use anyhow::{bail, Context};
use args::Experiment;
pub use args::SimArgs;
use rmcast_sim::{EngineChoice, Figures, Scenario, SweepReport};
use std::io::Write as _;
use std::process::ExitCode;

/// Members of a sweep without `--members`.
const DEFAULT_MEMBERS: u32 = 8;
/// Messages per sender of a sweep without `--messages`.
const DEFAULT_MESSAGES: u64 = 200;
/// Payload bytes of a sweep without `--message-bytes`.
const DEFAULT_MESSAGE_BYTES: usize = 64;
/// The engine of a sweep without `--engine`.
const DEFAULT_ENGINE: &str = "sequencer";
/// Messages in flight per sender of a sweep without `--in-flight`.
const DEFAULT_IN_FLIGHT: u32 = 4;

impl SimArgs {
    /// The scenario these arguments describe.
    pub fn scenario(&self) -> Scenario {
        Scenario {
            engine: EngineChoice::named(self.engine.as_deref().unwrap_or(DEFAULT_ENGINE))
                .expect("--engine names a registered engine (checked when parsing)")
                .resilience(self.resilience),
            members: self.members.first().copied().unwrap_or(DEFAULT_MEMBERS),
            latency_ms: self.latency,
            reorder_ms: self.reorder,
            loss: self.loss.unwrap_or(0.0),
            dup: self.dup,
            bandwidth_mbps: self.bandwidth_mbps,
            shared_medium: self.shared_medium,
            messages: self.messages.unwrap_or(DEFAULT_MESSAGES),
            message_bytes: self.message_bytes.unwrap_or(DEFAULT_MESSAGE_BYTES),
            senders: self.senders,
            in_flight: self.in_flight.unwrap_or(DEFAULT_IN_FLIGHT),
            rate: self.rate,
            churn: self.churn,
            partitions: self.partition,
            partition_ms: self.partition_ms,
            pauses: self.pause,
            pause_ms: self.pause_ms,
            rx_buffer: self.rx_buffer,
            fault_window_ms: self.fault_window_ms,
            crashes: self.crashes,
            crash_sequencer: self.crash_sequencer,
            crash_in_recovery: self.crash_in_recovery,
            min_members: self.min_members,
            heal: self.heal,
            qos: self.qos,
        }
    }
}

/// Run `rmcast sim`.
pub fn run(args: SimArgs) -> anyhow::Result<ExitCode> {
    let threads = match args.threads {
        Some(0) => bail!("--threads must be at least 1"),
        Some(t) => t,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    if args.message_counts {
        return message_counts(&args);
    }
    if let Some(e) = args.experiment {
        return run_experiment(e, &args, threads);
    }
    if args.members.len() > 1 {
        bail!("--members takes one number, except with --experiment pbcast or bimodal");
    }
    let sc = args.scenario();
    sc.validate().map_err(anyhow::Error::msg)?;
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None if args.seeds == 0 => bail!("--seeds must be at least 1"),
        None => (0..args.seeds).collect(),
    };
    println!("rmcast sim {}", sc.cli_args());
    println!(
        "engine {} declares {}",
        sc.engine.name(),
        describe_guarantees(&sc.engine.guarantees())
    );
    println!(
        "{} seed(s) on {} thread(s)",
        seeds.len(),
        threads.min(seeds.len())
    );
    if let [seed] = seeds[..] {
        print_schedule(&sc, seed);
        if args.trace {
            print_trace(&sc.run(seed).record);
        }
    }
    let report = sweep_with_progress(&sc, &seeds, threads);
    if let Some(p) = &args.plot {
        plot_deliveries(p, &sc, seeds[0])?;
        println!("figure of seed {} written to {}", seeds[0], p.display());
    }
    print_verdicts(&report);
    println!();
    print_figures(&report.mean_figures(), report.runs.len());
    if let Some(path) = &args.json {
        let checkers: Vec<_> = report
            .checker_totals()
            .into_iter()
            .map(|(name, passed, failed, first)| {
                serde_json::json!({
                    "checker": name, "passed": passed, "failed": failed, "first_failing_seed": first,
                })
            })
            .collect();
        let out = serde_json::json!({
            "command": format!("rmcast sim {}", sc.cli_args()),
            "engine": sc.engine.name(),
            "seeds": report.runs.len(),
            "passed": report.passed(),
            "failing_seeds": report.failing_seeds(),
            "checkers": checkers,
            "mean_figures": report.mean_figures(),
        });
        std::fs::write(path, format!("{out}\n"))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if report.passed() {
        println!("\nall checkers passed on every seed");
        return Ok(ExitCode::SUCCESS);
    }
    let failing: Vec<String> = report
        .failing_seeds()
        .iter()
        .map(|s| s.to_string())
        .collect();
    println!("\nFAILED seeds: {}", failing.join(", "));
    if let [run] = &report.runs[..] {
        // Replaying one seed: every violation the checkers kept.
        for (name, v) in &run.verdicts {
            for x in v.as_ref().err().into_iter().flatten() {
                println!("  {name}: {x}");
            }
        }
    } else {
        print!("{}", report.failure_summary(args.show_failures));
    }
    Ok(ExitCode::from(1))
}

/// Per host: everything but deliveries and completions (counted), and the engine's state.
fn print_trace(rec: &rmcast_sim::Record) {
    use rmcast_proto::Event;
    let ms = |t: rmcast_proto::Time| t.0 as f64 / 1e6;
    for h in &rec.hosts {
        let at = |t: Option<rmcast_proto::Time>| t.map_or("-".into(), |t| format!("{:.3}", ms(t)));
        println!(
            "host {}: started {} crashed {} asked to leave {}",
            h.id,
            at(h.started_at),
            at(h.crashed_at),
            at(h.leave_requested_at)
        );
        let mut delivered = 0;
        for e in &h.events {
            match &e.event {
                Event::Deliver(_) => delivered += 1,
                Event::SendComplete { .. } => {}
                Event::View(v) => println!(
                    "  {:>10.3}  [{delivered} delivered] view {} {:?} sequencer {} (seq {})",
                    ms(e.at),
                    v.id,
                    v.members.iter().map(|m| m.0).collect::<Vec<_>>(),
                    v.coordinator,
                    v.seq
                ),
                Event::Recovery(r) => println!(
                    "  {:>10.3}  [{delivered} delivered] {}",
                    ms(e.at),
                    crate::member::RecoveryNotices::new(false)
                        .line(r)
                        .unwrap_or_default()
                        .trim_start_matches("* ")
                ),
                other => println!("  {:>10.3}  [{delivered} delivered] {other:?}", ms(e.at)),
            }
        }
        let c = &h.counters;
        println!(
            "  {delivered} delivered; datagrams sent {} received {}, NACKs {}, retransmissions \
             {}, probes {}, recovery {}",
            c.datagrams_sent,
            c.datagrams_received,
            c.nacks_sent,
            c.retransmissions,
            c.probes_sent,
            c.recovery_sent
        );
        println!("  at the end: {}", h.final_state);
    }
}

/// What the seed drew: who joins and leaves when, partitions, pauses.
fn print_schedule(sc: &Scenario, seed: u64) {
    let cfg = sc.config(seed);
    let ms = |t: rmcast_proto::Time| t.0 as f64 / 1e6;
    println!("schedule of seed {seed} (times in ms):");
    println!(
        "  workload starts at {:.1}, senders {:?}",
        ms(cfg.workload.start),
        cfg.workload.senders.iter().map(|n| n.0).collect::<Vec<_>>()
    );
    for c in &cfg.churn {
        let kind = match c.kind {
            rmcast_sim::config::ChurnKind::Join => "join",
            rmcast_sim::config::ChurnKind::Leave => "leave",
        };
        println!("  {:>9.3}  {kind} of host {}", ms(c.at), c.node);
    }
    for p in &cfg.faults.partitions {
        let ids = |v: &[rmcast_proto::NodeId]| v.iter().map(|n| n.0).collect::<Vec<_>>();
        println!(
            "  {:>9.3}  partition {:?} | {:?} until {:.3}",
            ms(p.start),
            ids(&p.a),
            ids(&p.b),
            ms(p.end)
        );
    }
    for p in &cfg.faults.pauses {
        println!(
            "  {:>9.3}  pause of host {} for {:.3}",
            ms(p.at),
            p.host,
            p.duration.as_secs_f64() * 1e3
        );
    }
    for c in &cfg.faults.crashes {
        println!("  {:>9.3}  crash of host {}", ms(c.at), c.host);
    }
}

fn sweep_with_progress(sc: &Scenario, seeds: &[u64], threads: usize) -> SweepReport {
    // One seed is its own report: no bar for it.
    let pb = if seeds.len() > 1 {
        crate::bench::bar(Some(seeds.len() as u64), "seeds".into())
    } else {
        indicatif::ProgressBar::hidden()
    };
    // A panicking run becomes a failed `panic` verdict of its seed (see `run_caught`).
    let report = sc.sweep_parallel(seeds, threads, &|| pb.inc(1));
    pb.finish();
    report
}

fn print_verdicts(report: &SweepReport) {
    println!(
        "\n{:<22} {:>8} {:>8}  first failing seed",
        "checker", "passed", "failed"
    );
    for (name, ok, bad, first) in report.checker_totals() {
        let first = first.map_or("-".to_string(), |s| s.to_string());
        let mark = if bad == 0 { "ok  " } else { "FAIL" };
        println!("{mark} {name:<17} {ok:>8} {bad:>8}  {first}");
    }
}

fn print_figures(f: &Figures, runs: usize) {
    println!("figures (mean over {runs} run(s))");
    let rows: Vec<(&str, String)> = vec![
        ("messages submitted", f.messages.to_string()),
        (
            "datagrams per broadcast",
            format!("{:.3}", f.datagrams_per_broadcast),
        ),
        ("probe datagrams", f.probes.to_string()),
        ("recovery datagrams", f.recovery_datagrams.to_string()),
        ("crashes", f.crashes.to_string()),
        ("expelled members", f.expelled.to_string()),
        (
            "crash to detection",
            format!("{:.1} ms (runs with a crash)", f.detection_ms),
        ),
        (
            "crash to reset everywhere",
            format!("{:.1} ms (runs with a crash)", f.recovery_ms),
        ),
        ("latency p50", format!("{:.3} ms", f.latency_p50_ms)),
        ("latency p99", format!("{:.3} ms", f.latency_p99_ms)),
        (
            "throughput",
            format!("{:.0} msgs/s (simulated)", f.throughput_msgs_per_s),
        ),
        ("retransmissions", f.retransmissions.to_string()),
        ("NACKs", f.nacks.to_string()),
        ("drops by loss", f.drops_loss.to_string()),
        ("drops by partition", f.drops_partition.to_string()),
        (
            "drops by pause overflow",
            f.drops_pause_overflow.to_string(),
        ),
        ("drops by uplink queue", f.drops_uplink_queue.to_string()),
        ("duplicated copies", f.duplicated.to_string()),
        ("simulated time", format!("{:.1} ms", f.simulated_ms)),
    ];
    // Without a crash there is nothing to detect or recover from: no "0.0 ms" rows.
    let rows = rows
        .into_iter()
        .filter(|(name, _)| f.crashes > 0 || !name.starts_with("crash to"));
    for (k, v) in rows {
        println!("  {k:<26} {v}");
    }
}

/// In-flight bound of the "under load" column of `--message-counts`.
const LOAD_IN_FLIGHT: u32 = 64;

fn message_counts(args: &SimArgs) -> anyhow::Result<ExitCode> {
    let seed = args.seed.unwrap_or(0);
    let messages = args.messages.unwrap_or(DEFAULT_MESSAGES);
    println!(
        "datagrams per broadcast, loss-free, one sender that is not the sequencer, {messages} \
         messages (seed {seed})"
    );
    println!(
        "{:>3} {:>10} {:>16} {:>22}",
        "r", "expected", "1 in flight", "under load (K=64)"
    );
    let mut ok = true;
    for r in 0..=3u8 {
        let mut cells = Vec::new();
        for k in [1, LOAD_IN_FLIGHT] {
            let sc = Scenario {
                messages,
                message_bytes: args.message_bytes.unwrap_or(DEFAULT_MESSAGE_BYTES),
                ..Scenario::message_count(r, k)
            };
            sc.validate().map_err(anyhow::Error::msg)?;
            let rep = sc.run_caught(seed);
            if !rep.passed() {
                ok = false;
                eprintln!("r={r} K={k}: {}", rep.summary());
                eprintln!("  replay: {}", sc.replay_command(seed));
            }
            cells.push(rep.figures.datagrams_per_broadcast);
        }
        let expected = if r == 0 { 2 } else { 3 + r as u32 };
        println!(
            "{r:>3} {expected:>10} {:>16.3} {:>22.3}",
            cells[0], cells[1]
        );
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// What an engine promises, in words: `total order, virtual synchrony, resilience 1, ...`.
pub fn describe_guarantees(g: &rmcast_proto::Guarantees) -> String {
    let lower = |d: String| d.to_lowercase();
    let mut parts = vec![format!("{} order", lower(format!("{:?}", g.order)))];
    if g.virtual_synchrony {
        parts.push("virtual synchrony".into());
    }
    parts.push(format!("resilience {}", g.resilience));
    parts.push(format!(
        "{} delivery",
        lower(format!("{:?}", g.delivery)).replace("allornothing", "all-or-nothing")
    ));
    if g.crash_recovery {
        parts.push("crash recovery".into());
    }
    if g.replies {
        parts.push("replies".into());
    }
    parts.join(", ")
}

/// Deliveries of every host over virtual time in the run of `seed`, as an SVG chart.
fn plot_deliveries(path: &std::path::Path, sc: &Scenario, seed: u64) -> anyhow::Result<()> {
    use rmcast_proto::Event;
    let rec = sc.run(seed).record;
    let series: Vec<crate::plot::Series> = rec
        .hosts
        .iter()
        .map(|h| {
            let mut n = 0u64;
            let mut points = vec![(0.0, 0.0)];
            for e in &h.events {
                if let Event::Deliver(_) = e.event {
                    n += 1;
                    points.push((e.at.0 as f64 / 1e6, n as f64));
                }
            }
            let crashed = if h.crashed_at.is_some() {
                " (crashed)"
            } else {
                ""
            };
            crate::plot::Series {
                name: format!("host {}{crashed}", h.id),
                points,
            }
        })
        .collect();
    crate::plot::line_chart(
        path,
        &format!("rmcast sim, seed {seed}: deliveries per host"),
        "virtual time (ms)",
        "messages delivered",
        &series,
    )
}

/// `rmcast sim` arguments from a command line (`sim` first), for the tests of this module and
/// of the experiments.
#[cfg(test)]
pub(crate) fn try_parse_args<'a>(
    argv: impl IntoIterator<Item = &'a str>,
) -> Result<SimArgs, clap::Error> {
    use clap::Parser;
    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        sim: SimArgs,
    }
    Wrap::try_parse_from(argv).map(|w| w.sim)
}

/// `rmcast sim` arguments from one line (without `sim`).
#[cfg(test)]
pub(crate) fn parse_args(line: &str) -> SimArgs {
    try_parse_args(std::iter::once("sim").chain(line.split_whitespace())).expect("parses")
}

/// Runs `experiment`: its tables to stdout, or with `--out DIR` into `DIR` ([`run_into`]).
fn run_experiment(
    experiment: Experiment,
    args: &SimArgs,
    threads: usize,
) -> anyhow::Result<ExitCode> {
    match (&args.out, experiment) {
        (None, Experiment::All) => bail!("--experiment all writes its files into --out DIR"),
        (Some(dir), Experiment::All) => {
            create_dir(dir)?;
            all::run(args, threads, dir)
        }
        (Some(dir), e) => {
            create_dir(dir)?;
            let code = run_into(e, args, threads, dir)?;
            println!("tables written to {}", out_files(e, dir).0.display());
            Ok(code)
        }
        (None, e) => run_to(e, args, threads, &mut std::io::stdout().lock()),
    }
}

fn create_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

/// The files of `experiment` under `dir`: its tables and its figure.
fn out_files(
    experiment: Experiment,
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let name = experiment.name();
    (
        dir.join(format!("{name}.txt")),
        dir.join(format!("{name}.svg")),
    )
}

/// Runs one experiment (not `All`) with its tables into `dir/NAME.txt` and, unless `--plot`
/// names another file, its figure into `dir/NAME.svg`.
fn run_into(
    experiment: Experiment,
    args: &SimArgs,
    threads: usize,
    dir: &std::path::Path,
) -> anyhow::Result<ExitCode> {
    let (txt, svg) = out_files(experiment, dir);
    let mut args = args.clone();
    args.plot.get_or_insert(svg);
    let file =
        std::fs::File::create(&txt).with_context(|| format!("creating {}", txt.display()))?;
    let mut out = std::io::BufWriter::new(file);
    let code = run_to(experiment, &args, threads, &mut out)?;
    out.flush()
        .with_context(|| format!("writing {}", txt.display()))?;
    Ok(code)
}

/// Runs one experiment (not `All`), its tables to `out`.
fn run_to(
    experiment: Experiment,
    args: &SimArgs,
    threads: usize,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<ExitCode> {
    match experiment {
        Experiment::Rmp => rmp::run(args, threads, out),
        Experiment::Pbcast => pbcast::run(args, threads, out),
        Experiment::Rmtp => rmtp::run(args, threads, out),
        Experiment::Amoeba => amoeba::run(args, threads, out),
        Experiment::Bimodal => bimodal::run(args, threads, out),
        Experiment::Txn => txn::run(args, threads, out),
        Experiment::Cost => cost::run(args, threads, out),
        Experiment::All => bail!("--experiment all runs the others, it is not one of them"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcast_proto::catalog;

    fn parse(line: &str) -> SimArgs {
        parse_args(line)
    }

    #[test]
    fn replay_command_parses_back_to_the_same_scenario() {
        let sc = parse(
            "--members 16 --loss 0.1 --dup 0.05 --reorder 2.5 --resilience 2 --churn 3 \
             --partition --pause 2 --senders 3 --rate 250 --bandwidth-mbps 10 --shared-medium",
        )
        .scenario();
        assert_eq!(sc.partitions, 1);
        assert_eq!(sc.pauses, 2);
        let back = parse(&sc.cli_args()).scenario();
        assert_eq!(back, sc);
    }

    #[test]
    fn bare_flags_take_their_default_counts() {
        let a = parse("--churn --pause");
        assert_eq!((a.churn, a.pause, a.partition), (2, 1, 0));
    }

    #[test]
    fn engine_takes_any_registered_name_and_lists_them_otherwise() {
        assert_eq!(
            parse("--engine sequencer").scenario().engine.name(),
            "sequencer"
        );
        let Err(e) = try_parse_args(["sim", "--engine", "nope"]) else {
            panic!("an unknown engine is refused");
        };
        let e = e.to_string();
        for name in catalog::names() {
            assert!(e.contains(name), "{e}");
        }
    }

    #[test]
    fn bad_values_are_refused_with_a_clear_error() {
        let e = parse("--loss 1.5").scenario().validate().unwrap_err();
        assert!(e.contains("--loss must be in [0, 1)"), "{e}");
        let e = parse("--shared-medium").scenario().validate().unwrap_err();
        assert!(e.contains("--shared-medium needs --bandwidth-mbps"), "{e}");
        assert!(try_parse_args(["sim", "--members", "-3"]).is_err());
    }
}
