#!/usr/bin/env bash
# Two Skein builds against each other (A B A B ...), each pinned to CPU 0 and the load
# generator to CPU 1, on one workload: did a change move throughput, latency or CPU?
# Measured in steady state as suite.sh is (steady-state.sh): warm-up until publish p99
# settles, the device drained after each run, the target rate checked per round, raw
# limits at the start and the end.
#   usage: bench-harness/ab.sh OLD_SKEIN NEW_SKEIN [ROUNDS>=3] [DURATION_SECS] [WORKLOAD]
# OLD_SKEIN is labelled "base", NEW_SKEIN "skein"; `compare` prints new/base ratios
# with each side's median and spread. DRIVER=librdkafka|native picks the load generator
# (default librdkafka). Results go to bench-harness/results/ab-<date>/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=steady-state.sh
source "$root/bench-harness/steady-state.sh"
usage="bench-harness/ab.sh OLD_SKEIN NEW_SKEIN [ROUNDS>=3] [DURATION_SECS] [WORKLOAD]"
if [ $# -lt 2 ]; then
  echo "usage: $usage" >&2
  exit 2
fi
old="$1"; new="$2"; rounds="${3:-3}"; duration="${4:-20}"
require_rounds "$rounds" "$usage"
workload="${5:-$root/bench-harness/workloads/1-topic-1-partition-1kb-max.toml}"
# Both sides are driven by the new build's load generator.
skein="$new"
out="$root/bench-harness/results/ab-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
bench_workdir
name="$(basename "$workload" .toml)"
raw_limits start "$work"
drain_device
for round in $(seq 1 "$rounds"); do
  for label in base skein; do
    binary="$old"; [ "$label" = skein ] && binary="$new"
    taskset -c 0 "$binary" start --cores 0-0 --data-dir "$work/data" --listener 127.0.0.1:19092 --admin-listener off \
      > "$work/log" 2>&1 &
    broker_pid=$!
    for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/19092) 2>/dev/null && break; sleep 0.1; done
    warm_up "$label" 19092 "$broker_pid" "$workload" "$out/warm-up" "$name-$label-$round"
    taskset -c 1 "$skein" bench run "$workload" --bootstrap-server 127.0.0.1:19092 --broker-pid "$broker_pid" \
      --label "$label" --duration-secs "$duration" --driver "${DRIVER:-librdkafka}" \
      --out "$out/$name-$label-$round.json" > /dev/null
    report_round "$name-$label-$round" "$out/$name-$label-$round.json"
    stop_broker "$broker_pid"; broker_pid=""
    rm -rf "$work/data"
    drain_device
  done
done
"$skein" bench compare "$out/$name"-*.json
raw_limits end "$work"
echo "results in $out"
