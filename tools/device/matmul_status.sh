#!/usr/bin/env bash
# matmul_status.sh BUILD OUT — kjit's matmuls against their peers on this
# machine's GPU, in one call (~2 minutes on an H200):
#
#   1. `kjit tune` over examples/workloads/matmul_peers.json in a fresh store
#   2. matmul_bench: the tuned config, the model's default and cuBLASLt, per shape
#   3. `kjit bench matmul` (the store's config) for the gelu shapes and their
#      plain twins
#   4. tools/device/peers/matmul_torch.py: eager PyTorch and static torch.compile
#
# BUILD: a build folder (or a packed copy, tools/device/pack.sh); OUT: where the
# logs and JSON go. Prints the tables last.
set -uo pipefail
source "$(dirname "$0")/build_out_args.sh" "$@"
start=$SECONDS
timeout 240 "$build/kjit" tune --workload examples/workloads/matmul_peers.json --json --quiet \
  >"$out/tune.json" 2>"$out/tune.err"
echo "tune: exit $?, $((SECONDS - start)) s"
python3 - "$out/tune.json" <<'PY' | tee "$out/tuned.txt"
import json, sys
for p in json.load(open(sys.argv[1]))["problems"]:
    s = p["spec"]
    print(f"{s['m']}x{s['n']}x{s['k']}", s.get("epilogue", "-").replace(" ", ""),
          p.get("config", ""), p.get("median_ms"), p.get("default_ms"))
PY
shapes=$(python3 -c "
import json
seen = []
for p in json.load(open('examples/workloads/matmul_peers.json'))['problems']:
    s = f\"{p['m']}x{p['n']}x{p['k']}\"
    if 'epilogue' not in p and s not in seen: seen.append(s)
print(','.join(seen))")
timeout 200 "$build/tools/bench/matmul_bench" --repeats 25 --shapes "$shapes" \
  --out "$out/bench.json" >"$out/bench.txt" 2>&1
echo "matmul_bench: exit $?"
for s in 4097x4097x4097 2048x50257x768 4096x4096x4096; do
  IFS=x read -r m n k <<<"$s"
  for epi in "" "gelu(acc + bias)"; do
    file="$out/kjit_bench_${s}_${epi:+gelu}.json"
    timeout 60 "$build/kjit" bench matmul --m "$m" --n "$n" --k "$k" ${epi:+--epilogue "$epi"} \
      --repeats 30 --json >"$file" 2>&1
    python3 - "$file" "$s" "${epi:-plain}" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    print("kjit bench", sys.argv[2], sys.argv[3], round(d["median_ms"], 4), "ms",
          round(d["tflops"], 1), "TFLOP/s", d["config"], "pass" if d["pass"] else "FAIL")
except Exception as e:
    print("kjit bench", sys.argv[2], sys.argv[3], "error:", e)
PY
  done
done
timeout 300 python3 tools/device/peers/matmul_torch.py \
  --shapes 4097x4097x4097,2048x50257x768,4096x4096x4096 --epilogue both \
  --out "$out/torch.json" >"$out/torch.txt" 2>&1
echo "torch peers: exit $?"
grep -A16 "^shape " "$out/bench.txt"
tail -8 "$out/torch.txt"
rm -rf "$store"
