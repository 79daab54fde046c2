//! The Internet measurements of "Reliable Multicast Transport Protocol (RMTP)" (Paul, Sabnani,
//! Lin and Bhattacharyya), section V, in the simulator: 18 receivers in five areas (the shape
//! of Fig. 9), a 1 MB file in 512-byte packets with the connection parameters of Table III,
//! one DR per area. M1 multicasts to area A1 (the sender's LAN), M2 to areas A1 to A4, M3 to
//! all five (A5 far away and lossy, as the paper's Taiwan site). Per run: the throughput of the
//! slowest, average and fastest receiver (Tables IV to VI), the packets retransmitted by the
//! sender and by each DR and the duplicates received in each area, in percent of the file, and
//! the slow starts; the same with DRs switched off (every receiver reports to the sender).
//!
//! The losses are a model of the paper's, not a measurement: a loss on an area's router link
//! (shared by the whole area, DR included; the sender repairs it) and a last-hop loss per
//! receiver (the DR repairs it). A3 (six receivers) and A5 lose most, A1 least.

use crate::config::{Limits, LinkParams, Load, NetConfig, SimConfig, Workload};
use crate::run;
use crate::topology::{Area, Topology};
use rmcast_proto::tree::{DataStore, MemStore, TreeConfig, TreeFactory};
use rmcast_proto::{EngineChoice, Event, NodeId, Qos, Time};
use std::sync::Arc;
use std::time::Duration;

/// Which areas a measurement multicasts to (section V).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Measurement {
    /// M1: area A1, the sender's LAN.
    M1,
    /// M2: areas A1 to A4.
    M2,
    /// M3: all five areas.
    M3,
}

impl Measurement {
    /// Areas taking part.
    pub fn areas(self) -> usize {
        match self {
            Measurement::M1 => 1,
            Measurement::M2 => 4,
            Measurement::M3 => 5,
        }
    }
}

/// The paper's Tables IV to VI (section V): ten runs of each measurement on the Internet of
/// January 1995, transcribed from the paper. In percent of the file (2,048 packets), as the
/// paper gives them; Table IV's duplicates are zero ("No duplicate reception observed").
pub mod paper {
    use super::{Measurement, Outcome};

