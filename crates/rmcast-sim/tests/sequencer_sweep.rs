//! The sequencer engine under the simulator: seed sweeps with loss, duplication, reordering,
//! partitions that heal, pauses, and joins and leaves interleaved with traffic; every checker
//! must pass on every seed. A failure prints the failing seeds, what the checkers said and the
//! `rmcast sim ... --seed N` command that replays each.
//!
//! Plus the paper's message counts (the Amoeba paper, section 5.1): with one broadcast in flight, a
//! message from a member that is not the sequencer costs 2 datagrams with r = 0 (request to the
//! sequencer, ordered multicast) and 3 + r with r > 0 (request, ordered multicast, r
//! acknowledgements, accept multicast).

use rmcast_proto::NodeId;
use rmcast_sim::{ChurnKind, EngineChoice, Scenario, SweepReport};

const SEEDS: u64 = 200;

fn total(rep: &SweepReport, f: fn(&rmcast_sim::Figures) -> u64) -> u64 {
    rep.runs.iter().map(|r| f(&r.figures)).sum()
}

/// The configuration the brief singles out: 16 members, 10% loss, 5% duplication, 2 ms of
/// jitter, two joins and two leaves during traffic, a partition and a pause, three senders.
#[test]
fn sixteen_members_with_loss_duplication_reordering_churn_partition_and_pause() {
    let sc = Scenario {
        members: 16,
        loss: 0.1,
        dup: 0.05,
        reorder_ms: 2.0,
        churn: 2,
        partitions: 1,
        pauses: 1,
        senders: 3,
        in_flight: 4,
        messages: 60,
        ..Scenario::default()
    };
    let rep = sc.sweep_expect_pass(SEEDS);
    // The faults were there.
    assert!(total(&rep, |f| f.drops_loss) > 0);
    assert!(total(&rep, |f| f.duplicated) > 0);
    assert!(total(&rep, |f| f.drops_partition) > 0);
    assert!(total(&rep, |f| f.nacks) > 0);
    assert!(rep.runs.iter().all(|r| r.figures.messages == 180));
}

/// r = 2 with long pauses and an 8-datagram receive buffer, so that paused members lose what
/// overflows and must repair it; two partitions.
#[test]
fn resilient_group_with_overflowing_pauses_and_two_partitions() {
    let sc = Scenario {
        engine: EngineChoice::sequencer(2),
        members: 8,
        loss: 0.05,
        dup: 0.02,
        reorder_ms: 1.0,
        churn: 2,
        partitions: 2,
        pauses: 2,
        pause_ms: 300,
        rx_buffer: 8,
        senders: 2,
        messages: 60,
        ..Scenario::default()
    };
    let rep = sc.sweep_expect_pass(SEEDS);
    assert!(total(&rep, |f| f.drops_pause_overflow) > 0);
}

/// Open loop at 400 messages/s per sender over 2 Mbit/s uplinks (drop-tail queues), r = 1.
#[test]
fn open_loop_over_narrow_links_with_r1() {
    let sc = Scenario {
        engine: EngineChoice::sequencer(1),
        members: 6,
        loss: 0.02,
        reorder_ms: 0.5,
        bandwidth_mbps: Some(2.0),
        rate: Some(400.0),
        message_bytes: 256,
        churn: 1,
        partitions: 1,
        pauses: 1,
        senders: 3,
        messages: 60,
        ..Scenario::default()
    };
    sc.sweep_expect_pass(SEEDS);
}

/// Four members of which three leave while traffic flows (host 0, the sequencer, among them, so
/// its role is handed over), three join.
#[test]
fn small_group_where_the_sequencer_leaves() {
    let sc = Scenario {
        engine: EngineChoice::sequencer(1),
        members: 4,
        loss: 0.05,
        dup: 0.05,
        reorder_ms: 1.0,
        churn: 3,
        senders: 1,
        in_flight: 2,
        messages: 60,
        ..Scenario::default()
    };
    // Every seed hands the sequencer role over: the non-senders (host 0 included) all leave.
    let cfg = sc.config(0);
    assert!(cfg
        .churn
        .iter()
        .any(|c| c.kind == ChurnKind::Leave && c.node == NodeId(0)));
    sc.sweep_expect_pass(SEEDS);
}

