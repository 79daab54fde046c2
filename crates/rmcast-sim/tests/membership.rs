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
    sc.validate().expect("valid scenario");
    for seed in 0..3 {
        let rep = sc.run(seed);
        assert!(
            rep.passed(),
            "{}\n{}",
            rep.summary(),
            sc.replay_command(seed)
        );
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
