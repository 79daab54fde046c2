//! Group formation: how a node finds its group and how groups of one name become one, as a
//! sans-IO state machine beside the engines.
//!
//! [`Formation`] owns a node's engine and is itself an [`Engine`]: a driver (the runtime's I/O
//! thread, the simulator) feeds it datagrams and the time and drains datagrams, events and
//! timer deadlines, exactly as it drives a bare engine. Formation takes its own datagrams, the
//! HELLOs ([`hello`], engine byte [`crate::wire::EngineKind::Formation`]), out of the stream
//! before the engine sees any, watches the engine's views and expulsions as they pass, and
//! steers the engine with the engine's own calls ([`Engine::rejoin`], [`Engine::start_alone`],
//! [`Engine::limit_datagram_bytes`]; a join-or-create node's engine is rebuilt as the group's
//! creator). What only the driver can act on comes out as a [`Notice`]. Nothing here touches a
//! socket or a clock; every list is bounded.
//!
//! **Concurrent start.** A node that opens with [`Entry::JoinOrCreate`] multicasts a HELLO
//! *looking* every [`INTERVAL`] while it waits to be admitted, and remembers the lookers it
//! hears (at most [`MAX_LOOKERS`]). When its join wait ends with nobody admitting it, it
//! creates the group only if no looker with a lower id was heard in the last
//! [`LOOKER_FRESH`]; otherwise it keeps joining for another [`LOOKER_FRESH`] (and looks again),
//! so that of nodes started together exactly the lowest id creates and the others join it. A
//! looker that crashed is silent for [`LOOKER_FRESH`] and no longer counts.
//!
//! **Self-healing** ([`FormationConfig::heal`]). The member that coordinates a group multicasts
//! a HELLO *group* with its member count every interval. A member whose group hears the HELLO
//! of a larger group of the same name (more members; as many and a lower coordinator id),
//! whose coordinator is not in its view, twice and an interval apart (by then a view that was
//! only behind has caught up), merges into it: its engine joins that group as a new member
//! ([`Engine::rejoin`] naming that coordinator), as does a member that its group left out
//! ([`crate::Recovery::Expelled`]). The rule is the same on both sides, so exactly one side
//! moves, and groups that find each other end as one. A rejoin that no group admitted within
//! the join timeout creates a group of one instead ([`Engine::start_alone`]), which heals into
//! the others once it hears them: the group aimed at may have merged away.
//!
//! **Address exchange.** A driver that sends point to point learns a peer's address from the
//! source of its datagrams. While the last view names a member this node has heard nothing
//! from (or while it waits to be admitted), it multicasts a HELLO *ask*, at most [`TRIES`]
//! times per view, [`INTERVAL`] apart; every node that hears one answers with a HELLO *answer*
//! to the asker ([`crate::Destination::Peer`]), at most [`MAX_ANSWERS`] per [`INTERVAL`].
//!
//! **The group's datagram size.** Every HELLO carries the largest datagram its sender's path
//! takes ([`FormationConfig::path_bytes`]), and every member hears one from each other member
//! when it joins (its asks, their answers). A member that finds a smaller one among the members
//! of its view has its engine write datagrams of that size from then on: the group uses its
//! smallest member's size, so that IP fragments no datagram on the way to anyone.

pub mod hello;

use crate::catalog::EngineChoice;
use crate::engine::{
    Counters, Destination, Engine, Event, GroupInfo, NodeId, Qos, Recovery, SendError, Time,
    Transmit,
};
use crate::guarantees::Guarantees;
use crate::registry::Role;
use bytes::Bytes;
use hello::Hello;
use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

/// Time between two asks of one view, two HELLOs looking, and the window of the answer bound.
pub const INTERVAL: Duration = Duration::from_millis(100);
/// Asks per view at most.
pub const TRIES: u32 = 10;
/// Answers per [`INTERVAL`] at most (a bound against a flood of forged asks).
pub const MAX_ANSWERS: u32 = 64;
/// How long a looker counts after it was last heard; also how long a node that defers to a
/// lower looker keeps joining before it looks again.
pub const LOOKER_FRESH: Duration = Duration::from_millis(500);
/// Lookers, path sizes and heard peers remembered at most each (a bound against forged
/// senders).
pub const MAX_LOOKERS: usize = 256;
/// Notices kept for the driver at most; a driver drains them after every input, and one input
/// makes at most a few.
pub const MAX_NOTICES: usize = 64;

