//! RMP packet bodies after the common header: Data, ACK (which carries the token and either a
//! run of ordered data or a New List), NACK, List Change Request and Confirm.

use crate::common::{decode_view, encode_view};
use crate::engine::{NodeId, Qos};
use crate::wire::{Reader, WireError, WriteExt};

/// A data packet: a run of one origin's messages with consecutive sequence numbers, each with
/// its QoS (for unreliable ones the numbers count the origin's unreliable messages). RMP sends
/// packets as large as half its window (Fig. 4.2), so several messages share one.
pub const DATA: u8 = 1;
/// An ACK: orders data (or a membership change) and passes the token.
pub const ACK: u8 = 2;
/// A retransmission request for ACKs and ordered slots.
pub const NACK: u8 = 3;
/// A List Change Request: join or leave.
pub const LCR: u8 = 4;
/// The token site confirms it accepted the token (when it goes quiescent).
pub const CONFIRM: u8 = 5;

/// A removed member delivered the New List that removed it: it needs nothing more.
pub const GOODBYE: u8 = 6;
/// The token site lacks a member's data packet that blocks its later ones: `from` (u64), the
/// first sequence number it lacks, sent to that member.
pub const DATA_NACK: u8 = 7;

/// A fragment of a message larger than a datagram, `(origin, sseq, QoS, index, count,
/// payload)`: each fragment is a message of its own in its origin's stream (numbered, ordered by
/// the token site and repaired like any data packet: section 4.2 orders packets, not
/// messages), and the message is delivered whole under the number of its last fragment. A
/// message that fits one datagram never goes this way: its wire bytes are [`DATA`]'s.
pub const DATA_FRAG: u8 = 22;
/// The token site refuses a join: the ring holds as many members as it admits. Body: the limit
/// (u32).
pub const JOIN_REFUSED: u8 = 23;

/// The most members a ring admits: what one sync point names (12 bytes a member) and one New
/// List carries (16 bytes a member, and the locks and clients), each cut into parts when longer
/// than a datagram ([`crate::common::parts`]), within the largest whole datagram.
pub const MAX_MEMBERS: usize = 2048;

/// The most joiners one New List admits (section 4.3's List Change Requests, admitted
/// together: one New List of a thousand members costs every member its 16 KB, so a ring formed
/// one joiner at a time cost O(n^3) bytes).
pub const MAX_JOINED: usize = 255;

/// The limit in a JOIN_REFUSED body.
pub fn decode_join_refused(body: &[u8]) -> Result<u32, WireError> {
    let mut r = Reader::new(body);
    let limit = r.u32()?;
    r.finish()?;
    Ok(limit)
}

/// LCR kinds.
pub const LCR_JOIN: u8 = 1;
/// LCR kinds.
pub const LCR_LEAVE: u8 = 2;
/// LCR kinds: ask for a lock (section 4.3); body adds the lock number (u16).
pub const LCR_LOCK: u8 = 3;
/// LCR kinds: release a lock; body adds the lock number (u16).
pub const LCR_UNLOCK: u8 = 4;
/// A join's flag (the byte after its next sequence number): the joiner cannot receive
/// multicast (section 3.4).
pub const JOIN_UNICAST_ONLY: u8 = 1;
/// A join's flag: the joiner merges into the ring that has this member (its id follows the
/// flags, 4 bytes); other rings of the group's name leave the request alone.
pub const JOIN_TARGETED: u8 = 2;

/// Lock numbers run from 0 to `MAX_LOCKS - 1`; the first [`HANDLER_LOCKS`] are handler locks
/// (section 3.3): the holder of lock `h` answers the packets that name handler `h`.
pub const MAX_LOCKS: u16 = 64;
/// Handler locks: lock numbers below this.
pub const HANDLER_LOCKS: u8 = 6;
/// Non-members whose next sequence number a ring keeps at most (section 4.5): the least
/// recently ordered one is flushed first and sets the first-packet flag again.
pub const MAX_CLIENTS: usize = 64;

// ---- multi-RPC for non-members (section 4.5) ----------------------------------------------

/// Non Member Data: a data packet from a process outside the ring (the same body as
/// [`DATA`]); each message's payload starts with [`NM_PREFIX`] bytes: the flags
/// ([`NM_WANT_ACK`], [`NM_REPEAT_REPLY`], [`NM_FIRST`]) and the handler number
/// ([`NO_HANDLER`] for none).
pub const NM_DATA: u8 = 18;
/// Non Member ACK, unicast by the token site that ordered a non-member's packet once it
/// delivered it (and again for each duplicate). Body: the packet's sequence number and the
/// view id (u64, u64), which the non-member caches.
pub const NM_ACK: u8 = 19;
/// A handler's reply to a packet. Body: the packet's origin (u32), its sequence number
/// (u64), then the reply.
pub const NM_REPLY: u8 = 20;
/// ForwardRequest (Amoeba's, section 4): a member hands a request it was to answer to another
/// member, which answers the sender instead. Body: the request's origin (u32), its sequence
/// number (u64), then the request.
pub const FORWARD: u8 = 21;
/// Bytes before a non-member message's payload.
pub const NM_PREFIX: usize = 2;
/// Non Member Data flag: the token site acknowledges delivery.
pub const NM_WANT_ACK: u8 = 1;
/// Non Member Data flag: a duplicate gets the handler's reply again.
pub const NM_REPEAT_REPLY: u8 = 2;
/// Non Member Data flag: the first packet of this sender (or the first since its entry may
/// have been flushed): members start its numbering here.
pub const NM_FIRST: u8 = 4;
/// Handler number meaning "no handler".
pub const NO_HANDLER: u8 = 0xff;

