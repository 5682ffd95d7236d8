// The store's administrative side: stats, verify, export, import, merge,
// clear, vacuum. These throw CacheError (or UserError for bad arguments): a
// person asked for them and must hear what failed.
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
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
// quietly took 0 of a table's rows looked like success. `check` is PRAGMA
// quick_check (every page) or integrity_check (also every index against its
// table: a file from elsewhere, whose table page was emptied under an intact
// index, passed quick_check). Returns its first complaint, "" when sound.
std::string unreadable(Database& source, const char* check) {
  try {
    Statement pragma = source.prepare(check);
    if (pragma.step() && pragma.column_text(0) != "ok") return pragma.column_text(0);
  } catch (const SqliteError& e) {
    if (!e.is_corruption()) throw;
    return e.what();
  }
  return "";
}

// verify and clear found the file's tables are not kjit's (schema_problem()).
struct SchemaProblem {};

// No kjit store holds this many rows in one table; a file that does is refused
// rather than copied for hours.
constexpr int64_t kMaxTransferRows = int64_t{1} << 24;

// Copies rows from `from` into `to` (inside the caller's write transaction on
// `to`), every conflict settled by the store's policies. With `gpu_model`, only
// that model's device, tunings and trials, and binaries for its architecture.
void copy_rows(Database& from, Database& to, const std::string& gpu_model, int64_t now,
               const BinaryPolicy& policy, TransferReport& report) {
  int64_t rows = 0;
  const auto bounded = [&rows, &from](const char* table) {
    if (++rows > kMaxTransferRows)
      throw UserError(
          fmt::format("{}'s {} holds more than {} rows, more than any kjit store; "
                      "nothing was copied",
                      from.path(), table, kMaxTransferRows));
  };
  // Every row is checked as the store checks what it is given (why_invalid):
  // one that fails is counted as rejected and left out.
  Statement devices =
      from.prepare("SELECT " KJIT_DEVICE_COLUMNS " FROM devices WHERE ?1 = '' OR model = ?1");
  devices.bind(1, gpu_model);
  while (devices.step()) {
    bounded("devices");
    DeviceRecord device = read_device(devices);
    report.devices.count(why_invalid(device, now).empty()
                             ? upsert_device(to, device, device.first_seen, device.last_seen)
                             : PutOutcome::Rejected);
  }

  std::string arch = gpu_model.empty() ? "" : model_arch(from, gpu_model);
  Statement binaries = from.prepare(
      std::string("SELECT ") + (policy.take ? KJIT_BINARY_COLUMNS : KJIT_BINARY_META_COLUMNS) +
      " FROM " KJIT_BINARIES_WITH_USAGE " WHERE ?1 = 0 OR b.arch IN (?2, ?2 || 'a', ?2 || 'f')");
  binaries.bind(1, gpu_model.empty() ? 0 : 1).bind(2, arch);
  rows = 0;
  while (binaries.step()) {
    bounded("binaries");
    if (!policy.take) {
      ++report.binaries.skipped;
      continue;
    }
    BinaryRecord binary;
    read_binary(binaries, binary, /*with_content=*/true);
    const std::string_view cubin(binary.cubin.data(), binary.cubin.size());
    if (!why_invalid(binary).empty() || checksum(cubin) != binary.checksum ||
        (policy.source != nullptr && !policy.source->verify(binary.key, cubin, binary.mac))) {
      report.binaries.count(PutOutcome::Rejected);
    } else if (binary_exists(to, binary.key)) {
      // Same key, same inputs: the copy already there is as good.
      report.binaries.count(PutOutcome::Kept);
    } else {
      // Its use is the source's: a time to come would keep it from eviction.
      const int64_t last_used = std::clamp<int64_t>(binary.last_used, 0, now);
      insert_binary(to, binary, binary.checksum,
                    policy.target != nullptr ? policy.target->mac(binary.key, cubin) : "",
                    std::clamp<int64_t>(binary.created, 0, now), last_used,
                    std::max<int64_t>(binary.hits, 0));
      report.binaries.count(PutOutcome::Inserted);
    }
  }

  Statement tunings =
      from.prepare("SELECT " KJIT_TUNING_COLUMNS " FROM tunings WHERE ?1 = '' OR gpu_model = ?1");
  tunings.bind(1, gpu_model);
  rows = 0;
  while (tunings.step()) {
    bounded("tunings");
    const TuningRecord tuning = read_tuning(tunings);
    report.tunings.count(why_invalid(tuning, now).empty() ? upsert_tuning(to, tuning, now)
                                                          : PutOutcome::Rejected);
  }

  Statement trials =
      from.prepare("SELECT " KJIT_TRIAL_COLUMNS " FROM trials WHERE ?1 = '' OR gpu_model = ?1");
  trials.bind(1, gpu_model);
  rows = 0;
  while (trials.step()) {
    bounded("trials");
    const TrialRecord trial = read_trial(trials);
    report.trials.count(why_invalid(trial, now).empty() ? upsert_trial(to, trial, now)
                                                        : PutOutcome::Rejected);
  }
}

}  // namespace

