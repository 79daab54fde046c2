//! Where a group's peers live, and which of those addresses are proven to receive what is sent
//! to them.
//!
//! **One table per group.** Each group learns its peers' unicast addresses on its own, from the
//! datagrams that passed its filter: in a group with a key only from datagrams that verified
//! under that group's keys, so nothing a group without a key hears can redirect a keyed
//! group's unicasts.
//!
//! **Address validation, as QUIC does it** (RFC 9000, section 8; DTLS 1.3 alike). Without a
//! key, a datagram's source address is whatever its sender wrote, so answering it could make
//! this node send a victim many bytes for few. An address is *validated* once it proved that
//! it receives what is sent to it: in a keyed group by a datagram that verified (nobody
//! without the key can make one, and replays are refused) from a session confirmed live
//! ([`crate::sessions`]: a capture replayed to a member that never heard its session moves
//! nothing), in a group without a key by a
//! *path challenge*: a random 8-byte cookie sent to the address, which the runtime there sends
//! back in a *path response* (both are formation datagrams, [`PATH_CHALLENGE`] and
//! [`PATH_RESPONSE`], handled by the runtime and never shown to an engine). Until then, the
//! group sends an address at most [`AMPLIFICATION_FACTOR`] times the bytes it received from it
//! (the challenges included); unicasts beyond that wait in a small bounded hold, sent once
//! the address validates (one round trip for a live peer) and dropped after [`HOLD_TIME`]
//! (the engine's retransmission covers them). Multicast to the group address reflects nothing
//! and is never limited.
//!
//! **A peer's address is not moved by one unauthenticated datagram.** Without a key, datagrams
//! from a new address of a peer known at a validated address are still processed, but
//! unicasts keep going to the old address until the new one answers a challenge.

use rmcast_proto::wire::{EngineKind, Header, HEADER_LEN};
use rmcast_proto::{NodeId, Time};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use crate::shared::AtomicNodeCounters;

/// An address not yet validated is sent at most this many times the bytes received from it.
pub(crate) const AMPLIFICATION_FACTOR: u64 = 3;
/// Packet type of a path challenge (engine byte [`EngineKind::Formation`], whose HELLOs use
/// types 1 to 4): the header and an 8-byte cookie.
pub(crate) const PATH_CHALLENGE: u8 = 0x10;
/// Packet type of the answer to a path challenge: the header and the challenge's cookie.
pub(crate) const PATH_RESPONSE: u8 = 0x11;
/// Length of a path challenge or response.
pub(crate) const PATH_LEN: usize = HEADER_LEN + 8;
/// Peers remembered per group; a bound on memory against forged senders.
const MAX_PEERS: usize = 65_536;
/// Addresses remembered per group.
const MAX_ADDRS: usize = 65_536;
/// A challenge not answered within this is sent again on the next datagram from the address.
const CHALLENGE_RETRY: Duration = Duration::from_millis(20);
/// How long a unicast held for an address not yet validated waits at most.
pub(crate) const HOLD_TIME: Duration = Duration::from_millis(500);
/// Bytes held for one address at most.
const HOLD_BYTES_PER_ADDR: usize = 64 * 1024;
/// Bytes held for the whole group at most.
const HOLD_BYTES: usize = 1024 * 1024;

/// A path challenge or response, as received.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    Challenge(u64),
    Response(u64),
}

/// The path packet `datagram` is (its header decoded as `header`), if it is one.
pub(crate) fn parse_path(header: &Header, datagram: &[u8]) -> Option<Path> {
    if header.engine != EngineKind::Formation || datagram.len() != PATH_LEN {
        return None;
    }
    let cookie = u64::from_be_bytes(datagram[HEADER_LEN..].try_into().ok()?);
    match header.ptype {
        PATH_CHALLENGE => Some(Path::Challenge(cookie)),
        PATH_RESPONSE => Some(Path::Response(cookie)),
        _ => None,
    }
}

