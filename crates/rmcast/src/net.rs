//! Socket setup. Multicast here follows docs/ARCHITECTURE.md: traffic stays on the configured
//! interface (127.0.0.1 by default) with TTL 0 unless configured otherwise, and a group's
//! multicast socket is bound to the group address, so it does not receive other groups that
//! share the port (the Linux `IP_MULTICAST_ALL` pitfall). IPv6 goes the same way, with the
//! interface named by its index: multicast is sent (`IPV6_MULTICAST_IF`) and joined
//! (`IPV6_JOIN_GROUP`) on that interface only, never where the routing table would send it.

use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
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

/// What `sock`'s receive buffer holds as the kernel counts it (`SO_RCVBUF` read back: the
/// size granted, doubled for the kernel's bookkeeping, which each datagram is charged with);
/// `None` when it cannot be read.
pub(crate) fn receive_buffer_bytes(sock: &UdpSocket) -> Option<usize> {
    socket2::SockRef::from(sock)
        .recv_buffer_size()
        .ok()
        .filter(|&b| b > 0)
}

/// The node's unicast socket: it receives point-to-point traffic and sends everything,
/// multicast included, so that every datagram's source address is the node's unicast address
/// (peers learn where to answer from it). `index`: the IPv6 multicast interface
/// ([`multicast_index`]); multicast leaves by it and by nothing else. `gro`: receive runs of
/// datagrams at once where the kernel can ([`enable_gro`]).
pub(crate) fn unicast_socket(
    interface: IpAddr,
    index: Option<u32>,
    port: u16,
    ttl: u32,
    buffer_bytes: usize,
    gro: bool,
) -> io::Result<UdpSocket> {
    let sock = Socket::new(
        Domain::for_address(SocketAddr::new(interface, 0)),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    set_buffers(&sock, buffer_bytes);
    match interface {
        IpAddr::V4(v4) => {
            sock.set_multicast_if_v4(&v4)?;
            sock.set_multicast_ttl_v4(ttl)?;
            // Other members on this host (and other nodes in this process) must see our
            // multicast.
            sock.set_multicast_loop_v4(true)?;
        }
        IpAddr::V6(_) => {
            // One family per node: no IPv4-mapped addresses on an IPv6 socket.
            sock.set_only_v6(true)?;
            // Without a known interface no multicast group opens (`Node::open_group`), so the
            // routing table never picks one.
            if let Some(i) = index {
                sock.set_multicast_if_v6(i)?;
            }
            sock.set_multicast_hops_v6(ttl)?;
            sock.set_multicast_loop_v6(true)?;
        }
    }
    sock.set_nonblocking(true)?;
    enable_recv_ttl(&sock, interface.is_ipv6());
    enable_drop_count(&sock);
    if gro {
        enable_gro(&sock);
    }
    sock.bind(&bind_addr(interface, index, port).into())?;
    Ok(sock.into())
}

/// Where a socket on `interface` binds: a link-local IPv6 address needs its interface as
/// scope.
fn bind_addr(interface: IpAddr, index: Option<u32>, port: u16) -> SocketAddr {
    match interface {
        IpAddr::V4(v4) => SocketAddr::V4(SocketAddrV4::new(v4, port)),
        IpAddr::V6(v6) => {
            let scope = if v6.is_unicast_link_local() {
                index.unwrap_or(0)
            } else {
                0
            };
            SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope))
        }
    }
}

/// Ask the kernel for each datagram's IP time-to-live (`IP_RECVTTL`; IPv6: the hop limit,
/// `IPV6_RECVHOPLIMIT`): RMTP's receivers choose the nearest designated receiver by it. Where
/// the option is missing, engines get no TTL.
pub(crate) fn enable_recv_ttl(sock: &impl std::os::fd::AsRawFd, v6: bool) {
    #[cfg(target_os = "linux")]
    {
        let (level, name) = if v6 {
            (libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT)
        } else {
            (libc::IPPROTO_IP, libc::IP_RECVTTL)
        };
        set_on(sock, level, name, "IP_RECVTTL / IPV6_RECVHOPLIMIT");
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (sock, v6);
}

/// Ask the kernel to tell, with each datagram received, how many it has dropped on the
/// socket for want of receive buffer (`SO_RXQ_OVFL`, Linux 2.6.33): counted as
/// [`crate::NodeCounters::receive_buffer_drops`]. Elsewhere nothing is counted.
pub(crate) fn enable_drop_count(sock: &impl std::os::fd::AsRawFd) {
    #[cfg(target_os = "linux")]
    set_on(sock, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, "SO_RXQ_OVFL");
    #[cfg(not(target_os = "linux"))]
    let _ = sock;
}

/// Turn on the int socket option `name` at `level`; returns whether the kernel took it (a
/// refusal is logged as `what`, not fatal).
#[cfg(target_os = "linux")]
fn set_on(
    sock: &impl std::os::fd::AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    what: &str,
) -> bool {
    let on: libc::c_int = 1;
    // SAFETY: a valid socket and an int option of the size given.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        debug!("{what}: {}", io::Error::last_os_error());
    }
    r == 0
}

