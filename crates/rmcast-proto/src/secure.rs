//! Secure groups: authenticated encryption of every datagram, sans-IO.
//!
//! A group with a key seals every datagram of every engine (and of the runtime) the same way,
//! below the engines, so that no engine knows about it:
//!
//! ```text
//! header (20 bytes, flag 0x01 set) | key id (4) | nonce (12) | ciphertext of the body | tag (16)
//! ```
//!
//! * **Cipher**: AES-256-GCM from `ring` (chosen by measurement on hardware with AES-NI: about
//!   90 ns to seal 64 bytes and 210 ns for 1 KiB, against 180/580 ns for ring's
//!   ChaCha20-Poly1305 and 160/980 ns for RustCrypto's `aes-gcm`).
//! * **Associated data**: the header, key id and nonce (the first 36 bytes): nothing in them can be
//!   changed without failing verification. The body is encrypted.
//! * **Nonces never repeat under one key**: a nonce is the sender's node id (4 bytes) and a 64-bit
//!   counter of that node (one [`Sealer`] per node, shared by its groups) that starts at the
//!   wall-clock time in nanoseconds since the UNIX epoch when the node starts and grows by one per
//!   datagram. Node ids are unique among a group's members; a restarted node starts above every
//!   counter it used before as long as it sealed fewer than 10^9 datagrams a second on average and
//!   the wall clock did not step back across the restart by more than the time it ran.
//! * **Replays refused**: each receiver keeps a [`ReplayWindow`] per sender over those counters.
//!   Since a restarted sender starts above its old counters, datagrams captured before a restart
//!   (or a reset of the group) are refused after it as well.
//! * **Keys**: [`GroupKey`], 32 bytes, with a 32-bit id derived from the key (HMAC-SHA-256), so
//!   that every holder of a key computes the same id. A [`Keyring`] seals with its current key and
//!   opens with any of its keys: during a rotation members accept the old key and the new one.
//!
//! What verification refuses ([`Rejection`]) is counted by the caller and never reaches an engine.

use crate::common::replay::{Replay, ReplayWindow};
use crate::engine::NodeId;
use crate::wire::{self, AUTH_BLOCK_LEN, AUTH_TAG_LEN, FLAG_AUTH, HEADER_LEN};
use ring::aead;
use std::collections::HashMap;
use std::fmt;

/// Bytes a sealed datagram has beyond the plain one: authentication block and tag. An engine of a
/// secure group is given a datagram size this much smaller.
pub const AUTH_OVERHEAD: usize = AUTH_BLOCK_LEN + AUTH_TAG_LEN;
/// Length of a group key.
pub const KEY_LEN: usize = 32;
/// Bytes authenticated but not encrypted: header, key id and nonce.
const AAD_LEN: usize = HEADER_LEN + AUTH_BLOCK_LEN;
/// Offset of the flags byte in the header.
const FLAGS_AT: usize = 5;
/// Senders whose replay window (8 KiB each) a group keeps at most. Only verified datagrams
/// create one, so only key holders fill it; the bound is against a buggy one cycling through
/// ids.
pub const MAX_SENDERS: usize = 1024;
/// PBKDF2-HMAC-SHA-256 iterations stretching a passphrase (OWASP's 2023 recommendation).
pub const PBKDF2_ITERATIONS: u32 = 600_000;
/// Salt of the passphrase stretching: fixed, so that every member derives the same key from the
/// same passphrase; a passphrase should therefore be unique to its group.
const PBKDF2_SALT: &[u8] = b"rmcast group key from passphrase v1";
/// Shortest passphrase accepted.
pub const MIN_PASSPHRASE_LEN: usize = 16;

/// A group key: 32 secret bytes and the id derived from them. `Debug` shows the id only.
#[derive(Clone, PartialEq, Eq)]
pub struct GroupKey {
    id: u32,
    bytes: [u8; KEY_LEN],
}

impl fmt::Debug for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GroupKey {{ id: {:08x}, .. }}", self.id)
    }
}

