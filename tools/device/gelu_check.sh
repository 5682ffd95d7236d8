#!/usr/bin/env bash
# gelu_check.sh BUILD OUT — where the fused gelu(acc + bias) epilogue's time goes, on
# this machine's GPU, in one call (~3 minutes):
#
#   1. `kjit bench matmul`, plain and with the gelu, for the configs that carry the
#      issue's gelu targets (4096^3: 128 x 256 and 256 x 128 persistent, ping-pong
#      128 x 128; 2048 x 50304 x 768: ping-pong 64 x 256), 400 runs each while
#      nvidia-smi samples the SM clock and the board power every 20 ms: does the
#      gelu cost time at the same clock, or clock (the power cap)?
#   2. ncu of the ping-pong 128 x 128 at 4096^3, plain and with the gelu: issue
#      slots, instructions by pipe (the gelu's MUFU and FMA work), stall reasons.
#
# BUILD: a build folder (or a packed copy, tools/device/pack.sh); OUT: where the
# logs and JSON go. Prints the tables last. Never changes the GPU's clocks:
# ncu runs with --clock-control none.
set -uo pipefail
source "$(dirname "$0")/build_out_args.sh" "$@"
gelu="gelu(acc + bias)"

# label m n k config
cases=(
  "persistent_128x256 4096 4096 4096 mma=wgmma,bm=128,bn=256,stages=4,schedule=persistent,raster=16"
  "persistent_256x128 4096 4096 4096 mma=wgmma,bm=256,bn=128,stages=4,schedule=persistent"
  "pingpong_128x128 4096 4096 4096 mma=wgmma,bm=128,bn=128,stages=5,schedule=pingpong"
  "pingpong_64x256_vocab 2048 50304 768 mma=wgmma,bm=64,bn=256,stages=5,schedule=pingpong,raster=16"
)

# 1. Time and clock, plain and gelu. The first run of each compiles (outside the
#    sampled window: a warm-up bench of 5 runs).
start=$SECONDS
for c in "${cases[@]}"; do
  read -r label m n k config <<<"$c"
  for epi in "" "$gelu"; do
    name="${label}_${epi:+gelu}"
    name=${name%_}
    timeout 60 "$build/kjit" bench matmul --m "$m" --n "$n" --k "$k" --config "$config" \
      ${epi:+--epilogue "$epi"} --repeats 5 >/dev/null 2>&1
    nvidia-smi --query-gpu=clocks.sm,power.draw,utilization.gpu --format=csv,noheader,nounits \
      -lms 20 >"$out/$name.smi.csv" 2>/dev/null &
    smi=$!
    timeout 120 "$build/kjit" bench matmul --m "$m" --n "$n" --k "$k" --config "$config" \
      ${epi:+--epilogue "$epi"} --repeats 400 --json >"$out/$name.json" 2>"$out/$name.err"
    kill "$smi" 2>/dev/null
    wait "$smi" 2>/dev/null
  done
done
echo "benches: $((SECONDS - start)) s"

# 2. ncu, ping-pong 128 x 128 at 4096^3.
metrics=gpu__time_duration.sum,sm__cycles_active.avg,smsp__inst_executed.sum
metrics+=,smsp__issue_active.avg.pct_of_peak_sustained_active
metrics+=,sm__inst_executed_pipe_xu.sum,sm__inst_executed_pipe_fma.sum,sm__inst_executed_pipe_alu.sum
metrics+=,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio
metrics+=,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio
metrics+=,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio
metrics+=,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
metrics+=,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio
start=$SECONDS
read -r _ m n k config <<<"${cases[2]}"
for epi in "" "$gelu"; do
  name="ncu_pingpong_128x128_${epi:+gelu}"
  name=${name%_}
  timeout 120 ncu --clock-control none -k regex:kjit_matmul --launch-skip 3 --launch-count 1 \
    --metrics "$metrics" "$build/kjit" bench matmul --m "$m" --n "$n" --k "$k" \
    --config "$config" ${epi:+--epilogue "$epi"} --repeats 5 >"$out/$name.txt" 2>&1
done
echo "ncu: $((SECONDS - start)) s"

python3 - "$out" "${cases[@]}" <<'PY'
import csv, json, os, sys

out = sys.argv[1]
print("\n== time and clock (400 runs; clock and power: nvidia-smi samples at >= 50% utilization)")
print(f"{'config':26} {'epilogue':6} {'ms':>8} {'TFLOP/s':>8} {'MHz':>6} {'W':>5}  check")
for case in sys.argv[2:]:
    label = case.split()[0]
    for suffix, epi in (("", "plain"), ("_gelu", "gelu")):
        base = os.path.join(out, label + suffix)
        try:
            d = json.load(open(base + ".json"))
        except (OSError, ValueError):
            print(f"{label:26} {epi:6} (no result: {base}.err)")
            continue
        clocks, watts = [], []
        try:
            for row in csv.reader(open(base + ".smi.csv")):
                if len(row) == 3 and float(row[2]) >= 50:
                    clocks.append(float(row[0]))
                    watts.append(float(row[1]))
        except (OSError, ValueError):
            pass
        mhz = sum(clocks) / len(clocks) if clocks else float("nan")
        w = sum(watts) / len(watts) if watts else float("nan")
        print(f"{label:26} {epi:6} {d['median_ms']:8.4f} {d['tflops']:8.1f} {mhz:6.0f} {w:5.0f}  "
              f"{'pass' if d['pass'] else 'FAIL'}")
print("\n== ncu, ping-pong 128 x 128 at 4096^3")
for name in ("ncu_pingpong_128x128", "ncu_pingpong_128x128_gelu"):
    print(name)
    try:
        for line in open(os.path.join(out, name + ".txt")):
            parts = line.split()
            if parts and parts[0].startswith(("gpu__", "sm__", "smsp__")):
                print(f"  {parts[0]:86} {' '.join(parts[1:])}")
    except OSError:
        print("  (no ncu output)")
PY
