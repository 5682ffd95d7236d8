// The Runtime with a SQLite store: a second Runtime (as a second process would)
// loads the cubin from the store instead of compiling it.
#include <gtest/gtest.h>

#include <filesystem>

#include "kjit/cache/store.h"
#include "kjit/runtime/runtime.h"
#include "tests/support/gpu_test.h"

namespace kjit {
namespace {

class RuntimeStore : public testing::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFailure()) return;
    directory_ = std::filesystem::temp_directory_path() /
                 ("kjit-runtime-store-" + std::to_string(::getpid()));
    std::filesystem::remove_all(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }
  std::shared_ptr<cache::Store> open() {
    return cache::Store::open((directory_ / "kjit.db").string());
  }
  std::filesystem::path directory_;
};

KernelSource demo() {
  KernelSource s;
  s.name = "kjit_demo_saxpy";
  s.source = "#include \"kjit/demo.cuh\"\n// runtime store test\n";
  s.family = "demo";
  return s;
}

TEST_F(RuntimeStore, SecondRuntimeLoadsFromTheStore) {
  std::string key;
  {
    Runtime first(RuntimeOptions{0, "", open()});
    auto kernel = first.compile(demo());
    EXPECT_EQ(kernel->origin(), KernelOrigin::Compiled);
    key = kernel->key();
    EXPECT_TRUE(first.store().find_binary(key).has_value());
  }
  Runtime second(RuntimeOptions{0, "", open()});
  auto kernel = second.compile(demo());
  EXPECT_EQ(kernel->origin(), KernelOrigin::DiskCache);
  EXPECT_EQ(kernel->key(), key);
  EXPECT_GT(kernel->stats().registers, 0);  // from the driver, since the log is not replayed
  EXPECT_FALSE(second.store().devices().empty());
}

TEST_F(RuntimeStore, DisabledStoreStillCompiles) {
  Runtime runtime(RuntimeOptions{0, "", cache::Store::disabled("test")});
  EXPECT_EQ(runtime.compile(demo())->origin(), KernelOrigin::Compiled);
}

}  // namespace
}  // namespace kjit
