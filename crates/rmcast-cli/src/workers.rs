//! Starting a group of `rmcast worker` processes and collecting what they report: the part
//! `rmcast demo` and `rmcast bench` share.
//!
//! [`WorkerSpec::run`] starts worker 1 of this very executable with `--create`, waits until its
//! ready file shows it is in the group, starts the others with `--join`, then waits for every
//! child until a deadline. Whatever overruns is killed, by its own handle and no other process.
//! Meanwhile the caller may crash a worker on purpose ([`Running::kill`], SIGKILL), which is how
//! `rmcast demo --kill-sequencer` tests crash recovery, or pause one ([`Running::stop`], SIGSTOP,
//! and [`Running::resume`], SIGCONT), which is how `rmcast bench --perturb` makes members sleep.
//! A stopped worker is always continued before the run kills it or returns, whichever way it
//! ends. Finally each worker's stdout is read for its one JSON line of [`WorkerStats`].
//!
//! [`WorkerStats`] is defined here, the one place both sides of that line (the worker printing
//! it, the commands reading it) take it from.

use crate::member::{NetArgs, RecoveryArgs};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Longest a worker spends after `--timeout-ms`: the barrier, the leave and the last events.
pub const WORKER_WIND_DOWN: Duration = Duration::from_secs(BARRIER_MIN_S + LEAVE_S + DRAIN_S);
/// The barrier gets at least this long, even after a timeout.
pub const BARRIER_MIN_S: u64 = 2;
/// Bound of the leave: beyond the Sequencer's `leave_linger_ms` (5 s), since the last member
/// to leave, as sequencer, may stay that long for members whose farewells it has not heard.
pub const LEAVE_S: u64 = 7;
/// Bound of the wait for the last events after the leave.
pub const DRAIN_S: u64 = 1;

/// How long the group's creator may take to be up before the others are started.
pub const CREATOR_READY: Duration = Duration::from_secs(10);

/// The one line a worker prints on stdout, as JSON.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerStats {
    /// Node id.
    pub member: u32,
    /// Data messages sent.
    pub sent: u64,
    /// Data messages delivered.
    pub delivered: u64,
    /// Data messages expected.
    pub expected: u64,
    /// Whether all expected messages were delivered.
    pub complete: bool,
    /// Whether the done messages of all members arrived.
    pub barrier: bool,
    /// Whether the leave completed cleanly.
    pub left_cleanly: bool,
    /// Seconds from the first send to the last data delivery.
    pub elapsed_s: f64,
    /// Data messages delivered per second.
    pub msgs_per_s: f64,
    /// Payload megabytes (10^6) delivered per second.
    pub mb_per_s: f64,
    /// Median delivery latency in microseconds.
    pub latency_us_p50: f64,
    /// 99th percentile delivery latency in microseconds.
    pub latency_us_p99: f64,
    /// 99.9th percentile delivery latency in microseconds.
    #[serde(default)]
    pub latency_us_p999: f64,
    /// Datagrams the engine sent.
    pub datagrams_sent: u64,
    /// Bytes the engine sent.
    pub bytes_sent: u64,
    /// Messages the engine retransmitted.
    pub retransmissions: u64,
    /// The counters only this engine keeps, by name (non-zero ones).
    #[serde(default)]
    pub engine_counters: std::collections::BTreeMap<String, u64>,
    /// Retransmission requests the engine sent.
    pub nacks_sent: u64,
    /// Times the engine refused a request for lack of room.
    pub backpressure_refusals: u64,
    /// Times the application's event queue was full.
    pub event_queue_stalls: u64,
    /// Datagrams the node read from its sockets.
    pub node_datagrams_received: u64,
    /// Datagrams the node wrote (a unicast fan-out counts once per peer).
    pub node_datagrams_sent: u64,
    /// Sends deferred because the socket buffer was full.
    pub node_send_deferred: u64,
    /// Sends that failed.
    pub node_send_errors: u64,
    /// Datagrams the runtime refused before any engine: malformed, of another group, and in
    /// secure groups those that failed verification, carried an unknown key id or no
    /// authentication block, or were replays.
    #[serde(default)]
    pub node_refused: u64,
    /// Own messages whose send completed.
    #[serde(default)]
    pub completions: u64,
    /// Failures seen (recovery mode entered).
    #[serde(default)]
    pub failures: u64,
    /// Reset attempts that found too few members.
    #[serde(default)]
    pub reset_failures: u64,
    /// Resets completed (new incarnations).
    #[serde(default)]
    pub resets: u64,
    /// Sends refused in recovery mode (and sent again after the reset).
    #[serde(default)]
    pub recovery_refusals: u64,
    /// Whether a reset left this worker out of the group.
    #[serde(default)]
    pub expelled: bool,
    /// Data messages delivered in each window of [`WINDOW_MS`](crate::worker::WINDOW_MS)
    /// milliseconds, counted from the send time of the first data message this worker delivered
    /// (with one sender: from the sender's send start, the same origin at every member on one
    /// host); at most [`MAX_WINDOWS`](crate::worker::MAX_WINDOWS) windows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<u64>,
    /// CPU time of the worker process (every thread) from its send start until every member
    /// was done, in seconds: what the measurement cost it, the harness's own work included.
    #[serde(default)]
    pub cpu_s: f64,
    /// Datagrams its node sent over the same span (group formation left out).
    #[serde(default)]
    pub measured_datagrams_sent: u64,
}

