#!/usr/bin/env bash
# run_fuzz.sh TARGET [SECONDS] [LIBFUZZER-OPTION...] — builds one libFuzzer target
# with clang++ (address and undefined-behaviour sanitizers) and runs it for
# SECONDS (default 30) from its seed corpus in tests/fuzz/corpus/TARGET. Exits
# non-zero when the fuzzer finds a crash; the reproducer is left in
# $KJIT_FUZZ_DIR/TARGET (default /tmp/kjit-fuzz/TARGET).
#
# Targets (TARGET_fuzz.cpp here):
#   parser    the text form, as written and as a matmul epilogue; round trip
#   npy       .npy reading (kjit run --input); write and read back
#   config    --config text as elementwise and matmul configs; canonical round trip
#   lowering  every parsed graph optimized, fused and lowered to CUDA source
#
# Options after SECONDS go to libFuzzer, e.g. -runs=1000000 -jobs=2 -workers=2.
set -euo pipefail
target=${1:?usage: run_fuzz.sh parser|npy|config|lowering [SECONDS] [LIBFUZZER-OPTION...]}
seconds=${2:-30}
shift $(($# >= 2 ? 2 : 1))
root=$(cd "$(dirname "$0")/../.." && pwd)
[[ -f $root/tests/fuzz/${target}_fuzz.cpp ]] || { echo "run_fuzz.sh: no target '$target'" >&2; exit 2; }
base=${KJIT_FUZZ_DIR:-/tmp/kjit-fuzz}
work=$base/$target
cxx=${CXX_FUZZ:-clang++}
mkdir -p "$work/corpus" "$base/obj" "$base/include"
# kjit's headers are included as "kjit/<folder>/...": a link makes the repository that.
ln -sfn "$root" "$base/include/kjit"

# The library code every target may use, compiled once into $base/obj and
# rebuilt when any source or header under compiler/ or support/ is newer than
# the last build.
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
  -DFMT_HEADER_ONLY -DXXH_INLINE_ALL -I"$base/include" -I"$root")
mapfile -t sources < <(cd "$root" && ls compiler/*/*.cpp support/*.cpp)
stamp=$base/obj/.built
if [[ ! -f $stamp || -n $(find "$root"/compiler "$root"/support -newer "$stamp" -name '*.[ch]*' \
  2>/dev/null | head -1) ]]; then
  echo "building the fuzzing library with $cxx"
  rm -f "$base"/obj/*.o
  for source in "${sources[@]}"; do
    "$cxx" "${flags[@]}" -c "$root/$source" -o "$base/obj/$(tr / _ <<<"${source%.cpp}").o" &
    [[ $(jobs -r | wc -l) -ge $(nproc) ]] && wait -n
  done
  wait
  touch "$stamp"
fi
binary=$work/${target}_fuzz
if [[ ! -x $binary || $stamp -nt $binary || $root/tests/fuzz/${target}_fuzz.cpp -nt $binary ]]; then
  echo "building $binary"
  "$cxx" "${flags[@]}" -fsanitize=fuzzer "$root/tests/fuzz/${target}_fuzz.cpp" "$base"/obj/*.o \
    -o "$binary"
fi

# Seeds: the committed corpus; the lowering target reads the parser's texts
# behind its two control bytes (aligned / default config, mixed access patterns).
if [[ $target == lowering ]]; then
  for seed in "$root"/tests/fuzz/corpus/parser/*; do
    [[ -f $work/corpus/$(basename "$seed") ]] || { printf '\x80\x01'; cat "$seed"; } >"$work/corpus/$(basename "$seed")"
  done
else
  cp -n "$root"/tests/fuzz/corpus/"$target"/* "$work/corpus/" 2>/dev/null || true
fi
echo "fuzzing $target for ${seconds}s"
cd "$work"
"$binary" -max_total_time="$seconds" -max_len=512 -timeout=10 -print_final_stats=1 "$@" corpus
