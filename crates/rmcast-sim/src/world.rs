//! The simulator core: virtual time, one event queue, one seeded RNG, the network model, the
//! fault schedule, the workload and the membership churn, driving real engines.
//!
//! Everything that happens is an item in one [`BinaryHeap`] keyed by `(time, insertion
//! counter)`, so that two items due at the same instant are handled in the order they were
//! scheduled and a run is a pure function of its config and seed. The RNG is drawn from only in
//! the network model, in a deterministic order (receivers of a multicast in host order);
//! perturbed members draw their sleeps from streams of their own, seeded from the run's seed
//! ([`crate::config::perturbation_seed`]), so that the network's draws do not move them.
//!
//! Engines are driven exactly as a runtime drives them: after every input (a datagram, a timer,
//! a submission burst, a leave), `poll_transmit` until `None` with one reused buffer, then
//! `poll_event` until `None`, again until both are empty, and finally the timer is re-armed from
//! `poll_timeout`. Every loop has a bound from [`Limits`]; hitting one stops the run and records
//! a livelock.

use crate::config::{
    engine_seed, perturbation_seed, ChurnKind, Load, PauseRead, SimConfig, MAX_DATAGRAM_BYTES,
};
use crate::record::{
    make_payload, payload_hash, HostRecord, NetStats, Record, Recorded, Submission,
};
use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rmcast_proto::{
    DeliveryPromise, Destination, Engine, Entry, Event, Formation, FormationConfig, Guarantees,
    NodeId, Notice, Recovery, Rejoin, Role, SendError, Senders, Time,
};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::time::Duration;

/// Rounds of "drain transmits, drain events" after one input, at most.
const MAX_DRAIN_ROUNDS: usize = 10_000;

/// A deferred leave (host paused or not yet a member) is retried this often.
const LEAVE_RETRY: Duration = Duration::from_millis(10);

/// Something due at a point of virtual time.
enum Item {
    /// Start a host's engine.
    Start {
        host: usize,
        role: Role,
        churn: bool,
    },
    /// A datagram copy reaches a host.
    Arrive {
        to: usize,
        from: NodeId,
        data: Bytes,
        /// The TTL it arrives with (with a topology only).
        ttl: Option<u8>,
        /// Sent to this host alone (it would reach the runtime's unicast socket).
        unicast: bool,
    },
    /// A host's processor is done with a datagram that arrived earlier
    /// ([`crate::NetConfig::host_cost`]): its engine sees it now.
    Processed {
        to: usize,
        from: NodeId,
        data: Bytes,
        ttl: Option<u8>,
        unicast: bool,
    },
    /// A host's armed timer; stale when `gen` is not the host's current generation.
    Timer { host: usize, gen: u64 },
    /// Open loop: one more message of this sender is due.
    RateTick { host: usize },
    /// Retry a refused submission.
    Retry { host: usize },
    /// Senders start.
    WorkloadStart,
    /// Ask a host to leave.
    Leave { host: usize },
    /// Pause a host.
    Pause { host: usize, duration: Duration },
    /// A perturbed host's draw: it falls asleep or not ([`crate::Perturbation`], by index).
    Perturb { index: usize },
    /// Snapshot every running engine's counters.
    Sample,
    /// A paused host wakes if its pause is over.
    Wake { host: usize },
    /// A host crashes.
    Crash { host: usize },
    /// Evaluate the quiescence condition.
    Check,
    /// The datagram on the shared medium has been sent: its copies leave, the next one starts.
    MediumDone,
}

struct Scheduled {
    at: Time,
    order: u64,
    item: Item,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    /// Reversed, so that the max-heap pops the earliest item (then the first scheduled).
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.order).cmp(&(self.at, self.order))
    }
}

/// The process state of a host. A crash drops the engine (its state is lost); a restart would
/// build a new engine from the factory, so `Crashed` may later go back to `Running`.
enum HostState {
    /// Not started yet (a scheduled joiner) or never.
    NotStarted,
    /// Processing inputs: the engine inside group formation (which is transparent with fixed
    /// roles and no healing).
    Running(Box<Formation>),
    /// Processing nothing until `until`; arrivals go to the bounded pause buffer.
    Paused { engine: Box<Formation>, until: Time },
    /// Left the group ([`Event::Left`] seen); the engine is dropped.
    Left,
    /// Crashed; the engine is dropped.
    Crashed,
}

/// A sender's progress through its workload.
struct SenderState {
    total: u64,
    /// Counter of the next message to submit.
    next: u64,
    /// Open loop: messages due so far.
    due: u64,
    /// Submitted, not yet completed.
    in_flight: HashSet<u64>,
    retry_pending: bool,
    /// Told to leave (or a fatal submit error): submits nothing more.
    stopped: bool,
}

struct Host {
    state: HostState,
    timer_gen: u64,
    armed: Option<Time>,
    /// Copies in flight towards this host (with a host cost: also those waiting for its
    /// processor).
    rx_inflight: usize,
    /// With [`crate::NetConfig::host_cost`]: when the processor is done with what it has.
    cpu_free_at: Time,
    /// Receive buffer while paused (bounded by `Faults::pause_buffer_datagrams`); with
    /// `PauseRead::UnicastFirst` the multicast socket's.
    pause_buf: VecDeque<(NodeId, Bytes, Option<u8>)>,
    /// With `PauseRead::UnicastFirst`: the unicast socket's receive buffer while paused, read
    /// before `pause_buf` on waking.
    pause_buf_unicast: VecDeque<(NodeId, Bytes, Option<u8>)>,
    /// Bandwidth model: when the uplink is next free, and departure times of queued datagrams
    /// (bounded by `NetConfig::uplink_queue_datagrams`).
    uplink_free_at: Time,
    uplink_queue: VecDeque<Time>,
    first_view: Option<u64>,
    /// Members named by the last view installed (for [`Workload::after_formation`]).
    view_size: usize,
    /// `(sender, msg)` delivered here (for the quiescence condition).
    delivered: HashSet<(NodeId, u64)>,
    /// Never scheduled to leave or crash: held to deliver everything.
    planned_survivor: bool,
    /// `planned_survivor` as scheduled: with [`SimConfig::heal`] such a host that was expelled
    /// joins again and is held to deliver everything from then on.
    meant_to_stay: bool,
    /// After a rejoin: the sender's message numbers below this were submitted in the group it
    /// was expelled from; the ones that had not completed are not its to deliver any more.
    msgs_before_rejoin: u64,
    sender: Option<SenderState>,
    rec: HostRecord,
}

impl Host {
    fn in_group(&self) -> bool {
        matches!(self.state, HostState::Running(_) | HostState::Paused { .. })
    }

    fn engine(&self) -> Option<&dyn Engine> {
        match &self.state {
            HostState::Running(e) | HostState::Paused { engine: e, .. } => {
                Some(e.as_ref() as &dyn Engine)
            }
            _ => None,
        }
    }
}

