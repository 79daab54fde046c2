//! Writes the seed corpus of the `decode` fuzz target: one valid datagram of every sequencer
//! packet type (and an authenticated one), so that libFuzzer starts past the magic and the header
//! instead of discovering the format byte by byte.
//!
//! `cargo run --example gen_corpus` from `fuzz/` rewrites `fuzz/corpus/decode/seed-*`.

use rmcast_proto::sequencer::packet::{
    encode_control, encode_view, ptype, Body, EntryKind, OrderedEntry, OrderedWriter, ReqEntry,
    ReqWriter, SeqRanges, SeqState, VoteKind,
};
use rmcast_proto::wire::{EngineKind, Header, FLAG_AUTH, HEADER_LEN};
use rmcast_proto::NodeId;
use std::path::Path;

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

fn main() -> std::io::Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/decode");
    std::fs::create_dir_all(&dir)?;
    let mut out: Vec<(&str, Vec<u8>)> = Vec::new();
    let state = SeqState {
        accepted_next: 10,
        stable: 4,
        next_seq: 12,
        complete_next: 8,
    };
    let data = OrderedEntry {
        kind: EntryKind::Data,
        has_payload: true,
        sender: NodeId(2),
        pnum: 7,
        frag_index: 0,
        frag_count: 1,
        payload: b"hello, group",
    };
    let mut view = Vec::new();
    encode_view(&mut view, 3, NodeId(1), &[NodeId(1), NodeId(2), NodeId(3)]);
    let join = OrderedEntry {
        kind: EntryKind::Join,
        sender: NodeId(3),
        pnum: 0,
        payload: &view,
        ..data
    };
    // A BB accept: the entry names the message, its payload travelled in the sender's request.
    let accept = OrderedEntry {
        has_payload: false,
        payload: b"",
        pnum: 8,
        ..data
    };
    let frag = OrderedEntry {
        frag_index: 1,
        frag_count: 3,
        pnum: 9,
        ..data
    };

    let mut buf = Vec::new();
    let mut w = OrderedWriter::new(&mut buf, &header(ptype::ORDERED), state, 8);
    for e in [&data, &join, &accept, &frag] {
        w.push(e);
    }
    out.push(("seed-ordered", buf.clone()));

    let mut w = OrderedWriter::new(&mut buf, &header(ptype::ORDERED), state, 12);
    w.push(&OrderedEntry {
        kind: EntryKind::Leave,
        ..join
    });
    out.push(("seed-ordered-leave", buf.clone()));

    OrderedWriter::new(&mut buf, &header(ptype::ORDERED), state, 0);
    out.push(("seed-ordered-empty", buf.clone()));

    // An authenticated datagram: key id and nonce after the header, tag at the end.
    let mut h = header(ptype::ORDERED);
    h.flags = FLAG_AUTH;
    let mut w = OrderedWriter::new(&mut buf, &h, state, 8);
    w.push(&data);
    let mut block = 42u32.to_be_bytes().to_vec();
    block.extend_from_slice(&[7u8; 12]);
    buf.splice(HEADER_LEN..HEADER_LEN, block);
    buf.extend_from_slice(&[0xa5u8; 16]);
    out.push(("seed-ordered-auth", buf.clone()));

    for (name, t) in [
        ("seed-req-pb", ptype::BCAST_REQ_PB),
        ("seed-req-bb", ptype::BCAST_REQ_BB),
    ] {
        let mut w = ReqWriter::new(&mut buf, &header(t), 10, 12, 6);
        w.push(&ReqEntry {
            pnum: 7,
            frag_index: 0,
            frag_count: 1,
            payload: b"first message",
        });
        w.push(&ReqEntry {
            pnum: 8,
            frag_index: 0,
            frag_count: 2,
            payload: b"second, fragment 0",
        });
        out.push((name, buf.clone()));
    }

    let mut view = Vec::new();
    encode_view(&mut view, 5, NodeId(2), &[NodeId(2), NodeId(3)]);
    let controls = [
        ("seed-accept", ptype::ACCEPT, Body::Accept(state)),
        ("seed-sync", ptype::SYNC, Body::Sync(state)),
        (
            "seed-status",
            ptype::STATUS,
            Body::Status {
                expect: 10,
                held_next: 12,
                ask: true,
            },
        ),
        (
            "seed-retrans",
            ptype::RETRANS,
            Body::Retrans {
                ranges: {
                    let mut r = SeqRanges::single(5, 9);
                    r.insert(12, 14);
                    r
                },
                expect: 5,
            },
        ),
        (
            "seed-join-req",
            ptype::JOIN_REQ,
            Body::JoinReq { into: None },
        ),
        (
            "seed-leave-req",
            ptype::LEAVE_REQ,
            Body::LeaveReq { expect: 12 },
        ),
        (
            "seed-alive-req",
            ptype::ALIVE_REQ,
            Body::AliveReq { token: 0 },
        ),
        ("seed-alive", ptype::ALIVE, Body::Alive { token: 1 }),
        (
            "seed-reform-req",
            ptype::REFORM_REQ,
            Body::ReformReq {
                held_next: 12,
                target: 12,
                suspect: NodeId(1),
                round: 2,
                interval_ms: 100,
            },
        ),
        (
            "seed-vote",
            ptype::VOTE,
            Body::Vote {
                coordinator: NodeId(2),
                coordinator_held: 12,
                held_next: 11,
                expect: 10,
                base: 4,
                round: 2,
                kind: VoteKind::Vote,
            },
        ),
        (
            "seed-result",
            ptype::RESULT,
            Body::Result {
                incarnation: 1,
                seq: 12,
                stable: 10,
                settled: false,
                view: &view,
            },
        ),
        (
            "seed-result-ack",
            ptype::RESULT_ACK,
            Body::ResultAck {
                incarnation: 1,
                last_pnum: 8,
                mid_message: false,
            },
        ),
    ];
    for (name, t, body) in controls {
        encode_control(&mut buf, &header(t), &body);
        out.push((name, buf.clone()));
    }

    for (name, bytes) in &out {
        // Every seed must be valid, or it seeds nothing.
        rmcast_proto::sequencer::packet::decode(bytes).expect("seed decodes");
        std::fs::write(dir.join(name), bytes)?;
    }
    println!("wrote {} seeds to {}", out.len(), dir.display());
    Ok(())
}
