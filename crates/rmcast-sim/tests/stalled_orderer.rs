//! A member that orders for its group (the Sequencer's sequencer, the Ring's token site) stops
//! for 2 s (a SIGSTOP, a VM pause) while every member keeps sending: the others find it failed
//! and go on without it, and its receive buffer fills with their requests and data. On waking
//! it must not order those in the view the others left: it would deliver them here under
//! sequence numbers that the new group gives to other messages. It notices its own stall
//! (`FailureDetector::run`), fences its order and asks the group (`Fence`), and learns it was
//! expelled instead.
//!
//! The runtime reads its unicast socket before its multicast one, and a real socket drops what
//! overflows it ([`PauseRead::UnicastFirst`], a buffer of 64 datagrams per socket); a process
//! stopped in the middle of its I/O loop's turn once read the whole backlog with the clock of
//! before the stop ([`rmcast_sim::Faults::pause_stale_clock`]): the gauntlet's one failed
//! `stop-10s` run of the Ring, reproduced here on every seed before the Ring took two of a
//! peer's failure-detector probes read at one instant for a sign that it stood still.
//!
//! Checked with total order over every host, the expelled one included
//! (`checkers::uniform_total_order`), at the levels that deliver as soon as a message is ordered
//! (the Sequencer with r = 0, the Ring's totally ordered level: the command line's defaults),
//! beside every checker the engine's declaration calls for. Every seed must expel the stalled
//! member, or it proves nothing.

use rmcast_proto::{NodeId, Qos};
use rmcast_sim::{checkers, run, EngineChoice, Pause, PauseRead, Scenario};
use std::time::Duration;

fn stall_the_orderer(engine: EngineChoice, qos: Qos, seeds: u64) {
    let sc = Scenario {
        engine,
        members: 3,
        senders: 3,
        messages: 150,
        rate: Some(50.0),
        loss: 0.02,
        reorder_ms: 1.0,
        qos: Some(qos),
        ..Scenario::default()
    };
    let mut failed = Vec::new();
    for seed in 0..seeds {
        let mut cfg = sc.config(seed);
        let start = cfg.workload.start;
        // Host 0 creates the group: the Sequencer's sequencer, and a Ring's token site about
        // one ACK in three.
        cfg.faults.pauses.push(Pause {
            host: NodeId(0),
            at: start + Duration::from_millis(300 + seed * 7),
            duration: Duration::from_secs(2),
        });
        cfg.faults.pause_buffer_datagrams = 4096;
        let rep = run(&cfg);
        check(seed, &rep, &mut failed);
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Every seed must expel the stalled host 0; every checker, and total order over every host.
fn check(seed: u64, rep: &rmcast_sim::Report, failed: &mut Vec<String>) {
    assert!(
        rep.record.failed_hosts().contains(&NodeId(0)),
        "seed {seed}: the stalled member was not left out, so the run proves nothing"
    );
    let mut verdicts: Vec<_> = rep.verdicts.clone().into_iter().collect();
    verdicts.push((
        "uniform_total_order",
        checkers::uniform_total_order(&rep.record),
    ));
    for (name, v) in verdicts {
        if let Err(violations) = v {
            failed.push(format!("seed {seed}: {name}: {violations:?}"));
        }
    }
}

/// The gauntlet's `stop-10s` on the Ring: three members, one sender writing 20 lines a second,
/// the creator (host 0, the token site or next to it) stopped for 10 s and woken with its
/// socket read as the runtime reads it, unicast first from bounded buffers, and (`stale_clock`)
/// at the time of the stop.
fn stop_a_token_site_for_10_s(stale_clock: bool, seeds: u64) {
    let sc = Scenario {
        engine: EngineChoice::named("ring").expect("registered"),
        members: 3,
        senders: 1,
        messages: 20 * 16,
        rate: Some(20.0),
        latency_ms: 0.1,
        reorder_ms: 0.05,
        qos: Some(Qos::TotallyOrdered),
        ..Scenario::default()
    };
    let mut failed = Vec::new();
    let mut overflow = 0;
    for seed in 0..seeds {
        let mut cfg = sc.config(seed);
        let start = cfg.workload.start;
        cfg.faults.pauses.push(Pause {
            host: NodeId(0),
            at: start + Duration::from_millis(300 + (seed * 37) % 1000),
            duration: Duration::from_secs(10),
        });
        cfg.faults.pause_buffer_datagrams = 64;
        cfg.faults.pause_read = PauseRead::UnicastFirst;
        cfg.faults.pause_stale_clock = stale_clock;
        let rep = run(&cfg);
        overflow += rep.record.net.drops_pause_overflow;
        check(seed, &rep, &mut failed);
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    // 10 s of a sender's data and the ring's ACKs do not fit in 64 datagrams.
    assert!(
        overflow > 0,
        "no receive buffer overflowed: the shape is not the gauntlet's"
    );
}

#[test]
fn a_token_site_stopped_for_10_s_reads_its_sockets_as_the_runtime_does() {
    stop_a_token_site_for_10_s(false, 60);
}

/// Without the Ring's rule that two of a peer's failure-detector probes read at one instant
/// mean it stood still,
/// every seed failed: the token site ordered the sender's messages in its old view at the
/// sequence numbers of the others' New List and after.
#[test]
fn a_token_site_woken_with_the_clock_of_its_stop_orders_nothing_in_its_old_view() {
    stop_a_token_site_for_10_s(true, 60);
}

#[test]
fn a_stalled_sequencer_orders_nothing_in_a_view_the_group_left() {
    stall_the_orderer(EngineChoice::sequencer(0), Qos::TotallyOrdered, 40);
}

#[test]
fn a_stalled_token_site_orders_nothing_in_a_ring_that_went_on() {
    stall_the_orderer(
        EngineChoice::named("ring").expect("registered"),
        Qos::TotallyOrdered,
        40,
    );
}