    /// One row of a table: a run as the paper reports it.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct Run {
        /// Throughput of the slowest, average and fastest receiver, kbit/s.
        pub throughput_kbps: (f64, f64, f64),
        /// Packets retransmitted by the sender, % of the file.
        pub sender_retx_pct: f64,
        /// Packets retransmitted by each DR, % of the file.
        pub dr_retx_pct: &'static [f64],
        /// Duplicates received in each area, % of the file.
        pub dup_pct: &'static [f64],
        /// Slow starts of the sender.
        pub slow_starts: u64,
    }

    impl Run {
        /// The row as an [`Outcome`], so that the paper's tables and ours are summed up by the
        /// same code ([`super::Summary::of`]).
        pub fn outcome(&self) -> Outcome {
            Outcome {
                passed: true,
                throughput_kbps: self.throughput_kbps,
                sender_retx_pct: self.sender_retx_pct,
                dr_retx_pct: self.dr_retx_pct.to_vec(),
                dup_pct: self.dup_pct.to_vec(),
                slow_starts: self.slow_starts,
            }
        }
    }

    const fn run(
        throughput_kbps: (f64, f64, f64),
        sender_retx_pct: f64,
        dr_retx_pct: &'static [f64],
        dup_pct: &'static [f64],
        slow_starts: u64,
    ) -> Run {
        Run {
            throughput_kbps,
            sender_retx_pct,
            dr_retx_pct,
            dup_pct,
            slow_starts,
        }
    }

    /// Table IV: multicasting to area A1 (M1).
    pub const TABLE_IV: [Run; 10] = [
        run((90.33, 90.35, 90.38), 0.00, &[0.00], &[0.00], 1),
        run((91.33, 91.37, 91.38), 0.00, &[0.05], &[0.00], 1),
        run((90.62, 90.64, 90.65), 0.00, &[0.00], &[0.00], 1),
        run((81.38, 81.40, 81.41), 0.00, &[0.00], &[0.00], 1),
        run((73.05, 73.08, 73.10), 0.00, &[1.37], &[0.00], 1),
        run((86.92, 86.93, 86.95), 0.00, &[0.00], &[0.00], 1),
        run((91.78, 91.78, 91.79), 0.00, &[0.00], &[0.00], 1),
        run((92.26, 92.29, 92.31), 0.00, &[0.00], &[0.00], 1),
        run((91.62, 91.65, 91.68), 0.00, &[0.00], &[0.00], 1),
        run((91.07, 91.22, 91.31), 0.00, &[0.00], &[0.00], 1),
    ];

    /// Table V: multicasting to areas A1 to A4 (M2).
    pub const TABLE_V: [Run; 10] = [
        run(
            (36.43, 36.46, 36.48),
            4.93,
            &[0.10, 0.29, 8.30, 0.83],
            &[0.10, 0.00, 3.56, 0.00],
            32,
        ),
        run(
            (24.50, 24.53, 24.56),
            14.11,
            &[0.00, 2.44, 28.12, 2.20],
            &[0.00, 0.00, 5.32, 0.05],
            113,
        ),
        run(
            (11.46, 11.48, 11.49),
            54.88,
            &[0.44, 19.48, 83.35, 2.00],
            &[0.00, 0.00, 12.35, 0.00],
            599,
        ),
        run(
            (21.40, 21.42, 21.44),
            10.64,
            &[0.05, 0.34, 14.31, 3.71],
            &[0.10, 0.00, 3.22, 0.15],
            136,
        ),
        run(
            (28.14, 28.15, 28.15),
            6.49,
            &[0.59, 0.59, 9.23, 2.49],
            &[0.00, 0.00, 1.76, 0.00],
            73,
        ),
        run(
            (28.57, 28.57, 28.58),
            6.59,
            &[14.11, 0.44, 10.55, 2.69],
            &[0.00, 0.00, 2.83, 0.00],
            65,
        ),
        run(
            (38.79, 38.82, 38.91),
            2.93,
            &[0.00, 0.54, 8.94, 0.54],
            &[0.00, 0.00, 0.20, 0.10],
            29,
        ),
        run(
            (41.09, 41.10, 41.11),
            3.81,
            &[0.00, 0.24, 10.06, 1.07],
            &[0.00, 0.00, 2.34, 0.00],
            23,
        ),
        run(
            (39.72, 39.73, 39.74),
            3.61,
            &[0.49, 0.24, 8.54, 0.10],
            &[0.00, 0.00, 2.39, 0.00],
            26,
        ),
        run(
            (41.91, 41.93, 41.93),
            3.71,
            &[0.00, 0.05, 11.87, 0.78],
            &[0.00, 0.00, 0.63, 0.05],
            22,
        ),
    ];

    /// Table VI: multicasting to all areas (M3).
    pub const TABLE_VI: [Run; 10] = [
        run(
            (20.81, 20.81, 20.82),
            19.29,
            &[0.88, 0.34, 17.09, 1.66, 18.56],
            &[0.00, 0.00, 1.03, 0.00, 0.15],
            161,
        ),
        run(
            (21.27, 21.34, 21.36),
            16.80,
            &[0.24, 0.98, 14.36, 2.20, 15.43],
            &[0.29, 0.00, 1.90, 0.00, 0.15],
            144,
        ),
        run(
            (20.67, 20.71, 20.72),
            18.55,
            &[0.15, 0.20, 17.58, 1.22, 19.53],
            &[0.00, 0.00, 1.46, 0.00, 0.10],
            153,
        ),
        run(
            (18.17, 18.22, 18.23),
            20.41,
            &[0.10, 0.54, 29.88, 1.03, 24.12],
            &[0.00, 0.00, 1.03, 0.00, 0.05],
            212,
        ),
        run(
            (18.27, 18.85, 18.97),
            23.54,
            &[0.68, 0.20, 21.29, 2.20, 20.90],
            &[0.00, 0.00, 3.03, 0.00, 0.10],
            206,
        ),
        run(
            (25.47, 25.53, 25.55),
            13.48,
            &[1.03, 0.10, 10.55, 2.39, 14.26],
            &[0.00, 0.15, 0.88, 0.20, 0.00],
            100,
        ),
        run(
            (16.62, 16.62, 16.63),
            24.76,
            &[0.05, 0.00, 14.70, 0.68, 35.21],
            &[0.00, 0.00, 1.42, 0.00, 0.00],
            264,
        ),
        run(
            (17.52, 17.57, 17.58),
            27.00,
            &[0.15, 0.20, 10.55, 0.73, 35.30],
            &[0.00, 0.00, 0.83, 0.00, 0.10],
            232,
        ),
        run(
            (19.28, 19.30, 19.30),
            22.02,
            &[0.10, 0.05, 8.25, 0.68, 29.79],
            &[0.00, 0.00, 1.17, 0.00, 0.00],
            197,
        ),
        run(
            (20.67, 20.83, 20.89),
            15.77,
            &[0.00, 0.20, 7.96, 0.20, 24.66],
            &[0.00, 0.00, 2.73, 0.00, 0.05],
            153,
        ),
    ];

    /// The mean throughputs the paper prints under Tables IV, V and VI, in kbit/s.
    pub const MEAN_THROUGHPUT_KBPS: [f64; 3] = [88.07, 31.22, 19.98];

    /// The table of measurement `m`, and its name.
    pub fn table(m: Measurement) -> (&'static str, &'static [Run]) {
        match m {
            Measurement::M1 => ("Table IV", &TABLE_IV),
            Measurement::M2 => ("Table V", &TABLE_V),
            Measurement::M3 => ("Table VI", &TABLE_VI),
        }
    }
}

