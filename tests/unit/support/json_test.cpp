// parse_json: JSON from outside kjit, with a bound on nesting. Copying a value
// nested a million levels deep overflowed the stack (kjit tune --workload).
#include "kjit/support/json.h"

#include <gtest/gtest.h>

#include <string>

#include "kjit/support/error.h"

namespace kjit {
namespace {

std::string nested(int depth) {
  return std::string(static_cast<size_t>(depth), '[') +
         std::string(static_cast<size_t>(depth), ']');
}

TEST(Json, ValuesNestedDeeperThanTheLimitFailToParse) {
  // At the limit: parsed, and copied whole.
  const nlohmann::json deepest = parse_json(nested(kMaxJsonDepth));
  const nlohmann::json copy = deepest;
  EXPECT_EQ(copy, deepest);
  EXPECT_EQ(parse_json("{\"a\": [1, {\"b\": 2}]}").at("a").at(1).at("b"), 2);
  // Past it: a UserError naming what was read, or a discarded value.
  try {
    parse_json(nested(1000000), true, "workload w.json");
    ADD_FAILURE() << "a million levels parsed";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("workload w.json: values nest more than 64 levels"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_json(nested(kMaxJsonDepth + 1)), UserError);
  EXPECT_TRUE(parse_json(nested(1000000), false).is_discarded());
  EXPECT_TRUE(parse_json("{\"a\": " + nested(100) + "}", false).is_discarded());
  // Bad syntax as nlohmann::json::parse reports it.
  EXPECT_THROW(parse_json("[1,"), nlohmann::json::parse_error);
  EXPECT_TRUE(parse_json("[1,", false).is_discarded());
  // A number past a double: nlohmann's out_of_range, or discarded.
  EXPECT_THROW(parse_json("[1e999]"), nlohmann::json::exception);
  EXPECT_TRUE(parse_json("[1e999]", false).is_discarded());
}

// A key given twice in one object is refused (nlohmann kept the last silently: a
// workload's {"m": 16, "m": 4096} tuned M = 4096). The same key in two objects,
// or nested under itself, is fine.
TEST(Json, AKeyTwiceInOneObjectIsRefused) {
  try {
    parse_json("[{\"family\": \"matmul\", \"m\": 16, \"n\": 8, \"m\": 4096}]", true,
               "workload w.json");
    FAIL() << "a duplicate key was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("workload w.json: key \"m\" appears twice"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(parse_json("{\"a\": {\"b\": 1, \"b\": 2}}", false).is_discarded());
  EXPECT_EQ(parse_json("[{\"m\": 1}, {\"m\": 2}]").at(1).at("m"), 2);
  EXPECT_EQ(parse_json("{\"m\": {\"m\": {\"m\": 3}}, \"n\": 1}").at("m").at("m").at("m"), 3);
  EXPECT_EQ(parse_json("{\"a\": [{\"k\": 1}], \"k\": 2}").at("k"), 2);
}

}  // namespace
}  // namespace kjit
