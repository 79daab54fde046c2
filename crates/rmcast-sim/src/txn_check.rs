//! What a run of the transaction engine (`txn`, after the Multidriver of Dempsey, Fenton and
//! Weaver) must show beyond the common checkers: the deliver-to rule and the outcome of every
//! transaction. It reads the sources' announced sets (the engine's `announce_sets`: a view per
//! transaction whose `seq` is the transaction and whose members are the source and its set, and
//! one more per receiver dropped, naming it in `left`).
//!
//! - **Deliver-to**: no receiver delivers a message before its source released it (the source
//!   delivers its own copy when it releases), and a receiver that delivers is in the set.
//! - **All or none**: nobody delivers a failed transaction (reported by `Loss` at its source);
//!   every receiver of a released transaction's final set that did not crash delivers it; a
//!   completed one (`SendComplete`) was delivered by every receiver of its final set.
//! - **Outcomes named**: every transaction of a source that did not crash completed or failed;
//!   a failed one names why: its set had fewer than `min` receivers when the open was decided,
//!   or receivers were dropped by name; whoever is named or missing from a set had crashed (or
//!   was asleep, for runs with pauses longer than the receiver timeout, or was cut off from
//!   the source by a partition: [`check_transactions_apart`]).

use crate::config::Partition;
use crate::record::Record;
use rmcast_proto::{Event, NodeId, Time};
use std::collections::{BTreeMap, BTreeSet};

/// What the transactions of a run came to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnOutcomes {
    /// Transactions submitted.
    pub submitted: usize,
    /// Completed: released and delivered by every receiver of the set.
    pub committed: usize,
    /// Failed (the source reported the message lost).
    pub failed: usize,
    /// Failed because fewer than `min` receivers answered the open.
    pub failed_open: usize,
    /// Receivers dropped from sets by name (silent while asked).
    pub dropped: usize,
    /// Deliveries at receivers (the sources' own copies not counted).
    pub receiver_deliveries: usize,
}

/// The set of one transaction as its source announced it.
#[derive(Clone, Debug, Default)]
struct Set {
    /// Receivers at the open's decision (the source left out).
    opened: BTreeSet<NodeId>,
    /// Receivers dropped later, by name.
    dropped: BTreeSet<NodeId>,
}

/// Checks the rules above on `rec`, a run of the `txn` engine with `announce_sets` on and
/// X_MRopen's `min` = `min_receivers`. Returns the outcomes, or the violations found.
pub fn check_transactions(rec: &Record, min_receivers: usize) -> Result<TxnOutcomes, Vec<String>> {
    check_transactions_apart(rec, min_receivers, &[])
}

