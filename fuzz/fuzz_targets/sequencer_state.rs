//! Fuzz target: a live group of the Amoeba sequencer with resilience 1 (three members: the sequencer and two that joined), created and joined once through an in-memory exchange of
//! datagrams, some messages sent, then driven by the fuzzer (see `common/net.rs`): forged and
//! mutated datagrams with a valid header, clock advances, sends, timeouts. Nothing may panic.

#![no_main]

#[path = "common/net.rs"]
mod net;

use libfuzzer_sys::fuzz_target;
use net::{Input, Net};
use rmcast_proto::registry::Role;
use rmcast_proto::sequencer::Sequencer;
use std::cell::OnceCell;

thread_local! {
    static BASE: OnceCell<Net<Sequencer>> = const { OnceCell::new() };
}

fuzz_target!(|data: &[u8]| {
    // The group is set up once, then cloned for every input.
    let mut net = net::base(
        &BASE,
        net::sequencer,
        &[Role::Create, Role::Join, Role::Join],
        2,
    );
    net.run(&mut Input::new(data));
});
