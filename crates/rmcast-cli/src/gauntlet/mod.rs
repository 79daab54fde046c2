//! `rmcast gauntlet`: every engine of the registry through the same faults, on real
//! `rmcast member` processes on loopback, each run checked against what the engine declares.
//!
//! A cell is an engine and a fault, on a quiet host or beside two busy loops (`--busy`: two
//! spinning child processes the gauntlet owns). Each run of a cell starts its own group of
//! members (a fresh group name: its own multicast address and port), waits for them to form one
//! view, applies the fault, watches their stdout as a person would (each line stamped with the
//! time it arrived), ends every member by its own handle, and checks the members' `--log` files
//! with [`rmcast_sim::log::verify_logs_for`] against the engine's declared
//! [`rmcast_proto::Guarantees`] at the level the members sent at. Timings, in seconds:
//!
//! * formation: from the first member's start to every member printing one view of all;
//! * detection: from the fault to the last survivor's view change or failure notice;
//! * recovery: from the fault to a probe line written after it delivered at every survivor
//!   (the harness writes a probe to one member's stdin every 50 ms); for the load cells (pipe,
//!   all-send, slow reader, loss) from the first line written to every line delivered
//!   everywhere; for leave-all, from the signal to the last member's exit.
//!
//! What the engine does not declare is not asked of it: the tree has one sender (the creator
//! sends in every cell, and once it is gone nothing can flow), and engines without crash
//! recovery whose traffic needs the dead member (the txn's transactions go to every receiver)
//! pass a crash if the logs hold and the survivors report the failed sends.
//!
//! Every run ends by itself: each wait has a deadline, every member is killed (SIGKILL, by its
//! own handle) at the end of its run, and the busy loops at the end of the gauntlet (they also
//! end by themselves once the gauntlet is gone).

mod proc;
mod table;

use crate::member::parse_engine;
use crate::workers::Netns;
use anyhow::{bail, Context, Result};
use clap::Args;
use proc::{probe_text, Member};
use rmcast_proto::{DeliveryPromise, Guarantees, Senders};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode};
use std::time::{Duration, Instant};
use table::{Cell, RunResult};

/// Every fault the gauntlet applies, by its name on the command line.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// N members started in the same millisecond.
    Start(u32),
    /// 10,000 lines (`--pipe-lines`) piped into one of 3 members.
    Pipe,
    /// Every member sending at once (1,000 lines each).
    AllSend,
    /// kill -9 of the member that orders (the view's coordinator).
    KillOrderer,
    /// kill -9 of an ordinary member.
    KillMember,
    /// SIGSTOP of the member that orders for this many seconds, then SIGCONT.
    Stop(u64),
    /// The member that orders leaves with SIGINT in a group of two.
    LeaveOrderer,
    /// SIGINT to every member at once.
    LeaveAll,
    /// One member's stdout read slowly (2 ms a line) while 2,000 lines go through.
    SlowReader,
    /// This percentage of received datagrams dropped at every member (the runtime's shim).
    Loss(u32),
}

/// The largest group `start-N` starts (each member is a process of its own).
const MAX_START_MEMBERS: u32 = 64;

/// Every fault, in the table's order.
pub const FAULTS: [Fault; 14] = [
    Fault::Start(3),
    Fault::Start(5),
    Fault::Start(8),
    Fault::Pipe,
    Fault::AllSend,
    Fault::KillOrderer,
    Fault::KillMember,
    Fault::Stop(2),
    Fault::Stop(10),
    Fault::LeaveOrderer,
    Fault::LeaveAll,
    Fault::SlowReader,
    Fault::Loss(10),
    Fault::Loss(20),
];

impl Fault {
    /// Its name on the command line and in the table.
    pub fn name(self) -> String {
        match self {
            Fault::Start(n) => format!("start-{n}"),
            Fault::Pipe => "pipe".into(),
            Fault::AllSend => "all-send".into(),
            Fault::KillOrderer => "kill-orderer".into(),
            Fault::KillMember => "kill-member".into(),
            Fault::Stop(s) => format!("stop-{s}s"),
            Fault::LeaveOrderer => "leave-orderer".into(),
            Fault::LeaveAll => "leave-all".into(),
            Fault::SlowReader => "slow-reader".into(),
            Fault::Loss(p) => format!("loss-{p}"),
        }
    }

    /// Every fault, in order.
    pub fn all() -> impl Iterator<Item = Fault> {
        FAULTS.into_iter()
    }

    /// Members of the group.
    fn members(self) -> u32 {
        match self {
            Fault::Start(n) => n,
            Fault::LeaveOrderer => 2,
            _ => 3,
        }
    }
}

/// `--fault`: a fault by its name.
fn parse_fault(s: &str) -> Result<Fault, String> {
    // `start-N` for any group size in range, beyond the table's 3, 5 and 8 (a scale check).
    if let Some(n) = s.strip_prefix("start-").and_then(|n| n.parse::<u32>().ok()) {
        return if (2..=MAX_START_MEMBERS).contains(&n) {
            Ok(Fault::Start(n))
        } else {
            Err(format!(
                "`{s}`: a group of 2 to {MAX_START_MEMBERS} members can be started"
            ))
        };
    }
    Fault::all().find(|f| f.name() == s).ok_or_else(|| {
        format!(
            "unknown fault `{s}` (faults: {})",
            Fault::all().map(Fault::name).collect::<Vec<_>>().join(", ")
        )
    })
}

