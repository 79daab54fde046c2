//! The public handles: [`Node`], [`Group`] and [`GroupSender`], and what they share with the
//! I/O thread.
//!
//! Every call from the application becomes a message on a bounded channel followed by a wake of
//! the I/O thread; wakes are coalesced (one `eventfd` write per batch, not per message), so a
//! busy sender costs the I/O thread no extra system calls.

use crate::block::block_on;
use crate::config::{GroupAddr, GroupConfig, NodeConfig, OpenMode};
use crate::error::{Error, TrySendError};
use crate::payload::IntoPayload;
use crate::queue::{Batched, TryNext};
pub use crate::shared::NodeCounters;
use crate::shared::{Command, EngineCall, GroupShared, NodeShared, Op, OpenRequest, Snapshot};
use crate::{io, net};
use bytes::Bytes;
use rmcast_proto::{Capabilities, Counters, GroupInfo, Guarantees, NodeId, Qos, SendError};
#[allow(unused_imports)] // Named in the docs.
use rmcast_proto::{Event, Recovery};
use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// What a group tells the application, in the order the engine produced it: the one event
/// type of [`rmcast_proto`] ([`rmcast_proto::Event`]), handed over unchanged.
///
/// * [`Event::Deliver`] and [`Event::View`]: as the engine promises
///   ([`GroupSender::guarantees`]).
/// * [`Event::SendComplete`]: only with [`GroupConfig::completion_events`]; comes in order with
///   the deliveries, in the view in which the message is delivered.
/// * [`Event::Reply`]: an answer to one of this member's messages ([`GroupSender::reply`]).
/// * [`Event::Loss`]: messages the engine will never deliver (engines with probabilistic
///   delivery only).
/// * [`Event::Recovery`]: crash recovery (Amoeba paper section 5.3), as the engine reported it. From
///   [`Recovery::Failed`] until [`Recovery::Reset`] the group is in recovery mode: sends fail
///   with [`Error::MemberFailed`] ([`TrySendError::MemberFailed`] hands the message back), and
///   [`Group::try_recv`] and [`Group::recv_timeout`] report it instead of "nothing yet"; what
///   the engine already accepted is still delivered. With the automatic policy
///   ([`crate::RecoveryPolicy::auto_reset`]) the reset is under way; otherwise call
///   [`GroupSender::reset`]. [`Recovery::Expelled`] is terminal: the group is closed after it,
///   the receive calls report the end, and sends fail.
/// * [`Event::Left`] never reaches the application: the runtime takes it as the end of the
///   leave, answers [`GroupSender::leave`] and closes the group, so that the receive calls
///   report the end ([`Group::recv`] returns `None`, the others [`Error::Closed`]) once the
///   events before it are read. The end of the queue is the one sign of a closed group,
///   whatever closed it (a leave, a dropped last handle, the node's shutdown); after
///   [`Recovery::Expelled`] too, which is passed on because it says why.
pub type GroupEvent = rmcast_proto::Event;

/// One process's presence on the network: a unicast socket, an I/O thread, and the groups it
/// belongs to.
///
/// The I/O thread runs while the node or any of its groups is alive (as a QUIC endpoint lives
/// while its connections do): a function may open a group and return it, and the group keeps
/// working after the [`Node`] is dropped. Once the node and every handle of its groups are
/// dropped, the thread leaves the remaining groups and stops, without blocking the caller (it
/// finishes on its own, in at most a second). [`Node::shutdown`] stops it at once, whatever
/// handles remain, and waits; their handles then report [`Error::Closed`].
pub struct Node {
    shared: Arc<NodeShared>,
    life: Arc<NodeLife>,
    thread: Option<JoinHandle<()>>,
    next_key: AtomicU64,
}

/// Keeps the I/O thread running: held by the [`Node`] and by every handle of its groups; the
/// last one dropped tells the thread to leave its groups and stop.
struct NodeLife(Arc<NodeShared>);

impl Drop for NodeLife {
    fn drop(&mut self) {
        let _ = self.0.command(Command::Shutdown);
    }
}

impl Node {
    /// Open the unicast socket and start the I/O thread.
    pub fn new(cfg: NodeConfig) -> Result<Node, Error> {
        let id = cfg.id.unwrap_or_else(random_id);
        let (shared, thread) = io::spawn(cfg, id)?;
        Ok(Node {
            life: Arc::new(NodeLife(shared.clone())),
            shared,
            thread: Some(thread),
            next_key: AtomicU64::new(0),
        })
    }

    /// This node's identity.
    pub fn id(&self) -> NodeId {
        self.shared.id
    }

    /// The address of the unicast socket, from which every datagram of this node is sent.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// The runtime's counters.
    pub fn counters(&self) -> NodeCounters {
        self.shared.counters.snapshot()
    }

    /// What the node shares with its I/O thread (the counters live there): held by the
    /// metrics collector, which must not keep the I/O thread running.
    #[cfg(feature = "metrics")]
    pub(crate) fn shared(&self) -> Arc<NodeShared> {
        self.shared.clone()
    }

