//! What an engine is built from: the settings every engine understands ([`EngineSettings`]),
//! what the driver knows ([`EngineParams`]: role, group, node id, datagram size, time and a
//! seed for the engine's own small RNG), the [`EngineFactory`] every engine offers, and why a
//! configuration is refused ([`ConfigError`]).
//!
//! Why apart from the list of engines ([`crate::catalog`]): every engine builds on this
//! vocabulary, and the list names every engine; in one file the two would import each other.

use crate::engine::{Engine, NodeId, Time};
use crate::guarantees::Guarantees;
use std::fmt;

/// How an engine enters its group.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Start a new group with this node as its first member.
    Create,
    /// Join an existing group.
    Join,
    /// Talk to a group from outside it without joining (RMP's multi-RPC for non-members):
    /// [`crate::Engine::request`] only. Engines without non-member senders treat it as
    /// [`Role::Join`]; the runtime refuses it for them.
    Client,
}

/// How a group notices a crashed member and rebuilds itself (Amoeba section 5.3; RMP's
/// reformation). Engines without crash recovery ignore it.
///
/// The defaults: a peer silent for 300 ms is probed, four probes of at least 100 ms each go
/// unanswered before it counts as failed (so a crash is noticed about 0.7 s after the member was
/// last heard; more probes are asked for while the detector observes probe loss or has not yet
/// observed enough probing rounds, see [`crate::common::FailureDetector`]), and the group then resets itself automatically once a majority of the old view
/// can form the new group.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct RecoveryPolicy {
    /// A peer not heard from this long is probed; 0 turns failure detection off (a crashed
    /// member then stalls the group until the application resets it).
    pub alive_interval_ms: u64,
    /// Unanswered probes before the peer counts as failed. More: fewer false suspicions of a
    /// slow or paused member, slower detection of a crash.
    pub alive_retries: u32,
    /// Shortest wait for the answer to one probe (and one round of the reset protocol); it
    /// grows with the measured round-trip time.
    pub alive_timeout_ms: u64,
    /// Reset the group automatically once a failure is found. Off: the group stays in
    /// recovery mode until the application resets it, as in the Amoeba paper.
    pub auto_reset: bool,
    /// Smallest group an automatic reset may form, this member included; 0 means a majority
    /// of the view before the failure, so that of two sides of a partition at most one goes on.
    pub min_members: usize,
}

impl Default for RecoveryPolicy {
    fn default() -> Self {
        RecoveryPolicy {
            alive_interval_ms: 300,
            alive_retries: 4,
            alive_timeout_ms: 100,
            auto_reset: true,
            min_members: 0,
        }
    }
}

impl RecoveryPolicy {
    /// Check the values an engine could not work with.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.alive_interval_ms > 0 && self.alive_retries == 0 {
            return Err(ConfigError::Invalid {
                field: "alive_retries",
                reason: "must be at least 1 while failure detection is on",
            });
        }
        if self.alive_interval_ms > 0 && self.alive_timeout_ms == 0 {
            return Err(ConfigError::Invalid {
                field: "alive_timeout_ms",
                reason: "must be at least 1 while failure detection is on",
            });
        }
        Ok(())
    }
}

/// Settings every engine understands; each maps them onto its own configuration and ignores
/// what it has no use for.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct EngineSettings {
    /// Resilience degree r (engines that offer it): a send completes once r + 1 members hold
    /// the message.
    pub resilience: u8,
    /// Failure detection and crash recovery.
    pub recovery: RecoveryPolicy,
    /// This member cannot receive multicast (RMP section 3.4): its datagrams for the group go
    /// to each member by unicast (the driver's fan-out), and engines that can (the ring) have
    /// the members that multicast send it unicast copies. The runtime sets it for groups
    /// opened with unicast peers.
    pub unicast_only: bool,
    /// Kernel memory a member's socket holds of received datagrams before it drops them
    /// (`SO_RCVBUF` as read back, which counts each datagram's bookkeeping as well as its
    /// bytes), when the driver knows it. Engines that may send further ahead of their slowest
    /// member than this (the sequencer's history) bound themselves by it. The runtime sets it
    /// from the sockets it opened; `None` (the simulator, which models no socket): unbounded.
    pub receive_buffer_bytes: Option<usize>,
}

