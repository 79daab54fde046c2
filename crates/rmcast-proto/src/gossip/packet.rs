//! Bimodal Multicast packet bodies after the common header: the message itself (first phase
//! and retransmissions), the gossip digest of an anti-entropy round, the solicitation that
//! answers it, and the membership packets (join, welcome, membership table, leave).
//!
//! Decoding is total and never sized by a length field alone: every count is checked against
//! the bytes that are really there (and against a fixed maximum) before anything is allocated.

use crate::engine::NodeId;
use crate::wire::{Reader, WireError, WriteExt};
use std::ops::Range;

/// A message: `(origin, message number, payload)`. Multicast once by its origin (the first,
/// unreliable phase) and sent again by unicast to a member that solicited it.
pub const DATA: u8 = 1;
/// A gossip digest: what the gossiper holds, per sender, and what it knows of the others.
pub const GOSSIP: u8 = 2;
/// A solicitation: the messages the receiver of a digest lacks and asks the gossiper for.
pub const SOLICIT: u8 = 3;
/// A joiner asks any member to let it in (multicast, repeated until welcomed).
pub const JOIN: u8 = 4;
/// A member lets a joiner in: where each sender's messages start for it, and the membership.
pub const WELCOME: u8 = 5;
/// (Part of) a membership table, sent when two members found that their tables differ.
pub const MEMBERS: u8 = 6;
/// A member leaves: its table entry, marked departed.
pub const LEAVE: u8 = 7;
/// A run of messages of one origin with consecutive numbers, `(origin, first number, count,
/// then each payload after its length)`: the first phase of messages submitted together, in
/// one datagram (small messages bundled under load).
pub const DATA_RUN: u8 = 8;
/// A fragment of a message larger than a datagram, `(origin, number, index, count,
/// payload)`: each fragment has a message number of its own (gossip repairs fragments), and
/// the message is delivered under the number of its last fragment.
pub const DATA_FRAG: u8 = 9;
/// A join refused: the membership table is full. Body: the limit (u32, table entries).
pub const JOIN_REFUSED: u8 = 10;
/// A probe of the failure detector ([`Probe`], `member` the probed member itself): answered
/// at once with a [`PROBE_ACK`].
pub const PROBE: u8 = 11;
/// A request to probe `member` on the sender's behalf ([`Probe`]): its own probe went
/// unanswered. The receiver probes `member` and relays the answer.
pub const PROBE_REQ: u8 = 12;
/// The answer to a probe, or one relayed ([`Probe`], `member` the member found alive).
pub const PROBE_ACK: u8 = 13;

/// The limit in a JOIN_REFUSED body.
pub fn decode_join_refused(body: &[u8]) -> Result<u32, WireError> {
    let mut r = Reader::new(body);
    let limit = r.u32()?;
    r.finish()?;
    Ok(limit)
}

/// Bytes of a data body before the payload: origin (4) and message number (8).
pub const DATA_FIXED: usize = 12;
/// Bytes of a fragment body before its payload: origin, number, index (2), count (2).
pub const FRAG_FIXED: usize = DATA_FIXED + 4;
/// Bytes of a run body before its messages: origin (4), first number (8), count (2).
pub const RUN_FIXED: usize = 14;
/// Bytes before each payload of a run: its length.
pub const RUN_ENTRY_FIXED: usize = 4;
/// Held ranges per sender in one digest, at most (the oldest first).
pub const MAX_RANGES: usize = 8;
/// Senders in one digest, at most.
pub const MAX_DIGEST_ORIGINS: usize = 32;
/// A digest is never larger than this, whatever the datagram size (bounded gossip).
pub const MAX_DIGEST_BYTES: usize = 1400;
/// Ranges in one solicitation, at most.
pub const MAX_SOLICIT_RANGES: usize = 64;
/// Bytes of a digest body without senders and rows: round, flags, view id, the two counts.
pub const DIGEST_FIXED: usize = 4 + 1 + 8 + 1 + 2;
/// Bytes of one sender's summary in a digest without its ranges.
pub const ORIGIN_FIXED: usize = 4 + 8 + 8 + 1;
/// Bytes of one held range (start, length).
pub const RANGE_LEN: usize = 12;
/// Bytes of a knowledge row without its prefixes (member, heartbeat).
pub const ROW_FIXED: usize = 12;
/// Bytes of one membership table entry (id, version, alive).
pub const ENTRY_LEN: usize = 9;
/// Bytes of one start point in a welcome (origin, next).
pub const START_LEN: usize = 12;

