//! A small version of `rmcast sim --experiment rmp`: the shape of Figures 5.1 and 5.2 of "RMP:
//! Fault-Tolerant Group Communication" (Whetten, Montgomery, Kaplan) on one shared 10 Mbit/s
//! medium. With multicast, one sender's throughput stays about the same as the group grows
//! (so the aggregate grows with the members and passes the medium's bandwidth, which no
//! unicast-based protocol can), where a protocol sending one unicast per destination falls as
//! 1/N.

use rmcast_sim::experiment::{Point, Setup};

/// Enough messages to be past the first window (the numbers hold from about 300 on).
fn setup() -> Setup {
    Setup {
        messages: 400,
        ..Setup::default()
    }
}

fn checked(p: Result<Point, String>) -> Point {
    let p = p.expect("valid setup");
    assert!(
        p.passed && p.complete,
        "{} with {} members: {}",
        p.engine,
        p.members,
        p.summary
    );
    p
}

fn assert_shape(engine: &str) {
    let s = setup();
    // Figure 5.1, one source: 2 and 8 members, the sender a destination too.
    let two = checked(s.aggregate(engine, 2, 1));
    let eight = checked(s.aggregate(engine, 8, 1));
    assert!(
        eight.per_destination_kb_s >= 0.6 * two.per_destination_kb_s,
        "{engine}: single-sender throughput fell from {:.0} KB/s at 2 members to {:.0} at 8",
        two.per_destination_kb_s,
        eight.per_destination_kb_s
    );
    assert!(
        eight.aggregate_kb_s > eight.medium_kb_s,
        "{engine}: aggregate {:.0} KB/s at 8 members, not above the medium's {:.0}",
        eight.aggregate_kb_s,
        eight.medium_kb_s
    );
    // Figure 5.2: the source apart from 1 and from 8 destinations; with 8, above what a
    // unicast protocol could reach with even 2.
    let one = checked(s.separate_source(engine, 1));
    let many = checked(s.separate_source(engine, 8));
    assert!(
        many.per_destination_kb_s >= 0.6 * one.per_destination_kb_s,
        "{engine}: {:.0} KB/s to 1 destination, {:.0} to each of 8",
        one.per_destination_kb_s,
        many.per_destination_kb_s
    );
    assert!(
        many.per_destination_kb_s > many.medium_kb_s / 2.0,
        "{engine}: {:.0} KB/s to each of 8 destinations, under the unicast bound for 2 ({:.0})",
        many.per_destination_kb_s,
        many.medium_kb_s / 2.0
    );
}

#[test]
fn ring_throughput_on_a_shared_medium_has_the_shape_of_the_rmp_paper() {
    assert_shape("ring");
}

#[test]
fn sequencer_throughput_on_a_shared_medium_has_the_same_shape() {
    assert_shape("sequencer");
}

/// Figure 5.3's shape: with one source and one message in flight, the latency of a totally
/// ordered message stays nearly flat as the group grows from 2 to 8 members (one multicast
/// reaches them all; a unicast-based protocol's would grow with N), and the ring's
/// source-ordered messages, which wait for no ACK of the token site, come no later than its
/// totally ordered ones.
#[test]
fn latency_stays_nearly_flat_in_the_members_as_in_figure_5_3() {
    let s = setup();
    for engine in ["ring", "sequencer"] {
        let two = checked(s.latency(engine, 2, 1, None));
        let eight = checked(s.latency(engine, 8, 1, None));
        assert!(two.latency_p50_ms > 0.0, "{engine}: no latency measured");
        assert!(
            eight.latency_p50_ms <= 2.0 * two.latency_p50_ms,
            "{engine}: median latency {:.2} ms at 2 members, {:.2} at 8",
            two.latency_p50_ms,
            eight.latency_p50_ms
        );
    }
    let total = checked(s.latency("ring", 8, 1, None));
    let source = checked(s.latency("ring", 8, 1, Some(rmcast_proto::Qos::SourceOrdered)));
    assert!(
        source.latency_p50_ms <= total.latency_p50_ms,
        "ring at 8 members: source-ordered {:.2} ms, totally ordered {:.2}",
        source.latency_p50_ms,
        total.latency_p50_ms
    );
}
