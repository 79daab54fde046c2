//! Fuzz target: every body decoder of the Txn codec. Any byte string gives a value or a typed
//! error, never a panic; what decodes is possible: data never reaches past the 32-bit message
//! offsets, a First's data fits in its total, a Status's limit is not below its next.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcast_proto::txn::packet::{
    decode_accept, decode_cntl, decode_data, decode_first, decode_query, decode_reply,
    decode_reply_ack, decode_resolve, decode_status, decode_udata,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = decode_first(data) {
        assert!(f.data.len() as u64 <= u64::from(f.total));
    }
    if let Ok(d) = decode_data(data) {
        assert!(u64::from(d.offset) + d.data.len() as u64 <= u64::from(u32::MAX));
    }
    if let Ok((_, set)) = decode_cntl(data) {
        assert_eq!(set.len() % 4, 0);
    }
    if let Ok(s) = decode_status(data) {
        assert!(s.next <= s.limit);
    }
    let _ = decode_accept(data);
    if let Ok(r) = decode_reply(data) {
        assert!(u64::from(r.offset) + r.data.len() as u64 <= u64::from(u32::MAX));
    }
    let _ = decode_reply_ack(data);
    let _ = decode_udata(data);
    let _ = decode_query(data);
    if let Ok((_, _, _, _, set)) = decode_resolve(data) {
        assert_eq!(set.len() % 4, 0);
    }
});
