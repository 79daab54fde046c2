//! Packet bodies of the transaction engine, after the common header ([`crate::wire::Header`]).
//!
//! The Multidriver carries its control information as XTP tagged data multiplexed with user
//! data (section 3.3, Figure 2); here each control function is a field of a small packet of its
//! own, with the control byte's flags kept as they are in the paper. Every body starts with the
//! **forward channel key**: the source's epoch (drawn at random when its engine starts, so that
//! a restarted node's transactions are never taken for its old ones) and the transaction number
//! (what the source's `submit` returned). The header's sender says who sent the datagram: the
//! source on the forward channel, a receiver on its response channel.
//!
//! Decoding never panics and never allocates from a length field: data borrows from the input.

use crate::engine::NodeId;
use crate::wire::{Reader, WireError, WriteExt};

/// Connection establishment (the FIRST packet of the forward channel), multicast: names the set
/// size and the backoff unit the receivers use before opening their response channel, the
/// message length, and carries the first data segment.
pub const FIRST: u8 = 1;
/// A data segment of the forward channel, multicast.
pub const DATA: u8 = 2;
/// A control request of the source, multicast (section 3.3's control byte).
pub const CNTL: u8 = 3;
/// A receiver's report on its response channel, unicast to the source: next byte expected,
/// last byte it will accept, BURST and RATE. The first one opens the response channel.
pub const STATUS: u8 = 4;
/// The source's answer to a response channel's opening: in the transaction's set or not.
pub const ACCEPT: u8 = 5;
/// A segment of a receiver's reply stream (X_MRreply), unicast to the source.
pub const REPLY: u8 = 6;
/// The source's cumulative acknowledgement of a reply stream.
pub const REPLY_ACK: u8 = 7;
/// An unreliable multicast message (X_Mopen): no response channel, no repair.
pub const UDATA: u8 = 8;
/// A receiver holding a complete, unreleased message whose source went silent asks the group
/// what became of the transaction.
pub const QUERY: u8 = 9;
/// The answer to a [`QUERY`]: the transaction was released (committed) or aborted.
pub const RESOLVE: u8 = 10;

/// [`FIRST`] flag: the use-backoff flag, every packet of the response channel is sent after a
/// random backoff, not only the first.
pub const FIRST_USE_BACKOFF: u8 = 0x01;
/// [`DATA`] flag: the flow/error control request (report next expected and last accepted byte).
pub const DATA_SREQ: u8 = 0x01;

/// [`CNTL`] flag (1): flow/error control request.
pub const CNTL_SREQ: u8 = 0x01;
/// [`CNTL`] flag (3): rate control request (report BURST and RATE).
pub const CNTL_RREQ: u8 = 0x02;
/// [`CNTL`] flag (4): deliver-to, do not deliver beyond [`Cntl::deliver_to`].
pub const CNTL_DELIVER_TO: u8 = 0x04;
/// [`CNTL`] flag (5): use-backoff, with [`Cntl::backoff_unit_us`] and [`Cntl::set_size`].
pub const CNTL_USE_BACKOFF: u8 = 0x08;
/// [`CNTL`] flag: the transaction is aborted; receivers discard what they hold of it.
pub const CNTL_ABORT: u8 = 0x10;
/// [`CNTL`] flag: X_MRclose, both directions are closed.
pub const CNTL_CLOSE: u8 = 0x20;
const CNTL_ALL: u8 = 0x3f;

/// [`STATUS`] flag: sent because a segment arrived out of order (a gap; go back).
pub const STATUS_GAP: u8 = 0x01;
/// [`STATUS`] flag: the message was delivered (the deliver-to point covers it).
pub const STATUS_DELIVERED: u8 = 0x02;
/// [`STATUS`] flag: the receiver knows it is in the set (it saw an [`ACCEPT`]).
pub const STATUS_ACCEPTED: u8 = 0x04;
/// [`STATUS`] flag: the receiver closed its receive context (left): drop it from the set.
pub const STATUS_CLOSED: u8 = 0x08;
const STATUS_ALL: u8 = 0x0f;

/// [`REPLY`] flags: none defined (the reply stream carries length-prefixed messages, so
/// boundaries survive any segmentation); reserved bits must be zero.
pub const REPLY_FLAGS: u8 = 0x00;

