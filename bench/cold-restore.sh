#!/usr/bin/env bash
# Issue 5's restore benchmark: cold-only objects restored through crescentd against a plain
# sequential read of the same cold files, same run (`crescent cold bench-restore`), in six
# modes, REPS times (modes in turn, so drifting load hits each alike). One line per run; the
# ratio is the bench's median per-round ratio restore / plain read.
#
#   bench/cold-restore.sh [REPS]     (default 3)
#
# CRESCENT_BIN_DIR=DIR runs the crescentd and crescent found there instead of building the
# release binaries first (bench/crescentd.sh; to compare two builds, run it once per
# directory, alternating).
# Modes: 4 MiB local restore with fresh buffers (the default) and `--reuse` (both passes into
# one reused buffer, as `cat` reads), the same two remote (`--no-local-cold-restore`: staged
# by crescentd, pulled over loopback TCP), 4 KiB per-object gets and one batch get per round.
set -euo pipefail
REPS=${1:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

. "$root/bench/crescentd.sh"

run() { # label, then the CLI's arguments
  local label=$1
  shift
  "$bin/crescent" --json --server "127.0.0.1:$port" "$@" | python3 -c '
import json, sys
r = json.load(sys.stdin)
rounds = " ".join("%.2f" % x["ratio"] for x in r["rounds"])
print("%-16s ratio %.3f  restore %.3f GiB/s %7.0f obj/s  plain %.3f GiB/s %7.0f obj/s  local %d  rounds %s" % (
    sys.argv[1], r["ratio"], r["restore_gib_s"], r["restore_objects_s"], r["cat_gib_s"],
    r["cat_objects_s"], r["local_restores"], rounds))' "$label"
}

echo "# $(date -u +%FT%TZ) $bin load $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq "$REPS"); do
  run "4M local fresh" cold bench-restore --size 4M --count 16 --rounds 5
  run "4M local reuse" cold bench-restore --size 4M --count 16 --rounds 5 --reuse
  run "4M remote fresh" --no-local-cold-restore cold bench-restore --size 4M --count 16 --rounds 5
  run "4M remote reuse" --no-local-cold-restore cold bench-restore --size 4M --count 16 --rounds 5 --reuse
  run "4K local fresh" cold bench-restore --size 4K --count 512 --rounds 3
  run "4K batch" cold bench-restore --size 4K --count 512 --rounds 3 --batch
  echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
done
