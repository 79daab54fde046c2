//! Sequencer engine benchmark: ordered 64-byte messages per second through three engines alone.
//!
//! Three [`Sequencer`] engines (one creates the group, two join) exchange their datagrams in
//! memory: no sockets, no threads, virtual time. What is measured is therefore the protocol core
//! only (encoding, decoding, ordering, history, delivery), which bounds from above what the
//! runtime can reach on the hot path: the runtime adds system calls and wake-ups on top.
//!
//! Each iteration submits a batch of 64-byte messages and runs the engines until every member has
//! delivered all of them; throughput is messages delivered (at every member) per second. Three
//! cases: the sequencer itself sends, one other member sends (PB method: request to the sequencer,
//! then the ordered multicast), and all three send.
//!
//! `cargo bench -p rmcast-proto --bench sequencer`

mod common;

use bytes::Bytes;
use common::Cluster;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rmcast_proto::sequencer::{Config, Sequencer};
use rmcast_proto::{Engine, NodeId, Time};

const MEMBERS: usize = 3;
/// Messages per iteration; a multiple of `MEMBERS` so that "all send" splits evenly.
const BATCH: usize = 240;
static PAYLOAD: [u8; 64] = [0x5a; 64];

fn member(i: usize, now: Time) -> Box<dyn Engine> {
    let cfg = Config::new(0xbe_4c);
    let me = NodeId(i as u32 + 1);
    if i == 0 {
        Box::new(Sequencer::create(cfg, me, now))
    } else {
        Box::new(Sequencer::join(cfg, me, now))
    }
}

fn sequencer(c: &mut Criterion) {
    let mut g = c.benchmark_group("sequencer_engine_3_members_64B");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (name, senders) in [
        ("sequencer_sends", &[0usize][..]),
        ("member_sends", &[1][..]),
        ("all_send", &[0, 1, 2][..]),
    ] {
        let mut cluster = Cluster::new(MEMBERS, member);
        let payload = Bytes::from_static(&PAYLOAD);
        g.bench_function(name, |b| b.iter(|| cluster.batch(senders, BATCH, &payload)));
        // Every member delivered the same number of messages: nothing was left behind.
        assert!(cluster.agree());
    }
    g.finish();
}

criterion_group!(benches, sequencer);
criterion_main!(benches);
