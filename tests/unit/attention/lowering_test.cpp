// The attention problem and config: what is accepted, what is refused (and how the
// message says so), the generated glue, and the tuner's space and default.
#include <gtest/gtest.h>

#include <algorithm>

#include <string>

#include "kjit/compiler/lowering/attention.h"
#include "kjit/runtime/attention.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/support/error.h"
#include "kjit/tuner/attention_space.h"

namespace kjit::attention {
namespace {

// What `text` must contain, with `text` in the failure message.
#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

Problem base() {
  Problem p;
  p.batch = 2;
  p.heads = 8;
  p.kv_heads = 2;
  p.seq_q = 1000;
  p.seq_k = 4097;
  p.head_dim = 128;
  return p;
}

std::string user_error(const Problem& p, const Config& c = {}) {
  try {
    validate(p, c);
  } catch (const UserError& e) {
    return std::string(e.what()) + " | " + e.hint();
  }
  return "accepted";
}

TEST(AttentionProblem, AcceptsTheSupportedShapes) {
  for (int d : {64, 96, 128, 256}) {
    for (ir::DType dtype : {ir::DType::BF16, ir::DType::F16}) {
      Problem p = base();
      p.head_dim = d;
      p.dtype = dtype;
      p.causal = true;
      p.window_left = 256;
      EXPECT_EQ(user_error(p), "accepted") << d;
    }
  }
  Problem one = base();
  one.seq_q = one.seq_k = 1;  // a single query and key
  EXPECT_EQ(user_error(one), "accepted");
}

TEST(AttentionProblem, BadInputIsAUserErrorNamingTheValueAndTheSupportedSet) {
  Problem p = base();
  p.head_dim = 80;
  EXPECT_CONTAINS(user_error(p), "head dim 80");
  EXPECT_CONTAINS(user_error(p), "64, 96, 128 and 256");
  p = base();
  p.kv_heads = 3;
  EXPECT_CONTAINS(user_error(p), "kv_heads 3 does not divide heads 8");
  p = base();
  p.dtype = ir::DType::F32;
  EXPECT_CONTAINS(user_error(p), "bf16 and f16");
  p = base();
  p.seq_k = 0;
  EXPECT_CONTAINS(user_error(p), "seq_k is 0");
  p = base();
  p.window_left = -2;
  EXPECT_CONTAINS(user_error(p), "window -2:-1");
  p = base();
  p.scale = -1;
  EXPECT_CONTAINS(user_error(p), "scale -1");
  // Checked as a double, run as an f32: 1e39 was infinity there and 1e-320 zero.
  p.scale = 1e39;
  EXPECT_CONTAINS(user_error(p), "scale 1e+39 is outside");
  p.scale = 1e-320;
  EXPECT_CONTAINS(user_error(p), "the f32 range");
  p.scale = 1e-30;
  EXPECT_EQ(user_error(p), "accepted");
  p = base();
  p.heads = 70000;
  p.kv_heads = 1;
  EXPECT_CONTAINS(user_error(p), "65535");
}

// Lengths within 1023 of 2^31 wrapped the kernels' 32-bit tile counts ((S_k + BN - 1)
// / BN came out negative: no key read, O silently 0), and a window's edges (a row
// plus the window) wrapped where S_q + S_k passed 2^31; causal with a window's right
// side above 0 dropped that side in the C API and Python (the CLI refused it).
// Found by a review; each is now a user error naming the limit.
TEST(AttentionProblem, LengthsAndWindowsPastThe32BitArithmeticAreRefused) {
  Problem p = base();
  p.seq_k = 2147483647;
  EXPECT_CONTAINS(user_error(p), "seq_k is 2147483647; it must be in [1, 2147482624]");
  p.seq_k = 2147482624;
  EXPECT_EQ(user_error(p), "accepted");
  Problem packed = base();
  EXPECT_THROW(packed.set_lengths({2147483000}, {}), UserError);
  p = base();
  p.seq_q = p.seq_k = 1 << 30;
  EXPECT_EQ(user_error(p), "accepted");
  p.window_left = 4096;
  EXPECT_CONTAINS(user_error(p), "seq_q + seq_k is 2147483648");
  p.window_left = -1;
  p.causal = true;
  EXPECT_EQ(user_error(p), "accepted") << "causal alone: the right side is 0";
  p = base();
  p.causal = true;
  p.window_left = 16;
  p.window_right = 5;
  EXPECT_CONTAINS(user_error(p), "causal with window 16:5");
  p.window_right = 0;
  EXPECT_EQ(user_error(p), "accepted");
}

TEST(AttentionProblem, PackedLengthsAreCheckedAndNamed) {
  Problem p = base();
  p.set_lengths({1, 7, 300, 2049}, {5, 7, 1000, 17});
  EXPECT_EQ(p.batch, 4);
  EXPECT_EQ(p.seq_q, 2049);
  EXPECT_EQ(p.seq_k, 1000);
  EXPECT_EQ(p.total_q(), 2357);
  EXPECT_EQ(p.total_k(), 1029);
  EXPECT_EQ(p.seq_k_of(2), 1000);
  EXPECT_EQ(user_error(p), "accepted");
  EXPECT_CONTAINS(p.to_string(), "packed=q:1+7+300+2049/k:5+7+1000+17");
  // Bad offsets: decreasing, not starting at 0, the wrong count, keys missing.
  Problem bad = p;
  bad.cu_seqlens_q[2] = 0;
  EXPECT_CONTAINS(user_error(bad), "decreases at 2");
  bad = p;
  bad.cu_seqlens_k[0] = 3;
  EXPECT_CONTAINS(user_error(bad), "cu_seqlens_k[0] is 3");
  bad = p;
  bad.cu_seqlens_q.pop_back();
  EXPECT_CONTAINS(user_error(bad), "4 offsets for 4 sequences");
  bad = p;
  bad.cu_seqlens_k.clear();
  EXPECT_CONTAINS(user_error(bad), "cu_seqlens_k is missing");
  bad = p;
  bad.seq_q = 100;
  EXPECT_CONTAINS(user_error(bad), "longest sequence in cu_seqlens_q has 2049");
  EXPECT_THROW(p.set_lengths({1, 0}), UserError);
  EXPECT_THROW(p.set_lengths({1, 2}, {3}), UserError);
}

TEST(AttentionConfig, ParsesChecksAndPrints) {
  const Config c = Config::parse("bm=128, bn=32, stages=3");
  EXPECT_EQ(c.to_string(), "bm=128,bn=32,stages=3,warp_rows=16");
  EXPECT_EQ(c.warps(), 8);
  const Config turns = Config::parse("mma=wgmma,bn=128,stages=3,pingpong=1");
  EXPECT_EQ(turns.to_string(), "mma=wgmma,bm=128,bn=128,stages=3,pingpong=1");
  EXPECT_EQ(turns.threads(), 384);
  EXPECT_EQ(Config::parse(turns.to_string()), turns);
  EXPECT_THROW(Config::parse("pingpong=2"), UserError);
  EXPECT_CONTAINS(user_error(base(), Config::parse("pingpong=1")), "mma=wgmma only");
  const Config wide = Config::parse("bm=128,warp_rows=32");
  EXPECT_EQ(wide.warps(), 4);
  EXPECT_EQ(Config::parse(wide.to_string()), wide);
  EXPECT_EQ(Config::parse(c.to_string()), c);
  EXPECT_THROW(Config::parse("bk=32"), UserError);
  EXPECT_THROW(Config::parse("bm=x"), UserError);
  // An unknown key with a word value read as a bad integer for that key.
  try {
    Config::parse("mma=wgmma,window=wide");
    ADD_FAILURE() << "window=wide parsed";
  } catch (const UserError& e) {
    EXPECT_CONTAINS(std::string(e.what()), "has no key 'window'");
  }
  EXPECT_CONTAINS(user_error(base(), Config{40, 64, 2}), "bm=40");
  EXPECT_CONTAINS(user_error(base(), Config{64, 48, 2}), "bn=48");
  EXPECT_CONTAINS(user_error(base(), Config{64, 64, 5}), "stages=5");
  EXPECT_CONTAINS(user_error(base(), Config{64, 64, 2, 24}), "warp_rows=24");
  EXPECT_CONTAINS(user_error(base(), Config{16, 64, 2, 32}), "bm=16");
}

TEST(AttentionConfig, PersistentIsTheWgmmaForwardsSchedule) {
  const Config walk = Config::parse("mma=wgmma,bn=128,stages=2,pingpong=1,persistent=1");
  EXPECT_EQ(walk.to_string(), "mma=wgmma,bm=128,bn=128,stages=2,pingpong=1,persistent=1");
  EXPECT_EQ(Config::parse(walk.to_string()), walk);
  EXPECT_THROW(Config::parse("mma=wgmma,persistent=yes"), UserError);
  EXPECT_EQ(user_error(base(), walk), "accepted");
  EXPECT_CONTAINS(user_error(base(), Config::parse("persistent=1")), "mma=wgmma only");
  Problem backward = base();
  backward.backward = true;
  EXPECT_CONTAINS(user_error(backward, Config::parse("mma=wgmma,bm=64,persistent=1")),
                  "persistent");
  // Work items (query tiles x heads x batch) are counted in 32 bits in the kernel,
  // with room for the grid's step.
  Problem huge = base();
  huge.seq_q = huge.seq_k = 1 << 30;
  huge.heads = huge.kv_heads = 512;
  EXPECT_CONTAINS(user_error(huge, walk), "over 2^30");
  EXPECT_EQ(user_error(huge, Config::parse("mma=wgmma,bn=128,stages=2")), "accepted");

  // Two Q buffers and their q_empty barriers; the kernel's own count is pinned to
  // the launch's by a static_assert in the source.
  const Problem p = base();
  const Config tiles = Config::parse("mma=wgmma,bn=128,stages=2,pingpong=1");
  EXPECT_EQ(shared_bytes(p, walk), shared_bytes(p, tiles) + 128 * p.head_dim * 2 + 3 * 8);
  const KernelSource s = lower(p, walk);
  EXPECT_EQ(s.name, "kjit_attention_fwd_bf16_d128_wgmma_128x128_s2_pingpong_persistent");
  EXPECT_EQ(s.dynamic_shared_bytes, shared_bytes(p, walk));
  EXPECT_CONTAINS(s.source, "kjit_wgmma_values, kjit::attention::NoModifiers, true>");
  EXPECT_CONTAINS(s.source, "kSharedBytes == " + std::to_string(s.dynamic_shared_bytes));
  EXPECT_CONTAINS(s.source, "// grid: (min(items, SMs), 1, 1)");
  EXPECT_NE(lower(p, tiles).source, s.source);
  EXPECT_CONTAINS(lower(p, tiles).source, "kjit_wgmma_values>");

  // The model's choice on an H200 (docs/perf/2026-12-02-h200-attention-persistent.md):
  // persistent blocks without a mask, with a window, and causal (query tiles in pairs
  // of equal work: 1.02-1.06x the block per tile).
  const cuda::DeviceProperties h200 = cuda::planning_device("h200");
  for (const int64_t seq : {512, 2048, 8192}) {
    Problem shape = base();
    shape.heads = shape.kv_heads = 16;
    shape.batch = 16384 / seq;
    shape.seq_q = shape.seq_k = seq;
    EXPECT_TRUE(tuner::attention_default(shape, h200).persistent) << seq;
    shape.window_left = 255;
    shape.window_right = 0;
    EXPECT_TRUE(tuner::attention_default(shape, h200).persistent) << seq;
    shape.window_left = -1;
    shape.causal = true;
    EXPECT_TRUE(tuner::attention_default(shape, h200).persistent) << seq;
  }
}

TEST(AttentionLowering, GlueNamesTheConfigAndIsDeterministic) {
  Problem p = base();
  p.dtype = ir::DType::F16;
  const Config c{128, 64, 3};
  const KernelSource s = lower(p, c);
  EXPECT_EQ(s.family, "attention");
  EXPECT_EQ(s.name, "kjit_attention_fwd_f16_d128_128x64_8w_s3");
  EXPECT_EQ(s.problem, "dtype=f16,d=128");  // sizes and masks are arguments
  EXPECT_EQ(s.block_threads, 256);
  EXPECT_EQ(s.dynamic_shared_bytes, (128 * 136 + 2 * 3 * 64 * 136) * 2);
  EXPECT_CONTAINS(s.source, "#include \"kjit/attention.cuh\"");
  EXPECT_CONTAINS(s.source, "FlashForward<kjit::f16, 128, 128, 64, 8, 3>");
  EXPECT_CONTAINS(s.source, "online");
  EXPECT_EQ(lower(p, c).source, s.source);
  // Every config has its own kernel name (the wgmma engine's too).
  EXPECT_EQ(lower(p, Config::parse("mma=wgmma,bn=64,stages=3")).name,
            "kjit_attention_fwd_f16_d128_wgmma_128x64_s3");
  EXPECT_EQ(lower(p, Config::parse("mma=wgmma,bn=64,stages=3,pingpong=1")).name,
            "kjit_attention_fwd_f16_d128_wgmma_128x64_s3_pingpong");
  EXPECT_TRUE(lower(p, Config::parse("mma=wgmma")).arch_specific);
  EXPECT_FALSE(s.arch_specific);
  // Every shape of the class shares the binary.
  Problem other = p;
  other.seq_q = 7;
  other.causal = true;
  EXPECT_EQ(lower(other, c).source, s.source);
  EXPECT_NE(p.to_string(), other.to_string());
}

TEST(AttentionSpace, PrunesWhatDoesNotFitAndSaysWhy) {
  const cuda::DeviceProperties h200 = cuda::planning_device("h200");
  for (int d : {64, 96, 128, 256}) {
    Problem p = base();
    p.head_dim = d;
    std::vector<tuner::Pruned> pruned;
    const std::vector<Config> space = tuner::attention_space(p, h200, &pruned);
    EXPECT_FALSE(space.empty()) << d;
    EXPECT_EQ(space.size() + pruned.size(), 40u) << d;  // 24 mma.sync + 16 wgmma
    for (const Config& c : space) {
      EXPECT_EQ(user_error(p, c), "accepted");
      EXPECT_LE(shared_bytes(p, c), h200.shared_per_block_optin);
    }
    for (const tuner::Pruned& left_out : pruned) {
      EXPECT_CONTAINS(left_out.config, "bm=");
      EXPECT_FALSE(left_out.reason.empty()) << left_out.config;
    }
    const Config chosen = tuner::attention_default(p, h200);
    EXPECT_EQ(user_error(p, chosen), "accepted");
    EXPECT_NE(std::find(space.begin(), space.end(), chosen), space.end()) << chosen.to_string();
    // The wgmma engine at head dims 64 and 128 on an H200; else mma.sync with 32 rows
    // per warp where the accumulators fit (head dim 96).
    EXPECT_EQ(chosen.wgmma, d == 64 || d == 128) << d;
    if (!chosen.wgmma) {
      EXPECT_EQ(chosen.warp_rows, d == 96 ? 32 : 16) << d;
    }
    // Without sm_90, mma.sync.
    EXPECT_FALSE(tuner::attention_default(p, cuda::planning_device("a100")).wgmma) << d;
  }
  // mma.sync, few query blocks: 64 rows per block keeps more SMs busy.
  Problem small = base();
  small.head_dim = 96;
  small.batch = small.heads = small.kv_heads = 1;
  small.seq_q = 512;
  EXPECT_EQ(tuner::attention_default(small, h200).bm, 64);
  Problem big = base();
  big.head_dim = 96;
  big.seq_q = 8192;
  EXPECT_EQ(tuner::attention_default(big, h200).bm, 128);
}

// The backward pass's dQ modes: its own kernel (the same bits every run), or summed
// with atomics by the dK/dV kernel (dq=atomic: three kernels, no dQ blocks).
TEST(AttentionBackward, AtomicDqIsAConfigTheDeterministicProblemRefuses) {
  const cuda::DeviceProperties h200 = cuda::planning_device("h200");
  Problem p = base();
  p.backward = true;
  const Config atomic = Config::parse("mma=wgmma,bm=64,bn=128,stages=2,dq=atomic");
  EXPECT_TRUE(atomic.atomic_dq);
  EXPECT_EQ(atomic.to_string(), "mma=wgmma,bm=64,bn=128,stages=2,dq=atomic");
  EXPECT_EQ(Config::parse(atomic.to_string()), atomic);
  EXPECT_FALSE(Config::parse("mma=wgmma,bm=64,dq=separate").atomic_dq);
  EXPECT_CONTAINS(user_error(p, atomic), "accepted");
  EXPECT_THROW(Config::parse("dq=fast"), UserError);
  EXPECT_CONTAINS(user_error(p, Config::parse("mma=wgmma,bm=128,dq=atomic")), "bm=64");
  EXPECT_CONTAINS(user_error(p, Config::parse("mma=wgmma,bm=64,pingpong=1,dq=atomic")),
                  "without ping-pong");
  EXPECT_CONTAINS(user_error(p, Config::parse("bm=64,bn=64,dq=atomic")), "mma=wgmma");
  EXPECT_CONTAINS(user_error(base(), Config::parse("mma=wgmma,dq=atomic")), "backward pass only");
  // Three kernels: prep (zeroes the sums), dK/dV with dQ's share, the sums finished.
  const std::vector<BackwardKernel> kernels = lower_backward(p, atomic);
  ASSERT_EQ(kernels.size(), 3u);
  EXPECT_EQ(kernels[1].role, "kv");
  EXPECT_CONTAINS(kernels[1].source.name, "_dqatomic");
  EXPECT_CONTAINS(kernels[1].source.source, "kjit::attention::NoModifiers, kjit_wgmma_dq");
  EXPECT_CONTAINS(kernels[1].source.source, "cp.reduce.async.bulk");
  EXPECT_EQ(kernels[2].role, "q");
  EXPECT_CONTAINS(kernels[2].source.source, "FlashBackwardDqFinish<kjit::bf16, 128>");
  EXPECT_EQ(shared_bytes(p, atomic), kernels[1].source.dynamic_shared_bytes);
  EXPECT_EQ(backward_dq_accum_bytes(p, atomic), p.heads * p.total_q() * 128 * 4);
  EXPECT_EQ(backward_dq_accum_bytes(p, Config::parse("mma=wgmma,bm=64")), 0);
  // The tuner's default on an H200 is the atomic dQ (measured 10% faster than the
  // separate one: efficiency_prior); asked for the same bits, the atomic configs are
  // pruned, saying why, and the default is the separate dQ.
  EXPECT_TRUE(tuner::attention_default(p, h200).atomic_dq);
  Problem d64 = p;  // and at D = 64 (split by columns like D = 128: 1.045x)
  d64.head_dim = 64;
  EXPECT_TRUE(tuner::attention_default(d64, h200).atomic_dq);
  const std::vector<BackwardKernel> d64_kernels = lower_backward(d64, atomic);
  EXPECT_CONTAINS(d64_kernels[1].source.source, "m64n32k16");  // dQ: 32 columns a warpgroup
  EXPECT_EQ(shared_bytes(d64, atomic), d64_kernels[1].source.dynamic_shared_bytes);
  // With a score modifier too (ALiBi, D = 128: a register estimate kept it out; it
  // compiles without spills, EveryConfigWithModifiersCompilesWithoutSpills).
  Problem alibi = p;
  alibi.score_mod = "slope:f32[heads]; s - slope * abs(q_idx - kv_idx)";
  const std::vector<Config> alibi_space = tuner::attention_space(alibi, h200);
  EXPECT_TRUE(std::any_of(alibi_space.begin(), alibi_space.end(),
                          [](const Config& c) { return c.atomic_dq; }));
  EXPECT_TRUE(tuner::attention_default(alibi, h200).atomic_dq);
  Problem same_bits = p;
  same_bits.deterministic = true;
  EXPECT_CONTAINS(same_bits.to_string(), ",deterministic=1");
  EXPECT_CONTAINS(user_error(same_bits, atomic), "deterministic");
  EXPECT_FALSE(tuner::attention_default(same_bits, h200).atomic_dq);
  std::vector<tuner::Pruned> pruned;
  for (const Config& c : tuner::attention_space(same_bits, h200, &pruned))
    EXPECT_FALSE(c.atomic_dq) << c.to_string();
  EXPECT_TRUE(std::any_of(pruned.begin(), pruned.end(), [](const tuner::Pruned& x) {
    return x.config.find("dq=atomic") != std::string::npos &&
           x.reason.find("same bits") != std::string::npos;
  }));
}

// Launch tensors are checked on the host before any kernel runs (no GPU needed):
// outputs whose rows share elements, and layouts past 64-bit offsets, are user errors
// naming the tensor; strided layouts that do not overlap pass.
TEST(AttentionTensors, OverlappingOutputsAndHugeStridesAreUserErrors) {
  Problem p;
  p.batch = 2, p.heads = p.kv_heads = 4, p.seq_q = p.seq_k = 100, p.head_dim = 64;
  const CUdeviceptr base = 1 << 20;
  Tensors t{.q = base, .k = base, .v = base, .o = base + (1 << 24)};
  EXPECT_NO_THROW(resolve(p, t));  // packed BSHD; inputs may share memory
  Tensors bhsd = t;                // heads-major O: [batch, heads, seq, D]
  bhsd.o_strides = {4 * 100 * 64, 64, 100 * 64};
  EXPECT_NO_THROW(resolve(p, bhsd));
  Tensors heads_overlap = t;  // heads 8 elements apart: rows of 64 share 56
  heads_overlap.o_strides.head = 8;
  EXPECT_THROW(
      {
        try {
          resolve(p, heads_overlap);
        } catch (const UserError& e) {
          EXPECT_NE(std::string(e.what()).find("output O"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("head stride 8"), std::string::npos) << e.what();
          throw;
        }
      },
      UserError);
  Tensors batches_overlap = t;  // the second batch starts inside the first
  batches_overlap.o_strides.batch = 64 * 4 * 50;
  EXPECT_THROW(resolve(p, batches_overlap), UserError);
  Tensors huge = t;  // 2^62 elements between batches
  huge.q_strides.batch = int64_t{1} << 62;
  EXPECT_THROW(resolve(p, huge), UserError);

  // The backward's outputs dQ, dK, dV; its inputs may overlap each other.
  BackwardTensors g{.q = base,
                    .k = base,
                    .v = base,
                    .o = base,
                    .lse = base,
                    .d_o = base,
                    .dq = base + (1 << 24),
                    .dk = base + (2 << 24),
                    .dv = base + (3 << 24)};
  EXPECT_NO_THROW(resolve(p, g));
  BackwardTensors dk_overlap = g;
  dk_overlap.dk_strides.seq = 64;  // positions 64 apart, but 4 heads of 64 a position
  EXPECT_THROW(resolve(p, dk_overlap), UserError);
  // A packed batch: positions over every token, no batch stride.
  Problem packed = p;
  packed.set_lengths({30, 70});
  EXPECT_NO_THROW(resolve(packed, t));
  Tensors packed_overlap = t;
  packed_overlap.o_strides.seq = 128;  // 4 heads x 64 elements need 256
  EXPECT_THROW(resolve(packed, packed_overlap), UserError);
}

// Outputs that share elements with another launch tensor were not checked: O over K
// (blocks still read K after others wrote O), the LSE over V, dK over Q, dQ over dV
// all reached the kernels. Tensors interleaved in one buffer without sharing an
// element (Q, K and V of a fused [tokens, 3, heads, D] one) pass; O may be Q itself.
TEST(AttentionTensors, OutputsSharingElementsWithOtherTensorsAreUserErrors) {
  Problem p;
  p.batch = 2, p.heads = p.kv_heads = 4, p.seq_q = p.seq_k = 100, p.head_dim = 64;
  const CUdeviceptr base = 1 << 20, mb = 1 << 24;
  auto error = [&](auto tensors) -> std::string {
    try {
      resolve(p, tensors);
    } catch (const UserError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  const Tensors apart{
      .q = base, .k = base + mb, .v = base + 2 * mb, .o = base + 3 * mb, .lse = base + 4 * mb};
  EXPECT_NO_THROW(resolve(p, apart));
  Tensors o_over_k = apart;
  o_over_k.o = apart.k + 64 * 2;  // one head in
  EXPECT_CONTAINS(error(o_over_k), "output O shares elements with K");
  Tensors in_place = apart;  // each block reads its rows of Q before it writes them
  in_place.o = apart.q;
  EXPECT_NO_THROW(resolve(p, in_place));
  Tensors lse_over_v = apart;
  lse_over_v.lse = apart.v + 1024;
  EXPECT_CONTAINS(error(lse_over_v), "LSE");
  // Q, K, V and O interleaved by token in [batch, seq, 4, heads, D]: no shared element.
  const Strides fused{.batch = 100 * 4 * 4 * 64, .seq = 4 * 4 * 64, .head = 64};
  Tensors interleaved{.q = base,
                      .k = base + 2 * 256,
                      .v = base + 2 * 512,
                      .o = base + 2 * 768,
                      .q_strides = fused,
                      .k_strides = fused,
                      .v_strides = fused,
                      .o_strides = fused};
  EXPECT_NO_THROW(resolve(p, interleaved));
  Tensors shifted = interleaved;  // O half a head into V's rows
  shifted.o = interleaved.v + 2 * 32;
  EXPECT_CONTAINS(error(shifted), "output O shares elements with V");
  // The same by heads: [batch, 4, heads, seq, D].
  const Strides heads_major{.batch = 4 * 4 * 100 * 64, .seq = 64, .head = 100 * 64};
  Tensors by_heads{.q = base,
                   .k = base + 2 * 4 * 100 * 64,
                   .v = base + 2 * 2 * 4 * 100 * 64,
                   .o = base + 2 * 3 * 4 * 100 * 64,
                   .q_strides = heads_major,
                   .k_strides = heads_major,
                   .v_strides = heads_major,
                   .o_strides = heads_major};
  EXPECT_NO_THROW(resolve(p, by_heads));

  BackwardTensors g{.q = base,
                    .k = base + mb,
                    .v = base + 2 * mb,
                    .o = base + 3 * mb,
                    .lse = base + 4 * mb,
                    .d_o = base + 5 * mb,
                    .dq = base + 6 * mb,
                    .dk = base + 7 * mb,
                    .dv = base + 8 * mb};
  EXPECT_NO_THROW(resolve(p, g));
  BackwardTensors dk_over_q = g;
  dk_over_q.dk = g.q;
  EXPECT_CONTAINS(error(dk_over_q), "output dK shares elements with Q");
  BackwardTensors dq_over_dv = g;
  dq_over_dv.dq = g.dv + 2 * 64;
  EXPECT_CONTAINS(error(dq_over_dv), "output dQ shares elements with dV");
  BackwardTensors dq_over_lse = g;
  dq_over_lse.dq = g.lse;
  EXPECT_CONTAINS(error(dq_over_lse), "LSE");

  // The modifiers' operand arrays are read while the outputs are written: one in O,
  // in the LSE or under dQ was accepted.
  p.score_mod = "a:f32[q]; b:f32[kv]; s + a * b";
  Tensors modified = apart;
  modified.modifier_operands = {base + 9 * mb, base + 10 * mb};
  EXPECT_NO_THROW(resolve(p, modified));
  Tensors a_in_o = modified;
  a_in_o.modifier_operands[0] = apart.o + 4096;
  EXPECT_CONTAINS(error(a_in_o), "modifier operand 'a'");
  EXPECT_CONTAINS(error(a_in_o), "overlaps the output O");
  Tensors b_in_lse = modified;
  b_in_lse.modifier_operands[1] = apart.lse + 16;
  EXPECT_CONTAINS(error(b_in_lse), "overlaps the output LSE");
  BackwardTensors g_modified = g;
  g_modified.modifier_operands = modified.modifier_operands;
  EXPECT_NO_THROW(resolve(p, g_modified));
  g_modified.modifier_operands[1] = g.dq + 64;
  EXPECT_CONTAINS(error(g_modified), "overlaps the output dQ");
  g_modified.modifier_operands[1] = g.lse;  // the backward reads the LSE: sharing is fine
  EXPECT_NO_THROW(resolve(p, g_modified));
}

// Strides given in part: a BHSD tensor's head and seq strides with batch 0 made the
// batch stride one head's (seq x its seq stride), so batch 1 read head 1.
TEST(AttentionTensors, ADefaultBatchStrideStepsPastEveryHead) {
  Problem p;
  p.batch = 2, p.heads = p.kv_heads = 4, p.seq_q = p.seq_k = 100, p.head_dim = 64;
  Tensors t{.q = 1 << 20, .k = 1 << 21, .v = 1 << 22, .o = 1 << 23};
  t.q_strides = {.batch = 0, .seq = 64, .head = 100 * 64};
  EXPECT_EQ(resolve(p, t).q_strides.batch, 4 * 100 * 64);
}

}  // namespace
}  // namespace kjit::attention
