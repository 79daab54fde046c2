//! The RMTP state machine: one [`Tree`] is the Sender, a Receiver or a designated receiver
//! (DR, a Receiver and an ACK processor at once), as in Fig. 3 of the paper.

use crate::common::shell::{self, EventQueue, Gate, Shelled};
use crate::common::{CongestionWindow, Deadlines, RttEstimator};
use crate::engine::{
    Counters, Delivery, Destination, Engine, Event, GroupInfo, Loss, NodeId, Qos, SendError, Time,
    Transmit, View,
};
use crate::guarantees::Guarantees;
use crate::registry::{EngineParams, Role};
use crate::tree::cache::{DataCache, DataStore};
use crate::tree::config::{CongestionResponse, TreeConfig};
use crate::tree::packet::{self, bit, Advert, Packet, MAX_ANCESTORS};
use crate::wire::{self, EngineKind, Header, WriteExt, HEADER_LEN};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// Events held for the application at most; delivery pauses beyond (the receive window then
/// fills and the ACK processor repairs what was dropped later).
const MAX_EVENTS: usize = 4096;
/// Datagrams queued for the driver at most before new work waits for the next timer.
const MAX_OUT: usize = 65_536;
/// Packets in one retransmission queue at most (the queue is emptied every T_retx).
const MAX_RETX_ENTRIES: usize = 65_536;
/// Advertisements remembered at most.
const MAX_ADVERTS: usize = 256;
/// An advertiser not heard for this many T_sap is forgotten (it failed or left).
const ADVERT_LIFETIME_SAPS: u32 = 3;
/// Copies of a leaving receiver's ACK_FIN.
const FIN_COPIES: usize = 3;
/// T_send ticks without new data after which the sender has announced its highest sequence
/// number (SND_ACK_TOME) this many times, one per tick: a receiver that lost the last packets
/// of a burst learns of them from one of these (at 30% loss all eight are lost once in 6,500).
pub(super) const STATUS_REPEATS: u32 = 8;

/// Which entity of Fig. 3 this member is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Entity {
    /// The one sender (the group's creator).
    Sender,
    /// A plain receiver.
    Receiver,
    /// A designated receiver: a receiver that caches the data and serves its local region.
    Designated,
}

/// An ACK or ACK_TXNOW as received.
struct Ack<'a> {
    txnow: bool,
    l: u64,
    nbits: u16,
    bits: &'a [u8],
}

/// What an ACK processor knows of one receiver that sends it ACKs.
#[derive(Clone, Debug)]
struct Child {
    /// Its latest left edge L.
    l: u64,
    heard: Time,
    /// When its L last moved.
    l_moved: Time,
    /// Hops away (from the TTL its ACKs arrive with), if known.
    hops: Option<u8>,
    /// Too slow: the send window goes on without it until it catches up.
    stalled: bool,
    /// Packets `0..high_at_ack` existed here when its latest ACK arrived (0: none yet).
    high_at_ack: u64,
}

/// One element of the retransmission queue (section III-B5): the counter C of receivers that
/// asked for the packet and their addresses (AddrTab).
#[derive(Clone, Debug, Default)]
struct RetxEntry {
    addr_tab: Vec<NodeId>,
    /// Requests counted beyond AddrTab: once more than MCAST_thresh asked, the packet is
    /// multicast and the addresses are of no use, so they are no longer kept (a packet lost by
    /// thousands of receivers would otherwise hold thousands of addresses, searched at each).
    beyond: usize,
}

impl RetxEntry {
    /// The counter C.
    fn c(&self) -> usize {
        self.addr_tab.len() + self.beyond
    }

    /// Count a request from `from`; its address is kept while the packet may still be
    /// unicast (C at most `mcast_thresh`).
    fn add(&mut self, from: NodeId, mcast_thresh: usize) {
        if self.addr_tab.len() > mcast_thresh {
            self.beyond += 1;
        } else if !self.addr_tab.contains(&from) {
            self.addr_tab.push(from);
        }
    }
}

/// The Sender's part: the send window (Fig. 6) and the congestion window.
#[derive(Clone)]
struct SenderPart {
    /// Sequence number of the next packet the application submits.
    next_seq: u64,
    /// send_next: the next packet to transmit for the first time.
    send_next: u64,
    /// swin_lb: lower bound of the send window; never decreases.
    swin_lb: u64,
    /// cong_win (section III-B8).
    cong_win: CongestionWindow,
    /// Packets that may still go out in the current T_send.
    budget: u64,
    /// N: ACKs with retransmission requests received during the current T_send.
    n_requests: u32,
    next_send: Time,
    /// The end of the stream (DATA_EOF's sequence number), once the application said so.
    eof: Option<u64>,
    eof_sent: bool,
    /// Own messages below this have been reported complete.
    completed: u64,
    slow_starts: u64,
    /// A second leave aborts (RESET).
    leaving: bool,
    /// Announcements of the highest sequence number still owed after the latest burst of new
    /// data ([`STATUS_REPEATS`]); one per T_send tick that sent nothing new.
    status_due: u32,
    /// New data went out since the latest T_send tick.
    sent_since_tick: bool,
}

impl SenderPart {
    /// What holds between calls (checked in debug builds), Fig. 6: the window's lower bound
    /// never passes what was transmitted, nothing is transmitted before it is submitted, and a
    /// message completes only once every child has it (below `swin_lb`) and was submitted.
    fn check_invariants(&self) {
        debug_assert!(self.swin_lb <= self.send_next);
        debug_assert!(self.send_next <= self.next_seq);
        debug_assert!(self.completed <= self.next_seq);
        debug_assert!(self.completed <= self.swin_lb);
        debug_assert!(self.eof.is_none_or(|total| self.send_next <= total));
    }
}

/// The ACK-processor part of the Sender and of a DR.
#[derive(Clone)]
struct ApPart {
    children: BTreeMap<NodeId, Child>,
    /// The retransmission queue, by sequence number.
    retx: BTreeMap<u64, RetxEntry>,
    next_retx: Option<Time>,
    next_sap: Time,
    /// T_dally: when the ACK processor stops, restarted by every ACK.
    dally_until: Option<Time>,
    /// Advertising and serving (false once T_dally expired).
    active: bool,
    cache: DataCache,
}

/// What a receiver remembers of one advertisement (SND_ACK_TOME).
#[derive(Clone, Debug)]
struct Heard {
    ttl: Option<u8>,
    advert: Advert,
    at: Time,
}

/// The receive window of Fig. 4: L and W_r slots from it.
#[derive(Clone)]
struct RecvWindow {
    l: u64,
    slots: VecDeque<Option<Bytes>>,
}

impl RecvWindow {
    fn new(w: usize) -> Self {
        RecvWindow {
            l: 0,
            slots: std::iter::repeat_n(None, w).collect(),
        }
    }

    fn held(&self, seq: u64) -> Option<&Bytes> {
        let i = seq.checked_sub(self.l)?;
        self.slots.get(i as usize)?.as_ref()
    }

    /// The ACK's bit vector.
    fn bits(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.slots.len().div_ceil(8)];
        for (i, s) in self.slots.iter().enumerate() {
            if s.is_some() {
                v[i / 8] |= 1 << (i % 8);
            }
        }
        v
    }

    /// Drop everything below `floor` (reported lost).
    fn skip_to(&mut self, floor: u64) {
        let w = self.slots.len();
        while self.l < floor {
            self.slots.pop_front();
            self.slots.push_back(None);
            self.l += 1;
        }
        // The window slides; it never grows or shrinks (its size is W_r of the ACKs' bit vector).
        debug_assert_eq!(self.slots.len(), w);
    }
}

