#include "kjit/cache/schema.h"

#include <fmt/format.h>

#include <iterator>
#include <optional>
#include <set>

#include "kjit/cache/sqlite.h"
#include "kjit/support/error.h"

namespace kjit::cache {

namespace {

// Schema 1. Within a row the small columns come first and the blobs last, so
// listing and size accounting never read a cubin's overflow pages. A binary's
// use (last_used, hits) lives in its own small table: SQLite rewrites a whole
// row on UPDATE, and counting a hit must not rewrite a 100 KB cubin.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE devices (
  model        TEXT PRIMARY KEY NOT NULL,
  name         TEXT NOT NULL,
  cc_major     INTEGER NOT NULL,
  cc_minor     INTEGER NOT NULL,
  sm_count     INTEGER NOT NULL,
  driver       TEXT NOT NULL,
  memory_bytes INTEGER NOT NULL,
  first_seen   INTEGER NOT NULL,
  last_seen    INTEGER NOT NULL
);
CREATE TABLE binaries (
  key               TEXT PRIMARY KEY NOT NULL,
  bytes             INTEGER NOT NULL,
  created           INTEGER NOT NULL,
  arch              TEXT NOT NULL,
  nvrtc_version     TEXT NOT NULL,
  generator_version TEXT NOT NULL,
  checksum          TEXT NOT NULL,
  options           TEXT NOT NULL,
  ptxas_stats       TEXT NOT NULL,
  nvrtc_log         TEXT NOT NULL,
  source            TEXT NOT NULL,
  cubin             BLOB NOT NULL
);
CREATE TABLE binary_usage (
  key       TEXT PRIMARY KEY NOT NULL,
  last_used INTEGER NOT NULL,
  hits      INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX binary_usage_by_last_used ON binary_usage (last_used);
CREATE TRIGGER binaries_delete_usage AFTER DELETE ON binaries
BEGIN
  DELETE FROM binary_usage WHERE key = old.key;
END;
CREATE TABLE tunings (
  gpu_model     TEXT NOT NULL,
  problem       TEXT NOT NULL,
  config        TEXT NOT NULL,
  median_ms     REAL NOT NULL,
  spread        REAL NOT NULL,
  runs          INTEGER NOT NULL,
  tuner_version TEXT NOT NULL,
  created       INTEGER NOT NULL,
  PRIMARY KEY (gpu_model, problem)
);
CREATE TABLE trials (
  gpu_model     TEXT NOT NULL,
  problem       TEXT NOT NULL,
  config        TEXT NOT NULL,
  median_ms     REAL NOT NULL,
  spread        REAL NOT NULL,
  runs          INTEGER NOT NULL,
  error         TEXT NOT NULL,
  tuner_version TEXT NOT NULL,
  created       INTEGER NOT NULL,
  PRIMARY KEY (gpu_model, problem, config)
);
)sql";

std::set<std::string> user_tables(Database& db) {
  std::set<std::string> names;
  Statement query = db.prepare(
      "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' "
      "ESCAPE '\\'");
  while (query.step()) names.insert(query.column_text(0));
  return names;
}

std::set<std::string> columns(Database& db, const std::string& table) {
  std::set<std::string> names;
  Statement query = db.prepare("SELECT name FROM pragma_table_info(?1)");
  query.bind(1, table);
  while (query.step()) names.insert(query.column_text(0));
  return names;
}

bool contains_all(const std::set<std::string>& have, std::initializer_list<const char*> want) {
  for (const char* name : want)
    if (!have.count(name)) return false;
  return true;
}

// "Legacy v0": the store of kjit's prototype, before application_id and
// user_version were set. It had at most these two tables:
//   binaries (key TEXT PRIMARY KEY, arch TEXT, cubin BLOB)
//   tunings  (gpu_model TEXT, problem TEXT, config TEXT, median_ms REAL)
// Anything else without kjit's application_id is another application's file.
bool is_legacy_v0(Database& db, const std::set<std::string>& tables) {
  if (tables.empty()) return false;
  for (const std::string& table : tables)
    if (table != "binaries" && table != "tunings") return false;
  if (tables.count("binaries") && !contains_all(columns(db, "binaries"), {"key", "arch", "cubin"}))
    return false;
  if (tables.count("tunings") &&
      !contains_all(columns(db, "tunings"), {"gpu_model", "problem", "config", "median_ms"}))
    return false;
  return true;
}

// 0 -> 1: creates schema 1. A legacy v0 file keeps its tunings (they cost
// minutes to measure): each becomes a tuning with one run and a spread of 1.0,
// the weakest measurement, so any real tuning replaces it. Its binaries are
// dropped: their keys predate the key recipe (no NVRTC or generator version,
// no checksum), so no lookup could match them and nothing could vouch for
// them; they are recompiled on demand.
std::string migrate_0_to_1(Database& db, int64_t now) {
  std::set<std::string> tables = user_tables(db);
  bool legacy = is_legacy_v0(db, tables);
  if (legacy) {
    for (const std::string& table : tables) {
      // Table names come from the fixed set {binaries, tunings} checked above.
      db.exec(fmt::format("ALTER TABLE {0} RENAME TO legacy_{0}", table).c_str());
    }
  }
  db.exec(kSchemaV1);
  if (!legacy) return "";
  int64_t tunings = 0, binaries = 0;
  if (tables.count("tunings")) {
    Statement copy = db.prepare(
        "INSERT OR IGNORE INTO tunings (gpu_model, problem, config, median_ms, spread, runs, "
        "tuner_version, created) "
        "SELECT gpu_model, problem, config, median_ms, 1.0, 1, 'legacy-v0', ?1 FROM legacy_tunings "
        "WHERE typeof(gpu_model) = 'text' AND typeof(problem) = 'text' AND typeof(config) = 'text' "
        "AND typeof(median_ms) IN ('real', 'integer') AND median_ms > 0");
    copy.bind(1, now).run();
    tunings = db.changes();
    db.exec("DROP TABLE legacy_tunings");
  }
  if (tables.count("binaries")) {
    binaries = db.query_int("SELECT count(*) FROM legacy_binaries");
    db.exec("DROP TABLE legacy_binaries");
  }
  return fmt::format(
      "migrated a legacy (v0) kjit cache to schema 1: kept {} tunings, dropped {} binaries from "
      "before checksums (they are recompiled when needed)",
      tunings, binaries);
}

// 1 -> 2: binaries gain `mac`, the HMAC that binds each cubin to its key under
// the user's secret (cache/authenticator.h). It is the last column, after the
// cubin: only a lookup that reads the cubin anyway reads it. The binaries stored
// before are dropped, not authenticated now: nothing vouches that this user
// compiled them (a store that others could write may hold planted rows with
// correct checksums), so they are recompiled on demand. Tunings, trials and
// devices are kept.
std::string migrate_1_to_2(Database& db, int64_t) {
  const int64_t dropped = db.query_int("SELECT count(*) FROM binaries");
  db.exec(
      "DELETE FROM binaries; "  // the trigger empties binary_usage
      "ALTER TABLE binaries ADD COLUMN mac TEXT NOT NULL DEFAULT ''");
  if (dropped == 0) return "";
  return fmt::format(
      "migrated the cache to schema 2 (authenticated binaries): dropped {} binaries stored "
      "before (they are recompiled when needed); tunings and trials kept",
      dropped);
}

using Migration = std::string (*)(Database&, int64_t now);
// kMigrations[v] migrates schema v to v + 1. Append; never edit a shipped one.
constexpr Migration kMigrations[] = {migrate_0_to_1, migrate_1_to_2};

FileKind classify_snapshot(Database& db);

}  // namespace

