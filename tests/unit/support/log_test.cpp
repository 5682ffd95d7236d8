// The log: one sink for every line the library writes (warnings, topics, dumps).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kjit/support/log.h"

namespace kjit {
namespace {

struct Captured {
  std::vector<std::string> lines;
  Captured() {
    set_log_sink([this](const std::string& line) { lines.push_back(line); });
  }
  ~Captured() {
    set_log_sink(nullptr);
    set_log_topics("");
  }
};

TEST(Log, WarningsReachTheSinkUnlessNone) {
  Captured c;
  set_log_topics("");
  log_warning("cache: moved aside");
  log_line("config", "not enabled");
  ASSERT_EQ(c.lines.size(), 1u);
  EXPECT_EQ(c.lines[0], "kjit: warning: cache: moved aside");
  set_log_topics("none");
  log_warning("silenced");
  log_text("silenced too? no: text asked for is always sent");
  EXPECT_EQ(c.lines.size(), 2u);
}

// kjit_c.h promises the callback a line a call: a pass dump came whole, in one.
TEST(Log, TextOfSeveralLinesComesALineACall) {
  Captured c;
  log_text("== after fold ==\n  _1 = sin(x)\n  return _1\n");
  EXPECT_EQ(c.lines,
            (std::vector<std::string>{"== after fold ==", "  _1 = sin(x)", "  return _1"}));
  c.lines.clear();
  log_warning("cache: two\nlines");
  EXPECT_EQ(c.lines, (std::vector<std::string>{"kjit: warning: cache: two", "lines"}));
  c.lines.clear();
  log_text("one line, and an empty one between\n\nlast");
  EXPECT_EQ(c.lines, (std::vector<std::string>{"one line, and an empty one between", "", "last"}));
}

TEST(Log, TopicsSelectLines) {
  Captured c;
  set_log_topics("config,tune");
  EXPECT_TRUE(log_enabled("config"));
  EXPECT_FALSE(log_enabled("passes"));
  log_line("tune", "measured");
  log_line("passes", "skipped");
  ASSERT_EQ(c.lines.size(), 1u);
  EXPECT_EQ(c.lines[0], "kjit[tune]: measured");
  set_log_topics("all");
  EXPECT_TRUE(log_enabled("anything"));
}

// "config, tune" enabled config only (" tune" is no topic), and a misspelt topic
// enabled nothing without a word.
TEST(Log, TopicsIgnoreSpacesAndCaseAndUnknownOnesWarn) {
  Captured c;
  set_log_topics(" Config , TUNE");
  EXPECT_TRUE(log_enabled("config"));
  EXPECT_TRUE(log_enabled("tune"));
  EXPECT_TRUE(c.lines.empty());
  set_log_topics("conifg,tune");
  EXPECT_TRUE(log_enabled("tune"));
  ASSERT_EQ(c.lines.size(), 1u);
  EXPECT_NE(
      c.lines[0].find("no log topic 'conifg'; the topics are config, tune, launch and passes"),
      std::string::npos)
      << c.lines[0];
}

// A sink that calls kjit again on its own thread (logs, sets the topics, replaces
// itself) deadlocked on the log's lock.
TEST(Log, TheSinkMayCallKjit) {
  std::vector<std::string> lines;
  int calls = 0;
  set_log_sink([&](const std::string& line) {
    lines.push_back(line);
    if (++calls == 1) {
      set_log_topics("config");
      log_line("config", "from the sink");
      set_log_sink([&](const std::string& later) { lines.push_back("second: " + later); });
      lines.push_back("the first sink ran on");  // replaced, it finishes its call
    }
  });
  log_warning("first");
  log_warning("after");
  set_log_sink(nullptr);
  set_log_topics("");
  EXPECT_EQ(lines,
            (std::vector<std::string>{"kjit: warning: first", "kjit[config]: from the sink",
                                      "the first sink ran on", "second: kjit: warning: after"}));
}

}  // namespace
}  // namespace kjit
