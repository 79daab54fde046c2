//! A replicated key-value service on the `ring` engine (RMP's client/server model): three
//! server processes are ring members, each applying every request in the ring's total order;
//! clients stay outside the group and call it by multi-RPC, naming handler lock 0, whose
//! holder answers. The holder is killed with SIGKILL while a client writes: the ring reforms
//! without it, the lock is freed, a survivor takes it and answers, and every write the client
//! saw acknowledged is read back afterwards. Then a fourth server starts: it receives the
//! map by state transfer ([`rmcast::state`]: the state at its place in the total order) and
//! reads every key the client wrote.
//!
//! ```sh
//! cargo run --example kv                         # the whole run above, checked
//! cargo run --example kv -- serve --group G      # one server (start three)
//! cargo run --example kv -- serve --group G --verify N  # one that checks key0..N from the state
//! cargo run --example kv -- put --group G K V    # a client call
//! cargo run --example kv -- get --group G K
//! cargo run --example kv -- load --group G --writes N   # writes, then reads them all back
//! ```
//!
//! Requests are majority resilient: a member delivers one (and the handler answers it) only
//! once a majority of the ring holds it, so an answered write survives the crash of any
//! minority, the answering member included.
//!
//! Servers wrap their group in a [`StateGroup`] whose state is their map: the first server
//! starts empty, every later one asks the group for the map and gets it as it stood at its
//! request's place in the order, then applies every request ordered after it.

use rmcast::{
    EngineChoice, GroupConfig, GroupEvent, Node, NodeConfig, NodeId, OpenMode, Qos, StateApp,
    StateGroup, StateOptions,
};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The handler lock whose holder answers.
const HANDLER: u8 = 0;
/// Requests are delivered (and answered) once a majority holds them.
const QOS: Qos = Qos::MajorityResilient;
/// How long a client waits for one answer before it asks again.
const CALL_TIMEOUT: Duration = Duration::from_millis(1500);

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        [] => run_all(),
        ["serve", "--group", g] => serve(g, None),
        ["serve", "--group", g, "--verify", n] => serve(g, Some(n.parse()?)),
        ["put", "--group", g, k, v] => {
            println!("{}", call(&mut client(g)?.1, &format!("put {k} {v}"))?.1);
            Ok(())
        }
        ["get", "--group", g, k] => {
            println!("{}", call(&mut client(g)?.1, &format!("get {k}"))?.1);
            Ok(())
        }
        ["load", "--group", g, "--writes", n] => load(g, n.parse()?),
        _ => Err(
            "usage: kv [serve --group G [--verify N] | put --group G K V | get --group G K | \
                  load --group G --writes N]"
                .into(),
        ),
    }
}

// ---- the server ------------------------------------------------------------------------------

/// The replicated state: the map, transferred to servers that join.
#[derive(Default)]
struct Store(BTreeMap<String, String>);

impl StateApp for Store {
    /// One `key value` line per entry (keys have no space; values no newline).
    fn get_state(&self, out: &mut dyn Write) -> std::io::Result<()> {
        for (k, v) in &self.0 {
            writeln!(out, "{k} {v}")?;
        }
        Ok(())
    }

    fn set_state(&mut self, input: &mut dyn Read) -> std::io::Result<()> {
        let mut text = String::new();
        input.read_to_string(&mut text)?;
        self.0 = text
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok(())
    }
}

