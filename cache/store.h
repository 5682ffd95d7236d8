// The store: one SQLite file per user that keeps compiled cubins, tuning
// results, every tuning trial and the GPUs seen, shared safely by every process
// on the machine (WAL, a busy timeout, BEGIN IMMEDIATE for writes).
//
// The runtime's lookup sequence (runtime/runtime.cpp):
//   key = binary_key(source, options, arch, nvrtc_version(), kGeneratorVersion,
//                    codegen_environment());
//   in-process map[key] → hit: done
//   store->find_binary(key) → hit: cuModuleLoadData(record->cubin), map[key] = ...
//   miss: nvrtc_compile(...) → store->put_binary(record) → map[key] = ...
//
// Trust: compiled code is loaded only from a store that no other user could
// have written (its directory, every directory above it and its files belong to
// this user, or root above, and are writable by nobody else), and only when
// the row's MAC under this user's secret key (kjit.db.key, 0600) matches its
// key and cubin. Otherwise the store warns once, with the fix, and serves
// tunings only. See docs/cache.md, "Trust model".
//
// Faults never reach the host program: a corrupt or foreign file is moved aside
// as "<name>.corrupt-<timestamp>" with a warning and a fresh one is created; an
// unusable location (read-only directory, a newer kjit's file) disables the
// store with a warning. A disabled store answers every lookup with a miss and
// drops every write, so callers never need a null check. Lookups and writes on
// the runtime's path (find_*, put_*, trials_for, record_device, flush) warn and
// carry on when SQLite fails; listings (binaries, devices, tunings,
// describe_binary) and the administrative calls (stats, verify, export...)
// throw CacheError, since a person asked for them.
//
// Thread-safe: one connection per Store behind a mutex. Not fork-safe: open a
// Store after fork(), never use the parent's in the child.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kjit/cache/records.h"

namespace kjit::cache {

class Database;
class SqliteError;
namespace detail {
class Authenticator;
}

// Name of the file inside the cache directory.
inline constexpr const char* kCacheFileName = "kjit.db";
// KJIT_CACHE_MAX_MB when unset: 1 GiB of binaries.
inline constexpr int64_t kDefaultMaxBytes = int64_t{1} << 30;

struct StoreOptions {
  // Least-recently-used binaries are evicted when their bytes exceed this
  // (down to 90% of it). Tunings, trials and devices are never evicted.
  int64_t max_bytes = kDefaultMaxBytes;
  // A damaged or foreign file: true moves it aside and starts fresh (the user's
  // cache); false throws CacheError and leaves it alone (a file the user named).
  bool recover = true;
  // Unix seconds; tests replace it.
  std::function<int64_t()> clock;
};

struct CacheStats {
  std::string path;
  int schema_version = 0;
  int64_t file_bytes = 0;  // the database file plus its WAL
  int64_t free_bytes = 0;  // free pages, returned by vacuum
  int64_t binaries = 0;
  int64_t binary_bytes = 0;  // what eviction counts
  int64_t hits = 0;
  int64_t tunings = 0;
  int64_t trials = 0;
  int64_t devices = 0;
  int64_t max_bytes = 0;
};

struct VerifyReport {
  std::vector<std::string> integrity;  // PRAGMA integrity_check: {"ok"} when sound
  // Why the store's binaries are not trusted (see Store::binaries_distrust());
  // "" when they are. MACs are then not checked.
  std::string untrusted;
  int64_t binaries_checked = 0;
  std::vector<std::string> bad_binaries;     // keys whose checksum failed
  std::vector<std::string> unauthenticated;  // keys whose MAC failed (planted or swapped)
  // Tunings and trials no store would take (edited by hand: an infinite median, a
  // negative run count): "tuning|trial GPU PROBLEM CONFIG: why". They are not used.
  std::vector<std::string> bad_rows;
  int64_t removed = 0;  // bad binaries and rows deleted (verify(true))
  // verify(true) of a damaged file: moved aside (quarantine's warning names where)
  // and a fresh, empty store started in its place.
  bool replaced_damaged = false;
  // Opening found the file damaged (its tables not kjit's, say) and moved it
  // aside: why, and where. The rest of the report is the fresh store's.
  std::string damaged_on_open;
  // Sound and trusted, and every bad binary (if any) removed.
  bool ok() const {
    return integrity.size() == 1 && integrity[0] == "ok" && untrusted.empty() &&
           damaged_on_open.empty() &&
           static_cast<int64_t>(bad_binaries.size() + unauthenticated.size() + bad_rows.size()) ==
               removed;
  }
};

// What export, import and merge did, per table.
struct TableCounts {
  int64_t inserted = 0;
  int64_t replaced =
      0;             // the incoming row was better measured (tunings, trials) or newer (devices)
  int64_t kept = 0;  // the existing row stayed
  // Invalid incoming rows: a binary whose checksum or MAC fails, a row that fails
  // the store's checks (an impossible measurement, an empty key, a future time).
  int64_t rejected = 0;
  int64_t skipped = 0;  // binaries left out: not asked for (no --trust-binaries) or not trusted
  void count(PutOutcome outcome);
};
struct TransferReport {
  TableCounts devices, binaries, tunings, trials;
};

struct ClearReport {
  int64_t binaries = 0, tunings = 0, trials = 0, devices = 0;
  // The file was damaged (its rows could not be read to delete): moved aside
  // (quarantine's warning names where) and a fresh, empty store started.
  bool replaced_damaged = false;
};

class Store {
 public:
  // The user's store: KJIT_CACHE=off (or 0/false/no) gives a disabled store;
  // otherwise <dir>/kjit.db with dir = KJIT_CACHE_DIR, else $XDG_CACHE_HOME/kjit,
  // else $HOME/.cache/kjit. KJIT_CACHE_MAX_MB (MiB, may be fractional) sets
  // max_bytes. Never throws: every fault gives a warning and a working (maybe
  // disabled) store.
  static std::unique_ptr<Store> open_default();
  // Opens or creates the store at `path`, creating missing directories (0700)
  // and the file (0600). With options.recover it never throws for a bad file;
  // without, it throws CacheError.
  static std::unique_ptr<Store> open(const std::string& path, StoreOptions options = {});
  // A store that holds nothing and stores nothing; `reason` says why.
  static std::unique_ptr<Store> disabled(const std::string& reason);

