//! `rmcast member --json`: two member processes, lines piped into each, and every line either
//! prints on standard output parsed as JSON: the start, the views, each delivery with its
//! sender and place in the total order (the same order at both), a warning for a line too long
//! to send, and the leave.

mod support;

use serde_json::Value;
use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};
use support::proc::EXE;

/// Lines each member sends.
const LINES: usize = 25;

struct Member {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Every line read so far, parsed.
    seen: Vec<Value>,
}

impl Member {
    fn start(group: &str, id: u32, mode: &str) -> Member {
        Member::start_with(group, id, mode, &[])
    }

    /// [`Member::start`] with more flags.
    fn start_with(group: &str, id: u32, mode: &str, more: &[String]) -> Member {
        let mut child = Command::new("timeout")
            .args(["60", EXE, "member", "--json", "--group", group, mode])
            .args(["--id", &id.to_string(), "--max-message-bytes", "100"])
            .args(more)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start rmcast member");
        let stdin = child.stdin.take();
        let lines = support::stdout_lines(&mut child);
        Member {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    /// Read lines until `done` holds for what was seen, or panic at the deadline.
    fn read_until(&mut self, what: &str, done: impl Fn(&[Value]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done(&self.seen) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let v: Value = serde_json::from_str(&l)
                        .unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}"));
                    assert!(v["kind"].is_string(), "no kind: {l}");
                    self.seen.push(v);
                }
                Err(_) => {
                    let _ = self.child.kill();
                    panic!("waiting for {what}; seen {:#?}", self.seen);
                }
            }
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to member");
    }

    fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.seen.iter().filter(|v| v["kind"] == kind).collect()
    }
}

fn deliveries(seen: &[Value]) -> usize {
    seen.iter().filter(|v| v["kind"] == "deliver").count()
}

fn view_of(n: usize) -> impl Fn(&[Value]) -> bool {
    move |seen: &[Value]| {
        seen.iter()
            .rev()
            .find(|v| v["kind"] == "view")
            .is_some_and(|v| v["members"].as_array().is_some_and(|m| m.len() == n))
    }
}