/// The Receiver's part (also a DR's).
#[derive(Clone)]
struct ReceiverPart {
    /// The session's sender, once known (from DATA or its advertisement).
    origin: Option<NodeId>,
    connected: bool,
    win: RecvWindow,
    /// Packets `0..high` exist.
    high: u64,
    /// The number of data packets, once DATA_EOF (or an advertisement saying so) was seen.
    eof: Option<u64>,
    heard: BTreeMap<NodeId, Heard>,
    /// ACK processors that refused this receiver (full): never chosen again.
    refused_by: BTreeSet<NodeId>,
    /// The ACK processor (AP) this receiver sends its ACKs to.
    ap: Option<NodeId>,
    rtt: RttEstimator,
    next_ack: Time,
    next_rtt: Time,
    /// An ACK_TXNOW is owed (joined late, or fell behind the window).
    txnow: bool,
    last_txnow: Option<Time>,
    /// L as the last ACK reported it.
    acked_l: Option<u64>,
    /// When the receiver last sent an ACK with news ([`Tree::ack_news`]): repeats of that ACK
    /// thin out from there and stop `child_silence_ms` later ([`Tree::ack_repeat_due`]).
    reported_at: Time,
    /// When the last ACK is repeated if there is no news by then.
    next_repeat: Time,
    /// Every packet and the end received: no more ACKs (section III-B1).
    done: bool,
    /// Closed (RESET, leave).
    closed: bool,
}

/// The RMTP engine (see the module docs).
#[derive(Clone)]
pub struct Tree {
    cfg: TreeConfig,
    group: u32,
    me: NodeId,
    max_datagram_bytes: usize,
    entity: Entity,
    snd: Option<SenderPart>,
    ap: Option<ApPart>,
    rcv: Option<ReceiverPart>,
    /// First transmissions of new data, a window's worth at a time.
    out: VecDeque<(Destination, Vec<u8>)>,
    /// Everything else (repairs, ACKs, control), sent before `out`: a repair queued behind a
    /// window of new data would arrive after the receiver asked again, and be sent twice.
    urgent: VecDeque<(Destination, Vec<u8>)>,
    events: EventQueue,
    left: bool,
    /// The session keeps the whole stream (a store behind every cache).
    stored: bool,
    /// The latest time the driver passed in.
    now: Time,
    counters: Counters,
    ext: Ext,
}

/// Counters of this engine only ([`Engine::engine_counters`]).
#[derive(Clone, Debug, Default)]
struct Ext {
    retx_unicast: u64,
    retx_multicast: u64,
    retx_scoped: u64,
    txnow_sent: u64,
    txnow_received: u64,
    acks_received: u64,
    children_silent: u64,
    children_stalled: u64,
    /// ACKs from receivers beyond `max_children`: answered with REFUSED.
    children_refused: u64,
    children_done: u64,
    children_left: u64,
    gone_sent: u64,
    lost: u64,
    ap_changes: u64,
    beyond_window: u64,
    adverts_sent: u64,
    rtt_samples: u64,
    /// DATA or DATA_EOF naming the session's origin but sent by a node that is neither the
    /// origin nor an ACK processor heard in the session (a forgery, or a relay before the
    /// origin announced itself): dropped.
    not_from_origin: u64,
    /// SND_ACK_TOME the sender sent to announce its highest sequence number once a burst of
    /// new data ended ([`STATUS_REPEATS`]), beside the periodic ones of T_sap.
    status_sent: u64,
}

impl Tree {
    /// An engine for `params` with connection parameters `cfg` and, for the sender and DRs,
    /// `store` behind the in-memory data cache; `stored` says whether the session's sender and
    /// DRs all have one (what the engine declares, [`super::guarantees`]).
    pub fn new(
        p: &EngineParams<'_>,
        mut cfg: TreeConfig,
        store: Option<Box<dyn DataStore>>,
        stored: bool,
    ) -> Tree {
        // A datagram must carry a packet: never trust the configuration to fit the driver.
        let room = p
            .max_datagram_bytes
            .saturating_sub(HEADER_LEN + packet::DATA_OVERHEAD)
            .max(1);
        cfg.packet_size_bytes = cfg.packet_size_bytes.clamp(1, room);
        cfg.recv_window_pkts = cfg.recv_window_pkts.clamp(1, packet::MAX_ACK_BITS as u32);
        cfg.send_window_pkts = cfg.send_window_pkts.max(1);
        cfg.cache_size_pkts = cfg.cache_size_pkts.max(cfg.send_window_pkts as usize);
        let entity = match p.role {
            Role::Create => Entity::Sender,
            Role::Join if cfg.designated_receivers.contains(&p.me) => Entity::Designated,
            Role::Join | Role::Client => Entity::Receiver,
        };
        let now = p.now;
        let ws = cfg.send_window_pkts as usize;
        let snd = (entity == Entity::Sender).then(|| SenderPart {
            next_seq: 0,
            send_next: 0,
            swin_lb: 0,
            // The sender begins with a slow start (section III-B8).
            cong_win: CongestionWindow::new(1, 1, ws),
            budget: 0,
            n_requests: 0,
            next_send: now,
            eof: None,
            eof_sent: false,
            completed: 0,
            slow_starts: 1,
            leaving: false,
            status_due: 0,
            sent_since_tick: false,
        });
        let ap = (entity != Entity::Receiver).then(|| ApPart {
            children: BTreeMap::new(),
            retx: BTreeMap::new(),
            next_retx: None,
            next_sap: now,
            dally_until: None,
            active: true,
            cache: DataCache::new(cfg.cache_size_pkts, store),
        });
        let rcv = (entity != Entity::Sender).then(|| ReceiverPart {
            origin: None,
            connected: false,
            win: RecvWindow::new(cfg.recv_window_pkts as usize),
            high: 0,
            eof: None,
            heard: BTreeMap::new(),
            refused_by: BTreeSet::new(),
            ap: None,
            rtt: RttEstimator::new(
                Duration::from_millis(cfg.t_retx_ms.max(1)),
                Duration::from_millis(1),
                Duration::from_secs(10),
            ),
            next_ack: now,
            next_rtt: now,
            txnow: false,
            last_txnow: None,
            acked_l: None,
            reported_at: now,
            next_repeat: now,
            done: false,
            closed: false,
        });
        let mut t = Tree {
            cfg,
            group: p.group,
            me: p.me,
            max_datagram_bytes: p.max_datagram_bytes,
            entity,
            snd,
            ap,
            rcv,
            out: VecDeque::new(),
            urgent: VecDeque::new(),
            events: EventQueue::new(MAX_EVENTS),
            left: false,
            stored,
            now,
            counters: Counters::default(),
            ext: Ext::default(),
        };
        if entity == Entity::Sender {
            t.install_view(p.me);
        }
        t
    }

    /// Which entity this member is.
    pub fn entity(&self) -> Entity {
        self.entity
    }