/// One area of the experiment's network.
#[derive(Clone, Debug, PartialEq)]
pub struct AreaSpec {
    /// Receivers, the DR included.
    pub receivers: u32,
    /// Routers between the area and the sender's LAN (0 for A1, the sender's LAN itself).
    pub hops: u8,
    /// One-way latency to the sender's LAN.
    pub latency_ms: f64,
    /// Loss on the area's router link (the whole area misses the packet).
    pub link_loss: f64,
    /// Loss on the last hop to each receiver of the area.
    pub lan_loss: f64,
}

/// The five areas: 3, 3, 6, 3 and 3 receivers (18, as in section V; the paper gives A3's six).
pub fn areas() -> Vec<AreaSpec> {
    let a = |receivers, hops, latency_ms, link_loss, lan_loss| AreaSpec {
        receivers,
        hops,
        latency_ms,
        link_loss,
        lan_loss,
    };
    vec![
        a(3, 0, 0.0, 0.0, 0.0005),
        a(3, 3, 15.0, 0.002, 0.002),
        a(6, 4, 25.0, 0.02, 0.05),
        a(3, 3, 20.0, 0.005, 0.006),
        a(3, 8, 150.0, 0.04, 0.12),
    ]
}

/// How the runs are made.
#[derive(Clone, Debug, PartialEq)]
pub struct Setup {
    /// Packets of the file (2048 of 512 bytes: 1 MB).
    pub packets: u64,
    /// The connection parameters (Table III).
    pub params: TreeConfig,
    /// The areas.
    pub areas: Vec<AreaSpec>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            packets: 2048,
            params: TreeConfig::default(),
            areas: areas(),
        }
    }
}

/// What one run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// Whether every receiver got the whole file and every checker passed.
    pub passed: bool,
    /// Throughput of the slowest, average and fastest receiver in kbit/s.
    pub throughput_kbps: (f64, f64, f64),
    /// Packets retransmitted by the sender, in percent of the file.
    pub sender_retx_pct: f64,
    /// Packets retransmitted by each area's DR, in percent of the file (empty without DRs).
    pub dr_retx_pct: Vec<f64>,
    /// Duplicate packets received in each area, in percent of the file.
    pub dup_pct: Vec<f64>,
    /// Slow starts of the sender.
    pub slow_starts: u64,
}

/// Each column of a measurement's table summed up over its runs, the paper's
/// ([`paper::Run::outcome`]) or ours, so that the two can be printed side by side.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Runs summed up.
    pub runs: usize,
    /// Mean over the runs of the average receiver's throughput (the paper's "mean
    /// throughput"), kbit/s.
    pub mean_kbps: f64,
    /// Lowest and highest average throughput of a run, kbit/s.
    pub avg_range_kbps: (f64, f64),
    /// Largest gap in a run between its fastest and its slowest receiver, in percent of its
    /// average (the paper: receivers "take about the same time").
    pub max_spread_pct: f64,
    /// Mean over the runs of the sender's retransmissions, % of the file.
    pub sender_retx_pct: f64,
    /// Mean over the runs of each DR's retransmissions, % of the file.
    pub dr_retx_pct: Vec<f64>,
    /// For each DR, the runs in which it retransmitted more than the sender.
    pub dr_above_sender: Vec<usize>,
    /// Mean over the runs of each area's duplicates, % of the file.
    pub dup_pct: Vec<f64>,
    /// Mean over the runs of the sender's slow starts.
    pub slow_starts: f64,
}

