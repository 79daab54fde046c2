//! Datagrams larger than the path takes: cut into parts on the way out, put together again
//! (with bounds) on the way in, below every engine's own codec.
//!
//! Why here: what a group of thousands must say in one protocol step (a view of 1,024 members,
//! a ring's New List, a reformation's sync point) outgrows one datagram, and every engine that
//! keeps a view meets the same problem. Rather than teach each codec to continue a list across
//! datagrams, an engine writes such a datagram whole, and [`PartsOut`] cuts it into parts of
//! packet type [`PTYPE_PARTS`] (reserved in every engine); the shell ([`super::shell::receive`])
//! gives parts to [`PartsIn`] and hands the whole datagram, once complete, to the engine as if it
//! had arrived in one piece. A lost part loses the whole datagram, which the protocol repairs as
//! it repairs any lost datagram.
//!
//! Layout of a part: the whole datagram's 20-byte header with `ptype` = [`PTYPE_PARTS`], then
//! `id: u32, index: u16, count: u16, ptype: u8` (the whole's packet type) and a slice of the
//! whole's body. Parts are all [`PartsOut`]'s chunk long but the last.
//!
//! Bounds on the way in: a whole datagram is at most [`MAX_WHOLE`] bytes (the largest UDP
//! datagram); at most [`MAX_PARTIAL`] wholes, [`MAX_PER_SENDER`] of one sender and
//! [`MAX_HELD_BYTES`] in all are in progress at once (the oldest are dropped to make room); a
//! part announcing a count that cannot be, an index past its count, a count that
//! differs from its siblings' or bytes past the bound is refused before anything is stored, and
//! counted.

use crate::engine::{Destination, NodeId};
use crate::wire::{Header, Reader, WireError, FLAG_AUTH, HEADER_LEN, MAX_DATAGRAM_LEN};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// The packet type of a part, the same in every engine (none uses it for a packet of its own).
pub const PTYPE_PARTS: u8 = 0xF0;

/// Bytes of a part after the header and before its slice of the whole.
pub const PART_FIXED: usize = 4 + 2 + 2 + 1;

/// The largest whole datagram: the largest UDP datagram over IPv4.
pub const MAX_WHOLE: usize = MAX_DATAGRAM_LEN;

/// Wholes in progress at once at a receiver (the oldest is dropped for a new one). Many: when a
/// ring of 1,024 reforms, every member's vote (its sync point, 12 bytes a member) reaches the
/// initiator in parts at about the same time.
pub const MAX_PARTIAL: usize = 4096;

/// Wholes in progress from one sender (its oldest is dropped for a new one), so that one sender
/// cannot push out the others. Many: a sequencer answers a NACK with up to 32 entries, each a
/// view of 1,024 members in 3 parts, sent in one burst, and reordering interleaves their parts
/// (with 2, a member of a 1,020-member simulation never completed a view in 60 s).
pub const MAX_PER_SENDER: usize = 64;

/// Bytes held for wholes in progress at a receiver, at most (the oldest wholes are dropped to
/// stay within it).
pub const MAX_HELD_BYTES: usize = 16 << 20;

/// Smallest datagram [`PartsOut`] cuts for: below this a part carries too little to be worth it
/// (and the count bound on the way in assumes it).
pub const MIN_DATAGRAM: usize = HEADER_LEN + PART_FIXED + 64;

/// The most parts a whole can have (a whole of [`MAX_WHOLE`] bytes in the smallest parts).
pub const MAX_PARTS: usize = MAX_WHOLE.div_ceil(MIN_DATAGRAM - HEADER_LEN - PART_FIXED);

/// A datagram that cannot be cut: longer than [`MAX_WHOLE`], or the path's datagrams are too
/// small to carry parts, or it does not start with a header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Uncuttable;

/// Parts waiting to go, and the id of the next whole.
#[derive(Clone, Debug, Default)]
pub struct PartsOut {
    next_id: u32,
    queue: VecDeque<(Destination, Vec<u8>)>,
    cut: u64,
}

impl PartsOut {
    /// Nothing waiting.
    pub fn new() -> PartsOut {
        PartsOut::default()
    }