/// Whether the cells run beside busy loops.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Busy {
    /// On a quiet host only.
    No,
    /// Beside two busy loops only.
    Yes,
    /// Each cell both ways: `--runs` quiet runs, then `--runs` beside busy loops.
    Both,
}

/// Arguments of `rmcast gauntlet`.
#[derive(Args, Debug)]
pub struct GauntletArgs {
    /// Runs of each cell (with `--busy both`: this many quiet and this many busy).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub runs: u32,
    /// Only these engines, comma-separated [default: every engine of the registry].
    #[arg(long, value_delimiter = ',', value_parser = parse_engine)]
    pub engine: Vec<String>,
    /// Only these faults, comma-separated: start-3, start-5, start-8 (start-N: any N from 2
    /// to 64), pipe, all-send,
    /// kill-orderer, kill-member, stop-2s, stop-10s, leave-orderer, leave-all, slow-reader,
    /// loss-10, loss-20 [default: all].
    #[arg(long, value_delimiter = ',', value_parser = parse_fault)]
    pub fault: Vec<Fault>,
    /// Beside two busy loops (spinning child processes of the gauntlet): no, yes, or both
    /// (`--busy` alone: yes).
    #[arg(long, value_enum, default_value = "no", num_args = 0..=1, default_missing_value = "yes")]
    pub busy: Busy,
    /// Lines piped into one member in the pipe cell.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub pipe_lines: u64,
    /// Also write the table (markdown) to this file, rewritten after every cell.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Keep every run's member logs and stderr in this directory (default: a temporary one;
    /// a failed run's files are kept there and named).
    #[arg(long)]
    pub log_dir: Option<PathBuf>,
    /// Run the members in these network namespaces, in turn (member i in the ((i - 1) mod n)-th,
    /// by `ip netns exec`; needs root), each on its namespace's address: members on separate
    /// hosts of a bridged network, as `scripts/netns.sh up 8` makes them. The loss cells then
    /// drop datagrams with an nftables rule in every namespace (`numgen random`) instead of the
    /// runtime's loss shim.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub netns: Vec<String>,
    #[command(flatten)]
    pub output: crate::output::JsonFlag,
}

/// One run, as `--json` prints it.
#[derive(serde::Serialize)]
struct RunLine<'a> {
    kind: &'static str,
    engine: &'a str,
    fault: &'a str,
    busy: bool,
    run: u32,
    passed: bool,
    secs: f64,
    formation_s: Option<f64>,
    detection_s: Option<f64>,
    recovery_s: Option<f64>,
    note: &'a str,
}

/// One cell once its runs are made, as `--json` prints it.
#[derive(serde::Serialize)]
struct CellLine<'a> {
    kind: &'static str,
    engine: &'a str,
    fault: &'a str,
    busy: bool,
    passed: usize,
    made: usize,
    command: &'a str,
}

/// Loss made by nftables in every namespace of a run: the rule is loaded when the run starts
/// and deleted when it is dropped.
struct NftLoss<'a>(&'a [Netns]);

/// The nftables table of the loss cells.
const NFT_TABLE: &str = "rmcast_gauntlet_loss";

impl<'a> NftLoss<'a> {
    fn load(netns: &'a [Netns], percent: u32) -> Result<NftLoss<'a>> {
        let loss = NftLoss(netns);
        for ns in netns {
            let rules = format!(
                "table inet {NFT_TABLE} {{\n chain in {{\n  type filter hook input priority 0;\n  \
                 meta protocol ip numgen random mod 100 < {percent} drop\n }}\n}}\n"
            );
            let mut child = std::process::Command::new("ip")
                .args(["netns", "exec", &ns.name, "nft", "-f", "-"])
                .stdin(std::process::Stdio::piped())
                .spawn()
                .context("running nft (package nftables)")?;
            child
                .stdin
                .take()
                .context("nft stdin")?
                .write_all(rules.as_bytes())?;
            let st = child.wait()?;
            if !st.success() {
                bail!("nft in namespace {} failed ({st})", ns.name);
            }
        }
        Ok(loss)
    }
}

impl Drop for NftLoss<'_> {
    fn drop(&mut self) {
        for ns in self.0 {
            let _ = std::process::Command::new("ip")
                .args([
                    "netns", "exec", &ns.name, "nft", "delete", "table", "inet", NFT_TABLE,
                ])
                .status();
        }
    }
}

/// Arguments of the hidden `rmcast busy-loop`: one of the gauntlet's busy loops.
#[derive(Args, Debug)]
pub struct SpinArgs {
    /// Stop after this many seconds at the latest.
    #[arg(long, default_value_t = 3600)]
    pub secs: u64,
}

