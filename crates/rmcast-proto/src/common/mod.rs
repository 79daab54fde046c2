//! What engines share: the history buffer, group naming, payload digests, RTT estimation,
//! window flow control and failure detection.

pub mod failure;
pub mod group;
pub mod history;
pub mod rtt;
pub mod window;

pub use failure::{DetectorParams, FailureDetector};
pub use group::{group_id, multicast_endpoint, payload_hash};
pub use history::{HistoryBuffer, OutOfWindow};
pub use rtt::RttEstimator;
pub use window::CongestionWindow;
