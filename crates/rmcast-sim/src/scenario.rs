//! Scenarios: the command line's description of a run, turned into a full [`SimConfig`] per seed.
//!
//! A [`Scenario`] says *how much* of each fault and churn there is (`--partition 2 --pause 1
//! --churn 3`); [`Scenario::config`] draws *when and whom* from the seed, with an RNG of its own,
//! before the run starts (the run then draws latencies and losses from its one RNG). So a seed
//! picks a whole run, and [`Scenario::cli_args`] plus `--seed N` is the one command that replays
//! it. All faults fall in a *fault window* that opens when the workload starts; joins and leaves
//! happen in the same window while traffic flows.
//!
//! Host layout: host 0 creates the group (and is the sequencer of the sequencer engine), hosts
//! `1..members` join 1 ms apart, joiners get the ids after them. Senders are hosts `1, 2, ...`
//! (host 0 last), so one sender is never the sequencer. Leavers are picked among non-senders
//! first, and may include host 0 (the sequencer hands its role over).

use crate::config::{
    ChurnEvent, ChurnKind, Crash, Faults, Limits, LinkParams, Load, NetConfig, Partition, Pause,
    SimConfig, Workload, ETHERNET_FRAME_OVERHEAD_BYTES,
};
use crate::{run, RunSummary, SweepReport};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rmcast_proto::{EngineChoice, NodeId, Qos, Time};
use std::time::Duration;

/// A run as the command line describes it. See the module docs for the host layout.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// The engine, with its settings (the resilience degree among them; the reset's smallest
    /// group is [`Scenario::min_members`]).
    pub engine: EngineChoice,
    /// Members at the start.
    pub members: u32,
    /// One-way latency of every link, in milliseconds.
    pub latency_ms: f64,
    /// Jitter (uniform extra latency) in milliseconds: reorders datagrams.
    pub reorder_ms: f64,
    /// Loss probability per datagram copy, in `[0, 1)`.
    pub loss: f64,
    /// Duplication probability per datagram copy, in `[0, 1)`.
    pub dup: f64,
    /// Uplink bandwidth of every host in Mbit/s (none: unlimited); with `shared_medium`, the
    /// bandwidth of the one medium all hosts share.
    pub bandwidth_mbps: Option<f64>,
    /// One shared Ethernet-like medium instead of an uplink per host
    /// ([`crate::NetConfig::shared_medium`]; needs `bandwidth_mbps`): every datagram, multicast
    /// or unicast, is one transmission on it, charged
    /// [`crate::config::ETHERNET_FRAME_OVERHEAD_BYTES`] of framing and IP and UDP headers.
    pub shared_medium: bool,
    /// Messages per sender.
    pub messages: u64,
    /// Payload bytes per message.
    pub message_bytes: usize,
    /// Number of senders.
    pub senders: u32,
    /// Closed loop: messages in flight per sender (ignored with a rate).
    pub in_flight: u32,
    /// Open loop: messages per second per sender.
    pub rate: Option<f64>,
    /// Joins, and as many leaves, during traffic.
    pub churn: u32,
    /// Partitions during traffic.
    pub partitions: u32,
    /// Longest partition, in milliseconds (each lasts between half of it and all of it).
    pub partition_ms: u64,
    /// Pauses during traffic.
    pub pauses: u32,
    /// Longest pause, in milliseconds (each lasts between half of it and all of it).
    pub pause_ms: u64,
    /// Receive buffer of a paused host, in datagrams.
    pub rx_buffer: usize,
    /// Length of the window in which faults and churn happen, in milliseconds.
    pub fault_window_ms: u64,
    /// Hosts that crash (state lost, for good) at random moments of the fault window. In runs
    /// with crashes every fault is shifted by 300 ms, so that the group has formed.
    pub crashes: u32,
    /// The first crash is the sequencer's (host 0).
    pub crash_sequencer: bool,
    /// Every crash after the first falls 800 to 1300 ms after the one before: around the time
    /// the failure is detected and the group resets (defaults, in a busy group whose detector
    /// has seen few probing rounds: about 1 s), so into the recovery.
    pub crash_in_recovery: bool,
    /// Smallest group a reset may form (0: a majority of the view before the failure).
    pub min_members: u32,
    /// Expelled hosts join the group again ([`SimConfig::heal`]).
    pub heal: bool,
    /// The quality of service of every message (none: the strongest the engine serves).
    pub qos: Option<Qos>,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            engine: EngineChoice::sequencer(0),
            members: 8,
            latency_ms: 1.0,
            reorder_ms: 0.0,
            loss: 0.0,
            dup: 0.0,
            bandwidth_mbps: None,
            shared_medium: false,
            messages: 200,
            message_bytes: 64,
            senders: 1,
            in_flight: 4,
            rate: None,
            churn: 0,
            partitions: 0,
            partition_ms: 300,
            pauses: 0,
            pause_ms: 200,
            rx_buffer: 64,
            fault_window_ms: 500,
            crashes: 0,
            crash_sequencer: false,
            crash_in_recovery: false,
            min_members: 0,
            heal: false,
            qos: None,
        }
    }
}

