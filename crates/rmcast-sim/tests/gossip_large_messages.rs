//! Messages larger than a datagram through the gossip engine: the simulator's datagrams are
//! 1,472 bytes and the messages 10,000 (8 fragments each), under 10% loss, duplication,
//! reordering, a pause and a joiner. Integrity checks every delivered message against what was
//! sent (its length and hash: it arrived whole), loss reported holds each member to deliver or
//! report each message, FIFO its order.

use rmcast_proto::{EngineChoice, Event};
use rmcast_sim::Scenario;

#[test]
fn ten_kilobyte_messages_arrive_whole_or_are_reported_lost() {
    let sc = Scenario {
        engine: EngineChoice::named("gossip").expect("gossip is registered"),
        members: 5,
        loss: 0.1,
        dup: 0.05,
        reorder_ms: 2.0,
        churn: 1,
        pauses: 1,
        senders: 2,
        in_flight: 2,
        messages: 10,
        message_bytes: 10_000,
        ..Scenario::default()
    };
    sc.sweep_expect_pass(50);
    // Gossip repaired the lost fragments: nearly every message arrived whole everywhere.
    let (mut delivered, mut lost) = (0u64, 0u64);
    for seed in 0..10 {
        let rec = rmcast_sim::simulate(&sc.config(seed));
        for h in rec.members_at_end() {
            for e in &h.events {
                match &e.event {
                    Event::Deliver(d) => {
                        assert_eq!(d.payload.len, 10_000);
                        delivered += 1;
                    }
                    Event::Loss(l) => lost += l.count,
                    _ => {}
                }
            }
        }
    }
    println!("10 seeds: {delivered} delivered, {lost} reported lost");
    assert!(
        delivered > 0 && lost * 100 <= delivered,
        "{delivered} delivered, {lost} lost"
    );
}