#[test]
fn member_json_prints_every_event_as_one_object_per_line() {
    let group = format!("member-json-{}", std::process::id());
    let mut a = Member::start(&group, 11, "--create");
    a.read_until("a's start", |s| s.iter().any(|v| v["kind"] == "started"));
    let mut b = Member::start(&group, 12, "--join");
    a.read_until("a's view of 2", view_of(2));
    b.read_until("b's view of 2", view_of(2));

    let started = a.of_kind("started")[0].clone();
    assert_eq!(started["member"], 11);
    assert_eq!(started["group"], group.as_str());
    assert_eq!(started["engine"], "sequencer");
    assert_eq!(started["created"], true);
    assert!(
        started["multicast"].as_str().unwrap().starts_with("239."),
        "{started}"
    );
    assert_eq!(b.of_kind("started")[0]["created"], false);
    let view = b.of_kind("view").last().copied().unwrap().clone();
    assert_eq!(view["members"], serde_json::json!([11, 12]));
    assert_eq!(view["joined"], 12);
    assert_eq!(view["this_member_left"], false);

    // Lines piped into both, interleaved; one of b's is too long to send.
    for k in 0..LINES {
        a.send(&format!("a-{k}"));
        b.send(&format!("b-{k} \"quoted\" \\ tab\t"));
    }
    b.send(&"x".repeat(150));
    let total = 2 * LINES;
    a.read_until("a's deliveries", |s| deliveries(s) >= total);
    b.read_until("b's deliveries and warning", |s| {
        deliveries(s) >= total && s.iter().any(|v| v["kind"] == "warning")
    });

    // Both delivered the same messages in the same order, each with its place in it.
    let order = |m: &Member| -> Vec<(u64, u64, u64, String)> {
        m.of_kind("deliver")
            .iter()
            .map(|d| {
                (
                    d["seq"].as_u64().unwrap(),
                    d["sender"].as_u64().unwrap(),
                    d["msg"].as_u64().unwrap(),
                    d["text"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let (oa, ob) = (order(&a), order(&b));
    assert_eq!(oa.len(), total);
    assert_eq!(oa, ob);
    assert!(oa.windows(2).all(|w| w[0].0 < w[1].0), "seq increases");
    for sender in [11, 12] {
        let texts: Vec<&str> = oa
            .iter()
            .filter(|d| d.1 == sender)
            .map(|d| d.3.as_str())
            .collect();
        // Each sender's lines in the order piped, the text as sent (quotes, backslash and
        // tab through JSON's escapes).
        let want: Vec<String> = (0..LINES)
            .map(|k| match sender {
                11 => format!("a-{k}"),
                _ => format!("b-{k} \"quoted\" \\ tab\t"),
            })
            .collect();
        assert_eq!(texts, want, "{sender}");
    }
    let warning = b.of_kind("warning")[0].clone();
    assert_eq!(warning["line"], (LINES + 1) as u64);
    assert!(
        warning["message"]
            .as_str()
            .unwrap()
            .contains("longer than --max-message-bytes"),
        "{warning}"
    );

    // End of input: each leaves and says so last; a sees b leave first.
    drop(b.stdin.take());
    b.read_until("b's leave", |s| s.iter().any(|v| v["kind"] == "left"));
    a.read_until("a's view of 1", view_of(1));
    assert_eq!(a.of_kind("view").last().unwrap()["left"], 12);
    drop(a.stdin.take());
    a.read_until("a's leave", |s| s.iter().any(|v| v["kind"] == "left"));
    for (m, id) in [(&mut a, 11), (&mut b, 12)] {
        assert_eq!(m.seen.last().unwrap()["kind"], "left");
        assert_eq!(m.seen.last().unwrap()["member"], id);
        let status = m.child.wait().expect("member exits");
        let mut err = String::new();
        std::io::Read::read_to_string(m.child.stderr.as_mut().unwrap(), &mut err).unwrap();
        if id == 12 {
            // The line refused makes the exit status say so.
            assert!(!status.success(), "{err}");
            assert!(err.contains("1 line(s) were not sent"), "{err}");
        } else {
            assert!(status.success(), "{err}");
        }
        // Nothing but JSON was written to standard output after the leave either.
        if let Ok(l) = m.lines.recv_timeout(Duration::from_secs(1)) {
            panic!("a line after the leave: {l}");
        }
    }
}

/// Two members over IPv6 unicast on `::1` (any host with an IPv6 loopback: no multicast
/// route needed), given as the CLI takes them: `--interface ::1 --port P --unicast-peers
/// [::1]:P,[::1]:Q`. Both deliver the lines of both in one order, and say their peers.
#[test]
fn members_talk_over_ipv6_unicast_on_loopback() {
    // Two free ports (bound and released: another process could take one in between, which
    // would fail the start, not pass the test wrongly).
    let ports: Vec<u16> = match (0..2)
        .map(|_| std::net::UdpSocket::bind("[::1]:0").map(|s| s.local_addr().unwrap().port()))
        .collect()
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!("skipped: no IPv6 loopback here: {e}");
            return;
        }
    };
    let peers = format!("[::1]:{},[::1]:{}", ports[0], ports[1]);
    let group = format!("member-json-v6-{}", std::process::id());
    let flags = |port: u16| -> Vec<String> {
        vec![
            "--interface".into(),
            "::1".into(),
            "--port".into(),
            port.to_string(),
            "--unicast-peers".into(),
            peers.clone(),
        ]
    };
    let mut a = Member::start_with(&group, 21, "--create", &flags(ports[0]));
    a.read_until("a's start", |s| s.iter().any(|v| v["kind"] == "started"));
    let mut b = Member::start_with(&group, 22, "--join", &flags(ports[1]));
    a.read_until("a's view of 2", view_of(2));
    b.read_until("b's view of 2", view_of(2));
    let started = b.of_kind("started")[0].clone();
    assert_eq!(started["multicast"], Value::Null);
    assert_eq!(
        started["unicast_peers"],
        serde_json::json!([format!("[::1]:{}", ports[0]), format!("[::1]:{}", ports[1])])
    );
    for k in 0..10 {
        a.send(&format!("a{k}"));
        b.send(&format!("b{k}"));
    }
    a.read_until("a's deliveries", |s| deliveries(s) >= 20);
    b.read_until("b's deliveries", |s| deliveries(s) >= 20);
    let order = |m: &Member| -> Vec<(u64, String)> {
        m.of_kind("deliver")
            .iter()
            .map(|d| {
                (
                    d["seq"].as_u64().unwrap(),
                    d["text"].as_str().unwrap().into(),
                )
            })
            .collect()
    };
    assert_eq!(order(&a), order(&b));
    drop(b.stdin.take());
    b.read_until("b's leave", |s| s.iter().any(|v| v["kind"] == "left"));
    drop(a.stdin.take());
    a.read_until("a's leave", |s| s.iter().any(|v| v["kind"] == "left"));
    for m in [&mut a, &mut b] {
        assert!(m.child.wait().unwrap().success());
    }
}
