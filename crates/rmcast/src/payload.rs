//! What a send takes: anything that becomes the [`Bytes`] of a message.
//!
//! Why a trait of our own rather than `Into<Bytes>`: `bytes` converts only `'static` borrowed
//! data, so `group.send(line.as_str())` would not compile; here a borrowed string or slice is
//! copied once, and owned buffers (`Vec<u8>`, `String`, `Bytes`) are taken without a copy.

use bytes::{Bytes, BytesMut};

/// A message payload: [`Bytes`], `Vec<u8>`, `String`, `Box<[u8]>`, `BytesMut` (taken without a
/// copy), or a borrowed `&str`, `&[u8]`, `&String`, `&Vec<u8>`, `&[u8; N]` (copied once).
///
/// ```
/// # fn demo(group: &rmcast::GroupSender) -> Result<(), rmcast::Error> {
/// let line = String::from("hello");
/// group.send(line.as_str())?; // borrowed: copied
/// group.send(line)?; // owned: moved
/// group.send(&b"raw bytes"[..])?;
/// # Ok(()) }
/// ```
pub trait IntoPayload {
    /// The payload as [`Bytes`].
    fn into_payload(self) -> Bytes;
}

impl IntoPayload for Bytes {
    fn into_payload(self) -> Bytes {
        self
    }
}

impl IntoPayload for BytesMut {
    fn into_payload(self) -> Bytes {
        self.freeze()
    }
}

impl IntoPayload for Vec<u8> {
    fn into_payload(self) -> Bytes {
        Bytes::from(self)
    }
}

impl IntoPayload for Box<[u8]> {
    fn into_payload(self) -> Bytes {
        Bytes::from(self)
    }
}

impl IntoPayload for String {
    fn into_payload(self) -> Bytes {
        Bytes::from(self)
    }
}

impl IntoPayload for &str {
    fn into_payload(self) -> Bytes {
        Bytes::copy_from_slice(self.as_bytes())
    }
}

impl IntoPayload for &String {
    fn into_payload(self) -> Bytes {
        Bytes::copy_from_slice(self.as_bytes())
    }
}

impl IntoPayload for &[u8] {
    fn into_payload(self) -> Bytes {
        Bytes::copy_from_slice(self)
    }
}

impl IntoPayload for &Vec<u8> {
    fn into_payload(self) -> Bytes {
        Bytes::copy_from_slice(self)
    }
}

impl<const N: usize> IntoPayload for &[u8; N] {
    fn into_payload(self) -> Bytes {
        Bytes::copy_from_slice(self)
    }
}

impl IntoPayload for &Bytes {
    fn into_payload(self) -> Bytes {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::IntoPayload;
    use bytes::Bytes;

    #[test]
    fn every_form_gives_the_same_bytes() {
        let s = String::from("line");
        let v = b"line".to_vec();
        let want = Bytes::from_static(b"line");
        assert_eq!(s.as_str().into_payload(), want);
        assert_eq!((&s).into_payload(), want);
        assert_eq!(s.clone().into_payload(), want);
        assert_eq!(v.as_slice().into_payload(), want);
        assert_eq!((&v).into_payload(), want);
        assert_eq!(v.clone().into_payload(), want);
        assert_eq!(b"line".into_payload(), want);
        assert_eq!(v.into_boxed_slice().into_payload(), want);
        assert_eq!((&want).into_payload(), want);
        assert_eq!(bytes::BytesMut::from(&b"line"[..]).into_payload(), want);
    }
}