/// Spin on one core until `--secs` pass or the parent (the gauntlet) is gone.
pub fn spin(args: SpinArgs) -> Result<ExitCode> {
    let end = Instant::now() + Duration::from_secs(args.secs);
    // SAFETY: getppid(2) takes nothing and cannot fail.
    let parent = unsafe { libc::getppid() };
    let mut x = 0u64;
    while Instant::now() < end {
        for i in 0..1_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
        // SAFETY: as above.
        if unsafe { libc::getppid() } != parent {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The busy loops: killed by their own handles when dropped.
struct BusyLoops(Vec<Child>);

impl BusyLoops {
    fn start(exe: &Path, n: usize) -> Result<BusyLoops> {
        let mut loops = BusyLoops(Vec::new());
        for _ in 0..n {
            let child = std::process::Command::new(exe)
                .args(["busy-loop", "--secs", "14400"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .spawn()
                .context("starting a busy loop")?;
            loops.0.push(child);
        }
        Ok(loops)
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Run `rmcast gauntlet`.
pub fn run(args: GauntletArgs) -> Result<ExitCode> {
    // A member that exits closes its stdin: a probe written after that must fail the write
    // (the writer thread then stops), not end the gauntlet by SIGPIPE. The members reset it.
    // SAFETY: setting a signal's disposition; no handler runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let exe = std::env::current_exe().context("finding the rmcast executable")?;
    let engines: Vec<String> = if args.engine.is_empty() {
        rmcast_proto::catalog::names()
            .into_iter()
            .filter(|n| *n != "toy")
            .map(str::to_string)
            .collect()
    } else {
        args.engine.clone()
    };
    let faults: Vec<Fault> = if args.fault.is_empty() {
        Fault::all().collect()
    } else {
        args.fault.clone()
    };
    let modes: &[bool] = match args.busy {
        Busy::No => &[false],
        Busy::Yes => &[true],
        Busy::Both => &[false, true],
    };
    let (base, temp) = match &args.log_dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(crate::workers::fresh_group_name("rmcast-gauntlet")),
            true,
        ),
    };
    std::fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
    let output = crate::output::Output::new(args.output);
    output.note(&format!(
        "rmcast gauntlet: {} engine(s) x {} fault(s), {} run(s) per cell{}; files in {}",
        engines.len(),
        faults.len(),
        args.runs,
        match args.busy {
            Busy::No => "",
            Busy::Yes => ", beside 2 busy loops",
            Busy::Both => ", quiet and beside 2 busy loops",
        },
        base.display()
    ));
    let netns = Netns::resolve(&args.netns)?;
    if !netns.is_empty() {
        output.note(&format!(
            "members in network namespaces {} (loss by nftables)",
            netns
                .iter()
                .map(|n| format!("{} ({})", n.name, n.addr))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let mut cells: Vec<Cell> = Vec::new();
    let mut any_failed = false;
    'all: for &busy in modes {
        let _loops = if busy {
            Some(BusyLoops::start(&exe, 2)?)
        } else {
            None
        };
        for engine in &engines {
            for &fault in &faults {
                let mut cell = Cell {
                    engine: engine.clone(),
                    fault: fault.name(),
                    busy,
                    command: format!(
                        "rmcast gauntlet --engine {engine} --fault {}{} --runs {}{}",
                        fault.name(),
                        if busy { " --busy" } else { "" },
                        args.runs,
                        if netns.is_empty() {
                            ""
                        } else {
                            " --netns \"$(scripts/netns.sh names)\""
                        }
                    ),
                    runs: Vec::new(),
                };
                for n in 1..=args.runs {
                    if crate::signals::received() {
                        break 'all;
                    }
                    let dir = base.join(format!(
                        "{engine}-{}{}-{n}",
                        fault.name(),
                        if busy { "-busy" } else { "" }
                    ));
                    std::fs::create_dir_all(&dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                    let started = Instant::now();
                    let mut r =
                        match Run::new(&exe, engine, fault, busy, &dir, args.pipe_lines, &netns)
                            .and_then(|mut run| run.go())
                        {
                            Ok(r) => r,
                            Err(e) => RunResult {
                                note: format!("harness error: {e:#}"),
                                ..RunResult::default()
                            },
                        };
                    if !r.passed {
                        any_failed = true;
                        r.note = format!("{} (files: {})", r.note, dir.display());
                    } else if temp {
                        let _ = std::fs::remove_dir_all(&dir);
                    }
                    let line = RunLine {
                        kind: "run",
                        engine,
                        fault: &fault.name(),
                        busy,
                        run: n,
                        passed: r.passed,
                        secs: started.elapsed().as_secs_f64(),
                        formation_s: r.formation.map(|d| d.as_secs_f64()),
                        detection_s: r.detection.map(|d| d.as_secs_f64()),
                        recovery_s: r.recovery.map(|d| d.as_secs_f64()),
                        note: &r.note,
                    };
                    output.result(&line, || format!(
                        "{engine} {}{} run {n}: {} in {:.1} s; formation {}, detection {}, recovery {}{}",
                        fault.name(),
                        if busy { " (busy)" } else { "" },
                        if r.passed { "passed" } else { "FAILED" },
                        started.elapsed().as_secs_f64(),
                        secs(r.formation),
                        secs(r.detection),
                        secs(r.recovery),
                        if r.note.is_empty() {
                            String::new()
                        } else {
                            format!(" - {}", r.note)
                        }
                    ))?;
                    cell.runs.push(r);
                }
                if !cell.runs.is_empty() {
                    if output.is_json() {
                        output.result(
                            &CellLine {
                                kind: "cell",
                                engine: &cell.engine,
                                fault: &cell.fault,
                                busy: cell.busy,
                                passed: cell.passed(),
                                made: cell.runs.len(),
                                command: &cell.command,
                            },
                            String::new,
                        )?;
                    }
                    cells.push(cell);
                }
                if let Some(out) = &args.out {
                    std::fs::write(out, table::markdown(&cells))
                        .with_context(|| format!("writing {}", out.display()))?;
                }
            }
        }
    }
    if !output.is_json() {
        println!();
        print!("{}", table::markdown(&cells));
    }
    if temp && !any_failed {
        let _ = std::fs::remove_dir_all(&base);
    }
    Ok(if any_failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Seconds to two decimals, or `-`.
fn secs(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.2}", d.as_secs_f64()))
}

/// How often the harness writes a probe line.
const PROBE_EVERY: Duration = Duration::from_millis(50);
/// How often the harness looks at the members.
const TICK: Duration = Duration::from_millis(10);
/// Lines each sender writes in the all-send cell.
const ALL_SEND_LINES: u64 = 1000;
/// Lines in the slow-reader and loss cells.
const STREAM_LINES: u64 = 2000;

/// How the members after the first enter the group: `--join`, except where nobody admits a
/// member because the engine keeps no membership and answers whoever sends (the txn's
/// endpoints: declared replies without virtual synchrony), which opens its own endpoint. (The
/// tree's receivers join silently; `rmcast member --engine tree --join` opens a receiver.)
fn joiner_mode(g: &Guarantees) -> &'static str {
    if g.replies && !g.virtual_synchrony {
        "--create"
    } else {
        "--join"
    }
}

/// One run of one cell.
struct Run<'a> {
    exe: &'a Path,
    engine: &'a str,
    fault: Fault,
    dir: &'a Path,
    pipe_lines: u64,
    g: Guarantees,
    group: String,
    origin: Instant,
    /// Deadlines are multiplied by this beside busy loops.
    slack: u32,
    members: Vec<Member>,
    /// When each probe was written, by its number.
    probes: Vec<Duration>,
    /// Probes that could not be queued (the member's input queue was full).
    probes_refused: u64,
    last_probe: Option<Instant>,
    env: Vec<(String, String)>,
    /// `--netns`: the namespaces the members run in, in turn.
    netns: &'a [Netns],
    /// The loss of a loss cell across namespaces, removed with the run.
    _nft_loss: Option<NftLoss<'a>>,
}

impl<'a> Run<'a> {
    fn new(
        exe: &'a Path,
        engine: &'a str,
        fault: Fault,
        busy: bool,
        dir: &'a Path,
        pipe_lines: u64,
        netns: &'a [Netns],
    ) -> Result<Run<'a>> {
        let qos = crate::member::default_qos(engine, 0)?;
        let g = rmcast_proto::catalog::EngineChoice::named(engine)
            .with_context(|| format!("engine {engine}"))?
            .guarantees()
            .at_qos(qos);
        let (env, nft_loss) = match fault {
            Fault::Loss(p) if !netns.is_empty() => (Vec::new(), Some(NftLoss::load(netns, p)?)),
            Fault::Loss(p) => (
                vec![(
                    rmcast::RECEIVE_LOSS_ENV.to_string(),
                    format!("{}", p as f64 / 100.0),
                )],
                None,
            ),
            _ => (Vec::new(), None),
        };
        Ok(Run {
            exe,
            engine,
            fault,
            dir,
            pipe_lines,
            g,
            group: crate::workers::fresh_group_name("gauntlet"),
            origin: Instant::now(),
            slack: if busy { 2 } else { 1 },
            members: Vec::new(),
            probes: Vec::new(),
            probes_refused: 0,
            last_probe: None,
            env,
            netns,
            _nft_loss: nft_loss,
        })
    }

    fn secs(&self, s: u64) -> Duration {
        Duration::from_secs(s * self.slack as u64)
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// The index in `members` of member `id`.
    fn at(&self, id: u32) -> usize {
        self.members
            .iter()
            .position(|m| m.id == id)
            .expect("a member of the run")
    }

    fn start_member(&mut self, id: u32, mode: Option<&str>) -> Result<()> {
        let mut a: Vec<String> = vec![
            "--group".into(),
            self.group.clone(),
            "--engine".into(),
            self.engine.into(),
            "--id".into(),
            id.to_string(),
            "--log".into(),
            self.dir
                .join(format!("member-{id}.jsonl"))
                .display()
                .to_string(),
        ];
        if let Some(m) = mode {
            a.push(m.into());
        }
        let ns = Netns::for_worker(self.netns, id as usize);
        if let Some(ns) = ns {
            // Its own host: its namespace's address, a TTL that leaves it.
            a.extend([format!("--interface={}", ns.addr), "--ttl=1".to_string()]);
        }
        let m = Member::start(
            self.exe,
            ns.map(|n| n.name.as_str()),
            id,
            &a,
            &self.env,
            &self.dir.join(format!("member-{id}.stderr")),
            self.origin,
        )?;
        self.members.push(m);
        Ok(())
    }

    /// Start the group: member 1 creates it and the others join once it is up, or (the start
    /// cells) every member in the same millisecond, by join-or-create where the engine declares
    /// rejoining (formation), else member 1 creating and the others joining.
    fn start(&mut self) -> Result<()> {
        let n = self.fault.members();
        let rejoin = self.g.capabilities.rejoin;
        let joiner = joiner_mode(&self.g);
        if let Fault::Start(_) = self.fault {
            for id in 1..=n {
                let mode = match (rejoin, id) {
                    (true, _) => None,
                    (false, 1) => Some("--create"),
                    (false, _) => Some(joiner),
                };
                self.start_member(id, mode)?;
            }
            return Ok(());
        }
        self.start_member(1, Some("--create"))?;
        let deadline = Instant::now() + self.secs(10);
        while self.members[0].with_seen(|s| s.views.is_empty()) {
            if Instant::now() > deadline || !self.members[0].running(self.origin) {
                bail!("member 1 did not create the group");
            }
            std::thread::sleep(TICK);
        }
        for id in 2..=n {
            self.start_member(id, Some(joiner))?;
        }
        Ok(())
    }

    /// Whether member `id`'s latest view names every member of the run; for an engine without
    /// membership views (its views name nobody: the tree's receivers, the txn's endpoints),
    /// whether it has one at all.
    fn in_full_view(&self, id: u32) -> bool {
        let ids: Vec<u32> = self.members.iter().map(|m| m.id).collect();
        self.members[self.at(id)]
            .with_seen(|s| s.view().is_some_and(|v| v.1 == ids || v.1.is_empty()))
    }

    /// Wait until every member is in one view of all ([`Run::in_full_view`]); the formation
    /// time: the last member's first such view.
    fn formed(&mut self) -> Option<Duration> {
        let ids: Vec<u32> = self.members.iter().map(|m| m.id).collect();
        let deadline = Instant::now() + self.secs(20);
        loop {
            if ids.iter().all(|&id| self.in_full_view(id)) {
                return self
                    .members
                    .iter()
                    .map(|m| {
                        m.with_seen(|s| {
                            s.views
                                .iter()
                                .find(|v| v.1 == ids || v.1.is_empty())
                                .map(|v| v.0)
                        })
                    })
                    .collect::<Option<Vec<_>>>()
                    .and_then(|v| v.into_iter().max());
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(TICK);
        }
    }

    /// Write the next probe to member `id` if one is due.
    fn probe(&mut self, id: Option<u32>) {
        let Some(id) = id else { return };
        if self.last_probe.is_some_and(|t| t.elapsed() < PROBE_EVERY) {
            return;
        }
        self.last_probe = Some(Instant::now());
        let k = self.probes.len() as u64;
        let i = self.at(id);
        if self.members[i].write(format!("{}\n", probe_text(k)).into_bytes()) {
            self.probes.push(self.now());
        } else {
            self.probes_refused += 1;
            // Keep the numbering: a probe not written was never sent.
            self.probes.push(Duration::MAX);
        }
    }

    /// When member `id` first delivered a probe written at or after `since`, after `since`.
    fn flowing(&self, id: u32, since: Duration) -> Option<Duration> {
        self.members[self.at(id)].with_seen(|s| {
            s.probes
                .iter()
                .filter(|(k, _)| {
                    self.probes
                        .get(*k as usize)
                        .is_some_and(|&w| w != Duration::MAX && w >= since)
                })
                .map(|(_, at)| at.saturating_sub(since))
                .min()
        })
    }

    /// When member `id` first saw, after `since`, a view without `victim` or a failure notice.
    fn detected(&self, id: u32, victim: u32, since: Duration) -> Option<Duration> {
        self.members[self.at(id)].with_seen(|s| {
            let view = s
                .views
                .iter()
                .filter(|v| v.0 >= since && !v.1.contains(&victim))
                .map(|v| v.0)
                .min();
            let failed = s.failures.iter().copied().filter(|&t| t >= since).min();
            [view, failed]
                .into_iter()
                .flatten()
                .min()
                .map(|t| t.saturating_sub(since))
        })
    }

    /// Probe through member `prober` and look every tick until `done` or `limit` passes;
    /// whether `done` held.
    fn pump(
        &mut self,
        prober: Option<u32>,
        limit: Duration,
        mut done: impl FnMut(&mut Self) -> bool,
    ) -> bool {
        let end = Instant::now() + limit;
        loop {
            self.probe(prober);
            if done(self) {
                return true;
            }
            if Instant::now() > end {
                return false;
            }
            std::thread::sleep(TICK);
        }
    }

    /// The member that orders, as member `id`'s latest view names it.
    fn orderer(&self, id: u32) -> u32 {
        self.members[self.at(id)]
            .with_seen(|s| s.view().map(|v| v.2))
            .unwrap_or(1)
    }

    /// Whether member `id` may send (the tree: only the creator).
    fn may_send(&self, id: u32) -> bool {
        self.g.senders == Senders::Any || id == 1
    }

    /// Data lines expected at every member, and whether member `id` has them all (or was told
    /// they are lost, where delivery is probabilistic).
    fn has_all(&self, id: u32, expected: u64) -> bool {
        let lossy = self.g.delivery != DeliveryPromise::AllOrNothing;
        self.members[self.at(id)]
            .with_seen(|s| s.data >= expected || (lossy && s.data + s.lost >= expected))
    }

    /// Whether the engine keeps no membership views (member 1's views name nobody: the tree's
    /// receivers print none at all, the txn's endpoints one of nobody).
    fn silent(&self) -> bool {
        self.members[0].with_seen(|s| s.view().is_some_and(|v| v.1.is_empty()))
    }

    /// Formation without membership views: probes from member 1 until every member delivered
    /// one; the last member's first probe.
    fn formed_silently(&mut self) -> Option<Duration> {
        let ids: Vec<u32> = self.members.iter().map(|m| m.id).collect();
        let t0 = Duration::ZERO;
        let ok = self.pump(Some(1), self.secs(20), |run| {
            ids.iter().all(|&id| run.flowing(id, t0).is_some())
        });
        if !ok {
            return None;
        }
        ids.iter()
            .map(|&id| self.members[self.at(id)].with_seen(|s| s.probes.iter().map(|p| p.1).min()))
            .collect::<Option<Vec<_>>>()
            .and_then(|v| v.into_iter().max())
    }

    /// The whole run: start, formation, fault, checks, end, log verification.
    fn go(&mut self) -> Result<RunResult> {
        let mut r = RunResult::default();
        self.start()?;
        // Member 1's first view says whether the engine has membership views at all.
        let deadline = Instant::now() + self.secs(10);
        while self.members[0].with_seen(|s| s.views.is_empty()) && Instant::now() < deadline {
            std::thread::sleep(TICK);
        }
        r.formation = if self.silent() {
            self.formed_silently()
        } else {
            self.formed()
        };
        let n = self.fault.members();
        if r.formation.is_none() {
            let views: Vec<String> = self
                .members
                .iter()
                .map(|m| {
                    format!(
                        "{}: {:?}",
                        m.id,
                        m.with_seen(|s| s.view().map(|v| v.1.clone()))
                    )
                })
                .collect();
            r.note = format!(
                "no view of all {n} members within {} s (latest views {})",
                self.secs(20).as_secs(),
                views.join("; ")
            );
            self.end();
            self.verify(&mut r);
            return Ok(r);
        }
        // Warm-up: a probe from member 1 (every engine's sender) delivered everywhere.
        let ids: Vec<u32> = self.members.iter().map(|m| m.id).collect();
        let t0 = self.now();
        let warm = self.pump(Some(1), self.secs(10), |run| {
            ids.iter().all(|&id| run.flowing(id, t0).is_some())
        });
        if !warm {
            r.note = "no probe delivered at every member after formation".into();
            self.end();
            self.verify(&mut r);
            return Ok(r);
        }
        let passed = self.fault(&mut r)?;
        self.end();
        r.passed = passed;
        self.verify(&mut r);
        Ok(r)
    }

    /// Apply the cell's fault and check what follows; whether it passed (`r.note` says why not).
    fn fault(&mut self, r: &mut RunResult) -> Result<bool> {
        let ids: Vec<u32> = self.members.iter().map(|m| m.id).collect();
        match self.fault {
            Fault::Start(_) => Ok(true),
            Fault::Pipe => {
                let lines: String = (1..=self.pipe_lines)
                    .map(|k| format!("line {k}\n"))
                    .collect();
                self.load(r, &[(1, lines.into_bytes())], self.pipe_lines, None)
            }
            Fault::AllSend => {
                let senders: Vec<u32> = ids
                    .iter()
                    .copied()
                    .filter(|&id| self.may_send(id))
                    .collect();
                let input: Vec<(u32, Vec<u8>)> = senders
                    .iter()
                    .map(|&id| {
                        let text: String = (1..=ALL_SEND_LINES)
                            .map(|k| format!("m{id}-{k}\n"))
                            .collect();
                        (id, text.into_bytes())
                    })
                    .collect();
                self.load(r, &input, ALL_SEND_LINES * senders.len() as u64, None)
            }
            Fault::SlowReader => {
                let lines: String = (1..=STREAM_LINES).map(|k| format!("line {k}\n")).collect();
                self.load(r, &[(1, lines.into_bytes())], STREAM_LINES, Some(3))
            }
            Fault::Loss(_) => {
                let lines: String = (1..=STREAM_LINES).map(|k| format!("line {k}\n")).collect();
                self.load(r, &[(1, lines.into_bytes())], STREAM_LINES, None)
            }
            Fault::KillOrderer | Fault::KillMember => self.crash(r),
            Fault::Stop(s) => self.pause(r, s),
            Fault::LeaveOrderer => self.leave_orderer(r),
            Fault::LeaveAll => {
                let t = self.now();
                for m in &mut self.members {
                    m.interrupt(self.origin)?;
                }
                let origin = self.origin;
                let all_gone = self.pump(None, self.secs(20), |run| {
                    run.members.iter_mut().all(|m| !m.running(origin))
                });
                if !all_gone {
                    r.note = "not every member exited within the deadline after SIGINT".into();
                    return Ok(false);
                }
                r.recovery = self
                    .members
                    .iter()
                    .filter_map(|m| m.exit.map(|e| e.1.saturating_sub(t)))
                    .max();
                let bad: Vec<String> = self
                    .members
                    .iter()
                    .filter(|m| m.exit.is_some_and(|e| !e.0.success()))
                    .map(|m| format!("{} ({})", m.id, m.exit.expect("exited").0))
                    .collect();
                if !bad.is_empty() {
                    r.note = format!("members exited with failure: {}", bad.join(", "));
                    return Ok(false);
                }
                Ok(true)
            }
        }
    }

    /// The load cells: write `input` (member, bytes) at once, wait until every member delivered
    /// `expected` data lines; `slow`: this member's stdout is read at 2 ms a line meanwhile.
    fn load(
        &mut self,
        r: &mut RunResult,
        input: &[(u32, Vec<u8>)],
        expected: u64,
        slow: Option<u32>,
    ) -> Result<bool> {
        if let Some(id) = slow {
            self.members[self.at(id)].set_slow(Duration::from_millis(2));
        }
        let t = self.now();
        for (id, bytes) in input {
            let i = self.at(*id);
            if !self.members[i].write(bytes.clone()) {
                bail!("member {id}'s input queue refused the lines");
            }
        }
        let ids: Vec<u32> = self.members.iter().map(|m| m.id).collect();
        let limit = self.secs(30);
        let done = self.pump(None, limit, |run| {
            ids.iter().all(|&id| run.has_all(id, expected))
        });
        if let Some(id) = slow {
            self.members[self.at(id)].set_slow(Duration::ZERO);
        }
        let counts: Vec<String> = self
            .members
            .iter()
            .map(|m| {
                m.with_seen(|s| {
                    format!(
                        "{}: {}{}",
                        m.id,
                        s.data,
                        if s.lost > 0 {
                            format!(" (+{} lost)", s.lost)
                        } else {
                            String::new()
                        }
                    )
                })
            })
            .collect();
        if !done {
            r.note = format!(
                "not every member delivered all {expected} lines within {} s ({})",
                limit.as_secs(),
                counts.join(", ")
            );
            return Ok(false);
        }
        r.recovery = self
            .members
            .iter()
            .filter_map(|m| m.with_seen(|s| s.last_data))
            .max()
            .map(|l| l.saturating_sub(t));
        let lost: u64 = self.members.iter().map(|m| m.with_seen(|s| s.lost)).sum();
        if lost > 0 {
            r.note = format!("losses reported, as declared ({})", counts.join(", "));
        }
        Ok(true)
    }

    /// kill -9 of the orderer or of an ordinary member; the survivors must detect it and
    /// deliver again, where the engine declares it can go on.
    fn crash(&mut self, r: &mut RunResult) -> Result<bool> {
        let ids: Vec<u32> = self.members.iter().map(|m| m.id).collect();
        let orderer = self.orderer(1);
        let victim = match self.fault {
            Fault::KillOrderer => orderer,
            _ => *ids
                .iter()
                .rev()
                .find(|&&id| id != orderer && id != 1)
                .expect("3 members"),
        };
        let survivors: Vec<u32> = ids.iter().copied().filter(|&id| id != victim).collect();
        let prober = survivors.iter().copied().find(|&id| self.may_send(id));
        // Can the survivors go on by what the engine declares? Not without its only sender,
        // nor (no crash recovery) where every message needs every member: the txn's
        // transactions go to the whole set.
        let must_recover = prober.is_some()
            && (self.g.crash_recovery
                || self.g.delivery != DeliveryPromise::AllOrNothing
                || self.g.senders == Senders::Creator);
        let t = self.now();
        let i = self.at(victim);
        self.members[i].kill(self.origin)?;
        // Without a sender left there is nothing to wait for but the survivors staying up.
        let limit = self.secs(match (must_recover, prober) {
            (true, _) => 25,
            (false, None) => 3,
            (false, Some(_)) => 12,
        });
        let silent = self.silent();
        let done = self.pump(prober, limit, |run| {
            prober.is_some()
                && survivors.iter().all(|&id| {
                    run.flowing(id, t).is_some()
                        && (silent || run.detected(id, victim, t).is_some())
                })
        });
        let flow: Vec<Option<Duration>> = survivors.iter().map(|&id| self.flowing(id, t)).collect();
        let det: Vec<Option<Duration>> = survivors
            .iter()
            .map(|&id| self.detected(id, victim, t))
            .collect();
        r.recovery = flow
            .iter()
            .copied()
            .collect::<Option<Vec<_>>>()
            .and_then(|v| v.into_iter().max());
        r.detection = det
            .iter()
            .copied()
            .collect::<Option<Vec<_>>>()
            .and_then(|v| v.into_iter().max());
        let origin = self.origin;
        let mut dead: Vec<u32> = Vec::new();
        for m in &mut self.members {
            if m.id != victim && !m.running(origin) {
                dead.push(m.id);
            }
        }
        let role = if victim == orderer {
            "orderer"
        } else {
            "member"
        };
        if !dead.is_empty() {
            r.note = format!("survivors {dead:?} exited after the kill of {role} {victim}");
            return Ok(false);
        }
        if must_recover {
            if r.recovery.is_none() {
                r.note = format!(
                    "after the kill of {role} {victim}, deliveries did not resume at every survivor within {} s (resumed: {:?}; detected: {:?})",
                    limit.as_secs(),
                    flow,
                    det
                );
                return Ok(false);
            }
            if !done {
                r.note =
                    format!("deliveries resumed but not every survivor saw the failure ({det:?})");
            }
            return Ok(true);
        }
        // Declared unable to go on: the survivors must say so (a view without the victim, a
        // failure notice, or the prober's sends reported as not sent), or the only sender is gone.
        let reported = self.reported(prober);
        if r.recovery.is_some() || r.detection.is_some() || reported {
            r.note = format!(
                "{role} {victim} killed: recovery not declared{}",
                if prober.is_none() {
                    " (its only sender is gone)"
                } else if reported {
                    "; the failed sends were reported"
                } else {
                    ""
                }
            );
            return Ok(true);
        }
        r.note = format!("after the kill of {role} {victim}, the survivors neither went on nor reported a failure");
        Ok(false)
    }

    /// SIGSTOP of the orderer for `secs` seconds, then SIGCONT: every member must deliver again
    /// and end in one view of all.
    fn pause(&mut self, r: &mut RunResult, secs: u64) -> Result<bool> {
        let ids: Vec<u32> = self.members.iter().map(|m| m.id).collect();
        let victim = self.orderer(1);
        let prober = ids
            .iter()
            .copied()
            .find(|&id| id != victim && self.may_send(id))
            .or(Some(1));
        let t = self.now();
        let i = self.at(victim);
        self.members[i].stop(self.origin)?;
        self.pump(prober, Duration::from_secs(secs), |_| false);
        self.members[i].resume()?;
        let limit = self.secs(30);
        let done = self.pump(prober, limit, |run| {
            ids.iter()
                .all(|&id| run.flowing(id, t).is_some() && run.in_full_view(id))
        });
        let flow: Vec<Option<Duration>> = ids.iter().map(|&id| self.flowing(id, t)).collect();
        r.recovery = flow
            .iter()
            .copied()
            .collect::<Option<Vec<_>>>()
            .and_then(|v| v.into_iter().max());
        r.detection = ids
            .iter()
            .filter(|&&id| id != victim)
            .filter_map(|&id| self.detected(id, victim, t))
            .max();
        if !done {
            let views: Vec<String> = self
                .members
                .iter()
                .map(|m| {
                    format!(
                        "{}: {:?}",
                        m.id,
                        m.with_seen(|s| s.view().map(|v| v.1.clone()))
                    )
                })
                .collect();
            r.note = format!(
                "{secs} s after SIGSTOP of orderer {victim} and {} s after SIGCONT, not every member delivered again in one view of all (resumed: {flow:?}; views {})",
                limit.as_secs(),
                views.join("; ")
            );
            return Ok(false);
        }
        Ok(true)
    }

    /// The orderer of a group of two leaves by SIGINT: it must exit cleanly, and the survivor
    /// see it go and deliver again (if it may send).
    fn leave_orderer(&mut self, r: &mut RunResult) -> Result<bool> {
        let victim = self.orderer(1);
        let survivor = if victim == 1 { 2 } else { 1 };
        let prober = self.may_send(survivor).then_some(survivor);
        let t = self.now();
        let i = self.at(victim);
        self.members[i].interrupt(self.origin)?;
        let origin = self.origin;
        let limit = self.secs(20);
        let silent = self.silent();
        let done = self.pump(prober, limit, |run| {
            let gone = !run.members[i].running(origin);
            gone && (silent || run.detected(survivor, victim, t).is_some())
                && (prober.is_none() || run.flowing(survivor, t).is_some())
        });
        r.detection = self.detected(survivor, victim, t);
        r.recovery = self.flowing(survivor, t);
        let exit = self.members[i].exit;
        match exit {
            None => {
                r.note = format!(
                    "orderer {victim} did not exit within {} s of SIGINT",
                    limit.as_secs()
                );
                return Ok(false);
            }
            Some((s, _)) if !s.success() => {
                r.note = format!("orderer {victim} exited with {s} after SIGINT");
                return Ok(false);
            }
            _ => {}
        }
        if !done {
            // An engine without crash recovery or membership (the txn: a transaction needs a
            // receiver besides the sender) may leave a member alone unable to send; it passes if
            // it says so for every line.
            if !self.g.crash_recovery && silent && self.reported(prober) {
                r.note = format!(
                    "survivor {survivor} alone: its sends fail, reported as not sent (declared)"
                );
                return Ok(true);
            }
            r.note = format!(
                "survivor {survivor}: view change {}, deliveries again {}",
                secs(r.detection),
                secs(r.recovery)
            );
            return Ok(false);
        }
        Ok(true)
    }

    /// Whether member `prober` reported sends that failed (`rmcast member` names each line not
    /// sent on stderr); true when there is no prober.
    fn reported(&self, prober: Option<u32>) -> bool {
        prober.is_none_or(|p| {
            std::fs::read_to_string(self.dir.join(format!("member-{p}.stderr")))
                .unwrap_or_default()
                .contains("not sent")
        })
    }

    /// End the run: every member still running is killed by its own handle (its log is
    /// flushed per event, so nothing it delivered is lost).
    fn end(&mut self) {
        for m in &mut self.members {
            let _ = m.kill(self.origin);
        }
    }

    /// Check the members' logs against the engine's declaration; a violation fails the run.
    fn verify(&self, r: &mut RunResult) {
        let mut logs = Vec::new();
        for m in &self.members {
            let p = self.dir.join(format!("member-{}.jsonl", m.id));
            match rmcast_sim::log::read_log(&p) {
                // A member killed before its first view wrote nothing: nothing to check.
                Ok(l) if l.is_empty() => {}
                Ok(l) => logs.push(l),
                Err(e) => {
                    r.passed = false;
                    r.note = format!("{}; member {}'s log: {e}", r.note, m.id);
                    return;
                }
            }
        }
        if let Err(violations) = rmcast_sim::log::verify_logs_for(&logs, &self.g) {
            r.passed = false;
            let first: Vec<String> = violations.iter().take(3).map(|v| v.to_string()).collect();
            r.note = format!(
                "{}{}log check: {} violation(s): {}",
                r.note,
                if r.note.is_empty() { "" } else { "; " },
                violations.len(),
                first.join("; ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_takes_any_group_size_in_range() {
        assert_eq!(parse_fault("start-32"), Ok(Fault::Start(32)));
        assert_eq!(parse_fault("start-2"), Ok(Fault::Start(2)));
        assert_eq!(Fault::Start(32).members(), 32);
        for bad in ["start-1", "start-65", "start-0"] {
            let e = parse_fault(bad).unwrap_err();
            assert!(e.contains("2 to 64"), "{bad}: {e}");
        }
        assert!(parse_fault("start-x")
            .unwrap_err()
            .contains("unknown fault"));
    }

    /// Every fault's name parses back to it, and an unknown one is refused with the list.
    #[test]
    fn fault_names_round_trip() {
        for f in Fault::all() {
            assert_eq!(parse_fault(&f.name()), Ok(f));
        }
        let e = parse_fault("meteor").unwrap_err();
        assert!(e.contains("kill-orderer") && e.contains("loss-20"), "{e}");
    }
}
