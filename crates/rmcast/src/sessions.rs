//! Sessions bound to a challenge: a keyed group hands an engine nothing of a sender session
//! until that session proved it is live now.
//!
//! A replay window refuses a capture only at a member that heard the session (see
//! [`rmcast_proto::secure`]): a member started after the capture was made, or one that retired
//! the session, would take the capture's datagrams as new. So a datagram that verified but
//! whose session this group has not confirmed ([`GroupCipher::open_live`]) is **held**, and the
//! runtime sends a **session challenge** to the address it came from: the session id
//! challenged and 16 bytes nobody else can predict, sealed under the group key (the
//! challenger's own session). The runtime of the node whose current session it names sends
//! back a **session answer** with the same bytes, sealed under that session's key, to the
//! challenger's address. An answer that opens under the session challenged and carries the
//! bytes sent confirms the session ([`GroupCipher::confirm`]): its held datagrams go to the
//! engine in the order they came, and the address the answer came from is the peer's. The
//! 16 bytes are an HMAC-SHA-256, under a secret each group draws from the operating system's
//! generator when it opens, of the session and the current [`CHALLENGE_EPOCH`]
//! ([`ChallengeKey`]), so an answer is checked without remembering the challenge (as
//! WireGuard's cookies and QUIC's retry tokens are): a flood of captures from many sessions
//! that pushes a live session's challenge out of the bounded state below can drop its held
//! datagrams (the engine repairs them), never its confirmation. An answer of an older epoch
//! than the last one is refused. A
//! capture of a session that is gone gets no answer: its datagrams are dropped (counted) after
//! [`HOLD_TIME`]. A live sender answers within one round trip, so only its first datagrams wait.
//!
//! Why this binds liveness, as WireGuard's handshake and QUIC's path validation do: the
//! receiver contributes the freshness (QUIC's PATH_CHALLENGE data; in WireGuard the responder's
//! ephemeral key, without which no transport key exists), and only a holder of the session key
//! can answer under it (QUIC: the 1-RTT keys; WireGuard: the handshake's keys, confirmed by the
//! initiator's first transport message before the responder sends data). A captured answer is
//! of no use: it names a challenge that is never sent again. Unlike WireGuard, the session key
//! is derived from the group key and the session id, so any key holder could answer for any
//! session: the challenge keeps outsiders' captures out, not key holders (as everywhere in a
//! keyed group, see docs/SECURITY.md). WireGuard's cookie reply (a MAC of the source address
//! under a rotating secret) proves an address under load, not liveness; its role here is the
//! unkeyed path challenge's ([`crate::peers`]), which stays as it is.
//!
//! Both packets are formation datagrams of types [`SESSION_CHALLENGE`] and [`SESSION_ANSWER`]
//! (the unkeyed path packets are 0x10 and 0x11), sealed like every datagram of the group, and
//! never reach an engine: `header (formation, type) | session id (12) | challenge (16)`.
//! Challenges and answers themselves are never held, whoever sent them: two members that have
//! not heard each other challenge each other at once.
//!
//! **Bounds**: at most [`HOLD_PER_ADDR`] datagrams and [`HOLD_BYTES_PER_ADDR`] bytes held per
//! source address, [`HOLD_DATAGRAMS`] and [`HOLD_BYTES`] per group, the oldest dropped first;
//! at most [`MAX_PENDING`] sessions waiting for their answer, the oldest forgotten. A session
//! is challenged at most once per [`CHALLENGE_RETRY`] at each of at most [`CHALLENGE_ADDRS`]
//! addresses, and only when one of its datagrams arrives, so challenges never outnumber the
//! datagrams that caused them (no amplification: a challenge, 88 bytes sealed, is about the
//! size of the smallest sealed datagram).

use crate::shared::AtomicNodeCounters;
use rmcast_proto::secure::{ChallengeKey, SessionId, SessionName, CHALLENGE_LEN};
use rmcast_proto::wire::{EngineKind, Header, HEADER_LEN, SESSION_ID_LEN};
use rmcast_proto::{NodeId, Time};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