    /// Abort the session (the sending application gave up): the sender multicasts RESET and
    /// every receiver closes the connection (section III-B1). A receiver just leaves.
    pub fn abort(&mut self, _now: Time) {
        if self.left {
            return;
        }
        if self.entity == Entity::Sender {
            self.send(Destination::Group, &Packet::Reset);
        }
        self.finish();
    }

    fn finish(&mut self) {
        self.left = true;
        if let Some(ap) = self.ap.as_mut() {
            ap.active = false;
            ap.retx.clear();
        }
        self.events.push_back(Event::Left);
    }

    fn install_view(&mut self, coordinator: NodeId) {
        // One view for the whole session: RMTP keeps no membership (the sender does not know
        // its receivers), so the view names nobody and never changes.
        self.counters.view_changes += 1;
        self.events.push_back(Event::View(View {
            id: 1,
            seq: 0,
            members: Vec::new(),
            coordinator,
            joined: None,
            left: None,
        }));
    }

    fn origin(&self) -> NodeId {
        match &self.rcv {
            Some(r) => r.origin.unwrap_or(self.me),
            None => self.me,
        }
    }

    /// Datagrams queued for the driver, both queues.
    fn queued(&self) -> usize {
        self.out.len() + self.urgent.len()
    }

    fn send(&mut self, to: Destination, p: &Packet<'_>) {
        if self.queued() >= MAX_OUT {
            self.counters.out_refused += 1;
            return;
        }
        let mut buf = Vec::with_capacity(HEADER_LEN + 16);
        Header {
            engine: EngineKind::Tree,
            ptype: p.ptype(),
            flags: 0,
            group: self.group,
            incarnation: 0,
            sender: self.me,
        }
        .encode(&mut buf);
        p.encode(&mut buf);
        // An advertisement says how far the stream goes: behind the data, or receivers would
        // ask for packets still on their way.
        if matches!(p, Packet::Advert(_)) {
            self.out.push_back((to, buf));
        } else {
            self.urgent.push_back((to, buf));
        }
    }

    /// DATA `seq`: a first transmission unless `repair`.
    fn send_data(&mut self, to: Destination, seq: u64, payload: &Bytes, repair: bool) {
        if self.queued() >= MAX_OUT {
            self.counters.out_refused += 1;
            return;
        }
        let origin = self.origin();
        let mut buf = Vec::with_capacity(HEADER_LEN + packet::DATA_OVERHEAD + payload.len());
        Header {
            engine: EngineKind::Tree,
            ptype: packet::DATA,
            flags: 0,
            group: self.group,
            incarnation: 0,
            sender: self.me,
        }
        .encode(&mut buf);
        buf.put_u32(origin.0);
        buf.put_u64(seq);
        buf.extend_from_slice(payload);
        if repair {
            self.urgent.push_back((to, buf));
        } else {
            self.out.push_back((to, buf));
        }
    }

    fn send_eof(&mut self, to: Destination, total: u64) {
        let origin = self.origin();
        let mut buf = Vec::with_capacity(HEADER_LEN + 12);
        Header {
            engine: EngineKind::Tree,
            ptype: packet::DATA_EOF,
            flags: 0,
            group: self.group,
            incarnation: 0,
            sender: self.me,
        }
        .encode(&mut buf);
        buf.put_u32(origin.0);
        buf.put_u64(total);
        // The multicast end follows the data (see `send`); one to a peer answers its ACK.
        match to {
            Destination::Peer(_) => self.urgent.push_back((to, buf)),
            _ => self.out.push_back((to, buf)),
        }
    }

    // ---------------------------------------------------------------- the Sender

    /// T_send: update the send window from the ACKs, adjust the congestion window, and
    /// transmit what the usable window allows (sections III-B3, B5, B7, B8).
    fn on_send_tick(&mut self, now: Time) {
        let cfg = &self.cfg;
        let (silence, stall) = (
            Duration::from_millis(cfg.child_silence_ms),
            Duration::from_millis(cfg.child_stall_ms),
        );
        let Some(s) = self.snd.as_mut() else { return };
        let Some(ap) = self.ap.as_mut() else { return };
        let before = ap.children.len();
        ap.children
            .retain(|_, c| now.saturating_since(c.heard) <= silence);
        self.ext.children_silent += (before - ap.children.len()) as u64;
        // L_min over the children heard from lately that are not too slow.
        let mut l_min = s.send_next;
        for c in ap.children.values_mut() {
            if c.stalled && c.l >= s.send_next {
                c.stalled = false;
            }
            if !c.stalled
                && cfg.child_stall_ms > 0
                && c.l <= s.swin_lb
                && s.swin_lb < s.send_next
                && now.saturating_since(c.l_moved) > stall
            {
                c.stalled = true;
                self.ext.children_stalled += 1;
            }
            // A child behind swin_lb (it joined late, or fell behind) is ignored here, as the
            // paper's sender ignores its ACKs: it catches up from the cache (ACK_TXNOW).
            if !c.stalled && c.l >= s.swin_lb {
                l_min = l_min.min(c.l);
            }
        }
        if l_min > s.swin_lb {
            s.swin_lb = l_min;
        }
        let done_below = s.swin_lb.min(s.next_seq);
        while s.completed < done_below {
            self.events
                .push_back(Event::SendComplete { msg: s.completed });
            s.completed += 1;
        }
        match cfg.cong_thresh {
            Some(th) if s.n_requests > th => {
                match cfg.cong_response {
                    CongestionResponse::Reset => {
                        s.cong_win = CongestionWindow::new(1, 1, cfg.send_window_pkts as usize)
                    }
                    CongestionResponse::Halve => s.cong_win.on_loss(),
                }
                s.slow_starts += 1;
            }
            _ => s.cong_win.on_ack(1),
        }
        s.n_requests = 0;
        let avail_win = (s.swin_lb + cfg.send_window_pkts as u64).saturating_sub(s.send_next);
        s.budget = avail_win.min(s.cong_win.get() as u64);
        s.next_send = now + cfg.t_send();
        s.check_invariants();
        self.transmit_new(now);
        let Some(s) = self.snd.as_mut() else { return };
        // A whole T_send without new data: the stream paused, and its last packets are the
        // ones a receiver cannot find lost (no later packet shows it the gap). RMTP's receivers
        // learn of them from the sender's status, SND_ACK_TOME with its highest sequence
        // number; the periodic one comes only every T_sap, and by then the sender may have
        // stopped waiting for the receiver: it forgets a child silent for `child_silence_ms`,
        // and an idle receiver falls silent (its ACK repeats stop), so that after an idle gap
        // the sender knows none of the receivers its new packets reach, and the ACKs of those
        // that got them complete the packets. So the high is announced at once, a few times.
        let announce = !std::mem::take(&mut s.sent_since_tick) && s.status_due > 0;
        if announce {
            s.status_due -= 1;
        }
        if announce && self.advertising() {
            self.ext.status_sent += 1;
            self.advertise(now);
        }
    }