/// Ask the kernel to hand runs of datagrams over in one receive (UDP generic receive offload,
/// `UDP_GRO`, Linux 5.0): a sender's segmented send (`UDP_SEGMENT`) arrives whole instead of
/// being cut into datagrams for each receiving socket, and datagrams of one flow that a
/// device coalesced stay together; [`crate::batch::RecvBatch`] cuts them apart. Returns
/// whether the kernel took it; where it did not, datagrams arrive one by one as before.
pub(crate) fn enable_gro(sock: &impl std::os::fd::AsRawFd) -> bool {
    #[cfg(target_os = "linux")]
    {
        set_on(sock, libc::SOL_UDP, libc::UDP_GRO, "UDP_GRO")
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = sock;
        false
    }
}

/// A socket that receives the multicast traffic of one group. `interface` and `index` are the
/// node's ([`multicast_index`] for IPv6, which must be known); `gro` as for
/// [`unicast_socket`].
pub(crate) fn multicast_socket(
    group: SocketAddr,
    interface: IpAddr,
    index: Option<u32>,
    buffer_bytes: usize,
    gro: bool,
) -> io::Result<UdpSocket> {
    let sock = Socket::new(Domain::for_address(group), Type::DGRAM, Some(Protocol::UDP))?;
    // Several members of a group may live on one host: all bind the same address and port.
    sock.set_reuse_address(true)?;
    set_buffers(&sock, buffer_bytes);
    sock.set_nonblocking(true)?;
    enable_recv_ttl(&sock, group.is_ipv6());
    enable_drop_count(&sock);
    if gro {
        enable_gro(&sock);
    }
    match (group, interface) {
        (SocketAddr::V4(g), IpAddr::V4(i)) => {
            // Bound to the group address, the socket gets this group's datagrams only.
            sock.bind(&SocketAddr::V4(g).into())?;
            // Belt and braces for the same pitfall, where the option exists.
            #[cfg(target_os = "linux")]
            if let Err(e) = sock.set_multicast_all_v4(false) {
                debug!("IP_MULTICAST_ALL: {e}");
            }
            sock.join_multicast_v4(g.ip(), &i)?;
        }
        (SocketAddr::V6(g), IpAddr::V6(_)) => {
            let Some(index) = index else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "IPv6 multicast needs the interface's index",
                ));
            };
            sock.set_only_v6(true)?;
            // The scope matters to the kernel only for link-local and interface-local groups.
            sock.bind(&SocketAddr::V6(SocketAddrV6::new(*g.ip(), g.port(), 0, index)).into())?;
            #[cfg(target_os = "linux")]
            if let Err(e) = sock.set_multicast_all_v6(false) {
                debug!("IPV6_MULTICAST_ALL: {e}");
            }
            sock.join_multicast_v6(g.ip(), index)?;
        }
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the group address and the interface are of different families",
            ))
        }
    }
    Ok(sock.into())
}

/// The interface IPv6 multicast uses on a node with interface address `interface`: `given`
/// if set, else the index of the interface that holds the address; `None` for IPv4 (it goes
/// by address) and for an address no interface holds.
pub(crate) fn multicast_index(interface: IpAddr, given: Option<u32>) -> Option<u32> {
    match interface {
        IpAddr::V4(_) => None,
        IpAddr::V6(_) if given.is_some() => given,
        IpAddr::V6(_) => interfaces()
            .into_iter()
            .find(|i| i.addr == interface)
            .map(|i| i.index),
    }
}

/// What a datagram adds to its payload on the wire: the IPv4 (20) or IPv6 (40) header and
/// UDP's (8).
fn ip_udp_headers(addr: IpAddr) -> usize {
    match addr {
        IpAddr::V4(_) => 20 + 8,
        IpAddr::V6(_) => 40 + 8,
    }
}

/// The largest UDP payload that leaves `interface` in one IP packet: its MTU less the IP and
/// UDP headers (IPv4: loopback 65536 → the UDP maximum, 65507; Ethernet 1500 → 1472; IPv6:
/// 65488 and 1452). Larger datagrams would be fragmented by IP, and one lost fragment loses
/// the whole datagram. `fallback` when the interface or its MTU cannot be found (an address
/// that is not local, a system without `/sys/class/net`).
pub fn path_datagram_bytes(interface: impl Into<IpAddr>, fallback: usize) -> usize {
    let interface = interface.into();
    path_datagram_bytes_on(interface, multicast_index(interface, None), fallback)
}

/// [`path_datagram_bytes`] on the interface of index `index` if given (IPv6: see
/// [`crate::NodeConfig::interface_index`]), else on the one that holds `interface`.
pub fn path_datagram_bytes_on(interface: IpAddr, index: Option<u32>, fallback: usize) -> usize {
    interface_mtu(interface, index)
        .map(|mtu| {
            mtu.saturating_sub(ip_udp_headers(interface))
                .clamp(crate::MIN_DATAGRAM_BYTES, crate::MAX_DATAGRAM_BYTES)
        })
        .unwrap_or(fallback)
}

