// Diagnostic logging by topic. KJIT_LOG (read once) lists the topics to print,
// comma separated, or "all":
//
//   KJIT_LOG=config   each kernel's config and where it came from (store, nearest
//                     tuned problem, model)
//   KJIT_LOG=tune     the tuner's candidates, measurements and choice
//
// Lines go to a sink: stderr unless an embedding application installs its own.
#pragma once

#include <functional>
#include <string>

namespace kjit {

// Whether KJIT_LOG (or set_log_topics) enables `topic`.
bool log_enabled(const char* topic);
// Writes "kjit[topic]: message" to the sink when the topic is enabled.
void log_line(const char* topic, const std::string& message);

// Replaces the topics KJIT_LOG gave ("config,tune", "all", "" for none).
void set_log_topics(const std::string& topics);
// Where log lines go; nullptr restores stderr. The sink may be called from any
// thread (kjit serializes the calls).
void set_log_sink(std::function<void(const std::string& line)> sink);

}  // namespace kjit
