//! rmcast-sim: a deterministic simulator that runs rmcast's sans-IO engines under faults and
//! checks what they delivered (docs/ARCHITECTURE.md).
//!
//! A run is a pure function of its [`SimConfig`]: virtual time, one event queue ordered by
//! `(time, insertion counter)`, one seeded RNG ([`rand_chacha::ChaCha8Rng`]). Hosts hold
//! the engine built by the run's [`EngineChoice`] (any engine of
//! [`rmcast_proto::catalog`], or a test's own) inside group formation
//! ([`rmcast_proto::formation`]: join-or-create, HELLOs, merges and rejoins with
//! [`SimConfig::join_or_create`] and [`SimConfig::heal`]; transparent otherwise), each with a seed hashed from the run's seed and
//! its node id ([`engine_seed`]), so any engine runs unchanged; the simulator drives them
//! exactly as a runtime would and bounds every loop, reporting a `livelock` verdict when a bound
//! is hit.
//!
//! The parts:
//! - [`config`]: the run: members, network (latency, jitter, loss, duplication, bandwidth with a
//!   drop-tail queue, per host or on one shared medium), faults (partitions, pauses with a
//!   bounded receive buffer, perturbed members that sleep at random, crashes), workload (open or
//!   closed loop), membership churn, loop bounds.
//! - [`record`]: what a run leaves behind: every event of every host with its virtual time,
//!   every submission, the network's counts.
//! - [`checkers`]: integrity, agreement, total order, FIFO, virtual synchrony, resilience,
//!   liveness after heal, reported losses, livelock; each runs only where the engine's
//!   [`rmcast_proto::Guarantees`] promise what it checks (the table in [`checkers`]).
//! - [`log`]: the `--log` JSON lines of real members (the same events) and [`log::verify_logs`],
//!   which checks a multi-process run with the same rules.
//! - [`experiment`]: the throughput experiment of the RMP paper (Figures 5.1 and 5.2) on a
//!   shared 10 Mb/s medium.
//! - [`topology`]: areas behind routers with hop counts, latencies and losses of their own
//!   (RMTP's Fig. 9), an opt-in addition; engines then get the TTL datagrams arrive with.
//! - [`rmtp`]: the measurements of the RMTP paper (Tables IV to VI) on such a topology.
//! - [`stability`]: the throughput-stability experiment of Özkasap and Birman: one sender,
//!   perturbed members, throughput at the others in 500 ms windows.
//! - [`bimodal`]: the bimodal delivery distribution of "Bimodal Multicast" (Birman et al.),
//!   measured on the gossip engine beside the paper's Markov-chain prediction.
//! - [`figures`]: datagrams per broadcast, latency percentiles, throughput, retransmissions,
//!   NACKs, drops.
//! - [`scenario`]: the command line's view of a run (`rmcast sim --members 16 --loss 0.1 ...`),
//!   which draws fault and churn schedules from the seed and prints the command that replays a
//!   seed.
//!
//! ```no_run
//! use rmcast_sim::{run, SimConfig};
//! let report = run(&SimConfig::default());
//! assert!(report.passed(), "{}", report.summary());
//! println!("{:.2} datagrams per broadcast", report.figures.datagrams_per_broadcast);
//! ```
//!
//! Runs end in two phases, as in TigerBeetle's VOPR: while faults are active only safety is
//! judged; once every fault healed and every join and leave happened, the members get
//! [`Limits::quiescence_timeout`] of virtual time to deliver everything (liveness). That is the
//! end of an all-or-nothing engine's run; a probabilistic engine's run ends once the network is
//! quiet instead (no datagram in flight, no timer due within [`Limits::quiet_timer_horizon`]).

#![warn(missing_docs)]

pub mod amoeba;
pub mod bimodal;
pub mod checkers;
pub mod config;
pub mod experiment;
pub mod figures;
pub mod log;
pub mod multidriver;
pub mod parallel;
pub mod record;
pub mod rmtp;
pub mod scenario;
pub mod stability;
pub mod topology;
pub mod txn_check;
mod world;

