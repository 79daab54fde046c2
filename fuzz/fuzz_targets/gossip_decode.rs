//! Fuzz target: every body decoder of the Gossip (bimodal multicast) codec. Any byte string gives
//! a value or a typed error, never a panic; a digest's ranges lie in order below what the sender
//! says it knows, and its rows carry one prefix per sender.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcast_proto::gossip::packet::{decode_data, Digest, Members, Solicitation, Welcome};

fuzz_target!(|data: &[u8]| {
    let _ = decode_data(data);
    if let Ok(d) = Digest::decode(data) {
        for s in &d.senders {
            assert!(s.prefix <= s.known);
            let mut floor = 0;
            for r in &s.held {
                assert!(r.start >= floor && r.start < r.end && r.end <= s.known);
                floor = r.end;
            }
        }
        for row in &d.rows {
            assert_eq!(row.prefixes.len(), d.senders.len());
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
