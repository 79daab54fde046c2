//! What a run leaves behind for the checkers and the figures: every event each host's engine
//! emitted, with its virtual time, every submission, and the network's own counts.
//!
//! Records are plain data with `PartialEq`, so a test can show that one seed reproduces a run bit
//! for bit, and a checker test can doctor a record to show that the checker catches a violation.

use rmcast_proto::{Counters, NodeId, Recovery, Time, View};
use std::collections::{BTreeMap, BTreeSet};

/// Bytes at the front of every workload payload: the sender (u32 LE) and its counter (u64 LE).
pub const PAYLOAD_HEADER_BYTES: usize = 12;

/// FNV-1a (64 bits) of a payload: stable across builds, cheap, good enough to tell payloads apart.
pub fn payload_hash(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The payload of the `counter`-th message of `sender`: sender and counter, then filler bytes
/// derived from both (so that a payload swapped between messages changes its hash).
pub fn make_payload(sender: NodeId, counter: u64, len: usize) -> Vec<u8> {
    let len = len.max(PAYLOAD_HEADER_BYTES);
    let mut p = Vec::with_capacity(len);
    p.extend_from_slice(&sender.0.to_le_bytes());
    p.extend_from_slice(&counter.to_le_bytes());
    let mut x = (sender.0 as u64) << 32 ^ counter ^ 0x9e37_79b9_7f4a_7c15;
    while p.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p.push(x as u8);
    }
    p
}

/// Decodes `(sender, counter)` from a workload payload.
pub fn parse_payload(data: &[u8]) -> Option<(NodeId, u64)> {
    let s = u32::from_le_bytes(data.get(0..4)?.try_into().ok()?);
    let c = u64::from_le_bytes(data.get(4..12)?.try_into().ok()?);
    Some((NodeId(s), c))
}

/// A delivered message as recorded (the payload itself is reduced to its length and hash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryRec {
    /// Position in the total order.
    pub seq: u64,
    /// Original sender.
    pub sender: NodeId,
    /// The sender's message number.
    pub msg: u64,
    /// View it was delivered in.
    pub view: u64,
    /// Payload length.
    pub len: usize,
    /// [`payload_hash`] of the payload.
    pub hash: u64,
    /// The counter encoded in the payload, if it decodes.
    pub counter: Option<u64>,
}

/// One engine event as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecEvent {
    /// A delivery.
    Deliver(DeliveryRec),
    /// A view installed.
    View(View),
    /// An own message completed.
    SendComplete {
        /// The number `submit` returned.
        msg: u64,
    },
    /// The host left the group.
    Left,
    /// Crash recovery, as the engine reported it. [`Recovery::Expelled`] ends the host's part
    /// in the run like [`RecEvent::Left`]: it is no longer held to deliver anything.
    Recovery(Recovery),
}

/// An event with the virtual time it was emitted at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// Virtual time.
    pub at: Time,
    /// The event.
    pub event: RecEvent,
}

/// One accepted submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submission {
    /// The sender.
    pub sender: NodeId,
    /// The workload's counter (0, 1, ... per sender), encoded in the payload.
    pub counter: u64,
    /// What `submit` returned.
    pub msg: u64,
    /// When.
    pub at: Time,
    /// Payload length.
    pub len: usize,
    /// Payload hash.
    pub hash: u64,
}

/// Everything recorded about one host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostRecord {
    /// The host.
    pub id: NodeId,
    /// When it started, if it did.
    pub started_at: Option<Time>,
    /// When `leave` was called on it, if it was.
    pub leave_requested_at: Option<Time>,
    /// When it crashed, if it did.
    pub crashed_at: Option<Time>,
    /// Every event, in order.
    pub events: Vec<Recorded>,
    /// Messages the workload meant this host to send (0 if it is not a sender).
    pub messages_planned: u64,
    /// Engine counters at the end (or when the engine was dropped).
    pub counters: Counters,
    /// Engine counters when the workload started (zero if the host was not running then).
    pub counters_at_workload_start: Counters,
    /// The engine's own description of its state at the end ([`rmcast_proto::Engine::describe`]).
    pub final_state: String,
}

impl HostRecord {
    /// Started, never asked to leave, never crashed, never expelled: the members the checkers
    /// hold to the end.
    pub fn stayed(&self) -> bool {
        self.started_at.is_some()
            && self.leave_requested_at.is_none()
            && self.crashed_at.is_none()
            && !self.expelled()
    }

    /// Whether the group went on without this host: it crashed or was expelled.
    pub fn failed(&self) -> bool {
        self.crashed_at.is_some() || self.expelled()
    }

    /// Whether [`Recovery::Expelled`] was recorded.
    pub fn expelled(&self) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e.event, RecEvent::Recovery(Recovery::Expelled { .. })))
    }

    /// The last view this host installed.
    pub fn last_view(&self) -> Option<&View> {
        self.events.iter().rev().find_map(|e| match &e.event {
            RecEvent::View(v) => Some(v),
            _ => None,
        })
    }

    /// The id of the first view this host installed.
    pub fn first_view(&self) -> Option<u64> {
        self.events.iter().find_map(|e| match &e.event {
            RecEvent::View(v) => Some(v.id),
            _ => None,
        })
    }

    /// A host that stayed and installed a view: a member at the end of the run.
    pub fn member_at_end(&self) -> bool {
        self.stayed() && self.first_view().is_some()
    }

    /// Whether [`RecEvent::Left`] was recorded.
    pub fn left(&self) -> bool {
        self.events.iter().any(|e| e.event == RecEvent::Left)
    }

    /// Deliveries in order, with their times.
    pub fn deliveries(&self) -> impl Iterator<Item = (Time, &DeliveryRec)> + '_ {
        self.events.iter().filter_map(|e| match &e.event {
            RecEvent::Deliver(d) => Some((e.at, d)),
            _ => None,
        })
    }
}

