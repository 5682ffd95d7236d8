#include "kjit/tuner/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "kjit/support/error.h"
#include "kjit/support/json.h"

extern char** environ;

namespace kjit::tuner {

namespace {

nlohmann::json to_json(const KernelResources& r) {
  return {{"threads", r.threads}, {"registers", r.registers}, {"shared_bytes", r.shared_bytes}};
}

KernelResources resources_from_json(const nlohmann::json& j) {
  KernelResources r;
  r.threads = j.value("threads", 0);
  r.registers = j.value("registers", 0);
  r.shared_bytes = j.value("shared_bytes", 0);
  r.estimated = false;
  return r;
}

nlohmann::json event_json(const MeasureEvent& e) {
  nlohmann::json out = {{"event", e.phase}, {"config", e.config}};
  if (e.result) {
    const Measured& m = *e.result;
    if (!m.error.empty()) out["error"] = m.error;
    out["check_error"] = m.check_error;
    out["resources"] = to_json(m.resources);
    if (m.summary.runs > 0) {
      out["median_ms"] = m.summary.median_ms;
      out["low_ms"] = m.summary.low_ms;
      out["high_ms"] = m.summary.high_ms;
      out["min_ms"] = m.summary.min_ms;
      out["runs"] = m.summary.runs;
      if (m.summary.clock_mhz > 0) out["clock_mhz"] = m.summary.clock_mhz;
      out["stopped_early"] = m.stopped_early;
    }
  }
  return out;
}

void write_line(std::ostream& out, const nlohmann::json& j) {
  out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  out.flush();
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  return "ended";
}

}  // namespace

nlohmann::json to_json(const TimerOptions& o) {
  return {{"warmup", o.warmup},     {"rounds", o.rounds},     {"runs_per_round", o.runs_per_round},
          {"flush_l2", o.flush_l2}, {"hopeless", o.hopeless}, {"at_peak_clock", o.at_peak_clock}};
}

TimerOptions timer_options_from_json(const nlohmann::json& j) {
  TimerOptions o;
  o.warmup = j.value("warmup", o.warmup);
  o.rounds = j.value("rounds", o.rounds);
  o.runs_per_round = j.value("runs_per_round", o.runs_per_round);
  o.flush_l2 = j.value("flush_l2", o.flush_l2);
  o.hopeless = j.value("hopeless", o.hopeless);
  o.at_peak_clock = j.value("at_peak_clock", o.at_peak_clock);
  return o;
}

// ---- the parent's side ---------------------------------------------------------

MeasureWorker::MeasureWorker(WorkerOptions options) : options_(std::move(options)) {
  if (options_.argv.empty()) throw InternalError("a measuring worker needs a command line");
  // A timeout that is not a positive number would count every candidate as hung (or,
  // NaN, wait forever): refused here, whatever the caller checked.
  for (const auto& [name, seconds] :
       {std::pair<const char*, double>{"check", options_.check_timeout_s},
        {"timing", options_.timing_timeout_s}})
    if (!(seconds > 0 && seconds <= 86400))
      throw UserError(fmt::format("the measuring worker's {} timeout is {} s", name, seconds),
                      "give a number of seconds in (0, 86400]");
}

namespace {

// Why a worker's event cannot be read ("" when it can): its fields' types, and a
// timing that is a time (a positive, finite median, a finite interval, a run count
// that is a count).
std::string malformed_event(const nlohmann::json& e) {
  for (const char* key : {"event", "config", "error", "message"})
    if (e.contains(key) && !e[key].is_string()) return fmt::format("'{}' is not a string", key);
  for (const char* key : {"median_ms", "low_ms", "high_ms", "min_ms", "clock_mhz"})
    if (e.contains(key) && !e[key].is_number()) return fmt::format("'{}' is not a number", key);
  // An infinite check error (NaN or an unwritten element in the output) travels
  // as null: JSON has no infinity.
  if (e.contains("check_error") && !e["check_error"].is_number() && !e["check_error"].is_null())
    return "'check_error' is not a number";
  if (e.contains("runs") && !e["runs"].is_number_integer()) return "'runs' is not an integer";
  if (e.contains("stopped_early") && !e["stopped_early"].is_boolean())
    return "'stopped_early' is not true or false";
  if (e.contains("resources")) {
    if (!e["resources"].is_object()) return "'resources' is not an object";
    for (const char* key : {"threads", "registers", "shared_bytes"})
      if (e["resources"].contains(key) && !e["resources"][key].is_number_integer())
        return fmt::format("the resources' '{}' is not an integer", key);
  }
  if (e.value("event", "") == "timed") {
    const double median = e.value("median_ms", 0.0), low = e.value("low_ms", 0.0),
                 high = e.value("high_ms", 0.0);
    const int64_t runs = e.value("runs", int64_t{0});
    if (!(std::isfinite(median) && median > 0 && std::isfinite(low) && std::isfinite(high) &&
          low <= high))
      return fmt::format("a time of {} ms in [{}, {}]", median, low, high);
    if (runs < 1 || runs > 1000000) return fmt::format("{} runs", runs);
  }
  return "";
}

}  // namespace

MeasureWorker::~MeasureWorker() {
  if (pid_ > 0) stop(false);
}

void MeasureWorker::start() {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0)
    throw Error(ErrorKind::Internal, std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  std::vector<char*> argv;
  for (std::string& a : options_.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  if (rc != 0) {
    close(in[1]);
    close(out[0]);
    throw UserError("cannot start the measuring process " + options_.argv[0] + ": " +
                    std::strerror(rc));
  }
  pid_ = pid;
  to_child_ = in[1];
  from_child_ = out[0];
  buffer_.clear();
  ++starts_;
}

std::string MeasureWorker::stop(bool kill_first) {
  if (pid_ <= 0) return "not running";
  if (to_child_ >= 0) close(to_child_);
  to_child_ = -1;
  if (kill_first) ::kill(pid_, SIGKILL);
  int status = 0;
  // A worker told to stop gets a few seconds to end on its own.
  for (int i = 0; !kill_first && i < 100; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      break;
    }
    usleep(50000);
  }
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
  }
  pid_ = -1;
  if (from_child_ >= 0) close(from_child_);
  from_child_ = -1;
  return describe_status(status);
}

