//! The `--log FILE` record of a member (DESIGN section 5) and an independent checker over the
//! logs of several members of one run.
//!
//! One JSON object per line, exactly:
//!
//! ```text
//! {"kind":"deliver","member":ID,"view":VIEW,"seq":S,"sender":ID,"msg":N,"len":L,"hash":HEX,"t_ns":T}
//! {"kind":"view","member":ID,"view":VIEW,"members":[ID,...],"coordinator":ID,"t_ns":T}
//! {"kind":"complete","member":ID,"view":VIEW,"msg":N,"t_ns":T}
//! {"kind":"failed","member":ID,"view":VIEW,"suspect":ID,"t_ns":T}
//! {"kind":"reset_failed","member":ID,"view":VIEW,"reachable":N,"needed":N,"t_ns":T}
//! {"kind":"reset","member":ID,"view":VIEW,"incarnation":I,"removed":[ID,...],"t_ns":T}
//! {"kind":"expelled","member":ID,"view":VIEW,"incarnation":I,"t_ns":T}
//! ```
//!
//! `view` is the view in which the event happened (for `reset`: the view before the reset; the
//! new view's own line follows). `complete` says that an own message (`msg` as in its
//! `deliver` line) is stable with the group's resilience: its send completed. `hash` is
//! [`rmcast_proto::common::payload_hash`] of the payload and `t_ns` the wall clock in
//! nanoseconds since the UNIX epoch when the member wrote the line. [`verify_logs`] checks what
//! a totally ordered group promises from these lines alone, so that a real multi-process run can
//! be checked by something other than the code under test.
//!
//! A member killed with SIGKILL leaves a log that ends wherever its last write ended, perhaps
//! in the middle of a line: [`parse_log`] drops such an unterminated last line.

use crate::GroupEvent;
use rmcast_proto::common::payload_hash;
use rmcast_proto::{Delivery, NodeId, Recovery, View};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock nanoseconds since the UNIX epoch (0 if the clock is before it).
pub fn wall_clock_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// One line of a log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LogRecord {
    /// A delivered message.
    Deliver {
        /// The member that delivered it.
        member: u32,
        /// The view it was delivered in.
        view: u64,
        /// Its position in the group's total order.
        seq: u64,
        /// Its original sender.
        sender: u32,
        /// The sender's message number.
        msg: u64,
        /// Payload length in bytes.
        len: usize,
        /// Payload digest.
        hash: String,
        /// Wall clock at delivery, ns since the UNIX epoch.
        t_ns: u64,
    },
    /// An installed view.
    View {
        /// The member that installed it.
        member: u32,
        /// View id.
        view: u64,
        /// Members in rank order.
        members: Vec<u32>,
        /// The member that orders messages in the view (0 in logs written before this field).
        #[serde(default)]
        coordinator: u32,
        /// Wall clock at installation, ns since the UNIX epoch.
        t_ns: u64,
    },
    /// An own message whose send completed (stable with the group's resilience).
    Complete {
        /// The member that sent it.
        member: u32,
        /// The view it completed in (the view of its delivery).
        view: u64,
        /// Its message number.
        msg: u64,
        /// Wall clock at completion, ns since the UNIX epoch.
        t_ns: u64,
    },
    /// The group entered recovery mode here.
    Failed {
        /// The member that wrote the line.
        member: u32,
        /// The view in which the failure was found.
        view: u64,
        /// The member that stopped answering.
        suspect: u32,
        /// Wall clock, ns since the UNIX epoch.
        t_ns: u64,
    },
    /// A reset found too few members; the group keeps trying.
    ResetFailed {
        /// The member that wrote the line.
        member: u32,
        /// The view before the failure.
        view: u64,
        /// Members that answered.
        reachable: usize,
        /// Members required.
        needed: usize,
        /// Wall clock, ns since the UNIX epoch.
        t_ns: u64,
    },
    /// The group was reset (a new incarnation); the new view's line follows.
    Reset {
        /// The member that wrote the line.
        member: u32,
        /// The view before the reset.
        view: u64,
        /// The new incarnation.
        incarnation: u32,
        /// Members of the old view left out of the new group.
        removed: Vec<u32>,
        /// Wall clock, ns since the UNIX epoch.
        t_ns: u64,
    },
    /// This member was left out of the group by a reset; its log ends here.
    Expelled {
        /// The member that wrote the line.
        member: u32,
        /// Its last view.
        view: u64,
        /// The incarnation that left it out.
        incarnation: u32,
        /// Wall clock, ns since the UNIX epoch.
        t_ns: u64,
    },
}

impl LogRecord {
    /// The member that wrote the line.
    pub fn member(&self) -> u32 {
        match self {
            LogRecord::Deliver { member, .. }
            | LogRecord::View { member, .. }
            | LogRecord::Complete { member, .. }
            | LogRecord::Failed { member, .. }
            | LogRecord::ResetFailed { member, .. }
            | LogRecord::Reset { member, .. }
            | LogRecord::Expelled { member, .. } => *member,
        }
    }

