// Tuning one problem on one GPU: pick candidates from the family's space, compile
// them in parallel (every binary to the store), measure them (checked, then timed
// in interleaved rounds), record every trial, and store the winner.
//
//   strategy model       the model ranks the whole space; measure the best config
//                        of each of the top k groups (engine and block tile), then
//                        k more of each of the two fastest groups (stages,
//                        split-K, raster, grid), best predicted first
//   strategy exhaustive  measure every config of the space
//   strategy random      measure k configs drawn at random (seeded)
//
// The finals: the fastest and the others within 2% of it (at most four), and the
// default wherever it measured, are timed again in one job, one run of each in
// turn, so neighbouring samples of two finalists ran at the same clock. (Earlier
// phases time jobs seconds apart; compute-bound tunes scale every run to the peak
// clock, which over-corrects a kernel that is partly memory bound, and on the H200
// put the default 6% behind a config it beat side by side by 6%.)
//
// Where the finals ran, the winner is a finalist (by the rule below): a config
// left out of them cannot overturn them with a time of an earlier job.
//
// Resumable: trials already in the store (same GPU model, problem and tuner
// version) are not measured again unless `force`; they compete with the new ones.
// The winner is the fastest median unless the 95% intervals of several overlap
// the fastest's; then, among those, deterministically: the default (what the
// runtime runs untuned: a tune changes it only on evidence), then the one without
// split-K, then the one the model's priors predict fastest, then the first by
// config text.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kjit/tuner/choose.h"
#include "kjit/tuner/measure.h"

namespace kjit::tuner {

inline constexpr const char* kTunerVersion = "kjit-tuner-2";

enum class Strategy { Model, Exhaustive, Random };
const char* to_string(Strategy strategy);
// "model" | "exhaustive" | "random"; UserError otherwise.
Strategy parse_strategy(const std::string& text);

struct TuneOptions {
  Strategy strategy = Strategy::Model;
  int top = 8;          // model / random: how many configs to measure
  double budget_s = 0;  // wall-clock seconds for the whole tune; 0: no limit
  bool force = false;   // measure again what the store already has
  // How candidates are timed. tune() adds `at_peak_clock` when the model calls the
  // problem compute bound (its best-ranked config's bound).
  TimerOptions timer;
  int compile_threads = 0;  // 0: every core
  std::string arch;         // compile for this architecture ("" : the device's)
  uint64_t seed = 1;        // random strategy
  int batch = 16;           // configs per measuring job (trials are stored per job)
  // The measurer's limit on one config's check (0: none known). A stored trial that
  // hung within a shorter limit is measured again (a tune run again with a longer
  // --timeout), not resumed as failed.
  double check_timeout_s = 0;
};

// Measures configs of a problem: in this process (runtime/tuning.h) or in a child
// process (MeasureWorker).
using Measurer = std::function<std::vector<Measured>(
    const TuningProblem& problem, const std::vector<std::string>& configs,
    const TimerOptions& timer, double leader_ms, const MeasureListener& listener)>;

struct TuneProgress {
  std::string phase;  // "compiling", "measuring", "finals", "done"
  int total = 0;      // configs this tune measures (resumed ones included)
  int compiled = 0, measured = 0, failed = 0, resumed = 0;
  std::string best_config;
  double best_ms = 0;
  double elapsed_s = 0;
  double eta_s = -1;  // < 0: unknown
};
using ProgressListener = std::function<void(const TuneProgress&)>;

struct TuneResult {
  std::string family, signature, gpu_model;
  std::string config;  // the winner ("" when nothing passed)
  Summary summary;
  std::string tie_break;         // how the winner was picked among statistically tied ones
  std::string default_config;    // what the runtime chose before this tune
  std::vector<Measured> trials;  // this tune's and the resumed ones
  std::vector<std::pair<std::string, Prediction>> ranking;  // the model's, whole space
  std::vector<Pruned> pruned;
  int candidates = 0, measured = 0, failed = 0, resumed = 0;
  double compile_s = 0, measure_s = 0, total_s = 0;
  bool budget_exhausted = false;
  // The trials' times are scaled to the peak SM clock (TimerOptions::at_peak_clock).
  bool at_peak_clock = false;
  // The configs timed again in the finals (their trials hold the finals' times);
  // where the finals ran, the winner is one of them.
  std::vector<std::string> finalists;
};

TuneResult tune(const TuningProblem& problem, Chooser& chooser, const Measurer& measurer,
                const TuneOptions& options, const ProgressListener& progress = nullptr);

// The winner among measured trials (the rule above); nullptr when none passed.
// `tie_break` (optional) says what decided it; `incumbent` is the default config.
const Measured* pick_winner(const std::vector<Measured>& trials, const TuningProblem& problem,
                            const cuda::DeviceProperties& device, std::string* tie_break = nullptr,
                            const std::string& incumbent = "");

}  // namespace kjit::tuner
