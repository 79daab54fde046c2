//! `txn`: reliable multicast transactions with a response channel from every receiver, after
//! "The Multidriver: A Reliable Multicast Service Using the Xpress Transfer Protocol" by Bert J.
//! Dempsey, John C. Fenton and Alfred C. Weaver (the service primitives of section 3.2 and the
//! control scheme of section 3.3; the measurements of section 5 are reproduced in shape by
//! the simulator test `txn_tables_in_the_simulator` and, on real processes with every column
//! in one run, by `rmcast txn-bench`).
//!
//! **Guarantees.** Two services, as the paper's primitives. *Unreliable multicast* (X_Mopen,
//! [`crate::Qos::Unreliable`]): one datagram to the group, no response channel, no repair.
//! *Reliable transaction* (X_MRopen, [`crate::Qos::Reliable`]): a message of any size up to
//! [`Config::max_message_bytes`] is either **committed at every receiver of the transaction's
//! set or at none** (the deliver-to flag): a receiver holds the message until the source
//! releases it, and the source releases it only once every receiver of the set holds all of
//! it. The set is the receivers that opened their response channel within
//! [`Config::open_timeout`], at most [`Config::max_receivers`]; with fewer than
//! [`Config::min_receivers`] the transaction fails. A completed send
//! ([`crate::Event::SendComplete`]) means committed: released, and delivered by every receiver of
//! the set, to its application (a receiver confirms delivery once its application took the
//! [`crate::Event::Deliver`] from [`crate::Engine::poll_event`], so that a busy application holds
//! the commit back rather than missing the request); a failed one is reported by [`crate::Event::Loss`] at the source (the message is
//! delivered nowhere), and [`crate::Engine::take_failure`] says why, naming the receivers (the
//! runtime fails a blocking send with it). Receivers answer on their response channel
//! ([`crate::Engine::reply`], X_MRreply); answers arrive at the source as
//! [`crate::Event::Reply`], boundaries preserved.
//! No order between messages (transactions of one source commit independently), no virtual
//! synchrony, no membership: the Multidriver has none, so the engine's one view names nobody,
//! and each transaction's set is whoever answers its open.
//!
//! **How** ([`engine`]). The source multicasts a FIRST packet naming where replies go (its own
//! address: the header's sender) and the set size, with the first data segment, and repeats it
//! until the open is decided. Each receiver opens its response channel after a random backoff
//! in `[0, BACKOFF_TIME]`, `BACKOFF_TIME = set size × backoff unit` (drawn from the engine's
//! seeded generator); with the use-backoff flag every later packet of the channel backs off too
//! (implosion control, section 5.2). The source accepts channels up to `max` and decides the
//! open once `max` answered or the timeout passed. Data then flows by **go-back-N** in a window
//! and at a rate that are the **minimum over the set** of what each receiver reports: the next
//! byte expected and the last byte it will accept (the flow/error control request), BURST and
//! RATE (the rate control request). Once every receiver of the set reports the whole message,
//! the source sends **deliver-to** the end of the message (and delivers its own copy), repeated
//! until every receiver confirms delivery (its application took the message). A receiver of the set silent for
//! [`Config::receiver_timeout`] while asked is dropped (named, see [`Config::announce_sets`]);
//! below `min` the transaction is aborted. The channels stay open [`Config::reply_linger`]
//! after the commit for replies, then X_MRclose closes both directions. A receiver that holds a
//! complete unreleased message whose source went silent asks the group what became of it
//! (QUERY); the source or any receiver that saw the outcome answers (RESOLVE), so that a source
//! crashing during the release does not leave some receivers delivered and others not. With
//! nobody left who knows, holders give up after [`Config::query_limit`] asks and discard.
//!
//! **Roles.** Each packet is taken only from the member entitled to send it (the header's
//! sender; a key holder is trusted to be a member, not to play every role). The source of an
//! epoch is fixed by the first FIRST of that epoch that opened a receive context here, as the
//! Tree fixes its session's origin, and a member's own epoch is its own: FIRST, DATA, CNTL,
//! ACCEPT, REPLY_ACK and UDATA of an epoch are taken only from its source, and a RESOLVE only if
//! it names that source. A RESOLVE from another member than the source is taken only as the
//! answer to this receiver's QUERY (its source has been silent), only if it says "released"
//! (only the source aborts: a receiver that missed an abort gives up, which delivers nothing
//! just the same), and only from a member of the set (as the source named it here, or as the
//! answer names it if this receiver missed every packet naming it). REPLY segments are taken
//! only from the receivers of the transaction's set, reports after the open only from them.
//! Refused: `not_from_source`, `not_in_set` (reports: `channels_refused`). A QUERY is answered
//! with a release only to an asker of the set, an abort only by the source, so that a QUERY
//! from outside the set makes nobody multicast. Bounds on what the wire sizes: a message
//! larger than [`Config::max_message_bytes`] is not answered, bytes are held only in order and
//! within the receive window and [`Config::rx_budget_bytes`], a set field is read in place and
//! at most [`Config::max_receivers`] of it kept, a reply message's length is checked against
//! [`Config::max_reply_bytes`] before its bytes are kept, BACKOFF_TIME is at most the open's
//! timer, and unreliable messages beyond [`Config::max_events`] waiting for the application are
//! dropped and counted (`unreliable_dropped`).
//!
//! **Not built.** Per-transaction `min`/`max`/timeout through the common `submit` (they are the
//! engine's [`Config`]; the library opens a group per transaction shape), several messages in
//! one transaction (a transaction is one message, which may be a whole file), and an explicit
//! commit call reachable through the runtime (the deliver-to release is automatic once every
//! receiver holds the message).

