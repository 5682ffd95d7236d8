// Fused elementwise kernels on a real GPU against the fp64 interpreter: every op in
// every dtype, sizes 1, 3, 1023, 2^20, 2^20+7, pointers offset by one element (the
// scalar path), broadcasting, strided 2-D inputs, several outputs, and random
// expressions. Outputs are poisoned (0xFF) before each launch and inputs are fresh
// random values in each op's domain; the seed is printed on failure.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <optional>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>

#include "kjit/compiler/interpreter/interpreter.h"
#include "kjit/compiler/ir/parser.h"
#include "kjit/compiler/ir/printer.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/stream.h"
#include "kjit/runtime/elementwise.h"
#include "kjit/runtime/runtime.h"
#include "kjit/support/error.h"
#include "kjit/support/npy.h"
#include "tests/support/gpu_test.h"
#include "tests/support/numeric.h"
#include "tests/support/random_expression.h"

namespace kjit {
namespace {

using testing::GpuTest;

// An integer in [ceil(lo), floor(hi)] from a uniform draw u in [lo, hi): log's
// domain [0.1, 4] gives 1..4, never log(0).
double integer_in(double lo, double hi, double u, double u_lo, double u_hi) {
  double first = std::ceil(lo), last = std::floor(hi);
  if (first > last) return 1;
  double t = (u - u_lo) / (u_hi - u_lo);
  return std::min(last, first + std::floor(t * (last - first + 1)));
}

double tolerance(DType d) {
  return d == DType::F16 || d == DType::BF16 ? 1e-2 : 1e-5;
}

// How one input is laid out in device memory.
struct Layout {
  int64_t offset_elements = 0;  // the pointer is this many elements past a 256-byte boundary
  bool transposed = false;      // 2-D: stored column-major (strides {1, rows})
  int64_t row_padding = 0;      // 2-D: extra elements at the end of each row
};

struct Case {
  std::string text;
  ir::ParseOptions parse;
  ir::Bindings sizes;                    // symbol -> size
  std::map<std::string, Layout> layout;  // by input name
  int64_t output_offset = 0;
  Alignment alignment = Alignment::Auto;
  ir::ElementwiseConfig config;
  std::map<std::string, std::pair<double, double>> domain;  // by input name; else the op's
  bool tuned = false;  // true: no fixed config, each launch takes the tuner's choice
};

struct Result {
  bool aligned = false;
  std::string problem;
  size_t kernels = 1;  // more when the chain was split at the register budget
};

class ElementwiseGpu : public GpuTest {
 protected:
  // Runs the case on the GPU and checks every output; returns what the launcher picked.
  Result check(const Case& c) {
    uint64_t seed = std::random_device{}();
    SCOPED_TRACE("expression: " + c.text + "  seed: " + std::to_string(seed));
    Graph graph = ir::parse(c.text, c.parse);
    ElementwiseKernel kernel(
        runtime(), graph, c.tuned ? std::nullopt : std::optional<ir::ElementwiseConfig>(c.config));
    std::mt19937_64 rng(seed);
    std::vector<cuda::DeviceBuffer> buffers;
    std::vector<TensorArg> inputs, outputs;
    std::map<std::string, ir::HostTensor> reference;
    for (int id : graph.inputs()) {
      const ir::Node& n = graph.node(id);
      std::vector<int64_t> shape = ir::concrete(n.shape, c.sizes);
      int64_t count = ir::element_count(shape);
      auto [lo, hi] = c.domain.count(n.name) ? c.domain.at(n.name) : ir::input_domain(graph, id);
      std::vector<double> values(static_cast<size_t>(count));
      std::uniform_real_distribution<double> uniform(lo, hi);
      for (double& v : values) {
        if (n.dtype == DType::Bool)
          v = rng() % 2;
        else if (n.dtype == DType::I32)
          v = integer_in(lo, hi, uniform(rng), lo, hi);
        else
          v = uniform(rng);
      }
      // What the GPU stores is the reference's input.
      NpyArray logical = npy_from_values(ir::npy_descr(n.dtype), shape, values);
      values = npy_values(logical);
      reference[n.name] = ir::HostTensor{shape, values};
      Layout layout = c.layout.count(n.name) ? c.layout.at(n.name) : Layout{};
      TensorArg arg{0, n.dtype, shape, {}};
      const size_t size = static_cast<size_t>(ir::size_bytes(n.dtype));
      std::vector<char> physical = logical.data;
      if (shape.size() == 2 && (layout.transposed || layout.row_padding > 0)) {
        int64_t rows = shape[0], cols = shape[1];
        int64_t ld = layout.transposed ? rows + layout.row_padding : cols + layout.row_padding;
        int64_t outer = layout.transposed ? cols : rows;
        physical.assign(static_cast<size_t>(outer * ld) * size, 0);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t q = 0; q < cols; ++q) {
            int64_t at = layout.transposed ? q * ld + r : r * ld + q;
            std::memcpy(&physical[static_cast<size_t>(at) * size],
                        &logical.data[static_cast<size_t>(r * cols + q) * size], size);
          }
        }
        arg.strides = layout.transposed ? std::vector<int64_t>{1, ld} : std::vector<int64_t>{ld, 1};
      }
      size_t offset = static_cast<size_t>(layout.offset_elements) * size;
      buffers.emplace_back(physical.size() + offset + 256);
      buffers.back().fill_bytes(0xFF);
      if (!physical.empty()) buffers.back().upload(physical.data(), physical.size(), offset);
      arg.data = buffers.back().get() + offset;
      inputs.push_back(arg);
    }
    std::vector<int64_t> out_shape = ir::concrete(kernel.graph().output_shape(), c.sizes);
    std::vector<size_t> output_buffer;
    for (const auto& [name, id] : graph.outputs()) {
      DType d = graph.node(id).dtype;
      size_t bytes = static_cast<size_t>(ir::element_count(out_shape) * ir::size_bytes(d));
      size_t offset = static_cast<size_t>(c.output_offset * ir::size_bytes(d));
      buffers.emplace_back(bytes + offset + 256);
      buffers.back().fill_bytes(0xFF);  // poison: an unwritten element is NaN / garbage
      output_buffer.push_back(buffers.size() - 1);
      outputs.push_back(TensorArg{buffers.back().get() + offset, d, out_shape, {}});
    }
    Result result;
    result.kernels = kernel.split() ? kernel.groups().size() : 1;
    ElementwisePlan plan = kernel.plan(inputs, outputs, c.alignment);
    result.aligned = plan.problem.aligned;
    result.problem = plan.problem.text();
    SCOPED_TRACE("problem: " + result.problem);
    cuda::Stream stream;
    kernel.launch(inputs, outputs, stream.get(), c.alignment);
    stream.synchronize();
    std::map<std::string, ir::HostTensor> expected = ir::interpret(graph, reference);
    for (size_t k = 0; k < outputs.size(); ++k) {
      const std::string& name = graph.outputs()[k].first;
      DType d = outputs[k].dtype;
      NpyArray got{
          ir::npy_descr(d), out_shape,
          std::vector<char>(static_cast<size_t>(ir::element_count(out_shape) * ir::size_bytes(d)))};
      size_t offset = static_cast<size_t>(c.output_offset * ir::size_bytes(d));
      if (!got.data.empty())
        buffers[output_buffer[k]].download(got.data.data(), got.data.size(), offset);
      std::vector<double> want = expected.at(name).data;
      for (double& v : want) v = ir::round_to(d, v);
      double error = testing::relative_l2_error(npy_values(got), want);
      EXPECT_LE(error, tolerance(d)) << "output " << name << " (" << ir::to_string(d) << ")";
    }
    return result;
  }
};