pub use checkers::{Verdict, Violation, CHECKERS};
pub use config::{
    custom_engine, engine_seed, perturbation_seed, ChurnEvent, ChurnKind, Crash, EngineFn, Faults,
    HostCost, Limits, LinkParams, Load, NetConfig, Partition, Pause, PauseRead, Perturbation,
    SimConfig, Workload,
};
pub use figures::Figures;
pub use record::Record;
pub use rmcast_proto::{EngineChoice, Role};
pub use scenario::Scenario;
pub use topology::{Area, Topology};

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The outcome of one run.
#[derive(Clone, Debug)]
pub struct Report {
    /// Everything recorded.
    pub record: Record,
    /// Checker name to verdict (every checker of [`CHECKERS`]).
    pub verdicts: BTreeMap<&'static str, Verdict>,
    /// The figures.
    pub figures: Figures,
}

impl Report {
    /// Whether every checker passed.
    pub fn passed(&self) -> bool {
        self.verdicts.values().all(|v| v.is_ok())
    }

    /// The names of the checkers that failed.
    pub fn failed_checkers(&self) -> Vec<&'static str> {
        (self.verdicts.iter())
            .filter(|(_, v)| v.is_err())
            .map(|(name, _)| *name)
            .collect()
    }

    /// A few lines: the failed checkers and their first violations (or "all checks passed").
    pub fn summary(&self) -> String {
        let mut s = summarize(self.record.seed, &self.verdicts);
        if !self.record.quiesced && !self.passed() {
            s.push_str(
                "  note: the run did not quiesce; agreement and resilience failures may be \
                 consequences of the liveness failure\n",
            );
        }
        s
    }
}

fn summarize(seed: u64, verdicts: &BTreeMap<&'static str, Verdict>) -> String {
    let mut s = String::new();
    let failed: Vec<_> = verdicts.iter().filter(|(_, v)| v.is_err()).collect();
    if failed.is_empty() {
        let _ = write!(s, "seed {seed}: all checks passed");
        return s;
    }
    let _ = writeln!(s, "seed {seed}: {} checker(s) failed", failed.len());
    for (name, v) in failed {
        if let Err(list) = v {
            for x in list.iter().take(5) {
                let _ = writeln!(s, "  {name}: {x}");
            }
            if list.len() > 5 {
                let _ = writeln!(s, "  {name}: ({} more)", list.len() - 5);
            }
        }
    }
    s
}

/// Runs `cfg` with the engine it names ([`SimConfig::engine`]: a registered engine, or a
/// test's own through [`custom_engine`]), then runs the checkers that the engine's declaration
/// calls for and computes the figures.
///
/// # Panics
/// If the config is invalid (see [`SimConfig::validate`]).
pub fn run(cfg: &SimConfig) -> Report {
    let record = simulate(cfg);
    let verdicts = if cfg.parallel_groups > 1 {
        check_each_group(cfg, &record)
    } else {
        checkers::check_all(&record)
    };
    let figures = figures::figures(&record);
    Report {
        record,
        verdicts,
        figures,
    }
}

/// The checkers judge one group's history: with [`SimConfig::parallel_groups`], each group's
/// on its own, a violation named by its group.
fn check_each_group(cfg: &SimConfig, record: &Record) -> BTreeMap<&'static str, Verdict> {
    let mut all: BTreeMap<&'static str, Verdict> = BTreeMap::new();
    for g in 0..cfg.parallel_groups as usize {
        let part = record.restricted(|id| cfg.group_of(id.0 as usize) == g);
        for (name, verdict) in checkers::check_all(&part) {
            let slot = all.entry(name).or_insert(Ok(()));
            if let Err(list) = verdict {
                let named = list
                    .into_iter()
                    .map(|v| Violation(format!("group {g}: {}", v.0)));
                match slot {
                    Ok(()) => *slot = Err(named.collect()),
                    Err(l) => l.extend(named),
                }
            }
        }
    }
    all
}

/// Runs `cfg` and returns the raw record, without checking it.
///
/// # Panics
/// If the config is invalid (see [`SimConfig::validate`]).
pub fn simulate(cfg: &SimConfig) -> Record {
    if let Err(e) = cfg.validate() {
        panic!("invalid SimConfig: {e}");
    }
    world::World::new(cfg).run()
}

/// What a sweep keeps of one run: the verdicts and figures (not the record).
#[derive(Clone, Debug)]
pub struct RunSummary {
    /// The seed.
    pub seed: u64,
    /// Checker name to verdict.
    pub verdicts: BTreeMap<&'static str, Verdict>,
    /// The figures.
    pub figures: Figures,
}

impl RunSummary {
    /// The failed checkers and their first violations (or "all checks passed").
    pub fn summary(&self) -> String {
        summarize(self.seed, &self.verdicts)
    }

