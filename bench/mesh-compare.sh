#!/usr/bin/env bash
# `crescent bench` through a mesh of one cluster and through a mesh of two clusters, in one run,
# and the ratio two / one per figure (docs/scale-out.md, "Clients"; docs/performance.md, "Mesh").
# Also the plain single-cluster bench without a mesh (bench/crescentd.sh's crescentd on its
# embedded default), to show what the mesh itself costs.
#
#   bench/mesh-compare.sh [N] [VALUE_BYTES]     (defaults 20000 4096)
#
# CRESCENT_BIN_DIR=DIR runs the crescentd and crescent found there instead of building the
# release binaries first (bench/crescentd.sh). MESH_SERVER_ARGS adds arguments to the mesh
# clusters' crescentd (e.g. `--config FILE`), not to the plain one.
#
# Starts etcd on loopback (as scripts/test.sh does) and three standalone clusters on it, each
# one crescentd (`--etcd URL --cluster C --mesh M --advertise HOST:PORT`, no standby, objects
# on the bench's own storage owners only): cluster one-a alone in mesh M-one, two-a and two-b
# in mesh M-two. Runs plain, one, two, then the three again (alternating, so drifting machine
# load hits all alike) and keeps the better of the two runs per figure. Everything it started
# is stopped on exit.
set -euo pipefail
N=${1:-20000}
SIZE=${2:-4096}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# The release binaries and the plain crescentd ($server on $port, in $work).
. "$root/bench/crescentd.sh"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=("$server")
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

etcd_port=$(free_port); etcd_peer=$(free_port)
etcd --name crescent-bench --data-dir "$work/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-cluster "crescent-bench=http://127.0.0.1:$etcd_peer" >"$work/etcd.log" 2>&1 &
pids+=($!)
etcd_url="http://127.0.0.1:$etcd_port"
for _ in $(seq 100); do
  curl -sf "$etcd_url/health" >/dev/null 2>&1 && break
  sleep 0.1
done

mesh_prefix="bench-$$"
read -r -a mesh_server_args <<<"${MESH_SERVER_ARGS:-}"

# Starts cluster $2 of mesh $1: one crescentd, the active of its cluster.
start_cluster() {
  local p; p=$(free_port)
  "$bin/crescentd" --data-dir "$work/$2" --listen "127.0.0.1:$p" --log warn \
    --etcd "$etcd_url" --cluster "$2" --mesh "$1" --advertise "127.0.0.1:$p" \
    "${mesh_server_args[@]}" >"$work/$2.log" 2>&1 &
  pids+=($!)
}

# Waits until mesh $1 has $2 serving clusters, each answering `mesh ls` with its objects.
wait_serving() {
  for _ in $(seq 300); do
    local ls
    ls=$("$bin/crescent" --etcd "$etcd_url" --mesh "$1" --json mesh ls 2>/dev/null) || ls='{}'
    if python3 -c 'import json,sys; m=json.loads(sys.argv[1]); sys.exit(0 if sum(1 for c in m.get("clusters", []) if c["state"] == "serving" and c.get("objects") is not None) == int(sys.argv[2]) else 1)' "$ls" "$2"; then
      return 0
    fi
    sleep 0.1
  done
  echo "mesh $1 has not $2 serving clusters; logs in $work" >&2
  exit 1
}

# One cluster serves before the next starts (the first makes the mesh).
start_cluster "$mesh_prefix-one" one-a; wait_serving "$mesh_prefix-one" 1
start_cluster "$mesh_prefix-two" two-a; wait_serving "$mesh_prefix-two" 1
start_cluster "$mesh_prefix-two" two-b; wait_serving "$mesh_prefix-two" 2

run_plain() { "$bin/crescent" --server "127.0.0.1:$port" bench --n "$N" --size "$SIZE" --json; }
run_mesh() { "$bin/crescent" --etcd "$etcd_url" --mesh "$mesh_prefix-$1" bench --n "$N" --size "$SIZE" --json; }
runs=()
for round in 1 2; do
  for kind in plain one two; do
    if [ "$kind" = plain ]; then r=$(run_plain); else r=$(run_mesh "$kind"); fi
    echo "round $round $kind: $r" >&2
    runs+=("$kind" "$r")
  done
done

python3 - "${runs[@]}" <<'PY'
import json, sys
args = sys.argv[1:]
runs = {}
for kind, line in zip(args[::2], args[1::2]):
    runs.setdefault(kind, []).append(json.loads(line))
fields = ["put", "get", "put_batch", "get_batch", "exist"]
best = {k: {f: max(r[f] for r in rs) for f in fields} for k, rs in runs.items()}
print(f"{'figure':<10} {'plain/s':>10} {'mesh 1/s':>10} {'mesh 2/s':>10} {'two/one':>8} {'one/plain':>9}")
for f in fields:
    p, o, t = best["plain"][f], best["one"][f], best["two"][f]
    print(f"{f:<10} {p:>10.0f} {o:>10.0f} {t:>10.0f} {t / o:>8.2f} {o / p:>9.2f}")
print(json.dumps({"two_over_one": {f: round(best["two"][f] / best["one"][f], 3) for f in fields},
                  "one_over_plain": {f: round(best["one"][f] / best["plain"][f], 3) for f in fields}}))
PY
