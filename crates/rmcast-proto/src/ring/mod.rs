//! `ring`: the Reliable Multicast Protocol, after "RMP: Fault-Tolerant Group Communication" by
//! Brian Whetten, Todd Montgomery and Simon Kaplan (sections 3.1-3.3, 4.1-4.4).
//!
//! **Guarantees.** Every member that stays delivers every message sent while it is a member,
//! once; membership changes are delivered in the total order (virtual synchrony for the
//! levels from totally ordered up). A crashed or cut-off member is found by the common failure
//! detector and the ring reforms without it (section 4.4, below): whatever any survivor holds
//! is brought to all of them first, and only a majority of the old view (or the configured
//! minimum) may go on. Each message is delivered at the time its QoS level asks for
//! (Fig. 3.2):
//!
//! | level | delivered |
//! |---|---|
//! | unreliable | on receipt, never repaired (numbered apart from the ordered stream) |
//! | reliable | on receipt once its origin's earlier packets were (so that a reformation recovers whatever was delivered ahead of the order); losses are found and asked for |
//! | source ordered | once every earlier packet of its origin was delivered |
//! | totally ordered | once every slot with a smaller timestamp was delivered |
//! | K-resilient | as totally ordered, and once K members other than its origin hold it |
//! | majority resilient | as K-resilient with a majority of MaxN (the largest view it may be in) |
//! | totally resilient | as K-resilient with every member (stable) |
//!
//! A member is known to hold a slot once it sent an ACK after it (a token site accepts the
//! token only holding every slot before). Ordering between two messages of different levels is
//! that of the lower level (section 3.2), which this delivery rule gives.
//!
//! **Large messages.** A message larger than a datagram (up to [`Config::max_message_bytes`],
//! 1 MiB by default; larger ones are refused with [`crate::SendError::TooLarge`], as are ones
//! whose fragments could never be in the send window together) goes as fragments
//! ([`packet::DATA_FRAG`]), each a packet of its own in its origin's stream at the message's
//! QoS, ordered by the token site as RMP orders any packet and repaired the same way. The
//! token site orders a message's fragments in one ACK, so that no membership change falls
//! inside it. Every member puts them together with the common [`crate::common::Reassembly`]
//! (one partial message per sender, bounded by the maximum) and delivers the message once,
//! whole, in the place of its last fragment: total order and agreement hold for whole
//! messages, at every level as above. `submit` returns the last fragment's number, under which
//! the message is delivered and its send completes. An unreliable message whose fragment is
//! lost (or arrives out of its order) is lost whole, never delivered in part, and holds
//! nothing up. A fragment whose beginning was not delivered (a forged or stray one) is dropped
//! and counted (`fragments_dropped`). A partial message of a member that leaves or is removed
//! is dropped by every member at the view that removes it, and its buffer freed. Members may
//! use datagrams of different sizes: a fragment announcing more fragments than any member may
//! send ([`Config::max_fragments`]) is refused as malformed. A message that fits a datagram goes as
//! before, in [`packet::DATA`] runs. Requests of non-members (multi-RPC) stay within one
//! datagram.
//!
//! **How** (section 4.2). Members form a logical ring. Each member stamps its data packets with
//! `(member id, sequence number, QoS)` and multicasts them ([`order::DataList`]). One member at
//! a time is the *token site*: it multicasts an ACK that gives consecutive timestamps to one or
//! more data packets it holds, and names the next member of the ring as the new token site. A
//! member puts every ACK in its [`order::OrderingQ`] (slots missing, requested, received,
//! delivered) and delivers slots in timestamp order. Missing ACKs and data are asked for by
//! NACK, first from the last known token site and then from the whole ring. The named member
//! accepts the token only once it holds every slot up to that ACK; its own next ACK (or a
//! Confirm, when it has nothing to do) tells the previous site, which repeats its ACK until
//! then. Hence once the token has visited every member after an ACK, every member holds what
//! it ordered: it is stable, and buffers are freed (they stay bounded by that). A token site
//! with nothing to order passes a NULL ACK; after the token has gone round once with nothing
//! to order, the ring is quiescent and the site keeps the token until data arrives.
//!
//! **Membership** (sections 3.1 and 4.3). A joiner multicasts a List Change Request; the token
//! site orders a New List with the joiners waiting right after itself and passes the first the
//! token (the same ACK reaches the joiners, which start there; the New List names each member's
//! next sequence number). Joiners asking together go into one New List (at most
//! [`packet::MAX_JOINED`]): a join waits [`Config::join_gather`] per member of the ring after
//! the last New List, so that a ring of a thousand forming does not send a thousand New Lists of
//! a thousand members each. The view delivered names one joiner ([`crate::View::joined`]): a
//! joiner itself, elsewhere the first of them (the others are in its members). Two rings of
//! one name may admit the same joiners at once (an untargeted join is heard by both) and then
//! count views and ACKs alike; every ACK carries a digest of its ring's member list
//! ([`packet::ring_digest`]) and its ring's lineage ([`packet::lineage`]: the creator and a
//! number drawn at the ring's creation, kept through every New List and reformation), and a
//! member takes only its own ring's. A view id of another lineage (in an ACK or an EXPELLED)
//! is another ring's: it says where its sender is, never that this member's ring went on
//! without it. A member that started over takes no admission into a view of a ring it already
//! held (it admitted an earlier incarnation). A leaver sends
//! its request once its own messages are ordered, never
//! orders its own leave, and stops once it delivered the view that removes it.
//!
//! **Fault recovery** (section 4.4, `reform.rs`): the initiator polls the old view with a
//! Recovery Start, members answer with their sync point and fetch what they lack, the new list
//! is formed from the members at the shared sync point, checked against the minimum partition
//! size and committed in two phases. Slots whose data no member at the sync point holds and
//! whose origin did not answer (a token site that ordered its own packet and crashed before any
//! other member had it) are named in the New List and skipped by all of them: none delivered
//! them. Each member's failure detector watches the [`Config::watched`] members after it in
//! the ring (all of them in a ring of up to 17), so that each is watched by as many before it. Across failures the resilient levels keep their promise:
//! a K-resilient message survives K failures, a majority-resilient one any failures after
//! which a majority goes on, a totally resilient one any failures a member survives. A member
//! left out may come back only as a new member. A quiescent ring stays nearly silent: it looks
//! for crashed members with one probing round every two seconds. A member that stood still (a
//! SIGSTOP, a VM pause: [`crate::common::FailureDetector::run`]) orders nothing as token site
//! until a majority of its ring answers a fresh probe ([`crate::common::Fence`]), so that it
//! never orders in a ring that reformed without it. Two of a peer's failure-detector probes
//! handled at one instant count as a stall too (they waited in the socket together: a process
//! stopped after reading its clock sees no gap in it), and a fence up at a stall is raised
//! afresh (answers to its probe may have waited through the stall).
//!
//! **Roles, not claims.** What orders is taken only from the member entitled to send it: the
//! next ACK from the token's chain (the site the last ACK applied named, or its sender taking
//! the token back; after a reformation's commit, its initiator, whose ACKs end the old view and
//! start the new one), passing the token to the member after its sender (or keeping it); an
//! admission only from the site right before the run of joiners in its New List (in the list's
//! order, the joiner among them), naming the first next; a
//! Recovery New List only from the initiator of the reformation this member joined. A member
//! already removed by a New List takes the ACKs after it from any member of the view that
//! removed it (what it delivers ends at its removal, which the chain ordered). A member told it
//! was expelled takes it from one that could have put it out through the order anyway (the
//! token's chain, the site whose admission of it is unconfirmed, the initiator of a
//! reformation it joined); from any other member of its ring only when its own state backs the
//! claim (its own reformation came up short, or it is a leaver that got nowhere for
//! `Config::depart_linger`), or once as many members of its ring as a reformation needs told
//! it. One member alone stops nobody whose ring goes on. A member that missed something
//! recovers through the normal paths: it asks for the ACKs again (NACK), reforms, and is told
//! it is out. Refusals are counted (`roles_refused`).

