//! Secure groups: authenticated encryption of every datagram, sans-IO.
//!
//! A group with a key seals every datagram of every engine (and of the runtime) the same way,
//! below the engines, so that no engine knows about it:
//!
//! ```text
//! header (20 bytes, flag 0x01 set) | key id (4) | session id (12) | counter (8)
//!     | ciphertext of the body | tag (16)
//! ```
//!
//! The authentication block is the 24 bytes from the key id to the counter (it was 16: key id
//! and a 12-byte nonce of node id and clock-based counter). A group without a key has no block
//! and no tag: its wire format is unchanged.
//!
//! * **Cipher**: AES-256-GCM from `ring` (chosen by measurement on hardware with AES-NI: about
//!   90 ns to seal 64 bytes and 210 ns for 1 KiB, against 180/580 ns for ring's
//!   ChaCha20-Poly1305 and 160/980 ns for RustCrypto's `aes-gcm`).
//! * **Associated data**: the header and the authentication block (the first 44 bytes): nothing
//!   in them can be changed without failing verification. The body is encrypted.
//! * **Sessions, and nonces that cannot repeat whatever the ids and clocks**: a sender (one
//!   [`Sealer`] per node, shared by its groups) draws a random 96-bit session id from the
//!   operating system's generator when it starts. Each datagram is sealed under the session key
//!   `HKDF-SHA-256(salt "rmcast session key v1", group key; info session id)` with the nonce
//!   `0u32 ‖ counter`, the counter going 0, 1, 2, ... within the session. A (key, nonce) pair
//!   therefore repeats only if two senders draw the same session id: for n sessions under one
//!   group key, a chance below n² / 2⁹⁷ (2⁻³³ after four billion sessions), whatever the node
//!   ids (copied `--id`s, `bench` workers numbered 1..N, a restored VM) and whatever the clocks.
//! * **Limits**: a session seals at most [`SESSION_DATAGRAMS`] (2⁴⁰) datagrams; the next one
//!   starts a new session (a new random id, the counter from 0), which receivers take as a new
//!   sender session. 2⁴⁰ datagrams of at most 64 KiB are at most 2⁵⁶ bytes under one AES-GCM
//!   key, far inside the bounds of "The Galois/Counter Mode of Operation (GCM)" (McGrew, Viega)
//!   and NIST SP 800-38D for deterministic nonces. Session keys are derived, never sent; the
//!   group key itself should still be rotated ([`Keyring`]) when a holder leaves for good.
//! * **Replays refused**: each receiver keeps a [`ReplayWindow`] per sender session (key id,
//!   session id), created only by a datagram that verified. At most [`MAX_SESSIONS`] windows
//!   per group: the least recently used is retired when a new session arrives, and
//!   [`GroupCipher::retire_absent`] retires those of senders gone from the view. A retired
//!   session leaves a small record of its highest counter ([`MAX_RETIRED`] of them, oldest
//!   forgotten first), so that a capture replayed later is still refused, while the session, if
//!   it is still alive, resumes above that counter. A restarted sender has a new session, so its
//!   counter from 0 is accepted. What a receiver cannot refuse: a capture of a session it never
//!   heard (a receiver started after the capture was made) or forgot (more than
//!   [`MAX_RETIRED`] sessions retired since). That is what the runtime's session challenge is
//!   for: [`GroupCipher::open_live`] says whether a datagram's session proved it is live now
//!   (it answered a fresh challenge under its own session key, [`GroupCipher::confirm`]); a
//!   session the receiver has not confirmed is held by the runtime until it does
//!   (`crates/rmcast/src/sessions.rs`). A session created by a datagram starts unconfirmed,
//!   and so does a retired one that comes back.
//! * **Keys**: [`GroupKey`], 32 bytes, with a 32-bit id derived from the key (HMAC-SHA-256), so
//!   that every holder of a key computes the same id. A [`Keyring`] seals with its current key and
//!   opens with any of its keys: during a rotation members accept the old key and the new one.
//!
//! What verification refuses ([`Rejection`]) is counted by the caller and never reaches an engine.

