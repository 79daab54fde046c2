//! State transfer: a member that joins late receives the group's state at its place in the
//! total order, as JGroups STATE_TRANSFER gives it to a member that connects with a state
//! request.
//!
//! The application provides [`StateApp::get_state`] and [`StateApp::set_state`] (JGroups'
//! `Receiver.getState(OutputStream)` and `setState(InputStream)`, here over [`std::io::Write`]
//! and [`std::io::Read`]) and wraps its [`Group`] in a [`StateGroup`], which it then reads
//! instead of the group.
//!
//! **How.** A member that joins a group that has other members multicasts a *state request* in
//! the total order. The member that provides the state is chosen alike by every member at the
//! request's position: the first member, in the order of the view in effect there (the
//! engine's rank order), that holds the state at that point, other than the requester. The
//! holders are the group's creator and every member whose own snapshot was ordered earlier;
//! every member keeps that set as it reads the order, and a snapshot carries it to the joiner.
//! The provider takes the snapshot when it reads the request, so its state is exactly the one
//! of that position, and multicasts it. The joiner drops the messages ordered before its
//! request (the snapshot contains them), keeps those ordered after it until the snapshot comes
//! (at most [`StateOptions::max_buffer_bytes`]), calls [`StateApp::set_state`], and hands the
//! kept events to the application in order before any later one. A member still waiting for
//! its own state is never chosen: it becomes a holder at its snapshot's place in the order, so
//! two members that join at the same time are each served by one that held the state before
//! their requests, and the requests a joiner reads as it hands over its kept events are
//! treated by the same rule as everywhere else.
//!
//! JGroups STATE_TRANSFER asks one member (the coordinator by default) point to point; the
//! provider sends its state with a digest of the messages it has delivered, and the joiner's
//! reliable layer starts from that digest, so the cut is agreed through the digest. Here the
//! cut is the request's place in the total order, which every member sees alike, so no digest
//! is needed; the price is that the state, like any message, goes to every member.
//!
//! **What is guaranteed.** The joiner's state equals the state every member had at the same
//! point of the total order; from there it sees every later message exactly once and in the
//! order every member sees it. The first member (the group's creator, alone) starts with its
//! own initial state, without a transfer.
//!
//! **What is not.** Only totally ordered engines with views ordered with the messages (the
//! Sequencer, and the Ring at `totally-ordered` or stronger): [`StateGroup::join`] refuses
//! others ([`StateError::NotTotallyOrdered`]). The state travels as one message (fragmented
//! by the engine), so it is limited by [`StateOptions::max_state_bytes`] (16 MiB, the
//! Sequencer's largest message by default) and on the Ring by its default largest message
//! (1 MiB), less the snapshot's own header (15 bytes and up to 64 member ids).
//! A larger state is refused by the provider and the joiner fails with
//! [`StateError::TooLarge`]. If
//! every member that holds the state leaves, a joiner cannot get it and fails at its timeout.
//!
//! **If the provider goes.** The joiner cannot know its provider before it has the snapshot
//! (the set of state holders comes with it), so it asks again whenever a view without some
//! earlier member comes after its last request, and none of its requests is still on its way:
//! the new request is served from the new view. A snapshot answering any of its requests ends
//! the wait. [`StateOptions::timeout`] bounds the whole wait ([`StateError::Timeout`]).
//!
//! **Healing.** A member left out of the group, or merged into another, by self-healing
//! ([`crate::GroupConfig::heal`]) comes back as a new member with the state it had, which is
//! not the group's: the wrapper sees [`rmcast_proto::Recovery::Expelled`] or
//! [`rmcast_proto::Recovery::Merging`] pass, serves no state from then on
//! ([`StateGroup::detached`]), and [`StateGroup::resync`] transfers the group's state again
//! (as JGroups leaves a merge to the application, which may fetch the state anew).
//!
//! **Every member of such a group must use the wrapper.** Application messages and the
//! wrapper's own (requests, snapshots) share the group, told apart by one leading byte that
//! [`StateGroup::send`] adds and [`StateGroup::recv`] strips. Messages delivered from a sender
//! outside the view (the Ring's requests from non-members, RMP's multi-RPC) carry no tag and are
//! handed over whole. A member's message without a valid tag is counted
//! ([`StateStats::malformed`]) and skipped, alike at every member.