/// Digest flag: this digest answers another one (never answered itself).
pub const FLAG_REPLY: u8 = 0x01;
/// Digest flag: the gossiper asks for a digest in return (it wants to know that the receiver
/// agrees with its membership before it goes quiet).
pub const FLAG_WANT_REPLY: u8 = 0x02;
/// Digest flag: membership updates follow the rows (set by [`Digest::encode`] when there are
/// any; [`Digest::decode`] takes it off again).
pub const FLAG_UPDATES: u8 = 0x04;
/// Membership updates one packet carries, at most (piggybacked on digests and probes).
pub const MAX_UPDATES: usize = 8;
/// Bytes of one membership update (member, version, kind).
pub const UPDATE_LEN: usize = 9;
/// Bytes of a probe body without its updates: probe id, member, update count.
pub const PROBE_FIXED: usize = 4 + 4 + 1;

/// What a membership update says of its member.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum UpdateKind {
    /// Alive at this version (a refutation, or the entry as the table has it).
    Alive,
    /// Suspected at this version: it did not answer a probe, directly or through others.
    Suspect,
    /// Departed at this version (confirmed after the suspicion timed out, or left).
    Departed,
}

/// One membership update, piggybacked on the packets a member sends anyway (SWIM's
/// infection-style dissemination).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Update {
    /// The member it is about.
    pub member: NodeId,
    /// Its table version (its incarnation).
    pub version: u32,
    /// What it says.
    pub kind: UpdateKind,
}

fn put_updates(b: &mut Vec<u8>, updates: &[Update]) {
    debug_assert!(updates.len() <= MAX_UPDATES);
    b.push(updates.len() as u8);
    for u in updates {
        b.put_u32(u.member.0);
        b.put_u32(u.version);
        b.push(match u.kind {
            UpdateKind::Alive => 0,
            UpdateKind::Suspect => 1,
            UpdateKind::Departed => 2,
        });
    }
}

fn get_updates(r: &mut Reader<'_>) -> Result<Vec<Update>, WireError> {
    let n = r.u8()? as usize;
    if n > MAX_UPDATES || r.remaining() < n * UPDATE_LEN {
        return Err(WireError::BadValue("updates"));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let member = NodeId(r.u32()?);
        let version = r.u32()?;
        let kind = match r.u8()? {
            0 => UpdateKind::Alive,
            1 => UpdateKind::Suspect,
            2 => UpdateKind::Departed,
            _ => return Err(WireError::BadValue("update kind")),
        };
        out.push(Update {
            member,
            version,
            kind,
        });
    }
    Ok(out)
}

/// The body of [`PROBE`], [`PROBE_REQ`] and [`PROBE_ACK`]: the prober's probe id, the member
/// probed (or found alive), and membership updates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Chosen by the prober; an answer names it.
    pub id: u32,
    /// The member probed (PROBE, PROBE_REQ) or found alive (PROBE_ACK).
    pub member: NodeId,
    /// Piggybacked updates, at most [`MAX_UPDATES`].
    pub updates: Vec<Update>,
}

impl Probe {
    /// Append the body to `b`.
    pub fn encode(&self, b: &mut Vec<u8>) {
        b.put_u32(self.id);
        b.put_u32(self.member.0);
        put_updates(b, &self.updates);
    }

