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
#               a clean stop and the same; the CPU it spends idle over 30 s; then a trickle to every partition at once
#               (TRICKLE_RATE records a second over all, for TRICKLE_SECS) and the
#               memory it costs.
#   latency     the same load (LATENCY_RATE msg/s of 1 KiB, acks=all, one producer,
#               one consumer group) over 16, 1,000 and 10,000 partitions: publish and
#               end-to-end p50/p99/p999 and broker CPU per GB. The load generator is
#               LATENCY_DRIVER (librdkafka, or native). librdkafka's producer itself
#               takes tens of milliseconds per record over 1,000 partitions at
#               linger.ms=1 (publish p50 86 ms while Skein answered 99.6% of its produce
#               requests within 5 ms); the native driver shows the broker's side, but
#               Kafka 4.4 closed its connection at 1,000 partitions.
#   idle        the partitions section's idle CPU alone (after one record to each
#               partition), over IDLE_ROUNDS (3) rounds of 30 s: cheap to A/B with
#               SKEIN_BIN.
#   groups      GROUP_COUNT consumer groups each committing every second on one node, the
#               memory that costs, and after a kill -9 the time until every group's
#               offsets are served again.
#   cluster     three nodes and CLUSTER_TOPICS x CLUSTER_PARTITIONS partitions of
#               replication factor CLUSTER_RF (3): creation, propagation to every node,
#               the metadata log, the failover of a kill -9'd node's leaderships, a
#               controlled shutdown. 100,000 partitions: CLUSTER_TOPICS=100
#               CLUSTER_PARTITIONS=1000 CLUSTER_RF=1 BROKERS=skein, as root (each node
#               then holds ~33,000 segment descriptors; the script raises its
#               open-files limit to OPEN_FILES, 200,000, where it may).
#
# FRESH_FS=1 (as root) runs each broker's partitions section on an ext4 filesystem of
# its own (a loop-mounted image of FRESH_FS_GB, 20): ext4 skips inodes deleted in the
# last ~30 s when it allocates, and scanning past the tens of thousands an earlier
# round deleted took CreateTopics of 10,000 partitions from 2.4 s to 8-10 s on the
# same build (`recently_deleted` in ext4_create/ext4_mkdir, 38% of the CPU).
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

