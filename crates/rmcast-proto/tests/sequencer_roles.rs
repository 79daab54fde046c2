//! Roles in the Sequencer's recovery (the invitation protocol of "An Efficient Reliable
//! Broadcast Protocol" / "Group Communication in the Amoeba Distributed Operating System" by
//! Kaashoek and Tanenbaum): a key-holding member of the group forges BC_RESULT in a role it does
//! not hold, during a recovery. A result is installed only from a coordinator the receiver voted
//! for in that recovery, and a coordinator the receiver follows (which counted its votes)
//! cannot leave it out; both refusals are counted (`results_refused`). A legitimate recovery
//! still completes afterwards.

use bytes::Bytes;
use rmcast_proto::registry::Role;
use rmcast_proto::sequencer::packet::{self, ptype, Body};
use rmcast_proto::wire::{EngineKind, Header};
use rmcast_proto::{Destination, Engine, EngineChoice, Event, NodeId, Qos, Recovery, Time};
use std::time::Duration;

const GROUP: u32 = 9;

/// Members 1..=n on an instant network; member `i` is at index `i - 1`. A crashed member runs
/// nothing; a cut-off one runs, but its datagrams and those to it are lost.
struct Net {
    nodes: Vec<Box<dyn Engine>>,
    now: Time,
    crashed: Vec<bool>,
    cut: Vec<bool>,
    /// Every datagram each member sent.
    sent: Vec<Vec<Vec<u8>>>,
    events: Vec<Vec<Event>>,
}

impl Net {
    fn new(n: usize) -> Net {
        let choice = EngineChoice::sequencer(0);
        let mut net = Net {
            nodes: Vec::new(),
            now: Time(1_000_000_000),
            crashed: vec![false; n],
            cut: vec![false; n],
            sent: vec![Vec::new(); n],
            events: vec![Vec::new(); n],
        };
        for i in 0..n {
            let role = if i == 0 { Role::Create } else { Role::Join };
            let mut e = choice.build(role, GROUP, NodeId(i as u32 + 1), 1400, net.now, i as u64);
            e.handle_timeout(net.now);
            net.nodes.push(e);
            net.run_for(Duration::from_millis(500));
        }
        net
    }

    fn live(&self, i: usize) -> bool {
        !self.crashed[i]
    }

    fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            let mut moved = false;
            for i in 0..self.nodes.len() {
                if !self.live(i) {
                    continue;
                }
                let mut buf = Vec::new();
                while let Some(t) = self.nodes[i].poll_transmit(self.now, &mut buf) {
                    moved = true;
                    let from = self.nodes[i].node_id();
                    for dg in t.datagrams(&buf) {
                        self.sent[i].push(dg.to_vec());
                        for j in 0..self.nodes.len() {
                            let hit = match t.destination {
                                Destination::Peer(p) => p == self.nodes[j].node_id(),
                                _ => j != i,
                            };
                            if hit && self.live(j) && !self.cut[i] && !self.cut[j] {
                                self.nodes[j].handle_datagram(self.now, from, dg);
                            }
                        }
                    }
                    buf.clear();
                }
            }
            self.drain();
            if moved {
                continue;
            }
            let next = (0..self.nodes.len())
                .filter(|&i| self.live(i))
                .filter_map(|i| self.nodes[i].poll_timeout())
                .min();
            match next {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    for i in 0..self.nodes.len() {
                        if self.live(i)
                            && self.nodes[i].poll_timeout().is_some_and(|x| x <= self.now)
                        {
                            self.nodes[i].handle_timeout(self.now);
                        }
                    }
                }
                _ => break,
            }
        }
        self.now = self.now.max(end);
    }

    fn drain(&mut self) {
        for i in 0..self.nodes.len() {
            while let Some(e) = self.nodes[i].poll_event() {
                self.events[i].push(e);
            }
        }
    }

    /// Member index `i` sends; `by` deliver it.
    fn assert_delivered_by(&mut self, by: &[usize], i: usize, what: &'static [u8]) {
        self.nodes[i]
            .submit(self.now, Bytes::from_static(what), Qos::Reliable)
            .expect("the group takes messages");
        self.run_for(Duration::from_secs(2));
        for &j in by {
            assert!(
                self.events[j].iter().any(|e| matches!(e,
                    Event::Deliver(d) if d.sender == NodeId(i as u32 + 1) && d.payload == what)),
                "member {} did not deliver {what:?}",
                j + 1
            );
        }
    }

    /// The holding point (held_next) and incarnation member index `i` last announced in a
    /// BC_REFORMREQ or BC_VOTE.
    fn announced(&self, i: usize) -> (u64, u32) {
        self.sent[i]
            .iter()
            .rev()
            .find_map(|dg| match packet::decode(dg) {
                Ok((h, Body::ReformReq { held_next, .. })) => Some((held_next, h.incarnation)),
                Ok((h, Body::Vote { held_next, .. })) => Some((held_next, h.incarnation)),
                _ => None,
            })
            .expect("the member takes part in a recovery")
    }

    fn counter(&self, i: usize, name: &str) -> u64 {
        self.nodes[i]
            .engine_counters()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| v)
    }

    fn expelled(&self, i: usize) -> bool {
        self.events[i]
            .iter()
            .any(|e| matches!(e, Event::Recovery(Recovery::Expelled { .. })))
    }
}

