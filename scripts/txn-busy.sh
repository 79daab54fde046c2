#!/usr/bin/env bash
# Transactions under CPU starvation: N runs of 3 `rmcast txn-serve --exec 'echo ...'` answering
# one `rmcast txn`, beside BUSY busy loops (`yes > /dev/null`, default 2: one per core here).
# Counts the runs where all 3 replies came and `rmcast txn` exited 0, and prints "x of N".
# Every process it starts is stopped by its own PID, also on Ctrl-C.
#
#   scripts/txn-busy.sh [N] [BUSY]
#
# RMCAST=path/to/rmcast picks the binary; TXN_ARGS adds arguments to `rmcast txn` (e.g.
# "--max 3"; the default is the command's own: the open waits its whole timer).
set -u
N=${1:-20}
BUSY=${2:-2}
EXE=${RMCAST:-target/release/rmcast}
[ -x "$EXE" ] || { echo "no $EXE: cargo build --release first" >&2; exit 2; }
tmp=$(mktemp -d)
pids=()
busy=()
cleanup() {
    for p in "${pids[@]}" "${busy[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}" "${busy[@]}"; do wait "$p" 2>/dev/null; done
    pids=()
    busy=()
}
trap 'cleanup; rm -rf "$tmp"; exit 130' INT TERM
for _ in $(seq "$BUSY"); do
    yes > /dev/null &
    busy+=($!)
done
ok=0
for run in $(seq "$N"); do
    g="txn-busy-$$-$run"
    pids=()
    for id in 11 12 13; do
        "$EXE" txn-serve --group "$g" --id "$id" --exec "echo answer from $id" \
            2> "$tmp/serve-$id.err" > /dev/null &
        pids+=($!)
    done
    # Each server says it is answering before the question goes out.
    for id in 11 12 13; do
        for _ in $(seq 200); do
            grep -q "answering on group" "$tmp/serve-$id.err" 2>/dev/null && break
            sleep 0.05
        done
    done
    "$EXE" txn --group "$g" --id 20 ${TXN_ARGS:-} "question $run" > "$tmp/txn.out" 2> "$tmp/txn.err"
    rc=$?
    replies=$(grep -c '^1[123]: answer from' "$tmp/txn.out")
    summary=$(grep -h 'committed at\|error' "$tmp/txn.out" "$tmp/txn.err" | tr '\n' ' ')
    requests=$(cat "$tmp"/serve-*.err | grep -c '^request')
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    pids=()
    if [ "$replies" -eq 3 ] && [ "$rc" -eq 0 ]; then ok=$((ok + 1)); fi
    echo "run $run: $replies replies, exit $rc, $requests request line(s): $summary"
done
cleanup
rm -rf "$tmp"
echo "$ok of $N runs with 3 replies (beside $BUSY busy loop(s))"
