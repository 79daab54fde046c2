//! Prometheus metrics of nodes and groups through the Prometheus project's Rust client,
//! [`prometheus_client`] (cargo feature `metrics`): register a node and its groups in your own
//! [`Registry`], and serve the registry's encoding from your own HTTP server, as
//! `rmcast member --metrics-port` does.
//!
//! ```
//! use prometheus_client::registry::Registry;
//! use rmcast::{GroupConfig, Node, NodeConfig, OpenMode};
//!
//! let node = Node::new(NodeConfig::default())?;
//! let group = node.open_group(GroupConfig::new("metrics-doc").mode(OpenMode::Create))?;
//! let mut registry = Registry::default();
//! let metrics = rmcast::metrics::register(&mut registry, &node);
//! metrics.add_group(&group);
//! let mut text = String::new();
//! prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
//! assert!(text.contains("# TYPE rmcast_delivered counter"));
//! # Ok::<(), rmcast::Error>(())
//! ```
//!
//! What is exposed, read at each scrape:
//!
//! * every [`crate::NodeCounters`] field as a counter `rmcast_node_<name>_total`, label `node`;
//! * every [`rmcast_proto::Counters`] field of each group as a counter `rmcast_<name>_total`,
//!   and each counter only its engine keeps as `rmcast_engine_<name>_total`, labels `group`,
//!   `member` and `engine`; the help text is the field's documentation;
//! * levels as gauges: `rmcast_view`, `rmcast_members`, `rmcast_incarnation`,
//!   `rmcast_recovering` (0 or 1), `rmcast_buffered_messages`, `rmcast_buffer_capacity_messages`,
//!   `rmcast_max_datagram_bytes`;
//! * the histogram `rmcast_send_latency_seconds`: from the engine taking an own message to its
//!   completion ([`crate::GroupSender::send_latency`]).
//!
//! The collector holds nothing that keeps a node's I/O thread or a group open: a group whose
//! handles are all dropped (or that left) disappears from the next scrape.

use crate::node::GroupHandle;
use crate::shared::NodeShared;
use crate::{GroupSender, Node};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

