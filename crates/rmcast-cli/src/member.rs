//! `rmcast member`: a chat-style group member. Lines read from stdin are sent to the group (one
//! message per line, at most `--max-message-bytes`); deliveries are printed as
//! `<sender>: <text>` (control characters escaped on a terminal), view changes as
//! `* view ...` lines and crash recovery as `* failed ...`, `* reset ...`, `* reset failed ...`
//! and `* expelled ...` lines, each situation told once. `/reset [N]` rebuilds the group after
//! a failure (ResetGroup) and `/stats` prints the counters. End of input, SIGINT, SIGTERM or
//! SIGHUP make the member leave the group cleanly and exit; a second signal exits at once.
//! Lines are sent without waiting for each to complete (a bounded window of sends in flight, so
//! that a pipe runs at the engine's pace); a failed one is reported with its line number, and
//! end of input waits for those in flight before leaving. The exit status is non-zero when
//! anything typed could not be sent. With `--json` every event (and every warning) is one JSON
//! object per line on stdout instead ([`MemberLine`]), and the lines for people go to stderr.
//!
//! Also home of [`GroupArgs`], the group-selection flags shared with `rmcast worker`.

use crate::iface::Interface;
use crate::names::{id_list, parse_group_name};
use crate::output::{JsonFlag, Output};
use anyhow::{bail, Context};
use clap::Args;
use rmcast::{
    EngineChoice, GroupAddr, GroupConfig, GroupEvent, Node, NodeConfig, NodeId, OpenMode,
    PendingSend, Recovery, RecoveryPolicy,
};
use rmcast_sim::log::LogWriter;
use serde::Serialize;
use std::borrow::Cow;
use std::io::{BufRead, IsTerminal, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The engine names `--engine` takes: those of the one registry
/// ([`rmcast_proto::catalog::names`]); an unknown name is refused with the list.
pub fn parse_engine(name: &str) -> Result<String, String> {
    match rmcast_proto::catalog::find(name) {
        Some(f) => Ok(f.name().to_string()),
        None => Err(format!(
            "unknown engine `{name}` (engines: {})",
            rmcast_proto::catalog::names().join(", ")
        )),
    }
}

/// Parse `--method`.
pub fn parse_method(s: &str) -> Result<rmcast_proto::sequencer::Method, String> {
    use rmcast_proto::sequencer::Method;
    match s {
        "auto" => Ok(Method::Auto),
        "pb" | "PB" => Ok(Method::Pb),
        "bb" | "BB" => Ok(Method::Bb),
        _ => Err(format!("unknown method `{s}` (methods: auto, pb, bb)")),
    }
}

/// Help text of the `--qos` flags.
pub const QOS_HELP: &str = "Quality of service of every message sent: unreliable, reliable, source-ordered, totally-ordered, k-resilient=K (held by K members besides the sender before delivery), majority-resilient or totally-resilient; the engine must serve it [default: the strongest of unreliable, reliable, source-ordered and totally-ordered that the engine's guarantees declare, e.g. source-ordered for gossip]";

/// The level of every message when no `--qos` is given: the strongest delivery order
/// (unreliable < reliable < source-ordered < totally-ordered) the engine's declared
/// [`rmcast_proto::Guarantees`] serve, read from the registry. The resilient levels are left
/// to be asked for: they make every delivery wait for more holders (the ring's
/// totally-resilient, for one, waits for every member).
pub fn default_qos(engine: &str, r: u8) -> anyhow::Result<rmcast::Qos> {
    let g = rmcast_proto::catalog::EngineChoice::named(engine)
        .with_context(|| format!("engine `{engine}`"))?
        .resilience(r)
        .guarantees();
    Ok(rmcast_sim::scenario::strongest_qos(&g))
}

/// `--qos` as given, else [`default_qos`]; either way refused ([`check_qos`]) if the engine
/// does not serve it.
pub fn qos_or_default(
    given: Option<rmcast::Qos>,
    engine: &str,
    r: u8,
) -> anyhow::Result<rmcast::Qos> {
    let qos = match given {
        Some(q) => q,
        None => default_qos(engine, r)?,
    };
    check_qos(engine, r, qos)?;
    Ok(qos)
}

/// A `--qos` level (RMP's per-message quality of service), by its name.
pub fn parse_qos(s: &str) -> Result<rmcast::Qos, String> {
    s.parse()
}

/// Refuse a `--qos` the engine (with resilience `r`) does not serve, saying what it serves.
pub fn check_qos(engine: &str, r: u8, qos: rmcast::Qos) -> anyhow::Result<()> {
    let choice = rmcast_proto::catalog::EngineChoice::named(engine)
        .with_context(|| format!("engine `{engine}`"))?
        .resilience(r);
    let served = choice.guarantees().qos;
    if served.contains(qos) {
        return Ok(());
    }
    let names = served.names();
    bail!(
        "--qos {qos}: the {engine} engine{} does not serve it (it serves: {})",
        if r > 0 {
            format!(" at resilience {r}")
        } else {
            String::new()
        },
        names.join(", ")
    )
}

/// Refuse unicast peers this host cannot send to from `interface` (a loopback interface reaches
/// only loopback addresses): every datagram to them would fail.
pub fn check_unicast_peers(interface: Interface, peers: &[SocketAddr]) -> anyhow::Result<()> {
    // Bound as the node binds: a link-local address with its interface as scope.
    let local =
        match interface.addr {
            IpAddr::V6(a) if a.is_unicast_link_local() => SocketAddr::V6(
                std::net::SocketAddrV6::new(a, 0, 0, interface.index.unwrap_or(0)),
            ),
            a => SocketAddr::new(a, 0),
        };
    for p in peers {
        if p.is_ipv4() != interface.addr.is_ipv4() {
            bail!(
                "unicast peer {p} is not of the family of interface {interface}; give \
                 --interface an address of the peers' family"
            );
        }
        let s = std::net::UdpSocket::bind(local)
            .with_context(|| format!("opening a socket on interface {interface}"))?;
        if let Err(e) = s.connect(p) {
            bail!(
                "unicast peer {p} cannot be reached from interface {interface} ({e}); \
                 list addresses this interface reaches"
            );
        }
    }
    Ok(())
}

/// Help text of the `--engine` flags.
pub const ENGINE_HELP: &str = "Protocol engine: sequencer (Amoeba: total order through a sequencer, resilience r), ring (RMP: a rotating token site, a quality of service per message), gossip (Bimodal Multicast: epidemic repair, FIFO per sender), tree (RMTP: one sender, designated receivers) or txn (the Multidriver: multicast transactions)";

/// Which group to be in, and how to get there.
#[derive(Args, Debug, Clone)]
pub struct GroupArgs {
    /// Group name; hashed to the group id and, unless --addr or --unicast-peers is given, to
    /// the multicast address and port.
    #[arg(short = 'g', long, value_parser = parse_group_name)]
    pub group: String,
    #[arg(short = 'e', long, default_value = "sequencer", value_parser = parse_engine, help = ENGINE_HELP)]
    pub engine: String,
    #[arg(long, value_parser = parse_qos, help = QOS_HELP)]
    pub qos: Option<rmcast::Qos>,
    /// This member's node id (unique in the group); random when omitted.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub id: Option<u32>,
    /// Resilience degree r: a send completes once r + 1 members hold the message. Every member
    /// must use the same value.
    #[arg(long, default_value_t = 0)]
    pub resilience: u8,
    /// Sequencer engine only: how a message reaches the sequencer: `pb` (point-to-point, then
    /// the sequencer's broadcast: the message crosses the network twice), `bb` (the sender
    /// broadcasts, the sequencer broadcasts a short accept), or `auto` (PB for small messages,
    /// BB from 512 bytes, as Amoeba chooses).
    #[arg(long, default_value = "auto", value_parser = parse_method)]
    pub method: rmcast_proto::sequencer::Method,
    /// Create a new group (default: join, or create if nobody answers).
    #[arg(long, conflicts_with = "join")]
    pub create: bool,
    /// Join an existing group; fail if nobody answers.
    #[arg(long)]
    pub join: bool,
    /// Explicit multicast address and port, e.g. 239.1.2.3:40000 or [ff02::4d43]:7400 (of the
    /// family of --interface).
    #[arg(long, conflicts_with = "unicast_peers")]
    pub addr: Option<SocketAddr>,
    /// No multicast: the unicast addresses of all members (this one may be listed too),
    /// comma-separated, e.g. 10.0.0.1:7000 or [fd00::1]:7000. Needs --port.
    #[arg(long, value_delimiter = ',', requires = "port")]
    pub unicast_peers: Vec<SocketAddr>,
    /// Port of this member's unicast socket (default: any free port).
    #[arg(long)]
    pub port: Option<u16>,
    /// Largest datagram the engine writes, 256..=65507 [default: the interface's MTU less the
    /// IP and UDP headers: 65507 on loopback, 1472 on Ethernet; over IPv6 65488 and 1452].
    #[arg(long, value_parser = parse_max_datagram)]
    pub max_datagram_bytes: Option<usize>,
    /// How long a join waits to be admitted (a bare number: milliseconds).
    #[arg(long = "join-timeout", alias = "join-timeout-ms", default_value_t = rmcast::DEFAULT_JOIN_TIMEOUT.as_millis() as u64, value_name = "DURATION", value_parser = crate::dur::ms(1, 3_600_000))]
    pub join_timeout_ms: u64,
    #[command(flatten)]
    pub recovery: RecoveryArgs,
    #[command(flatten)]
    pub net: NetArgs,
    #[command(flatten)]
    pub keys: crate::keys::KeyArgs,
}

/// Where this member's traffic goes on the network: `rmcast member`, `rmcast worker`,
/// `rmcast demo` and `rmcast bench` take these flags, and the last two pass them to their
/// workers.
#[derive(Args, Debug, Clone)]
pub struct NetArgs {
    /// Interface address, IPv4 or IPv6: the unicast socket binds to it and multicast is sent
    /// and joined on its interface. IPv6 may name the interface after %, by name or index
    /// (`::1`, `fd00::5%eth0`, `::%lo`); without it, the interface that holds the address.
    /// The default keeps all traffic on this host; give an address of this host's network
    /// interface to reach other hosts (and for --unicast-peers on other hosts).
    #[arg(long, default_value_t = Interface::default(), value_parser = crate::iface::parse_interface)]
    pub interface: Interface,
    /// Multicast time-to-live (IPv6: hop limit): 0 keeps multicast on this host, 1 reaches the
    /// local network.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=255))]
    pub ttl: u32,
}

impl NetArgs {
    /// A node configuration with these settings (the rest default).
    pub fn node_config(&self) -> NodeConfig {
        let mut c = NodeConfig::default()
            .interface(self.interface.addr)
            .multicast_ttl(self.ttl);
        c.interface_index = self.interface.index;
        c
    }

    /// The flags that give these settings to a child process (`rmcast worker`).
    pub fn to_args(&self) -> Vec<String> {
        vec![
            format!("--interface={}", self.interface),
            format!("--ttl={}", self.ttl),
        ]
    }
}

/// The sequencer's failure detection and reset policy (Amoeba paper section 5.3). Every member of
/// a group should use the same values.
#[derive(Args, Debug, Clone)]
pub struct RecoveryArgs {
    /// Do not reset the group automatically after a failure: it stays in recovery mode (sends
    /// fail) until the application resets it (`rmcast member`: type `/reset`; demo and bench
    /// workers reset as soon as they see the failure).
    #[arg(long)]
    pub manual_reset: bool,
    /// Smallest group a reset may form, this member included; 0: a majority of the view
    /// before the failure (the majority policy: a send then completes only once a majority
    /// holds it, so no send completes on a minority side of a partition).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=256))]
    pub min_members: u16,
    /// Probe a peer not heard from for this long (a bare number: milliseconds); 0 turns failure detection off.
    #[arg(long = "alive-interval", alias = "alive-interval-ms", default_value_t = RecoveryPolicy::default().alive_interval_ms, value_name = "DURATION", value_parser = crate::dur::ms(0, 600_000))]
    pub alive_interval_ms: u64,
    /// Unanswered probes before a peer counts as failed.
    #[arg(long, default_value_t = RecoveryPolicy::default().alive_retries,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub alive_retries: u32,
    /// Shortest wait for the answer to one probe (a bare number: milliseconds; it grows with the measured
    /// round-trip time).
    #[arg(long = "alive-timeout", alias = "alive-timeout-ms", default_value_t = RecoveryPolicy::default().alive_timeout_ms, value_name = "DURATION", value_parser = crate::dur::ms(1, 60_000))]
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
    /// The level of every message: `--qos`, or the strongest the engine serves
    /// ([`qos_or_default`]); an error says what the engine serves if it does not serve it.
    pub fn qos(&self) -> anyhow::Result<rmcast::Qos> {
        qos_or_default(self.qos, &self.engine, self.resilience)
    }

    /// The node and group configuration these flags describe.
    pub fn configs(&self) -> anyhow::Result<(NodeConfig, GroupConfig)> {
        let mut node = self.net.node_config().port(self.port.unwrap_or(0));
        node.id = self.id.map(NodeId);
        let mut group = GroupConfig::new(self.group.clone());
        group.mode = match (self.create, self.join) {
            (true, _) => OpenMode::Create,
            (_, true) => OpenMode::Join,
            _ => OpenMode::JoinOrCreate,
        };
        group.engine = EngineChoice::named(&self.engine)?
            .resilience(self.resilience)
            .recovery(self.recovery.policy());
        // Engines whose registry defaults suit the papers' experiments, not a member on a LAN
        // or one host: they run their own parameters here, with the settings of the flags.
        let tuned: Option<std::sync::Arc<dyn rmcast_proto::EngineFactory>> =
            match self.engine.as_str() {
                "sequencer" if self.method != rmcast_proto::sequencer::Method::Auto => Some(
                    std::sync::Arc::new(rmcast_proto::sequencer::SequencerFactory::with_config(
                        rmcast_proto::sequencer::Config {
                            method: self.method,
                            ..rmcast_proto::sequencer::Config::new(0)
                        },
                    )),
                ),
                _ if self.method != rmcast_proto::sequencer::Method::Auto => {
                    bail!("--method is for the sequencer engine, not {}", self.engine)
                }
                // The LAN parameters, not Table III's 25 packets a second (`TreeConfig::lan`).
                // RMTP receivers join silently and nobody admits them: a tree member that joins
                // opens its group as a receiver, in create mode, as `rmcast receive` does (a
                // join would wait for an admission that never comes).
                "tree" => {
                    let f =
                        rmcast_proto::tree::TreeFactory::new(rmcast_proto::tree::TreeConfig::lan());
                    Some(std::sync::Arc::new(if group.mode == OpenMode::Join {
                        group.mode = OpenMode::Create;
                        f.receiver()
                    } else {
                        f
                    }))
                }
                // One transaction per line: decide each open once the last set's receivers
                // answered, rather than wait out the open's timeout every time
                // (`txn::Config::early_open`). Endpoints keep no membership and nobody admits
                // one: a joiner opens its own, as the creator does.
                "txn" => Some(std::sync::Arc::new({
                    if group.mode == OpenMode::Join {
                        group.mode = OpenMode::Create;
                    }
                    rmcast_proto::txn::TxnFactory::with_config(rmcast_proto::txn::Config {
                        early_open: true,
                        ..rmcast_proto::txn::Config::from_settings(&group.engine.settings)
                    })
                })),
                _ => None,
            };
        if let Some(factory) = tuned {
            let settings = group.engine.settings;
            group.engine = EngineChoice::custom(factory);
            group.engine.settings = settings;
        }
        // The group's own level is the flag's (or the engine's strongest): an engine that does
        // not serve the runtime's default (totally ordered) must still open a group.
        group.qos = self.qos()?;
        group.addr = match (self.addr, self.unicast_peers.is_empty()) {
            (Some(a), _) => {
                if !a.ip().is_multicast() {
                    bail!("--addr {a} is not a multicast address (224.0.0.0/4, ff00::/8)");
                }
                if a.is_ipv4() != node.interface.is_ipv4() {
                    bail!(
                        "--addr {a} is not of the family of --interface {}; give an \
                         interface address of the group's family (e.g. --interface ::1)",
                        self.net.interface
                    );
                }
                GroupAddr::Multicast(a)
            }
            (None, false) => {
                check_unicast_peers(self.net.interface, &self.unicast_peers)?;
                GroupAddr::Unicast(self.unicast_peers.clone())
            }
            (None, true) => GroupAddr::FromName,
        };
        group.max_datagram_bytes = self.max_datagram_bytes;
        group.join_timeout = Duration::from_millis(self.join_timeout_ms);
        group.keys = self.keys.keyring()?;
        Ok((node, group))
    }

    /// Start a node and enter the group; `completion_events`: see
    /// [`GroupConfig::completion_events`] (wanted by whoever logs completions); `heal`: see
    /// [`GroupConfig::heal`].
    pub fn open(
        &self,
        completion_events: bool,
        heal: Option<Duration>,
    ) -> anyhow::Result<(Node, rmcast::Group)> {
        self.qos()?;
        let (node_cfg, mut group_cfg) = self.configs()?;
        group_cfg.completion_events = completion_events;
        group_cfg.heal = heal;
        let node = Node::new(node_cfg).context("starting the node")?;
        let group = node
            .open_group(group_cfg)
            .with_context(|| format!("entering group {:?}", self.group))?;
        Ok((node, group))
    }
}

/// Default of `--max-message-bytes`: a generous chat line.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 << 10;
/// Largest `--max-message-bytes`: the sequencer's largest message.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Arguments of `rmcast member`.
#[derive(Args, Debug)]
pub struct MemberArgs {
    #[command(flatten)]
    pub group: GroupArgs,
    /// Write one JSON line per delivery and view change to this file.
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Read settings from this TOML file (one key per flag, e.g. `resilience = 1`; see
    /// `rmcast config --print-defaults`); flags given here override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Serve this member's counters for Prometheus on 127.0.0.1:PORT (0: any free port,
    /// printed at start).
    #[arg(long, value_name = "PORT")]
    pub metrics_port: Option<u16>,
    /// Longest line sent, in bytes (without its newline); a longer line is refused, and the
    /// exit status is then non-zero.
    #[arg(long, default_value_t = DEFAULT_MAX_MESSAGE_BYTES,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new()
              .range(1..=MAX_MESSAGE_BYTES as u64))]
    pub max_message_bytes: usize,
    /// Do not heal the group: a member left out of it stays out (and exits), and a group that
    /// formed apart from another of the same name stays apart.
    #[arg(long)]
    pub no_heal: bool,
    /// How often the member that coordinates the group announces it, so that groups of one
    /// name that hear each other merge (the larger absorbs the smaller) and members left out
    /// come back, within a few of these.
    #[arg(long = "heal-interval", alias = "heal-interval-ms", default_value_t = rmcast::DEFAULT_HEAL_INTERVAL.as_millis() as u64, value_name = "DURATION", value_parser = crate::dur::ms(50, 600_000))]
    pub heal_interval_ms: u64,
    /// Hold handler lock H (0 to 5; `--engine ring`): this member answers the requests that
    /// name it (`rmcast call --handler H`), and takes the lock again whenever it is free (its
    /// holder left or crashed). Any member may also type `/lock N` and `/unlock N`.
    #[arg(long, value_name = "H", value_parser = clap::value_parser!(u8).range(0..6))]
    pub handler: Option<u8>,
    #[command(flatten)]
    pub output: JsonFlag,
}

