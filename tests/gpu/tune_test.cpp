// The tuner on the GPU: a tune whose candidates fault and hang finishes, records
// both as failed with reasons and picks a correct winner (measured in child
// processes); a tuned problem is then what a fresh Runtime runs, from the store.
#include <gtest/gtest.h>

#include <cstdlib>

#include <unistd.h>

#include <filesystem>
#include <map>

#include "kjit/runtime/elementwise.h"
#include "kjit/runtime/matmul.h"
#include "kjit/runtime/tuning.h"
#include "kjit/tuner/attention_space.h"
#include "kjit/tuner/elementwise_space.h"
#include "kjit/tuner/matmul_space.h"
#include "kjit/tuner/measure.h"
#include "kjit/tuner/tune.h"
#include "kjit/tuner/worker.h"
#include "tests/gpu/planted.h"
#include "tests/support/gpu_test.h"

namespace kjit {
namespace {

using testing::GpuTest;

class TunerGpu : public GpuTest {};

TEST_F(TunerGpu, FaultingAndHangingCandidatesFailAndACorrectOneWins) {
  // The planted worker is built beside this test binary.
  char self[4096] = {};
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof self - 1), 0);
  const std::string worker =
      std::filesystem::path(self).parent_path().string() + "/kjit_planted_worker";
  ASSERT_TRUE(std::filesystem::exists(worker)) << worker;
  tuner::WorkerOptions options;
  options.argv = {worker};
  options.check_timeout_s = 10;
  auto measure_worker = std::make_shared<tuner::MeasureWorker>(options);
  testing::PlantedProblem problem;
  tuner::Chooser chooser(cache::Store::disabled("test"), "test", device());
  tuner::TuneOptions tune_options;
  tune_options.strategy = tuner::Strategy::Exhaustive;
  const tuner::TuneResult r =
      tuner::tune(problem, chooser, worker_measurer(measure_worker), tune_options);
  std::map<std::string, tuner::Measured> trials;
  for (const tuner::Measured& m : r.trials) trials[m.config] = m;
  EXPECT_EQ(r.config, "ok");
  ASSERT_TRUE(trials.at("ok").ok()) << trials.at("ok").error;
  ASSERT_TRUE(trials.at("slow").ok()) << trials.at("slow").error;
  EXPECT_LT(trials.at("ok").summary.median_ms, trials.at("slow").summary.median_ms);
  EXPECT_NE(trials.at("fault").error.find("ILLEGAL_ADDRESS"), std::string::npos)
      << trials.at("fault").error;
  EXPECT_NE(trials.at("hang").error.find("hung"), std::string::npos) << trials.at("hang").error;
  EXPECT_GE(measure_worker->starts(), 3);  // after the fault and after the hang
  std::printf("fault: %s\nhang: %s\n", trials.at("fault").error.c_str(),
              trials.at("hang").error.c_str());
}

// In-process tuning of a real elementwise chain and matmul (the model's top 3):
// each winner is checked, stored, and chosen by the runtime afterwards.
TEST_F(TunerGpu, TunedConfigsAreStoredAndChosen) {
  Runtime& rt = runtime();
  tuner::TuneOptions options;
  options.top = 3;
  options.timer.rounds = 2;
  options.timer.runs_per_round = 3;
  const tuner::ElementwiseTuning chain("y = x * sigmoid(x) * g", "bf16", {{"n", 1 << 22}});
  matmul::Problem p;
  p.m = 512;
  p.n = 768;
  p.k = 1024;
  const tuner::MatmulTuning mm(p);
  for (const tuner::TuningProblem* problem :
       std::vector<const tuner::TuningProblem*>{&chain, &mm}) {
    SCOPED_TRACE(problem->signature());
    const tuner::TuneResult r =
        tuner::tune(*problem, rt.chooser(), in_process_measurer(rt), options);
    ASSERT_FALSE(r.config.empty());
    for (const tuner::Measured& m : r.trials) EXPECT_TRUE(m.ok()) << m.config << ": " << m.error;
    const tuner::Choice c = rt.chooser().choose(*problem);
    EXPECT_EQ(c.source, tuner::Choice::Source::Store);
    EXPECT_EQ(c.config, r.config);
  }
  // A Matmul built now runs the tuned config.
  matmul::Matmul tuned(rt, p);
  EXPECT_EQ(tuned.config_source(), "store");
  EXPECT_EQ(tuned.config().to_string(), rt.chooser().choose(mm).config);
}

