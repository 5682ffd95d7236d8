// Matmul config text, validation, the default heuristic and the generated source,
// all without a GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>

#include "kjit/compiler/lowering/matmul.h"
#include "kjit/runtime/matmul.h"
#include "kjit/runtime/matmul_check.h"
#include "kjit/support/error.h"
#include "kjit/tuner/choose.h"
#include "kjit/tuner/matmul_space.h"

namespace kjit::matmul {
namespace {

cuda::DeviceProperties h200() {
  return cuda::h200_class_device("NVIDIA H200");
}

// The same SMs and limits without wgmma (an sm_80-class part): the mma.sync heuristic.
cuda::DeviceProperties h200_as_sm80() {
  cuda::DeviceProperties d = h200();
  d.cc_major = 8;
  return d;
}

// The tuner's choice with nothing tuned: the model's best config of the space.
Config model_config(const Problem& p, const cuda::DeviceProperties& device) {
  tuner::Chooser chooser(cache::Store::disabled("unit test"), "test", device);
  return Config::parse(chooser.choose(tuner::MatmulTuning(p)).config);
}

Problem square(int64_t size) {
  Problem p;
  p.m = p.n = p.k = size;
  return p;
}

TEST(MatmulConfig, PrintsAndParsesCanonically) {
  Config c = Config::parse("bm=128,bn=256,bk=32,warps=8,stages=4,splitk=1");
  EXPECT_EQ(c.warps_m, 2);  // 64 x 64 warp tiles
  EXPECT_EQ(c.to_string(), "bm=128,bn=256,bk=32,warps=8,wm=2,stages=4,splitk=1");
  EXPECT_EQ(Config::parse(c.to_string()), c);
  EXPECT_EQ(Config::parse("bm=256,bn=128,warps=8").warps_m, 4);
  EXPECT_EQ(Config::parse("").to_string(), Config().to_string());
}

TEST(MatmulConfig, BadTextNamesTheValidKeys) {
  try {
    Config::parse("bm=128,tile=3");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("valid keys: bm, bn, bk, warps, wm, stages, splitk"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Config::parse("bm=abc"), UserError);
  EXPECT_THROW(Config::parse("bm"), UserError);
  EXPECT_THROW(Config::parse("bm=-4"), UserError);
  // A key given twice was taken silently (the last one won).
  EXPECT_THROW(Config::parse("bm=128,bn=128,bm=64"), UserError);
  // An unknown key with a word value read as a bad integer ("value 'ahead' for 'pad'
  // is not a positive integer"), hiding that the key itself does not exist.
  for (const char* text : {"mma=wgmma,pad=ahead", "tile=big"}) {
    try {
      Config::parse(text);
      FAIL() << text;
    } catch (const UserError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("unknown matmul config key"), std::string::npos) << what;
      EXPECT_EQ(what.find("positive integer"), std::string::npos) << what;
    }
  }
}

TEST(MatmulConfig, SpacesAroundItemsAreFine) {
  EXPECT_EQ(Config::parse("bm=128, bn=256 , warps=8").to_string(),
            Config::parse("bm=128,bn=256,warps=8").to_string());
  EXPECT_EQ(Config::parse(" mma = wgmma, bm=128").to_string(),
            Config::parse("mma=wgmma,bm=128").to_string());
}

TEST(MatmulConfig, ValidationSaysWhichConstraintFailed) {
  Problem p = square(256);
  auto message = [&](const std::string& text) -> std::string {
    try {
      validate(p, Config::parse(text));
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message("bk=16").find("bk must be 32 or 64"), std::string::npos);
  // A tile too large for shared memory (found by the config fuzzer: its byte count
  // overflowed 32 bits in lower() after validate() let it through).
  EXPECT_NE(message(",bn=5120,,bm=256512,stages=2,,").find("16 to 256 rows and columns"),
            std::string::npos);
  EXPECT_NE(message("bm=512,bn=64").find("bm=512"), std::string::npos);
  EXPECT_NE(message("bm=48,warps=4,wm=2").find("multiple of 16 * wm"), std::string::npos);
  EXPECT_NE(message("stages=1").find("stages=1"), std::string::npos);
  EXPECT_EQ(message("bm=128,bn=128,bk=32,warps=8,stages=3"), "");
  p.k = 0;
  EXPECT_NE(message("").find("K"), std::string::npos);
  p.k = 64;
  p.input = DType::F32;
  EXPECT_NE(message("bm=128").find("f32 SIMT"), std::string::npos);
  EXPECT_EQ(message(simt_config(2).to_string()), "");
  EXPECT_THROW(parse_dtype("fp8"), UserError);
  EXPECT_THROW(set_layout(p, "nx"), UserError);
}

// Sizes the kernels' 32-bit tile arithmetic cannot count: N near 2^31 made the
// persistent schedules' tile count negative (C never written), K near 2^31 a
// split's K range INT_MIN (a zero product). Both passed validation before.
TEST(MatmulConfig, SizesPastTheKernelsIntArithmeticAreUserErrors) {
  auto message = [](Problem p) -> std::string {
    try {
      validate_problem(p);
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  };
  Problem p{.m = 1, .n = 2147483647, .k = 8};
  EXPECT_NE(message(p).find("M and N must be at most 2147482624"), std::string::npos) << message(p);
  p.n = 2147482624;
  EXPECT_EQ(message(p), "");
  p = Problem{.m = 1, .n = 1, .k = 2147483647};
  EXPECT_NE(message(p).find("K at most 1073741824"), std::string::npos) << message(p);
  p.k = int64_t{1} << 30;
  EXPECT_EQ(message(p), "");
}

// load=narrow: the mma.sync engine's alternative to padding; prints and parses
// back, and is refused with the wgmma engine (TMA needs aligned rows).
TEST(MatmulConfig, NarrowLoads) {
  const Config c = Config::parse("bm=128,bn=128,bk=32,warps=8,stages=4,load=narrow");
  EXPECT_TRUE(c.narrow);
  EXPECT_EQ(c.to_string(), "bm=128,bn=128,bk=32,warps=8,wm=2,stages=4,splitk=1,load=narrow");
  EXPECT_EQ(Config::parse(c.to_string()), c);
  EXPECT_FALSE(Config::parse("load=async").narrow);
  EXPECT_THROW(Config::parse("load=wide"), UserError);
  Problem p = square(4095);
  p.aligned = false;
  EXPECT_NO_THROW(validate(p, c));
  try {
    validate(p, Config::parse("bm=128,bn=256,mma=wgmma,stages=4,load=narrow"));
    FAIL() << "narrow accepted with wgmma";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("mma.sync"), std::string::npos) << e.what();
  }
  const KernelSource source = lower(p, c);
  EXPECT_NE(source.name.find("_narrow"), std::string::npos);
  EXPECT_NE(source.source.find("TensorCoreMatmul<kjit::bf16, kjit::bf16, 128, 128, 32, 2, 4, 4, "
                               "true, false, 2, true>"),
            std::string::npos)
      << source.source;
}

// schedule=persistent: prints and parses back, needs the wgmma engine, drops the
// staging constraint (it writes from registers), and lowers to run_persistent.
TEST(MatmulConfig, PersistentSchedule) {
  const Config c = Config::parse("mma=wgmma,bm=128,bn=256,stages=2,schedule=persistent");
  EXPECT_TRUE(c.persistent);
  EXPECT_EQ(c.to_string(),
            "bm=128,bn=256,bk=64,warps=12,wm=2,stages=2,splitk=1,mma=wgmma,schedule=persistent");
  EXPECT_EQ(Config::parse(c.to_string()), c);
  EXPECT_FALSE(Config::parse("schedule=tile").persistent);
  EXPECT_THROW(Config::parse("schedule=stream"), UserError);
  const Problem p = square(4096);
  EXPECT_NO_THROW(validate(p, c));  // 2 stages cannot stage the tile; no need to
  Config tiled = c;
  tiled.persistent = false;
  EXPECT_THROW(validate(p, tiled), UserError);
  try {
    validate(p, Config::parse("bm=128,bn=128,bk=32,warps=8,stages=4,schedule=persistent"));
    FAIL() << "persistent accepted with mma.sync";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("wgmma"), std::string::npos) << e.what();
  }
  Config split = c;
  split.splitk = 2;
  EXPECT_THROW(validate(p, split), UserError);
  const KernelSource source = lower(p, c);
  EXPECT_NE(source.name.find("_persistent"), std::string::npos);
  EXPECT_NE(source.source.find("run_persistent<kjit_matmul_epilogue>"), std::string::npos);
  EXPECT_EQ(lower(p, Config::parse("mma=wgmma,bm=128,bn=256,stages=4")).source.find("persistent"),
            std::string::npos);
}

// pitch=line: prints and parses back, leaves the kernel's source alone (a run-time
// choice), pads the operands of an aligned problem without padding K, and is an
// option of the 16-bit wgmma engine only.
TEST(MatmulConfig, LinePitch) {
  const Config c = Config::parse("mma=wgmma,bm=128,bn=256,stages=4,schedule=persistent,pitch=line");
  EXPECT_TRUE(c.line_pitch);
  EXPECT_EQ(c.to_string(),
            "bm=128,bn=256,bk=64,warps=12,wm=2,stages=4,splitk=1,mma=wgmma,schedule=persistent,"
            "pitch=line");
  EXPECT_EQ(Config::parse(c.to_string()), c);
  EXPECT_FALSE(Config::parse("pitch=any").line_pitch);
  EXPECT_THROW(Config::parse("pitch=128"), UserError);
  Config in_place = c;
  in_place.line_pitch = false;
  EXPECT_EQ(c.source_text(), in_place.source_text());
  const Problem p = square(4104);
  EXPECT_NO_THROW(validate(p, c));
  EXPECT_EQ(lower(p, c).source, lower(p, in_place).source);
  EXPECT_TRUE(pads_operands(p, c));
  EXPECT_FALSE(pads_operands(p, in_place));
  EXPECT_FALSE(pads_k(p, c));  // aligned: K stays 4104, its last k-tile masked
  Problem misaligned = square(4097);
  misaligned.aligned = false;
  EXPECT_TRUE(pads_k(misaligned, c));
  EXPECT_TRUE(pads_k(misaligned, in_place));
  try {
    validate(p, Config::parse("bm=128,bn=128,bk=32,warps=8,stages=4,pitch=line"));
    FAIL() << "pitch=line accepted with mma.sync";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("not a wgmma config"), std::string::npos) << e.what();
  }
  // What the launch reads in place (the runtime's question, with its tensors): B of
  // 4104^3 in rows of 4104 (8208 bytes) is copied with pitch=line only; rows of 4160,
  // a pointer on a line and a K-major operand stay in place; a pointer off 16 bytes,
  // or a misaligned problem's padded K, copies any operand.
  EXPECT_FALSE(reads_in_place(p, c, 0, 4104, 4104 * 4104, true));
  EXPECT_TRUE(reads_in_place(p, in_place, 0, 4104, 4104 * 4104, true));
  EXPECT_TRUE(reads_in_place(p, c, 0, 4104, 4104 * 4104, false));
  EXPECT_TRUE(reads_in_place(p, c, 256, 4160, 4104 * 4160, true));
  EXPECT_FALSE(reads_in_place(p, c, 16, 4160, 4104 * 4160, true));  // off a line
  EXPECT_FALSE(reads_in_place(p, in_place, 8, 4160, 4104 * 4160, false));
  EXPECT_FALSE(reads_in_place(misaligned, in_place, 0, 4104, 4097 * 4104, false));
  Problem tf32 = p;
  tf32.input = DType::TF32;
  tf32.output = DType::F32;
  EXPECT_THROW(validate(tf32, Config::parse("mma=wgmma,bm=128,bn=128,bk=32,stages=4,pitch=line")),
               UserError);
}

// swap=ab: prints and parses back, is part of the kernel's source (its own
// binary), takes bn of 16 to 256 in steps of 16 and up to 12 stages, and is refused
// where the kernel cannot run it: mma.sync, a persistent schedule, tf32, A stored
// transposed. The generated source names the swap and passes the kernel B's
// K-majorness as its A's.
TEST(MatmulConfig, SwappedProduct) {
  const Config c = Config::parse("mma=wgmma,bm=128,bn=16,stages=12,splitk=2,swap=ab");
  EXPECT_TRUE(c.swap);
  EXPECT_EQ(c.to_string(), "bm=128,bn=16,bk=64,warps=12,wm=2,stages=12,splitk=2,mma=wgmma,swap=ab");
  EXPECT_EQ(Config::parse(c.to_string()), c);
  EXPECT_FALSE(Config::parse("swap=none").swap);
  EXPECT_THROW(Config::parse("swap=ba"), UserError);
  Config plain = c;
  plain.swap = false;
  EXPECT_NE(c.source_text(), plain.source_text());

  Problem decode;
  decode.m = 16;
  decode.n = 4096;
  decode.k = 4096;
  EXPECT_NO_THROW(validate(decode, c));
  EXPECT_THROW(validate(decode, plain), UserError);  // bn = 16 only swapped
  const KernelSource nn = lower(decode, c);
  EXPECT_NE(nn.name.find("_swapped"), std::string::npos) << nn.name;
  EXPECT_NE(nn.source.find("WgmmaMatmul<kjit::bf16, kjit::bf16, 128, 16, 12, false, true, "
                           "kjit_wgmma, true, true>"),
            std::string::npos);
  EXPECT_NE(nn.source.find("m64n16k16"), std::string::npos);
  Problem nt = decode;
  set_layout(nt, "nt");
  EXPECT_NE(lower(nt, c).source.find("128, 16, 12, true, true, kjit_wgmma, true, true>"),
            std::string::npos);

  auto refused = [&](const Problem& p, const std::string& text, const std::string& why) {
    try {
      validate(p, Config::parse(text));
      ADD_FAILURE() << text << " accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused(decode, "bm=128,bn=128,bk=32,warps=8,stages=4,swap=ab", "not a wgmma config");
  refused(decode, "mma=wgmma,bm=128,bn=64,stages=4,schedule=persistent,swap=ab", "persistent");
  refused(decode, "mma=wgmma,bm=128,bn=24,stages=4,swap=ab", "16, 32, ..., 256");
  refused(decode, "mma=wgmma,bm=128,bn=16,stages=13,swap=ab", "2 to 12");
  refused(decode, "mma=wgmma,bm=128,bn=128,stages=9", "2 to 8");
  Problem tn = decode;
  set_layout(tn, "tn");
  refused(tn, "mma=wgmma,bm=128,bn=16,stages=4,swap=ab", "layout tn");
  Problem tf32 = decode;
  tf32.input = DType::TF32;
  tf32.output = DType::F32;
  refused(tf32, "mma=wgmma,bm=128,bn=16,bk=32,stages=4,swap=ab", "16-bit inputs");
}

// schedule=streamk: the persistent kernel with the last wave's tiles split splitk
// ways at launch; the kernel source is persistent's (one binary for both), and
// splitk is required (2 or more) rather than refused.
TEST(MatmulConfig, StreamKSchedule) {
  const Config c = Config::parse("mma=wgmma,bm=128,bn=256,stages=4,schedule=streamk,splitk=4");
  EXPECT_TRUE(c.persistent);
  EXPECT_TRUE(c.streamk);
  EXPECT_FALSE(c.pingpong);
  EXPECT_EQ(c.to_string(),
            "bm=128,bn=256,bk=64,warps=12,wm=2,stages=4,splitk=4,mma=wgmma,schedule=streamk");
  EXPECT_EQ(Config::parse(c.to_string()), c);
  Config persistent = Config::parse("mma=wgmma,bm=128,bn=256,stages=4,schedule=persistent");
  EXPECT_EQ(c.source_text(), persistent.source_text());
  const Problem p = square(4097);
  EXPECT_NO_THROW(validate(p, c));
  EXPECT_EQ(lower(p, c).source, lower(p, persistent).source);
  try {
    validate(p, Config::parse("mma=wgmma,bm=128,bn=256,stages=4,schedule=streamk"));
    FAIL() << "schedule=streamk without splits accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("splitk=1"), std::string::npos) << e.what();
  }
  persistent.splitk = 2;
  try {
    validate(p, persistent);
    FAIL() << "schedule=persistent with splitk=2 accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("schedule=streamk"), std::string::npos) << e.what();
  }
  EXPECT_THROW(validate(p, Config::parse("bm=128,bn=128,schedule=streamk,splitk=2")), UserError);
}

// The last wave's split: tiles % blocks tiles, at most blocks / that splits, two
// k-tiles a split at least, no split when nothing is left over or it fills over
// half the blocks.
TEST(MatmulConfig, StreamKSplitsTheLastWave) {
  const StreamK a = streamk_split(561, 132, 65, 4);  // 4097^3 in 128 x 256 tiles
  EXPECT_EQ(a.tiles, 33);
  EXPECT_EQ(a.splits, 4);
  EXPECT_EQ(streamk_split(561, 132, 65, 16).splits, 4);   // 33 x 4 = 132 blocks
  EXPECT_EQ(streamk_split(4096, 132, 16, 16).splits, 8);  // 4 tiles, 16 k-tiles
  EXPECT_EQ(streamk_split(4096, 132, 16, 16).tiles, 4);
  EXPECT_EQ(streamk_split(512, 132, 64, 4).splits, 1);  // 116 left: over half
  EXPECT_EQ(streamk_split(528, 132, 64, 4).splits, 1);  // full waves
  EXPECT_EQ(streamk_split(100, 132, 64, 4).splits, 1);  // under one wave
  EXPECT_EQ(streamk_split(561, 132, 3, 4).splits, 1);   // K too short
  EXPECT_EQ(streamk_split(561, 132, 65, 1).splits, 1);
}

// schedule=pingpong: persistent with two consumer warpgroups taking turns; 12 warps
// whatever bm is, tiles of at most 16384 outputs (a warpgroup holds a whole one),
// no split-K, lowers to run_pingpong with its shared memory.
TEST(MatmulConfig, PingPongSchedule) {
  const Config c = Config::parse("mma=wgmma,bm=64,bn=256,stages=4,schedule=pingpong");
  EXPECT_TRUE(c.persistent);
  EXPECT_TRUE(c.pingpong);
  EXPECT_EQ(c.warps, 12);
  EXPECT_EQ(c.to_string(),
            "bm=64,bn=256,bk=64,warps=12,wm=1,stages=4,splitk=1,mma=wgmma,schedule=pingpong");
  EXPECT_EQ(Config::parse(c.to_string()), c);
  EXPECT_FALSE(Config::parse("mma=wgmma,schedule=persistent").pingpong);
  const Problem p = square(4096);
  EXPECT_NO_THROW(validate(p, c));
  EXPECT_NO_THROW(validate(p, Config::parse("mma=wgmma,bm=128,bn=128,schedule=pingpong")));
  try {
    validate(p, Config::parse("mma=wgmma,bm=128,bn=256,schedule=pingpong"));
    FAIL() << "a 128x256 tile per warpgroup accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("16384"), std::string::npos) << e.what();
  }
  EXPECT_THROW(validate(p, Config::parse("bm=64,bn=128,bk=32,warps=4,stages=4,schedule=pingpong")),
               UserError);
  Config split = c;
  split.splitk = 2;
  EXPECT_THROW(validate(p, split), UserError);
  const KernelSource source = lower(p, c);
  EXPECT_EQ(source.block_threads, 384);
  EXPECT_NE(source.name.find("_pingpong"), std::string::npos);
  EXPECT_NE(source.source.find("run_pingpong<kjit_matmul_epilogue>"), std::string::npos);
  EXPECT_NE(
      source.source.find("PINGPONG_SHARED_BYTES == " + std::to_string(source.dynamic_shared_bytes)),
      std::string::npos);
  // Stages, their barriers, two turn barriers, eight warps' slabs, alignment slack.
  EXPECT_EQ(source.dynamic_shared_bytes, 1024 + 4 * 40960 + 2 * 4 * 8 + 16 + 8 * 16 * 128);
}

TEST(MatmulConfig, DeviceLimitsStateRequiredAndLimit) {
  Problem p = square(1024);
  try {
    check_fits_device(p, Config::parse("bm=256,bn=256,bk=64,warps=8,stages=4"), h200());
    FAIL();
  } catch (const UserError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("262144 bytes of shared memory"), std::string::npos) << what;
    EXPECT_NE(what.find("232448"), std::string::npos) << what;
    EXPECT_NE(what.find("stages"), std::string::npos) << what;
  }
  for (const std::string& c : tuner::MatmulTuning(p).space(h200()).candidates)
    EXPECT_NO_THROW(check_fits_device(p, Config::parse(c), h200())) << c;
}

// sm_90 gets the TMA + wgmma engine; other architectures never do.
TEST(MatmulModel, HopperPicksWgmmaOthersMmaSync) {
  for (int64_t size : {64, 4095, 4096}) {
    EXPECT_TRUE(model_config(square(size), h200()).wgmma) << size;
    EXPECT_FALSE(model_config(square(size), h200_as_sm80()).wgmma) << size;
  }
  try {
    check_fits_device(square(256), wgmma_config(128, 256, 4), h200_as_sm80());
    FAIL() << "wgmma accepted on sm_80";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("sm_90"), std::string::npos) << e.what();
  }
}

// tf32: f32 data on the wgmma engine, bk = 32 (128 bytes of K), f32 out; every other
// engine, output type or bk is refused with what to write instead; off sm_90 the
// error says tf32 has no other engine.
TEST(MatmulTf32, WgmmaOnlyWithBk32) {
  Problem p = square(1000);
  p.input = DType::TF32;
  p.output = DType::F32;
  EXPECT_EQ(parse_dtype("tf32"), DType::TF32);
  EXPECT_EQ(std::string(to_string(DType::TF32)), "tf32");
  EXPECT_EQ(dtype_bytes(DType::TF32), 4);
  const Config c = model_config(p, h200());
  EXPECT_TRUE(c.wgmma);
  EXPECT_EQ(c.bk, 32);
  EXPECT_NO_THROW(validate(p, c));
  EXPECT_NO_THROW(check_fits_device(p, c, h200()));
  auto message = [&](const Problem& q, const std::string& text) -> std::string {
    try {
      validate(q, Config::parse(text));
    } catch (const UserError& e) {
      return std::string(e.what()) + " | " + e.hint();
    }
    return "";
  };
  EXPECT_NE(message(p, "bm=128,bn=128,bk=32,warps=8").find("wgmma engine"), std::string::npos);
  EXPECT_NE(message(p, "bm=128,bn=256,stages=4,mma=wgmma").find("bk=32"), std::string::npos);
  EXPECT_EQ(message(p, "bm=128,bn=256,bk=32,stages=4,mma=wgmma"), "");
  Problem out_tf32 = p;
  out_tf32.output = DType::TF32;
  EXPECT_NE(message(out_tf32, c.to_string()).find("input type"), std::string::npos);
  try {
    check_fits_device(p, c, h200_as_sm80());
    FAIL() << "tf32 accepted off sm_90";
  } catch (const UserError& e) {
    EXPECT_NE(e.hint().find("f32"), std::string::npos) << e.hint();
  }
  // The generated kernel: m64nBNk8 tf32 wgmma, both operands K-major in every layout.
  for (const char* layout : {"nn", "nt", "tn", "tt"}) {
    set_layout(p, layout);
    const std::string source = lower(p, c).source;
    EXPECT_NE(source.find(fmt::format("m64n{}k8.f32.tf32.tf32", c.bn)), std::string::npos);
    EXPECT_NE(source.find("WgmmaMatmul<float, float, " + std::to_string(c.bm) + ", " +
                          std::to_string(c.bn) + ", " + std::to_string(c.stages) +
                          ", true, true, kjit_wgmma, "),
              std::string::npos)
        << layout;
  }
}

TEST(MatmulModel, EveryPickIsValid) {
  for (int64_t m : {1, 7, 129, 4097})
    for (int64_t n : {1, 17, 4096, 50257})
      for (const char* layout : {"nn", "tt"}) {
        Problem p;
        p.m = m;
        p.n = n;
        p.k = 768;
        set_layout(p, layout);
        for (const cuda::DeviceProperties& d : {h200(), h200_as_sm80()}) {
          const Config c = model_config(p, d);
          EXPECT_NO_THROW(validate(p, c)) << p.to_string() << " " << c.to_string();
          // Padding measured 3-9x faster than narrow loads (docs/matmul.md).
          EXPECT_FALSE(c.narrow) << p.to_string();
          EXPECT_NO_THROW(check_fits_device(p, c, d));
        }
      }
  Problem f;
  f.m = f.n = f.k = 100;
  f.input = f.output = DType::F32;
  EXPECT_NO_THROW(validate(f, model_config(f, h200())));
}

TEST(MatmulLowering, SourceIsDeterministicAndReadable) {
  Problem p = square(4096);
  LoweredEpilogue e = builtin_epilogue("gelu(acc + bias)", DType::BF16);
  p.epilogue = e.epilogue;
  const Config c = model_config(p, h200());
  const KernelSource a = lower(p, c), b = lower(p, c);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.family, "matmul");
  EXPECT_NE(a.source.find("layout=nn,dtype=bf16,out=bf16,align=16"), std::string::npos);
  Problem other = p;
  other.m = 77;  // sizes are arguments: the same binary serves every size
  EXPECT_EQ(lower(other, c).source, a.source);
  EXPECT_NE(a.source.find("// config:    " + c.source_text()), std::string::npos);
  EXPECT_NE(a.source.find("gelu(acc + bias)"), std::string::npos);
  EXPECT_NE(a.source.find("extern \"C\" __global__"), std::string::npos);
  EXPECT_EQ(a.dynamic_shared_bytes, shared_bytes(p, c));
  EXPECT_GT(a.dynamic_shared_bytes, 48 * 1024);
  Problem q = p;
  q.aligned = false;
  EXPECT_NE(lower(q, c).problem, a.problem);  // the alignment class is in the key
}

