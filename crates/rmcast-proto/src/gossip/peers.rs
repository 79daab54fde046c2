//! What a member knows of the others, kept so that a round costs the same whatever the group's
//! size: a sorted vector of small records (every member of a group of n holds n - 1 of them,
//! 10^8 in a simulated group of 10,000), a count of those heard gossiping, a queue of silence
//! deadlines looked at only when one falls due, and the stability reports per sender, kept only
//! while the group is small enough for them to be complete in time (see [`Stability`]).

use super::membership::{find_sorted, find_sorted_near, grow_gently};
use crate::engine::{NodeId, Time};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// What this member knows of another member.
#[derive(Copy, Clone, Debug)]
pub(super) struct Peer {
    /// Its heartbeat, the highest heard directly or relayed.
    pub heartbeat: u64,
    /// When it was last heard of (its heartbeat rose, or a datagram came from it): the silence
    /// timeout counts from here.
    pub news_at: Time,
    /// When a digest of it last showed the same membership table as this member's;
    /// [`Time::ZERO`]: never (rounds start one period after the engine, so no agreement and
    /// no quiet period is ever at zero).
    pub agreed_at: Time,
}

/// The other members, in id order, with their records.
#[derive(Clone, Debug, Default)]
pub(super) struct Peers {
    list: Vec<(NodeId, Peer)>,
    /// Members whose heartbeat was heard (above zero): those that answer joins.
    heard: usize,
    /// `(news_at when queued, member)`, one entry per member at most: the silence check looks
    /// at the earliest only, and queues it again with its later news if it had any.
    silence: BinaryHeap<Reverse<(Time, NodeId)>>,
    /// Silence is watched (heartbeat failure detection); off while the group probes instead
    /// (see `super::swim`), which saves every member 16 bytes a peer.
    unwatched: bool,
}

impl Peers {
    fn find(&self, id: NodeId) -> Result<usize, usize> {
        find_sorted(&self.list, id)
    }

    /// The record of `id`.
    pub fn get(&self, id: NodeId) -> Option<&Peer> {
        self.find(id).ok().map(|i| &self.list[i].1)
    }

    /// Whether `id` is a peer.
    pub fn contains(&self, id: NodeId) -> bool {
        self.find(id).is_ok()
    }

    /// Number of peers.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Peers whose heartbeat was heard.
    pub fn heard(&self) -> usize {
        self.heard
    }

    /// The peer at position `i` (in id order).
    pub fn at(&self, i: usize) -> NodeId {
        self.list[i].0
    }