/// How a node enters its group.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Start a new group with this node as its first member.
    Create,
    /// Join an existing group; with `give_up`, say [`Notice::JoinTimedOut`] if nobody admitted
    /// this node within the join timeout (the engine keeps trying otherwise).
    Join {
        /// Give up after [`FormationConfig::join_timeout`].
        give_up: bool,
    },
    /// Join for the join timeout, then create the group if nobody admitted this node and no
    /// lower looker was heard (see the module's *Concurrent start*).
    JoinOrCreate,
    /// Talk to the group from outside it ([`Role::Client`]).
    Client,
}

/// What a [`Formation`] is built from.
#[derive(Clone, Debug)]
pub struct FormationConfig {
    /// The group id in every header.
    pub group: u32,
    /// This node.
    pub me: NodeId,
    /// The engine to run (and to rebuild as the creator, for [`Entry::JoinOrCreate`]).
    pub engine: EngineChoice,
    /// How the node enters the group.
    pub entry: Entry,
    /// How long a join waits to be admitted; a rejoin too, before it starts alone.
    pub join_timeout: Duration,
    /// Self-healing: `Some(interval)` announces the group every interval while coordinating,
    /// merges into a larger group of the same name, and joins again after an expulsion.
    pub heal: Option<Duration>,
    /// The largest datagram the engine writes.
    pub engine_datagram_bytes: usize,
    /// The largest datagram this node's path takes, with whatever the driver adds to an
    /// engine's datagram (sealing): what its HELLOs say. At least [`hello::MIN_PATH_BYTES`].
    pub path_bytes: u16,
    /// Seed of the engine's RNG (a rebuilt engine gets one derived from it).
    pub seed: u64,
    /// Send HELLO asks (the address exchange). A driver that routes by node id (the
    /// simulator) may do without; with neither asks, nor [`Entry::JoinOrCreate`], nor healing,
    /// formation sends nothing and passes everything through.
    pub address_exchange: bool,
}

/// Why the engine joins its group again.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Rejoin {
    /// The group was reset without this member.
    Expelled {
        /// The incarnation that left it out.
        incarnation: u32,
    },
    /// A larger group of the same name, coordinated by `into`, was heard.
    Merge {
        /// That group's coordinator.
        into: NodeId,
    },
}

/// What formation did or found that the driver acts on (answers an open, fails waiting sends,
/// logs). Drained with [`Formation::poll_notice`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// The first view naming this node arrived: it is a member.
    Admitted,
    /// Nobody admitted this join-or-create node and no lower looker was heard: it created the
    /// group (the engine was rebuilt as its creator).
    Created,
    /// Nobody admitted this join-or-create node, but a lower id looks too: that one creates,
    /// this one keeps joining.
    Deferred {
        /// The lower looker.
        to: NodeId,
    },
    /// Nobody admitted this node within the join timeout ([`Entry::Join`] with `give_up`).
    JoinTimedOut,
    /// The group refused this node's join: it holds as many members as its engine admits.
    JoinRefused {
        /// The most members the group's engine admits.
        limit: u32,
    },
    /// The engine joins its group again.
    Rejoined(Rejoin),
    /// The engine could not join again (it cannot, or it already left): after an expulsion,
    /// the node is out of the group for good.
    RejoinRefused(Rejoin),
    /// A rejoin that nobody admitted in time became a group of one.
    StartedAlone,
    /// A member's path takes smaller datagrams: the engine writes no larger ones from now on.
    DatagramsLimited {
        /// The engine's new datagram size.
        bytes: usize,
    },
}

/// Formation's own counters ([`Formation::formation_counters`]; also in
/// [`Engine::engine_counters`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FormationCounters {
    /// HELLOs written.
    pub hellos_sent: u64,
    /// HELLOs of this group received.
    pub hellos_received: u64,
    /// HELLOs that did not decode.
    pub hellos_malformed: u64,
    /// HELLOs of another group (a shared address).
    pub hellos_foreign: u64,
    /// Asks not answered (the answer bound).
    pub answers_refused: u64,
    /// Notices the driver did not drain in time (oldest first).
    pub notices_dropped: u64,
}

