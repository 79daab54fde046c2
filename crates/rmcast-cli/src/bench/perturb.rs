//! `rmcast bench --perturb F:P`: the real-process form of the experiment of "Throughput
//! Stability of Reliable Multicast Protocols" by Öznur Özkasap and Kenneth P. Birman. The last
//! `F` workers of the group (never the sender, member 1) are *perturbed*: every
//! [`PERIOD`] each of them, with probability `P`, sleeps for one period — its process is
//! stopped with SIGSTOP and continued with SIGCONT a period later. Throughput is then read
//! at the unperturbed members in [`WINDOW_MS`] windows: a protocol whose senders wait for the
//! slowest member shows it there as dips.
//!
//! The decisions come from a generator seeded by `--seed`, drawn in a fixed order (tick by
//! tick, member by member), so that a run's schedule is the same every time: tick `k` stops the
//! same members whatever the host. A tick the driver reaches late is still drawn (its draws are
//! not skipped), and the state it leaves is applied at once.
//!
//! The perturbation starts when every worker is in the group (all ready files exist) and lasts
//! the measured duration; then every stopped worker is continued, so that the barrier and the
//! leave at the end run unperturbed. Whatever way the run ends, [`WorkerSpec::run`] continues
//! a worker that is still stopped before it kills it or returns.
//!
//! [`WorkerSpec::run`]: crate::workers::WorkerSpec::run

use crate::member::RecoveryArgs;
use crate::worker::WINDOW_MS;
use crate::workers::Running;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One perturbation tick: a perturbed member sleeps this long, with the probability of `--perturb`,
/// once per period.
pub const PERIOD: Duration = Duration::from_millis(100);
/// How often the bench looks at its workers while perturbing: fine enough for [`PERIOD`].
pub const POLL: Duration = Duration::from_millis(10);
/// The default `--seed` of the perturbation schedule.
pub const DEFAULT_SEED: u64 = 1;

/// `--perturb F:P`: `members` members sleep with probability `probability` every [`PERIOD`].
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Perturb {
    /// Members perturbed: the last ones of the group.
    pub members: u16,
    /// Probability, per member and period, of sleeping that period.
    pub probability: f64,
}

/// Parse `F:P` (`4:0.5`).
pub fn parse_perturb(s: &str) -> Result<Perturb, String> {
    let (f, p) = s
        .trim()
        .split_once(':')
        .ok_or_else(|| format!("expected F:P (members:probability, e.g. 4:0.5), got `{s}`"))?;
    let members: u16 = f
        .trim()
        .parse()
        .map_err(|_| format!("`{f}` is not a number of members"))?;
    let probability: f64 = p
        .trim()
        .parse()
        .map_err(|_| format!("`{p}` is not a probability"))?;
    if members == 0 {
        return Err("perturb at least one member (F >= 1)".into());
    }
    if !(0.0..=1.0).contains(&probability) {
        return Err(format!("probability {probability} is not within 0..=1"));
    }
    Ok(Perturb {
        members,
        probability,
    })
}

/// The failure detection of perturbed runs: a member is probed after 2 s of silence and counted
/// as failed only after 10 unanswered probes of at least 1 s each, so about 12 s after it was
/// last heard. A sleep is one period (100 ms); at probability 0.9 a run of consecutive sleeps
/// longer than 12 s has a chance of 0.9^120 (about 3e-6) per run that starts, so a sleeper is
/// not taken for a crash. The sequencer probes with these values; the gossip engine has no
/// probes, and its silence timeout (5 s) stays on.
pub fn generous_recovery() -> RecoveryArgs {
    RecoveryArgs {
        manual_reset: false,
        min_members: 0,
        alive_interval_ms: 2_000,
        alive_retries: 10,
        alive_timeout_ms: 1_000,
    }
}

/// SplitMix64 (Steele, Lea and Flood): small, seeded, and the same sequence on every host.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The perturbation of one run, driven from the tick of [`crate::workers::WorkerSpec::run`].
pub struct Perturber {
    /// Worker indices perturbed.
    targets: Vec<usize>,
    probability: f64,
    seed: u64,
    rng: SplitMix64,
    /// Where the workers' ready files are, and how many there are.
    ready: Vec<PathBuf>,
    /// How long to perturb once everybody is in.
    length: Duration,
    /// When everybody was in.
    start: Option<Instant>,
    /// The next tick to draw.
    next_tick: u64,
    /// Whether each target should be asleep, as of the last tick drawn.
    asleep: Vec<bool>,
    /// Since when each target is stopped.
    stopped_since: Vec<Option<Instant>>,
    /// Time each target spent stopped.
    stopped_total: Vec<Duration>,
    /// Sleeps drawn.
    sleeps: u64,
    /// Ticks drawn.
    ticks: u64,
    /// Ticks reached more than one period late (their state was applied late).
    late_ticks: u64,
    done: bool,
}

