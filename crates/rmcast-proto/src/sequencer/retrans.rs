//! Retransmissions a member owes (the sequencer, or anyone during recovery): whom, which
//! sequence numbers, and how many datagrams of the burst went out.

use super::shared::MAX_RETRANS_QUEUE;
use crate::engine::NodeId;
use std::collections::VecDeque;

/// A retransmission this member owes: `[from, until)` to `to`, in `sent` datagrams so far.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Owed {
    pub(super) to: NodeId,
    pub(super) from: u64,
    pub(super) until: u64,
    pub(super) sent: usize,
}

/// Retransmissions this member answers (the sequencer, or anyone during recovery), served in
/// the order asked, a bounded burst at a time.
///
/// Invariants: at most [`MAX_RETRANS_QUEUE`] destinations, each at most once.
#[derive(Clone, Debug, Default)]
pub(super) struct Retransmissions {
    queue: VecDeque<Owed>,
}

impl Retransmissions {
    /// Owe `[from, until)` to `to` (merged with what it is owed already).
    pub(super) fn owe(&mut self, to: NodeId, from: u64, until: u64) {
        debug_assert!(from < until);
        if let Some(r) = self.queue.iter_mut().find(|r| r.to == to) {
            r.from = r.from.min(from);
            r.until = r.until.max(until);
        } else if self.queue.len() < MAX_RETRANS_QUEUE {
            self.queue.push_back(Owed {
                to,
                from,
                until,
                sent: 0,
            });
        }
        debug_assert!(self.queue.len() <= MAX_RETRANS_QUEUE);
    }

    /// The retransmission to serve next.
    pub(super) fn next(&self) -> Option<Owed> {
        self.queue.front().copied()
    }

    /// A datagram for the next retransmission covered `[from, end)`: it is done when `end`
    /// reached its end, nothing more could be sent, or its burst reached `max_sent` datagrams.
    pub(super) fn sent_next(&mut self, from: u64, end: u64, max_sent: usize) {
        let Some(r) = self.queue.front_mut() else {
            return;
        };
        let sent = r.sent;
        r.from = end;
        r.sent += 1;
        if end >= r.until || end == from || sent + 1 >= max_sent {
            self.queue.pop_front();
        }
    }

    /// Owe `[from, until)` to `to`, cut to what this member holds: `[base, held)` (the
    /// sequencer everything it ordered, any member during recovery its contiguous history).
    pub(super) fn owe_within(&mut self, to: NodeId, from: u64, until: u64, base: u64, held: u64) {
        let until = until.min(held);
        let from = from.max(base);
        if from < until {
            self.owe(to, from, until);
        }
    }

    /// Forget every debt (the order they refer to has ended).
    pub(super) fn clear(&mut self) {
        self.queue.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retransmissions_merge_per_destination_and_bound_bursts() {
        let mut r = Retransmissions::default();
        r.owe(NodeId(1), 10, 20);
        r.owe(NodeId(2), 5, 6);
        r.owe(NodeId(1), 8, 25);
        let first = r.next().unwrap();
        assert_eq!((first.to, first.from, first.until), (NodeId(1), 8, 25));
        r.sent_next(8, 15, 2);
        assert_eq!(r.next().map(|o| (o.from, o.sent)), Some((15, 1)));
        // The second datagram reaches the burst bound.
        r.sent_next(15, 20, 2);
        assert_eq!(r.next().map(|o| o.to), Some(NodeId(2)));
        // Nothing could be written: done with it.
        r.sent_next(5, 5, 2);
        assert_eq!(r.next(), None);
        r.owe(NodeId(3), 1, 2);
        r.clear();
        assert_eq!(r.next(), None);
    }
}
