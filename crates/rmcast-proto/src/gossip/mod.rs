//! `gossip`: Bimodal Multicast (Pbcast), after "Bimodal Multicast" by Kenneth P. Birman, Mark
//! Hayden, Öznur Özkasap, Zhen Xiao, Mihai Budiu and Yaron Minsky (the protocol: an unreliable
//! first phase, then rounds of anti-entropy gossip; of its optimizations, solicitations served
//! only in their round and a retransmission limit per round; garbage collection after a number
//! of rounds; the loss up-call), with the defaults of the experiments in "Throughput Stability
//! of Reliable Multicast Protocols" by Öznur Özkasap and Kenneth P. Birman (100 ms rounds, two
//! gossip targets per round). Not built: a hierarchical first phase, multicast
//! retransmissions, and the paper's most-recent-first order of retransmissions (solicitations
//! here ask for the oldest messages first, since FIFO delivery waits on them).
//!
//! **Guarantees.** Bimodal delivery: almost every member delivers almost every message, with a
//! probability that rises quickly with the gossip rounds a message stays buffered; a message a
//! member can no longer recover is reported there by [`crate::Event::Loss`] (the loss up-call),
//! never skipped silently. Delivery is FIFO per sender; there is no total order and no
//! virtual synchrony (views are not ordered with the data, and nothing waits for agreement on
//! them). Every member may send; no crash recovery (a member found silent simply leaves the
//! view). The unreliable, reliable and source-ordered levels are served, all three the same
//! way (FIFO, repaired by gossip): more than the first two ask for.
//!
//! **How.** Each message is multicast once by its sender ([`crate::Destination::Group`], the
//! first phase; messages submitted together before the driver takes a datagram go as one run,
//! [`packet::DATA_RUN`], as many as fit a datagram; one larger than a datagram goes in
//! fragments, [`packet::DATA_FRAG`], each numbered and repaired as a message of its own, cut
//! and put together again by the common [`crate::common::Fragmenter`] and
//! [`crate::common::Reassembly`], up to [`Config::max_message_bytes`], and delivered under the
//! number of its last fragment; a message missing a fragment is reported lost under that
//! number) and delivered by every member that receives it once the sender's earlier
//! messages were delivered (or reported lost). Every [`Config::round`] each member sends a
//! [`packet::Digest`] to [`Config::fanout`] members picked at random with the engine's own
//! seeded generator, by unicast: per sender, the messages it holds as ranges (bounded), and
//! what it knows of the others. The receiver solicits what it lacks ([`packet::Solicitation`],
//! the oldest first); the gossiper sends it again by unicast, at most
//! [`Config::max_retransmissions_per_round`] messages a round, and only for solicitations of
//! its current or previous round. A digest that shows its gossiper lacks messages below what
//! it knows to exist is answered with them too (push as well as pull, within the same budget),
//! so that a lost first-phase copy holds FIFO delivery back for about a round. Each member keeps a sender's messages in a buffer bounded by
//! count ([`Config::buffer_msgs`]) and bytes ([`Config::buffer_bytes`]) for
//! [`Config::gc_rounds`] rounds after they arrived, then garbage-collects them; **stability
//! detection** lets them go earlier: each digest carries, per member, the prefix of each
//! sender's messages that member delivered (its own first, then others' as relayed, merged by
//! maximum), and a message below every member's prefix is held everywhere (in groups of up to
//! 1,024: a digest holds a few dozen rows, so in a larger group the reports of every member
//! could not come in before [`Config::gc_rounds`], and keeping them would cost every member n
//! entries a sender; there messages go by age, Pbcast's own rule). A full buffer makes
//! room by dropping its oldest delivered messages, however young: **the sender never waits for
//! the slowest member** (the flow control Pbcast exists to do without). A send is accepted and
//! complete ([`crate::Event::SendComplete`], at once) when its first-phase multicast is queued;
//! only what is local pushes back (the application's event queue, the datagrams waiting for
//! the socket). **The loss up-call**: a message known to exist (from a digest or a later
//! message) and still missing after [`Config::loss_rounds`] rounds, or once every other member
//! reported that it no longer holds it, is given up on; a member that fell further behind a
//! sender than its buffer reaches (by count, or by bytes held waiting for a missing message)
//! gives up the oldest at once and counts a lag (`lagged`). Delivery then goes on with that
//! sender's next message.
//!
//! **Membership** (the paper takes it from the layer below; here it is gossiped too). A joiner
//! multicasts a join request until welcomed; every member that hears it enters the joiner in
//! its membership table and about `fanout` of them answer with a welcome: the table, and for
//! each sender the number the joiner starts delivering from (what was sent before the welcome
//! is not the joiner's to deliver). Tables ([`membership`]) merge by entry versions, so they
//! converge whatever the order; two members whose digests show different view ids exchange
//! tables (whole if a table fits one datagram; a larger one its next part in turn, one
//! datagram in id order, so that a group of 10,000 forming, where nearly every digest shows
//! a different table, does not send 63 datagrams for each, and a member's exchanges still go
//! round its whole table). A group of n hands its application a new view at most once in n / 256 rounds
//! (changes in between go into the next view): a view costs n, and the group's table changes
//! n times while it forms. A leaver marks its own entry departed, multicasts it, and goes on gossiping until
//! its own messages are stable or collected. **Failure detection** in a group of up to
//! [`Config::probing_above`] (256) members is gossip-style (a simple silence timeout on
//! heartbeats, not the probing [`crate::common::FailureDetector`], which needs an answer from
//! the peer itself and so a probe per member): each member raises its heartbeat every round,
//! digests carry heartbeats (relayed ones too), and a member whose heartbeat has not risen for
//! [`Config::silence_timeout`] leaves the view; a member that finds itself so removed while
//! alive refutes it with a higher version. News of a member comes in its row of a digest,
//! about once in n / (fanout · rows a digest) rounds, so that detector needs a timeout that
//! grows with the group. A larger group probes instead (`swim.rs`, after SWIM by Das, Gupta
//! and Motivala): each member probes one member a round, in turn, through a few others when it
//! does not answer; an unanswering member is suspected at its version, the suspicion
//! piggybacked on digests and probes, refuted by the member itself with the next version, or
//! confirmed as a departure after [`Config::silence_timeout`]. The time to find a crash and a
//! member's cost per round then stay the same whatever the group's size. Small groups keep
//! heartbeats: they cost no datagram of their own there and reach everyone within a round or
//! two, and every small-group test and sweep was tuned against them. A datagram from a member
//! counted as departed (after a long partition or pause) sends it the table, so that the two
//! merge; two sides of a partition longer than the silence timeout stay apart until a datagram
//! crosses. **Role checks**: a LEAVE is only ever its sender's own, versions compare wrapping
//! (RFC 1982) so a member can always refute a departure, and entries jumping more than
//! [`membership::MAX_VERSION_STEP`] ahead are refused and counted (`forged_entries`).
//!
//! **Quiet groups.** Pbcast gossips forever; this engine stops when there is nothing to gossip
//! about, so that an idle group sends nothing (and a simulation can end): once a member holds
//! and lacks nothing, its table has not changed for [`Config::idle_rounds`] rounds and every
//! member has shown it the same table since (in a group of more than 33, 32 members have, and
//! every member was heard of since, or in a probing group 2 log2 n rounds went by, time for
//! the probes to find a crash: a member with another table hears no agreement and keeps
//! gossiping until the tables meet, a crashed one keeps the group awake until it is found
//! silent or suspected, and going idle costs a constant number of digests, not n), and no
//! suspicion is pending, it stops its rounds;
//! any message, join, leave or different table wakes it. While it waits for those agreements
//! (settling) it gossips to more members per round (about the agreements it needs over
//! 2 · idle_rounds, at most 16), in a small group to those it has not heard agree for longest.
//! An idle member answers a digest with its own. A member that
//! crashes while the whole group is idle, or in the last rounds before it goes idle (after it
//! showed its agreement), is noticed when the group wakes.