/// What `rmcast member --json` prints on standard output, one object per line; its `kind`
/// says which. The text form prints the same events as the lines described in the module
/// documentation.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum MemberLine<'a> {
    /// The member is in the group (the text form says it on standard error).
    Started {
        member: u32,
        group: &'a str,
        engine: &'a str,
        created: bool,
        /// The group's multicast address, if it has one.
        multicast: Option<String>,
        /// The unicast peers of a group without multicast.
        unicast_peers: Vec<String>,
        max_datagram_bytes: usize,
    },
    /// A message delivered: `seq` is its position in the group's delivery order (the total
    /// order for ordering engines, the sender's own sequence for the others), `msg` the
    /// sender's number for it, `view` the view it was delivered in; `text` is the payload
    /// (bytes that are not UTF-8 replaced).
    Deliver {
        sender: u32,
        seq: u64,
        msg: u64,
        view: u64,
        text: Cow<'a, str>,
    },
    /// A new view; `left` when this member is no longer in it.
    View {
        id: u64,
        members: Vec<u32>,
        coordinator: u32,
        joined: Option<u32>,
        left: Option<u32>,
        this_member_left: bool,
    },
    /// Messages the engine reports lost (gossip): `count` of `sender`'s from `first_seq`.
    Loss {
        sender: u32,
        first_seq: u64,
        count: u64,
    },
    /// A member is suspected to have crashed; sends are refused until the group is reset.
    Failed { suspect: u32, manual_reset: bool },
    /// A reset could not form a group yet.
    ResetFailed { reachable: usize, needed: usize },
    /// The group was reset (a new incarnation without the members removed).
    Reset { incarnation: u32, removed: Vec<u32> },
    /// The group went on without this member.
    Expelled { incarnation: u32, rejoining: bool },
    /// A larger group of the name was found; this member joins it.
    Merging { into: u32 },
    /// The group is full.
    Refused { limit: u32 },
    /// A lock changed hands (ring): `holder` none when free.
    Lock {
        lock: u16,
        holder: Option<u32>,
        asked_by: Option<u32>,
    },
    /// A reply to this member's request.
    Reply {
        from: u32,
        request: u64,
        text: Cow<'a, str>,
    },
    /// A request handed to this member to answer.
    Forwarded {
        sender: u32,
        msg: u64,
        text: Cow<'a, str>,
    },
    /// Something did not work out (a line not sent, an answer lost); `line` is the input
    /// line it concerns, if any. The text form says it on standard error.
    Warning { line: Option<u64>, message: String },
    /// The member left the group (the text form says it on standard error).
    Left { member: u32 },
}

