//! The sans-IO engine interface shared by every protocol (DESIGN section 2).
//!
//! An engine never reads a socket, a clock or a global RNG. The driver (the simulator or the
//! runtime) passes the current [`Time`] and each received datagram in, and drains what the engine
//! wants done: datagrams to transmit, events for the application, and the next timer deadline.

use bytes::Bytes;
use std::fmt;
use std::time::Duration;

/// A point in time, in nanoseconds since an arbitrary origin chosen by the driver.
///
/// Engines only compare and add times, so the simulator can run on virtual time and the runtime
/// on a monotonic clock, and a run is reproducible bit for bit from its seed.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub u64);

impl Time {
    /// The origin.
    pub const ZERO: Time = Time(0);

    /// Nanoseconds since the origin.
    pub fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl std::ops::Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        Time(
            self.0
                .saturating_add(d.as_nanos().min(u64::MAX as u128) as u64),
        )
    }
}

/// Identity of a node (a process taking part in groups). Chosen by the node, unique in a group.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a datagram goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Destination {
    /// Every member of the group (IP multicast, or unicast fan-out where multicast is missing).
    /// The sender's own copy, if the network loops it back, is ignored by the engine.
    Group,
    /// One node, point to point.
    Peer(NodeId),
}

/// Per-message quality of service (RMP section 2.3). Engines that order everything the same way
/// (the sequencer) deliver at least what is asked and say so in their docs.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Qos {
    /// Best effort: may be lost.
    Unreliable,
    /// Delivered once to every member, no order promised.
    Reliable,
    /// FIFO per sender.
    SourceOrdered,
    /// Same total order at every member.
    #[default]
    TotallyOrdered,
    /// Totally ordered and held by `k` members other than the sender before it is delivered.
    KResilient(u8),
}

/// A message delivered to the application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Position in the group's total order (never reused in the life of the group). For a
    /// fragmented message, the position of its last fragment.
    pub seq: u64,
    /// The original sender.
    pub sender: NodeId,
    /// The sender's own message number (what its `submit` returned).
    pub msg: u64,
    /// The view in which the message is delivered.
    pub view: u64,
    /// The application payload.
    pub payload: Bytes,
}

/// A membership view installed at this member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// View identifier, increasing by one at every membership change.
    pub id: u64,
    /// Position in the total order of the event that installed the view.
    pub seq: u64,
    /// Members in rank order (oldest first).
    pub members: Vec<NodeId>,
    /// The member that orders messages in this view (sequencer engines), or the coordinator.
    pub coordinator: NodeId,
    /// The member that joined with this view, if any.
    pub joined: Option<NodeId>,
    /// The member that left with this view, if any.
    pub left: Option<NodeId>,
}

/// What an engine tells the application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A message delivered in order.
    Deliver(Delivery),
    /// A new view was installed (also the first view at a joiner or creator).
    View(View),
    /// A message this member submitted is now stable with the promised resilience.
    SendComplete {
        /// The number `submit` returned.
        msg: u64,
    },
    /// This member left the group; the engine does nothing more.
    Left,
    /// Crash recovery: a member failed, the group was reset, or this member was left out
    /// (seed 002 section 5.3). After [`Recovery::Expelled`] the engine does nothing more.
    Recovery(Recovery),
}

/// What happens to a group when members crash (seed 002 section 5.3): a failure is found, the
/// group is in recovery mode, and ResetGroup rebuilds it without the members that did not answer.
/// Engines emit it inside [`Event::Recovery`]; the simulator records it and the runtime hands it
/// to the application unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// A member was found failed (it answered no probe, or a request, in time): the group is in
    /// recovery mode until it is reset. Sends fail meanwhile (the engine's `submit` with
    /// [`SendError::GroupFailed`]); what was already accepted is still delivered.
    Failed {
        /// The member that did not answer (for a member: usually the sequencer).
        suspect: NodeId,
    },
    /// A reset attempt found fewer reachable members than required; the group stays in recovery
    /// mode, waits and the engine tries again.
    ResetFailed {
        /// Members that answered the invitation, this one included.
        reachable: usize,
        /// Members required.
        needed: usize,
    },
    /// The group was rebuilt by ResetGroup: it has a new incarnation and leaves out the members
    /// that did not answer. Comes in order, just before the view of the new group; sends work
    /// again from here on.
    Reset {
        /// The new incarnation.
        incarnation: u32,
        /// Members of the old view that the new group leaves out.
        removed: Vec<NodeId>,
    },
    /// The group was rebuilt without this member (it was cut off or too slow to answer): it is
    /// no longer a member and its engine does nothing more. The application may join again.
    Expelled {
        /// The incarnation of the group that left it out.
        incarnation: u32,
    },
}

/// Why `submit` refused a message. Nothing is ever dropped silently: the caller keeps the data.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SendError {
    /// The send window or history buffer is full: retry after a `SendComplete` (back-pressure).
    WouldBlock,
    /// The message is larger than the configured maximum message size.
    TooLarge,
    /// This node is not (yet, or any more) a member of the group.
    NotMember,
    /// The engine does not offer the requested quality of service.
    Unsupported,
    /// A member failed and the group is in recovery mode: nothing is sent until it is reset.
    GroupFailed,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SendError::WouldBlock => "send window full, try again after a send completes",
            SendError::TooLarge => "message larger than max_message_bytes",
            SendError::NotMember => "not a member of the group",
            SendError::Unsupported => "quality of service not supported by this engine",
            SendError::GroupFailed => "a member failed: the group must be reset first",
        })
    }
}

