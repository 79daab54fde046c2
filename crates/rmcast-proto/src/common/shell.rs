//! The shell every engine runs in: what happens to a datagram before the protocol sees it, and
//! to events and datagrams after the protocol made them (quinn-proto's `Endpoint`, which decodes
//! a header once and routes the packet, is the model; smoltcp's bounded packet buffers the model
//! of the queues).
//!
//! - [`receive`] decodes the fixed header once and hands the decoded [`Packet`] to the engine
//!   ([`Shelled::on_packet`]) only if it passes one filter, the same for every engine and
//!   counted the same way (see [`Counters`] for what each counter means): it must decode,
//!   be of the engine's kind and group, not be this member's own datagram looped back, reach an
//!   engine that is still running, and be of the engine's incarnation (or of a packet type the
//!   engine takes from any incarnation, [`Shelled::across_incarnations`], or one the engine
//!   takes after looking at it, [`Shelled::other_incarnation`]).
//! - [`EventQueue`] bounds the events waiting for the application with one pause/resume
//!   policy: an engine delivers only while [`EventQueue::room`] says so, and the pop that
//!   drains the queue to half its capacity tells the engine to resume ([`EventQueue::pop`]).
//!   Deliveries are never dropped: they wait in the engine's own buffers.
//! - [`OutQueue`] bounds the datagrams waiting for the driver: a push to a full queue is refused
//!   and counted ([`Counters::out_refused`]), never dropped silently; the protocol repairs it as
//!   it repairs a datagram the network lost. Engines check [`OutQueue::has_room`] before they
//!   take new data out of their send windows, so that first transmissions wait instead.
//! - [`transmit`] pops the next datagram for the driver and counts it; [`info`] fills the parts of
//!   [`GroupInfo`] every engine fills the same way.

use super::parts::{PartsIn, PTYPE_PARTS};
use crate::engine::{Counters, Destination, Event, GroupInfo, NodeId, Time, Transmit};
use crate::guarantees::Guarantees;
use crate::wire::{self, EngineKind, Header, Packet};
use std::collections::VecDeque;

/// What the filter of [`receive`] needs to know of an engine, and its counters.
#[derive(Debug)]
pub struct Gate<'a> {
    /// The group id its datagrams carry.
    pub group: u32,
    /// This member.
    pub me: NodeId,
    /// Whether the engine stopped (left its group, or was left out of it): datagrams are
    /// dropped ([`Counters::late_dropped`]).
    pub stopped: bool,
    /// The incarnation this member is in, or `None` when the engine does not use the header's
    /// incarnation field to tell groups apart (the ring numbers reformations in it).
    pub incarnation: Option<u32>,
    /// The engine's counters, which the shell adds to.
    pub counters: &'a mut Counters,
}

impl<'a> Gate<'a> {
    /// An engine of `group` at `me`, of one incarnation (`Some`) or not filtering on it.
    pub fn new(
        group: u32,
        me: NodeId,
        stopped: bool,
        incarnation: Option<u32>,
        counters: &'a mut Counters,
    ) -> Gate<'a> {
        Gate {
            group,
            me,
            stopped,
            incarnation,
            counters,
        }
    }
}

/// What an engine tells the shell so that [`receive`] can filter and route for it.
pub trait Shelled {
    /// The engine kind its datagrams carry.
    const KIND: EngineKind;

    /// Its group, identity and state as the filter sees them, and its counters.
    fn gate(&mut self) -> Gate<'_>;

    /// A datagram arrived at `now` (whatever becomes of it): engines that keep a clock move it.
    fn clock(&mut self, now: Time) {
        let _ = now;
    }

    /// Packet types taken from any incarnation: they name the incarnation they concern
    /// themselves (the sequencer's BC_RESULT reaches members of older ones).
    fn across_incarnations(&self, ptype: u8) -> bool {
        let _ = ptype;
        false
    }