# SKEIN_BIN: the broker from a skein binary built elsewhere (an A/B of two commits);
# default: build this tree. The load generators (`skein bench`) are this tree's.
cargo build --release --quiet
driver="$root/target/release/skein"
skein="${SKEIN_BIN:-$driver}"
# Each partition's active segment holds a descriptor: raise the limit where allowed.
ulimit -Hn "${OPEN_FILES:-200000}" 2>/dev/null || true
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
stamp="$(date +%Y%m%d-%H%M%S)"
out="$root/bench-harness/results/scale-$stamp"
mkdir -p "$out"
work="$(mktemp -d "${SCALE_DIR:-/tmp}/skein-scale.XXXXXX")"
broker_pid=""
cluster_pids=""
mounts=()
cleanup() {
  [ -n "$broker_pid" ] && kill -9 "$broker_pid" 2>/dev/null
  local pair
  for pair in ${cluster_pids//,/ }; do kill -9 "${pair#*=}" 2>/dev/null || true; done
  sleep 0.2
  local m
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || true; done
  rm -rf "$work"
}

# With FRESH_FS=1, mounts a new ext4 filesystem (a sparse image under $work) on DIR.
#   fresh_fs DIR
fresh_fs() {
  [ "${FRESH_FS:-0}" = 1 ] || return 0
  mkdir -p "$1"
  truncate -s "${FRESH_FS_GB:-20}G" "$1.img"
  mkfs.ext4 -q -F "$1.img"
  mount -o loop "$1.img" "$1"
  mounts+=("$1")
}

# Unmounts what fresh_fs mounted on DIR and removes DIR and its image.
#   drop_fs DIR
drop_fs() {
  if [ "${FRESH_FS:-0}" = 1 ]; then
    umount "$1"
    rm -f "$1.img"
  fi
  rm -rf "$1"
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

# One `skein bench scale` step against the running broker, over the section's topics
# (TOPICS x PARTITIONS unless ARGS say otherwise); its JSON line goes to
# $out/BROKER.jsonl and to stdout.
#   step BROKER STEP [ARGS...]
step() {
  local broker="$1" name="$2"
  shift 2
  "$driver" bench scale "$name" --bootstrap-server "127.0.0.1:$port" --timeout-secs "$step_timeout" "$@" \
    | tee -a "$out/$broker.jsonl"
}

# `step` over the partitions section's topics.
pstep() {
  local broker="$1" name="$2"
  shift 2
  step "$broker" "$name" --topics "$topics" --partitions "$partitions" "$@"
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
    fresh_fs "$dir"
    start_broker "$broker" "$dir"
    local rss_empty
    rss_empty=$(rss_kib)
    pstep "$broker" create
    pstep "$broker" produce
    pstep "$broker" metadata --rounds 5
    pstep "$broker" consume
    sleep 5
    record "$broker" disk_kib "$(du -sk "$(data_of "$broker" "$dir")" | cut -f1)"
    record "$broker" rss_empty_kib "$rss_empty"
    record "$broker" rss_kib "$(rss_kib)"
    crash_broker
    start_broker "$broker" "$dir"
    record "$broker" crash_listen_ms "$listen_ms"
    pstep "$broker" serving --as crash_serving
    stop_broker
    record "$broker" stop_ms "$stop_ms"
    start_broker "$broker" "$dir"
    record "$broker" clean_listen_ms "$listen_ms"
    pstep "$broker" serving --as clean_serving
    record "$broker" rss_restarted_kib "$(rss_kib)"
    # Idle with every partition open: the CPU the node spends over 30 s.
    local idle_before
    idle_before=$(cpu_secs "$broker_pid")
    sleep 30
    record "$broker" idle_cpu_secs_per_30s "$(echo "$(cpu_secs "$broker_pid") - $idle_before" | bc | awk '{ printf "%.2f", $1 }')"
    pstep "$broker" trickle --rate "$trickle_rate" --duration-secs "$trickle_secs" --broker-pid "$broker_pid"
    record "$broker" disk_after_trickle_kib "$(du -sk "$(data_of "$broker" "$dir")" | cut -f1)"
    stop_broker
    drop_fs "$dir"
  done
}

# The same load over 16, 1,000 and 10,000 partitions (LATENCY_PARTITIONS), each on a
# fresh broker: `skein bench run` of workloads/scale-latency.toml (LATENCY_RATE msg/s
# of 1 KiB, acks=all, one producer, one consumer group) with librdkafka.
# Skein's fetch handling, summed over its shards: "fetches handled, their total
# microseconds, partition reads" from /metrics.
fetch_sample() {
  curl -s "127.0.0.1:19644/metrics" | awk '
    /^skein_stage_latency_us_sum\{.*api="fetch",stage="handle"\}/ { s += $2 }
    /^skein_stage_latency_us_count\{.*api="fetch",stage="handle"\}/ { c += $2 }
    /^skein_fetch_partition_reads_total/ { r += $2 }
    END { print c + 0, s + 0, r + 0 }'
}

# Skein's device writes, summed over its shards: "writes, and those within 10, 25 and
# 100 ms" from the append write-stage histogram. The tail of the publish latency
# follows the writes' tail on this shared disk.
write_sample() {
  curl -s "127.0.0.1:19644/metrics" | awk '
    /^skein_stage_latency_us_count\{.*api="append",stage="write"\}/ { c += $2 }
    /^skein_stage_latency_us_bucket\{.*api="append",stage="write",le="10000"\}/ { a += $2 }
    /^skein_stage_latency_us_bucket\{.*api="append",stage="write",le="25000"\}/ { b += $2 }
    /^skein_stage_latency_us_bucket\{.*api="append",stage="write",le="100000"\}/ { d += $2 }
    END { print c + 0, a + 0, b + 0, d + 0 }'
}

section_latency() {
  local broker count dir sampler writes
  for count in ${LATENCY_PARTITIONS:-16 1000 10000}; do
    for broker in "${brokers[@]}"; do
      echo "== latency: $broker, $count partitions"
      dir="$work/$broker-latency"
      start_broker "$broker" "$dir"
      # Inside the measured window (the workload warms up for 10 s): how many fetches
      # the consumer made in 10 s, how long each took the broker, how many partitions
      # each read.
      sampler=""
      writes=""
      if [ "$broker" = skein ]; then
        ( sleep 25; a=$(fetch_sample); sleep 10; echo "$a $(fetch_sample)" > "$work/fetch-sample" ) &
        sampler=$!
        # The device writes of the measured 30 s.
        ( sleep 10; a=$(write_sample); sleep 30; echo "$a $(write_sample)" > "$work/write-sample" ) &
        writes=$!
      fi
      "$driver" bench run "$root/bench-harness/workloads/scale-latency.toml" --bootstrap-server "127.0.0.1:$port" \
        --broker-pid "$broker_pid" --label "$broker-$count" --partitions "$count" --driver "${LATENCY_DRIVER:-librdkafka}" \
        --rate "${LATENCY_RATE:-20000}" --out "$out/latency-$broker-$count.json" | tail -4 || {
        echo "{\"step\":\"latency_$count\",\"failed\":true}" >> "$out/$broker.jsonl"
        [ -n "$sampler" ] && kill "$sampler" "$writes" 2>/dev/null; rm -f "$work/fetch-sample" "$work/write-sample"
        stop_broker; rm -rf "$dir"; continue
      }
      python3 - "$out/latency-$broker-$count.json" "$count" >> "$out/$broker.jsonl" <<'PY'
import json, sys
r, count = json.load(open(sys.argv[1])), sys.argv[2]
ms = lambda l, q: round(l[q] / 1000, 3)
p, e = r["publish_latency"], r["end_to_end_latency"]
print(json.dumps({"step": f"latency_{count}", "msgs_per_sec": round(r["published_msgs_per_sec"]),
    "publish_p50_ms": ms(p, "p50_us"), "publish_p99_ms": ms(p, "p99_us"), "publish_p999_ms": ms(p, "p999_us"),
    "e2e_p50_ms": ms(e, "p50_us"), "e2e_p99_ms": ms(e, "p99_us"), "e2e_p999_ms": ms(e, "p999_us"),
    "publish_errors": r["publish_errors"], "broker_cpu_secs_per_gb": r.get("broker_cpu_secs_per_gb")}))
PY
      if [ -n "$sampler" ] && wait "$sampler" && [ -s "$work/fetch-sample" ]; then
        read -r c1 s1 r1 c2 s2 r2 < "$work/fetch-sample"
        if [ "$c2" -gt "$c1" ]; then
          echo "{\"step\":\"latency_${count}_fetch\",\"fetches_in_10s\":$((c2 - c1)),\"fetch_handle_mean_us\":$(( (s2 - s1) / (c2 - c1) )),\"partition_reads_per_fetch\":$(( (r2 - r1) / (c2 - c1) ))}" \
            | tee -a "$out/$broker.jsonl"
        fi
        rm -f "$work/fetch-sample"
      fi
      if [ -n "$writes" ] && wait "$writes" && [ -s "$work/write-sample" ]; then
        read -r c1 a1 b1 d1 c2 a2 b2 d2 < "$work/write-sample"
        echo "{\"step\":\"latency_${count}_writes\",\"device_writes\":$((c2 - c1)),\"over_10ms\":$(( (c2 - c1) - (a2 - a1) )),\"over_25ms\":$(( (c2 - c1) - (b2 - b1) )),\"over_100ms\":$(( (c2 - c1) - (d2 - d1) ))}" \
          | tee -a "$out/$broker.jsonl"
        rm -f "$work/write-sample"
      fi
      stop_broker
      rm -rf "$dir"
    done
  done
}

# GROUP_COUNT consumer groups (10,000) committing every second for GROUPS_SECS (30) on one
# node, the memory that costs, then a kill -9 and the time until every group's
# committed offset is served again (the coordinator loading __consumer_offsets).
section_groups() {
  # GROUP_COUNT, not GROUPS: bash's own GROUPS (the user's group ids) is always set.
  local broker dir groups="${GROUP_COUNT:-10000}" secs="${GROUPS_SECS:-30}"
  for broker in "${brokers[@]}"; do
    echo "== groups: $broker, $groups groups"
    dir="$work/$broker-groups"
    start_broker "$broker" "$dir"
    record "$broker" groups_rss_empty_kib "$(rss_kib)"
    step "$broker" create --prefix groups --topics 1 --partitions 100 --as groups_create
    step "$broker" groups --prefix groups --topics 1 --partitions 100 --groups "$groups" --duration-secs "$secs" \
      --broker-pid "$broker_pid"
    crash_broker
    start_broker "$broker" "$dir"
    record "$broker" groups_crash_listen_ms "$listen_ms"
    step "$broker" group-offsets --prefix groups --topics 1 --partitions 100 --groups "$groups" \
      --expected-offset "$secs"
    record "$broker" groups_rss_loaded_kib "$(rss_kib)"
    stop_broker
    rm -rf "$dir"
  done
}

# Three nodes of one broker, each pinned to a CPU in turn: Skein's with `--cores`,
# Kafka's (`peers/kafka/run-kafka-cluster.sh`) with taskset. Sets cluster_pids
# ("1=PID,2=PID,3=PID"), cluster_ports and cluster_bootstrap.
#   start_cluster BROKER DIR
start_cluster() {
  local broker="$1" dir="$2" cpus n port pids=()
  cpus=$(nproc)
  mkdir -p "$dir"
  case "$broker" in
    skein)
      for n in 1 2 3; do
        start_skein_node "$dir" "$n"
        pids+=("$n=$!")
      done
      for n in 1 2 3; do
        until (exec 3<>"/dev/tcp/127.0.0.1/$((29100 + (n - 1) * 10))") 2>/dev/null; do sleep 0.1; done
      done
      cluster_pids=$(IFS=,; echo "${pids[*]}")
      cluster_ports=(29100 29110 29120)
      ;;
    kafka)
      cluster_pids=$(KAFKA_HEAP="${KAFKA_HEAP:-1g}" "$root/bench-harness/peers/kafka/run-kafka-cluster.sh" "$dir" 29200 "$cpus" | tail -1)
      cluster_ports=(29200 29210 29220)
      ;;
  esac
  cluster_bootstrap="127.0.0.1:${cluster_ports[0]}"
}

