#!/usr/bin/env bash
# Runs shipped workloads against Skein and Apache Kafka in alternation (A B A B ...),
# each broker pinned to CPU 0 and the load generator to CPU 1, and prints the
# comparison with each side's median and spread over rounds. It measures steady state
# (steady-state.sh): each broker is warmed until its publish p99 settles before the
# measured run, the device drains after each broker stops, each round says whether it
# met its target rate, and the machine's raw limits are printed at the start and the end.
#   usage: bench-harness/suite.sh [ROUNDS>=3] [DURATION_SECS] [WORKLOAD...]
# DRIVER=librdkafka|native picks the load generator (default librdkafka);
# WARMUP_PASS_SECS (default 10) the length of a warm-up pass.
# Results (JSON, SVG) go to bench-harness/results/<date>/, warm-up passes to its warm-up/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=steady-state.sh
source "$root/bench-harness/steady-state.sh"
usage="bench-harness/suite.sh [ROUNDS>=3] [DURATION_SECS] [WORKLOAD...]"
rounds="${1:-3}"; duration="${2:-30}"; shift $(( $# > 2 ? 2 : $# )) || true
require_rounds "$rounds" "$usage"
workloads=("$@")
if [ ${#workloads[@]} -eq 0 ]; then
  workloads=("$root"/bench-harness/workloads/*.toml)
fi
out="$root/bench-harness/results/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
bench_build
bench_workdir

raw_limits start "$work"
drain_device
for workload in "${workloads[@]}"; do
  name="$(basename "$workload" .toml)"
  for round in $(seq 1 "$rounds"); do
    for broker in skein kafka; do
      start_pinned "$broker" "$work/$broker" --admin-listener off
      warm_up "$broker" "$port" "$broker_pid" "$workload" "$out/warm-up" "$name-$broker-$round"
      taskset -c 1 "$skein" bench run "$workload" --bootstrap-server 127.0.0.1:$port --broker-pid "$broker_pid" \
        --label "$broker" --duration-secs "$duration" --driver "${DRIVER:-librdkafka}" \
        --out "$out/$name-$broker-$round.json" > /dev/null
      report_round "$name-$broker-$round" "$out/$name-$broker-$round.json"
      stop_broker "$broker_pid"; broker_pid=""
      rm -rf "${work:?}/$broker"
      drain_device
    done
  done
  echo "== $name"
  "$skein" bench compare "$out/$name"-*.json --svg "$out/$name.svg"
done
raw_limits end "$work"
echo "results in $out"
