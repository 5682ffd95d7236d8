// with_derivative(): every floating op's rule against central finite differences of
// the fp64 references, at points inside each op's domain and away from its kinks.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "kjit/compiler/interpreter/interpreter.h"
#include "kjit/compiler/ir/parser.h"
#include "kjit/compiler/ir/verifier.h"
#include "kjit/compiler/passes/derivative.h"
#include "kjit/support/error.h"

namespace kjit::ir {
namespace {

// The outputs of `graph` in fp64 with these input values, by name.
std::map<std::string, double> evaluate(const Graph& graph,
                                       const std::map<std::string, double>& inputs) {
  std::vector<double> values;
  for (int id : graph.inputs()) values.push_back(inputs.at(graph.node(id).name));
  const std::vector<double> nodes = evaluate_point(graph, values);
  std::map<std::string, double> out;
  for (const auto& [name, id] : graph.outputs()) out[name] = nodes[static_cast<size_t>(id)];
  return out;
}

Graph parsed(const std::string& text) {
  ParseOptions options;
  options.default_dtype = DType::F32;
  options.default_shape = {};
  return parse(text, options);
}

// dy/ds from the derivative graph against (y(s + h) - y(s - h)) / 2h, at each point.
void expect_derivative(const std::string& text, const std::vector<double>& points,
                       std::map<std::string, double> others = {}) {
  const Graph graph = parsed(text);
  const Graph d = with_derivative(graph, "s");
  EXPECT_NO_THROW(verify(d)) << text;
  for (double s : points) {
    others["s"] = s;
    const std::map<std::string, double> got = evaluate(d, others);
    const double h = 1e-6 * std::max(1.0, std::abs(s));
    others["s"] = s + h;
    const double up = evaluate(graph, others).at("y");
    others["s"] = s - h;
    const double down = evaluate(graph, others).at("y");
    const double want = (up - down) / (2 * h);
    EXPECT_NEAR(got.at("d_y"), want, 1e-6 * std::max(1.0, std::abs(want)))
        << text << " at s = " << s;
    others["s"] = s;
    EXPECT_EQ(got.at("y"), evaluate(graph, others).at("y")) << text;  // y itself unchanged
  }
}

const std::vector<double> kEverywhere = {-3.7, -1.3, -0.4, 0.3, 0.9, 2.6};
const std::vector<double> kPositive = {0.2, 0.7, 1.6, 3.3};

TEST(Derivative, UnaryOps) {
  expect_derivative("y = -s + abs(s) * exp(s) - exp2(s)", kEverywhere);
  expect_derivative("y = log(s) + log2(s) + sqrt(s) + rsqrt(s)", kPositive);
  expect_derivative("y = sin(s) * cos(s) + tanh(s) + sigmoid(s)", kEverywhere);
  expect_derivative("y = relu(s) + gelu(s) + gelu_tanh(s) + silu(s) + softplus(s)", kEverywhere);
  expect_derivative("y = gelu(s)", {-9.0, -0.001, 0.001, 7.5});
  expect_derivative("y = floor(s) + ceil(s) + s", {-1.3, 0.4, 2.6});  // away from integers
}

TEST(Derivative, BinaryAndTernaryOps) {
  expect_derivative("y = s * s - 3 * s + s / (s * s + 1) - 2 / s", kEverywhere);
  expect_derivative("y = pow(s, 3) + pow(2.0, s) + pow(s, s)", kPositive);
  expect_derivative("y = max(s, 0.5) + min(s, 0.5) + max(2 * s, s * s)", kEverywhere);
  expect_derivative("y = where(s > 0, s * s, 2 * s) + fma(s, s, s) + fma(s, 2, 1)", kEverywhere);
  expect_derivative("y = select(s < 1, 1.5, s) + select(s > 0, s, s * s)", kEverywhere);
  // A cast passes the derivative on (rounded to its type: a finite difference of
  // rounded values would only measure the rounding).
  const Graph d = with_derivative(parsed("y = cast(s * 3, f16) + cast(s > 1, f32)"), "s");
  EXPECT_EQ(evaluate(d, {{"s", 0.3}}).at("d_y"), 3.0);
  EXPECT_EQ(evaluate(d, {{"s", 1.7}}).at("d_y"), 3.0);
}

// Attention score modifiers: soft-capping and ALiBi (integer positions and a
// per-head slope do not depend on s).
TEST(Derivative, ScoreModifiers) {
  expect_derivative("y = tanh(s / 50) * 50", {-120.0, -3.0, 0.5, 80.0});
  expect_derivative("q:i32; kv:i32; slope:f32; y = s - slope * abs(cast(q - kv, f32))", {-2.0, 1.0},
                    {{"q", 7}, {"kv", 3}, {"slope", 0.25}});
  const Graph d = with_derivative(
      parsed("q:i32; kv:i32; slope:f32; y = s - slope * abs(cast(q - kv, f32))"), "s");
  EXPECT_EQ(evaluate(d, {{"s", 0.3}, {"q", 7}, {"kv", 3}, {"slope", 0.25}}).at("d_y"), 1.0);
}

// Outputs that do not depend on s get a derivative of 0; several outputs each get
// theirs, in order after their own.
TEST(Derivative, OutputsAndConstants) {
  const Graph d = with_derivative(parsed("t:f32; y = t * 2; z = s * t"), "s");
  ASSERT_EQ(d.outputs().size(), 4u);
  EXPECT_EQ(d.outputs()[0].first, "y");
  EXPECT_EQ(d.outputs()[1].first, "d_y");
  EXPECT_EQ(d.outputs()[3].first, "d_z");
  const std::map<std::string, double> got = evaluate(d, {{"s", 1.5}, {"t", -4.0}});
  EXPECT_EQ(got.at("d_y"), 0.0);
  EXPECT_EQ(got.at("d_z"), -4.0);
  EXPECT_EQ(d.inputs(), parsed("t:f32; y = t * 2; z = s * t").inputs());
}

TEST(Derivative, BadRequestsAreUserErrors) {
  EXPECT_THROW(with_derivative(parsed("y = s * 2"), "x"), UserError);
  EXPECT_THROW(with_derivative(parsed("s:i32; y = s * 2"), "s"), UserError);
  EXPECT_THROW(with_derivative(parsed("y = s * 2; d_y = s"), "s"), UserError);
  // An input of that name too (found by the lowering fuzzer: the graph did not verify).
  EXPECT_THROW(with_derivative(parsed("y = s * d_y"), "s"), UserError);
}

}  // namespace
}  // namespace kjit::ir
