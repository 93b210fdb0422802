#!/usr/bin/env bash
# Installs the kafkajs conformance scenario's dependencies (kafkajs, pinned in
# package-lock.json). Idempotent. Run: node tests/clients/kafkajs/scenario.js <bootstrap> <prefix>
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if [ -f node_modules/kafkajs/package.json ] && [ node_modules/.package-lock.json -nt package-lock.json ]; then
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
