//! The checkers: each reads a run's [`Record`] and returns `Ok` or the violations it found.
//!
//! They only look at what engines emitted (deliveries, views, completions, leaves) and what the
//! workload submitted, never at engine internals, so the same checkers judge every engine.
//!
//! Who must deliver what. A *member at the end* stayed (never asked to leave, never crashed)
//! and installed a view. A message delivered anywhere in view `w` must be delivered by every
//! member at the end whose first view is at most `w`: under virtual synchrony the view a message
//! is delivered in says where it sits relative to every join, so this is "every message ordered
//! after the member joined". Hosts that left are held to safety (integrity, order, virtual
//! synchrony) but not to delivering what came after they left.
//!
//! Crashes and expulsions. A host that crashed, was expelled, or that a reset removed (the
//! group was rebuilt without it) has *failed*. While at most r hosts failed (r the resilience degree of the run), every
//! host, a failed one included, is held to one total order, FIFO and virtual synchrony with the
//! survivors, and every completed send, a failed sender's included, must survive. Beyond r,
//! those promises hold among the hosts that did not fail ([`Record::trusted_hosts`]).
//!
//! Violation lists are capped at [`MAX_VIOLATIONS`] per checker (the rest are counted), and are
//! produced in a deterministic order so that a replayed seed prints the same report.
//!
//! Which checkers apply. No checker assumes the sequencer's promises: [`check_all`] reads the
//! engine's [`Guarantees`] ([`Record::guarantees`]) and runs a checker only where the
//! declaration promises what it checks ([`applies`]); a checker that does not apply passes.
//!
//! | checker             | applies when the engine declares                                  |
//! |---------------------|-------------------------------------------------------------------|
//! | `integrity`         | always                                                            |
//! | `agreement`         | `delivery == AllOrNothing`                                        |
//! | `total_order`       | `order == Total`                                                  |
//! | `fifo`              | `order >= Fifo` (total order includes FIFO)                       |
//! | `virtual_synchrony` | `virtual_synchrony`                                               |
//! | `resilience`        | `crash_recovery`, `resilience > 0` or `majority_safe`             |
//! | `liveness`          | always; "every survivor delivered every message" and "every send  |
//! |                     | completed" only for `delivery == AllOrNothing`                    |
//! | `loss_reported`     | `delivery == Probabilistic`: a message a member does not deliver  |
//! |                     | is reported there by an [`Event::Loss`]                           |
//! | `livelock`          | always                                                            |
//!
//! The run's end follows the same declaration (see [`crate::Limits`]): an all-or-nothing run
//! ends when every survivor delivered every message, a probabilistic one when the network is
//! quiet. Where `senders == Creator` the workload sends from the creator (host 0) only.

use crate::record::{HostRecord, Record};
use rmcast_proto::{
    DeliveryPromise, Digest, Event, Guarantees, IdList, NodeId, Order, Recovery, View,
};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

/// Violations reported at most per checker and run.
pub const MAX_VIOLATIONS: usize = 20;

/// One violation: a short description naming hosts, messages (`sender#msg`), views and times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation(pub String);

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A checker's verdict on one run.
pub type Verdict = Result<(), Vec<Violation>>;

/// A checker.
pub type Checker = fn(&Record) -> Verdict;

/// Every checker, in the order reports print them.
pub const CHECKERS: &[(&str, Checker)] = &[
    ("integrity", integrity),
    ("agreement", agreement),
    ("total_order", total_order),
    ("fifo", fifo),
    ("virtual_synchrony", virtual_synchrony),
    ("resilience", resilience),
    ("liveness", liveness),
    ("loss_reported", loss_reported),
    ("livelock", livelock),
];

/// Whether checker `name` applies to an engine that declares `g` (the table in the module
/// docs). Unknown names apply.
pub fn applies(name: &str, g: &Guarantees) -> bool {
    match name {
        "agreement" => g.delivery == DeliveryPromise::AllOrNothing,
        "total_order" => g.order == Order::Total,
        "fifo" => g.order >= Order::Fifo,
        "virtual_synchrony" => g.virtual_synchrony,
        // A best-effort run promises nothing about what completed.
        "resilience" => {
            g.delivery != DeliveryPromise::BestEffort
                && (g.crash_recovery || g.resilience > 0 || g.majority_safe)
        }
        "loss_reported" => g.delivery == DeliveryPromise::Probabilistic,
        _ => true,
    }
}

/// Runs every checker that applies to the run's declaration ([`Record::guarantees`]); the others
/// pass.
pub fn check_all(rec: &Record) -> BTreeMap<&'static str, Verdict> {
    CHECKERS
        .iter()
        .map(|(n, c)| {
            let v = if applies(n, &rec.guarantees) {
                c(rec)
            } else {
                Ok(())
            };
            (*n, v)
        })
        .collect()
}

/// Collects violations up to the cap.
#[derive(Default)]
struct Found {
    list: Vec<Violation>,
    more: usize,
}

impl Found {
    fn push(&mut self, what: String) {
        if self.list.len() < MAX_VIOLATIONS {
            self.list.push(Violation(what));
        } else {
            self.more += 1;
        }
    }

    fn verdict(mut self) -> Verdict {
        if self.list.is_empty() {
            return Ok(());
        }
        if self.more > 0 {
            self.list
                .push(Violation(format!("... and {} more", self.more)));
        }
        Err(self.list)
    }
}

pub(crate) type Key = (NodeId, u64);

pub(crate) fn key_str(k: &Key) -> String {
    format!("{}#{}", k.0, k.1)
}

pub(crate) fn ms(t: rmcast_proto::Time) -> String {
    format!("{:.3}ms", t.0 as f64 / 1e6)
}

/// A virtual time in a report: "at 1.234ms".
struct At(rmcast_proto::Time);

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at {}", ms(self.0))
    }
}

/// Messages delivered by each of `hosts`, as sets.
fn delivered_sets<'a>(hosts: impl Iterator<Item = &'a HostRecord>) -> Vec<HashSet<Key>> {
    hosts
        .map(|h| h.deliveries().map(|(_, d)| (d.sender, d.msg)).collect())
        .collect()
}

/// For every message, the highest view any of `hosts` delivered it in.
fn max_views<'a>(hosts: impl Iterator<Item = &'a HostRecord>) -> BTreeMap<Key, u64> {
    let mut m = BTreeMap::new();
    for h in hosts {
        for (_, d) in h.deliveries() {
            let v = m.entry((d.sender, d.msg)).or_insert(d.view);
            *v = (*v).max(d.view);
        }
    }
    m
}

