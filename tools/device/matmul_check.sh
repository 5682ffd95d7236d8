#!/usr/bin/env bash
# matmul_check.sh — the matmul family on a GPU in one go: numeric tests (skips are
# failures), the SASS/spill compile test, the demo section, then kjit vs cuBLASLt.
# Prints a short summary last; logs and JSON go to OUT.
#
#   tools/device/matmul_check.sh [--build DIR] [--out DIR] [--quick]
set -uo pipefail
build=build/release
out=${OUT:-matmul-check}
quick=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    *) echo "matmul_check.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
export KJIT_REQUIRE_GPU=1
source "$(dirname "$0")/step.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv 2>/dev/null || true
step gpu_tests "$build/tests/gpu/kjit_gpu_tests" --gtest_filter='MatmulGpu*' \
  --gtest_output=json:"$out/matmul_gpu_tests.json"
step compile_test "$build/tests/unit/matmul/matmul_tests" --gtest_filter='MatmulCompile*'
step demo "$build/kjit" demo
bench_args=(--out "$out/matmul_bench.json")
[[ $quick -eq 1 ]] && bench_args+=(--quick)
step bench "$build/tools/bench/matmul_bench" "${bench_args[@]}"
echo
echo "=== summary"
printf '%s\n' "${summary[@]}"
grep -E '^\[  FAILED  \]|Failure|first bad element' "$out/gpu_tests.log" | head -20
echo
sed -n '/^shape /,$p' "$out/bench.log"
exit $failed
