//! rmcast: reliable multicast groups over UDP/IP (docs/ARCHITECTURE.md).
//!
//! A [`Node`] is one process's presence on the network: one unicast UDP socket, one I/O thread
//! running a `mio` event loop, and the protocol engines of the groups it belongs to. The engines
//! are the sans-IO state machines of [`rmcast_proto`]; the I/O thread feeds them datagrams and the
//! time, and carries out what they ask: datagrams to send, events for the application, timers.
//!
//! The application talks to the I/O thread through bounded channels, so memory stays bounded and a
//! full queue pushes back instead of dropping:
//!
//! * sending (on [`GroupSender`], which a [`Group`] dereferences to, cheap to clone for other
//!   threads): [`GroupSender::send`] (blocks until the message is stable with the group's
//!   resilience), [`GroupSender::try_send`] (never blocks; hands the payload back on
//!   back-pressure), [`GroupSender::send_nowait`] (blocks only on back-pressure) and
//!   [`GroupSender::send_async`];
//! * receiving: [`Group::recv`], [`Group::recv_timeout`], [`Group::try_recv`] and
//!   [`Group::recv_async`] (any async runtime; no tokio runtime is needed);
//! * per-message quality of service: the `_with` variants ([`GroupSender::send_with`], ...),
//!   refused at once with [`rmcast_proto::SendError::Unsupported`] when the engine does not serve
//!   it ([`GroupSender::guarantees`]); answers to a member's message: [`GroupSender::reply`],
//!   received as [`GroupEvent::Reply`];
//! * engines: [`EngineChoice`] from the one list of [`rmcast_proto::catalog`] (re-exported
//!   here with [`EngineFactory`], [`Role`] and [`RecoveryPolicy`]); configuration errors are
//!   typed ([`ConfigError`] in [`Error::Config`]);
//! * membership: [`Node::open_group`] (create, join, or join-or-create a group by name) and
//!   [`Node::open_group_async`]; [`Node::shutdown`] (dropping a [`Node`] never blocks);
//!   [`GroupSender::leave`], [`GroupSender::info`], and [`GroupSender::counters`] /
//!   [`Node::counters`];
//! * crash recovery (Amoeba paper section 5.3): [`GroupEvent::Recovery`] ([`Recovery::Failed`],
//!   [`Recovery::Reset`] and friends) in the event stream, [`GroupSender::reset`] (ResetGroup)
//!   and the [`RecoveryPolicy`] of the sequencer.
//!
//! ```no_run
//! use rmcast::{GroupConfig, GroupEvent, Node, NodeConfig};
//!
//! let node = Node::new(NodeConfig::default())?;
//! let mut group = node.open_group(GroupConfig::new("chat"))?;
//! group.send("hello")?;
//! while let Some(event) = group.recv() {
//!     if let GroupEvent::Deliver(d) = event {
//!         println!("{}: {}", d.sender, String::from_utf8_lossy(&d.payload));
//!         break;
//!     }
//! }
//! group.leave()?;
//! # Ok::<(), rmcast::Error>(())
//! ```
//!
//! **Transport.** A group's multicast address and port are hashed from its name (RMP 3.1) unless
//! given ([`GroupAddr`]). The node receives group traffic on a socket bound to that address (so
//! that it hears no other group on the port) and sends everything, multicast included, from its
//! unicast socket; peers learn each other's unicast address from the source of the datagrams
//! they receive, and an engine's point-to-point datagrams go there (to the whole group while the
//! address is still unknown). So that members know each other before the engine needs it, a
//! view that names members of unknown address starts a small HELLO exchange (see
//! [`rmcast_proto::formation`]: an ask to the group, unicast answers). An engine's `Destination::Scoped`
//! multicast goes out with its TTL (never above [`NodeConfig::multicast_ttl`]). [`GroupAddr::Unicast`] replaces multicast by a unicast fan-out to
//! a list of addresses, for networks without multicast. By default everything stays on this
//! host: interface 127.0.0.1, multicast TTL 0 ([`NodeConfig`]); set the interface to an
//! address of this host and the TTL to 1 or more to reach other hosts.
//!
//! **IPv6.** The node's [`NodeConfig::interface`] may be an IPv6 address; its groups' addresses
//! are then IPv6 too ([`GroupAddr::FromName`] gives [`ipv6_group_address`], under `ff18::/96`).
//! IPv6 multicast is joined (`IPV6_JOIN_GROUP`) and sent (`IPV6_MULTICAST_IF`) on one
//! interface, named by [`NodeConfig::interface_index`] or else the one that holds the address;
//! a node on `::` without an index refuses multicast groups, so that the routing table never
//! picks the interface. The TTL is the hop limit (0: this host only); datagrams leave room for
//! the 40-byte header ([`path_datagram_bytes`]). On Linux, IPv6 multicast on the loopback
//! interface (`::1`) needs a route the kernel does not install: its only `ff00::/8` route is
//! on the multicast-capable interfaces, and a route through `lo` to another prefix becomes a
//! reject route unless it is of type `local`. Sends then fail with `ENETUNREACH` (logged with
//! a hint; nothing leaves by another interface). In a network namespace of its own,
//! `ip -6 route add local ff00::/8 dev lo table local` makes `::1` carry IPv6 multicast (the
//! runtime's test `tests/ipv6.rs` runs so).
//!
//! **Concurrent start.** Nodes that open a group with [`OpenMode::JoinOrCreate`] at the same time
//! announce themselves while they wait to be admitted (a HELLO *looking*), and only the lowest
//! id heard creates the group; the others join it (see [`rmcast_proto::formation`], which the I/O thread drives).
//!
//! **Secure groups.** A group without a key trusts its network: anyone who can reach its
//! address can send into it. With [`GroupConfig::keys`] every datagram is sealed with
//! AES-256-GCM and verified before any engine sees it; forgeries, replays and datagrams without
//! the authentication block are counted ([`NodeCounters`]) and dropped, and peers' addresses are
//! learnt only from verified datagrams of live sessions. A sender session the group has not
//! heard yet (a capture replayed to a member started after it, perhaps) is held back from the
//! engine until it answers a fresh challenge under its own key: one round trip for a live
//! sender's first datagrams; a session that is gone never answers, and its datagrams are dropped
//! (see `sessions.rs`; counters `session_challenges`, `session_held`, `session_released`,
//! `session_dropped`). Each group keeps its own table of peer addresses, so
//! that one group's traffic never redirects another's unicasts. A group without a key is not
//! an amplifier: an address is sent at most three times the bytes received from it until it
//! answers a path challenge (a random cookie sent there), and a peer's validated address is
//! not moved by one datagram from elsewhere (see `peers.rs`; counters
//! `amplification_limited`, `path_challenges`, `paths_validated`, `peer_address_kept`). Keys come from key files ([`load_key_file`],
//! [`write_key_file`]); see [`rmcast_proto::secure`] for nonces, replay windows and rotation.
//!
//! **Bounded memory.** The send queue and the event queue have fixed capacities
//! ([`GroupConfig`]); when the application does not read its events, the runtime stops taking
//! events from the engine, the engine (whose own queues are bounded) refuses new messages, and
//! senders wait or get their message back. Nothing is dropped to make room.
//!
//! **Crashes.** A sequencer group notices a member that stopped answering (probes, see
//! [`RecoveryPolicy`]) and enters *recovery mode*: the application receives
//! [`Recovery::Failed`], sends issued from then on fail with [`Error::MemberFailed`]
//! ([`TrySendError::MemberFailed`] hands the message back), and [`Group::try_recv`] and
//! [`Group::recv_timeout`] report [`Error::MemberFailed`] instead of "nothing yet". Messages
//! the engine already took are kept and delivered; messages queued before the failure was known
//! wait in the send queue and go out after the reset, so nothing is dropped. The group is rebuilt
//! from the members that can still communicate, automatically or by [`GroupSender::reset`]; the
//! application receives [`Recovery::Reset`] and then the new [`GroupEvent::View`], after which
//! sends work again. A member that the new group left out receives [`Recovery::Expelled`], and
//! its group is closed.
//!
//! # Threads
//!
//! **One I/O thread per [`Node`]**, started by [`Node::new`] and named `rmcast-io-<id>`; the
//! runtime starts no other thread, per group, per open or per call. On it run the `mio` event
//! loop and everything protocol: reading and sending datagrams, sealing and verifying them,
//! the engines and formation with their timers, moving queued messages into the engines and
//! events out of them. No application code runs there (events are queued, never called back),
//! and it never waits for the application: a full event queue makes it stop taking events
//! from that engine, which then pushes back on the senders. It sleeps only in its poll and,
//! for at most a second, while the last datagrams of a group that closes or a node that shuts
//! down wait for room in the socket. Engines need not be `Send`: they live and die on it.
//!
//! **The application's threads** only queue requests and wait for answers: a message or a
//! leave into the group's bounded send queue, an open, a query or a reset into the node's
//! bounded command queue (64 places), then a wake of the I/O thread (one `eventfd` write).
//! What blocks the calling thread, and for how long:
//!
//! * never: [`GroupSender::try_send`], [`Group::try_recv`], the accessors, the counters' reads
//!   of [`Node::counters`], dropping a [`Node`], a [`Group`] or a [`GroupSender`];
//! * while a bounded queue is full (back-pressure): [`GroupSender::send_nowait`],
//!   [`GroupSender::start_send_with`]; a command also waits for room in the command queue,
//!   which the I/O thread empties every turn;
//! * until the I/O thread answers, one turn of its loop: [`GroupSender::info`],
//!   [`GroupSender::counters`], [`GroupSender::reset`] (at most 5 s), the lock calls;
//! * until the outcome: [`GroupSender::send`] (the message is stable), [`Node::open_group`]
//!   (admitted or created; at most the join timeout and 10 s), [`GroupSender::leave`] (at most
//!   the leave timeout), [`Group::recv`] (an event; [`Group::recv_timeout`] bounds it),
//!   [`Node::shutdown`] (the I/O thread ends, within about a second).
//!
//! The blocking calls work inside an async runtime as well (they park the calling thread, not
//! a tokio-specific wait), but there they stall the executor's thread while they wait.
//!
//! **The async forms** ([`Node::open_group_async`], [`GroupSender::send_async`],
//! [`GroupSender::leave_async`], [`Group::recv_async`], the transaction groups'
//! `_async` calls) wait on channels the I/O thread completes, so they need nothing from the
//! executor but a waker: no tokio runtime, no timer, no blocking pool, no thread of their own.
//! For a deadline, wrap them in the executor's timeout; dropping such a future stops the
//! wait (a message already queued is still sent, an open not finished is left).

