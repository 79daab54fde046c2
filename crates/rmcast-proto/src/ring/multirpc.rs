//! Locks and multi-RPC (RMP sections 3.3, 4.3 and 4.5).
//!
//! **Locks.** A member asks for a lock or releases it with a List Change Request; the token
//! site orders the change as a New List that leaves the ring as it is and carries the lock
//! table after it. A lock is granted only if it is free (a refused request still gets its New
//! List, with the table unchanged), and a lock held by a member that leaves or is removed by a
//! reformation is freed with the New List that removes it. The table changes when the ACK is
//! applied, so that the token site and every New List agree on it; the application hears of
//! each change at its place in the total order ([`crate::Event::Lock`]).
//!
//! **Multi-RPC.** A process outside the ring sends Non Member Data to the group address; its
//! packets are ordered like a member's, under its own id, by the token site that holds them
//! (section 4.5). The ring keeps the next sequence number of each non-member (at most
//! [`packet::MAX_CLIENTS`], the least recently ordered flushed first) in every New List, so
//! that a joiner filters duplicates as the others do; a non-member's first packet (or its first
//! after a flush) carries the first-packet flag. The token site that ordered a packet
//! acknowledges it to the sender once it delivered it, at the level asked for; whichever member
//! is token site acknowledges a duplicate of a delivered packet again. A packet naming handler
//! `h` is answered by the member that holds handler lock `h` when it is delivered
//! ([`crate::Delivery::respond`]); the reply is unicast to the sender and kept, and sent again
//! for every duplicate with the repeat-reply flag. The sender retransmits until it has both.
//! Non-member packets below total order are delivered in total order (the duplicate filter
//! needs one order at every member).

use super::engine::{Ring, RingTimer};
use super::packet::{
    self, LockOp, HANDLER_LOCKS, MAX_CLIENTS, MAX_LOCKS, NM_FIRST, NM_PREFIX, NM_REPEAT_REPLY,
    NM_WANT_ACK, NO_HANDLER,
};
use super::rpc::{ClientSeen, Pending};
use crate::engine::{
    Delivery, Destination, Event, LockChange, Loss, NodeId, Qos, Reply, SendError, Time,
};
use crate::wire::{self, Reader, WriteExt};
use bytes::Bytes;

impl Ring {
    // ---- locks ------------------------------------------------------------------------------

    /// A New List was applied: its lock table and non-members are the ring's from here on
    /// (the unordered packets of non-members it no longer names are dropped).
    pub(super) fn apply_group_state(&mut self, locks: &[(u16, NodeId)], clients: &[(NodeId, u64)]) {
        for c in self.rpc.gs.apply(locks, clients) {
            self.order.data.drop_below(c, u64::MAX);
        }
    }

    /// The New List ordering member `by`'s request for lock `lock` (or its release).
    pub(super) fn lock_change(&self, by: NodeId, lock: u16, acquire: bool) -> packet::NewList {
        let mut locks = self.rpc.gs.locks.clone();
        if acquire {
            locks.entry(lock).or_insert(by);
        } else if locks.get(&lock) == Some(&by) {
            locks.remove(&lock);
        }
        let (locks, clients) = self.rpc.gs.state_for(&self.membership.ring, &locks);
        packet::NewList {
            view_id: self.membership.view_id,
            members: self.membership.ring.clone(),
            joined: vec![],
            left: None,
            next_sseq: self
                .membership
                .ring
                .iter()
                .map(|m| self.order.ordered_next.get(m).copied().unwrap_or(0))
                .collect(),
            lock_op: Some(LockOp { by, lock, acquire }),
            locks,
            clients,
            unicast_only: self.membership.unicast_only_of(&self.membership.ring),
        }
    }

    /// A lock change was applied (ordered): the table changes now, the application hears of
    /// it in its slot.
    pub(super) fn apply_lock_op(&mut self, op: LockOp, locks: &[(u16, NodeId)]) {
        self.rpc.gs.locks = locks.iter().copied().collect();
        if op.by == self.me && self.rpc.gs.lock_pending == Some((op.lock, op.acquire)) {
            self.rpc.gs.lock_pending = None;
            self.timers.clear(RingTimer::Lock);
        }
        if self
            .membership
            .lcrs
            .get(&op.by)
            .is_some_and(|&(k, l)| lock_kind(op.acquire) == k && l == u64::from(op.lock))
        {
            self.membership.lcrs.remove(&op.by);
        }
    }

