//! `rmcast sim --experiment all --out DIR`: every paper experiment of the simulator
//! ([`Experiment::EACH`]), one after the other, each writing its tables to `DIR/NAME.txt` and
//! its figure to `DIR/NAME.svg`; then `DIR/summary.txt`, each experiment's command, time and
//! verdict, which is printed too. One bar over the experiments, with each experiment's bar of
//! runs under it.
//!
//! Each experiment runs at its own defaults (the flags given apply to every experiment that
//! takes them), but for bimodal: 50 members and 500 messages unless `--members` or
//! `--messages` say otherwise, so that the whole takes minutes, not the hour its own defaults
//! (50 and 128 members, 2,000 messages) would.

use super::args::{Experiment, SimArgs};
use super::parallel;
use anyhow::Context;
use indicatif::{MultiProgress, ProgressDrawTarget};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// Bimodal's group in `all`, without `--members`.
const BIMODAL_MEMBERS: u32 = 50;
/// Bimodal's messages in `all`, without `--messages`.
const BIMODAL_MESSAGES: u64 = 500;

/// The arguments `all` runs experiment `e` with.
pub fn args_for(e: Experiment, args: &SimArgs) -> SimArgs {
    let mut a = args.clone();
    a.experiment = Some(e);
    // Each experiment's figure goes to its own file under --out, never all to one.
    a.plot = None;
    if e == Experiment::Bimodal {
        if a.members.is_empty() {
            a.members = vec![BIMODAL_MEMBERS];
        }
        a.messages.get_or_insert(BIMODAL_MESSAGES);
    }
    a
}

/// The command an experiment's tables begin with: each prints the settings it ran with as
/// the `rmcast sim` command that repeats it (rmtp follows it with a colon and a description).
fn command_of(tables: &Path) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(tables).with_context(|| format!("reading {}", tables.display()))?;
    let first = text.lines().next().unwrap_or_default();
    Ok(first.split(": ").next().unwrap_or_default().to_string())
}

/// The real-process forms of the papers' experiments (`--real`): a name, and the arguments
/// of this executable that run it. The figures docs/PAPERS.md gives in its real-process
/// column come from these commands.
pub const REAL: [(&str, &[&str]); 6] = [
    ("amoeba", &["bench", "--experiment", "amoeba"]),
    (
        "rmp-throughput",
        &[
            "bench",
            "--engine",
            "sequencer,ring",
            "--sizes",
            "64,1024",
            "--members",
            "3",
            "--senders",
            "1",
            "--duration",
            "3s",
        ],
    ),
    (
        "rmp-latency",
        &[
            "bench",
            "--engine",
            "sequencer,ring",
            "--sizes",
            "64",
            "--members",
            "8",
            "--rate",
            "1000",
            "--only",
            "rmcast",
            "--duration",
            "3s",
        ],
    ),
    (
        "pbcast",
        &[
            "bench",
            "--engine",
            "gossip,sequencer",
            "--members",
            "16",
            "--senders",
            "1",
            "--rate",
            "200",
            "--sizes",
            "1024",
            "--perturb",
            "4:0.5",
            "--duration",
            "10s",
        ],
    ),
    ("txn", &["txn-bench"]),
    (
        "cost",
        &[
            "bench",
            "--experiment",
            "cost",
            "--engine",
            "sequencer,ring,gossip,tree,txn",
            "--duration",
            "3s",
        ],
    ),
];

/// Runs one real-process form, its output into `DIR/real-NAME.txt` (with `--plot
/// DIR/real-NAME.svg` where it draws one); whether it succeeded.
fn run_real(name: &str, argv: &[&str], dir: &Path) -> anyhow::Result<(bool, String)> {
    let exe = std::env::current_exe().context("finding this executable")?;
    let txt = dir.join(format!("real-{name}.txt"));
    let mut args: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
    if name == "amoeba" || name == "pbcast" {
        args.push("--plot".into());
        args.push(dir.join(format!("real-{name}.svg")).display().to_string());
    }
    let out = std::fs::File::create(&txt).with_context(|| format!("creating {}", txt.display()))?;
    let err = out.try_clone()?;
    let status = std::process::Command::new(exe)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .status()
        .with_context(|| format!("running rmcast {}", args.join(" ")))?;
    Ok((status.success(), format!("rmcast {}", args.join(" "))))
}

