#include <gtest/gtest.h>

#include "kjit/compiler/ir/graph.h"
#include "kjit/compiler/ir/printer.h"
#include "kjit/support/error.h"

namespace kjit::ir {
namespace {

Shape n() {
  return {Dim::named("n")};
}

TEST(DType, Promotion) {
  EXPECT_EQ(promote(DType::BF16, DType::F32), DType::F32);
  EXPECT_EQ(promote(DType::F16, DType::BF16), DType::F32);
  EXPECT_EQ(promote(DType::I32, DType::BF16), DType::BF16);
  EXPECT_EQ(promote(DType::Bool, DType::I32), DType::I32);
  EXPECT_EQ(parse_dtype("bf16"), DType::BF16);
  EXPECT_FALSE(parse_dtype("f64").has_value());
}

TEST(Shape, BroadcastFollowsNumpy) {
  Shape mn = {Dim::named("m"), Dim::named("n")};
  EXPECT_EQ(broadcast(mn, {Dim::named("n")}), mn);
  EXPECT_EQ(broadcast(mn, {Dim::named("m"), Dim::of(1)}), mn);
  EXPECT_EQ(broadcast({}, mn), mn);
  EXPECT_FALSE(broadcast(mn, {Dim::named("m")}).has_value());  // [m] aligns with n
  EXPECT_FALSE(broadcast({Dim::of(3)}, {Dim::of(4)}).has_value());
}

// --m 4294967296 --n 4294967296 wrapped to 0 elements here.
TEST(Shape, ElementCountsAreCheckedProducts) {
  EXPECT_EQ(element_count({}), 1);
  EXPECT_EQ(element_count({4096, 4096}), int64_t{1} << 24);
  try {
    element_count({4294967296, 4294967296});
    ADD_FAILURE() << "the product wrapped";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("(4294967296, 4294967296) is too large"),
              std::string::npos)
        << e.what();
  }
}

TEST(Builder, OperatorsAndTypes) {
  Graph g;
  Value x = g.input("x", DType::BF16, n());
  Value gate = g.input("g", DType::BF16, n());
  Value y = x * sigmoid(x) * gate;
  g.output("y", y);
  EXPECT_EQ(g.node(y.id).dtype, DType::BF16);
  // A literal adapts: bf16 * 2.0 stays bf16; an i32 * 2.5 becomes f32.
  EXPECT_EQ(g.node((x * 2.0).id).dtype, DType::BF16);
  Value i = g.input("i", DType::I32, n());
  EXPECT_EQ(g.node((i * 2.5).id).dtype, DType::F32);
  EXPECT_EQ(g.node((i * 2.0).id).dtype, DType::I32);
  EXPECT_EQ(g.node((i / i).id).dtype, DType::F32);  // true division
  EXPECT_EQ(g.node(kjit::sin(i).id).dtype, DType::F32);
  EXPECT_EQ(g.node((x < gate).id).dtype, DType::Bool);
  EXPECT_EQ(g.node(where(x < gate, x, i).id).dtype, DType::BF16);
  EXPECT_EQ(g.node(cast(x, DType::F16).id).dtype, DType::F16);
}

TEST(Builder, MismatchesNameBothSides) {
  Graph g;
  Value x = g.input("x", DType::F32, {Dim::named("m"), Dim::named("n")});
  Value k = g.input("k", DType::F32, {Dim::named("k")});
  try {
    (void)(x + k);
    FAIL() << "expected a shape error";
  } catch (const UserError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("x:f32[m,n]"), std::string::npos) << what;
    EXPECT_NE(what.find("k:f32[k]"), std::string::npos) << what;
  }
  try {
    (void)select(x, x, x);
    FAIL() << "expected a dtype error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("condition must be bool, got x:f32"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(g.input("x", DType::F32, {}), UserError);
  EXPECT_THROW(g.input("2x", DType::F32, {}), UserError);
  EXPECT_THROW(g.output("x", x), UserError);  // the name of an input
}

TEST(Printer, Literals) {
  EXPECT_EQ(format_literal(2, DType::I32), "2");
  EXPECT_EQ(format_literal(2, DType::F32), "2.0");
  EXPECT_EQ(format_literal(0.1, DType::F32), "0.1");
  EXPECT_EQ(format_literal(-1e-5, DType::F32), "-1e-05");
  EXPECT_EQ(format_literal(1, DType::Bool), "true");
}

}  // namespace
}  // namespace kjit::ir