/// Integrity: everything delivered was submitted, with the same payload, not before it was
/// submitted, and at most once per host; completions name own submitted messages, once; every
/// host's engine declared what the run's engine declares.
pub fn integrity(rec: &Record) -> Verdict {
    let mut f = Found::default();
    for h in &rec.hosts {
        if let Some(g) = h.guarantees.filter(|g| *g != rec.guarantees) {
            f.push(format!(
                "host {} declares {g:?}, the run's engine {:?}",
                h.id, rec.guarantees
            ));
        }
    }
    let mut subs = BTreeMap::new();
    for s in &rec.submissions {
        if subs.insert((s.sender, s.msg), s).is_some() {
            f.push(format!(
                "submit at host {} returned message number {} twice",
                s.sender, s.msg
            ));
        }
    }
    for h in &rec.hosts {
        let at = h.deliveries().map(|(t, d)| ((d.sender, d.msg), At(t)));
        check_once("host", h.id.0, at, |_, what| f.push(what));
        let mut completed = HashSet::new();
        for e in &h.events {
            match &e.event {
                Event::Deliver(d) => {
                    let k = (d.sender, d.msg);
                    match subs.get(&k) {
                        None => f.push(format!(
                            "host {} delivered {} at {}, which was never submitted",
                            h.id,
                            key_str(&k),
                            ms(e.at)
                        )),
                        Some(s) => {
                            if s.hash != d.payload.hash || s.len != d.payload.len {
                                f.push(format!(
                                    "host {} delivered {}: payload differs from the one submitted \
                                     ({} bytes, hash {:016x}; submitted {} bytes, hash {:016x})",
                                    h.id,
                                    key_str(&k),
                                    d.payload.len,
                                    d.payload.hash,
                                    s.len,
                                    s.hash
                                ));
                            }
                            if e.at < s.at {
                                f.push(format!(
                                    "host {} delivered {} at {}, before it was submitted at {}",
                                    h.id,
                                    key_str(&k),
                                    ms(e.at),
                                    ms(s.at)
                                ));
                            }
                        }
                    }
                }
                Event::SendComplete { msg } => {
                    let k = (h.id, *msg);
                    if !subs.contains_key(&k) {
                        f.push(format!(
                            "host {} completed message {msg}, which it never submitted",
                            h.id
                        ));
                    }
                    if !completed.insert(*msg) {
                        f.push(format!("host {} completed message {msg} twice", h.id));
                    }
                }
                _ => {}
            }
        }
    }
    f.verdict()
}

/// Agreement: members at the end deliver the same messages from the point they joined; and a
/// completed send of a member at the end is delivered by every member that was there.
pub fn agreement(rec: &Record) -> Verdict {
    let mut f = Found::default();
    let members: Vec<&HostRecord> = rec.members_at_end().collect();
    let sets = delivered_sets(members.iter().copied());
    let maxv = max_views(members.iter().copied());
    for (i, m) in members.iter().enumerate() {
        let v0 = m.first_view().unwrap_or(u64::MAX);
        for (k, w) in &maxv {
            if *w >= v0 && !sets[i].contains(k) {
                f.push(format!(
                    "member {} never delivered {}, which other members delivered in view {w} \
                     (it joined in view {v0})",
                    m.id,
                    key_str(k)
                ));
            }
        }
    }
    for (i, m) in members.iter().enumerate() {
        for e in &m.events {
            let Event::SendComplete { msg } = e.event else {
                continue;
            };
            let k = (m.id, msg);
            let own = m.deliveries().find(|(_, d)| (d.sender, d.msg) == k);
            let Some((_, d)) = own else {
                f.push(format!(
                    "member {} completed {} at {} but never delivered it itself",
                    m.id,
                    key_str(&k),
                    ms(e.at)
                ));
                continue;
            };
            for (j, o) in members.iter().enumerate() {
                if j != i && o.first_view().unwrap_or(u64::MAX) <= d.view && !sets[j].contains(&k) {
                    f.push(format!(
                        "completed send {} (view {}) never delivered by member {}",
                        key_str(&k),
                        d.view,
                        o.id
                    ));
                }
            }
        }
    }
    f.verdict()
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ordered {
    Msg(Key),
    View(u64),
}

impl fmt::Display for Ordered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ordered::Msg(k) => write!(f, "message {}", key_str(k)),
            Ordered::View(v) => write!(f, "view {v}"),
        }
    }
}

/// One member's deliveries as [`check_seqs`] reads them: its id and `(seq, item, message)` in
/// delivery order.
pub(crate) type SeqList<I> = (u32, Vec<(u64, I, Option<Key>)>);

