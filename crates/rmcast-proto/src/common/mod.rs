//! What engines share: the history buffer, group naming, payload digests, RTT estimation,
//! window flow control and failure detection.

pub mod failure;
pub mod gaps;
pub mod group;
pub mod history;
pub mod rtt;
pub mod view_codec;
pub mod window;

pub use failure::{DetectorParams, FailureDetector};
pub use gaps::GapTracker;
pub use group::{group_id, multicast_endpoint, payload_hash};
pub use history::{HistoryBuffer, OutOfWindow};
pub use rtt::RttEstimator;
pub use window::CongestionWindow;