/// Write the path packet `ptype` of `me` for group `group` with `cookie` into `buf`.
pub(crate) fn encode_path(group: u32, me: NodeId, ptype: u8, cookie: u64, buf: &mut Vec<u8>) {
    buf.clear();
    Header {
        engine: EngineKind::Formation,
        ptype,
        flags: 0,
        group,
        incarnation: 0,
        sender: me,
    }
    .encode(buf);
    buf.extend_from_slice(&cookie.to_be_bytes());
}

/// One peer: where its unicasts go.
struct Peer {
    addr: SocketAddr,
    /// `addr` is validated (a cache of [`Addr::validated`]: a validated address stays so).
    validated: bool,
}

/// What the group knows of one address.
#[derive(Default)]
struct Addr {
    validated: bool,
    /// Bytes received from the address while not validated.
    received: u64,
    /// Bytes sent to it while not validated.
    sent: u64,
    /// The cookie of the challenge sent to it (0: none yet).
    cookie: u64,
    /// When the last challenge was sent.
    challenged: Option<Time>,
    /// Bytes held for it.
    held: usize,
}

/// Where a unicast for a peer goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// To this address (validated, or within its budget, now charged).
    Send(SocketAddr),
    /// This address has used its budget: hold the datagram or drop it.
    Limited(SocketAddr),
    /// The peer's address is not known.
    Unknown,
}

/// A group's peer table (see the module documentation).
pub(crate) struct Peers {
    /// A keyed group: every address learnt verified, nothing limited.
    keyed: bool,
    /// The group's id and this node's, for the path packets.
    group: u32,
    me: NodeId,
    peers: HashMap<NodeId, Peer>,
    addrs: HashMap<SocketAddr, Addr>,
    /// Unicasts waiting for their address to validate, oldest first.
    held: VecDeque<(SocketAddr, Time, Vec<u8>)>,
    held_bytes: usize,
    /// Cookies drawn from the operating system's generator, a batch at a time: an attacker
    /// who sees the cookies sent to its own address must not predict the next ones.
    cookies: [u64; COOKIE_BATCH],
    /// Cookies of the batch used so far.
    used: usize,
    /// A path datagram on its way out.
    buf: Vec<u8>,
}

impl Peers {
    /// The table of group `group` with a key (`keyed`) or without, at node `me`.
    pub(crate) fn new(keyed: bool, group: u32, me: NodeId) -> Peers {
        Peers {
            keyed,
            group,
            me,
            peers: HashMap::new(),
            addrs: HashMap::new(),
            held: VecDeque::new(),
            held_bytes: 0,
            cookies: [0; COOKIE_BATCH],
            used: COOKIE_BATCH,
            buf: Vec::with_capacity(PATH_LEN),
        }
    }

    /// A fresh unpredictable cookie, never 0 (0 says "no challenge sent").
    fn cookie(&mut self) -> u64 {
        if self.used == COOKIE_BATCH {
            let mut bytes = [0u8; COOKIE_BATCH * 8];
            crate::random::fill_random(&mut bytes);
            for (c, b) in self.cookies.iter_mut().zip(bytes.chunks_exact(8)) {
                *c = u64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
            }
            self.used = 0;
        }
        let c = self.cookies[self.used];
        self.used += 1;
        c.max(1)
    }

    /// The address `sender`'s unicasts go to, and whether it is validated.
    #[cfg(test)]
    pub(crate) fn get(&self, sender: NodeId) -> Option<(SocketAddr, bool)> {
        self.peers.get(&sender).map(|p| (p.addr, p.validated))
    }

    /// Make room for one more peer: forget those not validated when the table is full (each
    /// forgetting pass frees many places, so the cost per datagram stays constant).
    fn room_for_peer(&mut self) -> bool {
        if self.peers.len() >= MAX_PEERS {
            self.peers.retain(|_, p| p.validated);
        }
        self.peers.len() < MAX_PEERS
    }

    /// Keyed group: `sender`'s datagram from `from` verified, and its session is confirmed
    /// live. It proves the address (nobody without the key makes one; replays were refused
    /// before, captures of unconfirmed sessions held), and may move the peer.
    pub(crate) fn learn_verified(&mut self, sender: NodeId, from: SocketAddr) {
        match self.peers.get_mut(&sender) {
            Some(p) if p.addr == from => {}
            Some(p) => {
                tracing::debug!(peer = %sender, old = %p.addr, new = %from, "peer address changed");
                p.addr = from;
                p.validated = true;
            }
            None => {
                if self.room_for_peer() {
                    self.peers.insert(
                        sender,
                        Peer {
                            addr: from,
                            validated: true,
                        },
                    );
                }
            }
        }
    }

