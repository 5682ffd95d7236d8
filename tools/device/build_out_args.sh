# build_out_args.sh — sourced, with the script's arguments, by the device scripts
# that take BUILD OUT: -h/--help prints the script's header comment (lines 2 on, up
# to its first line of code) and exits 0, any count but two arguments prints it and
# exits 2; else it sets `build` and `out` (created) and points KJIT_CACHE_DIR at a
# fresh private store (`store`).
usage() { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; }
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  usage
  exit 0
fi
if [[ $# -ne 2 ]]; then
  usage >&2
  exit 2
fi
build=$1 out=$2
mkdir -p "$out"
store=$(mktemp -d)
chmod 700 "$store"
export KJIT_CACHE_DIR=$store