/// Why a key could not be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// The passphrase is shorter than [`MIN_PASSPHRASE_LEN`] bytes.
    PassphraseTooShort,
    /// The system's random number generator failed.
    Random,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::PassphraseTooShort => write!(
                f,
                "a key file must hold exactly {KEY_LEN} bytes (a key) or a passphrase of at \
                 least {MIN_PASSPHRASE_LEN} bytes"
            ),
            KeyError::Random => f.write_str("the system random number generator failed"),
        }
    }
}

impl std::error::Error for KeyError {}

impl GroupKey {
    /// A key from 32 secret bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        let tag = ring::hmac::sign(
            &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes),
            b"rmcast key id",
        );
        let mut id = [0u8; 4];
        id.copy_from_slice(&tag.as_ref()[..4]);
        GroupKey {
            id: u32::from_be_bytes(id),
            bytes,
        }
    }

    /// A key stretched from a passphrase with PBKDF2-HMAC-SHA-256 ([`PBKDF2_ITERATIONS`]).
    pub fn from_passphrase(passphrase: &[u8]) -> Result<Self, KeyError> {
        if passphrase.len() < MIN_PASSPHRASE_LEN {
            return Err(KeyError::PassphraseTooShort);
        }
        let mut out = [0u8; KEY_LEN];
        ring::pbkdf2::derive(
            ring::pbkdf2::PBKDF2_HMAC_SHA256,
            std::num::NonZeroU32::new(PBKDF2_ITERATIONS).expect("non-zero"),
            PBKDF2_SALT,
            passphrase,
            &mut out,
        );
        Ok(GroupKey::from_bytes(out))
    }

    /// The key a key file holds: exactly 32 bytes are the key itself (what `rmcast keygen`
    /// writes); anything else is a passphrase, without the line ends around it.
    pub fn from_file_contents(contents: &[u8]) -> Result<Self, KeyError> {
        if let Ok(bytes) = <[u8; KEY_LEN]>::try_from(contents) {
            return Ok(GroupKey::from_bytes(bytes));
        }
        let trimmed = contents.strip_suffix(b"\n").unwrap_or(contents);
        let trimmed = trimmed.strip_suffix(b"\r").unwrap_or(trimmed);
        GroupKey::from_passphrase(trimmed)
    }

    /// A new random key from the operating system's generator.
    pub fn generate() -> Result<Self, KeyError> {
        let mut bytes = [0u8; KEY_LEN];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
            .map_err(|_| KeyError::Random)?;
        Ok(GroupKey::from_bytes(bytes))
    }

    /// The key id carried in every datagram it seals.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The secret bytes (to write a key file).
    pub fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.bytes
    }
}

/// The keys of a secure group: the current one seals and opens, the others (during a rotation)
/// only open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keyring {
    current: GroupKey,
    accepted: Vec<GroupKey>,
}

impl Keyring {
    /// A keyring of one key.
    pub fn new(current: GroupKey) -> Self {
        Keyring {
            current,
            accepted: Vec::new(),
        }
    }

    /// Also accept datagrams sealed with `key` (the old key during a rotation, or the new one
    /// before every member switched). A key with the current key's id is ignored.
    pub fn accept(mut self, key: GroupKey) -> Self {
        if key.id != self.current.id && !self.accepted.iter().any(|k| k.id == key.id) {
            self.accepted.push(key);
        }
        self
    }

    /// The key that seals.
    pub fn current(&self) -> &GroupKey {
        &self.current
    }

    /// Ids of every key that opens.
    pub fn ids(&self) -> Vec<u32> {
        std::iter::once(&self.current)
            .chain(&self.accepted)
            .map(|k| k.id)
            .collect()
    }
}

/// Why a datagram of a secure group was refused. Each is counted; none reaches an engine.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// Not a datagram (the header did not decode).
    Malformed,
    /// No authentication block.
    Missing,
    /// Sealed with a key this group does not hold.
    UnknownKey,
    /// Verification failed: forged, altered, or the nonce names another sender than the header.
    BadTag,
    /// A counter seen before, or too old to tell ([`Replay`]).
    Replay(Replay),
    /// A verified datagram from one sender more than [`MAX_SENDERS`] (not recorded).
    TooManySenders,
}