const int64_t kSizes[] = {1, 3, 1023, 1 << 20, (1 << 20) + 7};

std::string single_op_expression(const ir::OpInfo& op) {
  switch (op.arity) {
    case 1:
      return std::string("y = ") + op.name + "(a)";
    case 2:
      return std::string("y = ") + op.name + "(a, b)";
    default:
      return std::string("y = ") + op.name + "(a, b, c)";
  }
}

TEST_F(ElementwiseGpu, EveryOpEveryDtypeEverySize) {
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::I32}) {
    for (const ir::OpInfo& op : ir::op_table()) {
      if (op.arity == 0) continue;
      std::vector<std::string> texts;
      if (op.code == ir::OpCode::Select) {
        texts = {"y = select(a > b, a, b)", "y = where(a <= b, a * 2, b)"};
      } else if (op.code == ir::OpCode::Cast) {
        for (const char* to : {"f32", "f16", "bf16", "i32", "bool"})
          texts.push_back(std::string("y = cast(a * 4, ") + to + ")");  // *4 is exact
      } else {
        texts = {single_op_expression(op)};
      }
      for (const std::string& text : texts) {
        for (int64_t n : kSizes) {
          Case c{text, {dtype, {ir::Dim::named("n")}}, {{"n", n}}, {}, 0, Alignment::Auto, {}};
          Result r = check(c);
          // Whole vectors and fresh (aligned) buffers take the vector path.
          if (n == (1 << 20)) {
            EXPECT_TRUE(r.aligned) << text;
          }
          if (n == (1 << 20) + 7 || n == 3) {
            EXPECT_FALSE(r.aligned) << text;
          }
        }
      }
    }
  }
}

