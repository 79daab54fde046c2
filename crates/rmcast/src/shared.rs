//! What the application's handles ([`crate::node`]) and the I/O thread ([`crate::io`]) share:
//! the queued operations and control commands, the per-group and per-node shared state, and the
//! runtime's counters. Both modules depend on this one, not on each other.

use crate::config::GroupConfig;
use crate::error::Error;
use bytes::Bytes;
use rmcast_proto::{Counters, Event, GroupInfo, NodeId, Qos};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Operations that must stay in order with the messages sent before them, so they share the
/// per-group send queue.
pub(crate) enum Op {
    /// Submit a message; `done` is told once it is stable (blocking and async sends only).
    Send {
        payload: Bytes,
        qos: Qos,
        done: Option<oneshot::Sender<Result<u64, Error>>>,
    },
    /// Answer message `request` of member `to` ([`rmcast_proto::Engine::reply`]); `done` is
    /// told once the engine took the answer.
    Reply {
        to: NodeId,
        request: u64,
        payload: Bytes,
        done: oneshot::Sender<Result<(), Error>>,
    },
    /// A request from outside the group or a lock request ([`EngineCall`]); `done` is told
    /// the request's number (0 for a lock) once the engine took it.
    Call {
        call: EngineCall,
        done: oneshot::Sender<Result<u64, Error>>,
    },
    /// Leave once every message queued before has been sent.
    Leave {
        timeout: Duration,
        reply: oneshot::Sender<Result<(), Error>>,
    },
}

/// What an [`Op::Call`] asks of the engine.
pub(crate) enum EngineCall {
    /// [`rmcast_proto::Engine::request`].
    Request {
        payload: Bytes,
        qos: Qos,
        handler: Option<u8>,
    },
    /// [`rmcast_proto::Engine::lock`].
    Lock { lock: u16, acquire: bool },
    /// [`rmcast_proto::Engine::forward`].
    Forward {
        to: NodeId,
        sender: NodeId,
        request: u64,
        payload: Bytes,
    },
}

/// Control requests, rare and unordered with respect to messages.
pub(crate) enum Command {
    Open(Box<OpenRequest>),
    Info {
        key: u64,
        reply: std_mpsc::SyncSender<Option<Snapshot>>,
    },
    /// ResetGroup on the group's engine.
    Reset {
        key: u64,
        min_members: usize,
        reply: std_mpsc::SyncSender<Result<(), Error>>,
    },
    Shutdown,
}

