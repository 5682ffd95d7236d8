// NVRTC compiles every config of the attention space, for every head dim (bf16;
// the defaults in f16 too), on a machine without a GPU: no register spills, no
// local memory, the mma.sync and ldmatrix instructions the kernel is built on.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "kjit/compiler/lowering/attention.h"
#include "kjit/runtime/compile.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/tuner/attention_space.h"
#include "tests/support/sass.h"

namespace kjit::attention {
namespace {

struct Case {
  Problem problem;
  Config config;
  std::string label;
};

// The problem each compile test builds kernels for: 4096 queries and keys at head dim
// d, either pass, with a score modifier ("" for none).
Problem long_problem(int d, bool backward = false, const char* score_mod = "") {
  Problem p;
  p.seq_q = p.seq_k = 4096;
  p.head_dim = d;
  p.backward = backward;
  p.score_mod = score_mod;
  return p;
}

std::vector<Case> cases() {
  const cuda::DeviceProperties h200 = cuda::planning_device("h200");
  std::vector<Case> all;
  for (int d : {64, 96, 128, 256}) {
    Problem p = long_problem(d);
    for (const Config& c : tuner::attention_space(p, h200))
      all.push_back({p, c, "bf16 d=" + std::to_string(d) + " " + c.to_string()});
    p.dtype = ir::DType::F16;
    const Config c = tuner::attention_default(p, h200);
    all.push_back({p, c, "f16 d=" + std::to_string(d) + " " + c.to_string()});
  }
  return all;
}

// A kernel to compile, and what to call it in a failure.
struct Job {
  std::string label;
  KernelSource source;
};

// Compiles every job for `arch` (sm_90a where arch-specific) on every core; a job
// that throws gets its message in (*failures)[i] and an empty program.
std::vector<cuda::CompiledProgram> compile_all(const std::vector<Job>& jobs,
                                               std::vector<std::string>* failures,
                                               const std::string& arch = "sm_90") {
  std::vector<cuda::CompiledProgram> programs(jobs.size());
  failures->assign(jobs.size(), "");
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::max(2u, std::thread::hardware_concurrency()); ++t)
    pool.emplace_back([&] {
      for (size_t i = next++; i < jobs.size(); i = next++) {
        try {
          programs[i] = compile_for_arch(jobs[i].source, target_arch(jobs[i].source, arch));
        } catch (const std::exception& e) {
          (*failures)[i] = e.what();
        }
      }
    });
  for (std::thread& t : pool) t.join();
  return programs;
}

TEST(AttentionCompile, EveryConfigOfTheSpaceCompilesWithoutSpills) {
  const std::vector<Case> all = cases();
  std::vector<cuda::CompiledProgram> programs(all.size());
  std::vector<std::string> failures(all.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::max(2u, std::thread::hardware_concurrency()); ++t)
    pool.emplace_back([&] {
      for (size_t i = next++; i < all.size(); i = next++) {
        try {
          const KernelSource source = lower(all[i].problem, all[i].config);
          programs[i] = compile_for_arch(source, target_arch(source, "sm_90"));
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
    bool found = false;
    for (const cuda::KernelStats& k : programs[i].kernels) {
      if (k.name != source.name) continue;
      found = true;
      EXPECT_EQ(k.spill_store_bytes, 0);
      EXPECT_EQ(k.spill_load_bytes, 0);
      EXPECT_EQ(k.stack_bytes, 0);
      EXPECT_LE(k.registers * source.block_threads, 65536);
      std::printf("  %-36s %3d regs, %6d B smem, %.0f ms\n", all[i].label.c_str(), k.registers,
                  source.dynamic_shared_bytes, programs[i].compile_ms);
    }
    EXPECT_TRUE(found) << "no ptxas statistics for " << source.name;
    if (all[i].config.wgmma) {
      // Both products on wgmma: the scores from shared memory, P V with P in registers.
      EXPECT_NE(programs[i].ptx.find(
                    fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16", all[i].config.bn)),
                std::string::npos);
      EXPECT_NE(programs[i].ptx.find(
                    fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16", all[i].problem.head_dim)),
                std::string::npos);
      EXPECT_NE(programs[i].ptx.find("cp.async.bulk.tensor.4d"), std::string::npos);
      // The pipeline overlaps P V with the next scores only if ptxas keeps the wgmma
      // asynchronous: no waits injected, nothing serialized.
      EXPECT_EQ(programs[i].log.find("serialized"), std::string::npos) << programs[i].log;
      EXPECT_EQ(programs[i].log.find("is injected"), std::string::npos) << programs[i].log;
    } else {
      EXPECT_NE(programs[i].ptx.find("mma.sync.aligned.m16n8k16.row.col.f32"), std::string::npos);
      EXPECT_NE(programs[i].ptx.find("ldmatrix.sync.aligned.m8n8.x4.trans"), std::string::npos);
    }
    EXPECT_NE(programs[i].ptx.find("ex2.approx"), std::string::npos);  // exp2 of the softmax
  }
}

// The backward pass: every config of its space, every head dim, each of its kernels
// without spills, on mma.sync or (sm_90) wgmma.
TEST(AttentionCompile, EveryBackwardConfigCompilesWithoutSpills) {
  const cuda::DeviceProperties h200 = cuda::planning_device("h200");
  std::vector<Job> jobs;
  for (int d : {64, 96, 128, 256}) {
    const Problem p = long_problem(d, true);
    for (const Config& c : tuner::attention_space(p, h200)) {
      for (BackwardKernel& k : lower_backward(p, c))
        jobs.push_back({fmt::format("d={} {} {}", d, c.to_string(), k.role), std::move(k.source)});
    }
  }
  std::vector<std::string> failures;
  const std::vector<cuda::CompiledProgram> programs = compile_all(jobs, &failures);
  for (size_t i = 0; i < jobs.size(); ++i) {
    SCOPED_TRACE(jobs[i].label);
    ASSERT_EQ(failures[i], "");
    ASSERT_EQ(programs[i].kernels.size(), 1u);
    const cuda::KernelStats& k = programs[i].kernels[0];
    EXPECT_EQ(k.name, jobs[i].source.name);
    EXPECT_EQ(k.spill_store_bytes, 0);
    EXPECT_EQ(k.spill_load_bytes, 0);
    EXPECT_EQ(k.stack_bytes, 0);
    EXPECT_LE(k.registers * jobs[i].source.block_threads, 65536);
    std::printf("  %-44s %3d regs, %6d B smem\n", jobs[i].label.c_str(), k.registers,
                jobs[i].source.dynamic_shared_bytes);
    if (jobs[i].source.name.find("prep") != std::string::npos) continue;
    if (jobs[i].source.name.find("dq_finish") != std::string::npos) {  // dq=atomic's sums
      EXPECT_NE(programs[i].ptx.find("ld.global.v4.f32"), std::string::npos);
      continue;
    }
    if (jobs[i].source.name.find("dqatomic") != std::string::npos) {  // the sums added
      // by the copy engine, a box of the f32 tile at a time, one tile read while the
      // consumers fill the other (released one item late: wait_group.read 1).
      EXPECT_NE(programs[i].ptx.find("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile"),
                std::string::npos);
      EXPECT_NE(programs[i].ptx.find("cp.async.bulk.wait_group.read 1"), std::string::npos);
      // D = 128: each warpgroup publishes its half of dSᵀ without waiting (bar.arrive)
      // and waits only for the other's before the dQ product.
      if (jobs[i].label.rfind("d=128", 0) == 0) {
        EXPECT_NE(programs[i].ptx.find("bar.arrive"), std::string::npos);
      }
    }
    if (jobs[i].source.arch_specific) {  // every product on wgmma, nothing serialized
      EXPECT_NE(programs[i].ptx.find("wgmma.mma_async.sync.aligned"), std::string::npos);
      EXPECT_NE(programs[i].ptx.find("cp.async.bulk.tensor.4d"), std::string::npos);
      EXPECT_EQ(programs[i].log.find("serialized"), std::string::npos) << programs[i].log;
      EXPECT_EQ(programs[i].log.find("is injected"), std::string::npos) << programs[i].log;
    } else {
      EXPECT_NE(programs[i].ptx.find("mma.sync.aligned.m16n8k16.row.col.f32"), std::string::npos);
    }
  }
}

// The score and mask modifiers fused into every kernel of both passes (FlexAttention's
// soft-capping and ALiBi, a sliding window written as a mask modifier): every config
// of the space the tuner keeps for them on `device`, both passes, each head dim,
// compiles for `arch` without spills, and no problem is left without a config (the
// backward's register estimate once left the head dim 256 backward with a modifier
// none on the H200).
void compile_modifier_spaces(const char* device_name, const std::string& arch,
                             std::initializer_list<int> head_dims) {
  const cuda::DeviceProperties device = cuda::planning_device(device_name);
  std::vector<Job> jobs;
  const char* const score_mods[] = {"tanh(s / 50) * 50",
                                    "slope:f32[heads]; s - slope * abs(q_idx - kv_idx)"};
  for (int d : head_dims) {
    for (const char* score_mod : score_mods) {
      for (bool backward : {false, true}) {
        Problem p = long_problem(d, backward, score_mod);
        p.mask_mod = "(kv_idx <= q_idx) * (q_idx - kv_idx < 256)";
        const std::vector<Config> space = tuner::attention_space(p, device);
        EXPECT_FALSE(space.empty())
            << device_name << " d=" << d << (backward ? " bwd " : " fwd ") << score_mod;
        for (const Config& c : space) {
          const std::string label = fmt::format("{} d={} {} {} [{}]", device_name, d,
                                                backward ? "bwd" : "fwd", c.to_string(), score_mod);
          if (!backward) {
            jobs.push_back({label, lower(p, c)});
            continue;
          }
          for (BackwardKernel& k : lower_backward(p, c))  // not dq=atomic's last step
            if (k.role != "prep" && !(c.atomic_dq && k.role == "q"))
              jobs.push_back({label + " " + k.role, std::move(k.source)});
        }
      }
    }
  }
  std::vector<std::string> failures;
  const std::vector<cuda::CompiledProgram> programs = compile_all(jobs, &failures, arch);
  for (size_t i = 0; i < jobs.size(); ++i) {
    SCOPED_TRACE(jobs[i].label);
    ASSERT_EQ(failures[i], "");
    ASSERT_EQ(programs[i].kernels.size(), 1u);
    const cuda::KernelStats& k = programs[i].kernels[0];
    EXPECT_EQ(k.spill_store_bytes, 0);
    EXPECT_EQ(k.spill_load_bytes, 0);
    EXPECT_EQ(k.stack_bytes, 0);
    std::printf("  %-80s %3d regs\n", jobs[i].label.c_str(), k.registers);
    // The modifiers are the kernel's MOD (then, maybe, the dQ product or the
    // persistent flag).
    const std::string& text = jobs[i].source.source;
    EXPECT_TRUE(text.find("kjit_modifiers>") != std::string::npos ||
                text.find("kjit_modifiers, kjit_wgmma_dq>") != std::string::npos ||
                text.find("kjit_modifiers, true>") != std::string::npos)
        << jobs[i].label;
    if (jobs[i].source.arch_specific) {
      EXPECT_EQ(programs[i].log.find("serialized"), std::string::npos) << programs[i].log;
    }
  }
}

TEST(AttentionCompile, EveryConfigWithModifiersCompilesWithoutSpills) {
  compile_modifier_spaces("h200", "sm_90", {64, 96, 128, 256});
}

// The A100's space is the mma.sync engine alone, where the modifiers' registers
// matter most (the head dim 128 backward with one had no config before 2026-12-06).
TEST(AttentionCompile, EveryAmpereConfigWithModifiersCompilesWithoutSpills) {
  compile_modifier_spaces("a100", "sm_80", {64, 96, 128, 256});
}

// wgmma reads its shared-memory descriptors from uniform registers. The wgmma
// kernels of both passes (head dims 64 and 128, plain and with soft-capping, a causal
// mask and a window) build them there: none is computed in the thread's registers
// and moved over (R2UR), which cost the dK/dV kernel's main loop 210 of its 722
// instructions a query tile (docs/perf/2026-12-06-h100-uniform-descriptors.md). Not
// yet the persistent forward with 64-key tiles: there ptxas computes the Q tile's
// descriptors per thread (8 to 21 of their 24 or 36 wgmma); they are listed, not
// checked. Needs cuobjdump; skipped without it.
TEST(AttentionCompile, WgmmaDescriptorsStayInUniformRegisters) {
  const cuda::DeviceProperties h200 = cuda::planning_device("h200");
  std::vector<Job> jobs;
  for (int d : {64, 128})
    for (const char* score_mod : {"", "tanh(s / 50) * 50"})
      for (bool causal : {false, true})
        for (bool backward : {false, true}) {
          Problem p = long_problem(d, backward, score_mod);
          p.causal = causal;
          const bool window = !causal && *score_mod == '\0';  // 256 keys, as a built-in
          if (window) p.window_left = 255, p.window_right = 0;
          for (const Config& c : tuner::attention_space(p, h200)) {
            if (!c.wgmma) continue;
            const std::string label =
                fmt::format("d={} {} {}{}{}{}", d, backward ? "bwd" : "fwd", c.to_string(),
                            causal ? " causal" : "", window ? " window 255:0" : "",
                            *score_mod ? " soft-capping" : "");
            if (!backward) {
              const bool listed_only = c.persistent && c.bn == 64;
              jobs.push_back({label + (listed_only ? " (listed only)" : ""), lower(p, c)});
              continue;
            }
            for (BackwardKernel& k : lower_backward(p, c))
              if (k.source.arch_specific)
                jobs.push_back({label + " " + k.role, std::move(k.source)});
          }
        }
  std::vector<std::string> failures;
  const std::vector<cuda::CompiledProgram> programs = compile_all(jobs, &failures);
  for (size_t i = 0; i < jobs.size(); ++i) {
    SCOPED_TRACE(jobs[i].label);
    ASSERT_EQ(failures[i], "");
    const std::string sass =
        testing::dump_sass(programs[i].cubin, "attention_" + std::to_string(i));
    if (sass.empty()) GTEST_SKIP() << "no cuobjdump to read the SASS with";
    const testing::DescriptorSources sources = testing::hgmma_descriptor_sources(sass);
    std::printf("  %-64s %3d HGMMA, %d with a descriptor from R2UR\n", jobs[i].label.c_str(),
                sources.hgmma, sources.from_thread_registers);
    EXPECT_GT(sources.hgmma, 0);
    if (jobs[i].label.find("(listed only)") == std::string::npos) {
      EXPECT_EQ(sources.from_thread_registers, 0);
    }
  }
}

// An older GPU takes the same kernel (mma.sync is sm_80).
TEST(AttentionCompile, CompilesForAmpere) {
  Problem p;
  p.seq_q = p.seq_k = 128;
  const cuda::CompiledProgram program = compile_for_arch(lower(p, Config{}), "sm_80");
  EXPECT_FALSE(program.kernels.empty());
}

}  // namespace
}  // namespace kjit::attention