mod engine;
mod history;
pub mod membership;
pub mod packet;
mod peers;
mod swim;
#[cfg(test)]
mod tests;

pub use engine::Gossip;

use crate::engine::Engine;
use crate::guarantees::{Capabilities, DeliveryPromise, Guarantees, Order, QosLevels, Senders};
use crate::registry::{ConfigError, EngineFactory, EngineParams, EngineSettings};
use std::time::Duration;

/// The gossip engine's parameters. Every member of a group should use the same values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The gossip round: each member gossips once per round.
    pub round: Duration,
    /// Members each member gossips to per round.
    pub fanout: usize,
    /// A delivered message is kept this many rounds after it arrived (unless it is stable
    /// before), to be sent again to members that lack it.
    pub gc_rounds: u32,
    /// A message known to exist and missing this many rounds is reported lost.
    pub loss_rounds: u32,
    /// Messages a member sends again per round, at most (the paper's round retransmission
    /// limit).
    pub max_retransmissions_per_round: usize,
    /// Messages one solicitation asks for, at most.
    pub max_solicit: usize,
    /// Messages held per sender, at most (the own ones included: a full buffer drops its
    /// oldest delivered messages, it never refuses a send).
    pub buffer_msgs: usize,
    /// Payload bytes held per sender, at most (as [`Config::buffer_msgs`]).
    pub buffer_bytes: usize,
    /// The largest message: one larger than a datagram goes in fragments (each repaired by
    /// gossip as a message of its own) and is put together again at most this large. At most
    /// a quarter of [`Config::buffer_bytes`], so that a message never pushes its own
    /// beginning out of the sender's buffer.
    pub max_message_bytes: usize,
    /// Events held for the application at most before delivery pauses.
    pub max_events: usize,
    /// A member not heard of this long (by gossiped heartbeats), or suspected this long (by
    /// probing, in a group of more than [`Config::probing_above`]), leaves the view; `None`:
    /// never (no failure detection, no probes).
    pub silence_timeout: Option<Duration>,
    /// Groups of more than this many members find failed members by probing (SWIM, see
    /// `gossip/swim.rs`): one probe a member a round, whatever the group's size. Smaller groups
    /// by gossiped heartbeats and [`Config::silence_timeout`], which cost no datagram of their
    /// own (heartbeats ride in the digests) and reach every member within a round or two while
    /// a digest's rows cover much of the group. 0: always probing.
    pub probing_above: usize,
    /// A probed member that has not answered this long is probed through others. Below
    /// [`Config::round`].
    pub probe_timeout: Duration,
    /// Members asked to probe an unanswering member (SWIM's k).
    pub indirect_probes: usize,
    /// Rounds without anything to do before a member goes idle.
    pub idle_rounds: u32,
    /// A joiner repeats its request this often.
    pub join_retry: Duration,
    /// Rounds a leaver goes on gossiping at least (its departure spreads meanwhile).
    pub leave_linger_rounds: u32,
    /// Entries of the membership table (members and departed members), at most; a joiner
    /// finding it full is refused at once. An entry costs every member about 100 bytes (table
    /// entry, peer record, a sender's history header once it sends); the table travels in as
    /// many datagrams as it takes (9 bytes an entry).
    pub max_members: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            round: Duration::from_millis(100),
            fanout: 2,
            gc_rounds: 30,
            loss_rounds: 40,
            max_retransmissions_per_round: 256,
            max_solicit: 128,
            buffer_msgs: 8192,
            buffer_bytes: 8 << 20,
            max_message_bytes: 1 << 20,
            max_events: 1024,
            silence_timeout: Some(Duration::from_secs(5)),
            probing_above: 256,
            probe_timeout: Duration::from_millis(20),
            indirect_probes: 3,
            idle_rounds: 5,
            join_retry: Duration::from_millis(50),
            leave_linger_rounds: 2,
            max_members: 16_384,
        }
    }
}