/// A lock request or release ordered with a New List (section 4.3): the ring is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockOp {
    /// The member that asked.
    pub by: NodeId,
    /// The lock.
    pub lock: u16,
    /// Acquire (true) or release.
    pub acquire: bool,
}

/// Most messages one ACK orders (it names them as runs per origin, so its size does not grow
/// with this).
pub const MAX_ENTRIES: usize = 1024;
/// Most runs one ACK holds (one per ring member and turn at most).
pub const MAX_RUNS: usize = 64;
/// Most ordered slots one NACK names.
pub const MAX_NACK_SLOTS: usize = 64;

/// The QoS on the wire: a level byte and the `K` of K-resilience (0 for the others).
pub fn qos_bytes(q: Qos) -> [u8; 2] {
    match q {
        Qos::Unreliable => [0, 0],
        Qos::Reliable => [1, 0],
        Qos::SourceOrdered => [2, 0],
        Qos::TotallyOrdered => [3, 0],
        Qos::KResilient(k) => [4, k],
        Qos::MajorityResilient => [5, 0],
        Qos::TotallyResilient => [6, 0],
    }
}

/// The QoS the two bytes of [`qos_bytes`] name, if any.
pub fn qos_from(b: [u8; 2]) -> Option<Qos> {
    Some(match b {
        [0, 0] => Qos::Unreliable,
        [1, 0] => Qos::Reliable,
        [2, 0] => Qos::SourceOrdered,
        [3, 0] => Qos::TotallyOrdered,
        [4, k] => Qos::KResilient(k),
        [5, 0] => Qos::MajorityResilient,
        [6, 0] => Qos::TotallyResilient,
        _ => return None,
    })
}

/// Unreliable messages are numbered apart from the ordered stream (they never enter it), with
/// this bit set in the message number the application sees.
pub const UNRELIABLE_BIT: u64 = 1 << 63;

/// A New List: the ring after members joined or one left, and where each member's numbering
/// stands, so that a joiner can take the token at once (section 4.3). Joiners admitted together
/// stand right after the token site that made it, in the order of `joined`; the first is the
/// next token site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewList {
    /// The new view id.
    pub view_id: u64,
    /// Members in ring order.
    pub members: Vec<NodeId>,
    /// The members that joined (at most [`MAX_JOINED`]), in their order in `members`.
    pub joined: Vec<NodeId>,
    /// The member that left, if any.
    pub left: Option<NodeId>,
    /// For each member (same order), the next sequence number of its to be ordered.
    pub next_sseq: Vec<u64>,
    /// The lock request or release this New List orders (the ring is then unchanged).
    pub lock_op: Option<LockOp>,
    /// The locks held after it: (lock, holder), by lock number.
    pub locks: Vec<(u16, NodeId)>,
    /// The non-members known, with the next sequence number of each to be ordered (section
    /// 4.5: kept in the view with a non-member flag, so that a joiner has them).
    pub clients: Vec<(NodeId, u64)>,
    /// Members that cannot receive multicast (section 3.4: the multicast-capable flag, off):
    /// the others send them unicast copies of what they multicast.
    pub unicast_only: Vec<NodeId>,
}

/// What an ACK orders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AckBody {
    /// Data packets `(origin, sseq)` given consecutive timestamps from `first_ts` (empty: a
    /// NULL ACK that only passes the token).
    Entries(Vec<(NodeId, u64)>),
    /// A membership change, in one slot at `first_ts`.
    NewList(NewList),
}

/// A decoded ACK.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    /// ACK number: consecutive, so that a missing one is noticed.
    pub num: u64,
    /// The view (membership version) it was made in: ACK numbers go on across a reformation,
    /// so that a member the ring went on without tells the new view's ACKs from its own.
    pub view: u64,
    /// Timestamp of the first slot it orders.
    pub first_ts: u64,
    /// The next token site.
    pub next_site: NodeId,
    /// Consecutive NULL ACKs up to this one (0 when it orders something).
    pub idle: u32,
    /// The ring it was made in: [`ring_digest`] of its members in ring order, before this
    /// ACK. Two rings of one name count views and ACKs alike, and two that admitted the same
    /// joiners together put them in the same order after their sites: a joiner's ACK in one
    /// matched the other's view, number and token chain (formation sweep ring seed 8064 with
    /// joins batched). A member takes only the ACKs of its own ring.
    pub ring: u32,
    /// The ring's lineage ([`lineage`]): which ring, whatever its view numbers. Two rings of
    /// one name number their views alike, so a view id does not tell them apart (formation
    /// sweep ring seed 22249: each admitted host 5 into a view 6); the lineage does, as
    /// Totem's ring id names its representative and JGroups' view id its coordinator.
    pub lineage: u64,
    /// What it orders.
    pub body: AckBody,
}

/// A ring's identity as ACKs carry it: a hash (FNV-1a, folded to 32 bits) of its members in
/// ring order. Members of one ring at one view hold the same list, so the same digest.
pub fn ring_digest(members: &[NodeId]) -> u32 {
    let bytes: Vec<u8> = members.iter().flat_map(|m| m.0.to_be_bytes()).collect();
    let h = crate::common::group::fnv1a64(&bytes);
    (h ^ (h >> 32)) as u32
}