/// Where the node stands in its first entry into the group.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Stage {
    /// Waiting to be admitted; `deadline`: when the join gives up or turns into a create.
    Joining { deadline: Option<Time> },
    /// A member (or a client).
    Member,
    /// A join that gave up ([`Notice::JoinTimedOut`]).
    GaveUp,
}

/// Group formation around one engine (see the module documentation). Drive it as any
/// [`Engine`]; drain [`Formation::poll_notice`] after every input.
///
/// Where it differs from a bare engine: with healing on, a [`Recovery::Expelled`] is passed on
/// and then the engine joins again ([`Notice::Rejoined`]), so events go on after it.
pub struct Formation {
    cfg: FormationConfig,
    engine: Box<dyn Engine>,
    /// The time of the last input: events, which carry no time, are handled at it.
    now: Time,
    stage: Stage,
    /// The engine was asked to leave: no beacon, no merge, no rejoin any more.
    leaving: bool,
    /// Members of the last view, and who coordinates it.
    view: Vec<NodeId>,
    coordinator: Option<NodeId>,
    /// A view was installed since the asks last looked.
    view_changed: bool,
    /// Nodes heard from (any datagram), members of the view first (the address exchange). A
    /// set: it is looked up on every datagram, and a scan of 256 entries was 4 - 7% of a
    /// member's CPU in groups of a thousand.
    heard: BTreeSet<NodeId>,
    /// The view's members in id order, made when `heard` is full and one of its entries must
    /// go (a group larger than [`MAX_LOOKERS`]); empty when the view is in id order already
    /// (then it is searched as it is); dropped when the view changes.
    view_sorted: Option<Vec<NodeId>>,
    /// `heard` is full of members of the view: nobody can be forgotten until the view changes
    /// (else every datagram from a member not in `heard` would look through all of it again).
    heard_all_members: bool,
    /// When the next ask may go, while one is wanted, and asks sent for the current view.
    next_ask: Option<Time>,
    asks: u32,
    /// Askers to answer, and the current answer window's start and count.
    answers: Vec<NodeId>,
    answer_window: (Time, u32),
    /// Other nodes looking for the group while this one waits, with when each was last heard.
    lookers: Vec<(NodeId, Time)>,
    next_looking: Option<Time>,
    /// When this member, coordinating, next announces the group.
    next_beacon: Option<Time>,
    /// When this member last joined again (merges are spaced out).
    last_rejoin: Option<Time>,
    /// A coordinator outside the view whose larger group was heard, and when first.
    foreign: Option<(NodeId, Time)>,
    /// A rejoin not admitted by then starts alone.
    rejoin_by: Option<Time>,
    /// The path sizes other nodes' HELLOs gave.
    paths: Vec<(NodeId, u16)>,
    /// The engine's datagram size now.
    datagram_bytes: usize,
    /// Engines rebuilt so far (each gets its own seed).
    rebuilds: u64,
    notices: VecDeque<Notice>,
    counters: FormationCounters,
}