/// [`RESOLVE`] outcome: released (committed).
pub const OUTCOME_RELEASED: u8 = 1;
/// [`RESOLVE`] outcome: aborted.
pub const OUTCOME_ABORTED: u8 = 2;

/// Identifies one transaction of one source: `(epoch, txn)`; the source is the header's sender
/// on the forward channel.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// The source engine's epoch.
    pub epoch: u32,
    /// The transaction number.
    pub txn: u64,
}

fn put_key(b: &mut Vec<u8>, k: Key) {
    b.put_u32(k.epoch);
    b.put_u64(k.txn);
}

fn key(r: &mut Reader<'_>) -> Result<Key, WireError> {
    Ok(Key {
        epoch: r.u32()?,
        txn: r.u64()?,
    })
}

/// The FIRST packet: connection establishment plus the first segment.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct First<'a> {
    /// The transaction.
    pub key: Key,
    /// [`FIRST_USE_BACKOFF`].
    pub flags: u8,
    /// The multicast set size the source expects (BACKOFF_TIME grows with it).
    pub set_size: u16,
    /// BACKOFF_TIME per receiver of the set, in microseconds.
    pub backoff_unit_us: u32,
    /// The message's length in bytes.
    pub total: u32,
    /// Bytes `0..data.len()` of the message.
    pub data: &'a [u8],
}

/// Append a FIRST body.
pub fn encode_first(b: &mut Vec<u8>, f: &First<'_>) {
    put_key(b, f.key);
    b.push(f.flags);
    b.put_u16(f.set_size);
    b.put_u32(f.backoff_unit_us);
    b.put_u32(f.total);
    b.extend_from_slice(f.data);
}

/// Decode a FIRST body.
pub fn decode_first(body: &[u8]) -> Result<First<'_>, WireError> {
    let mut r = Reader::new(body);
    let key = key(&mut r)?;
    let flags = r.u8()?;
    if flags & !FIRST_USE_BACKOFF != 0 {
        return Err(WireError::BadValue("first flags"));
    }
    let f = First {
        key,
        flags,
        set_size: r.u16()?,
        backoff_unit_us: r.u32()?,
        total: r.u32()?,
        data: r.rest(),
    };
    if f.data.len() as u64 > u64::from(f.total) {
        return Err(WireError::BadValue("first data beyond total"));
    }
    Ok(f)
}

/// A DATA packet: one segment of the forward channel.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Data<'a> {
    /// The transaction.
    pub key: Key,
    /// [`DATA_SREQ`].
    pub flags: u8,
    /// Byte offset of `data` in the message.
    pub offset: u32,
    /// The bytes.
    pub data: &'a [u8],
}

/// Append a DATA body.
pub fn encode_data(b: &mut Vec<u8>, d: &Data<'_>) {
    put_key(b, d.key);
    b.push(d.flags);
    b.put_u32(d.offset);
    b.extend_from_slice(d.data);
}

/// Decode a DATA body.
pub fn decode_data(body: &[u8]) -> Result<Data<'_>, WireError> {
    let mut r = Reader::new(body);
    let key = key(&mut r)?;
    let flags = r.u8()?;
    if flags & !DATA_SREQ != 0 {
        return Err(WireError::BadValue("data flags"));
    }
    let d = Data {
        key,
        flags,
        offset: r.u32()?,
        data: r.rest(),
    };
    within_u32(d.offset, d.data)?;
    Ok(d)
}

/// A control request of the source (section 3.3's control byte and its fields).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Cntl {
    /// The transaction.
    pub key: Key,
    /// `CNTL_*` flags.
    pub flags: u8,
    /// With [`CNTL_DELIVER_TO`]: deliver nothing beyond this byte.
    pub deliver_to: u32,
    /// With [`CNTL_USE_BACKOFF`]: BACKOFF_TIME per receiver, in microseconds.
    pub backoff_unit_us: u32,
    /// With [`CNTL_USE_BACKOFF`]: the set size.
    pub set_size: u16,
    /// The request's number (with [`CNTL_SREQ`]), echoed by the reports that answer it: a
    /// report echoing it describes everything sent before it.
    pub probe: u32,
}

