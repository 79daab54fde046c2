//! `--interface`: the address a member binds to, IPv4 or IPv6, and for IPv6 the interface its
//! multicast uses, written as an address with an optional zone: `127.0.0.1`, `::1`,
//! `fd00::5%eth0`, `fe80::1%2`, or `::%lo` (any address; multicast on `lo`). The zone is an
//! interface name or index, as in RFC 4007's text form of scoped addresses and `ping -I`.
//! Without one, IPv6 multicast uses the interface that holds the address.

use std::fmt;
use std::net::IpAddr;

/// A parsed `--interface`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interface {
    /// The address the unicast socket binds to.
    pub addr: IpAddr,
    /// IPv6: the index of the interface multicast is sent and joined on
    /// ([`rmcast::NodeConfig::interface_index`]); `None`: the one holding [`Interface::addr`].
    pub index: Option<u32>,
}

impl From<IpAddr> for Interface {
    fn from(addr: IpAddr) -> Self {
        Interface { addr, index: None }
    }
}

impl Default for Interface {
    /// 127.0.0.1: everything stays on this host.
    fn default() -> Self {
        Interface::from(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
    }
}

impl fmt::Display for Interface {
    /// The form [`parse_interface`] reads back (the zone by index, so that a child process
    /// finds the same interface).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index {
            Some(i) => write!(f, "{}%{i}", self.addr),
            None => write!(f, "{}", self.addr),
        }
    }
}

/// Parse `--interface` (see the module's documentation); `index_of` finds an interface's
/// index by name.
fn parse_with(s: &str, index_of: impl Fn(&str) -> Option<u32>) -> Result<Interface, String> {
    let s = s.trim();
    let (addr, zone) = match s.split_once('%') {
        Some((a, z)) => (a, Some(z)),
        None => (s, None),
    };
    // `[::1]` as in a socket address is taken too.
    let addr = addr
        .strip_prefix('[')
        .and_then(|a| a.strip_suffix(']'))
        .unwrap_or(addr);
    let addr: IpAddr = addr.parse().map_err(|_| {
        format!(
            "`{s}` is not an interface address: give an IPv4 or IPv6 address of this host, for \
             IPv6 optionally with its interface as %NAME or %INDEX (`::1`, `fd00::5%eth0`, \
             `::%lo`)"
        )
    })?;
    if addr.is_multicast() || addr == IpAddr::V4(std::net::Ipv4Addr::BROADCAST) {
        return Err(format!(
            "`{s}` is not an interface address (a unicast address of this host)"
        ));
    }
    let index = match zone {
        None => None,
        Some(_) if addr.is_ipv4() => {
            return Err(format!(
                "`{s}`: an interface after % is for IPv6; IPv4 multicast goes by the address"
            ))
        }
        Some(z) => Some(match z.parse::<u32>() {
            Ok(0) => return Err(format!("`{s}`: interface indexes start at 1")),
            Ok(i) => i,
            Err(_) => index_of(z).ok_or_else(|| format!("`{s}`: no interface named `{z}`"))?,
        }),
    };
    Ok(Interface { addr, index })
}

/// `--interface` (see the module's documentation).
pub fn parse_interface(s: &str) -> Result<Interface, String> {
    parse_with(s, rmcast::interface_index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Interface, String> {
        parse_with(s, |name| (name == "lo").then_some(1))
    }

    #[test]
    fn addresses_of_either_family_with_an_ipv6_zone() {
        let v4 = parse("192.168.1.10").unwrap();
        assert_eq!(
            (v4.addr.to_string(), v4.index),
            ("192.168.1.10".into(), None)
        );
        let lo6 = parse("::1").unwrap();
        assert_eq!((lo6.addr.to_string(), lo6.index), ("::1".into(), None));
        assert_eq!(parse("[::1]").unwrap(), lo6);
        let named = parse("::%lo").unwrap();
        assert_eq!(
            (named.addr.to_string(), named.index),
            ("::".into(), Some(1))
        );
        let indexed = parse("fe80::1%7").unwrap();
        assert_eq!(indexed.index, Some(7));
        // What Display writes reads back the same (children get it so).
        for i in [v4, lo6, named, indexed] {
            assert_eq!(parse(&i.to_string()).unwrap(), i);
        }
    }

    #[test]
    fn what_is_no_interface_is_refused_with_the_reason() {
        for (s, why) in [
            ("eth0", "not an interface address"),
            ("239.1.2.3", "unicast address"),
            ("ff02::1", "unicast address"),
            ("255.255.255.255", "unicast address"),
            ("127.0.0.1%lo", "for IPv6"),
            ("::%nosuch", "no interface named"),
            ("::%0", "start at 1"),
        ] {
            let e = parse(s).unwrap_err();
            assert!(e.contains(why), "{s}: {e}");
        }
    }
}
