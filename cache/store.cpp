// The store: opening (with the fault policy), binaries, devices, tunings and
// trials. Rows and policies are in rows.cpp; export, import, merge and the
// administrative calls in admin.cpp.
#include "kjit/cache/store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>
#include <thread>

#include "kjit/cache/authenticator.h"
#include "kjit/cache/schema.h"
#include "kjit/cache/sqlite.h"
#include "kjit/cache/store_internal.h"
#include "kjit/cache/trust.h"
#include "kjit/support/hash.h"
#include "kjit/support/log.h"
#include "kjit/support/options.h"

namespace kjit::cache {

namespace fs = std::filesystem;

// A file the store will not use, and why.
class Store::Rejected : public std::runtime_error {
 public:
  enum class Kind { Damaged, Unusable };
  Rejected(Kind why, const std::string& message) : std::runtime_error(message), kind(why) {}
  Kind kind;
};

namespace {

// Every warning is printed once per process, however many stores repeat it. The
// log is written after the lock is released: a log callback that called kjit, which
// opened a store that warned, deadlocked here.
void print_once(const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> printed;
  bool first;
  {
    std::lock_guard<std::mutex> lock(mutex);
    first = printed.insert(message).second;
  }
  if (first) log_warning("cache: " + message);
}

// Creates the missing directories of `dir` with mode 0700, set explicitly so
// the umask cannot widen or narrow it. Existing directories are left alone.
void make_directories(const fs::path& dir) {
  if (dir.empty()) return;
  struct stat info {};
  if (::stat(dir.c_str(), &info) == 0) {
    if (!S_ISDIR(info.st_mode)) throw std::runtime_error(dir.string() + " is not a directory");
    return;
  }
  if (dir.has_parent_path() && dir.parent_path() != dir) make_directories(dir.parent_path());
  if (::mkdir(dir.c_str(), 0700) == 0) {
    ::chmod(dir.c_str(), 0700);  // the umask may have narrowed it
  } else if (errno != EEXIST) {  // EEXIST: another process just made it
    throw std::runtime_error(
        fmt::format("cannot create {}: {}", dir.string(), std::strerror(errno)));
  }
}

// The directory with every link in its path resolved.
std::string resolved_directory(const fs::path& dir) {
  const std::string name = dir.empty() ? "." : dir.string();
  char* resolved = ::realpath(name.c_str(), nullptr);
  if (resolved == nullptr)
    throw std::runtime_error(fmt::format("cannot resolve {}: {}", name, std::strerror(errno)));
  std::string out(resolved);
  std::free(resolved);
  return out;
}

// Creates the store's file with mode 0600 when it does not exist (O_EXCL: exactly
// one process creates it; SQLite gives the -wal and -shm files the same mode).
// O_NOFOLLOW: a link in its place is refused, never followed; O_NONBLOCK: a FIFO
// in its place does not block the open. An existing file is never opened here:
// closing any descriptor of a file drops every POSIX lock this process holds on it
// — those of SQLite connections other Stores of this process have open too — and
// WAL depends on them (a connection that lost its shared lock let another
// process's last close delete the WAL under it: "database disk image is
// malformed"). Its checks are lstat()'s, before and after SQLite opens it.
void create_store_file(const std::string& path) {
  const int fd =
      ::open(path.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd >= 0) {
    ::fchmod(fd, 0600);  // the umask may have narrowed it
    ::close(fd);         // a file created just now: no connection of ours holds a lock on it
    return;
  }
  if (errno == EEXIST) return;
  throw std::runtime_error(errno == ELOOP
                               ? fmt::format("{} is a symbolic link; kjit never follows links "
                                             "in its cache. Fix: remove it",
                                             path)
                               : fmt::format("cannot open {}: {}", path, std::strerror(errno)));
}

// The files that belong to the store; none may be a link or anything but a
// regular file (a link planted as kjit.db or as its lock made kjit write
// wherever it pointed).
constexpr const char* kStoreFileSuffixes[] = {"", "-wal", "-shm", ".lock", ".key"};

// KJIT_CACHE_MAX_MB is below this many MiB (2^63 bytes).
constexpr double kMaxCacheMiB = 8796093022208.0;

// KJIT_CACHE_MAX_MB in bytes, or nullopt when it is not a plain number in range.
std::optional<int64_t> parse_max_mb(const std::string& text) {
  // Digits with an optional fraction: no sign, exponent, hex, inf or nan (all of
  // which strtod takes), so what is accepted reads as the plain number it is.
  size_t digits = 0, dots = 0;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      ++digits;
    } else if (c == '.') {
      ++dots;
    } else {
      return std::nullopt;
    }
  }
  if (digits == 0 || dots > 1) return std::nullopt;
  double mib = 0;
  auto parsed = std::from_chars(text.data(), text.data() + text.size(), mib);
  if (parsed.ec != std::errc() || parsed.ptr != text.data() + text.size()) return std::nullopt;
  // The byte count must fit in int64_t: 1e13 MiB and beyond used to overflow to
  // a negative limit that evicted everything.
  if (!(mib < kMaxCacheMiB)) return std::nullopt;
  return static_cast<int64_t>(mib * 1024 * 1024);
}

