#!/usr/bin/env bash
# tune_check.sh BUILD OUT PART... — the tuner's measurements on this machine's GPU,
# in parts that each fit one device call (a few minutes each):
#
#   matmul       the 8 benchmark shapes (examples/workloads/tuner_benchmark.json)
#                tuned by the model in a fresh store A (compiles included) and
#                exhaustively in a fresh store B (the search-quality comparison and
#                the model's rank correlation); the N sweep tuned in A; matmul_bench
#                default vs tuned vs cuBLASLt on the 8 shapes and the sweep, from A
#   determinism  two more independent model tunes of the 8 shapes (fresh stores C
#                and D), then C's and D's winners for each shape timed side by side
#   elementwise  the six chains of tools/device/peers/elementwise_torch.py tuned
#                in store A and timed by `kjit bench`, then the torch peers
#   store        tuned_start_bench: a new process runs a tuned matmul
#   gpus         the Llama-style workload tuned on GPU 0, then on every GPU
#                (`--gpus all`), with the binaries already in the store
#
# Everything lands in OUT as JSON; tools/device/report_tuner.py OUT prints the
# tables.
set -uo pipefail
build=$1 out=$2
shift 2
kjit=$build/kjit
mkdir -p "$out"
store() {  # a fresh private store directory
  local dir=/tmp/kjit-store-$1
  rm -rf "$dir"
  mkdir -p -m 700 "$dir"
  echo "$dir"
}
tune() {  # tune STORE NAME ARGS... — kjit tune --json into OUT/NAME.json, timed
  local dir=$1 name=$2
  shift 2
  local start=$SECONDS
  KJIT_CACHE_DIR=$dir "$kjit" tune "$@" --json --quiet >"$out/$name.json" 2>"$out/$name.err"
  echo "tune $name: exit $?, $((SECONDS - start)) s"
}
workloads=examples/workloads

for part in "$@"; do
case $part in
  matmul)
    A=$(store A) B=$(store B)
    tune "$A" model --workload $workloads/tuner_benchmark.json
    tune "$B" exhaustive --workload $workloads/tuner_benchmark.json --strategy exhaustive
    tune "$A" sweep --workload $workloads/n_sweep.json
    KJIT_CACHE_DIR=$A "$build/tools/bench/matmul_bench" --repeats 25 \
      --out "$out/bench_shapes.json" >"$out/bench_shapes.txt" 2>&1
    echo "bench shapes: exit $?"
    sweep=$(python3 -c "print(','.join(f'4096x{n}x4096' for n in range(3968, 4481, 32)))")
    KJIT_CACHE_DIR=$A "$build/tools/bench/matmul_bench" --repeats 25 --shapes "$sweep" \
      --out "$out/bench_sweep.json" >"$out/bench_sweep.txt" 2>&1
    echo "bench sweep: exit $?"
    ;;
  determinism)
    C=$(store C) D=$(store D)
    tune "$C" tune_c --workload $workloads/tuner_benchmark.json
    tune "$D" tune_d --workload $workloads/tuner_benchmark.json
    # The winners of C and D for each shape, timed side by side in one process.
    python3 - "$out" <<'PY' >"$out/determinism_pairs.txt"
import json, sys
a = json.load(open(f"{sys.argv[1]}/tune_c.json"))["problems"]
c = json.load(open(f"{sys.argv[1]}/tune_d.json"))["problems"]
for x, y in zip(a, c):
    s = x["spec"]
    if "epilogue" in s:
        continue  # matmul_bench times plain products; the epilogue shape is compared from the tunes
    print(f"{s['m']}x{s['n']}x{s['k']} {x.get('config', '')};{y.get('config', '')}")
PY
    while read -r shape configs; do
      KJIT_CACHE_DIR=$C "$build/tools/bench/matmul_bench" --repeats 25 --shapes "$shape" \
        --configs "$configs" --out "$out/pair_$shape.json" >>"$out/pairs.txt" 2>&1
    done <"$out/determinism_pairs.txt"
    echo "determinism pairs: done"
    ;;
  elementwise)
    A=$(store A)
    python3 - >"$out/chains.txt" <<'PY'
import sys
sys.path.insert(0, "tools/device/peers")
from elementwise_torch import CHAINS
for name, (expr, dtype, inputs, fn) in CHAINS.items():
    two_d = any(kind != "n" for _, kind in inputs)
    dt = str(dtype).replace("torch.", "").replace("float32", "f32").replace("bfloat16", "bf16").replace("float16", "f16")
    sizes = "--m 16384 --n 16384" if two_d else "--n 268435456"
    print(f"{name}\t{expr}\t{dt}\t{sizes}")
PY
    i=0
    while IFS=$'\t' read -r name expr dtype sizes; do
      i=$((i + 1))
      # shellcheck disable=SC2086
      tune "$A" "chain$i" "$expr" --dtype "$dtype" $sizes
      # shellcheck disable=SC2086
      KJIT_CACHE_DIR=$A "$kjit" bench "$expr" --dtype "$dtype" $sizes --repeats 30 --json \
        >"$out/bench_chain$i.json" 2>"$out/bench_chain$i.err"
      echo "bench chain$i ($name): exit $?"
    done <"$out/chains.txt"
    python3 tools/device/peers/elementwise_torch.py --out "$out/torch_elementwise.json" \
      >"$out/torch_elementwise.txt" 2>&1
    echo "torch peers: exit $?"
    ;;
  store)
    "$build/tools/bench/tuned_start_bench" --m 4096 --n 4096 --k 4096 --out "$out/tuned_start.json"
    ;;
  gpus)
    A=$(store A)
    tune "$A" gpus_warm --workload $workloads/llama_layer.json --gpus all  # compiles, first trials
    tune "$A" gpus_one --workload $workloads/llama_layer.json --gpus 0 --force
    tune "$A" gpus_all --workload $workloads/llama_layer.json --gpus all --force
    ;;
  *)
    echo "tune_check.sh: unknown part '$part' (matmul, determinism, elementwise, store, gpus)" >&2
    exit 2
    ;;
esac
done
