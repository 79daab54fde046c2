//! RMTP connection parameters (Table II of the paper) with the defaults of its Table III.

use crate::engine::NodeId;
use crate::registry::ConfigError;
use crate::tree::packet::{DATA_OVERHEAD, MAX_ACK_BITS};
use crate::wire::HEADER_LEN;
use std::time::Duration;

/// What a sender does when more ACKs than `CONG_thresh` ask for retransmissions in one
/// `T_send` (section III-B8).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum CongestionResponse {
    /// The paper's slow start: the congestion window drops to one packet.
    Reset,
    /// Its footnote 9: the window is halved.
    Halve,
}

/// The connection parameters of one RMTP session. Every member of a session uses the same
/// ones (the paper's Session Manager hands them out); each field is overridable.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TreeConfig {
    /// W_s: send window in packets; at most this many new packets per `T_send`.
    pub send_window_pkts: u32,
    /// W_r: receive window in packets (the length of an ACK's bit vector).
    pub recv_window_pkts: u32,
    /// T_send: interval of the sender's transmissions and window updates.
    pub t_send_ms: u64,
    /// T_retx: interval at which an ACK processor serves its retransmission queue.
    pub t_retx_ms: u64,
    /// T_rtt: interval of RTT_MEASURE packets.
    pub t_rtt_ms: u64,
    /// T_sap: interval of SND_ACK_TOME advertisements.
    pub t_sap_ms: u64,
    /// T_dally: how long the sender (and a DR once it holds everything) stays after the end,
    /// restarted by every ACK.
    pub t_dally_ms: u64,
    /// Packet_Size: payload bytes of a data packet (the largest message `submit` takes).
    pub packet_size_bytes: usize,
    /// Cache_Size: packets the data cache holds in memory (sender and DRs); older ones go to
    /// the store when there is one.
    pub cache_size_pkts: usize,
    /// CONG_thresh: ACKs with retransmission requests per `T_send` tolerated before the
    /// congestion window shrinks; `None` is the paper's "infinity" (no congestion control).
    pub cong_thresh: Option<u32>,
    /// How the congestion window shrinks.
    pub cong_response: CongestionResponse,
    /// MCAST_thresh: more requesters of one packet than this in one `T_retx` and the repair is
    /// multicast (to the DR's area for a DR), else unicast to each.
    pub mcast_thresh: u32,
    /// The designated receivers of the session (chosen by configuration, as in the paper's
    /// measurements); every other joiner is a plain receiver.
    pub designated_receivers: Vec<NodeId>,
    /// The time-to-live SND_ACK_TOME leaves with on the network, as the drivers send it (the
    /// paper's "predetermined value, say 64"): received TTLs are compared against it.
    pub ad_ttl: u8,
    /// An ACK processor stops waiting for a child not heard from for this long (it left or
    /// crashed): flow control goes on with the others.
    pub child_silence_ms: u64,
    /// A child whose L has not moved for this long while the sender waits on it is too slow:
    /// the window goes on without it, and it catches up from the cache. 0 waits for ever.
    pub child_stall_ms: u64,
    /// Children an ACK processor keeps track of at most (bounded memory; a child costs about
    /// 100 bytes). A receiver past it is refused at once (REFUSED naming the limit) and turns
    /// to another ACK processor, or gives up when none is left.
    pub max_children: usize,
    /// Bounds of T_ack, the interval between two ACKs computed from the measured RTT.
    pub t_ack_min_ms: u64,
    /// Upper bound of T_ack.
    pub t_ack_max_ms: u64,
    /// The sender delivers its own packets to itself too (as every rmcast engine does, and the
    /// simulator's agreement check expects); a file sender has no use for them.
    pub deliver_own: bool,
}

/// Children an ACK processor tracks by default: a flat session of ten thousand receivers, all
/// ACKing the sender, fits (RMTP's DRs exist so that none has to); one more is refused.
const MAX_CHILDREN: usize = 16_384;

