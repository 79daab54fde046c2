//! Multicast transactions (the `txn` engine, after the Multidriver of Dempsey, Fenton and
//! Weaver): ask a group a question and collect the answers, each named by its replier, or push
//! a message to a set of receivers and know that every one of them committed it, or none did.
//!
//! A [`TxnGroup`] is one membership of a group run by the `txn` engine with the X_MRopen
//! arguments of its transactions ([`TxnOptions`]: `min`, `max`, the open's timeout, the
//! backoff). Every [`TxnGroup::send`] is one transaction: the open (receivers answer on their
//! response channels after a random backoff), the message (go-back-N, window and rate the
//! slowest receiver's), the commit (deliver-to: the message is delivered at every receiver of
//! the set or at none) and, after the replies, the close. [`TxnGroup::request`] does all of it
//! and waits for the replies it asks for ([`Until`]: all, first, majority, none, as JGroups'
//! response modes); [`TxnGroup::next_event`] reports each step as it comes ([`TxnEvent`]), for
//! several transactions at a time. Receivers get each committed message as
//! [`TxnEvent::Request`] and answer with [`TxnGroup::reply`] (X_MRreply).
//!
//! ```no_run
//! use rmcast::txn::{TxnGroup, TxnOptions, Until};
//! use rmcast::{Node, NodeConfig};
//! use std::time::Duration;
//!
//! let node = Node::new(NodeConfig::default())?;
//! let opts = TxnOptions::client().min(1).max(3).timeout(Duration::from_millis(500));
//! let mut g = TxnGroup::open(&node, "locks", opts)?;
//! let answer = g.request("who holds lock 7?", Until::All)?;
//! for (from, reply) in &answer.replies {
//!     println!("{from}: {}", String::from_utf8_lossy(reply));
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Numbering.** The engine numbers a member's transactions in submission order from 0; a
//! `TxnGroup` is the only sender on its membership, so it knows each transaction's number
//! without waiting for its completion (a failed transaction never completes).

use crate::config::setters;
use crate::{Error, Group, GroupConfig, GroupEvent, IntoPayload, Keyring, Node, OpenMode};
use bytes::Bytes;
use rmcast_proto::txn::{Config, TxnFactory};
use rmcast_proto::{Delivery, EngineChoice, IdList, NodeId, Qos, SendError};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// X_MRopen's arguments and the implosion control of a [`TxnGroup`]'s transactions. Every
/// member of a group should use the same `timeout`, `backoff_unit` and `reply_timeout`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TxnOptions {
    /// Receivers that must answer the open for a transaction to go ahead.
    pub min: usize,
    /// Receivers taken into a transaction at most; the open is decided as soon as this many
    /// answered (else when `timeout` passes).
    pub max: usize,
    /// How long the open waits for answers.
    pub timeout: Duration,
    /// BACKOFF_TIME per receiver of the set (a receiver answers the open after a random wait
    /// in `[0, set size × backoff_unit]`).
    pub backoff_unit: Duration,
    /// The use-backoff flag: every packet of a response channel backs off, replies included.
    pub use_backoff: bool,
    /// How long replies are collected after the commit (the response channels stay open this
    /// long).
    pub reply_timeout: Duration,
    /// Whether this member answers others' transactions (a server); a pure client does not.
    pub receive: bool,
    /// Largest message in bytes.
    pub max_message_bytes: usize,
    /// The group key(s) ([`GroupConfig::keys`]): `Some` seals every datagram, so that only key
    /// holders can ask, answer or reply; a request from anyone else is dropped before the
    /// engine. `None` (the default): anyone who can reach the group's address can ask.
    pub keys: Option<Keyring>,
}

impl TxnOptions {
    /// A client: asks, never answers; `min` 1, `max` 64, a 500 ms open, 2 s for replies.
    pub fn client() -> TxnOptions {
        TxnOptions {
            min: 1,
            max: 64,
            timeout: Duration::from_millis(500),
            backoff_unit: Duration::from_micros(100),
            use_backoff: false,
            reply_timeout: Duration::from_secs(2),
            receive: false,
            max_message_bytes: 16 << 20,
            keys: None,
        }
    }

    /// A server: answers others' transactions (and may send its own).
    pub fn server() -> TxnOptions {
        TxnOptions {
            receive: true,
            ..TxnOptions::client()
        }
    }

