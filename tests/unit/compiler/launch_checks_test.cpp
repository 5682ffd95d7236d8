// The launcher's checks happen before anything runs, so they are tested without a
// GPU through plan(): every bad argument is a UserError that names it.
#include <gtest/gtest.h>

#include "kjit/compiler/ir/parser.h"
#include "kjit/runtime/elementwise.h"
#include "kjit/support/error.h"

namespace kjit {
namespace {

std::string plan_error(const ElementwiseKernel& k, const std::vector<TensorArg>& in,
                       const std::vector<TensorArg>& out, Alignment a = Alignment::Auto) {
  try {
    k.plan(in, out, a);
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

class LaunchChecks : public ::testing::Test {
 protected:
  ElementwiseKernel kernel{ir::parse("x:bf16[n]; g:bf16[n]; y = x * sigmoid(x) * g")};
  TensorArg x{0x1000, DType::BF16, {1024}, {}};
  TensorArg g{0x2000, DType::BF16, {1024}, {}};
  TensorArg y{0x3000, DType::BF16, {1024}, {}};
};

TEST_F(LaunchChecks, PicksTheAlignedClassFromPointersAndSizes) {
  EXPECT_TRUE(kernel.plan({x, g}, {y}).problem.aligned);
  TensorArg offset = x;
  offset.data += 2;  // one bf16 element in
  EXPECT_FALSE(kernel.plan({offset, g}, {y}).problem.aligned);
  TensorArg odd_x = x, odd_g = g, odd_y = y;
  odd_x.shape = odd_g.shape = odd_y.shape = {1023};
  EXPECT_FALSE(kernel.plan({odd_x, odd_g}, {odd_y}).problem.aligned);
  EXPECT_FALSE(kernel.plan({x, g}, {y}, Alignment::Unaligned).problem.aligned);
  EXPECT_NE(plan_error(kernel, {offset, g}, {y}, Alignment::Aligned)
                .find("aligned kernel was requested but input 'x' is not 16-byte aligned"),
            std::string::npos);
}

// A strided input's element count was checked, not its reach: a stride of 2^61
// elements over 4 rows formed offsets past 64 bits.
TEST(LaunchChecksStrides, AStridedInputsReachStaysWithin64BitOffsets) {
  ElementwiseKernel k{ir::parse("x:f32[m,n]; y = x * 2")};
  TensorArg x{0x1000, DType::F32, {4, 8}, {int64_t{1} << 61, 1}};
  TensorArg y{0x2000, DType::F32, {4, 8}, {}};
  EXPECT_NE(plan_error(k, {x}, {y}).find("dim 0 of 4 elements at stride 2305843009213693952"),
            std::string::npos)
      << plan_error(k, {x}, {y});
  x.strides = {16, 1};  // rows 16 apart: fine
  EXPECT_EQ(plan_error(k, {x}, {y}), "(no error)");
}

TEST_F(LaunchChecks, WrongCountsDtypesShapesPointers) {
  EXPECT_NE(plan_error(kernel, {x}, {y}).find("takes 2 input(s) (x, g), got 1"), std::string::npos);
  EXPECT_NE(plan_error(kernel, {x, g}, {}).find("writes 1 output(s) (y), got 0"),
            std::string::npos);
  TensorArg f32 = x;
  f32.dtype = DType::F32;
  EXPECT_NE(plan_error(kernel, {f32, g}, {y}).find("input 'x' is f32, the kernel takes bf16"),
            std::string::npos);
  TensorArg short_g = g;
  short_g.shape = {1000};
  EXPECT_NE(plan_error(kernel, {x, short_g}, {y})
                .find("dim 'n' is 1024 in input 'x' but 1000 in input 'g'"),
            std::string::npos);
  TensorArg small_y = y;
  small_y.shape = {512};
  EXPECT_NE(plan_error(kernel, {x, g}, {small_y}).find("output 'y' has shape [512]"),
            std::string::npos);
  TensorArg null = g;
  null.data = 0;
  EXPECT_NE(plan_error(kernel, {x, null}, {y}).find("input 'g' is a null pointer"),
            std::string::npos);
  TensorArg odd = y;
  odd.data += 1;
  EXPECT_NE(plan_error(kernel, {x, g}, {odd}).find("not aligned to its element size"),
            std::string::npos);
  TensorArg rank = x;
  rank.shape = {32, 32};
  EXPECT_NE(plan_error(kernel, {rank, g}, {y}).find("has shape [32,32], the kernel takes [n]"),
            std::string::npos);
}

TEST_F(LaunchChecks, LaunchWithoutRuntimeIsRefused) {
  EXPECT_THROW(kernel.launch({x, g}, {y}), UserError);
}

TEST(LaunchPlan, ClassifiesAccessPatterns) {
  ElementwiseKernel k(ir::parse("x:f32[m,n]; b:f32[n]; c:f32[m,1]; y = x + b + c"));
  TensorArg out{0x9000, DType::F32, {8, 16}, {}};
  TensorArg x{0x1000, DType::F32, {8, 16}, {}}, b{0x2000, DType::F32, {16}, {}},
      c{0x3000, DType::F32, {8, 1}, {}};
  ElementwisePlan p = k.plan({x, b, c}, {out});
  EXPECT_EQ(p.problem.access,
            (std::vector<ir::Access>{ir::Access::Full, ir::Access::Row, ir::Access::Column}));
  EXPECT_EQ(p.n, 128);
  EXPECT_EQ(p.cols, 16);
  // A transposed view of x is strided; a non-unit row stride too.
  x.strides = {1, 8};
  b.strides = {2};
  p = k.plan({x, b, c}, {out});
  EXPECT_EQ(p.problem.access[0], ir::Access::Strided);
  EXPECT_EQ(p.strides[0], (std::pair<int64_t, int64_t>{1, 8}));
  EXPECT_EQ(p.problem.access[1], ir::Access::Strided);
  EXPECT_EQ(p.strides[1], (std::pair<int64_t, int64_t>{0, 2}));
  // Outputs must be contiguous; rank > 2 is refused with a hint.
  TensorArg strided_out = out;
  strided_out.strides = {1, 8};
  EXPECT_THROW(k.plan({x, b, c}, {strided_out}), UserError);
}

}  // namespace
}  // namespace kjit