impl WorkerStats {
    /// The last stats line in a worker's stdout, if any.
    pub fn from_output(out: &str) -> Option<WorkerStats> {
        out.lines()
            .rev()
            .find_map(|l| serde_json::from_str::<WorkerStats>(l).ok())
    }
}

/// A group name nobody has used: `<prefix>-<pid>-<clock>`. A fresh name means a fresh multicast
/// address and port, so that concurrent or successive runs never meet.
pub fn fresh_group_name(prefix: &str) -> String {
    let stamp = rmcast_sim::log::wall_clock_ns() % 1_000_000_000_000;
    format!("{prefix}-{}-{stamp}", std::process::id())
}

/// The `--timeout-ms` to give workers of a run bounded by `total`: well before the run kills
/// them, so that they still report. After its own timeout a worker may spend up to
/// [`WORKER_WIND_DOWN`] on the barrier, the leave and the last
/// events.
pub fn worker_timeout(total: Duration) -> Duration {
    total
        .saturating_sub(WORKER_WIND_DOWN + Duration::from_secs(2))
        .max(Duration::from_secs(5))
}

/// The `rmcast worker` arguments that `rmcast demo`, `rmcast demo --kill-sequencer` and
/// `rmcast bench` all give their workers, assembled in this one place. [`WorkerSpec::run`] adds
/// `--group`, `--id`, `--create`/`--join` and `--ready-file`; the caller adds what only its
/// run has (`--count`, `--rate`, `--expect`, ...) after [`MemberArgs::apply`].
#[derive(Clone, Debug)]
pub struct MemberArgs {
    /// `--engine`: a name from the engine registry.
    pub engine: String,
    /// `--qos`: every message's quality of service.
    pub qos: rmcast::Qos,
    /// `--resilience`.
    pub resilience: u8,
    /// `--method` (the sequencer's; `auto` is not passed, so other engines take it too).
    pub method: rmcast_proto::sequencer::Method,
    /// `--max-datagram-bytes` (none: the workers' default, the interface's).
    pub max_datagram_bytes: Option<usize>,
    /// `--size`: bytes per message.
    pub size: u64,
    /// `--members`: the group's size.
    pub members: usize,
    /// `--timeout-ms` (see [`worker_timeout`]).
    pub timeout: Duration,
    /// The failure detection and reset flags, if the run sets them.
    pub recovery: Option<RecoveryArgs>,
    /// `--log`: each worker logs to [`member_log_path`] in this directory.
    pub log_dir: Option<PathBuf>,
    /// `--interface` and `--ttl`.
    pub net: NetArgs,
    /// `--key-file` and friends: a secure group.
    pub keys: crate::keys::KeyArgs,
}

