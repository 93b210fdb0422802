#!/usr/bin/env bash
# Runs the Python client scenarios against a fresh Skein node on a free loopback port.
#   usage: tests/clients/python/run.sh [kafka-python-2] [kafka-python-3] [aiokafka]   (default: all three)
# Variables: SKEIN (binary, default $ROOT/target/debug/skein), BOOTSTRAP (host:port of a
# running broker to use instead of starting one), SKEIN_LOG (broker log filter).
# Needs the venvs from setup.sh. Exit status: 0 when every scenario printed OK.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
CLIENTS="$ROOT/target/clients"
SKEIN="${SKEIN:-$ROOT/target/debug/skein}"
[ $# -gt 0 ] || set -- kafka-python-2 kafka-python-3 aiokafka

work="$(mktemp -d)"
broker=
cleanup() {
    if [ -n "$broker" ]; then kill "$broker" 2>/dev/null || true; wait "$broker" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

if [ -z "${BOOTSTRAP:-}" ]; then
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    "$SKEIN" start --cores 1 --listener "127.0.0.1:$port" --admin-listener off --data-dir "$work/data" \
        --group-initial-rebalance-delay-ms 500 >"$work/skein.log" 2>&1 &
    broker=$!
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        kill -0 "$broker" 2>/dev/null || { cat "$work/skein.log" >&2; exit 1; }
        sleep 0.1
    done
    BOOTSTRAP="127.0.0.1:$port"
fi

status=0
for client in "$@"; do
    case "$client" in
        aiokafka) script="$HERE/aiokafka_scenario.py" ;;
        kafka-python-*) script="$HERE/scenario.py" ;;
        *) echo "unknown client $client" >&2; exit 2 ;;
    esac
    python="$CLIENTS/$client/bin/python"
    [ -x "$python" ] || { echo "$python missing: run $HERE/setup.sh" >&2; exit 2; }
    if ! timeout 150 "$python" "$script" "$BOOTSTRAP" "py-$client-$$-$RANDOM"; then
        echo "FAILED: $client" >&2
        status=1
    fi
done
if [ "$status" != 0 ] && [ -n "$broker" ]; then
    echo "--- last lines of the broker log ($work/skein.log)" >&2
    tail -n 40 "$work/skein.log" >&2
fi
exit "$status"
