//! The arguments of `rmcast sim` and the small types they parse into, apart from the commands
//! that read them, so that every experiment depends on them and none on another.

use clap::Args;
use rmcast_proto::catalog;
use rmcast_sim::stability;

/// The experiments of `rmcast sim --experiment`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Experiment {
    /// Throughput and latency on a shared 10 Mbit/s medium as the group and the number of
    /// sources grow (RMP paper, Figures 5.1 to 5.3), ring and sequencer engines side by side.
    Rmp,
    /// Throughput at the unperturbed members while perturbed members sleep at random
    /// ("Throughput Stability of Reliable Multicast Protocols", Figures 2 to 7), gossip and
    /// sequencer engines side by side.
    Pbcast,
    /// RMTP's Tables IV to VI: a 1 MB file to 18 receivers in five areas, with DRs and without
    /// (takes --messages, --seed, --threads and --plot).
    Rmtp,
    /// The Amoeba paper's Figures 21 and 23-28: the sequencer's delay against the group size
    /// and the resilience degree, its throughput with every member sending (by the PB and the
    /// BB method) and of groups side by side, on a 10 Mbit/s Ethernet with the paper's
    /// processors (takes --messages, --bandwidth-mbps, --seed, --threads and --plot).
    Amoeba,
    /// The bimodal delivery distribution of "Bimodal Multicast" (Birman et al.): for each
    /// message, how many members delivered it, beside the paper's Markov-chain prediction
    /// (takes --members, --crashed, --fanout, --gc-rounds, --loss-rounds, --loss,
    /// --first-loss, --messages, --spacing-rounds, --latency, --seed, --threads and --plot).
    Bimodal,
    /// The Multidriver paper's Tables 1-3 and its implosion control: multicast transactions
    /// of the txn engine beside series of unicast ones (takes --threads and --plot).
    Txn,
    /// What one message costs as the group grows (10 to 1,000 members unless --members
    /// says, 10,000 and more where an engine's limit allows): datagrams sent and CPU per
    /// delivery, every engine or --engine, beside what each paper predicts (takes --members,
    /// --engine, --messages, --seed, --threads, --points and --plot).
    Cost,
    /// Every paper's experiment above (not cost), one after the other, each table and figure into --out DIR
    /// (bimodal with 50 members and 500 messages unless --members or --messages say
    /// otherwise), and a summary with each one's time and verdict into DIR/summary.txt.
    All,
}

impl Experiment {
    /// The experiments `All` runs, in order.
    pub const EACH: [Experiment; 6] = [
        Experiment::Amoeba,
        Experiment::Rmp,
        Experiment::Pbcast,
        Experiment::Bimodal,
        Experiment::Rmtp,
        Experiment::Txn,
    ];

    /// The name `--experiment` takes, and the stem of its files under `--out`.
    pub fn name(self) -> &'static str {
        match self {
            Experiment::Rmp => "rmp",
            Experiment::Pbcast => "pbcast",
            Experiment::Rmtp => "rmtp",
            Experiment::Amoeba => "amoeba",
            Experiment::Bimodal => "bimodal",
            Experiment::Txn => "txn",
            Experiment::Cost => "cost",
            Experiment::All => "all",
        }
    }
}

/// How many members of a group are perturbed (`--perturbed`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Perturbed {
    /// This many.
    Count(u32),
    /// A quarter of the group (`n/4`, at least 1).
    Quarter,
}

impl Perturbed {
    /// The number of perturbed members in a group of `members`.
    pub fn of(self, members: u32) -> u32 {
        match self {
            Perturbed::Count(c) => c,
            Perturbed::Quarter => stability::quarter(members),
        }
    }
}

impl std::fmt::Display for Perturbed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Perturbed::Count(c) => write!(f, "{c}"),
            Perturbed::Quarter => write!(f, "n/4"),
        }
    }
}