use crate::common::replay::{Replay, ReplayWindow};
use crate::engine::NodeId;
use crate::wire::{self, AUTH_BLOCK_LEN, AUTH_TAG_LEN, FLAG_AUTH, HEADER_LEN, SESSION_ID_LEN};
use ring::{aead, hkdf};
use std::collections::{HashMap, VecDeque};
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
/// Sender sessions whose replay window (8 KiB each) a group keeps at most; the least recently
/// used is retired for a new one. Only verified datagrams create one.
pub const MAX_SESSIONS: usize = 1024;
/// Retired sessions whose highest counter a group remembers (24 bytes each, and the map's
/// overhead), so that their captures stay refused; the oldest are forgotten first.
pub const MAX_RETIRED: usize = 1 << 16;
/// Datagrams a session seals at most before its sealer starts a new one.
pub const SESSION_DATAGRAMS: u64 = 1 << 40;
/// Salt of the session key derivation.
const SESSION_SALT: &[u8] = b"rmcast session key v1";
/// Session keys a [`Sealer`] keeps derived (one per group key it seals with).
const SEALER_KEYS: usize = 16;
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

    /// The key a key file holds: exactly 32 bytes that are not all printable text are the key
    /// itself (what `rmcast keygen` writes); anything else is a passphrase, without the line
    /// ends around it. (32 random bytes are all printable once in about 10^14 keys; a 31-letter
    /// passphrase and its newline, or one of 32 letters, would otherwise be used unstretched.)
    pub fn from_file_contents(contents: &[u8]) -> Result<Self, KeyError> {
        let text = contents
            .iter()
            .all(|&b| (0x20..=0x7e).contains(&b) || b == b'\n' || b == b'\r');
        if let (Ok(bytes), false) = (<[u8; KEY_LEN]>::try_from(contents), text) {
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
    /// A counter seen before in its session, too old to tell, or of a retired session at or
    /// below its last counter ([`Replay`]).
    Replay(Replay),
}

/// Why a datagram could not be sealed: what the engine wrote is not a plain datagram. A bug,
/// counted by the caller.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SealError;

/// A session id: 96 random bits naming one sender session (see the module docs).
pub type SessionId = [u8; SESSION_ID_LEN];

/// The sealing state of one node: its current session (random id, datagram counter) and the
/// session keys derived for it (see the module docs).
pub struct Sealer {
    session: SessionId,
    next: u64,
    limit: u64,
    /// Session keys derived for `session`, by group key id.
    keys: Vec<(u32, aead::LessSafeKey)>,
    /// Draws the next session id; `None`: fixed (a simulator), the limit then ends sealing.
    random: Option<ring::rand::SystemRandom>,
}

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealer")
            .field("session", &self.session)
            .field("next", &self.next)
            .finish()
    }
}

impl Sealer {
    /// A sealer with a random session id from the operating system's generator: what a real
    /// node uses. A new session (new random id, counter from 0) follows every
    /// [`SESSION_DATAGRAMS`] datagrams.
    pub fn random() -> Result<Self, KeyError> {
        let random = ring::rand::SystemRandom::new();
        let mut session = [0u8; SESSION_ID_LEN];
        ring::rand::SecureRandom::fill(&random, &mut session).map_err(|_| KeyError::Random)?;
        Ok(Sealer {
            session,
            next: 0,
            limit: SESSION_DATAGRAMS,
            keys: Vec::new(),
            random: Some(random),
        })
    }

    /// A sealer of the given session, with no generator: for a deterministic simulator and
    /// tests. It refuses to seal past the session's limit, since it cannot draw another id.
    pub fn with_session(session: SessionId) -> Self {
        Sealer {
            session,
            next: 0,
            limit: SESSION_DATAGRAMS,
            keys: Vec::new(),
            random: None,
        }
    }

    /// Seal at most `limit` datagrams per session (at most [`SESSION_DATAGRAMS`]): to see a
    /// session change in a test.
    pub fn session_limit(mut self, limit: u64) -> Self {
        self.limit = limit.min(SESSION_DATAGRAMS);
        self
    }

