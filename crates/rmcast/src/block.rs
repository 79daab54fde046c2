//! A minimal `block_on` for the blocking API, so that blocking calls work the same inside and
//! outside an async runtime (tokio's `blocking_*` methods panic inside one) and can have a
//! deadline, which tokio's blocking receive lacks.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::Instant;

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
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
