//! The membership table, spread by gossip without any agreement protocol.
//!
//! Bimodal Multicast takes its membership from the layer below; rmcast has none, so members
//! keep a table of `(member, version, alive)` entries and exchange it when two digests show
//! different tables. Merging is a join of a semilattice, so that tables converge whatever the
//! order in which they meet: per member, the higher version wins, and at equal versions a
//! departed entry wins over a live one. Every change raises a version, so the sum of the
//! versions strictly increases with every change a table takes in (a merge that changes
//! anything raises at least one entry, or adds one).
//!
//! **Refutable, bounded versions** (SWIM's incarnation rule). Versions compare as serial
//! numbers (RFC 1982, wrapping), so that no version is highest forever: a member declared
//! departed at version `v` (found silent, or by a forged entry) always refutes it with `v + 1`.
//! An entry more than [`MAX_VERSION_STEP`] ahead of the version known for its member (for a
//! member not in the table, above the step itself) is refused ([`Merged::Forged`]): versions
//! rise by one or two per join, leave, suspicion or refutation, so only a forger jumps, and a
//! jump past half the range would make an old version look new.
//!
//! The view id is that sum in the high 32 bits and a hash of the whole table in the low 32:
//! it increases at every member with every change (until a version wraps, which takes a forger
//! tens of thousands of accepted steps), and two members with the same id hold the same table
//! (up to a 32-bit hash collision), so the same members.
//!
//! Entries are never removed (a departed member's entry keeps a late copy of an old live entry
//! from bringing it back); the table is bounded by `capacity`, and entries of unknown members
//! beyond it are refused.

use crate::common::group::fnv1a64;
use crate::engine::NodeId;

/// How far ahead of the version known for a member an entry may be; beyond, it is forged.
pub const MAX_VERSION_STEP: u32 = 1 << 16;

/// Whether version `a` is after `b` in serial-number order (RFC 1982).
fn serial_after(a: u32, b: u32) -> bool {
    let d = a.wrapping_sub(b);
    d != 0 && d < 1 << 31
}

/// One member's entry.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MemberEntry {
    /// Raised by every change of this entry.
    pub version: u32,
    /// A member (true) or departed: left, or found silent (false).
    pub alive: bool,
}

impl MemberEntry {
    /// Whether `other` wins over `self` in a merge.
    fn loses_to(self, other: MemberEntry) -> bool {
        serial_after(other.version, self.version)
            || (other.version == self.version && self.alive && !other.alive)
    }
}

/// What a merge did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Merged {
    /// The table changed.
    Changed,
    /// Nothing new.
    Unchanged,
    /// A new member was refused: the table is full.
    Full,
    /// The entry was refused: its version jumps more than [`MAX_VERSION_STEP`] ahead.
    Forged,
}

/// The membership table (see the module docs).
///
/// A sorted vector rather than a tree: every member of a group of n holds n entries, so at
/// 10,000 members the tables of a simulated group are 10^8 entries, and a vector's 12 bytes
/// an entry are a third of a B-tree's. Members are mostly added with ids above the others
/// (then an insertion is a push); the view id and the count of members are kept up to date
/// change by change, so that neither costs a pass over the table.
#[derive(Clone, Debug)]
pub struct Membership {
    entries: Vec<(NodeId, MemberEntry)>,
    capacity: usize,
    /// Sum of the versions (the view id's high half, saturated there).
    sum: u64,
    /// Sum (wrapping) of each entry's hash: a hash of the whole table that does not depend
    /// on the order in which entries came, and moves entry by entry.
    hash: u64,
    /// Entries alive.
    alive: usize,
    /// The member that holds this table, and its entry: looked up after every change (is it
    /// still alive?), in O(1) rather than by a binary search of a table that, at 10,000
    /// members, is never in the cache.
    owner: Option<(NodeId, Option<MemberEntry>)>,
}

/// Make room for one more element of a per-member table in steps of an eighth rather than by
/// doubling: the tables of a simulated group of 10,000 are 10^8 entries, and doubling leaves up
/// to half of them unused (an eighth more copying in all).
pub(super) fn grow_gently<T>(v: &mut Vec<T>) {
    if v.len() == v.capacity() {
        v.reserve_exact(v.len() / 8 + 8);
    }
}

