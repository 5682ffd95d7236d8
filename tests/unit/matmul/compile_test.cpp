// NVRTC compiles every config of the default space, for every input dtype, on a
// machine without a GPU: zero register spills, no local memory, and the
// instructions the design depends on (checked in the SASS by cuobjdump when the
// toolkit has it, in the PTX otherwise).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <set>
#include <thread>

#include "kjit/compiler/lowering/matmul.h"
#include "kjit/compiler/lowering/matmul_epilogue.h"
#include "kjit/runtime/compile.h"
#include "kjit/runtime/matmul.h"
#include "kjit/runtime/matmul_check.h"
#include "kjit/tuner/matmul_space.h"
#include "tests/support/sass.h"

namespace kjit::matmul {
namespace {

struct Case {
  Problem problem;
  Config config;
  std::string label;
  bool ir_gelu = false;  // the epilogue is the IR's gelu(acc + bias), not the builtin's
};

// with_epilogue: the builtin gelu(acc + bias) (the tanh form, one MUFU an output), or
// with ir_gelu the IR's, as `--epilogue` gives it (gelu_for_16bit into a 16-bit C,
// gelu_f32 into f32: two MUFU and 21 or 39 more instructions an output).
Problem problem_for(DType dtype, const std::string& layout, bool with_epilogue,
                    bool ir_gelu = false) {
  Problem p;
  p.m = p.n = p.k = 4096;
  p.input = dtype;
  p.output = dtype == DType::TF32 ? DType::F32 : dtype;  // tf32 is an input type
  set_layout(p, layout);
  if (with_epilogue)
    p.epilogue = ir_gelu ? epilogue_from_ir("gelu(acc + bias)", dtype).epilogue
                         : builtin_epilogue("gelu(acc + bias)", dtype).epilogue;
  return p;
}

// Every kernel of the tuner's default spaces (configs that differ only in splitk
// or raster share one), with a fused epilogue where it matters: bf16 on the H200
// (wgmma and mma.sync) in the aligned class and the misaligned one (narrow loads),
// tf32, f16, f32, and the other layouts on the workhorse configs.
std::vector<Case> cases() {
  std::vector<Case> out;
  std::set<std::string> seen;  // source configs already compiled
  const cuda::DeviceProperties h200 = cuda::planning_device("h200");
  auto add_space = [&](const Problem& p, const std::string& label) {
    for (const std::string& text : tuner::MatmulTuning(p).space(h200).candidates) {
      Config c = Config::parse(text);
      c.splitk = 1;
      c.raster = 8;
      if (!seen.insert(matmul::to_string(p.input) + c.source_text()).second) continue;
      out.push_back({p, c, label + " " + c.source_text()});
    }
  };
  add_space(problem_for(DType::BF16, "nn", true), "bf16 nn");
  Problem misaligned = problem_for(DType::BF16, "nn", true);
  misaligned.aligned = false;
  add_space(misaligned, "bf16 nn align=1");
  add_space(problem_for(DType::TF32, "nn", true), "tf32 nn");
  // Short M adds the swapped kernels (swap=ab: bn = M rounded up to 16).
  for (int64_t m : {16, 64}) {
    Problem decode = problem_for(DType::BF16, "nn", true);
    decode.m = m;
    add_space(decode, "bf16 nn m=" + std::to_string(m));
  }
  add_space(problem_for(DType::F32, "nn", true), "f32 nn");
  // f16 differs from bf16 only in the mma instruction's type; other layouts change
  // the operand paths: the workhorse configs of both engines cover them.
  const Config workhorses[] = {wgmma_config(128, 256, 4),
                               Config::parse("bm=128,bn=256,bk=32,warps=8,wm=2,stages=4")};
  for (const Config& c : workhorses) {
    out.push_back({problem_for(DType::F16, "nn", false), c, "f16 nn " + c.source_text()});
    for (const char* layout : {"nt", "tn", "tt"})
      out.push_back({problem_for(DType::BF16, layout, false), c,
                     std::string("bf16 ") + layout + " " + c.source_text()});
  }
  for (const char* layout : {"nt", "tn", "tt"})
    out.push_back(
        {problem_for(DType::F32, layout, false), simt_config(1), std::string("f32 ") + layout});
  // The IR's gelu on the write-outs it is inlined into: each schedule of the wgmma
  // engine in both alignment classes (bulk and shifted rows), the mma.sync workhorse,
  // and gelu_f32 into tf32's f32 C.
  const Config ir_configs[] = {
      wgmma_config(128, 256, 4),
      Config::parse("mma=wgmma,bm=128,bn=256,stages=4,schedule=persistent"),
      Config::parse("mma=wgmma,bm=256,bn=128,stages=4,schedule=persistent"),
      Config::parse("mma=wgmma,bm=128,bn=128,stages=4,schedule=pingpong"),
      Config::parse("bm=128,bn=256,bk=32,warps=8,wm=2,stages=4")};
  for (const Config& c : ir_configs)
    for (bool aligned : {true, false}) {
      Problem p = problem_for(DType::BF16, "nn", true, true);
      p.aligned = aligned;
      out.push_back(
          {p, c, std::string("bf16 nn IR gelu ") + (aligned ? "" : "align=1 ") + c.source_text(),
           true});
    }
  const Config tf32 = Config::parse("mma=wgmma,bm=128,bn=128,bk=32,stages=4,schedule=persistent");
  out.push_back({problem_for(DType::TF32, "nn", true, true), tf32,
                 "tf32 nn IR gelu " + tf32.source_text(), true});
  return out;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(MatmulCompile, EveryDefaultConfigCompilesWithoutSpills) {
  const std::vector<Case> all = cases();
  // One NVRTC compile per core (the big tiles take 10-30 s each).
  std::vector<cuda::CompiledProgram> programs(all.size());
  std::vector<std::string> failures(all.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::max(2u, std::thread::hardware_concurrency()); ++t)
    pool.emplace_back([&] {
      for (size_t i = next++; i < all.size(); i = next++) {
        try {
          programs[i] = compile_for_arch(lower(all[i].problem, all[i].config), "sm_90");
        } catch (const std::exception& e) {
          failures[i] = e.what();
        }
      }
    });
  for (std::thread& t : pool) t.join();
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE(all[i].label);
    ASSERT_EQ(failures[i], "");
    const KernelSource source = lower(all[i].problem, all[i].config);
    const cuda::CompiledProgram& program = programs[i];
    bool found_main = false;
    for (const cuda::KernelStats& k : program.kernels) {
      EXPECT_EQ(k.spill_store_bytes, 0) << k.name;
      EXPECT_EQ(k.spill_load_bytes, 0) << k.name;
      EXPECT_EQ(k.stack_bytes, 0) << k.name;
      if (k.name == source.name) {
        found_main = true;
        EXPECT_LE(k.registers * source.block_threads, 65536) << k.name;
        std::printf("  %-60s %3d regs, %6d B smem, %.0f ms\n", all[i].label.c_str(), k.registers,
                    source.dynamic_shared_bytes, program.compile_ms);
      }
    }
    EXPECT_TRUE(found_main) << "no ptxas statistics for " << source.name;
    if (all[i].problem.input == DType::F32) {
      EXPECT_NE(program.ptx.find("fma.rn.f32"), std::string::npos);
      continue;
    }
    const bool wgmma = all[i].config.wgmma;
    if (wgmma) {
      EXPECT_NE(program.ptx.find("wgmma.mma_async.sync.aligned.m64n"), std::string::npos);
      if (all[i].problem.input == DType::TF32) {
        EXPECT_NE(program.ptx.find("k8.f32.tf32.tf32"), std::string::npos);
      }
      EXPECT_NE(program.ptx.find("cp.async.bulk.tensor.3d"), std::string::npos);
      EXPECT_NE(program.ptx.find("mbarrier.try_wait.parity"), std::string::npos);
    } else {
      EXPECT_NE(program.ptx.find("mma.sync.aligned.m16n8k16"), std::string::npos);
      EXPECT_NE(program.ptx.find("ldmatrix.sync.aligned"), std::string::npos);
      if (all[i].config.narrow) {  // through registers: loads, then 16-byte shared stores
        EXPECT_EQ(program.ptx.find("cp.async.cg.shared.global"), std::string::npos);
        EXPECT_NE(program.ptx.find("st.shared.v4.b32"), std::string::npos);
        EXPECT_NE(program.ptx.find("ld.global.u16"), std::string::npos);
      } else {
        EXPECT_NE(program.ptx.find("cp.async.cg.shared.global"), std::string::npos);
      }
    }
    const std::string sass = testing::dump_sass(program.cubin, "matmul_" + std::to_string(i));
    if (sass.empty()) {
      std::printf("  (no cuobjdump: SASS not checked, PTX only)\n");
      continue;
    }
    const size_t instructions = count(sass, " ;");
    std::printf(
        "  SASS: %zu instructions, %d HMMA, %d HGMMA, %d MUFU, LDSM %s, LDGSTS %s, UTMALDG %s, "
        "local memory %s\n",
        instructions, static_cast<int>(count(sass, "HMMA.16816.F32")),
        static_cast<int>(count(sass, "HGMMA.64x")), static_cast<int>(count(sass, "MUFU")),
        sass.find("LDSM") != std::string::npos ? "yes" : "no",
        sass.find("LDGSTS") != std::string::npos ? "yes" : "no",
        sass.find("UTMALDG") != std::string::npos ? "yes" : "no",
        sass.find("LDL") == std::string::npos && sass.find("STL") == std::string::npos ? "none"
                                                                                       : "USED");
    if (wgmma) {
      EXPECT_NE(sass.find("HGMMA.64x"), std::string::npos);
      EXPECT_NE(sass.find("UTMALDG"), std::string::npos);
    } else {
      EXPECT_NE(sass.find("HMMA.16816.F32"), std::string::npos);
      EXPECT_NE(sass.find("LDSM"), std::string::npos);
      if (!all[i].config.narrow) {
        EXPECT_NE(sass.find("LDGSTS"), std::string::npos);
      }
    }
    EXPECT_EQ(sass.find("LDL"), std::string::npos) << "local memory loads";
    EXPECT_EQ(sass.find("STL"), std::string::npos) << "local memory stores";
    // The staged epilogue is a rolled loop: the epilogue function appears once per
    // output of a 16-byte chunk plus once in the edge loop (GELU: 1 MUFU each), not
    // once per accumulator in each of the two main-loop instantiations (128 x 2
    // MUFU and ~28000 instructions for 128 x 256 before the staging). The main
    // loops, prologues and epilogue fit in ~2000 instructions. The persistent and
    // ping-pong write-outs are unrolled over a thread's accumulators on purpose (their
    // indices must be constants to stay in registers), in two variants (guarded and
    // not): GELU's ~1.5 MUFU per accumulator per variant, ~54 instructions each.
    const int accumulators =
        (all[i].config.pingpong ? all[i].config.bm / 64 : 1) * all[i].config.bn / 2;
    const size_t unrolled = all[i].config.persistent ? static_cast<size_t>(accumulators) : 0;
    if (!all[i].ir_gelu) {
      EXPECT_LE(count(sass, "MUFU"), 40u + 3 * unrolled);
      EXPECT_LE(instructions, 4000u + 64 * unrolled);
    } else {
      // The IR's gelu: two MUFU (rcp, ex2) and ~21 more instructions an output, in
      // up to three unrolled write-outs (bulk or shifted rows, guarded, fp32-staged).
      // Measured with CUDA 13.0: 128x128 ping-pong 908 MUFU and 17077 instructions
      // (misaligned C), 128x256 persistent 654 and 12588.
      EXPECT_LE(count(sass, "MUFU"), 60u + 8 * unrolled);
      EXPECT_LE(instructions, 6000u + 100 * unrolled);
    }
  }
}

// wgmma reads its shared-memory descriptors from uniform registers. Built from a
// value ptxas cannot prove warp-uniform (threadIdx.x / 128), each was computed in
// the thread's registers and moved over (R2UR) at every k step: 8 of the 128x256
// persistent main loop's 82 instructions a k-tile. Every schedule with one or two
// consumer warpgroups builds them once a k-tile from sm90::warpgroup_index, in every
// layout (MN-major operands step by 2048 bytes, K-major by 32). Not checked: four
// consumers (threadIdx.x / 128: the shuffled value spilled) and one (ptxas keeps
// that loop's whole stage arithmetic in the thread's registers).
TEST(MatmulCompile, WgmmaDescriptorsStayInUniformRegisters) {
  std::vector<Case> all;
  for (const char* layout : {"nn", "tn", "nt", "tt"}) {
    const Problem p = problem_for(DType::BF16, layout, true, true);
    for (const char* schedule : {"tile", "persistent"}) {
      const Config c = Config::parse(
          std::string("mma=wgmma,bm=128,bn=256,bk=64,warps=12,wm=2,stages=4,schedule=") + schedule);
      all.push_back({p, c, std::string(layout) + " " + c.source_text(), true});
    }
  }
  const Problem nn = problem_for(DType::BF16, "nn", true, true);
  for (const char* text :
       {"mma=wgmma,bm=128,bn=128,bk=64,warps=12,wm=2,stages=6,schedule=pingpong",
        "mma=wgmma,bm=64,bn=256,bk=64,warps=12,wm=1,stages=4,schedule=pingpong"}) {
    const Config c = Config::parse(text);
    all.push_back({nn, c, "nn " + c.source_text(), true});
  }
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE(all[i].label);
    const cuda::CompiledProgram program =
        compile_for_arch(lower(all[i].problem, all[i].config), "sm_90");
    const std::string sass =
        testing::dump_sass(program.cubin, "matmul_descriptors_" + std::to_string(i));
    if (sass.empty()) GTEST_SKIP() << "no cuobjdump to read the SASS with";
    const testing::DescriptorSources sources = testing::hgmma_descriptor_sources(sass);
    std::printf("  %-72s %2d HGMMA, %d with a descriptor from R2UR\n", all[i].label.c_str(),
                sources.hgmma, sources.from_thread_registers);
    EXPECT_GT(sources.hgmma, 0);
    EXPECT_EQ(sources.from_thread_registers, 0);
  }
}

TEST(MatmulCompile, PaddingAndStagingKernelsCompileWithoutSpills) {
  for (DType dtype : {DType::BF16, DType::F16, DType::TF32}) {
    const KernelSource source = dtype == DType::TF32 ? lower_stage_k_major() : lower_pad(dtype);
    SCOPED_TRACE(source.name);
    const cuda::CompiledProgram program = compile_for_arch(source, "sm_90");
    ASSERT_EQ(program.kernels.size(), 1u);
    EXPECT_EQ(program.kernels[0].name, source.name);
    EXPECT_EQ(program.kernels[0].spill_store_bytes, 0);
    EXPECT_EQ(program.kernels[0].stack_bytes, 0);
  }
}

}  // namespace
}  // namespace kjit::matmul