    /// Create a new group named `name` with default settings.
    pub fn create_group(&self, name: &str) -> Result<Group, Error> {
        self.open_group(GroupConfig::new(name).mode(OpenMode::Create))
    }

    /// Join the existing group named `name` with default settings.
    pub fn join_group(&self, name: &str) -> Result<Group, Error> {
        self.open_group(GroupConfig::new(name).mode(OpenMode::Join))
    }

    /// Enter a group as `cfg` says. Returns once this node is a member: at once for
    /// [`OpenMode::Create`], after admission (or the creation that follows a join timeout)
    /// otherwise. The first [`GroupEvent::View`] is waiting in the group's queue.
    pub fn open_group(&self, cfg: GroupConfig) -> Result<Group, Error> {
        self.start_open(cfg)?.finish()
    }

    /// [`Node::open_group`] for async code: the wait for admission does not block the
    /// executor and takes no thread of its own (the I/O thread completes the future), so it
    /// works on any async runtime.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), rmcast::Error> {
    /// use rmcast::{GroupConfig, Node, NodeConfig};
    /// let node = Node::new(NodeConfig::default())?;
    /// let mut group = node.open_group_async(GroupConfig::new("chat")).await?;
    /// group.send_async("hello").await?;
    /// # Ok(()) }
    /// ```
    pub async fn open_group_async(&self, cfg: GroupConfig) -> Result<Group, Error> {
        let mut pending = self.start_open(cfg)?;
        let created = (&mut pending.reply).await;
        pending.into_group(created)
    }

    /// Validate `cfg`, open the group's socket and hand the group to the I/O thread; the
    /// answer comes through the returned [`PendingOpen`].
    fn start_open(&self, mut cfg: GroupConfig) -> Result<PendingOpen, Error> {
        let interface = self.shared.interface;
        let index = self.shared.multicast_index;
        if cfg.max_datagram_bytes.is_none() {
            cfg.max_datagram_bytes = Some(net::path_datagram_bytes_on(
                interface,
                index,
                crate::config::default_datagram_bytes(interface),
            ));
        }
        cfg.validate()?;
        cfg.check_family(interface)?;
        // The name's address in the node's family, fixed here so that every later use agrees.
        if cfg.addr == GroupAddr::FromName {
            if let Some(a) = cfg.multicast_addr_for(interface) {
                cfg.addr = GroupAddr::Multicast(a);
            }
        }
        if let GroupAddr::Unicast(peers) = &cfg.addr {
            // A socket bound to loopback cannot send to another host (the kernel answers
            // EINVAL): say what to do instead.
            if interface.is_loopback() && peers.iter().any(|p| !p.ip().is_loopback()) {
                return Err(Error::Config(rmcast_proto::ConfigError::Invalid {
                    field: "interface",
                    reason: "is loopback but unicast peers are on other hosts: set the node's \
                             interface to this host's address on their network",
                }));
            }
        }
        if interface.is_ipv6() && cfg.multicast_addr().is_some() && index.is_none() {
            // Multicast would leave by whatever interface the routing table names.
            return Err(Error::Config(rmcast_proto::ConfigError::Invalid {
                field: "interface_index",
                reason: "is needed for IPv6 multicast when no interface holds the node's \
                         address (`::`): name the interface by its index",
            }));
        }
        let multicast = match cfg.multicast_addr().filter(|_| cfg.listen_multicast) {
            Some(addr) => Some(net::multicast_socket(
                addr,
                interface,
                index,
                self.shared.socket_buffer_bytes,
                self.shared.receive_offload,
            )?),
            None => None,
        };
        // Engines that can outrun their slowest member bound themselves by what its sockets
        // hold (the sequencer's history): the smaller of the two this group receives on.
        let buffers = [
            self.shared.receive_buffer_bytes,
            multicast.as_ref().and_then(net::receive_buffer_bytes),
        ];
        let held = buffers.into_iter().flatten().min();
        cfg.engine = cfg.engine.receive_buffer_bytes(held);
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        let (ops_tx, ops_rx) = mpsc::channel(cfg.send_queue_capacity);
        let (events_tx, events_rx) = mpsc::channel(cfg.event_queue_capacity);
        let shared = Arc::new(GroupShared::default());
        let (reply_tx, reply_rx) = oneshot::channel();
        let handle = GroupHandle {
            ops: ops_tx,
            name: cfg.name.clone(),
            group_id: cfg.group_id(),
            kind: cfg.engine.name().to_string(),
            guarantees: cfg.engine.guarantees(),
            qos: cfg.qos,
            multicast: cfg.multicast_addr(),
            unicast_peers: match &cfg.addr {
                GroupAddr::Unicast(p) => p.clone(),
                _ => Vec::new(),
            },
            max_datagram_bytes: cfg.datagram_bytes(),
            leave_timeout: cfg.leave_timeout,
            created: AtomicBool::new(false),
            shared: shared.clone(),
            key,
            node: self.shared.clone(),
            _wake_on_drop: WakeOnDrop(self.shared.clone()),
            _life: self.life.clone(),
        };
        self.shared.command(Command::Open(Box::new(OpenRequest {
            key,
            cfg,
            multicast,
            ops: ops_rx,
            events: events_tx,
            shared,
            reply: reply_tx,
        })))?;
        Ok(PendingOpen {
            handle,
            events: events_rx,
            reply: reply_rx,
        })
    }

