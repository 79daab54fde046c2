//! The sans-IO engine interface shared by every protocol (docs/ARCHITECTURE.md).
//!
//! An engine never reads a socket, a clock or a global RNG. The driver (the simulator or the
//! runtime) passes the current [`Time`] and each received datagram in, and drains what the engine
//! wants done: datagrams to transmit, events for the application, and the next timer deadline.

use crate::guarantees::Guarantees;
pub use crate::guarantees::Qos;
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

/// Node ids as people read them, `[1, 2, 3]`: for messages, where `{:?}` would print
/// `[NodeId(1), ...]`.
#[derive(Copy, Clone, Debug)]
pub struct IdList<'a>(pub &'a [NodeId]);

impl fmt::Display for IdList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, id) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{id}")?;
        }
        f.write_str("]")
    }
}

/// Where a datagram goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Destination {
    /// Every member of the group (IP multicast, or unicast fan-out where multicast is missing).
    /// The sender's own copy, if the network loops it back, is ignored by the engine.
    Group,
    /// The members of the group within `ttl` hops (multicast with this time-to-live): RMTP's
    /// designated receivers re-multicast repairs to their own area only. Drivers that cannot
    /// scope (unicast fan-out) send to the whole group.
    Scoped {
        /// Multicast time-to-live (hops).
        ttl: u8,
    },
    /// One node, point to point.
    Peer(NodeId),
}

/// One transmission an engine asks for (quinn-proto's `Transmit`): where it goes and how the
/// buffer is cut into datagrams.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Transmit {
    /// Where the datagrams go.
    pub destination: Destination,
    /// `None`: the buffer is one datagram. `Some(n)`: the buffer holds several datagrams of `n`
    /// bytes each, the last one possibly shorter, all for the same destination (ready for UDP
    /// GSO; drivers without it send them one by one).
    pub segment_size: Option<usize>,
}

impl Transmit {
    /// One datagram for `destination`.
    pub fn single(destination: Destination) -> Transmit {
        Transmit {
            destination,
            segment_size: None,
        }
    }

    /// The datagrams in `buf`, as this transmit cuts it.
    pub fn datagrams<'a>(&self, buf: &'a [u8]) -> std::slice::Chunks<'a, u8> {
        buf.chunks(self.segment_size.unwrap_or(buf.len()).max(1))
    }
}

/// A message delivered to the application. `P` is the payload: [`Bytes`] from an engine, a
/// [`Digest`] in a simulator record or a `--log` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery<P = Bytes> {
    /// Position in the group's delivery order (never reused in the life of the group): the total
    /// order for ordering engines, a per-sender sequence for the others. For a fragmented
    /// message, the position of its last fragment.
    pub seq: u64,
    /// The original sender.
    pub sender: NodeId,
    /// The sender's own message number (what its `submit` returned).
    pub msg: u64,
    /// The view in which the message is delivered.
    pub view: u64,
    /// The application payload.
    pub payload: P,
    /// This member is to answer the message with [`Engine::reply`]: it holds the handler lock
    /// the message names (RMP's handlers, section 3.3). False for every other message.
    pub respond: bool,
}

impl<P> Delivery<P> {
    /// The same delivery with its payload mapped by `f`.
    pub fn map_payload<Q>(self, f: impl FnOnce(P) -> Q) -> Delivery<Q> {
        Delivery {
            seq: self.seq,
            sender: self.sender,
            msg: self.msg,
            view: self.view,
            payload: f(self.payload),
            respond: self.respond,
        }
    }
}

impl<P: AsRef<[u8]>> Delivery<P> {
    /// The delivery as a record keeps it: the payload reduced to its [`Digest`].
    pub fn digest(&self) -> Delivery<Digest> {
        Delivery {
            seq: self.seq,
            sender: self.sender,
            msg: self.msg,
            view: self.view,
            payload: Digest::of(self.payload.as_ref()),
            respond: self.respond,
        }
    }
}

/// What is kept of a payload where the bytes themselves are not: its length and its 64-bit
/// FNV-1a hash ([`Digest::of`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Digest {
    /// Payload length in bytes.
    pub len: usize,
    /// FNV-1a (64 bits) of the payload.
    pub hash: u64,
}