impl MemberLine<'_> {
    /// The line for recovery event `r` (whose text [`RecoveryNotices::line`] makes).
    fn recovery(r: &Recovery, manual_reset: bool, heal: bool) -> MemberLine<'static> {
        match r {
            Recovery::Failed { suspect } => MemberLine::Failed {
                suspect: suspect.0,
                manual_reset,
            },
            Recovery::ResetFailed { reachable, needed } => MemberLine::ResetFailed {
                reachable: *reachable,
                needed: *needed,
            },
            Recovery::Reset {
                incarnation,
                removed,
            } => MemberLine::Reset {
                incarnation: *incarnation,
                removed: removed.iter().map(|m| m.0).collect(),
            },
            Recovery::Expelled { incarnation } => MemberLine::Expelled {
                incarnation: *incarnation,
                rejoining: heal,
            },
            Recovery::Merging { into } => MemberLine::Merging { into: into.0 },
            Recovery::Refused { limit } => MemberLine::Refused { limit: *limit },
        }
    }
}

/// A warning: `warning: ...` on standard error, or a JSON line beside the events.
fn warn(out: &Output, line: Option<u64>, message: String) {
    let human = format!("warning: {message}");
    // Standard output closed: the events fail on it too, and end the member.
    let _ = out.summary(&MemberLine::Warning { line, message }, || human);
}