/// Packet type of a session challenge (engine byte [`EngineKind::Formation`]).
pub(crate) const SESSION_CHALLENGE: u8 = 0x12;
/// Packet type of a session answer.
pub(crate) const SESSION_ANSWER: u8 = 0x13;
/// A challenge is made for an epoch of this length; an answer to one of this epoch or the one
/// before is taken (so an answer is taken for at least this long, at most twice this).
pub(crate) const CHALLENGE_EPOCH: Duration = Duration::from_secs(2);
/// Length of a plain session challenge or answer (88 sealed).
pub(crate) const PROBE_LEN: usize = HEADER_LEN + SESSION_ID_LEN + CHALLENGE_LEN;
/// How long a datagram of an unconfirmed session is held at most.
pub(crate) const HOLD_TIME: Duration = Duration::from_millis(1000);
/// How long a session challenged is remembered with nothing held (for the retry bookkeeping; a
/// late answer, after the held datagrams expired, still confirms the session).
const PENDING_TIME: Duration = Duration::from_millis(3000);
/// A session's challenge is sent again to an address at most this often (a lost challenge or
/// answer), on the next datagram of the session from there.
pub(crate) const CHALLENGE_RETRY: Duration = Duration::from_millis(20);
/// Addresses a session is challenged at (its captures may come from anywhere; the live sender
/// is at one of them).
pub(crate) const CHALLENGE_ADDRS: usize = 4;
/// Datagrams held per source address at most.
pub(crate) const HOLD_PER_ADDR: usize = 64;
/// Bytes held per source address at most.
pub(crate) const HOLD_BYTES_PER_ADDR: usize = 256 * 1024;
/// Datagrams held per group at most.
pub(crate) const HOLD_DATAGRAMS: usize = 1024;
/// Bytes held per group at most.
pub(crate) const HOLD_BYTES: usize = 2 * 1024 * 1024;
/// Sessions waiting for their answer, per group at most.
pub(crate) const MAX_PENDING: usize = 256;

/// A session challenge or answer, as received (plain, after it verified).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    /// Prove that the session named is live: answer with this challenge under its key.
    Challenge(SessionId, [u8; CHALLENGE_LEN]),
    /// The session named answers this challenge.
    Answer(SessionId, [u8; CHALLENGE_LEN]),
}

/// The probe the plain datagram `data` (header decoded as `header`) is, if it is one.
pub(crate) fn parse(header: &Header, data: &[u8]) -> Option<Probe> {
    if header.engine != EngineKind::Formation || data.len() != PROBE_LEN {
        return None;
    }
    let session: SessionId = data[HEADER_LEN..HEADER_LEN + SESSION_ID_LEN]
        .try_into()
        .ok()?;
    let challenge: [u8; CHALLENGE_LEN] = data[HEADER_LEN + SESSION_ID_LEN..].try_into().ok()?;
    match header.ptype {
        SESSION_CHALLENGE => Some(Probe::Challenge(session, challenge)),
        SESSION_ANSWER => Some(Probe::Answer(session, challenge)),
        _ => None,
    }
}

/// Write the plain probe `ptype` of `me` in group `group` into `buf`.
pub(crate) fn encode(
    group: u32,
    me: NodeId,
    ptype: u8,
    session: &SessionId,
    challenge: &[u8; CHALLENGE_LEN],
    buf: &mut Vec<u8>,
) {
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
    buf.extend_from_slice(session);
    buf.extend_from_slice(challenge);
}

/// A session waiting for its answer.
struct Pending {
    /// When it was first challenged.
    since: Time,
    /// Where it was challenged, and when last.
    tried: Vec<(SocketAddr, Time)>,
    /// Datagrams of it held.
    held: usize,
}

/// A datagram of an unconfirmed session, plain, as it came.
struct Held {
    session: SessionName,
    sender: NodeId,
    from: SocketAddr,
    ttl: Option<u8>,
    at: Time,
    data: Vec<u8>,
}

/// A held datagram handed back once its session answered.
pub(crate) struct Released {
    pub sender: NodeId,
    pub ttl: Option<u8>,
    pub data: Vec<u8>,
}

/// The unconfirmed sessions of one keyed group and what they sent (see the module docs).
pub(crate) struct Sessions {
    group: u32,
    me: NodeId,
    pending: HashMap<SessionName, Pending>,
    /// Held datagrams, oldest first.
    held: VecDeque<Held>,
    held_bytes: usize,
    /// Datagrams and bytes held per source address.
    per_addr: HashMap<SocketAddr, (usize, usize)>,
    /// What the challenges are made with (a random secret of this group's).
    key: ChallengeKey,
    /// When pending sessions were last swept for expiry.
    swept: Time,
    /// A probe on its way out (plain; the caller seals it).
    buf: Vec<u8>,
}

