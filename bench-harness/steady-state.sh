# Shared by the bench scripts (sourced): their preamble (`bench_build`, `bench_workdir`) and what it takes to measure a broker in steady
# state rather than a cold start or a backlog. A round is measured only after its
# broker has settled, on a device with nothing left to write from the round before,
# and says whether it met its target rate. The raw limits, printed at the start and at
# the end, show a machine that drifted in between.
# The caller sets `skein` (the binary whose `bench run` drives the load).

# Starts one broker on CPU 0 with its files under DIR and waits until it accepts
# connections: Skein with one shard on port 19092 (EXTRA flags passed on), or Apache
# Kafka (`peers/kafka/run-kafka.sh`) on port 19094. Sets `broker_pid` and `port`. The
# caller sets `root` too.
#   start_pinned skein|kafka DIR [EXTRA...]
start_pinned() {
  local broker="$1" dir="$2"
  shift 2
  mkdir -p "$dir"
  case "$broker" in
    skein)
      taskset -c 0 "$skein" start --cores 0-0 --data-dir "$dir/data" --listener 127.0.0.1:19092 "$@" \
        > "$dir/log" 2>&1 &
      broker_pid=$!; port=19092
      for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/19092) 2>/dev/null && return 0; sleep 0.1; done
      ;;
    kafka)
      broker_pid=$("$root/bench-harness/peers/kafka/run-kafka.sh" "$dir" 19094 0 | tail -1); port=19094
      ;;
    *) echo "unknown broker $broker" >&2; exit 2 ;;
  esac
}

# Fewer than 3 rounds give no spread, and with 2 the median is a mean of two.
#   require_rounds ROUNDS USAGE
require_rounds() {
  if ! [[ "$1" =~ ^[0-9]+$ ]] || [ "$1" -lt 3 ]; then
    echo "ROUNDS must be at least 3 (got '$1'): fewer rounds give no spread to judge a median by" >&2
    echo "usage: $2" >&2
    exit 2
  fi
}

# The machine's raw limits: O_DIRECT sequential write to DIR and loopback TCP over one
# connection.
#   raw_limits WHEN DIR
raw_limits() {
  echo "== raw limits ($1)"
  dd if=/dev/zero of="$2/raw" bs=1M count=1024 oflag=direct conv=fsync 2>&1 | tail -1 \
    | sed 's/^/O_DIRECT sequential write: /'
  rm -f "$2/raw"
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
}

# Lets the device drain: a round's writes still in the page cache would otherwise be
# written back during the next round, on that round's time. Waits (60 s at most) until
# Dirty + Writeback is under 32 MiB.
drain_device() {
  sync
  local waited=0 pending_kb
  while :; do
    pending_kb=$(awk '/^(Dirty|Writeback):/ { kb += $2 } END { print kb + 0 }' /proc/meminfo)
    [ "$pending_kb" -lt 32768 ] && return 0
    if [ "$waited" -ge 60 ]; then
      echo "the device did not drain in 60 s: $((pending_kb / 1024)) MiB still dirty or under writeback"
      return 0
    fi
    sleep 1; waited=$((waited + 1))
  done
}

# The preamble the bench scripts share. `bench_build` builds the release binary and
# sets `skein` to it; `bench_workdir` makes the temp dir `work` and, at exit, stops the
# broker `broker_pid` names (if any) and removes `work`.
bench_build() {
  cargo build --release --manifest-path "$root/Cargo.toml" >&2
  skein="$root/target/release/skein"
}

bench_workdir() {
  work="$(mktemp -d)"
  broker_pid=""
  trap 'if [ -n "$broker_pid" ]; then stop_broker "$broker_pid"; fi; rm -rf "$work"' EXIT
}

