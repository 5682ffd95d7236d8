// The `kjit emit|compile ... matmul` handler, called as the CLI's verbs call it.
#include <gtest/gtest.h>

#include "kjit/support/error.h"
#include "tools/cli/family.h"

namespace kjit::cli {
namespace {

KernelCommandOptions options(Verb verb) {
  KernelCommandOptions o;
  o.verb = verb;
  o.what = "matmul";
  o.m = 4097;
  o.n = 4096;
  o.k = 768;
  return o;
}

TEST(MatmulCli, IsRegistered) {
  ASSERT_NE(find_family("matmul"), nullptr);
}

TEST(MatmulCli, EmitPrintsTheGeneratedSource) {
  KernelCommandOptions o = options(Verb::Emit);
  o.epilogue = "gelu(acc + bias)";
  o.layout = "nt";
  o.config = "bm=128,bn=128,bk=32,warps=8,stages=3";
  testing::internal::CaptureStdout();
  find_family("matmul")(o);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("#include \"kjit/matmul.cuh\""), std::string::npos) << out;
  EXPECT_NE(out.find("layout=nt,dtype=bf16,out=bf16,align=16,epilogue=gelu(acc + bias)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("bm=128,bn=128,bk=32,warps=8,wm=2,stages=3"), std::string::npos);
  EXPECT_NE(out.find("kjit_epilogue_fn(acc"), std::string::npos);
}

TEST(MatmulCli, BadInputIsAUserError) {
  KernelCommandOptions o = options(Verb::Emit);
  o.k = 0;
  EXPECT_THROW(find_family("matmul")(o), UserError);
  o = options(Verb::Emit);
  o.dtype = "i8";
  EXPECT_THROW(find_family("matmul")(o), UserError);
  o = options(Verb::Emit);
  o.config = "bm=256,bn=256,bk=64,warps=8,stages=8";
  EXPECT_THROW(find_family("matmul")(o), UserError);
  o = options(Verb::Emit);
  o.config = "tiles=4";
  EXPECT_THROW(find_family("matmul")(o), UserError);
  o = options(Verb::Emit);
  o.epilogue = "sine(acc)";  // an unknown op: the IR parser suggests sin
  EXPECT_THROW(find_family("matmul")(o), UserError);
  o = options(Verb::Emit);
  o.epilogue = "bias * 2";  // does not use acc
  EXPECT_THROW(find_family("matmul")(o), UserError);
}

TEST(MatmulCli, AnyElementwiseIrIsAnEpilogue) {
  // Before the IR was wired in, only four hand-written epilogues existed and
  // sin(acc) was refused; now any elementwise IR over acc lowers.
  KernelCommandOptions o = options(Verb::Emit);
  o.epilogue = "sin(acc)";
  EXPECT_NO_THROW(find_family("matmul")(o));
}

}  // namespace
}  // namespace kjit::cli
