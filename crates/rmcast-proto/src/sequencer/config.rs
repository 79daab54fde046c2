//! The configuration of a sequencer group.

use super::packet::{ORDERED_ENTRY_OVERHEAD, ORDERED_FIXED};
use crate::common::parts::MAX_WHOLE;
use crate::common::view::{VIEW_FIXED, VIEW_MEMBER};
use crate::common::Fragmenter;
use crate::registry::{ConfigError, RecoveryPolicy};
use crate::wire::HEADER_LEN;

/// The most members a view can name: a view entry (8 + 4 + 2 + 4n bytes) has a 16-bit length,
/// and its ordered datagram, cut into parts when it is longer than a datagram
/// ([`crate::common::parts`]), must stay within the largest whole datagram.
pub const MAX_VIEW_MEMBERS: usize = {
    let by_length = (u16::MAX as usize - VIEW_FIXED) / VIEW_MEMBER;
    let by_whole = (MAX_WHOLE - HEADER_LEN - ORDERED_FIXED - ORDERED_ENTRY_OVERHEAD - VIEW_FIXED)
        / VIEW_MEMBER;
    if by_length < by_whole {
        by_length
    } else {
        by_whole
    }
};

/// Kernel memory a received datagram takes beyond its UDP payload, at most (Linux's skb
/// truesize: the socket buffer, its shared info, the headers and the allocator's rounding):
/// a datagram of 700 - 1,500 bytes is charged about 2,300 bytes against `SO_RCVBUF`, a
/// 64-byte one about 770.
pub const RECEIVE_OVERHEAD_BYTES: usize = 1536;

/// Configuration of a sequencer group. Every member of a group must use the same values for
/// `group`, `resilience` and `history_capacity_msgs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Group id carried in every header (see [`crate::common::group_id`]).
    pub group: u32,
    /// Resilience degree r: a send completes once r + 1 members hold the message.
    pub resilience: u8,
    /// How messages reach the sequencer: by size ([`Method::Auto`], the default) or always one
    /// way, as the Amoeba paper measured each method.
    pub method: Method,
    /// With [`Method::Auto`], messages of at least this many bytes use the BB method (Amoeba's `g_large`). 512 by
    /// default: with every member sending 1 KiB messages the PB method makes the sequencer
    /// send every byte a second time, and BB (the sequencer sends only accepts) measured about
    /// 8% more messages a second in back-to-back runs on loopback.
    pub large_threshold_bytes: usize,
    /// Largest datagram the engine writes (path MTU minus IP and UDP headers).
    pub max_datagram_bytes: usize,
    /// Largest application message; larger ones are refused with
    /// [`SendError::TooLarge`](crate::SendError::TooLarge).
    pub max_message_bytes: usize,
    /// Slots in the history buffer: the sequencer orders at most this many messages
    /// (fragments) beyond what every member has delivered.
    pub history_capacity_msgs: usize,
    /// Payload bytes the history buffer may hold: the sequencer orders no further while this
    /// many bytes of ordered messages are not yet delivered by every member (the flow control
    /// in bytes, as JGroups' credits are, beside the one in slots). Need not be the same at
    /// every member: only the sequencer's counts. A driver that knows the members' receive
    /// buffers lowers it to what they hold ([`Config::fit_receive_buffer`]), unless the
    /// configuration was given whole.
    pub history_capacity_bytes: usize,
    /// Own messages (fragments) submitted and not yet delivered back, at most.
    pub send_window_msgs: usize,
    /// Payload bytes of own messages submitted and not yet delivered back, at most (the window
    /// in bytes beside the one in messages, as the history has both). With every member
    /// sending datagram-sized messages, the members' windows together must fit a member's
    /// socket receive buffer (4 MiB holds about 1,800 Ethernet-sized datagrams), or bursts
    /// overflow it and repairs take over; small messages, bundled many to a datagram, still
    /// get the deep window in messages (see docs/PERFORMANCE.md).
    pub send_window_bytes: usize,
    /// A member that delivered this many messages without sending reports its state (BC_STATE).
    pub state_interval_msgs: u64,
    /// Initial retransmission timeout for requests and NACKs, before RTT samples adapt it.
    pub retrans_timeout_ms: u64,
    /// Lower bound of the adaptive retransmission timeout of repairs (NACKs, syncs, a leave).
    pub min_retrans_timeout_ms: u64,
    /// Lower bound of a sender's request timer. Under load the round trip to the sequencer is
    /// mostly its queue, which jumps by milliseconds; a timer that fires on a late answer
    /// shrinks the sender's window and repeats requests for nothing (with 5 ms, 10 – 75 such
    /// timeouts per 5 s run with every member sending datagram-sized messages; 25 ms there
    /// removes them, see docs/PERFORMANCE.md).
    pub min_request_timeout_ms: u64,
    /// Upper bound of the adaptive retransmission timeout (after backoff).
    pub max_retrans_timeout_ms: u64,
    /// The sequencer sends BC_SYNC when it has been quiet this long with its tail unconfirmed.
    pub sync_interval_ms: u64,
    /// A joiner repeats its join request this often.
    pub join_retry_ms: u64,
    /// Events (deliveries) held for the application before delivery pauses (back-pressure).
    pub max_pending_events: usize,
    /// Largest group (also bounded by [`MAX_VIEW_MEMBERS`], what a view entry can name). A view
    /// longer than a datagram goes in parts; each member costs the sequencer a member record
    /// (about 100 bytes) and every member 4 bytes in each view entry it holds.
    pub max_members: usize,
    /// How long a departed member (or departing sequencer) is waited for to catch up.
    pub leave_linger_ms: u64,
    /// Datagrams the sequencer sends at most to answer one retransmission request.
    pub max_retrans_datagrams: usize,
    /// A peer not heard from this long is probed (BC_ALIVEREQ): the sequencer watches the
    /// members, a member the sequencer. 0 turns failure detection off.
    pub alive_interval_ms: u64,
    /// Probes without an answer before the peer is declared failed (also: request timeouts
    /// with nothing heard from the sequencer). More retries: fewer false suspicions of a slow
    /// or paused member, slower detection of a crash.
    pub alive_retries: u32,
    /// Shortest wait for the answer to one probe (and one round of the recovery protocol); it
    /// grows with the measured round-trip time. A crash is noticed about
    /// `alive_interval_ms + alive_retries × alive_timeout_ms` after the member was last heard.
    pub alive_timeout_ms: u64,
    /// Reset the group automatically once a failure is found (the policy users of today's
    /// group communication systems expect). Off: the application calls ResetGroup itself
    /// ([`crate::Engine::reset`]), as in the paper.
    pub auto_reset: bool,
    /// Smallest group an automatic reset may form; 0 means a majority of the view the reset
    /// replaces (members whose leave was ordered do not count), so that of two sides of a
    /// partition at most one goes on.
    pub min_members: usize,
}