    /// Stop the node and wait for it: leave the remaining groups (waiting at most one second
    /// for the leaves to complete) and stop the I/O thread, even while handles of its groups
    /// are alive (they then report [`Error::Closed`]). Dropping the node and all its groups does
    /// the same without waiting; call this before the process exits so that the leaves go out.
    pub fn shutdown(mut self) {
        if self.shared.command(Command::Shutdown).is_ok() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// A group handed to the I/O thread, waiting for the answer (admitted, created, or refused).
/// The I/O thread always answers, by the join timeout and a margin at the latest
/// ([`Error::Timeout`] then), or drops the sender when it stops ([`Error::Closed`]).
struct PendingOpen {
    handle: GroupHandle,
    events: mpsc::Receiver<GroupEvent>,
    reply: oneshot::Receiver<Result<bool, Error>>,
}

impl PendingOpen {
    /// Block until the I/O thread answers.
    fn finish(mut self) -> Result<Group, Error> {
        let created = block_on(&mut self.reply, None).unwrap_or(Ok(Err(Error::Timeout)));
        self.into_group(created)
    }

    /// The group, once the I/O thread's answer `created` is in.
    fn into_group(
        self,
        created: Result<Result<bool, Error>, oneshot::error::RecvError>,
    ) -> Result<Group, Error> {
        let created = created.map_err(|_| Error::Closed)??;
        self.handle.created.store(created, Ordering::Relaxed);
        Ok(Group {
            sender: GroupSender {
                inner: Arc::new(self.handle),
            },
            events: Batched::new(self.events),
        })
    }
}

impl Drop for Node {
    /// Never blocks: the I/O thread goes on while handles of the node's groups are alive, and
    /// is told to stop once the last is dropped (`NodeLife`). [`Node::shutdown`] waits for it.
    fn drop(&mut self) {
        // Detached: the thread ends by itself once the shutdown is done.
        drop(self.thread.take());
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.shared.id)
            .field("local_addr", &self.shared.local_addr)
            .finish()
    }
}

/// A random non-zero node id (0 is no node), from the operating system.
fn random_id() -> NodeId {
    let mut b = [0u8; 4];
    crate::random::fill_random(&mut b);
    NodeId(u32::from_ne_bytes(b).max(1))
}

/// A message queued by [`GroupSender::start_send_with`] whose completion is still to come: what
/// [`GroupSender::send_with`] would have returned. Wait for it, or await it (any executor).
/// Dropping it does not cancel the message.
#[derive(Debug)]
pub struct PendingSend {
    done: oneshot::Receiver<Result<u64, Error>>,
}

impl PendingSend {
    /// Block until the message completes: its message number, or why it failed
    /// ([`Error::Closed`] once the group is closed).
    pub fn wait(self) -> Result<u64, Error> {
        block_on(self.done, None)
            .expect("no deadline")
            .map_err(|_| Error::Closed)?
    }
}

impl std::future::Future for PendingSend {
    type Output = Result<u64, Error>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.done)
            .poll(cx)
            .map(|r| r.map_err(|_| Error::Closed)?)
    }
}

/// Wakes the I/O thread when the last handle of a group goes, so that it notices the closed send
/// queue and leaves the group. A field declared after the send queue's sender, so it runs after
/// that sender is dropped.
struct WakeOnDrop(Arc<NodeShared>);

impl Drop for WakeOnDrop {
    fn drop(&mut self) {
        self.0.wake();
    }
}

pub(crate) struct GroupHandle {
    // Must stay the first field: see `WakeOnDrop`.
    ops: mpsc::Sender<Op>,
    name: String,
    group_id: u32,
    kind: String,
    guarantees: Guarantees,
    qos: Qos,
    multicast: Option<SocketAddr>,
    unicast_peers: Vec<SocketAddr>,
    max_datagram_bytes: usize,
    leave_timeout: Duration,
    created: AtomicBool,
    shared: Arc<GroupShared>,
    key: u64,
    node: Arc<NodeShared>,
    _wake_on_drop: WakeOnDrop,
    // Last: the group's leave is under way before the node may stop.
    _life: Arc<NodeLife>,
}

/// The sending half of a group membership: cheap to clone, usable from any thread. When the
/// last handle of a group is dropped without [`GroupSender::leave`], the node leaves the group
/// in the background.
#[derive(Clone)]
pub struct GroupSender {
    inner: Arc<GroupHandle>,
}