/// Where `id` is in `list` (sorted by id), as a binary search says. Ids mostly arrive in
/// increasing order, and the newest is looked up again at once (a join is admitted, then
/// answered): the end is looked at first.
pub(super) fn find_sorted<V>(list: &[(NodeId, V)], id: NodeId) -> Result<usize, usize> {
    match list.last() {
        Some((last, _)) if *last < id => Err(list.len()),
        Some((last, _)) if *last == id => Ok(list.len() - 1),
        _ => list.binary_search_by_key(&id, |(k, _)| *k),
    }
}

/// [`find_sorted`], starting at position `hint`: ids that come in increasing order (a part of
/// another member's table, the rows of a digest) are each found a step or two after the last,
/// in memory just read, instead of by a binary search through a cold list. Any `hint` gives
/// the right answer (past the end: a plain [`find_sorted`]).
pub(super) fn find_sorted_near<V>(
    list: &[(NodeId, V)],
    hint: usize,
    id: NodeId,
) -> Result<usize, usize> {
    let n = list.len();
    if hint > n || (hint > 0 && list[hint - 1].0 >= id) {
        return find_sorted(list, id);
    }
    // Everything before `hint` is below `id`: a few steps forward, then a binary search of
    // the rest.
    let mut i = hint;
    while i < n && i < hint + 8 {
        match list[i].0.cmp(&id) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Equal => return Ok(i),
            std::cmp::Ordering::Greater => return Err(i),
        }
    }
    match list[i..].binary_search_by_key(&id, |(k, _)| *k) {
        Ok(j) => Ok(i + j),
        Err(j) => Err(i + j),
    }
}

/// One entry's share of the table hash.
fn entry_hash(id: NodeId, e: MemberEntry) -> u64 {
    let mut bytes = [0u8; 9];
    bytes[..4].copy_from_slice(&id.0.to_be_bytes());
    bytes[4..8].copy_from_slice(&e.version.to_be_bytes());
    bytes[8] = u8::from(e.alive);
    fnv1a64(&bytes)
}

impl Membership {
    /// An empty table of at most `capacity` entries.
    pub fn new(capacity: usize) -> Membership {
        Membership {
            entries: Vec::new(),
            capacity: capacity.max(1),
            sum: 0,
            hash: 0,
            alive: 0,
            owner: None,
        }
    }

    /// An empty table of at most `capacity` entries held by `owner`, whose entry it keeps at
    /// hand.
    pub fn with_owner(capacity: usize, owner: NodeId) -> Membership {
        Membership {
            owner: Some((owner, None)),
            ..Membership::new(capacity)
        }
    }

    fn find(&self, id: NodeId) -> Result<usize, usize> {
        find_sorted(&self.entries, id)
    }

    /// The entry of `id`.
    pub fn get(&self, id: NodeId) -> Option<MemberEntry> {
        if let Some((o, e)) = self.owner {
            if o == id {
                debug_assert_eq!(e, self.find(id).ok().map(|i| self.entries[i].1));
                return e;
            }
        }
        self.find(id).ok().map(|i| self.entries[i].1)
    }

    /// Whether `id` is a member.
    pub fn is_alive(&self, id: NodeId) -> bool {
        self.get(id).is_some_and(|e| e.alive)
    }

    /// Take in an entry.
    pub fn merge(&mut self, id: NodeId, e: MemberEntry) -> Merged {
        let mut hint = usize::MAX;
        self.merge_near(id, e, &mut hint)
    }

