//! The Amoeba sequencer engine on the real runtime: three nodes in one process over loopback
//! multicast and over unicast only.

mod common;

use common::*;
use rmcast::{EngineChoice, GroupAddr};

#[test]
fn sequencer_same_order_over_multicast() {
    let r = three_members_same_order(EngineChoice::sequencer(0), |_| GroupAddr::FromName, 300);
    assert_eq!(r.messages, 900);
}

#[test]
fn sequencer_resilient_same_order_over_multicast() {
    let r = three_members_same_order(EngineChoice::sequencer(1), |_| GroupAddr::FromName, 100);
    assert_eq!(r.messages, 300);
}

#[test]
fn sequencer_same_order_over_unicast() {
    let r = three_members_same_order(
        EngineChoice::sequencer(0),
        |addrs| GroupAddr::Unicast(addrs.to_vec()),
        300,
    );
    assert_eq!(r.messages, 900);
}
