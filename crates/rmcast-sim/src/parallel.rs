//! Independent simulator runs on several threads (rayon), for the sweeps and the papers'
//! experiments: each run stays deterministic, and the results come back in job order.

use rayon::prelude::*;

/// `f` of every job on a pool of `threads` threads (at least one, at most one per job); the
/// results in job order. `on_done` is called after each job, from the thread that ran it
/// (a progress bar counts there).
pub fn map_parallel<J: Sync, R: Send>(
    jobs: &[J],
    threads: usize,
    f: impl Fn(&J) -> R + Sync,
    on_done: &(dyn Fn() + Sync),
) -> Vec<R> {
    let run = || -> Vec<R> {
        jobs.par_iter()
            // One job per task: runs differ in length, and work stealing evens them out.
            .with_max_len(1)
            .map(|j| {
                let r = f(j);
                on_done();
                r
            })
            .collect()
    };
    match rayon::ThreadPoolBuilder::new()
        .num_threads(threads.clamp(1, jobs.len().max(1)))
        .build()
    {
        Ok(pool) => pool.install(run),
        // No threads to be had: the jobs run here, one after the other.
        Err(_) => jobs
            .iter()
            .map(|j| {
                let r = f(j);
                on_done();
                r
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn results_come_back_in_job_order_and_every_job_is_counted() {
        let jobs: Vec<u64> = (0..100).collect();
        let done = AtomicUsize::new(0);
        let out = map_parallel(&jobs, 4, |j| j * j, &|| {
            done.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(out, jobs.iter().map(|j| j * j).collect::<Vec<_>>());
        assert_eq!(done.load(Ordering::Relaxed), 100);
        assert!(map_parallel(&[] as &[u64], 4, |j| *j, &|| {}).is_empty());
    }
}
