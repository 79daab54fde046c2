//! One sender's message history at one member: the messages it holds (to deliver in FIFO
//! order and to send again to members that solicit them), the numbers it knows to exist but
//! lacks, and those it gave up on (the loss up-call).
//!
//! Held messages live in the common [`HistoryBuffer`], a window of `capacity` numbers from the
//! oldest one still held (`base`), and their payloads take at most `max_bytes`: the per-sender
//! buffer bounds. Messages below `next` were delivered (or reported lost); garbage collection
//! moves `base` up past delivered messages that are stable or old enough, and room for a new
//! message is made by dropping the oldest delivered ones, whatever their age; never past an
//! undelivered one (that one is given up on first: the loss up-call).

use crate::common::HistoryBuffer;
use crate::engine::Time;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

/// A message held.
#[derive(Clone, Debug)]
pub(super) struct Held {
    /// The application payload.
    pub payload: Bytes,
    /// The gossip round in which it arrived here (garbage collection counts from it).
    pub round: u64,
    /// `(index, count)` when it is a fragment of a message larger than a datagram.
    pub frag: Option<(u16, u16)>,
}

/// A message known to exist and missing here.
#[derive(Copy, Clone, Debug)]
pub(super) struct Gap {
    /// When it was first found missing (the loss up-call counts from it).
    pub since: Time,
    /// When it was last solicited.
    pub asked: Option<Time>,
}

/// What an arriving message did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Insert {
    /// Stored (new).
    Stored,
    /// Held or delivered already, or given up on.
    Duplicate,
    /// Beyond the buffer window: not stored.
    BeyondWindow,
}

/// One sender's message history (see the module docs).
#[derive(Clone)]
pub(super) struct SenderHistory {
    /// The next message to deliver: every one below was delivered or reported lost.
    pub next: u64,
    /// One past the highest message number known to exist.
    pub known: u64,
    buf: Option<HistoryBuffer<Held>>,
    /// The oldest message still held, or where the window starts when nothing is held.
    base: u64,
    capacity: usize,
    /// Payload bytes held.
    bytes: usize,
    /// Payload bytes held at most.
    max_bytes: usize,
    /// The last arrival within reach found no room (the buffer is full of messages waiting
    /// for delivery): see [`SenderHistory::stuck_behind`].
    full: bool,
    /// Numbers at or above `next` given up on, not yet passed by delivery.
    pub lost: BTreeSet<u64>,
    /// Every number in `[next, lost_below)` that is not held is given up on (a member that
    /// fell too far behind).
    pub lost_below: u64,
    /// Missing numbers at or above `next` within the window.
    pub gaps: BTreeMap<u64, Gap>,
    /// Numbers below this one were looked at for gaps.
    scanned: u64,
    /// The round of the last change: a quiet history is still reported in digests for a while.
    pub touched: u64,
}

impl SenderHistory {
    /// A history whose first message to deliver is `start`.
    pub fn new(start: u64, capacity: usize, max_bytes: usize, round: u64) -> SenderHistory {
        SenderHistory {
            next: start,
            known: start,
            buf: None,
            base: start,
            capacity,
            bytes: 0,
            max_bytes,
            full: false,
            lost: BTreeSet::new(),
            lost_below: start,
            gaps: BTreeMap::new(),
            scanned: start,
            touched: round,
        }
    }

    /// The oldest message number still held (or the window's start).
    pub fn base(&self) -> u64 {
        self.buf.as_ref().map_or(self.base, HistoryBuffer::base)
    }

    /// One past the highest number the window can hold.
    pub fn limit(&self) -> u64 {
        self.base().saturating_add(self.capacity as u64)
    }

    /// Messages held.
    pub fn held_count(&self) -> usize {
        self.buf.as_ref().map_or(0, HistoryBuffer::len)
    }

    /// Payload bytes held.
    pub fn held_bytes(&self) -> usize {
        self.bytes
    }

    /// What holds between calls (checked in debug builds): the window starts at or below the
    /// next number to deliver and holds at most its capacity; nothing below `next` is missing
    /// or given up on any more; the gap scan never lags behind delivery; gaps lie in the window.
    pub fn check_invariants(&self) {
        debug_assert!(
            self.base() <= self.next,
            "window base {} beyond next {}",
            self.base(),
            self.next
        );
        debug_assert!(self.held_count() <= self.capacity);
        debug_assert!(self.bytes <= self.max_bytes);
        debug_assert!(self.buf.is_some() || self.bytes == 0);
        debug_assert!(self.scanned >= self.next);
        debug_assert!(self
            .gaps
            .first_key_value()
            .is_none_or(|(m, _)| *m >= self.next));
        debug_assert!(self
            .gaps
            .last_key_value()
            .is_none_or(|(m, _)| *m < self.limit()));
        debug_assert!(self.lost.first().is_none_or(|m| *m >= self.next));
    }