/// The lineage of a ring that `creator` creates with first view `first_view`: the creator's id
/// in the high half, and 32 bits drawn from `seed` and the view in the low half. A ring keeps
/// it through every New List and reformation, and a joiner takes it from the New List that
/// admits it; a ring created anew (a member that starts alone again) gets a new one, since
/// its first view is above every view its creator saw. Two rings of one name never share a
/// lineage, though they may share view ids, member lists and ACK numbers.
pub fn lineage(creator: NodeId, first_view: u64, seed: u64) -> u64 {
    let mut x = seed ^ first_view.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // SplitMix64's finaliser: nearby seeds and views give unrelated bits.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    (u64::from(creator.0) << 32) | (x & 0xffff_ffff)
}

impl Ack {
    /// Slots it orders.
    pub fn slots(&self) -> u64 {
        match &self.body {
            AckBody::Entries(e) => e.len() as u64,
            AckBody::NewList(_) => 1,
        }
    }

    /// Append the body to `b`.
    pub fn encode(&self, b: &mut Vec<u8>) {
        b.put_u64(self.num);
        b.put_u64(self.view);
        b.put_u64(self.first_ts);
        b.put_u32(self.next_site.0);
        b.put_u32(self.idle);
        b.put_u32(self.ring);
        b.put_u64(self.lineage);
        match &self.body {
            AckBody::Entries(e) => {
                // Runs of one origin's consecutive numbers: (origin, first, count).
                b.push(0);
                let mut runs: Vec<(NodeId, u64, u32)> = Vec::new();
                for &(o, q) in e {
                    match runs.last_mut() {
                        Some(r) if r.0 == o && r.1 + u64::from(r.2) == q => r.2 += 1,
                        _ => runs.push((o, q, 1)),
                    }
                }
                b.put_u16(runs.len() as u16);
                for (o, q, n) in runs {
                    b.put_u32(o.0);
                    b.put_u64(q);
                    b.put_u32(n);
                }
            }
            AckBody::NewList(l) => {
                b.push(1);
                let opt = |b: &mut Vec<u8>, v: Option<NodeId>| {
                    b.push(v.is_some() as u8);
                    b.put_u32(v.map_or(0, |n| n.0));
                };
                // The joiners' count, then each (one zero id for none: a single joiner is
                // encoded as before joiners were admitted together).
                debug_assert!(l.joined.len() <= MAX_JOINED);
                b.push(l.joined.len() as u8);
                if l.joined.is_empty() {
                    b.put_u32(0);
                }
                for j in &l.joined {
                    b.put_u32(j.0);
                }
                opt(b, l.left);
                match l.lock_op {
                    Some(op) => {
                        b.push(1);
                        b.put_u32(op.by.0);
                        b.put_u16(op.lock);
                        b.push(u8::from(op.acquire));
                    }
                    None => b.extend_from_slice(&[0; 8]),
                }
                b.put_u16(l.locks.len() as u16);
                for (k, h) in &l.locks {
                    b.put_u16(*k);
                    b.put_u32(h.0);
                }
                b.put_u16(l.clients.len() as u16);
                for (c, n) in &l.clients {
                    b.put_u32(c.0);
                    b.put_u64(*n);
                }
                b.put_u16(l.unicast_only.len() as u16);
                for m in &l.unicast_only {
                    b.put_u32(m.0);
                }
                for n in &l.next_sseq {
                    b.put_u64(*n);
                }
                encode_view(b, l.view_id, l.members[0], &l.members);
            }
        }
    }

    /// Decode a body; never panics, allocations bounded by the body's length.
    pub fn decode(body: &[u8]) -> Result<Ack, WireError> {
        let mut r = Reader::new(body);
        let (num, view, first_ts) = (r.u64()?, r.u64()?, r.u64()?);
        let next_site = NodeId(r.u32()?);
        let idle = r.u32()?;
        let ring = r.u32()?;
        let lineage = r.u64()?;
        let body = match r.u8()? {
            0 => {
                let n = r.u16()? as usize;
                if n > MAX_RUNS || r.remaining() != n * 16 {
                    return Err(WireError::BadValue("ack entries"));
                }
                let mut e = Vec::new();
                for _ in 0..n {
                    let (o, q, k) = (NodeId(r.u32()?), r.u64()?, r.u32()? as usize);
                    if k == 0 || e.len() + k > MAX_ENTRIES || q.checked_add(k as u64).is_none() {
                        return Err(WireError::BadValue("ack entries"));
                    }
                    e.extend((q..q + k as u64).map(|s| (o, s)));
                }
                AckBody::Entries(e)
            }
            1 => {
                let opt = |r: &mut Reader<'_>| -> Result<Option<NodeId>, WireError> {
                    let some = r.u8()?;
                    let v = NodeId(r.u32()?);
                    Ok((some == 1).then_some(v))
                };
                let joined = match r.u8()? {
                    0 => {
                        r.u32()?;
                        Vec::new()
                    }
                    k => (0..k)
                        .map(|_| r.u32().map(NodeId))
                        .collect::<Result<Vec<_>, _>>()?,
                };
                let left = opt(&mut r)?;
                let lock_op = match (r.u8()?, NodeId(r.u32()?), r.u16()?, r.u8()?) {
                    (0, ..) => None,
                    (1, by, lock, a @ (0 | 1)) if lock < MAX_LOCKS => Some(LockOp {
                        by,
                        lock,
                        acquire: a == 1,
                    }),
                    _ => return Err(WireError::BadValue("lock op")),
                };
                let n = r.u16()?;
                if n > MAX_LOCKS {
                    return Err(WireError::BadValue("locks"));
                }
                let mut locks = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let (k, h) = (r.u16()?, NodeId(r.u32()?));
                    if k >= MAX_LOCKS {
                        return Err(WireError::BadValue("locks"));
                    }
                    locks.push((k, h));
                }
                let n = r.u16()? as usize;
                if n > MAX_CLIENTS {
                    return Err(WireError::BadValue("clients"));
                }
                let mut clients = Vec::with_capacity(n);
                for _ in 0..n {
                    clients.push((NodeId(r.u32()?), r.u64()?));
                }
                let n = r.u16()? as usize;
                if n * 4 > r.remaining() {
                    return Err(WireError::BadValue("unicast members"));
                }
                let mut unicast_only = Vec::with_capacity(n);
                for _ in 0..n {
                    unicast_only.push(NodeId(r.u32()?));
                }
                // The sequence numbers come before the view; the view's own count says how
                // many: members * (8 + 4) + 14 bytes remain.
                let rest = r.rest();
                if rest.len() < 14 {
                    return Err(WireError::Truncated);
                }
                let n = (rest.len() - 14) / 12;
                if n == 0 || rest.len() != 14 + 12 * n {
                    return Err(WireError::BadValue("new list"));
                }
                let mut rr = Reader::new(&rest[..8 * n]);
                let mut next_sseq = Vec::with_capacity(n);
                for _ in 0..n {
                    next_sseq.push(rr.u64()?);
                }
                let (view_id, _, members) = decode_view(&rest[8 * n..])?;
                if members.len() != n {
                    return Err(WireError::BadValue("new list"));
                }
                AckBody::NewList(NewList {
                    view_id,
                    members,
                    joined,
                    left,
                    next_sseq,
                    lock_op,
                    locks,
                    clients,
                    unicast_only,
                })
            }
            _ => return Err(WireError::BadValue("ack kind")),
        };
        Ok(Ack {
            num,
            view,
            first_ts,
            next_site,
            idle,
            ring,
            lineage,
            body,
        })
    }
}

