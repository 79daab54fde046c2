//! The replicated key-value example (`examples/kv.rs`) run as its user would: three ring
//! member processes, a client outside the group calling them by multi-RPC through handler
//! lock 0, and the lock's holder killed with SIGKILL midway. The example checks every
//! acknowledged write; this test checks that it ran to the end and says so, that the lock
//! passed to a survivor and that answers came from the killed member and from its successor.
//! Then a fourth server starts after the writes: it gets the map by state transfer from a
//! survivor and checks every key itself; this test checks that it said so.

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn kv_example_survives_kill_9_loses_no_acknowledged_write_and_a_late_server_gets_every_key() {
    // `cargo test` builds the examples next to the test binaries' directory.
    let exe = std::env::current_exe().unwrap();
    let kv = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("examples").join("kv"))
        .unwrap();
    assert!(
        kv.exists(),
        "{} missing: build it with `cargo build --example kv` (cargo test builds it)",
        kv.display()
    );
    let started = Instant::now();
    let out = Command::new(&kv).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "kv failed: {}\n{text}\n{err}",
        out.status
    );
    assert!(started.elapsed() < Duration::from_secs(90));
    assert!(
        text.contains("kv: the ring reformed, the lock passed on, no acknowledged write lost"),
        "{text}"
    );
    let killed: u32 = text
        .lines()
        .find_map(|l| l.split("(member ").nth(1))
        .and_then(|l| l.split(',').next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no kill reported:\n{text}"));
    let summary = text
        .lines()
        .find(|l| l.contains("acknowledged writes read back"))
        .unwrap();
    let by = summary.split("answered by ").nth(1).unwrap();
    let answerers: Vec<u32> = by
        .trim_matches(|c| c == '[' || c == ']')
        .split(", ")
        .map(|x| x.parse().unwrap())
        .collect();
    assert!(answerers.contains(&killed), "{summary}");
    assert!(
        answerers.len() >= 2,
        "the lock passed on and a survivor answered: {summary}"
    );
    assert!(text.contains("handler lock passed to server"), "{text}");

    // The late server: its state came from a survivor (not the killed member), and held every
    // key the client wrote.
    let got = text
        .lines()
        .find(|l| l.starts_with("server 3: ") && l.contains(" got the state from "))
        .unwrap_or_else(|| panic!("no state transfer to the fourth server:\n{text}"));
    let from: u32 = got
        .split(" got the state from ")
        .nth(1)
        .and_then(|l| l.split(':').next())
        .and_then(|id| id.parse().ok())
        .unwrap();
    assert_ne!(from, killed, "{got}");
    assert!(got.contains(": 1000 keys in "), "{got}");
    assert!(
        text.lines().any(|l| l.starts_with("server 3: ")
            && l.ends_with("reads all 1000 keys after the state transfer")),
        "{text}"
    );
    assert!(
        text.contains(
            "kv: a fourth server started after the writes read all 1000 keys from the state transfer"
        ),
        "{text}"
    );
}
