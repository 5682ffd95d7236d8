#!/usr/bin/env bash
# attention_modifiers_check.sh — attention's score and mask modifiers on a GPU in one
# go: the numeric GPU tests (skips are failures), compute-sanitizer memcheck and
# racecheck on `kjit run attention` with modifiers (both engines, both passes), then
# kjit against FlexAttention (tools/device/peers/attention_flex.py), forward and
# backward. Prints a short summary last; logs and JSON go to OUT.
#
#   tools/device/attention_modifiers_check.sh [--build DIR] [--out DIR] [--quick]
#       [--parts tests,sanitizers,python,forward,backward]
#
# --quick: the peers at S = 2k only. --parts: the steps to run (default: all but
# python, which needs runtime/libkjit_c.so in DIR); split them over calls that
# must each end inside the device tool's ten minutes.
set -uo pipefail
build=build/release
out=${OUT:-attention-modifiers-check}
quick=0
parts=tests,sanitizers,forward,backward
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --parts) parts=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "attention_modifiers_check.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
export KJIT_REQUIRE_GPU=1
wants() { [[ ,$parts, == *,$1,* ]]; }
source "$(dirname "$0")/step.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv 2>/dev/null || true
wants tests && step gpu_tests "$build/tests/gpu/kjit_gpu_tests" \
  --gtest_filter='AttentionTest.ScoreAndMaskModifiers:AttentionTest.BackwardWithModifiers:AttentionTest.ModifierOperandsAreChecked:TunerGpu.AttentionWithModifiersIsMeasuredAndChecked' \
  --gtest_output=json:"$out/gpu_tests.json"

alibi='slope:f32[heads]; s - slope * abs(q_idx - kv_idx)'
window='(kv_idx <= q_idx) * (q_idx - kv_idx < 100)'
wants sanitizers && for tool in memcheck racecheck; do
  for config in 'mma=wgmma,bn=64' 'bm=64,bn=64'; do
    step "${tool}_fwd_${config%%,*}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$build/kjit" run attention --seq-q 300 --seq-k 517 --heads 4 --kv-heads 2 --head-dim 64 \
      --score-mod "$alibi" --mask-mod "$window" --config "$config"
  done
  for config in 'mma=wgmma,bm=64,bn=64' 'bm=32,bn=32'; do
    step "${tool}_bwd_${config%%,*}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$build/kjit" run attention --backward --seq-q 300 --seq-k 517 --heads 4 --kv-heads 2 \
      --head-dim 64 --score-mod "$alibi" --mask-mod "$window" --config "$config"
  done
done

peer_args=(--kjit "$build/kjit")
[[ $quick -eq 1 ]] && peer_args+=(--quick)
if wants python; then
  KJIT_LIBRARY=$build/runtime/libkjit_c.so PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH} \
    step torch_check python3 tests/python/torch_check.py --out "$out"
fi
wants forward && step flex_forward python3 tools/device/peers/attention_flex.py "${peer_args[@]}" \
  --out "$out/flex_forward.json"
wants backward && step flex_backward python3 tools/device/peers/attention_flex.py "${peer_args[@]}" --backward \
  --out "$out/flex_backward.json"
echo
echo "=== summary"
printf '%s\n' "${summary[@]}"
[[ -f $out/gpu_tests.log ]] && grep -E '^\[  FAILED  \]|Failure|first bad' "$out/gpu_tests.log" | head -20
for pass in forward backward; do
  [[ -f $out/flex_$pass.log ]] && sed -n '/case     S/,$p' "$out/flex_$pass.log"
done
exit $failed
