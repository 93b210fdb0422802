#!/usr/bin/env bash
# Resolves the Maven project in directory DIR (a pom.xml listing what a test needs)
# and writes its classpath to target/OUT at the repository root; prints that path.
# Further arguments go to Maven (`-Dproperty=value`).
#   usage: tests/maven-classpath.sh DIR OUT [MAVEN_ARG...]
set -euo pipefail
dir="$1"; out="$2"; shift 2
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$root/target"
(cd "$dir" && mvn -q -B dependency:build-classpath -Dmdep.outputFile="$root/target/$out" "$@" >&2)
echo "$root/target/$out"