    /// Multicast new packets while the usable window of this T_send allows, then DATA_EOF.
    fn transmit_new(&mut self, now: Time) {
        loop {
            let full = self.queued() >= MAX_OUT;
            let Some(s) = self.snd.as_mut() else { return };
            if s.send_next >= s.next_seq || s.budget == 0 || full {
                break;
            }
            let seq = s.send_next;
            s.send_next += 1;
            s.budget -= 1;
            s.sent_since_tick = true;
            s.status_due = STATUS_REPEATS;
            let Some(data) = self.ap.as_mut().and_then(|a| a.cache.get(seq)) else {
                continue;
            };
            self.send_data(Destination::Group, seq, &data, false);
        }
        let Some(s) = self.snd.as_mut() else { return };
        s.check_invariants();
        if let Some(total) = s.eof {
            if s.send_next == total && !s.eof_sent {
                s.eof_sent = true;
                self.send_eof(Destination::Group, total);
                if let Some(ap) = self.ap.as_mut() {
                    ap.dally_until = Some(now + self.cfg.t_dally());
                }
            }
        }
    }

    fn sender_wants_tick(&self) -> bool {
        self.snd.as_ref().is_some_and(|s| {
            !self.left
                && (s.send_next < s.next_seq
                    || s.completed < s.next_seq
                    || s.status_due > 0
                    || (s.eof.is_some() && !s.eof_sent))
        })
    }

    // ---------------------------------------------------------------- ACK processors

    /// What this ACK processor can send of packet `seq`.
    fn fetch(&mut self, seq: u64) -> Option<Bytes> {
        if let Some(s) = &self.snd {
            if seq >= s.send_next {
                return None;
            }
        }
        if let Some(d) = self.ap.as_mut().and_then(|a| a.cache.get(seq)) {
            return Some(d);
        }
        self.rcv.as_ref()?.win.held(seq).cloned()
    }

    /// The end of the stream as this ACK processor knows it.
    fn known_eof(&self) -> Option<u64> {
        match (&self.snd, &self.rcv) {
            (Some(s), _) => s.eof.filter(|_| s.eof_sent),
            (None, Some(r)) => r.eof,
            _ => None,
        }
    }

    /// Packets `0..high` exist as far as this member knows.
    fn known_high(&self) -> u64 {
        match (&self.snd, &self.rcv) {
            (Some(s), _) => s.send_next,
            (None, Some(r)) => r.high,
            _ => 0,
        }
    }

    fn on_ack(&mut self, now: Time, from: NodeId, ttl: Option<u8>, ack: Ack<'_>) {
        let Ack {
            txnow,
            l,
            nbits,
            bits,
        } = ack;
        let hops = ttl.map(|t| self.cfg.ad_ttl.saturating_sub(t));
        let (max_children, t_dally) = (self.cfg.max_children, self.cfg.t_dally());
        let mcast_thresh = self.cfg.mcast_thresh as usize;
        let high_now = self.known_high();
        let Some(ap) = self.ap.as_mut() else {
            self.counters.foreign_dropped += 1;
            return;
        };
        if !ap.active {
            return;
        }
        self.ext.acks_received += 1;
        if txnow {
            self.ext.txnow_received += 1;
        }
        self.counters.nacks_received += u64::from(txnow);
        if !ap.children.contains_key(&from) && ap.children.len() >= max_children {
            self.ext.children_refused += 1;
            // Told at once, so that it turns to another ACK processor instead of waiting on
            // one that never answers it.
            let limit = u32::try_from(max_children).unwrap_or(u32::MAX);
            self.send(Destination::Peer(from), &Packet::Refused { limit });
            return;
        }
        let c = ap.children.entry(from).or_insert(Child {
            l,
            heard: now,
            l_moved: now,
            hops,
            stalled: false,
            high_at_ack: 0,
        });
        c.heard = now;
        let high_before = std::mem::replace(&mut c.high_at_ack, high_now);
        if hops.is_some() {
            c.hops = hops;
        }
        if l > c.l {
            c.l = l;
            c.l_moved = now;
        }
        // Any ACK restarts T_dally: someone still needs the session.
        if let Some(d) = ap.dally_until.as_mut() {
            *d = now + t_dally;
        }
        let floor = ap.cache.floor();
        if l < floor {
            // Packets the cache no longer holds and no store kept: say so once per ACK.
            self.ext.gone_sent += 1;
            self.send(Destination::Peer(from), &Packet::Gone { floor });
            return;
        }
        let high = self.known_high();
        let mut requested = false;
        let n = (nbits as u64).min(high.saturating_sub(l));
        // Packets that existed here when the child's previous ACK arrived and that its vector
        // still stops short of, an ACK interval later: lost, the last ones sent (no later
        // packet showed the child the gap, and it cannot ask for what it does not know of).
        // `l` is the child's word (up to 2^64 - 1): saturating, a claim past every number here
        // leaves an empty tail.
        let tail = l.saturating_add(u64::from(nbits))
            ..high_before
                .min(high)
                .min(l.saturating_add(u64::from(self.cfg.recv_window_pkts)));
        let missing = (0..n)
            .filter(|&i| !bit(bits, i as usize))
            .map(|i| l + i)
            .chain(tail);
        for seq in missing {
            requested = true;
            if txnow {
                // ACK_TXNOW: transmit the missed packets to this receiver now, by unicast.
                if let Some(d) = self.fetch(seq) {
                    self.counters.retransmissions += 1;
                    self.ext.retx_unicast += 1;
                    self.send_data(Destination::Peer(from), seq, &d, true);
                }
            } else {
                let Some(ap) = self.ap.as_mut() else { return };
                if ap.retx.len() >= MAX_RETX_ENTRIES && !ap.retx.contains_key(&seq) {
                    break;
                }
                ap.retx.entry(seq).or_default().add(from, mcast_thresh);
                debug_assert!(
                    ap.retx.len() <= MAX_RETX_ENTRIES,
                    "the retransmission queue is bounded"
                );
            }
        }
        // The receiver has every packet but not the end: send DATA_EOF again.
        if let Some(total) = self.known_eof() {
            if l >= total {
                self.send_eof(Destination::Peer(from), total);
            }
        }
        if requested && !txnow {
            if let Some(s) = self.snd.as_mut() {
                s.n_requests += 1;
            }
        }
        let t_retx = self.cfg.t_retx();
        if let Some(ap) = self.ap.as_mut() {
            if !ap.retx.is_empty() && ap.next_retx.is_none() {
                ap.next_retx = Some(now + t_retx);
            }
        }
    }

    /// The scope of a DR's local multicast: as many hops as its farthest child, plus one.
    fn local_scope(&self) -> Destination {
        if self.entity == Entity::Sender {
            return Destination::Group;
        }
        let far = self
            .ap
            .as_ref()
            .and_then(|a| a.children.values().filter_map(|c| c.hops).max())
            .unwrap_or(0);
        Destination::Scoped {
            ttl: far.saturating_add(1),
        }
    }

    /// T_retx: serve the retransmission queue; more than MCAST_thresh requesters and the
    /// packet is multicast (by a DR to its own area), else unicast to each (section III-B5).
    fn on_retx_tick(&mut self, _now: Time) {
        let Some(ap) = self.ap.as_mut() else { return };
        ap.next_retx = None;
        let queue = std::mem::take(&mut ap.retx);
        let scope = self.local_scope();
        for (seq, e) in queue {
            let Some(d) = self.fetch(seq) else { continue };
            if e.c() > self.cfg.mcast_thresh as usize {
                self.counters.retransmissions += 1;
                match scope {
                    Destination::Group => self.ext.retx_multicast += 1,
                    _ => self.ext.retx_scoped += 1,
                }
                self.send_data(scope, seq, &d, true);
            } else {
                for to in e.addr_tab {
                    self.counters.retransmissions += 1;
                    self.ext.retx_unicast += 1;
                    self.send_data(Destination::Peer(to), seq, &d, true);
                }
            }
        }
    }

