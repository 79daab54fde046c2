//! The `gossip` engine (Bimodal Multicast, after "Bimodal Multicast" by Birman, Hayden,
//! Özkasap, Xiao, Budiu and Minsky) through the simulator: its declaration (FIFO, probabilistic
//! delivery, no total order, no virtual synchrony, no crash recovery) selects integrity, FIFO,
//! loss reported, liveness and livelock; the sweeps below pass them under loss up to 30%,
//! duplication, reordering, joins and leaves, and pauses, and with crashes (a crashed member
//! leaves the views by the silence timeout). What a member does not deliver it reports lost;
//! the sweeps also count how much that is (bimodal: almost nothing).
//!
//! Longer sweeps: `cargo test -p rmcast-sim --test gossip_sweep -- --ignored`.

use rmcast_proto::{DeliveryPromise, EngineChoice, Event, Order, Qos};
use rmcast_sim::{Scenario, SweepReport};

fn gossip() -> EngineChoice {
    EngineChoice::named("gossip").expect("gossip is registered")
}

fn faulty(members: u32, loss: f64, churn: u32, pauses: u32) -> Scenario {
    Scenario {
        engine: gossip(),
        members,
        loss,
        dup: 0.05,
        reorder_ms: 2.0,
        churn,
        pauses,
        senders: 3,
        in_flight: 4,
        messages: 30,
        ..Scenario::default()
    }
}

/// Seeds `seeds` of `sc`; panics naming the failing seeds and their replay commands.
fn sweep(sc: &Scenario, seeds: u64) -> SweepReport {
    sc.sweep_expect_pass(seeds)
}

#[test]
fn gossip_declares_fifo_probabilistic_delivery() {
    let g = gossip().guarantees();
    assert_eq!(g.order, Order::Fifo);
    assert_eq!(g.delivery, DeliveryPromise::Probabilistic);
    assert!(!g.virtual_synchrony && !g.crash_recovery && g.resilience == 0);
    for q in [Qos::Unreliable, Qos::Reliable, Qos::SourceOrdered] {
        assert!(g.qos.contains(q), "{q}");
    }
    assert!(!g.qos.contains(Qos::TotallyOrdered));
}

/// What a sweep shows beyond its verdicts: messages delivered and reported lost per member
/// that was there, over `seeds` seeds of `sc` (replayed, since summaries keep no record).
fn delivery_tally(sc: &Scenario, seeds: std::ops::Range<u64>) -> (u64, u64) {
    let (mut delivered, mut lost) = (0, 0);
    for seed in seeds {
        let rec = rmcast_sim::simulate(&sc.config(seed));
        for h in rec.members_at_end() {
            for e in &h.events {
                match &e.event {
                    Event::Deliver(_) => delivered += 1,
                    Event::Loss(l) => lost += l.count,
                    _ => {}
                }
            }
        }
    }
    (delivered, lost)
}