    /// The peers in id order.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, &Peer)> + '_ {
        self.list.iter().map(|(k, p)| (*k, p))
    }

    /// The peers after `cursor`, then from the first up to it: a full turn from the cursor.
    pub fn turn_after(&self, cursor: NodeId) -> impl Iterator<Item = (NodeId, &Peer)> + '_ {
        let i = self.list.partition_point(|(k, _)| *k <= cursor);
        let (before, after) = self.list.split_at(i);
        after.iter().chain(before).map(|(k, p)| (*k, p))
    }

    /// Add `id` (heard of at `now`) if it is not a peer. Returns whether it was added.
    pub fn add(&mut self, id: NodeId, now: Time) -> bool {
        let Err(i) = self.find(id) else {
            return false;
        };
        let p = Peer {
            heartbeat: 0,
            news_at: now,
            agreed_at: Time::ZERO,
        };
        grow_gently(&mut self.list);
        self.list.insert(i, (id, p));
        if !self.unwatched {
            self.silence.push(Reverse((now, id)));
        }
        true
    }

    /// Remove `id`. Returns its record if it was a peer.
    pub fn remove(&mut self, id: NodeId) -> Option<Peer> {
        let i = self.find(id).ok()?;
        let (_, p) = self.list.remove(i);
        self.heard -= usize::from(p.heartbeat > 0);
        // Its queued deadline stays until it falls due, then finds no peer.
        if self.list.capacity() > 64 && self.list.capacity() > 2 * self.list.len() {
            self.list.shrink_to(self.list.len() + self.list.len() / 4);
        }
        Some(p)
    }

    /// `id` was heard of at `now` (a datagram came from it). Nothing while silence is not
    /// watched: only the silence check and the heartbeat rule of going idle read the time of
    /// news, and watching again counts every peer heard of then; this saves a look-up in a
    /// cold list for every datagram at every member of a large group.
    pub fn heard_from(&mut self, id: NodeId, now: Time) {
        if self.unwatched {
            return;
        }
        if let Ok(i) = self.find(id) {
            let p = &mut self.list[i].1;
            p.news_at = p.news_at.max(now);
        }
    }

    /// A heartbeat of `id`, relayed or its own: news if higher than the last. Returns whether
    /// `id` is a peer. `hint` is where the last of a run of heartbeats in id order (a digest's
    /// rows) was looked for, `usize::MAX` for none; it is left after this one.
    pub fn heartbeat(&mut self, id: NodeId, heartbeat: u64, now: Time, hint: &mut usize) -> bool {
        let at = find_sorted_near(&self.list, *hint, id);
        *hint = match at {
            Ok(i) => i + 1,
            Err(i) => i,
        };
        let Ok(i) = at else {
            return false;
        };
        let p = &mut self.list[i].1;
        if heartbeat > p.heartbeat {
            self.heard += usize::from(p.heartbeat == 0);
            p.heartbeat = heartbeat;
            p.news_at = p.news_at.max(now);
        }
        true
    }

    /// `id` showed the same table as this member's at `now`. Returns its agreement before.
    pub fn agreed(&mut self, id: NodeId, now: Time) -> Option<Time> {
        let i = self.find(id).ok()?;
        let p = &mut self.list[i].1;
        Some(std::mem::replace(&mut p.agreed_at, now))
    }

    /// Watch silence (`on`, every peer counted as heard of at `now`), or stop and free the
    /// queue.
    pub fn watch_silence(&mut self, on: bool, now: Time) {
        if on != self.unwatched {
            return;
        }
        self.unwatched = !on;
        self.silence = BinaryHeap::new();
        if on {
            self.all_heard_at(now);
            self.silence = (self.list.iter())
                .map(|(id, p)| Reverse((p.news_at, *id)))
                .collect();
        }
    }

    /// Every peer counts as heard of at `now` at the latest (nobody was watched meanwhile).
    pub fn all_heard_at(&mut self, now: Time) {
        for (_, p) in &mut self.list {
            p.news_at = p.news_at.max(now);
        }
    }

    /// The peers not heard of for longer than `timeout` at `now`. Only deadlines that fell due
    /// are looked at: a peer heard of since is queued again with its news.
    pub fn silent(&mut self, now: Time, timeout: std::time::Duration) -> Vec<NodeId> {
        let mut out = Vec::new();
        while let Some(Reverse((at, id))) = self.silence.peek().copied() {
            if now.saturating_since(at) <= timeout {
                break;
            }
            self.silence.pop();
            let Some(p) = self.get(id) else {
                continue;
            };
            if now.saturating_since(p.news_at) > timeout {
                out.push(id);
            } else {
                let news = p.news_at;
                self.silence.push(Reverse((news, id)));
            }
        }
        // A peer removed and added again may be queued twice: its second entry finds it
        // heard of or reported already, never twice in one call.
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The `k` peers whose agreement is the oldest, ties by the id's distance after `me` (a
    /// total order that differs per member): selected in linear time, then sorted.
    pub fn oldest_agreements(&self, me: NodeId, k: usize) -> Vec<NodeId> {
        let mut cands: Vec<NodeId> = self.list.iter().map(|(m, _)| *m).collect();
        let key = |m: &NodeId| {
            let p = self.get(*m).expect("a peer");
            (p.agreed_at, m.0.wrapping_sub(me.0))
        };
        if k > 0 && k < cands.len() {
            cands.select_nth_unstable_by_key(k - 1, key);
        }
        cands.truncate(k);
        cands.sort_by_key(key);
        cands
    }
}

/// Stability detection's reports: per sender, per member, the prefix of the sender's messages
/// that member delivered and the oldest it still holds.
///
/// A member learns another's report from that member's digests and from rows relayed by
/// others, a row per member per digest at most and a digest holding a few dozen rows: in a
/// group of n it takes about n / (rows a round) rounds to hear from everyone, and stability
/// needs everyone. Past [`Stability::MAX_MEMBERS`] that is longer than a message is kept
/// anyway ([`super::Config::gc_rounds`]), while the reports would cost every member n entries
/// per sender: there no report is kept, messages are collected by age and losses found by
/// time, Pbcast's own rules.
#[derive(Clone, Debug, Default)]
pub(super) struct Stability {
    /// Per sender, per member: (prefix delivered, oldest held).
    reports: BTreeMap<NodeId, BTreeMap<NodeId, (u64, Option<u64>)>>,
    on: bool,
}

impl Stability {
    /// The largest group whose reports are kept.
    pub const MAX_MEMBERS: usize = 1024;

    /// The group now has `members` members (this one included).
    pub fn resize(&mut self, members: usize) {
        self.on = members <= Self::MAX_MEMBERS;
        if !self.on {
            self.reports.clear();
        }
    }

    /// Whether reports are kept.
    pub fn on(&self) -> bool {
        self.on
    }

    /// `member` delivered `origin`'s messages below `prefix` (merged by maximum).
    pub fn prefix(&mut self, origin: NodeId, member: NodeId, prefix: u64) {
        if self.on {
            let e = (self.reports.entry(origin).or_default())
                .entry(member)
                .or_insert((0, None));
            e.0 = e.0.max(prefix);
        }
    }

    /// `member` holds `origin`'s messages from `base` on (its own digest says so).
    pub fn base(&mut self, origin: NodeId, member: NodeId, base: u64) {
        if self.on {
            let e = (self.reports.entry(origin).or_default())
                .entry(member)
                .or_insert((0, None));
            e.1 = Some(base);
        }
    }