/// `--perturbed`: a number of members, or `n/4`.
pub fn parse_perturbed(s: &str) -> Result<Perturbed, String> {
    match s.trim() {
        "n/4" | "N/4" => Ok(Perturbed::Quarter),
        t => match t.parse::<u32>() {
            Ok(c) if c > 0 => Ok(Perturbed::Count(c)),
            _ => Err(format!(
                "{s:?}: a number of perturbed members (at least 1) or n/4"
            )),
        },
    }
}

/// `--engine`: any name of the engine registry ([`catalog::names`]); the error lists them.
fn engine_name(s: &str) -> Result<String, String> {
    match catalog::find(s) {
        Some(f) => Ok(f.name().to_string()),
        None => Err(format!(
            "no engine named {s:?} (engines: {})",
            catalog::names().join(", ")
        )),
    }
}

/// Arguments of `rmcast sim`.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct SimArgs {
    /// Protocol engine to run: a name of the engine registry (`sequencer`, ...); `sequencer`
    /// when not given. With `--experiment cost`, only this engine's points (every engine's
    /// when not given).
    #[arg(short = 'e', long, value_parser = engine_name)]
    pub engine: Option<String>,
    /// Resilience degree r: a send completes once r + 1 members hold the message.
    #[arg(long, default_value_t = 0)]
    pub resilience: u8,
    /// Members at the start (host 0 creates the group, the others join 1 ms apart)
    /// [default: 8]. With --experiment pbcast, the group sizes to run, comma-separated
    /// [default: 8,16,32,64]; with --experiment bimodal [default: 50,128].
    #[arg(long, value_delimiter = ',', num_args = 1)]
    pub members: Vec<u32>,
    /// One-way latency of every link (a bare number: milliseconds, fractions allowed).
    #[arg(long = "latency", default_value = "1ms", value_name = "DURATION", value_parser = crate::dur::ms_f64)]
    pub latency: f64,
    /// Jitter (a bare number: milliseconds; uniform extra latency per datagram): reorders datagrams.
    #[arg(long = "reorder", default_value = "0ms", value_name = "DURATION", value_parser = crate::dur::ms_f64)]
    pub reorder: f64,
    /// Probability that a datagram copy is lost, in [0, 1) [default: 0; with --experiment
    /// pbcast, 0.01; with --experiment bimodal, 0.1].
    #[arg(long)]
    pub loss: Option<f64>,
    /// Probability that a datagram copy arrives twice, in [0, 1).
    #[arg(long, default_value_t = 0.0)]
    pub dup: f64,
    /// Uplink bandwidth of every host in Mbit/s, with a drop-tail queue (default: unlimited;
    /// with --experiment rmp, the shared medium's: 10).
    #[arg(long)]
    pub bandwidth_mbps: Option<f64>,
    /// One shared medium (an Ethernet segment) at --bandwidth-mbps instead of an uplink per
    /// host: every datagram, multicast or unicast, is one transmission on it, hosts take turns.
    #[arg(long)]
    pub shared_medium: bool,
    /// Messages per sender [default: 200; with --experiment rmp, 1000; with --experiment
    /// bimodal, 2000].
    #[arg(long)]
    pub messages: Option<u64>,
    /// Payload bytes per message [default: 64; with --experiment rmp, 1024].
    #[arg(long)]
    pub message_bytes: Option<usize>,
    /// Number of senders (hosts 1, 2, ...; host 0 last).
    #[arg(long, default_value_t = 1)]
    pub senders: u32,
    /// Closed loop: messages in flight per sender (1 = one broadcast at a time) [default: 4;
    /// with --experiment rmp, as many as the engine accepts].
    #[arg(long)]
    pub in_flight: Option<u32>,
    /// Open loop instead: messages per second per sender [with --experiment pbcast: 200].
    #[arg(long)]
    pub rate: Option<f64>,
    /// Joins, and as many leaves, while traffic flows (`--churn` alone means 2).
    #[arg(long, default_value_t = 0, num_args = 0..=1, default_missing_value = "2")]
    pub churn: u32,
    /// Partitions that come and heal while traffic flows (`--partition` alone means 1).
    #[arg(long, default_value_t = 0, num_args = 0..=1, default_missing_value = "1")]
    pub partition: u32,
    /// Longest partition (a bare number: milliseconds; each lasts between half of it and all of it).
    #[arg(long = "partition-duration", alias = "partition-ms", default_value = "300ms", value_name = "DURATION", value_parser = crate::dur::ms(1, 3_600_000))]
    pub partition_ms: u64,
    /// Pauses of one host while traffic flows (`--pause` alone means 1).
    #[arg(long, default_value_t = 0, num_args = 0..=1, default_missing_value = "1")]
    pub pause: u32,
    /// Longest pause (a bare number: milliseconds; each lasts between half of it and all of it).
    #[arg(long = "pause-duration", alias = "pause-ms", default_value = "200ms", value_name = "DURATION", value_parser = crate::dur::ms(1, 3_600_000))]
    pub pause_ms: u64,
    /// Receive buffer of a paused (or, with --experiment pbcast, sleeping) host, in datagrams
    /// (overflow is dropped and counted).
    #[arg(long, default_value_t = 64)]
    pub rx_buffer: usize,
    /// Window after the traffic starts in which faults and churn happen (a bare number: milliseconds).
    #[arg(long = "fault-window", alias = "fault-window-ms", default_value = "500ms", value_name = "DURATION", value_parser = crate::dur::ms(1, 3_600_000))]
    pub fault_window_ms: u64,
    /// Hosts that crash at random moments of the fault window (state lost for good).
    #[arg(long, default_value_t = 0)]
    pub crashes: u32,
    /// The first crash is the sequencer's (host 0).
    #[arg(long)]
    pub crash_sequencer: bool,
    /// Each further crash falls 500-900 ms after the one before: into the recovery from it.
    #[arg(long)]
    pub crash_in_recovery: bool,
    /// Smallest group a reset may form (0: a majority of the view before the failure).
    #[arg(long, default_value_t = 0)]
    pub min_members: u32,
    /// Self-healing, as `rmcast member` does by default: an expelled host joins the group again,
    /// and a run passes only once every host not meant to leave or crash is back in one group.
    #[arg(long)]
    pub heal: bool,
    /// The quality of service of every message (default: the strongest the engine serves):
    /// unreliable, reliable, source-ordered, totally-ordered, k-resilient=K.
    #[arg(long, value_parser = crate::member::parse_qos)]
    pub qos: Option<rmcast_proto::Qos>,
    /// Number of seeds to run (seeds 0..N).
    #[arg(long, default_value_t = 20)]
    pub seeds: u64,
    /// Run this one seed only (replays a failure).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print datagrams per broadcast for r = 0..3, one message in flight and under load.
    #[arg(long)]
    pub message_counts: bool,
    /// Run an experiment instead of a sweep: `rmp` measures the throughput and latency of the
    /// ring and the sequencer engines on a shared 10 Mbit/s medium, as Figures 5.1 to 5.3 of
    /// the RMP paper do (takes --messages, --message-bytes, --in-flight, --latency, --bandwidth-mbps,
    /// --seed, --threads and --plot); `pbcast` measures the throughput of the gossip and the
    /// sequencer engines at the unperturbed members of a group whose perturbed members sleep
    /// at random, as Figures 2 to 7 of "Throughput Stability of Reliable Multicast Protocols"
    /// do (takes --members, --perturbed, --p, --history, --seconds, --rate, --loss,
    /// --rx-buffer, --message-bytes, --latency, --seed, --threads and --plot); `bimodal`
    /// measures how many members deliver each message of the gossip engine beside the
    /// prediction of "Bimodal Multicast" (see --crashed, --fanout, --gc-rounds, --first-loss);
    /// `rmtp`, `amoeba` and `txn` the tables of those papers; `all` every one of them into
    /// --out DIR.
    #[arg(long, value_enum)]
    pub experiment: Option<Experiment>,
    /// With --experiment pbcast: perturb rates, the probability that a perturbed member sleeps
    /// in each 100 ms period, comma-separated [default: 0.1,0.2,...,0.9].
    #[arg(long = "p", value_name = "P", value_delimiter = ',', num_args = 1)]
    pub perturb_rates: Vec<f64>,
    /// With --experiment pbcast: how many members are perturbed, comma-separated: a number, or
    /// `n/4` for a quarter of the group [default: 1,n/4].
    #[arg(long, value_delimiter = ',', num_args = 1, value_parser = parse_perturbed)]
    pub perturbed: Vec<Perturbed>,
    /// With --experiment pbcast: history buffers of the sequencer runs, in messages,
    /// comma-separated; each is one protocol of the tables [default: 128 (the Amoeba paper's)
    /// and the engine's default, 4096].
    #[arg(long, value_delimiter = ',', num_args = 1)]
    pub history: Vec<usize>,
    /// With --experiment pbcast: run the gossip engine only, no sequencer.
    #[arg(long, conflicts_with = "history")]
    pub gossip_only: bool,
    /// With --experiment pbcast: virtual time of sending in each run (a bare number: seconds) [default: 10s].
    #[arg(long = "duration", alias = "seconds", value_name = "DURATION", value_parser = crate::dur::secs_f64)]
    pub seconds: Option<f64>,
    /// With --experiment bimodal: members crashed before the first message (the last hosts).
    #[arg(long, default_value_t = 0)]
    pub crashed: u32,
    /// With --experiment bimodal: gossip targets per member per round [default: 2, the
    /// engine's].
    #[arg(long)]
    pub fanout: Option<u32>,
    /// With --experiment bimodal: rounds a member keeps a message after it arrived (the
    /// garbage-collection age) [default: 10].
    #[arg(long)]
    pub gc_rounds: Option<u32>,
    /// With --experiment bimodal: rounds a member waits for a message it knows it lacks before
    /// the loss up-call [default: 12].
    #[arg(long)]
    pub loss_rounds: Option<u32>,
    /// With --experiment bimodal: further loss of each first-phase copy, in [0, 1] (1: only
    /// the sender holds a new message) [default: 1].
    #[arg(long)]
    pub first_loss: Option<f64>,
    /// With --experiment bimodal: rounds between two messages [default: gc-rounds +
    /// loss-rounds + 2, so that a message is settled before the next].
    #[arg(long)]
    pub spacing_rounds: Option<u32>,
    /// Worker threads (default: available cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Failing seeds to print in detail.
    #[arg(long, default_value_t = 10)]
    pub show_failures: usize,
    /// With --seed: also print what every host went through (views, failures found, resets,
    /// expulsions, leaves, crashes) and each engine's state at the end.
    #[arg(long, requires = "seed")]
    pub trace: bool,
    /// Draw the deliveries of every host over virtual time in the first seed's run (crashes
    /// and recoveries show as flat stretches), as SVG to this file (with --experiment rmp: the
    /// two figures; with --experiment pbcast: the four; with --experiment bimodal: the
    /// distributions, log scale).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<std::path::PathBuf>,
    /// With --experiment: write the tables to DIR/NAME.txt and, without --plot, the figure to
    /// DIR/NAME.svg (NAME: the experiment's name); --experiment all needs it.
    #[arg(long, value_name = "DIR", requires = "experiment")]
    pub out: Option<std::path::PathBuf>,
    /// With --experiment cost: keep each point that passed in this file (one line each:
    /// engine, members, datagrams a message, CPU µs a delivery; a point measured again
    /// replaces its line), and draw --plot from every point in it, so that points measured
    /// in separate runs (a 10,000-member point alone, for its memory) make one figure.
    #[arg(long, value_name = "FILE", requires = "experiment")]
    pub points: Option<std::path::PathBuf>,
    /// With --experiment all: then the real-process forms too (member processes on loopback
    /// multicast on this host, about 15 minutes; `rmcast bench` and `rmcast txn-bench`), each
    /// into DIR/real-NAME.txt.
    #[arg(long)]
    pub real: bool,
    /// Also write the sweep's result as one JSON object to this file: the command, each
    /// checker's seeds passed and failed, the failing seeds and the mean figures (not with
    /// --experiment).
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
}
