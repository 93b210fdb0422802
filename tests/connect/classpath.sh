#!/usr/bin/env bash
# Resolves Kafka Connect 4.1 (connect-runtime, connect-file, connect-json) and
# MirrorMaker 2 (connect-mirror) with Maven and writes their classpath to
# target/kafka-connect-classpath.txt, for tests/connect.rs and tests/mirror.rs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "$here/../maven-classpath.sh" "$here" kafka-connect-classpath.txt
