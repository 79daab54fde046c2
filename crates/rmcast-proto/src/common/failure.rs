//! Failure detection by probing (Amoeba paper section 5.3: BC_ALIVEREQ / BC_ALIVE).
//!
//! A peer not heard from for `interval` is sent a probe; a peer that answers none of `retries`
//! probes, each given `max(min_timeout, 2 × RTO)` to be answered, is declared failed. Anything
//! heard from a peer counts as an answer, so a busy group sends no probes at all.
//!
//! **Under loss** the number of unanswered probes needed grows with the loss the detector
//! observes, in the spirit of the phi-accrual detectors (Hayashibara, Défago, Yared and
//! Katayama, "The φ Accrual Failure Detector"): every probing round that ends because the peer
//! was heard is a sample of how many probes a live peer needs (the probes of rounds that end
//! in a suspicion are not counted, so a crash does not raise its own bar). From the observed
//! fraction `p` of probes that went unanswered, a live peer misses `k` probes in a row with
//! probability `p^k`; the detector asks for the smallest `k` with `p^k` below
//! [`FALSE_SUSPICION_ODDS`], and never fewer than the configured `retries` nor more than
//! [`MAX_ADAPTIVE_RETRIES`]. Before it has observed anything, the detector assumes 10% of the
//! probes lost (`PRIOR_LOSS`, an observation that decays like the others), so that a young
//! detector under heavy loss does not suspect on the configured `retries` alone.
//!
//! **The price is detection time**: with probe timeout `t`, a crash is noticed after
//! `interval + k × t`. With the defaults (300 ms, 4 probes of 100 ms): in a busy group, whose
//! detector has seen few probing rounds, `k` is 9 (1.2 s instead of 0.7 s); in an idle
//! loss-free group it falls back to 4 (0.7 s) within about a hundred rounds; at 10% loss each
//! way (19% of probe round trips lost) `k` is about 13 (1.6 s); at 20% each way (36% lost)
//! about 21 (2.4 s).
//!
//! The trade-off (the Amoeba paper: "if the number is too low, a kernel may decide that another member
//! has failed while in reality the other group member was just busy") is explicit: a peer is declared failed at the
//! earliest `interval + retries × probe timeout` after it was last heard, so a member paused for
//! less than that is never suspected, and a crash is noticed within about that time. The probe
//! timeout follows round trips measured on first probes (Karn's rule), so a slow network widens
//! it instead of producing false suspicions.

use super::rtt::RttEstimator;
use crate::engine::{NodeId, Time};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Duration;

/// A live peer is declared failed at most this often per probing round, as far as the observed
/// probe loss predicts: the adaptive number of probes is the smallest `k` with `p^k` below it.
pub const FALSE_SUSPICION_ODDS: f64 = 1e-9;

/// The adaptive number of probes never grows beyond this (a bound on detection time at heavy
/// loss: `interval + 64 × probe timeout`).
pub const MAX_ADAPTIVE_RETRIES: u32 = 64;

/// Weight of the past in the probe loss estimate, per completed probing round (about the last
/// hundred rounds count).
const LOSS_DECAY: f64 = 0.99;

/// Before any round was observed the detector assumes [`PRIOR_LOSS`] of the probes lost, with
/// the weight of [`PRIOR_PROBES`] probes, which decays like any observation: a young detector
/// under heavy loss must not trust the configured `retries` before it has seen a round.
const PRIOR_LOSS: f64 = 0.1;
/// See [`PRIOR_LOSS`].
const PRIOR_PROBES: f64 = 10.0;

/// The parameters of a [`FailureDetector`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DetectorParams {
    /// Silence after which a peer is probed.
    pub interval: Duration,
    /// Probes without an answer before the peer is declared failed (at least 1).
    pub retries: u32,
    /// Shortest wait for the answer to one probe.
    pub min_timeout: Duration,
}

impl DetectorParams {
    /// The longest a live peer that answers within `min_timeout` can stay silent, and about the
    /// time it takes to notice a crash: `interval + retries × min_timeout`.
    pub fn failure_timeout(&self) -> Duration {
        self.interval + self.min_timeout * self.retries
    }
}

