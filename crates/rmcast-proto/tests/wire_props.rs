//! Property tests of the wire codec (docs/ARCHITECTURE.md: decoding is total).
//!
//! Three families, all over the common header codec (`wire::decode`) and the sequencer packet
//! codec (`sequencer::packet::decode`):
//!
//! - **Totality.** Any byte string decodes to a packet or a typed [`WireError`], never a panic;
//!   when it decodes, walking the lazy entry iterators and decoding Join/Leave views never panics
//!   either, entries borrow from the input, and re-encoding the decoded packet gives back the very
//!   same bytes (the encoding is canonical, so nothing was silently skipped or invented).
//! - **Round trip.** Packets built with the writers from random entries and states decode to
//!   exactly what was written.
//! - **Mutation.** Valid datagrams with bytes flipped, removed or inserted, truncated, extended or
//!   with their count and length fields rewritten still never panic; a strict prefix is always
//!   `Truncated` and an extension always `TrailingBytes`.
//!
//! Random bytes rarely get past the magic, so the totality inputs mix pure noise with noise behind
//! a plausible header; the mutation family reaches the deep paths of the entry decoders.

use proptest::prelude::*;
use rmcast_proto::sequencer::packet::{
    self, decode_view, encode_control, encode_view, ptype, Body, EntryKind, OrderedEntry,
    OrderedWriter, ReqEntry, ReqWriter, SeqState, VoteKind, ORDERED_FIXED, REQ_FIXED,
};
use rmcast_proto::wire::{
    self, Auth, EngineKind, Header, WireError, AUTH_BLOCK_LEN, AUTH_TAG_LEN, FLAG_AUTH, HEADER_LEN,
    MAGIC, VERSION,
};
use rmcast_proto::NodeId;

// ---------------------------------------------------------------------------------------------
// Walking decoded packets
// ---------------------------------------------------------------------------------------------

/// Whether `inner` lies within `outer` (entries must borrow from the datagram, not copy).
fn within(outer: &[u8], inner: &[u8]) -> bool {
    let o = outer.as_ptr_range();
    let i = inner.as_ptr_range();
    i.start >= o.start && i.end <= o.end
}

/// Splice the authentication block and tag into a datagram written without them (the writers
/// emit header then body; an authenticated datagram carries the block in between and the tag at
/// the end).
fn add_auth(buf: &mut Vec<u8>, auth: &Auth) {
    let mut block = Vec::with_capacity(AUTH_BLOCK_LEN);
    block.extend_from_slice(&auth.key_id.to_be_bytes());
    block.extend_from_slice(&auth.session);
    block.extend_from_slice(&auth.counter.to_be_bytes());
    buf.splice(HEADER_LEN..HEADER_LEN, block);
    buf.extend_from_slice(&auth.tag);
}

/// Encode a decoded sequencer packet again with the public writers.
fn reencode(header: &Header, auth: Option<&Auth>, body: &Body<'_>) -> Vec<u8> {
    let mut buf = Vec::new();
    match body {
        Body::Ordered {
            state,
            base_seq,
            entries,
        } => {
            let mut w = OrderedWriter::new(&mut buf, header, *state, *base_seq);
            for e in entries.clone() {
                w.push(&e);
            }
        }
        Body::BcastReq {
            expect,
            held_next,
            ordered_through,
            entries,
            ..
        } => {
            let mut w = ReqWriter::new(&mut buf, header, *expect, *held_next, *ordered_through);
            for e in entries.clone() {
                w.push(&e);
            }
        }
        other => encode_control(&mut buf, header, other),
    }
    if let Some(a) = auth {
        add_auth(&mut buf, a);
    }
    buf
}

/// Read the big-endian u16 entry count at `at` in `body`.
fn count_at(body: &[u8], at: usize) -> usize {
    u16::from_be_bytes([body[at], body[at + 1]]) as usize
}