impl GroupSender {
    /// Send a message with the group's quality of service ([`GroupConfig::qos`]) and wait
    /// until it is accepted with the group's resilience ([`rmcast_proto::Event::SendComplete`]);
    /// returns the message number the engine gave it. Blocks while the send queue is full.
    /// Receive events on another thread meanwhile: when the event queue is full the engine
    /// stops, and so does this call.
    ///
    /// In recovery mode (after [`Recovery::Failed`], until [`Recovery::Reset`]) the call
    /// fails at once with [`Error::MemberFailed`]. A message queued before the failure was
    /// known is kept: it goes out after the reset, and this call waits for it meanwhile. Should
    /// this member be left out of the new group, the call fails with [`Error::Expelled`].
    ///
    /// A message the engine gives up (a multicast transaction that too few receivers answered,
    /// or whose receivers fell silent before the commit) fails with [`Error::Failed`], which
    /// names the receivers, as soon as the engine knows.
    pub fn send(&self, payload: impl IntoPayload) -> Result<u64, Error> {
        self.send_with(payload, self.inner.qos)
    }

    /// [`GroupSender::send`] with quality of service `qos` for this message. A `qos` the
    /// engine does not serve ([`GroupSender::guarantees`]) fails at once with
    /// [`Error::Send`]`(`[`SendError::Unsupported`]`)`.
    pub fn send_with(&self, payload: impl IntoPayload, qos: Qos) -> Result<u64, Error> {
        self.start_send_with(payload, qos)?.wait()
    }

    /// The send of `payload` at `qos` as the I/O thread takes it, and where its outcome comes
    /// back; fails at once as every send does: a `qos` the engine does not serve, recovery
    /// mode.
    fn send_op(
        &self,
        payload: Bytes,
        qos: Qos,
    ) -> Result<(Op, oneshot::Receiver<Result<u64, Error>>), Error> {
        self.check_qos(qos)?;
        self.inner.shared.member_failed()?;
        let (tx, rx) = oneshot::channel();
        let op = Op::Send {
            payload,
            qos,
            done: Some(tx),
        };
        Ok((op, rx))
    }

    /// Async [`GroupSender::send`]: any executor will do.
    pub async fn send_async(&self, payload: impl IntoPayload) -> Result<u64, Error> {
        self.send_async_with(payload, self.inner.qos).await
    }

    /// Async [`GroupSender::send_with`].
    pub async fn send_async_with(&self, payload: impl IntoPayload, qos: Qos) -> Result<u64, Error> {
        let (op, rx) = self.send_op(payload.into_payload(), qos)?;
        self.inner.ops.send(op).await.map_err(|_| Error::Closed)?;
        self.inner.node.wake();
        rx.await.map_err(|_| Error::Closed)?
    }

    /// [`GroupSender::send_with`] in two halves: queue the message now, blocking only while
    /// the send queue is full, and return a [`PendingSend`] that tells later how it completed.
    /// Messages queued one after the other from one thread keep their order, so a caller may
    /// keep several in flight (a bounded number of handles) without waiting for each, and
    /// still see every failure. Fails at once as `send_with` does: a `qos` the engine does not
    /// serve, recovery mode, a closed group.
    pub fn start_send_with(
        &self,
        payload: impl IntoPayload,
        qos: Qos,
    ) -> Result<PendingSend, Error> {
        let (op, rx) = self.send_op(payload.into_payload(), qos)?;
        block_on(self.inner.ops.send(op), None)
            .expect("no deadline")
            .map_err(|_| Error::Closed)?;
        self.inner.node.wake();
        Ok(PendingSend { done: rx })
    }

    /// Queue a message without blocking and without waiting for it to complete. On
    /// back-pressure the message is handed back in [`TrySendError::Full`]: nothing is lost.
    /// Should the engine refuse a queued message (too large, say), the refusal is logged and
    /// counted in [`NodeCounters::submit_refused`]. In recovery mode the message is handed
    /// back in [`TrySendError::MemberFailed`]; one queued before the failure was known goes out
    /// after the reset.
    pub fn try_send(&self, payload: impl IntoPayload) -> Result<(), TrySendError> {
        self.try_send_with(payload, self.inner.qos)
    }

    /// [`GroupSender::try_send`] with quality of service `qos` for this message; a `qos` the
    /// engine does not serve hands the message back in [`TrySendError::Unsupported`].
    pub fn try_send_with(&self, payload: impl IntoPayload, qos: Qos) -> Result<(), TrySendError> {
        let payload = payload.into_payload();
        if self.check_qos(qos).is_err() {
            return Err(TrySendError::Unsupported(payload));
        }
        if let Some(suspect) = self.inner.shared.suspect() {
            return Err(TrySendError::MemberFailed { suspect, payload });
        }
        let op = Op::Send {
            payload,
            qos,
            done: None,
        };
        match self.inner.ops.try_send(op) {
            Ok(()) => {
                self.inner.node.wake();
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(op)) => Err(TrySendError::Full(op_payload(op))),
            Err(mpsc::error::TrySendError::Closed(op)) => Err(TrySendError::Closed(op_payload(op))),
        }
    }

