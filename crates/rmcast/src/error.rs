//! Errors of the public API.

use bytes::Bytes;
use rmcast_proto::{ConfigError, NodeId, SendError};
use std::fmt;

/// Why an operation on a node or group failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A socket could not be set up.
    #[error("socket error: {0}")]
    Io(#[from] std::io::Error),
    /// The configuration cannot work (checked before any socket or engine exists).
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// Another node of the group already uses this node's id; the join was given up.
    #[error("node id {id} is already used in this group (by the node at {at}); choose another id")]
    DuplicateId {
        /// The id in use.
        id: NodeId,
        /// Where the node that has it sends from.
        at: std::net::SocketAddr,
    },
    /// Nobody admitted this node to the group in time.
    #[error("no member of the group answered the join request in time")]
    JoinTimeout,
    /// The group refused the join: it holds as many members as its engine admits.
    #[error("the group is full: its engine admits at most {limit} members")]
    GroupFull {
        /// The most members the group's engine admits.
        limit: u32,
    },
    /// The leave did not complete in time; the node left without the group's agreement.
    #[error("the group did not confirm the leave in time")]
    LeaveTimeout,
    /// The engine refused the message.
    #[error("message refused: {0}")]
    Send(#[from] SendError),
    /// The group was left or the node shut down.
    #[error("the group is closed (left, or the node shut down)")]
    Closed,
    /// A call did not finish before its deadline.
    #[error("timed out")]
    Timeout,
    /// The engine gave message `msg` up and nobody delivered it (a multicast transaction
    /// that too few receivers answered, or whose receivers fell silent before the commit):
    /// `reason` names the receivers concerned ([`rmcast_proto::Engine::take_failure`]).
    #[error("message {msg} failed: {reason}")]
    Failed {
        /// The number the engine gave the message.
        msg: u64,
        /// Why, naming the receivers.
        reason: String,
    },
    /// A member failed and the group is in recovery mode (Amoeba paper section 5.3): sends fail and
    /// receives with nothing to deliver report this until the group is reset, automatically
    /// or by [`crate::GroupSender::reset`]. Retry the send after [`crate::Recovery::Reset`].
    #[error("member {suspect} failed: the group is in recovery mode until it is reset")]
    MemberFailed {
        /// The member that stopped answering (for most members: the sequencer).
        suspect: NodeId,
    },
    /// This member was left out of the group when it was reset (it was cut off or too slow to
    /// answer); the group is closed here, and a message that had not completed may or may not
    /// have reached the others. Join again to take part.
    #[error("this member was left out of the group by reset (incarnation {incarnation})")]
    Expelled {
        /// The incarnation of the group that left this member out.
        incarnation: u32,
    },
    /// This member's group merged into a larger group of the same name
    /// ([`crate::Recovery::Merging`]) before the message completed: it was not sent in the
    /// group merged into, and may or may not have reached members of the old one. Send again.
    #[error("the group merged into the group of member {into} before this message completed")]
    Merged {
        /// The member that coordinates the group merged into.
        into: NodeId,
    },
}

/// Why [`crate::GroupSender::try_send`] did not take a message; the message is handed back.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TrySendError {
    /// The send queue is full (back-pressure): retry later, e.g. after receiving.
    Full(Bytes),
    /// The group was left or the node shut down.
    Closed(Bytes),
    /// The engine does not serve the requested quality of service
    /// ([`crate::GroupSender::guarantees`]); nothing was queued.
    Unsupported(Bytes),
    /// A member failed and the group is in recovery mode: retry after
    /// [`crate::Recovery::Reset`] (see [`Error::MemberFailed`]).
    MemberFailed {
        /// The member that stopped answering.
        suspect: NodeId,
        /// The message that was not sent.
        payload: Bytes,
    },
}

impl TrySendError {
    /// The message that was not sent.
    pub fn into_inner(self) -> Bytes {
        match self {
            TrySendError::Full(b)
            | TrySendError::Closed(b)
            | TrySendError::Unsupported(b)
            | TrySendError::MemberFailed { payload: b, .. } => b,
        }
    }
}

impl fmt::Debug for TrySendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(b) => write!(f, "Full({} bytes)", b.len()),
            TrySendError::Closed(b) => write!(f, "Closed({} bytes)", b.len()),
            TrySendError::Unsupported(b) => write!(f, "Unsupported({} bytes)", b.len()),
            TrySendError::MemberFailed { suspect, payload } => write!(
                f,
                "MemberFailed {{ suspect: {suspect}, payload: {} bytes }}",
                payload.len()
            ),
        }
    }
}

impl fmt::Display for TrySendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("send queue full, try again later"),
            TrySendError::Closed(_) => f.write_str("the group is closed"),
            TrySendError::Unsupported(_) => f.write_str(&SendError::Unsupported.to_string()),
            TrySendError::MemberFailed { suspect, .. } => write!(
                f,
                "member {suspect} failed: the group is in recovery mode until it is reset"
            ),
        }
    }
}

impl std::error::Error for TrySendError {}
