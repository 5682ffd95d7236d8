#!/usr/bin/env bash
# cli_test.sh KJIT FIXTURE WORKDIR — `kjit cache` end to end on a real store.
set -u
kjit=$1 fixture=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
export KJIT_CACHE_DIR=$work/cache
unset KJIT_CACHE
source "$(dirname "$0")/../../cli/expect_functions.sh"

"$fixture" "$work/shipped.db" || { echo "FAIL: fixture"; exit 1; }
expect 0 "^$work/cache/kjit.db\$" "$kjit" cache path
expect 0 '3 binaries left out: compiled code crosses between files only with --trust-binaries' \
  "$kjit" cache import "$work/shipped.db"
expect 0 'binaries  3 inserted, 0 replaced, 0 kept' "$kjit" cache import "$work/shipped.db" \
  --trust-binaries
expect 0 '"kept": 3,' "$kjit" cache import "$work/shipped.db" --json --trust-binaries
expect 0 'feed0001.*sm_90' "$kjit" cache ls
expect 0 '"key": "beef0003"' "$kjit" cache ls --json
expect 0 'arch       sm_80' "$kjit" cache show beef
expect 0 'extern "C" __global__' "$kjit" cache show beef --source
expect 2 "matches several binaries" "$kjit" cache show feed
expect 2 "no binary whose key starts with 'zzz'" "$kjit" cache show zzz
expect 0 '"binaries": 3' "$kjit" cache stats --json
expect 0 'binaries:  3 checked, 0 failed their checksum, 0 failed authentication' "$kjit" cache verify
expect 0 'binaries  2 inserted' "$kjit" cache export "$work/h200.db" --gpu "NVIDIA H200 cc9.0 132SM"
expect 2 "already exists" "$kjit" cache export "$work/h200.db"
expect 2 "known models: NVIDIA A100 cc8.0 108SM; NVIDIA H200 cc9.0 132SM" \
  "$kjit" cache export "$work/x.db" --gpu "GeForce 256"
expect 0 'tunings   2 inserted' "$kjit" cache merge "$work/team.db"
expect 0 'tunings   0 inserted, 0 replaced \(better measured\), 2 kept' "$kjit" cache merge "$work/team.db"
head -c 5000 /dev/urandom >"$work/junk.db"
# A file that is no kjit cache, named for import, is bad input (exit 2, as a missing
# file; it was 1).
expect 2 "not a readable kjit cache" "$kjit" cache import "$work/junk.db"
expect 2 "cannot merge into .*damaged or not a kjit cache" "$kjit" cache merge "$work/junk.db"
expect 2 "pass --yes" "$kjit" cache clear
expect 0 "deleted 3 binaries, 0 tunings" "$kjit" cache clear --binaries-only --yes
expect 0 '"tunings": 2' "$kjit" cache stats --json
expect 0 "gave back" "$kjit" cache vacuum
# A cache directory others may write: verify says so (exit 1), and no binary
# is taken in.
chmod 777 "$work/cache"
expect 1 "trust: +binaries are not loaded from this cache: .*writable by group or others \(mode 0777\)" \
  "$kjit" cache verify
expect 1 "binaries cannot be imported into this cache" \
  "$kjit" cache import "$work/shipped.db" --trust-binaries
chmod 700 "$work/cache"
expect 0 "binaries:  0 checked" "$kjit" cache verify
expect 1 "the cache is disabled" env KJIT_CACHE=off "$kjit" cache ls
expect 0 "cache disabled: KJIT_CACHE=off" env KJIT_CACHE=off "$kjit" cache path
# A damaged store: the CLI warns, moves it aside and carries on.
"$kjit" cache path >/dev/null
head -c 8192 /dev/urandom >"$work/cache/kjit.db"
rm -f "$work/cache/kjit.db-wal" "$work/cache/kjit.db-shm"
expect 0 "moved it aside" "$kjit" cache stats
ls "$work/cache"/kjit.db.corrupt-* >/dev/null || { echo "FAIL: nothing moved aside"; failures=$((failures + 1)); }
for sub in path ls show stats verify export import merge clear vacuum; do
  expect 0 "Usage:" "$kjit" cache $sub --help
done
finish
