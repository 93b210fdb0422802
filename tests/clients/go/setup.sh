#!/usr/bin/env bash
# Builds the franz-go and sarama conformance scenarios into target/clients/.
# Idempotent (go build is incremental). Run: target/clients/franz <bootstrap> <prefix>
# (and target/clients/franz revoke-commit <bootstrap> <prefix>, see franz/revoke.go).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
cd "$HERE"
mkdir -p "$ROOT/target/clients"
go build -o "$ROOT/target/clients/franz" ./franz
go build -o "$ROOT/target/clients/sarama" ./sarama
