#!/usr/bin/env bash
# expect.sh CODE PATTERN [--not PATTERN] -- COMMAND...
# Runs COMMAND; passes when it exits with CODE and its output (stdout+stderr)
# matches the extended regex PATTERN (and not the --not pattern).
set -u
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
