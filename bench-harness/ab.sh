#!/usr/bin/env bash
# Two Skein builds against each other (A B A B ...), each pinned to CPU 0 and the load
# generator to CPU 1, on one workload: did a change move throughput, latency or CPU?
#   usage: bench-harness/ab.sh OLD_SKEIN NEW_SKEIN [ROUNDS] [DURATION_SECS] [WORKLOAD]
# OLD_SKEIN is labelled "base", NEW_SKEIN "skein"; `compare` prints new/base ratios
# with each side's median and spread. Results go to bench-harness/results/ab-<date>/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
old="$1"; new="$2"; rounds="${3:-3}"; duration="${4:-20}"
workload="${5:-$root/bench-harness/workloads/1-topic-1-partition-1kb-max.toml}"
out="$root/bench-harness/results/ab-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
name="$(basename "$workload" .toml)"
for round in $(seq 1 "$rounds"); do
  for label in base skein; do
    binary="$old"; [ "$label" = skein ] && binary="$new"
    rm -rf "$work/data"
    taskset -c 0 "$binary" start --cores 0-0 --data-dir "$work/data" --listener 127.0.0.1:19092 --admin-listener off \
      > "$work/log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/19092) 2>/dev/null && break; sleep 0.1; done
    sleep 2
    taskset -c 1 "$new" bench run "$workload" --bootstrap-server 127.0.0.1:19092 --broker-pid "$pid" --label "$label" \
      --duration-secs "$duration" --out "$out/$name-$label-$round.json" > /dev/null
    kill "$pid"; wait "$pid" 2>/dev/null || true
  done
done
"$new" bench compare "$out/$name"-*.json
echo "results in $out"
