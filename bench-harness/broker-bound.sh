#!/usr/bin/env bash
# Is the broker core the binding limit? One Skein shard pinned to CPU 0, the native
# driver first on CPU 1 alone with the workload's one producer (what suite.sh and ab.sh
# measure), then on CPUs 1-N with PRODUCERS producers, each with its own connection and
# requests in flight. If the rate grows with more producers, the first run measured
# the producer's pipeline (requests in flight over a round trip), not the broker; if it
# grows only with more generator cores, the generator's CPU. Each run prints its rate,
# the broker core's utilisation (its CPU seconds over the measured window) and the
# generator's CPU per GB; the raw limits are printed at the start and the end. On a
# 2-core machine the wider generator is more producers on CPU 1 alone.
#   usage: bench-harness/broker-bound.sh SKEIN [DURATION_SECS] [GENERATOR_CPUS] [PRODUCERS]
# GENERATOR_CPUS is a taskset list (default 1-N, N = min(nproc - 1, 7)); PRODUCERS
# defaults to 4. Results go to bench-harness/results/bound-<date>/ (or $OUT_DIR).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=steady-state.sh
source "$root/bench-harness/steady-state.sh"
if [ $# -lt 1 ]; then
  echo "usage: bench-harness/broker-bound.sh SKEIN [DURATION_SECS] [GENERATOR_CPUS] [PRODUCERS]" >&2
  exit 2
fi
skein="$1"; duration="${2:-15}"
cpus=$(nproc)
if [ "$cpus" -lt 2 ]; then
  echo "broker-bound.sh needs 2 CPUs or more (CPU 0 for the broker, the rest for the generator); this machine has $cpus" >&2
  exit 2
fi
last=$((cpus - 1)); [ "$last" -gt 7 ] && last=7
wide="${3:-1-$last}"; producers="${4:-4}"
out="${OUT_DIR:-$root/bench-harness/results/bound-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
bench_workdir

# A workload file: PARTITIONS partitions of 1 KiB messages at max rate, PRODUCERS
# producers, acks=all as the shipped max-rate workloads.
#   workload NAME PARTITIONS PRODUCERS
workload() {
  cat > "$work/$1.toml" <<EOF
name = "$1"
partitions_per_topic = $2
producers_per_topic = $3
message_size = 1024
producer_rate = "max"
acks = "all"
linger_ms = 1
warmup_secs = 5
duration_secs = $duration
EOF
  echo "$work/$1.toml"
}

# One run: a fresh broker on CPU 0, the generator on GENERATOR_CPUS.
#   measure LABEL WORKLOAD GENERATOR_CPUS
measure() {
  local label="$1" file="$2" generator="$3"
  taskset -c 0 "$skein" start --cores 0-0 --data-dir "$work/data" --listener 127.0.0.1:19092 --admin-listener off \
    > "$work/log" 2>&1 &
  broker_pid=$!
  for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/19092) 2>/dev/null && break; sleep 0.1; done
  if ! kill -0 "$broker_pid" 2>/dev/null; then
    cat "$work/log" >&2
    echo "the broker did not start" >&2
    exit 1
  fi
  taskset -c "$generator" "$skein" bench run "$file" --bootstrap-server 127.0.0.1:19092 --broker-pid "$broker_pid" \
    --label "$label" --duration-secs "$duration" --driver native --out "$out/$label.json" > "$out/$label.log" 2>&1 \
    || { cat "$out/$label.log" >&2; exit 1; }
  stop_broker "$broker_pid"; broker_pid=""
  rm -rf "$work/data"
  python3 - "$label" "$generator" "$out/$label.json" <<'PY'
import json, sys
label, generator, path = sys.argv[1], sys.argv[2], sys.argv[3]
r = json.load(open(path))
busy = (r.get("broker_cpu_secs") or 0) / r["duration_secs"]
gen = r.get("driver_cpu_secs_per_gb")
gen = "-" if gen is None else f"{gen:.2f}"
lat = r["publish_latency"]
print(f"{label:<28} generator CPUs {generator:<5} {r['published_mb_per_sec']:8.0f} MB/s produced "
      f"{r['consumed_mb_per_sec']:8.0f} MB/s consumed  broker core {busy:4.2f} busy  "
      f"publish p50 {lat['p50_us'] / 1000:.2f} ms p99 {lat['p99_us'] / 1000:.2f} ms  generator CPU-s/GB {gen}")
PY
  drain_device
}

raw_limits start "$work"
drain_device
one=$(workload one-partition-one-producer 1 1)
many=$(workload "one-partition-$producers-producers" 1 "$producers")
wide16=$(workload "16-partitions-$producers-producers" 16 "$producers")
measure 1p-1producer-cpu1 "$one" 1
measure "1p-${producers}producers-wide" "$many" "$wide"
measure 1p-1producer-cpu1-again "$one" 1
measure "1p-${producers}producers-wide-again" "$many" "$wide"
measure "16p-${producers}producers-wide" "$wide16" "$wide"
raw_limits end "$work"
echo "results in $out"
