#!/usr/bin/env bash
# Resolves the Java Kafka client with Maven and writes its classpath to
# target/kafka-classpath.txt, for tests/java_clients.rs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "$here/../maven-classpath.sh" "$here" kafka-classpath.txt
