//! `rmcast bench`: throughput and latency of rmcast beside raw UDP multicast on this host.
//!
//! For every message size the same settings are measured twice in one run:
//!
//! 1. **raw**: plain UDP multicast over loopback, with no protocol at all. One thread per member
//!    receives on its own socket joined to a private group; one thread per sending member blasts
//!    datagrams of the size as fast as the kernel takes them. It is the ceiling for one message
//!    per datagram on this host: a protocol can beat it only by bundling small messages.
//! 2. **rmcast**: one `rmcast worker` process per member (this very executable), each joining a
//!    fresh group, sending its share and receiving everything, then printing one JSON stats
//!    line. A worker sends a count, not for a time, so a duration-bound run is preceded by a
//!    short calibration run that tells how many messages the duration holds.
//!
//! The table puts them side by side: messages per second delivered at each member, MB/s, latency
//! p50 and p99, losses, and the rmcast/raw throughput ratio.
//!
//! **Pacing of the raw baseline.** Loopback multicast has no flow control: a sender faster than
//! its slowest receiver overflows that receiver's socket buffer and the kernel drops silently,
//! which would make the baseline measure drops rather than delivery. So each raw sender keeps at
//! most a window of datagrams in flight towards the slowest receiver (read from in-process
//! counters, which a real network would not offer: the baseline is the best case). The window
//! defaults to half of what the receive buffer holds, at most 512 (beyond that only queueing
//! delay grows); `--raw-window` overrides it. A receiver
//! that makes no progress for a few milliseconds does not stall the sender for ever: the window
//! is then ignored once and the stall counted, and whatever the kernel dropped shows as `lost`.
//!
//! **Latency.** Every message carries its send time. Raw threads share one clock origin; rmcast
//! workers on one host read the same system clock. Per member, p50 and p99 are taken over every
//! message it received; the table shows the median of the members' p50 and the worst p99.
//!
//! **Perturbed members** (`--perturb F:P`): the experiment of "Throughput Stability of Reliable
//! Multicast Protocols" by Öznur Özkasap and Kenneth P. Birman on real processes. The last `F`
//! workers sleep (SIGSTOP, then SIGCONT 100 ms later) with probability `P` every 100 ms, on a
//! schedule seeded by `--seed`; each worker counts its deliveries per 500 ms window, and a second
//! table gives the mean, the standard deviation and the lowest of those windows, in msgs/s, at
//! the unperturbed receivers. The raw baseline is skipped (its receivers are threads of this
//! process, which cannot be put to sleep alone). See [`perturb`].
//!
//! Every measurement ends by itself: senders stop at the duration or message count, receivers at
//! the end of a bounded drain, and the whole measurement at `--timeout`. Only processes this
//! command spawned are ever killed, by their own handles, and never while stopped.

mod amoeba;
mod cost;
mod perturb;

use crate::keys::KeyArgs;
use crate::member::{parse_engine, NetArgs, ENGINE_HELP};
use crate::worker::WINDOW_MS;
use crate::workers::{
    fresh_group_name, killed, worker_timeout, MemberArgs, Netns, WorkerSpec, WorkerStderr,
    WORKER_WIND_DOWN,
};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use perturb::{Perturb, Perturber, WindowFigures};
use socket2::{Domain, Protocol, Socket, Type};
use std::fmt::Write as _;
use std::io::{ErrorKind, Write as _};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

/// Bytes at the start of every benchmark message: run id (4), sender (4), number (8), send time
/// in nanoseconds (8). Smaller messages could not carry their own latency probe.
pub const BENCH_HEADER_BYTES: usize = 24;
/// Largest UDP payload over IPv4: the raw baseline sends one message per datagram.
const MAX_SIZE_BYTES: usize = 65_507;
/// Largest group the bench starts (threads and processes on one host).
const MAX_MEMBERS: u16 = 32;
/// Receive buffer asked for each raw receiver socket; the kernel caps it at `net.core.rmem_max`.
const RAW_RCVBUF_BYTES: usize = 8 << 20;
/// Kernel bookkeeping per queued datagram, to turn a buffer size into a datagram count.
const SKB_OVERHEAD_BYTES: usize = 1024;
/// How long a raw sender waits for a silent receiver before ignoring its window once.
const RAW_STALL: Duration = Duration::from_millis(5);
/// How long a raw sender with a full window sleeps before looking again. Sleeping, not
/// spinning: on a small host a spinning sender takes the CPU its receivers need to drain.
const RAW_PACE_SLEEP: Duration = Duration::from_micros(20);
/// After the senders stop, receivers drain until they have everything or are quiet this long.
const DRAIN_QUIET: Duration = Duration::from_millis(500);
/// Upper bound of the drain.
const DRAIN_MAX: Duration = Duration::from_secs(5);

/// Arguments of `rmcast bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Message sizes in bytes, comma separated (each 24..=65507).
    #[arg(long, value_delimiter = ',', default_value = "64,1024", value_parser = parse_size)]
    pub sizes: Vec<usize>,

    /// Members of the group; every member receives every message.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=MAX_MEMBERS as i64))]
    pub members: u16,

    /// Which members send: `1` (the first member only) or `all`.
    #[arg(long, default_value = "1", value_parser = parse_senders)]
    pub senders: Senders,

    /// With `--senders 1`: the member that sends. Member 1 creates the group, so under the
    /// sequencer engine it is the sequencer and orders its own messages without a request;
    /// `--sender 2` measures a sender that is not, as Amoeba's own measurements do.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=MAX_MEMBERS as i64), conflicts_with = "perturb")]
    pub sender: u16,

    /// How long each measurement sends (a bare number: seconds).
    #[arg(long = "duration", alias = "duration-secs", default_value = "5s", value_name = "DURATION", value_parser = crate::dur::secs(1, 600), conflicts_with = "messages")]
    pub duration_secs: u64,

    /// Send exactly this many messages per sender instead of sending for a duration.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub messages: Option<u64>,

    /// Paced mode: each sender sends this many messages per second instead of as fast as it
    /// can, so that the latency columns (p50, p99, p999) show one-way latency at that load.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub rate: Option<u64>,

    /// Measure only one side (the ratio column needs both).
    #[arg(long, value_enum, default_value_t = Only::Both)]
    pub only: Only,

    /// Raw baseline: datagrams a sender may have in flight towards its slowest receiver
    /// (default: half of what a receive buffer holds, at most 512).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub raw_window: Option<u32>,

    /// rmcast: the engine the workers run; several, comma separated (`sequencer,ring`), are
    /// measured one after the other beside the same raw baseline.
    #[arg(short = 'e', long, default_value = "sequencer", value_delimiter = ',', value_parser = parse_engine, help = ENGINE_HELP)]
    pub engine: Vec<String>,

    /// rmcast: the quality of service of every message (see `rmcast member --help`)
    /// [default: the strongest delivery order each engine serves: totally-ordered, or for an
    /// engine that does not serve it the strongest level below (gossip: source-ordered)].
    #[arg(long, value_parser = crate::member::parse_qos)]
    pub qos: Option<rmcast::Qos>,

    /// rmcast: largest datagram the engine writes, 256..=65507 [default: loopback's MTU less
    /// the IP and UDP headers, 65507]. The raw baseline always sends one datagram per message.
    #[arg(long, value_parser = crate::member::parse_max_datagram)]
    pub max_datagram_bytes: Option<usize>,

    /// Abandon a measurement that has not finished after this long (a bare number: seconds).
    #[arg(long = "timeout", alias = "timeout-secs", default_value = "2m", value_name = "DURATION", value_parser = crate::dur::secs(1, 3600))]
    pub timeout_secs: u64,

    /// Also write one JSON line per measurement to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also draw throughput against message size, rmcast beside raw UDP, as SVG to this file;
    /// with --perturb, the lowest unperturbed receiver's rate in each 500 ms window against time.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,

    /// rmcast: the workers' interface and multicast TTL (the raw baseline stays on loopback).
    #[command(flatten)]
    pub net: NetArgs,

    /// rmcast: run the workers in these network namespaces, in turn (worker i in the
    /// ((i - 1) mod n)-th, by `ip netns exec`; needs root), each on its namespace's first global
    /// IPv4 address with a multicast TTL of at least 1: members on separate hosts of a bridged
    /// network, as `scripts/netns.sh up` makes them. Skips the raw baseline.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub netns: Vec<String>,

    /// rmcast: also measure a secure group with the key in this file, beside the group without
    /// a key (rows `secure`; the last column then also gives secure/rmcast).
    #[arg(long)]
    pub key_file: Option<PathBuf>,

    /// Perturbed members, as F:P (e.g. `4:0.5`): the last F workers (never the sender, the
    /// first member) each sleep 100 ms (SIGSTOP, then SIGCONT) with probability P every 100 ms
    /// while the measurement sends; a second table gives throughput per 500 ms window at the
    /// unperturbed members. Skips the raw baseline; the workers' failure detection is made
    /// lenient (probe after 2 s of silence, 10 probes of 1 s) so that a sleeper is not taken
    /// for a crash.
    #[arg(long, value_name = "F:P", value_parser = perturb::parse_perturb, conflicts_with = "messages")]
    pub perturb: Option<Perturb>,

    /// Seed of the --perturb schedule: the same seed, the same sleeps tick by tick.
    #[arg(long, default_value_t = perturb::DEFAULT_SEED)]
    pub seed: u64,

    /// rmcast, sequencer engine only: slots of its history buffer (the engine's 16,384 when not given), its flow
    /// control (a message stays there until every member has it); the row is then called
    /// `sequencer/N`.
    #[arg(long, value_name = "MSGS", value_parser = clap::value_parser!(u64).range(16..=1 << 24))]
    pub sequencer_history: Option<u64>,

    /// rmcast, sequencer engine only: the resilience degree r (a send completes once r + 1
    /// members hold the message; at least r + 1 members), as the Amoeba paper's Figures 27-28.
    #[arg(long, default_value_t = 0)]
    pub resilience: u8,

    /// rmcast, sequencer engine only: `pb`, `bb` or `auto` (see `rmcast member --help`).
    #[arg(long, default_value = "auto", value_parser = crate::member::parse_method)]
    pub method: rmcast_proto::sequencer::Method,

    /// Run a paper's experiment on real processes instead of one measurement: `amoeba`, the
    /// Amoeba paper's Figures 21, 23-25 and 27-28 (the sequencer by PB and by BB against group
    /// size and resilience degree; tables beside the paper's values, `--plot` draws the six
    /// figures; `--duration` is each throughput run's, `--messages` each delay run's count);
    /// `cost`, datagrams and CPU per message at 3, 8, 16 and 32 member processes for each
    /// engine of `--engine` (`--duration` each).
    #[arg(long, value_enum, conflicts_with_all = ["sizes", "members", "senders", "rate", "resilience", "perturb"])]
    pub experiment: Option<Experiment>,
}

