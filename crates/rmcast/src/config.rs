//! Configuration of nodes and groups. Every field has a default that works on a first run and
//! keeps traffic on this host (docs/ARCHITECTURE.md).

use rmcast_proto::common::{group_id, multicast_endpoint};
use rmcast_proto::secure::{Keyring, AUTH_OVERHEAD};
use rmcast_proto::{ConfigError, EngineChoice, NodeId, Qos};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::time::Duration;

/// Largest datagram an engine writes when the interface's MTU cannot be found: an Ethernet
/// MTU (1500) less the IPv4 (20) and UDP (8) headers, so that nothing relies on IP
/// fragmentation.
pub const DEFAULT_MAX_DATAGRAM_BYTES: usize = 1472;

/// [`DEFAULT_MAX_DATAGRAM_BYTES`] over IPv6: an Ethernet MTU less the IPv6 (40) and UDP (8)
/// headers.
pub const DEFAULT_MAX_DATAGRAM_BYTES_V6: usize = 1452;

/// Largest UDP payload over IPv4 (over IPv6 it is 65527, so this bound holds for both). The
/// loopback interface has an MTU of 65536, so a group whose members all live on one host may
/// use datagrams up to this size (65488 over IPv6 without IP fragmentation).
pub const MAX_DATAGRAM_BYTES: usize = rmcast_proto::wire::MAX_DATAGRAM_LEN;

/// [`DEFAULT_MAX_DATAGRAM_BYTES`] or [`DEFAULT_MAX_DATAGRAM_BYTES_V6`], by the family of the
/// interface address.
pub fn default_datagram_bytes(interface: IpAddr) -> usize {
    match interface {
        IpAddr::V4(_) => DEFAULT_MAX_DATAGRAM_BYTES,
        IpAddr::V6(_) => DEFAULT_MAX_DATAGRAM_BYTES_V6,
    }
}

/// Default [`GroupConfig::join_timeout`], for the library and the `rmcast` tool alike: long
/// enough for an answer from a loaded host, short enough to wait for by hand.
pub const DEFAULT_JOIN_TIMEOUT: Duration = Duration::from_secs(3);

/// Default [`GroupConfig::heal`] interval, for the library and the `rmcast` tool alike: the
/// coordinator's HELLO every second, so that groups of one name that hear each other merge,
/// and members left out come back, within a few seconds.
pub const DEFAULT_HEAL_INTERVAL: Duration = Duration::from_secs(1);

/// Smallest [`GroupConfig::max_datagram_bytes`] the runtime takes.
pub const MIN_DATAGRAM_BYTES: usize = 256;

