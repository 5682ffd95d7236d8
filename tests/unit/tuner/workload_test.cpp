// Workload files: both forms, and errors that name the file, the problem and its line.
#include <gtest/gtest.h>

#include "support/error.h"
#include "tuner/workload.h"

namespace kjit::tuner {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_workload(text, "w.json");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Workload, ListAndObjectForms) {
  const std::string list = R"([
  {"family": "matmul", "m": 4096, "n": 4096, "k": 4096},
  {"family": "elementwise", "expr": "y = silu(g) * u", "dtype": "bf16", "sizes": {"n": 1048576}}
])";
  const std::vector<WorkloadEntry> a = parse_workload(list, "w.json");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].line, 2);
  EXPECT_EQ(a[1].line, 3);
  EXPECT_EQ(a[0].problem->family(), "matmul");
  EXPECT_EQ(a[1].problem->family(), "elementwise");
  const std::string object =
      "{\"name\": \"layer\",\n \"problems\": [\n\n  {\"family\": \"matmul\", \"m\": 16, \"n\": 32, "
      "\"k\": 64, \"layout\": \"nt\"}]}";
  const std::vector<WorkloadEntry> b = parse_workload(object, "w.json");
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].line, 4);
  EXPECT_NE(b[0].problem->signature().find("layout=nt"), std::string::npos);
}

TEST(Workload, ErrorsNameTheFileTheProblemAndTheLine) {
  EXPECT_NE(error_of("").find("w.json is empty"), std::string::npos);
  EXPECT_NE(error_of("  \n").find("empty"), std::string::npos);
  EXPECT_NE(error_of("[]").find("no problems"), std::string::npos);
  EXPECT_NE(error_of("{\"name\": 1}").find("\"problems\""), std::string::npos);
  EXPECT_NE(error_of("\n\n[{\"family\": \"matmul\",]").find("line 3"), std::string::npos);
  const std::string bad =
      "[\n {\"family\": \"matmul\", \"m\": 1, \"n\": 1, \"k\": 1},\n {\"family\": \"matmul\", "
      "\"m\": 1, \"n\": \"two\", \"k\": 1}\n]";
  const std::string e = error_of(bad);
  EXPECT_NE(e.find("problem 2 (line 3)"), std::string::npos) << e;
  EXPECT_NE(e.find("'n'"), std::string::npos) << e;
  EXPECT_NE(error_of("[{\"family\": \"conv2d\"}]").find("conv2d"), std::string::npos);
  EXPECT_NE(error_of("[\"matmul\"]").find("JSON object"), std::string::npos);
}

}  // namespace
}  // namespace kjit::tuner
