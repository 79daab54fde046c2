//! Every command that opens a group takes a key (`--key-file`, or `RMCAST_KEY_FILE`), as real
//! processes over loopback multicast: a keyed `txn` is answered by a keyed `txn-serve`, while a
//! `txn` without the key gets no reply and runs no command; a keyed `send` delivers its file to
//! a keyed `receive`, while a `send` without the key delivers nothing; `txn-serve --exec` and
//! `receive` refuse a non-loopback interface without a key; `receive` never overwrites a file
//! unless told to; `demo` runs keyed from the environment. Every wait has a deadline and every
//! process this test starts is killed by its own handle when the test ends.

use std::path::Path;
use std::time::Duration;

mod support;

use support::proc::{keygen, run, scratch, text, Proc};

fn group(tag: &str) -> String {
    format!("keyed-{tag}-{}", std::process::id())
}

/// Wait until `path` holds `lines` lines (or the deadline).
fn lines_in(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn a_txn_without_the_key_is_not_heard_by_a_keyed_server() {
    let dir = scratch("txn");
    let key = keygen(&dir, "group.key");
    let marker = dir.join("ran");
    let g = group("txn");
    let exec = format!("echo ran >> {}; echo answer", marker.display());
    let server = Proc::start(&[
        "txn-serve",
        "--group",
        &g,
        "--id",
        "21",
        "--exec",
        &exec,
        "--key-file",
        key.to_str().unwrap(),
    ]);
    std::thread::sleep(Duration::from_millis(500));
    let t = Duration::from_secs(30);
    // With the key (from the environment): answered, the command ran once.
    let ok = run(
        &["txn", "--group", &g, "--timeout-ms", "2000", "hello"],
        &[("RMCAST_KEY_FILE", &key)],
        t,
    );
    assert!(ok.status.success(), "keyed txn: {}", text(&ok));
    assert!(
        String::from_utf8_lossy(&ok.stdout).contains("answer"),
        "{}",
        text(&ok)
    );
    assert_eq!(lines_in(&marker), 1);
    // Without the key: no server answers the open, the transaction fails, nothing runs.
    let no = run(
        &["txn", "--group", &g, "--timeout-ms", "1000", "evil"],
        &[],
        t,
    );
    assert!(!no.status.success(), "unkeyed txn succeeded: {}", text(&no));
    assert!(
        !String::from_utf8_lossy(&no.stdout).contains("answer"),
        "{}",
        text(&no)
    );
    // With another key: the same.
    let other = keygen(&dir, "other.key");
    let no = run(
        &[
            "txn",
            "--group",
            &g,
            "--timeout-ms",
            "1000",
            "--key-file",
            other.to_str().unwrap(),
            "evil",
        ],
        &[],
        t,
    );
    assert!(!no.status.success(), "other-key txn: {}", text(&no));
    assert_eq!(
        lines_in(&marker),
        1,
        "the command ran for a request without the key"
    );
    // The server still answers its key holders.
    let ok = run(
        &[
            "txn",
            "--group",
            &g,
            "--timeout-ms",
            "2000",
            "--key-file",
            key.to_str().unwrap(),
            "again",
        ],
        &[],
        t,
    );
    assert!(ok.status.success(), "keyed txn after: {}", text(&ok));
    assert_eq!(lines_in(&marker), 2);
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn exposed_commands_without_a_key_refuse_a_non_loopback_interface() {
    let dir = scratch("exposed");
    let t = Duration::from_secs(30);
    for args in [
        vec![
            "txn-serve",
            "--group",
            "exposed",
            "--exec",
            "cat",
            "--interface",
            "0.0.0.0",
        ],
        vec![
            "receive",
            "--group",
            "exposed",
            "--out",
            dir.to_str().unwrap(),
            "--interface",
            "0.0.0.0",
        ],
    ] {
        let o = run(&args, &[], t);
        assert!(!o.status.success(), "{args:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("without a key") && err.contains("--insecure"),
            "{args:?}: {}",
            text(&o)
        );
    }
    // --reply runs nothing: no key needed anywhere; loopback needs none either.
    std::fs::remove_dir_all(&dir).unwrap();
}

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

fn receiver(g: &str, out: &Path, key: Option<&Path>, extra: &[&str]) -> Proc {
    let mut args = vec![
        "receive",
        "--group",
        g,
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ];
    if let Some(k) = key {
        args.extend(["--key-file", k.to_str().unwrap()]);
    }
    args.extend_from_slice(extra);
    Proc::start(&args)
}

fn sender(g: &str, file: &Path, key: Option<&Path>) -> Proc {
    let mut args = vec![
        "send",
        file.to_str().unwrap(),
        "--group",
        g,
        "--quiet",
        "--linger",
        "5",
    ];
    if let Some(k) = key {
        args.extend(["--key-file", k.to_str().unwrap()]);
    }
    Proc::start(&args)
}

#[test]
fn a_send_without_the_key_delivers_no_file_to_a_keyed_receiver() {
    let dir = scratch("file");
    let key = keygen(&dir, "group.key");
    let data = content(300_000, 3);
    let file = dir.join("payload.bin");
    std::fs::write(&file, &data).unwrap();
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let t = Duration::from_secs(60);

    // Without the key: the keyed receiver hears no sender and writes nothing.
    let g = group("file-unkeyed");
    let r = receiver(&g, &out, Some(&key), &["--wait", "4"]);
    std::thread::sleep(Duration::from_millis(500));
    let s = sender(&g, &file, None);
    let o = r.wait(t);
    drop(s);
    assert!(!o.status.success(), "receive: {}", text(&o));
    assert!(
        std::fs::read_dir(&out).unwrap().next().is_none(),
        "something was written without the key"
    );

    // With the key: the file arrives intact.
    let g = group("file-keyed");
    let r = receiver(&g, &out, Some(&key), &["--wait", "30"]);
    std::thread::sleep(Duration::from_millis(500));
    let s = sender(&g, &file, Some(&key));
    let o = r.wait(t);
    assert!(o.status.success(), "keyed receive: {}", text(&o));
    assert_eq!(std::fs::read(out.join("payload.bin")).unwrap(), data);
    let so = s.wait(t);
    assert!(so.status.success(), "keyed send: {}", text(&so));

    // Again to the same directory: the file there is kept, the transfer refused...
    let g = group("file-again");
    let r = receiver(&g, &out, Some(&key), &["--wait", "30"]);
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(out.join("payload.bin"), b"mine").unwrap();
    let s = sender(&g, &file, Some(&key));
    let o = r.wait(t);
    drop(s);
    assert!(!o.status.success(), "receive overwrote: {}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--overwrite"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read(out.join("payload.bin")).unwrap(), b"mine");

    // ...unless --overwrite.
    let g = group("file-overwrite");
    let r = receiver(&g, &out, Some(&key), &["--wait", "30", "--overwrite"]);
    std::thread::sleep(Duration::from_millis(500));
    let s = sender(&g, &file, Some(&key));
    let o = r.wait(t);
    assert!(o.status.success(), "receive --overwrite: {}", text(&o));
    assert_eq!(std::fs::read(out.join("payload.bin")).unwrap(), data);
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn demo_runs_keyed_from_the_environment() {
    let dir = scratch("demo");
    let key = keygen(&dir, "group.key");
    let o = run(
        &["demo", "--members", "2", "--messages", "50"],
        &[("RMCAST_KEY_FILE", &key)],
        Duration::from_secs(120),
    );
    assert!(o.status.success(), "demo: {}", text(&o));
    // A bad key file is said at once.
    let bad = dir.join("bad.key");
    std::fs::write(&bad, b"short").unwrap();
    let o = run(
        &[
            "demo",
            "--members",
            "2",
            "--key-file",
            bad.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(60),
    );
    assert!(!o.status.success(), "demo with a bad key: {}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("key file"),
        "{}",
        text(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