/// A NACK: ACK numbers `acks` (half open) and ordered slots whose data is missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nack {
    /// Missing ACK numbers.
    pub acks: std::ops::Range<u64>,
    /// Timestamps of slots whose data is missing.
    pub slots: Vec<u64>,
    /// Who answers a NACK multicast to the ring: only the owners (the sender of an ACK, the
    /// origin of a data packet), or, once they did not, every member that holds it. A NACK
    /// sent to one member is answered by it in full either way.
    pub everyone: bool,
}

impl Nack {
    /// Append the body to `b`.
    pub fn encode(&self, b: &mut Vec<u8>) {
        b.put_u64(self.acks.start);
        b.put_u64(self.acks.end);
        b.push(u8::from(self.everyone));
        b.put_u16(self.slots.len() as u16);
        for t in &self.slots {
            b.put_u64(*t);
        }
    }

    /// Decode a body.
    pub fn decode(body: &[u8]) -> Result<Nack, WireError> {
        let mut r = Reader::new(body);
        let (a, z) = (r.u64()?, r.u64()?);
        if z < a {
            return Err(WireError::BadValue("nack range"));
        }
        let everyone = match r.u8()? {
            0 => false,
            1 => true,
            _ => return Err(WireError::BadValue("nack scope")),
        };
        let n = r.u16()? as usize;
        if n > MAX_NACK_SLOTS || r.remaining() != n * 8 {
            return Err(WireError::BadValue("nack slots"));
        }
        let mut slots = Vec::with_capacity(n);
        for _ in 0..n {
            slots.push(r.u64()?);
        }
        Ok(Nack {
            acks: a..z,
            slots,
            everyone,
        })
    }
}

/// Write a data packet body holding `msgs`, numbered from `first`.
pub fn encode_data<'a>(
    b: &mut Vec<u8>,
    origin: NodeId,
    first: u64,
    msgs: impl ExactSizeIterator<Item = (Qos, &'a [u8])>,
) {
    b.put_u32(origin.0);
    b.put_u64(first);
    b.put_u16(msgs.len() as u16);
    for (qos, payload) in msgs {
        b.extend_from_slice(&qos_bytes(qos));
        b.put_u32(payload.len() as u32);
        b.extend_from_slice(payload);
    }
}

/// Bytes of a data packet body before its first message.
pub const DATA_FIXED: usize = 14;
/// Bytes each message adds to a data packet besides its payload.
pub const DATA_PER_MSG: usize = 6;

/// Bytes of a fragment body before its payload: origin (4), sequence number (8), QoS (2),
/// index (2), count (2).
pub const FRAG_FIXED: usize = 18;

/// Payload bytes of one fragment in datagrams of `max_packet` bytes. No more than a data
/// packet of one message carries, so that a message too long for one is at least two
/// fragments (a fragment body's fixed part is shorter than a data packet's).
pub fn fragment_bytes(max_packet: usize) -> usize {
    max_packet
        .saturating_sub(crate::wire::HEADER_LEN + DATA_FIXED + DATA_PER_MSG)
        .max(1)
}

/// A fragment's place in its message: `(index, count)`, index below count, count at least 2.
pub type Frag = (u16, u16);

/// Write a fragment body ([`DATA_FRAG`]).
pub fn encode_frag(b: &mut Vec<u8>, origin: NodeId, sseq: u64, qos: Qos, frag: Frag, p: &[u8]) {
    b.put_u32(origin.0);
    b.put_u64(sseq);
    b.extend_from_slice(&qos_bytes(qos));
    b.put_u16(frag.0);
    b.put_u16(frag.1);
    b.extend_from_slice(p);
}

