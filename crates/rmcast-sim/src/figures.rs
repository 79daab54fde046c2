//! The figures of a run: what the protocol cost and how fast it went.
//!
//! Datagram counts come from the engines' own [`rmcast_proto::Counters`], taken from the moment
//! the workload starts (so the joins of the initial members are not charged to the messages); a
//! multicast counts as one datagram, as on a network with IP multicast. Latency is measured from
//! the `submit` call to the delivery at each other member (the sender's own delivery is left
//! out). Network drops are the simulator's own counts.

use crate::record::Record;
use rmcast_proto::Event;
use rmcast_proto::{Counters, Recovery};
use std::collections::{HashMap, HashSet};

/// Figures of one run (or the mean over a sweep, see [`Figures::mean`]).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Figures {
    /// Messages accepted by `submit`.
    pub messages: u64,
    /// Deliveries at all hosts.
    pub deliveries: u64,
    /// Datagrams sent by all engines since the workload started, failure-detection probes
    /// left out (they depend on time, not on the messages; see `probes`).
    pub datagrams: u64,
    /// `datagrams / messages`.
    pub datagrams_per_broadcast: f64,
    /// Failure-detection datagrams (probes and answers) since the workload started.
    pub probes: u64,
    /// Recovery datagrams (invitations, votes, results, acknowledgements).
    pub recovery_datagrams: u64,
    /// Hosts that crashed.
    pub crashes: u64,
    /// Hosts expelled (left out of a rebuilt group).
    pub expelled: u64,
    /// Resets the group went through: the newest incarnation the members at the end reached.
    pub resets: u64,
    /// Reset attempts that found too few members (the group waited).
    pub resets_failed: u64,
    /// From the first crash to the first failure found by a host that did not crash, in
    /// milliseconds (0: no crash, or none found).
    pub detection_ms: f64,
    /// From the first crash until every member at the end installed a reset after it, in
    /// milliseconds: detection plus ResetGroup (0: no crash, or no reset).
    pub recovery_ms: f64,
    /// Median latency from submit to delivery at another member, in milliseconds.
    pub latency_p50_ms: f64,
    /// 99th percentile of that latency, in milliseconds.
    pub latency_p99_ms: f64,
    /// Distinct messages delivered per simulated second, from the workload start to the last
    /// delivery.
    pub throughput_msgs_per_s: f64,
    /// Retransmissions counted by the engines since the workload started.
    pub retransmissions: u64,
    /// NACKs (retransmission requests) sent since the workload started.
    pub nacks: u64,
    /// Datagram copies lost to the loss probability.
    pub drops_loss: u64,
    /// Copies cut by partitions.
    pub drops_partition: u64,
    /// Copies dropped by a paused host's full receive buffer.
    pub drops_pause_overflow: u64,
    /// Datagrams dropped by full uplink queues.
    pub drops_uplink_queue: u64,
    /// Extra copies made by duplication.
    pub duplicated: u64,
    /// Simulated time of the run, in milliseconds.
    pub simulated_ms: f64,
}

fn delta(end: &Counters, start: &Counters, f: fn(&Counters) -> u64) -> u64 {
    f(end).saturating_sub(f(start))
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1e6
}

/// Computes the figures of a run from its record.
pub fn figures(rec: &Record) -> Figures {
    let mut f = Figures {
        messages: rec.submissions.len() as u64,
        drops_loss: rec.net.drops_loss,
        drops_partition: rec.net.drops_partition,
        drops_pause_overflow: rec.net.drops_pause_overflow,
        drops_uplink_queue: rec.net.drops_uplink_queue,
        duplicated: rec.net.duplicated,
        simulated_ms: rec.end_time.0 as f64 / 1e6,
        ..Figures::default()
    };
    for h in &rec.hosts {
        let (end, start) = (&h.counters, &h.counters_at_workload_start);
        f.probes += delta(end, start, |c| c.probes_sent);
        f.recovery_datagrams += delta(end, start, |c| c.recovery_sent);
        f.datagrams += delta(end, start, |c| c.datagrams_sent - c.probes_sent);
        f.retransmissions += delta(end, start, |c| c.retransmissions);
        f.nacks += delta(end, start, |c| c.nacks_sent);
    }
    if f.messages > 0 {
        f.datagrams_per_broadcast = f.datagrams as f64 / f.messages as f64;
    }
    let submitted: HashMap<_, _> = rec
        .submissions
        .iter()
        .map(|s| ((s.sender, s.msg), s.at))
        .collect();
    let mut latencies = Vec::new();
    let mut distinct = HashSet::new();
    let mut last = rec.workload_start;
    for h in &rec.hosts {
        for e in &h.events {
            let Event::Deliver(d) = &e.event else {
                continue;
            };
            f.deliveries += 1;
            distinct.insert((d.sender, d.msg));
            last = last.max(e.at);
            if d.sender != h.id {
                if let Some(at) = submitted.get(&(d.sender, d.msg)) {
                    latencies.push(e.at.0.saturating_sub(at.0));
                }
            }
        }
    }
    recovery_times(rec, &mut f);
    latencies.sort_unstable();
    f.latency_p50_ms = percentile(&latencies, 0.50);
    f.latency_p99_ms = percentile(&latencies, 0.99);
    let span_s = last.0.saturating_sub(rec.workload_start.0) as f64 / 1e9;
    if span_s > 0.0 {
        f.throughput_msgs_per_s = distinct.len() as f64 / span_s;
    }
    f
}

