//! One `rmcast member` process of a gauntlet run, seen from outside as a person would see it:
//! lines written to its stdin (by a writer thread, so that a member that stops reading never
//! blocks the run), and its stdout read by a reader thread that stamps each line with the time
//! it arrived and keeps what the checks need (views, failure notices, deliveries, losses).
//! The process is signalled only through its own handle or the id of a child not yet reaped,
//! and dropping a [`Member`] continues it if stopped, kills it and reaps it.

use anyhow::{Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Chunks of input waiting for the writer thread, at most (a probe is one chunk; a piped file
/// is one chunk too).
const INPUT_CHUNKS: usize = 256;
/// Probe deliveries kept per member, at most (a run sends far fewer).
const MAX_PROBES: usize = 100_000;
/// Views kept per member, at most.
const MAX_VIEWS: usize = 10_000;

/// The text of probe `k`: the harness's own lines, told apart from data by their prefix.
pub fn probe_text(k: u64) -> String {
    format!("probe-{k}")
}

/// What the reader thread saw on one member's stdout, each with the time since the run began.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// `* view` lines: when, the members, the member that orders (the id in parentheses).
    pub views: Vec<(Duration, Vec<u32>, u32)>,
    /// `* failed` lines (a failure detected, recovery under way).
    pub failures: Vec<Duration>,
    /// Deliveries of data lines (not probes).
    pub data: u64,
    /// When the last data line was delivered.
    pub last_data: Option<Duration>,
    /// Messages the engine reported lost (`* lost: N ...`).
    pub lost: u64,
    /// Probe deliveries: the probe's number and when it arrived.
    pub probes: Vec<(u64, Duration)>,
}

impl Seen {
    /// The latest view, if any.
    pub fn view(&self) -> Option<&(Duration, Vec<u32>, u32)> {
        self.views.last()
    }

    /// Take one stdout line that arrived at `at`.
    pub fn take(&mut self, line: &str, at: Duration) {
        if let Some(rest) = line.strip_prefix("* view ") {
            if let Some((members, orderer)) = parse_view(rest) {
                if self.views.len() < MAX_VIEWS {
                    self.views.push((at, members, orderer));
                }
            }
        } else if line.starts_with("* failed") {
            self.failures.push(at);
        } else if let Some(rest) = line.strip_prefix("* lost: ") {
            if let Some(n) = rest.split(' ').next().and_then(|n| n.parse::<u64>().ok()) {
                self.lost += n;
            }
        } else if !line.starts_with("* ") {
            if let Some((_, text)) = line.split_once(": ") {
                if let Some(k) = text
                    .strip_prefix("probe-")
                    .and_then(|k| k.parse::<u64>().ok())
                {
                    if self.probes.len() < MAX_PROBES {
                        self.probes.push((k, at));
                    }
                } else {
                    self.data += 1;
                    self.last_data = Some(at);
                }
            }
        }
        // Anything else (other notices) is not what the checks read.
    }
}

/// `N: members 1, 2, 3 (sequencer 1)...` (after `* view `): the members and the last number in
/// the parentheses.
fn parse_view(rest: &str) -> Option<(Vec<u32>, u32)> {
    let (_, after) = rest.split_once(": members ")?;
    let (list, paren) = after.split_once(" (")?;
    let members = if list == "nobody" {
        Vec::new()
    } else {
        list.split(", ")
            .map(|m| m.parse::<u32>().ok())
            .collect::<Option<Vec<_>>>()?
    };
    // Sorted: views list members in the engine's order (the ring's, say), the checks compare sets.
    let mut members = members;
    members.sort_unstable();
    let inside = paren.split(')').next()?;
    let orderer = inside.rsplit(' ').next()?.parse().ok()?;
    Some((members, orderer))
}

/// A started `rmcast member`.
pub struct Member {
    /// Its `--id`.
    pub id: u32,
    child: Child,
    input: Option<SyncSender<Vec<u8>>>,
    seen: Arc<Mutex<Seen>>,
    /// Microseconds the reader waits after each line (a slow reader), 0: none.
    slow_us: Arc<AtomicU64>,
    stopped: bool,
    /// Its exit status and when the run saw it, once it exited.
    pub exit: Option<(ExitStatus, Duration)>,
}

impl Member {
    /// Start `exe member` with `args` (the run's, `--id` and `--log` included), in network
    /// namespace `netns` if given, its stderr to `stderr`, extra environment `env`; times are
    /// measured from `origin`.
    pub fn start(
        exe: &Path,
        netns: Option<&str>,
        id: u32,
        args: &[String],
        env: &[(String, String)],
        stderr: &Path,
        origin: Instant,
    ) -> Result<Member> {
        let err = std::fs::File::create(stderr)
            .with_context(|| format!("creating {}", stderr.display()))?;
        let mut cmd = match netns {
            // `ip netns exec` execs the member: the child's pid is the member's.
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        cmd.arg("member")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err);
        // The environment is the run's: no loss and no key unless the cell sets them.
        cmd.env_remove(rmcast::RECEIVE_LOSS_ENV)
            .env_remove(rmcast::KEY_FILE_ENV);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting member {id}"))?;
        let mut stdin = child.stdin.take().context("member stdin")?;
        let stdout = child.stdout.take().context("member stdout")?;
        let (tx, rx) = sync_channel::<Vec<u8>>(INPUT_CHUNKS);
        std::thread::spawn(move || {
            for chunk in rx {
                if stdin.write_all(&chunk).and_then(|_| stdin.flush()).is_err() {
                    break;
                }
            }
            // Dropping stdin: end of input, the member leaves.
        });
        let seen = Arc::new(Mutex::new(Seen::default()));
        let slow_us = Arc::new(AtomicU64::new(0));
        {
            let seen = seen.clone();
            let slow_us = slow_us.clone();
            std::thread::spawn(move || {
                let mut lines = BufReader::new(stdout);
                let mut line = String::new();
                loop {
                    line.clear();
                    match lines.read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                    let at = origin.elapsed();
                    seen.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .take(line.trim_end_matches(['\n', '\r']), at);
                    let us = slow_us.load(Ordering::Relaxed);
                    if us > 0 {
                        std::thread::sleep(Duration::from_micros(us));
                    }
                }
            });
        }
        Ok(Member {
            id,
            child,
            input: Some(tx),
            seen,
            slow_us,
            stopped: false,
            exit: None,
        })
    }

    /// Look at what its stdout showed so far without copying it.
    pub fn with_seen<T>(&self, f: impl FnOnce(&Seen) -> T) -> T {
        f(&self.seen.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Queue `bytes` for its stdin; false if the queue is full or input is closed (the line is
    /// not sent, and the caller counts it).
    pub fn write(&self, bytes: Vec<u8>) -> bool {
        match &self.input {
            Some(tx) => match tx.try_send(bytes) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            },
            None => false,
        }
    }

    /// Read its stdout slowly: wait `per_line` after each line (zero: full speed again).
    pub fn set_slow(&self, per_line: Duration) {
        self.slow_us
            .store(per_line.as_micros() as u64, Ordering::Relaxed);
    }

    /// Whether it is still running (and reap it, noting when, if it exited).
    pub fn running(&mut self, origin: Instant) -> bool {
        if self.exit.is_some() {
            return false;
        }
        match self.child.try_wait() {
            Ok(Some(s)) => {
                self.exit = Some((s, origin.elapsed()));
                if self.stopped {
                    self.stopped = false;
                    crate::signals::forget_child(self.child.id());
                }
                false
            }
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// SIGKILL, by its own handle.
    pub fn kill(&mut self, origin: Instant) -> Result<()> {
        if !self.running(origin) {
            return Ok(());
        }
        self.resume()?;
        self.child
            .kill()
            .with_context(|| format!("killing member {}", self.id))?;
        if let Ok(s) = self.child.wait() {
            self.exit = Some((s, origin.elapsed()));
        }
        Ok(())
    }

    /// SIGSTOP, by the id of this unreaped child.
    pub fn stop(&mut self, origin: Instant) -> Result<()> {
        if self.running(origin) && !self.stopped {
            crate::signals::stop_child(self.child.id())
                .with_context(|| format!("stopping member {}", self.id))?;
            self.stopped = true;
        }
        Ok(())
    }

    /// SIGCONT after [`Member::stop`]; nothing if it is not stopped.
    pub fn resume(&mut self) -> Result<()> {
        if std::mem::take(&mut self.stopped) {
            crate::signals::continue_child(self.child.id())
                .with_context(|| format!("continuing member {}", self.id))?;
        }
        Ok(())
    }

    /// SIGINT (Ctrl-C: leave the group), by the id of this unreaped child.
    pub fn interrupt(&mut self, origin: Instant) -> Result<()> {
        if self.running(origin) {
            crate::signals::interrupt_child(self.child.id())
                .with_context(|| format!("interrupting member {}", self.id))?;
        }
        Ok(())
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.input = None;
        if self.exit.is_none() {
            let _ = self.resume();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The member's stdout lines are read as the harness needs them.
    #[test]
    fn stdout_lines_are_parsed() {
        let mut s = Seen::default();
        let t = Duration::from_millis(5);
        s.take("* view 3: members 1, 2, 3 (sequencer 1)", t);
        s.take(
            "* view 4: members 3, 2 (token site 2) - this member has left",
            t,
        );
        s.take("* failed: member 1 is silent; resetting", t);
        s.take("1: probe-7", t);
        s.take("2: line 1", t);
        s.take("* lost: 4 messages of member 2 from position 10", t);
        s.take("something else", t);
        s.take("* reset: incarnation 1, removed 2", t);
        assert_eq!(s.views.len(), 2);
        assert_eq!(s.views[0].1, vec![1, 2, 3]);
        assert_eq!(s.views[0].2, 1);
        assert_eq!(s.views[1].1, vec![2, 3]);
        assert_eq!(s.views[1].2, 2);
        assert_eq!(s.failures, vec![t]);
        assert_eq!(s.probes, vec![(7, t)]);
        assert_eq!(s.data, 1);
        assert_eq!(s.lost, 4);
    }
}
