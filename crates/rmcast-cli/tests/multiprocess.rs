//! Real multi-process runs over loopback multicast: `rmcast member` processes fed through stdin,
//! and `rmcast demo`. Every wait has a deadline and every child is killed (by its own handle) if
//! a test fails, so these tests end by themselves.

use rmcast::log::{read_log, verify_logs, LogRecord};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_rmcast");

/// A scratch directory for one test.
fn scratch(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let d = std::env::temp_dir().join(format!("rmcast-test-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A member process: its stdin, its stdout lines (read on a thread), and a kill on drop.
struct Member {
    id: u32,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Member {
    fn start(id: u32, group: &str, mode: &str, log: &PathBuf) -> Member {
        let mut child = Command::new(EXE)
            .args([
                "member",
                "--group",
                group,
                "--id",
                &id.to_string(),
                mode,
                "--log",
            ])
            .arg(log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start rmcast member");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Member {
            id,
            stdin: child.stdin.take(),
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    /// Read stdout until a line satisfies `want`, or panic at the deadline.
    fn wait_for(&mut self, what: &str, timeout: Duration, want: impl Fn(&[String]) -> bool) {
        let deadline = Instant::now() + timeout;
        while !want(&self.seen) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => panic!(
                    "member {} never showed {what}; its output so far: {:#?}",
                    self.id, self.seen
                ),
            }
        }
    }

    fn deliveries(seen: &[String]) -> usize {
        seen.iter().filter(|l| !l.starts_with("* ")).count()
    }

    /// Close stdin and wait for the process to exit by itself.
    fn finish(&mut self, timeout: Duration) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                // Keep the last lines for the checks.
                while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    self.seen.push(l);
                }
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "member {} did not exit after stdin closed",
                self.id
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        // Only when a test failed midway: this process's own child, by its handle.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Members in a `* view N: members a, b, c (sequencer s)` line (0 for other lines).
fn view_size(line: &str) -> usize {
    line.strip_prefix("* view ")
        .and_then(|rest| rest.split_once("members "))
        .and_then(|(_, rest)| rest.split_once(" ("))
        .map_or(0, |(list, _)| {
            list.split(", ")
                .filter(|m| m.parse::<u32>().is_ok())
                .count()
        })
}

#[test]
fn three_member_processes_deliver_the_same_order() {
    let dir = scratch("member");
    // Unique per run (the directory name is), so concurrent runs use different groups.
    let group = dir.file_name().unwrap().to_string_lossy().into_owned();
    let log = |i: u32| dir.join(format!("member-{i}.jsonl"));
    let t = Duration::from_secs(15);

    let mut members = vec![Member::start(1, &group, "--create", &log(1))];
    members[0].wait_for("its first view", t, |s| {
        s.iter().any(|l| l.starts_with("* view"))
    });
    for id in [2, 3] {
        members.push(Member::start(id, &group, "--join", &log(id)));
    }
    for m in &mut members {
        // Members 2 and 3 may join in either order.
        m.wait_for("a view of three members", t, |s| {
            s.iter().any(|l| view_size(l) == 3)
        });
    }
    // Everyone talks at once.
    let per_member = 5;
    for m in &mut members {
        let stdin = m.stdin.as_mut().unwrap();
        for k in 0..per_member {
            writeln!(stdin, "line {k} from member {}", m.id).unwrap();
        }
        stdin.flush().unwrap();
    }
    for m in &mut members {
        m.wait_for("every line", t, |s| Member::deliveries(s) == 3 * per_member);
    }
    // Everyone leaves at once; each exits 0 by itself.
    for m in &mut members {
        drop(m.stdin.take());
    }
    for m in &mut members {
        let status = m.finish(t);
        assert!(status.success(), "member {} exited with {status}", m.id);
    }

    // The same lines, in the same order, at every member: on stdout...
    let delivered = |m: &Member| -> Vec<String> {
        m.seen
            .iter()
            .filter(|l| !l.starts_with("* "))
            .cloned()
            .collect()
    };
    let first = delivered(&members[0]);
    assert_eq!(first.len(), 3 * per_member);
    assert!(
        first.contains(&"2: line 4 from member 2".to_string()),
        "{first:?}"
    );
    for m in &members[1..] {
        assert_eq!(delivered(m), first, "member {} disagrees", m.id);
    }
    // ... and in the logs, checked by the independent verifier.
    let logs: Vec<Vec<LogRecord>> = (1..=3).map(|i| read_log(log(i)).unwrap()).collect();
    let report = verify_logs(&logs).unwrap_or_else(|v| panic!("log violations: {v:#?}"));
    assert_eq!(report.per_member, vec![(1, 15), (2, 15), (3, 15)]);
    assert_eq!(report.messages, 15);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn member_rejects_bad_arguments() {
    for args in [
        vec!["member", "--group", "g", "--engine", "ring"],
        vec!["member", "--group", "g", "--create", "--join"],
        vec!["member", "--group", "g", "--addr", "127.0.0.1:4000"],
        vec![
            "member",
            "--group",
            "g",
            "--unicast-peers",
            "127.0.0.1:4000",
        ],
        vec!["member"],
    ] {
        let out = Command::new(EXE)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(!out.stderr.is_empty(), "{args:?} failed without a word");
    }
}

#[test]
fn demo_verifies_total_order() {
    let mut child = Command::new(EXE)
        .args([
            "demo",
            "--members",
            "3",
            "--messages",
            "300",
            "--timeout-secs",
            "30",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).ok();
        s
    });
    // The demo bounds itself at 30 s; a little more before calling it hung.
    let deadline = Instant::now() + Duration::from_secs(45);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rmcast demo did not finish in time");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = reader.join().unwrap();
    assert!(status.success(), "demo failed ({status}):\n{out}");
    assert!(
        out.contains("total order verified across 3 processes"),
        "{out}"
    );
}
