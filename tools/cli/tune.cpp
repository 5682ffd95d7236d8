// kjit tune WHAT [sizes...] | kjit tune --workload FILE — measure configs of the
// family's space on this machine's GPU(s) and store the fastest per GPU model.
//
//   --strategy model|exhaustive|random   which configs (default: the model's top 8)
//   --top K, --budget SECONDS, --force, --gpus all|0,1, --json, --quiet
//
// The measuring runs in child processes (`kjit __tune-worker --device N`, hidden):
// a candidate that faults or hangs costs itself, never the tune. Policy lives in
// tuner/ (tune.h, offline.h); this file parses options and prints.
#include <fmt/format.h>
#include <unistd.h>

#include <climits>
#include <iostream>
#include <memory>
#include <sstream>

#include "kjit/cache/key.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/runtime/tuning.h"
#include "kjit/support/error.h"
#include "kjit/support/files.h"
#include "kjit/tuner/family.h"
#include "kjit/tuner/offline.h"
#include "kjit/tuner/workload.h"
#include "tools/cli/command.h"
#include "tools/cli/kernel_options.h"
#include "tools/cli/progress.h"

namespace kjit::cli {

namespace {

struct TuneCommand {
  KernelCommandOptions kernel;
  std::string workload;
  std::string strategy = "model";
  int top = 8;
  double budget = 0;
  bool budget_given = false;
  bool top_given = false;
  bool force = false;
  std::string gpus = "0";
  bool quiet = false;
  double timeout = 60;
  uint64_t seed = 1;
  int rounds = 5, runs = 5;
};

std::vector<int> parse_gpus(const std::string& text) {
  const int count = cuda::device_count();
  std::vector<int> out;
  if (text == "all") {
    for (int i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    char* end = nullptr;
    const long value = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || value < 0)
      throw UserError("--gpus " + text + ": '" + item + "' is not a GPU index",
                      "write --gpus all, or indices such as --gpus 0,1");
    if (value >= count)
      throw UserError(
          fmt::format("--gpus {}: GPU {} does not exist; this machine has {} GPU(s) "
                      "(0 to {})",
                      text, value, count, count - 1));
    for (int seen : out)
      if (seen == value)
        throw UserError(fmt::format("--gpus {}: GPU {} is listed twice", text, value));
    out.push_back(static_cast<int>(value));
  }
  if (out.empty()) throw UserError("--gpus is empty", "write --gpus all or --gpus 0,1");
  return out;
}

std::string self_executable() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) throw UserError("cannot find the kjit executable (/proc/self/exe) to start workers");
  return std::string(path, static_cast<size_t>(n));
}

const tuner::Measured* find_trial(const tuner::TuneResult& r, const std::string& config) {
  for (const tuner::Measured& m : r.trials)
    if (m.config == config) return &m;
  return nullptr;
}

