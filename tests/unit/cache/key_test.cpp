#include "kjit/cache/key.h"

#include <gtest/gtest.h>

namespace kjit::cache {
namespace {

std::string key(const std::string& source = "src", std::vector<std::string> options = {"-O3"},
                const std::string& arch = "sm_90", const std::string& nvrtc = "13.0",
                const std::string& generator = "kjit-gen-1",
                std::vector<std::string> environment = {}) {
  return binary_key(source, options, arch, nvrtc, generator, environment);
}

TEST(BinaryKey, Is32HexDigitsAndStable) {
  std::string k = key();
  EXPECT_EQ(k.size(), 32u);
  EXPECT_EQ(k.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(k, key());
  // Pinned: a change here orphans every cached binary on every machine. If the
  // recipe must change, bump kKeyFormat in cache/key.cpp and update this value.
  EXPECT_EQ(k, "7bbf4c3cafdc497dd2e85b1ffa57592a");
}

TEST(BinaryKey, EveryInputChangesIt) {
  std::string base = key();
  EXPECT_NE(key("src2"), base);
  EXPECT_NE(key("src", {"-O2"}), base);
  EXPECT_NE(key("src", {"-O3", "-lineinfo"}), base);
  EXPECT_NE(key("src", {"-O3"}, "sm_90a"), base);
  EXPECT_NE(key("src", {"-O3"}, "sm_90", "12.8"), base);
  EXPECT_NE(key("src", {"-O3"}, "sm_90", "13.0", "kjit-gen-2"), base);
  EXPECT_NE(key("src", {"-O3"}, "sm_90", "13.0", "kjit-gen-1", {"KJIT_LINEINFO=1"}), base);
}

TEST(BinaryKey, PartsCannotBleedIntoEachOther) {
  // The same characters split differently between fields give different keys.
  EXPECT_NE(key("src", {"a", "b"}), key("src", {"ab"}));
  EXPECT_NE(key("src", {"a"}, "sm_90", "13.0", "g", {}),
            key("src", {}, "sm_90", "13.0", "g", {"a"}));
  EXPECT_NE(key("ab", {}, "c"), key("a", {}, "bc"));
}

}  // namespace
}  // namespace kjit::cache