impl Perturber {
    /// The perturbation of the last `p.members` of `members` workers (never worker 1), whose
    /// ready files are `ready-<index>` in `dir`, for `length` once every worker is in.
    pub fn new(p: Perturb, members: usize, seed: u64, dir: &Path, length: Duration) -> Perturber {
        let f = (p.members as usize).min(members.saturating_sub(1));
        let targets: Vec<usize> = (members - f + 1..=members).collect();
        Perturber {
            probability: p.probability,
            seed,
            rng: SplitMix64(seed),
            ready: (1..=members)
                .map(|i| dir.join(format!("ready-{i}")))
                .collect(),
            length,
            start: None,
            next_tick: 0,
            asleep: vec![false; targets.len()],
            stopped_since: vec![None; targets.len()],
            stopped_total: vec![Duration::ZERO; targets.len()],
            sleeps: 0,
            ticks: 0,
            late_ticks: 0,
            done: false,
            targets,
        }
    }

    /// One look: start once everybody is in, draw the ticks that are due, stop and continue
    /// workers accordingly, and continue everybody at the end.
    pub fn tick(&mut self, running: &mut Running<'_>) -> Result<()> {
        if self.done {
            return Ok(());
        }
        let now = Instant::now();
        let start = match self.start {
            Some(s) => s,
            None => {
                if !self.ready.iter().all(|r| r.exists()) {
                    return Ok(());
                }
                *self.start.insert(now)
            }
        };
        let elapsed = now.duration_since(start);
        if elapsed >= self.length {
            return self.finish(running);
        }
        let due = (elapsed.as_nanos() / PERIOD.as_nanos()) as u64;
        if self.next_tick > due {
            return Ok(());
        }
        if due > self.next_tick {
            self.late_ticks += 1;
        }
        while self.next_tick <= due {
            for a in self.asleep.iter_mut() {
                *a = self.rng.next_f64() < self.probability;
                self.sleeps += u64::from(*a);
            }
            self.next_tick += 1;
            self.ticks += 1;
        }
        for i in 0..self.targets.len() {
            let w = self.targets[i];
            let stopped = running.is_stopped(w);
            if self.asleep[i] && !stopped {
                if running.stop(w)? {
                    self.stopped_since[i] = Some(now);
                }
            } else if !self.asleep[i] && stopped {
                running.resume(w)?;
                self.account(i, now);
            }
        }
        Ok(())
    }

    fn account(&mut self, i: usize, now: Instant) {
        if let Some(s) = self.stopped_since[i].take() {
            self.stopped_total[i] += now.duration_since(s);
        }
    }

    /// Continue every stopped worker; no more perturbation.
    pub fn finish(&mut self, running: &mut Running<'_>) -> Result<()> {
        self.done = true;
        let now = Instant::now();
        running.resume_all()?;
        for i in 0..self.targets.len() {
            self.account(i, now);
        }
        Ok(())
    }

    /// The workers perturbed.
    pub fn targets(&self) -> &[usize] {
        &self.targets
    }

    /// Sleeps drawn so far.
    pub fn sleeps(&self) -> u64 {
        self.sleeps
    }

    /// What the run did, for the notes under the table.
    pub fn summary(&self) -> String {
        let stopped: Duration = self.stopped_total.iter().sum();
        let per = stopped.as_secs_f64() / self.targets.len().max(1) as f64;
        let span = (self.ticks as f64 * PERIOD.as_secs_f64()).max(1e-9);
        format!(
            "perturbed workers {}..={} (seed {}): {} sleeps drawn over {} ticks of {} ms, \
             each stopped {:.1} s on average ({:.0}% of {:.1} s){}",
            self.targets.first().copied().unwrap_or(0),
            self.targets.last().copied().unwrap_or(0),
            self.seed,
            self.sleeps,
            self.ticks,
            PERIOD.as_millis(),
            per,
            100.0 * per / span,
            span,
            if self.late_ticks > 0 {
                format!(", {} ticks applied late", self.late_ticks)
            } else {
                String::new()
            }
        )
    }
}

