//! A minimal `block_on` for the blocking API, so that blocking calls work the same inside and
//! outside an async runtime (tokio's `blocking_*` methods panic inside one) and can have a
//! deadline, which tokio's blocking receive lacks.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::Instant;

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if !defer(&self.0) {
            self.0.unpark();
        }
    }
}

thread_local! {
    /// Whether a [`WakeBatch`] is open on this thread.
    static BATCHING: Cell<bool> = const { Cell::new(false) };
    /// The threads its wakes are for, each once (kept allocated between batches).
    static DEFERRED: RefCell<Vec<Thread>> = const { RefCell::new(Vec::new()) };
}

/// Holds `t`'s wake for the open [`WakeBatch`] of this thread; false when none is open.
fn defer(t: &Thread) -> bool {
    if !BATCHING.try_with(Cell::get).unwrap_or(false) {
        return false;
    }
    DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        if !d.iter().any(|w| w.id() == t.id()) {
            d.push(t.clone());
        }
    });
    true
}

/// While it lives, wakes of threads blocked in [`block_on`] made on this thread are held, and
/// each such thread is woken once when it is dropped (nested batches: at the outermost).
///
/// Why: the I/O thread queues events one at a time, and every queued event woke a blocked
/// application thread. On a loaded host the two often share a core; the woken thread then
/// preempted the I/O thread, took the one event there was, and blocked again: two context
/// switches per message through a whole burst of deliveries (seen in `perf sched` as the
/// two threads alternating every 4 µs). Woken once after the burst, it takes the burst.
pub(crate) struct WakeBatch {
    outermost: bool,
}

impl WakeBatch {
    /// Opens a batch on this thread.
    pub(crate) fn open() -> WakeBatch {
        let outermost = !BATCHING.with(|b| b.replace(true));
        WakeBatch { outermost }
    }
}

impl Drop for WakeBatch {
    fn drop(&mut self) {
        if !self.outermost {
            return;
        }
        BATCHING.with(|b| b.set(false));
        // Taken out first: unpark runs no waker, but the list must not stay borrowed.
        let woken = DEFERRED.with(|d| std::mem::take(&mut *d.borrow_mut()));
        for t in &woken {
            t.unpark();
        }
        DEFERRED.with(|d| {
            let mut d = d.borrow_mut();
            if d.is_empty() {
                // Keep the allocation for the next batch.
                *d = woken;
                d.clear();
            }
        });
    }
}

thread_local! {
    // One waker per thread, made once: blocking calls on the hot path allocate nothing.
    static WAKER: Waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
}

/// Poll `fut` on this thread until it completes or `deadline` passes (`None` then).
pub(crate) fn block_on<F: Future>(fut: F, deadline: Option<Instant>) -> Option<F::Output> {
    let mut fut = pin!(fut);
    WAKER.with(|waker| {
        let mut cx = Context::from_waker(waker);
        loop {
            if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return Some(v);
            }
            // park may wake spuriously; the loop polls again, which is always allowed.
            match deadline {
                None => thread::park(),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return None;
                    }
                    thread::park_timeout(d - now);
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    use tokio::sync::mpsc;

    /// A thread blocked on a queue is woken only once the batch the item was queued in closes,
    /// and then it is (without the batch it takes the item at once).
    #[test]
    fn a_batch_holds_wakes_until_it_closes() {
        let (tx, mut rx) = mpsc::channel::<u32>(16);
        let got = Arc::new(AtomicBool::new(false));
        let got2 = got.clone();
        let receiver = thread::spawn(move || {
            let v = block_on(rx.recv(), Some(Instant::now() + Duration::from_secs(30)));
            got2.store(true, Ordering::SeqCst);
            v
        });
        // Let the receiver block first (a wake before it parks is never lost anyway).
        thread::sleep(Duration::from_millis(50));
        {
            let _batch = WakeBatch::open();
            let _inner = WakeBatch::open();
            tx.try_send(7).unwrap();
            drop(_inner);
            thread::sleep(Duration::from_millis(100));
            assert!(
                !got.load(Ordering::SeqCst),
                "woken before the outermost batch closed"
            );
        }
        assert_eq!(receiver.join().unwrap(), Some(Some(7)));
    }

    /// Outside a batch a wake goes at once.
    #[test]
    fn without_a_batch_wakes_go_at_once() {
        let (tx, mut rx) = mpsc::channel::<u32>(16);
        let receiver = thread::spawn(move || {
            block_on(rx.recv(), Some(Instant::now() + Duration::from_secs(30)))
        });
        thread::sleep(Duration::from_millis(50));
        tx.try_send(3).unwrap();
        let start = Instant::now();
        assert_eq!(receiver.join().unwrap(), Some(Some(3)));
        assert!(start.elapsed() < Duration::from_secs(20));
    }
}
