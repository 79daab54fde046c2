//! Buffers for copies of received packets that outlive the call that received them, given
//! back when the last handle on a copy is dropped (by whichever thread drops it) and reused for
//! the next copy.
//!
//! Why: a ring member keeps each data packet it receives until the packet is stable, a round
//! of the token later, and the application drops its deliveries later still. Each copy was a
//! fresh 64 KiB allocation on loopback, freed in the order it came; the allocator gave the
//! freed top of its heap back to the system and faulted it in again for the next ones (the
//! receivers' page faults were a tenth of their I/O threads' time at 1 KiB).

use bytes::Bytes;
use std::sync::{Arc, Mutex};

/// Buffers smaller than this are not kept: the allocator serves them from its free lists
/// without giving pages back, and a pool of them would only hold memory.
pub const MIN_POOLED: usize = 16 * 1024;

/// A bounded pool of packet buffers (see the module docs). Clones share the pool.
#[derive(Clone, Debug)]
pub struct PacketPool {
    spare: Arc<Mutex<Spare>>,
}

#[derive(Debug)]
struct Spare {
    bufs: Vec<Vec<u8>>,
    /// The capacity of `bufs`, in bytes.
    bytes: usize,
    /// The most bytes kept.
    max_bytes: usize,
}

/// A buffer of the pool behind a [`Bytes`]: back to the pool when dropped.
struct Pooled {
    buf: Vec<u8>,
    spare: Arc<Mutex<Spare>>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        // A poisoned lock only loses the buffer to the allocator.
        if let Ok(mut s) = self.spare.lock() {
            if s.bytes + buf.capacity() <= s.max_bytes {
                s.bytes += buf.capacity();
                s.bufs.push(buf);
            }
        }
    }
}

impl PacketPool {
    /// A pool that keeps at most `max_bytes` of buffers.
    pub fn new(max_bytes: usize) -> PacketPool {
        PacketPool {
            spare: Arc::new(Mutex::new(Spare {
                bufs: Vec::new(),
                bytes: 0,
                max_bytes,
            })),
        }
    }

    /// `data` copied into a buffer of the pool (a new one when none fits), as [`Bytes`] whose
    /// slices all keep it; it goes back to the pool when the last of them is dropped. A copy
    /// shorter than [`MIN_POOLED`] is an ordinary one.
    pub fn copy(&self, data: &[u8]) -> Bytes {
        if data.len() < MIN_POOLED {
            return Bytes::copy_from_slice(data);
        }
        let reused = self.spare.lock().ok().and_then(|mut s| {
            // A buffer at least as large, and not more than twice: one packet much smaller
            // than the buffer would hold the rest of it as long as it is kept.
            let fits = |b: &Vec<u8>| (data.len()..=2 * data.len()).contains(&b.capacity());
            let i = s.bufs.iter().rposition(fits)?;
            let b = s.bufs.swap_remove(i);
            s.bytes -= b.capacity();
            Some(b)
        });
        let mut buf = reused.unwrap_or_else(|| Vec::with_capacity(data.len()));
        buf.clear();
        buf.extend_from_slice(data);
        Bytes::from_owner(Pooled {
            buf,
            spare: self.spare.clone(),
        })
    }

    /// Bytes of buffers kept now.
    pub fn spare_bytes(&self) -> usize {
        self.spare.lock().map_or(0, |s| s.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer given back is the one the next copy of a similar size is written into, and
    /// the pool keeps no more than its bound.
    #[test]
    fn buffers_come_back_and_stay_within_the_bound() {
        let pool = PacketPool::new(3 * 64 * 1024);
        let data = vec![5u8; 60 * 1024];
        let a = pool.copy(&data);
        let at = a.as_ptr();
        let part = a.slice(100..200);
        drop(a);
        assert_eq!(pool.spare_bytes(), 0, "a slice still holds the buffer");
        drop(part);
        assert!(pool.spare_bytes() >= data.len());
        let b = pool.copy(&data[..50 * 1024]);
        assert_eq!(b.as_ptr(), at, "the buffer given back is reused");
        assert_eq!(&b[..], &data[..50 * 1024]);
        assert_eq!(pool.spare_bytes(), 0);
        // Much smaller: a buffer of its own, not the large one.
        drop(b);
        let small = pool.copy(&data[..20 * 1024]);
        assert_ne!(small.as_ptr(), at);
        // The bound: of five buffers given back, only what fits is kept.
        let many: Vec<Bytes> = (0..5).map(|_| pool.copy(&data)).collect();
        drop(many);
        assert!(pool.spare_bytes() <= 3 * 64 * 1024);
        // Small copies are never pooled.
        let tiny = pool.copy(&data[..1000]);
        let before = pool.spare_bytes();
        drop(tiny);
        assert_eq!(pool.spare_bytes(), before);
    }
}
