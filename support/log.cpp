#include "kjit/support/log.h"

#include <atomic>
#include <cctype>
#include <cstdio>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

#include "kjit/support/options.h"

namespace kjit {

namespace {

struct LogState {
  // Recursive: the sink runs with it held (one line at a time, from any thread) and
  // may itself call kjit, which logs or sets the sink or the topics on the same
  // thread. A std::mutex deadlocked there.
  std::recursive_mutex mutex;
  std::set<std::string> topics;
  bool all = false;
  bool none = false;
  // Whether any topic may be enabled: log_enabled() reads it without the lock, so a
  // caller on a hot path (every matmul launch) pays one load when KJIT_LOG is unset.
  std::atomic<bool> any{false};
  std::function<void(const std::string&)> sink;
};

// The topics kjit writes lines for (log_line's callers), and the two words.
const std::set<std::string>& known_topics() {
  static const std::set<std::string> known = {"config", "tune", "launch", "passes", "all", "none"};
  return known;
}

void send(LogState& s, const std::string& text) {  // with s.mutex held
  // A copy: a sink that replaces itself (set_log_sink) finishes this call.
  if (const std::function<void(const std::string&)> sink = s.sink) {
    // One call a line, as kjit_c.h promises: a pass dump, or a message quoting a
    // compiler's log, is several (they came in one call).
    for (size_t start = 0;;) {
      const size_t end = text.find('\n', start);
      sink(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
      if (end == std::string::npos || end + 1 == text.size()) break;
      start = end + 1;
    }
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
}

// Sets the topics from "config, tune" (spaces and case ignored); a word that names no
// topic gets a warning (it enabled nothing, silently).
void parse_topics(LogState& state, const std::string& text) {
  state.topics.clear();
  state.all = false;
  state.none = false;
  std::vector<std::string> unknown;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    std::string topic;
    for (char c : item)
      if (!std::isspace(static_cast<unsigned char>(c)))
        topic += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (topic.empty()) continue;
    if (!known_topics().count(topic)) unknown.push_back(topic);
    if (topic == "all") state.all = true;
    if (topic == "none") state.none = true;
    state.topics.insert(topic);
  }
  state.any.store(!state.none && !state.topics.empty(), std::memory_order_relaxed);
  if (!unknown.empty() && !state.none) {
    std::string names;
    for (const std::string& name : unknown) names += (names.empty() ? "'" : ", '") + name + "'";
    send(state, "kjit: warning: no log topic " + names +
                    "; the topics are config, tune, launch and passes (or all, none)");
  }
}

LogState& state() {
  static LogState* s = [] {
    auto* created = new LogState;  // never destroyed: logging may run during exit
    parse_topics(*created, env("KJIT_LOG").value_or(""));
    return created;
  }();
  return *s;
}

}  // namespace

bool log_enabled(const char* topic) {
  LogState& s = state();
  if (!s.any.load(std::memory_order_relaxed)) return false;
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  return !s.none && (s.all || s.topics.count(topic) > 0);
}

void log_line(const char* topic, const std::string& message) {
  if (!log_enabled(topic)) return;
  LogState& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  send(s, std::string("kjit[") + topic + "]: " + message);
}

void log_warning(const std::string& message) {
  LogState& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  if (!s.none) send(s, "kjit: warning: " + message);
}

void log_text(const std::string& text) {
  LogState& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  send(s, !text.empty() && text.back() == '\n' ? text.substr(0, text.size() - 1) : text);
}

void set_log_topics(const std::string& topics) {
  LogState& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  parse_topics(s, topics);
}

void set_log_sink(std::function<void(const std::string&)> sink) {
  LogState& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  s.sink = std::move(sink);
}

}  // namespace kjit
