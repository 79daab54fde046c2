//! `rmcast call --json` against a ring member holding handler lock 0: each answer and the
//! round-trip summary as one JSON object per line.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_rmcast");

#[test]
fn call_json_prints_each_answer_and_the_summary() {
    let group = format!("json-call-{}", std::process::id());
    let mut member = Command::new(EXE)
        .args(["member", "--group", &group, "--engine", "ring", "--create"])
        .args(["--id", "5", "--handler", "0"])
        // Kept open: the member leaves when its stdin ends.
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start rmcast member");
    let lines = support::stdout_lines(&mut member);
    let deadline = Instant::now() + Duration::from_secs(20);
    // Holding the lock is the last step of its start.
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(l) if l.contains("lock 0") && l.contains("held by 5") => break,
            Ok(_) => {}
            Err(_) => {
                let _ = member.kill();
                panic!("the member never held handler lock 0");
            }
        }
    }
    let out = Command::new("timeout")
        .args([
            "30", EXE, "call", "--group", &group, "--repeat", "3", "--json", "ping",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run rmcast call");
    let _ = member.kill();
    let _ = member.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let v: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    assert_eq!(v.len(), 4, "{stdout}");
    for r in &v[..3] {
        assert_eq!(r["kind"], "reply", "{r}");
        assert_eq!(r["group"], group.as_str());
        assert_eq!(r["from"], 5);
        assert_eq!(r["reply"], "member 5 got \"ping\"");
        assert!(r["rtt_us"].as_u64().unwrap() > 0, "{r}");
    }
    assert_eq!(v[3]["kind"], "summary");
    assert_eq!(v[3]["calls"], 3);
    assert!(
        v[3]["p50_us"].as_u64() <= v[3]["max_us"].as_u64(),
        "{stdout}"
    );
}
