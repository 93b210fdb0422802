#!/usr/bin/env bash
# Builds the librdkafka admin scenario against the system librdkafka (Debian's
# librdkafka-dev, 2.0), installing it when missing, into target/clients/rdkafka-admin.
set -euo pipefail
cd "$(dirname "$0")"
root="$(cd ../../.. && pwd)"
if [ ! -f /usr/include/librdkafka/rdkafka.h ]; then
  apt-get update -qq && apt-get install -y -qq librdkafka-dev >/dev/null
fi
mkdir -p "$root/target/clients"
out="$root/target/clients/rdkafka-admin"
if [ ! -x "$out" ] || [ admin.c -nt "$out" ]; then
  cc -O1 -Wall -Werror -o "$out" admin.c -lrdkafka
fi
