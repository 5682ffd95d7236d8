// A planted family for the fault test of the tuner: four configs of y = 2x over
// 2^20 floats — "ok" (the right kernel), "slow" (right, 64 times the arithmetic),
// "fault" (writes through a bad pointer: an illegal address that poisons the CUDA
// context) and "hang" (spins on a flag nobody sets). A tune measuring it in child
// processes must record the last two as failed and pick "ok".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kjit/runtime/cuda/driver.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/runtime.h"
#include "kjit/support/error.h"
#include "kjit/tuner/harness.h"

namespace kjit::testing {

inline constexpr int64_t kPlantedElements = 1 << 20;

inline KernelSource planted_source(const std::string& config) {
  const char* body = nullptr;
  if (config == "ok")
    body = "  if (i < n) y[i] = 2.0f * x[i];\n";
  else if (config == "slow")
    body =
        "  if (i >= n) return;\n  float v = x[i];\n"
        "  for (int r = 0; r < 64; ++r) v = v * 1.0000001f;\n"
        "  y[i] = 2.0f * x[i] + (v - v);\n";
  else if (config == "fault")
    body = "  if (i < n) reinterpret_cast<float*>(0x10)[i * 4096] = x[i];\n";
  else if (config == "hang")
    body = "  while (*flag == 0) {}\n  if (i < n) y[i] = 2.0f * x[i];\n";
  else
    throw UserError("no planted config '" + config + "'");
  KernelSource s;
  s.family = "planted";
  s.problem = "planted";
  s.config = config;
  s.name = "kjit_planted_" + config;
  s.block_threads = 256;
  s.source = "extern \"C\" __global__ void " + s.name +
             "(const float* x, float* y, volatile int* flag, long long n) {\n"
             "  const long long i = blockIdx.x * 256ll + threadIdx.x;\n" +
             body + "}\n";
  return s;
}

class PlantedProblem : public tuner::TuningProblem {
 public:
  std::string family() const override { return "planted"; }
  std::string signature() const override { return "planted y=2x n=1048576"; }
  std::string problem_class() const override { return "planted"; }
  std::vector<double> sizes() const override { return {kPlantedElements}; }
  nlohmann::json spec() const override { return {{"family", "planted"}}; }
  tuner::Space space(const cuda::DeviceProperties&) const override {
    return {{"ok", "slow", "fault", "hang"}, {}};
  }
  tuner::Prediction predict(const std::string& config, const cuda::DeviceProperties&,
                            const tuner::Efficiencies&,
                            const tuner::KernelResources*) const override {
    tuner::Prediction p;
    p.ms = config == "slow" ? 0.1 : 0.01;
    p.efficiency_key = config;
    return p;
  }
  std::string canonical(const std::string& config) const override {
    planted_source(config);  // throws for an unknown one
    return config;
  }
  std::vector<KernelSource> sources(const std::string& config) const override {
    return {planted_source(config)};
  }
  tuner::Work work() const override { return {}; }
};

class PlantedHarness : public tuner::Harness {
 public:
  explicit PlantedHarness(Runtime& runtime)
      : runtime_(runtime), x_(kPlantedElements * 4), y_(kPlantedElements * 4), flag_(16) {
    std::vector<float> x(kPlantedElements);
    for (int64_t i = 0; i < kPlantedElements; ++i) x[i] = 0.5f + static_cast<float>(i % 1000);
    x_.upload(x.data(), x.size() * 4);
    flag_.fill_bytes(0);
    host_x_ = std::move(x);
  }
  const tuner::TuningProblem& problem() const override { return problem_; }
  int input_sets() const override { return 1; }
  std::unique_ptr<tuner::Trial> prepare(const std::string& config) override {
    struct PlantedTrial : tuner::Trial {
      std::shared_ptr<const CompiledKernel> kernel;
      PlantedHarness* harness;
      void launch(CUstream stream, int) override {
        CUdeviceptr x = harness->x_.get(), y = harness->y_.get(), flag = harness->flag_.get();
        long long n = kPlantedElements;
        void* args[] = {&x, &y, &flag, &n};
        kernel->launch({static_cast<unsigned>(kPlantedElements / 256), 1, 1}, args, stream);
      }
      tuner::KernelResources resources() const override { return {256, 8, 0, false}; }
    };
    auto trial = std::make_unique<PlantedTrial>();
    trial->kernel = runtime_.compile(planted_source(config));
    trial->harness = this;
    return trial;
  }
  void poison(CUstream stream) override {
    KJIT_CU(cuMemsetD8Async, y_.get(), 0xFF, y_.bytes(), stream);
  }
  tuner::CheckOutcome check() override {
    std::vector<float> y(kPlantedElements);
    y_.download(y.data(), y.size() * 4);
    std::vector<double> got(y.begin(), y.end()), want;
    for (float v : host_x_) want.push_back(2.0 * v);
    return tuner::check(got, want, tuner::Precision::Exact32);
  }

 private:
  Runtime& runtime_;
  PlantedProblem problem_;
  cuda::DeviceBuffer x_, y_, flag_;
  std::vector<float> host_x_;
};

}  // namespace kjit::testing