    /// Decode a body; never panics.
    pub fn decode(body: &[u8]) -> Result<Probe, WireError> {
        let mut r = Reader::new(body);
        let id = r.u32()?;
        let member = NodeId(r.u32()?);
        let updates = get_updates(&mut r)?;
        r.finish()?;
        Ok(Probe {
            id,
            member,
            updates,
        })
    }
}

/// Write a data body.
pub fn encode_data(b: &mut Vec<u8>, origin: NodeId, msg: u64, payload: &[u8]) {
    b.put_u32(origin.0);
    b.put_u64(msg);
    b.extend_from_slice(payload);
}

/// Read a data body: `(origin, message number, payload)`.
pub fn decode_data(body: &[u8]) -> Result<(NodeId, u64, &[u8]), WireError> {
    let mut r = Reader::new(body);
    let origin = NodeId(r.u32()?);
    let msg = r.u64()?;
    Ok((origin, msg, r.rest()))
}

/// Write a fragment body.
pub fn encode_frag(b: &mut Vec<u8>, origin: NodeId, msg: u64, frag: (u16, u16), payload: &[u8]) {
    b.put_u32(origin.0);
    b.put_u64(msg);
    b.put_u16(frag.0);
    b.put_u16(frag.1);
    b.extend_from_slice(payload);
}

/// A fragment read: `(origin, number, (index, count), payload)`.
pub type FragBody<'a> = (NodeId, u64, (u16, u16), &'a [u8]);

/// Read a fragment body; the index lies below the count, and a message of one fragment is no
/// fragment.
pub fn decode_frag(body: &[u8]) -> Result<FragBody<'_>, WireError> {
    let mut r = Reader::new(body);
    let origin = NodeId(r.u32()?);
    let msg = r.u64()?;
    let (index, count) = (r.u16()?, r.u16()?);
    if count < 2 || index >= count {
        return Err(WireError::BadValue("fragment index"));
    }
    Ok((origin, msg, (index, count), r.rest()))
}

/// Write a run body: `payloads` are messages `first, first + 1, ...` of `origin`.
pub fn encode_run<P: AsRef<[u8]>>(b: &mut Vec<u8>, origin: NodeId, first: u64, payloads: &[P]) {
    debug_assert!(payloads.len() <= u16::MAX as usize);
    b.put_u32(origin.0);
    b.put_u64(first);
    b.put_u16(payloads.len() as u16);
    for p in payloads {
        let p = p.as_ref();
        b.put_u32(p.len() as u32);
        b.extend_from_slice(p);
    }
}

/// Read a run body: `(origin, first number, payloads)`, each payload as its range in `body`.
/// Every length is checked against the bytes there; a run names at least one message, and its
/// numbers do not wrap.
pub fn decode_run(body: &[u8]) -> Result<(NodeId, u64, Vec<Range<usize>>), WireError> {
    let mut r = Reader::new(body);
    let origin = NodeId(r.u32()?);
    let first = r.u64()?;
    let n = r.u16()? as usize;
    if n == 0 || first.checked_add(n as u64).is_none() {
        return Err(WireError::BadValue("run count"));
    }
    let mut at = RUN_FIXED;
    if n > (body.len() - at) / RUN_ENTRY_FIXED {
        return Err(WireError::BadValue("run count"));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let len = r.u32()? as usize;
        let p = r.bytes(len)?;
        at += RUN_ENTRY_FIXED;
        out.push(at..at + p.len());
        at += p.len();
    }
    r.finish()?;
    Ok((origin, first, out))
}

/// What the gossiper holds of one sender's messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SenderSummary {
    /// The sender.
    pub origin: NodeId,
    /// The gossiper delivered (or reported lost) every message below this one: what stability
    /// detection reads.
    pub prefix: u64,
    /// One past the highest message number the gossiper knows to exist.
    pub known: u64,
    /// Message numbers the gossiper holds and can send again, ascending, disjoint, below
    /// `known`; at most [`MAX_RANGES`], the oldest first.
    pub held: Vec<Range<u64>>,
}

