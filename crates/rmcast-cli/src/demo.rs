//! `rmcast demo`: a real multi-process run on this host, checked independently.
//!
//! Starts `--members` worker processes of this very executable (`rmcast worker`): the first
//! creates a fresh group (a new name, hence a new multicast address and port, per run, so that
//! concurrent runs do not meet), the others join once it is up. Each sends `--messages`
//! messages at once while receiving everything, writes a `--log`, and prints its figures. The
//! demo then checks the logs with [`rmcast_sim::log::verify_logs`] (same messages, same total order
//! at every member) and prints a summary table.
//!
//! With `--kill-sequencer` it is a crash test instead (Amoeba paper section 5.3): four members
//! (resilience 1) stream messages at `--rate` each; after `--kill-after` the demo kills the
//! sequencer's process with SIGKILL; the survivors notice, reset the group without it and go
//! on; `--run-after` after the last of them reset, the demo stops the stream. It then checks
//! the logs (the killed member's, cut short, included): one total order, and every completed
//! send, the killed member's too, delivered by every survivor. It prints the stream rate, the
//! moment of the crash, the recovery time at each survivor (from the kill to its `reset` log
//! line, by the logs' wall-clock times) and the messages before and after, and leaves
//! `crash.json` (who was killed, when) beside the logs for other checkers.
//!
//! Every child ends by itself (its own timeout); should one overrun the demo's deadline anyway,
//! the demo kills it, by its own handle and no other process.

mod crash;

