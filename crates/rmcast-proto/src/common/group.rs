//! Group naming (RMP section 3.1): a group is named by text, and the name is hashed to a group id
//! and to a default multicast address and port, so that members need only agree on a name.

/// FNV-1a, 64 bits. Stable across builds and platforms, which a wire-visible hash must be.
pub(crate) fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The 32-bit group id carried in every datagram's header.
pub fn group_id(name: &str) -> u32 {
    let h = fnv1a64(name.as_bytes());
    (h ^ (h >> 32)) as u32
}

/// The default multicast endpoint for a group name: an address in the organisation-local scope
/// 239.192.0.0/14 (RFC 2365) and a port in 20000..=59999.
pub fn multicast_endpoint(name: &str) -> ([u8; 4], u16) {
    let h = fnv1a64(name.as_bytes());
    let a = (h >> 8) as u32 & 0x0003_ffff;
    let addr = [239, 192 | ((a >> 16) as u8 & 0x03), (a >> 8) as u8, a as u8];
    let port = 20_000 + ((h >> 40) % 40_000) as u16;
    (addr, port)
}

/// A hex digest of a payload, as written in `--log` files so that an independent checker can
/// compare deliveries across members.
pub fn payload_hash(payload: &[u8]) -> String {
    format!("{:016x}", fnv1a64(payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_stably_into_scope() {
        assert_eq!(group_id("chat"), group_id("chat"));
        assert_ne!(group_id("chat"), group_id("chat2"));
        for name in ["", "a", "chat", "a much longer group name"] {
            let (addr, port) = multicast_endpoint(name);
            assert_eq!(addr[0], 239);
            assert_eq!(addr[1] & 0xfc, 192);
            assert!((20_000..60_000).contains(&port));
        }
        assert_eq!(payload_hash(b"").len(), 16);
        assert_ne!(payload_hash(b"a"), payload_hash(b"b"));
    }
}
