// The attention family in the tuner: its spec and signature rebuild the same
// problem (what workload files, the store and measuring child processes rely on),
// bad specs are user errors, the space matches attention_space, and the model
// ranks the configs measured fastest on the H200 first.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <string>

#include "kjit/cache/store.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/support/error.h"
#include "kjit/tuner/attention_space.h"
#include "kjit/tuner/choose.h"
#include "kjit/tuner/family.h"

namespace kjit::tuner {
namespace {

attention::Problem benchmark_shape(bool causal) {
  attention::Problem p;
  p.batch = 8;
  p.heads = 16;
  p.kv_heads = 16;
  p.seq_q = p.seq_k = 2048;
  p.head_dim = 128;
  p.causal = causal;
  return p;
}

// The backward of 16k tokens a batch at sequence length `seq`, with a window of
// `window_left` keys to the left and none to the right where window_left >= 0.
attention::Problem backward_shape(int64_t seq, bool causal, int64_t window_left) {
  attention::Problem p = benchmark_shape(causal);
  p.batch = 16384 / seq;
  p.seq_q = p.seq_k = seq;
  p.window_left = window_left;
  if (window_left >= 0) p.window_right = 0;
  p.backward = true;
  return p;
}

// The model's predictions (ms; the H100's datasheet, nothing measured) for the
// backward's two dQ modes on its usual tile.
struct DqModes {
  double atomic, separate;
};
DqModes predicted_dq_modes(const attention::Problem& p) {
  const cuda::DeviceProperties h100 = cuda::planning_device("h100");
  const AttentionTuning tuning(p);
  auto ms = [&](const char* config) {
    return tuning.predict(config, h100, Efficiencies{}, nullptr).ms;
  };
  return {ms("mma=wgmma,bm=64,bn=128,stages=2,dq=atomic"), ms("mma=wgmma,bm=64,bn=128,stages=2")};
}

TEST(AttentionTuning, SpecAndSignatureRebuildTheProblem) {
  std::vector<attention::Problem> problems = {benchmark_shape(false), benchmark_shape(true)};
  attention::Problem gqa = benchmark_shape(false);
  gqa.heads = 32;
  gqa.kv_heads = 8;
  gqa.seq_k = 1000;
  gqa.window_left = 256;
  gqa.window_right = 0;
  gqa.dtype = ir::DType::F16;
  gqa.head_dim = 64;
  gqa.scale = 0.25;
  problems.push_back(gqa);
  attention::Problem packed = benchmark_shape(true);
  packed.set_lengths({1, 7, 300, 2049}, {5, 7, 1000, 17});
  problems.push_back(packed);
  attention::Problem same_bits = benchmark_shape(true);
  same_bits.backward = same_bits.deterministic = true;
  problems.push_back(same_bits);
  for (const attention::Problem& p : problems) {
    const AttentionTuning tuning(p);
    SCOPED_TRACE(tuning.signature());
    EXPECT_EQ(tuning.family(), "attention");
    const std::unique_ptr<TuningProblem> from_spec = make_problem(tuning.spec());
    EXPECT_EQ(from_spec->signature(), tuning.signature());
    const std::unique_ptr<TuningProblem> from_signature =
        problem_from_signature(tuning.signature());
    ASSERT_NE(from_signature, nullptr);
    EXPECT_EQ(from_signature->signature(), tuning.signature());
    EXPECT_EQ(from_signature->problem_class(), tuning.problem_class());
  }
  EXPECT_NE(AttentionTuning(benchmark_shape(true)).problem_class(),
            AttentionTuning(benchmark_shape(false)).problem_class());
  EXPECT_EQ(problem_from_signature("m=1,n=2"), nullptr);
}

// Modifiers travel in workload specs and make a problem (and its class) of their own;
// their signature carries only the modifiers' keys, so it does not rebuild the
// problem (the nearest-tuned search then leaves it to the model).
TEST(AttentionTuning, ModifiersAreInTheSpecAndTheClass) {
  attention::Problem p = benchmark_shape(true);
  p.score_mod = "slope:f32[heads]; s - slope * abs(q_idx - kv_idx)";
  p.mask_mod = "kv_idx <= q_idx";
  const AttentionTuning tuning(p);
  EXPECT_EQ(tuning.spec().at("score_mod"), p.score_mod);
  EXPECT_EQ(tuning.spec().at("mask_mod"), p.mask_mod);
  const std::unique_ptr<TuningProblem> from_spec = make_problem(tuning.spec());
  EXPECT_EQ(from_spec->signature(), tuning.signature());
  EXPECT_NE(tuning.problem_class(), AttentionTuning(benchmark_shape(true)).problem_class());
  EXPECT_NE(tuning.signature().find(",mask_mod="), std::string::npos);
  EXPECT_EQ(problem_from_signature(tuning.signature()), nullptr);
  using nlohmann::json;
  EXPECT_THROW(
      make_problem(json{{"family", "attention"}, {"seq_q", 64}, {"mask_mod", "kv_idx <= s"}}),
      UserError);
  EXPECT_THROW(make_problem(json{{"family", "attention"}, {"seq_q", 64}, {"score_mod", 3}}),
               UserError);
}

// Packed batches are tuned as their length profile: a training loop whose batches
// differ in their lengths shares one tuning per profile (with KJIT_TUNE=1 it tuned
// every batch it met, and the store kept a row per batch).
TEST(AttentionTuning, PackedBatchesAreTunedAsTheirLengthProfile) {
  attention::Problem p = benchmark_shape(true);
  p.set_lengths({1, 7, 300, 2049}, {5, 7, 1000, 17});
  // Four sequences; queries: the longest 2049 -> 2560, the others' mean
  // ceil(308 / 3) = 103 -> 112; keys: 1000 -> 1024, ceil(29 / 3) = 10 -> 10.
  const attention::Problem profile = length_profile(p);
  EXPECT_EQ(profile.cu_seqlens_q, (std::vector<int64_t>{0, 2560, 2672, 2784, 2896}));
  EXPECT_EQ(profile.cu_seqlens_k, (std::vector<int64_t>{0, 1024, 1034, 1044, 1054}));
  const AttentionTuning tuning(p);
  EXPECT_NE(tuning.signature().find(",packed=q:2560+112x3/k:1024+10x3,"), std::string::npos)
      << tuning.signature();
  EXPECT_EQ(tuning.signature(), profile.to_string());
  EXPECT_EQ(tuning.problem().cu_seqlens_q, p.cu_seqlens_q);  // runs as given
  const std::unique_ptr<TuningProblem> as = tuning.tuned_as();
  ASSERT_NE(as, nullptr);
  EXPECT_EQ(as->signature(), tuning.signature());
  EXPECT_EQ(as->tuned_as(), nullptr);  // a profile's profile is itself
  EXPECT_EQ(length_profile(profile).cu_seqlens_q, profile.cu_seqlens_q);

  // Another batch of the same profile shares the signature; a longer one does not.
  attention::Problem same = benchmark_shape(true);
  same.set_lengths({90, 2100, 8, 209}, {9, 900, 9, 11});
  EXPECT_EQ(AttentionTuning(same).signature(), tuning.signature());
  attention::Problem longer = same;
  longer.set_lengths({90, 2600, 8, 209}, {9, 900, 9, 11});
  EXPECT_NE(AttentionTuning(longer).signature(), tuning.signature());

  // Self-attention stays self-attention ({8, 4, 4}: the others' mean is 4); counts
  // and lengths up to 8 are exact; 9 sequences are tuned as 10.
  attention::Problem self = benchmark_shape(false);
  self.set_lengths({3, 8, 5});
  EXPECT_EQ(length_profile(self).cu_seqlens_q, (std::vector<int64_t>{0, 8, 12, 16}));
  EXPECT_EQ(length_profile(self).cu_seqlens_k, length_profile(self).cu_seqlens_q);
  self.set_lengths(std::vector<int64_t>(9, 64));
  EXPECT_EQ(length_profile(self).batch, 10);
  EXPECT_EQ(length_profile(self).seq_q, 64);
  EXPECT_EQ(AttentionTuning(self).tuned_as()->signature(), AttentionTuning(self).signature());

  // Unpacked problems are their own profile.
  EXPECT_EQ(AttentionTuning(benchmark_shape(true)).tuned_as(), nullptr);

  // 57 345 to 65 535 sequences rounded up to 65 536, a batch the kernels refuse:
  // such a batch could not be planned. The count stops at 65 535.
  attention::Problem many = benchmark_shape(false);
  many.set_lengths(std::vector<int64_t>(60000, 1));
  EXPECT_EQ(length_profile(many).batch, attention::kMaxBatch);
  EXPECT_NO_THROW(attention::validate_problem(length_profile(many)));
  EXPECT_NO_THROW(AttentionTuning{many}.signature());
  // Empty sequences (offsets may repeat): the others' mean was 0, a length that
  // set_lengths refused, so the batch could not be planned either.
  attention::Problem empty = benchmark_shape(false);
  empty.set_lengths({100, 1});
  empty.cu_seqlens_q = empty.cu_seqlens_k = {0, 100, 100};
  ASSERT_NO_THROW(attention::validate_problem(empty));
  EXPECT_EQ(length_profile(empty).cu_seqlens_q, (std::vector<int64_t>{0, 112, 113}));
  EXPECT_NO_THROW(AttentionTuning{empty}.signature());

  // The chooser finds a tuning of the profile for any batch of it.
  std::string dir = (std::filesystem::temp_directory_path() / "kjit-profile-XXXXXX").string();
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  {
    std::shared_ptr<cache::Store> store = cache::Store::open(dir + "/kjit.db");
    const cuda::DeviceProperties h200 = cuda::planning_device("h200");
    const std::string model = "NVIDIA H200 cc9.0 132SM";
    const std::string tuned = "mma=wgmma,bm=128,bn=64,stages=2";
    cache::TuningRecord record;
    record.gpu_model = model;
    record.problem = as->signature();
    record.config = tuned;
    record.measured = {0.5, 0.01, 25};
    record.tuner_version = "test";
    store->put_tuning(record);
    Chooser chooser(store, model, h200);
    for (const attention::Problem& batch : {p, same}) {
      const Choice choice = chooser.choose(AttentionTuning(batch));
      EXPECT_EQ(choice.source, Choice::Source::Store);
      EXPECT_EQ(choice.config, tuned);
    }
  }
  std::filesystem::remove_all(dir);
}

// The nearest tuned problem of a class compares the window's width and the K/V
// heads too. A 64-key window at 8k keys took an 8191-key window's tuning at the
// same sizes (about 64 times the work) over a 64-key window's at 9000; 32 query
// heads over one K/V head took a tuning with 32 K/V heads over one with one.
TEST(AttentionTuning, TheNearestTunedProblemHasTheWindowAndKvHeadsNear) {
  const cuda::DeviceProperties h200 = cuda::planning_device("h200");
  const std::string model = "NVIDIA H200 cc9.0 132SM";
  std::string dir = (std::filesystem::temp_directory_path() / "kjit-nearest-XXXXXX").string();
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  {
    std::shared_ptr<cache::Store> store = cache::Store::open(dir + "/kjit.db");
    auto shape = [](int64_t seq, int64_t kv_heads, int64_t left, bool causal) {
      attention::Problem p = benchmark_shape(causal);
      p.batch = 1;
      p.heads = 32;
      p.kv_heads = kv_heads;
      p.seq_q = p.seq_k = seq;
      p.window_left = left;
      p.window_right = left >= 0 ? 0 : -1;
      return p;
    };
    Chooser ranking(std::shared_ptr<cache::Store>(cache::Store::disabled("a test")), model, h200);
    auto tune = [&](const attention::Problem& tuned, const attention::Problem& asked) {
      cache::TuningRecord record;
      record.gpu_model = model;
      record.problem = AttentionTuning(tuned).signature();
      record.config = ranking.rank(AttentionTuning(asked)).front().first;  // within 10% there
      record.measured = {0.5, 0.01, 25};
      record.tuner_version = "test";
      store->put_tuning(record);
    };
    const attention::Problem window = shape(8192, 32, 64, false);
    tune(shape(8192, 32, 8191, false), window);
    tune(shape(9000, 32, 64, false), window);
    const attention::Problem mqa = shape(2048, 1, -1, true);
    tune(shape(2048, 32, -1, true), mqa);
    tune(shape(2100, 1, -1, true), mqa);
    Chooser chooser(store, model, h200);
    const Choice near_window = chooser.choose(AttentionTuning(window));
    EXPECT_EQ(near_window.source, Choice::Source::Nearest);
    EXPECT_NE(near_window.detail.find("seq_q=9000"), std::string::npos) << near_window.detail;
    const Choice near_mqa = chooser.choose(AttentionTuning(mqa));
    EXPECT_EQ(near_mqa.source, Choice::Source::Nearest);
    EXPECT_NE(near_mqa.detail.find("seq_q=2100"), std::string::npos) << near_mqa.detail;
  }
  std::filesystem::remove_all(dir);
}

// A stored signature names its packed lengths in runs ("320x39"); one naming more
// sequences than a tuner would rebuild is not read.
TEST(AttentionTuning, PackedSignaturesSpellRunsOfLengths) {
  attention::Problem p = benchmark_shape(false);
  std::vector<int64_t> lengths(40, 300);
  lengths[7] = 2049;
  p.set_lengths(lengths);
  const std::string exact = p.to_string();
  EXPECT_NE(exact.find("packed=q:300x7+2049+300x32/k:300x7+2049+300x32,"), std::string::npos)
      << exact;
  const std::unique_ptr<TuningProblem> rebuilt = problem_from_signature(exact);
  ASSERT_NE(rebuilt, nullptr);
  const auto& problem = dynamic_cast<const AttentionTuning&>(*rebuilt).problem();
  EXPECT_EQ(problem.cu_seqlens_q, p.cu_seqlens_q);
  EXPECT_EQ(problem.cu_seqlens_k, p.cu_seqlens_k);
  std::string huge = exact;
  for (size_t at; (at = huge.find("300x32")) != std::string::npos;)
    huge.replace(at, 6, "1x2000000");
  EXPECT_EQ(problem_from_signature(huge), nullptr);
  std::string bad = exact;
  bad.replace(bad.find("300x32/"), 7, "300x/");
  EXPECT_EQ(problem_from_signature(bad), nullptr);
}

TEST(AttentionTuning, BadSpecsAreUserErrors) {
  using nlohmann::json;
  EXPECT_THROW(make_problem(json{{"family", "attention"}}), UserError);  // no seq_q
  // A head dim past an int wrapped (2^32 + 128 read as 128).
  EXPECT_THROW(make_problem(json{{"family", "attention"}, {"seq_q", 64}, {"head_dim", 4294967424}}),
               UserError);
  // As on the command line (--deterministic needs --backward); accepted before.
  EXPECT_THROW(make_problem(json{{"family", "attention"}, {"seq_q", 64}, {"deterministic", true}}),
               UserError);
  EXPECT_NO_THROW(make_problem(
      json{{"family", "attention"}, {"seq_q", 64}, {"backward", true}, {"deterministic", true}}));
  EXPECT_THROW(make_problem(json{{"family", "attention"}, {"seq_q", 64}, {"rows", 1}}), UserError);
  EXPECT_THROW(make_problem(json{{"family", "attention"}, {"seq_q", 64}, {"head_dim", 80}}),
               UserError);
  EXPECT_THROW(make_problem(json{{"family", "attention"}, {"seq_q", 64}, {"window", "x"}}),
               UserError);
  EXPECT_THROW(make_problem(json{{"family", "attention"}, {"seqlens_q", json::array({1, 0})}}),
               UserError);
  EXPECT_THROW(
      make_problem(json{{"family", "attention"}, {"seq_q", 64}, {"heads", 6}, {"kv_heads", 4}}),
      UserError);
  EXPECT_NO_THROW(make_problem(json{{"family", "attention"}, {"seq_q", 64}, {"window", "8:inf"}}));
}

TEST(AttentionTuning, TheModelRanksTheMeasuredBestFirst) {
  const cuda::DeviceProperties h200 = cuda::planning_device("h200");
  for (const bool causal : {false, true}) {
    const AttentionTuning tuning(benchmark_shape(causal));
    const Space space = tuning.space(h200);
    EXPECT_EQ(space.candidates.size(), attention_space(tuning.problem(), h200).size());
    for (const Pruned& p : space.pruned) EXPECT_FALSE(p.reason.empty()) << p.config;
    // The H200's fastest config (docs/perf/2026-12-02-h200-attention-persistent.md):
    // persistent blocks, causal too (query tiles in pairs of equal work).
    const Efficiencies priors;
    std::string best;
    double best_ms = 0;
    for (const std::string& c : space.candidates) {
      const Prediction prediction = tuning.predict(c, h200, priors);
      EXPECT_GT(prediction.ms, 0) << c;
      if (best.empty() || prediction.ms < best_ms) {
        best = c;
        best_ms = prediction.ms;
      }
    }
    EXPECT_EQ(best, "mma=wgmma,bm=128,bn=128,stages=2,pingpong=1,persistent=1");
    EXPECT_EQ(attention_default(tuning.problem(), h200).to_string(), best);
    // The chooser with nothing tuned takes the model's choice.
    Chooser chooser(std::shared_ptr<cache::Store>(cache::Store::disabled("a test")),
                    "NVIDIA H200 cc9.0 132SM", h200);
    EXPECT_EQ(chooser.choose(tuning).config, best);
    EXPECT_EQ(chooser.choose(tuning).source, Choice::Source::Model);
  }
  // Without sm_90: mma.sync.
  const AttentionTuning a100(benchmark_shape(false));
  EXPECT_EQ(attention_default(a100.problem(), cuda::planning_device("a100")).wgmma, false);
}

// The backward's model against what the H100 measured (kjit bench, 2026-12-06, at
// 0464dcf: docs/perf/2026-12-06-h100-backward-edge-select.md): within 10% of the
// measured time where the model's prior alone predicts, and the atomic dQ first. The
// model counts the prep and dQ-finishing passes (memory, overlapping nothing) and each
// dK/dV block's fixed time; without them it predicted 0.285 ms for the 256-key window
// on the H200 (measured 0.491) and 0.761 ms causal (1.018)
// (docs/perf/2026-12-04-h200-dq-sums-first-store.md). The same problems on the H200
// took 1.626, 0.979, 0.473 and 2.400 ms at 4262cfe, before the dK/dV kernel's edge
// test became a select (1.06-1.30x on the H100; not measured on an H200 yet).
TEST(AttentionTuning, TheBackwardModelCountsItsPassesAndBlocks) {
  const cuda::DeviceProperties h100 = cuda::planning_device("h100");
  struct Measured {
    const char* name;
    int64_t seq, heads, kv_heads;
    int head_dim;
    bool causal;
    int64_t window_left;
    const char* mask_mod;
    double ms;
    const char* score_mod = "";
  };
  const char* window = "(kv_idx <= q_idx) * (q_idx - kv_idx < 256)";
  const char* alibi = "slope:f32[heads]; s - slope * abs(q_idx - kv_idx)";
  const Measured cases[] = {
      {"S 2k", 2048, 16, 16, 128, false, -1, "", 1.4241},
      {"S 512", 512, 16, 16, 128, false, -1, "", 0.5535},
      {"S 2k causal", 2048, 16, 16, 128, true, -1, "", 0.8912},
      {"S 8k causal", 8192, 16, 16, 128, true, -1, "", 2.6594},
      {"GQA 32 x 8, S 4k", 4096, 32, 8, 128, false, -1, "", 5.4244},
      {"256-key window mask", 2048, 16, 16, 128, false, -1, window, 0.4761},
      {"--window 255:0", 2048, 16, 16, 128, false, 255, "", 0.4837},
      {"--window 255:0, S 8k", 8192, 16, 16, 128, false, 255, "", 0.4969},
      {"D 64", 2048, 32, 32, 64, false, -1, "", 1.8464},
      {"D 64, --window 255:0", 2048, 32, 32, 64, false, 255, "", 0.5844},
      // A score modifier whose mod' is a constant, since it tests the built-in masks'
      // edges in their loop of their own (docs/perf/2026-12-06-h100-alibi-backward-edge-loop.md).
      {"ALiBi, S 2k", 2048, 16, 16, 128, false, -1, "", 1.4673, alibi},
      {"ALiBi, S 8k", 8192, 16, 16, 128, false, -1, "", 5.0866, alibi},
      {"ALiBi, S 2k causal", 2048, 16, 16, 128, true, -1, "", 0.8959, alibi},
      {"ALiBi, --window 255:0", 2048, 16, 16, 128, false, 255, "", 0.4916, alibi},
  };
  for (const Measured& m : cases) {
    SCOPED_TRACE(m.name);
    attention::Problem p = backward_shape(m.seq, m.causal, m.window_left);
    p.heads = m.heads;
    p.kv_heads = m.kv_heads;
    p.head_dim = m.head_dim;
    p.mask_mod = m.mask_mod;
    p.score_mod = m.score_mod;
    const attention::Config chosen = attention_default(p, h100);
    EXPECT_TRUE(chosen.atomic_dq) << chosen.to_string();
    const double predicted = AttentionTuning(p).predict(chosen, h100, Efficiencies{}, nullptr).ms;
    EXPECT_NEAR(predicted / m.ms, 1.0, 0.10)
        << predicted << " ms predicted, " << m.ms << " ms measured";
  }
}

// The separate dQ since its kernel finds the built-in masks' kept scores ahead of them
// (H100, 2026-12-06, docs/perf/2026-12-06-h100-alibi-backward-edge-loop.md): the
// model within 10% of each, and the atomic dQ ahead of it, as measured (1.02-1.05x:
// 1.4363, 0.9044 and 0.4865 ms).
TEST(AttentionTuning, TheSeparateDqFollowsItsMeasuredSpeed) {
  const cuda::DeviceProperties h100 = cuda::planning_device("h100");
  struct Measured {
    const char* name;
    bool causal;
    int64_t window_left;
    double separate_ms;
  };
  const Measured cases[] = {
      {"no mask", false, -1, 1.5006},
      {"causal", true, -1, 0.9536},
      {"--window 255:0", false, 255, 0.4967},
  };
  for (const Measured& m : cases) {
    SCOPED_TRACE(m.name);
    const attention::Problem p = backward_shape(2048, m.causal, m.window_left);
    const DqModes predicted = predicted_dq_modes(p);
    EXPECT_NEAR(predicted.separate / m.separate_ms, 1.0, 0.10)
        << predicted.separate << " ms predicted";
    EXPECT_LT(predicted.atomic, predicted.separate);
    EXPECT_TRUE(attention_default(p, h100).atomic_dq);
  }
}

// A score modifier whose mod' varies (soft-capping) costs the backward per score, and
// the separate dQ twice: its dQ kernel evaluates the modifier and mod' again. Since
// a737552 priced the separate dQ faster (1.15, fitted without a modifier), the model
// took it for soft-capping at S = 2k: 2.1256 ms on the H100, where it predicted 1.637
// (and the atomic dQ 1.651; session 34, call 1:
// docs/perf/2026-12-06-h100-status-and-mma-edge-loop.md). The atomic dQ's figures:
// 8k from that call, causal from docs/perf/2026-12-06-h100-alibi-backward-edge-loop.md
// (the same kernels).
TEST(AttentionTuning, AVaryingDerivativeIsPricedAndKeepsTheAtomicDq) {
  const cuda::DeviceProperties h100 = cuda::planning_device("h100");
  struct Measured {
    const char* name;
    int64_t seq;
    bool causal;
    double atomic_ms, separate_ms;  // 0: not measured
  };
  const Measured cases[] = {
      {"S 2k", 2048, false, 0, 2.1256},
      {"S 2k causal", 2048, true, 1.0603, 0},
      {"S 8k", 8192, false, 6.3731, 0},
  };
  for (const Measured& m : cases) {
    SCOPED_TRACE(m.name);
    attention::Problem p = backward_shape(m.seq, m.causal, -1);
    p.score_mod = "tanh(s / 50) * 50";
    const DqModes predicted = predicted_dq_modes(p);
    if (m.atomic_ms > 0) {
      EXPECT_NEAR(predicted.atomic / m.atomic_ms, 1.0, 0.05) << predicted.atomic << " ms predicted";
    }
    if (m.separate_ms > 0) {
      EXPECT_NEAR(predicted.separate / m.separate_ms, 1.0, 0.05)
          << predicted.separate << " ms predicted";
    }
    EXPECT_LT(predicted.atomic * 1.1, predicted.separate);
    EXPECT_TRUE(attention_default(p, h100).atomic_dq) << attention_default(p, h100).to_string();
  }
}

// The built-in window priced by the tiles it visits, as the mask modifier that spells
// it (the H100 at 6f91308, before the edge select: docs/perf/2026-12-06-h100-backward-dq-modes.md).
// The model had counted the built-in window's kept pairs only (two thirds of what its
// tiles compute) and predicted it 25% short, so that the separate dQ (its dQ kernel's
// blocks counted as cheaply) came first: 1.11x (S 2k) and 1.13x (8k) slower than the
// atomic dQ. (The edge select has since made the atomic dQ faster still.)
TEST(AttentionTuning, TheBackwardModelCountsTheTilesAWindowVisits) {
  const cuda::DeviceProperties h100 = cuda::planning_device("h100");
  struct Measured {
    const char* name;
    int64_t seq;
    int64_t window_left;
    const char* mask_mod;
  };
  const Measured cases[] = {
      {"--window 255:0, S 2k", 2048, 255, ""},
      {"--window 255:0, S 8k", 8192, 255, ""},
      {"window mask, S 8k", 8192, -1, "(kv_idx <= q_idx) * (q_idx - kv_idx < 256)"},
  };
  for (const Measured& m : cases) {
    SCOPED_TRACE(m.name);
    attention::Problem p = backward_shape(m.seq, false, m.window_left);
    p.mask_mod = m.mask_mod;
    // The same tiles, whichever way the window is written.
    attention::Problem spelled = p;
    spelled.window_left = spelled.window_right = -1;
    spelled.mask_mod = "(kv_idx <= q_idx) * (q_idx - kv_idx < 256)";
    EXPECT_NEAR(attention::visited_tile_fraction(p, 128, 128),
                attention::visited_tile_fraction(spelled, 128, 128), 1e-12);
    const AttentionTuning tuning(p);
    const attention::Config atomic =
        attention::Config::parse("mma=wgmma,bm=64,bn=128,stages=2,dq=atomic");
    const attention::Config separate = attention::Config::parse("mma=wgmma,bm=64,bn=128,stages=2");
    EXPECT_LT(tuning.predict(atomic, h100, Efficiencies{}, nullptr).ms,
              tuning.predict(separate, h100, Efficiencies{}, nullptr).ms);
    EXPECT_TRUE(attention_default(p, h100).atomic_dq) << attention_default(p, h100).to_string();
  }
}

// Configs the model ties (a 256-key window on the H100's DRAM floor: four wgmma
// configs at the same ms) are ranked by the term under the floor, and the chooser
// agrees with attention_default. The H100 ran 128 x 128 ping-pong 0.149 ms at S = 2k,
// the space's first of the four (128 x 64 ping-pong) 0.164 (2026-12-06).
TEST(AttentionTuning, TiesGoToTheLeastWorkUnderTheFloor) {
  const cuda::DeviceProperties h100 = cuda::planning_device("h100");
  attention::Problem p = benchmark_shape(false);
  p.batch = 8;
  p.seq_q = p.seq_k = 2048;
  p.window_left = 255;
  p.window_right = 0;
  const AttentionTuning tuning(p);
  const Efficiencies priors;
  const Prediction wide =
      tuning.predict("mma=wgmma,bm=128,bn=128,stages=2,pingpong=1,persistent=1", h100, priors);
  const Prediction narrow =
      tuning.predict("mma=wgmma,bm=128,bn=64,stages=2,pingpong=1,persistent=1", h100, priors);
  ASSERT_EQ(wide.ms, narrow.ms);  // the tie this test is about
  EXPECT_LT(wide.compute_ms, narrow.compute_ms);
  EXPECT_TRUE(predicted_faster(wide, narrow));
  EXPECT_FALSE(predicted_faster(narrow, wide));
  EXPECT_FALSE(predicted_faster(wide, wide));
  const std::string best = "mma=wgmma,bm=128,bn=128,stages=2,pingpong=1,persistent=1";
  EXPECT_EQ(attention_default(p, h100).to_string(), best);
  Chooser chooser(std::shared_ptr<cache::Store>(cache::Store::disabled("a test")),
                  "NVIDIA H100 80GB HBM3 cc9.0 132SM", h100);
  EXPECT_EQ(chooser.choose(tuning).config, best);
  EXPECT_EQ(chooser.rank(tuning).front().first, best);
}

}  // namespace
}  // namespace kjit::tuner