TEST_F(ElementwiseGpu, PointersOffsetByOneElementTakeTheScalarPath) {
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    Case c{"y = sin(x)^2 + cos(x)^2 + x * g",
           {dtype, {ir::Dim::named("n")}},
           {{"n", 1 << 20}},
           {{"x", Layout{1, false, 0}}},
           0,
           Alignment::Auto,
           {}};
    EXPECT_FALSE(check(c).aligned);
    c.layout.clear();
    c.output_offset = 1;
    EXPECT_FALSE(check(c).aligned);
    c.output_offset = 0;
    EXPECT_TRUE(check(c).aligned);
    // The aligned class forced on misaligned pointers is a user error before any launch.
    c.layout = {{"g", Layout{1, false, 0}}};
    c.alignment = Alignment::Aligned;
    EXPECT_THROW(check(c), UserError);
  }
}

// templates/math.cuh: the fast reduction up to |x| = 105615, the library's sincosf
// beyond; about half of these arguments take each path, on both the vector and the
// scalar path, paired (sincos) and alone.
TEST_F(ElementwiseGpu, SinCosOfLargeArguments) {
  for (const char* text : {"y = sin(x); z = cos(x)", "y = sin(x) * 0.5", "y = cos(x) + 1"}) {
    Case c{
        text, {DType::F32, {ir::Dim::named("n")}}, {{"n", (1 << 20) + 3}}, {}, 0, Alignment::Auto,
        {}};
    c.domain["x"] = {-2.0e5, 2.0e5};
    EXPECT_FALSE(check(c).aligned);
    c.sizes["n"] = 1 << 20;
    EXPECT_TRUE(check(c).aligned);
    c.domain["x"] = {-1.0e30, 1.0e30};
    EXPECT_TRUE(check(c).aligned);
  }
}

// sigmoid, silu and gelu_tanh divide by 1 + e^(..), which overflows to infinity for
// large negative arguments (the fast division must give 0 there, not NaN), and gelu's
// tail (Phi underflows below x = -14) — as in a matmul epilogue, where the
// accumulators are often this large.
TEST_F(ElementwiseGpu, ActivationsOfLargeArguments) {
  for (const char* text : {"y = sigmoid(x)", "y = silu(x)", "y = gelu_tanh(x)", "y = gelu(x)"}) {
    Case c{text, {DType::F32, {ir::Dim::named("n")}}, {{"n", 1 << 20}}, {}, 0, Alignment::Auto, {}};
    c.domain["x"] = {-200.0, 200.0};
    check(c);
    c.domain["x"] = {-30.0, 30.0};
    check(c);
  }
}

// i32 wraps like the reference: with signed C, NVVM folded (i + 1) > i to true and
// max(i + 1, i) to i + 1. And cos(v) before sin(v) is one sincos (it did not compile).
TEST_F(ElementwiseGpu, IntegersWrapAndCosBeforeSin) {
  Case c{"i:i32[n]; y = (i + 1) > i; z = i * i - abs(i); w = max(i + 1, i); v = -i - 1",
         {DType::F32, {ir::Dim::named("n")}},
         {{"n", 4099}},
         {},
         0,
         Alignment::Auto,
         {}};
  for (auto domain : {std::pair<double, double>{2147483000.0, 2147483647.0},
                      {-2147483648.0, -2147483000.0},
                      {-100000.0, 100000.0}}) {
    c.domain["i"] = domain;
    check(c);
  }
  Case sincos{"y = cos(x) * 2 + sin(x)",
              {DType::F32, {ir::Dim::named("n")}},
              {{"n", 1 << 20}},
              {},
              0,
              Alignment::Auto,
              {}};
  check(sincos);
}

