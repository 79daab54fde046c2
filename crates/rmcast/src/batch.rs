//! Receiving and sending many datagrams per system call.
//!
//! Why: at small datagrams (an Ethernet MTU) a member reads one datagram per message, and one
//! `recvfrom` per datagram is most of its time. `recvmmsg(2)` fills a batch of buffers in one
//! call. The buffers are allocated once, each large enough for any UDP datagram, so the steady
//! path neither allocates nor copies before the engine sees the bytes. Elsewhere than Linux the
//! batch is filled one `recv_from` at a time. Sending is the mirror image: what one loop turn
//! writes is queued in a [`SendBatch`] and leaves by `sendmmsg(2)`.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Datagrams read per call at most.
pub(crate) const BATCH: usize = 16;

/// Bytes per buffer: any UDP payload over IPv4 or IPv6 (without jumbograms) fits.
const SLOT: usize = 1 << 16;
/// Bytes of ancillary data per receive: room for the `IP_TTL` (or `IPV6_HOPLIMIT`) message,
/// the `UDP_GRO` one and the `SO_RXQ_OVFL` one (24 bytes each).
const CONTROL: usize = 96;

/// A batch of receive buffers and what the last call put in them.
///
/// With UDP generic receive offload on the socket ([`crate::net::enable_gro`]) one receive may
/// hold a run of datagrams end to end (a sender's segmented send, or datagrams of one flow the
/// kernel coalesced), all of the size its `UDP_GRO` control message gives but the last, which
/// may be shorter. [`RecvBatch::datagrams`] cuts each receive into its datagrams, so that
/// everything after it sees one datagram at a time, as without the offload. A run is at most
/// one UDP payload (the kernel stops coalescing before 64 KiB), so the 64 KiB slots that any
/// single datagram needs hold it too: the offload costs no memory.
pub(crate) struct RecvBatch {
    /// `BATCH` buffers of `SLOT` bytes, end to end.
    bufs: Vec<u8>,
    lens: [usize; BATCH],
    /// The size of each datagram in a receive but the last (the receive's length when it
    /// holds one datagram).
    segs: [usize; BATCH],
    from: [SocketAddr; BATCH],
    /// The IP time-to-live each receive arrived with, where the socket reports it.
    ttls: [Option<u8>; BATCH],
    /// Ancillary data buffers (u64s, so that they are aligned as `cmsghdr` needs).
    control: Vec<u64>,
    /// The socket's count of datagrams dropped for want of buffer, as the last receive that
    /// carried one gave it (`SO_RXQ_OVFL`).
    drops: Option<u32>,
}

/// One datagram of the last [`RecvBatch::recv`]: the receive it came in and its bytes there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Datagram {
    slot: usize,
    start: usize,
    end: usize,
}

/// The datagrams of one receive, in order ([`RecvBatch::datagrams`]).
pub(crate) struct Datagrams {
    slot: usize,
    at: usize,
    len: usize,
    seg: usize,
    /// Whether an empty receive has been given out (an empty datagram is still one).
    done: bool,
}

impl Iterator for Datagrams {
    type Item = Datagram;

    fn next(&mut self) -> Option<Datagram> {
        if self.done {
            return None;
        }
        let end = (self.at + self.seg).min(self.len);
        let d = Datagram {
            slot: self.slot,
            start: self.at,
            end,
        };
        self.at = end;
        self.done = self.at >= self.len;
        Some(d)
    }
}

