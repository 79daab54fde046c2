//! Multicast transactions between real processes over loopback multicast: `rmcast txn-serve`
//! servers answer `rmcast txn` with a command's output, each reply named by its server; a
//! transaction whose open gets fewer answers than `--min` fails naming who answered; wrong
//! arguments say what is wrong; `rmcast txn-bench` runs its receiver processes and ends. Every wait has a deadline, and every process this test starts
//! is killed by its own handle when the test ends (or fails midway).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_rmcast");

/// A `txn-serve` process; killed on drop.
struct Server {
    id: u32,
    child: Child,
    errs: Receiver<String>,
}

impl Server {
    fn start(group: &str, id: u32, exec: &str) -> Server {
        let mut child = Command::new(EXE)
            .args(["txn-serve", "--group", group, "--id", &id.to_string()])
            .args(["--exec", exec])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start rmcast txn-serve");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut s = Server {
            id,
            child,
            errs: rx,
        };
        s.wait_for("answering on group", Duration::from_secs(20));
        s
    }

    fn wait_for(&mut self, what: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.errs.recv_timeout(left) {
                Ok(l) if l.contains(what) => return,
                Ok(_) => {}
                Err(_) => panic!("server {} never said {what:?}", self.id),
            }
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // This test's own child, by its handle.
        self.kill();
    }
}

/// Run `rmcast args...` to completion, killing it if it outlives `timeout`.
fn rmcast(args: &[&str], timeout: Duration) -> Output {
    let mut child = Command::new(EXE)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rmcast");
    let deadline = Instant::now() + timeout;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "rmcast {args:?} did not finish within {timeout:?}; stdout {}, stderr {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn group(tag: &str) -> String {
    format!("txn-test-{tag}-{}", std::process::id())
}

#[test]
fn servers_answer_a_transaction_each_by_name() {
    let g = group("answer");
    let mut servers: Vec<Server> = (11..=13)
        .map(|id| Server::start(&g, id, "tr a-z A-Z"))
        .collect();
    let t = Duration::from_secs(30);
    let out = rmcast(
        &[
            "txn",
            "--group",
            &g,
            "--id",
            "20",
            "--min",
            "3",
            "--max",
            "3",
            "hello, servers",
        ],
        t,
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for id in 11..=13 {
        assert!(
            stdout.lines().any(|l| l == format!("{id}: HELLO, SERVERS")),
            "no reply from {id}: {stdout}"
        );
    }
    assert!(
        stdout.contains("committed at 3 server(s) [11, 12, 13]"),
        "{stdout}"
    );

    // One server gone: an open that needs all three fails and names who answered.
    servers.pop().unwrap().kill();
    let out = rmcast(
        &[
            "txn",
            "--group",
            &g,
            "--id",
            "21",
            "--min",
            "3",
            "--max",
            "3",
            "--timeout-ms",
            "300",
            "again",
        ],
        t,
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("only 2 receiver(s) answered the open, 3 needed: [11, 12]"),
        "{stderr}"
    );
    // One that needs one goes ahead with the two left, after the open's timer.
    let out = rmcast(
        &[
            "txn",
            "--group",
            &g,
            "--id",
            "22",
            "--max",
            "3",
            "--timeout-ms",
            "300",
            "again",
        ],
        t,
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("11: AGAIN") && stdout.contains("12: AGAIN"),
        "{stdout}"
    );
    assert!(
        stdout.contains("committed at 2 server(s) [11, 12]"),
        "{stdout}"
    );
    // Several in a row, replies from the first server only.
    let out = rmcast(
        &[
            "txn", "--group", &g, "--id", "23", "--max", "2", "--wait", "first", "--repeat", "5",
            "--quiet", "x",
        ],
        t,
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("5 transactions, 0 failed"), "{stdout}");
    drop(servers);
}

/// `rmcast txn --json`: each reply, each transaction's commit and the summary as one JSON
/// object per line, with what the text says.
#[test]
fn txn_json_prints_replies_commits_and_the_summary_as_objects() {
    let g = group("json");
    let servers: Vec<Server> = (31..=32)
        .map(|id| Server::start(&g, id, "tr a-z A-Z"))
        .collect();
    let out = rmcast(
        &[
            "txn",
            "--group",
            &g,
            "--id",
            "40",
            "--min",
            "2",
            "--max",
            "2",
            "--repeat",
            "2",
            "--kernel-drops",
            "--json",
            "a \"quoted\" question",
        ],
        Duration::from_secs(30),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let kind = |k: &'static str| lines.iter().filter(move |v| v["kind"] == k);
    // Two transactions, two servers: four replies, each the server's upper-cased question.
    assert_eq!(kind("reply").count(), 4, "{stdout}");
    for v in kind("reply") {
        assert!([31, 32].contains(&v["from"].as_u64().unwrap()), "{v}");
        assert_eq!(v["reply"], "A \"QUOTED\" QUESTION", "{v}");
    }
    let commits: Vec<_> = kind("committed").collect();
    assert_eq!(commits.len(), 2, "{stdout}");
    for c in &commits {
        assert_eq!(c["servers"], serde_json::json!([31, 32]), "{c}");
        assert_eq!(c["replies"], 2, "{c}");
        assert_eq!(c["missing"], serde_json::json!([]), "{c}");
        assert!(c["commit_ms"].as_f64().unwrap() > 0.0, "{c}");
    }
    let summary: Vec<_> = kind("summary").collect();
    assert_eq!(summary.len(), 1, "{stdout}");
    assert_eq!(summary[0]["transactions"], 2);
    assert_eq!(summary[0]["failed"], 0);
    let (p50, max) = (summary[0]["p50_ms"].as_f64(), summary[0]["max_ms"].as_f64());
    assert!(p50.unwrap() > 0.0 && p50 <= max, "{stdout}");
    assert_eq!(kind("kernel_drops").count(), 1, "{stdout}");
    // Nothing but JSON lines on stdout.
    assert_eq!(lines.len(), 4 + 2 + 1 + 1, "{stdout}");
    drop(servers);
}

/// A server that commits the request but answers too late: `rmcast txn` prints the reply it
/// got, exits with status 3 and names the server that did not reply; waiting for the first
/// reply only, the same transaction is a success.
#[test]
fn a_server_that_does_not_reply_in_time_is_named_and_the_exit_status_says_so() {
    let g = group("silent");
    let _quick = Server::start(&g, 31, "tr a-z A-Z");
    let mut slow = Server::start(&g, 32, "sleep 1; echo late");
    let t = Duration::from_secs(30);
    // A long open (it ends as soon as both answered), and the reply timeout given.
    let ask = |id: &str, wait: &str, reply_ms: &str| {
        rmcast(
            &[
                "txn",
                "--group",
                &g,
                "--id",
                id,
                "--min",
                "2",
                "--max",
                "2",
                "--timeout-ms",
                "5000",
                "--reply-timeout-ms",
                reply_ms,
                "--wait",
                wait,
                "question",
            ],
            t,
        )
    };
    let out = ask("30", "all", "200");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("committed at 2 server(s) [31, 32]"),
        "{stdout}"
    );
    // The quick one may be late too on a loaded machine; the slow one is named in any case.
    let named = stderr
        .lines()
        .find(|l| l.contains("did not reply within 200 ms: ["))
        .unwrap_or_else(|| panic!("nobody named: {stderr}"));
    assert!(
        named.contains("committed at 2 server(s) [31, 32]") && named.ends_with("32]"),
        "{named}"
    );
    // The slow server did get the request (and answers once its command ends).
    slow.wait_for("request 0 from 30", t);
    let out = ask("33", "first", "5000");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("31: QUESTION"), "{stdout}");
    slow.wait_for("request 0 from 33", t);
}