impl Default for TreeConfig {
    fn default() -> Self {
        TreeConfig::table_iii()
    }
}

impl TreeConfig {
    /// Table III: W_s 15, W_r 32, T_send 600 ms, T_retx 300 ms, T_rtt 1 s, T_sap 3 s,
    /// T_dally 250 s, 512-byte packets, a cache of 128 packets, CONG_thresh 0,
    /// MCAST_thresh 3 (and this implementation's own bounds).
    pub const fn table_iii() -> Self {
        TreeConfig {
            send_window_pkts: 15,
            recv_window_pkts: 32,
            t_send_ms: 600,
            t_retx_ms: 300,
            t_rtt_ms: 1000,
            t_sap_ms: 3000,
            t_dally_ms: 250_000,
            packet_size_bytes: 512,
            cache_size_pkts: 128,
            cong_thresh: Some(0),
            cong_response: CongestionResponse::Reset,
            mcast_thresh: 3,
            designated_receivers: Vec::new(),
            ad_ttl: 64,
            child_silence_ms: 10_000,
            child_stall_ms: 60_000,
            max_children: MAX_CHILDREN,
            t_ack_min_ms: 1,
            t_ack_max_ms: 5000,
            deliver_own: true,
        }
    }
}

impl TreeConfig {
    /// For a LAN or one host, where `rmcast member` runs: Table III paces the sender at 15
    /// packets per 600 ms (25 a second, the paper's wide-area network of 1995), which a group
    /// that chats or pipes lines outruns at once. Here the sender may have 1,024 packets of up
    /// to 1 KiB beyond the slowest receiver, every 2 ms; repairs are served every 2 ms;
    /// receivers ACK as the measured RTT says (between 1 ms and 5 s); no congestion control
    /// (as `rmcast send`'s default); a receiver silent for 3 s is gone, and one that holds the
    /// window for 5 s catches up from the cache while the others go on.
    pub const fn lan() -> Self {
        TreeConfig {
            send_window_pkts: 1024,
            recv_window_pkts: 2048,
            t_send_ms: 2,
            t_retx_ms: 2,
            t_rtt_ms: 500,
            t_sap_ms: 500,
            t_dally_ms: 2000,
            packet_size_bytes: 1024,
            cache_size_pkts: 2048,
            cong_thresh: None,
            cong_response: CongestionResponse::Halve,
            mcast_thresh: 3,
            designated_receivers: Vec::new(),
            ad_ttl: 64,
            child_silence_ms: 3000,
            child_stall_ms: 5000,
            max_children: MAX_CHILDREN,
            t_ack_min_ms: 1,
            t_ack_max_ms: 5000,
            deliver_own: true,
        }
    }
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

impl TreeConfig {
    /// Refuse parameters the protocol cannot work with, for datagrams of at most
    /// `max_datagram_bytes`.
    pub fn validate(&self, max_datagram_bytes: usize) -> Result<(), ConfigError> {
        let max_pkt = max_datagram_bytes.saturating_sub(HEADER_LEN + DATA_OVERHEAD);
        ConfigError::check_range(
            "packet_size_bytes",
            self.packet_size_bytes as u64,
            1,
            max_pkt as u64,
        )?;
        ConfigError::check_range("send_window_pkts", self.send_window_pkts as u64, 1, 65_536)?;
        let max_bits = MAX_ACK_BITS.min(max_datagram_bytes.saturating_sub(HEADER_LEN + 10) * 8);
        ConfigError::check_range(
            "recv_window_pkts",
            self.recv_window_pkts as u64,
            1,
            max_bits as u64,
        )?;
        ConfigError::check_range(
            "cache_size_pkts",
            self.cache_size_pkts as u64,
            self.send_window_pkts as u64,
            1 << 24,
        )?;
        for (field, v) in [
            ("t_send_ms", self.t_send_ms),
            ("t_retx_ms", self.t_retx_ms),
            ("t_rtt_ms", self.t_rtt_ms),
            ("t_sap_ms", self.t_sap_ms),
            ("t_dally_ms", self.t_dally_ms),
            ("child_silence_ms", self.child_silence_ms),
        ] {
            ConfigError::check_range(field, v, 1, 24 * 3600 * 1000)?;
        }
        ConfigError::check_range("max_children", self.max_children as u64, 1, 1 << 20)?;
        ConfigError::check_range("ad_ttl", self.ad_ttl as u64, 1, 255)?;
        if self.t_ack_min_ms == 0 || self.t_ack_min_ms > self.t_ack_max_ms {
            return Err(ConfigError::Invalid {
                field: "t_ack_min_ms",
                reason: "must be at least 1 and at most t_ack_max_ms",
            });
        }
        if self.designated_receivers.len() > 1 << 16 {
            return Err(ConfigError::Invalid {
                field: "designated_receivers",
                reason: "names more than 65536 nodes",
            });
        }
        Ok(())
    }

