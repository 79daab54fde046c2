//! State transfer (`rmcast::state`) on the real runtime, in-process nodes on loopback: a replica
//! started late gets the group's state at its place in the total order and then every later
//! message exactly once and in order; two joiners at once; a provider that leaves before it
//! answers; states and buffers past their bounds; engines without total order refused.
//!
//! Replicas apply `put K V` and keep, besides the map, the count of messages applied and a
//! digest folded over them in order, so that equal states mean the same messages applied once
//! each in the same order.

mod common;

use common::{cfg, node, unique_name};
use rmcast::{
    EngineChoice, Error, GroupEvent, Node, NodeId, OpenMode, Qos, StateApp, StateError, StateGroup,
    StateOptions, StateSender,
};
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Kv {
    map: BTreeMap<String, String>,
    applied: u64,
    digest: u64,
    /// Bytes of padding in the state (to make it large).
    pad: usize,
}

impl Kv {
    fn apply(&mut self, p: &[u8]) {
        let text = std::str::from_utf8(p).expect("utf-8 request");
        let w: Vec<&str> = text.splitn(3, ' ').collect();
        if let ["put", k, v] = w.as_slice() {
            self.map.insert(k.to_string(), v.to_string());
        }
        self.applied += 1;
        for b in p.iter().chain(b"\n") {
            self.digest = (self.digest ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
}

impl StateApp for Kv {
    fn get_state(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "{} {} {}", self.applied, self.digest, self.pad)?;
        out.write_all(&vec![b'.'; self.pad])?;
        for (k, v) in &self.map {
            writeln!(out, "{k} {v}")?;
        }
        Ok(())
    }

    fn set_state(&mut self, input: &mut dyn Read) -> io::Result<()> {
        let mut s = String::new();
        input.read_to_string(&mut s)?;
        let bad = || io::Error::new(io::ErrorKind::InvalidData, "bad state");
        let (head, rest) = s.split_once('\n').ok_or_else(bad)?;
        let h: Vec<u64> = head.split(' ').map(|x| x.parse().unwrap()).collect();
        self.applied = h[0];
        self.digest = h[1];
        self.pad = h[2] as usize;
        self.map = rest[self.pad..]
            .lines()
            .map(|l| {
                let (k, v) = l.split_once(' ').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect();
        Ok(())
    }
}

fn ring() -> EngineChoice {
    EngineChoice::named("ring").unwrap()
}

fn sequencer() -> EngineChoice {
    EngineChoice::named("sequencer").unwrap()
}

/// Open a group on a new node and bring a `Kv` to its state.
fn open(
    id: u32,
    name: &str,
    engine: &EngineChoice,
    mode: OpenMode,
    app: Kv,
    opts: StateOptions,
) -> (Node, Result<StateGroup<Kv>, StateError>) {
    let n = node(id);
    let g = n.open_group(cfg(name, engine, mode)).expect("open group");
    let sg = StateGroup::join(g, app, opts);
    (n, sg)
}

fn opts() -> StateOptions {
    StateOptions::default().timeout(Duration::from_secs(20))
}

/// A replica reading its group on its own thread until told how many messages to expect.
struct Replica {
    id: NodeId,
    sender: StateSender,
    /// Messages to apply before stopping (`u64::MAX`: not told yet).
    target: Arc<AtomicU64>,
    /// Stop reading at once, whatever was applied.
    halt: Arc<AtomicBool>,
    applied: Arc<AtomicU64>,
    requests_seen: Arc<AtomicU64>,
    /// The members holding the state, in the view's order, as this replica last saw them.
    holders: Arc<Mutex<Vec<NodeId>>>,
    thread: JoinHandle<StateGroup<Kv>>,
}

impl Replica {
    fn run(mut sg: StateGroup<Kv>) -> Replica {
        let target = Arc::new(AtomicU64::new(u64::MAX));
        let halt = Arc::new(AtomicBool::new(false));
        let applied = Arc::new(AtomicU64::new(sg.app().applied));
        let requests_seen = Arc::new(AtomicU64::new(0));
        let holders = Arc::new(Mutex::new(sg.holders()));
        let (t, h, a, r, hs) = (
            target.clone(),
            halt.clone(),
            applied.clone(),
            requests_seen.clone(),
            holders.clone(),
        );
        let id = sg.group().me();
        let sender = sg.sender();
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(90);
            while sg.app().applied < t.load(Ordering::Acquire) && !h.load(Ordering::Acquire) {
                assert!(
                    Instant::now() < deadline,
                    "replica {id} stuck at {} messages",
                    sg.app().applied
                );
                match sg.recv_timeout(Duration::from_millis(20)) {
                    Ok(GroupEvent::Deliver(d)) => sg.app_mut().apply(&d.payload),
                    Ok(_) | Err(Error::Timeout | Error::MemberFailed { .. }) => {}
                    Err(e) => panic!("replica {id}: {e}"),
                }
                a.store(sg.app().applied, Ordering::Release);
                r.store(sg.stats().requests_seen, Ordering::Release);
                *hs.lock().unwrap() = sg.holders();
            }
            sg
        });
        Replica {
            id,
            sender,
            target,
            halt,
            applied,
            requests_seen,
            holders,
            thread,
        }
    }

    fn applied(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    /// Read until `total` messages are applied, and hand the group back.
    fn finish(self, total: u64) -> StateGroup<Kv> {
        self.target.store(total, Ordering::Release);
        self.thread.join().expect("replica thread")
    }

    /// Stop reading now (the events wait in the group's queue), and hand the group back.
    fn halt(self) -> StateGroup<Kv> {
        self.halt.store(true, Ordering::Release);
        self.thread.join().expect("replica thread")
    }
}

/// Wait (with a deadline) until `cond` holds.
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn write(sender: &StateSender, range: std::ops::Range<u64>) {
    for i in range {
        let put = format!("put key{i} value{i}");
        if i % 100 == 99 {
            sender.send(put).expect("send");
        } else {
            sender.send_nowait(put).expect("send_nowait");
        }
    }
}

fn late_replica_reads_every_key_after_1000_writes(engine: EngineChoice) {
    let name = unique_name("state-late");
    let (na, a) = open(1, &name, &engine, OpenMode::Create, Kv::default(), opts());
    let a = a.expect("the creator has its state at once");
    assert_eq!(a.stats().provider, None);
    let a = Replica::run(a);
    let (nb, b) = open(2, &name, &engine, OpenMode::Join, Kv::default(), opts());
    let b = Replica::run(b.expect("state of an empty group"));
    write(&a.sender, 0..1000);
    wait_until("1,000 writes applied", || {
        a.applied() == 1000 && b.applied() == 1000
    });

    let (nc, c) = open(3, &name, &engine, OpenMode::Join, Kv::default(), opts());
    let c = c.expect("state transfer");
    // Before it reads anything: every key, from the state alone.
    assert_eq!(c.app().map.len(), 1000);
    for i in 0..1000 {
        assert_eq!(
            c.app().map.get(&format!("key{i}")).map(String::as_str),
            Some(format!("value{i}").as_str()),
            "key{i}"
        );
    }
    assert_eq!(c.app().applied, 1000);
    assert_eq!(c.stats().requests_sent, 1);
    // The provider is the first holder in the view's order (a or b, as the engine ranks them).
    let me = c.group().me();
    let first = a.holders.lock().unwrap().iter().copied().find(|h| *h != me);
    assert_eq!(c.stats().provider, first);
    // Then every later message once, in order.
    let c = Replica::run(c);
    write(&c.sender, 1000..1100);
    let states: Vec<Kv> = [a, b, c]
        .into_iter()
        .map(|r| r.finish(1100).app().clone())
        .collect();
    assert_eq!(states[0].map.len(), 1100);
    assert_eq!(states[0], states[1]);
    assert_eq!(states[0], states[2]);
    for n in [nc, nb, na] {
        n.shutdown();
    }
}

#[test]
fn ring_replica_started_after_1000_writes_reads_every_key() {
    late_replica_reads_every_key_after_1000_writes(ring());
}

#[test]
fn sequencer_replica_started_after_1000_writes_reads_every_key() {
    late_replica_reads_every_key_after_1000_writes(sequencer());
}

#[test]
fn two_replicas_joining_at_once_while_writes_go_on_end_with_equal_maps() {
    let name = unique_name("state-two");
    let engine = ring();
    let (na, a) = open(11, &name, &engine, OpenMode::Create, Kv::default(), opts());
    let a = Replica::run(a.unwrap());
    let (nb, b) = open(12, &name, &engine, OpenMode::Join, Kv::default(), opts());
    let b = Replica::run(b.unwrap());
    // Two writers, one per member, on the same keys: the order decides the values.
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<JoinHandle<u64>> = [&a, &b]
        .iter()
        .map(|r| {
            let (s, stop, id) = (r.sender.clone(), stop.clone(), r.id);
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Acquire) {
                    s.send(format!("put key{} {id}-{n}", n % 50)).expect("send");
                    n += 1;
                }
                n
            })
        })
        .collect();
    wait_until("writes under way", || a.applied() >= 100);
    let joiners: Vec<_> = [13, 14]
        .into_iter()
        .map(|id| {
            let name = name.clone();
            let engine = engine.clone();
            std::thread::spawn(move || {
                let (n, sg) = open(id, &name, &engine, OpenMode::Join, Kv::default(), opts());
                (n, sg.expect("state transfer"))
            })
        })
        .collect();
    let mut joined = Vec::new();
    for j in joiners {
        let (n, sg) = j.join().unwrap();
        let at_state = sg.app().applied;
        assert!(at_state >= 100, "the state holds the writes before");
        assert!(sg.stats().provider.is_some());
        joined.push((n, Replica::run(sg), at_state));
    }
    // The writes went on after both requests: each joiner applies some beyond its state.
    for (_, r, at_state) in &joined {
        wait_until("writes after the join", || r.applied() >= at_state + 50);
    }
    stop.store(true, Ordering::Release);
    let total: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    let mut states = vec![a.finish(total).app().clone(), b.finish(total).app().clone()];
    let mut nodes = vec![na, nb];
    for (n, r, _) in joined {
        states.push(r.finish(total).app().clone());
        nodes.push(n);
    }
    assert_eq!(states[0].applied, total);
    for s in &states[1..] {
        assert_eq!(s, &states[0]);
    }
    for n in nodes.into_iter().rev() {
        n.shutdown();
    }
}

