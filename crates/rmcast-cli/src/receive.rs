//! `rmcast receive --group G --out DIR`: receive one file sent by `rmcast send` (the `tree`
//! engine), write it to DIR as it arrives, verify its sha256, and exit 0 once it is complete
//! (with `--keep-listening`, wait for the next file instead). A receiver started late gets the
//! whole file from its ACK processor's cache. With `--dr` this receiver is a designated
//! receiver: it repairs the receivers near it (they choose it by the TTL of its
//! advertisements) from its copy of the file, and stays `--dally` after it is done.

use crate::member::NetArgs;
use crate::send::{bar, hex, node, packet_size, FileHeader, FileStore, TransferArgs};
use anyhow::{bail, Context, Result};
use clap::Args;
use rmcast::{GroupConfig, GroupEvent, OpenMode, Qos};
use rmcast_proto::tree::{DataStore, TreeFactory};
use rmcast_proto::{EngineChoice, NodeId, Role};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Arguments of `rmcast receive`.
#[derive(Args, Debug)]
pub struct ReceiveArgs {
    /// Group name (hashed to the multicast address and port).
    #[arg(short = 'g', long)]
    pub group: String,
    /// Directory the file is written to.
    #[arg(long)]
    pub out: PathBuf,
    /// Be a designated receiver: repair the receivers of this area.
    #[arg(long)]
    pub dr: bool,
    /// After a file, wait for the next one instead of exiting.
    #[arg(long)]
    pub keep_listening: bool,
    /// How long to wait for a sender to start (a bare number: seconds).
    #[arg(long = "timeout", alias = "wait", default_value = "1h", value_name = "DURATION", value_parser = crate::dur::secs(1, 31_536_000))]
    pub wait: u64,
    /// Give up when no data arrived for this long during a transfer (a bare number: seconds).
    #[arg(long = "idle-timeout", default_value = "60s", value_name = "DURATION", value_parser = crate::dur::secs(1, 86_400))]
    pub idle_timeout: u64,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Replace a file of the same name already in --out (by default such a file is kept and
    /// the transfer refused).
    #[arg(long)]
    pub overwrite: bool,
    /// Receive without a key on an interface other than loopback: anyone who can reach the
    /// group's address could then write files into --out.
    #[arg(long)]
    pub insecure: bool,
    #[command(flatten)]
    pub transfer: TransferArgs,
    #[command(flatten)]
    pub net: NetArgs,
    #[command(flatten)]
    pub keys: crate::keys::KeyArgs,
    #[command(flatten)]
    pub output: crate::output::JsonFlag,
}

/// What `rmcast receive --json` prints for each file received, on one line.
#[derive(serde::Serialize)]
struct ReceivedLine {
    kind: &'static str,
    /// Where the file was written.
    file: String,
    bytes: u64,
    /// The file's sha256 (verified against the sender's), in hex.
    sha256: String,
    seconds: f64,
    mb_per_s: f64,
    /// The node this receiver acknowledged to (its ACK processor), if any.
    ack_processor: Option<u64>,
    duplicates: u64,
    acks_sent: u64,
    txnow_sent: u64,
    /// A designated receiver's retransmissions to its area: all, unicast, scoped multicast.
    area_retransmissions: Option<[u64; 3]>,
}

pub fn run(args: ReceiveArgs) -> Result<ExitCode> {
    let keys = args.keys.keyring()?;
    crate::keys::refuse_unkeyed_exposure(
        keys.as_ref(),
        args.net.interface.addr,
        args.insecure,
        "receive",
    )?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    // The last file received: a sender that lingers after its transfer (its dally) still
    // offers it, and a receiver listening again would take it for a new one.
    let mut last: Option<(String, [u8; 32])> = None;
    let mut again = false;
    loop {
        match receive_one(&args, keys.clone(), last.as_ref(), again)? {
            Received::File(name_and_digest) => {
                if !args.keep_listening {
                    return Ok(ExitCode::SUCCESS);
                }
                last = Some(name_and_digest);
                again = false;
            }
            Received::Again => {
                again = true;
                std::thread::sleep(Duration::from_millis(100));
            }
            Received::Failed => return Ok(ExitCode::FAILURE),
        }
    }
}

/// How one listen ended.
enum Received {
    /// A file, named so, with this digest.
    File((String, [u8; 32])),
    /// The file received last was offered again (its sender still there): listen anew.
    Again,
    /// The transfer failed (said on stderr).
    Failed,
}

fn receive_one(
    args: &ReceiveArgs,
    keys: Option<rmcast::Keyring>,
    previous: Option<&(String, [u8; 32])>,
    again: bool,
) -> Result<Received> {
    let node = node(&args.net)?;
    let me = node.id();
    let file: Arc<Mutex<Option<(File, u64)>>> = Arc::new(Mutex::new(None));
    let store_file = file.clone();
    let store = move |_: NodeId, _: Role| {
        Box::new(FileStore {
            header: None,
            file: store_file.clone(),
        }) as Box<dyn DataStore>
    };
    let drs = if args.dr { vec![me] } else { Vec::new() };
    let packet = packet_size(&args.net, None, keys.is_some());
    let factory = TreeFactory::new(args.transfer.config(packet, drs))
        .with_store(Arc::new(store))
        .receiver();
    // RMTP receivers join silently: the group opens at once (create mode, with an engine that
    // is a receiver whatever the mode), and the wait for a sender is this loop's.
    let mut cfg = GroupConfig::new(args.group.clone())
        .mode(OpenMode::Create)
        .engine(EngineChoice::custom(Arc::new(factory)));
    cfg.qos = Qos::SourceOrdered;
    cfg.keys = keys;
    if !again {
        eprintln!(
            "waiting for a sender on group {}{}",
            args.group,
            if args.dr {
                " (designated receiver)"
            } else {
                ""
            }
        );
    }
    let mut group = node.open_group(cfg).context("opening the group")?;
    let mut header: Option<FileHeader> = None;
    let mut part = PathBuf::new();
    let mut sha = ring::digest::Context::new(&ring::digest::SHA256);
    let mut written = 0u64;
    let mut pb = None;
    let mut t0 = Instant::now();
    let mut last = Instant::now();
    let idle = Duration::from_secs(args.idle_timeout);
    loop {
        let ev = match group.recv_timeout(Duration::from_millis(200)) {
            Ok(ev) => ev,
            Err(rmcast::Error::Timeout) => {
                if header.is_none() && last.elapsed() > Duration::from_secs(args.wait) {
                    eprintln!(
                        "error: no sender on group {} within {} s",
                        args.group, args.wait
                    );
                    return Ok(Received::Failed);
                }
                if header.is_some() && last.elapsed() > idle {
                    eprintln!(
                        "error: no data from the sender for {} s; giving up ({} of {} bytes)",
                        args.idle_timeout,
                        written,
                        header.as_ref().map_or(0, |h| h.size)
                    );
                    return Ok(Received::Failed);
                }
                continue;
            }
            Err(e) => return Err(e).context("receiving"),
        };
        match ev {
            GroupEvent::Deliver(d) if d.seq == 0 => {
                last = Instant::now();
                let h = FileHeader::decode(&d.payload)
                    .context("the first packet is not an rmcast file header")?;
                if previous.is_some_and(|(name, digest)| *name == h.name && *digest == h.sha256) {
                    drop(group);
                    node.shutdown();
                    return Ok(Received::Again);
                }
                let dest = args.out.join(&h.name);
                if !args.overwrite && std::fs::symlink_metadata(&dest).is_ok() {
                    bail!(
                        "{} exists in {}; not overwriting it (give --overwrite to replace it)",
                        h.shown_name(),
                        args.out.display()
                    );
                }
                part = args.out.join(format!(".{}.part", h.name));
                let f = create_part(&part)
                    .with_context(|| format!("creating .{}.part", h.shown_name()))?;
                *file.lock().unwrap_or_else(|e| e.into_inner()) = Some((f, h.packet as u64));
                eprintln!(
                    "receiving {} ({} bytes, sha256 {})",
                    h.shown_name(),
                    h.size,
                    hex(&h.sha256)
                );
                pb = Some(bar(h.size, args.quiet, "received"));
                t0 = Instant::now();
                header = Some(h);
            }
            GroupEvent::Deliver(d) => {
                last = Instant::now();
                let Some(h) = &header else {
                    bail!("data before the file header");
                };
                let end = |o: &u64| o.checked_add(d.payload.len() as u64);
                let Some(off) = h
                    .offset(d.seq)
                    .filter(|o| end(o).is_some_and(|e| e <= h.size))
                else {
                    bail!("packet {} goes past the end of the file", d.seq);
                };
                {
                    let f = file.lock().unwrap_or_else(|e| e.into_inner());
                    let (f, _) = f.as_ref().context("the output file")?;
                    f.write_all_at(&d.payload, off)
                        .with_context(|| format!("writing {}", part.display()))?;
                }
                sha.update(&d.payload);
                written += d.payload.len() as u64;
                if let Some(pb) = &pb {
                    pb.set_position(written);
                }
                if d.seq == h.packets() {
                    break;
                }
            }
            GroupEvent::Loss(l) => {
                bail!(
                    "packets {}..{} are lost: the sender no longer holds them",
                    l.first_seq,
                    l.first_seq + l.count
                );
            }
            GroupEvent::Left => {
                eprintln!("error: the sender aborted the transfer (RESET)");
                let _ = std::fs::remove_file(&part);
                return Ok(Received::Failed);
            }
            _ => {}
        }
        if header.as_ref().is_some_and(|h| h.size == 0) {
            break;
        }
    }
    let took = t0.elapsed();
    let h = header.context("no file header")?;
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    let digest = sha.finish();
    if digest.as_ref() != h.sha256 || written != h.size {
        let _ = std::fs::remove_file(&part);
        bail!(
            "{}: sha256 {} does not match the sender's {} ({written} of {} bytes)",
            h.shown_name(),
            hex(digest.as_ref()),
            hex(&h.sha256),
            h.size
        );
    }
    {
        let f = file.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((f, _)) = f.as_ref() {
            f.sync_all().context("syncing the file")?;
        }
    }
    let dest = args.out.join(&h.name);
    let shown = args.out.join(h.shown_name());
    if args.overwrite {
        std::fs::rename(&part, &dest)
            .with_context(|| format!("renaming to {}", shown.display()))?;
    } else {
        // A link fails if the name exists (made meanwhile): never replaces a file.
        let linked = std::fs::hard_link(&part, &dest);
        let _ = std::fs::remove_file(&part);
        linked.with_context(|| {
            format!(
                "moving the file to {} (not overwriting: give --overwrite to replace it)",
                shown.display()
            )
        })?;
    }
    let sender = group.sender();
    let c = sender.counters().unwrap_or_default();
    let ec = sender.engine_counters().unwrap_or_default();
    let get = |n: &str| ec.iter().find(|(k, _)| *k == n).map_or(0, |(_, v)| *v);
    let ap = get("ap");
    let line = ReceivedLine {
        kind: "received",
        file: shown.display().to_string(),
        bytes: h.size,
        sha256: hex(&h.sha256),
        seconds: took.as_secs_f64(),
        mb_per_s: h.size as f64 / 1e6 / took.as_secs_f64().max(1e-9),
        ack_processor: (ap != u64::MAX).then_some(ap),
        duplicates: c.duplicates,
        acks_sent: c.acks_sent,
        txnow_sent: get("txnow_sent"),
        area_retransmissions: args
            .dr
            .then(|| [c.retransmissions, get("retx_unicast"), get("retx_scoped")]),
    };
    crate::output::Output::new(args.output).result(&line, || {
        format!(
            "received {} ({} bytes) sha256 ok in {:.2} s: {:.1} MB/s; ACK processor: {}; \
             duplicates: {}; ACKs sent: {}; immediate requests (ACK_TXNOW): {}{}",
            line.file,
            line.bytes,
            line.seconds,
            line.mb_per_s,
            line.ack_processor
                .map_or("none".to_string(), |ap| format!("node {ap}")),
            line.duplicates,
            line.acks_sent,
            line.txnow_sent,
            match line.area_retransmissions {
                Some([all, unicast, scoped]) => format!(
                    "; retransmissions to this area: {all} ({unicast} unicast, {scoped} scoped \
                     multicast)"
                ),
                None => String::new(),
            }
        )
    })?;
    if args.dr {
        // A DR stays while its region may still need it (the engine's T_dally, from here).
        let until = Instant::now() + Duration::from_millis(args.transfer.dally_ms);
        while Instant::now() < until {
            let _ = group.recv_timeout(Duration::from_millis(100));
        }
    }
    drop(group);
    node.shutdown();
    Ok(Received::File((h.name, h.sha256)))
}

/// The `.part` file, created new: a stale one (a receiver killed mid-transfer) is removed first,
/// and the creation never follows a symbolic link (`O_EXCL` with `O_NOFOLLOW`), so that whoever
/// can write the directory cannot make this write elsewhere. Readable by the owner only until
/// complete.
fn create_part(part: &std::path::Path) -> std::io::Result<File> {
    if let Ok(m) = std::fs::symlink_metadata(part) {
        if m.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "a directory has the .part file's name",
            ));
        }
        // Removes a symbolic link itself, never its target.
        std::fs::remove_file(part)?;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(part)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_part_file_is_new_and_never_follows_a_link() {
        let dir = std::env::temp_dir().join(format!("rmcast-part-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("victim");
        std::fs::write(&target, b"precious").unwrap();
        let part = dir.join(".x.part");
        std::os::unix::fs::symlink(&target, &part).unwrap();
        let f = create_part(&part).unwrap();
        f.write_all_at(b"attacker", 0).unwrap();
        // The link was replaced by a new file; the target is untouched.
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        assert!(!std::fs::symlink_metadata(&part).unwrap().is_symlink());
        assert_eq!(std::fs::read(&part).unwrap(), b"attacker");
        // A stale .part is replaced, not appended to.
        drop(f);
        let f = create_part(&part).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
