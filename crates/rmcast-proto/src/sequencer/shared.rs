//! What every part of a member shares: where it stands in the group ([`Phase`]), the bound on
//! its small queues, its own counters ([`Stats`]) and the names of its timers ([`Timer`]).
//!
//! Why apart: the parts (ordering, sender, history, recovery) and the member that holds them
//! all use these; here, below all of them, none of the parts imports the member back.

use crate::common::{TimerKey, Timers};

/// Where a member stands in the group.
///
/// Transitions: `Joining -> Member` (its join delivered), `Joining -> Left` (a leave before
/// it got in), `Member -> Left`; a member never goes back (a rejoin is a fresh state).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Joining,
    Member,
    Left,
}

impl Phase {
    /// Whether a member may go from this phase to `to`.
    pub(super) fn may_become(self, to: Phase) -> bool {
        matches!(
            (self, to),
            (Phase::Joining, Phase::Member)
                | (Phase::Joining | Phase::Member, Phase::Left)
                | (Phase::Left, Phase::Left)
        )
    }
}

/// Bound on queued retransmission requests and nudges at the sequencer.
pub(super) const MAX_RETRANS_QUEUE: usize = 256;

/// The sequencer's own counters ([`crate::Engine::engine_counters`] entries); a fresh start
/// ([`crate::Engine::rejoin`]) keeps them.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Stats {
    /// BC_SYNC datagrams sent.
    pub(super) syncs_sent: u64,
    /// Ordering state (BC_BCAST, accepts, syncs) from a node not entitled to order here (not
    /// the sequencer, its named successor, or in recovery the member repaired from), refused:
    /// roles, not claims.
    pub(super) ordering_refused: u64,
    /// BC_RESULT from a node not entitled to send it (see `Sequencer::result_entitled`),
    /// refused.
    pub(super) results_refused: u64,
    /// Requests further ahead of their sender's stream than a send window, refused.
    pub(super) requests_far_ahead: u64,
    /// Gaps in a sender's requests this sequencer asked the sender to fill at once.
    pub(super) request_gaps_asked: u64,
    /// Joins this sequencer refused because the group was full (each answered with
    /// BC_JOINREFUSED).
    pub(super) joins_refused: u64,
    /// Requests sent again because the sequencer asked for them.
    pub(super) request_gaps_filled: u64,
    /// Times the request timer fired (no progress of own requests for a timeout).
    pub(super) request_timeouts: u64,
    /// Gaps the sequencer asked for that were ordered (or never sent) by the time the ask
    /// arrived, ignored.
    pub(super) request_gaps_stale: u64,
    /// Requests announcing more fragments than a message of the maximum size has, refused.
    pub(super) requests_oversized: u64,
    /// Times this member found it had stood still (see `FailureDetector::run`).
    pub(super) stalls: u64,
    /// Fences a sequencer raised after a stall, and lifted once a majority confirmed its view.
    pub(super) fences_raised: u64,
    pub(super) fences_lifted: u64,
    /// NACKs repeated although nothing arrived since the previous one (each waited twice as
    /// long as the one before, see `GapTracker::on_timeout_backoff`).
    pub(super) nacks_backed_off: u64,
    /// Retransmissions asked for and not sent because the member's grant (datagrams per
    /// request, one grant per interval) was spent: it asks again for what it still lacks.
    pub(super) retrans_cut: u64,
    /// Retransmitted datagrams the sequencer multicast because more than one member lacked
    /// what they carry (each counted once; the others went to one member).
    pub(super) retrans_multicast: u64,
}

impl Stats {
    /// The counters by name, as [`crate::Engine::engine_counters`] lists them.
    pub(super) fn named(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("syncs_sent", self.syncs_sent),
            ("ordering_refused", self.ordering_refused),
            ("results_refused", self.results_refused),
            ("requests_far_ahead", self.requests_far_ahead),
            ("request_gaps_asked", self.request_gaps_asked),
            ("joins_refused", self.joins_refused),
            ("request_gaps_filled", self.request_gaps_filled),
            ("request_timeouts", self.request_timeouts),
            ("request_gaps_stale", self.request_gaps_stale),
            ("requests_oversized", self.requests_oversized),
            ("stalls", self.stalls),
            ("fences_raised", self.fences_raised),
            ("fences_lifted", self.fences_lifted),
            ("nacks_backed_off", self.nacks_backed_off),
            ("retrans_cut", self.retrans_cut),
            ("retrans_multicast", self.retrans_multicast),
        ]
    }
}

/// A member's timers. `Join`, `Leave`, `Complete` and `Handover` are kept in the member's
/// [`SeqTimers`] table; the others are deadlines of its parts (the NACK timer of the gap
/// tracker, the sender's request timer, the detector's probes, the recovery rounds, the
/// retransmission hold) or follow
/// from the ordering state (`Sync`, `Linger`), and are put in the table `poll` builds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Timer {
    /// The next BC_JOINREQ (joining).
    Join,
    /// The next BC_RETRANS for the gap.
    Nack,
    /// The next BC_LEAVE (a member), or the leave of the sequencer itself.
    Leave,
    /// Own requests unanswered: send them again.
    Request,
    /// The sequencer's next BC_SYNC.
    Sync,
    /// Own sends waiting for completion with nothing moving: ask where the sequence stands.
    Complete,
    /// The next failure-detector probe.
    Probe,
    /// The next round of the recovery protocol.
    Recovery,
    /// A departing sequencer gives up waiting for its successor.
    Handover,
    /// The sequencer gives up waiting for a departed member to have its leave.
    Linger,
    /// The probe of a fenced sequencer (after a stall), again.
    Fence,
    /// A repeat of a repair kept back by the retransmission hold falls due.
    Hold,
}

/// A member's timer table.
pub(super) type SeqTimers = Timers<Timer>;

impl TimerKey for Timer {
    const ALL: &'static [Timer] = &[
        Timer::Join,
        Timer::Nack,
        Timer::Leave,
        Timer::Request,
        Timer::Sync,
        Timer::Complete,
        Timer::Probe,
        Timer::Recovery,
        Timer::Handover,
        Timer::Linger,
        Timer::Fence,
        Timer::Hold,
    ];

    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static str {
        match self {
            Timer::Join => "join",
            Timer::Nack => "nack",
            Timer::Leave => "leave",
            Timer::Request => "request",
            Timer::Sync => "sync",
            Timer::Complete => "complete",
            Timer::Probe => "probe",
            Timer::Recovery => "recovery",
            Timer::Handover => "handover",
            Timer::Linger => "linger",
            Timer::Fence => "fence",
            Timer::Hold => "hold",
        }
    }
}