    /// Whether every checker passed.
    pub fn passed(&self) -> bool {
        self.verdicts.values().all(|v| v.is_ok())
    }
}

impl RunSummary {
    /// Runs `cfg`, turning a panic (of an engine, or an assertion of the simulator) into a
    /// failed `panic` verdict, so that a sweep goes on and names the seed.
    pub fn run_caught(cfg: &SimConfig) -> RunSummary {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(cfg))) {
            Ok(report) => report.into(),
            Err(payload) => {
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".into());
                let mut verdicts = BTreeMap::new();
                verdicts.insert(PANIC, Err(vec![Violation(format!("panicked: {what}"))]));
                RunSummary {
                    seed: cfg.seed,
                    verdicts,
                    figures: Figures::default(),
                }
            }
        }
    }
}

/// The verdict name of a run that panicked (see [`RunSummary::run_caught`]).
pub const PANIC: &str = "panic";

impl From<Report> for RunSummary {
    fn from(r: Report) -> Self {
        RunSummary {
            seed: r.record.seed,
            verdicts: r.verdicts,
            figures: r.figures,
        }
    }
}

/// The outcome of many runs.
#[derive(Clone, Debug, Default)]
pub struct SweepReport {
    /// One summary per seed, in seed order.
    pub runs: Vec<RunSummary>,
    /// The command that replays a seed, without `--seed N` (set by [`Scenario::sweep`]).
    pub replay: Option<String>,
}

impl SweepReport {
    /// Whether every checker passed on every seed.
    pub fn passed(&self) -> bool {
        self.runs.iter().all(|r| r.passed())
    }

    /// Seeds on which some checker failed.
    pub fn failing_seeds(&self) -> Vec<u64> {
        self.runs
            .iter()
            .filter(|r| !r.passed())
            .map(|r| r.seed)
            .collect()
    }

    /// Per checker (in [`CHECKERS`] order): seeds passed, seeds failed, first failing seed.
    /// A run that panicked counts as failed for `panic` and passed for nothing else.
    pub fn checker_totals(&self) -> Vec<(&'static str, usize, usize, Option<u64>)> {
        CHECKERS
            .iter()
            .map(|(name, _)| *name)
            .chain(std::iter::once(PANIC))
            .map(|name| {
                let mut ok = 0;
                let mut bad = 0;
                let mut first = None;
                for r in &self.runs {
                    let panicked = r.verdicts.contains_key(PANIC);
                    match r.verdicts.get(name) {
                        Some(Err(_)) => {
                            bad += 1;
                            first.get_or_insert(r.seed);
                        }
                        _ if panicked => {}
                        _ => ok += 1,
                    }
                }
                (name, ok, bad, first)
            })
            .collect()
    }

    /// The mean figures over all runs.
    pub fn mean_figures(&self) -> Figures {
        let all: Vec<Figures> = self.runs.iter().map(|r| r.figures.clone()).collect();
        Figures::mean(&all)
    }

    /// The command that replays `seed`, if known.
    pub fn replay_command(&self, seed: u64) -> Option<String> {
        self.replay.as_ref().map(|r| format!("{r} --seed {seed}"))
    }

    /// Failed seeds (up to `max`), each with its first violations and replay command.
    pub fn failure_summary(&self, max: usize) -> String {
        let mut s = String::new();
        let failing: Vec<&RunSummary> = self.runs.iter().filter(|r| !r.passed()).collect();
        for r in failing.iter().take(max) {
            s.push_str(&summarize(r.seed, &r.verdicts));
            if let Some(cmd) = self.replay_command(r.seed) {
                let _ = writeln!(s, "  replay: {cmd}");
            }
        }
        if failing.len() > max {
            let _ = writeln!(s, "... and {} more failing seeds", failing.len() - max);
        }
        s
    }
}

/// Runs `cfg` once per seed (the config's schedules stay the same; only the RNG changes).
/// [`Scenario::sweep`] also redraws the fault schedule per seed.
pub fn sweep(cfg: &SimConfig, seeds: impl IntoIterator<Item = u64>) -> SweepReport {
    let mut c = cfg.clone();
    let runs = seeds
        .into_iter()
        .map(|seed| {
            c.seed = seed;
            RunSummary::run_caught(&c)
        })
        .collect();
    SweepReport { runs, replay: None }
}
