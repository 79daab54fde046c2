//! The experiment of "Throughput Stability of Reliable Multicast Protocols" (Öznur Özkasap and
//! Kenneth P. Birman), sections 4 and 5: one sender multicasts 200 messages a second to a group
//! of `n` members, `f` of which are *perturbed*: every 100 ms each of them falls asleep for
//! 100 ms with probability `p` (the perturb rate; [`crate::Perturbation`]), its receive buffer
//! filling and overflowing meanwhile. Throughput is measured at the unperturbed members in
//! 500 ms windows.
//!
//! - Figures 2 and 3: a virtually synchronous protocol (here the sequencer engine, whose flow
//!   control is its history buffer: a message stays there until every member reported it, and
//!   while the history is full nothing more is ordered) loses throughput at the unperturbed
//!   members as `f` and `p` grow, while Pbcast (the gossip engine) stays at the sending rate.
//! - Figure 5: the variance of Pbcast's throughput over the windows, as the group grows.
//! - Figure 7: Pbcast's retransmissions at an unperturbed member in each window, as a
//!   percentage of the messages the sender sent in it; the paper's worst-case bound is `2p`
//!   (each round a member gossips to two members; if both are perturbed and lack the `r/10 · p`
//!   messages a perturbed member misses per round, it sends `2 · r/10 · p` again, which is `r·p`
//!   per 500 ms window against the `r/2` sent).
//!
//! The sequencer runs with two history sizes ([`Protocol::Sequencer`]): the engine's default
//! (4096 messages, 20 s of this stream) and the 128 messages of the Amoeba paper's own
//! measurements ([`AMOEBA_HISTORY`]). The sleepers must not be taken for crashed ("resume
//! computing and communication before the background failure detection used by the system have
//! detected the situation"): the sequencer runs with [`Setup::recovery`], which declares a
//! member failed only after it was silent for longer than the whole sending period
//! (back-to-back sleeps make long ones: at `p = 0.9` they last a second on average), and the
//! gossip engine with a silence timeout longer than a run ([`Setup::silence_timeout`]). The
//! perturbed members are the last `f` hosts: never host 1, the sender, nor host 0, the group's
//! creator and the sequencer engine's sequencer.
//!
//! The simulated network has none of a real machine's noise (scheduling, paging, a switch's
//! buffers), so by default every datagram copy is lost with probability 1% ([`Setup::loss`]):
//! the unperturbed members then depend on repairs too, and Pbcast's throughput variance
//! (Figure 5) is not trivially zero. With no loss, every unperturbed member receives every
//! message from the first multicast, and gossip's throughput is exactly the sending rate in
//! every window.

use crate::config::{Faults, LinkParams, Load, NetConfig, Perturbation, SimConfig, Workload};
use crate::run;
use rmcast_proto::registry::RecoveryPolicy;
use rmcast_proto::{EngineChoice, Event, NodeId, Qos, Time};
use std::fmt;
use std::time::Duration;

/// How long a run waits after the faults for every member to settle.
const QUIESCENCE_TIMEOUT: Duration = Duration::from_secs(30);

/// The paper's sending rate, in messages per second.
pub const PAPER_RATE: f64 = 200.0;

/// The history buffer of the Amoeba paper's measurements, in messages (Kaashoek and
/// Tanenbaum: "The size of the history buffer was 128 messages").
pub const AMOEBA_HISTORY: usize = 128;

/// The sequencer engine's default history buffer, in messages.
pub fn default_history() -> usize {
    rmcast_proto::sequencer::Config::new(0).history_capacity_msgs
}

/// A protocol as the experiment runs it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Pbcast: the gossip engine with its defaults.
    Gossip,
    /// The virtually synchronous baseline: the sequencer engine with a history buffer of
    /// `history` messages (members report their state every quarter of it, as with the
    /// default), with [`Setup::recovery`].
    Sequencer {
        /// Slots of the history buffer.
        history: usize,
    },
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Protocol::Gossip => write!(f, "gossip"),
            Protocol::Sequencer { history } => write!(f, "sequencer/{history}"),
        }
    }
}

