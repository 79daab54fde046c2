//! The I/O thread: one `mio` event loop per node over its unicast socket, the multicast socket
//! of each group, the engines' timers and a waker for the application.
//!
//! Each turn of the loop reads every socket that is readable (up to a budget, so that a flood
//! on one socket cannot starve timers and sends; a socket left with data is read again on the
//! next turn without blocking), fires due timers, and then *pumps* every group: queued messages
//! go into the engine while it accepts them, the engine's datagrams go out, and its events go to
//! the application while there is room in the event queue. A full queue is never worked around:
//! the loop stops taking events from that engine, which then pushes back on its senders.

use crate::batch::{copy_of, Datagram, RecvBatch};
use crate::config::{GroupAddr, NodeConfig, OpenMode};
use crate::error::Error;
use crate::net;
use crate::peers::{self, Path, Peers, Route};
use crate::queue::{Batched, TryNext};
use crate::sessions::{self, Probe, Sessions};
use crate::shared::{
    AtomicNodeCounters, Command, EngineCall, GroupShared, NodeShared, Op, OpenRequest,
};
use rmcast_proto::formation::{hello, Entry, Formation, FormationConfig, Notice, Rejoin};
use rmcast_proto::secure::{GroupCipher, Rejection, Sealer, SessionName, AUTH_OVERHEAD};
use rmcast_proto::wire::{self, EngineKind};
use rmcast_proto::{ConfigError, Destination, Engine, Event, NodeId, Recovery, SendError, Time};
use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, info, trace, warn};

const WAKER: mio::Token = mio::Token(0);
const UNICAST: mio::Token = mio::Token(1);
/// The precise timer's token ([`crate::timer::PreciseTimer`]).
const TIMER: mio::Token = mio::Token(2);
/// Tokens of group sockets are the group's key plus this.
const GROUP_TOKEN_BASE: usize = 3;

/// Datagrams read from one socket per turn before the loop attends to everything else.
const RX_BUDGET: usize = 2048;
/// Datagrams taken from one engine per turn.
const TX_BUDGET: usize = 1024;
/// Messages moved from the send queue into one engine per turn.
const OPS_BUDGET: usize = 1024;
/// Events moved from one engine to its queue per turn.
const EVENTS_BUDGET: usize = 1024;
/// Rounds of (messages in, datagrams out, events out) per group per turn: a completion can let
/// more messages in, which makes more datagrams.
const PUMP_ROUNDS: usize = 4;
/// How long a stopping node waits at most for its socket to take the last datagrams.
const SHUTDOWN_FLUSH: Duration = Duration::from_millis(200);
/// How long a closing group holds up the loop at most while the socket pushes back on its last
/// datagrams (rare: the backlog holds one transmit's worth).
const CLOSE_FLUSH: Duration = Duration::from_millis(20);
/// How long a node being shut down waits for its groups to confirm their leaves.
const SHUTDOWN_LINGER: Duration = Duration::from_secs(1);
/// Capacity of the control command queue.
const COMMAND_QUEUE: usize = 64;
/// How long past its join timeout a joining open waits for formation's answer (admitted,
/// created, timed out) before it fails with [`Error::Timeout`]; formation answers well
/// before, this only bounds the wait should it not.
const OPEN_MARGIN: Duration = Duration::from_secs(10);

/// Open the unicast socket and start the I/O thread.
pub(crate) fn spawn(
    cfg: NodeConfig,
    id: NodeId,
) -> Result<(Arc<NodeShared>, JoinHandle<()>), Error> {
    cfg.check_receive_loss()?;
    let loss = LossShim::new(cfg.receive_loss, os_seed());
    let multicast_index = net::multicast_index(cfg.interface, cfg.interface_index);
    let receive_offload = cfg.receive_offload.unwrap_or(cfg.segmentation_offload);
    let std_sock = net::unicast_socket(
        cfg.interface,
        multicast_index,
        cfg.port,
        cfg.multicast_ttl,
        cfg.socket_buffer_bytes,
        receive_offload,
    )
    .map_err(|e| {
        // The bare OS error ("Cannot assign requested address") names neither the address
        // nor the usual cause: an interface address this host does not have, or a port in use.
        let hint = match e.kind() {
            std::io::ErrorKind::AddrNotAvailable => " (is it an address of this host?)",
            std::io::ErrorKind::AddrInUse => " (the port is in use)",
            _ => "",
        };
        let port = match cfg.port {
            0 => String::new(),
            p => format!(" port {p}"),
        };
        std::io::Error::new(
            e.kind(),
            format!("interface {}{port}: {e}{hint}", cfg.interface),
        )
    })?;
    let local_addr = std_sock.local_addr()?;
    let receive_buffer_bytes = net::receive_buffer_bytes(&std_sock);
    // A segment must fit the interface's MTU: runs are cut at its datagram size (0: unknown,
    // never segmented).
    let gso_max = match cfg.segmentation_offload {
        true => net::path_datagram_bytes_on(cfg.interface, multicast_index, 0),
        false => 0,
    };
    let poll = mio::Poll::new()?;
    let waker = mio::Waker::new(poll.registry(), WAKER)?;
    let timer = crate::timer::PreciseTimer::new(poll.registry(), TIMER)?;
    let mut unicast = mio::net::UdpSocket::from_std(std_sock);
    poll.registry().register(
        &mut unicast,
        UNICAST,
        mio::Interest::READABLE | mio::Interest::WRITABLE,
    )?;
    let (cmd_tx, cmd_rx) = std_mpsc::sync_channel(COMMAND_QUEUE);
    let shared = Arc::new(NodeShared {
        id,
        local_addr,
        interface: cfg.interface,
        multicast_index,
        socket_buffer_bytes: cfg.socket_buffer_bytes,
        receive_buffer_bytes,
        receive_offload,
        waker,
        wake_pending: AtomicBool::new(false),
        commands: cmd_tx,
        counters: AtomicNodeCounters::default(),
    });
    // A random session for the datagrams this node seals (rmcast_proto::secure): no nonce
    // rests on the node id or the clock.
    let sealer = Sealer::random()
        .map_err(|e| Error::Io(std::io::Error::other(format!("drawing a session id: {e}"))))?;
    let io_shared = shared.clone();
    let origin = Instant::now();
    // The loop is built on its own thread: engines need not be `Send`.
    let thread = std::thread::Builder::new()
        .name(format!("rmcast-io-{id}"))
        .spawn(move || {
            IoLoop {
                poll,
                commands: cmd_rx,
                shared: io_shared.clone(),
                origin,
                net: Net {
                    sock: unicast,
                    local: local_addr,
                    ttl: cfg.multicast_ttl,
                    backlog: VecDeque::new(),
                    spare: Vec::new(),
                    out: crate::batch::SendBatch::with_gso(gso_max),
                    shared: io_shared,
                    send_error_logged: 0,
                },
                groups: Vec::new(),
                rx: RecvBatch::new(),
                tx_buf: Vec::with_capacity(1 << 16),
                sealer,
                seal_buf: Vec::with_capacity(1 << 16),
                unicast_pending: false,
                unicast_drops: 0,
                shutdown: None,
                timer,
                loss,
            }
            .run()
        })?;
    info!(node = %id, addr = %local_addr, multicast_index, "node started");
    Ok((shared, thread))
}

/// The unicast socket, where every datagram leaves from (what is known about peers is each
/// group's own: [`GroupState::peers`]).
struct Net {
    sock: mio::net::UdpSocket,
    local: SocketAddr,
    /// The socket's multicast TTL ([`NodeConfig::multicast_ttl`]).
    ttl: u32,
    /// Datagrams the socket refused with `WouldBlock` (with the TTL of a scoped multicast),
    /// sent when it is writable again. While any wait, no engine is asked for more, so this
    /// holds at most one transmit's datagrams and fan-out.
    backlog: VecDeque<(Vec<u8>, SocketAddr, Option<u32>)>,
    /// Buffers of sent backlog entries, reused.
    spare: Vec<Vec<u8>>,
    /// Datagrams written this turn, sent together ([`Net::flush_out`]): by `sendmmsg` when the
    /// batch fills and at the end of every loop turn.
    out: crate::batch::SendBatch,
    shared: Arc<NodeShared>,
    send_error_logged: u64,
}

