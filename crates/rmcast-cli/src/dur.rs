//! Durations on the command line, one style for every flag: a value with its unit as people
//! write it (`3s`, `500ms`, `1m30s`, `250us`; humantime's grammar), or a bare number in the
//! flag's own unit, named in its help (as Aeron's properties take them), so that scripts written
//! for the older `--*-ms` and `--*-secs` spellings, kept as aliases, mean what they meant.
//!
//! Each parser returns the whole number of its unit the command works in, and refuses a value
//! outside the flag's range, saying the range with units.

use std::time::Duration;

/// A flag's unit: what a bare number means and what the parsed value counts.
#[derive(Copy, Clone, Debug)]
pub enum Unit {
    /// Microseconds.
    Micros,
    /// Milliseconds.
    Millis,
    /// Seconds.
    Secs,
}

impl Unit {
    fn one(self) -> Duration {
        match self {
            Unit::Micros => Duration::from_micros(1),
            Unit::Millis => Duration::from_millis(1),
            Unit::Secs => Duration::from_secs(1),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Unit::Micros => "microseconds",
            Unit::Millis => "milliseconds",
            Unit::Secs => "seconds",
        }
    }

    fn of(self, d: Duration) -> u128 {
        d.as_nanos() / self.one().as_nanos()
    }
}

/// `s` as a whole number of `unit`s within `lo..=hi` (in `unit`s).
pub fn parse(s: &str, unit: Unit, lo: u64, hi: u64) -> Result<u64, String> {
    let t = s.trim();
    let d = if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        let n: u64 = t.parse().map_err(|_| format!("{t} is too large"))?;
        unit.one()
            .checked_mul(u32::try_from(n).map_err(|_| format!("{t} is too large"))?)
            .ok_or_else(|| format!("{t} is too large"))?
    } else {
        humantime::parse_duration(t).map_err(|e| {
            format!(
                "{e}: write a duration such as 3s, 500ms or 1m30s (a bare number is {})",
                unit.name()
            )
        })?
    };
    let n = unit.of(d);
    if d > Duration::ZERO && n == 0 {
        return Err(format!(
            "{t} is less than one of the {} this setting counts",
            unit.name()
        ));
    }
    let show = |v: u64| humantime::format_duration(unit.one() * v as u32).to_string();
    if n < lo as u128 || n > hi as u128 {
        return Err(format!(
            "{t} is outside {}..={}",
            if lo == 0 { "0s".into() } else { show(lo) },
            show(hi)
        ));
    }
    Ok(n as u64)
}

/// A value parser for a flag counted in `unit`s, within `lo..=hi` of them.
pub fn range(
    unit: Unit,
    lo: u64,
    hi: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s| parse(s, unit, lo, hi)
}

/// Milliseconds, within `lo..=hi` of them.
pub fn ms(lo: u64, hi: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync {
    range(Unit::Millis, lo, hi)
}

/// Seconds, within `lo..=hi` of them.
pub fn secs(lo: u64, hi: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync {
    range(Unit::Secs, lo, hi)
}

/// Microseconds, within `lo..=hi` of them.
pub fn us(lo: u64, hi: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync {
    range(Unit::Micros, lo, hi)
}

/// `s` as a fraction of `unit`s (a bare number, decimals allowed, is in `unit`s), at least 0.
fn parse_f64(s: &str, unit: Unit) -> Result<f64, String> {
    let t = s.trim();
    if let Ok(x) = t.parse::<f64>() {
        return if x.is_finite() && x >= 0.0 {
            Ok(x)
        } else {
            Err(format!("{t} is not a duration of at least 0"))
        };
    }
    let d = humantime::parse_duration(t).map_err(|e| {
        format!(
            "{e}: write a duration such as 3s, 500ms or 1.5 (a bare number is {})",
            unit.name()
        )
    })?;
    Ok(d.as_secs_f64() / unit.one().as_secs_f64())
}

/// Milliseconds as a fraction (`1.5`, `250us`, `2ms`).
pub fn ms_f64(s: &str) -> Result<f64, String> {
    parse_f64(s, Unit::Millis)
}

/// Seconds as a fraction (`10`, `2.5`, `1m`).
pub fn secs_f64(s: &str) -> Result<f64, String> {
    parse_f64(s, Unit::Secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bare_numbers() {
        assert_eq!(parse("3s", Unit::Millis, 0, u64::MAX >> 1), Ok(3000));
        assert_eq!(parse("500ms", Unit::Millis, 0, 10_000), Ok(500));
        assert_eq!(parse("1m30s", Unit::Secs, 0, 1000), Ok(90));
        assert_eq!(parse("2500", Unit::Millis, 0, 10_000), Ok(2500));
        assert_eq!(parse("250us", Unit::Micros, 0, 1000), Ok(250));
        assert_eq!(parse("0", Unit::Millis, 0, 10), Ok(0));
        assert_eq!(ms_f64("1.5"), Ok(1.5));
        assert_eq!(ms_f64("250us"), Ok(0.25));
        assert_eq!(secs_f64("1m"), Ok(60.0));
        assert!(ms_f64("-1").is_err());
    }

    #[test]
    fn bad_values_say_what_is_wrong() {
        let e = parse("3 parsecs", Unit::Millis, 0, 10_000).unwrap_err();
        assert!(
            e.contains("such as 3s") && e.contains("milliseconds"),
            "{e}"
        );
        let e = parse("2h", Unit::Millis, 0, 60_000).unwrap_err();
        assert!(e.contains("outside") && e.contains("1m"), "{e}");
        let e = parse("10us", Unit::Millis, 0, 1000).unwrap_err();
        assert!(e.contains("less than one"), "{e}");
        let e = parse("0s", Unit::Millis, 1, 1000).unwrap_err();
        assert!(e.contains("outside 1ms..=1s"), "{e}");
    }
}
