//! The one registry of engines: the runtime, the simulator and the CLI's `--engine` list all
//! come from [`engines`]. Adding an engine is one folder under `src/` and one line there.
//!
//! An [`EngineFactory`] builds engines from the settings every engine understands
//! ([`EngineSettings`]) plus what the driver knows ([`EngineParams`]: role, group, node id,
//! datagram size, time and a seed for the engine's own small RNG). An [`EngineChoice`] is a
//! factory with its settings: what a runtime group or a simulator run is configured with.

use crate::engine::{Engine, NodeId, Time};
use crate::guarantees::Guarantees;
use crate::sequencer;
use std::fmt;
use std::sync::Arc;

/// Every engine this build offers, in the order the CLI lists them. One line per engine.
pub fn engines() -> &'static [&'static dyn EngineFactory] {
    &[
        &sequencer::SequencerFactory::DEFAULT,
        &crate::ring::RingFactory::DEFAULT,
        &crate::gossip::GossipFactory::DEFAULT,
        &crate::tree::DefaultTreeFactory,
        &crate::txn::TxnFactory::DEFAULT,
        #[cfg(feature = "testing")]
        &crate::toy::ToyFactory,
    ]
}

/// The registered engine called `name`.
pub fn find(name: &str) -> Option<&'static dyn EngineFactory> {
    engines().iter().copied().find(|f| f.name() == name)
}

/// The names of the registered engines, for help texts and errors.
pub fn names() -> Vec<&'static str> {
    engines().iter().map(|f| f.name()).collect()
}

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
    UnknownEngine(String),
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
            ConfigError::UnknownEngine(name) => {
                write!(
                    f,
                    "no engine named {name:?} (engines: {})",
                    names().join(", ")
                )
            }
        }
    }
}

impl std::error::Error for ConfigError {}

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

/// Builds the engines of one protocol. Registered engines are listed in [`engines`]; tests and
/// applications may bring their own through [`EngineChoice::custom`].
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
}

/// An engine with its settings: what a group (runtime) or a run (simulator) is configured with.
/// Every member of a group must make the same choice.
#[derive(Clone)]
pub struct EngineChoice {
    factory: Arc<dyn EngineFactory>,
    /// The common settings handed to the factory.
    pub settings: EngineSettings,
}

/// Lets a registered (static) factory be held in an [`Arc`] without a copy of it.
struct Registered(&'static dyn EngineFactory);

impl EngineFactory for Registered {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn about(&self) -> &str {
        self.0.about()
    }
    fn guarantees(&self, settings: &EngineSettings) -> Guarantees {
        self.0.guarantees(settings)
    }
    fn validate(&self, settings: &EngineSettings, mdb: usize) -> Result<(), ConfigError> {
        self.0.validate(settings, mdb)
    }
    fn build(&self, params: &EngineParams<'_>) -> Box<dyn Engine> {
        self.0.build(params)
    }
}

impl EngineChoice {
    /// The registered engine `name` with default settings.
    pub fn named(name: &str) -> Result<EngineChoice, ConfigError> {
        let factory = find(name).ok_or_else(|| ConfigError::UnknownEngine(name.to_string()))?;
        Ok(EngineChoice::custom(Arc::new(Registered(factory))))
    }

    /// Any factory (a test engine, an application's own), with default settings.
    pub fn custom(factory: Arc<dyn EngineFactory>) -> EngineChoice {
        EngineChoice {
            factory,
            settings: EngineSettings::default(),
        }
    }

    /// The Amoeba sequencer with resilience degree `resilience` and the default
    /// [`RecoveryPolicy`].
    pub fn sequencer(resilience: u8) -> EngineChoice {
        EngineChoice::custom(Arc::new(Registered(&sequencer::SequencerFactory::DEFAULT)))
            .resilience(resilience)
    }

    /// The sequencer with every parameter of `cfg` (its `group` and `max_datagram_bytes` are
    /// still taken from the driver).
    pub fn sequencer_with(cfg: sequencer::Config) -> EngineChoice {
        let settings = EngineSettings {
            resilience: cfg.resilience,
            recovery: cfg.recovery_policy(),
            unicast_only: false,
        };
        EngineChoice {
            factory: Arc::new(sequencer::SequencerFactory::with_config(cfg)),
            settings,
        }
    }

    /// The ring with every tunable of `cfg` (defaults: [`crate::ring::Config::default`]).
    pub fn ring_with(cfg: crate::ring::Config) -> EngineChoice {
        EngineChoice::custom(Arc::new(crate::ring::RingFactory::with_config(cfg)))
    }

    /// Set the resilience degree.
    pub fn resilience(mut self, resilience: u8) -> EngineChoice {
        self.settings.resilience = resilience;
        self
    }

    /// Set the recovery policy.
    pub fn recovery(mut self, policy: RecoveryPolicy) -> EngineChoice {
        self.settings.recovery = policy;
        self
    }

    /// Say whether this member cannot receive multicast ([`EngineSettings::unicast_only`]).
    pub fn unicast_only(mut self, unicast_only: bool) -> EngineChoice {
        self.settings.unicast_only = unicast_only;
        self
    }

    /// The engine's name.
    pub fn name(&self) -> &str {
        self.factory.name()
    }

    /// What the engines promise with these settings.
    pub fn guarantees(&self) -> Guarantees {
        self.factory.guarantees(&self.settings)
    }

    /// Refuse settings the engine cannot work with.
    pub fn validate(&self, max_datagram_bytes: usize) -> Result<(), ConfigError> {
        self.factory.validate(&self.settings, max_datagram_bytes)
    }

    /// Build an engine (see [`EngineParams`] for the arguments).
    pub fn build(
        &self,
        role: Role,
        group: u32,
        me: NodeId,
        max_datagram_bytes: usize,
        now: Time,
        seed: u64,
    ) -> Box<dyn Engine> {
        self.factory.build(&EngineParams {
            role,
            group,
            me,
            max_datagram_bytes,
            now,
            seed,
            settings: &self.settings,
        })
    }
}

impl Default for EngineChoice {
    fn default() -> Self {
        EngineChoice::sequencer(0)
    }
}

impl fmt::Debug for EngineChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineChoice")
            .field("engine", &self.name())
            .field("settings", &self.settings)
            .finish()
    }
}

