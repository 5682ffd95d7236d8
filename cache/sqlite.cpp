#include "kjit/cache/sqlite.h"

#include <fmt/format.h>

namespace kjit::cache {

bool SqliteError::is_corruption() const {
  int primary = code_ & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
}

bool SqliteError::from(const Database& db) const {
  return origin_ != nullptr && origin_ == db.handle();
}

void check(sqlite3* db, int rc, std::string_view what) {
  if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE) return;
  int extended = db != nullptr ? sqlite3_extended_errcode(db) : rc;
  if ((extended & 0xff) != (rc & 0xff)) extended = rc;
  std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  std::string kind = sqlite3_errstr(rc);
  if (message != kind) message += " (" + kind + ")";
  throw SqliteError(fmt::format("{}: {}", what, message), extended, db);
}

Statement::Statement(sqlite3* db, std::string_view sql) : db_(db) {
  check(db,
        sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT,
                           &stmt_, nullptr),
        fmt::format("preparing '{}'", sql.substr(0, 60)));
}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    db_ = other.db_;
    stmt_ = other.stmt_;
    other.stmt_ = nullptr;
  }
  return *this;
}

Statement::~Statement() {
  sqlite3_finalize(stmt_);
}

Statement& Statement::bind(int index, int64_t value) {
  check(db_, sqlite3_bind_int64(stmt_, index, value), "binding an integer");
  return *this;
}

Statement& Statement::bind(int index, double value) {
  check(db_, sqlite3_bind_double(stmt_, index, value), "binding a number");
  return *this;
}

Statement& Statement::bind(int index, std::string_view text) {
  // SQLITE_TRANSIENT: SQLite copies, so the caller's buffer may go away.
  check(db_,
        sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
        "binding text");
  return *this;
}

Statement& Statement::bind_blob(int index, const void* data, size_t size) {
  // A zero-length blob must still be a blob, not NULL: pass a valid pointer.
  static const char kEmpty = 0;
  check(db_, sqlite3_bind_blob64(stmt_, index, size == 0 ? &kEmpty : data, size, SQLITE_TRANSIENT),
        "binding a blob");
  return *this;
}

Statement& Statement::bind_null(int index) {
  check(db_, sqlite3_bind_null(stmt_, index), "binding NULL");
  return *this;
}

bool Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  check(db_, rc, fmt::format("running '{}'", std::string_view(sqlite3_sql(stmt_)).substr(0, 60)));
  return false;
}

void Statement::run() {
  StatementReset rewind(*this);
  while (step()) {
  }
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int64_t Statement::column_int(int index) const {
  return sqlite3_column_int64(stmt_, index);
}

double Statement::column_double(int index) const {
  return sqlite3_column_double(stmt_, index);
}

std::string Statement::column_text(int index) const {
  const unsigned char* text = sqlite3_column_text(stmt_, index);
  if (text == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(text),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, index)));
}

bool Statement::column_is_null(int index) const {
  return sqlite3_column_type(stmt_, index) == SQLITE_NULL;
}

std::string_view Statement::column_blob(int index) const {
  const void* data = sqlite3_column_blob(stmt_, index);
  if (data == nullptr) return {};
  return std::string_view(static_cast<const char*>(data),
                          static_cast<size_t>(sqlite3_column_bytes(stmt_, index)));
}

Database::Database(const std::string& path, int flags) : path_(path) {
  int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    int extended = db_ != nullptr ? sqlite3_extended_errcode(db_) : rc;
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw SqliteError(fmt::format("cannot open '{}': {}", path, message), extended);
  }
  sqlite3_extended_result_codes(db_, 1);
}

Database::~Database() {
  cache_.clear();  // statements must be finalized before the connection closes
  sqlite3_close_v2(db_);
}

void Database::exec(const char* sql) {
  char* error = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &error);
  if (rc != SQLITE_OK) {
    std::string message = error != nullptr ? error : sqlite3_errstr(rc);
    sqlite3_free(error);
    int extended = sqlite3_extended_errcode(db_);
    if ((extended & 0xff) != (rc & 0xff)) extended = rc;
    throw SqliteError(fmt::format("running '{}': {}", std::string_view(sql).substr(0, 60), message),
                      extended, db_);
  }
}

Statement& Database::cached(const char* sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) it = cache_.emplace(sql, Statement(db_, sql)).first;
  return it->second;
}

int64_t Database::query_int(const char* sql) {
  Statement statement(db_, sql);
  return statement.step() ? statement.column_int(0) : 0;
}

WriteTransaction::WriteTransaction(Database& db, bool immediate) : db_(db) {
  db_.exec(immediate ? "BEGIN IMMEDIATE" : "BEGIN");
}

WriteTransaction::~WriteTransaction() {
  if (!open_) return;
  // Never throws from a destructor: a failed rollback leaves SQLite to roll
  // back when the connection closes.
  sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void WriteTransaction::commit() {
  db_.exec("COMMIT");
  open_ = false;
}

}  // namespace kjit::cache
