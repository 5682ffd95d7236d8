#!/usr/bin/env bash
# run_parser_fuzz.sh [SECONDS] — the parser target of run_fuzz.sh (kept for the
# commands in docs/elementwise.md).
exec "$(dirname "$0")/run_fuzz.sh" parser "${1:-30}"
