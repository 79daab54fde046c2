//! `rmcast member`: a chat-style group member. Lines read from stdin are sent to the group (one
//! message per line); deliveries are printed as `<sender>: <text>`, view changes as
//! `* view ...` lines and crash recovery as `* failed ...`, `* reset ...`, `* reset failed ...`
//! and `* expelled ...` lines. With `--manual-reset`, the line `/reset` rebuilds the group
//! after a failure (ResetGroup) instead of being sent. When stdin closes, the member leaves the
//! group cleanly and exits.
//!
//! Also home of [`GroupArgs`], the group-selection flags shared with `rmcast worker`.

use anyhow::{bail, Context};
use clap::Args;
use rmcast::{
    EngineChoice, GroupAddr, GroupConfig, GroupEvent, Node, NodeConfig, NodeId, OpenMode, Recovery,
    RecoveryPolicy,
};
use rmcast_sim::log::LogWriter;
use std::io::{BufRead, Write};
use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// The engine names `--engine` takes: those of the one registry
/// ([`rmcast_proto::registry::names`]); an unknown name is refused with the list.
pub fn parse_engine(name: &str) -> Result<String, String> {
    match rmcast_proto::registry::find(name) {
        Some(f) => Ok(f.name().to_string()),
        None => Err(format!(
            "unknown engine `{name}` (engines: {})",
            rmcast_proto::registry::names().join(", ")
        )),
    }
}

/// Help text of the `--engine` flags.
pub const ENGINE_HELP: &str = "Protocol engine, by its name in the engine registry (rmcast_proto::registry; `sequencer`: the Amoeba sequencer, total order, resilience r)";

/// Which group to be in, and how to get there.
#[derive(Args, Debug, Clone)]
pub struct GroupArgs {
    /// Group name; hashed to the group id and, unless --addr or --unicast-peers is given, to
    /// the multicast address and port.
    #[arg(long)]
    pub group: String,
    #[arg(long, default_value = "sequencer", value_parser = parse_engine, help = ENGINE_HELP)]
    pub engine: String,
    /// This member's node id (unique in the group); random when omitted.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub id: Option<u32>,
    /// Resilience degree r: a send completes once r + 1 members hold the message. Every member
    /// must use the same value.
    #[arg(long, default_value_t = 0)]
    pub resilience: u8,
    /// Create a new group (default: join, or create if nobody answers).
    #[arg(long, conflicts_with = "join")]
    pub create: bool,
    /// Join an existing group; fail if nobody answers.
    #[arg(long)]
    pub join: bool,
    /// Explicit multicast address and port, e.g. 239.1.2.3:40000.
    #[arg(long, conflicts_with = "unicast_peers")]
    pub addr: Option<SocketAddrV4>,
    /// No multicast: the unicast addresses of all members (this one may be listed too),
    /// comma-separated. Needs --port.
    #[arg(long, value_delimiter = ',', requires = "port")]
    pub unicast_peers: Vec<SocketAddrV4>,
    /// Port of this member's unicast socket (default: any free port).
    #[arg(long)]
    pub port: Option<u16>,
    /// Largest datagram the engine writes (up to 65507 on loopback).
    #[arg(long, default_value_t = rmcast::DEFAULT_MAX_DATAGRAM_BYTES)]
    pub max_datagram_bytes: usize,
    /// How long a join waits to be admitted, in milliseconds.
    #[arg(long, default_value_t = 3000)]
    pub join_timeout_ms: u64,
    #[command(flatten)]
    pub recovery: RecoveryArgs,
    #[command(flatten)]
    pub keys: crate::keys::KeyArgs,
}

/// The sequencer's failure detection and reset policy (seed 002 section 5.3). Every member of
/// a group should use the same values.
#[derive(Args, Debug, Clone)]
pub struct RecoveryArgs {
    /// Do not reset the group automatically after a failure: it stays in recovery mode (sends
    /// fail) until the application resets it (`rmcast member`: type `/reset`; demo and bench
    /// workers reset as soon as they see the failure).
    #[arg(long)]
    pub manual_reset: bool,
    /// Smallest group a reset may form, this member included; 0: a majority of the view
    /// before the failure.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=256))]
    pub min_members: u16,
    /// Probe a peer not heard from for this many milliseconds; 0 turns failure detection off.
    #[arg(long, default_value_t = RecoveryPolicy::default().alive_interval_ms,
          value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub alive_interval_ms: u64,
    /// Unanswered probes before a peer counts as failed.
    #[arg(long, default_value_t = RecoveryPolicy::default().alive_retries,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub alive_retries: u32,
    /// Shortest wait for the answer to one probe, in milliseconds (it grows with the measured
    /// round-trip time).
    #[arg(long, default_value_t = RecoveryPolicy::default().alive_timeout_ms,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub alive_timeout_ms: u64,
}

