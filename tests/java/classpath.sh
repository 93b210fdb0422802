#!/usr/bin/env bash
# Resolves the Java Kafka client with Maven and writes its classpath to
# target/kafka-classpath.txt (at the repository root), for tests/java_clients.rs.
set -euo pipefail
cd "$(dirname "$0")"
root="$(cd ../.. && pwd)"
mkdir -p "$root/target"
mvn -q -B dependency:build-classpath -Dmdep.outputFile="$root/target/kafka-classpath.txt" >&2
echo "$root/target/kafka-classpath.txt"
