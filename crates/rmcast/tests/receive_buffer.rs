//! What a node's socket receive buffer drops is counted: datagrams blasted at a node with the
//! smallest buffer the kernel grants overflow it, and `NodeCounters::receive_buffer_drops`
//! agrees with the kernel's own count for that socket (`/proc/net/udp`).

#![cfg(target_os = "linux")]

use rmcast::{Node, NodeConfig};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// The kernel's drop count of the IPv4 UDP socket bound to `addr`, from `/proc/net/udp`
/// (`local_address` in hex, little-endian address; `drops` the last column).
fn kernel_drops(addr: SocketAddr) -> Option<u64> {
    let SocketAddr::V4(a) = addr else { return None };
    let local = format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(a.ip().octets()),
        a.port()
    );
    let table = std::fs::read_to_string("/proc/net/udp").ok()?;
    table.lines().skip(1).find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        (cols.get(1) == Some(&local.as_str())).then(|| cols.last()?.parse().ok())?
    })
}

#[test]
fn datagrams_a_full_receive_buffer_dropped_are_counted_as_the_kernel_counts_them() {
    // The smallest buffer the kernel grants (it raises 1 to its minimum): a few datagrams.
    let node = Node::new(NodeConfig::default().socket_buffer_bytes(1)).unwrap();
    let to = node.local_addr();
    assert_eq!(node.counters().receive_buffer_drops, 0);
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    // Not a datagram of any group: the node reads and drops them, faster than the I/O thread
    // reads them they overflow its buffer.
    let junk = [0u8; 1400];
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut counted, mut sent) = (0, 0u64);
    while Instant::now() < deadline {
        for _ in 0..5_000 {
            sent += u64::from(tx.send_to(&junk, to).is_ok());
        }
        // The count comes with the next datagram read after a drop: one more, once the
        // buffer has drained.
        std::thread::sleep(Duration::from_millis(50));
        tx.send_to(&junk, to).unwrap();
        sent += 1;
        std::thread::sleep(Duration::from_millis(50));
        counted = node.counters().receive_buffer_drops;
        if counted > 0 {
            break;
        }
    }
    assert!(counted > 0, "no drop counted");
    // Every datagram sent was either read or dropped, none twice.
    assert_eq!(node.counters().datagrams_received + counted, sent);
    // The kernel's own count for the socket: ours is what it said with the last datagram
    // read, and nothing was dropped after it (the buffer had drained).
    if let Some(kernel) = kernel_drops(to) {
        assert_eq!(counted, kernel, "counted {counted}, the kernel {kernel}");
    }
    node.shutdown();
}
