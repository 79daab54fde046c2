//! `rmcast txn-bench`: section 5 of "The Multidriver: A Reliable Multicast Service Using the
//! Xpress Transfer Protocol" (Dempsey, Fenton and Weaver) on real processes of this host, every
//! column measured in the same run, for each number of receivers N (default 1, 2, 3, 4, 5, 8):
//!
//! * **Table 1, multidestination file transfer**: one file of `--file-bytes` (the paper's
//!   350,000 bytes) to N receivers by one multicast transaction, from the send to the commit
//!   (every receiver holds and delivered all of it: the paper stops its clock "when all data
//!   had been acknowledged at the sender"), beside the same file sent to the N receivers one
//!   after the other by reliable unicast, twice: by a `txn` transaction to a group of that one
//!   receiver (the paper's "same driver routines", the like-for-like baseline) and over TCP
//!   (the kernel's reliable unicast: a length-prefixed write and a one-byte acknowledgement once
//!   the receiver read it all). Throughput is the file's bits over that time.
//! * **Tables 2 and 3, transaction round trip**: a `--request-bytes` request (the paper's one
//!   byte) that every receiver answers with `--reply-bytes`, from the send to the last reply:
//!   one multicast transaction, beside N parallel TCP request/responses (written to all N
//!   connections, then every answer read) and beside the paper's own comparison, a series of N
//!   unicast transactions (Table 3's per-receiver round trips, one after the other).
//!   p50, p99 and mean over `--rounds` rounds after `--warmup` rounds.
//!
//! The methods take turns round by round (and start each round in a different order), so that
//! a neighbour's load on a shared host weighs on every column alike.
//!
//! **Processes.** For each N the bench starts N `rmcast txn-bench-worker` processes of this very
//! executable. Each worker runs one node that answers every transaction of the shared group
//! (the multicast one) and of its own group (the unicast baseline: a group only it serves), and
//! answers framed requests on a TCP listener on 127.0.0.1; it prints its port and serves until
//! its standard input closes (the bench ends, or dies) or its own deadline passes. The bench's
//! node is the client of every group. All traffic stays on loopback (multicast interface
//! 127.0.0.1, TTL 0).
//!
//! Every run ends by itself: each transaction by its own timeouts, TCP reads by a read timeout,
//! the whole run at `--timeout-secs`; workers are killed, by their own handles, when the bench
//! is done with them.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use rmcast::txn::{TxnGroup, TxnOptions, Until};
use rmcast::{Node, NodeConfig, NodeId};
use serde::Serialize;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

/// Most receivers the bench starts (processes on one host).
const MAX_RECEIVERS: u16 = 32;
/// Largest file: the `txn` engine's largest message by default.
const MAX_FILE_BYTES: u64 = 16 << 20;
/// Largest request or reply of the latency rounds.
const MAX_SMALL_BYTES: u64 = 64 << 10;
/// Largest TCP frame a worker accepts (a file, with room).
const MAX_FRAME: usize = (MAX_FILE_BYTES as usize) + 1024;
/// The bench's node id; worker `i` (1-based) is `WORKER_ID_BASE + i`.
const CLIENT_ID: u32 = 1;
const WORKER_ID_BASE: u32 = 100;
/// How long a worker may take to start and print its port.
const WORKER_READY: Duration = Duration::from_secs(20);
/// A TCP answer that takes longer than this is an error (nothing on loopback does).
const TCP_TIMEOUT: Duration = Duration::from_secs(10);
/// Transactions that must succeed before a measurement (every receiver listens), tried at most
/// this many times.
const PROBE_TRIES: u32 = 20;
/// A measurement gives up after this many failed transactions in a row.
const MAX_FAILS_IN_A_ROW: u32 = 10;

