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
