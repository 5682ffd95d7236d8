#!/usr/bin/env bash
# run_example.sh BINARY — runs an example. Without a GPU the example must say so
# ("no GPU: <why>", exit 1): that is checked, then reported as skipped (77),
# unless KJIT_REQUIRE_GPU=1.
output=$("$1" 2>&1)
status=$?
echo "$output"
if [[ $status -ne 0 && $output == "no GPU"* ]]; then
  [[ ${KJIT_REQUIRE_GPU:-0} == 1 ]] && { echo "KJIT_REQUIRE_GPU=1 but no GPU"; exit 1; }
  echo "no usable GPU: skipped"
  exit 77
fi
exit $status