/// Why a datagram could not be sealed: what the engine wrote is not a plain datagram. A bug,
/// counted by the caller.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SealError;

/// The nonce source of one node: its id and its datagram counter (see the module docs).
#[derive(Clone, Debug)]
pub struct Sealer {
    sender: NodeId,
    next: u64,
}

impl Sealer {
    /// The nonce source of node `sender`, whose counter starts at `start`: the runtime passes
    /// the wall-clock time in nanoseconds since the UNIX epoch, a simulator any value.
    pub fn new(sender: NodeId, start: u64) -> Self {
        Sealer {
            sender,
            next: start,
        }
    }

    fn nonce(&mut self) -> Result<[u8; 12], SealError> {
        let n = self.next;
        self.next = n.checked_add(1).ok_or(SealError)?;
        let mut nonce = [0u8; 12];
        nonce[..4].copy_from_slice(&self.sender.0.to_be_bytes());
        nonce[4..].copy_from_slice(&n.to_be_bytes());
        Ok(nonce)
    }
}

/// The ciphers and replay windows of one secure group.
pub struct GroupCipher {
    /// `(key id, key)`; the first seals.
    keys: Vec<(u32, aead::LessSafeKey)>,
    windows: HashMap<NodeId, ReplayWindow>,
}

impl fmt::Debug for GroupCipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupCipher")
            .field("keys", &self.keys.iter().map(|k| k.0).collect::<Vec<_>>())
            .field("senders", &self.windows.len())
            .finish()
    }
}

fn aead_key(k: &GroupKey) -> aead::LessSafeKey {
    aead::LessSafeKey::new(
        aead::UnboundKey::new(&aead::AES_256_GCM, &k.bytes).expect("a 32-byte AES-256 key"),
    )
}

impl GroupCipher {
    /// The cipher of a group holding `keys`.
    pub fn new(keys: &Keyring) -> Self {
        GroupCipher {
            keys: std::iter::once(&keys.current)
                .chain(&keys.accepted)
                .map(|k| (k.id, aead_key(k)))
                .collect(),
            windows: HashMap::new(),
        }
    }

