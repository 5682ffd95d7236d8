// Shared by store.cpp and admin.cpp; not part of the cache's interface.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kjit/cache/records.h"
#include "kjit/cache/sqlite.h"

namespace kjit::cache::detail {

// How long a writer waits for another process's write to finish before the
// call fails (and, on the runtime's path, is dropped with a warning).
inline constexpr int kBusyTimeoutMs = 10000;
// The WAL is folded into the file and truncated when it reaches this many
// pages (512 KiB at 4 KiB pages): opening reads the whole WAL.
inline constexpr int kWalCheckpointPages = 128;
// Hits are written in batches of at most this many (see Store::find_binary).
inline constexpr size_t kMaxPendingHits = 64;

// The store's lock file (FILE.lock), held with flock() (a lock per open file,
// apart from SQLite's POSIX locks on the database). quarantine() moves a damaged
// file aside under LOCK_EX; a connection is opened, and one that may checkpoint
// and delete the WAL is closed, under LOCK_SH. The reason: SQLite finds a
// database's WAL and WAL index by name ("kjit.db-wal"), not by the file it
// opened. A connection opened on the damaged file just before it was moved
// aside, whose first read came after a fresh file and its WAL had taken the
// name, read the fresh file's WAL as its own: it saw a valid cache and wrote
// into that WAL, and its checkpoint copied the WAL into the damaged file and
// emptied it, taking every other process's commits with it
// (Concurrency.ManyProcessesFindTheSameDamageOnce lost a stored binary about once
// in 3,000 rounds under load). Under the shared lock the name cannot change
// hands between the open and the last use of a name. The lock is opened without
// following a link and used only if it is a regular file (a link planted there
// created a file wherever it pointed); held() says whether it was taken.
class StoreLock {
 public:
  StoreLock(const std::string& file, int operation);  // operation: LOCK_SH or LOCK_EX
  ~StoreLock();
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;
  bool held() const { return fd_ >= 0; }
  const std::string& why_not() const { return why_not_; }  // when not held

 private:
  int fd_ = -1;
  std::string why_not_;
};

// Column lists, in the order the read_* functions expect. The "meta" form
// leaves cubin, source and log empty for listings.
// Binaries are read FROM KJIT_BINARIES_WITH_USAGE (b: binaries, u: binary_usage).
#define KJIT_BINARIES_WITH_USAGE "binaries b LEFT JOIN binary_usage u ON u.key = b.key"
// The MAC is read only with the content: a listing has no use for it.
#define KJIT_BINARY_COLUMNS                                                               \
  "b.key, b.cubin, b.checksum, b.arch, b.nvrtc_version, b.generator_version, b.options, " \
  "b.ptxas_stats, b.nvrtc_log, b.source, b.created, coalesce(u.last_used, b.created), "   \
  "coalesce(u.hits, 0), b.bytes, b.mac"
#define KJIT_BINARY_META_COLUMNS                                                              \
  "b.key, x'', b.checksum, b.arch, b.nvrtc_version, b.generator_version, b.options, "         \
  "b.ptxas_stats, '', '', b.created, coalesce(u.last_used, b.created), coalesce(u.hits, 0), " \
  "b.bytes, ''"
inline constexpr int kCubinColumn = 1;
#define KJIT_TUNING_COLUMNS \
  "gpu_model, problem, config, median_ms, spread, runs, tuner_version, created"
#define KJIT_TRIAL_COLUMNS \
  "gpu_model, problem, config, median_ms, spread, runs, error, tuner_version, created"
inline constexpr int kTuningColumns = 8, kTrialColumns = 9;
#define KJIT_DEVICE_COLUMNS \
  "model, name, cc_major, cc_minor, sm_count, driver, memory_bytes, first_seen, last_seen"

// Why a row may not enter a store ("" when it may): one set of rules for every
// way in, put_* and record_device as much as the rows an import, export or merge
// copies. A file from elsewhere is data to check: a tuning measured at 1e-9 ms
// over a million runs replaced the user's for good, a device seen in the year
// 292277026596 stayed "newest" for ever, a megabyte of problem text was kept.
// `now` bounds timestamps (a day ahead is allowed: clocks differ between machines).
std::string why_invalid(const TuningRecord& tuning, int64_t now);
std::string why_invalid(const TrialRecord& trial, int64_t now);
std::string why_invalid(const DeviceRecord& device, int64_t now);
std::string why_invalid(const BinaryRecord& binary);

void read_binary(const Statement& row, BinaryRecord& record, bool with_content);
TuningRecord read_tuning(const Statement& row);
TrialRecord read_trial(const Statement& row);
DeviceRecord read_device(const Statement& row);

// XXH3-64 of the bytes, 16 hex digits.
std::string checksum(std::string_view bytes);
std::string encode_options(const std::vector<std::string>& options);
std::vector<std::string> decode_options(const std::string& text);

// Busy timeout and the defensive settings every connection gets.
void configure(Database& db);

// Writes `record` with the given checksum and MAC (record.checksum and
// record.mac are not read).
void insert_binary(Database& db, const BinaryRecord& record, const std::string& checksum,
                   const std::string& mac, int64_t created, int64_t last_used, int64_t hits);
bool binary_exists(Database& db, const std::string& key);
// Keep-the-better-measured upserts (see better_measured()).
PutOutcome upsert_tuning(Database& db, const TuningRecord& tuning, int64_t now);
PutOutcome upsert_trial(Database& db, const TrialRecord& trial, int64_t now);
// Keeps the most recently seen description of a device.
PutOutcome upsert_device(Database& db, const DeviceRecord& device, int64_t first_seen,
                         int64_t last_seen);

bool path_exists(const std::string& path);

}  // namespace kjit::cache::detail
