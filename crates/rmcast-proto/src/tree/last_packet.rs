//! Regression: the last packet of a burst lost after an idle gap (every-engine sweep, tree seed
//! 4194). An idle receiver falls silent once its ACK repeats end, and the sender forgets a
//! child silent for `child_silence_ms`; the next packet then completes with the ACKs of the
//! receivers that got it, and one that lost it cannot know of it (no later packet shows it the
//! gap). In "Reliable Multicast Transport Protocol (RMTP)" by Paul, Sabnani, Lin and
//! Bhattacharyya such a receiver learns the highest sequence number from the sender's
//! SND_ACK_TOME; sent only every T_sap, that left the receiver without the packet for T_sap or
//! longer (in the sweep, past the end of the run: data and three advertisements lost at 25%).
//! The sender now announces its high at each of the first T_send ticks without new data.

use super::engine::STATUS_REPEATS;
use super::pair::Pair;
use super::*;
use crate::engine::Time;
use crate::tree::packet::Packet;
use crate::wire;
use std::time::Duration;

const MS: u64 = 1_000_000;
/// The sender forgets a silent child after this long.
const SILENCE_MS: u64 = 1_000;
/// The periodic advertisement comes far later than anything the test waits for.
const SAP_MS: u64 = 600_000;

fn cfg() -> TreeConfig {
    TreeConfig {
        t_send_ms: 10,
        t_retx_ms: 5,
        t_rtt_ms: 50,
        t_sap_ms: SAP_MS,
        t_dally_ms: 3_600_000,
        cong_thresh: None,
        child_silence_ms: SILENCE_MS,
        child_stall_ms: 0,
        ..TreeConfig::default()
    }
}

/// What the sender's datagrams lose on their way to the receiver.
#[derive(Default)]
struct Losses {
    /// DATA of these sequence numbers to the receiver is lost, once each.
    data: Vec<u64>,
    /// This many of the sender's next advertisements are lost.
    adverts: usize,
}

fn lose_sent(l: &mut Losses, from: usize, buf: &[u8]) -> bool {
    if from != 0 {
        return false;
    }
    let p = wire::decode(buf).expect("own datagram decodes");
    match p.header.ptype {
        packet::DATA => {
            // DATA carries the origin before the common body.
            let body = p.body.get(4..).unwrap_or_default();
            let Ok(Packet::Data { seq, .. }) = Packet::decode(packet::DATA, body) else {
                return false;
            };
            let Some(i) = l.data.iter().position(|&s| s == seq) else {
                return false;
            };
            l.data.remove(i);
            true
        }
        packet::SND_ACK_TOME if l.adverts > 0 => {
            l.adverts -= 1;
            true
        }
        _ => false,
    }
}

#[test]
fn a_last_packet_lost_after_an_idle_gap_is_announced_and_repaired() {
    let mut p = Pair::new(cfg(), Losses::default(), lose_sent);
    p.submit(0);
    p.run_until(Time(500 * MS));
    assert_eq!(
        (p.delivered.as_slice(), p.completed.as_slice()),
        (&[0][..], &[0][..])
    );
    // Idle long enough for the receiver to fall silent and the sender to forget it.
    p.run_until(Time((500 + 3 * SILENCE_MS) * MS));
    assert_eq!(p.e[1].poll_timeout(), None, "the idle receiver is silent");
    // Packet 1 is lost on its way to the receiver, and so are the first two announcements
    // of it: the sender completes it at once (it knows no receiver any more).
    p.wire.data = vec![1];
    p.wire.adverts = 2;
    let announced = p.counter(0, "status_sent");
    let sent = p.now;
    p.submit(1);
    p.run_until(sent + Duration::from_millis(20 * cfg().t_send_ms));
    assert_eq!(p.completed, [0, 1]);
    assert_eq!(
        p.delivered,
        [0, 1],
        "the receiver learnt of packet 1 from a repeated announcement and had it repaired, \
         long before the periodic advertisement (T_sap)"
    );
    assert!(p.wire.data.is_empty() && p.wire.adverts == 0, "all lost");
    // The announcements stop after STATUS_REPEATS ticks: the session goes quiet again.
    p.run_until(sent + Duration::from_millis(3 * SILENCE_MS));
    assert_eq!(announced, u64::from(STATUS_REPEATS), "after packet 0");
    assert_eq!(
        p.counter(0, "status_sent") - announced,
        u64::from(STATUS_REPEATS),
        "after packet 1"
    );
    let next = p.e[0].poll_timeout().expect("the periodic advertisement");
    assert!(
        next >= sent + Duration::from_millis(SAP_MS / 2),
        "only T_sap is left: {next:?}"
    );
}

#[test]
fn a_stream_without_pauses_sends_no_announcements() {
    let mut p = Pair::new(cfg(), Losses::default(), lose_sent);
    // One packet every 4 ms: a new one in every T_send (10 ms).
    for n in 0..50u8 {
        p.submit(n);
        let t = p.now + Duration::from_millis(4);
        p.run_until(t);
    }
    assert_eq!(p.counter(0, "status_sent"), 0, "no pause, no announcement");
    p.run_until(p.now + Duration::from_millis(SILENCE_MS));
    assert_eq!(p.delivered.len(), 50);
    assert_eq!(
        p.counter(0, "status_sent"),
        u64::from(STATUS_REPEATS),
        "once the stream paused"
    );
}