/// Arguments of `rmcast txn-bench`.
#[derive(Args, Debug)]
pub struct TxnBenchArgs {
    /// Numbers of receivers, comma separated (each 1..=32); one measurement each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5,8",
          value_parser = clap::value_parser!(u16).range(1..=MAX_RECEIVERS as i64))]
    pub receivers: Vec<u16>,

    /// Which tables to measure.
    #[arg(long, value_enum, default_value_t = Tables::Both)]
    pub only: Tables,

    /// Table 1: bytes of the file sent to every receiver (the paper's 350,000).
    #[arg(long, default_value_t = 350_000, value_parser = clap::value_parser!(u64).range(1..=MAX_FILE_BYTES))]
    pub file_bytes: u64,

    /// Table 1: transfers per method and number of receivers (the table gives their mean
    /// and range).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub file_runs: u64,

    /// Tables 2-3: measured rounds per method and number of receivers (the paper averaged
    /// 1,500 transfers).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub rounds: u64,

    /// Tables 2-3: rounds run first and not measured.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub warmup: u64,

    /// Tables 2-3: bytes of the request (the paper's 1).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=MAX_SMALL_BYTES))]
    pub request_bytes: u64,

    /// Bytes of every receiver's answer.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=MAX_SMALL_BYTES))]
    pub reply_bytes: u64,

    /// BACKOFF_TIME per receiver (a bare number: microseconds): a receiver answers an open after a random
    /// wait in [0, N × this] (the engine's implosion control; 0: none).
    #[arg(long = "backoff", alias = "backoff-us", default_value_t = 100, value_name = "DURATION", value_parser = crate::dur::us(0, 1_000_000))]
    pub backoff_us: u64,

    /// How long a transaction's open waits for the N receivers (a bare number: milliseconds; it ends as
    /// soon as all N answered).
    #[arg(long = "open-timeout", alias = "open-timeout-ms", default_value_t = 500, value_name = "DURATION", value_parser = crate::dur::ms(1, 60_000))]
    pub open_timeout_ms: u64,

    /// Abandon the run after this long (a bare number: seconds; the tables of the receivers done so far are
    /// printed).
    #[arg(long = "timeout", alias = "timeout-secs", default_value = "15m", value_name = "DURATION", value_parser = crate::dur::secs(1, 86_400))]
    pub timeout_secs: u64,

    /// Also write one JSON line per table row to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Which tables `rmcast txn-bench` measures.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Tables {
    /// Table 1 and Tables 2-3.
    Both,
    /// Table 1 only (file transfer).
    File,
    /// Tables 2-3 only (transaction round trip).
    Latency,
}

/// Arguments of the hidden `rmcast txn-bench-worker` (one receiver of `txn-bench`).
#[derive(Args, Debug)]
pub struct BenchWorkerArgs {
    /// The shared (multicast) group; this worker's own group is named after it and its index.
    #[arg(long, value_parser = crate::names::parse_group_name)]
    pub group: String,
    /// This worker's index, 1-based.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_RECEIVERS as i64))]
    pub index: u32,
    /// BACKOFF_TIME per receiver (a bare number: microseconds).
    #[arg(long = "backoff", alias = "backoff-us", value_name = "DURATION", value_parser = crate::dur::us(0, 1_000_000))]
    pub backoff_us: u64,
    /// The open's timeout (a bare number: milliseconds; the same at every member).
    #[arg(long = "open-timeout", alias = "open-timeout-ms", value_name = "DURATION", value_parser = crate::dur::ms(1, 60_000))]
    pub open_timeout_ms: u64,
    /// Bytes of every answer.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=MAX_SMALL_BYTES))]
    pub reply_bytes: u64,
    /// Exit after this long whatever happens (a bare number: seconds).
    #[arg(long = "max-time", alias = "max-secs", value_name = "DURATION", value_parser = crate::dur::secs(1, 90_000))]
    pub max_secs: u64,
}

/// The group only worker `index` serves.
fn private_group(group: &str, index: u32) -> String {
    format!("{group}-u{index}")
}

/// The transaction options of every member: the same open timeout, backoff and reply timeout.
fn options(backoff_us: u64, open_timeout_ms: u64) -> TxnOptions {
    TxnOptions::client()
        .timeout(Duration::from_millis(open_timeout_ms))
        .backoff_unit(Duration::from_micros(backoff_us))
        // Replies come within milliseconds on loopback; a short linger keeps few response
        // channels open at the hundreds of transactions a second the rounds make.
        .reply_timeout(Duration::from_secs(1))
}

// ---------------------------------------------------------------------------------- worker