impl Net {
    fn counters(&self) -> &AtomicNodeCounters {
        &self.shared.counters
    }

    fn blocked(&self) -> bool {
        !self.backlog.is_empty()
    }

    /// Send one datagram, or keep it for when the socket is writable.
    fn send(&mut self, buf: &[u8], to: SocketAddr) {
        self.send_ttl(buf, to, None);
    }

    /// Send one multicast datagram with time-to-live `ttl` (`Destination::Scoped`).
    fn send_scoped(&mut self, buf: &[u8], to: SocketAddr, ttl: u8) {
        // Never further than the node is configured to reach: the default keeps everything on
        // this host, and an engine's scope only narrows it.
        let ttl = u32::from(ttl).min(self.ttl);
        self.send_ttl(buf, to, (ttl != self.ttl).then_some(ttl));
    }

    /// `sock.send_to`, with the multicast TTL (IPv6: hop limit) set to `ttl` for this one
    /// datagram.
    fn send_to(&self, buf: &[u8], to: SocketAddr, ttl: Option<u32>) -> std::io::Result<usize> {
        let Some(ttl) = ttl else {
            return self.sock.send_to(buf, to);
        };
        self.set_multicast_ttl(to, ttl)?;
        let r = self.sock.send_to(buf, to);
        if let Err(e) = self.set_multicast_ttl(to, self.ttl) {
            warn!(error = %e, "could not restore the multicast TTL");
        }
        r
    }

    /// Set the socket's multicast TTL, or hop limit for an IPv6 destination.
    fn set_multicast_ttl(&self, to: SocketAddr, ttl: u32) -> std::io::Result<()> {
        match to {
            SocketAddr::V4(_) => self.sock.set_multicast_ttl_v4(ttl),
            SocketAddr::V6(_) => socket2::SockRef::from(&self.sock).set_multicast_hops_v6(ttl),
        }
    }

    /// Send one datagram that `write` writes (clearing the buffer first) straight into the
    /// buffer it leaves from, or, while the socket pushes back, into the backlog's: a secure
    /// group's datagram is sealed there, with no copy beyond the one a plain datagram has.
    /// Nothing is sent if `write` returns false.
    fn send_with(&mut self, to: SocketAddr, write: impl FnOnce(&mut Vec<u8>) -> bool) {
        if self.blocked() {
            let mut v = self.spare.pop().unwrap_or_default();
            if write(&mut v) {
                self.backlog.push_back((v, to, None));
            } else {
                self.spare.push(v);
            }
            return;
        }
        self.out.push_with(to, write);
        if self.out.is_full() {
            self.flush_out();
        }
    }

    fn send_ttl(&mut self, buf: &[u8], to: SocketAddr, ttl: Option<u32>) {
        if ttl.is_none() {
            self.send_with(to, copy_of(buf));
            return;
        }
        if self.blocked() {
            self.defer(buf, to, ttl);
            return;
        }
        // A scoped multicast changes the socket's TTL for itself: what was queued before it
        // leaves first, in order.
        self.flush_out();
        if self.blocked() {
            self.defer(buf, to, ttl);
            return;
        }
        loop {
            match self.send_to(buf, to, ttl) {
                Ok(n) => {
                    let c = self.counters();
                    AtomicNodeCounters::add(&c.datagrams_sent, 1);
                    AtomicNodeCounters::add(&c.bytes_sent, n as u64);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    AtomicNodeCounters::add(&self.counters().send_deferred, 1);
                    self.defer(buf, to, ttl);
                }
                Err(e) => self.send_failed(to, &e),
            }
            return;
        }
    }

    /// Send what [`Net::send`] queued, in order; what the socket refuses waits in the backlog.
    fn flush_out(&mut self) {
        let mut i = 0;
        while i < self.out.len() {
            match self.out.send_from(&self.sock, i) {
                Ok(k) => {
                    let bytes: usize = (i..i + k).map(|j| self.out.get(j).0.len()).sum();
                    let c = self.counters();
                    AtomicNodeCounters::add(&c.datagrams_sent, k as u64);
                    AtomicNodeCounters::add(&c.bytes_sent, bytes as u64);
                    i += k;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    let left = self.out.len() - i;
                    AtomicNodeCounters::add(&self.counters().send_deferred, left as u64);
                    for j in i..self.out.len() {
                        let (buf, to) = self.out.get(j);
                        let mut v = self.spare.pop().unwrap_or_default();
                        v.clear();
                        v.extend_from_slice(buf);
                        self.backlog.push_back((v, to, None));
                    }
                    break;
                }
                Err(e) => {
                    // As for one datagram: this one is lost (the protocol repairs it); the
                    // rest still goes.
                    let to = self.out.get(i).1;
                    self.send_failed(to, &e);
                    i += 1;
                }
            }
        }
        self.out.clear();
    }

    fn send_failed(&mut self, to: SocketAddr, e: &std::io::Error) {
        // A lost datagram is repaired by the protocol; say so, without flooding the log when a
        // peer is gone for good.
        AtomicNodeCounters::add(&self.counters().send_errors, 1);
        self.send_error_logged += 1;
        if self.send_error_logged.is_power_of_two() {
            // The common IPv6 case gets its cause named: the kernel's multicast route is on
            // another interface (Linux, loopback: see the crate documentation, IPv6).
            let hint = (to.is_ipv6()
                && to.ip().is_multicast()
                && e.kind() == ErrorKind::NetworkUnreachable)
                .then_some("no IPv6 multicast route on the node's interface");
            warn!(%to, error = %e, hint, count = self.send_error_logged, "send failed");
        }
    }

    fn defer(&mut self, buf: &[u8], to: SocketAddr, ttl: Option<u32>) {
        let mut v = self.spare.pop().unwrap_or_default();
        copy_of(buf)(&mut v);
        self.backlog.push_back((v, to, ttl));
    }

    /// The socket is writable: send what waits.
    fn flush_backlog(&mut self) {
        while let Some((buf, to, ttl)) = self.backlog.pop_front() {
            match self.send_to(&buf, to, ttl) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.backlog.push_front((buf, to, ttl));
                    return;
                }
                Ok(n) => {
                    let c = self.counters();
                    AtomicNodeCounters::add(&c.datagrams_sent, 1);
                    AtomicNodeCounters::add(&c.bytes_sent, n as u64);
                    self.spare.push(buf);
                }
                Err(e) => {
                    AtomicNodeCounters::add(&self.counters().send_errors, 1);
                    debug!(%to, error = %e, "deferred send failed");
                    self.spare.push(buf);
                }
            }
        }
    }

    /// Send the backlog, waiting up to `limit` for the socket to take it (the thread sleeps:
    /// only for datagrams that must leave before something ends).
    fn drain_backlog(&mut self, limit: Duration) {
        let until = Instant::now() + limit;
        self.flush_backlog();
        while self.blocked() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
            self.flush_backlog();
        }
    }
}

/// A leave in progress.
struct Leaving {
    /// When the engine's leave starts even if own messages are still outstanding.
    start_by: Time,
    /// When the leave is given up.
    deadline: Time,
    started: bool,
    reply: Option<oneshot::Sender<Result<(), Error>>>,
}

/// Where the answer to a leave goes.
type LeaveReply = oneshot::Sender<Result<(), Error>>;