/// The shared medium ([`crate::NetConfig::shared_medium`]): each host's queue of datagrams
/// waiting for it, the datagram being sent, and whose turn comes next.
#[derive(Default)]
struct Medium {
    /// Per host (sized on first use), datagrams waiting, oldest first.
    queues: Vec<VecDeque<(Destination, Bytes)>>,
    /// The datagram being sent: its sender, destination and bytes.
    on_air: Option<(usize, Destination, Bytes)>,
    /// The host whose queue is looked at first for the next transmission.
    turn: usize,
}

/// Per message, what the quiescence condition needs.
#[derive(Default)]
struct MsgTrack {
    /// Highest view any host delivered it in.
    max_view: u64,
    /// Planned survivors that delivered it.
    survivor_deliveries: u32,
}

pub(crate) struct World<'a> {
    cfg: &'a SimConfig,
    /// What the run's engine declares (with the run's settings).
    guarantees: Guarantees,
    now: Time,
    queue: BinaryHeap<Scheduled>,
    order: u64,
    rng: ChaCha8Rng,
    /// One random stream per perturbation ([`crate::config::perturbation_seed`]).
    perturb_rngs: Vec<ChaCha8Rng>,
    hosts: Vec<Host>,
    /// The one transmit buffer, reused for every `poll_transmit`.
    buf: Vec<u8>,
    out: Vec<(Destination, Bytes)>,
    evs: Vec<Event>,
    submissions: Vec<Submission>,
    tracks: HashMap<(NodeId, u64), MsgTrack>,
    net: NetStats,
    /// The shared medium, when the network has one.
    medium: Medium,
    livelock: Option<String>,
    /// Set while a host that woke reads its backlog with the clock of its stop
    /// ([`crate::Faults::pause_stale_clock`]).
    stale_clock: Option<Time>,
    workload_errors: Vec<String>,
    workload_started: bool,
    /// When the workload started (its configured start until then).
    workload_start: Time,
    /// With [`Workload::after_formation`]: when every initial member was first seen in a view
    /// of all.
    views_formed_at: Option<Time>,
    churn_pending: usize,
    heal_time: Time,
    deadline: Time,
    same_time_steps: u64,
    stop: bool,
    quiesced: bool,
    /// Records of hosts that were expelled and joined again ([`SimConfig::heal`]): each
    /// incarnation of a host keeps its own record.
    past: Vec<HostRecord>,
    /// Records of hosts' incarnations in a group that merged into another
    /// ([`Record::merged_away`]).
    merged_away: Vec<HostRecord>,
    /// Per host, its areas from its own outwards (with a topology).
    area_chains: Vec<Vec<usize>>,
}

impl<'a> World<'a> {
    pub(crate) fn new(cfg: &'a SimConfig) -> Self {
        let n = cfg.host_count();
        // A run is held to what its QoS level promises (RMP's Fig. 3.2), not more.
        let guarantees = cfg.engine.guarantees().at_qos(cfg.workload.qos);
        // Engines where only the creator may send: the workload sends from host 0 only.
        let creator_only = guarantees.senders == Senders::Creator;
        let leaving: HashSet<NodeId> = cfg
            .churn
            .iter()
            .filter(|c| c.kind == ChurnKind::Leave)
            .map(|c| c.node)
            .chain(cfg.faults.crashes.iter().map(|c| c.host))
            .collect();
        let hosts = (0..n)
            .map(|i| {
                let id = NodeId(i as u32);
                let is_sender = if creator_only {
                    i == 0
                } else {
                    cfg.workload.senders.contains(&id)
                };
                let total = if is_sender {
                    cfg.workload.messages_per_sender
                } else {
                    0
                };
                Host {
                    state: HostState::NotStarted,
                    timer_gen: 0,
                    armed: None,
                    rx_inflight: 0,
                    cpu_free_at: Time::ZERO,
                    pause_buf: VecDeque::new(),
                    pause_buf_unicast: VecDeque::new(),
                    uplink_free_at: Time::ZERO,
                    uplink_queue: VecDeque::new(),
                    first_view: None,
                    view_size: 0,
                    delivered: HashSet::new(),
                    planned_survivor: !leaving.contains(&id),
                    meant_to_stay: !leaving.contains(&id),
                    msgs_before_rejoin: 0,
                    sender: is_sender.then(|| SenderState {
                        total,
                        next: 0,
                        due: 0,
                        in_flight: HashSet::new(),
                        retry_pending: false,
                        stopped: false,
                    }),
                    rec: HostRecord {
                        id,
                        messages_planned: total,
                        ..HostRecord::default()
                    },
                }
            })
            .collect();
        World {
            cfg,
            guarantees,
            now: Time::ZERO,
            queue: BinaryHeap::new(),
            order: 0,
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            perturb_rngs: (cfg.faults.perturbations.iter())
                .map(|p| ChaCha8Rng::seed_from_u64(perturbation_seed(cfg.seed, p.host)))
                .collect(),
            hosts,
            buf: Vec::with_capacity(65_536),
            out: Vec::new(),
            evs: Vec::new(),
            submissions: Vec::new(),
            tracks: HashMap::new(),
            net: NetStats::default(),
            medium: Medium::default(),
            livelock: None,
            stale_clock: None,
            workload_errors: Vec::new(),
            workload_started: false,
            workload_start: cfg.workload.start,
            views_formed_at: None,
            churn_pending: cfg.churn.len(),
            heal_time: Time::ZERO,
            deadline: Time::ZERO,
            same_time_steps: 0,
            stop: false,
            quiesced: false,
            past: Vec::new(),
            merged_away: Vec::new(),
            area_chains: (0..n)
                .map(|i| {
                    (cfg.net.topology.as_ref())
                        .map(|t| t.chain(NodeId(i as u32)))
                        .unwrap_or_default()
                })
                .collect(),
        }
    }

    fn schedule(&mut self, at: Time, item: Item) {
        self.order += 1;
        self.queue.push(Scheduled {
            at,
            order: self.order,
            item,
        });
    }

    fn fail(&mut self, what: String) {
        if self.livelock.is_none() {
            self.livelock = Some(format!("at {} ns: {what}", self.now.0));
        }
    }

    /// Runs the whole simulation and returns its record.
    pub(crate) fn run(mut self) -> Record {
        self.schedule_initial();
        self.main_loop();
        self.finish()
    }

