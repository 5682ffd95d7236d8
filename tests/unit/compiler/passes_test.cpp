#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <random>
#include <sstream>

#include "kjit/compiler/interpreter/interpreter.h"
#include "kjit/compiler/ir/parser.h"
#include "kjit/compiler/ir/printer.h"
#include "kjit/compiler/passes/constant_fold.h"
#include "kjit/compiler/passes/cse.h"
#include "kjit/compiler/passes/dce.h"
#include "kjit/compiler/passes/fuse.h"
#include "kjit/compiler/passes/pipeline.h"
#include "tests/support/numeric.h"
#include "tests/support/random_expression.h"
#include "tests/unit/compiler/corpus.h"

namespace kjit::ir {
namespace {

int count_ops(const Graph& g, OpCode op) {
  int count = 0;
  for (const Node& n : g.nodes()) count += n.op == op;
  return count;
}

TEST(ConstantFold, FoldsLiteralSubtrees) {
  Graph g = constant_fold(parse("y = x * (2.0 * 3.0) + sin(0.0) + max(2, 7)"));
  EXPECT_EQ(count_ops(g, OpCode::Sin), 0);
  EXPECT_EQ(count_ops(g, OpCode::Max), 0);
  std::string printed = print(dce(g));
  EXPECT_NE(printed.find("mul(x, 6.0)"), std::string::npos) << printed;
  EXPECT_NE(printed.find(", 7)"), std::string::npos) << printed;
}

TEST(ConstantFold, KeepsNonFiniteAndIntegerWraps) {
  // log(0) is -inf: kept as an op, so the kernel shows it.
  EXPECT_EQ(count_ops(constant_fold(parse("y = x + log(0.0)")), OpCode::Log), 1);
  Graph wrap = dce(constant_fold(parse("i:i32[n]; y = i + 2147483647 * 2")));
  EXPECT_NE(print(wrap).find("add(i, -2)"), std::string::npos) << print(wrap);
}

TEST(ConstantFold, NeverChangesADtype) {
  // tanh(-1.5) is an op over literals: weak like a literal, before and after folding
  // (found by running random expressions: the verifier rejected the folded graph).
  for (const char* text :
       {"x:f16[n]; y = fma(2.5, tanh(-1.5), x)", "x:bf16[n]; y = x * (2.0 * 3.0)",
        "i:i32[n]; y = i + 2 * 3", "x:bf16[n]; y = x + cast(2.0, f32)"}) {
    Graph g = parse(text);
    DType before = g.node(g.outputs()[0].second).dtype;
    Graph folded = optimize(g);
    EXPECT_EQ(folded.node(folded.outputs()[0].second).dtype, before) << text;
  }
  Graph g = parse("x:bf16[n]; y = x * (2.0 * 3.0); z = x + cast(2.0, f32)");
  EXPECT_EQ(g.node(g.outputs()[0].second).dtype, DType::BF16);
  EXPECT_EQ(g.node(g.outputs()[1].second).dtype, DType::F32);  // a cast is not a literal
}

TEST(Cse, MergesIdenticalNodes) {
  Graph g = parse("y = sin(x) * sin(x) + sin(x)");
  EXPECT_EQ(count_ops(g, OpCode::Sin), 3);
  Graph merged = dce(cse(g));
  EXPECT_EQ(count_ops(merged, OpCode::Sin), 1);
  // Different operands or target dtypes are not merged.
  EXPECT_EQ(count_ops(cse(parse("y = sin(x) + sin(z)")), OpCode::Sin), 2);
  EXPECT_EQ(count_ops(cse(parse("y = cast(x, bf16) + cast(x, f16)")), OpCode::Cast), 2);
}

TEST(Dce, DropsDeadNodesKeepsInputs) {
  Graph g;
  Value x = g.input("x", DType::F32, {Dim::named("n")});
  Value unused_input = g.input("u", DType::F32, {Dim::named("n")});
  (void)kjit::exp(unused_input);  // dead
  (void)kjit::cos(x);             // dead
  g.output("y", kjit::sin(x));
  Graph live = dce(g);
  EXPECT_EQ(count_ops(live, OpCode::Exp), 0);
  EXPECT_EQ(count_ops(live, OpCode::Cos), 0);
  EXPECT_EQ(count_ops(live, OpCode::Sin), 1);
  EXPECT_EQ(live.inputs().size(), 2u);
}

TEST(Dce, DropsADeadChain) {
  // A dead node whose operand is dead too (a literal here): found by the parser
  // fuzzer, rebuild() had refused the dead user before dce could drop it.
  Graph g = parse("a = (E); b = a * 2\nreturn a");
  ASSERT_EQ(count_ops(g, OpCode::Mul), 1);
  Graph live = optimize(g);
  EXPECT_EQ(count_ops(live, OpCode::Mul), 0);
  EXPECT_EQ(count_ops(live, OpCode::Const), 0);
  EXPECT_EQ(print(live), "E:f32[n]\na = E\nreturn a\n");
  Graph chain = dce(parse("x:f32[n]; y = x; t = cos(sin(x) * 3.0)\nreturn y"));
  EXPECT_EQ(count_ops(chain, OpCode::Sin), 0);
  EXPECT_EQ(count_ops(chain, OpCode::Cos), 0);
}

TEST(Fuse, OneGroupFusedOneKernelPerOpUnfused) {
  Graph g = optimize(parse("y = sin(x)^2 + cos(x)^2"));
  EXPECT_EQ(fuse(g).size(), 1u);
  std::vector<KernelGroup> stages = unfuse(g);
  ASSERT_EQ(stages.size(), 5u);  // sin, pow, cos, pow, add
  EXPECT_EQ(stages.back().graph.outputs()[0].first, "y");
  EXPECT_EQ(stages[0].graph.inputs().size(), 1u);
  EXPECT_EQ(stages.back().graph.inputs().size(), 2u);  // two intermediates from memory
}

std::map<std::string, HostTensor> random_inputs(const Graph& graph, std::mt19937_64& rng);

// "y = x0*x0 + x1*x1 + ..." over `count` inputs of `dtype`.
std::string sum_of_squares(int count, const std::string& dtype = "f32") {
  std::string text, sum;
  for (int i = 0; i < count; ++i) {
    text += fmt::format("x{}:{}[n]; ", i, dtype);
    sum += fmt::format("{}x{} * x{}", i ? " + " : "", i, i);
  }
  return text + "y = " + sum;
}

// Runs a split graph's groups one after another through the interpreter, each
// reading the caller's inputs and what earlier groups wrote.
std::map<std::string, HostTensor> interpret_groups(const std::vector<KernelGroup>& groups,
                                                   std::map<std::string, HostTensor> values) {
  std::map<std::string, HostTensor> written;
  for (const KernelGroup& group : groups) {
    std::map<std::string, HostTensor> inputs;
    for (int id : group.graph.inputs())
      inputs[group.graph.node(id).name] = values.at(group.graph.node(id).name);
    for (auto& [name, tensor] : interpret(group.graph, inputs))
      values[name] = written[name] = tensor;
  }
  return written;
}

void expect_same_outputs(const Graph& graph, const std::vector<KernelGroup>& groups,
                         double tolerance) {
  std::mt19937_64 rng(7);
  const std::map<std::string, HostTensor> inputs = random_inputs(graph, rng);
  const std::map<std::string, HostTensor> want = interpret(graph, inputs);
  const std::map<std::string, HostTensor> got = interpret_groups(groups, inputs);
  for (const auto& [name, id] : graph.outputs()) {
    ASSERT_TRUE(got.count(name)) << "no group writes output " << name;
    EXPECT_LE(testing::relative_l2_error(got.at(name).data, want.at(name).data), tolerance) << name;
  }
}

TEST(Fuse, SmallChainsAreOneGroup) {
  for (const char* text : {"y = x * sigmoid(x) * g", "y = sin(x)^2 + cos(x)^2; z = x > 0"}) {
    Graph g = optimize(parse(text));
    EXPECT_LT(estimated_registers(g), kRegisterBudget) << text;
    ASSERT_EQ(fuse(g).size(), 1u) << text;
    EXPECT_EQ(print(fuse(g)[0].graph), print(g));
  }
}

// "a_i = sin(x * c_i)" for `count` values, all alive until "y = sum a_i * a_(count-1-i)".
std::string live_values(int count) {
  std::string text;
  for (int i = 0; i < count; ++i) text += fmt::format("a{} = sin(x * {}.5); ", i, i + 1);
  text += fmt::format("y = a0 * a{}", count - 1);
  for (int i = 1; i < count / 2; ++i) text += fmt::format(" + a{} * a{}", i, count - 1 - i);
  return text;
}

TEST(Fuse, SplitsOnlyOverTheBudgetAndWhereTheTemporariesAreCheap) {
  // 128 inputs loaded up front: ~153 registers at the smallest config, which ptxas
  // fits (it issues scalar loads late): one kernel at the default budget.
  Graph inputs = optimize(parse(sum_of_squares(128)));
  EXPECT_GT(estimated_registers(inputs), 128);
  EXPECT_LE(estimated_registers(inputs), kRegisterBudget);
  EXPECT_EQ(fuse(inputs).size(), 1u);
  // At 128 it is split: one partial sum crosses the cut (8 bytes per element against
  // the 516 the chain moves).
  const std::vector<KernelGroup> cut = fuse(inputs, 128);
  ASSERT_EQ(cut.size(), 2u);
  EXPECT_EQ(split_traffic(inputs, cut).temporaries, 8);
  EXPECT_EQ(split_traffic(inputs, cut).own, 128 * 4 + 4);
  // 300 values alive at once: ~325 registers, but any cut carries ~200 of them
  // through memory, far more than the 8 bytes the chain moves: one kernel (ptxas
  // spills), though split() can cut it, exactly.
  Graph live = optimize(parse(live_values(300)));
  EXPECT_GT(estimated_registers(live), kRegisterBudget);
  EXPECT_EQ(fuse(live).size(), 1u);
  const std::vector<KernelGroup> groups = split(live);
  ASSERT_GE(groups.size(), 2u);
  EXPECT_GT(split_traffic(live, groups).temporaries, kSplitTrafficLimit * 8);
  for (const KernelGroup& group : groups) EXPECT_LE(group.registers, kRegisterBudget);
  expect_same_outputs(live, groups, 0);
}

TEST(Fuse, ManyInputsAreSplitAtTheRegisterBudget) {
  // At a budget of 128, the 128-input sum (~153) is cut.
  Graph g = optimize(parse(sum_of_squares(128)));
  const std::vector<KernelGroup> groups = split(g, 128);
  ASSERT_GE(groups.size(), 2u);
  for (size_t i = 0; i < groups.size(); ++i) {
    EXPECT_LE(groups[i].registers, 128) << "group " << i;
    EXPECT_EQ(groups[i].registers, estimated_registers(groups[i].graph));
  }
  // The partial sum crosses the cut as a temporary; the last group writes y.
  EXPECT_EQ(groups[0].graph.outputs().size(), 1u);
  EXPECT_EQ(groups[0].graph.outputs()[0].first.rfind("_t", 0), 0u);
  EXPECT_EQ(groups.back().graph.outputs()[0].first, "y");
  expect_same_outputs(g, groups, 0);  // f32: the same ops in the same order
  // A budget nothing fits: every group is as small as the chain allows, still exact.
  const std::vector<KernelGroup> tiny = split(g, 30);
  EXPECT_GT(tiny.size(), groups.size());
  expect_same_outputs(g, tiny, 0);
}

TEST(Fuse, ManyLiveValuesAreSplitToo) {
  // One input, but 120 values alive at once: a_i is needed until a_(119-i) exists.
  Graph g = optimize(parse(live_values(120)));
  EXPECT_GT(estimated_registers(g), 128);
  const std::vector<KernelGroup> groups = split(g, 128);
  ASSERT_GE(groups.size(), 2u);
  for (const KernelGroup& group : groups) EXPECT_LE(group.registers, 128);
  expect_same_outputs(g, groups, 0);
}

TEST(Fuse, SixteenBitValuesCrossACutAsF32AndOutputsKeepTheirDtypes) {
  // bf16 inputs; an output computed early (p), one late (y), one returned as is (q).
  Graph g = optimize(parse(sum_of_squares(128, "bf16") + "; p = x0 * x1; q = x5"));
  const std::vector<KernelGroup> groups = split(g, 128);
  ASSERT_GE(groups.size(), 2u);
  std::map<std::string, DType> written;
  for (const KernelGroup& group : groups)
    for (const auto& [name, id] : group.graph.outputs()) written[name] = group.graph.node(id).dtype;
  EXPECT_EQ(written.at("y"), DType::BF16);
  EXPECT_EQ(written.at("p"), DType::BF16);
  EXPECT_EQ(written.at("q"), DType::BF16);
  for (const auto& [name, dtype] : written)
    if (name.rfind("_t", 0) == 0) {
      EXPECT_EQ(dtype, DType::F32) << name;
    }
  // The interpreter rounds every bf16 op to bf16 while the kernels keep f32 (the
  // temporaries now too), so the two agree to bf16 precision, as the GPU tests ask.
  expect_same_outputs(g, groups, 1e-2);
}

TEST(Fuse, EveryGroupWritesAValueOfTheFullShape) {
  // Row vectors b_i broadcast against x only at the end: no full-shaped value before
  // the last op, so there is nowhere to cut; the chain stays one kernel.
  std::string rows = "x:f32[m,n]; ", sum;
  for (int i = 0; i < 120; ++i) {
    rows += fmt::format("b{}:f32[n]; ", i);
    sum += fmt::format("{}b{} * b{}", i ? " + " : "", i, i);
  }
  Graph late = optimize(parse(rows + "y = x * (" + sum + ")"));
  EXPECT_GT(estimated_registers(late), 128);
  EXPECT_EQ(split(late, 128).size(), 1u);
  // x in the chain from the start: full-shaped partial results, so it splits.
  std::string chain = "x";
  for (int i = 0; i < 120; ++i) chain = fmt::format("({} + b{} * b{})", chain, i, i);
  Graph early = optimize(parse(rows + "y = " + chain));
  const std::vector<KernelGroup> groups = split(early, 128);
  ASSERT_GE(groups.size(), 2u);
  for (const KernelGroup& group : groups)
    EXPECT_EQ(group.graph.output_shape(), early.output_shape());
  expect_same_outputs(early, groups, 0);
}

TEST(Pipeline, DumpsEachPassAndUnchanged) {
  std::ostringstream log;
  Graph g = optimize(parse("y = sin(x) + sin(x) + 1.0 * 2.0"), &log);
  std::string text = log.str();
  EXPECT_NE(text.find("=== after verify ===\n(unchanged)"), std::string::npos) << text;
  EXPECT_NE(text.find("=== after constant_fold ===\nx:f32[n]"), std::string::npos) << text;
  EXPECT_NE(text.find("=== after cse ==="), std::string::npos) << text;
  EXPECT_NE(text.find("=== after dce ==="), std::string::npos) << text;
  EXPECT_EQ(count_ops(g, OpCode::Sin), 1);
}

// Inputs for every input of `graph`: dims m = 3, n = 7 (other names 5), values
// drawn from the input's domain (x10 for i32; 0/1 for bool).
std::map<std::string, HostTensor> random_inputs(const Graph& graph, std::mt19937_64& rng) {
  std::map<std::string, HostTensor> inputs;
  for (int id : graph.inputs()) {
    const Node& n = graph.node(id);
    HostTensor t;
    for (const Dim& d : n.shape)
      t.shape.push_back(!d.is_symbolic() ? d.size : d.symbol == "m" ? 3 : d.symbol == "n" ? 7 : 5);
    auto [lo, hi] = input_domain(graph, id);
    if (n.dtype == DType::I32) lo *= 10, hi *= 10;  // a wider range of integers
    t.data =
        testing::random_values(n.dtype, static_cast<size_t>(element_count(t.shape)), lo, hi, rng);
    for (double& v : t.data) v = round_to(n.dtype, v);
    inputs[n.name] = std::move(t);
  }
  return inputs;
}

// optimize() keeps every output's values: the corpus and random expressions (literal
// subtrees for constant folding, repeated subexpressions for CSE, a dead statement
// for DCE), interpreted before and after on the same inputs. Folding rounds f32
// literals to what the kernel holds, hence the tolerance.
TEST(Pipeline, KeepsEveryOutputsValues) {
  std::vector<std::string> texts(std::begin(kCorpus), std::end(kCorpus));
  std::mt19937_64 rng(20261130);
  for (int i = 0; i < 300; ++i) {
    const std::string t = testing::random_expression(rng, 3, {"a", "b", "1.5", "-0.5"});
    const std::string u = testing::random_expression(rng, 3, {"a", "2.5"});
    const std::string y = testing::random_expression(rng, 4, {"a", "b", "t", "0.25"});
    texts.push_back("t = " + t + "; u = " + u + "; y = " + y + " + sin(t) * sin(t)\nreturn y");
  }
  for (const std::string& text : texts) {
    SCOPED_TRACE(text);
    const Graph before = parse(text);
    const Graph after = optimize(before);
    const std::map<std::string, HostTensor> inputs = random_inputs(before, rng);
    std::map<std::string, HostTensor> want = interpret(before, inputs);
    std::map<std::string, HostTensor> got = interpret(after, inputs);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, w] : want) {
      const HostTensor& g = got.at(name);
      ASSERT_EQ(g.shape, w.shape) << name;
      for (size_t i = 0; i < w.data.size(); ++i) {
        if (std::isnan(w.data[i])) {
          EXPECT_TRUE(std::isnan(g.data[i])) << name << "[" << i << "]";
          continue;
        }
        EXPECT_NEAR(g.data[i], w.data[i], 1e-5 * (1 + std::abs(w.data[i])))
            << name << "[" << i << "]";
      }
    }
  }
}

}  // namespace
}  // namespace kjit::ir
