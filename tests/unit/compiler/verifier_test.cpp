#include <gtest/gtest.h>

#include "kjit/compiler/ir/parser.h"
#include "kjit/compiler/ir/verifier.h"
#include "kjit/support/error.h"

namespace kjit::ir {
namespace {

std::string verify_error(const Graph& g) {
  try {
    verify(g);
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Verifier, AcceptsParsedGraphs) {
  EXPECT_NO_THROW(verify(parse("x:bf16[m,n]; b:f32[n]; y = gelu(x + b); z = y > 0")));
}

TEST(Verifier, NamesNodeOpDtypeAndShape) {
  Graph g;
  Value x = g.input("x", DType::F32, {Dim::named("n")});
  Node bad;
  bad.op = OpCode::Sin;
  bad.operands = {x.id};
  bad.dtype = DType::I32;  // the rule says f32
  bad.shape = {Dim::named("n")};
  int id = g.add_node_unchecked(bad);
  g.set_outputs({{"y", id}});
  std::string e = verify_error(g);
  EXPECT_NE(e.find("node 1 (sin#1, sin, i32[n])"), std::string::npos) << e;
  EXPECT_NE(e.find("dtype should be f32"), std::string::npos) << e;
}

TEST(Verifier, RejectsWrongShapeArityOrderAndOutputs) {
  Graph g;
  Value x = g.input("x", DType::F32, {Dim::named("n")});
  Node wrong_shape;
  wrong_shape.op = OpCode::Neg;
  wrong_shape.operands = {x.id};
  wrong_shape.shape = {Dim::named("m")};
  Graph a = g;
  a.set_outputs({{"y", a.add_node_unchecked(wrong_shape)}});
  EXPECT_NE(verify_error(a).find("shape should be [n]"), std::string::npos) << verify_error(a);

  Node arity;
  arity.op = OpCode::Add;
  arity.operands = {x.id};
  arity.shape = {Dim::named("n")};
  Graph b = g;
  b.set_outputs({{"y", b.add_node_unchecked(arity)}});
  EXPECT_NE(verify_error(b).find("add takes 2 operand(s), got 1"), std::string::npos);

  Node forward;
  forward.op = OpCode::Neg;
  forward.operands = {5};
  Graph c = g;
  c.set_outputs({{"y", c.add_node_unchecked(forward)}});
  EXPECT_NE(verify_error(c).find("does not come before"), std::string::npos);

  Graph d = g;
  EXPECT_NE(verify_error(d).find("no output"), std::string::npos);
  d.set_outputs({{"y", 7}});
  EXPECT_NE(verify_error(d).find("names no node"), std::string::npos);
  d.set_outputs({{"x", 0}});
  EXPECT_NE(verify_error(d).find("output name 'x' is taken"), std::string::npos);

  Graph e;
  Value c1 = e.constant(1.0);
  Node inf = e.node(c1.id);
  inf.value = 1.0 / 0.0;
  e.set_outputs({{"y", e.add_node_unchecked(inf)}});
  EXPECT_NE(verify_error(e).find("must be finite"), std::string::npos);
}

}  // namespace
}  // namespace kjit::ir
