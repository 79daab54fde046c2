//! Fuzz target: the Tree (RMTP) packet decoder, for every packet type the first byte names. Any
//! byte string gives a packet or a typed error, never a panic; an ACK's bitmap holds exactly the
//! bits it counts.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcast_proto::tree::packet::{Packet, MAX_ACK_BITS, MAX_ANCESTORS};

fuzz_target!(|data: &[u8]| {
    let Some((&ptype, body)) = data.split_first() else {
        return;
    };
    if let Ok(p) = Packet::decode(ptype, body) {
        assert_eq!(p.ptype(), ptype);
        match &p {
            Packet::Ack { nbits, bits, .. } => {
                assert!(usize::from(*nbits) <= MAX_ACK_BITS);
                assert_eq!(bits.len(), usize::from(*nbits).div_ceil(8));
            }
            Packet::Advert(a) => assert!(a.ancestors.len() <= MAX_ANCESTORS),
            _ => {}
        }
        let mut b = Vec::new();
        p.encode(&mut b);
        assert_eq!(Packet::decode(ptype, &b), Ok(p));
    }
});