/// What [`Command::Info`] reads from an engine: its view of the group, its counters and the
/// counters only it keeps.
pub(crate) type Snapshot = (GroupInfo, Counters, Vec<(&'static str, u64)>);

/// Everything the I/O thread needs to run a new group.
pub(crate) struct OpenRequest {
    pub key: u64,
    pub cfg: GroupConfig,
    pub multicast: Option<UdpSocket>,
    pub ops: mpsc::Receiver<Op>,
    /// The group's events ([`crate::GroupEvent`]).
    pub events: mpsc::Sender<Event>,
    pub shared: Arc<GroupShared>,
    /// `Ok(created)` once the node is a member; an async channel, so that
    /// [`crate::Node::open_group_async`] awaits it without a thread of its own.
    pub reply: oneshot::Sender<Result<bool, Error>>,
}

/// State shared by the I/O thread and a group's handles.
#[derive(Default)]
pub(crate) struct GroupShared {
    /// Set by the I/O thread when the event queue was full and it stopped taking events from the
    /// engine; the next receive wakes it.
    pub events_stalled: AtomicBool,
    /// Recovery mode as the application is told it: [`RECOVERING`] plus the suspect's id from
    /// the moment the I/O thread queues [`Recovery::Failed`] until it queues the
    /// [`Recovery::Reset`] (or the expulsion); 0 otherwise. One atomic, so that a handle
    /// reads the flag and the suspect together.
    pub recovering: AtomicU64,
    /// Time from submit to completion of own messages, written by the I/O thread.
    pub send_latency: crate::latency::LatencyCells,
}

/// Bit of [`GroupShared::recovering`] that says recovery mode is on (node ids are 32 bits).
pub(crate) const RECOVERING: u64 = 1 << 32;

impl GroupShared {
    /// The suspect, while the group is in recovery mode.
    pub fn suspect(&self) -> Option<NodeId> {
        let v = self.recovering.load(Ordering::Acquire);
        (v & RECOVERING != 0).then_some(NodeId(v as u32))
    }

    /// Recovery mode on (`Some(suspect)`) or off.
    pub fn set_recovering(&self, suspect: Option<NodeId>) {
        let v = suspect.map_or(0, |s| RECOVERING | u64::from(s.0));
        self.recovering.store(v, Ordering::Release);
    }

    pub fn member_failed(&self) -> Result<(), Error> {
        match self.suspect() {
            Some(suspect) => Err(Error::MemberFailed { suspect }),
            None => Ok(()),
        }
    }
}

/// State shared by the I/O thread and the node's handles.
pub(crate) struct NodeShared {
    pub id: NodeId,
    pub local_addr: SocketAddr,
    pub interface: IpAddr,
    /// The IPv6 multicast interface ([`crate::net::multicast_index`]); `None` for IPv4.
    pub multicast_index: Option<u32>,
    pub socket_buffer_bytes: usize,
    /// The unicast socket's receive buffer as the kernel granted it
    /// ([`crate::net::receive_buffer_bytes`]).
    pub receive_buffer_bytes: Option<usize>,
    /// Whether sockets receive runs of datagrams at once
    /// ([`crate::NodeConfig::receive_offload`]).
    pub receive_offload: bool,
    pub waker: mio::Waker,
    pub wake_pending: AtomicBool,
    pub commands: std_mpsc::SyncSender<Command>,
    pub counters: AtomicNodeCounters,
}

impl NodeShared {
    /// Wake the I/O thread unless a wake is already pending.
    pub fn wake(&self) {
        if !self.wake_pending.swap(true, Ordering::AcqRel) {
            // A failed wake means the I/O thread is gone; calls then fail on their channels.
            let _ = self.waker.wake();
        }
    }

    pub fn command(&self, c: Command) -> Result<(), Error> {
        self.commands.send(c).map_err(|_| Error::Closed)?;
        self.wake();
        Ok(())
    }
}

macro_rules! node_counters {
    ($($(#[doc = $doc:literal])* $name:ident),* $(,)?) => {
        /// The runtime's own counters (the engines keep theirs: [`crate::GroupSender::counters`]).
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct NodeCounters {
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        impl NodeCounters {
            /// Every counter with its name and its documentation's first paragraph, in
            /// declaration order (as [`rmcast_proto::Counters::described`]).
            pub fn described(&self) -> Vec<rmcast_proto::CounterField> {
                vec![$(rmcast_proto::CounterField {
                    name: stringify!($name),
                    help: rmcast_proto::first_paragraph(&[$($doc),*]),
                    value: self.$name,
                },)*]
            }
        }

        /// Written by the I/O thread only; read by anyone.
        #[derive(Default)]
        pub(crate) struct AtomicNodeCounters {
            $(pub $name: AtomicU64,)*
        }

        impl AtomicNodeCounters {
            pub(crate) fn snapshot(&self) -> NodeCounters {
                NodeCounters { $($name: self.$name.load(Ordering::Relaxed),)* }
            }
        }
    };
}

node_counters! {
    /// Datagrams read from the sockets.
    datagrams_received,
    /// Bytes in those datagrams.
    bytes_received,
    /// Datagrams written to the network (a unicast fan-out counts once per peer).
    datagrams_sent,
    /// Bytes in those datagrams.
    bytes_sent,
    /// Sends that failed with an error other than `WouldBlock` (the protocol retransmits).
    send_errors,
    /// Sends deferred because the socket buffer was full.
    send_deferred,
    /// Receive errors other than `WouldBlock`.
    recv_errors,
    /// Datagrams the kernel dropped because a socket's receive buffer was full (Linux's
    /// `SO_RXQ_OVFL`, learnt with the next datagram read from that socket): this node fell
    /// further behind its peers than its buffers hold (`NodeConfig::socket_buffer_bytes`).
    receive_buffer_drops,
    /// Datagrams that did not decode (also passed to the engines of groups without a key,
    /// which count them too).
    malformed,
    /// Datagrams for a group this node is not in.
    foreign_dropped,
    /// Our own multicast datagrams looped back by the network, dropped before the engine.
    own_echoes,
    /// Datagrams for one peer sent to the whole group because the peer's address is unknown.
    peer_unknown,
    /// HELLO datagrams sent (address exchange among the members of a view, requests and
    /// answers; a unicast fan-out counts once).
    hellos_sent,
    /// HELLO datagrams received.
    hellos_received,
    /// Messages an engine refused (other than back-pressure) with nobody waiting to be told.
    submit_refused,
    /// Times the event queue was full and the runtime paused taking events from an engine.
    event_queue_stalls,
    /// Iterations of the event loop.
    loop_iterations,
    /// Secure groups: datagrams that failed verification (forged or altered: bad tag, or a
    /// nonce naming another sender than the header), dropped before the engine.
    auth_failed,
    /// Secure groups: datagrams sealed with a key id the group does not hold, dropped.
    auth_unknown_key,
    /// Secure groups: datagrams without an authentication block, dropped (those that do not
    /// decode at all count as `malformed`).
    auth_missing,
    /// Groups without a key: datagrams carrying an authentication block, dropped.
    auth_unexpected,
    /// Secure groups: verified-looking datagrams refused by the sender's replay window (seen
    /// before, or too old to tell), dropped.
    replays_dropped,
    /// Secure groups: datagrams an engine wrote that could not be sealed (not sent; a bug).
    seal_errors,
    /// Groups without a key: unicasts held back or dropped because their address is not
    /// validated yet and was already sent three times the bytes it sent
    /// (`crate::peers`: no amplification); held ones go once it answers its challenge.
    amplification_limited,
    /// Of those, the ones dropped: the hold was full, or the address did not validate in
    /// time (the engine repairs them as lost datagrams).
    amplification_dropped,
    /// Groups without a key: path challenges sent to addresses not yet validated.
    path_challenges,
    /// Groups without a key: addresses validated by a path response.
    paths_validated,
    /// Groups without a key: datagrams with a known peer's id from an address other than its
    /// validated one; processed, but the peer's unicasts stay at the validated address until
    /// the new one answers a challenge.
    peer_address_kept,
    /// Secure groups: session challenges sent (`crate::sessions`): a datagram came from a sender
    /// session this group has not confirmed live (once per retry interval and address).
    session_challenges,
    /// Secure groups: sender sessions confirmed by an answer to their challenge.
    sessions_confirmed,
    /// Secure groups: datagrams of unconfirmed sessions held back from the engine until their
    /// session answers its challenge.
    session_held,
    /// Of those, the ones handed to the engine once their session answered.
    session_released,
    /// Of those, the ones dropped: their session did not answer in time (a capture of a
    /// session that is gone, replayed), or the hold was full (the oldest go first).
    session_dropped,
    /// Of the datagrams received, those that came several to one receive (UDP generic receive
    /// offload: a sender's segmented send, or datagrams a device coalesced) and were cut apart
    /// here.
    datagrams_coalesced,
    /// Testing: received datagrams dropped at random by [`NodeConfig::receive_loss`]
    /// (`RMCAST_RECEIVE_LOSS`), before any engine saw them; 0 unless it is set.
    ///
    /// [`NodeConfig::receive_loss`]: crate::NodeConfig::receive_loss
    loss_shim_dropped,
}

impl AtomicNodeCounters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        // Only the I/O thread writes, so load and store need no read-modify-write.
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
}