impl Digest {
    /// The digest of `payload`.
    pub fn of(payload: &[u8]) -> Digest {
        Digest {
            len: payload.len(),
            hash: crate::common::group::fnv1a64(payload),
        }
    }
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

/// Messages of one sender that can no longer be recovered: every member that held them has
/// dropped them (Bimodal Multicast's loss up-call; unreliable QoS). Only engines whose
/// [`Guarantees::delivery`] is not all-or-nothing report it at receivers. At the sender, a
/// `Loss` naming this member itself says its own messages failed and will never complete
/// (a transaction nobody committed): `first_seq` is then the number `submit` returned, and
/// [`Engine::take_failure`] tells why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    /// The sender of the lost messages.
    pub sender: NodeId,
    /// The first lost position, in [`Delivery::seq`]'s numbering for this engine.
    pub first_seq: u64,
    /// How many consecutive positions from `first_seq` are lost.
    pub count: u64,
}

/// A lock changed hands (RMP's locks, section 4.3), in the total order: granted, released,
/// refused, or freed because its holder left the ring. Locks `0..6` are the handler locks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockChange {
    /// The lock number.
    pub lock: u16,
    /// Who holds it now (`None`: free).
    pub holder: Option<NodeId>,
    /// The member whose request or release this is (`None`: a state report, e.g. the locks
    /// held when this member joined, or a lock freed by its holder's departure).
    pub asked_by: Option<NodeId>,
}

/// An answer to a message this member sent, on the reliable response channel from one
/// receiver back to the sender (Multidriver transactions, RMP's multi-RPC).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply<P = Bytes> {
    /// The member that answered.
    pub from: NodeId,
    /// The message answered: the number this member's `submit` returned.
    pub request: u64,
    /// The answer.
    pub payload: P,
}

/// What an engine tells the application: the one event type that runs from engine to
/// application, simulator record and `--log` line. `P` is the payload type (see [`Delivery`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event<P = Bytes> {
    /// A message delivered (in the order the engine promises).
    Deliver(Delivery<P>),
    /// A new view was installed (also the first view at a joiner or creator).
    View(View),
    /// A message this member submitted is now stable with the promised resilience.
    SendComplete {
        /// The number `submit` returned.
        msg: u64,
    },
    /// Messages that will never be delivered here (see [`Loss`]).
    Loss(Loss),
    /// An answer to one of this member's messages (see [`Reply`]).
    Reply(Reply<P>),
    /// A lock of the group changed (see [`LockChange`]).
    Lock(LockChange),
    /// A request another member handed to this one to answer (Amoeba's ForwardRequest; see
    /// [`Engine::forward`]): answer it with [`Engine::reply`] to its sender. Not a delivery:
    /// the group delivered the request in its place in the order already.
    Forwarded(Delivery<P>),
    /// This member left the group; the engine does nothing more.
    Left,
    /// Crash recovery: a member failed, the group was reset, or this member was left out
    /// (Amoeba paper section 5.3). After [`Recovery::Expelled`] the engine does nothing more.
    Recovery(Recovery),
}

impl<P> Event<P> {
    /// The same event with every payload mapped by `f` (e.g. to its [`Digest`]).
    pub fn map_payload<Q>(self, f: impl FnOnce(P) -> Q) -> Event<Q> {
        match self {
            Event::Deliver(d) => Event::Deliver(d.map_payload(f)),
            Event::Reply(r) => Event::Reply(Reply {
                from: r.from,
                request: r.request,
                payload: f(r.payload),
            }),
            Event::Forwarded(d) => Event::Forwarded(d.map_payload(f)),
            Event::View(v) => Event::View(v),
            Event::SendComplete { msg } => Event::SendComplete { msg },
            Event::Loss(l) => Event::Loss(l),
            Event::Lock(l) => Event::Lock(l),
            Event::Left => Event::Left,
            Event::Recovery(r) => Event::Recovery(r),
        }
    }

    /// Whether the engine does nothing more after this event (a leave, an expulsion).
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Event::Left | Event::Recovery(Recovery::Expelled { .. } | Recovery::Refused { .. })
        )
    }
}

impl<P: AsRef<[u8]>> Event<P> {
    /// The event as a record keeps it: payloads reduced to their [`Digest`].
    pub fn digest(&self) -> Event<Digest> {
        match self {
            Event::Deliver(d) => Event::Deliver(d.digest()),
            Event::Reply(r) => Event::Reply(Reply {
                from: r.from,
                request: r.request,
                payload: Digest::of(r.payload.as_ref()),
            }),
            Event::Forwarded(d) => Event::Forwarded(d.digest()),
            Event::View(v) => Event::View(v.clone()),
            Event::SendComplete { msg } => Event::SendComplete { msg: *msg },
            Event::Loss(l) => Event::Loss(l.clone()),
            Event::Lock(l) => Event::Lock(l.clone()),
            Event::Left => Event::Left,
            Event::Recovery(r) => Event::Recovery(r.clone()),
        }
    }
}