pub mod engine;
pub mod packet;
#[cfg(test)]
mod tests;

pub use engine::Txn;

use crate::engine::Engine;
use crate::guarantees::{Capabilities, DeliveryPromise, Guarantees, Order, QosLevels, Senders};
use crate::registry::{ConfigError, EngineFactory, EngineParams, EngineSettings};
use std::time::Duration;

/// The transaction engine's parameters: the X_MRopen arguments (`min`, `max`, timeout) of every
/// transaction of the group, the implosion control (BACKOFF_TIME), what a receiver reports
/// (window, BURST, RATE) and the bounds that keep memory finite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// X_MRopen's `min`: receivers that must open their response channel for the transaction
    /// to go ahead.
    pub min_receivers: usize,
    /// X_MRopen's `max`: receivers taken into a transaction at most (the open is decided as
    /// soon as this many answered).
    pub max_receivers: usize,
    /// X_MRopen's timer: how long the source waits for receivers to answer its open.
    pub open_timeout: Duration,
    /// BACKOFF_TIME per receiver of the set: a receiver waits a random time in
    /// `[0, set_size × backoff_unit]` before opening its response channel. Zero: no backoff.
    pub backoff_unit: Duration,
    /// The use-backoff flag: every packet of a response channel (reports and replies) backs
    /// off, not only its first one.
    pub use_backoff: bool,
    /// A receiver of a transaction's set that says nothing this long while the source waits
    /// for it is dropped from the set. `None`: never (a dead receiver then stalls the
    /// transaction until it is closed).
    pub receiver_timeout: Option<Duration>,
    /// The response channels stay open this long after the commit, for replies.
    pub reply_linger: Duration,
    /// Largest message (transaction) in bytes.
    pub max_message_bytes: usize,
    /// Transactions of this source not yet committed or failed, at most (more:
    /// [`crate::SendError::WouldBlock`]).
    pub max_open_txns: usize,
    /// Committed transactions whose response channels are still open, at most (more: the
    /// oldest is closed early).
    pub max_lingering: usize,
    /// Receive window a receiver offers: the last byte it will accept is its next expected
    /// byte plus this.
    pub rx_window_bytes: u32,
    /// Bytes a receiver holds at most over all its receive contexts.
    pub rx_budget_bytes: usize,
    /// Receive contexts (transactions of other sources) a receiver keeps at most; the opens of
    /// more are not answered.
    pub max_inbound: usize,
    /// BURST this receiver reports: bytes it takes back to back.
    pub burst_bytes: u32,
    /// RATE this receiver reports: bytes per second it takes.
    pub rate_bytes_per_sec: u32,
    /// Window of a transaction before any receiver reported.
    pub initial_window_bytes: u32,
    /// Largest reply message in bytes; also the bytes a response channel holds unacknowledged
    /// at most (more: [`crate::SendError::WouldBlock`]).
    pub max_reply_bytes: usize,
    /// Window of a response channel's reply stream.
    pub reply_window_bytes: u32,
    /// First retransmission timeout, before any round trip was measured.
    pub rto_initial: Duration,
    /// Smallest retransmission timeout.
    pub rto_min: Duration,
    /// Largest retransmission timeout.
    pub rto_max: Duration,
    /// A receiver holding a complete, unreleased message asks the group what became of it once
    /// its source was silent this long.
    pub query_after: Duration,
    /// Asks without an answer before a receiver discards an unreleased message.
    pub query_limit: u32,
    /// The source announces each transaction's set as an [`crate::Event::View`] whose `seq` is
    /// the transaction number and whose members are the source and its set (then one view per
    /// receiver dropped, naming it in `left`): how an application learns who is in a
    /// transaction and who failed it. Off: one view naming nobody, as the simulator's checkers
    /// expect of an engine without membership.
    pub announce_sets: bool,
    /// Decide an open as soon as as many receivers answered as were in the last decided set
    /// (at most `max_receivers`), rather than wait out `open_timeout` whenever fewer than
    /// `max_receivers` exist: what a group of known size that sends message after message (a
    /// chat, a pipe into `rmcast member`) needs, where every open would otherwise cost the
    /// whole timeout. A receiver that answers an open already decided makes the next set wait
    /// for one more; one that is gone costs one open its timeout. Off (the paper's X_MRopen):
    /// the open waits for `max_receivers` answers or the timeout.
    pub early_open: bool,
    /// Events held for the application at most; deliveries and reply acknowledgements wait.
    pub max_events: usize,
    /// Whether this member answers other members' opens (X_Mopen in read mode). Off: a pure
    /// client, which sends transactions and is never in anyone's set.
    pub receive: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            min_receivers: 1,
            max_receivers: 64,
            open_timeout: Duration::from_millis(500),
            backoff_unit: Duration::from_micros(100),
            use_backoff: false,
            receiver_timeout: Some(Duration::from_secs(2)),
            reply_linger: Duration::from_secs(1),
            max_message_bytes: 16 << 20,
            max_open_txns: 32,
            max_lingering: 256,
            rx_window_bytes: 256 << 10,
            rx_budget_bytes: 64 << 20,
            max_inbound: 256,
            burst_bytes: 256 << 10,
            rate_bytes_per_sec: u32::MAX,
            initial_window_bytes: 64 << 10,
            max_reply_bytes: 1 << 20,
            reply_window_bytes: 64 << 10,
            rto_initial: Duration::from_millis(20),
            rto_min: Duration::from_millis(2),
            rto_max: Duration::from_secs(1),
            query_after: Duration::from_millis(300),
            query_limit: 20,
            announce_sets: false,
            early_open: false,
            max_events: 1024,
            receive: true,
        }
    }
}