impl std::error::Error for SendError {}

/// A snapshot of a group as one member sees it (Amoeba's GetInfoGroup).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupInfo {
    /// This member.
    pub me: NodeId,
    /// Current view id (0 before the first view).
    pub view: u64,
    /// Members in rank order.
    pub members: Vec<NodeId>,
    /// This member's rank (position in `members`), if it is a member.
    pub rank: Option<usize>,
    /// The sequencer or coordinator.
    pub coordinator: Option<NodeId>,
    /// Whether the group is in recovery mode (a failure was found and no reset completed yet).
    pub recovering: bool,
    /// Resilience degree r.
    pub resilience: u8,
    /// Group incarnation (bumped by recovery).
    pub incarnation: u32,
    /// Messages held in the history buffer.
    pub history_used: usize,
    /// Capacity of the history buffer.
    pub history_capacity: usize,
}

/// Counters every engine keeps (Aeron's system counters are the model). Read them through
/// [`Engine::counters`]; engines only ever add to them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Datagrams handed to the driver.
    pub datagrams_sent: u64,
    /// Bytes in those datagrams.
    pub bytes_sent: u64,
    /// Datagrams received and accepted for processing.
    pub datagrams_received: u64,
    /// Datagrams dropped because they did not decode.
    pub malformed_dropped: u64,
    /// Datagrams for another group, incarnation or engine, dropped.
    pub foreign_dropped: u64,
    /// Data messages (or fragments) received that were already held.
    pub duplicates: u64,
    /// Retransmission requests (NACKs) sent.
    pub nacks_sent: u64,
    /// Retransmission requests received.
    pub nacks_received: u64,
    /// Messages (or fragments) retransmitted.
    pub retransmissions: u64,
    /// Status / acknowledgement datagrams sent.
    pub acks_sent: u64,
    /// Synchronisation requests sent (BC_SYNC).
    pub syncs_sent: u64,
    /// Requests turned away for lack of room; the sender keeps and retries them.
    pub backpressure_refusals: u64,
    /// Messages delivered to the application.
    pub delivered: u64,
    /// Messages submitted by the application.
    pub submitted: u64,
    /// View changes installed.
    pub view_changes: u64,
    /// Failure-detection datagrams sent (probes and their answers); background traffic that
    /// depends on time, not on the number of messages.
    pub probes_sent: u64,
    /// Failures this member detected itself (a member that answered no probe in time).
    pub failures_detected: u64,
    /// Recovery datagrams sent (invitations, votes, results and their acknowledgements).
    pub recovery_sent: u64,
    /// Resets this member completed (new incarnations installed).
    pub resets: u64,
}

/// A protocol engine driven by a simulator or a runtime.
pub trait Engine {
    /// Process one received datagram. Malformed or foreign datagrams are counted and dropped.
    fn handle_datagram(&mut self, now: Time, from: NodeId, datagram: &[u8]);

    /// Let timers that are due fire. Call when [`Engine::poll_timeout`] has passed.
    fn handle_timeout(&mut self, now: Time);

    /// Submit a message for multicast; returns the sender's message number. Back-pressure is an
    /// error, never a silent drop.
    fn submit(&mut self, now: Time, payload: Bytes, qos: Qos) -> Result<u64, SendError>;

    /// Start leaving the group; [`Event::Left`] follows once the leave is ordered.
    fn leave(&mut self, now: Time);

    /// Write the next datagram into `buf` (cleared first) and return where it goes.
    fn poll_transmit(&mut self, now: Time, buf: &mut Vec<u8>) -> Option<Destination>;

    /// Next event for the application.
    fn poll_event(&mut self) -> Option<Event>;

    /// When [`Engine::handle_timeout`] must be called next.
    fn poll_timeout(&self) -> Option<Time>;

    /// This node's identity.
    fn node_id(&self) -> NodeId;

    /// A snapshot of the group as this member sees it.
    fn info(&self) -> GroupInfo;

    /// The engine's counters.
    fn counters(&self) -> &Counters;

    /// Whether the application may submit now without getting [`SendError::WouldBlock`].
    fn can_submit(&self) -> bool;

    /// Rebuild the group after a failure from the members that can still communicate
    /// (Amoeba's ResetGroup): succeeds with a [`Recovery::Reset`] once a group of at least
    /// `min_members` is formed, or reports [`Recovery::ResetFailed`] and keeps trying. Engines
    /// without crash recovery answer [`SendError::Unsupported`].
    fn reset(&mut self, now: Time, min_members: usize) -> Result<(), SendError> {
        let _ = (now, min_members);
        Err(SendError::Unsupported)
    }

    /// A one-line description of the engine's protocol state, for diagnosing a failed run.
    fn describe(&self) -> String {
        String::new()
    }
}
