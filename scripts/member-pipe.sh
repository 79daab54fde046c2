#!/usr/bin/env bash
# How fast a pipe into `rmcast member` reaches every member: 3 members of one group on this host
# (loopback multicast), N lines piped into one of them, the time from the first line written
# until every member printed all N. The other two read with their stdin held open. Every member
# is fed through a FIFO this script holds open, so closing it ends each member cleanly (end of
# input: it leaves the group); the script waits for them and removes its files.
#
#   cargo build --release -p rmcast-cli
#   scripts/member-pipe.sh [LINES] [RUNS] [ENGINES...]     # defaults: 10000 3 sequencer ring gossip
#
# RMCAST (default target/release/rmcast) names the binary; LIMIT_S (default 60) bounds one run.
set -u
lines=${1:-10000}
runs=${2:-3}
shift $(( $# > 2 ? 2 : $# ))
engines=("$@")
[ ${#engines[@]} -eq 0 ] && engines=(sequencer ring gossip)
exe=${RMCAST:-$(dirname "$0")/../target/release/rmcast}
limit=${LIMIT_S:-60}
[ -x "$exe" ] || { echo "no $exe: cargo build --release -p rmcast-cli" >&2; exit 2; }
dir=$(mktemp -d)
pids=()
cleanup() {
    exec 3>&- 4>&- 5>&- 2>/dev/null
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$dir"
}
trap cleanup EXIT

now() { date +%s.%N; }
# Deliveries a member printed: every stdout line but the `* ...` notices.
delivered() { grep -vc '^\* ' "$1"; }
# Whether a member's output shows a view of 3 members.
three() { grep -q '^\* view [0-9]*: members [0-9]*, [0-9]*, [0-9]* (' "$1"; }

for engine in "${engines[@]}"; do
    for run in $(seq 1 "$runs"); do
        group="pipe-$engine-$$-$run"
        pids=()
        for i in 1 2 3; do
            mkfifo "$dir/in$i"
            "$exe" member --group "$group" --engine "$engine" --id "$i" \
                <"$dir/in$i" >"$dir/out$i" 2>"$dir/err$i" &
            pids+=($!)
        done
        # Hold each FIFO open (the members block opening it until then).
        exec 3>"$dir/in1" 4>"$dir/in2" 5>"$dir/in3"
        t=$(now)
        until three "$dir/out1" && three "$dir/out2" && three "$dir/out3"; do
            if (( $(echo "$(now) - $t > 20" | bc) )); then
                echo "$engine run $run: no view of 3 members within 20 s" >&2
                break
            fi
            sleep 0.05
        done
        t0=$(now)
        # Written on its own so that a full pipe does not stop the clock's loop.
        seq -f "line %g" 1 "$lines" >&3 &
        writer=$!
        done_at=""
        while :; do
            a=$(delivered "$dir/out1"); b=$(delivered "$dir/out2"); c=$(delivered "$dir/out3")
            if [ "$a" -ge "$lines" ] && [ "$b" -ge "$lines" ] && [ "$c" -ge "$lines" ]; then
                done_at=$(now)
                break
            fi
            if (( $(echo "$(now) - $t0 > $limit" | bc) )); then break; fi
            sleep 0.01
        done
        wait "$writer"
        exec 3>&- 4>&- 5>&-
        i=0
        for p in "${pids[@]}"; do
            i=$((i + 1))
            wait "$p" || { echo "$engine run $run: member $i exited with $?:" >&2; tail -3 "$dir/err$i" >&2; }
        done
        pids=()
        if [ -n "$done_at" ]; then
            printf '%s run %d: %d lines at all 3 members in %.2f s\n' \
                "$engine" "$run" "$lines" "$(echo "$done_at - $t0" | bc)"
        else
            printf '%s run %d: after %d s: %s, %s, %s of %d lines\n' \
                "$engine" "$run" "$limit" "$a" "$b" "$c" "$lines"
        fi
        rm -f "$dir"/in* "$dir"/out* "$dir"/err*
    done
done