fn header(ptype: u8, from: u32, incarnation: u32) -> Header {
    Header {
        engine: EngineKind::Sequencer,
        ptype,
        flags: 0,
        group: GROUP,
        incarnation,
        sender: NodeId(from),
    }
}

/// BC_RESULT sent by `from`: a reset to `incarnation` at `seq`, founding `members` with
/// `coordinator` as sequencer.
fn result(from: u32, incarnation: u32, seq: u64, coordinator: u32, members: &[u32]) -> Vec<u8> {
    let members: Vec<NodeId> = members.iter().map(|&m| NodeId(m)).collect();
    let view = rmcast_proto::common::view_bytes(1, NodeId(coordinator), &members);
    let mut buf = Vec::new();
    packet::encode_control(
        &mut buf,
        &header(ptype::RESULT, from, incarnation - 1),
        &Body::Result {
            incarnation,
            seq,
            stable: 0,
            settled: false,
            view: &view,
        },
    );
    buf
}

/// BC_REFORMREQ sent by `from` in incarnation `incarnation`.
fn invitation(from: u32, incarnation: u32, held_next: u64, suspect: u32) -> Vec<u8> {
    let mut buf = Vec::new();
    packet::encode_control(
        &mut buf,
        &header(ptype::REFORM_REQ, from, incarnation),
        &Body::ReformReq {
            held_next,
            target: 0,
            suspect: NodeId(suspect),
            round: 1,
            interval_ms: 200,
        },
    );
    buf
}

/// The sequencer (1) crashes and member 3 is cut off: member 2 recovers alone, without the
/// majority a reset needs. Member 3 (a key holder) forges a result founding {2, 3} with itself as
/// sequencer; member 2 never voted for it, so it is refused and counted, and member 2 stays in
/// the old incarnation. Member 3 comes back: the real recovery of 2 and 3 completes, and the
/// group of the two goes on.
#[test]
fn a_result_from_a_coordinator_the_member_did_not_vote_for_is_refused() {
    let mut net = Net::new(3);
    net.assert_delivered_by(&[0, 1, 2], 0, b"before");
    net.crashed[0] = true;
    net.cut[2] = true;
    net.run_for(Duration::from_secs(5));
    assert!(net.nodes[1].info().recovering, "member 2 recovers");
    let (held, inc) = net.announced(1);
    assert_eq!(inc, 0);
    let refused = net.counter(1, "results_refused");
    let forged = result(3, 1, held, 3, &[2, 3]);
    net.nodes[1].handle_datagram(net.now, NodeId(3), &forged);
    net.run_for(Duration::from_millis(100));
    assert_eq!(net.counter(1, "results_refused"), refused + 1);
    let info = net.nodes[1].info();
    assert_eq!(info.incarnation, 0, "not installed");
    assert!(info.recovering, "still recovering");
    // Member 3 comes back: the legitimate recovery completes.
    net.cut[2] = false;
    net.run_for(Duration::from_secs(10));
    for i in [1, 2] {
        let info = net.nodes[i].info();
        assert!(!info.recovering, "member {} settled", i + 1);
        assert_eq!(info.incarnation, 1, "member {}", i + 1);
        assert_eq!(info.members, [NodeId(2), NodeId(3)], "member {}", i + 1);
        assert!(!net.expelled(i));
    }
    net.assert_delivered_by(&[1, 2], 1, b"after");
}

