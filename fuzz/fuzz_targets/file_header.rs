//! Fuzz target: the header packet of a Tree file transfer (`rmcast_proto::tree::file`). Any byte
//! string gives a header or `None`, never a panic; a header that decodes names a plain file,
//! has a packet size a datagram carries, encodes back to exactly the input, and gives offsets
//! that never wrap.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcast_proto::tree::file::FileHeader;
use rmcast_proto::wire::MAX_DATAGRAM_LEN;

fuzz_target!(|data: &[u8]| {
    let Some(h) = FileHeader::decode(data) else {
        return;
    };
    assert!(!h.name.is_empty() && !h.name.contains('/') && h.name != "..");
    assert!(h.packet > 0 && h.packet as usize <= MAX_DATAGRAM_LEN);
    assert_eq!(h.encode(), data);
    let n = h.packets();
    for seq in [0, 1, n / 2, n, n.saturating_add(1), u64::MAX] {
        if let Some(off) = h.offset(seq) {
            assert!(off < h.size);
        }
    }
});
