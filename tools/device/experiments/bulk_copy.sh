#!/ usr / bin / env bash
#bulk_copy.sh — builds and runs bulk_copy.cu(see its header) with the
#GPU machine 's nvcc; kjit' s templates are its kjit / headers.
set - euo pipefail here = $(cd "$(dirname " $0 ")" && pwd) tmp =
    $(mktemp - d) mkdir - p "$tmp/inc" ln -
    s
    "$here/../../../templates"
    "$tmp/inc/kjit" nvcc -
    O3 - arch = sm_90 - std = c++ 17 - I "$tmp/inc" -
                              o
                              "$tmp/bulk_copy"
                              "$here/bulk_copy.cu"
                              "$tmp/bulk_copy"