#[derive(Clone, Debug)]
struct Watched {
    id: NodeId,
    last_heard: Time,
    /// Probes sent since the peer was last heard.
    probes: u32,
    /// When the outstanding probe counts as unanswered.
    deadline: Option<Time>,
    /// When the first probe of this round went out (an RTT sample if it is answered).
    first_probe_at: Option<Time>,
    /// In `due` (a probe waits to be sent).
    queued: bool,
}

/// How the member that holds a [`FailureDetector`] ran ([`FailureDetector::run`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Run {
    /// Within [`FailureDetector::stall_bound`] of its previous run, or watching nobody.
    OnTime,
    /// Later than the bound, without a heartbeat to say that it should have run sooner: it
    /// may have been idle (a quiescent ring keeps no timer) or stood still.
    LongIdle,
    /// Later than the bound although its heartbeat was due: it stood still (a SIGSTOP, a VM
    /// or GC pause, a starved CPU).
    Stalled,
}

/// Watches a set of peers and says which to probe and which failed.
#[derive(Clone, Debug)]
pub struct FailureDetector {
    params: DetectorParams,
    peers: Vec<Watched>,
    /// Where each peer is in `peers`: a member of a group of thousands watches thousands, and
    /// looking each up by a scan made every view change and every datagram cost as much.
    index: HashMap<NodeId, usize>,
    /// Probes due to be sent (each peer at most once).
    due: VecDeque<NodeId>,
    rtt: RttEstimator,
    /// Probes sent in completed rounds (decayed), and the rounds (decayed): the observed probe
    /// loss is `1 - rounds / probes`.
    probes_sent: f64,
    rounds: f64,
    /// When the member that holds the detector last ran (see [`FailureDetector::run`]).
    last_run: Option<Time>,
    /// [`FailureDetector::stall_bound`] as of the last timeout: `run` and `heartbeat` are
    /// called on every input, and the failure timeout takes a logarithm.
    bound: Duration,
    /// When each peer is due (its probe's deadline, or its silence's end), in order, with its
    /// place in `peers`: `next_timeout` is asked after every input and `on_timeout` looks at
    /// the peers due only; a scan of a thousand peers there made each input cost a thousand.
    due_at: BTreeSet<(Time, usize)>,
    /// Peers with a probe out (`probes > 0`): `probing` is asked on every input too.
    probed: usize,
}

impl FailureDetector {
    /// A detector that watches nobody yet.
    pub fn new(params: DetectorParams) -> Self {
        assert!(params.retries >= 1, "at least one probe before a failure");
        let mut d = FailureDetector {
            params,
            peers: Vec::new(),
            index: HashMap::new(),
            due: VecDeque::new(),
            rtt: RttEstimator::new(
                params.min_timeout / 2,
                Duration::from_micros(100),
                params.interval.max(params.min_timeout) * 4,
            ),
            probes_sent: PRIOR_PROBES,
            rounds: PRIOR_PROBES * (1.0 - PRIOR_LOSS),
            last_run: None,
            bound: Duration::ZERO,
            due_at: BTreeSet::new(),
            probed: 0,
        };
        d.bound = d.failure_timeout() / 2;
        d
    }

    /// The fraction of probes that went unanswered, as observed in completed rounds.
    pub fn probe_loss(&self) -> f64 {
        if self.probes_sent <= 0.0 {
            0.0
        } else {
            (1.0 - self.rounds / self.probes_sent).clamp(0.0, 1.0)
        }
    }

    /// Unanswered probes needed now before a peer is declared failed: the configured
    /// `retries`, more when the observed probe loss would make that many misses of a live peer
    /// likelier than [`FALSE_SUSPICION_ODDS`] (see the module docs).
    pub fn retries(&self) -> u32 {
        let p = self.probe_loss();
        let base = self.params.retries;
        if p <= 0.0 {
            return base;
        }
        if p >= 1.0 {
            return base.max(MAX_ADAPTIVE_RETRIES);
        }
        let k = (FALSE_SUSPICION_ODDS.ln() / p.ln()).ceil();
        base.max((k as u32).min(MAX_ADAPTIVE_RETRIES))
    }

