//! The engine contract proven by a second engine: the `toy` test engine (unordered reliable
//! multicast with NACKs, FIFO per sender) runs through the same registry, simulator and
//! checkers as the sequencer. Its declaration (FIFO, all-or-nothing, no total order, no
//! virtual synchrony) decides which checkers apply: the sweeps pass integrity, agreement, FIFO
//! and liveness under loss, duplication, reordering, a partition and a pause, and the checkers
//! that do not apply are not run against it.

use rmcast_proto::{EngineChoice, Order};
use rmcast_sim::Scenario;

const SEEDS: u64 = 150;

fn toy() -> EngineChoice {
    EngineChoice::named("toy").expect("the testing feature registers the toy engine")
}

#[test]
fn toy_declares_fifo_not_total_order() {
    let g = toy().guarantees();
    assert_eq!(g.order, Order::Fifo);
    assert!(!g.virtual_synchrony && g.all_or_nothing());
}

#[test]
fn toy_survives_loss_duplication_reordering_partition_and_pause() {
    let sc = Scenario {
        engine: toy(),
        members: 6,
        loss: 0.1,
        dup: 0.05,
        reorder_ms: 2.0,
        partitions: 1,
        pauses: 1,
        senders: 3,
        in_flight: 4,
        messages: 60,
        ..Scenario::default()
    };
    let rep = sc.sweep_expect_pass(SEEDS);
    let sum =
        |f: fn(&rmcast_sim::Figures) -> u64| rep.runs.iter().map(|r| f(&r.figures)).sum::<u64>();
    // The faults were there, and NACKs repaired them.
    assert!(sum(|f| f.drops_loss) > 0);
    assert!(sum(|f| f.duplicated) > 0);
    assert!(sum(|f| f.nacks) > 0);
    assert!(rep.runs.iter().all(|r| r.figures.messages == 180));
}