/// `rmcast txn-bench-worker`: answer transactions of the shared group and of this worker's own
/// group, and framed TCP requests, until standard input closes or `--max-secs` passes.
pub fn worker(a: BenchWorkerArgs) -> Result<ExitCode> {
    let deadline = Instant::now() + Duration::from_secs(a.max_secs);
    let stop = Arc::new(AtomicBool::new(false));
    {
        // Standard input closes when the bench is done with this worker, or dies.
        let stop = stop.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 64];
            let mut input = std::io::stdin();
            while matches!(input.read(&mut buf), Ok(n) if n > 0) {}
            stop.store(true, Ordering::SeqCst);
        });
    }
    let node = Node::new(NodeConfig::default().id(NodeId(WORKER_ID_BASE + a.index)))
        .context("starting the node")?;
    let opts = options(a.backoff_us, a.open_timeout_ms).receive(true);
    let reply = bytes::Bytes::from(vec![b'r'; a.reply_bytes as usize]);
    let mut servers = Vec::new();
    for name in [a.group.clone(), private_group(&a.group, a.index)] {
        let g = TxnGroup::open(&node, &name, opts.clone())
            .with_context(|| format!("opening group {name:?}"))?;
        let (stop, reply) = (stop.clone(), reply.clone());
        servers.push(thread::spawn(move || serve_txn(g, &reply, &stop)));
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("listening on TCP")?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    {
        let (stop, reply) = (stop.clone(), reply.clone());
        thread::spawn(move || serve_tcp(&listener, &reply, &stop));
    }
    println!("READY {port}");
    std::io::stdout().flush()?;
    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::SeqCst);
    for s in servers {
        let _ = s.join();
    }
    // TCP threads blocked in a read end with the process.
    Ok(ExitCode::SUCCESS)
}

/// Answer every request of `g` with `reply` until `stop`.
fn serve_txn(mut g: TxnGroup, reply: &bytes::Bytes, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        match g.next_event(Duration::from_millis(50)) {
            Ok(Some(rmcast::txn::TxnEvent::Request(d))) => {
                // The client may have given up on it (a failed round): the worker goes on.
                let _ = g.reply(d.sender, d.msg, reply.clone());
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("txn-bench-worker: {e}");
                return;
            }
        }
    }
    let _ = g.close();
}

/// Accept connections until `stop`; each is served on its own thread.
fn serve_tcp(listener: &TcpListener, reply: &bytes::Bytes, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((s, _)) => {
                let reply = reply.clone();
                thread::spawn(move || {
                    if let Err(e) = serve_conn(s, &reply) {
                        eprintln!("txn-bench-worker: TCP: {e}");
                    }
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                eprintln!("txn-bench-worker: accept: {e}");
                return;
            }
        }
    }
}

/// Answer framed requests (a big-endian u32 length, then the bytes) with framed `reply`s
/// until the client closes.
fn serve_conn(s: TcpStream, reply: &[u8]) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_nodelay(true)?;
    let mut r = BufReader::new(s.try_clone()?);
    let mut w = s;
    let answer = frame(reply);
    let mut buf = Vec::new();
    loop {
        let mut len = [0u8; 4];
        match r.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_FRAME {
            return Err(std::io::Error::other(format!("frame of {len} bytes")));
        }
        buf.resize(len, 0);
        r.read_exact(&mut buf)?;
        w.write_all(&answer)?;
    }
}

