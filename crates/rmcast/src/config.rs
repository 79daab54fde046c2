//! Configuration of nodes and groups. Every field has a default that works on a first run and
//! keeps traffic on this host (DESIGN sections 3 and 8).

use rmcast_proto::common::{group_id, multicast_endpoint};
use rmcast_proto::sequencer::{self, Sequencer};
use rmcast_proto::{Engine, NodeId, Qos, Time};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

/// Default largest datagram an engine writes: an Ethernet MTU (1500) less the IPv4 (20) and
/// UDP (8) headers, so that a first run never relies on IP fragmentation.
pub const DEFAULT_MAX_DATAGRAM_BYTES: usize = 1472;

/// Largest UDP payload over IPv4. The loopback interface has an MTU of 65536, so a group whose
/// members all live on one host may use datagrams up to this size.
pub const MAX_DATAGRAM_BYTES: usize = rmcast_proto::wire::MAX_DATAGRAM_LEN;

/// Configuration of a [`crate::Node`].
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's identity in its groups; random (and non-zero) when `None`. Must be unique in
    /// every group the node joins.
    pub id: Option<NodeId>,
    /// Interface address: the unicast socket binds to it, multicast is sent and joined on it.
    /// The default, 127.0.0.1, keeps all traffic on this host.
    pub interface: Ipv4Addr,
    /// Port of the unicast socket; 0 picks a free one. Unicast-only groups need a known port so
    /// that peers can list this node.
    pub port: u16,
    /// Multicast time-to-live. 0 keeps multicast on this host; raise it to reach other hosts.
    pub multicast_ttl: u32,
    /// Requested `SO_RCVBUF` and `SO_SNDBUF` of every socket, in bytes. A large receive buffer
    /// absorbs bursts that would otherwise be lost and retransmitted.
    pub socket_buffer_bytes: usize,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            id: None,
            interface: Ipv4Addr::LOCALHOST,
            port: 0,
            multicast_ttl: 0,
            socket_buffer_bytes: 4 << 20,
        }
    }
}

/// How [`crate::Node::open_group`] enters a group.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Start a new group with this node as its first member.
    Create,
    /// Join an existing group; fail with [`crate::Error::JoinTimeout`] if nobody admits us
    /// within [`GroupConfig::join_timeout`].
    Join,
    /// Try to join for [`GroupConfig::join_timeout`], then create the group if nobody answered.
    /// Two nodes that both time out at once create two groups: start one member first when it
    /// matters.
    JoinOrCreate,
}

/// Where a group's traffic goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupAddr {
    /// The multicast address and port hashed from the group name (RMP section 3.1).
    FromName,
    /// An explicit multicast address and port.
    Multicast(SocketAddrV4),
    /// No multicast: datagrams for the whole group are sent by unicast to each listed address
    /// (the node's own address may be in the list; it is skipped).
    Unicast(Vec<SocketAddrV4>),
}

/// Which role an engine starts in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum EngineRole {
    /// The engine creates a new group.
    Create,
    /// The engine joins an existing group.
    Join,
}

/// Builds engines of a protocol that [`EngineChoice`] does not name, so that new engines (and
/// test engines) plug into the runtime without changing it.
pub trait EngineFactory: Send + Sync {
    /// Short name of the protocol, as [`crate::GroupSender::engine_kind`] reports it.
    fn kind(&self) -> &str;
    /// Resilience degree the engines promise, as reported in [`crate::GroupInfo`].
    fn resilience(&self) -> u8 {
        0
    }
    /// Build an engine for group id `group`.
    fn build(
        &self,
        role: EngineRole,
        group: u32,
        me: NodeId,
        max_datagram_bytes: usize,
        now: Time,
    ) -> Box<dyn Engine>;
}

/// How a sequencer group notices a crashed member and rebuilds itself (seed 002 section 5.3).
///
/// The defaults are the engine's ([`sequencer::Config::new`]): a peer silent for 300 ms is
/// probed, four probes of at least 100 ms each go unanswered before it counts as failed (so a
/// crash is noticed about 0.7 s after the member was last heard), and the group then resets
/// itself automatically once a majority of the old view can form the new group.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RecoveryPolicy {
    /// A peer not heard from this long is probed; 0 turns failure detection off (a crashed
    /// member then stalls the group until the application calls
    /// [`crate::GroupSender::reset`]).
    pub alive_interval_ms: u64,
    /// Unanswered probes before the peer counts as failed. More: fewer false suspicions of a
    /// slow or paused member, slower detection of a crash.
    pub alive_retries: u32,
    /// Shortest wait for the answer to one probe (and one round of the reset protocol); it
    /// grows with the measured round-trip time.
    pub alive_timeout_ms: u64,
    /// Reset the group automatically once a failure is found. Off: the group stays in
    /// recovery mode (sends fail with [`crate::Error::MemberFailed`]) until the application
    /// calls [`crate::GroupSender::reset`], as in the paper.
    pub auto_reset: bool,
    /// Smallest group an automatic reset may form, this member included; 0 means a majority
    /// of the view before the failure, so that of two sides of a partition at most one goes on.
    pub min_members: usize,
}

