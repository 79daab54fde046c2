//! Messages larger than a datagram through the `ring` engine: the simulator's datagrams are
//! 1,472 bytes and the messages 10,000 (7 fragments each, each ordered by the token site as a
//! packet of its own), under 10% loss, duplication, reordering, a pause and a member crash (the
//! ring reforms without it). Every checker the ring declares must pass: total order and
//! agreement on whole messages, and integrity, which compares each delivered message with
//! what was sent (its length and hash: it arrived whole).

use rmcast_proto::{EngineChoice, Event, Qos};
use rmcast_sim::Scenario;

fn scenario(qos: Qos) -> Scenario {
    Scenario {
        engine: EngineChoice::named("ring").expect("ring is registered"),
        members: 5,
        loss: 0.1,
        dup: 0.05,
        reorder_ms: 2.0,
        pauses: 1,
        crashes: 1,
        senders: 2,
        in_flight: 2,
        messages: 10,
        message_bytes: 10_000,
        qos: Some(qos),
        ..Scenario::default()
    }
}

#[test]
fn ten_kilobyte_messages_arrive_whole_in_one_order_across_loss_a_pause_and_a_crash() {
    let sc = scenario(Qos::TotallyOrdered);
    sc.sweep_expect_pass(50);
    // Every message a survivor delivered is whole, and the survivors delivered them all.
    let mut delivered = 0u64;
    for seed in 0..10 {
        let rec = rmcast_sim::simulate(&sc.config(seed));
        for h in rec.members_at_end() {
            for e in &h.events {
                if let Event::Deliver(d) = &e.event {
                    assert_eq!(d.payload.len, 10_000, "seed {seed}");
                    delivered += 1;
                }
            }
        }
    }
    println!("10 seeds: {delivered} whole messages delivered by the members at the end");
    assert!(delivered > 0);
}

/// The other levels (a fragment goes at its message's level): each passes the checkers it
/// declares, over fewer seeds.
#[test]
fn ten_kilobyte_messages_at_every_other_level() {
    for qos in Qos::levels(1) {
        if qos == Qos::TotallyOrdered {
            continue;
        }
        let mut sc = scenario(qos);
        if qos == Qos::Unreliable {
            // A best-effort run ends once the network is quiet: traffic that lasts past the
            // crash keeps the ring busy, so that the crash is found within the run.
            sc.rate = Some(40.0);
            sc.messages = 100;
        }
        sc.sweep_expect_pass(10);
    }
}