impl RecvBatch {
    /// Buffers for [`BATCH`] datagrams (1 MiB, allocated once per node).
    pub(crate) fn new() -> RecvBatch {
        RecvBatch {
            bufs: vec![0; BATCH * SLOT],
            lens: [0; BATCH],
            segs: [0; BATCH],
            from: [SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)); BATCH],
            ttls: [None; BATCH],
            control: vec![0; BATCH * CONTROL / 8],
            drops: None,
        }
    }

    /// How many datagrams the kernel has dropped so far on the socket of the last
    /// [`RecvBatch::recv`] for want of receive buffer, when it said (it says so only once it
    /// has dropped some, with the datagrams that follow; [`crate::net::enable_drop_count`]).
    pub(crate) fn drops(&self) -> Option<u32> {
        self.drops
    }

    /// The datagrams in receive `i` of the last [`RecvBatch::recv`] (one, unless the kernel
    /// delivered a run at once).
    pub(crate) fn datagrams(&self, i: usize) -> Datagrams {
        Datagrams {
            slot: i,
            at: 0,
            len: self.lens[i],
            // A zero size never comes from the kernel; read it as one datagram, not a loop.
            seg: if self.segs[i] == 0 {
                self.lens[i].max(1)
            } else {
                self.segs[i]
            },
            done: false,
        }
    }

    /// The IP time-to-live datagram `d` arrived with, if the socket reports it
    /// ([`crate::net::enable_recv_ttl`]).
    pub(crate) fn ttl(&self, d: Datagram) -> Option<u8> {
        self.ttls[d.slot]
    }

    /// Datagram `d` and its source.
    pub(crate) fn get(&self, d: Datagram) -> (&[u8], SocketAddr) {
        let base = d.slot * SLOT;
        (&self.bufs[base + d.start..base + d.end], self.from[d.slot])
    }

    /// Datagram `d`, to decrypt in place.
    pub(crate) fn get_mut(&mut self, d: Datagram) -> &mut [u8] {
        let base = d.slot * SLOT;
        &mut self.bufs[base + d.start..base + d.end]
    }

    /// Read up to [`BATCH`] datagrams from non-blocking `sock` without waiting; returns how
    /// many (`WouldBlock` when there were none).
    #[cfg(target_os = "linux")]
    pub(crate) fn recv(&mut self, sock: &mio::net::UdpSocket) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        // SAFETY: all-zero is a valid value of these plain C structs.
        let mut names: [libc::sockaddr_storage; BATCH] = unsafe { std::mem::zeroed() };
        let mut iovs: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for (i, ((iov, msg), name)) in iovs
            .iter_mut()
            .zip(msgs.iter_mut())
            .zip(names.iter_mut())
            .enumerate()
        {
            iov.iov_base = self.bufs[i * SLOT..].as_mut_ptr().cast();
            iov.iov_len = SLOT;
            msg.msg_hdr.msg_name = (name as *mut libc::sockaddr_storage).cast();
            msg.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
            msg.msg_hdr.msg_iov = iov;
            msg.msg_hdr.msg_iovlen = 1;
            msg.msg_hdr.msg_control = self.control[i * CONTROL / 8..].as_mut_ptr().cast();
            msg.msg_hdr.msg_controllen = CONTROL as _;
        }
        // SAFETY: every header points at a live buffer of `SLOT` bytes and a live address
        // buffer of the size it states; the kernel writes at most that much into each.
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        self.drops = None;
        for i in 0..n {
            let (ttl, gro, drops) = received_control(&msgs[i].msg_hdr);
            // A running count: the last receive's is the latest.
            self.drops = drops.or(self.drops);
            let mut len = (msgs[i].msg_len as usize).min(SLOT);
            let seg = gro.filter(|&s| s > 0 && s < len).unwrap_or(len);
            if msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0 && seg < len {
                // A run longer than the slot (never seen: the kernel keeps runs under 64 KiB):
                // keep its whole datagrams, not a cut one.
                len -= len % seg;
            }
            self.lens[i] = len;
            self.segs[i] = seg;
            self.from[i] = decode_addr(&names[i]);
            self.ttls[i] = ttl;
        }
        Ok(n)
    }

    /// Read one datagram (systems without `recvmmsg`).
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn recv(&mut self, sock: &mio::net::UdpSocket) -> io::Result<usize> {
        let (n, from) = sock.recv_from(&mut self.bufs[..SLOT])?;
        self.lens[0] = n;
        self.segs[0] = n;
        self.from[0] = from;
        self.ttls[0] = None;
        self.drops = None;
        Ok(1)
    }
}

/// A writer for [`SendBatch::push_with`] (and the runtime's other `write` arguments) that
/// writes a copy of `data`.
pub(crate) fn copy_of(data: &[u8]) -> impl FnOnce(&mut Vec<u8>) -> bool + '_ {
    move |b| {
        b.clear();
        b.extend_from_slice(data);
        true
    }
}

/// Datagrams sent per call at most.
pub(crate) const SEND_BATCH: usize = 32;

/// Bytes one segmented send carries at most: what one UDP datagram could (the kernel's bound).
const GSO_MAX_BYTES: usize = crate::MAX_DATAGRAM_BYTES;

