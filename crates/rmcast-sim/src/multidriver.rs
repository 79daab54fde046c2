//! The measurements of "The Multidriver: A Reliable Multicast Service Using the Xpress
//! Transfer Protocol" (Dempsey, Fenton and Weaver), section 5, in the simulator (virtual time:
//! deterministic): the `txn` engine on a shared 4 Mbit/s medium (the paper's ProNET-4 token
//! ring, charged Ethernet framing), every receiver answering each transaction with one byte.
//!
//! - Table 1: a 350,000-byte file to 1-5 (and 8) receivers by one multicast transaction, beside
//!   sending it to them one after the other ([`Job::File`], [`Job::UnicastFile`]).
//! - Tables 2-3: the round trip of a 1-byte transaction to its last reply against the
//!   receivers, beside a series of unicast round trips ([`Job::Latency`],
//!   [`Job::UnicastLatency`]).
//! - Implosion control (section 5.2): 16 receivers answering at once into a receive buffer of
//!   8 datagrams, with the random backoff off and on ([`Job::Implosion`]).
//!
//! The simulator has none of the paper's slow PCs: its figures show the protocol's shape (what
//! a multicast saves over a series of unicasts), not the 1990 hardware's times.

use crate::config::{LinkParams, Load, NetConfig, SimConfig, Workload};
use crate::Record;
use rmcast_proto::txn::{Config, TxnFactory};
use rmcast_proto::{Digest, EngineChoice, Event, NodeId, Qos};
use std::time::Duration;

/// What the paper's section 5 measured (a 4.77 MHz PC sending to 386 and 286 machines on a
/// 4 Mbit/s token ring; Tables 2-3 from a 25 MHz 386).
pub mod paper {
    /// Table 1: receivers and the average throughput of a 350,000-byte file, kbit/s.
    pub const TABLE_1_KBPS: [(u32, f64); 5] =
        [(1, 174.7), (2, 149.1), (3, 112.9), (4, 98.7), (5, 95.7)];
    /// Section 5.1: the same file by unicast to one receiver, kbit/s (the average).
    pub const UNICAST_KBPS: f64 = 209.1;
    /// Table 2: receivers and the average round trip of a 1-byte multicast transaction, ms.
    pub const TABLE_2_MS: [(u32, f64); 5] = [(1, 53.2), (2, 53.7), (3, 53.8), (4, 54.0), (5, 58.0)];
    /// Table 3's unicast round trips to Table 2's receivers, in its order (a Flex, two
    /// Zeniths, a Compaq, a Leading Edge), ms: a series of unicasts to the first N takes the
    /// sum of the first N ([`series_ms`]).
    pub const TABLE_3_MS: [f64; 5] = [5.63, 6.85, 6.85, 9.63, 17.02];
    /// Section 5.3: the series of unicasts to Table 2's five receivers, ms.
    pub const SERIES_OF_5_MS: f64 = 45.98;

    /// A series of unicast round trips to Table 2's first `n` receivers (1 to 5), ms.
    pub fn series_ms(n: u32) -> Option<f64> {
        let n = usize::try_from(n).ok()?;
        (1..=TABLE_3_MS.len())
            .contains(&n)
            .then(|| TABLE_3_MS[..n].iter().sum())
    }

    /// A series of unicast transfers of Table 1's file to `n` receivers over one multicast
    /// transaction, in throughput: below 1, multicast is faster (the paper: 1 - this is how
    /// much "slower" the series is, 29.9% at two receivers, 56.3% at five).
    pub fn series_over_multicast(n: u32) -> Option<f64> {
        let (_, kbps) = TABLE_1_KBPS.iter().find(|(m, _)| *m == n)?;
        Some(UNICAST_KBPS / f64::from(n) / kbps)
    }
}

/// The file of Table 1, bytes.
pub const FILE_BYTES: usize = 350_000;
/// The receivers of Tables 1 and 2 (the paper's 1-5, and 8).
pub const RECEIVERS: [u32; 6] = [1, 2, 3, 4, 5, 8];
/// Transactions averaged for Tables 2-3.
pub const ROUND_TRIPS: u64 = 50;
/// The backoff unit of Tables 1-3 (the engine's random backoff before answering the open:
/// up to this times the set size).
pub const BACKOFF_UNIT: Duration = Duration::from_micros(100);

/// The payload of Tables 2-3's "1-byte" transactions.
const SMALL: usize = crate::record::PAYLOAD_HEADER_BYTES;

/// The simulator's record of one run, with each transaction's times.
pub struct Run {
    /// From each submission to its completion at the sender, ms.
    pub completed_ms: Vec<f64>,
    /// From each submission to the last receiver's reply, ms.
    pub answered_ms: Vec<f64>,
    /// Everything the run did.
    pub record: Record,
}

