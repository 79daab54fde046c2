//! The gauntlet's harness on real processes: one short cell (three sequencer members started
//! together, then a 200-line pipe) must pass, its table row must count the run, and a bad
//! `--fault` or `--engine` must be refused with the names it takes. The gauntlet ends its own
//! members; the test's own child is killed by its handle should it overrun.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_rmcast");

/// Run `rmcast` with `args` to its end, killed by its handle after `limit`; exit success and
/// stdout, stderr.
fn run(args: &[&str], limit: Duration) -> (bool, String, String) {
    // Tests run in parallel: each call its own directory.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("gauntlet-test-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("stdout");
    let err = dir.join("stderr");
    let mut child = Command::new(EXE)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("start rmcast");
    let end = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        status.is_some(),
        "rmcast {args:?} overran {limit:?}:\n{stdout}\n{stderr}"
    );
    (status.unwrap().success(), stdout, stderr)
}

#[test]
fn a_short_cell_passes_and_is_counted_in_the_table() {
    let (ok, out, err) = run(
        &[
            "gauntlet",
            "--engine",
            "sequencer",
            "--fault",
            "start-3,pipe",
            "--pipe-lines",
            "200",
            "--runs",
            "1",
        ],
        Duration::from_secs(60),
    );
    assert!(ok, "the gauntlet failed:\n{out}\n{err}");
    assert!(
        out.contains("| sequencer | start-3 | no | 1/1 |"),
        "no passed start-3 row:\n{out}"
    );
    assert!(
        out.contains("| sequencer | pipe | no | 1/1 |"),
        "no passed pipe row:\n{out}"
    );
    assert!(
        out.contains("`rmcast gauntlet --engine sequencer --fault pipe --runs 1`"),
        "no command to reproduce the cell:\n{out}"
    );
}

/// `--json`: every line of standard output is a JSON object, one per run and one per cell,
/// saying what the table says.
#[test]
fn json_gives_one_object_per_run_and_per_cell() {
    let (ok, out, err) = run(
        &[
            "gauntlet", "--engine", "gossip", "--fault", "start-3", "--runs", "2", "--json",
        ],
        Duration::from_secs(60),
    );
    assert!(ok, "the gauntlet failed:\n{out}\n{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let runs: Vec<&serde_json::Value> = lines.iter().filter(|v| v["kind"] == "run").collect();
    let cells: Vec<&serde_json::Value> = lines.iter().filter(|v| v["kind"] == "cell").collect();
    assert_eq!((runs.len(), cells.len()), (2, 1), "{out}");
    for r in &runs {
        assert_eq!(r["engine"], "gossip");
        assert_eq!(r["fault"], "start-3");
        assert_eq!(r["passed"], true);
        assert!(r["formation_s"].as_f64().is_some_and(|s| s > 0.0), "{r}");
    }
    assert_eq!(cells[0]["passed"], 2);
    assert_eq!(cells[0]["made"], 2);
    assert!(
        err.contains("rmcast gauntlet:"),
        "the header goes to stderr: {err}"
    );
}

#[test]
fn unknown_faults_and_engines_are_refused_with_the_names() {
    let (ok, _, err) = run(&["gauntlet", "--fault", "meteor"], Duration::from_secs(10));
    assert!(!ok);
    assert!(
        err.contains("unknown fault `meteor`") && err.contains("kill-orderer"),
        "{err}"
    );
    let (ok, _, err) = run(
        &["gauntlet", "--engine", "no-such-engine"],
        Duration::from_secs(10),
    );
    assert!(!ok);
    assert!(
        err.contains("unknown engine") && err.contains("sequencer"),
        "{err}"
    );
}
