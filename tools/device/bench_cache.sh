#!/usr/bin/env bash
# bench_cache.sh BUILD OUT QUICK — the store's lookup paths (gpu_check.sh runs it).
set -euo pipefail
build=$1 out=$2
"$build/tools/bench/cache_bench" --benchmark_out="$out/cache_bench.json" --benchmark_out_format=json
