# step.sh — sourced by the device check scripts: `step NAME COMMAND...` runs the
# command with its output in $out/NAME.log (out must be set), prints the log's tail,
# and adds a PASS/FAIL line to the `summary` array (`failed` becomes 1 on a failure).
summary=()
failed=0
step() {
  local name=$1; shift
  local start=$SECONDS
  echo "=== $name: $*"
  if "$@" >"$out/$name.log" 2>&1; then
    summary+=("$(printf '%-22s PASS (%ds)' "$name" $((SECONDS - start)))")
  else
    summary+=("$(printf '%-22s FAIL (exit %d, %ds, see %s.log)' "$name" $? $((SECONDS - start)) "$name")")
    failed=1
  fi
  tail -n 30 "$out/$name.log"
}