    /// Queue a message, blocking only while the send queue is full; does not wait for the
    /// message to complete. The fast way to stream messages from one thread while another
    /// receives. In recovery mode it fails with [`Error::MemberFailed`] (keep a clone of the
    /// payload, which is cheap, to send it again after the reset); a message queued before the
    /// failure was known goes out after the reset.
    pub fn send_nowait(&self, payload: impl IntoPayload) -> Result<(), Error> {
        self.send_nowait_with(payload, self.inner.qos)
    }

    /// [`GroupSender::send_nowait`] with quality of service `qos` for this message (refused at
    /// once, as by [`GroupSender::send_with`], when the engine does not serve it).
    pub fn send_nowait_with(&self, payload: impl IntoPayload, qos: Qos) -> Result<(), Error> {
        self.check_qos(qos)?;
        self.inner.shared.member_failed()?;
        let op = Op::Send {
            payload: payload.into_payload(),
            qos,
            done: None,
        };
        block_on(self.inner.ops.send(op), None)
            .expect("no deadline")
            .map_err(|_| Error::Closed)?;
        self.inner.node.wake();
        Ok(())
    }

    /// Async [`GroupSender::send_nowait_with`]: waits (without a thread) only while the send
    /// queue is full, not for the message to complete.
    pub(crate) async fn send_nowait_async_with(
        &self,
        payload: impl IntoPayload,
        qos: Qos,
    ) -> Result<(), Error> {
        self.check_qos(qos)?;
        self.inner.shared.member_failed()?;
        let op = Op::Send {
            payload: payload.into_payload(),
            qos,
            done: None,
        };
        self.inner.ops.send(op).await.map_err(|_| Error::Closed)?;
        self.inner.node.wake();
        Ok(())
    }

    /// Answer message `request` of member `to` on the engine's response channel
    /// ([`rmcast_proto::Engine::reply`]): `to` receives it as [`Event::Reply`]. Stays in order
    /// with the messages queued before it; returns once the engine took the answer. Engines
    /// without a response channel ([`Guarantees::replies`]) refuse with
    /// [`Error::Send`]`(`[`SendError::Unsupported`]`)`.
    pub fn reply(&self, to: NodeId, request: u64, payload: impl IntoPayload) -> Result<(), Error> {
        self.check_capability(|c| c.replies)?;
        let (tx, rx) = oneshot::channel();
        let op = Op::Reply {
            to,
            request,
            payload: payload.into_payload(),
            done: tx,
        };
        block_on(self.inner.ops.send(op), None)
            .expect("no deadline")
            .map_err(|_| Error::Closed)?;
        self.inner.node.wake();
        block_on(rx, None)
            .expect("no deadline")
            .map_err(|_| Error::Closed)?
    }

    /// Send `payload` to the group from outside it ([`crate::OpenMode::Client`]; RMP's
    /// multi-RPC) with quality of service `qos`, naming handler lock `handler` (0 to 5) whose
    /// holder is to answer. Returns the request's number once the engine took it; the group's
    /// acknowledgement comes as [`GroupEvent::SendComplete`], the answer as
    /// [`GroupEvent::Reply`], and a request given up (nobody acknowledged it after about 30
    /// s of retries) as [`GroupEvent::Loss`]. Blocks while the request window is full.
    /// [`Group::call`] does it all and waits. Members refuse with
    /// [`Error::Send`]`(`[`SendError::Unsupported`]`)`.
    pub fn request(
        &self,
        payload: impl IntoPayload,
        qos: Qos,
        handler: Option<u8>,
    ) -> Result<u64, Error> {
        self.check_capability(|c| c.requests)?;
        self.check_qos(qos)?;
        self.call_engine(EngineCall::Request {
            payload: payload.into_payload(),
            qos,
            handler,
        })
    }

    /// Ask for lock `lock` (RMP section 4.3; locks 0 to 5 are the handler locks). Returns once
    /// the engine took the request; every member, this one included, then hears at the lock
    /// change's place in the total order who holds it ([`GroupEvent::Lock`]): this member if it
    /// was free, its holder otherwise. One lock request at a time: this call waits for the
    /// previous one to be ordered.
    pub fn lock(&self, lock: u16) -> Result<(), Error> {
        self.check_capability(|c| c.locks)?;
        self.call_engine(EngineCall::Lock {
            lock,
            acquire: true,
        })
        .map(|_| ())
    }

    /// Hand request `request` of `sender`, which this member is to answer (a
    /// [`GroupEvent::Deliver`] with `respond`), to member `to`, which answers the sender
    /// directly (Amoeba's ForwardRequest; the sender does not notice): `to` receives it as
    /// [`GroupEvent::Forwarded`]. Ring engine only.
    pub fn forward(
        &self,
        to: NodeId,
        sender: NodeId,
        request: u64,
        payload: impl IntoPayload,
    ) -> Result<(), Error> {
        self.check_capability(|c| c.forwarding)?;
        self.call_engine(EngineCall::Forward {
            to,
            sender,
            request,
            payload: payload.into_payload(),
        })
        .map(|_| ())
    }

