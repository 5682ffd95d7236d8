#!/usr/bin/env bash
# tools/quickstart.sh demo|test|build — set up, build, and run kjit.
#
#   demo   install what the build needs, build the library and CLI (release; the
#          binary lands at build/release/kjit), run `kjit demo`
#   test   install what is missing, build, run the whole test suite (ctest), then
#          build and run the unit tests under AddressSanitizer + UBSan, then fuzz
#          the parser, .npy reading, --config parsing and lowering briefly
#          (cuobjdump and nvdisasm for the SASS checks come from PyPI into .whl/
#          when the toolkit lacks them)
#   build  install what the build needs, build the library and CLI (release)
#
# Needs Debian 12 (or similar) with the CUDA toolkit 12.x or 13.x installed
# (nvcc + NVRTC, found under $CUDA_HOME, /usr/local/cuda or on PATH). Debian
# packages are installed with apt-get when run as root; otherwise the missing
# ones are listed with the command to install them. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
case $mode in
  demo|test|build) ;;
  -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: tools/quickstart.sh demo|test|build (see --help)" >&2; exit 2 ;;
esac

# What the library and the CLI need (demo, build), then what the tests add.
packages=(cmake ninja-build g++ pkg-config libsqlite3-dev libssl-dev libfmt-dev libcli11-dev
  nlohmann-json3-dev libxxhash-dev)
if [[ $mode == test ]]; then
  packages+=(file binutils libgtest-dev libgmock-dev libbenchmark-dev llvm-14-tools clang-14
    libclang-rt-14-dev python3 python3-pip)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    echo "quickstart: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "quickstart: missing packages: ${missing[*]}" >&2
    echo "  install them with: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

cuda_home=${CUDA_HOME:-}
if [[ -z $cuda_home ]]; then
  for candidate in /usr/local/cuda "$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/x)")")"; do
    [[ -f $candidate/include/nvrtc.h ]] && { cuda_home=$candidate; break; }
  done
fi
if [[ -z $cuda_home || ! -f $cuda_home/include/nvrtc.h ]]; then
  echo "quickstart: the CUDA toolkit (12.x or 13.x, with NVRTC) was not found." >&2
  echo "  Install it from https://developer.nvidia.com/cuda-downloads, or set CUDA_HOME." >&2
  exit 1
fi

jobs=$(nproc)
# demo and build: the library and the CLI only; test: everything.
if [[ $mode == test ]]; then with_tests=ON; else with_tests=OFF; fi
configure() {  # configure PRESET [BENCHMARKS-AND-EXAMPLES] (the presets use Ninja)
  local extras=${2:-$with_tests}
  cmake --preset "$1" -DCUDAToolkit_ROOT="$cuda_home" -DKJIT_BUILD_TESTS=$with_tests \
    -DKJIT_BUILD_BENCHMARKS=$extras -DKJIT_BUILD_EXAMPLES=$extras >/dev/null
}
free_gib() { df -Pk . | awk 'NR == 2 { print int($4 / 1048576) }'; }
# A build folder made with another generator is reconfigured from scratch.
for dir in build/release build/asan; do
  if [[ -f $dir/CMakeCache.txt ]] && ! grep -q 'CMAKE_GENERATOR:INTERNAL=Ninja' $dir/CMakeCache.txt; then
    rm -rf "$dir"
  fi
done

configure release
cmake --build build/release -j "$jobs"

# The SASS checks of the matmul compile test need cuobjdump and nvdisasm. Where the
# toolkit was installed without them, NVIDIA's PyPI wheels are unpacked into .whl/
# (best effort: without them the test checks the PTX only, and says so).
sass_tools() {
  if [[ -x $cuda_home/bin/cuobjdump && -x $cuda_home/bin/nvdisasm ]] ||
    { command -v cuobjdump && command -v nvdisasm; } >/dev/null 2>&1; then
    return
  fi
  local version=13.5.37 bin=.whl/nvidia/cu13/bin
  if [[ ! -x $bin/cuobjdump || ! -x $bin/nvdisasm ]]; then
    echo "quickstart: fetching cuobjdump and nvdisasm $version (PyPI) for the SASS checks"
    if ! python3 -m pip download -q --no-deps --only-binary=:all: -d .whl/wheels \
      "nvidia-cuda-cuobjdump==$version" "nvidia-cuda-nvdisasm==$version"; then
      echo "quickstart: could not fetch them; the SASS checks fall back to the PTX" >&2
      return
    fi
    for wheel in .whl/wheels/nvidia_cuda_{cuobjdump,nvdisasm}-"$version"-*.whl; do
      python3 -m zipfile -e "$wheel" .whl
    done
    chmod +x "$bin"/cuobjdump "$bin"/nvdisasm
  fi
  export PATH=$PWD/$bin:$PATH
}

case $mode in
  build) ;;
  demo) build/release/kjit demo ;;
  test)
    sass_tools
    ctest --test-dir build/release --output-on-failure -j "$jobs"
    echo "quickstart: unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
    # The sanitizer build is kept small (it took 3.1 GiB and once ran a CI machine out
    # of disk): line tables only, executables not PIE, no GPU tests, benchmarks or
    # examples (no unit test runs them), and without UBSan's alignment and null checks,
    # which instrument every member access and doubled each object (a null pointer
    # read still stops AddressSanitizer). Where the disk is short, the release objects
    # go first; its binaries stay (a later build recompiles).
    if (($(free_gib) < 6)); then
      echo "quickstart: $(free_gib) GiB free; removing build/release's object files"
      find build/release -name '*.o' -delete
    fi
    echo "quickstart: $(free_gib) GiB free before the sanitizer build"
    configure asan OFF
    cmake --build build/asan -j "$jobs"
    # Not the four NVRTC compile sweeps (Compile.Every*: hundreds of kernels through
    # NVRTC, ~15 min each on two cores; the release run above runs them): their host
    # code, the lowering, is what the other unit tests run here under the sanitizers.
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir build/asan --output-on-failure -j "$jobs" -L unit -E 'Compile\.Every'
    # A short run of each fuzz target (the long runs are in docs/limits.md).
    for target in parser npy config lowering; do
      echo "quickstart: fuzzing $target"
      tests/fuzz/run_fuzz.sh "$target" 15
    done
    ;;
esac
