#!/usr/bin/env bash
# `skein iotune` against fio on one directory: does Skein's own I/O path (the engine's
# DmaStorage on one glommio io_uring ring, O_DIRECT, fallocated files) get what the
# device gives? fio runs the equivalent jobs (io_uring, direct=1, one job, the same
# block sizes and depths, the same step duration) and each figure is printed beside
# Skein's with the ratio skein/fio.
#   usage: bench-harness/iotune-vs-fio.sh DIR [SIZE_MIB] [DURATION_MS]
# DIR must be on the disk to measure (not tmpfs). SIZE_MIB (default 1024) is the file
# size of both tools, DURATION_MS (default 1000) each step's and each fio job's
# runtime. SKEIN=path picks the binary (default target/release/skein; build it with
# `cargo build --release`). ROUNDS=n (default 1) alternates skein and fio n times and
# prints medians. Exits 2 when fio (Debian package `fio`) or the binary is missing.
# Raw output: bench-harness/results/iotune-vs-fio-<date>/.
#
# The jobs, as iotune runs them:
#   sequential write 512 KiB qd 8   fresh fallocated file, one pass at most (fio: no
#                                   time_based, so it stops at the size or the runtime)
#   sequential read 512 KiB qd 8    a file written whole first, time based
#   random read / write 4 KiB qd 32 the same written file, time based
#   4 KiB write qd 1, p50           fresh fallocated file
#   4 KiB write + fdatasync, p50    fresh fallocated file, --fdatasync=1 (fio times the
#                                   write and the sync apart: their p50s are added)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
usage="bench-harness/iotune-vs-fio.sh DIR [SIZE_MIB] [DURATION_MS]"
if [ $# -lt 1 ]; then
  echo "usage: $usage" >&2
  exit 2
fi
dir="$1"; size_mib="${2:-1024}"; duration_ms="${3:-1000}"; rounds="${ROUNDS:-1}"
skein="${SKEIN:-$root/target/release/skein}"
if ! command -v fio >/dev/null 2>&1; then
  echo "fio is not installed: apt-get install fio (Debian package), then run again" >&2
  exit 2
fi
if [ ! -x "$skein" ]; then
  echo "$skein is missing: cargo build --release (or SKEIN=path)" >&2
  exit 2
fi
if [ ! -d "$dir" ]; then
  echo "$dir is not a directory" >&2
  exit 2
fi
out="$root/bench-harness/results/iotune-vs-fio-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
lock_existed=0; [ -e "$dir/.lock" ] && lock_existed=1
cleanup() {
  rm -f "$dir"/fio-iotune-*.dat
  if [ "$lock_existed" = 0 ]; then rm -f "$dir/.lock"; fi
}
trap cleanup EXIT

# One fio job; its JSON goes to $out/fio-<round>-<name>.json.
fio_job() {
  local round="$1" name="$2"; shift 2
  fio --name="$name" --filename="$dir/fio-iotune-$name.dat" --ioengine=io_uring --direct=1 \
    --size="${size_mib}M" --output-format=json --output="$out/fio-$round-$name.json" "$@" >/dev/null
}

fio_round() {
  local round="$1" runtime="${duration_ms}ms"
  rm -f "$dir"/fio-iotune-*.dat
  fio_job "$round" seqwrite --rw=write --bs=512k --iodepth=8 --fallocate=native --runtime="$runtime"
  rm -f "$dir/fio-iotune-seqwrite.dat"
  # The read file, written whole (reads of fallocated, unwritten space never reach the
  # device), shared by the read and random jobs as iotune's steps share its file.
  fio --name=layout --filename="$dir/fio-iotune-data.dat" --ioengine=io_uring --direct=1 --size="${size_mib}M" \
    --rw=write --bs=1M --iodepth=8 --fallocate=native --end_fsync=1 >/dev/null
  local data=(--filename="$dir/fio-iotune-data.dat" --time_based --runtime="$runtime")
  fio_job "$round" seqread --rw=read --bs=512k --iodepth=8 "${data[@]}"
  fio_job "$round" randread --rw=randread --bs=4k --iodepth=32 "${data[@]}"
  fio_job "$round" randwrite --rw=randwrite --bs=4k --iodepth=32 "${data[@]}"
  rm -f "$dir/fio-iotune-data.dat"
  fio_job "$round" write4k --rw=write --bs=4k --iodepth=1 --fallocate=native --runtime="$runtime"
  rm -f "$dir/fio-iotune-write4k.dat"
  fio_job "$round" fdatasync --rw=write --bs=4k --iodepth=1 --fdatasync=1 --fallocate=native --runtime="$runtime"
  rm -f "$dir/fio-iotune-fdatasync.dat"
}

for round in $(seq 1 "$rounds"); do
  echo "round $round/$rounds: skein iotune" >&2
  "$skein" iotune --data-dir "$dir" --size-mib "$size_mib" --duration-ms "$duration_ms" \
    --out "$out/skein-$round.json" > "$out/skein-$round.txt"
  echo "round $round/$rounds: fio" >&2
  fio_round "$round"
done

python3 - "$out" "$rounds" <<'PY' | tee "$out/summary.txt"
import json, statistics, sys

out, rounds = sys.argv[1], int(sys.argv[2])

def skein(round):
    p = json.load(open(f"{out}/skein-{round}.json"))
    seq = lambda table: next(s["mb_per_s"] for s in p[table] if s["block_bytes"] == 512 << 10 and s["depth"] == 8)
    rand = lambda table: next(s["iops"] for s in p[table] if s["depth"] == 32)
    return {
        "seq_write": seq("sequential_write"),
        "seq_read": seq("sequential_read"),
        "rand_read": rand("random_read"),
        "rand_write": rand("random_write"),
        "write4k_p50": p["small_write_latency"]["latency_us_p50"],
        "fdatasync_p50": p["fdatasync_latency"]["latency_us_p50"],
    }

def fio(round):
    job = lambda name: json.load(open(f"{out}/fio-{round}-{name}.json"))["jobs"][0]
    p50 = lambda lat: lat["percentile"]["50.000000"] / 1000
    sync = job("fdatasync")
    return {
        "seq_write": job("seqwrite")["write"]["bw_bytes"] / 1e6,
        "seq_read": job("seqread")["read"]["bw_bytes"] / 1e6,
        "rand_read": job("randread")["read"]["iops"],
        "rand_write": job("randwrite")["write"]["iops"],
        "write4k_p50": p50(job("write4k")["write"]["clat_ns"]),
        "fdatasync_p50": p50(sync["write"]["clat_ns"]) + p50(sync["sync"]["lat_ns"]),
    }

rows = [
    ("seq_write", "sequential write 512 KiB qd 8, MB/s"),
    ("seq_read", "sequential read 512 KiB qd 8, MB/s"),
    ("rand_read", "random read 4 KiB qd 32, IOPS"),
    ("rand_write", "random write 4 KiB qd 32, IOPS"),
    ("write4k_p50", "4 KiB write qd 1, p50 us"),
    ("fdatasync_p50", "4 KiB write + fdatasync, p50 us"),
]
s = [skein(r) for r in range(1, rounds + 1)]
f = [fio(r) for r in range(1, rounds + 1)]
print(f"{'figure':<38}{'skein':>10}{'fio':>10}{'skein/fio':>11}" + ("   (medians of %d rounds)" % rounds if rounds > 1 else ""))
for key, name in rows:
    a, b = statistics.median(x[key] for x in s), statistics.median(x[key] for x in f)
    print(f"{name:<38}{a:>10.0f}{b:>10.0f}{a / b if b else float('nan'):>11.2f}")
print("latency rows: lower is better (a ratio above 1 means Skein's path is slower)")
PY
echo "raw output: $out" >&2