#[test]
fn provider_that_leaves_before_it_answers_is_replaced_and_the_joiner_asks_again() {
    let name = unique_name("state-gone");
    let engine = ring();
    let (na, a) = open(21, &name, &engine, OpenMode::Create, Kv::default(), opts());
    let a = Replica::run(a.unwrap());
    let (nb, b) = open(22, &name, &engine, OpenMode::Join, Kv::default(), opts());
    let b = Replica::run(b.unwrap());
    write(&a.sender, 0..100);
    wait_until("writes applied", || {
        a.applied() == 100 && b.applied() == 100
    });
    // The provider is the first holder in the view's order: it stops reading, so it will not
    // answer.
    let first = b.holders.lock().unwrap()[0];
    let ((np, provider), (ns, survivor)) = if first == a.id {
        ((na, a), (nb, b))
    } else {
        ((nb, b), (na, a))
    };
    assert_eq!(provider.id, first);
    let provider_group = provider.halt();
    let joiner = {
        let name = name.clone();
        std::thread::spawn(move || open(23, &name, &engine, OpenMode::Join, Kv::default(), opts()))
    };
    // Once the request is in the order (the survivor read it), the provider goes.
    wait_until("the request ordered", || {
        survivor.requests_seen.load(Ordering::Acquire) >= 1
    });
    np.shutdown();
    drop(provider_group);
    let (nc, c) = joiner.join().unwrap();
    let c = c.expect("state from the next holder");
    assert_eq!(c.stats().requests_sent, 2, "asked again after the view");
    assert_eq!(c.stats().provider, Some(survivor.id));
    assert_eq!(c.app().map.len(), 100);
    let c = Replica::run(c);
    write(&survivor.sender, 100..150);
    let (ss, sc) = (survivor.finish(150), c.finish(150));
    assert_eq!(ss.app(), sc.app());
    nc.shutdown();
    ns.shutdown();
}