    /// Release lock `lock` (see [`GroupSender::lock`]).
    pub fn unlock(&self, lock: u16) -> Result<(), Error> {
        self.check_capability(|c| c.locks)?;
        self.call_engine(EngineCall::Lock {
            lock,
            acquire: false,
        })
        .map(|_| ())
    }

    fn call_engine(&self, call: EngineCall) -> Result<u64, Error> {
        let (tx, rx) = oneshot::channel();
        block_on(self.inner.ops.send(Op::Call { call, done: tx }), None)
            .expect("no deadline")
            .map_err(|_| Error::Closed)?;
        self.inner.node.wake();
        block_on(rx, None)
            .expect("no deadline")
            .map_err(|_| Error::Closed)?
    }

    /// Refuse a call the engine does not declare it can answer ([`Capabilities`]), before it
    /// reaches the engine.
    fn check_capability(&self, has: impl FnOnce(&Capabilities) -> bool) -> Result<(), Error> {
        if has(&self.inner.guarantees.capabilities) {
            Ok(())
        } else {
            Err(Error::Send(SendError::Unsupported))
        }
    }

    /// Refuse a quality of service the engine does not serve, before it reaches the engine.
    fn check_qos(&self, qos: Qos) -> Result<(), Error> {
        if self.inner.guarantees.qos.contains(qos) {
            Ok(())
        } else {
            Err(Error::Send(SendError::Unsupported))
        }
    }

    /// Leave the group cleanly once the messages queued before have been sent, waiting at most
    /// [`GroupConfig::leave_timeout`] for the group to confirm. It returns once this member's
    /// last datagrams (the farewell that tells the others it has its leave) are handed to the
    /// socket, so a process may exit right after. Events delivered before the leave stay
    /// readable; then the receive calls report the end.
    pub fn leave(&self) -> Result<(), Error> {
        self.leave_timeout(self.inner.leave_timeout)
    }

    /// [`GroupSender::leave`] with an explicit timeout.
    pub fn leave_timeout(&self, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        let (tx, rx) = oneshot::channel();
        let op = Op::Leave { timeout, reply: tx };
        block_on(self.inner.ops.send(op), Some(deadline))
            .ok_or(Error::LeaveTimeout)?
            .map_err(|_| Error::Closed)?;
        self.inner.node.wake();
        // The I/O thread enforces the timeout itself; the extra second only guards against an
        // I/O thread that no longer runs.
        block_on(rx, Some(deadline + Duration::from_secs(1)))
            .ok_or(Error::LeaveTimeout)?
            .map_err(|_| Error::Closed)?
    }

    /// Async [`GroupSender::leave`].
    pub async fn leave_async(&self) -> Result<(), Error> {
        let (tx, rx) = oneshot::channel();
        let op = Op::Leave {
            timeout: self.inner.leave_timeout,
            reply: tx,
        };
        self.inner.ops.send(op).await.map_err(|_| Error::Closed)?;
        self.inner.node.wake();
        rx.await.map_err(|_| Error::Closed)?
    }

    /// The group as this member sees it (Amoeba's GetInfoGroup): members, this member's id
    /// and rank, the sequencer, the incarnation, whether it is in recovery mode, the resilience
    /// degree and the use of the history buffer. Taken from the engine itself, so it may be a
    /// step ahead of the events not yet received.
    pub fn info(&self) -> Result<GroupInfo, Error> {
        self.query().map(|(info, _, _)| info)
    }