/// Configuration of a [`crate::Node`]: [`NodeConfig::default`] and chained setters
/// (`NodeConfig::default().id(NodeId(7)).port(7000)`); `#[non_exhaustive]`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NodeConfig {
    /// This node's identity in its groups; random (and non-zero) when `None`. Must be unique in
    /// every group the node joins.
    pub id: Option<NodeId>,
    /// Interface address, IPv4 or IPv6: the unicast socket binds to it, and multicast is sent
    /// and joined on the interface that holds it (IPv4: by this address; IPv6: by
    /// [`NodeConfig::interface_index`]). The family is the node's: its groups' multicast
    /// addresses and unicast peers must be of the same family. The default, 127.0.0.1, keeps
    /// all traffic on this host; `::1` does the same over IPv6 where the kernel routes IPv6
    /// multicast on loopback (Linux does not by default; see the crate documentation).
    pub interface: IpAddr,
    /// IPv6 only: the index of the interface multicast is sent on (`IPV6_MULTICAST_IF`) and
    /// joined on (`IPV6_JOIN_GROUP`), and the scope of a link-local [`NodeConfig::interface`].
    /// `None`: the index of the interface that holds [`NodeConfig::interface`] (`::1`: the
    /// loopback interface); when no interface holds it (`::`), groups with a multicast address
    /// are refused rather than left to the routing table's choice of interface. IPv4 ignores it.
    pub interface_index: Option<u32>,
    /// Port of the unicast socket; 0 picks a free one. Unicast-only groups need a known port so
    /// that peers can list this node.
    pub port: u16,
    /// Multicast time-to-live (IPv6: the hop limit, `IPV6_MULTICAST_HOPS`). 0 keeps multicast
    /// on this host; raise it to reach other hosts.
    pub multicast_ttl: u32,
    /// Requested `SO_RCVBUF` and `SO_SNDBUF` of every socket, in bytes. A large receive buffer
    /// absorbs bursts that would otherwise be lost and retransmitted. The kernel may grant less
    /// (`net.core.rmem_max`); what it granted, read back, bounds how far a sequencer orders
    /// ahead of its slowest member (its history and send window in bytes, unless its
    /// configuration was given whole: `rmcast_proto::sequencer::Config::fit_receive_buffer`),
    /// so that members do not overflow their buffers. Datagrams dropped for want of it are
    /// counted ([`NodeCounters::receive_buffer_drops`](crate::NodeCounters::receive_buffer_drops)).
    pub socket_buffer_bytes: usize,
    /// Testing: the fraction of received datagrams dropped at random before any engine sees
    /// them, at least 0 and below 1; each one dropped is counted in
    /// [`NodeCounters::loss_shim_dropped`](crate::NodeCounters::loss_shim_dropped). Loss on
    /// loopback, where nothing is ever lost and no firewall may be at hand (`rmcast gauntlet`
    /// uses it). 0, off, unless the environment variable [`RECEIVE_LOSS_ENV`] gives a fraction
    /// (e.g. `RMCAST_RECEIVE_LOSS=0.1`): the default reads it, so that every program built on
    /// the runtime can be run lossy without a flag of its own. A value that is not a number in
    /// that range fails [`crate::Node::new`] with the variable named.
    pub receive_loss: f64,
    /// Send runs of datagrams of one size to one destination in one system call that the
    /// kernel cuts apart (UDP generic segmentation offload, `UDP_SEGMENT`, Linux 4.18 and
    /// later): each still leaves as a datagram of its own, so nothing changes on the wire,
    /// but the run crosses the sending stack once. Runs are cut at the path's datagram size
    /// (the interface's MTU); the first segmented send the kernel refuses turns it off for the
    /// node. On by default, with [`NodeConfig::receive_offload`] (which follows it): in
    /// network namespaces both on took the 1 KiB rates of the Ring and the Sequencer up 1.5 -
    /// 8 times, with shorter tails (docs/PERFORMANCE.md), once the Sequencer's history was
    /// bounded by its members' receive buffers (see [`NodeConfig::socket_buffer_bytes`]).
    /// The environment variable [`SEGMENTATION_OFFLOAD_ENV`] set to `0` turns it off for any
    /// program (`1`, or unset: on); elsewhere than Linux, never.
    pub segmentation_offload: bool,
    /// Receive runs of datagrams in one system call (UDP generic receive offload, `UDP_GRO`,
    /// Linux 5.0 and later): a peer's segmented send (see
    /// [`NodeConfig::segmentation_offload`]) arrives whole instead of being cut into
    /// datagrams for every receiving socket, and datagrams of one flow that a network device
    /// coalesced stay together; the runtime cuts each receive into its datagrams before any
    /// engine sees them, so engines and keyed groups see one datagram at a time as before.
    /// Costs no memory (a run is at most one UDP payload, and each receive buffer already
    /// holds one). `None`, the default: on exactly when segmentation offload is, so that
    /// turning that off restores the old path whole; the environment variable
    /// [`RECEIVE_OFFLOAD_ENV`] sets it (`1` or `0`) for any program. Members of one group
    /// should agree: a member without it pays the kernel's cutting of every run its peers
    /// send. Where the kernel refuses it, datagrams arrive one by one as without it.
    pub receive_offload: Option<bool>,
}

/// The environment variable [`NodeConfig::default`] reads
/// [`NodeConfig::segmentation_offload`] from: `0` turns it off (and receive offload with it,
/// unless [`RECEIVE_OFFLOAD_ENV`] says otherwise); unset or anything else, on.
pub const SEGMENTATION_OFFLOAD_ENV: &str = "RMCAST_GSO";

/// The environment variable [`NodeConfig::default`] reads [`NodeConfig::receive_offload`]
/// from: `1` turns it on, `0` off; unset, it follows segmentation offload.
pub const RECEIVE_OFFLOAD_ENV: &str = "RMCAST_GRO";

/// The environment variable [`NodeConfig::default`] reads [`NodeConfig::receive_loss`] from.
pub const RECEIVE_LOSS_ENV: &str = "RMCAST_RECEIVE_LOSS";