    /// The current session id.
    pub fn session(&self) -> SessionId {
        self.session
    }

    /// The next counter of the session, starting a new session at the limit.
    fn next_counter(&mut self) -> Result<u64, SealError> {
        if self.next >= self.limit {
            let random = self.random.as_ref().ok_or(SealError)?;
            ring::rand::SecureRandom::fill(random, &mut self.session).map_err(|_| SealError)?;
            self.next = 0;
            self.keys.clear();
        }
        let n = self.next;
        self.next += 1;
        Ok(n)
    }

    /// The session key of this session under the group key `prk` (id `key_id`), derived once.
    fn key(&mut self, key_id: u32, prk: &hkdf::Prk) -> Result<&aead::LessSafeKey, SealError> {
        let i = match self.keys.iter().position(|(id, _)| *id == key_id) {
            Some(i) => i,
            None => {
                if self.keys.len() >= SEALER_KEYS {
                    self.keys.clear();
                }
                let k = session_key(prk, &self.session).ok_or(SealError)?;
                self.keys.push((key_id, k));
                self.keys.len() - 1
            }
        };
        Ok(&self.keys[i].1)
    }
}

/// The AES-256-GCM key of session `session` under the group key whose HKDF pseudo-random key
/// is `prk`.
fn session_key(prk: &hkdf::Prk, session: &SessionId) -> Option<aead::LessSafeKey> {
    let info = [&session[..]];
    let okm = prk.expand(&info, &aead::AES_256_GCM).ok()?;
    Some(aead::LessSafeKey::new(aead::UnboundKey::from(okm)))
}

/// The nonce of a session's datagram `counter`: unique within the session's key.
fn nonce(counter: u64) -> aead::Nonce {
    let mut n = [0u8; aead::NONCE_LEN];
    n[4..].copy_from_slice(&counter.to_be_bytes());
    aead::Nonce::assume_unique_for_key(n)
}

/// A sender session as a receiver knows it: which group key, which session.
pub type SessionName = (u32, SessionId);

/// Bytes of a session challenge.
pub const CHALLENGE_LEN: usize = 16;

/// The secret a receiver makes its session challenges with, so that it can check an answer
/// without remembering the challenge (as WireGuard's cookies and QUIC's retry tokens are
/// checked): a challenge is the first [`CHALLENGE_LEN`] bytes of HMAC-SHA-256 under this
/// secret of the session challenged and an epoch number. Nobody without the secret predicts
/// one, and one of an old epoch is refused.
pub struct ChallengeKey(ring::hmac::Key);

impl fmt::Debug for ChallengeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ChallengeKey { .. }")
    }
}

impl ChallengeKey {
    /// A challenge key of 32 secret bytes (drawn from the operating system's generator).
    pub fn new(secret: [u8; KEY_LEN]) -> Self {
        ChallengeKey(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret))
    }

    /// The challenge of session `name` in epoch `epoch`.
    pub fn challenge(&self, name: &SessionName, epoch: u64) -> [u8; CHALLENGE_LEN] {
        let mut ctx = ring::hmac::Context::with_key(&self.0);
        ctx.update(&name.0.to_be_bytes());
        ctx.update(&name.1);
        ctx.update(&epoch.to_be_bytes());
        let tag = ctx.sign();
        let mut c = [0u8; CHALLENGE_LEN];
        c.copy_from_slice(&tag.as_ref()[..CHALLENGE_LEN]);
        c
    }
}

/// A live sender session at a receiver.
struct Session {
    key: aead::LessSafeKey,
    window: ReplayWindow,
    sender: NodeId,
    /// When it last verified a datagram (the cipher's clock of opens): least recently used
    /// goes first.
    used: u64,
    /// It answered a fresh challenge under its key ([`GroupCipher::confirm`]): it is live,
    /// not a capture replayed.
    live: bool,
}