// The epilogue stages the fp32 tile through the pipeline's shared memory in as few
// row passes as fit; a config whose buffers are too small for even one mma row per
// warp gets more shared memory rather than an overflow.
TEST(MatmulLowering, EpiloguePassesFitTheSharedMemory) {
  Problem p = square(4096);
  struct Expect {
    const char* config;
    int passes, shared;
  };
  for (const Expect& e : {
           Expect{"bm=128,bn=256,bk=32,warps=8,wm=2,stages=4", 2, 98304},  // 2 x 67584 B
           Expect{"bm=128,bn=256,bk=32,warps=8,wm=2,stages=3", 2, 73728},
           Expect{"bm=256,bn=128,bk=32,warps=8,wm=4,stages=4", 2, 98304},
           Expect{"bm=128,bn=128,bk=32,warps=4,wm=2,stages=4", 2, 65536},  // 69632 > 65536
           Expect{"bm=128,bn=128,bk=64,warps=8,wm=2,stages=3", 1, 98304},
           Expect{"bm=64,bn=64,bk=64,warps=4,wm=2,stages=3", 1, 49152},
           Expect{"bm=64,bn=256,bk=32,warps=4,wm=2,stages=2", 2, 40960},  // 33792 B a pass
           // One mma row per warp (16 x 256 warp tiles): 64 x 264 x 4 B > 40 KiB of buffers.
           Expect{"bm=64,bn=256,bk=32,warps=4,wm=4,stages=2", 1, 67584},
       }) {
    const Config c = Config::parse(e.config);
    SCOPED_TRACE(e.config);
    EXPECT_EQ(epilogue_passes(p, c), e.passes);
    EXPECT_EQ(shared_bytes(p, c), e.shared);
    EXPECT_LE(c.bm / e.passes * (c.bn + 8) * 4, shared_bytes(p, c));
    const KernelSource source = lower(p, c);
    EXPECT_EQ(source.dynamic_shared_bytes, e.shared);
    EXPECT_NE(source.source.find(fmt::format("true, false, {}>", e.passes)), std::string::npos)
        << source.source;
  }
}

