//! The packet codec shared by every engine (docs/ARCHITECTURE.md).
//!
//! Every datagram starts with one fixed [`Header`]: magic, version, engine, packet type, flags,
//! group id, incarnation and sender. When [`FLAG_AUTH`] is set, an authentication block (key id,
//! session id, counter: see [`crate::secure`]) follows the header and a 16-byte tag ends the datagram, so that authenticated encryption
//! of group traffic can be switched on without a second format.
//!
//! Decoding is total: any byte string yields a packet or a [`WireError`], never a panic, and no
//! allocation is ever sized by a length field read from the wire (bodies borrow from the input).

use crate::engine::NodeId;
use std::fmt;

/// First two bytes of every rmcast datagram: "RM".
pub const MAGIC: u16 = 0x524d;
/// Wire format version.
pub const VERSION: u8 = 1;
/// Size of the fixed header in bytes.
pub const HEADER_LEN: usize = 20;
/// Flag: an authentication block follows the header and a tag ends the datagram.
pub const FLAG_AUTH: u8 = 0x01;
/// Size of a sender session's id in the authentication block.
pub const SESSION_ID_LEN: usize = 12;
/// Size of the authentication block after the header: key id (4), session id (12) and
/// counter (8).
pub const AUTH_BLOCK_LEN: usize = 4 + SESSION_ID_LEN + 8;
/// Size of the authentication tag at the end of the datagram.
pub const AUTH_TAG_LEN: usize = 16;
/// Largest UDP payload over IPv4.
pub const MAX_DATAGRAM_LEN: usize = 65_507;

/// Which protocol engine a datagram belongs to.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EngineKind {
    /// Amoeba sequencer (Kaashoek and Tanenbaum).
    Sequencer = 1,
    /// RMP token ring (Whetten, Montgomery and Kaplan).
    Ring = 2,
    /// Bimodal Multicast (Birman et al.).
    Gossip = 3,
    /// RMTP tree (Paul, Sabnani, Lin and Bhattacharyya).
    Tree = 4,
    /// Multidriver transactions over XTP (Dempsey, Fenton and Weaver).
    Txn = 5,
    /// Group formation's HELLOs ([`crate::formation::hello`]), which no engine sees.
    Formation = 6,
    /// Engines built only for tests (the `toy` engine of the `testing` feature).
    Test = 255,
}

impl EngineKind {
    /// Decode an engine byte.
    pub fn from_u8(v: u8) -> Option<EngineKind> {
        Some(match v {
            1 => EngineKind::Sequencer,
            2 => EngineKind::Ring,
            3 => EngineKind::Gossip,
            4 => EngineKind::Tree,
            5 => EngineKind::Txn,
            6 => EngineKind::Formation,
            255 => EngineKind::Test,
            _ => return None,
        })
    }
}

/// Why a datagram did not decode.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The datagram ended before a field it announced.
    Truncated,
    /// Not an rmcast datagram.
    BadMagic,
    /// A version this build does not speak.
    BadVersion(u8),
    /// Unknown engine byte.
    BadEngine(u8),
    /// Unknown packet type for the engine.
    BadType(u8),
    /// A field holds a value that cannot be.
    BadValue(&'static str),
    /// Bytes left over after the last field.
    TrailingBytes,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated => f.write_str("datagram truncated"),
            WireError::BadMagic => f.write_str("bad magic"),
            WireError::BadVersion(v) => write!(f, "unsupported version {v}"),
            WireError::BadEngine(e) => write!(f, "unknown engine {e}"),
            WireError::BadType(t) => write!(f, "unknown packet type {t}"),
            WireError::BadValue(what) => write!(f, "bad value in field {what}"),
            WireError::TrailingBytes => f.write_str("trailing bytes"),
        }
    }
}

impl std::error::Error for WireError {}

/// The authentication block, present when [`FLAG_AUTH`] is set.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Auth {
    /// Which group key sealed the datagram.
    pub key_id: u32,
    /// The sender's session (a random id drawn when it started).
    pub session: [u8; SESSION_ID_LEN],
    /// The datagram's number in the session, from 0.
    pub counter: u64,
    /// Authentication tag over header and body.
    pub tag: [u8; AUTH_TAG_LEN],
}

/// The fixed header every engine uses.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Engine the body belongs to.
    pub engine: EngineKind,
    /// Engine-specific packet type.
    pub ptype: u8,
    /// Flags ([`FLAG_AUTH`]; other bits reserved, must be zero).
    pub flags: u8,
    /// Group identifier (hash of the group name).
    pub group: u32,
    /// Group incarnation; packets of another incarnation are ignored.
    pub incarnation: u32,
    /// The sending node.
    pub sender: NodeId,
}

impl Header {
    /// Append the header to `buf`.
    pub fn encode(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(&MAGIC.to_be_bytes());
        buf.push(VERSION);
        buf.push(self.engine as u8);
        buf.push(self.ptype);
        buf.push(self.flags);
        buf.extend_from_slice(&0u16.to_be_bytes());
        buf.extend_from_slice(&self.group.to_be_bytes());
        buf.extend_from_slice(&self.incarnation.to_be_bytes());
        buf.extend_from_slice(&self.sender.0.to_be_bytes());
    }
}