    fn schedule_initial(&mut self) {
        let cfg = self.cfg;
        let mut heal = cfg.workload.start;
        for i in 0..cfg.members as usize {
            let at = Time::ZERO + cfg.join_stagger * i as u32;
            // Each of the parallel groups is created by its first host.
            let role = if i % cfg.group_size() == 0 {
                Role::Create
            } else {
                Role::Join
            };
            self.schedule(
                at,
                Item::Start {
                    host: i,
                    role,
                    churn: false,
                },
            );
            heal = heal.max(at);
        }
        self.schedule(cfg.workload.start, Item::WorkloadStart);
        if let Load::OpenLoop { interval } = cfg.workload.load {
            // The last message of an open-loop sender is due here: quiescence starts no earlier.
            let n = cfg.workload.messages_per_sender.saturating_sub(1);
            let span = Duration::from_nanos((interval.as_nanos() as u64).saturating_mul(n));
            heal = heal.max(cfg.workload.start + span);
        }
        for c in &cfg.churn {
            let host = c.node.0 as usize;
            let item = match c.kind {
                ChurnKind::Join => Item::Start {
                    host,
                    role: Role::Join,
                    churn: true,
                },
                ChurnKind::Leave => Item::Leave { host },
            };
            self.schedule(c.at, item);
            heal = heal.max(c.at);
        }
        for p in &cfg.faults.partitions {
            heal = heal.max(p.end);
        }
        for p in &cfg.faults.pauses {
            self.schedule(
                p.at,
                Item::Pause {
                    host: p.host.0 as usize,
                    duration: p.duration,
                },
            );
            heal = heal.max(p.at + p.duration);
        }
        for (index, p) in cfg.faults.perturbations.iter().enumerate() {
            if p.start < p.end {
                self.schedule(p.start, Item::Perturb { index });
                // The last draw comes less than a period before the end.
                let last = p.start
                    + p.period * ((p.end.0 - p.start.0 - 1) / p.period.as_nanos() as u64) as u32;
                heal = heal.max(last + p.sleep);
            }
        }
        for c in &cfg.faults.crashes {
            self.schedule(
                c.at,
                Item::Crash {
                    host: c.host.0 as usize,
                },
            );
            heal = heal.max(c.at);
        }
        self.heal_time = heal;
        self.deadline = heal + cfg.limits.quiescence_timeout;
        self.schedule(heal, Item::Check);
        if cfg.sample_counters.is_some() {
            self.schedule(cfg.workload.start, Item::Sample);
        }
    }

    fn main_loop(&mut self) {
        let cfg = self.cfg;
        let limits = &cfg.limits;
        while let Some(s) = self.queue.pop() {
            if s.at > self.deadline {
                self.now = self.deadline;
                break;
            }
            if s.at == self.now {
                self.same_time_steps += 1;
                if self.same_time_steps > limits.max_steps_same_time {
                    self.fail(format!(
                        "more than {} steps without virtual time moving",
                        limits.max_steps_same_time
                    ));
                    break;
                }
            } else {
                self.same_time_steps = 0;
            }
            self.now = s.at;
            self.net.steps += 1;
            if self.net.steps > limits.max_steps {
                self.fail(format!("more than {} steps in one run", limits.max_steps));
                break;
            }
            self.handle(s.item);
            if self.queue.len() > limits.max_queue_len {
                self.fail(format!(
                    "more than {} items scheduled at once",
                    limits.max_queue_len
                ));
            }
            if self.livelock.is_some() || self.stop {
                break;
            }
        }
    }

    fn handle(&mut self, item: Item) {
        let now = self.now;
        match item {
            Item::Start { host, role, churn } => {
                if churn {
                    self.churn_pending -= 1;
                }
                if matches!(self.hosts[host].state, HostState::NotStarted) {
                    let id = NodeId(host as u32);
                    let cfg = self.cfg;
                    let entry = match role {
                        Role::Client => Entry::Client,
                        _ if cfg.join_or_create => Entry::JoinOrCreate,
                        Role::Create => Entry::Create,
                        Role::Join => Entry::Join { give_up: false },
                    };
                    // Formation heals with join-or-create only, and only hosts never meant to
                    // leave or crash (a host that is to leave stays out once expelled). With
                    // fixed roles, an expelled host joins again as before ([`World::rejoin`]),
                    // and the group's traffic is the engines' alone.
                    let heal = cfg.heal && cfg.join_or_create && self.hosts[host].meant_to_stay;
                    let engine = Box::new(Formation::new(
                        FormationConfig {
                            group: cfg.group.wrapping_add(cfg.group_of(host) as u32),
                            me: id,
                            engine: cfg.engine.clone(),
                            entry,
                            join_timeout: cfg.join_timeout,
                            heal: heal.then_some(cfg.heal_interval),
                            engine_datagram_bytes: MAX_DATAGRAM_BYTES,
                            path_bytes: MAX_DATAGRAM_BYTES as u16,
                            seed: engine_seed(cfg.seed, id),
                            address_exchange: cfg.join_or_create,
                        },
                        now,
                    ));
                    let h = &mut self.hosts[host];
                    h.rec.guarantees = Some(engine.guarantees().at_qos(self.cfg.workload.qos));
                    h.state = HostState::Running(engine);
                    h.rec.started_at = Some(now);
                    self.flush(host);
                    self.pump_sender(host);
                }
            }
            Item::Arrive {
                to,
                from,
                data,
                ttl,
                unicast,
            } => {
                if let Some(cost) = self.cfg.net.host_cost {
                    // One datagram at a time through the processor; it stays in the receive
                    // buffer (rx_inflight) until done.
                    let h = &mut self.hosts[to];
                    let done = h.cpu_free_at.max(now) + cost.of(data.len());
                    h.cpu_free_at = done;
                    self.schedule(
                        done,
                        Item::Processed {
                            to,
                            from,
                            data,
                            ttl,
                            unicast,
                        },
                    );
                    return;
                }
                self.arrive(to, from, data, ttl, unicast);
            }
            Item::Processed {
                to,
                from,
                data,
                ttl,
                unicast,
            } => self.arrive(to, from, data, ttl, unicast),
            Item::Timer { host, gen } => {
                let h = &mut self.hosts[host];
                if h.timer_gen != gen {
                    return;
                }
                h.armed = None;
                if let HostState::Running(engine) = &mut h.state {
                    engine.handle_timeout(now);
                    self.flush(host);
                    self.pump_sender(host);
                }
            }
            Item::RateTick { host } => {
                let interval = match self.cfg.workload.load {
                    Load::OpenLoop { interval } => interval,
                    Load::ClosedLoop { .. } => return,
                };
                let Some(s) = self.hosts[host].sender.as_mut() else {
                    return;
                };
                s.due = (s.due + 1).min(s.total);
                if s.due < s.total && !s.stopped {
                    self.schedule(now + interval, Item::RateTick { host });
                }
                self.pump_sender(host);
            }
            Item::Retry { host } => {
                if let Some(s) = self.hosts[host].sender.as_mut() {
                    s.retry_pending = false;
                }
                self.pump_sender(host);
            }
            Item::WorkloadStart => {
                if self.cfg.workload.after_formation && !self.formed() {
                    let next = now + self.cfg.limits.check_interval;
                    self.schedule(next, Item::WorkloadStart);
                    return;
                }
                self.start_workload_at(now);
                for h in &mut self.hosts {
                    if let Some(e) = h.engine() {
                        h.rec.counters_at_workload_start = e.counters().clone();
                    }
                }
                for host in 0..self.hosts.len() {
                    if self.hosts[host].sender.is_none() {
                        continue;
                    }
                    if let Load::OpenLoop { .. } = self.cfg.workload.load {
                        self.schedule(now, Item::RateTick { host });
                    } else {
                        self.pump_sender(host);
                    }
                }
            }
            Item::Leave { host } => self.leave(host),
            Item::Pause { host, duration } => self.pause(host, duration),
            Item::Perturb { index } => {
                let p = &self.cfg.faults.perturbations[index];
                // The next draw is scheduled before this one's wake-up, so that at the instant
                // a sleep ends, a new sleep drawn then extends it (the host does not run in
                // between).
                let next = now + p.period;
                if next < p.end {
                    self.schedule(next, Item::Perturb { index });
                }
                if self.perturb_rngs[index].gen::<f64>() < p.probability {
                    self.pause(p.host.0 as usize, p.sleep);
                }
            }
            Item::Sample => {
                for h in &mut self.hosts {
                    if let Some(e) = h.engine() {
                        let c = e.counters().clone();
                        h.rec.counter_samples.push((now, c));
                    }
                }
                if let Some(every) = self.cfg.sample_counters {
                    if now < self.heal_time {
                        self.schedule(now + every, Item::Sample);
                    }
                }
            }
            Item::Wake { host } => self.wake(host),
            Item::Crash { host } => {
                let h = &mut self.hosts[host];
                if let Some(e) = h.engine() {
                    h.rec.counters = e.counters().clone();
                    h.state = HostState::Crashed;
                    h.rec.crashed_at = Some(now);
                    // A crash ends a sleep.
                    if let Some(last) = h.rec.sleeps.last_mut() {
                        last.1 = last.1.min(now.max(last.0));
                    }
                    h.pause_buf.clear();
                    h.pause_buf_unicast.clear();
                    h.timer_gen += 1;
                    h.armed = None;
                    if let Some(s) = h.sender.as_mut() {
                        s.stopped = true;
                    }
                }
            }
            Item::Check => {
                if self.cfg.limits.run_to_deadline {
                    // Never quiescent: the run goes on to its deadline.
                } else if self.quiescent() {
                    self.quiesced = true;
                    self.stop = true;
                } else {
                    let next = now + self.cfg.limits.check_interval;
                    self.schedule(next, Item::Check);
                }
            }
            Item::MediumDone => {
                if let Some((host, dest, data)) = self.medium.on_air.take() {
                    self.fan_out(host, dest, now, data);
                }
                self.medium_next();
            }
        }
    }