/// The sequence-number rules of total order, shared by [`total_order`] and
/// [`crate::log::verify_logs`]: over per-member lists of `(seq, item, message)` in delivery
/// order, a sequence number names one item everywhere (rule `seq-agreement`), a message has one
/// sequence number everywhere (`msg-agreement`), and every member's sequence numbers strictly
/// increase (`order`). `item` is what must agree (a message and its payload digest, or a view);
/// `message` names a message whatever its payload (`None` for a view).
pub(crate) fn check_seqs<I: Copy + Eq + fmt::Display>(
    who: &str,
    lists: &[SeqList<I>],
    mut push: impl FnMut(&'static str, String),
) {
    let mut by_seq: HashMap<u64, (I, u32)> = HashMap::new();
    let mut seq_of: HashMap<Key, (u64, u32)> = HashMap::new();
    for (id, list) in lists {
        let mut last: Option<u64> = None;
        for &(seq, item, msg) in list {
            let (first, at) = *by_seq.entry(seq).or_insert((item, *id));
            if first != item {
                push(
                    "seq-agreement",
                    format!("seq {seq} is {first} at {who} {at} but {item} at {who} {id}"),
                );
            }
            if let Some(k) = msg {
                let (s0, at) = *seq_of.entry(k).or_insert((seq, *id));
                if s0 != seq {
                    push(
                        "msg-agreement",
                        format!(
                            "{} has seq {s0} at {who} {at} but seq {seq} at {who} {id}",
                            key_str(&k)
                        ),
                    );
                }
            }
            if let Some(l) = last {
                if seq <= l {
                    push(
                        "order",
                        format!("{who} {id}: seq {seq} ({item}) comes after seq {l}"),
                    );
                }
            }
            last = Some(seq);
        }
    }
}

/// Total order: a sequence number names one message (or view) everywhere, a message has one
/// sequence number everywhere, every host's sequence numbers increase (the rules that
/// [`crate::log::verify_logs`] runs too, by the same code), and any two hosts deliver their
/// common messages in the same order.
pub fn total_order(rec: &Record) -> Verdict {
    total_order_among(&rec.trusted_hosts().collect::<Vec<_>>())
}

/// [`total_order`] over every host, the failed ones included: what a member delivered before
/// the group went on without it agrees with what the others delivered. Not one of
/// [`CHECKERS`]: an engine that delivers before a majority holds a message (the Sequencer with
/// `r = 0`) promises this only of members that do not fail. It holds of a member that merely
/// stood still (a pause, a SIGSTOP) and was expelled meanwhile, which is what it is for: such a
/// member must not order what waited in its socket in a view the others have left.
pub fn uniform_total_order(rec: &Record) -> Verdict {
    total_order_among(&rec.hosts.iter().collect::<Vec<_>>())
}

fn total_order_among(hosts: &[&HostRecord]) -> Verdict {
    let mut f = Found::default();
    let lists: Vec<SeqList<Ordered>> = hosts
        .iter()
        .map(|h| {
            let list = h
                .events
                .iter()
                .filter_map(|e| match &e.event {
                    Event::Deliver(d) => {
                        let k = (d.sender, d.msg);
                        Some((d.seq, Ordered::Msg(k), Some(k)))
                    }
                    Event::View(v) => Some((v.seq, Ordered::View(v.id), None)),
                    _ => None,
                })
                .collect();
            (h.id.0, list)
        })
        .collect();
    check_seqs("host", &lists, |_, what| f.push(what));
    // Pairwise order of common messages, independent of sequence numbers.
    let mut index: HashMap<Key, u32> = HashMap::new();
    let orders: Vec<Vec<u32>> = hosts
        .iter()
        .map(|h| {
            h.deliveries()
                .map(|(_, d)| {
                    let n = index.len() as u32;
                    *index.entry((d.sender, d.msg)).or_insert(n)
                })
                .collect()
        })
        .collect();
    let mut names = vec![(NodeId(0), 0); index.len()];
    for (k, i) in &index {
        names[*i as usize] = *k;
    }
    let positions: Vec<Vec<u32>> = orders
        .iter()
        .map(|o| {
            let mut p = vec![u32::MAX; index.len()];
            for (pos, i) in o.iter().enumerate() {
                p[*i as usize] = p[*i as usize].min(pos as u32);
            }
            p
        })
        .collect();
    for (a, order) in orders.iter().enumerate() {
        for (b, pos_b) in positions.iter().enumerate().skip(a + 1) {
            let mut last: Option<(u32, u32)> = None; // (position at b, message)
            for &m in order {
                let p = pos_b[m as usize];
                if p == u32::MAX {
                    continue;
                }
                if let Some((lp, lm)) = last {
                    if p < lp {
                        f.push(format!(
                            "hosts {} and {} deliver {} and {} in opposite orders",
                            hosts[a].id,
                            hosts[b].id,
                            key_str(&names[lm as usize]),
                            key_str(&names[m as usize])
                        ));
                        continue;
                    }
                }
                last = Some((p, m));
            }
        }
    }
    f.verdict()
}

/// FIFO per sender: every host delivers a sender's messages in the order they were submitted,
/// and without holes: if it delivers a sender's message, it delivered before it every earlier
/// message of that sender that was delivered anywhere in a view it was in. Holes are only held
/// against all-or-nothing engines: a probabilistic engine may skip a message it reports lost
/// ([`loss_reported`] checks the report).
pub fn fifo(rec: &Record) -> Verdict {
    let holes_count = rec.guarantees.delivery == DeliveryPromise::AllOrNothing;
    let mut f = Found::default();
    let counter_of: HashMap<Key, u64> = rec
        .submissions
        .iter()
        .map(|s| ((s.sender, s.msg), s.counter))
        .collect();
    // Per sender: counter -> highest view it was delivered in (anywhere).
    let mut delivered_in: BTreeMap<NodeId, BTreeMap<u64, u64>> = BTreeMap::new();
    let hosts: Vec<&HostRecord> = rec.trusted_hosts().collect();
    for h in &hosts {
        for (_, d) in h.deliveries() {
            if let Some(c) = counter_of.get(&(d.sender, d.msg)) {
                let v = delivered_in
                    .entry(d.sender)
                    .or_default()
                    .entry(*c)
                    .or_insert(d.view);
                *v = (*v).max(d.view);
            }
        }
    }
    for h in &hosts {
        let v0 = h.first_view().unwrap_or(u64::MAX);
        // Deliveries of messages never submitted are integrity's to report.
        let ranks = (h.deliveries())
            .filter_map(|(_, d)| Some((d.sender, *counter_of.get(&(d.sender, d.msg))?)));
        let got = check_fifo("host", h.id.0, ranks, |_, what| f.push(what));
        for (sender, (max_c, set)) in got.iter().filter(|_| holes_count) {
            let Some(all) = delivered_in.get(sender) else {
                continue;
            };
            for (c, w) in all.range(..*max_c) {
                if *w >= v0 && !set.contains(c) {
                    f.push(format!(
                        "host {} delivered message {max_c} of sender {sender} without its \
                         message {c} (delivered elsewhere in view {w})",
                        h.id
                    ));
                }
            }
        }
    }
    f.verdict()
}

/// Virtual synchrony: a view id names the same membership everywhere; each host's views
/// increase; a delivery carries the view installed at the host; and two hosts that both install
/// view `v` and then view `v'` deliver the same messages in between (the rules of `check_views`,
/// which the log verifier runs too).
pub fn virtual_synchrony(rec: &Record) -> Verdict {
    let mut f = Found::default();
    let traces: Vec<Trace<'_>> = rec.trusted_hosts().map(trace).collect();
    check_views("host", &traces, true, |_, what| f.push(what));
    f.verdict()
}

/// What the rules shared with [`crate::log::verify_logs_for`] read of one host (or member, in
/// a log): its id and its events in order.
pub(crate) type Trace<'a> = (u32, Vec<&'a Event<Digest>>);

fn trace(h: &HostRecord) -> Trace<'_> {
    (h.id.0, h.events.iter().map(|e| &e.event).collect())
}

