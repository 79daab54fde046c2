//! The runtime's address exchange: HELLO datagrams.
//!
//! A peer's unicast address is learnt from the source of every datagram received from it. That
//! alone leaves a gap: a member may have to send point to point to a peer it has never heard
//! from (a newer member, say), and such datagrams go to the whole group instead (counted in
//! [`crate::NodeCounters::peer_unknown`]). So when a view names members whose address is
//! unknown, the node sends a HELLO *ask* to the group (multicast, or the unicast fan-out), and
//! every member that hears it answers with a unicast HELLO *answer*: each learns the other's
//! address from the datagram's source. Asks are repeated at most [`TRIES`] times per view,
//! [`INTERVAL`] apart, while an address is still missing; answers are bounded per group to
//! [`MAX_ANSWERS`] per [`INTERVAL`].
//!
//! **Concurrent start.** A node opening a group with [`crate::OpenMode::JoinOrCreate`] multicasts
//! a HELLO *looking* every [`INTERVAL`] while it waits to be admitted, and remembers the
//! lookers it hears (at most [`MAX_LOOKERS`]). When its join wait ends with nobody admitting it,
//! it creates the group only if no looker with a lower id was heard in the last
//! [`LOOKER_FRESH`]; otherwise it keeps joining for another [`LOOKER_FRESH`] (and looks again),
//! so that of nodes started together exactly the lowest id creates and the others join it. A
//! looker that crashed is silent for [`LOOKER_FRESH`] and no longer counts.
//!
//! **Self-healing.** With [`crate::GroupConfig::heal`], the member that coordinates a group
//! multicasts a HELLO *group* with its member count every interval. A member whose group hears
//! the HELLO of a larger group of the same name (more members; as many and a lower coordinator
//! id), whose coordinator is not in its view, merges into it: it joins that group as a new
//! member, as does a member that its group left out. The rule is the same on both sides, so
//! exactly one side moves, and groups that find each other end as one.
//!
//! **The group's datagram size.** Every HELLO carries the largest datagram its sender's path
//! takes ([`crate::GroupConfig::max_datagram_bytes`]), and every member hears one from each
//! other member when it joins (its asks, their answers). A member that finds a smaller one among
//! the members of its view writes datagrams of that size from then on
//! ([`rmcast_proto::Engine::limit_datagram_bytes`]): the group uses its smallest member's size,
//! so that IP fragments no datagram on the way to anyone.
//!
//! **Wire format.** A HELLO is the shared 20-byte header ([`wire::Header`]) and a body: one
//! type byte ([`Hello`]; a HELLO group adds its member count, 2 bytes), then the sender's
//! datagram size (2 bytes, big-endian). `wire::decode` accepts only the engine bytes of [`wire::EngineKind`], so the
//! runtime's packets carry engine byte [`wire::EngineKind::Sequencer`] (1) and are told apart
//! by packet type [`PTYPE`] (0xFF), which the runtime reserves in every engine's numbering (the
//! sequencer's types run from 1 to 15). The runtime takes them out before any engine sees them;
//! a runtime that does not know them hands them to its engine, which drops them as malformed.

use rmcast_proto::wire::{self, EngineKind, Header};
use rmcast_proto::NodeId;
use std::time::Duration;

/// Packet type of runtime HELLO datagrams.
pub(crate) const PTYPE: u8 = 0xFF;
/// Time between two asks of one view, and the window of the answer bound.
pub(crate) const INTERVAL: Duration = Duration::from_millis(100);
/// Asks per view at most.
pub(crate) const TRIES: u32 = 10;
/// Answers per group per [`INTERVAL`] at most (a bound against a flood of forged asks).
pub(crate) const MAX_ANSWERS: u32 = 64;

/// How long a looker counts after it was last heard; also how long a node that defers to a
/// lower looker keeps joining before it looks again.
pub(crate) const LOOKER_FRESH: Duration = Duration::from_millis(500);
/// Lookers remembered per group at most (a bound against forged senders).
pub(crate) const MAX_LOOKERS: usize = 256;

/// The body: a type byte (and for [`Hello::Group`] the member count, 2 bytes big-endian).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Hello {
    /// "Tell me where you are": every member that hears it answers.
    Ask,
    /// The answer, unicast to the asker.
    Answer,
    /// "I am looking for this group and nobody admitted me yet" (concurrent start).
    Looking,
    /// "I coordinate a group of this name with this many members" (self-healing, see
    /// [`crate::GroupConfig::heal`]): a smaller group that hears it merges into it.
    Group {
        /// Members of the sender's view.
        members: u16,
    },
}

/// A HELLO as received: what it says, and the largest datagram its sender's path takes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub(crate) hello: Hello,
    pub(crate) datagram_bytes: u16,
}

/// A HELLO of `sender` for group `group`, whose path takes datagrams of `datagram_bytes`.
pub(crate) fn encode(group: u32, sender: NodeId, hello: Hello, datagram_bytes: u16) -> Vec<u8> {
    let mut buf = Vec::with_capacity(wire::HEADER_LEN + 5);
    Header {
        engine: EngineKind::Sequencer,
        ptype: PTYPE,
        flags: 0,
        group,
        incarnation: 0,
        sender,
    }
    .encode(&mut buf);
    match hello {
        Hello::Ask => buf.push(1),
        Hello::Answer => buf.push(2),
        Hello::Looking => buf.push(3),
        Hello::Group { members } => {
            buf.push(4);
            buf.extend_from_slice(&members.to_be_bytes());
        }
    }
    buf.extend_from_slice(&datagram_bytes.to_be_bytes());
    buf
}

/// `Some` if `packet` is a runtime HELLO (`Some(None)`: one with a body this build does not
/// know, still not for the engine), `None` if it is an engine's datagram.
pub(crate) fn parse(packet: &wire::Packet<'_>) -> Option<Option<Parsed>> {
    let h = &packet.header;
    if h.engine != EngineKind::Sequencer || h.ptype != PTYPE {
        return None;
    }
    let (hello, size) = match packet.body {
        [1, size @ ..] => (Hello::Ask, size),
        [2, size @ ..] => (Hello::Answer, size),
        [3, size @ ..] => (Hello::Looking, size),
        [4, a, b, size @ ..] => (
            Hello::Group {
                members: u16::from_be_bytes([*a, *b]),
            },
            size,
        ),
        _ => return Some(None),
    };
    let &[a, b] = size else { return Some(None) };
    let datagram_bytes = u16::from_be_bytes([a, b]);
    if usize::from(datagram_bytes) < crate::config::MIN_DATAGRAM_BYTES {
        return Some(None);
    }
    Some(Some(Parsed {
        hello,
        datagram_bytes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips() {
        for h in [
            Hello::Ask,
            Hello::Answer,
            Hello::Looking,
            Hello::Group { members: 513 },
        ] {
            let buf = encode(7, NodeId(3), h, 1472);
            let p = wire::decode(&buf).unwrap();
            assert_eq!(p.header.group, 7);
            assert_eq!(p.header.sender, NodeId(3));
            assert_eq!(
                parse(&p),
                Some(Some(Parsed {
                    hello: h,
                    datagram_bytes: 1472
                }))
            );
            // Cut short, or with a size no path has: not understood, and still not the
            // engine's.
            for n in wire::HEADER_LEN..buf.len() {
                assert_eq!(parse(&wire::decode(&buf[..n]).unwrap()), Some(None));
            }
            let tiny = encode(7, NodeId(3), h, 100);
            assert_eq!(parse(&wire::decode(&tiny).unwrap()), Some(None));
        }
    }
}
