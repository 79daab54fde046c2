//! The one list of engines: the runtime, the simulator and the CLI's `--engine` list all
//! come from [`engines`]. Adding an engine is one folder under `src/` and one line there.
//!
//! An [`EngineChoice`] is a registered (or custom) [`EngineFactory`] with its settings: what a
//! runtime group or a simulator run is configured with. The vocabulary factories are made of
//! lives in [`crate::registry`], below every engine.

use crate::engine::{Engine, NodeId, Time};
use crate::guarantees::Guarantees;
use crate::registry::{
    ConfigError, EngineFactory, EngineParams, EngineSettings, NotRegistered, RecoveryPolicy, Role,
};
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
    fn settle_time(&self, settings: &EngineSettings) -> Option<std::time::Duration> {
        self.0.settle_time(settings)
    }
}

impl EngineChoice {
    /// The registered engine `name` with default settings.
    pub fn named(name: &str) -> Result<EngineChoice, ConfigError> {
        let factory = find(name).ok_or_else(|| {
            ConfigError::UnknownEngine(NotRegistered {
                name: name.to_string(),
                registered: names(),
            })
        })?;
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
            receive_buffer_bytes: None,
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

    /// Say how much a member's socket receive buffer holds
    /// ([`EngineSettings::receive_buffer_bytes`]).
    pub fn receive_buffer_bytes(mut self, bytes: Option<usize>) -> EngineChoice {
        self.settings.receive_buffer_bytes = bytes;
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

    /// How long the engines may take to deliver everything once faults heal, if longer than a
    /// driver's default ([`EngineFactory::settle_time`]).
    pub fn settle_time(&self) -> Option<std::time::Duration> {
        self.factory.settle_time(&self.settings)
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
