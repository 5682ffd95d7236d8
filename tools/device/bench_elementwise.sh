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
cat "$out/elementwise.table"