/// The labels of a node's metrics.
type NodeLabels = [(&'static str, String); 1];
/// The labels of a group's metrics.
type GroupLabels = [(&'static str, String); 3];

/// The nodes and groups a registry exposes; cheap to clone (clones share the list). Made and
/// registered by [`register`]; add groups with [`RmcastCollector::add_group`].
#[derive(Clone, Debug, Default)]
pub struct RmcastCollector {
    sources: Arc<Mutex<Sources>>,
}

#[derive(Debug, Default)]
struct Sources {
    nodes: Vec<Arc<NodeShared>>,
    groups: Vec<Weak<GroupHandle>>,
}

impl std::fmt::Debug for NodeShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeShared").field("id", &self.id).finish()
    }
}

/// Expose `node`'s runtime counters in `registry`; returns the collector, to which the
/// node's groups are added ([`RmcastCollector::add_group`]). Call once per registry: a
/// second collector would repeat the metric families' descriptions.
pub fn register(registry: &mut Registry, node: &Node) -> RmcastCollector {
    let c = RmcastCollector::default();
    c.add_node(node);
    registry.register_collector(Box::new(c.clone()));
    c
}

impl RmcastCollector {
    /// Expose `node`'s runtime counters too (a process with several nodes).
    pub fn add_node(&self, node: &Node) {
        self.lock().nodes.push(node.shared());
    }

    /// Expose `group`'s counters, levels and send latency, until its last handle is dropped.
    pub fn add_group(&self, group: &GroupSender) {
        let mut s = self.lock();
        s.groups.retain(|g| g.strong_count() > 0);
        s.groups.push(group.downgrade());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sources> {
        // A panic elsewhere while the list was held leaves a list still worth reading.
        self.sources.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One group's reading, taken before anything is encoded.
struct GroupReading {
    labels: GroupLabels,
    counters: Vec<rmcast_proto::CounterField>,
    engine_counters: Vec<(&'static str, u64)>,
    info: rmcast_proto::GroupInfo,
    max_datagram_bytes: usize,
    latency: crate::SendLatency,
}

/// A metric name from a counter's name: letters, digits and `_` only.
fn metric_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

impl Collector for RmcastCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (nodes, groups) = {
            let s = self.lock();
            (s.nodes.clone(), s.groups.clone())
        };
        // Read everything first: each family lists every source under one description.
        let nodes: Vec<(NodeLabels, Vec<rmcast_proto::CounterField>)> = nodes
            .iter()
            .map(|n| {
                (
                    [("node", n.id.to_string())],
                    n.counters.snapshot().described(),
                )
            })
            .collect();
        let groups: Vec<GroupReading> = groups
            .iter()
            .filter_map(GroupSender::upgrade)
            .filter_map(|g| {
                // A group that closed meanwhile has nothing to report.
                let info = g.info().ok()?;
                Some(GroupReading {
                    labels: [
                        ("group", g.name().to_string()),
                        ("member", g.me().to_string()),
                        ("engine", g.engine_kind().to_string()),
                    ],
                    counters: g.counters().ok()?.described(),
                    engine_counters: g.engine_counters().ok()?,
                    info,
                    max_datagram_bytes: g.max_datagram_bytes(),
                    latency: g.send_latency(),
                })
            })
            .collect();

        if let Some((_, first)) = nodes.first() {
            for (i, field) in first.iter().enumerate() {
                let name = format!("rmcast_node_{}", field.name);
                let mut m =
                    encoder.encode_descriptor(&name, &field.help, None, MetricType::Counter)?;
                for (labels, fields) in &nodes {
                    m.encode_family(labels)?
                        .encode_counter::<NoLabelSet, _, u64>(&fields[i].value, None)?;
                }
            }
        }
        let Some(first) = groups.first() else {
            return Ok(());
        };
        for (i, field) in first.counters.iter().enumerate() {
            let name = format!("rmcast_{}", field.name);
            let mut m = encoder.encode_descriptor(&name, &field.help, None, MetricType::Counter)?;
            for g in &groups {
                m.encode_family(&g.labels)?
                    .encode_counter::<NoLabelSet, _, u64>(&g.counters[i].value, None)?;
            }
        }
        // Engines keep counters of their own, by name; groups of different engines differ.
        let mut own: BTreeMap<String, Vec<(&GroupLabels, u64)>> = BTreeMap::new();
        for g in &groups {
            for (n, v) in &g.engine_counters {
                own.entry(metric_name(n)).or_default().push((&g.labels, *v));
            }
        }
        for (n, values) in &own {
            let name = format!("rmcast_engine_{n}");
            let help = format!(
                "Counter `{n}` that the group's engine keeps itself (Engine::engine_counters)."
            );
            let mut m = encoder.encode_descriptor(&name, &help, None, MetricType::Counter)?;
            for (labels, v) in values {
                m.encode_family(*labels)?
                    .encode_counter::<NoLabelSet, _, u64>(v, None)?;
            }
        }
        type Level = fn(&GroupReading) -> u64;
        let gauges: [(&str, &str, Level); 7] = [
            (
                "rmcast_view",
                "The id of the view this member holds.",
                |g| g.info.view,
            ),
            ("rmcast_members", "Members in this member's view.", |g| {
                g.info.members.len() as u64
            }),
            (
                "rmcast_incarnation",
                "The group's incarnation (crash recoveries rebuild it).",
                |g| g.info.incarnation as u64,
            ),
            (
                "rmcast_recovering",
                "1 while the group is in recovery mode, else 0.",
                |g| g.info.recovering as u64,
            ),
            (
                "rmcast_buffered_messages",
                "Messages the engine holds in its history buffer.",
                |g| g.info.buffered_msgs as u64,
            ),
            (
                "rmcast_buffer_capacity_messages",
                "Messages the engine's history buffer can hold.",
                |g| g.info.buffer_capacity_msgs as u64,
            ),
            (
                "rmcast_max_datagram_bytes",
                "The largest datagram the group writes, in bytes.",
                |g| g.max_datagram_bytes as u64,
            ),
        ];
        for (name, help, level) in gauges {
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for g in &groups {
                m.encode_family(&g.labels)?.encode_gauge(&level(g))?;
            }
        }
        let mut m = encoder.encode_descriptor(
            "rmcast_send_latency_seconds",
            "Time from the engine taking an own message to its completion (stable with the group's resilience), in seconds.",
            None,
            MetricType::Histogram,
        )?;
        for g in &groups {
            let h = &g.latency;
            m.encode_family(&g.labels)?.encode_histogram::<NoLabelSet>(
                h.sum_seconds,
                h.count,
                &h.buckets,
                None,
            )?;
        }
        Ok(())
    }
}
