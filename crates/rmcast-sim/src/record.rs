//! What a run leaves behind for the checkers and the figures: every event each host's engine
//! emitted, with its virtual time, every submission, and the network's own counts.
//!
//! Records are plain data with `PartialEq`, so a test can show that one seed reproduces a run bit
//! for bit, and a checker test can doctor a record to show that the checker catches a violation.

use rmcast_proto::{Counters, Delivery, Digest, Event, Guarantees, NodeId, Recovery, Time, View};
use std::collections::{BTreeMap, BTreeSet};

/// Bytes at the front of every workload payload: the sender (u32 LE) and its counter (u64 LE).
pub const PAYLOAD_HEADER_BYTES: usize = 12;

/// FNV-1a (64 bits) of a payload ([`Digest::of`]): stable across builds, cheap, good enough
/// to tell payloads apart.
pub fn payload_hash(data: &[u8]) -> u64 {
    Digest::of(data).hash
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

/// An engine event with the virtual time it was emitted at: the one [`Event`] type, payloads
/// reduced to their [`Digest`] (length and FNV-1a hash; a workload payload's sender and counter
/// are in its first bytes, so the digest of a delivery names the submission it must match).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// Virtual time.
    pub at: Time,
    /// The event.
    pub event: Event<Digest>,
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
    /// What the host's engine declared ([`rmcast_proto::Engine::guarantees`]), if it started.
    pub guarantees: Option<Guarantees>,
    /// When the host was paused or asleep ([`crate::Pause`], [`crate::Perturbation`]): from,
    /// until. Overlapping pauses make one interval.
    pub sleeps: Vec<(Time, Time)>,
    /// Snapshots of the engine's counters while it ran, with [`crate::SimConfig::sample_counters`].
    pub counter_samples: Vec<(Time, Counters)>,
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
            .any(|e| matches!(e.event, Event::Recovery(Recovery::Expelled { .. })))
    }

    /// The last view this host installed.
    pub fn last_view(&self) -> Option<&View> {
        self.events.iter().rev().find_map(|e| match &e.event {
            Event::View(v) => Some(v),
            _ => None,
        })
    }

    /// The id of the first view this host installed.
    pub fn first_view(&self) -> Option<u64> {
        self.events.iter().find_map(|e| match &e.event {
            Event::View(v) => Some(v.id),
            _ => None,
        })
    }

    /// A host that stayed and installed a view: a member at the end of the run.
    pub fn member_at_end(&self) -> bool {
        self.stayed() && self.first_view().is_some()
    }

    /// Whether [`Event::Left`] was recorded.
    pub fn left(&self) -> bool {
        self.events.iter().any(|e| e.event == Event::Left)
    }

    /// Time spent paused or asleep in `[from, to)`.
    pub fn asleep_between(&self, from: Time, to: Time) -> std::time::Duration {
        let ns = (self.sleeps.iter())
            .map(|(a, b)| (*b).min(to).0.saturating_sub((*a).max(from).0))
            .sum();
        std::time::Duration::from_nanos(ns)
    }

    /// The counters as sampled at `at` (the last snapshot at or before it), if any.
    pub fn counters_at(&self, at: Time) -> Option<&Counters> {
        let i = self.counter_samples.partition_point(|(t, _)| *t <= at);
        i.checked_sub(1).map(|i| &self.counter_samples[i].1)
    }

    /// Deliveries in order, with their times.
    pub fn deliveries(&self) -> impl Iterator<Item = (Time, &Delivery<Digest>)> + '_ {
        self.events.iter().filter_map(|e| match &e.event {
            Event::Deliver(d) => Some((e.at, d)),
            _ => None,
        })
    }
}

/// What the network model counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Datagrams engines handed to the network (a multicast counts once).
    pub transmitted: u64,
    /// Of those, datagrams longer than the engines were told a datagram may be
    /// ([`crate::config::MAX_DATAGRAM_BYTES`]): carried anyway, since the model has no MTU.
    pub oversized: u64,
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Seed of the run.
    pub seed: u64,
    /// What the run's engine declared: which checkers apply, and the resilience degree r
    /// ([`crate::checkers`]). Each host's own declaration is in [`HostRecord::guarantees`].
    pub guarantees: Guarantees,
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
    /// Incarnations of hosts in a group that merged into another ([`crate::SimConfig::heal`]):
    /// another group's history, with view ids and order positions of its own, kept apart from
    /// [`Record::hosts`] so that the checkers, which judge one group's history, do not mix the
    /// two.
    pub merged_away: Vec<HostRecord>,
}

impl Default for Record {
    /// An empty record of a run of the sequencer with r = 0.
    fn default() -> Self {
        Record {
            seed: 0,
            guarantees: rmcast_proto::EngineChoice::sequencer(0).guarantees(),
            hosts: Vec::new(),
            submissions: Vec::new(),
            workload_start: Time::ZERO,
            heal_time: Time::ZERO,
            end_time: Time::ZERO,
            quiesced: false,
            livelock: None,
            workload_errors: Vec::new(),
            net: NetStats::default(),
            merged_away: Vec::new(),
        }
    }
}

