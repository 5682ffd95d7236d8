#!/usr/bin/env bash
# bench_matmul.sh BUILD OUT QUICK — called by gpu_check.sh: kjit matmul vs cuBLASLt
# (tools/bench/matmul_bench.cpp), full log and JSON in OUT, the table in OUT/matmul.table.
set -uo pipefail
build=$1 out=$2 quick=${3:-0}
args=(--out "$out/matmul_bench.json")
[[ $quick -eq 1 ]] && args+=(--quick)
"$build/tools/bench/matmul_bench" "${args[@]}" 2>&1 | tee "$out/matmul_bench.txt"
status=${PIPESTATUS[0]}
# The table is everything from its header line on.
sed -n '/^shape /,$p' "$out/matmul_bench.txt" > "$out/matmul.table"
exit "$status"
