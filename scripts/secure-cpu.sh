#!/usr/bin/env bash
# CPU time of `rmcast bench`'s two phases, without a key and with one, for a fixed number of
# messages: what a keyed group costs beside a plain one, less sensitive to a shared host's load
# than messages per second (which follow the share of the cores the bench gets). Samples the
# bench's worker processes with `perf record -F 999` (one sample = 1 ms of CPU); the bench
# starts the plain phase's workers first, then the keyed phase's. Prints the load average, both
# phases' messages per second and CPU milliseconds, and keyed / plain CPU.
#
#   scripts/secure-cpu.sh ENGINE SIZE MESSAGES KEY_FILE [more bench arguments]
#
# RMCAST=path/to/rmcast picks the binary. Needs `perf` allowed to sample this user's processes.
set -u
[ $# -ge 4 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
ENGINE=$1 SIZE=$2 MESSAGES=$3 KEY=$4
shift 4
EXE=${RMCAST:-target/release/rmcast}
[ -x "$EXE" ] || { echo "no $EXE: cargo build --release first" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load=$(cut -d' ' -f1 /proc/loadavg)
timeout 600 perf record -q -F 999 -o "$tmp/perf.data" -- "$EXE" bench --engine "$ENGINE" \
    --sizes "$SIZE" --members 3 --only rmcast --messages "$MESSAGES" --key-file "$KEY" "$@" \
    >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
rates=$(grep -E "^ *$SIZE B  (rmcast|secure)" "$tmp/out" | awk '{printf "%s ", $4}')
# Processes in the order their first sample came: the bench itself, then each phase's workers
# (as many as members).
perf script -i "$tmp/perf.data" -F pid 2>/dev/null | awk -v load="$load" -v rates="$rates" '
{ p = $1; if (!(p in rank)) rank[p] = ++k; n[rank[p]]++ }
END {
    for (i = 2; i <= k; i++) if (i <= 4) plain += n[i]; else keyed += n[i]
    if (k != 7 || plain == 0) { print "expected 6 worker processes, saw " k - 1 > "/dev/stderr"; exit 1 }
    printf "load %s  msgs/s plain, keyed: %s  CPU ms plain %d, keyed %d  keyed/plain CPU %.3f\n",
        load, rates, plain, keyed, keyed / plain
}'
