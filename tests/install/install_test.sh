#!/usr/bin/env bash
# install_test.sh BUILD_DIR — kjit as a user gets it: `cmake --install` into a
# temporary prefix, then from that prefix only
#   1. examples/ built as a project of its own (find_package(kjit)): the C++
#      elementwise, matmul and attention examples and the C example, run (without a GPU they
#      must say "no GPU: ..." and exit 1: checked, and the GPU part skipped);
#   2. a C program built with pkg-config (kjit_c.pc) and a C++ one (kjit.pc);
#   3. the Python package (PYTHONPATH=<prefix>/lib/kjit/python): import, version,
#      emit and compile (no GPU needed), and a kjit.UserError for bad input.
# Exit 0 when every step passes (77 is never used: the no-GPU path is checked).
set -euo pipefail
build=$(cd "$1" && pwd)
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

step() { echo "== $*"; }

step "cmake --install into $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
for f in bin/kjit include/kjit/kjit.h include/kjit/kjit_c.h include/kjit/runtime/runtime.h \
  lib/libkjit_c.so lib/libkjit_runtime.a lib/cmake/kjit/kjitConfig.cmake \
  lib/pkgconfig/kjit.pc lib/pkgconfig/kjit_c.pc lib/kjit/python/kjit/__init__.py \
  share/doc/kjit/LICENSE; do
  [[ -e $prefix/$f ]] || { echo "missing after install: $f"; exit 1; }
done
"$prefix/bin/kjit" --version

# The installed headers must not reach back into the source tree.
if grep -rn "$source_dir" "$prefix/include" "$prefix/lib/cmake" >/dev/null; then
  echo "installed files name the source tree:"; grep -rln "$source_dir" "$prefix/include" "$prefix/lib/cmake"
  exit 1
fi

run_example() {  # run_example BINARY: 0, or "no GPU" + exit 1 where there is none
  local output status=0
  output=$("$@" 2>&1) || status=$?
  echo "$output"
  if [[ $status -ne 0 ]]; then
    if [[ $output == "no GPU"* && ${KJIT_REQUIRE_GPU:-0} != 1 ]]; then
      echo "   (no GPU here: the example said so, as it should)"
    else
      echo "example failed: $*"; exit 1
    fi
  fi
}

step "examples/ as a separate project against the installed package"
cmake -S "$source_dir/examples" -B "$work/examples" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  >"$work/examples-configure.log" || { cat "$work/examples-configure.log"; exit 1; }
cmake --build "$work/examples" >"$work/examples-build.log" || { cat "$work/examples-build.log"; exit 1; }
for example in kjit_example_elementwise kjit_example_matmul kjit_example_attention kjit_example_c; do
  run_example "$work/examples/$example"
done

step "pkg-config consumers (C and C++)"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cc -std=c99 -Wall -Wextra -Werror "$source_dir/examples/c/elementwise.c" -o "$work/c_pkgconfig" \
  $(pkg-config --cflags --libs kjit_c) -lm -Wl,-rpath,"$prefix/lib"
run_example "$work/c_pkgconfig"
c++ -Wall -Wextra -Wno-missing-field-initializers -Werror "$source_dir/examples/elementwise.cpp" \
  -o "$work/cpp_pkgconfig" $(pkg-config --cflags --libs kjit)
run_example "$work/cpp_pkgconfig"

step "the Python package from the install"
PYTHONPATH=$prefix/lib/kjit/python python3 - <<'PY'
import kjit
print("kjit", kjit.version())
source = kjit.emit("y = x * sigmoid(x) * g", dtype="bf16")
assert "__global__" in source and "sigmoid" in source, source[:400]
report = kjit.compile("y = sin(x)^2 + cos(x)^2", arch="sm_90")
assert report["registers"] > 0 and report["spill_bytes"] == 0, report
try:
    kjit.emit("y = sinn(x)")
except kjit.UserError as e:
    assert "sin" in str(e), e
else:
    raise SystemExit("bad input did not raise kjit.UserError")
lines = []
kjit.set_log("config", lines.append)  # the log goes to the callback, not stderr
kjit.emit("y = x * 3")
attention_source = kjit.emit_attention(2048, heads=16, head_dim=128, causal=True, gpu="h200")
assert "FlashForwardSm90" in attention_source, attention_source[:200]
modified = kjit.emit_attention(2048, heads=16, gpu="h200", score_mod="tanh(s / 50) * 50",
                               mask_mod="kv_idx <= q_idx")
# The kernel's MOD is the modifiers (persistent blocks: then the flag).
assert ("kjit_modifiers>" in modified or "kjit_modifiers, true>" in modified) and \
    "kjit_mask_tile(" in modified, modified[:200]
try:
    kjit.emit_attention(64, head_dim=80)
    raise SystemExit("head dim 80 was accepted")
except kjit.UserError as e:
    assert "head dim 80" in str(e), e
kjit.set_log("", None)
assert lines and lines[0].startswith("kjit[config]: elementwise"), lines
print("python: import, emit, emit_attention, compile, errors and the log callback ok (" +
      kjit.__file__ + ")")
PY
echo "install test passed"