/// The view rules, shared by [`virtual_synchrony`] and [`crate::log::verify_logs_for`] (`who`
/// names a trace's owner in the reports): a view id names one membership everywhere (rule
/// `view-agreement`) and each trace's views increase (`order`); with `vs` (virtual synchrony:
/// views installed in the group's order) also one coordinator everywhere, a delivery carries
/// the view last installed before it, and none comes before the first (`view-field`), and two
/// traces that both go from view `v` to view `v'` deliver the same messages in between
/// (`virtual-synchrony`). Without it a view's coordinator is a member's own notion (a
/// transaction source names itself).
pub(crate) fn check_views(
    who: &str,
    traces: &[Trace<'_>],
    vs: bool,
    mut push: impl FnMut(&'static str, String),
) {
    let mut views: BTreeMap<u64, (&[NodeId], NodeId, u32)> = BTreeMap::new();
    // (view, next view) -> what each trace delivered in between.
    type Segments = BTreeMap<(u64, u64), Vec<(u32, BTreeSet<Key>)>>;
    let mut segments = Segments::new();
    for (id, events) in traces {
        let mut current: Option<u64> = None;
        let mut between: BTreeSet<Key> = BTreeSet::new();
        for e in events {
            match e {
                Event::View(v) => {
                    let (members, coord, at) =
                        *views
                            .entry(v.id)
                            .or_insert((v.members.as_slice(), v.coordinator, *id));
                    if members != v.members.as_slice() || (vs && coord != v.coordinator) {
                        push(
                            "view-agreement",
                            format!(
                                "view {} is {} (coordinator {}) at {who} {} but {} (coordinator \
                                 {}) at {who} {}",
                                v.id,
                                IdList(members),
                                coord,
                                at,
                                IdList(&v.members),
                                v.coordinator,
                                id
                            ),
                        );
                    }
                    if let Some(c) = current {
                        if v.id <= c {
                            push(
                                "order",
                                format!("{who} {id} installed view {} after view {c}", v.id),
                            );
                        }
                        segments
                            .entry((c, v.id))
                            .or_default()
                            .push((*id, std::mem::take(&mut between)));
                    }
                    current = Some(v.id);
                    between.clear();
                }
                Event::Deliver(d) if vs => {
                    match current {
                        None => push(
                            "view-field",
                            format!(
                                "{who} {id} delivered {} before installing any view",
                                key_str(&(d.sender, d.msg))
                            ),
                        ),
                        Some(c) if c != d.view => push(
                            "view-field",
                            format!(
                                "{who} {id} delivered {} tagged view {} while in view {c}",
                                key_str(&(d.sender, d.msg)),
                                d.view
                            ),
                        ),
                        _ => {}
                    }
                    between.insert((d.sender, d.msg));
                }
                _ => {}
            }
        }
    }
    for ((v, next), list) in segments.iter().filter(|_| vs) {
        let (h0, s0) = &list[0];
        for (h, s) in &list[1..] {
            if s != s0 {
                let only0: Vec<String> = s0.difference(s).take(5).map(key_str).collect();
                let only1: Vec<String> = s.difference(s0).take(5).map(key_str).collect();
                push(
                    "virtual-synchrony",
                    format!(
                        "{who}s {h0} and {h} both went from view {v} to view {next} but \
                         delivered different messages in between (only at {h0}: {only0:?}, \
                         only at {h}: {only1:?})"
                    ),
                );
            }
        }
    }
}

/// FIFO order within one trace, shared by [`fifo`] and [`crate::log::verify_logs_for`]: each
/// sender's messages come in increasing `rank` (the submission counter, or the message number
/// in a log; rule `fifo`). Returns, per sender, the highest rank delivered and every rank.
pub(crate) fn check_fifo(
    who: &str,
    id: u32,
    deliveries: impl Iterator<Item = (NodeId, u64)>,
    mut push: impl FnMut(&'static str, String),
) -> BTreeMap<NodeId, (u64, BTreeSet<u64>)> {
    let mut got: BTreeMap<NodeId, (u64, BTreeSet<u64>)> = BTreeMap::new();
    for (sender, c) in deliveries {
        let (last, set) = got.entry(sender).or_insert((0, BTreeSet::new()));
        if !set.is_empty() && c <= *last {
            push(
                "fifo",
                format!(
                    "{who} {id} delivered message {c} of sender {sender} after its message {}",
                    *last
                ),
            );
        }
        *last = (*last).max(c);
        set.insert(c);
    }
    got
}

/// At most once, shared by [`integrity`] and [`crate::log::verify_logs_for`]: a trace
/// delivers no message twice (rule `duplicate`); `at` says where each delivery is.
pub(crate) fn check_once<L: fmt::Display>(
    who: &str,
    id: u32,
    deliveries: impl Iterator<Item = (Key, L)>,
    mut push: impl FnMut(&'static str, String),
) {
    let mut seen: HashMap<Key, L> = HashMap::new();
    for (k, at) in deliveries {
        if let Some(first) = seen.get(&k) {
            push(
                "duplicate",
                format!(
                    "{who} {id} delivered {} twice ({first}, again {at})",
                    key_str(&k)
                ),
            );
        } else {
            seen.insert(k, at);
        }
    }
}

/// Resilience: a message whose send completed survives any r failures (crashes, expulsions):
/// it is delivered by every member at the end that was in its view, even when its sender and up
/// to r - 1 other holders crashed. Beyond r failures only completed sends of hosts that did not
/// fail are held to it, except under the majority policy ([`Guarantees::majority_safe`]): then
/// every completed send, on any side of any partition and whoever failed since, is delivered by
/// every member at the end that was in its view.
pub fn resilience(rec: &Record) -> Verdict {
    let mut f = Found::default();
    let members: Vec<&HostRecord> = rec.members_at_end().collect();
    let sets = delivered_sets(members.iter().copied());
    let majority = rec.guarantees.majority_safe;
    let held: Vec<&HostRecord> = if majority {
        rec.hosts.iter().collect()
    } else {
        rec.trusted_hosts().collect()
    };
    let maxv = max_views(held.iter().copied());
    for h in held {
        for e in &h.events {
            let Event::SendComplete { msg } = e.event else {
                continue;
            };
            let k = (h.id, msg);
            match maxv.get(&k) {
                None => {
                    if !members.is_empty() {
                        f.push(format!(
                            "completed send {} (at {}) was delivered by nobody",
                            key_str(&k),
                            ms(e.at)
                        ));
                    }
                }
                Some(w) => {
                    for (i, m) in members.iter().enumerate() {
                        if m.first_view().unwrap_or(u64::MAX) <= *w && !sets[i].contains(&k) {
                            f.push(format!(
                                "completed send {} (view {w}) lost at member {}",
                                key_str(&k),
                                m.id
                            ));
                        }
                    }
                }
            }
        }
    }
    f.verdict()
}

/// Group formation's liveness (not among [`CHECKERS`]; a formation sweep calls it): once
/// faults heal, every host that ends running and was never meant to leave or crash (its
/// current record: not crashed, no leave asked, not expelled) ends in one view, the same at
/// each, which names exactly these hosts.
pub fn one_group(rec: &Record) -> Verdict {
    let mut f = Found::default();
    // Host i's current record is rec.hosts[i]; earlier incarnations follow.
    let current: Vec<&HostRecord> = (rec.hosts.iter().enumerate())
        .take_while(|(i, h)| h.id.0 as usize == *i)
        .map(|(_, h)| h)
        .filter(|h| h.started_at.is_some() && h.crashed_at.is_none())
        .filter(|h| h.leave_requested_at.is_none() && !h.expelled())
        .collect();
    let ids: BTreeSet<NodeId> = current.iter().map(|h| h.id).collect();
    let mut first: Option<(NodeId, &View)> = None;
    for h in &current {
        let Some(v) = h.last_view() else {
            f.push(format!("host {} ends in no view", h.id));
            continue;
        };
        let members: BTreeSet<NodeId> = v.members.iter().copied().collect();
        if members != ids {
            f.push(format!(
                "host {} ends in view {} of {:?}, not of every correct host {:?}",
                h.id, v.id, v.members, ids
            ));
        }
        match first {
            None => first = Some((h.id, v)),
            Some((by, w)) if (w.id, &w.members) != (v.id, &v.members) => f.push(format!(
                "host {} ends in view {} of {:?}, host {by} in view {} of {:?}",
                h.id, v.id, v.members, w.id, w.members
            )),
            Some(_) => {}
        }
    }
    f.verdict()
}

/// Liveness once faults heal: the run quiesced within its bound; every host that stayed became
/// a member; every leave completed; every sender that stayed submitted all its messages and saw
/// them complete; every message of such a sender is delivered by every member at the end that
/// was in its view. For a probabilistic engine ([`DeliveryPromise::Probabilistic`]) the run
/// must have gone quiet instead, and neither completions nor deliveries are required here
/// ([`loss_reported`] holds it to reporting what it does not deliver).
pub fn liveness(rec: &Record) -> Verdict {
    let mut f = Found::default();
    let all_or_nothing = rec.guarantees.delivery == DeliveryPromise::AllOrNothing;
    if !rec.quiesced {
        f.push(if all_or_nothing {
            format!(
                "not every member delivered everything by {} (faults healed at {})",
                ms(rec.end_time),
                ms(rec.heal_time)
            )
        } else {
            format!(
                "the network was not quiet by {} (faults healed at {})",
                ms(rec.end_time),
                ms(rec.heal_time)
            )
        });
    }
    if let Some(l) = &rec.livelock {
        f.push(format!("run stopped by a loop bound: {l}"));
    }
    for e in &rec.workload_errors {
        f.push(e.clone());
    }
    let members: Vec<&HostRecord> = rec.members_at_end().collect();
    // A group with fewer members left than a reset requires waits, as its policy says: name
    // that first, the other violations follow from it. Per member: `None` if it is not in
    // recovery mode at the end, else the most members a failed reset of it required.
    let waiting = |h: &HostRecord| {
        let mut needed = 0;
        for e in h.events.iter().rev() {
            match &e.event {
                Event::Recovery(Recovery::ResetFailed { needed: n, .. }) => needed = needed.max(*n),
                Event::Recovery(Recovery::Failed { .. }) => return Some(needed),
                Event::Recovery(_) | Event::View(_) => return None,
                _ => {}
            }
        }
        None
    };
    // Every member at the end is in recovery mode, and some host's reset (a leaver's too)
    // needed more members than are left.
    let all_waiting = members.iter().all(|m| waiting(m).is_some());
    let needed = rec.hosts.iter().filter_map(waiting).max();
    if let (true, Some(needed)) = (all_waiting, needed) {
        if !members.is_empty() && members.len() < needed {
            f.push(format!(
                "the group waits by its policy: {} member(s) left, a reset needs {needed}",
                members.len()
            ));
        }
    }
    if members.is_empty() && rec.hosts.iter().any(|h| h.expelled()) {
        f.push("no member is left: every host that did not crash or leave was expelled".into());
    }
    let crashed: BTreeSet<NodeId> = rec
        .hosts
        .iter()
        .filter(|h| h.crashed_at.is_some())
        .map(|h| h.id)
        .collect();
    for m in &members {
        if let Some(v) = m.last_view() {
            for c in v.members.iter().filter(|c| crashed.contains(c)) {
                f.push(format!(
                    "member {} still has crashed host {c} in its last view {}",
                    m.id, v.id
                ));
            }
        }
    }
    // Members at the end agree on where the group stands (views that name their members).
    if let Some(first) = members
        .first()
        .and_then(|m| m.last_view())
        .filter(|v| !v.members.is_empty())
    {
        for m in &members[1..] {
            if let Some(v) = m
                .last_view()
                .filter(|v| v.id != first.id || v.members != first.members)
            {
                f.push(format!(
                    "members end in different views: {} in view {} {}, {} in view {} {}",
                    members[0].id,
                    first.id,
                    IdList(&first.members),
                    m.id,
                    v.id,
                    IdList(&v.members)
                ));
            }
        }
    }
    let sets = delivered_sets(members.iter().copied());
    let maxv = max_views(rec.trusted_hosts());
    let mut submitted: BTreeMap<NodeId, u64> = BTreeMap::new();
    for s in &rec.submissions {
        *submitted.entry(s.sender).or_default() += 1;
    }
    for h in &rec.hosts {
        if h.stayed() && h.first_view().is_none() {
            f.push(format!(
                "host {} started at {} and never installed a view",
                h.id,
                ms(h.started_at.unwrap_or_default())
            ));
        }
        if h.leave_requested_at.is_some() && !h.failed() && !h.left() {
            f.push(format!("host {} was asked to leave but never left", h.id));
        }
        let n = submitted.get(&h.id).copied().unwrap_or(0);
        if h.stayed() && n < h.messages_planned {
            f.push(format!(
                "sender {} submitted only {n} of its {} messages",
                h.id, h.messages_planned
            ));
        }
    }
    // A host's current record comes first; the records of its earlier incarnations (expelled,
    // then joined again) follow it.
    let mut by_id: HashMap<NodeId, &HostRecord> = HashMap::new();
    for h in &rec.hosts {
        by_id.entry(h.id).or_insert(h);
    }
    let mut completed: HashSet<Key> = HashSet::new();
    for h in &rec.hosts {
        for e in &h.events {
            if let Event::SendComplete { msg } = e.event {
                completed.insert((h.id, msg));
            }
        }
    }
    for s in &rec.submissions {
        let Some(sender) = by_id.get(&s.sender) else {
            continue;
        };
        if !sender.stayed() || !all_or_nothing {
            continue;
        }
        let k = (s.sender, s.msg);
        // Submitted in a group the sender was expelled from: if it never completed, the
        // application was told it was not sent; if it completed there, the sender's expulsion
        // is a failure, and the resilience checker holds the completion to what the engine
        // promises across failures.
        // (A send in the instant of the rejoin was submitted before it: the sender waits
        // for its first view before it sends again.)
        if sender.started_at.is_some_and(|t| s.at <= t)
            && rec.hosts.iter().any(|p| p.id == s.sender && p.expelled())
        {
            continue;
        }
        if !completed.contains(&k) {
            f.push(format!("send {} never completed", key_str(&k)));
        }
        match maxv.get(&k) {
            None => f.push(format!(
                "{} (submitted at {}) was delivered by nobody",
                key_str(&k),
                ms(s.at)
            )),
            Some(w) => {
                for (i, m) in members.iter().enumerate() {
                    if m.first_view().unwrap_or(u64::MAX) <= *w && !sets[i].contains(&k) {
                        f.push(format!(
                            "{} (view {w}) never delivered by member {}",
                            key_str(&k),
                            m.id
                        ));
                    }
                }
            }
        }
    }
    f.verdict()
}

/// Losses are reported (probabilistic engines): every submitted message that a member at the
/// end does not deliver, although it was there for it, is covered by an [`Event::Loss`] at that
/// member: nothing goes missing silently. The loss names the message by its sender and its
/// position (the `seq` other members delivered it at); for a message delivered nowhere, whose
/// position nobody saw, any loss of its sender's messages at that member counts.
///
/// Who was there for a message depends on the declaration. Under virtual synchrony the view a
/// message is delivered in places it relative to every join: a member was there for a message
/// delivered anywhere in view `w` if its first view is at most `w`, and for a message
/// delivered nowhere if it had installed its first view when the message was submitted.
/// Without virtual synchrony a view id says nothing of where a message sits relative to a join
/// (a member that admits a joiner may deliver an older message in the new view, recovered
/// late, and a joiner starts each sender where its admitter stood), so a member was there for
/// a message if it had installed its first view when the message was submitted, or if it
/// delivered an earlier message of the same sender (FIFO: from there on it follows that
/// sender, and a hole must be reported). A message of a sender that crashed and that no other
/// host delivered is nobody's to report: it may never have left its sender.
pub fn loss_reported(rec: &Record) -> Verdict {
    let mut f = Found::default();
    let members: Vec<&HostRecord> = rec.members_at_end().collect();
    let sets = delivered_sets(members.iter().copied());
    let maxv = max_views(rec.hosts.iter());
    let mut seq_of: HashMap<Key, u64> = HashMap::new();
    for h in &rec.hosts {
        for (_, d) in h.deliveries() {
            seq_of.entry((d.sender, d.msg)).or_insert(d.seq);
        }
    }
    let first_view_at = |h: &HostRecord| {
        h.events
            .iter()
            .find(|e| matches!(e.event, Event::View(_)))
            .map(|e| e.at)
    };
    let synchronous = rec.guarantees.virtual_synchrony;
    // Per member and sender, the earliest (by submission counter) message delivered.
    let counter_of: HashMap<Key, u64> = rec
        .submissions
        .iter()
        .map(|s| ((s.sender, s.msg), s.counter))
        .collect();
    let first_counter: Vec<HashMap<NodeId, u64>> = members
        .iter()
        .map(|m| {
            let mut f: HashMap<NodeId, u64> = HashMap::new();
            for (_, d) in m.deliveries() {
                if let Some(&c) = counter_of.get(&(d.sender, d.msg)) {
                    let e = f.entry(d.sender).or_insert(c);
                    *e = (*e).min(c);
                }
            }
            f
        })
        .collect();
    // Messages some host other than their sender delivered.
    let passed_on: HashSet<Key> = rec
        .hosts
        .iter()
        .flat_map(|h| {
            h.deliveries()
                .filter(move |(_, d)| d.sender != h.id)
                .map(|(_, d)| (d.sender, d.msg))
        })
        .collect();
    for s in &rec.submissions {
        let k = (s.sender, s.msg);
        // A message that only its sender delivered (to itself, as it submitted it) before it
        // crashed may never have left the host: a member cannot report what it never heard
        // of, nor can any engine without crash recovery.
        let crashed = rec
            .hosts
            .get(s.sender.0 as usize)
            .is_some_and(|h| h.crashed_at.is_some());
        if crashed && !passed_on.contains(&k) {
            continue;
        }
        for (i, m) in members.iter().enumerate() {
            if sets[i].contains(&k) {
                continue;
            }
            let joined_before = first_view_at(m).is_some_and(|t| t <= s.at);
            let there = match maxv.get(&k) {
                Some(w) if synchronous => m.first_view().unwrap_or(u64::MAX) <= *w,
                _ if synchronous => joined_before,
                _ => {
                    joined_before
                        || first_counter[i]
                            .get(&s.sender)
                            .is_some_and(|c| *c < s.counter)
                }
            };
            if !there {
                continue;
            }
            let seq = seq_of.get(&k).copied();
            let reported = m.events.iter().any(|e| match &e.event {
                Event::Loss(l) => {
                    l.sender == s.sender
                        && seq.is_none_or(|q| q >= l.first_seq && q - l.first_seq < l.count)
                }
                _ => false,
            });
            if !reported {
                f.push(format!(
                    "member {} neither delivered {}{} nor reported it lost",
                    m.id,
                    key_str(&k),
                    seq.map(|q| format!(" (seq {q} elsewhere)"))
                        .unwrap_or_default()
                ));
            }
        }
    }
    f.verdict()
}

/// Livelock: no loop bound of the simulator was hit.
pub fn livelock(rec: &Record) -> Verdict {
    match &rec.livelock {
        None => Ok(()),
        Some(l) => Err(vec![Violation(l.clone())]),
    }
}

#[cfg(test)]
mod tests {
    //! Each checker passes a well-formed record and catches a doctored one.

    use super::*;
    use crate::record::{make_payload, payload_hash, Recorded, Submission};
    use rmcast_proto::{Delivery, Digest, Recovery, Time, View};

    fn view(id: u64, seq: u64, members: &[u32]) -> View {
        View {
            id,
            seq,
            members: members.iter().map(|m| NodeId(*m)).collect(),
            coordinator: NodeId(0),
            joined: None,
            left: None,
        }
    }

    fn deliver(seq: u64, sender: u32, counter: u64, view: u64) -> Event<Digest> {
        let p = make_payload(NodeId(sender), counter, 32);
        Event::Deliver(Delivery {
            respond: false,
            seq,
            sender: NodeId(sender),
            msg: counter + 1,
            view,
            payload: Digest::of(&p),
        })
    }

    /// Three members in view 1; hosts 1 and 2 each send 3 messages, delivered everywhere at
    /// seq 1..=6 in view 1; then view 2 (same members) at seq 7 and one more message of host 1
    /// at seq 8. Every send completes.
    fn good() -> Record {
        let mut rec = Record {
            quiesced: true,
            ..Record::default()
        };
        let order = [(1, 0), (2, 0), (1, 1), (2, 1), (1, 2), (2, 2)];
        for (s, c) in order.iter().chain([(1, 3)].iter()) {
            let p = make_payload(NodeId(*s), *c, 32);
            rec.submissions.push(Submission {
                sender: NodeId(*s),
                counter: *c,
                msg: c + 1,
                at: Time(1_000 * (*c + 1)),
                len: p.len(),
                hash: payload_hash(&p),
            });
        }
        for id in 0..3u32 {
            let mut events = vec![Event::View(view(1, 0, &[0, 1, 2]))];
            for (i, (s, c)) in order.iter().enumerate() {
                events.push(deliver(i as u64 + 1, *s, *c, 1));
            }
            events.push(Event::View(view(2, 7, &[0, 1, 2])));
            events.push(deliver(8, 1, 3, 2));
            if id > 0 {
                for c in 0..if id == 1 { 4 } else { 3 } {
                    events.push(Event::SendComplete { msg: c + 1 });
                }
            }
            rec.hosts.push(HostRecord {
                id: NodeId(id),
                started_at: Some(Time(0)),
                messages_planned: [0, 4, 3][id as usize],
                events: events
                    .into_iter()
                    .enumerate()
                    .map(|(i, event)| Recorded {
                        at: Time(100_000 + i as u64),
                        event,
                    })
                    .collect(),
                ..HostRecord::default()
            });
        }
        rec
    }

    fn position(rec: &Record, host: usize, sender: u32, msg: u64) -> usize {
        rec.hosts[host]
            .events
            .iter()
            .position(|e| matches!(&e.event, Event::Deliver(d) if d.sender == NodeId(sender) && d.msg == msg))
            .expect("delivery present")
    }

    fn fails(v: Verdict, needle: &str) {
        let list = v.expect_err("checker should report a violation");
        assert!(
            list.iter().any(|x| x.0.contains(needle)),
            "expected a violation mentioning {needle:?}, got {list:?}"
        );
    }

    #[test]
    fn well_formed_record_passes_every_checker() {
        let rec = good();
        for (name, v) in check_all(&rec) {
            assert_eq!(v, Ok(()), "{name}");
        }
    }

    #[test]
    fn integrity_catches_unsent_duplicate_and_altered() {
        let mut rec = good();
        rec.hosts[0].events.push(Recorded {
            at: Time(1 << 30),
            event: deliver(9, 2, 7, 2),
        });
        fails(integrity(&rec), "never submitted");

        let mut rec = good();
        let dup = rec.hosts[2].events[1].clone();
        rec.hosts[2].events.push(dup);
        fails(integrity(&rec), "twice");

        let mut rec = good();
        if let Event::Deliver(d) = &mut rec.hosts[1].events[2].event {
            d.payload.hash ^= 1;
        }
        fails(integrity(&rec), "payload differs");

        let mut rec = good();
        rec.hosts[0].events[1].at = Time(0);
        fails(integrity(&rec), "before it was submitted");

        let mut rec = good();
        rec.hosts[0].events.push(Recorded {
            at: Time(1 << 30),
            event: Event::SendComplete { msg: 1 },
        });
        fails(integrity(&rec), "never submitted");
    }

    #[test]
    fn agreement_catches_a_missing_delivery() {
        let mut rec = good();
        let i = position(&rec, 2, 2, 2);
        rec.hosts[2].events.remove(i);
        fails(agreement(&rec), "member 2 never delivered 2#2");
        // A member that left is not held to it.
        rec.hosts[2].leave_requested_at = Some(Time(1));
        assert_eq!(agreement(&rec), Ok(()));
    }

    #[test]
    fn agreement_catches_a_completed_send_not_delivered_by_its_sender() {
        let mut rec = good();
        let i = position(&rec, 1, 1, 4);
        rec.hosts[1].events.remove(i);
        fails(agreement(&rec), "never delivered it itself");
    }

    #[test]
    fn total_order_catches_swapped_deliveries() {
        let mut rec = good();
        let (a, b) = (position(&rec, 1, 1, 1), position(&rec, 1, 2, 1));
        rec.hosts[1].events.swap(a, b);
        fails(total_order(&rec.clone()), "opposite orders");
        fails(total_order(&rec), "comes after");
    }

    #[test]
    fn total_order_catches_a_seq_naming_two_messages() {
        let mut rec = good();
        // Host 2 sees 1#1 and 2#1 swapped *and* renumbered, so every host's seqs increase and
        // only the seq -> message map (and the pairwise order) tell.
        let (a, b) = (position(&rec, 2, 1, 1), position(&rec, 2, 2, 1));
        rec.hosts[2].events.swap(a, b);
        for (i, seq) in [(a, 1), (b, 2)] {
            if let Event::Deliver(d) = &mut rec.hosts[2].events[i].event {
                d.seq = seq;
            }
        }
        fails(
            total_order(&rec),
            "seq 1 is message 1#1 at host 0 but message 2#1",
        );
    }

    #[test]
    fn fifo_catches_reordered_and_skipped_messages() {
        let mut rec = good();
        // Host 0 delivers 1#2 before 1#1.
        let (a, b) = (position(&rec, 0, 1, 1), position(&rec, 0, 1, 2));
        rec.hosts[0].events.swap(a, b);
        fails(fifo(&rec), "after its message");

        let mut rec = good();
        let i = position(&rec, 0, 2, 1);
        rec.hosts[0].events.remove(i);
        fails(fifo(&rec), "without its message 0");
    }

    #[test]
    fn virtual_synchrony_catches_a_message_across_a_view_change() {
        let mut rec = good();
        // Host 1 delivers 2#3 after installing view 2 (tagged view 2), the others before.
        let i = position(&rec, 1, 2, 3);
        let mut e = rec.hosts[1].events.remove(i);
        if let Event::Deliver(d) = &mut e.event {
            d.view = 2;
        }
        let v2 = rec.hosts[1]
            .events
            .iter()
            .position(|e| matches!(&e.event, Event::View(v) if v.id == 2))
            .unwrap();
        rec.hosts[1].events.insert(v2 + 1, e);
        fails(virtual_synchrony(&rec), "both went from view 1 to view 2");
    }

    #[test]
    fn virtual_synchrony_catches_disagreeing_views_and_wrong_tags() {
        let mut rec = good();
        if let Event::View(v) = &mut rec.hosts[2].events[0].event {
            v.members.pop();
        }
        fails(virtual_synchrony(&rec), "view 1 is");

        let mut rec = good();
        if let Event::Deliver(d) = &mut rec.hosts[0].events[1].event {
            d.view = 5;
        }
        fails(virtual_synchrony(&rec), "tagged view 5");
    }

    #[test]
    fn liveness_catches_unfinished_runs() {
        let mut rec = good();
        rec.quiesced = false;
        fails(liveness(&rec), "not every member delivered");

        let mut rec = good();
        let i = position(&rec, 0, 1, 4);
        rec.hosts[0].events.remove(i);
        fails(liveness(&rec), "1#4 (view 2) never delivered by member 0");

        let mut rec = good();
        rec.hosts[2].messages_planned = 5;
        fails(liveness(&rec), "submitted only 3 of its 5");

        let mut rec = good();
        rec.hosts[0].leave_requested_at = Some(Time(5));
        fails(liveness(&rec), "never left");

        let mut rec = good();
        rec.hosts[1]
            .events
            .retain(|e| e.event != Event::SendComplete { msg: 2 });
        fails(liveness(&rec), "1#2 never completed");
    }

    #[test]
    fn resilience_catches_a_lost_completed_send() {
        let mut rec = good();
        // The sender left (so agreement and liveness no longer speak for its messages) but its
        // completed send must survive.
        rec.hosts[1].leave_requested_at = Some(Time(1));
        rec.hosts[1].events.push(Recorded {
            at: Time(1 << 30),
            event: Event::Left,
        });
        for h in [0, 2] {
            let i = position(&rec, h, 1, 4);
            rec.hosts[h].events.remove(i);
        }
        assert_eq!(agreement(&rec), Ok(()));
        fails(
            resilience(&rec),
            "completed send 1#4 (view 2) lost at member 0",
        );
    }

    /// Host 1 crashes after completing 1#4 (seq 8): within r = 1 the survivors must deliver it;
    /// with r = 0 (one failure beyond r) a crashed sender's completions carry no promise.
    #[test]
    fn resilience_holds_crashed_senders_to_their_completions_within_r() {
        let mut rec = good();
        rec.guarantees.majority_safe = false;
        rec.guarantees.resilience = 1;
        rec.hosts[1].crashed_at = Some(Time(1 << 29));
        for h in [0, 2] {
            let i = position(&rec, h, 1, 4);
            rec.hosts[h].events.remove(i);
        }
        fails(
            resilience(&rec),
            "completed send 1#4 (view 2) lost at member 0",
        );
        rec.guarantees.resilience = 0;
        assert_eq!(resilience(&rec), Ok(()));
    }

    /// Under the majority policy a crashed (or cut-off) sender's completed send must survive
    /// however many failed: the group that goes on holds it.
    #[test]
    fn resilience_under_the_majority_policy_holds_every_completion() {
        let mut rec = good();
        rec.guarantees.resilience = 0;
        rec.guarantees.majority_safe = true;
        rec.hosts[1].crashed_at = Some(Time(1 << 29));
        for h in [0, 2] {
            let i = position(&rec, h, 1, 4);
            rec.hosts[h].events.remove(i);
        }
        fails(
            resilience(&rec),
            "completed send 1#4 (view 2) lost at member 0",
        );
        assert!(check_all(&rec)["resilience"].is_err());
    }

    /// A host that crashed delivered a message at a sequence number the survivors use for
    /// another: a violation within r, not beyond it (the survivors never had it).
    #[test]
    fn total_order_includes_failed_hosts_only_within_r() {
        let mut rec = good();
        rec.guarantees.resilience = 1;
        rec.hosts[2].crashed_at = Some(Time(1 << 29));
        let i = position(&rec, 2, 1, 4);
        if let Event::Deliver(d) = &mut rec.hosts[2].events[i].event {
            *d = match deliver(8, 2, 3, 2) {
                Event::Deliver(d) => d,
                _ => unreachable!(),
            };
        }
        fails(total_order(&rec), "seq 8 is message 1#4 at host 0");
        // An expelled host counts as failed too: two failures are beyond r = 1.
        rec.hosts[0].events.push(Recorded {
            at: Time(1 << 30),
            event: Event::Recovery(Recovery::Expelled { incarnation: 1 }),
        });
        assert!(!rec.within_resilience());
        assert_eq!(total_order(&rec), Ok(()));
    }

    #[test]
    fn a_host_that_ended_in_a_view_the_survivors_never_had_failed() {
        let mut rec = good();
        assert!(rec.failed_hosts().is_empty());
        // Host 2 left in a view 3 that the members at the end never installed: it went on,
        // and left, on the losing side of a partition.
        rec.hosts[2].leave_requested_at = Some(Time(1 << 29));
        for event in [Event::View(view(3, 9, &[0, 1])), Event::Left] {
            rec.hosts[2].events.push(Recorded {
                at: Time(1 << 30),
                event,
            });
        }
        assert_eq!(rec.failed_hosts(), [NodeId(2)].into());
    }

    #[test]
    fn liveness_requires_members_to_end_in_one_view() {
        let mut rec = good();
        rec.hosts[2].events.push(Recorded {
            at: Time(1 << 30),
            event: Event::View(view(3, 9, &[0, 2])),
        });
        fails(liveness(&rec), "members end in different views");
    }

    #[test]
    fn liveness_names_a_group_that_waits_by_its_policy() {
        let mut rec = good();
        for h in &mut rec.hosts {
            for event in [
                Event::Recovery(Recovery::Failed { suspect: NodeId(9) }),
                Event::Recovery(Recovery::ResetFailed {
                    reachable: 3,
                    needed: 4,
                }),
            ] {
                h.events.push(Recorded {
                    at: Time(1 << 30),
                    event,
                });
            }
        }
        fails(
            liveness(&rec),
            "the group waits by its policy: 3 member(s) left",
        );
    }

    #[test]
    fn liveness_requires_crashed_hosts_to_leave_the_view() {
        let mut rec = good();
        rec.hosts[2].crashed_at = Some(Time(1 << 29));
        fails(
            liveness(&rec),
            "member 0 still has crashed host 2 in its last view 2",
        );
    }

    #[test]
    fn liveness_requires_someone_to_survive_expulsions() {
        let mut rec = good();
        for h in &mut rec.hosts {
            h.events.push(Recorded {
                at: Time(1 << 30),
                event: Event::Recovery(Recovery::Expelled { incarnation: 1 }),
            });
        }
        fails(liveness(&rec), "no member is left");
    }

    #[test]
    fn livelock_reports_the_bound() {
        let mut rec = good();
        rec.livelock = Some("too many steps".into());
        fails(livelock(&rec), "too many steps");
        fails(liveness(&rec), "loop bound");
    }

    #[test]
    fn violations_are_capped() {
        let mut rec = good();
        for h in &mut rec.hosts {
            h.events.retain(|e| !matches!(e.event, Event::Deliver(_)));
        }
        rec.hosts[0].events.clear();
        for c in 0..100u64 {
            rec.hosts[0].events.push(Recorded {
                at: Time(1 << 30),
                event: deliver(100 + c, 0, c, 1),
            });
        }
        let list = integrity(&rec).unwrap_err();
        assert_eq!(list.len(), MAX_VIOLATIONS + 1);
        assert!(list.last().unwrap().0.contains("and 80 more"));
    }

    /// A gossip-like declaration: FIFO, no views ordered with data, probabilistic delivery.
    fn probabilistic() -> Guarantees {
        Guarantees {
            order: Order::Fifo,
            virtual_synchrony: false,
            resilience: 0,
            majority_safe: false,
            delivery: DeliveryPromise::Probabilistic,
            crash_recovery: false,
            ..Guarantees::reliable_fifo()
        }
    }

    #[test]
    fn the_declaration_says_which_checkers_apply() {
        let seq = rmcast_proto::EngineChoice::sequencer(0).guarantees();
        for (name, _) in CHECKERS {
            assert_eq!(applies(name, &seq), *name != "loss_reported", "{name}");
        }
        let fifo = Guarantees::reliable_fifo();
        let on: Vec<&str> = CHECKERS
            .iter()
            .map(|c| c.0)
            .filter(|n| applies(n, &fifo))
            .collect();
        assert_eq!(
            on,
            ["integrity", "agreement", "fifo", "liveness", "livelock"]
        );
        let p = probabilistic();
        assert!(applies("loss_reported", &p) && !applies("agreement", &p));
    }

    /// Swapped deliveries of two senders break total order but not FIFO: flagged when the
    /// engine declares total order, not when it declares FIFO only.
    #[test]
    fn total_order_is_checked_only_where_it_is_promised() {
        let mut rec = good();
        let (a, b) = (position(&rec, 1, 1, 1), position(&rec, 1, 2, 1));
        rec.hosts[1].events.swap(a, b);
        let verdicts = check_all(&rec);
        fails(verdicts["total_order"].clone(), "opposite orders");
        rec.guarantees.order = Order::Fifo;
        for (name, v) in check_all(&rec) {
            assert_eq!(v, Ok(()), "{name}");
        }
        // A host that declares otherwise than the run is an integrity violation.
        rec.hosts[0].guarantees = Some(Guarantees::reliable_fifo());
        fails(check_all(&rec)["integrity"].clone(), "declares");
    }

    /// A probabilistic engine need not deliver everything, but must report what it does not.
    #[test]
    fn a_probabilistic_engine_must_report_what_it_does_not_deliver() {
        let mut rec = good();
        rec.guarantees = probabilistic();
        let i = position(&rec, 2, 2, 2);
        rec.hosts[2].events.remove(i);
        let verdicts = check_all(&rec);
        fails(
            verdicts["loss_reported"].clone(),
            "member 2 neither delivered 2#2 (seq 4 elsewhere) nor reported it lost",
        );
        for (name, v) in &verdicts {
            assert!(*name == "loss_reported" || v.is_ok(), "{name}: {v:?}");
        }
        // A loss of another position of that sender does not cover it ...
        let loss = |first_seq| Recorded {
            at: Time(1 << 30),
            event: Event::Loss(rmcast_proto::Loss {
                sender: NodeId(2),
                first_seq,
                count: 1,
            }),
        };
        rec.hosts[2].events.push(loss(6));
        fails(loss_reported(&rec), "member 2 neither delivered 2#2");
        // ... its own does.
        rec.hosts[2].events.push(loss(4));
        for (name, v) in check_all(&rec) {
            assert_eq!(v, Ok(()), "{name}");
        }
        // Held to all-or-nothing, the same record fails agreement, FIFO and liveness.
        rec.guarantees.delivery = DeliveryPromise::AllOrNothing;
        let verdicts = check_all(&rec);
        for name in ["agreement", "fifo", "liveness"] {
            assert!(verdicts[name].is_err(), "{name}");
        }
    }

    /// Without virtual synchrony a member is held to a message only if it was a member when
    /// the message was submitted, or delivered an earlier message of its sender: view ids do
    /// not place messages relative to joins there.
    #[test]
    fn without_virtual_synchrony_a_late_joiner_is_not_held_to_earlier_messages() {
        let mut rec = good();
        rec.guarantees = probabilistic();
        // Host 2 installed its first view (at 100 µs) after every submission (1-4 µs), and
        // starts sender 1 at 1#4: 1#1..1#3 are not its to deliver.
        for msg in 1..=3 {
            let i = position(&rec, 2, 1, msg);
            rec.hosts[2].events.remove(i);
        }
        assert_eq!(loss_reported(&rec), Ok(()));
        // Held to the view rule (virtual synchrony) the same record fails: they were delivered
        // in view 1, host 2's first.
        rec.guarantees.virtual_synchrony = true;
        fails(loss_reported(&rec), "member 2 neither delivered 1#1");
        // A hole after a delivered message of the sender is held against it either way.
        let mut rec = good();
        rec.guarantees = probabilistic();
        let i = position(&rec, 2, 1, 2);
        rec.hosts[2].events.remove(i);
        fails(loss_reported(&rec), "member 2 neither delivered 1#2");
    }

    #[test]
    fn resilience_is_checked_only_where_it_is_promised() {
        let mut rec = good();
        rec.guarantees.majority_safe = false;
        rec.hosts[1].leave_requested_at = Some(Time(1));
        rec.hosts[1].events.push(Recorded {
            at: Time(1 << 30),
            event: Event::Left,
        });
        for h in [0, 2] {
            let i = position(&rec, h, 1, 4);
            rec.hosts[h].events.remove(i);
        }
        assert!(check_all(&rec)["resilience"].is_err());
        rec.guarantees.crash_recovery = false;
        assert_eq!(check_all(&rec)["resilience"], Ok(()));
        rec.guarantees.resilience = 1;
        assert!(check_all(&rec)["resilience"].is_err());
    }
}