impl Sessions {
    /// The sessions of group `group` at node `me`.
    pub(crate) fn new(group: u32, me: NodeId) -> Sessions {
        let mut secret = [0u8; 32];
        crate::random::fill_random(&mut secret);
        Sessions {
            group,
            me,
            pending: HashMap::new(),
            held: VecDeque::new(),
            held_bytes: 0,
            per_addr: HashMap::new(),
            key: ChallengeKey::new(secret),
            swept: Time(0),
            buf: Vec::with_capacity(PROBE_LEN),
        }
    }

    /// The epoch of `now`.
    fn epoch(now: Time) -> u64 {
        now.0 / CHALLENGE_EPOCH.as_nanos() as u64
    }

    /// Datagrams held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.len()
    }

    /// Hold `data`, a plain datagram of `sender`'s unconfirmed session `session` that came from
    /// `from`, and return the challenge (plain, to be sealed) to send to `from` if one is due.
    /// Room is made by dropping the oldest held datagrams (counted).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn hold(
        &mut self,
        session: SessionName,
        sender: NodeId,
        from: SocketAddr,
        ttl: Option<u8>,
        data: &[u8],
        now: Time,
        counters: &AtomicNodeCounters,
    ) -> Option<&[u8]> {
        self.expire(now, counters);
        if !self.pending.contains_key(&session) {
            if self.pending.len() >= MAX_PENDING {
                self.forget_oldest_pending(counters);
            }
            self.pending.insert(
                session,
                Pending {
                    since: now,
                    tried: Vec::with_capacity(1),
                    held: 0,
                },
            );
        }
        // Room for it, oldest first: from its address, then from the whole group.
        let len = data.len();
        let fits = |s: &Self| {
            let (n, b) = s.per_addr.get(&from).copied().unwrap_or((0, 0));
            n < HOLD_PER_ADDR && b + len <= HOLD_BYTES_PER_ADDR
        };
        while !fits(self) {
            let Some(i) = self.held.iter().position(|h| h.from == from) else {
                break;
            };
            self.drop_at(i, counters);
        }
        while self.held.len() >= HOLD_DATAGRAMS || self.held_bytes + len > HOLD_BYTES {
            if self.held.is_empty() {
                break;
            }
            self.drop_at(0, counters);
        }
        if len <= HOLD_BYTES_PER_ADDR {
            let a = self.per_addr.entry(from).or_insert((0, 0));
            a.0 += 1;
            a.1 += len;
            self.held_bytes += len;
            self.held.push_back(Held {
                session,
                sender,
                from,
                ttl,
                at: now,
                data: data.to_vec(),
            });
            if let Some(p) = self.pending.get_mut(&session) {
                p.held += 1;
            }
            AtomicNodeCounters::add(&counters.session_held, 1);
        } else {
            AtomicNodeCounters::add(&counters.session_dropped, 1);
        }
        self.challenge(session, from, now, counters)
    }

    /// The challenge for `session` to send to `from`, if one is due there.
    fn challenge(
        &mut self,
        session: SessionName,
        from: SocketAddr,
        now: Time,
        counters: &AtomicNodeCounters,
    ) -> Option<&[u8]> {
        let retry = CHALLENGE_RETRY.as_nanos() as u64;
        let p = self.pending.get_mut(&session)?;
        let due = |t: Time| now.0.saturating_sub(t.0) >= retry;
        match p.tried.iter().position(|(a, _)| *a == from) {
            Some(i) if !due(p.tried[i].1) => return None,
            Some(i) => p.tried[i].1 = now,
            None if p.tried.len() < CHALLENGE_ADDRS => p.tried.push((from, now)),
            None => {
                // Take the place of the address challenged longest ago, if that was a while
                // ago: a flood from many addresses gets one challenge per retry interval.
                let (i, t) = p
                    .tried
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, (_, t))| t.0)
                    .map(|(i, (_, t))| (i, *t))?;
                if !due(t) {
                    return None;
                }
                p.tried[i] = (from, now);
            }
        }
        let challenge = self.key.challenge(&session, Self::epoch(now));
        AtomicNodeCounters::add(&counters.session_challenges, 1);
        encode(
            self.group,
            self.me,
            SESSION_CHALLENGE,
            &session.1,
            &challenge,
            &mut self.buf,
        );
        Some(&self.buf)
    }

    /// The answer (plain, to be sealed) to a challenge naming `session` with `challenge`, if
    /// `session` is this node's current session `mine` (a challenge of a session this node no
    /// longer has, or never had, is not answered).
    pub(crate) fn answer(
        &mut self,
        mine: &SessionId,
        session: &SessionId,
        challenge: &[u8; CHALLENGE_LEN],
    ) -> Option<&[u8]> {
        if session != mine {
            return None;
        }
        encode(
            self.group,
            self.me,
            SESSION_ANSWER,
            session,
            challenge,
            &mut self.buf,
        );
        Some(&self.buf)
    }

    /// An answer naming `named` with `challenge` came, sealed under session `session`. If it
    /// answers a challenge of this epoch or the last made for that session, the session is
    /// confirmed (the caller tells its cipher), and its held datagrams are moved to `out`,
    /// oldest first. Returns whether it did.
    pub(crate) fn answered(
        &mut self,
        session: SessionName,
        named: &SessionId,
        challenge: &[u8; CHALLENGE_LEN],
        now: Time,
        counters: &AtomicNodeCounters,
        out: &mut Vec<Released>,
    ) -> bool {
        self.expire(now, counters);
        let epoch = Self::epoch(now);
        let ok = *named == session.1
            && (self.key.challenge(&session, epoch) == *challenge
                || self.key.challenge(&session, epoch.saturating_sub(1)) == *challenge);
        if !ok {
            return false;
        }
        AtomicNodeCounters::add(&counters.sessions_confirmed, 1);
        let held = self.pending.remove(&session).map_or(0, |p| p.held);
        if held > 0 {
            let mut i = 0;
            while i < self.held.len() {
                if self.held[i].session == session {
                    if let Some(h) = self.remove_at(i) {
                        AtomicNodeCounters::add(&counters.session_released, 1);
                        out.push(Released {
                            sender: h.sender,
                            ttl: h.ttl,
                            data: h.data,
                        });
                    }
                } else {
                    i += 1;
                }
            }
        }
        true
    }

    /// When the oldest held datagram is due to be dropped, if any is held.
    pub(crate) fn deadline(&self) -> Option<Time> {
        let h = self.held.front()?;
        Some(Time(h.at.0.saturating_add(HOLD_TIME.as_nanos() as u64)))
    }

    /// Drop held datagrams older than [`HOLD_TIME`] (counted: their sessions did not answer)
    /// and forget challenges older than [`PENDING_TIME`] with nothing held.
    pub(crate) fn expire(&mut self, now: Time, counters: &AtomicNodeCounters) {
        let limit = HOLD_TIME.as_nanos() as u64;
        while self
            .held
            .front()
            .is_some_and(|h| now.0.saturating_sub(h.at.0) >= limit)
        {
            self.drop_at(0, counters);
        }
        let pending = PENDING_TIME.as_nanos() as u64;
        if !self.pending.is_empty() && now.0.saturating_sub(self.swept.0) >= limit / 4 {
            self.swept = now;
            self.pending
                .retain(|_, p| p.held > 0 || now.0.saturating_sub(p.since.0) < pending);
        }
    }

    /// Forget the session challenged longest ago, and drop what it holds.
    fn forget_oldest_pending(&mut self, counters: &AtomicNodeCounters) {
        let Some(oldest) = self
            .pending
            .iter()
            .min_by_key(|(_, p)| p.since.0)
            .map(|(s, _)| *s)
        else {
            return;
        };
        let mut i = 0;
        while i < self.held.len() {
            if self.held[i].session == oldest {
                self.drop_at(i, counters);
            } else {
                i += 1;
            }
        }
        self.pending.remove(&oldest);
    }

    /// Drop held datagram `i` (counted).
    fn drop_at(&mut self, i: usize, counters: &AtomicNodeCounters) {
        if self.remove_at(i).is_some() {
            AtomicNodeCounters::add(&counters.session_dropped, 1);
        }
    }

    fn remove_at(&mut self, i: usize) -> Option<Held> {
        let h = self.held.remove(i)?;
        self.held_bytes -= h.data.len();
        if let Some(a) = self.per_addr.get_mut(&h.from) {
            a.0 -= 1;
            a.1 -= h.data.len();
            if a.0 == 0 {
                self.per_addr.remove(&h.from);
            }
        }
        if let Some(p) = self.pending.get_mut(&h.session) {
            p.held -= 1;
        }
        Some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: NodeId = NodeId(1);
    const GID: u32 = 77;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn t(ms: u64) -> Time {
        Time(ms * 1_000_000)
    }

    fn name(b: u8) -> SessionName {
        (9, [b; SESSION_ID_LEN])
    }

    fn probe(d: &[u8]) -> Probe {
        let p = rmcast_proto::wire::decode(d).expect("decodes");
        parse(&p.header, d).expect("a probe")
    }

    fn challenge_of(d: &[u8]) -> [u8; CHALLENGE_LEN] {
        match probe(d) {
            Probe::Challenge(_, c) => c,
            other => panic!("not a challenge: {other:?}"),
        }
    }

    #[test]
    fn probes_round_trip_and_other_formation_packets_are_not_probes() {
        let mut buf = Vec::new();
        encode(GID, ME, SESSION_ANSWER, &[3; 12], &[4; 16], &mut buf);
        assert_eq!(buf.len(), PROBE_LEN);
        assert_eq!(probe(&buf), Probe::Answer([3; 12], [4; 16]));
        // The unkeyed path packets are not probes, nor is a truncated probe.
        let mut path = Vec::new();
        crate::peers::encode_path(GID, ME, crate::peers::PATH_CHALLENGE, 5, &mut path);
        let p = rmcast_proto::wire::decode(&path).unwrap();
        assert_eq!(parse(&p.header, &path), None);
        let p = rmcast_proto::wire::decode(&buf[..PROBE_LEN - 1]).unwrap();
        assert_eq!(parse(&p.header, &buf[..PROBE_LEN - 1]), None);
    }

    /// Datagrams of an unconfirmed session are held; the right answer releases them in order,
    /// a wrong one (another challenge, another session) releases nothing.
    #[test]
    fn held_until_the_session_answers_then_released_in_order() {
        let c = AtomicNodeCounters::default();
        let mut s = Sessions::new(GID, ME);
        let (a, from) = (name(1), addr(4000));
        let ch = s
            .hold(a, NodeId(7), from, None, b"one", t(0), &c)
            .expect("a challenge")
            .to_vec();
        assert_eq!(probe(&ch), Probe::Challenge(a.1, challenge_of(&ch)));
        // Not again within the retry interval.
        assert!(s.hold(a, NodeId(7), from, None, b"two", t(1), &c).is_none());
        let mut out = Vec::new();
        let right = challenge_of(&ch);
        let mut wrong = right;
        wrong[0] ^= 1;
        assert!(!s.answered(a, &a.1, &wrong, t(2), &c, &mut out));
        assert!(!s.answered(name(2), &name(2).1, &right, t(2), &c, &mut out));
        assert!(!s.answered(a, &name(2).1, &right, t(2), &c, &mut out));
        assert!(out.is_empty());
        assert!(s.answered(a, &a.1, &right, t(3), &c, &mut out));
        let got: Vec<&[u8]> = out.iter().map(|r| &r.data[..]).collect();
        assert_eq!(got, vec![&b"one"[..], &b"two"[..]]);
        assert_eq!(s.held(), 0);
        let k = c.snapshot();
        assert_eq!(
            (k.session_held, k.session_released, k.session_dropped),
            (2, 2, 0)
        );
        assert_eq!((k.session_challenges, k.sessions_confirmed), (1, 1));
        // A challenge is taken for this epoch and the last, not after.
        out.clear();
        let epoch = CHALLENGE_EPOCH.as_millis() as u64;
        assert!(s.answered(a, &a.1, &right, t(2 * epoch - 1), &c, &mut out));
        assert!(!s.answered(a, &a.1, &right, t(2 * epoch), &c, &mut out));
        assert!(out.is_empty());
    }

    /// A session whose pending state was pushed out by a flood of other sessions is still
    /// confirmed by its answer (its held datagrams were dropped, counted).
    #[test]
    fn an_answer_confirms_even_once_its_challenge_was_forgotten() {
        let c = AtomicNodeCounters::default();
        let mut s = Sessions::new(GID, ME);
        let a = name(1);
        let ch = s
            .hold(a, NodeId(7), addr(4000), None, b"x", t(0), &c)
            .map(challenge_of)
            .unwrap();
        for i in 0..MAX_PENDING as u16 {
            let mut n = name(2);
            n.1[..2].copy_from_slice(&i.to_be_bytes());
            let _ = s.hold(n, NodeId(9), addr(6000), None, b"z", t(1), &c);
        }
        assert!(!s.pending.contains_key(&a));
        let mut out = Vec::new();
        assert!(s.answered(a, &a.1, &ch, t(2), &c, &mut out));
        assert!(out.is_empty());
        assert!(c.snapshot().session_dropped >= 1);
    }

    /// Unanswered, the held datagrams are dropped after the hold time (counted).
    #[test]
    fn unanswered_datagrams_are_dropped_after_the_hold_time() {
        let c = AtomicNodeCounters::default();
        let mut s = Sessions::new(GID, ME);
        for i in 0..5u64 {
            let _ = s.hold(name(1), NodeId(7), addr(4000), None, b"x", t(i), &c);
        }
        assert_eq!(s.deadline(), Some(t(1000)));
        s.expire(t(900), &c);
        assert_eq!(s.held(), 5);
        s.expire(t(1003), &c);
        assert_eq!(s.held(), 1);
        s.expire(t(1004), &c);
        assert_eq!(s.held(), 0);
        assert_eq!(c.snapshot().session_dropped, 5);
        // The challenge is forgotten later still.
        s.expire(t(4000), &c);
        assert!(s.pending.is_empty());
    }

    /// A lost challenge is sent again after the retry interval, with the same bytes; another
    /// address gets its own, up to the bound of addresses per session.
    #[test]
    fn challenges_are_retried_and_sent_to_each_address() {
        let c = AtomicNodeCounters::default();
        let mut s = Sessions::new(GID, ME);
        let a = name(1);
        let first = s
            .hold(a, NodeId(7), addr(4000), None, b"x", t(0), &c)
            .map(challenge_of)
            .unwrap();
        let again = s
            .hold(a, NodeId(7), addr(4000), None, b"x", t(25), &c)
            .map(challenge_of)
            .unwrap();
        assert_eq!(first, again);
        for port in 4001..4004 {
            assert!(s
                .hold(a, NodeId(7), addr(port), None, b"x", t(26), &c)
                .is_some());
        }
        // Four addresses challenged within the interval: a fifth waits.
        assert!(s
            .hold(a, NodeId(7), addr(4010), None, b"x", t(27), &c)
            .is_none());
        assert!(s
            .hold(a, NodeId(7), addr(4010), None, b"x", t(50), &c)
            .is_some());
        assert_eq!(c.snapshot().session_challenges, 6);
    }

    /// The hold is bounded per address and per group, the oldest dropped first; pending
    /// sessions are bounded too.
    #[test]
    fn the_hold_is_bounded() {
        let c = AtomicNodeCounters::default();
        let mut s = Sessions::new(GID, ME);
        for i in 0..HOLD_PER_ADDR + 10 {
            let d = (i as u32).to_be_bytes();
            let _ = s.hold(name(1), NodeId(7), addr(4000), None, &d, t(0), &c);
        }
        assert_eq!(s.held(), HOLD_PER_ADDR);
        assert_eq!(s.held[0].data, 10u32.to_be_bytes());
        assert_eq!(c.snapshot().session_dropped, 10);
        let big = vec![0u8; 100_000];
        for _ in 0..3 {
            let _ = s.hold(name(2), NodeId(8), addr(4001), None, &big, t(0), &c);
        }
        assert!(s.per_addr[&addr(4001)].1 <= HOLD_BYTES_PER_ADDR);
        // Many addresses: the group's bound.
        for port in 0..HOLD_DATAGRAMS as u16 {
            let _ = s.hold(name(3), NodeId(9), addr(5000 + port), None, b"y", t(0), &c);
        }
        assert_eq!(s.held(), HOLD_DATAGRAMS);
        assert!(s.held_bytes <= HOLD_BYTES);
        for i in 0..MAX_PENDING as u16 + 5 {
            let mut n = name(4);
            n.1[..2].copy_from_slice(&i.to_be_bytes());
            let _ = s.hold(n, NodeId(9), addr(6000), None, b"z", t(1), &c);
        }
        assert_eq!(s.pending.len(), MAX_PENDING);
        let counted: usize = s.per_addr.values().map(|a| a.0).sum();
        assert_eq!(counted, s.held());
        let bytes: usize = s.held.iter().map(|h| h.data.len()).sum();
        assert_eq!(bytes, s.held_bytes);
    }

    /// Only a challenge naming this node's current session is answered.
    #[test]
    fn only_the_current_session_answers() {
        let mut s = Sessions::new(GID, ME);
        assert!(s.answer(&[1; 12], &[2; 12], &[3; 16]).is_none());
        let d = s.answer(&[1; 12], &[1; 12], &[3; 16]).unwrap().to_vec();
        assert_eq!(probe(&d), Probe::Answer([1; 12], [3; 16]));
    }
}
