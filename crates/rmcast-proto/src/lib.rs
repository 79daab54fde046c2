//! rmcast-proto: every rmcast protocol as a sans-IO state machine.
//!
//! Nothing here touches a socket, a clock, a thread or a global RNG: a driver feeds datagrams and
//! the time in and drains datagrams, events and timer deadlines out (see [`engine::Engine`]). The
//! same engines run bit for bit reproducibly in `rmcast-sim` and on real sockets in `rmcast`.

#![warn(missing_docs)]

pub mod catalog;
pub mod common;
pub mod engine;
pub mod formation;
pub mod gossip;
pub mod guarantees;
pub mod registry;
pub mod ring;
pub mod secure;
pub mod sequencer;
#[cfg(any(test, feature = "testing"))]
pub mod testnet;
#[cfg(feature = "testing")]
pub mod toy;
pub mod tree;
pub mod txn;
pub mod wire;

pub use catalog::EngineChoice;
pub use engine::{
    first_paragraph, CounterField, Counters, Delivery, Destination, Digest, Engine, Event,
    GroupInfo, IdList, LockChange, Loss, NodeId, Qos, Recovery, Reply, SendError, Time, Transmit,
    View,
};
pub use formation::{Entry, Formation, FormationConfig, Notice, Rejoin};
pub use guarantees::{Capabilities, DeliveryPromise, Guarantees, Order, QosLevels, Senders};
pub use registry::{
    ConfigError, EngineFactory, EngineParams, EngineSettings, NotRegistered, RecoveryPolicy, Role,
};