# Starts node N of a Skein cluster in DIR in the background ($! is its pid).
start_skein_node() {
  local dir="$1" n="$2" port cpus
  cpus=$(nproc)
  port=$((29100 + (n - 1) * 10))
  "$skein" start --node-id "$n" --cores $(( (n - 1) % cpus ))-$(( (n - 1) % cpus )) \
    --listener "127.0.0.1:$port" --controller-listener "127.0.0.1:$((port + 1))" \
    --controller-voters "1@127.0.0.1:29101,2@127.0.0.1:29111,3@127.0.0.1:29121" \
    --data-dir "$dir/n$n" --admin-listener off >> "$dir/n$n.log" 2>&1 &
}

# Starts node N of the cluster in DIR again (after a kill -9), with the data it kept,
# and waits until it listens; its new pid replaces the old in cluster_pids.
restart_node() {
  local broker="$1" dir="$2" n="$3" pid home port
  case "$broker" in
    skein)
      start_skein_node "$dir" "$n"
      pid=$!
      ;;
    kafka)
      # shellcheck source=peers/kafka/node-config.sh
      source "$root/bench-harness/peers/kafka/node-config.sh"
      home="$dir/n$n"
      taskset -c $(( (n - 1) % $(nproc) )) java -Xms"${KAFKA_HEAP:-1g}" -Xmx"${KAFKA_HEAP:-1g}" -XX:+UseG1GC \
        -cp "$(kafka_classpath "$root/bench-harness/peers/kafka")" -Dlog4j.configuration="file:$home/log4j.properties" \
        kafka.Kafka "$home/server.properties" >> "$home/kafka.log" 2>&1 &
      pid=$!
      ;;
  esac
  port=${cluster_ports[$((n - 1))]}
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.1; done
  cluster_pids=$(echo "$cluster_pids" | sed "s/\(^\|,\)$n=[0-9]*/\1$n=$pid/")
}

