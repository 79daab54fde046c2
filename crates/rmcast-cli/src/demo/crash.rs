//! `rmcast demo --kill-sequencer`: a real crash of the sequencer's process (with `--engine ring`,
//! the token site's that formed the current view), and the check that
//! the survivors recover without losing a completed message (see the module above for the
//! story). The demo follows the run through the members' logs as they are written (each worker
//! flushes its log every few milliseconds), and judges it from the logs alone afterwards.

use super::{check_exit, check_logs, log_path, member_args, member_spec, prepare, DemoArgs};
use crate::workers::{killed, worker_timeout, Running, WorkerOutcome};
use anyhow::Context;
use rmcast_proto::{Event, Recovery};
use rmcast_sim::log::{parse_log, wall_clock_ns, LogRecord, VerifyReport};
use serde::Serialize;
use std::collections::HashSet;
use std::fs::File;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long the survivors get to reset after the kill before the demo calls it failed (far
/// beyond the default detection time of about 1.2 s in a busy group plus a few protocol
/// rounds).
const RESET_BOUND: Duration = Duration::from_secs(15);
/// How long the group gets to form (every member in the view) before the demo gives up.
const FORM_BOUND: Duration = Duration::from_secs(15);

/// What the demo leaves beside the logs about the crash it caused: `crash.json`.
#[derive(Clone, Debug, Serialize)]
pub struct CrashRecord {
    /// The member killed (its node id, which is also its worker index).
    pub member: u32,
    /// Its process id.
    pub pid: u32,
    /// Wall clock just after SIGKILL was sent, ns since the UNIX epoch (the logs' clock).
    pub t_ns: u64,
    /// Wall clock when every member was in the view and the stream began, ns since the epoch.
    pub stream_start_ns: u64,
}

/// Complete lines of a log as it grows.
struct LogTail {
    path: PathBuf,
    file: Option<File>,
    pending: Vec<u8>,
}

impl LogTail {
    fn new(path: PathBuf) -> Self {
        LogTail {
            path,
            file: None,
            pending: Vec::new(),
        }
    }

    /// The records completed since the last call (none while the file does not exist yet).
    fn poll(&mut self) -> anyhow::Result<Vec<LogRecord>> {
        if self.file.is_none() {
            match File::open(&self.path) {
                Ok(f) => self.file = Some(f),
                Err(_) => return Ok(Vec::new()),
            }
        }
        let f = self.file.as_mut().expect("opened");
        f.read_to_end(&mut self.pending)
            .with_context(|| format!("reading {}", self.path.display()))?;
        let Some(end) = self.pending.iter().rposition(|b| *b == b'\n') else {
            return Ok(Vec::new());
        };
        let recs = parse_log(&self.pending[..=end])
            .with_context(|| format!("reading {}", self.path.display()))?;
        self.pending.drain(..=end);
        Ok(recs)
    }
}

/// What the demo follows of one member while the run goes on.
#[derive(Default)]
struct Watch {
    /// Saw a view with every member.
    full_view: bool,
    /// The sequencer of its latest view.
    coordinator: u32,
    /// Wrote a `reset` line.
    reset: bool,
}

impl Watch {
    fn feed(&mut self, rec: &LogRecord, members: usize) {
        match &rec.event {
            Event::View(v) => {
                self.full_view |= v.members.len() == members;
                self.coordinator = v.coordinator.0;
            }
            Event::Recovery(Recovery::Reset { .. }) => self.reset = true,
            _ => {}
        }
    }
}

enum Stage {
    /// Waiting for every member to see the full view.
    Forming { since: Instant },
    /// The stream runs; the kill comes at `kill_at`.
    Streaming { kill_at: Instant },
    /// The sequencer is dead; waiting for every survivor's reset.
    Recovering { since: Instant },
    /// Everyone reset; the stream goes on until `stop_at`.
    After { stop_at: Instant },
    /// The stop file is there; the workers finish by themselves.
    Stopping,
}

/// Follows the run from `tick`: kills the sequencer and stops the stream when it is time.
struct Director<'a> {
    members: usize,
    /// What the killed member is to the engine (the sequencer, the token site).
    role: &'static str,
    dir: &'a Path,
    kill_after: Duration,
    run_after: Duration,
    tails: Vec<LogTail>,
    watches: Vec<Watch>,
    stage: Stage,
    stream_start_ns: u64,
    crash: Option<CrashRecord>,
    /// What went wrong on the way (the verdict fails).
    problems: Vec<String>,
}