    /// `buf` holds one datagram for `to`: when it is longer than `max` bytes, cut it, leave the
    /// first part in `buf` and queue the others (taken by [`PartsOut::next`] before anything
    /// else is written). Returns how many datagrams the original became (1: left as it was).
    pub fn cut(
        &mut self,
        buf: &mut Vec<u8>,
        to: Destination,
        max: usize,
    ) -> Result<usize, Uncuttable> {
        if buf.len() <= max {
            return Ok(1);
        }
        if buf.len() > MAX_WHOLE || max < MIN_DATAGRAM || buf.len() < HEADER_LEN {
            return Err(Uncuttable);
        }
        let chunk = max - HEADER_LEN - PART_FIXED;
        let body = &buf[HEADER_LEN..];
        let count = body.len().div_ceil(chunk);
        debug_assert!((2..=MAX_PARTS).contains(&count));
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let ptype = buf[4];
        let mut parts = body.chunks(chunk).enumerate().map(|(i, slice)| {
            let mut p = Vec::with_capacity(HEADER_LEN + PART_FIXED + slice.len());
            p.extend_from_slice(&buf[..HEADER_LEN]);
            p[4] = PTYPE_PARTS;
            p.extend_from_slice(&id.to_be_bytes());
            p.extend_from_slice(&(i as u16).to_be_bytes());
            p.extend_from_slice(&(count as u16).to_be_bytes());
            p.push(ptype);
            p.extend_from_slice(slice);
            debug_assert!(p.len() <= max);
            p
        });
        let first = parts.next().expect("two parts at least");
        let rest: Vec<Vec<u8>> = parts.collect();
        self.queue.extend(rest.into_iter().map(|p| (to, p)));
        *buf = first;
        self.cut += 1;
        Ok(count)
    }

    /// The next part waiting, written into `buf`, and where it goes.
    pub fn next(&mut self, buf: &mut Vec<u8>) -> Option<Destination> {
        let (to, p) = self.queue.pop_front()?;
        *buf = p;
        Some(to)
    }

    /// Whether no part waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Parts waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Datagrams cut so far.
    pub fn cut_count(&self) -> u64 {
        self.cut
    }

    /// Drop what waits (a member that starts over).
    pub fn clear(&mut self) {
        self.queue.clear();
    }
}

/// Why a part was refused by [`PartsIn::push`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PartRefused {
    /// The part does not decode, or announces what no whole can be (an index past the count, a
    /// count past [`MAX_PARTS`], a count or packet type that differs from its siblings').
    Malformed,
    /// Its whole would pass [`MAX_WHOLE`] bytes: dropped with what was gathered of it.
    TooLarge,
    /// A whole that is itself a part.
    Nested,
}

/// One whole in progress.
#[derive(Clone, Debug)]
struct Partial {
    /// Its place in arrival order (of its first part), for eviction.
    order: u64,
    count: u16,
    ptype: u8,
    /// Parts received: (index, bytes), in arrival order, no index twice.
    parts: Vec<(u16, Vec<u8>)>,
    bytes: usize,
}

/// Wholes in progress at a receiver, bounded (see the module docs).
///
/// Invariants: `by_order` and `partial` name the same wholes; `held` is the sum of their bytes
/// and stays at most [`MAX_HELD_BYTES`]; no sender has more than [`MAX_PER_SENDER`] of them.
#[derive(Clone, Debug, Default)]
pub struct PartsIn {
    partial: HashMap<(NodeId, u32), Partial>,
    by_order: BTreeMap<u64, (NodeId, u32)>,
    per_sender: HashMap<NodeId, usize>,
    next_order: u64,
    held: usize,
    refused: u64,
    evicted: u64,
    completed: u64,
}

impl PartsIn {
    /// Nothing in progress.
    pub fn new() -> PartsIn {
        PartsIn::default()
    }

    /// Add the part with header `h` and body `body` (after the header). The whole datagram
    /// (header and body, packet type restored) once its last part arrived.
    pub fn push(&mut self, h: &Header, body: &[u8]) -> Result<Option<Vec<u8>>, PartRefused> {
        let out = self.take(h, body);
        if out.is_err() {
            self.refused += 1;
        }
        debug_assert!(self.held <= MAX_HELD_BYTES && self.partial.len() <= MAX_PARTIAL);
        debug_assert_eq!(self.partial.len(), self.by_order.len());
        out
    }

