#!/usr/bin/env bash
# What ACLs and quotas cost on the request path (issue 12): the 1-partition, 1 KiB
# workload at a fixed RATE (default 50000 msg/s) with the librdkafka driver against
# one Skein node in three modes, alternated ROUNDS times (default 3), the broker
# pinned to CPU 0 and the generator to CPU 1:
#   plain  - no authorizer, no quotas;
#   acl    - --authorizer standard, the client (User:ANONYMOUS) allowed by ACLs on
#            `*` (every check goes through the index and the connection's cache);
#   quota  - acl, plus default client-id quotas far above the rate (every produce and
#            fetch is metered, none throttled).
# Prints throughput and broker CPU-seconds per GB per run, then each mode's median
# CPU per GB as a ratio to plain's.
#   usage: [RATE=50000] [ROUNDS=3] bench-harness/authz.sh DURATION_SECS
# Results (JSON) go to bench-harness/results/authz-<date>/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=steady-state.sh
source "$root/bench-harness/steady-state.sh"
if [ $# -lt 1 ]; then echo "usage: bench-harness/authz.sh DURATION_SECS" >&2; exit 2; fi
duration="$1"
rounds="${ROUNDS:-3}"
rate="${RATE:-50000}"
workload="${WORKLOAD:-$root/bench-harness/workloads/1-topic-1-partition-1kb-max.toml}"
out="$root/bench-harness/results/authz-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
bench_build
bench_workdir
printf 'admin:admin-secret\n' > "$work/users"
admin=(--bootstrap-server 127.0.0.1:19094 --sasl-mechanism PLAIN --sasl-username admin --sasl-password admin-secret)

raw_limits start "$work"
printf '%-6s %5s %10s %10s %10s\n' mode round msgs_per_s MB_per_s cpu_s/GB
for round in $(seq 1 "$rounds"); do
  for mode in plain acl quota; do
    mkdir -p "$work/b"
    flags=()
    if [ "$mode" != plain ]; then flags=(--authorizer standard --super-users User:admin); fi
    taskset -c 0 "$skein" start --cores 0-0 --data-dir "$work/b/data" --listener 127.0.0.1:19092 \
      --listeners SASL_PLAINTEXT://127.0.0.1:19094 --sasl-enabled-mechanisms PLAIN --sasl-plain-users "$work/users" \
      --admin-listener 127.0.0.1:19644 "${flags[@]}" > "$work/b/log" 2>&1 &
    broker_pid=$!
    for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/19094) 2>/dev/null && break; sleep 0.1; done
    if [ "$mode" != plain ]; then
      for resource in --topic --group --cluster --transactional-id; do
        name=('*')
        if [ "$resource" = --cluster ]; then name=(); fi
        "$skein" acl add --principal User:ANONYMOUS --operation All "$resource" "${name[@]}" "${admin[@]}" > /dev/null
      done
    fi
    if [ "$mode" = quota ]; then
      "$skein" quota set --client-id-default --add-config \
        producer_byte_rate=100000000000,consumer_byte_rate=100000000000,request_percentage=100000 "${admin[@]}" > /dev/null
    fi
    file="$out/$mode-$round.json"
    taskset -c 1 "$skein" bench run "$workload" --bootstrap-server 127.0.0.1:19092 --broker-pid "$broker_pid" \
      --label "$mode" --duration-secs "$duration" --warmup-secs "${WARMUP_SECS:-5}" \
      --driver librdkafka --rate "$rate" --out "$file" > /dev/null
    python3 - "$file" "$mode" "$round" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f'{sys.argv[2]:<6} {sys.argv[3]:>5} {d["published_msgs_per_sec"]:>10.0f} {d["published_mb_per_sec"]:>10.1f} {d["broker_cpu_secs_per_gb"]:>10.3f}')
PY
    stop_broker "$broker_pid"; broker_pid=""
    rm -rf "${work:?}/b"
    drain_device
  done
done
raw_limits end "$work"
python3 - "$out" <<'PY'
import glob, json, os, statistics, sys
runs = {}
for path in glob.glob(os.path.join(sys.argv[1], "*.json")):
    d = json.load(open(path))
    runs.setdefault(d["broker"], []).append(d)
median = lambda label, key: statistics.median(r[key] for r in runs[label])
base = median("plain", "broker_cpu_secs_per_gb")
for label in ("acl", "quota"):
    spread = [round(r["broker_cpu_secs_per_gb"], 3) for r in runs[label]]
    print(f'{label}: broker CPU per GB {median(label, "broker_cpu_secs_per_gb") / base:.3f}x plain '
          f'(median of {len(runs[label])}: {spread}; plain {[round(r["broker_cpu_secs_per_gb"], 3) for r in runs["plain"]]})')
PY
echo "results in $out"