CacheStats Store::stats() {
  const Lock lock(*this);
  Database& database = db();
  flush_locked();
  CacheStats s;
  s.path = path_;
  s.schema_version = static_cast<int>(database.query_int("PRAGMA user_version"));
  s.file_bytes = store_bytes(file_);
  s.free_bytes =
      database.query_int("PRAGMA freelist_count") * database.query_int("PRAGMA page_size");
  Statement binaries = database.prepare(
      "SELECT count(*), total(max(bytes, 0)), (SELECT total(hits) FROM binary_usage) FROM "
      "binaries");
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
  const Lock lock(*this);
  Database& database = db();
  VerifyReport report;
  report.untrusted = distrust_;
  // Opening moved a damaged file aside already: say so (this store is the fresh
  // one), and --fix has nothing left to do.
  report.damaged_on_open = damaged_on_open_;
  report.replaced_damaged = remove_bad && !damaged_on_open_.empty();
  // By rowid: a key stored as a blob (by hand) matches no text key, and its row
  // could not be deleted.
  std::vector<int64_t> bad_rows, bad_tunings, bad_trials;
  std::string schema;
  try {
    // Views in place of tables are not read: they may never end.
    schema = schema_problem(database, /*complete=*/true);
    if (!schema.empty()) throw SchemaProblem();
    Statement integrity = database.prepare("PRAGMA integrity_check");
    while (integrity.step()) report.integrity.push_back(integrity.column_text(0));
    Statement binaries =
        database.prepare("SELECT key, checksum, cubin, mac, rowid FROM binaries ORDER BY key");
    while (binaries.step()) {
      ++report.binaries_checked;
      const std::string key = binaries.column_text(0);
      const std::string_view cubin = binaries.column_blob(2);
      if (checksum(cubin) != binaries.column_text(1)) {
        report.bad_binaries.push_back(key);
        bad_rows.push_back(binaries.column_int(4));
      } else if (authenticator_ && !authenticator_->verify(key, cubin, binaries.column_text(3))) {
        report.unauthenticated.push_back(key);
        bad_rows.push_back(binaries.column_int(4));
      }
    }
    // Tunings and trials are checked when stored; these are rows edited since.
    const int64_t time = now();
    auto check_rows = [&](const char* table, const char* columns, int count, auto read,
                          std::vector<int64_t>& bad) {
      Statement rows = database.prepare(fmt::format("SELECT {}, rowid FROM {}", columns, table));
      while (rows.step()) {
        const auto row = read(rows);
        if (const std::string why = why_invalid(row, time); !why.empty()) {
          report.bad_rows.push_back(
              fmt::format("{} {} {} {}: {}", table, row.gpu_model, row.problem, row.config, why));
          bad.push_back(rows.column_int(count));  // the rowid follows the columns
        }
      }
    };
    check_rows("tunings", KJIT_TUNING_COLUMNS, kTuningColumns, read_tuning, bad_tunings);
    check_rows("trials", KJIT_TRIAL_COLUMNS, kTrialColumns, read_trial, bad_trials);
  } catch (const SqliteError& e) {
    if (!e.is_corruption()) throw;
    report.integrity.push_back(e.what());
    if (remove_bad) {  // --fix: the damaged file goes aside and an empty store starts
      replace_damaged(e, "verifying the cache");
      report.replaced_damaged = true;
    }
    return report;
  } catch (const SchemaProblem&) {
    report.integrity.push_back("its tables are not kjit's: " + schema);
    if (remove_bad) {  // rows of a view cannot be deleted: the file goes aside whole
      replace_damaged("verifying the cache found " + report.integrity.back());
      report.replaced_damaged = true;
    }
    return report;
  }
  if (remove_bad && !(bad_rows.empty() && bad_tunings.empty() && bad_trials.empty())) {
    WriteTransaction write(database);
    for (const auto& [table, rowids] :
         {std::pair<const char*, const std::vector<int64_t>*>{"binaries", &bad_rows},
          {"tunings", &bad_tunings},
          {"trials", &bad_trials}}) {
      Statement drop = database.prepare(fmt::format("DELETE FROM {} WHERE rowid = ?1", table));
      for (int64_t rowid : *rowids) {
        drop.bind(1, rowid).run();
        report.removed += database.changes();
      }
    }
    write.commit();
  }
  return report;
}

