//! The ring's tunables: bounds on its queues and windows, and its timers. What the wire format
//! fixes (entries per ACK, origins per sync point) stays a constant of [`super::packet`].

use crate::registry::ConfigError;
use crate::wire;
use std::time::Duration;

/// The configuration of a ring engine. [`Config::default`] is what the registry builds.
/// Every member of a ring (and every non-member sending it requests) must use the same
/// `window_msgs` and `client_window`: a member drops packets numbered beyond them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Own messages not yet ordered at most (the send window): sends push back beyond it; a
    /// member keeps a peer's unordered packets only this far beyond its next to order.
    /// Ordered messages wait for stability under `max_unstable`.
    pub window_msgs: u64,
    /// Events held for the driver at most before delivery pauses.
    pub max_events: usize,
    /// Datagrams queued for the driver at most (a token visit's repairs and data fit many
    /// times).
    pub max_out: usize,
    /// Slots ordered but not stable at most: the token site orders no more beyond it.
    pub max_unstable: u64,
    /// A member with this many slots not yet delivered does not accept the token (so that a
    /// slow application stops the ring rather than filling memory).
    pub max_backlog: u64,
    /// ACKs received ahead of the next one to apply, at most.
    pub max_early_acks: u64,
    /// List Change Requests held at most.
    pub max_lcrs: usize,
    /// The most members the ring admits (at most [`super::packet::MAX_MEMBERS`]); a joiner
    /// past it is refused at once. A member costs every member about 30 bytes of ring state
    /// (its place, its next sequence number, its sync point entry) and 16 bytes in each New
    /// List it holds.
    pub max_members: usize,
    /// New Lists that removed a member, kept to answer a late leaver (and leavers whose
    /// missing slots are kept for them).
    pub max_removed: usize,
    /// The members after it in the ring that a member's failure detector watches, at most
    /// (every other member in a ring of up to one more than this). Each member is watched by
    /// as many before it; in a ring of a thousand, watching all made a million probes a token
    /// round.
    pub watched: usize,
    /// A ring of at least this many members admits the joiners waiting together, in one New
    /// List (each New List costs every member a copy of the whole list); a smaller ring one
    /// joiner a New List, as before batches existed (a New List there is small, and the
    /// real-process runs were measured so). With 1 the formation and every-engine sweeps pass
    /// 10,000 seeds (their `ring-batched`), but not every seed past that (docs/RELIABILITY.md).
    pub batch_joins_from: usize,
    /// In a ring that batches joins, they wait this long per member of the ring after the last
    /// New List, so that the joiners asking meanwhile come together: 20 ms at a thousand.
    pub join_gather: Duration,
    /// How long a token site with nothing to order waits before it passes a NULL ACK.
    pub null_delay: Duration,
    /// First wait before the token is passed again when the next site did not take it.
    pub pass_retry: Duration,
    /// Longest wait between two passes of the same token (exponential backoff).
    pub pass_retry_max: Duration,
    /// Own unordered data is sent again after the retransmission timeout (section 4.6: RTT
    /// variance estimation, doubled on every expiry and clamped): its first value.
    pub data_retry: Duration,
    /// The retransmission timeout's floor.
    pub data_retry_min: Duration,
    /// The retransmission timeout's ceiling.
    pub data_retry_max: Duration,
    /// Own data packets sent again per retry at most.
    pub data_retry_burst: u64,
    /// The smallest packet Fig. 4.2 sends (the silly-window rule waits for more room).
    pub min_packet: usize,
    /// The byte window's first size (section 4.6); its floor is one largest packet.
    pub window_initial_bytes: usize,
    /// The byte window's largest size.
    pub window_max_bytes: usize,
    /// Own messages reported lost by NACKs remembered (RMP keeps three).
    pub loss_cache: usize,
    /// List Change Requests are repeated this often.
    pub lcr_retry: Duration,
    /// Grace before a gap is asked for (reordered datagrams arrive in it).
    pub nack_grace: Duration,
    /// NACK retry (at least; more when the token's round is measured to take longer).
    pub nack_retry: Duration,
    /// The NACK retry's ceiling (it follows the measured round up to it; the stall wait up to
    /// twice it).
    pub nack_retry_max: Duration,
    /// Unanswered NACKs to the last token site before the ring is asked (its owners first),
    /// and as many again before every member that holds what is missing answers (so that one
    /// lossy member does not draw an answer from every member of a busy ring).
    pub nack_escalate: u32,
    /// A member waiting for stability or its leave asks for ACKs after this long without one.
    pub stall: Duration,
    /// A quiescent ring looks for crashed members this often (a probing round).
    pub idle_probe: Duration,
    /// How long slots a leaver may lack are kept for it when its goodbye is not heard.
    pub depart_linger: Duration,
    /// A round of the reformation (section 4.4): the initiator repeats its Start, members
    /// their answers.
    pub reform_round: Duration,
    /// Rounds without progress towards the shared sync point before the initiator forms the
    /// list from the members that reached it ("after a set number of retries").
    pub stalled_rounds: u32,
    /// Rounds of the commit's first phase without every acknowledgement before the initiator
    /// gives up this version and starts again.
    pub commit_rounds: u32,
    /// Expelled notices per peer at most this often.
    pub expelled_every: Duration,
    /// Peers remembered for that limit.
    pub expelled_peers: usize,
    /// A non-member's requests unacknowledged at most (its window; members drop its packets
    /// beyond it).
    pub client_window: usize,
    /// Replies (and hand-overs) kept to answer duplicates with the repeat-reply flag.
    pub reply_cache: usize,
    /// A non-member's first retransmission timeout.
    pub client_rto: Duration,
    /// A non-member's largest retransmission timeout.
    pub client_rto_max: Duration,
    /// Retries of an unacknowledged request before the first-packet flag is set again (the
    /// ring may have flushed this sender's entry).
    pub first_after_tries: u32,
    /// Retries of a request before it is given up.
    pub give_up_tries: u32,
    /// Lock requests are repeated this often until ordered.
    pub lock_retry: Duration,
    /// The largest message. One larger than a datagram goes in fragments, each a message of
    /// its own in the ring's order, and is put together again at delivery, at most this large
    /// (one partly assembled message per sender). A message is also refused when its
    /// fragments could never all be in the send window together (more than
    /// [`Config::window_msgs`] of them, or than [`Config::max_out`] datagrams): it would
    /// wedge the sender; or ordered in one ACK (more than [`Config::max_unstable`] or
    /// [`super::packet::MAX_ENTRIES`]), which the token site does so that no membership
    /// change falls inside a message. 1 MiB by default, as the gossip engine's: 732 fragments of a
    /// 1,472-byte datagram, within the default window of 1,024 messages, so that the largest
    /// message goes in one window on Ethernet, and a sixteenth of the byte window's ceiling.
    pub max_message_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            window_msgs: 1024,
            max_events: 1024,
            max_out: 8192,
            max_unstable: 4096,
            max_backlog: 2048,
            max_early_acks: 512,
            max_lcrs: 32,
            max_members: 1024,
            max_removed: 16,
            watched: 16,
            batch_joins_from: 64,
            join_gather: Duration::from_micros(20),
            null_delay: Duration::from_millis(2),
            pass_retry: Duration::from_millis(20),
            pass_retry_max: Duration::from_millis(320),
            data_retry: Duration::from_millis(40),
            data_retry_min: Duration::from_millis(10),
            data_retry_max: Duration::from_secs(2),
            data_retry_burst: 32,
            min_packet: 256,
            window_initial_bytes: 64 * 1024,
            window_max_bytes: 16 * 1024 * 1024,
            loss_cache: 3,
            lcr_retry: Duration::from_millis(50),
            nack_grace: Duration::from_millis(3),
            nack_retry: Duration::from_millis(25),
            nack_retry_max: Duration::from_millis(320),
            nack_escalate: 2,
            stall: Duration::from_millis(60),
            idle_probe: Duration::from_secs(2),
            depart_linger: Duration::from_secs(2),
            reform_round: Duration::from_millis(30),
            stalled_rounds: 4,
            commit_rounds: 10,
            expelled_every: Duration::from_millis(100),
            expelled_peers: 64,
            client_window: 64,
            reply_cache: 256,
            client_rto: Duration::from_millis(30),
            client_rto_max: Duration::from_secs(1),
            first_after_tries: 3,
            give_up_tries: 40,
            lock_retry: Duration::from_millis(50),
            max_message_bytes: 1 << 20,
        }
    }
}

