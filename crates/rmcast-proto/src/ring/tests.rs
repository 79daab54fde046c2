//! A loss-free ring of three on a tiny instant network: one total order, a quiescent ring
//! that stops passing the token, and sends that push back instead of dropping.

use super::RingFactory;
use crate::engine::{Destination, Engine, Event, NodeId, Qos, SendError, Time};
use crate::registry::{EngineFactory, EngineParams, EngineSettings, Role};
use bytes::Bytes;
use std::time::Duration;

struct Net {
    nodes: Vec<Box<dyn Engine>>,
    events: Vec<Vec<Event>>,
    now: Time,
    datagrams: u64,
}

impl Net {
    fn new(n: u32) -> Net {
        let settings = EngineSettings::default();
        let build = |i: u32, role| {
            RingFactory.build(&EngineParams {
                role,
                group: 7,
                me: NodeId(i),
                max_datagram_bytes: 1400,
                now: Time::ZERO,
                seed: i as u64,
                settings: &settings,
            })
        };
        let mut net = Net {
            nodes: vec![build(0, Role::Create)],
            events: vec![vec![]],
            now: Time::ZERO,
            datagrams: 0,
        };
        for i in 1..n {
            net.nodes.push(build(i, Role::Join));
            net.events.push(vec![]);
            net.nodes[i as usize].handle_timeout(net.now);
            net.run_for(Duration::from_millis(200));
        }
        net
    }

    /// Moves every datagram at once (no loss) and fires timers, for `d`.
    fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            let mut moved = false;
            for i in 0..self.nodes.len() {
                let mut buf = Vec::new();
                while let Some(t) = self.nodes[i].poll_transmit(self.now, &mut buf) {
                    moved = true;
                    self.datagrams += 1;
                    let from = self.nodes[i].node_id();
                    for j in 0..self.nodes.len() {
                        let to = self.nodes[j].node_id();
                        let hit = match t.destination {
                            Destination::Peer(p) => p == to,
                            _ => j != i,
                        };
                        if hit {
                            self.nodes[j].handle_datagram(self.now, from, &buf);
                        }
                    }
                }
                while let Some(e) = self.nodes[i].poll_event() {
                    self.events[i].push(e);
                }
            }
            if moved {
                continue;
            }
            let next = self.nodes.iter().filter_map(|n| n.poll_timeout()).min();
            match next {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    for n in &mut self.nodes {
                        if n.poll_timeout().is_some_and(|x| x <= self.now) {
                            n.handle_timeout(self.now);
                        }
                    }
                }
                _ => break,
            }
        }
        self.now = self.now.max(end);
    }

    fn delivered(&self, i: usize) -> Vec<(u64, NodeId, u64)> {
        (self.events[i].iter())
            .filter_map(|e| match e {
                Event::Deliver(d) => Some((d.seq, d.sender, d.msg)),
                _ => None,
            })
            .collect()
    }
}

#[test]
fn three_members_one_order_then_quiescent() {
    let mut net = Net::new(3);
    for e in &net.events {
        assert!(matches!(e.last(), Some(Event::View(v)) if v.members.len() == 3));
    }
    for k in 0..30u8 {
        for i in 0..3 {
            let q = [Qos::Unreliable, Qos::SourceOrdered, Qos::TotallyOrdered][i];
            net.nodes[i]
                .submit(net.now, Bytes::from(vec![k; 8]), q)
                .unwrap();
        }
    }
    net.run_for(Duration::from_secs(1));
    let d0 = net.delivered(0);
    assert_eq!(d0.len(), 90);
    assert_eq!(net.delivered(1), d0);
    assert_eq!(net.delivered(2), d0);
    // Quiescent: no datagram and no timer any more, every send complete and stable.
    let before = net.datagrams;
    net.run_for(Duration::from_secs(5));
    assert_eq!(net.datagrams, before);
    assert!(net.nodes.iter().all(|n| n.poll_timeout().is_none()));
    for (i, n) in net.nodes.iter().enumerate() {
        let done = (net.events[i].iter())
            .filter(|e| matches!(e, Event::SendComplete { .. }))
            .count();
        assert_eq!(done, 30);
        assert_eq!(n.engine_counters()[2], ("unordered", 0));
    }
    assert!(net.nodes[0]
        .submit(net.now, Bytes::new(), Qos::KResilient(1))
        .is_err_and(|e| e == SendError::Unsupported));
}

#[test]
fn sends_push_back_when_the_window_is_full() {
    let mut net = Net::new(2);
    // Member 1 hears nothing: member 0's messages are ordered but never stable.
    let mut n = 0;
    loop {
        match net.nodes[0].submit(net.now, Bytes::from_static(b"x"), Qos::TotallyOrdered) {
            Ok(_) => n += 1,
            Err(e) => {
                assert_eq!(e, SendError::WouldBlock);
                break;
            }
        }
        assert!(n <= super::engine::WINDOW);
    }
    assert_eq!(n, super::engine::WINDOW);
    assert!(!net.nodes[0].can_submit());
    // Once the ring runs, the window opens again and nothing was lost.
    net.run_for(Duration::from_secs(1));
    assert!(net.nodes[0].can_submit());
    assert_eq!(net.delivered(1).len() as u64, n);
}
