#!/usr/bin/env bash
# Starts a three-node Apache Kafka KRaft cluster (4.4, or KAFKA_VERSION; each node
# broker and controller) on 127.0.0.1: client ports BASE, BASE+10, BASE+20
# (controllers one above), data under DIR/n1..n3, node N pinned to CPU (N-1) % CPUS. Waits until every
# node accepts connections and prints `1=PID,2=PID,3=PID`. Stop with `kill PID...`.
#   usage: run-kafka-cluster.sh DIR BASE [CPUS] [HEAP]
set -euo pipefail
dir="$1"; base="$2"; cpus="${3:-2}"; heap="${4:-768m}"
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=node-config.sh
source "$here/node-config.sh"
classpath="$(kafka_classpath "$here")"
voters="1@127.0.0.1:$((base + 1)),2@127.0.0.1:$((base + 11)),3@127.0.0.1:$((base + 21))"
cluster_id="$(java -cp "$classpath" kafka.tools.StorageTool random-uuid)"
pids=()
for n in 1 2 3; do
  port=$((base + (n - 1) * 10)); home="$dir/n$n"
  write_node_config "$home" "$n" "$voters" "$port" 3
  java -cp "$classpath" -Dlog4j.configuration="file:$home/log4j.properties" kafka.tools.StorageTool format \
    -t "$cluster_id" -c "$home/server.properties" >&2
  taskset -c $(( (n - 1) % cpus )) java -Xms"$heap" -Xmx"$heap" -XX:+UseG1GC -cp "$classpath" \
    -Dlog4j.configuration="file:$home/log4j.properties" kafka.Kafka "$home/server.properties" > "$home/kafka.log" 2>&1 &
  pids+=("$n=$!")
done
for n in 1 2 3; do
  port=$((base + (n - 1) * 10)); ok=
  for _ in $(seq 1 900); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then ok=1; break; fi
    sleep 0.1
  done
  if [ -z "$ok" ]; then
    echo "kafka node $n did not start within 90 s" >&2
    cat "$dir/n$n/kafka.log" >&2
    kill "${pids[@]#*=}" 2>/dev/null || true
    exit 1
  fi
done
(IFS=,; echo "${pids[*]}")