    /// The engine configuration these options make.
    pub fn engine_config(&self) -> Config {
        Config {
            min_receivers: self.min,
            max_receivers: self.max,
            open_timeout: self.timeout,
            backoff_unit: self.backoff_unit,
            use_backoff: self.use_backoff,
            reply_linger: self.reply_timeout,
            receive: self.receive,
            max_message_bytes: self.max_message_bytes,
            announce_sets: true,
            ..Config::default()
        }
    }

    /// The engine choice for a [`GroupConfig`].
    pub fn engine(&self) -> EngineChoice {
        EngineChoice::custom(Arc::new(TxnFactory::with_config(self.engine_config())))
    }
}

setters!(TxnOptions {
    min: (usize),
    max: (usize),
    timeout: (Duration),
    backoff_unit: (Duration),
    use_backoff: (bool),
    reply_timeout: (Duration),
    receive: (bool),
    max_message_bytes: (usize),
});

impl TxnOptions {
    /// Make the transactions secure with `keys` ([`TxnOptions::keys`]).
    #[must_use]
    pub fn keys(mut self, keys: Keyring) -> Self {
        self.keys = Some(keys);
        self
    }
}

/// Why a transaction failed; nobody delivered its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnError {
    /// Fewer than `min` receivers answered the open within its timeout.
    OpenFailed {
        /// The receivers that answered.
        answered: Vec<NodeId>,
        /// How many were needed.
        min: usize,
    },
    /// Receivers of the set fell silent (or closed) before the commit and fewer than `min`
    /// were left.
    Aborted {
        /// The receivers dropped, by name.
        dropped: Vec<NodeId>,
        /// The receivers left in the set.
        left: Vec<NodeId>,
        /// How many were needed.
        min: usize,
    },
    /// The runtime failed (the group closed, a message refused).
    Runtime(String),
}

impl fmt::Display for TxnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TxnError::OpenFailed { answered, min } => write!(
                f,
                "only {} receiver(s) answered the open, {min} needed: {}",
                answered.len(),
                IdList(answered)
            ),
            TxnError::Aborted { dropped, left, min } => write!(
                f,
                "aborted: receiver(s) {} fell silent or closed, {} left of {min} needed: {}",
                IdList(dropped),
                left.len(),
                IdList(left)
            ),
            TxnError::Runtime(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for TxnError {}

impl From<Error> for TxnError {
    fn from(e: Error) -> Self {
        TxnError::Runtime(e.to_string())
    }
}

/// One step of a transaction, or a request from another member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnEvent {
    /// The open was decided: the receivers in the transaction's set.
    Opened {
        /// The transaction.
        txn: u64,
        /// Its set.
        set: Vec<NodeId>,
    },
    /// A receiver of the set fell silent (or closed) and was dropped.
    Dropped {
        /// The transaction.
        txn: u64,
        /// The receiver.
        receiver: NodeId,
    },
    /// Every receiver of the set delivered the message (deliver-to released, and confirmed by
    /// each receiver once its application took the request).
    Committed {
        /// The transaction.
        txn: u64,
    },
    /// The transaction failed: nobody delivered it.
    Failed {
        /// The transaction.
        txn: u64,
        /// Why, and who.
        error: TxnError,
    },
    /// A reply on a response channel.
    Reply {
        /// The transaction answered.
        txn: u64,
        /// The replier.
        from: NodeId,
        /// The answer.
        payload: Bytes,
    },
    /// Another member's committed transaction (answer it with [`TxnGroup::reply`]).
    Request(Delivery),
}

/// Which replies [`TxnGroup::request`] waits for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Until {
    /// None: return at the commit.
    Committed,
    /// The first reply.
    First,
    /// Replies from more than half the set.
    Majority,
    /// Replies from every receiver of the set.
    All,
}

/// What a committed transaction came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnOutcome {
    /// The transaction.
    pub txn: u64,
    /// The receivers that committed it (the set, less those dropped).
    pub set: Vec<NodeId>,
    /// Replies in arrival order, each with its replier.
    pub replies: Vec<(NodeId, Bytes)>,
    /// Receivers of the set that had not replied when the wait ended.
    pub missing: Vec<NodeId>,
    /// Receivers dropped during the transaction.
    pub dropped: Vec<NodeId>,
    /// From the send to the commit.
    pub commit_latency: Duration,
    /// From the send to the last reply waited for (or the end of the wait).
    pub latency: Duration,
}

/// What is known of one of this member's transactions.
#[derive(Default)]
struct Track {
    set: Option<Vec<NodeId>>,
    dropped: Vec<NodeId>,
}

/// One membership of a group run by the `txn` engine (see the module docs).
pub struct TxnGroup {
    group: Group,
    opts: TxnOptions,
    me: NodeId,
    next_txn: u64,
    tracks: BTreeMap<u64, Track>,
}

