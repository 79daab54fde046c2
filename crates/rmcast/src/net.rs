//! Socket setup. Multicast here follows docs/ARCHITECTURE.md: traffic stays on the configured
//! interface (127.0.0.1 by default) with TTL 0 unless configured otherwise, and a group's
//! multicast socket is bound to the group address, so it does not receive other groups that
//! share the port (the Linux `IP_MULTICAST_ALL` pitfall).

use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use tracing::debug;

/// Ask for `bytes` of send and receive buffer. The kernel may grant less (`net.core.rmem_max`);
/// that is logged, not fatal: the protocol recovers losses, only more slowly.
fn set_buffers(sock: &Socket, bytes: usize) {
    if let Err(e) = sock.set_recv_buffer_size(bytes) {
        debug!("SO_RCVBUF {bytes}: {e}");
    }
    if let Err(e) = sock.set_send_buffer_size(bytes) {
        debug!("SO_SNDBUF {bytes}: {e}");
    }
    debug!(
        rcvbuf = sock.recv_buffer_size().unwrap_or(0),
        sndbuf = sock.send_buffer_size().unwrap_or(0),
        "socket buffers"
    );
}

/// The node's unicast socket: it receives point-to-point traffic and sends everything,
/// multicast included, so that every datagram's source address is the node's unicast address
/// (peers learn where to answer from it).
pub(crate) fn unicast_socket(
    interface: Ipv4Addr,
    port: u16,
    ttl: u32,
    buffer_bytes: usize,
) -> io::Result<UdpSocket> {
    let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    set_buffers(&sock, buffer_bytes);
    sock.set_multicast_if_v4(&interface)?;
    sock.set_multicast_ttl_v4(ttl)?;
    // Other members on this host (and other nodes in this process) must see our multicast.
    sock.set_multicast_loop_v4(true)?;
    sock.set_nonblocking(true)?;
    enable_recv_ttl(&sock);
    sock.bind(&SocketAddr::V4(SocketAddrV4::new(interface, port)).into())?;
    Ok(sock.into())
}

/// Ask the kernel for each datagram's IP time-to-live (`IP_RECVTTL`): RMTP's receivers choose
/// the nearest designated receiver by it. Where the option is missing, engines get no TTL.
pub(crate) fn enable_recv_ttl(sock: &impl std::os::fd::AsRawFd) {
    #[cfg(target_os = "linux")]
    {
        let on: libc::c_int = 1;
        // SAFETY: a valid socket and an int option of the size given.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_RECVTTL,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            debug!("IP_RECVTTL: {}", io::Error::last_os_error());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = sock;
}

/// A socket that receives the multicast traffic of one group.
pub(crate) fn multicast_socket(
    group: SocketAddrV4,
    interface: Ipv4Addr,
    buffer_bytes: usize,
) -> io::Result<UdpSocket> {
    let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    // Several members of a group may live on one host: all bind the same address and port.
    sock.set_reuse_address(true)?;
    set_buffers(&sock, buffer_bytes);
    sock.set_nonblocking(true)?;
    enable_recv_ttl(&sock);
    // Bound to the group address, the socket gets this group's datagrams only.
    sock.bind(&SocketAddr::V4(group).into())?;
    // Belt and braces for the same pitfall, where the option exists.
    #[cfg(target_os = "linux")]
    if let Err(e) = sock.set_multicast_all_v4(false) {
        debug!("IP_MULTICAST_ALL: {e}");
    }
    sock.join_multicast_v4(group.ip(), &interface)?;
    Ok(sock.into())
}

/// IPv4 and UDP headers: what a datagram adds to its payload on the wire.
const IP_UDP_HEADERS: usize = 20 + 8;

/// The largest UDP payload that leaves `interface` in one IP packet: its MTU less the IPv4 and
/// UDP headers (loopback: 65536 → the UDP maximum, 65507; Ethernet: 1500 → 1472). Larger
/// datagrams would be fragmented by IP, and one lost fragment loses the whole datagram.
/// `fallback` when the interface or its MTU cannot be found (an address that is not local, a
/// system without `/sys/class/net`).
pub fn path_datagram_bytes(interface: Ipv4Addr, fallback: usize) -> usize {
    interface_mtu(interface)
        .map(|mtu| {
            mtu.saturating_sub(IP_UDP_HEADERS)
                .clamp(crate::MIN_DATAGRAM_BYTES, crate::MAX_DATAGRAM_BYTES)
        })
        .unwrap_or(fallback)
}

/// The MTU of the interface that holds `addr` (for 0.0.0.0, the smallest MTU of the interfaces
/// that are up, since traffic may leave by any of them).
#[cfg(target_os = "linux")]
fn interface_mtu(addr: Ipv4Addr) -> Option<usize> {
    let mtu = |name: &str| -> Option<usize> {
        std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let mut found: Option<usize> = None;
    for (name, a) in ipv4_interfaces() {
        if a == addr || (addr.is_unspecified() && !a.is_loopback()) {
            let m = mtu(&name)?;
            found = Some(found.map_or(m, |f| f.min(m)));
        }
    }
    found
}

#[cfg(not(target_os = "linux"))]
fn interface_mtu(_addr: Ipv4Addr) -> Option<usize> {
    None
}

/// (name, IPv4 address) of every interface that is up, from `getifaddrs(3)`.
#[cfg(target_os = "linux")]
fn ipv4_interfaces() -> Vec<(String, Ipv4Addr)> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we only read and then free exactly once.
    unsafe {
        if libc::getifaddrs(&mut head) != 0 {
            return out;
        }
        let mut p = head;
        while !p.is_null() {
            let ifa = &*p;
            let up = ifa.ifa_flags & libc::IFF_UP as libc::c_uint != 0;
            if up
                && !ifa.ifa_addr.is_null()
                && i32::from((*ifa.ifa_addr).sa_family) == libc::AF_INET
            {
                let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                let name = std::ffi::CStr::from_ptr(ifa.ifa_name)
                    .to_string_lossy()
                    .into_owned();
                out.push((name, ip));
            }
            p = ifa.ifa_next;
        }
        libc::freeifaddrs(head);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_carries_the_largest_udp_datagram() {
        // Loopback's MTU is 65536 on Linux; the answer is capped at the UDP maximum.
        #[cfg(target_os = "linux")]
        assert_eq!(
            path_datagram_bytes(Ipv4Addr::LOCALHOST, 1472),
            crate::MAX_DATAGRAM_BYTES
        );
        // An address no interface holds falls back.
        assert_eq!(
            path_datagram_bytes(Ipv4Addr::new(192, 0, 2, 77), 1234),
            1234
        );
    }
}