/// r = 3 with every member sending (the sequencer too), 12 members, heavy loss.
#[test]
fn every_member_sends_with_r3() {
    let sc = Scenario {
        engine: EngineChoice::sequencer(3),
        members: 12,
        loss: 0.1,
        dup: 0.05,
        reorder_ms: 2.0,
        churn: 2,
        partitions: 1,
        pauses: 1,
        senders: 12,
        in_flight: 2,
        messages: 10,
        ..Scenario::default()
    };
    sc.sweep_expect_pass(SEEDS);
}

/// Large messages: every member multicasts 3000-byte messages (three fragments each, BB
/// method) while members join and leave, so joins must fall between messages and fragments lost
/// at some members must be fetched again; 10% loss and duplication, 5 ms of jitter.
#[test]
fn large_fragmented_messages_from_every_member_with_churn() {
    let sc = Scenario {
        members: 16,
        loss: 0.1,
        dup: 0.1,
        reorder_ms: 5.0,
        churn: 3,
        partitions: 1,
        pauses: 2,
        senders: 16,
        in_flight: 4,
        messages: 20,
        message_bytes: 3000,
        ..Scenario::default()
    };
    let rep = sc.sweep_expect_pass(SEEDS);
    assert!(total(&rep, |f| f.nacks) > 0);
}

#[test]
fn a_seed_replays_bit_for_bit() {
    let sc = Scenario {
        members: 8,
        loss: 0.1,
        dup: 0.05,
        reorder_ms: 2.0,
        churn: 2,
        partitions: 1,
        pauses: 1,
        senders: 3,
        messages: 50,
        ..Scenario::default()
    };
    let a = sc.run(11);
    let b = sc.run(11);
    assert_eq!(a.record, b.record);
    assert_ne!(a.record.hosts, sc.run(12).record.hosts);
}

/// Tolerance on the paper's counts. 200 broadcasts, one in flight, on 1 ms links, so a
/// broadcast takes 2 ms (r = 0) to 2 + 2r ms and no timer of the engine fires during the
/// traffic: state reports come every `state_interval_msgs` = 1024 deliveries, a sync only after
/// `sync_interval_ms` = 100 ms of quiet, and the sender's retransmission timer only without
/// progress. The count is then exact; 0.05 per broadcast (10 datagrams over the run) allows for
/// one sync round with its 4 state replies, and still tells 2 from 3 and 3 + r from 4 + r.
const COUNT_TOLERANCE: f64 = 0.05;

#[test]
fn message_counts_match_the_paper() {
    for r in 0..=3u8 {
        let sc = Scenario::message_count(r, 1);
        let rep = sc.run(0);
        assert!(rep.passed(), "r = {r}: {}", rep.summary());
        let expected = if r == 0 { 2.0 } else { 3.0 + r as f64 };
        let got = rep.figures.datagrams_per_broadcast;
        assert!(
            (got - expected).abs() <= COUNT_TOLERANCE,
            "r = {r}: {got:.3} datagrams per broadcast, expected {expected} (replay: {})",
            sc.replay_command(0)
        );
        // Under load the sender bundles requests and the sequencer bundles ordered entries and
        // acceptances: well under one datagram per broadcast for every r.
        let loaded = Scenario::message_count(r, 64).run(0);
        assert!(loaded.passed(), "r = {r} under load: {}", loaded.summary());
        assert!(
            loaded.figures.datagrams_per_broadcast < 1.0,
            "r = {r} under load: {:.3}",
            loaded.figures.datagrams_per_broadcast
        );
    }
}