/// [`SEGMENTATION_OFFLOAD_ENV`]: on unless it is `0`.
fn segmentation_offload_from_env() -> bool {
    !matches!(
        std::env::var(SEGMENTATION_OFFLOAD_ENV)
            .as_deref()
            .map(str::trim),
        Ok("0")
    )
}

/// [`RECEIVE_LOSS_ENV`] as a fraction: 0 when unset or empty, NaN when it is not a number (so
/// that [`NodeConfig::check_receive_loss`] refuses it rather than running without loss).
fn receive_loss_from_env() -> f64 {
    match std::env::var(RECEIVE_LOSS_ENV) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().unwrap_or(f64::NAN),
        _ => 0.0,
    }
}

impl NodeConfig {
    /// Set [`NodeConfig::interface`]: an [`Ipv4Addr`], an [`Ipv6Addr`] or an [`IpAddr`].
    #[must_use]
    pub fn interface(mut self, addr: impl Into<IpAddr>) -> Self {
        self.interface = addr.into();
        self
    }

    /// Refuse a [`NodeConfig::receive_loss`] outside 0 (included) to 1 (excluded).
    pub fn check_receive_loss(&self) -> Result<(), ConfigError> {
        if (0.0..1.0).contains(&self.receive_loss) {
            Ok(())
        } else {
            Err(ConfigError::Invalid {
                field: "receive_loss (RMCAST_RECEIVE_LOSS)",
                reason: "must be a fraction of at least 0 and below 1, e.g. 0.1",
            })
        }
    }
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            id: None,
            interface: IpAddr::V4(Ipv4Addr::LOCALHOST),
            interface_index: None,
            port: 0,
            multicast_ttl: 0,
            socket_buffer_bytes: 4 << 20,
            receive_loss: receive_loss_from_env(),
            segmentation_offload: segmentation_offload_from_env(),
            receive_offload: match std::env::var(RECEIVE_OFFLOAD_ENV).as_deref().map(str::trim) {
                Ok("1") => Some(true),
                Ok("0") => Some(false),
                _ => None,
            },
        }
    }
}

/// Chained setters for configuration fields, so that a `#[non_exhaustive]` configuration can be
/// built outside this crate (`GroupConfig::new("g").qos(..).join_timeout(..)`) and new fields
/// added without breaking anyone. `name: T` sets the field to the value; `name: Some(T)` sets an
/// optional field to `Some(value)`.
macro_rules! setters {
    ($ty:ident { $($name:ident : $kind:tt),* $(,)? }) => {
        impl $ty {
            $( setters!(@one $ty, $name, $kind); )*
        }
    };
    (@one $ty:ident, $name:ident, (Some($t:ty))) => {
        #[doc = concat!("Set [`", stringify!($ty), "::", stringify!($name), "`] to `Some(value)`.")]
        #[must_use]
        pub fn $name(mut self, value: $t) -> Self {
            self.$name = Some(value);
            self
        }
    };
    (@one $ty:ident, $name:ident, ($t:ty)) => {
        #[doc = concat!("Set [`", stringify!($ty), "::", stringify!($name), "`].")]
        #[must_use]
        pub fn $name(mut self, value: $t) -> Self {
            self.$name = value;
            self
        }
    };
}
pub(crate) use setters;

setters!(NodeConfig {
    id: (Some(NodeId)),
    interface_index: (Some(u32)),
    port: (u16),
    multicast_ttl: (u32),
    socket_buffer_bytes: (usize),
    receive_loss: (f64),
    segmentation_offload: (bool),
    receive_offload: (Some(bool)),
});

setters!(GroupConfig {
    max_datagram_bytes: (Some(usize)),
    qos: (Qos),
    join_timeout: (Duration),
    leave_timeout: (Duration),
    event_queue_capacity: (usize),
    send_queue_capacity: (usize),
    completion_events: (bool),
    heal: (Option<Duration>),
    listen_multicast: (bool),
});

