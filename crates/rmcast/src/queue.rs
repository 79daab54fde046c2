//! The receiving end of a bounded queue between the application and the I/O thread, taken a
//! batch at a time.
//!
//! Why: tokio's bounded channel gives each item's room back to the sender under a lock, one
//! item at a time. At a million messages a second that bookkeeping was a tenth of a thread's
//! time on either side; `recv_many` gives a whole batch's room back in one step. The batch
//! taken out is itself bounded, so the queue stays bounded: its capacity plus [`BATCH`].

use crate::block::block_on;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;
use tokio::sync::mpsc;

/// Most items taken off the channel at once.
pub(crate) const BATCH: usize = 64;

/// What [`Batched::try_next`] found.
pub(crate) enum TryNext<T> {
    Item(T),
    Empty,
    /// Every sender is gone and every item was taken.
    Closed,
}

/// A bounded channel's receiver with the batch it took last.
pub(crate) struct Batched<T> {
    rx: mpsc::Receiver<T>,
    /// Items taken and not yet returned, the next one last (they are popped from the end).
    taken: Vec<T>,
}

impl<T> Batched<T> {
    pub(crate) fn new(rx: mpsc::Receiver<T>) -> Batched<T> {
        Batched {
            rx,
            taken: Vec::with_capacity(BATCH),
        }
    }

    /// The next item without waiting.
    pub(crate) fn try_next(&mut self) -> TryNext<T> {
        if let Some(item) = self.taken.pop() {
            return TryNext::Item(item);
        }
        let mut cx = Context::from_waker(Waker::noop());
        let polled = pin!(self.rx.recv_many(&mut self.taken, BATCH)).poll(&mut cx);
        match polled {
            Poll::Ready(n) => match self.took(n) {
                Some(item) => TryNext::Item(item),
                None => TryNext::Closed,
            },
            // Pending may also be tokio's cooperative budget inside a runtime, not an empty
            // queue: ask once more without it.
            Poll::Pending => match self.rx.try_recv() {
                Ok(item) => TryNext::Item(item),
                Err(mpsc::error::TryRecvError::Empty) => TryNext::Empty,
                Err(mpsc::error::TryRecvError::Disconnected) => TryNext::Closed,
            },
        }
    }

    /// The next item, waiting until `deadline` (for ever without one): `None` when the
    /// deadline passed, `Some(None)` when the channel is closed and drained.
    pub(crate) fn next_blocking(&mut self, deadline: Option<Instant>) -> Option<Option<T>> {
        if let Some(item) = self.taken.pop() {
            return Some(Some(item));
        }
        let n = block_on(self.rx.recv_many(&mut self.taken, BATCH), deadline)?;
        Some(self.took(n))
    }

    /// The next item, waiting for it; `None` when the channel is closed and drained.
    /// Cancel-safe, as `recv_many` is.
    pub(crate) async fn next(&mut self) -> Option<T> {
        if let Some(item) = self.taken.pop() {
            return Some(item);
        }
        let n = self.rx.recv_many(&mut self.taken, BATCH).await;
        self.took(n)
    }

    /// [`Batched::next`] as a poll: the next item, or a wake of `cx` when one comes; `None`
    /// when the channel is closed and drained.
    #[cfg(feature = "stream")]
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        if let Some(item) = self.taken.pop() {
            return Poll::Ready(Some(item));
        }
        match self.rx.poll_recv_many(cx, &mut self.taken, BATCH) {
            Poll::Ready(n) => Poll::Ready(self.took(n)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Refuse further items; those already queued can still be taken.
    pub(crate) fn close(&mut self) {
        self.rx.close();
    }

    /// Items waiting, in the channel and in the batch.
    pub(crate) fn len(&self) -> usize {
        self.rx.len() + self.taken.len()
    }

    /// After `recv_many` appended `n` items to the empty `taken` (0: closed and drained): the
    /// first of them.
    fn took(&mut self, n: usize) -> Option<T> {
        if n == 0 {
            return None;
        }
        self.taken.reverse();
        self.taken.pop()
    }
}
