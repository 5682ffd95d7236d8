// The store's administrative side: stats, verify, export, import, merge,
// clear, vacuum. These throw CacheError (or UserError for bad arguments): a
// person asked for them and must hear what failed.
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "kjit/cache/authenticator.h"
#include "kjit/cache/schema.h"
#include "kjit/cache/sqlite.h"
#include "kjit/cache/store.h"
#include "kjit/cache/store_internal.h"

namespace kjit::cache {

using namespace detail;

namespace {

int64_t file_size(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 ? static_cast<int64_t>(info.st_size) : 0;
}

int64_t store_bytes(const std::string& path) {
  return file_size(path) + file_size(path + "-wal");
}

// The architecture of a GPU model's binaries ("sm_90"), from its device row in
// `db`; "" when the model is unknown there.
std::string model_arch(Database& db, const std::string& gpu_model) {
  Statement query = db.prepare("SELECT cc_major, cc_minor FROM devices WHERE model = ?1");
  query.bind(1, gpu_model);
  if (!query.step()) return "";
  return fmt::format("sm_{}{}", query.column_int(0), query.column_int(1));
}

// What a transfer does with binaries.
struct BinaryPolicy {
  bool take = false;                      // false: they are counted as skipped, not copied
  const Authenticator* source = nullptr;  // checks each one's MAC (rows of this user's store)
  const Authenticator* target = nullptr;  // authenticates the copies; null: no MAC (an export)
};

// A transfer's source must read whole: SQLite does not always notice damage
// while it reads (a damaged page may read as an empty one), and an import that
// quietly took 0 of a table's rows looked like success. PRAGMA quick_check reads
// every page; its first complaint is the CacheError's reason.
void check_readable(Database& source, const std::string& what, const std::string& hint) {
  std::string problem;
  try {
    Statement check = source.prepare("PRAGMA quick_check");
    if (check.step() && check.column_text(0) != "ok") problem = check.column_text(0);
  } catch (const SqliteError& e) {
    if (!e.is_corruption()) throw;
    problem = e.what();
  }
  if (!problem.empty())
    throw CacheError(
        fmt::format("{} is damaged ({}); nothing was copied. {}", what, problem, hint));
}

// Copies rows from `from` into `to` (inside the caller's write transaction on
// `to`), every conflict settled by the store's policies. With `gpu_model`, only
// that model's device, tunings and trials, and binaries for its architecture.
void copy_rows(Database& from, Database& to, const std::string& gpu_model, int64_t now,
               const BinaryPolicy& policy, TransferReport& report) {
  Statement devices =
      from.prepare("SELECT " KJIT_DEVICE_COLUMNS " FROM devices WHERE ?1 = '' OR model = ?1");
  devices.bind(1, gpu_model);
  while (devices.step()) {
    DeviceRecord device = read_device(devices);
    report.devices.count(upsert_device(to, device, device.first_seen, device.last_seen));
  }

  std::string arch = gpu_model.empty() ? "" : model_arch(from, gpu_model);
  Statement binaries = from.prepare(
      std::string("SELECT ") + (policy.take ? KJIT_BINARY_COLUMNS : KJIT_BINARY_META_COLUMNS) +
      " FROM " KJIT_BINARIES_WITH_USAGE " WHERE ?1 = 0 OR b.arch IN (?2, ?2 || 'a', ?2 || 'f')");
  binaries.bind(1, gpu_model.empty() ? 0 : 1).bind(2, arch);
  while (binaries.step()) {
    if (!policy.take) {
      ++report.binaries.skipped;
      continue;
    }
    BinaryRecord binary;
    read_binary(binaries, binary, /*with_content=*/true);
    const std::string_view cubin(binary.cubin.data(), binary.cubin.size());
    if (checksum(cubin) != binary.checksum ||
        (policy.source != nullptr && !policy.source->verify(binary.key, cubin, binary.mac))) {
      report.binaries.count(PutOutcome::Rejected);
    } else if (binary_exists(to, binary.key)) {
      // Same key, same inputs: the copy already there is as good.
      report.binaries.count(PutOutcome::Kept);
    } else {
      insert_binary(to, binary, binary.checksum,
                    policy.target != nullptr ? policy.target->mac(binary.key, cubin) : "",
                    binary.created, binary.last_used, binary.hits);
      report.binaries.count(PutOutcome::Inserted);
    }
  }

  Statement tunings =
      from.prepare("SELECT " KJIT_TUNING_COLUMNS " FROM tunings WHERE ?1 = '' OR gpu_model = ?1");
  tunings.bind(1, gpu_model);
  while (tunings.step()) report.tunings.count(upsert_tuning(to, read_tuning(tunings), now));

  Statement trials =
      from.prepare("SELECT " KJIT_TRIAL_COLUMNS " FROM trials WHERE ?1 = '' OR gpu_model = ?1");
  trials.bind(1, gpu_model);
  while (trials.step()) report.trials.count(upsert_trial(to, read_trial(trials), now));
}

}  // namespace

CacheStats Store::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  Database& database = db();
  flush_locked();
  CacheStats s;
  s.path = path_;
  s.schema_version = static_cast<int>(database.query_int("PRAGMA user_version"));
  s.file_bytes = store_bytes(file_);
  s.free_bytes =
      database.query_int("PRAGMA freelist_count") * database.query_int("PRAGMA page_size");
  Statement binaries = database.prepare(
      "SELECT count(*), total(bytes), (SELECT total(hits) FROM binary_usage) FROM binaries");
  if (binaries.step()) {
    s.binaries = binaries.column_int(0);
    s.binary_bytes = static_cast<int64_t>(binaries.column_double(1));
    s.hits = static_cast<int64_t>(binaries.column_double(2));
  }
  s.tunings = database.query_int("SELECT count(*) FROM tunings");
  s.trials = database.query_int("SELECT count(*) FROM trials");
  s.devices = database.query_int("SELECT count(*) FROM devices");
  s.max_bytes = options_.max_bytes;
  return s;
}

