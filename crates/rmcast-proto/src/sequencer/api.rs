//! The [`Engine`] contract of the sequencer: every method delegates to an inherent method, so
//! that the trait's shape can change without touching the protocol.

use super::packet::ptype;
use super::shared::Phase;
use super::Sequencer;
use crate::common::shell::{self, Gate, Shelled};
use crate::common::PartsIn;
use crate::engine::{
    Counters, Engine, Event, GroupInfo, NodeId, Qos, Recovery, SendError, Time, Transmit,
};
use crate::guarantees::Guarantees;
use crate::wire::{EngineKind, Header, Packet};
use bytes::Bytes;

impl Shelled for Sequencer {
    const KIND: EngineKind = EngineKind::Sequencer;
    fn gate(&mut self) -> Gate<'_> {
        Gate::new(
            self.cfg.group,
            self.me,
            self.phase == Phase::Left,
            Some(self.incarnation),
            &mut self.counters,
        )
    }
    fn clock(&mut self, now: Time) {
        self.run(now);
    }
    /// BC_RESULT names the incarnation it founds in its body: it reaches members of older
    /// ones (how a member left behind learns of the new group).
    fn across_incarnations(&self, ptype: u8) -> bool {
        ptype == ptype::RESULT
    }
    fn other_incarnation(&mut self, header: &Header) -> bool {
        self.accept_incarnation(header)
    }
    fn parts_in(&mut self) -> Option<&mut PartsIn> {
        Some(&mut self.parts_in)
    }
    fn on_packet(&mut self, now: Time, _: NodeId, pkt: Packet<'_>, datagram: &[u8], _: Option<u8>) {
        self.on_packet(now, pkt, datagram)
    }
}

impl Engine for Sequencer {
    fn handle_datagram(&mut self, now: Time, from: NodeId, datagram: &[u8]) {
        shell::receive(self, now, from, datagram, None)
    }

    fn handle_timeout(&mut self, now: Time) {
        self.on_timeout(now)
    }

    fn submit(&mut self, now: Time, payload: Bytes, qos: Qos) -> Result<u64, SendError> {
        if !self.guarantees().qos.contains(qos) {
            return Err(SendError::Unsupported);
        }
        self.submit_message(now, payload, qos)
    }

    fn leave(&mut self, now: Time) {
        self.request_leave(now)
    }

    fn poll_transmit(&mut self, now: Time, buf: &mut Vec<u8>) -> Option<Transmit> {
        if let Some(to) = self.parts_out.next(buf) {
            shell::count_sent(&mut self.counters, buf.len());
            return Some(Transmit::single(to));
        }
        let to = self.transmit(now, buf)?;
        let whole = buf.len();
        // A view entry or a result of many members outgrows one datagram: it goes in parts
        // (`max_members_effective` keeps it within what parts can carry).
        let cut = self.parts_out.cut(buf, to, self.cfg.max_datagram_bytes);
        debug_assert!(cut.is_ok(), "a {whole}-byte datagram cannot be cut");
        // `transmit` counted the whole; the parts after the first are counted as they go.
        self.counters.bytes_sent -= (whole - buf.len()) as u64;
        Some(Transmit::single(to))
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.next_event()
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.next_timeout()
    }

    fn node_id(&self) -> NodeId {
        self.me
    }

    fn info(&self) -> GroupInfo {
        self.group_info()
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn engine_counters(&self) -> Vec<(&'static str, u64)> {
        self.stats.named()
    }

    fn guarantees(&self) -> Guarantees {
        super::guarantees(self.cfg.resilience, self.cfg.majority_policy())
    }

    fn describe(&self) -> String {
        self.describe_state()
    }

    fn reset(&mut self, now: Time, min_members: usize) -> Result<(), SendError> {
        self.request_reset(now, min_members)
    }

    fn rejoin(&mut self, now: Time, merging_into: Option<NodeId>) -> Result<(), SendError> {
        self.start_over(now, false);
        self.join_into = merging_into;
        if let Some(into) = merging_into {
            self.events
                .push_back(Event::Recovery(Recovery::Merging { into }));
        }
        Ok(())
    }

    fn limit_datagram_bytes(&mut self, max: usize) -> bool {
        self.limit_datagram_bytes(max)
    }

    fn start_alone(&mut self, now: Time) -> Result<(), SendError> {
        self.start_over(now, true);
        Ok(())
    }

    fn can_submit(&self) -> bool {
        self.may_submit()
    }
}
