#include "kjit/support/key_values.h"

#include <gtest/gtest.h>

#include "kjit/support/error.h"

namespace kjit {
namespace {

using Pairs = std::vector<std::pair<std::string, std::string>>;

std::string message_of(const std::string& text) {
  try {
    split_key_values(text, "test config", "a hint");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(KeyValues, SplitsInOrderTrimsAndSkipsEmptyItems) {
  EXPECT_EQ(split_key_values("bm=128,bn=64", "c", ""), (Pairs{{"bm", "128"}, {"bn", "64"}}));
  EXPECT_EQ(split_key_values(" bm = 128 ,\tbn=64, ,", "c", ""),
            (Pairs{{"bm", "128"}, {"bn", "64"}}));
  EXPECT_EQ(split_key_values("", "c", ""), Pairs{});
  EXPECT_EQ(split_key_values(",,", "c", ""), Pairs{});
  EXPECT_EQ(split_key_values("mma=", "c", ""), (Pairs{{"mma", ""}}));  // the caller checks values
}

TEST(KeyValues, BadItemsAreUserErrorsNamingTheItem) {
  EXPECT_NE(message_of("bm=128,tile").find("test config item 'tile' is not key=value"),
            std::string::npos);
  EXPECT_NE(message_of("=3").find("item '=3' has no key"), std::string::npos);
  EXPECT_NE(message_of("bm=128,bm=64").find("key 'bm' is given twice"), std::string::npos);
  EXPECT_NE(message_of("bm=128, bm =64").find("key 'bm' is given twice"), std::string::npos);
  EXPECT_NE(message_of("tile").find("a hint"), std::string::npos);
}

}  // namespace
}  // namespace kjit