    /// When the member wrote the line, ns since the UNIX epoch.
    pub fn t_ns(&self) -> u64 {
        match self {
            LogRecord::Deliver { t_ns, .. }
            | LogRecord::View { t_ns, .. }
            | LogRecord::Complete { t_ns, .. }
            | LogRecord::Failed { t_ns, .. }
            | LogRecord::ResetFailed { t_ns, .. }
            | LogRecord::Reset { t_ns, .. }
            | LogRecord::Expelled { t_ns, .. } => *t_ns,
        }
    }
}

/// Writes a member's log. Buffered: call [`LogWriter::flush`] at the end (dropping it flushes
/// too, ignoring errors).
pub struct LogWriter<W: Write = BufWriter<File>> {
    out: W,
    member: u32,
    /// The view of the last view line: the `view` of the lines that carry none of their own.
    view: u64,
}

impl LogWriter {
    /// Create (truncate) `path` for member `member`.
    pub fn create(path: impl AsRef<Path>, member: u32) -> io::Result<Self> {
        Ok(LogWriter::new(
            BufWriter::with_capacity(1 << 16, File::create(path)?),
            member,
        ))
    }
}

impl<W: Write> LogWriter<W> {
    /// A writer for member `member` over any output.
    pub fn new(out: W, member: u32) -> Self {
        LogWriter {
            out,
            member,
            view: 0,
        }
    }

    /// Record a delivery, stamped now.
    pub fn deliver(&mut self, d: &Delivery) -> io::Result<()> {
        self.deliver_at(d, wall_clock_ns())
    }

    /// Record a delivery with a given time stamp.
    pub fn deliver_at(&mut self, d: &Delivery, t_ns: u64) -> io::Result<()> {
        // Written by hand rather than through serde: the field order is part of the format and
        // this runs once per message.
        writeln!(
            self.out,
            r#"{{"kind":"deliver","member":{},"view":{},"seq":{},"sender":{},"msg":{},"len":{},"hash":"{}","t_ns":{}}}"#,
            self.member,
            d.view,
            d.seq,
            d.sender.0,
            d.msg,
            d.payload.len(),
            payload_hash(&d.payload),
            t_ns
        )
    }

    /// Record a view, stamped now.
    pub fn view(&mut self, v: &View) -> io::Result<()> {
        self.view_at(v, wall_clock_ns())
    }

    /// Record a view with a given time stamp.
    pub fn view_at(&mut self, v: &View, t_ns: u64) -> io::Result<()> {
        self.view = v.id;
        write!(
            self.out,
            r#"{{"kind":"view","member":{},"view":{},"members":"#,
            self.member, v.id
        )?;
        self.write_ids(&v.members)?;
        writeln!(
            self.out,
            r#","coordinator":{},"t_ns":{t_ns}}}"#,
            v.coordinator.0
        )
    }

    /// Record the completion of own message `msg` with a given time stamp.
    pub fn complete_at(&mut self, msg: u64, t_ns: u64) -> io::Result<()> {
        writeln!(
            self.out,
            r#"{{"kind":"complete","member":{},"view":{},"msg":{msg},"t_ns":{t_ns}}}"#,
            self.member, self.view
        )
    }

    /// Record any group event with a given time stamp.
    pub fn event_at(&mut self, ev: &GroupEvent, t_ns: u64) -> io::Result<()> {
        match ev {
            GroupEvent::Deliver(d) => self.deliver_at(d, t_ns),
            GroupEvent::View(v) => self.view_at(v, t_ns),
            GroupEvent::SendComplete { msg } => self.complete_at(*msg, t_ns),
            GroupEvent::Recovery(r) => self.recovery_at(r, t_ns),
            // Not (yet) part of the log format.
            GroupEvent::Loss(_) | GroupEvent::Reply(_) | GroupEvent::Left => Ok(()),
        }
    }

