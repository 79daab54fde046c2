//! The runtime's one source of unpredictable bytes: node ids, engine seeds, path-challenge
//! cookies and challenge secrets all come from [`fill_random`].

/// Fill `out` from the operating system's random number generator (ring's `SystemRandom`:
/// `getrandom(2)` on Linux). Should the system refuse (it does not on any supported target,
/// but the runtime never panics for it), each 8-byte word comes from the standard library's
/// keyed SipHash instead, whose keys are drawn from the system's generator too.
pub(crate) fn fill_random(out: &mut [u8]) {
    use ring::rand::SecureRandom;
    if ring::rand::SystemRandom::new().fill(out).is_ok() {
        return;
    }
    use std::hash::{BuildHasher, Hasher};
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(i);
        let w = h.finish().to_ne_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two draws differ (a stuck or zero-filling source would not), and odd lengths are filled.
    #[test]
    fn draws_differ_and_fill_any_length() {
        let mut a = [0u8; 13];
        let mut b = [0u8; 13];
        fill_random(&mut a);
        fill_random(&mut b);
        assert_ne!(a, b);
    }
}
