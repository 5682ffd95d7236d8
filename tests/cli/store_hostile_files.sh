#!/usr/bin/env bash
# store_hostile_files.sh KJIT — files kjit did not write, as a user meets them: a
# view over an endless query in place of a table (in a file to import, and in the
# store itself), a ptxas report of the wrong JSON type, a link planted at the
# export's temporary name, a damaged store exported. Each ends promptly (a hang
# shows as exit 124) with the right exit code and a message naming the file.
set -u
kjit=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
source "$(dirname "$0")/expect_functions.sh"
export KJIT_CACHE_DIR=$dir/cache
db=$KJIT_CACHE_DIR/kjit.db
sql() {
  python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.executescript(sys.argv[2]); c.close()' "$@"
}
endless() {  # endless TABLE: a view named TABLE over rows without end
  echo "DROP TABLE $1; CREATE VIEW $1 AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n)
    SELECT 'NVIDIA H200 cc9.0 132SM' gpu_model, 'p' || x problem, 'bm=1' config, 1.0 median_ms,
    0.0 spread, 10 runs, '' error, 't' tuner_version, 1 created FROM n;"
}
"$kjit" compile 'y = x * 2' --arch sm_90 >/dev/null || { echo "FAIL: compile"; exit 1; }
"$kjit" cache export "$dir/good.db" >/dev/null || { echo "FAIL: export"; exit 1; }

# A file to import whose tunings never end: refused before a row is read (it ran
# until the disk was full).
cp "$dir/good.db" "$dir/evil.db"
sql "$dir/evil.db" "$(endless tunings)"
expect 2 "'$dir/evil.db' is not a kjit cache: its tables are not kjit's: it has a view \(tunings\)" \
  timeout 60 "$kjit" cache import "$dir/evil.db"

# A ptxas report with a string for a number: the hit works (it was an internal
# error, exit 3, on every hit).
sql "$db" "UPDATE binaries SET ptxas_stats = '[{\"name\": \"k\", \"registers\": \"32\"}]'"
expect 0 '"cache": "hit"' timeout 60 "$kjit" compile 'y = x * 2' --arch sm_90 --json

# A link at the export's old temporary name (FILE.tmp-<pid>) is never followed.
expect 0 "exported to $dir/out.db" bash -c \
  "ln -s '$dir/stolen.db' '$dir/out.db.tmp-'\$\$ && exec '$kjit' cache export '$dir/out.db'"
[[ ! -e $dir/stolen.db && -f $dir/out.db && ! -L $dir/out.db ]] ||
  { echo "FAIL: the export went through the planted link"; failures=$((failures + 1)); }

# The store's own trials never end: compile and explain hung. Opening moves the
# file aside, verify says why (exit 1), and the next verify finds a sound store.
sql "$db" "$(endless trials)"
expect 1 "damaged: .*its tables are not kjit's: it has a view \(trials\)" \
  timeout 60 "$kjit" cache verify
expect 0 "integrity: ok" timeout 60 "$kjit" cache verify
ls "$db".corrupt-* >/dev/null || { echo "FAIL: nothing moved aside"; failures=$((failures + 1)); }

# A dropped table (or a header naming another schema): every command failed with
# "no such table" and clear and verify --fix could not help.
"$kjit" compile 'y = x * 2' --arch sm_90 >/dev/null
sql "$db" "DROP TABLE trials"
expect 0 "moved it aside" timeout 60 "$kjit" cache stats
sql "$db" "PRAGMA user_version = 1"
expect 0 "migrating it failed.*moved it aside" timeout 60 "$kjit" cache clear --yes
expect 0 "tunings +0" "$kjit" cache stats

# A damaged store exported: no empty "backup", exit 1.
"$kjit" compile 'y = x * 2' --arch sm_90 >/dev/null
"$kjit" cache vacuum >/dev/null
truncate -s 30000 "$db"
expect 1 "nothing was exported" timeout 60 "$kjit" cache export "$dir/backup.db"
[[ ! -e $dir/backup.db ]] || { echo "FAIL: an empty backup was written"; failures=$((failures + 1)); }
finish
