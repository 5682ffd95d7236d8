// A kernel family as the tuner sees it: what is being tuned (a problem with a
// stable signature), the configs it could run with (the space, with a reason for
// every config left out), and the performance model's prediction for each.
//
// One subclass per family: tuner/matmul_space.cpp, tuner/elementwise_space.cpp
// (and attention when it lands). Everything is text at this interface — configs
// are their canonical text forms, problems their signatures — so the store, the
// child processes that measure, workload files and `kjit explain` all speak it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kjit/compiler/kernel_source.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/tuner/model.h"

namespace kjit::tuner {

// A config left out of the space, and why ("needs 262144 B of shared memory; the
// device allows 232448").
struct Pruned {
  std::string config;
  std::string reason;
};

struct Space {
  std::vector<std::string> candidates;  // canonical config texts, in the space's order
  // Candidates whose kernels have not yet been measured on any GPU (a new schedule):
  // the model's untuned pick passes over each until it has passed a trial on this
  // GPU model for a problem of the same class (Chooser::passed_here); `kjit tune`
  // measures (and first checks) them like any other.
  std::vector<std::string> search_only;
  std::vector<Pruned> pruned;
};

class TuningProblem {
 public:
  virtual ~TuningProblem() = default;

  // "matmul", "elementwise"
  virtual std::string family() const = 0;
  // The exact problem: the key of its tuning in the store (with the GPU model).
  virtual std::string signature() const = 0;
  // What a tuning of another problem must share to be reused for this one (the
  // "nearest tuned problem of the same class"): layouts, dtypes, epilogue,
  // alignment class; not the sizes.
  virtual std::string problem_class() const = 0;
  // Sizes compared (as log ratios) to find the nearest tuned problem of the class.
  virtual std::vector<double> sizes() const = 0;
  // What one prediction costs against a plain problem's: a packed attention batch's
  // predictions walk its sequences. The model's refit bounds its work by it (fit.cpp).
  virtual int64_t prediction_cost() const { return 1; }
  // The description that rebuilds this problem (make_problem()); what workload
  // files hold and what a measuring child process is sent.
  virtual nlohmann::json spec() const = 0;
  // Whether spec() can describe it: an elementwise problem the runtime planned
  // from tensors has no expression text, so it is measured in this process.
  virtual bool has_spec() const { return true; }

  // Every config of the family's default space for this problem on `device`;
  // those that cannot run (resources, alignment, layout) are pruned with the reason.
  virtual Space space(const cuda::DeviceProperties& device) const = 0;
  // The model's prediction for one config (canonical text). `resources`: the
  // compiled kernel's registers and shared memory when known (else estimated).
  virtual Prediction predict(const std::string& config, const cuda::DeviceProperties& device,
                             const Efficiencies& efficiencies,
                             const KernelResources* resources = nullptr) const = 0;
  // The config's canonical text (parses, validates for this problem, prints);
  // UserError when it is not a config of this family.
  virtual std::string canonical(const std::string& config) const = 0;
  // The kernels this config runs (the main kernel first, then helpers such as
  // padding or the split-K reduction), for compiling ahead of measurement.
  virtual std::vector<KernelSource> sources(const std::string& config) const = 0;
  // What a launch moves and computes, for `kjit explain` and the roofline.
  virtual Work work() const = 0;
  // Configs that run the same kernels as `config` and differ only in run-time
  // choices that the problem's shape decides (matmul: pitch=line, which matters only
  // where an operand's rows are off the 128-byte lines). A tuning carried to a near
  // problem (the chooser's nearest) may take the twin the model prefers there.
  // The problem this one is tuned as, where problems share one tuning: a packed
  // attention batch is tuned as the representative batch of its length profile
  // (tuner/attention_space.h), whose signature it has. nullptr: itself.
  // Chooser::choose and tune() work on that problem.
  virtual std::unique_ptr<TuningProblem> tuned_as() const { return nullptr; }
  virtual std::vector<std::string> run_time_twins(const std::string& config) const {
    (void)config;
    return {};
  }
};

// What a tune of `problem` measures: the problem it is tuned as (a packed attention
// batch's representative, TuningProblem::tuned_as), held in `holder`, else itself.
// Its work is what the tune's times are throughputs of.
const TuningProblem& measured_problem(const TuningProblem& problem,
                                      std::unique_ptr<TuningProblem>& holder);

// The throughput of a launch of `problem` taking `ms`, in the family's unit:
// "738.1 TFLOP/s" for a matmul, "4356 GB/s" for an elementwise chain; "" for none.
std::string throughput(const TuningProblem& problem, double ms);

// Reads the fields of one family's spec; every UserError names the family and
// the field ("matmul spec: 'k' must be a positive integer, got -1").
class SpecReader {
 public:
  SpecReader(const nlohmann::json& spec, std::string family)
      : spec_(spec), family_(std::move(family)) {}
  // UserError for a field outside `known` ("family" is always known), listing them.
  void only(std::initializer_list<const char*> known) const;
  // A positive integer; `fallback` when absent, or a UserError (with `hint`) when the
  // fallback is 0.
  int64_t positive(const char* key, int64_t fallback, const char* hint = "") const;
  // A string; `fallback` when absent.
  std::string text(const char* key, const std::string& fallback) const;

 private:
  const nlohmann::json& spec_;
  std::string family_;
};

// Rebuilds a problem from its spec: {"family": "matmul", "m": .., ...}. A
// UserError names the field that is missing or wrong.
std::unique_ptr<TuningProblem> make_problem(const nlohmann::json& spec);
// Rebuilds what the model needs from a stored signature (to refit the model from
// trials); nullptr when the signature is not one this version can read.
std::unique_ptr<TuningProblem> problem_from_signature(const std::string& signature);

}  // namespace kjit::tuner
