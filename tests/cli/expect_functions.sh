# Sourced by the CLI test scripts: `expect CODE PATTERN COMMAND...` runs COMMAND
# and counts a failure in $failures unless it exits with CODE and its output
# (stdout and stderr) matches the extended regex PATTERN; `finish` reports and
# exits non-zero when anything failed.
failures=0
expect() {
  local code=$1 pattern=$2
  shift 2
  local output status
  output=$("$@" 2>&1)
  status=$?
  if [[ $status -ne $code ]] || ! grep -Eq -- "$pattern" <<<"$output"; then
    echo "FAIL: $* -> exit $status (want $code), output:"
    echo "$output"
    echo "  (wanted /$pattern/)"
    failures=$((failures + 1))
  else
    echo "ok: $*"
  fi
}
finish() {
  if [[ $failures -gt 0 ]]; then
    echo "$failures failed"
    exit 1
  fi
  echo "all passed"
}
