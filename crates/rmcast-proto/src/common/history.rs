//! A history buffer of fixed capacity indexed by sequence number.
//!
//! Slots hold the window `[base, base + capacity)`. Entries below `base` are purged; an insert
//! beyond the window is refused, never grown into: the protocol above keeps senders inside the
//! window (Amoeba's history buffer, Amoeba paper section 5.2, Fig. 11).

/// An insert outside the window `[base, base + capacity)`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OutOfWindow;

/// Sequence-indexed ring of fixed capacity.
#[derive(Clone, Debug)]
pub struct HistoryBuffer<T> {
    base: u64,
    slots: Vec<Option<(u64, T)>>,
    len: usize,
}

impl<T> HistoryBuffer<T> {
    /// An empty buffer whose window starts at `base`.
    pub fn new(capacity: usize, base: u64) -> Self {
        assert!(capacity > 0, "history capacity must be positive");
        let mut slots = Vec::with_capacity(capacity);
        slots.resize_with(capacity, || None);
        HistoryBuffer {
            base,
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
        self.base + self.slots.len() as u64
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
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

    /// Whether `seq` lies in the window.
    pub fn in_window(&self, seq: u64) -> bool {
        seq >= self.base && seq < self.limit()
    }

    /// Store `value` at `seq`. Returns `Ok(false)` when an entry is already there (kept as is).
    pub fn insert(&mut self, seq: u64, value: T) -> Result<bool, OutOfWindow> {
        if !self.in_window(seq) {
            return Err(OutOfWindow);
        }
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
        if !self.in_window(seq) {
            return None;
        }
        match &self.slots[self.slot(seq)] {
            Some((s, v)) if *s == seq => Some(v),
            _ => None,
        }
    }

    /// The entry at `seq`, mutably.
    pub fn get_mut(&mut self, seq: u64) -> Option<&mut T> {
        if !self.in_window(seq) {
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
        for seq in from.max(self.base)..self.limit() {
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
        let end = new_base.min(self.limit());
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
}