/// What happens to a group when members crash (Amoeba paper section 5.3): a failure is found, the
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
    /// This member's group found a larger group of the same name (a healed partition, members
    /// that started apart): it leaves its group and joins that one as a new member
    /// ([`crate::Engine::rejoin`]); a [`Event::View`] of the group merged into follows. Sends
    /// that had not completed are not sent. Queued by [`crate::Engine::rejoin`] after the
    /// events of the old group.
    Merging {
        /// The member that coordinates the group merged into.
        into: NodeId,
    },
    /// This node's join was refused at once: the group already holds as many members as its
    /// engine admits (`limit`). It is not a member and its engine does nothing more.
    Refused {
        /// The most members the group's engine admits.
        limit: u32,
    },
}

/// Why `submit` refused a message. Nothing is ever dropped silently: the caller keeps the data.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
    /// The member that orders or coordinates (sequencer, token site, tree root), if any.
    pub coordinator: Option<NodeId>,
    /// Whether the group is in recovery mode (engines with crash recovery: a failure was found
    /// and the group is not rebuilt yet).
    pub recovering: bool,
    /// Group incarnation, bumped each time crash recovery rebuilds the group (0 for engines
    /// without crash recovery).
    pub incarnation: u32,
    /// What the engine promises.
    pub guarantees: Guarantees,
    /// Messages the engine holds for retransmission (history buffer, data cache).
    pub buffered_msgs: usize,
    /// Capacity of that buffer.
    pub buffer_capacity_msgs: usize,
    /// Largest datagram this member writes ([`crate::EngineParams::max_datagram_bytes`]).
    pub max_datagram_bytes: usize,
}

/// Declares [`Counters`] and its list of names and help texts from one list, so that the
/// names people read (`/stats`, `rmcast stat`, Prometheus) never drift from the fields.
macro_rules! counters {
    ($(#[$meta:meta])* struct { $($(#[doc = $doc:literal])* $name:ident,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct Counters {
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        impl Counters {
            /// Every counter with its name and its documentation's first paragraph, in
            /// declaration order.
            pub fn described(&self) -> Vec<CounterField> {
                vec![$(CounterField {
                    name: stringify!($name),
                    help: first_paragraph(&[$($doc),*]),
                    value: self.$name,
                },)*]
            }
        }
    };
}

/// One counter of [`Counters::described`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterField {
    /// The field's name, e.g. `datagrams_sent`.
    pub name: &'static str,
    /// What it counts: the first paragraph of the field's documentation, on one line.
    pub help: String,
    /// Its value.
    pub value: u64,
}

