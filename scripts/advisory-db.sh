#!/usr/bin/env bash
# Refreshes the vendored subset of the RustSec advisory database (.ci/advisory-db/) that
# `cargo deny check advisories` reads offline (scripts/deny.sh, docs/operations.md "Dependency
# checks"): the advisories of every crate named in Cargo.lock, nothing else.
#
#   scripts/advisory-db.sh                  # clone https://github.com/rustsec/advisory-db
#   scripts/advisory-db.sh /path/to/advisory-db   # a local clone (bare or with a work tree)
#
# Run it after adding a dependency (its advisories are not vendored until then) and to pick
# up new advisories; commit the result. It writes .ci/advisory-db/SNAPSHOT with the upstream
# commit and its date, which scripts/deny.sh stamps on the database it builds.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[advisory-db.sh] $*" >&2; }

src=${1:-https://github.com/rustsec/advisory-db}
tmp=$(mktemp -d /tmp/crescent-advisory-db.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
if [ -d "$src" ]; then
  repo=$src
else
  log "cloning $src"
  git clone -q --depth 1 "$src" "$tmp/clone"
  repo=$tmp/clone
fi

commit=$(git -C "$repo" rev-parse HEAD)
date=$(git -C "$repo" log -1 --format=%cI HEAD)
# Every package name in the lock files (the workspace's and the fuzz crate's), then those the
# database has a directory for.
names=$(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.lock fuzz/Cargo.lock | sort -u)
have=$(git -C "$repo" ls-tree --name-only HEAD crates/ | sed 's|^crates/||' | sort -u)
paths=()
while read -r n; do paths+=("crates/$n"); done < <(comm -12 <(echo "$names") <(echo "$have"))

dest=.ci/advisory-db
rm -rf "$dest"
mkdir -p "$dest"
if ((${#paths[@]})); then
  git -C "$repo" archive HEAD -- "${paths[@]}" | tar -x -C "$dest"
fi
git -C "$repo" show HEAD:LICENSE.txt >"$dest/LICENSE.txt"
cat >"$dest/SNAPSHOT" <<EOF
commit=$commit
date=$date
EOF
log "$(find "$dest/crates" -name '*.md' 2>/dev/null | wc -l) advisories for ${#paths[@]} crates from $commit ($date)"
