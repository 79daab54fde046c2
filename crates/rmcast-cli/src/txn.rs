//! `rmcast txn --group G "question"` and `rmcast txn-serve --group G --exec CMD`: multicast
//! transactions (the `txn` engine, after the Multidriver of Dempsey, Fenton and Weaver) from
//! the command line. `txn` asks every server of the group at once and prints each reply as it
//! comes, named by its server; `txn-serve` answers every request with the output of a command
//! fed the request on stdin (or with a fixed text). Try it in two terminals:
//!
//! ```text
//! rmcast txn-serve --group demo --exec 'hostname; date'
//! rmcast txn --group demo "who is there?"
//! ```
//!
//! `txn --repeat N` runs N transactions one after the other and prints their latencies
//! (transaction round trip: send to the last reply waited for).

use crate::member::NetArgs;
use crate::names::parse_group_name;
use crate::output::{JsonFlag, Output};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use rmcast::txn::{TxnEvent, TxnGroup, TxnOptions};
use rmcast::Node;
use rmcast_proto::{IdList, NodeId};
use serde::Serialize;
use std::io::{IsTerminal, Read, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// X_MRopen's arguments and the implosion control, shared by `txn` and `txn-serve` (the
/// timing ones must be the same at every member).
#[derive(Args, Debug, Clone)]
pub struct TxnArgs {
    /// Group name.
    #[arg(short = 'g', long, value_parser = parse_group_name)]
    pub group: String,
    /// This member's node id (unique in the group); random when omitted.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub id: Option<u32>,
    /// How long the open waits for servers to answer (a bare number: milliseconds).
    #[arg(long = "timeout", alias = "timeout-ms", default_value = "500ms", value_name = "DURATION", value_parser = crate::dur::ms(1, 3_600_000))]
    pub timeout_ms: u64,
    /// BACKOFF_TIME per server (a bare number: microseconds): a server answers the open after a random wait
    /// in [0, servers × this].
    #[arg(long = "backoff", alias = "backoff-us", default_value = "100us", value_name = "DURATION", value_parser = crate::dur::us(0, 1_000_000))]
    pub backoff_us: u64,
    /// The use-backoff flag: every packet of a response channel (replies too) backs off.
    #[arg(long)]
    pub use_backoff: bool,
    /// How long replies are collected after the commit (a bare number: milliseconds).
    #[arg(long = "reply-timeout", alias = "reply-timeout-ms", default_value = "2s", value_name = "DURATION", value_parser = crate::dur::ms(1, 3_600_000))]
    pub reply_timeout_ms: u64,
    #[command(flatten)]
    pub net: NetArgs,
    #[command(flatten)]
    pub keys: crate::keys::KeyArgs,
}

impl TxnArgs {
    fn options(&self, receive: bool) -> Result<TxnOptions> {
        let mut opts = TxnOptions::client()
            .timeout(Duration::from_millis(self.timeout_ms))
            .backoff_unit(Duration::from_micros(self.backoff_us))
            .use_backoff(self.use_backoff)
            .reply_timeout(Duration::from_millis(self.reply_timeout_ms))
            .receive(receive);
        opts.keys = self.keys.keyring()?;
        Ok(opts)
    }

    fn node(&self) -> Result<Node> {
        let mut cfg = self.net.node_config();
        cfg.id = self.id.map(NodeId);
        Node::new(cfg).context("starting the node")
    }
}

/// Which replies `rmcast txn` waits for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum WaitFor {
    /// Every server of the transaction's set.
    All,
    /// The first reply.
    First,
    /// More than half the set.
    Majority,
    /// None: the commit only.
    Commit,
}

