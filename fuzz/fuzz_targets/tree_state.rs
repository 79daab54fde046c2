//! Fuzz target: a live Tree (RMTP) session of a sender, a designated receiver and a receiver in
//! its region, the receivers joined through an in-memory exchange of datagrams and some packets
//! sent, then driven by the fuzzer (see `common/net.rs`): forged and mutated datagrams with a
//! valid header, clock advances, sends, timeouts. Nothing may panic.

#![no_main]

#[path = "common/net.rs"]
mod net;

use libfuzzer_sys::fuzz_target;
use net::{Input, Net};
use rmcast_proto::registry::Role;
use rmcast_proto::tree::Tree;
use std::cell::OnceCell;

thread_local! {
    static BASE: OnceCell<Net<Tree>> = const { OnceCell::new() };
}

fuzz_target!(|data: &[u8]| {
    // The group is set up once, then cloned for every input.
    let mut net = net::base(&BASE, net::tree, &[Role::Create, Role::Join, Role::Join], 2);
    net.run(&mut Input::new(data));
});