/// In a group of three in normal operation, member 3 (a key holder) invites member 2 into a
/// recovery (any member may start one: the sequencer might have crashed), and member 2 votes
/// for it. Member 3 then forges a result founding {1, 3}, which holds a majority but leaves out
/// member 2, which answered it: refused and counted, member 2 is not expelled. Member 2 finds
/// its coordinator silent and runs the recovery itself; the three reset into one group and go
/// on.
#[test]
fn a_coordinator_cannot_leave_out_a_member_that_voted_for_it() {
    let mut net = Net::new(3);
    net.assert_delivered_by(&[0, 1, 2], 0, b"before");
    // Member 2's holding point, from a recovery datagram of its own once invited.
    let inv = invitation(3, 0, 0, 1);
    net.nodes[1].handle_datagram(net.now, NodeId(3), &inv);
    // Deliver member 2's vote nowhere (it goes to member 3, whose engine never sent the
    // invitation): keep member 2 to itself for a moment.
    net.cut[1] = true;
    net.run_for(Duration::from_millis(1));
    let (held, inc) = net.announced(1);
    assert_eq!(inc, 0);
    let refused = net.counter(1, "results_refused");
    let forged = result(3, 1, held, 3, &[1, 3]);
    net.nodes[1].handle_datagram(net.now, NodeId(3), &forged);
    net.run_for(Duration::from_millis(1));
    assert_eq!(net.counter(1, "results_refused"), refused + 1);
    assert!(!net.expelled(1), "member 2 was not expelled");
    assert_eq!(net.nodes[1].info().incarnation, 0);
    // Member 2 is back on the network: the recovery it was drawn into completes with all three.
    net.cut[1] = false;
    net.run_for(Duration::from_secs(15));
    for i in 0..3 {
        let info = net.nodes[i].info();
        assert!(!info.recovering, "member {} settled", i + 1);
        assert_eq!(info.incarnation, 1, "member {}", i + 1);
        assert_eq!(
            info.members,
            [NodeId(1), NodeId(2), NodeId(3)],
            "member {}",
            i + 1
        );
        assert!(!net.expelled(i), "member {}", i + 1);
    }
    net.assert_delivered_by(&[0, 1, 2], 1, b"after");
}

/// Any member may start a recovery (the sequencer may have crashed), but what it claims is not
/// taken on its word: member 3 (a key holder) invites member 2 into a recovery naming the
/// sequencer, alive, as the failed member, and falls silent. Member 2 runs the recovery and
/// waits for the sequencer's vote as for any member's: the three reset into one group and
/// nobody is expelled.
#[test]
fn an_invitation_cannot_make_the_reset_go_on_without_a_member_alive() {
    let mut net = Net::new(3);
    net.assert_delivered_by(&[0, 1, 2], 0, b"before");
    let inv = invitation(3, 0, 0, 1);
    net.nodes[1].handle_datagram(net.now, NodeId(3), &inv);
    net.run_for(Duration::from_secs(15));
    for i in 0..3 {
        let info = net.nodes[i].info();
        assert!(!info.recovering, "member {} settled", i + 1);
        assert_eq!(info.incarnation, 1, "member {}", i + 1);
        assert_eq!(
            info.members,
            [NodeId(1), NodeId(2), NodeId(3)],
            "member {}",
            i + 1
        );
        assert!(!net.expelled(i), "member {}", i + 1);
    }
    net.assert_delivered_by(&[0, 1, 2], 2, b"after");
}
