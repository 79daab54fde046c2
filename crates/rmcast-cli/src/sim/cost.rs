//! `rmcast sim --experiment cost`: what one message costs as the group grows, for every engine
//! of the registry. One sender multicasts `--messages` messages of 64 bytes at 100 msgs/s to
//! groups of 10, 100, 250 and 1,000 members (or `--members`, up to 10,000 and beyond for the
//! engines whose limit allows it), on a lossless 1 ms network.
//!
//! A message's cost is what a run with it costs more than the same run without it: each point
//! is two runs of the same seed, one with a single message and one with `messages + 1`, which
//! form the same group the same way (the simulator is deterministic), so that formation, which
//! grows with the group much faster than the messages do, cancels out. The sender starts only
//! once the group has formed (every member in one view of all: `Workload::after_formation`),
//! and the counting starts then: with a fixed start, a group of 1,000 was still admitting
//! members when the messages began, and a joiner admitted after them was brought up to date
//! with them, which only the run with the messages paid. Per message:
//!
//! - **datagrams sent** by every member together (the simulator's count since the workload
//!   started, failure-detection probes left out), and per member;
//! - **CPU per delivery**: the simulating thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) over
//!   the deliveries at all members; the simulator's own work (event queue, records) is in it,
//!   so it is an upper bound on the engines' cost, comparable between engines and sizes.
//!
//! What the papers predict, per message: Amoeba's PB method two datagrams (the request to the
//! sequencer, its broadcast), whatever the group; RMP one multicast and one token ACK; Pbcast a
//! constant cost per member (fanout digests a round at each member, whatever n); RMTP a sender
//! whose ACK load is bounded by the designated receivers (in this flat network every receiver
//! is one, so it grows with n); the Multidriver one request and an answer from every receiver.

use super::args::SimArgs;
use super::parallel::run_parallel;
use crate::plot::{Panel, Series};
use anyhow::bail;
use plotters::chart::SeriesLabelPosition;
use rmcast_proto::catalog;
use rmcast_sim::{checkers, figures, simulate, EngineChoice, Scenario};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// Group sizes when `--members` does not say.
pub const SIZES: [u32; 4] = [10, 100, 250, 1000];
/// Messages per point when `--messages` does not say.
pub const MESSAGES: u64 = 200;
/// The sender's rate, msgs/s (open loop: below what any engine carries at 1,000 members).
const RATE: f64 = 100.0;

/// One point: an engine at a group size.
#[derive(Clone, Debug)]
struct Job {
    engine: String,
    members: u32,
    messages: u64,
    seed: u64,
}

/// What a point measured (the run with the messages less the run without them).
#[derive(Clone, Debug)]
struct Cost {
    job: Job,
    /// The checkers' complaints about the run with the messages (empty: it passed).
    failed: Vec<String>,
    /// Deliveries at all members, of the added messages.
    deliveries: u64,
    /// Datagrams sent by all members, for the added messages.
    datagrams: u64,
    /// CPU time spent on them.
    cpu: Duration,
}

impl Job {
    fn scenario(&self, messages: u64) -> Result<Scenario, String> {
        let mut engine = if self.engine == "txn" {
            // X_MRopen with `max` the group's receivers, as the Multidriver's measurements open
            // theirs: the open is decided once every receiver answered. With the default `max`
            // (64) every transaction in a smaller group waited out the open's timer (500 ms),
            // repeating its FIRST meanwhile, and that was most of its datagrams.
            let cfg = rmcast_proto::txn::Config {
                max_receivers: (self.members as usize).saturating_sub(1).max(1),
                ..rmcast_proto::txn::Config::default()
            };
            EngineChoice::custom(std::sync::Arc::new(
                rmcast_proto::txn::TxnFactory::with_config(cfg),
            ))
        } else {
            EngineChoice::named(&self.engine).map_err(|e| e.to_string())?
        };
        // No faults here: failure detection off, as the paper experiments run (a gossip group
        // of 1,000 would otherwise need a longer silence timeout than the default).
        engine.settings.recovery.alive_interval_ms = 0;
        let sc = Scenario {
            engine,
            members: self.members,
            senders: 1,
            messages,
            message_bytes: 64,
            rate: Some(RATE),
            latency_ms: 1.0,
            min_members: 1,
            ..Scenario::default()
        };
        sc.validate()?;
        Ok(sc)
    }