/// How a member's message reaches the sequencer (Kaashoek and Tanenbaum, section 3.1).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Method {
    /// PB for messages below [`Config::large_threshold_bytes`] (or half a datagram), BB for
    /// larger ones, as Amoeba chooses.
    #[default]
    Auto,
    /// Point-to-point, then broadcast: the sender gives the message to the sequencer, which
    /// broadcasts it with its sequence number (the whole message crosses the network twice,
    /// members are interrupted once).
    Pb,
    /// Broadcast, then broadcast: the sender broadcasts the message, the sequencer a short
    /// accept with its sequence number (the message crosses once, members are interrupted
    /// twice).
    Bb,
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Method::Auto => "auto",
            Method::Pb => "pb",
            Method::Bb => "bb",
        })
    }
}

impl Config {
    /// Defaults for a group id.
    pub fn new(group: u32) -> Self {
        Config {
            group,
            resilience: 0,
            method: Method::Auto,
            large_threshold_bytes: 512,
            max_datagram_bytes: 1472,
            max_message_bytes: 16 << 20,
            // Enough to cover a few milliseconds of scheduling delay at a million small
            // messages a second; the byte bound keeps large messages in check.
            history_capacity_msgs: 16384,
            history_capacity_bytes: 16 << 20,
            send_window_msgs: 1024,
            send_window_bytes: 256 << 10,
            state_interval_msgs: 1024,
            retrans_timeout_ms: 40,
            min_retrans_timeout_ms: 5,
            min_request_timeout_ms: 25,
            max_retrans_timeout_ms: 2000,
            sync_interval_ms: 100,
            join_retry_ms: 100,
            max_pending_events: 8192,
            max_members: 1024,
            leave_linger_ms: 5000,
            max_retrans_datagrams: 32,
            alive_interval_ms: 300,
            alive_retries: 4,
            alive_timeout_ms: 100,
            auto_reset: true,
            min_members: 0,
        }
    }

    /// Payload bytes per fragment, so that one fragment always fits in one ordered datagram.
    pub(super) fn fragment_bytes(&self) -> usize {
        self.max_datagram_bytes - HEADER_LEN - ORDERED_FIXED - ORDERED_ENTRY_OVERHEAD
    }

