//! The engines' own small random number generator (SplitMix64, after Steele, Lea and Flood,
//! "Fast Splittable Pseudorandom Number Generators"). Engines never draw from a global RNG: the
//! driver seeds each one ([`crate::registry::EngineParams::seed`]), so simulated runs replay.

/// SplitMix64: gossip targets, who answers a join, random backoffs.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..=n`.
    pub fn up_to(&mut self, n: u64) -> u64 {
        match n.checked_add(1) {
            Some(m) => self.below(m),
            None => self.next_u64(),
        }
    }

    /// Uniform in `0..n` (`n > 0`), by Lemire's multiply-shift.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}
