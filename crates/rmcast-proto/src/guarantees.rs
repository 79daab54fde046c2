//! What an engine promises, declared once and read by everyone else.
//!
//! Five engines with different promises share one simulator, one set of checkers, one runtime
//! and one CLI. None of those may assume the sequencer's promises: each reads the engine's
//! [`Guarantees`]. The simulator runs a checker only where the declaration promises what it
//! checks, ends a run by the rule the delivery promise implies, and the runtime refuses a
//! per-message [`Qos`] the engine does not serve before it reaches the engine.

/// The order in which members deliver messages.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Order {
    /// No order promised.
    Unordered,
    /// Messages of one sender are delivered in the order sent (FIFO per sender).
    Fifo,
    /// Every member delivers in one total order (which includes FIFO per sender).
    Total,
}

/// How sure delivery is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum DeliveryPromise {
    /// Every member that stays delivers every message (agreement): the run is over only when
    /// every survivor delivered everything.
    AllOrNothing,
    /// Almost all members deliver almost every message (Bimodal Multicast); a message that can
    /// no longer be recovered is reported as [`crate::Event::Loss`], never silently skipped.
    Probabilistic,
    /// Nothing promised beyond integrity: a message may be lost without a report (RMP's
    /// unreliable level).
    BestEffort,
}

/// Who may send.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Senders {
    /// Every member.
    Any,
    /// Only the member that created the group (RMTP: one sender, many receivers).
    Creator,
}

/// The per-message qualities of service an engine serves (RMP section 2.3). An engine may
/// serve a level by giving more than asked (the sequencer orders everything totally).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct QosLevels {
    /// [`Qos::Unreliable`].
    pub unreliable: bool,
    /// [`Qos::Reliable`].
    pub reliable: bool,
    /// [`Qos::SourceOrdered`].
    pub source_ordered: bool,
    /// [`Qos::TotallyOrdered`].
    pub totally_ordered: bool,
    /// [`Qos::KResilient`] up to this `k`, if at all.
    pub k_resilient_max: Option<u8>,
    /// [`Qos::MajorityResilient`].
    pub majority_resilient: bool,
    /// [`Qos::TotallyResilient`].
    pub totally_resilient: bool,
}

impl QosLevels {
    /// Whether `qos` is served.
    pub fn contains(&self, qos: Qos) -> bool {
        match qos {
            Qos::Unreliable => self.unreliable,
            Qos::Reliable => self.reliable,
            Qos::SourceOrdered => self.source_ordered,
            Qos::TotallyOrdered => self.totally_ordered,
            Qos::KResilient(k) => self.k_resilient_max.is_some_and(|max| k <= max),
            Qos::MajorityResilient => self.majority_resilient,
            Qos::TotallyResilient => self.totally_resilient,
        }
    }

    /// The levels served, by the names `--qos` takes (k-resilience as `k-resilient=0..K`).
    pub fn names(&self) -> Vec<String> {
        Qos::levels(0)
            .into_iter()
            .filter_map(|q| match q {
                Qos::KResilient(_) => self.k_resilient_max.map(|k| format!("k-resilient=0..{k}")),
                q => self.contains(q).then(|| q.to_string()),
            })
            .collect()
    }

    /// Every level up to total order, and k-resilience up to `k_max`.
    pub fn all(k_max: Option<u8>) -> QosLevels {
        QosLevels {
            unreliable: true,
            reliable: true,
            source_ordered: true,
            totally_ordered: true,
            k_resilient_max: k_max,
            majority_resilient: false,
            totally_resilient: false,
        }
    }

    /// Levels below total order: `unreliable` if asked, reliable and source ordered.
    pub fn below_total(unreliable: bool) -> QosLevels {
        QosLevels {
            unreliable,
            totally_ordered: false,
            ..QosLevels::all(None)
        }
    }

    /// Every level of RMP's Fig. 3.2, k-resilience for any `k`.
    pub fn rmp() -> QosLevels {
        QosLevels {
            k_resilient_max: Some(u8::MAX),
            majority_resilient: true,
            totally_resilient: true,
            ..QosLevels::all(None)
        }
    }
}