/// Datagrams queued to be sent together, in order. The buffers are kept and reused, so the
/// steady path does not allocate.
///
/// Consecutive datagrams of one size to one destination (the last of a run may be shorter)
/// leave in one segmented send where the kernel takes it (UDP GSO, `UDP_SEGMENT`): the run
/// crosses the stack, and a veth pair or bridge, as one packet and is cut into its datagrams
/// at each receiving socket (or handed whole to one with receive offload, and cut apart by its
/// [`RecvBatch`]), so the wire and the engines see exactly what one send each would have
/// made, at a fraction of the cost per datagram (a 1 KiB message is a datagram on an
/// Ethernet-sized path). The first segmented send the kernel refuses turns it off for good.
pub(crate) struct SendBatch {
    bufs: Vec<Vec<u8>>,
    to: Vec<SocketAddr>,
    len: usize,
    /// The largest datagram sent segmented: the path's datagram size (a segment must fit
    /// the interface's MTU); 0, never.
    gso_max: usize,
}

impl SendBatch {
    /// An empty batch that sends one datagram per message header.
    #[cfg(test)]
    pub(crate) fn new() -> SendBatch {
        SendBatch::with_gso(0)
    }

    /// An empty batch that sends runs of datagrams of at most `gso_max` bytes segmented
    /// (0: never).
    pub(crate) fn with_gso(gso_max: usize) -> SendBatch {
        SendBatch {
            bufs: (0..SEND_BATCH).map(|_| Vec::new()).collect(),
            to: Vec::with_capacity(SEND_BATCH),
            len: 0,
            gso_max: if cfg!(target_os = "linux") {
                gso_max
            } else {
                0
            },
        }
    }

    /// Whether runs are still sent segmented.
    #[cfg(test)]
    pub(crate) fn gso(&self) -> bool {
        self.gso_max > 0
    }

    /// How many datagrams from `first` (at most `left`) go in one send: a run of one size to
    /// one destination, the last possibly shorter, within the kernel's bound.
    fn run_from(&self, first: usize, left: usize) -> usize {
        let seg = self.bufs[first].len();
        if seg == 0 || seg > self.gso_max {
            return 1;
        }
        let (mut k, mut total) = (1, seg);
        while k < left {
            let l = self.bufs[first + k].len();
            if self.to[first + k] != self.to[first]
                || l == 0
                || l > seg
                || total + l > GSO_MAX_BYTES
            {
                break;
            }
            total += l;
            k += 1;
            if l < seg {
                break;
            }
        }
        k
    }

    /// Datagrams queued.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether no more fits.
    pub(crate) fn is_full(&self) -> bool {
        self.len == SEND_BATCH
    }

    /// Queue for `to` the datagram that `write` writes into the batch's next buffer (which
    /// holds an earlier datagram: `write` clears it), so that a datagram made on its way out (a
    /// secure group's, sealed) is not copied once more. Nothing is queued if `write` returns
    /// false. The caller sends the batch when it is full.
    pub(crate) fn push_with(&mut self, to: SocketAddr, write: impl FnOnce(&mut Vec<u8>) -> bool) {
        assert!(
            !self.is_full(),
            "a full batch is sent before more is queued"
        );
        if !write(&mut self.bufs[self.len]) {
            return;
        }
        self.to.truncate(self.len);
        self.to.push(to);
        self.len += 1;
    }

    /// Queued datagram `i` and its destination.
    pub(crate) fn get(&self, i: usize) -> (&[u8], SocketAddr) {
        (&self.bufs[i], self.to[i])
    }

