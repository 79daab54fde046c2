//! Fragmentation of a message into datagram-sized fragments, and reassembly bounded by the
//! largest message the group accepts.
//!
//! Why here: every engine carries messages larger than a datagram, and every receiver must put
//! them together again without letting a peer make it allocate without bound. A fragment
//! announces its index and the fragment count of its message; fragments of one sender arrive in
//! order (the engine delivers them in its order), so one partial buffer per sender suffices.
//!
//! Invariants: a split message has between 1 and `u16::MAX` fragments, each of at most
//! `fragment_bytes` bytes, all but the last exactly that long; a partial buffer never holds more
//! than `max_message_bytes` bytes, and a message announcing more fragments than the maximum
//! could need is refused before anything is allocated for it.

use bytes::Bytes;
use std::collections::HashMap;
use std::hash::Hash;

/// A message longer than the configured maximum (or needing more than `u16::MAX` fragments).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TooLarge;

/// Splits messages into fragments of at most `fragment_bytes` bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Fragmenter {
    max_message_bytes: usize,
    fragment_bytes: usize,
}

impl Fragmenter {
    /// A fragmenter for messages of at most `max_message_bytes` bytes.
    pub fn new(max_message_bytes: usize, fragment_bytes: usize) -> Self {
        assert!(fragment_bytes > 0, "fragments must carry data");
        Fragmenter {
            max_message_bytes,
            fragment_bytes,
        }
    }

    /// Payload bytes per fragment.
    pub fn fragment_bytes(&self) -> usize {
        self.fragment_bytes
    }

    /// The most fragments a message of the maximum size needs.
    pub fn max_fragments(&self) -> usize {
        self.max_message_bytes.div_ceil(self.fragment_bytes).max(1)
    }

    /// The fragments of `payload` (an empty message is one empty fragment). Refused when the
    /// message is longer than the maximum or needs more than `u16::MAX` fragments.
    pub fn split(&self, payload: Bytes) -> Result<Fragments, TooLarge> {
        if payload.len() > self.max_message_bytes {
            return Err(TooLarge);
        }
        let count = payload.len().div_ceil(self.fragment_bytes).max(1);
        if count > u16::MAX as usize {
            return Err(TooLarge);
        }
        debug_assert!(count <= self.max_fragments());
        Ok(Fragments {
            payload,
            fragment_bytes: self.fragment_bytes,
            count: count as u16,
            next: 0,
        })
    }
}

/// One fragment of a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fragment {
    /// Position in the message, from 0.
    pub index: u16,
    /// Fragments in the message.
    pub count: u16,
    /// This fragment's bytes (a slice of the message: no copy).
    pub payload: Bytes,
}

/// The fragments of one message, in order.
#[derive(Clone, Debug)]
pub struct Fragments {
    payload: Bytes,
    fragment_bytes: usize,
    count: u16,
    next: u16,
}

impl Fragments {
    /// Fragments of the message in all (not only those left).
    pub fn fragment_count(&self) -> usize {
        self.count as usize
    }
}

impl Iterator for Fragments {
    type Item = Fragment;

    fn next(&mut self) -> Option<Fragment> {
        if self.next >= self.count {
            return None;
        }
        let i = self.next as usize;
        let len = self.payload.len();
        let start = (i * self.fragment_bytes).min(len);
        let end = ((i + 1) * self.fragment_bytes).min(len);
        let f = Fragment {
            index: self.next,
            count: self.count,
            payload: self.payload.slice(start..end),
        };
        debug_assert!(f.payload.len() <= self.fragment_bytes);
        debug_assert!(f.index + 1 == f.count || f.payload.len() == self.fragment_bytes);
        self.next += 1;
        Some(f)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.count - self.next) as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Fragments {}

/// Why a fragment was refused by [`Reassembly::push`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// A fragment after the first with no message begun: its beginning was never seen.
    Orphan,
    /// The message announces more fragments, or brings more bytes, than the maximum message
    /// size allows; its partial buffer is dropped.
    TooLarge,
}

/// Partial messages per sender, each bounded by the maximum message size.
#[derive(Clone, Debug)]
pub struct Reassembly<K> {
    max_message_bytes: usize,
    max_fragments: usize,
    partial: HashMap<K, Vec<u8>>,
    refused: u64,
}

impl<K: Eq + Hash + Copy> Reassembly<K> {
    /// Take messages cut by `fragmenter` too (smaller fragments, so more of them): the bound on
    /// fragments per message only grows.
    pub fn allow(&mut self, fragmenter: &Fragmenter) {
        self.max_fragments = self.max_fragments.max(fragmenter.max_fragments());
    }

