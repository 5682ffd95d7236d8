// The store's rows: reading and writing each table's records, the conflict
// policy (better_measured) and the settings every connection gets. Shared by
// store.cpp and admin.cpp through store_internal.h.
#include <sys/stat.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "kjit/cache/records.h"
#include "kjit/cache/sqlite.h"
#include "kjit/cache/store.h"
#include "kjit/cache/store_internal.h"
#include "kjit/support/error.h"
#include "kjit/support/hash.h"
#include "kjit/support/json.h"
#include "kjit/support/key_values.h"

namespace kjit::cache {

const char* to_string(PutOutcome outcome) {
  switch (outcome) {
    case PutOutcome::Inserted:
      return "inserted";
    case PutOutcome::Replaced:
      return "replaced";
    case PutOutcome::Kept:
      return "kept";
    case PutOutcome::Rejected:
      return "rejected";
  }
  return "?";
}

namespace {

bool valid(const Measurement& m) {
  return m.runs >= 1 && std::isfinite(m.median_ms) && m.median_ms > 0 && std::isfinite(m.spread) &&
         m.spread >= 0;
}

bool trusted(const Measurement& m) {
  return m.runs >= kTrustedRuns && m.spread <= kTrustedSpread;
}

}  // namespace

bool better_measured(const Measurement& candidate, const Measurement& incumbent) {
  if (valid(candidate) != valid(incumbent)) return valid(candidate);
  if (!valid(candidate)) return false;
  if (trusted(candidate) != trusted(incumbent)) return trusted(candidate);
  double noise = std::max(candidate.spread, incumbent.spread);
  double faster = std::min(candidate.median_ms, incumbent.median_ms);
  if (std::abs(candidate.median_ms - incumbent.median_ms) > noise * faster)
    return candidate.median_ms < incumbent.median_ms;
  if (candidate.runs != incumbent.runs) return candidate.runs > incumbent.runs;
  return candidate.spread < incumbent.spread;
}

void TableCounts::count(PutOutcome outcome) {
  switch (outcome) {
    case PutOutcome::Inserted:
      ++inserted;
      break;
    case PutOutcome::Replaced:
      ++replaced;
      break;
    case PutOutcome::Kept:
      ++kept;
      break;
    case PutOutcome::Rejected:
      ++rejected;
      break;
  }
}

namespace detail {

namespace {

// Bounds on what a row may hold, far beyond anything kjit writes.
constexpr size_t kMaxKeyBytes = 16 * 1024;    // GPU model, problem, binary key
constexpr size_t kMaxConfigBytes = 2 * 1024;  // ~100 in practice; each is parsed below
constexpr size_t kMaxLabelBytes = 256;        // tuner version, device name, driver
constexpr size_t kMaxErrorBytes = 64 * 1024;  // why a trial failed
// A kernel launch takes microseconds at least; a median below 100 ns is not one.
constexpr double kMinMedianMs = 1e-4;
constexpr double kMaxMedianMs = 1e7;  // about 3 hours
constexpr double kMaxSpread = 100;    // relative
constexpr int64_t kMaxRuns = 1000000000;
constexpr int64_t kClockSlack = 24 * 3600;

std::string text_problem(const char* what, const std::string& text, size_t limit, bool required) {
  if (required && text.empty()) return fmt::format("no {}", what);
  if (text.size() > limit)
    return fmt::format("a {} of {} bytes (at most {})", what, text.size(), limit);
  return "";
}

std::string time_problem(const char* what, int64_t time, int64_t now) {
  if (time < 0 || time > now + kClockSlack)
    return fmt::format("{} {} is not a past time", what, time);
  return "";
}

// A measurement a tuner could have taken.
std::string measurement_problem(const Measurement& m) {
  if (!(m.runs >= 1 && m.runs <= kMaxRuns)) return fmt::format("{} runs", m.runs);
  if (!(m.median_ms >= kMinMedianMs && m.median_ms <= kMaxMedianMs))
    return fmt::format("a median of {} ms", m.median_ms);
  if (!(m.spread >= 0 && m.spread <= kMaxSpread)) return fmt::format("a spread of {}", m.spread);
  return "";
}

// The columns tunings and trials share. A config is a "key=value,..." list in
// every family; the family checks its keys when it uses one.
std::string measured_row_problem(const std::string& gpu_model, const std::string& problem,
                                 const std::string& config, const std::string& tuner_version,
                                 int64_t created, int64_t now) {
  std::string why = text_problem("GPU model", gpu_model, kMaxKeyBytes, true);
  if (why.empty()) why = text_problem("problem", problem, kMaxKeyBytes, true);
  if (why.empty()) why = text_problem("config", config, kMaxConfigBytes, true);
  if (why.empty()) why = text_problem("tuner version", tuner_version, kMaxLabelBytes, false);
  if (why.empty()) why = time_problem("created", created, now);
  if (why.empty()) {
    try {
      if (split_key_values(config, "config", "").empty()) why = "an empty config";
    } catch (const UserError& e) {
      why = fmt::format("a config that is not a key=value list ({})", e.what());
    }
  }
  return why;
}

}  // namespace

std::string why_invalid(const TuningRecord& t, int64_t now) {
  std::string why =
      measured_row_problem(t.gpu_model, t.problem, t.config, t.tuner_version, t.created, now);
  return why.empty() ? measurement_problem(t.measured) : why;
}

std::string why_invalid(const TrialRecord& t, int64_t now) {
  std::string why =
      measured_row_problem(t.gpu_model, t.problem, t.config, t.tuner_version, t.created, now);
  if (why.empty()) why = text_problem("error", t.error, kMaxErrorBytes, false);
  if (!why.empty()) return why;
  // A config that failed (or was never timed) has no measurement: runs 0.
  const Measurement& m = t.measured;
  if (m.runs == 0)
    return std::isfinite(m.median_ms) && m.median_ms >= 0 && std::isfinite(m.spread) &&
                   m.spread >= 0
               ? ""
               : "a trial without runs but with a median or spread";
  if (!t.error.empty()) return fmt::format("a failed trial with {} runs", m.runs);
  return measurement_problem(m);
}

std::string why_invalid(const DeviceRecord& d, int64_t now) {
  std::string why = text_problem("model", d.model, kMaxKeyBytes, true);
  if (why.empty()) why = text_problem("name", d.name, kMaxLabelBytes, true);
  if (why.empty()) why = text_problem("driver", d.driver, kMaxLabelBytes, false);
  if (!why.empty()) return why;
  // sm_XY: one digit of minor version.
  if (d.cc_major < 1 || d.cc_major > 99 || d.cc_minor < 0 || d.cc_minor > 9)
    return fmt::format("compute capability {}.{}", d.cc_major, d.cc_minor);
  if (d.sm_count < 1 || d.sm_count > 100000) return fmt::format("{} SMs", d.sm_count);
  if (d.memory_bytes < 0 || d.memory_bytes > (int64_t{1} << 50))
    return fmt::format("{} bytes of memory", d.memory_bytes);
  if (why = time_problem("first seen", d.first_seen, now); !why.empty()) return why;
  if (why = time_problem("last seen", d.last_seen, now); !why.empty()) return why;
  if (d.first_seen > d.last_seen) return "first seen after last seen";
  return "";
}

std::string why_invalid(const BinaryRecord& b) {
  std::string why = text_problem("key", b.key, kMaxKeyBytes, true);
  if (why.empty() && b.cubin.empty()) why = "no cubin";
  return why;
}

std::string checksum(std::string_view bytes) {
  return hex64(hash64(bytes));
}

void read_binary(const Statement& row, BinaryRecord& r, bool with_content) {
  r.key = row.column_text(0);
  if (with_content) {
    std::string_view cubin = row.column_blob(kCubinColumn);
    r.cubin.assign(cubin.begin(), cubin.end());
  }
  r.checksum = row.column_text(2);
  r.arch = row.column_text(3);
  r.nvrtc_version = row.column_text(4);
  r.generator_version = row.column_text(5);
  r.options = decode_options(row.column_text(6));
  r.ptxas_stats = row.column_text(7);
  r.nvrtc_log = row.column_text(8);
  r.source = row.column_text(9);
  r.created = row.column_int(10);
  r.last_used = row.column_int(11);
  r.hits = row.column_int(12);
  r.bytes = row.column_int(13);
  r.mac = row.column_text(14);
}

TuningRecord read_tuning(const Statement& row) {
  return TuningRecord{
      row.column_text(0), row.column_text(1),
      row.column_text(2), {row.column_double(3), row.column_double(4), row.column_int(5)},
      row.column_text(6), row.column_int(7)};
}

TrialRecord read_trial(const Statement& row) {
  return TrialRecord{
      row.column_text(0), row.column_text(1),
      row.column_text(2), {row.column_double(3), row.column_double(4), row.column_int(5)},
      row.column_text(6), row.column_text(7),
      row.column_int(8)};
}

DeviceRecord read_device(const Statement& row) {
  return DeviceRecord{row.column_text(0),
                      row.column_text(1),
                      static_cast<int>(row.column_int(2)),
                      static_cast<int>(row.column_int(3)),
                      static_cast<int>(row.column_int(4)),
                      row.column_text(5),
                      row.column_int(6),
                      row.column_int(7),
                      row.column_int(8)};
}

std::string encode_options(const std::vector<std::string>& options) {
  // An option from the environment (KJIT_NVRTC_EXTRA_OPTIONS) may hold bytes
  // that are not UTF-8: replaced, never an exception.
  return nlohmann::json(options).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<std::string> decode_options(const std::string& text) {
  nlohmann::json parsed = parse_json(text, /*allow_exceptions=*/false);
  if (!parsed.is_array()) return {};
  std::vector<std::string> options;
  for (const nlohmann::json& item : parsed)
    if (item.is_string()) options.push_back(item.get<std::string>());
  return options;
}

int64_t record_bytes(const BinaryRecord& r, const std::string& options_text) {
  // What the row costs on disk, roughly: eviction only needs a fair measure.
  return static_cast<int64_t>(r.cubin.size() + r.source.size() + r.nvrtc_log.size() +
                              options_text.size() + r.ptxas_stats.size() + r.key.size() + 128);
}

namespace {

// After a commit: once the WAL holds kWalCheckpointPages, copy it into the
// file and truncate it, so that opening stays cheap. A failure (readers still
// on an old snapshot) leaves it for the next commit.
int checkpoint_hook(void*, sqlite3* db, const char* name, int pages) {
  if (pages >= kWalCheckpointPages)
    sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_TRUNCATE, nullptr, nullptr);
  return SQLITE_OK;
}

}  // namespace

void configure(Database& db) {
  sqlite3_busy_timeout(db.handle(), kBusyTimeoutMs);
  // The file may come from elsewhere (an import, a shipped database): never let
  // its schema run functions or let SQL corrupt it through the page cache.
  sqlite3_db_config(db.handle(), SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  sqlite3_db_config(db.handle(), SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);
  // WAL housekeeping, tuned for many short processes that mostly read:
  //  - closing the last connection would checkpoint the WAL into the file and
  //    fsync it (~20 ms on a busy disk) at every exit; a process that only
  //    found binaries skips that (Store::~Store re-enables it for writers);
  //  - the first connection of a process rebuilds the WAL index by reading
  //    the whole WAL (and forgets what was already checkpointed, so SQLite's
  //    passive auto-checkpoint never gets to restart the WAL when every
  //    process writes once): checkpoint_hook truncates it instead.
  sqlite3_db_config(db.handle(), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  sqlite3_wal_hook(db.handle(), checkpoint_hook, nullptr);
}

void insert_binary(Database& db, const BinaryRecord& r, const std::string& checksum,
                   const std::string& mac, int64_t created, int64_t last_used, int64_t hits) {
  std::string options = encode_options(r.options);
  Statement& insert = db.cached(
      "INSERT OR REPLACE INTO binaries (key, bytes, created, arch, nvrtc_version, "
      "generator_version, checksum, options, ptxas_stats, nvrtc_log, source, cubin, mac) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)");
  insert.bind(1, r.key)
      .bind(2, record_bytes(r, options))
      .bind(3, created)
      .bind(4, r.arch)
      .bind(5, r.nvrtc_version)
      .bind(6, r.generator_version)
      .bind(7, checksum)
      .bind(8, options)
      .bind(9, r.ptxas_stats)
      .bind(10, r.nvrtc_log)
      .bind(11, r.source)
      .bind_blob(12, r.cubin.data(), r.cubin.size())
      .bind(13, mac)
      .run();
  Statement& usage =
      db.cached("INSERT OR REPLACE INTO binary_usage (key, last_used, hits) VALUES (?1, ?2, ?3)");
  usage.bind(1, r.key).bind(2, last_used).bind(3, hits).run();
}

bool binary_exists(Database& db, const std::string& key) {
  Statement& query = db.cached("SELECT 1 FROM binaries WHERE key = ?1");
  StatementReset rewind(query);
  query.bind(1, key);
  return query.step();
}

std::optional<Measurement> stored_measurement(Database& db, const char* sql,
                                              std::initializer_list<std::string_view> key) {
  Statement& query = db.cached(sql);
  StatementReset rewind(query);
  int index = 1;
  for (std::string_view part : key) query.bind(index++, part);
  if (!query.step()) return std::nullopt;
  return Measurement{query.column_double(0), query.column_double(1), query.column_int(2)};
}

// The policy tunings and trials share: the stored row stays unless the new
// measurement is better (better_measured); `bind_row` binds every column of
// `insert_sql`. With `failure_replaces` (trials), a row without a measurement (a
// failure) replaces whatever is stored: the newer verdict on the config is what a
// tune and the chooser read. A hang within a longer limit, or a wrong result after
// an earlier pass (a kernel that is not always right), is not outweighed by an
// older measurement.
template <typename BindRow>
PutOutcome upsert_measured(Database& db, const char* select_sql,
                           std::initializer_list<std::string_view> key, const Measurement& measured,
                           const char* insert_sql, BindRow bind_row,
                           bool failure_replaces = false) {
  std::optional<Measurement> existing = stored_measurement(db, select_sql, key);
  if (existing && !better_measured(measured, *existing) && !(failure_replaces && !valid(measured)))
    return PutOutcome::Kept;
  Statement& write = db.cached(insert_sql);
  StatementReset rewind(write);
  bind_row(write);
  write.step();
  return existing ? PutOutcome::Replaced : PutOutcome::Inserted;
}

// Columns 1..6, the same in both tables: gpu_model, problem, config, the measurement.
Statement& bind_measured_columns(Statement& write, const std::string& gpu_model,
                                 const std::string& problem, const std::string& config,
                                 const Measurement& m) {
  return write.bind(1, gpu_model)
      .bind(2, problem)
      .bind(3, config)
      .bind(4, m.median_ms)
      .bind(5, m.spread)
      .bind(6, m.runs);
}

PutOutcome upsert_tuning(Database& db, const TuningRecord& t, int64_t now) {
  return upsert_measured(
      db, "SELECT median_ms, spread, runs FROM tunings WHERE gpu_model = ?1 AND problem = ?2",
      {t.gpu_model, t.problem}, t.measured,
      "INSERT OR REPLACE INTO tunings (gpu_model, problem, config, median_ms, spread, runs, "
      "tuner_version, created) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
      [&](Statement& write) {
        bind_measured_columns(write, t.gpu_model, t.problem, t.config, t.measured)
            .bind(7, t.tuner_version)
            .bind(8, t.created != 0 ? t.created : now);
      });
}

PutOutcome upsert_trial(Database& db, const TrialRecord& t, int64_t now) {
  // A row of another tuner version measured another kernel behind the same config
  // text (a resumed tune and the search-only rule read only their own version's): the
  // new trial takes its place whatever either measured.
  Statement& other_version = db.cached(
      "DELETE FROM trials WHERE gpu_model = ?1 AND problem = ?2 AND config = ?3 AND "
      "tuner_version <> ?4");
  {
    StatementReset rewind(other_version);
    other_version.bind(1, t.gpu_model)
        .bind(2, t.problem)
        .bind(3, t.config)
        .bind(4, t.tuner_version)
        .run();
  }
  const PutOutcome outcome = upsert_measured(
      db,
      "SELECT median_ms, spread, runs FROM trials "
      "WHERE gpu_model = ?1 AND problem = ?2 AND config = ?3",
      {t.gpu_model, t.problem, t.config}, t.measured,
      "INSERT OR REPLACE INTO trials (gpu_model, problem, config, median_ms, spread, runs, error, "
      "tuner_version, created) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
      [&](Statement& write) {
        bind_measured_columns(write, t.gpu_model, t.problem, t.config, t.measured)
            .bind(7, t.error)
            .bind(8, t.tuner_version)
            .bind(9, t.created != 0 ? t.created : now);
      },
      /*failure_replaces=*/true);
  if (!valid(t.measured)) {
    // The config failed here: a tuning that names it for this problem no longer
    // stands (the runtime would run a kernel that failed its check).
    Statement& drop =
        db.cached("DELETE FROM tunings WHERE gpu_model = ?1 AND problem = ?2 AND config = ?3");
    StatementReset rewind(drop);
    drop.bind(1, t.gpu_model).bind(2, t.problem).bind(3, t.config).run();
  }
  return outcome;
}

PutOutcome upsert_device(Database& db, const DeviceRecord& d, int64_t first_seen,
                         int64_t last_seen) {
  Statement& query = db.cached("SELECT " KJIT_DEVICE_COLUMNS " FROM devices WHERE model = ?1");
  StatementReset rewind_query(query);
  query.bind(1, d.model);
  bool existed = query.step();
  if (existed) {
    DeviceRecord stored = read_device(query);
    if (stored.last_seen > last_seen) return PutOutcome::Kept;  // ours is older news
    // Every process records its GPU when it starts: an unchanged device seen
    // within the hour is not worth a write.
    bool same = stored.name == d.name && stored.cc_major == d.cc_major &&
                stored.cc_minor == d.cc_minor && stored.sm_count == d.sm_count &&
                stored.driver == d.driver && stored.memory_bytes == d.memory_bytes;
    if (same && last_seen - stored.last_seen < 3600) return PutOutcome::Kept;
    first_seen = std::min(first_seen, stored.first_seen);
  }
  Statement& write = db.cached(
      "INSERT OR REPLACE INTO devices (model, name, cc_major, cc_minor, sm_count, driver, "
      "memory_bytes, first_seen, last_seen) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
  StatementReset rewind(write);
  write.bind(1, d.model)
      .bind(2, d.name)
      .bind(3, d.cc_major)
      .bind(4, d.cc_minor)
      .bind(5, d.sm_count)
      .bind(6, d.driver)
      .bind(7, d.memory_bytes)
      .bind(8, first_seen)
      .bind(9, last_seen);
  write.step();
  return existed ? PutOutcome::Replaced : PutOutcome::Inserted;
}

bool path_exists(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

}  // namespace detail

}  // namespace kjit::cache
