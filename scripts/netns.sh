#!/usr/bin/env bash
# Hosts for rmcast on one machine: N network namespaces joined by a bridge, as separate hosts on
# one Ethernet segment. Needs root and iproute2 (nftables too for LOSS).
#
#   scripts/netns.sh up N [LOSS]   namespaces rmcast-h1..rmcast-hN, addresses 10.79.0.1..N/24,
#                                  the bridge in a namespace of its own (rmcast-sw); LOSS: the
#                                  percentage of IPv4 datagrams each host drops on arrival
#                                  (nftables `numgen random`), default 0
#   scripts/netns.sh down          deletes every namespace it made
#   scripts/netns.sh names         prints the hosts' names, comma separated (for --netns)
#
# Example: the ring measured with its members on three hosts of a bridged network:
#   sudo scripts/netns.sh up 3
#   sudo rmcast bench --engine ring,sequencer --netns "$(scripts/netns.sh names)"
#   sudo scripts/netns.sh down
#
# The addresses exist only inside the namespaces; nothing is routed to or from the machine's
# own interfaces, so no traffic leaves it.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
PREFIX=rmcast-h
SWITCH=rmcast-sw

hosts() { ip netns list | awk '{print $1}' | grep -E "^${PREFIX}[0-9]+$" | sort -t h -k2 -n || true; }

case "${1:-}" in
up)
  n="${2:?usage: netns.sh up N [LOSS]}"
  loss="${3:-0}"
  [[ "$n" =~ ^[0-9]+$ && "$n" -ge 1 && "$n" -le 250 ]] || { echo "N must be 1..250" >&2; exit 2; }
  [[ "$loss" =~ ^[0-9]+$ && "$loss" -le 99 ]] || { echo "LOSS must be 0..99 (percent)" >&2; exit 2; }
  if [ -n "$(hosts)" ] || ip netns list | grep -qw "$SWITCH"; then
    echo "namespaces of an earlier 'up' exist: run 'netns.sh down' first" >&2
    exit 2
  fi
  ip netns add "$SWITCH"
  ip -n "$SWITCH" link add br0 type bridge
  # Without snooping the bridge floods multicast to every port, as a plain switch does.
  ip -n "$SWITCH" link set br0 type bridge mcast_snooping 0
  ip -n "$SWITCH" link set br0 up
  for i in $(seq 1 "$n"); do
    h="$PREFIX$i"
    ip netns add "$h"
    ip -n "$h" link set lo up
    ip -n "$SWITCH" link add "p$i" type veth peer name eth0 netns "$h"
    ip -n "$SWITCH" link set "p$i" master br0 up
    ip -n "$h" addr add "10.79.0.$i/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$h" route add 224.0.0.0/4 dev eth0
    if [ "$loss" -gt 0 ]; then
      printf 'table inet rmloss {\n chain in {\n  type filter hook input priority 0;\n  meta protocol ip numgen random mod 100 < %s drop\n }\n}\n' "$loss" |
        ip netns exec "$h" nft -f -
    fi
  done
  echo "hosts: $(hosts | paste -sd, -) (10.79.0.1-$n), each dropping ${loss}% of what arrives"
  ;;
down)
  for h in $(hosts); do ip netns del "$h"; done
  ip netns list | grep -qw "$SWITCH" && ip netns del "$SWITCH"
  echo "deleted"
  ;;
names)
  hosts | paste -sd, -
  ;;
*)
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
  ;;
esac