    /// Forget what is queued (the buffers stay).
    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.to.clear();
    }

    /// Send the queued datagrams from `start` on; returns how many left (at least one), or the
    /// error of the first that could not.
    #[cfg(target_os = "linux")]
    pub(crate) fn send_from(
        &mut self,
        sock: &mio::net::UdpSocket,
        start: usize,
    ) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        let n = self.len - start;
        assert!(n > 0);
        // SAFETY: all-zero is a valid value of these plain C structs.
        let mut names: [libc::sockaddr_storage; SEND_BATCH] = unsafe { std::mem::zeroed() };
        let mut iovs: [libc::iovec; SEND_BATCH] = unsafe { std::mem::zeroed() };
        let mut msgs: [libc::mmsghdr; SEND_BATCH] = unsafe { std::mem::zeroed() };
        // One `UDP_SEGMENT` message per header (u64s: aligned as `cmsghdr` needs).
        let mut controls = [[0u64; 4]; SEND_BATCH];
        // Datagrams in each header.
        let mut counts = [0usize; SEND_BATCH];
        let (mut m, mut i) = (0, 0);
        while i < n {
            let k = self.run_from(start + i, n - i);
            for x in 0..k {
                let b = &self.bufs[start + i + x];
                iovs[i + x].iov_base = b.as_ptr() as *mut libc::c_void;
                iovs[i + x].iov_len = b.len();
            }
            let len = encode_addr(self.to[start + i], &mut names[m]);
            let h = &mut msgs[m].msg_hdr;
            h.msg_name = (&mut names[m] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = len;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = k;
            if k > 1 {
                let seg = self.bufs[start + i].len() as u16;
                // SAFETY: the control buffer is 32 bytes, aligned for `cmsghdr`, and
                // CMSG_SPACE of a u16 is 24; the CMSG macros stay within the length set here.
                unsafe {
                    let space = libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) as usize;
                    debug_assert!(space <= std::mem::size_of_val(&controls[m]));
                    h.msg_control = controls[m].as_mut_ptr().cast();
                    h.msg_controllen = space;
                    let c = libc::CMSG_FIRSTHDR(h);
                    (*c).cmsg_level = libc::SOL_UDP;
                    // `UDP_SEGMENT`: one send, a run of datagrams of one size (Linux 4.18).
                    (*c).cmsg_type = libc::UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as usize;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
                }
            }
            counts[m] = k;
            m += 1;
            i += k;
        }
        // SAFETY: every header points at live buffers of the lengths it states, at a live
        // address of the length it states and at a live control buffer; the kernel only reads
        // them.
        let sent = unsafe {
            libc::sendmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                m as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if sent < 0 {
            let e = io::Error::last_os_error();
            if counts[0] > 1 && matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL)) {
                // The kernel or the device does not segment (no checksum offload: EIO; a
                // segment larger than the route's MTU: EINVAL): one header a datagram from
                // now on, this batch included.
                tracing::info!(error = %e, "UDP segmentation offload refused; sending datagrams one by one");
                self.gso_max = 0;
                return self.send_from(sock, start);
            }
            return Err(e);
        }
        Ok(counts[..sent as usize].iter().sum())
    }

    /// Send one datagram (systems without `sendmmsg`).
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn send_from(
        &mut self,
        sock: &mio::net::UdpSocket,
        start: usize,
    ) -> io::Result<usize> {
        sock.send_to(&self.bufs[start], self.to[start]).map(|_| 1)
    }
}

/// What the kernel wrote in a received message's ancillary data: the `IP_TTL` (IPv4) or
/// `IPV6_HOPLIMIT` (IPv6) value, the `UDP_GRO` segment size of a receive that holds a run
/// of datagrams, and the socket's count of datagrams dropped for want of buffer
/// (`SO_RXQ_OVFL`, a u32).
#[cfg(target_os = "linux")]
fn received_control(hdr: &libc::msghdr) -> (Option<u8>, Option<usize>, Option<u32>) {
    let (mut ttl, mut seg, mut drops) = (None, None, None);
    // SAFETY: the kernel filled the control buffer `hdr` points at and set its length; the
    // CMSG macros walk within it, and each value read is the int the kernel writes for its
    // kind.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            let (level, kind) = ((*c).cmsg_level, (*c).cmsg_type);
            if (level == libc::IPPROTO_IP && kind == libc::IP_TTL)
                || (level == libc::IPPROTO_IPV6 && kind == libc::IPV6_HOPLIMIT)
            {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                ttl = u8::try_from(v).ok();
            } else if level == libc::SOL_UDP && kind == libc::UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                seg = usize::try_from(v).ok();
            } else if level == libc::SOL_SOCKET && kind == libc::SO_RXQ_OVFL {
                drops = Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<u32>()));
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    (ttl, seg, drops)
}

