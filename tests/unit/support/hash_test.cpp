#include "kjit/support/hash.h"

#include <gtest/gtest.h>

namespace kjit {
namespace {

TEST(Hash, IsStableAcrossRuns) {
  // A changed value here would invalidate every cache on disk: bump the
  // generator version instead of changing the hash.
  EXPECT_EQ(hex64(hash64("kjit")), hex64(hash64(std::string("kjit"))));
  EXPECT_EQ(hex64(hash64("")), "2d06800538d394c2");
}

TEST(Hash, KeyPartsAreLengthPrefixed) {
  EXPECT_NE(KeyHasher().add("ab").add("c").hex(), KeyHasher().add("a").add("bc").hex());
  EXPECT_EQ(KeyHasher().add("a").add(3).hex(), KeyHasher().add("a").add(3).hex());
  EXPECT_EQ(KeyHasher().hex().size(), 16u);
}

}  // namespace
}  // namespace kjit
