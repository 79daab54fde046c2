//! `toy`: an unordered reliable multicast with NACKs, built only to prove the engine contract
//! (compiled with the `testing` feature; never offered to users).
//!
//! **Guarantees.** Every member that stays delivers every message sent while it is a member,
//! once, FIFO per sender; no total order, no virtual synchrony, no crash recovery. A send
//! completes once every member of the sender's view holds it.
//!
//! **How.** Senders multicast DATA with a per-sender sequence number and keep each message
//! until every member acknowledged it (a bounded send window pushes back). Every member
//! multicasts STATUS now and then: the next sequence number it expects from each sender, and its
//! own next one, so that receivers find the gaps ([`GapTracker`]) and NACK the sender, which
//! multicasts the repair. The creator admits joiners (JOIN → VIEW) and removes leavers. A
//! joiner delivers each sender's messages from the first number that sender's STATUS told it.

use crate::common::shell::{self, EventQueue, Gate, OutQueue, Shelled};
use crate::common::{decode_view, encode_view, GapTracker};
use crate::engine::{
    Counters, Delivery, Destination, Engine, Event, GroupInfo, NodeId, Qos, SendError, Time,
    Transmit, View,
};
use crate::guarantees::Guarantees;
use crate::registry::{EngineFactory, EngineParams, EngineSettings, Role};
use crate::wire::{self, EngineKind, Header, Packet, Reader};
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

const JOIN: u8 = 1;
const VIEW: u8 = 2;
const DATA: u8 = 3;
const STATUS: u8 = 4;
const NACK: u8 = 5;
const LEAVE: u8 = 6;

/// Own messages kept for repair at most (the send window).
const WINDOW: usize = 256;
/// Events held for the driver at most before delivery pauses.
const MAX_EVENTS: usize = 1024;
/// Datagrams queued for the driver at most.
const MAX_OUT: usize = 4096;
const STATUS_EVERY: Duration = Duration::from_millis(20);

/// The toy's registry entry (listed only with the `testing` feature).
pub struct ToyFactory;

impl EngineFactory for ToyFactory {
    fn name(&self) -> &str {
        "toy"
    }
    fn about(&self) -> &str {
        "test engine: unordered reliable multicast with NACKs (FIFO per sender)"
    }
    fn guarantees(&self, _: &EngineSettings) -> Guarantees {
        Guarantees::reliable_fifo()
    }
    fn build(&self, p: &EngineParams<'_>) -> Box<dyn Engine> {
        Box::new(Toy::new(p))
    }
}

/// What this member knows of one sender.
#[derive(Default)]
struct Peer {
    /// Next number to deliver, once known.
    next: Option<u64>,
    /// Received beyond `next`, bounded by the sender's window.
    early: BTreeMap<u64, Bytes>,
    /// One past the highest number known to exist.
    known: u64,
    /// When to NACK what is missing in `next..known`.
    gaps: GapTracker,
    /// What this peer acknowledged of our own messages.
    acked: u64,
}

/// The toy engine (see the module docs).
pub struct Toy {
    group: u32,
    max_datagram_bytes: usize,
    me: NodeId,
    coordinator: bool,
    view: View,
    peers: BTreeMap<NodeId, Peer>,
    /// Own messages not yet acknowledged by everyone: (number, payload).
    sent: VecDeque<(u64, Bytes)>,
    next_own: u64,
    /// Own messages multicast so far (the rest of `sent` is still to go).
    multicast: u64,
    out: OutQueue,
    events: EventQueue,
    status_at: Time,
    joined: bool,
    leaving: bool,
    left: bool,
    counters: Counters,
}