    /// Rebuild the group after a failure from the members that can still communicate
    /// (Amoeba's ResetGroup), with at least `min_members` members, this one included (0: the
    /// policy's [`crate::RecoveryPolicy::min_members`], by default a majority of the view before
    /// the failure). Not in recovery mode, the call starts it, as a member that suspects a
    /// failure itself would.
    ///
    /// Returns once the reset has started; the outcome comes as events:
    /// [`Recovery::Reset`] and the new view when the group is formed, or
    /// [`Recovery::ResetFailed`] while too few members answer (the engine keeps trying), or
    /// [`Recovery::Expelled`] if another member formed the group without this one. Engines
    /// without crash recovery refuse with [`Error::Send`]`(`[`rmcast_proto::SendError::Unsupported`]`)`.
    pub fn reset(&self, min_members: usize) -> Result<(), Error> {
        let (tx, rx) = std_mpsc::sync_channel(1);
        self.inner.node.command(Command::Reset {
            key: self.inner.key,
            min_members,
            reply: tx,
        })?;
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(r) => r,
            Err(std_mpsc::RecvTimeoutError::Disconnected) => Err(Error::Closed),
            Err(std_mpsc::RecvTimeoutError::Timeout) => Err(Error::Timeout),
        }
    }

    /// The engine's counters (datagrams, retransmissions, NACKs, deliveries, ...).
    pub fn counters(&self) -> Result<Counters, Error> {
        self.query().map(|(_, c, _)| c)
    }

    /// The counters only this group's engine keeps, by name (e.g. the sequencer's BC_SYNC
    /// count), as [`rmcast_proto::Engine::engine_counters`] reports them.
    pub fn engine_counters(&self) -> Result<Vec<(&'static str, u64)>, Error> {
        self.query().map(|(_, _, e)| e)
    }

    /// How long own messages took from the engine taking them to their completion
    /// ([`rmcast_proto::Event::SendComplete`]), as a histogram, since the group was opened.
    /// Every send is timed, blocking or not, as long as fewer than 4,096 later ones were taken
    /// before it completed. Read from shared memory: no round trip to the I/O thread.
    pub fn send_latency(&self) -> crate::SendLatency {
        self.inner.shared.send_latency.snapshot()
    }

    /// A reference that does not keep the group open (held by the metrics collector).
    #[cfg(feature = "metrics")]
    pub(crate) fn downgrade(&self) -> std::sync::Weak<GroupHandle> {
        Arc::downgrade(&self.inner)
    }

    /// The handle `weak` refers to, if the group still has one.
    #[cfg(feature = "metrics")]
    pub(crate) fn upgrade(weak: &std::sync::Weak<GroupHandle>) -> Option<GroupSender> {
        weak.upgrade().map(|inner| GroupSender { inner })
    }

    fn query(&self) -> Result<Snapshot, Error> {
        let (tx, rx) = std_mpsc::sync_channel(1);
        self.inner.node.command(Command::Info {
            key: self.inner.key,
            reply: tx,
        })?;
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(Some(r)) => Ok(r),
            Ok(None) | Err(std_mpsc::RecvTimeoutError::Disconnected) => Err(Error::Closed),
            Err(std_mpsc::RecvTimeoutError::Timeout) => Err(Error::Timeout),
        }
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The group id in every datagram's header (hash of the name).
    pub fn group_id(&self) -> u32 {
        self.inner.group_id
    }

    /// This member's id.
    pub fn me(&self) -> NodeId {
        self.inner.node.id
    }

    /// The protocol the group runs ("sequencer", ...).
    pub fn engine_kind(&self) -> &str {
        &self.inner.kind
    }

    /// The resilience degree the engine was configured with.
    pub fn resilience(&self) -> u8 {
        self.inner.guarantees.resilience
    }

    /// What the engine promises (order, resilience, the qualities of service it serves, ...).
    pub fn guarantees(&self) -> Guarantees {
        self.inner.guarantees
    }

    /// The quality of service of [`GroupSender::send`] and the other sends without `_with`.
    pub fn qos(&self) -> Qos {
        self.inner.qos
    }

    /// The group's multicast address, or `None` in unicast mode.
    pub fn multicast_addr(&self) -> Option<SocketAddr> {
        self.inner.multicast
    }

    /// The peers of a unicast-mode group (empty with multicast).
    pub fn unicast_peers(&self) -> &[SocketAddr] {
        &self.inner.unicast_peers
    }

    /// Largest datagram the engine writes.
    pub fn max_datagram_bytes(&self) -> usize {
        self.inner.max_datagram_bytes
    }

    /// Whether this node created the group (always for [`OpenMode::Create`]; for
    /// [`OpenMode::JoinOrCreate`], when nobody answered the join).
    pub fn created(&self) -> bool {
        self.inner.created.load(Ordering::Relaxed)
    }
}

/// The payload of an op the send queue handed back (a send, since only sends are tried).
fn op_payload(op: Op) -> Bytes {
    match op {
        Op::Send { payload, .. } | Op::Reply { payload, .. } => payload,
        Op::Call {
            call: EngineCall::Request { payload, .. },
            ..
        } => payload,
        Op::Call { .. } | Op::Leave { .. } => Bytes::new(),
    }
}

/// A membership of a group: sends (through [`GroupSender`], which it dereferences to) and
/// receives. Receiving needs `&mut self`; hand [`Group::sender`] to other threads that send.
///
/// **Read it, or let it go.** Events wait for the application in a bounded queue
/// ([`GroupConfig::event_queue_capacity`]); while a `Group` is alive and that queue is full, the
/// runtime takes nothing more from the engine, so the engine stops and sends wait (nothing is
/// dropped). A thread that only sends, with nobody reading, must therefore not keep the
/// `Group`: [`Group::into_sender`] keeps the membership and lets the events go (they are
/// discarded, never queued), so that such a sender never waits for a reader.
pub struct Group {
    sender: GroupSender,
    events: Batched<GroupEvent>,
}

impl Deref for Group {
    type Target = GroupSender;
    fn deref(&self) -> &GroupSender {
        &self.sender
    }
}

impl Group {
    /// A sending handle for other threads or tasks.
    pub fn sender(&self) -> GroupSender {
        self.sender.clone()
    }

    /// Only the sending half: the membership goes on (until [`GroupSender::leave`] or the last
    /// handle is dropped) and its events are discarded from now on, so that a member that only
    /// sends never waits for a reader (see [`Group`]). Its own sends still wait for their
    /// completion as before.
    pub fn into_sender(self) -> GroupSender {
        self.sender
    }

