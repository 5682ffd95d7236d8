#include "kjit/runtime/cuda/nvrtc.h"

#include <gtest/gtest.h>

#include <thread>

#include "kjit/runtime/cuda/device.h"
#include "kjit/support/error.h"

namespace kjit::cuda {
namespace {

constexpr const char* kAxpy =
    R"(extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

const std::vector<std::string>& p_options() {
  static const std::vector<std::string> options =
      nvrtc_compile(kAxpy, "axpy.cu", NvrtcOptions{}).options;
  return options;
}

TEST(Nvrtc, CompilesToCubinAndPtxWithStats) {
  CompiledProgram p = nvrtc_compile(kAxpy, "axpy.cu", NvrtcOptions{});
  ASSERT_FALSE(p.cubin.empty());
  // A cubin is an ELF file.
  EXPECT_EQ(std::string(p.cubin.data() + 1, 3), "ELF");
  EXPECT_NE(p.ptx.find(".entry axpy"), std::string::npos);
  EXPECT_NE(p.ptx.find(".target sm_90"), std::string::npos);
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_EQ(p.kernels[0].name, "axpy");
  EXPECT_GT(p.kernels[0].registers, 0);
  EXPECT_EQ(p.kernels[0].spill_store_bytes, 0);
  EXPECT_GT(p.compile_ms, 0);
}

TEST(Nvrtc, CompileErrorNamesTheLineAndShowsIt) {
  const std::string bad =
      "extern \"C\" __global__ void k(float* x) {\n"
      "  x[0] = not_declared;\n"
      "}\n";
  try {
    nvrtc_compile(bad, "bad.cu", NvrtcOptions{});
    FAIL() << "expected a CompileError";
  } catch (const CompileError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("bad.cu(2)"), std::string::npos) << what;
    EXPECT_NE(what.find("2 |   x[0] = not_declared;"), std::string::npos) << what;
    EXPECT_NE(e.log().find("not_declared"), std::string::npos);
    EXPECT_EQ(e.source(), bad);
    EXPECT_FALSE(e.options().empty());
  }
}

TEST(Nvrtc, UnknownArchListsSupportedOnes) {
  NvrtcOptions options;
  options.arch = "sm_99";
  try {
    nvrtc_compile(kAxpy, "axpy.cu", options);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("sm_99"), std::string::npos);
    EXPECT_NE(what.find("sm_90"), std::string::npos) << what;
  }
  EXPECT_THROW(validate_arch("compute_90"), UserError);
  EXPECT_NO_THROW(validate_arch("sm_90a"));
  // No 'a' target below sm_90 (NVRTC's own error named its --nv_arch flag).
  EXPECT_THROW(validate_arch("sm_80a"), UserError);
  EXPECT_THROW(validate_arch("sm_90f"), UserError);
  // A number past an int was std::stoi's out_of_range (an internal error).
  EXPECT_THROW(validate_arch("sm_99999999999999"), UserError);
  EXPECT_THROW(validate_arch("sm_9x"), UserError);
  EXPECT_EQ(arch_number("sm_90a"), 90);
  EXPECT_EQ(arch_number("sm_100f"), 100);
  EXPECT_EQ(arch_number("sm_99999"), std::nullopt);
  EXPECT_EQ(arch_number("sm_9"), std::nullopt);
  EXPECT_EQ(arch_number("sm_90x"), std::nullopt);
}

// Planning without a GPU: sm_86 and sm_89 were planned as an A100 with 163 KiB of
// shared memory per block (their limit is 99 KiB), 2048 threads and 32 blocks per SM
// (1536 and 16 or 24), under the A100's name; sm_95 as an H200.
TEST(Nvrtc, EachArchitectureIsPlannedWithItsOwnLimits) {
  EXPECT_EQ(planning_device_for_arch("sm_90a").name, "NVIDIA H200");
  EXPECT_EQ(planning_device_for_arch("sm_80").name, "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(planning_device_for_arch("sm_80").shared_per_block_optin, 166912);
  for (const char* arch : {"sm_86", "sm_89"}) {
    const DeviceProperties d = planning_device_for_arch(arch);
    EXPECT_EQ(d.arch(), arch);
    EXPECT_EQ(d.shared_per_block_optin, 101376) << arch;
    EXPECT_EQ(d.shared_per_sm, 102400) << arch;
    EXPECT_EQ(d.max_threads_per_sm, 1536) << arch;
    EXPECT_NE(d.name.find(arch), std::string::npos) << d.name;
    EXPECT_EQ(d.name.find("A100-SXM4"), std::string::npos) << d.name;
  }
  EXPECT_EQ(planning_device_for_arch("sm_87").shared_per_block_optin, 166912);
  EXPECT_EQ(planning_device_for_arch("sm_87").max_threads_per_sm, 1536);
  EXPECT_EQ(planning_device_for_arch("sm_86").max_blocks_per_sm, 16);
  EXPECT_EQ(planning_device_for_arch("sm_89").max_blocks_per_sm, 24);
  EXPECT_EQ(planning_device_for_arch("sm_80").max_threads_per_sm, 2048);
  for (const char* arch : {"sm_85", "sm_95", "sm_70", "sm_100"}) {
    try {
      planning_device_for_arch(arch);
      ADD_FAILURE() << arch << " was planned for";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(arch), std::string::npos) << e.what();
      EXPECT_NE(e.hint().find("sm_89"), std::string::npos) << e.hint();
    }
  }
}

