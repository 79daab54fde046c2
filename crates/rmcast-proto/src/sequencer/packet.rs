//! Packet bodies of the sequencer engine (Amoeba paper, Fig. 12), after the common [`Header`].
//!
//! Amoeba's BC_BCAST carries one message; here a [`Body::Ordered`] datagram carries a run of
//! consecutive sequence numbers so that small messages are bundled under load, and every packet
//! from the sequencer piggybacks where acceptance and stability stand.

use crate::common::view::check_view;
pub use crate::common::view::{decode_view, encode_view};
use crate::engine::NodeId;
use crate::wire::{self, Header, Reader, WireError, WriteExt};

/// Packet types (the `ptype` header byte).
pub mod ptype {
    /// BC_BCASTREQ sent point to point to the sequencer (PB method).
    pub const BCAST_REQ_PB: u8 = 1;
    /// BC_BCASTREQ multicast to the group (BB method).
    pub const BCAST_REQ_BB: u8 = 2;
    /// BC_BCAST: a run of ordered entries (also the answer to BC_RETRANS).
    pub const ORDERED: u8 = 3;
    /// Accept: moves the acceptance point (r > 0).
    pub const ACCEPT: u8 = 4;
    /// BC_SYNC: the sequencer asks every member for its state.
    pub const SYNC: u8 = 5;
    /// BC_STATE / BC_ACK: a member's delivery and holding point.
    pub const STATUS: u8 = 6;
    /// BC_RETRANS: a member asks for the sequence numbers it lacks (a few ranges).
    pub const RETRANS: u8 = 7;
    /// BC_JOINREQ: multicast by a node that wants to join.
    pub const JOIN_REQ: u8 = 8;
    /// BC_LEAVEREQ: a member asks to leave.
    pub const LEAVE_REQ: u8 = 9;
    /// BC_ALIVEREQ: is the destination alive?
    pub const ALIVE_REQ: u8 = 10;
    /// BC_ALIVE: the answer to BC_ALIVEREQ.
    pub const ALIVE: u8 = 11;
    /// BC_REFORMREQ: a coordinator invites the members of the old group (recovery).
    pub const REFORM_REQ: u8 = 12;
    /// BC_VOTE: a member's vote for a coordinator, with the highest sequence number it holds.
    pub const VOTE: u8 = 13;
    /// BC_RESULT: the new group (incarnation, members, sequencer, where it starts).
    pub const RESULT: u8 = 14;
    /// BC_RESULTACK: a member installed the new group.
    pub const RESULT_ACK: u8 = 15;
    /// The sequencer asks a sender for requests it missed while later ones arrived (a fast
    /// retransmission: the later ones wait at the sequencer, so repeating only the missing ones
    /// at once saves the sender a timeout and a go-back-N).
    pub const REQ_GAP: u8 = 16;
    /// The sequencer refuses a join: the group holds as many members as it admits.
    pub const JOIN_REFUSED: u8 = 17;
    /// The sequencer holds a request the sender repeated, waiting for its turn (the history is
    /// full, or an earlier one is missing): the sender's timeout was the sequencer's queue,
    /// not a loss (Amoeba answers a duplicate request too, section 5.2).
    pub const QUEUED: u8 = 18;
}

/// Kind of an ordered entry.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// Application data (or a fragment of it).
    Data = 0,
    /// A member joined: the body is the new view.
    Join = 1,
    /// A member left: the body is the new view.
    Leave = 2,
    /// The group was rebuilt after a failure (BC_RESULT stored in the history): the body is
    /// the new view.
    Reset = 3,
}

/// What a BC_VOTE datagram says.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum VoteKind {
    /// A vote for `coordinator` (or, in an older incarnation, "what happened?").
    Vote = 0,
    /// To the coordinator the sender follows: `coordinator` is a better one.
    Forward = 1,
    /// From a coordinator that yielded, to a member that followed it: follow `coordinator`.
    Redirect = 2,
    /// From a joiner that a coordinator invited: its join is not known to it (it holds nothing
    /// of the group), and it gives up that join in this incarnation, so it never votes in it.
    /// The coordinator counts it out of the majority (see `recovery`).
    Joining = 3,
}

/// Bytes an ordered entry adds to its payload on the wire.
pub const ORDERED_ENTRY_OVERHEAD: usize = 1 + 1 + 4 + 8 + 2 + 2 + 2;
/// Bytes a request entry adds to its payload on the wire.
pub const REQ_ENTRY_OVERHEAD: usize = 8 + 2 + 2 + 2;
/// Bytes of the fixed part of an ordered packet after the header.
pub const ORDERED_FIXED: usize = 8 * 5 + 2;
/// Bytes of the fixed part of a request packet after the header.
pub const REQ_FIXED: usize = 8 * 3 + 2;
/// Ranges one BC_RETRANS names at most: a member with more holes joins the closest ones,
/// asking for the numbers between them too (see [`SeqRanges::insert`]), so a NACK stays small
/// (265 bytes of body).
pub const MAX_NACK_RANGES: usize = 16;
/// Sequence numbers one BC_RETRANS spans at most, from its first range's start to its last
/// range's end: the largest history window a group may have (`history_capacity_msgs` is at
/// most `u32::MAX`), as no member lacks more than its window holds.
pub const MAX_NACK_SPAN: u64 = u32::MAX as u64;