/// The first paragraph of documentation given line by line (as `///` lines are), joined on
/// one line: the help text of a counter.
pub fn first_paragraph(lines: &[&str]) -> String {
    let mut out = String::new();
    for l in lines {
        let l = l.trim();
        if l.is_empty() {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(l);
    }
    out
}

counters! {
    /// Counters every engine keeps (Aeron's system counters are the model). Read them through
    /// [`Engine::counters`]; engines only ever add to them. Counters of one engine only are
    /// [`Engine::engine_counters`].
    ///
    /// The receive-side counters are kept by the shell every engine runs in
    /// ([`crate::common::shell::receive`]), so they mean the same in every engine: each datagram
    /// handed to [`Engine::handle_datagram`] is counted in exactly one of `datagrams_received`,
    /// `malformed_dropped` (header), `foreign_dropped` (header), `own_dropped` and `late_dropped`;
    /// a datagram the engine took and then found malformed or out of place is counted again, in
    /// `malformed_dropped` or `foreign_dropped`.
    struct {
        /// Datagrams handed to the driver (by `poll_transmit`).
        datagrams_sent,
        /// Bytes in those datagrams.
        bytes_sent,
        /// Datagrams that passed the shell's filter and were handed to the protocol: of this
        /// engine kind, group and incarnation (or of a packet type the engine takes from any
        /// incarnation), not this member's own, while the engine runs.
        datagrams_received,
        /// Datagrams whose header did not decode (the shell), plus datagrams taken whose body the
        /// engine could not decode or whose packet type it does not know.
        malformed_dropped,
        /// Datagrams of another engine kind, group or incarnation, dropped by the shell; plus
        /// datagrams taken that the engine found addressed to another role or epoch (a non-member's
        /// answer at a member, a reply of an old transaction epoch).
        foreign_dropped,
        /// This member's own datagrams, looped back by the network (multicast loopback), dropped
        /// by the shell. Not an anomaly: a multicast sender usually hears itself.
        own_dropped,
        /// Datagrams that arrived after the engine stopped (it left the group, or was left out of
        /// it), dropped by the shell.
        late_dropped,
        /// Datagrams the engine could not queue for the driver because its bounded out queue was
        /// full (the driver did not drain it): not sent, and repaired by the protocol as a
        /// datagram the network lost. First transmissions of data wait for room instead.
        out_refused,
        /// Data messages (or fragments) received that were already held.
        duplicates,
        /// Retransmission requests (NACKs) sent.
        nacks_sent,
        /// Retransmission requests received.
        nacks_received,
        /// Messages (or fragments) retransmitted.
        retransmissions,
        /// Status / acknowledgement datagrams sent.
        acks_sent,
        /// Requests turned away for lack of room; the sender keeps and retries them.
        backpressure_refusals,
        /// Messages delivered to the application.
        delivered,
        /// Messages submitted by the application.
        submitted,
        /// View changes installed.
        view_changes,
        /// Failure-detection datagrams sent (probes and their answers); background traffic that
        /// depends on time, not on the number of messages.
        probes_sent,
        /// Failures this member detected itself (a member that answered no probe in time).
        failures_detected,
        /// Crash-recovery datagrams sent (Amoeba's invitations and votes, RMP's reformation).
        recovery_sent,
        /// Times crash recovery rebuilt the group here (new incarnations installed).
        resets,
    }
}

/// A protocol engine driven by a simulator or a runtime.
///
/// Every method has to be cheap and must never block: the driver calls them from one thread
/// for all the groups of a node. What an engine can do beyond multicast to its group it
/// declares ([`Guarantees::capabilities`]); drivers read the declaration instead of calling to
/// find out, and the methods of what it cannot do keep their defaults, which refuse politely
/// ([`SendError::Unsupported`], or `false`).
///
/// Engines run in one shell ([`crate::common::shell`]): `handle_datagram` hands the datagram
/// to [`crate::common::shell::receive`], which decodes the header once, filters and counts the
/// same way for every engine, and gives the engine the decoded packet.
pub trait Engine {
    /// Process one received datagram. Malformed or foreign datagrams are counted and dropped.
    fn handle_datagram(&mut self, now: Time, from: NodeId, datagram: &[u8]);

    /// [`Engine::handle_datagram`] with the IP time-to-live the datagram arrived with, where
    /// the driver knows it (`IP_RECVTTL`, the simulator's hop counts): RMTP chooses the nearest
    /// designated receiver by it. Other engines need not override it.
    fn handle_datagram_with_ttl(
        &mut self,
        now: Time,
        from: NodeId,
        datagram: &[u8],
        ttl: Option<u8>,
    ) {
        let _ = ttl;
        self.handle_datagram(now, from, datagram)
    }

    /// Let timers that are due fire. Call when [`Engine::poll_timeout`] has passed.
    fn handle_timeout(&mut self, now: Time);

    /// Submit a message for multicast with quality of service `qos`; returns the sender's
    /// message number. Back-pressure is an error, never a silent drop; a `qos` outside
    /// [`Guarantees::qos`] is [`SendError::Unsupported`] (an engine may serve a stronger level
    /// than asked, and says so in its docs).
    fn submit(&mut self, now: Time, payload: Bytes, qos: Qos) -> Result<u64, SendError>;

    /// Answer message `request` of member `to` on the reliable response channel (Multidriver
    /// transactions, RMP's multi-RPC); `to` receives [`Event::Reply`]. Engines without a
    /// response channel answer [`SendError::Unsupported`].
    fn reply(
        &mut self,
        now: Time,
        to: NodeId,
        request: u64,
        payload: Bytes,
    ) -> Result<(), SendError> {
        let _ = (now, to, request, payload);
        Err(SendError::Unsupported)
    }

    /// Send a request to the group from outside it (RMP's multi-RPC, section 4.5): an engine
    /// opened as [`crate::Role::Client`] multicasts `payload` with `qos` and asks for an
    /// acknowledgement once the group delivered it ([`Event::SendComplete`]); with `handler`
    /// the member holding that handler lock answers ([`Event::Reply`]), again on every
    /// retransmission until the answer arrives. Returns the request's number; engines without
    /// non-member senders answer [`SendError::Unsupported`].
    fn request(
        &mut self,
        now: Time,
        payload: Bytes,
        qos: Qos,
        handler: Option<u8>,
    ) -> Result<u64, SendError> {
        let _ = (now, payload, qos, handler);
        Err(SendError::Unsupported)
    }

    /// Hand request `request` of `sender`, which this member was to answer (a delivery with
    /// [`Delivery::respond`]), to member `to`, which answers the sender directly instead
    /// (Amoeba's ForwardRequest, transparent to the sender): `to` gets [`Event::Forwarded`].
    /// Engines without handlers answer [`SendError::Unsupported`].
    fn forward(
        &mut self,
        now: Time,
        to: NodeId,
        sender: NodeId,
        request: u64,
        payload: Bytes,
    ) -> Result<(), SendError> {
        let _ = (now, to, sender, request, payload);
        Err(SendError::Unsupported)
    }

    /// Ask for lock `lock` (`acquire`) or release it (RMP section 4.3): the request is ordered
    /// with the group's messages and answered by an [`Event::Lock`] at every member (granted
    /// only if the lock was free). Engines without locks answer [`SendError::Unsupported`].
    fn lock(&mut self, now: Time, lock: u16, acquire: bool) -> Result<(), SendError> {
        let _ = (now, lock, acquire);
        Err(SendError::Unsupported)
    }

    /// Why this member's own message `msg` failed, once an [`Event::Loss`] naming this member
    /// reported it: a sentence naming the members concerned (who answered, who fell silent),
    /// for the error the runtime hands the message's sender. Each reason is taken once; engines
    /// keep only the latest few. `None`: the engine keeps no reason.
    fn take_failure(&mut self, msg: u64) -> Option<String> {
        let _ = msg;
        None
    }

    /// Start leaving the group; [`Event::Left`] follows once the leave is ordered.
    fn leave(&mut self, now: Time);

    /// Write the next datagram (or, with [`Transmit::segment_size`], datagrams) into `buf`
    /// (cleared first) and say where they go.
    fn poll_transmit(&mut self, now: Time, buf: &mut Vec<u8>) -> Option<Transmit>;

    /// Next event for the application.
    fn poll_event(&mut self) -> Option<Event>;

    /// When [`Engine::handle_timeout`] must be called next.
    fn poll_timeout(&self) -> Option<Time>;

    /// This node's identity.
    fn node_id(&self) -> NodeId;

    /// What this engine promises, as configured. The simulator's checkers and end-of-run rule
    /// and the runtime's send API read it.
    fn guarantees(&self) -> Guarantees;

    /// A snapshot of the group as this member sees it.
    fn info(&self) -> GroupInfo;

    /// The engine's counters.
    fn counters(&self) -> &Counters;

    /// Counters that only this engine keeps, by name (e.g. the sequencer's BC_SYNC count).
    fn engine_counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

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

    /// Leave whatever group this member is in, without a farewell, and join the group again as
    /// a new member: how a member left out of the group ([`Recovery::Expelled`]) comes back, and
    /// how the members of a smaller group that found a larger one of the same name merge into
    /// it (`merging_into`: that group's coordinator; the engine then queues
    /// [`Recovery::Merging`] after the events of its old group). Message numbers go on from
    /// where they were, so that a message is never confused with one sent before; what was
    /// submitted and had not completed is not sent (the driver tells the application). Events
    /// follow as for a joiner: a [`Event::View`] once admitted. Engines that cannot answer
    /// [`SendError::Unsupported`].
    fn rejoin(&mut self, now: Time, merging_into: Option<NodeId>) -> Result<(), SendError> {
        let _ = (now, merging_into);
        Err(SendError::Unsupported)
    }

    /// Give up a [`Engine::rejoin`] that no group admitted (the group aimed at merged away or
    /// lost its coordinator, or every member was joining at once) and create a group of one
    /// instead, message numbers going on as in a rejoin; self-healing merges it with the others
    /// once they hear each other. Events follow as for a creator: a [`Event::View`] of one.
    /// Engines that cannot answer [`SendError::Unsupported`].
    fn start_alone(&mut self, now: Time) -> Result<(), SendError> {
        let _ = now;
        Err(SendError::Unsupported)
    }

    /// Write no datagram larger than `max` bytes from now on (never less than the engine can
    /// work with): the driver found a member of the group whose path carries no more, and the
    /// group uses its smallest member's size, so that no datagram is fragmented by IP on the way
    /// to anyone. Messages already cut keep their fragments. Engines that cannot change answer
    /// `false` and keep their size.
    fn limit_datagram_bytes(&mut self, max: usize) -> bool {
        let _ = max;
        false
    }

    /// A one-line description of the engine's protocol state, for diagnosing a failed run.
    fn describe(&self) -> String {
        String::new()
    }
}