/// Transactions whose sets are remembered at most (the oldest are forgotten).
const MAX_TRACKS: usize = 4096;

impl TxnGroup {
    /// Open a membership of group `name` for transactions with `opts` (every member listens
    /// on the group's address; there is no join).
    pub fn open(node: &Node, name: &str, opts: TxnOptions) -> Result<TxnGroup, Error> {
        let group = node.open_group(Self::config(name, &opts))?;
        Ok(Self::with_group(group, opts))
    }

    /// Async [`TxnGroup::open`].
    pub async fn open_async(node: &Node, name: &str, opts: TxnOptions) -> Result<TxnGroup, Error> {
        let group = node.open_group_async(Self::config(name, &opts)).await?;
        Ok(Self::with_group(group, opts))
    }

    /// The group configuration `open` uses: the `txn` engine with `opts`, created rather than
    /// joined (no membership), completion events on, sealed with `opts.keys` if any.
    pub fn config(name: &str, opts: &TxnOptions) -> GroupConfig {
        let mut c = GroupConfig::new(name)
            .mode(OpenMode::Create)
            .engine(opts.engine());
        c.qos = Qos::Reliable;
        c.completion_events = true;
        c.keys = opts.keys.clone();
        c
    }

    fn with_group(group: Group, opts: TxnOptions) -> TxnGroup {
        TxnGroup {
            me: group.me(),
            group,
            opts,
            next_txn: 0,
            tracks: BTreeMap::new(),
        }
    }

    /// This member.
    pub fn me(&self) -> NodeId {
        self.me
    }

    /// The group handle (counters, info).
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// Start a transaction with `payload`; returns its number. Blocks only while the send
    /// queue is full. Follow it with [`TxnGroup::next_event`].
    pub fn send(&mut self, payload: impl IntoPayload) -> Result<u64, Error> {
        let payload = payload.into_payload();
        self.check(&payload)?;
        self.group.send_nowait_with(payload, Qos::Reliable)?;
        Ok(self.started())
    }

    /// Async [`TxnGroup::send`].
    pub async fn send_async(&mut self, payload: impl IntoPayload) -> Result<u64, Error> {
        let payload = payload.into_payload();
        self.check(&payload)?;
        // `send_async` would wait for the commit, which a failed transaction never reaches:
        // queue without waiting for it (awaiting only room in a full queue).
        self.group
            .send_nowait_async_with(payload, Qos::Reliable)
            .await?;
        Ok(self.started())
    }

    fn check(&self, payload: &Bytes) -> Result<(), Error> {
        // Refused here, not by the engine, so that the numbering stays in step.
        if payload.len() > self.opts.max_message_bytes {
            return Err(Error::Send(SendError::TooLarge));
        }
        Ok(())
    }

    fn started(&mut self) -> u64 {
        let txn = self.next_txn;
        self.next_txn += 1;
        self.tracks.insert(txn, Track::default());
        while self.tracks.len() > MAX_TRACKS {
            self.tracks.pop_first();
        }
        txn
    }

    /// Answer transaction `txn` of member `to` on this member's response channel
    /// (X_MRreply). Refused once the transaction closed.
    pub fn reply(&self, to: NodeId, txn: u64, payload: impl IntoPayload) -> Result<(), Error> {
        self.group.reply(to, txn, payload)
    }

