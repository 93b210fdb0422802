#!/usr/bin/env bash
# Creates the virtualenvs the Python client conformance scenarios run in:
#   $ROOT/target/clients/kafka-python-2   kafka-python 2.x
#   $ROOT/target/clients/kafka-python-3   kafka-python 3.x
#   $ROOT/target/clients/aiokafka         aiokafka
#   $ROOT/target/clients/confluent-kafka  confluent-kafka (librdkafka, with its share consumer)
# Idempotent: a venv that already has the pinned version is left alone.
set -euo pipefail

KAFKA_PYTHON_2_VERSION=2.3.3
KAFKA_PYTHON_3_VERSION=3.0.12
AIOKAFKA_VERSION=0.14.0
CONFLUENT_KAFKA_VERSION=2.16.2

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
CLIENTS="$ROOT/target/clients"
PYTHON="${PYTHON:-python3}"

command -v "$PYTHON" >/dev/null || { echo "setup.sh: $PYTHON not found" >&2; exit 1; }

# python3 -m venv needs ensurepip, which Debian ships separately (python3-venv).
VENV_CHECKED=
ensure_venv_module() {
    [ -n "$VENV_CHECKED" ] && return
    VENV_CHECKED=1
    local probe
    probe="$(mktemp -d)"
    if "$PYTHON" -m venv "$probe/v" >/dev/null 2>&1; then
        rm -rf "$probe"
        return
    fi
    rm -rf "$probe"
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        local minor
        minor="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
        echo "setup.sh: installing python3-venv" >&2
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null ||
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q "python${minor}-venv" >/dev/null
    else
        echo "setup.sh: '$PYTHON -m venv' fails; install python3-venv" >&2
        exit 1
    fi
}

# make_venv NAME PACKAGE VERSION
make_venv() {
    local name="$1" pkg="$2" version="$3" dir="$CLIENTS/$1"
    if [ -x "$dir/bin/python" ] &&
        [ "$("$dir/bin/python" -c "import importlib.metadata as m; print(m.version('$pkg'))" 2>/dev/null || true)" = "$version" ]; then
        echo "$name: $pkg $version already installed"
        return
    fi
    ensure_venv_module
    rm -rf "$dir"
    "$PYTHON" -m venv "$dir"
    "$dir/bin/pip" install -q --disable-pip-version-check "$pkg==$version"
    echo "$name: installed $pkg $version"
}

mkdir -p "$CLIENTS"
make_venv kafka-python-2 kafka-python "$KAFKA_PYTHON_2_VERSION"
make_venv kafka-python-3 kafka-python "$KAFKA_PYTHON_3_VERSION"
make_venv aiokafka aiokafka "$AIOKAFKA_VERSION"
make_venv confluent-kafka confluent-kafka "$CONFLUENT_KAFKA_VERSION"
