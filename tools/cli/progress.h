// A one-line progress display on stderr, redrawn in place; silent when stderr is
// not a terminal (or when asked), so logs and pipes get no control characters.
#pragma once

#include <chrono>
#include <string>

namespace kjit::cli {

class ProgressLine {
 public:
  // enabled = stderr is a terminal and not `quiet`.
  explicit ProgressLine(bool quiet);
  ~ProgressLine();
  bool enabled() const { return enabled_; }
  // Redraws the line (at most ten times a second unless `force`).
  void show(const std::string& text, bool force = false);
  // Clears the line, so that what follows starts on a clean line.
  void clear();

 private:
  bool enabled_ = false;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace kjit::cli
