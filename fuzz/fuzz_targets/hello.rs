//! Fuzz target: the HELLO parser of group formation. Any datagram gives a HELLO or a typed error,
//! never a panic; a HELLO that parses encodes back to the same bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcast_proto::formation::hello::{self, MIN_PATH_BYTES};

fuzz_target!(|data: &[u8]| {
    let _ = hello::is_hello(data);
    if let Ok(h) = hello::decode(data) {
        assert!(h.path_bytes >= MIN_PATH_BYTES);
        let mut b = Vec::new();
        hello::encode(h.group, h.sender, h.hello, h.path_bytes, &mut b);
        assert_eq!(hello::decode(&b), Ok(h));
        assert!(hello::is_hello(&b));
    }
});