impl Default for RecoveryPolicy {
    fn default() -> Self {
        RecoveryPolicy::of(&sequencer::Config::new(0))
    }
}

impl RecoveryPolicy {
    /// The policy part of a sequencer configuration.
    pub fn of(cfg: &sequencer::Config) -> Self {
        RecoveryPolicy {
            alive_interval_ms: cfg.alive_interval_ms,
            alive_retries: cfg.alive_retries,
            alive_timeout_ms: cfg.alive_timeout_ms,
            auto_reset: cfg.auto_reset,
            min_members: cfg.min_members,
        }
    }

    /// Write the policy into a sequencer configuration.
    pub fn apply(&self, cfg: &mut sequencer::Config) {
        cfg.alive_interval_ms = self.alive_interval_ms;
        cfg.alive_retries = self.alive_retries;
        cfg.alive_timeout_ms = self.alive_timeout_ms;
        cfg.auto_reset = self.auto_reset;
        cfg.min_members = self.min_members;
    }

    /// Check the values the engine would refuse (it asserts, and an assertion on the I/O
    /// thread would take the whole node down).
    pub fn validate(&self) -> Result<(), String> {
        if self.alive_interval_ms > 0 && self.alive_retries == 0 {
            return Err("alive_retries must be at least 1 while failure detection is on".into());
        }
        if self.alive_interval_ms > 0 && self.alive_timeout_ms == 0 {
            return Err("alive_timeout_ms must be at least 1 while failure detection is on".into());
        }
        Ok(())
    }
}

/// The protocol a group runs. Every member of a group must make the same choice.
#[derive(Clone)]
pub enum EngineChoice {
    /// The Amoeba sequencer (seed 002): total order; a send completes once `resilience + 1`
    /// members hold the message.
    Sequencer {
        /// Resilience degree r.
        resilience: u8,
        /// Failure detection and reset policy.
        recovery: RecoveryPolicy,
    },
    /// The sequencer with every parameter given (`group` and `max_datagram_bytes` are still
    /// taken from the [`GroupConfig`]).
    SequencerWith(sequencer::Config),
    /// Any other engine.
    Custom(Arc<dyn EngineFactory>),
}

impl Default for EngineChoice {
    fn default() -> Self {
        EngineChoice::sequencer(0)
    }
}

impl fmt::Debug for EngineChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineChoice::Sequencer {
                resilience,
                recovery,
            } => f
                .debug_struct("Sequencer")
                .field("resilience", resilience)
                .field("recovery", recovery)
                .finish(),
            EngineChoice::SequencerWith(cfg) => f.debug_tuple("SequencerWith").field(cfg).finish(),
            EngineChoice::Custom(factory) => {
                f.debug_tuple("Custom").field(&factory.kind()).finish()
            }
        }
    }
}

impl EngineChoice {
    /// The sequencer with resilience degree `resilience` and the default [`RecoveryPolicy`].
    pub fn sequencer(resilience: u8) -> Self {
        EngineChoice::Sequencer {
            resilience,
            recovery: RecoveryPolicy::default(),
        }
    }

    /// Short name of the protocol ("sequencer", or the factory's name).
    pub fn kind(&self) -> &str {
        match self {
            EngineChoice::Sequencer { .. } | EngineChoice::SequencerWith(_) => "sequencer",
            EngineChoice::Custom(factory) => factory.kind(),
        }
    }

    /// The resilience degree the engine promises.
    pub fn resilience(&self) -> u8 {
        match self {
            EngineChoice::Sequencer { resilience, .. } => *resilience,
            EngineChoice::SequencerWith(cfg) => cfg.resilience,
            EngineChoice::Custom(factory) => factory.resilience(),
        }
    }

    /// Build an engine.
    pub(crate) fn build(
        &self,
        role: EngineRole,
        group: u32,
        me: NodeId,
        max_datagram_bytes: usize,
        now: Time,
    ) -> Box<dyn Engine> {
        let seq_cfg = |mut cfg: sequencer::Config| {
            cfg.group = group;
            cfg.max_datagram_bytes = max_datagram_bytes;
            cfg
        };
        let seq = |cfg: sequencer::Config| -> Box<dyn Engine> {
            match role {
                EngineRole::Create => Box::new(Sequencer::create(cfg, me, now)),
                EngineRole::Join => Box::new(Sequencer::join(cfg, me, now)),
            }
        };
        match self {
            EngineChoice::Sequencer {
                resilience,
                recovery,
            } => {
                let mut cfg = sequencer::Config::new(group);
                cfg.resilience = *resilience;
                recovery.apply(&mut cfg);
                seq(seq_cfg(cfg))
            }
            EngineChoice::SequencerWith(cfg) => seq(seq_cfg(cfg.clone())),
            EngineChoice::Custom(factory) => {
                factory.build(role, group, me, max_datagram_bytes, now)
            }
        }
    }
}

