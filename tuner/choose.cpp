#include "kjit/tuner/choose.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kjit/support/error.h"
#include "kjit/support/log.h"
#include "kjit/tuner/fit.h"
#include "kjit/tuner/measure.h"
#include "kjit/tuner/tune.h"

namespace kjit::tuner {

namespace {
// How far a tuned problem may be to stand in for another: the sum over sizes of
// |log(size ratio)|, here ln 2 (e.g. 4096^3 for 4000^3 or 3072 x 3072 x 4096, not
// for 512 x 768 x 1024).
constexpr double kNearestDistance = 0.6931471805599453;
}  // namespace

const char* to_string(Choice::Source source) {
  switch (source) {
    case Choice::Source::Store:
      return "store";
    case Choice::Source::Nearest:
      return "nearest";
    case Choice::Source::Model:
      return "model";
  }
  return "?";
}

Chooser::Chooser(std::shared_ptr<cache::Store> store, std::string gpu_model,
                 cuda::DeviceProperties device, size_t max_remembered)
    : store_(std::move(store)),
      gpu_model_(std::move(gpu_model)),
      device_(std::move(device)),
      max_remembered_(std::max<size_t>(max_remembered, 1)) {}

std::shared_ptr<const Efficiencies> Chooser::efficiencies() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!efficiencies_) {
    const std::vector<cache::TrialRecord> trials = store_->trials_for(gpu_model_, "");
    efficiencies_ = std::make_shared<const Efficiencies>(fit_efficiencies(trials, device_));
    passed_.clear();
    refuted_.clear();
    passed_in_class_.clear();
    for (const cache::TrialRecord& t : trials) {
      // Only this tuner version's passes unlock a search-only config: the version
      // changes with the kernels behind the config text, as for a resumed tune.
      if (t.error.empty() && t.measured.runs >= 1 && t.measured.median_ms > 0 &&
          t.tuner_version == kTunerVersion)
        passed_[t.config].push_back(t.problem);
      else if (refutes_kernel(t.error))
        refuted_[t.config].push_back(t.problem);
    }
  }
  return efficiencies_;
}

bool Chooser::passed_here(const TuningProblem& problem, const std::string& config) {
  efficiencies();  // loads the trials
  const std::string cls = problem.problem_class();
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string key = cls + "\n" + config;
  const auto known = passed_in_class_.find(key);
  if (known != passed_in_class_.end()) return known->second;
  // A pass in the class unlocks the config; a wrong result or a fault in the class
  // (the same kernel) locks it again, whatever passed elsewhere.
  auto in_class = [&](const std::map<std::string, std::vector<std::string>>& by_config) {
    const auto signatures = by_config.find(config);
    if (signatures != by_config.end())
      for (const std::string& signature : signatures->second) {
        const std::unique_ptr<TuningProblem> other = problem_from_signature(signature);
        if (other && other->problem_class() == cls) return true;
      }
    return false;
  };
  const bool passed = in_class(passed_) && !in_class(refuted_);
  passed_in_class_[key] = passed;
  return passed;
}

bool Chooser::default_allowed(const TuningProblem& problem, const Space& space,
                              const std::string& config) {
  return std::find(space.search_only.begin(), space.search_only.end(), config) ==
             space.search_only.end() ||
         passed_here(problem, config);
}

void Chooser::refresh() {
  std::lock_guard<std::mutex> lock(mutex_);
  remembered_.clear();
  efficiencies_.reset();
  tuned_.reset();
}

std::vector<std::pair<std::string, Prediction>> Chooser::rank(const TuningProblem& problem) {
  const std::shared_ptr<const Efficiencies> fitted = efficiencies();
  std::vector<std::pair<std::string, Prediction>> out;
  for (const std::string& config : problem.space(device_).candidates)
    out.emplace_back(config, problem.predict(config, device_, *fitted));
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return predicted_faster(a.second, b.second);
  });
  return out;
}

