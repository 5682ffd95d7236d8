// Attention score and mask modifiers in kjit's IR: their device functions (checked
// by NVRTC here, without a GPU), their fp64 twins and derivatives, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kjit/compiler/lowering/attention_modifier.h"
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

}  // namespace
}  // namespace kjit::attention