/// Decode `datagram` with both decoders and check everything that must hold of the result.
/// Returns the sequencer decoder's verdict so callers can assert more.
fn walk(datagram: &[u8]) -> Result<(), WireError> {
    // The common header codec: when it decodes, header + auth + body is the input again.
    let common = wire::decode(datagram);
    match &common {
        Ok(p) => {
            let mut again = Vec::new();
            p.header.encode(&mut again);
            if let Some(a) = &p.auth {
                again.extend_from_slice(&a.key_id.to_be_bytes());
                again.extend_from_slice(&a.session);
                again.extend_from_slice(&a.counter.to_be_bytes());
            }
            again.extend_from_slice(p.body);
            if let Some(a) = &p.auth {
                again.extend_from_slice(&a.tag);
            }
            assert_eq!(again, datagram, "common header re-encoding differs");
            assert!(within(datagram, p.body));
            assert_eq!(p.auth.is_some(), p.header.flags & FLAG_AUTH != 0);
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }

    let seq = packet::decode(datagram);
    match (&common, &seq) {
        // The sequencer decoder is the common one plus a body: header errors are the same.
        (Err(ce), Err(se)) => assert_eq!(ce, se),
        (Err(ce), Ok(_)) => panic!("sequencer decoded what the header codec refused ({ce})"),
        (Ok(p), Err(se)) => {
            assert!(!se.to_string().is_empty());
            if p.header.engine != EngineKind::Sequencer {
                assert_eq!(*se, WireError::BadEngine(p.header.engine as u8));
            }
        }
        (Ok(p), Ok((h, body))) => {
            assert_eq!(*h, p.header);
            walk_body(datagram, p.body, body);
            assert_eq!(
                reencode(h, p.auth.as_ref(), body),
                datagram,
                "sequencer re-encoding differs"
            );
        }
    }
    seq.map(|_| ())
}

/// Walk the lazy entries of a decoded body and check each one.
fn walk_body(datagram: &[u8], raw_body: &[u8], body: &Body<'_>) {
    match body {
        Body::Ordered {
            state,
            base_seq,
            entries,
        } => {
            assert!(state.stable <= state.accepted_next && state.accepted_next <= state.next_seq);
            let announced = count_at(raw_body, ORDERED_FIXED - 2);
            let mut n = 0usize;
            let mut it = entries.clone();
            for e in it.by_ref() {
                n += 1;
                assert!(n <= announced, "iterator yields more than announced");
                assert!(e.frag_count >= 1 && e.frag_index < e.frag_count);
                assert!(e.has_payload || e.payload.is_empty());
                assert!(within(datagram, e.payload));
                if matches!(
                    e.kind,
                    EntryKind::Join | EntryKind::Leave | EntryKind::Reset
                ) {
                    // Views come from the wire too: decoding them must be total as well.
                    if let Ok((_, _, members)) = decode_view(e.payload) {
                        assert_eq!(e.payload.len(), 8 + 4 + 2 + 4 * members.len());
                    }
                }
            }
            // Validation and lazy iteration agree: every announced entry is yielded.
            assert_eq!(n, announced);
            assert!(it.next().is_none());
            assert!(base_seq.checked_add(n as u64).is_some());
        }
        Body::BcastReq { bb, entries, .. } => {
            let announced = count_at(raw_body, REQ_FIXED - 2);
            let mut n = 0usize;
            let mut it = entries.clone();
            for e in it.by_ref() {
                n += 1;
                assert!(n <= announced, "iterator yields more than announced");
                assert!(e.frag_count >= 1 && e.frag_index < e.frag_count);
                assert!(within(datagram, e.payload));
            }
            assert_eq!(n, announced);
            assert!(it.next().is_none());
            let _ = bb;
        }
        Body::Accept(s) | Body::Sync(s) => {
            assert!(s.stable <= s.accepted_next && s.accepted_next <= s.next_seq);
        }
        Body::Retrans { ranges, expect } => {
            let r: Vec<(u64, u64)> = ranges.iter().collect();
            assert!(!r.is_empty() && r.len() <= packet::MAX_NACK_RANGES);
            assert!(r[0].0 >= *expect);
            assert!(r.iter().all(|&(f, t)| f < t));
            assert!(r.windows(2).all(|w| w[0].1 < w[1].0));
            assert!(r[r.len() - 1].1 - r[0].0 <= packet::MAX_NACK_SPAN);
        }
        Body::ReqGap { from, to } => assert!(from < to),
        Body::Queued { .. } => {}
        Body::Result {
            seq, stable, view, ..
        } => {
            assert!(stable <= seq);
            assert!(within(datagram, view));
            let (_, _, members) = decode_view(view).expect("validated by decode");
            assert_eq!(view.len(), 8 + 4 + 2 + 4 * members.len());
        }
        Body::Status { .. }
        | Body::JoinReq { .. }
        | Body::JoinRefused { .. }
        | Body::LeaveReq { .. }
        | Body::AliveReq { .. }
        | Body::Alive { .. }
        | Body::ReformReq { .. }
        | Body::Vote { .. }
        | Body::ResultAck { .. } => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Models of valid packets
// ---------------------------------------------------------------------------------------------

/// An ordered entry that owns its payload.
#[derive(Clone, Debug, PartialEq, Eq)]
struct OwnedOrdered {
    kind: EntryKind,
    has_payload: bool,
    sender: u32,
    pnum: u64,
    frag_index: u16,
    frag_count: u16,
    payload: Vec<u8>,
    /// The view inside a Join/Leave payload, to check `decode_view` too.
    view: Option<(u64, u32, Vec<u32>)>,
}

impl OwnedOrdered {
    fn borrow(&self) -> OrderedEntry<'_> {
        OrderedEntry {
            kind: self.kind,
            has_payload: self.has_payload,
            sender: NodeId(self.sender),
            pnum: self.pnum,
            frag_index: self.frag_index,
            frag_count: self.frag_count,
            payload: &self.payload,
        }
    }
}

/// A request entry that owns its payload.
#[derive(Clone, Debug, PartialEq, Eq)]
struct OwnedReq {
    pnum: u64,
    frag_index: u16,
    frag_count: u16,
    payload: Vec<u8>,
}

impl OwnedReq {
    fn borrow(&self) -> ReqEntry<'_> {
        ReqEntry {
            pnum: self.pnum,
            frag_index: self.frag_index,
            frag_count: self.frag_count,
            payload: &self.payload,
        }
    }
}

/// A valid sequencer packet, as its builder knows it (a test model, built once per case: a
/// NACK's inline ranges make `Control` the largest variant, which costs nothing here).
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
enum Model {
    Ordered {
        header: Header,
        state: SeqState,
        base_seq: u64,
        entries: Vec<OwnedOrdered>,
    },
    Req {
        header: Header,
        expect: u64,
        held_next: u64,
        entries: Vec<OwnedReq>,
    },
    /// Any body without entries; `Body<'static>` holds no borrowed data for these variants.
    Control { header: Header, body: Body<'static> },
}

/// A valid datagram plus where its count and length fields are, for targeted mutation.
#[derive(Clone, Debug)]
struct Built {
    bytes: Vec<u8>,
    count_field: Option<usize>,
    len_fields: Vec<usize>,
}

impl Model {
    fn header(&self) -> &Header {
        match self {
            Model::Ordered { header, .. }
            | Model::Req { header, .. }
            | Model::Control { header, .. } => header,
        }
    }

    /// Encode with the public writers, then splice in authentication if the header asks for it.
    fn build(&self, auth: &Auth) -> Built {
        let mut buf = Vec::new();
        let mut count_field = None;
        let mut len_fields = Vec::new();
        match self {
            Model::Ordered {
                header,
                state,
                base_seq,
                entries,
            } => {
                let mut w = OrderedWriter::new(&mut buf, header, *state, *base_seq);
                count_field = Some(HEADER_LEN + ORDERED_FIXED - 2);
                assert!(w.is_empty());
                for e in entries {
                    // The length field is the last fixed field before the payload.
                    len_fields.push(w.len() + packet::ORDERED_ENTRY_OVERHEAD - 2);
                    let before = w.len();
                    w.push(&e.borrow());
                    let pl = if e.has_payload { e.payload.len() } else { 0 };
                    assert_eq!(w.len() - before, packet::ORDERED_ENTRY_OVERHEAD + pl);
                }
                assert_eq!(w.is_empty(), entries.is_empty());
            }
            Model::Req {
                header,
                expect,
                held_next,
                entries,
            } => {
                let mut w =
                    ReqWriter::new(&mut buf, header, *expect, *held_next, expect ^ held_next);
                count_field = Some(HEADER_LEN + REQ_FIXED - 2);
                for e in entries {
                    len_fields.push(w.len() + packet::REQ_ENTRY_OVERHEAD - 2);
                    let before = w.len();
                    w.push(&e.borrow());
                    assert_eq!(
                        w.len() - before,
                        packet::REQ_ENTRY_OVERHEAD + e.payload.len()
                    );
                }
                assert_eq!(w.is_empty(), entries.is_empty());
            }
            Model::Control { header, body } => encode_control(&mut buf, header, body),
        }
        if self.header().flags & FLAG_AUTH != 0 {
            add_auth(&mut buf, auth);
            count_field = count_field.map(|c| c + AUTH_BLOCK_LEN);
            for l in &mut len_fields {
                *l += AUTH_BLOCK_LEN;
            }
        }
        Built {
            bytes: buf,
            count_field,
            len_fields,
        }
    }

    /// Assert that `datagram` decodes to exactly this model.
    fn check_decodes(&self, datagram: &[u8], auth: &Auth) {
        let (h, body) = packet::decode(datagram).expect("a valid packet must decode");
        assert_eq!(&h, self.header());
        let common = wire::decode(datagram).unwrap();
        if h.flags & FLAG_AUTH != 0 {
            assert_eq!(common.auth.as_ref(), Some(auth));
        } else {
            assert_eq!(common.auth, None);
        }
        match (self, body) {
            (
                Model::Ordered {
                    state,
                    base_seq,
                    entries,
                    ..
                },
                Body::Ordered {
                    state: s,
                    base_seq: b,
                    entries: got,
                },
            ) => {
                assert_eq!(s, *state);
                assert_eq!(b, *base_seq);
                let got: Vec<_> = got.collect();
                assert_eq!(got.len(), entries.len());
                for (g, want) in got.iter().zip(entries) {
                    assert_eq!(g.kind, want.kind);
                    assert_eq!(g.has_payload, want.has_payload);
                    assert_eq!(g.sender, NodeId(want.sender));
                    assert_eq!(g.pnum, want.pnum);
                    assert_eq!(
                        (g.frag_index, g.frag_count),
                        (want.frag_index, want.frag_count)
                    );
                    // Without a payload flag nothing goes on the wire, whatever the slice held.
                    let want_payload: &[u8] = if want.has_payload { &want.payload } else { &[] };
                    assert_eq!(g.payload, want_payload);
                    if let (true, Some((id, seq, members))) = (want.has_payload, &want.view) {
                        let (gid, gseq, gm) = decode_view(g.payload).unwrap();
                        assert_eq!((gid, gseq.0), (*id, *seq));
                        assert_eq!(gm.iter().map(|m| m.0).collect::<Vec<_>>(), *members);
                    }
                }
            }
            (
                Model::Req {
                    header,
                    expect,
                    held_next,
                    entries,
                },
                Body::BcastReq {
                    bb,
                    expect: e,
                    held_next: hn,
                    ordered_through: ot,
                    entries: got,
                },
            ) => {
                assert_eq!(bb, header.ptype == ptype::BCAST_REQ_BB);
                assert_eq!((e, hn, ot), (*expect, *held_next, expect ^ held_next));
                let got: Vec<_> = got.collect();
                let want: Vec<_> = entries.iter().map(OwnedReq::borrow).collect();
                assert_eq!(got, want);
            }
            (Model::Control { body, .. }, got) => assert_eq!(&got, body),
            (m, got) => panic!("decoded {got:?} from {m:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

/// u64 values biased to the edges, where off-by-one and overflow bugs live.
fn edgy_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 0u64..64,
        1 => Just(u64::MAX),
        1 => (u64::MAX - 64)..=u64::MAX,
        3 => any::<u64>(),
    ]
}

fn auth_strategy() -> impl Strategy<Value = Auth> {
    (
        any::<u32>(),
        any::<[u8; 12]>(),
        any::<u64>(),
        any::<[u8; 16]>(),
    )
        .prop_map(|(key_id, session, counter, tag)| Auth {
            key_id,
            session,
            counter,
            tag,
        })
}

fn header_strategy(ptypes: &'static [u8]) -> impl Strategy<Value = Header> {
    (
        prop::sample::select(ptypes),
        prop_oneof![3 => Just(0u8), 1 => Just(FLAG_AUTH)],
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(|(ptype, flags, group, incarnation, sender)| Header {
            engine: EngineKind::Sequencer,
            ptype,
            flags,
            group,
            incarnation,
            sender: NodeId(sender),
        })
}

/// A sequencer state the decoder accepts: stable <= complete_next <= accepted_next <= next_seq.
fn state_strategy() -> impl Strategy<Value = SeqState> {
    (edgy_u64(), edgy_u64(), edgy_u64(), edgy_u64()).prop_map(|(a, b, c, d)| {
        let mut v = [a, b, c, d];
        v.sort_unstable();
        SeqState {
            stable: v[0],
            complete_next: v[1],
            accepted_next: v[2],
            next_seq: v[3],
        }
    })
}

/// (frag_index, frag_count) with 1 <= count and index < count.
fn frag_strategy() -> impl Strategy<Value = (u16, u16)> {
    prop_oneof![
        3 => Just((0u16, 1u16)),
        2 => (1u16..=u16::MAX).prop_flat_map(|c| (0..c, Just(c))),
        1 => Just((u16::MAX - 1, u16::MAX)),
    ]
}

fn payload_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => Just(Vec::new()),
        4 => prop::collection::vec(any::<u8>(), 0..96),
        1 => prop::collection::vec(any::<u8>(), 96..600),
    ]
}

fn view_strategy() -> impl Strategy<Value = (u64, u32, Vec<u32>)> {
    (
        edgy_u64(),
        any::<u32>(),
        prop::collection::vec(any::<u32>(), 0..12),
    )
}

fn ordered_entry_strategy() -> impl Strategy<Value = OwnedOrdered> {
    let data = (
        any::<bool>(),
        any::<u32>(),
        edgy_u64(),
        frag_strategy(),
        payload_strategy(),
    )
        .prop_map(
            |(has_payload, sender, pnum, (frag_index, frag_count), payload)| OwnedOrdered {
                kind: EntryKind::Data,
                has_payload,
                sender,
                // A fragment's number is at least its index: the decoder refuses less.
                pnum: pnum.max(u64::from(frag_index)),
                frag_index,
                frag_count,
                payload,
                view: None,
            },
        );
    let member = (any::<bool>(), any::<u32>(), edgy_u64(), view_strategy()).prop_map(
        |(join, sender, pnum, view)| {
            let mut payload = Vec::new();
            let members: Vec<NodeId> = view.2.iter().map(|&m| NodeId(m)).collect();
            encode_view(&mut payload, view.0, NodeId(view.1), &members);
            OwnedOrdered {
                kind: if join {
                    EntryKind::Join
                } else {
                    EntryKind::Leave
                },
                has_payload: true,
                sender,
                pnum,
                frag_index: 0,
                frag_count: 1,
                payload,
                view: Some(view),
            }
        },
    );
    prop_oneof![4 => data, 1 => member]
}

fn req_entry_strategy() -> impl Strategy<Value = OwnedReq> {
    (edgy_u64(), frag_strategy(), payload_strategy()).prop_map(
        |(pnum, (frag_index, frag_count), payload)| OwnedReq {
            pnum: pnum.max(u64::from(frag_index)),
            frag_index,
            frag_count,
            payload,
        },
    )
}

/// Any valid sequencer packet.
fn model_strategy() -> impl Strategy<Value = Model> {
    let ordered = (
        header_strategy(&[ptype::ORDERED]),
        state_strategy(),
        edgy_u64(),
        prop::collection::vec(ordered_entry_strategy(), 0..20),
    )
        .prop_map(|(header, state, base, entries)| Model::Ordered {
            header,
            state,
            // base_seq + count must not overflow; keep the edge itself reachable.
            base_seq: base.min(u64::MAX - entries.len() as u64),
            entries,
        });
    let req = (
        header_strategy(&[ptype::BCAST_REQ_PB, ptype::BCAST_REQ_BB]),
        edgy_u64(),
        edgy_u64(),
        prop::collection::vec(req_entry_strategy(), 0..20),
    )
        .prop_map(|(header, expect, held_next, entries)| Model::Req {
            header,
            expect,
            held_next,
            entries,
        });
    let control = (
        header_strategy(&[0]),
        0u8..13,
        state_strategy(),
        edgy_u64(),
        edgy_u64(),
        edgy_u64(),
    )
        .prop_map(|(mut header, which, state, a, b, c)| {
            let (t, body) = match which {
                0 => (ptype::ACCEPT, Body::Accept(state)),
                1 => (ptype::SYNC, Body::Sync(state)),
                2 => (
                    ptype::STATUS,
                    Body::Status {
                        expect: a,
                        held_next: b,
                        ask: c % 2 == 0,
                    },
                ),
                3 | 11 => {
                    // A retransmission range (of sequence or of protocol numbers) is never
                    // empty.
                    let (from, to) = match a.cmp(&b) {
                        std::cmp::Ordering::Less => (a, b),
                        std::cmp::Ordering::Greater => (b, a),
                        std::cmp::Ordering::Equal if a == u64::MAX => (a - 1, a),
                        std::cmp::Ordering::Equal => (a, a + 1),
                    };
                    if which == 11 {
                        (ptype::REQ_GAP, Body::ReqGap { from, to })
                    } else {
                        // A NACK's ranges: the first at `from` (at or after what the member
                        // delivered), more after it while they stay within one window.
                        let mut ranges = packet::SeqRanges::single(from, to);
                        let mut at = to;
                        for k in 0..(c % 20) {
                            let (f, t) = (at.saturating_add(1 + k), at.saturating_add(2 + 2 * k));
                            if f >= t || t - from > packet::MAX_NACK_SPAN {
                                break;
                            }
                            ranges.insert(f, t);
                            at = t;
                        }
                        if ranges.span() > packet::MAX_NACK_SPAN {
                            ranges = packet::SeqRanges::single(from, from + 1);
                        }
                        (
                            ptype::RETRANS,
                            Body::Retrans {
                                ranges,
                                expect: c.min(from),
                            },
                        )
                    }
                }
                4 => (
                    ptype::JOIN_REQ,
                    Body::JoinReq {
                        into: (a % 2 == 0).then_some(NodeId(b as u32)),
                    },
                ),
                5 => (ptype::LEAVE_REQ, Body::LeaveReq { expect: a }),
                6 => (ptype::ALIVE_REQ, Body::AliveReq { token: a as u32 }),
                7 => (ptype::ALIVE, Body::Alive { token: b as u32 }),
                8 => (
                    ptype::REFORM_REQ,
                    Body::ReformReq {
                        held_next: a,
                        target: b,
                        suspect: NodeId(c as u32),
                        round: a as u32,
                        interval_ms: b as u32,
                    },
                ),
                9 => (
                    ptype::VOTE,
                    Body::Vote {
                        coordinator: NodeId(a as u32),
                        coordinator_held: a,
                        held_next: b,
                        expect: c,
                        base: a ^ c,
                        round: c as u32,
                        kind: [VoteKind::Vote, VoteKind::Forward, VoteKind::Redirect]
                            [(a % 3) as usize],
                    },
                ),
                10 => (
                    ptype::RESULT_ACK,
                    Body::ResultAck {
                        incarnation: b as u32,
                        last_pnum: a,
                        mid_message: c % 2 == 0,
                    },
                ),
                12 => (ptype::QUEUED, Body::Queued { pnum: a }),
                _ => unreachable!("0..13"),
            };
            header.ptype = t;
            Model::Control { header, body }
        });
    prop_oneof![3 => ordered, 3 => req, 2 => control]
}

/// Byte strings for the totality property: pure noise, and noise behind a plausible header
/// (valid magic and version, any engine, type and flags) so that the body decoders are reached.
fn noise_strategy() -> impl Strategy<Value = Vec<u8>> {
    let pure = prop::collection::vec(any::<u8>(), 0..1600);
    let behind_header = (
        prop_oneof![4 => Just(EngineKind::Sequencer as u8), 1 => any::<u8>()],
        prop_oneof![4 => 0u8..=16, 1 => any::<u8>()],
        prop_oneof![3 => Just(0u8), 2 => Just(FLAG_AUTH), 1 => any::<u8>()],
        prop::collection::vec(any::<u8>(), 0..600),
    )
        .prop_map(|(engine, ptype, flags, rest)| {
            let mut v = Vec::with_capacity(8 + rest.len());
            v.extend_from_slice(&MAGIC.to_be_bytes());
            v.push(VERSION);
            v.push(engine);
            v.push(ptype);
            v.push(flags);
            v.extend_from_slice(&[0, 0]);
            v.extend_from_slice(&rest);
            v
        });
    prop_oneof![1 => pure, 2 => behind_header]
}

/// One change to a valid datagram. Positions are reduced modulo the length when applied.
#[derive(Clone, Debug)]
enum Mutation {
    Flip { at: usize, mask: u8 },
    Set { at: usize, val: u8 },
    Remove { at: usize },
    Insert { at: usize, val: u8 },
    Truncate { by: usize },
    Extend { bytes: Vec<u8> },
    SetU16 { at: usize, val: u16 },
    SetCount { val: u16 },
    SetLen { which: usize, val: u16 },
}

/// u16 values that make length and count fields lie in interesting ways.
fn edgy_u16() -> impl Strategy<Value = u16> {
    prop_oneof![
        2 => 0u16..4,
        1 => (u16::MAX - 3)..=u16::MAX,
        2 => any::<u16>(),
        2 => 4u16..700,
    ]
}

fn mutation_strategy() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), 1u8..=255).prop_map(|(at, mask)| Mutation::Flip { at, mask }),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(at, val)| Mutation::Set { at, val }),
        1 => any::<usize>().prop_map(|at| Mutation::Remove { at }),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(at, val)| Mutation::Insert { at, val }),
        1 => (1usize..64).prop_map(|by| Mutation::Truncate { by }),
        1 => prop::collection::vec(any::<u8>(), 1..64).prop_map(|bytes| Mutation::Extend { bytes }),
        1 => (any::<usize>(), edgy_u16()).prop_map(|(at, val)| Mutation::SetU16 { at, val }),
        2 => edgy_u16().prop_map(|val| Mutation::SetCount { val }),
        2 => (any::<usize>(), edgy_u16()).prop_map(|(which, val)| Mutation::SetLen { which, val }),
    ]
}