/// What the driver tells a factory about the engine to build.
#[derive(Copy, Clone, Debug)]
pub struct EngineParams<'a> {
    /// Create or join.
    pub role: Role,
    /// Group id (the hash of the group's name) carried in every header.
    pub group: u32,
    /// This node.
    pub me: NodeId,
    /// Largest datagram the engine may write.
    pub max_datagram_bytes: usize,
    /// The time now.
    pub now: Time,
    /// Seed of the engine's own small RNG (gossip targets, random backoff). The simulator
    /// derives it from the run's seed, so that a run stays reproducible; the runtime draws it
    /// from the operating system.
    pub seed: u64,
    /// The common settings.
    pub settings: &'a EngineSettings,
}

/// Why a configuration was refused (before any engine or socket exists).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A number outside its range.
    OutOfRange {
        /// The setting.
        field: &'static str,
        /// The value given.
        value: u64,
        /// Smallest allowed.
        min: u64,
        /// Largest allowed.
        max: u64,
    },
    /// A value that cannot work, and why.
    Invalid {
        /// The setting.
        field: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// No engine of this name is registered.
    UnknownEngine(NotRegistered),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::OutOfRange {
                field,
                value,
                min,
                max,
            } => write!(f, "{field} {value} is outside {min}..={max}"),
            ConfigError::Invalid { field, reason } => write!(f, "{field} {reason}"),
            ConfigError::UnknownEngine(e) => write!(
                f,
                "no engine named {:?} (engines: {})",
                e.name,
                e.registered.join(", ")
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A name no registered engine has, with the names that are registered: the error carries
/// the list it prints, so that this vocabulary never looks up the engines built on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotRegistered {
    /// The name asked for.
    pub name: String,
    /// The registered engines' names ([`crate::catalog::names`]).
    pub registered: Vec<&'static str>,
}

impl ConfigError {
    /// `Ok` if `min <= value <= max`, else [`ConfigError::OutOfRange`].
    pub fn check_range(field: &'static str, value: u64, min: u64, max: u64) -> Result<(), Self> {
        if (min..=max).contains(&value) {
            Ok(())
        } else {
            Err(ConfigError::OutOfRange {
                field,
                value,
                min,
                max,
            })
        }
    }
}

/// Builds the engines of one protocol. Registered engines are listed in
/// [`crate::catalog::engines`]; tests and applications may bring their own through
/// [`crate::EngineChoice::custom`].
pub trait EngineFactory: Send + Sync {
    /// Short name, as `--engine` takes it.
    fn name(&self) -> &str;

    /// One line for help texts: the paper and what it promises.
    fn about(&self) -> &str {
        ""
    }

    /// What the engines built with `settings` promise.
    fn guarantees(&self, settings: &EngineSettings) -> Guarantees;

    /// Refuse settings the engine cannot work with, so that a driver never builds one that
    /// would fail an assertion.
    fn validate(
        &self,
        settings: &EngineSettings,
        max_datagram_bytes: usize,
    ) -> Result<(), ConfigError> {
        let _ = max_datagram_bytes;
        settings.recovery.validate()
    }

    /// Build an engine.
    fn build(&self, params: &EngineParams<'_>) -> Box<dyn Engine>;

    /// How long engines built with `settings` may take, once the last fault healed, to
    /// deliver everything they promise: what a driver that waits for quiescence (the
    /// simulator's runs, tests) must allow. `None`: no longer than the driver's default (a
    /// minute of virtual time in the simulator). Engines whose timers are slow by design say
    /// so here, rather than drivers knowing them by name.
    fn settle_time(&self, settings: &EngineSettings) -> Option<std::time::Duration> {
        let _ = settings;
        None
    }
}