#![warn(missing_docs)]

mod batch;
mod block;
mod config;
mod error;
mod io;
mod keyfile;
mod latency;
#[cfg(feature = "metrics")]
pub mod metrics;
mod net;
mod node;
mod payload;
mod peers;
mod queue;
mod random;
mod sessions;
mod shared;
pub mod state;
mod timer;
pub mod txn;

/// The payload type of every send and delivery, re-exported so that applications need no
/// `bytes` dependency of their own.
pub use bytes::Bytes;
pub use config::{
    default_datagram_bytes, ipv6_group_address, GroupAddr, GroupConfig, NodeConfig, OpenMode,
    DEFAULT_HEAL_INTERVAL, DEFAULT_JOIN_TIMEOUT, DEFAULT_MAX_DATAGRAM_BYTES,
    DEFAULT_MAX_DATAGRAM_BYTES_V6, MAX_DATAGRAM_BYTES, MIN_DATAGRAM_BYTES, RECEIVE_LOSS_ENV,
    RECEIVE_OFFLOAD_ENV, SEGMENTATION_OFFLOAD_ENV,
};
pub use error::{Error, TrySendError};
pub use keyfile::{load_key_file, write_key_file, KEY_FILE_ENV};
pub use latency::{SendLatency, SEND_LATENCY_BOUNDS};
pub use net::{interface_index, path_datagram_bytes, path_datagram_bytes_on};
pub use node::{Group, GroupEvent, GroupSender, Node, NodeCounters, PendingSend};
pub use payload::IntoPayload;
/// The engine list ([`rmcast_proto::catalog`]): the runtime has no list of its own.
pub use rmcast_proto::catalog::EngineChoice;
/// What engines are built from ([`rmcast_proto::registry`]).
pub use rmcast_proto::registry::{
    ConfigError, EngineFactory, EngineParams, EngineSettings, NotRegistered, RecoveryPolicy, Role,
};
/// Keys of secure groups ([`GroupConfig::keys`]; see [`rmcast_proto::secure`]).
pub use rmcast_proto::secure::{GroupKey, KeyError, Keyring};
pub use rmcast_proto::{
    Counters, Delivery, GroupInfo, Guarantees, LockChange, Loss, NodeId, Qos, Recovery, Reply,
    SendError, View,
};
/// State transfer to late joiners (JGroups STATE_TRANSFER): see [`state`].
pub use state::{StateApp, StateError, StateGroup, StateOptions, StateSender, StateStats};

/// The repository README's Rust snippets, compiled and run as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
