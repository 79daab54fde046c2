//! Runs the engine targets' harness on stable, without libFuzzer: every input of a corpus
//! directory against the live group of its engine, with the work each input did (datagrams
//! moved, timer steps) and the time it took. To see where an engine target spends its time:
//! `cargo run --release --example replay -- txn corpus/txn_state`.

#[path = "../fuzz_targets/common/net.rs"]
mod net;

use net::{Input, Net};
use rmcast_proto::registry::Role;
use rmcast_proto::Engine;
use std::time::Instant;

fn replay<E: Engine + Clone>(base: Net<E>, dir: &str) {
    println!(
        "setup: {} datagrams, {} timer steps",
        base.stats.datagrams, base.stats.timer_steps
    );
    let t = Instant::now();
    for _ in 0..1000 {
        std::hint::black_box(base.clone());
    }
    let clone = t.elapsed() / 1000;
    let t = Instant::now();
    for _ in 0..1000 {
        let mut net = base.clone();
        net.run(&mut Input::new(&[]));
    }
    println!(
        "a clone: {clone:?}; a clone and the empty input: {:?}",
        t.elapsed() / 1000
    );
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("a corpus directory")
        .map(|e| e.expect("an entry").path())
        .collect();
    files.sort();
    let (mut dgs, mut steps) = (0, 0);
    let start = Instant::now();
    let mut worst = (0, String::new());
    for f in &files {
        let data = std::fs::read(f).expect("an input");
        let mut net = base.clone();
        let before = net.stats;
        net.run(&mut Input::new(&data));
        let d = net.stats.datagrams - before.datagrams;
        dgs += d;
        steps += net.stats.timer_steps - before.timer_steps;
        if d > worst.0 {
            worst = (d, f.display().to_string());
        }
    }
    let n = files.len().max(1) as u64;
    println!(
        "{} inputs in {:?}: {} datagrams ({} per input, at most {} in {}), {} timer steps",
        files.len(),
        start.elapsed(),
        dgs,
        dgs / n,
        worst.0,
        worst.1,
        steps
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (engine, dir) = (args[1].as_str(), args[2].as_str());
    let three = [Role::Create, Role::Join, Role::Join];
    match engine {
        "sequencer" => replay(Net::new(net::sequencer, &three, 2), dir),
        "ring" => replay(Net::new(net::ring, &three, 2), dir),
        "gossip" => replay(Net::new(net::gossip, &three, 2), dir),
        "tree" => replay(Net::new(net::tree, &three, 2), dir),
        "txn" => replay(Net::new(net::txn, &three, 2), dir),
        other => eprintln!("unknown engine {other}"),
    }
}