Choice Chooser::model_choice(const TuningProblem& problem, const Space& space) {
  if (space.candidates.empty()) {
    std::string reasons;
    for (size_t i = 0; i < space.pruned.size() && i < 3; ++i)
      reasons += "\n  " + space.pruned[i].config + ": " + space.pruned[i].reason;
    throw UserError("no config of the " + problem.family() + " space runs " + problem.signature() +
                        " on " + device_.name + "; for example:" + reasons,
                    "check the problem's sizes and dtypes against the device");
  }
  const std::shared_ptr<const Efficiencies> fitted = efficiencies();
  Choice best;
  Prediction best_prediction;
  // A search-only candidate (a kernel never measured on a GPU) is a default only
  // once it has passed a trial on this GPU model for a problem of this class, or if
  // nothing else runs.
  auto search_only = [&](const std::string& config) {
    return !default_allowed(problem, space, config);
  };
  const bool others = std::any_of(space.candidates.begin(), space.candidates.end(),
                                  [&](const std::string& c) { return !search_only(c); });
  std::string passed_over;  // the fastest predicted search-only candidate skipped
  double passed_over_ms = 0;
  for (const std::string& config : space.candidates) {
    const Prediction p = problem.predict(config, device_, *fitted);
    if (others && search_only(config)) {
      if (passed_over.empty() || p.ms < passed_over_ms) {
        passed_over = config;
        passed_over_ms = p.ms;
      }
      continue;
    }
    if (best.config.empty() || predicted_faster(p, best_prediction)) {
      best_prediction = p;
      best.config = config;
      best.detail = fmt::format("{:.4f} ms predicted, {}-bound", p.ms, p.bound);
    }
  }
  if (!passed_over.empty() && passed_over_ms < best_prediction.ms)
    best.detail +=
        fmt::format("; {} predicts {:.4f} ms but is search-only until measured on this GPU model",
                    passed_over, passed_over_ms);
  best.source = Choice::Source::Model;
  return best;
}

