//! The bimodal delivery distribution of "Bimodal Multicast" (Kenneth P. Birman, Mark Hayden,
//! Öznur Özkasap, Zhen Xiao, Mihai Budiu and Yaron Minsky, ACM TOCS 17(2), 1999), section 6:
//! for each message, how many members deliver it. The paper's analysis predicts "almost all or
//! almost none": the count is, with overwhelming probability, either near 0 or near `n`.
//!
//! **The prediction** ([`Model::distribution`]) is the paper's Markov chain over gossip rounds.
//! With `s` members holding the message ("infected") after a round, each member that does not
//! escapes all `s` of them in the next round with probability `q^s`, where `q` is the
//! probability that one given holder does *not* pass it the message in the round:
//! `q = 1 - fanout/(n-1) · (1-ε)^d · (1-τ)` (the holder picks it among the `n - 1` others, each
//! of the `d` datagrams of the exchange survives loss `ε`, the holder did not fail, `τ`). So
//! `P(s' = s + j | s) = C(n-s, j) (1 - q^s)^j (q^s)^(n-s-j)`. The first, unreliable multicast
//! reaches each member other than the sender independently ([`Model::first_reach`]; 0 is the
//! paper's worst case, the sender alone holds it), and after [`Model::rounds`] rounds the
//! distribution of `s` is the prediction. Probabilities are computed in logarithms, so the
//! middle of the distribution (10^-30 and below) comes out as a number, not as 0.
//!
//! **The measurement** ([`Setup::measure`]) runs the gossip engine in the simulator: one sender
//! (host 1) multicasts [`Setup::messages`] messages, [`Setup::spacing_rounds`] rounds apart;
//! for each message the live members that delivered it are counted (the sender included), and
//! the histogram of the counts is the measured distribution.
//!
//! **The engine against the model.** The mapping, and where they differ:
//! - *Gossip target*: each round a member sends its digest to `fanout` distinct members drawn
//!   uniformly from the others in its view (`gossip::engine::targets`): a given member is
//!   picked with probability exactly `fanout/(n-1)`, as in the model. The experiment turns the
//!   silence timeout off, so that crashed members stay in every view and are drawn as targets
//!   (wasted exchanges, as the paper's failed processes are).
//! - *Datagrams per exchange*: the engine's push is a digest, a solicitation and the
//!   retransmission: `d = 3`, each lost with [`Setup::loss`]. The model the paper analyses is
//!   this push alone ([`Model::pull`] false). The engine also *pulls*: a member that knows a
//!   message exists (from a digest that named a later number) shows in its own digests that it
//!   lacks it, and a holder that receives such a digest sends the message at once (2 datagrams).
//!   [`Model::pull`] adds that second way in, as if every member knew of the message from the
//!   first round: the engine lies between the two predictions (with the paper's worst case
//!   nobody knows of the message at first; knowledge spreads with the digests).
//! - *Rounds*: the engine keeps a message [`Setup::gc_rounds`] rounds after it *arrived at
//!   each member* (age garbage collection, `gossip::history`), and a member's digests name it
//!   in the rounds `arrival + 1 ..= arrival + gc_rounds - 1`: every holder gossips it
//!   `gc_rounds - 1` times, however late it got it. The model gossips every holder until one
//!   global deadline, `R` rounds after the first multicast; the prediction takes
//!   `R = gc_rounds - 1` (what the sender and the first-phase receivers get). Members infected
//!   later gossip on past that deadline in the engine, so the engine's "almost all" mode is
//!   heavier than the prediction's; its "almost none" mode (the sender's `R` rounds all failed)
//!   is the same process in both. Stability detection lets a message go before its age only
//!   once every member holds it, which changes no count.
//! - *Rounds are not synchronous*: each member's round timer runs at its own phase, so an
//!   exchange started in one member's round can land in the receiver's next; the model's
//!   rounds are lock-step.
//! - *First phase*: in the engine the sender's multicast is one datagram copy per member, each
//!   lost with [`Setup::loss`]; so that many messages start with few holders, the experiment
//!   also drops each first-phase copy with [`Setup::first_loss`] (the sender's engine is
//!   wrapped so that its first-phase multicast goes as one unicast per member, each dropped
//!   with that probability by the wrapper's own seeded generator). The model's
//!   [`Model::first_reach`] is `(1 - loss)(1 - first_loss)`.
//! - *Failures*: the paper's `τ` is the probability that a process has failed. The experiment
//!   crashes [`Setup::crashed`] members (the last hosts) before the first message instead; the
//!   model then runs over the `n - c` live members, each holder still drawing its targets among
//!   all `n - 1` ([`Model::peers`]), which is what `τ = c/(n-1)` means for a target, and
//!   `τ = 0` for the holders themselves (they are alive).
//! - *Retransmission limits*: the engine's budget per round (256 messages) and its
//!   solicitations served only in their round or the next never bind here (one message at a
//!   time); the loss up-call ([`Setup::loss_rounds`]) only ends a member's wait.
//! - *Messages are not independent*: every message of a round shares that round's gossip
//!   targets, and delivery is FIFO per sender, so a message that is still missing somewhere
//!   holds the sender's next ones back there (they stay buffered, and gossiped, longer).
//!   The messages are spaced ([`Setup::spacing_rounds`], by default `gc_rounds + loss_rounds + 2`,
//!   more than a message's whole life) so that one is settled before the next.