/// Arguments of `rmcast txn`.
#[derive(Args, Debug)]
pub struct AskArgs {
    #[command(flatten)]
    pub common: TxnArgs,
    /// X_MRopen's min: servers that must answer for the transaction to go ahead.
    #[arg(long, default_value_t = 1)]
    pub min: usize,
    /// X_MRopen's max: servers taken at most; the open ends as soon as this many answered.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=65_535))]
    pub max: u64,
    /// Which replies to wait for.
    #[arg(long, value_enum, default_value_t = WaitFor::All)]
    pub wait: WaitFor,
    /// Send this file's bytes instead of QUESTION.
    #[arg(long, conflicts_with = "question")]
    pub file: Option<std::path::PathBuf>,
    /// Run this many transactions one after the other and print their latencies.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub repeat: u64,
    /// Print only the summary (with --repeat).
    #[arg(long)]
    pub quiet: bool,
    /// At the end, print the datagrams the kernel dropped at this member's socket for want
    /// of room (its receive queue overflowed: implosion), from /proc/net/udp.
    #[arg(long)]
    pub kernel_drops: bool,
    /// The question (the request's bytes).
    #[arg(required_unless_present = "file")]
    pub question: Option<String>,
    #[command(flatten)]
    pub output: JsonFlag,
}

/// What `rmcast txn --json` prints, one object per line.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum TxnLine {
    /// A server's reply to transaction `txn` (bytes that are not UTF-8 replaced).
    Reply { txn: u64, from: u32, reply: String },
    /// A server of the set fell silent and was dropped from it.
    Dropped { txn: u64, server: u32 },
    /// The transaction's end: committed at `servers`, with the replies that came.
    Committed {
        txn: u64,
        servers: Vec<u32>,
        commit_ms: f64,
        replies: usize,
        /// Servers that committed and did not reply (when replies were waited for).
        missing: Vec<u32>,
    },
    /// After `--repeat`: the transactions' latencies (none when all failed).
    Summary {
        transactions: u64,
        failed: u64,
        unanswered: u64,
        mean_ms: Option<f64>,
        p50_ms: Option<f64>,
        p99_ms: Option<f64>,
        min_ms: Option<f64>,
        max_ms: Option<f64>,
    },
    /// `--kernel-drops`: datagrams the kernel dropped at this member's socket, if found.
    KernelDrops { port: u16, drops: Option<u64> },
}

fn ids(v: &[NodeId]) -> Vec<u32> {
    v.iter().map(|m| m.0).collect()
}

/// Arguments of `rmcast txn-serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub common: TxnArgs,
    /// Answer each request with this command's standard output (run by `sh -c`, fed the
    /// request on standard input).
    #[arg(long, required_unless_present_any = ["reply", "reply_size"], conflicts_with_all = ["reply", "reply_size"])]
    pub exec: Option<String>,
    /// Answer each request with this text (no command run).
    #[arg(long, conflicts_with = "reply_size")]
    pub reply: Option<String>,
    /// Answer each request with this many bytes (for measurements: many servers answering
    /// large replies at once).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=1_048_576))]
    pub reply_size: Option<u64>,
    /// Exit after answering this many requests.
    #[arg(long)]
    pub count: Option<u64>,
    /// Print nothing per request.
    #[arg(long)]
    pub quiet: bool,
    /// Serve --exec without a key on an interface other than loopback: anyone who can reach
    /// the group's address could then run the command with input of their choosing.
    #[arg(long)]
    pub insecure: bool,
}

/// Text from the network, printable: control characters escaped on a terminal.
fn printable(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let s = s.trim_end_matches('\n');
    if std::io::stdout().is_terminal() {
        s.chars()
            .flat_map(|c| {
                if c.is_control() && c != '\n' && c != '\t' {
                    c.escape_default().collect::<Vec<_>>()
                } else {
                    vec![c]
                }
            })
            .collect()
    } else {
        s.to_string()
    }
}

