//! The HELLO datagram: group formation's one packet (see [`crate::formation`]).
//!
//! A HELLO is the shared 20-byte header ([`wire::Header`]) with engine byte
//! [`EngineKind::Formation`] and the kind of HELLO as packet type (1 ask, 2 answer, 3 looking,
//! 4 group), then a body: for a HELLO group the sender's member count (2 bytes, big-endian),
//! and for every HELLO the largest datagram the sender's path takes (2 bytes, big-endian; at
//! least [`MIN_PATH_BYTES`]). Decoding is total: any byte string is a HELLO or a
//! [`WireError`], never a panic.

use crate::engine::NodeId;
use crate::wire::{self, EngineKind, Header, WireError};

/// The smallest datagram a path may announce: no engine works with less.
pub const MIN_PATH_BYTES: u16 = 256;

/// What a HELLO says.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Hello {
    /// "Tell me where you are": every member that hears it answers.
    Ask,
    /// The answer, to the asker only.
    Answer,
    /// "I am looking for this group and nobody admitted me yet" (concurrent start).
    Looking,
    /// "I coordinate a group of this name with this many members" (self-healing): a smaller
    /// group that hears it merges into it.
    Group {
        /// Members of the sender's view.
        members: u16,
    },
}

impl Hello {
    fn ptype(self) -> u8 {
        match self {
            Hello::Ask => 1,
            Hello::Answer => 2,
            Hello::Looking => 3,
            Hello::Group { .. } => 4,
        }
    }
}

/// A HELLO as received.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// Its sender.
    pub sender: NodeId,
    /// The group it is for.
    pub group: u32,
    /// What it says.
    pub hello: Hello,
    /// The largest datagram its sender's path takes.
    pub path_bytes: u16,
}

/// Whether `datagram` (not sealed, or opened) is a HELLO by its engine byte, without decoding.
pub fn is_hello(datagram: &[u8]) -> bool {
    datagram.get(3) == Some(&(EngineKind::Formation as u8))
}

/// Append the HELLO `hello` of `sender` for group `group`, whose path takes `path_bytes`, to
/// `buf`.
pub fn encode(group: u32, sender: NodeId, hello: Hello, path_bytes: u16, buf: &mut Vec<u8>) {
    Header {
        engine: EngineKind::Formation,
        ptype: hello.ptype(),
        flags: 0,
        group,
        incarnation: 0,
        sender,
    }
    .encode(buf);
    if let Hello::Group { members } = hello {
        buf.extend_from_slice(&members.to_be_bytes());
    }
    buf.extend_from_slice(&path_bytes.to_be_bytes());
}

/// Decode a HELLO from the packet `wire::decode` made of it.
pub fn parse(packet: &wire::Packet<'_>) -> Result<Received, WireError> {
    let h = &packet.header;
    if h.engine != EngineKind::Formation {
        return Err(WireError::BadEngine(h.engine as u8));
    }
    let mut r = wire::Reader::new(packet.body);
    let hello = match h.ptype {
        1 => Hello::Ask,
        2 => Hello::Answer,
        3 => Hello::Looking,
        4 => Hello::Group { members: r.u16()? },
        t => return Err(WireError::BadType(t)),
    };
    let path_bytes = r.u16()?;
    r.finish()?;
    if path_bytes < MIN_PATH_BYTES {
        return Err(WireError::BadValue("path bytes"));
    }
    Ok(Received {
        sender: h.sender,
        group: h.group,
        hello,
        path_bytes,
    })
}

/// [`wire::decode`] and [`parse`] in one.
pub fn decode(datagram: &[u8]) -> Result<Received, WireError> {
    parse(&wire::decode(datagram)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Hello; 4] = [
        Hello::Ask,
        Hello::Answer,
        Hello::Looking,
        Hello::Group { members: 513 },
    ];

    #[test]
    fn hello_round_trips() {
        for h in ALL {
            let mut buf = Vec::new();
            encode(7, NodeId(3), h, 1472, &mut buf);
            assert!(is_hello(&buf));
            assert_eq!(
                decode(&buf),
                Ok(Received {
                    sender: NodeId(3),
                    group: 7,
                    hello: h,
                    path_bytes: 1472
                })
            );
        }
    }

    #[test]
    fn short_long_or_impossible_hellos_are_refused() {
        for h in ALL {
            let mut buf = Vec::new();
            encode(7, NodeId(3), h, 1472, &mut buf);
            for n in 0..buf.len() {
                assert!(decode(&buf[..n]).is_err(), "{h:?} cut to {n}");
            }
            let mut long = buf.clone();
            long.push(0);
            assert_eq!(decode(&long), Err(WireError::TrailingBytes));
            let mut tiny = Vec::new();
            encode(7, NodeId(3), h, MIN_PATH_BYTES - 1, &mut tiny);
            assert_eq!(decode(&tiny), Err(WireError::BadValue("path bytes")));
            let mut other = buf.clone();
            other[4] = 9;
            assert_eq!(decode(&other), Err(WireError::BadType(9)));
            let mut seq = buf.clone();
            seq[3] = EngineKind::Sequencer as u8;
            assert!(!is_hello(&seq));
            assert_eq!(decode(&seq), Err(WireError::BadEngine(1)));
        }
    }

    #[test]
    fn any_bytes_decode_without_panicking() {
        // A deterministic spread of inputs: every prefix of a HELLO with every byte value at
        // every position of the body.
        let mut buf = Vec::new();
        encode(7, NodeId(3), Hello::Group { members: 2 }, 1472, &mut buf);
        for pos in 0..buf.len() {
            for v in 0..=255u8 {
                let mut b = buf.clone();
                b[pos] = v;
                if let Ok(r) = decode(&b) {
                    assert!(r.path_bytes >= MIN_PATH_BYTES, "{r:?}");
                }
            }
        }
    }
}