    /// A datagram of another incarnation, not of a type taken from any: whether to take it.
    /// The engine may learn from the header (a joiner follows the newest incarnation it hears
    /// of; a member asks what happened). Not taken: [`Counters::foreign_dropped`].
    fn other_incarnation(&mut self, header: &Header) -> bool {
        let _ = header;
        false
    }

    /// Where the engine puts datagrams together that came in parts ([`super::parts`]); `None`:
    /// the engine never receives parts, and one is handed over like any other packet.
    fn parts_in(&mut self) -> Option<&mut PartsIn> {
        None
    }

    /// A datagram that passed the filter. `datagram` is the whole datagram, for engines that
    /// keep parts of it ([`body_range`]); `ttl` is the IP time-to-live it arrived with, where
    /// the driver knows it.
    fn on_packet(
        &mut self,
        now: Time,
        from: NodeId,
        packet: Packet<'_>,
        datagram: &[u8],
        ttl: Option<u8>,
    );
}

/// What [`filter`] decided about a datagram.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Hand it to the engine.
    Take,
    /// The header did not decode.
    Malformed,
    /// Another engine kind, group or incarnation.
    Foreign,
    /// This member's own datagram, looped back by the network.
    Own,
    /// The engine stopped.
    Late,
}

/// The filter of [`receive`] on a decoded header, without counting.
pub fn filter<E: Shelled + ?Sized>(e: &mut E, h: &Header) -> Verdict {
    let g = e.gate();
    let (group, me, stopped, incarnation) = (g.group, g.me, g.stopped, g.incarnation);
    if h.engine != E::KIND || h.group != group {
        return Verdict::Foreign;
    }
    if h.sender == me {
        return Verdict::Own;
    }
    if stopped {
        return Verdict::Late;
    }
    match incarnation {
        Some(inc)
            if h.incarnation != inc
                && !e.across_incarnations(h.ptype)
                && !e.other_incarnation(h) =>
        {
            Verdict::Foreign
        }
        _ => Verdict::Take,
    }
}

/// A received datagram: decode the header once, filter, count, and hand the packet to the
/// engine. `from` is the driver's idea of the sender (the source address it mapped to a node);
/// the engine gets it next to the header's sender, which it trusts (the header may be sealed).
pub fn receive<E: Shelled + ?Sized>(
    e: &mut E,
    now: Time,
    from: NodeId,
    datagram: &[u8],
    ttl: Option<u8>,
) {
    e.clock(now);
    let verdict = match wire::decode(datagram) {
        // A part is filtered as the packet it is part of would be (the sequencer's BC_RESULT
        // crosses incarnations, in parts too).
        Ok(p) => match filter(e, &as_whole(&p)) {
            Verdict::Take => {
                let g = e.gate();
                debug_assert!(
                    p.header.engine == E::KIND && p.header.group == g.group,
                    "the shell hands an engine only packets of its kind and group"
                );
                debug_assert_ne!(p.header.sender, g.me, "own datagrams stop here");
                debug_assert!(!g.stopped, "a stopped engine takes no datagram");
                g.counters.datagrams_received += 1;
                if p.header.ptype == PTYPE_PARTS {
                    if let Some(parts) = e.parts_in() {
                        match parts.push(&p.header, p.body) {
                            Ok(None) => {}
                            Ok(Some(whole)) => match wire::decode(&whole) {
                                Ok(w) => e.on_packet(now, from, w, &whole, ttl),
                                Err(_) => e.gate().counters.malformed_dropped += 1,
                            },
                            Err(_) => e.gate().counters.malformed_dropped += 1,
                        }
                        return;
                    }
                }
                e.on_packet(now, from, p, datagram, ttl);
                return;
            }
            v => v,
        },
        Err(_) => Verdict::Malformed,
    };
    let c = e.gate().counters;
    match verdict {
        Verdict::Malformed => c.malformed_dropped += 1,
        Verdict::Foreign => c.foreign_dropped += 1,
        Verdict::Own => c.own_dropped += 1,
        Verdict::Late => c.late_dropped += 1,
        Verdict::Take => unreachable!("taken above"),
    }
}