/// `rmcast txn`.
pub fn run(a: AskArgs) -> Result<ExitCode> {
    if a.min as u64 > a.max {
        bail!("--min {} is more than --max {}", a.min, a.max);
    }
    let payload: Vec<u8> = match (&a.file, &a.question) {
        (Some(f), _) => std::fs::read(f).with_context(|| format!("reading {}", f.display()))?,
        (None, Some(q)) => q.clone().into_bytes(),
        (None, None) => bail!("give a QUESTION or --file"),
    };
    let opts = a.common.options(false)?.min(a.min).max(a.max as usize);
    let node = a.common.node()?;
    let mut g = TxnGroup::open(&node, &a.common.group, opts.clone())
        .with_context(|| format!("opening group {:?}", a.common.group))?;
    let verbose = !(a.quiet && a.repeat > 1);
    let mut latencies = Vec::new();
    let mut failed = 0u64;
    let mut unanswered = 0u64;
    let out = Output::new(a.output);
    for _ in 0..a.repeat {
        match one(&mut g, &payload, a.wait, &opts, verbose, out)? {
            Outcome::Answered(l) => latencies.push(l),
            Outcome::Unanswered(l) => {
                latencies.push(l);
                unanswered += 1;
            }
            Outcome::Failed => failed += 1,
        }
    }
    if a.repeat > 1 {
        latencies.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let n = latencies.len();
        let (mean, p50, p99, min, max) = match (latencies.first(), latencies.last()) {
            (Some(first), Some(last)) => (
                Some(latencies.iter().map(|d| ms(*d)).sum::<f64>() / n as f64),
                Some(ms(latencies[n / 2])),
                Some(ms(latencies[(n * 99 / 100).min(n - 1)])),
                Some(ms(*first)),
                Some(ms(*last)),
            ),
            _ => (None, None, None, None, None),
        };
        let line = TxnLine::Summary {
            transactions: a.repeat,
            failed,
            unanswered,
            mean_ms: mean,
            p50_ms: p50,
            p99_ms: p99,
            min_ms: min,
            max_ms: max,
        };
        out.result(&line, || match (mean, p50, p99, min, max) {
            (Some(mean), Some(p50), Some(p99), Some(min), Some(max)) => format!(
                "{} transactions, {failed} failed, {unanswered} without the replies waited \
                 for: latency mean {mean:.3} ms, p50 {p50:.3} ms, p99 {p99:.3} ms, min \
                 {min:.3} ms, max {max:.3} ms",
                a.repeat
            ),
            _ => format!("{} transactions, all failed", a.repeat),
        })?;
    }
    if a.kernel_drops {
        let port = node.local_addr().port();
        let drops = udp_drops(port);
        out.result(&TxnLine::KernelDrops { port, drops }, || match drops {
            Some(n) => format!("kernel drops at this member's socket (port {port}): {n}"),
            None => format!("kernel drops: /proc/net/udp(6) has no socket on port {port}"),
        })?;
    }
    let _ = g.close();
    Ok(if failed > 0 {
        ExitCode::from(EXIT_FAILED)
    } else if unanswered > 0 {
        ExitCode::from(EXIT_UNANSWERED)
    } else {
        ExitCode::SUCCESS
    })
}

/// Exit status of `rmcast txn` when a transaction failed (committed nowhere) or did not end.
pub const EXIT_FAILED: u8 = 1;
/// Exit status of `rmcast txn` when every transaction committed but some lacked the replies
/// `--wait` asked for (the servers that committed and did not answer are named): the request
/// was applied, so asking again is not the same as asking once.
pub const EXIT_UNANSWERED: u8 = 3;

/// What one transaction of `rmcast txn` came to.
enum Outcome {
    /// Committed, and the replies `--wait` asks for came: the latency.
    Answered(Duration),
    /// Committed, but replies asked for are missing (said on standard error): the latency.
    Unanswered(Duration),
    /// Failed, or neither committed nor failed in time (said on standard error).
    Failed,
}

