//! `rmcast send FILE --group G`: multicast one file with the `tree` engine (RMTP, after
//! "Reliable Multicast Transport Protocol (RMTP)" by Paul, Sabnani, Lin and Bhattacharyya) to
//! every `rmcast receive --group G` that listens, now or later.
//!
//! The stream is one header packet (the file's name, size, packet size and sha256) and then
//! the file in packets. The file is read from disk as the engine needs it: the engine keeps
//! `Cache_Size` packets in memory and reads older ones back from the file itself (its data
//! store), so a file larger than memory streams, and a receiver that starts late still gets
//! all of it. After the last packet the sender stays while receivers still acknowledge (the
//! engine's T_dally), at most `--linger` seconds: a receiver that is too slow is not waited for
//! by the others (the send window goes on without it after `--stall`), and one that is gone
//! is forgotten after `--silence`.

use crate::member::NetArgs;
use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rmcast::{GroupConfig, GroupEvent, Node, OpenMode, Qos};
pub(crate) use rmcast_proto::tree::file::FileHeader;
use rmcast_proto::tree::{DataStore, TreeConfig, TreeFactory};
use rmcast_proto::{EngineChoice, NodeId, Role};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Largest data packet of a file transfer (the engine's Packet_Size), whatever the path
/// carries: big enough for speed on loopback, small enough for a bounded cache.
pub(crate) const MAX_PACKET: usize = 8192;

/// Connection parameters shared by `send` and `receive` (RMTP's Session Manager is the command
/// line): every member of a transfer must use the same.
#[derive(Args, Debug, Clone)]
pub struct TransferArgs {
    /// Read the connection parameters (and any other flag) from this TOML file, RMTP's
    /// session file: one key per flag, e.g. `send_window = 2048`; flags typed override it.
    /// `rmcast config --print-defaults --command send` writes one with the defaults.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// W_s: packets the sender may have beyond the slowest receiver's acknowledgement, and at
    /// most per T_send.
    #[arg(long, default_value_t = 4096)]
    pub send_window: u32,
    /// W_r: the receive window in packets.
    #[arg(long, default_value_t = 8192)]
    pub recv_window: u32,
    /// T_send (a bare number: milliseconds): the sender's rate is at most W_s × packet size / T_send.
    #[arg(long = "t-send", alias = "t-send-ms", default_value = "2ms", value_name = "DURATION", value_parser = crate::dur::ms(1, 60_000))]
    pub t_send_ms: u64,
    /// T_retx (a bare number: milliseconds): how often ACK processors serve their retransmission queues.
    #[arg(long = "t-retx", alias = "t-retx-ms", default_value = "2ms", value_name = "DURATION", value_parser = crate::dur::ms(1, 60_000))]
    pub t_retx_ms: u64,
    /// Cache_Size: packets kept in memory by the sender and by designated receivers.
    #[arg(long, default_value_t = 8192)]
    pub cache: usize,
    /// CONG_thresh: ACKs with repair requests per T_send before the sender halves its rate;
    /// none: no congestion control (the paper's infinity).
    #[arg(long)]
    pub cong_thresh: Option<u32>,
    /// A receiver whose acknowledgements stop for this long is forgotten (gone).
    #[arg(long = "silence", alias = "silence-ms", default_value = "3s", value_name = "DURATION", value_parser = crate::dur::ms(1, 3_600_000))]
    pub silence_ms: u64,
    /// A receiver that keeps the window from moving for this long is too slow: the others go
    /// on without waiting for it (it catches up from the cache).
    #[arg(long = "stall", alias = "stall-ms", default_value = "5s", value_name = "DURATION", value_parser = crate::dur::ms(1, 3_600_000))]
    pub stall_ms: u64,
    /// T_dally (a bare number: milliseconds): how long the sender (and a DR) stays after the end without
    /// hearing an acknowledgement.
    #[arg(long = "dally", alias = "dally-ms", default_value = "2s", value_name = "DURATION", value_parser = crate::dur::ms(0, 3_600_000))]
    pub dally_ms: u64,
}

impl TransferArgs {
    /// The engine's connection parameters for packets of `packet` bytes.
    pub(crate) fn config(&self, packet: usize, drs: Vec<NodeId>) -> TreeConfig {
        TreeConfig {
            send_window_pkts: self.send_window,
            recv_window_pkts: self.recv_window,
            t_send_ms: self.t_send_ms,
            t_retx_ms: self.t_retx_ms,
            t_rtt_ms: 500,
            t_sap_ms: 500,
            t_dally_ms: self.dally_ms,
            packet_size_bytes: packet,
            cache_size_pkts: self.cache.max(self.send_window as usize),
            cong_thresh: self.cong_thresh,
            cong_response: rmcast_proto::tree::CongestionResponse::Halve,
            mcast_thresh: 3,
            designated_receivers: drs,
            child_silence_ms: self.silence_ms,
            child_stall_ms: self.stall_ms,
            deliver_own: false,
            ..TreeConfig::default()
        }
    }
}

/// Arguments of `rmcast send`.
#[derive(Args, Debug)]
pub struct SendArgs {
    /// The file to send.
    pub file: PathBuf,
    /// Group name (hashed to the multicast address and port).
    #[arg(short = 'g', long)]
    pub group: String,
    /// Largest packet payload in bytes [default: what the interface carries, at most 8192].
    #[arg(long)]
    pub packet_size: Option<usize>,
    /// After the end, stay at most this long (a bare number: seconds) for receivers that still acknowledge.
    #[arg(long = "linger", default_value = "60s", value_name = "DURATION", value_parser = crate::dur::secs(0, 86_400))]
    pub linger: u64,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub transfer: TransferArgs,
    #[command(flatten)]
    pub net: NetArgs,
    #[command(flatten)]
    pub keys: crate::keys::KeyArgs,
    #[command(flatten)]
    pub output: crate::output::JsonFlag,
}

/// What `rmcast send --json` prints at the end, on one line.
#[derive(serde::Serialize)]
struct SentLine<'a> {
    kind: &'static str,
    /// The file's name as receivers write it.
    file: &'a str,
    bytes: u64,
    /// The file's sha256, in hex.
    sha256: String,
    /// Until every packet was acknowledged.
    seconds: f64,
    mb_per_s: f64,
    /// Receivers reporting to the sender: finished, left early, still there.
    receivers_finished: u64,
    receivers_left: u64,
    receivers_still_there: u64,
    retransmissions: u64,
    retransmissions_unicast: u64,
    retransmissions_multicast: u64,
    slow_receivers_passed: u64,
    receivers_gone_silent: u64,
}