# Stops a broker (SIGTERM, then SIGKILL after 30 s) and waits until its process is
# gone: a JVM started by run-kafka.sh is not this shell's child, so `wait` alone
# returns at once.
#   stop_broker PID
stop_broker() {
  kill "$1" 2>/dev/null || true
  for _ in $(seq 1 300); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# A warm-up pass in a few words: its publish p99 and, at a fixed rate, the share of
# the target it achieved.
#   describe_pass FILE
describe_pass() {
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p99, target = r["publish_latency"]["p99_us"] / 1000, r.get("target_msgs_per_sec")
rate = "" if target is None else f" at {100 * r['published_msgs_per_sec'] / target:.0f}% of the rate"
errors = f" with {r['publish_errors']} publish errors" if r["publish_errors"] else ""
print(f"{p99:.2f} ms{rate}{errors}", end="")
PY
}

# Whether two warm-up passes show a settled broker: each published and had no publish
# error (a pass whose every produce failed, on a full disk say, has a p99 of 0), publish
# p99 within 25% of each other, and at a fixed rate each pass within 1% of its target
# either way (a pass above it was catching up a backlog, one below it was falling
# behind).
#   settled FILE FILE
settled() {
  python3 - "$1" "$2" <<'PY'
import json, sys
runs = [json.load(open(p)) for p in sys.argv[1:]]
def steady(r):
    if r["published_msgs"] == 0 or r["publish_errors"] > 0:
        return False
    t = r.get("target_msgs_per_sec")
    return t is None or abs(r["published_msgs_per_sec"] - t) <= 0.01 * t
low, high = sorted(r["publish_latency"]["p99_us"] for r in runs)
sys.exit(0 if all(map(steady, runs)) and high <= low * 1.25 else 1)
PY
}

# One line on a measured round: the rate it achieved against its target, whether that
# met the target (at least 99% of it, as `RunResult::rate_met` decides) and its
# publish p99.
#   report_round LABEL FILE
report_round() {
  python3 - "$1" "$2" <<'PY'
import json, sys
label, path = sys.argv[1], sys.argv[2]
r = json.load(open(path))
rate, target = r["published_msgs_per_sec"], r.get("target_msgs_per_sec")
p99 = r["publish_latency"]["p99_us"] / 1000
errors = f", {r['publish_errors']} PUBLISH ERRORS" if r["publish_errors"] else ""
if target is None:
    print(f"{label}: {rate:.0f} msg/s at max rate, publish p99 {p99:.2f} ms{errors}")
else:
    met = "rate met" if rate >= target * 0.99 else "rate NOT met (left out of the latency medians if another round met it)"
    backlog = ", above the target: a backlog being caught up" if rate > target * 1.01 else ""
    print(f"{label}: {rate:.0f} of {target:.0f} msg/s ({100 * rate / target:.1f}%), {met}{backlog}, publish p99 {p99:.2f} ms{errors}")
PY
}

# Warms a running broker with short passes of the workload until two passes in a row
# have settled (6 passes at most): a JVM compiles its hot paths during the first
# minutes, and any broker's caches fill. Each pass writes its result to DIR; its
# topics are fresh, as a measured run's are, and deleted when it ends (`skein bench run`),
# so that passes at max rate do not fill the disk.
# WARMUP_PASS_SECS (default 10) sets a pass's measured length.
#   warm_up LABEL PORT PID WORKLOAD DIR PREFIX
warm_up() {
  local label="$1" port="$2" pid="$3" workload="$4" dir="$5" prefix="$6"
  local pass passes=""
  mkdir -p "$dir"
  for pass in 1 2 3 4 5 6; do
    # A pass's progress lines go to its log, shown only if the pass fails.
    if ! taskset -c 1 "$skein" bench run "$workload" --bootstrap-server "127.0.0.1:$port" --broker-pid "$pid" \
      --label "$label" --duration-secs "${WARMUP_PASS_SECS:-10}" --driver "${DRIVER:-librdkafka}" \
      --out "$dir/$prefix-$pass.json" > "$dir/$prefix-$pass.log" 2>&1; then
      cat "$dir/$prefix-$pass.log" >&2
      return 1
    fi
    passes="$passes${passes:+, }$(describe_pass "$dir/$prefix-$pass.json")"
    if [ "$pass" -gt 1 ] && settled "$dir/$prefix-$((pass - 1)).json" "$dir/$prefix-$pass.json"; then
      echo "$prefix: settled after $pass warm-up passes (publish p99 per pass: $passes)"
      return 0
    fi
  done
  echo "$prefix: did not settle in 6 warm-up passes (publish p99 per pass: $passes); measuring anyway"
}