    fn leave(&mut self, host: usize) {
        let now = self.now;
        let h = &mut self.hosts[host];
        let retry_at = match &h.state {
            HostState::Paused { until, .. } => Some(*until),
            HostState::NotStarted => Some(now + LEAVE_RETRY),
            HostState::Running(_) if h.first_view.is_none() => Some(now + LEAVE_RETRY),
            HostState::Running(_) => None,
            HostState::Left | HostState::Crashed => {
                self.churn_pending -= 1;
                return;
            }
        };
        if let Some(at) = retry_at {
            self.schedule(at.max(now), Item::Leave { host });
            return;
        }
        self.churn_pending -= 1;
        h.rec.leave_requested_at = Some(now);
        if let Some(s) = h.sender.as_mut() {
            s.stopped = true;
        }
        if let HostState::Running(engine) = &mut h.state {
            engine.leave(now);
        }
        self.flush(host);
    }

    /// The time the engines are handed: the world's, or while a host that woke reads its
    /// backlog with a stale clock ([`crate::Faults::pause_stale_clock`]), the time it stopped.
    fn engine_now(&self) -> Time {
        self.stale_clock.unwrap_or(self.now)
    }

    /// Pauses a running host for `duration`, or makes a paused host's pause last at least
    /// that long from now.
    fn pause(&mut self, host: usize, duration: Duration) {
        let now = self.now;
        let until = now + duration;
        let h = &mut self.hosts[host];
        let state = std::mem::replace(&mut h.state, HostState::NotStarted);
        h.state = match state {
            HostState::Running(engine) => {
                h.rec.sleeps.push((now, until));
                HostState::Paused { engine, until }
            }
            HostState::Paused { engine, until: u } => {
                if let Some(last) = h.rec.sleeps.last_mut() {
                    last.1 = last.1.max(until);
                }
                HostState::Paused {
                    engine,
                    until: u.max(until),
                }
            }
            other => {
                h.state = other;
                return;
            }
        };
        // Timers that fire while paused are ignored; wake re-arms.
        h.timer_gen += 1;
        h.armed = None;
        self.schedule(until, Item::Wake { host });
    }

    fn wake(&mut self, host: usize) {
        let now = self.now;
        let h = &mut self.hosts[host];
        let state = std::mem::replace(&mut h.state, HostState::NotStarted);
        h.state = match state {
            HostState::Paused { engine, until } if until <= now => HostState::Running(engine),
            other => {
                h.state = other;
                return;
            }
        };
        if self.cfg.faults.pause_stale_clock {
            self.stale_clock = self.hosts[host].rec.sleeps.last().map(|s| s.0);
        }
        // Process what piled up, in arrival order (or the unicast socket's first); the buffers
        // are bounded, so is this loop.
        loop {
            let h = &mut self.hosts[host];
            let Some((from, data, ttl)) = h
                .pause_buf_unicast
                .pop_front()
                .or_else(|| h.pause_buf.pop_front())
            else {
                break;
            };
            if let HostState::Running(_) = self.hosts[host].state {
                self.input_datagram(host, from, &data, ttl);
            } else {
                self.net.drops_unroutable += 1;
            }
            if self.livelock.is_some() {
                self.stale_clock = None;
                return;
            }
        }
        self.stale_clock = None;
        self.flush(host);
        self.pump_sender(host);
    }

    /// A datagram copy reaches `to` (after its processor, with a host cost): its engine takes
    /// it, a paused host buffers it (bounded), a host that is not there drops it.
    fn arrive(&mut self, to: usize, from: NodeId, data: Bytes, ttl: Option<u8>, unicast: bool) {
        self.hosts[to].rx_inflight -= 1;
        let cap = self.cfg.faults.pause_buffer_datagrams;
        let running = matches!(self.hosts[to].state, HostState::Running(_));
        let paused = matches!(self.hosts[to].state, HostState::Paused { .. });
        match (running, paused) {
            (true, _) => self.input_datagram(to, from, &data, ttl),
            (_, true) => {
                let h = &mut self.hosts[to];
                let buf = match self.cfg.faults.pause_read {
                    PauseRead::UnicastFirst if unicast => &mut h.pause_buf_unicast,
                    _ => &mut h.pause_buf,
                };
                if buf.len() < cap {
                    buf.push_back((from, data, ttl));
                } else {
                    self.net.drops_pause_overflow += 1;
                }
            }
            _ => self.net.drops_unroutable += 1,
        }
    }