/// Sorted, disjoint, non-adjacent half-open ranges of sequence numbers, at most
/// [`MAX_NACK_RANGES`] of them: what a member lacks (the body of BC_RETRANS) and what the
/// sequencer owes it. Fixed size, so decoding allocates nothing.
///
/// Invariant: `r[..len]` is sorted, each range non-empty, and each ends before the next one
/// starts with at least one number between them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SeqRanges {
    len: u8,
    r: [(u64, u64); MAX_NACK_RANGES],
}

impl Default for SeqRanges {
    fn default() -> Self {
        SeqRanges {
            len: 0,
            r: [(0, 0); MAX_NACK_RANGES],
        }
    }
}

impl SeqRanges {
    /// No range.
    pub fn new() -> Self {
        SeqRanges::default()
    }

    /// The one range `[from, to)` (none when it is empty).
    pub fn single(from: u64, to: u64) -> Self {
        let mut s = SeqRanges::new();
        s.insert(from, to);
        s
    }

    /// The ranges, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.r[..self.len as usize].iter().copied()
    }

    /// How many ranges.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether there is no range.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first (lowest) range.
    pub fn first(&self) -> Option<(u64, u64)> {
        self.iter().next()
    }

    /// Sequence numbers in all ranges together.
    pub fn count(&self) -> u64 {
        self.iter().map(|(f, t)| t - f).sum()
    }

    /// Add `[from, to)`, merged with the ranges it touches. When that would make more than
    /// [`MAX_NACK_RANGES`] ranges, the two closest ones are joined (the numbers between them
    /// are taken in): the set only ever grows, so nothing asked for is lost.
    pub fn insert(&mut self, from: u64, to: u64) {
        if from >= to {
            return;
        }
        let n = self.len as usize;
        // Ranges before the new one (ending before it with a number between), and after it.
        let lo = self.r[..n].partition_point(|&(_, t)| t < from);
        let hi = self.r[..n].partition_point(|&(f, _)| f <= to);
        let (mut f, mut t) = (from, to);
        if lo < hi {
            f = f.min(self.r[lo].0);
            t = t.max(self.r[hi - 1].1);
        }
        let mut out = [(0u64, 0u64); MAX_NACK_RANGES + 1];
        out[..lo].copy_from_slice(&self.r[..lo]);
        out[lo] = (f, t);
        let tail = n - hi;
        out[lo + 1..lo + 1 + tail].copy_from_slice(&self.r[hi..n]);
        let mut m = lo + 1 + tail;
        if m > MAX_NACK_RANGES {
            // Join across the smallest hole between two neighbours.
            let i = (0..m - 1)
                .min_by_key(|&i| out[i + 1].0 - out[i].1)
                .unwrap_or(0);
            out[i].1 = out[i + 1].1;
            out.copy_within(i + 2..m, i + 1);
            m -= 1;
        }
        self.r.copy_from_slice(&out[..MAX_NACK_RANGES]);
        self.len = m as u8;
        debug_assert!(self.sorted());
    }

    /// Keep only what lies in `[lo, hi)`.
    pub fn clip(&mut self, lo: u64, hi: u64) {
        let mut out = SeqRanges::new();
        for (f, t) in self.iter() {
            let (f, t) = (f.max(lo), t.min(hi));
            if f < t {
                out.r[out.len as usize] = (f, t);
                out.len += 1;
            }
        }
        *self = out;
    }

    /// Forget the first range up to `to` (served from its start to there).
    pub fn consume_first(&mut self, to: u64) {
        if let Some((f, t)) = self.first() {
            if to >= t {
                self.r.copy_within(1..self.len as usize, 0);
                self.len -= 1;
            } else if to > f {
                self.r[0].0 = to;
            }
        }
    }

    /// The numbers in `self` and not in `other`; more, never fewer, when the result has more
    /// ranges than fit (see [`SeqRanges::insert`]).
    pub fn without(&self, other: &SeqRanges) -> SeqRanges {
        let mut out = SeqRanges::new();
        for (f, t) in self.iter() {
            let mut f = f;
            for (a, b) in other.iter() {
                if b <= f || a >= t {
                    continue;
                }
                out.insert(f, a.max(f));
                f = f.max(b);
            }
            out.insert(f, t);
        }
        out
    }

    /// Forget every range.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Whether the invariant holds.
    fn sorted(&self) -> bool {
        let r = &self.r[..self.len as usize];
        r.iter().all(|&(f, t)| f < t) && r.windows(2).all(|w| w[0].1 < w[1].0)
    }

    /// From the first range's start to the last one's end (0 when empty).
    pub fn span(&self) -> u64 {
        match (self.first(), self.iter().last()) {
            (Some(a), Some(b)) => b.1 - a.0,
            _ => 0,
        }
    }
}

