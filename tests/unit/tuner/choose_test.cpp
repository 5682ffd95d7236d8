// Where configs come from: the store's tuning, the nearest tuned problem of the
// same class, the model — over a real SQLite store.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "kjit/cache/store.h"
#include "kjit/tuner/choose.h"
#include "kjit/tuner/matmul_space.h"
#include "kjit/tuner/measure.h"
#include "kjit/tuner/tune.h"

namespace kjit::tuner {
namespace {

namespace fs = std::filesystem;

class ChooserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "kjit-tuner-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    store_ = cache::Store::open(dir_ + "/kjit.db");
  }
  void TearDown() override { fs::remove_all(dir_); }

  static MatmulTuning square(int64_t size) {
    matmul::Problem p;
    p.m = p.n = p.k = size;
    p.aligned = packed_operands_aligned(p);
    return MatmulTuning(p);
  }
  void tune_to(const TuningProblem& problem, const std::string& config, double ms = 0.5) {
    cache::TuningRecord t;
    t.gpu_model = kModel;
    t.problem = problem.signature();
    t.config = config;
    t.measured = {ms, 0.01, 25};
    t.tuner_version = "test";
    store_->put_tuning(t);
  }

  static constexpr const char* kModel = "NVIDIA H200 cc9.0 132SM";
  std::string dir_;
  std::shared_ptr<cache::Store> store_;
  const cuda::DeviceProperties h200_ = cuda::planning_device("h200");
};

const std::string kSmall = "bm=128,bn=128,bk=64,warps=12,wm=2,stages=3,splitk=1,mma=wgmma";

// The model's fastest predicted swap=ab config of a problem when it ranks first
// (over every candidate, search-only ones too), else "".
std::string chooser_rank_front_swapped(const MatmulTuning& problem) {
  Chooser ranking(cache::Store::disabled("unit test"), "test", cuda::planning_device("h200"));
  const std::string front = ranking.rank(problem).front().first;
  return front.find("swap=ab") != std::string::npos ? front : "";
}

TEST_F(ChooserTest, ModelWhenNothingIsTuned) {
  Chooser chooser(store_, kModel, h200_);
  const Choice c = chooser.choose(square(4096));
  EXPECT_EQ(c.source, Choice::Source::Model);
  EXPECT_NE(c.detail.find("predicted"), std::string::npos);
  EXPECT_EQ(chooser.rank(square(4096)).front().first, c.config);
}