    /// The parameters.
    pub fn params(&self) -> DetectorParams {
        self.params
    }

    /// The wait for one probe's answer now: twice the probe RTO, at least `min_timeout`.
    pub fn probe_timeout(&self) -> Duration {
        (self.rtt.base_rto() * 2).max(self.params.min_timeout)
    }

    /// The time after which a silent peer is declared failed, with the current probe timeout
    /// and number of probes.
    pub fn failure_timeout(&self) -> Duration {
        self.params.interval + self.probe_timeout() * self.retries()
    }

    /// The longest gap between two runs of the member that is not a stall: half the failure
    /// timeout (as of the last [`FailureDetector::on_timeout`]), so that a member that ran
    /// within it was never silent long enough for a peer to declare it failed.
    pub fn stall_bound(&self) -> Duration {
        self.bound
    }

    /// The member that holds the detector runs at `now` (a datagram, a timer, a call from the
    /// application); `beating`: it kept the [`FailureDetector::heartbeat`] among its timers
    /// since it last ran. Says whether it ran on time ([`Run`]).
    ///
    /// After a [`Run::Stalled`] the silence the member would hold against its peers was its
    /// own, so every peer counts as heard now. The caller must also not order for its group
    /// until it has confirmed its view ([`Fence`]): meanwhile its peers may have found *it*
    /// failed and gone on without it, and its socket may hold datagrams of a group that no
    /// longer exists.
    pub fn run(&mut self, now: Time, beating: bool) -> Run {
        let long = !self.peers.is_empty()
            && self
                .last_run
                .is_some_and(|t| now.saturating_since(t) > self.stall_bound());
        self.last_run = Some(self.last_run.map_or(now, |t| t.max(now)));
        if !long {
            return Run::OnTime;
        }
        if !beating {
            return Run::LongIdle;
        }
        for w in &mut self.peers {
            w.last_heard = w.last_heard.max(now);
            w.probes = 0;
            w.deadline = None;
            w.first_probe_at = None;
            w.queued = false;
        }
        self.due.clear();
        self.rebuild();
        Run::Stalled
    }

    /// Watch exactly `ids` from now on. Peers already watched keep their state; new ones count
    /// as heard `now`.
    pub fn watch(&mut self, ids: impl IntoIterator<Item = NodeId>, now: Time) {
        let mut old: HashMap<NodeId, Watched> = self.peers.drain(..).map(|w| (w.id, w)).collect();
        self.index.clear();
        for id in ids {
            if self.index.contains_key(&id) {
                continue;
            }
            let w = old.remove(&id).unwrap_or(Watched {
                id,
                last_heard: now,
                probes: 0,
                deadline: None,
                first_probe_at: None,
                queued: false,
            });
            self.index.insert(id, self.peers.len());
            self.peers.push(w);
        }
        let index = &self.index;
        self.due.retain(|id| index.contains_key(id));
        self.rebuild();
        debug_assert!(self
            .peers
            .iter()
            .enumerate()
            .all(|(i, w)| self.index[&w.id] == i));
    }

    /// Stop watching anyone.
    pub fn clear(&mut self) {
        self.peers.clear();
        self.index.clear();
        self.due.clear();
        self.rebuild();
    }

    /// When peer `w` is due: its probe's deadline, or the end of its silence.
    fn due_of(&self, w: &Watched) -> Time {
        w.deadline.unwrap_or(w.last_heard + self.params.interval)
    }

    /// `due_at` and `probed` from the peers, after a change to all of them.
    fn rebuild(&mut self) {
        self.due_at = (self.peers.iter().enumerate())
            .map(|(i, w)| (self.due_of(w), i))
            .collect();
        self.probed = self.peers.iter().filter(|w| w.probes > 0).count();
    }

