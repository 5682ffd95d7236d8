// Attention score and mask modifiers in kjit's IR: their device functions (checked
// by NVRTC here, without a GPU), their fp64 twins and derivatives, the errors, and
// how a problem carries them into its kernels.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "kjit/compiler/lowering/attention.h"
#include "kjit/compiler/lowering/attention_modifier.h"
#include "kjit/runtime/attention_check.h"
#include "kjit/runtime/compile.h"
#include "kjit/support/error.h"

namespace kjit::attention {
namespace {

std::string error_of(const std::string& text, bool score) {
  try {
    score ? score_mod_from_ir(text) : mask_mod_from_ir(text);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// The functions compile in a kernel that calls them (sm_90, no spills).
void expect_compiles(const Modifier& m, const std::string& call) {
  KernelSource source;
  source.name = "kjit_modifier_probe";
  source.source = "#include \"kjit/types.cuh\"\n#include \"kjit/math.cuh\"\n" + m.source +
                  "extern \"C\" __global__ void kjit_modifier_probe(float* out, const float* "
                  "operand) {\n  const int q = threadIdx.x, kv = blockIdx.x, head = blockIdx.y;\n"
                  "  out[q] = " +
                  call + ";\n}\n";
  const cuda::CompiledProgram program = compile_for_arch(source, "sm_90");
  ASSERT_FALSE(program.kernels.empty()) << source.source;
  EXPECT_EQ(program.kernels[0].spill_store_bytes, 0);
}

TEST(AttentionModifier, SoftCapping) {
  const Modifier m = score_mod_from_ir("tanh(s / 50) * 50");
  EXPECT_TRUE(m.operands.empty());
  EXPECT_NE(m.source.find("__device__ __forceinline__ float kjit_score_mod(float in_s, int "
                          "in_q_idx, int in_kv_idx, int in_head)"),
            std::string::npos)
      << m.source;
  EXPECT_NE(m.source.find("float kjit_score_mod_grad(float in_s, int in_q_idx"), std::string::npos);
  ScorePoint p;
  p.s = 100;
  EXPECT_NEAR(m.reference(p), 50 * std::tanh(2.0), 1e-5);
  EXPECT_NEAR(m.gradient(p), 1 - std::tanh(2.0) * std::tanh(2.0), 1e-6);
  expect_compiles(m,
                  "kjit_score_mod(out[q], q, kv, head) * kjit_score_mod_grad(out[q], q, kv, "
                  "head)");
  // The same modifier written differently has the same canonical text and key.
  EXPECT_EQ(score_mod_from_ir("tanh(s/50)*50").key, m.key);
  EXPECT_NE(score_mod_from_ir("tanh(s / 30) * 30").key, m.key);
}

TEST(AttentionModifier, AlibiReadsAPerHeadSlope) {
  const Modifier m = score_mod_from_ir("slope:f32[heads]; s - slope * abs(q_idx - kv_idx)");
  ASSERT_EQ(m.operands.size(), 1u);
  EXPECT_EQ(m.operands[0].name, "slope");
  EXPECT_EQ(m.operands[0].kind, ModifierOperandKind::PerHead);
  ScorePoint p;
  p.s = 1.5;
  p.q_idx = 7;
  p.kv_idx = 3;
  p.operands = {0.25};
  EXPECT_DOUBLE_EQ(m.reference(p), 0.5);
  EXPECT_DOUBLE_EQ(m.gradient(p), 1.0);
  EXPECT_NE(m.source.find("int in_head, float in_slope)"), std::string::npos) << m.source;
  expect_compiles(m,
                  "kjit_score_mod(out[q], q, kv, head, operand[head]) + "
                  "kjit_score_mod_grad(out[q], q, kv, head, operand[head])");
  // Undeclared names are per-head f32 operands; [q] and [kv] index by position.
  EXPECT_EQ(score_mod_from_ir("s * w").operands[0].kind, ModifierOperandKind::PerHead);
  const Modifier positions = score_mod_from_ir("a:f32[q]; b:bf16[kv]; s + a * b");
  EXPECT_EQ(positions.operands[0].kind, ModifierOperandKind::PerQuery);
  EXPECT_EQ(positions.operands[1].kind, ModifierOperandKind::PerKey);
}

// Declarations are read by hand, with spaces anywhere between their words: a
// regex recursed once per character and overflowed the stack (a segfault) on a
// statement of 100,000 spaces.
TEST(AttentionModifier, DeclarationsOfAnyLengthAreRead) {
  const Modifier spaced = score_mod_from_ir(" \t slope :  f32 [ heads ]  ; s - slope");
  ASSERT_EQ(spaced.operands.size(), 1u);
  EXPECT_EQ(spaced.operands[0].name, "slope");
  EXPECT_EQ(spaced.operands[0].kind, ModifierOperandKind::PerHead);
  const std::string spaces(100000, ' ');
  EXPECT_TRUE(score_mod_from_ir(spaces + "s * 2").operands.empty());
  EXPECT_EQ(score_mod_from_ir(spaces + "w:f32[kv]" + spaces + "; s * w").operands[0].kind,
            ModifierOperandKind::PerKey);
  // Not declarations: they parse as expressions (and fail there, as before).
  EXPECT_THROW(score_mod_from_ir("slope:f32[heads] x; s - slope"), UserError);
  EXPECT_THROW(score_mod_from_ir("9slope:f32[heads]; s"), UserError);
  EXPECT_THROW(score_mod_from_ir(std::string(100000, 'w') + ":f32[rows]; s"), UserError);
}

// An undeclared name is an operand, so a misspelt s, q_idx, kv_idx or head read random
// operand values: a name one edit (or case) from those is refused unless declared.
TEST(AttentionModifier, MisspeltNamesAreRefusedUnlessDeclared) {
  auto error = [](const std::function<void()>& make) -> std::string {
    try {
      make();
    } catch (const UserError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_NE(error([] { score_mod_from_ir("S * 2"); }).find("did you mean 's'?"), std::string::npos);
  EXPECT_NE(error([] {
              score_mod_from_ir("s - w * abs(q_idx - k_idx)");
            }).find("did you mean 'q_idx' or 'kv_idx'?"),
            std::string::npos);
  EXPECT_NE(error([] { mask_mod_from_ir("kv_idx <= Q_idx"); }).find("'q_idx'"), std::string::npos);
  EXPECT_NE(error([] { mask_mod_from_ir("Head < 2"); }).find("'head'"), std::string::npos);
  // Declared, the same names are operands; names far from the positions need no
  // declaration.
  EXPECT_EQ(score_mod_from_ir("S:f32[heads]; s * S").operands.size(), 1u);
  EXPECT_EQ(score_mod_from_ir("s * bias + slope").operands.size(), 2u);
}

// Score modifiers that read the positions only as q_idx - kv_idx, with arithmetic on
// it exact in float, also come over the difference as a float (one add per score in
// the forward kernels instead of an integer subtract, abs and conversion).
TEST(AttentionModifier, RelativeFormWhereExact) {
  const Modifier alibi = score_mod_from_ir("slope:f32[heads]; s - slope * abs(q_idx - kv_idx)");
  EXPECT_TRUE(alibi.relative);
  EXPECT_NE(alibi.source.find("float kjit_score_mod_relative(float in_s, float in_q_minus_kv, "
                              "int in_head, float in_slope)"),
            std::string::npos)
      << alibi.source;
  EXPECT_NE(alibi.source.find("fabsf(in_q_minus_kv)"), std::string::npos) << alibi.source;
  expect_compiles(alibi, "kjit_score_mod_relative(out[q], float(q - kv), head, operand[head])");
  // Both orders of the difference, comparisons, integer literals (made f32), min, max
  // and true division stay exact.
  for (const char* text : {
           "s - 0.1 * abs(kv_idx - q_idx) + (q_idx - kv_idx > 10)",
           "s + max(q_idx - kv_idx, 0) * 0.5",
           "s - abs(q_idx - kv_idx) / 2",
       }) {
    const Modifier m = score_mod_from_ir(text);
    EXPECT_TRUE(m.relative) << text;
    expect_compiles(m, "kjit_score_mod_relative(out[q], float(q - kv), head)");
  }
  // Not where float could differ (or the rule does not cover an op), nor where the
  // positions are read otherwise.
  for (const char* text : {
           "tanh(s / 50) * 50",                               // no positions
           "s + q_idx * 0.01",                                // a position alone
           "s - (kv_idx > q_idx)",                            // a comparison of positions
           "s - cast(q_idx - kv_idx, i32) * 0.5",             // an op it does not cover
           "s - (q_idx - kv_idx) * (q_idx - kv_idx) * 1e-9",  // a product past 2^24
           "off:i32[heads]; s - abs(q_idx - kv_idx - off)",   // an i32 operand in it
           "a:f32[q]; s - a * abs(q_idx - kv_idx)",           // an operand by position
       })
    EXPECT_FALSE(score_mod_from_ir(text).relative) << text;

  // The forward kernels take it where every position of the problem, padded tiles
  // included, is below 2^24; a longer sequence gets the int function, another kernel.
  Problem p;
  p.seq_q = p.seq_k = 4096;
  p.heads = 4;
  p.score_mod = alibi.text;
  Problem longer = p;
  longer.seq_k = (int64_t{1} << 24) - 100;
  for (const char* config : {"bm=64,bn=64", "mma=wgmma,bn=64"}) {
    const KernelSource k = lower(p, Config::parse(config));
    EXPECT_NE(k.source.find("static constexpr bool kRelative = true;"), std::string::npos)
        << config;
    const KernelSource l = lower(longer, Config::parse(config));
    EXPECT_EQ(l.source.find("kRelative = true"), std::string::npos) << config;
    EXPECT_NE(l.name, k.name);
  }
}

// A modifier whose derivative in s folds to a literal (s plus a bias, or a constant
// times s) lets the backward kernels keep no mod' per score; the glue says which.
TEST(AttentionModifier, ConstantDerivativesAreFound) {
  for (const char* text : {
           "slope:f32[heads]; s - slope * abs(q_idx - kv_idx)",  // ALiBi: mod' = 1
           "s * 0.5 + q_idx * 0.01",                             // mod' = 0.5
           "s + (kv_idx > q_idx) * -1e4",                        // a bias by comparison
       })
    EXPECT_TRUE(score_mod_from_ir(text).constant_grad) << text;
  for (const char* text : {
           "tanh(s / 50) * 50",       // soft-capping
           "s * s",                   // mod' = 2s
           "max(s, q_idx - kv_idx)",  // a select on s
           "s * (q_idx - kv_idx)",    // mod' by position
       })
    EXPECT_FALSE(score_mod_from_ir(text).constant_grad) << text;

  Problem p;
  p.seq_q = p.seq_k = 1000;
  p.heads = 4;
  p.backward = true;
  for (const auto& [text, constant] :
       {std::pair<const char*, bool>{"s - abs(q_idx - kv_idx)", true},
        {"tanh(s / 50) * 50", false}}) {
    p.score_mod = text;
    const std::string line =
        std::string("static constexpr bool kConstantGrad = ") + (constant ? "true;" : "false;");
    for (const BackwardKernel& k :
         lower_backward(p, Config::parse("mma=wgmma,bm=64,bn=128,dq=atomic")))
      if (k.role == "kv") {
        EXPECT_NE(k.source.source.find(line), std::string::npos) << text;
      }
  }
}

TEST(AttentionModifier, SlidingWindowMask) {
  const Modifier m = mask_mod_from_ir("(kv_idx <= q_idx) * (q_idx - kv_idx < 256)");
  EXPECT_NE(m.source.find("bool kjit_mask_mod(int in_q_idx, int in_kv_idx, int in_head)"),
            std::string::npos)
      << m.source;
  ScorePoint p;
  p.q_idx = 300;
  p.kv_idx = 100;
  EXPECT_EQ(m.reference(p), 1.0);
  p.kv_idx = 10;  // 290 keys back: outside the window
  EXPECT_EQ(m.reference(p), 0.0);
  p.kv_idx = 301;  // in the future
  EXPECT_EQ(m.reference(p), 0.0);
  EXPECT_FALSE(m.gradient);
  expect_compiles(m, "kjit_mask_mod(q, kv, head) ? 1.0f : 0.0f");
  const Modifier per_head = mask_mod_from_ir("limit:i32[heads]; q_idx - kv_idx < limit");
  EXPECT_EQ(per_head.operands[0].dtype, ir::DType::I32);
  expect_compiles(per_head, "kjit_mask_mod(q, kv, head, head * 16) ? 1.0f : 0.0f");
}

TEST(AttentionModifier, BadModifiersAreUserErrors) {
  EXPECT_NE(error_of("s > 0 ? 1 : 0", true), "");  // does not parse
  EXPECT_NE(error_of("s > 0", true).find("floating"), std::string::npos) << error_of("s > 0", true);
  EXPECT_NE(error_of("a = s * 2; b = s * 3", true).find("computes 2 values"), std::string::npos);
  EXPECT_NE(error_of("kv_idx <= q_idx + s", false).find("reads s"), std::string::npos);
  EXPECT_NE(error_of("w:f32[n]; s * w", true).find("[heads]"), std::string::npos);
  EXPECT_NE(error_of("w:bool[heads]; s * w", true).find("f32, f16, bf16 or i32"),
            std::string::npos);
  EXPECT_NE(error_of("s + a + b + c + d + e", true).find("at most 4"), std::string::npos);
}

// The problem carries its modifiers: the kernel class names them (equal modifiers,
// one class), every kernel of both passes gets the MOD policy, validation names a
// bad modifier, and the operands come in order, the score modifier's first.
TEST(AttentionModifier, TheProblemCarriesThemIntoEveryKernel) {
  Problem p;
  p.seq_q = p.seq_k = 100;
  p.heads = 4;
  p.score_mod = "slope:f32[heads]; s - slope * abs(q_idx - kv_idx)";
  p.mask_mod = "limit:i32[q]; kv_idx < limit";
  validate_problem(p);
  EXPECT_NE(p.kernel_class().find(",score_mod=" + score_mod_from_ir(p.score_mod).key),
            std::string::npos)
      << p.kernel_class();
  EXPECT_NE(p.kernel_class().find(",mask_mod="), std::string::npos);
  Problem same = p;
  same.score_mod = "slope:f32[heads]; s-slope*abs(q_idx-kv_idx)";
  EXPECT_EQ(same.kernel_class(), p.kernel_class());
  Problem plain = p;
  plain.score_mod = plain.mask_mod = "";
  EXPECT_EQ(plain.kernel_class(), "dtype=bf16,d=128");
  const std::vector<ModifierOperand> operands = p.modifier_operands();
  ASSERT_EQ(operands.size(), 2u);
  EXPECT_EQ(operands[0].name, "slope");
  EXPECT_EQ(operands[1].name, "limit");
  EXPECT_EQ(operands[1].kind, ModifierOperandKind::PerQuery);

  auto expect_modified = [](const KernelSource& k) {
    EXPECT_NE(k.source.find("struct kjit_modifiers : kjit::attention::NoModifiers"),
              std::string::npos)
        << k.name;
    EXPECT_NE(k.source.find("kjit_modifiers>"), std::string::npos) << k.name;
    EXPECT_NE(k.source.find("args.modifier_operands[1])[min(q_idx, args.seq_q - 1)]"),
              std::string::npos)
        << k.name;
    EXPECT_NE(k.name.find("_mod"), std::string::npos);
  };
  expect_modified(lower(p, Config{}));
  expect_modified(lower(p, Config::parse("mma=wgmma,bn=64")));
  for (const char* config : {"bm=64,bn=64", "mma=wgmma,bm=64,bn=64"}) {
    Problem backward = p;
    backward.backward = true;
    for (const BackwardKernel& k : lower_backward(backward, Config::parse(config)))
      if (k.role != "prep") expect_modified(k.source);
  }
  // Without modifiers, nothing of them in the source.
  EXPECT_EQ(lower(plain, Config{}).source.find("kjit_modifiers"), std::string::npos);

  Problem bad = p;
  bad.mask_mod = "kv_idx <= s";
  try {
    validate_problem(bad);
    ADD_FAILURE() << "a mask reading s was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("reads s"), std::string::npos) << e.what();
  }
}

// The fp64 twins the GPU tests check against: operands made per head and position,
// the modified score and its slope, the mask, and the reference row they give.
TEST(AttentionModifier, HostTwinsReadTheOperands) {
  Problem p;
  p.seq_q = 7;
  p.seq_k = 300;
  p.heads = 2;
  p.head_dim = 64;
  p.score_mod = "slope:f32[heads]; s - slope * abs(q_idx - kv_idx)";
  p.mask_mod = "limit:i32[heads]; kv_idx < limit";
  const HostAttention host = make_host_attention(p, 5);
  ASSERT_EQ(host.operands.size(), 2u);
  EXPECT_EQ(host.operands[0].values.size(), 2u);
  EXPECT_EQ(host.operands[0].bytes.size(), 8u);
  EXPECT_EQ(host.operands[1].bytes.size(), 8u);
  for (double v : host.operands[1].values) {
    EXPECT_GE(v, 0);
    EXPECT_LE(v, 300);
  }
  const HostModifiers twins(host);
  const double slope = host.operands[0].values[1];
  EXPECT_DOUBLE_EQ(twins.score(1, 3, 10, 2.0), 2.0 - slope * 7);
  EXPECT_DOUBLE_EQ(twins.slope(1, 3, 10, 2.0), 1.0);
  const auto limit = static_cast<int64_t>(host.operands[1].values[0]);
  EXPECT_TRUE(limit == 0 || twins.keeps(0, 0, limit - 1));
  EXPECT_FALSE(twins.keeps(0, 0, limit));

  // A row's reference: O is a convex combination of V's rows the mask keeps (or 0).
  double o[64], lse = 0;
  reference_row(host, {0, 1, 3}, o, &lse);
  const auto head_limit = static_cast<int64_t>(host.operands[1].values[1]);
  if (head_limit == 0) {
    EXPECT_TRUE(std::isinf(lse) && lse < 0);
    EXPECT_EQ(o[0], 0.0);
  } else {
    EXPECT_TRUE(std::isfinite(lse));
  }
}

// Tiles where the analysis claimed None or All and the device's f32 arithmetic keeps
// or masks a score (a review's brute force over generated masks): a literal held in
// double, 16-bit casts and f32 overflow not modelled, an infinite operand read as a
// bound, an i32 past 2^24 converted to f32 as if exactly. Each answer must be Some.
TEST(AttentionModifier, TileStatesFollowTheDevicesFloatArithmetic) {
  struct Case {
    const char* text;
    TileBox box;
    const char* why;  // the score the device keeps (or masks) in the tile
  };
  const double inf = std::numeric_limits<double>::infinity();
  const Case cases[] = {
      {"f:f32[heads]; (kv_idx <= q_idx) * (f <= 0.1)",
       {0, 63, 0, 63, 0, {0.1}},
       "(0, 0) kept: 0.1f <= 0.1f"},
      {"(cast(kv_idx, bf16) <= cast(q_idx, bf16))",
       {256, 256, 257, 257, 0, {}},
       "kept: 257 rounds to 256 in bf16"},
      {"(cast(kv_idx, f16) <= cast(q_idx, f16))",
       {65536, 65599, 65600, 65663, 0, {}},
       "kept: both are inf in f16"},
      {"f:f32[heads]; (floor(q_idx / f) == floor(kv_idx / f))",
       {1000, 1063, 2000, 2063, 0, {1e-40}},
       "kept: both quotients overflow to inf"},
      {"w:f32[heads]; (q_idx - kv_idx + w >= w)", {0, 63, 0, 63, 0, {inf}}, "kept: inf >= inf"},
      {"f:f32[heads]; (kv_idx < f)",
       {0, 0, 2147483584, 2147483647, 0, {2147483648.0}},
       "masked: (float)2147483584 is 2^31"},
      {"a:i32[heads]; ((2147483648.0 + a) <= head)",
       {0, 63, 0, 63, 0, {-2147483647.0}},
       "kept: (float)a is -2^31, the sum 0"},
  };
  for (const Case& c : cases) {
    const Modifier m = mask_mod_from_ir(c.text);
    ASSERT_TRUE(m.tile) << c.text;
    EXPECT_EQ(m.tile(c.box), TileState::Some) << c.text << ": " << c.why;
    // The device code calls the same rules.
    EXPECT_NE(m.source.find("kjit_mask_tile("), std::string::npos);
  }
  const Modifier converted = mask_mod_from_ir("f:f32[heads]; (kv_idx < f)");
  EXPECT_NE(converted.source.find("lt(to_float(r"), std::string::npos) << converted.source;
  EXPECT_NE(mask_mod_from_ir("cast(kv_idx, f16) <= q_idx").source.find("to_f16(r"),
            std::string::npos);
}

// The mask over a whole tile (interval arithmetic, templates/interval.cuh) is sound:
// a tile it says the mask keeps nothing of has no kept score, one it says the mask
// keeps whole has no masked score; checked against every score of random tiles. And
// it is sharp enough to skip: a sliding window's far tiles are None, its inner All.
TEST(AttentionModifier, TileStatesAreSoundAndSkipTheFarTiles) {
  const char* const masks[] = {
      "(kv_idx <= q_idx) * (q_idx - kv_idx < 256)",
      "kv_idx <= q_idx + 300 - 1000",
      "abs(q_idx - kv_idx) < 40",
      "(kv_idx < q_idx - 40) + (kv_idx > q_idx - 20)",
      "limit:i32[heads]; kv_idx < limit",
      "w:f32[heads]; q_idx * w < kv_idx",
      "q_idx * 0.37 >= kv_idx - 3.5",
      "max(q_idx - 100, 0) <= min(kv_idx, 500)",
      "select(q_idx > 500, kv_idx < 200, kv_idx >= 200)",
      "floor(q_idx / 64) == floor(kv_idx / 64)",
      "cast(q_idx / 7, i32) != cast(kv_idx / 7, i32)",
      "doc:i32[q]; kv_idx < doc",  // per-position: unknown over a tile
      "exp(q_idx * 0.001) > 1.5",  // an op it does not know: never None or All
  };
  uint64_t state = 12345;
  auto random = [&](int64_t bound) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(bound));
  };
  for (const char* text : masks) {
    SCOPED_TRACE(text);
    const Modifier m = mask_mod_from_ir(text);
    ASSERT_TRUE(m.tile);
    EXPECT_NE(m.source.find("__device__ __forceinline__ int kjit_mask_tile("), std::string::npos);
    int decided = 0;
    for (int trial = 0; trial < 300; ++trial) {
      TileBox box;
      const int64_t size = 1 + random(64);
      box.q_lo = random(1200);
      box.q_hi = box.q_lo + random(size);
      box.kv_lo = random(1200);
      box.kv_hi = box.kv_lo + random(size);
      box.head = random(4);
      ScorePoint p;
      p.head = box.head;
      for (const ModifierOperand& o : m.operands) {
        const double v = o.dtype == ir::DType::I32 ? static_cast<double>(random(1200))
                                                   : 0.25 + static_cast<double>(random(100)) / 50;
        box.operands.push_back(v);
        p.operands.push_back(v);
      }
      bool any = false, all = true;
      for (p.q_idx = box.q_lo; p.q_idx <= box.q_hi; ++p.q_idx) {
        for (p.kv_idx = box.kv_lo; p.kv_idx <= box.kv_hi; ++p.kv_idx) {
          // A per-position operand varies along the tile: any value.
          if (!m.operands.empty() && m.operands[0].kind != ModifierOperandKind::PerHead)
            p.operands[0] = static_cast<double>(random(1200));
          const bool kept = m.reference(p) != 0;
          any = any || kept;
          all = all && kept;
        }
      }
      const TileState got = m.tile(box);
      const std::string where =
          fmt::format("q {}..{} kv {}..{}", box.q_lo, box.q_hi, box.kv_lo, box.kv_hi);
      EXPECT_TRUE(got != TileState::None || !any) << "None, but a score is kept: " << where;
      EXPECT_TRUE(got != TileState::All || all) << "All, but a score is masked: " << where;
      decided += got != TileState::Some;
    }
    const std::string t = text;
    if (t.find("doc") != std::string::npos || t.find("exp") != std::string::npos) {
      EXPECT_EQ(decided, 0);
    } else {
      EXPECT_GT(decided, 100);  // most random tiles are decided
    }
  }
  const Modifier window = mask_mod_from_ir("(kv_idx <= q_idx) * (q_idx - kv_idx < 256)");
  EXPECT_EQ(window.tile({1000, 1063, 0, 63, 0, {}}), TileState::None);       // far behind
  EXPECT_EQ(window.tile({1000, 1063, 1064, 1127, 0, {}}), TileState::None);  // the future
  EXPECT_EQ(window.tile({1000, 1063, 850, 913, 0, {}}), TileState::All);     // inside
  EXPECT_EQ(window.tile({1000, 1063, 1000, 1063, 0, {}}), TileState::Some);  // the diagonal
}

// The model's view of the masks: the fraction of tiles the kernels visit.
TEST(AttentionModifier, TileFractionFollowsTheMask) {
  Problem p;
  p.seq_q = p.seq_k = 8192;
  EXPECT_EQ(visited_tile_fraction(p, 128, 128), 1.0);
  p.mask_mod = "kv_idx <= q_idx";  // causal: the diagonal and below, 64 * 65 / 2 of 64 * 64
  EXPECT_NEAR(visited_tile_fraction(p, 128, 128), 65.0 / 128.0, 1e-9);
  p.mask_mod = "(kv_idx <= q_idx) * (q_idx - kv_idx < 256)";  // 1, 2, then 3 key tiles per row tile
  EXPECT_NEAR(visited_tile_fraction(p, 128, 128), (1 + 2 + 3.0 * 62) / (64 * 64), 1e-9);
  p.mask_mod = "limit:i32[heads]; kv_idx < limit";  // values known at launch only
  EXPECT_EQ(visited_tile_fraction(p, 128, 128), 1.0);
}

// The built-in masks visit the same tiles as the mask modifiers that spell them, and
// combine with one; a packed batch's sequences count each by its pairs.
TEST(AttentionModifier, TileFractionFollowsTheBuiltInMasks) {
  Problem p;
  p.seq_q = p.seq_k = 8192;
  p.causal = true;
  EXPECT_NEAR(visited_tile_fraction(p, 128, 128), 65.0 / 128.0, 1e-9);
  p.causal = false;
  p.window_left = 255;
  p.window_right = 0;
  EXPECT_NEAR(visited_tile_fraction(p, 128, 128), (1 + 2 + 3.0 * 62) / (64 * 64), 1e-9);
  // 64-row tiles: a 128-key tile straddles 64 + 255 keys of every tile but the first ones.
  EXPECT_NEAR(visited_tile_fraction(p, 64, 128), (1 + 1 + 2 + 2 + 3.0 * 124) / (128 * 64), 1e-9);
  // A mask modifier within the window narrows it: only the diagonal's tiles remain.
  p.mask_mod = "q_idx - kv_idx < 64";
  EXPECT_NEAR(visited_tile_fraction(p, 128, 128), (1 + 2.0 * 63) / (64 * 64), 1e-9);
  p.mask_mod.clear();
  // S_q < S_k: bottom-right aligned, the 100 queries see keys 7837 .. 8191.
  p.seq_q = 100;
  EXPECT_NEAR(visited_tile_fraction(p, 128, 128), 3.0 / 64, 1e-9);
  // A window to the right only: query tile i sees key tiles 0 .. i + 2.
  p.seq_q = 8192;
  p.window_left = -1;
  p.window_right = 200;
  EXPECT_NEAR(visited_tile_fraction(p, 128, 128), ((3 + 64) * 62 / 2 + 2 * 64.0) / (64 * 64), 1e-9);
  p.window_right = -1;
  EXPECT_EQ(visited_tile_fraction(p, 128, 128), 1.0);
  // Packed, causal: a 128-token sequence (one tile of one) and a 256-token one (3 of 4),
  // weighted by their pairs (1 and 4).
  Problem packed;
  packed.head_dim = 128;
  packed.causal = true;
  packed.set_lengths({128, 256});
  EXPECT_NEAR(visited_tile_fraction(packed, 128, 128), (1.0 * 1 + 4 * 0.75) / 5, 1e-9);
  // The credited pairs against the visited ones.
  Problem full = packed;
  full.causal = false;
  EXPECT_GT(flops(full), 0);
  EXPECT_NEAR(visited_flops(packed, 128, 128), flops(full) * 0.8, 1e-3);
}

// FLOPs credit the pairs a mask modifier keeps, counted by its tile analysis: the
// same as the built-in window it spells, and as counting every pair by its value.
TEST(AttentionModifier, FlopsCountTheKeptPairs) {
  Problem builtin;
  builtin.batch = 2, builtin.heads = 3, builtin.head_dim = 64;
  builtin.seq_q = 1000, builtin.seq_k = 1300;  // bottom-right aligned: offset 300
  builtin.window_left = 255, builtin.window_right = 0;
  Problem mask = builtin;
  mask.window_left = mask.window_right = -1;
  mask.mask_mod = "(kv_idx <= q_idx + 300) * (q_idx + 300 - kv_idx < 256)";
  EXPECT_EQ(forward_flops(mask), forward_flops(builtin));
  mask.backward = true;
  EXPECT_EQ(flops(mask), 2.5 * forward_flops(builtin));

  // A mask its analysis cannot decide over boxes (split to single pairs), one that
  // reads the head, and a built-in window beside it; packed sequences.
  for (const char* text : {"sin(q_idx * 0.37 + kv_idx) > 0.2", "kv_idx * 3 <= q_idx * 2 + head"}) {
    Problem p;
    p.heads = p.kv_heads = 3, p.head_dim = 64;
    p.set_lengths({37, 5, 64}, {53, 20, 1});
    p.window_left = 20, p.window_right = 5;
    p.mask_mod = text;
    const std::shared_ptr<const Modifier> m = cached_mask_mod(text);
    double pairs = 0;
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t offset = p.seq_k_of(b) - p.seq_q_of(b);
      for (int64_t head = 0; head < p.heads; ++head)
        for (int64_t i = 0; i < p.seq_q_of(b); ++i)
          for (int64_t j = 0; j < p.seq_k_of(b); ++j) {
            ScorePoint point;
            point.q_idx = i, point.kv_idx = j, point.head = head;
            const int64_t d = j - i - offset;
            pairs += d >= -20 && d <= 5 && m->reference(point) != 0 ? 1 : 0;
          }
    }
    EXPECT_GT(pairs, 0) << text;
    EXPECT_EQ(forward_flops(p), 4.0 * 64 * pairs) << text;
  }

  // Not countable: operands (their values come with the launch), or more analyses
  // than the budget (a mask split to every one of 2^26 pairs): every pair counts.
  Problem dense;
  dense.seq_q = dense.seq_k = 8192, dense.head_dim = 64;
  const double all = forward_flops(dense);
  for (const char* text :
       {"limit:i32[heads]; kv_idx < limit", "sin(q_idx * 0.37 + kv_idx) > 0.2"}) {
    dense.mask_mod = text;
    EXPECT_EQ(forward_flops(dense), all) << text;
  }
}

}  // namespace
}  // namespace kjit::attention
