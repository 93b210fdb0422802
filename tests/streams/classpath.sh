#!/usr/bin/env bash
# Resolves Kafka Streams 4.1 with Maven and writes its classpath to
# target/kafka-streams-classpath.txt (at the repository root), for tests/streams.rs.
set -euo pipefail
cd "$(dirname "$0")"
root="$(cd ../.. && pwd)"
mkdir -p "$root/target"
mvn -q -B dependency:build-classpath -Dmdep.outputFile="$root/target/kafka-streams-classpath.txt" >&2
echo "$root/target/kafka-streams-classpath.txt"
