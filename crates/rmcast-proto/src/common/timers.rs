//! The earliest of a set of named deadlines, and a table of deadlines indexed by an enum.
//!
//! Why here: a sans-IO engine owns several timers (requests, NACKs, joins, leaves, probes,
//! recovery rounds) spread over its parts, and the driver asks for the earliest after every
//! input. [`Deadlines`] folds them in one pass without allocating, keeping the name of the
//! earliest so that a trace can say which timer it armed. [`Timers`] keeps an engine's own
//! deadlines in one array with one slot per [`TimerKey`], so that a timer is armed, cleared and
//! tested by its key rather than by a field of its own, and the earliest is one fold over the
//! table.

use crate::engine::Time;
use std::marker::PhantomData;

/// A fold over optional deadlines: the earliest, and its name.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Deadlines {
    earliest: Option<(Time, &'static str)>,
}

impl Deadlines {
    /// No deadline yet.
    pub fn new() -> Self {
        Deadlines::default()
    }

    /// Take deadline `at`, named `name`, into account (`None`: that timer is not running).
    /// Among equal deadlines the first keeps its name.
    pub fn at(&mut self, name: &'static str, at: Option<Time>) -> &mut Self {
        if let Some(t) = at {
            match self.earliest {
                Some((e, _)) if e <= t => {}
                _ => self.earliest = Some((t, name)),
            }
        }
        self
    }

    /// The earliest deadline taken into account.
    pub fn earliest(&self) -> Option<Time> {
        self.earliest.map(|(t, _)| t)
    }

    /// The earliest deadline and the name of its timer.
    pub fn earliest_named(&self) -> Option<(Time, &'static str)> {
        self.earliest
    }
}

/// The keys of a [`Timers`] table: an enum of the engine's timers.
pub trait TimerKey: Copy + Eq + std::fmt::Debug + 'static {
    /// Every key, in slot order (the order ties of [`Timers::earliest`] are broken in).
    const ALL: &'static [Self];
    /// The key's slot: its position in [`TimerKey::ALL`].
    fn index(self) -> usize;
    /// The timer's name, for traces.
    fn name(self) -> &'static str;
}

/// One optional deadline per key of `K` (`N` = the number of keys).
///
/// Invariant: `N == K::ALL.len()` and every key's index is its position in `K::ALL`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timers<K: TimerKey, const N: usize> {
    at: [Option<Time>; N],
    keys: PhantomData<K>,
}

impl<K: TimerKey, const N: usize> Default for Timers<K, N> {
    fn default() -> Self {
        Timers::new()
    }
}

impl<K: TimerKey, const N: usize> Timers<K, N> {
    /// No timer running.
    pub fn new() -> Self {
        debug_assert_eq!(K::ALL.len(), N, "one slot per key");
        debug_assert!(K::ALL.iter().enumerate().all(|(i, k)| k.index() == i));
        Timers {
            at: [None; N],
            keys: PhantomData,
        }
    }

    /// When timer `k` fires (`None`: not running).
    pub fn get(&self, k: K) -> Option<Time> {
        self.at[k.index()]
    }

    /// Run timer `k` until `at`, or stop it (`None`).
    pub fn set(&mut self, k: K, at: Option<Time>) {
        self.at[k.index()] = at;
    }

    /// Run timer `k` until `at`.
    pub fn arm(&mut self, k: K, at: Time) {
        self.set(k, Some(at));
    }

    /// Stop timer `k`.
    pub fn clear(&mut self, k: K) {
        self.set(k, None);
    }

    /// Whether timer `k` runs.
    pub fn is_set(&self, k: K) -> bool {
        self.get(k).is_some()
    }

    /// Whether timer `k` runs and is due at `now`.
    pub fn due(&self, k: K, now: Time) -> bool {
        self.get(k).is_some_and(|t| now >= t)
    }

    /// The earliest running timer and its key (among equal deadlines, the first key).
    pub fn earliest(&self) -> Option<(Time, K)> {
        let mut best: Option<(Time, K)> = None;
        for (i, t) in self.at.iter().enumerate() {
            if let Some(t) = *t {
                if best.is_none_or(|(b, _)| t < b) {
                    best = Some((t, K::ALL[i]));
                }
            }
        }
        best
    }

    /// The running timers folded into a [`Deadlines`], by name.
    pub fn deadlines(&self) -> Deadlines {
        let mut d = Deadlines::new();
        for (i, t) in self.at.iter().enumerate() {
            d.at(K::ALL[i].name(), *t);
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn earliest_wins_and_first_name_keeps_ties() {
        let t = |ms| Time::ZERO + Duration::from_millis(ms);
        let mut d = Deadlines::new();
        assert_eq!(d.earliest(), None);
        d.at("a", None).at("b", Some(t(5))).at("c", Some(t(3)));
        assert_eq!(d.earliest_named(), Some((t(3), "c")));
        d.at("d", Some(t(3))).at("e", Some(t(9)));
        assert_eq!(d.earliest_named(), Some((t(3), "c")));
        assert_eq!(d.earliest(), Some(t(3)));
    }

    #[derive(Copy, Clone, Debug, PartialEq, Eq)]
    enum K {
        A,
        B,
        C,
    }

    impl TimerKey for K {
        const ALL: &'static [K] = &[K::A, K::B, K::C];
        fn index(self) -> usize {
            self as usize
        }
        fn name(self) -> &'static str {
            match self {
                K::A => "a",
                K::B => "b",
                K::C => "c",
            }
        }
    }

    #[test]
    fn a_table_keeps_one_deadline_per_key_and_finds_the_earliest() {
        let t = |ms| Time::ZERO + Duration::from_millis(ms);
        let mut table: Timers<K, 3> = Timers::new();
        assert_eq!(table.earliest(), None);
        table.arm(K::C, t(3));
        table.arm(K::A, t(7));
        table.set(K::B, Some(t(3)));
        // Ties go to the first key in slot order.
        assert_eq!(table.earliest(), Some((t(3), K::B)));
        assert_eq!(table.deadlines().earliest_named(), Some((t(3), "b")));
        assert!(table.due(K::B, t(3)) && !table.due(K::A, t(6)));
        table.clear(K::B);
        table.clear(K::C);
        assert!(!table.is_set(K::C));
        assert_eq!(table.earliest(), Some((t(7), K::A)));
    }
}