/// `rmcast bench --experiment`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Experiment {
    /// The Amoeba paper's Figures 21, 23-25 and 27-28 (Kaashoek and Tanenbaum, section 6.2).
    Amoeba,
    /// What one message costs as the group grows, every engine at 3, 8, 16 and 32 member
    /// processes: datagrams sent per message and CPU per delivery (the real-process form of
    /// `rmcast sim --experiment cost`).
    Cost,
}

/// Which members send.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Senders {
    /// Only the first member sends; the others only receive.
    One,
    /// Every member sends.
    All,
}

/// Which side of the comparison to measure.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Only {
    /// Raw UDP multicast, then rmcast.
    Both,
    /// Raw UDP multicast only.
    Raw,
    /// rmcast only.
    Rmcast,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a size in bytes"))?;
    if !(BENCH_HEADER_BYTES..=MAX_SIZE_BYTES).contains(&n) {
        return Err(format!(
            "size {n} out of range: each message carries a {BENCH_HEADER_BYTES}-byte latency probe \
             and the raw baseline sends one UDP datagram per message, so sizes must be \
             {BENCH_HEADER_BYTES}..={MAX_SIZE_BYTES}"
        ));
    }
    Ok(n)
}

fn parse_senders(s: &str) -> Result<Senders, String> {
    match s.trim() {
        "1" => Ok(Senders::One),
        "all" => Ok(Senders::All),
        other => Err(format!("expected `1` or `all`, got `{other}`")),
    }
}

/// The level of every message of `engine`: `--qos` if given, else the strongest delivery order
/// the engine serves ([`crate::member::default_qos`]).
fn qos_for(given: Option<rmcast::Qos>, engine: &str) -> Result<rmcast::Qos> {
    match given {
        Some(q) => Ok(q),
        None => crate::member::default_qos(engine, 0),
    }
}

/// When senders stop.
#[derive(Copy, Clone, Debug)]
enum Limit {
    /// Send for this long.
    Duration(Duration),
    /// Send this many messages per sender.
    Messages(u64),
}

/// What one measurement (one implementation, one size) found.
#[derive(Clone, Debug, serde::Serialize)]
struct Measurement {
    /// "raw", "rmcast", or "secure" (rmcast with a key).
    implementation: &'static str,
    /// The engine of an rmcast row (empty for raw).
    engine: String,
    size_bytes: usize,
    senders: usize,
    /// Messages sent by all senders together; each member should receive every one.
    sent: u64,
    members: Vec<MemberFigures>,
    /// With `--perturb`: throughput per window at the unperturbed members.
    #[serde(skip_serializing_if = "Option::is_none")]
    perturbed: Option<WindowFigures>,
    /// Anything a reader of the figures should know (stalls, timeouts, stray datagrams).
    notes: Vec<String>,
}

/// One member's figures.
#[derive(Clone, Debug, serde::Serialize)]
struct MemberFigures {
    received: u64,
    msgs_per_sec: f64,
    latency_p50_us: f64,
    latency_p99_us: f64,
    latency_p999_us: f64,
    /// Deliveries per 500 ms window (rmcast workers only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    windows: Vec<u64>,
    /// CPU seconds the member's process spent from its send start until every member was done
    /// (rmcast workers only; 0 for raw).
    cpu_s: f64,
    /// Datagrams the member's node sent over that span (rmcast workers only).
    datagrams_sent: u64,
}

impl Measurement {
    fn mean_rate(&self) -> f64 {
        if self.members.is_empty() {
            return 0.0;
        }
        self.members.iter().map(|m| m.msgs_per_sec).sum::<f64>() / self.members.len() as f64
    }

    /// The slowest member's rate: it bounds how long a run of a given count takes.
    fn min_rate(&self) -> f64 {
        self.members
            .iter()
            .map(|m| m.msgs_per_sec)
            .fold(f64::NAN, f64::min)
    }

    /// Median of the members' p50.
    fn p50_us(&self) -> f64 {
        let mut v: Vec<f64> = self.members.iter().map(|m| m.latency_p50_us).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    }

    /// Worst member's p99.
    fn p99_us(&self) -> f64 {
        self.members
            .iter()
            .map(|m| m.latency_p99_us)
            .fold(f64::NAN, f64::max)
    }

    /// Worst member's p99.9.
    fn p999_us(&self) -> f64 {
        self.members
            .iter()
            .map(|m| m.latency_p999_us)
            .fold(f64::NAN, f64::max)
    }

    /// [`Measurement::lost`] as the tables print it: 0, or a percentage of what was due.
    fn lost_text(&self) -> String {
        match self.lost() {
            0 => "0".to_string(),
            lost => {
                let expected = self.sent * self.members.len() as u64;
                format!("{:.2}%", 100.0 * lost as f64 / expected.max(1) as f64)
            }
        }
    }

    /// Messages some member should have received and did not.
    fn lost(&self) -> u64 {
        self.members
            .iter()
            .map(|m| self.sent.saturating_sub(m.received))
            .sum()
    }
}