    /// [`Membership::merge`] of the next entry of a run in id order: `hint` is where the last
    /// one was (any value to start; `usize::MAX` looks the entry up from scratch), and is left
    /// after this one.
    pub fn merge_near(&mut self, id: NodeId, e: MemberEntry, hint: &mut usize) -> Merged {
        // For the checks below only: a look-up that release builds would not drop (a slice
        // index may panic), a second binary search per entry merged.
        let before = if cfg!(debug_assertions) {
            self.get(id)
        } else {
            None
        };
        let at = find_sorted_near(&self.entries, *hint, id);
        debug_assert_eq!(at, self.find(id));
        let merged = self.merge_entry(id, e, at);
        *hint = match (merged, at) {
            (Merged::Changed, Err(i)) => i + 1,
            (_, Ok(i)) => i + 1,
            (_, Err(i)) => i,
        };
        // A join of the semilattice: the table stays bounded, and what it holds for `id`
        // afterwards loses neither to what it held nor to what came in (unless refused).
        debug_assert!(self.entries.len() <= self.capacity);
        debug_assert!(before.is_none_or(|b| self.get(id).is_some_and(|now| !now.loses_to(b))));
        debug_assert!(
            matches!(merged, Merged::Full | Merged::Forged)
                || self.get(id).is_some_and(|now| !now.loses_to(e))
        );
        debug_assert!(merged != Merged::Forged || self.get(id) == before);
        merged
    }

    /// Account for entry `id` going from `old` to `new` (the running sums and count).
    fn account(&mut self, id: NodeId, old: Option<MemberEntry>, new: MemberEntry) {
        if let Some(o) = old {
            self.sum -= u64::from(o.version);
            self.hash = self.hash.wrapping_sub(entry_hash(id, o));
            self.alive -= usize::from(o.alive);
        }
        if let Some((o, e)) = self.owner.as_mut() {
            if *o == id {
                *e = Some(new);
            }
        }
        self.sum += u64::from(new.version);
        self.hash = self.hash.wrapping_add(entry_hash(id, new));
        self.alive += usize::from(new.alive);
    }

    fn merge_entry(&mut self, id: NodeId, e: MemberEntry, at: Result<usize, usize>) -> Merged {
        let full = self.entries.len() >= self.capacity;
        let cur = at.ok().map(|i| self.entries[i].1);
        // Nobody can know a version this far ahead of ours (or of none): refused, so that a
        // forged entry can neither win for ever nor make our old versions look new.
        let forged = match cur {
            Some(c) => {
                serial_after(e.version, c.version)
                    && e.version.wrapping_sub(c.version) > MAX_VERSION_STEP
            }
            None => e.version > MAX_VERSION_STEP,
        };
        if forged {
            return Merged::Forged;
        }
        match (at, cur) {
            (Ok(i), Some(c)) if c.loses_to(e) => {
                self.entries[i].1 = e;
                self.account(id, Some(c), e);
                Merged::Changed
            }
            (Ok(_), _) => Merged::Unchanged,
            (Err(_), _) if full => Merged::Full,
            (Err(i), _) => {
                grow_gently(&mut self.entries);
                self.entries.insert(i, (id, e));
                self.account(id, None, e);
                Merged::Changed
            }
        }
    }

    /// Let `id` in: a member unknown here gets version 1, a departed one its next version; a
    /// member already in is left as it is (`Unchanged`).
    pub fn admit(&mut self, id: NodeId) -> Merged {
        let version = match self.get(id) {
            Some(e) if e.alive => return Merged::Unchanged,
            Some(e) => e.version.wrapping_add(1),
            None => 1,
        };
        self.merge(
            id,
            MemberEntry {
                version,
                alive: true,
            },
        )
    }

    /// Mark `id` departed (it left, or was found silent): its next version, not alive. Returns
    /// whether it was a member.
    pub fn depart(&mut self, id: NodeId) -> bool {
        let Ok(i) = self.find(id) else {
            return false;
        };
        let old = self.entries[i].1;
        if !old.alive {
            return false;
        }
        let new = MemberEntry {
            version: old.version.wrapping_add(1),
            alive: false,
        };
        self.entries[i].1 = new;
        self.account(id, Some(old), new);
        true
    }

    /// The members, in id order.
    pub fn alive(&self) -> Vec<NodeId> {
        (self.entries.iter())
            .filter(|(_, e)| e.alive)
            .map(|(id, _)| *id)
            .collect()
    }

    /// How many members (entries alive) the table holds.
    pub fn alive_count(&self) -> usize {
        self.alive
    }