    /// The state of address `from`, made if new (None when the table is full of validated
    /// addresses).
    fn addr_mut(&mut self, from: SocketAddr) -> Option<&mut Addr> {
        if !self.addrs.contains_key(&from) && self.addrs.len() >= MAX_ADDRS {
            // Forget unvalidated addresses that nothing holds for.
            self.addrs.retain(|_, a| a.validated || a.held > 0);
            if self.addrs.len() >= MAX_ADDRS {
                return None;
            }
        }
        Some(self.addrs.entry(from).or_default())
    }

    /// `len` bytes came from `from` (group without a key): counted toward its budget while it
    /// is not validated. Returns whether it is validated.
    pub(crate) fn count(&mut self, from: SocketAddr, len: usize) -> bool {
        match self.addr_mut(from) {
            Some(a) if a.validated => true,
            Some(a) => {
                a.received = a.received.saturating_add(len as u64);
                false
            }
            None => false,
        }
    }

    /// Group without a key: `sender`'s datagram of `len` bytes came from `from`. Learns or
    /// keeps the peer's address (see the module documentation) and returns a path challenge
    /// to send to `from` if one is due (its bytes charged to `from`'s budget).
    pub(crate) fn observe(
        &mut self,
        sender: NodeId,
        from: SocketAddr,
        len: usize,
        now: Time,
        counters: &AtomicNodeCounters,
    ) -> Option<&[u8]> {
        // The common case, one lookup: a known peer at its validated address.
        if let Some(p) = self.peers.get(&sender) {
            if p.addr == from && p.validated {
                return None;
            }
        }
        let validated = self.count(from, len);
        let room = self.peers.contains_key(&sender) || self.room_for_peer();
        match self.peers.get_mut(&sender) {
            Some(p) if p.addr == from => p.validated = validated,
            Some(p) if validated => {
                tracing::debug!(peer = %sender, old = %p.addr, new = %from,
                                "peer address changed (validated)");
                p.addr = from;
                p.validated = true;
            }
            // One datagram from a new address moves nothing: the old address keeps the peer's
            // unicasts until the new one answers a challenge.
            Some(p) if p.validated => AtomicNodeCounters::add(&counters.peer_address_kept, 1),
            Some(_) => {}
            None if room => {
                tracing::trace!(peer = %sender, addr = %from, validated, "learnt peer address");
                self.peers.insert(
                    sender,
                    Peer {
                        addr: from,
                        validated,
                    },
                );
            }
            None => {}
        }
        if validated {
            return None;
        }
        self.challenge(from, now, counters)
    }

    /// A path challenge for `from` if one is due and fits its budget.
    fn challenge(
        &mut self,
        from: SocketAddr,
        now: Time,
        counters: &AtomicNodeCounters,
    ) -> Option<&[u8]> {
        let retry = CHALLENGE_RETRY.as_nanos() as u64;
        let a = self.addrs.get(&from)?;
        let due = a
            .challenged
            .is_none_or(|t| now.0.saturating_sub(t.0) >= retry);
        if a.validated || !due || !fits(a, PATH_LEN) {
            return None;
        }
        // One cookie per address, the same in every retry: a late answer still counts.
        let fresh = if a.cookie == 0 { self.cookie() } else { 0 };
        let a = self.addrs.get_mut(&from)?;
        if a.cookie == 0 {
            a.cookie = fresh;
        }
        a.sent += PATH_LEN as u64;
        a.challenged = Some(now);
        let cookie = a.cookie;
        AtomicNodeCounters::add(&counters.path_challenges, 1);
        encode_path(self.group, self.me, PATH_CHALLENGE, cookie, &mut self.buf);
        Some(&self.buf)
    }