/// One entry of an ordered run.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OrderedEntry<'a> {
    /// What the entry is.
    pub kind: EntryKind,
    /// Whether `payload` is present; a BB accept carries only the message's identity.
    pub has_payload: bool,
    /// Original sender (the joiner or leaver for membership entries).
    pub sender: NodeId,
    /// Sender's protocol number of this fragment.
    pub pnum: u64,
    /// Fragment index within the message.
    pub frag_index: u16,
    /// Number of fragments of the message (at least 1).
    pub frag_count: u16,
    /// Payload bytes, empty when `has_payload` is false.
    pub payload: &'a [u8],
}

/// One message (fragment) in a broadcast request.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ReqEntry<'a> {
    /// Sender's protocol number of this fragment (consecutive per sender).
    pub pnum: u64,
    /// Fragment index.
    pub frag_index: u16,
    /// Fragment count (at least 1).
    pub frag_count: u16,
    /// Payload.
    pub payload: &'a [u8],
}

/// Where the sequencer stands, piggybacked on all its packets.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct SeqState {
    /// Every sequence number below this is accepted (deliverable).
    pub accepted_next: u64,
    /// Every member has delivered below this: history below may be purged.
    pub stable: u64,
    /// Next sequence number the sequencer will assign.
    pub next_seq: u64,
    /// Every sequence number below this is held by as many members as a reset needs to go on
    /// (a majority of the view under the majority policy): a send below it is complete, since
    /// any group formed after a failure holds it.
    pub complete_next: u64,
}

/// A decoded body. Entries are decoded lazily from the borrowed bytes.
// A body lives on the stack for one datagram; a NACK's ranges (257 bytes) inline keep decoding
// free of allocation, which boxing them would not.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body<'a> {
    /// BC_BCASTREQ, PB or BB.
    BcastReq {
        /// Multicast (BB) rather than point to point (PB).
        bb: bool,
        /// Sender's next expected sequence number (piggybacked acknowledgement).
        expect: u64,
        /// Sender's contiguous holding point.
        held_next: u64,
        /// Highest own protocol number the sender has seen ordered: a sequencer that took over
        /// without having delivered those (they were ordered before it joined) learns where the
        /// sender's stream stands.
        ordered_through: u64,
        /// The entries.
        entries: ReqIter<'a>,
    },
    /// A run of ordered entries starting at `base_seq`.
    Ordered {
        /// The sequencer's state.
        state: SeqState,
        /// Sequence number of the first entry.
        base_seq: u64,
        /// The entries, for `base_seq`, `base_seq + 1`, ...
        entries: OrderedIter<'a>,
    },
    /// Acceptance moved.
    Accept(SeqState),
    /// Request for status.
    Sync(SeqState),
    /// A member's status.
    Status {
        /// Next sequence number to deliver.
        expect: u64,
        /// Contiguous holding point.
        held_next: u64,
        /// The member waits for its sends to complete and heard nothing new for a while: the
        /// sequencer answers with where the sequence stands (a lost BC_ACCEPT is not repeated
        /// otherwise).
        ask: bool,
    },
    /// Request for retransmission of what the member lacks.
    Retrans {
        /// The missing sequence numbers: one to [`MAX_NACK_RANGES`] ranges, none below
        /// `expect`, spanning at most [`MAX_NACK_SPAN`].
        ranges: SeqRanges,
        /// Next sequence number to deliver.
        expect: u64,
    },
    /// The sequencer lacks the sender's requests `[from, to)` (protocol numbers).
    ReqGap {
        /// First missing protocol number.
        from: u64,
        /// One past the last missing one.
        to: u64,
    },
    /// The sequencer holds the sender's request `pnum` (and waits to order it).
    Queued {
        /// The protocol number of the repeated request it holds.
        pnum: u64,
    },
    /// Request to join. A node merging its group into another names a member of that group
    /// (`into`), so that other groups of the same name that hear the request leave it alone.
    JoinReq {
        /// A member of the group that is to admit the joiner; `None`: whichever group hears it.
        into: Option<NodeId>,
    },
    /// A join refused: the group already holds `limit` members, the most it admits.
    JoinRefused {
        /// The most members the group admits.
        limit: u32,
    },
    /// Request to leave.
    LeaveReq {
        /// Next sequence number to deliver.
        expect: u64,
    },
    /// BC_ALIVEREQ: is the destination alive? `token` is 0 for the failure detector's probes;
    /// a sequencer that stood still asks with a fresh token whether it still orders (see
    /// `Fence` in the ordering part).
    AliveReq {
        /// Echoed in the answer.
        token: u32,
    },
    /// BC_ALIVE: the answer, with the probe's token.
    Alive {
        /// The token of the probe answered.
        token: u32,
    },
    /// BC_REFORMREQ: an invitation to the new group.
    ReformReq {
        /// The coordinator's own contiguous holding point (its vote).
        held_next: u64,
        /// Phase 2: every member must hold everything below this; 0 in phase 1.
        target: u64,
        /// The member whose failure started the recovery.
        suspect: NodeId,
        /// The invitation round (a vote names the round it answers).
        round: u32,
        /// Milliseconds between the coordinator's rounds: its participants wait a number of
        /// these, not of their own, before they count it as gone.
        interval_ms: u32,
    },
    /// BC_VOTE.
    Vote {
        /// The coordinator voted for.
        coordinator: NodeId,
        /// That coordinator's holding point as it advertised it.
        coordinator_held: u64,
        /// The voter's contiguous holding point.
        held_next: u64,
        /// The voter's next sequence number to deliver.
        expect: u64,
        /// The lowest sequence number the voter still holds (its history's base): what it
        /// can repair from. Delivered entries stay held until they are stable, so this is
        /// often far below `expect`.
        base: u64,
        /// The invitation round this vote answers (0 when it answers none).
        round: u32,
        /// A vote, or word of a better coordinator.
        kind: VoteKind,
    },
    /// BC_RESULT.
    Result {
        /// The new incarnation.
        incarnation: u32,
        /// Sequence number of the reset entry; the new group holds everything below it.
        seq: u64,
        /// Every member of the new group delivered everything below this.
        stable: u64,
        /// The new group has a running sequencer (every member acknowledged); false while its
        /// coordinator still waits for acknowledgements.
        settled: bool,
        /// The new view, encoded as in a membership entry (see [`decode_view`]).
        view: &'a [u8],
    },
    /// BC_RESULTACK.
    ResultAck {
        /// The incarnation installed.
        incarnation: u32,
        /// The member's last protocol number ordered below the reset: the new sequencer
        /// continues its duplicate detection from there.
        last_pnum: u64,
        /// The member's next fragment continues a message begun below the reset.
        mid_message: bool,
    },
}