    /// The two runs and their difference; the error names a bad setting.
    fn measure(&self) -> Result<Cost, String> {
        self.measure_from(true)
    }

    /// [`Job::measure`], the workload started once the group has formed or (`false`, the
    /// tests' comparison) at its fixed start, 50 ms in, whatever the group.
    fn measure_from(&self, after_formation: bool) -> Result<Cost, String> {
        // `Scenario::config` raises the simulator's bounds with the group (`Limits::for_members`).
        let config = |messages| -> Result<_, String> {
            let mut c = self.scenario(messages)?.config(self.seed);
            c.workload.after_formation = after_formation;
            Ok(c)
        };
        let (one, more) = (config(1)?, config(self.messages + 1)?);
        let t0 = crate::cpu::thread_cpu();
        let base = simulate(&one);
        let t1 = crate::cpu::thread_cpu();
        let rec = simulate(&more);
        let t2 = crate::cpu::thread_cpu();
        let (fa, fb) = (figures::figures(&base), figures::figures(&rec));
        let failed = checkers::check_all(&rec)
            .into_iter()
            .filter_map(|(name, v)| {
                v.err().map(|e| {
                    let first = e.first().map(|v| v.to_string()).unwrap_or_default();
                    format!("{name}: {first}")
                })
            })
            .collect();
        Ok(Cost {
            job: self.clone(),
            failed,
            deliveries: fb.deliveries.saturating_sub(fa.deliveries),
            datagrams: fb.datagrams.saturating_sub(fa.datagrams),
            cpu: (t2 - t1).saturating_sub(t1 - t0),
        })
    }
}

/// The largest group `engine` takes by default, where it has a limit below the sizes here:
/// the sequencer's and the ring's `max_members` (the txn's set is opened for the whole group).
fn limit(engine: &str) -> Option<u32> {
    match engine {
        "sequencer" => Some(rmcast_proto::sequencer::Config::new(0).max_members as u32),
        "ring" => Some(rmcast_proto::ring::Config::default().max_members as u32),
        _ => None,
    }
}

/// What the paper of `engine` predicts for datagrams per message in a group of `n`.
pub(crate) fn predicted(engine: &str, n: u32) -> String {
    match engine {
        "sequencer" => "2 (PB)".into(),
        "ring" => "2".into(),
        "gossip" => "const. per member".into(),
        "tree" => format!("1 + ACKs <= {}", n - 1),
        "txn" => format!("1 + {}", n - 1),
        _ => "-".into(),
    }
}

