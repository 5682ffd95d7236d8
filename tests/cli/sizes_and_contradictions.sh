#!/usr/bin/env bash
# sizes_and_contradictions.sh KJIT — sizes at and past the 64-bit limits, options
# that contradict each other or do not apply, and output paths that cannot be
# written: each a user error (exit 2) naming the value and the limit, before any
# work. Each check failed on the commit before it was added (the messages show
# what happened instead).
set -uo pipefail
kjit=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export KJIT_CACHE_DIR=$dir/cache
source "$(dirname "$0")/expect_functions.sh"

# --arch and --gpu that disagree: NVRTC failed on "sm_80a" (exit 1).
expect 2 "--arch sm_80 does not match --gpu h200, an sm_90 GPU" \
  "$kjit" compile matmul --m 128 --n 128 --k 64 --gpu h200 --arch sm_80
expect 0 "kjit_matmul_" "$kjit" compile matmul --m 128 --n 128 --k 64 --gpu h200 --arch sm_90a

# A large B is not "overlapping C" (the CLI's stand-in buffers were 64 GiB apart).
expect 0 "kjit_matmul_" "$kjit" compile matmul --m 64 --n 64 --k 600000000 --gpu h200

# Products past 2^63 bytes, in every verb that plans (explain accepted them).
for verb in emit explain; do
  expect 2 "A, B and C of 2147482624x2147482624x4096 \(batch 1\) hold more than 2\^63 bytes" \
    "$kjit" $verb matmul --m 2147482624 --n 2147482624 --k 4096 --gpu h200
done
expect 2 "got M=3000000000, N=3, K=3" "$kjit" emit matmul --m 3000000000 --n 3 --k 3 --gpu h200
expect 2 "holds more than 2\^63 bytes \(Q, O, dO and dQ" \
  "$kjit" compile attention --seq-q 1000000000 --head-dim 256 --heads 128 --batch 65535 --gpu h200
expect 2 "input 'x' \(9223372036854775807\) is too large" \
  "$kjit" explain 'y = x * 2' --n 9223372036854775807 --gpu h200
expect 2 "the limit is 2\^62 bytes" "$kjit" emit 'x:bool[n]; y = x' --n 4611686018427387903

# The model's pick is a config the problem can run (persistent=1 over 2^30 work
# items was picked, then refused).
expect 0 "^config +mma=wgmma,bm=128,bn=(64|128),stages=[23](,pingpong=1)?$" \
  "$kjit" explain attention --gpu h200 --seq-q 2147482624 --head-dim 64 --batch 1000 --heads 1000
# Within 1023 of 2^31 the kernels' tile counts wrapped (O silently 0): refused, the
# limit named.
expect 2 "attention seq_q is 2147483647; it must be in \[1, 2147482624\]" \
  "$kjit" explain attention --gpu h200 --seq-q 2147483647 --head-dim 64
expect 2 "attention seq_k is 2147483000; it must be in \[1, 2147482624\]" \
  "$kjit" emit attention --gpu h200 --seq-q 64 --seq-k 2147483000 --head-dim 64

# Options that do not apply to attention were dropped silently.
expect 2 "--n does not apply to attention" "$kjit" explain attention --seq-q 5 --n 77 --gpu h200

# --window: the limit in the message, no wrapped value.
expect 2 "'99999999999999999999' is not a count of keys in \[0, 2147483647\] or 'inf'" \
  "$kjit" emit attention --seq-q 64 --head-dim 64 --gpu h200 --window 99999999999999999999:0

# explain takes align= as emit does, where it names the problem's class.
expect 0 "config +block=" "$kjit" explain 'y = x * 2' --n 1000 --gpu h200 --config align=16
expect 2 "align=1: this problem's tensors are in the aligned class" \
  "$kjit" explain 'y = x * 2' --n 1000 --gpu h200 --config align=1

# Numbers the tuner would misuse: a timeout of 0 counted every config as hung, NaN
# waited forever; a negative seed wrapped.
for timeout in 0 nan -1; do
  expect 2 "the timeout is a number of seconds in \[1, 86400\], got $timeout" \
    "$kjit" tune 'y = x' --timeout $timeout
done
expect 2 "--seed: must be a decimal integer >= 0, got '-1'" "$kjit" tune 'y = x' --seed -1
expect 2 "Value -1 not in range 0 to 2147483647" "$kjit" info --device -1

# run and bench report the input's errors before asking for a GPU ("needs a GPU"
# hid them on a machine without one).
expect 2 "matmul needs M, N, K and batch >= 1" "$kjit" run matmul
expect 2 "parse error at line 1" "$kjit" bench 'y = ('
expect 2 "attention head dim 80 is not supported" "$kjit" bench attention --seq-q 64 --head-dim 80

# A --config of commas alone gave the fixed defaults, neither the keys nor the tuner.
expect 2 "--config ',' names no key=value" "$kjit" emit 'y = x' --config ,
expect 2 "gives an i32 value" "$kjit" emit attention --seq-q 64 --gpu h200 --score-mod 'q_idx - kv_idx'
expect 2 "export needs the name of a new file" "$kjit" cache export ''
expect 2 "--dtype: is empty" "$kjit" emit 'y = x' --dtype ''
# So is any other option given an empty value (each went on with its default).
expect 2 "--window: is empty" "$kjit" explain attention --seq-q 64 --gpu h200 --window ''
expect 2 "--m: is empty" "$kjit" explain matmul --m '' --n 4 --k 4 --gpu h200