/// The most members a scenario starts with.
pub const MAX_SCENARIO_MEMBERS: u32 = 16_384;

/// In runs with crashes, faults fall this long after the fault window opens, at the earliest
/// (joins under loss take a few join retries of 100 ms).
const CRASH_OFFSET: Duration = Duration::from_millis(300);

/// Random stream for schedules, kept apart from the run's RNG.
const SCHEDULE_STREAM: u64 = 0x5ce4_a210_d1ce_5eed;

fn ms_f(ms: f64) -> Duration {
    Duration::from_nanos((ms * 1e6).round() as u64)
}

impl Scenario {
    /// The loss-free, fault-free run that measures the cost of one broadcast with resilience
    /// `r`: one sender that is not the sequencer (host 1), 200 messages, `in_flight` of them at a
    /// time, `r + 2` members but at least 5.
    pub fn message_count(resilience: u8, in_flight: u32) -> Scenario {
        Scenario {
            engine: EngineChoice::sequencer(resilience),
            members: (resilience as u32 + 2).max(5),
            senders: 1,
            in_flight,
            messages: 200,
            // The paper's costs: a send completes after r acknowledgements, not after a
            // majority's (the majority policy costs what r = n/2 costs).
            min_members: 1,
            ..Scenario::default()
        }
    }