/// A decoded fragment body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FragBody<'a> {
    /// The original sender.
    pub origin: NodeId,
    /// Its sequence number (for an unreliable fragment, its number among the origin's
    /// unreliable messages).
    pub sseq: u64,
    /// The QoS of the whole message.
    pub qos: Qos,
    /// Its place in the message.
    pub frag: Frag,
    /// Its bytes.
    pub payload: &'a [u8],
}

/// Decode a fragment body; never panics. The index lies below the count, a message of one
/// fragment is no fragment, and the count is at most `max_count` (what the largest message
/// accepted needs), so that nothing is kept for a message that could never be put together.
pub fn decode_frag(body: &[u8], max_count: usize) -> Result<FragBody<'_>, WireError> {
    let mut r = Reader::new(body);
    let origin = NodeId(r.u32()?);
    let sseq = r.u64()?;
    let qos = qos_from([r.u8()?, r.u8()?]).ok_or(WireError::BadValue("qos"))?;
    let (index, count) = (r.u16()?, r.u16()?);
    if count < 2 || index >= count {
        return Err(WireError::BadValue("fragment index"));
    }
    if usize::from(count) > max_count {
        return Err(WireError::BadValue("fragment count"));
    }
    Ok(FragBody {
        origin,
        sseq,
        qos,
        frag: (index, count),
        payload: r.rest(),
    })
}

/// A decoded data packet.
pub struct DataRun<'a> {
    /// The original sender.
    pub origin: NodeId,
    /// Sequence number of the first message.
    pub first: u64,
    /// The messages: QoS and payload.
    pub msgs: Vec<(Qos, &'a [u8])>,
}