# A misspelt KJIT_CACHE=off left the cache on without a word.
expect 0 "KJIT_CACHE='offf' is neither off .* the cache stays on" env KJIT_CACHE=offf "$kjit" cache path

# A lesson's output folder is checked before it measures (exit 3, "internal error").
touch "$dir/a-file"
expect 2 "cannot create the output folder '$dir/a-file/x'" \
  "$kjit" lesson fusion --dry-run --out "$dir/a-file/x"
expect 0 "wrote $dir/out/fusion.csv" "$kjit" lesson fusion --dry-run --out "$dir/out"
# A lesson in ms named predicted_ms and measured_ms twice; a time not measured was 0.
expect 0 "^series,x,predicted_ms,measured_ms,config$" head -1 "$dir/out/fusion.csv"
expect 0 "^\"fused \(one kernel\)\",1,[0-9.e-]+,," sed -n 2p "$dir/out/fusion.csv"
# --plot runs its script without a shell: a quote in --out was shell syntax (a file
# was created), and the script was looked up in the working directory.
kjit_path=$(cd "$(dirname "$kjit")" && pwd)/$(basename "$kjit")
(cd / && "$kjit_path" lesson fusion --dry-run --out "$dir/o'; touch $dir/planted; echo '" \
  --plot >"$dir/plot.log" 2>&1)
expect 0 "wrote .*fusion.csv" cat "$dir/plot.log"
expect 1 "" test -e "$dir/planted"
expect 1 "" grep "can't open file" "$dir/plot.log"

# A store's import and merge name what a path is (merge advised "remove it").
expect 2 "'$dir' is a directory, not a store's file" "$kjit" cache merge "$dir"
expect 2 "'$dir' is a directory, not a store's file" "$kjit" cache import "$dir"
# A file that is no kjit cache is bad input for merge as for import (merge: exit 1);
# a file to write goes into a folder that exists (merge made the folders; export
# failed on its temporary file's name, exit 1).
echo hello >"$dir/not-a-cache.db"
expect 2 "cannot merge into '$dir/not-a-cache.db'" "$kjit" cache merge "$dir/not-a-cache.db"
expect 2 "the folder of '$dir/no/such/x.db' does not exist" "$kjit" cache merge "$dir/no/such/x.db"
expect 2 "the folder of '$dir/no/x.db' does not exist" "$kjit" cache export "$dir/no/x.db"
expect 2 "No such file" ls "$dir/no"
# A cache folder that is a file is reported disabled (it was "enabled", then failed).
expect 0 "\"enabled\": false" env KJIT_CACHE_DIR=/dev/null "$kjit" cache path --json
expect 0 "cache disabled: /dev/null is not a directory" env KJIT_CACHE_DIR=/dev/null/kjit "$kjit" cache path
"$kjit" cache path >/dev/null
expect 2 "cannot import the cache into itself" "$kjit" cache import "$KJIT_CACHE_DIR/kjit.db"
# Nor merge it into the files beside it (a database written into kjit.db-wal).
expect 2 "is the cache's own -wal file" "$kjit" cache merge "$KJIT_CACHE_DIR/kjit.db-wal"
expect 2 "is the cache's own .key file" "$kjit" cache merge "$KJIT_CACHE_DIR/kjit.db.key"

# Review fixes (2026-12-05): options a verb ignored are refused; planning follows --gpu.
expect 0 '"arch": "sm_80"' "$kjit" compile 'y = sin(x)' --gpu a100 --json
expect 2 "--arch sm_80 does not match --gpu h200" \
  "$kjit" emit 'y = sin(x)' --config block=128 --gpu h200 --arch sm_80
expect 2 "does not fit NVIDIA A100.*524288 B of shared memory" "$kjit" explain matmul --m 256 \
  --n 256 --k 256 --gpu a100 --config bm=256,bn=256,bk=64,stages=8,mma=sync
expect 2 "--gpu does not apply to kjit tune" "$kjit" tune matmul --m 64 --n 64 --k 64 --gpu h100
expect 2 "--config does not apply to kjit tune" "$kjit" tune matmul --m 64 --n 64 --k 64 \
  --config bm=64
expect 2 "--arch does not apply to kjit run" "$kjit" run matmul --m 64 --n 64 --k 64 --arch sm_80
expect 2 "--templates does not apply with --json" "$kjit" emit matmul --m 256 --n 256 --k 256 \
  --json --templates
expect 2 "'99999999999999999999' is not a sequence length" \
  "$kjit" emit attention --seqlens-q 99999999999999999999
expect 2 "heads is 2147483648; it must be in \[1, 65535\]" \
  "$kjit" emit attention --seq-q 128 --heads 2147483648
expect 2 "past the largest integer, 18446744073709551615" \
  "$kjit" tune matmul --m 8 --n 8 --k 8 --seed 18446744073709551616
finish