    /// Checks the values; the error says which one is wrong and why.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(q) = self.qos {
            if !self.engine.guarantees().qos.contains(q) {
                return Err(format!(
                    "--qos {q}: the {} engine does not serve it",
                    self.engine.name()
                ));
            }
        }
        let prob = |name: &str, p: f64| {
            if (0.0..1.0).contains(&p) {
                Ok(())
            } else {
                Err(format!("--{name} must be in [0, 1), got {p}"))
            }
        };
        prob("loss", self.loss)?;
        prob("dup", self.dup)?;
        // Groups of thousands (issue 31): the engines' default limits reach 16,384.
        if !(1..=MAX_SCENARIO_MEMBERS).contains(&self.members) {
            return Err(format!(
                "--members must be in 1..={MAX_SCENARIO_MEMBERS}, got {}",
                self.members
            ));
        }
        if !(self.latency_ms.is_finite() && self.latency_ms >= 0.0 && self.latency_ms <= 10_000.0) {
            return Err(format!(
                "--latency must be in [0, 10000] ms, got {}",
                self.latency_ms
            ));
        }
        if !(self.reorder_ms.is_finite() && self.reorder_ms >= 0.0 && self.reorder_ms <= 10_000.0) {
            return Err(format!(
                "--reorder must be in [0, 10000] ms, got {}",
                self.reorder_ms
            ));
        }
        if let Some(b) = self.bandwidth_mbps {
            if !(b.is_finite() && b > 0.0) {
                return Err(format!("--bandwidth-mbps must be positive, got {b}"));
            }
        }
        if self.shared_medium && self.bandwidth_mbps.is_none() {
            return Err("--shared-medium needs --bandwidth-mbps".into());
        }
        if self.message_bytes < crate::record::PAYLOAD_HEADER_BYTES || self.message_bytes > 1 << 24
        {
            return Err(format!(
                "--message-bytes must be in {}..=16777216, got {}",
                crate::record::PAYLOAD_HEADER_BYTES,
                self.message_bytes
            ));
        }
        if self.senders == 0 || self.senders > self.members {
            return Err(format!(
                "--senders must be in 1..={} (the members), got {}",
                self.members, self.senders
            ));
        }
        if self.in_flight == 0 {
            return Err("--in-flight must be at least 1".into());
        }
        if let Some(r) = self.rate {
            if !(r.is_finite() && r > 0.0 && r <= 1e7) {
                return Err(format!("--rate must be in (0, 1e7] messages/s, got {r}"));
            }
        }
        if self.churn >= self.members {
            return Err(format!(
                "--churn must be below --members ({}): someone must stay, got {}",
                self.members, self.churn
            ));
        }
        if self.partition_ms == 0 || self.pause_ms == 0 || self.fault_window_ms == 0 {
            return Err("--partition-ms, --pause-ms and --fault-window-ms must be positive".into());
        }
        if self.rx_buffer == 0 {
            return Err("--rx-buffer must be at least 1".into());
        }
        if self.crashes >= self.members {
            return Err(format!(
                "--crashes must be below --members ({}): someone must survive, got {}",
                self.members, self.crashes
            ));
        }
        if self.crash_sequencer && self.crashes == 0 {
            return Err("--crash-sequencer needs --crashes 1 or more".into());
        }
        if self.min_members > self.members {
            return Err(format!(
                "--min-members must be at most --members ({}), got {}",
                self.members, self.min_members
            ));
        }
        let resilience = self.engine.settings.resilience;
        if resilience > 32 {
            return Err(format!("--resilience must be at most 32, got {resilience}"));
        }
        let mut engine = self.engine.clone();
        engine.settings.recovery.min_members = self.min_members as usize;
        engine
            .validate(crate::config::MAX_DATAGRAM_BYTES)
            .map_err(|e| format!("--engine {}: {e}", engine.name()))
    }

    /// The senders: hosts 1, 2, ... and host 0 last.
    pub fn sender_ids(&self) -> Vec<NodeId> {
        let mut s: Vec<NodeId> = (1..self.members)
            .chain(std::iter::once(0))
            .take(self.senders as usize)
            .map(NodeId)
            .collect();
        s.sort();
        s
    }

    /// The full config of seed `seed`: fault and churn schedules drawn from the seed.
    pub fn config(&self, seed: u64) -> SimConfig {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ SCHEDULE_STREAM);
        let n = self.members;
        let stagger = Duration::from_millis(1);
        let start = Time::ZERO + stagger * n + Duration::from_millis(50);
        let window_us = self.fault_window_ms * 1000;
        let at_in_window = |rng: &mut ChaCha8Rng, len_us: u64| {
            start + Duration::from_micros(rng.gen_range(0..=window_us.saturating_sub(len_us)))
        };
        let senders = self.sender_ids();
        let hosts = n + self.churn;
        // With crashes, faults wait until the group has formed: a joiner cut off from its join
        // cannot vote, and a group that lost a majority before it formed cannot reset.
        let fault_offset = if self.crashes > 0 {
            CRASH_OFFSET
        } else {
            Duration::ZERO
        };

        let mut churn = Vec::new();
        for j in 0..self.churn {
            let at = at_in_window(&mut rng, 0);
            churn.push(ChurnEvent {
                at,
                node: NodeId(n + j),
                kind: ChurnKind::Join,
            });
        }
        let mut others: Vec<NodeId> = (0..n)
            .map(NodeId)
            .filter(|h| !senders.contains(h))
            .collect();
        others.shuffle(&mut rng);
        let mut send_leavers = senders.clone();
        send_leavers.shuffle(&mut rng);
        others.extend(send_leavers);
        for node in others.into_iter().take(self.churn as usize) {
            let at = at_in_window(&mut rng, 0);
            churn.push(ChurnEvent {
                at,
                node,
                kind: ChurnKind::Leave,
            });
        }

        churn.sort_by_key(|c| (c.at, c.node));

        let mut partitions = Vec::new();
        for _ in 0..self.partitions {
            let len_us = rng.gen_range(self.partition_ms * 500..=self.partition_ms * 1000);
            let begin = at_in_window(&mut rng, len_us) + fault_offset;
            let mut ids: Vec<NodeId> = (0..hosts).map(NodeId).collect();
            ids.shuffle(&mut rng);
            let k = rng.gen_range(1..=(hosts as usize / 2).max(1));
            let b = ids.split_off(k);
            partitions.push(Partition {
                start: begin,
                end: begin + Duration::from_micros(len_us),
                a: ids,
                b,
            });
        }
        let mut pauses = Vec::new();
        for _ in 0..self.pauses {
            let host = NodeId(rng.gen_range(0..hosts));
            let len_us = rng.gen_range(self.pause_ms * 500..=self.pause_ms * 1000);
            let at = at_in_window(&mut rng, 0) + fault_offset;
            pauses.push(Pause {
                host,
                at,
                duration: Duration::from_micros(len_us),
            });
        }

        // Crashes: distinct initial members, the sequencer first if asked.
        let mut crashes = Vec::new();
        let mut victims: Vec<NodeId> = (0..n).map(NodeId).collect();
        victims.shuffle(&mut rng);
        if self.crash_sequencer {
            victims.retain(|h| h.0 != 0);
            victims.insert(0, NodeId(0));
        }
        let mut last: Option<Time> = None;
        for host in victims.into_iter().take(self.crashes as usize) {
            let at = match last {
                Some(t) if self.crash_in_recovery => {
                    t + Duration::from_micros(rng.gen_range(800_000..=1_300_000))
                }
                // Not before the group has formed: a joiner whose join is not through yet
                // cannot vote, and a group that never had a majority cannot reset.
                _ => at_in_window(&mut rng, 0) + fault_offset,
            };
            last = Some(at);
            crashes.push(Crash { host, at });
        }
        crashes.sort_by_key(|c| (c.at, c.host));

        let load = match self.rate {
            Some(r) => Load::OpenLoop {
                interval: Duration::from_nanos((1e9 / r).round().max(1.0) as u64),
            },
            None => Load::ClosedLoop {
                in_flight: self.in_flight as usize,
            },
        };
        let mut engine = self.engine.clone();
        engine.settings.recovery.min_members = self.min_members as usize;
        SimConfig {
            seed,
            members: n,
            join_stagger: stagger,
            engine,
            net: NetConfig {
                link: LinkParams {
                    latency: ms_f(self.latency_ms),
                    jitter: ms_f(self.reorder_ms),
                    loss: self.loss,
                    dup: self.dup,
                },
                bandwidth_bps: self
                    .bandwidth_mbps
                    .map(|m| (m * 1e6).round().max(1.0) as u64),
                shared_medium: self.shared_medium,
                frame_overhead_bytes: if self.shared_medium {
                    ETHERNET_FRAME_OVERHEAD_BYTES
                } else {
                    0
                },
                ..NetConfig::default()
            },
            faults: Faults {
                partitions,
                pauses,
                crashes,
                pause_buffer_datagrams: self.rx_buffer,
                ..Faults::default()
            },
            workload: Workload {
                senders,
                messages_per_sender: self.messages,
                message_bytes: self.message_bytes,
                load,
                start,
                qos: self
                    .qos
                    .unwrap_or_else(|| strongest_qos(&self.engine.guarantees())),
                ..Workload::default()
            },
            churn,
            heal: self.heal,
            limits: Limits {
                // The time the engine's own timers need, where it declares more than the
                // default (the Tree: `tree::SETTLE_TIME`).
                quiescence_timeout: (self.engine.settle_time())
                    .map_or(Limits::default().quiescence_timeout, |t| {
                        t.max(Limits::default().quiescence_timeout)
                    }),
                ..Limits::for_members(self.members)
            },
            ..SimConfig::default()
        }
    }

    /// The `rmcast sim` arguments that describe this scenario (every value explicit).
    pub fn cli_args(&self) -> String {
        let resilience = self.engine.settings.resilience;
        let mut s = format!(
            "--engine {} --resilience {resilience} --members {} --latency {} --reorder {} \
             --loss {} --dup {}",
            self.engine.name(),
            self.members,
            self.latency_ms,
            self.reorder_ms,
            self.loss,
            self.dup
        );
        if let Some(b) = self.bandwidth_mbps {
            s.push_str(&format!(" --bandwidth-mbps {b}"));
        }
        if self.shared_medium {
            s.push_str(" --shared-medium");
        }
        s.push_str(&format!(
            " --messages {} --message-bytes {} --senders {} --in-flight {}",
            self.messages, self.message_bytes, self.senders, self.in_flight
        ));
        if let Some(r) = self.rate {
            s.push_str(&format!(" --rate {r}"));
        }
        s.push_str(&format!(
            " --churn {} --partition {} --partition-ms {} --pause {} --pause-ms {} \
             --rx-buffer {} --fault-window-ms {}",
            self.churn,
            self.partitions,
            self.partition_ms,
            self.pauses,
            self.pause_ms,
            self.rx_buffer,
            self.fault_window_ms
        ));
        if self.crashes > 0 {
            s.push_str(&format!(" --crashes {}", self.crashes));
        }
        if self.crash_sequencer {
            s.push_str(" --crash-sequencer");
        }
        if self.crash_in_recovery {
            s.push_str(" --crash-in-recovery");
        }
        if self.min_members > 0 {
            s.push_str(&format!(" --min-members {}", self.min_members));
        }
        if self.heal {
            s.push_str(" --heal");
        }
        if let Some(q) = self.qos {
            s.push_str(&format!(" --qos {q}"));
        }
        s
    }

    /// The command that replays one seed of this scenario.
    pub fn replay_command(&self, seed: u64) -> String {
        format!("rmcast sim {} --seed {seed}", self.cli_args())
    }

    /// Runs one seed.
    pub fn run(&self, seed: u64) -> crate::Report {
        run(&self.config(seed))
    }

    /// Validates the scenario, runs one seed and panics, with what the checkers said and the
    /// command that replays it, unless every checker passed.
    pub fn run_expect_pass(&self, seed: u64) -> crate::Report {
        if let Err(e) = self.validate() {
            panic!("invalid scenario: {e}");
        }
        let rep = self.run(seed);
        assert!(
            rep.passed(),
            "{}\n{}",
            rep.summary(),
            self.replay_command(seed)
        );
        rep
    }

    /// Runs one seed, a panic becoming a failed `panic` verdict.
    pub fn run_caught(&self, seed: u64) -> RunSummary {
        let cfg = self.config(seed);
        RunSummary::run_caught(&cfg)
    }

    /// Runs every seed on this thread; the report knows the replay command.
    pub fn sweep(&self, seeds: impl IntoIterator<Item = u64>) -> SweepReport {
        SweepReport {
            runs: seeds.into_iter().map(|s| self.run_caught(s)).collect(),
            replay: Some(format!("rmcast sim {}", self.cli_args())),
        }
    }

    /// Validates the scenario, runs seeds `0..seeds` and panics, naming the failing seeds, what
    /// the checkers said and the command that replays them, unless every run passed: the sweep
    /// the test suites assert on.
    pub fn sweep_expect_pass(&self, seeds: u64) -> SweepReport {
        if let Err(e) = self.validate() {
            panic!("invalid scenario: {e}");
        }
        let rep = self.sweep(0..seeds);
        assert!(
            rep.passed(),
            "failing seeds {:?}\n{}",
            rep.failing_seeds(),
            rep.failure_summary(5)
        );
        assert_eq!(rep.runs.len(), seeds as usize);
        rep
    }

    /// Runs every seed on `threads` threads (each run stays deterministic; results are in seed
    /// order). `on_done` is called after each run, from the worker thread.
    pub fn sweep_parallel(
        &self,
        seeds: &[u64],
        threads: usize,
        on_done: &(dyn Fn() + Sync),
    ) -> SweepReport {
        let runs =
            crate::parallel::map_parallel(seeds, threads, |&seed| self.run_caught(seed), on_done);
        SweepReport {
            runs,
            replay: Some(format!("rmcast sim {}", self.cli_args())),
        }
    }
}