impl Toy {
    fn new(p: &EngineParams<'_>) -> Toy {
        let mut t = Toy {
            group: p.group,
            max_datagram_bytes: p.max_datagram_bytes,
            me: p.me,
            coordinator: p.role == Role::Create,
            view: View {
                id: 0,
                seq: 0,
                members: vec![],
                coordinator: p.me,
                joined: None,
                left: None,
            },
            peers: BTreeMap::new(),
            sent: VecDeque::new(),
            next_own: 0,
            multicast: 0,
            out: OutQueue::new(MAX_OUT),
            events: EventQueue::new(MAX_EVENTS),
            status_at: p.now,
            joined: false,
            leaving: false,
            left: false,
            counters: Counters::default(),
        };
        if t.coordinator {
            t.install(1, vec![p.me], Some(p.me), None);
        }
        t
    }

    fn send(&mut self, to: Destination, ptype: u8, body: impl FnOnce(&mut Vec<u8>)) {
        let mut buf = Vec::new();
        Header {
            engine: EngineKind::Test,
            ptype,
            flags: 0,
            group: self.group,
            incarnation: 0,
            sender: self.me,
        }
        .encode(&mut buf);
        body(&mut buf);
        self.out.push_back((to, buf));
    }

    fn install(
        &mut self,
        id: u64,
        members: Vec<NodeId>,
        joined: Option<NodeId>,
        left: Option<NodeId>,
    ) {
        self.view = View {
            id,
            seq: 0,
            coordinator: members[0],
            members,
            joined,
            left,
        };
        self.joined = true;
        self.peers.retain(|id, _| self.view.members.contains(id));
        for &m in &self.view.members {
            // A new member has acknowledged nothing we sent before it came.
            let from = self.multicast;
            self.peers.entry(m).or_insert_with(|| Peer {
                acked: from,
                ..Peer::default()
            });
        }
        self.coordinator = self.view.coordinator == self.me;
        self.counters.view_changes += 1;
        self.events.push_back(Event::View(self.view.clone()));
        if self.coordinator {
            let (id, m) = (self.view.id, self.view.members.clone());
            self.send(Destination::Group, VIEW, |b| encode_view(b, id, m[0], &m));
        }
        self.check_complete();
    }

    fn on_data(&mut self, from: NodeId, seq: u64, first: u64, payload: Bytes) {
        let max_early = WINDOW as u64;
        let Some(p) = self.peers.get_mut(&from) else {
            return;
        };
        let next = *p.next.get_or_insert(first);
        if seq < next || p.early.contains_key(&seq) {
            self.counters.duplicates += 1;
        } else if seq < next + max_early {
            p.early.insert(seq, payload);
            p.known = p.known.max(seq + 1);
        }
        self.deliver(from);
    }

    fn deliver(&mut self, from: NodeId) {
        let view = self.view.id;
        let Some(p) = self.peers.get_mut(&from) else {
            return;
        };
        let Some(next) = p.next.as_mut() else { return };
        while self.events.room() {
            let Some(payload) = p.early.remove(next) else {
                break;
            };
            self.counters.delivered += 1;
            self.events.push_back(Event::Deliver(Delivery {
                respond: false,
                seq: *next,
                sender: from,
                msg: *next,
                view,
                payload,
            }));
            *next += 1;
        }
    }

    fn on_status(&mut self, from: NodeId, r: &mut Reader<'_>) -> Option<()> {
        let first = r.u64().ok()?;
        for _ in 0..r.u16().ok()? {
            let (id, next) = (NodeId(r.u32().ok()?), r.u64().ok()?);
            let p = self.peers.get_mut(&from)?;
            if id == self.me {
                p.acked = p.acked.max(next);
            } else if id == from {
                // The sender's own next number: everything below it exists.
                let p = self.peers.get_mut(&id)?;
                p.next.get_or_insert(first);
                p.known = p.known.max(next);
            }
        }
        self.check_complete();
        Some(())
    }

    fn check_complete(&mut self) {
        let me = self.me;
        let stable = (self.peers.iter())
            .filter(|(&id, _)| id != me)
            .map(|(_, p)| p.acked)
            .min()
            .unwrap_or(self.multicast);
        while self.sent.front().is_some_and(|&(n, _)| n < stable) {
            let (msg, _) = self.sent.pop_front().expect("front checked");
            self.events.push_back(Event::SendComplete { msg });
        }
    }

