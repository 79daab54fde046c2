//! The receiver side (Amoeba paper section 5.2; `processrec`, Fig. 18): ordered entries into the
//! history, gap repair, delivery in sequence order, reassembly, and views installed as their
//! membership entries are delivered.

use super::engine::Sequencer;
use super::history::Entry;
use super::packet::{self, EntryKind, OrderedEntry, SeqState};
use super::shared::{Phase, Timer};
use crate::common::{decode_view, Refused};
use crate::engine::{Delivery, Destination, Event, NodeId, Recovery, View};
use bytes::Bytes;

impl Sequencer {
    /// Acceptance and stability piggybacked by the sequencer (BC_ACCEPT, BC_SYNC, ordered data).
    pub(super) fn apply_state(&mut self, from: NodeId, s: SeqState) {
        if self.is_sequencer() {
            return;
        }
        if s.next_seq >= self.hist.seq_next_known {
            // Whoever orders the newest sequence numbers is the sequencer now, even when our
            // view still names its predecessor (we have not delivered the handover yet, and the
            // predecessor may be gone): requests and repairs go there.
            self.sequencer_hint = from;
        }
        self.hist.learn(s);
    }

    /// A run of ordered entries from `from`, the first at `base_seq` (BC_BCAST).
    pub(super) fn on_ordered(
        &mut self,
        from: NodeId,
        state: SeqState,
        base_seq: u64,
        entries: packet::OrderedIter<'_>,
        data: &Bytes,
    ) {
        if self.is_sequencer() {
            // The sequencer holds everything it ordered; a departing one ignores its successor.
            return;
        }
        if self.phase == Phase::Joining
            && (self.renounced == Some(self.incarnation)
                || !self.find_own_join(from, base_seq, entries.clone()))
        {
            return;
        }
        if self.phase != Phase::Member {
            return;
        }
        // Numbers below this were known to be missing before this datagram: any of them it
        // brings answers a NACK (or fills a hole before one was needed).
        let known_before = self.hist.seq_next_known;
        if self.recovering() {
            // Only repairs arrive now, and only stability (a fact of the old order) is taken
            // from them: acceptance stays where the old sequencer left it.
            self.hist.stable = self
                .hist
                .stable
                .max(state.stable.min(self.hist.next_deliver));
        } else {
            self.apply_state(from, state);
        }
        self.hist.purge();
        let held_before = self.hist.held_next;
        let mut filled = false;
        for (i, e) in entries.enumerate() {
            let seq = base_seq + i as u64;
            filled |= self.receive_entry(seq, &e, data) && seq < known_before;
        }
        if filled {
            let now = self.now;
            self.hist.gaps.answered(now);
        }
        self.hist.advance_held();
        if self.hist.held_next > held_before && self.recovering() {
            self.recovery_progress();
        } else if self.hist.held_next > held_before && self.ack_duty() {
            self.hist.need_status = true;
        }
        // Repair is making progress: ask for the next part soon, not a whole RTO later, so that
        // a member far behind catches up at the pace of round trips.
        let grace = self.repair_rto() / 4;
        let (held, known) = (self.hist.held_next, self.hist.seq_next_known);
        self.hist
            .gaps
            .progress(self.now, held_before, held, known, grace);
    }

    /// Whether `entries` hold this member's own join.
    pub(super) fn names_own_join(&self, mut entries: packet::OrderedIter<'_>) -> bool {
        entries.any(|e| e.kind == EntryKind::Join && e.sender == self.me)
    }

    /// A joiner looks for its own join among `entries`: its history starts there.
    fn find_own_join(
        &mut self,
        from: NodeId,
        base_seq: u64,
        entries: packet::OrderedIter<'_>,
    ) -> bool {
        let mine = entries
            .enumerate()
            .find(|(_, e)| e.kind == EntryKind::Join && e.sender == self.me);
        let Some((i, _)) = mine else { return false };
        self.hist.start_at(base_seq + i as u64);
        self.view.coordinator = from;
        self.sequencer_hint = from;
        self.set_phase(Phase::Member);
        self.timers.clear(Timer::Join);
        self.join_into = None;
        true
    }

    /// One ordered entry for `seq`, into the history; whether it was new here.
    fn receive_entry(&mut self, seq: u64, e: &OrderedEntry<'_>, data: &Bytes) -> bool {
        if seq < self.hist.next_deliver {
            self.counters.duplicates += 1;
            return false;
        }
        if e.sender == self.me && e.kind == EntryKind::Data {
            self.sender.on_ordered(e.pnum, self.now);
        }
        // Stashed BB data leaves the stash even when the entry brings its own payload (a
        // retransmission): left there, it would take a place until evicted.
        let stashed = if e.kind == EntryKind::Data && e.sender != self.me {
            self.hist.bb.take(e.sender, e.pnum)
        } else {
            None
        };
        let payload = if e.has_payload {
            Some(data.slice_ref(e.payload))
        } else if e.sender == self.me {
            // Our own BB message: the network does not loop it back to us, we hold it.
            self.sender.own_fragment(e.pnum)
        } else {
            stashed
        };
        let entry = Entry {
            kind: e.kind,
            sender: e.sender,
            pnum: e.pnum,
            frag_index: e.frag_index,
            frag_count: e.frag_count,
            payload,
            bb: !e.has_payload,
        };
        let new = self.hist.store(seq, entry);
        if !new {
            self.counters.duplicates += 1;
        }
        new
    }

