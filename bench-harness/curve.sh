#!/usr/bin/env bash
# The latency curve of issue 13, section 3: publish and end-to-end p50/p99/p99.9 and
# broker CPU-seconds per GB at several fixed rates (16 partitions, 1 KiB messages),
# with the native driver, for each broker given, each pinned to CPU 0 and the load
# generator to CPU 1. A broker is `skein`, `skein:<group commit max delay, us>` or
# `kafka`; each runs once per rate, warmed for WARMUP_SECS (default 5) first; name a
# broker again for another round (`skein kafka skein kafka`). WORKLOAD names another
# workload file.
#   usage: bench-harness/curve.sh DURATION_SECS "RATES" BROKER...
#   e.g.   bench-harness/curve.sh 15 "1000 10000 50000 100000" skein skein:1000 kafka
# Results (JSON) go to bench-harness/results/curve-<date>/; one line per run on stdout.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=steady-state.sh
source "$root/bench-harness/steady-state.sh"
usage='bench-harness/curve.sh DURATION_SECS "RATES" BROKER...'
if [ $# -lt 3 ]; then echo "usage: $usage" >&2; exit 2; fi
duration="$1"; rates="$2"; shift 2
workload="${WORKLOAD:-$root/bench-harness/workloads/1-topic-16-partitions-1kb-fixed-rate.toml}"
out="$root/bench-harness/results/curve-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
bench_build
bench_workdir

raw_limits start "$work"
# cpu_s/GB is the broker process's CPU; host_s/GB the whole host's less the generator's
# (with the kernel's writeback and journal threads, which a page-cache broker hands off).
printf '%-12s %7s %9s %8s %8s %9s %8s %9s %9s %8s\n' broker rate achieved p50_ms p99_ms p99.9_ms e2e_p99 cpu_s/GB host_s/GB windows
for broker in "$@"; do
  for rate in $rates; do
    case "$broker" in
      skein*)
        delay="${broker#skein}"; delay="${delay#:}"
        start_pinned skein "$work/b" --admin-listener 127.0.0.1:19644 --group-commit-max-delay-us "${delay:-0}"
        ;;
      *) start_pinned "$broker" "$work/b" ;;
    esac
    # A broker named more than once runs more rounds: each keeps its own file.
    file="$out/${broker/:/-}-$rate.json"; round=1
    while [ -e "$file" ]; do round=$((round + 1)); file="$out/${broker/:/-}-$rate-$round.json"; done
    taskset -c 1 "$skein" bench run "$workload" --bootstrap-server 127.0.0.1:$port --broker-pid "$broker_pid" \
      --label "$broker" --rate "$rate" --duration-secs "$duration" --warmup-secs "${WARMUP_SECS:-5}" \
      --driver native --out "$file" > /dev/null
    # Group-commit windows the broker opened (Skein only).
    windows=-
    if [ "$broker" != kafka ]; then
      windows=$( (curl -s http://127.0.0.1:19644/metrics 2>/dev/null || true) \
        | awk '/^skein_group_commit_windows_total/ { n += $2 } END { print n + 0 }')
    fi
    python3 - "$file" "$broker" "$rate" "$windows" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p, e = d["publish_latency"], d["end_to_end_latency"]
ms = lambda h, q: h[q] / 1000
print(f'{sys.argv[2]:<12} {sys.argv[3]:>7} {d["published_msgs_per_sec"]:>9.0f} {ms(p, "p50_us"):>8.2f} {ms(p, "p99_us"):>8.2f} '
      f'{ms(p, "p999_us"):>9.2f} {ms(e, "p99_us"):>8.2f} {d["broker_cpu_secs_per_gb"]:>9.2f} '
      f'{d.get("host_cpu_secs_per_gb") or 0:>9.2f} {sys.argv[4]:>8}')
PY
    stop_broker "$broker_pid"; broker_pid=""
    rm -rf "${work:?}/b"
    drain_device
  done
done
raw_limits end "$work"
echo "results in $out"
