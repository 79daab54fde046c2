//! What a simulation run is made of: the group, the network model, the faults, the workload,
//! the membership churn and the bounds that turn a livelock into a reported failure.
//!
//! A [`SimConfig`] is plain data. Everything random in a run is drawn from one RNG seeded with
//! [`SimConfig::seed`], so the same config reproduces a run bit for bit. Randomised *schedules*
//! (which member pauses when, who leaves) are built by [`crate::Scenario`] from the seed before
//! the run, and end up here as explicit lists.

use rmcast_proto::registry::{EngineFactory, EngineParams, EngineSettings};
use rmcast_proto::{Engine, EngineChoice, Guarantees, NodeId, Qos, Role, Time};
use std::sync::Arc;
use std::time::Duration;

/// Builds the engine of a host in a test: `(node, now, role)`. Wrap one in [`custom_engine`]
/// to run it.
pub type EngineFn = dyn Fn(NodeId, Time, Role) -> Box<dyn Engine> + Send + Sync;

/// A registry-style factory around a closure, for engines outside the registry (test engines).
struct FnFactory {
    name: String,
    guarantees: Guarantees,
    build: Box<EngineFn>,
}

impl EngineFactory for FnFactory {
    fn name(&self) -> &str {
        &self.name
    }
    fn guarantees(&self, _settings: &EngineSettings) -> Guarantees {
        self.guarantees
    }
    fn build(&self, p: &EngineParams<'_>) -> Box<dyn Engine> {
        (self.build)(p.me, p.now, p.role)
    }
}

/// An [`EngineChoice`] whose hosts are built by `build` and that declares `guarantees` (the
/// engines it builds should declare the same): how a test runs an engine of its own, as
/// `SimConfig { engine: custom_engine(..), .. }`.
pub fn custom_engine(
    name: &str,
    guarantees: Guarantees,
    build: impl Fn(NodeId, Time, Role) -> Box<dyn Engine> + Send + Sync + 'static,
) -> EngineChoice {
    EngineChoice::custom(Arc::new(FnFactory {
        name: name.to_string(),
        guarantees,
        build: Box::new(build),
    }))
}