impl MemberArgs {
    /// Add the arguments to the command line of worker `index`.
    pub fn apply(&self, index: usize, cmd: &mut Command) {
        cmd.args(["--engine", &self.engine])
            .args(["--qos", &self.qos.to_string()])
            .args(["--resilience", &self.resilience.to_string()])
            .args(["--size", &self.size.to_string()])
            .args(["--members", &self.members.to_string()])
            .args(["--timeout-ms", &self.timeout.as_millis().to_string()]);
        if let Some(n) = self.max_datagram_bytes {
            cmd.args(["--max-datagram-bytes", &n.to_string()]);
        }
        if self.method != rmcast_proto::sequencer::Method::Auto {
            cmd.args(["--method", &self.method.to_string()]);
        }
        if let Some(r) = &self.recovery {
            cmd.args(r.to_args());
        }
        cmd.args(self.net.to_args());
        if let Some(dir) = &self.log_dir {
            cmd.arg("--log").arg(member_log_path(dir, index));
        }
        // The keys are the run's choice, not the environment's.
        cmd.env_remove(rmcast::KEY_FILE_ENV)
            .args(self.keys.to_args());
    }
}

/// The `--log` file of member `index` of a run whose logs go to `dir`.
pub fn member_log_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("member-{index}.jsonl"))
}

/// Where the workers' stderr goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WorkerStderr {
    /// Straight to ours.
    Inherit,
    /// To `worker-<index>.stderr` in the run's directory, kept for [`WorkerOutcome::stderr_tail`]
    /// (and so that it does not tear a progress bar).
    File,
}

/// A group of workers to run.
pub struct WorkerSpec<'a> {
    /// What messages call one worker: "member" or "worker".
    pub noun: &'a str,
    /// Group name (`--group`).
    pub group: &'a str,
    /// Workers to start, numbered 1..=members (`--id`); worker 1 creates the group.
    pub members: usize,
    /// Directory for the ready file (and the stderr files).
    pub dir: &'a Path,
    /// Where the workers' stderr goes.
    pub stderr: WorkerStderr,
    /// When whatever still runs is killed.
    pub deadline: Instant,
    /// How often the wait looks at the children (and calls its `tick`).
    pub poll: Duration,
    /// Network namespaces the workers run in, in turn (worker i in the ((i - 1) mod n)-th),
    /// by `ip netns exec`; empty: this one.
    pub netns: &'a [Netns],
}

/// A network namespace a worker runs in (`ip netns exec`), and the address the worker uses
/// there as its interface.
#[derive(Clone, Debug)]
pub struct Netns {
    /// Its name, as `ip netns list` shows it.
    pub name: String,
    /// Its first global IPv4 address.
    pub addr: std::net::Ipv4Addr,
}

impl Netns {
    /// The namespaces named, each with its first global IPv4 address (from `ip -n NAME -4 -o
    /// addr show scope global`). Fails, naming it, on a namespace that does not exist or has
    /// no such address.
    pub fn resolve(names: &[String]) -> Result<Vec<Netns>> {
        names
            .iter()
            .map(|name| {
                let out = Command::new("ip")
                    .args(["-n", name, "-4", "-o", "addr", "show", "scope", "global"])
                    .stderr(Stdio::piped())
                    .output()
                    .context("running `ip` (package iproute2)")?;
                if !out.status.success() {
                    bail!(
                        "--netns {name}: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
                let addr =
                    first_ipv4(&String::from_utf8_lossy(&out.stdout)).with_context(|| {
                        format!("--netns {name}: the namespace has no global IPv4 address")
                    })?;
                Ok(Netns {
                    name: name.clone(),
                    addr,
                })
            })
            .collect()
    }

    /// The namespace worker `index` (1-based) runs in, if any.
    pub fn for_worker(list: &[Netns], index: usize) -> Option<&Netns> {
        (!list.is_empty()).then(|| &list[(index - 1) % list.len()])
    }
}

/// The first address of `ip -o addr show` output (`2: eth0    inet 10.0.0.1/24 brd ...`).
fn first_ipv4(out: &str) -> Option<std::net::Ipv4Addr> {
    out.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        words.find(|w| *w == "inet")?;
        words.next()?.split('/').next()?.parse().ok()
    })
}

/// How one worker ended.
#[derive(Debug)]
pub struct WorkerOutcome {
    /// Its `--id`, 1..=members.
    pub index: usize,
    /// Its exit status; `None` only if waiting for it failed after a kill.
    pub status: Option<ExitStatus>,
    /// Whether it overran the deadline and was killed.
    pub killed: bool,
    /// Whether the caller crashed it on purpose ([`Running::kill`]).
    pub crashed: bool,
    /// Its stats line, if it printed one.
    pub stats: Option<WorkerStats>,
    stderr_path: Option<PathBuf>,
}