impl PartialEq for EngineChoice {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
            && self.settings == other.settings
            && self.guarantees() == other.guarantees()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Qos, SendError};
    use bytes::Bytes;

    /// What an engine declares it cannot do, it refuses: the runtime and the CLI trust the
    /// declaration and never find out by calling.
    #[test]
    fn every_engine_refuses_what_it_does_not_declare() {
        let unsupported = Err(SendError::Unsupported);
        let refused = Err::<u64, _>(SendError::Unsupported);
        for f in engines() {
            let g = f.guarantees(&EngineSettings::default());
            let c = g.capabilities;
            assert_eq!(c.replies, g.replies, "{}", f.name());
            assert_eq!(c.reset, g.crash_recovery, "{}", f.name());
            let settings = EngineSettings::default();
            let mut e = f.build(&EngineParams {
                role: Role::Create,
                group: 7,
                me: NodeId(1),
                max_datagram_bytes: 1400,
                now: Time::ZERO,
                seed: 1,
                settings: &settings,
            });
            let now = Time::ZERO;
            let name = f.name();
            if !c.locks {
                assert_eq!(e.lock(now, 1, true), unsupported, "{name}");
            }
            if !c.requests {
                let r = e.request(now, Bytes::new(), Qos::Reliable, None);
                assert_eq!(r, refused, "{name}");
            }
            if !c.forwarding {
                let r = e.forward(now, NodeId(2), NodeId(3), 0, Bytes::new());
                assert_eq!(r, unsupported, "{name}");
            }
            if !c.replies {
                assert_eq!(
                    e.reply(now, NodeId(2), 0, Bytes::new()),
                    unsupported,
                    "{name}"
                );
            }
            if !c.reset {
                assert_eq!(e.reset(now, 1), unsupported, "{name}");
            }
            if !c.rejoin {
                assert_eq!(e.rejoin(now, None), unsupported, "{name}");
                assert_eq!(e.start_alone(now), unsupported, "{name}");
            }
            if !c.datagram_limit {
                assert!(!e.limit_datagram_bytes(600), "{name}");
            }
        }
    }

    #[test]
    fn registry_finds_its_engines() {
        assert!(names().contains(&"sequencer"));
        assert_eq!(
            EngineChoice::named("sequencer").unwrap().name(),
            "sequencer"
        );
        let err = EngineChoice::named("nope").unwrap_err();
        assert!(err.to_string().contains("sequencer"), "{err}");
        let c = EngineChoice::sequencer(2);
        assert_eq!(c.guarantees().resilience, 2);
        let mut bad = c.clone();
        bad.settings.recovery.alive_retries = 0;
        assert!(matches!(
            bad.validate(1472),
            Err(ConfigError::Invalid {
                field: "alive_retries",
                ..
            })
        ));
    }
}