    fn input_datagram(&mut self, host: usize, from: NodeId, data: &[u8], ttl: Option<u8>) {
        let now = self.engine_now();
        if let HostState::Running(engine) = &mut self.hosts[host].state {
            self.net.copies_delivered += 1;
            match ttl {
                Some(_) => engine.handle_datagram_with_ttl(now, from, data, ttl),
                None => engine.handle_datagram(now, from, data),
            }
            self.flush(host);
            self.pump_sender(host);
        }
    }

    /// Drains what an engine wants done after an input, then re-arms its timer.
    fn flush(&mut self, host: usize) {
        let now = self.now;
        let engine_now = self.engine_now();
        let cfg = self.cfg;
        let limits = &cfg.limits;
        let mut left = false;
        let mut rounds = 0;
        loop {
            rounds += 1;
            if rounds > MAX_DRAIN_ROUNDS {
                self.fail(format!(
                    "host {host}: more than {MAX_DRAIN_ROUNDS} transmit/event rounds after one input"
                ));
                return;
            }
            let HostState::Running(engine) = &mut self.hosts[host].state else {
                return;
            };
            while let Some(t) = engine.poll_transmit(engine_now, &mut self.buf) {
                if self.buf.is_empty() {
                    // An empty datagram is still one datagram (no chunk of an empty buffer).
                    self.out.push((t.destination, Bytes::new()));
                }
                for d in t.datagrams(&self.buf) {
                    self.out.push((t.destination, Bytes::copy_from_slice(d)));
                }
                if self.out.len() > limits.max_transmits_per_step {
                    let n = limits.max_transmits_per_step;
                    self.out.clear();
                    self.fail(format!(
                        "host {host}: more than {n} datagrams in answer to one input"
                    ));
                    return;
                }
            }
            while let Some(ev) = engine.poll_event() {
                self.evs.push(ev);
                if self.evs.len() > limits.max_events_per_step {
                    let n = limits.max_events_per_step;
                    self.evs.clear();
                    self.fail(format!(
                        "host {host}: more than {n} events in answer to one input"
                    ));
                    return;
                }
            }
            if self.out.is_empty() && self.evs.is_empty() {
                break;
            }
            let mut out = std::mem::take(&mut self.out);
            for (dest, data) in out.drain(..) {
                self.route(host, dest, data);
            }
            self.out = out;
            let mut evs = std::mem::take(&mut self.evs);
            for ev in evs.drain(..) {
                left |= self.on_event(host, ev);
            }
            self.evs = evs;
        }
        // What formation did: a rejoin begins a new record of the host.
        let mut rejoined = None;
        if let HostState::Running(engine) = &mut self.hosts[host].state {
            while let Some(n) = engine.poll_notice() {
                if let Notice::Rejoined(why) = n {
                    rejoined = Some(why);
                }
            }
        }
        if let Some(why) = rejoined {
            self.rejoined(host, why);
            if left {
                return self.flush(host);
            }
        }
        if left && self.rejoin(host) {
            return self.flush(host);
        }
        let h = &mut self.hosts[host];
        if left {
            if let Some(e) = h.engine() {
                h.rec.counters = e.counters().clone();
            }
            h.state = HostState::Left;
            h.timer_gen += 1;
            h.armed = None;
            return;
        }
        let HostState::Running(engine) = &h.state else {
            return;
        };
        match engine.poll_timeout() {
            Some(t) => {
                let t = t.max(now);
                if h.armed != Some(t) {
                    h.timer_gen += 1;
                    h.armed = Some(t);
                    let gen = h.timer_gen;
                    self.schedule(t, Item::Timer { host, gen });
                }
            }
            None => {
                if h.armed.take().is_some() {
                    h.timer_gen += 1;
                }
            }
        }
    }

    /// With [`SimConfig::heal`] and fixed roles, a host that was expelled although it was never
    /// meant to leave joins the group again as a new member. Returns whether it did.
    fn rejoin(&mut self, host: usize) -> bool {
        let now = self.now;
        let h = &mut self.hosts[host];
        if !self.cfg.heal || self.cfg.join_or_create || !h.meant_to_stay || !h.rec.expelled() {
            return false;
        }
        let HostState::Running(engine) = &mut h.state else {
            return false;
        };
        if engine.rejoin(now, None).is_err() {
            return false;
        }
        self.rejoined(host, Rejoin::Expelled { incarnation: 0 });
        true
    }

    /// With [`SimConfig::heal`], formation made a host that was expelled (although it was never
    /// meant to leave) or whose group found a larger one join again as a new member, as
    /// `rmcast member` does: its old incarnation's record is kept apart and a new one begins.
    fn rejoined(&mut self, host: usize, why: Rejoin) {
        let now = self.now;
        let h = &mut self.hosts[host];
        // What it delivered in the group it left no longer counts towards quiescence (an
        // expulsion already took it off).
        if h.planned_survivor {
            h.planned_survivor = false;
            for k in &h.delivered {
                if let Some(t) = self.tracks.get_mut(k) {
                    t.survivor_deliveries -= 1;
                }
            }
        }
        let fresh = HostRecord {
            id: h.rec.id,
            started_at: Some(now),
            messages_planned: h.rec.messages_planned,
            // Counters go on in the engine: the new record carries them, the old one none.
            counters_at_workload_start: h.rec.counters_at_workload_start.clone(),
            guarantees: h.rec.guarantees,
            ..HostRecord::default()
        };
        let mut old = std::mem::replace(&mut h.rec, fresh);
        old.counters = old.counters_at_workload_start.clone();
        old.final_state = match why {
            Rejoin::Expelled { .. } => format!("expelled; joined again at {} ns", now.0),
            Rejoin::Merge { into } => format!("merged into the group of {into} at {} ns", now.0),
        };
        match why {
            Rejoin::Expelled { .. } => self.past.push(old),
            Rejoin::Merge { .. } => self.merged_away.push(old),
        }
        h.planned_survivor = true;
        h.delivered.clear();
        h.first_view = None;
        if let Some(s) = h.sender.as_mut() {
            h.msgs_before_rejoin = self
                .submissions
                .iter()
                .filter(|x| x.sender.0 as usize == host)
                .map(|x| x.msg + 1)
                .max()
                .unwrap_or(0);
            s.in_flight.clear();
            s.retry_pending = false;
            s.stopped = false;
        }
    }

