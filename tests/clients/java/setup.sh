#!/usr/bin/env bash
# Resolves the Java Kafka client 3.9, 4.1 and 4.4 with Maven and writes their classpaths to
# target/clients/java-<version>.classpath, for the scenarios of tests/clients.rs.
set -euo pipefail
cd "$(dirname "$0")"
root="$(cd ../../.. && pwd)"
mkdir -p "$root/target/clients"
for version in 3.9.1 4.1.0 4.4.0; do
  out="$root/target/clients/java-$version.classpath"
  [ -s "$out" ] && continue
  mvn -q -B dependency:build-classpath -Dkafka.version="$version" -Dmdep.outputFile="$out" >&2
done
