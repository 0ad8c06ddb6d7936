#!/usr/bin/env bash
# Installs the Debian packages Crescent needs when they are missing (apt; sudo when not root).
#
#   scripts/deps.sh          # to build and to run the tests: protoc, etcd, redis, a C compiler
#   scripts/deps.sh --build  # to build only (etcd-client's build script runs protoc)
#
# Building needs protoc and protobuf's well-known types (etcd-client compiles etcd's protos,
# which import them) and a C compiler; the tests also run etcd and redis on loopback.
set -euo pipefail

log() { echo "[deps.sh] $*" >&2; }

need_pkgs=()
command -v protoc >/dev/null 2>&1 || need_pkgs+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/descriptor.proto ] || need_pkgs+=(libprotobuf-dev)
command -v cc >/dev/null 2>&1 || need_pkgs+=(gcc)
if [ "${1:-}" != "--build" ]; then
  command -v etcd >/dev/null 2>&1 || need_pkgs+=(etcd-server)
  command -v redis-server >/dev/null 2>&1 || need_pkgs+=(redis-server)
fi
if ((${#need_pkgs[@]})); then
  log "installing ${need_pkgs[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
  # Debian starts these as system services on install; the tests run their own on loopback.
  $SUDO systemctl stop etcd redis-server >/dev/null 2>&1 || true
fi