TEST_F(ElementwiseGpu, BroadcastRowColumnScalar) {
  const char* text =
      "x:f32[m,n]; b:bf16[n]; c:f16[m,1]; s:f32[]; y = gelu(x * b + c) - s; "
      "z = x > s";
  for (int64_t cols : {1000, 1024, 7}) {
    for (int64_t rows : {1, 37}) {
      Case c{text, {}, {{"m", rows}, {"n", cols}}, {}, 0, Alignment::Auto, {}};
      Result r = check(c);
      // With one row, b covers the whole output (full) and c is one element (scalar).
      if (rows > 1) {
        EXPECT_NE(r.problem.find("b:bf16:row"), std::string::npos) << r.problem;
        EXPECT_NE(r.problem.find("c:f16:column"), std::string::npos) << r.problem;
        if (cols % 8 == 0) {
          EXPECT_TRUE(r.aligned) << r.problem;  // V = 8 (a bool output) divides cols
        }
      } else {
        EXPECT_NE(r.problem.find("b:bf16:full"), std::string::npos) << r.problem;
        EXPECT_NE(r.problem.find("c:f16:scalar"), std::string::npos) << r.problem;
      }
      EXPECT_NE(r.problem.find("s:f32:scalar"), std::string::npos) << r.problem;
      c.alignment = Alignment::Unaligned;
      check(c);
    }
  }
}

// Broadcast operands over many grid-stride steps: a small grid (one 64-thread block
// per SM) walks many steps, each vector's row and column found anew (cols 1000,
// 1024, 8 and 2112, a step of whole rows), with several vectors per thread,
// prefetch, and both alignment classes. (Carrying the row and column from step to
// step instead of dividing per vector was tried and measured slower on the H200:
// the 2-D chain went from 0.261 to 0.272 ms, the division ahead of the first load.)
TEST_F(ElementwiseGpu, BroadcastAcrossManyGridStrideSteps) {
  const char* text = "x:bf16[m,n]; r:bf16[m,1]; c:f32[n]; y = x * r + c";
  for (const char* config :
       {"block=64,per_sm=1,unroll=1", "block=64,per_sm=1,unroll=3", "block=64,per_sm=1,prefetch=1"})
    for (int64_t cols : {1000, 1024, 8, 2112}) {
      SCOPED_TRACE(std::string(config) + " cols " + std::to_string(cols));
      Case c{text,
             {},
             {{"m", 3001}, {"n", cols}},
             {},
             0,
             Alignment::Auto,
             ir::ElementwiseConfig::parse(config)};
      check(c);
      c.alignment = Alignment::Unaligned;
      check(c);
    }
}

// The 2-D schedule (grid=rows: column strips, unroll rows per thread, a row operand
// loaded once per thread) over every access pattern: broadcast row, column and
// scalar, strided and transposed inputs, several outputs; rows that unroll does not
// divide, columns that a block does not divide, one row, both alignment classes,
// and more row groups than the grid's 65535 (the y loop).
TEST_F(ElementwiseGpu, RowsScheduleEveryAccessPattern) {
  const char* text =
      "x:f32[m,n]; b:bf16[n]; c:f16[m,1]; s:f32[]; w:bf16[m,n]; y = gelu(x * b + c) - s * w; "
      "z = x > s";
  for (const char* config : {"block=128,unroll=4,grid=rows", "block=64,unroll=3,grid=rows",
                             "block=32,unroll=1,grid=rows,stream=1"})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 1000}, {1, 1024}, {130, 8}}) {
      SCOPED_TRACE(fmt::format("{} rows {} cols {}", config, rows, cols));
      Case c{text,
             {},
             {{"m", rows}, {"n", cols}},
             {},
             0,
             Alignment::Auto,
             ir::ElementwiseConfig::parse(config)};
      check(c);
      c.alignment = Alignment::Unaligned;
      check(c);
      c.alignment = Alignment::Auto;
      c.layout = {{"w", Layout{0, true, 0}}, {"x", Layout{0, false, 3}}};
      check(c);
    }
  // 70001 rows of 8 in groups of 1: 70001 row groups, past gridDim.y's 65535.
  Case many{"x:bf16[m,n]; r:bf16[m,1]; c:bf16[n]; y = x * r + c",
            {},
            {{"m", 70001}, {"n", 8}},
            {},
            0,
            Alignment::Auto,
            ir::ElementwiseConfig::parse("block=32,unroll=1,grid=rows")};
  EXPECT_TRUE(check(many).aligned);
}