/// Lazily decoded ordered entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderedIter<'a> {
    r: Reader<'a>,
    left: u16,
}

impl<'a> Iterator for OrderedIter<'a> {
    type Item = OrderedEntry<'a>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Validated by `decode_body`, so these reads cannot fail.
        read_ordered_entry(&mut self.r).ok()
    }
}

/// Lazily decoded request entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReqIter<'a> {
    r: Reader<'a>,
    left: u16,
}

impl<'a> Iterator for ReqIter<'a> {
    type Item = ReqEntry<'a>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        read_req_entry(&mut self.r).ok()
    }
}

fn read_ordered_entry<'a>(r: &mut Reader<'a>) -> Result<OrderedEntry<'a>, WireError> {
    let kind = match r.u8()? {
        0 => EntryKind::Data,
        1 => EntryKind::Join,
        2 => EntryKind::Leave,
        3 => EntryKind::Reset,
        _ => return Err(WireError::BadValue("entry kind")),
    };
    let has_payload = read_flag(r, "entry flags")?;
    let sender = NodeId(r.u32()?);
    let pnum = r.u64()?;
    let frag_index = r.u16()?;
    let frag_count = r.u16()?;
    // A message's fragments are numbered on from its first one's protocol number, so a
    // fragment's number is at least its index (else the message would start below zero).
    if frag_count == 0 || frag_index >= frag_count || pnum < u64::from(frag_index) {
        return Err(WireError::BadValue("fragment"));
    }
    let len = r.u16()? as usize;
    if !has_payload && len != 0 {
        return Err(WireError::BadValue("entry length"));
    }
    let payload = r.bytes(len)?;
    Ok(OrderedEntry {
        kind,
        has_payload,
        sender,
        pnum,
        frag_index,
        frag_count,
        payload,
    })
}

/// A byte that must be 0 or 1.
fn read_flag(r: &mut Reader<'_>, what: &'static str) -> Result<bool, WireError> {
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(WireError::BadValue(what)),
    }
}

fn read_req_entry<'a>(r: &mut Reader<'a>) -> Result<ReqEntry<'a>, WireError> {
    let pnum = r.u64()?;
    let frag_index = r.u16()?;
    let frag_count = r.u16()?;
    // A message's fragments are numbered on from its first one's protocol number, so a
    // fragment's number is at least its index (else the message would start below zero).
    if frag_count == 0 || frag_index >= frag_count || pnum < u64::from(frag_index) {
        return Err(WireError::BadValue("fragment"));
    }
    let len = r.u16()? as usize;
    let payload = r.bytes(len)?;
    Ok(ReqEntry {
        pnum,
        frag_index,
        frag_count,
        payload,
    })
}

fn read_state(r: &mut Reader<'_>) -> Result<SeqState, WireError> {
    let s = SeqState {
        accepted_next: r.u64()?,
        stable: r.u64()?,
        next_seq: r.u64()?,
        complete_next: r.u64()?,
    };
    if s.accepted_next > s.next_seq
        || s.complete_next > s.accepted_next
        || s.stable > s.complete_next
    {
        return Err(WireError::BadValue("sequencer state"));
    }
    Ok(s)
}