/// One transaction, replies printed as they come.
fn one(
    g: &mut TxnGroup,
    payload: &[u8],
    wait: WaitFor,
    opts: &TxnOptions,
    verbose: bool,
    out: Output,
) -> Result<Outcome> {
    let start = Instant::now();
    let txn = g.send(payload.to_vec())?;
    let mut set: Option<Vec<NodeId>> = None;
    let mut committed: Option<Instant> = None;
    let mut repliers: Vec<NodeId> = Vec::new();
    let commit_by = start + opts.timeout + Duration::from_secs(10);
    loop {
        let done = match (&set, committed) {
            (Some(s), Some(_)) => match wait {
                WaitFor::Commit => true,
                WaitFor::First => !repliers.is_empty() || s.is_empty(),
                WaitFor::Majority => repliers.len() * 2 > s.len(),
                WaitFor::All => s.iter().all(|m| repliers.contains(m)),
            },
            _ => false,
        };
        let deadline = committed.map_or(commit_by, |t| t + opts.reply_timeout);
        let now = Instant::now();
        if done || now >= deadline {
            let Some(s) = set.filter(|_| committed.is_some()) else {
                eprintln!("error: transaction {txn} neither committed nor failed in time");
                return Ok(Outcome::Failed);
            };
            let missing: Vec<NodeId> = s
                .iter()
                .copied()
                .filter(|m| !repliers.contains(m))
                .collect();
            if verbose {
                let commit_ms = (committed.unwrap_or(now) - start).as_secs_f64() * 1e3;
                let shown_missing = if wait == WaitFor::Commit {
                    Vec::new()
                } else {
                    missing.clone()
                };
                let line = TxnLine::Committed {
                    txn,
                    servers: ids(&s),
                    commit_ms,
                    replies: repliers.len(),
                    missing: ids(&shown_missing),
                };
                out.result(&line, || {
                    format!(
                        "committed at {} server(s) {} in {commit_ms:.1} ms; {} repl{}{}",
                        s.len(),
                        IdList(&s),
                        repliers.len(),
                        if repliers.len() == 1 { "y" } else { "ies" },
                        if shown_missing.is_empty() {
                            String::new()
                        } else {
                            format!(", none from {}", IdList(&shown_missing))
                        }
                    )
                })?;
            }
            if done {
                return Ok(Outcome::Answered(now - start));
            }
            // The wait ran out short of what `--wait` asks for: say who committed the
            // request and did not answer (always, even with --quiet).
            eprintln!(
                "error: transaction {txn} committed at {} server(s) {}, but {} of them did not \
                 reply within {} ms: {}",
                s.len(),
                IdList(&s),
                missing.len(),
                opts.reply_timeout.as_millis(),
                IdList(&missing)
            );
            return Ok(Outcome::Unanswered(now - start));
        }
        match g.next_event(deadline - now)? {
            Some(TxnEvent::Opened { txn: t, set: s }) if t == txn => set = Some(s),
            Some(TxnEvent::Dropped { txn: t, receiver }) if t == txn => {
                if verbose {
                    let line = TxnLine::Dropped {
                        txn,
                        server: receiver.0,
                    };
                    out.result(&line, || {
                        format!("server {receiver} fell silent and was dropped")
                    })?;
                }
                if let Some(s) = set.as_mut() {
                    s.retain(|&m| m != receiver);
                }
            }
            Some(TxnEvent::Committed { txn: t }) if t == txn => committed = Some(Instant::now()),
            Some(TxnEvent::Failed { txn: t, error }) if t == txn => {
                eprintln!("error: transaction failed: {error}");
                return Ok(Outcome::Failed);
            }
            Some(TxnEvent::Reply {
                txn: t,
                from,
                payload,
            }) if t == txn => {
                repliers.push(from);
                if verbose {
                    let line = TxnLine::Reply {
                        txn,
                        from: from.0,
                        reply: String::from_utf8_lossy(&payload).into_owned(),
                    };
                    out.result(&line, || {
                        let text = printable(&payload);
                        if text.contains('\n') {
                            let mut t = format!("{from}:");
                            for l in text.lines() {
                                t.push_str(&format!("\n  {l}"));
                            }
                            t
                        } else {
                            format!("{from}: {text}")
                        }
                    })?;
                }
            }
            _ => {}
        }
    }
}

