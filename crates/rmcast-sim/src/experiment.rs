//! The throughput experiment of "RMP: Fault-Tolerant Group Communication" (Whetten, Montgomery,
//! Kaplan), section 5, on a simulated 10 Mb/s Ethernet: one shared medium
//! ([`crate::NetConfig::shared_medium`]), totally ordered messages of about 1 KiB, senders that
//! submit as fast as their engine's flow control lets them.
//!
//! - Figure 5.1, *aggregate throughput*: the data sent by all senders times the number of
//!   destinations, the senders being destinations too ([`Setup::aggregate`]). Multicast lets it
//!   exceed the medium's bandwidth; no unicast-based protocol can.
//! - Figure 5.2, *single-sender throughput*: one source, apart from its destinations
//!   ([`Setup::separate_source`]; in the simulator the source is still a member, since the
//!   engines only send to their own group, but its own deliveries are not counted). It stays
//!   about constant with multicast, while unicast-based protocols fall as 1/N.
//! - Figure 5.3, *latency*: the same factors (members, sources) with latency as the metric
//!   ([`Setup::latency`]). The paper ping-pongs a single message between the members; here each
//!   sender keeps one message in flight, and latency is from `submit` to the delivery at each
//!   other member (the median and the 99th percentile over every such delivery).
//!
//! Throughput at a destination is the payload it delivered divided by the time from the first
//! submission to its last delivery; the aggregate is the sum over the destinations, and the
//! single-sender (per-destination) figure is the aggregate divided by the destinations. 1 KB is
//! 1000 bytes, as in the paper (10 Mb/s = 1250 KB/s).

use crate::{run, Scenario};
use rmcast_proto::{EngineChoice, NodeId, Qos};
use std::collections::HashSet;

/// The paper's Ethernet: 10 Mbit/s.
pub const ETHERNET_MBPS: f64 = 10.0;

/// What the paper's text says of its measurements (8 SparcStations on a 10 Mb/s Ethernet,
/// totally ordered packets). Its figures are plots; these are the values its text gives.
pub mod paper {
    /// Figure 5.1: aggregate throughput with 1 source and 8 members, in KB/s (5.91 times the
    /// Ethernet).
    pub const AGGREGATE_1_SOURCE_8_MEMBERS_KB_S: f64 = 7384.0;
    /// Figure 5.2 (and the abstract): throughput to one destination, in KB/s ("86% of the
    /// network capacity"); "roughly constant independent of the number of destinations".
    pub const ONE_DESTINATION_KB_S: f64 = 1070.0;
    /// Figure 5.3 (and the abstract): the latency of a totally ordered packet to one
    /// destination, in ms; the figure's curve "stays almost constant" with the members.
    pub const ONE_DESTINATION_LATENCY_MS: f64 = 4.0;
    /// Section 1: a totally ordered packet's latency is "approximately twice that of an
    /// unordered or source ordered packet".
    pub const TOTAL_OVER_SOURCE_ORDERED_LATENCY: f64 = 2.0;
}

/// Each host's queue towards the medium in the experiment, in datagrams: more than the send
/// window of either registered engine (the ring's 256 messages, the sequencer's 1024), so that a
/// sender is held back by its engine's flow control, as a blocking socket holds it back, and
/// not by drops at its own interface.
pub const HOST_QUEUE_DATAGRAMS: usize = 4096;

/// How the experiment's runs are made.
#[derive(Clone, Debug, PartialEq)]
pub struct Setup {
    /// Payload bytes per message.
    pub message_bytes: usize,
    /// Messages per sender.
    pub messages: u64,
    /// Bandwidth of the shared medium in Mbit/s.
    pub bandwidth_mbps: f64,
    /// One-way latency of every link in milliseconds (besides the transmission time).
    pub latency_ms: f64,
    /// Messages a sender keeps in flight at most (submitted, not yet delivered back); `None`:
    /// as many as its engine accepts (the senders saturate, held back by the engine's flow
    /// control alone).
    pub in_flight: Option<u32>,
    /// The seed of every run.
    pub seed: u64,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            message_bytes: 1024,
            messages: 1000,
            bandwidth_mbps: ETHERNET_MBPS,
            latency_ms: 1.0,
            in_flight: None,
            seed: 0,
        }
    }
}

/// One measured point.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// Engine name.
    pub engine: String,
    /// Group members.
    pub members: u32,
    /// Senders.
    pub senders: u32,
    /// Destinations counted: every member, or (source apart) the members that do not send.
    pub destinations: u32,
    /// Whether the senders' own deliveries are left out (Figure 5.2).
    pub source_separate: bool,
    /// The quality of service of every message (`None`: the strongest the engine serves).
    pub qos: Option<Qos>,
    /// Messages each sender kept in flight at most (`None`: as many as its engine accepts).
    pub in_flight: Option<u32>,
    /// Payload delivered per second at each destination, on average, in KB/s: with one sender,
    /// the paper's single-sender throughput.
    pub per_destination_kb_s: f64,
    /// Sum over the destinations of the payload each delivered per second, in KB/s.
    pub aggregate_kb_s: f64,
    /// The medium's bandwidth in KB/s.
    pub medium_kb_s: f64,
    /// Datagrams sent per message, by all members (failure-detection probes left out).
    pub datagrams_per_message: f64,
    /// Retransmissions by all members.
    pub retransmissions: u64,
    /// Datagrams dropped by full queues towards the medium.
    pub drops: u64,
    /// Median latency from `submit` to the delivery at another member, in ms.
    pub latency_p50_ms: f64,
    /// 99th percentile of that latency, in ms.
    pub latency_p99_ms: f64,
    /// Every destination delivered every message.
    pub complete: bool,
    /// Every checker passed (total order, agreement, ...).
    pub passed: bool,
    /// The checkers that failed, by name.
    pub failed_checkers: Vec<&'static str>,
    /// The checkers' complaints, if any.
    pub summary: String,
}

