//! The earliest of a set of named deadlines.
//!
//! Why here: a sans-IO engine owns several timers (requests, NACKs, joins, leaves, probes,
//! recovery rounds) spread over its parts, and the driver asks for the earliest after every
//! input. [`Deadlines`] folds them in one pass without allocating, keeping the name of the
//! earliest so that a trace can say which timer it armed.

use crate::engine::Time;

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
}