use crate::config::{Crash, Faults, LinkParams, Load, NetConfig, SimConfig, Workload};
use rmcast_proto::common::SplitMix64;
use rmcast_proto::engine::{Counters, Destination, Engine, Event, GroupInfo, Transmit};
use rmcast_proto::gossip::{self, GossipFactory};
use rmcast_proto::registry::{ConfigError, EngineFactory, EngineParams, EngineSettings};
use rmcast_proto::{EngineChoice, Guarantees, NodeId, Qos, SendError, Time};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// The paper's Markov chain (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    /// Live members, the sender included: the states are `0..=members` holders.
    pub members: u32,
    /// Members a holder draws its gossip targets from (`n - 1`, crashed ones included).
    pub peers: u32,
    /// Gossip targets per member per round.
    pub fanout: u32,
    /// Rounds of gossip after the first multicast.
    pub rounds: u32,
    /// Loss probability of every datagram (`ε`).
    pub loss: f64,
    /// Probability that the first multicast reaches a given member other than the sender.
    pub first_reach: f64,
    /// Probability that a holder has failed (`τ`).
    pub fail: f64,
    /// Add the engine's pull (a 2-datagram exchange started by the member that lacks the
    /// message) to the paper's push (3 datagrams).
    pub pull: bool,
}

/// Datagrams of the engine's push exchange: digest, solicitation, retransmission.
pub const PUSH_DATAGRAMS: i32 = 3;
/// Datagrams of the engine's pull exchange: the lacking member's digest, the message.
pub const PULL_DATAGRAMS: i32 = 2;

/// `ln C(n, k)`.
fn ln_choose(ln_fact: &[f64], n: usize, k: usize) -> f64 {
    ln_fact[n] - ln_fact[k] - ln_fact[n - k]
}

/// `C(n, k) p^k (1-p)^(n-k)`, computed in logarithms (exact at `p` = 0 or 1).
fn binomial(ln_fact: &[f64], n: usize, k: usize, p: f64) -> f64 {
    if p <= 0.0 {
        return if k == 0 { 1.0 } else { 0.0 };
    }
    if p >= 1.0 {
        return if k == n { 1.0 } else { 0.0 };
    }
    let l = ln_choose(ln_fact, n, k) + k as f64 * p.ln() + (n - k) as f64 * (-p).ln_1p();
    l.exp()
}

impl Model {
    /// `q`: the probability that one holder does not pass the message to one given member in a
    /// round.
    pub fn escape(&self) -> f64 {
        let pick = (self.fanout as f64 / self.peers.max(1) as f64).min(1.0);
        let alive = 1.0 - self.fail;
        let ok = 1.0 - self.loss;
        let mut q = 1.0 - pick * ok.powi(PUSH_DATAGRAMS) * alive;
        if self.pull {
            q *= 1.0 - pick * ok.powi(PULL_DATAGRAMS) * alive;
        }
        q
    }