    /// Peer `i` changes by `f`: its place in `due_at` follows.
    fn update(&mut self, i: usize, f: impl FnOnce(&mut Watched)) {
        let before = (self.due_of(&self.peers[i]), self.peers[i].probes > 0);
        f(&mut self.peers[i]);
        let after = (self.due_of(&self.peers[i]), self.peers[i].probes > 0);
        if before.0 != after.0 {
            self.due_at.remove(&(before.0, i));
            self.due_at.insert((after.0, i));
        }
        match (before.1, after.1) {
            (false, true) => self.probed += 1,
            (true, false) => self.probed -= 1,
            _ => {}
        }
    }

    /// Whether `id` is watched.
    pub fn watches(&self, id: NodeId) -> bool {
        self.index.contains_key(&id)
    }

    /// Something arrived from `id`: it is alive.
    pub fn heard(&mut self, id: NodeId, now: Time) {
        let Some(&i) = self.index.get(&id) else {
            return;
        };
        let w = &self.peers[i];
        if w.probes == 1 {
            if let Some(at) = w.first_probe_at {
                self.rtt.on_sample(now.saturating_since(at));
            }
        }
        if w.probes > 0 {
            // A round ended by an answer: `probes` probes for one live peer.
            self.probes_sent = self.probes_sent * LOSS_DECAY + f64::from(w.probes);
            self.rounds = self.rounds * LOSS_DECAY + 1.0;
        }
        self.update(i, |w| {
            w.last_heard = w.last_heard.max(now);
            w.probes = 0;
            w.deadline = None;
            w.first_probe_at = None;
        });
    }

    /// Let due timers fire: queue probes, and return a peer that answered none of its probes
    /// (it stays watched, and is returned again by later calls until it is heard or unwatched).
    pub fn on_timeout(&mut self, now: Time) -> Option<NodeId> {
        let timeout = self.probe_timeout();
        let retries = self.retries();
        self.bound = (self.params.interval + timeout * retries) / 2;
        // Only the peers due, in their order in `peers` (as a scan of all of them went: the
        // probes go out, and the first failed peer is named, in the same order).
        let mut due: Vec<usize> = (self.due_at.range(..=(now, usize::MAX)))
            .map(|&(_, i)| i)
            .collect();
        due.sort_unstable();
        let mut failed = None;
        for i in due {
            let w = &self.peers[i];
            if w.deadline.is_some() && w.probes >= retries {
                failed = failed.or(Some(w.id));
                continue;
            }
            self.update(i, |w| {
                if w.deadline.is_some() {
                    w.probes += 1;
                } else {
                    w.probes = 1;
                    w.first_probe_at = Some(now);
                }
                w.deadline = Some(now + timeout);
            });
            let w = &mut self.peers[i];
            if !w.queued {
                w.queued = true;
                self.due.push_back(w.id);
            }
        }
        failed
    }

    /// Whether a probing round is under way (some peer was probed and has not answered yet).
    pub fn probing(&self) -> bool {
        self.probed > 0
    }

    /// The next peer to send a probe to.
    pub fn poll_probe(&mut self) -> Option<NodeId> {
        let id = self.due.pop_front()?;
        if let Some(&i) = self.index.get(&id) {
            self.peers[i].queued = false;
        }
        Some(id)
    }

    /// When [`FailureDetector::on_timeout`] must next be called.
    /// Includes [`FailureDetector::heartbeat`].
    pub fn next_timeout(&self) -> Option<Time> {
        let probes = self.due_at.first()?.0;
        Some(self.heartbeat().map_or(probes, |h| probes.min(h)))
    }

    /// While peers are watched: when the member must run next at the latest, so that a gap
    /// longer than [`FailureDetector::stall_bound`] is a stall and not idleness.
    pub fn heartbeat(&self) -> Option<Time> {
        if self.peers.is_empty() {
            return None;
        }
        self.last_run.map(|t| t + self.stall_bound() / 2)
    }
}

/// A member that stood still ([`FailureDetector::run`]) and orders for its group (the
/// Sequencer's sequencer, the Ring's token site) orders nothing until a majority of its view
/// answers a fresh probe from normal operation. Meanwhile the others may have found it failed
/// and gone on without it: what waits in its socket belongs to a group that no longer exists,
/// and ordering it would deliver here, in the old view, what the new group orders otherwise.
/// The token tells the answers to this probe from stale ones that waited in the socket too.
///
/// Invariants: the token is not 0 (0 marks the failure detector's own probes); `confirmed`
/// holds members of the view other than the holder, each once.
#[derive(Clone, Debug)]
pub struct Fence {
    token: u32,
    confirmed: Vec<NodeId>,
    probe_at: Time,
}