#[test]
fn resync_brings_a_member_to_the_groups_state_again_and_a_member_alone_keeps_its_own() {
    let name = unique_name("state-resync");
    let engine = sequencer();
    let own = Kv {
        applied: 7,
        ..Kv::default()
    };
    let (na, a) = open(81, &name, &engine, OpenMode::Create, own.clone(), opts());
    let mut a = a.unwrap();
    // Alone: its own state is the group's.
    a.resync().expect("alone");
    assert_eq!(a.app(), &own);
    assert_eq!(a.stats().requests_sent, 1);
    let a = Replica::run(a);
    let (nb, b) = open(82, &name, &engine, OpenMode::Join, Kv::default(), opts());
    let mut b = b.unwrap();
    write(&a.sender, 0..200);
    wait_until("writes applied at a", || a.applied() == 207);
    // b has read nothing since its join: it takes the state again, with every write.
    assert!(b.app().map.is_empty());
    b.resync().expect("resync");
    assert_eq!(b.app().map.len(), 200);
    assert_eq!(b.stats().requests_sent, 2);
    assert!(!b.detached());
    let b = Replica::run(b);
    write(&b.sender, 200..250);
    let (sa, sb) = (a.finish(257), b.finish(257));
    assert_eq!(sa.app(), sb.app());
    nb.shutdown();
    na.shutdown();
}