impl RecoveryArgs {
    /// The policy these flags describe.
    pub fn policy(&self) -> RecoveryPolicy {
        RecoveryPolicy {
            alive_interval_ms: self.alive_interval_ms,
            alive_retries: self.alive_retries,
            alive_timeout_ms: self.alive_timeout_ms,
            auto_reset: !self.manual_reset,
            min_members: self.min_members as usize,
        }
    }

    /// The flags that give `policy` to a child process (`rmcast worker`).
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            format!("--min-members={}", self.min_members),
            format!("--alive-interval-ms={}", self.alive_interval_ms),
            format!("--alive-retries={}", self.alive_retries),
            format!("--alive-timeout-ms={}", self.alive_timeout_ms),
        ];
        if self.manual_reset {
            a.push("--manual-reset".into());
        }
        a
    }
}

impl GroupArgs {
    /// The node and group configuration these flags describe.
    pub fn configs(&self) -> anyhow::Result<(NodeConfig, GroupConfig)> {
        let node = NodeConfig {
            id: self.id.map(NodeId),
            port: self.port.unwrap_or(0),
            ..NodeConfig::default()
        };
        let mut group = GroupConfig::new(self.group.clone());
        group.mode = match (self.create, self.join) {
            (true, _) => OpenMode::Create,
            (_, true) => OpenMode::Join,
            _ => OpenMode::JoinOrCreate,
        };
        group.engine = EngineChoice::named(&self.engine)?
            .resilience(self.resilience)
            .recovery(self.recovery.policy());
        group.addr = match (self.addr, self.unicast_peers.is_empty()) {
            (Some(a), _) => {
                if !a.ip().is_multicast() {
                    bail!("--addr {a} is not a multicast address (224.0.0.0/4)");
                }
                GroupAddr::Multicast(a)
            }
            (None, false) => GroupAddr::Unicast(self.unicast_peers.clone()),
            (None, true) => GroupAddr::FromName,
        };
        if !(rmcast::MIN_DATAGRAM_BYTES..=rmcast::MAX_DATAGRAM_BYTES)
            .contains(&self.max_datagram_bytes)
        {
            bail!(
                "--max-datagram-bytes must be within {}..={}",
                rmcast::MIN_DATAGRAM_BYTES,
                rmcast::MAX_DATAGRAM_BYTES
            );
        }
        group.max_datagram_bytes = self.max_datagram_bytes;
        group.join_timeout = Duration::from_millis(self.join_timeout_ms);
        group.keys = self.keys.keyring()?;
        Ok((node, group))
    }

    /// Start a node and enter the group; `completion_events`: see
    /// [`GroupConfig::completion_events`] (wanted by whoever logs completions).
    pub fn open(&self, completion_events: bool) -> anyhow::Result<(Node, rmcast::Group)> {
        let (node_cfg, mut group_cfg) = self.configs()?;
        group_cfg.completion_events = completion_events;
        let node = Node::new(node_cfg).context("starting the node")?;
        let group = node
            .open_group(group_cfg)
            .with_context(|| format!("entering group {:?}", self.group))?;
        Ok((node, group))
    }
}

/// Arguments of `rmcast member`.
#[derive(Args, Debug)]
pub struct MemberArgs {
    #[command(flatten)]
    pub group: GroupArgs,
    /// Write one JSON line per delivery and view change to this file.
    #[arg(long)]
    pub log: Option<PathBuf>,
}

