//! The view codec every engine uses on the wire: view id, coordinator, members in rank order.

use crate::engine::NodeId;
use crate::wire::{Reader, WireError};

/// Bytes a view with `n` members takes.
pub fn encoded_len(n: usize) -> usize {
    8 + 4 + 2 + 4 * n
}

/// Append a view: id (u64), coordinator (u32), member count (u16), members (u32 each).
pub fn encode(buf: &mut Vec<u8>, id: u64, coordinator: NodeId, members: &[NodeId]) {
    debug_assert!(members.len() <= u16::MAX as usize);
    buf.extend_from_slice(&id.to_be_bytes());
    buf.extend_from_slice(&coordinator.0.to_be_bytes());
    buf.extend_from_slice(&(members.len() as u16).to_be_bytes());
    for m in members {
        buf.extend_from_slice(&m.0.to_be_bytes());
    }
}

/// Read a view written by [`encode`]. The member count is checked against the bytes left
/// before anything is allocated.
pub fn decode(r: &mut Reader<'_>) -> Result<(u64, NodeId, Vec<NodeId>), WireError> {
    let id = r.u64()?;
    let coordinator = NodeId(r.u32()?);
    let n = r.u16()? as usize;
    if r.remaining() < 4 * n {
        return Err(WireError::Truncated);
    }
    let members = (0..n)
        .map(|_| r.u32().map(NodeId))
        .collect::<Result<_, _>>()?;
    Ok((id, coordinator, members))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_short_input() {
        let mut b = Vec::new();
        encode(&mut b, 7, NodeId(2), &[NodeId(2), NodeId(9)]);
        assert_eq!(b.len(), encoded_len(2));
        assert_eq!(
            decode(&mut Reader::new(&b)).unwrap(),
            (7, NodeId(2), vec![NodeId(2), NodeId(9)])
        );
        assert!(decode(&mut Reader::new(&b[..b.len() - 1])).is_err());
    }
}