use crate::config::setters;
use crate::error::Error;
use crate::node::{Group, GroupEvent, GroupSender};
use crate::payload::IntoPayload;
use bytes::Bytes;
use rmcast_proto::{NodeId, Order, View};
use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// What an application gives the state transfer: its state, written at the provider, read at
/// the joiner (JGroups' `Receiver.getState` / `setState`).
pub trait StateApp {
    /// Write the whole state to `out`. Called at the provider when it reads a state request,
    /// so the state is the one left by every message handed over before. `out` refuses to grow
    /// past the limit (an error), which refuses the transfer.
    fn get_state(&self, out: &mut dyn Write) -> io::Result<()>;

    /// Replace the state with the one read from `input` (what a `get_state` wrote). Called once
    /// at the joiner, before any message ordered after its request is handed over.
    fn set_state(&mut self, input: &mut dyn Read) -> io::Result<()>;
}

/// Settings of a [`StateGroup`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StateOptions {
    /// How long a joiner waits for the state in all, requests asked again included.
    pub timeout: Duration,
    /// Bytes of events a joiner keeps while it waits for the snapshot (the messages ordered
    /// after its request); past it the transfer fails ([`StateError::BufferFull`]).
    pub max_buffer_bytes: usize,
    /// The largest state a provider sends; a larger one is refused ([`StateError::TooLarge`] at
    /// the joiner). On the Ring the bound is at most its default largest message (1 MiB). Keep
    /// it at or below the Sequencer's `max_message_bytes` where that is set lower than its
    /// 16 MiB: a snapshot the engine refuses is only logged and counted, and the joiner fails
    /// at its timeout.
    pub max_state_bytes: usize,
}

impl Default for StateOptions {
    fn default() -> Self {
        StateOptions {
            timeout: Duration::from_secs(30),
            max_buffer_bytes: 64 << 20,
            max_state_bytes: 16 << 20,
        }
    }
}

setters!(StateOptions {
    timeout: (Duration),
    max_buffer_bytes: (usize),
    max_state_bytes: (usize),
});

/// Why a state transfer failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum StateError {
    /// The group's engine or quality of service does not order every message and view in one
    /// total order, so no position in it could be agreed on.
    NotTotallyOrdered {
        /// The engine's name.
        engine: String,
        /// The group's quality of service.
        qos: rmcast_proto::Qos,
    },
    /// No snapshot came within [`StateOptions::timeout`].
    Timeout {
        /// How long the joiner waited.
        waited: Duration,
        /// State requests it sent.
        requests: u32,
        /// Whether its first request had come back in the order (if not, the group did not
        /// order it: a stalled group).
        ordered: bool,
        /// The view it last saw.
        view: Vec<NodeId>,
    },
    /// More than [`StateOptions::max_buffer_bytes`] of messages came after the request before
    /// the snapshot did.
    BufferFull {
        /// The bound.
        bound: usize,
    },
    /// The provider's state does not fit in one message of the group.
    TooLarge {
        /// The member that refused to send it.
        provider: NodeId,
        /// The limit it applied, in bytes.
        limit: u64,
        /// Its explanation.
        reason: String,
    },
    /// The application's [`StateApp::set_state`] failed.
    SetState(io::Error),
    /// The group failed or closed while the joiner waited.
    Group(Error),
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::NotTotallyOrdered { engine, qos } => write!(
                f,
                "state transfer needs a totally ordered group (the sequencer, or the ring at \
                 totally-ordered or stronger): engine {engine} at {qos} is not"
            ),
            StateError::Timeout {
                waited,
                requests,
                ordered,
                view,
            } => write!(
                f,
                "no state snapshot answered this member's state request within {waited:?} \
                 ({requests} request(s) sent, {}; last view {view:?})",
                if *ordered {
                    "ordered by the group but not answered: no member holding the state served it"
                } else {
                    "never ordered by the group"
                }
            ),
            StateError::BufferFull { bound } => write!(
                f,
                "more than {bound} bytes of messages came after the state request before the \
                 snapshot (StateOptions::max_buffer_bytes)"
            ),
            StateError::TooLarge {
                provider,
                limit,
                reason,
            } => write!(
                f,
                "the group's state does not fit in one message of {limit} bytes: provider \
                 {provider} refused it ({reason})"
            ),
            StateError::SetState(e) => write!(f, "set_state failed: {e}"),
            StateError::Group(e) => write!(f, "the group failed during the state transfer: {e}"),
        }
    }
}