// Times at the peak clock (tuner/timer.h): the probe measures an SM clock no higher
// than the peak, and each run's time is scaled by clock / peak, so the scaled median
// is the raw one times the clock's ratio (give or take the runs' spread).
TEST_F(TunerGpu, TimesAtThePeakClockScaleByTheMeasuredClock) {
  Runtime& rt = runtime();
  matmul::Problem p;
  p.m = p.n = p.k = 4096;
  const tuner::MatmulTuning mm(p);
  const std::string config = rt.chooser().choose(mm).config;
  std::unique_ptr<tuner::Harness> harness = make_harness(rt, mm);
  tuner::TimerOptions raw, at_peak;
  at_peak.at_peak_clock = true;
  const tuner::Measured r = tuner::measure(*harness, {config}, rt.device(), raw).at(0);
  const tuner::Measured s = tuner::measure(*harness, {config}, rt.device(), at_peak).at(0);
  ASSERT_TRUE(r.ok() && s.ok()) << r.error << s.error;
  const double peak_mhz = rt.device().sm_clock_khz / 1e3;
  EXPECT_EQ(r.summary.clock_mhz, 0);
  EXPECT_GT(s.summary.clock_mhz, 0.3 * peak_mhz) << s.summary.to_string();
  EXPECT_LE(s.summary.clock_mhz, 1.02 * peak_mhz) << s.summary.to_string();
  if (std::getenv("KJIT_SANITIZER") == nullptr) {
    const double expected = r.summary.median_ms * s.summary.clock_mhz / peak_mhz;
    EXPECT_NEAR(s.summary.median_ms / expected, 1.0, 0.1)
        << "raw " << r.summary.to_string() << ", scaled " << s.summary.to_string();
  }
}

// Attention with score and mask modifiers through the tuner's harness: the operands
// are made and uploaded with the inputs, every measured config passes the check
// against the fp64 twins, forward and backward.
TEST_F(TunerGpu, AttentionWithModifiersIsMeasuredAndChecked) {
  Runtime& rt = runtime();
  tuner::TuneOptions options;
  options.top = 2;
  options.timer.rounds = 2;
  options.timer.runs_per_round = 3;
  for (const bool backward : {false, true}) {
    attention::Problem p;
    p.batch = 2;
    p.heads = 4;
    p.kv_heads = 2;
    p.seq_q = p.seq_k = 700;
    p.head_dim = 64;
    p.backward = backward;
    p.score_mod = "slope:f32[heads]; s - slope * abs(q_idx - kv_idx)";
    p.mask_mod = "(kv_idx <= q_idx) * (q_idx - kv_idx < 200)";
    const tuner::AttentionTuning problem(p);
    SCOPED_TRACE(problem.signature());
    const tuner::TuneResult r =
        tuner::tune(problem, rt.chooser(), in_process_measurer(rt), options);
    ASSERT_FALSE(r.config.empty());
    for (const tuner::Measured& m : r.trials) EXPECT_TRUE(m.ok()) << m.config << ": " << m.error;
  }
}

// Strided inputs through the harness (the coalescing lesson): the values are
// scattered to their strided places, the kernel reads them through the strided
// pattern and passes the check; every 32nd float is slower per useful byte than
// contiguous ones, and a transposed read slower than a straight one.
TEST_F(TunerGpu, StridedInputsAreMeasuredAndChecked) {
  Runtime& rt = runtime();
  auto median_ms = [&](const nlohmann::json& spec) {
    const std::unique_ptr<tuner::TuningProblem> problem = tuner::make_problem(spec);
    const std::string config = rt.chooser().choose(*problem).config;
    std::unique_ptr<tuner::Harness> harness = make_harness(rt, *problem);
    const std::vector<tuner::Measured> m =
        tuner::measure(*harness, {config}, rt.device(), tuner::TimerOptions{});
    EXPECT_EQ(m.size(), 1u);
    EXPECT_TRUE(!m.empty() && m[0].ok())
        << problem->signature() << ": " << (m.empty() ? "" : m[0].error);
    return m.empty() ? 0.0 : m[0].summary.median_ms;
  };
  auto copy = [](int64_t stride) {
    return nlohmann::json{{"family", "elementwise"},
                          {"expr", "x:f32[n]; y = x"},
                          {"sizes", {{"n", 1 << 22}}},
                          {"strides", {{"x", {stride}}}}};
  };
  // Under compute-sanitizer (tools/device/sanitize.sh sets KJIT_SANITIZER) every
  // access is instrumented and times say nothing about coalescing: values only.
  const bool timed = std::getenv("KJIT_SANITIZER") == nullptr;
  const double unit = median_ms(copy(1)), far = median_ms(copy(32));
  if (timed) {
    EXPECT_GT(far, 2 * unit);
  }
  auto square = [](int64_t s0, int64_t s1) {
    return nlohmann::json{{"family", "elementwise"},
                          {"expr", "x:f32[m,n]; y = x * 2"},
                          {"sizes", {{"m", 2048}, {"n", 2048}}},
                          {"strides", {{"x", {s0, s1}}}}};
  };
  const double straight = median_ms(square(2048, 1)), transposed = median_ms(square(1, 2048));
  if (timed) {
    EXPECT_GT(transposed, straight);
  }
  std::printf("copy: stride 1 %.4f ms, stride 32 %.4f ms; 2048^2: straight %.4f, transposed %.4f\n",
              unit, far, straight, transposed);
}

}  // namespace
}  // namespace kjit
