#!/usr/bin/env bash
# Side-by-side runs of ocrig-payload workloads and the real tools they stand for (Debian's
# rt-tests hackbench, dbench 4.0, sysbench 1.0), at equal parameters, alternating ours / peer
# in one run. Prints per row the medians of both sides and two ratios, ours / peer, each the
# median over the repetitions of the ratio of one adjacent ours/peer pair (so a slow spell of
# the machine, which hits both sides of a pair, cancels), then the pairs' ratios:
#   wall — in the peer's own unit: time (hackbench, mutex; lower is better) or MB/s (dbench;
#          higher is better);
#   cpu  — CPU seconds (user + sys, the process and its reaped children) for the same work:
#          per run for hackbench and mutex, per MB moved for dbench (both sides run the same
#          wall time, so this is CPU cost per unit of work).
# A benchmark, not a test. On a shared machine run it under `flock /work/guest.lock`.
# Every row lasts long enough (>= ~1 s a run; sysbench mutex rows used to take 0.17 s, and two
# runs of the script disagreed by 20 % on them) and repeats 5 times by default, so two runs of
# the script can agree within a few per cent per row on a quiet machine.
#
#   guest-payload/benches/compare-peers.sh [REPS]      (default 5 repetitions per row)
#
# Needs: hackbench (rt-tests), dbench, sysbench, python3 (all installed by scripts/setup).
# Builds the payload in release mode into $CARGO_TARGET_DIR (default: the workspace target/).
# Env: DB_SECS (dbench -t, default 20), EXT4_DIR (an ext4 directory to use instead of a
# loop-mounted image), ROWS (a regular expression: only rows whose label matches).
set -euo pipefail

REPS=${1:-5}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HERE/target}
(cd "$HERE" && cargo build --release -q -p ocrig-payload --bin ocrig-payload)
P=$CARGO_TARGET_DIR/release/ocrig-payload
for tool in hackbench dbench sysbench python3; do
    command -v "$tool" >/dev/null || { echo "missing $tool (run scripts/setup)" >&2; exit 1; }