// A search-only candidate (swap=ab, not yet measured on a GPU) is passed over by
// the model's untuned pick, which says so, even where it is predicted fastest; once
// it has passed a trial on this GPU model (a failed one does not count) it may be
// the default.
TEST_F(ChooserTest, SearchOnlyCandidatesAreNotDefaultsUntilMeasured) {
  matmul::Problem p;
  p.m = 16;
  p.n = 4096;
  p.k = 4096;
  const MatmulTuning decode(p);
  const Space space = decode.space(h200_);
  ASSERT_FALSE(space.search_only.empty());
  const std::string swapped = chooser_rank_front_swapped(decode);
  ASSERT_FALSE(swapped.empty()) << "the model no longer ranks swap=ab first for decode";
  Chooser chooser(store_, kModel, h200_);
  const Choice before = chooser.choose(decode);
  EXPECT_EQ(before.config.find("swap=ab"), std::string::npos) << before.config;
  EXPECT_NE(before.detail.find("search-only until measured"), std::string::npos) << before.detail;

  matmul::Problem other = p;
  other.n = 8192;
  cache::TrialRecord r;
  r.gpu_model = kModel;
  r.problem = MatmulTuning(other).signature();
  r.config = swapped;
  r.tuner_version = kTunerVersion;
  r.error = "wrong result: relative L2 error inf";
  ASSERT_EQ(store_->put_trial(r), cache::PutOutcome::Inserted);
  Chooser failed(store_, kModel, h200_);
  EXPECT_EQ(failed.choose(decode).config, before.config);

  // A pass by an older tuner version (an older kernel behind the same text) does not
  // unlock it either.
  r.error.clear();
  r.measured = {0.02, 0.0001, 25};
  r.tuner_version = "kjit-tuner-0";  // (an import of an older store's row)
  ASSERT_EQ(store_->put_trial(r), cache::PutOutcome::Inserted);
  Chooser older(store_, kModel, h200_);
  EXPECT_EQ(older.choose(decode).config, before.config);

  r.tuner_version = kTunerVersion;  // measured again, by this version: it takes the row
  ASSERT_EQ(store_->put_trial(r), cache::PutOutcome::Inserted);
  Chooser after_trials(store_, kModel, h200_);
  const Choice after = after_trials.choose(decode);
  EXPECT_NE(after.config.find("swap=ab"), std::string::npos) << after.config;
  EXPECT_EQ(after.detail.find("search-only"), std::string::npos) << after.detail;

  // The pass was of layout nn: the same config text in nt (another kernel: its A
  // operand K-major) or f16 has not run, and stays search-only there.
  matmul::Problem nt = p;
  matmul::set_layout(nt, "nt");
  matmul::Problem f16 = p;
  f16.input = f16.output = matmul::DType::F16;
  for (const matmul::Problem& other_class : {nt, f16}) {
    const MatmulTuning t(other_class);
    ASSERT_EQ(chooser_rank_front_swapped(t), swapped) << other_class.to_string();
    EXPECT_EQ(after_trials.choose(t).config.find("swap=ab"), std::string::npos)
        << other_class.to_string();
  }

  // A wrong result for another problem of the class (the same kernel) locks it
  // again, the pass for 16 x 8192 x 4096 notwithstanding; a compile or resource
  // failure does not.
  cache::TrialRecord elsewhere = r;
  matmul::Problem third = p;
  third.n = 2048;
  elsewhere.problem = MatmulTuning(third).signature();
  elsewhere.measured = {};
  elsewhere.error = "kjit_matmul spills 8 bytes to local memory (255 registers)";
  ASSERT_EQ(store_->put_trial(elsewhere), cache::PutOutcome::Inserted);
  Chooser after_spill(store_, kModel, h200_);
  EXPECT_NE(after_spill.choose(decode).config.find("swap=ab"), std::string::npos);
  elsewhere.error =
      "cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal "
      "memory access was encountered";
  ASSERT_EQ(store_->put_trial(elsewhere), cache::PutOutcome::Replaced);
  Chooser after_fault(store_, kModel, h200_);
  EXPECT_EQ(after_fault.choose(decode).config, before.config);

  // The same config failing its check later where it passed (a kernel that is not
  // always right) is the newer verdict: search-only again.
  elsewhere.error = "hung: the check did not finish in 300 s";
  ASSERT_EQ(store_->put_trial(elsewhere), cache::PutOutcome::Replaced);
  Chooser unlocked_again(store_, kModel, h200_);
  ASSERT_NE(unlocked_again.choose(decode).config.find("swap=ab"), std::string::npos);
  r.error = "wrong result: relative L2 error 0.3";
  r.measured = {};
  ASSERT_EQ(store_->put_trial(r), cache::PutOutcome::Replaced);
  Chooser after_failure(store_, kModel, h200_);
  EXPECT_EQ(after_failure.choose(decode).config, before.config);
}

TEST(RefutesKernel, WrongResultsAndFaultsOnly) {
  EXPECT_TRUE(refutes_kernel("wrong result: relative L2 error 0.5"));
  EXPECT_TRUE(refutes_kernel("cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS (700): x"));
  EXPECT_FALSE(refutes_kernel("cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"));
  EXPECT_FALSE(refutes_kernel("hung: the check did not finish in 300 s"));
  EXPECT_FALSE(refutes_kernel(kNotMeasured));
  EXPECT_FALSE(refutes_kernel("kjit_matmul spills 8 bytes to local memory (255 registers)"));
  EXPECT_FALSE(refutes_kernel(""));
}

// A tuning without a passing trial of its config behind it (a hand edit, an import
// of tunings alone) does not carry a search-only config to a near problem.
TEST_F(ChooserTest, ANearTuningDoesNotUnlockASearchOnlyConfig) {
  matmul::Problem p;
  p.m = 16;
  p.n = 4096;
  p.k = 4096;
  const std::string swapped = chooser_rank_front_swapped(MatmulTuning(p));
  ASSERT_FALSE(swapped.empty());
  tune_to(MatmulTuning(p), swapped, 0.012);
  matmul::Problem near = p;
  near.n = 4608;
  Chooser chooser(store_, kModel, h200_);
  EXPECT_EQ(chooser.choose(MatmulTuning(p)).config, swapped);  // its own tuning stands
  const Choice c = chooser.choose(MatmulTuning(near));
  EXPECT_EQ(c.config.find("swap=ab"), std::string::npos) << c.config << " (" << c.detail << ")";
}

