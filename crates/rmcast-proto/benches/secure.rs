//! What sealing and opening a datagram of a secure group costs on its own (AES-256-GCM from
//! `ring`, `rmcast_proto::secure`), for a small datagram, a full one of an Ethernet MTU (1440
//! bytes: the MTU's datagram less the seal) and a full one on loopback (65,467 bytes: the
//! largest UDP datagram less the seal), beside what copying that datagram once costs (the plain
//! datagram's way into the send batch, which a sealed one takes instead). A member opens every
//! datagram it receives; the sender seals each once.
//!
//! `cargo bench -p rmcast-proto --bench secure`

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use rmcast_proto::secure::{GroupCipher, GroupKey, Keyring, Sealer};
use rmcast_proto::wire::{EngineKind, Header};
use rmcast_proto::NodeId;

fn plain(body: usize) -> Vec<u8> {
    let mut buf = Vec::new();
    Header {
        engine: EngineKind::Sequencer,
        ptype: 3,
        flags: 0,
        group: 0x1234_5678,
        incarnation: 1,
        sender: NodeId(1),
    }
    .encode(&mut buf);
    buf.resize(buf.len() + body, 0xab);
    buf
}

fn bench(c: &mut Criterion) {
    let keys = Keyring::new(GroupKey::from_bytes([7; 32]));
    let tx = GroupCipher::new(&keys);
    let mut g = c.benchmark_group("secure");
    g.throughput(Throughput::Elements(1));
    for body in [64usize, 1420, 65_447] {
        let p = plain(body);
        let mut copy = Vec::with_capacity(p.len());
        g.bench_function(format!("copy {} B datagram", p.len()), |b| {
            b.iter(|| {
                copy.clear();
                copy.extend_from_slice(black_box(&p));
                black_box(copy.len())
            })
        });
        let mut sealer = Sealer::with_session([1; 12]);
        let mut out = Vec::with_capacity(p.len() + 64);
        g.bench_function(format!("seal {} B datagram", p.len()), |b| {
            b.iter(|| tx.seal(&mut sealer, black_box(&p), &mut out).unwrap())
        });
        // Opening needs fresh counters (a replay is refused before decryption): datagrams are
        // sealed in chunks outside the timing, then opened in order by one member, as in a
        // stream (its replay window already exists).
        let mut rx = GroupCipher::new(&keys);
        let mut s = Sealer::with_session([1; 12]);
        g.bench_function(format!("open {} B datagram", p.len()), |b| {
            b.iter_custom(|iters| {
                let mut total = std::time::Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let n = left.min(1024);
                    left -= n;
                    let mut batch: Vec<Vec<u8>> = (0..n)
                        .map(|_| {
                            let mut v = Vec::new();
                            tx.seal(&mut s, &p, &mut v).unwrap();
                            v
                        })
                        .collect();
                    let t = std::time::Instant::now();
                    for v in &mut batch {
                        black_box(rx.open(v).unwrap().len());
                    }
                    total += t.elapsed();
                }
                total
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
