//! `rmcast worker` (hidden): one measured group member, spawned by `rmcast demo` and
//! `rmcast bench` as a separate process.
//!
//! It enters the group, waits until the view has `--members` members, then sends while
//! receiving, in one of two ways:
//!
//! - **count**: `--count` messages of `--size` bytes, as fast as back-pressure allows (or at
//!   `--rate`), until it has delivered `--expect` data messages (or `--timeout-ms` passes);
//! - **stream** (`--stop-file F`): a steady stream at `--rate` messages per second until the
//!   file `F` appears. The number of messages is not known beforehand, and members may crash
//!   meanwhile (`rmcast demo --kill-sequencer`): the barrier below tells when everything sent
//!   has arrived.
//!
//! Then comes an in-band barrier: each worker sends one *done* message and waits for the done
//! messages of every member of its current view, so that nobody leaves while others may still
//! need it. Done messages are ordered after their senders' data messages, so once they are all
//! in, so is everything the members of the view sent. Finally it leaves, and prints one JSON
//! line of [`WorkerStats`] on stdout. Exit status 0 only if everything was delivered and the
//! leave was clean.
//!
//! Crash recovery: in recovery mode sends are refused (the message is kept and sent again after
//! the reset); with `--manual-reset` the worker itself calls ResetGroup when it sees the
//! failure. An expelled worker stops and fails.
//!
//! `--log` gets every event (deliveries, views, completions, failures, resets), flushed at least
//! every [`LOG_FLUSH_INTERVAL`] while events come, so that a worker killed with SIGKILL leaves
//! nearly all of what it saw.
//!
//! Throughput over time: the stats line also counts the data messages delivered in each window
//! of [`WINDOW_MS`], from the send time of the first data message delivered (with one sender,
//! the sender's send start: the same origin at every member, since workers on one host share
//! the clock), as `rmcast bench --perturb` needs to see a dip at one member while others sleep.
//!
//! Payload layout ([`PAYLOAD_HEADER_BYTES`] bytes, big-endian, then filler): sender id (u32),
//! message counter (u64, [`DONE_COUNTER`] for the done message), send time in ns since the UNIX
//! epoch (u64). Workers on one host share the clock, so latency is receive time minus send time.

/// Print one line to stderr in a single write: the workers of a demo share the terminal, and
/// `eprintln!` may write a line in pieces that interleave with another process's.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let mut line = format!($($t)*);
        line.push('\n');
        let _ = std::io::stderr().write_all(line.as_bytes());
    }};
}

use crate::member::GroupArgs;
use crate::workers::{WorkerStats, BARRIER_MIN_S, DRAIN_S, LEAVE_S};
use anyhow::{bail, Context};
use clap::Args;
use rmcast::{Error, Group, GroupEvent, Recovery, TrySendError};
use rmcast_sim::log::{wall_clock_ns, LogWriter};
use std::collections::HashSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Bytes at the start of every worker message: sender (4), counter (8), send time (8).
pub const PAYLOAD_HEADER_BYTES: usize = 20;
/// Counter value of the barrier message each worker sends when it has delivered everything.
pub const DONE_COUNTER: u64 = u64::MAX;
/// The log is flushed at most this long after an event, while events come. Per event would be
/// a system call per message; this bounds what a killed worker's log misses.
pub const LOG_FLUSH_INTERVAL: Duration = Duration::from_millis(10);
/// Latency samples kept at most (128 MiB): a stream has no count to bound them by.
const MAX_LATENCY_SAMPLES: usize = 1 << 24;
/// Deliveries recorded before the clock is read for them at the latest.
const MAX_UNSTAMPED: usize = 4096;
/// Length of a throughput window of [`WorkerStats::windows`], in milliseconds.
pub const WINDOW_MS: u64 = 500;
/// Windows counted at most (ten minutes of 500 ms windows); later deliveries are in no window.
pub const MAX_WINDOWS: usize = 1200;
/// How often a streaming worker looks for its stop file.
const STOP_FILE_POLL: Duration = Duration::from_millis(10);
/// A paced stream that fell this far behind (recovery mode, back-pressure) starts again from
/// now rather than bursting to catch up.
const PACE_SLACK: Duration = Duration::from_millis(50);