    /// Reassembly of messages that `fragmenter` splits.
    pub fn new(fragmenter: &Fragmenter) -> Self {
        Reassembly {
            max_message_bytes: fragmenter.max_message_bytes,
            max_fragments: fragmenter.max_fragments(),
            partial: HashMap::new(),
            refused: 0,
        }
    }

    /// Add fragment `index` of `count` from `sender`; the whole message once its last fragment
    /// arrives. A one-fragment message is returned as is (no copy) and leaves the sender's
    /// partial message, if any, alone.
    pub fn push(
        &mut self,
        sender: K,
        index: u16,
        count: u16,
        payload: Bytes,
    ) -> Result<Option<Bytes>, Refused> {
        debug_assert!(index < count, "fragment index beyond its count");
        if count as usize > self.max_fragments || payload.len() > self.max_message_bytes {
            self.partial.remove(&sender);
            return Err(self.refuse(Refused::TooLarge));
        }
        if count == 1 {
            return Ok(Some(payload));
        }
        if index > 0 && !self.partial.contains_key(&sender) {
            return Err(self.refuse(Refused::Orphan));
        }
        let buf = self.partial.entry(sender).or_default();
        if index == 0 {
            buf.clear();
        }
        if buf.len() + payload.len() > self.max_message_bytes {
            self.partial.remove(&sender);
            return Err(self.refuse(Refused::TooLarge));
        }
        buf.extend_from_slice(&payload);
        debug_assert!(buf.len() <= self.max_message_bytes);
        if index + 1 == count {
            Ok(self.partial.remove(&sender).map(Bytes::from))
        } else {
            Ok(None)
        }
    }

    fn refuse(&mut self, why: Refused) -> Refused {
        self.refused += 1;
        why
    }

    /// Whether `sender` has a message partly reassembled.
    pub fn in_progress(&self, sender: K) -> bool {
        self.partial.contains_key(&sender)
    }

    /// Drop `sender`'s partial message (it left the group: the message never completes).
    pub fn forget(&mut self, sender: K) {
        self.partial.remove(&sender);
    }

    /// Fragments refused so far.
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_and_reassemble() {
        let f = Fragmenter::new(100, 8);
        assert_eq!(f.max_fragments(), 13);
        let msg = Bytes::from((0..20u8).collect::<Vec<_>>());
        let parts: Vec<_> = f.split(msg.clone()).unwrap().collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[2].payload.len(), 4);
        assert!(parts.iter().all(|p| p.count == 3));
        let mut r = Reassembly::new(&f);
        assert_eq!(r.push(1u32, 0, 3, parts[0].payload.clone()), Ok(None));
        assert!(r.in_progress(1));
        assert_eq!(r.push(1, 1, 3, parts[1].payload.clone()), Ok(None));
        assert_eq!(r.push(1, 2, 3, parts[2].payload.clone()), Ok(Some(msg)));
        assert!(!r.in_progress(1));
        let empty: Vec<_> = f.split(Bytes::new()).unwrap().collect();
        assert_eq!(empty.len(), 1);
        assert_eq!(empty[0].count, 1);
        assert_eq!(f.split(Bytes::from(vec![0; 101])).err(), Some(TooLarge));
        assert!(f.split(Bytes::from(vec![0; 100])).is_ok());
    }

    #[test]
    fn refuses_beyond_maximum_and_orphans() {
        let f = Fragmenter::new(16, 8);
        let mut r = Reassembly::new(&f);
        // More fragments than a maximal message has: refused before any buffer exists.
        assert_eq!(
            r.push(1u32, 0, 3, Bytes::from_static(b"12345678")),
            Err(Refused::TooLarge)
        );
        assert!(!r.in_progress(1));
        assert_eq!(
            r.push(1, 1, 2, Bytes::from_static(b"x")),
            Err(Refused::Orphan)
        );
        // A plausible count whose fragments bring too many bytes.
        assert_eq!(r.push(2u32, 0, 2, Bytes::from(vec![0; 9])), Ok(None));
        assert_eq!(
            r.push(2, 1, 2, Bytes::from(vec![0; 8])),
            Err(Refused::TooLarge)
        );
        assert!(!r.in_progress(2));
        assert_eq!(r.refused(), 3);
        // A single-fragment message passes through and leaves a partial one alone.
        assert_eq!(r.push(3u32, 0, 2, Bytes::from_static(b"ab")), Ok(None));
        assert_eq!(
            r.push(3, 0, 1, Bytes::from_static(b"z")),
            Ok(Some(Bytes::from_static(b"z")))
        );
        assert!(r.in_progress(3));
        r.forget(3);
        assert!(!r.in_progress(3));
    }
}