impl SenderSummary {
    /// The lowest message number the gossiper still holds (`known` when it holds none): it can
    /// no longer send any message below it.
    pub fn base(&self) -> u64 {
        self.held.first().map_or(self.known, |r| r.start)
    }

    /// Whether the gossiper holds message `msg`.
    pub fn holds(&self, msg: u64) -> bool {
        self.held.iter().any(|r| r.contains(&msg))
    }

    /// Bytes on the wire.
    pub fn len(&self) -> usize {
        ORIGIN_FIXED + RANGE_LEN * self.held.len()
    }

    /// Whether it names no held message.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// What the gossiper knows of one member: its heartbeat (gossip-style failure detection);
/// the prefixes that member reported, one per sender of the digest, are the row's part of
/// [`Digest::prefixes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnowledgeRow {
    /// The member.
    pub member: NodeId,
    /// Its heartbeat counter, increased by the member itself every round.
    pub heartbeat: u64,
}

/// The digest one member gossips to a few others each round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digest {
    /// The gossiper's round number: a solicitation names it, and is served only in that round
    /// or the next (stale ones are dropped).
    pub round: u32,
    /// [`FLAG_REPLY`], [`FLAG_WANT_REPLY`].
    pub flags: u8,
    /// The gossiper's view id (a function of its whole membership table): a different one
    /// starts an exchange of tables.
    pub view_id: u64,
    /// Per sender, what the gossiper holds.
    pub senders: Vec<SenderSummary>,
    /// What the gossiper knows of members (its own row first).
    pub rows: Vec<KnowledgeRow>,
    /// Row by row, each row's prefix per sender of the digest (same order; 0: not known):
    /// `rows.len() * senders.len()` values in one vector, so that a digest of many rows costs
    /// one allocation, not one a row.
    pub prefixes: Vec<u64>,
    /// Membership updates piggybacked (at most [`MAX_UPDATES`]; on the wire after the rows,
    /// under [`FLAG_UPDATES`]).
    pub updates: Vec<Update>,
}

impl Digest {
    /// Bytes of one row of a digest with `senders` senders.
    pub fn row_len(senders: usize) -> usize {
        ROW_FIXED + 8 * senders
    }

    /// Row `i`'s prefixes, one per sender (empty past the rows or in a malformed digest).
    pub fn row_prefixes(&self, i: usize) -> &[u64] {
        let n = self.senders.len();
        self.prefixes.get(i * n..(i + 1) * n).unwrap_or(&[])
    }

    /// Bytes the updates take on the wire (none without updates).
    pub fn updates_len(updates: usize) -> usize {
        if updates == 0 {
            0
        } else {
            1 + UPDATE_LEN * updates
        }
    }

    /// Append the body to `b`.
    pub fn encode(&self, b: &mut Vec<u8>) {
        b.put_u32(self.round);
        let updates = if self.updates.is_empty() {
            0
        } else {
            FLAG_UPDATES
        };
        b.push(self.flags | updates);
        b.put_u64(self.view_id);
        b.push(self.senders.len() as u8);
        for s in &self.senders {
            b.put_u32(s.origin.0);
            b.put_u64(s.prefix);
            b.put_u64(s.known);
            b.push(s.held.len() as u8);
            for r in &s.held {
                b.put_u64(r.start);
                b.put_u32((r.end - r.start) as u32);
            }
        }
        b.put_u16(self.rows.len() as u16);
        for (i, row) in self.rows.iter().enumerate() {
            b.put_u32(row.member.0);
            b.put_u64(row.heartbeat);
            for p in self.row_prefixes(i) {
                b.put_u64(*p);
            }
        }
        if !self.updates.is_empty() {
            put_updates(b, &self.updates);
        }
    }

