#!/usr/bin/env bash
# Runs every fuzz target (cargo-fuzz, libFuzzer, the nightly toolchain) for
# FUZZ_SECONDS each (default 15) from its seeds, fuzz/seeds/TARGET/; new inputs go to a
# scratch corpus, crashes to fuzz/artifacts/TARGET/. An input that panics, runs over
# 10 s, or asks for more than 512 MiB at once (2 GiB in all) fails the run. CI runs
# it as it is; the long run sets FUZZ_SECONDS (README, "Fuzzing").
set -euo pipefail
cd "$(dirname "$0")"
seconds=${FUZZ_SECONDS:-15}
if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
cargo +nightly fuzz build -O
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for target in $(cargo +nightly fuzz list); do
  mkdir -p "$scratch/$target" "seeds/$target"
  rm -rf "artifacts/$target"
  echo "fuzzing $target for ${seconds}s"
  status=0
  cargo +nightly fuzz run -O "$target" "$scratch/$target" "seeds/$target" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 -print_final_stats=1 \
    >"$scratch/$target.log" 2>&1 || status=$?
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|Done )' "$scratch/$target.log" || true
  if [ "$status" -ne 0 ]; then
    # The panic's message first (a long backtrace follows it), then the end of the log;
    # the whole log is kept beside the input.
    grep -A4 -m1 'panicked at' "$scratch/$target.log" >&2 || true
    tail -60 "$scratch/$target.log" >&2
    mkdir -p "artifacts/$target" && cp "$scratch/$target.log" "artifacts/$target/fuzz.log"
    echo "fuzz target $target failed (status $status); its input is in fuzz/artifacts/$target/" >&2
    exit 1
  fi
done