    /// How messages are split into fragments and bounded when reassembled.
    pub(super) fn fragmenter(&self) -> Fragmenter {
        Fragmenter::new(self.max_message_bytes, self.fragment_bytes())
    }

    /// Messages of at least this many bytes go by the BB method: `large_threshold_bytes`, or
    /// less where datagrams are small. A PB message that fills half an ordered datagram costs
    /// two full datagrams (request and broadcast) where BB costs one and a share of a small
    /// accept: at Ethernet's 1472 bytes, 1 KiB messages from every member halve the traffic.
    pub(super) fn bb_threshold(&self) -> usize {
        match self.method {
            Method::Auto => self.large_threshold_bytes.min(self.fragment_bytes() / 2),
            Method::Pb => usize::MAX,
            Method::Bb => 0,
        }
    }

    /// Bound the history and the send window in bytes by what a member's socket receive
    /// buffer holds (`receive_buffer_bytes`: `SO_RCVBUF` as read back, which counts each
    /// datagram's kernel overhead). The sequencer orders as far ahead of its slowest member as
    /// the history lets it, and everything ordered and not yet delivered may sit in that
    /// member's socket; a history larger than the buffer overflows it when the member is
    /// descheduled, and the lost datagrams wait for repairs whose timer backs off (p99 over
    /// 2 s at 1 KiB in network namespaces with the default 16 MiB history and 8 MiB buffers,
    /// none overflowing with 1 MiB; docs/PERFORMANCE.md).
    ///
    /// The history gets half the buffer, one member's send window an eighth (senders'
    /// messages sent by broadcast wait in the same buffer until ordered), each counted at the
    /// worst case of bundling: a message just over half a fragment travels alone in its
    /// datagram (smaller ones share one, larger ones fill theirs), so its bytes cost the most
    /// kernel memory. Only lowers the bounds; never below one such message.
    /// `history_capacity_msgs` is left alone: every member must have the same.
    pub fn fit_receive_buffer(&mut self, receive_buffer_bytes: usize) {
        let message = self.fragment_bytes() / 2 + 1;
        // Its datagram: the message, the engine's headers, the kernel's overhead.
        let datagram_cost =
            message + (self.max_datagram_bytes - self.fragment_bytes()) + RECEIVE_OVERHEAD_BYTES;
        let fit = |share: usize| (share / datagram_cost).max(1) * message;
        self.history_capacity_bytes = self
            .history_capacity_bytes
            .min(fit(receive_buffer_bytes / 2));
        self.send_window_bytes = self.send_window_bytes.min(fit(receive_buffer_bytes / 8));
    }

    /// The majority policy: resets need a majority of the view (`min_members == 0`), and so a
    /// send completes only once a majority of its view holds the message.
    pub(super) fn majority_policy(&self) -> bool {
        self.min_members == 0
    }

    /// Members other than the sequencer that must hold a message before its send completes,
    /// in a view of `n` members: r, or under the majority policy enough for a majority.
    pub(super) fn completion_holders(&self, n: usize) -> usize {
        let r = self.resilience as usize;
        if self.majority_policy() {
            r.max(n / 2)
        } else {
            r
        }
    }

    pub(super) fn max_members_effective(&self) -> usize {
        self.max_members.min(MAX_VIEW_MEMBERS)
    }

