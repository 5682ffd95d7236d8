#!/usr/bin/env bash
# python_check.sh PACK — on a GPU machine: the embedding interfaces end to end.
# PACK holds a build's kjit, examples/kjit_example_{elementwise,matmul,c,attention},
# tests/unit/c_api/kjit_c_api_test, tools/bench/runtime_bench (+ libbenchmark) and
# runtime/libkjit_c.so (see tools/device/pack.sh). Runs the examples, a C API
# launch from the log callback, the C++ launch benchmarks, then
# tests/python/api_test.py (every argument and tensor check) and
# tests/python/torch_check.py (correctness against torch eager, host overhead per
# call over the C++ launch, torch.compile without a graph break). Logs and JSON
# go to $OUT (or ./python-check); a short table is printed last.
set -uo pipefail
pack=${1:?usage: python_check.sh PACK}
out=${OUT:-python-check}
mkdir -p "$out"
export KJIT_CACHE_DIR=${KJIT_CACHE_DIR:-$(mktemp -d)}
export KJIT_REQUIRE_GPU=1
summary=() failed=0
run() {  # run NAME COMMAND...
  local name=$1; shift
  if "$@" >"$out/$name.log" 2>&1; then summary+=("$(printf '%-28s PASS' "$name")")
  else summary+=("$(printf '%-28s FAIL (exit %s)' "$name" "$?")"); failed=1; fi
  tail -n 25 "$out/$name.log"
}

# libkjit_c links the shared SQLite and libcrypto: where the machine lacks them,
# the copies in PACK/lib (from the build machine) are used.
if ldd "$pack/runtime/libkjit_c.so" | grep -q "not found"; then
  echo "using PACK/lib for: $(ldd "$pack/runtime/libkjit_c.so" | grep 'not found' | awk '{print $1}' | xargs)"
  export LD_LIBRARY_PATH=$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

export LD_LIBRARY_PATH=$pack/runtime${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # the C example's libkjit_c.so.0
for example in elementwise matmul c attention; do
  run "example_$example" "$pack/examples/kjit_example_$example"
done
# A kernel launched from the log callback inside another launch (the C API's
# per-thread argument lists were overwritten).
run c_api_reentrant_launch "$pack/tests/unit/c_api/kjit_c_api_test" reentrant-launch
run runtime_bench "$pack/tools/bench/runtime_bench" --benchmark_filter='Launch' \
  --benchmark_repetitions=5 --benchmark_format=json --benchmark_out="$out/runtime_bench.json"
# The argument and tensor checks (their tensor part needs this machine's GPU).
KJIT_LIBRARY=$pack/runtime/libkjit_c.so PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH} \
  run api_test python3 tests/python/api_test.py
KJIT_LIBRARY=$pack/runtime/libkjit_c.so PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH} \
  run torch_check python3 tests/python/torch_check.py --runtime-bench "$out/runtime_bench.json" \
  --out "$out"

echo
grep -E '^(PASS|FAIL)' "$out/torch_check.log"
printf '%s\n' "${summary[@]}"
exit $failed
