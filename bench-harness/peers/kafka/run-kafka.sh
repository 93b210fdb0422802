#!/usr/bin/env bash
# Starts Apache Kafka (4.1, from Maven Central) as a single KRaft combined node on
# 127.0.0.1:PORT, data under DIR, pinned to CPU; waits until it accepts connections
# and prints its pid. Stop it with `kill PID`.
#   usage: run-kafka.sh DIR PORT CPU
set -euo pipefail
dir="$1"; port="$2"; cpu="$3"
here="$(cd "$(dirname "$0")" && pwd)"
cp_file="$here/target/classpath.txt"
if [ ! -s "$cp_file" ]; then
  mkdir -p "$here/target"
  (cd "$here" && mvn -q -B dependency:build-classpath -Dmdep.outputFile="$cp_file" >&2)
fi
classpath="$(cat "$cp_file")"
controller=$((port + 1))
mkdir -p "$dir/logs"
cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/logs
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
cat > "$dir/log4j.properties" <<'PROPS'
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
PROPS
cluster_id="$(java -cp "$classpath" kafka.tools.StorageTool random-uuid)"
java -cp "$classpath" -Dlog4j.configuration="file:$dir/log4j.properties" kafka.tools.StorageTool format -t "$cluster_id" -c "$dir/server.properties" >&2
taskset -c "$cpu" java -Xms1g -Xmx1g -XX:+UseG1GC -cp "$classpath" -Dlog4j.configuration="file:$dir/log4j.properties" \
  kafka.Kafka "$dir/server.properties" > "$dir/kafka.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
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
echo "kafka did not start within 60 s" >&2
kill "$pid"
exit 1