#[test]
fn a_state_larger_than_a_datagram_goes_through_on_the_ring_in_fragments() {
    let name = unique_name("state-frag");
    let engine = ring();
    let big = Kv {
        pad: 200_000,
        ..Kv::default()
    };
    let (na, a) = open(31, &name, &engine, OpenMode::Create, big.clone(), opts());
    let a = Replica::run(a.unwrap());
    let (nb, b) = open(32, &name, &engine, OpenMode::Join, Kv::default(), opts());
    let b = b.expect("a 200 KB state in fragments");
    assert_eq!(b.app(), &big);
    drop(a.halt());
    nb.shutdown();
    na.shutdown();
}

#[test]
fn a_state_larger_than_the_rings_largest_message_fails_with_a_clear_error() {
    // Past the Ring's 1 MiB: the engine refuses the snapshot, and the joiner is told at once.
    let name = unique_name("state-big");
    let engine = ring();
    let big = Kv {
        pad: 2_000_000,
        ..Kv::default()
    };
    let (na, a) = open(33, &name, &engine, OpenMode::Create, big, opts());
    let a = Replica::run(a.unwrap());
    let (nb, b) = open(34, &name, &engine, OpenMode::Join, Kv::default(), opts());
    match b {
        Err(e @ StateError::TooLarge { provider, .. }) => {
            assert_eq!(provider, a.id);
            let text = e.to_string();
            assert!(text.contains("state larger than"), "{text}");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    let a = a.halt();
    assert_eq!(a.stats().refused, 1);
    nb.shutdown();
    na.shutdown();
}

#[test]
fn a_state_of_exactly_max_state_bytes_is_transferred() {
    let bound = 4_096;
    let pad = (0..bound)
        .find(|p| format!("0 0 {p}\n").len() + p == bound)
        .unwrap();
    let exact = Kv {
        pad,
        ..Kv::default()
    };
    let name = unique_name("state-limit");
    let engine = sequencer();
    let o = opts().max_state_bytes(bound);
    let (na, a) = open(
        73,
        &name,
        &engine,
        OpenMode::Create,
        exact.clone(),
        o.clone(),
    );
    let a = Replica::run(a.unwrap());
    let (nb, b) = open(74, &name, &engine, OpenMode::Join, Kv::default(), o);
    let b = b.expect("a state of the bound fits");
    assert_eq!(b.stats().state_bytes, bound);
    assert_eq!(b.app(), &exact);
    drop(a.halt());
    nb.shutdown();
    na.shutdown();
}

#[test]
fn a_state_past_max_state_bytes_is_refused_on_the_sequencer_too() {
    let name = unique_name("state-bound");
    let engine = sequencer();
    let app = Kv {
        pad: 5_000,
        ..Kv::default()
    };
    let bound = StateOptions::default().max_state_bytes(4_096);
    let (na, a) = open(41, &name, &engine, OpenMode::Create, app, bound);
    let a = Replica::run(a.unwrap());
    let (nb, b) = open(42, &name, &engine, OpenMode::Join, Kv::default(), opts());
    match b {
        Err(StateError::TooLarge { limit, reason, .. }) => {
            assert_eq!(limit, 4_096);
            assert!(reason.contains("4096"), "{reason}");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    drop(a.halt());
    nb.shutdown();
    na.shutdown();
}

#[test]
fn messages_past_the_joiners_buffer_bound_fail_the_transfer() {
    let name = unique_name("state-buffer");
    let engine = ring();
    let (na, a) = open(51, &name, &engine, OpenMode::Create, Kv::default(), opts());
    let a = Replica::run(a.unwrap());
    let (nb, b) = open(52, &name, &engine, OpenMode::Join, Kv::default(), opts());
    let b = Replica::run(b.unwrap());
    wait_until("b a holder at a", || a.holders.lock().unwrap().len() == 2);
    // The provider (the first holder) stops reading, so the snapshot waits while the other
    // member writes.
    let first = a.holders.lock().unwrap()[0];
    let (provider, b) = if first == a.id { (a, b) } else { (b, a) };
    let a_group = provider.halt();
    let joiner = {
        let name = name.clone();
        std::thread::spawn(move || {
            let small = opts().max_buffer_bytes(4_096);
            open(53, &name, &engine, OpenMode::Join, Kv::default(), small)
        })
    };
    wait_until("the request ordered", || {
        b.requests_seen.load(Ordering::Acquire) >= 1
    });
    for i in 0..100 {
        b.sender
            .send(format!("put key{i} {}", "v".repeat(100)))
            .unwrap();
    }
    let (nc, c) = joiner.join().unwrap();
    match c {
        Err(e @ StateError::BufferFull { bound: 4_096 }) => {
            assert!(e.to_string().contains("max_buffer_bytes"), "{e}")
        }
        other => panic!("expected BufferFull, got {other:?}"),
    }
    drop(b.halt());
    drop(a_group);
    for n in [nc, nb, na] {
        n.shutdown();
    }
}

#[test]
fn engines_without_total_order_are_refused() {
    let n = node(61);
    let gossip = EngineChoice::named("gossip").unwrap();
    let mut c = cfg(&unique_name("state-gossip"), &gossip, OpenMode::Create);
    c.qos = Qos::SourceOrdered;
    let g = n.open_group(c).unwrap();
    match StateGroup::join(g, Kv::default(), opts()) {
        Err(e @ StateError::NotTotallyOrdered { .. }) => {
            assert!(e.to_string().contains("engine gossip"), "{e}")
        }
        other => panic!("expected NotTotallyOrdered, got {other:?}"),
    }
    n.shutdown();
    // The ring below total order is refused too.
    let n = node(62);
    let mut c = cfg(&unique_name("state-fifo"), &ring(), OpenMode::Create);
    c.qos = Qos::SourceOrdered;
    let g = n.open_group(c).unwrap();
    match StateGroup::join(g, Kv::default(), opts()) {
        Err(e @ StateError::NotTotallyOrdered { .. }) => {
            assert!(e.to_string().contains("source"), "{e}")
        }
        other => panic!("expected NotTotallyOrdered, got {other:?}"),
    }
    n.shutdown();
}