impl Director<'_> {
    fn stop_file(&self) -> PathBuf {
        self.dir.join("stop")
    }

    fn stop(&mut self) -> anyhow::Result<()> {
        let f = self.stop_file();
        std::fs::write(&f, b"stop\n").with_context(|| format!("writing {}", f.display()))?;
        self.stage = Stage::Stopping;
        Ok(())
    }

    fn tick(&mut self, running: &mut Running<'_>) -> anyhow::Result<()> {
        for (tail, watch) in self.tails.iter_mut().zip(self.watches.iter_mut()) {
            for rec in tail.poll()? {
                watch.feed(&rec, self.members);
            }
        }
        let now = Instant::now();
        match self.stage {
            Stage::Forming { since } => {
                if self.watches.iter().all(|w| w.full_view) {
                    self.stream_start_ns = wall_clock_ns();
                    println!(
                        "all {} members in the group: streaming; the {} dies in {:.1} s",
                        self.members,
                        self.role,
                        self.kill_after.as_secs_f64()
                    );
                    self.stage = Stage::Streaming {
                        kill_at: now + self.kill_after,
                    };
                } else if now >= since + FORM_BOUND {
                    self.problems.push(format!(
                        "the group did not form within {} s",
                        FORM_BOUND.as_secs()
                    ));
                    self.stop()?;
                }
            }
            Stage::Streaming { kill_at } if now >= kill_at => {
                // The sequencer as the members see it (the creator, member 1, unless a view
                // change moved the role).
                let seq = self.watches[0].coordinator;
                let index = seq as usize;
                let pid = running
                    .pid(index)
                    .with_context(|| format!("the {}, member {seq}, is not running", self.role))?;
                running.kill(index)?;
                let crash = CrashRecord {
                    member: seq,
                    pid,
                    t_ns: wall_clock_ns(),
                    stream_start_ns: self.stream_start_ns,
                };
                let path = self.dir.join("crash.json");
                std::fs::write(&path, serde_json::to_string(&crash)? + "\n")
                    .with_context(|| format!("writing {}", path.display()))?;
                println!(
                    "t+{:.2} s: killed member {seq} (the {}, pid {pid}) with SIGKILL",
                    (crash.t_ns - self.stream_start_ns) as f64 / 1e9,
                    self.role
                );
                self.crash = Some(crash);
                self.stage = Stage::Recovering { since: now };
            }
            Stage::Recovering { since } => {
                let killed = self.crash.as_ref().map_or(0, |c| c.member as usize);
                let all_reset = self
                    .watches
                    .iter()
                    .enumerate()
                    .all(|(i, w)| i + 1 == killed || w.reset);
                if all_reset {
                    println!(
                        "every survivor reset the group; the stream goes on for {:.1} s",
                        self.run_after.as_secs_f64()
                    );
                    self.stage = Stage::After {
                        stop_at: now + self.run_after,
                    };
                } else if now >= since + RESET_BOUND {
                    self.problems.push(format!(
                        "not every survivor reset the group within {} s of the kill",
                        RESET_BOUND.as_secs()
                    ));
                    self.stop()?;
                }
            }
            Stage::After { stop_at } if now >= stop_at => {
                println!("stopping the stream");
                self.stop()?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// One member's run, from its whole log.
#[derive(Default)]
struct MemberRun {
    deliveries_before: u64,
    deliveries_after: u64,
    completions: u64,
    failed_ns: Option<u64>,
    reset_ns: Option<u64>,
    incarnation: u32,
    removed: Vec<u32>,
    /// The first view after the reset: (members, sequencer).
    new_view: Option<(Vec<u32>, u32)>,
    /// Senders of data delivered after the reset.
    senders_after: HashSet<u32>,
    /// Deliveries between the stream's start and the kill.
    delivered_streaming: u64,
    /// Every message delivered: (sender, msg).
    delivered: HashSet<(u32, u64)>,
}

fn analyse(log: &[LogRecord], crash: &CrashRecord) -> MemberRun {
    let mut r = MemberRun::default();
    for rec in log {
        let t_ns = rec.t_ns;
        match &rec.event {
            Event::Deliver(d) => {
                r.delivered.insert((d.sender.0, d.msg));
                if r.reset_ns.is_some() {
                    r.deliveries_after += 1;
                    r.senders_after.insert(d.sender.0);
                } else {
                    r.deliveries_before += 1;
                }
                if (crash.stream_start_ns..crash.t_ns).contains(&t_ns) {
                    r.delivered_streaming += 1;
                }
            }
            Event::SendComplete { .. } => r.completions += 1,
            Event::Recovery(Recovery::Failed { .. }) => {
                r.failed_ns.get_or_insert(t_ns);
            }
            Event::Recovery(Recovery::Reset {
                incarnation,
                removed,
            }) if r.reset_ns.is_none() => {
                r.reset_ns = Some(t_ns);
                r.incarnation = *incarnation;
                r.removed = removed.iter().map(|m| m.0).collect();
            }
            Event::View(v) if r.reset_ns.is_some() && r.new_view.is_none() => {
                r.new_view = Some((v.members.iter().map(|m| m.0).collect(), v.coordinator.0));
            }
            _ => {}
        }
    }
    r
}

/// Milliseconds from the kill to `t_ns`.
fn since_kill_ms(t_ns: u64, crash: &CrashRecord) -> f64 {
    (t_ns as f64 - crash.t_ns as f64) / 1e6
}

/// What the member killed by `--kill-sequencer` is to its engine: the one that formed the
/// current view.
fn coordinator_role(engine: &str) -> &'static str {
    match engine {
        "sequencer" => "sequencer",
        "ring" => "token site",
        _ => "coordinator",
    }
}

/// Run `rmcast demo --kill-sequencer`, every message at `qos`.
pub fn run(
    args: &DemoArgs,
    members: u32,
    resilience: u8,
    qos: rmcast::Qos,
) -> anyhow::Result<ExitCode> {
    if members < 3 {
        anyhow::bail!(
            "--kill-sequencer needs at least 3 members: the survivors must be a majority of the group"
        );
    }
    // What the engine promises at this level across one failure: the logs are checked for it.
    let promised = rmcast_proto::catalog::EngineChoice::named(&args.engine)
        .expect("engine checked before")
        .resilience(resilience)
        .recovery(args.recovery.policy())
        .guarantees()
        .at_qos(qos);
    let role = coordinator_role(&args.engine);
    if !promised.crash_recovery {
        anyhow::bail!(
            "--kill-sequencer needs an engine with crash recovery; {} has none",
            args.engine
        );
    }
    if promised.resilience == 0 && !promised.majority_safe {
        anyhow::bail!(
            "--kill-sequencer needs a completed message to survive one crash: --resilience 1 or more (sequencer), or --qos k-resilient=1 or stronger (ring); with {} at {} a completed message may be held by the killed {role} alone",
            args.engine,
            qos
        );
    }
    let policy = args.recovery.policy();
    if policy.alive_interval_ms == 0 {
        anyhow::bail!("--kill-sequencer needs failure detection (--alive-interval-ms above 0)");
    }
    if policy.min_members as u32 > members - 1 {
        anyhow::bail!(
            "--min-members {} cannot be met by the {} survivors of --kill-sequencer",
            policy.min_members,
            members - 1
        );
    }
    println!(
        "rmcast demo --kill-sequencer: {members} member processes (resilience {resilience}), each streaming {} msgs/s of {} bytes; reset {}",
        args.rate,
        args.size,
        if policy.auto_reset { "automatic" } else { "by the application (--manual-reset)" }
    );
    let (group, dir, temp_dir) = prepare(args.log_dir.as_deref(), &args.net)?;
    let _ = std::fs::remove_file(dir.join("stop"));
    let _ = std::fs::remove_file(dir.join("crash.json"));

    let start = Instant::now();
    let worker_timeout = worker_timeout(Duration::from_secs(args.timeout_secs));
    let spec = member_spec(&group, members, &dir, start, args.timeout_secs);
    let member = member_args(args, members, resilience, qos, worker_timeout, &dir);
    let mut director = Director {
        members: members as usize,
        role,
        dir: &dir,
        kill_after: Duration::from_millis(args.kill_after_ms),
        run_after: Duration::from_millis(args.run_after_ms),
        tails: (1..=members as usize)
            .map(|i| LogTail::new(log_path(&dir, i)))
            .collect(),
        watches: (0..members).map(|_| Watch::default()).collect(),
        stage: Stage::Forming {
            since: Instant::now(),
        },
        stream_start_ns: 0,
        crash: None,
        problems: Vec::new(),
    };
    let stop_file = director.stop_file();
    let outcomes = spec.run(
        |index, cmd| {
            member.apply(index, cmd);
            cmd.args(["--rate", &args.rate.to_string()])
                .arg("--stop-file")
                .arg(&stop_file);
            if std::env::var_os("RMCAST_LOG").is_none() {
                // The workers say what they see of the crash in plain words; the runtime's
                // warnings about it would say it all again, three times.
                cmd.env("RMCAST_LOG", "error");
            }
        },
        |_, running| director.tick(running),
    )?;
    let wall = start.elapsed();
    let mut failures = std::mem::take(&mut director.problems);
    let Some(crash) = director.crash.take() else {
        failures.push(format!("the {role} was never killed"));
        return finish(&failures, None, &dir, temp_dir);
    };

    // Exit statuses: the killed member died by the signal, the others finished cleanly.
    let over = killed(&outcomes);
    if !over.is_empty() {
        failures.push(format!(
            "members {over:?} overran the deadline and were killed"
        ));
    }
    for w in &outcomes {
        if w.index == crash.member as usize {
            if !w.crashed {
                failures.push(format!("member {} was not killed", w.index));
            }
            continue;
        }
        check_exit(w, &mut failures);
    }

    // The independent check, from the logs alone.
    let (logs, report) = check_logs(&dir, &outcomes, &promised, &mut failures);
    if logs.len() != outcomes.len() {
        return finish(&failures, None, &dir, temp_dir);
    }
    let runs: Vec<MemberRun> = logs.iter().map(|l| analyse(l, &crash)).collect();
    let killed_index = crash.member as usize - 1;
    let survivors: Vec<usize> = (0..runs.len()).filter(|i| *i != killed_index).collect();
    let survivor_ids: HashSet<u32> = survivors.iter().map(|i| *i as u32 + 1).collect();

    // Every completed send, the killed member's included, at every survivor.
    let mut completed: Vec<(u32, u64)> = Vec::new();
    for log in &logs {
        for rec in log {
            if let Event::SendComplete { msg } = rec.event {
                completed.push((rec.member, msg));
            }
        }
    }
    let by_killed = completed.iter().filter(|(m, _)| *m == crash.member).count();
    for &i in &survivors {
        let r = &runs[i];
        let missing: Vec<&(u32, u64)> = completed
            .iter()
            .filter(|c| !r.delivered.contains(c))
            .collect();
        if !missing.is_empty() {
            failures.push(format!(
                "member {} never delivered {} completed messages, e.g. {:?}",
                i + 1,
                missing.len(),
                &missing[..missing.len().min(5)]
            ));
        }
        match r.reset_ns {
            None => failures.push(format!("member {} never reset the group", i + 1)),
            Some(_) if r.removed != [crash.member] => failures.push(format!(
                "member {}'s reset removed {:?}, not just the killed member {}",
                i + 1,
                r.removed,
                crash.member
            )),
            Some(_) => {}
        }
        if !survivor_ids.iter().all(|s| r.senders_after.contains(s)) {
            failures.push(format!(
                "member {} delivered nothing after the reset from members {:?}",
                i + 1,
                survivor_ids
                    .iter()
                    .filter(|s| !r.senders_after.contains(s))
                    .collect::<Vec<_>>()
            ));
        }
    }

    print_crash_table(args, members, &crash, &runs, &outcomes, &survivors, wall);
    println!(
        "completed sends: {} ({} by the killed member before it died), each delivered by {} of {} survivors",
        completed.len(),
        by_killed,
        if failures.iter().any(|f| f.contains("completed messages")) {
            "not all"
        } else {
            "all"
        },
        survivors.len()
    );
    finish(&failures, report.as_ref(), &dir, temp_dir)
}

fn finish(
    failures: &[String],
    report: Option<&VerifyReport>,
    dir: &Path,
    temp_dir: bool,
) -> anyhow::Result<ExitCode> {
    for f in failures {
        eprintln!("FAILED: {f}");
    }
    match (report, failures.is_empty()) {
        (Some(r), true) => {
            println!(
                "verdict: PASSED - one total order across {} logs (the killed member's cut short), {} deliveries of {} messages, {} completed sends checked at the members that saw their views end, {} reset",
                r.members, r.deliveries, r.messages, r.completions, r.resets
            );
            if temp_dir {
                let _ = std::fs::remove_dir_all(dir);
            } else {
                println!("logs and crash.json in {}", dir.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            println!("verdict: FAILED (see above)");
            eprintln!("logs kept in {}", dir.display());
            Ok(ExitCode::FAILURE)
        }
    }
}

fn print_crash_table(
    args: &DemoArgs,
    members: u32,
    crash: &CrashRecord,
    runs: &[MemberRun],
    outcomes: &[WorkerOutcome],
    survivors: &[usize],
    wall: Duration,
) {
    let streaming_s = (crash.t_ns.saturating_sub(crash.stream_start_ns)) as f64 / 1e9;
    println!();
    println!(
        "stream: {} msgs/s from each of {members} members ({} msgs/s in all) for {streaming_s:.2} s before the crash",
        args.rate,
        args.rate * members as u64,
    );
    if let Some(&first) = survivors.first() {
        println!(
            "        {:.0} msgs/s delivered at member {} meanwhile",
            runs[first].delivered_streaming as f64 / streaming_s.max(1e-9),
            first + 1
        );
    }
    println!(
        "crash:  member {} (the {}, pid {}) killed with SIGKILL {streaming_s:.2} s into the stream",
        crash.member,
        coordinator_role(&args.engine),
        crash.pid
    );
    println!();
    println!(
        "{:>6}  {:<18} {:>9} {:>9} {:>11} {:>11}  new group",
        "member", "role", "before", "after", "failed at", "reset at"
    );
    for (i, r) in runs.iter().enumerate() {
        let id = i as u32 + 1;
        let at = |t: Option<u64>| {
            t.map_or("-".to_string(), |t| {
                format!("{:+.0} ms", since_kill_ms(t, crash))
            })
        };
        if id == crash.member {
            println!(
                "{:>6}  {:<18} {:>9} {:>9} {:>11} {:>11}  log cut by the kill ({} completed sends logged)",
                id,
                format!("killed {}", coordinator_role(&args.engine)),
                r.deliveries_before,
                "-",
                "-",
                "-",
                r.completions
            );
            continue;
        }
        let status = outcomes
            .iter()
            .find(|w| w.index == i + 1)
            .and_then(|w| w.status)
            .map_or("no exit status".to_string(), |s| {
                if s.success() {
                    String::new()
                } else {
                    format!(", {s}")
                }
            });
        let new_group = r.new_view.as_ref().map_or("-".to_string(), |(ms, seq)| {
            format!(
                "incarnation {}, members {ms:?}, {} {seq}{status}",
                r.incarnation,
                coordinator_role(&args.engine)
            )
        });
        println!(
            "{:>6}  {:<18} {:>9} {:>9} {:>11} {:>11}  {new_group}",
            id,
            "survivor",
            r.deliveries_before,
            r.deliveries_after,
            at(r.failed_ns),
            at(r.reset_ns)
        );
    }
    let recovery: Vec<f64> = survivors
        .iter()
        .filter_map(|&i| runs[i].reset_ns.map(|t| since_kill_ms(t, crash)))
        .collect();
    println!();
    if recovery.len() == survivors.len() && !recovery.is_empty() {
        let max = recovery.iter().cloned().fold(f64::MIN, f64::max);
        let min = recovery.iter().cloned().fold(f64::MAX, f64::min);
        println!(
            "recovery time (kill to reset, from the logs' clocks): {min:.0} to {max:.0} ms at the {} survivors",
            survivors.len()
        );
    } else {
        println!("recovery time: not every survivor reset");
    }
    println!(
        "messages delivered before / after the reset: {} / {} at each survivor (median); wall time {:.1} s",
        median(survivors.iter().map(|&i| runs[i].deliveries_before)),
        median(survivors.iter().map(|&i| runs[i].deliveries_after)),
        wall.as_secs_f64()
    );
}

fn median(v: impl Iterator<Item = u64>) -> u64 {
    let mut v: Vec<u64> = v.collect();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}