/// Decode a data packet body; never panics, allocations bounded by the body's length.
pub fn decode_data(body: &[u8]) -> Result<DataRun<'_>, WireError> {
    let mut r = Reader::new(body);
    let origin = NodeId(r.u32()?);
    let first = r.u64()?;
    let n = r.u16()? as usize;
    if n == 0 || n * DATA_PER_MSG > r.remaining() {
        return Err(WireError::BadValue("data count"));
    }
    let mut msgs = Vec::with_capacity(n);
    for _ in 0..n {
        let qos = qos_from([r.u8()?, r.u8()?]).ok_or(WireError::BadValue("qos"))?;
        let len = r.u32()? as usize;
        msgs.push((qos, r.bytes(len)?));
    }
    if r.remaining() != 0 || first.checked_add(n as u64).is_none() {
        return Err(WireError::BadValue("data length"));
    }
    Ok(DataRun {
        origin,
        first,
        msgs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_roundtrip_and_truncations_fail() {
        let acks = [
            Ack {
                num: 7,
                view: 2,
                first_ts: 40,
                next_site: NodeId(3),
                idle: 0,
                ring: 7,
                lineage: 0x0000_0002_0000_0009,
                body: AckBody::Entries(vec![
                    (NodeId(1), 4),
                    (NodeId(1), 5),
                    (NodeId(1), 6),
                    (NodeId(2), 9),
                    (NodeId(1), 7),
                ]),
            },
            Ack {
                num: 8,
                view: 2,
                first_ts: 42,
                next_site: NodeId(5),
                idle: 2,
                ring: ring_digest(&[NodeId(1), NodeId(2)]),
                lineage: 0x0000_0002_0000_0009,
                body: AckBody::NewList(NewList {
                    view_id: 3,
                    members: vec![NodeId(1), NodeId(5), NodeId(2)],
                    joined: vec![NodeId(5)],
                    left: None,
                    next_sseq: vec![5, 0, 10],
                    lock_op: Some(LockOp {
                        by: NodeId(2),
                        lock: 3,
                        acquire: true,
                    }),
                    locks: vec![(0, NodeId(1)), (3, NodeId(2))],
                    clients: vec![(NodeId(99), 4)],
                    unicast_only: vec![NodeId(5)],
                }),
            },
        ];
        for a in acks {
            let mut b = Vec::new();
            a.encode(&mut b);
            assert_eq!(Ack::decode(&b).unwrap(), a);
            for n in 0..b.len() {
                assert!(Ack::decode(&b[..n]).is_err(), "{n}");
            }
        }
        // Several joiners admitted by one New List, and none.
        for joined in [vec![NodeId(5), NodeId(6), NodeId(7)], vec![]] {
            let a = Ack {
                num: 9,
                view: 3,
                first_ts: 43,
                next_site: NodeId(5),
                idle: 0,
                ring: 0,
                lineage: 0x0000_0002_0000_0009,
                body: AckBody::NewList(NewList {
                    view_id: 4,
                    members: vec![NodeId(1), NodeId(5), NodeId(6), NodeId(7), NodeId(2)],
                    joined,
                    left: None,
                    next_sseq: vec![5, 0, 0, 3, 10],
                    lock_op: None,
                    locks: vec![],
                    clients: vec![],
                    unicast_only: vec![],
                }),
            };
            let mut b = Vec::new();
            a.encode(&mut b);
            assert_eq!(Ack::decode(&b).unwrap(), a);
            for n in 0..b.len() {
                assert!(Ack::decode(&b[..n]).is_err(), "{n}");
            }
        }
        let n = Nack {
            acks: 3..9,
            slots: vec![1, 5],
            everyone: true,
        };
        let mut b = Vec::new();
        n.encode(&mut b);
        assert_eq!(Nack::decode(&b).unwrap(), n);
        assert!(Nack::decode(&b[..b.len() - 1]).is_err());
    }

    #[test]
    fn reformation_bodies_roundtrip_with_the_slots_said_lost() {
        let at = SyncPoint {
            acks: 10,
            data: vec![(NodeId(2), 8), (NodeId(3), 4)],
            lost: vec![16, 18],
        };
        let vote = RecoveryVote {
            version: 5,
            holds_all: false,
            at: at.clone(),
        };
        let start = RecoveryStart {
            version: 5,
            suspect: Some(NodeId(2)),
            target: at,
        };
        let list = RecoveryNewList {
            version: 5,
            acks: vec![vec![1, 2, 3]],
            lost: vec![16],
        };
        let (mut v, mut s, mut l) = (Vec::new(), Vec::new(), Vec::new());
        vote.encode(&mut v);
        start.encode(&mut s);
        list.encode(&mut l);
        assert_eq!(RecoveryVote::decode(&v).unwrap(), vote);
        assert_eq!(RecoveryStart::decode(&s).unwrap(), start);
        assert_eq!(RecoveryNewList::decode(&l).unwrap(), list);
        for n in 0..v.len() {
            assert!(RecoveryVote::decode(&v[..n]).is_err(), "{n}");
        }
        for n in 0..l.len() {
            assert!(RecoveryNewList::decode(&l[..n]).is_err(), "{n}");
        }
        // More lost slots than a sync point may name are refused.
        let mut b = Vec::new();
        b.put_u64(1); // version
        b.put_u32(u32::MAX); // no suspect
        b.put_u64(10); // ACKs
        b.put_u16(0); // origins
        let n = SyncPoint::MAX_LOST as u16 + 2;
        b.put_u16(n);
        for ts in 0..u64::from(n) {
            b.put_u64(ts);
        }
        assert!(RecoveryStart::decode(&b).is_err());
        b.truncate(b.len() - 8);
        let l = b.len();
        b[l - 8 * (usize::from(n) - 1) - 2..][..2].copy_from_slice(&(n - 1).to_be_bytes());
        assert!(
            RecoveryStart::decode(&b).is_ok(),
            "one more than MAX_LOST: there are more"
        );
    }

    #[test]
    fn expelled_names_view_and_lineage_and_truncations_fail() {
        let mut b = Vec::new();
        let l = lineage(NodeId(3), 7, 99);
        encode_expelled(&mut b, 12, l, Some(4));
        assert_eq!(decode_expelled(&b).unwrap(), (12, l, Some(4)));
        let mut none = Vec::new();
        encode_expelled(&mut none, 12, l, None);
        assert_eq!(decode_expelled(&none).unwrap(), (12, l, None));
        for n in 0..b.len() {
            assert!(decode_expelled(&b[..n]).is_err(), "{n}");
        }
        b.push(0);
        assert!(decode_expelled(&b).is_err());
        // The creator is in the high half; another first view or seed gives another lineage.
        assert_eq!(l >> 32, 3);
        assert_ne!(lineage(NodeId(3), 8, 99), l);
        assert_ne!(lineage(NodeId(3), 7, 98), l);
        assert_ne!(lineage(NodeId(4), 7, 99), l);
    }

    #[test]
    fn fragments_roundtrip_and_bad_indices_or_counts_are_refused() {
        let mut b = Vec::new();
        encode_frag(&mut b, NodeId(2), 7, Qos::KResilient(3), (1, 3), b"xyz");
        assert_eq!(b.len(), FRAG_FIXED + 3);
        let f = decode_frag(&b, 8).unwrap();
        assert_eq!(
            f,
            FragBody {
                origin: NodeId(2),
                sseq: 7,
                qos: Qos::KResilient(3),
                frag: (1, 3),
                payload: b"xyz",
            }
        );
        // An empty last fragment is a fragment all the same.
        let mut e = Vec::new();
        encode_frag(&mut e, NodeId(2), 8, Qos::Unreliable, (2, 3), b"");
        assert_eq!(decode_frag(&e, 3).unwrap().payload, b"");
        for bad in [(3, 3), (0, 1), (0, 0), (9, 2), (u16::MAX, 2)] {
            let mut b = Vec::new();
            encode_frag(&mut b, NodeId(2), 7, Qos::Reliable, bad, b"xyz");
            assert!(decode_frag(&b, 8).is_err(), "{bad:?}");
        }
        // More fragments than the largest message needs.
        assert!(decode_frag(&b, 2).is_err());
        let mut b9 = Vec::new();
        encode_frag(&mut b9, NodeId(2), 7, Qos::Reliable, (0, 9), b"xyz");
        assert!(decode_frag(&b9, 8).is_err());
        assert!(decode_frag(&b9, 9).is_ok());
        // A bad QoS, and every truncation of the fixed part.
        let mut q = b.clone();
        q[12] = 9;
        assert!(decode_frag(&q, 8).is_err());
        for n in 0..FRAG_FIXED {
            assert!(decode_frag(&b[..n], 8).is_err(), "{n}");
        }
    }

    #[test]
    fn data_runs_roundtrip_and_truncations_fail() {
        let msgs: [(Qos, &[u8]); 3] = [
            (Qos::Reliable, b"abc"),
            (Qos::KResilient(200), b""),
            (Qos::TotallyResilient, b"xy"),
        ];
        let mut b = Vec::new();
        encode_data(&mut b, NodeId(4), 17, msgs.iter().copied());
        let d = decode_data(&b).unwrap();
        assert_eq!((d.origin, d.first), (NodeId(4), 17));
        assert_eq!(d.msgs, msgs);
        for n in 0..b.len() {
            assert!(decode_data(&b[..n]).is_err(), "{n}");
        }
        let mut long = b.clone();
        long.push(0);
        assert!(decode_data(&long).is_err());
    }
}

// ---- failure detection and fault recovery (section 4.4) ----------------------------------

/// A probe of a ring member not heard from for a while (the common failure detector's
/// question, token 0), or multicast by a member that stood still and fenced its token site
/// (a fresh token, [`crate::common::Fence`]). Body: the token (u32).
pub const PROBE: u8 = 8;
/// The answer to a [`PROBE`]. Body: the answerer's next ACK number (u64), so that a member
/// that lost the last ACKs of a ring gone quiescent learns of them, and the probe's token
/// (u32).
pub const PROBE_ACK: u8 = 9;

/// A [`PROBE`] body: the token.
pub fn decode_probe(body: &[u8]) -> Result<u32, WireError> {
    let mut r = Reader::new(body);
    let token = r.u32()?;
    r.finish()?;
    Ok(token)
}

/// A [`PROBE_ACK`] body: the answerer's next ACK number and the probe's token.
pub fn decode_probe_ack(body: &[u8]) -> Result<(u64, u32), WireError> {
    let mut r = Reader::new(body);
    let next = r.u64()?;
    let token = r.u32()?;
    r.finish()?;
    Ok((next, token))
}
/// To a process that acts as a member but is not in the sender's ring: it was removed by a
/// reformation and may come back only as a new member. Body: the sender's view id (u64), its
/// ring's lineage (u64, [`lineage`]: a view id of another lineage is another ring's, never news
/// of the receiver's own ring) and the ACK it answers (u64) ([`encode_expelled`]).
pub const EXPELLED: u8 = 10;

/// An [`EXPELLED`] body: the sender's view id and ring lineage, and the number of the
/// receiver's ACK it answers when an ACK prompted it (`u64::MAX` for none): a site hearing
/// that a joiner is elsewhere can tell an answer given before the joiner's admission there
/// (the joiner may have taken it since) from one given after.
pub fn encode_expelled(b: &mut Vec<u8>, view: u64, lineage: u64, answers: Option<u64>) {
    b.put_u64(view);
    b.put_u64(lineage);
    b.put_u64(answers.unwrap_or(u64::MAX));
}

/// The view id, lineage and answered ACK number of an [`EXPELLED`] body.
pub fn decode_expelled(body: &[u8]) -> Result<(u64, u64, Option<u64>), WireError> {
    let mut r = Reader::new(body);
    let view = r.u64()?;
    let lineage = r.u64()?;
    let answers = Some(r.u64()?).filter(|&n| n != u64::MAX);
    r.finish()?;
    Ok((view, lineage, answers))
}
/// Recovery Start: the initiator polls the old view with its proposal and the sync point the
/// members are to reach ([`RecoveryStart`]); multicast, repeated until the list is committed.
pub const RECOVERY_START: u8 = 11;
/// Recovery Vote: a member's answer to a Recovery Start, its own sync point ([`RecoveryVote`]).
pub const RECOVERY_VOTE: u8 = 12;
/// During a reformation, a member lacks data of an origin that is gone: any member holding it
/// answers. Body: origin (u32), first and end sequence numbers (u64, u64).
pub const RECOVERY_FETCH: u8 = 13;
/// Recovery New List, the first phase of the commit: the version and the ACKs that end the old
/// view (the recovered data of removed members, then the New List), as whole datagrams.
pub const RECOVERY_NEW_LIST: u8 = 14;
/// Recovery ACK New List: a member holds the New List of this version and is bound to it.
/// Body: the version (u64).
pub const RECOVERY_ACK_NEW_LIST: u8 = 15;
/// Recovery Abort. Body: a version (u64) and a kind (u8): [`ABORT_YIELD`], to an initiator
/// whose Start the sender refused (it is in a reformation that goes first, or bound to one, or
/// has seen a newer view: that version); or [`ABORT_GAVE_UP`], multicast by an initiator that
/// gives up its own attempt of that version.
pub const RECOVERY_ABORT: u8 = 16;
/// Recovery Abort kind: your Start was refused.
pub const ABORT_YIELD: u8 = 1;
/// Recovery Abort kind: the sender gave up its own reformation.
pub const ABORT_GAVE_UP: u8 = 2;

/// The second phase of the commit: the initiator committed the New List of this version (it
/// also sends the first ACK of the new view). Body: the version (u64).
pub const RECOVERY_COMMIT: u8 = 17;

/// A sync point (section 4.4): how far a member's OrderingQ goes, and how far each origin's
/// packets it holds reach.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncPoint {
    /// ACKs applied, consecutively (the next ACK number).
    pub acks: u64,
    /// Per origin: one past the highest consecutive sequence number held (ordered or not).
    pub data: Vec<(NodeId, u64)>,
    /// Ordered slots whose data is not here, by timestamp: in a member's vote, those it lacks
    /// (up to [`SyncPoint::MAX_LOST`], one more saying there are more); in the initiator's
    /// Start, those no voter holds, which the new ring skips (their origin is gone with them:
    /// a token site that ordered its own packet and crashed before anyone had it).
    pub lost: Vec<u64>,
}