/// `payload` with its big-endian u32 length in front.
fn frame(payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(4 + payload.len());
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

// ---------------------------------------------------------------------------------- bench

/// The workers of one measurement; killed (by their own handles) and reaped when dropped.
struct Fleet {
    children: Vec<(Child, Option<ChildStdin>)>,
    ports: Vec<u16>,
}

impl Fleet {
    fn start(n: u16, group: &str, a: &TxnBenchArgs) -> Result<Fleet> {
        let exe = std::env::current_exe().context("finding this executable")?;
        let mut fleet = Fleet {
            children: Vec::new(),
            ports: Vec::new(),
        };
        let (tx, rx) = mpsc::channel();
        for index in 1..=u32::from(n) {
            let mut child = Command::new(&exe)
                .arg("txn-bench-worker")
                .args(["--group", group])
                .args(["--index", &index.to_string()])
                .args(["--backoff-us", &a.backoff_us.to_string()])
                .args(["--open-timeout-ms", &a.open_timeout_ms.to_string()])
                .args(["--reply-bytes", &a.reply_bytes.to_string()])
                .args(["--max-secs", &(a.timeout_secs + 60).to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .context("starting a txn-bench-worker")?;
            let stdin = child.stdin.take();
            let stdout = child.stdout.take().expect("piped");
            fleet.children.push((child, stdin));
            let tx = tx.clone();
            // On a thread: a worker that never prints must not hang the bench.
            thread::spawn(move || {
                let mut line = String::new();
                let _ = BufReader::new(stdout).read_line(&mut line);
                let _ = tx.send((index, line));
            });
        }
        let mut ports = vec![0u16; usize::from(n)];
        let until = Instant::now() + WORKER_READY;
        for _ in 0..n {
            let left = until.saturating_duration_since(Instant::now());
            let Ok((index, line)) = rx.recv_timeout(left) else {
                bail!("a txn-bench-worker did not start within {WORKER_READY:?}");
            };
            let port = line
                .trim()
                .strip_prefix("READY ")
                .and_then(|p| p.parse::<u16>().ok())
                .with_context(|| format!("txn-bench-worker {index} said {line:?}"))?;
            ports[index as usize - 1] = port;
        }
        fleet.ports = ports;
        Ok(fleet)
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // Closing standard input asks each worker to leave its groups and exit.
        for (_, stdin) in &mut self.children {
            drop(stdin.take());
        }
        let until = Instant::now() + Duration::from_secs(3);
        for (child, _) in &mut self.children {
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < until => thread::sleep(Duration::from_millis(20)),
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
    }
}

/// The bench's side of one measurement: the client of the shared group, of every worker's own
/// group, and a TCP connection to every worker.
struct Client {
    multicast: TxnGroup,
    unicast: Vec<TxnGroup>,
    tcp: Vec<TcpStream>,
    n: usize,
}

impl Client {
    fn open(node: &Node, group: &str, fleet: &Fleet, a: &TxnBenchArgs) -> Result<Client> {
        let n = fleet.ports.len();
        let multicast = TxnGroup::open(
            node,
            group,
            options(a.backoff_us, a.open_timeout_ms).min(n).max(n),
        )?;
        let mut unicast = Vec::new();
        for i in 1..=n as u32 {
            unicast.push(TxnGroup::open(
                node,
                &private_group(group, i),
                options(a.backoff_us, a.open_timeout_ms).min(1).max(1),
            )?);
        }
        let mut tcp = Vec::new();
        for &port in &fleet.ports {
            let s = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
                .with_context(|| format!("connecting to a worker on TCP port {port}"))?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(TCP_TIMEOUT))?;
            tcp.push(s);
        }
        Ok(Client {
            multicast,
            unicast,
            tcp,
            n,
        })
    }

    /// Every receiver is there: a transaction in every group succeeds with every receiver.
    fn probe(&mut self) -> Result<()> {
        let n = self.n;
        for (what, g, want) in std::iter::once(("the shared group", &mut self.multicast, n)).chain(
            self.unicast
                .iter_mut()
                .map(|g| ("a worker's own group", g, 1)),
        ) {
            let mut last = String::new();
            let mut ok = false;
            for _ in 0..PROBE_TRIES {
                match g.request(&b"probe"[..], Until::All) {
                    Ok(o) if o.set.len() == want && o.missing.is_empty() => {
                        ok = true;
                        break;
                    }
                    Ok(o) => last = format!("{} of {want} answered", o.replies.len()),
                    Err(e) => last = e.to_string(),
                }
            }
            if !ok {
                bail!("no transaction in {what} reached every receiver: {last}");
            }
        }
        for i in 0..n {
            self.tcp_one(i, b"probe")?;
        }
        Ok(())
    }

    /// One multicast transaction to all N; `until` what.
    fn multicast(&mut self, payload: &bytes::Bytes, until: Until) -> Option<Duration> {
        let o = self.multicast.request(payload.clone(), until).ok()?;
        match until {
            Until::Committed => (o.set.len() == self.n).then_some(o.commit_latency),
            _ => (o.set.len() == self.n && o.missing.is_empty()).then_some(o.latency),
        }
    }

    /// One unicast transaction to each receiver, one after the other.
    fn unicast_series(&mut self, payload: &bytes::Bytes, until: Until) -> Option<Duration> {
        let start = Instant::now();
        for g in &mut self.unicast {
            let o = g.request(payload.clone(), until).ok()?;
            if o.set.len() != 1 || (until != Until::Committed && !o.missing.is_empty()) {
                return None;
            }
        }
        Some(start.elapsed())
    }

    fn tcp_one(&mut self, i: usize, payload: &[u8]) -> Result<()> {
        self.tcp[i].write_all(&frame(payload))?;
        read_frame(&mut self.tcp[i])
    }

    /// A framed request to each receiver over TCP, one after the other.
    fn tcp_series(&mut self, framed: &[u8]) -> Result<Duration> {
        let start = Instant::now();
        for s in &mut self.tcp {
            s.write_all(framed)?;
            read_frame(s)?;
        }
        Ok(start.elapsed())
    }

    /// A framed request written to all N connections, then every answer read.
    fn tcp_parallel(&mut self, framed: &[u8]) -> Result<Duration> {
        let start = Instant::now();
        for s in &mut self.tcp {
            s.write_all(framed)?;
        }
        for s in &mut self.tcp {
            read_frame(s)?;
        }
        Ok(start.elapsed())
    }

    fn close(self) {
        let _ = self.multicast.close();
        for g in self.unicast {
            let _ = g.close();
        }
    }
}

/// Read and drop one framed answer.
fn read_frame(s: &mut TcpStream) -> Result<()> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).context("reading a TCP answer")?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        bail!("a TCP answer of {len} bytes");
    }
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf).context("reading a TCP answer")?;
    Ok(())
}

