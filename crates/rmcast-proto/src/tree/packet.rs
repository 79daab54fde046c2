//! RMTP packet bodies after the common header (Table I of the paper), and their codec.
//!
//! Decoding is total: any body yields a [`Packet`] or a [`WireError`], and nothing is
//! allocated from a length read off the wire beyond what the datagram itself holds.

use crate::engine::NodeId;
use crate::wire::{Reader, WireError, WriteExt};

/// DATA: one data packet (sequence number, payload).
pub const DATA: u8 = 1;
/// DATA_EOF: the end of the stream; its sequence number is the number of data packets.
pub const DATA_EOF: u8 = 2;
/// ACK: the left edge L of the receive window and its bit vector.
pub const ACK: u8 = 3;
/// ACK_TXNOW: an ACK asking for immediate (unicast) transmission of what it lacks.
pub const ACK_TXNOW: u8 = 4;
/// RESET: the sender aborted; receivers close the connection.
pub const RESET: u8 = 5;
/// RTT_MEASURE: a timestamp a receiver sends to its ACK processor.
pub const RTT_MEASURE: u8 = 6;
/// RTT_ACK: the same timestamp sent back at once.
pub const RTT_ACK: u8 = 7;
/// SND_ACK_TOME: an ACK processor's advertisement (sender or designated receiver).
pub const SND_ACK_TOME: u8 = 8;
/// DATA_GONE (not in the paper): the ACK processor no longer holds packets below `floor`
/// (bounded cache without a store); the receiver reports them lost instead of asking forever.
pub const DATA_GONE: u8 = 9;
/// ACK_FIN (not in the paper): a receiver leaves, with its last left edge L; its ACK processor
/// stops waiting for it at once instead of after `child_silence_ms`.
pub const ACK_FIN: u8 = 10;
/// An ACK processor refuses a receiver: it keeps as many children as it takes. Body: the limit
/// (u32).
pub const REFUSED: u8 = 11;

/// Ancestors an advertisement names at most (levels of hierarchy above the advertiser).
pub const MAX_ANCESTORS: usize = 16;
/// Largest receive window an ACK may describe, in packets.
pub const MAX_ACK_BITS: usize = 8192;
/// Bytes of a DATA datagram between the common header and the payload: the session's
/// origin (4, carried before the body proper so that a DR's repairs name the original sender)
/// and the sequence number (8).
pub const DATA_OVERHEAD: usize = 12;

/// A decoded RMTP body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Packet<'a> {
    /// DATA.
    Data {
        /// Sequence number, from zero.
        seq: u64,
        /// Payload.
        payload: &'a [u8],
    },
    /// DATA_EOF: `total` data packets were sent (sequence numbers `0..total`).
    Eof {
        /// The number of data packets, which is also this packet's sequence number.
        total: u64,
    },
    /// ACK or ACK_TXNOW.
    Ack {
        /// ACK_TXNOW: transmit what is missing now.
        txnow: bool,
        /// Left edge of the receive window (first packet not yet delivered).
        l: u64,
        /// Number of bits of the vector (the receive window W_r).
        nbits: u16,
        /// Bit `i` (LSB first in each byte) says whether packet `l + i` is held.
        bits: &'a [u8],
    },
    /// RESET.
    Reset,
    /// RTT_MEASURE or RTT_ACK.
    Rtt {
        /// RTT_ACK (the answer) rather than RTT_MEASURE.
        answer: bool,
        /// The measuring receiver's timestamp, echoed.
        stamp: u64,
    },
    /// SND_ACK_TOME.
    Advert(Advert),
    /// DATA_GONE.
    Gone {
        /// Lowest packet the ACK processor can still send.
        floor: u64,
    },
    /// ACK_FIN.
    Fin {
        /// The leaving receiver's last left edge.
        l: u64,
    },
    /// REFUSED: the ACK processor keeps `limit` children already.
    Refused {
        /// The most children it keeps.
        limit: u32,
    },
}

/// What an ACK processor advertises in SND_ACK_TOME.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Advert {
    /// Level in the hierarchy: 0 for the sender, a DR one more than its own ACK processor.
    pub level: u8,
    /// The time-to-live with which the advertiser receives the sender's advertisements
    /// (255 at the sender, 0 if unknown): a DR takes as its ACK processor only one strictly
    /// closer to the sender, which keeps the hierarchy free of cycles.
    pub sender_ttl: u8,
    /// Packets `0..high` exist (as far as the advertiser knows).
    pub high: u64,
    /// The stream ends at `high` (DATA_EOF seen or sent).
    pub eof: bool,
    /// The advertiser's ACK processors, nearest first (at most [`MAX_ANCESTORS`]).
    pub ancestors: Vec<NodeId>,
}

