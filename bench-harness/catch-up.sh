#!/usr/bin/env bash
# Two Skein builds against each other on a consumer catching up from disk: the
# catch-up workload (1 partition, 1 KiB, 100 MB/s produced; the consumer starts 20 s
# late from the first offset, so it reads a backlog of about 2 GB, far beyond the
# 64 MiB cache) with the native driver. Each broker on CPU 0 with its admin endpoint,
# the generator on CPU 1, A B alternated, the device drained between runs. Prints the
# broker's CPU per GB and copies per fetched byte of each run, then `compare`.
#   usage: bench-harness/catch-up.sh OLD_SKEIN NEW_SKEIN [ROUNDS>=3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=steady-state.sh
source "$root/bench-harness/steady-state.sh"
usage="bench-harness/catch-up.sh OLD_SKEIN NEW_SKEIN [ROUNDS>=3]"
if [ $# -lt 2 ]; then
  echo "usage: $usage" >&2
  exit 2
fi
old="$1"; new="$2"; rounds="${3:-3}"
require_rounds "$rounds" "$usage"
skein="$new"
workload="$root/bench-harness/workloads/1-topic-1-partition-1kb-catch-up.toml"
out="$root/bench-harness/results/catch-up-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
bench_workdir
raw_limits start "$work"
drain_device
for round in $(seq 1 "$rounds"); do
  for label in base skein; do
    binary="$old"; [ "$label" = skein ] && binary="$new"
    taskset -c 0 "$binary" start --cores 0-0 --data-dir "$work/data" --listener 127.0.0.1:19092 \
      --admin-listener 127.0.0.1:19644 --cache-mb-per-shard 64 > "$work/log" 2>&1 &
    broker_pid=$!
    for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/19092) 2>/dev/null && break; sleep 0.1; done
    taskset -c 1 "$skein" bench run "$workload" --bootstrap-server 127.0.0.1:19092 --broker-pid "$broker_pid" \
      --label "$label" --driver native --metrics-url http://127.0.0.1:19644/metrics \
      --out "$out/catch-up-$label-$round.json" > "$out/catch-up-$label-$round.log" 2>&1
    report_round "catch-up-$label-$round" "$out/catch-up-$label-$round.json"
    grep -i "cop" "$out/catch-up-$label-$round.log" || true
    stop_broker "$broker_pid"; broker_pid=""
    rm -rf "$work/data"
    drain_device
  done
done
"$skein" bench compare "$out"/catch-up-*.json
raw_limits end "$work"
echo "results in $out"
