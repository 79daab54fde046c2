//! A replicated counter that survives `kill -9`: three processes add to one counter, each
//! applying every increment in the group's total order; one of them, the sequencer, is killed
//! with SIGKILL midway, the other two rebuild the group (ResetGroup) and end with the same
//! value. Resilience 1: an increment whose send completed survives the crash.
//!
//! ```sh
//! cargo run --example counter               # starts the three processes itself, then checks
//! ```
//!
//! With `--member ID --group NAME` it is one of those processes (what the run above starts).

use rmcast::{EngineChoice, GroupConfig, GroupEvent, Node, NodeConfig, NodeId, OpenMode};
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Increments each member sends.
const INCREMENTS: u64 = 60;
/// Pause between two increments of one member.
const PACE: Duration = Duration::from_millis(25);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => run_all(),
        [m, id, g, name] if m == "--member" && g == "--group" => member(id.parse()?, name),
        _ => Err("usage: counter [--member ID --group NAME]".into()),
    }
}

/// Start three members, kill the first (the sequencer) with SIGKILL once it has applied a
/// few increments, and check that the survivors agree.
fn run_all() -> Result<(), Box<dyn std::error::Error>> {
    let exe = std::env::current_exe()?;
    let group = format!("counter-{}", std::process::id());
    let mut children = Vec::new();
    let mut outputs = Vec::new();
    for id in 1..=3u32 {
        let mut child = Command::new(&exe)
            .args(["--member", &id.to_string(), "--group", &group])
            .stdout(Stdio::piped())
            .spawn()?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        // Each member says when it is in the group, so the next one joins an existing group.
        let first = lines.next().transpose()?.unwrap_or_default();
        println!("member {id}: {first}");
        children.push(child);
        outputs.push(lines);
    }
    // Let the increments flow, then crash the sequencer.
    std::thread::sleep(Duration::from_millis(700));
    children[0].kill()?;
    children[0].wait()?;
    println!("member 1 (the sequencer) killed with SIGKILL");
    let mut finals = Vec::new();
    for (i, (mut child, lines)) in children.into_iter().zip(outputs).enumerate().skip(1) {
        let mut last = String::new();
        for line in lines {
            let line = line?;
            println!("member {}: {line}", i + 1);
            last = line;
        }
        let status = child.wait()?;
        if !status.success() {
            return Err(format!("member {} failed: {status}", i + 1).into());
        }
        finals.push(last);
    }
    if finals.windows(2).all(|w| w[0] == w[1]) {
        println!("survivors agree: {}", finals[0]);
        Ok(())
    } else {
        Err(format!("survivors disagree: {finals:?}").into())
    }
}

/// One member: send `INCREMENTS` increments, apply every delivered one, and stop once every
/// member of the current view said it is done.
fn member(id: u32, group: &str) -> Result<(), Box<dyn std::error::Error>> {
    let node = Node::new(NodeConfig::default().id(NodeId(id)))?;
    let cfg = GroupConfig::new(group)
        .mode(if id == 1 {
            OpenMode::Create
        } else {
            OpenMode::Join
        })
        .engine(EngineChoice::sequencer(1));
    let mut g = node.open_group(cfg)?;
    println!("in the group");
    // Wait for all three.
    let mut view: Vec<NodeId> = Vec::new();
    while view.len() < 3 {
        if let GroupEvent::View(v) = g.recv_timeout(Duration::from_secs(10))? {
            view = v.members;
        }
    }
    let sender = g.sender();
    std::thread::spawn(move || {
        for _ in 0..INCREMENTS {
            send_retrying(&sender, b"+1");
            std::thread::sleep(PACE);
        }
        send_retrying(&sender, b"done");
    });
    let mut counter = 0u64;
    let mut done: HashSet<NodeId> = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !view.iter().all(|m| done.contains(m)) {
        if Instant::now() > deadline {
            return Err("no end in 30 s".into());
        }
        match g.recv_timeout(Duration::from_millis(100)) {
            Ok(GroupEvent::Deliver(d)) if &d.payload[..] == b"+1" => counter += 1,
            Ok(GroupEvent::Deliver(d)) if &d.payload[..] == b"done" => {
                done.insert(d.sender);
            }
            Ok(GroupEvent::View(v)) => {
                println!("view {}: members {:?}", v.id, ids(&v.members));
                view = v.members;
            }
            Ok(GroupEvent::Recovery(rmcast::Recovery::Reset { incarnation, .. })) => {
                println!("group rebuilt (incarnation {incarnation})")
            }
            Ok(_) | Err(rmcast::Error::Timeout | rmcast::Error::MemberFailed { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    g.leave()?;
    println!("counter {counter}");
    Ok(())
}

/// Send, retrying while the group is being rebuilt (sends are refused in recovery mode).
fn send_retrying(sender: &rmcast::GroupSender, payload: &'static [u8]) {
    loop {
        match sender.send(payload) {
            Ok(_) => return,
            Err(rmcast::Error::MemberFailed { .. }) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(_) => return,
        }
    }
}

fn ids(m: &[NodeId]) -> Vec<u32> {
    m.iter().map(|n| n.0).collect()
}
