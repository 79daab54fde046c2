//! The sequencer's entry in the engine registry.

use super::{guarantees, Config, Sequencer};
use crate::engine::Engine;
use crate::guarantees::Guarantees;
use crate::registry::{ConfigError, EngineFactory, EngineParams, EngineSettings, Role};

/// Builds [`Sequencer`] engines from a base [`Config`] (the defaults, or one given whole), with
/// the driver's group id and datagram size and the common [`EngineSettings`] applied on top.
#[derive(Clone, Debug)]
pub struct SequencerFactory {
    base: Option<Config>,
}

impl SequencerFactory {
    /// The registered factory: engine defaults.
    pub const DEFAULT: SequencerFactory = SequencerFactory { base: None };

    /// A factory whose engines start from `cfg`.
    pub fn with_config(cfg: Config) -> SequencerFactory {
        SequencerFactory { base: Some(cfg) }
    }

    /// The configuration an engine of group `group` gets. With the engine's defaults (no
    /// configuration given whole), its history and send window are fitted to the members'
    /// receive buffers when the driver knows them ([`Config::fit_receive_buffer`]); a
    /// configuration given whole is taken as it is.
    pub fn config(
        &self,
        group: u32,
        max_datagram_bytes: usize,
        settings: &EngineSettings,
    ) -> Config {
        let mut cfg = self.base.clone().unwrap_or_else(|| Config::new(group));
        cfg.group = group;
        cfg.max_datagram_bytes = max_datagram_bytes;
        cfg.resilience = settings.resilience;
        cfg.set_recovery_policy(&settings.recovery);
        if let (None, Some(bytes)) = (&self.base, settings.receive_buffer_bytes) {
            cfg.fit_receive_buffer(bytes);
        }
        cfg
    }
}

impl EngineFactory for SequencerFactory {
    fn name(&self) -> &str {
        "sequencer"
    }

    fn about(&self) -> &str {
        "Amoeba (Kaashoek, Tanenbaum): total order through a sequencer, resilience degree r, crash recovery"
    }

    fn guarantees(&self, settings: &EngineSettings) -> Guarantees {
        guarantees(settings.resilience, settings.recovery.min_members == 0)
    }

    fn validate(
        &self,
        settings: &EngineSettings,
        max_datagram_bytes: usize,
    ) -> Result<(), ConfigError> {
        self.config(0, max_datagram_bytes, settings).validate()
    }

    fn build(&self, p: &EngineParams<'_>) -> Box<dyn Engine> {
        let cfg = self.config(p.group, p.max_datagram_bytes, p.settings);
        match p.role {
            Role::Create => Box::new(Sequencer::create(cfg, p.me, p.now)),
            Role::Join | Role::Client => Box::new(Sequencer::join(cfg, p.me, p.now)),
        }
    }
}
