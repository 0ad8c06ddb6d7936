#!/usr/bin/env bash
# Runs the reference store's five figures (../shared/anchors/run-mooncake.sh) and Crescent's
# (`crescent bench`) in one go on this machine, and prints the five ratios Crescent / reference.
#
#   bench/compare-mooncake.sh [N] [VALUE_BYTES]     (defaults 20000 4096)
#
# CRESCENT_BIN_DIR=DIR runs the crescentd and crescent found there instead of building the
# release binaries first (bench/crescentd.sh). CRESCENT_BENCH_AUTH=1 runs crescentd with [auth]
# on and the bench with a client token (objects) and an owner token (its segment).
#
# Topology for both: one client process that is also the only storage owner of its data, a
# master/crescentd in another process, single operations synchronous, batches of 128, TCP.
set -euo pipefail
N=${1:-20000}
SIZE=${2:-4096}
root=$(cd "$(dirname "$0")/.." && pwd)
anchors="$root/../shared/anchors"
cd "$root"

. "$root/bench/crescentd.sh"

# Alternate the two so drifting machine load hits both alike; keep the better of two runs each.
run_crescent() {
  "$bin/crescent" --server "127.0.0.1:$port" "${auth_args[@]}" bench --n "$N" --size "$SIZE" \
    "${bench_auth_args[@]}" --json
}
run_mooncake() { bash "$anchors/run-mooncake.sh" "$N" "$SIZE"; }
c1=$(run_crescent); m1=$(run_mooncake); c2=$(run_crescent); m2=$(run_mooncake)

python3 - "$c1" "$c2" "$m1" "$m2" <<'PY'
import json, re, sys
c = [json.loads(x) for x in sys.argv[1:3]]
def parse(line):
    return {k: float(v) for k, v in re.findall(r"(put_batch|get_batch|put|get|exist) (\d+(?:\.\d+)?)/s", line)}
m = [parse(x) for x in sys.argv[3:5]]
fields = ["put", "get", "put_batch", "get_batch", "exist"]
best_c = {f: max(r[f] for r in c) for f in fields}
best_m = {f: max(r[f] for r in m) for f in fields}
print(f"{'figure':<10} {'crescent/s':>12} {'reference/s':>12} {'ratio':>7}")
for f in fields:
    print(f"{f:<10} {best_c[f]:>12.0f} {best_m[f]:>12.0f} {best_c[f]/best_m[f]:>7.2f}")
print(json.dumps({f: round(best_c[f] / best_m[f], 3) for f in fields}))
PY