/// Throughput per window at the unperturbed members of a run.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct WindowFigures {
    /// Members perturbed (`F`).
    pub perturbed: usize,
    /// Probability of a sleep per period (`P`).
    pub probability: f64,
    /// Members the figures are over: the unperturbed receivers.
    pub members: Vec<u32>,
    /// Windows per member the figures are over (those of the measured duration).
    pub windows: usize,
    /// Mean of messages per second over those windows.
    pub mean_msgs_per_s: f64,
    /// Standard deviation of messages per second over those windows.
    pub std_msgs_per_s: f64,
    /// The lowest window, in messages per second.
    pub min_msgs_per_s: f64,
    /// Sleeps drawn by the schedule.
    pub sleeps: u64,
}

/// Mean, standard deviation (of the population) and minimum, in messages per second, of the
/// first `n` windows of every member in `windows` (a member that delivered nothing in a window,
/// or none after it, counts zero there), pooled.
pub fn window_stats(windows: &[&[u64]], n: usize) -> (f64, f64, f64) {
    let per_s = 1000.0 / WINDOW_MS as f64;
    let samples: Vec<f64> = windows
        .iter()
        .flat_map(|w| (0..n).map(move |i| w.get(i).copied().unwrap_or(0) as f64 * per_s))
        .collect();
    if samples.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let mean = samples.iter().sum::<f64>() / samples.len() as f64;
    let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / samples.len() as f64;
    let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
    (mean, var.sqrt(), min)
}

/// The lowest rate, in messages per second, over the members in `windows` in each of the
/// first `n` windows (a member with no count for a window delivered nothing in it).
pub fn lowest_per_window(windows: &[&[u64]], n: usize) -> Vec<f64> {
    let per_s = 1000.0 / WINDOW_MS as f64;
    (0..n)
        .map(|i| {
            windows
                .iter()
                .map(|w| w.get(i).copied().unwrap_or(0))
                .min()
                .unwrap_or(0) as f64
                * per_s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_per_window_takes_the_slowest_member_and_counts_missing_windows_as_zero() {
        let a: &[u64] = &[500, 400, 500];
        let b: &[u64] = &[450, 500];
        assert_eq!(
            lowest_per_window(&[a, b], 3),
            vec![900.0, 800.0, 0.0],
            "windows of 500 ms: counts doubled"
        );
        assert!(lowest_per_window(&[], 2).iter().all(|&r| r == 0.0));
    }

    #[test]
    fn perturb_argument() {
        assert_eq!(
            parse_perturb("4:0.5"),
            Ok(Perturb {
                members: 4,
                probability: 0.5
            })
        );
        assert_eq!(parse_perturb(" 1 : 0 ").unwrap().probability, 0.0);
        assert!(parse_perturb("4").unwrap_err().contains("F:P"));
        assert!(parse_perturb("0:0.5").is_err());
        assert!(parse_perturb("2:1.5").unwrap_err().contains("0..=1"));
        assert!(parse_perturb("x:0.5").is_err());
    }

    #[test]
    fn schedule_is_seeded_and_near_the_probability() {
        let draw = |seed| {
            let mut r = SplitMix64(seed);
            (0..10_000).map(|_| r.next_f64() < 0.3).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        let hits = draw(7).iter().filter(|&&b| b).count();
        assert!((2_800..3_200).contains(&hits), "{hits}");
    }

    #[test]
    fn targets_are_the_last_members_never_the_first() {
        let p = Perturb {
            members: 4,
            probability: 0.5,
        };
        let dir = Path::new("/nonexistent");
        let t = Perturber::new(p, 16, 1, dir, Duration::from_secs(1));
        assert_eq!(t.targets(), &[13, 14, 15, 16]);
        let t = Perturber::new(p, 3, 1, dir, Duration::from_secs(1));
        assert_eq!(t.targets(), &[2, 3]);
    }

    #[test]
    fn window_statistics() {
        let a = [100u64, 100, 50];
        let b = [100u64, 100];
        let (mean, std, min) = window_stats(&[&a, &b], 3);
        // Samples in msgs/s: 200 200 100 200 200 0.
        assert!((mean - 150.0).abs() < 1e-9);
        assert!((min - 0.0).abs() < 1e-9);
        let var = (4.0 * 50.0f64.powi(2) + 50.0f64.powi(2) + 150.0f64.powi(2)) / 6.0;
        assert!((std - var.sqrt()).abs() < 1e-9);
        assert!(window_stats(&[], 3).0.is_nan());
    }
}