    /// Seal the plain datagram `plain` (header and body, flags clear) into `out`, with the next
    /// nonce of `sealer`.
    pub fn seal(
        &self,
        sealer: &mut Sealer,
        plain: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), SealError> {
        if plain.len() < HEADER_LEN || plain[FLAGS_AT] & FLAG_AUTH != 0 {
            return Err(SealError);
        }
        let (key_id, key) = &self.keys[0];
        let nonce = sealer.nonce()?;
        out.clear();
        out.reserve(plain.len() + AUTH_OVERHEAD);
        out.extend_from_slice(&plain[..HEADER_LEN]);
        out[FLAGS_AT] |= FLAG_AUTH;
        out.extend_from_slice(&key_id.to_be_bytes());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&plain[HEADER_LEN..]);
        let (aad, body) = out.split_at_mut(AAD_LEN);
        let tag = key
            .seal_in_place_separate_tag(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(&*aad),
                body,
            )
            .map_err(|_| SealError)?;
        out.extend_from_slice(tag.as_ref());
        Ok(())
    }

    /// Verify and decrypt the sealed datagram in `buf`, in place. On success returns the plain
    /// datagram (header with the flag cleared, then the body), a part of `buf`, and records its
    /// counter in the sender's replay window.
    pub fn open<'a>(&mut self, buf: &'a mut [u8]) -> Result<&'a mut [u8], Rejection> {
        let (sender, key_id, nonce) = {
            let p = wire::decode(buf).map_err(|_| Rejection::Malformed)?;
            let a = p.auth.ok_or(Rejection::Missing)?;
            (p.header.sender, a.key_id, a.nonce)
        };
        let key = &self
            .keys
            .iter()
            .find(|(id, _)| *id == key_id)
            .ok_or(Rejection::UnknownKey)?
            .1;
        // Only the sender sealed with its id in the nonce: one id, one counter, one window.
        if nonce[..4] != sender.0.to_be_bytes() {
            return Err(Rejection::BadTag);
        }
        let mut counter = [0u8; 8];
        counter.copy_from_slice(&nonce[4..]);
        let counter = u64::from_be_bytes(counter);
        // Cheap refusal of a replay before the decryption; recorded only once verified.
        if let Some(w) = self.windows.get(&sender) {
            w.check(counter).map_err(Rejection::Replay)?;
        } else if self.windows.len() >= MAX_SENDERS {
            return Err(Rejection::TooManySenders);
        }
        let (aad, sealed) = buf.split_at_mut(AAD_LEN);
        let plain_len = key
            .open_in_place(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(&*aad),
                sealed,
            )
            .map_err(|_| Rejection::BadTag)?
            .len();
        self.windows
            .entry(sender)
            .or_default()
            .accept(counter)
            .map_err(Rejection::Replay)?;
        // The plain datagram: the header moved up against the body, its flag cleared.
        buf.copy_within(..HEADER_LEN, AUTH_BLOCK_LEN);
        buf[AUTH_BLOCK_LEN + FLAGS_AT] &= !FLAG_AUTH;
        Ok(&mut buf[AUTH_BLOCK_LEN..AAD_LEN + plain_len])
    }

    /// Senders with a replay window.
    pub fn senders(&self) -> usize {
        self.windows.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{EngineKind, Header};

    fn plain(sender: u32, body: &[u8]) -> Vec<u8> {
        let mut buf = Vec::new();
        Header {
            engine: EngineKind::Sequencer,
            ptype: 3,
            flags: 0,
            group: 0x1234_5678,
            incarnation: 2,
            sender: NodeId(sender),
        }
        .encode(&mut buf);
        buf.extend_from_slice(body);
        buf
    }

    fn ring_of(b: u8) -> Keyring {
        Keyring::new(GroupKey::from_bytes([b; KEY_LEN]))
    }

    #[test]
    fn seal_open_round_trip_and_replay() {
        let tx = GroupCipher::new(&ring_of(1));
        let mut rx = GroupCipher::new(&ring_of(1));
        let mut sealer = Sealer::new(NodeId(7), 1_000);
        let p = plain(7, b"hello group");
        let mut sealed = Vec::new();
        tx.seal(&mut sealer, &p, &mut sealed).unwrap();
        assert_eq!(sealed.len(), p.len() + AUTH_OVERHEAD);
        // The body is not in clear.
        assert!(!sealed.windows(11).any(|w| w == b"hello group"));
        let d = wire::decode(&sealed).unwrap();
        assert_eq!(d.header.flags, FLAG_AUTH);
        assert_eq!(d.auth.unwrap().key_id, ring_of(1).current().id());
        let mut buf = sealed.clone();
        assert_eq!(rx.open(&mut buf).unwrap(), &p[..]);
        let mut again = sealed.clone();
        assert_eq!(
            rx.open(&mut again),
            Err(Rejection::Replay(Replay::Duplicate))
        );
        // The next datagram has a new nonce.
        let mut sealed2 = Vec::new();
        tx.seal(&mut sealer, &p, &mut sealed2).unwrap();
        assert_ne!(sealed[..AAD_LEN], sealed2[..AAD_LEN]);
        assert_eq!(rx.open(&mut sealed2).unwrap(), &p[..]);
    }

    #[test]
    fn every_bit_flip_is_refused() {
        let tx = GroupCipher::new(&ring_of(1));
        let mut sealer = Sealer::new(NodeId(7), 1);
        let mut sealed = Vec::new();
        tx.seal(&mut sealer, &plain(7, b"abc"), &mut sealed)
            .unwrap();
        for bit in 0..sealed.len() * 8 {
            let mut rx = GroupCipher::new(&ring_of(1));
            let mut b = sealed.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(rx.open(&mut b).is_err(), "bit {bit} flipped was accepted");
            assert_eq!(rx.senders(), 0, "a refused datagram made a window");
        }
    }

    #[test]
    fn refusals() {
        let tx = GroupCipher::new(&ring_of(1));
        let mut rx = GroupCipher::new(&ring_of(2));
        let mut sealer = Sealer::new(NodeId(7), 1);
        let mut sealed = Vec::new();
        tx.seal(&mut sealer, &plain(7, b"abc"), &mut sealed)
            .unwrap();
        assert_eq!(rx.open(&mut sealed.clone()), Err(Rejection::UnknownKey));
        assert_eq!(rx.open(&mut plain(7, b"abc")), Err(Rejection::Missing));
        assert_eq!(rx.open(&mut [1, 2, 3][..]), Err(Rejection::Malformed));
        // The nonce's sender must be the header's.
        let mut tx_other = Sealer::new(NodeId(8), 1);
        tx.seal(&mut tx_other, &plain(7, b"abc"), &mut sealed)
            .unwrap();
        let mut rx1 = GroupCipher::new(&ring_of(1));
        assert_eq!(rx1.open(&mut sealed), Err(Rejection::BadTag));
        // A sealed datagram is not sealed twice.
        let mut out = Vec::new();
        tx.seal(&mut sealer, &sealed_again(&tx), &mut out)
            .unwrap_err();
    }

    fn sealed_again(tx: &GroupCipher) -> Vec<u8> {
        let mut s = Sealer::new(NodeId(7), 99);
        let mut out = Vec::new();
        tx.seal(&mut s, &plain(7, b""), &mut out).unwrap();
        out
    }

    proptest::proptest! {
        /// Arbitrary bytes never open (and never panic), and never create a replay window.
        #[test]
        fn arbitrary_bytes_never_open(mut data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let mut rx = GroupCipher::new(&ring_of(1));
            proptest::prop_assert!(rx.open(&mut data).is_err());
            proptest::prop_assert_eq!(rx.senders(), 0);
        }

        /// Whatever is sealed opens to exactly itself, once.
        #[test]
        fn sealed_bodies_round_trip(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), start in 0u64..u64::MAX / 2) {
            let tx = GroupCipher::new(&ring_of(3));
            let mut rx = GroupCipher::new(&ring_of(3));
            let mut sealer = Sealer::new(NodeId(9), start);
            let p = plain(9, &body);
            let mut sealed = Vec::new();
            tx.seal(&mut sealer, &p, &mut sealed).unwrap();
            let mut copy = sealed.clone();
            proptest::prop_assert_eq!(rx.open(&mut copy).unwrap(), &p[..]);
            proptest::prop_assert!(rx.open(&mut sealed).is_err());
        }
    }

    #[test]
    fn rotation_accepts_both_keys() {
        let old = GroupKey::from_bytes([1; KEY_LEN]);
        let new = GroupKey::from_bytes([2; KEY_LEN]);
        assert_ne!(old.id(), new.id());
        let tx_old = GroupCipher::new(&Keyring::new(old.clone()));
        let tx_new = GroupCipher::new(&Keyring::new(new.clone()));
        let mut rx = GroupCipher::new(&Keyring::new(new).accept(old));
        let mut s = Sealer::new(NodeId(3), 10);
        let mut a = Vec::new();
        tx_old.seal(&mut s, &plain(3, b"x"), &mut a).unwrap();
        let mut b = Vec::new();
        tx_new.seal(&mut s, &plain(3, b"y"), &mut b).unwrap();
        assert!(rx.open(&mut a).is_ok());
        assert!(rx.open(&mut b).is_ok());
    }

    #[test]
    fn key_files() {
        let raw = GroupKey::from_file_contents(&[9u8; KEY_LEN]).unwrap();
        assert_eq!(raw, GroupKey::from_bytes([9u8; KEY_LEN]));
        assert_eq!(
            GroupKey::from_file_contents(b"short\n"),
            Err(KeyError::PassphraseTooShort)
        );
        let a = GroupKey::from_file_contents(b"correct horse battery staple\n").unwrap();
        let b = GroupKey::from_file_contents(b"correct horse battery staple").unwrap();
        assert_eq!(a, b);
        assert_ne!(
            a,
            GroupKey::from_file_contents(b"correct horse battery stapler").unwrap()
        );
        assert!(!format!("{a:?}").contains(&format!("{:?}", a.bytes())));
        let g1 = GroupKey::generate().unwrap();
        let g2 = GroupKey::generate().unwrap();
        assert_ne!(g1, g2);
    }
}
