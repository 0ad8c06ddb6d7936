#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need when it is missing,
# starts the services they use on loopback, runs every test, and stops what it started.
#
#   scripts/test.sh            # everything (what CI runs)
#   scripts/test.sh -p crescent-journal   # extra arguments go to `cargo test`
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[test.sh] $*" >&2; }

# --- packages ------------------------------------------------------------------------------
scripts/deps.sh

# --- services on loopback -----------------------------------------------------------------
work=$(mktemp -d /tmp/crescent-test.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

etcd_port=$(free_port); etcd_peer=$(free_port)
etcd --name crescent-test --data-dir "$work/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-cluster "crescent-test=http://127.0.0.1:$etcd_peer" >"$work/etcd.log" 2>&1 &
pids+=($!)
redis_port=$(free_port)
redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no --dir "$work" \
  >"$work/redis.log" 2>&1 &
pids+=($!)
export CRESCENT_TEST_ETCD="http://127.0.0.1:$etcd_port"
export CRESCENT_TEST_REDIS="redis://127.0.0.1:$redis_port"
log "etcd on $CRESCENT_TEST_ETCD, redis on $CRESCENT_TEST_REDIS"

# --- tests -----------------------------------------------------------------------------------
# Build every test target first: for packages with integration tests this also builds their
# binaries (crescentd, crescent, crescent-replay) with the same features the tests use. The
# tests that spawn those binaries are then pointed at them, so none of them runs `cargo build`
# itself (which would resolve features differently and rebuild the server mid-run).
cargo test --workspace --no-run "$@"
if [ "$#" -eq 0 ]; then
  target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
  export CRESCENT_BIN_DIR="$target/debug"
  export CRESCENTD_BIN="$target/debug/crescentd"
  for b in crescentd crescent crescent-replay; do
    [ -x "$CRESCENT_BIN_DIR/$b" ] || { log "missing $CRESCENT_BIN_DIR/$b after the build"; exit 1; }
  done
fi
cargo test --workspace --no-fail-fast "$@"

# --- the Python package (python/, docs/python.md) --------------------------------------------
# A virtualenv kept in the target dir: the first run creates it and installs maturin and pytest
# from PyPI (about 20 s); later runs reuse it. `maturin develop` builds the extension with the
# dev profile in the same target dir, so it reuses the workspace's compiled crates: a few
# seconds warm (build and the whole pytest suite: about 10 s); the first time it also builds
# pyo3 and any dependency whose features differ from the workspace build's (and a cargo build
# or clippy of crescent-py in between makes it rebuild pyo3 once: maturin sets PYO3_* variables
# that pyo3's build script reads). pytest then runs against the crescentd built above.
if [ "$#" -eq 0 ]; then
  venv="$target/python-venv"
  if [ ! -x "$venv/bin/maturin" ] || [ ! -x "$venv/bin/pytest" ]; then
    log "creating $venv (maturin, pytest)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check maturin pytest
  fi
  (cd python && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" maturin develop -q)
  "$venv/bin/python" -m pytest -q python/tests
fi
