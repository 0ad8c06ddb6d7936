#!/usr/bin/env bash
# Starts crescentd on its embedded default (standalone, data dir ./crescent-data, listening on
# 127.0.0.1:7480) from a fresh machine: installs the build's system packages when missing, then
# builds and runs the release binary. Extra arguments go to crescentd (`-- --help` lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --build
exec cargo run --release --bin crescentd -- "$@"