/// A decoded datagram: the header, the authentication block if any, and the engine body
/// borrowed from the input.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The fixed header.
    pub header: Header,
    /// Authentication block and tag, when [`FLAG_AUTH`] is set.
    pub auth: Option<Auth>,
    /// The engine-specific body.
    pub body: &'a [u8],
}

/// Decode a datagram's header and split off its body. Never panics.
pub fn decode(datagram: &[u8]) -> Result<Packet<'_>, WireError> {
    let mut r = Reader::new(datagram);
    if r.u16()? != MAGIC {
        return Err(WireError::BadMagic);
    }
    let version = r.u8()?;
    if version != VERSION {
        return Err(WireError::BadVersion(version));
    }
    let e = r.u8()?;
    let engine = EngineKind::from_u8(e).ok_or(WireError::BadEngine(e))?;
    let ptype = r.u8()?;
    let flags = r.u8()?;
    if flags & !FLAG_AUTH != 0 {
        return Err(WireError::BadValue("flags"));
    }
    if r.u16()? != 0 {
        return Err(WireError::BadValue("reserved"));
    }
    let group = r.u32()?;
    let incarnation = r.u32()?;
    let sender = NodeId(r.u32()?);
    let header = Header {
        engine,
        ptype,
        flags,
        group,
        incarnation,
        sender,
    };
    let mut auth = None;
    let mut body = r.rest();
    if flags & FLAG_AUTH != 0 {
        let mut a = Reader::new(body);
        let key_id = a.u32()?;
        let session: [u8; SESSION_ID_LEN] = a.array()?;
        let counter = a.u64()?;
        let rest = a.rest();
        if rest.len() < AUTH_TAG_LEN {
            return Err(WireError::Truncated);
        }
        let (b, t) = rest.split_at(rest.len() - AUTH_TAG_LEN);
        let mut tag = [0u8; AUTH_TAG_LEN];
        tag.copy_from_slice(t);
        auth = Some(Auth {
            key_id,
            session,
            counter,
            tag,
        });
        body = b;
    }
    Ok(Packet { header, auth, body })
}

/// A bounds-checked cursor over received bytes. Every read returns [`WireError::Truncated`]
/// instead of panicking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// Whether everything was read.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Take `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(WireError::Truncated);
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }

    /// Take a fixed-size array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N)?);
        Ok(out)
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }

    /// Read a byte.
    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }

    /// Read a big-endian u16.
    pub fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    /// Read a big-endian u32.
    pub fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    /// Read a big-endian u64.
    pub fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// Fail unless everything was read.
    pub fn finish(self) -> Result<(), WireError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(WireError::TrailingBytes)
        }
    }
}

/// Big-endian writers for building datagrams into a caller's buffer.
pub trait WriteExt {
    /// Append a u16.
    fn put_u16(&mut self, v: u16);
    /// Append a u32.
    fn put_u32(&mut self, v: u32);
    /// Append a u64.
    fn put_u64(&mut self, v: u64);
}

impl WriteExt for Vec<u8> {
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            engine: EngineKind::Sequencer,
            ptype: 3,
            flags: 0,
            group: 0xdead_beef,
            incarnation: 7,
            sender: NodeId(42),
        }
    }

    #[test]
    fn header_roundtrip() {
        let mut buf = Vec::new();
        header().encode(&mut buf);
        assert_eq!(buf.len(), HEADER_LEN);
        buf.extend_from_slice(b"body");
        let p = decode(&buf).unwrap();
        assert_eq!(p.header, header());
        assert_eq!(p.body, b"body");
        assert!(p.auth.is_none());
    }

    #[test]
    fn auth_block_roundtrip() {
        let mut h = header();
        h.flags = FLAG_AUTH;
        let mut buf = Vec::new();
        h.encode(&mut buf);
        buf.put_u32(9);
        buf.extend_from_slice(&[1u8; SESSION_ID_LEN]);
        buf.put_u64(77);
        buf.extend_from_slice(b"xy");
        buf.extend_from_slice(&[2u8; AUTH_TAG_LEN]);
        let p = decode(&buf).unwrap();
        let a = p.auth.unwrap();
        assert_eq!(a.key_id, 9);
        assert_eq!(a.session, [1u8; SESSION_ID_LEN]);
        assert_eq!(a.counter, 77);
        assert_eq!(a.tag, [2u8; AUTH_TAG_LEN]);
        assert_eq!(p.body, b"xy");
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(decode(&[]), Err(WireError::Truncated));
        assert_eq!(decode(&[0; 30]), Err(WireError::BadMagic));
        let mut buf = Vec::new();
        header().encode(&mut buf);
        buf[2] = 9;
        assert_eq!(decode(&buf), Err(WireError::BadVersion(9)));
        buf[2] = VERSION;
        buf[3] = 77;
        assert_eq!(decode(&buf), Err(WireError::BadEngine(77)));
        buf[3] = 1;
        buf[5] = 0x80;
        assert_eq!(decode(&buf), Err(WireError::BadValue("flags")));
        buf[5] = FLAG_AUTH;
        assert_eq!(decode(&buf), Err(WireError::Truncated));
        for n in 0..HEADER_LEN {
            let mut b = Vec::new();
            header().encode(&mut b);
            assert_eq!(decode(&b[..n]), Err(WireError::Truncated));
        }
    }
}