// Chains over the register budget run as several kernels (compiler/passes/fuse.h):
// many inputs, bf16 with outputs written by different kernels,
// broadcasting and strided inputs, both alignment classes; each checked against
// the fp64 reference of the whole chain.
TEST_F(ElementwiseGpu, ChainsOverTheRegisterBudgetAreSplitAndExact) {
  // At a budget of 128 registers (KJIT_REGISTER_BUDGET; the default, 240, splits only
  // chains that would spill) these chains are split into several kernels each.
  struct ScopedBudget {
    ScopedBudget() { setenv("KJIT_REGISTER_BUDGET", "128", 1); }
    ~ScopedBudget() { unsetenv("KJIT_REGISTER_BUDGET"); }
  } budget;
  // "x0:DTYPE[n]; x1:DTYPE[n]; ..." for 128 inputs, and their sum of squares.
  auto many = [](const std::string& dtype) {
    std::string text;
    for (int i = 0; i < 128; ++i) text += fmt::format("x{}:{}[n]; ", i, dtype);
    return text;
  };
  std::string sum;
  for (int i = 0; i < 128; ++i) sum += fmt::format("{}x{} * x{}", i ? " + " : "", i, i);
  std::string live;
  for (int i = 0; i < 120; ++i) live += fmt::format("a{} = sin(x * 0.{}1); ", i, i + 1);
  live += "y = a0 * a119";
  for (int i = 1; i < 60; ++i) live += fmt::format(" + a{} * a{}", i, 119 - i);
  std::string rows = "x:f32[m,n]; ", chain = "x";
  for (int i = 0; i < 120; ++i) {
    rows += fmt::format("b{}:bf16[n]; ", i);
    chain = fmt::format("({} * 0.99 + b{} * b{})", chain, i, i);
  }
  for (const char* dtype : {"f32", "bf16"}) {
    const std::string text = many(dtype) + "y = " + sum + "; p = x0 * x1 - x2; q = x5";
    for (int64_t n : {int64_t{1000}, int64_t{(1 << 20) + 8}}) {
      for (Alignment alignment : {Alignment::Auto, Alignment::Unaligned}) {
        Case c{text, {}, {{"n", n}}, {}, 0, alignment, {}};
        c.tuned = true;
        EXPECT_GE(check(c).kernels, 2u) << dtype << " n=" << n;
      }
    }
  }
  // 120 live values: over 128 too, but a cut would carry ~60 of them through memory
  // (fuse.h, kSplitTrafficLimit), so it stays one kernel.
  Case lived{live, {}, {{"n", 99991}}, {}, 0, Alignment::Auto, {}};
  lived.tuned = true;
  EXPECT_EQ(check(lived).kernels, 1u);
  Case broadcast{rows + "y = " + chain + "; z = x * 2",
                 {},
                 {{"m", 37}, {"n", 1000}},
                 {{"x", Layout{0, true, 3}}},
                 0,
                 Alignment::Auto,
                 {}};
  broadcast.tuned = true;
  EXPECT_GE(check(broadcast).kernels, 2u);
  // With a fixed config every kernel of the split chain runs it.
  Case fixed{many("f32") + "y = " + sum,
             {},
             {{"n", 4096}},
             {},
             0,
             Alignment::Auto,
             ir::ElementwiseConfig::parse("block=256,vec=1,unroll=1")};
  EXPECT_GE(check(fixed).kernels, 2u);
}

TEST_F(ElementwiseGpu, StridedTwoDimensionalInputs) {
  const char* text = "x:bf16[m,n]; w:f32[m,n]; y = x * sigmoid(w)";
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{64, 1024}, {33, 77}}) {
    Case c{text, {}, {{"m", rows}, {"n", cols}}, {{"x", Layout{0, true, 0}}}, 0, Alignment::Auto,
           {}};
    EXPECT_NE(check(c).problem.find("x:bf16:strided"), std::string::npos);
    c.layout = {{"w", Layout{0, false, 5}}, {"x", Layout{1, true, 3}}};
    EXPECT_NE(check(c).problem.find("w:f32:strided"), std::string::npos);
  }
}

