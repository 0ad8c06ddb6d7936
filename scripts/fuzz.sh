#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer through cargo fuzz) of every decoder of network and
# disk bytes: the targets of fuzz-targets/ (the test suite runs the same functions over their
# regressions and random inputs), built by the fuzz/ crate outside the workspace.
#
#   scripts/fuzz.sh MINUTES [TARGET...]   # each target MINUTES minutes (default 10), 2 at a time
#
# Stable toolchain only: libfuzzer-sys and cargo fuzz's instrumentation use -Z flags, which
# RUSTC_BOOTSTRAP=1 enables. Corpora grow in fuzz/corpus/<target>/ (seeded from the targets'
# seeds and regressions), crashes land in fuzz/artifacts/<target>/, logs in fuzz/logs/. A
# crash is fixed in the decoder and its input copied to fuzz-targets/regressions/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=${1:-10}
shift || true
parallel=${CRESCENT_FUZZ_JOBS:-2}
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^name = "\([a-z_]*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^crescent-fuzz$')
fi

# Seed each corpus with the targets' own seeds and the regression inputs.
cargo run -q -p crescent-fuzz-targets --example write_seeds -- fuzz/corpus
for t in "${targets[@]}"; do
  if [ -d "fuzz-targets/regressions/$t" ]; then cp -n "fuzz-targets/regressions/$t"/* "fuzz/corpus/$t/" 2>/dev/null || true; fi
done

(cd fuzz && cargo fuzz build --sanitizer none --release)

mkdir -p fuzz/logs
export CRESCENT_FUZZ_TMP=${CRESCENT_FUZZ_TMP:-/dev/shm}
run_one() {
  local t=$1
  (cd fuzz && cargo fuzz run --sanitizer none --release "$t" "corpus/$t" -- \
    -max_total_time=$((minutes * 60)) -rss_limit_mb=2048 -max_len=1048576 -timeout=10 \
    >"logs/$t.log" 2>&1) && echo "$t: ok" || echo "$t: FAILED (fuzz/logs/$t.log, fuzz/artifacts/$t/)"
  grep -E '^(#[0-9]+|Done)' "fuzz/logs/$t.log" | tail -1 | sed "s/^/$t: /"
}
status=0
running=0
for t in "${targets[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$parallel" ]; then wait -n || status=1; running=$((running - 1)); fi
done
while [ "$running" -gt 0 ]; do wait -n || status=1; running=$((running - 1)); done
exit $status
