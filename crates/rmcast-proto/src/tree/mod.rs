//! `tree`: RMTP, after "Reliable Multicast Transport Protocol (RMTP)" by Paul, Sabnani, Lin and
//! Bhattacharyya (IEEE JSAC 1997).
//!
//! **Guarantees.** One sender (the group's creator) to any number of receivers it does not
//! know: every receiver that stays gets every packet of the stream once, in order (FIFO),
//! including a receiver that joins late, as long as the data is held by its ACK processor (in
//! memory up to `Cache_Size`, then in the [`DataStore`] the application gives, as the paper's
//! disk cache). Without a store, what fell out of the bounded cache and is asked for later is
//! reported with [`crate::Event::Loss`] and the declared delivery is probabilistic; with one it
//! is all-or-nothing. No total order, no views ordered with the data, no crash recovery.
//!
//! **How** (section III): the sender multicasts DATA in a rate-limited window (Fig. 6,
//! `swin_lb`/`send_next`/`avail_win`, at most W_s packets per T_send, and fewer under the
//! congestion window with CONG_thresh and slow start), and DATA_EOF at the end, then stays for
//! T_dally. Receivers send periodic ACKs (left edge L and a W_r-bit vector, Fig. 4) every
//! T_ack, computed from the RTT measured with RTT_MEASURE/RTT_ACK, to their ACK processor
//! (AP): the sender or a designated receiver (DR), chosen as the advertiser of SND_ACK_TOME
//! heard with the largest remaining TTL (section III-B9). A DR is a receiver of its own AP and
//! an AP of its region, which gives the multilevel hierarchy of section III-B10. APs queue
//! requests in a retransmission queue (counter C, AddrTab) and serve it every T_retx,
//! multicasting (a DR: scoped to its area) when more than MCAST_thresh asked, unicasting
//! otherwise. A late joiner sends ACK_TXNOW and is served at once. RESET aborts.
//!
//! Beyond the paper: DATA carries the origin's id so a DR's repair names the original sender;
//! DATA_EOF is an empty packet sent when the application calls `leave` (the engine cannot know
//! the last packet earlier); DATA_GONE tells a receiver that its AP no longer holds what it
//! asks for; an AP stops waiting for a child silent for `child_silence_ms` or stuck for
//! `child_stall_ms` (the slow receiver then catches up from the cache instead of stalling the
//! session); an AP keeps at most `max_children` receivers and answers any beyond them with
//! REFUSED naming the limit (the receiver turns to another AP, or gives up); ACK_FIN tells the AP that a receiver leaves, with its last L, so that
//! the AP does not wait `child_silence_ms` for it; repairs and control packets go out before new data
//! already queued, so that a repair is not overtaken by the receiver's next request for it;
//! a receiver that holds everything it knows of repeats its last ACK at growing intervals
//! (the paper's ACKs stay periodic), then falls silent once its AP would have stopped waiting
//! for it (`child_silence_ms`), so that an idle session goes quiet; once a burst of new data
//! ends (a T_send without any), the sender announces its highest sequence number with
//! SND_ACK_TOME at each of its next eight T_send ticks, not only every T_sap, so that a
//! receiver that lost the burst's last packets learns of them while the sender still waits,
//! even after an idle gap in which the sender forgot the silent receivers. **Role checks**: the
//! session's origin is fixed by its own first announcement (level-0 SND_ACK_TOME, or DATA or
//! DATA_EOF it sent itself); its DATA and DATA_EOF are then taken only from it or from an ACK
//! processor heard in the session, RESET only from it, and only it advertises at level 0;
//! anything else is dropped and counted (`not_from_origin`, or `foreign_dropped`).

#[cfg(test)]
mod ack_repeat;
mod cache;
mod config;
mod engine;
pub mod file;
#[cfg(test)]
mod last_packet;
pub mod packet;
#[cfg(test)]
mod pair;
#[cfg(test)]
mod tests;

pub use cache::{DataCache, DataStore, MemStore};
pub use config::{CongestionResponse, TreeConfig};
pub use engine::{Entity, Tree};

use crate::engine::{Engine, NodeId};
use crate::guarantees::{Capabilities, DeliveryPromise, Guarantees, Order, QosLevels, Senders};
use crate::registry::{ConfigError, EngineFactory, EngineParams, EngineSettings, Role};
use std::sync::Arc;

/// Builds the data store of a member: `(node, role)`; called for the sender and for DRs.
pub type StoreFn = dyn Fn(NodeId, Role) -> Box<dyn DataStore> + Send + Sync;

