//! SIGINT, SIGTERM and SIGHUP for the long-running commands: the first one asks the command to
//! wind down (a member leaves its group cleanly; `demo` and `bench` stop their workers), a
//! second one ends the process at once.
//!
//! Also the one place that stops and continues child processes (SIGSTOP, SIGCONT: `rmcast bench
//! --perturb`): it keeps the stopped ones, so that even a second signal, which quits at once,
//! continues them first and never leaves a stopped process behind.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Signals received so far.
static RECEIVED: AtomicUsize = AtomicUsize::new(0);

/// Exit status after a second signal: 128 + SIGINT, what a shell reports for Ctrl-C.
pub const EXIT_INTERRUPTED: i32 = 130;

/// Process ids of the children stopped by [`stop_child`] and not yet continued.
static STOPPED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Send `signal` to process `pid`.
fn send(pid: u32, signal: libc::c_int) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no such pid"))?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Stop child process `pid` (SIGSTOP) and remember it until [`continue_child`]. The caller
/// must own `pid`: a child it has not reaped yet, so that the id cannot name anybody else.
pub fn stop_child(pid: u32) -> std::io::Result<()> {
    let mut stopped = STOPPED.lock().unwrap_or_else(|e| e.into_inner());
    send(pid, libc::SIGSTOP)?;
    if !stopped.contains(&pid) {
        stopped.push(pid);
    }
    Ok(())
}

/// Continue child process `pid` (SIGCONT), stopped by [`stop_child`]. Same ownership rule.
pub fn continue_child(pid: u32) -> std::io::Result<()> {
    let mut stopped = STOPPED.lock().unwrap_or_else(|e| e.into_inner());
    stopped.retain(|&p| p != pid);
    send(pid, libc::SIGCONT)
}

/// Ask child process `pid` to wind down (SIGINT, as Ctrl-C does). Same ownership rule as
/// [`stop_child`]: a child the caller has not reaped yet.
pub fn interrupt_child(pid: u32) -> std::io::Result<()> {
    send(pid, libc::SIGINT)
}

/// Forget child `pid`, stopped by [`stop_child`], that has exited (and been reaped) since.
pub fn forget_child(pid: u32) {
    STOPPED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|&p| p != pid);
}

/// Continue every child still stopped (on the way out at once). The lock stays taken, so that
/// nobody stops another one before the process exits.
fn continue_all_and_exit(code: i32) -> ! {
    let stopped = STOPPED.lock().unwrap_or_else(|e| e.into_inner());
    for &pid in stopped.iter() {
        let _ = send(pid, libc::SIGCONT);
    }
    std::process::exit(code)
}

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
            continue_all_and_exit(EXIT_INTERRUPTED);
        }
    })
    .map_err(|e| anyhow::anyhow!("installing the signal handler: {e}"))
}

/// Whether a signal arrived.
pub fn received() -> bool {
    RECEIVED.load(Ordering::SeqCst) > 0
}