/// The seed of host `node`'s engine RNG in a run of seed `run_seed`: a hash of both
/// (splitmix64), so that the run's own RNG is not drawn from and every seed's run stays what it
/// was before engines had seeds.
pub fn engine_seed(run_seed: u64, node: NodeId) -> u64 {
    let mut z = run_seed ^ (node.0 as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Largest datagram the simulated hosts' engines may write (Ethernet MTU less IP and UDP
/// headers, as the runtime's default).
pub const MAX_DATAGRAM_BYTES: usize = 1472;

/// Properties of one directed link (sender to receiver).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct LinkParams {
    /// One-way base latency.
    pub latency: Duration,
    /// Extra latency drawn uniformly from `[0, jitter]` per datagram; this is what reorders.
    pub jitter: Duration,
    /// Probability in `[0, 1)` that a datagram is lost on this link.
    pub loss: f64,
    /// Probability in `[0, 1)` that a datagram that is not lost arrives twice (each copy with its
    /// own latency draw).
    pub dup: f64,
}

impl Default for LinkParams {
    fn default() -> Self {
        LinkParams {
            latency: Duration::from_millis(1),
            jitter: Duration::ZERO,
            loss: 0.0,
            dup: 0.0,
        }
    }
}

/// Bytes a datagram costs on a 10 Mb/s Ethernet beyond its UDP payload: preamble and start
/// delimiter (8), MAC header (14), frame check sequence (4), inter-frame gap (12), IP header
/// (20) and UDP header (8). [`NetConfig::frame_overhead_bytes`] of a shared medium
/// ([`crate::Scenario::shared_medium`]).
pub const ETHERNET_FRAME_OVERHEAD_BYTES: usize = 66;

/// The network model.
///
/// A multicast leaves its sender once (one slot of the sender's uplink, or of the shared
/// medium) and is then copied to every receiver, each copy with its own loss, duplication and
/// latency draw, as IP multicast on a LAN behaves.
///
/// With a bandwidth, datagrams are serialized either on an uplink per host (a switched LAN:
/// hosts send at the same time, each at `bandwidth_bps`) or, with [`NetConfig::shared_medium`],
/// on one channel all hosts share (a 10 Mb/s Ethernet segment: one datagram at a time on the
/// whole network).
#[derive(Clone, Debug, PartialEq)]
pub struct NetConfig {
    /// Parameters of every link without an override.
    pub link: LinkParams,
    /// Per-link overrides: `(from, to, params)` for the directed link `from -> to`.
    pub links: Vec<(NodeId, NodeId, LinkParams)>,
    /// Uplink bandwidth of every host in bits per second (of the one shared medium with
    /// [`NetConfig::shared_medium`]); `None` means infinitely fast.
    pub bandwidth_bps: Option<u64>,
    /// Drop-tail queue of each host's uplink, in datagrams (only with a bandwidth); with a
    /// shared medium, each host's queue towards the medium (its interface's). The datagram
    /// being sent counts.
    pub uplink_queue_datagrams: usize,
    /// One medium for every host (needs a bandwidth): a datagram, multicast or unicast, is one
    /// transmission of `(len + frame_overhead_bytes) * 8 / bandwidth_bps` seconds during which
    /// nobody else sends. Each host queues its datagrams (drop-tail, `uplink_queue_datagrams`)
    /// and the hosts with datagrams waiting take turns, one datagram each in host order: an
    /// idealised CSMA/CD, without collisions or the capture effect. Copies leave when the
    /// transmission ends.
    pub shared_medium: bool,
    /// Bytes added to every datagram's length to compute its transmission time (framing and
    /// headers below the datagram, such as [`ETHERNET_FRAME_OVERHEAD_BYTES`]); 0 charges the
    /// datagram alone.
    pub frame_overhead_bytes: usize,
    /// Datagrams at most in flight towards one host (the network's buffering); more are dropped
    /// and counted. Keeps the model's memory bounded.
    pub rx_inflight_datagrams: usize,
    /// Areas behind routers with their own hop counts, latencies and losses
    /// ([`crate::topology`]); `None`: the flat network, and engines get no TTL.
    pub topology: Option<crate::topology::Topology>,
    /// What handling one received datagram costs a host's processor ([`HostCost`]); `None`:
    /// nothing (engines are infinitely fast, the network is all there is).
    pub host_cost: Option<HostCost>,
}

/// A host's processor as a single server: each received datagram occupies it for
/// `per_datagram + per_kib × len / 1024` before its engine sees it, one datagram at a time, in
/// arrival order. Datagrams waiting for the processor count against
/// [`NetConfig::rx_inflight_datagrams`] (the interface's receive buffer: Amoeba's Lance held 32
/// packets). The papers measured machines whose protocol processing, not their Ethernet, bounded
/// what they did (Kaashoek and Tanenbaum: "almost 800 µsec" a message at the sequencer of a
/// 20-MHz 68030); without it the simulator measures the wire alone.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct HostCost {
    /// Fixed cost of one datagram: interrupt, driver, protocol.
    pub per_datagram: Duration,
    /// Cost of each KiB of the datagram (copies).
    pub per_kib: Duration,
}

impl HostCost {
    /// What a datagram of `len` bytes costs.
    pub fn of(&self, len: usize) -> Duration {
        self.per_datagram + self.per_kib * u32::try_from(len).unwrap_or(u32::MAX) / 1024
    }
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            link: LinkParams::default(),
            links: Vec::new(),
            bandwidth_bps: None,
            uplink_queue_datagrams: 256,
            shared_medium: false,
            frame_overhead_bytes: 0,
            rx_inflight_datagrams: 16_384,
            topology: None,
            host_cost: None,
        }
    }
}

impl NetConfig {
    /// The parameters of the directed link `from -> to`.
    pub fn link(&self, from: NodeId, to: NodeId) -> &LinkParams {
        self.links
            .iter()
            .find(|(f, t, _)| *f == from && *t == to)
            .map(|(_, _, p)| p)
            .unwrap_or(&self.link)
    }
}