impl SyncPoint {
    /// Most origins one sync point names.
    pub const MAX_ORIGINS: usize = MAX_MEMBERS;
    /// Most slots a sync point says are lost; a vote naming one more lacks more than it says.
    pub const MAX_LOST: usize = 64;

    fn encode(&self, b: &mut Vec<u8>) {
        b.put_u64(self.acks);
        b.put_u16(self.data.len() as u16);
        for (o, s) in &self.data {
            b.put_u32(o.0);
            b.put_u64(*s);
        }
        debug_assert!(self.lost.len() <= Self::MAX_LOST + 1);
        b.put_u16(self.lost.len() as u16);
        for ts in &self.lost {
            b.put_u64(*ts);
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<SyncPoint, WireError> {
        let acks = r.u64()?;
        let n = r.u16()? as usize;
        if n > Self::MAX_ORIGINS || r.remaining() < n * 12 {
            return Err(WireError::BadValue("sync point origins"));
        }
        let mut data = Vec::with_capacity(n);
        for _ in 0..n {
            data.push((NodeId(r.u32()?), r.u64()?));
        }
        let lost = decode_lost(r)?;
        Ok(SyncPoint { acks, data, lost })
    }

    /// The sequence number reached for `origin` (0 when not named).
    pub fn reached(&self, origin: NodeId) -> u64 {
        self.data
            .iter()
            .find(|(o, _)| *o == origin)
            .map_or(0, |(_, s)| *s)
    }
}

/// Slots said lost (a count, then each timestamp), at most [`SyncPoint::MAX_LOST`] + 1.
fn decode_lost(r: &mut Reader<'_>) -> Result<Vec<u64>, WireError> {
    let n = r.u16()? as usize;
    if n > SyncPoint::MAX_LOST + 1 {
        return Err(WireError::BadValue("lost slots"));
    }
    (0..n).map(|_| r.u64()).collect()
}

/// A Recovery Start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryStart {
    /// The version (view id) of the membership view being formed.
    pub version: u64,
    /// The member found failed, if the initiator knows one.
    pub suspect: Option<NodeId>,
    /// The shared sync point: the highest reported so far.
    pub target: SyncPoint,
}

impl RecoveryStart {
    /// Append the body to `b`.
    pub fn encode(&self, b: &mut Vec<u8>) {
        b.put_u64(self.version);
        b.put_u32(self.suspect.map_or(u32::MAX, |s| s.0));
        self.target.encode(b);
    }

