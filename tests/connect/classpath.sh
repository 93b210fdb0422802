#!/usr/bin/env bash
# Resolves Kafka Connect (connect-runtime, connect-file, connect-json) and
# MirrorMaker 2 (connect-mirror) with Maven and writes their classpaths, for
# tests/connect.rs and tests/mirror.rs: 4.3.1 (pom.xml's default: 4.4.0's connect-file
# and connect-mirror are not served here) to target/kafka-connect-classpath.txt,
# and the older generation, 4.1, to target/kafka-connect-4.1-classpath.txt.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bash "$here/../maven-classpath.sh" "$here" kafka-connect-classpath.txt
bash "$here/../maven-classpath.sh" "$here" kafka-connect-4.1-classpath.txt -Dconnect.version=4.1.0