/// Decode the body of a sequencer packet. Validates every entry up front, so a packet is either
/// wholly usable or rejected. Never panics and allocates nothing.
pub fn decode_body(ptype: u8, body: &[u8]) -> Result<Body<'_>, WireError> {
    let mut r = Reader::new(body);
    let out = match ptype {
        ptype::BCAST_REQ_PB | ptype::BCAST_REQ_BB => {
            let expect = r.u64()?;
            let held_next = r.u64()?;
            let ordered_through = r.u64()?;
            let n = r.u16()?;
            let start = r.clone();
            for _ in 0..n {
                read_req_entry(&mut r)?;
            }
            Body::BcastReq {
                bb: ptype == ptype::BCAST_REQ_BB,
                expect,
                held_next,
                ordered_through,
                entries: ReqIter { r: start, left: n },
            }
        }
        ptype::ORDERED => {
            let state = read_state(&mut r)?;
            let base_seq = r.u64()?;
            let n = r.u16()?;
            let start = r.clone();
            for _ in 0..n {
                read_ordered_entry(&mut r)?;
            }
            if base_seq.checked_add(n as u64).is_none() {
                return Err(WireError::BadValue("base_seq"));
            }
            Body::Ordered {
                state,
                base_seq,
                entries: OrderedIter { r: start, left: n },
            }
        }
        ptype::ACCEPT => Body::Accept(read_state(&mut r)?),
        ptype::SYNC => Body::Sync(read_state(&mut r)?),
        ptype::STATUS => Body::Status {
            expect: r.u64()?,
            held_next: r.u64()?,
            ask: match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err(WireError::BadValue("status ask")),
            },
        },
        ptype::RETRANS => {
            let expect = r.u64()?;
            let n = r.u8()? as usize;
            if n == 0 || n > MAX_NACK_RANGES {
                return Err(WireError::BadValue("retrans range count"));
            }
            let mut ranges = SeqRanges::new();
            for i in 0..n {
                ranges.r[i] = (r.u64()?, r.u64()?);
            }
            ranges.len = n as u8;
            // Canonical only: sorted, disjoint, not adjacent, within one history window, and
            // nothing the member already delivered (its holes lie at or after `expect`).
            if !ranges.sorted()
                || ranges.span() > MAX_NACK_SPAN
                || ranges.first().is_some_and(|(f, _)| f < expect)
            {
                return Err(WireError::BadValue("retrans ranges"));
            }
            Body::Retrans { ranges, expect }
        }
        ptype::REQ_GAP => {
            let from = r.u64()?;
            let to = r.u64()?;
            if from >= to {
                return Err(WireError::BadValue("request gap"));
            }
            Body::ReqGap { from, to }
        }
        ptype::QUEUED => Body::Queued { pnum: r.u64()? },
        // A flag and the sequencer wanted (0 when any group will do).
        ptype::JOIN_REQ => {
            let targeted = read_flag(&mut r, "join target flag")?;
            let id = r.u32()?;
            if !targeted && id != 0 {
                return Err(WireError::BadValue("join target"));
            }
            Body::JoinReq {
                into: targeted.then_some(NodeId(id)),
            }
        }
        ptype::JOIN_REFUSED => Body::JoinRefused { limit: r.u32()? },
        ptype::LEAVE_REQ => Body::LeaveReq { expect: r.u64()? },
        ptype::ALIVE_REQ => Body::AliveReq { token: r.u32()? },
        ptype::ALIVE => Body::Alive { token: r.u32()? },
        ptype::REFORM_REQ => Body::ReformReq {
            held_next: r.u64()?,
            target: r.u64()?,
            suspect: NodeId(r.u32()?),
            round: r.u32()?,
            interval_ms: r.u32()?,
        },
        ptype::VOTE => Body::Vote {
            coordinator: NodeId(r.u32()?),
            coordinator_held: r.u64()?,
            held_next: r.u64()?,
            expect: r.u64()?,
            base: r.u64()?,
            round: r.u32()?,
            kind: match r.u8()? {
                0 => VoteKind::Vote,
                1 => VoteKind::Forward,
                2 => VoteKind::Redirect,
                3 => VoteKind::Joining,
                _ => return Err(WireError::BadValue("vote kind")),
            },
        },
        ptype::RESULT => {
            let incarnation = r.u32()?;
            let seq = r.u64()?;
            let stable = r.u64()?;
            if stable > seq {
                return Err(WireError::BadValue("result stable"));
            }
            let settled = read_flag(&mut r, "result flags")?;
            let len = r.u16()? as usize;
            let view = r.bytes(len)?;
            check_view(view)?;
            Body::Result {
                incarnation,
                seq,
                stable,
                settled,
                view,
            }
        }
        ptype::RESULT_ACK => Body::ResultAck {
            incarnation: r.u32()?,
            last_pnum: r.u64()?,
            mid_message: read_flag(&mut r, "result ack flags")?,
        },
        other => return Err(WireError::BadType(other)),
    };
    r.finish()?;
    Ok(out)
}

/// Decode a whole sequencer datagram: header and body.
pub fn decode(datagram: &[u8]) -> Result<(Header, Body<'_>), WireError> {
    let p = wire::decode(datagram)?;
    if p.header.engine != wire::EngineKind::Sequencer {
        return Err(WireError::BadEngine(p.header.engine as u8));
    }
    Ok((p.header, decode_body(p.header.ptype, p.body)?))
}

