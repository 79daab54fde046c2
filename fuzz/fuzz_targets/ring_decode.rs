//! Fuzz target: every body decoder of the Ring (RMP) codec. Any byte string gives a value or a
//! typed error, never a panic, and what decodes is possible: ranges are not reversed, runs do
//! not wrap past `u64::MAX`, counts agree with the bytes that carry them, a fragment's index
//! lies below its count and the count within the bound given, and a fragment re-encodes to the
//! same bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcast_proto::ring::packet::{
    decode_data, decode_frag, encode_frag, Ack, AckBody, Nack, RecoveryNewList, RecoveryStart,
    RecoveryVote,
};
use rmcast_proto::wire;

fuzz_target!(|data: &[u8]| {
    if let Ok(a) = Ack::decode(data) {
        match &a.body {
            AckBody::Entries(e) => assert_eq!(a.slots(), e.len() as u64),
            AckBody::NewList(l) => {
                assert_eq!(l.members.len(), l.next_sseq.len());
                assert!(!l.members.is_empty());
            }
        }
        let mut b = Vec::new();
        a.encode(&mut b);
        // Re-encoding and decoding gives the same ACK (the encoding is canonical up to runs).
        assert_eq!(Ack::decode(&b).as_ref(), Ok(&a));
    }
    if let Ok(n) = Nack::decode(data) {
        assert!(n.acks.start <= n.acks.end);
    }
    if let Ok(run) = decode_data(data) {
        assert!(!run.msgs.is_empty());
        assert!(run.first.checked_add(run.msgs.len() as u64).is_some());
    }
    // The bound on fragments: the largest message in 1,472-byte datagrams, and one taken from
    // the input (so that counts on both sides of it are tried).
    let bound = data.first().map_or(732, |&b| usize::from(b) + 2);
    for max in [732, bound] {
        if let Ok(f) = decode_frag(data, max) {
            assert!(f.frag.0 < f.frag.1 && f.frag.1 >= 2);
            assert!(usize::from(f.frag.1) <= max);
            let mut b = Vec::new();
            encode_frag(&mut b, f.origin, f.sseq, f.qos, f.frag, f.payload);
            // Canonical: the body re-encodes to the bytes it came from, and decodes the same.
            assert_eq!(&b[..], data);
            assert_eq!(decode_frag(&b, max).as_ref(), Ok(&f));
        }
    }
    let _ = RecoveryStart::decode(data);
    let _ = RecoveryVote::decode(data);
    if let Ok(l) = RecoveryNewList::decode(data) {
        for a in &l.acks {
            if let Ok(p) = wire::decode(a) {
                let _ = Ack::decode(p.body);
            }
        }
    }
});