/// `rmcast txn-serve`.
pub fn serve(a: ServeArgs) -> Result<ExitCode> {
    let opts = a.common.options(true)?;
    if a.exec.is_some() {
        crate::keys::refuse_unkeyed_exposure(
            opts.keys.as_ref(),
            a.common.net.interface.addr,
            a.insecure,
            "txn-serve --exec",
        )?;
    }
    crate::signals::install("stopping", || {})?;
    let node = a.common.node()?;
    let mut g = TxnGroup::open(&node, &a.common.group, opts)
        .with_context(|| format!("opening group {:?}", a.common.group))?;
    eprintln!(
        "rmcast txn-serve: node {} answering on group {:?}",
        g.me(),
        a.common.group
    );
    let mut answered = 0u64;
    while !crate::signals::received() && a.count.is_none_or(|c| answered < c) {
        let Some(ev) = g.next_event(Duration::from_millis(200))? else {
            continue;
        };
        let TxnEvent::Request(d) = ev else {
            continue;
        };
        let reply = match (&a.exec, &a.reply, a.reply_size) {
            (Some(cmd), _, _) => run_command(cmd, &d.payload)?,
            (None, Some(text), _) => text.clone().into_bytes(),
            (None, None, Some(n)) => vec![b'r'; n as usize],
            (None, None, None) => Vec::new(),
        };
        if !a.quiet {
            eprintln!(
                "request {} from {} ({} bytes): answered with {} bytes",
                d.msg,
                d.sender,
                d.payload.len(),
                reply.len()
            );
        }
        if let Err(e) = g.reply(d.sender, d.msg, reply) {
            eprintln!("warning: could not answer {}#{}: {e}", d.sender, d.msg);
        }
        answered += 1;
    }
    // Let the last reply's response channel finish before leaving.
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        let _ = g.next_event(Duration::from_millis(50));
    }
    let _ = g.close();
    Ok(ExitCode::SUCCESS)
}

/// `sh -c cmd` fed `input`; its standard output (standard error passes through).
fn run_command(cmd: &str, input: &[u8]) -> Result<Vec<u8>> {
    let mut child = Command::new("sh")
        .args(["-c", cmd])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {cmd:?}"))?;
    let mut stdin = child.stdin.take().expect("piped");
    let input = input.to_vec();
    // On a thread: a command that writes before it reads must not deadlock with us.
    let writer = std::thread::spawn(move || {
        // A command that exits without reading its input (`echo`) closes the pipe, and a
        // write after that raises SIGPIPE, which `main` leaves at its default: it killed the
        // whole server whenever the command won the race (a busy CPU). Blocked on this thread
        // only, the write fails with EPIPE instead.
        let _sigpipe = SigpipeBlocked::new();
        let _ = stdin.write_all(&input);
    });
    let mut out = Vec::new();
    child
        .stdout
        .take()
        .expect("piped")
        .take(1 << 20)
        .read_to_end(&mut out)?;
    let _ = writer.join();
    let _ = child.wait();
    Ok(out)
}

/// SIGPIPE blocked on the calling thread while this lives. A SIGPIPE raised meanwhile (a
/// write to a pipe whose reader is gone) stays pending on the thread, and is taken off before
/// the mask is restored, so that it never reaches the process.
struct SigpipeBlocked {
    old: libc::sigset_t,
}

impl SigpipeBlocked {
    fn new() -> SigpipeBlocked {
        // SAFETY: sigset_t is plain data, initialised by sigemptyset before any use;
        // pthread_sigmask changes this thread's mask only.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            SigpipeBlocked { old }
        }
    }
}

impl Drop for SigpipeBlocked {
    fn drop(&mut self) {
        // SAFETY: as in `new`; sigtimedwait with a zero timeout only takes a pending SIGPIPE
        // (it does not wait), and the mask restored is the one `new` saved.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut pending: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            libc::sigpending(&mut pending);
            if libc::sigismember(&pending, libc::SIGPIPE) == 1 {
                let zero = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                libc::sigtimedwait(&set, std::ptr::null_mut(), &zero);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        }
    }
}

/// The drops column of /proc/net/udp and /proc/net/udp6 (the same columns) for the sockets
/// bound to local `port`.
fn udp_drops(port: u16) -> Option<u64> {
    let want = format!(":{port:04X}");
    let mut total = None;
    for file in ["/proc/net/udp", "/proc/net/udp6"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() >= 13 && f[1].ends_with(&want) {
                *total.get_or_insert(0) += f[12].parse::<u64>().unwrap_or(0);
            }
        }
    }
    total
}