std::string timestamp_now() {
  std::time_t t = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%dT%H%M%SZ", &utc);
  return text;
}

}  // namespace

using namespace detail;

StoreLock::StoreLock(const std::string& file, int operation) {
  const std::string path = file + ".lock";
  // Read-write creates it; one that exists but is another user's, readable to
  // this one, locks as well read-only (flock needs no write access).
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  const int error = errno;  // the read-write open's: a read-only folder says why
  if (fd_ < 0 && error == EACCES)
    fd_ = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    why_not_ = fmt::format("cannot open {}: {}", path, std::strerror(error));
    return;
  }
  struct stat info {};
  if (::fstat(fd_, &info) != 0 || !S_ISREG(info.st_mode)) {
    why_not_ = path + " is not a regular file";
    ::close(fd_);
    fd_ = -1;
    return;
  }
  while (::flock(fd_, operation) != 0) {
    if (errno == EINTR) continue;
    why_not_ = fmt::format("cannot lock {}: {}", path, std::strerror(errno));
    ::close(fd_);
    fd_ = -1;
    return;
  }
}

StoreLock::~StoreLock() {
  if (fd_ < 0) return;
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

Store::Store(std::string path, StoreOptions options)
    : path_(std::move(path)), options_(std::move(options)) {
  if (!options_.clock) options_.clock = [] { return static_cast<int64_t>(std::time(nullptr)); };
}

Store::~Store() {
  const Lock lock(*this);
  if (!db_) return;
  try {
    flush_locked();
  } catch (const std::exception&) {
    // Hit counts are advisory; losing a batch at exit is harmless.
  }
  // A process that stored something (it compiled or tuned, so it can afford
  // an fsync) folds the WAL back into the file if it is the last one out, which
  // then deletes the WAL by name: only if the name is still this file's, and
  // under the shared lock, so that no quarantine gives the name to a fresh
  // file while the connection closes.
  if (stored_content_) {
    const StoreLock shared(file_, LOCK_SH);
    if (!replaced_underneath())
      sqlite3_db_config(db_->handle(), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, nullptr);
    db_.reset();
  }
}

std::unique_ptr<Store> Store::disabled(const std::string& reason) {
  std::unique_ptr<Store> store(new Store("", {}));
  store->disabled_reason_ = reason;
  return store;
}

std::string Store::default_path(std::string* reason) {
  auto say = [reason](const std::string& why) {
    if (reason) *reason = why;
    return std::string();
  };
  if (std::optional<std::string> setting = env("KJIT_CACHE")) {
    std::string lower;
    for (char c : *setting) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "off" || lower == "0" || lower == "false" || lower == "no")
      return say("KJIT_CACHE=" + *setting + " disables the cache");
    // A misspelt "off" must not pass for "on" without a word.
    if (!(lower.empty() || lower == "on" || lower == "1" || lower == "true" || lower == "yes"))
      print_once(
          fmt::format("KJIT_CACHE='{}' is neither off (off, 0, false, no) nor on (on, 1, "
                      "true, yes); the cache stays on",
                      *setting));
  }
  fs::path dir;
  if (std::optional<std::string> value = env("KJIT_CACHE_DIR")) {
    dir = *value;
  } else if (std::optional<std::string> xdg = env("XDG_CACHE_HOME")) {
    dir = fs::path(*xdg) / "kjit";
  } else if (std::optional<std::string> home = env("HOME")) {
    dir = fs::path(*home) / ".cache" / "kjit";
  } else {
    return say("none of KJIT_CACHE_DIR, XDG_CACHE_HOME and HOME is set");
  }
  // The folder, or the nearest part of it that exists, must be a directory:
  // KJIT_CACHE_DIR=/dev/null was reported enabled ("cache path") and then failed
  // at every open.
  for (fs::path at = dir; !at.empty(); at = at.parent_path()) {
    std::error_code error;
    const fs::file_status status = fs::status(at, error);
    if (fs::exists(status)) {
      if (!fs::is_directory(status)) return say(at.string() + " is not a directory");
      break;
    }
    if (at == at.parent_path()) break;
  }
  return (dir / kCacheFileName).string();
}

