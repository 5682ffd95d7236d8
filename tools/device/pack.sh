#!/usr/bin/env bash
# pack.sh [BUILD] [DEST] — copy only what a GPU run needs (executables and the
# Google Benchmark library beside them) from BUILD (default build/release) into
# DEST (default .device-build), keeping the layout, so a GPU run can carry it
# (object files would push a build folder past the device tool's 64 MiB).
set -euo pipefail
build=${1:-build/release}
dest=${2:-.device-build}
rm -rf "$dest"
mkdir -p "$dest"
# Links too (libkjit_c.so -> .so.0 -> .so.0.1.0: what loaders and scripts name).
(cd "$build" && find . \( -type f -o -type l \) \( -perm -u+x -o -name 'lib*.so*' \) \
  ! -path '*/CMakeFiles/*' ! -name '*.cmake' -print0) | while IFS= read -r -d '' f; do
  mkdir -p "$dest/$(dirname "$f")"
  cp -P -p "$build/$f" "$dest/$f"
done

# libkjit_c (the C API, the Python package's library) links the shared SQLite and
# libcrypto; their copies go to DEST/lib for machines without them.
if [[ -f $dest/runtime/libkjit_c.so ]]; then
  mkdir -p "$dest/lib"
  ldd "$dest/runtime/libkjit_c.so" | awk '/libsqlite3|libcrypto/ {print $3}' | xargs -r -I{} cp -L {} "$dest/lib/"
fi
du -sh "$dest"