/// Runs the experiment on `threads` threads.
pub fn run(args: &SimArgs, threads: usize, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let sizes: Vec<u32> = if args.members.is_empty() {
        SIZES.to_vec()
    } else {
        args.members.clone()
    };
    let messages = args.messages.unwrap_or(MESSAGES);
    if messages == 0 {
        bail!("--messages must be at least 1");
    }
    let seed = args.seed.unwrap_or(0);
    let engines: Vec<&str> = match &args.engine {
        Some(e) => vec![e.as_str()],
        None => catalog::names(),
    };
    let mut jobs = Vec::new();
    for e in &engines {
        for &members in &sizes {
            if limit(e).is_some_and(|l| members > l) {
                continue;
            }
            jobs.push(Job {
                engine: e.to_string(),
                members,
                messages,
                seed,
            });
        }
    }
    if jobs.is_empty() {
        bail!(
            "no point to measure: {} takes at most {} members (--members {})",
            engines.join(", "),
            engines.iter().filter_map(|e| limit(e)).min().unwrap_or(0),
            sizes
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    writeln!(out, "rmcast sim --experiment cost")?;
    writeln!(
        out,
        "one sender multicasts {messages} messages of 64 bytes at {RATE} msgs/s once the group \
         has formed; 1 ms latency, no loss, failure detection off; each point is the run with \
         the messages less the same run (same seed) with one message, so that group formation \
         cancels out"
    )?;
    // The largest groups first, so that the long runs do not end the experiment alone.
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(jobs[i].members));
    let sorted: Vec<Job> = order.iter().map(|&i| jobs[i].clone()).collect();
    let mut results: Vec<Result<Cost, String>> = run_parallel(&sorted, threads, Job::measure);
    // Back to the table's order.
    let mut by_job: Vec<Option<Result<Cost, String>>> = vec![None; jobs.len()];
    for (k, &i) in order.iter().enumerate().rev() {
        by_job[i] = Some(results.remove(k));
    }
    writeln!(
        out,
        "\n{:<10} {:>7} {:>14} {:>18} {:>18} {:>20}  checkers",
        "engine",
        "members",
        "datagrams/msg",
        "datagrams/msg/mbr",
        "CPU us/delivery",
        "paper datagrams/msg",
    )?;
    let mut ok = true;
    // Every passed point: (engine, members, datagrams a message, CPU µs a delivery).
    let mut measured: Vec<Point> = Vec::new();
    for (job, r) in jobs.iter().zip(by_job.into_iter().flatten()) {
        match r {
            Err(e) => {
                ok = false;
                writeln!(out, "{:<10} {:>7}  error: {e}", job.engine, job.members)?;
            }
            Ok(c) => {
                let m = c.job.messages as f64;
                let per_msg = c.datagrams as f64 / m;
                let cpu_us = if c.deliveries > 0 {
                    c.cpu.as_secs_f64() * 1e6 / c.deliveries as f64
                } else {
                    f64::NAN
                };
                let verdict = if c.failed.is_empty() {
                    measured.push(Point {
                        engine: job.engine.clone(),
                        members: job.members,
                        per_msg,
                        cpu_us,
                    });
                    "passed".to_string()
                } else {
                    ok = false;
                    format!("FAILED {}", c.failed.join("; "))
                };
                writeln!(
                    out,
                    "{:<10} {:>7} {:>14.2} {:>18.3} {:>18.2} {:>20}  {}",
                    job.engine,
                    job.members,
                    per_msg,
                    per_msg / job.members as f64,
                    cpu_us,
                    predicted(&job.engine, job.members),
                    verdict
                )?;
            }
        }
    }
    for e in &engines {
        if let Some(l) = limit(e).filter(|&l| sizes.iter().any(|&m| m > l)) {
            writeln!(out, "(not run: {e} beyond {l} members, its default limit)")?;
        }
    }
    let mut points = measured;
    if let Some(file) = &args.points {
        points = Point::merge(Point::read(file)?, points);
        Point::write(file, &points)?;
        writeln!(out, "\n{} points kept in {}", points.len(), file.display())?;
    }
    if let Some(path) = &args.plot {
        let (per_member, cpu) = Point::series(&points);
        let mut drawn: Vec<u32> = points.iter().map(|p| p.members).collect();
        drawn.sort_unstable();
        drawn.dedup();
        plot(
            path,
            &drawn,
            &per_member,
            &cpu,
            "CPU per delivery (simulator included)",
        )?;
        writeln!(out, "\nfigure written to {}", path.display())?;
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// A point that passed: what the figure draws, and what `--points` keeps.
#[derive(Clone, Debug, PartialEq)]
struct Point {
    engine: String,
    members: u32,
    /// Datagrams a message, all members together.
    per_msg: f64,
    /// CPU µs a delivery.
    cpu_us: f64,
}

impl Point {
    /// The points kept in `file` (none if it does not exist yet).
    fn read(file: &std::path::Path) -> anyhow::Result<Vec<Point>> {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => bail!("--points {}: {e}", file.display()),
        };
        let mut points = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            let bad = || {
                anyhow::anyhow!(
                    "--points {} line {}: expected `engine members datagrams/msg cpu-us`, got `{line}`",
                    file.display(),
                    i + 1
                )
            };
            let [engine, members, per_msg, cpu_us] = f[..] else {
                return Err(bad());
            };
            points.push(Point {
                engine: engine.to_string(),
                members: members.parse().map_err(|_| bad())?,
                per_msg: per_msg.parse().map_err(|_| bad())?,
                cpu_us: cpu_us.parse().map_err(|_| bad())?,
            });
        }
        Ok(points)
    }

    fn write(file: &std::path::Path, points: &[Point]) -> anyhow::Result<()> {
        let mut text = String::from(
            "# rmcast sim --experiment cost --points: engine, members, datagrams a message, CPU us a delivery\n",
        );
        for p in points {
            text.push_str(&format!(
                "{} {} {:.3} {:.3}\n",
                p.engine, p.members, p.per_msg, p.cpu_us
            ));
        }
        std::fs::write(file, text).map_err(|e| anyhow::anyhow!("--points {}: {e}", file.display()))
    }

    /// `kept` with `new` in: a point of the same engine and size replaces the kept one.
    fn merge(kept: Vec<Point>, new: Vec<Point>) -> Vec<Point> {
        let mut all: Vec<Point> = kept
            .into_iter()
            .filter(|k| {
                !new.iter()
                    .any(|n| n.engine == k.engine && n.members == k.members)
            })
            .collect();
        all.extend(new);
        all.sort_by(|a, b| (&a.engine, a.members).cmp(&(&b.engine, b.members)));
        all
    }

    /// The figure's series: datagrams a message per member (without the txn, whose 4 a member
    /// would flatten every other curve: the table has it) and CPU per delivery, against the
    /// group size (log10), an engine each.
    fn series(points: &[Point]) -> (Vec<Series>, Vec<Series>) {
        let (mut per_member, mut cpu): (Vec<Series>, Vec<Series>) = (Vec::new(), Vec::new());
        let add = |v: &mut Vec<Series>, name: &str, xy: (f64, f64)| match v
            .iter_mut()
            .find(|s| s.name == name)
        {
            Some(s) => s.points.push(xy),
            None => v.push(Series {
                name: name.to_string(),
                points: vec![xy],
            }),
        };
        for p in points {
            let x = f64::from(p.members).log10();
            if p.engine != "txn" {
                add(
                    &mut per_member,
                    &p.engine,
                    (x, p.per_msg / f64::from(p.members)),
                );
            }
            add(&mut cpu, &p.engine, (x, p.cpu_us));
        }
        (per_member, cpu)
    }
}

/// The experiment's figure, in the simulator and on real processes alike: datagrams a message
/// per member (`per_member`, without the txn, whose 4 a receiver would flatten every other
/// curve) and CPU per delivery (`cpu`, titled `cpu_title`), each engine a series against the
/// group size (log10), beside Amoeba's and RMP's two datagrams a message.
pub(crate) fn plot(
    path: &std::path::Path,
    sizes: &[u32],
    per_member: &[Series],
    cpu: &[Series],
    cpu_title: &str,
) -> anyhow::Result<()> {
    let two: Vec<(f64, f64)> = sizes
        .iter()
        .map(|&n| (f64::from(n).log10(), 2.0 / f64::from(n)))
        .collect();
    let references = [Series {
        name: "2 per message (Amoeba PB, RMP)".into(),
        points: two,
    }];
    crate::plot::panels(
        path,
        &[
            Panel {
                title: "Datagrams sent per message, per member (txn off the scale: see the table)",
                x_label: "members (log10)",
                y_label: "datagrams / message / member",
                series: per_member,
                references: &references,
                markers: true,
                legend: SeriesLabelPosition::UpperRight,
            },
            Panel {
                title: cpu_title,
                x_label: "members (log10)",
                y_label: "us / delivery",
                series: cpu,
                references: &[],
                markers: true,
                legend: SeriesLabelPosition::UpperLeft,
            },
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One point, seed 1, which must pass every checker.
    fn point(engine: &str, members: u32, messages: u64) -> Cost {
        let job = Job {
            engine: engine.into(),
            members,
            messages,
            seed: 1,
        };
        let c = job.measure().expect("a valid point");
        assert!(c.failed.is_empty(), "{:?}", c.failed);
        c
    }

    #[test]
    fn the_sequencer_sends_two_datagrams_a_message_and_formation_cancels_out() {
        let c = point("sequencer", 10, 20);
        // Every member (the sender too) delivers each added message once.
        assert_eq!(c.deliveries, 20 * 10);
        // Amoeba's PB method: the request to the sequencer and its broadcast, nothing of the
        // group's formation.
        assert_eq!(c.datagrams, 2 * 20, "{c:?}");
    }

    #[test]
    fn the_workload_starts_once_the_group_has_formed_so_the_sequencer_costs_two() {
        // 100 members joining 1 ms apart and 1,000 messages: with the fixed start (50 ms) the
        // messages begin while members still join, and a member that delivered 24 join
        // entries before the sync that confirms them reaches 1,024 deliveries with the
        // messages and reports its state (BC_STATE) for them. Started once the group has
        // formed and that sync is done, the messages alone cost Amoeba's two.
        let job = Job {
            engine: "sequencer".into(),
            members: 100,
            messages: 1000,
            seed: 1,
        };
        let formed = job.measure().expect("a valid point");
        assert!(formed.failed.is_empty(), "{:?}", formed.failed);
        assert_eq!(formed.deliveries, 1000 * 100);
        assert_eq!(formed.datagrams, 2 * 1000, "{formed:?}");
        let fixed = job.measure_from(false).expect("a valid point");
        assert!(fixed.failed.is_empty(), "{:?}", fixed.failed);
        assert!(fixed.datagrams > 2 * 1000, "the old start: {fixed:?}");
    }

    #[test]
    fn a_transaction_costs_a_few_datagrams_a_receiver_not_its_open_timer() {
        let c = point("txn", 10, 10);
        // The open is decided once the 9 receivers answered: a handful of control packets a
        // receiver (open, held, delivered, closed) and the source's few multicasts. Waiting
        // out the open's timer instead repeated the FIRST and cost about 34 a receiver.
        let per_receiver = c.datagrams as f64 / (10.0 * 9.0);
        assert!(per_receiver < 6.0, "{per_receiver} a receiver: {c:?}");
    }

    #[test]
    fn engine_picks_its_points_and_a_size_past_its_limit_is_named() {
        let mut out = Vec::new();
        let args = crate::sim::parse_args(
            "--experiment cost --engine sequencer --members 10 --messages 5",
        );
        run(&args, 1, &mut out).expect("one point");
        let table = String::from_utf8(out).expect("text");
        let rows: Vec<&str> = table.lines().filter(|l| l.ends_with("passed")).collect();
        assert_eq!(rows.len(), 1, "{table}");
        assert!(rows[0].starts_with("sequencer"), "{table}");
        let args = crate::sim::parse_args("--experiment cost --engine ring --members 2000");
        let err = run(&args, 1, &mut Vec::new()).expect_err("past the ring's limit");
        assert!(err.to_string().contains("at most 1024 members"), "{err}");
    }

    #[test]
    fn kept_points_round_trip_a_point_measured_again_replaces_its_line_and_a_bad_line_is_named() {
        let dir = std::env::temp_dir().join(format!("rmcast-cost-points-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("points.txt");
        let _ = std::fs::remove_file(&file);
        let p = |engine: &str, members, per_msg, cpu_us| Point {
            engine: engine.to_string(),
            members,
            per_msg,
            cpu_us,
        };
        assert_eq!(Point::read(&file).unwrap(), vec![]);
        let first = vec![
            p("gossip", 10000, 2000.45, 32.36),
            p("tree", 10, 3.54, 2.08),
        ];
        Point::write(&file, &first).unwrap();
        let again = Point::merge(
            Point::read(&file).unwrap(),
            vec![p("tree", 10, 3.5, 2.0), p("gossip", 10, 3.02, 1.27)],
        );
        assert_eq!(
            again,
            vec![
                p("gossip", 10, 3.02, 1.27),
                p("gossip", 10000, 2000.45, 32.36),
                p("tree", 10, 3.5, 2.0),
            ]
        );
        let (per_member, cpu) = Point::series(&again);
        assert_eq!(per_member.len(), 2);
        assert_eq!(per_member[0].points, vec![(1.0, 0.302), (4.0, 0.200045)]);
        assert_eq!(cpu[1].points, vec![(1.0, 2.0)]);
        std::fs::write(&file, "# kept\ngossip 10 3.02\n").unwrap();
        let e = Point::read(&file).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("gossip 10 3.02"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
