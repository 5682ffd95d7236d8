#!/usr/bin/env bash
# input_edge_cases.sh KJIT — inputs a careless user (or a hostile file) gives:
# stdout that cannot be written, paths that are not regular files, bytes that
# are not UTF-8 in --json output, expressions longer than one argument, and JSON
# nested a million levels deep.
# Each check failed before issue 14: exit 0 on /dev/full, a FIFO that blocked
# forever, a JSON type error (exit 3).
set -uo pipefail
kjit=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export KJIT_CACHE_DIR=$dir/cache
source "$(dirname "$0")/expect_functions.sh"

# Standard output that cannot be written is a failure with a message.
expect 1 "cannot write to standard output" sh -c "'$kjit' emit 'y = x' > /dev/full"
expect 1 "cannot write to standard output" sh -c "'$kjit' cache ls --json > /dev/full"
expect 1 "cannot write to standard output" sh -c "'$kjit' emit --help > /dev/full"

# A FIFO is refused at once, not waited on (timeout: 124 would mean it blocked).
mkfifo "$dir/fifo.cu"
expect 2 "fifo.cu' is a FIFO \(named pipe\), not a regular file" timeout 10 "$kjit" compile "$dir/fifo.cu"
expect 2 "fifo.cu' is a FIFO" timeout 10 "$kjit" emit -f "$dir/fifo.cu"
mkdir "$dir/kernels"
expect 2 "kernels' is a directory, not a regular file" "$kjit" compile "$dir/kernels"
expect 2 "'/dev/zero' is a character device, not a regular file" timeout 10 "$kjit" compile /dev/zero
expect 2 "'/dev/zero' is a character device" timeout 10 "$kjit" emit -f /dev/zero

# Bytes that are not UTF-8 (in a comment of the expression, in a file name)
# reach --json output as U+FFFD.
expect 0 "\"expression\": \"y = x # .*\"," "$kjit" compile --arch sm_90 --json "$(printf 'y = x # \377\376')"
cp "$(dirname "$0")/data/demo_kernel.cu" "$dir/$(printf 'k\377').cu"
expect 0 "\"file\": \".*k.*\.cu\"" "$kjit" compile --arch sm_90 --json "$dir/$(printf 'k\377').cu"

# An expression longer than one argument may be (128 KiB) comes from a file;
# one above the parser's 1 MiB is refused with the limit.
{
  printf '# %0200000d\n' 0
  echo 'y = sin(x) * 2'
} >"$dir/long.txt"
expect 0 "kjit_ew_" "$kjit" emit -f "$dir/long.txt"
head -c 1100000 /dev/zero | tr '\0' ' ' >"$dir/huge.txt"
expect 2 "kjit reads at most 1.0 MiB of expression text" "$kjit" emit -f "$dir/huge.txt"
expect 2 "give WHAT or -f FILE, not both" "$kjit" emit -f "$dir/long.txt" "y = x"
# A name of 200,000 characters is quoted by its first 48 (the message echoed it whole).
{
  printf 'y = '
  head -c 200000 /dev/zero | tr '\0' 'f'
  printf '(x)\n'
} >"$dir/long_name.txt"
expect 2 "unknown op 'f{48}\.\.\.' \(200000 characters\)" "$kjit" emit -f "$dir/long_name.txt"
expect 0 "^[0-9]{3,4}$" sh -c "'$kjit' emit -f '$dir/long_name.txt' 2>&1 | wc -c"

# A workload of a million nested lists is bad input, not a stack overflow (a
# segfault, exit 139, before the bound on nesting).
{
  head -c 1000000 /dev/zero | tr '\0' '['
  head -c 1000000 /dev/zero | tr '\0' ']'
} >"$dir/deep.json"
expect 2 "deep.json: values nest more than 64 levels deep" "$kjit" tune --workload "$dir/deep.json"
# A number past a double is bad JSON (an internal error, exit 3, before).
echo '[{"family": "matmul", "m": 64, "n": 64, "k": 1e999}]' >"$dir/huge_number.json"
expect 2 "huge_number.json: not valid JSON .*number overflow" "$kjit" tune --workload "$dir/huge_number.json"

# Integers are decimal: 010 was read as octal 8, 0x10 as 16; an architecture
# number past an int was an internal error (std::stoi, exit 3).
expect 0 "^matmul m=10,n=10,k=100," "$kjit" explain matmul --m 010 --n 010 --k 0100 --gpu h200
expect 2 "--top: must be a decimal integer, got '0x5'" "$kjit" explain matmul --m 8 --n 8 --k 8 --gpu h200 --top 0x5
expect 2 "past the largest integer" "$kjit" explain matmul --m 8 --n 8 --k 8 --gpu h200 --top 99999999999999999999
expect 2 "no GPU to plan for architecture sm_99999999999999" "$kjit" compile "y = x + 1" --arch sm_99999999999999
expect 2 "unknown GPU architecture 'sm_99999999999999'" "$kjit" compile "$(dirname "$0")/data/demo_kernel.cu" --arch sm_99999999999999
expect 2 "no GPU to plan for architecture sm_90x" "$kjit" emit "y = x + 1" --arch sm_90x
# sm_95 names no GPU (it was planned as an H200); sm_89 was planned as an A100 with
# the A100's 163 KiB of shared memory a block (an sm_89 block has 99 KiB).
expect 2 "no GPU to plan for architecture sm_95 .*sm_89" "$kjit" emit matmul --m 64 --n 64 --k 64 --arch sm_95
expect 0 "^gpu +a generic sm_89 GPU" "$kjit" explain matmul --m 4096 --n 4096 --k 4096 --arch sm_89

# A NUL byte in CUDA source: NVRTC read up to it and compiled what came before.
printf '__global__ void k() {}\n\0\n#error not seen\n' >"$dir/nul.cu"
expect 2 "nul.cu' holds a NUL byte \(line 2\)" "$kjit" compile "$dir/nul.cu"

finish