    /// This member's place in the hierarchy: (level, TTL of the sender's advertisements,
    /// ancestors).
    fn hierarchy(&self) -> (u8, u8, Vec<NodeId>) {
        let Some(r) = &self.rcv else {
            return (0, u8::MAX, Vec::new());
        };
        let sender_ttl = r
            .origin
            .and_then(|o| r.heard.get(&o))
            .and_then(|h| h.ttl)
            .unwrap_or(0);
        let Some(ap) = r.ap else {
            return (1, sender_ttl, Vec::new());
        };
        let (level, mut anc) = match r.heard.get(&ap) {
            Some(h) => (h.advert.level.saturating_add(1), h.advert.ancestors.clone()),
            None => (1, Vec::new()),
        };
        anc.insert(0, ap);
        anc.truncate(MAX_ANCESTORS);
        (level, sender_ttl, anc)
    }

    /// T_sap: advertise this ACK processor with SND_ACK_TOME (section III-B9).
    fn advertise(&mut self, now: Time) {
        let (level, sender_ttl, ancestors) = self.hierarchy();
        let high = self.known_high();
        let eof = self.known_eof();
        let t_sap = self.cfg.t_sap();
        let Some(ap) = self.ap.as_mut() else { return };
        ap.next_sap = now + t_sap;
        self.ext.adverts_sent += 1;
        self.send(
            Destination::Group,
            &Packet::Advert(Advert {
                level,
                sender_ttl,
                high: eof.unwrap_or(high),
                eof: eof.is_some(),
                ancestors,
            }),
        );
    }

    fn advertising(&self) -> bool {
        if self.left {
            return false;
        }
        match (&self.ap, &self.rcv) {
            (Some(ap), None) => ap.active,
            // A DR advertises once it is part of a session.
            (Some(ap), Some(r)) => ap.active && r.connected && !r.closed,
            _ => false,
        }
    }

    // ---------------------------------------------------------------- Receivers

    fn connect(&mut self, origin: NodeId, now: Time) {
        let Some(r) = self.rcv.as_mut() else { return };
        if r.connected {
            return;
        }
        r.connected = true;
        r.origin = Some(origin);
        r.next_ack = now;
        // The first RTT_MEASURE right after the connection is established.
        r.next_rtt = now;
        if let Some(ap) = self.ap.as_mut() {
            ap.next_sap = now;
        }
        self.install_view(origin);
        self.choose_ap(now);
    }

    /// Whether `from` may be this session's origin.
    fn is_origin(&self, origin: NodeId) -> bool {
        self.rcv
            .as_ref()
            .is_some_and(|r| r.origin.is_none_or(|o| o == origin))
    }

    /// Whether DATA or DATA_EOF of `origin`'s session may come from `from`: the origin itself,
    /// or, once the origin is fixed, an ACK processor (a DR repairing) heard in the session.
    /// The origin is fixed by its own first announcement (level-0 SND_ACK_TOME, DATA or
    /// DATA_EOF sent by itself), never by a packet that only names it.
    fn may_send_for(&self, from: NodeId, origin: NodeId) -> bool {
        from == origin
            || self.rcv.as_ref().is_some_and(|r| {
                r.origin == Some(origin)
                    && (r.ap == Some(from)
                        || r.heard.get(&from).is_some_and(|h| h.advert.level > 0))
            })
    }

    /// Whether a session packet from `from` naming `origin` is taken; counts what is not.
    fn session_packet(&mut self, from: NodeId, origin: NodeId) -> bool {
        if !self.is_origin(origin) || origin == self.me {
            self.counters.foreign_dropped += 1;
            return false;
        }
        if !self.may_send_for(from, origin) {
            self.ext.not_from_origin += 1;
            return false;
        }
        true
    }

    fn on_data(&mut self, now: Time, from: NodeId, origin: NodeId, seq: u64, payload: &[u8]) {
        if !self.session_packet(from, origin) {
            return;
        }
        self.connect(origin, now);
        let w = self.cfg.recv_window_pkts as u64;
        let Some(r) = self.rcv.as_mut() else { return };
        if r.closed {
            return;
        }
        r.high = r.high.max(seq + 1);
        if seq < r.win.l || r.win.held(seq).is_some() {
            self.counters.duplicates += 1;
            return;
        }
        if seq >= r.win.l + w {
            // Beyond the receive window: this receiver is behind (joined late, or lost much).
            self.ext.beyond_window += 1;
            r.txnow = true;
            return;
        }
        if seq > r.win.l && r.win.l == 0 && r.win.slots.iter().all(Option::is_none) {
            // Joined while the session was under way: ask for the start at once.
            r.txnow = true;
        }
        let i = (seq - r.win.l) as usize;
        r.win.slots[i] = Some(Bytes::copy_from_slice(payload));
        self.deliver(now);
    }

    /// Deliver in sequence from L while the event queue has room; a DR caches what it
    /// delivers.
    fn deliver(&mut self, now: Time) {
        let Some(r) = self.rcv.as_mut() else { return };
        let sender = r.origin.unwrap_or_default();
        let (w, l_before) = (r.win.slots.len(), r.win.l);
        while self.events.room() {
            let Some(Some(_)) = r.win.slots.front() else {
                break;
            };
            let payload = r.win.slots.pop_front().flatten().unwrap_or_default();
            r.win.slots.push_back(None);
            let seq = r.win.l;
            r.win.l += 1;
            if let Some(ap) = self.ap.as_mut() {
                if ap.cache.end() == seq {
                    ap.cache.push(payload.clone());
                }
            }
            self.counters.delivered += 1;
            self.events.push_back(Event::Deliver(Delivery {
                respond: false,
                seq,
                sender,
                msg: seq,
                view: 1,
                payload,
            }));
        }
        // The window slides in order and keeps its W_r slots; what a DR caches is exactly
        // what it delivered, in order, so that it can serve repairs from it.
        debug_assert!(r.win.slots.len() == w && r.win.l >= l_before);
        debug_assert!(self.ap.as_ref().is_none_or(|ap| ap.cache.end() <= r.win.l));
        self.check_done(now);
    }

    fn check_done(&mut self, now: Time) {
        let t_dally = self.cfg.t_dally();
        let Some(r) = self.rcv.as_mut() else { return };
        if r.done || r.eof.is_none_or(|total| r.win.l < total) {
            return;
        }
        r.done = true;
        // A DR stays for T_dally after it holds everything, serving its region.
        if let Some(ap) = self.ap.as_mut() {
            ap.dally_until = Some(now + t_dally);
        }
    }

    fn on_eof(&mut self, now: Time, from: NodeId, origin: NodeId, total: u64) {
        if !self.session_packet(from, origin) {
            return;
        }
        self.connect(origin, now);
        let Some(r) = self.rcv.as_mut() else { return };
        r.eof = Some(total);
        r.high = r.high.max(total);
        self.check_done(now);
    }

