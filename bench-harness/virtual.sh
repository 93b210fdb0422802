#!/usr/bin/env bash
# Virtual brokers against the shared port (A B A B ...), on one node of two shards
# (CPUs 0 and 1): `base` serves every client on the node's port, so a request for a
# partition the other shard owns crosses shards; `skein` runs with --virtual-brokers,
# so clients reach each partition's own shard. Prints, per round, cross-shard
# partition operations per produce and fetch request (from /metrics), then `compare`'s
# ratios of throughput, latency and CPU per GB, in steady state (steady-state.sh).
#   usage: bench-harness/virtual.sh SKEIN [ROUNDS>=3] [DURATION_SECS] [WORKLOAD]
# DRIVER=librdkafka|native picks the load generator (default native). Results go to
# bench-harness/results/virtual-<date>/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=steady-state.sh
source "$root/bench-harness/steady-state.sh"
usage="bench-harness/virtual.sh SKEIN [ROUNDS>=3] [DURATION_SECS] [WORKLOAD]"
if [ $# -lt 1 ]; then
  echo "usage: $usage" >&2
  exit 2
fi
skein="$1"; rounds="${2:-3}"; duration="${3:-20}"
require_rounds "$rounds" "$usage"
workload="${4:-$root/bench-harness/workloads/1-topic-16-partitions-1kb-fixed-rate.toml}"
export DRIVER="${DRIVER:-native}"
out="$root/bench-harness/results/virtual-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
bench_workdir
name="$(basename "$workload" .toml)"
# Partition operations sent to another shard, and produce and fetch requests, so far.
counts() {
  curl -s http://127.0.0.1:19644/metrics | awk '
    /^skein_cross_shard_messages_total/ { hops += $2 }
    /^skein_requests_total\{.*api_key="(0|1)"\}/ { requests += $2 }
    END { printf "%d %d\n", hops, requests }'
}
raw_limits start "$work"
drain_device
for round in $(seq 1 "$rounds"); do
  for label in base skein; do
    extra=(); [ "$label" = skein ] && extra=(--virtual-brokers 19200)
    "$skein" start --cores 0-1 --data-dir "$work/data" --listener 127.0.0.1:19092 \
      --admin-listener 127.0.0.1:19644 "${extra[@]}" > "$work/log" 2>&1 &
    broker_pid=$!
    for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/19092) 2>/dev/null && break; sleep 0.1; done
    warm_up "$label" 19092 "$broker_pid" "$workload" "$out/warm-up" "$name-$label-$round"
    read -r hops_before requests_before < <(counts)
    "$skein" bench run "$workload" --bootstrap-server 127.0.0.1:19092 --broker-pid "$broker_pid" \
      --label "$label" --duration-secs "$duration" --driver "$DRIVER" \
      --out "$out/$name-$label-$round.json" > /dev/null
    read -r hops_after requests_after < <(counts)
    report_round "$name-$label-$round" "$out/$name-$label-$round.json"
    python3 -c "h, r = $hops_after - $hops_before, $requests_after - $requests_before; print(f'  $label-$round: cross-shard operations per produce/fetch request: {h / max(r, 1):.3f} ({h} of {r})')" \
      | tee -a "$out/hops.txt"
    stop_broker "$broker_pid"; broker_pid=""
    rm -rf "$work/data"
    drain_device
  done
done
"$skein" bench compare "$out/$name"-*.json
raw_limits end "$work"
echo "results in $out"
