// Spaces, pruning with reasons, the model's terms (occupancy, waves, split-K,
// memory) and its refit from trials. Everything on datasheet devices, no GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <set>

#include "kjit/cache/records.h"
#include "kjit/compiler/lowering/matmul_epilogue.h"
#include "kjit/support/error.h"
#include "kjit/tuner/attention_space.h"
#include "kjit/tuner/elementwise_space.h"
#include "kjit/tuner/fit.h"
#include "kjit/tuner/matmul_space.h"

namespace kjit::tuner {
namespace {

const cuda::DeviceProperties h200 = cuda::planning_device("h200");
const cuda::DeviceProperties a100 = cuda::planning_device("a100");

matmul::Problem matmul_problem(int64_t m, int64_t n, int64_t k) {
  matmul::Problem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.aligned = packed_operands_aligned(p);
  return p;
}

double predicted(const matmul::Problem& p, const std::string& config,
                 const Efficiencies& e = Efficiencies()) {
  return MatmulTuning(p).predict(config, h200, e).ms;
}

std::string best_of(const TuningProblem& problem, const cuda::DeviceProperties& device) {
  std::string best;
  double best_ms = 0;
  for (const std::string& c : problem.space(device).candidates) {
    const double ms = problem.predict(c, device, Efficiencies()).ms;
    if (best.empty() || ms < best_ms) best = c, best_ms = ms;
  }
  return best;
}

TEST(Model, OccupancyNamesItsLimiter) {
  const Occupancy smem = occupancy({384, 80, 197696, false}, h200);
  EXPECT_EQ(smem.blocks_per_sm, 1);
  EXPECT_EQ(smem.limiter, "shared memory");
  const Occupancy threads = occupancy({256, 24, 0, false}, h200);
  EXPECT_EQ(threads.blocks_per_sm, 8);  // 2048 threads per SM
  EXPECT_EQ(threads.limiter, "threads");
  const Occupancy registers = occupancy({512, 100, 1024, false}, h200);
  EXPECT_EQ(registers.blocks_per_sm, 1);  // 104 x 512 = 53248 of 65536 registers
  EXPECT_EQ(registers.limiter, "registers");
  EXPECT_EQ(occupancy({256, 32, 0, false}, h200).limiter, "registers and threads");
}

TEST(Model, WavesCountTheLastPartialWave) {
  const Waves w = waves_of(561, 132);  // the 4224^3 example of the tuner issue
  EXPECT_EQ(w.waves, 5);
  EXPECT_NEAR(w.last_fill, 33.0 / 132, 1e-12);
  EXPECT_NEAR(w.utilization(), 561.0 / 660, 1e-12);
  EXPECT_EQ(waves_of(264, 132).waves, 2);
  EXPECT_EQ(waves_of(264, 132).last_fill, 1.0);
}

TEST(Model, RidgeAndRatesFromTheDatasheet) {
  const DeviceRates r = rates_of(h200);
  EXPECT_NEAR(r.tensor_peak() / 1e12, 1070, 5);        // 132 SMs x 4096 x 1.98 GHz
  EXPECT_NEAR(r.dram_bytes_per_s / 1e12, 4.43, 0.05);  // 90% of 4.92 TB/s
  EXPECT_GT(r.ridge(), 200);
  EXPECT_LT(r.ridge(), 300);
}

// L2 and an SM's write-out rate follow the SMs and their clock, not DRAM: the H100
// (same SMs and L2 as the H200, 2/3 of its DRAM) gets the H200's. Measured on an
// H100 (docs/perf/2026-12-05-h200-cluster-multicast.md, call 1), 4096^3 ran 0.1791
// ms in 128 x 256 persistent tiles, where the model, then pricing L2 as 2.5x DRAM,
// picked 192 x 192 tiles (0.2000 ms); the compute-bound products of the matmul issue
// get the H200's picks there now.
TEST(Model, L2AndWriteOutFollowTheSmsNotDram) {
  const cuda::DeviceProperties h100 = cuda::planning_device("h100");
  EXPECT_LT(rates_of(h100).dram_bytes_per_s, 0.7 * rates_of(h200).dram_bytes_per_s);
  EXPECT_EQ(rates_of(h100).l2_bytes_per_s, rates_of(h200).l2_bytes_per_s);
  EXPECT_NEAR(rates_of(h200).l2_bytes_per_s / 1e12, 11.06, 0.01);  // the fitted prior
  EXPECT_NEAR(rates_of(a100).l2_bytes_per_s / 1e12, 6.45, 0.01);   // 108 SMs at 1.41 GHz
  for (const auto& [m, n, k] : {std::array<int64_t, 3>{4096, 4096, 4096},
                                {8192, 8192, 8192},
                                {32000, 4096, 768},
                                {16384, 8192, 1024}}) {
    const MatmulTuning problem(matmul_problem(m, n, k));
    const std::string on_h100 = best_of(problem, h100);
    EXPECT_EQ(on_h100, best_of(problem, h200)) << m << "x" << n << "x" << k;
    EXPECT_EQ(on_h100.find("bm=192,bn=192"), std::string::npos) << on_h100;
  }
}

// The wave-quantization cliff: one more tile column turns 4 waves of 128 x 256
// tiles into 5 (the 4224^3 case); the model moves off the cliff.
TEST(Model, WaveCliffIsPredictedAndAvoided) {
  const std::string big = "bm=128,bn=256,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma";
  const double on_4096 = predicted(matmul_problem(4096, 4096, 4096), big) / (4096.0 * 4096);
  const double on_4224 = predicted(matmul_problem(4096, 4224, 4096), big) / (4096.0 * 4224);
  EXPECT_GT(on_4224 / on_4096, 1.15);  // the same work per output costs more past the cliff
  const matmul::Problem p = matmul_problem(4096, 4224, 4096);
  const std::string chosen = best_of(MatmulTuning(p), h200);
  EXPECT_NE(chosen, big);
  EXPECT_LT(predicted(p, chosen), 0.92 * predicted(p, big)) << chosen;
}

// Rows of C that are not all 16-byte aligned cost store instructions with one tile
// per block. The persistent schedules store whole tiles through the copy engine from
// rows shifted to C's alignment instead (16-bit outputs): measured on the H200, that
// made them the fastest for the 50257 vocabulary product, with gelu(acc + bias) too
// (256x128 persistent 0.4796 ms, 2026-12-04; one tile per block 0.4944-0.4983).
// An epilogue function costs every schedule its per-output time, ping-pong twice
// (one warpgroup finishes a whole tile). Rows of 50304 cost nothing extra, and the
// prediction says why it differs.
TEST(Model, MisalignedRowsOfCCostStores) {
  const std::string tiled = "bm=128,bn=256,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma";
  const std::string persistent = tiled + ",schedule=persistent";
  const matmul::Problem vocabulary = matmul_problem(2048, 50257, 768);
  const matmul::Problem padded = matmul_problem(2048, 50304, 768);
  const double slower_tiled = predicted(vocabulary, tiled) / predicted(padded, tiled);
  const double slower_persistent =
      predicted(vocabulary, persistent) / predicted(padded, persistent);
  EXPECT_GT(slower_tiled, 1.05);
  EXPECT_GT(slower_persistent, 1.0);
  // Measured: 128x256 persistent 0.3642 ms, one tile per block 0.4333 (2026-12-03/04).
  EXPECT_LT(predicted(vocabulary, persistent), predicted(vocabulary, tiled));
  EXPECT_TRUE(matmul::Config::parse(best_of(MatmulTuning(vocabulary), h200)).persistent);
  auto says = [](const matmul::Problem& p, const std::string& c, const std::string& what) {
    for (const std::string& note : MatmulTuning(p).predict(c, h200, Efficiencies()).notes)
      if (note.find(what) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(says(vocabulary, tiled, "store instructions per 16-byte chunk"));
  EXPECT_FALSE(says(padded, tiled, "store instructions per 16-byte chunk"));
  EXPECT_TRUE(says(vocabulary, persistent, "rows shifted to C's alignment"));
  EXPECT_FALSE(says(padded, persistent, "rows shifted to C's alignment"));
  // With gelu(acc + bias): the function's time on top, the persistent schedule still
  // the model's best, and ping-pong charged twice the function time per output.
  matmul::Problem gelu = vocabulary, gelu_padded = padded;
  gelu.epilogue = gelu_padded.epilogue =
      matmul::epilogue_from_ir("bias:bf16[n]; y = gelu(acc + bias)", gelu.input).epilogue;
  // Measured 256x128 persistent: 0.4312 ms with it, 0.3504 without (2026-12-04).
  EXPECT_GT(predicted(gelu, persistent), predicted(vocabulary, persistent) * 1.1);
  EXPECT_TRUE(says(gelu, persistent, "epilogue function: run once per output"));
  EXPECT_FALSE(says(vocabulary, persistent, "epilogue function"));
  EXPECT_TRUE(matmul::Config::parse(best_of(MatmulTuning(gelu), h200)).persistent);
  const std::string pingpong =
      "bm=128,bn=128,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma,schedule=pingpong";
  const std::string cooperative =
      "bm=128,bn=128,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma,schedule=persistent";
  EXPECT_GT(predicted(gelu, pingpong) - predicted(vocabulary, pingpong),
            1.5 * (predicted(gelu, cooperative) - predicted(vocabulary, cooperative)));
  // f32 outputs of an odd N: 8-byte pairs or single elements, 4 per chunk at most.
  matmul::Problem f32 = vocabulary, f32_padded = padded;
  f32.output = f32_padded.output = matmul::DType::F32;
  EXPECT_GT(predicted(f32, tiled), 1.05 * predicted(f32_padded, tiled));
  EXPECT_GT(predicted(f32, persistent) / predicted(f32_padded, persistent), slower_persistent);
}

TEST(Model, FewTilesWithLongKSplitK) {
  const matmul::Problem p = matmul_problem(256, 256, 16384);
  const matmul::Config c = matmul::Config::parse(best_of(MatmulTuning(p), h200));
  EXPECT_GT(c.splitk, 1) << c.to_string();
  const Prediction split = MatmulTuning(p).predict(c, h200, Efficiencies(), nullptr);
  EXPECT_FALSE(split.notes.empty());  // says what the partials cost
  // Who sums them: on the wgmma engine a tile's splits as one cluster (up to 8),
  // through shared memory; otherwise through the workspace, the splits together
  // when the grid fits on the GPU at once (a cooperative launch), else each tile's
  // last split.
  auto who = [](const matmul::Problem& q, const std::string& config) {
    for (const std::string& note : MatmulTuning(q).predict(config, h200, Efficiencies()).notes)
      if (note.rfind("split-K:", 0) == 0)
        return note.find("cluster") != std::string::npos    ? "cluster"
               : note.find("together") != std::string::npos ? "together"
                                                            : "last";
    return "none";
  };
  const std::string split4 = "bm=128,bn=128,bk=64,warps=8,wm=2,stages=4,splitk=4";
  EXPECT_STREQ(who(matmul_problem(256, 256, 16384), split4), "together");  // 4 x 4 blocks
  EXPECT_STREQ(who(matmul_problem(4096, 4096, 16384), split4), "last");    // 4096 blocks
  const std::string wgmma4 = "bm=128,bn=128,bk=64,warps=12,wm=2,stages=4,splitk=4,mma=wgmma";
  EXPECT_STREQ(who(matmul_problem(256, 256, 16384), wgmma4), "cluster");  // 4 clusters
  // More clusters than run at once (a GPC holds whole clusters: about 30 of 4 blocks
  // on 132 SMs, one a SM): the workspace, as the runtime does.
  EXPECT_STREQ(who(matmul_problem(4096, 128, 16384), wgmma4), "together");  // 32 x 4 blocks
  EXPECT_STREQ(who(matmul_problem(4096, 4096, 16384), wgmma4), "last");     // 1024 x 4 blocks
  // More splits than a cluster holds: the workspace.
  EXPECT_STREQ(who(matmul_problem(256, 256, 16384),
                   "bm=128,bn=128,bk=64,warps=12,wm=2,stages=4,splitk=16,mma=wgmma"),
               "together");
  EXPECT_STREQ(who(matmul_problem(256, 256, 16384),
                   "bm=128,bn=128,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma"),
               "none");
  // The model's note says how many clusters there are and how many fit at once.
  for (const std::string& note :
       MatmulTuning(matmul_problem(256, 256, 16384)).predict(wgmma4, h200, Efficiencies()).notes)
    if (note.rfind("split-K:", 0) == 0) {
      EXPECT_NE(note.find("4 clusters; about 30 clusters of 4 blocks"), std::string::npos) << note;
    }
}

TEST(Model, SkinnyProblemsAreMemoryBound) {
  const matmul::Problem decode = matmul_problem(16, 4096, 4096);
  const Prediction p =
      MatmulTuning(decode).predict(best_of(MatmulTuning(decode), h200), h200, Efficiencies());
  // 32 MiB of B at most 4.43 TB/s: never faster than DRAM allows.
  EXPECT_GE(p.ms, 4096.0 * 4096 * 2 / 4.43e12 * 1e3);
  const Work w = MatmulTuning(decode).work();
  EXPECT_LT(w.intensity(), rates_of(h200).ridge());
}

// An SM takes in its operands through the loads it keeps in flight: where a third
// of them come from DRAM (4096 x 128 x 16384, 64 x 128 tiles, 2 splits: A streamed
// once, B re-read from L2), 4 stages cannot keep the tensor cores fed and 8 can
// (measured on the H200: 0.0618 and 0.0490 ms); where L2 serves nearly all of them
// (16384 x 8192 x 1024), 4 stages of 128 x 128 feed the tensor cores (0.352 ms
// measured, the fastest config there), and the stages hardly matter.
TEST(Model, LoadsInFlightFeedTheTensorCores) {
  const matmul::Problem skinny = matmul_problem(4096, 128, 16384);
  const Prediction s4 = MatmulTuning(skinny).predict(
      "bm=64,bn=128,bk=64,warps=8,wm=1,stages=4,splitk=2,mma=wgmma", h200, Efficiencies());
  const Prediction s8 = MatmulTuning(skinny).predict(
      "bm=64,bn=128,bk=64,warps=8,wm=1,stages=8,splitk=2,mma=wgmma", h200, Efficiencies());
  EXPECT_GT(s4.memory_ms, s4.compute_ms);
  EXPECT_GT(s4.ms, 1.2 * s8.ms);
  const matmul::Problem reused = matmul_problem(16384, 8192, 1024);
  const double pingpong4 = predicted(
      reused, "bm=128,bn=128,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma,schedule=pingpong");
  const double pingpong6 = predicted(
      reused, "bm=128,bn=128,bk=64,warps=12,wm=2,stages=6,splitk=1,mma=wgmma,schedule=pingpong");
  EXPECT_NEAR(pingpong4, pingpong6, 0.01 * pingpong6);
}

// kjit explain names the persistent write-out: bulk stores where C's rows are
// 16-byte aligned, the warps' own stores where they are not.
TEST(Model, PersistentWriteOutIsNamed) {
  const std::string persistent =
      "bm=128,bn=256,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma,schedule=persistent";
  auto notes = [&](const matmul::Problem& p) {
    std::string all;
    for (const std::string& n : MatmulTuning(p).predict(persistent, h200, Efficiencies()).notes)
      all += n + "\n";
    return all;
  };
  EXPECT_NE(notes(matmul_problem(4096, 4096, 4096)).find("TMA bulk stores"), std::string::npos);
  EXPECT_NE(notes(matmul_problem(2048, 50257, 768)).find("not 16-byte aligned"), std::string::npos);
}

TEST(Space, PrunedConfigsSayWhy) {
  const matmul::Problem p = matmul_problem(4096, 4096, 4096);
  const Space hopper = MatmulTuning(p).space(h200);
  auto reason = [&](const Space& s, const std::string& config) -> std::string {
    for (const Pruned& x : s.pruned)
      if (x.config == config) return x.reason;
    return "";
  };
  EXPECT_NE(reason(hopper, "bm=192,bn=256,bk=64,warps=16,wm=3,stages=4,splitk=1,mma=wgmma")
                .find("registers"),
            std::string::npos);
  EXPECT_NE(reason(hopper, "bm=128,bn=128,bk=32,warps=8,wm=2,stages=4,splitk=1,load=narrow")
                .find("aligned"),
            std::string::npos);
  EXPECT_NE(
      reason(hopper, "bm=128,bn=256,bk=64,warps=12,wm=2,stages=4,splitk=2,mma=wgmma").find("waves"),
      std::string::npos);
  EXPECT_NE(reason(hopper, "bm=256,bn=256,bk=64,warps=20,wm=4,stages=6,splitk=1,mma=wgmma")
                .find("shared memory"),
            std::string::npos);
  const Space ampere = MatmulTuning(p).space(a100);
  EXPECT_NE(
      reason(ampere, "bm=128,bn=256,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma").find("sm_90"),
      std::string::npos);
  for (const std::string& c : ampere.candidates) EXPECT_EQ(c.find("wgmma"), std::string::npos) << c;
  EXPECT_FALSE(ampere.candidates.empty());
}

// The persistent schedule is a point of the wgmma space: offered where the work
// units outnumber the SMs, pruned with a reason where each block would get one
// tile anyway, and predicted faster than one tile per block on a many-wave shape
// (it fills the pipeline once, not once per tile).
TEST(Space, PersistentScheduleIsADimension) {
  const char* tiled = "bm=128,bn=256,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma";
  const std::string persistent = std::string(tiled) + ",schedule=persistent";
  const Space big = MatmulTuning(matmul_problem(4096, 4096, 4096)).space(h200);
  EXPECT_NE(std::find(big.candidates.begin(), big.candidates.end(), persistent),
            big.candidates.end());
  const Space small = MatmulTuning(matmul_problem(1024, 1024, 4096)).space(h200);
  bool pruned = false;
  for (const Pruned& x : small.pruned)
    if (x.config == persistent) {
      pruned = true;
      EXPECT_NE(x.reason.find("one wave"), std::string::npos) << x.reason;
    }
  EXPECT_TRUE(pruned);
  const MatmulTuning t(matmul_problem(4096, 4096, 4096));
  const Efficiencies none;
  EXPECT_LT(t.predict(persistent, h200, none).ms, t.predict(tiled, h200, none).ms);
  EXPECT_NE(t.predict(persistent, h200, none).efficiency_key,
            t.predict(tiled, h200, none).efficiency_key);
}

// Ping-pong is the third value of the schedule dimension: offered for tiles a
// warpgroup can hold, pruned with the reason for larger ones, learned apart.
TEST(Space, PingPongScheduleIsADimension) {
  const Space s = MatmulTuning(matmul_problem(4096, 4096, 4096)).space(h200);
  const std::string pingpong =
      "bm=128,bn=128,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma,schedule=pingpong";
  EXPECT_NE(std::find(s.candidates.begin(), s.candidates.end(), pingpong), s.candidates.end());
  bool pruned = false;
  for (const Pruned& x : s.pruned)
    if (x.config.find("bm=128,bn=256") != std::string::npos &&
        x.config.find("pingpong") != std::string::npos) {
      pruned = true;
      EXPECT_NE(x.reason.find("16384"), std::string::npos) << x.reason;
    }
  EXPECT_TRUE(pruned);
  const MatmulTuning t(matmul_problem(4096, 4096, 4096));
  const Efficiencies none;
  const std::string persistent =
      "bm=128,bn=128,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma,schedule=persistent";
  EXPECT_NE(t.predict(pingpong, h200, none).efficiency_key,
            t.predict(persistent, h200, none).efficiency_key);
  bool noted = false;
  for (const std::string& note : t.predict(pingpong, h200, none).notes)
    noted = noted || note.find("taking turns") != std::string::npos;
  EXPECT_TRUE(noted);
}

// Ping-pong is searched at every K, a single k-tile too (its turn barriers count
// every warp of the other warpgroup: that schedule ran clean under the sanitizers
// there once they did).
TEST(Space, PingPongIsSearchedForSingleKTileTiles) {
  const Space one = MatmulTuning(matmul_problem(4096, 4096, 64)).space(h200);
  bool offered = false;
  for (const std::string& c : one.candidates)
    offered = offered || c.find("pingpong") != std::string::npos;
  EXPECT_TRUE(offered);
  for (const Pruned& x : one.pruned) EXPECT_EQ(x.reason.find("one k-tile"), std::string::npos);
}

// Stream-K is the fourth value of the schedule dimension, with the splits of the
// last wave's tiles: offered where the last wave leaves over half the SMs idle, with
// exactly the splits that apply (others pruned, saying why), and predicted faster
// than the persistent schedule it shares its kernel and efficiency with.
TEST(Space, StreamKScheduleSplitsTheLastWave) {
  const MatmulTuning t(matmul_problem(4097, 4097, 4097));  // 561 tiles of 128 x 256
  const Space s = t.space(h200);
  const std::string base = "bm=128,bn=256,bk=64,warps=12,wm=2,stages=4,splitk=";
  const std::string four = base + "4,mma=wgmma,schedule=streamk";
  EXPECT_NE(std::find(s.candidates.begin(), s.candidates.end(), four), s.candidates.end());
  bool pruned = false;
  for (const Pruned& x : s.pruned)
    if (x.config == base + "6,mma=wgmma,schedule=streamk") {
      pruned = true;
      EXPECT_NE(x.reason.find("33 tiles split 4 ways at most"), std::string::npos) << x.reason;
    }
  EXPECT_TRUE(pruned);
  const Efficiencies none;
  const std::string persistent = base + "1,mma=wgmma,schedule=persistent";
  const Prediction sk = t.predict(four, h200, none);
  EXPECT_LT(sk.ms, t.predict(persistent, h200, none).ms);
  EXPECT_EQ(sk.efficiency_key, t.predict(persistent, h200, none).efficiency_key);
  bool noted = false;
  for (const std::string& note : sk.notes)
    noted = noted || note.find("33 tiles split 4 ways") != std::string::npos;
  EXPECT_TRUE(noted);
  // 4096^3 leaves 116 of 132 SMs busy in its last wave: nothing to share.
  for (const std::string& c : MatmulTuning(matmul_problem(4096, 4096, 4096)).space(h200).candidates)
    if (c.find("bm=128,bn=256") != std::string::npos) {
      EXPECT_EQ(c.find("streamk"), std::string::npos) << c;
    }
}

// pitch=line is offered where an M/N-major operand would be read in place from rows
// off the 128-byte lines (B of 4104^3, A of a "tn" problem with M = 200), not where
// every row is on a line or every operand is copied anyway (a misaligned K); the
// model charges the straddling main loop against the copy and says which.
TEST(Space, LinePitchIsOfferedWhereRowsAreOffTheLines) {
  auto offered = [](const matmul::Problem& p) {
    for (const std::string& c : MatmulTuning(p).space(h200).candidates)
      if (c.find("pitch=line") != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(offered(matmul_problem(4104, 4104, 4104)));
  EXPECT_TRUE(offered(matmul_problem(2048, 50264, 768)));
  matmul::Problem tn = matmul_problem(200, 4096, 512);
  matmul::set_layout(tn, "tn");
  EXPECT_TRUE(offered(tn));
  EXPECT_FALSE(offered(matmul_problem(4096, 4096, 4104)));  // only A is off (K-major)
  EXPECT_FALSE(offered(matmul_problem(4096, 4096, 4096)));
  EXPECT_FALSE(offered(matmul_problem(4097, 4097, 4097)));  // K padded: all copied
  EXPECT_FALSE(offered(matmul_problem(2048, 50257, 768)));  // B misaligned: copied

  const MatmulTuning t(matmul_problem(4104, 4104, 4104));
  const Efficiencies none;
  const std::string in_place =
      "bm=128,bn=256,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma,schedule=persistent";
  const Prediction read = t.predict(in_place, h200, none);
  const Prediction copied = t.predict(in_place + ",pitch=line", h200, none);
  EXPECT_GT(read.compute_ms, copied.compute_ms * 1.2);
  EXPECT_GT(copied.overhead_ms, read.overhead_ms);
  EXPECT_LT(copied.ms, read.ms);
  auto said = [](const Prediction& x, const char* what) {
    for (const std::string& note : x.notes)
      if (note.find(what) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(said(read, "B's rows of 4104 elements are read in place"));
  EXPECT_TRUE(said(copied, "B copied into scratch with 128-byte rows"));
  EXPECT_FALSE(said(copied, "read in place"));
}

// swap=ab (Cᵀ = Bᵀ Aᵀ) is offered where M is short and A is K-major, with bn = M
// rounded up to 16; its tiles are counted bn x bm (one tile column for M = 16), so
// a decode step has no raster twins and its note says how the tile walks C.
TEST(Space, SwappedProductIsOfferedForShortM) {
  auto swapped = [](const matmul::Problem& p) {
    std::vector<std::string> out;
    for (const std::string& c : MatmulTuning(p).space(h200).candidates)
      if (c.find("swap=ab") != std::string::npos) out.push_back(c);
    return out;
  };
  const std::vector<std::string> decode = swapped(matmul_problem(16, 4096, 4096));
  ASSERT_FALSE(decode.empty());
  for (const std::string& c : decode) {
    EXPECT_NE(c.find(",bn=16,"), std::string::npos) << c;
    EXPECT_EQ(c.find("raster="), std::string::npos) << c;
  }
  for (const std::string& c : swapped(matmul_problem(33, 4096, 4096)))
    EXPECT_NE(c.find(",bn=48,"), std::string::npos) << c;
  EXPECT_FALSE(swapped(matmul_problem(64, 11008, 4096)).empty());
  EXPECT_TRUE(swapped(matmul_problem(65, 4096, 4096)).empty());
  matmul::Problem tn = matmul_problem(16, 4096, 4096);
  matmul::set_layout(tn, "tn");
  EXPECT_TRUE(swapped(tn).empty());
  matmul::Problem nt = matmul_problem(16, 4096, 4096);
  matmul::set_layout(nt, "nt");
  EXPECT_FALSE(swapped(nt).empty());

  const MatmulTuning t(matmul_problem(16, 4096, 4096));
  const Prediction x = t.predict("mma=wgmma,swap=ab,bm=128,bn=16,stages=10,splitk=2", h200, {});
  EXPECT_EQ(x.waves.units, 64);  // 32 tiles of N x 1 of M, 2 splits
  bool named = false;
  for (const std::string& note : x.notes)
    named = named || note.find("32 x 1 tiles") != std::string::npos;
  EXPECT_TRUE(named);
  // Not swapped, the same tile is 1 x 256 tiles of 16 x 128... of which M pads to 64
  // rows: the swapped tile does a quarter of the tensor-core work.
  const Prediction plain = t.predict("mma=wgmma,bm=64,bn=128,stages=6,splitk=2", h200, {});
  EXPECT_EQ(plain.waves.units, 64);
}

TEST(Space, EveryCandidateIsCanonicalValidAndUnique) {
  for (const matmul::Problem& p :
       {matmul_problem(4096, 4096, 4096), matmul_problem(4097, 4097, 4097),
        matmul_problem(16, 4096, 4096), matmul_problem(100, 30, 7),
        matmul_problem(4104, 4104, 4104), matmul_problem(33, 1000, 1001)}) {
    const MatmulTuning t(p);
    const Space s = t.space(h200);
    std::set<std::string> seen;
    for (const std::string& c : s.candidates) {
      EXPECT_EQ(t.canonical(c), c);
      EXPECT_TRUE(seen.insert(c).second) << c;
      EXPECT_NO_THROW(t.sources(c)) << c;
    }
    // Narrow loads only where operands are misaligned.
    bool narrow = false;
    for (const std::string& c : s.candidates)
      narrow = narrow || c.find("narrow") != std::string::npos;
    EXPECT_EQ(narrow, !p.aligned) << p.to_string();
  }
}

TEST(Space, SourcesIncludeTheHelperKernels) {
  matmul::Problem p = matmul_problem(4097, 4097, 4097);
  const std::vector<KernelSource> padded =
      MatmulTuning(p).sources("bm=128,bn=256,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma");
  ASSERT_EQ(padded.size(), 2u);
  EXPECT_NE(padded[1].name.find("pad"), std::string::npos);
  p = matmul_problem(256, 256, 16384);
  // Split-K is finished in the main kernel itself (finish_split): no second kernel.
  const std::vector<KernelSource> split =
      MatmulTuning(p).sources("bm=128,bn=128,bk=64,warps=12,wm=2,stages=4,splitk=4,mma=wgmma");
  ASSERT_EQ(split.size(), 1u);
  // splitk and raster are launch arguments: one kernel for every value.
  EXPECT_EQ(
      split[0].source,
      MatmulTuning(p)
          .sources("bm=128,bn=128,bk=64,warps=12,wm=2,stages=4,splitk=1,raster=16,mma=wgmma")[0]
          .source);
}

TEST(Signature, MatmulRoundTripsWhatTheModelNeeds) {
  matmul::Problem p = matmul_problem(2048, 50257, 768);
  p.epilogue = matmul::epilogue_from_ir("r:bf16[m,n]; y = gelu(acc + bias) + r", p.input).epilogue;
  const MatmulTuning t(p, "r:bf16[m,n]; y = gelu(acc + bias) + r");
  const std::unique_ptr<MatmulTuning> back = matmul_from_signature(t.signature());
  ASSERT_NE(back, nullptr) << t.signature();
  EXPECT_EQ(back->signature(), t.signature());
  EXPECT_EQ(back->problem_class(), t.problem_class());
  EXPECT_EQ(back->sizes(), t.sizes());
  EXPECT_EQ(back->work().bytes, t.work().bytes);  // the operands were read back
  const std::string c = best_of(t, h200);
  EXPECT_EQ(back->predict(c, h200, Efficiencies()).ms, t.predict(c, h200, Efficiencies()).ms);
  EXPECT_EQ(matmul_from_signature("m=1,n=2"), nullptr);
  // The spec rebuilds the same problem.
  EXPECT_EQ(make_problem(t.spec())->signature(), t.signature());
  // So does the spec of a problem the runtime made (its epilogue only in the
  // Problem): a KJIT_TUNE_WORKER was sent the product without its epilogue.
  const MatmulTuning runtime_made(p);
  EXPECT_EQ(make_problem(runtime_made.spec())->signature(), t.signature());
}

TEST(Signature, ElementwiseRoundTripsWhatTheModelNeeds) {
  const ElementwiseTuning t("x:bf16[m,n]; b:bf16[n]; y = x * sigmoid(x) + b", "",
                            {{"m", 4096}, {"n", 1000}});
  const std::unique_ptr<TuningProblem> back = problem_from_signature(t.signature());
  ASSERT_NE(back, nullptr) << t.signature();
  EXPECT_EQ(back->family(), "elementwise");
  EXPECT_EQ(back->problem_class(), t.problem_class());
  EXPECT_EQ(back->work().bytes, t.work().bytes);
  const std::string c = best_of(t, h200);
  EXPECT_EQ(back->predict(c, h200, Efficiencies()).ms, t.predict(c, h200, Efficiencies()).ms);
  EXPECT_EQ(make_problem(t.spec())->signature(), t.signature());
  EXPECT_TRUE(t.has_spec());
  // A problem the runtime planned from tensors has no expression: it is measured in
  // process (a KJIT_TUNE_WORKER was asked for its spec, an internal error).
  EXPECT_FALSE(ElementwiseTuning(t.plan()).has_spec());
  // The bias is a row: read once, not once per output.
  EXPECT_NEAR(t.work().bytes, 2.0 * (4096 * 1000 * 2) + 1000 * 2, 1e-9);
}

// Signatures come from the store, which another process or an imported file may have
// written, so they may be of any length. Read with std::regex they overflowed the
// stack (a segfault while the chooser refit the model) at some 40,000 characters.
TEST(Signature, LongSignaturesAreReadWithoutOverflowingTheStack) {
  // A matmul epilogue's text of 400,000 characters, then its operand.
  const std::string text(400000, 'a');
  const std::unique_ptr<MatmulTuning> matmul = matmul_from_signature(
      "m=256,n=256,k=256,batch=1,layout=nn,dtype=bf16,out=bf16,align=16,epilogue=" + text +
      ",bias:row:bf16");
  ASSERT_NE(matmul, nullptr);
  EXPECT_EQ(matmul->problem().epilogue.text, text);
  ASSERT_EQ(matmul->problem().epilogue.operands.size(), 1u);
  EXPECT_EQ(matmul->problem().epilogue.operands[0].name, "bias");

  // A packed attention batch naming 50,000 lengths (as signatures did before length
  // profiles).
  std::string lengths;
  for (int i = 0; i < 50000; ++i) lengths += (i ? "+" : "") + std::to_string(100 + i % 7);
  const std::unique_ptr<TuningProblem> attention = problem_from_signature(
      "batch=50000,heads=1,kv_heads=1,seq_q=106,seq_k=106,causal=0,window=inf:inf,scale=0.1,"
      "packed=q:" +
      lengths + "/k:" + lengths + ",dtype=bf16,d=128");
  ASSERT_NE(attention, nullptr);
  EXPECT_EQ(dynamic_cast<const AttentionTuning&>(*attention).problem().batch, 50000);

  // An elementwise chain with 20,000 more inputs.
  const ElementwiseTuning t("x:bf16[n]; y = x * 2", "", {{"n", 4096}});
  std::string many = t.signature();
  const size_t in = many.find(" in=") + 4;
  const std::string first = many.substr(in, many.find_first_of(", ", in) - in) + ",";
  std::string extra;
  for (int i = 0; i < 20000; ++i) extra += first;
  many.insert(in, extra);
  const std::unique_ptr<TuningProblem> elementwise = problem_from_signature(many);
  ASSERT_NE(elementwise, nullptr) << many.substr(0, 200);
  EXPECT_EQ(elementwise->family(), "elementwise");
}

// What is not a signature of this version is not read (nullptr), whatever it holds.
TEST(Signature, MalformedSignaturesAreNotRead) {
  const std::string matmul = "m=256,n=256,k=256,batch=1,layout=nn,dtype=bf16,out=bf16,align=16";
  ASSERT_NE(problem_from_signature(matmul), nullptr);
  for (const std::string& bad : std::vector<std::string>{
           std::string("m=99999999999999999999,n=1,k=1,batch=1,layout=nn,dtype=bf16,out=bf16,"
                       "align=16"),
           "m=256,n=256,k=256,batch=1,layout=nx,dtype=bf16,out=bf16,align=16",
           "m=256,n=256,k=256,batch=1,layout=nn,dtype=bf16,out=bf16,align=8",
           "m=256,n=256,k=256,batch=1,layout=nn,dtype=bf16,out=bf16", matmul + ",extra=1",
           "m=-1,n=256,k=256,batch=1,layout=nn,dtype=bf16,out=bf16,align=16",
           // Checked like a spec: M x K x batch past 2^63 bytes overflowed work().
           "m=2147482624,n=1,k=1073741824,batch=65535,layout=nn,dtype=bf16,out=bf16,align=16"})
    EXPECT_EQ(matmul_from_signature(bad), nullptr) << bad;

  const std::string attention =
      "batch=2,heads=4,kv_heads=2,seq_q=300,seq_k=300,causal=1,window=inf:0,scale=0.125,"
      "packed=q:1+299/k:1+299,dtype=bf16,d=128";
  ASSERT_NE(problem_from_signature(attention), nullptr);
  ASSERT_NE(problem_from_signature(attention + ",pass=backward,deterministic=1"), nullptr);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = attention;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  for (const std::string& bad : std::vector<std::string>{
           attention + ",pass=forward", attention + ",score_mod=ab12", attention + ",",
           with("1+299/k", "1x/k"), with("1+299/k", "1+2+3/k"), with("0.125", "0.125x"),
           with("inf:0", "inf"), with("causal=1", "causal=2"), with("d=128", "d=99999999999"),
           with("dtype=bf16", "dtype=f32"), with("1+299/k", "0+299/k")})
    EXPECT_EQ(problem_from_signature(bad), nullptr) << bad;

  const std::string elementwise =
      ElementwiseTuning("x:bf16[n]; y = x * 2", "", {{"n", 4096}}).signature();
  ASSERT_NE(problem_from_signature(elementwise), nullptr);
  for (const std::string& bad :
       {elementwise + " more", elementwise.substr(0, elementwise.find(" cost=")) + " cost=.",
        elementwise.substr(0, elementwise.find(" n=")) + " n=x cols=1 cost=1",
        elementwise + " waste=-4", elementwise + " waste=4 more"})
    EXPECT_EQ(problem_from_signature(bad), nullptr) << bad;
}

// Strided inputs (the coalescing lesson): the spec carries the strides, the kernel
// reads the input through the strided pattern, and the model charges a 32-byte
// sector per element once elements are 32 bytes or more apart.
TEST(Specs, ElementwiseStridedInputs) {
  auto copy = [](int64_t stride) {
    nlohmann::json spec = {{"family", "elementwise"},
                           {"expr", "x:f32[n]; y = x"},
                           {"sizes", {{"n", 1 << 24}}},
                           {"strides", {{"x", {stride}}}}};
    return make_problem(spec);
  };
  const std::unique_ptr<TuningProblem> unit = copy(1), two = copy(2), far = copy(32);
  EXPECT_EQ(unit->problem_class().find("strided"), std::string::npos) << unit->problem_class();
  EXPECT_NE(far->problem_class().find("strided"), std::string::npos) << far->problem_class();
  EXPECT_EQ(far->spec().at("strides").at("x"), nlohmann::json({32}));
  EXPECT_EQ(make_problem(far->spec())->signature(), far->signature());
  // The same useful bytes; the time grows with the sectors fetched (8x at 32 bytes apart).
  EXPECT_EQ(far->work().bytes, unit->work().bytes);
  const std::string c = best_of(*unit, h200);
  const double t1 = unit->predict(c, h200, Efficiencies()).memory_ms;
  const double t2 = two->predict(best_of(*two, h200), h200, Efficiencies()).memory_ms;
  const double t32 = far->predict(best_of(*far, h200), h200, Efficiencies()).memory_ms;
  EXPECT_GT(t2, 1.3 * t1);
  EXPECT_GT(t32, 4.0 * t1);
  // Strides that fetch different sectors are different problems to the store, and
  // a problem rebuilt from its key (the refit's) predicts as the original: x with
  // strides 2 and 32 had one key, and the rebuilt one was contiguous, so a refit
  // from the far one's trials moved every elementwise problem's efficiency 4x.
  EXPECT_NE(two->signature(), far->signature());
  EXPECT_EQ(unit->signature().find("waste="), std::string::npos) << unit->signature();
  // A strided key of an older version (no waste=) is not read: rebuilt as if
  // contiguous, its trials taught the refit a wrong efficiency.
  const std::string old_key = far->signature().substr(0, far->signature().rfind(" waste="));
  EXPECT_EQ(problem_from_signature(old_key), nullptr) << old_key;
  for (const TuningProblem* p : {unit.get(), two.get(), far.get()}) {
    const std::unique_ptr<TuningProblem> back = problem_from_signature(p->signature());
    ASSERT_NE(back, nullptr) << p->signature();
    const std::string config = best_of(*p, h200);
    EXPECT_DOUBLE_EQ(back->predict(config, h200, Efficiencies()).memory_ms,
                     p->predict(config, h200, Efficiencies()).memory_ms)
        << p->signature();
  }
  // Bad strides name the input and what is wrong.
  auto message = [](const nlohmann::json& spec) -> std::string {
    try {
      make_problem(spec);
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  };
  nlohmann::json bad = {{"family", "elementwise"}, {"expr", "y = x"}, {"sizes", {{"n", 64}}}};
  bad["strides"] = {{"z", {1}}};
  EXPECT_NE(message(bad).find("'z'"), std::string::npos);
  bad["strides"] = {{"x", {1, 2}}};
  EXPECT_NE(message(bad).find("1 dims but 2 strides"), std::string::npos);
  bad["strides"] = {{"x", {-1}}};
  EXPECT_NE(message(bad).find("strides of 'x'"), std::string::npos);
  bad["strides"] = {{"x", 3}};
  EXPECT_NE(message(bad).find("strides of 'x'"), std::string::npos);
}

TEST(Space, ElementwisePrunesWhatCannotDiffer) {
  // 1001 elements: not whole vectors, so the one-element path: no vec, no streaming stores.
  const ElementwiseTuning odd("y = exp(x)", "f32", {{"n", 1001}});
  EXPECT_EQ(odd.plan().problem.aligned, false);
  const Space s = odd.space(h200);
  for (const std::string& c : s.candidates) {
    EXPECT_EQ(c.find("stream=1"), std::string::npos) << c;
    EXPECT_EQ(c.find(",vec="), c.find(",vec=0")) << c;
  }
  bool said = false;
  for (const Pruned& p : s.pruned)
    said = said || p.reason.find("one element at a time") != std::string::npos;
  EXPECT_TRUE(said);
  const ElementwiseTuning big("y = exp(x)", "f32", {{"n", 1 << 26}});
  EXPECT_GT(big.space(h200).candidates.size(), s.candidates.size());
  // grid=rows: offered for [rows, cols] outputs, pruned with its reason for one row.
  for (const std::string& c : big.space(h200).candidates)
    EXPECT_EQ(c.find("grid=rows"), std::string::npos) << c;
  said = false;
  for (const Pruned& p : big.space(h200).pruned)
    said = said || p.reason.find("grid=rows: the output is one row") != std::string::npos;
  EXPECT_TRUE(said);
  const ElementwiseTuning two_d("x:bf16[m,n]; r:bf16[m,1]; c:bf16[n]; y = x * r + c", "",
                                {{"m", 4096}, {"n", 4096}});
  int rows = 0;
  for (const std::string& c : two_d.space(h200).candidates)
    if (c.find("grid=rows") != std::string::npos) {
      ++rows;
      EXPECT_EQ(c.find("prefetch=1"), std::string::npos) << c;
      EXPECT_EQ(c.find("per_sm"), std::string::npos) << c;
      // The model predicts it: its own efficiency key and group.
      const Prediction pr = two_d.predict(c, h200, Efficiencies{});
      EXPECT_GT(pr.ms, 0) << c;
      EXPECT_NE(pr.efficiency_key.find(":rows"), std::string::npos) << c;
      EXPECT_NE(pr.group.find(":rows"), std::string::npos) << c;
    }
  EXPECT_GT(rows, 0);
}

TEST(Specs, BadSpecsNameTheField) {
  auto message = [](const nlohmann::json& spec) -> std::string {
    try {
      make_problem(spec);
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message({{"family", "matmul"}, {"m", 4}, {"n", 4}}).find("'k'"), std::string::npos);
  EXPECT_NE(message({{"family", "matmul"}, {"m", 4}, {"n", 4}, {"k", -1}}).find("'k'"),
            std::string::npos);
  EXPECT_NE(message({{"family", "matmul"}, {"m", 4}, {"n", 4}, {"k", 4}, {"tile", 4}}).find("tile"),
            std::string::npos);
  EXPECT_NE(message({{"family", "matmul"}, {"m", 4}, {"n", 4}, {"k", 4}, {"tile", 4}})
                .find("the fields are m, n, k, batch"),
            std::string::npos);
  EXPECT_NE(message({{"family", "matmul"}, {"m", 4}, {"n", 4}, {"k", 4}, {"layout", 1}})
                .find("matmul spec: 'layout' must be a string"),
            std::string::npos);
  EXPECT_NE(message({{"family", "conv"}}).find("conv"), std::string::npos);
  EXPECT_NE(message({{"family", "elementwise"}}).find("expr"), std::string::npos);
  EXPECT_NE(
      message({{"family", "elementwise"}, {"expr", "y = x"}, {"sizes", {{"n", 0}}}}).find("'n'"),
      std::string::npos);
  EXPECT_NE(
      message({{"family", "matmul"}, {"m", 4}, {"n", 4}, {"k", 3}, {"align", 16}}).find("align"),
      std::string::npos);
  // Fields that were read as nothing, so the problem tuned was another: a size
  // that names no dim of the expression, key lengths without query lengths.
  EXPECT_NE(
      message(
          {{"family", "elementwise"}, {"expr", "y = x * 2"}, {"sizes", {{"n", 1024}, {"q", 5}}}})
          .find("size 'q' names no dim of the expression"),
      std::string::npos);
  EXPECT_NE(message({{"family", "attention"},
                     {"heads", 8},
                     {"head_dim", 128},
                     {"seq_q", 128},
                     {"seqlens_k", {1, 4000}}})
                .find("seqlens_k needs seqlens_q"),
            std::string::npos);
  // 4294967297 is no 1: read as an int it was cut to one.
  EXPECT_NE(message({{"family", "matmul"}, {"m", 4}, {"n", 4}, {"k", 3}, {"align", 4294967297}})
                .find("'align' is 16"),
            std::string::npos);
}

// What a tune measures: a packed attention batch is tuned as its length profile's
// representative, so `kjit tune`'s flops and TFLOP/s are the representative's (they
// were the batch's, over the representative's times: about 5% low); other problems
// measure themselves.
TEST(Specs, APackedBatchIsMeasuredAsItsRepresentative) {
  const std::unique_ptr<TuningProblem> packed = make_problem({{"family", "attention"},
                                                              {"heads", 8},
                                                              {"head_dim", 128},
                                                              {"causal", true},
                                                              {"seqlens_q", {1, 7, 300, 2049}}});
  std::unique_ptr<TuningProblem> holder;
  const TuningProblem& measured = measured_problem(*packed, holder);
  ASSERT_NE(holder, nullptr);
  EXPECT_EQ(&measured, holder.get());
  EXPECT_EQ(measured.signature(), packed->signature());
  EXPECT_NE(measured.work().flops, packed->work().flops);
  EXPECT_EQ(throughput(measured, 1.0),
            fmt::format("{:.1f} TFLOP/s", measured.work().flops / 1e-3 / 1e12));

  const MatmulTuning matmul(matmul_problem(256, 256, 256));
  EXPECT_EQ(&measured_problem(matmul, holder), &matmul);
  EXPECT_EQ(holder, nullptr);
}

// Where setmaxnreg moves registers to the consumers (ping-pong, and persistent
// with two consumer warpgroups), ptxas builds the kernel at the launch's share:
// 168 registers at 384 threads, one block a SM. The estimate said 56 for a 64 x 64
// ping-pong tile (three blocks a SM), so the model ranked such tiles by an
// occupancy they never have (its pick for 4096 x 4096 x 64, 0.0103 ms where the
// compiled kernel's resources predict 0.0158).
TEST(MatmulModel, KernelsThatMoveRegistersAreEstimatedAtTheLaunchShare) {
  const MatmulTuning t(matmul_problem(4096, 4096, 64));
  for (const char* config :
       {"bm=64,bn=64,bk=64,warps=12,wm=1,stages=4,splitk=1,mma=wgmma,schedule=pingpong",
        "bm=128,bn=64,bk=64,warps=12,wm=2,stages=3,splitk=1,mma=wgmma,schedule=persistent"}) {
    SCOPED_TRACE(config);
    const Prediction estimated = t.predict(config, h200, Efficiencies());
    EXPECT_EQ(estimated.resources.registers, 168);
    EXPECT_EQ(estimated.occupancy.blocks_per_sm, 1);
    KernelResources compiled = estimated.resources;
    compiled.estimated = false;
    EXPECT_DOUBLE_EQ(t.predict(config, h200, Efficiencies(), &compiled).ms, estimated.ms);
  }
  // One consumer warpgroup moves nothing: the accumulators decide.
  const Prediction one =
      t.predict("bm=64,bn=64,bk=64,warps=8,wm=1,stages=4,splitk=1,mma=wgmma,schedule=persistent",
                h200, Efficiencies());
  EXPECT_LT(one.resources.registers, 168);
}

// Trials measured at a known efficiency fit back to it.
TEST(Fit, TrialsRefitTheirKey) {
  const std::string config = "bm=128,bn=256,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma";
  const std::string key = "matmul:wgmma:128x256:s4";
  Efficiencies truth;
  truth.set(key, 0.5, 1);
  std::vector<cache::TrialRecord> trials;
  for (int64_t n : {4096, 6144, 8192, 10240, 12288, 16384}) {
    const MatmulTuning t(matmul_problem(4096, n, 4096));
    cache::TrialRecord r;
    r.problem = t.signature();
    r.config = config;
    r.measured.median_ms = t.predict(config, h200, truth).ms;
    r.measured.runs = 25;
    trials.push_back(r);
  }
  const Efficiencies fitted = fit_efficiencies(trials, h200);
  ASSERT_TRUE(fitted.fitted(key));
  EXPECT_NEAR(fitted.get(key, 0), 0.5, 0.03);  // shrunk a little toward the prior
  EXPECT_EQ(fitted.values().at(key).samples, 6);
  // Leaving one problem out fits from the others; failed trials teach nothing.
  EXPECT_EQ(fit_efficiencies(trials, h200, trials[0].problem).values().at(key).samples, 5);
  trials[1].error = "wrong result";
  EXPECT_EQ(fit_efficiencies(trials, h200).values().at(key).samples, 5);
}

// A stored trial's config is checked before the model reads it: `warps=1,wm=2`
// (parsed, never validated) left no warps along N, and the register estimate
// divided by zero: a SIGFPE in every process's first choice, from one row that
// `kjit cache import` took.
TEST(Fit, TrialsWithConfigsTheProblemCannotRunTeachNothing) {
  const MatmulTuning t(matmul_problem(4096, 4096, 4096));
  std::vector<cache::TrialRecord> trials;
  for (const char* config : {"bm=128,bn=128,bk=32,warps=1,wm=2,stages=3,splitk=1",
                             "bm=128,bn=128,bk=32,warps=8,wm=3,stages=3,splitk=1",
                             "bm=96,bn=128,bk=32,warps=8,wm=2,stages=3,splitk=1"}) {
    cache::TrialRecord r;
    r.problem = t.signature();
    r.config = config;
    r.measured.median_ms = 1.0;
    r.measured.runs = 25;
    trials.push_back(r);
  }
  EXPECT_TRUE(fit_efficiencies(trials, h200).values().empty());
}

// The refit reads every trial of the GPU model on a process's first choice: trials
// of large packed batches (each prediction walks 65535 sequences) are read only up
// to kMaxFitCost. A store of a thousand of them took 5 s and 2 GB per process.
TEST(Fit, TrialsOfLargePackedBatchesAreBounded) {
  const std::string config = "bm=64,bn=64,stages=2,warp_rows=16";
  std::vector<cache::TrialRecord> trials;
  const int64_t sequences = 65535;
  const int64_t over = kMaxFitCost / sequences + 40;  // 40 trials past the bound
  for (int64_t i = 1; i <= over; ++i) {
    cache::TrialRecord r;
    r.problem = fmt::format(
        "batch={0},heads=1,kv_heads=1,seq_q={1},seq_k={1},causal=0,window=inf:inf,"
        "scale=0.0883883,packed=q:{1}x{0}/k:{1}x{0},dtype=bf16,d=128",
        sequences, i);
    const std::unique_ptr<TuningProblem> problem = problem_from_signature(r.problem);
    ASSERT_NE(problem, nullptr);
    // Measured at 0.7 of the prior efficiency: every trial teaches its key.
    const Prediction prior = problem->predict(config, h200, Efficiencies());
    Efficiencies truth;
    truth.set(prior.efficiency_key, prior.efficiency * 0.7, 1);
    r.config = config;
    r.measured.median_ms = problem->predict(config, h200, truth).ms;
    r.measured.runs = 20;
    trials.push_back(r);
  }
  // The bound is checked by what the fit read (its samples), not by the clock: a
  // wall-clock limit here failed under ASan on a loaded 2-core CI machine (40 s
  // against 30; about 1 s in a release build).
  const Efficiencies fitted = fit_efficiencies(trials, h200);
  int samples = 0;
  for (const auto& [key, value] : fitted.values()) samples += value.samples;
  EXPECT_GT(samples, 0);
  EXPECT_LE(samples, kMaxFitCost / sequences);
}

}  // namespace
}  // namespace kjit::tuner
