#!/usr/bin/env bash
# The two load generators side by side (issue 13, section 1): at each fixed rate, on
# each broker given (`skein` or `kafka`, pinned to CPU 0), the librdkafka driver and
# the native driver (on CPU 1) take turns, ROUNDS times each, the order swapped every
# round, after one warm-up pass. Each run prints its rate, publish and end-to-end
# latency and both sides' CPU per GB; at the end, per broker and rate, the native
# driver's generator CPU per GB over librdkafka's and its latency beside librdkafka's
# (medians over the rounds). At equal throughput the native driver should cost a
# quarter or less of librdkafka's CPU and measure the same latencies within noise.
#   usage: bench-harness/drivers.sh DURATION_SECS ROUNDS "RATES" BROKER...
#   e.g.   bench-harness/drivers.sh 15 3 "10000 30000" skein kafka
# WORKLOAD names another workload file (default: 16 partitions, 1 KiB, fixed rate).
# Results (JSON) go to bench-harness/results/drivers-<date>/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=steady-state.sh
source "$root/bench-harness/steady-state.sh"
usage='bench-harness/drivers.sh DURATION_SECS ROUNDS "RATES" BROKER...'
if [ $# -lt 4 ]; then echo "usage: $usage" >&2; exit 2; fi
duration="$1"; rounds="$2"; rates="$3"; shift 3
workload="${WORKLOAD:-$root/bench-harness/workloads/1-topic-16-partitions-1kb-fixed-rate.toml}"
out="$root/bench-harness/results/drivers-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
bench_build
bench_workdir

# One run: DRIVER at RATE against the broker on PORT, its JSON to FILE.
#   run_one DRIVER RATE PORT FILE WARMUP_SECS
run_one() {
  taskset -c 1 "$skein" bench run "$workload" --bootstrap-server "127.0.0.1:$3" --broker-pid "$broker_pid" \
    --label "$broker/$1" --driver "$1" --rate "$2" --duration-secs "$duration" --warmup-secs "$5" \
    --out "$4" > "$4.log" 2>&1 || { cat "$4.log" >&2; exit 1; }
}

raw_limits start "$work"
printf '%-8s %-11s %7s %9s %8s %8s %8s %12s %12s\n' broker driver rate achieved p50_ms p99_ms e2e_p99 gen_cpu_s/GB brk_cpu_s/GB
for broker in "$@"; do
  for rate in $rates; do
    start_pinned "$broker" "$work/b" --admin-listener off
    # A warm-up pass (the JVM's JIT, the batch cache), not reported.
    run_one native "$rate" "$port" "$work/warm.json" "${WARMUP_SECS:-20}"
    for round in $(seq 1 "$rounds"); do
      order="librdkafka native"
      [ $((round % 2)) -eq 0 ] && order="native librdkafka"
      for driver in $order; do
        file="$out/$broker-$rate-$driver-$round.json"
        run_one "$driver" "$rate" "$port" "$file" 5
        python3 - "$file" "$broker" "$driver" "$rate" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p, e = d["publish_latency"], d["end_to_end_latency"]
ms = lambda h, q: h[q] / 1000
print(f'{sys.argv[2]:<8} {sys.argv[3]:<11} {sys.argv[4]:>7} {d["published_msgs_per_sec"]:>9.0f} {ms(p, "p50_us"):>8.2f} '
      f'{ms(p, "p99_us"):>8.2f} {ms(e, "p99_us"):>8.2f} {d["driver_cpu_secs_per_gb"]:>12.2f} {d["broker_cpu_secs_per_gb"]:>12.2f}')
PY
      done
    done
    stop_broker "$broker_pid"; broker_pid=""
    rm -rf "${work:?}/b"
    drain_device
  done
done
raw_limits end "$work"
python3 - "$out" <<'PY'
import json, glob, os, statistics, sys
runs = {}
for path in glob.glob(os.path.join(sys.argv[1], "*.json")):
    broker, rate, driver, _ = os.path.basename(path)[:-5].split("-")
    runs.setdefault((broker, int(rate)), {}).setdefault(driver, []).append(json.load(open(path)))
print("native / librdkafka, medians over rounds:")
for (broker, rate), by in sorted(runs.items()):
    if set(by) != {"native", "librdkafka"}:
        continue
    med = lambda driver, f: statistics.median(f(r) for r in by[driver])
    cpu = lambda r: r["driver_cpu_secs_per_gb"]
    p50 = lambda r: r["publish_latency"]["p50_us"] / 1000
    p99 = lambda r: r["publish_latency"]["p99_us"] / 1000
    e99 = lambda r: r["end_to_end_latency"]["p99_us"] / 1000
    print(f"  {broker} at {rate} msg/s: generator CPU per GB {med('native', cpu) / med('librdkafka', cpu):.2f} "
          f"({med('native', cpu):.2f} against {med('librdkafka', cpu):.2f}); publish p50 {med('native', p50):.2f} "
          f"against {med('librdkafka', p50):.2f} ms, p99 {med('native', p99):.2f} against {med('librdkafka', p99):.2f} ms; "
          f"end-to-end p99 {med('native', e99):.2f} against {med('librdkafka', e99):.2f} ms")
PY
echo "results in $out"