/// Detection and recovery times after the first crash.
fn recovery_times(rec: &Record, f: &mut Figures) {
    f.crashes = rec.hosts.iter().filter(|h| h.crashed_at.is_some()).count() as u64;
    f.expelled = rec.hosts.iter().filter(|h| h.expelled()).count() as u64;
    f.resets_failed = rec
        .hosts
        .iter()
        .flat_map(|h| &h.events)
        .filter(|e| matches!(e.event, Event::Recovery(Recovery::ResetFailed { .. })))
        .count() as u64;
    f.resets = rec
        .members_at_end()
        .flat_map(|h| &h.events)
        .filter_map(|e| match &e.event {
            Event::Recovery(Recovery::Reset { incarnation, .. }) => Some(*incarnation as u64),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let Some(crash) = rec.hosts.iter().filter_map(|h| h.crashed_at).min() else {
        return;
    };
    // When a host first saw a recovery event of some kind after the crash.
    let after = |h: &crate::record::HostRecord, want: fn(&Recovery) -> bool| {
        h.events
            .iter()
            .find(|e| e.at >= crash && matches!(&e.event, Event::Recovery(r) if want(r)))
            .map(|e| e.at)
    };
    let ms = |t: rmcast_proto::Time| t.0.saturating_sub(crash.0) as f64 / 1e6;
    if let Some(t) = rec
        .hosts
        .iter()
        .filter(|h| h.crashed_at.is_none())
        .filter_map(|h| after(h, |r| matches!(r, Recovery::Failed { .. })))
        .min()
    {
        f.detection_ms = ms(t);
    }
    let resets: Option<Vec<_>> = rec
        .members_at_end()
        .map(|h| after(h, |r| matches!(r, Recovery::Reset { .. })))
        .collect();
    if let Some(t) = resets.and_then(|v| v.into_iter().max()) {
        f.recovery_ms = ms(t);
    }
}

impl Figures {
    /// The mean of `g` over the runs where it is not zero (detection and recovery times exist
    /// only in runs with a crash).
    pub fn mean_nonzero(all: &[Figures], g: fn(&Figures) -> f64) -> f64 {
        let v: Vec<f64> = all.iter().map(g).filter(|x| *x > 0.0).collect();
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    }

    /// The mean of every field over several runs (counts are rounded down; detection and
    /// recovery times over the runs that had them).
    pub fn mean(all: &[Figures]) -> Figures {
        if all.is_empty() {
            return Figures::default();
        }
        let n = all.len() as f64;
        let fm = |g: fn(&Figures) -> f64| all.iter().map(g).sum::<f64>() / n;
        let um = |g: fn(&Figures) -> u64| all.iter().map(g).sum::<u64>() / all.len() as u64;
        Figures {
            messages: um(|f| f.messages),
            deliveries: um(|f| f.deliveries),
            datagrams: um(|f| f.datagrams),
            datagrams_per_broadcast: fm(|f| f.datagrams_per_broadcast),
            probes: um(|f| f.probes),
            recovery_datagrams: um(|f| f.recovery_datagrams),
            crashes: um(|f| f.crashes),
            expelled: um(|f| f.expelled),
            resets: um(|f| f.resets),
            resets_failed: um(|f| f.resets_failed),
            detection_ms: Figures::mean_nonzero(all, |f| f.detection_ms),
            recovery_ms: Figures::mean_nonzero(all, |f| f.recovery_ms),
            latency_p50_ms: fm(|f| f.latency_p50_ms),
            latency_p99_ms: fm(|f| f.latency_p99_ms),
            throughput_msgs_per_s: fm(|f| f.throughput_msgs_per_s),
            retransmissions: um(|f| f.retransmissions),
            nacks: um(|f| f.nacks),
            drops_loss: um(|f| f.drops_loss),
            drops_partition: um(|f| f.drops_partition),
            drops_pause_overflow: um(|f| f.drops_pause_overflow),
            drops_uplink_queue: um(|f| f.drops_uplink_queue),
            duplicated: um(|f| f.duplicated),
            simulated_ms: fm(|f| f.simulated_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_ranks() {
        let v: Vec<u64> = (1..=100).map(|i| i * 1_000_000).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[7_000_000], 0.99), 7.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn mean_averages() {
        let a = Figures {
            datagrams_per_broadcast: 2.0,
            retransmissions: 4,
            ..Figures::default()
        };
        let b = Figures {
            datagrams_per_broadcast: 3.0,
            retransmissions: 6,
            ..Figures::default()
        };
        let m = Figures::mean(&[a, b]);
        assert_eq!(m.datagrams_per_broadcast, 2.5);
        assert_eq!(m.retransmissions, 5);
    }
}