    /// The message `msg`, if held.
    pub fn get(&self, msg: u64) -> Option<&Held> {
        self.buf.as_ref().and_then(|b| b.get(msg))
    }

    /// Whether `msg` is given up on.
    pub fn is_lost(&self, msg: u64) -> bool {
        msg >= self.next
            && (self.lost.contains(&msg) || (msg < self.lost_below && self.get(msg).is_none()))
    }

    /// Store an arriving message. Room is made by dropping delivered messages from the oldest
    /// up, however young (the buffer is bounded); never an undelivered one.
    pub fn insert(&mut self, msg: u64, held: Held) -> (Insert, usize) {
        if msg < self.next || self.get(msg).is_some() || self.is_lost(msg) {
            return (Insert::Duplicate, 0);
        }
        if msg >= self.next.saturating_add(self.capacity as u64) {
            // Beyond what the window could ever hold before delivery moves on.
            return (Insert::BeyondWindow, 0);
        }
        let evicted = self.make_room(msg, held.payload.len());
        if msg >= self.limit() || self.bytes + held.payload.len() > self.max_bytes {
            self.full = true;
            return (Insert::BeyondWindow, evicted);
        }
        let round = held.round;
        if self.store(msg, held) {
            self.full = false;
            self.gaps.remove(&msg);
            self.known = self.known.max(msg + 1);
            self.touched = round;
            self.check_invariants();
            (Insert::Stored, evicted)
        } else {
            (Insert::Duplicate, evicted)
        }
    }

    /// Put `held` in the window (which has room for it).
    fn store(&mut self, msg: u64, held: Held) -> bool {
        let (base, cap, len) = (self.base, self.capacity, held.payload.len());
        let buf = self
            .buf
            .get_or_insert_with(|| HistoryBuffer::new(cap, base));
        let stored = buf.insert(msg, held) == Ok(true);
        if stored {
            self.bytes += len;
        }
        stored
    }

    /// Drop delivered messages from the oldest up until `msg` fits the window and `len` more
    /// bytes fit the byte bound (or nothing delivered is left). Returns how many went.
    fn make_room(&mut self, msg: u64, len: usize) -> usize {
        let (cap, max_bytes, next) = (self.capacity as u64, self.max_bytes, self.next);
        let Some(buf) = self.buf.as_mut() else {
            // Nothing held: every number below `next` was delivered or given up on.
            self.base = self.base.max(next);
            return 0;
        };
        let (mut new_base, mut bytes, mut dropped) = (buf.base(), self.bytes, 0);
        while new_base < next && (msg >= new_base.saturating_add(cap) || bytes + len > max_bytes) {
            if new_base >= buf.limit() {
                // Nothing is held past the window: straight to where this loop would stop.
                let stop = if bytes + len > max_bytes {
                    next
                } else {
                    next.min(msg - cap + 1)
                };
                new_base = new_base.max(stop);
                break;
            }
            if let Some(h) = buf.get(new_base) {
                bytes -= h.payload.len();
                dropped += 1;
            }
            new_base += 1;
        }
        if dropped == 0 && new_base == buf.base() {
            return 0;
        }
        buf.advance(new_base);
        self.bytes = bytes;
        if buf.is_empty() {
            self.buf = None;
            self.base = new_base;
        }
        dropped
    }

    /// Store an own message just submitted under the next number, delivered at once. The
    /// sender never waits for the group: when the buffer is full its oldest messages go, and
    /// members that still lack them will report them lost. Returns the number and how many
    /// old messages were dropped.
    pub fn push_own(&mut self, held: Held) -> (u64, usize) {
        let msg = self.next;
        let round = held.round;
        let evicted = self.make_room(msg, held.payload.len());
        // Every own message is delivered: `make_room` could drop all of them.
        debug_assert!(msg < self.limit() && self.bytes + held.payload.len() <= self.max_bytes);
        self.store(msg, held);
        self.next += 1;
        self.known = self.next;
        self.scanned = self.next;
        self.touched = round;
        self.check_invariants();
        (msg, evicted)
    }

