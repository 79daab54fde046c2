//! The view codec: a group view (view id, coordinator, members in rank order) as the bytes a
//! membership entry carries.
//!
//! Why here: every engine that orders joins, leaves and resets with its data (virtual synchrony,
//! Amoeba paper section 3) writes the same three facts into an entry, and must decode what a peer
//! wrote without trusting it. Layout: `view id: u64, coordinator: u32, n: u16, n × member: u32`,
//! big-endian; the member count is checked against the payload's own length before anything is
//! allocated, so a hostile count costs nothing.

use crate::engine::NodeId;
use crate::wire::{Reader, WireError, WriteExt};
use bytes::Bytes;

/// Bytes of a view payload before its member list.
pub const VIEW_FIXED: usize = 8 + 4 + 2;

/// Bytes of a view payload per member.
pub const VIEW_MEMBER: usize = 4;

/// Bytes of the payload of a view with `members` members.
pub const fn view_len(members: usize) -> usize {
    VIEW_FIXED + VIEW_MEMBER * members
}

/// Append the view `(view_id, coordinator, members)` to `buf`.
pub fn encode_view(buf: &mut Vec<u8>, view_id: u64, coordinator: NodeId, members: &[NodeId]) {
    assert!(
        members.len() <= u16::MAX as usize,
        "view too large to encode"
    );
    let start = buf.len();
    buf.put_u64(view_id);
    buf.put_u32(coordinator.0);
    buf.put_u16(members.len() as u16);
    for m in members {
        buf.put_u32(m.0);
    }
    debug_assert_eq!(buf.len() - start, view_len(members.len()));
}

/// The view `(view_id, coordinator, members)` as a payload of its own.
pub fn view_bytes(view_id: u64, coordinator: NodeId, members: &[NodeId]) -> Bytes {
    let mut buf = Vec::with_capacity(view_len(members.len()));
    encode_view(&mut buf, view_id, coordinator, members);
    Bytes::from(buf)
}

/// Read the fixed part and return the member count, checked against the payload's length.
fn read_fixed(r: &mut Reader<'_>) -> Result<(u64, NodeId, usize), WireError> {
    let id = r.u64()?;
    let coordinator = NodeId(r.u32()?);
    let n = r.u16()? as usize;
    if r.remaining() != n * VIEW_MEMBER {
        return Err(WireError::BadValue("view members"));
    }
    Ok((id, coordinator, n))
}

/// Check that `payload` is a well-formed view without allocating.
pub fn check_view(payload: &[u8]) -> Result<(), WireError> {
    read_fixed(&mut Reader::new(payload)).map(|_| ())
}

/// Decode a view payload into `(view id, coordinator, members)`. The member list is bounded by
/// the payload's own length.
pub fn decode_view(payload: &[u8]) -> Result<(u64, NodeId, Vec<NodeId>), WireError> {
    let mut r = Reader::new(payload);
    let (id, coordinator, n) = read_fixed(&mut r)?;
    let mut members = Vec::with_capacity(n);
    for _ in 0..n {
        members.push(NodeId(r.u32()?));
    }
    debug_assert_eq!(r.remaining(), 0);
    Ok((id, coordinator, members))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_truncation() {
        let members = [NodeId(1), NodeId(2), NodeId(7)];
        let b = view_bytes(3, NodeId(1), &members);
        assert_eq!(b.len(), view_len(3));
        assert_eq!(decode_view(&b).unwrap(), (3, NodeId(1), members.to_vec()));
        assert!(check_view(&b).is_ok());
        for n in 0..b.len() {
            assert!(decode_view(&b[..n]).is_err());
            assert!(check_view(&b[..n]).is_err());
        }
        let mut longer = b.to_vec();
        longer.push(0);
        assert!(decode_view(&longer).is_err());
    }

    #[test]
    fn hostile_count_is_refused_before_allocation() {
        let mut buf = Vec::new();
        encode_view(&mut buf, 1, NodeId(0), &[]);
        buf[12] = 0xff;
        buf[13] = 0xff;
        assert_eq!(decode_view(&buf), Err(WireError::BadValue("view members")));
        assert_eq!(view_bytes(9, NodeId(4), &[]).len(), VIEW_FIXED);
    }
}
