#include <gtest/gtest.h>

#include <cmath>

#include "kjit/compiler/interpreter/interpreter.h"
#include "kjit/compiler/ir/parser.h"
#include "kjit/support/error.h"

namespace kjit::ir {
namespace {

TEST(Interpreter, EvaluatesChainInFp64) {
  Graph g = parse("y = sin(x)^2 + cos(x)^2; z = x * sigmoid(x)");
  auto out = interpret(g, {{"x", HostTensor{{3}, {0.5, -1.0, 2.0}}}});
  for (double v : out["y"].data) EXPECT_NEAR(v, 1.0, 1e-15);
  EXPECT_NEAR(out["z"].data[1], -1.0 / (1.0 + std::exp(1.0)), 1e-15);
}

TEST(Interpreter, BroadcastsRowsColumnsScalars) {
  Graph g = parse("x:f32[m,n]; b:f32[n]; c:f32[m,1]; s:f32[]; y = x + b * c + s");
  auto out = interpret(g, {{"x", HostTensor{{2, 3}, {0, 0, 0, 0, 0, 0}}},
                           {"b", HostTensor{{3}, {1, 2, 3}}},
                           {"c", HostTensor{{2, 1}, {10, 100}}},
                           {"s", HostTensor{{}, {0.5}}}});
  EXPECT_EQ(out["y"].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(out["y"].data, (std::vector<double>{10.5, 20.5, 30.5, 100.5, 200.5, 300.5}));
}

TEST(Interpreter, DtypeSemantics) {
  Graph g = parse("i:i32[n]; y = i * 65536 * 65536 + 1; z = cast(x, bf16); w = cast(x, i32)");
  auto out = interpret(g, {{"i", HostTensor{{1}, {3}}}, {"x", HostTensor{{1}, {-2.7}}}});
  EXPECT_EQ(out["y"].data[0], 1);  // wraps at 32 bits like the GPU
  EXPECT_EQ(out["z"].data[0], round_to(DType::BF16, -2.7));
  EXPECT_NE(out["z"].data[0], -2.7);
  EXPECT_EQ(out["w"].data[0], -2);  // truncation
  EXPECT_EQ(round_to(DType::I32, 1e12), 2147483647.0);
  EXPECT_EQ(round_to(DType::I32, NAN), 0.0);
}

// A literal is the f32 the kernel computes with; gelu_tanh does not cancel.
TEST(Interpreter, LiteralsAreF32AndGeluTanhKeepsItsTail) {
  Graph g = parse("y = x > 0.1; z = x * 1e-50 > 0; w = gelu_tanh(x)");
  auto out = interpret(g, {{"x", HostTensor{{2}, {static_cast<float>(0.1), -8.0}}}});
  EXPECT_EQ(out["y"].data[0], 0);  // 0.1f > 0.1f (was 0.1f > 0.1: true)
  EXPECT_EQ(out["z"].data[0], 0);  // 1e-50 is 0 in f32
  // -8 / (1 + e^(2u)): -3.1e-21, where 0.5 x (1 + tanh u) gave -0.
  EXPECT_NEAR(out["w"].data[1], -3.1078e-21, 1e-24);
  EXPECT_THROW(parse("y = x + 1e39"), UserError);
}

TEST(Interpreter, ChecksInputs) {
  Graph g = parse("y = a + b");
  EXPECT_THROW(interpret(g, {{"a", HostTensor{{2}, {1, 2}}}}), UserError);
  EXPECT_THROW(interpret(g, {{"a", HostTensor{{2}, {1, 2}}}, {"b", HostTensor{{3}, {1, 2, 3}}}}),
               UserError);
}

TEST(Interpreter, DomainsFollowTheOps) {
  Graph g = parse("y = log(x) + sin(z)");
  auto [lo, hi] = input_domain(g, g.find_input("x"));
  EXPECT_GT(lo, 0);
  auto [zlo, zhi] = input_domain(g, g.find_input("z"));
  EXPECT_LT(zlo, 0);
  EXPECT_GT(zhi, 0);
  (void)hi;
}

}  // namespace
}  // namespace kjit::ir