    /// `P(s = k)` for `k` in `0..=members` after the first multicast and [`Model::rounds`]
    /// rounds (`P(0) = 0`: the sender holds its message).
    pub fn distribution(&self) -> Vec<f64> {
        let n = self.members as usize;
        let mut ln_fact = vec![0.0; n + 1];
        for i in 1..=n {
            ln_fact[i] = ln_fact[i - 1] + (i as f64).ln();
        }
        let mut p = vec![0.0; n + 1];
        if n == 0 {
            return p;
        }
        for j in 0..n {
            p[1 + j] = binomial(&ln_fact, n - 1, j, self.first_reach);
        }
        let q = self.escape();
        for _ in 0..self.rounds {
            let mut next = vec![0.0; n + 1];
            for (s, &ps) in p.iter().enumerate() {
                if ps == 0.0 {
                    continue;
                }
                let infect = 1.0 - q.powi(s as i32);
                for j in 0..=(n - s) {
                    next[s + j] += ps * binomial(&ln_fact, n - s, j, infect);
                }
            }
            p = next;
        }
        p
    }
}

/// How the measurement is made.
#[derive(Clone, Debug, PartialEq)]
pub struct Setup {
    /// Group members `n`.
    pub members: u32,
    /// Members crashed before the first message (the last hosts; never 0 or 1, the sender).
    pub crashed: u32,
    /// Gossip targets per round ([`gossip::Config::fanout`]).
    pub fanout: u32,
    /// Rounds a member keeps a message after it arrived ([`gossip::Config::gc_rounds`]).
    pub gc_rounds: u32,
    /// Rounds a known missing message is waited for ([`gossip::Config::loss_rounds`]).
    pub loss_rounds: u32,
    /// Loss probability of every datagram copy (`ε`).
    pub loss: f64,
    /// Further loss of each first-phase copy (1: the paper's worst case, nobody but the
    /// sender holds the message at first).
    pub first_loss: f64,
    /// Messages sent.
    pub messages: u64,
    /// Rounds between two messages.
    pub spacing_rounds: u32,
    /// The gossip round.
    pub round: Duration,
    /// One-way latency of every link, in milliseconds.
    pub latency_ms: f64,
    /// The run's seed.
    pub seed: u64,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            members: 50,
            crashed: 0,
            fanout: 2,
            gc_rounds: 10,
            loss_rounds: 12,
            loss: 0.1,
            first_loss: 1.0,
            messages: 2000,
            spacing_rounds: 24,
            round: Duration::from_millis(100),
            latency_ms: 1.0,
            seed: 0,
        }
    }
}

/// The measured distribution beside the predicted ones.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// `histogram[k]`: messages that `k` live members delivered (`k` in `0..=live`).
    pub histogram: Vec<u64>,
    /// Messages sent.
    pub messages: u64,
    /// Live members.
    pub live: u32,
    /// The paper's model (push only) for the same parameters.
    pub push: Vec<f64>,
    /// The model with the engine's pull as well.
    pub push_pull: Vec<f64>,
    /// Loss up-calls at the live members (messages given up on).
    pub loss_upcalls: u64,
    /// Every checker that applies passed.
    pub passed: bool,
    /// The checkers' complaints, if any.
    pub summary: String,
    /// Virtual time the run took.
    pub simulated: Duration,
}

impl Measured {
    /// Fraction of the messages that `k` members delivered.
    pub fn fraction(&self, k: usize) -> f64 {
        self.histogram.get(k).copied().unwrap_or(0) as f64 / self.messages.max(1) as f64
    }

    /// Fraction of the messages whose count lies in `range`.
    pub fn fraction_in(&self, range: std::ops::Range<usize>) -> f64 {
        range.map(|k| self.fraction(k)).sum()
    }
}

/// Sum of `p[range]`.
pub fn mass(p: &[f64], range: std::ops::Range<usize>) -> f64 {
    range.filter_map(|k| p.get(k)).sum()
}

/// The middle third of `0..=n`: `n/3 + 1 .. 2n/3` (counts neither near none nor near all).
pub fn middle_third(n: u32) -> std::ops::Range<usize> {
    let n = n as usize;
    (n / 3 + 1)..(2 * n).div_ceil(3)
}

impl Setup {
    /// Live members.
    pub fn live(&self) -> u32 {
        self.members - self.crashed
    }