impl Summary {
    /// Sums up `runs` (all of one measurement, so with as many DRs and areas each).
    pub fn of(runs: &[Outcome]) -> Summary {
        let n = runs.len().max(1) as f64;
        let mean = |f: &dyn Fn(&Outcome) -> f64| runs.iter().map(f).sum::<f64>() / n;
        let column_means = |col: &dyn Fn(&Outcome) -> &Vec<f64>| {
            let width = runs.first().map_or(0, |o| col(o).len());
            (0..width)
                .map(|i| mean(&|o| col(o).get(i).copied().unwrap_or(0.0)))
                .collect::<Vec<_>>()
        };
        let avgs = runs.iter().map(|o| o.throughput_kbps.1);
        let width = runs.first().map_or(0, |o| o.dr_retx_pct.len());
        Summary {
            runs: runs.len(),
            mean_kbps: mean(&|o| o.throughput_kbps.1),
            avg_range_kbps: (
                avgs.clone().fold(f64::INFINITY, f64::min),
                avgs.fold(0.0, f64::max),
            ),
            max_spread_pct: runs
                .iter()
                .map(|o| {
                    let (min, avg, max) = o.throughput_kbps;
                    100.0 * (max - min) / avg.max(1e-9)
                })
                .fold(0.0, f64::max),
            sender_retx_pct: mean(&|o| o.sender_retx_pct),
            dr_retx_pct: column_means(&|o| &o.dr_retx_pct),
            dr_above_sender: (0..width)
                .map(|i| {
                    runs.iter()
                        .filter(|o| o.dr_retx_pct.get(i).is_some_and(|d| *d > o.sender_retx_pct))
                        .count()
                })
                .collect(),
            dup_pct: column_means(&|o| &o.dup_pct),
            slow_starts: mean(&|o| o.slow_starts as f64),
        }
    }
}

/// Hosts of area `i`: `(first, count)`; host 0 is the sender.
fn hosts_of(areas: &[AreaSpec], i: usize) -> (u32, u32) {
    let first = 1 + areas[..i].iter().map(|a| a.receivers).sum::<u32>();
    (first, areas[i].receivers)
}