    /// Decode a body; never panics.
    pub fn decode(body: &[u8]) -> Result<Digest, WireError> {
        let mut r = Reader::new(body);
        let round = r.u32()?;
        let flags = r.u8()?;
        if flags & !(FLAG_REPLY | FLAG_WANT_REPLY | FLAG_UPDATES) != 0 {
            return Err(WireError::BadValue("digest flags"));
        }
        let view_id = r.u64()?;
        let n = r.u8()? as usize;
        if n > MAX_DIGEST_ORIGINS {
            return Err(WireError::BadValue("digest senders"));
        }
        let mut senders = Vec::with_capacity(n);
        for _ in 0..n {
            let origin = NodeId(r.u32()?);
            let prefix = r.u64()?;
            let known = r.u64()?;
            let k = r.u8()? as usize;
            if prefix > known || k > MAX_RANGES {
                return Err(WireError::BadValue("digest sender"));
            }
            let mut held = Vec::with_capacity(k);
            let mut floor = 0;
            for _ in 0..k {
                let start = r.u64()?;
                let len = r.u32()? as u64;
                let end = start.checked_add(len).ok_or(WireError::BadValue("range"))?;
                if len == 0 || start < floor || end > known {
                    return Err(WireError::BadValue("range"));
                }
                floor = end;
                held.push(start..end);
            }
            if senders.iter().any(|s: &SenderSummary| s.origin == origin) {
                return Err(WireError::BadValue("digest sender twice"));
            }
            senders.push(SenderSummary {
                origin,
                prefix,
                known,
                held,
            });
        }
        let rows_n = r.u16()? as usize;
        let rows_len = rows_n * Digest::row_len(n);
        let with_updates = flags & FLAG_UPDATES != 0;
        if r.remaining() < rows_len || (!with_updates && r.remaining() != rows_len) {
            return Err(WireError::BadValue("digest rows"));
        }
        let mut rows = Vec::with_capacity(rows_n);
        let mut prefixes = Vec::with_capacity(rows_n * n);
        for _ in 0..rows_n {
            let member = NodeId(r.u32()?);
            let heartbeat = r.u64()?;
            for _ in 0..n {
                prefixes.push(r.u64()?);
            }
            rows.push(KnowledgeRow { member, heartbeat });
        }
        let updates = if with_updates {
            get_updates(&mut r)?
        } else {
            Vec::new()
        };
        r.finish()?;
        Ok(Digest {
            round,
            flags: flags & !FLAG_UPDATES,
            view_id,
            senders,
            rows,
            prefixes,
            updates,
        })
    }
}

/// A solicitation: the messages the receiver of a digest asks the gossiper to send again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Solicitation {
    /// The round of the digest it answers.
    pub round: u32,
    /// `(sender, message numbers)`, at most [`MAX_SOLICIT_RANGES`].
    pub wanted: Vec<(NodeId, Range<u64>)>,
}

impl Solicitation {
    /// Append the body to `b`.
    pub fn encode(&self, b: &mut Vec<u8>) {
        b.put_u32(self.round);
        b.put_u16(self.wanted.len() as u16);
        for (o, r) in &self.wanted {
            b.put_u32(o.0);
            b.put_u64(r.start);
            b.put_u32((r.end - r.start) as u32);
        }
    }

    /// Decode a body; never panics.
    pub fn decode(body: &[u8]) -> Result<Solicitation, WireError> {
        let mut r = Reader::new(body);
        let round = r.u32()?;
        let n = r.u16()? as usize;
        if n > MAX_SOLICIT_RANGES || r.remaining() != n * 16 {
            return Err(WireError::BadValue("solicitation"));
        }
        let mut wanted = Vec::with_capacity(n);
        for _ in 0..n {
            let o = NodeId(r.u32()?);
            let start = r.u64()?;
            let len = r.u32()? as u64;
            let end = start
                .checked_add(len)
                .ok_or(WireError::BadValue("solicitation"))?;
            wanted.push((o, start..end));
        }
        Ok(Solicitation { round, wanted })
    }
}