/// Samples of one method at one N, and its failed transfers.
#[derive(Default)]
struct Samples {
    times: Vec<Duration>,
    failed: u64,
    fails_in_a_row: u32,
}

impl Samples {
    fn add(&mut self, t: Option<Duration>, what: &str) -> Result<()> {
        match t {
            Some(t) => {
                self.times.push(t);
                self.fails_in_a_row = 0;
            }
            None => {
                self.failed += 1;
                self.fails_in_a_row += 1;
                if self.fails_in_a_row >= MAX_FAILS_IN_A_ROW {
                    bail!("{what}: {MAX_FAILS_IN_A_ROW} transactions in a row failed");
                }
            }
        }
        Ok(())
    }

    fn sorted_ms(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self.times.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        v.sort_by(f64::total_cmp);
        v
    }

    fn stats(&self) -> Stats {
        let v = self.sorted_ms();
        if v.is_empty() {
            return Stats::default();
        }
        let pct = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Stats {
            n: v.len() as u64,
            failed: self.failed,
            mean_ms: v.iter().sum::<f64>() / v.len() as f64,
            p50_ms: pct(0.5),
            p99_ms: pct(0.99),
            min_ms: v[0],
            max_ms: v[v.len() - 1],
        }
    }
}

/// One method's figures at one N, in milliseconds.
#[derive(Clone, Copy, Debug, Default, Serialize)]
struct Stats {
    n: u64,
    failed: u64,
    mean_ms: f64,
    p50_ms: f64,
    p99_ms: f64,
    min_ms: f64,
    max_ms: f64,
}

/// A row of Table 1.
#[derive(Debug, Serialize)]
struct FileRow {
    table: &'static str,
    receivers: u16,
    file_bytes: u64,
    multicast_txn: Stats,
    unicast_txn_series: Stats,
    tcp_series: Stats,
}

/// A row of Tables 2-3.
#[derive(Debug, Serialize)]
struct LatencyRow {
    table: &'static str,
    receivers: u16,
    request_bytes: u64,
    reply_bytes: u64,
    multicast_txn: Stats,
    tcp_parallel: Stats,
    unicast_txn_series: Stats,
}

/// Whether the run may go on (not past its deadline, not interrupted).
fn check(deadline: Instant) -> Result<()> {
    if crate::signals::received() {
        bail!("interrupted");
    }
    if Instant::now() >= deadline {
        bail!("gave up after --timeout-secs");
    }
    Ok(())
}