/// One group membership, owned by the I/O thread: the group's engine inside its formation
/// ([`rmcast_proto::formation`]), its sockets and destinations, and the application's queues
/// and waiting callers.
struct GroupState {
    key: u64,
    name: String,
    gid: u32,
    leave_timeout: Duration,
    /// Pass the engine's completions on as events ([`crate::GroupConfig::completion_events`]).
    completion_events: bool,
    /// Opened from outside the group ([`OpenMode::Client`]): acknowledgements always reach
    /// the application, which waits for them.
    client: bool,
    /// A secure group's keys and replay windows ([`crate::GroupConfig::keys`]).
    cipher: Option<GroupCipher>,
    /// Where this group's peers live and which addresses are validated ([`crate::peers`]):
    /// one table per group, so that one group's traffic never redirects another's unicasts.
    peers: Peers,
    /// A secure group's sender sessions not yet confirmed live, and what they sent
    /// ([`crate::sessions`]).
    sessions: Sessions,
    /// The engine, inside group formation: joins, creates, HELLOs, merges and rejoins.
    engine: Formation,
    /// The multicast socket and whether it may still hold unread datagrams.
    mcast: Option<mio::net::UdpSocket>,
    mcast_pending: bool,
    /// The multicast socket's count of datagrams dropped for want of buffer, as last told.
    mcast_drops: u32,
    /// Where `Destination::Group` goes: the multicast address, or every unicast peer.
    group_dests: Vec<SocketAddr>,
    /// Whether `group_dests` is a multicast address (not a unicast fan-out).
    multicast: bool,
    ops: Batched<Op>,
    /// A message the engine could not take yet (back-pressure): first in line.
    held: Option<Op>,
    events: mpsc::Sender<Event>,
    shared: Arc<GroupShared>,
    /// Blocking and async senders waiting for their message to complete, by message number.
    completions: HashMap<u64, oneshot::Sender<Result<u64, Error>>>,
    /// Own messages submitted and not yet complete.
    outstanding: u64,
    /// When own messages were taken by the engine, for the send latency histogram.
    send_clock: crate::latency::SendClock,
    /// The open's answer while the node is joining, and when the wait for it ends
    /// ([`Error::Timeout`]): the join timeout and a margin, enforced here so that the blocking
    /// and async opens need no timer of their own.
    open_reply: Option<(oneshot::Sender<Result<bool, Error>>, Time)>,
    leaving: Option<Leaving>,
    /// Finished: removed at the end of the turn.
    done: bool,
    /// The leave's answer, sent once the group's last datagrams are out.
    final_reply: Option<(LeaveReply, Result<(), Error>)>,
}

impl GroupState {
    fn start_leave(
        &mut self,
        now: Time,
        timeout: Duration,
        reply: Option<oneshot::Sender<Result<(), Error>>>,
    ) {
        if let Some(l) = &mut self.leaving {
            // A second leave waits for the first; keep the earlier deadline.
            if let Some(r) = reply {
                if let Some(old) = l.reply.replace(r) {
                    let _ = old.send(Err(Error::Closed));
                }
            }
            return;
        }
        debug!(group = %self.name, "leave requested");
        self.engine.prepare_leave();
        self.leaving = Some(Leaving {
            // Give own messages half the time to complete, so that a leave right after a
            // burst of sends does not cut them off.
            start_by: now + timeout / 2,
            deadline: now + timeout,
            started: false,
            reply,
        });
    }

    /// Close the group at the end of the turn. The leave's answer waits until then
    /// ([`IoLoop::remove_finished`]): an application that exits once `leave` returns must not
    /// take the engine's last datagrams (a farewell the others wait for) with it.
    fn finish(&mut self, result: Result<(), Error>) {
        if let Some(l) = self.leaving.as_mut() {
            if let Some(r) = l.reply.take() {
                self.final_reply = Some((r, result));
            }
        }
        if let Some((r, _)) = self.open_reply.take() {
            let _ = r.send(Err(Error::Closed));
        }
        self.shared.set_recovering(None);
        self.done = true;
    }

    /// This member is out of the group it was in (and joins again): completions waiting fail
    /// with `error`.
    fn left_group(&mut self, error: impl Fn() -> Error) {
        for (_, d) in self.completions.drain() {
            let _ = d.send(Err(error()));
        }
        self.outstanding = 0;
        self.shared.set_recovering(None);
    }

    /// The group went on without this member: tell whoever waits why, then close.
    fn expelled(&mut self, incarnation: u32) {
        warn!(group = %self.name, incarnation, "left out of the group by a reset");
        for (_, d) in self.completions.drain() {
            let _ = d.send(Err(Error::Expelled { incarnation }));
        }
        // Messages not yet in the engine will never be sent: their senders are told why (the
        // queue is closed first, so that this ends).
        self.ops.close();
        let queued = std::iter::from_fn(|| match self.ops.try_next() {
            TryNext::Item(op) => Some(op),
            TryNext::Empty | TryNext::Closed => None,
        });
        for op in self.held.take().into_iter().chain(queued) {
            match op {
                Op::Send { done: Some(d), .. } => {
                    let _ = d.send(Err(Error::Expelled { incarnation }));
                }
                Op::Send { done: None, .. } => {}
                Op::Reply { done, .. } => {
                    let _ = done.send(Err(Error::Expelled { incarnation }));
                }
                Op::Call { done, .. } => {
                    let _ = done.send(Err(Error::Expelled { incarnation }));
                }
                Op::Leave { reply, .. } => {
                    let _ = reply.send(Ok(()));
                }
            }
        }
        if let Some(r) = self.leaving.as_mut().and_then(|l| l.reply.take()) {
            // Out of the group is what the leave wanted.
            let _ = r.send(Ok(()));
        }
        self.finish(Ok(()));
    }
}

struct IoLoop {
    poll: mio::Poll,
    commands: std_mpsc::Receiver<Command>,
    shared: Arc<NodeShared>,
    origin: Instant,
    net: Net,
    groups: Vec<GroupState>,
    /// Receive buffers, filled by one system call per batch.
    rx: RecvBatch,
    tx_buf: Vec<u8>,
    /// The node's nonce source, shared by its secure groups.
    sealer: Sealer,
    /// A sealed datagram on its way out.
    seal_buf: Vec<u8>,
    /// The unicast socket may hold unread datagrams (the read budget ran out).
    unicast_pending: bool,
    /// The unicast socket's count of datagrams dropped for want of buffer, as last told.
    unicast_drops: u32,
    /// Set once the node shuts down: when the loop ends at the latest.
    shutdown: Option<Time>,
    /// Wakes the loop at sub-millisecond deadlines.
    timer: crate::timer::PreciseTimer,
    /// Testing: drops a fraction of received datagrams ([`NodeConfig::receive_loss`]).
    loss: Option<LossShim>,
}

/// Random loss on receipt, for tests on loopback ([`NodeConfig::receive_loss`]): each datagram
/// is dropped with the configured probability, drawn from a small xorshift generator seeded
/// from the operating system.
struct LossShim {
    /// Drop when the next draw is below this (the fraction scaled to `u64::MAX`).
    threshold: u64,
    state: u64,
}

impl LossShim {
    /// None when `fraction` is 0: no draw at all on the ordinary path.
    fn new(fraction: f64, seed: u64) -> Option<LossShim> {
        (fraction > 0.0).then_some(LossShim {
            threshold: (fraction * u64::MAX as f64) as u64,
            // xorshift must not start at 0.
            state: seed | 1,
        })
    }

    /// Whether to drop the next datagram.
    fn drop_one(&mut self) -> bool {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state = x;
        x < self.threshold
    }
}

impl IoLoop {
    fn now(&self) -> Time {
        Time(self.origin.elapsed().as_nanos() as u64)
    }