    fn on_advert(&mut self, now: Time, from: NodeId, ttl: Option<u8>, a: Advert) {
        if self.rcv.is_none() {
            // The sender hears DRs' advertisements: nothing to do with them.
            return;
        }
        if a.level == 0 && !self.is_origin(from) {
            self.counters.foreign_dropped += 1;
            return;
        }
        let Some(r) = self.rcv.as_mut() else { return };
        if a.level == 0 {
            r.origin = Some(from);
        }
        if r.heard.len() >= MAX_ADVERTS && !r.heard.contains_key(&from) {
            return;
        }
        r.high = r.high.max(a.high);
        if a.eof {
            r.eof = Some(a.high);
        }
        r.heard.insert(
            from,
            Heard {
                ttl,
                advert: a,
                at: now,
            },
        );
        if !r.connected && r.high > 0 {
            // A receiver that joins after the data went by learns of it here.
            if let Some(o) = r.origin {
                r.txnow = true;
                self.connect(o, now);
            }
        }
        self.choose_ap(now);
        self.check_done(now);
    }

    /// Our ACK processor `from` refused us (it keeps `limit` children): choose another; with
    /// none left, the receiver gives up at once and says so, naming the limit.
    fn on_refused(&mut self, now: Time, from: NodeId, limit: u32) {
        let Some(r) = self.rcv.as_mut() else { return };
        if r.ap != Some(from) || r.refused_by.len() >= MAX_ADVERTS {
            return; // not our ACK processor: a stale or forged refusal
        }
        r.refused_by.insert(from);
        self.choose_ap(now);
        if self.rcv.as_ref().is_some_and(|r| r.ap.is_none()) {
            self.events
                .push_back(Event::Recovery(crate::engine::Recovery::Refused { limit }));
            self.left = true;
        }
    }

    /// Choose the ACK processor whose SND_ACK_TOME arrives with the largest TTL (the nearest);
    /// a DR only takes one strictly nearer to the sender than itself and not below itself,
    /// which keeps the hierarchy a tree (section III-B9, B10).
    fn choose_ap(&mut self, now: Time) {
        let me = self.me;
        let dr = self.entity == Entity::Designated;
        let lifetime = self.cfg.t_sap() * ADVERT_LIFETIME_SAPS;
        let Some(r) = self.rcv.as_mut() else { return };
        r.heard
            .retain(|_, h| now.saturating_since(h.at) <= lifetime);
        let my_sender_ttl = r
            .origin
            .and_then(|o| r.heard.get(&o))
            .and_then(|h| h.ttl)
            .unwrap_or(0);
        let best = r
            .heard
            .iter()
            .filter(|(id, h)| {
                **id != me
                    && !r.refused_by.contains(id)
                    && !h.advert.ancestors.contains(&me)
                    && (Some(**id) == r.origin || !dr || h.advert.sender_ttl > my_sender_ttl.max(1))
            })
            .max_by_key(|(id, h)| (h.ttl.unwrap_or(0), h.advert.level, std::cmp::Reverse(**id)))
            .map(|(id, _)| *id)
            .or(r.origin.filter(|o| !r.refused_by.contains(o)));
        if best != r.ap {
            if r.ap.is_some() {
                self.ext.ap_changes += 1;
            }
            r.ap = best;
            // A new AP: measure the RTT to it afresh.
            r.rtt = RttEstimator::new(
                Duration::from_millis(self.cfg.t_retx_ms.max(1)),
                Duration::from_millis(1),
                Duration::from_secs(10),
            );
            r.next_rtt = now;
        }
    }

    /// T_ack from the measured RTT: the round trip plus the AP's processing delay (its
    /// T_retx), smoothed as TCP does (Fig. 5).
    fn t_ack(&self) -> Duration {
        let rto = self
            .rcv
            .as_ref()
            .map_or(Duration::ZERO, |r| r.rtt.base_rto());
        (rto + self.cfg.t_retx()).clamp(
            Duration::from_millis(self.cfg.t_ack_min_ms),
            Duration::from_millis(self.cfg.t_ack_max_ms),
        )
    }

    fn send_ack(&mut self, now: Time) {
        let t_ack = self.t_ack();
        let news = self.ack_news();
        let Some(r) = self.rcv.as_mut() else { return };
        let Some(ap) = r.ap else { return };
        let txnow = std::mem::take(&mut r.txnow);
        if txnow {
            r.last_txnow = Some(now);
            self.ext.txnow_sent += 1;
            self.counters.nacks_sent += 1;
        }
        r.next_ack = now + t_ack;
        r.next_repeat = if news {
            r.reported_at = now;
            now + t_ack
        } else {
            // A repeat: the next one after as long again as since the news was reported.
            now + t_ack.max(now.saturating_since(r.reported_at))
        };
        r.acked_l = Some(r.win.l);
        let bits = r.win.bits();
        // The vector stops at the last packet known to exist: packets still on their way are
        // not asked for again.
        let known = r.high.saturating_sub(r.win.l).min(r.win.slots.len() as u64);
        let (l, nbits) = (r.win.l, known as u16);
        let bits = &bits[..(nbits as usize).div_ceil(8)];
        self.counters.acks_sent += 1;
        self.send(
            Destination::Peer(ap),
            &Packet::Ack {
                txnow,
                l,
                nbits,
                bits,
            },
        );
    }

    fn receiver_active(&self) -> bool {
        !self.left
            && self
                .rcv
                .as_ref()
                .is_some_and(|r| r.connected && !r.done && !r.closed)
    }

    /// Whether the receiver has news for its AP: packets it knows of and lacks, or an L its
    /// last ACK did not report. A receiver that holds everything it knows of only repeats its
    /// last ACK for a while ([`Tree::ack_repeat_due`]), then falls silent until more data (or
    /// an advertisement of more) arrives, so that an idle session goes quiet.
    fn ack_news(&self) -> bool {
        self.rcv
            .as_ref()
            .is_some_and(|r| r.txnow || r.win.l < r.high || r.acked_l.is_none_or(|a| a < r.win.l))
    }

    /// Whether a receiver without news still repeats its last ACK. RMTP's ACKs are periodic
    /// (section III-B4), so that a lost one is made good by the next: the AP, and above all the
    /// sender's window, waits for this receiver's L until it hears it, and nothing else would
    /// make the receiver say it again. Here the repeats thin out (each after as long as since
    /// the news was first reported, T_ack at least) and stop once the AP would have given up
    /// waiting for a silent child anyway (`child_silence_ms`), so that an idle session still
    /// goes quiet.
    fn ack_repeat_due(&self) -> bool {
        let silence = Duration::from_millis(self.cfg.child_silence_ms);
        self.rcv
            .as_ref()
            .is_some_and(|r| r.acked_l.is_some() && r.next_repeat < r.reported_at + silence)
    }

    // ---------------------------------------------------------------- input

