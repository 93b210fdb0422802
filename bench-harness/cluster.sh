#!/usr/bin/env bash
# Three Skein nodes against three Apache Kafka 4.1 nodes on this machine, replication
# factor 3, min.insync.replicas=2, acks=all (issue 10, section 6): publish latency
# (p50/p99/p99.9, coordinated-omission corrected) and end-to-end latency (due time to
# a consumer's receipt) at a fixed rate, the three brokers' CPU-seconds per GB produced
# over that window, then the failover time from a SIGKILL of the partition's leader to
# the ack of the first record sent after it.
# Rounds alternate Skein and Kafka; each node of a cluster pinned to a CPU in turn.
#   usage: bench-harness/cluster.sh [ROUNDS] [RATE] [STEADY_SECS]
# Results (one JSON line per run) go to bench-harness/results/cluster-<date>.jsonl.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${1:-3}"; rate="${2:-1000}"; steady="${3:-20}"
cpus="$(nproc)"
out="$root/bench-harness/results/cluster-$(date +%Y%m%d-%H%M%S).jsonl"
mkdir -p "$(dirname "$out")"
cargo build --release --manifest-path "$root/Cargo.toml" >&2
skein="$root/target/release/skein"
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

start_skein() {
  rm -rf "$work/skein"; mkdir -p "$work/skein"
  local voters="1@127.0.0.1:29101,2@127.0.0.1:29111,3@127.0.0.1:29121" pids=()
  for n in 1 2 3; do
    local port=$((29100 + (n - 1) * 10))
    # Skein pins its shard itself (`--cores`); the JVMs are pinned with taskset.
    "$skein" start --node-id "$n" --cores $(( (n - 1) % cpus ))-$(( (n - 1) % cpus )) \
      --listener "127.0.0.1:$port" --controller-listener "127.0.0.1:$((port + 1))" --controller-voters "$voters" \
      --data-dir "$work/skein/n$n" --admin-listener off > "$work/skein/n$n.log" 2>&1 &
    pids+=("$n=$!")
  done
  for n in 1 2 3; do
    for _ in $(seq 1 300); do (exec 3<>"/dev/tcp/127.0.0.1/$((29100 + (n - 1) * 10))") 2>/dev/null && break; sleep 0.1; done
  done
  (IFS=,; echo "${pids[*]}")
}
start_kafka() {
  rm -rf "$work/kafka"; mkdir -p "$work/kafka"
  "$root/bench-harness/peers/kafka/run-kafka-cluster.sh" "$work/kafka" 29200 "$cpus" | tail -1
}
stop() {
  local pids="$1"
  for pair in ${pids//,/ }; do kill "${pair#*=}" 2>/dev/null || true; done
  for pair in ${pids//,/ }; do while kill -0 "${pair#*=}" 2>/dev/null; do sleep 0.1; done; done
}

for round in $(seq 1 "$rounds"); do
  for broker in skein kafka; do
    if [ "$broker" = skein ]; then pids=$(start_skein); bootstrap=127.0.0.1:29100; else pids=$(start_kafka); bootstrap=127.0.0.1:29200; fi
    sleep 5
    "$skein" bench failover --bootstrap-server "$bootstrap" --topic "failover-$round" --pids "$pids" --rate "$rate" \
      --steady-secs "$steady" --after-secs 30 --label "$broker" --out "$out" || echo "$broker round $round failed" >&2
    stop "$pids"
  done
done
echo "== results ($out)"
python3 - "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'broker':8} {'runs':>4} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} {'e2e p50':>8} {'e2e p99':>8} {'e2e p99.9':>9} {'cpu s/GB':>9} {'failover ms':>12}  (median; failover min-max)")
for label in ("skein", "kafka"):
    r = [x for x in runs if x["label"] == label]
    if not r:
        continue
    med = lambda k: statistics.median(x[k] for x in r)
    span = lambda k: f"{min(x[k] for x in r):.0f}-{max(x[k] for x in r):.0f}"
    print(f"{label:8} {len(r):>4} {med('publish_p50_ms'):8.2f} {med('publish_p99_ms'):8.2f} {med('publish_p999_ms'):9.2f} "
          f"{med('e2e_p50_ms'):8.2f} {med('e2e_p99_ms'):8.2f} {med('e2e_p999_ms'):9.2f} {med('cpu_seconds_per_gb'):9.0f} "
          f"{med('failover_ms'):12.0f}  ({span('failover_ms')})")
PY