/// What an engine can be asked beyond multicast to its group, declared once: the runtime and
/// the CLI check the declaration before they call ([`crate::Engine`]'s methods for what an
/// engine cannot do answer [`crate::SendError::Unsupported`], or `false`, and are never called
/// where the declaration says no).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Capabilities {
    /// Locks ordered with the messages ([`crate::Engine::lock`]; RMP section 4.3).
    pub locks: bool,
    /// Requests from outside the group ([`crate::Engine::request`], [`crate::Role::Client`]).
    pub requests: bool,
    /// Handing a request on to another member ([`crate::Engine::forward`]).
    pub forwarding: bool,
    /// Answers on a response channel ([`crate::Engine::reply`]); the same as
    /// [`Guarantees::replies`].
    pub replies: bool,
    /// Rebuilding the group after a failure ([`crate::Engine::reset`]); the same as
    /// [`Guarantees::crash_recovery`].
    pub reset: bool,
    /// Joining again, and falling back to a group of one ([`crate::Engine::rejoin`],
    /// [`crate::Engine::start_alone`]): what self-healing needs.
    pub rejoin: bool,
    /// Using the IP time-to-live a datagram arrived with
    /// ([`crate::Engine::handle_datagram_with_ttl`]); drivers that cannot read it need not.
    pub ttl_input: bool,
    /// Writing smaller datagrams when asked ([`crate::Engine::limit_datagram_bytes`]).
    pub datagram_limit: bool,
}

impl Capabilities {
    /// Nothing beyond multicast to the group.
    pub const NONE: Capabilities = Capabilities {
        locks: false,
        requests: false,
        forwarding: false,
        replies: false,
        reset: false,
        rejoin: false,
        ttl_input: false,
        datagram_limit: false,
    };
}

/// What an engine promises, as configured (see the module docs for who reads it).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Guarantees {
    /// Delivery order.
    pub order: Order,
    /// Members that install the same two consecutive views deliver the same messages between
    /// them (membership changes are ordered with the data).
    pub virtual_synchrony: bool,
    /// Resilience degree r: a message whose send completed is delivered by every member that
    /// survives any r crashes (0: held by the sender's group as long as nobody crashes).
    pub resilience: u8,
    /// Majority policy: a send completes only once a majority of its view holds the message,
    /// and only a majority may rebuild the group, so a completed send survives any failures
    /// (crashes, partitions) after which the group goes on, beyond `resilience`.
    pub majority_safe: bool,
    /// All-or-nothing or probabilistic delivery.
    pub delivery: DeliveryPromise,
    /// The per-message qualities of service served.
    pub qos: QosLevels,
    /// Who may send.
    pub senders: Senders,
    /// Whether the engine finds crashed members and rebuilds the group without them
    /// ([`crate::Engine::reset`], [`crate::Recovery`]).
    pub crash_recovery: bool,
    /// Whether the engine answers messages on a response channel ([`crate::Engine::reply`]).
    pub replies: bool,
    /// What the engine can be asked beyond multicast to its group.
    pub capabilities: Capabilities,
}

impl Guarantees {
    /// A plain reliable multicast: every member gets every message once, FIFO per sender, no
    /// total order, no views ordered with data, no crash recovery; QoS up to source order.
    pub fn reliable_fifo() -> Guarantees {
        Guarantees {
            order: Order::Fifo,
            virtual_synchrony: false,
            resilience: 0,
            majority_safe: false,
            delivery: DeliveryPromise::AllOrNothing,
            qos: QosLevels::below_total(false),
            senders: Senders::Any,
            crash_recovery: false,
            replies: false,
            capabilities: Capabilities::NONE,
        }
    }

    /// Whether FIFO per sender is promised (total order includes it).
    pub fn fifo(&self) -> bool {
        self.order >= Order::Fifo
    }

    /// What a run whose every message is sent at `qos` is promised: the declaration weakened to
    /// the level (RMP section 3.2: ordering between two messages is that of the lower level, and
    /// views are ordered with the data only from total order up).
    pub fn at_qos(mut self, qos: Qos) -> Guarantees {
        if qos.is_total() {
            // The resilient levels wait for holders before delivery; with crash recovery that
            // is a promise across failures (RMP section 3.2): K-resilient survives K failures,
            // majority resilient any failures after which a majority goes on, totally
            // resilient any failures a member survives.
            if self.crash_recovery {
                match qos {
                    Qos::KResilient(k) => self.resilience = self.resilience.max(k),
                    Qos::MajorityResilient => self.majority_safe = true,
                    Qos::TotallyResilient => self.resilience = u8::MAX,
                    _ => {}
                }
            }
            return self;
        }
        self.virtual_synchrony = false;
        self.order = match qos {
            Qos::SourceOrdered => self.order.min(Order::Fifo),
            _ => Order::Unordered,
        };
        if qos == Qos::Unreliable {
            self.delivery = DeliveryPromise::BestEffort;
            self.resilience = 0;
            self.majority_safe = false;
        }
        self
    }