// refresh() on one thread while another chooses (a tune ending beside the
// runtime's lookups): the fit a choice is using stays alive (ASan saw it freed).
TEST_F(ChooserTest, RefreshWhileChoosingIsSafe) {
  tune_to(square(4096), kSmall);
  Chooser chooser(store_, kModel, h200_);
  std::atomic<bool> stop{false};
  std::thread refresher([&] {
    while (!stop) chooser.refresh();
  });
  for (int64_t size = 1000; size < 1100; ++size)
    EXPECT_FALSE(chooser.choose(square(size)).config.empty());
  stop = true;
  refresher.join();
}

TEST_F(ChooserTest, ExactTuningThenNearestOfTheClass) {
  Chooser chooser(store_, kModel, h200_);
  // A tuning of 4096^3 to the model's second choice there (as a measurement might).
  const std::string second = chooser.rank(square(4096))[2].first;
  tune_to(square(4096), second);
  chooser.refresh();
  Choice exact = chooser.choose(square(4096));
  EXPECT_EQ(exact.source, Choice::Source::Store);
  EXPECT_EQ(exact.config, second);
  // 4032^3 is aligned too (the same class): the tuning of 4096^3 is the nearest.
  // (Its rows, 63 lines of 128 bytes, are on the lines as 4096's: rows of 4000 are
  // not, and the model then prefers pitch=line to the tuned config read in place.)
  Choice near = chooser.choose(square(4032));
  EXPECT_EQ(near.source, Choice::Source::Nearest);
  EXPECT_EQ(near.config, second);
  EXPECT_NE(near.detail.find("m=4096"), std::string::npos);
  // 4097^3 is misaligned: another class, so the model decides.
  EXPECT_EQ(chooser.choose(square(4097)).source, Choice::Source::Model);
  // Too far: 1024^3 is not near 4096^3 (and has its own waves).
  EXPECT_EQ(chooser.choose(square(1024)).source, Choice::Source::Model);
  // The nearest is by size ratio: 7040 is nearer 8192 than 4096.
  tune_to(square(8192), chooser.rank(square(8192))[0].first);
  chooser.refresh();
  EXPECT_NE(chooser.choose(square(7040)).detail.find("m=8192"), std::string::npos);
  // Another GPU model sees none of it.
  Chooser other(store_, "NVIDIA A100 cc8.0 108SM", cuda::planning_device("a100"));
  EXPECT_EQ(other.choose(square(4096)).source, Choice::Source::Model);
}

// A tuning carries its kernel to a near problem, with the run-time choices the
// model prefers there: 4096^3's tiles for 4000^3, whose rows are off the 128-byte
// lines, with pitch=line; 4104^3's pitch=line tiles for 4160^3, whose rows are on
// them, without (pitch=line is not in its space).
TEST_F(ChooserTest, NearestTakesTheRunTimeTwinTheModelPrefers) {
  const std::string tiles =
      "bm=128,bn=256,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma,schedule=persistent";
  tune_to(square(4096), tiles);
  Chooser chooser(store_, kModel, h200_);
  Choice near = chooser.choose(square(4000));
  EXPECT_EQ(near.source, Choice::Source::Nearest);
  EXPECT_EQ(near.config, tiles + ",pitch=line");
  EXPECT_NE(near.detail.find("run-time options chosen here"), std::string::npos) << near.detail;
  EXPECT_EQ(chooser.choose(square(4032)).config, tiles);  // on the lines: as tuned

  const std::string square_tiles =
      "bm=192,bn=192,bk=64,warps=16,wm=3,stages=4,splitk=1,mma=wgmma,schedule=persistent";
  tune_to(square(4104), square_tiles + ",pitch=line");
  chooser.refresh();
  Choice on_lines = chooser.choose(square(4160));
  EXPECT_EQ(on_lines.source, Choice::Source::Nearest);
  EXPECT_NE(on_lines.detail.find("m=4104"), std::string::npos) << on_lines.detail;
  EXPECT_EQ(on_lines.config, square_tiles);
}