/// Whether `id` is among the node ids of a set field (4 bytes each, as
/// [`encode_cntl`] and [`encode_resolve`] append them): read in place, never allocated.
pub fn set_contains(set: &[u8], id: NodeId) -> bool {
    set.chunks_exact(4)
        .any(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) == id.0)
}

fn put_set(b: &mut Vec<u8>, set: &[NodeId]) {
    for id in set {
        b.put_u32(id.0);
    }
}

fn set_field<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], WireError> {
    let set = r.rest();
    if set.len() % 4 != 0 {
        return Err(WireError::BadValue("set"));
    }
    Ok(set)
}

/// Append a CNTL body; with [`CNTL_DELIVER_TO`], `set` names the transaction's set (a
/// receiver named there is in it even if it missed its [`ACCEPT`]).
pub fn encode_cntl(b: &mut Vec<u8>, c: &Cntl, set: &[NodeId]) {
    put_key(b, c.key);
    b.push(c.flags);
    b.put_u32(c.deliver_to);
    b.put_u32(c.backoff_unit_us);
    b.put_u16(c.set_size);
    b.put_u32(c.probe);
    put_set(b, set);
}

/// Decode a CNTL body and its set field.
pub fn decode_cntl(body: &[u8]) -> Result<(Cntl, &[u8]), WireError> {
    let mut r = Reader::new(body);
    let key = key(&mut r)?;
    let flags = r.u8()?;
    if flags & !CNTL_ALL != 0 {
        return Err(WireError::BadValue("cntl flags"));
    }
    let c = Cntl {
        key,
        flags,
        deliver_to: r.u32()?,
        backoff_unit_us: r.u32()?,
        set_size: r.u16()?,
        probe: r.u32()?,
    };
    Ok((c, set_field(&mut r)?))
}

/// A receiver's report on its response channel (the answers to the flow/error and rate
/// control requests).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The transaction.
    pub key: Key,
    /// `STATUS_*` flags.
    pub flags: u8,
    /// One plus the last byte received in order.
    pub next: u32,
    /// One plus the last byte the receiver will accept.
    pub limit: u32,
    /// BURST: bytes the receiver takes back to back.
    pub burst: u32,
    /// RATE: bytes per second the receiver takes.
    pub rate: u32,
    /// The number of the last request ([`Cntl::probe`]) the receiver saw.
    pub echo: u32,
}

/// Append a STATUS body.
pub fn encode_status(b: &mut Vec<u8>, s: &Status) {
    put_key(b, s.key);
    b.push(s.flags);
    b.put_u32(s.next);
    b.put_u32(s.limit);
    b.put_u32(s.burst);
    b.put_u32(s.rate);
    b.put_u32(s.echo);
}

/// Decode a STATUS body.
pub fn decode_status(body: &[u8]) -> Result<Status, WireError> {
    let mut r = Reader::new(body);
    let key = key(&mut r)?;
    let flags = r.u8()?;
    if flags & !STATUS_ALL != 0 {
        return Err(WireError::BadValue("status flags"));
    }
    let s = Status {
        key,
        flags,
        next: r.u32()?,
        limit: r.u32()?,
        burst: r.u32()?,
        rate: r.u32()?,
        echo: r.u32()?,
    };
    r.finish()?;
    if s.limit < s.next {
        return Err(WireError::BadValue("status limit below next"));
    }
    Ok(s)
}

/// Append an ACCEPT body.
pub fn encode_accept(b: &mut Vec<u8>, k: Key, accepted: bool) {
    put_key(b, k);
    b.push(u8::from(accepted));
}

/// Decode an ACCEPT body: the transaction and whether the receiver is in its set.
pub fn decode_accept(body: &[u8]) -> Result<(Key, bool), WireError> {
    let mut r = Reader::new(body);
    let k = key(&mut r)?;
    let a = match r.u8()? {
        0 => false,
        1 => true,
        _ => return Err(WireError::BadValue("accept")),
    };
    r.finish()?;
    Ok((k, a))
}

/// A REPLY segment: bytes of the receiver's reply stream.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ReplySeg<'a> {
    /// The transaction answered.
    pub key: Key,
    /// Flags ([`REPLY_FLAGS`]).
    pub flags: u8,
    /// Offset of `data` in the reply stream.
    pub offset: u32,
    /// The bytes.
    pub data: &'a [u8],
}