/// What RMTP promises; `stored`: the sender and DRs keep the whole stream (a store behind
/// the cache).
pub fn guarantees(stored: bool) -> Guarantees {
    Guarantees {
        order: Order::Fifo,
        virtual_synchrony: false,
        resilience: 0,
        majority_safe: false,
        delivery: if stored {
            DeliveryPromise::AllOrNothing
        } else {
            DeliveryPromise::Probabilistic
        },
        qos: QosLevels::below_total(false),
        senders: Senders::Creator,
        crash_recovery: false,
        replies: false,
        capabilities: Capabilities {
            ttl_input: true,
            ..Capabilities::NONE
        },
    }
}

/// The registry entry of RMTP: its connection parameters and, optionally, the data store of
/// the sender and the DRs.
#[derive(Clone)]
pub struct TreeFactory {
    config: TreeConfig,
    store: Option<Arc<StoreFn>>,
    /// Build receivers whatever the role: a receiver then opens its group as a creator does,
    /// without a join handshake (RMTP receivers join silently, as IP multicast hosts do).
    receiver: bool,
}

/// The factory the registry lists: Table III's parameters, no store (a unit struct, so that
/// the registry's list stays a constant).
pub struct DefaultTreeFactory;

static DEFAULT_FACTORY: TreeFactory = TreeFactory {
    config: TreeConfig::table_iii(),
    store: None,
    receiver: false,
};

impl EngineFactory for DefaultTreeFactory {
    fn name(&self) -> &str {
        DEFAULT_FACTORY.name()
    }
    fn about(&self) -> &str {
        DEFAULT_FACTORY.about()
    }
    fn guarantees(&self, s: &EngineSettings) -> Guarantees {
        DEFAULT_FACTORY.guarantees(s)
    }
    fn validate(&self, s: &EngineSettings, mdb: usize) -> Result<(), ConfigError> {
        DEFAULT_FACTORY.validate(s, mdb)
    }
    fn build(&self, p: &EngineParams<'_>) -> Box<dyn Engine> {
        DEFAULT_FACTORY.build(p)
    }
    fn settle_time(&self, s: &EngineSettings) -> Option<std::time::Duration> {
        DEFAULT_FACTORY.settle_time(s)
    }
}

impl TreeFactory {
    /// A factory with connection parameters `config` and no store.
    pub fn new(config: TreeConfig) -> TreeFactory {
        TreeFactory {
            config,
            store: None,
            receiver: false,
        }
    }

    /// The same, building a receiver (or a DR) whatever the role it is asked for: for a
    /// runtime group opened in create mode, which needs no one to admit it.
    pub fn receiver(mut self) -> TreeFactory {
        self.receiver = true;
        self
    }

    /// The same with `store` building the data store of the sender and of each DR.
    pub fn with_store(mut self, store: Arc<StoreFn>) -> TreeFactory {
        self.store = Some(store);
        self
    }

    /// The connection parameters.
    pub fn config(&self) -> &TreeConfig {
        &self.config
    }
}

impl EngineFactory for TreeFactory {
    fn name(&self) -> &str {
        "tree"
    }
    fn about(&self) -> &str {
        "RMTP (Paul et al.): one sender, designated receivers repair their regions, FIFO"
    }
    fn guarantees(&self, _: &EngineSettings) -> Guarantees {
        guarantees(self.store.is_some())
    }
    fn validate(&self, settings: &EngineSettings, mdb: usize) -> Result<(), ConfigError> {
        settings.recovery.validate()?;
        self.config.validate(mdb)
    }
    fn build(&self, p: &EngineParams<'_>) -> Box<dyn Engine> {
        let mut p = *p;
        if self.receiver {
            p.role = Role::Join;
        }
        let p = &p;
        let keeps = p.role == Role::Create || self.config.designated_receivers.contains(&p.me);
        let store = self
            .store
            .as_ref()
            .filter(|_| keeps)
            .map(|f| f(p.me, p.role));
        Box::new(Tree::new(
            p,
            self.config.clone(),
            store,
            self.store.is_some(),
        ))
    }
    /// [`SETTLE_TIME`], whatever the timers: the LAN parameters settle far sooner, and a bound
    /// is all a driver needs.
    fn settle_time(&self, _: &EngineSettings) -> Option<std::time::Duration> {
        Some(SETTLE_TIME)
    }
}

/// How long a tree session may take to deliver everything once faults heal (the simulator
/// gives its runs this long instead of its default 60 s). Table III's timers are slow by
/// design: the window moves only every T_send (600 ms), the congestion window restarts from
/// one packet whenever any receiver asks for a repair in a T_send (CONG_thresh 0: at 10,000
/// receivers and 1% loss, nearly every T_send), and a receiver learns of a lost last packet
/// only from the next SND_ACK_TOME. A closed-loop sender over 20-30% loss then needs seconds
/// a message (tree seed 69 of the every-engine sweep: 34 messages, 22% loss, all delivered at
/// 59.5 s), and 100 messages to 10,000 receivers at 1% loss take 60 s. The engine promises no
/// speed; a run gets the time its timers need.
pub const SETTLE_TIME: std::time::Duration = std::time::Duration::from_secs(240);
