#!/usr/bin/env bash
# Side-by-side runs of ocrig-payload workloads and the real tools they stand for (Debian's
# rt-tests hackbench, dbench 4.0, sysbench 1.0): prints each pair's median and the ratio
# ours/peer in the peer's own unit (time: lower is better; MB/s: higher is better).
#
#   guest-payload/benches/compare-peers.sh [REPS]      (default 3 repetitions, alternating)
#
# Needs: hackbench (rt-tests), dbench, sysbench, python3. Builds the payload in release mode
# into $CARGO_TARGET_DIR (default /work/target-workloads). Takes about 4 minutes on 2 CPUs with
# REPS=3. Env: DB_SECS (dbench -t, 6), DISK_DIR (disk-backed dbench directory).
set -euo pipefail

REPS=${1:-3}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/target-workloads}
(cd "$HERE" && cargo build --release -q -p ocrig-payload)
P=$CARGO_TARGET_DIR/release/ocrig-payload
for tool in hackbench dbench sysbench python3 /usr/bin/time; do
    command -v "$tool" >/dev/null || { echo "missing $tool" >&2; exit 1; }
done
WORK=$(mktemp -d /tmp/ocrig-peers.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

json() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

# run SIDE EXTRACT CMD...: runs CMD under /usr/bin/time, appends "<result> <cpu seconds>" to
# $WORK/SIDE, where <result> is CMD's stdout piped through EXTRACT (a shell snippet).
run() {
    local side=$1 extract=$2; shift 2
    local value
    value=$(/usr/bin/time -f '%U %S' -o "$WORK/time" "$@" 2>/dev/null | bash -c "$extract")
    echo "$value $(awk '{print $1 + $2}' "$WORK/time")" >>"$WORK/$side"
}

# row NAME UNIT: medians of both sides' results and CPU times, then clears them. The CPU-time
# ratio is the robust one on a loaded machine (it ignores time spent preempted).
row() {
    python3 - "$1" "$2" "$WORK/ours" "$WORK/peer" <<'PY'
import statistics, sys
name, unit, fo, fp = sys.argv[1:]
def load(f):
    rows = [tuple(map(float, l.split())) for l in open(f) if l.strip()]
    return statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
(o, oc), (p, pc) = load(fo), load(fp)
print(f"{name:<46} {unit:<4} ours {o:9.3f} peer {p:9.3f} ratio {o/p:5.2f} | cpu s ours {oc:6.2f} peer {pc:6.2f} ratio {oc/max(pc,1e-9):5.2f}")
PY
    rm -f "$WORK/ours" "$WORK/peer"
}

echo "== hackbench (Time, seconds; lower is better)"
hb() { # label, our flags, the peer's flags
    local label=$1 ours_flags=$2 peer_flags=$3
    for _ in $(seq "$REPS"); do
        # shellcheck disable=SC2086
        run ours "$(declare -f json); json '[\"time_s\"]'" $P hackbench $ours_flags
        # shellcheck disable=SC2086
        run peer "awk '/^Time:/ {print \$2}'" hackbench $peer_flags
    done
    row "hackbench $label" s
}
hb "-g 10 -l 100 (socket, process)" "--groups 10 --loops 100" "-g 10 -l 100"
hb "-g 8 -l 200 --pipe --threads" "--groups 8 --loops 200 --pipe --threads" "-g 8 -l 200 -p -T"
hb "-g 4 -l 200 -s 1000 (socket, process)" "--groups 4 --loops 200 --datasize 1000" "-g 4 -l 200 -s 1000"

# dbench twice: on a disk-backed directory (the real thing, but fsync and writeback of a shared
# disk make it noisy) and on tmpfs (the replay engines alone: no device, fsync is free).
# dbench 4.00 -t T: warm-up W = T/5 (integer), ended at its first 1-second tick past W; then it
# reports the throughput of its last tick before T, i.e. T-1 seconds (the tick after would be
# past T). Ours gets the same window: --warmup W --seconds T-1.
LOAD=/usr/share/dbench/client.txt
DB_SECS=${DB_SECS:-6}
DB_WARM=$((DB_SECS / 5))
DB_MEAS=$((DB_SECS - 1))
DISK_DIR=${DISK_DIR:-$WORK}
SHM_DIR=$(mktemp -d /dev/shm/ocrig-peers.XXXXXX 2>/dev/null || echo "$WORK")
trap 'rm -rf "$WORK" "$SHM_DIR"' EXIT
for where in "$DISK_DIR" "$SHM_DIR"; do
    fs=$(stat -f -c %T "$where")
    echo "== dbench, $LOAD on $where ($fs) (Throughput, MB/s; higher is better)"
    for clients in 1 2; do
        for _ in $(seq "$REPS"); do
            mkdir -p "$where/d-ours" "$where/d-peer"
            run ours "$(declare -f json); json '[\"mb_per_sec\"]'" \
                $P dbench --dir "$where/d-ours" --loadfile $LOAD --clients $clients --seconds "$DB_MEAS" --warmup "$DB_WARM"
            run peer "awk '/^Throughput/ {print \$2}'" dbench -D "$where/d-peer" -c $LOAD -t "$DB_SECS" $clients
            rm -rf "$where/d-ours" "$where/d-peer"
        done
        row "dbench $clients client(s), ${DB_SECS}s, $fs" MB/s
    done
done

echo "== sysbench mutex (total time, seconds; lower is better)"
sb() { # threads num locks loops
    for _ in $(seq "$REPS"); do
        run ours "$(declare -f json); json '[\"time_s\"]'" \
            $P mutex --algo pthread --threads "$1" --mutex-num "$2" --mutex-locks "$3" --mutex-loops "$4"
        run peer "awk '/total time:/ {sub(\"s\",\"\",\$3); print \$3}'" \
            sysbench mutex --threads="$1" --mutex-num="$2" --mutex-locks="$3" --mutex-loops="$4" run
    done
    row "mutex threads=$1 num=$2 locks=$3 loops=$4" s
}
sb 2 4096 50000 10000
sb 4 4096 50000 10000
sb 4 1 1000000 0
