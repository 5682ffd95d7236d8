#!/usr/bin/env bash
# run_parser_fuzz.sh [SECONDS] — builds the parser's libFuzzer target with clang++
# (address and undefined-behaviour sanitizers) and runs it for SECONDS (default 30)
# from the seed corpus in tests/fuzz/corpus. Exits non-zero when the fuzzer finds
# a crash; the reproducer is left in $KJIT_FUZZ_DIR (default /tmp/kjit-fuzz).
set -euo pipefail
seconds=${1:-30}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${KJIT_FUZZ_DIR:-/tmp/kjit-fuzz}
cxx=${CXX_FUZZ:-clang++}
mkdir -p "$work/corpus"
cp -n "$root"/tests/fuzz/corpus/* "$work/corpus/" 2>/dev/null || true
sources=(
  "$root"/tests/fuzz/parser_fuzz.cpp
  "$root"/compiler/ir/{dtype,shape,op_table,graph,printer,parser,verifier}.cpp
  "$root"/compiler/interpreter/interpreter.cpp
  "$root"/compiler/passes/{rebuild,constant_fold,cse,dce,pipeline}.cpp
  "$root"/support/{error,options}.cpp
)
binary="$work/parser_fuzz"
if [[ ! -x $binary || -n $(find "${sources[@]}" "$root"/compiler -newer "$binary" -name '*.[ch]*' 2>/dev/null | head -1) ]]; then
  echo "building $binary with $cxx"
  "$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root" "${sources[@]}" -o "$binary"
fi
echo "fuzzing the parser for ${seconds}s"
cd "$work"
"$binary" -max_total_time="$seconds" -max_len=512 -timeout=10 -print_final_stats=1 corpus
