#!/usr/bin/env bash
# Resolves the Java Kafka 4.4 client and tools (share groups, KIP-932) with Maven and
# writes their classpath to target/kafka-share-classpath.txt, for Share.java.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "$here/../maven-classpath.sh" "$here" kafka-share-classpath.txt
