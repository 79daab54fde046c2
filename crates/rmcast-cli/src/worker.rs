//! `rmcast worker` (hidden): one measured group member, spawned by `rmcast demo` and
//! `rmcast bench` as a separate process.
//!
//! It enters the group, waits until the view has `--members` members, sends `--count` messages
//! of `--size` bytes as fast as back-pressure allows while receiving, and waits until it has
//! delivered `--expect` data messages (or `--timeout-ms` passes). Then comes an in-band barrier:
//! each worker sends one *done* message and waits for the done messages of all members, so that
//! nobody leaves while others may still need it. Finally it leaves, writes `--log`, and prints
//! one JSON line of [`WorkerStats`] on stdout. Exit status 0 only if everything was delivered
//! and the leave was clean.
//!
//! Payload layout ([`PAYLOAD_HEADER_BYTES`] bytes, big-endian, then filler): sender id (u32),
//! message counter (u64, [`DONE_COUNTER`] for the done message), send time in ns since the UNIX
//! epoch (u64). Workers on one host share the clock, so latency is receive time minus send time.

use crate::member::GroupArgs;
use crate::workers::WorkerStats;
use anyhow::{bail, Context};
use clap::Args;
use rmcast::log::{wall_clock_ns, LogWriter};
use rmcast::{Error, Group, GroupEvent, TrySendError};
use std::collections::HashSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Bytes at the start of every worker message: sender (4), counter (8), send time (8).
pub const PAYLOAD_HEADER_BYTES: usize = 20;
/// Counter value of the barrier message each worker sends when it has delivered everything.
pub const DONE_COUNTER: u64 = u64::MAX;
/// Longest a worker spends after `--timeout-ms`: the barrier, the leave and the last events.
pub const WORKER_WIND_DOWN: Duration = Duration::from_secs(BARRIER_MIN_S + LEAVE_S + DRAIN_S);
/// The barrier gets at least this long, even after a timeout.
const BARRIER_MIN_S: u64 = 2;
/// Bound of the leave.
const LEAVE_S: u64 = 4;
/// Bound of the wait for the last events after the leave.
const DRAIN_S: u64 = 1;

/// Arguments of `rmcast worker`.
#[derive(Args, Debug)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub group: GroupArgs,
    /// Messages this worker sends.
    #[arg(long, default_value_t = 1000)]
    pub count: u64,
    /// Bytes per message (at least 20: sender, counter and send time).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(PAYLOAD_HEADER_BYTES as u64..=16 << 20))]
    pub size: u64,
    /// Wait for a view of this many members before sending.
    #[arg(long, default_value_t = 1)]
    pub members: usize,
    /// Data messages to deliver before finishing (default: members × count).
    #[arg(long)]
    pub expect: Option<u64>,
    /// Give up after this long, in milliseconds (the leave has its own few seconds after).
    #[arg(long, default_value_t = 30_000)]
    pub timeout_ms: u64,
    /// Write the delivery log (JSON lines) here.
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Create this file once the worker is in the group (for whoever starts the others).
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
}

/// What the worker saw of the group.
struct Tally {
    me: u32,
    log: Option<LogWriter>,
    members_now: usize,
    delivered: u64,
    bytes: u64,
    done_from: HashSet<u32>,
    latencies_ns: Vec<u64>,
    last_delivery: Option<Instant>,
}

impl Tally {
    fn record(&mut self, ev: GroupEvent) -> anyhow::Result<()> {
        match ev {
            GroupEvent::Deliver(d) => {
                if let Some(l) = self.log.as_mut() {
                    l.deliver(&d)?;
                }
                let p = &d.payload;
                if p.len() < PAYLOAD_HEADER_BYTES {
                    bail!("foreign message of {} bytes from {}", p.len(), d.sender);
                }
                let sender = u32::from_be_bytes(p[0..4].try_into().unwrap());
                let counter = u64::from_be_bytes(p[4..12].try_into().unwrap());
                let sent_ns = u64::from_be_bytes(p[12..20].try_into().unwrap());
                if counter == DONE_COUNTER {
                    self.done_from.insert(sender);
                } else {
                    self.delivered += 1;
                    self.bytes += p.len() as u64;
                    self.latencies_ns
                        .push(wall_clock_ns().saturating_sub(sent_ns));
                    self.last_delivery = Some(Instant::now());
                }
            }
            GroupEvent::View(v) => {
                if let Some(l) = self.log.as_mut() {
                    l.view(&v)?;
                }
                self.members_now = v.members.len();
            }
        }
        Ok(())
    }

    /// Take every event already queued.
    fn drain(&mut self, g: &mut Group) -> anyhow::Result<()> {
        while let Some(ev) = g.try_recv().context("receiving")? {
            self.record(ev)?;
        }
        Ok(())
    }

    /// Wait for one event until `deadline`; false if none came.
    fn wait(&mut self, g: &mut Group, deadline: Instant) -> anyhow::Result<bool> {
        let left = deadline.saturating_duration_since(Instant::now());
        match g.recv_timeout(left.min(Duration::from_millis(100))) {
            Ok(ev) => {
                self.record(ev)?;
                Ok(true)
            }
            Err(Error::Timeout) => Ok(false),
            Err(e) => Err(e).context("receiving"),
        }
    }
}

fn payload(me: u32, counter: u64, size: usize) -> bytes::Bytes {
    let mut p = vec![0u8; size];
    p[0..4].copy_from_slice(&me.to_be_bytes());
    p[4..12].copy_from_slice(&counter.to_be_bytes());
    p[12..20].copy_from_slice(&wall_clock_ns().to_be_bytes());
    // A filler that differs per message, so payload hashes tell messages apart.
    for (i, b) in p[20..].iter_mut().enumerate() {
        *b = (counter as usize).wrapping_add(i) as u8;
    }
    p.into()
}