    /// One crash-recovery record: kind `failed`, `reset_failed`, `reset` or `expelled`.
    fn recovery_at(&mut self, r: &Recovery, t_ns: u64) -> io::Result<()> {
        let (member, view) = (self.member, self.view);
        match r {
            Recovery::Failed { suspect } => writeln!(
                self.out,
                r#"{{"kind":"failed","member":{member},"view":{view},"suspect":{},"t_ns":{t_ns}}}"#,
                suspect.0
            ),
            Recovery::ResetFailed { reachable, needed } => writeln!(
                self.out,
                r#"{{"kind":"reset_failed","member":{member},"view":{view},"reachable":{reachable},"needed":{needed},"t_ns":{t_ns}}}"#
            ),
            Recovery::Reset {
                incarnation,
                removed,
            } => {
                write!(
                    self.out,
                    r#"{{"kind":"reset","member":{member},"view":{view},"incarnation":{incarnation},"removed":"#
                )?;
                self.write_ids(removed)?;
                writeln!(self.out, r#","t_ns":{t_ns}}}"#)
            }
            Recovery::Expelled { incarnation } => writeln!(
                self.out,
                r#"{{"kind":"expelled","member":{member},"view":{view},"incarnation":{incarnation},"t_ns":{t_ns}}}"#
            ),
        }
    }

    /// Record any group event, stamped now.
    pub fn event(&mut self, ev: &GroupEvent) -> io::Result<()> {
        self.event_at(ev, wall_clock_ns())
    }

    fn write_ids(&mut self, ids: &[NodeId]) -> io::Result<()> {
        self.out.write_all(b"[")?;
        for (i, m) in ids.iter().enumerate() {
            if i > 0 {
                self.out.write_all(b",")?;
            }
            write!(self.out, "{}", m.0)?;
        }
        self.out.write_all(b"]")
    }

    /// Flush buffered lines.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying output, as written so far (buffering aside).
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// The underlying output.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Read a log file; a line that is not a record is an error naming the line.
pub fn read_log(path: impl AsRef<Path>) -> io::Result<Vec<LogRecord>> {
    let path = path.as_ref();
    parse_log(BufReader::new(File::open(path)?))
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Parse log lines from any reader (blank lines are skipped). A last line without its line
/// end that does not parse is the trace of a member killed in the middle of a write, and is
/// dropped; any other line that is not a record is an error.
pub fn parse_log(mut r: impl BufRead) -> io::Result<Vec<LogRecord>> {
    let mut out = Vec::new();
    let mut line = Vec::new();
    for i in 1.. {
        line.clear();
        if r.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        let terminated = line.last() == Some(&b'\n');
        let parsed = std::str::from_utf8(&line)
            .map_err(|e| e.to_string())
            .and_then(|text| {
                if text.trim().is_empty() {
                    Ok(None)
                } else {
                    serde_json::from_str(text)
                        .map(Some)
                        .map_err(|e| e.to_string())
                }
            });
        match parsed {
            Ok(Some(rec)) => out.push(rec),
            Ok(None) => {}
            Err(_) if !terminated => break,
            Err(e) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("line {i}: {e}"),
                ))
            }
        }
    }
    Ok(out)
}

/// What [`verify_logs`] checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Logs (members) checked.
    pub members: usize,
    /// Deliveries over all logs.
    pub deliveries: usize,
    /// Distinct messages (sequence numbers) delivered anywhere.
    pub messages: usize,
    /// Distinct view ids installed anywhere.
    pub views: usize,
    /// Deliveries per member, in the order the logs were given.
    pub per_member: Vec<(u32, usize)>,
    /// Pairs of members whose common span of the order was compared.
    pub pairs_compared: usize,
    /// Completed sends (`complete` lines) over all logs.
    pub completions: usize,
    /// Deliveries that completed sends required (each completion, at each member that saw its
    /// view end), all found.
    pub completions_checked: usize,
    /// Distinct resets (incarnations) seen.
    pub resets: usize,
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} members, {} deliveries of {} messages, {} views, {} pairs compared, \
             {} completed sends ({} required deliveries found), {} resets",
            self.members,
            self.deliveries,
            self.messages,
            self.views,
            self.pairs_compared,
            self.completions,
            self.completions_checked,
            self.resets
        )
    }
}

/// A rule a set of logs broke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Short name of the rule: `member-id`, `order`, `duplicate`, `seq-agreement`,
    /// `msg-agreement`, `agreement`, `view-agreement`, `view-field`, `virtual-synchrony`,
    /// `completion` or `reset-agreement`.
    pub rule: &'static str,
    /// What was seen.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.rule, self.detail)
    }
}

/// Violations reported at most; past that the logs are broken enough.
const MAX_VIOLATIONS: usize = 100;

/// The identity of a delivered message as logged.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Msg<'a> {
    sender: u32,
    msg: u64,
    len: usize,
    hash: &'a str,
}

struct Deliv<'a> {
    seq: u64,
    m: Msg<'a>,
}

struct Member<'a> {
    id: u32,
    delivs: Vec<Deliv<'a>>,
    /// Own messages whose send completed: (view, msg).
    completions: Vec<(u64, u64)>,
    /// Where each delivered message was delivered: (sender, msg) -> (seq, view).
    delivered: HashMap<(u32, u64), (u64, u64)>,
    /// Seqs delivered in each view that this member saw end (a later view followed).
    closed_views: BTreeMap<u64, BTreeSet<u64>>,
}

struct Violations(Vec<Violation>);

impl Violations {
    fn push(&mut self, rule: &'static str, detail: String) {
        if self.0.len() < MAX_VIOLATIONS {
            self.0.push(Violation { rule, detail });
        }
    }
}