impl Config {
    /// The defaults with the common settings applied: failure detection off
    /// (`alive_interval_ms == 0`) means no silence timeout. The probing parameters do not apply
    /// (there are no probes), nor does the resilience degree (always 0).
    pub fn from_settings(settings: &EngineSettings) -> Config {
        let mut c = Config::default();
        if settings.recovery.alive_interval_ms == 0 {
            c.silence_timeout = None;
        }
        c
    }

    /// Refuse values the engine cannot work with.
    pub fn validate(&self, max_datagram_bytes: usize) -> Result<(), ConfigError> {
        let ms = self.round.as_millis().min(u128::from(u64::MAX)) as u64;
        ConfigError::check_range("round (ms)", ms, 1, 60_000)?;
        ConfigError::check_range("fanout", self.fanout as u64, 1, 64)?;
        ConfigError::check_range("gc_rounds", self.gc_rounds.into(), 1, 100_000)?;
        ConfigError::check_range("loss_rounds", self.loss_rounds.into(), 1, 100_000)?;
        ConfigError::check_range(
            "max_retransmissions_per_round",
            self.max_retransmissions_per_round as u64,
            1,
            1 << 20,
        )?;
        ConfigError::check_range("max_solicit", self.max_solicit as u64, 1, 1 << 16)?;
        ConfigError::check_range("buffer_msgs", self.buffer_msgs as u64, 16, 1 << 20)?;
        ConfigError::check_range(
            "buffer_bytes",
            self.buffer_bytes as u64,
            crate::wire::MAX_DATAGRAM_LEN as u64,
            1 << 32,
        )?;
        ConfigError::check_range(
            "max_message_bytes",
            self.max_message_bytes as u64,
            1,
            (self.buffer_bytes / 4) as u64,
        )?;
        ConfigError::check_range("max_events", self.max_events as u64, 16, 1 << 24)?;
        ConfigError::check_range("idle_rounds", self.idle_rounds.into(), 1, 100_000)?;
        ConfigError::check_range("max_members", self.max_members as u64, 2, 1 << 16)?;
        if self.join_retry.is_zero() {
            return Err(ConfigError::Invalid {
                field: "join_retry",
                reason: "must be positive",
            });
        }
        ConfigError::check_range("indirect_probes", self.indirect_probes as u64, 1, 16)?;
        if self.probe_timeout.is_zero() || self.probe_timeout >= self.round {
            return Err(ConfigError::Invalid {
                field: "probe_timeout",
                reason: "must be positive and shorter than a round",
            });
        }
        if self.silence_timeout.is_some_and(|t| t <= self.round * 2) {
            return Err(ConfigError::Invalid {
                field: "silence_timeout",
                reason: "must be longer than two rounds",
            });
        }
        ConfigError::check_range(
            "max_datagram_bytes",
            max_datagram_bytes as u64,
            256,
            crate::wire::MAX_DATAGRAM_LEN as u64,
        )
    }
}

/// The gossip engine's registry entry.
#[derive(Clone, Debug)]
pub struct GossipFactory {
    base: Option<Config>,
}

impl GossipFactory {
    /// The registered factory: engine defaults, with the common settings applied.
    pub const DEFAULT: GossipFactory = GossipFactory { base: None };

    /// A factory whose engines use `cfg` as it is.
    pub fn with_config(cfg: Config) -> GossipFactory {
        GossipFactory { base: Some(cfg) }
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
            order: Order::Fifo,
            virtual_synchrony: false,
            resilience: 0,
            majority_safe: false,
            delivery: DeliveryPromise::Probabilistic,
            qos: QosLevels::below_total(true),
            senders: Senders::Any,
            crash_recovery: false,
            replies: false,
            capabilities: Capabilities::NONE,
        }
    }
}

impl EngineFactory for GossipFactory {
    fn name(&self) -> &str {
        "gossip"
    }
    fn about(&self) -> &str {
        "Bimodal Multicast (Birman et al.): unreliable multicast repaired by gossip rounds, FIFO, \
         probabilistic delivery with losses reported"
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
        Box::new(Gossip::new(self.config(p.settings), p))
    }
}
