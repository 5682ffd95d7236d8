#!/usr/bin/env bash
# pad_ahead_check.sh BUILD OUT — pad=ahead (the persistent kernel copies misaligned
# operands itself, a piece ahead of its main loops) on this machine's GPU, in one
# call (~6 minutes):
#
#   1. MatmulGpu.PadAhead* (the fp64 reference on every layout, batches, K = 1,
#      fewer than 8 rows, each persistent schedule, the flags cleared between
#      launches), then under compute-sanitizer memcheck and racecheck
#   2. `kjit bench matmul`, pad=copy against pad=ahead, two rounds, on 4097^3 and
#      2048 x 50257 x 768 (contiguous C and rows of 50264): the configs each mode
#      takes (pad=ahead: bm <= 128, 32 KiB of ring in shared memory)
#   3. static torch.compile of the same products (tools/device/peers/matmul_torch.py)
#
# If the tests time out (a hang: a piece nobody copies), the pad=ahead benches are
# skipped. BUILD: a build folder (or a packed copy, tools/device/pack.sh); OUT: where
# the logs and JSON go. Prints the table last.
set -uo pipefail
source "$(dirname "$0")/build_out_args.sh" "$@"
here=$(dirname "$0")

start=$SECONDS
timeout 240 "$build/tests/gpu/kjit_gpu_tests" --gtest_filter='MatmulGpu.PadAhead*' \
  >"$out/tests.txt" 2>&1
tests=$?
echo "MatmulGpu.PadAhead*: exit $tests, $((SECONDS - start)) s"
grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' "$out/tests.txt"
if [[ $tests -ne 124 ]]; then
  start=$SECONDS
  timeout 300 bash "$here/sanitize.sh" --build "$build" --out "$out/sanitize" --shards 2 \
    --filter 'MatmulGpu.PadAhead*' --timeout 280 >"$out/sanitize.txt" 2>&1
  echo "sanitizer on MatmulGpu.PadAhead*: exit $?, $((SECONDS - start)) s"
fi

# label m n k config [extra kjit bench arguments]
cases=(
  "4097_copy_128x256_streamk 4097 4097 4097 mma=wgmma,bm=128,bn=256,stages=4,splitk=2,schedule=streamk"
  "4097_copy_192x192 4097 4097 4097 mma=wgmma,bm=192,bn=192,stages=4,schedule=persistent"
  "4097_ahead_128x256_streamk 4097 4097 4097 mma=wgmma,bm=128,bn=256,stages=3,splitk=2,schedule=streamk,pad=ahead"
  "4097_ahead_128x256 4097 4097 4097 mma=wgmma,bm=128,bn=256,stages=3,schedule=persistent,pad=ahead"
  "4097_ahead_pingpong_128x128 4097 4097 4097 mma=wgmma,bm=128,bn=128,stages=5,schedule=pingpong,pad=ahead"
  "vocab_copy_pingpong_64x256 2048 50257 768 mma=wgmma,bm=64,bn=256,stages=5,raster=16,schedule=pingpong"
  "vocab_ahead_pingpong_64x256 2048 50257 768 mma=wgmma,bm=64,bn=256,stages=4,raster=16,schedule=pingpong,pad=ahead"
  "vocab_ahead_128x256 2048 50257 768 mma=wgmma,bm=128,bn=256,stages=3,raster=16,schedule=persistent,pad=ahead"
  "vocab_copy_pingpong_64x256_ldc 2048 50257 768 mma=wgmma,bm=64,bn=256,stages=5,raster=16,schedule=pingpong --ldc 50264"
  "vocab_ahead_pingpong_64x256_ldc 2048 50257 768 mma=wgmma,bm=64,bn=256,stages=4,raster=16,schedule=pingpong,pad=ahead --ldc 50264"
)
start=$SECONDS
for round in 1 2; do
  for c in "${cases[@]}"; do
    read -r label m n k config extra <<<"$c"
    if [[ $tests -eq 124 && $config == *pad=ahead* ]]; then continue; fi
    # shellcheck disable=SC2086  # extra: bench arguments, split on purpose
    timeout 60 "$build/kjit" bench matmul --m "$m" --n "$n" --k "$k" --config "$config" $extra \
      --repeats 30 --json >"$out/${label}_r$round.json" 2>"$out/${label}_r$round.err"
  done
done
echo "benches: $((SECONDS - start)) s"
timeout 200 python3 "$here/peers/matmul_torch.py" --shapes 4097x4097x4097,2048x50257x768 \
  --epilogue none --out "$out/torch.json" >"$out/torch.txt" 2>&1
echo "torch.compile: exit $?"

python3 - "$out" "${cases[@]}" <<'PY'
import json, os, sys

out = sys.argv[1]
print("\n== pad=copy against pad=ahead (ms, median of 30, L2 flushed; two rounds)")
for case in sys.argv[2:]:
    label = case.split()[0]
    cells = []
    for r in (1, 2):
        try:
            d = json.load(open(os.path.join(out, f"{label}_r{r}.json")))
            cells.append(f"{d['median_ms']:.4f}{'' if d['pass'] else ' FAIL'}")
        except Exception:
            cells.append("-")
    print(f"{label:36} {cells[0]:>12} {cells[1]:>12}")
print("\n== static torch.compile (ms; its C's row stride)")
try:
    for row in json.load(open(os.path.join(out, "torch.json")))["results"]:
        print(f"{row['m']}x{row['n']}x{row['k']:<8} {row['compile_ms']:.4f} "
              f"{row['compile_out_stride']}")
except Exception as e:
    print("no results:", e)
PY