/// Check the logs of several members of one group (one log per member):
///
/// * each log holds one member id, and no two logs the same one;
/// * each member's sequence numbers strictly increase, and it delivers no message twice;
/// * every sequence number names the same (sender, msg, len, hash) in every log, and every
///   message has one sequence number everywhere;
/// * members present for the same span of the order delivered the same messages there (and so,
///   with the rules above, in the same order);
/// * a view id names the same membership everywhere; a delivery names the view last installed
///   before it; two members that both saw a view end delivered the same messages in it;
/// * a completed send (a `complete` line, of any member, one that was killed included) was
///   delivered, in the view it completed in, by every member that saw that view end (that
///   installed a later view): a crash of the sender, or of the sequencer, loses no completed
///   message at the members that go on (seed 002: resilience);
/// * a reset (incarnation) leaves out the same members everywhere.
///
/// A member that crashed simply stops: its log shows no later view, so nothing is required of
/// it past its last line, but whatever it did deliver must agree with the others.
///
/// Returns what was checked, or every violation found (at most 100).
pub fn verify_logs(logs: &[Vec<LogRecord>]) -> Result<VerifyReport, Vec<Violation>> {
    let mut v = Violations(Vec::new());
    let mut members: Vec<Member<'_>> = Vec::with_capacity(logs.len());
    let mut view_members: HashMap<u64, (&[u32], u32)> = HashMap::new();
    let mut seen_ids: HashMap<u32, usize> = HashMap::new();
    let mut resets: HashMap<u32, (Vec<u32>, u32)> = HashMap::new();

    for (li, log) in logs.iter().enumerate() {
        let id = log.first().map(LogRecord::member).unwrap_or(0);
        if log.is_empty() {
            v.push("member-id", format!("log #{li} is empty"));
        } else if let Some(other) = seen_ids.insert(id, li) {
            v.push(
                "member-id",
                format!("logs #{other} and #{li} both belong to member {id}"),
            );
        }
        let mut m = Member {
            id,
            delivs: Vec::new(),
            completions: Vec::new(),
            delivered: HashMap::new(),
            closed_views: BTreeMap::new(),
        };
        let mut current_view: Option<u64> = None;
        let mut in_view: BTreeSet<u64> = BTreeSet::new();
        let mut own_msgs: HashMap<(u32, u64), u64> = HashMap::new();
        for rec in log {
            if rec.member() != id {
                v.push(
                    "member-id",
                    format!(
                        "log #{li} of member {id} has a line of member {}",
                        rec.member()
                    ),
                );
            }
            match rec {
                LogRecord::View {
                    view, members: ms, ..
                } => {
                    match view_members.get(view) {
                        Some((other, who)) if *other != ms.as_slice() => v.push(
                            "view-agreement",
                            format!(
                                "view {view} is {other:?} at member {who} but {ms:?} at member {id}"
                            ),
                        ),
                        Some(_) => {}
                        None => {
                            view_members.insert(*view, (ms.as_slice(), id));
                        }
                    }
                    if let Some(cv) = current_view {
                        if *view <= cv {
                            v.push(
                                "order",
                                format!("member {id} installed view {view} after view {cv}"),
                            );
                        }
                        m.closed_views.insert(cv, std::mem::take(&mut in_view));
                    }
                    current_view = Some(*view);
                }
                LogRecord::Deliver {
                    view,
                    seq,
                    sender,
                    msg,
                    len,
                    hash,
                    ..
                } => {
                    if let Some(last) = m.delivs.last() {
                        if *seq <= last.seq {
                            v.push(
                                "order",
                                format!("member {id} delivered seq {seq} after seq {}", last.seq),
                            );
                        }
                    }
                    if let Some(prev) = own_msgs.insert((*sender, *msg), *seq) {
                        v.push(
                            "duplicate",
                            format!(
                                "member {id} delivered message {sender}/{msg} twice (seq {prev} and {seq})"
                            ),
                        );
                    }
                    if let Some(cv) = current_view {
                        if *view != cv {
                            v.push(
                                "view-field",
                                format!("member {id} delivered seq {seq} in view {view} while in view {cv}"),
                            );
                        }
                    }
                    in_view.insert(*seq);
                    m.delivered.insert((*sender, *msg), (*seq, *view));
                    m.delivs.push(Deliv {
                        seq: *seq,
                        m: Msg {
                            sender: *sender,
                            msg: *msg,
                            len: *len,
                            hash,
                        },
                    });
                }
                LogRecord::Complete { view, msg, .. } => {
                    if let Some(cv) = current_view {
                        if *view != cv {
                            v.push(
                                "view-field",
                                format!("member {id} completed message {msg} in view {view} while in view {cv}"),
                            );
                        }
                    }
                    m.completions.push((*view, *msg));
                }
                LogRecord::Reset {
                    incarnation,
                    removed,
                    ..
                } => {
                    let mut removed = removed.clone();
                    removed.sort_unstable();
                    match resets.get(incarnation) {
                        Some((other, who)) if *other != removed => v.push(
                            "reset-agreement",
                            format!(
                                "incarnation {incarnation} removed {other:?} at member {who} but {removed:?} at member {id}"
                            ),
                        ),
                        Some(_) => {}
                        None => {
                            resets.insert(*incarnation, (removed, id));
                        }
                    }
                }
                LogRecord::Failed { .. }
                | LogRecord::ResetFailed { .. }
                | LogRecord::Expelled { .. } => {}
            }
        }
        members.push(m);
    }

    // A completed send reached every member that saw its view end.
    let mut completions = 0;
    let mut completions_checked = 0;
    for a in &members {
        completions += a.completions.len();
        for &(view, msg) in &a.completions {
            for b in &members {
                if !b.closed_views.contains_key(&view) {
                    continue;
                }
                match b.delivered.get(&(a.id, msg)) {
                    Some(&(_, dv)) if dv == view => completions_checked += 1,
                    Some(&(seq, dv)) => v.push(
                        "completion",
                        format!(
                            "message {}/{msg} completed in view {view} at member {} but member {} delivered it in view {dv} (seq {seq})",
                            a.id, a.id, b.id
                        ),
                    ),
                    None => v.push(
                        "completion",
                        format!(
                            "message {}/{msg} completed in view {view}, but member {}, which saw view {view} end, never delivered it",
                            a.id, b.id
                        ),
                    ),
                }
            }
        }
    }

    // Every seq names one message, and every message has one seq, across all logs.
    let mut by_seq: HashMap<u64, (&Msg<'_>, u32)> = HashMap::new();
    let mut by_msg: HashMap<(u32, u64), (u64, u32)> = HashMap::new();
    let mut deliveries = 0;
    for m in &members {
        deliveries += m.delivs.len();
        for d in &m.delivs {
            match by_seq.get(&d.seq) {
                Some((other, who)) if **other != d.m => v.push(
                    "seq-agreement",
                    format!(
                        "seq {} is {}/{} (len {}, hash {}) at member {who} but {}/{} (len {}, hash {}) at member {}",
                        d.seq, other.sender, other.msg, other.len, other.hash,
                        d.m.sender, d.m.msg, d.m.len, d.m.hash, m.id
                    ),
                ),
                Some(_) => {}
                None => {
                    by_seq.insert(d.seq, (&d.m, m.id));
                }
            }
            match by_msg.get(&(d.m.sender, d.m.msg)) {
                Some((seq, who)) if *seq != d.seq => v.push(
                    "msg-agreement",
                    format!(
                        "message {}/{} has seq {seq} at member {who} but seq {} at member {}",
                        d.m.sender, d.m.msg, d.seq, m.id
                    ),
                ),
                Some(_) => {}
                None => {
                    by_msg.insert((d.m.sender, d.m.msg), (d.seq, m.id));
                }
            }
        }
    }

    // Members present for the same span delivered the same seqs there.
    let mut pairs_compared = 0;
    for a in 0..members.len() {
        for b in a + 1..members.len() {
            let (ma, mb) = (&members[a], &members[b]);
            let (Some(fa), Some(fb)) = (ma.delivs.first(), mb.delivs.first()) else {
                continue;
            };
            let lo = fa.seq.max(fb.seq);
            let hi = ma
                .delivs
                .last()
                .unwrap()
                .seq
                .min(mb.delivs.last().unwrap().seq);
            if lo > hi {
                continue;
            }
            pairs_compared += 1;
            let span = |m: &Member<'_>| -> BTreeSet<u64> {
                m.delivs
                    .iter()
                    .map(|d| d.seq)
                    .filter(|s| (lo..=hi).contains(s))
                    .collect()
            };
            let (sa, sb) = (span(ma), span(mb));
            let only_a: Vec<u64> = sa.difference(&sb).copied().take(5).collect();
            let only_b: Vec<u64> = sb.difference(&sa).copied().take(5).collect();
            if !only_a.is_empty() || !only_b.is_empty() {
                v.push(
                    "agreement",
                    format!(
                        "in seqs {lo}..={hi}, member {} alone delivered {only_a:?} and member {} alone delivered {only_b:?} (first 5 each)",
                        ma.id, mb.id
                    ),
                );
            }
            for (view, set_a) in &ma.closed_views {
                if let Some(set_b) = mb.closed_views.get(view) {
                    if set_a != set_b {
                        let only_a: Vec<u64> = set_a.difference(set_b).copied().take(5).collect();
                        let only_b: Vec<u64> = set_b.difference(set_a).copied().take(5).collect();
                        v.push(
                            "virtual-synchrony",
                            format!(
                                "in view {view}, member {} alone delivered {only_a:?} and member {} alone delivered {only_b:?} (first 5 each)",
                                ma.id, mb.id
                            ),
                        );
                    }
                }
            }
        }
    }

    if !v.0.is_empty() {
        return Err(v.0);
    }
    Ok(VerifyReport {
        members: members.len(),
        deliveries,
        messages: by_seq.len(),
        views: view_members.len(),
        per_member: members.iter().map(|m| (m.id, m.delivs.len())).collect(),
        pairs_compared,
        completions,
        completions_checked,
        resets: resets.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use rmcast_proto::NodeId;

    fn view(id: u64, members: &[u32]) -> View {
        View {
            id,
            seq: 0,
            members: members.iter().map(|&m| NodeId(m)).collect(),
            coordinator: NodeId(members[0]),
            joined: None,
            left: None,
        }
    }

    fn deliv(view: u64, seq: u64, sender: u32, msg: u64) -> Delivery {
        Delivery {
            seq,
            sender: NodeId(sender),
            msg,
            view,
            payload: Bytes::from(format!("{sender}-{msg}")),
        }
    }

    /// A log as written by [`LogWriter`] and read back, so the tests go through the format.
    fn log(member: u32, views: &[(usize, View)], delivs: &[Delivery]) -> Vec<LogRecord> {
        let mut w = LogWriter::new(Vec::new(), member);
        let mut vi = 0;
        for (i, d) in delivs.iter().enumerate() {
            while vi < views.len() && views[vi].0 == i {
                w.view_at(&views[vi].1, 7).unwrap();
                vi += 1;
            }
            w.deliver_at(d, 9).unwrap();
        }
        for (_, v) in &views[vi..] {
            w.view_at(v, 7).unwrap();
        }
        parse_log(&w.into_inner()[..]).unwrap()
    }

    fn good_run() -> Vec<Vec<LogRecord>> {
        let v1 = view(1, &[1, 2, 3]);
        let ds: Vec<Delivery> = (1..=6)
            .map(|s| deliv(1, s, (s % 3) as u32 + 1, s))
            .collect();
        vec![
            log(1, &[(0, v1.clone())], &ds),
            log(2, &[(0, v1.clone())], &ds),
            log(3, &[(0, v1)], &ds),
        ]
    }

    fn rules(r: Result<VerifyReport, Vec<Violation>>) -> Vec<&'static str> {
        r.expect_err("violations expected")
            .iter()
            .map(|v| v.rule)
            .collect()
    }

    #[test]
    fn format_is_exact() {
        let mut w = LogWriter::new(Vec::new(), 5);
        w.deliver_at(&deliv(2, 10, 7, 3), 123).unwrap();
        w.view_at(&view(3, &[5, 7]), 456).unwrap();
        let text = String::from_utf8(w.into_inner()).unwrap();
        let hash = payload_hash(b"7-3");
        assert_eq!(
            text,
            format!(
                "{{\"kind\":\"deliver\",\"member\":5,\"view\":2,\"seq\":10,\"sender\":7,\"msg\":3,\"len\":3,\"hash\":\"{hash}\",\"t_ns\":123}}\n\
                 {{\"kind\":\"view\",\"member\":5,\"view\":3,\"members\":[5,7],\"coordinator\":5,\"t_ns\":456}}\n"
            )
        );
        let recs = parse_log(text.as_bytes()).unwrap();
        assert_eq!(recs.len(), 2);
        assert!(matches!(recs[1], LogRecord::View { ref members, .. } if members == &[5, 7]));
    }

    #[test]
    fn consistent_logs_pass() {
        let r = verify_logs(&good_run()).unwrap();
        assert_eq!(r.members, 3);
        assert_eq!(r.deliveries, 18);
        assert_eq!(r.messages, 6);
        assert_eq!(r.views, 1);
        assert_eq!(r.pairs_compared, 3);
    }

    #[test]
    fn late_joiner_and_early_leaver_pass() {
        let v1 = view(1, &[1, 2]);
        let v2 = view(2, &[1, 2, 3]);
        let v3 = view(3, &[2, 3]);
        let all: Vec<Delivery> = (1..=4)
            .map(|s| deliv(1, s, 1, s))
            .chain((5..=8).map(|s| deliv(2, s, 2, s)))
            .chain((9..=10).map(|s| deliv(3, s, 3, s)))
            .collect();
        let logs = vec![
            // Member 1 leaves after seq 8 (view 3 is the view without it).
            log(1, &[(0, v1.clone()), (4, v2.clone())], &all[..8]),
            log(2, &[(0, v1), (4, v2.clone()), (8, v3.clone())], &all),
            // Member 3 joins at view 2.
            log(3, &[(0, v2), (4, v3)], &all[4..]),
        ];
        let r = verify_logs(&logs).unwrap();
        assert_eq!(r.per_member, vec![(1, 8), (2, 10), (3, 6)]);
    }

    #[test]
    fn different_order_is_caught() {
        let mut logs = good_run();
        // Member 3 delivers messages at seqs 3 and 4 swapped.
        for rec in &mut logs[2] {
            if let LogRecord::Deliver { seq, .. } = rec {
                *seq = match *seq {
                    3 => 4,
                    4 => 3,
                    s => s,
                };
            }
        }
        let r = rules(verify_logs(&logs));
        assert!(r.contains(&"order"), "{r:?}");
        assert!(r.contains(&"seq-agreement"), "{r:?}");
        assert!(r.contains(&"msg-agreement"), "{r:?}");
    }

    #[test]
    fn missing_message_is_caught() {
        let mut logs = good_run();
        logs[1].retain(|r| !matches!(r, LogRecord::Deliver { seq: 3, .. }));
        assert_eq!(rules(verify_logs(&logs)), vec!["agreement", "agreement"]);
    }

    #[test]
    fn duplicate_is_caught() {
        let mut logs = good_run();
        let dup = logs[0][3].clone();
        logs[0].insert(4, dup);
        let r = rules(verify_logs(&logs));
        assert!(r.contains(&"order") && r.contains(&"duplicate"), "{r:?}");
        // The same message again under a fresh seq is a duplicate too.
        let mut logs = good_run();
        if let LogRecord::Deliver { sender, msg, .. } = logs[0][1].clone() {
            let mut w = LogWriter::new(Vec::new(), 1);
            let mut d = deliv(1, 99, sender, msg);
            d.payload = Bytes::from(format!("{sender}-{msg}"));
            w.deliver_at(&d, 1).unwrap();
            logs[0].extend(parse_log(&w.into_inner()[..]).unwrap());
        }
        let r = rules(verify_logs(&logs));
        assert!(
            r.contains(&"duplicate") && r.contains(&"msg-agreement"),
            "{r:?}"
        );
    }

    #[test]
    fn corrupted_payload_is_caught() {
        let mut logs = good_run();
        if let LogRecord::Deliver { hash, .. } = &mut logs[2][2] {
            *hash = "0000000000000000".into();
        }
        assert_eq!(rules(verify_logs(&logs)), vec!["seq-agreement"]);
    }

    #[test]
    fn view_disagreement_and_mixed_logs_are_caught() {
        let mut logs = good_run();
        if let LogRecord::View { members, .. } = &mut logs[1][0] {
            members.pop();
        }
        assert_eq!(rules(verify_logs(&logs)), vec!["view-agreement"]);
        let mut logs = good_run();
        logs[1] = logs[0].clone();
        assert!(rules(verify_logs(&logs)).contains(&"member-id"));
    }

    #[test]
    fn virtual_synchrony_is_checked() {
        // Members 1 and 2 both go from view 1 to view 2, but member 2 missed seq 2 of view 1,
        // and both delivered later messages so that the span check would also see it.
        let v1 = view(1, &[1, 2, 3]);
        let v2 = view(2, &[1, 2]);
        let ds: Vec<Delivery> = vec![deliv(1, 1, 1, 1), deliv(1, 2, 3, 1), deliv(2, 3, 1, 2)];
        let logs = vec![
            log(1, &[(0, v1.clone()), (2, v2.clone())], &ds),
            log(2, &[(0, v1), (1, v2)], &[ds[0].clone(), ds[2].clone()]),
        ];
        let r = rules(verify_logs(&logs));
        assert!(r.contains(&"virtual-synchrony"), "{r:?}");
        assert!(r.contains(&"agreement"), "{r:?}");
    }

    #[test]
    fn bad_lines_are_errors() {
        assert!(parse_log(&b"{\"kind\":\"deliver\"}\n"[..]).is_err());
        assert!(parse_log(&b"not json\n"[..]).is_err());
        assert!(parse_log(&b"\n\n"[..]).unwrap().is_empty());
        // A bad line in the middle is an error even when the last line is cut short.
        assert!(parse_log(&b"not json\n{\"kind\":\"vi"[..]).is_err());
    }

    #[test]
    fn recovery_lines_are_exact_and_roundtrip() {
        let mut w = LogWriter::new(Vec::new(), 2);
        w.view_at(&view(4, &[1, 2, 3]), 1).unwrap();
        let evs = [
            GroupEvent::SendComplete { msg: 9 },
            GroupEvent::Recovery(Recovery::Failed { suspect: NodeId(1) }),
            GroupEvent::Recovery(Recovery::ResetFailed {
                reachable: 1,
                needed: 2,
            }),
            GroupEvent::Recovery(Recovery::Reset {
                incarnation: 1,
                removed: vec![NodeId(1)],
            }),
            GroupEvent::Recovery(Recovery::Expelled { incarnation: 2 }),
        ];
        for (i, ev) in evs.iter().enumerate() {
            w.event_at(ev, 10 + i as u64).unwrap();
        }
        let text = String::from_utf8(w.into_inner()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[1..],
            [
                r#"{"kind":"complete","member":2,"view":4,"msg":9,"t_ns":10}"#,
                r#"{"kind":"failed","member":2,"view":4,"suspect":1,"t_ns":11}"#,
                r#"{"kind":"reset_failed","member":2,"view":4,"reachable":1,"needed":2,"t_ns":12}"#,
                r#"{"kind":"reset","member":2,"view":4,"incarnation":1,"removed":[1],"t_ns":13}"#,
                r#"{"kind":"expelled","member":2,"view":4,"incarnation":2,"t_ns":14}"#,
            ]
        );
        let recs = parse_log(text.as_bytes()).unwrap();
        assert_eq!(recs.len(), 6);
        assert!(recs.iter().all(|r| r.member() == 2));
        assert_eq!(recs[4].t_ns(), 13);
        assert_eq!(
            recs[4],
            LogRecord::Reset {
                member: 2,
                view: 4,
                incarnation: 1,
                removed: vec![1],
                t_ns: 13
            }
        );
        // Logs written before views named their coordinator still parse.
        let old = br#"{"kind":"view","member":5,"view":3,"members":[5,7],"t_ns":456}"#;
        assert!(matches!(
            parse_log(&old[..]).unwrap()[..],
            [LogRecord::View { coordinator: 0, .. }]
        ));
    }

    #[test]
    fn a_log_cut_by_a_kill_parses_up_to_the_cut() {
        let mut w = LogWriter::new(Vec::new(), 1);
        w.view_at(&view(1, &[1, 2, 3]), 7).unwrap();
        w.deliver_at(&deliv(1, 1, 2, 1), 9).unwrap();
        let mut bytes = w.into_inner();
        let whole = parse_log(&bytes[..]).unwrap();
        // Killed in the middle of the next line.
        bytes.extend_from_slice(br#"{"kind":"deliver","member":1,"vi"#);
        assert_eq!(parse_log(&bytes[..]).unwrap(), whole);
        // ... or in the middle of a character.
        bytes.extend_from_slice(&[0xe2, 0x82]);
        assert_eq!(parse_log(&bytes[..]).unwrap(), whole);
        // A complete last line without its line end counts.
        let mut w = LogWriter::new(Vec::new(), 1);
        w.view_at(&view(1, &[1, 2, 3]), 7).unwrap();
        let mut bytes = w.into_inner();
        bytes.pop();
        assert_eq!(parse_log(&bytes[..]).unwrap().len(), 1);
    }

    /// A run of members 1..=4 in which sequencer 1 is killed after seq 6 (its log cut short),
    /// and 2, 3 and 4 reset to view 3 and go on.
    fn crash_run() -> Vec<Vec<LogRecord>> {
        let v2 = view(2, &[1, 2, 3, 4]);
        let v3 = view(3, &[2, 3, 4]);
        let before: Vec<Delivery> = (1..=8)
            .map(|s| deliv(2, s, (s % 4) as u32 + 1, s))
            .collect();
        let after: Vec<Delivery> = (10..=13)
            .map(|s| deliv(3, s, (s % 3) as u32 + 2, s))
            .collect();
        let survivor = |m: u32| {
            let mut w = LogWriter::new(Vec::new(), m);
            w.view_at(&v2, 1).unwrap();
            for d in &before {
                if d.sender.0 == m {
                    w.complete_at(d.msg, 2).unwrap();
                }
                w.deliver_at(d, 2).unwrap();
            }
            let failed = Recovery::Failed { suspect: NodeId(1) };
            w.event_at(&GroupEvent::Recovery(failed), 3).unwrap();
            let reset = Recovery::Reset {
                incarnation: 1,
                removed: vec![NodeId(1)],
            };
            w.event_at(&GroupEvent::Recovery(reset), 4).unwrap();
            w.view_at(&v3, 4).unwrap();
            for d in &after {
                if d.sender.0 == m {
                    w.complete_at(d.msg, 5).unwrap();
                }
                w.deliver_at(d, 5).unwrap();
            }
            parse_log(&w.into_inner()[..]).unwrap()
        };
        let mut w = LogWriter::new(Vec::new(), 1);
        w.view_at(&v2, 1).unwrap();
        for d in &before[..6] {
            if d.sender.0 == 1 {
                w.complete_at(d.msg, 2).unwrap();
            }
            w.deliver_at(d, 2).unwrap();
        }
        let mut killed = w.into_inner();
        killed.extend_from_slice(br#"{"kind":"del"#);
        vec![
            parse_log(&killed[..]).unwrap(),
            survivor(2),
            survivor(3),
            survivor(4),
        ]
    }

    #[test]
    fn a_crash_with_a_reset_passes() {
        let r = verify_logs(&crash_run()).unwrap();
        assert_eq!(r.members, 4);
        assert_eq!(r.resets, 1);
        // Member 1 completed seqs 4 (its log is cut after 6), the survivors 1..=8 and 10..=13
        // between them; each completion in view 2 is required of the three survivors.
        assert_eq!(r.completions, 1 + 3 * 2 + 4);
        assert_eq!(r.completions_checked, 3 * (1 + 6));
    }

    #[test]
    fn a_lost_completed_send_is_caught() {
        // The survivors never delivered seq 4, which the killed sequencer completed.
        let mut logs = crash_run();
        for log in &mut logs[1..] {
            log.retain(|r| !matches!(r, LogRecord::Deliver { seq: 4, .. }));
        }
        let r = rules(verify_logs(&logs));
        assert_eq!(r.iter().filter(|r| **r == "completion").count(), 3, "{r:?}");
        // A survivor that saw a completed message of another survivor's view end without it.
        let mut logs = crash_run();
        logs[3].retain(|r| !matches!(r, LogRecord::Deliver { seq: 7, .. }));
        let r = rules(verify_logs(&logs));
        assert!(r.contains(&"completion"), "{r:?}");
    }

    #[test]
    fn resets_that_disagree_are_caught() {
        let mut logs = crash_run();
        for rec in &mut logs[2] {
            if let LogRecord::Reset { removed, .. } = rec {
                removed.push(4);
            }
        }
        assert_eq!(rules(verify_logs(&logs)), vec!["reset-agreement"]);
    }
}
