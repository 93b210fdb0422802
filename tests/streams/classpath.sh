#!/usr/bin/env bash
# Resolves Kafka Streams 4.4 with Maven and writes its classpath to
# target/kafka-streams-classpath.txt, for tests/streams.rs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "$here/../maven-classpath.sh" "$here" kafka-streams-classpath.txt
