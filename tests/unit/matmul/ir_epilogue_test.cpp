// Matmul epilogues written in the elementwise IR: the device function comes from
// the elementwise emitter, operand kinds from declared shapes.
#include <gtest/gtest.h>

#include <cmath>

#include "kjit/runtime/matmul_check.h"
#include "kjit/support/error.h"

namespace kjit::matmul {
namespace {

TEST(IrEpilogue, GeluBiasLowersToOneFunctionOverAccFirst) {
  LoweredEpilogue e = epilogue_from_ir("gelu(acc + bias)", DType::BF16);
  EXPECT_EQ(e.epilogue.function_name, "kjit_epilogue_fn");
  EXPECT_NE(e.epilogue.function_source.find("float kjit_epilogue_fn(float in_acc, float in_bias)"),
            std::string::npos)
      << e.epilogue.function_source;
  ASSERT_EQ(e.epilogue.operands.size(), 1u);
  EXPECT_EQ(e.epilogue.operands[0].name, "bias");
  EXPECT_EQ(e.epilogue.operands[0].kind, OperandKind::ColumnVector);
  EXPECT_EQ(e.epilogue.operands[0].dtype, DType::BF16);
  // For an f32 C the accurate gelu; for bf16 or f16 the one held to 16 bits
  // (templates/math.cuh), the same function otherwise.
  EXPECT_NE(e.epilogue.function_source.find("kjit::gelu_f32(t1)"), std::string::npos);
  EXPECT_NE(e.epilogue.function_source_16bit.find("kjit::gelu_for_16bit(t1)"), std::string::npos);
  EXPECT_EQ(e.epilogue.function_source_16bit.find("gelu_f32"), std::string::npos);
  const LoweredEpilogue relu = epilogue_from_ir("relu(acc + bias)", DType::BF16);
  EXPECT_EQ(relu.epilogue.function_source_16bit, relu.epilogue.function_source);
  // The fp64 twin agrees with the hand-written reference (erf form, both).
  LoweredEpilogue builtin = builtin_epilogue("gelu(acc + bias)", DType::BF16);
  for (double acc : {-3.0, -0.5, 0.0, 0.7, 2.5})
    EXPECT_NEAR(e.reference(acc, {0.25}), builtin.reference(acc, {0.25}), 2e-3) << acc;
}

TEST(IrEpilogue, TheKernelClassDoesNotDependOnSpacing) {
  Problem typed;
  typed.epilogue = epilogue_from_ir("gelu(acc+bias)  # fused", DType::BF16).epilogue;
  Problem usual;
  usual.epilogue = epilogue_from_ir("gelu(acc + bias)", DType::BF16).epilogue;
  EXPECT_EQ(typed.kernel_class(), usual.kernel_class());
  EXPECT_NE(usual.kernel_class().find(",epilogue=gelu(acc + bias),bias:col:bf16"),
            std::string::npos)
      << usual.kernel_class();
}

TEST(IrEpilogue, OperandKindsFollowDeclaredShapes) {
  LoweredEpilogue e = epilogue_from_ir(
      "scale:f32[m,1]; r:f16[m,n]; b:bf16[1,n]; y = acc * scale + r + b", DType::BF16);
  ASSERT_EQ(e.epilogue.operands.size(), 3u);
  EXPECT_EQ(e.epilogue.operands[0].kind, OperandKind::RowVector);
  EXPECT_EQ(e.epilogue.operands[0].dtype, DType::F32);
  EXPECT_EQ(e.epilogue.operands[1].kind, OperandKind::Tensor);
  EXPECT_EQ(e.epilogue.operands[1].dtype, DType::F16);
  EXPECT_EQ(e.epilogue.operands[2].kind, OperandKind::ColumnVector);
  EXPECT_DOUBLE_EQ(e.reference(2.0, {3.0, 0.5, 0.25}), 2.0 * 3.0 + 0.5 + 0.25);
}

TEST(IrEpilogue, BadEpiloguesAreUserErrors) {
  EXPECT_THROW(epilogue_from_ir("bias * 2", DType::BF16), UserError);                 // no acc
  EXPECT_THROW(epilogue_from_ir("x:bf16[k]; y = acc + x", DType::BF16), UserError);   // shape
  EXPECT_THROW(epilogue_from_ir("i:i32[n]; y = acc + i", DType::BF16), UserError);    // dtype
  EXPECT_THROW(epilogue_from_ir("y = acc + ", DType::BF16), UserError);               // parse
  EXPECT_THROW(epilogue_from_ir("a + b + c + d + e + acc", DType::BF16), UserError);  // > 4
  // A parse error points into the user's one line (it had said line 2: acc's
  // declaration was a hidden first line).
  try {
    epilogue_from_ir("gelu(acc +", DType::BF16);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("line 1, column 11"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kjit::matmul
