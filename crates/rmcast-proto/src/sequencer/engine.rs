//! The sequencer state machine.

use crate::engine::{
    Counters, Destination, Engine, Event, GroupInfo, NodeId, Qos, SendError, Time,
};
use bytes::Bytes;

/// Configuration of a sequencer group. Every member of a group must use the same values for
/// `group`, `resilience` and `history_capacity_msgs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Group id carried in every header (see [`crate::common::group_id`]).
    pub group: u32,
    /// Resilience degree r: a send completes once r + 1 members hold the message.
    pub resilience: u8,
    /// Messages of at least this many bytes use the BB method (Amoeba's `g_large`).
    pub large_threshold_bytes: usize,
    /// Largest datagram the engine writes (path MTU minus IP and UDP headers).
    pub max_datagram_bytes: usize,
    /// Largest application message; larger ones are refused with [`SendError::TooLarge`].
    pub max_message_bytes: usize,
    /// Slots in the history buffer.
    pub history_capacity_msgs: usize,
    /// Own messages (fragments) submitted and not yet delivered back, at most.
    pub send_window_msgs: usize,
    /// A member that delivered this many messages without sending reports its state (BC_STATE).
    pub state_interval_msgs: u64,
    /// Retransmission timeout for requests and NACKs.
    pub retrans_timeout_ms: u64,
    /// The sequencer sends BC_SYNC when its tail stays unconfirmed this long.
    pub sync_interval_ms: u64,
    /// A joiner repeats its join request this often.
    pub join_retry_ms: u64,
    /// Events (deliveries) held for the application before delivery pauses (back-pressure).
    pub max_pending_events: usize,
    /// Largest group.
    pub max_members: usize,
    /// How long a departed member (or departing sequencer) is waited for to catch up.
    pub leave_linger_ms: u64,
}

impl Config {
    /// Defaults for a group id.
    pub fn new(group: u32) -> Self {
        Config {
            group,
            resilience: 0,
            large_threshold_bytes: 1400,
            max_datagram_bytes: 1472,
            max_message_bytes: 16 << 20,
            history_capacity_msgs: 4096,
            send_window_msgs: 1024,
            state_interval_msgs: 1024,
            retrans_timeout_ms: 40,
            sync_interval_ms: 100,
            join_retry_ms: 100,
            max_pending_events: 8192,
            max_members: 1024,
            leave_linger_ms: 1000,
        }
    }
}

/// One member's instance of the sequencer protocol; it becomes the sequencer when it creates the
/// group or inherits the role.
pub struct Sequencer {
    _cfg: Config,
}

impl Sequencer {
    /// Create a new group with this node as its only member and sequencer.
    pub fn create(cfg: Config, me: NodeId, now: Time) -> Sequencer {
        let _ = (me, now);
        Sequencer { _cfg: cfg }
    }

    /// Start joining an existing group; a [`Event::View`] including this node follows.
    pub fn join(cfg: Config, me: NodeId, now: Time) -> Sequencer {
        let _ = (me, now);
        Sequencer { _cfg: cfg }
    }
}

impl Engine for Sequencer {
    fn handle_datagram(&mut self, _now: Time, _from: NodeId, _datagram: &[u8]) {
        todo!()
    }
    fn handle_timeout(&mut self, _now: Time) {
        todo!()
    }
    fn submit(&mut self, _now: Time, _payload: Bytes, _qos: Qos) -> Result<u64, SendError> {
        todo!()
    }
    fn leave(&mut self, _now: Time) {
        todo!()
    }
    fn poll_transmit(&mut self, _now: Time, _buf: &mut Vec<u8>) -> Option<Destination> {
        todo!()
    }
    fn poll_event(&mut self) -> Option<Event> {
        todo!()
    }
    fn poll_timeout(&self) -> Option<Time> {
        todo!()
    }
    fn node_id(&self) -> NodeId {
        todo!()
    }
    fn info(&self) -> GroupInfo {
        todo!()
    }
    fn counters(&self) -> &Counters {
        todo!()
    }
    fn can_submit(&self) -> bool {
        todo!()
    }
}
