// kjit's diagnostics. Library code never writes to stdout or stderr itself: every
// line goes to one sink — stderr unless the embedding application installs its own
// (set_log_sink; kjit_set_log_callback in the C API).
//
// Warnings (a damaged cache moved aside, a store not trusted...) are always sent,
// unless the topics say "none". Other lines by topic; KJIT_LOG (read once) lists the
// topics, comma separated, or "all":
//
//   KJIT_LOG=config   each kernel's config and where it came from (store, nearest
//                     tuned problem, model)
//   KJIT_LOG=tune     the tuner's candidates, measurements and choice
//   KJIT_LOG=launch   every matmul launch's grid, block, cluster and split-K way
//
// KJIT_DUMP=passes sends the IR after each pass (text that was asked for).
#pragma once

#include <functional>
#include <string>

namespace kjit {

// Whether KJIT_LOG (or set_log_topics) enables `topic`.
bool log_enabled(const char* topic);
// Writes "kjit[topic]: message" to the sink when the topic is enabled.
void log_line(const char* topic, const std::string& message);
// Writes "kjit: warning: message" to the sink unless the topics are "none".
void log_warning(const std::string& message);
// Writes text a caller asked for (KJIT_DUMP) to the sink as it is.
void log_text(const std::string& text);

// Replaces the topics KJIT_LOG gave ("config,tune", "all", "" for warnings only,
// "none" for nothing).
void set_log_topics(const std::string& topics);
// Where log lines go; nullptr restores stderr. The sink may be called from any
// thread; kjit serializes the calls, holding its log lock, which the sink's own
// thread may take again: a sink may call kjit (log, set the topics, replace
// itself). set_log_sink returns once no call of the old sink is under way on
// another thread, so the caller may then free what the old sink used.
void set_log_sink(std::function<void(const std::string& line)> sink);

}  // namespace kjit