impl Fence {
    /// A fence for `me` in a view of `members` at `now`, probed with `token` (made non-zero);
    /// `None` when `me` is alone: nobody could have gone on without it.
    pub fn raise(me: NodeId, members: &[NodeId], token: u32, now: Time) -> Option<Fence> {
        if members.iter().all(|&x| x == me) {
            return None;
        }
        Some(Fence {
            token: token.max(1),
            confirmed: Vec::new(),
            probe_at: now,
        })
    }

    /// The probe's token, if one is due at `now`; the next one is due `timeout` later.
    pub fn probe(&mut self, now: Time, timeout: Duration) -> Option<u32> {
        if now < self.probe_at {
            return None;
        }
        self.probe_at = now + timeout;
        Some(self.token)
    }

    /// When the next probe is due.
    pub fn deadline(&self) -> Time {
        self.probe_at
    }

    /// `from` answered with `token`. Returns `true` once a majority of `members` (`me`
    /// included) answered this fence's token: it may be lifted.
    pub fn answer(&mut self, me: NodeId, members: &[NodeId], from: NodeId, token: u32) -> bool {
        if token == self.token
            && from != me
            && members.contains(&from)
            && !self.confirmed.contains(&from)
        {
            self.confirmed.push(from);
        }
        debug_assert!(self.token != 0 && !self.confirmed.contains(&me));
        let confirmed = self
            .confirmed
            .iter()
            .filter(|x| members.contains(x))
            .count();
        (confirmed + 1) * 2 > members.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn params() -> DetectorParams {
        DetectorParams {
            interval: Duration::from_millis(100),
            retries: 3,
            min_timeout: Duration::from_millis(50),
        }
    }

    /// A detector that has seen many loss-free rounds: the configured retries apply.
    fn det() -> FailureDetector {
        let mut d = FailureDetector::new(params());
        d.probes_sent = 0.0;
        d.rounds = 0.0;
        d.bound = d.failure_timeout() / 2;
        d
    }

    #[test]
    fn a_young_detector_assumes_some_loss_until_rounds_show_none() {
        let mut d = FailureDetector::new(params());
        // 0.1^9 < 1e-9 <= 0.1^8
        assert_eq!(d.retries(), 9);
        d.watch([NodeId(1)], Time(0));
        let mut t = 0;
        for _ in 0..300 {
            t += 100 * MS;
            d.on_timeout(Time(t));
            t += 5 * MS;
            d.heard(NodeId(1), Time(t));
        }
        assert_eq!(d.retries(), 3);
    }

    #[test]
    fn a_member_that_stood_still_forgives_its_peers_and_says_so() {
        let mut d = det();
        d.watch([NodeId(1), NodeId(2)], Time(0));
        // failure timeout 100 + 3 × 50 ms: stalls are gaps above 125 ms, and the heartbeat
        // wakes the member every 62.5 ms.
        assert_eq!(d.stall_bound(), Duration::from_millis(125));
        assert_eq!(d.run(Time(0), true), Run::OnTime);
        assert_eq!(d.next_timeout(), Some(Time(62_500_000)));
        assert_eq!(d.run(Time(120 * MS), true), Run::OnTime);
        // Stopped for 2 s: nobody was heard meanwhile, but the silence was ours.
        let woke = 2_120 * MS;
        assert_eq!(d.run(Time(woke), true), Run::Stalled);
        assert_eq!(d.on_timeout(Time(woke)), None);
        assert_eq!(d.poll_probe(), None, "peers count as heard at waking");
        // Without a heartbeat a long gap may be idleness: no forgiveness, and a peer silent
        // all along is found failed as usual.
        let mut d = det();
        d.watch([NodeId(1)], Time(0));
        assert_eq!(d.run(Time(0), false), Run::OnTime);
        assert_eq!(d.run(Time(2_000 * MS), false), Run::LongIdle);
        assert_eq!(d.on_timeout(Time(2_000 * MS)), None);
        assert_eq!(d.poll_probe(), Some(NodeId(1)));
        // Nobody watched: nobody could go on without us.
        let mut d = det();
        assert_eq!(d.run(Time(0), true), Run::OnTime);
        assert_eq!(d.run(Time(9_000 * MS), true), Run::OnTime);
        assert_eq!(d.next_timeout(), None);
    }

    #[test]
    fn a_fence_lifts_once_a_majority_answers_its_own_token() {
        let me = NodeId(1);
        assert!(
            Fence::raise(me, &[me], 7, Time(0)).is_none(),
            "alone: no fence"
        );
        let three = [NodeId(1), NodeId(2), NodeId(3)];
        let mut f = Fence::raise(me, &three, 0, Time(0)).expect("a fence");
        // Token 0 is the detector's: the fence's is made non-zero.
        let token = f
            .probe(Time(0), Duration::from_millis(50))
            .expect("due at once");
        assert_ne!(token, 0);
        assert_eq!(f.probe(Time(49 * MS), Duration::from_millis(50)), None);
        assert_eq!(f.deadline(), Time(50 * MS));
        // A stale answer (another token), a stranger and ourselves do not count.
        assert!(!f.answer(me, &three, NodeId(2), token + 1));
        assert!(!f.answer(me, &three, NodeId(9), token));
        assert!(!f.answer(me, &three, me, token));
        // Two of three (us and member 2) are a majority.
        assert!(f.answer(me, &three, NodeId(2), token));
        let five = [NodeId(1), NodeId(2), NodeId(3), NodeId(4), NodeId(5)];
        let mut f = Fence::raise(me, &five, 9, Time(0)).expect("a fence");
        assert!(!f.answer(me, &five, NodeId(4), 9));
        assert!(!f.answer(me, &five, NodeId(4), 9), "one member counts once");
        assert!(f.answer(me, &five, NodeId(5), 9));
    }

    /// The due times kept in order give what a scan of every peer gave: the earliest peer's
    /// silence or probe deadline, moved on when it is heard, and `probing` while a probe is out.
    #[test]
    fn next_timeout_is_the_earliest_peer_due_as_peers_are_heard_and_probed() {
        let mut d = det();
        let peers: Vec<NodeId> = (1..=100).map(NodeId).collect();
        d.watch(peers.iter().copied(), Time(0));
        for (k, &p) in peers.iter().enumerate() {
            d.heard(p, Time((k as u64 + 1) * MS));
        }
        // Peer 1, heard first (at 1 ms), is due first; the heartbeat is later.
        assert_eq!(d.next_timeout(), Some(Time(101 * MS)));
        d.heard(NodeId(1), Time(150 * MS));
        assert_eq!(d.next_timeout(), Some(Time(102 * MS)));
        assert!(!d.probing());
        // At 103 ms peers 2 and 3 are probed (in their order), nobody else.
        assert_eq!(d.on_timeout(Time(103 * MS)), None);
        assert_eq!(d.poll_probe(), Some(NodeId(2)));
        assert_eq!(d.poll_probe(), Some(NodeId(3)));
        assert_eq!(d.poll_probe(), None);
        assert!(d.probing());
        // Peer 4 is due at 104 ms, before the probes' deadlines at 153 ms.
        assert_eq!(d.next_timeout(), Some(Time(104 * MS)));
        d.heard(NodeId(2), Time(110 * MS));
        d.heard(NodeId(3), Time(110 * MS));
        assert!(!d.probing());
        // Watching fewer keeps the order right.
        d.watch([NodeId(50), NodeId(60)], Time(120 * MS));
        assert_eq!(d.next_timeout(), Some(Time(150 * MS)));
        let scan = (d.peers.iter())
            .map(|w| w.deadline.unwrap_or(w.last_heard + d.params.interval))
            .min();
        assert_eq!(d.next_timeout(), scan);
    }

    #[test]
    fn silent_peer_is_probed_then_declared_failed() {
        let mut d = det();
        d.watch([NodeId(1), NodeId(2)], Time(0));
        assert_eq!(d.next_timeout(), Some(Time(100 * MS)));
        // Peer 2 keeps talking; peer 1 is silent.
        d.heard(NodeId(2), Time(90 * MS));
        assert_eq!(d.on_timeout(Time(100 * MS)), None);
        assert_eq!(d.poll_probe(), Some(NodeId(1)));
        assert_eq!(d.poll_probe(), None);
        let mut t = 100 * MS;
        for _ in 0..2 {
            t += 50 * MS;
            assert_eq!(d.on_timeout(Time(t)), None);
            assert_eq!(d.poll_probe(), Some(NodeId(1)));
        }
        // Three probes unanswered: failed at 100 + 3 × 50 ms.
        assert_eq!(d.on_timeout(Time(t + 49 * MS)), None);
        assert_eq!(d.on_timeout(Time(t + 50 * MS)), Some(NodeId(1)));
        assert_eq!(t + 50 * MS, 250 * MS);
        assert_eq!(d.params().failure_timeout(), Duration::from_millis(250));
    }

    #[test]
    fn an_answer_to_any_probe_clears_the_suspicion() {
        let mut d = det();
        d.watch([NodeId(1)], Time(0));
        d.on_timeout(Time(100 * MS));
        d.on_timeout(Time(150 * MS));
        d.on_timeout(Time(200 * MS));
        d.heard(NodeId(1), Time(210 * MS));
        assert_eq!(d.on_timeout(Time(260 * MS)), None);
        assert_eq!(d.next_timeout(), Some(Time(310 * MS)));
    }

    #[test]
    fn watch_keeps_known_peers_and_drops_others() {
        let mut d = det();
        d.watch([NodeId(1), NodeId(2)], Time(0));
        d.on_timeout(Time(100 * MS));
        d.watch([NodeId(2), NodeId(3)], Time(120 * MS));
        assert!(!d.watches(NodeId(1)));
        // Peer 2 kept its outstanding probe; peer 3 starts fresh.
        assert_eq!(d.poll_probe(), Some(NodeId(2)));
        assert_eq!(d.poll_probe(), None);
        assert_eq!(d.next_timeout(), Some(Time(150 * MS)));
    }

    #[test]
    fn observed_probe_loss_raises_the_probes_needed_and_a_crash_does_not() {
        let mut d = det();
        d.watch([NodeId(1), NodeId(2)], Time(0));
        assert_eq!(d.retries(), 3);
        // Rounds in which peer 1 answers only the second probe: half the probes are lost.
        let mut t = 0;
        for _ in 0..200 {
            t += 100 * MS;
            d.heard(NodeId(2), Time(t));
            d.on_timeout(Time(t));
            t += 50 * MS;
            d.heard(NodeId(2), Time(t));
            d.on_timeout(Time(t));
            t += 10 * MS;
            d.heard(NodeId(1), Time(t));
            d.heard(NodeId(2), Time(t));
        }
        assert!((d.probe_loss() - 0.5).abs() < 0.01, "{}", d.probe_loss());
        // 0.5^30 < 1e-9 <= 0.5^29.
        assert_eq!(d.retries(), 30);
        assert_eq!(
            d.failure_timeout(),
            Duration::from_millis(100) + d.probe_timeout() * 30
        );
        // Peer 1 crashes: its unanswered probes do not count, the bar stays where it was.
        let before = d.retries();
        let mut failed = None;
        while failed.is_none() {
            t += 10 * MS;
            d.heard(NodeId(2), Time(t));
            failed = d.on_timeout(Time(t));
        }
        assert_eq!(failed, Some(NodeId(1)));
        assert_eq!(d.retries(), before);
    }

    #[test]
    fn probe_timeout_follows_measured_round_trips() {
        let mut d = det();
        d.watch([NodeId(1)], Time(0));
        d.on_timeout(Time(100 * MS));
        // Answered 200 ms later: the first probe's RTT is a sample.
        d.heard(NodeId(1), Time(300 * MS));
        assert!(d.probe_timeout() >= Duration::from_millis(400));
        assert!(d.failure_timeout() > d.params().failure_timeout());
    }
}
