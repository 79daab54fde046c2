//! Fuzz target: every body decoder of the Ring (RMP) codec. Any byte string gives a value or a
//! typed error, never a panic, and what decodes is possible: ranges are not reversed, runs do
//! not wrap past `u64::MAX`, counts agree with the bytes that carry them.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcast_proto::ring::packet::{
    decode_data, Ack, AckBody, Nack, RecoveryNewList, RecoveryStart, RecoveryVote,
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
