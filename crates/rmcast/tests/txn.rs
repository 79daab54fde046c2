//! Multicast transactions (`rmcast::txn`) that fail, over real loopback sockets: every way of
//! sending one (`request`, `request_async`, the group's blocking and async `send`) ends with an
//! error naming the receivers within the open's timeout plus a margin, never hangs.

mod common;

use bytes::Bytes;
use common::*;
use rmcast::txn::{TxnError, TxnEvent, TxnGroup, TxnOptions, Until};
use rmcast::{EngineChoice, EngineFactory, EngineParams, EngineSettings, Error, NodeId};
use rmcast_proto::txn::TxnFactory;
use rmcast_proto::{
    Counters, Engine, Event, GroupInfo, Guarantees, Qos, SendError, Time, Transmit,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The open's timeout of every client here.
const OPEN: Duration = Duration::from_millis(300);
/// What a failure may take beyond the open's timeout (scheduling on a loaded 2-core CI host).
const MARGIN: Duration = Duration::from_secs(3);

/// A server answering every request with "ok" until `stop`.
fn server(id: u32, name: &str, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    let name = name.to_string();
    let (ready_tx, ready_rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let node = node(id);
        let mut g = TxnGroup::open(&node, &name, TxnOptions::server()).unwrap();
        ready_tx.send(()).unwrap();
        while !stop.load(Ordering::SeqCst) {
            if let Ok(Some(TxnEvent::Request(d))) = g.next_event(Duration::from_millis(20)) {
                let _ = g.reply(d.sender, d.msg, "ok");
            }
        }
    });
    ready_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    h
}

/// Run `f` on a thread and fail the test if it takes longer than `limit` (rather than hang).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("still blocked after {limit:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("panicked (see above)"),
    }
}

fn client_opts() -> TxnOptions {
    TxnOptions::client().min(2).max(2).timeout(OPEN)
}

/// min 2, one server: `request`, `request_async`, `Group::send` and `Group::send_async` all
/// fail within the open's timeout plus a margin, naming the one server that answered; the
/// client's leave afterwards does not wait for the failed transactions.
#[test]
fn a_failed_open_ends_every_kind_of_send_with_the_receivers_named() {
    let name = unique_name("txn-fail");
    let stop = Arc::new(AtomicBool::new(false));
    let s = server(61, &name, stop.clone());
    let limit = OPEN + MARGIN;
    within(4 * limit + Duration::from_secs(5), move || {
        let node = node(60);
        let mut g = TxnGroup::open(&node, &name, client_opts()).unwrap();

        let t = Instant::now();
        let err = g.request("q", Until::All).unwrap_err();
        assert!(t.elapsed() < limit, "request took {:?}", t.elapsed());
        assert_eq!(
            err,
            TxnError::OpenFailed {
                answered: vec![NodeId(61)],
                min: 2
            }
        );

        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let t = Instant::now();
        let err = rt
            .block_on(async { tokio::time::timeout(limit, g.request_async("q", Until::All)).await })
            .expect("request_async in time")
            .unwrap_err();
        assert!(
            matches!(&err, TxnError::OpenFailed { answered, min: 2 } if answered == &[NodeId(61)]),
            "{err:?}"
        );
        assert!(t.elapsed() < limit, "request_async took {:?}", t.elapsed());

        // The group's own blocking send: it used to wait for a completion that never comes.
        let t = Instant::now();
        let sender = g.group().sender();
        let err = within(limit, move || sender.send("q")).unwrap_err();
        assert!(t.elapsed() < limit, "send took {:?}", t.elapsed());
        match &err {
            Error::Failed { msg, reason } => {
                assert_eq!(*msg, 2);
                assert!(reason.contains("61"), "{reason}");
                assert!(reason.contains("2 needed"), "{reason}");
            }
            e => panic!("wrong error {e:?}"),
        }
        let t = Instant::now();
        let err = rt
            .block_on(async { tokio::time::timeout(limit, g.group().send_async("q")).await })
            .expect("send_async in time")
            .unwrap_err();
        assert!(matches!(err, Error::Failed { msg: 3, .. }), "{err:?}");
        assert!(t.elapsed() < limit, "send_async took {:?}", t.elapsed());
        // The failed transactions are not outstanding: the leave is prompt.
        let t = Instant::now();
        g.close().unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "leave took {:?}",
            t.elapsed()
        );
    });
    stop.store(true, Ordering::SeqCst);
    s.join().unwrap();
}

/// A receiver that answers the open and then dies: its engine goes silent for good after its
/// first datagram (the answer), as a process killed right then would (a process cannot kill
/// one of its own threads; the multi-process `kill -9` is the CLI's to test).
struct DiesAfterAnswer {
    inner: Box<dyn Engine>,
    dead: bool,
}

