#!/usr/bin/env bash
# run_all.sh — every lesson of `kjit lesson --list` in one go: NAME.csv, NAME.json and
# (with matplotlib) NAME.png per lesson under --out, then a table of what ran and
# how long each took.
#
#   tools/lessons/run_all.sh [--kjit PATH] [--out DIR] [--dry-run] [--only a,b,...]
#
# --kjit     the kjit binary (default: build/release/kjit, else kjit on PATH)
# --out      where the files go (default lessons/)
# --dry-run  no GPU needed: the kernels each lesson would run and the model's predictions
# --only     a comma-separated subset of the lessons
# Exit status: 0 when every lesson ran, 1 when one failed (the others still run).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
kjit=build/release/kjit
[[ -x $kjit ]] || kjit=$(command -v kjit || echo build/release/kjit)
out=lessons
dry=() only=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --kjit) kjit=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --dry-run) dry=(--dry-run); shift ;;
    --only) only=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_all.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ ! -x $kjit ]]; then
  echo "run_all.sh: no kjit binary at '$kjit' (build it, or pass --kjit PATH)" >&2
  exit 2
fi
mkdir -p "$out"

mapfile -t lessons < <("$kjit" lesson --list | awk '{print $1}')
if [[ -n $only ]]; then
  IFS=, read -r -a wanted <<<"$only"
  for name in "${wanted[@]}"; do
    if ! printf '%s\n' "${lessons[@]}" | grep -qx "$name"; then
      echo "run_all.sh: unknown lesson '$name'; the lessons are: ${lessons[*]}" >&2
      exit 2
    fi
  done
  lessons=("${wanted[@]}")
fi
plot=(--plot)
if [[ ${#dry[@]} -gt 0 ]] || ! python3 -c 'import matplotlib' 2>/dev/null; then
  plot=()
  [[ ${#dry[@]} -gt 0 ]] || echo "(no matplotlib: CSV and JSON only; pip install matplotlib for the plots)"
fi

failed=0 rows=() start_all=$SECONDS
for name in "${lessons[@]}"; do
  echo "=== kjit lesson $name ${dry[*]}"
  start=$SECONDS
  if "$kjit" lesson "$name" --out "$out" "${dry[@]}" "${plot[@]}" \
    >"$out/$name.log" 2>&1; then
    status=PASS
  else
    status="FAIL (see $out/$name.log)"
    failed=1
  fi
  tail -n 25 "$out/$name.log"
  rows+=("$(printf '%-16s %5ds  %s' "$name" $((SECONDS - start)) "$status")")
done
echo
echo "lesson            time  result          (all: $((SECONDS - start_all)) s)"
printf '%s\n' "${rows[@]}"
exit $failed
