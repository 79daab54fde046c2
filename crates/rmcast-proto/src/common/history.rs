//! A history buffer of fixed capacity indexed by sequence number.
//!
//! Slots hold the window `[base, base + capacity)`. Entries below `base` are purged; an insert
//! beyond the window is refused, never grown into: the protocol above keeps senders inside the
//! window (Amoeba's history buffer, Amoeba paper section 5.2, Fig. 11).
//!
//! The slots are allocated as entries need them, doubling up to `capacity`: a member of a large
//! group keeps a history per sender, and most of them hold a few messages of a window of
//! thousands (8,192 empty slots of the gossip engine are 450 KB a member).

/// An insert outside the window `[base, base + capacity)`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OutOfWindow;

/// Sequence-indexed ring of fixed capacity.
#[derive(Clone, Debug)]
pub struct HistoryBuffer<T> {
    base: u64,
    /// The window's length; `slots` grows up to it.
    capacity: usize,
    /// A power of two (or `capacity`) long; `seq` lives at `seq % slots.len()`.
    slots: Vec<Option<(u64, T)>>,
    len: usize,
}

/// Slots allocated at first.
const FIRST_SLOTS: usize = 16;

impl<T> HistoryBuffer<T> {
    /// An empty buffer whose window starts at `base`.
    pub fn new(capacity: usize, base: u64) -> Self {
        assert!(capacity > 0, "history capacity must be positive");
        let n = capacity.min(FIRST_SLOTS);
        let mut slots = Vec::with_capacity(n);
        slots.resize_with(n, || None);
        HistoryBuffer {
            base,
            capacity,
            slots,
            len: 0,
        }
    }

    /// First sequence number the window holds.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// One past the last sequence number the window can hold.
    pub fn limit(&self) -> u64 {
        self.base + self.capacity as u64
    }

