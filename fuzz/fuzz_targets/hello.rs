//! Fuzz target: the HELLO parser of group formation. Any datagram gives a HELLO or a typed error,
//! never a panic; a HELLO that parses encodes back to the same bytes. The runtime's path
//! challenge and response (engine byte Formation, types 0x10 and 0x11, an 8-byte cookie; parsed
//! by `rmcast::peers::parse_path`, which takes exactly that length) share the header with HELLO:
//! one built from the input's bytes has a header that decodes, and the HELLO decoder refuses it.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcast_proto::formation::hello::{self, MIN_PATH_BYTES};
use rmcast_proto::wire::{self, EngineKind, Header, HEADER_LEN};
use rmcast_proto::NodeId;

/// Packet types of the runtime's path challenge and response (`rmcast::peers`).
const PATH_CHALLENGE: u8 = 0x10;
const PATH_RESPONSE: u8 = 0x11;

fuzz_target!(|data: &[u8]| {
    let _ = hello::is_hello(data);
    if let Ok(h) = hello::decode(data) {
        assert!(h.path_bytes >= MIN_PATH_BYTES);
        let mut b = Vec::new();
        hello::encode(h.group, h.sender, h.hello, h.path_bytes, &mut b);
        assert_eq!(hello::decode(&b), Ok(h));
        assert!(hello::is_hello(&b));
    }
    // A path packet from the input's bytes: group, sender and cookie.
    let mut w = [0u8; 16];
    for (d, s) in w.iter_mut().zip(data) {
        *d = *s;
    }
    let ptype = if w[0] & 1 == 0 {
        PATH_CHALLENGE
    } else {
        PATH_RESPONSE
    };
    let mut p = Vec::new();
    Header {
        engine: EngineKind::Formation,
        ptype,
        flags: 0,
        group: u32::from_be_bytes(w[0..4].try_into().unwrap()),
        incarnation: 0,
        sender: NodeId(u32::from_be_bytes(w[4..8].try_into().unwrap())),
    }
    .encode(&mut p);
    p.extend_from_slice(&w[8..16]);
    assert_eq!(p.len(), HEADER_LEN + 8);
    let h = wire::decode(&p).expect("a path packet's header decodes");
    assert_eq!(
        (h.header.engine, h.header.ptype),
        (EngineKind::Formation, ptype)
    );
    // `is_hello` routes by the engine byte alone (path packets go that way too, to the
    // runtime); the HELLO decoder refuses them.
    assert!(hello::is_hello(&p));
    assert!(hello::decode(&p).is_err());
    // And any input that is a path packet by its header is no HELLO.
    if let Ok(h) = wire::decode(data) {
        if h.header.engine == EngineKind::Formation
            && matches!(h.header.ptype, PATH_CHALLENGE | PATH_RESPONSE)
        {
            assert!(hello::decode(data).is_err());
        }
    }
});