// Near in size but over a wave cliff: 128 x 256 tiles fill 4 waves at 4096^3 and
// spill into a fifth at N = 4224; the model sees it and the tuning is not reused.
TEST_F(ChooserTest, NearestIsNotTakenOverACliff) {
  const std::string big = "bm=128,bn=256,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma";
  tune_to(square(4096), big);
  Chooser chooser(store_, kModel, h200_);
  matmul::Problem p;
  p.m = p.k = 4096;
  p.n = 4224;
  const Choice c = chooser.choose(MatmulTuning(p));
  EXPECT_EQ(c.source, Choice::Source::Model);
  EXPECT_NE(c.config, big);
  EXPECT_NE(c.detail.find("more than 10% slower"), std::string::npos) << c.detail;
}

// The nearest tuned problem over a cliff does not hide a farther one that is not:
// each within reach is tried, nearest first. (Only the nearest was tried, and the
// model decided, with explain saying "nothing tuned for this class".)
TEST_F(ChooserTest, AFartherTunedProblemStandsInWhenTheNearestIsOverACliff) {
  const std::string big = "bm=128,bn=256,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma";
  tune_to(square(4096), big);
  matmul::Problem p;
  p.m = p.k = 4096;
  p.n = 4224;
  matmul::Problem farther = p;
  farther.n = 4608;  // ln(4608 / 4224) = 0.087 away, against 0.031 for 4096
  Chooser chooser(store_, kModel, h200_);
  const std::string fits = chooser.rank(MatmulTuning(p)).front().first;
  ASSERT_NE(fits, big);
  tune_to(MatmulTuning(farther), fits);
  chooser.refresh();
  const Choice c = chooser.choose(MatmulTuning(p));
  EXPECT_EQ(c.source, Choice::Source::Nearest);
  EXPECT_EQ(c.config, fits);
  EXPECT_NE(c.detail.find("n=4608"), std::string::npos) << c.detail;
  // With nothing of the class tuned, the detail says so.
  EXPECT_NE(chooser.choose(square(4097)).detail.find("nothing tuned for this class"),
            std::string::npos);
}

TEST_F(ChooserTest, ChoicesAreRememberedUntilRefresh) {
  Chooser chooser(store_, kModel, h200_);
  EXPECT_EQ(chooser.choose(square(2048)).source, Choice::Source::Model);
  tune_to(square(2048), kSmall);
  EXPECT_EQ(chooser.choose(square(2048)).source, Choice::Source::Model);  // remembered
  chooser.refresh();
  EXPECT_EQ(chooser.choose(square(2048)).source, Choice::Source::Store);
}

// A process that meets ever new problems remembers at most max_remembered choices,
// then starts over.
TEST_F(ChooserTest, RememberedChoicesAreBounded) {
  Chooser chooser(store_, kModel, h200_, 3);
  for (int64_t size : {256, 512, 768}) chooser.choose(square(size));
  EXPECT_EQ(chooser.remembered(), 3u);
  chooser.choose(square(512));  // remembered: no growth
  EXPECT_EQ(chooser.remembered(), 3u);
  chooser.choose(square(1024));  // a fourth: the memory starts over with it
  EXPECT_EQ(chooser.remembered(), 1u);
  EXPECT_EQ(chooser.choose(square(256)).source, Choice::Source::Model);  // chosen again
  EXPECT_EQ(chooser.remembered(), 2u);
}

TEST_F(ChooserTest, AStoredConfigTheProblemCannotRunIsIgnored) {
  tune_to(square(1024), "bm=128,bn=128,tiles=9");  // not a config this version reads
  Chooser chooser(store_, kModel, h200_);
  EXPECT_EQ(chooser.choose(square(1024)).source, Choice::Source::Model);
}

TEST_F(ChooserTest, DisabledStoreStillChooses) {
  Chooser chooser(cache::Store::disabled("test"), kModel, h200_);
  EXPECT_EQ(chooser.choose(square(4096)).source, Choice::Source::Model);
}

}  // namespace
}  // namespace kjit::tuner