namespace {

// A file the user named for import, export or merge: a regular file (or, for an
// export or a merge, nothing yet, in a folder that exists); a UserError naming what it is otherwise
// (kjit's own advice for the store's files, "remove it", is not for a path someone chose).
void check_named_file(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode))
    throw UserError(fmt::format("'{}' is {}, not a store's file", path,
                                S_ISDIR(info.st_mode) ? "a directory" : "not a regular file"),
                    "name a kjit.db file (kjit cache export writes one)");
  // A file to write goes into a folder that exists: merge made the missing folders
  // (/nonexistent_dir too, as root) and export failed on its temporary file's name.
  const std::string folder = std::filesystem::path(path).parent_path().string();
  if (!folder.empty() && (::stat(folder.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)))
    throw UserError(fmt::format("the folder of '{}' does not exist", path),
                    "make it first, or name a file in a folder that exists");
}

}  // namespace

TransferReport Store::export_to(const std::string& path, const std::string& gpu_model) {
  const Lock lock(*this);
  Database& database = db();
  flush_locked();
  if (path.empty()) throw UserError("export needs the name of a new file", "e.g. h200.db");
  if (path_exists(path))
    throw UserError(fmt::format("'{}' already exists", path),
                    "export writes a new file; to add to an existing kjit file use "
                    "`kjit cache merge FILE`");
  check_named_file(path);
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
  refuse_damaged_source("exported");
  // Written under a temporary name and renamed, so a failure leaves no half file.
  // The name is made here, exclusively and without following a link (mkstemp:
  // O_CREAT | O_EXCL, mode 0600, a name nobody can guess), before SQLite opens it:
  // at the old predictable name, FILE.tmp-<pid>, a planted link redirected the
  // export wherever it pointed.
  std::string temporary = path + ".tmp-XXXXXX";
  const int fd = ::mkstemp(temporary.data());
  if (fd < 0) throw CacheError(fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
  struct stat made {};
  const bool known = ::fstat(fd, &made) == 0;
  ::close(fd);  // before SQLite opens it: no lock of ours on it yet
  TransferReport report;
  try {
    {
      // Empty is a valid database; NOFOLLOW: a link swapped in meanwhile is refused.
      Database out(temporary, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW);
      struct stat opened {};
      if (!known || ::lstat(temporary.c_str(), &opened) != 0 || opened.st_dev != made.st_dev ||
          opened.st_ino != made.st_ino)
        throw CacheError(
            fmt::format("cannot write '{}': its temporary file {} was replaced", path, temporary));
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

// An error reading the file to import: a busy file may be tried again; any other
// is the file's fault.
[[noreturn]] void throw_source_error(const std::string& path, const SqliteError& e) {
  const int primary = e.code() & 0xff;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED)
    throw CacheError(fmt::format("cannot read '{}' now: {}", path, e.what()));
  throw UserError(fmt::format("'{}' is not a readable kjit cache: {}", path, e.what()),
                  "nothing was imported; import a file that kjit cache export wrote");
}

}  // namespace

TransferReport Store::import_from(const std::string& path, bool trust_binaries) {
  const Lock lock(*this);
  Database& database = db();
  if (!path_exists(path)) throw UserError(fmt::format("cannot read '{}': no such file", path));
  check_named_file(path);
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && info.st_dev == file_device_ && info.st_ino == file_inode_)
    throw UserError("cannot import the cache into itself",
                    "import another store's file (kjit cache export writes one)");
  if (trust_binaries && !authenticator_)
    throw CacheError("binaries cannot be imported into this cache: " + distrust_);
  // Errors reading the file are that file's: bad input (exit 2), named. Only the
  // store's own errors may point at the store (a damaged file to import was
  // blamed on the user's healthy store, with `kjit cache clear` as the way out).
  std::unique_ptr<Database> source;
  FileKind kind;
  try {
    source = std::make_unique<Database>(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX);
    configure(*source);
    kind = classify(*source);
  } catch (const SqliteError& e) {
    throw_source_error(path, e);
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
  try {
    // Before any row is read: a view in place of a table can be endless.
    const std::string schema = schema_problem(*source, /*complete=*/true);
    if (!schema.empty())
      throw UserError(
          fmt::format("'{}' is not a kjit cache: its tables are not kjit's: {}", path, schema),
          "nothing was imported; import a file that kjit cache export wrote");
    const std::string damage = unreadable(*source, "PRAGMA integrity_check");
    if (!damage.empty())
      throw UserError(fmt::format("'{}' is damaged ({}); nothing was imported", path, damage),
                      "import another copy of it");
    TransferReport report;
    WriteTransaction read(*source, /*immediate=*/false);
    WriteTransaction write(database);
    flush_locked();
    stored_content_ = true;
    // A file from elsewhere: its MACs (if any) are under another key. Its
    // binaries enter only when the user vouches for them, authenticated anew.
    BinaryPolicy policy;
    policy.take = trust_binaries;
    policy.target = authenticator_.get();
    copy_rows(*source, database, "", now(), policy, report);
    evict_locked("");
    write.commit();
    read.commit();
    return report;
  } catch (const SqliteError& e) {
    if (!e.from(*source)) throw;
    throw_source_error(path, e);
  }
}

TransferReport Store::merge_into(const std::string& path, bool trust_binaries) {
  const Lock lock(*this);
  Database& database = db();
  flush_locked();
  if (trust_binaries && !authenticator_)
    throw CacheError("this cache's binaries are not trusted: " + distrust_);
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && info.st_dev == file_device_ && info.st_ino == file_inode_)
    throw UserError("cannot merge the cache into itself");
  // Nor into the files beside it: a database written into kjit.db-wal would be
  // read as the store's log.
  std::error_code error;
  const std::filesystem::path named = std::filesystem::weakly_canonical(path, error);
  for (const char* suffix : {"-wal", "-shm", "-journal", ".key"})
    if (!error && named == std::filesystem::weakly_canonical(path_ + suffix, error))
      throw UserError(fmt::format("'{}' is the cache's own {} file", path, suffix),
                      "merge into a file of its own");
  check_named_file(path);
  refuse_damaged_source("merged");
  StoreOptions target_options;
  target_options.recover = false;  // a file the user named is never moved aside
  target_options.max_bytes = std::numeric_limits<int64_t>::max();
  target_options.clock = options_.clock;
  std::unique_ptr<Store> target;
  try {
    target = Store::open(path, target_options);
  } catch (const CacheError& e) {  // the file the user named is not a kjit cache
    throw UserError(fmt::format("cannot merge into '{}': {}", path, e.what()),
                    "merge into a new file, or one that kjit cache merge or export wrote");
  }
  const Lock target_lock(*target);
  Database& out = target->db();
  if (trust_binaries && !target->authenticator_)
    throw CacheError(fmt::format("binaries cannot be merged into {}: {}", path, target->distrust_));
  // A merged file is usually shipped: closing it folds the WAL back in, so it
  // is one self-contained file (unless another process has it open). ~Store
  // does that, under the lock file and only while the path is still its file's.
  target->stored_content_ = true;
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
  // A merged file is usually shipped, and read where its folder may not be
  // writable: in WAL mode a reader must create the -shm file beside it, so an
  // import from a read-only install folder failed ("attempt to write a readonly
  // database"). A rollback journal needs nothing beside the file. Best effort:
  // another process using the file keeps it in WAL (and a store opening it
  // switches back).
  // Leaving WAL checkpoints the WAL and deletes it by name: under the shared
  // lock, and only while the name is still this file's (another process may have
  // moved the target aside meanwhile, and the name be a fresh file's WAL).
  const StoreLock shared(target->file_, LOCK_SH);
  if (!target->replaced_underneath()) {
    try {
      out.exec("PRAGMA journal_mode = DELETE");
    } catch (const SqliteError&) {
    }
  }
  return report;
}

void Store::replace_damaged(const SqliteError& error, const char* what) {
  if (!error.is_corruption()) throw error;
  replace_damaged(fmt::format("{} found the file damaged ({})", what, error.what()));
}

void Store::replace_damaged(const std::string& why) {
  quarantine(why);
  attach();  // a fresh file: a failure here is this command's error
}

void Store::refuse_damaged_source(const char* verb) {
  // Opening moved the damaged file aside: this store is a fresh, empty one, and
  // a copy of it would pass for a backup.
  if (!damaged_on_open_.empty())
    throw CacheError(
        fmt::format("the cache's file was damaged ({}); nothing was {}: the store is now empty",
                    damaged_on_open_, verb));
  const std::string damage = unreadable(*db_, "PRAGMA quick_check");
  if (!damage.empty())
    throw CacheError(
        fmt::format("this cache's file {} is damaged ({}); nothing was {}. `kjit cache "
                    "verify --fix` moves it aside and starts an empty store",
                    file_, damage, verb));
}

ClearReport Store::clear(bool binaries_only) {
  const Lock lock(*this);
  Database& database = db();
  pending_hits_.clear();
  stored_content_ = true;
  ClearReport report;
  std::string schema;
  try {
    // Rows of a view cannot be deleted: the file goes aside whole.
    schema = schema_problem(database, /*complete=*/true);
    if (!schema.empty()) throw SchemaProblem();
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
  } catch (const SchemaProblem&) {
    replace_damaged("clearing the cache found its tables are not kjit's: " + schema);
    report.replaced_damaged = true;
  }
  return report;
}

int64_t Store::vacuum() {
  const Lock lock(*this);
  Database& database = db();
  flush_locked();
  int64_t before = store_bytes(file_);
  database.exec("VACUUM");
  // Fold the WAL back into the file and truncate it, so the size shows.
  database.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  return before - store_bytes(file_);
}

}  // namespace kjit::cache