TEST_F(ElementwiseGpu, SeveralOutputsMixedDtypes) {
  Case c{
      "x:bf16[n]; g:f32[n]; i:i32[n]; k:bool[n]; a = sin(x); b = cos(x) * g; c = x > 0; "
      "d = i * 3 - 1; e = cast(g, f16); f = where(k, x, g)",
      {},
      {{"n", (1 << 20) + 16}},
      {},
      0,
      Alignment::Auto,
      {}};
  EXPECT_TRUE(check(c).aligned);
  c.sizes["n"] = 1021;
  EXPECT_FALSE(check(c).aligned);
}

TEST_F(ElementwiseGpu, ConfigsAllAgree) {
  for (const char* config : {"block=64,unroll=1", "block=1024,unroll=8", "vec=2", "vec=16,unroll=2",
                             "prefetch=1", "block=64,unroll=3,prefetch=1"}) {
    Case c{"y = x * sigmoid(x) * g", {DType::BF16, {ir::Dim::named("n")}}, {{"n", 1 << 20}}, {}, 0,
           Alignment::Auto,          ir::ElementwiseConfig::parse(config)};
    SCOPED_TRACE(config);
    check(c);
    c.sizes["n"] = (1 << 20) + 7;  // the scalar path
    check(c);
  }
}

// Software pipelining (prefetch=1) over every access pattern: broadcast row,
// column and scalar, strided and transposed inputs, several outputs.
TEST_F(ElementwiseGpu, PrefetchEveryAccessPattern) {
  const char* text =
      "x:f32[m,n]; b:bf16[n]; c:f16[m,1]; s:f32[]; w:bf16[m,n]; y = gelu(x * b + c) - s * w; "
      "z = x > s";
  for (int64_t cols : {1000, 1001}) {
    Case c{text,
           {},
           {{"m", 37}, {"n", cols}},
           {},
           0,
           Alignment::Auto,
           ir::ElementwiseConfig::parse("block=64,unroll=2,prefetch=1")};
    check(c);
    c.layout = {{"w", Layout{0, true, 0}}, {"x", Layout{0, false, 3}}};
    check(c);
  }
}

TEST_F(ElementwiseGpu, RandomExpressionsMatchTheReference) {
  std::mt19937_64 rng(20261129);
  for (int i = 0; i < 60; ++i) {
    DType dtype =
        std::vector<DType>{DType::F32, DType::F16, DType::BF16}[static_cast<size_t>(i % 3)];
    std::string text = "y = " + kjit::testing::random_expression(rng, 4, {"a", "b", "c"}) +
                       "; z = " + kjit::testing::random_expression(rng, 3, {"a", "b"});
    int64_t n = (i % 2) ? (1 << 16) : (1 << 16) + 3;
    Case c{text, {dtype, {ir::Dim::named("n")}}, {{"n", n}}, {}, 0, Alignment::Auto, {}};
    check(c);
  }
}

TEST_F(ElementwiseGpu, CachesPerProblemAndRejectsBadLaunches) {
  ElementwiseKernel kernel(runtime(), ir::parse("y = x + 1.0"));
  cuda::DeviceBuffer x(4096 * 4 + 16), y(4096 * 4 + 16);
  TensorArg in{x.get(), DType::F32, {4096}, {}}, out{y.get(), DType::F32, {4096}, {}};
  kernel.launch({in}, {out});
  EXPECT_TRUE(kernel.last_launch().compiled_now);
  kernel.launch({in}, {out});
  EXPECT_FALSE(kernel.last_launch().compiled_now);
  EXPECT_GT(kernel.last_launch().grid_blocks, 0u);
  EXPECT_NE(kernel.last_launch().source.find("__global__"), std::string::npos);
  TensorArg shifted = in;
  shifted.data += 4;
  kernel.launch({shifted}, {out});  // a new specialization: the scalar path
  EXPECT_TRUE(kernel.last_launch().compiled_now);
  TensorArg null = in;
  null.data = 0;
  EXPECT_THROW(kernel.launch({null}, {out}), UserError);
  TensorArg wrong = in;
  wrong.dtype = DType::F16;
  EXPECT_THROW(kernel.launch({wrong}, {out}), UserError);
  TensorArg empty_in{0, DType::F32, {0}, {}}, empty_out{0, DType::F32, {0}, {}};
  EXPECT_NO_THROW(kernel.launch({empty_in}, {empty_out}));  // nothing to do, nothing launched
  runtime().context().synchronize();
}

}  // namespace
}  // namespace kjit