    /// A lock change is delivered: the table the handlers follow changes, and the application
    /// is told.
    pub(super) fn deliver_lock_op(&mut self, op: LockOp) {
        let t = &mut self.rpc.gs.delivered_locks;
        if op.acquire {
            t.entry(op.lock).or_insert(op.by);
        } else if t.get(&op.lock) == Some(&op.by) {
            t.remove(&op.lock);
        }
        let holder = t.get(&op.lock).copied();
        self.events.push_back(Event::Lock(LockChange {
            lock: op.lock,
            holder,
            asked_by: Some(op.by),
        }));
    }

    /// A view is delivered: locks of members it leaves out are free; a joiner hears which
    /// locks are held.
    pub(super) fn deliver_view_locks(&mut self, members: &[NodeId], joined_me: bool) {
        let freed: Vec<u16> = self
            .rpc
            .gs
            .delivered_locks
            .iter()
            .filter(|(_, h)| !members.contains(h))
            .map(|(&k, _)| k)
            .collect();
        for lock in freed {
            self.rpc.gs.delivered_locks.remove(&lock);
            self.events.push_back(Event::Lock(LockChange {
                lock,
                holder: None,
                asked_by: None,
            }));
        }
        if joined_me {
            let held: Vec<(u16, NodeId)> = self
                .rpc
                .gs
                .delivered_locks
                .iter()
                .map(|(&k, &h)| (k, h))
                .collect();
            for (lock, h) in held {
                self.events.push_back(Event::Lock(LockChange {
                    lock,
                    holder: Some(h),
                    asked_by: None,
                }));
            }
        }
    }

    /// `Engine::lock`.
    pub(super) fn request_lock(
        &mut self,
        now: Time,
        lock: u16,
        acquire: bool,
    ) -> Result<(), SendError> {
        if !self.in_ring() || self.leaving() {
            return Err(SendError::NotMember);
        }
        if lock >= MAX_LOCKS {
            return Err(SendError::Unsupported);
        }
        if self.recovering() {
            return Err(SendError::GroupFailed);
        }
        if self.rpc.gs.lock_pending.is_some() {
            return Err(SendError::WouldBlock);
        }
        self.rpc.gs.lock_pending = Some((lock, acquire));
        self.timers.arm(RingTimer::Lock, now);
        self.lock_timeout(now);
        Ok(())
    }

    /// Sends this member's lock request (again), as a List Change Request.
    pub(super) fn lock_timeout(&mut self, now: Time) {
        let Some((lock, acquire)) = self.rpc.gs.lock_pending else {
            self.timers.clear(RingTimer::Lock);
            return;
        };
        if !self.timers.due(RingTimer::Lock, now) {
            return;
        }
        self.timers.arm(RingTimer::Lock, now + self.cfg.lock_retry);
        if !self.in_ring() {
            return;
        }
        let me = self.me;
        self.send(Destination::Group, packet::LCR, |b| {
            b.push(lock_kind(acquire));
            b.put_u16(lock);
        });
        // The token site hears its own request here.
        if self.membership.lcrs.len() < self.cfg.max_lcrs || self.membership.lcrs.contains_key(&me)
        {
            self.membership
                .lcrs
                .insert(me, (lock_kind(acquire), u64::from(lock)));
        }
        if self.token.holding {
            self.token.idle = 0;
            self.timers.clear(RingTimer::Null);
            self.token_work(now);
        }
    }

    // ---- multi-RPC: the members' side ---------------------------------------------------------