impl WorkerOutcome {
    /// The last `n` lines of its stderr (empty when stderr was inherited).
    pub fn stderr_tail(&self, n: usize) -> Vec<String> {
        let Some(p) = &self.stderr_path else {
            return Vec::new();
        };
        let err = std::fs::read_to_string(p).unwrap_or_default();
        let mut tail: Vec<String> = err.lines().rev().take(n).map(str::to_owned).collect();
        tail.reverse();
        tail
    }
}

/// The indices of the workers that overran the deadline and were killed.
pub fn killed(outcomes: &[WorkerOutcome]) -> Vec<usize> {
    outcomes
        .iter()
        .filter(|w| w.killed)
        .map(|w| w.index)
        .collect()
}

/// A started worker.
struct Worker {
    index: usize,
    child: Child,
    stderr_path: Option<PathBuf>,
    status: Option<ExitStatus>,
    killed: bool,
    crashed: bool,
    /// Stopped by [`Running::stop`] and not continued since.
    stopped: bool,
}

impl Worker {
    /// Continue the worker if it is stopped ([`Running::stop`]).
    fn resume(&mut self) -> Result<()> {
        if self.stopped {
            // Marked first: whatever happens, no second attempt on an id that may be gone.
            self.stopped = false;
            if self.status.is_none() {
                crate::signals::continue_child(self.child.id())
                    .with_context(|| format!("continuing worker {}", self.index))?;
            } else {
                crate::signals::forget_child(self.child.id());
            }
        }
        Ok(())
    }

    /// Kill the worker (continued first if stopped) and reap it.
    fn kill_and_reap(&mut self) -> Option<ExitStatus> {
        let _ = self.resume();
        let _ = self.child.kill();
        self.child.wait().ok()
    }
}

/// The workers while [`WorkerSpec::run`] waits for them, as its `tick` sees them.
pub struct Running<'a>(&'a mut [Worker]);

impl Running<'_> {
    /// Crash worker `index` (1-based): SIGKILL (`kill -9`, which is what [`Child::kill`] sends
    /// on Unix), by its own handle. It gets no chance to leave or to flush anything.
    pub fn kill(&mut self, index: usize) -> Result<()> {
        let w = self
            .0
            .iter_mut()
            .find(|w| w.index == index)
            .with_context(|| format!("no worker {index}"))?;
        if w.status.is_some() {
            bail!("worker {index} has already exited");
        }
        w.resume()?;
        w.child
            .kill()
            .with_context(|| format!("killing worker {index}"))?;
        w.crashed = true;
        Ok(())
    }

    /// Pause worker `index` (1-based): SIGSTOP, by the id of its own handle, until
    /// [`Running::resume`]. False if it has already exited (nothing to pause). Whatever is
    /// still stopped when the run ends is continued by the run itself.
    pub fn stop(&mut self, index: usize) -> Result<bool> {
        let w = self.worker(index)?;
        if w.status.is_some() {
            return Ok(false);
        }
        if !w.stopped {
            crate::signals::stop_child(w.child.id())
                .with_context(|| format!("stopping worker {index}"))?;
            w.stopped = true;
        }
        Ok(true)
    }

    /// Continue worker `index` after [`Running::stop`] (SIGCONT); nothing if it is not stopped.
    pub fn resume(&mut self, index: usize) -> Result<()> {
        self.worker(index)?.resume()
    }

    /// Continue every stopped worker.
    pub fn resume_all(&mut self) -> Result<()> {
        for w in self.0.iter_mut() {
            w.resume()?;
        }
        Ok(())
    }

    /// Whether worker `index` is stopped ([`Running::stop`]).
    pub fn is_stopped(&self, index: usize) -> bool {
        self.0.iter().any(|w| w.index == index && w.stopped)
    }

    fn worker(&mut self, index: usize) -> Result<&mut Worker> {
        self.0
            .iter_mut()
            .find(|w| w.index == index)
            .with_context(|| format!("no worker {index}"))
    }

    /// The process id of worker `index`, while it runs.
    pub fn pid(&self, index: usize) -> Option<u32> {
        self.0
            .iter()
            .find(|w| w.index == index && w.status.is_none())
            .map(|w| w.child.id())
    }
}

