//! Timers finer than `epoll`'s milliseconds.
//!
//! Why: `epoll_wait` sleeps in whole milliseconds, so an engine timer due in 100 µs (a
//! transaction's backoff, a token site's short wait) fired about a millisecond late, and that
//! showed as a millisecond in every light-load round trip. A `timerfd` armed with the exact
//! deadline wakes the loop at its time; it is armed only for deadlines that rounding would
//! delay, and only when the deadline changed, so a busy loop pays no extra system call.

use rmcast_proto::Time;
use std::io;
use std::time::Duration;

/// Waits shorter than this are woken exactly: for longer ones up to a millisecond late is
/// noise.
const EXACT_BELOW: Duration = Duration::from_millis(5);

/// A one-shot timer whose expiry makes a file descriptor readable (Linux `timerfd`); elsewhere
/// it does nothing and the loop keeps millisecond timeouts.
pub(crate) struct PreciseTimer {
    #[cfg(target_os = "linux")]
    fd: std::os::fd::OwnedFd,
    /// The deadline last armed (none: disarmed or expired).
    armed: Option<Time>,
}

impl PreciseTimer {
    /// A disarmed timer, registered with `registry` under `token`.
    #[cfg(target_os = "linux")]
    pub(crate) fn new(registry: &mio::Registry, token: mio::Token) -> io::Result<PreciseTimer> {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: plain system call; the descriptor is owned at once.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        registry.register(
            &mut mio::unix::SourceFd(&fd.as_raw_fd()),
            token,
            mio::Interest::READABLE,
        )?;
        Ok(PreciseTimer { fd, armed: None })
    }

    /// A timer that never fires (systems without `timerfd`).
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn new(_: &mio::Registry, _: mio::Token) -> io::Result<PreciseTimer> {
        let _ = Time::ZERO;
        Ok(PreciseTimer { armed: None })
    }

    /// The `poll` timeout at `now` for deadline `next`: whole milliseconds (rounded up, as
    /// epoll sleeps), with the timer armed to wake the loop at the exact time when the wait is
    /// short and rounding would delay it (once per deadline).
    pub(crate) fn poll_timeout(&mut self, now: Time, next: Option<Time>) -> Option<Duration> {
        let wait = next.map(|t| t.saturating_since(now));
        let rounded = wait.map(|d| Duration::from_millis(d.as_nanos().div_ceil(1_000_000) as u64));
        let short = wait.is_some_and(|d| !d.is_zero() && d < EXACT_BELOW && Some(d) != rounded);
        if short && next != self.armed {
            self.armed = next;
            self.arm(wait.expect("short"));
        }
        rounded
    }

    /// The timer fired (its descriptor was readable): clear it.
    pub(crate) fn fired(&mut self) {
        self.armed = None;
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let mut n = [0u8; 8];
            // SAFETY: reads at most 8 bytes into a buffer of 8; non-blocking.
            let _ = unsafe { libc::read(self.fd.as_raw_fd(), n.as_mut_ptr().cast(), 8) };
        }
    }

    fn arm(&mut self, d: Duration) {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let spec = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: d.as_secs() as libc::time_t,
                    tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
                },
            };
            // SAFETY: a valid timerfd and a fully initialised itimerspec.
            let _ = unsafe {
                libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut())
            };
        }
    }
}