  // The path open_default() would use, or "" (with `reason`) when there is none
  // or KJIT_CACHE is off.
  static std::string default_path(std::string* reason = nullptr);
  // StoreOptions with max_bytes from KJIT_CACHE_MAX_MB.
  static StoreOptions options_from_environment();

  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  bool enabled() const;
  const std::string& path() const { return path_; }
  // Why the store is disabled ("" when enabled).
  std::string disabled_reason() const;
  // Every warning this store issued (each is also printed to stderr, once per
  // process).
  std::vector<std::string> warnings() const;
  // Whether binaries are loaded from and stored in this store: its files could
  // have been written by this user only, and its secret key is usable.
  bool binaries_trusted() const;
  // Why not, with the fix ("" when trusted).
  std::string binaries_distrust() const;

  // ---- binaries ----
  // The binary stored under `key`, its checksum and MAC verified; nullopt on a
  // miss, and always when binaries are not trusted. A mismatch deletes the row,
  // warns and returns nullopt: the caller recompiles. A hit counts toward hits
  // and last_used (written in batches).
  std::optional<BinaryRecord> find_binary(const std::string& key);
  // Stores `record` (checksum, MAC, created and last_used are set here), then
  // evicts least-recently-used binaries above max_bytes. Inserted, Replaced, or
  // Rejected (a failed write, a disabled or untrusted store; warned once).
  PutOutcome put_binary(const BinaryRecord& record);
  // For `kjit cache show`: the binary whose key is or starts with `key_prefix`
  // (cubin included, unverified, hits not counted). Throws UserError when the
  // prefix matches several keys.
  std::optional<BinaryRecord> describe_binary(const std::string& key_prefix);
  // Metadata of every binary, most recently used first (cubin, source and log
  // left empty).
  std::vector<BinaryRecord> binaries();
  // Writes the pending hit counts now (also done by writes and the destructor).
  void flush();
  // Evicts least-recently-used binaries above max_bytes; returns how many.
  int64_t evict();

  // ---- devices ----
  // Inserts or updates a GPU (first_seen/last_seen are set here).
  void record_device(const DeviceRecord& device);
  std::vector<DeviceRecord> devices();

  // ---- tunings and trials ----
  std::optional<TuningRecord> find_tuning(const std::string& gpu_model, const std::string& problem);
  // Keeps whichever of `tuning` and the stored row is better_measured().
  PutOutcome put_tuning(const TuningRecord& tuning);
  // Every tuning, or those of one GPU model.
  std::vector<TuningRecord> tunings(const std::string& gpu_model = "");
  // Same policy as put_tuning, per (gpu_model, problem, config); but a failed trial
  // (no measurement) replaces whatever is stored, the newer verdict, and removes the
  // problem's tuning if that names the same config.
  PutOutcome put_trial(const TrialRecord& trial);
  // Measured trials fastest first, then rejected ones; an empty `problem` gives every
  // trial of the GPU model (grouped by problem).
  std::vector<TrialRecord> trials_for(const std::string& gpu_model, const std::string& problem);