/// Run `rmcast bench`.
pub fn run(args: BenchArgs) -> Result<ExitCode> {
    if args.sizes.is_empty() {
        bail!("--sizes needs at least one size");
    }
    for e in &args.engine {
        let r = if e == "sequencer" { args.resilience } else { 0 };
        crate::member::check_qos(e, r, qos_for(args.qos, e)?)?;
    }
    let sequencer_only =
        args.resilience > 0 || args.method != rmcast_proto::sequencer::Method::Auto;
    if sequencer_only && !args.engine.iter().any(|e| e == "sequencer") {
        bail!("--resilience and --method are for the sequencer engine (the rows of the others ignore them, and there is none)");
    }
    if usize::from(args.resilience) >= usize::from(args.members) {
        bail!(
            "--resilience {} needs at least {} members (--members {})",
            args.resilience,
            u16::from(args.resilience) + 1,
            args.members
        );
    }
    let members = args.members as usize;
    let senders = match args.senders {
        Senders::One => 1,
        Senders::All => members,
    };
    let first_sender = args.sender as usize;
    if first_sender != 1 && (senders != 1 || first_sender > members) {
        bail!(
            "--sender {first_sender}: names the one sending member, so it needs --senders 1 and \
             a member of the group (--members {members})"
        );
    }
    if let Some(p) = args.perturb {
        if p.members as usize >= members {
            bail!(
                "--perturb {}:{}: F must be below --members ({members}), since the sender (member 1) is never perturbed",
                p.members,
                p.probability
            );
        }
        if args.only == Only::Raw {
            bail!("--perturb perturbs rmcast workers: not with --only raw");
        }
    }
    if !args.netns.is_empty() && args.only == Only::Raw {
        bail!("--netns places rmcast workers: not with --only raw");
    }
    let netns = Netns::resolve(&args.netns)?;
    let limit = match args.messages {
        Some(n) => Limit::Messages(n),
        None => Limit::Duration(Duration::from_secs(args.duration_secs)),
    };
    let timeout = Duration::from_secs(args.timeout_secs);
    if let Limit::Duration(d) = limit {
        // Room for the drain of the raw run, and for rmcast workers running somewhat slower
        // than calibrated plus their barrier and leave.
        let need = d + d / 2 + WORKER_WIND_DOWN + Duration::from_secs(5);
        if timeout < need {
            bail!(
                "--timeout-secs {} is too short for --duration-secs {}: give at least {} s",
                args.timeout_secs,
                d.as_secs(),
                need.as_secs()
            );
        }
    }
    let mut json = match &args.json {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => None,
    };

    if let Some(experiment) = args.experiment {
        let base = RunConfig {
            size: 0,
            members,
            senders,
            limit,
            timeout,
            raw_window: None,
            max_datagram_bytes: args.max_datagram_bytes,
            engine: "sequencer".to_string(),
            qos: qos_for(args.qos, "sequencer")?,
            rate: None,
            net: args.net.clone(),
            keys: KeyArgs::default(),
            perturb: None,
            seed: args.seed,
            sequencer_history: args.sequencer_history,
            resilience: 0,
            method: args.method,
            netns: netns.clone(),
            first_sender: 1,
        };
        return match experiment {
            Experiment::Amoeba => amoeba::run(&args, &base),
            Experiment::Cost => cost::run(&args, &base),
        };
    }
    let what = match limit {
        Limit::Duration(d) => format!("{} s per measurement", d.as_secs()),
        Limit::Messages(n) => format!("{n} messages per sender"),
    };
    let mut who = if senders == 1 && first_sender != 1 {
        format!("1 sender (member {first_sender})")
    } else if senders == 1 {
        "1 sender".to_string()
    } else {
        format!("{senders} senders")
    };
    if let Some(rate) = args.rate {
        who.push_str(&format!(" at {rate} msgs/s each"));
    }
    if let Some(p) = args.perturb {
        who.push_str(&format!(
            ", {} perturbed (sleep {} ms with probability {} every {} ms, seed {})",
            p.members,
            perturb::PERIOD.as_millis(),
            p.probability,
            perturb::PERIOD.as_millis(),
            args.seed
        ));
    }
    println!(
        "rmcast bench: {members} members, {who}, {what}, sizes {} B, max datagram {}, \
         {}, {} cores{}",
        args.sizes
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        match (args.max_datagram_bytes, netns.is_empty()) {
            (Some(n), _) => format!("{n} B"),
            (None, true) => format!(
                "{} B",
                rmcast::path_datagram_bytes(
                    std::net::Ipv4Addr::LOCALHOST,
                    rmcast::DEFAULT_MAX_DATAGRAM_BYTES
                )
            ),
            // Found by each worker from its own interface's MTU.
            (None, false) => "of each worker's interface".to_string(),
        },
        if netns.is_empty() {
            "loopback multicast".to_string()
        } else {
            format!(
                "workers in network namespaces {}",
                netns
                    .iter()
                    .map(|n| format!("{} ({})", n.name, n.addr))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        thread::available_parallelism().map_or(0, |n| n.get()),
        if args.resilience > 0 || args.method != rmcast_proto::sequencer::Method::Auto {
            format!(
                ", sequencer with resilience {} and method {}",
                args.resilience, args.method
            )
        } else {
            String::new()
        },
    );

    if args.only == Only::Both {
        if args.perturb.is_some() {
            eprintln!("--perturb: no raw baseline (its receivers are threads of this process)");
        } else if !netns.is_empty() {
            eprintln!("--netns: no raw baseline (its receivers are threads of this process)");
        }
    }
    let mut rows: Vec<Measurement> = Vec::new();
    let mut failures = 0;
    let base = RunConfig {
        size: args.sizes[0],
        members,
        senders,
        limit,
        timeout,
        raw_window: args.raw_window,
        max_datagram_bytes: args.max_datagram_bytes,
        engine: args.engine[0].clone(),
        qos: qos_for(args.qos, &args.engine[0])?,
        rate: args.rate,
        net: args.net.clone(),
        keys: KeyArgs::default(),
        perturb: args.perturb,
        seed: args.seed,
        sequencer_history: args.sequencer_history,
        resilience: args.resilience,
        method: args.method,
        netns: netns.clone(),
        first_sender,
    };
    for &size in &args.sizes {
        let cfg = RunConfig {
            size,
            ..base.clone()
        };
        if crate::signals::received() {
            // Interrupted: no new measurement (one under way ends within its duration).
            failures += 1;
            eprintln!("interrupted: skipping {size} B");
            continue;
        }
        if args.only != Only::Rmcast && args.perturb.is_none() && netns.is_empty() {
            match run_raw(&cfg) {
                Ok(m) => rows.push(m),
                Err(e) => {
                    failures += 1;
                    eprintln!("raw {size} B: {e:#}");
                }
            }
        }
        if args.only != Only::Raw {
            for engine in &args.engine {
                let cfg = RunConfig {
                    engine: engine.clone(),
                    qos: qos_for(args.qos, engine)?,
                    ..cfg.clone()
                };
                match run_rmcast(&cfg) {
                    Ok(m) => rows.push(m),
                    Err(e) => {
                        failures += 1;
                        eprintln!("rmcast ({engine}) {size} B: {e:#}");
                    }
                }
            }
            if let Some(k) = &args.key_file {
                let secure = RunConfig {
                    keys: KeyArgs {
                        key_file: Some(k.clone()),
                        accept_key_file: Vec::new(),
                    },
                    ..cfg.clone()
                };
                match run_rmcast(&secure) {
                    Ok(m) => rows.push(m),
                    Err(e) => {
                        failures += 1;
                        eprintln!("secure {size} B: {e:#}");
                    }
                }
            }
        }
    }

    println!();
    print!("{}", render_table(&rows));
    if let Some(out) = json.as_mut() {
        for m in &rows {
            serde_json::to_writer(&mut *out, m)?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
    }
    if let Some(p) = &args.plot {
        if rows.iter().any(|m| m.perturbed.is_some()) {
            plot_windows(p, &rows, members)?;
        } else {
            plot_rates(p, &rows, members)?;
        }
        println!("figure written to {}", p.display());
    }
    Ok(if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Throughput (mean over the members) against message size, one line per implementation.
fn plot_rates(path: &std::path::Path, rows: &[Measurement], members: usize) -> Result<()> {
    let mut names: Vec<String> = Vec::new();
    for m in rows {
        let l = label(m, rows);
        if !names.contains(&l) {
            names.push(l);
        }
    }
    let series: Vec<crate::plot::Series> = names
        .iter()
        .map(|name| crate::plot::Series {
            name: if name == "raw" {
                "raw UDP multicast".to_string()
            } else if name == "rmcast" || name == "secure" {
                name.clone()
            } else {
                format!("rmcast ({name})")
            },
            points: rows
                .iter()
                .filter(|m| label(m, rows) == *name)
                .map(|m| (m.size_bytes as f64, m.mean_rate()))
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    crate::plot::line_chart(
        path,
        &format!("rmcast bench: {members} members on loopback"),
        "message size (bytes)",
        "messages per second per member",
        &series,
    )
}

/// With `--perturb`: the lowest rate over the unperturbed receivers in each window against
/// time, one line per engine and size (the paper's figures show a whole run, not its mean).
fn plot_windows(path: &std::path::Path, rows: &[Measurement], members: usize) -> Result<()> {
    let series: Vec<crate::plot::Series> = rows
        .iter()
        .filter_map(|m| {
            let w = m.perturbed.as_ref()?;
            let windows: Vec<&[u64]> = w
                .members
                .iter()
                .filter_map(|&i| m.members.get(i as usize - 1))
                .map(|f| f.windows.as_slice())
                .collect();
            let lowest = perturb::lowest_per_window(&windows, w.windows);
            let step = crate::worker::WINDOW_MS as f64 / 1000.0;
            Some(crate::plot::Series {
                name: format!("{} {} B", label(m, rows), m.size_bytes),
                points: lowest
                    .into_iter()
                    .enumerate()
                    .map(|(i, r)| ((i + 1) as f64 * step, r))
                    .collect(),
            })
        })
        .collect();
    let first = rows.iter().find_map(|m| m.perturbed.as_ref());
    let (f, p) = first.map_or((0, 0.0), |w| (w.perturbed, w.probability));
    crate::plot::line_chart(
        path,
        &format!(
            "rmcast bench: {members} members, {f} perturbed at p = {p}: lowest unperturbed receiver"
        ),
        "time (s, end of each 500 ms window)",
        "messages per second",
        &series,
    )
}

/// Settings shared by both sides of one measurement.
#[derive(Clone, Debug)]
struct RunConfig {
    size: usize,
    members: usize,
    senders: usize,
    limit: Limit,
    timeout: Duration,
    raw_window: Option<u32>,
    /// `--max-datagram-bytes` of the rmcast workers (none: theirs, the interface's).
    max_datagram_bytes: Option<usize>,
    /// `--engine` of the rmcast workers.
    engine: String,
    /// `--qos` of the rmcast workers.
    qos: rmcast::Qos,
    /// `--rate`: messages per second per sender, or as fast as possible.
    rate: Option<u64>,
    /// `--interface` and `--ttl` of the rmcast workers.
    net: NetArgs,
    /// `--key-file` of the rmcast workers: a secure group when set.
    keys: KeyArgs,
    /// `--perturb`: members that sleep while the measurement sends.
    perturb: Option<Perturb>,
    /// `--seed` of the perturbation schedule.
    seed: u64,
    /// `--sequencer-history`: the sequencer's history slots (none: the engine's default).
    sequencer_history: Option<u64>,
    /// `--resilience` of the sequencer.
    resilience: u8,
    /// `--method` of the sequencer.
    method: rmcast_proto::sequencer::Method,
    /// `--netns`: the namespaces the workers run in, in turn.
    netns: Vec<Netns>,
    /// The first sending member (1 unless an experiment sends from a member that is not the
    /// sequencer); members `first_sender..first_sender + senders` send.
    first_sender: usize,
}

impl RunConfig {
    /// The sequencer's history slots, if set and the engine is the sequencer.
    fn history(&self) -> Option<u64> {
        self.sequencer_history
            .filter(|_| self.engine == "sequencer")
    }

    /// The engine's name in the table: `sequencer/N` with a history of N slots.
    /// The sequencer's resilience degree and method, as the other engines' rows take none.
    fn sequencer_settings(&self) -> (u8, rmcast_proto::sequencer::Method) {
        if self.engine == "sequencer" {
            (self.resilience, self.method)
        } else {
            (0, rmcast_proto::sequencer::Method::Auto)
        }
    }

    fn engine_label(&self) -> String {
        let mut label = match self.history() {
            Some(h) => format!("{}/{h}", self.engine),
            None => self.engine.clone(),
        };
        let (r, method) = self.sequencer_settings();
        if r > 0 {
            label.push_str(&format!(" r={r}"));
        }
        if method != rmcast_proto::sequencer::Method::Auto {
            label.push_str(&format!(" {method}"));
        }
        label
    }
}

// ---------------------------------------------------------------------------------------------
// Raw UDP multicast baseline
// ---------------------------------------------------------------------------------------------

/// State shared by the raw sender and receiver threads; only atomics, so the hot loops take no
/// lock.
struct RawShared {
    epoch: Instant,
    run_id: u32,
    senders: usize,
    /// Senders stop (timeout).
    stop_tx: AtomicBool,
    /// Receivers stop (end of drain).
    stop_rx: AtomicBool,
    /// Per (receiver, sender): one past the highest message number received. Senders pace on
    /// the slowest receiver; a gap (a drop) does not hold the window back.
    next: Vec<AtomicU64>,
    /// Per receiver: messages received so far (progress and drain).
    received: Vec<AtomicU64>,
    /// Per sender: messages sent so far.
    sent: Vec<AtomicU64>,
}

impl RawShared {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

/// What a raw receiver thread found.
struct RawRecv {
    received: u64,
    strays: u64,
    last_rx_ns: u64,
    hist: Hist,
}

/// What a raw sender thread did.
struct RawSend {
    sent: u64,
    stalls: u64,
    end_ns: u64,
}

/// A multicast group address and port nobody else on the host is likely to use: the address
/// from the process id, the port from the kernel's ephemeral range (free right now).
fn private_group() -> Result<SocketAddrV4> {
    let pid = std::process::id();
    let addr = Ipv4Addr::new(239, 255, (pid >> 8) as u8, pid as u8 | 1);
    let probe = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).context("probing for a free port")?;
    let port = probe.local_addr()?.port();
    Ok(SocketAddrV4::new(addr, port))
}

/// A socket receiving `group` on loopback. Bound to the group address itself, so it gets only
/// this group's datagrams (docs/ARCHITECTURE.md: a 0.0.0.0 socket would get every group on the port).
fn raw_receiver(group: SocketAddrV4) -> Result<Socket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.bind(&SocketAddr::V4(group).into())
        .with_context(|| format!("binding {group}"))?;
    s.join_multicast_v4(group.ip(), &Ipv4Addr::LOCALHOST)
        .with_context(|| format!("joining {} on 127.0.0.1", group.ip()))?;
    // Best effort: the kernel caps it at net.core.rmem_max, and a smaller buffer only means a
    // smaller default window.
    let _ = s.set_recv_buffer_size(RAW_RCVBUF_BYTES);
    s.set_read_timeout(Some(Duration::from_millis(20)))?;
    Ok(s)
}

/// A socket sending to multicast groups on loopback only: interface 127.0.0.1, TTL 0, loop on.
fn raw_sender() -> Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_multicast_if_v4(&Ipv4Addr::LOCALHOST)?;
    s.set_multicast_ttl_v4(0)?;
    s.set_multicast_loop_v4(true)?;
    let _ = s.set_send_buffer_size(1 << 20);
    s.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())?;
    Ok(s.into())
}

fn run_raw(cfg: &RunConfig) -> Result<Measurement> {
    let group = private_group()?;
    let receivers: Vec<Socket> = (0..cfg.members)
        .map(|_| raw_receiver(group))
        .collect::<Result<_>>()
        .context("loopback multicast is not available for the raw baseline")?;
    let rcvbuf = receivers[0].recv_buffer_size().unwrap_or(212_992);
    let window = u64::from(cfg.raw_window.unwrap_or_else(|| {
        let fits = rcvbuf / (cfg.size + SKB_OVERHEAD_BYTES) / 2 / cfg.senders;
        // Capped: beyond a few hundred datagrams throughput no longer grows, only queueing delay.
        fits.clamp(8, 512) as u32
    }));
    let shared = Arc::new(RawShared {
        epoch: Instant::now(),
        // Different in every run, so datagrams of an earlier run still queued are told apart.
        run_id: std::process::id().rotate_left(16)
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos()),
        senders: cfg.senders,
        stop_tx: AtomicBool::new(false),
        stop_rx: AtomicBool::new(false),
        next: (0..cfg.members * cfg.senders)
            .map(|_| AtomicU64::new(0))
            .collect(),
        received: (0..cfg.members).map(|_| AtomicU64::new(0)).collect(),
        sent: (0..cfg.senders).map(|_| AtomicU64::new(0)).collect(),
    });

    // Everybody starts together, after every receiver has joined: nothing is sent into a group
    // that is not listening yet.
    let start = Arc::new(Barrier::new(cfg.members + cfg.senders + 1));
    let mut rx_threads = Vec::new();
    for (r, sock) in receivers.into_iter().enumerate() {
        let (sh, st, size) = (shared.clone(), start.clone(), cfg.size);
        rx_threads.push(
            thread::Builder::new()
                .name(format!("raw-rx-{r}"))
                .spawn(move || raw_receive(r, sock.into(), size, &sh, &st))?,
        );
    }
    let mut tx_threads = Vec::new();
    for s in 0..cfg.senders {
        let sock = raw_sender()?;
        let (sh, st, size, limit) = (shared.clone(), start.clone(), cfg.size, cfg.limit);
        let rate = cfg.rate;
        tx_threads.push(
            thread::Builder::new()
                .name(format!("raw-tx-{s}"))
                .spawn(move || raw_send(s, sock, group, size, limit, rate, window, &sh, &st))?,
        );
    }

    let pb = progress(cfg, "raw");
    start.wait();
    let t0 = Instant::now();
    let start_ns = shared.now_ns();
    // Sending phase, bounded by the timeout.
    while !tx_threads.iter().all(|t| t.is_finished()) {
        thread::sleep(Duration::from_millis(100));
        update_progress(
            &pb,
            cfg,
            t0,
            shared.sent.iter().map(|a| a.load(Ordering::Relaxed)),
        );
        if t0.elapsed() > cfg.timeout {
            shared.stop_tx.store(true, Ordering::Relaxed);
        }
    }
    let mut notes = Vec::new();
    let mut sent = 0;
    let mut stalls = 0;
    let mut send_end_ns = start_ns;
    for t in tx_threads {
        let r = t
            .join()
            .map_err(|_| anyhow::anyhow!("raw sender thread panicked"))??;
        sent += r.sent;
        stalls += r.stalls;
        send_end_ns = send_end_ns.max(r.end_ns);
    }
    if shared.stop_tx.load(Ordering::Relaxed) {
        notes.push(format!(
            "senders stopped by the {} s timeout",
            cfg.timeout.as_secs()
        ));
    }
    if stalls > 0 {
        notes.push(format!(
            "senders ignored the {window}-datagram window {stalls} times (receiver silent for {} ms)",
            RAW_STALL.as_millis()
        ));
    }

    // Drain: until every receiver has everything, or nothing moved for a while.
    let drain_start = Instant::now();
    let mut last_total = u64::MAX;
    let mut last_move = Instant::now();
    loop {
        let counts: Vec<u64> = shared
            .received
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if counts.iter().all(|&c| c >= sent) {
            break;
        }
        if total != last_total {
            last_total = total;
            last_move = Instant::now();
        }
        if last_move.elapsed() > DRAIN_QUIET || drain_start.elapsed() > DRAIN_MAX {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    shared.stop_rx.store(true, Ordering::Relaxed);
    pb.finish_and_clear();

    let mut figures = Vec::new();
    let mut strays = 0;
    for t in rx_threads {
        let r = t
            .join()
            .map_err(|_| anyhow::anyhow!("raw receiver thread panicked"))??;
        strays += r.strays;
        // Rate over the time this member was busy: from the common start to its last message.
        let busy_s = (r.last_rx_ns.max(send_end_ns) - start_ns) as f64 / 1e9;
        figures.push(MemberFigures {
            received: r.received,
            msgs_per_sec: if busy_s > 0.0 {
                r.received as f64 / busy_s
            } else {
                0.0
            },
            latency_p50_us: r.hist.quantile(0.50) as f64 / 1e3,
            latency_p99_us: r.hist.quantile(0.99) as f64 / 1e3,
            latency_p999_us: r.hist.quantile(0.999) as f64 / 1e3,
            windows: Vec::new(),
            cpu_s: 0.0,
            datagrams_sent: 0,
        });
    }
    if strays > 0 {
        notes.push(format!("{strays} stray datagrams ignored"));
    }
    if sent > 0 && figures.iter().any(|f| f.received == 0) {
        bail!(
            "a raw receiver got nothing of {sent} datagrams sent to {group}: \
             loopback multicast does not work on this host"
        );
    }
    notes.push(format!("window {window} datagrams, rcvbuf {rcvbuf} B"));
    Ok(Measurement {
        implementation: "raw",
        engine: String::new(),
        size_bytes: cfg.size,
        senders: cfg.senders,
        sent,
        members: figures,
        perturbed: None,
        notes,
    })
}

fn raw_receive(
    r: usize,
    sock: UdpSocket,
    size: usize,
    sh: &RawShared,
    start: &Barrier,
) -> Result<RawRecv> {
    let mut buf = vec![0u8; MAX_SIZE_BYTES + 1];
    let mut out = RawRecv {
        received: 0,
        strays: 0,
        last_rx_ns: 0,
        hist: Hist::new(),
    };
    start.wait();
    while !sh.stop_rx.load(Ordering::Relaxed) {
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("raw receive"),
        };
        let now = sh.now_ns();
        let Some(p) = Probe::read(&buf[..n]) else {
            out.strays += 1;
            continue;
        };
        if p.run_id != sh.run_id || n != size || p.sender as usize >= sh.senders {
            out.strays += 1;
            continue;
        }
        out.received += 1;
        out.last_rx_ns = now;
        out.hist.record(now.saturating_sub(p.sent_ns));
        // Single writer per slot: a plain store of the maximum is enough.
        let slot = &sh.next[r * sh.senders + p.sender as usize];
        if p.number + 1 > slot.load(Ordering::Relaxed) {
            slot.store(p.number + 1, Ordering::Relaxed);
        }
        sh.received[r].store(out.received, Ordering::Relaxed);
    }
    Ok(out)
}

/// Wait until the shared clock reads `at_ns`: asleep while far from it, then spinning, so that
/// paced sends leave on time without burning a core between them.
fn pace(sh: &RawShared, at_ns: u64) {
    loop {
        let now = sh.now_ns();
        if now >= at_ns {
            return;
        }
        let left = at_ns - now;
        if left > 200_000 {
            thread::sleep(Duration::from_nanos(left - 100_000));
        } else {
            std::hint::spin_loop();
        }
    }
}

#[allow(clippy::too_many_arguments)] // a thread body: all of it is the thread's own setup
fn raw_send(
    s: usize,
    sock: UdpSocket,
    group: SocketAddrV4,
    size: usize,
    limit: Limit,
    rate: Option<u64>,
    window: u64,
    sh: &RawShared,
    start: &Barrier,
) -> Result<RawSend> {
    let mut buf = vec![0u8; size];
    // Filler that is not all zeros, so nothing along the way can shortcut it.
    for (i, b) in buf.iter_mut().enumerate().skip(BENCH_HEADER_BYTES) {
        *b = i as u8;
    }
    let receivers = sh.received.len();
    // Connected: the kernel resolves the route once, not per datagram.
    sock.connect(group)
        .with_context(|| format!("connecting to {group}"))?;
    start.wait();
    let (count, deadline_ns) = match limit {
        Limit::Messages(n) => (n, u64::MAX),
        Limit::Duration(d) => (u64::MAX, sh.now_ns() + d.as_nanos() as u64),
    };
    let slowest = |sh: &RawShared| {
        (0..receivers)
            .map(|r| sh.next[r * sh.senders + s].load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    };
    let mut stalls = 0;
    let mut acked = 0u64;
    let mut n = 0u64;
    let paced_from = sh.now_ns();
    while n < count {
        if let Some(rate) = rate {
            pace(sh, paced_from + n * 1_000_000_000 / rate);
        }
        // Time and the stop flag are read every 64 messages: cheap enough, and a duration run
        // overshoots by at most 64 datagrams.
        if n % 64 == 0 && (sh.now_ns() >= deadline_ns || sh.stop_tx.load(Ordering::Relaxed)) {
            break;
        }
        if n - acked >= window {
            acked = slowest(sh);
            if n - acked >= window {
                let waited = Instant::now();
                loop {
                    thread::sleep(RAW_PACE_SLEEP);
                    acked = slowest(sh);
                    if n - acked < window {
                        break;
                    }
                    if waited.elapsed() > RAW_STALL || sh.stop_tx.load(Ordering::Relaxed) {
                        // A silent receiver (or a lost datagram at the window's edge): move
                        // the window on rather than wait for ever.
                        stalls += 1;
                        acked = n + 1 - window;
                        break;
                    }
                }
            }
        }
        Probe {
            run_id: sh.run_id,
            sender: s as u32,
            number: n,
            sent_ns: sh.now_ns(),
        }
        .write(&mut buf);
        loop {
            match sock.send(&buf) {
                Ok(_) => break,
                // The send queue is full (ENOBUFS on Linux): give the receivers the CPU.
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.raw_os_error() == Some(105) => {
                    thread::yield_now()
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e).with_context(|| format!("raw send to {group}")),
            }
        }
        n += 1;
        if n % 64 == 0 {
            sh.sent[s].store(n, Ordering::Relaxed);
        }
    }
    sh.sent[s].store(n, Ordering::Relaxed);
    Ok(RawSend {
        sent: n,
        stalls,
        end_ns: sh.now_ns(),
    })
}

/// The first [`BENCH_HEADER_BYTES`] of every benchmark message.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Probe {
    run_id: u32,
    sender: u32,
    number: u64,
    sent_ns: u64,
}

impl Probe {
    fn write(&self, buf: &mut [u8]) {
        buf[0..4].copy_from_slice(&self.run_id.to_be_bytes());
        buf[4..8].copy_from_slice(&self.sender.to_be_bytes());
        buf[8..16].copy_from_slice(&self.number.to_be_bytes());
        buf[16..24].copy_from_slice(&self.sent_ns.to_be_bytes());
    }

    fn read(buf: &[u8]) -> Option<Probe> {
        let b = buf.get(..BENCH_HEADER_BYTES)?;
        Some(Probe {
            run_id: u32::from_be_bytes(b[0..4].try_into().ok()?),
            sender: u32::from_be_bytes(b[4..8].try_into().ok()?),
            number: u64::from_be_bytes(b[8..16].try_into().ok()?),
            sent_ns: u64::from_be_bytes(b[16..24].try_into().ok()?),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// rmcast
// ---------------------------------------------------------------------------------------------

/// Messages per sender of the calibration run that sizes a duration-bound rmcast measurement.
const CALIBRATION_MSGS: u64 = 3_000;
/// Upper bound of messages per sender, whatever the calibration says.
const MAX_RMCAST_MSGS: u64 = 50_000_000;
/// A calibration run shorter than this is repeated with ten times the messages.
const MIN_CALIBRATION_SECS: f64 = 0.1;
/// The most messages per sender a calibration run grows to.
const MAX_CALIBRATION_MSGS: u64 = 300_000;

fn run_rmcast(cfg: &RunConfig) -> Result<Measurement> {
    let mut notes = Vec::new();
    let count = match (cfg.limit, cfg.rate) {
        (Limit::Messages(n), _) => n,
        // Paced: the duration holds this many messages, no calibration needed.
        (Limit::Duration(d), Some(rate)) => (rate as f64 * d.as_secs_f64()).ceil() as u64,
        // The worker sends a count, not for a duration: a short run first tells how many
        // messages the duration holds at this size.
        (Limit::Duration(d), None) => {
            // Unperturbed: it measures what the group can do.
            let calibration = RunConfig {
                perturb: None,
                ..cfg.clone()
            };
            // Small messages bundle into a few datagrams: a probe that short may be delivered
            // in one burst and measure a rate no group sustains (a 50-million-message run
            // followed). The probe grows until it lasts long enough to time, and the slowest
            // member's rate sizes the run.
            let mut probe_msgs = CALIBRATION_MSGS;
            let rate = loop {
                let probe = run_workers(&calibration, probe_msgs, "rmcast probe", None)?;
                let rate = probe.min_rate() / cfg.senders as f64;
                // Also catches NaN from a run that delivered nothing.
                if rate.is_nan() || rate <= 0.0 {
                    bail!("the calibration run delivered nothing");
                }
                if probe_msgs as f64 / rate >= MIN_CALIBRATION_SECS
                    || probe_msgs >= MAX_CALIBRATION_MSGS
                {
                    break rate;
                }
                probe_msgs *= 10;
            };
            let n = ((rate * d.as_secs_f64()) as u64).clamp(CALIBRATION_MSGS, MAX_RMCAST_MSGS);
            notes.push(format!(
                "{n} messages per sender, from a {probe_msgs}-message calibration run at {} msgs/s",
                si(rate)
            ));
            n
        }
    };
    let pb_len = match cfg.limit {
        Limit::Duration(d) => Some(d),
        Limit::Messages(_) => None,
    };
    let what = if cfg.keys.key_file.is_some() {
        "secure"
    } else {
        "rmcast"
    };
    let mut m = run_workers(cfg, count, what, pb_len)?;
    notes.append(&mut m.notes);
    m.notes = notes;
    Ok(m)
}

/// Start one worker per member, each sending `count` messages (only the first when one member
/// sends), wait for all of them within the timeout and read their stats lines.
fn run_workers(
    cfg: &RunConfig,
    count: u64,
    what: &str,
    expected_time: Option<Duration>,
) -> Result<Measurement> {
    let group = fresh_group_name("rmcast-bench");
    let dir = std::env::temp_dir().join(&group);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = run_workers_in(cfg, count, what, expected_time, &group, &dir);
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

fn run_workers_in(
    cfg: &RunConfig,
    count: u64,
    what: &str,
    expected_time: Option<Duration>,
    group: &str,
    dir: &std::path::Path,
) -> Result<Measurement> {
    let worker_timeout = worker_timeout(cfg.timeout);
    let expect = count * cfg.senders as u64;

    let pb = bar(
        expected_time.map(|d| d.as_millis() as u64),
        format!("{what} {} B", cfg.size),
    );
    pb.set_message(format!("{} worker processes", cfg.members));

    // Perturbed for the measured duration, once everybody is in.
    let perturb_for = match cfg.limit {
        Limit::Duration(d) => d,
        Limit::Messages(_) => Duration::ZERO,
    };
    let mut perturber = cfg
        .perturb
        .map(|p| Perturber::new(p, cfg.members, cfg.seed, dir, perturb_for));
    let spec = WorkerSpec {
        noun: "worker",
        group,
        members: cfg.members,
        dir,
        // Kept apart so that it does not tear the progress bar; shown on failure.
        stderr: WorkerStderr::File,
        deadline: Instant::now() + cfg.timeout,
        poll: if perturber.is_some() {
            perturb::POLL
        } else {
            Duration::from_millis(50)
        },
        netns: &cfg.netns,
    };
    let member = MemberArgs {
        engine: cfg.engine.clone(),
        qos: cfg.qos,
        resilience: cfg.sequencer_settings().0,
        method: cfg.sequencer_settings().1,
        max_datagram_bytes: cfg.max_datagram_bytes,
        size: cfg.size as u64,
        members: cfg.members,
        timeout: worker_timeout,
        // A sleeper must not be taken for a crash.
        recovery: cfg.perturb.map(|_| perturb::generous_recovery()),
        log_dir: None,
        net: cfg.net.clone(),
        keys: cfg.keys.clone(),
    };
    let outcomes = spec.run(
        |id, cmd| {
            let sending = cfg.first_sender..cfg.first_sender + cfg.senders;
            let sends = if sending.contains(&id) { count } else { 0 };
            match Netns::for_worker(&cfg.netns, id) {
                // Its own host: its namespace's address, a TTL that leaves it.
                Some(ns) => {
                    let mut m = member.clone();
                    m.net.interface = std::net::IpAddr::V4(ns.addr).into();
                    m.net.ttl = m.net.ttl.max(1);
                    m.apply(id, cmd);
                }
                None => member.apply(id, cmd),
            }
            cmd.args(["--count", &sends.to_string()])
                .args(["--expect", &expect.to_string()]);
            if let Some(rate) = cfg.rate {
                cmd.args(["--rate", &rate.to_string()]);
            }
            if let Some(h) = cfg.history() {
                cmd.args(["--sequencer-history-msgs", &h.to_string()]);
            }
        },
        |waited, running| {
            match expected_time {
                Some(d) => pb.set_position(waited.min(d).as_millis() as u64),
                None => pb.tick(),
            }
            if let Some(p) = perturber.as_mut() {
                p.tick(running)?;
            }
            Ok(())
        },
    );
    pb.finish_and_clear();
    let outcomes = outcomes?;

    let mut notes = Vec::new();
    if cfg.qos != rmcast::Qos::TotallyOrdered {
        notes.push(format!("{} at --qos {}", cfg.engine, cfg.qos));
    }
    if let Some(p) = &perturber {
        notes.push(p.summary());
    }
    let killed = killed(&outcomes);
    if !killed.is_empty() {
        notes.push(format!(
            "workers {killed:?} overran the {} s timeout and were killed",
            cfg.timeout.as_secs()
        ));
    }
    let mut figures = Vec::new();
    let mut sent = 0;
    let mut refused = 0;
    let (mut datagrams, mut retrans, mut nacks, mut refusals, mut stalls) = (0, 0, 0, 0, 0);
    let mut engine_counters: std::collections::BTreeMap<String, u64> = Default::default();
    let mut problems = Vec::new();
    for w in &outcomes {
        let Some(st) = &w.stats else {
            let tail = w.stderr_tail(5);
            problems.push(format!(
                "worker {} printed no statistics ({}){}",
                w.index,
                w.status.map_or("killed".to_string(), |s| s.to_string()),
                if tail.is_empty() {
                    String::new()
                } else {
                    format!(": {}", tail.join(" | "))
                }
            ));
            continue;
        };
        if !st.complete {
            notes.push(format!(
                "worker {} delivered {} of {} messages",
                w.index, st.delivered, st.expected
            ));
        }
        if !st.barrier || !st.left_cleanly {
            notes.push(format!(
                "worker {}: barrier {}, clean leave {}",
                w.index, st.barrier, st.left_cleanly
            ));
        }
        sent += st.sent;
        datagrams += st.datagrams_sent;
        retrans += st.retransmissions;
        for (k, v) in &st.engine_counters {
            *engine_counters.entry(k.clone()).or_insert(0u64) += v;
        }
        nacks += st.nacks_sent;
        refusals += st.backpressure_refusals;
        stalls += st.event_queue_stalls;
        refused += st.node_refused;
        if st.failures > 0 || st.resets > 0 || st.expelled {
            notes.push(format!(
                "worker {}: {} failures seen, {} resets{}",
                w.index,
                st.failures,
                st.resets,
                if st.expelled { ", expelled" } else { "" }
            ));
        }
        figures.push(MemberFigures {
            received: st.delivered,
            msgs_per_sec: st.msgs_per_s,
            latency_p50_us: st.latency_us_p50,
            latency_p99_us: st.latency_us_p99,
            latency_p999_us: st.latency_us_p999,
            windows: st.windows.clone(),
            cpu_s: st.cpu_s,
            datagrams_sent: st.measured_datagrams_sent,
        });
    }
    if !problems.is_empty() {
        bail!("{} (logs in {})", problems.join("; "), dir.display());
    }
    notes.push(format!(
        "{:.2} datagrams per message, {retrans} retransmissions, {nacks} NACKs, \
         {refusals} back-pressure refusals, {stalls} event-queue stalls",
        datagrams as f64 / sent.max(1) as f64
    ));
    if !engine_counters.is_empty() {
        let list: Vec<String> = engine_counters
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        notes.push(format!(
            "engine counters (sum over members): {}",
            list.join(", ")
        ));
    }
    if cfg.keys.key_file.is_some() {
        notes.push(format!(
            "{refused} datagrams refused by the members' runtimes (verification, replay window)"
        ));
    }
    let perturbed = match (cfg.perturb, &perturber) {
        (Some(p), Some(pt)) => {
            // The unperturbed receivers: members 2..=N-F (the sender alone if there are none).
            let last = cfg.members - pt.targets().len();
            let chosen: Vec<u32> = if last >= 2 {
                (2..=last as u32).collect()
            } else {
                vec![1]
            };
            let windows: Vec<&[u64]> = chosen
                .iter()
                .map(|&i| figures[i as usize - 1].windows.as_slice())
                .collect();
            let n = (perturb_for.as_millis() / u128::from(WINDOW_MS)) as usize;
            let (mean, std, min) = perturb::window_stats(&windows, n);
            Some(WindowFigures {
                perturbed: pt.targets().len(),
                probability: p.probability,
                members: chosen,
                windows: n,
                mean_msgs_per_s: mean,
                std_msgs_per_s: std,
                min_msgs_per_s: min,
                sleeps: pt.sleeps(),
            })
        }
        _ => None,
    };
    Ok(Measurement {
        implementation: if cfg.keys.key_file.is_some() {
            "secure"
        } else {
            "rmcast"
        },
        engine: cfg.engine_label(),
        size_bytes: cfg.size,
        senders: cfg.senders,
        sent,
        members: figures,
        perturbed,
        notes,
    })
}

// ---------------------------------------------------------------------------------------------
// Progress, latency histogram, table
// ---------------------------------------------------------------------------------------------

/// A progress bar on stderr (hidden when stderr is not a terminal) over `len` units, or a
/// spinner when the length is not known. The simulator's sweeps draw theirs with it too.
pub(crate) fn bar(len: Option<u64>, prefix: String) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(len, ProgressDrawTarget::stderr());
    let style = match len {
        Some(_) => ProgressStyle::with_template("{prefix:>14} [{bar:30}] {percent:>3}% {msg}")
            .expect("static template")
            .progress_chars("=> "),
        None => ProgressStyle::with_template("{prefix:>14} {spinner} {elapsed} {msg}")
            .expect("static template"),
    };
    pb.set_style(style);
    pb.set_prefix(prefix);
    pb
}

/// The raw run's bar: time for a duration, messages for a count.
fn progress(cfg: &RunConfig, what: &str) -> ProgressBar {
    let len = match cfg.limit {
        Limit::Duration(d) => d.as_millis() as u64,
        Limit::Messages(n) => n * cfg.senders as u64,
    };
    bar(Some(len), format!("{what} {} B", cfg.size))
}

fn update_progress(
    pb: &ProgressBar,
    cfg: &RunConfig,
    t0: Instant,
    sent: impl Iterator<Item = u64>,
) {
    let sent: u64 = sent.sum();
    let secs = t0.elapsed().as_secs_f64();
    match cfg.limit {
        Limit::Duration(d) => pb.set_position((t0.elapsed().min(d)).as_millis() as u64),
        Limit::Messages(_) => pb.set_position(sent),
    }
    if secs > 0.0 {
        pb.set_message(format!("{} msgs/s sent", si(sent as f64 / secs)));
    }
}

/// A log-linear latency histogram: exact below 64 ns, then 32 buckets per power of two (about 3%
/// resolution), fixed size, so recording never allocates.
struct Hist {
    counts: Vec<u64>,
    total: u64,
}

impl Hist {
    const SUB_BITS: u32 = 5;
    const LINEAR: u64 = 64;

    fn new() -> Hist {
        let buckets = Self::LINEAR as usize + (64 - 6) * (1 << Self::SUB_BITS);
        Hist {
            counts: vec![0; buckets],
            total: 0,
        }
    }

    fn index(v: u64) -> usize {
        if v < Self::LINEAR {
            return v as usize;
        }
        let e = 63 - v.leading_zeros(); // 6..=63
        let sub = (v >> (e - Self::SUB_BITS)) & ((1 << Self::SUB_BITS) - 1);
        Self::LINEAR as usize + ((e - 6) as usize) * (1 << Self::SUB_BITS) + sub as usize
    }

    /// Lower bound of bucket `i`.
    fn value(i: usize) -> u64 {
        if i < Self::LINEAR as usize {
            return i as u64;
        }
        let j = i - Self::LINEAR as usize;
        let e = (j >> Self::SUB_BITS) as u32 + 6;
        let sub = (j & ((1 << Self::SUB_BITS) - 1)) as u64;
        ((1 << Self::SUB_BITS) + sub) << (e - Self::SUB_BITS)
    }

    fn record(&mut self, v: u64) {
        self.counts[Self::index(v)] += 1;
        self.total += 1;
    }

    /// The value at quantile `q` (0..=1), or 0 when empty.
    fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::value(i);
            }
        }
        Self::value(self.counts.len() - 1)
    }
}

/// 1234567.0 -> "1.23M".
fn si(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// Microseconds, in a unit that keeps three digits.
fn micros(us: f64) -> String {
    if !us.is_finite() {
        "-".into()
    } else if us >= 10_000.0 {
        format!("{:.1} ms", us / 1e3)
    } else if us >= 1_000.0 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{us:.0} µs")
    }
}

/// A row's name in the table and the figure: the implementation, and for rmcast rows the engine
/// when a run measured several.
fn label(m: &Measurement, rows: &[Measurement]) -> String {
    let several = rows
        .iter()
        .any(|r| !r.engine.is_empty() && r.engine != m.engine);
    if m.implementation == "rmcast" && several {
        m.engine.clone()
    } else {
        m.implementation.to_string()
    }
}

fn render_table(rows: &[Measurement]) -> String {
    let mut out = String::new();
    let per_member: Vec<String> = rows
        .iter()
        .map(|m| {
            m.members
                .iter()
                .map(|f| si(f.msgs_per_sec))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let w = per_member
        .iter()
        .map(|s| s.chars().count())
        .max()
        .unwrap_or(0)
        .max("msgs/s at each member".len());
    let _ = writeln!(
        out,
        "{:>6}  {:<9}  {:<w$}  {:>9}  {:>9}  {:>9}  {:>9}  {:>8}  {:>10}",
        "size",
        "impl",
        "msgs/s at each member",
        "MB/s",
        "lat p50",
        "lat p99",
        "lat p999",
        "lost",
        "rmcast/raw"
    );
    for (m, pm) in rows.iter().zip(&per_member) {
        // Against raw; a secure row also against rmcast without a key.
        let versus = |imp: &str| {
            rows.iter()
                .find(|r| r.implementation == imp && r.size_bytes == m.size_bytes)
                .map(|r| r.mean_rate())
                .filter(|&r| r > 0.0)
                .map_or("-".to_string(), |r| format!("{:.2}x", m.mean_rate() / r))
        };
        let ratio = match m.implementation {
            "rmcast" => versus("raw"),
            "secure" => format!("{} ({} plain)", versus("raw"), versus("rmcast")),
            _ => String::new(),
        };
        let lost = m.lost_text();
        let _ = writeln!(
            out,
            "{:>6}  {:<9}  {:<w$}  {:>9.1}  {:>9}  {:>9}  {:>9}  {:>8}  {:>10}",
            format!("{} B", m.size_bytes),
            label(m, rows),
            pm,
            m.mean_rate() * m.size_bytes as f64 / 1e6,
            micros(m.p50_us()),
            micros(m.p99_us()),
            micros(m.p999_us()),
            lost,
            ratio,
        );
    }
    out.push_str(
        "\nmsgs/s: messages delivered per second at each member (every member receives every\n\
         message, its own included). MB/s: payload per member, mean over members. Latency, send\n\
         to delivery: median of the members' p50, worst member's p99 and p99.9. raw sends one datagram per\n\
         message; rmcast bundles small messages into one datagram, so it can outrun raw (see its\n\
         datagrams per message below). secure: rmcast in a group with a key (every datagram\n\
         sealed with AES-256-GCM); its ratio to rmcast without a key is in parentheses.\n",
    );
    out.push_str(&render_perturbed(rows));
    for m in rows {
        for n in &m.notes {
            let _ = writeln!(out, "  {} {} B: {n}", label(m, rows), m.size_bytes);
        }
    }
    out
}

/// The table of `--perturb` runs: throughput per window at the unperturbed members.
fn render_perturbed(rows: &[Measurement]) -> String {
    let mut out = String::new();
    let perturbed: Vec<(&Measurement, &WindowFigures)> = rows
        .iter()
        .filter_map(|m| m.perturbed.as_ref().map(|p| (m, p)))
        .collect();
    let Some((_, first)) = perturbed.first() else {
        return out;
    };
    let who = match (first.members.first(), first.members.last()) {
        (Some(a), Some(b)) if a != b => format!("members {a}..={b}"),
        (Some(a), _) => format!("member {a}"),
        _ => "nobody".to_string(),
    };
    let _ = writeln!(
        out,
        "\nPerturbed: {} members sleep {} ms with probability {} every {} ms. Throughput in \
         {WINDOW_MS} ms windows at the unperturbed receivers ({who}), {} windows each:",
        first.perturbed,
        perturb::PERIOD.as_millis(),
        first.probability,
        perturb::PERIOD.as_millis(),
        first.windows,
    );
    let _ = writeln!(
        out,
        "{:>6}  {:<10}  {:>11}  {:>10}  {:>12}  {:>7}  {:>6}",
        "size", "engine", "mean msgs/s", "std msgs/s", "min window/s", "sleeps", "lost"
    );
    for (m, p) in perturbed {
        let lost = m.lost_text();
        let _ = writeln!(
            out,
            "{:>6}  {:<10}  {:>11.1}  {:>10.1}  {:>12.0}  {:>7}  {:>6}",
            format!("{} B", m.size_bytes),
            m.engine,
            p.mean_msgs_per_s,
            p.std_msgs_per_s,
            p.min_msgs_per_s,
            p.sleeps,
            lost,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hist_quantiles_within_resolution() {
        let mut h = Hist::new();
        for v in 1..=10_000u64 {
            h.record(v * 1_000);
        }
        let p50 = h.quantile(0.5) as f64;
        let p99 = h.quantile(0.99) as f64;
        assert!((p50 / 5_000_000.0 - 1.0).abs() < 0.04, "{p50}");
        assert!((p99 / 9_900_000.0 - 1.0).abs() < 0.04, "{p99}");
        assert_eq!(Hist::new().quantile(0.5), 0);
        // Every bucket's lower bound maps back to the bucket.
        for i in 0..h.counts.len() {
            assert_eq!(Hist::index(Hist::value(i)), i);
        }
        h.record(u64::MAX);
        assert_eq!(h.quantile(1.0), Hist::value(Hist::index(u64::MAX)));
    }

    #[test]
    fn probe_roundtrip() {
        let p = Probe {
            run_id: 7,
            sender: 2,
            number: 99,
            sent_ns: 123_456_789,
        };
        let mut buf = [0u8; 64];
        p.write(&mut buf);
        assert_eq!(Probe::read(&buf), Some(p));
        assert_eq!(Probe::read(&buf[..23]), None);
    }

    #[test]
    fn argument_errors_are_clear() {
        assert!(parse_size("23").unwrap_err().contains("24..=65507"));
        assert!(parse_size("65508").is_err());
        assert!(parse_size("abc").unwrap_err().contains("not a size"));
        assert_eq!(parse_size(" 64"), Ok(64));
        assert!(crate::member::parse_max_datagram("255")
            .unwrap_err()
            .contains("256..=65507"));
        assert!(crate::member::parse_max_datagram("65508").is_err());
        assert!(crate::member::parse_max_datagram("x")
            .unwrap_err()
            .contains("not a size"));
        assert_eq!(crate::member::parse_max_datagram("256"), Ok(256));
        assert_eq!(crate::member::parse_max_datagram("65507"), Ok(65507));
        assert_eq!(parse_senders("all"), Ok(Senders::All));
        assert!(parse_senders("2").unwrap_err().contains("`1` or `all`"));
    }
}
