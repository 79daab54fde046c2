//! Membership under loss and partitions (the sequencer engine): no false suspicion of live
//! members at loss rates the group otherwise survives.
//!
//! A failure prints the failing seed and the `rmcast sim ... --seed N` command that replays it.

use rmcast_proto::{Event, Recovery};
use rmcast_sim::{EngineChoice, Report, Scenario};

/// Failures (recovery mode entered) recorded anywhere in the run, with who and when.
fn suspicions(rep: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for h in &rep.record.hosts {
        for e in &h.events {
            if let Event::Recovery(Recovery::Failed { suspect }) = &e.event {
                out.push(format!("host {} suspected {suspect} at {:?}", h.id, e.at));
            }
        }
    }
    out
}

/// An idle group of 3 at 20% loss on every datagram: one message every 200 s of virtual time,
/// so the members stay silent but for the failure detector's probes for ten minutes. Nobody
/// may be suspected: the detector learns the probe loss and asks for more unanswered probes.
#[test]
fn idle_group_at_20_percent_loss_suspects_nobody() {
    let sc = Scenario {
        engine: EngineChoice::sequencer(0),
        members: 3,
        senders: 1,
        messages: 4,
        rate: Some(1.0 / 200.0),
        loss: 0.2,
        ..Scenario::default()
    };
    for seed in 0..3 {
        let rep = sc.run_expect_pass(seed);
        assert!(
            rep.record
                .end_time
                .saturating_since(rep.record.workload_start)
                .as_secs()
                >= 600,
            "the run must last ten minutes of virtual time"
        );
        let s = suspicions(&rep);
        assert!(
            s.is_empty(),
            "seed {seed}: {s:#?}\n{}",
            sc.replay_command(seed)
        );
    }
}

/// Five members, two partitions of up to 3 s (long enough for the majority side to find the
/// others failed and reset without them), and a pause, with self-healing on: every expelled
/// member joins again, so each run ends with all five in one view, every completed send
/// delivered by everyone there (the checkers), and at least one run across the seeds did expel
/// somebody (so the healing path was taken).
fn healing_scenario() -> Scenario {
    Scenario {
        engine: EngineChoice::sequencer(0),
        members: 5,
        senders: 2,
        messages: 120,
        rate: Some(40.0),
        loss: 0.01,
        reorder_ms: 2.0,
        partitions: 2,
        partition_ms: 3000,
        pauses: 1,
        pause_ms: 400,
        fault_window_ms: 2500,
        heal: true,
        ..Scenario::default()
    }
}

fn check_healing(seeds: u64) {
    let sc = healing_scenario();
    let rep = sc.sweep_expect_pass(seeds);
    let expelled: u64 = rep.runs.iter().map(|r| r.figures.expelled).sum();
    assert!(
        expelled > 0,
        "no member was expelled in {seeds} seeds: the scenario does not exercise healing"
    );
}

#[test]
fn partitions_heal_into_one_group() {
    check_healing(60);
}

/// The same as a long sweep (run with `--ignored`).
#[test]
#[ignore]
fn partitions_heal_into_one_group_1000_seeds() {
    check_healing(1000);
}

/// One run in detail: a member expelled on the minority side comes back, and the run ends with
/// all five hosts' current incarnations in one view of five.
#[test]
fn an_expelled_member_is_back_in_the_final_view() {
    let sc = healing_scenario();
    let seed = (0..60)
        .find(|s| sc.run(*s).record.hosts.iter().any(|h| h.expelled()))
        .expect("some seed expels a member");
    let rep = sc.run_expect_pass(seed);
    let rec = &rep.record;
    // Host i's current record is rec.hosts[i]; earlier incarnations follow.
    let current = &rec.hosts[..sc.members as usize];
    let back: Vec<_> = rec.hosts[sc.members as usize..]
        .iter()
        .filter(|h| h.expelled())
        .map(|h| h.id)
        .collect();
    assert!(!back.is_empty(), "seed {seed}: no earlier incarnation kept");
    for h in current {
        assert!(!h.expelled(), "seed {seed}: host {} ends expelled", h.id);
        let v = h.last_view().expect("every host ends in a view");
        assert_eq!(
            v.members.len(),
            sc.members as usize,
            "seed {seed}: host {} ends in view {} of {:?}",
            h.id,
            v.id,
            v.members
        );
    }
}