/// The started workers. Dropping it continues what is stopped, then kills (by handle) and reaps
/// whatever still runs, so that an error on the way never leaves a child behind, stopped or not.
struct WorkerSet(Vec<Worker>);

impl Drop for WorkerSet {
    fn drop(&mut self) {
        for w in self.0.iter_mut().filter(|w| w.status.is_none()) {
            w.kill_and_reap();
        }
    }
}

impl WorkerSpec<'_> {
    /// Start the workers, wait for them and collect their outcomes, in index order.
    ///
    /// `args(index, cmd)` adds each worker's own arguments to `rmcast worker --group G --id I
    /// --create|--join --ready-file F`. `tick(waited, running)` is called at every look while
    /// waiting (for progress, or to crash a worker); an error it returns ends the run, killing
    /// whatever still runs. Should starting fail, whatever did start is killed at once and the
    /// error returned.
    pub fn run(
        &self,
        args: impl Fn(usize, &mut Command),
        mut tick: impl FnMut(Duration, &mut Running<'_>) -> Result<()>,
    ) -> Result<Vec<WorkerOutcome>> {
        let mut set = WorkerSet(Vec::new());
        let started = self.start(&mut set, &args);
        let mut ticked = Ok(());
        let t0 = Instant::now();
        loop {
            let mut running = 0;
            for w in set.0.iter_mut().filter(|w| w.status.is_none()) {
                match w.child.try_wait()? {
                    Some(s) => {
                        w.status = Some(s);
                        // Killed from outside while stopped: nothing left to continue.
                        if std::mem::take(&mut w.stopped) {
                            crate::signals::forget_child(w.child.id());
                        }
                    }
                    None => running += 1,
                }
            }
            if running == 0 {
                break;
            }
            if started.is_err() || ticked.is_err() || Instant::now() >= self.deadline {
                for w in set.0.iter_mut().filter(|w| w.status.is_none()) {
                    w.status = w.kill_and_reap();
                    w.killed = true;
                }
                break;
            }
            ticked = tick(t0.elapsed(), &mut Running(&mut set.0));
            if ticked.is_ok() && crate::signals::received() {
                // SIGINT, SIGTERM or SIGHUP: stop the workers (by their handles) and report.
                ticked = Err(anyhow::anyhow!("interrupted"));
            }
            thread::sleep(self.poll);
        }
        started?;
        ticked?;

        let mut outcomes = Vec::new();
        for w in &mut set.0 {
            let mut out = String::new();
            if let Some(mut so) = w.child.stdout.take() {
                let _ = so.read_to_string(&mut out);
            }
            outcomes.push(WorkerOutcome {
                index: w.index,
                status: w.status,
                killed: w.killed,
                crashed: w.crashed,
                stats: WorkerStats::from_output(&out),
                stderr_path: w.stderr_path.clone(),
            });
        }
        Ok(outcomes)
    }

    /// Start worker 1, wait until it is in the group, then the others; once every one is in,
    /// create the start file they wait for before sending.
    fn start(&self, set: &mut WorkerSet, args: &impl Fn(usize, &mut Command)) -> Result<()> {
        let exe = std::env::current_exe().context("finding this executable")?;
        let start = self.dir.join(START_FILE);
        let _ = std::fs::remove_file(&start);
        for index in 1..=self.members {
            let ready = self.dir.join(format!("ready-{index}"));
            let _ = std::fs::remove_file(&ready);
            let mut cmd = match Netns::for_worker(self.netns, index) {
                Some(ns) => {
                    // `ip netns exec` execs the worker: the child's pid is the worker's.
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", &ns.name]).arg(&exe);
                    c
                }
                None => Command::new(&exe),
            };
            cmd.arg("worker")
                .args(["--group", self.group])
                .args(["--id", &index.to_string()])
                .arg(if index == 1 { "--create" } else { "--join" });
            args(index, &mut cmd);
            cmd.arg("--ready-file")
                .arg(&ready)
                .arg("--start-file")
                .arg(self.dir.join(START_FILE))
                .stdin(Stdio::null())
                .stdout(Stdio::piped());
            let stderr_path = match self.stderr {
                WorkerStderr::Inherit => {
                    cmd.stderr(Stdio::inherit());
                    None
                }
                WorkerStderr::File => {
                    let p = self.dir.join(format!("worker-{index}.stderr"));
                    let f = std::fs::File::create(&p)
                        .with_context(|| format!("creating {}", p.display()))?;
                    cmd.stderr(Stdio::from(f));
                    Some(p)
                }
            };
            let child = cmd.spawn().context("starting an rmcast worker")?;
            set.0.push(Worker {
                index,
                child,
                stderr_path,
                status: None,
                killed: false,
                crashed: false,
                stopped: false,
            });
            if index == 1 {
                // The others join a group that exists: wait until the creator is in it.
                let noun = self.noun;
                let ready_by = Instant::now() + CREATOR_READY;
                while !ready.exists() {
                    if let Some(status) = set.0[0].child.try_wait()? {
                        bail!("{noun} 1 exited before creating the group ({status})");
                    }
                    if Instant::now() >= ready_by {
                        bail!(
                            "{noun} 1 did not create the group within {} s",
                            CREATOR_READY.as_secs()
                        );
                    }
                    thread::sleep(Duration::from_millis(10));
                }
            }
        }
        let noun = self.noun;
        for w in set.0.iter_mut() {
            let ready = self.dir.join(format!("ready-{}", w.index));
            while !ready.exists() {
                if let Some(status) = w.child.try_wait()? {
                    bail!(
                        "{noun} {} exited before it was in the group ({status})",
                        w.index
                    );
                }
                if Instant::now() >= self.deadline {
                    bail!("{noun} {} was not in the group by the deadline", w.index);
                }
                thread::sleep(Duration::from_millis(10));
            }
        }
        std::fs::write(&start, b"").with_context(|| format!("creating {}", start.display()))?;
        Ok(())
    }
}