/// Arguments of `rmcast worker`.
#[derive(Args, Debug)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub group: GroupArgs,
    /// Messages this worker sends (ignored with --stop-file).
    #[arg(long, default_value_t = 1000)]
    pub count: u64,
    /// Bytes per message (at least 20: sender, counter and send time).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(PAYLOAD_HEADER_BYTES as u64..=16 << 20))]
    pub size: u64,
    /// Messages per second this worker sends; 0: as fast as back-pressure allows.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub rate: u64,
    /// Stream (at --rate) until this file exists, instead of sending --count messages.
    #[arg(long, requires = "rate")]
    pub stop_file: Option<PathBuf>,
    /// Wait for a view of this many members before sending.
    #[arg(long, default_value_t = 1)]
    pub members: usize,
    /// Data messages to deliver before finishing (default: members × count; not with
    /// --stop-file).
    #[arg(long, conflicts_with = "stop_file")]
    pub expect: Option<u64>,
    /// Give up after this long (a bare number: milliseconds; the leave has its own few seconds after).
    #[arg(long = "timeout", alias = "timeout-ms", default_value = "30s", value_name = "DURATION", value_parser = crate::dur::ms(1, 86_400_000))]
    pub timeout_ms: u64,
    /// Write the event log (JSON lines) here.
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Create this file once the worker is in the group (for whoever starts the others).
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
    /// Send nothing until this file exists (receiving meanwhile): whoever starts the workers
    /// creates it once every one is in, which is the only way to know it for engines that keep
    /// no membership (the tree's receivers, the txn's endpoints), whose views name nobody.
    #[arg(long)]
    pub start_file: Option<PathBuf>,
    /// Sequencer engine only: slots of its history buffer [default: the engine's, 4096]. The
    /// history is the sequencer's flow control (a message stays until every member has it),
    /// so a small one makes the sender wait for the slowest member. Every member must use the
    /// same value.
    #[arg(long, value_parser = clap::value_parser!(u64).range(16..=1 << 24))]
    pub sequencer_history_msgs: Option<u64>,
}

/// What the worker saw of the group.
struct Tally {
    me: u32,
    log: Option<LogWriter>,
    last_flush: Instant,
    /// Members of the current view.
    view: Vec<u32>,
    /// Views installed so far.
    views: u64,
    delivered: u64,
    bytes: u64,
    done_from: HashSet<u32>,
    latencies_ns: Vec<u64>,
    /// Send stamps of data messages delivered since the clock was last read: the clock is
    /// read once per batch of events, not per message (at a million messages per second the
    /// reads were a tenth of a worker's time). Stamping a batch when it has been taken
    /// counts each message's wait behind the others, so latencies err long, never short.
    unstamped_ns: Vec<u64>,
    /// Data deliveries per [`WINDOW_MS`] window from `window_origin_ns`.
    windows: Vec<u64>,
    /// Send time (wall clock) of the first data message delivered.
    window_origin_ns: Option<u64>,
    last_delivery: Option<Instant>,
    /// `delivered` when `last_delivery` was taken.
    delivered_at_last: u64,
    completions: u64,
    failures: u64,
    resets: u64,
    reset_failures: u64,
    expelled: bool,
    /// Call ResetGroup when a failure is seen (`--manual-reset`).
    manual_reset: bool,
    min_members: usize,
    reset_due: bool,
}

