//! The sequencer on the Amoeba paper's machine (a shared 10 Mbit/s Ethernet, 800 µs of
//! processor per received datagram, 32-packet interface buffers, a history of 128) with every
//! member sending large messages: the throughput runs of `rmcast sim --experiment amoeba` that
//! did not complete in 60 s of virtual time before NACKs backed off from the first fruitless one.
//! Each must deliver every message at every member and pass every checker. All of them (about
//! 60 s in release on 2 cores):
//! `cargo test --release -p rmcast-sim --test sequencer_amoeba_throughput -- --ignored --nocapture`.
//!
//! BB 4 KB from 30 members, the last to complete, was the `not_yet_*` test: the members' data
//! and the sequencer's point-to-point repairs of it filled the medium. It completes since the
//! sequencer multicasts a repair that several members lack and answers a repeated BB request
//! it holds with BC_QUEUED (docs/PAPERS.md, "Once not as the paper's"). PB 4 KB from 24 and 30
//! members complete since the sequencer answers a repeated PB request it holds with BC_QUEUED;
//! BB 2 KB from 24 since it holds back what it sent a member for that member's repair round.
//! BB 0 bytes from 30 members stalled with that hold until BC_SYNC rounds that free nothing
//! backed off (a lagging member's NACKs were lost in the sequencer's receive buffer, full of
//! the answers to those rounds).

use rmcast_sim::amoeba::{Method, Setup};

/// Runs the throughput point (every member sending 200 messages of `bytes`) and checks it.
fn throughput_completes(method: Method, members: u32, bytes: usize) {
    let p = Setup::default()
        .throughput(method, members, bytes)
        .expect("a valid point");
    println!(
        "{method} {members} members {bytes} bytes: {:.1} msgs/s, {} retransmissions, {} drops, \
         complete {}, passed {}",
        p.throughput, p.retransmissions, p.rx_drops, p.complete, p.passed
    );
    assert!(
        p.complete && p.passed,
        "{method}, {members} members, {bytes} bytes:\n{}",
        p.summary
    );
}

macro_rules! point {
    ($name:ident, $method:ident, $members:expr, $bytes:expr) => {
        #[test]
        #[ignore]
        fn $name() {
            throughput_completes(Method::$method, $members, $bytes);
        }
    };
}

point!(bb_30_members_0, Bb, 30, 0);
point!(bb_30_members_1k, Bb, 30, 1024);
point!(bb_20_members_2k, Bb, 20, 2048);
point!(bb_20_members_4k, Bb, 20, 4096);
point!(bb_24_members_4k, Bb, 24, 4096);

point!(pb_24_members_4k, Pb, 24, 4096);
point!(pb_30_members_4k, Pb, 30, 4096);
point!(bb_24_members_2k, Bb, 24, 2048);
point!(bb_30_members_4k, Bb, 30, 4096);
