#!/usr/bin/env bash
# Share groups (KIP-932, issue 40): share-consumer throughput and end-to-end latency,
# Skein against Apache Kafka 4.4 on this machine, each broker pinned to CPU 0 and the
# clients to CPU 1, alternated ROUNDS times (default 3):
#   throughput - RECORDS (default 2000000) records of SIZE bytes (default 256) in a
#                topic of PARTITIONS (default 4) partitions, produced first
#                (kafka-producer-perf-test), then read by Kafka 4.4's
#                ShareConsumerPerformance with THREADS share consumers (default 2); the
#                figure covers the whole run, joining included, so both groups set
#                share.assignment.interval.ms=0 (Kafka then assigns at the second
#                heartbeat, about a second in, instead of five; Skein assigns at the first);
#   latency    - a producer at RATE records/s (default 2000) for LATENCY_RECORDS
#                (default 20000) while a share consumer takes them: p50, p99 and max
#                from send to poll (tests/share/Share.java `latency`).
# Prints every round's figures and the median of Skein's to Kafka's ratio. With
# KEY_ORDERED=1, Kafka is left out and Skein runs twice, the second time with the
# groups set to skein.share.key.ordered=true (use with KEYS=n, and THREADS above
# PARTITIONS so that members share partitions).
#   usage: [ROUNDS=3] [RECORDS=300000] bench-harness/share.sh
# Results go to bench-harness/results/share-<date>/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=steady-state.sh
source "$root/bench-harness/steady-state.sh"
rounds="${ROUNDS:-3}"
records="${RECORDS:-2000000}"
size="${SIZE:-256}"
partitions="${PARTITIONS:-4}"
threads="${THREADS:-2}"
rate="${RATE:-2000}"
latency_records="${LATENCY_RECORDS:-20000}"
key_ordered="${KEY_ORDERED:-0}"
# KEYS=n: records keyed round-robin over n keys (default: null keys).
keys="${KEYS:-}"
key_args=()
if [ -n "$keys" ]; then key_args=(--key-distribution range --record-key-range "$keys"); fi
out="$root/bench-harness/results/share-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
bench_build
bench_workdir
cp="$(bash "$root/tests/share/classpath.sh" >/dev/null; cat "$root/target/kafka-share-classpath.txt")"
java_tool() { taskset -c 1 java -cp "$cp" "$@" 2>&1 | grep -v '^SLF4J'; }
share() { java_tool "$root/tests/share/Share.java" "$@"; }

start_broker() { # kind dir port
  case "$1" in
    skein*)
      taskset -c 0 "$skein" start --cores 0-0 --data-dir "$2/data" --listener "127.0.0.1:$3" \
        --admin-listener off > "$2/log" 2>&1 &
      broker_pid=$!
      for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$3") 2>/dev/null && break; sleep 0.1; done
      if ! (exec 3<>"/dev/tcp/127.0.0.1/$3") 2>/dev/null; then cat "$2/log" >&2; exit 1; fi ;;
    kafka*)
      broker_pid="$("$root/bench-harness/peers/kafka/run-kafka.sh" "$2" "$3" 0)" ;;
  esac
}

kinds=(skein kafka)
if [ "$key_ordered" = 1 ]; then kinds=(skein skein-ordered); fi
printf '%-14s %5s %12s %10s %10s %10s %10s\n' broker round records_per_s MB_per_s p50_us p99_us max_us
for round in $(seq 1 "$rounds"); do
  for index in "${!kinds[@]}"; do
    kind="${kinds[$index]}"
    dir="$work/$kind-$round"
    raw="$out/$kind-$round"
    mkdir -p "$dir" "$raw"
    # A port of its own each run: a stopped broker's port may linger.
    port=$((19100 + round * 10 + index * 3))
    start_broker "$kind" "$dir" "$port"
    b="127.0.0.1:$port"
    share create "$b" bench "$partitions" > /dev/null
    share create "$b" lat 1 > /dev/null
    for group in tput lat; do
      share set-reset "$b" "$group" earliest > /dev/null
      share set-config "$b" "$group" share.assignment.interval.ms 0 > /dev/null
      if [ "$kind" = skein-ordered ]; then share set-config "$b" "$group" skein.share.key.ordered true > /dev/null; fi
    done
    java_tool org.apache.kafka.tools.ProducerPerformance --topic bench --num-records "$records" \
      --record-size "$size" --throughput -1 "${key_args[@]}" --producer-props "bootstrap.servers=$b" acks=1 linger.ms=5 \
      > "$raw/produce.txt"
    java_tool org.apache.kafka.tools.ShareConsumerPerformance --bootstrap-server "$b" --topic bench \
      --group tput --num-records "$records" --threads "$threads" --timeout 30000 > "$raw/consume.txt"
    share latency "$b" lat lat "$latency_records" "$rate" > "$raw/latency.txt"
    stop_broker "$broker_pid"
    broker_pid=""
    python3 - "$raw" "$kind" "$round" "$out/figures.tsv" <<'PY'
import sys
d, kind, rnd, tsv = sys.argv[1:]
lines = [l for l in open(d + "/consume.txt") if l.strip() and not l.startswith("start.time")]
fields = [f.strip() for f in lines[-1].split(",")]
# start.time, end.time, data.consumed.in.MB, MB.sec, nMsg.sec, data.consumed.in.nMsg, fetch.time.ms
mb_s, n_s, n = float(fields[3]), float(fields[4]), int(fields[5])
lat = next(l.split() for l in open(d + "/latency.txt") if l.startswith("LATENCY"))
p50, p99, mx = (int(x) for x in lat[1:4])
print(f"{kind:<14} {rnd:>5} {n_s:>12.0f} {mb_s:>10.1f} {p50:>10} {p99:>10} {mx:>10}")
with open(tsv, "a") as f:
    f.write(f"{kind}\t{rnd}\t{n}\t{n_s}\t{mb_s}\t{p50}\t{p99}\t{mx}\n")
PY
  done
done
python3 - "$out/figures.tsv" "${kinds[1]}" <<'PY'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1])]
other = sys.argv[2]
by = {}
for kind, rnd, n, n_s, mb_s, p50, p99, mx in rows:
    by.setdefault(int(rnd), {})[kind] = (float(n_s), int(p99))
tput = [r["skein"][0] / r[other][0] for r in by.values() if "skein" in r and other in r]
p99 = [r["skein"][1] / r[other][1] for r in by.values() if "skein" in r and other in r]
print(f"skein/{other} throughput per round: {', '.join(f'{x:.2f}' for x in tput)} (median {statistics.median(tput):.2f})")
print(f"skein/{other} p99 latency per round: {', '.join(f'{x:.2f}' for x in p99)} (median {statistics.median(p99):.2f})")
PY
echo "results: $out"
