//! Child `rmcast` processes for the process tests: a scratch directory, a key file, a child
//! killed on drop, and its output as text for assertion messages. Every wait has a deadline and
//! every child is killed by its own handle if a test fails.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub const EXE: &str = env!("CARGO_BIN_EXE_rmcast");

/// A new directory of its own under the temporary directory, named after `tag`.
pub fn scratch(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let d = std::env::temp_dir().join(format!("rmcast-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A new key file `dir/name` from `rmcast keygen`.
pub fn keygen(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    let o = Proc::start(&["keygen", p.to_str().unwrap()]).wait(Duration::from_secs(30));
    assert!(o.status.success(), "keygen: {}", text(&o));
    p
}

/// A child process killed on drop unless it was waited for.
pub struct Proc(Option<Child>);

impl Proc {
    /// `rmcast ARGS`, its stdout and stderr piped, without a key file from the environment.
    pub fn start(args: &[&str]) -> Proc {
        Proc::start_with_env(args, &[])
    }

    /// As [`Proc::start`], with these environment variables set to paths.
    pub fn start_with_env(args: &[&str], env: &[(&str, &Path)]) -> Proc {
        let mut cmd = Command::new(EXE);
        cmd.args(args)
            .env_remove(rmcast::KEY_FILE_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Proc(Some(cmd.spawn().expect("spawn rmcast")))
    }

    /// The running child.
    pub fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("running")
    }

    /// Wait at most `limit` for the process to end (killed then).
    pub fn wait(mut self, limit: Duration) -> Output {
        let deadline = Instant::now() + limit;
        let child = self.0.as_mut().expect("running");
        while child.try_wait().expect("try_wait").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.0
            .take()
            .expect("running")
            .wait_with_output()
            .expect("output")
    }

    /// Kill it (for a process that runs until stopped) and return what it wrote.
    pub fn stop(mut self) -> Output {
        self.finish()
    }

    /// Kill it if it still runs and return what it wrote; the handle is spent.
    pub fn finish(&mut self) -> Output {
        let mut child = self.0.take().expect("running");
        let _ = child.kill();
        child.wait_with_output().expect("output")
    }

    /// Kill it and forget what it wrote.
    pub fn kill(self) {
        let _ = self.stop();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // This test's own child, by its handle.
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `rmcast ARGS` run to its end, at most `limit`.
pub fn run(args: &[&str], env: &[(&str, &Path)], limit: Duration) -> Output {
    Proc::start_with_env(args, env).wait(limit)
}

/// A finished process's status and output, for an assertion's message.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
