//! Areas behind routers (the shape of Fig. 9 of "Reliable Multicast Transport Protocol
//! (RMTP)" by Paul, Sabnani, Lin and Bhattacharyya): an opt-in addition to the flat network
//! model, so that hop counts (TTL) and losses local to a region can be shown.
//!
//! Hosts in no area sit on the backbone. An area is a LAN behind a router link of `hops`
//! routers from its parent (the backbone, or an enclosing area for a deeper level). A datagram
//! from `x` to `y` crosses the router links of the areas on the path between them; each
//! crossing adds the area's hops and latency, and loses the datagram with the area's loss
//! probability, drawn once per datagram and area: one loss on the way into an area is shared
//! by every receiver behind it, as on a real multicast tree; a copy may also be lost on the
//! last hop to its host (`lan_loss`, drawn per copy). A datagram arrives with the TTL it
//! left with less the hops crossed, and does not arrive where that would reach zero (a scoped
//! multicast stays in its area).

use rmcast_proto::NodeId;
use std::time::Duration;

/// One area: a LAN behind a router link.
#[derive(Clone, Debug, PartialEq)]
pub struct Area {
    /// The hosts on the area's LAN.
    pub hosts: Vec<NodeId>,
    /// The enclosing area (by index, smaller than this one's), or `None` for the backbone.
    pub parent: Option<usize>,
    /// Routers between this LAN and its parent's (at least 1).
    pub hops: u8,
    /// Probability in `[0, 1)` that a datagram crossing the router link is lost.
    pub loss: f64,
    /// Probability in `[0, 1)` that a copy is lost on the last hop to a host of this area's
    /// LAN (drawn for each copy: losses local to one receiver).
    pub lan_loss: f64,
    /// One-way latency the router link adds.
    pub latency: Duration,
}

/// The areas of a network, and the TTL datagrams leave with.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    /// The areas.
    pub areas: Vec<Area>,
    /// TTL of multicast and unicast datagrams as they leave (a scoped multicast names its own):
    /// what engines compare received TTLs against (RMTP's 64).
    pub initial_ttl: u8,
}

impl Default for Topology {
    fn default() -> Self {
        Topology {
            areas: Vec::new(),
            initial_ttl: 64,
        }
    }
}

impl Topology {
    /// The area of `host`, if any.
    pub fn area_of(&self, host: NodeId) -> Option<usize> {
        self.areas.iter().position(|a| a.hosts.contains(&host))
    }

    /// Areas from `host`'s own up to the outermost, innermost first.
    pub fn chain(&self, host: NodeId) -> Vec<usize> {
        let mut out = Vec::new();
        let mut a = self.area_of(host);
        while let Some(i) = a {
            if out.len() > self.areas.len() {
                break;
            }
            out.push(i);
            a = self.areas[i].parent;
        }
        out
    }

    /// The router links crossed from `x` to `y`: areas on either side below their nearest
    /// common area.
    pub fn crossed(chain_x: &[usize], chain_y: &[usize]) -> Vec<usize> {
        let common = chain_x
            .iter()
            .rev()
            .zip(chain_y.iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        let mut v: Vec<usize> = chain_x[..chain_x.len() - common].to_vec();
        v.extend_from_slice(&chain_y[..chain_y.len() - common]);
        v
    }

    /// Routers between `x` and `y`.
    pub fn hops(&self, x: NodeId, y: NodeId) -> u32 {
        Self::crossed(&self.chain(x), &self.chain(y))
            .iter()
            .map(|&a| self.areas[a].hops as u32)
            .sum()
    }

    /// Checks that the topology describes a possible network of `hosts` hosts.
    pub fn validate(&self, hosts: usize) -> Result<(), String> {
        let mut seen = std::collections::BTreeSet::new();
        for (i, a) in self.areas.iter().enumerate() {
            if a.parent.is_some_and(|p| p >= i) {
                return Err(format!("area {i}'s parent must be an earlier area"));
            }
            if a.hops == 0 {
                return Err(format!("area {i} must be at least one hop away"));
            }
            if !(0.0..1.0).contains(&a.loss) || !(0.0..1.0).contains(&a.lan_loss) {
                return Err(format!("area {i}'s losses must be in [0, 1)"));
            }
            for h in &a.hosts {
                if h.0 as usize >= hosts {
                    return Err(format!("area {i} names unknown host {h}"));
                }
                if !seen.insert(*h) {
                    return Err(format!("host {h} is in two areas"));
                }
            }
        }
        if self.initial_ttl == 0 {
            return Err("initial TTL must be positive".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hops_add_up_along_the_tree() {
        let area = |hosts: &[u32], parent, hops| Area {
            hosts: hosts.iter().map(|&h| NodeId(h)).collect(),
            parent,
            hops,
            loss: 0.0,
            lan_loss: 0.0,
            latency: Duration::ZERO,
        };
        let t = Topology {
            areas: vec![
                area(&[1, 2], None, 3),
                area(&[3], None, 2),
                area(&[4], Some(0), 1),
            ],
            initial_ttl: 64,
        };
        t.validate(5).unwrap();
        assert_eq!(t.hops(NodeId(0), NodeId(1)), 3);
        assert_eq!(t.hops(NodeId(1), NodeId(2)), 0);
        assert_eq!(t.hops(NodeId(1), NodeId(3)), 5);
        assert_eq!(t.hops(NodeId(4), NodeId(1)), 1);
        assert_eq!(t.hops(NodeId(4), NodeId(0)), 4);
        assert_eq!(t.hops(NodeId(4), NodeId(3)), 6);
        let mut bad = t.clone();
        bad.areas[0].parent = Some(2);
        assert!(bad.validate(5).is_err());
        bad = t;
        bad.areas[1].hosts.push(NodeId(1));
        assert!(bad.validate(5).is_err());
    }
}
