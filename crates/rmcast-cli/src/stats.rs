//! A member's counters and group state as people read them: `/stats` in `rmcast member`, and
//! `rmcast stat --group G`, which shows every member of a group on this host (like Aeron's
//! AeronStat). Members publish their counters once a second to a small JSON file in a runtime
//! directory ([`group_dir`]) and remove it when they exit; `rmcast stat` reads the directory.

use prometheus_client::encoding::prometheus_text;
use prometheus_client::registry::Registry;
use rmcast::{Counters, GroupInfo, GroupSender};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One reading of a member's counters.
#[derive(Clone, Debug)]
pub struct Stats {
    /// Group name.
    pub group: String,
    /// Engine name.
    pub engine: String,
    /// The engine's view of the group.
    pub info: GroupInfo,
    /// The counters every engine keeps, by name.
    pub counters: Vec<(&'static str, u64)>,
    /// The counters only this engine keeps, by name.
    pub engine_counters: Vec<(&'static str, u64)>,
}

/// Read `sender`'s group state and counters.
pub fn snapshot(sender: &GroupSender) -> Result<Stats, rmcast::Error> {
    Ok(Stats {
        group: sender.name().to_string(),
        engine: sender.engine_kind().to_string(),
        info: sender.info()?,
        counters: named(&sender.counters()?),
        engine_counters: sender.engine_counters()?,
    })
}

/// The common counters by name, in declaration order.
pub fn named(c: &Counters) -> Vec<(&'static str, u64)> {
    c.described()
        .into_iter()
        .map(|f| (f.name, f.value))
        .collect()
}

impl Stats {
    /// Lines for a terminal, starting with `* stats`.
    pub fn render(&self) -> String {
        let i = &self.info;
        let mut s = format!(
            "* stats: group {:?} ({}), member {}, view {}, members {}, sequencer {}, \
             incarnation {}{}, buffered {}/{}, datagrams up to {} B\n",
            self.group,
            self.engine,
            i.me,
            i.view,
            crate::names::id_list(&i.members),
            i.coordinator
                .map(|c| c.to_string())
                .unwrap_or_else(|| "none".into()),
            i.incarnation,
            if i.recovering { ", recovering" } else { "" },
            i.buffered_msgs,
            i.buffer_capacity_msgs,
            i.max_datagram_bytes,
        );
        for (name, v) in self.counters.iter().chain(&self.engine_counters) {
            s.push_str(&format!("*   {name:<24} {v}\n"));
        }
        s
    }
}

/// One member's published counters: the file `rmcast stat` reads.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Published {
    /// Group name.
    pub group: String,
    /// Engine name.
    pub engine: String,
    /// Node id.
    pub member: u32,
    /// The member's process id.
    pub pid: u32,
    /// When it was written, ns since the UNIX epoch.
    pub updated_ns: u64,
    /// View id.
    pub view: u64,
    /// Members of the view.
    pub members: Vec<u32>,
    /// The sequencer (coordinator), if any.
    pub coordinator: Option<u32>,
    /// Group incarnation.
    pub incarnation: u32,
    /// Whether the group is in recovery mode.
    pub recovering: bool,
    /// Every counter by name, the engine's own included.
    pub counters: BTreeMap<String, u64>,
}

impl Published {
    /// What `s` says, stamped now.
    pub fn new(s: &Stats) -> Published {
        Published {
            group: s.group.clone(),
            engine: s.engine.clone(),
            member: s.info.me.0,
            pid: std::process::id(),
            updated_ns: rmcast_sim::log::wall_clock_ns(),
            view: s.info.view,
            members: s.info.members.iter().map(|m| m.0).collect(),
            coordinator: s.info.coordinator.map(|c| c.0),
            incarnation: s.info.incarnation,
            recovering: s.info.recovering,
            counters: s
                .counters
                .iter()
                .chain(&s.engine_counters)
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
        }
    }
}

/// Where the members of `group` on this host publish their counters:
/// `$XDG_RUNTIME_DIR/rmcast/<group>` or, without it, `<temp dir>/rmcast-<uid>/<group>`; the
/// group name is hex-encoded so that any name is a safe file name.
pub fn group_dir(group: &str) -> PathBuf {
    let base = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("rmcast"),
        _ => {
            // SAFETY: getuid has no preconditions and cannot fail.
            let uid = unsafe { libc::getuid() };
            std::env::temp_dir().join(format!("rmcast-{uid}"))
        }
    };
    let hex: String = group.bytes().map(|b| format!("{b:02x}")).collect();
    base.join(hex)
}

/// Publishes a member's counters once a second until dropped, then removes the file.
pub struct Publisher {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    path: PathBuf,
}

