#!/usr/bin/env bash
# gpu_check.sh — on a machine with a GPU: run every GPU test with skips turned
# into failures, run the benchmarks, and print a short table last.
#
#   tools/device/gpu_check.sh [--build DIR] [--out DIR] [--sanitize] [--no-bench] [--quick]
#
# --build     the build folder (default build/release; built on another machine is fine)
# --out       where logs and JSON go (default $OUT, else ./gpu-check)
# --sanitize  also run the GPU tests under compute-sanitizer (memcheck, racecheck)
# --no-bench  tests only
# --quick     smaller benchmark sizes (a smoke run)
# Runs the binaries directly (not ctest), so a build folder made elsewhere works.
set -uo pipefail

build=build/release
out=${OUT:-gpu-check}
sanitize=0 bench=1 quick=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --sanitize) sanitize=1; shift ;;
    --no-bench) bench=0; shift ;;
    --quick) quick=1; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out/logs"
export KJIT_REQUIRE_GPU=1
export KJIT_CACHE_DIR=${KJIT_CACHE_DIR:-$(mktemp -d)}
summary=()
failed=0
note() { summary+=("$(printf '%-44s %s' "$1" "$2")"); }

# KJIT_STEP_TIMEOUT=SECONDS stops any one step that runs longer (a hung kernel
# then costs one step, not the whole device lease); exit 124 marks it.
step() {  # step NAME COMMAND... — runs, logs to $out/NAME.log, records PASS/FAIL
  local name=$1; shift
  echo "=== $name: $*"
  local limit=()
  [[ -n ${KJIT_STEP_TIMEOUT:-} ]] && limit=(timeout --kill-after=10 "$KJIT_STEP_TIMEOUT")
  if "${limit[@]}" "$@" >"$out/logs/$name.log" 2>&1; then
    note "$name" PASS
  else
    note "$name" "FAIL (exit $?, see logs/$name.log)"; failed=1
    grep -E -A12 '^\[  FAILED  \]|Failure|ERROR SUMMARY: [1-9]|error:' "$out/logs/$name.log" | head -60
  fi
  tail -n 12 "$out/logs/$name.log"
}

echo "=== machine"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv || true
missing=$(ldd "$build/kjit" | grep 'not found' || true)
if [[ -n $missing ]]; then echo "missing libraries:"; echo "$missing"; note ldd "FAIL: $missing"; failed=1
else note ldd PASS; fi

step info "$build/kjit" info
step demo "$build/kjit" demo
step gpu_tests "$build/tests/gpu/kjit_gpu_tests" --gtest_output=json:"$out/gpu_tests.json"
for example in elementwise matmul c; do
  [[ -x $build/examples/kjit_example_$example ]] && step "example_$example" "$build/examples/kjit_example_$example"
done
# KJIT_SKIP_UNIT=1 leaves out the unit tests (they need no GPU; CI runs them).
[[ ${KJIT_SKIP_UNIT:-0} == 1 ]] || for t in "$build"/tests/unit/*/*_tests; do
  case $(basename "$t") in
    # Needs a missing driver: point it at one that does not exist, as ctest does.
    runtime_no_driver_tests) step unit_runtime_no_driver_tests env KJIT_REQUIRE_GPU=0 \
      KJIT_LIBCUDA=/nonexistent/libcuda.so.1 "$t" ;;
    *) [[ -x $t ]] && step "unit_$(basename "$t")" "$t" ;;
  esac
done

if [[ $sanitize -eq 1 ]]; then
  # Every GPU test under memcheck and racecheck (tools/device/sanitize.sh: sharded
  # processes side by side; API errors and the tuner's child processes left out).
  step sanitize bash "$(dirname "$0")/sanitize.sh" --build "$build" --out "$out/sanitize" \
    --filter "${KJIT_SANITIZE_FILTER:-*}"
fi

if [[ $bench -eq 1 ]]; then
  step runtime_bench "$build/tools/bench/runtime_bench" --benchmark_out="$out/runtime_bench.json" \
    --benchmark_out_format=json
  for extra in tools/device/bench_*.sh; do
    name=$(basename "$extra" .sh)
    # KJIT_SKIP_BENCH="matmul cache" leaves those benchmarks out of this run.
    [[ " ${KJIT_SKIP_BENCH:-} " == *" ${name#bench_} "* ]] && continue
    [[ -f $extra ]] && step "$name" bash "$extra" "$build" "$out" "$quick"
  done
fi

# The logs travel as one archive (the device tool returns few files).
tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$out/logs"

echo
echo "=== summary ($(date -u +%FT%TZ), $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
printf '%s\n' "${summary[@]}"
for table in "$out"/*.table; do [[ -f $table ]] && { echo; cat "$table"; }; done
exit $failed