impl Tally {
    fn record(&mut self, ev: GroupEvent) -> anyhow::Result<()> {
        if let Some(l) = self.log.as_mut() {
            l.event(&ev)?;
        }
        match ev {
            GroupEvent::Deliver(d) => {
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
                    self.window_origin_ns.get_or_insert(sent_ns);
                    self.unstamped_ns.push(sent_ns);
                    if self.unstamped_ns.len() >= MAX_UNSTAMPED {
                        self.stamp();
                    }
                }
            }
            GroupEvent::View(v) => {
                self.views += 1;
                self.view = v.members.iter().map(|m| m.0).collect();
            }
            GroupEvent::SendComplete { .. } => self.completions += 1,
            // Workers neither answer messages nor run engines that lose them; the runtime
            // closes the group on `Left` instead of passing it on.
            GroupEvent::Reply(_)
            | GroupEvent::Lock(_)
            | GroupEvent::Forwarded(_)
            | GroupEvent::Left => {}
            GroupEvent::Loss(l) => {
                say!(
                    "worker {}: {} messages of member {} lost",
                    self.me,
                    l.count,
                    l.sender
                );
            }
            GroupEvent::Recovery(Recovery::Failed { suspect }) => {
                self.failures += 1;
                say!("worker {}: member {suspect} failed", self.me);
                self.reset_due = self.manual_reset;
            }
            GroupEvent::Recovery(Recovery::ResetFailed { reachable, needed }) => {
                self.reset_failures += 1;
                say!(
                    "worker {}: reset failed ({reachable} of {needed} members)",
                    self.me
                );
            }
            GroupEvent::Recovery(Recovery::Reset {
                incarnation,
                removed,
            }) => {
                self.resets += 1;
                say!(
                    "worker {}: group reset to incarnation {incarnation} without {}",
                    self.me,
                    rmcast_proto::IdList(&removed)
                );
            }
            GroupEvent::Recovery(Recovery::Merging { into }) => {
                say!(
                    "worker {}: merging into the group of member {into}",
                    self.me
                );
            }
            GroupEvent::Recovery(Recovery::Expelled { incarnation }) => {
                self.expelled = true;
                say!(
                    "worker {}: expelled by the reset to incarnation {incarnation}",
                    self.me
                );
            }
            // An event of a later version of the library: logged above, nothing to count.
            _ => {}
        }
        Ok(())
    }

    /// Latency and throughput window of every delivery since the last call, at one clock read.
    fn stamp(&mut self) {
        if self.unstamped_ns.is_empty() {
            return;
        }
        let now_ns = wall_clock_ns();
        let origin = self.window_origin_ns.unwrap_or(now_ns);
        for sent_ns in self.unstamped_ns.drain(..) {
            if self.latencies_ns.len() < MAX_LATENCY_SAMPLES {
                self.latencies_ns.push(now_ns.saturating_sub(sent_ns));
            }
            let w = (now_ns.saturating_sub(origin) / (WINDOW_MS * 1_000_000)) as usize;
            if w < MAX_WINDOWS {
                if self.windows.len() <= w {
                    self.windows.resize(w + 1, 0);
                }
                self.windows[w] += 1;
            }
        }
    }

    fn flush_if_due(&mut self) -> anyhow::Result<()> {
        if let Some(l) = self.log.as_mut() {
            if self.last_flush.elapsed() >= LOG_FLUSH_INTERVAL {
                l.flush().context("writing the log")?;
                self.last_flush = Instant::now();
            }
        }
        Ok(())
    }

    /// Take every event already queued.
    fn drain(&mut self, g: &mut Group) -> anyhow::Result<()> {
        self.take_queued(g)?;
        self.after_events(g)
    }

    /// Record the events already queued, without waiting.
    fn take_queued(&mut self, g: &mut Group) -> anyhow::Result<()> {
        loop {
            match g.try_recv() {
                Ok(Some(ev)) => self.record(ev)?,
                // Nothing queued (in recovery mode or not).
                Ok(None) | Err(Error::MemberFailed { .. }) => return Ok(()),
                Err(Error::Closed) if self.expelled => return Ok(()),
                Err(e) => return Err(e).context("receiving"),
            }
        }
    }

    /// Wait for an event until `deadline` (at most 100 ms), then take the others already
    /// queued; false if none came.
    fn wait(&mut self, g: &mut Group, deadline: Instant) -> anyhow::Result<bool> {
        let left = deadline.saturating_duration_since(Instant::now());
        let got = match g.recv_timeout(left.min(Duration::from_millis(100))) {
            Ok(ev) => {
                self.record(ev)?;
                self.take_queued(g)?;
                true
            }
            Err(Error::Timeout | Error::MemberFailed { .. }) => false,
            Err(Error::Closed) if self.expelled => false,
            Err(e) => return Err(e).context("receiving"),
        };
        self.after_events(g)?;
        Ok(got)
    }

    fn after_events(&mut self, g: &Group) -> anyhow::Result<()> {
        // Once per batch of events, not per message: reading the clock is a measurable part
        // of a worker's time at a million messages per second.
        self.stamp();
        if self.delivered != self.delivered_at_last {
            self.delivered_at_last = self.delivered;
            self.last_delivery = Some(Instant::now());
        }
        if std::mem::take(&mut self.reset_due) {
            // The application's half of the manual policy: ResetGroup.
            if let Err(e) = g.reset(self.min_members) {
                say!("worker {}: reset refused: {e}", self.me);
            }
        }
        self.flush_if_due()
    }

    /// Every member of the current view sent its done message.
    fn barrier_complete(&self) -> bool {
        !self.view.is_empty() && self.view.iter().all(|m| self.done_from.contains(m))
    }
}

