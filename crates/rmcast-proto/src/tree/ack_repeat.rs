//! Regression: a lost ACK of the last packet sent. RMTP's ACKs are periodic (section III-B4 of
//! "Reliable Multicast Transport Protocol (RMTP)" by Paul, Sabnani, Lin and Bhattacharyya), so
//! the next one makes good a lost one; a receiver that fell silent once it held everything it
//! knew of left the sender's window waiting `child_silence_ms` for it, one lost ACK at a time
//! (a closed-loop sender, one message in flight, took minutes over a lossy network).

use super::pair::Pair;
use super::*;
use crate::engine::Time;
use crate::tree::packet::Packet;
use crate::wire;

const MS: u64 = 1_000_000;
/// The sender forgets a silent child after this long: the repair must come well before.
const SILENCE_MS: u64 = 5_000;

fn cfg() -> TreeConfig {
    TreeConfig {
        t_send_ms: 10,
        t_retx_ms: 5,
        t_rtt_ms: 50,
        t_sap_ms: 1_000,
        t_dally_ms: 60_000,
        cong_thresh: None,
        child_silence_ms: SILENCE_MS,
        child_stall_ms: 0,
        ..TreeConfig::default()
    }
}

/// The receiver's ACKs as they leave it: the L of each, and one to lose.
#[derive(Default)]
struct Acks {
    /// Lose the receiver's next ACK reporting this L.
    drop: Option<u64>,
    /// The L of every ACK the receiver sent, in order.
    sent: Vec<u64>,
}

fn lose_ack(acks: &mut Acks, _from: usize, buf: &[u8]) -> bool {
    let p = wire::decode(buf).expect("own datagram decodes");
    if p.header.ptype != packet::ACK {
        return false;
    }
    let Ok(Packet::Ack { l, .. }) = Packet::decode(packet::ACK, p.body) else {
        return false;
    };
    acks.sent.push(l);
    let lost = acks.drop == Some(l);
    if lost {
        acks.drop = None;
    }
    lost
}

#[test]
fn a_lost_ack_of_the_last_packet_is_repeated_and_the_repeats_stop() {
    let mut p = Pair::new(cfg(), Acks::default(), lose_ack);
    // The receiver becomes a child of the sender with packet 0.
    p.submit(0);
    p.run_until(Time(500 * MS));
    assert_eq!(p.completed, [0]);
    // Packet 1 is the last for now, and the ACK that reports it is lost.
    p.wire.drop = Some(2);
    p.submit(1);
    p.run_until(Time(1_500 * MS));
    assert_eq!(
        p.wire.drop, None,
        "the ACK of packet 1 was sent and dropped"
    );
    assert_eq!(
        p.completed,
        [0, 1],
        "a repeated ACK completed packet 1 long before the sender would give up on a silent child"
    );
    // The repeats thin out and stop once the sender would no longer wait anyway: the idle
    // receiver falls silent.
    p.run_until(Time((1_000 + 2 * SILENCE_MS) * MS));
    assert_eq!(p.e[1].poll_timeout(), None, "the idle receiver is quiet");
    let repeats = p.wire.sent.iter().filter(|&&l| l == 2).count();
    assert!(
        (2..=16).contains(&repeats),
        "the ACK of packet 1 was sent {repeats} times"
    );
}
