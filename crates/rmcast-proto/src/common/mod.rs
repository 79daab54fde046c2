//! What engines share: the history buffer, group naming, payload digests, RTT estimation,
//! window flow control, failure detection, fragmentation and bounded reassembly, datagrams cut into parts and put together again, a pool of received packets' buffers, gap (NACK)
//! tracking, the view codec, the shell every engine runs in (header filter, bounded queues), the engines' seeded RNG and the earliest of named deadlines.

pub mod failure;
pub mod fragment;
pub mod gaps;
pub mod group;
pub mod history;
pub mod parts;
pub mod pool;
pub mod replay;
pub mod rng;
pub mod rtt;
pub mod shell;
pub mod timers;
pub mod view;
pub mod window;

pub use failure::{DetectorParams, FailureDetector, Fence, Run};
pub use fragment::{Fragment, Fragmenter, Fragments, Reassembly, Refused, TooLarge};
pub use gaps::GapTracker;
pub use group::{group_id, multicast_endpoint, payload_hash};
pub use history::{HistoryBuffer, OutOfWindow};
pub use parts::{PartsIn, PartsOut};
pub use pool::PacketPool;
pub use replay::{Replay, ReplayWindow};
pub use rng::SplitMix64;
pub use rtt::RttEstimator;
pub use timers::{Deadlines, TimerKey, Timers};
pub use view::{decode_view, encode_view, view_bytes};
pub use window::{packet_size, CongestionWindow, LossCache};