    /// Someone knows of messages up to (not including) `known`. Returns whether that is news.
    pub fn learn(&mut self, known: u64, round: u64) -> bool {
        if known <= self.known {
            return false;
        }
        self.known = known;
        self.touched = round;
        true
    }

    /// Note the missing numbers not looked at yet (within the window) as gaps found `now`.
    pub fn scan_gaps(&mut self, now: Time) {
        let from = self.scanned.max(self.next);
        let to = self.known.min(self.limit());
        for msg in from..to {
            if self.get(msg).is_none() && !self.is_lost(msg) {
                self.gaps.entry(msg).or_insert(Gap {
                    since: now,
                    asked: None,
                });
            }
        }
        self.scanned = self.scanned.max(to);
        self.check_invariants();
    }

    /// This member fell further behind the sender than its buffer reaches, with messages up
    /// to (not including) `known` in existence: by count (more than the window between `next`
    /// and `known`), or by bytes (the buffer full of messages waiting for a missing one, see
    /// [`SenderHistory::stuck_behind`]). Give up on what is missing below the first message it
    /// can still hold; delivery then goes on from there. Returns whether more was given up.
    pub fn give_up_behind(&mut self, known: u64, round: u64) -> bool {
        let mut behind = self.lost_below;
        let cap = self.capacity as u64;
        if known > self.next.saturating_add(cap) {
            behind = behind.max(known - cap);
        }
        if let Some(held) = self.stuck_behind() {
            behind = behind.max(held);
        }
        if behind <= self.lost_below {
            return false;
        }
        self.lost_below = behind;
        self.touched = round;
        true
    }

    /// Give up on `msg` (it is missing here).
    pub fn give_up(&mut self, msg: u64, round: u64) {
        if self.gaps.remove(&msg).is_some() || (msg >= self.next && self.get(msg).is_none()) {
            self.lost.insert(msg);
            self.touched = round;
        }
    }

    /// Delivery passed `msg`: forget what was kept for it.
    pub fn advance(&mut self) {
        self.move_next(self.next + 1);
        self.check_invariants();
    }

    /// Delivery stands at `next` now: forget the gaps and losses below it.
    fn move_next(&mut self, next: u64) {
        self.next = next;
        self.scanned = self.scanned.max(self.next);
        while self
            .gaps
            .first_key_value()
            .is_some_and(|(m, _)| *m < self.next)
        {
            self.gaps.pop_first();
        }
        while self.lost.first().is_some_and(|m| *m < self.next) {
            self.lost.pop_first();
        }
    }

    /// The run of consecutive numbers from `next` given up on, if `next` is one.
    pub fn lost_run(&self) -> Option<u64> {
        if !self.is_lost(self.next) {
            return None;
        }
        let mut end = self.next;
        // Held numbers in the bulk range interrupt it; the window bounds the search.
        let horizon = self.lost_below.max(self.next);
        while end < horizon && self.get(end).is_none() {
            if end >= self.limit() {
                end = horizon;
                break;
            }
            end += 1;
        }
        while self.lost.contains(&end) {
            end += 1;
        }
        Some(end - self.next)
    }

    /// Skip `count` numbers given up on.
    pub fn skip(&mut self, count: u64) {
        self.move_next(self.next + count);
        if self.buf.is_none() {
            self.base = self.base.max(self.next);
        }
        self.check_invariants();
    }

    /// Garbage collection: drop delivered messages from the oldest up while they are below
    /// `stable` (every member has them) or arrived at least `gc_rounds` rounds before `round`.
    /// Returns the numbers dropped and how many of them were stable.
    pub fn collect(&mut self, stable: u64, round: u64, gc_rounds: u64) -> (Vec<u64>, usize) {
        self.drop_front(
            |msg, h| msg < stable || round.saturating_sub(h.round) >= gc_rounds,
            stable,
        )
    }

    /// Drop delivered messages below `upto` whatever their age (the buffer is full).
    pub fn evict_below(&mut self, upto: u64) -> Vec<u64> {
        self.drop_front(|msg, _| msg < upto, 0).0
    }

    /// The history is full of undelivered messages waiting for a missing one (the last
    /// arrival within reach found no room): the oldest held message above `next`, the first
    /// number delivery could go on from once what is below it is given up on. `None` while
    /// there is room or `next` is held.
    pub fn stuck_behind(&self) -> Option<u64> {
        let buf = self.buf.as_ref()?;
        if !self.full || self.get(self.next).is_some() {
            return None;
        }
        (self.next..buf.limit()).find(|m| buf.get(*m).is_some())
    }

