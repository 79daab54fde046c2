//! One in-memory test network for the engines' unit tests (the simulator, `rmcast-sim`, is
//! where faults are swept over seeds; this is the small deterministic network a unit test
//! drives step by step and inspects).
//!
//! Nodes are engines (`Net<dyn Engine>` for those a factory builds, `Net<Sequencer>` and the
//! like where a test reaches into the concrete engine). A datagram becomes one copy per
//! receiver, each arriving `latency × (1 + hops)` after it was sent (zero by default: an
//! instant network), copies in the order they were sent. At each instant the network hands
//! every due copy to its receiver, then fires every due timer, and polls each node it touched
//! (its datagrams, its events) at once, until nothing more is due; then it moves to the next
//! instant: the next arrival or timer, or the next tick where a test asks for a clock that
//! ticks. The hooks are the ones the engines' tests need: a drop rule per copy, hop counts
//! with the TTL a datagram arrives with, crashed (`down`), busy (`paused`) and stopped
//! (`stopped`: SIGSTOP, its copies kept for [`Net::wake`]) nodes, a crash
//! instead of a given send, the log of every datagram sent, and an [`Observer`] for what a
//! test watches beside the events.

use crate::engine::{Destination, Engine, Event, Time};
use crate::wire;
use std::collections::BTreeMap;
use std::time::Duration;

/// One copy of a datagram on its way from one node to another, as a drop rule sees it.
pub struct Copy<'a> {
    /// The datagram's number, counted from 0 over the run (all copies of a multicast share it).
    pub index: u64,
    /// When it was sent.
    pub at: Time,
    /// Index of the sending node.
    pub from: usize,
    /// Index of the receiving node.
    pub to: usize,
    /// Packet type, from the header.
    pub ptype: u8,
    /// Sent to the group (or a scope) rather than to one member.
    pub multicast: bool,
    /// The packet's body (after the header).
    pub body: &'a [u8],
}

/// Whether to drop a copy, decided when it is sent.
pub type DropRule = Box<dyn FnMut(&Copy<'_>) -> bool>;

/// A datagram a node sent: one entry for all the copies of a multicast, dropped or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// When it was sent.
    pub at: Time,
    /// Index of the sending node.
    pub from: usize,
    /// Where the engine sent it.
    pub destination: Destination,
    /// Packet type, from the header.
    pub ptype: u8,
}

/// What a test watches beside the events the network collects (`()` watches nothing).
pub trait Observer<E: ?Sized> {
    /// A copy reaches its receiver (which handles it right after).
    fn arrived(&mut self, copy: &Copy<'_>) {
        let _ = copy;
    }

    /// Node `i` was polled; `events` are the ones just taken from it.
    fn polled(&mut self, i: usize, node: &mut E, events: &[Event]) {
        let _ = (i, node, events);
    }
}

impl<E: ?Sized> Observer<E> for () {}

/// A copy in flight.
struct Flight {
    index: u64,
    sent: Time,
    from: usize,
    to: usize,
    multicast: bool,
    /// The TTL it arrives with, where the network has hop counts.
    ttl: Option<u8>,
    bytes: Vec<u8>,
}

/// The test network: nodes, the clock, copies in flight, and what the nodes gave.
pub struct Net<E: ?Sized, X = ()> {
    /// The nodes, by index (added with [`Net::add`]).
    pub nodes: Vec<Box<E>>,
    /// Every event each node gave, in order.
    pub events: Vec<Vec<Event>>,
    /// When each of those events was taken.
    pub taken_at: Vec<Vec<Time>>,
    /// Crashed or cut off: neither sends, receives nor fires timers (copies to it are lost).
    pub down: Vec<bool>,
    /// Busy application: the engine runs, but nobody takes its events.
    pub paused: Vec<bool>,
    /// Stopped process (SIGSTOP): no timers, and copies to it wait, unbounded, until
    /// [`Net::wake`] hands them over.
    pub stopped: Vec<bool>,
    /// The virtual clock.
    pub now: Time,
    /// A clock that ticks: instants are only every `tick` (None: the next arrival or timer).
    pub tick: Option<Duration>,
    /// Time a copy takes per link (each router on the way adds as much again).
    pub latency: Duration,
    /// `hops[a][b]`: routers between a and b. With hop counts a datagram arrives with its TTL
    /// (64, or the scope's) less the hops, and not at all beyond its scope.
    pub hops: Option<Vec<Vec<u8>>>,
    /// Which copies to drop.
    pub drop: Option<DropRule>,
    /// Crash node `.0` instead of letting it send its first datagram of type `.1`.
    pub crash_on_send: Option<(usize, u8)>,
    /// Every datagram sent (a test may clear it).
    pub sent: Vec<Sent>,
    /// How many datagrams were sent over the run (the next one's [`Copy::index`]).
    pub datagrams: u64,
    /// What the test watches.
    pub x: X,
    /// (arrival, order) -> copy.
    flight: BTreeMap<(Time, u64), Flight>,
    /// Per node: copies that reached it while it was stopped, in arrival order.
    backlog: Vec<Vec<Flight>>,
    order: u64,
}

