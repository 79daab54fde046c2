//! A toy engine that exercises the runtime without depending on a real protocol: a fixed
//! sequencer (the creator) orders data, joins and leaves; members send requests to it point to
//! point and it multicasts the ordered entries. No loss recovery (loopback rarely loses at test
//! volumes), which is fine for testing the plumbing: Group and Peer destinations, address
//! learning, timers, back-pressure, views, leave.

use bytes::Bytes;
use rmcast::{EngineFactory, EngineParams, EngineSettings, Role};
use rmcast_proto::wire::{self, EngineKind, Header};
use rmcast_proto::{
    Counters, Delivery, Destination, Engine, Event, GroupInfo, Guarantees, NodeId, Order, Qos,
    Reply, SendError, Time, Transmit, View,
};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

const JOIN: u8 = 1;
const REQ: u8 = 2;
const ORDER: u8 = 3;
const LEAVE: u8 = 4;
const REPLY: u8 = 5;

/// Own messages in flight at most: small, so that back-pressure is easy to reach.
pub const WINDOW: u64 = 32;
/// Events held for the driver at most before the toy refuses new messages, as a real engine
/// bounds its pending events.
pub const MAX_EVENTS: usize = 64;

/// Builds [`Toy`] engines.
pub struct ToyFactory;

/// What the toy promises: every member gets every message once, in one total order (a fixed
/// sequencer orders everything); no crash recovery; answers on a response channel.
pub fn guarantees() -> Guarantees {
    let mut g = Guarantees::reliable_fifo();
    g.order = Order::Total;
    g.qos.totally_ordered = true;
    g.replies = true;
    g.capabilities.replies = true;
    g
}

impl EngineFactory for ToyFactory {
    fn name(&self) -> &str {
        "toy"
    }
    fn guarantees(&self, _settings: &EngineSettings) -> Guarantees {
        guarantees()
    }
    fn build(&self, p: &EngineParams<'_>) -> Box<dyn Engine> {
        Box::new(Toy::new(p.role, p.group, p.me, p.now))
    }
}

enum Entry {
    Data {
        sender: NodeId,
        msg: u64,
        payload: Bytes,
    },
    View {
        id: u64,
        members: Vec<NodeId>,
    },
}

pub struct Toy {
    group: u32,
    me: NodeId,
    view: Option<View>,
    /// Coordinator: next seq to assign.
    next_assign: u64,
    /// Next seq to deliver; `None` until the first view (a joiner).
    next_deliver: Option<u64>,
    pending: BTreeMap<u64, Entry>,
    out: VecDeque<(Destination, Vec<u8>)>,
    events: VecDeque<Event>,
    next_msg: u64,
    outstanding: u64,
    join_retry: Option<Time>,
    left: bool,
    counters: Counters,
}

impl Toy {
    fn new(role: Role, group: u32, me: NodeId, now: Time) -> Toy {
        let mut t = Toy {
            group,
            me,
            view: None,
            next_assign: 1,
            next_deliver: None,
            pending: BTreeMap::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            next_msg: 1,
            outstanding: 0,
            join_retry: None,
            left: false,
            counters: Counters::default(),
        };
        match role {
            Role::Create => {
                let v = View {
                    id: 1,
                    seq: 0,
                    members: vec![me],
                    coordinator: me,
                    joined: Some(me),
                    left: None,
                };
                t.next_deliver = Some(1);
                t.view = Some(v.clone());
                t.counters.view_changes += 1;
                t.events.push_back(Event::View(v));
            }
            Role::Join | Role::Client => {
                t.push(Destination::Group, JOIN, &[]);
                t.join_retry = Some(now + Duration::from_millis(50));
            }
        }
        t
    }

    fn coordinator(&self) -> Option<NodeId> {
        self.view.as_ref().map(|v| v.coordinator)
    }

    fn is_coordinator(&self) -> bool {
        self.coordinator() == Some(self.me)
    }

    fn push(&mut self, dest: Destination, ptype: u8, body: &[u8]) {
        let mut buf = Vec::with_capacity(wire::HEADER_LEN + body.len());
        Header {
            engine: EngineKind::Ring,
            ptype,
            flags: 0,
            group: self.group,
            incarnation: 0,
            sender: self.me,
        }
        .encode(&mut buf);
        buf.extend_from_slice(body);
        self.out.push_back((dest, buf));
    }