/// Write `addr` into `out` as the kernel reads it (`sockaddr_in` or `sockaddr_in6`); returns
/// the length to pass with it.
#[cfg(target_os = "linux")]
fn encode_addr(addr: SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is larger than and aligned for every sockaddr type.
            let sin =
                unsafe { &mut *(out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above.
            let sin6 =
                unsafe { &mut *(out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            // As the standard library and socket2 convert it: as is, not byte-swapped.
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// The source address the kernel wrote; any other family than IPv4 and IPv6 reads as
/// 0.0.0.0:0 (never one of ours, never a peer's).
#[cfg(target_os = "linux")]
fn decode_addr(name: &libc::sockaddr_storage) -> SocketAddr {
    match i32::from(name.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin =
                unsafe { &*(name as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 =
                unsafe { &*(name as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            ))
        }
        _ => SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Read `n` datagrams from `sock` (waiting at most 5 s), with their sources.
    fn read_n(sock: &mio::net::UdpSocket, n: usize) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < n && std::time::Instant::now() < deadline {
            match sock.recv_from(&mut buf) {
                Ok((len, _)) => got.push(buf[..len].to_vec()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                Err(e) => panic!("{e}"),
            }
        }
        got
    }

    /// The datagrams of the first `n` receives of `batch`, each with its source and TTL.
    fn received(batch: &RecvBatch, n: usize) -> Vec<(Vec<u8>, SocketAddr, Option<u8>)> {
        (0..n)
            .flat_map(|i| batch.datagrams(i))
            .map(|d| {
                let (data, from) = batch.get(d);
                (data.to_vec(), from, batch.ttl(d))
            })
            .collect()
    }

    /// Read from `sock` into `batch` until `n` datagrams came (waiting at most 5 s); returns
    /// them with their sources, and how many receives held more than one.
    fn read_batched(
        batch: &mut RecvBatch,
        sock: &mio::net::UdpSocket,
        n: usize,
    ) -> (Vec<(Vec<u8>, SocketAddr)>, usize) {
        let (mut got, mut runs) = (Vec::new(), 0);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < n && std::time::Instant::now() < deadline {
            match batch.recv(sock) {
                Ok(k) => {
                    for i in 0..k {
                        runs += usize::from(batch.datagrams(i).count() > 1);
                    }
                    got.extend(received(batch, k).into_iter().map(|(d, f, _)| (d, f)));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                Err(e) => panic!("{e}"),
            }
        }
        (got, runs)
    }

    /// A receive is cut at its segment size, the last datagram shorter or not; an empty
    /// datagram is still one; a receive without a size is one datagram.
    #[test]
    fn a_receive_is_cut_into_datagrams_of_its_segment_size() {
        let mut b = RecvBatch::new();
        let cuts = |b: &RecvBatch, i| -> Vec<(usize, usize)> {
            b.datagrams(i).map(|d| (d.start, d.end)).collect()
        };
        (b.lens[0], b.segs[0]) = (2500, 1000);
        assert_eq!(cuts(&b, 0), [(0, 1000), (1000, 2000), (2000, 2500)]);
        (b.lens[1], b.segs[1]) = (3000, 1000);
        assert_eq!(cuts(&b, 1), [(0, 1000), (1000, 2000), (2000, 3000)]);
        (b.lens[2], b.segs[2]) = (0, 0);
        assert_eq!(cuts(&b, 2), [(0, 0)]);
        (b.lens[3], b.segs[3]) = (700, 0);
        assert_eq!(cuts(&b, 3), [(0, 700)]);
        (b.lens[4], b.segs[4]) = (700, 700);
        assert_eq!(cuts(&b, 4), [(0, 700)]);
        assert!(b.datagrams(1).all(|d| d.slot == 1));
    }

    /// A run sent segmented reaches a socket with receive offload in one receive, and is cut
    /// back into its datagrams there, the shorter last one included; unicast.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_segmented_run_arrives_as_its_datagrams_at_a_gro_socket() {
        let rx = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        assert!(crate::net::enable_gro(&rx), "this kernel takes UDP_GRO");
        crate::net::enable_recv_ttl(&rx, false);
        let tx = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let to = rx.local_addr().unwrap();
        let mut out = SendBatch::with_gso(1472);
        // Two runs: 20 of 1,200 bytes and a 500-byte last one; then 6 of 900 bytes.
        let mut want: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 1200]).collect();
        want.push(vec![20; 500]);
        want.extend((21..27u8).map(|i| vec![i; 900]));
        for d in &want {
            out.push_with(to, copy_of(d));
        }
        let mut sent = 0;
        while sent < out.len() {
            sent += out.send_from(&tx, sent).unwrap();
        }
        assert!(out.gso(), "the kernel took the segmented sends");
        let mut batch = RecvBatch::new();
        let (got, runs) = read_batched(&mut batch, &rx, want.len());
        let from = tx.local_addr().unwrap();
        assert_eq!(got, want.into_iter().map(|d| (d, from)).collect::<Vec<_>>());
        assert_eq!(runs, 2, "each run came in one receive");
    }

    /// The same over IPv6 on `::1`, where the host has it.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_segmented_ipv6_run_arrives_as_its_datagrams_at_a_gro_socket() {
        let Ok(rx) = mio::net::UdpSocket::bind("[::1]:0".parse().unwrap()) else {
            eprintln!("skipped: no IPv6 loopback here");
            return;
        };
        assert!(crate::net::enable_gro(&rx), "this kernel takes UDP_GRO");
        crate::net::enable_recv_ttl(&rx, true);
        let tx = mio::net::UdpSocket::bind("[::1]:0".parse().unwrap()).unwrap();
        let to = rx.local_addr().unwrap();
        let mut out = SendBatch::with_gso(1452);
        let mut want: Vec<Vec<u8>> = (0..12u8).map(|i| vec![i; 1452]).collect();
        want.push(vec![12; 3]);
        for d in &want {
            out.push_with(to, copy_of(d));
        }
        let mut sent = 0;
        while sent < out.len() {
            sent += out.send_from(&tx, sent).unwrap();
        }
        assert!(out.gso(), "the kernel took the segmented send");
        let mut batch = RecvBatch::new();
        let (got, runs) = read_batched(&mut batch, &rx, want.len());
        let from = tx.local_addr().unwrap();
        assert_eq!(got, want.into_iter().map(|d| (d, from)).collect::<Vec<_>>());
        assert_eq!(runs, 1);
    }

    /// The same to a multicast group with two member sockets on this host: each gets the run
    /// whole and cuts it into the same datagrams.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_segmented_multicast_run_arrives_as_its_datagrams_at_each_gro_member() {
        let lo = std::net::IpAddr::V4(Ipv4Addr::LOCALHOST);
        // A group of this process's own (others may run the same test at once).
        let port = 20_000 + (std::process::id() % 20_000) as u16;
        let group = SocketAddr::from(([239, 192, 77, 7], port));
        let members: Vec<mio::net::UdpSocket> = (0..2)
            .map(|_| {
                let s = crate::net::multicast_socket(group, lo, None, 1 << 20, true).unwrap();
                mio::net::UdpSocket::from_std(s)
            })
            .collect();
        let tx = crate::net::unicast_socket(lo, None, 0, 0, 1 << 20, false).unwrap();
        let tx = mio::net::UdpSocket::from_std(tx);
        let mut out = SendBatch::with_gso(1472);
        let mut want: Vec<Vec<u8>> = (0..15u8).map(|i| vec![i; 1400]).collect();
        want.push(vec![15; 1]);
        for d in &want {
            out.push_with(group, copy_of(d));
        }
        let mut sent = 0;
        while sent < out.len() {
            sent += out.send_from(&tx, sent).unwrap();
        }
        assert!(out.gso(), "the kernel took the segmented send");
        let from = tx.local_addr().unwrap();
        let want: Vec<_> = want.into_iter().map(|d| (d, from)).collect();
        let mut batch = RecvBatch::new();
        for m in &members {
            let (got, runs) = read_batched(&mut batch, m, want.len());
            assert_eq!(got, want);
            assert_eq!(runs, 1);
        }
    }

    /// Where receive offload is refused (`UDP_GRO` on a socket that is not UDP), the refusal
    /// is reported, not fatal; and a UDP socket without it gets a segmented run the old way,
    /// one datagram a receive, cut by the kernel.
    #[cfg(target_os = "linux")]
    #[test]
    fn without_receive_offload_a_run_arrives_one_datagram_a_receive() {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(!crate::net::enable_gro(&tcp), "refused on a TCP socket");
        let rx = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let tx = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let to = rx.local_addr().unwrap();
        let mut out = SendBatch::with_gso(1472);
        let mut want: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 1000]).collect();
        want.push(vec![8; 10]);
        for d in &want {
            out.push_with(to, copy_of(d));
        }
        let mut sent = 0;
        while sent < out.len() {
            sent += out.send_from(&tx, sent).unwrap();
        }
        assert!(out.gso());
        let mut batch = RecvBatch::new();
        let (got, runs) = read_batched(&mut batch, &rx, want.len());
        let from = tx.local_addr().unwrap();
        assert_eq!(got, want.into_iter().map(|d| (d, from)).collect::<Vec<_>>());
        assert_eq!(runs, 0);
    }

    /// Runs of one size to one destination leave segmented, and arrive as the datagrams they
    /// were, in order, whatever ends a run (another size, another destination, a shorter last
    /// one).
    #[cfg(target_os = "linux")]
    #[test]
    fn runs_leave_segmented_and_arrive_as_their_datagrams() {
        let a = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let b = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        socket2::SockRef::from(&a)
            .set_recv_buffer_size(1 << 20)
            .unwrap();
        let tx = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let (ta, tb) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let mut batch = SendBatch::with_gso(1472);
        // 10 of 1,000 bytes to a, a shorter one that ends that run, 2 to b, then 12 of 1,400
        // to a, 3 of 2,000 (beyond the segment bound: one by one), 4 more of 1,000 to a.
        let mut want_a: Vec<Vec<u8>> = Vec::new();
        let mut want_b: Vec<Vec<u8>> = Vec::new();
        let mut push = |batch: &mut SendBatch, to, d: Vec<u8>| {
            if to == ta {
                want_a.push(d.clone());
            } else {
                want_b.push(d.clone());
            }
            batch.push_with(to, copy_of(&d));
        };
        let mut tag = 0u8;
        let mut next = |len: usize| {
            tag = tag.wrapping_add(1);
            vec![tag; len]
        };
        for _ in 0..10 {
            push(&mut batch, ta, next(1000));
        }
        push(&mut batch, ta, next(300));
        push(&mut batch, tb, next(1000));
        push(&mut batch, tb, next(1000));
        for _ in 0..12 {
            push(&mut batch, ta, next(1400));
        }
        for _ in 0..3 {
            push(&mut batch, ta, next(2000));
        }
        for _ in 0..4 {
            push(&mut batch, ta, next(1000));
        }
        assert_eq!(batch.len(), 32);
        assert_eq!(
            batch.run_from(0, 32),
            11,
            "10 of one size and a shorter last"
        );
        assert_eq!(batch.run_from(11, 21), 2);
        assert_eq!(batch.run_from(13, 19), 12);
        assert_eq!(batch.run_from(25, 7), 1, "larger than a segment may be");
        let mut sent = 0;
        while sent < batch.len() {
            sent += batch.send_from(&tx, sent).unwrap();
        }
        assert_eq!(sent, 32);
        assert!(batch.gso(), "the kernel took the segmented sends");
        assert_eq!(read_n(&a, want_a.len()), want_a);
        assert_eq!(read_n(&b, want_b.len()), want_b);
    }

    /// A segmented send the kernel refuses (here: a socket without UDP checksums, which Linux
    /// never segments) turns segmentation off, and the batch still goes, one by one.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_refused_segmented_send_falls_back_to_one_datagram_a_header() {
        use std::os::fd::AsRawFd;
        let a = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let tx = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let one: libc::c_int = 1;
        // SAFETY: a valid socket and an int option of the size given.
        let r = unsafe {
            libc::setsockopt(
                tx.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_NO_CHECK,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0);
        let to = a.local_addr().unwrap();
        let mut batch = SendBatch::with_gso(1472);
        let want: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 500]).collect();
        for d in &want {
            batch.push_with(to, copy_of(d));
        }
        let mut sent = 0;
        while sent < batch.len() {
            sent += batch.send_from(&tx, sent).unwrap();
        }
        assert!(!batch.gso(), "turned off after the refusal");
        assert_eq!(read_n(&a, 5), want);
    }

    #[test]
    fn sends_a_batch_in_order_to_its_destinations() {
        let a = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let b = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let tx = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let (ta, tb) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let mut batch = SendBatch::new();
        for i in 0..SEND_BATCH {
            let to = if i % 2 == 0 { ta } else { tb };
            batch.push_with(to, copy_of(&vec![i as u8; 100 + i]));
        }
        assert!(batch.is_full());
        let mut sent = 0;
        while sent < batch.len() {
            sent += batch.send_from(&tx, sent).unwrap();
        }
        batch.clear();
        assert_eq!(batch.len(), 0);
        let mut buf = [0u8; 1024];
        for i in 0..SEND_BATCH {
            let sock = if i % 2 == 0 { &a } else { &b };
            let (n, from) = loop {
                match sock.recv_from(&mut buf) {
                    Ok(r) => break r,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(std::time::Duration::from_millis(1))
                    }
                    Err(e) => panic!("{e}"),
                }
            };
            assert_eq!(from, tx.local_addr().unwrap());
            assert_eq!(&buf[..n], &vec![i as u8; 100 + i][..], "datagram {i}");
        }
    }

    #[test]
    fn reads_several_datagrams_in_one_call_with_their_sources() {
        let rx = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        crate::net::enable_recv_ttl(&rx, false);
        let to = rx.local_addr().unwrap();
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        // Each sender's time-to-live is seen at the receiver (loopback takes no hop).
        a.set_ttl(37).unwrap();
        b.set_ttl(5).unwrap();
        a.send_to(b"one", to).unwrap();
        b.send_to(&[7u8; 60_000], to).unwrap();
        a.send_to(b"three", to).unwrap();
        let mut batch = RecvBatch::new();
        let mut got = Vec::new();
        let mut ttls = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < 3 && std::time::Instant::now() < deadline {
            match batch.recv(&rx) {
                Ok(n) => {
                    for (d, from, ttl) in received(&batch, n) {
                        got.push((d, from));
                        ttls.push(ttl);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], (b"one".to_vec(), a.local_addr().unwrap()));
        assert_eq!(got[1], (vec![7u8; 60_000], b.local_addr().unwrap()));
        assert_eq!(got[2], (b"three".to_vec(), a.local_addr().unwrap()));
        #[cfg(target_os = "linux")]
        assert_eq!(ttls, [Some(37), Some(5), Some(37)]);
        assert_eq!(
            batch.recv(&rx).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
    }

    /// One batch serves every socket of a node: a datagram read from a socket that reports no
    /// TTL must not cost the next one read into the same slot from a socket that does.
    #[test]
    fn a_ttl_is_seen_after_a_datagram_without_one_in_the_same_slot() {
        let plain = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let with_ttl = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        crate::net::enable_recv_ttl(&with_ttl, false);
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.set_ttl(9).unwrap();
        let mut batch = RecvBatch::new();
        let mut read_one = |sock: &mio::net::UdpSocket| -> Option<u8> {
            tx.send_to(b"x", sock.local_addr().unwrap()).unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            loop {
                match batch.recv(sock) {
                    Ok(n) => {
                        assert_eq!(n, 1);
                        let d = batch.datagrams(0).next().unwrap();
                        return batch.ttl(d);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        assert!(std::time::Instant::now() < deadline, "nothing came");
                        std::thread::sleep(std::time::Duration::from_millis(1))
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        };
        assert_eq!(read_one(&plain), None);
        #[cfg(target_os = "linux")]
        assert_eq!(read_one(&with_ttl), Some(9));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn socket_addresses_survive_the_c_form_both_ways() {
        let cases: [SocketAddr; 4] = [
            "127.0.0.1:7400".parse().unwrap(),
            "239.192.3.4:65535".parse().unwrap(),
            "[ff18::efc0:304]:7400".parse().unwrap(),
            SocketAddr::V6(SocketAddrV6::new(
                "fe80::1:2".parse().unwrap(),
                1,
                0x000a_bcde,
                3,
            )),
        ];
        for a in cases {
            // SAFETY: all-zero is a valid sockaddr_storage.
            let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            let len = encode_addr(a, &mut st) as usize;
            let want = if a.is_ipv4() {
                std::mem::size_of::<libc::sockaddr_in>()
            } else {
                std::mem::size_of::<libc::sockaddr_in6>()
            };
            assert_eq!(len, want, "{a}");
            assert_eq!(decode_addr(&st), a);
            // What the standard library makes of the same bytes agrees.
            // SAFETY: `st` holds the sockaddr its family names, `len` bytes long.
            let theirs = unsafe { socket2::SockAddr::new(st, len as libc::socklen_t) };
            assert_eq!(theirs.as_socket(), Some(a));
        }
        // An unknown family is nobody's address.
        // SAFETY: as above.
        let st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        assert_eq!(decode_addr(&st), "0.0.0.0:0".parse().unwrap());
    }

    /// IPv6 unicast on `::1` (where the host has it): a batch to two destinations leaves by
    /// `sendmmsg`, and `recvmmsg` gives each datagram's IPv6 source and hop limit.
    #[test]
    fn ipv6_datagrams_go_out_and_come_in_with_source_and_hop_limit() {
        let Ok(rx) = mio::net::UdpSocket::bind("[::1]:0".parse().unwrap()) else {
            eprintln!("skipped: no IPv6 loopback here");
            return;
        };
        crate::net::enable_recv_ttl(&rx, true);
        let tx = mio::net::UdpSocket::bind("[::1]:0".parse().unwrap()).unwrap();
        socket2::SockRef::from(&tx).set_unicast_hops_v6(13).unwrap();
        let to = rx.local_addr().unwrap();
        let mut out = SendBatch::new();
        out.push_with(to, copy_of(b"first"));
        out.push_with(to, copy_of(&[3u8; 40_000]));
        let mut sent = 0;
        while sent < out.len() {
            sent += out.send_from(&tx, sent).unwrap();
        }
        let mut batch = RecvBatch::new();
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < 2 && std::time::Instant::now() < deadline {
            match batch.recv(&rx) {
                Ok(n) => {
                    got.extend(received(&batch, n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                Err(e) => panic!("{e}"),
            }
        }
        let from = tx.local_addr().unwrap();
        let ttl = if cfg!(target_os = "linux") {
            Some(13)
        } else {
            None
        };
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], (b"first".to_vec(), from, ttl));
        assert_eq!(got[1], (vec![3u8; 40_000], from, ttl));
    }
}
