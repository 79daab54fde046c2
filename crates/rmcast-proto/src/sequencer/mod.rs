//! The Amoeba sequencer engine (Kaashoek and Tanenbaum, "Efficient Reliable Group Communication
//! for Distributed Systems", with the broadcast protocol of "An Efficient Reliable Broadcast
//! Protocol"; sections 3, 4 and 5; see docs/PAPERS.md).
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
//! sequence. Gaps are repaired by BC_RETRANS, which names the ranges a member lacks (only those
//! are sent again, a bounded grant per request and member); quiet members send BC_STATE after a number of
//! deliveries; the sequencer sends BC_SYNC when its history fills or its tail is unconfirmed.
//! While the history is full, senders wait: nothing is ever dropped. Beyond the paper, a lost
//! request is repaired without waiting for the sender's timeout: a sequencer that holds later
//! requests of a sender but not the next one asks the sender for the gap (BC_REQGAP), and a
//! sender whose timer fires sends again only its first unordered request and its last one (so
//! the sequencer sees any gap between them), to the sequencer alone, rather than its whole
//! window to the group; under load the loss is the sequencer's receive buffer, where a
//! go-back-N multicast would add to the overload that caused it. A repeated request the
//! sequencer holds, waiting for history room, is answered with BC_QUEUED (as Amoeba answers a
//! duplicate request), so that the sender's timer stays backed off while it waits. A repair
//! that more than one member lacks is multicast once (as the paper's sequencer and most NACK
//! protocols do) rather than sent to each, and held back from every member for the longest
//! measured repair round.
//!
//! **Crashes** (sections 3, 4 and 5.3, in `recovery`): members and the sequencer
//! are watched by BC_ALIVEREQ probes; a failure puts the group in recovery mode, and ResetGroup
//! (by hand, or automatically) rebuilds it by the invitation protocol with a new incarnation and
//! a new sequencer. With resilience degree `r`, every message whose send completed is delivered,
//! in one order, by every member that survives any `r` failures, the sequencer included. Under
//! the majority policy (the default: only a majority may reset the group) a send completes only
//! once a majority of its view holds it ([`packet::SeqState::complete_next`]), so every group
//! formed after any failures or partitions holds it, and no send completes on a minority side.
//! A sequencer that stood still (a SIGSTOP, a VM pause: [`crate::common::FailureDetector::run`])
//! orders nothing more until a majority of its view answers a fresh probe
//! ([`crate::common::Fence`]): meanwhile the others may have reset the group without it, and
//! the requests waiting in its socket must not be delivered here in a view they left.
//!
//! **Roles, not claims.** Ordered data, accepts and syncs are taken only from the member
//! entitled to order here (the sequencer, its named successor, in recovery the member repaired
//! from), and BC_RESULT only from a member of the group it founds, in the way its role allows
//! (`Sequencer::orders_here`, `Sequencer::result_entitled`); others are refused and counted.
//!
//! **Layout.** One [`Sequencer`] per member, made of parts that each keep their own state and
//! check their own invariants. The parts import nothing of the member that holds them; the
//! protocol steps that work on the whole member (`impl Sequencer` in `engine`, `delivery`,
//! `transmit` and `recovery`) sit above them, and no module imports one that imports it back.
//!
//! Parts (below the member):
//!
//! - `config`: [`Config`]; `shared`: the phase of a member, its own counters and its timer
//!   table (one slot per timer, [`Timers`](crate::common::Timers)).
//! - `sender` (section 5.2, SendToGroup): own messages, fragmented by
//!   [`Fragmenter`](crate::common::Fragmenter), the send window and requests in flight.
//! - `history` (section 5.2, Fig. 11): the history buffer, its delivery, holding, acceptance and
//!   stability points, BB data before its accept, reassembly bounded by the maximum message
//!   size ([`Reassembly`](crate::common::Reassembly)) and the gap to repair
//!   ([`GapTracker`](crate::common::GapTracker)).
//! - `ordering` (sections 5.1 and 5.2, Fig. 10): the sequencer's state and duties — assigning
//!   sequence numbers, joins and leaves, acceptance with resilience `r`, stability, handover.
//!   A member holds it only while it orders, and lends it the rest of its state for each step
//!   (`ordering::Member`), so no step needs to ask whether this member is the sequencer.
//! - `succession`: what a member keeps so that it can take over as sequencer.
//! - `retrans`: retransmissions owed, the ranges each destination asked for last, within a
//!   grant of datagrams per request and per interval.
//! - `recovery::state`: the failure detector, recovery mode and the answers owed.
//! - `packet`: the wire format (Fig. 12).
//!
//! The member (above the parts):
//!
//! - `engine`: the struct, its construction, datagram dispatch, timers and the `pump` that
//!   follows every input; `api`: the [`Engine`](crate::Engine) contract, delegating to it.
//! - `delivery` (section 5.2, Fig. 18): ordered entries into the history, delivery in order,
//!   views installed from membership entries (the [view codec](crate::common::view)).
//! - `transmit`: what goes out, in order of urgency.
//! - `recovery` (sections 3, 4 and 5.3): failure detection and recovery mode; `recovery::reset`
//!   the invitation protocol; `recovery::control` its datagrams.
//!
//! [`HistoryBuffer`]: crate::common::HistoryBuffer

mod api;
mod config;
mod delivery;
mod engine;
mod factory;
mod history;
mod ordering;
pub mod packet;
mod recovery;
mod retrans;
mod sender;
mod shared;
mod succession;
mod transmit;

pub use config::{Config, Method, MAX_VIEW_MEMBERS};
pub use engine::Sequencer;
pub use factory::SequencerFactory;

use crate::guarantees::{Capabilities, DeliveryPromise, Guarantees, Order, QosLevels, Senders};

/// What a sequencer group with resilience degree `resilience` promises: total order, virtual
/// synchrony, all-or-nothing delivery that survives `resilience` crashes, crash recovery; under
/// the majority policy (`majority`: resets need a majority of the view, the default) a send
/// completes only once a majority holds it, so it survives whatever failures the group survives.
/// Every QoS level is served by total order (a weaker level gets more than it asked);
/// [`crate::Qos::KResilient`] up to the group's resilience.
pub fn guarantees(resilience: u8, majority: bool) -> Guarantees {
    Guarantees {
        order: Order::Total,
        virtual_synchrony: true,
        resilience,
        majority_safe: majority,
        delivery: DeliveryPromise::AllOrNothing,
        qos: QosLevels::all(Some(resilience)),
        senders: Senders::Any,
        crash_recovery: true,
        replies: false,
        capabilities: Capabilities {
            reset: true,
            rejoin: true,
            datagram_limit: true,
            ..Capabilities::NONE
        },
    }
}

#[cfg(test)]
mod tests;