pub mod config;
mod engine;
mod flow;
#[cfg(test)]
mod fragment_tests;
mod membership;
mod multirpc;
pub mod order;
pub mod packet;
mod recovery;
mod reform;
#[cfg(test)]
mod reform_tests;
#[cfg(test)]
mod roles_tests;
mod rpc;
#[cfg(test)]
mod stall_tests;
#[cfg(test)]
mod sweep_tests;
#[cfg(test)]
mod tests;
mod token;

pub use config::Config;
pub use engine::Ring;

use crate::engine::Engine;
use crate::guarantees::Guarantees;
use crate::registry::{ConfigError, EngineFactory, EngineParams, EngineSettings};

/// The ring's registry entry: builds [`Ring`] engines from a base [`Config`] (the defaults,
/// or one given whole), with the driver's group id and datagram size and the common
/// [`EngineSettings`] applied on top.
#[derive(Clone, Debug)]
pub struct RingFactory {
    base: Option<Config>,
}

impl RingFactory {
    /// The registered factory: engine defaults.
    pub const DEFAULT: RingFactory = RingFactory { base: None };

    /// A factory whose engines start from `cfg`.
    pub fn with_config(cfg: Config) -> RingFactory {
        RingFactory { base: Some(cfg) }
    }

    /// The configuration its engines get.
    pub fn config(&self) -> Config {
        self.base.unwrap_or_default()
    }

    /// What the ring promises (settings do not change it).
    pub fn declared() -> Guarantees {
        Ring::declared()
    }
}

impl EngineFactory for RingFactory {
    fn name(&self) -> &str {
        "ring"
    }
    fn about(&self) -> &str {
        "RMP (Whetten, Montgomery, Kaplan): rotating token site, total order, reformation"
    }
    fn guarantees(&self, _: &EngineSettings) -> Guarantees {
        Self::declared()
    }
    fn validate(&self, settings: &EngineSettings, _: usize) -> Result<(), ConfigError> {
        settings.recovery.validate()?;
        self.config().validate()
    }
    fn build(&self, p: &EngineParams<'_>) -> Box<dyn Engine> {
        Box::new(Ring::with_config(p, self.config()))
    }
}