    /// Checks the values; the error names the bad one.
    pub fn validate(&self) -> Result<(), String> {
        if !(3..=1024).contains(&self.members) {
            return Err(format!(
                "--members must be in 3..=1024, got {}",
                self.members
            ));
        }
        if self.crashed > self.members - 2 {
            return Err(format!(
                "--crashed {}: at most {} of {} members (hosts 0 and 1 stay up)",
                self.crashed,
                self.members - 2,
                self.members
            ));
        }
        if !(0.0..1.0).contains(&self.loss) {
            return Err(format!("--loss must be in [0, 1), got {}", self.loss));
        }
        if !(0.0..=1.0).contains(&self.first_loss) {
            return Err(format!(
                "--first-loss must be in [0, 1], got {}",
                self.first_loss
            ));
        }
        if self.gc_rounds < 2 {
            return Err(format!(
                "--gc-rounds must be at least 2 (a message is gossiped gc_rounds - 1 times), got {}",
                self.gc_rounds
            ));
        }
        if self.messages == 0 || self.messages > 1_000_000 {
            return Err(format!(
                "--messages must be in 1..=1000000, got {}",
                self.messages
            ));
        }
        if self.spacing_rounds == 0 {
            return Err("--spacing-rounds must be at least 1".into());
        }
        if !(self.latency_ms.is_finite() && (0.0..=10.0).contains(&self.latency_ms)) {
            return Err(format!(
                "--latency must be in [0, 10] ms (well inside a round), got {}",
                self.latency_ms
            ));
        }
        self.gossip_config()
            .validate(rmcast_proto::wire::MAX_DATAGRAM_LEN)
            .map_err(|e| format!("gossip engine: {e}"))
    }

    /// The gossip engine's configuration in the experiment: its defaults with this fanout,
    /// these rounds, and no silence timeout (crashed members stay gossip targets).
    pub fn gossip_config(&self) -> gossip::Config {
        gossip::Config {
            fanout: self.fanout as usize,
            gc_rounds: self.gc_rounds,
            loss_rounds: self.loss_rounds,
            round: self.round,
            silence_timeout: None,
            max_members: (self.members as usize).max(gossip::Config::default().max_members),
            ..gossip::Config::default()
        }
    }

    /// The model of this setup: push only (the paper's) or with the engine's pull.
    pub fn model(&self, pull: bool) -> Model {
        Model {
            members: self.live(),
            peers: self.members - 1,
            fanout: self.fanout,
            rounds: self.gc_rounds - 1,
            loss: self.loss,
            first_reach: (1.0 - self.loss) * (1.0 - self.first_loss),
            fail: 0.0,
            pull,
        }
    }

    /// When the sender starts: the group formed and every table converged.
    fn start(&self) -> Duration {
        Duration::from_millis(1000 + 10 * self.members as u64)
    }

    /// The simulator run of this setup.
    pub fn config(&self) -> SimConfig {
        let start = self.start();
        let span = self.round * self.spacing_rounds * self.messages.min(u32::MAX as u64) as u32;
        let crashes = (self.members - self.crashed..self.members)
            .map(|h| Crash {
                host: NodeId(h),
                at: Time::ZERO + (start - Duration::from_millis(100)),
            })
            .collect();
        let factory = FirstPhaseFactory {
            cfg: self.gossip_config(),
            first_loss: self.first_loss,
            hosts: self.members,
        };
        let mut cfg = SimConfig {
            seed: self.seed,
            members: self.members,
            engine: EngineChoice::custom(Arc::new(factory)),
            net: NetConfig {
                link: LinkParams {
                    latency: Duration::from_nanos((self.latency_ms * 1e6).round() as u64),
                    loss: self.loss,
                    ..LinkParams::default()
                },
                ..NetConfig::default()
            },
            faults: Faults {
                crashes,
                ..Faults::default()
            },
            workload: Workload {
                senders: vec![NodeId(1)],
                messages_per_sender: self.messages,
                message_bytes: 64,
                load: Load::OpenLoop {
                    interval: self.round * self.spacing_rounds,
                },
                start: Time::ZERO + start,
                qos: Qos::SourceOrdered,
                ..Workload::default()
            },
            ..SimConfig::default()
        };
        // With crashed members the group never goes quiet (nobody hears their agreement): the
        // run goes on to the deadline, which lies past the last message's life.
        let life = self.round * (self.gc_rounds + self.loss_rounds + 20);
        cfg.limits.quiescence_timeout = start + span + life;
        cfg.limits.max_steps = u64::MAX / 2;
        cfg
    }

