// Workload files: both forms, and errors that name the file, the problem and its line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kjit/support/error.h"
#include "kjit/support/options.h"
#include "kjit/tuner/workload.h"

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

// Other lists in the object, before "problems" or beside it, and a value
// "problems", do not shift the problems' lines (the notes list was counted as the
// problems, so every error named the wrong line). A key given twice is refused.
TEST(Workload, OtherListsInTheObjectDoNotShiftTheLines) {
  const std::string object = R"json({"notes": [1,
  2, 3],
  "tag": "problems",
  "problems": [
    {"family": "matmul", "m": 16, "n": 32, "k": 64},

    {"family": "matmul", "m": 16, "n": "x", "k": 64}],
  "more": [[4], [5]]
})json";
  const std::string e = error_of(object);
  EXPECT_NE(e.find("problem 2 (line 7)"), std::string::npos) << e;
  std::string fixed = object;
  fixed.replace(fixed.find("\"x\""), 3, "48");
  const std::vector<WorkloadEntry> w = parse_workload(fixed, "w.json");
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].line, 5);
  EXPECT_EQ(w[1].line, 7);
  // The key written with an escape is the same key.
  std::string escaped = object;
  escaped.replace(escaped.find("\"problems\": ["), 10, "\"\\u0070roblems\"");
  EXPECT_NE(error_of(escaped).find("problem 2 (line 7)"), std::string::npos) << error_of(escaped);
  EXPECT_NE(error_of("[{\"family\": \"matmul\", \"m\": 16, \"n\": 8, \"k\": 8, \"m\": 4096}]")
                .find("key \"m\" appears twice"),
            std::string::npos);
}

// A problem listed twice is tuned once: the same epilogue spelt with other
// spacing is the same problem (its signature), and was tuned (and counted) twice.
TEST(Workload, AProblemListedAgainIsOneEntry) {
  const std::string list = R"json([
  {"family": "matmul", "m": 64, "n": 64, "k": 64, "epilogue": "gelu(acc+bias)"},
  {"family": "matmul", "m": 128, "n": 64, "k": 64},
  {"family": "matmul", "m": 64, "n": 64, "k": 64, "epilogue": "gelu( acc + bias )"}
])json";
  const std::vector<WorkloadEntry> w = parse_workload(list, "w.json");
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].same_at_lines, std::vector<int>{4});
  EXPECT_TRUE(w[1].same_at_lines.empty());
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

// The workloads kjit ships (examples/workloads/) are valid.
TEST(Workload, ShippedWorkloadsParse) {
  const std::optional<std::string> tests = env("KJIT_TEST_SCRIPTS");  // tests/unit/tuner
  ASSERT_TRUE(tests.has_value()) << "ctest sets KJIT_TEST_SCRIPTS";
  const std::filesystem::path dir = std::filesystem::path(*tests) / "../../../examples/workloads";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    SCOPED_TRACE(entry.path().string());
    EXPECT_FALSE(parse_workload(text, entry.path().string()).empty());
    ++files;
  }
  EXPECT_GE(files, 4);
}

}  // namespace
}  // namespace kjit::tuner