    /// Non Member Data from `from`.
    pub(super) fn on_nm_data(&mut self, now: Time, from: NodeId, body: &[u8]) {
        let Ok(run) = packet::decode_data(body) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        if run.origin != from || run.msgs.iter().any(|(_, p)| p.len() < NM_PREFIX) {
            self.counters.malformed_dropped += 1;
            return;
        }
        if !self.in_ring()
            || self.membership.ring.contains(&from)
            || self.membership.admission.is_some()
        {
            self.counters.foreign_dropped += 1;
            return;
        }
        let (mut filled, mut fresh) = (false, false);
        for (sseq, (qos, payload)) in (run.first..).zip(run.msgs) {
            let (flags, handler) = (payload[0], payload[1]);
            // Below total order a non-member's packet is ordered all the same.
            let qos = if qos.is_total() {
                qos
            } else {
                Qos::TotallyOrdered
            };
            let next = match self.rpc.gs.clients.get(&from) {
                Some(c) => Some(c.next),
                None => self.rpc.gs.first_seen.get(&from).copied(),
            };
            if next.is_some_and(|n| sseq < n) && self.rpc.gs.clients.contains_key(&from) {
                self.nm_duplicate(from, sseq, flags, handler);
                continue;
            }
            let p = Bytes::copy_from_slice(payload);
            if self
                .order
                .q
                .fill(from, sseq, (p.clone(), qos, None))
                .is_some()
            {
                filled = true;
                continue;
            }
            let first = flags & NM_FIRST != 0;
            let start = match next {
                Some(n) if !first || self.rpc.gs.clients.contains_key(&from) => n,
                Some(n) => n.min(sseq),
                None if first && self.rpc.gs.first_seen.len() < MAX_CLIENTS => sseq,
                None => {
                    // Its numbering is not known here: it sets the first-packet flag again.
                    self.counters.foreign_dropped += 1;
                    continue;
                }
            };
            if !self.rpc.gs.clients.contains_key(&from) {
                self.rpc.gs.first_seen.insert(from, start);
            }
            if sseq < start || sseq >= start + self.cfg.client_window as u64 {
                self.counters.duplicates += 1;
                continue;
            }
            if self.order.data.insert(from, sseq, (p, qos, None)) {
                fresh = true;
            } else {
                self.counters.duplicates += 1;
            }
        }
        if filled {
            self.after_progress(now);
        } else if fresh {
            self.token_work(now);
        }
    }

    /// A non-member's packet this ring ordered already came again: acknowledge it again (the
    /// token site) and answer it again (the handler that answered it).
    fn nm_duplicate(&mut self, from: NodeId, sseq: u64, flags: u8, handler: u8) {
        self.counters.duplicates += 1;
        let delivered = self.rpc.gs.delivered.get(&from).is_some_and(|&n| sseq < n);
        if !delivered {
            return;
        }
        if flags & NM_WANT_ACK != 0 && (self.token.holding || self.order.last_site == self.me) {
            self.nm_ack(from, sseq);
        }
        if flags & NM_REPEAT_REPLY != 0 && handler != NO_HANDLER {
            if let Some((_, r)) = self.rpc.gs.replies.iter().find(|(k, _)| *k == (from, sseq)) {
                let r = r.clone();
                self.counters.retransmissions += 1;
                self.send_nm_reply(from, sseq, &r);
            } else if let Some((_, to, p)) = self
                .rpc
                .gs
                .forwarded
                .iter()
                .find(|(k, ..)| *k == (from, sseq))
            {
                // Handed on and not answered yet (or the answer was lost): hand it on again.
                let (to, p) = (*to, p.clone());
                self.counters.retransmissions += 1;
                self.send_forward(to, from, sseq, &p);
            }
        }
    }

    fn nm_ack(&mut self, to: NodeId, sseq: u64) {
        let view = self.membership.view_id;
        self.send(Destination::Peer(to), packet::NM_ACK, |b| {
            b.put_u64(sseq);
            b.put_u64(view);
        });
    }

    fn send_nm_reply(&mut self, to: NodeId, request: u64, reply: &[u8]) {
        self.send(Destination::Peer(to), packet::NM_REPLY, |b| {
            b.put_u32(to.0);
            b.put_u64(request);
            b.extend_from_slice(reply);
        });
    }

    /// The non-members' packets the token site can order: each one's in sequence, from its
    /// next number (or from its first packet).
    pub(super) fn orderable_clients(&self, out: &mut Vec<(NodeId, u64)>, max: usize) {
        let known = self.rpc.gs.clients.iter().map(|(&c, s)| (c, s.next));
        let first = self
            .rpc
            .gs
            .first_seen
            .iter()
            .filter(|(c, _)| !self.rpc.gs.clients.contains_key(c))
            .map(|(&c, &s)| (c, s));
        for (c, mut s) in known.chain(first) {
            while out.len() < max && self.order.data.has(c, s) {
                out.push((c, s));
                s += 1;
            }
        }
    }