/// How the experiment's runs are made.
#[derive(Clone, Debug, PartialEq)]
pub struct Setup {
    /// Messages per second of the one sender (open loop: refused submissions wait and are
    /// retried, so a sender held back by flow control falls behind its schedule).
    pub rate: f64,
    /// Virtual seconds of sending; perturbations and measurement windows cover this time.
    pub seconds: f64,
    /// Payload bytes per message.
    pub message_bytes: usize,
    /// One-way latency of every link, in milliseconds.
    pub latency_ms: f64,
    /// Loss probability of every datagram copy: the noise of a real machine (see the module
    /// documentation).
    pub loss: f64,
    /// A perturbed member draws whether to sleep this often.
    pub period: Duration,
    /// How long one sleep lasts.
    pub sleep: Duration,
    /// Receive buffer of a sleeping member, in datagrams; what arrives beyond it is lost.
    pub rx_buffer: usize,
    /// Length of a measurement window.
    pub window: Duration,
    /// The seed of every run.
    pub seed: u64,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            rate: PAPER_RATE,
            seconds: 10.0,
            message_bytes: 64,
            latency_ms: 1.0,
            loss: 0.01,
            period: Duration::from_millis(100),
            sleep: Duration::from_millis(100),
            rx_buffer: 64,
            window: Duration::from_millis(500),
            seed: 0,
        }
    }
}

/// One measured point: an engine, a group size, a number of perturbed members and a perturb
/// rate.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// The protocol.
    pub protocol: Protocol,
    /// Group members (`n`).
    pub members: u32,
    /// Perturbed members (`f`).
    pub perturbed: u32,
    /// Perturb rate (`p`).
    pub p: f64,
    /// Mean over the windows and the unperturbed receivers of the messages delivered per
    /// second.
    pub throughput_mean: f64,
    /// Variance of those samples, in (messages/s)².
    pub throughput_variance: f64,
    /// The lowest sample.
    pub throughput_min: f64,
    /// Samples: windows × unperturbed receivers.
    pub samples: usize,
    /// Messages the sender submitted during the sending period, per second.
    pub sent_rate: f64,
    /// Retransmissions by an unperturbed receiver in a window, as a percentage of the messages
    /// the sender submitted in that window: the mean over windows and receivers.
    pub retrans_pct_mean: f64,
    /// The largest such percentage (the paper's bound is about `200 p` %).
    pub retrans_pct_max: f64,
    /// Messages reported lost (the loss up-call) at the unperturbed members.
    pub lost_unperturbed: u64,
    /// Messages reported lost at the perturbed members.
    pub lost_perturbed: u64,
    /// Fraction of the sending period the perturbed members slept, on average.
    pub asleep: f64,
    /// Datagrams lost to the perturbed members' full receive buffers.
    pub overflow_drops: u64,
    /// Submissions refused by flow control (each retried later).
    pub refusals: u64,
    /// Members the group went on without (expelled or removed by a reset).
    pub failed_members: usize,
    /// Every checker passed.
    pub passed: bool,
    /// The checkers that failed, by name.
    pub failed_checkers: Vec<&'static str>,
    /// The checkers' complaints, if any.
    pub summary: String,
}

impl Point {
    /// The paper's worst-case bound on the retransmissions at an unperturbed member in a
    /// window ([`Point::retrans_pct_mean`], [`Point::retrans_pct_max`]), in percent: `2p`.
    pub fn retrans_bound_pct(&self) -> f64 {
        200.0 * self.p
    }
}

/// Mean and (population) variance.
fn mean_variance(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    (mean, var)
}

/// The perturbed members of a group of `members`: the last `perturbed` hosts (never host 0,
/// the creator and sequencer, nor host 1, the sender).
pub fn perturbed_hosts(members: u32, perturbed: u32) -> Vec<NodeId> {
    let first = members.saturating_sub(perturbed).max(2);
    (first..members).map(NodeId).collect()
}

/// The paper's `f = n/4` (at least 1).
pub fn quarter(members: u32) -> u32 {
    (members / 4).max(1)
}