    /// Records one engine event; returns whether the host is out of the group ([`Event::Left`] or
    /// [`Recovery::Expelled`]).
    // The delivery's set insertion is an effect: it stays in the arm, not in a guard.
    #[allow(clippy::collapsible_match)]
    fn on_event(&mut self, host: usize, ev: Event) -> bool {
        let at = self.now;
        let h = &mut self.hosts[host];
        match &ev {
            Event::Deliver(d) => {
                if h.delivered.insert((d.sender, d.msg)) {
                    let t = self.tracks.entry((d.sender, d.msg)).or_default();
                    t.max_view = t.max_view.max(d.view);
                    if h.planned_survivor {
                        t.survivor_deliveries += 1;
                    }
                }
            }
            Event::View(v) => {
                h.first_view.get_or_insert(v.id);
                h.view_size = v.members.len();
            }
            Event::SendComplete { msg } => {
                if let Some(s) = h.sender.as_mut() {
                    s.in_flight.remove(msg);
                }
            }
            Event::Recovery(Recovery::Expelled { .. }) => {
                // The group went on without this host: it is no longer held to deliver
                // anything, and what it delivered no longer counts towards quiescence.
                if h.planned_survivor {
                    h.planned_survivor = false;
                    for k in &h.delivered {
                        if let Some(t) = self.tracks.get_mut(k) {
                            t.survivor_deliveries -= 1;
                        }
                    }
                }
                if let Some(s) = h.sender.as_mut() {
                    s.stopped = true;
                }
            }
            // Losses, replies, locks, forwards, leaves, other recovery events, and whatever
            // `Event` gains later: nothing the world tracks.
            _ => {}
        }
        let left = ev.is_terminal();
        h.rec.events.push(Recorded {
            at,
            event: ev.digest(),
        });
        left
    }

    /// How long a datagram of `len` bytes occupies an uplink or the shared medium.
    fn transmission_time(&self, len: usize, bps: u64) -> Duration {
        let bits = (len + self.cfg.net.frame_overhead_bytes) as u128 * 8;
        Duration::from_nanos((bits * 1_000_000_000).div_ceil(bps as u128) as u64)
    }

    /// Puts one datagram on the network: the sender's uplink (or the shared medium), then one
    /// copy per receiver.
    fn route(&mut self, host: usize, dest: Destination, data: Bytes) {
        let now = self.now;
        self.net.transmitted += 1;
        if data.len() > MAX_DATAGRAM_BYTES {
            // Carried all the same (the model has no MTU), but counted: a path of this size
            // would not take it.
            self.net.oversized += 1;
        }
        let depart = match self.cfg.net.bandwidth_bps {
            None => now,
            Some(_) if self.cfg.net.shared_medium => return self.medium_enqueue(host, dest, data),
            Some(bps) => {
                let cap = self.cfg.net.uplink_queue_datagrams;
                let took = self.transmission_time(data.len(), bps);
                let h = &mut self.hosts[host];
                while h.uplink_queue.front().is_some_and(|t| *t <= now) {
                    h.uplink_queue.pop_front();
                }
                if h.uplink_queue.len() >= cap {
                    self.net.drops_uplink_queue += 1;
                    return;
                }
                let done = now.max(h.uplink_free_at) + took;
                h.uplink_free_at = done;
                h.uplink_queue.push_back(done);
                done
            }
        };
        self.fan_out(host, dest, depart, data);
    }

    /// Queues a datagram of `host` for the shared medium (drop-tail: the datagram being sent
    /// counts towards the host's queue), and starts sending if the medium is idle.
    fn medium_enqueue(&mut self, host: usize, dest: Destination, data: Bytes) {
        let cap = self.cfg.net.uplink_queue_datagrams;
        let n = self.hosts.len();
        let m = &mut self.medium;
        if m.queues.len() < n {
            m.queues.resize_with(n, VecDeque::new);
        }
        let sending = m.on_air.as_ref().is_some_and(|(h, ..)| *h == host);
        if m.queues[host].len() + usize::from(sending) >= cap {
            self.net.drops_uplink_queue += 1;
            return;
        }
        m.queues[host].push_back((dest, data));
        if m.on_air.is_none() {
            self.medium_next();
        }
    }

    /// Starts the next transmission on the idle shared medium: the first host with a datagram
    /// waiting, from the one whose turn it is, in host order (each takes one datagram a turn).
    fn medium_next(&mut self) {
        let Some(bps) = self.cfg.net.bandwidth_bps else {
            return;
        };
        let n = self.medium.queues.len();
        for k in 0..n {
            let host = (self.medium.turn + k) % n;
            if let Some((dest, data)) = self.medium.queues[host].pop_front() {
                let done = self.now + self.transmission_time(data.len(), bps);
                self.medium.turn = (host + 1) % n;
                self.medium.on_air = Some((host, dest, data));
                self.schedule(done, Item::MediumDone);
                return;
            }
        }
    }

    /// The copies of a datagram that leaves `host` at `depart`: one per receiver.
    fn fan_out(&mut self, host: usize, dest: Destination, depart: Time, data: Bytes) {
        if self.cfg.net.topology.is_some() {
            return self.fan_out_areas(host, dest, depart, data);
        }
        let from = NodeId(host as u32);
        match dest {
            // Hop counts are not modelled: a scoped multicast reaches the whole group.
            Destination::Group | Destination::Scoped { .. } => {
                let group = self.cfg.group_of(host);
                for to in 0..self.hosts.len() {
                    // Parallel groups share the medium, not their multicasts.
                    if to != host && self.hosts[to].in_group() && self.cfg.group_of(to) == group {
                        self.send_copy(from, to, depart, data.clone(), false);
                    }
                }
            }
            Destination::Peer(id) => {
                let to = id.0 as usize;
                if to < self.hosts.len() && self.hosts[to].in_group() {
                    self.send_copy(from, to, depart, data, true);
                } else {
                    self.net.drops_unroutable += 1;
                }
            }
        }
    }