    /// BB data multicast by its sender (the accept may come before or after it).
    pub(super) fn on_bb_data(&mut self, from: NodeId, entries: packet::ReqIter<'_>, data: &Bytes) {
        for e in entries {
            self.hist
                .on_bb_data(from, e.pnum, data.slice_ref(e.payload));
        }
        self.hist.advance_held();
    }

    /// Whether this member is one of the r lowest-ranked members other than the sequencer, which
    /// acknowledge every message at once (section 5.1).
    pub(super) fn ack_duty(&self) -> bool {
        // Acceptance needs r holders besides the sequencer, completion possibly more.
        let r = self.cfg.completion_holders(self.view.members.len());
        r > 0
            && self
                .view
                .members
                .iter()
                .filter(|m| **m != self.view.coordinator)
                .take(r)
                .any(|m| *m == self.me)
    }

    /// Where NACKs go and up to where: the sequencer, or during recovery the coordinator (or,
    /// for a coordinator, the best member).
    pub(super) fn repair_target(&self) -> Option<(NodeId, u64)> {
        if self.phase != Phase::Member || self.is_sequencer() {
            return None;
        }
        if self.recovering() {
            return self.recovery_repair();
        }
        Some((self.sequencer_hint, self.hist.seq_next_known))
    }

    /// Start or stop the NACK timer as the gap opened or closed.
    pub(super) fn check_gap(&mut self) {
        let limit = self.repair_target().map(|(_, limit)| limit);
        // A short grace period lets reordered datagrams arrive before a NACK is sent.
        let grace = self.repair_rto() / 4;
        let held = self.hist.held_next;
        self.hist.gaps.watch(self.now, held, limit, grace);
    }

    /// Deliver what is accepted and held, in sequence order (`processrec`, Fig. 18).
    pub(super) fn deliver(&mut self) {
        while self.phase == Phase::Member
            && self.hist.next_deliver < self.hist.accepted_next
            && self.events.room()
        {
            let seq = self.hist.next_deliver;
            let Some(e) = self.hist.buffer.get(seq) else {
                break;
            };
            let Some(payload) = e.payload.clone() else {
                break;
            };
            let e = Entry {
                payload: None,
                ..e.clone()
            };
            self.hist.next_deliver += 1;
            self.hist.delivered_since_report += 1;
            match e.kind {
                EntryKind::Data => self.deliver_data(seq, &e, payload),
                EntryKind::Join | EntryKind::Leave | EntryKind::Reset => {
                    self.install_view(seq, &e, &payload)
                }
            }
        }
        if self.hist.delivered_since_report >= self.cfg.state_interval_msgs && !self.is_sequencer()
        {
            self.hist.need_status = true;
        }
        self.hist.advance_held();
        self.hist.purge();
    }

    /// Deliver one data fragment: reassemble, complete own sends, hand whole messages over.
    fn deliver_data(&mut self, seq: u64, e: &Entry, payload: Bytes) {
        self.succession.delivered(e.sender, e.pnum);
        let last = e.frag_index + 1 == e.frag_count;
        let whole = match self
            .hist
            .reassembly
            .push(e.sender, e.frag_index, e.frag_count, payload)
        {
            Ok(whole) => whole,
            Err(Refused::Orphan) => {
                // Joins are ordered between messages, so a member sees every fragment of what
                // it delivers; a fragment without its beginning is a request no correct member
                // sends (a later fragment alone), ordered all the same: every member drops it
                // alike, so the order stays the same everywhere.
                self.counters.malformed_dropped += 1;
                return;
            }
            Err(Refused::TooLarge) => {
                // Beyond the group's maximum message size: refused, never allocated.
                self.counters.malformed_dropped += 1;
                return;
            }
        };
        let msg = e.pnum - e.frag_index as u64;
        if e.sender == self.me {
            self.sender.on_delivered(e.pnum);
            if last {
                // Complete once enough members hold it (`release_completions`).
                self.sender.awaiting_complete.push_back((seq, msg));
            }
        }
        if let Some(payload) = whole {
            self.counters.delivered += 1;
            self.events.push_back(Event::Deliver(Delivery {
                respond: false,
                seq,
                sender: e.sender,
                msg,
                view: self.view.id,
                payload,
            }));
        }
    }