    fn run(mut self) {
        let _span = tracing::info_span!("rmcast-io", node = %self.shared.id).entered();
        let mut events = mio::Events::with_capacity(256);
        loop {
            let now = self.now();
            let next = self.poll_deadline(now);
            let timeout = self.timer.poll_timeout(now, next);
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                error!(error = %e, "poll failed; the node stops");
                return;
            }
            AtomicNodeCounters::add(&self.shared.counters.loop_iterations, 1);
            let mut woken = false;
            for ev in events.iter() {
                match ev.token() {
                    WAKER => woken = true,
                    TIMER => self.timer.fired(),
                    UNICAST => {
                        if ev.is_readable() {
                            self.unicast_pending = true;
                        }
                        if ev.is_writable() {
                            self.net.flush_backlog();
                        }
                    }
                    mio::Token(t) => {
                        let key = (t - GROUP_TOKEN_BASE) as u64;
                        if let Some(g) = self.groups.iter_mut().find(|g| g.key == key) {
                            g.mcast_pending = true;
                        }
                    }
                }
            }
            let now = self.now();
            if woken {
                // Cleared before the queues are read, so a message queued after this point
                // wakes the loop again (see `NodeShared::wake`).
                self.shared.wake_pending.swap(false, Ordering::AcqRel);
                self.handle_commands(now);
            }
            self.read_sockets();
            let now = self.now();
            for g in &mut self.groups {
                if g.engine.poll_timeout().is_some_and(|t| t <= now) {
                    g.engine.handle_timeout(now);
                }
            }
            for i in 0..self.groups.len() {
                self.check_deadlines(i, now);
                self.pump(i, now);
            }
            self.remove_finished(now);
            // Whatever this turn wrote leaves now, before the loop may sleep.
            self.net.flush_out();
            if let Some(deadline) = self.shutdown {
                if self.groups.is_empty() || now >= deadline {
                    if !self.groups.is_empty() {
                        warn!("shutting down before every group confirmed the leave");
                    }
                    // What the engines wrote last (a leaver's farewell, which the others
                    // wait for) leaves before the thread ends; the socket gets a moment
                    // to take it, no more.
                    self.net.drain_backlog(SHUTDOWN_FLUSH);
                    info!("node stopped");
                    return;
                }
            }
        }
    }

    /// When `poll` must return at the latest: the earliest engine timer or deadline, or now
    /// when work is left over from the previous turn.
    fn poll_deadline(&self, now: Time) -> Option<Time> {
        if self.unicast_pending || self.groups.iter().any(|g| g.mcast_pending) {
            return Some(now);
        }
        let mut next: Option<Time> = self.shutdown;
        let mut consider = |t: Option<Time>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        for g in &self.groups {
            // The engine's timers and formation's (joins, HELLOs, rejoins).
            consider(g.engine.poll_timeout());
            // Held datagrams of unconfirmed sessions are dropped when due, counted.
            consider(g.sessions.deadline());
            if let Some(l) = &g.leaving {
                consider(Some(if l.started { l.deadline } else { l.start_by }));
            }
            consider(g.open_reply.as_ref().map(|(_, by)| *by));
        }
        // Exact: the precise timer wakes the loop at it (epoll alone sleeps in whole
        // milliseconds, rounded up so as not to spin).
        next
    }

    fn handle_commands(&mut self, now: Time) {
        // Bounded by the queue's capacity plus what arrives meanwhile; commands are rare.
        for _ in 0..COMMAND_QUEUE * 2 {
            let cmd = match self.commands.try_recv() {
                Ok(c) => c,
                Err(_) => return,
            };
            match cmd {
                Command::Open(req) => self.open(*req, now),
                Command::Info { key, reply } => {
                    let r = self
                        .groups
                        .iter()
                        .find(|g| g.key == key && !g.done)
                        .map(|g| {
                            (
                                g.engine.info(),
                                g.engine.counters().clone(),
                                g.engine.engine_counters(),
                            )
                        });
                    let _ = reply.try_send(r);
                }
                Command::Reset {
                    key,
                    min_members,
                    reply,
                } => {
                    let r = match self.groups.iter_mut().find(|g| g.key == key && !g.done) {
                        Some(g) if !g.engine.guarantees().capabilities.reset => {
                            Err(Error::Send(SendError::Unsupported))
                        }
                        Some(g) if !g.engine.joining() => {
                            info!(group = %g.name, min_members, "reset requested");
                            g.engine.reset(now, min_members).map_err(Error::Send)
                        }
                        Some(_) => Err(Error::Send(SendError::NotMember)),
                        None => Err(Error::Closed),
                    };
                    let _ = reply.try_send(r);
                }
                Command::Shutdown => {
                    let deadline = now + SHUTDOWN_LINGER;
                    self.shutdown = Some(deadline);
                    for g in &mut self.groups {
                        g.start_leave(now, SHUTDOWN_LINGER, None);
                    }
                }
            }
        }
        // More commands than the budget: look again next turn.
        self.shared.wake();
    }

    fn open(&mut self, req: OpenRequest, now: Time) {
        let OpenRequest {
            key,
            cfg,
            multicast,
            ops,
            events,
            shared,
            reply,
        } = req;
        let gid = cfg.group_id();
        let open_by =
            now + match cfg.mode {
                OpenMode::Create | OpenMode::Client => Duration::ZERO,
                OpenMode::Join | OpenMode::JoinOrCreate => cfg.join_timeout,
            } + OPEN_MARGIN;
        if self.shutdown.is_some() {
            let _ = reply.send(Err(Error::Closed));
            return;
        }
        if self.groups.iter().any(|g| g.gid == gid) {
            let _ = reply.send(Err(Error::Config(ConfigError::Invalid {
                field: "name",
                reason: "hashes to the id of a group this node is already in",
            })));
            return;
        }
        let mut mcast = None;
        if let Some(sock) = multicast {
            let mut sock = mio::net::UdpSocket::from_std(sock);
            let token = mio::Token(key as usize + GROUP_TOKEN_BASE);
            if let Err(e) = self
                .poll
                .registry()
                .register(&mut sock, token, mio::Interest::READABLE)
            {
                let _ = reply.send(Err(Error::Io(e)));
                return;
            }
            mcast = Some(sock);
        }
        let local = self.net.local;
        let group_dests: Vec<SocketAddr> =
            match (&cfg.addr, cfg.multicast_addr_for(self.shared.interface)) {
                (GroupAddr::Unicast(peers), _) => {
                    peers.iter().copied().filter(|a| *a != local).collect()
                }
                (_, Some(m)) => vec![m],
                (_, None) => Vec::new(),
            };
        let entry = match cfg.mode {
            OpenMode::Create => Entry::Create,
            OpenMode::Join => Entry::Join { give_up: true },
            OpenMode::JoinOrCreate => Entry::JoinOrCreate,
            OpenMode::Client => Entry::Client,
        };
        // Without multicast here, the members that have it send this one unicast copies.
        let choice = cfg
            .engine
            .clone()
            .unicast_only(matches!(cfg.addr, GroupAddr::Unicast(_)));
        let engine = Formation::new(
            FormationConfig {
                group: gid,
                me: self.shared.id,
                engine: choice,
                entry,
                join_timeout: cfg.join_timeout,
                // A client is outside the group: it has no membership to heal.
                heal: cfg.heal.filter(|_| cfg.mode != OpenMode::Client),
                engine_datagram_bytes: cfg.engine_datagram_bytes(),
                path_bytes: u16::try_from(cfg.datagram_bytes()).unwrap_or(u16::MAX),
                seed: os_seed(),
                address_exchange: true,
            },
            now,
        );
        let open_reply = if engine.joining() {
            Some((reply, open_by))
        } else {
            let _ = reply.send(Ok(true));
            None
        };
        info!(group = %cfg.name, gid, mode = ?cfg.mode, engine = cfg.engine.name(),
              dests = ?group_dests, "group opened");
        self.groups.push(GroupState {
            key,
            name: cfg.name.clone(),
            gid,
            leave_timeout: cfg.leave_timeout,
            completion_events: cfg.completion_events,
            client: cfg.mode == OpenMode::Client,
            cipher: cfg.keys.as_ref().map(GroupCipher::new),
            peers: Peers::new(cfg.keys.is_some(), gid, self.shared.id),
            sessions: Sessions::new(gid, self.shared.id),
            engine,
            mcast,
            mcast_pending: false,
            mcast_drops: 0,
            multicast: !matches!(cfg.addr, GroupAddr::Unicast(_)),
            group_dests,
            ops: Batched::new(ops),
            held: None,
            events,
            shared,
            completions: HashMap::new(),
            send_clock: crate::latency::SendClock::new(),
            outstanding: 0,
            open_reply,
            leaving: None,
            done: false,
            final_reply: None,
        });
    }

    fn read_sockets(&mut self) {
        if self.unicast_pending {
            self.unicast_pending = self.read_socket(None);
        }
        for i in 0..self.groups.len() {
            if self.groups[i].mcast_pending {
                self.groups[i].mcast_pending = self.read_socket(Some(i));
            }
        }
    }

    /// Read datagrams from the unicast socket (`group` None) or a group's multicast socket
    /// until it would block or the budget runs out; returns whether data may remain.
    ///
    /// The clock is read after each receive: a process stopped (SIGSTOP, a VM pause) in the
    /// middle of a loop turn would otherwise hand what waited in its sockets through the stop
    /// to its engines at the time before it, and an engine that finds its own stalls by the
    /// gaps in its clock (`FailureDetector::run`) would see none: a Ring token site stopped for
    /// 10 s ordered, on waking, messages in the view the others had left.
    fn read_socket(&mut self, group: Option<usize>) -> bool {
        // Bounded in calls as without receive offload, and in datagrams: with it one receive
        // may hold dozens.
        let mut read = 0;
        for _ in 0..RX_BUDGET / crate::batch::BATCH {
            if read >= RX_BUDGET {
                break;
            }
            let sock = match group {
                None => &self.net.sock,
                Some(i) => match &self.groups[i].mcast {
                    Some(s) => s,
                    None => return false,
                },
            };
            match self.rx.recv(sock) {
                Ok(n) => {
                    self.count_drops(group);
                    let now = self.now();
                    for k in 0..n {
                        let mut count = 0;
                        for d in self.rx.datagrams(k) {
                            count += 1;
                            let c = &self.shared.counters;
                            AtomicNodeCounters::add(&c.datagrams_received, 1);
                            AtomicNodeCounters::add(
                                &c.bytes_received,
                                self.rx.get(d).0.len() as u64,
                            );
                            if self.loss.as_mut().is_some_and(LossShim::drop_one) {
                                AtomicNodeCounters::add(&c.loss_shim_dropped, 1);
                                continue;
                            }
                            self.dispatch(group, d, now);
                        }
                        if count > 1 {
                            AtomicNodeCounters::add(
                                &self.shared.counters.datagrams_coalesced,
                                count as u64,
                            );
                        }
                        read += count;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    AtomicNodeCounters::add(&self.shared.counters.recv_errors, 1);
                    debug!(error = %e, "receive failed");
                }
            }
        }
        true
    }

    /// Add what the socket just read from (`group` as for [`IoLoop::read_socket`]) dropped
    /// since it last said to [`crate::NodeCounters::receive_buffer_drops`]: the kernel gives a running
    /// count with each datagram that follows a drop.
    fn count_drops(&mut self, group: Option<usize>) {
        let Some(now) = self.rx.drops() else { return };
        let last = match group {
            None => &mut self.unicast_drops,
            Some(i) => &mut self.groups[i].mcast_drops,
        };
        // The kernel's count is a u32 that wraps.
        let new = now.wrapping_sub(*last);
        if new != 0 && new < 1 << 31 {
            AtomicNodeCounters::add(&self.shared.counters.receive_buffer_drops, u64::from(new));
            *last = now;
        }
    }

    /// Hand received datagram `k` of the batch to the engine it belongs to. A secure group's
    /// datagram is verified and decrypted first (in place), and only a verified datagram teaches
    /// a peer's address; whatever does not verify is counted and dropped here.
    fn dispatch(&mut self, group: Option<usize>, k: Datagram, now: Time) {
        let (from, ttl) = (self.rx.get(k).1, self.rx.ttl(k));
        let counters = &self.shared.counters;
        if from == self.net.local {
            // Our own multicast, looped back so that other members on this host get it.
            AtomicNodeCounters::add(&counters.own_echoes, 1);
            return;
        }
        let (header, session) = match wire::decode(self.rx.get(k).0) {
            Ok(p) => (
                p.header,
                p.auth.map(|a| -> SessionName { (a.key_id, a.session) }),
            ),
            Err(e) => {
                AtomicNodeCounters::add(&counters.malformed, 1);
                trace!(%from, error = %e, "malformed datagram");
                // Engines count malformed input too, except a secure group's, which never sees
                // a datagram that did not verify.
                let data = self.rx.get(k).0;
                match group {
                    Some(i) if self.groups[i].cipher.is_none() => {
                        self.groups[i].engine.handle_datagram(now, NodeId(0), data);
                    }
                    Some(_) => {}
                    None => {
                        for g in self.groups.iter_mut().filter(|g| g.cipher.is_none()) {
                            g.engine.handle_datagram(now, NodeId(0), data);
                        }
                    }
                }
                return;
            }
        };
        let target = match group {
            Some(i) => Some(i),
            None => self
                .groups
                .iter()
                .position(|g| g.gid == header.group && !g.done),
        };
        // A datagram of another group (on a shared multicast address) changes nothing here.
        let Some(i) = target.filter(|i| self.groups[*i].gid == header.group) else {
            AtomicNodeCounters::add(&counters.foreign_dropped, 1);
            return;
        };
        let g = &mut self.groups[i];
        let sealed = session.is_some();
        let (data, live): (&[u8], bool) = match (&mut g.cipher, sealed) {
            (None, false) => (self.rx.get(k).0, true),
            (None, true) => {
                AtomicNodeCounters::add(&counters.auth_unexpected, 1);
                return;
            }
            (Some(_), false) => {
                AtomicNodeCounters::add(&counters.auth_missing, 1);
                return;
            }
            (Some(cipher), true) => match cipher.open_live(self.rx.get_mut(k)) {
                Ok((plain, live)) => (plain, live),
                Err(r) => {
                    let c = match r {
                        Rejection::Missing | Rejection::Malformed => &counters.auth_missing,
                        Rejection::UnknownKey => &counters.auth_unknown_key,
                        Rejection::BadTag => &counters.auth_failed,
                        Rejection::Replay(_) => &counters.replays_dropped,
                    };
                    AtomicNodeCounters::add(c, 1);
                    trace!(%from, sender = %header.sender, rejection = ?r, "datagram refused");
                    return;
                }
            },
        };
        if sealed && header.sender == self.shared.id {
            // Only this node seals with its id, and its own echoes were dropped above: a
            // replay of one of its datagrams, sent back from elsewhere.
            AtomicNodeCounters::add(&counters.replays_dropped, 1);
            return;
        }
        let me = self.shared.id;
        if let (Some(session), Some(_)) = (session, &g.cipher) {
            if let Some(probe) = sessions::parse(&header, data) {
                // The runtime's own session challenge: no engine sees it, and it is never
                // held (two members new to each other challenge each other at once).
                session_probe(
                    g,
                    &mut self.net,
                    &mut self.sealer,
                    &mut self.seal_buf,
                    (header.sender, session),
                    from,
                    probe,
                    now,
                );
                return;
            }
            if !live {
                // A session not confirmed live: a capture replayed, perhaps. Held until it
                // answers a fresh challenge (`crate::sessions`).
                trace!(%from, sender = %header.sender, "datagram of an unconfirmed session held");
                if let Some(challenge) =
                    g.sessions
                        .hold(session, header.sender, from, ttl, data, now, counters)
                {
                    if let Some(d) = seal(
                        g.cipher.as_ref(),
                        &mut self.sealer,
                        challenge,
                        &mut self.seal_buf,
                        counters,
                    ) {
                        self.net.send(d, from);
                    }
                }
                return;
            }
        }
        if g.cipher.is_none() {
            if let Some(path) = peers::parse_path(&header, data) {
                // The runtime's own address validation: no engine sees it.
                if header.sender != me {
                    path_packet(g, &mut self.net, header.sender, from, path, now);
                }
                return;
            }
        }
        if header.sender == me {
            // Another node uses our id (our own datagrams come from `local`).
            let ask = hello::decode(data).is_ok_and(|r| r.hello == hello::Hello::Ask);
            if g.cipher.is_none() {
                g.peers.count(from, data.len());
            }
            self.duplicate_id(i, from, ask, now);
            return;
        }
        if g.cipher.is_some() {
            // Verified, of a session confirmed live: the address is proven (see
            // `crate::peers`).
            g.peers.learn_verified(header.sender, from);
        } else if let Some(challenge) =
            g.peers
                .observe(header.sender, from, data.len(), now, counters)
        {
            self.net.send(challenge, from);
        }
        if header.engine == EngineKind::Formation {
            // Formation's own: it takes them out before the engine sees anything.
            AtomicNodeCounters::add(&counters.hellos_received, 1);
        }
        g.engine
            .handle_datagram_with_ttl(now, header.sender, data, ttl);
    }

    /// Move messages in, datagrams out and events out for group `i`.
    fn pump(&mut self, i: usize, now: Time) {
        for _ in 0..PUMP_ROUNDS {
            let g = &mut self.groups[i];
            if g.done {
                return;
            }
            let mut progress = drain_ops(g, now, &self.shared.counters);
            if let Some(l) = &mut g.leaving {
                if !l.started && (g.outstanding == 0 || now >= l.start_by) {
                    debug!(group = %g.name, outstanding = g.outstanding, "leaving");
                    l.started = true;
                    g.engine.leave(now);
                    progress = true;
                }
            }
            progress |= self.transmit(i, now, false);
            progress |= drain_events(&mut self.groups[i], &self.shared, self.origin);
            if !progress {
                return;
            }
        }
    }

    /// Send what the engine of group `i` wants sent. While the socket pushes back, the engine
    /// is not asked for more, unless `last`: a group about to close hands over its last
    /// datagrams (a farewell that others wait for) to the backlog, up to one budget.
    fn transmit(&mut self, i: usize, now: Time, last: bool) -> bool {
        let g = &mut self.groups[i];
        let mut n = 0;
        while (last || !self.net.blocked()) && n < TX_BUDGET {
            let Some(t) = g.engine.poll_transmit(now, &mut self.tx_buf) else {
                break;
            };
            n += 1;
            let peer = match t.destination {
                Destination::Peer(id) => Some(id),
                Destination::Group | Destination::Scoped { .. } => None,
            };
            // Several datagrams for one destination (`segment_size`) go one by one; UDP GSO
            // (`UDP_SEGMENT`) could send the whole buffer in one system call here.
            for d in t.datagrams(&self.tx_buf) {
                if hello::is_hello(d) {
                    AtomicNodeCounters::add(&self.shared.counters.hellos_sent, 1);
                }
                let cipher = g.cipher.as_ref();
                let wire_len = d.len() + cipher.map_or(0, |_| AUTH_OVERHEAD);
                let to = peer.map(|id| g.peers.route(id, wire_len));
                let one = match (to, t.destination) {
                    (Some(Route::Send(to)), _) => Some(to),
                    (None, Destination::Group) if g.group_dests.len() == 1 => {
                        Some(g.group_dests[0])
                    }
                    _ => None,
                };
                if let Some(to) = one {
                    // One destination, the common case: written (sealed) straight into the
                    // buffer it leaves from.
                    let (sealer, counters) = (&mut self.sealer, &self.shared.counters);
                    self.net
                        .send_with(to, |buf| write_wire(cipher, sealer, d, buf, counters));
                    continue;
                }
                let Some(d) = seal(
                    cipher,
                    &mut self.sealer,
                    d,
                    &mut self.seal_buf,
                    &self.shared.counters,
                ) else {
                    continue;
                };
                match (to, t.destination, g.multicast) {
                    (Some(Route::Send(to)), _, _) => self.net.send(d, to),
                    (Some(Route::Limited(to)), _, _) => {
                        // Not validated and over its budget: held until it answers its
                        // challenge, or dropped (the engine repairs it as a loss).
                        let c = &self.shared.counters;
                        AtomicNodeCounters::add(&c.amplification_limited, 1);
                        if !g.peers.hold(to, d, now, c) {
                            AtomicNodeCounters::add(&c.amplification_dropped, 1);
                        }
                    }
                    (Some(Route::Unknown), _, _) => {
                        // Unknown so far: the whole group gets it, so the peer does too.
                        AtomicNodeCounters::add(&self.shared.counters.peer_unknown, 1);
                        for to in &g.group_dests {
                            self.net.send(d, *to);
                        }
                    }
                    // Scoping needs multicast; a unicast fan-out reaches the whole group.
                    (None, Destination::Scoped { ttl }, true) => {
                        for to in &g.group_dests {
                            self.net.send_scoped(d, *to, ttl);
                        }
                    }
                    (None, _, _) => {
                        for to in &g.group_dests {
                            self.net.send(d, *to);
                        }
                    }
                }
            }
        }
        n > 0
    }

    /// A datagram of group `i` carrying our own node id from another address: two nodes share
    /// an id. A node still joining gives up ([`Error::DuplicateId`]); a member keeps its place,
    /// answers a HELLO ask (`ask`; which is how a joiner finds out) to the address it came
    /// from, and drops the datagram.
    fn duplicate_id(&mut self, i: usize, from: SocketAddr, ask: bool, now: Time) {
        let g = &mut self.groups[i];
        if g.engine.joining() {
            warn!(group = %g.name, id = %self.shared.id, %from, "node id in use: not joining");
            if let Some((r, _)) = g.open_reply.take() {
                let _ = r.send(Err(Error::DuplicateId {
                    id: self.shared.id,
                    at: from,
                }));
            }
            g.done = true;
        } else if ask {
            warn!(group = %g.name, id = %self.shared.id, %from, "another node asks with our id");
            let Some(answer) = g.engine.answer_duplicate(now) else {
                return;
            };
            let c = &self.shared.counters;
            let sealed = seal(
                g.cipher.as_ref(),
                &mut self.sealer,
                &answer,
                &mut self.seal_buf,
                c,
            );
            // Not validated, `from` gets no more than its budget allows.
            if let Some(d) = sealed.filter(|d| g.peers.charge(from, d.len())) {
                AtomicNodeCounters::add(&c.hellos_sent, 1);
                self.net.send(d, from);
            } else if sealed.is_some() {
                AtomicNodeCounters::add(&c.amplification_limited, 1);
                AtomicNodeCounters::add(&c.amplification_dropped, 1);
            }
        }
    }

    fn check_deadlines(&mut self, i: usize, now: Time) {
        let g = &mut self.groups[i];
        if g.done {
            return;
        }
        if g.cipher.is_some() {
            g.sessions.expire(now, &self.shared.counters);
        }
        if let Some(l) = &g.leaving {
            if now >= l.deadline {
                warn!(group = %g.name, "leave not confirmed in time; dropping the group");
                g.finish(Err(Error::LeaveTimeout));
            }
        }
        if g.open_reply.as_ref().is_some_and(|(_, by)| now >= *by) {
            warn!(group = %g.name, "no answer to the open in time; dropping the group");
            if let Some((r, _)) = g.open_reply.take() {
                let _ = r.send(Err(Error::Timeout));
            }
            g.done = true;
        }
    }

    fn remove_finished(&mut self, now: Time) {
        let mut i = 0;
        while i < self.groups.len() {
            if self.groups[i].done {
                // What the engine wrote last (in the turn it said it left) goes out before
                // anyone is told the group closed.
                self.transmit(i, now, true);
                self.net.flush_out();
                self.net.drain_backlog(CLOSE_FLUSH);
                let mut g = self.groups.swap_remove(i);
                if let Some((r, result)) = g.final_reply.take() {
                    let _ = r.send(result);
                }
                if let Some(sock) = g.mcast.as_mut() {
                    let _ = self.poll.registry().deregister(sock);
                }
                info!(group = %g.name, "group closed");
                // Dropping `g` closes the event queue (after the events in it are read) and
                // tells waiting senders the group is closed.
            } else {
                i += 1;
            }
        }
    }
}