impl Config {
    /// The defaults with the common settings applied: failure detection off
    /// (`alive_interval_ms == 0`) means receivers are never dropped for silence.
    pub fn from_settings(settings: &EngineSettings) -> Config {
        let mut c = Config::default();
        if settings.recovery.alive_interval_ms == 0 {
            c.receiver_timeout = None;
        }
        c
    }

    /// Refuse values the engine cannot work with.
    pub fn validate(&self, max_datagram_bytes: usize) -> Result<(), ConfigError> {
        ConfigError::check_range("max_receivers", self.max_receivers as u64, 1, 65_535)?;
        ConfigError::check_range(
            "min_receivers",
            self.min_receivers as u64,
            0,
            self.max_receivers as u64,
        )?;
        let ms = |d: Duration| d.as_millis().min(u128::from(u64::MAX)) as u64;
        ConfigError::check_range("open_timeout (ms)", ms(self.open_timeout), 1, 3_600_000)?;
        ConfigError::check_range(
            "backoff_unit (us)",
            self.backoff_unit.as_micros().min(u128::from(u64::MAX)) as u64,
            0,
            1_000_000,
        )?;
        if let Some(t) = self.receiver_timeout {
            ConfigError::check_range("receiver_timeout (ms)", ms(t), 10, 3_600_000)?;
        }
        ConfigError::check_range("reply_linger (ms)", ms(self.reply_linger), 0, 3_600_000)?;
        ConfigError::check_range(
            "max_message_bytes",
            self.max_message_bytes as u64,
            1,
            u64::from(u32::MAX),
        )?;
        ConfigError::check_range("max_open_txns", self.max_open_txns as u64, 1, 1 << 16)?;
        ConfigError::check_range("max_lingering", self.max_lingering as u64, 1, 1 << 20)?;
        ConfigError::check_range("max_inbound", self.max_inbound as u64, 1, 1 << 20)?;
        ConfigError::check_range(
            "rx_window_bytes",
            self.rx_window_bytes.into(),
            1024,
            1 << 30,
        )?;
        ConfigError::check_range(
            "rx_budget_bytes",
            self.rx_budget_bytes as u64,
            1024,
            1 << 40,
        )?;
        ConfigError::check_range(
            "burst_bytes",
            self.burst_bytes.into(),
            1024,
            u32::MAX.into(),
        )?;
        ConfigError::check_range(
            "rate_bytes_per_sec",
            self.rate_bytes_per_sec.into(),
            1024,
            u32::MAX.into(),
        )?;
        ConfigError::check_range(
            "initial_window_bytes",
            self.initial_window_bytes.into(),
            1024,
            1 << 30,
        )?;
        ConfigError::check_range(
            "max_reply_bytes",
            self.max_reply_bytes as u64,
            1,
            u64::from(u32::MAX / 2),
        )?;
        ConfigError::check_range(
            "reply_window_bytes",
            self.reply_window_bytes.into(),
            1024,
            1 << 30,
        )?;
        if self.rto_min.is_zero() || self.rto_min > self.rto_max {
            return Err(ConfigError::Invalid {
                field: "rto_min",
                reason: "must be positive and at most rto_max",
            });
        }
        if self.query_after.is_zero() || self.query_limit == 0 {
            return Err(ConfigError::Invalid {
                field: "query_after",
                reason: "and query_limit must be positive",
            });
        }
        ConfigError::check_range("max_events", self.max_events as u64, 16, 1 << 24)?;
        ConfigError::check_range(
            "max_datagram_bytes",
            max_datagram_bytes as u64,
            256,
            crate::wire::MAX_DATAGRAM_LEN as u64,
        )
    }
}

