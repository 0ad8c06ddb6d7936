# Sourced by the bench scripts: the release binaries, and one crescentd on its embedded
# default device in a fresh directory, stopped (and the directory removed) when the script
# exits. Expects `root` (the repository). Sets `bin`, `work`, `port` and `server`.
#
# CRESCENT_BIN_DIR=DIR runs the crescentd and crescent found there instead of building the
# release binaries first (to compare builds, e.g. ones made earlier while others compile).
#
# CRESCENT_BENCH_AUTH=1 runs crescentd with [auth] on (a fresh key) and sets `auth_args` to
# the client's `--token` (a client token) for the scripts to pass, and `bench_auth_args` to
# `crescent bench`'s `--owner-token` (an owner token) and `--owner-id`. Empty otherwise.

bin="${CRESCENT_BIN_DIR:-}"
if [ -z "$bin" ]; then
  cargo build --release --bin crescentd --bin crescent >&2
  bin="${CARGO_TARGET_DIR:-$root/target}/release"
fi
work=$(mktemp -d /tmp/crescent-bench.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
auth_args=()
bench_auth_args=()
server_auth_args=()
if [ "${CRESCENT_BENCH_AUTH:-0}" = 1 ]; then
  head -c 32 /dev/urandom >"$work/auth.key" && chmod 600 "$work/auth.key"
  server_auth_args=(--auth-secret-file "$work/auth.key")
  issue() { "$bin/crescent" token issue --secret-file "$work/auth.key" "$@"; }
  auth_args=(--token "$(issue --role client --tenant bench)")
  bench_auth_args=(--owner-token "$(issue --role owner --owner bench-owner)" --owner-id bench-owner)
fi
# CRESCENT_BENCH_QUOTA=BYTES gives the bench's tenant (`default`, or `bench` with auth) a
# quota policy of that many bytes, so every put is admitted against a limit (docs/tenants.md).
if [ -n "${CRESCENT_BENCH_QUOTA:-}" ]; then
  for t in default bench; do
    printf '[[tenants]]\nname = "%s"\nmax_bytes = %s\n' "$t" "$CRESCENT_BENCH_QUOTA"
  done >"$work/crescentd.toml"
  server_auth_args+=(--config "$work/crescentd.toml")
fi
# The log stays outside the data dir: crescentd refuses to start on a non-empty one.
"$bin/crescentd" --data-dir "$work/data" --listen "127.0.0.1:$port" --log warn \
  "${server_auth_args[@]}" >"$work/crescentd.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  curl -sf "127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