/// The ciphers and replay windows of one secure group.
pub struct GroupCipher {
    /// `(key id, HKDF pseudo-random key of the group key)`; the first seals.
    keys: Vec<(u32, hkdf::Prk)>,
    sessions: HashMap<SessionName, Session>,
    /// Retired sessions: highest counter accepted, and the retirement's number in `order`.
    retired: HashMap<SessionName, (u64, u64)>,
    /// Retired sessions, oldest first (entries of sessions revived since are skipped).
    order: VecDeque<(SessionName, u64)>,
    retirements: u64,
    opens: u64,
}

impl fmt::Debug for GroupCipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupCipher")
            .field("keys", &self.keys.iter().map(|k| k.0).collect::<Vec<_>>())
            .field("sessions", &self.sessions.len())
            .field("retired", &self.retired.len())
            .finish()
    }
}

fn prk(k: &GroupKey) -> hkdf::Prk {
    hkdf::Salt::new(hkdf::HKDF_SHA256, SESSION_SALT).extract(&k.bytes)
}

impl GroupCipher {
    /// The cipher of a group holding `keys`.
    pub fn new(keys: &Keyring) -> Self {
        GroupCipher {
            keys: std::iter::once(&keys.current)
                .chain(&keys.accepted)
                .map(|k| (k.id, prk(k)))
                .collect(),
            sessions: HashMap::new(),
            retired: HashMap::new(),
            order: VecDeque::new(),
            retirements: 0,
            opens: 0,
        }
    }

    /// Seal the plain datagram `plain` (header and body, flags clear) into `out`, with the next
    /// counter of `sealer`'s session.
    pub fn seal(
        &self,
        sealer: &mut Sealer,
        plain: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), SealError> {
        if plain.len() < HEADER_LEN || plain[FLAGS_AT] & FLAG_AUTH != 0 {
            return Err(SealError);
        }
        let (key_id, prk) = &self.keys[0];
        let counter = sealer.next_counter()?;
        let session = sealer.session();
        let key = sealer.key(*key_id, prk)?;
        out.clear();
        out.reserve(plain.len() + AUTH_OVERHEAD);
        out.extend_from_slice(&plain[..HEADER_LEN]);
        out[FLAGS_AT] |= FLAG_AUTH;
        out.extend_from_slice(&key_id.to_be_bytes());
        out.extend_from_slice(&session);
        out.extend_from_slice(&counter.to_be_bytes());
        out.extend_from_slice(&plain[HEADER_LEN..]);
        let (aad, body) = out.split_at_mut(AAD_LEN);
        let tag = key
            .seal_in_place_separate_tag(nonce(counter), aead::Aad::from(&*aad), body)
            .map_err(|_| SealError)?;
        out.extend_from_slice(tag.as_ref());
        Ok(())
    }