    /// Whether every member that stays must deliver every message.
    pub fn all_or_nothing(&self) -> bool {
        self.delivery == DeliveryPromise::AllOrNothing
    }
}

/// Per-message quality of service (RMP section 2.3). Engines that order everything the same way
/// (the sequencer) deliver at least what is asked and say so in their docs.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Qos {
    /// Best effort: may be lost.
    Unreliable,
    /// Delivered once to every member, no order promised.
    Reliable,
    /// FIFO per sender.
    SourceOrdered,
    /// Same total order at every member.
    #[default]
    TotallyOrdered,
    /// Totally ordered and held by `k` members other than the sender before it is delivered.
    KResilient(u8),
    /// Totally ordered and held by a majority of the largest view it may belong to before it
    /// is delivered (RMP's majority resilient, agreed delivery across partitions).
    MajorityResilient,
    /// Totally ordered and held by every member before it is delivered (RMP's totally
    /// resilient, safe delivery).
    TotallyResilient,
}

impl Qos {
    /// Every level in increasing strength, with `k` for [`Qos::KResilient`].
    pub fn levels(k: u8) -> [Qos; 7] {
        [
            Qos::Unreliable,
            Qos::Reliable,
            Qos::SourceOrdered,
            Qos::TotallyOrdered,
            Qos::KResilient(k),
            Qos::MajorityResilient,
            Qos::TotallyResilient,
        ]
    }

    /// Whether the level orders messages totally (and so views with them).
    pub fn is_total(self) -> bool {
        !matches!(self, Qos::Unreliable | Qos::Reliable | Qos::SourceOrdered)
    }
}

impl std::fmt::Display for Qos {
    /// The level's name as the CLI's `--qos` takes it (`k-resilient=K` for `KResilient(K)`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Qos::Unreliable => f.write_str("unreliable"),
            Qos::Reliable => f.write_str("reliable"),
            Qos::SourceOrdered => f.write_str("source-ordered"),
            Qos::TotallyOrdered => f.write_str("totally-ordered"),
            Qos::KResilient(k) => write!(f, "k-resilient={k}"),
            Qos::MajorityResilient => f.write_str("majority-resilient"),
            Qos::TotallyResilient => f.write_str("totally-resilient"),
        }
    }
}

impl std::str::FromStr for Qos {
    type Err = String;

    /// A level by the name [`Qos`]'s `Display` gives it.
    fn from_str(s: &str) -> Result<Qos, String> {
        Ok(match s {
            "unreliable" => Qos::Unreliable,
            "reliable" => Qos::Reliable,
            "source-ordered" => Qos::SourceOrdered,
            "totally-ordered" => Qos::TotallyOrdered,
            "majority-resilient" => Qos::MajorityResilient,
            "totally-resilient" => Qos::TotallyResilient,
            _ => match s.strip_prefix("k-resilient=").map(str::parse::<u8>) {
                Some(Ok(k)) => Qos::KResilient(k),
                _ => {
                    return Err(format!(
                        "unknown quality of service `{s}` (unreliable, reliable, source-ordered, \
                         totally-ordered, k-resilient=K with K from 0 to 255, majority-resilient, \
                         totally-resilient)"
                    ))
                }
            },
        })
    }
}

#[cfg(test)]
mod qos_tests {
    use super::Qos;

    #[test]
    fn qos_names_read_back() {
        for q in [
            Qos::Unreliable,
            Qos::Reliable,
            Qos::SourceOrdered,
            Qos::TotallyOrdered,
            Qos::KResilient(0),
            Qos::KResilient(255),
            Qos::MajorityResilient,
            Qos::TotallyResilient,
        ] {
            assert_eq!(q.to_string().parse::<Qos>(), Ok(q));
        }
        for bad in ["", "safe", "k-resilient=", "k-resilient=256", "Reliable"] {
            let e = bad.parse::<Qos>().unwrap_err();
            assert!(e.contains("unknown quality of service"), "{e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qos_levels_contain_what_they_say() {
        let all = QosLevels::all(Some(2));
        assert!(all.contains(Qos::KResilient(2)));
        assert!(!all.contains(Qos::KResilient(3)));
        let g = Guarantees::reliable_fifo();
        assert!(g.qos.contains(Qos::SourceOrdered));
        assert!(!g.qos.contains(Qos::TotallyOrdered));
        assert!(!g.qos.contains(Qos::KResilient(0)));
        assert!(g.fifo() && g.all_or_nothing());
        assert!(Order::Total > Order::Fifo);
    }
}