/// Table 1 at one N.
fn file_row(c: &mut Client, n: u16, a: &TxnBenchArgs, deadline: Instant) -> Result<FileRow> {
    let file = bytes::Bytes::from(
        (0..a.file_bytes)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let framed = frame(&file);
    let (mut m, mut u, mut t) = (Samples::default(), Samples::default(), Samples::default());
    for run in 0..a.file_runs {
        for k in 0..3 {
            check(deadline)?;
            match (run + k) % 3 {
                0 => m.add(c.multicast(&file, Until::Committed), "file by multicast")?,
                1 => u.add(c.unicast_series(&file, Until::Committed), "file by unicast")?,
                _ => t.add(Some(c.tcp_series(&framed)?), "file by TCP")?,
            }
        }
    }
    Ok(FileRow {
        table: "1",
        receivers: n,
        file_bytes: a.file_bytes,
        multicast_txn: m.stats(),
        unicast_txn_series: u.stats(),
        tcp_series: t.stats(),
    })
}

/// Tables 2-3 at one N.
fn latency_row(c: &mut Client, n: u16, a: &TxnBenchArgs, deadline: Instant) -> Result<LatencyRow> {
    let req = bytes::Bytes::from(vec![b'q'; a.request_bytes as usize]);
    let framed = frame(&req);
    let (mut m, mut p, mut u) = (Samples::default(), Samples::default(), Samples::default());
    for round in 0..a.warmup + a.rounds {
        let measured = round >= a.warmup;
        for k in 0..3 {
            check(deadline)?;
            match (round + k) % 3 {
                0 => {
                    let t = c.multicast(&req, Until::All);
                    if measured {
                        m.add(t, "multicast round trip")?;
                    }
                }
                1 => {
                    let t = c.tcp_parallel(&framed)?;
                    if measured {
                        p.add(Some(t), "TCP round trip")?;
                    }
                }
                _ => {
                    let t = c.unicast_series(&req, Until::All);
                    if measured {
                        u.add(t, "unicast round trips")?;
                    }
                }
            }
        }
    }
    Ok(LatencyRow {
        table: "2-3",
        receivers: n,
        request_bytes: a.request_bytes,
        reply_bytes: a.reply_bytes,
        multicast_txn: m.stats(),
        tcp_parallel: p.stats(),
        unicast_txn_series: u.stats(),
    })
}

/// `rmcast txn-bench`.
pub fn run(a: TxnBenchArgs) -> Result<ExitCode> {
    let deadline = Instant::now() + Duration::from_secs(a.timeout_secs);
    let mut json = match &a.json {
        Some(p) => {
            Some(std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?)
        }
        None => None,
    };
    let node =
        Node::new(NodeConfig::default().id(NodeId(CLIENT_ID))).context("starting the node")?;
    println!(
        "# rmcast txn-bench: receivers {:?}, file {} bytes x {} runs, rounds {} (+{} warm-up) of \
         {} -> {} bytes, backoff {} us; {} cores",
        a.receivers,
        a.file_bytes,
        a.file_runs,
        a.rounds,
        a.warmup,
        a.request_bytes,
        a.reply_bytes,
        a.backoff_us,
        thread::available_parallelism().map_or(0, |n| n.get())
    );
    let (mut files, mut lats) = (Vec::new(), Vec::new());
    let mut failure = None;
    for &n in &a.receivers {
        let group = crate::workers::fresh_group_name(&format!("txnb{n}"));
        let r = (|| -> Result<()> {
            let fleet = Fleet::start(n, &group, &a)?;
            let mut c = Client::open(&node, &group, &fleet, &a)?;
            c.probe()?;
            if a.only != Tables::Latency {
                eprintln!("# N={n}: Table 1 ...");
                let row = file_row(&mut c, n, &a, deadline)?;
                if let Some(f) = json.as_mut() {
                    writeln!(f, "{}", serde_json::to_string(&row)?)?;
                }
                files.push(row);
            }
            if a.only != Tables::File {
                eprintln!("# N={n}: Tables 2-3 ...");
                let row = latency_row(&mut c, n, &a, deadline)?;
                if let Some(f) = json.as_mut() {
                    writeln!(f, "{}", serde_json::to_string(&row)?)?;
                }
                lats.push(row);
            }
            c.close();
            Ok(())
        })();
        if let Err(e) = r {
            failure = Some(e.context(format!("{n} receiver(s)")));
            break;
        }
    }
    if !files.is_empty() {
        print_files(&files);
    }
    if !lats.is_empty() {
        print_latencies(&lats);
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// Megabits per second of `bytes` in `ms`.
fn mbit_s(bytes: u64, ms: f64) -> f64 {
    if ms > 0.0 {
        bytes as f64 * 8.0 / ms / 1e3
    } else {
        0.0
    }
}

fn print_files(rows: &[FileRow]) {
    println!();
    println!(
        "Table 1: one {}-byte file to N receivers, to the last acknowledgement (mean of {} runs; \
         throughput = file bits / time, range over the runs)",
        rows[0].file_bytes, rows[0].multicast_txn.n
    );
    println!(
        "{:>3} | {:>34} | {:>34} | {:>34} | {:>15}",
        "N",
        "multicast txn",
        "unicast txn, one after another",
        "TCP, one after another",
        "series / mcast"
    );
    println!(
        "{:>3} | {:>8} {:>8} {:>16} | {:>8} {:>8} {:>16} | {:>8} {:>8} {:>16} | {:>7} {:>7}",
        "",
        "ms",
        "Mbit/s",
        "range",
        "ms",
        "Mbit/s",
        "range",
        "ms",
        "Mbit/s",
        "range",
        "uni-txn",
        "TCP"
    );
    for r in rows {
        let b = r.file_bytes;
        let col = |s: &Stats| {
            format!(
                "{:>8.2} {:>8.1} {:>16}",
                s.mean_ms,
                mbit_s(b, s.mean_ms),
                format!("{:.1}-{:.1}", mbit_s(b, s.max_ms), mbit_s(b, s.min_ms))
            )
        };
        println!(
            "{:>3} | {} | {} | {} | {:>7.2} {:>7.2}{}",
            r.receivers,
            col(&r.multicast_txn),
            col(&r.unicast_txn_series),
            col(&r.tcp_series),
            ratio(r.unicast_txn_series.mean_ms, r.multicast_txn.mean_ms),
            ratio(r.tcp_series.mean_ms, r.multicast_txn.mean_ms),
            failed_note(&[&r.multicast_txn, &r.unicast_txn_series])
        );
    }
}

fn print_latencies(rows: &[LatencyRow]) {
    println!();
    println!(
        "Tables 2-3: round trip of a {}-byte request that every receiver answers ({} bytes), \
         ms over {} rounds",
        rows[0].request_bytes, rows[0].reply_bytes, rows[0].multicast_txn.n
    );
    println!(
        "{:>3} | {:>23} | {:>23} | {:>23} | {:>13} | {:>13}",
        "N",
        "multicast txn",
        "N parallel TCP",
        "unicast txn series",
        "mcast / TCP",
        "mcast / series"
    );
    println!(
        "{:>3} | {:>7} {:>7} {:>7} | {:>7} {:>7} {:>7} | {:>7} {:>7} {:>7} | {:>6} {:>6} | {:>6} {:>6}",
        "", "p50", "p99", "mean", "p50", "p99", "mean", "p50", "p99", "mean", "p50", "p99", "p50",
        "p99"
    );
    for r in rows {
        let col = |s: &Stats| format!("{:>7.3} {:>7.3} {:>7.3}", s.p50_ms, s.p99_ms, s.mean_ms);
        let (m, p, u) = (&r.multicast_txn, &r.tcp_parallel, &r.unicast_txn_series);
        println!(
            "{:>3} | {} | {} | {} | {:>6.1} {:>6.1} | {:>6.2} {:>6.2}{}",
            r.receivers,
            col(m),
            col(p),
            col(u),
            ratio(m.p50_ms, p.p50_ms),
            ratio(m.p99_ms, p.p99_ms),
            ratio(m.p50_ms, u.p50_ms),
            ratio(m.p99_ms, u.p99_ms),
            failed_note(&[m, u])
        );
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

/// "  (k failed)" when transactions failed, so that a row that lost samples says so.
fn failed_note(s: &[&Stats]) -> String {
    let f: u64 = s.iter().map(|s| s.failed).sum();
    if f == 0 {
        String::new()
    } else {
        format!("  ({f} failed)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_failures() {
        let mut s = Samples::default();
        for ms in 1..=100u64 {
            s.add(Some(Duration::from_millis(ms)), "x").unwrap();
        }
        s.add(None, "x").unwrap();
        let st = s.stats();
        assert_eq!((st.n, st.failed), (100, 1));
        assert_eq!((st.p50_ms, st.p99_ms), (50.0, 99.0));
        assert!((st.mean_ms - 50.5).abs() < 1e-9);
        // One failure so far: up to the limit less one more are tolerated, the next is not.
        for _ in 0..MAX_FAILS_IN_A_ROW - 2 {
            s.add(None, "x").unwrap();
        }
        assert!(s.add(None, "x").is_err(), "too many failures in a row");
    }

    #[test]
    fn frames_carry_their_length() {
        assert_eq!(frame(b"ab"), vec![0, 0, 0, 2, b'a', b'b']);
        assert!((mbit_s(350_000, 2.8) - 1000.0).abs() < 1e-9);
    }
}
