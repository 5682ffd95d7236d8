// A family for testing the tuner's search without compiling or a GPU: configs
// "c=<i>" (with an optional ",splitk=<s>"), predictions from a table, no kernels.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kjit/support/error.h"
#include "kjit/tuner/family.h"

namespace kjit::tuner::testing {

class FakeProblem : public TuningProblem {
 public:
  // config -> (predicted ms, efficiency key and group)
  std::map<std::string, std::pair<double, std::string>> configs;
  std::map<std::string, std::string> schedules;  // config -> Prediction::schedule (else "")
  std::string name = "fake n=1";
  std::string bound = "memory";  // every prediction's Prediction::bound
  // What tuned_as() gives (a copy); none: the problem is tuned as itself.
  std::shared_ptr<const FakeProblem> tuned_as_problem;

  std::string family() const override { return "fake"; }
  std::string signature() const override { return name; }
  std::string problem_class() const override { return "fake"; }
  std::vector<double> sizes() const override { return {1}; }
  nlohmann::json spec() const override { return {{"family", "fake"}}; }
  Space space(const cuda::DeviceProperties&) const override {
    Space s;
    for (const auto& [config, prediction] : configs) s.candidates.push_back(config);
    return s;
  }
  Prediction predict(const std::string& config, const cuda::DeviceProperties&, const Efficiencies&,
                     const KernelResources*) const override {
    auto it = configs.find(config);
    if (it == configs.end()) throw UserError("no config " + config);
    Prediction p;
    p.ms = it->second.first;
    p.efficiency_key = it->second.second;
    p.group = it->second.second;
    p.bound = bound;
    if (auto schedule = schedules.find(config); schedule != schedules.end())
      p.schedule = schedule->second;
    return p;
  }
  std::string canonical(const std::string& config) const override {
    if (!configs.count(config)) throw UserError("no config " + config);
    return config;
  }
  std::vector<KernelSource> sources(const std::string&) const override { return {}; }
  std::unique_ptr<TuningProblem> tuned_as() const override {
    if (!tuned_as_problem) return nullptr;
    return std::make_unique<FakeProblem>(*tuned_as_problem);
  }
  Work work() const override { return {}; }
};

}  // namespace kjit::tuner::testing