  // ---- administration (throw CacheError; UserError for bad arguments) ----
  CacheStats stats();
  // PRAGMA integrity_check, whether the store is trusted, every binary's
  // checksum and (when trusted) MAC; `remove_bad` deletes the binaries that fail.
  VerifyReport verify(bool remove_bad = false);
  // Writes a new kjit file at `path` (which must not exist) with everything, or
  // with one GPU model's device, tunings, trials and the binaries for its
  // architecture. Only binaries whose MAC verifies leave, without a MAC (the
  // receiver imports them with trust_binaries).
  TransferReport export_to(const std::string& path, const std::string& gpu_model = "");
  // Copies another kjit file into this store: tunings and trials by
  // better_measured(), devices by recency. Binaries only with `trust_binaries`
  // (otherwise counted as skipped): those whose checksum fails are rejected,
  // present ones kept, the others authenticated with this store's key. Throws
  // CacheError when trust_binaries is asked of a store that is not trusted.
  TransferReport import_from(const std::string& path, bool trust_binaries = false);
  // The reverse: copies this store into the kjit file at `path` (created when
  // missing; never moved aside), with the same policy; binaries (only this
  // store's authentic ones) are authenticated with that file's key.
  TransferReport merge_into(const std::string& path, bool trust_binaries = false);
  // Deletes binaries, and unless `binaries_only` tunings, trials and devices too.
  ClearReport clear(bool binaries_only = false);
  // Checkpoints the WAL and rebuilds the file; returns the bytes it gave back.
  int64_t vacuum();

 private:
  Store(std::string path, StoreOptions options);
  class Rejected;  // a file the store will not use (see store.cpp)

  void connect();
  // Opens the file (attach_once() until it attaches: false asks to open again).
  void attach();
  bool attach_once();
  // After attach() opened the file: whether its binaries can be trusted, and
  // the key that authenticates them.
  void establish_trust(const std::string& directory);
  void set_wal_mode(Database& database);
  // Moves the damaged file aside; returns where ("" when it was not moved: another
  // process did, or the rename failed).
  std::string quarantine(const std::string& why);
  // An administrative command's answer to a damaged file (clear, verify --fix):
  // moved aside, and a fresh store attached. Rethrows what is not damage.
  void replace_damaged(const SqliteError& error, const char* what);
  void replace_damaged(const std::string& why);
  // Export and merge copy this store: CacheError when its file is damaged, or
  // was when opened (an empty copy would pass for a backup). `verb`: "exported".
  void refuse_damaged_source(const char* verb);
  // Whether the path no longer names the file attach() opened (another process
  // moved it aside, and perhaps created a fresh one): errors from the old file are
  // then not this cache's, and attaching again is the cure.
  bool replaced_underneath() const;
  // mutex_, held for a scope. The warnings raised meanwhile (warn) go to the log
  // once it is released: a log callback may call kjit, and this store, again (it
  // deadlocked on mutex_ when a stored binary failed its checksum).
  class Lock {
   public:
    explicit Lock(const Store& store) : store_(store), lock_(store.mutex_) {}
    ~Lock();
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    const Store& store_;
    std::unique_lock<std::mutex> lock_;
  };
  void disable(const std::string& reason);
  // Keeps `message` in warnings() and queues it for the log (mutex_ held: under a
  // Lock, which sends it).
  void warn(const std::string& message);
  int64_t now() const;
  Database& db();  // throws CacheError when disabled
  void flush_locked();
  int64_t evict_locked(const std::string& keep_key);
  void on_failure(const char* what, const std::exception& error);
  template <class T, class Body>
  T guarded(const char* what, T fallback, Body&& body);

  std::string path_;
  // path_ with its directory resolved (realpath): the file actually opened, so
  // that no link in the path changes what is opened from one call to the next.
  std::string file_;
  StoreOptions options_;
  mutable std::mutex mutex_;
  std::unique_ptr<Database> db_;
  std::string disabled_reason_;
  std::vector<std::string> warnings_;
  mutable std::vector<std::string> unsent_;  // warn()'s, for the log when mutex_ is released
  std::vector<std::string> pending_hits_;    // keys found since the last flush
  // Null when binaries are not trusted; distrust_ says why.
  std::unique_ptr<detail::Authenticator> authenticator_;
  std::string distrust_;
  bool quarantined_once_ = false;
  // Opening found the file damaged and moved it aside (why, and where): this
  // Store holds a fresh, empty file. verify reports it, and export and merge
  // refuse, since an empty copy would pass for a backup.
  std::string damaged_on_open_;
  bool stored_content_ = false;  // binaries, tunings or trials written: checkpoint on close
  // The file's identity when opened: quarantine() moves it aside only if the
  // path still names that file (another process may already have replaced it).
  uint64_t file_device_ = 0, file_inode_ = 0;
};

}  // namespace kjit::cache