    fn status(&mut self) {
        let mut entries: Vec<(NodeId, u64)> = self
            .peers
            .iter()
            .filter_map(|(&id, p)| Some((id, p.next?)))
            .filter(|(id, _)| *id != self.me)
            .collect();
        entries.push((self.me, self.multicast));
        let first = self.first_held();
        self.counters.acks_sent += 1;
        self.send(Destination::Group, STATUS, |b| {
            b.extend_from_slice(&first.to_be_bytes());
            b.extend_from_slice(&(entries.len() as u16).to_be_bytes());
            for (id, n) in entries {
                b.extend_from_slice(&id.0.to_be_bytes());
                b.extend_from_slice(&n.to_be_bytes());
            }
        });
    }

    /// The lowest own number not yet held by everyone: where a new member starts with us.
    fn first_held(&self) -> u64 {
        self.sent.front().map_or(self.multicast, |&(n, _)| n)
    }

    fn data(&mut self, n: u64, payload: &Bytes) {
        let first = self.first_held().min(n);
        self.send(Destination::Group, DATA, |b| {
            b.extend_from_slice(&n.to_be_bytes());
            b.extend_from_slice(&first.to_be_bytes());
            b.extend_from_slice(payload);
        });
    }
}

impl Shelled for Toy {
    const KIND: EngineKind = EngineKind::Test;
    fn gate(&mut self) -> Gate<'_> {
        Gate::new(self.group, self.me, self.left, Some(0), &mut self.counters)
    }

    fn on_packet(&mut self, _: Time, _: NodeId, pkt: Packet<'_>, _: &[u8], _: Option<u8>) {
        let h = pkt.header;
        let mut r = Reader::new(pkt.body);
        match h.ptype {
            JOIN | LEAVE if self.coordinator && self.joined => {
                let mut m = self.view.members.clone();
                let (joined, left) = if h.ptype == JOIN {
                    (!m.contains(&h.sender)).then(|| m.push(h.sender));
                    (Some(h.sender), None)
                } else {
                    m.retain(|&x| x != h.sender);
                    (None, Some(h.sender))
                };
                if m != self.view.members {
                    self.install(self.view.id + 1, m, joined, left);
                } else if h.ptype == JOIN {
                    let (id, m) = (self.view.id, self.view.members.clone());
                    self.send(Destination::Group, VIEW, |b| encode_view(b, id, m[0], &m));
                }
            }
            VIEW => {
                if let Ok((id, _, members)) = decode_view(r.rest()) {
                    if id > self.view.id && members.contains(&self.me) {
                        self.install(id, members, None, None);
                    } else if id > self.view.id && self.joined {
                        self.left = true;
                        self.events.push_back(Event::Left);
                    }
                }
            }
            DATA => {
                if let (Ok(seq), Ok(first)) = (r.u64(), r.u64()) {
                    let payload = Bytes::copy_from_slice(r.rest());
                    self.on_data(h.sender, seq, first, payload);
                }
            }
            STATUS => {
                let _ = self.on_status(h.sender, &mut r);
            }
            NACK => {
                self.counters.nacks_received += 1;
                if let (Ok(from), Ok(until)) = (r.u64(), r.u64()) {
                    let repairs: Vec<_> = self
                        .sent
                        .iter()
                        .filter(|(n, _)| (from..until).contains(n) && *n < self.multicast)
                        .cloned()
                        .collect();
                    for (n, p) in repairs {
                        self.counters.retransmissions += 1;
                        self.data(n, &p);
                    }
                }
            }
            _ => self.counters.malformed_dropped += 1,
        }
    }
}

impl Engine for Toy {
    fn handle_datagram(&mut self, now: Time, from: NodeId, datagram: &[u8]) {
        shell::receive(self, now, from, datagram, None)
    }