/// One membership table entry on the wire: `(member, version, alive)`.
pub type WireEntry = (NodeId, u32, bool);

fn put_entries(b: &mut Vec<u8>, entries: &[WireEntry]) {
    b.put_u16(entries.len() as u16);
    for (id, v, alive) in entries {
        b.put_u32(id.0);
        b.put_u32(*v);
        b.push(u8::from(*alive));
    }
}

fn get_entries(r: &mut Reader<'_>) -> Result<Vec<WireEntry>, WireError> {
    let n = r.u16()? as usize;
    if r.remaining() < n * ENTRY_LEN {
        return Err(WireError::Truncated);
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let id = NodeId(r.u32()?);
        let v = r.u32()?;
        let alive = match r.u8()? {
            0 => false,
            1 => true,
            _ => return Err(WireError::BadValue("member entry")),
        };
        out.push((id, v, alive));
    }
    Ok(out)
}

/// A welcome: for each sender the admitter knows, the first message number the joiner is to
/// deliver, and the admitter's membership table (the joiner's own entry first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Welcome {
    /// `(sender, next message number)`.
    pub starts: Vec<(NodeId, u64)>,
    /// Membership table entries.
    pub members: Vec<WireEntry>,
}

impl Welcome {
    /// Append the body to `b`.
    pub fn encode(&self, b: &mut Vec<u8>) {
        b.put_u16(self.starts.len() as u16);
        for (o, n) in &self.starts {
            b.put_u32(o.0);
            b.put_u64(*n);
        }
        put_entries(b, &self.members);
    }

    /// Decode a body; never panics.
    pub fn decode(body: &[u8]) -> Result<Welcome, WireError> {
        let mut r = Reader::new(body);
        let n = r.u16()? as usize;
        if r.remaining() < n * START_LEN {
            return Err(WireError::Truncated);
        }
        let mut starts = Vec::with_capacity(n);
        for _ in 0..n {
            starts.push((NodeId(r.u32()?), r.u64()?));
        }
        let members = get_entries(&mut r)?;
        r.finish()?;
        Ok(Welcome { starts, members })
    }
}

/// (Part of) a membership table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Members {
    /// The sender wants the receiver's table back if the two differ.
    pub want_reply: bool,
    /// The sender's view id when it sent this.
    pub view_id: u64,
    /// Entries.
    pub entries: Vec<WireEntry>,
}

impl Members {
    /// Bytes of the body without entries.
    pub const FIXED: usize = 1 + 8 + 2;

    /// Append the body to `b`.
    pub fn encode(&self, b: &mut Vec<u8>) {
        b.push(u8::from(self.want_reply));
        b.put_u64(self.view_id);
        put_entries(b, &self.entries);
    }