impl Packet<'_> {
    /// Decode the body of a packet of type `ptype`.
    pub fn decode(ptype: u8, body: &[u8]) -> Result<Packet<'_>, WireError> {
        let mut r = Reader::new(body);
        let p = match ptype {
            DATA => {
                let seq = r.u64()?;
                return Ok(Packet::Data {
                    seq,
                    payload: r.rest(),
                });
            }
            DATA_EOF => Packet::Eof { total: r.u64()? },
            ACK | ACK_TXNOW => {
                let l = r.u64()?;
                let nbits = r.u16()?;
                if nbits as usize > MAX_ACK_BITS {
                    return Err(WireError::BadValue("ack bits"));
                }
                let bits = r.bytes((nbits as usize).div_ceil(8))?;
                Packet::Ack {
                    txnow: ptype == ACK_TXNOW,
                    l,
                    nbits,
                    bits,
                }
            }
            RESET => Packet::Reset,
            RTT_MEASURE | RTT_ACK => Packet::Rtt {
                answer: ptype == RTT_ACK,
                stamp: r.u64()?,
            },
            SND_ACK_TOME => {
                let level = r.u8()?;
                let sender_ttl = r.u8()?;
                let flags = r.u8()?;
                if flags & !1 != 0 {
                    return Err(WireError::BadValue("advert flags"));
                }
                let high = r.u64()?;
                let n = r.u8()? as usize;
                if n > MAX_ANCESTORS {
                    return Err(WireError::BadValue("ancestors"));
                }
                let mut ancestors = Vec::with_capacity(n);
                for _ in 0..n {
                    ancestors.push(NodeId(r.u32()?));
                }
                Packet::Advert(Advert {
                    level,
                    sender_ttl,
                    high,
                    eof: flags & 1 != 0,
                    ancestors,
                })
            }
            DATA_GONE => Packet::Gone { floor: r.u64()? },
            ACK_FIN => Packet::Fin { l: r.u64()? },
            REFUSED => Packet::Refused { limit: r.u32()? },
            t => return Err(WireError::BadType(t)),
        };
        r.finish()?;
        Ok(p)
    }

    /// The packet type byte.
    pub fn ptype(&self) -> u8 {
        match self {
            Packet::Data { .. } => DATA,
            Packet::Eof { .. } => DATA_EOF,
            Packet::Ack { txnow: false, .. } => ACK,
            Packet::Ack { txnow: true, .. } => ACK_TXNOW,
            Packet::Reset => RESET,
            Packet::Rtt { answer: false, .. } => RTT_MEASURE,
            Packet::Rtt { answer: true, .. } => RTT_ACK,
            Packet::Advert(_) => SND_ACK_TOME,
            Packet::Gone { .. } => DATA_GONE,
            Packet::Fin { .. } => ACK_FIN,
            Packet::Refused { .. } => REFUSED,
        }
    }

    /// Append the body to `buf`.
    pub fn encode(&self, buf: &mut Vec<u8>) {
        match self {
            Packet::Data { seq, payload } => {
                buf.put_u64(*seq);
                buf.extend_from_slice(payload);
            }
            Packet::Eof { total } => buf.put_u64(*total),
            Packet::Ack { l, nbits, bits, .. } => {
                buf.put_u64(*l);
                buf.put_u16(*nbits);
                buf.extend_from_slice(bits);
            }
            Packet::Reset => {}
            Packet::Rtt { stamp, .. } => buf.put_u64(*stamp),
            Packet::Advert(a) => {
                buf.push(a.level);
                buf.push(a.sender_ttl);
                buf.push(u8::from(a.eof));
                buf.put_u64(a.high);
                let n = a.ancestors.len().min(MAX_ANCESTORS);
                buf.push(n as u8);
                for id in &a.ancestors[..n] {
                    buf.put_u32(id.0);
                }
            }
            Packet::Gone { floor } => buf.put_u64(*floor),
            Packet::Fin { l } => buf.put_u64(*l),
            Packet::Refused { limit } => buf.put_u32(*limit),
        }
    }
}

/// Whether bit `i` of an ACK's vector is set (bits past the vector read as clear).
pub fn bit(bits: &[u8], i: usize) -> bool {
    bits.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(p: Packet<'_>) {
        let mut buf = Vec::new();
        p.encode(&mut buf);
        assert_eq!(Packet::decode(p.ptype(), &buf).unwrap(), p);
    }

    #[test]
    fn every_packet_reads_back() {
        roundtrip(Packet::Data {
            seq: 7,
            payload: b"hello",
        });
        roundtrip(Packet::Eof { total: 9 });
        roundtrip(Packet::Ack {
            txnow: true,
            l: 16,
            nbits: 10,
            bits: &[0b1011, 0b1],
        });
        roundtrip(Packet::Ack {
            txnow: false,
            l: 0,
            nbits: 0,
            bits: &[],
        });
        roundtrip(Packet::Reset);
        roundtrip(Packet::Fin { l: 42 });
        roundtrip(Packet::Rtt {
            answer: true,
            stamp: 5,
        });
        roundtrip(Packet::Advert(Advert {
            level: 2,
            sender_ttl: 60,
            high: 1000,
            eof: true,
            ancestors: vec![NodeId(3), NodeId(0)],
        }));
        roundtrip(Packet::Gone { floor: 12 });
        assert!(bit(&[0b100], 2) && !bit(&[0b100], 1) && !bit(&[], 5));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for t in 0..=255u8 {
            for len in 0..40 {
                let body: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(37) ^ t).collect();
                let _ = Packet::decode(t, &body);
            }
        }
        assert_eq!(
            Packet::decode(ACK, &[0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]),
            Err(WireError::BadValue("ack bits"))
        );
        assert_eq!(
            Packet::decode(DATA_EOF, &[0; 9]),
            Err(WireError::TrailingBytes)
        );
        assert_eq!(Packet::decode(42, &[]), Err(WireError::BadType(42)));
    }
}
