//! `rmcast member`: a chat-style group member. Lines read from stdin are sent to the group (one
//! message per line); deliveries are printed as `<sender>: <text>` and view changes as
//! `* view ...` lines. When stdin closes, the member leaves the group cleanly and exits.
//!
//! Also home of [`GroupArgs`], the group-selection flags shared with `rmcast worker`.

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use rmcast::log::LogWriter;
use rmcast::{
    EngineChoice, GroupAddr, GroupConfig, GroupEvent, Node, NodeConfig, NodeId, OpenMode,
};
use std::io::{BufRead, Write};
use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Protocol engines the runtime can run.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineName {
    /// Amoeba sequencer (seed 002): total order, resilience r.
    Sequencer,
}

/// Which group to be in, and how to get there.
#[derive(Args, Debug, Clone)]
pub struct GroupArgs {
    /// Group name; hashed to the group id and, unless --addr or --unicast-peers is given, to
    /// the multicast address and port.
    #[arg(long)]
    pub group: String,
    /// Protocol engine.
    #[arg(long, value_enum, default_value_t = EngineName::Sequencer)]
    pub engine: EngineName,
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
        group.engine = match self.engine {
            EngineName::Sequencer => EngineChoice::Sequencer {
                resilience: self.resilience,
            },
        };
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
        if !(256..=rmcast::MAX_DATAGRAM_BYTES).contains(&self.max_datagram_bytes) {
            bail!(
                "--max-datagram-bytes must be within 256..={}",
                rmcast::MAX_DATAGRAM_BYTES
            );
        }
        group.max_datagram_bytes = self.max_datagram_bytes;
        group.join_timeout = Duration::from_millis(self.join_timeout_ms);
        Ok((node, group))
    }

    /// Start a node and enter the group.
    pub fn open(&self) -> anyhow::Result<(Node, rmcast::Group)> {
        let (node_cfg, group_cfg) = self.configs()?;
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
    let (node, mut group) = args.group.open()?;
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
            match sender.send(line) {
                Ok(_) => {}
                // One refused message (too large, say) does not end the session.
                Err(e @ rmcast::Error::Send(_)) => eprintln!("rmcast: not sent: {e}"),
                Err(e) => return Err(e).context("sending"),
            }
        }
        // Whatever happened, leave: that also ends the receive loop below (a leave that times
        // out still closes the group).
        sender.leave().context("leaving the group")
    });

    let stdout = std::io::stdout();
    // `recv` returns None once the leave completed and every event before it was read.
    while let Some(ev) = group.recv() {
        let mut out = stdout.lock();
        match &ev {
            GroupEvent::Deliver(d) => {
                writeln!(out, "{}: {}", d.sender, String::from_utf8_lossy(&d.payload))?;
                if let Some(l) = log.as_mut() {
                    l.deliver(d)?;
                }
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
                if let Some(l) = log.as_mut() {
                    l.view(v)?;
                }
            }
        }
        out.flush()?;
        // Flushed per event: a person may read the log while the member runs, and a killed
        // member keeps what it delivered.
        if let Some(l) = log.as_mut() {
            l.flush()?;
        }
    }
    let result = input
        .join()
        .map_err(|_| anyhow::anyhow!("stdin thread panicked"))?;
    if let Some(mut l) = log {
        l.flush()?;
    }
    result?;
    eprintln!("member {me} left the group");
    Ok(ExitCode::SUCCESS)
}
