//! The header packet of a file transfer over the Tree (`rmcast send` / `rmcast receive`): the
//! first message of the stream (sequence 0) names the file, its size, the packet size of the
//! data that follows and its sha256. It arrives from the network, so decoding is total and
//! refuses what no sender writes: a name that climbs out of the output directory, a packet
//! size of zero or larger than a datagram (a receiver sizes its read buffer by it), bytes
//! after the name.

use crate::wire::MAX_DATAGRAM_LEN;

/// First bytes of the header packet.
pub const MAGIC: &[u8; 8] = b"RMCASTF1";

/// What the header packet says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHeader {
    /// A plain file name (no `/`, not `.` or `..`, not empty).
    pub name: String,
    /// The file's size in bytes.
    pub size: u64,
    /// Bytes of every data packet but the last.
    pub packet: u32,
    /// sha256 of the whole file.
    pub sha256: [u8; 32],
}

impl FileHeader {
    /// The header packet's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(&self.size.to_be_bytes());
        v.extend_from_slice(&self.packet.to_be_bytes());
        v.extend_from_slice(&self.sha256);
        let name = self.name.as_bytes();
        v.extend_from_slice(&(name.len() as u16).to_be_bytes());
        v.extend_from_slice(name);
        v
    }

    /// The header in `b`, or `None` if `b` is not one a sender writes. Never panics.
    pub fn decode(b: &[u8]) -> Option<FileHeader> {
        let rest = b.strip_prefix(MAGIC)?;
        let size = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
        let packet = u32::from_be_bytes(rest.get(8..12)?.try_into().ok()?);
        let sha256: [u8; 32] = rest.get(12..44)?.try_into().ok()?;
        let n = u16::from_be_bytes(rest.get(44..46)?.try_into().ok()?) as usize;
        if rest.len() != 46 + n {
            return None;
        }
        let name = std::str::from_utf8(&rest[46..]).ok()?.to_string();
        // Only a plain file name: nothing that climbs out of the output directory.
        if name.is_empty() || name.contains(['/', '\0']) || name == "." || name == ".." {
            return None;
        }
        if packet == 0 || packet as usize > MAX_DATAGRAM_LEN {
            return None;
        }
        Some(FileHeader {
            name,
            size,
            packet,
            sha256,
        })
    }

    /// The file name as printed: control characters (and quotes) escaped, so that a name
    /// from the network cannot drive the terminal.
    pub fn shown_name(&self) -> String {
        self.name.escape_debug().to_string()
    }

    /// Data packets after the header.
    pub fn packets(&self) -> u64 {
        self.size.div_ceil(u64::from(self.packet))
    }

    /// Where data packet `seq` (1 for the first after the header) starts in the file, or
    /// `None` for the header itself and for packets past the end of the file.
    pub fn offset(&self, seq: u64) -> Option<u64> {
        if seq == 0 || seq > self.packets() {
            return None;
        }
        // (seq - 1) * packet < size here, so it cannot wrap.
        Some((seq - 1) * u64::from(self.packet))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> FileHeader {
        FileHeader {
            name: "a.bin".into(),
            size: 12345,
            packet: 1400,
            sha256: [7; 32],
        }
    }

    #[test]
    fn the_header_reads_back_and_refuses_paths() {
        let h = header();
        assert_eq!(FileHeader::decode(&h.encode()), Some(h.clone()));
        assert_eq!(h.packets(), 9);
        for bad in ["../x", "a/b", "..", ".", "", "a\0b"] {
            let b = FileHeader {
                name: bad.into(),
                ..h.clone()
            };
            assert_eq!(FileHeader::decode(&b.encode()), None, "{bad}");
        }
        assert_eq!(FileHeader::decode(b"RMCASTF1\0"), None);
    }

    #[test]
    fn impossible_headers_are_refused() {
        // A packet size no datagram carries (a receiver would allocate it per read).
        for packet in [0, u32::MAX, MAX_DATAGRAM_LEN as u32 + 1] {
            let b = FileHeader { packet, ..header() };
            assert_eq!(FileHeader::decode(&b.encode()), None, "{packet}");
        }
        // Bytes after the name.
        let mut b = header().encode();
        b.push(0);
        assert_eq!(FileHeader::decode(&b), None);
    }

    #[test]
    fn offsets_never_wrap() {
        let h = FileHeader {
            size: u64::MAX,
            packet: 65_507,
            ..header()
        };
        assert_eq!(h.offset(0), None);
        assert_eq!(h.offset(1), Some(0));
        assert_eq!(h.offset(h.packets()), Some((h.packets() - 1) * 65_507));
        assert_eq!(h.offset(h.packets() + 1), None);
        assert_eq!(h.offset(u64::MAX), None);
    }
}