/// A data message: sender, counter, send time `sent_ns` (wall clock), filler.
fn payload(me: u32, counter: u64, sent_ns: u64, size: usize) -> bytes::Bytes {
    let mut p = vec![0u8; size];
    p[0..4].copy_from_slice(&me.to_be_bytes());
    p[4..12].copy_from_slice(&counter.to_be_bytes());
    p[12..20].copy_from_slice(&sent_ns.to_be_bytes());
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

/// [`GroupArgs::open`], with a sequencer of `history` history slots.
fn open_with_history(
    g: &GroupArgs,
    completion_events: bool,
    history: usize,
) -> anyhow::Result<(rmcast::Node, Group)> {
    if g.engine != "sequencer" {
        bail!(
            "--sequencer-history-msgs is for the sequencer engine, not {}",
            g.engine
        );
    }
    g.qos()?;
    let (node_cfg, mut group_cfg) = g.configs()?;
    let settings = group_cfg.engine.settings;
    let base = rmcast_proto::sequencer::Config {
        history_capacity_msgs: history,
        method: g.method,
        ..rmcast_proto::sequencer::Config::new(0)
    };
    group_cfg.engine = rmcast::EngineChoice::custom(std::sync::Arc::new(
        rmcast_proto::sequencer::SequencerFactory::with_config(base),
    ));
    group_cfg.engine.settings = settings;
    group_cfg.completion_events = completion_events;
    let node = rmcast::Node::new(node_cfg).context("starting the node")?;
    let group = node
        .open_group(group_cfg)
        .with_context(|| format!("entering group {:?}", g.group))?;
    Ok((node, group))
}

/// Run `rmcast worker`.
pub fn run(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let deadline = start + Duration::from_millis(args.timeout_ms);
    if args.stop_file.is_some() && args.rate == 0 {
        bail!("--stop-file needs a --rate of at least 1 message per second");
    }
    let (node, mut group) = match args.sequencer_history_msgs {
        None => args.group.open(args.log.is_some(), None)?,
        Some(h) => open_with_history(&args.group, args.log.is_some(), h as usize)?,
    };
    let qos = args.group.qos()?;
    // Unreliable messages may be lost (that is the level): nobody waits for all of them, and
    // the end-of-run barrier goes reliably so that it is not lost with them.
    let best_effort = qos == rmcast::Qos::Unreliable;
    let barrier_qos = if best_effort {
        rmcast::Qos::Reliable
    } else {
        qos
    };
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
    let stream = args.stop_file.is_some();
    if stream && args.rate == 0 {
        bail!("--stop-file needs a --rate of at least 1 message per second");
    }
    let expected = if stream {
        0
    } else {
        args.expect.unwrap_or(args.members as u64 * args.count)
    };
    let mut t = Tally {
        me,
        log,
        last_flush: Instant::now(),
        view: Vec::new(),
        views: 0,
        delivered: 0,
        bytes: 0,
        done_from: HashSet::new(),
        latencies_ns: Vec::with_capacity((expected as usize).min(MAX_LATENCY_SAMPLES)),
        unstamped_ns: Vec::with_capacity(MAX_UNSTAMPED),
        windows: Vec::new(),
        window_origin_ns: None,
        last_delivery: None,
        delivered_at_last: 0,
        completions: 0,
        failures: 0,
        resets: 0,
        reset_failures: 0,
        expelled: false,
        manual_reset: args.group.recovery.manual_reset,
        min_members: args.group.recovery.min_members as usize,
        reset_due: false,
    };

    // 1. Everyone in: a message sent before the last member joined would not reach it. The
    // start file says every worker opened its group; a view says who is in it, except where
    // the engine keeps no membership (its one view names nobody): there the start file is all.
    while let Some(f) = args.start_file.as_ref() {
        if f.exists() || Instant::now() >= deadline || t.expelled {
            break;
        }
        t.wait(&mut group, (Instant::now() + STOP_FILE_POLL).min(deadline))?;
    }
    while t.views == 0 && Instant::now() < deadline {
        t.wait(&mut group, deadline)?;
    }
    let silent = t.views > 0 && t.view.is_empty();
    while !silent && t.view.len() < args.members && Instant::now() < deadline && !t.expelled {
        t.wait(&mut group, deadline)?;
    }
    if !silent && t.view.len() < args.members {
        say!(
            "worker {me}: only {} of {} members joined in time",
            t.view.len(),
            args.members
        );
    }

    // 2. Send (as fast as back-pressure allows, or paced), receiving all along.
    let size = args.size as usize;
    let interval = (args.rate > 0).then(|| Duration::from_secs_f64(1.0 / args.rate as f64));
    let send_start = Instant::now();
    let (cpu_start, datagrams_start) = (crate::cpu::process_cpu(), node.counters().datagrams_sent);
    let mut next_at = send_start;
    let mut stop_checked = send_start;
    let mut stopped = false;
    let mut sent = 0u64;
    let mut recovery_refusals = 0u64;
    let mut next: Option<bytes::Bytes> = None;
    let mut now = send_start;
    let mut stamp_ns = wall_clock_ns();
    let mut turns = 0u32;
    loop {
        turns = turns.wrapping_add(1);
        // Flat out, the clock is read every 32 sends rather than every one (it is a measurable
        // part of the worker's time); paced, waiting or retrying, every turn.
        let more_to_send = if stream { !stopped } else { sent < args.count };
        if interval.is_some() || !more_to_send || next.is_some() || turns % 32 == 0 {
            now = Instant::now();
            // Read with `now`: a stamp up to 31 sends old makes latencies err long, not short.
            stamp_ns = wall_clock_ns();
        }
        if now >= deadline || t.expelled {
            break;
        }
        if let Some(f) = args.stop_file.as_ref().filter(|_| !stopped) {
            if now.duration_since(stop_checked) >= STOP_FILE_POLL {
                stop_checked = now;
                stopped = f.exists();
            }
        }
        let more = if stream { !stopped } else { sent < args.count };
        if !more {
            if stream || t.delivered >= expected || best_effort {
                break;
            }
            t.wait(&mut group, deadline)?;
            continue;
        }
        if interval.is_some() && now < next_at {
            t.wait(&mut group, next_at.min(deadline))?;
            continue;
        }
        let p = next
            .take()
            .unwrap_or_else(|| payload(me, sent, stamp_ns, size));
        match group.try_send_with(p, qos) {
            Ok(()) => {
                sent += 1;
                if let Some(iv) = interval {
                    next_at += iv;
                    if next_at + PACE_SLACK < now {
                        next_at = now;
                    }
                }
            }
            Err(TrySendError::Full(p)) => {
                // Keep the message (its time stamp counts the wait, as a sender's would)
                // and receive while the group works through its backlog.
                next = Some(p);
                t.wait(&mut group, deadline)?;
            }
            Err(TrySendError::MemberFailed { payload, .. }) => {
                // Recovery mode: the same message goes again after the reset.
                recovery_refusals += 1;
                next = Some(payload);
                t.wait(&mut group, deadline)?;
            }
            Err(TrySendError::Closed(_)) if t.expelled => break,
            Err(TrySendError::Closed(_)) => bail!("the group closed while sending"),
            Err(TrySendError::Unsupported(_)) => {
                bail!("the engine does not serve the group's quality of service")
            }
            Err(e) => bail!("sending: {e}"),
        }
        t.drain(&mut group)?;
    }
    let mut complete = !t.expelled && (stream || t.delivered >= expected);
    if !complete && !t.expelled && !best_effort {
        say!(
            "worker {me}: delivered {} of {expected} messages before the timeout (sent {sent} of {})",
            t.delivered, args.count
        );
    }

    // 3. Barrier: leave only once every member has everything, so that nobody leaves while
    // another may still need it for a retransmission. Without membership there is nobody to
    // wait for (and receivers may not send): the tree's sender dallies as it leaves.
    let barrier_deadline = deadline.max(Instant::now() + Duration::from_secs(BARRIER_MIN_S));
    let done = payload(me, DONE_COUNTER, wall_clock_ns(), PAYLOAD_HEADER_BYTES);
    let mut done_sent = false;
    while !silent && !t.barrier_complete() && Instant::now() < barrier_deadline && !t.expelled {
        if !done_sent {
            match group.try_send_with(done.clone(), barrier_qos) {
                Ok(()) => done_sent = true,
                // Back-pressure or recovery mode: again after the next event.
                Err(TrySendError::Full(_) | TrySendError::MemberFailed { .. }) => {}
                Err(TrySendError::Closed(_)) if t.expelled => break,
                Err(TrySendError::Closed(_)) => bail!("the group closed before the barrier"),
                Err(TrySendError::Unsupported(_)) => {
                    bail!("the engine does not serve the group's quality of service")
                }
                Err(e) => bail!("sending the barrier: {e}"),
            }
        }
        t.wait(&mut group, barrier_deadline)?;
    }
    let barrier = silent || t.barrier_complete();
    if best_effort && barrier && !t.expelled && !complete {
        if t.delivered < expected {
            say!(
                "worker {me}: delivered {} of {expected} unreliable messages (losses allowed)",
                t.delivered
            );
        }
        complete = true;
    }
    if !barrier && !t.expelled {
        let mut done: Vec<u32> = t.done_from.iter().copied().collect();
        done.sort_unstable();
        let ids = |v: &[u32]| v.iter().map(|&i| rmcast::NodeId(i)).collect::<Vec<_>>();
        say!(
            "worker {me}: barrier incomplete (done: {}, view: {})",
            rmcast_proto::IdList(&ids(&done)),
            rmcast_proto::IdList(&ids(&t.view))
        );
    }

    // 4. Counters, then leave, taking the last events until the group closes.
    let counters = group.counters().unwrap_or_default();
    let engine_counters = group
        .engine_counters()
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, v)| *v > 0)
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let node_counters = node.counters();
    let cpu_s = crate::cpu::process_cpu()
        .saturating_sub(cpu_start)
        .as_secs_f64();
    let left_cleanly = !t.expelled
        && match group.leave_timeout(Duration::from_secs(LEAVE_S)) {
            Ok(()) => true,
            Err(e) => {
                say!("worker {me}: leave failed: {e}");
                false
            }
        };
    let drain_deadline = Instant::now() + Duration::from_secs(DRAIN_S);
    loop {
        match group.recv_timeout(drain_deadline.saturating_duration_since(Instant::now())) {
            Ok(ev) => {
                t.record(ev)?;
                t.stamp();
            }
            Err(Error::MemberFailed { .. }) if Instant::now() < drain_deadline => {}
            Err(_) => break,
        }
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
        expected: if stream { t.delivered } else { expected },
        complete,
        barrier,
        left_cleanly,
        elapsed_s: elapsed.as_secs_f64(),
        msgs_per_s: t.delivered as f64 / secs,
        mb_per_s: t.bytes as f64 / secs / 1e6,
        latency_us_p50: percentile_us(&t.latencies_ns, 0.50),
        latency_us_p99: percentile_us(&t.latencies_ns, 0.99),
        latency_us_p999: percentile_us(&t.latencies_ns, 0.999),
        datagrams_sent: counters.datagrams_sent,
        bytes_sent: counters.bytes_sent,
        retransmissions: counters.retransmissions,
        engine_counters,
        nacks_sent: counters.nacks_sent,
        backpressure_refusals: counters.backpressure_refusals,
        event_queue_stalls: node_counters.event_queue_stalls,
        node_datagrams_received: node_counters.datagrams_received,
        node_datagrams_sent: node_counters.datagrams_sent,
        node_send_deferred: node_counters.send_deferred,
        node_send_errors: node_counters.send_errors,
        node_refused: node_counters.malformed
            + node_counters.foreign_dropped
            + node_counters.auth_failed
            + node_counters.auth_unknown_key
            + node_counters.auth_missing
            + node_counters.auth_unexpected
            + node_counters.replays_dropped,
        completions: t.completions,
        failures: t.failures,
        reset_failures: t.reset_failures,
        resets: t.resets,
        recovery_refusals,
        expelled: t.expelled,
        windows: t.windows,
        cpu_s,
        measured_datagrams_sent: node_counters.datagrams_sent - datagrams_start,
    };
    println!("{}", serde_json::to_string(&stats)?);
    Ok(if complete && barrier && left_cleanly {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
