//! One sender's message history at one member: the messages it holds (to deliver in FIFO
//! order and to send again to members that solicit them), the numbers it knows to exist but
//! lacks, and those it gave up on (the loss up-call).
//!
//! Held messages live in the common [`HistoryBuffer`], a window of `capacity` numbers from the
//! oldest one still held (`base`): the per-sender buffer bound. Messages below `next` were
//! delivered (or reported lost); garbage collection moves `base` up past delivered messages
//! that are stable or old enough, never past an undelivered one.

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
pub(super) struct SenderHistory {
    /// The next message to deliver: every one below was delivered or reported lost.
    pub next: u64,
    /// One past the highest message number known to exist.
    pub known: u64,
    buf: Option<HistoryBuffer<Held>>,
    /// The oldest message still held, or where the window starts when nothing is held.
    base: u64,
    capacity: usize,
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
    pub fn new(start: u64, capacity: usize, round: u64) -> SenderHistory {
        SenderHistory {
            next: start,
            known: start,
            buf: None,
            base: start,
            capacity,
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

    /// The message `msg`, if held.
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

    pub fn get(&self, msg: u64) -> Option<&Held> {
        self.buf.as_ref().and_then(|b| b.get(msg))
    }

    /// Whether `msg` is given up on.
    pub fn is_lost(&self, msg: u64) -> bool {
        msg >= self.next
            && (self.lost.contains(&msg) || (msg < self.lost_below && self.get(msg).is_none()))
    }

    /// Store an arriving message.
    pub fn insert(&mut self, msg: u64, held: Held) -> Insert {
        if msg < self.next || self.get(msg).is_some() || self.is_lost(msg) {
            return Insert::Duplicate;
        }
        if msg >= self.limit() {
            return Insert::BeyondWindow;
        }
        let (base, cap, round) = (self.base, self.capacity, held.round);
        let buf = self
            .buf
            .get_or_insert_with(|| HistoryBuffer::new(cap, base));
        match buf.insert(msg, held) {
            Ok(true) => {
                self.gaps.remove(&msg);
                self.known = self.known.max(msg + 1);
                self.touched = round;
                self.check_invariants();
                Insert::Stored
            }
            Ok(false) => Insert::Duplicate,
            Err(_) => Insert::BeyondWindow,
        }
    }

    /// Whether an own message may be submitted: the next number fits the window.
    pub fn has_room(&self) -> bool {
        self.next < self.limit()
    }

    /// Store an own message just submitted under the next number, delivered at once (`None`
    /// when the window is full: [`SenderHistory::has_room`]).
    pub fn push_own(&mut self, held: Held) -> Option<u64> {
        let msg = self.next;
        if !self.has_room() {
            return None;
        }
        let (base, cap, round) = (self.base, self.capacity, held.round);
        let buf = self
            .buf
            .get_or_insert_with(|| HistoryBuffer::new(cap, base));
        buf.insert(msg, held).ok()?;
        self.next += 1;
        self.known = self.next;
        self.scanned = self.next;
        self.touched = round;
        self.check_invariants();
        Some(msg)
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
        while new_base < self.next {
            match buf.get(new_base) {
                None => {}
                Some(h) if eligible(new_base, h) => {
                    dropped.push(new_base);
                    stable_n += usize::from(new_base < stable);
                }
                Some(_) => break,
            }
            new_base += 1;
        }
        buf.advance(new_base);
        if buf.is_empty() {
            self.buf = None;
            self.base = new_base;
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
        }
    }

    #[test]
    fn gaps_losses_and_collection() {
        let t = Time::ZERO;
        let mut h = SenderHistory::new(10, 8, 0);
        assert_eq!(h.insert(9, held(0)), Insert::Duplicate);
        assert_eq!(h.insert(12, held(0)), Insert::Stored);
        assert_eq!(h.insert(12, held(0)), Insert::Duplicate);
        assert_eq!(h.insert(18, held(0)), Insert::BeyondWindow);
        assert_eq!(h.known, 13);
        h.scan_gaps(t);
        assert_eq!(h.gaps.keys().copied().collect::<Vec<_>>(), vec![10, 11]);
        assert_eq!(h.held_ranges(4), vec![12..13]);
        h.give_up(10, 1);
        assert_eq!(h.lost_run(), Some(1));
        h.skip(1);
        assert_eq!(h.next, 11);
        assert_eq!(h.lost_run(), None);
        assert_eq!(h.insert(11, held(1)), Insert::Stored);
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
    fn a_member_far_behind_gives_up_in_bulk_and_keeps_what_it_holds() {
        let mut h = SenderHistory::new(0, 4, 0);
        assert_eq!(h.insert(2, held(0)), Insert::Stored);
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
}
