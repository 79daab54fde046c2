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
    sock.bind(&SocketAddr::V4(SocketAddrV4::new(interface, port)).into())?;
    Ok(sock.into())
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
