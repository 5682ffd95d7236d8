// A thin RAII layer over SQLite's C API, used only inside cache/.
//
// Why the C API and not SQLiteCpp: the store's fault policy depends on SQLite's
// exact result codes (SQLITE_NOTADB and SQLITE_CORRUPT move a file aside,
// SQLITE_BUSY and SQLITE_FULL only warn), the hot lookup reads a cubin straight
// out of sqlite3_column_blob without an intermediate copy, and prepared
// statements are cached per connection. All three are a few lines here.
//
// Every value reaches SQL through bind(): no query is ever built from data.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "kjit/support/error.h"

namespace kjit::cache {

class Database;

// A failed SQLite call; `code()` is the extended result code.
class SqliteError : public CacheError {
 public:
  SqliteError(const std::string& message, int code, const sqlite3* origin = nullptr)
      : CacheError(message), code_(code), origin_(origin) {}
  int code() const { return code_; }
  // The file is not a database or is damaged: it must be moved aside.
  bool is_corruption() const;
  // Whether the error came from this connection: a transfer reads one file and
  // writes another, and a damaged source must not be blamed on the store.
  bool from(const Database& db) const;

 private:
  int code_;
  const sqlite3* origin_;  // compared, never used: the connection may be closed by now
};

class Statement {
 public:
  Statement() = default;
  Statement(sqlite3* db, std::string_view sql);
  Statement(Statement&& other) noexcept : db_(other.db_), stmt_(other.stmt_) {
    other.stmt_ = nullptr;
  }
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  // Parameters are 1-based, as in SQL's ?1.
  Statement& bind(int index, int64_t value);
  Statement& bind(int index, int value) { return bind(index, static_cast<int64_t>(value)); }
  Statement& bind(int index, double value);
  Statement& bind(int index, std::string_view text);
  Statement& bind(int index, const char* text) { return bind(index, std::string_view(text)); }
  Statement& bind_blob(int index, const void* data, size_t size);
  Statement& bind_null(int index);

  // Advances; true while a row is available.
  bool step();
  // Runs a statement that returns no rows (or ignores them) and resets it.
  void run();
  // Clears bindings and rewinds, so a cached statement is ready for reuse.
  void reset();

  int64_t column_int(int index) const;
  double column_double(int index) const;
  std::string column_text(int index) const;
  bool column_is_null(int index) const;
  // Valid until the next step() or reset().
  std::string_view column_blob(int index) const;

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
};

// Rewinds a cached statement when the scope ends, whatever happened.
class StatementReset {
 public:
  explicit StatementReset(Statement& statement) : statement_(statement) {}
  ~StatementReset() { statement_.reset(); }
  StatementReset(const StatementReset&) = delete;
  StatementReset& operator=(const StatementReset&) = delete;

 private:
  Statement& statement_;
};

class Database {
 public:
  // `flags` are sqlite3_open_v2's; throws SqliteError.
  Database(const std::string& path, int flags);
  Database(Database&&) = delete;
  Database& operator=(Database&&) = delete;
  ~Database();

  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }

  // Runs one or more statements without parameters (schema, pragmas, BEGIN).
  void exec(const char* sql);
  // A statement prepared once per connection and reused; reset it after use
  // (StatementReset does). Cached by the pointer: pass a string literal.
  Statement& cached(const char* sql);
  Statement prepare(std::string_view sql) { return Statement(db_, sql); }
  // The first column of the first row of a parameterless query.
  int64_t query_int(const char* sql);
  bool read_only() const { return sqlite3_db_readonly(db_, "main") == 1; }
  int64_t changes() const { return sqlite3_changes64(db_); }

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
  // Destroyed before db_ is closed (see ~Database).
  std::unordered_map<const char*, Statement> cache_;
};

// BEGIN IMMEDIATE ... COMMIT, rolled back unless commit() was called. IMMEDIATE
// takes the write lock up front, so two writers never deadlock upgrading a read
// transaction; the busy timeout makes the second one wait instead of failing.
// With immediate = false it is a plain BEGIN: a read snapshot.
class WriteTransaction {
 public:
  explicit WriteTransaction(Database& db, bool immediate = true);
  WriteTransaction(const WriteTransaction&) = delete;
  WriteTransaction& operator=(const WriteTransaction&) = delete;
  ~WriteTransaction();
  void commit();

 private:
  Database& db_;
  bool open_ = true;
};

// Throws SqliteError for `rc` unless it is SQLITE_OK, SQLITE_ROW or SQLITE_DONE.
void check(sqlite3* db, int rc, std::string_view what);

}  // namespace kjit::cache
