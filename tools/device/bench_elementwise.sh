#!/usr/bin/env bash
# bench_elementwise.sh BUILD OUT QUICK — kjit's fused chains against the copy
# ceiling and torch.compile, in one run (gpu_check.sh runs it). Writes
# OUT/elementwise.json and OUT/elementwise.table.
set -euo pipefail
build=$1 out=$2 quick=${3:-0}
n=$((1 << 28))
[[ $quick == 1 ]] && n=$((1 << 24))
tmp=$(mktemp -d)
"$build/kjit" bench 'y = sin(x)^2 + cos(x)^2' --n $n --dtype f32 --json >"$tmp/sincos.json"
"$build/kjit" bench 'y = x * sigmoid(x) * g' --n $n --dtype bf16 --json >"$tmp/silu_gate.json"
"$build/kjit" bench 'y = a * b + c' --n $n --dtype f16 --json >"$tmp/fma.json"
python3 tools/device/peers/elementwise_torch.py --n $n --out "$tmp/torch.json"
python3 tools/device/report_elementwise.py "$tmp" "$out/elementwise.json" >"$out/elementwise.table"
# Config sweep of the two targeted chains (default first), appended to the table.
sweep() {  # sweep EXPR DTYPE CONFIG...
  local expr=$1 dtype=$2; shift 2
  for config in "$@"; do
    "$build/kjit" bench "$expr" --n $n --dtype "$dtype" --config "$config" --json >"$tmp/sweep.json"
    python3 - "$tmp/sweep.json" "$expr" "$config" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"  {sys.argv[2]:<24} {sys.argv[3]:<32} {d['median_ms']:.4f} ms {d['fraction_of_copy']:6.1%} of copy")
PY
  done
}
{
  echo "config sweep (kjit bench --config):"
  # Default first (block=512,unroll=2, per_sm auto = 2 blocks of 512 per SM); per_sm=4
  # is every resident block (the grid before auto).
  sweep 'y = sin(x)^2 + cos(x)^2' f32 block=512,unroll=2 block=512,unroll=2,per_sm=4 \
    block=1024,unroll=1
  sweep 'y = x * sigmoid(x) * g' bf16 block=512,unroll=2 block=512,unroll=2,per_sm=4
} >>"$out/elementwise.table"
cat "$out/elementwise.table"