int schema_version() {
  return static_cast<int>(std::size(kMigrations));
}

FileKind classify(Database& db) {
  // One snapshot for the header and the tables: read separately, another
  // process's initialization could land between two reads and make a fresh
  // kjit file look foreign (application_id 0 but user_version 1).
  std::optional<WriteTransaction> snapshot;
  if (sqlite3_get_autocommit(db.handle())) snapshot.emplace(db, /*immediate=*/false);
  FileKind kind = classify_snapshot(db);
  if (snapshot) snapshot->commit();
  return kind;
}

namespace {

FileKind classify_snapshot(Database& db) {
  int64_t application_id = db.query_int("PRAGMA application_id");
  int64_t version = db.query_int("PRAGMA user_version");
  if (application_id == kApplicationId) {
    // No kjit writes a negative version, and a kjit file gets its tables in the
    // same transaction that sets its version: version 0 with tables is damage.
    if (version < 0) return FileKind::Invalid;
    if (version == 0) return user_tables(db).empty() ? FileKind::Empty : FileKind::Invalid;
    if (version == schema_version()) return FileKind::Current;
    return version > schema_version() ? FileKind::Newer : FileKind::Older;
  }
  if (application_id != 0 || version != 0) return FileKind::Foreign;
  std::set<std::string> tables = user_tables(db);
  if (tables.empty()) return FileKind::Empty;
  return is_legacy_v0(db, tables) ? FileKind::Older : FileKind::Foreign;
}

}  // namespace

int64_t file_schema_version(Database& db) {
  return db.query_int("PRAGMA user_version");
}

std::string migrate(Database& db, int64_t now) {
  int64_t version = db.query_int("PRAGMA user_version");
  if (db.query_int("PRAGMA application_id") != kApplicationId) version = 0;
  KJIT_CHECK(version >= 0 && version <= schema_version(),
             "migrate() of a file classify() does not call Older or Empty");
  std::string notes;
  for (int64_t v = version; v < schema_version(); ++v) {
    std::string note = kMigrations[v](db, now);
    if (!note.empty()) notes += (notes.empty() ? "" : "; ") + note;
  }
  // PRAGMA values cannot be bound; these are compile-time constants, not data.
  db.exec(fmt::format("PRAGMA application_id = {}; PRAGMA user_version = {}", kApplicationId,
                      schema_version())
              .c_str());
  return notes;
}

}  // namespace kjit::cache