/// The file every worker waits for before sending (`rmcast worker --start-file`).
const START_FILE: &str = "start";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_address_of_ip_addr_output() {
        let out = "2: eth0    inet 10.79.0.2/24 brd 10.79.0.255 scope global eth0\n\
                   3: eth1    inet 10.80.0.2/24 scope global eth1\n";
        assert_eq!(first_ipv4(out), Some(std::net::Ipv4Addr::new(10, 79, 0, 2)));
        assert_eq!(first_ipv4(""), None);
        let list = [
            Netns {
                name: "a".into(),
                addr: std::net::Ipv4Addr::new(10, 0, 0, 1),
            },
            Netns {
                name: "b".into(),
                addr: std::net::Ipv4Addr::new(10, 0, 0, 2),
            },
        ];
        let names: Vec<&str> = (1..=3)
            .map(|i| Netns::for_worker(&list, i).unwrap().name.as_str())
            .collect();
        assert_eq!(
            names,
            ["a", "b", "a"],
            "workers take the namespaces in turn"
        );
        assert!(Netns::for_worker(&[], 1).is_none());
    }

    #[test]
    fn stats_line_roundtrip() {
        let s = WorkerStats {
            member: 3,
            sent: 10,
            delivered: 30,
            expected: 30,
            complete: true,
            latency_us_p50: 12.5,
            ..WorkerStats::default()
        };
        let out = format!(
            "noise\n{}\n{}\ntrailing noise\n",
            serde_json::to_string(&WorkerStats::default()).unwrap(),
            serde_json::to_string(&s).unwrap()
        );
        // The last stats line counts.
        assert_eq!(WorkerStats::from_output(&out), Some(s));
        assert_eq!(WorkerStats::from_output("nothing here\n"), None);
        assert_eq!(WorkerStats::from_output(""), None);
    }

    #[test]
    fn worker_timeout_leaves_room_for_the_wind_down() {
        let total = Duration::from_secs(40);
        let t = worker_timeout(total);
        assert!(t + WORKER_WIND_DOWN < total);
        assert_eq!(
            worker_timeout(Duration::from_secs(1)),
            Duration::from_secs(5)
        );
    }

    #[test]
    fn fresh_group_name_has_prefix_and_pid() {
        let a = fresh_group_name("rmcast-test");
        assert!(a.starts_with(&format!("rmcast-test-{}-", std::process::id())));
    }
}