bool MeasureWorker::read_line(std::string& line, double timeout_s, bool* timed_out) {
  *timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    const size_t newline = buffer_.find('\n');
    if (newline != std::string::npos) {
      line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      return true;
    }
    const double left =
        std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      *timed_out = true;
      return false;
    }
    pollfd p{from_child_, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min(left * 1000, 1e9)) + 1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char chunk[65536];
    const ssize_t n = read(from_child_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // the worker ended
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

std::vector<Measured> MeasureWorker::measure(const nlohmann::json& spec,
                                             const std::vector<std::string>& configs,
                                             const TimerOptions& timer, double leader_ms,
                                             const MeasureListener& listener) {
  std::map<std::string, Measured> results;
  std::set<std::string> failed;
  bool timing_died_once = false;
  int fruitless = 0;  // worker starts in a row that gave no verdict
  while (true) {
    std::vector<std::string> left;
    for (const std::string& c : configs)
      if (!failed.count(c)) left.push_back(c);
    if (left.empty()) break;
    if (pid_ <= 0) start();
    const nlohmann::json job = {
        {"spec", spec}, {"configs", left}, {"timer", to_json(timer)}, {"leader_ms", leader_ms}};
    const std::string text =
        job.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (write(to_child_, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      const std::string why = stop(true);
      throw UserError("the measuring process " + options_.argv[0] + " ended before its job (" +
                      why + ")");
    }
    std::string checking;  // the config in its check, if any
    size_t verdicts = 0;   // configs checked or failed in this job
    bool done = false;
    std::string line;
    // The timeout runs from the last event, not the last line: a worker that
    // prints a stray line a second (a driver warning) while its kernel hangs was
    // never stopped.
    auto last_event = std::chrono::steady_clock::now();
    while (!done) {
      bool timed_out = false;
      // Every config has its verdict: the timing rounds run.
      const bool timing = verdicts == left.size();
      const double timeout = timing ? options_.timing_timeout_s : options_.check_timeout_s;
      const double left_s =
          timeout -
          std::chrono::duration<double>(std::chrono::steady_clock::now() - last_event).count();
      if (left_s <= 0 || !read_line(line, left_s, &timed_out)) {
        if (left_s <= 0) timed_out = true;
        const std::string why =
            timed_out ? fmt::format("no answer for {:.0f} s", timeout) : std::string();
        const std::string ended = stop(true);
        if (!checking.empty()) {
          Measured& m = results[checking];
          m.config = checking;
          if (m.error.empty())
            m.error = timed_out ? hung_error(timeout)
                                : "the measuring process " + ended + " while checking it";
          else
            m.error += " (the measuring process " + ended + "; a fresh one measures the rest)";
          failed.insert(checking);
          if (listener) listener(MeasureEvent{"failed", checking, &m});
          break;  // start again with what is left
        }
        if (!timing) {  // it ended after a fault it reported: start again
          fruitless = verdicts == 0 ? fruitless + 1 : 0;
          if (fruitless >= 2)
            throw UserError("the measuring process " + options_.argv[0] +
                            " ends before measuring anything (" + ended + ")");
          break;
        }
        if (!timing_died_once) {
          timing_died_once = true;  // once more, in a fresh process
          break;
        }
        const std::string reason =
            timed_out ? why + " while timing" : "the measuring process " + ended + " while timing";
        for (const std::string& c : left) {
          if (failed.count(c)) continue;
          Measured& m = results[c];
          m.config = c;
          m.error = reason;
          failed.insert(c);
        }
        break;
      }
      const nlohmann::json event = parse_json(line, /*allow_exceptions=*/false);
      if (!event.is_object() || !event.contains("event")) continue;  // stray output
      last_event = std::chrono::steady_clock::now();
      // An event of the wrong shape is the worker's fault, reported as such (the
      // JSON library's type error escaped as an internal error and ended the run).
      const std::string why_malformed = malformed_event(event);
      if (!why_malformed.empty()) {
        stop(true);
        throw UserError(
            fmt::format("the measuring process {} sent an event kjit cannot read: {} "
                        "({})",
                        options_.argv[0], why_malformed, line.substr(0, 200)));
      }
      const std::string kind = event.value("event", "");
      const std::string config = event.value("config", "");
      if (kind == "error") {
        stop(false);
        throw UserError("the measuring process could not run the job: " +
                        event.value("message", std::string("(no message)")));
      }
      if (kind == "done") {
        done = true;
        break;
      }
      if (kind == "checking") {
        checking = config;
        if (listener) listener(MeasureEvent{kind, config, nullptr});
        continue;
      }
      Measured& m = results[config];
      m.config = config;
      if (event.contains("error")) m.error = event["error"].get<std::string>();
      m.check_error = !event.contains("check_error")   ? 0.0
                      : event["check_error"].is_null() ? std::numeric_limits<double>::infinity()
                                                       : event["check_error"].get<double>();
      if (event.contains("resources")) m.resources = resources_from_json(event["resources"]);
      if (kind == "checked" || kind == "failed") {
        checking.clear();
        ++verdicts;
        if (kind == "failed") failed.insert(config);
      }
      if (kind == "timed") {
        m.summary.median_ms = event.value("median_ms", 0.0);
        m.summary.low_ms = event.value("low_ms", 0.0);
        m.summary.high_ms = event.value("high_ms", 0.0);
        m.summary.min_ms = event.value("min_ms", 0.0);
        m.summary.runs = event.value("runs", int64_t{0});
        m.summary.clock_mhz = event.value("clock_mhz", 0.0);
        m.stopped_early = event.value("stopped_early", false);
      }
      if (listener) listener(MeasureEvent{kind, config, &m});
    }
    if (done) break;
  }
  std::vector<Measured> out;
  for (const std::string& c : configs) {
    Measured m = results.count(c) ? results[c] : Measured{};
    m.config = c;
    if (m.error.empty() && m.summary.runs == 0) m.error = kNotMeasured;
    out.push_back(m);
  }
  return out;
}

// ---- the worker's side ---------------------------------------------------------

int serve_measurements(const HarnessFactory& make_harness, const cuda::DeviceProperties& device,
                       std::istream& in, std::ostream& out) {
  // Jobs of one tune share their problem: its harness (inputs, the reference) is
  // built once and kept while the spec stays the same.
  std::unique_ptr<Harness> harness;
  nlohmann::json harness_spec;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    nlohmann::json job;
    try {
      job = parse_json(line);
      if (!harness || job.at("spec") != harness_spec) {
        harness.reset();
        harness = make_harness(job.at("spec"));
        harness_spec = job.at("spec");
      }
    } catch (const std::exception& e) {
      write_line(out, {{"event", "error"}, {"message", e.what()}});
      return 2;
    }
    std::vector<std::string> configs;
    for (const nlohmann::json& c : job.at("configs")) configs.push_back(c.get<std::string>());
    try {
      measure(*harness, configs, device,
              timer_options_from_json(job.value("timer", nlohmann::json::object())),
              job.value("leader_ms", 0.0),
              [&](const MeasureEvent& e) { write_line(out, event_json(e)); });
    } catch (const CudaError&) {
      return 3;  // the context is lost; "failed" was written for the config
    }
    write_line(out, {{"event", "done"}});
  }
  return 0;
}

}  // namespace kjit::tuner