StoreOptions Store::options_from_environment() {
  StoreOptions options;
  if (std::optional<std::string> text = env("KJIT_CACHE_MAX_MB")) {
    if (std::optional<int64_t> bytes = parse_max_mb(*text)) {
      options.max_bytes = *bytes;
    } else {
      print_once(fmt::format(
          "KJIT_CACHE_MAX_MB='{}' is not a size in MiB (a number below {:.0f}); using {} MiB",
          *text, kMaxCacheMiB, kDefaultMaxBytes >> 20));
    }
  }
  return options;
}

std::unique_ptr<Store> Store::open_default() {
  std::string reason;
  std::string path = default_path(&reason);
  if (path.empty()) {
    std::unique_ptr<Store> store = disabled(reason);
    if (reason.rfind("KJIT_CACHE=", 0) != 0) {
      const Lock lock(*store);
      store->warn("disabled: " + reason);
    }
    return store;
  }
  try {
    return open(path, options_from_environment());
  } catch (const std::exception& e) {
    // open() with recover handles every fault it knows; this is the promise
    // that nothing else escapes either.
    std::unique_ptr<Store> store = disabled(e.what());
    {
      const Lock lock(*store);
      store->warn(std::string("disabled for this process: ") + e.what());
    }
    return store;
  }
}

std::unique_ptr<Store> Store::open(const std::string& path, StoreOptions options) {
  std::unique_ptr<Store> store(new Store(path, std::move(options)));
  {
    const Lock lock(*store);  // its warnings go to the log as it is released
    store->connect();
  }
  return store;
}

bool Store::enabled() const {
  const Lock lock(*this);
  return db_ != nullptr;
}

std::string Store::disabled_reason() const {
  const Lock lock(*this);
  return disabled_reason_;
}

std::vector<std::string> Store::warnings() const {
  const Lock lock(*this);
  return warnings_;
}

bool Store::binaries_trusted() const {
  const Lock lock(*this);
  return db_ != nullptr && authenticator_ != nullptr;
}

std::string Store::binaries_distrust() const {
  const Lock lock(*this);
  if (!db_) return "the cache is disabled: " + disabled_reason_;
  return distrust_;
}

void Store::warn(const std::string& message) {
  warnings_.push_back(message);
  unsent_.push_back(path_.empty() ? message : fmt::format("{}: {}", path_, message));
}

Store::Lock::~Lock() {
  std::vector<std::string> unsent;
  unsent.swap(store_.unsent_);
  lock_.unlock();
  for (const std::string& message : unsent) {
    try {
      print_once(message);
    } catch (...) {  // a log callback's exception: the store's work is done
    }
  }
}

void Store::disable(const std::string& reason) {
  db_.reset();
  disabled_reason_ = reason;
  warn("disabled for this process: " + reason);
}

int64_t Store::now() const {
  return options_.clock();
}

Database& Store::db() {
  if (!db_) throw CacheError("the cache is disabled: " + disabled_reason_);
  return *db_;
}