/// Move queued messages into the engine while it takes them.
fn drain_ops(g: &mut GroupState, now: Time, counters: &AtomicNodeCounters) -> bool {
    let mut progress = false;
    for _ in 0..OPS_BUDGET {
        let op = match g.held.take() {
            Some(op) => op,
            None => match g.ops.try_next() {
                TryNext::Item(op) => op,
                TryNext::Empty => break,
                TryNext::Closed => {
                    // Every handle is gone: leave in the background.
                    if g.leaving.is_none() {
                        g.start_leave(now, g.leave_timeout, None);
                        progress = true;
                    }
                    break;
                }
            },
        };
        match op {
            Op::Send { payload, qos, done } => {
                if g.leaving.is_some() {
                    // Sent after a leave: refused, never silently.
                    match done {
                        Some(d) => {
                            let _ = d.send(Err(Error::Closed));
                        }
                        None => AtomicNodeCounters::add(&counters.submit_refused, 1),
                    }
                    progress = true;
                    continue;
                }
                if g.engine.joining() || !g.engine.can_submit() {
                    g.held = Some(Op::Send { payload, qos, done });
                    break;
                }
                // Cloning `Bytes` shares the buffer; the copy is kept in case the engine
                // refuses with back-pressure after all.
                match g.engine.submit(now, payload.clone(), qos) {
                    Ok(msg) => {
                        g.outstanding += 1;
                        g.send_clock.start(msg, now.0);
                        if let Some(d) = done {
                            g.completions.insert(msg, d);
                        }
                    }
                    // Recovery mode: messages queued before the failure was known wait for
                    // the reset (`can_submit` keeps them out; this covers an engine that only
                    // says so on submit). Nothing is dropped.
                    Err(SendError::WouldBlock | SendError::GroupFailed) => {
                        g.held = Some(Op::Send { payload, qos, done });
                        break;
                    }
                    Err(e) => match done {
                        Some(d) => {
                            let _ = d.send(Err(Error::Send(e)));
                        }
                        None => {
                            AtomicNodeCounters::add(&counters.submit_refused, 1);
                            warn!(group = %g.name, error = %e, len = payload.len(),
                                  "message refused by the engine");
                        }
                    },
                }
                progress = true;
            }
            Op::Reply {
                to,
                request,
                payload,
                done,
            } => {
                if g.leaving.is_some() {
                    let _ = done.send(Err(Error::Closed));
                    progress = true;
                    continue;
                }
                if g.engine.joining() {
                    g.held = Some(Op::Reply {
                        to,
                        request,
                        payload,
                        done,
                    });
                    break;
                }
                match g.engine.reply(now, to, request, payload.clone()) {
                    Err(SendError::WouldBlock) => {
                        g.held = Some(Op::Reply {
                            to,
                            request,
                            payload,
                            done,
                        });
                        break;
                    }
                    r => {
                        let _ = done.send(r.map_err(Error::Send));
                    }
                }
                progress = true;
            }
            Op::Call { call, done } => {
                if g.leaving.is_some() {
                    let _ = done.send(Err(Error::Closed));
                    progress = true;
                    continue;
                }
                if g.engine.joining() {
                    g.held = Some(Op::Call { call, done });
                    break;
                }
                let r = match &call {
                    EngineCall::Request {
                        payload,
                        qos,
                        handler,
                    } => g.engine.request(now, payload.clone(), *qos, *handler),
                    EngineCall::Lock { lock, acquire } => {
                        g.engine.lock(now, *lock, *acquire).map(|()| 0)
                    }
                    EngineCall::Forward {
                        to,
                        sender,
                        request,
                        payload,
                    } => g
                        .engine
                        .forward(now, *to, *sender, *request, payload.clone())
                        .map(|()| 0),
                };
                match r {
                    Err(SendError::WouldBlock) => {
                        g.held = Some(Op::Call { call, done });
                        break;
                    }
                    r => {
                        let _ = done.send(r.map_err(Error::Send));
                    }
                }
                progress = true;
            }
            Op::Leave { timeout, reply } => {
                g.start_leave(now, timeout, Some(reply));
                progress = true;
            }
        }
    }
    progress
}