VerifyReport Store::verify(bool remove_bad) {
  std::lock_guard<std::mutex> lock(mutex_);
  Database& database = db();
  VerifyReport report;
  report.untrusted = distrust_;
  try {
    Statement integrity = database.prepare("PRAGMA integrity_check");
    while (integrity.step()) report.integrity.push_back(integrity.column_text(0));
    Statement binaries =
        database.prepare("SELECT key, checksum, cubin, mac FROM binaries ORDER BY key");
    while (binaries.step()) {
      ++report.binaries_checked;
      const std::string key = binaries.column_text(0);
      const std::string_view cubin = binaries.column_blob(2);
      if (checksum(cubin) != binaries.column_text(1)) {
        report.bad_binaries.push_back(key);
      } else if (authenticator_ && !authenticator_->verify(key, cubin, binaries.column_text(3))) {
        report.unauthenticated.push_back(key);
      }
    }
  } catch (const SqliteError& e) {
    if (!e.is_corruption()) throw;
    report.integrity.push_back(e.what());
    if (remove_bad) {  // --fix: the damaged file goes aside and an empty store starts
      replace_damaged(e, "verifying the cache");
      report.replaced_damaged = true;
    }
    return report;
  }
  if (remove_bad && (!report.bad_binaries.empty() || !report.unauthenticated.empty())) {
    WriteTransaction write(database);
    Statement drop = database.prepare("DELETE FROM binaries WHERE key = ?1");
    for (const auto* keys : {&report.bad_binaries, &report.unauthenticated}) {
      for (const std::string& key : *keys) {
        drop.bind(1, key).run();
        report.removed += database.changes();
      }
    }
    write.commit();
  }
  return report;
}

