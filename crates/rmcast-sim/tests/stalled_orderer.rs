//! A member that orders for its group (the Sequencer's sequencer, the Ring's token site) stops
//! for 2 s (a SIGSTOP, a VM pause) while every member keeps sending: the others find it failed
//! and go on without it, and its receive buffer fills with their requests and data. On waking
//! it must not order those in the view the others left: it would deliver them here under
//! sequence numbers that the new group gives to other messages. It notices its own stall
//! (`FailureDetector::run`), fences its order and asks the group (`Fence`), and learns it was
//! expelled instead.
//!
//! Checked with total order over every host, the expelled one included
//! (`checkers::uniform_total_order`), at the levels that deliver as soon as a message is ordered
//! (the Sequencer with r = 0, the Ring's totally ordered level: the command line's defaults),
//! beside every checker the engine's declaration calls for. Every seed must expel the stalled
//! member, or it proves nothing.

use rmcast_proto::{NodeId, Qos};
use rmcast_sim::{checkers, run, EngineChoice, Pause, Scenario};
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
        let failed_hosts = rep.record.failed_hosts();
        assert!(
            failed_hosts.contains(&NodeId(0)),
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
    assert!(failed.is_empty(), "{}", failed.join("\n"));
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