impl Formation {
    /// Build the engine for `cfg.entry` and the formation around it.
    pub fn new(cfg: FormationConfig, now: Time) -> Formation {
        let role = match cfg.entry {
            Entry::Create => Role::Create,
            Entry::Join { .. } | Entry::JoinOrCreate => Role::Join,
            Entry::Client => Role::Client,
        };
        let engine = cfg.engine.build(
            role,
            cfg.group,
            cfg.me,
            cfg.engine_datagram_bytes,
            now,
            cfg.seed,
        );
        let (stage, looking) = match cfg.entry {
            Entry::Create | Entry::Client => (Stage::Member, false),
            Entry::Join { give_up } => (
                Stage::Joining {
                    deadline: give_up.then_some(now + cfg.join_timeout),
                },
                false,
            ),
            Entry::JoinOrCreate => (
                Stage::Joining {
                    deadline: Some(now + cfg.join_timeout),
                },
                true,
            ),
        };
        let joining = matches!(stage, Stage::Joining { .. });
        Formation {
            datagram_bytes: cfg.engine_datagram_bytes,
            engine,
            now,
            stage,
            leaving: false,
            view: Vec::new(),
            coordinator: None,
            view_changed: false,
            heard: BTreeSet::new(),
            view_sorted: None,
            heard_all_members: false,
            // A joiner's first ask goes out at once: the answers reveal a member that already
            // has its id (the driver's duplicate check).
            next_ask: (joining && cfg.address_exchange).then_some(now),
            asks: 0,
            answers: Vec::new(),
            answer_window: (now, 0),
            lookers: Vec::new(),
            next_looking: looking.then_some(now),
            next_beacon: None,
            last_rejoin: None,
            foreign: None,
            rejoin_by: None,
            paths: Vec::new(),
            rebuilds: 0,
            notices: VecDeque::new(),
            counters: FormationCounters::default(),
            cfg,
        }
    }

    /// The next notice for the driver.
    pub fn poll_notice(&mut self) -> Option<Notice> {
        self.notices.pop_front()
    }

    /// The application asked to leave (the engine's leave may start later, once its own
    /// messages completed): from now on no beacon, merge, rejoin or start alone.
    pub fn prepare_leave(&mut self) {
        self.leaving = true;
        self.next_beacon = None;
    }

    /// Whether the node still waits to be admitted the first time.
    pub fn joining(&self) -> bool {
        matches!(self.stage, Stage::Joining { .. })
    }

    /// The engine inside.
    pub fn engine(&self) -> &dyn Engine {
        self.engine.as_ref()
    }

    /// Formation's counters.
    pub fn formation_counters(&self) -> &FormationCounters {
        &self.counters
    }

    /// A HELLO answer for a node that asked with this node's own id (the driver found two nodes
    /// sharing an id, and answers to the address it came from, which formation does not know):
    /// `None` when the answer bound is reached.
    pub fn answer_duplicate(&mut self, now: Time) -> Option<Vec<u8>> {
        if !self.answer_allowed(now) {
            return None;
        }
        let mut buf = Vec::new();
        self.encode(Hello::Answer, &mut buf);
        Some(buf)
    }

    fn notice(&mut self, n: Notice) {
        if self.notices.len() >= MAX_NOTICES {
            self.notices.pop_front();
            self.counters.notices_dropped += 1;
        }
        self.notices.push_back(n);
        debug_assert!(self.notices.len() <= MAX_NOTICES);
    }

    fn encode(&mut self, h: Hello, buf: &mut Vec<u8>) {
        buf.clear();
        hello::encode(self.cfg.group, self.cfg.me, h, self.cfg.path_bytes, buf);
        self.counters.hellos_sent += 1;
    }

    /// Whether one more answer fits the bound of this window (and counts it).
    fn answer_allowed(&mut self, now: Time) -> bool {
        let (start, n) = &mut self.answer_window;
        if now >= *start + INTERVAL {
            *start = now;
            *n = 0;
        }
        if *n >= MAX_ANSWERS {
            self.counters.answers_refused += 1;
            return false;
        }
        *n += 1;
        debug_assert!(*n <= MAX_ANSWERS);
        true
    }

    fn on_hello(&mut self, now: Time, datagram: &[u8]) {
        let r = match hello::decode(datagram) {
            Ok(r) => r,
            Err(_) => {
                self.counters.hellos_malformed += 1;
                return;
            }
        };
        if r.group != self.cfg.group {
            self.counters.hellos_foreign += 1;
            return;
        }
        if r.sender == self.cfg.me {
            return; // the driver's to judge (an echo, or a node with our id)
        }
        self.counters.hellos_received += 1;
        self.note_heard(r.sender);
        self.note_path(r.sender, r.path_bytes);
        match r.hello {
            Hello::Ask => {
                if !self.answers.contains(&r.sender) && self.answer_allowed(now) {
                    self.answers.push(r.sender);
                }
            }
            Hello::Looking => self.note_looker(r.sender, now),
            Hello::Group { members } => self.on_group_hello(r.sender, members, now),
            Hello::Answer => {}
        }
    }