/// A network partition: from `start` to `end`, datagrams between a host of `a` and a host of `b`
/// (either way) are cut. Whether a datagram is cut is decided when it leaves its sender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// When the partition starts.
    pub start: Time,
    /// When it heals.
    pub end: Time,
    /// One side.
    pub a: Vec<NodeId>,
    /// The other side.
    pub b: Vec<NodeId>,
}

impl Partition {
    /// Whether a datagram leaving at `at` from `x` to `y` is cut.
    pub fn cuts(&self, at: Time, x: NodeId, y: NodeId) -> bool {
        at >= self.start
            && at < self.end
            && ((self.a.contains(&x) && self.b.contains(&y))
                || (self.b.contains(&x) && self.a.contains(&y)))
    }
}

/// A host stops processing for a while (the perturbed member of Bimodal Multicast): no timers,
/// no submissions; datagrams that arrive go to its bounded receive buffer and are processed when
/// it wakes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pause {
    /// The host.
    pub host: NodeId,
    /// When it stops.
    pub at: Time,
    /// For how long.
    pub duration: Duration,
}

/// A host crashes: its engine and all its state are dropped, for good.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Crash {
    /// The host.
    pub host: NodeId,
    /// When.
    pub at: Time,
}

/// A perturbed member, as in the experiments of "Throughput Stability of Reliable Multicast
/// Protocols" (Özkasap and Birman): at `start`, then every `period` before `end`, the host falls
/// asleep for `sleep` with probability `probability`. A sleep is a [`Pause`] (no datagrams, no
/// timers, no submissions; what arrives waits in the bounded receive buffer,
/// [`Faults::pause_buffer_datagrams`], and is processed on waking). A draw that comes while the
/// host still sleeps and succeeds makes the sleep longer (with `sleep == period`, back-to-back
/// sleeps are one sleep: the host does not run in between), so the host sleeps about
/// `probability` of the time.
///
/// The draws come from a random stream of the perturbation's own, seeded from the run's seed
/// and the host ([`perturbation_seed`]): one seed puts a host to sleep at the same times
/// whatever engine runs and whatever the network model draws.
#[derive(Clone, Debug, PartialEq)]
pub struct Perturbation {
    /// The host.
    pub host: NodeId,
    /// Probability in `[0, 1]` that the host falls asleep at a draw (the paper's perturb rate).
    pub probability: f64,
    /// Time between two draws.
    pub period: Duration,
    /// How long one sleep lasts.
    pub sleep: Duration,
    /// The first draw.
    pub start: Time,
    /// No draw at or after this time (a sleep drawn before it may last past it).
    pub end: Time,
}

/// The seed of the random stream that puts `host` to sleep in a run of seed `run_seed`
/// ([`Perturbation`]): apart from the run's one RNG and from every engine's seed.
pub fn perturbation_seed(run_seed: u64, host: NodeId) -> u64 {
    engine_seed(run_seed ^ 0x51ee_9ca7_5eed_0b1d, host)
}

/// Injected faults. They all end (heal) at a known time; the quiescence phase starts after.
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    /// Partitions.
    pub partitions: Vec<Partition>,
    /// Pauses.
    pub pauses: Vec<Pause>,
    /// Perturbed members: hosts that fall asleep at random, a pause at a time.
    pub perturbations: Vec<Perturbation>,
    /// Crashes (no engine recovers from one yet; the checkers treat crashed hosts as gone).
    pub crashes: Vec<Crash>,
    /// Receive buffer of a paused (or sleeping) host, in datagrams; overflow is dropped and
    /// counted. With [`PauseRead::UnicastFirst`] each of its two sockets has a buffer this size.
    pub pause_buffer_datagrams: usize,
    /// In what order a paused host reads what waited for it, on waking.
    pub pause_read: PauseRead,
    /// A paused host's engine is handed what waited for it with the time the pause began, as
    /// a process is that was stopped (SIGSTOP) after its I/O loop read the clock and before it
    /// read its sockets: the runtime reads the clock once per loop turn. Its timers then run at
    /// the time of waking. Off: the backlog is handed over at the time of waking.
    pub pause_stale_clock: bool,
}