    /// A path challenge of `cookie` came from `from` (its bytes already counted): the response
    /// to send back, if `from`'s budget takes it.
    pub(crate) fn respond(&mut self, from: SocketAddr, cookie: u64) -> Option<&[u8]> {
        if !self.charge(from, PATH_LEN) {
            return None;
        }
        encode_path(self.group, self.me, PATH_RESPONSE, cookie, &mut self.buf);
        Some(&self.buf)
    }

    /// A path response of `cookie` from `sender` at `from` (its bytes already counted): if it
    /// answers the challenge sent there, the address is validated and the peer's unicasts go
    /// there. Returns whether the address became validated (its held unicasts may go).
    pub(crate) fn validate(
        &mut self,
        sender: NodeId,
        from: SocketAddr,
        cookie: u64,
        counters: &AtomicNodeCounters,
    ) -> bool {
        let Some(a) = self.addrs.get_mut(&from) else {
            return false;
        };
        if a.validated || a.cookie == 0 || a.cookie != cookie {
            return false;
        }
        a.validated = true;
        AtomicNodeCounters::add(&counters.paths_validated, 1);
        tracing::trace!(peer = %sender, addr = %from, "address validated");
        let room = self.peers.contains_key(&sender) || self.room_for_peer();
        match self.peers.get_mut(&sender) {
            Some(p) => {
                if p.addr != from {
                    tracing::debug!(peer = %sender, old = %p.addr, new = %from,
                                    "peer address changed (validated)");
                }
                p.addr = from;
                p.validated = true;
            }
            None if room => {
                self.peers.insert(
                    sender,
                    Peer {
                        addr: from,
                        validated: true,
                    },
                );
            }
            None => {}
        }
        true
    }

    /// Charge `len` bytes to `to`: true if it is validated or its budget takes them.
    pub(crate) fn charge(&mut self, to: SocketAddr, len: usize) -> bool {
        if self.keyed {
            return true;
        }
        match self.addrs.get_mut(&to) {
            Some(a) if a.validated => true,
            Some(a) if fits(a, len) => {
                a.sent += len as u64;
                true
            }
            _ => false,
        }
    }

    /// Where a unicast of `len` bytes for `id` goes; charged to its address's budget if that
    /// is not validated.
    pub(crate) fn route(&mut self, id: NodeId, len: usize) -> Route {
        let Some(p) = self.peers.get_mut(&id) else {
            return Route::Unknown;
        };
        if p.validated {
            return Route::Send(p.addr);
        }
        let addr = p.addr;
        match self.addrs.get_mut(&addr) {
            Some(a) if a.validated => {
                p.validated = true;
                Route::Send(addr)
            }
            Some(a) if fits(a, len) => {
                a.sent += len as u64;
                Route::Send(addr)
            }
            _ => Route::Limited(addr),
        }
    }

    /// Keep a copy of `datagram` for `to` until `to` validates; false (not kept) when the hold
    /// is full for it.
    pub(crate) fn hold(
        &mut self,
        to: SocketAddr,
        datagram: &[u8],
        now: Time,
        counters: &AtomicNodeCounters,
    ) -> bool {
        self.expire(now, counters);
        let Some(a) = self.addrs.get_mut(&to) else {
            return false;
        };
        if a.held + datagram.len() > HOLD_BYTES_PER_ADDR
            || self.held_bytes + datagram.len() > HOLD_BYTES
        {
            return false;
        }
        a.held += datagram.len();
        self.held_bytes += datagram.len();
        self.held.push_back((to, now, datagram.to_vec()));
        true
    }

    /// Drop held unicasts older than [`HOLD_TIME`] (counted).
    fn expire(&mut self, now: Time, counters: &AtomicNodeCounters) {
        let limit = HOLD_TIME.as_nanos() as u64;
        while let Some((to, at, _)) = self.held.front() {
            if now.0.saturating_sub(at.0) < limit {
                break;
            }
            let to = *to;
            if let Some((_, _, d)) = self.held.pop_front() {
                self.unhold(to, d.len());
                AtomicNodeCounters::add(&counters.amplification_dropped, 1);
            }
        }
    }