    /// Every entry, in id order.
    pub fn entries(&self) -> impl Iterator<Item = (NodeId, MemberEntry)> + '_ {
        self.entries.iter().copied()
    }

    /// The next part of the table in turn: up to `k` entries with ids after `cursor`, in id
    /// order, or the first `k` once no entry is after it (a part never wraps, so that it
    /// stays in id order for [`Membership::merge_near`]).
    pub fn part_after(&self, cursor: NodeId, k: usize) -> &[(NodeId, MemberEntry)] {
        let i = self.entries.partition_point(|(id, _)| *id <= cursor);
        let i = if i == self.entries.len() { 0 } else { i };
        &self.entries[i..self.entries.len().min(i + k)]
    }

    /// Number of entries (departed ones included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The view id: the sum of the versions (high 32 bits) and a hash of the table (low 32).
    /// Kept as entries change: no pass over the table.
    pub fn view_id(&self) -> u64 {
        debug_assert_eq!(
            self.sum,
            self.entries
                .iter()
                .map(|(_, e)| u64::from(e.version))
                .sum::<u64>()
        );
        let h = self.hash;
        (self.sum.min(u64::from(u32::MAX)) << 32) | ((h ^ (h >> 32)) & 0xffff_ffff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(version: u32, alive: bool) -> MemberEntry {
        MemberEntry { version, alive }
    }

    #[test]
    fn tables_converge_whatever_the_order_and_ids_increase() {
        let changes = [
            (NodeId(1), e(1, true)),
            (NodeId(2), e(1, true)),
            (NodeId(2), e(2, false)),
            (NodeId(3), e(1, true)),
            (NodeId(3), e(1, false)), // equal versions: departed wins
            (NodeId(2), e(3, true)),
        ];
        let mut a = Membership::new(16);
        let mut ids = vec![a.view_id()];
        for (id, x) in changes {
            assert_eq!(a.merge(id, x), Merged::Changed);
            ids.push(a.view_id());
        }
        assert!(ids.windows(2).all(|w| w[1] > w[0]), "{ids:?}");
        let mut b = Membership::new(16);
        for (id, x) in changes.iter().rev() {
            b.merge(*id, *x);
        }
        assert_eq!(a.view_id(), b.view_id());
        assert_eq!(a.alive(), vec![NodeId(1), NodeId(2)]);
        assert_eq!(b.alive(), a.alive());
        // Old news changes nothing.
        assert_eq!(a.merge(NodeId(2), e(2, true)), Merged::Unchanged);
    }

    #[test]
    fn the_running_id_is_the_id_of_the_table_it_ends_with() {
        // Changes in any order (ids below others', departures, refutations) leave the id of a
        // table built afresh from the final entries.
        let mut a = Membership::new(64);
        for id in [5, 1, 9, 3, 7] {
            a.admit(NodeId(id));
        }
        a.depart(NodeId(3));
        a.merge(NodeId(9), e(4, false));
        a.admit(NodeId(3));
        a.depart(NodeId(1));
        let mut b = Membership::new(64);
        for (id, x) in a.entries().collect::<Vec<_>>().into_iter().rev() {
            b.merge(id, x);
        }
        assert_eq!(a.view_id(), b.view_id());
        assert_eq!(a.alive_count(), a.alive().len());
        assert_eq!(a.alive(), [NodeId(3), NodeId(5), NodeId(7)]);
    }

    #[test]
    fn the_owners_entry_kept_at_hand_is_the_tables() {
        let mut m = Membership::with_owner(8, NodeId(4));
        assert_eq!(m.get(NodeId(4)), None);
        m.admit(NodeId(7));
        m.admit(NodeId(4));
        assert_eq!(m.get(NodeId(4)), Some(e(1, true)));
        m.merge(NodeId(4), e(3, false));
        assert_eq!(m.get(NodeId(4)), Some(e(3, false)));
        assert!(!m.is_alive(NodeId(4)));
        m.admit(NodeId(4));
        assert_eq!(m.get(NodeId(4)), Some(e(4, true)));
        assert!(m.depart(NodeId(4)));
        assert_eq!(m.get(NodeId(4)), Some(e(5, false)));
        assert_eq!(
            m.entries().find(|(id, _)| *id == NodeId(4)),
            Some((NodeId(4), e(5, false)))
        );
    }

    #[test]
    fn merging_near_a_hint_is_merging() {
        // Runs in id order, runs out of order, entries known, new, departed, refused: merged
        // with a moving hint, the table ends as merged one by one.
        let mut rng = crate::common::rng::SplitMix64::new(7);
        for _ in 0..50 {
            let mut a = Membership::new(48);
            let mut b = Membership::new(48);
            for _ in 0..30 {
                let id = NodeId(rng.below(64) as u32);
                a.admit(id);
                b.admit(id);
            }
            let mut run: Vec<(NodeId, MemberEntry)> = (0..40)
                .map(|_| {
                    let v = 1 + rng.below(4) as u32;
                    (NodeId(rng.below(64) as u32), e(v, rng.below(2) == 0))
                })
                .collect();
            if rng.below(2) == 0 {
                run.sort_by_key(|(id, _)| *id);
            }
            let mut hint = rng.below(80) as usize;
            for &(id, x) in &run {
                assert_eq!(b.merge_near(id, x, &mut hint), a.merge(id, x));
            }
            assert_eq!(
                a.entries().collect::<Vec<_>>(),
                b.entries().collect::<Vec<_>>()
            );
            assert_eq!(a.view_id(), b.view_id());
        }
    }

    #[test]
    fn parts_go_round_the_table_in_id_order() {
        let mut m = Membership::new(16);
        for id in [3, 1, 7, 5, 9] {
            m.admit(NodeId(id));
        }
        let ids = |p: &[(NodeId, MemberEntry)]| p.iter().map(|(id, _)| id.0).collect::<Vec<_>>();
        assert_eq!(ids(m.part_after(NodeId(0), 2)), [1, 3]);
        assert_eq!(ids(m.part_after(NodeId(3), 2)), [5, 7]);
        assert_eq!(ids(m.part_after(NodeId(7), 2)), [9]);
        assert_eq!(ids(m.part_after(NodeId(9), 2)), [1, 3]);
        assert_eq!(ids(m.part_after(NodeId(4), 9)), [5, 7, 9]);
    }

    #[test]
    fn admit_depart_and_capacity() {
        let mut m = Membership::new(2);
        assert_eq!(m.admit(NodeId(1)), Merged::Changed);
        assert_eq!(m.admit(NodeId(1)), Merged::Unchanged);
        assert!(m.depart(NodeId(1)));
        assert!(!m.depart(NodeId(1)));
        assert_eq!(m.get(NodeId(1)), Some(e(2, false)));
        assert_eq!(m.admit(NodeId(1)), Merged::Changed);
        assert_eq!(m.get(NodeId(1)), Some(e(3, true)));
        assert_eq!(m.admit(NodeId(2)), Merged::Changed);
        assert_eq!(m.admit(NodeId(3)), Merged::Full);
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn no_version_wins_for_ever_and_jumps_are_refused() {
        let mut m = Membership::new(4);
        m.admit(NodeId(1));
        // The top of the range is old news to version 1, a long jump is refused.
        assert_eq!(m.merge(NodeId(1), e(u32::MAX, false)), Merged::Unchanged);
        let far = MAX_VERSION_STEP + 2;
        assert_eq!(m.merge(NodeId(1), e(far, false)), Merged::Forged);
        assert_eq!(m.merge(NodeId(2), e(far, false)), Merged::Forged);
        assert_eq!(m.len(), 1);
        // Even at the top, the next version (wrapped) refutes a departure.
        let mut m = Membership::new(4);
        assert_eq!(
            m.merge(NodeId(1), e(MAX_VERSION_STEP, true)),
            Merged::Changed
        );
        let mut v = MAX_VERSION_STEP;
        while v != u32::MAX {
            v = v.saturating_add(MAX_VERSION_STEP);
            assert_eq!(m.merge(NodeId(1), e(v, false)), Merged::Changed);
        }
        assert_eq!(m.admit(NodeId(1)), Merged::Changed);
        assert_eq!(m.get(NodeId(1)), Some(e(0, true)));
    }
}