    /// Decode a body.
    pub fn decode(body: &[u8]) -> Result<RecoveryStart, WireError> {
        let mut r = Reader::new(body);
        let version = r.u64()?;
        let suspect = Some(r.u32()?).filter(|&s| s != u32::MAX).map(NodeId);
        let target = SyncPoint::decode(&mut r)?;
        r.finish()?;
        Ok(RecoveryStart {
            version,
            suspect,
            target,
        })
    }
}

/// A Recovery Vote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryVote {
    /// The version voted for.
    pub version: u64,
    /// Whether every slot of the applied ACKs is held (the OrderingQ has no hole).
    pub holds_all: bool,
    /// The member's sync point.
    pub at: SyncPoint,
}

impl RecoveryVote {
    /// Append the body to `b`.
    pub fn encode(&self, b: &mut Vec<u8>) {
        b.put_u64(self.version);
        b.push(u8::from(self.holds_all));
        self.at.encode(b);
    }

    /// Decode a body.
    pub fn decode(body: &[u8]) -> Result<RecoveryVote, WireError> {
        let mut r = Reader::new(body);
        let version = r.u64()?;
        let holds_all = match r.u8()? {
            0 => false,
            1 => true,
            _ => return Err(WireError::BadValue("vote holds_all")),
        };
        let at = SyncPoint::decode(&mut r)?;
        r.finish()?;
        Ok(RecoveryVote {
            version,
            holds_all,
            at,
        })
    }
}

/// A Recovery New List: the version and the ACK datagrams that end the old view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryNewList {
    /// The version committed.
    pub version: u64,
    /// Whole ACK datagrams (header included), in ACK number order.
    pub acks: Vec<Vec<u8>>,
    /// Slots of the old view that no member of the list holds: skipped by every one of them
    /// at the commit (none delivered them; see [`SyncPoint::lost`]).
    pub lost: Vec<u64>,
}

impl RecoveryNewList {
    /// Most ACKs one Recovery New List carries.
    pub const MAX_ACKS: usize = 4;

    /// Append the body to `b`.
    pub fn encode(&self, b: &mut Vec<u8>) {
        b.put_u64(self.version);
        b.push(self.acks.len() as u8);
        for a in &self.acks {
            b.put_u32(a.len() as u32);
            b.extend_from_slice(a);
        }
        b.put_u16(self.lost.len() as u16);
        for ts in &self.lost {
            b.put_u64(*ts);
        }
    }

    /// Decode a body.
    pub fn decode(body: &[u8]) -> Result<RecoveryNewList, WireError> {
        let mut r = Reader::new(body);
        let version = r.u64()?;
        let n = r.u8()? as usize;
        if n == 0 || n > Self::MAX_ACKS {
            return Err(WireError::BadValue("recovery new list acks"));
        }
        let mut acks = Vec::with_capacity(n);
        for _ in 0..n {
            let len = r.u32()? as usize;
            acks.push(r.bytes(len)?.to_vec());
        }
        let lost = decode_lost(&mut r)?;
        r.finish()?;
        Ok(RecoveryNewList {
            version,
            acks,
            lost,
        })
    }
}
