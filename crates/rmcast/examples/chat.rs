//! A chat: every line typed goes to the group, every line delivered is printed, in the same
//! order at every member. Run it in two or more terminals:
//!
//! ```sh
//! cargo run --example chat -- --group chat
//! ```
//!
//! End of input (Ctrl-D) leaves the group. With `--once TEXT` it sends one line, prints what
//! it delivers for a moment and leaves (what a fresh clone's first try runs).

use rmcast::{Bytes, GroupConfig, GroupEvent, Node, NodeConfig};
use std::io::BufRead;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut group_name = "chat".to_string();
    let mut once = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--group" => group_name = args.next().ok_or("--group needs a name")?,
            "--once" => once = Some(args.next().ok_or("--once needs a text")?),
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let node = Node::new(NodeConfig::default())?;
    // Join the group, or create it when nobody answers.
    let mut group = node.open_group(GroupConfig::new(&group_name))?;
    eprintln!(
        "member {} in group {group_name:?}; type lines, Ctrl-D to leave",
        node.id()
    );

    let sender = group.sender();
    match once {
        Some(text) => {
            sender.send(text)?;
            // Print what arrives for a moment, then leave.
            while let Ok(ev) = group.recv_timeout(Duration::from_millis(500)) {
                print_event(&ev);
            }
            group.leave()?;
            return Ok(());
        }
        None => {
            // Typing on its own thread, so that deliveries are printed meanwhile.
            std::thread::spawn(move || {
                for line in std::io::stdin().lock().lines().map_while(Result::ok) {
                    if let Err(e) = sender.send(Bytes::from(line)) {
                        eprintln!("not sent: {e}");
                    }
                }
                let _ = sender.leave();
            });
        }
    }
    // `recv` ends (None) once the leave completed.
    while let Some(ev) = group.recv() {
        print_event(&ev);
    }
    Ok(())
}

fn print_event(ev: &GroupEvent) {
    match ev {
        GroupEvent::Deliver(d) => println!("{}: {}", d.sender, String::from_utf8_lossy(&d.payload)),
        GroupEvent::View(v) => println!("* view {}: {} member(s)", v.id, v.members.len()),
        _ => {}
    }
}
