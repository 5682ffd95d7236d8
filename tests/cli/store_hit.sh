#!/usr/bin/env bash
# store_hit.sh KJIT — a second process compiling the same kernel gets it from the
# store, and 8 processes compiling and storing at once all succeed.
set -euo pipefail
kjit=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export KJIT_CACHE_DIR=$dir/cache
first=$("$kjit" compile 'y = tanh(x) * 2 + 1' --arch sm_90 --json)
second=$("$kjit" compile 'y = tanh(x) * 2 + 1' --arch sm_90 --json)
grep -q '"cache": "miss"' <<<"$first" || { echo "FAIL: first compile was not a miss"; echo "$first"; exit 1; }
grep -q '"cache": "hit"' <<<"$second" || { echo "FAIL: second process did not hit"; echo "$second"; exit 1; }
# Eight processes at once, four kernels between them, into a fresh store.
export KJIT_CACHE_DIR=$dir/concurrent
pids=()
for i in $(seq 0 7); do
  "$kjit" compile "y = exp(x) * $((i % 4)) + x" --arch sm_90 --json >"$dir/out$i.json" 2>"$dir/err$i.txt" &
  pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { echo "FAIL: process $i"; cat "$dir/err$i.txt"; exit 1; }
  if [[ -s $dir/err$i.txt ]]; then echo "FAIL: process $i warned:"; cat "$dir/err$i.txt"; exit 1; fi
done
for k in 0 1 2 3; do
  out=$("$kjit" compile "y = exp(x) * $k + x" --arch sm_90 --json)
  grep -q '"cache": "hit"' <<<"$out" || { echo "FAIL: kernel $k missing after the concurrent run"; exit 1; }
done
"$kjit" cache verify --json >"$dir/verify.json" || { echo "FAIL: verify"; cat "$dir/verify.json"; exit 1; }
echo "ok: second process hit; 8 concurrent processes stored 4 kernels, store verifies"
