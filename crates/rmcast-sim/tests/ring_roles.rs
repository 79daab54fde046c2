//! Ring debugging replays (ignored): one seed of a ring scenario with every host's events and
//! final state printed.

use rmcast_proto::{EngineChoice, Event, Qos};
use rmcast_sim::Scenario;

fn ring() -> EngineChoice {
    EngineChoice::named("ring").expect("registered")
}

/// `RING_SEED=2 cargo test --release -p rmcast-sim --test ring_roles replay_churn -- --ignored --nocapture`
#[test]
#[ignore]
fn replay_churn() {
    let seed: u64 = std::env::var("RING_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let qos = match std::env::var("RING_QOS").as_deref() {
        Ok("k2") => Qos::KResilient(2),
        Ok("total") => Qos::TotallyResilient,
        _ => Qos::SourceOrdered,
    };
    let sc = Scenario {
        engine: ring(),
        members: 5,
        loss: 0.1,
        dup: 0.05,
        reorder_ms: 2.0,
        senders: 3,
        in_flight: 4,
        messages: 60,
        churn: 2,
        pauses: 1,
        pause_ms: 1500,
        crashes: 1,
        crash_sequencer: true,
        heal: true,
        qos: Some(qos),
        ..Scenario::default()
    };
    let rep = sc.run(seed);
    for h in &rep.record.hosts {
        println!("host {}: {}", h.id, h.final_state);
        println!(
            "  leave asked {:?} crashed {:?} sleeps {:?}",
            h.leave_requested_at, h.crashed_at, h.sleeps
        );
        for e in &h.events {
            if !matches!(e.event, Event::Deliver(_) | Event::SendComplete { .. }) {
                println!("  {:?} {:?}", e.at, e.event);
            }
        }
    }
    println!("{}", rep.summary());
}