/// The MTU of the interface of index `index`, else of the one that holds `addr` (for an
/// unspecified address, the smallest MTU of the interfaces that are up, since traffic may
/// leave by any of them).
#[cfg(target_os = "linux")]
fn interface_mtu(addr: IpAddr, index: Option<u32>) -> Option<usize> {
    let mtu = |name: &str| -> Option<usize> {
        std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let mut found: Option<usize> = None;
    for i in interfaces() {
        let ours = match index {
            Some(x) => i.index == x,
            None => i.addr == addr || (addr.is_unspecified() && !i.addr.is_loopback()),
        };
        if ours && i.addr.is_ipv4() == addr.is_ipv4() {
            let m = mtu(&i.name)?;
            found = Some(found.map_or(m, |f| f.min(m)));
        }
    }
    found
}

#[cfg(not(target_os = "linux"))]
fn interface_mtu(_addr: IpAddr, _index: Option<u32>) -> Option<usize> {
    None
}

/// An address of an interface that is up.
#[derive(Clone, Debug)]
pub(crate) struct Interface {
    pub name: String,
    pub index: u32,
    pub addr: IpAddr,
}

/// Every IPv4 and IPv6 address of the interfaces that are up, from `getifaddrs(3)`.
#[cfg(unix)]
pub(crate) fn interfaces() -> Vec<Interface> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we only read and then free exactly once;
    // each address is read as the structure its family names.
    unsafe {
        if libc::getifaddrs(&mut head) != 0 {
            return out;
        }
        let mut p = head;
        while !p.is_null() {
            let ifa = &*p;
            p = ifa.ifa_next;
            let up = ifa.ifa_flags & libc::IFF_UP as libc::c_uint != 0;
            if !up || ifa.ifa_addr.is_null() {
                continue;
            }
            let addr = match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
                }
                libc::AF_INET6 => {
                    let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
                }
                _ => continue,
            };
            let index = libc::if_nametoindex(ifa.ifa_name);
            let name = std::ffi::CStr::from_ptr(ifa.ifa_name)
                .to_string_lossy()
                .into_owned();
            out.push(Interface { name, index, addr });
        }
        libc::freeifaddrs(head);
    }
    out
}

#[cfg(not(unix))]
pub(crate) fn interfaces() -> Vec<Interface> {
    Vec::new()
}

/// The index of the interface named `name` (`lo`, `eth0`), or `None` if there is none.
#[cfg(unix)]
pub fn interface_index(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: a valid NUL-terminated string; the call only reads it.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

/// The index of the interface named `name` (`None` here: no interface names).
#[cfg(not(unix))]
pub fn interface_index(_name: &str) -> Option<u32> {
    None
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
        assert_eq!(
            path_datagram_bytes("2001:db8::77".parse::<IpAddr>().unwrap(), 1234),
            1234
        );
    }

    #[test]
    fn ipv6_loopback_leaves_room_for_the_longer_header() {
        let lo6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        let Some(lo) = interfaces().into_iter().find(|i| i.addr == lo6) else {
            eprintln!("skipped: no interface holds ::1 here");
            return;
        };
        // The interface is found by its address and by its index alike.
        assert_eq!(multicast_index(lo6, None), Some(lo.index));
        assert_eq!(interface_index(&lo.name), Some(lo.index));
        let mtu: usize = std::fs::read_to_string(format!("/sys/class/net/{}/mtu", lo.name))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let want = (mtu - 48).min(crate::MAX_DATAGRAM_BYTES);
        assert_eq!(path_datagram_bytes(lo6, 1), want);
        assert_eq!(path_datagram_bytes_on(lo6, Some(lo.index), 1), want);
        // Over IPv4 on the same interface, 20 bytes more fit.
        if mtu == 65536 {
            assert_eq!(want, 65488);
        }
    }

    #[test]
    fn an_index_given_is_used_and_ipv4_needs_none() {
        assert_eq!(
            multicast_index(IpAddr::V6(Ipv6Addr::UNSPECIFIED), None),
            None
        );
        assert_eq!(
            multicast_index(IpAddr::V6(Ipv6Addr::UNSPECIFIED), Some(7)),
            Some(7)
        );
        assert_eq!(
            multicast_index(IpAddr::V4(Ipv4Addr::LOCALHOST), Some(7)),
            None
        );
        assert_eq!(interface_index("no-such-interface-here"), None);
    }

    #[test]
    fn a_link_local_address_binds_with_its_scope() {
        let ll: IpAddr = "fe80::1".parse().unwrap();
        assert_eq!(
            bind_addr(ll, Some(3), 9),
            SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 9, 0, 3))
        );
        assert_eq!(
            bind_addr(IpAddr::V6(Ipv6Addr::LOCALHOST), Some(3), 9),
            "[::1]:9".parse().unwrap()
        );
        assert_eq!(
            bind_addr(IpAddr::V4(Ipv4Addr::LOCALHOST), Some(3), 9),
            "127.0.0.1:9".parse().unwrap()
        );
    }
}