    /// [`World::fan_out`] through the areas of the topology ([`crate::topology`]): hop counts,
    /// scope, router latencies and losses on router links shared by every copy behind them.
    fn fan_out_areas(&mut self, host: usize, dest: Destination, depart: Time, data: Bytes) {
        let cfg = self.cfg;
        let Some(topo) = cfg.net.topology.as_ref() else {
            return;
        };
        let from = NodeId(host as u32);
        let (targets, ttl0): (Vec<usize>, u8) = match dest {
            Destination::Group => ((0..self.hosts.len()).collect(), topo.initial_ttl),
            Destination::Scoped { ttl } => ((0..self.hosts.len()).collect(), ttl),
            Destination::Peer(id) => {
                let to = id.0 as usize;
                if to >= self.hosts.len() || !self.hosts[to].in_group() {
                    self.net.drops_unroutable += 1;
                    return;
                }
                (vec![to], topo.initial_ttl)
            }
        };
        let chain_from = self.area_chains[host].clone();
        // One draw per router link and datagram, made when a copy first needs it.
        let mut link_lost: Vec<Option<bool>> = vec![None; topo.areas.len()];
        for to in targets {
            if to == host || !self.hosts[to].in_group() {
                continue;
            }
            let crossed = crate::topology::Topology::crossed(&chain_from, &self.area_chains[to]);
            let hops: u32 = crossed.iter().map(|&a| topo.areas[a].hops as u32).sum();
            if hops >= ttl0 as u32 {
                continue;
            }
            let mut lost = false;
            let mut extra = Duration::ZERO;
            for &a in &crossed {
                let area = &topo.areas[a];
                extra += area.latency;
                let l = *link_lost[a]
                    .get_or_insert_with(|| area.loss > 0.0 && self.rng.gen::<f64>() < area.loss);
                lost |= l;
            }
            if let Some(&own) = self.area_chains[to].first() {
                let lan = topo.areas[own].lan_loss;
                lost |= lan > 0.0 && self.rng.gen::<f64>() < lan;
            }
            if lost {
                self.net.drops_loss += 1;
                continue;
            }
            let ttl = Some(ttl0 - hops as u8);
            let unicast = matches!(dest, Destination::Peer(_));
            self.send_copy_ttl(from, to, depart + extra, data.clone(), ttl, unicast);
        }
    }

    fn send_copy(&mut self, from: NodeId, to: usize, depart: Time, data: Bytes, unicast: bool) {
        self.send_copy_ttl(from, to, depart, data, None, unicast)
    }

    fn send_copy_ttl(
        &mut self,
        from: NodeId,
        to: usize,
        depart: Time,
        data: Bytes,
        ttl: Option<u8>,
        unicast: bool,
    ) {
        let dest = NodeId(to as u32);
        if self
            .cfg
            .faults
            .partitions
            .iter()
            .any(|p| p.cuts(depart, from, dest))
        {
            self.net.drops_partition += 1;
            return;
        }
        let p = *self.cfg.net.link(from, dest);
        if p.loss > 0.0 && self.rng.gen::<f64>() < p.loss {
            self.net.drops_loss += 1;
            return;
        }
        let copies = if p.dup > 0.0 && self.rng.gen::<f64>() < p.dup {
            self.net.duplicated += 1;
            2
        } else {
            1
        };
        let jitter = p.jitter.as_nanos() as u64;
        for _ in 0..copies {
            if self.hosts[to].rx_inflight >= self.cfg.net.rx_inflight_datagrams {
                self.net.drops_rx_overflow += 1;
                continue;
            }
            let extra = if jitter > 0 {
                self.rng.gen_range(0..=jitter)
            } else {
                0
            };
            let at = depart + p.latency + Duration::from_nanos(extra);
            self.hosts[to].rx_inflight += 1;
            self.net.copies_sent += 1;
            self.schedule(
                at,
                Item::Arrive {
                    to,
                    from,
                    data: data.clone(),
                    ttl,
                    unicast,
                },
            );
        }
    }

    /// Submits what the workload allows now; drains after each burst (or each message).
    fn pump_sender(&mut self, host: usize) {
        // A host reading its backlog with a stale clock submits once it has read it (its
        // application's sends wait for the I/O loop's next turn).
        if !self.workload_started || self.stale_clock.is_some() {
            return;
        }
        let cfg = self.cfg;
        let w = &cfg.workload;
        let now = self.now;
        let id = NodeId(host as u32);
        // Each round submits at least one message, so this bound is never the binding one.
        let bound = w.messages_per_sender + 1;
        for _ in 0..bound {
            let h = &mut self.hosts[host];
            let Some(s) = h.sender.as_mut() else { return };
            if s.stopped || h.first_view.is_none() {
                return;
            }
            let HostState::Running(engine) = &mut h.state else {
                return;
            };
            let mut submitted = 0u64;
            loop {
                let allowed = s.next < s.total
                    && match w.load {
                        Load::ClosedLoop { in_flight } => s.in_flight.len() < in_flight,
                        Load::OpenLoop { .. } => s.next < s.due,
                    };
                if !allowed {
                    break;
                }
                let payload = Bytes::from(make_payload(id, s.next, w.message_bytes));
                let (len, hash) = (payload.len(), payload_hash(&payload));
                match engine.submit(now, payload, w.qos) {
                    Ok(msg) => {
                        self.submissions.push(Submission {
                            sender: id,
                            counter: s.next,
                            msg,
                            at: now,
                            len,
                            hash,
                        });
                        s.in_flight.insert(msg);
                        s.next += 1;
                        submitted += 1;
                        if !w.burst_submits {
                            break;
                        }
                    }
                    Err(
                        e @ (SendError::WouldBlock | SendError::NotMember | SendError::GroupFailed),
                    ) => {
                        match e {
                            SendError::WouldBlock => self.net.submit_would_block += 1,
                            SendError::NotMember => self.net.submit_not_member += 1,
                            _ => self.net.submit_group_failed += 1,
                        }
                        if !s.retry_pending {
                            s.retry_pending = true;
                            let at = now + w.retry_interval;
                            self.order += 1;
                            self.queue.push(Scheduled {
                                at,
                                order: self.order,
                                item: Item::Retry { host },
                            });
                        }
                        break;
                    }
                    Err(e) => {
                        s.stopped = true;
                        self.workload_errors.push(format!(
                            "host {host}: submit of message {} failed: {e}",
                            s.next
                        ));
                        break;
                    }
                }
            }
            if submitted == 0 {
                return;
            }
            self.flush(host);
            if self.livelock.is_some() {
                return;
            }
        }
    }

    /// Whether the group has formed ([`Workload::after_formation`]): every initial host runs
    /// and its last view names every initial host of its group, or nobody (the txn engine
    /// keeps no membership and names nobody in its views); then formation's tail is over: the network is
    /// quiet ([`World::network_quiet`]), or [`crate::Limits::quiet_timer_horizon`] passed since
    /// the views were complete (an engine with periodic traffic of its own, such as RMTP's
    /// receivers' ACKs, is never quiet; that traffic is the same with or without messages).
    /// Views alone are not enough: the sequencer confirms the joins in its history by a sync
    /// 100 ms after them, and a member's count of deliveries towards its next state report
    /// starts again only then.
    ///
    /// An engine where only the creator sends (RMTP) has receivers that connect on its first
    /// data and install their view only then: for them, running is being in the group.
    fn formed(&mut self) -> bool {
        let size = self.cfg.group_size();
        let listen_only = self.guarantees.senders == Senders::Creator;
        let views = self.hosts[..self.cfg.members as usize].iter().all(|h| {
            matches!(h.state, HostState::Running(_))
                && (listen_only
                    || (h.first_view.is_some() && (h.view_size == 0 || h.view_size == size)))
        });
        if !views {
            return false;
        }
        let since = *self.views_formed_at.get_or_insert(self.now);
        self.now >= since + self.cfg.limits.quiet_timer_horizon || self.network_quiet()
    }

