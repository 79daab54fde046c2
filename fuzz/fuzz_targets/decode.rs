//! Fuzz target: any byte string fed to both decoders (the common header codec and the sequencer
//! packet codec) must yield a packet or a typed error, never a panic; when a sequencer packet
//! decodes, its lazy entry iterators are walked to the end and Join/Leave views are decoded too.
//!
//! Run with `cargo +nightly fuzz run decode` from the repository root; seeds are in
//! `fuzz/corpus/decode/`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcast_proto::sequencer::packet::{self, decode_view, Body, EntryKind};
use rmcast_proto::wire;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = wire::decode(data) {
        // What the header codec hands out must lie within the input (bodies borrow, not copy).
        assert!(p.body.len() <= data.len());
        assert_eq!(p.auth.is_some(), p.header.flags & wire::FLAG_AUTH != 0);
    }
    let Ok((_header, body)) = packet::decode(data) else {
        return;
    };
    match body {
        Body::Ordered { entries, .. } => {
            for e in entries {
                assert!(e.frag_index < e.frag_count);
                assert!(e.has_payload || e.payload.is_empty());
                if matches!(
                    e.kind,
                    EntryKind::Join | EntryKind::Leave | EntryKind::Reset
                ) {
                    if let Ok((_, _, members)) = decode_view(e.payload) {
                        assert_eq!(e.payload.len(), 14 + 4 * members.len());
                    }
                }
            }
        }
        Body::BcastReq { entries, .. } => {
            for e in entries {
                assert!(e.frag_index < e.frag_count);
            }
        }
        Body::Retrans { ranges, expect } => {
            // Canonical ranges, none below what the member delivered, within one window.
            let mut last: Option<u64> = None;
            assert!(!ranges.is_empty());
            for (f, t) in ranges.iter() {
                assert!(f < t && f >= expect && last.is_none_or(|l| l < f));
                last = Some(t);
            }
            assert!(ranges.span() <= rmcast_proto::sequencer::packet::MAX_NACK_SPAN);
        }
        Body::ReqGap { from, to } => assert!(from < to),
        Body::Accept(s) | Body::Sync(s) => {
            assert!(s.stable <= s.accepted_next && s.accepted_next <= s.next_seq);
        }
        Body::Result {
            seq, stable, view, ..
        } => {
            assert!(stable <= seq);
            let (_, _, members) = decode_view(view).expect("checked by decode");
            assert_eq!(view.len(), 14 + 4 * members.len());
        }
        Body::Status { .. }
        | Body::JoinReq { .. }
        | Body::JoinRefused { .. }
        | Body::LeaveReq { .. }
        | Body::AliveReq { .. }
        | Body::Alive { .. }
        | Body::ReformReq { .. }
        | Body::Vote { .. }
        | Body::ResultAck { .. } => {}
    }
    // Views are also decoded from arbitrary bytes on their own.
    let _ = decode_view(data);
});