#[test]
fn gossip_survives_loss_duplication_reordering_churn_and_pauses() {
    let sc = faulty(6, 0.3, 2, 1);
    let started = std::time::Instant::now();
    let rep = sweep(&sc, 200);
    let secs = started.elapsed().as_secs_f64();
    let sum =
        |f: fn(&rmcast_sim::Figures) -> u64| rep.runs.iter().map(|r| f(&r.figures)).sum::<u64>();
    // The faults were there, and gossip repaired them.
    assert!(sum(|f| f.drops_loss) > 0);
    assert!(sum(|f| f.duplicated) > 0);
    assert!(sum(|f| f.retransmissions) > 0);
    assert!(rep.runs.iter().all(|r| r.figures.messages == 90));
    // The checkers the declaration selects ran; those it does not select did not.
    let g = gossip().guarantees();
    for name in ["integrity", "fifo", "loss_reported", "liveness", "livelock"] {
        assert!(rmcast_sim::checkers::applies(name, &g), "{name}");
        assert!(rep.runs[0].verdicts.contains_key(name), "{name}");
    }
    for name in [
        "agreement",
        "total_order",
        "virtual_synchrony",
        "resilience",
    ] {
        assert!(!rmcast_sim::checkers::applies(name, &g), "{name}");
    }
    let dpm = rep.mean_figures().datagrams_per_broadcast;
    println!("gossip, 30% loss: 200 seeds pass in {secs:.1} s, {dpm:.1} datagrams per message");
    // Members joined and left while traffic flowed.
    let (mut joins, mut leaves) = (0, 0);
    for seed in 0..20 {
        let rec = rmcast_sim::simulate(&sc.config(seed));
        for h in &rec.hosts {
            for e in &h.events {
                match &e.event {
                    Event::View(v) if v.joined == Some(h.id) && h.id.0 >= sc.members => joins += 1,
                    Event::Left => leaves += 1,
                    _ => {}
                }
            }
        }
    }
    println!("20 seeds: {joins} joins, {leaves} leaves");
    assert!(
        joins >= 20 && leaves >= 20,
        "{joins} joins, {leaves} leaves"
    );
    // Bimodal: almost everything is delivered; what is not was reported (loss_reported).
    let (delivered, lost) = delivery_tally(&sc, 0..20);
    println!("20 seeds: {delivered} deliveries, {lost} messages reported lost");
    assert!(
        lost * 100 <= delivered,
        "{lost} lost of {}",
        delivered + lost
    );
}

/// The weaker levels: the run is held to the declaration weakened to the level (reliable: no
/// FIFO; unreliable: best effort, no loss report required).
#[test]
fn every_qos_level_passes_its_checkers() {
    let sc = faulty(5, 0.2, 1, 1);
    for qos in [Qos::Reliable, Qos::Unreliable] {
        let sc = Scenario {
            qos: Some(qos),
            ..sc.clone()
        };
        let rep = sweep(&sc, 50);
        let promised = gossip().guarantees().at_qos(qos);
        assert!(!promised.fifo());
        // Reliable keeps the loss report; unreliable promises nothing beyond integrity.
        let reported = rmcast_sim::checkers::applies("loss_reported", &promised);
        assert_eq!(reported, qos == Qos::Reliable);
        assert_eq!(rep.runs.len(), 50);
        println!("{qos}: 50 seeds pass");
    }
}

/// Crashed members (no crash recovery: nothing is rebuilt) leave every view once the silence
/// timeout passes; liveness holds members to one last view without them. The senders are
/// paced (20 msgs/s each, 1.5 s of sending) so that the crashes, in the first 500 ms, fall
/// while the group gossips: sends complete at once, and unpaced the 90 messages go in the
/// first instant, the group settles and goes idle within a second, and a member that crashes
/// in the last rounds before (after it agreed on the table) is noticed only when the group
/// wakes again (see the engine's "Quiet groups").
#[test]
fn crashed_members_leave_the_view_after_the_silence_timeout() {
    let sc = Scenario {
        crashes: 2,
        rate: Some(20.0),
        ..faulty(8, 0.2, 1, 1)
    };
    let rep = sweep(&sc, 100);
    let suspected: u64 = (0..10)
        .map(|seed| rmcast_sim::simulate(&sc.config(seed)))
        .flat_map(|rec| rec.hosts.into_iter())
        .map(|h| h.counters.failures_detected)
        .sum();
    println!("100 seeds pass; 10 seeds: {suspected} silent members found");
    assert!(suspected >= 10, "{suspected}");
    assert!(rep.runs.iter().all(|r| r.figures.crashes >= 1));
}

/// 1000 seeds, 8 members, more churn and pauses, a short partition (about ten seconds).
#[test]
#[ignore]
fn gossip_long_sweep() {
    let sc = Scenario {
        messages: 40,
        partitions: 1,
        ..faulty(8, 0.3, 3, 2)
    };
    let started = std::time::Instant::now();
    let rep = sweep(&sc, 1000);
    println!(
        "{} seeds passed in {:.1} s",
        rep.runs.len(),
        started.elapsed().as_secs_f64()
    );
}