/// The strongest per-message QoS an engine serves: what a scenario's workload asks for.
pub fn strongest_qos(g: &rmcast_proto::Guarantees) -> rmcast_proto::Qos {
    use rmcast_proto::Qos;
    [
        Qos::TotallyOrdered,
        Qos::SourceOrdered,
        Qos::Reliable,
        Qos::Unreliable,
    ]
    .into_iter()
    .find(|&q| g.qos.contains(q))
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_depend_on_the_seed_only() {
        let sc = Scenario {
            members: 6,
            churn: 2,
            partitions: 2,
            pauses: 2,
            senders: 2,
            ..Scenario::default()
        };
        assert!(sc.validate().is_ok());
        let a = sc.config(7);
        assert_eq!(a, sc.config(7));
        assert_ne!(a.faults, sc.config(8).faults);
        assert!(a.validate().is_ok());
        assert_eq!(a.churn.len(), 4);
        // Leavers are non-senders first.
        for c in a.churn.iter().filter(|c| c.kind == ChurnKind::Leave) {
            assert!(!a.workload.senders.contains(&c.node));
        }
        let end = a.workload.start + Duration::from_millis(sc.fault_window_ms);
        for p in &a.faults.partitions {
            assert!(p.start >= a.workload.start && p.end <= end);
            assert!(!p.a.is_empty() && !p.b.is_empty());
        }
    }

    #[test]
    fn senders_avoid_the_sequencer_first() {
        let sc = Scenario {
            members: 4,
            senders: 1,
            ..Scenario::default()
        };
        assert_eq!(sc.sender_ids(), vec![NodeId(1)]);
        let sc = Scenario { senders: 4, ..sc };
        assert_eq!(sc.sender_ids().len(), 4);
    }

    #[test]
    fn validation_names_the_bad_value() {
        let bad = Scenario {
            loss: 1.0,
            ..Scenario::default()
        };
        assert!(bad.validate().unwrap_err().contains("--loss"));
        let bad = Scenario {
            churn: 8,
            ..Scenario::default()
        };
        assert!(bad.validate().unwrap_err().contains("--churn"));
        let bad = Scenario {
            senders: 9,
            ..Scenario::default()
        };
        assert!(bad.validate().unwrap_err().contains("--senders"));
    }
}