/// What the network model counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Datagrams engines handed to the network (a multicast counts once).
    pub transmitted: u64,
    /// Copies scheduled for arrival (a multicast to n receivers makes n, duplicates one more).
    pub copies_sent: u64,
    /// Copies handed to a running engine.
    pub copies_delivered: u64,
    /// Copies lost by the loss probability.
    pub drops_loss: u64,
    /// Copies cut by a partition.
    pub drops_partition: u64,
    /// Datagrams dropped by a full uplink queue (bandwidth model).
    pub drops_uplink_queue: u64,
    /// Copies dropped because the receive buffer of a paused host was full.
    pub drops_pause_overflow: u64,
    /// Copies dropped because too many were in flight to the receiver.
    pub drops_rx_overflow: u64,
    /// Copies addressed to a host that is not running (not started, left, crashed).
    pub drops_unroutable: u64,
    /// Extra copies made by the duplication probability.
    pub duplicated: u64,
    /// Engine steps (inputs) processed.
    pub steps: u64,
    /// Submissions refused with `WouldBlock` (retried later).
    pub submit_would_block: u64,
    /// Submissions refused with `NotMember` by a host that had a view and was not leaving
    /// (retried later).
    pub submit_not_member: u64,
    /// Submissions refused with `GroupFailed` (recovery mode; retried later).
    pub submit_group_failed: u64,
}

/// The full record of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// Seed of the run.
    pub seed: u64,
    /// Resilience degree r the engines promised (0 for engines without one).
    pub resilience: u8,
    /// Hosts by id (`hosts[i].id == NodeId(i)`).
    pub hosts: Vec<HostRecord>,
    /// Accepted submissions in order.
    pub submissions: Vec<Submission>,
    /// When the workload started.
    pub workload_start: Time,
    /// When the last fault healed and the last membership change was due: quiescence starts.
    pub heal_time: Time,
    /// Virtual time at the end.
    pub end_time: Time,
    /// Whether every member delivered everything before the time bound.
    pub quiesced: bool,
    /// Set when a loop bound was hit: what happened.
    pub livelock: Option<String>,
    /// Submissions refused for a reason other than back-pressure (never retried).
    pub workload_errors: Vec<String>,
    /// Network counts.
    pub net: NetStats,
}

impl Record {
    /// Submissions by `(sender, msg)`.
    pub fn submission_index(&self) -> BTreeMap<(NodeId, u64), &Submission> {
        self.submissions
            .iter()
            .map(|s| ((s.sender, s.msg), s))
            .collect()
    }

    /// Hosts that stayed to the end and installed a view.
    pub fn members_at_end(&self) -> impl Iterator<Item = &HostRecord> + '_ {
        self.hosts.iter().filter(|h| h.member_at_end())
    }

    /// Hosts the group went on without: crashed, expelled, removed by a reset, or that ended
    /// in a view no member at the end ever installed (they went on, or left, on the losing side
    /// of a partition: a departing sequencer there, a member that joined there).
    pub fn failed_hosts(&self) -> BTreeSet<NodeId> {
        let mut failed: BTreeSet<NodeId> = self.removed_by_resets();
        let views: BTreeSet<(u64, &[NodeId])> = self
            .members_at_end()
            .flat_map(|h| &h.events)
            .filter_map(|e| match &e.event {
                RecEvent::View(v) => Some((v.id, &v.members[..])),
                _ => None,
            })
            .collect();
        for h in &self.hosts {
            let diverged = !views.is_empty()
                && h.last_view()
                    .is_some_and(|v| !views.contains(&(v.id, &v.members[..])));
            if h.failed() || diverged {
                failed.insert(h.id);
            }
        }
        failed
    }

    /// How many hosts failed (see [`Record::failed_hosts`]).
    pub fn failures(&self) -> usize {
        self.failed_hosts().len()
    }

    /// Hosts that a member at the end saw removed by a reset: the group went on without them
    /// even if they believe they left in good order.
    pub fn removed_by_resets(&self) -> BTreeSet<NodeId> {
        self.members_at_end()
            .flat_map(|h| &h.events)
            .filter_map(|e| match &e.event {
                RecEvent::Recovery(Recovery::Reset { removed, .. }) => Some(removed),
                _ => None,
            })
            .flatten()
            .copied()
            .collect()
    }

    /// Whether the run stayed within the engine's promise: at most r hosts failed. Then every
    /// host's deliveries, a failed one's included, must fit the survivors' order; beyond r
    /// only the hosts that did not fail are held to it.
    pub fn within_resilience(&self) -> bool {
        self.failures() <= self.resilience as usize
    }

    /// The hosts whose deliveries every checker holds to one order: all of them within the
    /// resilience degree, else those that did not fail.
    pub fn trusted_hosts(&self) -> impl Iterator<Item = &HostRecord> + '_ {
        let failed = self.failed_hosts();
        let all = failed.len() <= self.resilience as usize;
        self.hosts
            .iter()
            .filter(move |h| all || !failed.contains(&h.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trips_and_differs_per_message() {
        let p = make_payload(NodeId(7), 42, 64);
        assert_eq!(p.len(), 64);
        assert_eq!(parse_payload(&p), Some((NodeId(7), 42)));
        let q = make_payload(NodeId(7), 43, 64);
        assert_ne!(payload_hash(&p), payload_hash(&q));
        assert_eq!(make_payload(NodeId(1), 0, 3).len(), PAYLOAD_HEADER_BYTES);
        assert_eq!(parse_payload(&p[..5]), None);
    }
}
