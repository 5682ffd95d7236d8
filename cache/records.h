// The rows of the store, one struct per table. Timestamps are unix seconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kjit::cache {

// A GPU the runtime has run on (table `devices`, keyed by `model`).
struct DeviceRecord {
  std::string model;  // gpu_model(name, cc_major, cc_minor, sm_count)
  std::string name;   // "NVIDIA H200"
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  std::string driver;        // driver version, e.g. "13.0"
  int64_t memory_bytes = 0;  // total device memory
  int64_t first_seen = 0;    // set by the store
  int64_t last_seen = 0;     // set by the store
};

// A compiled cubin (table `binaries`, keyed by binary_key()).
struct BinaryRecord {
  std::string key;
  std::vector<char> cubin;
  std::string checksum;  // XXH3-64 of `cubin`, 16 hex digits; computed by the store
  // HMAC-SHA256 of `key` and `cubin` under the store's secret key, 64 hex digits:
  // computed by the store, checked before every load ("" in an exported file).
  std::string mac;
  std::string source;  // the CUDA C++ compiled (for `kjit cache show`; never executed)
  std::string nvrtc_log;
  std::vector<std::string> options;  // exactly what NVRTC was given
  std::string arch;                  // "sm_90", "sm_90a"
  std::string nvrtc_version;
  std::string generator_version;
  std::string ptxas_stats;  // JSON text: the caller's rendering of ptxas' report
  int64_t created = 0;      // set by the store
  int64_t last_used = 0;    // set by the store; the eviction order
  int64_t hits = 0;         // loads from the store (not in-process map hits)
  int64_t bytes = 0;        // set by the store: what the row counts toward max_bytes
};

// How a measurement is compared: see better_measured().
struct Measurement {
  double median_ms = 0;  // median time of one launch
  double spread = 0;     // relative spread of the runs, e.g. (p75 - p25) / median
  int64_t runs = 0;      // timed runs behind the median
};

// The chosen config for one problem on one GPU model (table `tunings`, keyed by
// (gpu_model, problem)).
struct TuningRecord {
  std::string gpu_model;
  std::string problem;  // the Problem's canonical text (its signature)
  std::string config;   // the Config's canonical text
  Measurement measured;
  std::string tuner_version;
  int64_t created = 0;  // set by the store when 0
};

// One measured (or rejected) config (table `trials`, keyed by (gpu_model,
// problem, config)), so that growing a space re-measures only what is new.
struct TrialRecord {
  std::string gpu_model;
  std::string problem;
  std::string config;
  Measurement measured;
  std::string error;  // empty when measured; otherwise why it was skipped or rejected
  std::string tuner_version;
  int64_t created = 0;  // set by the store when 0
};

// What happened to a row offered to the store.
enum class PutOutcome {
  Inserted,  // no row with that key before
  Replaced,  // the offered row was better measured (or newer) and replaced the old one
  Kept,      // the existing row was kept
  Rejected,  // the row was invalid (a bad checksum or MAC, a failed write, a disabled store)
};
const char* to_string(PutOutcome outcome);

// True when `candidate` should replace `incumbent` (a conflict on the same
// problem and GPU model). "Better measured", in order:
//  1. a measurement with runs >= 1 and a positive, finite median beats one without;
//  2. a trustworthy one (runs >= kTrustedRuns and spread <= kTrustedSpread) beats
//     one that is not;
//  3. when the medians differ by more than the larger spread (beyond the noise),
//     the faster wins: that is what tuning is for;
//  4. otherwise, within noise: more runs wins, then lower spread;
//  5. a complete tie keeps the incumbent (no churn).
inline constexpr int64_t kTrustedRuns = 10;
inline constexpr double kTrustedSpread = 0.10;
bool better_measured(const Measurement& candidate, const Measurement& incumbent);

}  // namespace kjit::cache
