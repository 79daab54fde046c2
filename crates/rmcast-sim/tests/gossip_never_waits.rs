//! The gossip engine's sender never waits for the slowest member ("Bimodal Multicast", Birman,
//! Hayden, Özkasap, Xiao, Budiu and Minsky: buffers are garbage-collected after a number of
//! rounds, not when every member holds a message). A member asleep most of the time, or paused
//! longer than the buffers reach, costs the sender and the healthy members nothing: they keep
//! the offered rate (measured in simulated time), and the slow member reports what it lost
//! (the loss up-call), which the `loss_reported` checker holds it to.

use rmcast_proto::{Event, NodeId, Time};
use rmcast_sim::config::Pause;
use rmcast_sim::stability::{Protocol, Setup};
use std::time::Duration;

fn setup(rate: f64) -> Setup {
    Setup {
        rate,
        seconds: 5.0,
        message_bytes: 1024,
        ..Setup::default()
    }
}

/// 8 members, 2 asleep 100 ms with probability 0.9 every 100 ms, 1 KiB messages at 1,000 and
/// 2,000 msgs/s (the real-process experiment of `docs/PERFORMANCE.md`, in the simulator).
#[test]
fn sleepers_cost_the_sender_and_the_healthy_members_nothing() {
    for rate in [1000.0, 2000.0] {
        let s = setup(rate);
        let pt = s.measure(Protocol::Gossip, 8, 2, 0.9).expect("valid setup");
        let what = format!("{rate} msgs/s: {pt:?}");
        assert!(
            pt.passed && pt.failed_members == 0,
            "{what}\n{}",
            pt.summary
        );
        // The sender was never refused: every message went when it was due.
        assert_eq!(pt.refusals, 0, "{what}");
        assert!(pt.sent_rate >= 0.99 * rate, "{what}");
        // Every 500 ms window at every healthy member at 80% of the rate at least (a message
        // repaired by gossip holds FIFO delivery back for up to a round or so), and nothing
        // lost there.
        assert!(pt.throughput_min >= 0.8 * rate, "{what}");
        assert!((pt.throughput_mean - rate).abs() <= 0.02 * rate, "{what}");
        assert_eq!(pt.lost_unperturbed, 0, "{what}");
        // The sleepers did sleep, and fell behind further than the buffers reach: they
        // report losses (the checkers passed: whatever they lack is reported).
        assert!(pt.asleep > 0.75, "{what}");
        assert!(pt.lost_perturbed > 0, "{what}");
    }
}

/// One member paused 4 s (the buffers keep 3 s of messages, 30 rounds of 100 ms; the silence
/// timeout is 5 s, so it stays in the view) while the sender sends 1 KiB messages at
/// 2,000 msgs/s for 8 s.
#[test]
fn a_paused_member_reports_what_it_lost_and_the_others_keep_the_rate() {
    let s = Setup {
        seconds: 8.0,
        ..setup(2000.0)
    };
    let mut cfg = s.config(s.engine(Protocol::Gossip), 6, 1, 0.0);
    cfg.faults.perturbations.clear();
    let paused = NodeId(2);
    let start = cfg.workload.start;
    let pause_at = start + Duration::from_secs(1);
    cfg.faults.pauses.push(Pause {
        host: paused,
        at: pause_at,
        duration: Duration::from_secs(4),
    });
    let report = rmcast_sim::run(&cfg);
    assert!(report.passed(), "{}", report.summary());
    let rec = &report.record;
    let sender = NodeId(1);
    let total = cfg.workload.messages_per_sender;
    assert_eq!(rec.net.submit_would_block, 0, "the sender was refused");
    // Submitted on schedule: the last one within a millisecond of when it was due.
    let last = rec.submissions.iter().map(|s| s.at).max().expect("sent");
    let due = start + s.interval() * (total as u32 - 1);
    assert!(
        last <= due + Duration::from_millis(1),
        "last sent at {last:?}, due {due:?}"
    );
    let window = |t: Time| (t.saturating_since(start).as_millis() / 500) as usize;
    for h in rec.hosts.iter().filter(|h| h.id != sender) {
        let delivered = h.deliveries().filter(|(_, d)| d.sender == sender).count() as u64;
        let lost: u64 = (h.events.iter())
            .filter_map(|e| match &e.event {
                Event::Loss(l) if l.sender == sender => Some(l.count),
                _ => None,
            })
            .sum();
        if h.id == paused {
            // Four seconds of messages (8,000), of which the others keep the last 3 s when it
            // wakes: the first second's lost (about 2,000), each reported; it delivers every
            // other message.
            assert!((1500..=2500).contains(&lost), "paused member lost {lost}");
            assert_eq!(delivered + lost, total, "paused member");
            continue;
        }
        assert_eq!((delivered, lost), (total, 0), "member {}", h.id);
        // Delivered at 80% of the rate at least in each 500 ms of sending, the pause's
        // included (as many as were sent, 1,000, in most).
        let mut per_window = vec![0u64; 16];
        for (at, d) in h.deliveries() {
            if d.sender == sender && window(at) < 16 {
                per_window[window(at)] += 1;
            }
        }
        for (k, n) in per_window.iter().enumerate() {
            assert!(*n >= 800, "member {} window {k}: {per_window:?}", h.id);
        }
    }
}
