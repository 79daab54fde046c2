//! What the CLI's process tests share.
// Each test binary uses part of this.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::mpsc::{channel, Receiver};

/// The lines of `child`'s piped stdout, read on a thread of their own (so that a child that
/// writes much never blocks on a full pipe while the test waits on something else).
pub fn stdout_lines(child: &mut Child) -> Receiver<String> {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}
pub mod proc;