    /// `id` was heard: its address is known to a driver that learns from datagram sources.
    fn note_heard(&mut self, id: NodeId) {
        if id == self.cfg.me || self.heard.contains(&id) {
            return;
        }
        if self.heard.len() >= MAX_LOOKERS {
            if self.heard_all_members {
                return;
            }
            // Keep the members; forget somebody else. The look-ups are by binary search: in
            // the view itself when it is in id order (most engines' are), else in a sorted
            // copy. Copying and sorting a view of 10,000 at every view change while a large
            // group formed was 14 - 16% of a gossip member's CPU.
            let (view, sorted) = (&self.view, &mut self.view_sorted);
            let copy = sorted.get_or_insert_with(|| {
                if view.is_sorted() {
                    Vec::new()
                } else {
                    let mut v = view.clone();
                    v.sort_unstable();
                    v
                }
            });
            // Empty: the view is sorted (or empty) and serves as it is.
            let view: &[NodeId] = if copy.is_empty() { view } else { copy };
            match (self.heard.iter())
                .find(|p| view.binary_search(p).is_err())
                .copied()
            {
                Some(k) => {
                    self.heard.remove(&k);
                }
                None => {
                    self.heard_all_members = true;
                    return;
                }
            }
        }
        self.heard.insert(id);
        debug_assert!(self.heard.len() <= MAX_LOOKERS);
    }

    /// A HELLO of `id` said its path takes datagrams of `bytes`.
    fn note_path(&mut self, id: NodeId, bytes: u16) {
        match self.paths.iter_mut().find(|p| p.0 == id) {
            Some(p) => p.1 = bytes,
            None => {
                if self.paths.len() >= MAX_LOOKERS {
                    let view = &self.view;
                    match self.paths.iter().position(|p| !view.contains(&p.0)) {
                        Some(k) => {
                            self.paths.swap_remove(k);
                        }
                        None => return,
                    }
                }
                self.paths.push((id, bytes));
            }
        }
        debug_assert!(self.paths.len() <= MAX_LOOKERS);
        self.fit_datagrams();
    }

    /// Write datagrams no larger than the smallest path among the members of the view.
    fn fit_datagrams(&mut self) {
        let smallest = (self.paths.iter())
            .filter(|p| self.view.contains(&p.0))
            .map(|p| usize::from(p.1))
            .min();
        let Some(path) = smallest else { return };
        let overhead =
            usize::from(self.cfg.path_bytes).saturating_sub(self.cfg.engine_datagram_bytes);
        let want = path.saturating_sub(overhead);
        if want >= self.datagram_bytes || !self.engine.guarantees().capabilities.datagram_limit {
            return;
        }
        if self.engine.limit_datagram_bytes(want) {
            // Datagrams only ever shrink.
            debug_assert!(want < self.datagram_bytes);
            self.datagram_bytes = want;
            self.notice(Notice::DatagramsLimited { bytes: want });
        }
    }

    fn note_looker(&mut self, id: NodeId, now: Time) {
        if !self.joining() {
            return;
        }
        if let Some(l) = self.lookers.iter_mut().find(|l| l.0 == id) {
            l.1 = now;
            return;
        }
        if self.lookers.len() >= MAX_LOOKERS {
            if let Some(i) = (0..self.lookers.len()).min_by_key(|i| self.lookers[*i].1) {
                self.lookers.swap_remove(i);
            }
        }
        self.lookers.push((id, now));
        debug_assert!(self.lookers.len() <= MAX_LOOKERS);
    }

    /// The lowest id among the lookers heard in the last [`LOOKER_FRESH`].
    fn lowest_looker(&self, now: Time) -> Option<NodeId> {
        (self.lookers.iter())
            .filter(|l| now.saturating_since(l.1) < LOOKER_FRESH)
            .map(|l| l.0)
            .min()
    }