/// One replica: gets the map by state transfer, applies every request in the total order,
/// answers those naming the handler lock it holds, and takes the lock whenever it is free.
/// With `verify`, first checks that the transferred map holds `key0..verify`.
fn serve(group: &str, verify: Option<u64>) -> Res<()> {
    let node = Node::new(NodeConfig::default())?;
    let mut cfg = GroupConfig::new(group).engine(EngineChoice::named("ring")?);
    cfg.qos = QOS;
    let me = node.id();
    let mut g = StateGroup::join(
        node.open_group(cfg)?,
        Store::default(),
        StateOptions::default(),
    )?;
    println!("server {me} in group {group}");
    if let Some(from) = g.stats().provider {
        println!(
            "server {me} got the state from {from}: {} keys in {} bytes",
            g.app().0.len(),
            g.stats().state_bytes
        );
    }
    if let Some(n) = verify {
        for i in 0..n {
            let v = g.app().0.get(&format!("key{i}"));
            if v.map(String::as_str) != Some(format!("value{i}").as_str()) {
                return Err(
                    format!("server {me}: key{i} is {v:?} after the state transfer").into(),
                );
            }
        }
        println!("server {me} reads all {n} keys after the state transfer");
    }
    g.group().lock(u16::from(HANDLER))?;
    while let Some(ev) = g.recv() {
        match ev {
            GroupEvent::Deliver(d) => {
                let req = String::from_utf8_lossy(&d.payload).into_owned();
                let answer = apply(&mut g.app_mut().0, &req);
                if d.respond {
                    // Answered only after delivery at the majority-resilient level.
                    if let Err(e) = g.group().reply(d.sender, d.msg, answer) {
                        eprintln!("server {me}: answer to {} not sent: {e}", d.sender);
                    }
                }
            }
            GroupEvent::Lock(l) if l.lock == u16::from(HANDLER) => match l.holder {
                Some(h) if h == me => println!("server {me} holds handler lock {HANDLER}"),
                Some(h) => println!("handler lock {HANDLER} held by {h}"),
                None => {
                    println!("handler lock {HANDLER} is free: server {me} asks for it");
                    g.group().lock(u16::from(HANDLER))?;
                }
            },
            GroupEvent::View(v) => println!("view {}: members {:?}", v.id, ids(&v.members)),
            _ => {}
        }
    }
    Ok(())
}

/// The state machine: `put K V` and `get K`.
fn apply(store: &mut BTreeMap<String, String>, req: &str) -> String {
    let w: Vec<&str> = req.splitn(3, ' ').collect();
    match w.as_slice() {
        ["put", k, v] => {
            store.insert(k.to_string(), v.to_string());
            "ok".into()
        }
        ["get", k] => store.get(*k).cloned().unwrap_or_else(|| "(none)".into()),
        _ => format!("error: unknown request {req:?}"),
    }
}

// ---- the client ------------------------------------------------------------------------------

/// A node outside the group that calls it (keep the node while calling).
fn client(group: &str) -> Res<(Node, rmcast::Group)> {
    let node = Node::new(NodeConfig::default())?;
    let g = node.open_group(
        GroupConfig::new(group)
            .mode(OpenMode::Client)
            .engine(EngineChoice::named("ring")?),
    )?;
    Ok((node, g))
}