impl Publisher {
    /// Start publishing `sender`'s counters for `rmcast stat`.
    pub fn start(sender: GroupSender) -> std::io::Result<Publisher> {
        let dir = group_dir(sender.name());
        make_private_dir(&dir)?;
        let path = dir.join(format!("{}.json", sender.me()));
        let stop = Arc::new(AtomicBool::new(false));
        let (stop2, path2) = (stop.clone(), path.clone());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match snapshot(&sender) {
                    Ok(s) => {
                        let p = Published::new(&s);
                        if let Err(e) = write_atomically(&path2, &p) {
                            // The last other member of the group on this host took the
                            // directory away as it left: made again, as at the start.
                            if e.kind() == std::io::ErrorKind::NotFound {
                                if let Some(dir) = path2.parent() {
                                    if make_private_dir(dir).is_ok() {
                                        let _ = write_atomically(&path2, &p);
                                    }
                                }
                            }
                        }
                    }
                    Err(rmcast::Error::Closed) => break,
                    Err(_) => {}
                }
                // Short steps, so that a drop does not wait a whole second.
                for _ in 0..10 {
                    if stop2.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        });
        Ok(Publisher {
            stop,
            thread: Some(thread),
            path,
        })
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
        // The group's directory goes with its last member (it stays while others publish).
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Make `dir` (and what leads to it) for this user's processes only, and check it and its
/// parent: in a shared temp dir another user may have made them first (or a link named like
/// them).
fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    if let Some(base) = dir.parent() {
        check_private_dir(base)?;
    }
    check_private_dir(dir)
}

/// Whether `dir` is a directory (not a link to one) owned by this user and closed to others;
/// an error that says what is wrong otherwise.
fn check_private_dir(dir: &Path) -> std::io::Result<()> {
    let m = std::fs::symlink_metadata(dir)?;
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let wrong = if !m.file_type().is_dir() {
        Some("is not a directory (a symbolic link?)".to_string())
    } else if m.uid() != uid {
        Some(format!(
            "is owned by uid {}, not by this user ({uid})",
            m.uid()
        ))
    } else if m.mode() & 0o077 != 0 {
        Some(format!(
            "is open to other users (mode {:o})",
            m.mode() & 0o777
        ))
    } else {
        None
    };
    match wrong {
        Some(why) => Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} {why}", dir.display()),
        )),
        None => Ok(()),
    }
}

/// Write `p` to a temporary file and rename it over `path`: a reader never sees half a file.
/// The temporary file is created anew, never through a link (a stale one is removed first),
/// readable by this user only.
fn write_atomically(path: &Path, p: &Published) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(&serde_json::to_vec(p)?)?;
    drop(f);
    // A rename replaces whatever `path` is (a link included) and follows nothing.
    std::fs::rename(&tmp, path)
}

/// Arguments of `rmcast stat`.
#[derive(clap::Args, Debug)]
pub struct StatArgs {
    /// The group whose members on this host to show.
    #[arg(short = 'g', long, value_parser = crate::names::parse_group_name)]
    pub group: String,
    /// Print once and exit (default: refresh every second until interrupted).
    #[arg(long)]
    pub once: bool,
    /// Print one JSON object per refresh, on one line, instead of the table: the group and
    /// every member as it publishes itself (all its counters), with its `state` (`ok`,
    /// `recovering`, or `gone` for a file not updated for 3 s).
    #[arg(long)]
    pub json: bool,
}

/// The members' published files, by member id; a file not updated for 3 s is from a member
/// that is gone (a killed member cannot remove its file).
fn read_all(dir: &Path) -> Vec<(Published, bool)> {
    let now = rmcast_sim::log::wall_clock_ns();
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let Ok(text) = std::fs::read(&p) else {
            continue;
        };
        let Ok(pb) = serde_json::from_slice::<Published>(&text) else {
            continue;
        };
        let stale = now.saturating_sub(pb.updated_ns) > 3_000_000_000;
        out.push((pb, stale));
    }
    out.sort_by_key(|(p, _)| p.member);
    out
}

/// The table `rmcast stat` prints.
fn table(group: &str, rows: &[(Published, bool)]) -> String {
    let mut s = format!("group {group:?}: {} member(s) on this host\n", rows.len());
    if rows.is_empty() {
        s.push_str("(no member of this group publishes counters here)\n");
        return s;
    }
    let names = [
        "delivered",
        "submitted",
        "datagrams_sent",
        "datagrams_received",
        "retransmissions",
        "nacks_sent",
        "backpressure_refusals",
        "resets",
    ];
    s.push_str(&format!(
        "{:>10} {:>8} {:>5} {:>4} {:>9} {:>12}",
        "member", "pid", "view", "inc", "sequencer", "state"
    ));
    for n in names {
        s.push_str(&format!(" {:>w$}", n, w = n.len().max(8)));
    }
    s.push('\n');
    for (p, stale) in rows {
        let state = if *stale {
            "gone?"
        } else if p.recovering {
            "recovering"
        } else {
            "ok"
        };
        s.push_str(&format!(
            "{:>10} {:>8} {:>5} {:>4} {:>9} {:>12}",
            p.member,
            p.pid,
            p.view,
            p.incarnation,
            p.coordinator.map_or("-".into(), |c| c.to_string()),
            state
        ));
        for n in names {
            let v = p.counters.get(n).copied().unwrap_or(0);
            s.push_str(&format!(" {:>w$}", v, w = n.len().max(8)));
        }
        s.push('\n');
    }
    s
}