nlohmann::json result_json(const tuner::TuningProblem& problem, const tuner::TuneResult& r, int gpu,
                           const std::string& error) {
  nlohmann::json out = {{"family", problem.family()},
                        {"signature", problem.signature()},
                        {"spec", problem.spec()},
                        {"gpu", gpu}};
  if (!error.empty()) {
    out["error"] = error;
    return out;
  }
  std::map<std::string, double> predicted;
  for (const auto& [config, p] : r.ranking) predicted[config] = p.ms;
  nlohmann::json trials = nlohmann::json::array();
  std::vector<double> model, measured;
  for (const tuner::Measured& m : r.trials) {
    nlohmann::json t = {{"config", m.config}, {"predicted_ms", predicted[m.config]}};
    if (m.ok()) {
      t["median_ms"] = m.summary.median_ms;
      t["low_ms"] = m.summary.low_ms;
      t["high_ms"] = m.summary.high_ms;
      t["runs"] = m.summary.runs;
      if (m.summary.clock_mhz > 0) t["clock_mhz"] = m.summary.clock_mhz;
      t["stopped_early"] = m.stopped_early;
      if (m.resources.registers > 0) t["registers"] = m.resources.registers;
      model.push_back(predicted[m.config]);
      measured.push_back(m.summary.median_ms);
    } else {
      t["error"] = m.error;
    }
    trials.push_back(t);
  }
  const tuner::Measured* dflt = find_trial(r, r.default_config);
  // The times are the measured problem's: a packed attention batch's representative.
  std::unique_ptr<tuner::TuningProblem> holder;
  const tuner::Work work = tuner::measured_problem(problem, holder).work();
  out.update({{"gpu_model", r.gpu_model},
              {"config", r.config},
              {"median_ms", r.summary.median_ms},
              {"low_ms", r.summary.low_ms},
              {"high_ms", r.summary.high_ms},
              {"runs", r.summary.runs},
              {"at_peak_clock", r.at_peak_clock},
              {"finalists", r.finalists},
              {"flops", work.flops},
              {"bytes", work.bytes},
              {"tie_break", r.tie_break},
              {"default_config", r.default_config},
              {"default_ms", dflt && dflt->ok() ? dflt->summary.median_ms : 0.0},
              {"space", r.ranking.size()},
              {"pruned", r.pruned.size()},
              {"candidates", r.candidates},
              {"measured", r.measured},
              {"failed", r.failed},
              {"resumed", r.resumed},
              {"compile_s", r.compile_s},
              {"measure_s", r.measure_s},
              {"total_s", r.total_s},
              {"budget_exhausted", r.budget_exhausted},
              {"spearman_model_vs_measured", tuner::spearman(model, measured)},
              {"trials", trials}});
  return out;
}

void print_result(const tuner::TuningProblem& problem, const tuner::TuneResult& r, int gpu,
                  const std::string& error) {
  std::cout << fmt::format("{} {} (GPU {})\n", problem.family(), problem.signature(), gpu);
  if (!error.empty()) {
    std::cout << "  not tuned: " << error << "\n";
    return;
  }
  // Throughputs of the measured problem: a packed attention batch's representative.
  std::unique_ptr<tuner::TuningProblem> holder;
  const tuner::TuningProblem& measured = tuner::measured_problem(problem, holder);
  if (r.config.empty()) {
    std::cout << "  no config passed its check; nothing stored\n";
  } else {
    std::cout << fmt::format("  best     {}  {}  {}\n", r.config, r.summary.to_string(),
                             tuner::throughput(measured, r.summary.median_ms));
    const tuner::Measured* dflt = find_trial(r, r.default_config);
    if (dflt && dflt->ok() && r.default_config != r.config)
      std::cout << fmt::format("  default  {}  {:.4f} ms  {} ({:.2f}x the best's time)\n",
                               r.default_config, dflt->summary.median_ms,
                               tuner::throughput(measured, dflt->summary.median_ms),
                               dflt->summary.median_ms / r.summary.median_ms);
    else if (r.default_config == r.config)
      std::cout << "  default  the same config (the tuner's choice before this tune)\n";
  }
  std::cout << fmt::format(
      "  measured {} of {} configs in the space ({} failed, {} from earlier trials); compile "
      "{:.1f} s, measure {:.1f} s{}\n",
      r.measured, r.ranking.size(), r.failed, r.resumed, r.compile_s, r.measure_s,
      r.budget_exhausted ? "; the budget ran out" : "");
  for (const tuner::Measured& m : r.trials)
    if (!m.ok() && m.error != "not measured")
      std::cout << "  failed   " << m.config << ": " << m.error << "\n";
  if (!r.tie_break.empty() && r.tie_break.find("apart") == std::string::npos)
    std::cout << "  tie      " << r.tie_break << "\n";
}

