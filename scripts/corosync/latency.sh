#!/usr/bin/env bash
# One-way latency of Corosync's Totem ring (CPG, agreed order) at a light, paced load, on the
# hosts of `scripts/netns.sh up N`: the peer figure beside
# `rmcast bench --rate R --netns "$(scripts/netns.sh names)"` on the same network.
# Needs root, corosync and libcpg-dev (Debian/Ubuntu: apt-get install corosync libcpg-dev gcc).
#
#   scripts/netns.sh up 3
#   scripts/corosync/latency.sh [RATE] [SECONDS] [BYTES ...]   default 1000 msgs/s, 5 s, 64 1024
#   scripts/netns.sh down
#
# Each host runs a corosync (transport udp: Totem over IP multicast on the bridge, no crypto)
# with a private /run and state directory, so a corosync of the machine is never touched; host 1
# sends, every host (host 1 too) times each delivery against the send time carried in the
# message. Prints per size: the median of the hosts' p50, the worst host's p99 and p99.9, as
# rmcast bench prints its latency columns.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
HERE="$(cd "$(dirname "$0")" && pwd)"
RATE="${1:-1000}"
SECS="${2:-5}"
shift $(($# > 2 ? 2 : $#))
SIZES=("${@:-}")
[ -n "${SIZES[0]}" ] || SIZES=(64 1024)
mapfile -t HOSTS < <("$HERE/../netns.sh" names | tr , '\n' | grep . || true)
N=${#HOSTS[@]}
[ "$N" -ge 1 ] || { echo "no hosts: run scripts/netns.sh up N first" >&2; exit 2; }
command -v corosync >/dev/null || { echo "corosync is not installed" >&2; exit 2; }
WORK="$(mktemp -d /tmp/rmcast-corosync.XXXXXX)"
PIDS=()
cleanup() {
  set +e
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && timeout 20 tail --pid="$p" -f /dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT
gcc -O2 -Wall -o "$WORK/cpglat" "$HERE/cpglat.c" -lcpg

for i in $(seq 1 "$N"); do
  d="$WORK/n$i"
  mkdir -p "$d/state"
  {
    printf 'totem {\n version: 2\n cluster_name: rmcastlat\n transport: udp\n'
    printf ' crypto_cipher: none\n crypto_hash: none\n'
    printf ' interface {\n  ringnumber: 0\n  bindnetaddr: 10.79.0.0\n  mcastaddr: 239.255.79.1\n  mcastport: 5405\n  ttl: 1\n }\n}\n'
    printf 'nodelist {\n'
    for j in $(seq 1 "$N"); do printf ' node {\n  ring0_addr: 10.79.0.%d\n  nodeid: %d\n  name: n%d\n }\n' "$j" "$j" "$j"; done
    printf '}\nquorum {\n provider: corosync_votequorum\n}\n'
    printf 'system {\n state_dir: %s/state\n}\n' "$d"
    printf 'logging {\n to_stderr: no\n to_syslog: no\n to_logfile: yes\n logfile: %s/corosync.log\n}\n' "$d"
  } >"$d/corosync.conf"
  timeout 1800 ip netns exec "${HOSTS[$((i - 1))]}" sh -c \
    'mount -t tmpfs -o size=16m rmcast-run /run && exec corosync -f -c "$0"' "$d/corosync.conf" \
    >"$d/stdout" 2>&1 &
  PIDS+=($!)
done
for h in "${HOSTS[@]}"; do
  ok=0
  for _ in $(seq 1 120); do
    if ip netns exec "$h" corosync-quorumtool -s 2>/dev/null | grep -qE "^Nodes: +$N\$"; then ok=1; break; fi
    sleep 0.5
  done
  [ $ok = 1 ] || { echo "corosync in $h did not see $N nodes" >&2; exit 1; }
done
# A ring that has just formed may still take in a late member's join; let it settle.
sleep 2

echo "# Corosync $(corosync -v | head -1 | grep -o '[0-9][0-9.]*' | head -1), $N hosts, transport udp, agreed order, 1 sender at $RATE msgs/s for $SECS s; load $(cut -d' ' -f1-3 /proc/loadavg)"
for size in "${SIZES[@]}"; do
  out="$WORK/out.$size"
  : >"$out"
  cps=()
  for i in $(seq 1 "$N"); do
    flag=""
    [ "$i" = 1 ] && flag="-s"
    timeout $((SECS + 90)) ip netns exec "${HOSTS[$((i - 1))]}" "$WORK/cpglat" -n "$N" $flag \
      -r "$RATE" -t "$SECS" -b "$size" -g "lat$size" >>"$out" &
    cps+=($!)
  done
  fail=0
  for p in "${cps[@]}"; do wait "$p" || fail=1; done
  [ -n "${VERBOSE:-}" ] && cat "$out" >&2
  awk -v size="$size" -v n="$N" -v fail="$fail" '
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      k++; p50[k] = v["p50_us"]; if (v["p99_us"] > p99) p99 = v["p99_us"]; if (v["p999_us"] > p999) p999 = v["p999_us"]
      if (v["delivered"] < low || k == 1) low = v["delivered"] }
    END {
      for (a = 2; a <= k; a++) for (b = a; b > 1 && p50[b-1] > p50[b]; b--) { t = p50[b]; p50[b] = p50[b-1]; p50[b-1] = t }
      printf "corosync %5d B  hosts reporting %d/%d  fewest delivered %d  lat p50 %.1f us  p99 %.1f us  p999 %.1f us%s\n",
        size, k, n, low, p50[int((k + 1) / 2)], p99, p999, (fail ? "  (a client failed)" : "") }' "$out"
done