#[test]
fn wrong_arguments_say_what_is_wrong() {
    let t = Duration::from_secs(20);
    let out = rmcast(&["txn", "--group", "g", "--min", "4", "--max", "3", "q"], t);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--min 4 is more than --max 3"),
        "{}",
        text(&out.stderr)
    );
    let out = rmcast(&["txn", "--group", "g"], t);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("QUESTION"),
        "{}",
        text(&out.stderr)
    );
    let out = rmcast(&["txn-serve", "--group", "g"], t);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--exec"),
        "{}",
        text(&out.stderr)
    );
    // The older spelling is an alias: the error names the flag as --help does.
    let out = rmcast(&["txn", "--group", "g", "--timeout-ms", "0", "q"], t);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--timeout <DURATION>") && text(&out.stderr).contains("outside"),
        "{}",
        text(&out.stderr)
    );
    for (args, says) in [
        (
            &["txn-bench", "--receivers", "1,0"][..],
            "0 is not in 1..=32",
        ),
        (&["txn-bench", "--receivers", "two"], "--receivers"),
        (
            &["txn-bench", "--only", "tables"],
            "possible values: both, file, latency",
        ),
        (&["txn-bench", "--file-bytes", "0"], "--file-bytes"),
    ] {
        let out = rmcast(args, t);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            text(&out.stderr).contains(says),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

/// `rmcast txn-bench` on a small scale: its receiver processes start and answer, both tables
/// come out with every column, and the run ends by itself.
#[test]
fn txn_bench_prints_every_column_and_ends() {
    let out = rmcast(
        &[
            "txn-bench",
            "--receivers",
            "1,2",
            "--file-bytes",
            "20000",
            "--file-runs",
            "2",
            "--rounds",
            "5",
            "--warmup",
            "1",
            "--timeout-secs",
            "100",
        ],
        Duration::from_secs(120),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for want in [
        "Table 1: one 20000-byte file",
        "unicast txn, one after another",
        "TCP, one after another",
        "Tables 2-3: round trip of a 1-byte request",
        "N parallel TCP",
        "unicast txn series",
    ] {
        assert!(stdout.contains(want), "no {want:?} in {stdout}");
    }
    // One row per N in each table, none with failed transactions.
    let rows = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("1 |") || l.trim_start().starts_with("2 |"))
        .count();
    assert_eq!(rows, 4, "{stdout}");
    assert!(!stdout.contains("failed"), "{stdout}");
}
