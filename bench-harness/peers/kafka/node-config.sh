# Shared by run-kafka.sh and run-kafka-cluster.sh (sourced).

# The Kafka server's classpath (KAFKA_VERSION, 4.4.0 by default: the reference),
# resolved by Maven (pom.xml in DIR) once per version and kept in
# DIR/target/classpath-VERSION.txt.
#   kafka_classpath DIR
kafka_classpath() {
  local version="${KAFKA_VERSION:-4.4.0}"
  local cp_file="$1/target/classpath-$version.txt"
  if [ ! -s "$cp_file" ]; then
    mkdir -p "$1/target"
    (cd "$1" && mvn -q -B -Dstyle.color=never dependency:build-classpath -Dkafka.version="$version" -Dmdep.outputFile="$cp_file" >&2)
  fi
  cat "$cp_file"
}

# Writes a KRaft combined node's server.properties and log4j.properties under HOME.
# `skein bench run` deletes each run's topics when it ends; Kafka removes a deleted
# log after `log.segment.delete.delay.ms` (60 s by default; `file.delete.delay.ms` is
# the topic-level name, which a broker ignores), long enough for max-rate warm-up
# passes to fill the disk, so the node removes them after a second. Kafka 4.4's share
# coordinator state topic wants 3 replicas and 2 in sync by default: set to what the
# cluster has, or share groups cannot start on fewer nodes.
#   write_node_config HOME NODE_ID VOTERS PORT REPLICATION_FACTOR
write_node_config() {
  local home="$1" node="$2" voters="$3" port="$4" factor="$5"
  local controller=$((port + 1)) min_isr=$(( $5 > 1 ? 2 : 1 ))
  mkdir -p "$home/logs"
  cat > "$home/server.properties" <<PROPS
process.roles=broker,controller
node.id=$node
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$home/logs
num.partitions=1
offsets.topic.replication.factor=$factor
transaction.state.log.replication.factor=$factor
transaction.state.log.min.isr=$min_isr
group.initial.rebalance.delay.ms=0
log.segment.delete.delay.ms=1000
share.coordinator.state.topic.replication.factor=$factor
share.coordinator.state.topic.min.isr=$min_isr
PROPS
  cat > "$home/log4j.properties" <<'PROPS'
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
PROPS
}
