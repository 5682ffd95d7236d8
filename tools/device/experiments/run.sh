#!/usr/bin/env bash
# run.sh NAME — builds NAME.cu from this folder (see its header) with the GPU
# machine's nvcc and runs it; kjit's templates are its kjit/ headers.
#
#   bash tools/device/experiments/run.sh copy_structure
#   bash tools/device/experiments/run.sh bulk_copy
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
name=${1:?usage: run.sh NAME (an experiment: $(cd "$here" && ls *.cu | sed 's/\.cu$//' | tr '\n' ' '))}
[[ -f $here/$name.cu ]] || { echo "run.sh: no experiment $here/$name.cu" >&2; exit 2; }
tmp=$(mktemp -d)
mkdir -p "$tmp/inc"
ln -s "$here/../../../templates" "$tmp/inc/kjit"
nvcc -O3 -arch=sm_90 -std=c++17 -I"$tmp/inc" -o "$tmp/$name" "$here/$name.cu"
"$tmp/$name" "${@:2}"