/// How [`crate::Node::open_group`] enters a group.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenMode {
    /// Start a new group with this node as its first member.
    Create,
    /// Join an existing group; fail with [`crate::Error::JoinTimeout`] if nobody admits us
    /// within [`GroupConfig::join_timeout`].
    Join,
    /// Try to join for [`GroupConfig::join_timeout`], then create the group if nobody answered.
    /// Nodes that look for the group at the same time announce themselves while they wait, and
    /// only the lowest id among them creates it; the others join that one (see
    /// `rmcast_proto::formation`), so that members started together form one group.
    JoinOrCreate,
    /// Talk to the group from outside it, without joining (RMP's multi-RPC): requests only
    /// ([`crate::GroupSender::request`], [`crate::Group::call`]), acknowledged and answered by
    /// the members. Only the `ring` engine has non-member senders.
    Client,
}

/// Where a group's traffic goes. Addresses are IPv4 or IPv6, of the family of the node's
/// [`NodeConfig::interface`] ([`GroupAddr::multicast`] and [`GroupAddr::unicast`] take either
/// form).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupAddr {
    /// The multicast address and port hashed from the group name (RMP section 3.1): in
    /// 239.192.0.0/14 over IPv4, and over IPv6 the same 32 bits under `ff18::` (transient,
    /// organisation-local scope, as 239.192.0.0/14 is for IPv4), e.g. `ff18::efc1:2a07`.
    FromName,
    /// An explicit multicast address and port.
    Multicast(SocketAddr),
    /// No multicast: datagrams for the whole group are sent by unicast to each listed address
    /// (the node's own address may be in the list; it is skipped).
    Unicast(Vec<SocketAddr>),
}

impl GroupAddr {
    /// [`GroupAddr::Multicast`] from a [`SocketAddrV4`], [`SocketAddrV6`] or [`SocketAddr`].
    pub fn multicast(addr: impl Into<SocketAddr>) -> GroupAddr {
        GroupAddr::Multicast(addr.into())
    }

    /// [`GroupAddr::Unicast`] from addresses of any of the socket address types.
    pub fn unicast<A: Into<SocketAddr>>(peers: impl IntoIterator<Item = A>) -> GroupAddr {
        GroupAddr::Unicast(peers.into_iter().map(Into::into).collect())
    }
}

/// The IPv6 multicast address [`GroupAddr::FromName`] gives: the IPv4 one's 32 bits under
/// `ff18::/96` (flags 1: transient; scope 8: organisation-local).
pub fn ipv6_group_address(v4: Ipv4Addr) -> Ipv6Addr {
    let [a, b, c, d] = v4.octets();
    Ipv6Addr::new(
        0xff18,
        0,
        0,
        0,
        0,
        0,
        u16::from_be_bytes([a, b]),
        u16::from_be_bytes([c, d]),
    )
}