impl Config {
    /// The most fragments one message may have: all of them must fit the send window, the
    /// datagram queue, the token site's bound on unstable slots and one ACK. A sender refuses a
    /// message needing more (`TooLarge`), and a receiver any fragment announcing more,
    /// whatever the datagram size of either.
    pub fn max_fragments(&self) -> usize {
        (self.window_msgs.min(self.max_unstable) as usize)
            .min(super::packet::MAX_ENTRIES)
            .min(self.max_out.saturating_sub(1))
            .min(usize::from(u16::MAX))
    }

    /// Refuse values the ring cannot work with: a bound of zero would stop it for good.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let zero = [
            ("window_msgs", self.window_msgs == 0),
            ("max_events", self.max_events == 0),
            ("max_out", self.max_out == 0),
            ("max_unstable", self.max_unstable == 0),
            ("max_early_acks", self.max_early_acks == 0),
            ("max_lcrs", self.max_lcrs == 0),
            ("watched", self.watched == 0),
            ("max_members", self.max_members < 2),
            ("client_window", self.client_window == 0),
            ("data_retry_burst", self.data_retry_burst == 0),
            ("window_initial_bytes", self.window_initial_bytes == 0),
            ("reform_round", self.reform_round.is_zero()),
            ("max_message_bytes", self.max_message_bytes == 0),
        ];
        for (field, bad) in zero {
            if bad {
                return Err(ConfigError::Invalid {
                    field,
                    reason: "must be more than 0",
                });
            }
        }
        let above = [
            ("data_retry_min", self.data_retry_min > self.data_retry_max),
            ("pass_retry", self.pass_retry > self.pass_retry_max),
            ("nack_retry", self.nack_retry > self.nack_retry_max),
            ("client_rto", self.client_rto > self.client_rto_max),
            // A member keeps one origin's unordered packets within this span.
            (
                "window_msgs",
                self.window_msgs > super::order::DataList::MAX_SPAN,
            ),
            (
                "client_window",
                self.client_window as u64 > super::order::DataList::MAX_SPAN,
            ),
        ];
        for (field, bad) in above {
            if bad {
                return Err(ConfigError::Invalid {
                    field,
                    reason: "is above its largest value",
                });
            }
        }
        // Its fragments must fit the window of messages even in the largest datagrams; the
        // datagram size is the driver's, so submit refuses what does not fit smaller ones.
        let most = self.max_fragments() as u64
            * super::packet::fragment_bytes(wire::MAX_DATAGRAM_LEN) as u64;
        if self.max_message_bytes as u64 > most {
            return Err(ConfigError::Invalid {
                field: "max_message_bytes",
                reason: "needs more fragments than window_msgs (or max_out, max_unstable, one ACK's entries) even in the largest datagrams",
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_zero_bounds_are_refused() {
        assert!(Config::default().validate().is_ok());
        let bad = Config {
            max_unstable: 0,
            ..Config::default()
        };
        let err = bad.validate().unwrap_err();
        assert!(err.to_string().contains("max_unstable"), "{err}");
    }
}