/// How a paused host reads its backlog on waking ([`Faults::pause_read`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PauseRead {
    /// One receive buffer, read in arrival order.
    #[default]
    ArrivalOrder,
    /// Two receive buffers, as the runtime has two sockets: what was sent to this host alone
    /// (unicast) and what was sent to the group (multicast), each bounded by
    /// [`Faults::pause_buffer_datagrams`]. On waking the host reads every unicast datagram
    /// before the first multicast one, as the runtime's I/O loop reads its unicast socket
    /// before its multicast sockets (a process stopped by SIGSTOP finds both readable at once),
    /// so that answers and passes sent to it overtake data and ACKs sent to the group earlier.
    UnicastFirst,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            partitions: Vec::new(),
            pauses: Vec::new(),
            perturbations: Vec::new(),
            crashes: Vec::new(),
            pause_buffer_datagrams: 64,
            pause_read: PauseRead::ArrivalOrder,
            pause_stale_clock: false,
        }
    }
}

/// How a sender paces its submissions.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Load {
    /// Open loop: one message becomes due every `interval`; due messages that the engine refuses
    /// (back-pressure) wait and are retried, never dropped.
    OpenLoop {
        /// Time between two messages of one sender.
        interval: Duration,
    },
    /// Closed loop: at most `in_flight` messages submitted and not yet completed
    /// ([`rmcast_proto::Event::SendComplete`]). `in_flight = 1` is one broadcast at a time.
    ClosedLoop {
        /// Messages in flight at most.
        in_flight: usize,
    },
}

/// The application load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Hosts that send. A sender starts once the workload starts and it has installed a view,
    /// and stops for good when it is told to leave.
    pub senders: Vec<NodeId>,
    /// Messages each sender submits.
    pub messages_per_sender: u64,
    /// Payload size in bytes (at least [`crate::record::PAYLOAD_HEADER_BYTES`]; the payload
    /// encodes the sender and its counter).
    pub message_bytes: usize,
    /// Pacing.
    pub load: Load,
    /// When senders start (with [`Workload::after_formation`]: at the earliest).
    pub start: Time,
    /// Start only once the group has formed: every initial member installed a view that
    /// names every initial member of its group (or, for an engine that keeps no membership,
    /// any view; where only the creator sends, receivers that connect on its first data need
    /// only run), and then nothing is in flight and no engine has a timer due within
    /// [`Limits::quiet_timer_horizon`] (formation's own tail is over), or that horizon passed
    /// (an engine with periodic traffic of its own is never quiet). What is counted from the workload's start ([`crate::Record::workload_start`],
    /// the counters at that instant) then leaves formation out, whatever the group's size; a
    /// fixed [`Workload::start`] falls inside formation once the group is large. A group
    /// that never forms never starts its workload: the run fails liveness at its deadline.
    pub after_formation: bool,
    /// After a refused submit, when to try again (also retried after every step of the host).
    pub retry_interval: Duration,
    /// Quality of service asked for.
    pub qos: Qos,
    /// Hand every message that is due at one instant to the engine before draining its
    /// transmissions, as a runtime does with the commands queued by the application; this is
    /// what lets engines bundle under load. With `false`, transmissions are drained after each
    /// submit. With one message in flight both are the same.
    pub burst_submits: bool,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            senders: vec![NodeId(0)],
            messages_per_sender: 100,
            message_bytes: 64,
            load: Load::ClosedLoop { in_flight: 1 },
            start: Time(50_000_000),
            after_formation: false,
            retry_interval: Duration::from_millis(1),
            qos: Qos::TotallyOrdered,
            burst_submits: true,
        }
    }
}