impl Setup {
    /// The simulator configuration of measurement `m`, with or without DRs, for `seed`.
    pub fn config(&self, m: Measurement, drs: bool, seed: u64) -> SimConfig {
        let areas = &self.areas[..m.areas().min(self.areas.len())];
        let members = 1 + areas.iter().map(|a| a.receivers).sum::<u32>();
        let mut params = self.params.clone();
        params.designated_receivers = if drs {
            (0..areas.len())
                .map(|i| NodeId(hosts_of(areas, i).0))
                .collect()
        } else {
            Vec::new()
        };
        let store = |_: NodeId, _| Box::new(MemStore::default()) as Box<dyn DataStore>;
        let engine = EngineChoice::custom(Arc::new(
            TreeFactory::new(params).with_store(Arc::new(store)),
        ));
        let ms = |v: f64| Duration::from_nanos((v * 1e6) as u64);
        let topo_areas = areas
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let (first, n) = hosts_of(areas, i);
                Area {
                    hosts: (first..first + n).map(NodeId).collect(),
                    parent: None,
                    // The sender's LAN (A1) is an area of its own too, zero routers away in
                    // effect: one hop here, and the TTL compares the same for every area.
                    hops: a.hops.max(1),
                    loss: a.link_loss,
                    lan_loss: a.lan_loss,
                    latency: ms(a.latency_ms),
                }
            })
            .collect();
        SimConfig {
            seed,
            members,
            engine,
            net: NetConfig {
                link: LinkParams {
                    latency: Duration::from_micros(500),
                    ..LinkParams::default()
                },
                topology: Some(Topology {
                    areas: topo_areas,
                    initial_ttl: 64,
                }),
                ..NetConfig::default()
            },
            workload: Workload {
                messages_per_sender: self.packets,
                message_bytes: self.params.packet_size_bytes,
                load: Load::ClosedLoop {
                    in_flight: self.params.send_window_pkts as usize,
                },
                qos: Qos::SourceOrdered,
                start: Time::ZERO + Duration::from_millis(100),
                ..Workload::default()
            },
            limits: Limits {
                quiescence_timeout: Duration::from_secs(24 * 3600),
                check_interval: Duration::from_millis(100),
                ..Limits::default()
            },
            ..SimConfig::default()
        }
    }

    /// Run measurement `m`.
    pub fn run(&self, m: Measurement, drs: bool, seed: u64) -> Outcome {
        let cfg = self.config(m, drs, seed);
        let rep = run(&cfg);
        let rec = &rep.record;
        let start = cfg.workload.start;
        let bits = (self.packets * self.params.packet_size_bytes as u64 * 8) as f64;
        let mut tput = Vec::new();
        for h in rec.hosts.iter().skip(1) {
            let last = h.events.iter().rev().find_map(|e| match e.event {
                Event::Deliver(_) => Some(e.at),
                _ => None,
            });
            if let Some(t) = last {
                let secs = t.saturating_since(start).as_secs_f64().max(1e-9);
                tput.push(bits / secs / 1000.0);
            }
        }
        let pct = |n: u64| 100.0 * n as f64 / self.packets as f64;
        let areas = &self.areas[..m.areas().min(self.areas.len())];
        let mut dr_retx_pct = Vec::new();
        let mut dup_pct = Vec::new();
        for i in 0..areas.len() {
            let (first, n) = hosts_of(areas, i);
            if drs {
                dr_retx_pct.push(pct(rec.hosts[first as usize].counters.retransmissions));
            }
            let dups: u64 = (first..first + n)
                .map(|h| rec.hosts[h as usize].counters.duplicates)
                .sum();
            dup_pct.push(pct(dups));
        }
        let slow_starts = rec.hosts[0]
            .final_state
            .split("slow_starts=")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let n = tput.len().max(1) as f64;
        Outcome {
            passed: rep.passed() && tput.len() == rec.hosts.len() - 1,
            throughput_kbps: (
                tput.iter().copied().fold(f64::INFINITY, f64::min),
                tput.iter().sum::<f64>() / n,
                tput.iter().copied().fold(0.0, f64::max),
            ),
            sender_retx_pct: pct(rec.hosts[0].counters.retransmissions),
            dr_retx_pct,
            dup_pct,
            slow_starts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The transcribed tables give the mean throughputs the paper prints under them, and its
    /// remark on Table VI: DR5 retransmitted more than the sender in seven of ten runs.
    #[test]
    fn the_papers_tables_sum_up_as_the_paper_says() {
        for (m, printed) in [Measurement::M1, Measurement::M2, Measurement::M3]
            .into_iter()
            .zip(paper::MEAN_THROUGHPUT_KBPS)
        {
            let (name, rows) = paper::table(m);
            let rows: Vec<Outcome> = rows.iter().map(paper::Run::outcome).collect();
            let s = Summary::of(&rows);
            assert_eq!(s.runs, 10, "{name}");
            assert!(
                (s.mean_kbps - printed).abs() < 0.01,
                "{name}: {} against the printed {printed}",
                s.mean_kbps
            );
            assert_eq!(s.dr_retx_pct.len(), m.areas(), "{name}");
            assert_eq!(s.dup_pct.len(), m.areas(), "{name}");
        }
        let vi: Vec<Outcome> = paper::TABLE_VI.iter().map(paper::Run::outcome).collect();
        assert_eq!(Summary::of(&vi).dr_above_sender[4], 7);
    }

    #[test]
    fn a_summary_takes_means_ranges_and_counts() {
        let run = |avg: f64, sender: f64, dr: f64| Outcome {
            passed: true,
            throughput_kbps: (avg - 1.0, avg, avg + 1.0),
            sender_retx_pct: sender,
            dr_retx_pct: vec![dr],
            dup_pct: vec![2.0 * dr],
            slow_starts: 4,
        };
        let s = Summary::of(&[run(10.0, 1.0, 3.0), run(20.0, 5.0, 1.0)]);
        assert_eq!(s.mean_kbps, 15.0);
        assert_eq!(s.avg_range_kbps, (10.0, 20.0));
        assert_eq!(s.max_spread_pct, 20.0);
        assert_eq!(s.sender_retx_pct, 3.0);
        assert_eq!(s.dr_retx_pct, vec![2.0]);
        assert_eq!(s.dr_above_sender, vec![1]);
        assert_eq!(s.dup_pct, vec![4.0]);
        assert_eq!(s.slow_starts, 4.0);
    }
}
