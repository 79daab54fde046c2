//! What engines share: the history buffer, group naming, payload digests, RTT estimation and
//! window flow control.

pub mod group;
pub mod history;
pub mod rtt;
pub mod window;

pub use group::{group_id, multicast_endpoint, payload_hash};
pub use history::{HistoryBuffer, OutOfWindow};
pub use rtt::RttEstimator;
pub use window::CongestionWindow;