    /// A non-member's packet was ordered (an ACK applied): its numbering goes on from it.
    pub(super) fn client_ordered(&mut self, c: NodeId, sseq: u64) {
        self.rpc.gs.client_clock += 1;
        let clock = self.rpc.gs.client_clock;
        self.rpc.gs.first_seen.remove(&c);
        if let Some(e) = self.rpc.gs.clients.get_mut(&c) {
            e.next = e.next.max(sseq + 1);
            e.last = clock;
            return;
        }
        if self.rpc.gs.clients.len() >= MAX_CLIENTS {
            // Flush the least recently ordered: it sets the first-packet flag again.
            if let Some((&old, _)) = self
                .rpc
                .gs
                .clients
                .iter()
                .min_by_key(|(c, s)| (s.last, **c))
            {
                self.rpc.gs.clients.remove(&old);
                self.order.data.drop_below(old, u64::MAX);
            }
        }
        self.rpc.gs.clients.insert(
            c,
            ClientSeen {
                next: sseq + 1,
                last: clock,
            },
        );
        debug_assert!(self.rpc.gs.clients.len() <= MAX_CLIENTS);
    }

    /// A non-member's packet is delivered in slot `ts`: to the application (the handler's
    /// holder answers it), and acknowledged by the site that ordered it.
    pub(super) fn deliver_client(&mut self, ts: u64, origin: NodeId, sseq: u64, payload: Bytes) {
        // Non Member Data is checked on receipt, but a slot may be filled by any member's
        // retransmission: one too short to hold the prefix (forged) gives no ack, no handler.
        let (flags, handler, app) = match payload.get(..NM_PREFIX) {
            Some(&[flags, handler]) => (flags, handler, payload.slice(NM_PREFIX..)),
            _ => {
                self.counters.malformed_dropped += 1;
                (0, NO_HANDLER, Bytes::new())
            }
        };
        let respond = handler < HANDLER_LOCKS
            && self.rpc.gs.delivered_locks.get(&u16::from(handler)) == Some(&self.me);
        self.counters.delivered += 1;
        self.events.push_back(Event::Deliver(Delivery {
            seq: ts,
            sender: origin,
            msg: sseq,
            view: self.membership.delivered_view.id,
            payload: app,
            respond,
        }));
        if self.rpc.gs.delivered.len() >= 2 * MAX_CLIENTS
            && !self.rpc.gs.delivered.contains_key(&origin)
        {
            let gone = self
                .rpc
                .gs
                .delivered
                .keys()
                .find(|c| !self.rpc.gs.clients.contains_key(c))
                .copied();
            if let Some(g) = gone.or_else(|| self.rpc.gs.delivered.keys().next().copied()) {
                self.rpc.gs.delivered.remove(&g);
            }
        }
        let d = self.rpc.gs.delivered.entry(origin).or_insert(0);
        *d = (*d).max(sseq + 1);
        let orderer = self.order.orderer_of(ts);
        if flags & NM_WANT_ACK != 0 && orderer == Some(self.me) {
            self.nm_ack(origin, sseq);
        }
    }

    fn send_forward(&mut self, to: NodeId, origin: NodeId, request: u64, payload: &[u8]) {
        self.send(Destination::Peer(to), packet::FORWARD, |b| {
            b.put_u32(origin.0);
            b.put_u64(request);
            b.extend_from_slice(payload);
        });
    }

    /// `Engine::forward`: ForwardRequest.
    pub(super) fn forward_request(
        &mut self,
        to: NodeId,
        origin: NodeId,
        request: u64,
        payload: Bytes,
    ) -> Result<(), SendError> {
        if !self.in_ring() {
            return Err(SendError::NotMember);
        }
        if !self.membership.ring.contains(&to) {
            return Err(SendError::NotMember);
        }
        if payload.len() + wire::HEADER_LEN + 12
            > self.max_datagram_bytes.min(wire::MAX_DATAGRAM_LEN)
        {
            return Err(SendError::TooLarge);
        }
        self.send_forward(to, origin, request, &payload);
        if self.rpc.gs.forwarded.len() >= self.cfg.reply_cache {
            self.rpc.gs.forwarded.pop_front();
        }
        self.rpc
            .gs
            .forwarded
            .push_back(((origin, request), to, payload));
        debug_assert!(self.rpc.gs.forwarded.len() <= self.cfg.reply_cache.max(1));
        Ok(())
    }