impl Setup {
    /// Time between two messages of the sender.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos((1e9 / self.rate).round().max(1.0) as u64)
    }

    /// Messages the sender sends.
    pub fn messages(&self) -> u64 {
        (self.rate * self.seconds).round() as u64
    }

    /// The sending period's length.
    pub fn span(&self) -> Duration {
        Duration::from_nanos((self.seconds * 1e9).round() as u64)
    }

    /// The failure detection of the runs: a peer silent for 1 s is probed, and declared failed
    /// after `seconds + 1` unanswered probes of 1 s each, so after more than the whole sending
    /// period of silence: no sleep of the run is taken for a crash.
    pub fn recovery(&self) -> RecoveryPolicy {
        RecoveryPolicy {
            alive_interval_ms: 1000,
            alive_retries: self.seconds.ceil() as u32 + 1,
            alive_timeout_ms: 1000,
            ..RecoveryPolicy::default()
        }
    }

    /// The gossip engine's silence timeout in the runs: longer than a whole run (5 s for the
    /// group forming, 2.2 s at most with 1,024 members, then the sending period and the wait
    /// for quiescence), so that, as with
    /// [`Setup::recovery`] for the sequencer, no member is taken for failed. With the engine's
    /// default of 5 s, groups of 512 and more took unperturbed members for silent (a member
    /// hears of most others only through the rows digests relay, which carry part of the group
    /// each) and did not end in one view.
    pub fn silence_timeout(&self) -> Duration {
        Duration::from_secs(5) + self.span() + QUIESCENCE_TIMEOUT + Duration::from_secs(5)
    }

    /// The engine of `protocol` as the experiment runs it.
    pub fn engine(&self, protocol: Protocol) -> EngineChoice {
        match protocol {
            Protocol::Gossip => {
                let c = rmcast_proto::gossip::Config {
                    silence_timeout: Some(self.silence_timeout()),
                    ..Default::default()
                };
                EngineChoice::custom(std::sync::Arc::new(
                    rmcast_proto::gossip::GossipFactory::with_config(c),
                ))
            }
            Protocol::Sequencer { history } if history == default_history() => {
                EngineChoice::sequencer(0).recovery(self.recovery())
            }
            Protocol::Sequencer { history } => {
                let mut c = rmcast_proto::sequencer::Config::new(0);
                c.history_capacity_msgs = history;
                c.state_interval_msgs = (history as u64 / 4).max(1);
                c.set_recovery_policy(&self.recovery());
                EngineChoice::sequencer_with(c)
            }
        }
    }

    /// Checks the values; the error names the bad one.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.rate.is_finite() && self.rate > 0.0 && self.rate <= 1e6) {
            return Err(format!(
                "the rate must be in (0, 1e6] msgs/s, got {}",
                self.rate
            ));
        }
        if !(self.seconds.is_finite() && self.seconds > 0.0 && self.seconds <= 3600.0) {
            return Err(format!(
                "--seconds must be in (0, 3600], got {}",
                self.seconds
            ));
        }
        if self.window.is_zero() || self.window > self.span() {
            return Err("the window must be positive and fit in the sending period".into());
        }
        if !(0.0..1.0).contains(&self.loss) {
            return Err(format!("--loss must be in [0, 1), got {}", self.loss));
        }
        if !(self.latency_ms.is_finite() && (0.0..=10_000.0).contains(&self.latency_ms)) {
            return Err(format!(
                "--latency must be in [0, 10000] ms, got {}",
                self.latency_ms
            ));
        }
        if self.rx_buffer == 0 {
            return Err("--rx-buffer must be at least 1".into());
        }
        Ok(())
    }

    /// The run of `engine` with `members` members, `perturbed` of them perturbed at rate `p`.
    pub fn config(&self, engine: EngineChoice, members: u32, perturbed: u32, p: f64) -> SimConfig {
        // The group forms (1 ms between joins), then the sender starts.
        let start =
            Time::ZERO + Duration::from_millis(100) + Duration::from_millis(members as u64 * 2);
        let end = start + self.span();
        let perturbations = perturbed_hosts(members, perturbed)
            .into_iter()
            .map(|host| Perturbation {
                host,
                probability: p,
                period: self.period,
                sleep: self.sleep,
                start,
                end,
            })
            .collect();
        let qos = if engine.guarantees().qos.contains(Qos::TotallyOrdered) {
            Qos::TotallyOrdered
        } else {
            Qos::SourceOrdered
        };
        let mut cfg = SimConfig {
            seed: self.seed,
            members,
            engine,
            net: NetConfig {
                link: LinkParams {
                    latency: Duration::from_nanos((self.latency_ms * 1e6).round() as u64),
                    loss: self.loss,
                    ..LinkParams::default()
                },
                ..NetConfig::default()
            },
            faults: Faults {
                perturbations,
                pause_buffer_datagrams: self.rx_buffer,
                ..Faults::default()
            },
            workload: Workload {
                senders: vec![NodeId(1)],
                messages_per_sender: self.messages(),
                message_bytes: self.message_bytes,
                load: Load::OpenLoop {
                    interval: self.interval(),
                },
                start,
                qos,
                ..Workload::default()
            },
            sample_counters: Some(self.window),
            ..SimConfig::default()
        };
        cfg.limits.quiescence_timeout = QUIESCENCE_TIMEOUT;
        cfg
    }

    /// Runs one point; the error names a bad setting.
    pub fn measure(
        &self,
        protocol: Protocol,
        members: u32,
        perturbed: u32,
        p: f64,
    ) -> Result<Point, String> {
        self.validate()?;
        if !(0.0..=1.0).contains(&p) {
            return Err(format!("p must be in [0, 1], got {p}"));
        }
        if members < 3 || perturbed == 0 || perturbed > members - 2 {
            return Err(format!(
                "{members} members cannot have {perturbed} perturbed ones besides the sender \
                 and host 0"
            ));
        }
        let cfg = self.config(self.engine(protocol), members, perturbed, p);
        cfg.validate()?;
        let report = run(&cfg);
        let rec = &report.record;
        let sender = NodeId(1);
        let sleepers = perturbed_hosts(members, perturbed);
        let start = cfg.workload.start;
        let end = start + self.span();
        let windows = (self.span().as_nanos() / self.window.as_nanos()) as u32;
        let win_s = self.window.as_secs_f64();
        let bounds: Vec<(Time, Time)> = (0..windows)
            .map(|k| (start + self.window * k, start + self.window * (k + 1)))
            .collect();
        // Messages the sender submitted in each window.
        let mut sent = vec![0u64; bounds.len()];
        for s in &rec.submissions {
            if let Some(k) = bounds.iter().position(|(a, b)| s.at >= *a && s.at < *b) {
                sent[k] += 1;
            }
        }
        let mut throughput = Vec::new();
        let mut retrans = Vec::new();
        let (mut lost_unperturbed, mut lost_perturbed) = (0u64, 0u64);
        let mut asleep = 0.0;
        for h in rec.hosts.iter().take(members as usize) {
            let lost: u64 = (h.events.iter())
                .filter_map(|e| match &e.event {
                    Event::Loss(l) if l.sender == sender => Some(l.count),
                    _ => None,
                })
                .sum();
            if sleepers.contains(&h.id) {
                lost_perturbed += lost;
                asleep += h.asleep_between(start, end).as_secs_f64() / self.seconds;
                continue;
            }
            lost_unperturbed += lost;
            if h.id == sender {
                continue;
            }
            let mut per_window = vec![0u64; bounds.len()];
            for (at, d) in h.deliveries() {
                if d.sender != sender {
                    continue;
                }
                if let Some(k) = bounds.iter().position(|(a, b)| at >= *a && at < *b) {
                    per_window[k] += 1;
                }
            }
            throughput.extend(per_window.iter().map(|n| *n as f64 / win_s));
            for (k, (a, b)) in bounds.iter().enumerate() {
                let (Some(ca), Some(cb)) = (h.counters_at(*a), h.counters_at(*b)) else {
                    continue;
                };
                if sent[k] > 0 {
                    let r = cb.retransmissions.saturating_sub(ca.retransmissions);
                    retrans.push(100.0 * r as f64 / sent[k] as f64);
                }
            }
        }
        let (mean, variance) = mean_variance(&throughput);
        let (retrans_mean, _) = mean_variance(&retrans);
        Ok(Point {
            protocol,
            members,
            perturbed,
            p,
            throughput_mean: mean,
            throughput_variance: variance,
            throughput_min: throughput.iter().copied().fold(f64::INFINITY, f64::min),
            samples: throughput.len(),
            sent_rate: sent.iter().sum::<u64>() as f64 / (win_s * bounds.len() as f64),
            retrans_pct_mean: retrans_mean,
            retrans_pct_max: retrans.iter().copied().fold(0.0, f64::max),
            lost_unperturbed,
            lost_perturbed,
            asleep: asleep / sleepers.len().max(1) as f64,
            overflow_drops: rec.net.drops_pause_overflow,
            refusals: rec.net.submit_would_block,
            failed_members: rec.failed_hosts().len(),
            passed: report.passed(),
            failed_checkers: report.failed_checkers(),
            summary: report.summary(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perturbed_members_are_neither_the_sender_nor_the_sequencer() {
        assert_eq!(perturbed_hosts(8, 2), vec![NodeId(6), NodeId(7)]);
        assert_eq!(perturbed_hosts(8, 1), vec![NodeId(7)]);
        assert_eq!(perturbed_hosts(4, 4), vec![NodeId(2), NodeId(3)]);
        assert_eq!(quarter(8), 2);
        assert_eq!(quarter(128), 32);
    }

    #[test]
    fn mean_and_variance() {
        assert_eq!(mean_variance(&[2.0, 4.0]), (3.0, 1.0));
        assert_eq!(mean_variance(&[]), (0.0, 0.0));
    }
}
