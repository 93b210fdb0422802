#!/usr/bin/env bash
# Resolves Apache Kafka 4.4's command-line tools with Maven and writes its classpath to
# target/kafka-tools-classpath.txt, for tests/tools.rs and tests/cluster/quorum.rs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "$here/../maven-classpath.sh" "$here" kafka-tools-classpath.txt