// Switches the file to WAL. Changing the journal mode needs the file to
// itself, and SQLite reports "locked" at once rather than waiting when other
// processes open the file at the same moment, so this waits and retries.
void Store::set_wal_mode(Database& database) {
  for (int attempt = 0;; ++attempt) {
    try {
      Statement mode = database.prepare("PRAGMA journal_mode = WAL");
      if (mode.step() && mode.column_text(0) != "wal")
        warn("could not switch to WAL (journal mode " + mode.column_text(0) +
             "); concurrent use will be slower");
      return;
    } catch (const SqliteError& e) {
      int primary = e.code() & 0xff;
      bool locked = primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
      if (!locked || attempt * 10 >= kBusyTimeoutMs) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

// Opens the file, judges it and brings it to the current schema; throws
// Rejected for a file it will not use.
void Store::attach() {
  while (!attach_once()) {
  }
}

bool Store::attach_once() {
  fs::path file(path_);
  std::string directory;
  try {
    make_directories(file.parent_path());
    directory = resolved_directory(file.parent_path());
  } catch (const std::runtime_error& e) {
    throw Rejected(Rejected::Kind::Unusable, e.what());
  }
  file_ = (fs::path(directory) / file.filename()).string();
  for (const char* suffix : kStoreFileSuffixes) {
    const std::string name = file_ + suffix;
    struct stat info {};
    if (::lstat(name.c_str(), &info) == 0 && !S_ISREG(info.st_mode))
      throw Rejected(Rejected::Kind::Unusable,
                     S_ISLNK(info.st_mode)
                         ? fmt::format("{} is a symbolic link; kjit never follows links in its "
                                       "cache. Fix: remove it",
                                       name)
                         : fmt::format("{} is not a regular file. Fix: remove it", name));
  }
  // Held until the connection is closed again (it is declared after the lock)
  // or handed to db_ with its WAL open: see StoreLock. Without it, opening and
  // moving aside would not be coordinated with other processes: a lock file this
  // user cannot open (left by another user's run) is refused like a planted link.
  const StoreLock shared(file_, LOCK_SH);
  if (!shared.held()) {
    struct stat lock {};
    const bool exists = ::lstat((file_ + ".lock").c_str(), &lock) == 0;
    throw Rejected(Rejected::Kind::Unusable, shared.why_not() + (exists ? ". Fix: remove it" : ""));
  }
  std::unique_ptr<Database> database;
  // Another process that found the same damage may move the file aside and create
  // a fresh one while this one opens it. Then SQLite fails to open the path
  // (CANTOPEN: for an instant there is no file), or opens the fresh file read-only
  // (it appeared between SQLite's read-write and read-only attempts), or the path
  // names another file after the open than the one opened before it (so which one
  // SQLite holds is unknown, and quarantine() must not trust the identity). Each
  // time: create the fresh file if needed and open again (a few times; after that
  // it is not this race). SQLite opens without following links too
  // (SQLITE_OPEN_NOFOLLOW for the file, O_NOFOLLOW for its -wal and -shm), and the
  // file is checked again after the open: the path must still name, without a
  // link, the regular file opened here.
  struct stat opened {
  }, after{};
  for (int attempt = 0; !database; ++attempt) {
    try {
      create_store_file(file_);
    } catch (const std::runtime_error& e) {
      throw Rejected(Rejected::Kind::Unusable, e.what());
    }
    if (::lstat(file_.c_str(), &opened) != 0) {  // moved aside this instant: again
      if (attempt >= 3)
        throw Rejected(Rejected::Kind::Unusable,
                       fmt::format("cannot open {}: {}", file_, std::strerror(errno)));
      continue;
    }
    if (S_ISLNK(opened.st_mode))
      throw Rejected(Rejected::Kind::Unusable,
                     fmt::format("{} is a symbolic link; kjit never follows links in its cache. "
                                 "Fix: remove it",
                                 file_));
    if (!S_ISREG(opened.st_mode))
      throw Rejected(Rejected::Kind::Unusable, file_ + " is not a regular file. Fix: remove it");
    try {
      database = std::make_unique<Database>(
          file_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW);
    } catch (const SqliteError& e) {
      if ((e.code() & 0xff) != SQLITE_CANTOPEN || attempt >= 3) throw;
      continue;
    }
    const bool has = ::lstat(file_.c_str(), &after) == 0 && S_ISREG(after.st_mode);
    const bool same = has && opened.st_dev == after.st_dev && opened.st_ino == after.st_ino;
    const bool spurious_read_only = database->read_only() && ::access(file_.c_str(), W_OK) == 0;
    if ((!same || spurious_read_only) && attempt < 3) database.reset();
  }
  file_device_ = after.st_dev;
  file_inode_ = after.st_ino;
  if (database->read_only())
    throw Rejected(Rejected::Kind::Unusable, "the file is read-only for this user");
  configure(*database);
  // Reading the header is where a file that is not a database fails (NOTADB),
  // and a truncated one (CORRUPT): both land in connect() as damaged.
  FileKind kind = classify(*database);
  if (kind == FileKind::Foreign)
    throw Rejected(Rejected::Kind::Damaged, "it is not a kjit cache (another application's file)");
  if (kind == FileKind::Invalid)
    throw Rejected(Rejected::Kind::Damaged,
                   fmt::format("its header is not one any kjit writes (schema version {}{})",
                               file_schema_version(*database),
                               file_schema_version(*database) == 0 ? " with tables" : ""));
  if (kind == FileKind::Newer)
    throw Rejected(Rejected::Kind::Unusable,
                   fmt::format("it was written by a newer kjit (schema {} > {}); left untouched",
                               file_schema_version(*database), schema_version()));
  // Before anything reads or migrates a table: a view or a trigger planted in
  // the file (or a table dropped from it) made every command hang or fail.
  if (kind == FileKind::Current || kind == FileKind::Older) {
    const std::string problem = schema_problem(*database, kind == FileKind::Current);
    if (!problem.empty())
      throw Rejected(Rejected::Kind::Damaged, "its tables are not kjit's: " + problem);
  }
  // WAL lets readers work while one process writes. The mode is stored in the
  // file, so only the first opener changes it; several may race here, which
  // the busy timeout settles.
  set_wal_mode(*database);
  database->exec("PRAGMA synchronous = NORMAL");
  if (kind != FileKind::Current) {
    // Judge again under the write lock: another process may have initialized
    // or migrated the file since.
    WriteTransaction write(*database);
    FileKind now_kind = classify(*database);
    if (now_kind == FileKind::Foreign || now_kind == FileKind::Invalid)
      throw Rejected(Rejected::Kind::Damaged,
                     "it is not a kjit cache (another application's file, or damaged)");
    if (now_kind == FileKind::Newer)
      throw Rejected(Rejected::Kind::Unusable, "it was written by a newer kjit; left untouched");
    std::string note;
    if (now_kind != FileKind::Current) {
      try {
        note = migrate(*database, now());
      } catch (const SqliteError& e) {
        // The header names a schema its tables are not (schema 2's tables under
        // version 1: "duplicate column name: mac"); the write rolls back.
        if ((e.code() & 0xff) != SQLITE_ERROR) throw;
        throw Rejected(Rejected::Kind::Damaged,
                       fmt::format("its tables are not those of the schema its header names "
                                   "(version {}): migrating it failed ({})",
                                   file_schema_version(*database), e.what()));
      }
      const std::string problem = schema_problem(*database, /*complete=*/true);
      if (!problem.empty())
        throw Rejected(Rejected::Kind::Damaged, "its tables are not kjit's: " + problem);
    }
    write.commit();
    if (!note.empty()) warn(note);
    // Another process initialized or migrated the file between this connection's
    // first look and its write lock: the connection may keep the schema it read
    // before (an empty file), and its first statement then failed with "no such
    // table: binaries" (a stress run of Concurrency.ManyProcessesFindTheSameDamageOnce).
    // A new connection reads the schema as it is now.
    if (now_kind == FileKind::Current) return false;
  }
  db_ = std::move(database);
  establish_trust(directory);
  return true;
}

void Store::establish_trust(const std::string& directory) {
  authenticator_.reset();
  distrust_ = directory_distrust(directory);
  // The file as opened (its identity was checked above), then its -wal and
  // -shm, which exist by now (WAL mode).
  for (const char* suffix : {"", "-wal", "-shm"}) {
    if (!distrust_.empty()) break;
    const std::string name = file_ + suffix;
    struct stat info {};
    if (::lstat(name.c_str(), &info) == 0) distrust_ = file_distrust(name, info);
  }
  if (distrust_.empty()) {
    try {
      authenticator_ = Authenticator::from_key_file(file_ + ".key");
    } catch (const std::runtime_error& e) {
      distrust_ = e.what();
    }
  }
  if (!distrust_.empty())
    warn("compiled kernels are not loaded from or stored in this cache (tunings still are): " +
         distrust_);
}

bool Store::replaced_underneath() const {
  if (file_inode_ == 0) return false;  // nothing opened yet
  struct stat info {};
  return ::lstat(file_.c_str(), &info) != 0 || info.st_dev != file_device_ ||
         info.st_ino != file_inode_;
}

void Store::connect() {
  for (int quarantined = 0, replaced = 0;;) {
    std::string damage;
    try {
      attach();
      return;
    } catch (const Rejected& e) {
      if (e.kind == Rejected::Kind::Unusable) {
        if (!options_.recover) throw CacheError(fmt::format("cannot use {}: {}", path_, e.what()));
        return disable(e.what());
      }
      damage = e.what();
    } catch (const SqliteError& e) {
      if (!e.is_corruption()) {
        // Another process that found the same damage moved the file aside while
        // this one was reading it, or moved aside the -wal and -shm that the
        // fresh file this one just opened had already made (SQLite then reports
        // I/O errors): attach to what the path names now, a few times at most.
        const bool io_error = (e.code() & 0xff) == SQLITE_IOERR;
        if (options_.recover && (replaced_underneath() || io_error) && replaced++ < 3) continue;
        if (!options_.recover) throw;
        return disable(e.what());
      }
      damage = e.what();
    }
    if (!options_.recover)
      throw CacheError(fmt::format("{} is damaged or not a kjit cache: {}", path_, damage));
    if (quarantined++ > 0) return disable("a fresh file was damaged again: " + damage);
    const std::string aside = quarantine(damage);
    if (!aside.empty()) damaged_on_open_ = fmt::format("{}; moved aside to {}", damage, aside);
  }
}

std::string Store::quarantine(const std::string& why) {
  // Under the lock file's exclusive lock, so that processes that found the same
  // damage move it aside once, none moves aside the fresh file another just
  // created, and no connection is being opened meanwhile (see StoreLock).
  const StoreLock exclusive(file_, LOCK_EX);
  db_.reset();
  authenticator_.reset();
  struct stat info {};
  bool same_file = ::lstat(file_.c_str(), &info) == 0 && info.st_dev == file_device_ &&
                   info.st_ino == file_inode_;
  std::string moved_to;
  if (same_file) {
    std::string aside = file_ + ".corrupt-" + timestamp_now();
    for (int n = 2; path_exists(aside); ++n)
      aside = fmt::format("{}.corrupt-{}-{}", file_, timestamp_now(), n);
    // The WAL belongs to the damaged file: it must never be replayed into the fresh
    // one, so it moves with it (the aside copy stays complete). It moves first,
    // while the damaged file still holds the path: once that is gone, another
    // process may create the fresh file and its own -wal and -shm at once, and
    // moving those would pull them from under its open connection (SQLite then
    // fails with I/O errors, and that process loses its cache).
    std::vector<const char*> moved;
    for (const char* suffix : {"-wal", "-shm"}) {
      const std::string from = file_ + suffix;
      if (path_exists(from) && ::rename(from.c_str(), (aside + suffix).c_str()) == 0)
        moved.push_back(suffix);
    }
    if (::rename(file_.c_str(), aside.c_str()) == 0) {
      warn(fmt::format("{}; moved it aside to {} and started a fresh cache", why, aside));
      moved_to = aside;
    } else {
      const int error = errno;
      for (const char* suffix : moved)  // the damaged file stays: so does its WAL
        ::rename((aside + suffix).c_str(), (file_ + suffix).c_str());
      warn(fmt::format("{}; could not move it aside: {}", why, std::strerror(error)));
    }
  }
  file_device_ = file_inode_ = 0;
  return moved_to;
}

void Store::on_failure(const char* what, const std::exception& error) {
  const SqliteError* sqlite_error = dynamic_cast<const SqliteError*>(&error);
  if (sqlite_error != nullptr && sqlite_error->is_corruption() && options_.recover &&
      !quarantined_once_) {
    quarantined_once_ = true;
    quarantine(fmt::format("{} found the file damaged ({})", what, error.what()));
    try {
      attach();
    } catch (const std::exception& e) {
      disable(std::string("could not start a fresh cache: ") + e.what());
    }
    return;
  }
  warn(fmt::format("{} failed: {}", what, error.what()));
}

template <class T, class Body>
T Store::guarded(const char* what, T fallback, Body&& body) {
  const Lock lock(*this);
  if (!db_) return fallback;
  try {
    return body(*db_);
  } catch (const std::exception& e) {
    // Whatever went wrong, the host program carries on without the cache.
    on_failure(what, e);
  }
  return fallback;
}

// ---- binaries ----

std::optional<BinaryRecord> Store::find_binary(const std::string& key) {
  return guarded<std::optional<BinaryRecord>>(
      "a lookup", std::nullopt, [&](Database& db) -> std::optional<BinaryRecord> {
        if (!authenticator_) return std::nullopt;  // not trusted: warned once when opened
        BinaryRecord record;
        bool damaged = false, forged = false;
        {
          // One cached statement; the cubin is copied once, straight from SQLite's page.
          Statement& query = db.cached("SELECT " KJIT_BINARY_COLUMNS
                                       " FROM " KJIT_BINARIES_WITH_USAGE " WHERE b.key = ?1");
          StatementReset rewind(query);
          query.bind(1, key);
          if (!query.step()) return std::nullopt;
          read_binary(query, record, /*with_content=*/true);
          const std::string_view cubin = query.column_blob(kCubinColumn);
          damaged = checksum(cubin) != record.checksum;
          forged = !damaged && !authenticator_->verify(key, cubin, record.mac);
        }
        if (damaged || forged) {
          WriteTransaction write(db);
          db.cached("DELETE FROM binaries WHERE key = ?1 AND checksum = ?2 AND mac = ?3")
              .bind(1, key)
              .bind(2, record.checksum)
              .bind(3, record.mac)
              .run();
          write.commit();
          warn(fmt::format(
              "binary {} {}; dropped it (it will be recompiled)", key,
              damaged ? "failed its checksum"
                      : "failed authentication (this user's kjit did not store it: it was planted, "
                        "copied from elsewhere, or its cubin swapped)"));
          return std::nullopt;
        }
        record.hits += 1;
        record.last_used = now();
        pending_hits_.push_back(key);
        if (pending_hits_.size() >= kMaxPendingHits) flush_locked();
        return record;
      });
}

PutOutcome Store::put_binary(const BinaryRecord& record) {
  return guarded<PutOutcome>("storing a binary", PutOutcome::Rejected, [&](Database& db) {
    if (!authenticator_) return PutOutcome::Rejected;  // not trusted: warned once when opened
    if (const std::string why = why_invalid(record); !why.empty()) {
      warn("refused a binary: " + why);
      return PutOutcome::Rejected;
    }
    const std::string_view cubin(record.cubin.data(), record.cubin.size());
    const std::string sum = checksum(cubin);
    const std::string mac = authenticator_->mac(record.key, cubin);
    int64_t time = now();
    stored_content_ = true;
    WriteTransaction write(db);
    flush_locked();
    bool existed = binary_exists(db, record.key);
    insert_binary(db, record, sum, mac, time, time, 0);
    evict_locked(record.key);
    write.commit();
    return existed ? PutOutcome::Replaced : PutOutcome::Inserted;
  });
}

void Store::flush() {
  guarded<bool>("writing hit counts", false, [&](Database&) {
    flush_locked();
    return true;
  });
}

// Writes the batched hits. Inside a caller's transaction it joins it;
// otherwise it opens its own.
void Store::flush_locked() {
  if (pending_hits_.empty() || !db_) return;
  std::vector<std::string> keys;
  keys.swap(pending_hits_);
  bool own = sqlite3_get_autocommit(db_->handle()) != 0;
  std::optional<WriteTransaction> write;
  if (own) write.emplace(*db_);
  int64_t time = now();
  Statement& touch = db_->cached(
      "UPDATE binary_usage SET hits = hits + 1, last_used = max(last_used, ?2) WHERE key = ?1");
  for (const std::string& key : keys) touch.bind(1, key).bind(2, time).run();
  if (write) write->commit();
}

int64_t Store::evict() {
  const Lock lock(*this);
  WriteTransaction write(db());
  flush_locked();
  int64_t removed = evict_locked("");
  write.commit();
  return removed;
}

// Inside a write transaction: deletes least-recently-used binaries (never
// `keep_key`, the one just stored) until their bytes are at most 90% of
// max_bytes, so that eviction runs in bursts rather than on every store.
int64_t Store::evict_locked(const std::string& keep_key) {
  Database& db = *db_;
  // A negative `bytes` (written by hand: kjit never does) counts as 0, not as
  // room: INT64_MIN in one row made the total negative and stopped eviction.
  // Sums stay doubles (total()), which no row's value can overflow.
  Statement& total_query = db.cached("SELECT total(max(bytes, 0)) FROM binaries");
  double total = 0;
  {
    StatementReset rewind(total_query);
    if (total_query.step()) total = total_query.column_double(0);
  }
  if (total <= static_cast<double>(options_.max_bytes)) return 0;
  const double target = static_cast<double>(options_.max_bytes / 10 * 9);
  // By rowid: a key stored as a blob (by hand) matches no text key.
  std::vector<int64_t> victims;
  {
    Statement& oldest =
        db.cached("SELECT b.rowid, max(b.bytes, 0) FROM " KJIT_BINARIES_WITH_USAGE
                  " WHERE b.key != ?1 ORDER BY coalesce(u.last_used, b.created), b.created, b.key");
    StatementReset rewind(oldest);
    oldest.bind(1, keep_key);
    while (total > target && oldest.step()) {
      victims.push_back(oldest.column_int(0));
      total -= oldest.column_double(1);
    }
  }
  Statement& drop = db.cached("DELETE FROM binaries WHERE rowid = ?1");
  for (int64_t rowid : victims) drop.bind(1, rowid).run();
  return static_cast<int64_t>(victims.size());
}

std::vector<BinaryRecord> Store::binaries() {
  const Lock lock(*this);
  Database& database = db();
  flush_locked();
  std::vector<BinaryRecord> out;
  Statement query = database.prepare("SELECT " KJIT_BINARY_META_COLUMNS
                                     " FROM " KJIT_BINARIES_WITH_USAGE " ORDER BY 12 DESC, 1");
  while (query.step()) read_binary(query, out.emplace_back(), /*with_content=*/false);
  return out;
}

std::optional<BinaryRecord> Store::describe_binary(const std::string& key_prefix) {
  const Lock lock(*this);
  Database& database = db();
  flush_locked();
  // A prefix match without LIKE, so no character of the input is a wildcard.
  Statement query = database.prepare("SELECT " KJIT_BINARY_COLUMNS " FROM " KJIT_BINARIES_WITH_USAGE
                                     " WHERE substr(b.key, 1, length(?1)) = ?1 "
                                     "ORDER BY b.key LIMIT 2");
  query.bind(1, key_prefix);
  if (!query.step()) return std::nullopt;
  BinaryRecord record;
  read_binary(query, record, /*with_content=*/true);
  if (record.key != key_prefix && query.step())
    throw UserError(fmt::format("'{}' matches several binaries", key_prefix),
                    "give more of the key (kjit cache ls lists them)");
  return record;
}

// ---- devices ----

void Store::record_device(const DeviceRecord& device) {
  guarded<bool>("recording a device", false, [&](Database& db) {
    int64_t time = now();
    DeviceRecord seen = device;
    seen.first_seen = seen.last_seen = time;  // the store sets them
    if (const std::string why = why_invalid(seen, time); !why.empty()) {
      warn("refused a device: " + why);
      return false;
    }
    WriteTransaction write(db);
    upsert_device(db, device, time, time);
    write.commit();
    return true;
  });
}

std::vector<DeviceRecord> Store::devices() {
  const Lock lock(*this);
  std::vector<DeviceRecord> out;
  Statement query = db().prepare("SELECT " KJIT_DEVICE_COLUMNS " FROM devices ORDER BY model");
  while (query.step()) out.push_back(read_device(query));
  return out;
}

// ---- tunings and trials ----

std::optional<TuningRecord> Store::find_tuning(const std::string& gpu_model,
                                               const std::string& problem) {
  return guarded<std::optional<TuningRecord>>(
      "a tuning lookup", std::nullopt, [&](Database& db) -> std::optional<TuningRecord> {
        Statement& query = db.cached("SELECT " KJIT_TUNING_COLUMNS
                                     " FROM tunings WHERE gpu_model = ?1 AND problem = ?2");
        StatementReset rewind(query);
        query.bind(1, gpu_model).bind(2, problem);
        if (!query.step()) return std::nullopt;
        TuningRecord tuning = read_tuning(query);
        // Rows are checked when stored, but a file can be edited: a row no store
        // would take is not used.
        if (const std::string why = why_invalid(tuning, now()); !why.empty()) {
          warn(
              fmt::format("ignored the stored tuning of {}: {} (`kjit cache verify --fix` "
                          "removes it)",
                          problem, why));
          return std::nullopt;
        }
        return tuning;
      });
}

PutOutcome Store::put_tuning(const TuningRecord& tuning) {
  return guarded<PutOutcome>("storing a tuning", PutOutcome::Rejected, [&](Database& db) {
    if (const std::string why = why_invalid(tuning, now()); !why.empty()) {
      warn("refused a tuning: " + why);
      return PutOutcome::Rejected;
    }
    stored_content_ = true;
    WriteTransaction write(db);
    PutOutcome outcome = upsert_tuning(db, tuning, now());
    write.commit();
    return outcome;
  });
}

std::vector<TuningRecord> Store::tunings(const std::string& gpu_model) {
  const Lock lock(*this);
  std::vector<TuningRecord> out;
  Statement query = db().prepare("SELECT " KJIT_TUNING_COLUMNS
                                 " FROM tunings WHERE ?1 = '' OR gpu_model = ?1 "
                                 "ORDER BY gpu_model, problem");
  query.bind(1, gpu_model);
  const int64_t time = now();
  while (query.step())
    if (TuningRecord tuning = read_tuning(query); why_invalid(tuning, time).empty())
      out.push_back(std::move(tuning));  // what find_tuning would use (verify names the rest)
  return out;
}

PutOutcome Store::put_trial(const TrialRecord& trial) {
  return guarded<PutOutcome>("storing a trial", PutOutcome::Rejected, [&](Database& db) {
    if (const std::string why = why_invalid(trial, now()); !why.empty()) {
      warn("refused a trial: " + why);
      return PutOutcome::Rejected;
    }
    stored_content_ = true;
    WriteTransaction write(db);
    PutOutcome outcome = upsert_trial(db, trial, now());
    write.commit();
    return outcome;
  });
}

std::vector<TrialRecord> Store::trials_for(const std::string& gpu_model,
                                           const std::string& problem) {
  return guarded<std::vector<TrialRecord>>("reading trials", {}, [&](Database& db) {
    std::vector<TrialRecord> out;
    // An empty problem lists every trial of the GPU model (the model's refit).
    Statement& query = db.cached("SELECT " KJIT_TRIAL_COLUMNS
                                 " FROM trials WHERE gpu_model = ?1 AND (?2 = '' OR problem = ?2) "
                                 "ORDER BY problem, error != '', median_ms, config");
    StatementReset rewind(query);
    query.bind(1, gpu_model).bind(2, problem);
    const int64_t time = now();
    while (query.step())
      if (TrialRecord trial = read_trial(query); why_invalid(trial, time).empty())
        out.push_back(std::move(trial));  // an edited row is not learned from
    return out;
  });
}

}  // namespace kjit::cache
