// The launcher's checks happen before anything runs, so they are tested without a
// GPU through plan(): every bad argument is a UserError that names it.
#include <gtest/gtest.h>

#include "kjit/compiler/ir/parser.h"
#include "kjit/compiler/lowering/elementwise_plan.h"
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

// Outputs over inputs were not checked: a row of y as the input of y = x - r (read
// after other threads wrote it), a bf16 output over an f32 input at the same address,
// an output shifted into its input, two outputs on one buffer. Element for element
// in place (same address, dtype and shape, contiguous) passes.
TEST(LaunchChecksAliasing, OutputsShareNoByteButInPlace) {
  const ir::Graph g = ir::parse("x:f32[m,n]; r:f32[n]; y = x - r; z = x * 2");
  auto error = [&](const std::vector<TensorArg>& in, const std::vector<TensorArg>& out) {
    try {
      ir::check_outputs_apart(g, in, out);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const TensorArg x{0x10000, DType::F32, {4, 8}, {}}, r{0x20000, DType::F32, {8}, {}};
  const TensorArg y{0x30000, DType::F32, {4, 8}, {}}, z{0x40000, DType::F32, {4, 8}, {}};
  EXPECT_EQ(error({x, r}, {y, z}), "(no error)");
  TensorArg y_in_place = y;
  y_in_place.data = x.data;
  EXPECT_EQ(error({x, r}, {y_in_place, z}), "(no error)");
  TensorArg r_in_y = r;
  r_in_y.data = y.data + 4 * 8;  // row 1 of y
  EXPECT_NE(error({x, r_in_y}, {y, z}).find("output 'y' (0x30000) overlaps input 'r'"),
            std::string::npos)
      << error({x, r_in_y}, {y, z});
  TensorArg shifted = y;
  shifted.data = x.data + 4;  // one element in
  EXPECT_NE(error({x, r}, {shifted, z}).find("overlaps input 'x'"), std::string::npos);
  TensorArg transposed = x;  // x read transposed over itself: not element for element
  transposed.shape = {4, 8};
  transposed.strides = {1, 4};
  EXPECT_NE(error({transposed, r}, {y_in_place, z}).find("overlaps input 'x'"), std::string::npos);
  TensorArg z_on_y = z;
  z_on_y.data = y.data + 16;
  EXPECT_NE(error({x, r}, {y, z_on_y}).find("output 'y' and output 'z' overlap"),
            std::string::npos);
  // A reversed view (negative strides) reaches below its pointer: its span was
  // taken to run upward, and an output over the elements it reaches was not seen.
  TensorArg reversed = x;  // the last element first: [x.data - 124, x.data + 4)
  reversed.strides = {-8, -1};
  TensorArg y_below = y;
  y_below.data = x.data - 64;  // rows 2 and 3 of the reversed x's reach
  EXPECT_NE(error({reversed, r}, {y_below, z}).find("overlaps input 'x'"), std::string::npos)
      << error({reversed, r}, {y_below, z});
  y_below.data = x.data - 124 - 4 * 8 * 4;  // ends where its reach begins
  EXPECT_EQ(error({reversed, r}, {y_below, z}), "(no error)");
  // Fewer strides than dims: refused by plan(); this check must not read past them.
  TensorArg short_strides = x;
  short_strides.strides = {8};
  EXPECT_EQ(error({short_strides, r}, {y, z}), "(no error)");
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