/// The engine gave up on own messages `l` (they are delivered nowhere): they are no longer
/// outstanding, and a sender waiting for one fails with the engine's reason.
fn own_loss(
    engine: &mut dyn Engine,
    completions: &mut HashMap<u64, oneshot::Sender<Result<u64, Error>>>,
    outstanding: &mut u64,
    l: &rmcast_proto::Loss,
) {
    *outstanding = outstanding.saturating_sub(l.count);
    let end = l.first_seq.saturating_add(l.count);
    // Only the waiting ones are looked at: a loss may span many numbers.
    let lost: Vec<u64> = (completions.keys().copied())
        .filter(|m| (l.first_seq..end).contains(m))
        .collect();
    for msg in lost {
        let reason = engine
            .take_failure(msg)
            .unwrap_or_else(|| "the engine gave up on it; no member delivered it".to_string());
        if let Some(d) = completions.remove(&msg) {
            let _ = d.send(Err(Error::Failed { msg, reason }));
        }
    }
}

/// Move the engine's events to the application while the event queue has room.
fn drain_events(g: &mut GroupState, shared: &NodeShared, origin: Instant) -> bool {
    // The application is woken once for what this call queues, not once per event.
    let _batch = crate::block::WakeBatch::open();
    let mut progress = false;
    // The clock is read when the first completion of this call is seen, not at the start of
    // the loop's turn: a send submitted and completed in one turn still shows its time.
    let mut completed_at = None;
    let mut merged = None;
    let mut expelled = None;
    let mut left = false;
    for _ in 0..EVENTS_BUDGET {
        // Reserve room before taking an event out of the engine: an event, once taken, has
        // nowhere else to go.
        let permit = match g.events.try_reserve() {
            Ok(p) => Some(p),
            Err(mpsc::error::TrySendError::Full(())) => {
                g.shared.events_stalled.store(true, Ordering::SeqCst);
                // The application may have made room between the two lines above without
                // seeing the flag: look once more.
                match g.events.try_reserve() {
                    Ok(p) => Some(p),
                    Err(mpsc::error::TrySendError::Full(())) => {
                        AtomicNodeCounters::add(&shared.counters.event_queue_stalls, 1);
                        break;
                    }
                    Err(mpsc::error::TrySendError::Closed(())) => None,
                }
            }
            // Nobody reads any more: events are discarded, the protocol still runs.
            Err(mpsc::error::TrySendError::Closed(())) => None,
        };
        let Some(ev) = g.engine.poll_event() else {
            break;
        };
        progress = true;
        match ev {
            Event::Loss(l) if l.sender == shared.id => {
                // Own messages that failed (a transaction nobody committed): they never
                // complete, so whoever waits for them is told why now, not never.
                // Field by field: the permit borrows the event queue.
                own_loss(&mut g.engine, &mut g.completions, &mut g.outstanding, &l);
                if let Some(p) = permit {
                    p.send(Event::Loss(l));
                }
            }
            ev @ (Event::Deliver(_)
            | Event::Loss(_)
            | Event::Reply(_)
            | Event::Lock(_)
            | Event::Forwarded(_)) => {
                if let Some(p) = permit {
                    p.send(ev);
                }
            }
            Event::View(v) => {
                debug!(group = %g.name, view = v.id, members = ?v.members, "view");
                // Replay windows of senders gone from the view are retired (their last
                // counters kept), so that churn never fills the group's table.
                if let Some(c) = &mut g.cipher {
                    c.retire_absent(&v.members);
                }
                if let Some(p) = permit {
                    p.send(Event::View(v));
                }
            }
            Event::SendComplete { msg } => {
                g.outstanding = g.outstanding.saturating_sub(1);
                let now = *completed_at.get_or_insert_with(|| origin.elapsed().as_nanos() as u64);
                if let Some(ns) = g.send_clock.finish(msg, now) {
                    g.shared.send_latency.record(ns);
                }
                if let Some(d) = g.completions.remove(&msg) {
                    let _ = d.send(Ok(msg));
                }
                if let (Some(p), true) = (permit, g.completion_events || g.client) {
                    p.send(Event::SendComplete { msg });
                }
            }
            Event::Left => {
                // Not passed on (see `crate::GroupEvent`): the end of the queue says it.
                drop(permit);
                info!(group = %g.name, "left the group");
                // After the loop: the permit still borrows the queue here.
                left = true;
                break;
            }
            Event::Recovery(r) => {
                match &r {
                    Recovery::Failed { suspect } => {
                        warn!(group = %g.name, %suspect, "member failed: recovery mode");
                        // Before the event is queued, so that an application that has seen it
                        // finds sends refused.
                        g.shared.set_recovering(Some(*suspect));
                    }
                    Recovery::ResetFailed { reachable, needed } => {
                        // Repeated at every attempt: the application tells its user once.
                        debug!(group = %g.name, reachable, needed, "reset failed: too few members");
                    }
                    Recovery::Reset {
                        incarnation,
                        removed,
                    } => info!(group = %g.name, incarnation, ?removed, "group reset"),
                    Recovery::Expelled { incarnation } => expelled = Some(*incarnation),
                    // Everything of the old group is through: what did not complete there
                    // never will.
                    Recovery::Merging { .. } => {}
                    // Formation's notice ends the open (`Error::GroupFull`).
                    Recovery::Refused { limit } => {
                        info!(group = %g.name, limit, "join refused: the group is full");
                    }
                }
                if let Recovery::Merging { into } = r {
                    merged = Some(into);
                }
                let reset = matches!(r, Recovery::Reset { .. });
                if reset {
                    // Before the event is queued, so that an application that has seen it can
                    // send at once (the event promises it). A receive in between finds nothing
                    // queued and no recovery mode: it reports an empty queue, also true.
                    g.shared.set_recovering(None);
                }
                if let Some(p) = permit {
                    p.send(Event::Recovery(r));
                }
                if expelled.is_some() || merged.is_some() {
                    // After the loop: the permit still borrows the queue here.
                    break;
                }
            }
            // An event the runtime has no part in goes to the application as it came.
            ev => {
                if let Some(p) = permit {
                    p.send(ev);
                }
            }
        }
    }
    if let Some(into) = merged {
        // Everything of the old group is through: what did not complete there never will.
        g.left_group(|| Error::Merged { into });
    }
    // Formation rejoins after an expulsion as the event passes, if it heals.
    let rejoined = drain_notices(g);
    if let Some(incarnation) = expelled.filter(|_| !rejoined && !g.done) {
        g.expelled(incarnation);
    }
    if left {
        g.finish(Ok(()));
    }
    progress
}