/// The transaction engine's registry entry.
#[derive(Clone, Debug)]
pub struct TxnFactory {
    base: Option<Config>,
}

impl TxnFactory {
    /// The registered factory: engine defaults, with the common settings applied.
    pub const DEFAULT: TxnFactory = TxnFactory { base: None };

    /// A factory whose engines use `cfg` as it is (the library's transactions: `min`, `max`,
    /// timeout and backoff of their own).
    pub fn with_config(cfg: Config) -> TxnFactory {
        TxnFactory { base: Some(cfg) }
    }

    /// The configuration an engine gets with `settings`.
    pub fn config(&self, settings: &EngineSettings) -> Config {
        self.base
            .clone()
            .unwrap_or_else(|| Config::from_settings(settings))
    }

    /// What the engine promises (settings do not change it).
    pub fn declared() -> Guarantees {
        Guarantees {
            order: Order::Unordered,
            virtual_synchrony: false,
            resilience: 0,
            majority_safe: false,
            delivery: DeliveryPromise::AllOrNothing,
            qos: QosLevels {
                unreliable: true,
                reliable: true,
                source_ordered: false,
                totally_ordered: false,
                k_resilient_max: None,
                majority_resilient: false,
                totally_resilient: false,
            },
            senders: Senders::Any,
            crash_recovery: false,
            replies: true,
            capabilities: Capabilities {
                replies: true,
                ..Capabilities::NONE
            },
        }
    }
}

impl EngineFactory for TxnFactory {
    fn name(&self) -> &str {
        "txn"
    }
    fn about(&self) -> &str {
        "Multidriver transactions (Dempsey, Fenton and Weaver): a message committed at every \
         receiver that answered or at none (deliver-to), replies on a response channel per \
         receiver"
    }
    fn guarantees(&self, _: &EngineSettings) -> Guarantees {
        Self::declared()
    }
    fn validate(
        &self,
        settings: &EngineSettings,
        max_datagram_bytes: usize,
    ) -> Result<(), ConfigError> {
        settings.recovery.validate()?;
        self.config(settings).validate(max_datagram_bytes)
    }
    fn build(&self, p: &EngineParams<'_>) -> Box<dyn Engine> {
        Box::new(Txn::new(self.config(p.settings), p))
    }
}