    /// Runs the experiment; the error names a bad setting.
    pub fn measure(&self) -> Result<Measured, String> {
        self.validate()?;
        let cfg = self.config();
        cfg.validate()?;
        let report = crate::run(&cfg);
        let rec = &report.record;
        let sender = NodeId(1);
        let live = self.live();
        let msgs: Vec<u64> = (rec.submissions.iter())
            .filter(|s| s.sender == sender)
            .map(|s| s.msg)
            .collect();
        let index: std::collections::HashMap<u64, usize> =
            msgs.iter().enumerate().map(|(i, m)| (*m, i)).collect();
        let mut count = vec![0u32; msgs.len()];
        let mut loss_upcalls = 0;
        for h in rec.hosts.iter().take(live as usize) {
            for (_, d) in h.deliveries() {
                if d.sender != sender {
                    continue;
                }
                if let Some(&i) = index.get(&d.msg) {
                    count[i] += 1;
                }
            }
            loss_upcalls += (h.events.iter())
                .filter_map(|e| match &e.event {
                    Event::Loss(l) if l.sender == sender => Some(l.count),
                    _ => None,
                })
                .sum::<u64>();
        }
        let mut histogram = vec![0u64; live as usize + 1];
        for c in count {
            histogram[(c as usize).min(live as usize)] += 1;
        }
        Ok(Measured {
            histogram,
            messages: msgs.len() as u64,
            live,
            push: self.model(false).distribution(),
            push_pull: self.model(true).distribution(),
            loss_upcalls,
            passed: report.passed(),
            summary: report.summary(),
            simulated: rec.end_time.saturating_since(Time::ZERO),
        })
    }
}

/// The gossip engine whose first-phase multicasts go as one unicast per member, each dropped
/// with `first_loss` (see the module documentation).
#[derive(Clone, Debug)]
struct FirstPhaseFactory {
    cfg: gossip::Config,
    first_loss: f64,
    hosts: u32,
}

impl EngineFactory for FirstPhaseFactory {
    fn name(&self) -> &str {
        "gossip"
    }
    fn guarantees(&self, _: &EngineSettings) -> Guarantees {
        GossipFactory::declared()
    }
    fn validate(&self, _: &EngineSettings, max_datagram_bytes: usize) -> Result<(), ConfigError> {
        self.cfg.validate(max_datagram_bytes)
    }
    fn build(&self, p: &EngineParams<'_>) -> Box<dyn Engine> {
        Box::new(FirstPhase {
            inner: GossipFactory::with_config(self.cfg.clone()).build(p),
            // Its own stream, apart from the engine's (which draws the gossip targets).
            rng: SplitMix64::new(p.seed ^ 0x6269_6d6f_6461_6c21),
            first_loss: self.first_loss,
            hosts: self.hosts,
            me: p.me,
            queued: VecDeque::new(),
        })
    }
}

/// See [`FirstPhaseFactory`]. At most `hosts - 1` copies of one multicast wait here.
struct FirstPhase {
    inner: Box<dyn Engine>,
    rng: SplitMix64,
    first_loss: f64,
    hosts: u32,
    me: NodeId,
    queued: VecDeque<(NodeId, Vec<u8>)>,
}

/// Whether `datagram` is a gossip first-phase message (data, a run, a fragment).
fn is_data(datagram: &[u8]) -> bool {
    rmcast_proto::wire::decode(datagram).is_ok_and(|p| {
        matches!(
            p.header.ptype,
            gossip::packet::DATA | gossip::packet::DATA_RUN | gossip::packet::DATA_FRAG
        )
    })
}

