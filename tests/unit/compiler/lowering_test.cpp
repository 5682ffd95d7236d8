#include <gtest/gtest.h>

#include "kjit/compiler/ir/parser.h"
#include "kjit/compiler/lowering/elementwise.h"
#include "kjit/compiler/passes/pipeline.h"
#include "kjit/support/error.h"

namespace kjit::ir {
namespace {

ElementwiseProblem problem(const std::string& text, bool aligned, std::vector<Access> access = {}) {
  ElementwiseProblem p;
  p.graph = optimize(parse(text));
  p.access = access.empty() ? std::vector<Access>(p.graph.inputs().size(), Access::Full) : access;
  p.aligned = aligned;
  return p;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Lowering, ByteIdenticalForIdenticalInput) {
  auto a = lower_elementwise(problem("y = sin(x)^2 + cos(x)^2", true), {});
  auto b = lower_elementwise(problem("y = sin(x)^2 + cos(x)^2", true), {});
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.name, b.name);
  auto c = lower_elementwise(problem("y = sin(x)^2 + cos(x)^2", false), {});
  EXPECT_NE(a.name, c.name);  // the alignment class is part of the problem
}

TEST(Lowering, HeaderCommentAndOneKernel) {
  KernelSource s =
      lower_elementwise(problem("x:bf16[n]; g:bf16[n]; y = x * sigmoid(x) * g", true), {});
  EXPECT_EQ(count(s.source, "__global__"), 1);
  EXPECT_NE(s.source.find("// Problem: elementwise ir="), std::string::npos);
  EXPECT_NE(s.source.find("// Config:  block=512,vec=0,unroll=2"), std::string::npos);
  EXPECT_NE(s.source.find(kGeneratorVersion), std::string::npos);
  EXPECT_NE(s.source.find("//   x:bf16[n]"), std::string::npos);
  // The body's comments use the header's IR names: the code reads against the listing.
  EXPECT_NE(s.source.find("//   _1 = sigmoid(x)\n//   _2 = mul(x, _1)\n//   y = mul(_2, g)\n"),
            std::string::npos)
      << s.source;
  EXPECT_NE(s.source.find("  // _1 = sigmoid(x)  -> bf16[n]\n  const float t1 = "),
            std::string::npos)
      << s.source;
  EXPECT_NE(s.source.find("  // y = mul(_2, g)  -> bf16[n]\n  const float v_y = t2 * in_g;"),
            std::string::npos)
      << s.source;
  // 8 bf16 per 16-byte vector, math in f32.
  EXPECT_NE(s.source.find("constexpr int V = 8;"), std::string::npos);
  EXPECT_NE(s.source.find("kjit::load_vec<kjit::bf16, V>(in_x + i)"), std::string::npos);
  EXPECT_NE(s.source.find("kjit::to_f32(in_x_vec[u].v[e])"), std::string::npos);
  EXPECT_NE(s.source.find("kjit::from_f32<kjit::bf16>(value_y)"), std::string::npos);
  EXPECT_EQ(s.family, "elementwise");
  EXPECT_EQ(s.block_threads, 512);
}

TEST(Lowering, ScalarPathOffTheAlignedClass) {
  KernelSource s = lower_elementwise(problem("y = x + 1.0", false), {});
  EXPECT_NE(s.source.find("constexpr int V = 1;"), std::string::npos);
  EXPECT_NE(s.source.find("Scalar path"), std::string::npos);
}

TEST(Lowering, AccessPatternsAndStrides) {
  KernelSource s = lower_elementwise(
      problem("x:f32[m,n]; b:f32[n]; c:f32[m,1]; s:f32[]; y = x * b + c * s", true,
              {Access::Strided, Access::Row, Access::Column, Access::Scalar}),
      {});
  EXPECT_NE(s.source.find("long long in_x_stride0, long long in_x_stride1"), std::string::npos);
  EXPECT_NE(s.source.find("in_b + col"), std::string::npos);
  EXPECT_NE(s.source.find("in_c[row]"), std::string::npos);
  EXPECT_NE(s.source.find("const float in_s_scalar = in_s[0];"), std::string::npos);
}

TEST(Lowering, MixedTypesConvert) {
  KernelSource s = lower_elementwise(
      problem("i:i32[n]; b:bool[n]; y = where(b, i * 2, i); z = cast(x, bf16); w = i < x", true),
      {});
  EXPECT_NE(s.source.find("const int t"), std::string::npos) << s.source;
  EXPECT_NE(s.source.find("kjit::round_through<kjit::bf16>(in_x)"), std::string::npos);
  EXPECT_NE(s.source.find("(float)in_i < in_x"), std::string::npos) << s.source;
}

// i32 wraps, as the reference does: in signed C, NVVM folded (i + 1) > i to true.
TEST(Lowering, IntegerArithmeticWrapsWithoutUndefinedBehaviour) {
  KernelSource s =
      lower_elementwise(problem("i:i32[n]; y = (i + 1) > i; z = -i * i - abs(i)", true), {});
  for (const char* spelling :
       {"(int)((unsigned)in_i + (unsigned)1)", "(int)(0u - (unsigned)in_i)",
        "(int)(in_i < 0 ? 0u - (unsigned)in_i : (unsigned)in_i)", "(int)((unsigned)t"})
    EXPECT_NE(s.source.find(spelling), std::string::npos) << spelling << "\n" << s.source;
}

TEST(Lowering, CosBeforeSinIsOneSincos) {
  KernelSource s = lower_elementwise(problem("y = cos(x) * 2 + sin(x)", true), {});
  EXPECT_NE(s.source.find("kjit::sincos_f32(in_x"), std::string::npos) << s.source;
  EXPECT_EQ(s.source.find("kjit::cos_f32"), std::string::npos) << s.source;
}

TEST(Lowering, PowOfTwoIsAMultiply) {
  KernelSource s = lower_elementwise(problem("y = x^2 + x^3", true), {});
  EXPECT_NE(s.source.find("in_x * in_x"), std::string::npos);
  EXPECT_NE(s.source.find("powf(in_x, 3.0f)"), std::string::npos) << s.source;
}

TEST(Lowering, EpilogueFunctionIsStable) {
  Graph g = parse("acc:f32[m,n]; bias:f32[n]; y = gelu(acc + bias)");
  std::string f = emit_epilogue_function(g, "kjit_epilogue");
  EXPECT_NE(f.find("__device__ __forceinline__ float kjit_epilogue(float in_acc, float in_bias)"),
            std::string::npos)
      << f;
  EXPECT_NE(f.find("kjit::gelu_f32("), std::string::npos);
  EXPECT_NE(f.find("return v_y;"), std::string::npos) << f;
  EXPECT_EQ(f, emit_epilogue_function(parse("acc:f32[m,n]; bias:f32[n]; y = gelu(acc + bias)"),
                                      "kjit_epilogue"));
  EXPECT_THROW(emit_epilogue_function(parse("a = x; b = x + 1"), "f"), UserError);
  EXPECT_THROW(emit_epilogue_function(parse("i:i32[n]; y = i"), "f"), UserError);
}

TEST(Config, ParsesAndRejects) {
  ElementwiseConfig c = ElementwiseConfig::parse("block=128,unroll=2,vec=8");
  EXPECT_EQ(c.block_threads, 128);
  EXPECT_EQ(c.unroll, 2);
  EXPECT_EQ(c.vector_width, 8);
  EXPECT_EQ(c.text(), "block=128,vec=8,unroll=2");
  EXPECT_THROW(ElementwiseConfig::parse("block=100"), UserError);
  EXPECT_THROW(ElementwiseConfig::parse("vec=3"), UserError);
  EXPECT_THROW(ElementwiseConfig::parse("tile=3"), UserError);
  EXPECT_THROW(ElementwiseConfig::parse("block"), UserError);
  EXPECT_THROW(ElementwiseConfig::parse("block=128,block=256"), UserError);  // was: last won
  // Another family's key is unknown ("write key=integer" before); an integer past an
  // int is out of range ("bad config item" before).
  auto message = [](const std::string& text) -> std::string {
    try {
      ElementwiseConfig::parse(text);
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message("mma=wgmma").find("unknown config key 'mma'"), std::string::npos);
  EXPECT_NE(message("block=99999999999").find("out of range"), std::string::npos);
  EXPECT_EQ(ElementwiseConfig::parse(" block = 128, unroll=2 ,vec=8").text(), c.text());
  // Plain stores are the default; stream=1 is spelled out and round-trips.
  EXPECT_EQ(ElementwiseConfig().stream, 0);
  ElementwiseConfig streaming = ElementwiseConfig::parse("stream=1,prefetch=1");
  EXPECT_EQ(streaming.stream, 1);
  EXPECT_EQ(streaming.text(), "block=512,vec=0,unroll=2,prefetch=1,stream=1");
  EXPECT_EQ(ElementwiseConfig::parse(streaming.text()).text(), streaming.text());
  EXPECT_THROW(ElementwiseConfig::parse("stream=2"), UserError);
  // per_sm sizes the grid only: it round-trips, and the source does not change.
  ElementwiseConfig two = ElementwiseConfig::parse("per_sm=2");
  EXPECT_EQ(two.per_sm, 2);
  EXPECT_EQ(two.text(), "block=512,vec=0,unroll=2,per_sm=2");
  EXPECT_EQ(ElementwiseConfig::parse(two.text()).text(), two.text());
  EXPECT_EQ(two.source_text(), ElementwiseConfig().text());
  EXPECT_THROW(ElementwiseConfig::parse("per_sm=33"), UserError);
  // Auto: 2048 vectors in flight per SM (block x unroll x blocks), never more blocks
  // than are resident, at least one.
  EXPECT_EQ(grid_blocks_per_sm(ElementwiseConfig(), 4), 2);
  EXPECT_EQ(grid_blocks_per_sm(ElementwiseConfig::parse("block=256"), 8), 4);
  EXPECT_EQ(grid_blocks_per_sm(ElementwiseConfig::parse("block=256"), 3), 3);
  EXPECT_EQ(grid_blocks_per_sm(ElementwiseConfig::parse("block=1024"), 2), 1);
  EXPECT_EQ(grid_blocks_per_sm(ElementwiseConfig::parse("block=1024,unroll=1"), 2), 2);
  EXPECT_EQ(grid_blocks_per_sm(ElementwiseConfig::parse("block=128,unroll=8"), 8), 2);
  EXPECT_EQ(grid_blocks_per_sm(two, 1), 1);
  EXPECT_EQ(grid_blocks_per_sm(ElementwiseConfig::parse("per_sm=3"), 4), 3);
  ElementwiseProblem p = problem("y = sin(x)^2 + cos(x)^2", true);
  EXPECT_EQ(lower_elementwise(p, two).source, lower_elementwise(p, ElementwiseConfig()).source);
}

// grid=rows changes the source (a config of its own), takes no prefetch or per_sm,
// and its launch grid is column strips by groups of unroll rows, y at most 65535.
TEST(Config, RowsSchedule) {
  const ElementwiseConfig rows = ElementwiseConfig::parse("block=128,unroll=4,grid=rows");
  EXPECT_EQ(rows.grid, ElementwiseConfig::Grid::Rows);
  EXPECT_EQ(rows.text(), "block=128,vec=0,unroll=4,grid=rows");
  EXPECT_EQ(rows.source_text(), rows.text());
  EXPECT_EQ(ElementwiseConfig::parse(rows.text()).text(), rows.text());
  EXPECT_EQ(ElementwiseConfig::parse("grid=tiles").source_text(), ElementwiseConfig().text());
  EXPECT_THROW(ElementwiseConfig::parse("grid=rows,prefetch=1"), UserError);
  EXPECT_THROW(ElementwiseConfig::parse("grid=rows,per_sm=2"), UserError);
  EXPECT_THROW(ElementwiseConfig::parse("grid=columns"), UserError);
  const GridDims square = grid_dims(rows, int64_t{16384} * 16384, 16384, 8, 132, 16);
  EXPECT_EQ(square.x, 16);    // 2048 vectors a row over blocks of 128
  EXPECT_EQ(square.y, 4096);  // 16384 rows, 4 a thread
  const GridDims ragged = grid_dims(rows, int64_t{37} * 1000, 1000, 1, 132, 16);
  EXPECT_EQ(ragged.x, 8);  // 1000 columns over blocks of 128: the last block part full
  EXPECT_EQ(ragged.y, 10);
  const GridDims tall = grid_dims(ElementwiseConfig::parse("block=32,unroll=1,grid=rows"),
                                  int64_t{70001} * 8, 8, 8, 132, 16);
  EXPECT_EQ(tall.x, 1);
  EXPECT_EQ(tall.y, 65535);  // the kernel loops over the rest
  const GridDims waves = grid_dims(ElementwiseConfig(), int64_t{1} << 20, 1 << 20, 4, 132, 4);
  EXPECT_EQ(waves.y, 1);
  EXPECT_EQ(waves.x, grid_blocks(ElementwiseConfig(), (int64_t{1} << 20) / 4, 132, 4));
}

// The rows kernel: a 2-D grid with no division, the row operand loaded once before
// the loop over row groups, the column operand per row.
TEST(Lowering, RowsScheduleKernel) {
  const ElementwiseProblem p = problem("x:bf16[m,n]; r:bf16[m,1]; c:bf16[n]; y = x * r + c", true,
                                       {Access::Full, Access::Column, Access::Row});
  const std::string src =
      lower_elementwise(p, ElementwiseConfig::parse("block=128,unroll=4,grid=rows")).source;
  EXPECT_NE(src.find("const long long rows = n / cols;"), std::string::npos) << src;
  EXPECT_EQ(src.find("/ (unsigned)cols"), std::string::npos) << src;
  const size_t row_load = src.find("in_c_row = kjit::load_vec<kjit::bf16, V>(in_c + col);");
  const size_t loop = src.find("for (long long row0 = (long long)blockIdx.y * U;");
  ASSERT_NE(row_load, std::string::npos) << src;
  ASSERT_NE(loop, std::string::npos) << src;
  EXPECT_LT(row_load, loop);
  EXPECT_NE(src.find("in_r_column[u] = in_r[row];"), std::string::npos) << src;
  EXPECT_NE(src.find("out_y + row * cols + col"), std::string::npos) << src;
  EXPECT_NE(src.find("constexpr int U = 4;  // rows per thread"), std::string::npos) << src;
}

}  // namespace
}  // namespace kjit::ir
