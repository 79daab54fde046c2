//! Fuzz target: a live group of the Amoeba sequencer with resilience 1 (three members: the sequencer and two that joined), created and joined through an in-memory exchange of
//! datagrams, some messages sent, then driven by the fuzzer (see `common/net.rs`): forged and
//! mutated datagrams with a valid header, clock advances, sends, timeouts. Nothing may panic.

#![no_main]

#[path = "common/net.rs"]
mod net;

use libfuzzer_sys::fuzz_target;
use net::{Input, Net};
use rmcast_proto::registry::Role;

fuzz_target!(|data: &[u8]| {
    let mut net = Net::new(
        &net::choice("sequencer"),
        &[Role::Create, Role::Join, Role::Join],
        2,
    );
    net.run(&mut Input::new(data));
});
