#!/usr/bin/env bash
# no_libcuda.sh BUILD_DIR — fails if any kjit executable or library links libcuda.
# kjit loads the driver with dlopen, so every binary must start without one.
set -eu
build=$1
checked=0
while IFS= read -r -d '' file; do
  if file "$file" 2>/dev/null | grep -q ELF || head -c 4 "$file" | grep -q ELF; then
    checked=$((checked + 1))
    if readelf -d "$file" 2>/dev/null | grep NEEDED | grep -q 'libcuda\.so'; then
      echo "FAIL: $file needs libcuda:"; readelf -d "$file" | grep NEEDED; exit 1
    fi
    if ldd "$file" 2>/dev/null | grep -q 'libcuda\.so'; then
      echo "FAIL: ldd $file lists libcuda:"; ldd "$file"; exit 1
    fi
  fi
done < <(find "$build" -type f \( -perm -u+x -o -name '*.so*' \) ! -path '*/CMakeFiles/*' -print0)
if [[ $checked -eq 0 ]]; then echo "FAIL: no binaries found under $build"; exit 1; fi
echo "ok: $checked binaries, none links libcuda"
