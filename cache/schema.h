// The store's schema, in one place, and the migrations that reach it.
//
// PRAGMA application_id marks a file as kjit's; PRAGMA user_version is the schema
// version. kMigrations[v] takes a file from version v to v + 1, so schema 2 is
// one more function appended there, and every older file is carried forward
// step by step inside one write transaction.
#pragma once

#include <cstdint>
#include <string>

namespace kjit::cache {

class Database;

// "kjit" in ASCII.
inline constexpr int32_t kApplicationId = 0x6B6A6974;

// The version new files are created at and old ones migrated to.
int schema_version();

// What the file at hand is, judged from its header and tables.
enum class FileKind {
  Current,  // kjit's, at schema_version()
  Older,    // kjit's (or a pre-application_id kjit prototype, "legacy v0"): migrate
  Empty,    // no tables: initialize
  Newer,    // written by a newer kjit: do not touch
  Foreign,  // another application's SQLite file
  Invalid,  // kjit's application_id, but a version no kjit writes (negative, or 0 with tables)
};
FileKind classify(Database& db);

// The schema version a kjit file says it has (PRAGMA user_version).
int64_t file_schema_version(Database& db);

// Why the file's objects are not the ones kjit made ("" when they are): each of
// kjit's tables that the file has is an ordinary table (not a view, a virtual
// table or WITHOUT ROWID), there are no views, and the only trigger is kjit's
// own. A view over an endless recursive query in place of `tunings` made every
// read of it endless (an import filled the disk). With `complete` (a file at
// schema_version()), every table must also be there with the columns kjit
// reads and writes; before a migration the tables are an older schema's, so
// only their kind is checked.
std::string schema_problem(Database& db, bool complete);

// Brings an Older or Empty file to schema_version() and stamps application_id and
// user_version. Call inside a write transaction. Returns a note on what the
// migration did (empty when nothing worth saying).
std::string migrate(Database& db, int64_t now);

}  // namespace kjit::cache
