#!/usr/bin/env bash
# run_example.sh BINARY — runs the example on a GPU; exit 77 (skipped) without one,
# unless KJIT_REQUIRE_GPU=1.
if ! "$(dirname "$1")/../kjit" info --json 2>/dev/null | grep -q '"sm_count"'; then
  [[ ${KJIT_REQUIRE_GPU:-0} == 1 ]] && { echo "KJIT_REQUIRE_GPU=1 but no GPU"; exit 1; }
  echo "no usable GPU: skipped"; exit 77
fi
exec "$1"