/// The header the filter judges: a part's header names the packet type of its whole.
fn as_whole(p: &Packet<'_>) -> Header {
    match (p.header.ptype, p.body.get(8)) {
        (PTYPE_PARTS, Some(&inner)) if inner != PTYPE_PARTS => Header {
            ptype: inner,
            ..p.header
        },
        _ => p.header,
    }
}

/// Where `packet`'s body lies in `datagram` (the datagram it was decoded from): engines that keep
/// slices of one shared copy of the datagram cut the body out of the copy.
pub fn body_range(packet: &Packet<'_>, datagram: &[u8]) -> std::ops::Range<usize> {
    let start = (packet.body.as_ptr() as usize).wrapping_sub(datagram.as_ptr() as usize);
    debug_assert!(
        start + packet.body.len() <= datagram.len(),
        "the body is a slice of the datagram"
    );
    start..start + packet.body.len()
}

/// Events waiting for the application, bounded (see the module docs for the policy).
///
/// Invariant: at most `capacity` events come from gated pushes (deliveries and what answers
/// data, pushed only while [`EventQueue::room`] holds); the events an engine pushes whatever the
/// room (views, leaves, recovery, locks: a few per protocol step, bounded by the group and its
/// windows) may take the queue past it, up to [`EventQueue::hard_limit`].
#[derive(Clone, Debug)]
pub struct EventQueue {
    q: VecDeque<Event>,
    capacity: usize,
    /// An engine found no room and paused delivery.
    paused: bool,
    /// Whether every push that can come in numbers is gated ([`EventQueue::hard_limit`] then
    /// holds and is asserted).
    gated: bool,
}

impl EventQueue {
    /// A queue that takes gated events while it holds fewer than `capacity`.
    pub fn new(capacity: usize) -> EventQueue {
        assert!(capacity > 0, "an event queue needs room for one event");
        EventQueue {
            q: VecDeque::new(),
            capacity,
            paused: false,
            gated: true,
        }
    }

    /// A queue of an engine that still pushes some deliveries whatever the room (the
    /// transactions engine delivers a transaction the moment it is released): `capacity` gates
    /// what the engine gates, and [`EventQueue::hard_limit`] is not asserted.
    pub fn ungated(capacity: usize) -> EventQueue {
        EventQueue {
            gated: false,
            ..EventQueue::new(capacity)
        }
    }

    /// The capacity gated pushes respect.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The most events the queue ever holds: the capacity and as much again for events pushed
    /// whatever the room.
    pub fn hard_limit(&self) -> usize {
        2 * self.capacity + 64
    }

    /// Whether a gated event (a delivery) may be pushed now. `false` pauses delivery until
    /// [`EventQueue::pop`] says to resume.
    pub fn room(&mut self) -> bool {
        let room = self.q.len() < self.capacity;
        self.paused |= !room;
        room
    }

    /// Whether the queue holds its capacity or more (for `can_submit`: a sender waits too).
    pub fn is_full(&self) -> bool {
        self.q.len() >= self.capacity
    }

    /// Queue an event.
    pub fn push_back(&mut self, e: Event) {
        self.q.push_back(e);
        // A queue that filled up has paused whoever delivers through it, whether or not it
        // asked [`EventQueue::room`] first.
        self.paused |= self.q.len() >= self.capacity;
        debug_assert!(
            !self.gated || self.q.len() <= self.hard_limit(),
            "event queue past its hard limit ({} events): a push is not gated",
            self.q.len()
        );
    }