    /// Number of slots the window has (not all of them need be allocated yet).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Number of entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn slot(&self, seq: u64) -> usize {
        (seq % self.slots.len() as u64) as usize
    }

    /// Whether `seq` has a slot of its own among those allocated: every entry held lies in
    /// `[base, base + slots.len())`, so two of them never share one.
    fn allocated(&self, seq: u64) -> bool {
        seq >= self.base && seq < self.base + self.slots.len() as u64
    }

    /// Allocate slots until `seq` (in the window) has one of its own, moving every entry to
    /// its slot in the longer ring.
    fn grow_to(&mut self, seq: u64) {
        if self.allocated(seq) {
            return;
        }
        let need = (seq - self.base + 1) as usize;
        let n = need.next_power_of_two().min(self.capacity);
        let mut slots = Vec::with_capacity(n);
        slots.resize_with(n, || None);
        for (s, v) in std::mem::take(&mut self.slots).into_iter().flatten() {
            let i = (s % n as u64) as usize;
            slots[i] = Some((s, v));
        }
        self.slots = slots;
    }
    /// Whether `seq` lies in the window.
    pub fn in_window(&self, seq: u64) -> bool {
        seq >= self.base && seq < self.limit()
    }

    /// Store `value` at `seq`. Returns `Ok(false)` when an entry is already there (kept as is).
    pub fn insert(&mut self, seq: u64, value: T) -> Result<bool, OutOfWindow> {
        if !self.in_window(seq) {
            return Err(OutOfWindow);
        }
        self.grow_to(seq);
        let i = self.slot(seq);
        if self.slots[i].is_some() {
            debug_assert_eq!(self.slots[i].as_ref().map(|s| s.0), Some(seq));
            return Ok(false);
        }
        self.slots[i] = Some((seq, value));
        self.len += 1;
        Ok(true)
    }

    /// The entry at `seq`.
    pub fn get(&self, seq: u64) -> Option<&T> {
        if !self.allocated(seq) {
            return None;
        }
        match &self.slots[self.slot(seq)] {
            Some((s, v)) if *s == seq => Some(v),
            _ => None,
        }
    }

    /// The entry at `seq`, mutably.
    pub fn get_mut(&mut self, seq: u64) -> Option<&mut T> {
        if !self.allocated(seq) {
            return None;
        }
        let i = self.slot(seq);
        match &mut self.slots[i] {
            Some((s, v)) if *s == seq => Some(v),
            _ => None,
        }
    }

    /// Drop every entry at or above `from` (a recovery discards what the old order assigned
    /// beyond the point the new group agreed on).
    pub fn truncate(&mut self, from: u64) {
        for seq in from.max(self.base)..self.base + self.slots.len() as u64 {
            let i = self.slot(seq);
            if self.slots[i].take().is_some() {
                self.len -= 1;
            }
        }
    }

    /// Purge every entry below `new_base` and move the window. A lower `new_base` is ignored.
    pub fn advance(&mut self, new_base: u64) {
        if new_base <= self.base {
            return;
        }
        // Entries lie within the allocated slots only.
        let end = new_base.min(self.base + self.slots.len() as u64);
        for seq in self.base..end {
            let i = self.slot(seq);
            if self.slots[i].take().is_some() {
                self.len -= 1;
            }
        }
        if new_base >= self.limit() {
            debug_assert_eq!(self.len, 0);
        }
        self.base = new_base;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_bounds_and_purge() {
        let mut h = HistoryBuffer::new(4, 10);
        assert_eq!(h.insert(9, 'a'), Err(OutOfWindow));
        assert_eq!(h.insert(14, 'a'), Err(OutOfWindow));
        assert_eq!(h.insert(10, 'a'), Ok(true));
        assert_eq!(h.insert(10, 'b'), Ok(false));
        assert_eq!(h.insert(13, 'd'), Ok(true));
        assert_eq!(h.get(10), Some(&'a'));
        assert_eq!(h.get(11), None);
        assert_eq!(h.len(), 2);
        h.advance(12);
        assert_eq!(h.len(), 1);
        assert_eq!(h.get(10), None);
        assert_eq!(h.insert(15, 'f'), Ok(true));
        assert_eq!(h.get(15), Some(&'f'));
        assert_eq!(h.get(13), Some(&'d'));
        h.truncate(14);
        assert_eq!(h.get(15), None);
        assert_eq!(h.get(13), Some(&'d'));
        assert_eq!(h.len(), 1);
        h.advance(100);
        assert!(h.is_empty());
        assert_eq!(h.base(), 100);
        assert_eq!(h.insert(103, 'x'), Ok(true));
    }

    #[test]
    fn slots_grow_as_entries_need_them_and_keep_every_entry() {
        let mut h = HistoryBuffer::new(1000, 5);
        assert_eq!(h.slots.len(), FIRST_SLOTS);
        assert_eq!(h.limit(), 1005);
        for seq in [5, 7, 20] {
            assert_eq!(h.insert(seq, seq), Ok(true));
        }
        assert_eq!(h.slots.len(), 16);
        // Far into the window: the ring grows, the entries move to their new slots.
        assert_eq!(h.insert(700, 700), Ok(true));
        assert_eq!(h.slots.len(), 1000);
        assert_eq!(h.insert(1004, 1004), Ok(true));
        assert_eq!(h.insert(1005, 1), Err(OutOfWindow));
        for seq in [5, 7, 20, 700, 1004] {
            assert_eq!(h.get(seq), Some(&seq));
        }
        assert_eq!(h.get(6), None);
        assert_eq!(h.len(), 5);
        h.advance(21);
        assert_eq!(h.len(), 2);
        assert_eq!(h.insert(1020, 1020), Ok(true));
        assert_eq!(h.get(1020), Some(&1020));
        assert_eq!(h.get(700), Some(&700));
        h.truncate(701);
        assert_eq!((h.len(), h.get(1020), h.get(1004)), (1, None, None));
        *h.get_mut(700).expect("held") = 7;
        assert_eq!(h.get(700), Some(&7));
        // A capacity that is not a power of two is reached exactly.
        let mut g = HistoryBuffer::new(20, 0);
        assert_eq!(g.insert(19, 'z'), Ok(true));
        assert_eq!(g.slots.len(), 20);
    }
}
