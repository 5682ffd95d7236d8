// Every expression of the corpus, and every op in every dtype, lowered and compiled
// with NVRTC for sm_90 on both paths (aligned vector and scalar): no GPU needed.
#include <gtest/gtest.h>

#include "kjit/compiler/ir/op_table.h"
#include "kjit/compiler/ir/parser.h"
#include "kjit/runtime/cuda/nvrtc.h"
#include "kjit/runtime/elementwise.h"
#include "kjit/support/error.h"
#include "kjit/templates/embedded.h"
#include "tests/unit/compiler/corpus.h"

namespace kjit {
namespace {

std::vector<cuda::SourceHeader> headers() {
  std::vector<cuda::SourceHeader> out;
  for (const TemplateHeader& t : embedded_templates()) out.push_back({t.name, t.content});
  return out;
}

// Fake, 16-byte-aligned addresses and sizes n = 1024, m = 64: plan() needs no GPU.
std::vector<TensorArg> arguments(const Graph& g, bool outputs, int64_t n, CUdeviceptr& address) {
  std::vector<TensorArg> out;
  auto shape_of = [&](const ir::Shape& shape) {
    std::vector<int64_t> sizes;
    for (const ir::Dim& d : shape)
      sizes.push_back(d.is_symbolic() ? (d.symbol == "m" ? 64 : n) : d.size);
    return sizes;
  };
  if (outputs) {
    for (const auto& [name, id] : g.outputs())
      out.push_back({address += 0x100000, g.node(id).dtype, shape_of(g.output_shape()), {}});
  } else {
    for (int id : g.inputs())
      out.push_back({address += 0x100000, g.node(id).dtype, shape_of(g.node(id).shape), {}});
  }
  return out;
}

void compile_both_paths(const std::string& text, ir::ParseOptions options = {},
                        bool check_spills = true) {
  // Thirty outputs at once need unroll=1 to stay in registers.
  ElementwiseKernel kernel(ir::parse(text, options),
                           ir::ElementwiseConfig::parse(check_spills ? "" : "unroll=1"));
  CUdeviceptr address = 0x10000000;
  std::vector<TensorArg> in = arguments(kernel.graph(), false, 1024, address);
  std::vector<TensorArg> out = arguments(kernel.graph(), true, 1024, address);
  for (Alignment a : {Alignment::Aligned, Alignment::Unaligned}) {
    KernelSource source = kernel.source(kernel.plan(in, out, a));
    cuda::NvrtcOptions nvrtc;
    nvrtc.arch = "sm_90";
    try {
      cuda::CompiledProgram p =
          cuda::nvrtc_compile(source.source, source.name + ".cu", nvrtc, headers());
      ASSERT_EQ(p.kernels.size(), 1u);
      if (check_spills) {
        // Zero spills, sin/cos included: their rare large-argument path
        // (templates/math.cuh) is an out-of-line call with its own frame.
        EXPECT_EQ(p.kernels[0].spill_store_bytes, 0) << text;
      }
    } catch (const CompileError& e) {
      ADD_FAILURE() << text << "\n" << e.what() << "\n" << e.log() << "\n" << source.source;
    }
  }
}

TEST(NvrtcCorpus, EveryExpressionCompiles) {
  for (const char* text : ir::kCorpus) compile_both_paths(text);
}

TEST(NvrtcCorpus, EveryOpInEveryDtypeCompiles) {
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::I32}) {
    std::string text;
    int k = 0;
    for (const ir::OpInfo& op : ir::op_table()) {
      if (op.arity == 0) continue;
      std::string out = "y" + std::to_string(k++) + " = ";
      if (op.code == ir::OpCode::Select)
        text += out + "select(a > b, a, b)\n";
      else if (op.code == ir::OpCode::Cast)
        text += out + "cast(a, bf16) + cast(b, i32)\n";
      else if (op.arity == 1)
        text += out + op.name + "(a)\n";
      else if (op.arity == 2)
        text += out + op.name + "(a, b)\n";
      else
        text += out + op.name + "(a, b, c)\n";
    }
    SCOPED_TRACE(ir::to_string(dtype));
    compile_both_paths(text, ir::ParseOptions{dtype, {ir::Dim::named("n")}}, false);
  }
}

TEST(NvrtcCorpus, BroadcastAndStridedPatternsCompile) {
  ElementwiseKernel kernel(
      ir::parse("x:bf16[m,n]; b:f32[n]; c:f16[m,1]; s:f32[]; y = gelu(x * b + c) - s; z = x > s"));
  for (Alignment a : {Alignment::Aligned, Alignment::Unaligned}) {
    std::vector<TensorArg> in = {{0x10000, DType::BF16, {64, 1024}, {2048, 1}},
                                 {0x20000, DType::F32, {1024}, {}},
                                 {0x30000, DType::F16, {64, 1}, {}},
                                 {0x40000, DType::F32, {}, {}}};
    std::vector<TensorArg> out = {{0x50000, DType::F32, {64, 1024}, {}},
                                  {0x60000, DType::Bool, {64, 1024}, {}}};
    ElementwisePlan plan = kernel.plan(in, out, a);
    EXPECT_EQ(plan.problem.access,
              (std::vector<ir::Access>{ir::Access::Strided, ir::Access::Row, ir::Access::Column,
                                       ir::Access::Scalar}));
    KernelSource source = kernel.source(plan);
    cuda::NvrtcOptions nvrtc;
    EXPECT_NO_THROW(cuda::nvrtc_compile(source.source, "k.cu", nvrtc, headers()));
  }
}

}  // namespace
}  // namespace kjit