    /// A HELLO group of `from`, whose group has `members` members: merge into it if it is
    /// another group of this name and the larger one.
    fn on_group_hello(&mut self, from: NodeId, members: u16, now: Time) {
        let Some(every) = self.cfg.heal else { return };
        if self.view.contains(&from) {
            // The candidate is in our view after all (the view was behind); another member's
            // beacon says nothing about it.
            if self.foreign.is_some_and(|f| f.0 == from) {
                self.foreign = None;
            }
            return;
        }
        if self.leaving || self.stage != Stage::Member {
            return;
        }
        let Some(coordinator) = self.coordinator else {
            return; // joining again already
        };
        let (theirs, ours) = (usize::from(members), self.view.len());
        if theirs < ours || (theirs == ours && from >= coordinator) {
            return; // the other group merges into this one
        }
        // One merge at a time: a group that is still forming does not pull members to and fro.
        if self.last_rejoin.is_some_and(|t| now < t + 3 * every) {
            return;
        }
        // Heard twice, an interval apart, and still not in the view: another group indeed.
        match self.foreign {
            Some((id, first)) if id == from && now >= first + every / 2 => {}
            Some((id, _)) if id == from => return,
            // Another candidate is being checked (it is heard again within an interval): two
            // groups heard in turn must not keep replacing each other.
            Some((_, first)) if now < first + 2 * every => return,
            _ => {
                self.foreign = Some((from, now));
                return;
            }
        }
        self.rejoin(now, Rejoin::Merge { into: from });
    }

    /// Join the group again as a new member.
    fn rejoin(&mut self, now: Time, why: Rejoin) {
        let into = match why {
            Rejoin::Expelled { .. } => None,
            Rejoin::Merge { into } => Some(into),
        };
        if !self.engine.guarantees().capabilities.rejoin || self.engine.rejoin(now, into).is_err() {
            self.notice(Notice::RejoinRefused(why));
            return;
        }
        self.notice(Notice::Rejoined(why));
        self.foreign = None;
        self.last_rejoin = Some(now);
        self.rejoin_by = Some(now + self.cfg.join_timeout);
        if let Rejoin::Expelled { .. } = why {
            self.left_view();
        }
    }

    /// Out of the view this member was in.
    fn left_view(&mut self) {
        self.view.clear();
        self.view_sorted = None;
        self.heard_all_members = false;
        self.coordinator = None;
        self.next_beacon = None;
    }

    /// An event on its way out of the engine.
    fn observe(&mut self, ev: &Event) {
        match ev {
            Event::View(v) => {
                if self.joining() && v.members.contains(&self.cfg.me) {
                    self.stage = Stage::Member;
                    self.next_looking = None;
                    self.lookers.clear();
                    self.notice(Notice::Admitted);
                }
                self.view.clone_from(&v.members);
                self.view_sorted = None;
                self.heard_all_members = false;
                self.coordinator = Some(v.coordinator);
                self.view_changed = true;
                // The view's members bound the datagram size (a smaller member may have joined).
                self.fit_datagrams();
            }
            Event::Recovery(Recovery::Merging { .. }) => self.left_view(),
            // A full group: no creating a group of its own instead, and no retrying.
            Event::Recovery(Recovery::Refused { limit }) if self.joining() => {
                self.stage = Stage::GaveUp;
                self.next_looking = None;
                self.notice(Notice::JoinRefused { limit: *limit });
            }
            Event::Recovery(Recovery::Expelled { incarnation })
                if self.cfg.heal.is_some() && !self.leaving =>
            {
                let incarnation = *incarnation;
                self.rejoin(self.now, Rejoin::Expelled { incarnation });
            }
            _ => {}
        }
    }