    /// Decode a body; never panics.
    pub fn decode(body: &[u8]) -> Result<Members, WireError> {
        let mut r = Reader::new(body);
        let want_reply = match r.u8()? {
            0 => false,
            1 => true,
            _ => return Err(WireError::BadValue("members flags")),
        };
        let view_id = r.u64()?;
        let entries = get_entries(&mut r)?;
        r.finish()?;
        Ok(Members {
            want_reply,
            view_id,
            entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_roundtrip_and_refuse_bad_indices() {
        let mut b = Vec::new();
        encode_frag(&mut b, NodeId(2), 7, (1, 3), b"xyz");
        assert_eq!(
            decode_frag(&b).unwrap(),
            (NodeId(2), 7, (1, 3), &b"xyz"[..])
        );
        for bad in [(3, 3), (0, 1), (0, 0), (9, 2)] {
            let mut b = Vec::new();
            encode_frag(&mut b, NodeId(2), 7, bad, b"xyz");
            assert!(decode_frag(&b).is_err(), "{bad:?}");
        }
        assert!(decode_frag(&b[..15]).is_err());
    }

    #[test]
    fn runs_roundtrip_and_refuse_bad_lengths() {
        let payloads: Vec<&[u8]> = vec![b"ab", b"", b"cde"];
        let mut b = Vec::new();
        encode_run(&mut b, NodeId(4), 10, &payloads);
        let (o, first, ranges) = decode_run(&b).unwrap();
        assert_eq!((o, first), (NodeId(4), 10));
        let got: Vec<&[u8]> = ranges.iter().map(|r| &b[r.clone()]).collect();
        assert_eq!(got, payloads);
        // Cut anywhere, or one byte too many: refused, never a panic.
        for n in 0..b.len() {
            assert!(decode_run(&b[..n]).is_err(), "cut at {n}");
        }
        let mut long = b.clone();
        long.push(0);
        assert!(decode_run(&long).is_err());
        // A count larger than the bytes could hold, an empty run, a run that wraps.
        let mut c = b.clone();
        c[12..14].copy_from_slice(&u16::MAX.to_be_bytes());
        assert!(decode_run(&c).is_err());
        let mut e = Vec::new();
        encode_run::<&[u8]>(&mut e, NodeId(4), 10, &[]);
        assert!(decode_run(&e).is_err());
        let mut w = Vec::new();
        encode_run(&mut w, NodeId(4), u64::MAX, &payloads);
        assert!(decode_run(&w).is_err());
    }

    fn digest() -> Digest {
        Digest {
            round: 9,
            flags: FLAG_WANT_REPLY,
            view_id: 0x1_0000_beef,
            senders: vec![
                SenderSummary {
                    origin: NodeId(3),
                    prefix: 4,
                    known: 20,
                    held: vec![2..5, 7..8, 10..20],
                },
                SenderSummary {
                    origin: NodeId(1),
                    prefix: 0,
                    known: 0,
                    held: vec![],
                },
            ],
            rows: vec![
                KnowledgeRow {
                    member: NodeId(1),
                    heartbeat: 77,
                },
                KnowledgeRow {
                    member: NodeId(3),
                    heartbeat: 5,
                },
            ],
            prefixes: vec![4, 0, 20, 0],
            updates: vec![],
        }
    }

    #[test]
    fn bodies_roundtrip_and_every_truncation_fails() {
        let d = digest();
        let mut b = Vec::new();
        d.encode(&mut b);
        assert_eq!(Digest::decode(&b).unwrap(), d);
        for n in 0..b.len() {
            assert!(Digest::decode(&b[..n]).is_err(), "{n}");
        }
        let s = Solicitation {
            round: 3,
            wanted: vec![(NodeId(2), 5..9), (NodeId(4), 0..1)],
        };
        let mut b = Vec::new();
        s.encode(&mut b);
        assert_eq!(Solicitation::decode(&b).unwrap(), s);
        for n in 0..b.len() {
            assert!(Solicitation::decode(&b[..n]).is_err(), "{n}");
        }
        let w = Welcome {
            starts: vec![(NodeId(1), 10), (NodeId(2), 0)],
            members: vec![(NodeId(5), 1, true), (NodeId(1), 3, false)],
        };
        let mut b = Vec::new();
        w.encode(&mut b);
        assert_eq!(Welcome::decode(&b).unwrap(), w);
        for n in 0..b.len() {
            assert!(Welcome::decode(&b[..n]).is_err(), "{n}");
        }
        let m = Members {
            want_reply: true,
            view_id: 42,
            entries: vec![(NodeId(5), 1, true)],
        };
        let mut b = Vec::new();
        m.encode(&mut b);
        assert_eq!(Members::decode(&b).unwrap(), m);
        for n in 0..b.len() {
            assert!(Members::decode(&b[..n]).is_err(), "{n}");
        }
        let mut b = Vec::new();
        encode_data(&mut b, NodeId(7), 11, b"xy");
        assert_eq!(decode_data(&b).unwrap(), (NodeId(7), 11, &b"xy"[..]));
        assert!(decode_data(&b[..DATA_FIXED - 1]).is_err());
    }

    #[test]
    fn hostile_digests_are_refused() {
        let mut b = Vec::new();
        digest().encode(&mut b);
        // Overlapping ranges (the second starts inside the first).
        let mut bad = b.clone();
        let second_range_start = DIGEST_FIXED - 2 + ORIGIN_FIXED + RANGE_LEN;
        bad[second_range_start..second_range_start + 8].copy_from_slice(&3u64.to_be_bytes());
        assert!(Digest::decode(&bad).is_err());
        // A range beyond what the sender says is known.
        let mut bad = b.clone();
        let known_at = DIGEST_FIXED - 2 + 4 + 8;
        bad[known_at..known_at + 8].copy_from_slice(&12u64.to_be_bytes());
        assert!(Digest::decode(&bad).is_err());
        // A sender count above the maximum.
        let mut bad = b.clone();
        bad[DIGEST_FIXED - 3] = (MAX_DIGEST_ORIGINS + 1) as u8;
        assert!(Digest::decode(&bad).is_err());
        // Unknown flags, and a trailing byte.
        let mut bad = b.clone();
        bad[4] = 0x80;
        assert!(Digest::decode(&bad).is_err());
        let mut bad = b.clone();
        bad.push(0);
        assert!(Digest::decode(&bad).is_err());
        // A member count the body cannot hold is refused before allocation.
        let mut m = Vec::new();
        Members {
            want_reply: false,
            view_id: 1,
            entries: vec![],
        }
        .encode(&mut m);
        let at = m.len() - 2;
        m[at..].copy_from_slice(&u16::MAX.to_be_bytes());
        assert_eq!(Members::decode(&m), Err(WireError::Truncated));
    }

    #[test]
    fn probes_and_digests_with_updates_roundtrip_and_bad_updates_are_refused() {
        let u = |m: u32, kind| Update {
            member: NodeId(m),
            version: 7,
            kind,
        };
        let p = Probe {
            id: 3,
            member: NodeId(5),
            updates: vec![
                u(1, UpdateKind::Alive),
                u(2, UpdateKind::Suspect),
                u(3, UpdateKind::Departed),
            ],
        };
        let mut b = Vec::new();
        p.encode(&mut b);
        assert_eq!(b.len(), PROBE_FIXED + 3 * UPDATE_LEN);
        assert_eq!(Probe::decode(&b).unwrap(), p);
        for n in 0..b.len() {
            assert!(Probe::decode(&b[..n]).is_err(), "{n}");
        }
        let mut bad = b.clone();
        *bad.last_mut().unwrap() = 3;
        assert!(Probe::decode(&bad).is_err(), "unknown kind");
        let mut bad = b.clone();
        bad[8] = (MAX_UPDATES + 1) as u8;
        assert!(Probe::decode(&bad).is_err(), "too many updates");
        let mut bad = b.clone();
        bad.push(0);
        assert!(Probe::decode(&bad).is_err(), "trailing byte");
        let mut d = digest();
        d.updates = p.updates.clone();
        let mut b = Vec::new();
        d.encode(&mut b);
        assert_eq!(b[4] & FLAG_UPDATES, FLAG_UPDATES);
        assert_eq!(Digest::decode(&b).unwrap(), d);
        for n in 0..b.len() {
            assert!(Digest::decode(&b[..n]).is_err(), "{n}");
        }
        // The flag without its updates, or updates without the flag.
        let mut plain = Vec::new();
        digest().encode(&mut plain);
        let mut bad = plain.clone();
        bad[4] |= FLAG_UPDATES;
        assert!(Digest::decode(&bad).is_err());
        let mut bad = b.clone();
        bad[4] &= !FLAG_UPDATES;
        assert!(Digest::decode(&bad).is_err());
    }
}
