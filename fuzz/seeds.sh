#!/usr/bin/env bash
# Records the fuzz targets' seed corpus, fuzz/seeds/TARGET/, from real clients: the
# client tests run against brokers that keep every request frame they decode and each
# produce's record batches (SKEIN_CAPTURE_FRAMES, control/src/capture.rs): the Java
# clients of three generations, librdkafka (kcat, the rdkafka crate, confluent-kafka),
# kafka-python, kafkajs, franz-go and sarama, and the conformance sweep's requests of
# every API and version. Unit tests add what no client sends (metadata snapshots and
# log entries, telemetry pushes of every codec). libFuzzer's merge then keeps the
# inputs that add coverage. The SASL and iotune_profile seeds are written by hand
# (fuzz/seeds/sasl, fuzz/seeds/iotune_profile), as are the log_recovery shapes; the state_files and quorum_journal seeds were kept from
# fuzzing runs (merged), and every input a run found is kept as a regression seed.
# Takes about 15 minutes; run it again when an API or version is added.
set -euo pipefail
cd "$(dirname "$0")/.."
captured=$(mktemp -d)
trap 'rm -rf "$captured"' EXIT
SKEIN_CAPTURE_FRAMES="$captured" cargo test --test conformance --test clients --test java_clients --test transactions
SKEIN_FUZZ_SEEDS="$PWD/fuzz/seeds" cargo test -p skein-control --lib -- snapshots_round_trip
SKEIN_FUZZ_SEEDS="$PWD/fuzz/seeds" cargo test -p skein-net --lib -- pushes_decode_with_each_codec
cd fuzz
for target in request_frame produce_batch; do
  mkdir -p "seeds/$target"
  cargo +nightly fuzz run -O "$target" "seeds/$target" "$captured/$target" -- -merge=1 -rss_limit_mb=2048
done