/// A membership change while traffic flows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ChurnKind {
    /// Start a new host that joins the group.
    Join,
    /// Ask a member to leave (`Engine::leave`). Deferred while the host is paused or has not yet
    /// installed its first view, so that only members leave.
    Leave,
}

/// One scheduled membership change.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ChurnEvent {
    /// When.
    pub at: Time,
    /// Which host.
    pub node: NodeId,
    /// Join or leave.
    pub kind: ChurnKind,
}

/// Bounds on every loop of the simulator. Hitting one ends the run with a `livelock` verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Events processed in one run, at most.
    pub max_steps: u64,
    /// Datagrams one engine may emit in answer to one input.
    pub max_transmits_per_step: usize,
    /// Events one engine may emit in answer to one input.
    pub max_events_per_step: usize,
    /// Consecutive steps without virtual time moving (a timer that keeps firing "now").
    pub max_steps_same_time: u64,
    /// Scheduled items (datagrams in flight, timers, faults) at most.
    pub max_queue_len: usize,
    /// After every fault healed and every membership change happened, how long the members get
    /// to deliver everything before the run counts as a liveness failure.
    pub quiescence_timeout: Duration,
    /// How often the quiescence condition is evaluated.
    pub check_interval: Duration,
    /// Probabilistic engines (which do not promise that everyone delivers everything): the run
    /// ends once no datagram is in flight and no engine has a timer due within this long.
    pub quiet_timer_horizon: Duration,
    /// The run never ends as quiescent: it goes on to the deadline (the heal time plus
    /// `quiescence_timeout`). For checks of their own that need what happens after the
    /// members delivered what the quiescence rule asks of them (the Txn rules: a transaction
    /// whose source crashed just after releasing it is still owed by every receiver of its set,
    /// whom the release reaches after the crash).
    pub run_to_deadline: bool,
}

impl Limits {
    /// The defaults, with the bounds that grow with the group raised for `members`: joins are
    /// multicast, so forming a group of n takes about n^2 / 2 datagram copies, past the
    /// default step and queue bounds at several thousand members.
    pub fn for_members(members: u32) -> Limits {
        let d = Limits::default();
        let n = u64::from(members);
        Limits {
            max_steps: d.max_steps.max(2 * n * n),
            max_queue_len: d.max_queue_len.max(400 * members as usize),
            ..d
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_steps: 50_000_000,
            max_transmits_per_step: 100_000,
            max_events_per_step: 1_000_000,
            max_steps_same_time: 1_000_000,
            max_queue_len: 4_000_000,
            quiescence_timeout: Duration::from_secs(60),
            check_interval: Duration::from_millis(10),
            quiet_timer_horizon: Duration::from_secs(1),
            run_to_deadline: false,
        }
    }
}