impl Point {
    /// The aggregate throughput in multiples of the medium's bandwidth.
    pub fn aggregate_ratio(&self) -> f64 {
        self.aggregate_kb_s / self.medium_kb_s
    }
}

impl Setup {
    /// The scenario of one run: `members` members, `senders` of them sending (hosts 1, 2, ...,
    /// host 0 last; see [`Scenario::sender_ids`]), on the shared medium, closed loop (with more
    /// messages allowed in flight than any engine's window unless [`Setup::in_flight`] says
    /// otherwise), r = 0 and sends that complete without a majority's acknowledgements.
    /// Every message is sent at `qos` (`None`: the strongest the engine serves).
    pub fn scenario(
        &self,
        engine: EngineChoice,
        members: u32,
        senders: u32,
        qos: Option<Qos>,
    ) -> Scenario {
        Scenario {
            engine,
            members,
            senders,
            latency_ms: self.latency_ms,
            bandwidth_mbps: Some(self.bandwidth_mbps),
            shared_medium: true,
            messages: self.messages,
            message_bytes: self.message_bytes,
            in_flight: self.in_flight.unwrap_or(1 << 20),
            min_members: 1,
            qos,
            ..Scenario::default()
        }
    }

    /// Figure 5.1's point: `members` members, `senders` of them sending, every member a
    /// destination.
    pub fn aggregate(&self, engine: &str, members: u32, senders: u32) -> Result<Point, String> {
        self.measure(engine, members, senders, false, None)
    }

    /// Figure 5.2's point: one source and `destinations` other members.
    pub fn separate_source(&self, engine: &str, destinations: u32) -> Result<Point, String> {
        self.measure(engine, destinations + 1, 1, true, None)
    }

    /// Figure 5.3's point: `members` members, `senders` of them sending, each with one message
    /// in flight (the paper ping-pongs a single message), every message at `qos` (`None`: the
    /// strongest the engine serves); the latencies are [`Point::latency_p50_ms`] and
    /// [`Point::latency_p99_ms`].
    pub fn latency(
        &self,
        engine: &str,
        members: u32,
        senders: u32,
        qos: Option<Qos>,
    ) -> Result<Point, String> {
        let one_at_a_time = Setup {
            in_flight: Some(1),
            ..self.clone()
        };
        one_at_a_time.measure(engine, members, senders, false, qos)
    }

    /// Runs one point, every message at `qos` (`None`: the strongest the engine serves); the
    /// error names a bad setting.
    pub fn measure(
        &self,
        engine: &str,
        members: u32,
        senders: u32,
        source_separate: bool,
        qos: Option<Qos>,
    ) -> Result<Point, String> {
        let choice = EngineChoice::named(engine).map_err(|e| e.to_string())?;
        let sc = self.scenario(choice, members, senders, qos);
        sc.validate()?;
        let mut cfg = sc.config(self.seed);
        cfg.net.uplink_queue_datagrams = HOST_QUEUE_DATAGRAMS;
        let report = run(&cfg);
        let rec = &report.record;
        let sender_ids: HashSet<NodeId> = cfg.workload.senders.iter().copied().collect();
        let first = rec
            .submissions
            .iter()
            .map(|s| s.at)
            .min()
            .unwrap_or(rec.workload_start);
        let expected = rec.submissions.len();
        let mut destinations = 0u32;
        let mut aggregate = 0.0;
        let mut complete = expected as u64 == senders as u64 * self.messages;
        for h in rec.hosts.iter().take(members as usize) {
            if source_separate && sender_ids.contains(&h.id) {
                continue;
            }
            destinations += 1;
            let mut bytes = 0u64;
            let mut last = first;
            let mut n = 0usize;
            for (at, d) in h.deliveries() {
                if sender_ids.contains(&d.sender) {
                    bytes += d.payload.len as u64;
                    last = last.max(at);
                    n += 1;
                }
            }
            complete &= n == expected;
            let span = last.0.saturating_sub(first.0) as f64 / 1e9;
            if span > 0.0 {
                aggregate += bytes as f64 / span / 1000.0;
            }
        }
        let per_destination = if destinations > 0 {
            aggregate / destinations as f64
        } else {
            0.0
        };
        Ok(Point {
            engine: engine.to_string(),
            members,
            senders,
            destinations,
            source_separate,
            qos,
            in_flight: self.in_flight,
            per_destination_kb_s: per_destination,
            aggregate_kb_s: aggregate,
            medium_kb_s: self.bandwidth_mbps * 1e6 / 8.0 / 1000.0,
            datagrams_per_message: report.figures.datagrams_per_broadcast,
            retransmissions: report.figures.retransmissions,
            drops: rec.net.drops_uplink_queue,
            latency_p50_ms: report.figures.latency_p50_ms,
            latency_p99_ms: report.figures.latency_p99_ms,
            complete,
            passed: report.passed(),
            failed_checkers: report.failed_checkers(),
            summary: report.summary(),
        })
    }
}