    /// Deadlines of the entry and of a rejoin.
    fn deadlines(&mut self, now: Time) {
        if self.rejoin_by.is_some_and(|t| now >= t) {
            self.rejoin_by = None;
            if !self.leaving
                && !self.engine.info().members.contains(&self.cfg.me)
                && self.engine.guarantees().capabilities.rejoin
                && self.engine.start_alone(now).is_ok()
            {
                self.notice(Notice::StartedAlone);
            }
        }
        let Stage::Joining {
            deadline: Some(deadline),
        } = self.stage
        else {
            return;
        };
        if now < deadline {
            return;
        }
        if self.engine.info().members.contains(&self.cfg.me) {
            // Admitted, the view not shown yet (a ring shows it once the token went on past
            // the joiner, which may hold it now): rebuilding the engine would lose the token.
            self.stage = Stage::Joining {
                deadline: Some(now + LOOKER_FRESH),
            };
            return;
        }
        match self.cfg.entry {
            Entry::JoinOrCreate => match self.lowest_looker(now).filter(|l| *l < self.cfg.me) {
                Some(to) => {
                    self.stage = Stage::Joining {
                        deadline: Some(now + LOOKER_FRESH),
                    };
                    self.notice(Notice::Deferred { to });
                }
                None => {
                    self.rebuilds += 1;
                    let seed = self.cfg.seed ^ self.rebuilds.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    self.engine = self.cfg.engine.build(
                        Role::Create,
                        self.cfg.group,
                        self.cfg.me,
                        self.datagram_bytes,
                        now,
                        seed,
                    );
                    self.stage = Stage::Member;
                    self.next_looking = None;
                    self.lookers.clear();
                    self.notice(Notice::Created);
                }
            },
            _ => {
                self.stage = Stage::GaveUp;
                self.next_ask = None;
                self.notice(Notice::JoinTimedOut);
            }
        }
    }

    fn coordinating(&self) -> bool {
        self.cfg.heal.is_some()
            && !self.leaving
            && self.stage == Stage::Member
            && self.coordinator == Some(self.cfg.me)
    }

    /// The next HELLO due at `now`, written into `buf`.
    fn poll_hello(&mut self, now: Time, buf: &mut Vec<u8>) -> Option<Transmit> {
        if let Some(to) = self.answers.pop() {
            self.encode(Hello::Answer, buf);
            return Some(Transmit::single(Destination::Peer(to)));
        }
        if std::mem::take(&mut self.view_changed) && self.cfg.address_exchange {
            self.asks = 0;
            self.next_ask = Some(now);
        }
        if self.next_ask.is_some_and(|t| now >= t) {
            let me = self.cfg.me;
            let unknown = (self.view.iter())
                .filter(|m| **m != me && !self.heard.contains(m))
                .count();
            if (unknown == 0 && !self.joining()) || self.asks >= TRIES {
                self.next_ask = None;
            } else {
                self.asks += 1;
                self.next_ask = Some(now + INTERVAL);
                self.encode(Hello::Ask, buf);
                return Some(Transmit::single(Destination::Group));
            }
        }
        if let Some(at) = self.next_looking {
            if !self.joining() {
                self.next_looking = None;
            } else if now >= at {
                self.next_looking = Some(now + INTERVAL);
                self.encode(Hello::Looking, buf);
                return Some(Transmit::single(Destination::Group));
            }
        }
        match self.cfg.heal {
            Some(every) if self.coordinating() => {
                if self.next_beacon.is_none_or(|t| now >= t) {
                    self.next_beacon = Some(now + every);
                    let members = u16::try_from(self.view.len()).unwrap_or(u16::MAX);
                    self.encode(Hello::Group { members }, buf);
                    return Some(Transmit::single(Destination::Group));
                }
            }
            _ => self.next_beacon = None,
        }
        None
    }