/// Sends `rmcast member` keeps in flight at most: past this many, reading stdin waits for the
/// oldest to complete (back-pressure; nothing is dropped). Large enough that the runtime's send
/// queue and the engine's own buffers set the pace, not this window; what it holds per send is
/// a completion handle (the lines themselves wait in those bounded buffers).
const SEND_WINDOW: usize = 4096;

/// How long end of input waits for the sends in flight to complete before leaving.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A send that failed for this one message (sent in recovery mode, say, or lost with a
/// membership that ended: expelled or merged, and joining again): it does not end the session;
/// the person sees why and may type it again.
fn is_refusal(e: &rmcast::Error) -> bool {
    matches!(
        e,
        rmcast::Error::Send(_)
            | rmcast::Error::Failed { .. }
            | rmcast::Error::MemberFailed { .. }
            | rmcast::Error::Expelled { .. }
            | rmcast::Error::Merged { .. }
    )
}

/// How the stdin thread ended.
enum InputEnd {
    /// End of input: leave.
    Eof,
    /// Input the member cannot send (not text): leave and fail.
    Bad(String),
}

/// Read one line of at most `max` bytes (newline excluded) into `buf`. `Ok(None)` at end of
/// input; `Ok(Some(false))` for a longer line, whose rest is skipped without holding it.
fn read_line_bounded(
    input: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Option<bool>> {
    buf.clear();
    let mut too_long = false;
    let mut any = false;
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            return Ok(any.then_some(!too_long && buf.len() <= max));
        }
        any = true;
        let (part, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        if !too_long {
            // One byte of room for a `\r` before the newline, taken off below.
            if buf.len() + part.len() > max + 1 {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(part);
            }
        }
        let used = done.unwrap_or(chunk.len());
        input.consume(used);
        if done.is_some() {
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(Some(!too_long && buf.len() <= max));
        }
    }
}