impl Record {
    /// The record of the hosts `keep` names: the others appear as hosts that never started
    /// (so that `hosts[i].id == NodeId(i)` still holds), their submissions and earlier
    /// incarnations left out. One group's history when groups run side by side.
    pub fn restricted(&self, keep: impl Fn(NodeId) -> bool) -> Record {
        let hosts = (self.hosts.iter().enumerate())
            .filter_map(|(i, h)| {
                if keep(h.id) {
                    Some(h.clone())
                } else if h.id.0 as usize == i {
                    Some(HostRecord {
                        id: h.id,
                        ..HostRecord::default()
                    })
                } else {
                    None
                }
            })
            .collect();
        Record {
            hosts,
            submissions: (self.submissions.iter())
                .filter(|s| keep(s.sender))
                .cloned()
                .collect(),
            merged_away: (self.merged_away.iter())
                .filter(|h| keep(h.id))
                .cloned()
                .collect(),
            // Spelled out rather than `..self.clone()`, which would copy every host's events
            // once more only to drop them.
            seed: self.seed,
            guarantees: self.guarantees,
            workload_start: self.workload_start,
            heal_time: self.heal_time,
            end_time: self.end_time,
            quiesced: self.quiesced,
            livelock: self.livelock.clone(),
            workload_errors: self.workload_errors.clone(),
            net: self.net.clone(),
        }
    }

    /// The resilience degree r the engines promised (0 for engines without one).
    pub fn resilience(&self) -> u8 {
        self.guarantees.resilience
    }

    /// Submissions by `(sender, msg)`.
    pub fn submission_index(&self) -> BTreeMap<(NodeId, u64), &Submission> {
        self.submissions
            .iter()
            .map(|s| ((s.sender, s.msg), s))
            .collect()
    }

    /// The workload counter of a delivered message: that of the submission it names (same
    /// sender and message number) if its payload digest matches, else `None`.
    pub fn workload_counter(&self, d: &Delivery<Digest>) -> Option<u64> {
        self.submissions
            .iter()
            .find(|s| {
                (s.sender, s.msg) == (d.sender, d.msg)
                    && (s.len, s.hash) == (d.payload.len, d.payload.hash)
            })
            .map(|s| s.counter)
    }

    /// Hosts that stayed to the end and installed a view.
    pub fn members_at_end(&self) -> impl Iterator<Item = &HostRecord> + '_ {
        self.hosts.iter().filter(|h| h.member_at_end())
    }

    /// Hosts the group went on without: crashed, expelled, removed by a reset, or that ended
    /// in a view no member at the end ever installed (they went on, or left, on the losing side
    /// of a partition: a departing sequencer there, a member that joined there). A host counts
    /// once however many of its records failed.
    pub fn failed_hosts(&self) -> BTreeSet<NodeId> {
        let mut failed: BTreeSet<NodeId> = self.removed_by_resets();
        let is_failed = self.record_failed();
        failed.extend(self.hosts.iter().filter(|h| is_failed(h)).map(|h| h.id));
        failed
    }

    /// Whether one record (one incarnation of a host) failed: crashed, expelled, or ended in a
    /// view no member at the end installed. Removal by a reset is by host, in
    /// [`Record::failed_hosts`].
    fn record_failed(&self) -> impl Fn(&HostRecord) -> bool + '_ {
        let views: BTreeSet<(u64, &[NodeId])> = self
            .members_at_end()
            .flat_map(|h| &h.events)
            .filter_map(|e| match &e.event {
                Event::View(v) => Some((v.id, &v.members[..])),
                _ => None,
            })
            .collect();
        move |h: &HostRecord| {
            let diverged = !views.is_empty()
                && h.last_view()
                    .is_some_and(|v| !views.contains(&(v.id, &v.members[..])));
            h.failed() || diverged
        }
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
                Event::Recovery(Recovery::Reset { removed, .. }) => Some(removed),
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
        self.failures() <= self.resilience() as usize
    }

    /// The hosts whose deliveries every checker holds to one order: all of them within the
    /// resilience degree, else those that did not fail.
    ///
    /// Trust is by record: a host expelled once and admitted again is held to the order in the
    /// incarnation that stayed (its earlier one is not).
    pub fn trusted_hosts(&self) -> impl Iterator<Item = &HostRecord> + '_ {
        let all = self.failures() <= self.resilience() as usize;
        let removed = self.removed_by_resets();
        let is_failed = self.record_failed();
        self.hosts.iter().filter(move |h| {
            all || !(is_failed(h) || (removed.contains(&h.id) && !h.member_at_end()))
        })
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