/// Configuration of one group membership, passed to [`crate::Node::open_group`].
#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// The group's name; its hash is the group id in every datagram and, with
    /// [`GroupAddr::FromName`], the multicast address and port.
    pub name: String,
    /// Create, join, or join-or-create.
    pub mode: OpenMode,
    /// The protocol.
    pub engine: EngineChoice,
    /// Where the group's traffic goes.
    pub addr: GroupAddr,
    /// Largest datagram the engine writes, at most [`MAX_DATAGRAM_BYTES`]. Every member of a
    /// group should use the same value.
    pub max_datagram_bytes: usize,
    /// Quality of service of messages sent with [`crate::GroupSender::send`] and friends.
    pub qos: Qos,
    /// How long a join waits to be admitted.
    pub join_timeout: Duration,
    /// How long [`crate::GroupSender::leave`] waits for the leave to complete.
    pub leave_timeout: Duration,
    /// Events (deliveries, views) queued for the application. When the queue is full the
    /// runtime stops taking events from the engine, which then pushes back on senders.
    pub event_queue_capacity: usize,
    /// Messages queued between the application and the engine. When full, `send` blocks and
    /// `try_send` hands the message back.
    pub send_queue_capacity: usize,
    /// Report the completion of every own message as [`crate::GroupEvent::SendComplete`], in
    /// order with the deliveries (off by default: a caller of [`crate::GroupSender::send`] is
    /// told anyway, and the events would only fill the queue). Turn it on to learn which
    /// messages sent with [`crate::GroupSender::try_send`] or
    /// [`crate::GroupSender::send_nowait`] are stable, e.g. to log completions for
    /// [`crate::log::verify_logs`].
    pub completion_events: bool,
}

impl GroupConfig {
    /// Defaults for a group name: join-or-create, sequencer with resilience 0, address hashed
    /// from the name.
    pub fn new(name: impl Into<String>) -> Self {
        GroupConfig {
            name: name.into(),
            mode: OpenMode::JoinOrCreate,
            engine: EngineChoice::default(),
            addr: GroupAddr::FromName,
            max_datagram_bytes: DEFAULT_MAX_DATAGRAM_BYTES,
            qos: Qos::TotallyOrdered,
            join_timeout: Duration::from_secs(2),
            leave_timeout: Duration::from_secs(5),
            event_queue_capacity: 4096,
            send_queue_capacity: 1024,
            completion_events: false,
        }
    }

    /// Set the open mode.
    pub fn mode(mut self, mode: OpenMode) -> Self {
        self.mode = mode;
        self
    }

    /// Set the engine.
    pub fn engine(mut self, engine: EngineChoice) -> Self {
        self.engine = engine;
        self
    }

    /// Set where the traffic goes.
    pub fn addr(mut self, addr: GroupAddr) -> Self {
        self.addr = addr;
        self
    }

    /// The group id carried in every datagram's header.
    pub fn group_id(&self) -> u32 {
        group_id(&self.name)
    }

    /// The multicast endpoint, or `None` in unicast mode.
    pub fn multicast_addr(&self) -> Option<SocketAddrV4> {
        match &self.addr {
            GroupAddr::FromName => {
                let (ip, port) = multicast_endpoint(&self.name);
                Some(SocketAddrV4::new(Ipv4Addr::from(ip), port))
            }
            GroupAddr::Multicast(a) => Some(*a),
            GroupAddr::Unicast(_) => None,
        }
    }

    /// Check what can be checked before any socket is opened.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.max_datagram_bytes < 256 || self.max_datagram_bytes > MAX_DATAGRAM_BYTES {
            return Err(format!(
                "max_datagram_bytes {} is outside 256..={MAX_DATAGRAM_BYTES}",
                self.max_datagram_bytes
            ));
        }
        if self.event_queue_capacity == 0 || self.send_queue_capacity == 0 {
            return Err("queue capacities must be at least 1".into());
        }
        match &self.engine {
            EngineChoice::Sequencer { recovery, .. } => recovery.validate()?,
            EngineChoice::SequencerWith(cfg) => {
                RecoveryPolicy::of(cfg).validate()?;
                // The engine asserts these too; refused here, they cannot panic the I/O thread.
                if cfg.history_capacity_msgs < 16 {
                    return Err("history_capacity_msgs must be at least 16".into());
                }
                if cfg.send_window_msgs == 0 || cfg.max_pending_events == 0 {
                    return Err("send_window_msgs and max_pending_events must be at least 1".into());
                }
            }
            EngineChoice::Custom(_) => {}
        }
        match &self.addr {
            GroupAddr::Multicast(a) if !a.ip().is_multicast() => {
                Err(format!("{a} is not a multicast address"))
            }
            GroupAddr::Unicast(peers) if peers.is_empty() => {
                Err("unicast mode needs at least one peer address".into())
            }
            _ => Ok(()),
        }
    }
}