/// Configuration of one group membership, passed to [`crate::Node::open_group`].
///
/// Built from [`GroupConfig::new`] with chained setters, one per field; the struct is
/// `#[non_exhaustive]`, so that fields added later break nobody:
///
/// ```
/// use rmcast::{GroupConfig, OpenMode, Qos};
/// use std::time::Duration;
///
/// let cfg = GroupConfig::new("orders")
///     .mode(OpenMode::Join)
///     .qos(Qos::Reliable)
///     .join_timeout(Duration::from_secs(5))
///     .heal(None);
/// assert_eq!(cfg.qos, Qos::Reliable);
/// assert!(cfg.heal.is_none());
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GroupConfig {
    /// The group's name; its hash is the group id in every datagram and, with
    /// [`GroupAddr::FromName`], the multicast address and port.
    pub name: String,
    /// Create, join, or join-or-create.
    pub mode: OpenMode,
    /// The protocol.
    pub engine: EngineChoice,
    /// Where the group's traffic goes.
    pub addr: GroupAddr,
    /// Largest datagram the engine writes, at most [`MAX_DATAGRAM_BYTES`]. `None` (the
    /// default): the largest the node's interface carries in one IP packet, its MTU less the
    /// IP and UDP headers (loopback: 65507; Ethernet: 1472; see
    /// [`crate::path_datagram_bytes`]). Members may differ: each says its size in the HELLOs
    /// members exchange when one joins, and the group writes datagrams of its smallest member's size
    /// (engines that can change it: the sequencer; the others write their own size, and read
    /// any), shown by [`crate::GroupSender::info`].
    pub max_datagram_bytes: Option<usize>,
    /// Quality of service of messages sent with [`crate::GroupSender::send`] and friends.
    pub qos: Qos,
    /// How long a join waits to be admitted.
    pub join_timeout: Duration,
    /// How long [`crate::GroupSender::leave`] waits for the leave to complete (default 10 s).
    /// Own messages still outstanding get the first half before the engine's leave starts; the
    /// rest must cover the Sequencer's `leave_linger_ms` (5 s), the longest a departing
    /// sequencer may wait for farewells, so that a slow but sound handover is not reported as
    /// a failed leave.
    pub leave_timeout: Duration,
    /// Events (deliveries, views) queued for the application. When the queue is full the
    /// runtime stops taking events from the engine, which then pushes back on senders.
    pub event_queue_capacity: usize,
    /// Messages queued between the application and the engine. When full, `send` blocks and
    /// `try_send` hands the message back.
    pub send_queue_capacity: usize,
    /// Report the completion of every own message as [`crate::GroupEvent::SendComplete`], in
    /// order with the deliveries (off by default: a caller of [`crate::GroupSender::send`] is
    /// told anyway, and the events would only fill the queue). Turn it on to learn which
    /// messages sent with [`crate::GroupSender::try_send`] or
    /// [`crate::GroupSender::send_nowait`] are stable, e.g. to log completions for
    /// `rmcast_sim::log::verify_logs`.
    pub completion_events: bool,
    /// The group key(s): `Some` makes the group *secure*. Every datagram is then sealed with
    /// authenticated encryption (AES-256-GCM, see [`rmcast_proto::secure`]) and a datagram that
    /// does not verify, is replayed, or comes without the authentication block is counted
    /// ([`crate::NodeCounters`]) and dropped before the engine sees it. Every member needs the
    /// same key. `None` (the default): the group trusts its network, and anyone who can reach
    /// its address can send into it; datagrams that carry an authentication block are dropped.
    pub keys: Option<Keyring>,
    /// Self-healing, as JGroups' MERGE3 and Corosync's ring formation do it. `Some(interval)`:
    /// the member that coordinates the group announces it every `interval` (a HELLO with the
    /// number of members); a member whose group hears a larger group of the same name (more
    /// members; as many and a lower coordinator id), after a healed partition or when members
    /// started apart, merges into it ([`crate::Recovery::Merging`]), and a member the group left
    /// out ([`crate::Recovery::Expelled`]) joins it again, both as new members
    /// ([`rmcast_proto::Engine::rejoin`]); sends that had not completed then fail with
    /// [`crate::Error::Merged`] or [`crate::Error::Expelled`], nothing is lost silently.
    /// Application state is the application's to reconcile (as with JGroups). Engines without
    /// `rejoin` (all but the sequencer and the ring today) close the group when expelled, as
    /// with `None`. The default, [`DEFAULT_HEAL_INTERVAL`], is `rmcast member`'s too: groups
    /// heal unless told not to, as JGroups' default stack (MERGE3) and Corosync do.
    pub heal: Option<Duration>,
    /// Join the group's multicast address to hear what members multicast (the default).
    /// `false` makes a send-only member, such as the `tree` engine's sender, which hears its
    /// receivers by unicast: it still multicasts to the group, but its host no longer takes
    /// its own datagrams back through multicast loopback (unless another process there
    /// listens), which on a bulk stream is as much work again as sending them.
    pub listen_multicast: bool,
}

impl GroupConfig {
    /// Defaults for a group name: join-or-create, sequencer with resilience 0, address hashed
    /// from the name.
    pub fn new(name: impl Into<String>) -> Self {
        GroupConfig {
            name: name.into(),
            mode: OpenMode::JoinOrCreate,
            engine: EngineChoice::default(),
            addr: GroupAddr::FromName,
            max_datagram_bytes: None,
            qos: Qos::TotallyOrdered,
            join_timeout: DEFAULT_JOIN_TIMEOUT,
            leave_timeout: Duration::from_secs(10),
            event_queue_capacity: 4096,
            send_queue_capacity: 1024,
            completion_events: false,
            keys: None,
            heal: Some(DEFAULT_HEAL_INTERVAL),
            listen_multicast: true,
        }
    }

    /// Make the group secure with `keys` ([`GroupConfig::keys`]).
    pub fn keys(mut self, keys: Keyring) -> Self {
        self.keys = Some(keys);
        self
    }