    /// A request handed to this member: shown to the application once, answered again from
    /// the kept reply if it came again.
    pub(super) fn on_forward(&mut self, from: NodeId, body: &[u8]) {
        let mut r = Reader::new(body);
        let (Ok(origin), Ok(request)) = (r.u32(), r.u64()) else {
            self.counters.malformed_dropped += 1;
            return;
        };
        let origin = NodeId(origin);
        if !self.in_ring() || !self.membership.ring.contains(&from) {
            self.counters.foreign_dropped += 1;
            return;
        }
        if let Some((_, reply)) = self
            .rpc
            .gs
            .replies
            .iter()
            .find(|(k, _)| *k == (origin, request))
        {
            let reply = reply.clone();
            self.counters.retransmissions += 1;
            return self.send_nm_reply(origin, request, &reply);
        }
        if self.rpc.gs.forwards_in.contains(&(origin, request)) {
            self.counters.duplicates += 1;
            return;
        }
        if self.rpc.gs.forwards_in.len() >= self.cfg.reply_cache {
            self.rpc.gs.forwards_in.pop_front();
        }
        self.rpc.gs.forwards_in.push_back((origin, request));
        debug_assert!(self.rpc.gs.forwards_in.len() <= self.cfg.reply_cache.max(1));
        self.events.push_back(Event::Forwarded(Delivery {
            seq: 0,
            sender: origin,
            msg: request,
            view: self.membership.delivered_view.id,
            payload: Bytes::copy_from_slice(r.rest()),
            respond: true,
        }));
    }

    /// `Engine::reply`: the holder of a handler lock answers a packet.
    pub(super) fn send_reply(
        &mut self,
        to: NodeId,
        request: u64,
        payload: Bytes,
    ) -> Result<(), SendError> {
        if !self.in_ring() {
            return Err(SendError::NotMember);
        }
        if payload.len() + wire::HEADER_LEN + 12
            > self.max_datagram_bytes.min(wire::MAX_DATAGRAM_LEN)
        {
            return Err(SendError::TooLarge);
        }
        self.send_nm_reply(to, request, &payload);
        if !self.membership.ring.contains(&to) {
            if self.rpc.gs.replies.len() >= self.cfg.reply_cache {
                self.rpc.gs.replies.pop_front();
            }
            self.rpc.gs.replies.push_back(((to, request), payload));
            debug_assert!(self.rpc.gs.replies.len() <= self.cfg.reply_cache.max(1));
        }
        Ok(())
    }

    // ---- multi-RPC: the non-member's side -----------------------------------------------------

    /// `Engine::request` of a non-member. A request stays within one datagram (a larger one is
    /// refused with [`SendError::TooLarge`]): a non-member's packets are numbered in a window
    /// of their own, acknowledged one by one and flushed from the ring's table, so a message
    /// in fragments could lose its beginning with its sender's entry. Members' messages go in
    /// fragments up to [`super::Config::max_message_bytes`].
    pub(super) fn client_request(
        &mut self,
        now: Time,
        payload: Bytes,
        qos: Qos,
        handler: Option<u8>,
    ) -> Result<u64, SendError> {
        let Some(c) = self.rpc.client.as_mut() else {
            return Err(SendError::Unsupported);
        };
        let handler = match handler {
            None => NO_HANDLER,
            Some(h) if h < HANDLER_LOCKS => h,
            Some(_) => return Err(SendError::Unsupported),
        };
        let room = self.max_datagram_bytes.min(wire::MAX_DATAGRAM_LEN);
        if payload.len() + wire::HEADER_LEN + packet::DATA_FIXED + packet::DATA_PER_MSG + NM_PREFIX
            > room
        {
            return Err(SendError::TooLarge);
        }
        if c.pending.len() >= self.cfg.client_window {
            self.counters.backpressure_refusals += 1;
            return Err(SendError::WouldBlock);
        }
        let n = c.next;
        c.next += 1;
        c.pending.insert(
            n,
            Pending {
                payload,
                qos,
                handler,
                acked: false,
                replied: handler == NO_HANDLER,
                tries: 0,
                at: now,
                rto: self.cfg.client_rto,
            },
        );
        debug_assert!(
            c.pending.len() <= self.cfg.client_window,
            "the client's window"
        );
        self.counters.submitted += 1;
        self.client_send(now, n);
        Ok(n)
    }

