#!/usr/bin/env bash
# Runs shipped workloads against Skein and Apache Kafka in alternation (A B A B ...),
# each broker pinned to CPU 0 and the load generator to CPU 1, and prints the
# comparison with the spread over rounds, plus the machine's raw limits.
#   usage: bench-harness/suite.sh [ROUNDS] [DURATION_SECS] [WORKLOAD...]
# Results (JSON, SVG) go to bench-harness/results/<date>/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${1:-3}"; duration="${2:-30}"; shift $(( $# > 2 ? 2 : $# )) || true
workloads=("$@")
if [ ${#workloads[@]} -eq 0 ]; then
  workloads=("$root"/bench-harness/workloads/*.toml)
fi
out="$root/bench-harness/results/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
cargo build --release --manifest-path "$root/Cargo.toml" >&2
skein="$root/target/release/skein"
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

echo "== raw limits"
dd if=/dev/zero of="$work/raw" bs=1M count=1024 oflag=direct conv=fsync 2>&1 | tail -1 | sed 's/^/O_DIRECT sequential write: /'
rm -f "$work/raw"
python3 - <<'PY'
import socket, threading, time
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
port = srv.getsockname()[1]; total = 2 << 30
def sink():
    c, _ = srv.accept(); n = 0
    while n < total:
        b = c.recv(1 << 20)
        if not b: break
        n += len(b)
t = threading.Thread(target=sink); t.start()
s = socket.create_connection(("127.0.0.1", port)); buf = b"x" * (1 << 20); start = time.time()
for _ in range(total >> 20): s.sendall(buf)
s.close(); t.join()
print(f"loopback TCP, one connection: {total / (time.time() - start) / 1e6:.0f} MB/s")
PY

start_skein() {
  rm -rf "$work/skein"; mkdir -p "$work/skein"
  taskset -c 0 "$skein" start --cores 0-0 --data-dir "$work/skein/data" --listener 127.0.0.1:19092 --admin-listener off \
    > "$work/skein/log" 2>&1 &
  echo $!
  for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/19092) 2>/dev/null && return; sleep 0.1; done
}
start_kafka() {
  rm -rf "$work/kafka"; mkdir -p "$work/kafka"
  "$root/bench-harness/peers/kafka/run-kafka.sh" "$work/kafka" 19094 0
}

for workload in "${workloads[@]}"; do
  name="$(basename "$workload" .toml)"
  for round in $(seq 1 "$rounds"); do
    for broker in skein kafka; do
      if [ "$broker" = skein ]; then pid=$(start_skein); port=19092; else pid=$(start_kafka | tail -1); port=19094; fi
      sleep 2
      taskset -c 1 "$skein" bench run "$workload" --bootstrap-server 127.0.0.1:$port --broker-pid "$pid" --label "$broker" \
        --duration-secs "$duration" --out "$out/$name-$broker-$round.json" > /dev/null
      kill "$pid"; wait "$pid" 2>/dev/null || true
    done
  done
  echo "== $name"
  "$skein" bench compare "$out/$name"-*.json --svg "$out/$name.svg"
done
echo "results in $out"
