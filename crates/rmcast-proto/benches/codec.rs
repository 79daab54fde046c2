//! Codec benchmarks: what encoding and decoding a sequencer datagram costs on its own.
//!
//! The case that matters is the hot path under load: an ordered datagram bundling 16 messages of
//! 64 bytes (about 1.4 KB, one MTU), encoded once by the sequencer and decoded by every member,
//! and the broadcast request a member sends to the sequencer. Throughput is reported in messages
//! (entries), so the figures compare directly with messages per second elsewhere.
//!
//! `cargo bench -p rmcast-proto --bench codec`

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use rmcast_proto::sequencer::packet::{
    self, ptype, Body, EntryKind, OrderedEntry, OrderedWriter, ReqEntry, ReqWriter, SeqState,
};
use rmcast_proto::wire::{EngineKind, Header};
use rmcast_proto::NodeId;

const ENTRIES: usize = 16;
const PAYLOAD_BYTES: usize = 64;

fn header(ptype: u8) -> Header {
    Header {
        engine: EngineKind::Sequencer,
        ptype,
        flags: 0,
        group: 0x1234_5678,
        incarnation: 1,
        sender: NodeId(1),
    }
}

const STATE: SeqState = SeqState {
    accepted_next: 1_000,
    stable: 900,
    next_seq: 1_000,
    complete_next: 950,
};

fn write_ordered(buf: &mut Vec<u8>, payloads: &[[u8; PAYLOAD_BYTES]]) {
    let mut w = OrderedWriter::new(buf, &header(ptype::ORDERED), STATE, 1_000);
    for (i, p) in payloads.iter().enumerate() {
        w.push(&OrderedEntry {
            kind: EntryKind::Data,
            has_payload: true,
            sender: NodeId(2 + (i % 3) as u32),
            pnum: 10_000 + i as u64,
            frag_index: 0,
            frag_count: 1,
            payload: p,
        });
    }
}

fn write_req(buf: &mut Vec<u8>, payloads: &[[u8; PAYLOAD_BYTES]]) {
    let mut w = ReqWriter::new(buf, &header(ptype::BCAST_REQ_PB), 1_000, 1_000, 999);
    for (i, p) in payloads.iter().enumerate() {
        w.push(&ReqEntry {
            pnum: 10_000 + i as u64,
            frag_index: 0,
            frag_count: 1,
            payload: p,
        });
    }
}

/// Decode a datagram and touch every entry, as a receiving engine would.
fn decode_and_walk(datagram: &[u8]) -> usize {
    match packet::decode(datagram) {
        Ok((_, Body::Ordered { entries, .. })) => entries.map(|e| e.payload.len()).sum(),
        Ok((_, Body::BcastReq { entries, .. })) => entries.map(|e| e.payload.len()).sum(),
        other => panic!("unexpected {other:?}"),
    }
}

fn codec(c: &mut Criterion) {
    let payloads: Vec<[u8; PAYLOAD_BYTES]> =
        (0..ENTRIES).map(|i| [i as u8; PAYLOAD_BYTES]).collect();
    let mut g = c.benchmark_group("sequencer_codec");
    g.throughput(Throughput::Elements(ENTRIES as u64));

    // The buffer is reused, as the engines do: no allocation per datagram after warm-up.
    let mut buf = Vec::with_capacity(2048);
    g.bench_function("encode_ordered_16x64", |b| {
        b.iter(|| {
            write_ordered(&mut buf, black_box(&payloads));
            black_box(buf.len())
        })
    });
    write_ordered(&mut buf, &payloads);
    let ordered = buf.clone();
    g.bench_function("decode_ordered_16x64", |b| {
        b.iter(|| black_box(decode_and_walk(black_box(&ordered))))
    });

    g.bench_function("encode_req_16x64", |b| {
        b.iter(|| {
            write_req(&mut buf, black_box(&payloads));
            black_box(buf.len())
        })
    });
    write_req(&mut buf, &payloads);
    let req = buf.clone();
    g.bench_function("decode_req_16x64", |b| {
        b.iter(|| black_box(decode_and_walk(black_box(&req))))
    });
    g.finish();

    // A lone request: what an idle member sends for one message.
    let mut g = c.benchmark_group("sequencer_codec");
    g.throughput(Throughput::Elements(1));
    write_req(&mut buf, &payloads[..1]);
    let req1 = buf.clone();
    g.bench_function("decode_req_1x64", |b| {
        b.iter(|| black_box(decode_and_walk(black_box(&req1))))
    });
    g.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