/// Runs every experiment into `dir`.
pub fn run(args: &SimArgs, threads: usize, dir: &Path) -> anyhow::Result<ExitCode> {
    let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
    parallel::draw_under(multi.clone());
    let real = if args.real { REAL.len() } else { 0 };
    let overall = multi.add(crate::bench::bar(
        Some((Experiment::EACH.len() + real) as u64),
        "experiments".into(),
    ));
    let start = Instant::now();
    let mut summary = Vec::new();
    let mut failed = Vec::new();
    for e in Experiment::EACH {
        overall.set_message(e.name());
        let t = Instant::now();
        let code = super::run_into(e, &args_for(e, args), threads, dir)?;
        let ok = code == ExitCode::SUCCESS;
        if !ok {
            failed.push(e.name());
        }
        let (txt, svg) = super::out_files(e, dir);
        summary.push(format!(
            "{:<8} {:>7.1} s  {:<6} {}  {}  (as {})",
            e.name(),
            t.elapsed().as_secs_f64(),
            if ok { "ok" } else { "FAILED" },
            txt.display(),
            svg.display(),
            command_of(&txt)?,
        ));
        overall.inc(1);
    }
    for (name, argv) in REAL.iter().take(real) {
        overall.set_message(format!("real processes: {name}"));
        let t = Instant::now();
        let (ok, command) = run_real(name, argv, dir)?;
        if !ok {
            failed.push(name);
        }
        summary.push(format!(
            "real-{name:<8} {:>7.1} s  {:<6} {}  (as {command})",
            t.elapsed().as_secs_f64(),
            if ok { "ok" } else { "FAILED" },
            dir.join(format!("real-{name}.txt")).display(),
        ));
        overall.inc(1);
    }
    overall.finish_and_clear();
    summary.push(format!(
        "all {} experiments in {:.1} s on {threads} thread(s); {}",
        Experiment::EACH.len() + real,
        start.elapsed().as_secs_f64(),
        if failed.is_empty() {
            "every run of every experiment passed".to_string()
        } else {
            format!("not every run passed in: {}", failed.join(", "))
        }
    ));
    let path = dir.join("summary.txt");
    let text = summary.join("\n") + "\n";
    std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    writeln!(stdout, "summary written to {}", path.display())?;
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::parse_args;
    use clap::ValueEnum;

    #[test]
    fn each_experiment_is_named_as_the_command_line_names_it() {
        for e in Experiment::value_variants() {
            let v = e.to_possible_value().expect("no variant is skipped");
            assert_eq!(v.get_name(), e.name());
        }
        // `all` runs every paper's experiment once: every other one but `cost` (not a paper's
        // figure, and hours at its 1,000 members).
        let mut each: Vec<&str> = Experiment::EACH.iter().map(|e| e.name()).collect();
        each.sort_unstable();
        each.dedup();
        assert_eq!(each.len(), Experiment::value_variants().len() - 2);
        assert!(!Experiment::EACH.contains(&Experiment::All));
        assert!(!Experiment::EACH.contains(&Experiment::Cost));
    }

    #[test]
    fn all_shrinks_bimodal_only_where_no_flag_says_otherwise() {
        let a = parse_args("--experiment all --out /tmp/x --plot one.svg");
        let b = args_for(Experiment::Bimodal, &a);
        assert_eq!(b.members, vec![BIMODAL_MEMBERS]);
        assert_eq!(b.messages, Some(BIMODAL_MESSAGES));
        assert_eq!(b.experiment, Some(Experiment::Bimodal));
        assert_eq!(b.plot, None);
        let r = args_for(Experiment::Rmp, &a);
        assert_eq!((r.members.clone(), r.messages), (Vec::new(), None));
        let given = parse_args("--experiment all --out /tmp/x --members 20 --messages 100");
        let b = args_for(Experiment::Bimodal, &given);
        assert_eq!((b.members, b.messages), (vec![20], Some(100)));
    }

    #[test]
    fn the_summary_names_the_command_an_experiment_printed_first() {
        let path = std::env::temp_dir().join(format!("rmcast-all-{}.txt", std::process::id()));
        std::fs::write(
            &path,
            "rmcast sim --experiment rmtp --messages 2048 --seed 0: 2048 packets\ntable\n",
        )
        .expect("temp file");
        let command = command_of(&path).expect("readable");
        std::fs::remove_file(&path).expect("removable");
        assert_eq!(
            command,
            "rmcast sim --experiment rmtp --messages 2048 --seed 0"
        );
    }

    /// The real-process commands stay valid as the command line changes (with the `--plot`
    /// that `run_real` adds to two of them).
    #[test]
    fn every_real_process_command_parses() {
        for (name, argv) in REAL {
            let mut args: Vec<&str> = vec!["rmcast"];
            args.extend(argv.iter());
            if name == "amoeba" || name == "pbcast" {
                args.extend(["--plot", "x.svg"]);
            }
            if let Err(e) = crate::cli_command().try_get_matches_from(&args) {
                panic!("real-{name}: {e}");
            }
        }
        assert!(parse_args("--experiment all --out /tmp/x --real").real);
    }

    #[test]
    fn out_needs_an_experiment_and_all_needs_out() {
        assert!(crate::sim::try_parse_args(["sim", "--out", "/tmp/x"]).is_err());
        let a = parse_args("--experiment all");
        let e = crate::sim::run(a).unwrap_err();
        assert!(e.to_string().contains("--out"), "{e}");
    }
}
