//! One CLI style, tried as typed: durations with their unit, shell completions, man pages, the
//! config file without flags, exit statuses in `--help`.

use std::process::{Command, Stdio};

const EXE: &str = env!("CARGO_BIN_EXE_rmcast");

fn run(args: &[&str]) -> std::process::Output {
    Command::new(EXE)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("rmcast runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn durations_take_their_unit_and_a_bad_one_is_explained() {
    // A join with nobody to admit it: refused after the timeout given as `1s`, exit 2.
    let group = format!("cli-style-{}", std::process::id());
    let out = run(&[
        "member",
        "--group",
        &group,
        "--join",
        "--join-timeout",
        "1s",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("answered the join request in time"));
    // The older spelling, a bare number in its unit, still works.
    let out = run(&[
        "member",
        "--group",
        &group,
        "--join",
        "--join-timeout-ms",
        "300",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("answered the join request in time"));
    for (flag, bad, says) in [
        ("--join-timeout", "3parsecs", "such as 3s"),
        ("--alive-interval", "2h", "outside 0s..=10m"),
        (
            "--join-timeout",
            "10us",
            "less than one of the milliseconds",
        ),
    ] {
        let out = run(&["member", "--group", "g", flag, bad]);
        assert_eq!(out.status.code(), Some(2), "{flag} {bad}");
        let err = text(&out.stderr);
        assert!(
            err.contains(flag) && err.contains(says),
            "{flag} {bad}: {err}"
        );
    }
}

#[test]
fn completions_and_man_pages_cover_every_command() {
    let help = text(&run(&["--help"]).stdout);
    assert!(help.contains("Exit status: 0 success"), "{help}");
    let commands = [
        "demo",
        "member",
        "bench",
        "sim",
        "stat",
        "config",
        "keygen",
        "send",
        "receive",
        "call",
        "txn",
        "txn-serve",
        "txn-bench",
        "gauntlet",
    ];
    for shell in ["bash", "zsh", "fish"] {
        let out = run(&["completions", shell]);
        assert!(out.status.success(), "{shell}");
        let script = text(&out.stdout);
        for c in commands {
            assert!(script.contains(c), "{shell} completion lacks {c}");
        }
    }
    let dir = std::env::temp_dir().join(format!("rmcast-man-{}", std::process::id()));
    let out = run(&["man", "--out", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for c in commands {
        let page = std::fs::read_to_string(dir.join(format!("rmcast-{c}.1")))
            .unwrap_or_else(|e| panic!("rmcast-{c}.1: {e}"));
        assert!(page.contains(".TH"), "rmcast-{c}.1 is a man page");
    }
    let top = std::fs::read_to_string(dir.join("rmcast.1")).expect("rmcast.1");
    assert!(top.contains("Exit status"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn config_prints_the_defaults_without_a_flag() {
    let out = run(&["config"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let file = text(&out.stdout);
    assert!(file.contains("join_timeout_ms = 3000"), "{file}");
    let out = run(&["config", "--command", "send"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("rmcast send --config FILE"));
}

#[test]
fn demo_writes_its_result_as_json() {
    let path = std::env::temp_dir().join(format!("rmcast-demo-{}.json", std::process::id()));
    let out = run(&["demo", "--messages", "50", "--json", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the file")).expect("JSON");
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["engine"], "sequencer");
    // 3 x 50 data messages, and each member's end-of-run barrier message, at every member.
    assert_eq!(v["verified"]["deliveries"], 3 * 153, "{v}");
    let workers = v["workers"].as_array().expect("workers");
    assert_eq!(workers.len(), 3);
    assert!(workers.iter().all(|w| w["delivered"] == 150), "{v}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn sim_writes_its_sweep_as_json() {
    let path = std::env::temp_dir().join(format!("rmcast-sim-{}.json", std::process::id()));
    let out = run(&["sim", "--seeds", "3", "--json", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the file")).expect("JSON");
    assert_eq!(v["passed"], true, "{v}");
    assert_eq!(v["seeds"], 3);
    let checkers = v["checkers"].as_array().expect("checkers");
    assert!(
        checkers
            .iter()
            .any(|c| c["checker"] == "total_order" && c["passed"] == 3),
        "{v}"
    );
    assert!(v["mean_figures"]["deliveries"].as_u64() > Some(0), "{v}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn sim_progress_shows_on_a_terminal_and_never_in_a_pipe() {
    // Piped: the outputs hold the report only, no progress line (indicatif hides its bar when
    // stderr is not a terminal).
    let out = run(&["sim", "--seeds", "3"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for (what, s) in [("stdout", text(&out.stdout)), ("stderr", text(&out.stderr))] {
        assert!(!s.contains('\r'), "a progress line in {what}: {s:?}");
        assert!(!s.contains("100%"), "a progress bar in {what}: {s:?}");
    }
    // On a terminal (`script`, util-linux, gives it one), the sweep's bar ends full.
    let out = Command::new("script")
        .args(["-qec", &format!("{EXE} sim --seeds 3"), "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("script runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("seeds [") && s.contains("100%"), "{s:?}");
}

#[test]
fn bench_sender_names_one_member_of_the_group() {
    for (args, says) in [
        (&["--members", "3", "--sender", "4"][..], "--members 3"),
        (&["--senders", "all", "--sender", "2"][..], "--senders 1"),
    ] {
        let out = run(&[&["bench", "--only", "rmcast"][..], args].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("--sender") && err.contains(says),
            "{args:?}: {err}"
        );
    }
    // Member 2 sends (not the sequencer, member 1); every member gets all it sent.
    let out = run(&[
        "bench",
        "--only",
        "rmcast",
        "--members",
        "3",
        "--sender",
        "2",
        "--sizes",
        "64",
        "--messages",
        "2000",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.contains("1 sender (member 2)"), "{table}");
    let row = table
        .lines()
        .find(|l| l.trim_start().starts_with("64 B"))
        .unwrap_or_else(|| panic!("a 64 B row: {table}"));
    // The row ends with the lost count and the ratio to raw ("-" with --only rmcast).
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[cols.len() - 2], "0", "nothing lost: {row}");
}