TransferReport Store::export_to(const std::string& path, const std::string& gpu_model) {
  std::lock_guard<std::mutex> lock(mutex_);
  Database& database = db();
  flush_locked();
  if (path.empty()) throw UserError("export needs the name of a new file", "e.g. h200.db");
  if (path_exists(path))
    throw UserError(fmt::format("'{}' already exists", path),
                    "export writes a new file; to add to an existing kjit file use "
                    "`kjit cache merge FILE`");
  if (!gpu_model.empty()) {
    Statement known = database.prepare(
        "SELECT model FROM devices UNION SELECT gpu_model FROM tunings "
        "UNION SELECT gpu_model FROM trials ORDER BY 1");
    std::vector<std::string> models;
    bool found = false;
    while (known.step()) {
      models.push_back(known.column_text(0));
      found = found || models.back() == gpu_model;
    }
    if (!found)
      throw UserError(fmt::format("no GPU model '{}' in the cache", gpu_model),
                      models.empty() ? std::string("the cache holds no GPU model yet")
                                     : fmt::format("known models: {}", fmt::join(models, "; ")));
  }
  check_readable(database, "this cache's file " + file_,
                 "`kjit cache verify --fix` moves it aside and starts an empty store");
  // Written under a temporary name and renamed, so a failure leaves no half file.
  std::string temporary = fmt::format("{}.tmp-{}", path, ::getpid());
  TransferReport report;
  try {
    {
      Database out(temporary, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX);
      configure(out);
      WriteTransaction read(database, /*immediate=*/false);  // one consistent snapshot
      WriteTransaction write(out);
      migrate(out, now());
      // Only this user's authentic binaries leave, and without a MAC: the
      // receiver's key is not ours (they import with --trust-binaries).
      BinaryPolicy policy;
      policy.take = authenticator_ != nullptr;
      policy.source = authenticator_.get();
      copy_rows(database, out, gpu_model, now(), policy, report);
      write.commit();
      read.commit();
    }
    if (::rename(temporary.c_str(), path.c_str()) != 0)
      throw CacheError(fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
  return report;
}

namespace {

// A file the user named for import or merge: a regular file (or, for a merge,
// nothing yet); a UserError naming what it is otherwise (kjit's own advice for the
// store's files, "remove it", is not for a path someone chose).
void check_named_file(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode))
    throw UserError(fmt::format("'{}' is {}, not a store's file", path,
                                S_ISDIR(info.st_mode) ? "a directory" : "not a regular file"),
                    "name a kjit.db file (kjit cache export writes one)");
}

}  // namespace

TransferReport Store::import_from(const std::string& path, bool trust_binaries) {
  std::lock_guard<std::mutex> lock(mutex_);
  Database& database = db();
  if (!path_exists(path)) throw UserError(fmt::format("cannot read '{}': no such file", path));
  check_named_file(path);
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && info.st_dev == file_device_ && info.st_ino == file_inode_)
    throw UserError("cannot import the cache into itself",
                    "import another store's file (kjit cache export writes one)");
  if (trust_binaries && !authenticator_)
    throw CacheError("binaries cannot be imported into this cache: " + distrust_);
  Database source(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX);
  configure(source);
  FileKind kind;
  try {
    kind = classify(source);
  } catch (const SqliteError& e) {  // the named file is bad input: exit 2, as a missing one
    throw UserError(fmt::format("'{}' is not a readable kjit cache: {}", path, e.what()),
                    "import a file that kjit cache export wrote");
  }
  if (kind != FileKind::Current)
    throw UserError(
        fmt::format("'{}' is not a kjit cache at schema {} ({})", path, schema_version(),
                    kind == FileKind::Newer ? "a newer kjit wrote it"
                    : kind == FileKind::Older
                        ? "an older kjit wrote it; open it once as KJIT_CACHE_DIR to migrate"
                    : kind == FileKind::Empty   ? "it is empty"
                    : kind == FileKind::Invalid ? "its header is damaged"
                                                : "another application's file"));
  check_readable(source, "'" + path + "'", "Import another copy of it.");
  TransferReport report;
  WriteTransaction read(source, /*immediate=*/false);
  WriteTransaction write(database);
  flush_locked();
  stored_content_ = true;
  // A file from elsewhere: its MACs (if any) are under another key. Its
  // binaries enter only when the user vouches for them, authenticated anew.
  BinaryPolicy policy;
  policy.take = trust_binaries;
  policy.target = authenticator_.get();
  copy_rows(source, database, "", now(), policy, report);
  evict_locked("");
  write.commit();
  read.commit();
  return report;
}