/// The mean of `v` (0 for none).
pub fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// One run of the experiment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Job {
    /// Table 1: the file to this many receivers by one transaction.
    File(u32),
    /// Table 1's baseline: the file to one receiver (a series to N takes N times as long).
    UnicastFile,
    /// Tables 2-3: 1-byte transactions to this many receivers.
    Latency(u32),
    /// Table 3's baseline: 1-byte transactions to one receiver.
    UnicastLatency,
    /// Section 5.2: 16 receivers, a receive buffer of 8 datagrams; the backoff unit, and
    /// whether every packet (not only the first) is answered after a backoff.
    Implosion(Duration, bool),
}

/// What one job measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// The job.
    pub job: Job,
    /// Transactions sent.
    pub sent: usize,
    /// Transactions completed at the sender (committed at every receiver).
    pub completed: usize,
    /// Transactions answered by every receiver.
    pub answered: usize,
    /// Mean time to completion, ms.
    pub completed_ms: f64,
    /// Mean time to the last reply, ms.
    pub answered_ms: f64,
    /// Datagrams dropped by full receive buffers.
    pub rx_drops: u64,
}

impl Job {
    /// Runs the job.
    pub fn run(self) -> Measured {
        let (receivers, bytes, messages, backoff, every, rx) = match self {
            Job::File(n) => (n, FILE_BYTES, 1, BACKOFF_UNIT, false, None),
            Job::UnicastFile => (1, FILE_BYTES, 1, BACKOFF_UNIT, false, None),
            // The paper's 1-byte message is the smallest the simulator can tag (its sender and
            // number).
            Job::Latency(n) => (n, SMALL, ROUND_TRIPS, BACKOFF_UNIT, false, None),
            Job::UnicastLatency => (1, SMALL, ROUND_TRIPS, BACKOFF_UNIT, false, None),
            Job::Implosion(unit, every) => (16, SMALL, 20, unit, every, Some(8)),
        };
        let r = run(
            receivers,
            bytes,
            messages,
            engine(receivers as usize, backoff, every),
            rx,
        );
        Measured {
            job: self,
            sent: r.record.submissions.len(),
            completed: r.completed_ms.len(),
            answered: r.answered_ms.len(),
            completed_ms: mean(&r.completed_ms),
            answered_ms: mean(&r.answered_ms),
            rx_drops: r.record.net.drops_rx_overflow,
        }
    }
}

/// A txn engine that answers every message it delivers from another member with one byte, as
/// a server does: the transactions' replies in the simulator (which never calls `reply`).
struct AutoReply {
    inner: rmcast_proto::txn::Txn,
    now: rmcast_proto::Time,
}

impl rmcast_proto::Engine for AutoReply {
    fn handle_datagram(&mut self, now: rmcast_proto::Time, from: rmcast_proto::NodeId, d: &[u8]) {
        self.now = now;
        self.inner.handle_datagram(now, from, d)
    }
    fn handle_timeout(&mut self, now: rmcast_proto::Time) {
        self.now = now;
        self.inner.handle_timeout(now)
    }
    fn submit(
        &mut self,
        now: rmcast_proto::Time,
        payload: bytes::Bytes,
        qos: Qos,
    ) -> Result<u64, rmcast_proto::SendError> {
        self.now = now;
        self.inner.submit(now, payload, qos)
    }
    fn leave(&mut self, now: rmcast_proto::Time) {
        self.inner.leave(now)
    }
    fn poll_transmit(
        &mut self,
        now: rmcast_proto::Time,
        buf: &mut Vec<u8>,
    ) -> Option<rmcast_proto::Transmit> {
        self.inner.poll_transmit(now, buf)
    }
    fn poll_event(&mut self) -> Option<Event> {
        let e = self.inner.poll_event()?;
        if let Event::Deliver(d) = &e {
            if d.sender != self.inner.node_id() {
                let r =
                    self.inner
                        .reply(self.now, d.sender, d.msg, bytes::Bytes::from_static(b"y"));
                assert!(r.is_ok(), "{r:?}");
            }
        }
        Some(e)
    }
    fn poll_timeout(&self) -> Option<rmcast_proto::Time> {
        self.inner.poll_timeout()
    }
    fn node_id(&self) -> rmcast_proto::NodeId {
        self.inner.node_id()
    }
    fn guarantees(&self) -> rmcast_proto::Guarantees {
        self.inner.guarantees()
    }
    fn info(&self) -> rmcast_proto::GroupInfo {
        self.inner.info()
    }
    fn counters(&self) -> &rmcast_proto::Counters {
        self.inner.counters()
    }
    fn can_submit(&self) -> bool {
        self.inner.can_submit()
    }
}

