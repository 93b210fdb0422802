# Shared by run-kafka.sh and run-kafka-cluster.sh (sourced).

# The Kafka 4.1 server's classpath, resolved by Maven (pom.xml in DIR) once and kept
# in DIR/target/classpath.txt.
#   kafka_classpath DIR
kafka_classpath() {
  local cp_file="$1/target/classpath.txt"
  if [ ! -s "$cp_file" ]; then
    mkdir -p "$1/target"
    (cd "$1" && mvn -q -B dependency:build-classpath -Dmdep.outputFile="$cp_file" >&2)
  fi
  cat "$cp_file"
}

# Writes a KRaft combined node's server.properties and log4j.properties under HOME.
# `skein bench run` deletes each run's topics when it ends; Kafka removes a deleted
# log after `file.delete.delay.ms` (60 s by default), long enough for max-rate warm-up
# passes to fill the disk, so the node removes them after a second.
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
file.delete.delay.ms=1000
PROPS
  cat > "$home/log4j.properties" <<'PROPS'
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
PROPS
}
