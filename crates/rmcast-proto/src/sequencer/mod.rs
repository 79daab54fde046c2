//! The Amoeba sequencer engine (seed 002: Kaashoek and Tanenbaum, sections 3, 4 and 5).
//!
//! **Guarantees.** Every member delivers the same messages in the same total order, assigned by
//! one member, the *sequencer*; a message is delivered once, and only if it was sent; messages of
//! one sender are delivered in the order sent. Joins and leaves are ordered with the data, so all
//! members see the same messages between two views (virtual synchrony). With resilience degree
//! `r`, a send completes only once `r + 1` members hold the message.
//!
//! **How** (section 5.2). Small messages go point to point to the sequencer, which multicasts them
//! with their sequence number (PB method); messages of `large_threshold_bytes` or more are
//! multicast by their sender and the sequencer multicasts a short accept (BB method). For `r > 0`
//! the sequencer first multicasts the sequence number, the `r` lowest-ranked members acknowledge,
//! and then it multicasts the accept (3 + r datagrams). Every member keeps a [`HistoryBuffer`] of
//! fixed capacity in three parts: free slots, sequenced messages kept until every member has them
//! (purged at the minimum of the piggybacked `expect` values), and messages received out of
//! sequence. Gaps are repaired by BC_RETRANS; quiet members send BC_STATE after a number of
//! deliveries; the sequencer sends BC_SYNC when its history fills or its tail is unconfirmed.
//! While the history is full, senders wait: nothing is ever dropped.
//!
//! **Crashes** (sections 3, 4 and 5.3, in `recovery`): members and the sequencer
//! are watched by BC_ALIVEREQ probes; a failure puts the group in recovery mode, and ResetGroup
//! (by hand, or automatically) rebuilds it by the invitation protocol with a new incarnation and
//! a new sequencer. With resilience degree `r`, every message whose send completed is delivered,
//! in one order, by every member that survives any `r` failures, the sequencer included.
//!
//! [`HistoryBuffer`]: crate::common::HistoryBuffer

mod api;
mod config;
mod delivery;
mod engine;
mod history;
mod ordering;
pub mod packet;
mod recovery;
mod sender;
mod succession;
mod transmit;

pub use config::Config;
pub use engine::Sequencer;

#[cfg(test)]
mod tests;
