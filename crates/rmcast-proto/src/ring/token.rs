//! The token site (section 4.2): whether this member holds the token, the ACK that named it,
//! the pass it repeats until the next site takes it, and the data gaps a token site asks for.

use crate::common::Fence;
use crate::engine::{NodeId, Time};
use std::collections::BTreeMap;
use std::time::Duration;

/// The token as this member sees it.
#[derive(Clone, Default)]
pub(super) struct TokenSite {
    /// This member holds the token.
    pub(super) holding: bool,
    /// NULL ACKs in a row up to the one that passed it here.
    pub(super) idle: u32,
    /// The ACK naming this member, not accepted yet.
    pub(super) named: Option<u64>,
    /// The last ACK whose token this member accepted, and who passed it.
    pub(super) accepted: Option<(u64, NodeId)>,
    /// An ACK this member passed the token with, not yet confirmed: number, next site,
    /// backoff (the pass timer says when to pass it again).
    pub(super) passing: Option<(u64, NodeId, Duration)>,
    /// This site keeps the token of a quiescent ring and said so.
    pub(super) quiet: bool,
    /// At the token site: members whose next packet to order is missing while later ones are
    /// here, the number, and when to ask for it (again).
    pub(super) data_gaps: BTreeMap<NodeId, (u64, Time)>,
    /// Set after this member stood still: it orders nothing until a majority of the ring
    /// confirms it is still in it ([`Fence`]).
    pub(super) fence: Option<Fence>,
    /// This member stood still since it last ordered: fence before it orders again.
    pub(super) stalled: bool,
    /// The last failure-detector probe handled from each peer, and when.
    pub(super) probed: Vec<(NodeId, Time)>,
    /// Joins wait to be gathered into one New List until then (see `Ring::next_change`).
    pub(super) join_wait: Option<Time>,
}

impl TokenSite {
    /// Stops the token here (a reformation): neither ordering nor passing, and the pass that
    /// was repeated is forgotten.
    pub(super) fn halt(&mut self) {
        self.holding = false;
        self.named = None;
        self.passing = None;
        self.quiet = false;
    }

    /// Takes the token named by ACK `n`, passed by `passer`.
    pub(super) fn accept(&mut self, n: u64, passer: NodeId) {
        debug_assert!(!self.holding, "the token is taken while held");
        self.named = None;
        self.holding = true;
        self.quiet = false;
        self.accepted = Some((n, passer));
    }

    /// ACK `num` was applied, sent by `from` (`mine`: by this member), naming this member
    /// next when `named`, after `idle` NULL ACKs: a pass it confirms is done, and a token
    /// site that hears another's ACK no longer holds the token.
    pub(super) fn on_applied(&mut self, num: u64, mine: bool, named: bool, idle: u32) {
        if self.passing.is_some_and(|p| num > p.0) {
            self.passing = None;
        }
        if !mine {
            self.holding = false;
        }
        self.named = named.then_some(num);
        self.idle = idle;
        // The token moves on with every ACK: the site that sent one let it go before.
        debug_assert!(!self.holding, "an ACK applied while the token is held here");
    }

    /// A failure-detector probe from `peer` is handled at `now`: whether one from it was
    /// handled at the same instant already (both waited in the socket). Keeps one entry per
    /// peer, at most `MAX_PROBERS`.
    pub(super) fn probed_again(&mut self, peer: NodeId, now: Time) -> bool {
        const MAX_PROBERS: usize = 64;
        match self.probed.iter_mut().find(|p| p.0 == peer) {
            Some(p) => std::mem::replace(&mut p.1, now) == now,
            None => {
                if self.probed.len() == MAX_PROBERS {
                    self.probed.remove(0);
                }
                self.probed.push((peer, now));
                false
            }
        }
    }

    /// Earliest time a data gap is to be asked for, at the token site. None while the fence
    /// is up: the site asks for gaps as it orders, and left in the past the deadline would
    /// fire for ever.
    pub(super) fn data_gap_deadline(&self) -> Option<Time> {
        (self.holding && self.fence.is_none())
            .then(|| self.data_gaps.values().map(|g| g.1).min())
            .flatten()
    }
}
