//! Lines longer than a datagram through real `rmcast member --engine ring` processes over
//! loopback multicast: three members started together with `--max-datagram-bytes 512`, long
//! lines piped into one of them, and every member prints each line whole, in the order written.
//! (`rmcast member` takes lines up to `--max-message-bytes`, 64 KiB by default; the ring carries
//! messages up to its own maximum, 1 MiB.) Every wait has a deadline and every child is killed
//! by its own handle if the test fails, so the test ends by itself.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

mod support;

const EXE: &str = env!("CARGO_BIN_EXE_rmcast");

/// A member process: its stdin, its stdout lines (read on a thread), and a kill on drop.
struct Member {
    id: u32,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Member {
    fn start(id: u32, group: &str) -> Member {
        let mut child = Command::new(EXE)
            .args(["member", "--group", group, "--id", &id.to_string()])
            .args(["--engine", "ring", "--max-datagram-bytes", "512"])
            .args(["--join-timeout-ms", "800"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start rmcast member");
        let rx = support::stdout_lines(&mut child);
        Member {
            id,
            stdin: child.stdin.take(),
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    /// Read stdout until `want` holds, or panic at the deadline.
    fn wait_for(&mut self, what: &str, timeout: Duration, want: impl Fn(&[String]) -> bool) {
        let deadline = Instant::now() + timeout;
        while !want(&self.seen) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => panic!(
                    "member {} never showed {what}; its output so far: {:#?}",
                    self.id,
                    self.seen.iter().map(|l| short(l)).collect::<Vec<_>>()
                ),
            }
        }
    }

    /// Lines delivered (not `* ` notices).
    fn delivered(&self) -> Vec<&String> {
        self.seen.iter().filter(|l| !l.starts_with("* ")).collect()
    }

    /// Close stdin and wait for the process to exit by itself.
    fn finish(&mut self, timeout: Duration) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
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
        // Only when the test failed midway: this process's own child, by its handle.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A line shortened for a failure message.
fn short(l: &str) -> String {
    if l.len() <= 80 {
        return l.to_string();
    }
    let cut = (0..=80).rev().find(|&i| l.is_char_boundary(i)).unwrap_or(0);
    format!("{}... ({} bytes)", &l[..cut], l.len())
}

/// Members in a `* view N: members a, b, c (...)` line (0 for other lines).
fn view_size(line: &str) -> usize {
    line.strip_prefix("* view ")
        .and_then(|rest| rest.split_once("members "))
        .and_then(|(_, rest)| rest.split_once(" ("))
        .map_or(0, |(list, _)| {
            list.split(',').filter(|s| !s.trim().is_empty()).count()
        })
}

#[test]
fn long_lines_reach_every_ring_member_whole() {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let group = format!("ring-large-{}-{nanos}", std::process::id());
    let ids = [3u32, 7, 5];
    let mut members: Vec<Member> = ids.iter().map(|&id| Member::start(id, &group)).collect();
    let t = Duration::from_secs(20);
    for m in &mut members {
        m.wait_for("a view of three members", t, |s| {
            s.iter().any(|l| view_size(l) == 3)
        });
    }
    // 512-byte datagrams carry 474 bytes of a fragment: these take 1 to 127 fragments; the
    // short one goes as one datagram between them.
    let sent: Vec<String> = [3_000usize, 60_000, 10, 20_000, 474, 475]
        .iter()
        .enumerate()
        .map(|(k, &len)| {
            let unit = format!("line {k} ");
            unit.chars().cycle().take(len).collect()
        })
        .collect();
    let from = members[0].id;
    let stdin = members[0].stdin.as_mut().unwrap();
    for l in &sent {
        writeln!(stdin, "{l}").unwrap();
    }
    stdin.flush().unwrap();
    let expected: Vec<String> = sent.iter().map(|l| format!("{from}: {l}")).collect();
    for m in &mut members {
        let n = expected.len();
        m.wait_for("every long line", Duration::from_secs(60), |s| {
            s.iter().filter(|l| !l.starts_with("* ")).count() >= n
        });
    }
    for m in &mut members {
        let status = m.finish(t);
        assert!(status.success(), "member {} exited with {status}", m.id);
    }
    for m in &members {
        let got = m.delivered();
        assert_eq!(got.len(), expected.len(), "member {}", m.id);
        for (g, e) in got.iter().zip(&expected) {
            assert!(
                *g == e,
                "member {}: printed {} for {}",
                m.id,
                short(g),
                short(e)
            );
        }
    }
}
