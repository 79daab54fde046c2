//! The data cache of the sender and of the designated receivers (section III-B6): the most
//! recent `Cache_Size` packets in memory, older ones in a [`DataStore`] (the paper's disk)
//! when the application gives one, so that a receiver that joins late still gets the whole
//! stream. Without a store, what falls out of memory is gone, and the ACK processor says so
//! (DATA_GONE) instead of leaving a receiver asking for ever.

use bytes::Bytes;
use std::collections::VecDeque;

/// Where packets that no longer fit the in-memory cache go (a file on disk in the CLI).
/// `get` must return what `put` was given for the same sequence number.
pub trait DataStore: Send {
    /// Keep packet `seq`.
    fn put(&mut self, seq: u64, data: &[u8]);
    /// Packet `seq`, if held.
    fn get(&mut self, seq: u64) -> Option<Bytes>;
}

/// The contiguous packets `floor()..end()` of a stream: a bounded part in memory, the rest
/// in the store.
pub struct DataCache {
    mem: VecDeque<Bytes>,
    /// Sequence number of `mem[0]`.
    mem_floor: u64,
    cap: usize,
    store: Option<Box<dyn DataStore>>,
    /// Lowest packet still held (in memory or in the store).
    floor: u64,
    /// Packets moved to the store, and read back from it.
    pub(crate) spilled: u64,
    pub(crate) store_reads: u64,
    /// Packets dropped from memory with no store to take them.
    pub(crate) evicted: u64,
}

/// The store is the application's (a file in the CLI) and cannot be shared: a clone holds the
/// memory part only, and what the store held counts as gone in it (DATA_GONE), as in a cache
/// that never had a store.
impl Clone for DataCache {
    fn clone(&self) -> Self {
        DataCache {
            mem: self.mem.clone(),
            mem_floor: self.mem_floor,
            cap: self.cap,
            store: None,
            floor: if self.store.is_some() {
                self.mem_floor
            } else {
                self.floor
            },
            spilled: self.spilled,
            store_reads: self.store_reads,
            evicted: self.evicted,
        }
    }
}

impl DataCache {
    /// A cache of `cap` packets in memory, with `store` behind it.
    pub fn new(cap: usize, store: Option<Box<dyn DataStore>>) -> Self {
        DataCache {
            mem: VecDeque::new(),
            mem_floor: 0,
            cap: cap.max(1),
            store,
            floor: 0,
            spilled: 0,
            store_reads: 0,
            evicted: 0,
        }
    }

    /// One past the last packet held.
    pub fn end(&self) -> u64 {
        self.mem_floor + self.mem.len() as u64
    }

    /// The lowest packet still held.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Whether a store keeps what falls out of memory.
    pub fn has_store(&self) -> bool {
        self.store.is_some()
    }

    /// Packets in memory.
    pub fn in_memory(&self) -> usize {
        self.mem.len()
    }

    /// Whether a packet can be appended without dropping one below `keep_from` that no store
    /// takes (the sender keeps everything its window still needs).
    pub fn can_push(&self, keep_from: u64) -> bool {
        self.mem.len() < self.cap || self.store.is_some() || self.mem_floor < keep_from
    }

    /// Append the next packet (`end()`), moving the oldest out of memory when full.
    pub fn push(&mut self, data: Bytes) {
        if self.mem.len() >= self.cap {
            if let Some(old) = self.mem.pop_front() {
                match self.store.as_mut() {
                    Some(s) => {
                        s.put(self.mem_floor, &old);
                        self.spilled += 1;
                    }
                    None => {
                        self.evicted += 1;
                        self.floor = self.mem_floor + 1;
                    }
                }
                self.mem_floor += 1;
            }
        }
        self.mem.push_back(data);
        self.check_invariants();
    }

    /// What holds between calls (checked in debug builds): memory holds at most `cap` packets,
    /// and nothing at or above the memory's first packet counts as gone.
    fn check_invariants(&self) {
        debug_assert!(self.mem.len() <= self.cap);
        debug_assert!(self.floor <= self.mem_floor);
        debug_assert!(self.store.is_some() || self.evicted == 0 || self.floor == self.mem_floor);
    }

    /// Packet `seq`, if still held.
    pub fn get(&mut self, seq: u64) -> Option<Bytes> {
        if seq >= self.end() || seq < self.floor {
            return None;
        }
        if seq >= self.mem_floor {
            return self.mem.get((seq - self.mem_floor) as usize).cloned();
        }
        self.store_reads += 1;
        self.store.as_mut()?.get(seq)
    }
}

/// A [`DataStore`] in memory, for tests and simulations (it stands for a disk: it is not
/// bounded).
#[derive(Default)]
pub struct MemStore {
    packets: std::collections::HashMap<u64, Bytes>,
}

impl DataStore for MemStore {
    fn put(&mut self, seq: u64, data: &[u8]) {
        self.packets.insert(seq, Bytes::copy_from_slice(data));
    }
    fn get(&mut self, seq: u64) -> Option<Bytes> {
        self.packets.get(&seq).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(i: u64) -> Bytes {
        Bytes::from(i.to_be_bytes().to_vec())
    }

    #[test]
    fn memory_is_bounded_and_old_packets_go_to_the_store() {
        let mut c = DataCache::new(4, Some(Box::new(MemStore::default())));
        for i in 0..10 {
            c.push(b(i));
        }
        assert_eq!(c.in_memory(), 4);
        assert_eq!((c.floor(), c.end()), (0, 10));
        for i in 0..10 {
            assert_eq!(c.get(i), Some(b(i)));
        }
        assert_eq!(c.get(10), None);
        assert_eq!(c.spilled, 6);
    }

    #[test]
    fn without_a_store_old_packets_are_gone_and_the_sender_is_held_back() {
        let mut c = DataCache::new(3, None);
        for i in 0..3 {
            c.push(b(i));
        }
        assert!(!c.can_push(0), "packet 0 is still needed");
        assert!(c.can_push(1));
        c.push(b(3));
        assert_eq!(c.floor(), 1);
        assert_eq!(c.get(0), None);
        assert_eq!(c.get(3), Some(b(3)));
        assert_eq!(c.in_memory(), 3);
    }
}