/// The data store of the sender and of a designated receiver: the file itself, read (and, at
/// a receiver, written) at the packet's offset; the header packet in memory.
pub(crate) struct FileStore {
    pub header: Option<Bytes>,
    pub file: Arc<Mutex<Option<(File, u64)>>>,
}

impl DataStore for FileStore {
    fn put(&mut self, seq: u64, data: &[u8]) {
        if seq == 0 {
            self.header = Some(Bytes::copy_from_slice(data));
            return;
        }
        // Written already by the receiving application; written again here (same bytes, same
        // place) in case the engine moves it out of memory first.
        let f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        // A sequence number from the network may be far past the file: no offset wraps.
        if let Some((f, packet)) = f.as_ref() {
            if let Some(off) = (seq - 1).checked_mul(*packet) {
                let _ = f.write_all_at(data, off);
            }
        }
    }

    fn get(&mut self, seq: u64) -> Option<Bytes> {
        if seq == 0 {
            return self.header.clone();
        }
        let f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let (f, packet) = f.as_ref()?;
        let start = (seq - 1).checked_mul(*packet)?;
        let mut buf = vec![0u8; *packet as usize];
        let mut got = 0;
        while got < buf.len() {
            match f.read_at(&mut buf[got..], start + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(_) => return None,
            }
        }
        buf.truncate(got);
        Some(Bytes::from(buf))
    }
}

