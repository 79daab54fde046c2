//! `rmcast stat --json`: what the table shows, as one JSON object per refresh.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;

const EXE: &str = env!("CARGO_BIN_EXE_rmcast");

/// A child of this test, killed (by its handle) if the test fails before it ends.
struct Own(Child);

impl Drop for Own {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn stat_once(group: &str) -> serde_json::Value {
    let out = Command::new(EXE)
        .args(["stat", "--json", "--once", "--group", group])
        .stdin(Stdio::null())
        .output()
        .expect("rmcast stat runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    assert_eq!(text.lines().count(), 1, "one line: {text}");
    serde_json::from_str(&text).expect("a JSON object")
}

#[test]
fn stat_json_shows_a_member_as_the_table_does() {
    let group = format!("stat-json-{}", std::process::id());
    let t = Duration::from_secs(15);
    let mut member = Own(Command::new(EXE)
        .args(["member", "--group", &group, "--create", "--id", "7"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("rmcast member starts"));
    let out = support::stdout_lines(&mut member.0);
    let deadline = Instant::now() + t;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = out.recv_timeout(left).expect("the member's first view");
        if line.starts_with("* view") {
            break;
        }
    }
    // The member publishes within a second of its view.
    let mut v = stat_once(&group);
    while v["members"].as_array().is_none_or(|m| m.is_empty()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        v = stat_once(&group);
    }
    assert_eq!(v["group"], group.as_str(), "{v}");
    let members = v["members"].as_array().expect("members");
    assert_eq!(members.len(), 1, "{v}");
    let m = &members[0];
    assert_eq!(m["member"], 7, "{v}");
    assert_eq!(m["pid"], member.0.id(), "{v}");
    assert_eq!(m["state"], "ok", "{v}");
    assert_eq!(m["members"], serde_json::json!([7]), "{v}");
    assert_eq!(m["coordinator"], 7, "{v}");
    assert_eq!(m["recovering"], false, "{v}");
    assert!(m["view"].as_u64() > Some(0), "{v}");
    // Every column of the table is there, among all the counters.
    for c in [
        "delivered",
        "submitted",
        "datagrams_sent",
        "retransmissions",
        "resets",
    ] {
        assert!(m["counters"][c].is_u64(), "{c} in {v}");
    }

    // Refreshing: one object per line, until stopped.
    let mut stat = Own(Command::new(EXE)
        .args(["stat", "--json", "--group", &group])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("rmcast stat starts"));
    let refreshes = support::stdout_lines(&mut stat.0);
    for _ in 0..2 {
        let line = refreshes.recv_timeout(t).expect("a refresh");
        let r: serde_json::Value = serde_json::from_str(&line).expect("a JSON object per line");
        assert_eq!(r["members"][0]["member"], 7, "{r}");
    }
    // Our own child, by its handle.
    stat.0.kill().expect("stop rmcast stat");
    stat.0.wait().expect("rmcast stat ends");

    // A member that leaves (stdin closed) removes its file.
    drop(member.0.stdin.take());
    let status = loop {
        if let Some(s) = member.0.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline + t, "the member did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    assert_eq!(stat_once(&group)["members"], serde_json::json!([]));
}