    /// Own sends whose messages enough members hold complete now, in order.
    pub(super) fn release_completions(&mut self) {
        let mut progress = false;
        while let Some(&(seq, msg)) = self.sender.awaiting_complete.front() {
            if seq >= self.hist.complete_next {
                break;
            }
            self.sender.awaiting_complete.pop_front();
            self.events.push_back(Event::SendComplete { msg });
            progress = true;
        }
        let at = self.now + self.repair_rto();
        if self.sender.awaiting_complete.is_empty() {
            self.timers.clear(Timer::Complete);
        } else if progress || !self.timers.is_armed(Timer::Complete) {
            self.timers.arm(Timer::Complete, at);
        }
        debug_assert!(self.sender.awaiting_complete.len() <= self.hist.buffer.capacity());
    }

    /// Install the view carried by the membership entry `e` delivered at `seq`.
    fn install_view(&mut self, seq: u64, e: &Entry, payload: &[u8]) {
        let Ok((id, coordinator, members)) = decode_view(payload) else {
            // A sequencer writes only views that decode, but entries also come from others:
            // a reset's result carries history, retransmissions carry entries, and either may
            // be forged. Every member holds the same entry at `seq`, so every member skips it
            // alike and the order stays the same everywhere.
            self.counters.malformed_dropped += 1;
            return;
        };
        let old_coordinator = self.view.coordinator;
        // Entries below the newest reset installed here belong to an order that has ended:
        // they change the view, but not who orders.
        let current = self.rec.last_result.as_ref().is_none_or(|r| seq >= r.seq);
        self.note_membership(seq, e, &members);
        self.view = View {
            id,
            seq,
            members,
            coordinator,
            joined: (e.kind == EntryKind::Join).then_some(e.sender),
            left: (e.kind == EntryKind::Leave).then_some(e.sender),
        };
        self.counters.view_changes += 1;
        self.events.push_back(Event::View(self.view.clone()));
        if e.kind == EntryKind::Leave && e.sender == self.me {
            self.own_leave_delivered();
            return;
        }
        if !current || self.recovering() {
            // The reset decides who orders next.
            return;
        }
        self.follow_coordinator(seq, e, old_coordinator, coordinator);
    }

    /// What a join, leave or reset entry changes besides the view.
    fn note_membership(&mut self, seq: u64, e: &Entry, members: &[NodeId]) {
        match e.kind {
            EntryKind::Join => self.succession.joined(e.sender, seq),
            // `self.view` is still the view the leave ends: its coordinator ordered the leave.
            EntryKind::Leave => {
                let ordered_it = e.sender == self.view.coordinator;
                self.succession.left(e.sender, seq, ordered_it)
            }
            EntryKind::Reset => {
                let removed: Vec<NodeId> = self
                    .view
                    .members
                    .iter()
                    .copied()
                    .filter(|m| !members.contains(m))
                    .collect();
                for &m in &removed {
                    // A removed member's half-delivered message never completes.
                    self.hist.reassembly.forget(m);
                    self.succession.removed(m);
                }
                self.events.push_back(Event::Recovery(Recovery::Reset {
                    incarnation: e.pnum as u32,
                    removed,
                }));
            }
            EntryKind::Data => unreachable!("views come from membership entries"),
        }
    }

    /// Our own leave was delivered: we are out (a sequencer keeps serving retransmissions
    /// until the others have the leave, see `Ordering::handed_over`).
    fn own_leave_delivered(&mut self) {
        self.timers.clear(Timer::Leave);
        if self.is_sequencer() {
            return;
        }
        self.set_phase(Phase::Left);
        self.hist.need_status = false;
        // To the group: a member that takes over from the sequencer before it hears from us
        // would otherwise wait for us to have our leave until the linger bound.
        self.farewell = Some(Destination::Group);
        self.events.push_back(Event::Left);
    }

    /// The view delivered at `seq` by entry `e` names `coordinator` as sequencer.
    fn follow_coordinator(
        &mut self,
        seq: u64,
        e: &Entry,
        old_coordinator: NodeId,
        coordinator: NodeId,
    ) {
        if e.kind == EntryKind::Leave
            && e.sender == old_coordinator
            && coordinator != old_coordinator
        {
            // The departing sequencer lingers until it knows we have its leave.
            self.farewell = Some(Destination::Peer(old_coordinator));
        }
        if coordinator != old_coordinator {
            self.sequencer_hint = coordinator;
        }
        if coordinator == self.me && !self.is_sequencer() && self.rec.awaiting.is_none() {
            self.become_sequencer(seq + 1);
        }
        if coordinator != old_coordinator && self.sender.unsent > 0 {
            // The new sequencer has not seen our unordered requests: resend them at once.
            self.sender.resend_unordered();
        }
    }
}