    /// The next step of a transaction or request, waiting at most `timeout` (`Ok(None)`: none
    /// came).
    pub fn next_event(&mut self, timeout: Duration) -> Result<Option<TxnEvent>, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ev = match self.group.recv_timeout(left) {
                Ok(ev) => ev,
                Err(Error::Timeout) => return Ok(None),
                Err(e) => return Err(e),
            };
            if let Some(e) = self.map(ev) {
                return Ok(Some(e));
            }
        }
    }

    /// Async [`TxnGroup::next_event`], without a timeout (`None`: the group closed).
    pub async fn next_event_async(&mut self) -> Option<TxnEvent> {
        loop {
            let ev = self.group.recv_async().await?;
            if let Some(e) = self.map(ev) {
                return Some(e);
            }
        }
    }

    fn map(&mut self, ev: GroupEvent) -> Option<TxnEvent> {
        match ev {
            GroupEvent::View(v) if v.coordinator == self.me && v.id > 1 => {
                let txn = v.seq;
                let t = self.tracks.entry(txn).or_default();
                match v.left {
                    None => {
                        let set: Vec<NodeId> =
                            v.members.into_iter().filter(|&m| m != self.me).collect();
                        t.set = Some(set.clone());
                        Some(TxnEvent::Opened { txn, set })
                    }
                    Some(r) => {
                        t.dropped.push(r);
                        if let Some(s) = t.set.as_mut() {
                            s.retain(|&m| m != r);
                        }
                        Some(TxnEvent::Dropped { txn, receiver: r })
                    }
                }
            }
            GroupEvent::SendComplete { msg } => Some(TxnEvent::Committed { txn: msg }),
            GroupEvent::Loss(l) if l.sender == self.me => {
                let txn = l.first_seq;
                let t = self.tracks.remove(&txn).unwrap_or_default();
                let set = t.set.unwrap_or_default();
                let min = self.opts.min;
                let error = if t.dropped.is_empty() {
                    TxnError::OpenFailed { answered: set, min }
                } else {
                    TxnError::Aborted {
                        dropped: t.dropped,
                        left: set,
                        min,
                    }
                };
                Some(TxnEvent::Failed { txn, error })
            }
            GroupEvent::Reply(r) => Some(TxnEvent::Reply {
                txn: r.request,
                from: r.from,
                payload: r.payload,
            }),
            GroupEvent::Deliver(d) if d.sender != self.me => Some(TxnEvent::Request(d)),
            _ => None,
        }
    }

    /// One whole transaction: send `payload`, wait for the commit and then for the replies
    /// `until` asks for, at most the reply timeout after the commit. Requests from others that
    /// come meanwhile go unanswered (use [`TxnGroup::next_event`] to serve them).
    pub fn request(
        &mut self,
        payload: impl IntoPayload,
        until: Until,
    ) -> Result<TxnOutcome, TxnError> {
        let start = Instant::now();
        let txn = self.send(payload)?;
        let mut w = Waiting::new(txn, start);
        // The open, the transfer and the commit take the open's timeout and some round
        // trips; the receivers' silence timeout (2 s) bounds a stall.
        let commit_by = start + self.opts.timeout + Duration::from_secs(10);
        loop {
            let deadline = w.deadline(commit_by, self.opts.reply_timeout);
            let now = Instant::now();
            if now >= deadline || w.done(until) {
                return w.finish(now);
            }
            match self.next_event(deadline - now)? {
                None => {}
                Some(e) => {
                    if let Some(r) = w.take(e) {
                        return r;
                    }
                }
            }
        }
    }

    /// Async [`TxnGroup::request`] (no deadline of its own beyond the engine's: wrap it in
    /// the executor's timeout if needed).
    pub async fn request_async(
        &mut self,
        payload: impl IntoPayload,
        until: Until,
    ) -> Result<TxnOutcome, TxnError> {
        let start = Instant::now();
        let txn = self.send_async(payload).await?;
        let mut w = Waiting::new(txn, start);
        loop {
            if w.done(until) {
                return w.finish(Instant::now());
            }
            let Some(e) = self.next_event_async().await else {
                return Err(TxnError::Runtime(Error::Closed.to_string()));
            };
            if let Some(r) = w.take(e) {
                return r;
            }
        }
    }

    /// X_MRclose for the membership: leave the group (every response channel closes).
    pub fn close(self) -> Result<(), Error> {
        self.group.leave()
    }
}

/// One transaction being waited for by `request`.
struct Waiting {
    txn: u64,
    start: Instant,
    set: Option<Vec<NodeId>>,
    dropped: Vec<NodeId>,
    committed: Option<Instant>,
    replies: Vec<(NodeId, Bytes)>,
}

impl Waiting {
    fn new(txn: u64, start: Instant) -> Waiting {
        Waiting {
            txn,
            start,
            set: None,
            dropped: Vec::new(),
            committed: None,
            replies: Vec::new(),
        }
    }

    fn deadline(&self, commit_by: Instant, reply_timeout: Duration) -> Instant {
        match self.committed {
            // A little less than the channels' linger, so that the last replies are in.
            Some(t) => t + reply_timeout,
            None => commit_by,
        }
    }

    fn repliers(&self) -> usize {
        let mut r: Vec<NodeId> = self.replies.iter().map(|r| r.0).collect();
        r.sort();
        r.dedup();
        r.len()
    }

    fn done(&self, until: Until) -> bool {
        let Some(set) = &self.set else {
            return false;
        };
        if self.committed.is_none() {
            return false;
        }
        let n = self.repliers();
        match until {
            Until::Committed => true,
            Until::First => n >= 1 || set.is_empty(),
            Until::Majority => n * 2 > set.len(),
            Until::All => n >= set.len(),
        }
    }

