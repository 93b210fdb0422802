#!/usr/bin/env bash
# Resolves Apache Kafka 4.1's command-line tools with Maven and writes their classpath
# to target/kafka-tools-classpath.txt (at the repository root), for tests/tools.rs.
set -euo pipefail
cd "$(dirname "$0")"
root="$(cd ../.. && pwd)"
mkdir -p "$root/target"
mvn -q -B dependency:build-classpath -Dmdep.outputFile="$root/target/kafka-tools-classpath.txt" >&2
echo "$root/target/kafka-tools-classpath.txt"