impl<E: ?Sized + Engine, X: Observer<E>> Net<E, X> {
    /// An empty, instant, lossless network at time zero.
    pub fn with(x: X) -> Self {
        Net {
            nodes: Vec::new(),
            events: Vec::new(),
            taken_at: Vec::new(),
            down: Vec::new(),
            paused: Vec::new(),
            stopped: Vec::new(),
            now: Time::ZERO,
            tick: None,
            latency: Duration::ZERO,
            hops: None,
            drop: None,
            crash_on_send: None,
            sent: Vec::new(),
            datagrams: 0,
            x,
            flight: BTreeMap::new(),
            backlog: Vec::new(),
            order: 0,
        }
    }

    /// Adds a node; returns its index. It is polled at the next step.
    pub fn add(&mut self, node: Box<E>) -> usize {
        self.nodes.push(node);
        self.events.push(Vec::new());
        self.taken_at.push(Vec::new());
        self.down.push(false);
        self.paused.push(false);
        self.stopped.push(false);
        self.backlog.push(Vec::new());
        self.nodes.len() - 1
    }

    /// Copies in flight.
    pub fn in_flight(&self) -> usize {
        self.flight.len()
    }

    /// Runs for `d`.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        self.run_until(end);
    }

    /// Runs until `end` (what is due at `end` included).
    pub fn run_until(&mut self, end: Time) {
        self.run_until_with(end, |_| {});
    }

    /// Runs until `end`, calling `each` at every instant before the network steps.
    pub fn run_until_with(&mut self, end: Time, mut each: impl FnMut(&mut Self)) {
        loop {
            each(self);
            self.flush();
            if self.now >= end {
                return;
            }
            let next = match self.tick {
                Some(t) => self.now + t,
                None => self.next_due().unwrap_or(end),
            };
            self.now = next.min(end).max(self.now);
        }
    }

    /// Polls every node, then hands over every copy and fires every timer due now, until
    /// nothing more is (the clock stays).
    pub fn flush(&mut self) {
        for i in 0..self.nodes.len() {
            self.poll(i);
        }
        for _ in 0..10_000 {
            let mut acted = false;
            for _ in 0..1_000_000 {
                let Some(entry) = self.flight.first_entry() else {
                    break;
                };
                if entry.key().0 > self.now {
                    break;
                }
                let f = entry.remove();
                acted = true;
                self.hand_over(f);
            }
            for i in 0..self.nodes.len() {
                let running = !self.down[i] && !self.stopped[i];
                if running && self.nodes[i].poll_timeout().is_some_and(|t| t <= self.now) {
                    self.nodes[i].handle_timeout(self.now);
                    self.poll(i);
                    acted = true;
                }
            }
            if !acted {
                return;
            }
        }
        panic!("network did not quiesce at {:?}", self.now);
    }

    /// The next arrival or timer.
    fn next_due(&self) -> Option<Time> {
        let timers = (self.nodes.iter().enumerate())
            .filter(|&(i, _)| !self.down[i] && !self.stopped[i])
            .filter_map(|(_, n)| n.poll_timeout());
        let arrival = self.flight.keys().next().map(|k| k.0);
        timers.chain(arrival).min()
    }

    fn hand_over(&mut self, f: Flight) {
        self.hand_over_at(f, self.now);
    }

    /// Hands copy `f` to its receiver, whose clock reads `clock`.
    fn hand_over_at(&mut self, f: Flight, clock: Time) {
        if self.down[f.to] {
            return;
        }
        if self.stopped[f.to] {
            self.backlog[f.to].push(f);
            return;
        }
        let pkt = wire::decode(&f.bytes).expect("engines send valid datagrams");
        self.x.arrived(&Copy {
            index: f.index,
            at: f.sent,
            from: f.from,
            to: f.to,
            ptype: pkt.header.ptype,
            multicast: f.multicast,
            body: pkt.body,
        });
        let from = self.nodes[f.from].node_id();
        let node = &mut self.nodes[f.to];
        match f.ttl {
            Some(ttl) => node.handle_datagram_with_ttl(clock, from, &f.bytes, Some(ttl)),
            None => node.handle_datagram(clock, from, &f.bytes),
        }
        self.poll(f.to);
    }

    /// Continues stopped node `i` (SIGCONT): it reads what waited for it as the runtime reads
    /// its sockets, every unicast copy before the first multicast one, each in arrival order,
    /// with its clock reading `clock` (`self.now`, or a time before: a process stopped after
    /// its I/O loop read the clock); its timers run from the next instant on.
    pub fn wake(&mut self, i: usize, clock: Time) {
        self.stopped[i] = false;
        let mut backlog = std::mem::take(&mut self.backlog[i]);
        backlog.sort_by_key(|f| f.multicast);
        for f in backlog {
            self.hand_over_at(f, clock);
        }
    }

    /// Takes node `i`'s datagrams (on their way) and events until it has none, now.
    pub fn poll(&mut self, i: usize) {
        let mut buf = Vec::new();
        for _ in 0..10_000 {
            if self.down[i] {
                return;
            }
            let mut any = false;
            for _ in 0..100_000 {
                let Some(t) = self.nodes[i].poll_transmit(self.now, &mut buf) else {
                    break;
                };
                any = true;
                if !self.put_on_wire(i, t.destination, &buf) {
                    return;
                }
            }
            let mut new = Vec::new();
            if !self.paused[i] {
                while let Some(e) = self.nodes[i].poll_event() {
                    new.push(e);
                }
            }
            self.x.polled(i, &mut *self.nodes[i], &new);
            any |= !new.is_empty();
            self.taken_at[i].extend(new.iter().map(|_| self.now));
            self.events[i].extend(new);
            if !any {
                return;
            }
        }
        panic!("node {i} never stops sending");
    }

    /// Puts the copies of one datagram on their way; false if the sender crashed instead.
    fn put_on_wire(&mut self, i: usize, destination: Destination, buf: &[u8]) -> bool {
        let pkt = wire::decode(buf).expect("engines send valid datagrams");
        let ptype = pkt.header.ptype;
        if self.crash_on_send == Some((i, ptype)) {
            self.crash_on_send = None;
            self.down[i] = true;
            return false;
        }
        let index = self.datagrams;
        self.datagrams += 1;
        self.sent.push(Sent {
            at: self.now,
            from: i,
            destination,
            ptype,
        });
        let (targets, ttl0): (Vec<usize>, u8) = match destination {
            Destination::Peer(id) => {
                let to = self.nodes.iter().position(|n| n.node_id() == id);
                (to.into_iter().collect(), 64)
            }
            Destination::Group => ((0..self.nodes.len()).filter(|&j| j != i).collect(), 64),
            Destination::Scoped { ttl } => {
                ((0..self.nodes.len()).filter(|&j| j != i).collect(), ttl)
            }
        };
        for to in targets {
            let hops = self.hops.as_ref().map(|h| h[i][to]);
            if hops.is_some_and(|h| h >= ttl0) || self.down[to] {
                continue;
            }
            let copy = Copy {
                index,
                at: self.now,
                from: i,
                to,
                ptype,
                multicast: !matches!(destination, Destination::Peer(_)),
                body: pkt.body,
            };
            if self.drop.as_mut().is_some_and(|d| d(&copy)) {
                continue;
            }
            self.order += 1;
            let at = self.now + self.latency * (1 + u32::from(hops.unwrap_or(0)));
            let flight = Flight {
                index,
                sent: self.now,
                from: i,
                to,
                multicast: copy.multicast,
                ttl: hops.map(|h| ttl0 - h),
                bytes: buf.to_vec(),
            };
            self.flight.insert((at, self.order), flight);
        }
        true
    }
}
