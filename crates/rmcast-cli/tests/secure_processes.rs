//! An attacker against a secure group of real processes: three `rmcast worker` processes with a
//! key from `rmcast keygen` stream messages while this test, knowing only the group name (and
//! what it hears on the network), injects random bytes, plain and sealed forgeries of every
//! packet type with a member's id, replays of captured datagrams and captured datagrams with
//! one bit flipped, to the group's multicast address and to the members' unicast addresses
//! (learnt from the captured traffic). Every member must finish its stream, the logs must pass
//! the log verifier, and the members' runtimes must have refused exactly as many datagrams as
//! reached them. Every child is killed (by its own handle) if the test fails.

use rmcast_proto::wire::{self, EngineKind, Header, FLAG_AUTH};
use rmcast_proto::NodeId;
use rmcast_sim::log::{read_log, verify_logs};
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::proc::{scratch, EXE};
const MEMBERS: usize = 3;

/// Children killed when the test ends, however it ends.
struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn wait_for(path: &Path, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn a_secure_group_of_processes_refuses_every_injection() {
    let dir = scratch("secure");
    let key = dir.join("group.key");
    let st = Command::new(EXE).arg("keygen").arg(&key).status().unwrap();
    assert!(st.success());
    let group = format!("secure-procs-{}", std::process::id());
    let (ip, port) = rmcast_proto::common::multicast_endpoint(&group);
    let maddr = SocketAddrV4::new(Ipv4Addr::from(ip), port);
    let gid = rmcast_proto::common::group_id(&group);

    // The attacker listens to the group like any host on the network.
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

    let mut kids = Kids(Vec::new());
    for id in 1..=MEMBERS {
        let ready = dir.join(format!("ready-{id}"));
        let child = Command::new(EXE)
            .args(["worker", "--group", &group, "--id", &id.to_string()])
            .arg(if id == 1 { "--create" } else { "--join" })
            .args(["--members", &MEMBERS.to_string()])
            .args(["--count", "1200", "--rate", "300", "--resilience", "1"])
            .args(["--timeout-ms", "60000"])
            .arg("--key-file")
            .arg(&key)
            .arg("--log")
            .arg(dir.join(format!("member-{id}.jsonl")))
            .arg("--ready-file")
            .arg(&ready)
            .env_remove(rmcast::KEY_FILE_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start rmcast worker");
        kids.0.push(child);
        wait_for(&ready, Duration::from_secs(15));
    }

    // Inject while the members stream (four seconds; the injection takes about two), paced so
    // that no socket buffer overflows: the accounting below is exact. The members read their
    // counters only once their stream is over.
    // What was multicast before the last member joined is not replayed: a member accepts once
    // a datagram it never received from a sender it never heard (see the README's limits).
    // Members' addresses are learnt from everything heard (their joins included).
    let mut buf = [0u8; 65536];
    let mut members: Vec<(NodeId, SocketAddr)> = Vec::new();
    let learn = |d: &[u8], from: SocketAddr, members: &mut Vec<(NodeId, SocketAddr)>| {
        if let Ok(p) = wire::decode(d) {
            if !members.iter().any(|m| m.0 == p.header.sender) {
                members.push((p.header.sender, from));
            }
        }
    };
    let drain = Instant::now();
    while drain.elapsed() < Duration::from_millis(50) {
        let Ok((n, from)) = sniff.recv_from(&mut buf) else {
            break;
        };
        learn(&buf[..n], from, &mut members);
    }
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut captured: VecDeque<(Vec<u8>, SocketAddr)> = VecDeque::new();
    let me = out.local_addr().unwrap();
    let (mut injected, mut receipts) = (0u64, 0u64);
    let mut flip = 0usize;
    let mut key_id = 0u32;
    let start = Instant::now();
    while injected < 20_000 && start.elapsed() < Duration::from_secs(20) {
        while let Ok((n, from)) = sniff.recv_from(&mut buf) {
            if from == me || n == 0 {
                continue;
            }
            if let Some(a) = wire::decode(&buf[..n]).ok().and_then(|p| p.auth) {
                key_id = a.key_id;
            }
            learn(&buf[..n], from, &mut members);
            if captured.len() == 256 {
                captured.pop_front();
            }
            captured.push_back((buf[..n].to_vec(), from));
        }
        if members.len() < MEMBERS || captured.len() < 16 {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        for _ in 0..50 {
            let old = captured[rng.below(captured.len() as u64 / 2) as usize]
                .0
                .clone();
            let (member, _) = members[rng.below(members.len() as u64) as usize];
            let forged = |flags: u8, kid: Option<u32>, rng: &mut Rng| {
                let mut b = Vec::new();
                Header {
                    engine: EngineKind::Sequencer,
                    ptype: (rng.below(16) as u8).max(1),
                    flags,
                    group: gid,
                    incarnation: wire::decode(&old).map_or(0, |p| p.header.incarnation),
                    sender: member,
                }
                .encode(&mut b);
                if let Some(k) = kid {
                    b.extend_from_slice(&k.to_be_bytes());
                    b.extend_from_slice(&member.0.to_be_bytes());
                    b.extend_from_slice(&rng.next().to_be_bytes());
                }
                for _ in 0..rng.below(100) + 16 {
                    b.push(rng.next() as u8);
                }
                b
            };
            let d = match injected % 6 {
                0 => (0..rng.below(200) + 1).map(|_| rng.next() as u8).collect(),
                1 => forged(0, None, &mut rng),
                2 => forged(FLAG_AUTH, Some(key_id), &mut rng),
                3 => forged(FLAG_AUTH, Some(key_id ^ 0x5a5a_0001), &mut rng),
                4 => old,
                _ => {
                    let mut b = old;
                    let bit = flip % (b.len() * 8);
                    flip += 7;
                    b[bit / 8] ^= 1 << (bit % 8);
                    b
                }
            };
            let to = if rng.below(2) == 0 {
                receipts += MEMBERS as u64;
                SocketAddr::V4(maddr)
            } else {
                receipts += 1;
                members[rng.below(members.len() as u64) as usize].1
            };
            out.send_to(&d, to).unwrap();
            injected += 1;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(injected, 20_000, "the stream ended before the injection");

    // Every worker finishes its stream and prints its figures.
    let mut refused = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    for (i, child) in kids.0.iter_mut().enumerate() {
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "worker {} did not finish", i + 1);
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stdout = String::new();
        std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
        assert!(status.success(), "worker {} failed: {stdout}", i + 1);
        let stats: serde_json::Value =
            serde_json::from_str(stdout.lines().last().expect("a stats line")).unwrap();
        assert_eq!(stats["complete"], true);
        assert_eq!(stats["delivered"], 3600);
        refused += stats["node_refused"].as_u64().unwrap();
    }
    // Nothing was accepted: every datagram that reached a member was refused by its runtime.
    assert_eq!(refused, receipts, "{injected} injected");
    let logs: Vec<_> = (1..=MEMBERS)
        .map(|id| read_log(dir.join(format!("member-{id}.jsonl"))).unwrap())
        .collect();
    let report = verify_logs(&logs).expect("logs verify");
    assert_eq!(
        report.per_member.iter().map(|p| p.1).collect::<Vec<_>>(),
        // The streams and each worker's closing barrier message.
        vec![3600 + MEMBERS; MEMBERS]
    );
    // No forged member, no failure, no reset: the views are the joins and the final leaves.
    for log in &logs {
        for r in log {
            match &r.event {
                rmcast_proto::Event::View(v) => {
                    assert!(v
                        .members
                        .iter()
                        .all(|m| (1..=MEMBERS as u32).contains(&m.0)));
                }
                rmcast_proto::Event::Recovery(e) => panic!("recovery under attack: {e:?}"),
                _ => {}
            }
        }
    }
    println!(
        "{injected} injected into 3 processes, {receipts} receipts, {refused} refused, 0 accepted"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