/// What `rmcast stat --json` prints per refresh.
#[derive(Serialize)]
struct JsonRefresh<'a> {
    group: &'a str,
    members: Vec<JsonMember<'a>>,
}

/// A member's published file and the state the table shows for it.
#[derive(Serialize)]
struct JsonMember<'a> {
    #[serde(flatten)]
    published: &'a Published,
    state: &'static str,
}

/// One line of JSON for `rows`.
fn json(group: &str, rows: &[(Published, bool)]) -> anyhow::Result<String> {
    let members = rows
        .iter()
        .map(|(p, stale)| JsonMember {
            published: p,
            state: if *stale {
                "gone"
            } else if p.recovering {
                "recovering"
            } else {
                "ok"
            },
        })
        .collect();
    let mut line = serde_json::to_string(&JsonRefresh { group, members })?;
    line.push('\n');
    Ok(line)
}

/// Run `rmcast stat`.
pub fn run(args: StatArgs) -> anyhow::Result<ExitCode> {
    let dir = group_dir(&args.group);
    // Counters read from a directory another user controls could be anybody's.
    if std::fs::symlink_metadata(&dir).is_ok() {
        check_private_dir(&dir)?;
    }
    let terminal = std::io::stdout().is_terminal();
    loop {
        let rows = read_all(&dir);
        let text = if args.json {
            json(&args.group, &rows)?
        } else {
            table(&args.group, &rows)
        };
        if args.once {
            print!("{text}");
            return Ok(ExitCode::SUCCESS);
        }
        if args.json {
            // A stream of lines for a program: no screen control, one object per refresh.
            print!("{text}");
        } else if terminal {
            // Clear the screen and go home: a live table, as top(1) shows one.
            print!("\u{1b}[2J\u{1b}[H{text}");
        } else {
            println!("{text}");
        }
        std::io::stdout().flush()?;
        std::thread::sleep(Duration::from_secs(1));
        if crate::signals::received() {
            return Ok(ExitCode::SUCCESS);
        }
    }
}

/// Serves `registry` (a member's metrics, [`rmcast::metrics`]) in the Prometheus text format
/// on `127.0.0.1:port` (`rmcast member --metrics-port PORT`), one connection at a time, until
/// the process ends. Whatever the request, the answer is the exposition: the standard library
/// serves that much, no HTTP crate needed.
pub fn serve_prometheus(registry: Registry, port: u16) -> std::io::Result<std::net::SocketAddr> {
    let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port))?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            // A slow or silent client must not hold the endpoint.
            let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
            let mut req = [0u8; 1024];
            let _ = std::io::Read::read(&mut conn, &mut req);
            let mut body = String::new();
            let status = match prometheus_text::encode(&mut body, &registry) {
                Ok(()) => "200 OK",
                Err(_) => {
                    body = "# the metrics could not be encoded\n".into();
                    "500 Internal Server Error"
                }
            };
            let _ = write!(
                conn,
                "HTTP/1.0 {status}\r\nContent-Type: {}\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                prometheus_text::CONTENT_TYPE,
                body.len()
            );
        }
    });
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A fresh directory of this test's own under the temp dir.
    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("rmcast-stats-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
        d
    }

    #[test]
    fn a_private_directory_passes_and_others_are_refused_with_the_reason() {
        let d = scratch("dirs");
        check_private_dir(&d).unwrap();
        // Open to others.
        let open = d.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = check_private_dir(&open).unwrap_err().to_string();
        assert!(e.contains("open to other users"), "{e}");
        // A link to a private directory is not one.
        let link = d.join("link");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        let e = check_private_dir(&link).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
        // Owned by somebody else (only root can make one here).
        if unsafe { libc::getuid() } == 0 {
            let theirs = d.join("theirs");
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&theirs)
                .unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            let e = check_private_dir(&theirs).unwrap_err().to_string();
            assert!(e.contains("owned by uid 65534"), "{e}");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn counters_are_never_written_through_a_link() {
        let d = scratch("links");
        let victim = d.join("victim");
        std::fs::write(&victim, b"keep me").unwrap();
        let path = d.join("7.json");
        // A link planted where the temporary file goes, and one where the file goes.
        std::os::unix::fs::symlink(&victim, path.with_extension("json.tmp")).unwrap();
        let p = Published {
            group: "g".into(),
            engine: "sequencer".into(),
            member: 7,
            pid: 1,
            updated_ns: 1,
            view: 1,
            members: vec![7],
            coordinator: Some(7),
            incarnation: 0,
            recovering: false,
            counters: BTreeMap::new(),
        };
        write_atomically(&path, &p).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write_atomically(&path, &p).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
        assert!(!std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