/// Act on what formation did or found; returns whether the engine joins again after an
/// expulsion.
fn drain_notices(g: &mut GroupState) -> bool {
    let mut rejoined = false;
    // Bounded: formation keeps at most `MAX_NOTICES`.
    while let Some(n) = g.engine.poll_notice() {
        match n {
            Notice::Admitted => {
                if let Some((r, _)) = g.open_reply.take() {
                    let _ = r.send(Ok(false));
                }
            }
            Notice::Created => {
                info!(group = %g.name, "nobody answered the join: creating the group");
                if let Some((r, _)) = g.open_reply.take() {
                    let _ = r.send(Ok(true));
                }
            }
            Notice::Deferred { to } => {
                info!(group = %g.name, creator = %to,
                      "nobody answered the join; a lower id creates the group");
            }
            Notice::JoinTimedOut => {
                info!(group = %g.name, "join timed out");
                if let Some((r, _)) = g.open_reply.take() {
                    let _ = r.send(Err(Error::JoinTimeout));
                }
                g.done = true;
            }
            Notice::JoinRefused { limit } => {
                info!(group = %g.name, limit, "join refused: the group is full");
                if let Some((r, _)) = g.open_reply.take() {
                    let _ = r.send(Err(Error::GroupFull { limit }));
                }
                g.done = true;
            }
            Notice::Rejoined(why) => {
                info!(group = %g.name, ?why, "joining the group again");
                // Sends that had not completed fail with why (for a merge once
                // `Recovery::Merging` reaches the queue, behind what the old group delivers);
                // queued ones wait for the new membership.
                if let Rejoin::Expelled { incarnation } = why {
                    g.left_group(|| Error::Expelled { incarnation });
                    rejoined = true;
                }
            }
            Notice::RejoinRefused(why) => {
                debug!(group = %g.name, ?why, "the engine cannot join again");
            }
            Notice::StartedAlone => {
                info!(group = %g.name, "nobody admitted the rejoin: creating a group of one \
                      (it merges with the others once it hears them)");
            }
            Notice::DatagramsLimited { bytes } => {
                info!(group = %g.name, bytes, "a member's path takes smaller datagrams: \
                      the group's datagrams are now this size");
            }
        }
    }
    rejoined
}