impl Engine for DiesAfterAnswer {
    fn handle_datagram(&mut self, now: Time, from: NodeId, datagram: &[u8]) {
        if !self.dead {
            self.inner.handle_datagram(now, from, datagram);
        }
    }
    fn handle_timeout(&mut self, now: Time) {
        if !self.dead {
            self.inner.handle_timeout(now);
        }
    }
    fn submit(&mut self, now: Time, payload: Bytes, qos: Qos) -> Result<u64, SendError> {
        self.inner.submit(now, payload, qos)
    }
    fn leave(&mut self, now: Time) {
        self.inner.leave(now)
    }
    fn poll_transmit(&mut self, now: Time, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.dead {
            return None;
        }
        let t = self.inner.poll_transmit(now, buf);
        self.dead = t.is_some();
        t
    }
    fn poll_event(&mut self) -> Option<Event> {
        self.inner.poll_event()
    }
    fn poll_timeout(&self) -> Option<Time> {
        if self.dead {
            None
        } else {
            self.inner.poll_timeout()
        }
    }
    fn node_id(&self) -> NodeId {
        self.inner.node_id()
    }
    fn guarantees(&self) -> Guarantees {
        self.inner.guarantees()
    }
    fn info(&self) -> GroupInfo {
        self.inner.info()
    }
    fn counters(&self) -> &Counters {
        self.inner.counters()
    }
    fn can_submit(&self) -> bool {
        self.inner.can_submit()
    }
}

/// Builds `txn` engines that die after answering their first open.
struct DyingFactory(TxnFactory);

impl EngineFactory for DyingFactory {
    fn name(&self) -> &str {
        "txn"
    }
    fn guarantees(&self, settings: &EngineSettings) -> Guarantees {
        self.0.guarantees(settings)
    }
    fn build(&self, p: &EngineParams<'_>) -> Box<dyn Engine> {
        Box::new(DiesAfterAnswer {
            inner: self.0.build(p),
            dead: false,
        })
    }
}

/// A receiver of the set dies after answering the open: the group's blocking `send` fails
/// within the receiver timeout (2 s) plus a margin, naming the dead receiver and the one
/// left, and the transaction's events say the same.
#[test]
fn a_receiver_dying_mid_transaction_fails_the_send_naming_it() {
    let name = unique_name("txn-die");
    let stop = Arc::new(AtomicBool::new(false));
    let s1 = server(71, &name, stop.clone());
    let dying_node = node(72);
    // It answers the open at once (no backoff): with a random wait it could answer only
    // after it held the whole message, and then the transaction rightly commits.
    let opts = TxnOptions::server().backoff_unit(Duration::ZERO);
    let dying = TxnGroup::config(&name, &opts).engine(EngineChoice::custom(Arc::new(
        DyingFactory(TxnFactory::with_config(opts.engine_config())),
    )));
    let dying_group = dying_node.open_group(dying).unwrap();
    let limit = OPEN + Duration::from_secs(2) + MARGIN;
    within(limit + Duration::from_secs(5), move || {
        let node = node(70);
        let mut g = TxnGroup::open(&node, &name, client_opts()).unwrap();
        let sender = g.group().sender();
        let t = Instant::now();
        // Far more than the window before any report (64 KiB) and the FIRST packet carry: the
        // receiver cannot hold the whole message when it dies, so the transaction cannot
        // commit (a message every receiver held is released, and committed even if one dies
        // then).
        let send = std::thread::spawn(move || sender.send(vec![7u8; 1 << 20]));
        let err = loop {
            match g.next_event(limit.saturating_sub(t.elapsed())).unwrap() {
                Some(TxnEvent::Failed { txn: 0, error }) => break error,
                Some(TxnEvent::Committed { txn: 0 }) => panic!("committed though a receiver died"),
                Some(_) => {}
                None => panic!("no outcome after {:?}", t.elapsed()),
            }
        };
        assert_eq!(
            err,
            TxnError::Aborted {
                dropped: vec![NodeId(72)],
                left: vec![NodeId(71)],
                min: 2
            }
        );
        let err = send.join().unwrap().unwrap_err();
        assert!(t.elapsed() < limit, "failure took {:?}", t.elapsed());
        match &err {
            Error::Failed { msg: 0, reason } => {
                assert!(reason.contains("[72] fell silent"), "{reason}");
                assert!(reason.contains("needed: [71]"), "{reason}");
            }
            e => panic!("wrong error {e:?}"),
        }
    });
    drop(dying_group);
    stop.store(true, Ordering::SeqCst);
    s1.join().unwrap();
}