    fn input(&mut self, now: Time, pkt: wire::Packet<'_>, ttl: Option<u8>) {
        self.now = self.now.max(now);
        let h = pkt.header;
        // DATA and DATA_EOF carry the session's origin before the common body.
        let (origin, body) = match h.ptype {
            packet::DATA | packet::DATA_EOF => {
                let Some((o, rest)) = pkt.body.split_first_chunk::<4>() else {
                    self.counters.malformed_dropped += 1;
                    return;
                };
                (NodeId(u32::from_be_bytes(*o)), rest)
            }
            _ => (h.sender, pkt.body),
        };
        let p = match Packet::decode(h.ptype, body) {
            Ok(p) => p,
            Err(_) => {
                self.counters.malformed_dropped += 1;
                return;
            }
        };
        match p {
            Packet::Data { seq, payload } if seq < u64::MAX / 2 => {
                self.on_data(now, h.sender, origin, seq, payload)
            }
            Packet::Eof { total } if total < u64::MAX / 2 => {
                self.on_eof(now, h.sender, origin, total)
            }
            Packet::Ack {
                txnow,
                l,
                nbits,
                bits,
            } => self.on_ack(
                now,
                h.sender,
                ttl,
                Ack {
                    txnow,
                    l,
                    nbits,
                    bits,
                },
            ),
            Packet::Rtt {
                answer: false,
                stamp,
            } => {
                if self.ap.as_ref().is_some_and(|a| a.active) {
                    self.send(
                        Destination::Peer(h.sender),
                        &Packet::Rtt {
                            answer: true,
                            stamp,
                        },
                    );
                }
            }
            Packet::Rtt {
                answer: true,
                stamp,
            } => {
                if let Some(r) = self.rcv.as_mut() {
                    if r.ap == Some(h.sender) && stamp <= now.0 {
                        r.rtt.on_sample(Duration::from_nanos(now.0 - stamp));
                        self.ext.rtt_samples += 1;
                    }
                }
            }
            Packet::Advert(a) if a.high < u64::MAX / 2 => self.on_advert(now, h.sender, ttl, a),
            Packet::Gone { floor } => self.on_gone(now, h.sender, floor),
            Packet::Fin { l } => self.on_fin(h.sender, l),
            Packet::Refused { limit } => self.on_refused(now, h.sender, limit),
            Packet::Reset => {
                let from_origin = self
                    .rcv
                    .as_ref()
                    .is_some_and(|r| r.origin == Some(h.sender));
                if from_origin && self.rcv.as_ref().is_some_and(|r| !r.done) {
                    if let Some(r) = self.rcv.as_mut() {
                        r.closed = true;
                    }
                    self.finish();
                }
            }
            _ => self.counters.malformed_dropped += 1,
        }
    }

    /// ACK_FIN from a child: it left with left edge `l`. The AP forgets it now rather than
    /// after `child_silence_ms` of silence, so that a sender whose receivers all finished is
    /// done at once.
    fn on_fin(&mut self, from: NodeId, l: u64) {
        let high = self.known_high();
        let Some(ap) = self.ap.as_mut() else {
            self.counters.foreign_dropped += 1;
            return;
        };
        if ap.children.remove(&from).is_none() {
            return;
        }
        if l >= high && self.known_eof().is_none_or(|total| l >= total) {
            self.ext.children_done += 1;
        } else {
            self.ext.children_left += 1;
        }
    }

    /// DATA_GONE from the AP: what it no longer holds is reported lost.
    fn on_gone(&mut self, now: Time, from: NodeId, floor: u64) {
        let Some(r) = self.rcv.as_mut() else { return };
        if r.ap != Some(from) || floor <= r.win.l || floor > r.high {
            return;
        }
        let first = r.win.l;
        r.win.skip_to(floor);
        self.ext.lost += floor - first;
        self.events.push_back(Event::Loss(Loss {
            sender: r.origin.unwrap_or_default(),
            first_seq: first,
            count: floor - first,
        }));
        self.deliver(now);
    }
}

impl Shelled for Tree {
    const KIND: EngineKind = EngineKind::Tree;
    fn clock(&mut self, now: Time) {
        self.now = self.now.max(now);
    }
    fn gate(&mut self) -> Gate<'_> {
        Gate::new(self.group, self.me, self.left, Some(0), &mut self.counters)
    }

    fn on_packet(
        &mut self,
        now: Time,
        _: NodeId,
        pkt: wire::Packet<'_>,
        _: &[u8],
        ttl: Option<u8>,
    ) {
        self.input(now, pkt, ttl);
    }
}

impl Engine for Tree {
    fn handle_datagram(&mut self, now: Time, from: NodeId, datagram: &[u8]) {
        shell::receive(self, now, from, datagram, None)
    }

    fn handle_datagram_with_ttl(
        &mut self,
        now: Time,
        from: NodeId,
        datagram: &[u8],
        ttl: Option<u8>,
    ) {
        shell::receive(self, now, from, datagram, ttl)
    }

    fn handle_timeout(&mut self, now: Time) {
        self.now = self.now.max(now);
        if self.left {
            return;
        }
        if self.sender_wants_tick() && self.snd.as_ref().is_some_and(|s| now >= s.next_send) {
            self.on_send_tick(now);
        }
        if self
            .ap
            .as_ref()
            .and_then(|a| a.next_retx)
            .is_some_and(|t| now >= t)
        {
            self.on_retx_tick(now);
        }
        if self.advertising() && self.ap.as_ref().is_some_and(|a| now >= a.next_sap) {
            self.advertise(now);
        }
        if let Some(until) = self.ap.as_ref().and_then(|a| a.dally_until) {
            if now >= until {
                // T_dally expired without an ACK: the session is over here.
                if let Some(ap) = self.ap.as_mut() {
                    ap.dally_until = None;
                    ap.active = false;
                    ap.children.clear();
                }
                if self.entity == Entity::Sender {
                    self.finish();
                    return;
                }
            }
        }
        if self.receiver_active() {
            let t_rtt = self.cfg.t_rtt();
            let lifetime = self.cfg.t_sap() * ADVERT_LIFETIME_SAPS;
            let r = self.rcv.as_ref().expect("receiver_active");
            // Advertisers that fell silent are forgotten; choose again.
            if r.heard
                .values()
                .any(|h| now.saturating_since(h.at) > lifetime)
            {
                self.choose_ap(now);
            }
            let r = self.rcv.as_mut().expect("receiver_active");
            if now >= r.next_rtt {
                r.next_rtt = now + t_rtt;
                if let Some(ap) = r.ap {
                    self.send(
                        Destination::Peer(ap),
                        &Packet::Rtt {
                            answer: false,
                            stamp: now.0,
                        },
                    );
                }
            }
            let r = self.rcv.as_ref().expect("receiver_active");
            let news = self.ack_news();
            if (now >= r.next_ack && news)
                || (now >= r.next_repeat && !news && self.ack_repeat_due())
                || self.txnow_due(now)
            {
                self.send_ack(now);
            }
        }
    }

    fn submit(&mut self, now: Time, payload: Bytes, qos: Qos) -> Result<u64, SendError> {
        if !self.guarantees().qos.contains(qos) {
            return Err(SendError::Unsupported);
        }
        if self.left || self.snd.as_ref().is_none_or(|s| s.leaving) {
            return Err(SendError::NotMember);
        }
        if payload.len() > self.cfg.packet_size_bytes {
            return Err(SendError::TooLarge);
        }
        if !self.can_submit() {
            self.counters.backpressure_refusals += 1;
            return Err(SendError::WouldBlock);
        }
        let (Some(s), Some(ap)) = (self.snd.as_mut(), self.ap.as_mut()) else {
            return Err(SendError::NotMember);
        };
        let seq = s.next_seq;
        s.next_seq += 1;
        ap.cache.push(payload.clone());
        self.counters.submitted += 1;
        if self.cfg.deliver_own {
            self.counters.delivered += 1;
            self.events.push_back(Event::Deliver(Delivery {
                respond: false,
                seq,
                sender: self.me,
                msg: seq,
                view: 1,
                payload,
            }));
        }
        // Within this T_send's usable window the packet leaves at once.
        self.transmit_new(now);
        Ok(seq)
    }

