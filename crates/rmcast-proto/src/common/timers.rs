//! The earliest of a set of named deadlines.
//!
//! Why here: a sans-IO engine owns several timers (requests, NACKs, joins, leaves, probes,
//! recovery rounds) spread over its parts, and the driver asks for the earliest after every
//! input. [`Deadlines`] folds them in one pass without allocating, keeping the name of the
//! earliest so that a trace can say which timer it armed.

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

/// The timers of one engine, named by a small enum: what a [`Timers`] table is indexed by.
pub trait TimerKind: Copy + 'static {
    /// Every kind, each once; [`TimerKind::index`] numbers them in this order.
    const ALL: &'static [Self];
    /// This kind's place in [`TimerKind::ALL`].
    fn index(self) -> usize;
    /// The name a trace shows for this timer.
    fn name(self) -> &'static str;
}

/// One deadline per timer kind, armed or not: an engine's timers in one table instead of an
/// `Option<Time>` field each, folded by [`Timers::deadlines`] in one pass.
#[derive(Clone, Debug)]
pub struct Timers<K: TimerKind> {
    at: Vec<Option<Time>>,
    kind: PhantomData<K>,
}

impl<K: TimerKind> Default for Timers<K> {
    fn default() -> Self {
        Timers::new()
    }
}

impl<K: TimerKind> Timers<K> {
    /// Every timer stopped.
    pub fn new() -> Self {
        debug_assert!(K::ALL.iter().enumerate().all(|(i, k)| k.index() == i));
        Timers {
            at: vec![None; K::ALL.len()],
            kind: PhantomData,
        }
    }

    /// When timer `k` fires (`None`: stopped).
    pub fn get(&self, k: K) -> Option<Time> {
        self.at[k.index()]
    }

    /// Whether timer `k` runs.
    pub fn is_armed(&self, k: K) -> bool {
        self.get(k).is_some()
    }

    /// Set timer `k` to `at` (`None` stops it).
    pub fn set(&mut self, k: K, at: Option<Time>) {
        self.at[k.index()] = at;
    }

    /// Arm timer `k` for `at`.
    pub fn arm(&mut self, k: K, at: Time) {
        self.set(k, Some(at));
    }

    /// Arm timer `k` for `at` unless it runs already; when it fires.
    pub fn arm_once(&mut self, k: K, at: Time) -> Time {
        *self.at[k.index()].get_or_insert(at)
    }

    /// Stop timer `k`.
    pub fn clear(&mut self, k: K) {
        self.set(k, None);
    }

    /// Whether timer `k` runs and is due at `now`.
    pub fn due(&self, k: K, now: Time) -> bool {
        self.get(k).is_some_and(|t| now >= t)
    }

    /// The running timers for which `enabled` holds, folded by name.
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

    #[derive(Copy, Clone, Debug, PartialEq)]
    enum K {
        A,
        B,
    }

    impl TimerKind for K {
        const ALL: &'static [K] = &[K::A, K::B];
        fn index(self) -> usize {
            self as usize
        }
        fn name(self) -> &'static str {
            match self {
                K::A => "a",
                K::B => "b",
            }
        }
    }

    #[test]
    fn table_arms_clears_and_folds_enabled_timers() {
        let t = |ms| Time::ZERO + Duration::from_millis(ms);
        let mut tt = Timers::<K>::new();
        assert_eq!(tt.deadlines(|_| true).earliest(), None);
        tt.arm(K::A, t(5));
        assert_eq!(tt.arm_once(K::A, t(9)), t(5));
        assert_eq!(tt.arm_once(K::B, t(7)), t(7));
        assert!(tt.due(K::A, t(5)) && !tt.due(K::B, t(6)));
        assert_eq!(tt.deadlines(|_| true).earliest_named(), Some((t(5), "a")));
        assert_eq!(
            tt.deadlines(|k| k != K::A).earliest_named(),
            Some((t(7), "b"))
        );
        tt.clear(K::B);
        assert!(!tt.is_armed(K::B));
        assert_eq!(tt.deadlines(|k| k != K::A).earliest(), None);
    }
}
