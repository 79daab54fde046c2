//! A member's counters and group state as people read them: `/stats` in `rmcast member`.

use rmcast::{Counters, GroupInfo, GroupSender};

/// One reading of a member's counters.
#[derive(Clone, Debug)]
pub struct Stats {
    /// Group name.
    pub group: String,
    /// Engine name.
    pub engine: String,
    /// The engine's view of the group.
    pub info: GroupInfo,
    /// The counters every engine keeps, by name.
    pub counters: Vec<(&'static str, u64)>,
    /// The counters only this engine keeps, by name.
    pub engine_counters: Vec<(&'static str, u64)>,
}

/// Read `sender`'s group state and counters.
pub fn snapshot(sender: &GroupSender) -> Result<Stats, rmcast::Error> {
    Ok(Stats {
        group: sender.name().to_string(),
        engine: sender.engine_kind().to_string(),
        info: sender.info()?,
        counters: named(&sender.counters()?),
        engine_counters: sender.engine_counters()?,
    })
}

/// The common counters by name, in declaration order.
pub fn named(c: &Counters) -> Vec<(&'static str, u64)> {
    vec![
        ("datagrams_sent", c.datagrams_sent),
        ("bytes_sent", c.bytes_sent),
        ("datagrams_received", c.datagrams_received),
        ("malformed_dropped", c.malformed_dropped),
        ("foreign_dropped", c.foreign_dropped),
        ("duplicates", c.duplicates),
        ("nacks_sent", c.nacks_sent),
        ("nacks_received", c.nacks_received),
        ("retransmissions", c.retransmissions),
        ("acks_sent", c.acks_sent),
        ("backpressure_refusals", c.backpressure_refusals),
        ("delivered", c.delivered),
        ("submitted", c.submitted),
        ("view_changes", c.view_changes),
        ("probes_sent", c.probes_sent),
        ("failures_detected", c.failures_detected),
        ("recovery_sent", c.recovery_sent),
        ("resets", c.resets),
    ]
}

impl Stats {
    /// Lines for a terminal, starting with `* stats`.
    pub fn render(&self) -> String {
        let i = &self.info;
        let mut s = format!(
            "* stats: group {:?} ({}), member {}, view {}, members {}, sequencer {}, \
             incarnation {}{}, buffered {}/{}\n",
            self.group,
            self.engine,
            i.me,
            i.view,
            crate::member::id_list(&i.members),
            i.coordinator
                .map(|c| c.to_string())
                .unwrap_or_else(|| "none".into()),
            i.incarnation,
            if i.recovering { ", recovering" } else { "" },
            i.buffered_msgs,
            i.buffer_capacity_msgs,
        );
        for (name, v) in self.counters.iter().chain(&self.engine_counters) {
            s.push_str(&format!("*   {name:<24} {v}\n"));
        }
        s
    }
}