    fn take(&mut self, e: TxnEvent) -> Option<Result<TxnOutcome, TxnError>> {
        match e {
            TxnEvent::Opened { txn, set } if txn == self.txn => self.set = Some(set),
            TxnEvent::Dropped { txn, receiver } if txn == self.txn => {
                self.dropped.push(receiver);
                if let Some(s) = self.set.as_mut() {
                    s.retain(|&m| m != receiver);
                }
            }
            TxnEvent::Committed { txn } if txn == self.txn => {
                self.committed = Some(Instant::now());
            }
            TxnEvent::Failed { txn, error } if txn == self.txn => return Some(Err(error)),
            TxnEvent::Reply { txn, from, payload } if txn == self.txn => {
                self.replies.push((from, payload));
            }
            _ => {}
        }
        None
    }

    fn finish(&self, now: Instant) -> Result<TxnOutcome, TxnError> {
        let Some(committed) = self.committed else {
            return Err(TxnError::Runtime(format!(
                "transaction {} neither committed nor failed in time",
                self.txn
            )));
        };
        let set = self.set.clone().unwrap_or_default();
        let missing = set
            .iter()
            .copied()
            .filter(|m| !self.replies.iter().any(|r| r.0 == *m))
            .collect();
        Ok(TxnOutcome {
            txn: self.txn,
            set,
            replies: self.replies.clone(),
            missing,
            dropped: self.dropped.clone(),
            commit_latency: committed - self.start,
            latency: now - self.start,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NodeConfig;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Two servers in threads answer a client's transactions, blocking and async; an open that
    /// needs three fails naming the two that answered.
    #[test]
    fn a_client_collects_named_replies_blocking_and_async() {
        let name = format!("txn-lib-{}", std::process::id());
        let stop = Arc::new(AtomicBool::new(false));
        let mut servers = Vec::new();
        for id in [41u32, 42] {
            let (name, stop) = (name.clone(), stop.clone());
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            servers.push(std::thread::spawn(move || {
                let node = Node::new(NodeConfig {
                    id: Some(NodeId(id)),
                    ..NodeConfig::default()
                })
                .unwrap();
                let mut g = TxnGroup::open(&node, &name, TxnOptions::server()).unwrap();
                ready_tx.send(()).unwrap();
                while !stop.load(Ordering::SeqCst) {
                    if let Ok(Some(TxnEvent::Request(d))) = g.next_event(Duration::from_millis(50))
                    {
                        let answer = format!("{id} got {}", String::from_utf8_lossy(&d.payload));
                        // The client may be gone already (it waited for the first reply only
                        // and closed): a server goes on.
                        let _ = g.reply(d.sender, d.msg, answer);
                    }
                }
            }));
            ready_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        }
        let node = Node::new(NodeConfig {
            id: Some(NodeId(40)),
            ..NodeConfig::default()
        })
        .unwrap();
        let opts = TxnOptions {
            min: 2,
            max: 2,
            ..TxnOptions::client()
        };
        let mut g = TxnGroup::open(&node, &name, opts).unwrap();
        let out = g.request("q1", Until::All).unwrap();
        assert_eq!(out.set, vec![NodeId(41), NodeId(42)]);
        let mut r: Vec<(NodeId, Bytes)> = out.replies.clone();
        r.sort();
        assert_eq!(
            r,
            vec![
                (NodeId(41), Bytes::from("41 got q1")),
                (NodeId(42), Bytes::from("42 got q1")),
            ]
        );
        assert!(out.missing.is_empty());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let out = rt
            .block_on(async {
                tokio::time::timeout(Duration::from_secs(30), g.request_async("q2", Until::First))
                    .await
            })
            .expect("in time")
            .unwrap();
        assert!(out.replies[0].1.ends_with(b"got q2"), "{out:?}");
        g.close().unwrap();
        // An open that needs three: fails, naming the two that answered.
        let opts = TxnOptions {
            min: 3,
            max: 3,
            timeout: Duration::from_millis(200),
            ..TxnOptions::client()
        };
        let mut g = TxnGroup::open(&node, &name, opts).unwrap();
        let err = g.request("q3", Until::All).unwrap_err();
        assert_eq!(
            err,
            TxnError::OpenFailed {
                answered: vec![NodeId(41), NodeId(42)],
                min: 3
            }
        );
        assert!(err.to_string().contains("only 2 receiver(s)"), "{err}");
        stop.store(true, Ordering::SeqCst);
        for s in servers {
            s.join().unwrap();
        }
    }
}