    /// The workload starts now: the counters it is measured from are taken, and the end of an
    /// open-loop sender's messages (when quiescence may start) and the run's deadline move with
    /// a start later than the configured one.
    fn start_workload_at(&mut self, now: Time) {
        self.workload_started = true;
        self.workload_start = now;
        let cfg = self.cfg;
        if let Load::OpenLoop { interval } = cfg.workload.load {
            let n = cfg.workload.messages_per_sender.saturating_sub(1);
            let span = Duration::from_nanos((interval.as_nanos() as u64).saturating_mul(n));
            self.heal_time = self.heal_time.max(now + span);
        }
        self.deadline = self
            .deadline
            .max(self.heal_time + cfg.limits.quiescence_timeout);
    }

    /// Whether the run is done: every change happened, every leave completed, every survivor is
    /// a running member that submitted and completed everything, and every message delivered
    /// anywhere in view `w` is delivered by every survivor whose first view is at most `w`.
    fn quiescent(&self) -> bool {
        if self.churn_pending > 0 || !self.workload_started {
            return false;
        }
        if self.guarantees.delivery != DeliveryPromise::AllOrNothing {
            return self.quiet();
        }
        // Per group (one but with parallel groups): survivors' first views.
        let mut views = vec![Vec::new(); self.cfg.parallel_groups.max(1) as usize];
        for (i, h) in self.hosts.iter().enumerate() {
            if h.rec.leave_requested_at.is_some() {
                if !matches!(h.state, HostState::Left | HostState::Crashed) {
                    return false;
                }
                continue;
            }
            if !h.planned_survivor || h.rec.started_at.is_none() {
                continue;
            }
            let HostState::Running(engine) = &h.state else {
                return false;
            };
            // A member in recovery mode has not settled: it is reset or expelled yet.
            if engine.info().recovering {
                return false;
            }
            let Some(v) = h.first_view else { return false };
            views[self.cfg.group_of(i)].push(v);
            // Crashed members are eventually removed from the view.
            if h.rec.last_view().is_some_and(|v| {
                v.members.iter().any(|m| {
                    self.hosts
                        .get(m.0 as usize)
                        .is_some_and(|x| x.rec.crashed_at.is_some())
                })
            }) {
                return false;
            }
            if let Some(s) = &h.sender {
                if !s.stopped && (s.next < s.total || !s.in_flight.is_empty()) {
                    return false;
                }
            }
        }
        // The members agree on where the group stands: one last view (a member cut off in an
        // older incarnation has not settled yet, it is expelled or rejoins the others' view).
        // Only views that name their members say where a group stands.
        for group in 0..views.len() {
            let mut last = (self.hosts.iter().enumerate())
                .filter(|(i, h)| {
                    self.cfg.group_of(*i) == group
                        && h.planned_survivor
                        && h.rec.started_at.is_some()
                })
                .filter_map(|(_, h)| h.rec.last_view().filter(|v| !v.members.is_empty()))
                .map(|v| (v.id, &v.members));
            if let Some(first) = last.next() {
                if last.any(|v| v != first) {
                    return false;
                }
            }
        }
        for v in &mut views {
            v.sort_unstable();
        }
        let complete = self.tracks.iter().all(|((sender, msg), t)| {
            // A message that only hosts the group went on without delivered, from a sender
            // that is gone too, is nobody's to deliver any more (more than r failed).
            let s = &self.hosts[sender.0 as usize];
            if t.survivor_deliveries == 0 && !s.planned_survivor {
                return true;
            }
            // Nor is a message its sender submitted in a group it was expelled from.
            if t.survivor_deliveries == 0 && msg < &s.msgs_before_rejoin {
                return true;
            }
            let group = &views[self.cfg.group_of(sender.0 as usize)];
            let required = group.partition_point(|v| *v <= t.max_view);
            t.survivor_deliveries as usize >= required
        });
        complete
            && self.submissions.iter().all(|s| {
                let h = &self.hosts[s.sender.0 as usize];
                !h.planned_survivor
                    || s.msg < h.msgs_before_rejoin
                    || self.tracks.contains_key(&(s.sender, s.msg))
            })
    }

    /// The end-of-run rule of a probabilistic engine, which does not promise that every
    /// survivor delivers everything: every leave completed, every sender that stayed submitted
    /// all its messages, no datagram is in flight or waiting in a paused host's buffer, and no
    /// running engine has a timer due within [`crate::Limits::quiet_timer_horizon`].
    fn quiet(&self) -> bool {
        self.network_quiet()
            && self.hosts.iter().all(|h| {
                !h.sender.as_ref().is_some_and(|s| {
                    !s.stopped
                        && h.planned_survivor
                        && h.rec.started_at.is_some()
                        && s.next < s.total
                })
            })
    }

    /// No datagram in flight or waiting in a paused host's buffer, no host paused or leaving,
    /// and no running engine with a timer due within [`crate::Limits::quiet_timer_horizon`]:
    /// nothing will happen unless the application acts.
    fn network_quiet(&self) -> bool {
        let horizon = self.now + self.cfg.limits.quiet_timer_horizon;
        // A datagram on the shared medium is in flight too (those queued for it follow it).
        if self.medium.on_air.is_some() {
            return false;
        }
        self.hosts.iter().all(|h| {
            if h.rec.leave_requested_at.is_some()
                && !matches!(h.state, HostState::Left | HostState::Crashed)
            {
                return false;
            }
            if h.rx_inflight > 0 || !h.pause_buf.is_empty() || !h.pause_buf_unicast.is_empty() {
                return false;
            }
            if matches!(h.state, HostState::Paused { .. }) {
                return false;
            }
            match &h.state {
                HostState::Running(e) => e.poll_timeout().is_none_or(|t| t > horizon),
                _ => true,
            }
        })
    }

    fn finish(mut self) -> Record {
        if self.cfg.workload.after_formation && !self.workload_started {
            self.workload_errors.push(format!(
                "the group never formed (every initial member in one view of all), so the \
                 workload never started, by {}",
                crate::checkers::ms(self.now)
            ));
        }
        let hosts = self
            .hosts
            .into_iter()
            .map(|mut h| {
                if let Some((c, d)) = h.engine().map(|e| (e.counters().clone(), e.describe())) {
                    h.rec.counters = c;
                    h.rec.final_state = d;
                }
                h.rec
            })
            // Host `i`'s current record stays at index `i`; earlier incarnations follow.
            .chain(self.past)
            .collect();
        Record {
            seed: self.cfg.seed,
            guarantees: self.guarantees,
            hosts,
            submissions: self.submissions,
            workload_start: self.workload_start,
            heal_time: self.heal_time,
            end_time: self.now,
            quiesced: self.quiesced,
            livelock: self.livelock,
            workload_errors: self.workload_errors,
            net: self.net,
            merged_away: self.merged_away,
        }
    }
}
