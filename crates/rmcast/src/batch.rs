//! Receiving many datagrams per system call.
//!
//! Why: at small datagrams (an Ethernet MTU) a member reads one datagram per message, and one
//! `recvfrom` per datagram is most of its time. `recvmmsg(2)` fills a batch of buffers in one
//! call. The buffers are allocated once, each large enough for any UDP datagram, so the steady
//! path neither allocates nor copies before the engine sees the bytes. Elsewhere than Linux the
//! batch is filled one `recv_from` at a time.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

/// Datagrams read per call at most.
pub(crate) const BATCH: usize = 16;

/// Bytes per buffer: any UDP payload over IPv4 fits.
const SLOT: usize = 1 << 16;

/// A batch of receive buffers and what the last call put in them.
pub(crate) struct RecvBatch {
    /// `BATCH` buffers of `SLOT` bytes, end to end.
    bufs: Vec<u8>,
    lens: [usize; BATCH],
    from: [SocketAddr; BATCH],
}

impl RecvBatch {
    /// Buffers for [`BATCH`] datagrams (1 MiB, allocated once per node).
    pub(crate) fn new() -> RecvBatch {
        RecvBatch {
            bufs: vec![0; BATCH * SLOT],
            lens: [0; BATCH],
            from: [SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)); BATCH],
        }
    }

    /// Datagram `i` of the last [`RecvBatch::recv`] and its source.
    pub(crate) fn get(&self, i: usize) -> (&[u8], SocketAddr) {
        (&self.bufs[i * SLOT..i * SLOT + self.lens[i]], self.from[i])
    }

    /// Datagram `i` of the last [`RecvBatch::recv`], to decrypt in place.
    pub(crate) fn get_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.bufs[i * SLOT..i * SLOT + self.lens[i]]
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
        for i in 0..n {
            self.lens[i] = (msgs[i].msg_len as usize).min(SLOT);
            self.from[i] = ipv4_source(&names[i]);
        }
        Ok(n)
    }

    /// Read one datagram (systems without `recvmmsg`).
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn recv(&mut self, sock: &mio::net::UdpSocket) -> io::Result<usize> {
        let (n, from) = sock.recv_from(&mut self.bufs[..SLOT])?;
        self.lens[0] = n;
        self.from[0] = from;
        Ok(1)
    }
}

/// The source address the kernel wrote; the runtime is IPv4 only, so anything else reads as
/// 0.0.0.0:0 (never one of ours, never a peer's).
#[cfg(target_os = "linux")]
fn ipv4_source(name: &libc::sockaddr_storage) -> SocketAddr {
    if i32::from(name.ss_family) == libc::AF_INET {
        // SAFETY: the family says the storage holds a sockaddr_in.
        let sin = unsafe { &*(name as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
        SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
            u16::from_be(sin.sin_port),
        ))
    } else {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_several_datagrams_in_one_call_with_their_sources() {
        let rx = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let to = rx.local_addr().unwrap();
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        a.send_to(b"one", to).unwrap();
        b.send_to(&[7u8; 60_000], to).unwrap();
        a.send_to(b"three", to).unwrap();
        let mut batch = RecvBatch::new();
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < 3 && std::time::Instant::now() < deadline {
            match batch.recv(&rx) {
                Ok(n) => {
                    for i in 0..n {
                        let (d, from) = batch.get(i);
                        got.push((d.to_vec(), from));
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
        assert_eq!(
            batch.recv(&rx).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
    }
}