    fn handle_timeout(&mut self, now: Time) {
        if self.left || now < self.status_at {
            return;
        }
        self.status_at = now + STATUS_EVERY;
        if !self.joined {
            self.send(Destination::Group, JOIN, |_| {});
            return;
        }
        if self.leaving && self.sent.is_empty() {
            if self.coordinator {
                return self.leave(now);
            }
            // Leave once every own message is held by everyone.
            self.send(Destination::Group, LEAVE, |_| {});
        }
        self.status();
        if self.coordinator {
            // Announced again now and then: a member that lost the last VIEW catches up.
            let (id, m) = (self.view.id, self.view.members.clone());
            self.send(Destination::Group, VIEW, |b| encode_view(b, id, m[0], &m));
        }
        let asks: Vec<_> = self
            .peers
            .iter_mut()
            .filter_map(|(&id, p)| {
                let next = p.next?;
                p.gaps.watch(now, next, Some(p.known), Duration::ZERO);
                p.gaps.on_timeout(now, next < p.known, STATUS_EVERY * 2);
                p.gaps.take_request().then_some((id, (next, p.known)))
            })
            .collect();
        for (id, (from, until)) in asks {
            self.counters.nacks_sent += 1;
            self.send(Destination::Peer(id), NACK, |b| {
                b.extend_from_slice(&from.to_be_bytes());
                b.extend_from_slice(&until.to_be_bytes());
            });
        }
    }

    fn submit(&mut self, _now: Time, payload: Bytes, qos: Qos) -> Result<u64, SendError> {
        if !self.guarantees().qos.contains(qos) {
            return Err(SendError::Unsupported);
        }
        if !self.joined || self.leaving || self.left {
            return Err(SendError::NotMember);
        }
        if payload.len() + wire::HEADER_LEN + 8 > wire::MAX_DATAGRAM_LEN {
            return Err(SendError::TooLarge);
        }
        if !self.can_submit() {
            self.counters.backpressure_refusals += 1;
            return Err(SendError::WouldBlock);
        }
        let n = self.next_own;
        self.next_own += 1;
        self.counters.submitted += 1;
        self.data(n, &payload);
        self.multicast = self.next_own;
        // Our own copy is delivered at once, in order with our other messages.
        self.on_data(self.me, n, n, payload.clone());
        self.sent.push_back((n, payload));
        self.check_complete();
        Ok(n)
    }

    fn leave(&mut self, now: Time) {
        self.leaving = true;
        self.status_at = now;
        if self.coordinator && self.sent.is_empty() {
            // The coordinator hands over: the next member in rank announces the view.
            let mut m = self.view.members.clone();
            m.retain(|&x| x != self.me);
            let id = self.view.id + 1;
            if let Some(&next) = m.first() {
                self.send(Destination::Group, VIEW, |b| encode_view(b, id, next, &m));
            }
            self.left = true;
            self.events.push_back(Event::Left);
        }
    }

    fn poll_transmit(&mut self, _now: Time, buf: &mut Vec<u8>) -> Option<Transmit> {
        shell::transmit(&mut self.out, &mut self.counters, buf)
    }

    fn poll_event(&mut self) -> Option<Event> {
        let (e, resume) = self.events.pop();
        if resume {
            // Delivery paused on a full queue; there is room again.
            let ids: Vec<NodeId> = self.peers.keys().copied().collect();
            ids.into_iter().for_each(|id| self.deliver(id));
        }
        e
    }

    fn poll_timeout(&self) -> Option<Time> {
        shell::deadline(self.left, || Some(self.status_at))
    }

    fn node_id(&self) -> NodeId {
        self.me
    }

    fn guarantees(&self) -> Guarantees {
        Guarantees::reliable_fifo()
    }

    fn info(&self) -> GroupInfo {
        GroupInfo {
            view: self.view.id,
            coordinator: self.joined.then_some(self.view.coordinator),
            buffered_msgs: self.sent.len(),
            buffer_capacity_msgs: WINDOW,
            ..shell::info(
                self.me,
                self.view.members.clone(),
                self.guarantees(),
                self.max_datagram_bytes,
            )
        }
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn can_submit(&self) -> bool {
        self.sent.len() < WINDOW && !self.events.is_full() && self.out.has_room()
    }
}