    /// Take the next event, and whether delivery paused on a full queue may resume now (the
    /// queue drained to half its capacity): the engine then delivers what waits.
    pub fn pop(&mut self) -> (Option<Event>, bool) {
        let e = self.q.pop_front();
        let resume = self.paused && self.q.len() <= self.capacity / 2;
        if resume {
            self.paused = false;
        }
        (e, resume)
    }

    /// Take the next event, without the resume signal (engines without paused delivery).
    pub fn pop_front(&mut self) -> Option<Event> {
        self.pop().0
    }

    /// Events queued.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Whether none is queued.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Move every event of `other` behind those of `self` (a fresh state taking over the events
    /// not yet taken).
    pub fn append(&mut self, other: &mut EventQueue) {
        self.q.append(&mut other.q);
        self.paused |= other.paused;
    }

    /// The queued events, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Event> {
        self.q.iter()
    }
}

/// Datagrams waiting for the driver, bounded (see the module docs for the policy).
#[derive(Clone, Debug)]
pub struct OutQueue<T = Vec<u8>> {
    q: VecDeque<(Destination, T)>,
    capacity: usize,
    /// Pushes refused on a full queue (copied into [`Counters::out_refused`] by [`transmit`]).
    refused: u64,
}

impl<T> OutQueue<T> {
    /// A queue of at most `capacity` datagrams.
    pub fn new(capacity: usize) -> OutQueue<T> {
        assert!(capacity > 0, "an out queue needs room for one datagram");
        OutQueue {
            q: VecDeque::new(),
            capacity,
            refused: 0,
        }
    }

    /// Queue a datagram for `to`; refused (and counted) when the queue is full. Returns whether
    /// it was queued.
    pub fn push_back(&mut self, item: (Destination, T)) -> bool {
        if self.q.len() >= self.capacity {
            self.refused += 1;
            return false;
        }
        self.q.push_back(item);
        debug_assert!(self.q.len() <= self.capacity);
        true
    }

    /// Put copies of a datagram just taken back in front (unicast copies of a multicast for
    /// members that cannot receive it): at most one per member, so the queue exceeds its
    /// capacity by no more than the group's size.
    pub fn push_front(&mut self, item: (Destination, T)) {
        self.q.push_front(item);
    }

    /// Take the oldest datagram.
    pub fn pop_front(&mut self) -> Option<(Destination, T)> {
        self.q.pop_front()
    }

    /// Whether a push would be taken.
    pub fn has_room(&self) -> bool {
        self.q.len() < self.capacity
    }

    /// Datagrams queued.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Whether none is queued.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// The capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Pushes refused so far.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Drop every queued datagram (a member that starts over).
    pub fn clear(&mut self) {
        self.q.clear();
    }
}

/// Hand the next datagram of `out` to the driver: `buf` holds it, its destination is returned,
/// and it is counted ([`Counters::datagrams_sent`], [`Counters::bytes_sent`];
/// [`Counters::out_refused`] is brought up to date here).
pub fn transmit<T: Into<Vec<u8>>>(
    out: &mut OutQueue<T>,
    counters: &mut Counters,
    buf: &mut Vec<u8>,
) -> Option<Transmit> {
    counters.out_refused = out.refused;
    let (to, data) = out.pop_front()?;
    *buf = data.into();
    count_sent(counters, buf.len());
    Some(Transmit::single(to))
}

/// Count one datagram of `len` bytes handed to the driver.
pub fn count_sent(counters: &mut Counters, len: usize) {
    counters.datagrams_sent += 1;
    counters.bytes_sent += len as u64;
}

/// The [`GroupInfo`] parts every engine fills the same way: this member, what it promises, its
/// datagram size, and its rank in `members`. The rest is the engine's own view of the group.
pub fn info(
    me: NodeId,
    members: Vec<NodeId>,
    guarantees: Guarantees,
    max_datagram_bytes: usize,
) -> GroupInfo {
    GroupInfo {
        me,
        view: 0,
        rank: members.iter().position(|m| *m == me),
        members,
        coordinator: None,
        recovering: false,
        incarnation: 0,
        guarantees,
        buffered_msgs: 0,
        buffer_capacity_msgs: 0,
        max_datagram_bytes,
    }
}