    /// When formation itself wants to run next.
    fn own_timeout(&self) -> Option<Time> {
        if !self.answers.is_empty()
            || self.view_changed
            || (self.coordinating() && self.next_beacon.is_none())
        {
            return Some(self.now);
        }
        let deadline = match self.stage {
            Stage::Joining { deadline } => deadline,
            _ => None,
        };
        [
            deadline,
            self.rejoin_by,
            self.next_ask,
            self.next_looking,
            self.next_beacon,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

impl Engine for Formation {
    fn handle_datagram(&mut self, now: Time, from: NodeId, datagram: &[u8]) {
        self.handle_datagram_with_ttl(now, from, datagram, None)
    }

    fn handle_datagram_with_ttl(
        &mut self,
        now: Time,
        from: NodeId,
        datagram: &[u8],
        ttl: Option<u8>,
    ) {
        self.now = now;
        if hello::is_hello(datagram) {
            self.on_hello(now, datagram);
            return;
        }
        self.note_heard(from);
        self.engine
            .handle_datagram_with_ttl(now, from, datagram, ttl);
    }

    fn handle_timeout(&mut self, now: Time) {
        self.now = now;
        self.deadlines(now);
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
    }

    fn submit(&mut self, now: Time, payload: Bytes, qos: Qos) -> Result<u64, SendError> {
        self.now = now;
        self.engine.submit(now, payload, qos)
    }

    fn reply(
        &mut self,
        now: Time,
        to: NodeId,
        request: u64,
        payload: Bytes,
    ) -> Result<(), SendError> {
        self.now = now;
        self.engine.reply(now, to, request, payload)
    }

    fn request(
        &mut self,
        now: Time,
        payload: Bytes,
        qos: Qos,
        handler: Option<u8>,
    ) -> Result<u64, SendError> {
        self.now = now;
        self.engine.request(now, payload, qos, handler)
    }

    fn forward(
        &mut self,
        now: Time,
        to: NodeId,
        sender: NodeId,
        request: u64,
        payload: Bytes,
    ) -> Result<(), SendError> {
        self.now = now;
        self.engine.forward(now, to, sender, request, payload)
    }

    fn lock(&mut self, now: Time, lock: u16, acquire: bool) -> Result<(), SendError> {
        self.now = now;
        self.engine.lock(now, lock, acquire)
    }

    fn take_failure(&mut self, msg: u64) -> Option<String> {
        self.engine.take_failure(msg)
    }

    fn leave(&mut self, now: Time) {
        self.now = now;
        self.leaving = true;
        self.next_beacon = None;
        self.engine.leave(now);
    }

    fn poll_transmit(&mut self, now: Time, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.now = now;
        // HELLOs first: they are few (bounded above), and must not wait behind a flood.
        if let Some(t) = self.poll_hello(now, buf) {
            return Some(t);
        }
        self.engine.poll_transmit(now, buf)
    }

    fn poll_event(&mut self) -> Option<Event> {
        // Returned as the engine gave it (no unwrap and rewrap of a large value on the path of
        // every delivery): only views and recovery concern formation.
        let ev = self.engine.poll_event();
        if let Some(e @ (Event::View(_) | Event::Recovery(_))) = &ev {
            self.observe(e);
        }
        ev
    }

    fn poll_timeout(&self) -> Option<Time> {
        match (self.engine.poll_timeout(), self.own_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn node_id(&self) -> NodeId {
        self.cfg.me
    }

    fn guarantees(&self) -> Guarantees {
        self.engine.guarantees()
    }

    fn info(&self) -> GroupInfo {
        self.engine.info()
    }

    fn counters(&self) -> &Counters {
        self.engine.counters()
    }

    fn engine_counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.counters;
        let mut v = self.engine.engine_counters();
        v.extend([
            ("hellos_sent", c.hellos_sent),
            ("hellos_received", c.hellos_received),
            ("hellos_malformed", c.hellos_malformed),
        ]);
        v
    }

    fn can_submit(&self) -> bool {
        self.engine.can_submit()
    }

    fn reset(&mut self, now: Time, min_members: usize) -> Result<(), SendError> {
        self.now = now;
        self.engine.reset(now, min_members)
    }

    fn rejoin(&mut self, now: Time, merging_into: Option<NodeId>) -> Result<(), SendError> {
        self.now = now;
        self.engine.rejoin(now, merging_into)
    }

    fn start_alone(&mut self, now: Time) -> Result<(), SendError> {
        self.now = now;
        self.engine.start_alone(now)
    }

    fn limit_datagram_bytes(&mut self, max: usize) -> bool {
        let limited = self.engine.limit_datagram_bytes(max);
        if limited {
            self.datagram_bytes = max;
        }
        limited
    }

    fn describe(&self) -> String {
        format!(
            "{} | formation: {:?}{} view {:?} coordinator {:?} rejoin_by {:?} last_rejoin {:?}",
            self.engine.describe(),
            self.stage,
            if self.leaving { " leaving" } else { "" },
            self.view,
            self.coordinator,
            self.rejoin_by,
            self.last_rejoin,
        )
    }
}

#[cfg(test)]
mod tests;