/// Everything a run needs. Hosts are numbered `NodeId(0)..`: the first `members` start at the
/// beginning (host 0 creates the group, host `i` joins at `i * join_stagger`); hosts named by
/// [`ChurnKind::Join`] events start later.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// The seed of the run's one RNG.
    pub seed: u64,
    /// Members at the start.
    pub members: u32,
    /// Delay between the starts of two initial members.
    pub join_stagger: Duration,
    /// Group id in every header.
    pub group: u32,
    /// The engine every host runs, with its settings (resilience, recovery policy): a
    /// registered one ([`EngineChoice::named`]) or a test's own ([`custom_engine`]).
    pub engine: EngineChoice,
    /// The network.
    pub net: NetConfig,
    /// Faults.
    pub faults: Faults,
    /// Application load.
    pub workload: Workload,
    /// Joins and leaves during the run.
    pub churn: Vec<ChurnEvent>,
    /// Loop bounds.
    pub limits: Limits,
    /// Self-healing, as `rmcast member` runs by default: a host the group went on without
    /// ([`rmcast_proto::Recovery::Expelled`]) joins it again as a new member
    /// ([`rmcast_proto::Engine::rejoin`]), and the run ends only once every host that was never
    /// meant to leave or crash is back in one group. Off: an expelled host stays out. With
    /// [`SimConfig::join_or_create`], group formation heals as the runtime does
    /// ([`rmcast_proto::formation`]): the coordinator announces its group every
    /// [`SimConfig::heal_interval`], a smaller group of the same name merges into a larger one,
    /// and a rejoin nobody admits starts a group of one.
    pub heal: bool,
    /// Every host opens with join-or-create, as `rmcast member` does
    /// ([`rmcast_proto::Entry::JoinOrCreate`]: it looks for the group and creates it if
    /// nobody admits it and no lower id looks too), instead of host 0 creating and the others
    /// joining; hosts also run the HELLO address exchange. Off: the roles are fixed.
    pub join_or_create: bool,
    /// How long a join waits to be admitted before a join-or-create host creates the group;
    /// how long a rejoin waits before it starts a group of one.
    pub join_timeout: Duration,
    /// With [`SimConfig::heal`]: how often the member that coordinates a group announces it
    /// (a smaller group of the same name that hears it merges into it).
    pub heal_interval: Duration,
    /// Take a snapshot of every running host's engine counters this often, from the workload
    /// start until the last fault healed ([`crate::record::HostRecord::counter_samples`]):
    /// what a figure per time window needs. `None`: no snapshots.
    pub sample_counters: Option<Duration>,
    /// Disjoint groups running side by side on one network (the parallel groups of Amoeba's
    /// Figure 26): the initial members are split into this many blocks of consecutive hosts,
    /// each its own group (its own group id, creator, multicasts, views and checkers); they
    /// share only the network. 1: one group.
    pub parallel_groups: u32,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 0,
            members: 4,
            join_stagger: Duration::from_millis(1),
            group: 0x5349_4d31,
            engine: EngineChoice::sequencer(0),
            net: NetConfig::default(),
            faults: Faults::default(),
            workload: Workload::default(),
            churn: Vec::new(),
            limits: Limits::default(),
            heal: false,
            join_or_create: false,
            join_timeout: Duration::from_secs(1),
            heal_interval: Duration::from_millis(200),
            sample_counters: None,
            parallel_groups: 1,
        }
    }
}

fn check_prob(what: &str, p: f64) -> Result<(), String> {
    if (0.0..1.0).contains(&p) {
        Ok(())
    } else {
        Err(format!("{what} must be in [0, 1), got {p}"))
    }
}

impl SimConfig {
    /// Members of each of the [`SimConfig::parallel_groups`].
    pub fn group_size(&self) -> usize {
        (self.members / self.parallel_groups.max(1)).max(1) as usize
    }

    /// Which of the [`SimConfig::parallel_groups`] host `host` belongs to (0 with one group).
    pub fn group_of(&self, host: usize) -> usize {
        if self.parallel_groups <= 1 {
            0
        } else {
            host / self.group_size()
        }
    }

    /// Number of hosts the run may start: initial members and joiners.
    pub fn host_count(&self) -> usize {
        let joiners = self
            .churn
            .iter()
            .filter(|c| c.kind == ChurnKind::Join)
            .map(|c| c.node.0 as usize + 1)
            .max()
            .unwrap_or(0);
        (self.members as usize).max(joiners)
    }

