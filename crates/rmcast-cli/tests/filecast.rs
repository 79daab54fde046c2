//! `rmcast send` and `rmcast receive` as real processes over loopback multicast (the `tree`
//! engine, RMTP): every receiver ends with the sender's exact bytes (sha256 checked by the
//! receiver, and the bytes compared here), including one started while the transfer runs and
//! one killed mid-transfer and started again. Every wait has a deadline and every child is
//! killed by its own handle if a test fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

mod support;

use support::proc::{scratch, text, Proc, EXE};

/// Pseudo-random bytes (xorshift), so that a lost or misplaced packet shows.
fn content(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn receiver(group: &str, out: &Path, extra: &[&str]) -> Proc {
    let out = out.to_str().unwrap();
    let mut args = vec![
        "receive", "--group", group, "--out", out, "--quiet", "--wait", "60",
    ];
    args.extend_from_slice(extra);
    Proc::start(&args)
}

#[test]
fn every_receiver_gets_the_file_a_late_one_and_a_restarted_one_too() {
    let dir = scratch("all");
    let group = format!("filecast-all-{}", std::process::id());
    let data = content(12_000_000, 7);
    let file = dir.join("payload.bin");
    std::fs::write(&file, &data).unwrap();
    let outs: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("out{i}"))).collect();
    // Receiver 0 is a designated receiver; receiver 1 is killed and started again.
    let r0 = receiver(&group, &outs[0], &["--dr"]);
    let r1 = receiver(&group, &outs[1], &[]);
    std::thread::sleep(Duration::from_millis(300));
    // A slow sender (about 3 MB/s), so that the transfer is still running when the late
    // receiver starts and the killed one comes back.
    let sender = Proc::start(&[
        "send",
        file.to_str().unwrap(),
        "--group",
        &group,
        "--quiet",
        "--send-window",
        "8",
        "--t-send-ms",
        "20",
        "--packet-size",
        "8192",
    ]);
    std::thread::sleep(Duration::from_millis(1000));
    r1.kill();
    let late = receiver(&group, &outs[2], &[]);
    std::thread::sleep(Duration::from_millis(500));
    // Started again in the same directory, over its partial file.
    let again = receiver(&group, &outs[1], &[]);
    let s = sender.wait(Duration::from_secs(120));
    assert!(s.status.success(), "sender: {}", text(&s));
    for (i, p) in [(0, r0), (2, late), (1, again)] {
        let o = p.wait(Duration::from_secs(60));
        assert!(o.status.success(), "receiver {i}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("sha256 ok"),
            "receiver {i}: {}",
            text(&o)
        );
        let got = std::fs::read(outs[i].join("payload.bin")).expect("the received file");
        assert!(got == data, "receiver {i}: the bytes differ");
    }
    let summary = String::from_utf8_lossy(&s.stdout).to_string();
    assert!(summary.contains("sent payload.bin"), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `send --json` and `receive --json`: one JSON object each, with what the text says.
#[test]
fn send_and_receive_json_print_one_object_each() {
    let dir = scratch("json");
    let group = format!("filecast-json-{}", std::process::id());
    let data = content(300_000, 11);
    let file = dir.join("json.bin");
    std::fs::write(&file, &data).unwrap();
    let out = dir.join("out");
    let r = receiver(&group, &out, &["--json"]);
    std::thread::sleep(Duration::from_millis(300));
    let s = Proc::start(&[
        "send",
        file.to_str().unwrap(),
        "--group",
        &group,
        "--quiet",
        "--json",
        "--dally-ms",
        "300",
    ])
    .wait(Duration::from_secs(60));
    assert!(s.status.success(), "sender: {}", text(&s));
    let r = r.wait(Duration::from_secs(60));
    assert!(r.status.success(), "receiver: {}", text(&r));
    assert_eq!(std::fs::read(out.join("json.bin")).unwrap(), data);
    let one = |o: &Output| -> serde_json::Value {
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 1, "{}", text(o));
        serde_json::from_str(lines[0]).unwrap()
    };
    let (sent, received) = (one(&s), one(&r));
    assert_eq!(sent["kind"], "sent");
    assert_eq!(sent["file"], "json.bin");
    assert_eq!(sent["bytes"], data.len());
    assert_eq!(sent["receivers_finished"], 1, "{sent}");
    assert!(sent["mb_per_s"].as_f64().unwrap() > 0.0, "{sent}");
    assert_eq!(received["kind"], "received");
    assert_eq!(received["bytes"], data.len());
    // Both name the same digest: the one the receiver verified.
    assert_eq!(received["sha256"], sent["sha256"]);
    assert_eq!(received["sha256"].as_str().unwrap().len(), 64);
    assert!(
        received["file"].as_str().unwrap().ends_with("json.bin"),
        "{received}"
    );
    assert_eq!(received["area_retransmissions"], serde_json::Value::Null);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_sender_without_receivers_ends_after_dallying() {
    let dir = scratch("alone");
    let group = format!("filecast-alone-{}", std::process::id());
    let file = dir.join("small.bin");
    std::fs::write(&file, content(100_000, 3)).unwrap();
    let s = Proc::start(&[
        "send",
        file.to_str().unwrap(),
        "--group",
        &group,
        "--quiet",
        "--dally-ms",
        "300",
    ])
    .wait(Duration::from_secs(60));
    assert!(s.status.success(), "{}", text(&s));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_receiver_without_a_sender_says_so() {
    let dir = scratch("nobody");
    let group = format!("filecast-nobody-{}", std::process::id());
    let out = dir.join("out");
    let o = Proc::start(&[
        "receive",
        "--group",
        &group,
        "--out",
        out.to_str().unwrap(),
        "--quiet",
        "--wait",
        "1",
    ])
    .wait(Duration::from_secs(30));
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no sender on group"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// RMTP's session file: `rmcast config --print-defaults --command send` writes the connection
/// parameters with their defaults; `send --config FILE` reads them (a bad value is refused by
/// the flag's own parser, naming it), and the sender runs with them.
#[test]
fn a_session_file_sets_the_connection_parameters() {
    let dir = scratch("session");
    let group = format!("filecast-session-{}", std::process::id());
    let file = dir.join("small.bin");
    std::fs::write(&file, content(50_000, 5)).unwrap();
    let out = Command::new(EXE)
        .args(["config", "--print-defaults", "--command", "send"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let defaults = String::from_utf8(out.stdout).unwrap();
    assert!(defaults.contains("send_window = 4096"), "{defaults}");
    let session = dir.join("session.toml");
    let write = |retx: &str| {
        std::fs::write(
            &session,
            format!("{defaults}\ngroup = {group:?}\n")
                .replace("dally_ms = \"2s\"\n", "dally_ms = \"300ms\"\n")
                .replace("quiet = false\n", "quiet = true\n")
                .replace("t_retx_ms = \"2ms\"\n", &format!("t_retx_ms = {retx}\n")),
        )
        .unwrap()
    };
    let send = || {
        Proc::start(&[
            "send",
            file.to_str().unwrap(),
            "--config",
            session.to_str().unwrap(),
        ])
        .wait(Duration::from_secs(60))
    };
    write("5");
    let s = send();
    assert!(s.status.success(), "{}", text(&s));
    write("\"soon\"");
    let s = send();
    assert!(!s.status.success());
    assert!(text(&s).contains("--t-retx"), "{}", text(&s));
    let _ = std::fs::remove_dir_all(&dir);
}
