//! The send latency the runtime measures: from the moment the engine takes an own message
//! (`submit`) to its [`rmcast_proto::Event::SendComplete`], in fixed buckets that the I/O thread
//! fills and any handle reads ([`crate::GroupSender::send_latency`]). Always on: one clock
//! read is already made per loop turn, and recording is a few relaxed atomic stores.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the buckets in seconds (the last bucket, above them, is `+Inf`): from
/// loopback round trips (tens of µs) to a send held through a recovery (seconds).
pub const SEND_LATENCY_BOUNDS: [f64; 16] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0,
];

/// A reading of a group's send latency histogram.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SendLatency {
    /// `(upper bound in seconds, sends in this bucket)`, not cumulative; the last bound is
    /// `f64::INFINITY`.
    pub buckets: Vec<(f64, u64)>,
    /// The sum of the latencies, in seconds.
    pub sum_seconds: f64,
    /// Sends measured.
    pub count: u64,
}

/// The histogram's cells: written by the I/O thread only, read by anyone.
#[derive(Default)]
pub(crate) struct LatencyCells {
    buckets: [AtomicU64; SEND_LATENCY_BOUNDS.len() + 1],
    sum_ns: AtomicU64,
    count: AtomicU64,
}

impl LatencyCells {
    /// Record one send that took `ns` nanoseconds.
    pub(crate) fn record(&self, ns: u64) {
        let secs = ns as f64 / 1e9;
        let i = SEND_LATENCY_BOUNDS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(SEND_LATENCY_BOUNDS.len());
        // One writer (the I/O thread): load and store need no read-modify-write.
        for (c, n) in [(&self.buckets[i], 1), (&self.sum_ns, ns), (&self.count, 1)] {
            c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        }
    }

    /// What has been recorded so far. Read without a lock: a reading taken while a send is
    /// recorded may count it in one field and not yet in another.
    pub(crate) fn snapshot(&self) -> SendLatency {
        let bounds = SEND_LATENCY_BOUNDS.iter().copied().chain([f64::INFINITY]);
        SendLatency {
            buckets: bounds
                .zip(&self.buckets)
                .map(|(b, c)| (b, c.load(Ordering::Relaxed)))
                .collect(),
            sum_seconds: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
            count: self.count.load(Ordering::Relaxed),
        }
    }
}

/// When each of the last [`SendClock::SLOTS`] own messages was taken by the engine, by message
/// number: a fixed ring instead of a map, so that timing every send allocates nothing. A send
/// still outstanding after that many later ones lost its slot and is not measured.
pub(crate) struct SendClock {
    slots: Box<[(u64, u64)]>,
}

impl SendClock {
    const SLOTS: usize = 4096;
    /// A slot holding no message (message numbers start from 0 or 1 and never reach it).
    const EMPTY: u64 = u64::MAX;

    pub(crate) fn new() -> SendClock {
        SendClock {
            slots: vec![(Self::EMPTY, 0); Self::SLOTS].into_boxed_slice(),
        }
    }

    /// Message `msg` was taken at `now_ns`.
    pub(crate) fn start(&mut self, msg: u64, now_ns: u64) {
        self.slots[msg as usize % Self::SLOTS] = (msg, now_ns);
    }

    /// Message `msg` completed at `now_ns`: how long it took, if it was timed.
    pub(crate) fn finish(&mut self, msg: u64, now_ns: u64) -> Option<u64> {
        let slot = &mut self.slots[msg as usize % Self::SLOTS];
        if slot.0 != msg {
            return None;
        }
        let took = now_ns.saturating_sub(slot.1);
        *slot = (Self::EMPTY, 0);
        Some(took)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_fall_in_the_bucket_of_their_latency() {
        let cells = LatencyCells::default();
        let mut clock = SendClock::new();
        clock.start(1, 1_000);
        clock.start(2, 2_000);
        // 40 µs and 3 ms after their start.
        cells.record(clock.finish(1, 41_000).unwrap());
        cells.record(clock.finish(2, 3_002_000).unwrap());
        // Completed twice, or never started: not measured.
        assert_eq!(clock.finish(2, 4_000_000), None);
        assert_eq!(clock.finish(3, 4_000_000), None);
        let s = cells.snapshot();
        assert_eq!(s.count, 2);
        assert!((s.sum_seconds - 0.003_04).abs() < 1e-9, "{}", s.sum_seconds);
        assert_eq!(s.buckets.len(), SEND_LATENCY_BOUNDS.len() + 1);
        assert_eq!(s.buckets[0], (0.000_05, 1));
        assert_eq!(s.buckets[6], (0.005, 1));
        assert_eq!(s.buckets.iter().map(|b| b.1).sum::<u64>(), 2);
        assert_eq!(s.buckets.last().unwrap().0, f64::INFINITY);
    }

    #[test]
    fn a_slot_taken_by_a_later_send_is_not_measured_for_the_earlier_one() {
        let mut clock = SendClock::new();
        clock.start(5, 0);
        clock.start(5 + SendClock::SLOTS as u64, 10);
        assert_eq!(clock.finish(5, 100), None);
        assert_eq!(clock.finish(5 + SendClock::SLOTS as u64, 100), Some(90));
    }
}