void tune_command(const TuneCommand& c) {
  if (c.budget_given && !(c.budget > 0))
    throw UserError(fmt::format("--budget {} is not a positive number of seconds", c.budget));
  if (c.top < 1) throw UserError(fmt::format("--top {} must be at least 1", c.top));
  if (c.top_given && c.strategy == "exhaustive")
    throw UserError(fmt::format("--top {} with --strategy exhaustive: the exhaustive strategy "
                                "measures the whole space, --top counts the model's or random "
                                "strategy's configs",
                                c.top),
                    "drop --top, or use --strategy model (or random) --top K");
  tuner::TuneOptions options;
  options.strategy = tuner::parse_strategy(c.strategy);
  options.top = c.top;
  options.budget_s = c.budget;
  options.force = c.force;
  options.seed = c.seed;
  options.timer.rounds = c.rounds;
  options.timer.runs_per_round = c.runs;

  // The problems: one from WHAT and its options, or a workload file.
  std::vector<std::unique_ptr<tuner::TuningProblem>> owned;
  if (!c.workload.empty()) {
    if (!c.kernel.what.empty() || !c.kernel.file.empty())
      throw UserError("give WHAT or --workload FILE, not both");
    // Each problem of the file says its own sizes, dtypes and options: one given
    // here as well was ignored without a word.
    if (!c.kernel.given.empty()) {
      std::string names;
      for (const std::string& name : c.kernel.given) names += (names.empty() ? "" : ", ") + name;
      throw UserError(
          names + (c.kernel.given.size() > 1 ? " do" : " does") + " not apply with --workload",
          "each problem of the workload file gives its own options");
    }
    for (tuner::WorkloadEntry& e :
         tuner::parse_workload(read_regular_file(c.workload, 16 << 20, "workload"), c.workload)) {
      if (!e.same_at_lines.empty() && !c.quiet) {
        std::string lines;
        for (int line : e.same_at_lines)
          lines += (lines.empty() ? "" : ", ") + std::to_string(line);
        std::cerr << fmt::format(
            "kjit tune: the problem of line {} is listed again (line{} {}): "
            "tuned once\n",
            e.line, e.same_at_lines.size() > 1 ? "s" : "", lines);
      }
      owned.push_back(std::move(e.problem));
    }
  } else {
    owned.push_back(tuner::make_problem(problem_spec(resolved(c.kernel))));
  }
  std::vector<const tuner::TuningProblem*> problems;
  for (const auto& p : owned) problems.push_back(p.get());

  require_gpu("kjit tune");
  tuner::OfflineOptions offline;
  offline.tune = options;
  offline.gpus = parse_gpus(c.gpus);
  offline.check_timeout_s = c.timeout;
  const std::string self = self_executable();
  offline.worker_argv = [self](int device) {
    return std::vector<std::string>{self, "__tune-worker", "--device", std::to_string(device)};
  };
  std::shared_ptr<cache::Store> store = cache::Store::open_default();
  if (!store->enabled())
    throw UserError(
        "the store is disabled (" + store->disabled_reason() + "): tuning results would be lost",
        "point KJIT_CACHE_DIR at a writable directory");

  ProgressLine line(c.quiet || c.kernel.json);
  const tuner::OfflineResult result =
      tuner::tune_offline(problems, store, offline, [&](const tuner::OfflineProgress& p) {
        const tuner::TuneProgress& t = p.tune;
        std::string text =
            fmt::format("[{}/{} gpu{}] {} {}: compiled {} measured {} failed {}", p.problem + 1,
                        p.problems, p.gpu, t.phase, p.signature.substr(0, 48), t.compiled,
                        t.measured + t.resumed, t.failed);
        if (t.total > 0) text += fmt::format(" of {}", t.total);
        if (!t.best_config.empty()) text += fmt::format(" | best {:.4f} ms", t.best_ms);
        if (t.eta_s >= 0) text += fmt::format(" | ETA {:.0f} s", t.eta_s);
        line.show(text, t.phase == "done");
      });
  line.clear();

  int failures = 0;
  for (size_t i = 0; i < problems.size(); ++i)
    if (!result.errors[i].empty() || result.results[i].config.empty()) ++failures;
  if (c.kernel.json) {
    nlohmann::json out = {{"seconds", result.seconds},
                          {"gpus", offline.gpus},
                          {"worker_starts", result.worker_starts},
                          {"strategy", c.strategy},
                          {"problems", nlohmann::json::array()}};
    for (size_t i = 0; i < problems.size(); ++i)
      out["problems"].push_back(
          result_json(*problems[i], result.results[i], result.gpu_of[i], result.errors[i]));
    print_json(out);
  } else {
    for (size_t i = 0; i < problems.size(); ++i)
      print_result(*problems[i], result.results[i], result.gpu_of[i], result.errors[i]);
    std::cout << fmt::format("{} problem(s) on {} GPU(s) in {:.1f} s; results in {}\n",
                             problems.size(), offline.gpus.size(), result.seconds, store->path());
  }
  if (failures > 0) exit_code = 1;
}