/// [`check_transactions`] on a run with `partitions`: a receiver on the other side of one of
/// them from a transaction's source may be missing from its set or dropped from it (the open
/// and the receiver timeout cannot tell it from a crash).
pub fn check_transactions_apart(
    rec: &Record,
    min_receivers: usize,
    partitions: &[Partition],
) -> Result<TxnOutcomes, Vec<String>> {
    let mut bad = Vec::new();
    let mut out = TxnOutcomes {
        submitted: rec.submissions.len(),
        ..TxnOutcomes::default()
    };
    let crashed: BTreeSet<NodeId> = (rec.hosts.iter())
        .filter(|h| h.crashed_at.is_some())
        .map(|h| h.id)
        .collect();
    let asleep: BTreeSet<NodeId> = (rec.hosts.iter())
        .filter(|h| !h.sleeps.is_empty())
        .map(|h| h.id)
        .collect();
    // Per (source, msg): the set, the release time (the source's own delivery), the outcome.
    let mut sets: BTreeMap<(NodeId, u64), Set> = BTreeMap::new();
    let mut released: BTreeMap<(NodeId, u64), Time> = BTreeMap::new();
    let mut completed: BTreeSet<(NodeId, u64)> = BTreeSet::new();
    let mut failed: BTreeSet<(NodeId, u64)> = BTreeSet::new();
    for h in &rec.hosts {
        for e in &h.events {
            match &e.event {
                Event::View(v) if v.coordinator == h.id && v.id > 1 => {
                    let s = sets.entry((h.id, v.seq)).or_default();
                    match v.left {
                        Some(x) => {
                            s.dropped.insert(x);
                        }
                        None => {
                            s.opened = v.members.iter().copied().filter(|&m| m != h.id).collect();
                        }
                    }
                }
                Event::Deliver(d) if d.sender == h.id => {
                    released.insert((h.id, d.msg), e.at);
                }
                Event::SendComplete { msg } => {
                    completed.insert((h.id, *msg));
                }
                Event::Loss(l) if l.sender == h.id => {
                    failed.insert((h.id, l.first_seq));
                }
                _ => {}
            }
        }
    }
    // Who delivered what, and when.
    let mut delivered: BTreeMap<(NodeId, u64), BTreeMap<NodeId, Time>> = BTreeMap::new();
    for h in &rec.hosts {
        for e in &h.events {
            if let Event::Deliver(d) = &e.event {
                if d.sender != h.id {
                    out.receiver_deliveries += 1;
                    delivered
                        .entry((d.sender, d.msg))
                        .or_default()
                        .insert(h.id, e.at);
                }
            }
        }
    }
    for (k, by) in &delivered {
        let Some(&at) = released.get(k) else {
            bad.push(format!(
                "{}#{} delivered by {:?} but never released by its source",
                k.0,
                k.1,
                by.keys().collect::<Vec<_>>()
            ));
            continue;
        };
        let set = sets.get(k).cloned().unwrap_or_default();
        for (r, t) in by {
            if *t < at {
                bad.push(format!(
                    "{}#{} delivered by {r} at {} ns, before its release at {} ns",
                    k.0, k.1, t.0, at.0
                ));
            }
            if !set.opened.contains(r) && !set.dropped.contains(r) {
                bad.push(format!(
                    "{}#{} delivered by {r}, which is not in its set",
                    k.0, k.1
                ));
            }
        }
        if failed.contains(k) {
            bad.push(format!(
                "{}#{} failed at its source but was delivered by {:?}",
                k.0,
                k.1,
                by.keys().collect::<Vec<_>>()
            ));
        }
    }
    for (k, at) in &released {
        let _ = at;
        let set = sets.get(k).cloned().unwrap_or_default();
        let by = delivered.get(k).cloned().unwrap_or_default();
        for r in set.opened.difference(&set.dropped) {
            if !by.contains_key(r) && !crashed.contains(r) {
                bad.push(format!(
                    "{}#{} released, but {r} of its set never delivered it",
                    k.0, k.1
                ));
            }
        }
    }
    for k in &completed {
        let set = sets.get(k).cloned().unwrap_or_default();
        let by = delivered.get(k).cloned().unwrap_or_default();
        for r in set.opened.difference(&set.dropped) {
            if !by.contains_key(r) {
                bad.push(format!(
                    "{}#{} completed, but {r} of its final set never delivered it",
                    k.0, k.1
                ));
            }
        }
    }
    let all: BTreeSet<NodeId> = rec.hosts.iter().map(|h| h.id).collect();
    for s in &rec.submissions {
        let k = (s.sender, s.msg);
        let source_crashed = crashed.contains(&s.sender);
        match (completed.contains(&k), failed.contains(&k)) {
            (true, true) => bad.push(format!("{}#{} both completed and failed", k.0, k.1)),
            (true, false) => out.committed += 1,
            (false, true) => {
                out.failed += 1;
                let Some(set) = sets.get(&k) else {
                    bad.push(format!("{}#{} failed without naming its set", k.0, k.1));
                    continue;
                };
                let apart = |r: &NodeId| {
                    partitions.iter().any(|p| {
                        (p.a.contains(r) && p.b.contains(&s.sender))
                            || (p.b.contains(r) && p.a.contains(&s.sender))
                    })
                };
                let excused = |r: &NodeId| crashed.contains(r) || asleep.contains(r) || apart(r);
                if set.opened.len() < min_receivers {
                    out.failed_open += 1;
                    // Whoever did not answer must have been unable to.
                    for r in all.iter().filter(|r| **r != s.sender) {
                        if !set.opened.contains(r) && !excused(r) {
                            bad.push(format!(
                                "{}#{} failed its open ({} of {min_receivers} answered), but {r} \
                                 was up and is not named in the set",
                                k.0,
                                k.1,
                                set.opened.len()
                            ));
                        }
                    }
                } else if set.dropped.is_empty() {
                    bad.push(format!(
                        "{}#{} failed with a full set and nobody dropped",
                        k.0, k.1
                    ));
                }
                for r in &set.dropped {
                    if !excused(r) {
                        bad.push(format!(
                            "{}#{} dropped {r}, which neither crashed nor slept",
                            k.0, k.1
                        ));
                    }
                }
            }
            (false, false) if !source_crashed => bad.push(format!(
                "{}#{} of a source that did not crash neither completed nor failed",
                k.0, k.1
            )),
            (false, false) => {}
        }
    }
    out.dropped = sets.values().map(|s| s.dropped.len()).sum();
    if bad.is_empty() {
        Ok(out)
    } else {
        Err(bad)
    }
}