    /// The prefix `member` reported for `origin` (0 if none).
    pub fn prefix_of(&self, origin: NodeId, member: NodeId) -> u64 {
        (self.reports.get(&origin))
            .and_then(|r| r.get(&member))
            .map_or(0, |e| e.0)
    }

    /// `member` is no longer a peer.
    pub fn forget(&mut self, member: NodeId) {
        for r in self.reports.values_mut() {
            r.remove(&member);
        }
    }

    /// Every member of `peers` delivered `origin`'s messages below this (0 when one has not
    /// said, or reports are off).
    pub fn stable(&self, origin: NodeId, peers: &Peers) -> u64 {
        if peers.len() == 0 {
            return u64::MAX;
        }
        let Some(r) = self.reports.get(&origin).filter(|_| self.on) else {
            return 0;
        };
        if r.len() < peers.len() {
            return 0;
        }
        peers
            .iter()
            .map(|(m, _)| r.get(&m).map_or(0, |e| e.0))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// The oldest message of `origin` any member of `peers` may still hold, if every one of
    /// them said (none when reports are off).
    pub fn floor(&self, origin: NodeId, peers: &Peers) -> Option<u64> {
        if peers.len() == 0 {
            return Some(u64::MAX);
        }
        let r = self.reports.get(&origin).filter(|_| self.on)?;
        if r.len() < peers.len() {
            return None;
        }
        peers
            .iter()
            .map(|(m, _)| r.get(&m).and_then(|e| e.1))
            .try_fold(u64::MAX, |acc, b| b.map(|b| acc.min(b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ms(t: u64) -> Time {
        Time(t * 1_000_000)
    }

    #[test]
    fn the_silence_queue_finds_the_silent_and_only_them() {
        let mut p = Peers::default();
        for id in [3, 1, 2] {
            assert!(p.add(NodeId(id), ms(10)));
        }
        assert!(!p.add(NodeId(2), ms(20)), "already a peer");
        assert_eq!(p.iter().map(|(m, _)| m.0).collect::<Vec<_>>(), [1, 2, 3]);
        let timeout = Duration::from_millis(100);
        assert!(p.silent(ms(100), timeout).is_empty(), "nobody due yet");
        // 1 heard of directly, 2 by a relayed heartbeat; 3 not at all.
        p.heard_from(NodeId(1), ms(90));
        let mut hint = usize::MAX;
        assert!(p.heartbeat(NodeId(2), 5, ms(95), &mut hint));
        assert_eq!(p.heard(), 1);
        assert_eq!(p.silent(ms(111), timeout), [NodeId(3)]);
        // The others were queued again with their news, and fall due from there.
        assert!(p.silent(ms(190), timeout).is_empty());
        assert_eq!(p.silent(ms(196), timeout), [NodeId(1), NodeId(2)]);
        // A peer removed is never reported.
        p.remove(NodeId(1));
        assert!(p.silent(ms(1000), timeout).iter().all(|m| *m != NodeId(1)));
        assert!(!p.heartbeat(NodeId(1), 9, ms(1000), &mut 0), "not a peer");
    }

    #[test]
    fn a_turn_after_the_cursor_visits_every_peer_once() {
        let mut p = Peers::default();
        for id in [2, 4, 6, 8] {
            p.add(NodeId(id), ms(1));
        }
        let turn = |c: u32| {
            p.turn_after(NodeId(c))
                .map(|(m, _)| m.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(turn(4), [6, 8, 2, 4]);
        assert_eq!(turn(5), [6, 8, 2, 4]);
        assert_eq!(turn(9), [2, 4, 6, 8]);
        assert_eq!(turn(0), [2, 4, 6, 8]);
    }

    #[test]
    fn stability_needs_every_peer_and_is_off_in_a_large_group() {
        let mut p = Peers::default();
        let mut s = Stability::default();
        s.resize(3);
        let o = NodeId(9);
        assert_eq!(s.stable(o, &p), u64::MAX, "alone: all it holds is stable");
        p.add(NodeId(1), ms(1));
        p.add(NodeId(2), ms(1));
        s.prefix(o, NodeId(1), 7);
        assert_eq!(s.stable(o, &p), 0, "member 2 has not said");
        assert_eq!(s.floor(o, &p), None);
        s.prefix(o, NodeId(2), 5);
        s.prefix(o, NodeId(2), 3);
        assert_eq!(s.stable(o, &p), 5, "merged by maximum");
        s.base(o, NodeId(1), 4);
        s.base(o, NodeId(2), 2);
        assert_eq!(s.floor(o, &p), Some(2));
        p.remove(NodeId(2));
        s.forget(NodeId(2));
        assert_eq!(s.stable(o, &p), 7);
        s.resize(Stability::MAX_MEMBERS + 1);
        assert!(!s.on());
        assert_eq!(s.stable(o, &p), 0, "no reports kept");
        assert_eq!(s.floor(o, &p), None);
        s.prefix(o, NodeId(1), 9);
        assert_eq!(s.prefix_of(o, NodeId(1)), 0);
    }
}