/// Run `rmcast member`.
pub fn run(args: MemberArgs) -> anyhow::Result<ExitCode> {
    // Completions are worth logging (the log checker uses them), and only then worth having.
    let (node, mut group) = args.group.open(args.log.is_some())?;
    let me = node.id();
    let mut log = match &args.log {
        Some(p) => {
            Some(LogWriter::create(p, me.0).with_context(|| format!("creating {}", p.display()))?)
        }
        None => None,
    };
    eprintln!(
        "member {me} {} group {:?} ({})",
        if group.created() { "created" } else { "joined" },
        group.name(),
        match (group.multicast_addr(), group.unicast_peers()) {
            (Some(a), _) => format!("multicast {a}"),
            (None, peers) => format!("unicast to {} peers", peers.len()),
        }
    );
    let manual_reset = args.group.recovery.manual_reset;
    let min_members = args.group.recovery.min_members as usize;
    if manual_reset {
        eprintln!("manual reset: after a failure, type /reset to rebuild the group");
    }

    // stdin on its own thread: sending may block on back-pressure, and deliveries must keep
    // flowing meanwhile or the group stalls.
    let sender = group.sender();
    let input = std::thread::spawn(move || -> anyhow::Result<()> {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let line = match line {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("rmcast: reading stdin: {e}; leaving");
                    break;
                }
            };
            if manual_reset && line.trim() == "/reset" {
                // ResetGroup; how it ends shows as `* reset` or `* reset failed` lines.
                match sender.reset(min_members) {
                    Ok(()) => eprintln!("rmcast: reset started"),
                    Err(e) => eprintln!("rmcast: reset refused: {e}"),
                }
                continue;
            }
            match sender.send(line) {
                Ok(_) => {}
                // One refused message (too large, or sent in recovery mode) does not end the
                // session; the person sees why and may type it again.
                Err(e @ (rmcast::Error::Send(_) | rmcast::Error::MemberFailed { .. })) => {
                    eprintln!("rmcast: not sent: {e}")
                }
                Err(e) => return Err(e).context("sending"),
            }
        }
        // Whatever happened, leave: that also ends the receive loop below (a leave that times
        // out still closes the group).
        sender.leave().context("leaving the group")
    });

    let stdout = std::io::stdout();
    let mut expelled = false;
    // `recv` returns None once the leave (or an expulsion) completed and every event before it
    // was read.
    while let Some(ev) = group.recv() {
        let mut out = stdout.lock();
        match &ev {
            GroupEvent::Deliver(d) => {
                writeln!(out, "{}: {}", d.sender, String::from_utf8_lossy(&d.payload))?;
            }
            GroupEvent::View(v) => {
                let members: Vec<String> = v.members.iter().map(|m| m.to_string()).collect();
                let members = if members.is_empty() {
                    "(none)".to_string()
                } else {
                    members.join(", ")
                };
                let note = if v.members.contains(&me) {
                    ""
                } else {
                    " - this member has left"
                };
                writeln!(
                    out,
                    "* view {}: members {members} (sequencer {}){note}",
                    v.id, v.coordinator
                )?;
            }
            GroupEvent::SendComplete { .. } | GroupEvent::Left => {}
            GroupEvent::Reply(r) => writeln!(
                out,
                "* reply from {} to message {}: {}",
                r.from,
                r.request,
                String::from_utf8_lossy(&r.payload)
            )?,
            GroupEvent::Loss(l) => writeln!(
                out,
                "* lost: {} messages of member {} from position {}",
                l.count, l.sender, l.first_seq
            )?,
            GroupEvent::Recovery(Recovery::Failed { suspect }) => writeln!(
                out,
                "* failed: member {suspect} does not answer; recovery mode, sends refused until the reset{}",
                if manual_reset { " (type /reset)" } else { "" }
            )?,
            GroupEvent::Recovery(Recovery::ResetFailed { reachable, needed }) => writeln!(
                out,
                "* reset failed: {reachable} of {needed} members reachable; trying again"
            )?,
            GroupEvent::Recovery(Recovery::Reset {
                incarnation,
                removed,
            }) => {
                let removed: Vec<String> = removed.iter().map(|m| m.to_string()).collect();
                writeln!(
                    out,
                    "* reset: incarnation {incarnation}, removed {}",
                    if removed.is_empty() {
                        "nobody".to_string()
                    } else {
                        removed.join(", ")
                    }
                )?;
            }
            GroupEvent::Recovery(Recovery::Expelled { incarnation }) => {
                expelled = true;
                writeln!(
                    out,
                    "* expelled: the group went on without this member (incarnation {incarnation})"
                )?;
            }
        }
        out.flush()?;
        if let Some(l) = log.as_mut() {
            l.event(&ev)?;
            // Flushed per event: a person may read the log while the member runs, and a
            // killed member keeps what it delivered.
            l.flush()?;
        }
    }
    if let Some(mut l) = log {
        l.flush()?;
    }
    if expelled {
        // The stdin thread may wait for a line forever; the process ends without it.
        eprintln!("member {me} was expelled from the group");
        return Ok(ExitCode::FAILURE);
    }
    let result = input
        .join()
        .map_err(|_| anyhow::anyhow!("stdin thread panicked"))?;
    result?;
    eprintln!("member {me} left the group");
    Ok(ExitCode::SUCCESS)
}
