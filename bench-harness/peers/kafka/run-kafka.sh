#!/usr/bin/env bash
# Starts Apache Kafka (4.4, or KAFKA_VERSION, from Maven Central) as a single KRaft
# combined node on 127.0.0.1:PORT, data under DIR, pinned to CPU; waits until it
# accepts connections and prints its pid. Stop it with `kill PID`.
# A DIR that holds a node already (its log directory formatted) is started again as it
# is: a restart. KAFKA_START_TIMEOUT_SECS (60) bounds the wait for the listener; KAFKA_HEAP
# (1g) sets the heap.
#   usage: run-kafka.sh DIR PORT CPU
set -euo pipefail
dir="$1"; port="$2"; cpu="$3"
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=node-config.sh
source "$here/node-config.sh"
classpath="$(kafka_classpath "$here")"
if [ ! -f "$dir/logs/meta.properties" ]; then
  write_node_config "$dir" 1 "1@127.0.0.1:$((port + 1))" "$port" 1
  cluster_id="$(java -cp "$classpath" kafka.tools.StorageTool random-uuid)"
  java -cp "$classpath" -Dlog4j.configuration="file:$dir/log4j.properties" kafka.tools.StorageTool format -t "$cluster_id" -c "$dir/server.properties" >&2
fi
heap="${KAFKA_HEAP:-1g}"
taskset -c "$cpu" java -Xms"$heap" -Xmx"$heap" -XX:+UseG1GC -cp "$classpath" -Dlog4j.configuration="file:$dir/log4j.properties" \
  kafka.Kafka "$dir/server.properties" >> "$dir/kafka.log" 2>&1 &
pid=$!
timeout_secs="${KAFKA_START_TIMEOUT_SECS:-60}"
for _ in $(seq 1 $((timeout_secs * 10))); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "$pid"
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    cat "$dir/kafka.log" >&2
    exit 1
  fi
  sleep 0.1
done
echo "kafka did not start within $timeout_secs s" >&2
kill "$pid"
exit 1
