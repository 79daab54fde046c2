//! SIGINT, SIGTERM and SIGHUP for the long-running commands: the first one asks the command to
//! wind down (a member leaves its group cleanly; `demo` and `bench` stop their workers), a
//! second one ends the process at once.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Signals received so far.
static RECEIVED: AtomicUsize = AtomicUsize::new(0);

/// Exit status after a second signal: 128 + SIGINT, what a shell reports for Ctrl-C.
pub const EXIT_INTERRUPTED: i32 = 130;

/// Install the handler: `on_first` runs (on the handler's own thread, so it may block) when the
/// first of SIGINT, SIGTERM or SIGHUP arrives; any later one exits at once. Call it once per
/// process.
pub fn install(
    what: &'static str,
    on_first: impl Fn() + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let on_first = std::sync::Arc::new(on_first);
    ctrlc::set_handler(move || {
        if RECEIVED.fetch_add(1, Ordering::SeqCst) == 0 {
            eprintln!("rmcast: {what} (interrupt again to quit at once)");
            // On its own thread: the handler thread must stay free to see a second signal.
            let f = on_first.clone();
            std::thread::spawn(move || f());
        } else {
            eprintln!("rmcast: quitting at once");
            std::process::exit(EXIT_INTERRUPTED);
        }
    })
    .map_err(|e| anyhow::anyhow!("installing the signal handler: {e}"))
}

/// Whether a signal arrived.
pub fn received() -> bool {
    RECEIVED.load(Ordering::SeqCst) > 0
}