    /// Sends request `n` (again).
    fn client_send(&mut self, now: Time, n: u64) {
        let Some(c) = self.rpc.client.as_mut() else {
            return;
        };
        let lowest_unacked = c.pending.iter().find(|(_, p)| !p.acked).map(|(&k, _)| k);
        let known = c.known;
        let Some(p) = c.pending.get_mut(&n) else {
            return;
        };
        let mut flags = 0;
        if !p.acked {
            flags |= NM_WANT_ACK;
            let unknown = !known || p.tries >= self.cfg.first_after_tries;
            if unknown && lowest_unacked == Some(n) {
                flags |= NM_FIRST;
            }
        }
        if p.handler != NO_HANDLER && !p.replied {
            flags |= NM_REPEAT_REPLY;
        }
        let mut msg = Vec::with_capacity(NM_PREFIX + p.payload.len());
        msg.push(flags);
        msg.push(p.handler);
        msg.extend_from_slice(&p.payload);
        let qos = p.qos;
        if p.tries > 0 {
            p.rto = (p.rto * 2).min(self.cfg.client_rto_max);
        }
        p.tries += 1;
        p.at = now + p.rto;
        if p.tries > 1 {
            self.counters.retransmissions += 1;
        }
        let me = self.me;
        self.send(Destination::Group, packet::NM_DATA, |b| {
            packet::encode_data(b, me, n, std::iter::once((qos, &msg[..])))
        });
    }

    /// The non-member's timers: requests sent again, or given up.
    pub(super) fn client_timeout(&mut self, now: Time) {
        let Some(c) = self.rpc.client.as_mut() else {
            return;
        };
        let due: Vec<(u64, u32)> = c
            .pending
            .iter()
            .filter(|(_, p)| now >= p.at)
            .map(|(&n, p)| (n, p.tries))
            .collect();
        for (n, tries) in due {
            if tries >= self.cfg.give_up_tries {
                // Neither acknowledged nor answered: the group is gone or does not answer.
                if let Some(c) = self.rpc.client.as_mut() {
                    c.pending.remove(&n);
                }
                self.events.push_back(Event::Loss(Loss {
                    sender: self.me,
                    first_seq: n,
                    count: 1,
                }));
                continue;
            }
            self.client_send(now, n);
        }
    }

    /// A Non Member ACK or a reply reached the non-member.
    pub(super) fn on_client_packet(&mut self, from: NodeId, ptype: u8, body: &[u8]) {
        let me = self.me;
        let Some(c) = self.rpc.client.as_mut() else {
            self.counters.foreign_dropped += 1;
            return;
        };
        let mut r = Reader::new(body);
        let (n, reply) = match ptype {
            packet::NM_ACK => match (r.u64(), r.u64()) {
                (Ok(n), Ok(view)) => {
                    c.view = c.view.max(view);
                    (n, None)
                }
                _ => {
                    self.counters.malformed_dropped += 1;
                    return;
                }
            },
            _ => match (r.u32(), r.u64()) {
                (Ok(to), Ok(n)) if NodeId(to) == me => (n, Some(Bytes::copy_from_slice(r.rest()))),
                (Ok(_), Ok(_)) => return,
                _ => {
                    self.counters.malformed_dropped += 1;
                    return;
                }
            },
        };
        let Some(p) = c.pending.get_mut(&n) else {
            if reply.is_some() || c.done.contains(&n) {
                self.counters.duplicates += 1;
            }
            return;
        };
        c.known = true;
        let newly_acked = !p.acked;
        // A reply comes from a member that delivered the packet: it is acknowledged too.
        p.acked = true;
        let answer = match reply {
            Some(r) if !p.replied => {
                p.replied = true;
                Some(r)
            }
            Some(_) => {
                self.counters.duplicates += 1;
                None
            }
            None => None,
        };
        let finished = p.replied;
        if finished {
            c.pending.remove(&n);
            if c.done.len() >= self.cfg.reply_cache {
                c.done.pop_front();
            }
            c.done.push_back(n);
        }
        if let Some(payload) = answer {
            self.events.push_back(Event::Reply(Reply {
                from,
                request: n,
                payload,
            }));
        }
        if newly_acked {
            self.events.push_back(Event::SendComplete { msg: n });
        }
    }
}

/// The LCR kind of a lock request or release.
fn lock_kind(acquire: bool) -> u8 {
    if acquire {
        packet::LCR_LOCK
    } else {
        packet::LCR_UNLOCK
    }
}