/// A path challenge or response (`path`) from `sender` at `from` for group `g`, a group
/// without a key: a challenge is answered to where it came from (within that address's
/// budget); a response that carries the cookie sent there validates the address, and the
/// unicasts held for it go.
fn path_packet(
    g: &mut GroupState,
    net: &mut Net,
    sender: NodeId,
    from: SocketAddr,
    path: Path,
    now: Time,
) {
    let shared = net.shared.clone();
    let counters = &shared.counters;
    match path {
        Path::Challenge(cookie) => {
            // Learn the challenger as any sender (it may be challenged in turn).
            if let Some(ch) = g
                .peers
                .observe(sender, from, peers::PATH_LEN, now, counters)
            {
                net.send(ch, from);
            }
            if let Some(r) = g.peers.respond(from, cookie) {
                net.send(r, from);
            }
        }
        Path::Response(cookie) => {
            g.peers.count(from, peers::PATH_LEN);
            if g.peers.validate(sender, from, cookie, counters) {
                let mut held = Vec::new();
                g.peers.release(from, now, counters, &mut held);
                for d in &held {
                    net.send(d, from);
                }
            }
        }
    }
}

/// A session challenge or answer (`probe`, from `sender`, sealed under `session`) from `from`
/// for group `g`,
/// a secure group: a challenge naming this node's current session is answered, sealed under
/// it, to where it came from; an answer to the challenge sent to `session` confirms it, and its
/// held datagrams go to the engine in order ([`crate::sessions`]).
#[allow(clippy::too_many_arguments)]
fn session_probe(
    g: &mut GroupState,
    net: &mut Net,
    sealer: &mut Sealer,
    seal_buf: &mut Vec<u8>,
    (sender, session): (NodeId, SessionName),
    from: SocketAddr,
    probe: Probe,
    now: Time,
) {
    let shared = net.shared.clone();
    let counters = &shared.counters;
    match probe {
        Probe::Challenge(named, challenge) => {
            let mine = sealer.session();
            if let Some(answer) = g.sessions.answer(&mine, &named, &challenge) {
                if let Some(d) = seal(g.cipher.as_ref(), sealer, answer, seal_buf, counters) {
                    net.send(d, from);
                }
            }
        }
        Probe::Answer(named, challenge) => {
            let mut released = Vec::new();
            if !g
                .sessions
                .answered(session, &named, &challenge, now, counters, &mut released)
            {
                return;
            }
            if let Some(c) = &mut g.cipher {
                c.confirm(&session);
            }
            // The answer, sealed under the live session, proves the address it came from.
            g.peers.learn_verified(sender, from);
            trace!(%sender, %from, released = released.len(), "session confirmed");
            for r in released {
                if wire::decode(&r.data).is_ok_and(|p| p.header.engine == EngineKind::Formation) {
                    AtomicNodeCounters::add(&counters.hellos_received, 1);
                }
                g.engine
                    .handle_datagram_with_ttl(now, r.sender, &r.data, r.ttl);
            }
        }
    }
}

/// `plain` as it goes on the wire: sealed into `buf` for a secure group (`cipher`), as it is
/// otherwise; `None` (counted) if it could not be sealed.
fn seal<'a>(
    cipher: Option<&GroupCipher>,
    sealer: &mut Sealer,
    plain: &'a [u8],
    buf: &'a mut Vec<u8>,
    counters: &AtomicNodeCounters,
) -> Option<&'a [u8]> {
    if cipher.is_none() {
        return Some(plain);
    }
    write_wire(cipher, sealer, plain, buf, counters).then_some(&buf[..])
}

/// Write `plain` into `buf` (cleared first) as it goes on the wire: sealed for a secure group
/// (`cipher`), copied otherwise; false (counted) if it could not be sealed.
fn write_wire(
    cipher: Option<&GroupCipher>,
    sealer: &mut Sealer,
    plain: &[u8],
    buf: &mut Vec<u8>,
    counters: &AtomicNodeCounters,
) -> bool {
    let Some(cipher) = cipher else {
        return copy_of(plain)(buf);
    };
    match cipher.seal(sealer, plain, buf) {
        Ok(()) => true,
        Err(_) => {
            AtomicNodeCounters::add(&counters.seal_errors, 1);
            false
        }
    }
}

/// A seed for an engine's own RNG (and the loss shim's), from the operating system.
fn os_seed() -> u64 {
    let mut b = [0u8; 8];
    crate::random::fill_random(&mut b);
    u64::from_ne_bytes(b)
}

#[cfg(test)]
mod loss_shim_tests {
    use super::LossShim;

    /// The shim drops about the fraction asked for, and nothing when the fraction is 0.
    #[test]
    fn drops_about_the_fraction_asked_for() {
        assert!(LossShim::new(0.0, 7).is_none());
        for fraction in [0.1, 0.2, 0.5] {
            let mut shim = LossShim::new(fraction, 0x5eed).expect("a shim");
            let n = 100_000;
            let dropped = (0..n).filter(|_| shim.drop_one()).count();
            let got = dropped as f64 / n as f64;
            assert!(
                (got - fraction).abs() < 0.01,
                "asked {fraction}, dropped {got}"
            );
        }
    }

    /// A fraction outside [0, 1) is refused with the setting named.
    #[test]
    fn a_fraction_outside_the_range_is_refused() {
        for bad in [-0.1, 1.0, 1.5, f64::NAN] {
            let cfg = crate::NodeConfig {
                receive_loss: bad,
                ..crate::NodeConfig::default()
            };
            let e = cfg.check_receive_loss().expect_err("refused");
            assert!(e.to_string().contains("RMCAST_RECEIVE_LOSS"), "{e}");
        }
    }
}
