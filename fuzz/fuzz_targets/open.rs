//! Fuzz target: authenticated datagrams of secure groups (`rmcast_proto::secure`). Any byte
//! string given to `GroupCipher::open` is refused with a typed `Rejection` or, only if it was
//! really sealed with the key, opened; never a panic. The same bytes, taken as the body of a
//! plain datagram, are sealed and must open to exactly what was sealed, once (a second open is a
//! replay), and with any one bit flipped must not open at all.
//!
//! Run with `cargo +nightly fuzz run open` from the repository root.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcast_proto::secure::{GroupCipher, GroupKey, Keyring, Rejection, Sealer, SessionId};
use rmcast_proto::wire::{EngineKind, Header};
use rmcast_proto::NodeId;

fuzz_target!(|data: &[u8]| {
    let keys = Keyring::new(GroupKey::from_bytes([7; 32]));
    let mut rx = GroupCipher::new(&keys);
    // Arbitrary input: refused (a forgery cannot verify without the key).
    let mut buf = data.to_vec();
    assert!(rx.open(&mut buf).is_err());

    // Round trip of the input as a body.
    let tx = GroupCipher::new(&keys);
    // A fixed session per input length (a real node draws it at random).
    let mut session = SessionId::default();
    session[..4].copy_from_slice(&(data.len() as u32).to_be_bytes());
    let mut sealer = Sealer::with_session(session);
    let mut plain = Vec::new();
    Header {
        engine: EngineKind::Sequencer,
        ptype: data.first().copied().unwrap_or(1),
        flags: 0,
        group: 42,
        incarnation: 1,
        sender: NodeId(5),
    }
    .encode(&mut plain);
    plain.extend_from_slice(data);
    let mut sealed = Vec::new();
    tx.seal(&mut sealer, &plain, &mut sealed)
        .expect("a plain datagram seals");
    let mut copy = sealed.clone();
    assert_eq!(rx.open(&mut copy).expect("opens"), &plain[..]);
    let mut again = sealed.clone();
    assert!(matches!(rx.open(&mut again), Err(Rejection::Replay(_))));
    if !data.is_empty() {
        let bit = usize::from(data[0]) * 31 % (sealed.len() * 8);
        let mut flipped = sealed.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        let mut fresh = GroupCipher::new(&keys);
        assert!(fresh.open(&mut flipped).is_err());
    }
});