    fn drop_front(
        &mut self,
        mut eligible: impl FnMut(u64, &Held) -> bool,
        stable: u64,
    ) -> (Vec<u64>, usize) {
        let mut dropped = Vec::new();
        let mut stable_n = 0;
        let Some(buf) = self.buf.as_mut() else {
            self.base = self.base.max(self.next);
            return (dropped, 0);
        };
        let mut new_base = buf.base();
        // Nothing is held past the window: `next` may lie far beyond it (numbers given up on).
        let end = self.next.min(buf.limit());
        while new_base < end {
            match buf.get(new_base) {
                None => {}
                Some(h) if eligible(new_base, h) => {
                    self.bytes -= h.payload.len();
                    dropped.push(new_base);
                    stable_n += usize::from(new_base < stable);
                }
                Some(_) => break,
            }
            new_base += 1;
        }
        if new_base == buf.limit() {
            new_base = new_base.max(self.next);
        }
        buf.advance(new_base);
        if buf.is_empty() {
            self.buf = None;
            self.base = new_base;
            debug_assert_eq!(self.bytes, 0);
        }
        self.check_invariants();
        (dropped, stable_n)
    }

    /// The held numbers from the oldest up, as at most `max` ranges.
    pub fn held_ranges(&self, max: usize) -> Vec<Range<u64>> {
        let mut out: Vec<Range<u64>> = Vec::new();
        let Some(buf) = self.buf.as_ref() else {
            return out;
        };
        let end = buf.limit().min(self.known);
        for msg in buf.base()..end {
            if buf.get(msg).is_none() {
                continue;
            }
            if let Some(r) = out.last_mut().filter(|r| r.end == msg) {
                r.end += 1;
            } else if out.len() == max {
                break;
            } else {
                out.push(msg..msg + 1);
            }
        }
        out
    }

