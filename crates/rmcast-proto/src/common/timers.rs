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

/// Timers a [`Timers`] table holds at most: an engine's timers fit a fixed array (no
/// allocation per engine or per poll).
pub const MAX_TIMERS: usize = 16;

/// The keys of a [`Timers`] table: an enum of the engine's timers.
pub trait TimerKey: Copy + Eq + std::fmt::Debug + 'static {
    /// Every key, in slot order (the order ties of [`Timers::earliest`] are broken in); at
    /// most [`MAX_TIMERS`].
    const ALL: &'static [Self];
    /// The key's slot: its position in [`TimerKey::ALL`].
    fn index(self) -> usize;
    /// The timer's name, for traces.
    fn name(self) -> &'static str;
}

/// One optional deadline per key of `K`: an engine's timers in one table instead of an
/// `Option<Time>` field each.
///
/// Invariant: `K::ALL` has at most [`MAX_TIMERS`] keys and every key's index is its position
/// in `K::ALL`; slots past `K::ALL.len()` stay empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timers<K: TimerKey> {
    at: [Option<Time>; MAX_TIMERS],
    keys: PhantomData<K>,
}

impl<K: TimerKey> Default for Timers<K> {
    fn default() -> Self {
        Timers::new()
    }
}

impl<K: TimerKey> Timers<K> {
    /// No timer running.
    pub fn new() -> Self {
        assert!(K::ALL.len() <= MAX_TIMERS, "at most {MAX_TIMERS} timers");
        debug_assert!(K::ALL.iter().enumerate().all(|(i, k)| k.index() == i));
        Timers {
            at: [None; MAX_TIMERS],
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

    /// Run timer `k` until `at` unless it runs already; when it fires.
    pub fn arm_once(&mut self, k: K, at: Time) -> Time {
        *self.at[k.index()].get_or_insert(at)
    }

    /// Stop timer `k`.
    pub fn clear(&mut self, k: K) {
        self.set(k, None);
    }

    /// Whether timer `k` runs.
    pub fn is_armed(&self, k: K) -> bool {
        self.get(k).is_some()
    }

    /// Whether timer `k` runs and is due at `now`.
    pub fn due(&self, k: K, now: Time) -> bool {
        self.get(k).is_some_and(|t| now >= t)
    }

    /// The earliest running timer and its key (among equal deadlines, the first key).
    pub fn earliest(&self) -> Option<(Time, K)> {
        let mut best: Option<(Time, K)> = None;
        for &k in K::ALL {
            if let Some(t) = self.get(k) {
                if best.is_none_or(|(b, _)| t < b) {
                    best = Some((t, k));
                }
            }
        }
        best
    }

    /// The running timers for which `enabled` holds, folded into a [`Deadlines`] by name.
    pub fn deadlines(&self, mut enabled: impl FnMut(K) -> bool) -> Deadlines {
        let mut d = Deadlines::new();
        for &k in K::ALL {
            if enabled(k) {
                d.at(k.name(), self.get(k));
            }
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
        let mut table: Timers<K> = Timers::new();
        assert_eq!(table.earliest(), None);
        table.arm(K::C, t(3));
        table.arm(K::A, t(7));
        table.set(K::B, Some(t(3)));
        // Ties go to the first key in slot order.
        assert_eq!(table.earliest(), Some((t(3), K::B)));
        assert_eq!(
            table.deadlines(|_| true).earliest_named(),
            Some((t(3), "b"))
        );
        assert!(table.due(K::B, t(3)) && !table.due(K::A, t(6)));
        table.clear(K::B);
        table.clear(K::C);
        assert!(!table.is_armed(K::C));
        assert_eq!(table.earliest(), Some((t(7), K::A)));
    }

    #[test]
    fn arm_once_keeps_a_running_timer_and_the_fold_skips_disabled_ones() {
        let t = |ms| Time::ZERO + Duration::from_millis(ms);
        let mut tt = Timers::<K>::new();
        tt.arm(K::A, t(5));
        assert_eq!(tt.arm_once(K::A, t(9)), t(5));
        assert_eq!(tt.arm_once(K::B, t(7)), t(7));
        assert_eq!(
            tt.deadlines(|k| k != K::A).earliest_named(),
            Some((t(7), "b"))
        );
        tt.clear(K::B);
        assert_eq!(tt.deadlines(|k| k != K::A).earliest(), None);
    }
}