fn put_u16(buf: &mut [u8], at: usize, val: u16) {
    if at + 2 <= buf.len() {
        buf[at..at + 2].copy_from_slice(&val.to_be_bytes());
    }
}

/// Apply a mutation. Field offsets are only trusted while the length is unchanged; after a
/// removal or insertion they may point anywhere, which is fine: any byte string must be safe.
fn mutate(b: &mut Built, m: &Mutation) {
    let len = b.bytes.len();
    match m {
        Mutation::Flip { at, mask } if len > 0 => b.bytes[at % len] ^= mask,
        Mutation::Set { at, val } if len > 0 => b.bytes[at % len] = *val,
        Mutation::Remove { at } if len > 0 => {
            b.bytes.remove(at % len);
        }
        Mutation::Insert { at, val } => b.bytes.insert(at % (len + 1), *val),
        Mutation::Truncate { by } => b.bytes.truncate(len.saturating_sub(*by)),
        Mutation::Extend { bytes } => b.bytes.extend_from_slice(bytes),
        Mutation::SetU16 { at, val } if len > 0 => put_u16(&mut b.bytes, at % len, *val),
        Mutation::SetCount { val } => {
            if let Some(at) = b.count_field {
                put_u16(&mut b.bytes, at, *val);
            }
        }
        Mutation::SetLen { which, val } if !b.len_fields.is_empty() => {
            let at = b.len_fields[which % b.len_fields.len()];
            put_u16(&mut b.bytes, at, *val);
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    /// (a) Any byte string: a packet or a typed error, never a panic; what decodes is walked and
    /// re-encodes to the input.
    #[test]
    fn any_bytes_decode_totally(bytes in noise_strategy()) {
        let _ = walk(&bytes);
    }

    /// (a) The body decoder alone, for any packet type and any body.
    #[test]
    fn any_body_decodes_totally(t in any::<u8>(), body in prop::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(b) = packet::decode_body(t, &body) {
            let mut dg = Vec::new();
            Header {
                engine: EngineKind::Sequencer,
                ptype: t,
                flags: 0,
                group: 0,
                incarnation: 0,
                sender: NodeId(0),
            }
            .encode(&mut dg);
            dg.extend_from_slice(&body);
            prop_assert!(walk(&dg).is_ok());
            walk_body(&body, &body, &b);
        }
    }

    /// (a) View payloads come from the wire: decoding any bytes is total, and what decodes is
    /// exactly the encoding of the result.
    #[test]
    fn any_view_decodes_totally(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok((id, seq, members)) = decode_view(&bytes) {
            let mut again = Vec::new();
            encode_view(&mut again, id, seq, &members);
            prop_assert_eq!(again, bytes);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// (b) Packets written by the writers decode to exactly what was written.
    #[test]
    fn valid_packets_roundtrip(model in model_strategy(), auth in auth_strategy()) {
        let built = model.build(&auth);
        model.check_decodes(&built.bytes, &auth);
        prop_assert!(walk(&built.bytes).is_ok());
    }

    /// (b) Views round-trip through `encode_view` / `decode_view`.
    #[test]
    fn views_roundtrip(view in view_strategy()) {
        let members: Vec<NodeId> = view.2.iter().map(|&m| NodeId(m)).collect();
        let mut buf = Vec::new();
        encode_view(&mut buf, view.0, NodeId(view.1), &members);
        prop_assert_eq!(decode_view(&buf), Ok((view.0, NodeId(view.1), members)));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    /// (c) Mutated valid datagrams never panic and either decode (then re-encode to themselves)
    /// or give a typed error.
    #[test]
    fn mutated_packets_never_panic(
        model in model_strategy(),
        auth in auth_strategy(),
        mutations in prop::collection::vec(mutation_strategy(), 1..5),
    ) {
        let mut built = model.build(&auth);
        for m in &mutations {
            mutate(&mut built, m);
        }
        let _ = walk(&built.bytes);
    }

    /// (c) Every strict prefix of a valid datagram is `Truncated`, with or without authentication:
    /// the decoder never mistakes a cut datagram for a shorter valid one.
    #[test]
    fn prefixes_are_truncated(model in model_strategy(), auth in auth_strategy(), cut in 1usize..4096) {
        let built = model.build(&auth);
        let keep = built.bytes.len().saturating_sub(cut);
        prop_assert_eq!(packet::decode(&built.bytes[..keep]).err(), Some(WireError::Truncated));
    }

    /// (c) A valid datagram with bytes appended is `TrailingBytes` (the authentication tag is the
    /// last 16 bytes, so appending moves bytes into the body).
    #[test]
    fn extensions_are_trailing(
        model in model_strategy(),
        auth in auth_strategy(),
        extra in prop::collection::vec(any::<u8>(), 1..64),
    ) {
        let mut built = model.build(&auth);
        built.bytes.extend_from_slice(&extra);
        prop_assert_eq!(packet::decode(&built.bytes).err(), Some(WireError::TrailingBytes));
    }
}

/// The largest payloads the length field can describe round-trip, in both entry types.
#[test]
fn max_length_payloads_roundtrip() {
    let header = Header {
        engine: EngineKind::Sequencer,
        ptype: ptype::ORDERED,
        flags: 0,
        group: 7,
        incarnation: 1,
        sender: NodeId(1),
    };
    let payload = vec![0xa5u8; u16::MAX as usize];
    let model = Model::Ordered {
        header,
        state: SeqState::default(),
        base_seq: u64::MAX - 1,
        entries: vec![OwnedOrdered {
            kind: EntryKind::Data,
            has_payload: true,
            sender: 9,
            pnum: 1,
            frag_index: 0,
            frag_count: 1,
            payload: payload.clone(),
            view: None,
        }],
    };
    let auth = Auth {
        key_id: 0,
        session: [0; 12],
        counter: 0,
        tag: [0; AUTH_TAG_LEN],
    };
    let built = model.build(&auth);
    model.check_decodes(&built.bytes, &auth);
    walk(&built.bytes).unwrap();

    let req = Model::Req {
        header: Header {
            ptype: ptype::BCAST_REQ_PB,
            ..header
        },
        expect: 0,
        held_next: 0,
        entries: vec![OwnedReq {
            pnum: 0,
            frag_index: 0,
            frag_count: 1,
            payload,
        }],
    };
    let built = req.build(&auth);
    req.check_decodes(&built.bytes, &auth);
    walk(&built.bytes).unwrap();
}

/// A count field announcing more entries than the datagram holds is an error, not a short read:
/// the decoder validates every announced entry before handing out the lazy iterator.
#[test]
fn overstated_count_is_rejected() {
    let header = Header {
        engine: EngineKind::Sequencer,
        ptype: ptype::ORDERED,
        flags: 0,
        group: 7,
        incarnation: 1,
        sender: NodeId(1),
    };
    let mut buf = Vec::new();
    let mut w = OrderedWriter::new(&mut buf, &header, SeqState::default(), 0);
    w.push(&OrderedEntry {
        kind: EntryKind::Data,
        has_payload: true,
        sender: NodeId(2),
        pnum: 0,
        frag_index: 0,
        frag_count: 1,
        payload: b"x",
    });
    let at = HEADER_LEN + ORDERED_FIXED - 2;
    for n in [2u16, 100, u16::MAX] {
        let mut b = buf.clone();
        put_u16(&mut b, at, n);
        assert_eq!(packet::decode(&b).err(), Some(WireError::Truncated));
    }
    let mut b = buf.clone();
    put_u16(&mut b, at, 0);
    assert_eq!(packet::decode(&b).err(), Some(WireError::TrailingBytes));
}
