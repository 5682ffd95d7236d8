// Where every config comes from: the one place in kjit that decides how a problem
// runs. For a problem on a GPU model, in order:
//
//   1. the store's tuning for exactly this problem (kjit tune, or KJIT_TUNE=1);
//   2. the nearest tuned problem of the same class (same layouts, dtypes, epilogue
//      and alignment class; nearest by the sum of |log| size ratios, at most ln 2
//      away), when its config is in this problem's space and the model finds it
//      within 10% of the model's best here (no wave cliff in between);
//   3. the model's best config of the space (its efficiencies fitted to the GPU
//      model's trials where there are any).
//
// Choices are remembered per problem signature, so a second lookup in a process is
// a hash-map find; at most `max_remembered` of them (then the memory starts over), so
// a process that meets ever new problems does not grow without bound. A problem that
// is tuned as another (TuningProblem::tuned_as(): packed attention batches, as their
// length profile) is chosen for as that one. KJIT_LOG=config prints each first choice
// and where it came from.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kjit/cache/store.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/tuner/family.h"

namespace kjit::tuner {

struct Choice {
  std::string config;  // canonical text
  enum class Source { Store, Nearest, Model } source = Source::Model;
  // "tuned, 0.1862 ms over 25 runs" (store), "tuned for m=4096,..." (nearest),
  // "0.190 ms predicted, compute-bound; nothing tuned for this class on this GPU
  // model" (model: and why no tuned problem stood in)
  std::string detail;
};
const char* to_string(Choice::Source source);

class Chooser {
 public:
  static constexpr size_t kMaxRemembered = 4096;
  Chooser(std::shared_ptr<cache::Store> store, std::string gpu_model, cuda::DeviceProperties device,
          size_t max_remembered = kMaxRemembered);

  // The config for `problem` (see above). Thread-safe.
  Choice choose(const TuningProblem& problem);
  // The model's ranking of the space: every candidate with its prediction, fastest
  // first (ties keep the space's order).
  std::vector<std::pair<std::string, Prediction>> rank(const TuningProblem& problem);

  // The model's efficiencies for this GPU model, fitted to the store's trials
  // (computed on first use). A snapshot: another thread's refresh() replaces the
  // fit, and the caller's copy stays valid while it holds it.
  std::shared_ptr<const Efficiencies> efficiencies();
  // Forgets remembered choices and the fit (after a tune wrote new rows).
  void refresh();
  // Choices remembered now.
  size_t remembered() const;

  const std::string& gpu_model() const { return gpu_model_; }
  const cuda::DeviceProperties& device() const { return device_; }
  cache::Store& store() const { return *store_; }

 private:
  // The nearest tuned problem's config, or nullopt with `why` none stands in.
  std::optional<Choice> nearest(const TuningProblem& problem, const Space& space, std::string* why);
  Choice model_choice(const TuningProblem& problem, const Space& space);
  // Whether `config` has passed a trial on this GPU model for a problem of
  // `problem`'s class (its layouts, dtypes, epilogue, alignment: the same kernel).
  bool passed_here(const TuningProblem& problem, const std::string& config);
  // Whether the model may pick `config` for `problem` untuned: not search-only in
  // `space`, or passed here (Space::search_only).
  bool default_allowed(const TuningProblem& problem, const Space& space, const std::string& config);

  std::shared_ptr<cache::Store> store_;
  std::string gpu_model_;
  cuda::DeviceProperties device_;
  size_t max_remembered_;
  mutable std::mutex mutex_;
  std::map<std::string, Choice> remembered_;  // by signature
  std::shared_ptr<const Efficiencies> efficiencies_;
  // The problems (signatures) of each config's passing trials (checked, then timed)
  // on this GPU model, loaded with the fit; and, by problem class and config,
  // whether one of them is of that class (passed_here).
  std::map<std::string, std::vector<std::string>> passed_;
  // The same for trials that refuted the kernel (refutes_kernel: a wrong result, a fault).
  std::map<std::string, std::vector<std::string>> refuted_;
  std::map<std::string, bool> passed_in_class_;
  // The GPU model's tunings with the class and sizes of each (for nearest()).
  struct Tuned {
    std::string signature, problem_class, config;
    std::vector<double> sizes;
  };
  std::optional<std::vector<Tuned>> tuned_;
};

}  // namespace kjit::tuner