/// sha256 of a file, streamed.
pub(crate) fn sha256_file(path: &Path) -> Result<[u8; 32]> {
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    Ok(out)
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A bytes progress bar with rate and ETA on stderr (hidden off a terminal or when quiet).
pub(crate) fn bar(len: u64, quiet: bool, prefix: &str) -> ProgressBar {
    let target = if quiet {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    };
    let pb = ProgressBar::with_draw_target(Some(len), target);
    pb.set_style(
        ProgressStyle::with_template(
            "{prefix:>9} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    pb.set_prefix(prefix.to_string());
    pb
}

/// The packet size for the interface of `net` and the user's choice; `keyed`: the datagrams
/// are sealed, which takes [`rmcast_proto::secure::AUTH_OVERHEAD`] bytes of each.
pub(crate) fn packet_size(net: &NetArgs, asked: Option<usize>, keyed: bool) -> usize {
    let i = net.interface;
    let path =
        rmcast::path_datagram_bytes_on(i.addr, i.index, rmcast::default_datagram_bytes(i.addr));
    let sealing = if keyed {
        rmcast_proto::secure::AUTH_OVERHEAD
    } else {
        0
    };
    let room = path.saturating_sub(rmcast_proto::wire::HEADER_LEN + 12 + sealing);
    asked.unwrap_or(MAX_PACKET).min(room).max(64)
}

pub(crate) fn node(net: &NetArgs) -> Result<Node> {
    Node::new(net.node_config().socket_buffer_bytes(16 << 20)).context("starting the node")
}

pub fn run(args: SendArgs) -> Result<ExitCode> {
    let path = &args.file;
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_file() {
        bail!("{} is not a regular file", path.display());
    }
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .context("the file needs a UTF-8 name")?
        .to_string();
    let keys = args.keys.keyring()?;
    let packet = packet_size(&args.net, args.packet_size, keys.is_some());
    // The header leaves room for its name in one packet.
    if name.len() + 64 > packet {
        bail!("the file name is too long for packets of {packet} bytes");
    }
    let sha256 = sha256_file(path)?;
    let header = FileHeader {
        name: name.clone(),
        size: meta.len(),
        packet: packet as u32,
        sha256,
    };
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let shared = Arc::new(Mutex::new(Some((file, packet as u64))));
    let store_file = shared.clone();
    let head = Bytes::from(header.encode());
    let store_head = head.clone();
    let store = move |_: NodeId, _: Role| {
        Box::new(FileStore {
            header: Some(store_head.clone()),
            file: store_file.clone(),
        }) as Box<dyn DataStore>
    };
    let factory =
        TreeFactory::new(args.transfer.config(packet, Vec::new())).with_store(Arc::new(store));
    let node = node(&args.net)?;
    let mut cfg = GroupConfig::new(args.group.clone())
        .mode(OpenMode::Create)
        .engine(EngineChoice::custom(Arc::new(factory)));
    cfg.qos = Qos::SourceOrdered;
    cfg.keys = keys;
    cfg.leave_timeout = Duration::from_secs(args.linger);
    // The sender hears its receivers by unicast only.
    cfg.listen_multicast = false;
    let mut group = node.open_group(cfg).context("opening the group")?;
    eprintln!(
        "sending {} ({} bytes, {} packets of {packet} bytes, sha256 {}) to group {} on {}",
        path.display(),
        header.size,
        header.packets(),
        hex(&sha256),
        args.group,
        group
            .multicast_addr()
            .map_or("unicast peers".to_string(), |a| a.to_string())
    );
    let sender = group.sender();
    let total = header.packets();
    // A thread reads the file and queues its packets; this one drains the events.
    let mut reader = Some(std::thread::spawn({
        let sender = sender.clone();
        let path = path.clone();
        move || -> Result<()> {
            sender.send_nowait(head)?;
            let mut f = File::open(&path)?;
            let mut buf = vec![0u8; packet];
            for _ in 0..total {
                let mut got = 0;
                while got < packet {
                    let n = f.read(&mut buf[got..])?;
                    if n == 0 {
                        break;
                    }
                    got += n;
                }
                sender.send_nowait(Bytes::copy_from_slice(&buf[..got]))?;
            }
            Ok(())
        }
    }));
    let pb = bar(header.size, args.quiet, "sent");
    let t0 = Instant::now();
    // Progress is the send window's lower bound, swin_lb: the packets that every receiver
    // heard from lately acknowledged.
    let counter = |name: &str| {
        let c = sender.engine_counters().unwrap_or_default();
        c.iter().find(|(k, _)| *k == name).map_or(0, |(_, v)| *v)
    };
    loop {
        let acked = counter("swin_lb");
        pb.set_position((acked.saturating_sub(1) * packet as u64).min(header.size));
        if acked > total {
            break;
        }
        match group.recv_timeout(Duration::from_millis(100)) {
            Ok(GroupEvent::Left) => bail!("the group closed before the transfer ended"),
            Ok(_) | Err(rmcast::Error::Timeout) => {}
            Err(e) => return Err(e).context("receiving events"),
        }
        if reader.as_ref().is_some_and(|r| r.is_finished()) {
            // The reader's errors surface here (an unreadable file, a closed group).
            if let Some(Ok(Err(e))) = reader.take().map(|r| r.join()) {
                bail!("reading the file: {e}");
            }
        }
    }
    let acked = t0.elapsed();
    pb.finish_and_clear();
    if let Some(r) = reader {
        let _ = r.join();
    }
    eprintln!(
        "all {} packets acknowledged in {:.2} s ({:.1} MB/s); staying while receivers finish \
         (at most {} s)",
        total + 1,
        acked.as_secs_f64(),
        header.size as f64 / 1e6 / acked.as_secs_f64().max(1e-9),
        args.linger
    );
    // Read before leaving: the group is gone after.
    let c = sender.counters().unwrap_or_default();
    let counters = sender.engine_counters().unwrap_or_default();
    let get = |n: &str| {
        counters
            .iter()
            .find(|(k, _)| *k == n)
            .map_or(0, |(_, v)| *v)
    };
    let left = sender.leave();
    let line = SentLine {
        kind: "sent",
        file: &name,
        bytes: header.size,
        sha256: hex(&sha256),
        seconds: acked.as_secs_f64(),
        mb_per_s: header.size as f64 / 1e6 / acked.as_secs_f64().max(1e-9),
        receivers_finished: get("children_done"),
        receivers_left: get("children_left"),
        receivers_still_there: get("children"),
        retransmissions: c.retransmissions,
        retransmissions_unicast: get("retx_unicast"),
        retransmissions_multicast: get("retx_multicast"),
        slow_receivers_passed: get("children_stalled"),
        receivers_gone_silent: get("children_silent"),
    };
    crate::output::Output::new(args.output).result(&line, || {
        format!(
            "sent {} ({} bytes) in {:.2} s: {:.1} MB/s; receivers reporting to the sender: {} \
             ({} finished, {} left early, {} still there); retransmissions by the sender: {} \
             ({} unicast, {} multicast); slow receivers passed: {}; gone silent: {}",
            line.file,
            line.bytes,
            line.seconds,
            line.mb_per_s,
            line.receivers_finished + line.receivers_left + line.receivers_still_there,
            line.receivers_finished,
            line.receivers_left,
            line.receivers_still_there,
            line.retransmissions,
            line.retransmissions_unicast,
            line.retransmissions_multicast,
            line.slow_receivers_passed,
            line.receivers_gone_silent,
        )
    })?;
    if let Err(e) = left {
        eprintln!(
            "note: receivers still acknowledged after {} s; stopped waiting for them ({e})",
            args.linger
        );
    }
    drop(group);
    node.shutdown();
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_reads_back_and_refuses_paths() {
        let h = FileHeader {
            name: "a.bin".into(),
            size: 12345,
            packet: 1400,
            sha256: [7; 32],
        };
        assert_eq!(FileHeader::decode(&h.encode()), Some(h.clone()));
        assert_eq!(h.packets(), 9);
        for bad in ["../x", "a/b", "..", ""] {
            let b = FileHeader {
                name: bad.into(),
                ..h.clone()
            };
            assert_eq!(FileHeader::decode(&b.encode()), None, "{bad}");
        }
        assert_eq!(FileHeader::decode(b"RMCASTF1\0"), None);
        // A packet size larger than a datagram (it sizes a buffer) is refused.
        let big = FileHeader {
            packet: u32::MAX,
            ..h.clone()
        };
        assert_eq!(FileHeader::decode(&big.encode()), None);
        let largest = FileHeader {
            packet: rmcast_proto::wire::MAX_DATAGRAM_LEN as u32,
            ..h.clone()
        };
        assert_eq!(FileHeader::decode(&largest.encode()), Some(largest));
        let nul = FileHeader {
            name: "a\0b".into(),
            ..h.clone()
        };
        assert_eq!(FileHeader::decode(&nul.encode()), None);
        // Printed names are escaped.
        let esc = FileHeader {
            name: "evil\x1b[2J\n".into(),
            ..h.clone()
        };
        assert_eq!(esc.shown_name(), "evil\\u{1b}[2J\\n");
    }
}