/// The next deadline of an engine: none once it stopped, else the earliest of its timers.
pub fn deadline(stopped: bool, earliest: impl FnOnce() -> Option<Time>) -> Option<Time> {
    if stopped {
        None
    } else {
        earliest()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Event;

    #[test]
    fn event_queue_pauses_and_resumes_at_half() {
        let mut q = EventQueue::new(4);
        while q.room() {
            q.push_back(Event::Left);
        }
        assert_eq!(q.len(), 4);
        assert!(q.is_full());
        // Past the capacity only with ungated pushes.
        q.push_back(Event::Left);
        assert_eq!(q.pop(), (Some(Event::Left), false));
        assert_eq!(q.pop(), (Some(Event::Left), false));
        assert_eq!(q.pop(), (Some(Event::Left), true), "down to half: resume");
        assert_eq!(q.pop(), (Some(Event::Left), false), "resumed once");
    }

    /// One rule in every engine: garbage is malformed, another group or engine kind is
    /// foreign, a looped-back own datagram is own; none of them reaches the protocol.
    #[test]
    fn every_engine_filters_and_counts_the_same() {
        use crate::catalog::engines;
        use crate::registry::{EngineParams, EngineSettings, Role};
        let kind = |name: &str| match name {
            "sequencer" => EngineKind::Sequencer,
            "ring" => EngineKind::Ring,
            "gossip" => EngineKind::Gossip,
            "tree" => EngineKind::Tree,
            "txn" => EngineKind::Txn,
            _ => EngineKind::Test,
        };
        let datagram = |engine, group, sender| {
            let mut b = Vec::new();
            let h = Header {
                engine,
                ptype: 1,
                flags: 0,
                group,
                incarnation: 0,
                sender,
            };
            h.encode(&mut b);
            b
        };
        let settings = EngineSettings::default();
        for f in engines() {
            let k = kind(f.name());
            let other = if k == EngineKind::Ring {
                EngineKind::Gossip
            } else {
                EngineKind::Ring
            };
            let me = NodeId(1);
            let mut e = f.build(&EngineParams {
                role: Role::Create,
                group: 7,
                me,
                max_datagram_bytes: 1400,
                now: Time::ZERO,
                seed: 1,
                settings: &settings,
            });
            let before = e.counters().clone();
            let now = Time::ZERO;
            e.handle_datagram(now, NodeId(2), b"garbage");
            e.handle_datagram(now, NodeId(2), &datagram(k, 8, NodeId(2)));
            e.handle_datagram(now, NodeId(2), &datagram(other, 7, NodeId(2)));
            e.handle_datagram(now, me, &datagram(k, 7, me));
            let c = e.counters();
            let name = f.name();
            assert_eq!(c.malformed_dropped, before.malformed_dropped + 1, "{name}");
            assert_eq!(c.foreign_dropped, before.foreign_dropped + 2, "{name}");
            assert_eq!(c.own_dropped, before.own_dropped + 1, "{name}");
            assert_eq!(c.datagrams_received, before.datagrams_received, "{name}");
        }
    }

    #[test]
    fn out_queue_refuses_and_counts_when_full() {
        let mut q: OutQueue = OutQueue::new(2);
        assert!(q.push_back((Destination::Group, vec![1])));
        assert!(q.push_back((Destination::Group, vec![2])));
        assert!(!q.push_back((Destination::Group, vec![3])));
        assert_eq!(q.len(), 2);
        let mut c = Counters::default();
        let mut buf = Vec::new();
        assert!(transmit(&mut q, &mut c, &mut buf).is_some());
        assert_eq!(buf, vec![1]);
        assert_eq!((c.datagrams_sent, c.bytes_sent, c.out_refused), (1, 1, 1));
    }
}
