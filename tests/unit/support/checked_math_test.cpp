#include <gtest/gtest.h>

#include <limits>

#include "kjit/support/checked_math.h"
#include "kjit/support/error.h"

namespace kjit {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

std::string error_of(const std::vector<int64_t>& sizes, int64_t item_bytes) {
  try {
    checked_size(sizes, item_bytes, "the shape");
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CheckedMath, ProductsThatFitAreExact) {
  EXPECT_EQ(checked_mul(int64_t{1} << 31, int64_t{1} << 31), int64_t{1} << 62);
  EXPECT_EQ(checked_product({}), 1);
  EXPECT_EQ(checked_product({3, 0, kMax}), 0);
  EXPECT_EQ(checked_size({4, 5}, 4, "x"), 80);
  EXPECT_EQ(checked_add(kMax - 1, 1), kMax);
}

// The .npy header that passed the truncation check: 4611686018427387905 x 4
// wraps to 4 elements, 16 bytes of f32.
TEST(CheckedMath, OverflowIsAUserErrorNamingTheValues) {
  EXPECT_FALSE(checked_mul(int64_t{4611686018427387905}, 4));
  EXPECT_FALSE(checked_product({4294967296, 4294967296}));
  EXPECT_FALSE(checked_add(kMax, 1));
  std::string e = error_of({4611686018427387905, 4}, 1);
  EXPECT_NE(e.find("the shape (4611686018427387905, 4) is too large: its element count does not "
                   "fit in 64 bits"),
            std::string::npos)
      << e;
  // The element count fits; the bytes do not.
  e = error_of({int64_t{1} << 62}, 4);
  EXPECT_NE(e.find("its size in bytes (4 per element) does not fit"), std::string::npos) << e;
  e = error_of({-4}, 4);
  EXPECT_NE(e.find("the shape (-4) has a negative size, -4"), std::string::npos) << e;
}

}  // namespace
}  // namespace kjit
