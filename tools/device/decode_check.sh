#!/usr/bin/env bash
# decode_check.sh BUILD OUT — the transposed product (swap=ab) on this machine's
# GPU, in one call (~5 minutes on an H200):
#
#   1. every MatmulGpu test (SwappedProduct among them), four gtest shards side by
#      side, and SwappedProduct under compute-sanitizer memcheck and racecheck
#   2. matmul_bench on the decode shapes: swapped configs against the normal tiles
#      and cuBLASLt, same process
#   3. `kjit tune` of 16x4096x4096 and 64x11008x4096 in a fresh store, then
#      matmul_bench's default, tuned and cuBLASLt for them
#
# BUILD: a build folder (or a packed copy, tools/device/pack.sh); OUT: where the
# logs and JSON go. Prints the tables last.
set -uo pipefail
source "$(dirname "$0")/build_out_args.sh" "$@"
here=$(dirname "$0")

start=$SECONDS
for i in 0 1 2 3; do
  GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 300 "$build/tests/gpu/kjit_gpu_tests" \
    --gtest_filter='MatmulGpu.*' >"$out/gtest$i.txt" 2>&1 &
done
wait
echo "MatmulGpu, 4 shards: $((SECONDS - start)) s"
grep -hE '^\[  (PASSED|FAILED) |^\[  FAILED  \]' "$out"/gtest?.txt
start=$SECONDS
timeout 240 bash "$here/sanitize.sh" --build "$build" --out "$out/sanitize" --shards 1 \
  --filter 'MatmulGpu.SwappedProduct' --timeout 200 >"$out/sanitize.txt" 2>&1
echo "sanitizer on SwappedProduct: exit $?, $((SECONDS - start)) s"

swap="mma=wgmma,swap=ab"
configs="$swap,bm=128,bn=16,stages=12;$swap,bm=128,bn=16,stages=12,splitk=2"
configs+=";$swap,bm=128,bn=16,stages=10,splitk=2;$swap,bm=128,bn=16,stages=8,splitk=4"
configs+=";$swap,bm=64,bn=16,stages=12,splitk=2;$swap,bm=64,bn=16,stages=8,splitk=4"
configs+=";$swap,bm=256,bn=16,stages=6;$swap,bm=256,bn=16,stages=6,splitk=2"
configs+=";$swap,bm=128,bn=64,stages=6;$swap,bm=128,bn=64,stages=6,splitk=2"
configs+=";mma=wgmma,bm=64,bn=256,stages=5,splitk=6;mma=wgmma,bm=64,bn=128,stages=6,splitk=4"
timeout 240 "$build/tools/bench/matmul_bench" --repeats 25 \
  --shapes 16x4096x4096,64x11008x4096,16x11008x4096,1x8192x8192 --configs "$configs" \
  --out "$out/configs.json" >"$out/configs.txt" 2>&1
echo "matmul_bench, configs: exit $?"

for shape in 16x4096x4096 64x11008x4096; do
  IFS=x read -r m n k <<<"$shape"
  timeout 200 "$build/kjit" tune matmul --m "$m" --n "$n" --k "$k" --json --quiet \
    >"$out/tune_$shape.json" 2>"$out/tune_$shape.err"
  echo "tune $shape: exit $?"
  python3 - "$out/tune_$shape.json" <<'PY'
import json, sys
try:
    p = json.load(open(sys.argv[1]))["problems"][0]
    print("  tuned", p.get("config"), p.get("median_ms"), "ms; default", p.get("default_ms"), "ms")
except Exception as e:
    print("  unreadable:", e)
PY
done
timeout 200 "$build/tools/bench/matmul_bench" --repeats 25 --shapes 16x4096x4096,64x11008x4096 \
  --out "$out/tuned.json" >"$out/tuned.txt" 2>&1
echo "matmul_bench, tuned: exit $?"

tail -3 "$out/sanitize.txt"
grep -E "^== |^  " "$out/configs.txt"
grep -A12 "^shape " "$out/tuned.txt"
rm -rf "$store"