TransferReport Store::merge_into(const std::string& path, bool trust_binaries) {
  std::lock_guard<std::mutex> lock(mutex_);
  Database& database = db();
  flush_locked();
  if (trust_binaries && !authenticator_)
    throw CacheError("this cache's binaries are not trusted: " + distrust_);
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && info.st_dev == file_device_ && info.st_ino == file_inode_)
    throw UserError("cannot merge the cache into itself");
  check_named_file(path);
  check_readable(database, "this cache's file " + file_,
                 "`kjit cache verify --fix` moves it aside and starts an empty store");
  StoreOptions target_options;
  target_options.recover = false;  // a file the user named is never moved aside
  target_options.max_bytes = std::numeric_limits<int64_t>::max();
  target_options.clock = options_.clock;
  std::unique_ptr<Store> target = Store::open(path, target_options);
  std::lock_guard<std::mutex> target_lock(target->mutex_);
  Database& out = target->db();
  if (trust_binaries && !target->authenticator_)
    throw CacheError(fmt::format("binaries cannot be merged into {}: {}", path, target->distrust_));
  // A merged file is usually shipped: closing it folds the WAL back in, so it
  // is one self-contained file (unless another process has it open).
  sqlite3_db_config(out.handle(), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, nullptr);
  TransferReport report;
  WriteTransaction read(database, /*immediate=*/false);
  WriteTransaction write(out);
  // Binaries cross into another file only when asked: this store's authentic
  // ones, authenticated with that file's key.
  BinaryPolicy policy;
  policy.take = trust_binaries;
  policy.source = authenticator_.get();
  policy.target = target->authenticator_.get();
  copy_rows(database, out, "", now(), policy, report);
  write.commit();
  read.commit();
  return report;
}

void Store::replace_damaged(const SqliteError& error, const char* what) {
  if (!error.is_corruption()) throw error;
  quarantine(fmt::format("{} found the file damaged ({})", what, error.what()));
  attach();  // a fresh file: a failure here is this command's error
}

ClearReport Store::clear(bool binaries_only) {
  std::lock_guard<std::mutex> lock(mutex_);
  Database& database = db();
  pending_hits_.clear();
  stored_content_ = true;
  ClearReport report;
  try {
    WriteTransaction write(database);
    database.exec("DELETE FROM binaries");
    report.binaries = database.changes();
    database.exec("DELETE FROM binary_usage");
    if (!binaries_only) {
      database.exec("DELETE FROM tunings");
      report.tunings = database.changes();
      database.exec("DELETE FROM trials");
      report.trials = database.changes();
      database.exec("DELETE FROM devices");
      report.devices = database.changes();
    }
    write.commit();
  } catch (const SqliteError& e) {
    // Rows that cannot be read cannot be deleted: the file goes aside whole (also
    // with --binaries-only: what it kept is unreadable anyway).
    replace_damaged(e, "clearing the cache");
    report = ClearReport{};
    report.replaced_damaged = true;
  }
  return report;
}

int64_t Store::vacuum() {
  std::lock_guard<std::mutex> lock(mutex_);
  Database& database = db();
  flush_locked();
  int64_t before = store_bytes(file_);
  database.exec("VACUUM");
  // Fold the WAL back into the file and truncate it, so the size shows.
  database.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  return before - store_bytes(file_);
}

}  // namespace kjit::cache