# The pid of node N of the running cluster.
node_pid() {
  local pair
  for pair in ${cluster_pids//,/ }; do
    if [ "${pair%%=*}" = "$1" ]; then echo "${pair#*=}"; fi
  done
}

# CPU seconds (user + system) a process has used.
cpu_secs() {
  awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$1/stat"
}

# The partitions section's idle figure alone, IDLE_ROUNDS (3) times on one node: TOPICS x
# PARTITIONS with one record each, then the CPU the node spends over 30 s, each round.
section_idle() {
  local broker dir round before
  for broker in "${brokers[@]}"; do
    echo "== idle: $broker, $topics x $partitions"
    dir="$work/$broker-idle"
    start_broker "$broker" "$dir"
    pstep "$broker" create
    pstep "$broker" produce
    sleep 15
    for round in $(seq 1 "${IDLE_ROUNDS:-3}"); do
      before=$(cpu_secs "$broker_pid")
      sleep 30
      record "$broker" "idle_cpu_secs_per_30s_round_$round" "$(echo "$(cpu_secs "$broker_pid") - $before" | bc | awk '{ printf "%.2f", $1 }')"
    done
    stop_broker
    rm -rf "$dir"
  done
}

# CLUSTER_TOPICS x CLUSTER_PARTITIONS (100 x 100) partitions of replication factor 3 on
# three nodes: creation and propagation to every node, one record to each, the
# metadata log's size, the replica fetchers' CPU while idle, the failover of a kill
# -9'd node's leaderships, and a controlled shutdown of another.
section_cluster() {
  local broker dir ctopics="${CLUSTER_TOPICS:-100}" cpartitions="${CLUSTER_PARTITIONS:-100}" crf="${CLUSTER_RF:-3}"
  local nodes n before after started stopped pid pid2
  for broker in "${brokers[@]}"; do
    echo "== cluster: $broker, 3 nodes, $ctopics x $cpartitions partitions of replication factor $crf"
    dir="$work/$broker-cluster"
    start_cluster "$broker" "$dir"
    port=${cluster_ports[0]}
    nodes="127.0.0.1:${cluster_ports[0]},127.0.0.1:${cluster_ports[1]},127.0.0.1:${cluster_ports[2]}"
    sleep 5
    step "$broker" create --topics "$ctopics" --partitions "$cpartitions" --replication-factor "$crf" --nodes "$nodes" \
      --as cluster_create
    step "$broker" produce --topics "$ctopics" --partitions "$cpartitions" --as cluster_produce
    # Every record read back by one librdkafka consumer assigned every partition
    # (CLUSTER_CONSUME=0 skips it: at 100,000 partitions the client spends the step's
    # whole timeout at 100% of a core).
    if [ "${CLUSTER_CONSUME:-1}" = 1 ]; then
      step "$broker" consume --topics "$ctopics" --partitions "$cpartitions" --as cluster_consume
    fi
    sleep 5
    for n in 1 2 3; do
      case "$broker" in
        skein) record "$broker" "cluster_metadata_log_kib_n$n" "$(du -sk "$dir/n$n/__skein_metadata" | cut -f1)" ;;
        kafka) record "$broker" "cluster_metadata_log_kib_n$n" "$(du -sk "$dir/n$n/logs/__cluster_metadata-0" | cut -f1)" ;;
      esac
      record "$broker" "cluster_rss_kib_n$n" "$(awk '/^VmRSS:/ { print $2 }' "/proc/$(node_pid "$n")/status")"
      # Descriptors the node holds (files, sockets), against the machine's limit.
      record "$broker" "cluster_open_fds_n$n" "$(ls "/proc/$(node_pid "$n")/fd" | wc -l)"
    done
    record "$broker" cluster_open_files_limit "$(ulimit -Hn)"

    # The replica fetchers' cost with nothing to replicate: CPU over 30 s, all nodes.
    before=0; for n in 1 2 3; do before=$(echo "$before + $(cpu_secs "$(node_pid "$n")")" | bc); done
    sleep 30
    after=0; for n in 1 2 3; do after=$(echo "$after + $(cpu_secs "$(node_pid "$n")")" | bc); done
    record "$broker" cluster_idle_cpu_secs_per_30s "$(echo "$after - $before" | bc | awk '{ printf "%.2f", $1 }')"
    # Memory again after the idle 30 s: what stays, against the peak the creation left.
    for n in 1 2 3; do
      record "$broker" "cluster_rss_after_idle_kib_n$n" "$(awk '/^VmRSS:/ { print $2 }' "/proc/$(node_pid "$n")/status")"
    done
    # Failover and controlled shutdown need a replica to move to.
    if [ "$crf" -lt 2 ]; then
      # Node 3 killed and started again with its data: until it listens, and until
      # every partition of the cluster serves again (its own recovered).
      pid=$(node_pid 3)
      kill -9 "$pid"
      while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
      started=$(date +%s%N)
      restart_node "$broker" "$dir" 3
      record "$broker" cluster_restart_listen_ms $(( ($(date +%s%N) - started) / 1000000 ))
      step "$broker" serving --topics "$ctopics" --partitions "$cpartitions" --as cluster_restart_serving
      for pair in ${cluster_pids//,/ }; do kill "${pair#*=}" 2>/dev/null || true; done
      for pair in ${cluster_pids//,/ }; do while kill -0 "${pair#*=}" 2>/dev/null; do sleep 0.1; done; done
      rm -rf "$dir"
      continue
    fi
    # Failover: node 3 killed; every partition served again (its leaderships moved).
    kill -9 "$(node_pid 3)"
    port=${cluster_ports[0]}
    step "$broker" serving --topics "$ctopics" --partitions "$cpartitions" --as cluster_failover
    # Node 3 back with the data it kept: the time until it listens. A controlled
    # shutdown needs a quorum of the controllers, so it runs with all three up.
    started=$(date +%s%N)
    restart_node "$broker" "$dir" 3
    record "$broker" cluster_restart_listen_ms $(( ($(date +%s%N) - started) / 1000000 ))
    sleep "${CLUSTER_REJOIN_SECS:-30}"
    # Controlled shutdown of node 2 (its leaderships move before it stops).
    pid2=$(node_pid 2)
    if ! kill -0 "$pid2" 2>/dev/null; then
      echo "node 2 is not running before its controlled shutdown; its log ends:" >&2
      tail -30 "$dir/n2.log" "$dir/n2/kafka.log" 2>/dev/null >&2 || true
      exit 1
    fi
    started=$(date +%s%N)
    kill "$pid2"
    while kill -0 "$pid2" 2>/dev/null; do sleep 0.05; done
    stopped=$(( ($(date +%s%N) - started) / 1000000 ))
    record "$broker" cluster_controlled_shutdown_ms "$stopped"
    step "$broker" serving --topics "$ctopics" --partitions "$cpartitions" --as cluster_after_shutdown
    for pair in ${cluster_pids//,/ }; do kill "${pair#*=}" 2>/dev/null || true; done
    for pair in ${cluster_pids//,/ }; do while kill -0 "${pair#*=}" 2>/dev/null; do sleep 0.1; done; done
    # The stopped node's own account of its controlled shutdown.
    [ "$broker" = skein ] && cp "$dir/n2.log" "$out/cluster-skein-n2.log"
    rm -rf "$dir"
  done
}

for section in "${sections[@]}"; do
  case "$section" in
    partitions) section_partitions ;;
    idle) section_idle ;;
    latency) section_latency ;;
    groups) section_groups ;;
    cluster) section_cluster ;;
    *) echo "unknown section $section" >&2; exit 2 ;;
  esac
done
python3 "$root/bench-harness/scale-report.py" "$out" "${brokers[@]}"