/// The engine for the tables: `receivers` in every set (min = max), 1 ms per receiver of
/// BACKOFF_TIME unless `backoff` is off, replies from every receiver.
pub fn engine(receivers: usize, backoff: Duration, use_backoff: bool) -> EngineChoice {
    let cfg = Config {
        min_receivers: receivers,
        max_receivers: receivers,
        backoff_unit: backoff,
        use_backoff,
        ..Config::default()
    };
    crate::custom_engine("txn", TxnFactory::declared(), move |me, now, role| {
        let settings = rmcast_proto::EngineSettings::default();
        let p = rmcast_proto::EngineParams {
            role,
            group: 1,
            me,
            max_datagram_bytes: crate::config::MAX_DATAGRAM_BYTES,
            now,
            seed: 77 + u64::from(me.0),
            settings: &settings,
        };
        Box::new(AutoReply {
            inner: rmcast_proto::txn::Txn::new(cfg.clone(), &p),
            now,
        })
    })
}

/// One sender (host 0), `receivers` others, `messages` messages of `bytes` one at a time on a
/// shared 4 Mb/s medium (the paper's ProNET-4 token ring, charged Ethernet framing), or with
/// `rx_inflight`, on an infinitely fast switched network that holds at most that many
/// datagrams towards one host (its receive buffer).
pub fn run(
    receivers: u32,
    bytes: usize,
    messages: u64,
    engine: EngineChoice,
    rx_inflight: Option<usize>,
) -> Run {
    let cfg = SimConfig {
        members: receivers + 1,
        engine,
        net: NetConfig {
            link: LinkParams {
                latency: Duration::from_micros(100),
                ..LinkParams::default()
            },
            // A shared medium, or (with a receive buffer to overflow) a switched network whose
            // answers all arrive together.
            bandwidth_bps: rx_inflight.is_none().then_some(4_000_000),
            shared_medium: rx_inflight.is_none(),
            frame_overhead_bytes: crate::config::ETHERNET_FRAME_OVERHEAD_BYTES,
            uplink_queue_datagrams: 4096,
            rx_inflight_datagrams: rx_inflight.unwrap_or(16_384),
            ..NetConfig::default()
        },
        workload: Workload {
            senders: vec![NodeId(0)],
            messages_per_sender: messages,
            message_bytes: bytes,
            // One transaction every 50 ms (a file: 5 s): each alone on the network.
            load: Load::OpenLoop {
                interval: Duration::from_millis(if bytes > 1000 { 5000 } else { 50 }),
            },
            qos: Qos::Reliable,
            ..Workload::default()
        },
        ..SimConfig::default()
    };
    let record = crate::simulate(&cfg);
    let h = &record.hosts[0];
    let mut completed_ms = Vec::new();
    let mut answered_ms = Vec::new();
    for s in &record.submissions {
        let at = |pick: &dyn Fn(&Event<Digest>) -> bool, nth: usize| {
            h.events
                .iter()
                .filter(|e| pick(&e.event))
                .nth(nth)
                .map(|e| e.at)
        };
        let c = at(&|e| *e == Event::SendComplete { msg: s.msg }, 0);
        let r = at(
            &|e| matches!(e, Event::Reply(r) if r.request == s.msg),
            receivers as usize - 1,
        );
        // (The run ends once everything is delivered: the last replies may be cut off.)
        if let Some(c) = c {
            completed_ms.push((c.0 - s.at.0) as f64 / 1e6);
        }
        if let Some(r) = r {
            answered_ms.push((r.0 - s.at.0) as f64 / 1e6);
        }
    }
    Run {
        completed_ms,
        answered_ms,
        record,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The transcribed values give what the paper's text computes from them.
    #[test]
    fn the_papers_tables_give_its_own_sums_and_ratios() {
        let five = paper::series_ms(5).expect("five receivers");
        assert!((five - paper::SERIES_OF_5_MS).abs() < 1e-9, "{five}");
        assert_eq!(paper::series_ms(6), None);
        // "a 16.45% drop" at one receiver, the series "29.9% slower" at two, "56.3%" at five.
        let one = paper::series_over_multicast(1).expect("1");
        assert!((1.0 - 1.0 / one - 0.1645).abs() < 5e-4, "{one}");
        let two = paper::series_over_multicast(2).expect("2");
        assert!((1.0 - two - 0.299).abs() < 5e-4, "{two}");
        let five = paper::series_over_multicast(5).expect("5");
        assert!((1.0 - five - 0.563).abs() < 5e-4, "{five}");
    }

    /// A multicast transaction to two receivers commits, every receiver answers, and a small
    /// one takes less than a series of two unicast ones (the paper's shape at N = 2 is the
    /// opposite: its unicast was ten times cheaper; here each costs the same network).
    #[test]
    fn transactions_complete_and_are_answered() {
        let m = Job::Latency(2).run();
        assert_eq!((m.sent, m.completed, m.answered), (50, 50, 50));
        assert!(m.answered_ms > 0.0);
        let u = Job::UnicastLatency.run();
        assert_eq!(u.answered, 50);
        assert!(m.answered_ms < 2.0 * u.answered_ms, "{m:?} {u:?}");
    }
}