    fn leave(&mut self, now: Time) {
        if self.left {
            return;
        }
        let Some(s) = self.snd.as_mut() else {
            // A receiver leaves without a handshake (IP multicast semantics), but tells its AP
            // where it stopped so that the AP does not wait for it. Copies, because a lost one
            // costs the AP `child_silence_ms` and nothing here is left to repeat it.
            if let Some(r) = self.rcv.as_mut() {
                r.closed = true;
                if let (Some(ap), true) = (r.ap, r.connected) {
                    let l = r.win.l;
                    for _ in 0..FIN_COPIES {
                        self.send(Destination::Peer(ap), &Packet::Fin { l });
                    }
                }
            }
            return self.finish();
        };
        if s.leaving {
            // Leaving again before the end: abort the session with RESET.
            return self.abort(now);
        }
        s.leaving = true;
        s.eof = Some(s.next_seq);
        if s.send_next == s.next_seq && s.budget == 0 {
            s.next_send = s.next_send.min(now);
        }
        self.transmit_new(now);
    }

    fn poll_transmit(&mut self, _now: Time, buf: &mut Vec<u8>) -> Option<Transmit> {
        debug_assert!(
            self.queued() <= MAX_OUT,
            "the out queues hold at most MAX_OUT"
        );
        let (to, data) = self.urgent.pop_front().or_else(|| self.out.pop_front())?;
        *buf = data;
        shell::count_sent(&mut self.counters, buf.len());
        Some(Transmit::single(to))
    }

    fn poll_event(&mut self) -> Option<Event> {
        let (e, resume) = self.events.pop();
        if resume {
            // Delivery paused on a full queue; there is room again.
            self.resume_delivery();
        }
        e
    }

    fn poll_timeout(&self) -> Option<Time> {
        shell::deadline(self.left, || self.deadlines())
    }

    fn node_id(&self) -> NodeId {
        self.me
    }

    fn guarantees(&self) -> Guarantees {
        super::guarantees(self.stored)
    }

    fn info(&self) -> GroupInfo {
        let origin = match (&self.snd, &self.rcv) {
            (Some(_), _) => Some(self.me),
            (_, Some(r)) => r.origin,
            _ => None,
        };
        GroupInfo {
            view: u64::from(origin.is_some()),
            coordinator: origin,
            buffered_msgs: self.ap.as_ref().map_or(0, |a| a.cache.in_memory()),
            buffer_capacity_msgs: self.cfg.cache_size_pkts,
            ..shell::info(
                self.me,
                Vec::new(),
                self.guarantees(),
                self.max_datagram_bytes,
            )
        }
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn engine_counters(&self) -> Vec<(&'static str, u64)> {
        let e = &self.ext;
        let (level, _, _) = self.hierarchy();
        let mut v = vec![
            ("retx_unicast", e.retx_unicast),
            ("retx_multicast", e.retx_multicast),
            ("retx_scoped", e.retx_scoped),
            ("acks_received", e.acks_received),
            ("txnow_sent", e.txnow_sent),
            ("txnow_received", e.txnow_received),
            ("children_silent", e.children_silent),
            ("children_stalled", e.children_stalled),
            ("children_refused", e.children_refused),
            ("children_done", e.children_done),
            ("children_left", e.children_left),
            ("gone_sent", e.gone_sent),
            ("lost", e.lost),
            ("ap_changes", e.ap_changes),
            ("beyond_window", e.beyond_window),
            ("adverts_sent", e.adverts_sent),
            ("rtt_samples", e.rtt_samples),
            ("not_from_origin", e.not_from_origin),
            ("status_sent", e.status_sent),
            ("level", u64::from(level)),
        ];
        if let Some(s) = &self.snd {
            v.push(("slow_starts", s.slow_starts));
            v.push(("swin_lb", s.swin_lb));
            v.push(("send_next", s.send_next));
            v.push(("cong_win", s.cong_win.get() as u64));
        }
        if let Some(ap) = &self.ap {
            v.push(("children", ap.children.len() as u64));
            v.push(("cache_in_memory", ap.cache.in_memory() as u64));
            v.push(("cache_spilled", ap.cache.spilled));
            v.push(("cache_evicted", ap.cache.evicted));
            v.push(("store_reads", ap.cache.store_reads));
        }
        if let Some(r) = &self.rcv {
            v.push(("ap", r.ap.map_or(u64::MAX, |a| u64::from(a.0))));
            v.push(("recv_l", r.win.l));
        }
        v
    }

    fn can_submit(&self) -> bool {
        match (&self.snd, &self.ap) {
            (Some(s), Some(ap)) => {
                !self.left
                    && !s.leaving
                    && s.next_seq < s.swin_lb + self.cfg.send_window_pkts as u64
                    && ap.cache.can_push(s.swin_lb)
                    && !self.events.is_full()
            }
            _ => false,
        }
    }

    fn describe(&self) -> String {
        let mut s = format!("tree {:?} {}", self.entity, self.me);
        if let Some(x) = &self.snd {
            s += &format!(
                " swin_lb={} send_next={} next_seq={} cong_win={} slow_starts={} eof={:?}",
                x.swin_lb,
                x.send_next,
                x.next_seq,
                x.cong_win.get(),
                x.slow_starts,
                x.eof
            );
        }
        if let Some(r) = &self.rcv {
            s += &format!(
                " L={} high={} eof={:?} ap={:?} connected={} done={}",
                r.win.l, r.high, r.eof, r.ap, r.connected, r.done
            );
        }
        if let Some(a) = &self.ap {
            s += &format!(
                " children={} retx={} active={} cache={}/{}",
                a.children.len(),
                a.retx.len(),
                a.active,
                a.cache.in_memory(),
                self.cfg.cache_size_pkts
            );
        }
        s
    }
}

impl Tree {
    /// The earliest of the timers that run.
    fn deadlines(&self) -> Option<Time> {
        let mut d = Deadlines::new();
        if self.sender_wants_tick() {
            d.at("T_send", self.snd.as_ref().map(|s| s.next_send));
        }
        if let Some(ap) = &self.ap {
            d.at("T_retx", ap.next_retx);
            d.at("T_dally", ap.dally_until);
        }
        if self.advertising() {
            d.at("T_sap", self.ap.as_ref().map(|a| a.next_sap));
        }
        if self.receiver_active() && self.ack_news() {
            let r = self.rcv.as_ref().expect("receiver_active");
            let ack = match (r.txnow, r.last_txnow) {
                (true, Some(t)) => r.next_ack.min(t + self.t_ack() / 2),
                (true, None) => Time::ZERO,
                _ => r.next_ack,
            };
            d.at("T_ack", Some(ack));
            d.at("T_rtt", Some(r.next_rtt));
        } else if self.receiver_active() && self.ack_repeat_due() {
            d.at("T_ack", self.rcv.as_ref().map(|r| r.next_repeat));
        }
        d.earliest()
    }

    fn resume_delivery(&mut self) {
        if self.rcv.is_some() {
            self.deliver(self.now);
        }
    }

    fn txnow_due(&self, now: Time) -> bool {
        let Some(r) = &self.rcv else { return false };
        r.txnow && r.last_txnow.is_none_or(|t| now >= t + self.t_ack() / 2)
    }
}