fn percentile_us(sorted_ns: &[u64], q: f64) -> f64 {
    if sorted_ns.is_empty() {
        return 0.0;
    }
    let i = ((sorted_ns.len() - 1) as f64 * q).round() as usize;
    sorted_ns[i] as f64 / 1000.0
}

/// Run `rmcast worker`.
pub fn run(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let deadline = start + Duration::from_millis(args.timeout_ms);
    let (node, mut group) = args.group.open()?;
    let me = node.id().0;
    if let Some(f) = &args.ready_file {
        std::fs::write(f, format!("{me}\n")).with_context(|| format!("writing {}", f.display()))?;
    }
    let log = match &args.log {
        Some(p) => {
            Some(LogWriter::create(p, me).with_context(|| format!("creating {}", p.display()))?)
        }
        None => None,
    };
    let expected = args.expect.unwrap_or(args.members as u64 * args.count);
    let mut t = Tally {
        me,
        log,
        members_now: 0,
        delivered: 0,
        bytes: 0,
        done_from: HashSet::new(),
        latencies_ns: Vec::with_capacity(expected.min(1 << 24) as usize),
        last_delivery: None,
    };

    // 1. Everyone in: a message sent before the last member joined would not reach it.
    while t.members_now < args.members && Instant::now() < deadline {
        t.wait(&mut group, deadline)?;
    }
    if t.members_now < args.members {
        eprintln!(
            "worker {me}: only {} of {} members joined in time",
            t.members_now, args.members
        );
    }

    // 2. Send as fast as back-pressure allows, receiving all along.
    let size = args.size as usize;
    let send_start = Instant::now();
    let mut sent = 0u64;
    let mut next: Option<bytes::Bytes> = None;
    while (sent < args.count || t.delivered < expected) && Instant::now() < deadline {
        if sent < args.count {
            let p = next.take().unwrap_or_else(|| payload(me, sent, size));
            match group.try_send(p) {
                Ok(()) => sent += 1,
                Err(TrySendError::Full(p)) => {
                    // Keep the message (its time stamp counts the wait, as a sender's would)
                    // and receive while the group works through its backlog.
                    next = Some(p);
                    t.wait(&mut group, deadline)?;
                }
                Err(TrySendError::Closed(_)) => bail!("the group closed while sending"),
            }
            t.drain(&mut group)?;
        } else {
            t.wait(&mut group, deadline)?;
        }
    }
    let complete = t.delivered >= expected;
    if !complete {
        eprintln!(
            "worker {me}: delivered {} of {expected} messages before the timeout (sent {sent} of {})",
            t.delivered, args.count
        );
    }

    // 3. Barrier: leave only once every member has everything, so that nobody leaves while
    // another may still need it for a retransmission.
    let barrier_deadline = deadline.max(Instant::now() + Duration::from_secs(BARRIER_MIN_S));
    let done = payload(me, DONE_COUNTER, PAYLOAD_HEADER_BYTES);
    let mut done_sent = false;
    while t.done_from.len() < args.members && Instant::now() < barrier_deadline {
        if !done_sent {
            match group.try_send(done.clone()) {
                Ok(()) => done_sent = true,
                Err(TrySendError::Full(_)) => {}
                Err(TrySendError::Closed(_)) => bail!("the group closed before the barrier"),
            }
        }
        t.wait(&mut group, barrier_deadline)?;
    }
    let barrier = t.done_from.len() >= args.members;
    if !barrier {
        eprintln!(
            "worker {me}: barrier incomplete ({} of {} members done)",
            t.done_from.len(),
            args.members
        );
    }

    // 4. Counters, then leave, taking the last events until the group closes.
    let counters = group.counters().unwrap_or_default();
    let node_counters = node.counters();
    let left_cleanly = match group.leave_timeout(Duration::from_secs(LEAVE_S)) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("worker {me}: leave failed: {e}");
            false
        }
    };
    let drain_deadline = Instant::now() + Duration::from_secs(DRAIN_S);
    while let Ok(ev) = group.recv_timeout(drain_deadline.saturating_duration_since(Instant::now()))
    {
        t.record(ev)?;
    }
    if let Some(l) = t.log.as_mut() {
        l.flush().context("writing the log")?;
    }
    drop(group);
    drop(node);

    let elapsed = t
        .last_delivery
        .map_or(Duration::ZERO, |l| l.saturating_duration_since(send_start));
    let secs = elapsed.as_secs_f64().max(1e-9);
    t.latencies_ns.sort_unstable();
    let stats = WorkerStats {
        member: t.me,
        sent,
        delivered: t.delivered,
        expected,
        complete,
        barrier,
        left_cleanly,
        elapsed_s: elapsed.as_secs_f64(),
        msgs_per_s: t.delivered as f64 / secs,
        mb_per_s: t.bytes as f64 / secs / 1e6,
        latency_us_p50: percentile_us(&t.latencies_ns, 0.50),
        latency_us_p99: percentile_us(&t.latencies_ns, 0.99),
        datagrams_sent: counters.datagrams_sent,
        bytes_sent: counters.bytes_sent,
        retransmissions: counters.retransmissions,
        nacks_sent: counters.nacks_sent,
        backpressure_refusals: counters.backpressure_refusals,
        event_queue_stalls: node_counters.event_queue_stalls,
        node_datagrams_received: node_counters.datagrams_received,
        node_datagrams_sent: node_counters.datagrams_sent,
        node_send_deferred: node_counters.send_deferred,
        node_send_errors: node_counters.send_errors,
    };
    println!("{}", serde_json::to_string(&stats)?);
    Ok(if complete && barrier && left_cleanly {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
