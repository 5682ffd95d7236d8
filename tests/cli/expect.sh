#!/usr/bin/env bash
# expect.sh [--needs-gpu KJIT] CODE PATTERN [--not PATTERN] -- COMMAND...
# Runs COMMAND; passes when it exits with CODE and its output (stdout+stderr)
# matches the extended regex PATTERN (and not the --not pattern).
# --needs-gpu: exits 77 (ctest's skip) when `KJIT info` finds no usable GPU, unless
# KJIT_REQUIRE_GPU=1 (a GPU machine's run, where a skip is a failure).
set -u
if [[ ${1:-} == --needs-gpu ]]; then
  if "$2" info 2>&1 | grep -q "No usable GPU"; then
    if [[ ${KJIT_REQUIRE_GPU:-0} == 1 ]]; then
      echo "FAIL: no usable GPU and KJIT_REQUIRE_GPU=1" >&2
      exit 1
    fi
    echo "skipped: no usable GPU"
    exit 77
  fi
  shift 2
fi
code=$1 pattern=$2
shift 2
unwanted=""
if [[ ${1:-} == --not ]]; then unwanted=$2; shift 2; fi
[[ ${1:-} == -- ]] && shift
output=$("$@" 2>&1)
status=$?
echo "$output"
if [[ $status -ne $code ]]; then
  echo "FAIL: exit code $status, expected $code" >&2
  exit 1
fi
if ! grep -Eq -- "$pattern" <<<"$output"; then
  echo "FAIL: output does not match /$pattern/" >&2
  exit 1
fi
if [[ -n $unwanted ]] && grep -Eq -- "$unwanted" <<<"$output"; then
  echo "FAIL: output matches unwanted /$unwanted/" >&2
  exit 1
fi
echo "ok"
