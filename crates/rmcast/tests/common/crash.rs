//! Fault injection for the runtime's tests: an engine wrapper that a test can crash or cut off
//! from the network, as smoltcp's fault injector wraps a device. A process cannot SIGKILL one of
//! its own threads; this is the in-process stand-in (the real `kill -9` is in rmcast-cli's
//! multi-process tests).

use bytes::Bytes;
use rmcast::{EngineFactory, EngineParams, EngineSettings, Role};
use rmcast_proto::sequencer::{self, Sequencer};
use rmcast_proto::{
    Counters, Engine, Event, GroupInfo, Guarantees, NodeId, Qos, SendError, Time, Transmit,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

const UP: u8 = 0;
/// Crashed: silent on the network, no timers, no events, for good (state is lost with it).
const CRASHED: u8 = 1;
/// Cut off: runs, but every datagram in and out is lost.
const CUT_OFF: u8 = 2;

/// Builds sequencer engines whose nodes the test can crash or cut off.
pub struct CrashFactory {
    cfg: sequencer::Config,
    switches: Mutex<HashMap<NodeId, Arc<AtomicU8>>>,
}

impl CrashFactory {
    /// Sequencer engines built from `cfg` (group and datagram size are taken from the runtime).
    pub fn new(cfg: sequencer::Config) -> Arc<Self> {
        Arc::new(CrashFactory {
            cfg,
            switches: Mutex::new(HashMap::new()),
        })
    }

    fn switch(&self, node: NodeId) -> Arc<AtomicU8> {
        self.switches
            .lock()
            .unwrap()
            .entry(node)
            .or_default()
            .clone()
    }

    /// Crash `node`: from its next step on it does nothing at all.
    pub fn crash(&self, node: NodeId) {
        self.switch(node).store(CRASHED, Ordering::SeqCst);
    }

    /// Cut `node` off the network (`true`) or reconnect it (`false`).
    pub fn cut_off(&self, node: NodeId, cut: bool) {
        self.switch(node)
            .store(if cut { CUT_OFF } else { UP }, Ordering::SeqCst);
    }
}

impl EngineFactory for CrashFactory {
    fn name(&self) -> &str {
        "sequencer"
    }

    /// The engine's `cfg` is what counts (the common settings are ignored).
    fn guarantees(&self, _settings: &EngineSettings) -> Guarantees {
        sequencer::guarantees(self.cfg.resilience, self.cfg.min_members == 0)
    }

    fn build(&self, p: &EngineParams<'_>) -> Box<dyn Engine> {
        let mut cfg = self.cfg.clone();
        cfg.group = p.group;
        cfg.max_datagram_bytes = p.max_datagram_bytes;
        let inner = match p.role {
            Role::Create => Sequencer::create(cfg, p.me, p.now),
            Role::Join | Role::Client => Sequencer::join(cfg, p.me, p.now),
        };
        Box::new(Crashable {
            inner,
            switch: self.switch(p.me),
        })
    }
}

struct Crashable {
    inner: Sequencer,
    switch: Arc<AtomicU8>,
}

impl Crashable {
    fn state(&self) -> u8 {
        self.switch.load(Ordering::SeqCst)
    }
}

impl Engine for Crashable {
    fn handle_datagram(&mut self, now: Time, from: NodeId, datagram: &[u8]) {
        if self.state() == UP {
            self.inner.handle_datagram(now, from, datagram);
        }
    }

    fn handle_timeout(&mut self, now: Time) {
        if self.state() != CRASHED {
            self.inner.handle_timeout(now);
        }
    }

    fn submit(&mut self, now: Time, payload: Bytes, qos: Qos) -> Result<u64, SendError> {
        match self.state() {
            CRASHED => Err(SendError::WouldBlock),
            _ => self.inner.submit(now, payload, qos),
        }
    }

    fn leave(&mut self, now: Time) {
        if self.state() != CRASHED {
            self.inner.leave(now);
        }
    }

    fn poll_transmit(&mut self, now: Time, buf: &mut Vec<u8>) -> Option<Transmit> {
        match self.state() {
            UP => self.inner.poll_transmit(now, buf),
            CUT_OFF => {
                // Lost on the way: take everything the engine wants sent, send nothing.
                for _ in 0..10_000 {
                    if self.inner.poll_transmit(now, buf).is_none() {
                        break;
                    }
                }
                None
            }
            _ => None,
        }
    }

    fn poll_event(&mut self) -> Option<Event> {
        match self.state() {
            CRASHED => None,
            _ => self.inner.poll_event(),
        }
    }

    fn poll_timeout(&self) -> Option<Time> {
        match self.state() {
            CRASHED => None,
            _ => self.inner.poll_timeout(),
        }
    }

    fn node_id(&self) -> NodeId {
        self.inner.node_id()
    }

    fn info(&self) -> GroupInfo {
        self.inner.info()
    }

    fn guarantees(&self) -> Guarantees {
        self.inner.guarantees()
    }

    fn counters(&self) -> &Counters {
        self.inner.counters()
    }

    fn can_submit(&self) -> bool {
        self.state() != CRASHED && self.inner.can_submit()
    }

    fn reset(&mut self, now: Time, min_members: usize) -> Result<(), SendError> {
        self.inner.reset(now, min_members)
    }

    fn rejoin(&mut self, now: Time, merging_into: Option<NodeId>) -> Result<(), SendError> {
        self.inner.rejoin(now, merging_into)
    }

    fn start_alone(&mut self, now: Time) -> Result<(), SendError> {
        self.inner.start_alone(now)
    }
}