    fn take(&mut self, h: &Header, body: &[u8]) -> Result<Option<Vec<u8>>, PartRefused> {
        let mut r = Reader::new(body);
        let fixed = |r: &mut Reader<'_>| -> Result<(u32, u16, u16, u8), WireError> {
            Ok((r.u32()?, r.u16()?, r.u16()?, r.u8()?))
        };
        let (id, index, count, ptype) = fixed(&mut r).map_err(|_| PartRefused::Malformed)?;
        let slice = r.rest();
        if count < 2 || index >= count || count as usize > MAX_PARTS {
            return Err(PartRefused::Malformed);
        }
        if ptype == PTYPE_PARTS {
            return Err(PartRefused::Nested);
        }
        let key = (h.sender, id);
        if !self.partial.contains_key(&key) {
            self.begin(key, count, ptype);
        }
        let p = self.partial.get_mut(&key).expect("begun above");
        if p.count != count || p.ptype != ptype {
            self.drop_whole(key);
            return Err(PartRefused::Malformed);
        }
        if p.parts.iter().any(|(i, _)| *i == index) {
            return Ok(None); // a duplicate
        }
        if HEADER_LEN + p.bytes + slice.len() > MAX_WHOLE {
            self.drop_whole(key);
            return Err(PartRefused::TooLarge);
        }
        p.parts.push((index, slice.to_vec()));
        p.bytes += slice.len();
        let done = p.parts.len() == count as usize;
        self.held += slice.len();
        // Room for these bytes: the oldest other wholes go first.
        while self.held > MAX_HELD_BYTES {
            let (&_, &oldest) = self.by_order.iter().next().expect("bytes are held");
            if oldest == key {
                break; // cannot happen: one whole is far below the bound
            }
            self.drop_whole(oldest);
            self.evicted += 1;
        }
        if !done {
            return Ok(None);
        }
        let mut p = self.drop_whole(key).expect("present");
        p.parts.sort_unstable_by_key(|(i, _)| *i);
        let mut whole = Vec::with_capacity(HEADER_LEN + p.bytes);
        // The whole was never sealed as such: each part was (and was opened) on its own.
        Header {
            ptype: p.ptype,
            flags: h.flags & !FLAG_AUTH,
            ..*h
        }
        .encode(&mut whole);
        for (_, s) in &p.parts {
            whole.extend_from_slice(s);
        }
        self.completed += 1;
        Ok(Some(whole))
    }

    /// Start a whole, making room: a sender's oldest whole when it has its share, the oldest
    /// of all when the table is full.
    fn begin(&mut self, key: (NodeId, u32), count: u16, ptype: u8) {
        if self.per_sender.get(&key.0).copied().unwrap_or(0) >= MAX_PER_SENDER {
            let own = (self.by_order.values())
                .find(|k| k.0 == key.0)
                .copied()
                .expect("the sender has wholes");
            self.drop_whole(own);
            self.evicted += 1;
        }
        if self.partial.len() >= MAX_PARTIAL {
            let (&_, &oldest) = self.by_order.iter().next().expect("full");
            self.drop_whole(oldest);
            self.evicted += 1;
        }
        let order = self.next_order;
        self.next_order += 1;
        self.by_order.insert(order, key);
        *self.per_sender.entry(key.0).or_default() += 1;
        self.partial.insert(
            key,
            Partial {
                order,
                count,
                ptype,
                parts: Vec::new(),
                bytes: 0,
            },
        );
    }

    fn drop_whole(&mut self, key: (NodeId, u32)) -> Option<Partial> {
        let p = self.partial.remove(&key)?;
        self.by_order.remove(&p.order);
        self.held -= p.bytes;
        if let Some(n) = self.per_sender.get_mut(&key.0) {
            *n -= 1;
            if *n == 0 {
                self.per_sender.remove(&key.0);
            }
        }
        Some(p)
    }

    /// Parts refused so far.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Wholes dropped unfinished to make room for newer ones.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Wholes put together so far.
    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// Wholes in progress.
    pub fn in_progress(&self) -> usize {
        self.partial.len()
    }

    /// Bytes held for wholes in progress.
    pub fn bytes_held(&self) -> usize {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{self, EngineKind};

    fn datagram(ptype: u8, body_len: usize) -> Vec<u8> {
        let mut b = Vec::new();
        Header {
            engine: EngineKind::Ring,
            ptype,
            flags: 0,
            group: 7,
            incarnation: 3,
            sender: NodeId(9),
        }
        .encode(&mut b);
        b.extend((0..body_len).map(|i| (i * 7 % 251) as u8));
        b
    }

    fn feed(r: &mut PartsIn, p: &[u8]) -> Result<Option<Vec<u8>>, PartRefused> {
        let pkt = wire::decode(p).unwrap();
        assert_eq!(pkt.header.ptype, PTYPE_PARTS);
        r.push(&pkt.header, pkt.body)
    }

    #[test]
    fn small_datagrams_are_left_alone() {
        let mut out = PartsOut::new();
        let mut buf = datagram(3, 100);
        let before = buf.clone();
        assert_eq!(out.cut(&mut buf, Destination::Group, 1472), Ok(1));
        assert_eq!(buf, before);
        assert!(out.is_empty());
    }

    #[test]
    fn cut_and_put_together_in_any_order() {
        let mut out = PartsOut::new();
        let whole = datagram(14, 12_345);
        let mut buf = whole.clone();
        let n = out
            .cut(&mut buf, Destination::Peer(NodeId(4)), 1472)
            .unwrap();
        assert_eq!(n, 12_345usize.div_ceil(1472 - HEADER_LEN - PART_FIXED));
        let mut parts = vec![buf.clone()];
        let mut b = Vec::new();
        while let Some(to) = out.next(&mut b) {
            assert_eq!(to, Destination::Peer(NodeId(4)));
            parts.push(b.clone());
        }
        assert_eq!(parts.len(), n);
        assert!(parts.iter().all(|p| p.len() <= 1472));
        // Reversed, with a duplicate: the whole comes back once, byte for byte.
        let mut r = PartsIn::new();
        let mut got = None;
        feed(&mut r, &parts[n - 1]).unwrap();
        for p in parts.iter().rev() {
            if let Some(w) = feed(&mut r, p).unwrap() {
                assert!(got.is_none());
                got = Some(w);
            }
        }
        assert_eq!(got, Some(whole));
        assert_eq!((r.in_progress(), r.completed(), r.refused()), (0, 1, 0));
    }

    #[test]
    fn uncuttable_datagrams_are_refused() {
        let mut out = PartsOut::new();
        let mut big = datagram(3, MAX_WHOLE);
        assert_eq!(out.cut(&mut big, Destination::Group, 1472), Err(Uncuttable));
        let mut buf = datagram(3, 500);
        assert_eq!(out.cut(&mut buf, Destination::Group, 60), Err(Uncuttable));
        assert!(out.is_empty());
    }

    #[test]
    fn hostile_parts_are_refused_and_memory_stays_bounded() {
        let h = wire::decode(&datagram(PTYPE_PARTS, 0)).unwrap().header;
        let part = |id: u32, index: u16, count: u16, ptype: u8, len: usize| {
            let mut b = Vec::new();
            b.extend_from_slice(&id.to_be_bytes());
            b.extend_from_slice(&index.to_be_bytes());
            b.extend_from_slice(&count.to_be_bytes());
            b.push(ptype);
            b.extend(std::iter::repeat_n(0u8, len));
            b
        };
        let mut r = PartsIn::new();
        // Truncated, index past count, a count of one, an impossible count, a nested part.
        assert_eq!(r.push(&h, &[1, 2, 3]), Err(PartRefused::Malformed));
        assert_eq!(
            r.push(&h, &part(1, 2, 2, 3, 4)),
            Err(PartRefused::Malformed)
        );
        assert_eq!(
            r.push(&h, &part(1, 0, 1, 3, 4)),
            Err(PartRefused::Malformed)
        );
        let too_many = MAX_PARTS as u16 + 1;
        assert_eq!(
            r.push(&h, &part(1, 0, too_many, 3, 4)),
            Err(PartRefused::Malformed)
        );
        assert_eq!(
            r.push(&h, &part(1, 0, 2, PTYPE_PARTS, 4)),
            Err(PartRefused::Nested)
        );
        assert_eq!(r.in_progress(), 0);
        // A sibling that disagrees on the count drops the whole.
        assert_eq!(r.push(&h, &part(2, 0, 3, 3, 4)), Ok(None));
        assert_eq!(
            r.push(&h, &part(2, 1, 4, 3, 4)),
            Err(PartRefused::Malformed)
        );
        assert_eq!(r.in_progress(), 0);
        // Bytes past the bound drop the whole.
        assert_eq!(r.push(&h, &part(3, 0, 3, 3, 40_000)), Ok(None));
        assert_eq!(
            r.push(&h, &part(3, 1, 3, 3, 40_000)),
            Err(PartRefused::TooLarge)
        );
        assert_eq!(r.in_progress(), 0);
        // One sender begins many wholes: only its newest MAX_PER_SENDER are kept.
        for id in 10..10 + MAX_PER_SENDER as u32 + 8 {
            assert_eq!(r.push(&h, &part(id, 0, 2, 3, 1000)), Ok(None));
        }
        assert_eq!(r.in_progress(), MAX_PER_SENDER);
        assert_eq!(r.evicted(), 8);
        // Many senders: at most MAX_PARTIAL wholes and MAX_HELD_BYTES bytes are held.
        for s in 0..2 * MAX_PARTIAL as u32 {
            let hs = Header {
                sender: NodeId(1000 + s),
                ..h
            };
            assert_eq!(r.push(&hs, &part(1, 0, 3, 3, 1000)), Ok(None));
            assert!(r.in_progress() <= MAX_PARTIAL);
        }
        assert_eq!(r.in_progress(), MAX_PARTIAL);
        for s in 0..400u32 {
            let hs = Header {
                sender: NodeId(100_000 + s),
                ..h
            };
            assert_eq!(r.push(&hs, &part(1, 0, 3, 3, 60_000)), Ok(None));
            assert!(r.bytes_held() <= MAX_HELD_BYTES);
        }
        assert_eq!(r.refused(), 7);
    }
}