void add_tune_command(CLI::App& app) {
  auto c = std::make_shared<TuneCommand>();
  c->kernel.verb = Verb::Tune;
  CLI::App* cmd = app.add_subcommand(
      "tune",
      "Measure configs of WHAT (or every problem of a workload file) on this machine's "
      "GPU(s) and store the fastest for this GPU model");
  add_kernel_options(cmd, c->kernel);
  cmd->add_option("--workload", c->workload,
                  "A JSON file of problem specs (see examples/workloads/) instead of WHAT");
  cmd->add_option("--strategy", c->strategy,
                  "model: the model's top K (default); exhaustive: the whole space; random: K "
                  "configs at random")
      ->check(CLI::IsMember({"model", "exhaustive", "random"}));
  cmd->add_option("--top", c->top, "Configs the model and random strategies measure (default 8)")
      ->each([c](const std::string&) { c->top_given = true; });
  cmd->add_option("--budget", c->budget,
                  "Seconds for the whole tune of one problem (default: none)")
      ->each([c](const std::string&) { c->budget_given = true; });
  cmd->add_flag("--force", c->force, "Measure again configs the store has trials for");
  cmd->add_option("--gpus", c->gpus, "GPUs to measure on: all, or indices such as 0,1 (default 0)");
  cmd->add_flag("--quiet", c->quiet, "No progress line on stderr");
  cmd->add_option("--timeout", c->timeout,
                  "Seconds a candidate's first run and check may take before it counts as hung "
                  "(default 60)")
      ->check(CLI::Validator(
          [](const std::string& text) {
            char* end = nullptr;
            const double seconds = std::strtod(text.c_str(), &end);
            // (NaN fails both comparisons: refused too.)
            return !text.empty() && *end == '\0' && seconds >= 1 && seconds <= 86400
                       ? std::string()
                       : "the timeout is a number of seconds in [1, 86400], got " + text;
          },
          "SECONDS"));
  // An unsigned 64-bit integer: every value is checked as such (check_option_values).
  cmd->add_option("--seed", c->seed, "Seed of the random strategy (default 1)");
  cmd->add_option("--rounds", c->rounds, "Interleaved timing rounds (default 5)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--runs", c->runs, "Timed runs of each config per round (default 5)")
      ->check(CLI::Range(1, 1000));
  cmd->callback([c] { tune_command(*c); });

  // The measuring process the tune starts (one per GPU); not for people.
  auto device = std::make_shared<int>(0);
  CLI::App* worker = app.add_subcommand("__tune-worker", "");
  worker->group("");
  worker->add_option("--device", *device, "GPU index")->required();
  worker->callback([device] { exit_code = serve_tuning_worker(*device); });
}

}  // namespace

KJIT_REGISTER_COMMAND(55, add_tune_command);

}  // namespace kjit::cli
