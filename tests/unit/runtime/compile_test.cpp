#include "kjit/runtime/compile.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <stdexcept>

namespace kjit {
namespace {

KernelSource demo() {
  KernelSource s;
  s.name = "kjit_demo_saxpy";
  s.source = "#include \"kjit/demo.cuh\"\n";
  s.family = "demo";
  return s;
}

TEST(BinaryKey, ChangesWithEverythingThatChangesTheCubin) {
  KernelSource a = demo();
  std::string base = binary_key(a, "sm_90");
  EXPECT_EQ(base, binary_key(a, "sm_90"));  // deterministic
  EXPECT_NE(base, binary_key(a, "sm_90a"));
  KernelSource b = a;
  b.source += "// changed\n";
  EXPECT_NE(base, binary_key(b, "sm_90"));
  KernelSource c = a;
  c.options.push_back("-DKJIT_X=1");
  EXPECT_NE(base, binary_key(c, "sm_90"));
  // Problem/config text describe the source; they do not change the binary.
  KernelSource d = a;
  d.config = "different text";
  EXPECT_EQ(base, binary_key(d, "sm_90"));
}

// ptxas' report comes back from the store, where nothing vouches for it (the
// MAC covers the key and the cubin): a value of the wrong JSON type threw
// nlohmann's type_error on every hit of that binary ("kjit: internal error").
// A field of the wrong type reads as absent.
TEST(PtxasStats, ValuesOfTheWrongTypeReadAsAbsent) {
  const std::vector<cuda::KernelStats> stats = ptxas_stats_from_json(
      R"([{"name": 7, "registers": "32", "barriers": 1.5, "shared_bytes": [1],)"
      R"( "constant_bytes": 99999999999, "stack_bytes": null, "spill_store_bytes": 8},)"
      R"( "not an object", {"name": "k2", "registers": 40}])");
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].name, "");
  EXPECT_EQ(stats[0].registers, 0);
  EXPECT_EQ(stats[0].barriers, 0);
  EXPECT_EQ(stats[0].shared_bytes, 0);
  EXPECT_EQ(stats[0].constant_bytes, 0);
  EXPECT_EQ(stats[0].stack_bytes, 0);
  EXPECT_EQ(stats[0].spill_store_bytes, 8);
  EXPECT_EQ(stats[1].name, "k2");
  EXPECT_EQ(stats[1].registers, 40);
  EXPECT_TRUE(ptxas_stats_from_json(R"({"registers": "32"})").empty());
  EXPECT_TRUE(ptxas_stats_from_json("not json").empty());
}

TEST(CompileForArch, CompilesWithTemplates) {
  cuda::CompiledProgram p = compile_for_arch(demo(), "sm_90");
  EXPECT_FALSE(p.cubin.empty());
  ASSERT_EQ(p.kernels.size(), 1u) << "NVRTC log:\n" << p.log;
  EXPECT_EQ(p.kernels[0].name, "kjit_demo_saxpy");
}

}  // namespace
}  // namespace kjit

namespace kjit {
namespace {

// A fresh folder of its own, removed afterwards. (It was named by the process id
// and never removed: a later run that got the same id found its binary stored
// already, and the first compile was a store hit.)
class ScratchFolder {
 public:
  ScratchFolder() {
    std::string pattern = ::testing::TempDir() + "/kjit-compile-cached-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~ScratchFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(CompileCached, SecondCompileComesFromTheStore) {
  const ScratchFolder folder;
  std::unique_ptr<cache::Store> store = cache::Store::open(folder.path() + "/kjit.db");
  KernelSource source = demo();
  source.source += "// compile_cached test\n";
  CachedBinary first = compile_cached(source, "sm_90", *store);
  EXPECT_FALSE(first.store_hit);
  ASSERT_EQ(first.kernels.size(), 1u);
  CachedBinary second = compile_cached(source, "sm_90", *store);
  EXPECT_TRUE(second.store_hit);
  EXPECT_EQ(second.key, first.key);
  EXPECT_EQ(second.cubin, first.cubin);
  ASSERT_EQ(second.kernels.size(), 1u);
  EXPECT_EQ(second.kernels[0].registers, first.kernels[0].registers);
  // Another architecture is another binary.
  EXPECT_FALSE(compile_cached(source, "sm_90a", *store).store_hit);
}

TEST(CompileCached, DisabledStoreAlwaysCompiles) {
  std::unique_ptr<cache::Store> store = cache::Store::disabled("test");
  EXPECT_FALSE(compile_cached(demo(), "sm_90", *store).store_hit);
  EXPECT_FALSE(compile_cached(demo(), "sm_90", *store).store_hit);
}

}  // namespace
}  // namespace kjit