/// `text` as it may be shown on a terminal: control characters (escape sequences that could
/// clear the screen or set the window title, bells, carriage returns) are written as `\x1b`,
/// `\u{9b}` and so on; tabs stay.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\t') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\t' => out.push(c),
            c if (c as u32) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Print `line` and a newline to stderr in one write, so that it does not interleave with
/// another process's line on a shared terminal.
pub fn say(line: &str) {
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// Run `rmcast member`.
pub fn run(args: MemberArgs) -> anyhow::Result<ExitCode> {
    // Completions are worth logging (the log checker uses them), and only then worth having.
    let heal = (!args.no_heal).then(|| Duration::from_millis(args.heal_interval_ms));
    let (node, mut group) = args.group.open(args.log.is_some(), heal)?;
    let me = node.id();
    let mut log = match &args.log {
        Some(p) => {
            Some(LogWriter::create(p, me.0).with_context(|| format!("creating {}", p.display()))?)
        }
        None => None,
    };
    let out = Output::new(args.output);
    let started = MemberLine::Started {
        member: me.0,
        group: group.name(),
        engine: &args.group.engine,
        created: group.created(),
        multicast: group.multicast_addr().map(|a| a.to_string()),
        unicast_peers: group
            .unicast_peers()
            .iter()
            .map(|a| a.to_string())
            .collect(),
        max_datagram_bytes: group.max_datagram_bytes(),
    };
    let started_text = format!(
        "member {me} {} group {:?} ({}, datagrams up to {} B); type lines to send them, \
         /stats for counters, Ctrl-D or Ctrl-C to leave",
        if group.created() { "created" } else { "joined" },
        group.name(),
        match (group.multicast_addr(), group.unicast_peers()) {
            (Some(a), _) => format!("multicast {a}"),
            (None, peers) => format!("unicast to {} peers", peers.len()),
        },
        group.max_datagram_bytes()
    );
    out.summary(&started, || started_text)?;
    let manual_reset = args.group.recovery.manual_reset;
    let min_members = args.group.recovery.min_members as usize;
    let qos = args.group.qos()?;
    if manual_reset {
        say("manual reset: after a failure, type /reset to rebuild the group");
    }

    // SIGINT, SIGTERM, SIGHUP: leave (on the handler's thread); the receive loop below then
    // ends as it does after end of input. A second signal exits at once.
    let leave_result: Arc<Mutex<Option<Result<(), String>>>> = Arc::default();
    {
        let sender = group.sender();
        let result = leave_result.clone();
        crate::signals::install("leaving the group", move || {
            let r = sender.leave().map_err(|e| e.to_string());
            *result.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        })?;
    }

    // For `rmcast stat`; a member that cannot publish still chats.
    let _publisher = match crate::stats::Publisher::start(group.sender()) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("warning: not publishing counters for `rmcast stat`: {e}");
            None
        }
    };

    if let Some(port) = args.metrics_port {
        let mut registry = prometheus_client::registry::Registry::default();
        rmcast::metrics::register(&mut registry, &node).add_group(&group.sender());
        let addr = crate::stats::serve_prometheus(registry, port)
            .with_context(|| format!("serving metrics on 127.0.0.1:{port}"))?;
        eprintln!("metrics for Prometheus on http://{addr}/metrics");
    }

    // stdin on its own thread: sending may block on back-pressure, and deliveries must keep
    // flowing meanwhile or the group stalls.
    let sender = group.sender();
    let max_message_bytes = args.max_message_bytes;
    let refused = Arc::new(AtomicU64::new(0));
    let refused_in = refused.clone();
    let unconfirmed = Arc::new(AtomicU64::new(0));
    let unconfirmed_in = unconfirmed.clone();
    // Sends in flight: the stdin thread queues each line and reads on; this thread waits for
    // the completions, oldest first, and reports the failures as the blocking send did. The
    // bounded channel is the window.
    let (window, in_window) = std::sync::mpsc::sync_channel::<(u64, PendingSend)>(SEND_WINDOW);
    let (drained_tx, drained) = std::sync::mpsc::channel::<()>();
    let in_flight = Arc::new(AtomicU64::new(0));
    let waiter = {
        let refused = refused.clone();
        let in_flight = in_flight.clone();
        std::thread::spawn(move || -> anyhow::Result<()> {
            for (line_no, pending) in in_window {
                let r = pending.wait();
                in_flight.fetch_sub(1, Ordering::Relaxed);
                match r {
                    Ok(_) => {}
                    Err(e) if is_refusal(&e) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                        warn(&out, Some(line_no), format!("line {line_no} not sent: {e}"))
                    }
                    // The group closed (a signal's leave, an expulsion): said elsewhere.
                    Err(rmcast::Error::Closed) => {}
                    Err(e) => return Err(e).context("sending"),
                }
            }
            let _ = drained_tx.send(());
            Ok(())
        })
    };
    let input = std::thread::spawn(move || -> anyhow::Result<InputEnd> {
        let mut fatal = None;
        let stdin = std::io::stdin();
        let mut stdin = stdin.lock();
        let mut buf = Vec::new();
        let mut line_no = 0u64;
        let end = loop {
            line_no += 1;
            let fits = match read_line_bounded(&mut stdin, &mut buf, max_message_bytes) {
                Ok(None) => break InputEnd::Eof,
                Ok(Some(fits)) => fits,
                Err(e) => break InputEnd::Bad(format!("reading stdin: {e}")),
            };
            if !fits {
                refused_in.fetch_add(1, Ordering::Relaxed);
                warn(
                    &out,
                    Some(line_no),
                    format!(
                        "line {line_no} not sent: longer than --max-message-bytes \
                         ({max_message_bytes} bytes)"
                    ),
                );
                continue;
            }
            let Ok(line) = std::str::from_utf8(&buf) else {
                break InputEnd::Bad(format!(
                    "stdin line {line_no} is not UTF-8 text (binary input?)"
                ));
            };
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["/reset"] | ["/reset", _] => {
                    let min = match words.get(1).map(|w| w.parse::<usize>()) {
                        None => min_members,
                        Some(Ok(n)) => n,
                        Some(Err(_)) => {
                            eprintln!("rmcast: usage: /reset [MIN_MEMBERS]");
                            continue;
                        }
                    };
                    // ResetGroup; how it ends shows as `* reset` or `* reset failed` lines.
                    match sender.reset(min) {
                        Ok(()) => eprintln!("rmcast: reset started"),
                        Err(e) => warn(&out, Some(line_no), format!("reset refused: {e}")),
                    }
                    continue;
                }
                ["/lock" | "/unlock", n] => {
                    let Ok(n) = n.parse::<u16>() else {
                        eprintln!("rmcast: usage: /lock N or /unlock N (a lock number)");
                        continue;
                    };
                    let r = if words[0] == "/lock" {
                        sender.lock(n)
                    } else {
                        sender.unlock(n)
                    };
                    // The outcome shows as a `* lock` line once ordered.
                    if let Err(e) = r {
                        warn(&out, Some(line_no), format!("lock request refused: {e}"));
                    }
                    continue;
                }
                ["/stats"] => {
                    match crate::stats::snapshot(&sender) {
                        // Beside JSON lines, for people: on standard error.
                        Ok(s) if out.is_json() => eprint!("{}", s.render()),
                        Ok(s) => print!("{}", s.render()),
                        Err(e) => warn(&out, Some(line_no), format!("no stats: {e}")),
                    }
                    continue;
                }
                _ => {}
            }
            // Queued in the order read, then on to the next line: the completion comes to the
            // waiter thread. A full window waits here for the oldest send (back-pressure).
            match sender.start_send_with(line.to_string(), qos) {
                Ok(pending) => {
                    in_flight.fetch_add(1, Ordering::Relaxed);
                    if window.send((line_no, pending)).is_err() {
                        // The waiter stopped on an error; it is reported below.
                        break InputEnd::Eof;
                    }
                }
                Err(e) if is_refusal(&e) => {
                    refused_in.fetch_add(1, Ordering::Relaxed);
                    warn(&out, Some(line_no), format!("line {line_no} not sent: {e}"))
                }
                Err(rmcast::Error::Closed) => break InputEnd::Eof,
                Err(e) => {
                    fatal = Some(anyhow::Error::new(e).context("sending"));
                    break InputEnd::Eof;
                }
            }
        };
        // End of input: the lines in flight complete before the leave, or they could be lost
        // with it; bounded, since a group in recovery may hold them long.
        drop(window);
        let waited = match drained.recv_timeout(DRAIN_TIMEOUT) {
            Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => waiter
                .join()
                .map_err(|_| anyhow::anyhow!("send completion thread panicked"))?,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let n = in_flight.load(Ordering::Relaxed);
                unconfirmed_in.store(n, Ordering::Relaxed);
                warn(
                    &out,
                    None,
                    format!(
                        "{n} line(s) not confirmed within {} s; leaving anyway",
                        DRAIN_TIMEOUT.as_secs()
                    ),
                );
                Ok(())
            }
        };
        // Whatever happened, leave: that also ends the receive loop below (a leave that times
        // out still closes the group). After a signal the group may be closed already.
        let left = match sender.leave() {
            Ok(()) | Err(rmcast::Error::Closed) => Ok(()),
            Err(e) => Err(e).context("leaving the group"),
        };
        if let Some(e) = fatal {
            return Err(e);
        }
        waited?;
        left.map(|()| end)
    });

    let terminal = std::io::stdout().is_terminal();
    // What the member a view names does, in the engine's own words.
    let orderer = match args.group.engine.as_str() {
        "sequencer" => "sequencer",
        "ring" => "token site",
        _ => "coordinator",
    };
    let handler = args.handler;
    if let Some(h) = handler {
        let locks = EngineChoice::named(&args.group.engine)?
            .guarantees()
            .capabilities
            .locks;
        if !locks {
            bail!("--handler needs an engine with locks, --engine ring (handler locks are RMP's)");
        }
        group
            .lock(u16::from(h))
            .context("asking for the handler lock")?;
    }
    let responder = group.sender();
    // Whether this member is in its latest view: one that left does not take a lock its own
    // leave freed.
    let mut in_view = true;
    let mut expelled = false;
    let mut notices = RecoveryNotices::new(manual_reset);
    notices.heal = heal.is_some();
    // `recv` returns None once the leave (or an expulsion) completed and every event before it
    // was read.
    while let Some(ev) = group.recv() {
        match &ev {
            GroupEvent::Deliver(d) => {
                let text = String::from_utf8_lossy(&d.payload);
                let line = MemberLine::Deliver {
                    sender: d.sender.0,
                    seq: d.seq,
                    msg: d.msg,
                    view: d.view,
                    text: text.clone(),
                };
                out.result(&line, || {
                    let text = if terminal {
                        escape_controls(&text)
                    } else {
                        text.clone()
                    };
                    format!("{}: {text}", d.sender)
                })?;
                if d.respond {
                    // This member holds the handler lock the request names: it answers.
                    let answer =
                        format!("member {me} got {:?}", String::from_utf8_lossy(&d.payload));
                    if let Err(e) = responder.reply(d.sender, d.msg, answer) {
                        warn(&out, None, format!("answer to {} not sent: {e}", d.sender));
                    }
                }
            }
            GroupEvent::View(v) => {
                notices.clear();
                in_view = v.members.contains(&me);
                let note = if in_view {
                    ""
                } else {
                    " - this member has left"
                };
                let line = MemberLine::View {
                    id: v.id,
                    members: v.members.iter().map(|m| m.0).collect(),
                    coordinator: v.coordinator.0,
                    joined: v.joined.map(|m| m.0),
                    left: v.left.map(|m| m.0),
                    this_member_left: !in_view,
                };
                out.result(&line, || {
                    format!(
                        "* view {}: members {} ({orderer} {}){note}",
                        v.id,
                        id_list(&v.members),
                        v.coordinator
                    )
                })?;
            }
            GroupEvent::SendComplete { .. } | GroupEvent::Left => {}
            GroupEvent::Reply(r) => {
                let text = String::from_utf8_lossy(&r.payload);
                let line = MemberLine::Reply {
                    from: r.from.0,
                    request: r.request,
                    text: text.clone(),
                };
                out.result(&line, || {
                    format!(
                        "* reply from {} to message {}: {}",
                        r.from,
                        r.request,
                        escape_controls(&text)
                    )
                })?
            }
            GroupEvent::Forwarded(d) => {
                let text = String::from_utf8_lossy(&d.payload);
                let line = MemberLine::Forwarded {
                    sender: d.sender.0,
                    msg: d.msg,
                    text: text.clone(),
                };
                out.result(&line, || {
                    format!(
                        "* request {} of {} handed to this member: {}",
                        d.msg,
                        d.sender,
                        escape_controls(&text)
                    )
                })?;
                let answer = format!("member {me} got {text:?}");
                if let Err(e) = responder.reply(d.sender, d.msg, answer) {
                    warn(&out, None, format!("answer to {} not sent: {e}", d.sender));
                }
            }
            GroupEvent::Lock(l) => {
                let line = MemberLine::Lock {
                    lock: l.lock,
                    holder: l.holder.map(|h| h.0),
                    asked_by: l.asked_by.map(|a| a.0),
                };
                let take = handler.is_some_and(|h| u16::from(h) == l.lock)
                    && l.holder.is_none()
                    && in_view;
                out.result(&line, || {
                    if take {
                        return format!("* lock {}: free; asking for it", l.lock);
                    }
                    format!(
                        "* lock {}: {}{}",
                        l.lock,
                        match l.holder {
                            Some(h) => format!("held by {h}"),
                            None => "free".to_string(),
                        },
                        match l.asked_by {
                            Some(a) if Some(a) != l.holder => format!(" (asked by {a})"),
                            _ => String::new(),
                        }
                    )
                })?;
                if take {
                    // The handler lock is free (its holder left or crashed): take it.
                    if let Err(e) = responder.lock(l.lock) {
                        warn(&out, None, format!("lock request refused: {e}"));
                    }
                }
            }
            GroupEvent::Loss(l) => {
                let line = MemberLine::Loss {
                    sender: l.sender.0,
                    first_seq: l.first_seq,
                    count: l.count,
                };
                out.result(&line, || {
                    format!(
                        "* lost: {} messages of member {} from position {}",
                        l.count, l.sender, l.first_seq
                    )
                })?
            }
            GroupEvent::Recovery(r) => {
                if let (Recovery::Expelled { .. }, None) = (r, heal) {
                    expelled = true;
                }
                if let Some(text) = notices.line(r) {
                    let line = MemberLine::recovery(r, manual_reset, heal.is_some());
                    out.result(&line, || text)?;
                }
            }
            // An event of a later version of the library: in the log only.
            _ => {}
        }
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
    if crate::signals::received() {
        // The stdin thread may wait for a line forever; the leave was the handler's.
        let r = leave_result
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        return match r {
            Some(Ok(())) | None => {
                out.summary(&MemberLine::Left { member: me.0 }, || {
                    format!("member {me} left the group")
                })?;
                Ok(ExitCode::SUCCESS)
            }
            Some(Err(e)) => bail!("leaving the group: {e}"),
        };
    }
    let end = input
        .join()
        .map_err(|_| anyhow::anyhow!("stdin thread panicked"))??;
    out.summary(&MemberLine::Left { member: me.0 }, || {
        format!("member {me} left the group")
    })?;
    if let InputEnd::Bad(why) = end {
        bail!("{why}; left the group");
    }
    let refused = refused.load(Ordering::Relaxed);
    let unconfirmed = unconfirmed.load(Ordering::Relaxed);
    match (refused, unconfirmed) {
        (0, 0) => {}
        (r, 0) => bail!("{r} line(s) were not sent"),
        (0, u) => bail!("{u} line(s) were not confirmed before leaving"),
        (r, u) => bail!("{r} line(s) were not sent and {u} not confirmed before leaving"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Smallest `--max-datagram-bytes` the runtime takes.
const MIN_DATAGRAM_BYTES: usize = rmcast::MIN_DATAGRAM_BYTES;

/// `--max-datagram-bytes`: a size the runtime takes, or an error that says the range and why.
pub fn parse_max_datagram(s: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a size in bytes"))?;
    if !(MIN_DATAGRAM_BYTES..=rmcast::MAX_DATAGRAM_BYTES).contains(&n) {
        return Err(format!(
            "datagram size {n} out of range: the engine needs at least {MIN_DATAGRAM_BYTES} bytes \
             and rmcast's datagrams carry at most {} (the UDP maximum over IPv4), so it must be \
             {MIN_DATAGRAM_BYTES}..={}",
            rmcast::MAX_DATAGRAM_BYTES,
            rmcast::MAX_DATAGRAM_BYTES
        ));
    }
    Ok(n)
}

/// The `* failed`, `* reset failed`, `* reset` and `* expelled` lines: each situation is told
/// once, with what the person can do, and after that only its changes (an automatic reset that
/// finds too few members tries again every few hundred milliseconds, and says so each time).
pub struct RecoveryNotices {
    manual_reset: bool,
    /// The member joins again when left out ([`GroupConfig::heal`]).
    pub heal: bool,
    /// The suspect of the failure told, until the next view.
    failed: Option<NodeId>,
    /// The last reset failure told (reachable, needed), until the next view.
    reset_failed: Option<(usize, usize)>,
}

impl RecoveryNotices {
    /// Nothing told yet.
    pub fn new(manual_reset: bool) -> Self {
        RecoveryNotices {
            manual_reset,
            heal: false,
            failed: None,
            reset_failed: None,
        }
    }

    /// A new view: the next failure is news again.
    pub fn clear(&mut self) {
        self.failed = None;
        self.reset_failed = None;
    }

    /// The line to print for `r`, if it tells something new.
    pub fn line(&mut self, r: &Recovery) -> Option<String> {
        match r {
            Recovery::Failed { suspect } => {
                if self.failed.is_some() {
                    return None;
                }
                self.failed = Some(*suspect);
                Some(format!(
                    "* failed: member {suspect} does not answer; sends are refused until the \
                     group is reset{}",
                    if self.manual_reset {
                        " (type /reset)"
                    } else {
                        " (resetting)"
                    }
                ))
            }
            Recovery::ResetFailed { reachable, needed } => {
                let first = self.reset_failed.is_none();
                if self.reset_failed == Some((*reachable, *needed)) {
                    return None;
                }
                self.reset_failed = Some((*reachable, *needed));
                Some(if first {
                    format!(
                        "* reset failed: {reachable} member(s) reachable, {needed} needed; the \
                         group waits for the others{}. To go on with fewer, type /reset \
                         {reachable} (or start members with --min-members 1)",
                        if self.manual_reset {
                            ""
                        } else {
                            " and keeps trying"
                        }
                    )
                } else {
                    format!("* reset still waiting: {reachable} reachable, {needed} needed")
                })
            }
            Recovery::Reset {
                incarnation,
                removed,
            } => {
                self.clear();
                Some(format!(
                    "* reset: incarnation {incarnation}, removed {}",
                    id_list(removed)
                ))
            }
            Recovery::Expelled { incarnation } => Some(format!(
                "* expelled: the group went on without this member (incarnation {incarnation}){}",
                if self.heal { "; joining it again" } else { "" }
            )),
            Recovery::Merging { into } => {
                self.clear();
                Some(format!(
                    "* merging: a larger group of this name (member {into}'s) was found; \
                     joining it (lines not yet confirmed are not sent: type them again)"
                ))
            }
            Recovery::Refused { limit } => Some(format!(
                "* refused: the group is full (its engine admits at most {limit} members)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--help` lists every engine of the registry by name, so that the list cannot drift.
    #[test]
    fn the_engine_help_names_every_registered_engine() {
        // `toy` is the contract tests' engine, registered only when rmcast-proto's `testing`
        // feature is on (as it is in a workspace test build); users never see it.
        for name in rmcast_proto::catalog::names()
            .into_iter()
            .filter(|n| *n != "toy")
        {
            assert!(ENGINE_HELP.contains(&format!("{name} (")), "{name} missing");
        }
    }

    #[test]
    fn a_waiting_reset_is_told_once_then_only_its_changes() {
        let mut n = RecoveryNotices::new(false);
        let failed = Recovery::Failed { suspect: NodeId(2) };
        let rf = Recovery::ResetFailed {
            reachable: 1,
            needed: 2,
        };
        let first = n.line(&failed).unwrap();
        assert!(first.contains("member 2 does not answer"), "{first}");
        let hint = n.line(&rf).unwrap();
        assert!(
            hint.contains("/reset 1") && hint.contains("--min-members 1"),
            "{hint}"
        );
        for _ in 0..10 {
            assert_eq!(n.line(&failed), None);
            assert_eq!(n.line(&rf), None);
        }
        let change = n.line(&Recovery::ResetFailed {
            reachable: 2,
            needed: 3,
        });
        assert!(change.unwrap().contains("2 reachable, 3 needed"));
        let reset = n
            .line(&Recovery::Reset {
                incarnation: 1,
                removed: vec![NodeId(2)],
            })
            .unwrap();
        assert_eq!(reset, "* reset: incarnation 1, removed 2");
        // After the reset a new failure is news.
        assert!(n.line(&failed).is_some());
    }

    #[test]
    fn without_qos_every_engine_sends_at_the_strongest_order_it_serves() {
        use rmcast::Qos;
        for name in rmcast_proto::catalog::names() {
            let q = default_qos(name, 0).unwrap();
            assert_eq!(qos_or_default(None, name, 0).unwrap(), q, "{name}");
            // Nothing stronger up to total order is served.
            let served = rmcast_proto::catalog::EngineChoice::named(name)
                .unwrap()
                .guarantees()
                .qos;
            let stronger = Qos::levels(0)
                .into_iter()
                .skip_while(|&l| l != q)
                .skip(1)
                .take_while(|&l| l != Qos::KResilient(0));
            for l in stronger {
                assert!(!served.contains(l), "{name}: {l} is served, default {q}");
            }
        }
        assert_eq!(default_qos("gossip", 0).unwrap(), Qos::SourceOrdered);
        assert_eq!(default_qos("sequencer", 1).unwrap(), Qos::TotallyOrdered);
        // Asked for, a level the engine does not serve is still refused, saying what it serves.
        let e = qos_or_default(Some(Qos::TotallyOrdered), "gossip", 0).unwrap_err();
        assert!(
            e.to_string()
                .contains("it serves: unreliable, reliable, source-ordered"),
            "{e}"
        );
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape_controls("plain text\tok"), "plain text\tok");
        assert_eq!(
            escape_controls("\u{1b}[2J\u{1b}]0;pwned\u{7}x\r"),
            "\\x1b[2J\\x1b]0;pwned\\x07x\\x0d"
        );
        assert_eq!(escape_controls("a\u{9b}b"), "a\\u{9b}b");
    }

    #[test]
    fn lines_are_read_within_the_bound() {
        let mut input = std::io::Cursor::new(b"short\r\n0123456789\nend".to_vec());
        let mut buf = Vec::new();
        assert_eq!(
            read_line_bounded(&mut input, &mut buf, 5).unwrap(),
            Some(true)
        );
        assert_eq!(buf, b"short");
        assert_eq!(
            read_line_bounded(&mut input, &mut buf, 5).unwrap(),
            Some(false)
        );
        assert_eq!(
            read_line_bounded(&mut input, &mut buf, 5).unwrap(),
            Some(true)
        );
        assert_eq!(buf, b"end");
        assert_eq!(read_line_bounded(&mut input, &mut buf, 5).unwrap(), None);
    }
}