impl std::error::Error for StateError {}

/// What the state transfer did at this member.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StateStats {
    /// State requests this member sent (more than one when a provider left first).
    pub requests_sent: u32,
    /// State requests of other members read in the order.
    pub requests_seen: u64,
    /// Snapshots this member sent as provider.
    pub snapshots_sent: u64,
    /// Requests this member refused as provider (state too large, or `get_state` failed).
    pub refused: u64,
    /// Members' messages without a valid tag, skipped.
    pub malformed: u64,
    /// The member whose snapshot this member's state came from (`None` for the creator).
    pub provider: Option<NodeId>,
    /// The size of that snapshot's state, in bytes.
    pub state_bytes: usize,
}

// Leading byte of every member's message in a state-transfer group.
const TAG_APP: u8 = 0;
const TAG_REQUEST: u8 = 1;
const TAG_SNAPSHOT: u8 = 2;
const TAG_REFUSAL: u8 = 3;

/// Snapshot header: tag, requester, request number, number of state holders.
const SNAPSHOT_FIXED: usize = 1 + 4 + 4 + 2;
/// State holders a snapshot names at most (the rest are left out: only the set's first ones
/// serve, and every member computes the same shortened set).
const MAX_HOLDERS: usize = 64;
/// What one kept event costs besides its payload, for the buffer bound.
const EVENT_COST: usize = 64;