/// Builds an ordered packet entry by entry into a caller's buffer.
pub struct OrderedWriter<'b> {
    buf: &'b mut Vec<u8>,
    count_at: usize,
    count: u16,
}

impl<'b> OrderedWriter<'b> {
    /// Start an ordered packet: header and fixed part are written now.
    pub fn new(buf: &'b mut Vec<u8>, header: &Header, state: SeqState, base_seq: u64) -> Self {
        buf.clear();
        header.encode(buf);
        buf.put_u64(state.accepted_next);
        buf.put_u64(state.stable);
        buf.put_u64(state.next_seq);
        buf.put_u64(state.complete_next);
        buf.put_u64(base_seq);
        let count_at = buf.len();
        buf.put_u16(0);
        OrderedWriter {
            buf,
            count_at,
            count: 0,
        }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether no entry was written yet.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Append an entry; `payload` is `None` for a BB accept.
    pub fn push(&mut self, e: &OrderedEntry<'_>) {
        assert!(e.payload.len() <= u16::MAX as usize);
        self.buf.push(e.kind as u8);
        self.buf.push(e.has_payload as u8);
        self.buf.put_u32(e.sender.0);
        self.buf.put_u64(e.pnum);
        self.buf.put_u16(e.frag_index);
        self.buf.put_u16(e.frag_count);
        let p = if e.has_payload { e.payload } else { &[] };
        self.buf.put_u16(p.len() as u16);
        self.buf.extend_from_slice(p);
        self.count += 1;
        self.buf[self.count_at..self.count_at + 2].copy_from_slice(&self.count.to_be_bytes());
    }
}

/// Builds a broadcast request entry by entry into a caller's buffer.
pub struct ReqWriter<'b> {
    buf: &'b mut Vec<u8>,
    count_at: usize,
    count: u16,
}

