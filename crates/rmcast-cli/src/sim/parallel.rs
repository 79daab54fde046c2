//! Independent simulator runs spread over threads, shared by the experiments.

use indicatif::{MultiProgress, ProgressBar};
use std::sync::OnceLock;

/// Where the runs' bars are drawn when another bar is already on the terminal
/// (`--experiment all` draws one over the experiments): two bars drawn independently to the
/// same terminal would overwrite each other's line.
static UNDER: OnceLock<MultiProgress> = OnceLock::new();

/// Draw every later bar of [`run_parallel`] under `multi`'s other bars (once per process).
pub fn draw_under(multi: MultiProgress) {
    // A second call would have nothing new to add: the first's bars are on the terminal.
    let _ = UNDER.set(multi);
}

/// `f` of every job, on `threads` threads ([`rmcast_sim::parallel::map_parallel`]); the results
/// come back in job order. With a terminal on stderr, a progress bar counts the runs done there.
pub fn run_parallel<J: Sync, R: Send>(
    jobs: &[J],
    threads: usize,
    f: impl Fn(&J) -> R + Sync,
) -> Vec<R> {
    let pb = crate::bench::bar(Some(jobs.len() as u64), "runs".into());
    let pb: ProgressBar = match UNDER.get() {
        Some(multi) => multi.add(pb),
        None => pb,
    };
    let results = rmcast_sim::parallel::map_parallel(jobs, threads, f, &|| pb.inc(1));
    match UNDER.get() {
        // Under another bar, a finished one goes: the next experiment draws its own.
        Some(multi) => {
            pb.finish_and_clear();
            multi.remove(&pb);
        }
        None => pb.finish(),
    }
    results
}