    /// Nothing held, nothing missing, nothing given up on and not yet passed.
    pub fn is_quiet(&self) -> bool {
        self.buf.is_none() && self.next >= self.known && self.lost.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(round: u64) -> Held {
        Held {
            payload: Bytes::from_static(b"m"),
            round,
            frag: None,
        }
    }

    #[test]
    fn gaps_losses_and_collection() {
        let t = Time::ZERO;
        let mut h = SenderHistory::new(10, 8, 1 << 20, 0);
        assert_eq!(h.insert(9, held(0)).0, Insert::Duplicate);
        assert_eq!(h.insert(12, held(0)).0, Insert::Stored);
        assert_eq!(h.insert(12, held(0)).0, Insert::Duplicate);
        assert_eq!(h.insert(18, held(0)).0, Insert::BeyondWindow);
        assert_eq!(h.known, 13);
        h.scan_gaps(t);
        assert_eq!(h.gaps.keys().copied().collect::<Vec<_>>(), vec![10, 11]);
        assert_eq!(h.held_ranges(4), vec![12..13]);
        h.give_up(10, 1);
        assert_eq!(h.lost_run(), Some(1));
        h.skip(1);
        assert_eq!(h.next, 11);
        assert_eq!(h.lost_run(), None);
        assert_eq!(h.insert(11, held(1)).0, Insert::Stored);
        h.advance();
        h.advance();
        assert_eq!(h.next, 13);
        assert!(h.gaps.is_empty());
        // 11 arrived in round 1, 12 in round 0: in round 3 with three rounds to keep them, only
        // 12 is old enough, and it is behind 11, so nothing goes; below the stability point
        // 11 goes; one round later 12 is old enough.
        assert_eq!(h.collect(0, 2, 3).0, Vec::<u64>::new());
        assert_eq!(h.collect(12, 2, 3), (vec![11], 1));
        assert_eq!(h.collect(0, 2, 3), (vec![], 0));
        assert_eq!(h.collect(0, 3, 3), (vec![12], 0));
        assert!(h.is_quiet());
        assert_eq!(h.base(), 13);
    }

    #[test]
    fn collecting_after_giving_up_far_beyond_the_window_takes_no_step_per_number() {
        // Found by the gossip_state fuzz target (a hang): a sender claiming 2^62 messages made
        // this member give up on all but the last few; garbage collection then walked from the
        // window's base to `next` one number at a time. Messages 0 and 1 are delivered and
        // held, 2 is held waiting; giving up jumps `next` past the window.
        let mut h = SenderHistory::new(0, 4, 1 << 20, 0);
        for m in 0..3 {
            assert_eq!(h.insert(m, held(0)).0, Insert::Stored);
        }
        h.advance();
        h.advance();
        let far = 1 << 62;
        h.learn(far, 0);
        h.lost_below = far - 4;
        assert_eq!(h.lost_run(), None, "2 is held");
        h.advance();
        assert_eq!(h.lost_run(), Some(far - 7));
        h.skip(far - 7);
        assert_eq!(h.next, far - 4);
        // Old enough: everything held goes, and the window moves to `next` in one step.
        assert_eq!(h.collect(0, 10, 3), (vec![0, 1, 2], 0));
        assert_eq!(h.base(), far - 4);
        // Room for a message far beyond the window, the same way.
        assert_eq!(h.insert(far - 3, held(10)).0, Insert::Stored);
    }

    #[test]
    fn a_member_far_behind_gives_up_in_bulk_and_keeps_what_it_holds() {
        let mut h = SenderHistory::new(0, 4, 1 << 20, 0);
        assert_eq!(h.insert(2, held(0)).0, Insert::Stored);
        h.learn(1000, 0);
        h.lost_below = 996;
        assert!(h.is_lost(0) && h.is_lost(1) && !h.is_lost(2));
        assert_eq!(h.lost_run(), Some(2));
        h.skip(2);
        assert_eq!(h.lost_run(), None);
        h.advance();
        assert_eq!(h.lost_run(), Some(993));
        h.skip(993);
        assert_eq!(h.next, 996);
    }

    fn sized(round: u64, len: usize) -> Held {
        Held {
            payload: Bytes::from(vec![0; len]),
            round,
            frag: None,
        }
    }

    #[test]
    fn own_messages_never_wait_and_the_oldest_go_by_count_and_by_bytes() {
        // 4 messages or 100 bytes at most.
        let mut h = SenderHistory::new(0, 4, 100, 0);
        for i in 0..4 {
            assert_eq!(h.push_own(sized(0, 10)), (i, 0));
        }
        // Full by count: the oldest goes.
        assert_eq!(h.push_own(sized(0, 10)), (4, 1));
        assert_eq!(h.base(), 1);
        assert_eq!(h.held_count(), 4);
        // Full by bytes: 40 held, 90 more need three to go (10 + 90 = 100).
        assert_eq!(h.push_own(sized(0, 90)), (5, 3));
        assert_eq!((h.held_count(), h.held_bytes()), (2, 100));
        assert!(h.get(4).is_some() && h.get(5).is_some());
        // However young: a 100-byte message empties the buffer before it.
        assert_eq!(h.push_own(sized(0, 100)), (6, 2));
        assert_eq!((h.held_count(), h.held_bytes(), h.base()), (1, 100, 6));
    }

    #[test]
    fn arrivals_make_room_from_delivered_messages_only() {
        let mut h = SenderHistory::new(0, 4, 100, 0);
        assert_eq!(h.insert(0, sized(0, 40)), (Insert::Stored, 0));
        h.advance();
        assert_eq!(h.insert(2, sized(0, 40)), (Insert::Stored, 0));
        // 0 was delivered: it goes for 3 (bytes). 1 is missing, so 2 and 3 wait for it.
        assert_eq!(h.insert(3, sized(0, 40)), (Insert::Stored, 1));
        assert_eq!(h.held_bytes(), 80);
        // Nothing delivered is left to drop: refused, not stored, never an undelivered one.
        assert_eq!(h.insert(4, sized(0, 40)), (Insert::BeyondWindow, 0));
        assert!(h.get(2).is_some() && h.get(3).is_some());
        // Stuck behind the missing 1 with the buffer full: delivery can go on from 2.
        assert_eq!(h.stuck_behind(), Some(2));
        h.lost_below = 2;
        assert_eq!(h.lost_run(), Some(1));
        h.skip(1);
        h.advance();
        h.advance();
        assert_eq!(h.stuck_behind(), None);
        assert_eq!(h.insert(4, sized(0, 40)), (Insert::Stored, 1));
        // Far beyond the window: not stored, nothing dropped for it.
        assert_eq!(h.insert(100, sized(0, 1)), (Insert::BeyondWindow, 0));
    }
}