impl<'b> ReqWriter<'b> {
    /// Start a request (header's ptype says PB or BB).
    pub fn new(
        buf: &'b mut Vec<u8>,
        header: &Header,
        expect: u64,
        held_next: u64,
        ordered_through: u64,
    ) -> Self {
        buf.clear();
        header.encode(buf);
        buf.put_u64(expect);
        buf.put_u64(held_next);
        buf.put_u64(ordered_through);
        let count_at = buf.len();
        buf.put_u16(0);
        ReqWriter {
            buf,
            count_at,
            count: 0,
        }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether no entry was written yet.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Append an entry.
    pub fn push(&mut self, e: &ReqEntry<'_>) {
        assert!(e.payload.len() <= u16::MAX as usize);
        self.buf.put_u64(e.pnum);
        self.buf.put_u16(e.frag_index);
        self.buf.put_u16(e.frag_count);
        self.buf.put_u16(e.payload.len() as u16);
        self.buf.extend_from_slice(e.payload);
        self.count += 1;
        self.buf[self.count_at..self.count_at + 2].copy_from_slice(&self.count.to_be_bytes());
    }
}

/// Encode a packet with no entries.
pub fn encode_control(buf: &mut Vec<u8>, header: &Header, body: &Body<'_>) {
    buf.clear();
    header.encode(buf);
    match *body {
        Body::Accept(s) | Body::Sync(s) => {
            buf.put_u64(s.accepted_next);
            buf.put_u64(s.stable);
            buf.put_u64(s.next_seq);
            buf.put_u64(s.complete_next);
        }
        Body::Status {
            expect,
            held_next,
            ask,
        } => {
            buf.put_u64(expect);
            buf.put_u64(held_next);
            buf.push(ask as u8);
        }
        Body::Retrans { ranges, expect } => {
            assert!(!ranges.is_empty(), "a NACK names what it lacks");
            buf.put_u64(expect);
            buf.push(ranges.len);
            for (f, t) in ranges.iter() {
                buf.put_u64(f);
                buf.put_u64(t);
            }
        }
        Body::ReqGap { from, to } => {
            buf.put_u64(from);
            buf.put_u64(to);
        }
        Body::Queued { pnum } => buf.put_u64(pnum),
        Body::JoinReq { into } => {
            buf.push(u8::from(into.is_some()));
            buf.put_u32(into.map_or(0, |n| n.0));
        }
        Body::JoinRefused { limit } => buf.put_u32(limit),
        Body::LeaveReq { expect } => buf.put_u64(expect),
        Body::AliveReq { token } | Body::Alive { token } => buf.put_u32(token),
        Body::ReformReq {
            held_next,
            target,
            suspect,
            round,
            interval_ms,
        } => {
            buf.put_u64(held_next);
            buf.put_u64(target);
            buf.put_u32(suspect.0);
            buf.put_u32(round);
            buf.put_u32(interval_ms);
        }
        Body::Vote {
            coordinator,
            coordinator_held,
            held_next,
            expect,
            base,
            round,
            kind,
        } => {
            buf.put_u32(coordinator.0);
            buf.put_u64(coordinator_held);
            buf.put_u64(held_next);
            buf.put_u64(expect);
            buf.put_u64(base);
            buf.put_u32(round);
            buf.push(kind as u8);
        }
        Body::Result {
            incarnation,
            seq,
            stable,
            settled,
            view,
        } => {
            assert!(view.len() <= u16::MAX as usize);
            buf.put_u32(incarnation);
            buf.put_u64(seq);
            buf.put_u64(stable);
            buf.push(settled as u8);
            buf.put_u16(view.len() as u16);
            buf.extend_from_slice(view);
        }
        Body::ResultAck {
            incarnation,
            last_pnum,
            mid_message,
        } => {
            buf.put_u32(incarnation);
            buf.put_u64(last_pnum);
            buf.push(mid_message as u8);
        }
        Body::BcastReq { .. } | Body::Ordered { .. } => {
            unreachable!("entries are written with OrderedWriter / ReqWriter")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::EngineKind;

    fn hdr(ptype: u8) -> Header {
        Header {
            engine: EngineKind::Sequencer,
            ptype,
            flags: 0,
            group: 1,
            incarnation: 0,
            sender: NodeId(5),
        }
    }

    #[test]
    fn ranges_without_others() {
        let mut a = SeqRanges::single(0, 10);
        a.insert(20, 30);
        let mut b = SeqRanges::single(2, 4);
        b.insert(8, 22);
        let c = a.without(&b);
        assert_eq!(c.iter().collect::<Vec<_>>(), vec![(0, 2), (4, 8), (22, 30)]);
        assert_eq!(a.without(&SeqRanges::new()), a);
        assert!(b.without(&SeqRanges::single(0, 40)).is_empty());
    }

    #[test]
    fn ordered_roundtrip() {
        let mut buf = Vec::new();
        let st = SeqState {
            accepted_next: 10,
            stable: 3,
            next_seq: 12,
            complete_next: 8,
        };
        let mut w = OrderedWriter::new(&mut buf, &hdr(ptype::ORDERED), st, 10);
        let a = OrderedEntry {
            kind: EntryKind::Data,
            has_payload: true,
            sender: NodeId(7),
            pnum: 99,
            frag_index: 0,
            frag_count: 1,
            payload: b"hello",
        };
        let b = OrderedEntry {
            has_payload: false,
            payload: b"",
            pnum: 100,
            ..a
        };
        w.push(&a);
        w.push(&b);
        let (h, body) = decode(&buf).unwrap();
        assert_eq!(h, hdr(ptype::ORDERED));
        match body {
            Body::Ordered {
                state,
                base_seq,
                entries,
            } => {
                assert_eq!(state, st);
                assert_eq!(base_seq, 10);
                assert_eq!(entries.collect::<Vec<_>>(), vec![a, b]);
            }
            other => panic!("{other:?}"),
        }
        // Every truncation is an error, never a panic.
        for n in 0..buf.len() {
            assert!(decode(&buf[..n]).is_err());
        }
    }

    #[test]
    fn req_and_control_roundtrip() {
        let mut view = Vec::new();
        encode_view(&mut view, 4, NodeId(2), &[NodeId(2), NodeId(3)]);
        let mut buf = Vec::new();
        let mut w = ReqWriter::new(&mut buf, &hdr(ptype::BCAST_REQ_BB), 4, 6, 3);
        let e = ReqEntry {
            pnum: 1,
            frag_index: 1,
            frag_count: 3,
            payload: b"xyz",
        };
        w.push(&e);
        match decode(&buf).unwrap().1 {
            Body::BcastReq {
                bb,
                expect,
                held_next,
                ordered_through,
                entries,
            } => {
                assert!(bb);
                assert_eq!((expect, held_next, ordered_through), (4, 6, 3));
                assert_eq!(entries.collect::<Vec<_>>(), vec![e]);
            }
            other => panic!("{other:?}"),
        }
        for body in [
            Body::Status {
                expect: 1,
                held_next: 2,
                ask: true,
            },
            Body::Retrans {
                ranges: SeqRanges::single(1, 5),
                expect: 1,
            },
            Body::Retrans {
                ranges: {
                    let mut r = SeqRanges::new();
                    for i in 0..MAX_NACK_RANGES as u64 {
                        r.insert(10 + 3 * i, 11 + 3 * i);
                    }
                    r
                },
                expect: 2,
            },
            Body::ReqGap { from: 3, to: 7 },
            Body::Queued { pnum: 5 },
            Body::JoinReq { into: None },
            Body::JoinReq {
                into: Some(NodeId(4)),
            },
            Body::LeaveReq { expect: 9 },
            Body::JoinRefused { limit: 256 },
            Body::AliveReq { token: 0 },
            Body::Alive { token: 7 },
            Body::ReformReq {
                held_next: 7,
                target: 9,
                suspect: NodeId(3),
                round: 4,
                interval_ms: 100,
            },
            Body::Vote {
                coordinator: NodeId(2),
                coordinator_held: 8,
                held_next: 7,
                expect: 5,
                base: 3,
                round: 4,
                kind: VoteKind::Forward,
            },
            Body::Result {
                incarnation: 2,
                seq: 40,
                stable: 30,
                settled: true,
                view: &view,
            },
            Body::ResultAck {
                incarnation: 2,
                last_pnum: 77,
                mid_message: true,
            },
            Body::Sync(SeqState {
                accepted_next: 2,
                stable: 1,
                next_seq: 3,
                complete_next: 1,
            }),
        ] {
            let t = match body {
                Body::Status { .. } => ptype::STATUS,
                Body::Retrans { .. } => ptype::RETRANS,
                Body::ReqGap { .. } => ptype::REQ_GAP,
                Body::Queued { .. } => ptype::QUEUED,
                Body::JoinReq { .. } => ptype::JOIN_REQ,
                Body::LeaveReq { .. } => ptype::LEAVE_REQ,
                Body::JoinRefused { .. } => ptype::JOIN_REFUSED,
                Body::AliveReq { .. } => ptype::ALIVE_REQ,
                Body::Alive { .. } => ptype::ALIVE,
                Body::ReformReq { .. } => ptype::REFORM_REQ,
                Body::Vote { .. } => ptype::VOTE,
                Body::Result { .. } => ptype::RESULT,
                Body::ResultAck { .. } => ptype::RESULT_ACK,
                _ => ptype::SYNC,
            };
            encode_control(&mut buf, &hdr(t), &body);
            assert_eq!(decode(&buf).unwrap().1, body);
            for n in 0..buf.len() {
                assert!(decode(&buf[..n]).is_err());
            }
        }
    }

    #[test]
    fn seq_ranges_merge_and_stay_bounded() {
        let mut r = SeqRanges::new();
        r.insert(10, 12);
        r.insert(20, 22);
        r.insert(5, 6);
        assert_eq!(r.iter().collect::<Vec<_>>(), [(5, 6), (10, 12), (20, 22)]);
        // Adjacent and overlapping ranges merge; empty ones are ignored.
        r.insert(12, 13);
        r.insert(6, 10);
        r.insert(30, 30);
        assert_eq!(r.iter().collect::<Vec<_>>(), [(5, 13), (20, 22)]);
        r.insert(0, 100);
        assert_eq!(r.iter().collect::<Vec<_>>(), [(0, 100)]);
        // Beyond the bound, the two closest ranges are joined: nothing is dropped.
        let mut r = SeqRanges::new();
        for i in 0..MAX_NACK_RANGES as u64 {
            r.insert(100 * i, 100 * i + 1);
        }
        r.insert(1005, 1006);
        assert_eq!(r.len(), MAX_NACK_RANGES);
        assert!(r.iter().any(|x| x == (1000, 1006)));
        assert_eq!(r.count(), MAX_NACK_RANGES as u64 - 1 + 6);
        r.clip(150, 1003);
        assert_eq!(r.first(), Some((200, 201)));
        assert_eq!(r.iter().last(), Some((1000, 1003)));
        r.consume_first(201);
        assert_eq!(r.first(), Some((300, 301)));
        r.consume_first(300);
        assert_eq!(r.first(), Some((300, 301)));
        r.clear();
        assert!(r.is_empty() && r.span() == 0);
    }

    #[test]
    fn retrans_refuses_impossible_ranges() {
        let body = |expect: u64, n: u8, ranges: &[(u64, u64)]| {
            let mut buf = Vec::new();
            hdr(ptype::RETRANS).encode(&mut buf);
            buf.put_u64(expect);
            buf.push(n);
            for &(f, t) in ranges {
                buf.put_u64(f);
                buf.put_u64(t);
            }
            decode(&buf).is_ok()
        };
        assert!(body(3, 2, &[(3, 5), (7, 9)]));
        let too_many: Vec<(u64, u64)> = (0..17).map(|i| (2 * i, 2 * i + 1)).collect();
        for (expect, n, ranges) in [
            (0, 0, &[][..]),                       // nothing asked
            (0, 17, &too_many[..]),                // more ranges than a NACK names
            (0, 1, &[(5, 5)][..]),                 // an empty range
            (0, 1, &[(6, 5)][..]),                 // a reversed one
            (0, 2, &[(7, 9), (3, 5)][..]),         // out of order
            (0, 2, &[(3, 6), (5, 9)][..]),         // overlapping
            (0, 2, &[(3, 5), (5, 9)][..]),         // adjacent: one range
            (4, 1, &[(3, 5)][..]),                 // below what the member delivered
            (0, 1, &[(0, MAX_NACK_SPAN + 1)][..]), // wider than any history window
            (0, 2, &[(3, 5)][..]),                 // fewer ranges than announced
        ] {
            assert!(
                !body(expect, n, ranges),
                "{expect} {n} {ranges:?} must be refused"
            );
        }
    }

    #[test]
    fn view_roundtrip() {
        let mut buf = Vec::new();
        encode_view(&mut buf, 3, NodeId(1), &[NodeId(1), NodeId(2)]);
        assert_eq!(
            decode_view(&buf).unwrap(),
            (3, NodeId(1), vec![NodeId(1), NodeId(2)])
        );
        assert!(decode_view(&buf[..buf.len() - 1]).is_err());
    }
}
