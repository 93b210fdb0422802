#!/usr/bin/env bash
# Skein against Apache Kafka (4.4 from Maven Central) as the partition count grows, in
# one run on this machine: every figure printed as Skein / Kafka, and each step's JSON
# line kept under bench-harness/results/scale-<stamp>/.
#
#   bench-harness/scale.sh [SECTION...]
#
# Sections (default: partitions latency groups):
#   partitions  TOPICS x PARTITIONS (100 x 100) on one node: CreateTopics answered,
#               listed and served; one record to each partition (acks=all, librdkafka);
#               full Metadata; one record read back from each; disk and memory; a
#               kill -9 and the time until it listens and serves every partition again;
#               a clean stop and the same; then a trickle to every partition at once
#               (TRICKLE_RATE records a second over all, for TRICKLE_SECS) and the
#               memory it costs.
#   latency     the same load (LATENCY_RATE msg/s of 1 KiB, acks=all, one producer,
#               one consumer group) over 16, 1,000 and 10,000 partitions: publish and
#               end-to-end p50/p99/p999 and broker CPU per GB.
#   groups      GROUPS consumer groups each committing every second on one node, the
#               memory that costs, and after a kill -9 the time until every group's
#               offsets are served again.
#   cluster     three nodes and CLUSTER_PARTITIONS partitions of replication factor 3:
#               creation, propagation to every node, the metadata log, the failover of
#               a kill -9'd node's leaderships, a controlled shutdown.
#
# Skein runs as a user starts it (`skein start`, a shard per core); Kafka with a 1 GiB
# heap (KAFKA_HEAP), untuned, on the same cores. BROKERS ("skein kafka") picks who runs.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(partitions latency groups)
brokers=(${BROKERS:-skein kafka})
topics="${TOPICS:-100}"
partitions="${PARTITIONS:-100}"
trickle_rate="${TRICKLE_RATE:-10000}"
trickle_secs="${TRICKLE_SECS:-30}"
step_timeout="${STEP_TIMEOUT_SECS:-600}"
export KAFKA_START_TIMEOUT_SECS="${KAFKA_START_TIMEOUT_SECS:-900}"

cargo build --release --quiet
skein="$root/target/release/skein"
stamp="$(date +%Y%m%d-%H%M%S)"
out="$root/bench-harness/results/scale-$stamp"
mkdir -p "$out"
work="$(mktemp -d "${SCALE_DIR:-/tmp}/skein-scale.XXXXXX")"
broker_pid=""
cleanup() {
  [ -n "$broker_pid" ] && kill -9 "$broker_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
echo "scale run $stamp: ${sections[*]} on $(nproc) cores; results in $out; data under $work"

# Starts BROKER (skein or kafka) on DIR (a restart when DIR holds one) and waits until
# it accepts connections. Sets broker_pid, port and listen_ms (from the start to the
# first accepted connection).
#   start_broker BROKER DIR
start_broker() {
  local broker="$1" dir="$2" started
  mkdir -p "$dir"
  started=$(date +%s%N)
  case "$broker" in
    skein)
      "$skein" start --data-dir "$dir/data" --listener 127.0.0.1:19092 --admin-listener 127.0.0.1:19644 \
        >> "$dir/log" 2>&1 &
      broker_pid=$!; port=19092
      until (exec 3<>/dev/tcp/127.0.0.1/19092) 2>/dev/null; do
        kill -0 "$broker_pid" 2>/dev/null || { tail -20 "$dir/log"; exit 1; }
        sleep 0.02
      done
      ;;
    kafka)
      broker_pid=$("$root/bench-harness/peers/kafka/run-kafka.sh" "$dir" 19094 "0-$(($(nproc) - 1))" | tail -1)
      port=19094
      ;;
  esac
  listen_ms=$(( ($(date +%s%N) - started) / 1000000 ))
}

# The data directory of BROKER under DIR.
data_of() {
  case "$1" in skein) echo "$2/data" ;; kafka) echo "$2/logs" ;; esac
}

# SIGTERM and wait until the process is gone; sets stop_ms.
stop_broker() {
  local started
  started=$(date +%s%N)
  kill "$broker_pid" 2>/dev/null || true
  while kill -0 "$broker_pid" 2>/dev/null; do sleep 0.05; done
  stop_ms=$(( ($(date +%s%N) - started) / 1000000 ))
  broker_pid=""
}

crash_broker() {
  kill -9 "$broker_pid" 2>/dev/null || true
  while kill -0 "$broker_pid" 2>/dev/null; do sleep 0.02; done
  broker_pid=""
}

# Resident memory of the broker, KiB.
rss_kib() {
  awk '/^VmRSS:/ { print $2 }' "/proc/$broker_pid/status"
}

# One `skein bench scale` step against the running broker; its JSON line goes to
# $out/BROKER.jsonl and to stdout.
#   step BROKER STEP [ARGS...]
step() {
  local broker="$1" name="$2"
  shift 2
  "$skein" bench scale "$name" --bootstrap-server "127.0.0.1:$port" --topics "$topics" --partitions "$partitions" \
    --timeout-secs "$step_timeout" "$@" | tee -a "$out/$broker.jsonl"
}

# A figure of its own, as a JSON line.
#   record BROKER NAME VALUE
record() {
  echo "{\"step\":\"$2\",\"value\":$3}" | tee -a "$out/$1.jsonl"
}

section_partitions() {
  local broker dir
  for broker in "${brokers[@]}"; do
    echo "== partitions: $broker, $topics x $partitions"
    dir="$work/$broker-partitions"
    start_broker "$broker" "$dir"
    local rss_empty
    rss_empty=$(rss_kib)
    step "$broker" create
    step "$broker" produce
    step "$broker" metadata --rounds 5
    step "$broker" consume
    sleep 5
    record "$broker" disk_kib "$(du -sk "$(data_of "$broker" "$dir")" | cut -f1)"
    record "$broker" rss_empty_kib "$rss_empty"
    record "$broker" rss_kib "$(rss_kib)"
    crash_broker
    start_broker "$broker" "$dir"
    record "$broker" crash_listen_ms "$listen_ms"
    step "$broker" serving --as crash_serving
    stop_broker
    record "$broker" stop_ms "$stop_ms"
    start_broker "$broker" "$dir"
    record "$broker" clean_listen_ms "$listen_ms"
    step "$broker" serving --as clean_serving
    record "$broker" rss_restarted_kib "$(rss_kib)"
    step "$broker" trickle --rate "$trickle_rate" --duration-secs "$trickle_secs" --broker-pid "$broker_pid"
    record "$broker" disk_after_trickle_kib "$(du -sk "$(data_of "$broker" "$dir")" | cut -f1)"
    stop_broker
    rm -rf "$dir"
  done
}

for section in "${sections[@]}"; do
  case "$section" in
    partitions) section_partitions ;;
    latency|groups|cluster) echo "section $section: see below" ;;
    *) echo "unknown section $section" >&2; exit 2 ;;
  esac
done
python3 "$root/bench-harness/scale-report.py" "$out" "${brokers[@]}"