done
ROWS=${ROWS:-.}
WORK=$(mktemp -d /tmp/ocrig-peers.XXXXXX)
SHM_DIR=$(mktemp -d /dev/shm/ocrig-peers.XXXXXX)
MNT=""
cleanup() {
    [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
    rm -rf "$WORK" "$SHM_DIR"
}
trap cleanup EXIT

# measure OUT CMD...: runs CMD, writes "<stdout>\n<cpu seconds>" into OUT (CPU from wait4's
# rusage of CMD: itself plus every child it reaped).
measure() {
    python3 - "$@" <<'PY'
import os, subprocess, sys
out, cmd = sys.argv[1], sys.argv[2:]
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
text = p.stdout.read().decode()
_, status, ru = os.wait4(p.pid, 0)
if status != 0:
    sys.exit(f"{cmd[0]} failed ({status:#x}): {text[-500:]}")
open(out, "w").write(text + "\n@@cpu " + str(ru.ru_utime + ru.ru_stime) + "\n")
PY
}

# value FILE KIND: the result in FILE as KIND says (ours-json KEY, hb, sb, db).
value() {
    python3 - "$@" <<'PY'
import json, re, sys
f, kind = sys.argv[1], sys.argv[2]
text = open(f).read()
body, cpu = text.rsplit("@@cpu ", 1)
if kind == "json":
    v = json.loads(body)[sys.argv[3]]
elif kind == "hb":
    v = float(re.search(r"^Time: *([0-9.]+)", body, re.M).group(1))
elif kind == "sb":
    v = float(re.search(r"total time: *([0-9.]+)s", body).group(1))
elif kind == "db":
    v = float(re.search(r"^Throughput ([0-9.]+) MB/sec", body, re.M).group(1))
print(v, float(cpu))
PY
}

# row LABEL UNIT PER_MB: medians and ratios of $WORK/ours and $WORK/peer, then clears them.
row() {
    python3 - "$1" "$2" "$3" "$WORK/ours" "$WORK/peer" <<'PY'
import statistics, sys
label, unit, per_mb, fo, fp = sys.argv[1:]
def load(f):
    rows = [tuple(map(float, l.split())) for l in open(f) if l.strip()]
    # dbench: CPU per MB/s of the same run (both sides run the same time).
    return [r[0] for r in rows], [r[1] / r[0] if per_mb == "1" else r[1] for r in rows]
(ov, oc), (pv, pc) = load(fo), load(fp)
med = statistics.median
wall = [a / b for a, b in zip(ov, pv)]
cpu = [a / b for a, b in zip(oc, pc)]
cu = "cpu s/(MB/s)" if per_mb == "1" else "cpu s"
print(f"{label:<52} {unit:<4} ours {med(ov):9.3f} peer {med(pv):9.3f} wall {med(wall):5.2f} | {cu} ours {med(oc):7.3f} peer {med(pc):7.3f} cpu {med(cpu):5.2f}"
      f"   (wall ratios {' '.join(f'{x:.2f}' for x in wall)}; ours {' '.join(f'{x:.3f}' for x in ov)}; peer {' '.join(f'{x:.3f}' for x in pv)})")
PY
    rm -f "$WORK/ours" "$WORK/peer"
}

wanted() { [[ "$1" =~ $ROWS ]]; }

echo "== hackbench (Time, seconds; lower is better)"
hb() { # label, our flags, the peer's flags
    wanted "hackbench $1" || return 0
    for _ in $(seq "$REPS"); do
        # shellcheck disable=SC2086
        measure "$WORK/out" "$P" hackbench $2
        value "$WORK/out" json time_s >>"$WORK/ours"
        # shellcheck disable=SC2086
        measure "$WORK/out" hackbench $3
        value "$WORK/out" hb >>"$WORK/peer"
    done
    row "hackbench $1" s 0
}
hb "-g 10 -l 1000 socket process" "--groups 10 --loops 1000" "-g 10 -l 1000"
hb "-g 10 -l 1000 socket thread" "--groups 10 --loops 1000 --threads" "-g 10 -l 1000 -T"
hb "-g 10 -l 1000 pipe process" "--groups 10 --loops 1000 --pipe" "-g 10 -l 1000 -p"
hb "-g 10 -l 1000 pipe thread" "--groups 10 --loops 1000 --pipe --threads" "-g 10 -l 1000 -p -T"

echo "== sysbench mutex (total time, seconds; lower is better)"
sb() { # threads num locks loops
    wanted "mutex threads=$1 num=$2 locks=$3 loops=$4" || return 0
    for _ in $(seq "$REPS"); do
        measure "$WORK/out" "$P" mutex --algo pthread --threads "$1" --num "$2" --locks "$3" --loops "$4"
        value "$WORK/out" json time_s >>"$WORK/ours"
        measure "$WORK/out" sysbench mutex --threads="$1" --mutex-num="$2" --mutex-locks="$3" --mutex-loops="$4" run
        value "$WORK/out" sb >>"$WORK/peer"
    done
    row "mutex threads=$1 num=$2 locks=$3 loops=$4" s 0
}
sb 2 4096 200000 10000
sb 4 4096 100000 10000
sb 4 1 5000000 0

# dbench 4.00 -t T: warm-up W = T/5 (integer) ends at its first 1-second tick past W with
# every client active; it then measures T seconds and reports the throughput of its last tick
# inside them, i.e. over T - 1 seconds. Ours gets the same window: --warmup W+1 (its warm-up
# ends at W+1 at the earliest, as dbench's tick past W) --seconds T-1.
LOAD=/usr/share/dbench/client.txt
DB_SECS=${DB_SECS:-20}
DB_WARM=$((DB_SECS / 5 + 1))
DB_MEAS=$((DB_SECS - 1))
EXT4=${EXT4_DIR:-}
if [ -z "$EXT4" ]; then
    # A file system of its own, on a loop-mounted image (no other writer shares it).
    if truncate -s 4G "$WORK/ext4.img" && mkfs.ext4 -q -F "$WORK/ext4.img" \
        && mkdir -p "$WORK/ext4" && mount -o loop "$WORK/ext4.img" "$WORK/ext4"; then
        MNT=$WORK/ext4
        EXT4=$MNT
    else
        EXT4=$WORK  # fall back to a directory on the root file system
    fi
fi
for where in "$SHM_DIR" "$EXT4"; do
    fs=$(stat -f -c %T "$where")
    [ "$where" = "$MNT" ] && fs="$fs (loop image)"
    echo "== dbench, $LOAD on $where, $fs (Throughput, MB/s; higher is better)"
    for clients in 1 2; do
        wanted "dbench $clients client(s) $fs" || continue
        for _ in $(seq "$REPS"); do
            mkdir -p "$where/d-ours" "$where/d-peer"
            measure "$WORK/out" "$P" dbench --dir "$where/d-ours" --loadfile $LOAD --clients $clients \
                --seconds "$DB_MEAS" --warmup "$DB_WARM"
            value "$WORK/out" json mb_per_sec >>"$WORK/ours"
            measure "$WORK/out" dbench -D "$where/d-peer" -c $LOAD -t "$DB_SECS" $clients
            value "$WORK/out" db >>"$WORK/peer"
            rm -rf "$where/d-ours" "$where/d-peer"
        done
        row "dbench $clients client(s) -t $DB_SECS $fs" MB/s 1
    done
done