/// One call, asked again (as a new request: puts and gets may be repeated) until answered.
fn call(g: &mut rmcast::Group, req: &str) -> Res<(NodeId, String)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match g.call(req.to_string(), QOS, Some(HANDLER), CALL_TIMEOUT) {
            Ok(Some(r)) => return Ok((r.from, String::from_utf8_lossy(&r.payload).into_owned())),
            Ok(None) => unreachable!("a handler was named"),
            Err(rmcast::Error::Timeout) if Instant::now() < deadline => {
                eprintln!("no answer to {req:?} in {CALL_TIMEOUT:?}: asking again");
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// `n` writes, each waited for; then every write read back.
fn load(group: &str, n: u64) -> Res<()> {
    let (_node, mut g) = client(group)?;
    let mut answered_by = BTreeSet::new();
    for i in 0..n {
        let (from, a) = call(&mut g, &format!("put key{i} value{i}"))?;
        if a != "ok" {
            return Err(format!("put key{i}: {a}").into());
        }
        answered_by.insert(from);
        println!("acknowledged {i} by {from}");
    }
    for i in 0..n {
        let (from, v) = call(&mut g, &format!("get key{i}"))?;
        answered_by.insert(from);
        if v != format!("value{i}") {
            return Err(format!("acknowledged write key{i} lost: read {v:?}").into());
        }
    }
    println!(
        "all {n} acknowledged writes read back; answered by {:?}",
        answered_by.iter().map(|m| m.0).collect::<Vec<_>>()
    );
    Ok(())
}

// ---- the whole run -----------------------------------------------------------------------------

/// Three servers, a client writing, the handler killed with SIGKILL midway; then a fourth
/// server that must read every key from the state transfer.
fn run_all() -> Res<()> {
    let exe = std::env::current_exe()?;
    let group = format!("kv-{}", std::process::id());
    let (tx, rx) = mpsc::channel::<(usize, String)>();
    let mut servers: Vec<Child> = Vec::new();
    let spawn_lines = |i: usize, mut c: Child, tx: mpsc::Sender<(usize, String)>| {
        let out = c.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send((i, line)).is_err() {
                    break;
                }
            }
        });
        c
    };
    let mut server_ids: BTreeMap<usize, u32> = BTreeMap::new();
    // The server that last said it holds the handler lock.
    let mut holder: Option<usize> = None;
    for i in 0..3 {
        let c = Command::new(&exe)
            .args(["serve", "--group", &group])
            .stdout(Stdio::piped())
            .spawn()?;
        servers.push(spawn_lines(i, c, tx.clone()));
        // Each one in the group before the next starts.
        loop {
            let (s, line) = rx.recv_timeout(Duration::from_secs(15))?;
            println!("server {s}: {line}");
            if line.contains("holds handler lock") {
                holder = Some(s);
            }
            if let Some(id) = line
                .strip_prefix("server ")
                .and_then(|l| l.split(' ').next())
            {
                if s == i && line.contains(" in group ") {
                    server_ids.insert(i, id.parse()?);
                    break;
                }
            }
        }
    }
    let mut client: Option<Child> = None;
    let result = (|| -> Res<()> {
        // Who answers: the server that says it holds the lock.
        let holder = match holder {
            Some(h) => h,
            None => wait_for(&rx, Duration::from_secs(15), |_, l| {
                l.contains("holds handler lock")
            })?,
        };
        let writes = 1000;
        let c = Command::new(&exe)
            .args(["load", "--group", &group, "--writes", &writes.to_string()])
            .stdout(Stdio::piped())
            .spawn()?;
        let client = client.insert(spawn_lines(9, c, tx.clone()));
        wait_for(&rx, Duration::from_secs(20), |s, l| {
            s == 9 && l.starts_with("acknowledged 100 ")
        })?;
        servers[holder].kill()?;
        servers[holder].wait()?;
        let killed = server_ids[&holder];
        println!("killed server {holder} (member {killed}, the handler) with SIGKILL");
        let taken = wait_for(&rx, Duration::from_secs(20), |s, l| {
            s != holder && s != 9 && l.contains("holds handler lock")
        })?;
        println!("handler lock passed to server {taken}");
        let end = wait_for(&rx, Duration::from_secs(60), |s, l| {
            s == 9 && l.starts_with("all ")
        })?;
        let _ = end;
        let status = client.wait()?;
        if !status.success() {
            return Err(format!("client failed: {status}").into());
        }
        // A fourth server, started after the writes: the map comes by state transfer.
        let c = Command::new(&exe)
            .args(["serve", "--group", &group, "--verify", &writes.to_string()])
            .stdout(Stdio::piped())
            .spawn()?;
        servers.push(spawn_lines(3, c, tx.clone()));
        wait_for(&rx, Duration::from_secs(30), |s, l| {
            s == 3 && l.contains(&format!("reads all {writes} keys"))
        })?;
        println!(
            "kv: a fourth server started after the writes read all {writes} keys from the state \
             transfer"
        );
        Ok(())
    })();
    for mut s in servers.into_iter().chain(client) {
        let _ = s.kill();
        let _ = s.wait();
    }
    result?;
    println!("kv: the ring reformed, the lock passed on, no acknowledged write lost");
    Ok(())
}

/// Prints lines until one matches; returns the index of its process.
fn wait_for(
    rx: &mpsc::Receiver<(usize, String)>,
    within: Duration,
    mut hit: impl FnMut(usize, &str) -> bool,
) -> Res<usize> {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let (s, line) = rx
            .recv_timeout(left)
            .map_err(|_| format!("nothing matching within {within:?}"))?;
        if s == 9 {
            // The client's lines are many: only the milestones.
            if !line.starts_with("acknowledged ") || line.starts_with("acknowledged 100 ") {
                println!("client: {line}");
            }
        } else {
            println!("server {s}: {line}");
        }
        if hit(s, &line) {
            return Ok(s);
        }
    }
}

fn ids(m: &[NodeId]) -> Vec<u32> {
    m.iter().map(|m| m.0).collect()
}
