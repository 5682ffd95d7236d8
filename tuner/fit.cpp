#include "kjit/tuner/fit.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>

#include "kjit/support/error.h"
#include "kjit/tuner/family.h"
#include "kjit/tuner/stats.h"

namespace kjit::tuner {

namespace {

// The efficiency that makes the model predict `measured_ms` for this config:
// predictions fall as the efficiency rises, so bisect on [0.02, 2]. Returns 0 when
// no efficiency in range explains the time (memory- or overhead-bound trials say
// nothing about the key).
double solve_efficiency(const TuningProblem& problem, const std::string& config,
                        const std::string& key, const cuda::DeviceProperties& device,
                        double measured_ms) {
  auto predicted = [&](double efficiency) {
    Efficiencies e;
    e.set(key, efficiency, 1);
    return problem.predict(config, device, e).ms;
  };
  double lo = 0.02, hi = 2.0;
  // The floor the other terms set (memory, overheads): a time near it says nothing
  // about this key's efficiency.
  if (measured_ms < predicted(hi) * 1.05 || predicted(lo) < measured_ms) return 0;
  for (int i = 0; i < 40; ++i) {
    const double mid = std::sqrt(lo * hi);
    (predicted(mid) > measured_ms ? lo : hi) = mid;
  }
  return std::sqrt(lo * hi);
}

}  // namespace

Efficiencies fit_efficiencies(const std::vector<cache::TrialRecord>& trials,
                              const cuda::DeviceProperties& device,
                              const std::string& exclude_problem) {
  std::map<std::string, std::vector<double>> by_key;
  std::map<std::string, double> priors;
  // A trial by problem, so that one rebuilt problem is alive at a time.
  std::vector<const cache::TrialRecord*> order;
  for (const cache::TrialRecord& t : trials) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto* a, const auto* b) { return a->problem < b->problem; });
  std::optional<std::string> current;
  std::unique_ptr<TuningProblem> problem;
  int64_t cost = 0;
  for (const cache::TrialRecord* trial : order) {
    const cache::TrialRecord& t = *trial;
    if (!t.error.empty() || t.measured.runs < 1 || !(t.measured.median_ms > 0)) continue;
    if (t.problem == exclude_problem) continue;
    if (!current || t.problem != *current) {
      current = t.problem;
      problem = problem_from_signature(t.problem);
    }
    if (!problem) continue;
    // The refit runs on every process's first choice, over every trial of the GPU
    // model, so its work is bounded: a store of a thousand trials of packed batches
    // of 65535 sequences (about 40 predictions each, every one walking the
    // sequences) took 5 s and 2 GB. Trials past the bound teach the model nothing.
    cost += problem->prediction_cost();
    if (cost > kMaxFitCost) break;
    try {
      // Only a config this problem can run teaches anything, and only one that
      // passes its checks may reach the model: a stored row's config is not
      // trusted (an imported `warps=1,wm=2` divided by zero in the register
      // estimate, and the trap killed every process's first choice).
      const std::string config = problem->canonical(t.config);
      const Prediction prior = problem->predict(config, device, Efficiencies());
      const double value =
          solve_efficiency(*problem, config, prior.efficiency_key, device, t.measured.median_ms);
      if (value > 0) {
        by_key[prior.efficiency_key].push_back(value);
        priors[prior.efficiency_key] = prior.efficiency;
      }
    } catch (const Error&) {
      // A config this version does not read, or one this problem cannot run.
    }
  }
  Efficiencies out;
  for (const auto& [key, values] : by_key) {
    // Shrink toward the prior while there are few trials: one trial moves it 2/3 of
    // the way, four 8/9.
    const double n = static_cast<double>(values.size());
    const double weight = n / (n + 0.5);
    const double fitted =
        std::exp(weight * std::log(median(values)) + (1 - weight) * std::log(priors[key]));
    out.set(key, fitted, static_cast<int>(values.size()));
  }
  return out;
}

}  // namespace kjit::tuner
