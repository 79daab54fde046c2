//! A small version of `rmcast sim --experiment pbcast`: the shape of Figures 2 to 4 of
//! "Throughput Stability of Reliable Multicast Protocols" (Öznur Özkasap and Kenneth P. Birman).
//! One sender at 200 messages a second, groups of 8 and 16 with a quarter of the members
//! perturbed (asleep 100 ms with probability p every 100 ms), 5 s of sending, 1% loss per
//! datagram copy: Pbcast (the gossip engine) keeps the sending rate at the unperturbed members
//! whatever p, while the virtually synchronous baseline (the sequencer engine) falls once the
//! sleepers hold back its flow control, its history buffer.
//!
//! What the paper shows at p = 0.5 does not hold here, and is not asserted: the sequencer with
//! the Amoeba paper's 128-message history keeps the rate at p = 0.5 (n = 16, f = 4: 189.8 to
//! 200 msgs/s over seeds 0 to 7 of this setup, 195 to 200 with 10 s runs). A sleep of 100 ms
//! holds back 20 of its 128 slots; the history fills only when a sleeper stays asleep for
//! about 640 ms in a row (128 messages at 200 msgs/s), which at p = 0.5 is rare and at p = 0.9
//! is the rule. The engine's default history (4096 messages, 20 s of this stream) never fills
//! at all. docs/PERFORMANCE.md has the figures.

use rmcast_sim::stability::{default_history, quarter, Point, Protocol, Setup, AMOEBA_HISTORY};

/// 5 s of sending (10 windows of 500 ms), the experiment's other defaults.
fn setup() -> Setup {
    Setup {
        seconds: 5.0,
        ..Setup::default()
    }
}

fn measure(protocol: Protocol, members: u32, p: f64) -> Point {
    let s = setup();
    let pt = s
        .measure(protocol, members, quarter(members), p)
        .expect("valid setup");
    assert!(
        pt.passed && pt.failed_members == 0,
        "{protocol} with {members} members at p = {p}: {} failed\n{}",
        pt.failed_members,
        pt.summary
    );
    // The perturbed members did sleep about p of the time.
    assert!(
        (pt.asleep - p).abs() < 0.15,
        "{protocol}, {members} members, p = {p}: asleep {:.2} of the time",
        pt.asleep
    );
    pt
}

#[test]
fn gossip_keeps_the_sending_rate_at_the_unperturbed_members() {
    let rate = setup().rate;
    for members in [8, 16] {
        for p in [0.1, 0.5, 0.9] {
            let pt = measure(Protocol::Gossip, members, p);
            assert!(
                (pt.throughput_mean - rate).abs() <= 0.1 * rate,
                "gossip, {members} members, p = {p}: {:.1} msgs/s",
                pt.throughput_mean
            );
            // "During these runs no message loss at all was observed at unperturbed members."
            assert_eq!(pt.lost_unperturbed, 0, "gossip, {members} members, p = {p}");
            // Retransmissions at an unperturbed member stay under the paper's 2p, on average.
            assert!(
                pt.retrans_pct_mean <= pt.retrans_bound_pct(),
                "gossip, {members} members, p = {p}: {:.1}% retransmitted",
                pt.retrans_pct_mean
            );
        }
    }
}

#[test]
fn the_sequencer_falls_once_the_sleepers_fill_its_history() {
    let rate = setup().rate;
    let amoeba = Protocol::Sequencer {
        history: AMOEBA_HISTORY,
    };
    // Rarely asleep: the flow control never holds the sender back.
    let calm = measure(amoeba, 16, 0.1);
    assert!(
        calm.throughput_mean >= 0.95 * rate,
        "sequencer/128 at p = 0.1: {:.1} msgs/s",
        calm.throughput_mean
    );
    // Mostly asleep: once the history is full, the stream waits until each of the four
    // sleepers has woken once, and the unperturbed members get a fraction of the rate
    // (76 msgs/s in seed 0; 25 to 102 over seeds 0 to 7), where gossip keeps it.
    let perturbed = measure(amoeba, 16, 0.9);
    assert!(
        perturbed.throughput_mean < 0.6 * rate,
        "sequencer/128 at p = 0.9: {:.1} msgs/s",
        perturbed.throughput_mean
    );
    assert!(perturbed.throughput_min < 0.1 * rate, "whole windows stall");
    // The engine's default history holds 20 s of this stream: no sleep fills it.
    let default = measure(
        Protocol::Sequencer {
            history: default_history(),
        },
        16,
        0.9,
    );
    assert!(
        default.throughput_mean >= 0.95 * rate,
        "sequencer/{} at p = 0.9: {:.1} msgs/s",
        default_history(),
        default.throughput_mean
    );
}