std::optional<Choice> Chooser::nearest(const TuningProblem& problem, const Space& space,
                                       std::string* why) {
  std::vector<Tuned> tuned;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!tuned_) {
      tuned_.emplace();
      try {
        if (store_->enabled())
          for (const cache::TuningRecord& t : store_->tunings(gpu_model_)) {
            std::unique_ptr<TuningProblem> parsed = problem_from_signature(t.problem);
            if (parsed)
              tuned_->push_back({t.problem, parsed->problem_class(), t.config, parsed->sizes()});
          }
      } catch (const CacheError& e) {
        // The store's listing failed (it warned): no nearest tuned problem, the model decides.
        log_line("config", std::string("no nearest tuned problem: ") + e.what());
      }
    }
    tuned = *tuned_;
  }
  const std::string cls = problem.problem_class();
  const std::vector<double> sizes = problem.sizes();
  auto runs_here = [&](const std::string& config) {
    return std::find(space.candidates.begin(), space.candidates.end(), config) !=
           space.candidates.end();
  };
  // A tuned config, or its run-time twins, that this problem can run.
  auto runnable = [&](const std::string& config) {
    std::vector<std::string> out;
    if (runs_here(config)) out.push_back(config);
    for (const std::string& twin : problem.run_time_twins(config))
      if (runs_here(twin)) out.push_back(twin);
    return out;
  };
  // The tuned problems of the class within reach whose config (or a run-time
  // twin) this problem can run, nearest first.
  struct Near {
    const Tuned* tuned;
    std::vector<std::string> options;
    double distance;
  };
  std::vector<Near> near;
  int of_class = 0;
  for (const Tuned& t : tuned) {
    if (t.problem_class != cls || t.sizes.size() != sizes.size()) continue;
    ++of_class;
    std::vector<std::string> here = runnable(t.config);
    if (here.empty()) continue;  // not a config this problem can run
    double distance = 0;
    for (size_t i = 0; i < sizes.size(); ++i)
      distance += std::abs(std::log(std::max(sizes[i], 1.0) / std::max(t.sizes[i], 1.0)));
    if (distance <= kNearestDistance) near.push_back({&t, std::move(here), distance});
  }
  std::stable_sort(near.begin(), near.end(),
                   [](const Near& a, const Near& b) { return a.distance < b.distance; });
  if (near.empty()) {
    *why = of_class == 0 ? "nothing tuned for this class on this GPU model"
                         : fmt::format(
                               "none of the {} tuned problem(s) of its class is within "
                               "reach (sizes within 2x) with a config it can run",
                               of_class);
    return std::nullopt;
  }
  // Sizes near, but maybe over a cliff (one more wave of tiles): a tuned config is
  // taken only when the model, on this problem, finds it within 10% of its own
  // best. The nearest that passes stands in (a nearer one over the cliff does not
  // hide a farther one that is not).
  const std::shared_ptr<const Efficiencies> fitted = efficiencies();
  double model_best = 0;
  const bool any_allowed =
      std::any_of(space.candidates.begin(), space.candidates.end(),
                  [&](const std::string& c) { return default_allowed(problem, space, c); });
  for (const std::string& candidate : space.candidates) {
    // The best the model may pick (model_choice): not an untried search-only one,
    // unless nothing else runs.
    if (any_allowed && !default_allowed(problem, space, candidate)) continue;
    const double ms = problem.predict(candidate, device_, *fitted).ms;
    if (model_best == 0 || ms < model_best) model_best = ms;
  }
  for (const Near& n : near) {
    // The tuned kernel, with the run-time choices the model prefers for this shape
    // (e.g. 4096^3's tiles for 4000^3, whose rows are off the 128-byte lines, with
    // pitch=line).
    std::string config;
    double config_ms = 0;
    for (const std::string& option : n.options) {
      // A tuning normally stands on a passing trial of its config; one without (a
      // hand edit, a store that lost the trial) does not unlock a search-only config.
      if (!default_allowed(problem, space, option)) continue;
      const double ms = problem.predict(option, device_, *fitted).ms;
      if (config.empty() || ms < config_ms) config = option, config_ms = ms;
    }
    if (config.empty() || config_ms > 1.1 * model_best) continue;
    Choice c;
    c.config = config;
    c.source = Choice::Source::Nearest;
    c.detail = "tuned for " + n.tuned->signature +
               (config != n.tuned->config ? " (run-time options chosen here: " + config + ")" : "");
    return c;
  }
  *why = fmt::format(
      "the model finds the config{} of the {} tuned problem(s) of its class within reach more "
      "than 10% slower here than its own best",
      near.size() > 1 ? "s" : "", near.size());
  return std::nullopt;
}

Choice Chooser::choose(const TuningProblem& problem) {
  const std::string signature = problem.signature();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = remembered_.find(signature);
    if (it != remembered_.end()) return it->second;
  }
  if (std::unique_ptr<TuningProblem> as = problem.tuned_as()) return choose(*as);
  Choice choice;
  bool found = false;
  if (std::optional<cache::TuningRecord> tuned = store_->find_tuning(gpu_model_, signature)) {
    try {
      choice.config = problem.canonical(tuned->config);
      choice.source = Choice::Source::Store;
      choice.detail = fmt::format("tuned, {:.4f} ms over {} runs", tuned->measured.median_ms,
                                  tuned->measured.runs);
      found = true;
    } catch (const UserError& e) {
      log_line("config", "ignoring the stored tuning of " + signature + " (" + tuned->config +
                             "): " + e.what());
    }
  }
  if (!found) {
    const Space space = problem.space(device_);
    std::string why_not_near;
    std::optional<Choice> near = nearest(problem, space, &why_not_near);
    if (near) {
      choice = *near;
    } else {
      choice = model_choice(problem, space);
      choice.detail += "; " + why_not_near;
    }
  }
  log_line("config",
           fmt::format("{} {} on {}: {} ({}; {})", problem.family(), signature, gpu_model_,
                       choice.config, to_string(choice.source), choice.detail));
  std::lock_guard<std::mutex> lock(mutex_);
  if (remembered_.size() >= max_remembered_) remembered_.clear();
  return remembered_.emplace(signature, choice).first->second;
}

size_t Chooser::remembered() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return remembered_.size();
}

}  // namespace kjit::tuner