TEST(Nvrtc, ArchSpecificTargetCompiles) {
  NvrtcOptions options;
  options.arch = "sm_90a";
  CompiledProgram p = nvrtc_compile(kAxpy, "axpy.cu", options);
  EXPECT_NE(p.ptx.find(".target sm_90a"), std::string::npos);
}

TEST(Nvrtc, EveryCompileReportsResourcesEvenWhenRepeated) {
  // Regression: with a driver present, NVRTC 12.9+ served repeated compiles from
  // the driver's compute cache without ptxas' report, so stats came back empty.
  for (int i = 0; i < 3; ++i) {
    CompiledProgram p = nvrtc_compile(kAxpy, "axpy.cu", NvrtcOptions{});
    ASSERT_EQ(p.kernels.size(), 1u) << "compile " << i << ", log:\n" << p.log;
  }
  if (nvrtc_has_driver_cache()) {
    EXPECT_NE(std::find(p_options().begin(), p_options().end(), "--no-cache"), p_options().end());
  }
}

TEST(Nvrtc, VersionAndArchs) {
  EXPECT_FALSE(nvrtc_version().empty());
  std::vector<int> archs = nvrtc_supported_archs();
  EXPECT_NE(std::find(archs.begin(), archs.end(), 90), archs.end());
}

TEST(Nvrtc, ParsesPtxasReport) {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'first' for 'sm_90'\n"
      "ptxas info    : Function properties for first\n"
      "ptxas         .     24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 49152 bytes smem, 400 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function 'second' for 'sm_90'\n"
      "ptxas info    : Function properties for second\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 10 registers, used 0 barriers, 368 bytes cmem[0]\n";
  std::vector<KernelStats> stats = parse_ptxas_stats(log);
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].name, "first");
  EXPECT_EQ(stats[0].registers, 168);
  EXPECT_EQ(stats[0].barriers, 1);
  EXPECT_EQ(stats[0].shared_bytes, 49152);
  EXPECT_EQ(stats[0].constant_bytes, 400);
  EXPECT_EQ(stats[0].stack_bytes, 24);
  EXPECT_EQ(stats[0].spill_store_bytes, 8);
  EXPECT_EQ(stats[0].spill_load_bytes, 12);
  EXPECT_EQ(stats[1].name, "second");
  EXPECT_EQ(stats[1].registers, 10);
  EXPECT_EQ(stats[1].shared_bytes, 0);
}

// An out-of-line device function (templates/math.cuh's slow sin/cos path) has
// "Function properties" of its own but is not a kernel: one kernel, its own stats.
TEST(Nvrtc, PtxasReportSkipsDeviceFunctions) {
  const std::string log =
      "ptxas info    : 24 bytes gmem\n"
      "ptxas info    : Compiling entry function 'kernel' for 'sm_90'\n"
      "ptxas info    : Function properties for kernel\n"
      "    40 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 32 registers, used 0 barriers, 40 bytes cumulative stack size\n"
      "ptxas info    : Compile time = 58.371 ms\n"
      "ptxas info    : Function properties for _ZN4kjit15sincos_f32_slowEf\n"
      "    16 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n";
  std::vector<KernelStats> stats = parse_ptxas_stats(log);
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].name, "kernel");
  EXPECT_EQ(stats[0].registers, 32);
  EXPECT_EQ(stats[0].stack_bytes, 40);
  EXPECT_EQ(stats[0].spill_store_bytes, 0);
}

TEST(Nvrtc, CompilesConcurrently) {
  std::vector<std::thread> threads;
  std::vector<size_t> sizes(4);
  for (size_t t = 0; t < sizes.size(); ++t)
    threads.emplace_back(
        [t, &sizes] { sizes[t] = nvrtc_compile(kAxpy, "axpy.cu", NvrtcOptions{}).cubin.size(); });
  for (std::thread& t : threads) t.join();
  for (size_t s : sizes) EXPECT_EQ(s, sizes[0]);
}

}  // namespace
}  // namespace kjit::cuda