    /// Largest datagram the engine itself may write: [`GroupConfig::max_datagram_bytes`] less
    /// the authentication block and tag of a secure group.
    pub fn engine_datagram_bytes(&self) -> usize {
        match self.keys {
            Some(_) => self.datagram_bytes().saturating_sub(AUTH_OVERHEAD),
            None => self.datagram_bytes(),
        }
    }

    /// Set the open mode.
    pub fn mode(mut self, mode: OpenMode) -> Self {
        self.mode = mode;
        self
    }

    /// Set the engine.
    pub fn engine(mut self, engine: EngineChoice) -> Self {
        self.engine = engine;
        self
    }

    /// Set where the traffic goes.
    pub fn addr(mut self, addr: GroupAddr) -> Self {
        self.addr = addr;
        self
    }

    /// The group id carried in every datagram's header.
    pub fn group_id(&self) -> u32 {
        group_id(&self.name)
    }

    /// The multicast endpoint, or `None` in unicast mode; [`GroupAddr::FromName`] gives its
    /// IPv4 form (a node on an IPv6 interface uses [`GroupConfig::multicast_addr_for`]).
    pub fn multicast_addr(&self) -> Option<SocketAddr> {
        self.multicast_addr_for(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    }

    /// The multicast endpoint a node on `interface` uses, or `None` in unicast mode:
    /// [`GroupAddr::FromName`] in the interface's family ([`ipv6_group_address`] for IPv6).
    pub fn multicast_addr_for(&self, interface: IpAddr) -> Option<SocketAddr> {
        match &self.addr {
            GroupAddr::FromName => {
                let (ip, port) = multicast_endpoint(&self.name);
                let v4 = Ipv4Addr::from(ip);
                Some(match interface {
                    IpAddr::V4(_) => SocketAddr::V4(SocketAddrV4::new(v4, port)),
                    IpAddr::V6(_) => {
                        SocketAddr::V6(SocketAddrV6::new(ipv6_group_address(v4), port, 0, 0))
                    }
                })
            }
            GroupAddr::Multicast(a) => Some(*a),
            GroupAddr::Unicast(_) => None,
        }
    }

    /// Refuse addresses of another family than the node's `interface`: a socket of one family
    /// cannot reach the other's addresses.
    pub fn check_family(&self, interface: IpAddr) -> Result<(), ConfigError> {
        let wrong = |a: &SocketAddr| a.is_ipv4() != interface.is_ipv4();
        let bad = match &self.addr {
            GroupAddr::FromName => false,
            GroupAddr::Multicast(a) => wrong(a),
            GroupAddr::Unicast(peers) => peers.iter().any(wrong),
        };
        if bad {
            return Err(ConfigError::Invalid {
                field: "addr",
                reason: "is not of the interface's address family (IPv4 and IPv6 do not mix: \
                         give an interface address of the group's family)",
            });
        }
        Ok(())
    }

    /// [`GroupConfig::max_datagram_bytes`], or [`DEFAULT_MAX_DATAGRAM_BYTES`] when it is not
    /// set ([`crate::Node::open_group`] sets it from the interface's MTU first).
    pub fn datagram_bytes(&self) -> usize {
        self.max_datagram_bytes
            .unwrap_or(DEFAULT_MAX_DATAGRAM_BYTES)
    }

    /// Check what can be checked before any socket is opened: the runtime's own settings,
    /// then the engine's ([`EngineChoice::validate`], the one place engine settings are
    /// checked), and that the engine serves [`GroupConfig::qos`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.name.trim().is_empty() {
            return Err(ConfigError::Invalid {
                field: "name",
                reason: "is empty",
            });
        }
        // A secure group's engine still gets at least the minimum.
        let sealing = self.datagram_bytes() - self.engine_datagram_bytes();
        ConfigError::check_range(
            "max_datagram_bytes",
            self.datagram_bytes() as u64,
            (MIN_DATAGRAM_BYTES + sealing) as u64,
            MAX_DATAGRAM_BYTES as u64,
        )?;
        let at_least_one =
            |field, n: usize| ConfigError::check_range(field, n as u64, 1, u32::MAX as u64);
        at_least_one("event_queue_capacity", self.event_queue_capacity)?;
        at_least_one("send_queue_capacity", self.send_queue_capacity)?;
        self.engine.validate(self.engine_datagram_bytes())?;
        if self.mode == OpenMode::Client && !self.engine.guarantees().capabilities.requests {
            return Err(ConfigError::Invalid {
                field: "mode",
                reason: "client (outside the group) needs an engine with non-member senders \
                         (the ring)",
            });
        }
        if !self.engine.guarantees().qos.contains(self.qos) {
            return Err(ConfigError::Invalid {
                field: "qos",
                reason: "is not served by the engine",
            });
        }
        match &self.addr {
            GroupAddr::Multicast(a) if !a.ip().is_multicast() => Err(ConfigError::Invalid {
                field: "addr",
                reason: "is not a multicast address",
            }),
            GroupAddr::Unicast(peers) if peers.is_empty() => Err(ConfigError::Invalid {
                field: "addr",
                reason: "needs at least one peer address in unicast mode",
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_ipv6_address_carries_the_ipv4_ones_bits() {
        let cfg = GroupConfig::new("chat");
        let Some(SocketAddr::V4(a4)) = cfg.multicast_addr() else {
            panic!("FromName is IPv4 by default")
        };
        let Some(SocketAddr::V6(a6)) = cfg.multicast_addr_for(IpAddr::V6(Ipv6Addr::LOCALHOST))
        else {
            panic!("an IPv6 interface gets an IPv6 group")
        };
        assert_eq!(a6.port(), a4.port());
        assert_eq!(*a6.ip(), ipv6_group_address(*a4.ip()));
        assert!(a6.ip().is_multicast());
        // Transient (flags 1), organisation-local scope (8), as 239.192.0.0/14 is for IPv4.
        assert_eq!(a6.ip().segments()[0], 0xff18);
        assert_eq!(
            ipv6_group_address(Ipv4Addr::new(239, 193, 42, 7)),
            "ff18::efc1:2a07".parse::<Ipv6Addr>().unwrap()
        );
        // An explicit address is what it is, whatever the interface.
        let explicit = GroupConfig::new("x").addr(GroupAddr::multicast(
            "[ff02::4d43]:7400".parse::<SocketAddr>().unwrap(),
        ));
        assert_eq!(
            explicit.multicast_addr_for(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            Some("[ff02::4d43]:7400".parse().unwrap())
        );
    }

    #[test]
    fn the_ipv4_forms_still_build_a_configuration() {
        let node = NodeConfig::default()
            .interface(Ipv4Addr::new(192, 168, 1, 10))
            .multicast_ttl(1);
        assert_eq!(node.interface, IpAddr::V4(Ipv4Addr::new(192, 168, 1, 10)));
        assert_eq!(node.interface_index, None);
        let node = node.interface(Ipv6Addr::LOCALHOST).interface_index(1);
        assert_eq!(node.interface, IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(node.interface_index, Some(1));
        let v4 = SocketAddrV4::new(Ipv4Addr::new(239, 1, 2, 3), 4000);
        assert_eq!(
            GroupAddr::multicast(v4),
            GroupAddr::Multicast(SocketAddr::V4(v4))
        );
        let peers = [SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1)];
        assert_eq!(
            GroupAddr::unicast(peers),
            GroupAddr::Unicast(vec!["127.0.0.1:1".parse().unwrap()])
        );
    }

    #[test]
    fn validation_and_the_family_check() {
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        let v4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let m6 = GroupConfig::new("g").addr(GroupAddr::multicast(
            "[ff02::4d43]:7400".parse::<SocketAddr>().unwrap(),
        ));
        assert!(m6.validate().is_ok());
        assert!(m6.check_family(v6).is_ok());
        assert!(matches!(
            m6.check_family(v4),
            Err(ConfigError::Invalid { field: "addr", .. })
        ));
        // A unicast IPv6 address is no group address.
        let not_group = GroupConfig::new("g").addr(GroupAddr::multicast(
            "[fd00::1]:7400".parse::<SocketAddr>().unwrap(),
        ));
        assert!(not_group.validate().is_err());
        // Mixed peers are refused for either family.
        let mixed = GroupConfig::new("g").addr(GroupAddr::Unicast(vec![
            "[::1]:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        ]));
        assert!(mixed.check_family(v6).is_err());
        assert!(mixed.check_family(v4).is_err());
        // The name's address follows the interface: never a mismatch.
        assert!(GroupConfig::new("g").check_family(v6).is_ok());
        assert_eq!(default_datagram_bytes(v4), 1472);
        assert_eq!(default_datagram_bytes(v6), 1452);
    }
}