    /// Verify and decrypt the sealed datagram in `buf`, in place. On success returns the plain
    /// datagram (header with the flag cleared, then the body), a part of `buf`, and records its
    /// counter in its session's replay window.
    pub fn open<'a>(&mut self, buf: &'a mut [u8]) -> Result<&'a mut [u8], Rejection> {
        self.open_live(buf).map(|(plain, _)| plain)
    }

    /// [`GroupCipher::open`], and whether the datagram's session is confirmed live
    /// ([`GroupCipher::confirm`]). A session this cipher never heard, or retired, is not: its
    /// datagram may be a capture of a session that is gone.
    pub fn open_live<'a>(&mut self, buf: &'a mut [u8]) -> Result<(&'a mut [u8], bool), Rejection> {
        let (sender, key_id, session, counter) = {
            let p = wire::decode(buf).map_err(|_| Rejection::Malformed)?;
            let a = p.auth.ok_or(Rejection::Missing)?;
            (p.header.sender, a.key_id, a.session, a.counter)
        };
        let prk = &self
            .keys
            .iter()
            .find(|(id, _)| *id == key_id)
            .ok_or(Rejection::UnknownKey)?
            .1;
        let name = (key_id, session);
        // Cheap refusal of a replay before the decryption; recorded only once verified.
        let fresh_key = match self.sessions.get(&name) {
            Some(s) => {
                s.window.check(counter).map_err(Rejection::Replay)?;
                None
            }
            None => {
                if let Some((top, _)) = self.retired.get(&name) {
                    if counter <= *top {
                        return Err(Rejection::Replay(Replay::TooOld));
                    }
                }
                Some(session_key(prk, &session).ok_or(Rejection::BadTag)?)
            }
        };
        let (aad, sealed) = buf.split_at_mut(AAD_LEN);
        let key = match &fresh_key {
            Some(k) => k,
            None => &self.sessions[&name].key,
        };
        let plain_len = key
            .open_in_place(nonce(counter), aead::Aad::from(&*aad), sealed)
            .map_err(|_| Rejection::BadTag)?
            .len();
        self.opens += 1;
        let used = self.opens;
        let live = match fresh_key {
            None => {
                let s = self.sessions.get_mut(&name).expect("looked up above");
                s.window.accept(counter).map_err(Rejection::Replay)?;
                s.used = used;
                s.sender = sender;
                s.live
            }
            Some(key) => {
                if self.sessions.len() >= MAX_SESSIONS {
                    self.retire_least_recent();
                }
                // A retired session comes back above its last counter.
                let mut window = match self.retired.remove(&name) {
                    Some((top, _)) => ReplayWindow::seen_up_to(top),
                    None => ReplayWindow::new(),
                };
                window.accept(counter).map_err(Rejection::Replay)?;
                self.sessions.insert(
                    name,
                    Session {
                        key,
                        window,
                        sender,
                        used,
                        live: false,
                    },
                );
                false
            }
        };
        // The plain datagram: the header moved up against the body, its flag cleared.
        buf.copy_within(..HEADER_LEN, AUTH_BLOCK_LEN);
        buf[AUTH_BLOCK_LEN + FLAGS_AT] &= !FLAG_AUTH;
        Ok((&mut buf[AUTH_BLOCK_LEN..AAD_LEN + plain_len], live))
    }

    /// Session `name` answered a fresh challenge under its own key: it is live, and
    /// [`GroupCipher::open_live`] says so of its datagrams from now on (until it is retired).
    /// False if this cipher has no window for it.
    pub fn confirm(&mut self, name: &SessionName) -> bool {
        match self.sessions.get_mut(name) {
            Some(s) => {
                s.live = true;
                true
            }
            None => false,
        }
    }

    /// Retire the least recently used session, unconfirmed ones first: a flood of captures
    /// replayed from many sessions that are gone does not push out the live senders' windows.
    fn retire_least_recent(&mut self) {
        if let Some(name) = self
            .sessions
            .iter()
            .min_by_key(|(_, s)| (s.live, s.used))
            .map(|(n, _)| *n)
        {
            self.retire(name);
        }
    }

    /// Move a live session to the retired: its window goes, its highest counter stays.
    fn retire(&mut self, name: SessionName) {
        let Some(s) = self.sessions.remove(&name) else {
            return;
        };
        let Some(top) = s.window.top() else {
            return;
        };
        self.retirements += 1;
        self.retired.insert(name, (top, self.retirements));
        self.order.push_back((name, self.retirements));
        while self.order.len() > MAX_RETIRED {
            if let Some((old, n)) = self.order.pop_front() {
                if self.retired.get(&old).is_some_and(|(_, m)| *m == n) {
                    self.retired.remove(&old);
                }
            }
        }
    }

    /// Retire the sessions of every sender not in `members` (the group's new view): a member
    /// gone frees its window, and its captures stay refused (see the module docs). A sender
    /// outside the view that is still talking (a client) resumes above its last counter.
    pub fn retire_absent(&mut self, members: &[NodeId]) {
        let gone: Vec<SessionName> = self
            .sessions
            .iter()
            .filter(|(_, s)| !members.contains(&s.sender))
            .map(|(n, _)| *n)
            .collect();
        for n in gone {
            self.retire(n);
        }
    }

    /// Sender sessions with a replay window.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Retired sessions remembered.
    pub fn retired(&self) -> usize {
        self.retired.len()
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
        let mut sealer = Sealer::with_session([7; SESSION_ID_LEN]);
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
        let mut sealer = Sealer::with_session([7; SESSION_ID_LEN]);
        let mut sealed = Vec::new();
        tx.seal(&mut sealer, &plain(7, b"abc"), &mut sealed)
            .unwrap();
        for bit in 0..sealed.len() * 8 {
            let mut rx = GroupCipher::new(&ring_of(1));
            let mut b = sealed.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(rx.open(&mut b).is_err(), "bit {bit} flipped was accepted");
            assert_eq!(rx.sessions(), 0, "a refused datagram made a window");
        }
    }

    #[test]
    fn refusals() {
        let tx = GroupCipher::new(&ring_of(1));
        let mut rx = GroupCipher::new(&ring_of(2));
        let mut sealer = Sealer::with_session([7; SESSION_ID_LEN]);
        let mut sealed = Vec::new();
        tx.seal(&mut sealer, &plain(7, b"abc"), &mut sealed)
            .unwrap();
        assert_eq!(rx.open(&mut sealed.clone()), Err(Rejection::UnknownKey));
        // Another session's key does not open it: the session id is bound to the key.
        let mut moved = sealed.clone();
        moved[HEADER_LEN + 4] ^= 1;
        assert_eq!(
            GroupCipher::new(&ring_of(1)).open(&mut moved),
            Err(Rejection::BadTag)
        );
        assert_eq!(rx.open(&mut plain(7, b"abc")), Err(Rejection::Missing));
        assert_eq!(rx.open(&mut [1, 2, 3][..]), Err(Rejection::Malformed));
        // A sealed datagram is not sealed twice.
        let mut out = Vec::new();
        tx.seal(&mut sealer, &sealed_again(&tx), &mut out)
            .unwrap_err();
    }

    fn sealed_again(tx: &GroupCipher) -> Vec<u8> {
        let mut s = Sealer::with_session([7; SESSION_ID_LEN]);
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
            proptest::prop_assert_eq!(rx.sessions(), 0);
        }

        /// Whatever is sealed opens to exactly itself, once.
        #[test]
        fn sealed_bodies_round_trip(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), session in proptest::prelude::any::<[u8; SESSION_ID_LEN]>()) {
            let tx = GroupCipher::new(&ring_of(3));
            let mut rx = GroupCipher::new(&ring_of(3));
            let mut sealer = Sealer::with_session(session);
            let p = plain(9, &body);
            let mut sealed = Vec::new();
            tx.seal(&mut sealer, &p, &mut sealed).unwrap();
            let mut copy = sealed.clone();
            proptest::prop_assert_eq!(rx.open(&mut copy).unwrap(), &p[..]);
            proptest::prop_assert!(rx.open(&mut sealed).is_err());
        }
    }

    /// Seal datagram `n` of `sealer`'s sender `id`.
    fn sealed(tx: &GroupCipher, sealer: &mut Sealer, id: u32) -> Vec<u8> {
        let mut out = Vec::new();
        tx.seal(sealer, &plain(id, b"payload"), &mut out).unwrap();
        out
    }

    fn nonce_of(d: &[u8]) -> (u32, [u8; SESSION_ID_LEN], u64) {
        let a = wire::decode(d).unwrap().auth.unwrap();
        (a.key_id, a.session, a.counter)
    }

    #[test]
    fn sessions_change_at_their_limit_and_never_repeat_a_nonce() {
        let tx = GroupCipher::new(&ring_of(1));
        let mut rx = GroupCipher::new(&ring_of(1));
        // Two senders with one node id and one key, as copied ids or restored VMs have them.
        let mut a = Sealer::random().unwrap().session_limit(3);
        let mut b = Sealer::random().unwrap().session_limit(3);
        assert_ne!(a.session(), b.session());
        let mut seen = std::collections::HashSet::new();
        let mut sessions = std::collections::HashSet::new();
        for _ in 0..10 {
            for s in [&mut a, &mut b] {
                let d = sealed(&tx, s, 7);
                let (key, session, counter) = nonce_of(&d);
                assert!(counter < 3, "counter {counter} past the session limit");
                assert!(seen.insert((key, session, counter)), "a nonce repeated");
                sessions.insert(session);
                assert!(rx.open(&mut d.clone()).is_ok());
            }
        }
        // 10 datagrams per sender in sessions of 3: 4 sessions each.
        assert_eq!(sessions.len(), 8);
        // A sealer that cannot draw a new session stops at the limit.
        let mut fixed = Sealer::with_session([1; SESSION_ID_LEN]).session_limit(2);
        let mut out = Vec::new();
        tx.seal(&mut fixed, &plain(1, b""), &mut out).unwrap();
        tx.seal(&mut fixed, &plain(1, b""), &mut out).unwrap();
        assert_eq!(
            tx.seal(&mut fixed, &plain(1, b""), &mut out),
            Err(SealError)
        );
    }

    #[test]
    fn more_senders_than_the_bound_are_all_accepted_over_time() {
        let tx = GroupCipher::new(&ring_of(1));
        let mut rx = GroupCipher::new(&ring_of(1));
        let first = {
            let mut s = Sealer::random().unwrap();
            let d = sealed(&tx, &mut s, 1);
            assert!(rx.open(&mut d.clone()).is_ok());
            d
        };
        for i in 0..(MAX_SESSIONS as u32 * 3) {
            let mut s = Sealer::random().unwrap();
            let mut d = sealed(&tx, &mut s, 2 + i);
            assert!(rx.open(&mut d).is_ok(), "sender {i} refused");
            assert!(rx.sessions() <= MAX_SESSIONS);
        }
        assert_eq!(rx.sessions(), MAX_SESSIONS);
        // The first session was retired long ago: its capture is still refused.
        assert_eq!(
            rx.open(&mut first.clone()),
            Err(Rejection::Replay(Replay::TooOld))
        );
    }

    #[test]
    fn a_restarted_sender_is_accepted_and_its_old_captures_refused() {
        let tx = GroupCipher::new(&ring_of(1));
        let mut rx = GroupCipher::new(&ring_of(1));
        let mut old = Sealer::random().unwrap();
        let captured: Vec<Vec<u8>> = (0..5).map(|_| sealed(&tx, &mut old, 4)).collect();
        for d in &captured {
            assert!(rx.open(&mut d.clone()).is_ok());
        }
        // Node 4 leaves the view: its window goes, its last counter stays.
        rx.retire_absent(&[NodeId(1), NodeId(2)]);
        assert_eq!(rx.sessions(), 0);
        assert_eq!(rx.retired(), 1);
        for d in &captured {
            assert_eq!(
                rx.open(&mut d.clone()),
                Err(Rejection::Replay(Replay::TooOld))
            );
        }
        // Restarted with the same id: a new session from counter 0, accepted.
        let mut new = Sealer::random().unwrap();
        let fresh = sealed(&tx, &mut new, 4);
        assert_eq!(nonce_of(&fresh).2, 0);
        assert!(rx.open(&mut fresh.clone()).is_ok());
        assert_eq!(
            rx.open(&mut fresh.clone()),
            Err(Rejection::Replay(Replay::Duplicate))
        );
        // The old session, still alive (a client outside the view), resumes above its last
        // counter.
        assert!(rx.open(&mut sealed(&tx, &mut old, 4)).is_ok());
        assert_eq!(rx.retired(), 0);
        assert_eq!(
            rx.open(&mut captured[4].clone()),
            Err(Rejection::Replay(Replay::Duplicate))
        );
        // Members in the view keep their windows.
        rx.retire_absent(&[NodeId(4)]);
        assert_eq!(rx.sessions(), 2);
    }

    /// A session starts unconfirmed (it may be a capture of a session that is gone), is live
    /// once confirmed, and unconfirmed again when it comes back after being retired.
    #[test]
    fn sessions_start_unconfirmed_and_are_live_once_confirmed() {
        let tx = GroupCipher::new(&ring_of(1));
        let mut rx = GroupCipher::new(&ring_of(1));
        let mut s = Sealer::with_session([5; SESSION_ID_LEN]);
        let name = (ring_of(1).current().id(), [5; SESSION_ID_LEN]);
        assert!(!rx.confirm(&name), "no window yet");
        let (_, live) = rx.open_live(&mut sealed(&tx, &mut s, 5)).unwrap();
        assert!(!live);
        let (_, live) = rx.open_live(&mut sealed(&tx, &mut s, 5)).unwrap();
        assert!(!live);
        assert!(rx.confirm(&name));
        let (_, live) = rx.open_live(&mut sealed(&tx, &mut s, 5)).unwrap();
        assert!(live);
        rx.retire_absent(&[NodeId(1)]);
        let (_, live) = rx.open_live(&mut sealed(&tx, &mut s, 5)).unwrap();
        assert!(!live, "a retired session is confirmed again");
    }

    /// When the sessions are at their bound, an unconfirmed one is retired before any live
    /// one, however recently used.
    #[test]
    fn unconfirmed_sessions_are_retired_first() {
        let tx = GroupCipher::new(&ring_of(1));
        let mut rx = GroupCipher::new(&ring_of(1));
        let key = ring_of(1).current().id();
        let mut live = Sealer::random().unwrap();
        rx.open(&mut sealed(&tx, &mut live, 1)).unwrap();
        assert!(rx.confirm(&(key, live.session())));
        for i in 0..MAX_SESSIONS as u32 * 2 {
            let mut s = Sealer::random().unwrap();
            rx.open(&mut sealed(&tx, &mut s, 2 + i)).unwrap();
        }
        let (_, still) = rx.open_live(&mut sealed(&tx, &mut live, 1)).unwrap();
        assert!(still, "the live session was retired for unconfirmed ones");
    }

    /// A challenge depends on the secret, the session and the epoch.
    #[test]
    fn challenges_are_keyed_per_session_and_epoch() {
        let k = ChallengeKey::new([1; KEY_LEN]);
        let a = (7, [1; SESSION_ID_LEN]);
        let b = (7, [2; SESSION_ID_LEN]);
        assert_eq!(k.challenge(&a, 3), k.challenge(&a, 3));
        assert_ne!(k.challenge(&a, 3), k.challenge(&a, 4));
        assert_ne!(k.challenge(&a, 3), k.challenge(&b, 3));
        assert_ne!(k.challenge(&a, 3), k.challenge(&(8, a.1), 3));
        assert_ne!(
            k.challenge(&a, 3),
            ChallengeKey::new([2; KEY_LEN]).challenge(&a, 3)
        );
    }

    #[test]
    fn rotation_accepts_both_keys() {
        let old = GroupKey::from_bytes([1; KEY_LEN]);
        let new = GroupKey::from_bytes([2; KEY_LEN]);
        assert_ne!(old.id(), new.id());
        let tx_old = GroupCipher::new(&Keyring::new(old.clone()));
        let tx_new = GroupCipher::new(&Keyring::new(new.clone()));
        let mut rx = GroupCipher::new(&Keyring::new(new).accept(old));
        let mut s = Sealer::with_session([3; SESSION_ID_LEN]);
        let mut a = Vec::new();
        tx_old.seal(&mut s, &plain(3, b"x"), &mut a).unwrap();
        let mut b = Vec::new();
        tx_new.seal(&mut s, &plain(3, b"y"), &mut b).unwrap();
        assert!(rx.open(&mut a).is_ok());
        assert!(rx.open(&mut b).is_ok());
    }

    #[test]
    fn key_files() {
        // A passphrase of 31 letters and a newline, or of 32 letters, is 32 bytes: stretched
        // as a passphrase, not taken as the key.
        let p31 = GroupKey::from_file_contents(b"0123456789abcdefghijklmnopqrstu\n").unwrap();
        assert_eq!(
            p31,
            GroupKey::from_passphrase(b"0123456789abcdefghijklmnopqrstu").unwrap()
        );
        assert_ne!(p31.bytes(), b"0123456789abcdefghijklmnopqrstu\n");
        let p32 = GroupKey::from_file_contents(b"0123456789abcdefghijklmnopqrstuv").unwrap();
        assert_ne!(p32.bytes(), b"0123456789abcdefghijklmnopqrstuv");
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