/// A control message of the wrapper, as read from a member's delivery.
#[derive(Debug, PartialEq, Eq)]
enum Control<'a> {
    App(&'a [u8]),
    Request {
        n: u32,
    },
    Snapshot {
        requester: NodeId,
        n: u32,
        holders: Vec<NodeId>,
        state: &'a [u8],
    },
    Refusal {
        requester: NodeId,
        n: u32,
        limit: u64,
        reason: &'a [u8],
    },
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Reads a member's payload; `None` when it is malformed (never panics).
fn decode(p: &[u8]) -> Option<Control<'_>> {
    let (&tag, rest) = p.split_first()?;
    match tag {
        TAG_APP => Some(Control::App(rest)),
        TAG_REQUEST if rest.len() == 4 => Some(Control::Request {
            n: u32_at(rest, 0)?,
        }),
        TAG_SNAPSHOT => {
            let requester = NodeId(u32_at(rest, 0)?);
            let n = u32_at(rest, 4)?;
            let count = u16::from_le_bytes(rest.get(8..10)?.try_into().ok()?) as usize;
            if count > MAX_HOLDERS {
                return None;
            }
            let ids = rest.get(10..10 + 4 * count)?;
            let holders = ids
                .chunks_exact(4)
                .map(|c| NodeId(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect();
            Some(Control::Snapshot {
                requester,
                n,
                holders,
                state: &rest[10 + 4 * count..],
            })
        }
        TAG_REFUSAL => Some(Control::Refusal {
            requester: NodeId(u32_at(rest, 0)?),
            n: u32_at(rest, 4)?,
            limit: u64::from_le_bytes(rest.get(8..16)?.try_into().ok()?),
            reason: rest.get(16..)?,
        }),
        _ => None,
    }
}

fn tagged(tag: u8, body: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(1 + body.len());
    v.push(tag);
    v.extend_from_slice(body);
    Bytes::from(v)
}

/// A writer that refuses to grow past `limit` bytes, so that a huge state costs no more memory
/// than the limit.
struct Bounded {
    buf: Vec<u8>,
    /// Bytes of the message before the state.
    header: usize,
    limit: usize,
}

impl Write for Bounded {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len() + data.len() > self.limit {
            return Err(io::Error::other(format!(
                "state larger than the {} bytes one message carries",
                self.limit.saturating_sub(self.header)
            )));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A sending handle of a [`StateGroup`] for other threads: tags what it sends as an
/// application message.
#[derive(Clone, Debug)]
pub struct StateSender {
    group: GroupSender,
}

impl StateSender {
    /// [`GroupSender::send`] of an application message.
    pub fn send(&self, payload: impl IntoPayload) -> Result<u64, Error> {
        self.group.send(tagged(TAG_APP, &payload.into_payload()))
    }

    /// [`GroupSender::send_nowait`] of an application message.
    pub fn send_nowait(&self, payload: impl IntoPayload) -> Result<(), Error> {
        self.group
            .send_nowait(tagged(TAG_APP, &payload.into_payload()))
    }
}

/// A [`Group`] of a totally ordered engine with state transfer (see the module docs): created
/// by [`StateGroup::join`], which returns once this member has the group's state; read with
/// [`StateGroup::recv`], which answers other members' state requests on the way.
pub struct StateGroup<A> {
    group: Group,
    app: A,
    opts: StateOptions,
    /// The view in effect at the position last read, in the view's order.
    members: Vec<NodeId>,
    /// That view, if one was read.
    view: Option<View>,
    /// The members that hold the state at that position (a subset of `members`).
    holders: BTreeSet<NodeId>,
    /// Events kept during the transfer, handed over before the group's next ones.
    replay: VecDeque<GroupEvent>,
    /// Left out of the group (expelled, or merged into another): this member's state is no
    /// longer the group's until [`StateGroup::resync`].
    detached: bool,
    stats: StateStats,
}

impl<A: StateApp> StateGroup<A> {
    /// Wrap `group` and bring `app` to the group's state: at once for the group's creator,
    /// otherwise by a state request in the total order, waiting at most
    /// [`StateOptions::timeout`] for the snapshot. Refuses a group that is not totally ordered.
    pub fn join(group: Group, app: A, opts: StateOptions) -> Result<StateGroup<A>, StateError> {
        let g = group.guarantees();
        if g.order != Order::Total || !g.virtual_synchrony || !group.qos().is_total() {
            return Err(StateError::NotTotallyOrdered {
                engine: group.engine_kind().to_string(),
                qos: group.qos(),
            });
        }
        let me = group.me();
        let mut sg = StateGroup {
            group,
            app,
            opts,
            members: vec![me],
            view: None,
            holders: BTreeSet::new(),
            replay: VecDeque::new(),
            detached: false,
            stats: StateStats::default(),
        };
        if sg.group.created() {
            sg.holders.insert(me);
            return Ok(sg);
        }
        sg.transfer()?;
        Ok(sg)
    }

    /// The wait for the snapshot: everything before this member's first request is dropped,
    /// everything after it kept, until a snapshot answers one of its requests.
    fn transfer(&mut self) -> Result<(), StateError> {
        let me = self.group.me();
        let started = Instant::now();
        let deadline = started + self.opts.timeout;
        // Requests sent and not yet read back in the order.
        let mut in_flight = 0u32;
        self.ask()?;
        in_flight += 1;
        let mut view: Option<View> = self.view.clone();
        // For each of this member's requests read in the order: its number, the view in
        // effect there, and its index in `kept`.
        let mut asked: Vec<(u32, Option<View>, usize)> = Vec::new();
        let mut kept: VecDeque<GroupEvent> = VecDeque::new();
        let mut kept_bytes = 0usize;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ev = match self.group.recv_timeout(left) {
                Ok(ev) => ev,
                Err(Error::Timeout | Error::MemberFailed { .. }) if left.is_zero() => {
                    return Err(StateError::Timeout {
                        waited: started.elapsed(),
                        requests: self.stats.requests_sent,
                        ordered: !asked.is_empty(),
                        view: view.map(|v| v.members).unwrap_or_default(),
                    })
                }
                Err(Error::Timeout | Error::MemberFailed { .. }) => continue,
                Err(e) => return Err(StateError::Group(e)),
            };
            if let GroupEvent::View(v) = &ev {
                let shrank = view
                    .as_ref()
                    .is_some_and(|old| old.members.iter().any(|m| !v.members.contains(m)));
                view = Some(v.clone());
                // A provider may have gone: a request ordered from now on is served from
                // this view. One on its way already is.
                if shrank && !asked.is_empty() && in_flight == 0 {
                    self.ask()?;
                    in_flight += 1;
                }
            }
            let from_member = |d: &rmcast_proto::Delivery| {
                view.as_ref().is_some_and(|v| v.members.contains(&d.sender))
            };
            let mut answer = None;
            if let GroupEvent::Deliver(d) = &ev {
                if from_member(d) {
                    match decode(&d.payload) {
                        Some(Control::Request { n }) if d.sender == me => {
                            in_flight = in_flight.saturating_sub(1);
                            if asked.is_empty() && view.as_ref().is_some_and(|v| v.members == [me])
                            {
                                // Alone at its request: nobody else holds a state, so this
                                // member's own is the group's (as the creator's is).
                                self.holders = BTreeSet::from([me]);
                                self.members = vec![me];
                                self.view = view;
                                return Ok(());
                            }
                            asked.push((n, view.clone(), kept.len()));
                        }
                        Some(Control::Snapshot {
                            requester,
                            n,
                            holders,
                            state,
                        }) if requester == me => {
                            if let Some(at) = asked.iter().find(|a| a.0 == n) {
                                answer = Some((at.clone(), d.sender, holders, state.to_vec()));
                            }
                        }
                        Some(Control::Refusal {
                            requester,
                            n,
                            limit,
                            reason,
                        }) if requester == me && asked.iter().any(|a| a.0 == n) => {
                            return Err(StateError::TooLarge {
                                provider: d.sender,
                                limit,
                                reason: String::from_utf8_lossy(reason).into_owned(),
                            });
                        }
                        _ => {}
                    }
                }
            }
            if let Some(((_, at_view, at), provider, holders, state)) = answer {
                self.app
                    .set_state(&mut &state[..])
                    .map_err(StateError::SetState)?;
                self.stats.provider = Some(provider);
                self.stats.state_bytes = state.len();
                // The state is the one at the request: what came after it is handed over
                // next, behind the view in effect there; the snapshot's own event last, so
                // that this member becomes a holder at its place, as every member sees it.
                kept.drain(..=at);
                self.holders = holders.into_iter().collect();
                if let Some(v) = at_view {
                    self.members = v.members.clone();
                    self.view = Some(v.clone());
                    kept.push_front(GroupEvent::View(v));
                }
                kept.push_back(ev);
                self.replay = kept;
                return Ok(());
            }
            if asked.is_empty() {
                // Before the first request: in the snapshot.
                continue;
            }
            kept_bytes += EVENT_COST
                + match &ev {
                    GroupEvent::Deliver(d) => d.payload.len(),
                    _ => 0,
                };
            if kept_bytes > self.opts.max_buffer_bytes {
                return Err(StateError::BufferFull {
                    bound: self.opts.max_buffer_bytes,
                });
            }
            kept.push_back(ev);
        }
    }

    /// Send a state request.
    fn ask(&mut self) -> Result<(), StateError> {
        self.stats.requests_sent += 1;
        let n = self.stats.requests_sent;
        self.group
            .send_nowait(tagged(TAG_REQUEST, &n.to_le_bytes()))
            .map_err(StateError::Group)
    }

    /// The next event for the application, blocking until there is one; `None` once the
    /// group is closed. Application messages come without their tag; the wrapper's own
    /// messages never come: a state request this member is to serve is answered here, with
    /// the state left by every event returned before.
    pub fn recv(&mut self) -> Option<GroupEvent> {
        loop {
            let ev = match self.replay.pop_front() {
                Some(ev) => ev,
                None => self.group.recv()?,
            };
            if let Some(ev) = self.step(ev) {
                return Some(ev);
            }
        }
    }

    /// [`StateGroup::recv`] waiting at most `timeout`, with the errors of
    /// [`Group::recv_timeout`].
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<GroupEvent, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let ev = match self.replay.pop_front() {
                Some(ev) => ev,
                None => self
                    .group
                    .recv_timeout(deadline.saturating_duration_since(Instant::now()))?,
            };
            if let Some(ev) = self.step(ev) {
                return Ok(ev);
            }
        }
    }

    /// One event read in the order: the wrapper's bookkeeping, and what the application sees.
    fn step(&mut self, ev: GroupEvent) -> Option<GroupEvent> {
        let d = match ev {
            GroupEvent::View(v) => {
                self.members = v.members.clone();
                self.view = Some(v.clone());
                let members = &self.members;
                self.holders.retain(|h| members.contains(h));
                return Some(GroupEvent::View(v));
            }
            GroupEvent::Recovery(
                r @ (rmcast_proto::Recovery::Expelled { .. }
                | rmcast_proto::Recovery::Merging { .. }),
            ) => {
                // What follows is another group's order (healing rejoins as a new member):
                // serve nobody from a state that is not that group's.
                self.holders.clear();
                self.detached = true;
                return Some(GroupEvent::Recovery(r));
            }
            GroupEvent::Deliver(d) if self.members.contains(&d.sender) => d,
            // A non-member's request (or any other event): the application's, untouched.
            other => return Some(other),
        };
        match decode(&d.payload) {
            Some(Control::App(_)) => Some(GroupEvent::Deliver(d.map_payload(|p| p.slice(1..)))),
            Some(Control::Request { n }) => {
                if d.sender != self.group.me() {
                    self.stats.requests_seen += 1;
                }
                if self.provider_for(d.sender) == Some(self.group.me()) {
                    self.serve(d.sender, n);
                }
                None
            }
            Some(Control::Snapshot { requester, .. }) => {
                if self.members.contains(&requester) {
                    self.holders.insert(requester);
                }
                None
            }
            Some(Control::Refusal { .. }) => None,
            None => {
                self.stats.malformed += 1;
                None
            }
        }
    }

    /// The first member of the view, in its order, that holds the state, other than the
    /// requester.
    fn provider_for(&self, requester: NodeId) -> Option<NodeId> {
        self.members
            .iter()
            .copied()
            .find(|m| *m != requester && self.holders.contains(m))
    }

    /// The largest state this member sends after a snapshot header of `header` bytes: the
    /// configured bound, and on the Ring its largest message (which the engine checks only
    /// after a send has returned, too late to tell the joiner why).
    fn state_limit(&self, header: usize) -> usize {
        let engine = if self.group.engine_kind() == "ring" {
            rmcast_proto::ring::Config::default()
                .max_message_bytes
                .saturating_sub(header)
        } else {
            usize::MAX
        };
        engine.min(self.opts.max_state_bytes)
    }

    /// Answer `requester`'s request `n` with the state as it is now.
    fn serve(&mut self, requester: NodeId, n: u32) {
        // The first holders in view order: those who may serve next.
        let holders: Vec<NodeId> = self
            .members
            .iter()
            .copied()
            .filter(|m| self.holders.contains(m))
            .take(MAX_HOLDERS)
            .collect();
        let header = SNAPSHOT_FIXED + 4 * holders.len();
        let limit = self.state_limit(header);
        let mut out = Bounded {
            buf: Vec::with_capacity(header),
            header,
            limit: header.saturating_add(limit),
        };
        out.buf.push(TAG_SNAPSHOT);
        out.buf.extend_from_slice(&requester.0.to_le_bytes());
        out.buf.extend_from_slice(&n.to_le_bytes());
        out.buf
            .extend_from_slice(&(holders.len() as u16).to_le_bytes());
        for h in &holders {
            out.buf.extend_from_slice(&h.0.to_le_bytes());
        }
        let msg = match self.app.get_state(&mut out) {
            Ok(()) => {
                tracing::debug!(%requester, bytes = out.buf.len() - header, "state sent");
                Bytes::from(out.buf)
            }
            Err(e) => {
                self.stats.refused += 1;
                tracing::warn!(%requester, "state request refused: {e}");
                let mut v = vec![TAG_REFUSAL];
                v.extend_from_slice(&requester.0.to_le_bytes());
                v.extend_from_slice(&n.to_le_bytes());
                v.extend_from_slice(&(limit as u64).to_le_bytes());
                v.extend_from_slice(e.to_string().as_bytes());
                v.truncate(256);
                Bytes::from(v)
            }
        };
        let snapshot = msg.first() == Some(&TAG_SNAPSHOT);
        match self.group.send_nowait(msg) {
            Ok(()) => self.stats.snapshots_sent += u64::from(snapshot),
            // The joiner asks again (after a view change) or fails at its timeout.
            Err(e) => tracing::warn!(%requester, "state snapshot not sent: {e}"),
        }
    }

    /// Whether this member was left out of the group ([`rmcast_proto::Recovery::Expelled`])
    /// or merged into another ([`rmcast_proto::Recovery::Merging`]) since its state was last
    /// the group's. Self-healing ([`crate::GroupConfig::heal`]) then joins it again as a new
    /// member, with the state it had: it serves no state request until
    /// [`StateGroup::resync`].
    pub fn detached(&self) -> bool {
        self.detached
    }

    /// Bring the state to the group's again, as [`StateGroup::join`] does for a new member
    /// (after [`StateGroup::detached`]: the group healing rejoined this member as a new one).
    /// Events not yet read are dropped: the snapshot holds them. A member alone in the view
    /// at its request keeps its own state.
    pub fn resync(&mut self) -> Result<(), StateError> {
        // Only the views of what is dropped matter: the request is ordered after them.
        for ev in self.replay.drain(..) {
            if let GroupEvent::View(v) = ev {
                self.members = v.members.clone();
                self.view = Some(v);
            }
        }
        self.holders.clear();
        self.transfer()?;
        self.detached = false;
        Ok(())
    }

    /// A sending handle for other threads.
    pub fn sender(&self) -> StateSender {
        StateSender {
            group: self.group.sender(),
        }
    }

    /// [`GroupSender::send`] of an application message (tagged as one).
    pub fn send(&self, payload: impl IntoPayload) -> Result<u64, Error> {
        self.group.send(tagged(TAG_APP, &payload.into_payload()))
    }

    /// [`GroupSender::send_nowait`] of an application message (tagged as one).
    pub fn send_nowait(&self, payload: impl IntoPayload) -> Result<(), Error> {
        self.group
            .send_nowait(tagged(TAG_APP, &payload.into_payload()))
    }

    /// The group, for everything but sending and receiving ([`GroupSender::reply`],
    /// [`GroupSender::lock`], [`GroupSender::leave`], [`GroupSender::info`], ...). Its sends
    /// would go out without the wrapper's tag: use [`StateGroup::send`].
    pub fn group(&self) -> &GroupSender {
        &self.group
    }

    /// The application.
    pub fn app(&self) -> &A {
        &self.app
    }

    /// The application, to change its state as it handles a message.
    pub fn app_mut(&mut self) -> &mut A {
        &mut self.app
    }

    /// What the state transfer did at this member.
    pub fn stats(&self) -> StateStats {
        self.stats
    }

    /// The members that hold the state at the position last read, in the view's order (the
    /// first one other than a requester serves it).
    pub fn holders(&self) -> Vec<NodeId> {
        self.members
            .iter()
            .copied()
            .filter(|m| self.holders.contains(m))
            .collect()
    }
}

impl<A> fmt::Debug for StateGroup<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateGroup")
            .field("group", &self.group)
            .field("members", &self.members)
            .field("stats", &self.stats)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_round_trip_and_truncations_are_refused() {
        let mut snap = vec![TAG_SNAPSHOT];
        snap.extend_from_slice(&7u32.to_le_bytes());
        snap.extend_from_slice(&2u32.to_le_bytes());
        snap.extend_from_slice(&1u16.to_le_bytes());
        snap.extend_from_slice(&9u32.to_le_bytes());
        snap.extend_from_slice(b"state");
        assert_eq!(
            decode(&snap),
            Some(Control::Snapshot {
                requester: NodeId(7),
                n: 2,
                holders: vec![NodeId(9)],
                state: b"state",
            })
        );
        // Every truncation of the header, and a holder count past the bound, is malformed.
        for cut in 1..SNAPSHOT_FIXED + 4 {
            assert_eq!(decode(&snap[..cut]), None, "cut at {cut}");
        }
        let mut many = snap.clone();
        many[9..11].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(decode(&many), None);
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[TAG_REQUEST, 1, 0, 0]), None);
        assert_eq!(
            decode(&[TAG_REQUEST, 1, 0, 0, 0]),
            Some(Control::Request { n: 1 })
        );
        assert_eq!(decode(&[TAG_REFUSAL, 1, 0, 0, 0, 1, 0, 0]), None);
        assert_eq!(decode(&[99, 1, 2]), None);
        assert_eq!(decode(&[TAG_APP, 5]), Some(Control::App(&[5])));
    }

    #[test]
    fn the_bounded_writer_refuses_to_grow_past_its_limit() {
        let mut w = Bounded {
            buf: Vec::new(),
            header: 0,
            limit: 20,
        };
        assert!(w.write_all(&[0; 20]).is_ok());
        let e = w.write_all(&[0]).unwrap_err();
        assert!(e.to_string().contains("state larger than"), "{e}");
        assert_eq!(w.buf.len(), 20);
    }
}
