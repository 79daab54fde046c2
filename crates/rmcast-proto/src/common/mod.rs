//! What engines share: the history buffer, group naming, payload digests.

pub mod group;
pub mod history;

pub use group::{group_id, multicast_endpoint, payload_hash};
pub use history::{HistoryBuffer, OutOfWindow};