    /// The sender's largest rate in bytes per second: W_s × Packet_Size / T_send.
    pub fn max_rate_bytes_per_sec(&self) -> f64 {
        self.send_window_pkts as f64 * self.packet_size_bytes as f64
            / (self.t_send_ms as f64 / 1000.0)
    }

    pub(crate) fn t_send(&self) -> Duration {
        ms(self.t_send_ms)
    }
    pub(crate) fn t_retx(&self) -> Duration {
        ms(self.t_retx_ms)
    }
    pub(crate) fn t_rtt(&self) -> Duration {
        ms(self.t_rtt_ms)
    }
    pub(crate) fn t_sap(&self) -> Duration {
        ms(self.t_sap_ms)
    }
    pub(crate) fn t_dally(&self) -> Duration {
        ms(self.t_dally_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_iii_is_valid_and_limits_the_rate_to_100_kbit_s() {
        let c = TreeConfig::default();
        c.validate(1472).unwrap();
        // 15 × 512 B / 0.6 s = 12.8 kB/s, about 100 kbit/s as in section V.
        assert!((c.max_rate_bytes_per_sec() - 12_800.0).abs() < 1.0);
    }

    #[test]
    fn the_lan_parameters_are_valid_on_ethernet_and_outrun_table_iii_by_far() {
        let c = TreeConfig::lan();
        c.validate(1472).unwrap();
        // 1,024 × 1 KiB every 2 ms: about 500 MB/s, against Table III's 12.8 kB/s.
        let ratio = c.max_rate_bytes_per_sec() / TreeConfig::default().max_rate_bytes_per_sec();
        assert!(ratio > 10_000.0, "{ratio}");
    }

    #[test]
    fn bad_parameters_are_refused_by_name() {
        let bad = |f: fn(&mut TreeConfig)| {
            let mut c = TreeConfig::default();
            f(&mut c);
            c.validate(1472).unwrap_err()
        };
        assert!(matches!(
            bad(|c| c.packet_size_bytes = 1500),
            ConfigError::OutOfRange {
                field: "packet_size_bytes",
                ..
            }
        ));
        assert!(matches!(
            bad(|c| c.cache_size_pkts = 4),
            ConfigError::OutOfRange {
                field: "cache_size_pkts",
                ..
            }
        ));
        assert!(matches!(
            bad(|c| c.t_send_ms = 0),
            ConfigError::OutOfRange {
                field: "t_send_ms",
                ..
            }
        ));
        assert!(matches!(
            bad(|c| c.recv_window_pkts = 0),
            ConfigError::OutOfRange {
                field: "recv_window_pkts",
                ..
            }
        ));
        assert!(matches!(
            bad(|c| c.t_ack_min_ms = 0),
            ConfigError::Invalid {
                field: "t_ack_min_ms",
                ..
            }
        ));
    }
}
