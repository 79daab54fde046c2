//! Ring engine benchmark: ordered messages per second through three ring engines alone (the
//! in-memory cluster of `common`), 64-byte and 1 KiB messages, one member sending or all three.
//! Each iteration submits a batch and runs the engines until every member delivered all of it;
//! throughput is messages delivered (at every member) per second.
//!
//! `cargo bench -p rmcast-proto --bench ring`; with `RING_BENCH_COUNT` set, each case also
//! prints the deliveries it made in all (warm-up included), so that the process's CPU time
//! (`perf stat -e task-clock`) over them gives the CPU per delivery, which a loaded host moves
//! far less than the time per iteration.

mod common;

use bytes::Bytes;
use common::Cluster;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rmcast_proto::registry::{EngineParams, EngineSettings, Role};
use rmcast_proto::ring::Ring;
use rmcast_proto::{Engine, NodeId, Time};

const MEMBERS: usize = 3;
/// Messages per iteration; a multiple of `MEMBERS` so that "all send" splits evenly.
const BATCH: usize = 960;

fn member(i: usize, now: Time) -> Box<dyn Engine> {
    let settings = EngineSettings::default();
    Box::new(Ring::new(&EngineParams {
        role: if i == 0 { Role::Create } else { Role::Join },
        group: 0x71_6e,
        me: NodeId(i as u32 + 1),
        max_datagram_bytes: 65_507,
        now,
        seed: i as u64 + 1,
        settings: &settings,
    }))
}

fn ring(c: &mut Criterion) {
    for size in [64usize, 1024] {
        let payload = Bytes::from(vec![0x5a; size]);
        let mut g = c.benchmark_group(format!("ring_engine_3_members_{size}B"));
        g.throughput(Throughput::Elements(BATCH as u64));
        for (name, senders) in [("one_sends", &[1usize][..]), ("all_send", &[0, 1, 2][..])] {
            let mut cluster = Cluster::new(MEMBERS, member);
            g.bench_function(name, |b| b.iter(|| cluster.batch(senders, BATCH, &payload)));
            assert!(cluster.agree(), "every member delivered the same messages");
            if std::env::var_os("RING_BENCH_COUNT").is_some() {
                eprintln!(
                    "{size} B {name}: {} deliveries",
                    cluster.delivered.iter().sum::<u64>()
                );
            }
        }
        g.finish();
    }
}

criterion_group!(benches, ring);
criterion_main!(benches);
