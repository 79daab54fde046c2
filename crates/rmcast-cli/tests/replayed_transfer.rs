//! `rmcast receive --keep-listening --key-file K` while the datagrams of a finished transfer are
//! replayed at it: it still receives the next real file intact, and writes nothing else.
//!
//! The receiver listens anew (a new node, which has heard no sender session) after each file.
//! Before sessions were bound to a challenge, the replayed transfer was taken as new by that
//! listener: it bound itself to the replayed session's sender and never received the next file.
//! Now the replayed session, which is gone, never answers its challenge, so none of its
//! datagrams reaches the engine (`crates/rmcast/src/sessions.rs`).

use rmcast_proto::wire;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod support;

use support::proc::{keygen, scratch, text, Proc};

fn content(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A host on the group's network, on its own thread: it records the sealed datagrams the group
/// multicasts until told to flood, then replays them to the group's address, over and over
/// (about 10,000 a second), until stopped.
struct Replayer {
    flood: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    captured: Arc<Mutex<usize>>,
    sent: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Replayer {
    fn start(group: &str) -> Replayer {
        let (ip, port) = rmcast_proto::common::multicast_endpoint(group);
        let maddr = SocketAddrV4::new(Ipv4Addr::from(ip), port);
        let sniff = socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )
        .unwrap();
        sniff.set_reuse_address(true).unwrap();
        sniff.bind(&SocketAddr::V4(maddr).into()).unwrap();
        sniff
            .join_multicast_v4(maddr.ip(), &Ipv4Addr::LOCALHOST)
            .unwrap();
        sniff.set_nonblocking(true).unwrap();
        let sniff: UdpSocket = sniff.into();
        let out = UdpSocket::bind("127.0.0.1:0").unwrap();
        out.set_multicast_ttl_v4(0).unwrap();
        let (flood, stop) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let captured = Arc::new(Mutex::new(0));
        let sent = Arc::new(AtomicU64::new(0));
        let (f, s, c, n) = (flood.clone(), stop.clone(), captured.clone(), sent.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 65536];
            let mut kept: Vec<Vec<u8>> = Vec::new();
            while !f.load(Ordering::Acquire) && !s.load(Ordering::Relaxed) {
                while let Ok((len, _)) = sniff.recv_from(&mut buf) {
                    if kept.len() < 100_000
                        && wire::decode(&buf[..len]).is_ok_and(|p| p.auth.is_some())
                    {
                        kept.push(buf[..len].to_vec());
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            *c.lock().unwrap() = kept.len();
            let to = SocketAddr::V4(maddr);
            'flood: while !kept.is_empty() {
                for chunk in kept.chunks(20) {
                    if s.load(Ordering::Relaxed) {
                        break 'flood;
                    }
                    for d in chunk {
                        let _ = out.send_to(d, to);
                    }
                    n.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        });
        Replayer {
            flood,
            stop,
            captured,
            sent,
            thread: Some(thread),
        }
    }

    /// Stop recording and start replaying what was recorded.
    fn flood(&self) {
        self.flood.store(true, Ordering::Release);
    }

    /// Datagrams replayed so far.
    fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Stop; returns (datagrams recorded, datagrams replayed).
    fn stop(mut self) -> (usize, u64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        (*self.captured.lock().unwrap(), self.sent())
    }
}

impl Drop for Replayer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn send(g: &str, file: &Path, key: &str) -> Proc {
    Proc::start(&[
        "send",
        file.to_str().unwrap(),
        "--group",
        g,
        "--quiet",
        "--linger",
        "1",
        "--key-file",
        key,
    ])
}

/// Wait (at most 60 s) until `path` exists: `receive` links a file to its name only once it
/// is complete and verified.
fn wait_for(path: &Path, receiver: &mut Proc) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        if let Some(st) = receiver.child().try_wait().unwrap() {
            let o = receiver.finish();
            panic!("receive ended ({st}): {}", text(&o));
        }
        if Instant::now() > deadline {
            let o = receiver.finish();
            panic!("{} never arrived: {}", path.display(), text(&o));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn keep_listening_receives_the_next_file_while_an_old_transfer_is_replayed() {
    let dir = scratch("keep");
    let key = keygen(&dir, "group.key");
    let k = key.to_str().unwrap().to_string();
    let g = format!("replayed-keep-{}", std::process::id());
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let replayer = Replayer::start(&g);
    let mut receiver = Proc::start(&[
        "receive",
        "--group",
        &g,
        "--out",
        out.to_str().unwrap(),
        "--keep-listening",
        "--quiet",
        "--key-file",
        &k,
    ]);
    std::thread::sleep(Duration::from_millis(300));

    // The first transfer, recorded by the replayer.
    let first = content(300_000, 1);
    let first_path = dir.join("first.bin");
    std::fs::write(&first_path, &first).unwrap();
    let s = send(&g, &first_path, &k).wait(Duration::from_secs(60));
    assert!(s.status.success(), "first send: {}", text(&s));
    wait_for(&out.join("first.bin"), &mut receiver);
    assert!(std::fs::read(out.join("first.bin")).unwrap() == first);

    // Its sender is gone; its datagrams are replayed at the receiver, which listens anew.
    replayer.flood();
    let deadline = Instant::now() + Duration::from_secs(30);
    while replayer.sent() < 10_000 {
        assert!(Instant::now() < deadline, "the replay did not start");
        std::thread::sleep(Duration::from_millis(20));
    }

    // The next real file arrives intact, the replay going on.
    let second = content(200_000, 2);
    let second_path = dir.join("second.bin");
    std::fs::write(&second_path, &second).unwrap();
    let sender = send(&g, &second_path, &k);
    wait_for(&out.join("second.bin"), &mut receiver);
    let s = sender.wait(Duration::from_secs(60));
    assert!(s.status.success(), "second send: {}", text(&s));
    assert!(
        std::fs::read(out.join("second.bin")).unwrap() == second,
        "the second file differs"
    );
    let (captured, replayed) = replayer.stop();
    let o = receiver.stop();
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, vec!["first.bin", "second.bin"], "{}", text(&o));
    println!(
        "{captured} datagrams of the first transfer recorded and {replayed} replayed: the \
         second file received intact, nothing else written"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