TEST(MatmulAlignment, ClassFollowsPointersAndLeadingDimensions) {
  Problem p = square(4096);
  Tensors t;
  t.a = 0x10000000, t.b = 0x20000000, t.c = 0x30000000;
  EXPECT_TRUE(is_aligned(p, resolve(p, t)));
  Problem q = square(4097);
  EXPECT_FALSE(is_aligned(q, resolve(q, t)));
  t.a = 0x10000002;  // 2-byte aligned pointer
  EXPECT_FALSE(is_aligned(p, resolve(p, t)));
}

// resolve()'s UserError, or "" when it takes the tensors.
std::string message(const Problem& p, const Tensors& t) {
  try {
    resolve(p, t);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// Bad strides and aliasing are user errors naming the value: a negative batch
// stride, offsets past 64 bits, C on top of A or B. C0 may be C, and C may be a
// column block of the buffer A is another column block of.
TEST(MatmulTensors, StridesAndAliasingAreChecked) {
  Problem p;
  p.m = 64, p.n = 32, p.k = 16;
  Tensors t;
  t.a = 0x10000000, t.b = 0x20000000, t.c = 0x30000000;
  EXPECT_EQ(message(p, t), "");
  Tensors in_place = t;
  in_place.c0 = in_place.c;
  in_place.beta = 1.0f;
  EXPECT_EQ(message(p, in_place), "");
  Tensors on_a = t;
  on_a.c = on_a.a + 64;
  EXPECT_NE(message(p, on_a).find("overlaps the input A"), std::string::npos) << message(p, on_a);
  Tensors on_b = t;
  on_b.c = on_b.b;
  EXPECT_NE(message(p, on_b).find("overlaps the input B"), std::string::npos);
  // A pointer inside an element (a bf16 at an odd address) is refused by name.
  Tensors odd = t;
  odd.c = t.c + 1;
  EXPECT_NE(message(p, odd).find("C's pointer 0x30000001 is not aligned to its 2-byte elements"),
            std::string::npos)
      << message(p, odd);
  odd = t;
  odd.b = t.b + 3;
  EXPECT_NE(message(p, odd).find("B's pointer"), std::string::npos) << message(p, odd);
  // A in columns 0..15 and C in columns 16..47 of one 64 x 48 bf16 buffer.
  Tensors blocks = t;
  blocks.lda = blocks.ldc = 48;
  blocks.c = blocks.a + 16 * 2;
  EXPECT_EQ(message(p, blocks), "");
  blocks.c = blocks.a + 8 * 2;  // columns 8..39: on A's 8..15
  EXPECT_NE(message(p, blocks).find("overlaps"), std::string::npos);
  Problem batched = p;
  batched.batch = 3;
  Tensors negative = t;
  negative.stride_a = -64 * 16;
  EXPECT_NE(message(batched, negative).find("-1024"), std::string::npos)
      << message(batched, negative);
  Tensors huge = t;
  huge.ldb = int64_t{1} << 61;
  EXPECT_NE(message(p, huge).find("2^63"), std::string::npos) << message(p, huge);
}

// The packed batch stride M x ldc overflowed 64 bits unchecked: m = 2, batch = 2 and
// ldc = 2^62 made C's stride INT64_MIN, whose negative batch term cancelled the rows'
// span in the extent check, and the launch went ahead (a review found it). The same
// products for A, B and C0 gave "batch stride -9223372036854775808" for strides the
// caller never passed. And a pointer at or above 2^63 read as negative, so its end
// never overflowed.
TEST(MatmulTensors, StridesAndPointersPast64BitsAreRefused) {
  Problem p;
  p.m = 2, p.n = 32, p.k = 16, p.batch = 2;
  Tensors t;
  t.a = int64_t{1} << 40, t.b = int64_t{2} << 40, t.c = int64_t{3} << 40;
  EXPECT_EQ(message(p, t), "");
  Tensors wide_c = t;
  wide_c.ldc = int64_t{1} << 62;
  EXPECT_NE(message(p, wide_c).find("C has 2 rows of leading dimension 4611686018427387904"),
            std::string::npos)
      << message(p, wide_c);
  Tensors wide_a = t;
  wide_a.lda = int64_t{1} << 62;
  const std::string a_message = message(p, wide_a);
  EXPECT_NE(a_message.find("A has 2 rows"), std::string::npos) << a_message;
  EXPECT_EQ(a_message.find("-9223372036854775808"), std::string::npos) << a_message;
  Problem single = p;
  single.batch = 1;
  Tensors high = t;
  high.c = ~CUdeviceptr{0} - 0xffff;  // 0xffff...0000: its extent wraps past 2^64
  EXPECT_NE(message(single, high).find("2^63"), std::string::npos) << message(single, high);
}

// Epilogue operands and C0 were checked for a pointer only: a bias at an odd address
// (a misaligned load faults), a negative or wrapping batch stride, a bias inside C
// (read after other tiles wrote it) and C0 one row into C all reached the kernel.
TEST(MatmulTensors, EpilogueOperandsAndC0AreCheckedLikeTheOperands) {
  Problem p;
  p.m = 64, p.n = 32, p.k = 16;
  p.epilogue = epilogue_from_ir("r:bf16[m,n]; gelu(acc + bias) + r", DType::BF16).epilogue;
  ASSERT_EQ(p.epilogue.operands.size(), 2u);
  Tensors t;
  t.a = 0x10000000, t.b = 0x20000000, t.c = 0x30000000;
  // In the order the epilogue names them: r (a tensor), then bias (a column vector).
  const bool r_first = p.epilogue.operands[0].name == "r";
  auto with = [&](CUdeviceptr r, CUdeviceptr bias, int64_t bias_stride = 0) {
    Tensors u = t;
    const Tensors::Extra re{r, 0, 0}, be{bias, 0, bias_stride};
    u.extras = r_first ? std::vector<Tensors::Extra>{re, be} : std::vector<Tensors::Extra>{be, re};
    return u;
  };
  EXPECT_EQ(message(p, with(0x40000000, 0x50000000)), "");
  EXPECT_EQ(message(p, with(t.c, 0x50000000)), "") << "a residual may be C itself";
  EXPECT_NE(message(p, with(0x40000000, 0x50000001)).find("not aligned to its 2-byte"),
            std::string::npos);
  EXPECT_NE(message(p, with(0x40000000, t.c + 2 * 32 * 3)).find("overlaps the output C"),
            std::string::npos)
      << message(p, with(0x40000000, t.c + 2 * 32 * 3));
  EXPECT_NE(message(p, with(t.c + 2 * 32, 0x50000000)).find("overlaps the output C"),
            std::string::npos)
      << "a residual one row into C";
  Problem batched = p;
  batched.batch = 2;
  EXPECT_NE(message(batched, with(0x40000000, 0x50000000, -32)).find("batch stride -32"),
            std::string::npos);
  EXPECT_NE(message(batched, with(0x40000000, 0x50000000, int64_t{1} << 62)).find("2^63"),
            std::string::npos);
  Tensors shifted_c0 = with(0x40000000, 0x50000000);
  shifted_c0.beta = 1.0f;
  shifted_c0.c0 = t.c + 2 * 32;
  EXPECT_NE(message(p, shifted_c0).find("C0"), std::string::npos) << message(p, shifted_c0);
  shifted_c0.c0 = t.c;
  EXPECT_EQ(message(p, shifted_c0), "") << "C0 may be C itself";
}

TEST(MatmulCheck, ReferenceMatchesAHandComputedProduct) {
  Problem p;
  p.m = 2;
  p.n = 2;
  p.k = 2;
  p.input = p.output = DType::F32;
  HostProblem h = make_host_problem(p, 1);
  h.a.values = {1, 2, 3, 4};
  h.b.values = {5, 6, 7, 8};
  EXPECT_EQ(reference_at(h, 0, 0, 0), 19);
  EXPECT_EQ(reference_at(h, 0, 1, 1), 50);
  set_layout(h.problem, "tt");
  EXPECT_EQ(reference_at(h, 0, 0, 1), 1 * 7 + 3 * 8);  // A^T row 0 = (1, 3), B^T col 1 = (7, 8)
  std::vector<double> out = {19, 22, 43, 50};
  set_layout(h.problem, "nn");
  CheckResult ok = check_output(h, out, {0, 1});
  EXPECT_EQ(ok.relative_l2, 0);
  out[3] = 60;
  CheckResult bad = check_output(h, out, {0, 1});
  EXPECT_GT(bad.relative_l2, 0);
  EXPECT_TRUE(bad.has_first_bad);
  EXPECT_EQ(bad.bad_row, 1);
  EXPECT_EQ(bad.bad_col, 1);
}

// The sampled reference (row by row, threaded) agrees with the element-wise one in
// every layout, with batches, alpha, beta and an epilogue.
TEST(MatmulCheck, SampledReferenceMatchesElementByElement) {
  for (const char* layout : {"nn", "nt", "tn", "tt"}) {
    Problem p;
    p.m = 37;
    p.n = 29;
    p.k = 41;
    p.batch = 2;
    p.input = p.output = DType::F32;
    set_layout(p, layout);
    const LoweredEpilogue e = epilogue_from_ir("gelu(acc + bias)", DType::F32);
    p.epilogue = e.epilogue;
    const HostProblem h = make_host_problem(p, 5, 0.5f, 0.25f, e.reference);
    const std::vector<int64_t> rows = {0, 7, 36};
    const SampledReference r = sample_reference(h, rows);
    size_t i = 0;
    for (int64_t batch = 0; batch < p.batch; ++batch)
      for (int64_t row : rows)
        for (int64_t col = 0; col < p.n; ++col, ++i)
          ASSERT_NEAR(r.values[i], reference_at(h, batch, row, col), 1e-6) << layout;
    EXPECT_EQ(i, r.values.size());
  }
}

}  // namespace
}  // namespace kjit::matmul