/// Append a REPLY body.
pub fn encode_reply(b: &mut Vec<u8>, s: &ReplySeg<'_>) {
    put_key(b, s.key);
    b.push(s.flags);
    b.put_u32(s.offset);
    b.extend_from_slice(s.data);
}

/// Decode a REPLY body.
pub fn decode_reply(body: &[u8]) -> Result<ReplySeg<'_>, WireError> {
    let mut r = Reader::new(body);
    let key = key(&mut r)?;
    let flags = r.u8()?;
    if flags & !REPLY_FLAGS != 0 {
        return Err(WireError::BadValue("reply flags"));
    }
    let s = ReplySeg {
        key,
        flags,
        offset: r.u32()?,
        data: r.rest(),
    };
    within_u32(s.offset, s.data)?;
    Ok(s)
}

/// Offsets in a message are 32-bit: a segment that would end past `u32::MAX` is impossible.
fn within_u32(offset: u32, data: &[u8]) -> Result<(), WireError> {
    if u64::from(offset) + data.len() as u64 > u64::from(u32::MAX) {
        return Err(WireError::BadValue("segment past the largest offset"));
    }
    Ok(())
}

/// Append a REPLY_ACK body.
pub fn encode_reply_ack(b: &mut Vec<u8>, k: Key, next: u32) {
    put_key(b, k);
    b.put_u32(next);
}

/// Decode a REPLY_ACK body.
pub fn decode_reply_ack(body: &[u8]) -> Result<(Key, u32), WireError> {
    let mut r = Reader::new(body);
    let k = key(&mut r)?;
    let next = r.u32()?;
    r.finish()?;
    Ok((k, next))
}

/// Append a UDATA body (the message number is the key's `txn`).
pub fn encode_udata(b: &mut Vec<u8>, k: Key, data: &[u8]) {
    put_key(b, k);
    b.extend_from_slice(data);
}

/// Decode a UDATA body.
pub fn decode_udata(body: &[u8]) -> Result<(Key, &[u8]), WireError> {
    let mut r = Reader::new(body);
    let k = key(&mut r)?;
    Ok((k, r.rest()))
}

/// Append a QUERY body: which source's transaction.
pub fn encode_query(b: &mut Vec<u8>, source: NodeId, k: Key) {
    b.put_u32(source.0);
    put_key(b, k);
}

/// Decode a QUERY body.
pub fn decode_query(body: &[u8]) -> Result<(NodeId, Key), WireError> {
    let mut r = Reader::new(body);
    let s = NodeId(r.u32()?);
    let k = key(&mut r)?;
    r.finish()?;
    Ok((s, k))
}

/// Append a RESOLVE body; `set` names the released transaction's set.
pub fn encode_resolve(
    b: &mut Vec<u8>,
    source: NodeId,
    k: Key,
    outcome: u8,
    deliver_to: u32,
    set: &[NodeId],
) {
    b.put_u32(source.0);
    put_key(b, k);
    b.push(outcome);
    b.put_u32(deliver_to);
    put_set(b, set);
}

/// Decode a RESOLVE body: source, transaction, outcome, deliver-to point and set field.
pub fn decode_resolve(body: &[u8]) -> Result<(NodeId, Key, u8, u32, &[u8]), WireError> {
    let mut r = Reader::new(body);
    let s = NodeId(r.u32()?);
    let k = key(&mut r)?;
    let o = r.u8()?;
    if o != OUTCOME_RELEASED && o != OUTCOME_ABORTED {
        return Err(WireError::BadValue("outcome"));
    }
    let d = r.u32()?;
    Ok((s, k, o, d, set_field(&mut r)?))
}

/// Bytes of a DATA body before its data: room left for data in a datagram.
pub const DATA_OVERHEAD: usize = 4 + 8 + 1 + 4;
/// Bytes of a FIRST body before its data.
pub const FIRST_OVERHEAD: usize = 4 + 8 + 1 + 2 + 4 + 4;
/// Bytes of a REPLY body before its data.
pub const REPLY_OVERHEAD: usize = 4 + 8 + 1 + 4;