    fn unhold(&mut self, to: SocketAddr, len: usize) {
        self.held_bytes -= len;
        if let Some(a) = self.addrs.get_mut(&to) {
            a.held -= len;
        }
    }

    /// Take the unicasts held for `to` (now validated), oldest first, into `out`; expired ones
    /// are dropped on the way.
    pub(crate) fn release(
        &mut self,
        to: SocketAddr,
        now: Time,
        counters: &AtomicNodeCounters,
        out: &mut Vec<Vec<u8>>,
    ) {
        self.expire(now, counters);
        let mut i = 0;
        while i < self.held.len() {
            if self.held[i].0 == to {
                if let Some((_, _, d)) = self.held.remove(i) {
                    self.unhold(to, d.len());
                    out.push(d);
                }
            } else {
                i += 1;
            }
        }
    }
}

/// Cookies drawn from the system per batch (one system call for this many challenges).
pub(crate) const COOKIE_BATCH: usize = 32;

/// Whether `a`'s budget takes `len` more bytes.
fn fits(a: &Addr, len: usize) -> bool {
    a.sent.saturating_add(len as u64) <= a.received.saturating_mul(AMPLIFICATION_FACTOR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::AtomicNodeCounters;

    const ME: NodeId = NodeId(1);
    const GID: u32 = 77;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn t(ms: u64) -> Time {
        Time(ms * 1_000_000)
    }

    /// The cookie of the challenge `d`.
    fn cookie_of(d: &[u8]) -> u64 {
        let p = rmcast_proto::wire::decode(d).expect("decodes");
        match parse_path(&p.header, d) {
            Some(Path::Challenge(c)) => c,
            other => panic!("not a challenge: {other:?}"),
        }
    }

    /// Cookies are not 0 and do not repeat across batches.
    #[test]
    fn cookies_are_fresh() {
        let mut p = Peers::new(false, GID, ME);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..3 * COOKIE_BATCH {
            assert!(seen.insert(p.cookie()));
        }
        assert!(!seen.contains(&0));
    }

    #[test]
    fn path_packets_round_trip_and_other_formation_packets_are_not_path_packets() {
        let mut buf = Vec::new();
        encode_path(GID, ME, PATH_RESPONSE, 0xdead_beef, &mut buf);
        assert_eq!(buf.len(), PATH_LEN);
        let p = rmcast_proto::wire::decode(&buf).unwrap();
        assert_eq!(
            parse_path(&p.header, &buf),
            Some(Path::Response(0xdead_beef))
        );
        let mut hello = Vec::new();
        rmcast_proto::formation::hello::encode(
            GID,
            ME,
            rmcast_proto::formation::hello::Hello::Ask,
            1400,
            &mut hello,
        );
        let p = rmcast_proto::wire::decode(&hello).unwrap();
        assert_eq!(parse_path(&p.header, &hello), None);
        // Truncated: not a path packet.
        let p = rmcast_proto::wire::decode(&buf[..PATH_LEN - 1]).unwrap();
        assert_eq!(parse_path(&p.header, &buf[..PATH_LEN - 1]), None);
    }

    /// An unvalidated address is sent at most three times what it sent, challenge included;
    /// once it answers the challenge, everything goes and what was held is released.
    #[test]
    fn an_unvalidated_address_gets_three_times_its_bytes_until_it_answers() {
        let c = AtomicNodeCounters::default();
        let mut p = Peers::new(false, GID, ME);
        let (peer, a) = (NodeId(9), addr(4000));
        let challenge = p
            .observe(peer, a, 40, t(0), &c)
            .expect("a challenge")
            .to_vec();
        assert_eq!(challenge.len(), PATH_LEN);
        // 120 bytes of budget, 28 used by the challenge: 92 left.
        assert_eq!(p.route(peer, 90), Route::Send(a));
        assert_eq!(p.route(peer, 10), Route::Limited(a));
        assert!(p.hold(a, &[7; 10], t(1), &c));
        // A wrong cookie validates nothing.
        let cookie = cookie_of(&challenge);
        assert!(!p.validate(peer, a, cookie ^ 1, &c));
        assert_eq!(p.route(peer, 10), Route::Limited(a));
        assert!(p.validate(peer, a, cookie, &c));
        let mut out = Vec::new();
        p.release(a, t(2), &c, &mut out);
        assert_eq!(out, vec![vec![7; 10]]);
        assert_eq!(p.route(peer, 60_000), Route::Send(a));
        assert_eq!(p.get(peer), Some((a, true)));
        assert_eq!(c.snapshot().paths_validated, 1);
    }

    /// A validated peer stays where it is when a datagram with its id comes from elsewhere;
    /// it moves once the new address answers.
    #[test]
    fn one_datagram_from_a_new_address_does_not_move_a_validated_peer() {
        let c = AtomicNodeCounters::default();
        let mut p = Peers::new(false, GID, ME);
        let (peer, home, spoof) = (NodeId(9), addr(4000), addr(4001));
        let ch = p.observe(peer, home, 40, t(0), &c).unwrap().to_vec();
        assert!(p.validate(peer, home, cookie_of(&ch), &c));
        // Many datagrams from another address: challenged (once per retry interval), not moved.
        let ch2 = p.observe(peer, spoof, 40, t(1), &c).unwrap().to_vec();
        assert!(p.observe(peer, spoof, 40, t(2), &c).is_none());
        assert_eq!(p.route(peer, 1000), Route::Send(home));
        assert_eq!(c.snapshot().peer_address_kept, 2);
        // Again after the retry interval, with the same cookie.
        let ch3 = p.observe(peer, spoof, 40, t(30), &c).unwrap().to_vec();
        assert_eq!(cookie_of(&ch2), cookie_of(&ch3));
        // The new address answers: the peer moves.
        assert!(p.validate(peer, spoof, cookie_of(&ch2), &c));
        assert_eq!(p.route(peer, 1000), Route::Send(spoof));
    }

    /// A keyed group learns from verified datagrams and limits nothing.
    #[test]
    fn keyed_groups_learn_verified_addresses_and_limit_nothing() {
        let mut p = Peers::new(true, GID, ME);
        let peer = NodeId(9);
        assert_eq!(p.route(peer, 10), Route::Unknown);
        p.learn_verified(peer, addr(4000));
        assert_eq!(p.route(peer, 60_000), Route::Send(addr(4000)));
        p.learn_verified(peer, addr(4001));
        assert_eq!(p.route(peer, 60_000), Route::Send(addr(4001)));
    }

    /// Held unicasts are bounded per address and expire.
    #[test]
    fn the_hold_is_bounded_and_expires() {
        let c = AtomicNodeCounters::default();
        let mut p = Peers::new(false, GID, ME);
        let (peer, a) = (NodeId(9), addr(4000));
        let _ = p.observe(peer, a, 20, t(0), &c);
        let big = vec![0u8; 60_000];
        assert!(p.hold(a, &big, t(0), &c));
        assert!(!p.hold(a, &big, t(0), &c), "over the per-address bound");
        assert!(p.hold(a, &[1; 100], t(0), &c));
        // After the hold time, a new hold first drops the old ones.
        assert!(p.hold(a, &big, t(600), &c));
        assert_eq!(c.snapshot().amplification_dropped, 2);
        let mut out = Vec::new();
        p.release(a, t(601), &c, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(p.held_bytes, 0);
    }

    /// A challenge is never sent beyond the budget: an address that sent nothing more gets no
    /// more challenges, however many retry intervals pass.
    #[test]
    fn challenges_stay_within_the_budget() {
        let c = AtomicNodeCounters::default();
        let mut p = Peers::new(false, GID, ME);
        let a = addr(4000);
        // 10 bytes in: 30 of budget, a challenge is 28.
        assert!(p.observe(NodeId(9), a, 10, t(0), &c).is_some());
        // 10 more: 60 of budget, 28 used; a second challenge (56) fits, a third (84) not
        // without more bytes in.
        assert!(p.observe(NodeId(9), a, 10, t(50), &c).is_some());
        assert!(p.observe(NodeId(9), a, 1, t(100), &c).is_none());
        assert_eq!(c.snapshot().path_challenges, 2);
    }
}
