//! Fuzz target: every body decoder of the Gossip (bimodal multicast) codec. Any byte string gives
//! a value or a typed error, never a panic; a digest's ranges lie in order below what the sender
//! says it knows, and its rows carry one prefix per sender. A data body, a fragment (DATA_FRAG)
//! and a run (DATA_RUN) that decode encode back to the same bytes; a fragment's index lies below
//! its count, a run's payloads lie in the body, one after the other, and its numbers do not wrap.
//! A probe body (PROBE, PROBE_REQ, PROBE_ACK) that decodes encodes back to the same bytes; it and
//! a digest carry at most `MAX_UPDATES` membership updates (SWIM's piggybacked suspicions).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcast_proto::gossip::packet::{
    decode_data, decode_frag, decode_run, encode_data, encode_frag, encode_run, Digest, Members,
    Probe, Solicitation, Welcome, MAX_UPDATES, RUN_ENTRY_FIXED, RUN_FIXED,
};

fuzz_target!(|data: &[u8]| {
    if let Ok((origin, msg, payload)) = decode_data(data) {
        let mut b = Vec::new();
        encode_data(&mut b, origin, msg, payload);
        assert_eq!(b, data);
    }
    if let Ok((origin, msg, frag, payload)) = decode_frag(data) {
        assert!(frag.1 >= 2 && frag.0 < frag.1);
        let mut b = Vec::new();
        encode_frag(&mut b, origin, msg, frag, payload);
        assert_eq!(b, data);
    }
    if let Ok((origin, first, payloads)) = decode_run(data) {
        assert!(!payloads.is_empty());
        assert!(first.checked_add(payloads.len() as u64).is_some());
        let mut at = RUN_FIXED;
        for p in &payloads {
            assert_eq!(p.start, at + RUN_ENTRY_FIXED);
            assert!(p.start <= p.end && p.end <= data.len());
            at = p.end;
        }
        assert_eq!(at, data.len());
        let mut b = Vec::new();
        let bodies: Vec<&[u8]> = payloads.iter().map(|p| &data[p.clone()]).collect();
        encode_run(&mut b, origin, first, &bodies);
        assert_eq!(b, data);
    }
    if let Ok(p) = Probe::decode(data) {
        assert!(p.updates.len() <= MAX_UPDATES);
        let mut b = Vec::new();
        p.encode(&mut b);
        assert_eq!(b, data);
    }
    if let Ok(d) = Digest::decode(data) {
        assert!(d.updates.len() <= MAX_UPDATES);
        for s in &d.senders {
            assert!(s.prefix <= s.known);
            let mut floor = 0;
            for r in &s.held {
                assert!(r.start >= floor && r.start < r.end && r.end <= s.known);
                floor = r.end;
            }
        }
        assert_eq!(d.prefixes.len(), d.rows.len() * d.senders.len());
        for i in 0..d.rows.len() {
            assert_eq!(d.row_prefixes(i).len(), d.senders.len());
        }
    }
    if let Ok(s) = Solicitation::decode(data) {
        for (_, r) in &s.wanted {
            assert!(r.start <= r.end);
        }
    }
    let _ = Welcome::decode(data);
    let _ = Members::decode(data);
});
