//! A sliding replay window over 64-bit datagram counters, as IPsec (RFC 4303, section 3.4.3)
//! and DTLS (RFC 6347, section 4.1.2.6) keep one per peer, with the circular bitmap of RFC 6479
//! so that advancing the window never shifts the whole bitmap.
//!
//! A counter is accepted once: above the highest counter seen it always is (the window slides
//! up), within [`WINDOW`] below it only if it was not seen yet, and further below never. The
//! caller checks first ([`ReplayWindow::check`], before the costly verification) and records only
//! what verified ([`ReplayWindow::accept`]), so that a forgery cannot move the window.

/// Counters remembered below the highest one seen. Far larger than the 64 of IPsec and DTLS:
/// one sender's datagrams reach a member on two sockets (multicast and unicast), and a
/// datagram read from one socket may overtake every datagram queued in the other's receive
/// buffer (megabytes: thousands of datagrams). A window of 4096 was measured too small on
/// loopback at 1 KiB messages (honest datagrams refused as too old, then retransmitted).
pub const WINDOW: u64 = 1 << 16;

const WORDS: usize = (WINDOW / 64) as usize;

/// Why a counter was refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Replay {
    /// Seen before.
    Duplicate,
    /// [`WINDOW`] or more below the highest counter seen: whether it was seen is forgotten.
    TooOld,
}

/// The window of one sender: 8 KiB of bitmap (on the heap).
#[derive(Clone, Debug)]
pub struct ReplayWindow {
    /// Highest counter accepted; meaningless while `empty`.
    top: u64,
    empty: bool,
    /// Bit `n % WINDOW` says whether counter `n` (within the window) was seen.
    bits: Box<[u64; WORDS]>,
}

impl Default for ReplayWindow {
    fn default() -> Self {
        ReplayWindow::new()
    }
}

impl ReplayWindow {
    /// A window that has seen nothing: the first counter is accepted, whatever it is.
    pub fn new() -> Self {
        ReplayWindow {
            top: 0,
            empty: true,
            bits: Box::new([0; WORDS]),
        }
    }

    /// A window that takes every counter up to `top` as seen: a sender session resumed after
    /// its window was dropped, of which only the highest counter was kept.
    pub fn seen_up_to(top: u64) -> Self {
        ReplayWindow {
            top,
            empty: false,
            bits: Box::new([u64::MAX; WORDS]),
        }
    }

    /// The highest counter accepted so far.
    pub fn top(&self) -> Option<u64> {
        (!self.empty).then_some(self.top)
    }

    fn slot(n: u64) -> (usize, u64) {
        let i = n % WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    /// Whether `n` would be accepted; changes nothing.
    pub fn check(&self, n: u64) -> Result<(), Replay> {
        if self.empty || n > self.top {
            return Ok(());
        }
        if self.top - n >= WINDOW {
            return Err(Replay::TooOld);
        }
        let (w, b) = Self::slot(n);
        if self.bits[w] & b != 0 {
            Err(Replay::Duplicate)
        } else {
            Ok(())
        }
    }

    /// Record `n` if it is accepted ([`ReplayWindow::check`]).
    pub fn accept(&mut self, n: u64) -> Result<(), Replay> {
        self.check(n)?;
        if self.empty {
            self.empty = false;
            self.top = n;
            self.bits.fill(0);
        } else if n > self.top {
            // Forget the counters the window slides past: they are the slots of
            // top+1..=n, which held counters WINDOW lower.
            let advance = n - self.top;
            // Each counter's slot is cleared once as the window passes it: amortized O(1).
            if advance >= WINDOW {
                self.bits.fill(0);
            } else {
                for k in self.top + 1..=n {
                    let (w, b) = Self::slot(k);
                    self.bits[w] &= !b;
                }
            }
            self.top = n;
        }
        let (w, b) = Self::slot(n);
        self.bits[w] |= b;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    #[test]
    fn accepts_once_and_slides() {
        let mut w = ReplayWindow::new();
        assert_eq!(w.accept(1_000_000), Ok(()));
        assert_eq!(w.accept(1_000_000), Err(Replay::Duplicate));
        assert_eq!(w.accept(999_999), Ok(()));
        assert_eq!(w.accept(999_999), Err(Replay::Duplicate));
        assert_eq!(w.accept(1_000_000 - WINDOW), Err(Replay::TooOld));
        assert_eq!(w.accept(1_000_000 + WINDOW * 3), Ok(()));
        assert_eq!(w.accept(1_000_000), Err(Replay::TooOld));
        assert_eq!(w.top(), Some(1_000_000 + WINDOW * 3));
        // A restarted sender starts from a higher counter (its clock): accepted; what its old
        // session sent is refused.
        assert_eq!(w.accept(u64::MAX - 1), Ok(()));
        assert_eq!(w.accept(1_000_000 + WINDOW * 3), Err(Replay::TooOld));
        assert_eq!(w.accept(u64::MAX), Ok(()));
    }

    /// Counters clustered so that duplicates, reordering within the window and jumps past it
    /// all happen.
    fn counters() -> impl Strategy<Value = Vec<u64>> {
        prop::collection::vec(
            prop_oneof![
                4 => 0u64..64,
                2 => 0u64..(WINDOW * 2),
                1 => 0u64..(WINDOW * 20),
                1 => (u64::MAX - 3)..=u64::MAX,
            ],
            1..400,
        )
    }

    proptest! {
        /// The window agrees with a model that remembers everything: a counter is accepted
        /// iff it was never accepted and is less than WINDOW below the highest accepted.
        #[test]
        fn matches_the_model(seq in counters()) {
            let mut w = ReplayWindow::new();
            let mut seen = HashSet::new();
            let mut top: Option<u64> = None;
            for n in seq {
                let fresh = !seen.contains(&n);
                let in_window = top.is_none_or(|t| n > t || t - n < WINDOW);
                let expect = fresh && in_window;
                prop_assert_eq!(w.check(n).is_ok(), expect);
                prop_assert_eq!(w.accept(n).is_ok(), expect, "counter {}", n);
                if expect {
                    seen.insert(n);
                    top = Some(top.map_or(n, |t| t.max(n)));
                }
                prop_assert_eq!(w.top(), top);
            }
        }

        /// Nothing is ever accepted twice, whatever the order.
        #[test]
        fn never_twice(seq in counters()) {
            let mut w = ReplayWindow::new();
            let mut accepted = HashSet::new();
            for n in seq.iter().chain(seq.iter()) {
                if w.accept(*n).is_ok() {
                    prop_assert!(accepted.insert(*n));
                }
            }
        }

        /// `check` never changes the window.
        #[test]
        fn check_is_pure(seq in counters(), probe in any::<u64>()) {
            let mut w = ReplayWindow::new();
            for n in seq {
                let _ = w.accept(n);
            }
            let before = w.clone();
            let _ = w.check(probe);
            prop_assert_eq!(&before.bits, &w.bits);
            prop_assert_eq!(before.top(), w.top());
        }
    }
}