impl Engine for FirstPhase {
    fn handle_datagram(&mut self, now: Time, from: NodeId, datagram: &[u8]) {
        self.inner.handle_datagram(now, from, datagram)
    }
    fn handle_timeout(&mut self, now: Time) {
        self.inner.handle_timeout(now)
    }
    fn submit(&mut self, now: Time, payload: bytes::Bytes, qos: Qos) -> Result<u64, SendError> {
        self.inner.submit(now, payload, qos)
    }
    fn leave(&mut self, now: Time) {
        self.inner.leave(now)
    }
    fn poll_transmit(&mut self, now: Time, buf: &mut Vec<u8>) -> Option<Transmit> {
        loop {
            if let Some((to, d)) = self.queued.pop_front() {
                buf.clear();
                buf.extend_from_slice(&d);
                return Some(Transmit::single(Destination::Peer(to)));
            }
            let t = self.inner.poll_transmit(now, buf)?;
            if t.destination != Destination::Group || !is_data(buf) {
                return Some(t);
            }
            for h in (0..self.hosts).map(NodeId).filter(|h| *h != self.me) {
                let u = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                if u < self.first_loss {
                    continue;
                }
                self.queued.push_back((h, buf.clone()));
            }
        }
    }
    fn poll_event(&mut self) -> Option<Event> {
        self.inner.poll_event()
    }
    fn poll_timeout(&self) -> Option<Time> {
        self.inner.poll_timeout()
    }
    fn node_id(&self) -> NodeId {
        self.inner.node_id()
    }
    fn guarantees(&self) -> Guarantees {
        self.inner.guarantees()
    }
    fn info(&self) -> GroupInfo {
        self.inner.info()
    }
    fn counters(&self) -> &Counters {
        self.inner.counters()
    }
    fn can_submit(&self) -> bool {
        self.inner.can_submit()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(members: u32, rounds: u32, loss: f64, first_reach: f64) -> Model {
        Model {
            members,
            peers: members - 1,
            fanout: 1,
            rounds,
            loss,
            first_reach,
            fail: 0.0,
            pull: false,
        }
    }

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-12, "{a:?} against {b:?}");
        }
    }

    #[test]
    fn the_recurrence_matches_small_cases_worked_by_hand() {
        // n = 3, fanout 1: a holder picks a given other member with probability 1/2; no loss,
        // so q = 1/2. Only the sender holds the message at first. Round 1: each of the two
        // others is reached with 1/2: P(1, 2, 3) = (1/4, 1/2, 1/4). Round 2: from 1 holder the
        // same again; from 2 holders the last member escapes with q^2 = 1/4.
        close(
            &model(3, 1, 0.0, 0.0).distribution(),
            &[0.0, 0.25, 0.5, 0.25],
        );
        close(
            &model(3, 2, 0.0, 0.0).distribution(),
            &[0.0, 0.0625, 0.125 + 0.125, 0.0625 + 0.375 + 0.25],
        );
        // Loss 1/2 on each of the 3 datagrams: q = 1 - 1/2 * 1/8 = 15/16. The first multicast
        // reaches each other member with 1/2: P(1, 2, 3) = (1/4, 1/2, 1/4) before the round.
        // From 1 holder: nobody (15/16)^2, one 2 * 1/16 * 15/16, both (1/16)^2; from 2 holders
        // the last escapes with (15/16)^2.
        let q: f64 = 15.0 / 16.0;
        let (p0, p1, p2) = (q * q, 2.0 * q / 16.0, 1.0 / 256.0);
        close(
            &model(3, 1, 0.5, 0.5).distribution(),
            &[
                0.0,
                0.25 * p0,
                0.25 * p1 + 0.5 * q * q,
                0.25 * p2 + 0.5 * (1.0 - q * q) + 0.25,
            ],
        );
        // Pull adds an escape factor of its own: (1 - 1/2 * 1/4) for 2 datagrams at loss 1/2.
        let m = Model {
            pull: true,
            ..model(3, 1, 0.5, 0.5)
        };
        assert!((m.escape() - q * (1.0 - 0.125)).abs() < 1e-12);
        // A failed holder passes nothing on.
        let m = Model {
            fail: 1.0,
            ..model(4, 5, 0.0, 0.0)
        };
        close(&m.distribution(), &[0.0, 1.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn the_prediction_is_a_distribution_and_keeps_tiny_probabilities() {
        let s = Setup {
            members: 128,
            ..Setup::default()
        };
        let p = s.model(false).distribution();
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        // The middle of a bimodal prediction is small but not rounded to zero.
        let mid = mass(&p, middle_third(128));
        assert!(mid > 0.0 && mid < 0.01, "{mid}");
        assert_eq!(middle_third(3), 2..2);
        assert_eq!(middle_third(16), 6..11);
    }

    #[test]
    fn the_gossip_engine_delivers_almost_all_or_almost_none_as_predicted() {
        // 16 members, two targets a round, 10% loss on every datagram, the first multicast
        // reaching nobody but the sender, a message kept 8 rounds: the paper's recurrence puts
        // 0.2% of the messages in the middle third of the counts.
        let s = Setup {
            members: 16,
            gc_rounds: 8,
            loss_rounds: 8,
            messages: 150,
            spacing_rounds: 18,
            ..Setup::default()
        };
        let m = s.measure().unwrap();
        assert!(m.passed, "{}", m.summary);
        assert_eq!(m.messages, 150);
        assert_eq!(m.histogram.iter().sum::<u64>(), 150);
        let mid = middle_third(16);
        assert!(mass(&m.push, mid.clone()) < 0.01, "{:?}", m.push);
        assert!(m.fraction_in(mid.clone()) < 0.01, "{:?}", m.histogram);
        // Almost all: most messages reached every member or all but one.
        assert!(m.fraction(16) + m.fraction(15) > 0.9, "{:?}", m.histogram);
        // Nothing outside the live members is counted.
        assert_eq!(m.histogram.len(), 17);
    }

    #[test]
    fn crashed_members_deliver_nothing_and_leave_the_model_with_the_live_ones() {
        let s = Setup {
            members: 10,
            crashed: 3,
            gc_rounds: 6,
            loss_rounds: 6,
            messages: 20,
            spacing_rounds: 14,
            ..Setup::default()
        };
        assert_eq!(s.model(false).members, 7);
        assert_eq!(s.model(false).peers, 9);
        let m = s.measure().unwrap();
        assert_eq!(m.histogram.len(), 8);
        assert_eq!(m.histogram.iter().sum::<u64>(), 20);
        // The sender always delivers its own message.
        assert_eq!(m.histogram[0], 0);
    }

    #[test]
    fn without_loss_every_member_gets_every_message() {
        let s = Setup {
            members: 8,
            loss: 0.0,
            first_loss: 0.0,
            gc_rounds: 3,
            loss_rounds: 3,
            messages: 20,
            spacing_rounds: 8,
            ..Setup::default()
        };
        let m = s.measure().unwrap();
        assert_eq!(m.histogram[8], 20, "{:?}", m.histogram);
        assert_eq!(s.model(false).distribution()[8], 1.0);
    }

    /// The first-phase datagrams a wrapped creator of a group of `hosts` sends for one
    /// message: `(unicast copies, group multicasts)`.
    fn first_phase_copies(first_loss: f64, hosts: u32) -> (usize, usize) {
        let f = FirstPhaseFactory {
            cfg: gossip::Config::default(),
            first_loss,
            hosts,
        };
        let settings = EngineSettings::default();
        let mut e = f.build(&EngineParams {
            role: rmcast_proto::Role::Create,
            group: 7,
            me: NodeId(1),
            max_datagram_bytes: 1400,
            now: Time::ZERO,
            seed: 3,
            settings: &settings,
        });
        let mut buf = Vec::new();
        while e.poll_transmit(Time::ZERO, &mut buf).is_some() {}
        e.submit(
            Time::ZERO,
            bytes::Bytes::from_static(b"m"),
            Qos::SourceOrdered,
        )
        .unwrap();
        let (mut unicast, mut group) = (0, 0);
        while let Some(t) = e.poll_transmit(Time::ZERO, &mut buf) {
            assert!(is_data(&buf));
            match t.destination {
                Destination::Peer(to) => {
                    assert!(to != NodeId(1) && to.0 < hosts);
                    unicast += 1;
                }
                _ => group += 1,
            }
        }
        (unicast, group)
    }

    #[test]
    fn the_first_phase_goes_as_one_copy_per_member_each_dropped_with_first_loss() {
        assert_eq!(first_phase_copies(0.0, 10), (9, 0));
        assert_eq!(first_phase_copies(1.0, 10), (0, 0));
        let (some, _) = first_phase_copies(0.5, 200);
        assert!((60..140).contains(&some), "{some}");
    }
}
