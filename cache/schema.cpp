#include "kjit/cache/schema.h"

#include <fmt/format.h>

#include <cctype>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "kjit/cache/sqlite.h"
#include "kjit/cache/store_internal.h"
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
    // Each row passes the rules of every other way into a store (why_invalid): a
    // prototype's median of 1e999 (read back as infinity) or 1e-9 ms, or a config
    // that is not a key=value list, was kept and then chosen.
    Statement rows = db.prepare(
        "SELECT gpu_model, problem, config, median_ms FROM legacy_tunings "
        "WHERE typeof(gpu_model) = 'text' AND typeof(problem) = 'text' AND typeof(config) = 'text' "
        "AND typeof(median_ms) IN ('real', 'integer')");
    // Schema 1's columns, spelled out: a later schema's must not change this step.
    Statement insert = db.prepare(
        "INSERT OR IGNORE INTO tunings (gpu_model, problem, config, median_ms, spread, runs, "
        "tuner_version, created) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    while (rows.step()) {
      TuningRecord t;
      t.gpu_model = rows.column_text(0);
      t.problem = rows.column_text(1);
      t.config = rows.column_text(2);
      t.measured = {rows.column_double(3), 1.0, 1};
      t.tuner_version = "legacy-v0";
      t.created = now;
      if (!detail::why_invalid(t, now).empty()) continue;
      insert.bind(1, t.gpu_model).bind(2, t.problem).bind(3, t.config);
      insert.bind(4, t.measured.median_ms).bind(5, t.measured.spread).bind(6, t.measured.runs);
      insert.bind(7, t.tuner_version).bind(8, t.created).run();
      tunings += db.changes();
    }
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

namespace {

// What schema_problem() expects of a file at schema_version(): each table with the
// columns kjit reads and writes, and kjit's one trigger (as kSchemaV1 writes it).
// Spelled out rather than made by migrate() in an in-memory database, which cost
// 0.25 ms per process, a third of opening the store. Should these drift from
// the schema, every fresh store fails the check and every store test with it.
struct ExpectedTable {
  const char* name;
  const char* columns;  // what a SELECT must be able to name
};
constexpr ExpectedTable kTables[] = {
    {"devices",
     "model, name, cc_major, cc_minor, sm_count, driver, memory_bytes, first_seen, last_seen"},
    {"binaries",
     "key, bytes, created, arch, nvrtc_version, generator_version, checksum, options, "
     "ptxas_stats, nvrtc_log, source, cubin, mac"},
    {"binary_usage", "key, last_used, hits"},
    {"tunings", "gpu_model, problem, config, median_ms, spread, runs, tuner_version, created"},
    {"trials",
     "gpu_model, problem, config, median_ms, spread, runs, error, tuner_version, created"},
};
constexpr const char* kTriggerName = "binaries_delete_usage";
constexpr const char* kTriggerSql =
    "CREATE TRIGGER binaries_delete_usage AFTER DELETE ON binaries BEGIN DELETE FROM "
    "binary_usage WHERE key = old.key; END";

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// SQL with every run of white space made one space: a file migrated from
// schema 1 keeps the trigger's text as that kjit wrote it.
std::string normalized(const std::string& sql) {
  std::string out;
  for (char c : sql) {
    const bool space = std::isspace(static_cast<unsigned char>(c)) != 0;
    if (space && (out.empty() || out.back() == ' ')) continue;
    out += space ? ' ' : c;
  }
  if (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// The kind of table a CREATE statement makes: "table", "virtual table" or
// "table without rowid" (SQLite keeps the statement as written).
std::string table_kind(const std::string& sql) {
  const std::string text = lower(normalized(sql));
  if (text.rfind("create virtual table", 0) == 0) return "virtual table";
  const size_t options = text.rfind(')');
  if (options != std::string::npos && text.find("without rowid", options) != std::string::npos)
    return "table without rowid";
  return "table";
}

std::string check_schema(Database& db, bool complete) {
  // Names as SQL matches them, whatever their case.
  std::map<std::string, std::string> tables;  // lower-case name -> table_kind()
  Statement objects = db.prepare(
      "SELECT type, name, sql FROM sqlite_schema WHERE type IN ('table', 'view', 'trigger')");
  while (objects.step()) {
    const std::string type = objects.column_text(0), name = objects.column_text(1);
    if (type == "table") {
      tables[lower(name)] = table_kind(objects.column_text(2));
    } else if (type == "view") {
      return fmt::format("it has a view ({}), which no kjit makes", name);
    } else if (lower(name) != kTriggerName || normalized(objects.column_text(2)) != kTriggerSql) {
      return fmt::format("it has a trigger ({}) that is not kjit's", name);
    }
  }
  for (const ExpectedTable& table : kTables) {
    auto kind = tables.find(table.name);
    if (kind == tables.end()) {
      if (complete) return fmt::format("it has no table {}", table.name);
    } else if (kind->second != "table") {
      return fmt::format("its {} is not an ordinary table (a {})", table.name, kind->second);
    }
  }
  if (!complete) return "";  // an older schema's columns
  for (const ExpectedTable& table : kTables) {
    // Prepared, never run: SQLite names the first column that is missing.
    const std::string query = fmt::format("SELECT {} FROM {}", table.columns, table.name);
    sqlite3_stmt* statement = nullptr;
    const int rc = sqlite3_prepare_v2(db.handle(), query.c_str(), -1, &statement, nullptr);
    sqlite3_finalize(statement);
    if ((rc & 0xff) == SQLITE_ERROR)
      return fmt::format("its table {} lacks kjit's columns ({})", table.name,
                         sqlite3_errmsg(db.handle()));
    check(db.handle(), rc, "reading the schema");
  }
  return "";
}

}  // namespace

std::string schema_problem(Database& db, bool complete) {
  try {
    // One read snapshot for every query: each would take its own otherwise.
    std::optional<WriteTransaction> snapshot;
    if (sqlite3_get_autocommit(db.handle())) snapshot.emplace(db, /*immediate=*/false);
    std::string problem = check_schema(db, complete);
    if (snapshot) snapshot->commit();
    return problem;
  } catch (const SqliteError& e) {
    // A schema SQLite cannot even list (a virtual table of a module this build
    // lacks, say) is not kjit's; busy and damage are the caller's to handle.
    if ((e.code() & 0xff) != SQLITE_ERROR) throw;
    return fmt::format("its schema cannot be read ({})", e.what());
  }
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
