#!/usr/bin/env bash
# Two `rmcast member` processes form a group; the one that orders (the sequencer, or the Ring's
# token site) is sent SIGINT; the survivor then sends a line and must deliver it.
#
#   scripts/leave_handover.sh [RUNS] [GAP_SECONDS] [ENGINE] [extra member flags...]
#
# RUNS (20), GAP_SECONDS between the two starts (1.5; 0 = the same instant), ENGINE (sequencer
# or ring). CHAT=1: each member sends a line first; DWELL=S: the group of two runs S seconds
# before the signal. Prints one line per run and `passed x of RUNS`. Every process it starts is stopped
# by its PID; the temporary directory is removed.
#
# Measured on a 2-core host under a load average of about 13 (other builds), release build:
# 20 of 20 for each engine, started 1.5 s apart and in the same instant, with and without the
# survivor-alone change; before it also CHAT=1 DWELL=3 (10 of 10 each) and DWELL=15 (5 of 5 each).
set -u
runs=${1:-20}
gap=${2:-1.5}
engine=${3:-sequencer}
shift $(( $# < 3 ? $# : 3 ))
bin=${RMCAST:-target/release/rmcast}
dir=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    pids=()
    exec 3>&- 4>&- 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT

# wait_for FILE REGEX SECONDS: whether a line of FILE matches REGEX within SECONDS.
wait_for() {
    local end=$((SECONDS + $3))
    while (( SECONDS <= end )); do
        grep -qE "$2" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

passed=0
for run in $(seq 1 "$runs"); do
    group="handover-$$-$run"
    rm -f "$dir"/*
    mkfifo "$dir/in0" "$dir/in1"
    "$bin" member --group "$group" --engine "$engine" "$@" <"$dir/in0" >"$dir/out0" 2>"$dir/err0" &
    pids=($!)
    exec 3>"$dir/in0"
    sleep "$gap"
    "$bin" member --group "$group" --engine "$engine" "$@" <"$dir/in1" >"$dir/out1" 2>"$dir/err1" &
    pids+=($!)
    exec 4>"$dir/in1"
    verdict="fail"
    why=""
    if wait_for "$dir/out0" 'members [0-9]+, [0-9]+ ' 15 && wait_for "$dir/out1" 'members [0-9]+, [0-9]+ ' 15; then
        id0=$(grep -oE '^member [0-9]+' "$dir/err0" | head -1 | cut -d' ' -f2)
        id1=$(grep -oE '^member [0-9]+' "$dir/err1" | head -1 | cut -d' ' -f2)
        orderer=$(grep -E 'members [0-9]+, [0-9]+ ' "$dir/out1" | tail -1 | grep -oE '(sequencer|token site) [0-9]+' | grep -oE '[0-9]+$')
        if [[ "$orderer" == "$id0" ]]; then s=0; v=1; else s=1; v=0; fi
        if [[ -n "${CHAT:-}" ]]; then
            # A chat before the leave: a line from each, delivered at both.
            echo "hello-0" >&3
            echo "hello-1" >&4
            for k in 0 1; do wait_for "$dir/out$k" 'hello-0$' 5; wait_for "$dir/out$k" 'hello-1$' 5; done
        fi
        sleep "${DWELL:-0}"
        kill -INT "${pids[$s]}"
        # The leaver must be gone by itself (the runtime gives a leave 5 s).
        for _ in $(seq 1 160); do kill -0 "${pids[$s]}" 2>/dev/null || break; sleep 0.05; done
        if kill -0 "${pids[$s]}" 2>/dev/null; then
            why="the leaver did not exit"
        fi
        line="after-$run-$RANDOM"
        if (( v == 0 )); then echo "$line" >&3; else echo "$line" >&4; fi
        vid=$([[ $v == 0 ]] && echo "$id0" || echo "$id1")
        if wait_for "$dir/out$v" "^$vid: $line\$" 5; then
            [[ -z "$why" ]] && verdict="ok"
        else
            why="${why:+$why; }the survivor did not deliver its line"
        fi
        leaver_err=$(grep -E 'not confirmed|error' "$dir/err$s" | head -1)
        survivor_note=$(grep -E 'failed|reset|majority' "$dir/out$v" "$dir/err$v" | head -1)
        echo "run $run: $verdict (orderer $orderer = process $s, survivor $vid) $why ${leaver_err:+| leaver: $leaver_err} ${survivor_note:+| survivor: $survivor_note}"
    else
        echo "run $run: fail (no group of two formed)"
        tail -3 "$dir/out0" "$dir/out1" "$dir/err0" "$dir/err1"
    fi
    [[ $verdict == ok ]] && passed=$((passed + 1))
    exec 3>&- 4>&-
    for p in "${pids[@]}"; do
        kill -INT "$p" 2>/dev/null
        for _ in $(seq 1 120); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
        kill -9 "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    pids=()
done
echo "passed $passed of $runs ($engine, started ${gap}s apart)"