    /// Coordinator: order an entry and multicast it (and take it locally).
    fn order(&mut self, entry: Entry) {
        let seq = self.next_assign;
        self.next_assign += 1;
        let mut body = seq.to_be_bytes().to_vec();
        match &entry {
            Entry::Data {
                sender,
                msg,
                payload,
            } => {
                body.push(0);
                body.extend_from_slice(&sender.0.to_be_bytes());
                body.extend_from_slice(&msg.to_be_bytes());
                body.extend_from_slice(payload);
            }
            Entry::View { id, members } => {
                body.push(1);
                body.extend_from_slice(&id.to_be_bytes());
                for m in members {
                    body.extend_from_slice(&m.0.to_be_bytes());
                }
            }
        }
        self.push(Destination::Group, ORDER, &body);
        self.take(seq, entry);
    }

    fn change_view(&mut self, members: Vec<NodeId>) {
        let id = self.view.as_ref().map_or(1, |v| v.id + 1);
        self.order(Entry::View { id, members });
    }

    /// An ordered entry arrived: deliver everything now in sequence.
    fn take(&mut self, seq: u64, entry: Entry) {
        if let (None, Entry::View { members, .. }) = (self.next_deliver, &entry) {
            if members.contains(&self.me) {
                // A joiner starts with the view that admits it.
                self.next_deliver = Some(seq);
                self.join_retry = None;
            }
        }
        let Some(next) = self.next_deliver else {
            return;
        };
        if seq < next {
            self.counters.duplicates += 1;
            return;
        }
        self.pending.insert(seq, entry);
        let mut next = next;
        while let Some(e) = self.pending.remove(&next) {
            match e {
                Entry::Data {
                    sender,
                    msg,
                    payload,
                } => {
                    let view = self.view.as_ref().map_or(0, |v| v.id);
                    self.counters.delivered += 1;
                    self.events.push_back(Event::Deliver(Delivery {
                        respond: false,
                        seq: next,
                        sender,
                        msg,
                        view,
                        payload,
                    }));
                    if sender == self.me {
                        self.outstanding -= 1;
                        self.events.push_back(Event::SendComplete { msg });
                    }
                }
                Entry::View { id, members } => {
                    if !members.contains(&self.me) {
                        self.left = true;
                        self.events.push_back(Event::Left);
                        self.pending.clear();
                        return;
                    }
                    let coordinator = members[0];
                    let v = View {
                        id,
                        seq: next,
                        members,
                        coordinator,
                        joined: None,
                        left: None,
                    };
                    self.view = Some(v.clone());
                    self.counters.view_changes += 1;
                    self.events.push_back(Event::View(v));
                }
            }
            next += 1;
        }
        self.next_deliver = Some(next);
    }
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

impl Engine for Toy {
    fn handle_datagram(&mut self, _now: Time, from: NodeId, datagram: &[u8]) {
        let Ok(p) = wire::decode(datagram) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        if p.header.group != self.group || p.header.engine != EngineKind::Ring {
            self.counters.foreign_dropped += 1;
            return;
        }
        if self.left || p.header.sender == self.me {
            return;
        }
        self.counters.datagrams_received += 1;
        let b = p.body;
        match p.header.ptype {
            JOIN if self.is_coordinator() => {
                let mut members = self.view.as_ref().unwrap().members.clone();
                if !members.contains(&from) {
                    members.push(from);
                    self.change_view(members);
                }
            }
            LEAVE if self.is_coordinator() => {
                let mut members = self.view.as_ref().unwrap().members.clone();
                if members.contains(&from) {
                    members.retain(|m| *m != from);
                    self.change_view(members);
                }
            }
            REQ if self.is_coordinator() => {
                if let Some(msg) = u64_at(b, 0) {
                    let payload = Bytes::copy_from_slice(&b[8..]);
                    self.order(Entry::Data {
                        sender: from,
                        msg,
                        payload,
                    });
                }
            }
            REPLY => {
                if let Some(request) = u64_at(b, 0) {
                    self.events.push_back(Event::Reply(Reply {
                        from,
                        request,
                        payload: Bytes::copy_from_slice(&b[8..]),
                    }));
                }
            }
            ORDER => {
                let (Some(seq), Some(&kind)) = (u64_at(b, 0), b.get(8)) else {
                    self.counters.malformed_dropped += 1;
                    return;
                };
                let entry = if kind == 0 {
                    let (Some(s), Some(msg)) = (u32_at(b, 9), u64_at(b, 13)) else {
                        return;
                    };
                    Entry::Data {
                        sender: NodeId(s),
                        msg,
                        payload: Bytes::copy_from_slice(&b[21..]),
                    }
                } else {
                    let Some(id) = u64_at(b, 9) else { return };
                    let members = b[17..]
                        .chunks_exact(4)
                        .map(|c| NodeId(u32::from_be_bytes(c.try_into().unwrap())))
                        .collect();
                    Entry::View { id, members }
                };
                self.take(seq, entry);
            }
            _ => {}
        }
    }