use crate::member::{parse_engine, NetArgs, RecoveryArgs, ENGINE_HELP};
use crate::workers::{
    fresh_group_name, killed, member_log_path, worker_timeout, MemberArgs, WorkerOutcome,
    WorkerSpec, WorkerStderr,
};
use anyhow::{bail, Context};
use clap::Args;
use rmcast_sim::log::{read_log, verify_logs_for, LogRecord, VerifyReport};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Arguments of `rmcast demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Member processes to start [default: 3; 4 with --kill-sequencer].
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub members: Option<u32>,
    /// Messages each member sends (not with --kill-sequencer, which streams for a time).
    #[arg(long, default_value_t = 2000, conflicts_with = "kill_sequencer")]
    pub messages: u64,
    /// Bytes per message (at least 20: sender, counter and send time travel in each).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(crate::worker::PAYLOAD_HEADER_BYTES as u64..=1 << 20))]
    pub size: u64,
    #[arg(short = 'e', long, default_value = "sequencer", value_parser = parse_engine, help = ENGINE_HELP)]
    pub engine: String,
    /// The quality of service of every message (see `rmcast member --help`) [default: the
    /// strongest delivery order the engine serves: totally-ordered, or for an engine that does
    /// not serve it the strongest level below (gossip: source-ordered)].
    #[arg(long, value_parser = crate::member::parse_qos)]
    pub qos: Option<rmcast::Qos>,
    /// Resilience degree r of the sequencer, at most members - 1 [default: 0; 1 with
    /// --kill-sequencer].
    #[arg(long)]
    pub resilience: Option<u8>,
    /// Largest datagram the engine writes, 256..=65507 [default: the interface's MTU less the
    /// IP and UDP headers: 65507 on loopback, 1472 on Ethernet].
    #[arg(long, value_parser = crate::member::parse_max_datagram)]
    pub max_datagram_bytes: Option<usize>,
    /// Give up after this long (a bare number: seconds).
    #[arg(long = "timeout", alias = "timeout-secs", default_value = "40s", value_name = "DURATION", value_parser = crate::dur::secs(1, 86_400))]
    pub timeout_secs: u64,
    /// Keep the members' logs in this directory (default: a temporary one, removed on success).
    #[arg(long)]
    pub log_dir: Option<PathBuf>,
    /// Also write the result as one JSON object to this file: the run's settings, each
    /// member's figures (as the table shows them), what was verified and every failure.
    #[arg(long, conflicts_with = "kill_sequencer")]
    pub json: Option<PathBuf>,
    /// Crash test: stream from every member, kill the sequencer's process with SIGKILL (with
    /// --engine ring: the token site that formed the current view; --qos k-resilient=1 or
    /// stronger), and check that the survivors reset the group and lose no completed message.
    #[arg(long)]
    pub kill_sequencer: bool,
    /// Messages per second each member streams (--kill-sequencer).
    #[arg(long, default_value_t = 500, requires = "kill_sequencer",
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub rate: u64,
    /// How long the stream runs before the kill (a bare number: milliseconds; --kill-sequencer).
    #[arg(long = "kill-after", alias = "kill-after-ms", default_value = "2s", value_name = "DURATION", value_parser = crate::dur::ms(0, 600_000), requires = "kill_sequencer")]
    pub kill_after_ms: u64,
    /// How long the stream goes on after the last survivor reset, in milliseconds
    /// (--kill-sequencer).
    #[arg(long = "run-after", alias = "run-after-ms", default_value = "2s", value_name = "DURATION", value_parser = crate::dur::ms(0, 600_000), requires = "kill_sequencer")]
    pub run_after_ms: u64,
    #[command(flatten)]
    pub recovery: RecoveryArgs,
    #[command(flatten)]
    pub net: NetArgs,
    #[command(flatten)]
    pub keys: crate::keys::KeyArgs,
}

/// Run `rmcast demo`.
pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let members = args
        .members
        .unwrap_or(if args.kill_sequencer { 4 } else { 3 });
    let resilience = args.resilience.unwrap_or(u8::from(args.kill_sequencer));
    let qos = crate::member::qos_or_default(args.qos, &args.engine, resilience)?;
    // A bad key file is said here, once, rather than by every member.
    args.keys.resolved().keyring()?;
    if resilience as u32 >= members {
        bail!(
            "--resilience {resilience} needs at least {} members",
            resilience as u32 + 1
        );
    }
    if args.kill_sequencer {
        return crash::run(&args, members, resilience, qos);
    }
    println!(
        "rmcast demo: {members} member processes, {} messages of {} bytes each, {} engine (resilience {resilience})",
        args.messages, args.size, args.engine
    );
    let (group, dir, temp_dir) = prepare(args.log_dir.as_deref(), &args.net)?;

    let start = Instant::now();
    let worker_timeout = worker_timeout(Duration::from_secs(args.timeout_secs));
    let spec = member_spec(&group, members, &dir, start, args.timeout_secs);
    let member = member_args(&args, members, resilience, qos, worker_timeout, &dir);
    // Where only the group's creator may send (the tree: one sender, many receivers), member 1
    // sends every message and the others expect them; elsewhere every member sends.
    let one_sender = rmcast_proto::catalog::EngineChoice::named(&args.engine)
        .expect("engine checked above")
        .guarantees()
        .senders
        == rmcast_proto::Senders::Creator;
    let outcomes = spec.run(
        |index, cmd| {
            member.apply(index, cmd);
            if one_sender {
                let count = if index == 1 { args.messages } else { 0 };
                cmd.args(["--count", &count.to_string()])
                    .args(["--expect", &args.messages.to_string()]);
            } else {
                cmd.args(["--count", &args.messages.to_string()]);
            }
        },
        |_, _| Ok(()),
    )?;
    let wall = start.elapsed();

    let mut failures: Vec<String> = Vec::new();
    let killed = killed(&outcomes);
    if !killed.is_empty() {
        failures.push(format!(
            "members {} overran the deadline and were killed",
            killed
                .iter()
                .map(|k| k.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    for w in &outcomes {
        check_exit(w, &mut failures);
    }

    // The independent check: the logs alone must show what the engine promises at this level.
    let promised = rmcast_proto::catalog::EngineChoice::named(&args.engine)
        .expect("engine checked above")
        .resilience(resilience)
        .guarantees()
        .at_qos(qos);
    let (_, report) = check_logs(&dir, &outcomes, &promised, &mut failures);

    let senders = if one_sender { 1 } else { members };
    print_table(&args, members, senders, &outcomes, wall);
    for f in &failures {
        eprintln!("FAILED: {f}");
    }
    if let Some(path) = &args.json {
        let verified = report.as_ref().filter(|_| failures.is_empty()).map(|r| {
            serde_json::json!({
                "members": r.members,
                "deliveries": r.deliveries,
                "messages": r.messages,
                "views": r.views,
            })
        });
        let out = serde_json::json!({
            "engine": args.engine,
            "qos": qos.to_string(),
            "resilience": resilience,
            "members": members,
            "senders": senders,
            "messages_per_sender": args.messages,
            "size": args.size,
            "wall_s": wall.as_secs_f64(),
            "ok": failures.is_empty() && report.is_some(),
            "verified": verified,
            "failures": failures,
            "workers": outcomes.iter().map(|w| &w.stats).collect::<Vec<_>>(),
        });
        std::fs::write(path, format!("{out}\n"))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    match (&report, failures.is_empty()) {
        (Some(r), true) => {
            // Say what the logs were checked for: what the level promises.
            let what = match (promised.order, promised.delivery) {
                (rmcast_proto::Order::Total, _) => "total order",
                (rmcast_proto::Order::Fifo, rmcast_proto::DeliveryPromise::AllOrNothing) => {
                    "FIFO order and agreement"
                }
                // Probabilistic delivery: what a member did not deliver it reported lost.
                (rmcast_proto::Order::Fifo, _) => "FIFO order",
                (_, rmcast_proto::DeliveryPromise::AllOrNothing) => "agreement",
                _ => "integrity (no duplicate, nothing invented)",
            };
            println!(
                "{what} verified across {} processes ({} deliveries of {} messages, {} views)",
                r.members, r.deliveries, r.messages, r.views
            );
            if temp_dir {
                let _ = std::fs::remove_dir_all(&dir);
            }
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            eprintln!("logs kept in {}", dir.display());
            Ok(ExitCode::FAILURE)
        }
    }
}

/// How the demos run their member processes: stderr to the terminal, bounded by the demo's
/// timeout.
fn member_spec<'a>(
    group: &'a str,
    members: u32,
    dir: &'a Path,
    start: Instant,
    timeout_secs: u64,
) -> WorkerSpec<'a> {
    WorkerSpec {
        noun: "member",
        group,
        members: members as usize,
        dir,
        stderr: WorkerStderr::Inherit,
        deadline: start + Duration::from_secs(timeout_secs),
        poll: Duration::from_millis(20),
        netns: &[],
    }
}

/// The worker arguments of both demos (see [`MemberArgs`]).
fn member_args(
    args: &DemoArgs,
    members: u32,
    resilience: u8,
    qos: rmcast::Qos,
    worker_timeout: Duration,
    dir: &Path,
) -> MemberArgs {
    MemberArgs {
        engine: args.engine.clone(),
        qos,
        resilience,
        method: rmcast_proto::sequencer::Method::Auto,
        max_datagram_bytes: args.max_datagram_bytes,
        size: args.size,
        members: members as usize,
        timeout: worker_timeout,
        recovery: Some(args.recovery.clone()),
        log_dir: Some(dir.to_path_buf()),
        net: args.net.clone(),
        keys: args.keys.resolved(),
    }
}

/// A member that exited with an error or printed no statistics is a failure of the demo.
fn check_exit(w: &WorkerOutcome, failures: &mut Vec<String>) {
    match (&w.status, &w.stats) {
        (Some(s), _) if !s.success() => {
            failures.push(format!("member {} exited with {s}", w.index))
        }
        (_, None) => failures.push(format!("member {} printed no statistics", w.index)),
        _ => {}
    }
}

/// Read every member's `--log` file and verify them together. Returns the logs read and the
/// verifier's report; what went wrong (unreadable logs, violations) goes to `failures`.
fn check_logs(
    dir: &Path,
    outcomes: &[WorkerOutcome],
    promised: &rmcast_proto::Guarantees,
    failures: &mut Vec<String>,
) -> (Vec<Vec<LogRecord>>, Option<VerifyReport>) {
    let mut logs = Vec::new();
    for w in outcomes {
        match read_log(log_path(dir, w.index)) {
            Ok(l) => logs.push(l),
            Err(e) => failures.push(format!("member {}: {e}", w.index)),
        }
    }
    if logs.len() != outcomes.len() {
        return (logs, None);
    }
    let report = match verify_logs_for(&logs, promised) {
        Ok(r) => Some(r),
        Err(violations) => {
            for v in violations.iter().take(10) {
                failures.push(format!("log check: {v}"));
            }
            if violations.len() > 10 {
                failures.push(format!(
                    "log check: {} more violations",
                    violations.len() - 10
                ));
            }
            None
        }
    };
    (logs, report)
}

/// A fresh group name, the directory for the logs (and whether it is a temporary one, to
/// remove after a success), and a line saying where the group's traffic goes.
fn prepare(log_dir: Option<&Path>, net: &NetArgs) -> anyhow::Result<(String, PathBuf, bool)> {
    let group = fresh_group_name("rmcast-demo");
    let (dir, temp_dir) = match log_dir {
        Some(d) => (d.to_path_buf(), false),
        None => (std::env::temp_dir().join(&group), true),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // The address the workers take: the name's, in the family of their interface.
    let addr = rmcast::GroupConfig::new(&group)
        .multicast_addr_for(net.interface.addr)
        .context("a multicast group")?;
    println!(
        "group {group} on {addr} (interface {}, TTL {})",
        net.interface, net.ttl
    );
    Ok((group, dir, temp_dir))
}

fn log_path(dir: &Path, index: usize) -> PathBuf {
    member_log_path(dir, index)
}

fn print_table(
    args: &DemoArgs,
    members: u32,
    senders: u32,
    outcomes: &[WorkerOutcome],
    wall: Duration,
) {
    println!();
    println!(
        "{:>6} {:>10} {:>10} {:>8} {:>9} {:>9} {:>10} {:>8}",
        "member", "delivered", "msgs/s", "MB/s", "p50 µs", "p99 µs", "datagrams", "retrans"
    );
    let mut datagrams = 0;
    let mut rates = Vec::new();
    let mut mbs = Vec::new();
    let mut p50s = Vec::new();
    let mut p99 = 0f64;
    for w in outcomes {
        let index = w.index;
        match &w.stats {
            Some(s) => {
                println!(
                    "{:>6} {:>10} {:>10.0} {:>8.2} {:>9.0} {:>9.0} {:>10} {:>8}",
                    index,
                    s.delivered,
                    s.msgs_per_s,
                    s.mb_per_s,
                    s.latency_us_p50,
                    s.latency_us_p99,
                    s.datagrams_sent,
                    s.retransmissions
                );
                datagrams += s.datagrams_sent;
                rates.push(s.msgs_per_s);
                mbs.push(s.mb_per_s);
                p50s.push(s.latency_us_p50);
                p99 = p99.max(s.latency_us_p99);
            }
            None => println!("{index:>6} {:>10}", "-"),
        }
    }
    let sent_total = args.messages * senders as u64;
    let median = |v: &mut Vec<f64>| -> f64 {
        if v.is_empty() {
            return 0.0;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    println!();
    println!(
        "members {}  messages {}  msgs/s per member {:.0}  MB/s per member {:.2}  latency p50 {:.0} µs (median)  p99 {:.0} µs (worst)",
        members,
        sent_total,
        median(&mut rates),
        median(&mut mbs),
        median(&mut p50s),
        p99
    );
    println!(
        "datagrams per message {:.2}  wall time {:.1} s",
        datagrams as f64 / sent_total.max(1) as f64,
        wall.as_secs_f64()
    );
}