    /// Checks that the config describes a possible run; the error says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.members == 0 {
            return Err("members must be at least 1".into());
        }
        if self.parallel_groups == 0 || self.members % self.parallel_groups != 0 {
            return Err(format!(
                "{} members cannot be split into {} groups of one size",
                self.members, self.parallel_groups
            ));
        }
        if self.parallel_groups > 1
            && (!self.churn.is_empty() || self.net.topology.is_some() || self.join_or_create)
        {
            return Err(
                "parallel groups run with fixed roles, no churn and no topology".to_string(),
            );
        }
        self.engine
            .validate(MAX_DATAGRAM_BYTES)
            .map_err(|e| e.to_string())?;
        let n = self.host_count();
        if n > 100_000 {
            return Err(format!("too many hosts: {n}"));
        }
        let known = |id: NodeId| (id.0 as usize) < n;
        let mut links = vec![self.net.link];
        links.extend(self.net.links.iter().map(|l| l.2));
        for l in &links {
            check_prob("loss", l.loss)?;
            check_prob("dup", l.dup)?;
        }
        for (f, t, _) in &self.net.links {
            if !known(*f) || !known(*t) {
                return Err(format!("link override {f} -> {t} names an unknown host"));
            }
        }
        if self.net.bandwidth_bps == Some(0) {
            return Err("bandwidth must be positive".into());
        }
        if self.net.bandwidth_bps.is_some() && self.net.uplink_queue_datagrams == 0 {
            return Err("uplink queue must hold at least one datagram".into());
        }
        if self.net.shared_medium && self.net.bandwidth_bps.is_none() {
            return Err("a shared medium needs a bandwidth".into());
        }
        if let Some(t) = &self.net.topology {
            t.validate(n)?;
        }
        if self.net.rx_inflight_datagrams == 0 {
            return Err("rx_inflight_datagrams must be positive".into());
        }
        for p in &self.faults.partitions {
            if p.end < p.start {
                return Err("a partition ends before it starts".into());
            }
            if p.a.iter().chain(&p.b).any(|h| !known(*h)) {
                return Err("a partition names an unknown host".into());
            }
        }
        for p in &self.faults.pauses {
            if !known(p.host) {
                return Err(format!("a pause names unknown host {}", p.host));
            }
        }
        for p in &self.faults.perturbations {
            if !known(p.host) {
                return Err(format!("a perturbation names unknown host {}", p.host));
            }
            if !(0.0..=1.0).contains(&p.probability) {
                return Err(format!(
                    "a perturbation's probability must be in [0, 1], got {}",
                    p.probability
                ));
            }
            if p.period.is_zero() || p.end < p.start {
                return Err(
                    "a perturbation needs a positive period and an end after its start".into(),
                );
            }
        }
        for c in &self.faults.crashes {
            if !known(c.host) {
                return Err(format!("a crash names unknown host {}", c.host));
            }
        }
        let w = &self.workload;
        if w.senders.iter().any(|s| !known(*s)) {
            return Err("a sender is not a host".into());
        }
        if w.message_bytes < crate::record::PAYLOAD_HEADER_BYTES {
            return Err(format!(
                "message size must be at least {} bytes",
                crate::record::PAYLOAD_HEADER_BYTES
            ));
        }
        match w.load {
            Load::OpenLoop { interval } if interval.is_zero() => {
                return Err("open-loop interval must be positive".into())
            }
            Load::ClosedLoop { in_flight: 0 } => {
                return Err("in-flight bound must be at least 1".into())
            }
            _ => {}
        }
        if w.retry_interval.is_zero() {
            return Err("retry interval must be positive".into());
        }
        let mut joined = std::collections::BTreeSet::new();
        for c in &self.churn {
            match c.kind {
                ChurnKind::Join => {
                    if c.node.0 < self.members || !joined.insert(c.node) {
                        return Err(format!(
                            "joiner {} must be a new host (id >= members, joining once)",
                            c.node
                        ));
                    }
                }
                ChurnKind::Leave => {
                    if !known(c.node) {
                        return Err(format!("leave of unknown host {}", c.node));
                    }
                }
            }
        }
        if self.sample_counters.is_some_and(|d| d.is_zero()) {
            return Err("the counter sampling interval must be positive".into());
        }
        if self.limits.check_interval.is_zero() {
            return Err("check interval must be positive".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Limits;

    /// Small groups keep the defaults; a group of 10,000 gets the n^2 / 2 copies its joins take.
    #[test]
    fn bounds_grow_with_the_group_only_past_the_defaults() {
        assert_eq!(Limits::for_members(1_000), Limits::default());
        let big = Limits::for_members(10_000);
        assert_eq!(big.max_steps, 200_000_000);
        assert_eq!(
            big.max_queue_len,
            Limits::default().max_queue_len.max(4_000_000)
        );
        assert_eq!(big.quiescence_timeout, Limits::default().quiescence_timeout);
    }
}