    /// The next event, blocking until there is one; `None` once the group is closed (left,
    /// expelled, or the node shut down) and every event before has been read. Recovery mode
    /// shows as [`Recovery::Failed`]; the call then blocks until the reset's events come.
    pub fn recv(&mut self) -> Option<GroupEvent> {
        let ev = self.events.next_blocking(None).expect("no deadline");
        self.received(ev.is_some());
        ev
    }

    /// The next event, waiting at most `timeout`: [`Error::Timeout`] when none came,
    /// [`Error::Closed`] when the group is closed and drained. When none came and the group is
    /// in recovery mode, [`Error::MemberFailed`] instead of [`Error::Timeout`] (as the paper's
    /// ReceiveFromGroup fails until the reset); the call still waits the whole `timeout`
    /// first, so that a receive loop does not spin while the group recovers.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<GroupEvent, Error> {
        let ev = match self.events.next_blocking(Some(Instant::now() + timeout)) {
            None => Err(match self.sender.inner.shared.suspect() {
                Some(suspect) => Error::MemberFailed { suspect },
                None => Error::Timeout,
            }),
            Some(None) => Err(Error::Closed),
            Some(Some(ev)) => Ok(ev),
        };
        self.received(ev.is_ok());
        ev
    }

    /// A request from outside the group, waited for (RMP's multi-RPC; see
    /// [`GroupSender::request`]): with a `handler`, the answer of the member holding that
    /// handler lock (`Ok(Some(reply))`); without, `Ok(None)` once the group acknowledged
    /// delivery at level `qos`. [`Error::Timeout`] when neither came within `timeout` (the
    /// request may still be delivered: ask again to know). Events of other requests read
    /// meanwhile are dropped: for several requests at a time use [`GroupSender::request`] and
    /// [`Group::recv`].
    pub fn call(
        &mut self,
        payload: impl IntoPayload,
        qos: Qos,
        handler: Option<u8>,
        timeout: Duration,
    ) -> Result<Option<rmcast_proto::Reply>, Error> {
        let deadline = Instant::now() + timeout;
        let n = self.sender.request(payload, qos, handler)?;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout);
            }
            match self.recv_timeout(left)? {
                GroupEvent::Reply(r) if r.request == n && handler.is_some() => return Ok(Some(r)),
                GroupEvent::SendComplete { msg } if msg == n && handler.is_none() => {
                    return Ok(None)
                }
                GroupEvent::Loss(l) if l.first_seq == n => return Err(Error::Timeout),
                _ => {}
            }
        }
    }

    /// The next event if one is waiting: `Ok(None)` when none is, [`Error::MemberFailed`]
    /// when none is and the group is in recovery mode, [`Error::Closed`] when the group is
    /// closed and drained.
    pub fn try_recv(&mut self) -> Result<Option<GroupEvent>, Error> {
        let ev = match self.events.try_next() {
            TryNext::Item(ev) => Ok(Some(ev)),
            TryNext::Empty => self.sender.inner.shared.member_failed().map(|()| None),
            TryNext::Closed => Err(Error::Closed),
        };
        self.received(matches!(ev, Ok(Some(_))));
        ev
    }

    /// Async receive (any executor; tokio's `select!` and timeouts work with it).
    pub async fn recv_async(&mut self) -> Option<GroupEvent> {
        let ev = self.events.next().await;
        self.received(ev.is_some());
        ev
    }

    /// Events waiting in the queue.
    pub fn pending_events(&self) -> usize {
        self.events.len()
    }

    /// After a receive: if the I/O thread paused the engine because the queue was full, there is
    /// room again, so wake it.
    fn received(&self, got: bool) {
        let shared = &self.sender.inner.shared;
        if got
            && shared.events_stalled.load(Ordering::Relaxed)
            && shared.events_stalled.swap(false, Ordering::AcqRel)
        {
            self.sender.inner.node.wake();
        }
    }
}

/// The group's events as a `Stream` (feature `stream`, on by default): the same events as
/// [`Group::recv_async`], in the same order; it ends when the group is closed and drained
/// (after a leave, an expulsion or a merge). Use it with any executor and `StreamExt`
/// (`futures-util`, `tokio-stream`).
#[cfg(feature = "stream")]
impl futures_core::Stream for Group {
    type Item = GroupEvent;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<GroupEvent>> {
        let this = self.get_mut();
        let ev = std::task::ready!(this.events.poll_next(cx));
        this.received(ev.is_some());
        std::task::Poll::Ready(ev)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.events.len(), None)
    }
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("name", &self.sender.inner.name)
            .field("me", &self.sender.inner.node.id)
            .field("engine", &self.sender.inner.kind)
            .finish()
    }
}

impl std::fmt::Debug for GroupSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupSender")
            .field("name", &self.inner.name)
            .field("me", &self.inner.node.id)
            .finish()
    }
}
