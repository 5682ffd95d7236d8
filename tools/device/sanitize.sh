#!/usr/bin/env bash
# sanitize.sh — the whole GPU test suite under compute-sanitizer: every test under
# memcheck and under racecheck, each tool's run split into SHARDS processes (gtest
# sharding) that run side by side, so the CPU work (NVRTC, fp64 references) overlaps.
#
#   tools/device/sanitize.sh [--build DIR] [--out DIR] [--shards N] [--tools LIST]
#                            [--filter GTEST_FILTER] [--timeout SECONDS]
#
# --build    the build folder (default build/release)
# --out      logs, gtest JSON and summary.txt (default $OUT/sanitize, else ./sanitize)
# --shards   processes per tool (default 4; at most one per test the filter selects)
# --tools    comma-separated (default memcheck,racecheck)
# --filter   a gtest filter (default: every test)
# --timeout  per process, seconds (default 540); a process past it is reported as
#            TIMEOUT with the tests it finished
# Left out on purpose: API errors (--report-api-errors no; tests provoke them, e.g. a
# missing kernel or a block over the thread limit) and the tuner's child processes
# (--target-processes application-only; a test plants a candidate that faults in a
# child on purpose). Exit 0 only when every process passed with 0 errors / hazards.
set -uo pipefail

build=build/release
out=${OUT:+$OUT/sanitize}
out=${out:-sanitize}
shards=4 tools=memcheck,racecheck filter='*' limit=540
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --tools) tools=$2; shift 2 ;;
    --filter) filter=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sanitize.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
tests=$build/tests/gpu/kjit_gpu_tests
[[ -x $tests ]] || { echo "sanitize.sh: no test binary at $tests" >&2; exit 2; }
# No more shards than tests: an empty shard's process launches no kernel, and
# compute-sanitizer exits 255 on it ("terminated before first instrumented API call").
listed=$("$tests" --gtest_filter="$filter" --gtest_list_tests) ||
  { echo "sanitize.sh: $tests cannot list its tests" >&2; exit 2; }
count=$(grep -c '^  ' <<<"$listed")
if [[ $count -eq 0 ]]; then
  echo "sanitize.sh: no test matches the filter '$filter'" >&2
  exit 2
fi
((shards > count)) && shards=$count
command -v compute-sanitizer >/dev/null || { echo "sanitize.sh: compute-sanitizer not found" >&2; exit 2; }
mkdir -p "$out"
export KJIT_REQUIRE_GPU=1
# Tests that compare times skip those comparisons under the sanitizer (values only).
export KJIT_SANITIZER=1
export KJIT_CACHE_DIR=${KJIT_CACHE_DIR:-$(mktemp -d)}

IFS=, read -r -a tool_list <<<"$tools"
start=$SECONDS
pids=()
for tool in "${tool_list[@]}"; do
  for ((shard = 0; shard < shards; ++shard)); do
    name=$tool-$shard
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$shard \
      timeout --kill-after=15 "$limit" compute-sanitizer --tool "$tool" --report-api-errors no \
      --target-processes application-only --error-exitcode 1 --print-limit 200 \
      "$tests" --gtest_filter="$filter" --gtest_output=json:"$out/$name.json" \
      >"$out/$name.log" 2>&1 &
    pids+=("$!:$name")
  done
done

failed=0 rows=()
for entry in "${pids[@]}"; do
  pid=${entry%%:*} name=${entry#*:}
  wait "$pid"; rc=$?
  log=$out/$name.log
  passed=$(grep -c '^\[       OK \]' "$log")
  failures=$(grep -E '^\[  FAILED  \] [A-Za-z]' "$log" | sed 's/ (.*//' | sort -u | wc -l)
  summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -n 1 | sed 's/^========= //')
  case $rc in
    0) status=PASS ;;
    124|137) status=TIMEOUT; failed=1 ;;
    *) status="FAIL (exit $rc)"; failed=1 ;;
  esac
  rows+=("$(printf '%-12s %-16s %4s ok %3s failed  %s' "$name" "$status" "$passed" "$failures" "$summary")")
  if [[ $status != PASS ]]; then
    grep -E -B2 -A14 '^========= (Invalid|Race|Error|Program hit|Warning)|^\[  FAILED  \]' "$log" | head -80
  fi
done

{
  echo "compute-sanitizer over $tests (filter '$filter'), $shards shards per tool, $((SECONDS - start)) s"
  printf '%s\n' "${rows[@]}"
} | tee "$out/summary.txt"
exit $failed
