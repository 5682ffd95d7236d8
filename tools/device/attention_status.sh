#!/usr/bin/env bash
# attention_status.sh BUILD OUT — kjit's attention against the attention issue's peers
# on this machine's GPU (each part a few minutes; --parts splits them over calls):
#
#   sdpa-forward    tools/device/peers/attention_torch.py: every shape of the issue
#                   (D 64 and 128, S 512 to 8k, causal and not, GQA) against SDPA's
#                   flash and cuDNN backends
#   sdpa-backward   the same at D = 128 (S 2k and 8k, causal and not, GQA): the
#                   shapes the backward's targets name
#   flex-forward    soft-capping, ALiBi and a 256-key window mask against
#   flex-backward   FlexAttention (tools/device/peers/attention_flex.py)
#
# BUILD: a build folder or a packed copy (tools/device/pack.sh; only BUILD/kjit is
# used); OUT: where the logs and JSON go. kjit runs the model's configs from a fresh
# store per part. Prints each part's table last.
#
#   tools/device/attention_status.sh BUILD OUT [--parts LIST]
set -uo pipefail
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }
parts=sdpa-forward,sdpa-backward,flex-forward,flex-backward
positional=()
while [[ $# -gt 0 ]]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --parts) parts=${2:?--parts needs a list}; shift 2 ;;
    -*) echo "attention_status.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    *) positional+=("$1"); shift ;;
  esac
done
if [[ ${#positional[@]} -ne 2 ]]; then
  usage >&2
  exit 2
fi
build=${positional[0]} out=${positional[1]}
for part in ${parts//,/ }; do
  case $part in
    sdpa-forward|sdpa-backward|flex-forward|flex-backward) ;;
    *) echo "attention_status.sh: unknown part '$part' (sdpa-forward, sdpa-backward," \
         "flex-forward, flex-backward)" >&2; exit 2 ;;
  esac
done
if [[ ! -x $build/kjit ]]; then
  echo "attention_status.sh: no kjit executable at '$build/kjit'" >&2
  exit 2
fi
mkdir -p "$out"
kjit=$(cd "$build" && pwd)/kjit
wants() { [[ ,$parts, == *,$1,* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null |
  tee "$out/gpu.txt"
failed=0
# run NAME SECONDS COMMAND...: the command in a fresh store, its log in OUT/NAME.txt.
run() {
  local name=$1 seconds=$2 start=$SECONDS store
  shift 2
  store=$(mktemp -d)
  chmod 700 "$store"
  KJIT_CACHE_DIR=$store timeout "$seconds" "$@" >"$out/$name.txt" 2>&1
  local status=$?
  rm -rf "$store"
  echo "$name: exit $status, $((SECONDS - start)) s"
  [[ $status -eq 0 ]] || failed=1
}
backward_shapes=d128_s2048,d128_s2048_causal,d128_s8192,d128_s8192_causal
backward_shapes+=,gqa32x8_d128_s4096,gqa32x8_d128_s4096_causal
wants sdpa-forward && run sdpa_forward 240 python3 tools/device/peers/attention_torch.py \
  --kjit "$kjit" --out "$out/sdpa_forward.json"
wants sdpa-backward && run sdpa_backward 200 python3 tools/device/peers/attention_torch.py \
  --kjit "$kjit" --backward --only "$backward_shapes" --out "$out/sdpa_backward.json"
wants flex-forward && run flex_forward 150 python3 tools/device/peers/attention_flex.py \
  --kjit "$kjit" --out "$out/flex_forward.json"
wants flex-backward && run flex_backward 200 python3 tools/device/peers/attention_flex.py \
  --kjit "$kjit" --backward --out "$out/flex_backward.json"
echo
for name in sdpa_forward sdpa_backward; do
  [[ -f $out/$name.txt ]] && echo "=== $name" && sed -n '/^shape /,$p' "$out/$name.txt"
done
for name in flex_forward flex_backward; do
  [[ -f $out/$name.txt ]] && echo "=== $name" && sed -n '/ case /,$p' "$out/$name.txt"
done
exit $failed
