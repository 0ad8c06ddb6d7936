#!/usr/bin/env bash
# A/B of `crescent bench` without the reference store: two crescentd side by side, `crescent
# bench` against each in turn for ROUNDS rounds, then the medians and B/A per figure.
#
#   bench/ab.sh DIR_A DIR_B [ROUNDS] [N] [VALUE_BYTES]   two builds (crescentd + crescent each)
#   bench/ab.sh --auth DIR [ROUNDS] [N] [VALUE_BYTES]    one build, A open, B with [auth] on
#                                                        (client token, owner token for its segment)
#
# AB_B_SERVER_ARGS and AB_B_CLIENT_ARGS add arguments to B's crescentd and `crescent` (e.g. a
# [tls] config and --ca-file, for what TLS costs; docs/performance.md).
set -euo pipefail
auth=0
if [ "${1:-}" = --auth ]; then auth=1; shift; A=$1; B=$1; shift; else A=$1; B=$2; shift 2; fi
ROUNDS=${1:-4}; N=${2:-20000}; SIZE=${3:-4096}
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wa=$(mktemp -d /tmp/crescent-ab.XXXXXX); wb=$(mktemp -d /tmp/crescent-ab.XXXXXX)
pa=$(port); pb=$(port)
read -r -a b_server <<<"${AB_B_SERVER_ARGS:-}"
read -r -a b_client <<<"${AB_B_CLIENT_ARGS:-}"
b_bench=()
if [ "$auth" = 1 ]; then
  head -c 32 /dev/urandom >"$wb/auth.key" && chmod 600 "$wb/auth.key"
  b_server+=(--auth-secret-file "$wb/auth.key")
  issue() { "$B/crescent" token issue --secret-file "$wb/auth.key" "$@"; }
  b_client+=(--token "$(issue --role client --tenant bench)")
  b_bench=(--owner-token "$(issue --role owner --owner bench-owner)" --owner-id bench-owner)
fi
"$A/crescentd" --data-dir "$wa/data" --listen "127.0.0.1:$pa" --log warn >"$wa/log" 2>&1 &
sa=$!
"$B/crescentd" --data-dir "$wb/data" --listen "127.0.0.1:$pb" --log warn "${b_server[@]}" \
  >"$wb/log" 2>&1 &
sb=$!
trap 'kill $sa $sb 2>/dev/null; wait 2>/dev/null; rm -rf "$wa" "$wb"' EXIT
for p in $pa $pb; do
  for _ in $(seq 100); do
    { curl -sf "127.0.0.1:$p/healthz" || curl -sfk "https://127.0.0.1:$p/healthz"; } >/dev/null 2>&1 \
      && break
    sleep 0.1
  done
done
out=$(mktemp)
for _ in $(seq "$ROUNDS"); do
  echo "A $("$A/crescent" --server "127.0.0.1:$pa" bench --n "$N" --size "$SIZE" --json)" >>"$out"
  echo "B $("$B/crescent" --server "127.0.0.1:$pb" "${b_client[@]}" bench --n "$N" --size "$SIZE" \
    "${b_bench[@]}" --json)" >>"$out"
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = {"A": [], "B": []}
for line in open(sys.argv[1]):
    rows[line[0]].append(json.loads(line[2:]))
print(f"{'figure':<10} {'A median/s':>11} {'B median/s':>11} {'B/A':>6}  per round")
for f in ["put", "get", "put_batch", "get_batch", "exist"]:
    a = [r[f] for r in rows["A"]]; b = [r[f] for r in rows["B"]]
    ratio = statistics.median(b) / statistics.median(a)
    rounds = " ".join(f"{y / x:.2f}" for x, y in zip(a, b))
    print(f"{f:<10} {statistics.median(a):>11.0f} {statistics.median(b):>11.0f} {ratio:>6.2f}  {rounds}")
PY
rm -f "$out"