    /// Refuse values the engine cannot work with (typed, so that drivers report them instead of
    /// the engine failing an assertion).
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check_range(
            "max_datagram_bytes",
            self.max_datagram_bytes as u64,
            256,
            crate::wire::MAX_DATAGRAM_LEN as u64,
        )?;
        ConfigError::check_range(
            "history_capacity_msgs",
            self.history_capacity_msgs as u64,
            16,
            u32::MAX as u64,
        )?;
        ConfigError::check_range(
            "history_capacity_bytes",
            self.history_capacity_bytes as u64,
            1,
            u64::MAX,
        )?;
        ConfigError::check_range(
            "send_window_msgs",
            self.send_window_msgs as u64,
            1,
            u64::MAX,
        )?;
        ConfigError::check_range(
            "send_window_bytes",
            self.send_window_bytes as u64,
            1,
            u64::MAX,
        )?;
        for (field, v) in [
            ("min_retrans_timeout_ms", self.min_retrans_timeout_ms),
            ("min_request_timeout_ms", self.min_request_timeout_ms),
        ] {
            // RttEstimator needs its floor at most its ceiling.
            ConfigError::check_range(field, v, 0, self.max_retrans_timeout_ms)?;
        }
        ConfigError::check_range(
            "max_pending_events",
            self.max_pending_events as u64,
            1,
            u64::MAX,
        )?;
        self.recovery_policy().validate()
    }

    /// The failure-detection and reset part of this configuration.
    pub fn recovery_policy(&self) -> RecoveryPolicy {
        RecoveryPolicy {
            alive_interval_ms: self.alive_interval_ms,
            alive_retries: self.alive_retries,
            alive_timeout_ms: self.alive_timeout_ms,
            auto_reset: self.auto_reset,
            min_members: self.min_members,
        }
    }

    /// Write a recovery policy into this configuration.
    pub fn set_recovery_policy(&mut self, p: &RecoveryPolicy) {
        self.alive_interval_ms = p.alive_interval_ms;
        self.alive_retries = p.alive_retries;
        self.alive_timeout_ms = p.alive_timeout_ms;
        self.auto_reset = p.auto_reset;
        self.min_members = p.min_members;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_fits_the_receive_buffer_it_is_given() {
        // 8 MiB read back (4 MiB asked for: the kernel doubles it), Ethernet-sized datagrams.
        let mut c = Config::new(1);
        c.fit_receive_buffer(8 << 20);
        // Half the buffer, each message charged the kernel memory of a datagram of its own.
        let message = c.fragment_bytes() / 2 + 1;
        let cost = message + (1472 - c.fragment_bytes()) + RECEIVE_OVERHEAD_BYTES;
        assert_eq!(c.history_capacity_bytes, (4 << 20) / cost * message);
        // Far below the 16 MiB default, which overflowed members; 1 KiB messages fill about
        // 1,270 slots (1,024 slots measured without overflow).
        assert!(
            c.history_capacity_bytes < 2 << 20,
            "{}",
            c.history_capacity_bytes
        );
        assert!(c.history_capacity_bytes / 1024 > 1024);
        // What the history may hold, counted as the kernel counts it, fits half the buffer.
        assert!(c.history_capacity_bytes / message * cost <= 4 << 20);
        // On loopback's 65,507-byte datagrams the overhead is small: nearly half the buffer.
        let mut lo = Config::new(1);
        lo.max_datagram_bytes = 65507;
        lo.fit_receive_buffer(8 << 20);
        assert!(
            lo.history_capacity_bytes > 3_800_000,
            "{}",
            lo.history_capacity_bytes
        );
        // 8 MiB leave the send window as it was; the stock 208 KiB (416 KiB read back) do not.
        assert_eq!(c.send_window_bytes, Config::new(1).send_window_bytes);
        let mut small = Config::new(1);
        small.fit_receive_buffer(416 << 10);
        assert!(
            small.send_window_bytes < 32 << 10,
            "{}",
            small.send_window_bytes
        );
        assert!(small.history_capacity_bytes < 128 << 10);
        assert!(small.validate().is_ok());
        // The slots stay: every member must agree on them.
        assert_eq!(
            small.history_capacity_msgs,
            Config::new(1).history_capacity_msgs
        );
    }

    #[test]
    fn the_registered_factory_fits_a_known_buffer_and_a_given_config_is_kept() {
        use crate::registry::EngineSettings;
        use crate::sequencer::SequencerFactory;
        let known = EngineSettings {
            receive_buffer_bytes: Some(8 << 20),
            ..EngineSettings::default()
        };
        let fitted = SequencerFactory::DEFAULT.config(1, 1472, &known);
        let mut expected = Config::new(1);
        expected.fit_receive_buffer(8 << 20);
        assert_eq!(
            fitted.history_capacity_bytes,
            expected.history_capacity_bytes
        );
        // Unknown (the simulator): the engine's defaults.
        let unknown = SequencerFactory::DEFAULT.config(1, 1472, &EngineSettings::default());
        assert_eq!(
            unknown.history_capacity_bytes,
            Config::new(1).history_capacity_bytes
        );
        // A configuration given whole is the user's: kept.
        let given = SequencerFactory::with_config(Config::new(1)).config(1, 1472, &known);
        assert_eq!(
            given.history_capacity_bytes,
            Config::new(1).history_capacity_bytes
        );
    }

    #[test]
    fn fitting_only_lowers_and_keeps_one_message() {
        let mut big = Config::new(1);
        big.max_datagram_bytes = 65507;
        big.history_capacity_bytes = 1 << 20;
        big.fit_receive_buffer(1 << 30);
        assert_eq!(big.history_capacity_bytes, 1 << 20);
        let mut tiny = Config::new(1);
        tiny.fit_receive_buffer(1);
        assert_eq!(tiny.history_capacity_bytes, tiny.fragment_bytes() / 2 + 1);
        assert_eq!(tiny.send_window_bytes, tiny.fragment_bytes() / 2 + 1);
        assert!(tiny.validate().is_ok());
    }
}
