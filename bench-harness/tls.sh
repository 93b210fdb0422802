#!/usr/bin/env bash
# What TLS and SASL cost (issue 12): the 1-partition, 1 KiB, max-rate workload with
# the librdkafka driver (the native driver speaks PLAINTEXT only) against one Skein
# node serving PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512) listeners, alternated
# ROUNDS times (default 3), the broker pinned to CPU 0 and the generator to CPU 1.
# Prints throughput and broker CPU-seconds per GB per run, then each secured
# listener's median as a ratio to PLAINTEXT's. Certificates are made here (openssl).
# On a 2-core machine the generator's own TLS binds first at max rate, so RATE (msg/s)
# compares the listeners at one rate all of them reach: CPU per GB at equal load.
#   usage: [RATE=50000] [ROUNDS=3] bench-harness/tls.sh DURATION_SECS
# Results (JSON) go to bench-harness/results/tls-<date>/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=steady-state.sh
source "$root/bench-harness/steady-state.sh"
if [ $# -lt 1 ]; then echo "usage: bench-harness/tls.sh DURATION_SECS" >&2; exit 2; fi
duration="$1"
rounds="${ROUNDS:-3}"
workload="${WORKLOAD:-$root/bench-harness/workloads/1-topic-1-partition-1kb-max.toml}"
out="$root/bench-harness/results/tls-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
bench_build
bench_workdir

openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/ca.key" -out "$work/ca.pem" -days 2 -subj /CN=bench-ca 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$work/server.key" -out "$work/server.csr" -subj /CN=skein 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' > "$work/san"
openssl x509 -req -in "$work/server.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
  -out "$work/server.pem" -days 2 -extfile "$work/san" 2>/dev/null

raw_limits start "$work"
printf '%-10s %5s %10s %10s %10s\n' listener round msgs_per_s MB_per_s cpu_s/GB
for round in $(seq 1 "$rounds"); do
  for listener in PLAINTEXT SSL SASL_SSL; do
    mkdir -p "$work/b"
    "$skein" user add bench --mechanism SCRAM-SHA-512 --password bench-secret --data-dir "$work/b/data" > /dev/null
    taskset -c 0 "$skein" start --cores 0-0 --data-dir "$work/b/data" --listener 127.0.0.1:19092 \
      --listeners SSL://127.0.0.1:19093,SASL_SSL://127.0.0.1:19095 --admin-listener 127.0.0.1:19644 \
      --ssl-keystore-pem "$work/server.pem" --ssl-key-pem "$work/server.key" > "$work/b/log" 2>&1 &
    broker_pid=$!
    for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/19095) 2>/dev/null && break; sleep 0.1; done
    case "$listener" in
      PLAINTEXT) port=19092; options=() ;;
      SSL) port=19093; options=(-X security.protocol=SSL -X "ssl.ca.location=$work/ca.pem") ;;
      SASL_SSL) port=19095; options=(-X security.protocol=SASL_SSL -X "ssl.ca.location=$work/ca.pem"
        -X sasl.mechanisms=SCRAM-SHA-512 -X sasl.username=bench -X sasl.password=bench-secret) ;;
    esac
    file="$out/$listener-$round.json"
    taskset -c 1 "$skein" bench run "$workload" --bootstrap-server 127.0.0.1:$port --broker-pid "$broker_pid" \
      --label "$listener" --duration-secs "$duration" --warmup-secs "${WARMUP_SECS:-5}" \
      --driver librdkafka "${options[@]}" ${RATE:+--rate "$RATE"} --out "$file" > /dev/null
    python3 - "$file" "$listener" "$round" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f'{sys.argv[2]:<10} {sys.argv[3]:>5} {d["published_msgs_per_sec"]:>10.0f} {d["published_mb_per_sec"]:>10.1f} {d["broker_cpu_secs_per_gb"]:>10.3f}')
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
base_mb, base_cpu = median("PLAINTEXT", "published_mb_per_sec"), median("PLAINTEXT", "broker_cpu_secs_per_gb")
for label in ("SSL", "SASL_SSL"):
    print(f'{label}: throughput {median(label, "published_mb_per_sec") / base_mb:.2f}x PLAINTEXT, '
          f'broker CPU per GB {median(label, "broker_cpu_secs_per_gb") / base_cpu:.2f}x PLAINTEXT (medians of {len(runs[label])})')
PY
echo "results in $out"