    fn handle_timeout(&mut self, now: Time) {
        if let Some(t) = self.join_retry {
            if now >= t {
                self.push(Destination::Group, JOIN, &[]);
                self.join_retry = Some(now + Duration::from_millis(50));
            }
        }
    }

    fn submit(&mut self, _now: Time, payload: Bytes, qos: Qos) -> Result<u64, SendError> {
        if qos == Qos::Unreliable {
            return Err(SendError::Unsupported);
        }
        if self.view.is_none() || self.left {
            return Err(SendError::NotMember);
        }
        if self.outstanding >= WINDOW || self.events.len() >= MAX_EVENTS {
            self.counters.backpressure_refusals += 1;
            return Err(SendError::WouldBlock);
        }
        let msg = self.next_msg;
        self.next_msg += 1;
        self.outstanding += 1;
        self.counters.submitted += 1;
        if self.is_coordinator() {
            self.order(Entry::Data {
                sender: self.me,
                msg,
                payload,
            });
        } else {
            let mut body = msg.to_be_bytes().to_vec();
            body.extend_from_slice(&payload);
            let c = self.coordinator().unwrap();
            self.push(Destination::Peer(c), REQ, &body);
        }
        Ok(msg)
    }

    fn reply(
        &mut self,
        _now: Time,
        to: NodeId,
        request: u64,
        payload: Bytes,
    ) -> Result<(), SendError> {
        if self.view.is_none() || self.left {
            return Err(SendError::NotMember);
        }
        let mut body = request.to_be_bytes().to_vec();
        body.extend_from_slice(&payload);
        self.push(Destination::Peer(to), REPLY, &body);
        Ok(())
    }

    fn leave(&mut self, _now: Time) {
        if self.is_coordinator() || self.view.is_none() {
            self.left = true;
            self.events.push_back(Event::Left);
        } else {
            let c = self.coordinator().unwrap();
            self.push(Destination::Peer(c), LEAVE, &[]);
        }
    }

    fn poll_transmit(&mut self, _now: Time, buf: &mut Vec<u8>) -> Option<Transmit> {
        let (dest, data) = self.out.pop_front()?;
        buf.clear();
        buf.extend_from_slice(&data);
        self.counters.datagrams_sent += 1;
        self.counters.bytes_sent += data.len() as u64;
        Some(Transmit::single(dest))
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.join_retry
    }

    fn node_id(&self) -> NodeId {
        self.me
    }

    fn info(&self) -> GroupInfo {
        GroupInfo {
            me: self.me,
            view: self.view.as_ref().map_or(0, |v| v.id),
            members: self
                .view
                .as_ref()
                .map_or_else(Vec::new, |v| v.members.clone()),
            coordinator: self.coordinator(),
            rank: None,
            recovering: false,
            incarnation: 0,
            guarantees: guarantees(),
            buffered_msgs: self.pending.len(),
            buffer_capacity_msgs: 0,
            max_datagram_bytes: 0,
        }
    }

    fn guarantees(&self) -> Guarantees {
        guarantees()
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn can_submit(&self) -> bool {
        self.view.is_some()
            && !self.left
            && self.outstanding < WINDOW
            && self.events.len() < MAX_EVENTS
    }
}
