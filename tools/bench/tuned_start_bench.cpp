// tuned_start_bench — what a tuned problem costs a process that runs it later:
// no NVRTC compile, no tuning, and the config lookup (tuner/choose.h) in a fresh
// process (the store's query) and in-process (a remembered choice).
//
//   build/release/tools/bench/tuned_start_bench [--m 2048 --n 2048 --k 2048] [--out FILE]
//
// The parent tunes the matmul into a fresh store (the model's top 2, in process),
// then re-executes itself with --child over the same store; the child builds a
// Runtime, times its first choose() and a million more, builds the Matmul, runs it
// once, and reports where the config and the kernel came from.
#include <fmt/format.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/stream.h"
#include "kjit/runtime/matmul.h"
#include "kjit/runtime/tuning.h"
#include "kjit/tuner/matmul_space.h"
#include "kjit/tuner/tune.h"

extern char** environ;

namespace kjit {
namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

matmul::Problem problem_of(int64_t m, int64_t n, int64_t k) {
  matmul::Problem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.aligned = tuner::packed_operands_aligned(p);
  return p;
}

int child(int64_t m, int64_t n, int64_t k) {
  const auto started = Clock::now();
  Runtime runtime;  // context, store open, device record
  const double runtime_us = us_since(started);
  const matmul::Problem p = problem_of(m, n, k);
  const tuner::MatmulTuning tuning(p);
  auto t0 = Clock::now();
  const tuner::Choice first = runtime.chooser().choose(tuning);
  const double first_us = us_since(t0);
  constexpr int kRepeats = 1000000;
  t0 = Clock::now();
  size_t sink = 0;
  for (int i = 0; i < kRepeats; ++i) sink += runtime.chooser().choose(tuning).config.size();
  const double repeat_us = us_since(t0) / kRepeats;
  t0 = Clock::now();
  matmul::Matmul mm(runtime, p);
  const size_t elems = static_cast<size_t>(std::max({m * k, k * n, m * n}));
  cuda::DeviceBuffer a(elems * 2), b(elems * 2), c(elems * 2);
  a.fill_bytes(0x3c);
  b.fill_bytes(0x3c);
  matmul::Tensors t;
  t.a = a.get();
  t.b = b.get();
  t.c = c.get();
  cuda::Stream stream;
  mm.launch(t, stream.get());
  stream.synchronize();
  const double first_launch_us = us_since(t0);
  const nlohmann::json out = {{"runtime_us", runtime_us},
                              {"first_choose_us", first_us},
                              {"repeat_choose_us", repeat_us},
                              {"config", first.config},
                              {"config_source", tuner::to_string(first.source)},
                              {"matmul_config_source", mm.config_source()},
                              {"kernel_origin", mm.kernel_origin()},
                              {"construct_and_first_launch_us", first_launch_us},
                              {"sink", sink % 2}};
  std::cout << out.dump() << std::endl;
  return 0;
}

int parent(int64_t m, int64_t n, int64_t k, const std::string& out_path) {
  namespace fs = std::filesystem;
  std::string dir = (fs::temp_directory_path() / "kjit-tuned-start-XXXXXX").string();
  if (!mkdtemp(dir.data())) throw std::runtime_error("mkdtemp failed");
  setenv("KJIT_CACHE_DIR", dir.c_str(), 1);
  unsetenv("KJIT_TUNE");
  nlohmann::json tuned;
  {
    Runtime runtime;
    const tuner::MatmulTuning tuning(problem_of(m, n, k));
    tuner::TuneOptions options;
    options.top = 2;
    const tuner::TuneResult r =
        tuner::tune(tuning, runtime.chooser(), in_process_measurer(runtime), options);
    tuned = {{"config", r.config}, {"median_ms", r.summary.median_ms}, {"tune_s", r.total_s}};
  }
  char self[PATH_MAX] = {};
  if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0)
    throw std::runtime_error("no /proc/self/exe");
  const std::string ms = std::to_string(m), ns = std::to_string(n), ks = std::to_string(k);
  std::vector<char*> argv = {self,
                             const_cast<char*>("--child"),
                             const_cast<char*>("--m"),
                             const_cast<char*>(ms.c_str()),
                             const_cast<char*>("--n"),
                             const_cast<char*>(ns.c_str()),
                             const_cast<char*>("--k"),
                             const_cast<char*>(ks.c_str()),
                             nullptr};
  int pipe_fd[2];
  if (pipe(pipe_fd) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fd[1], 1);
  pid_t pid;
  const auto spawned = Clock::now();
  if (posix_spawn(&pid, self, &actions, nullptr, argv.data(), environ) != 0)
    throw std::runtime_error("posix_spawn failed");
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fd[1]);
  std::string text;
  char buffer[4096];
  for (ssize_t got; (got = read(pipe_fd[0], buffer, sizeof buffer)) > 0;) text.append(buffer, got);
  int status = 0;
  waitpid(pid, &status, 0);
  const double process_ms = us_since(spawned) / 1e3;
  fs::remove_all(dir);
  const nlohmann::json child_report = nlohmann::json::parse(text);
  const bool ok = child_report["config_source"] == "store" &&
                  child_report["kernel_origin"] == "store" &&
                  child_report["first_choose_us"] < 1000 && child_report["repeat_choose_us"] < 5;
  const nlohmann::json doc = {{"problem", problem_of(m, n, k).to_string()},
                              {"tuned", tuned},
                              {"child", child_report},
                              {"child_process_ms", process_ms},
                              {"pass", ok}};
  if (!out_path.empty()) std::ofstream(out_path) << doc.dump(2) << "\n";
  std::cout << fmt::format(
      "tuned {} -> {} ({:.4f} ms, tune {:.1f} s)\n"
      "new process: config from the {} ({}), kernel from the {}; first lookup {:.1f} us, "
      "in-process lookup {:.3f} us, Runtime {:.1f} ms, Matmul + first launch {:.1f} ms, whole "
      "process {:.0f} ms -> {}\n",
      doc["problem"].get<std::string>(), tuned["config"].get<std::string>(),
      tuned["median_ms"].get<double>(), tuned["tune_s"].get<double>(),
      child_report["config_source"].get<std::string>(), child_report["config"].get<std::string>(),
      child_report["kernel_origin"].get<std::string>(),
      child_report["first_choose_us"].get<double>(), child_report["repeat_choose_us"].get<double>(),
      child_report["runtime_us"].get<double>() / 1e3,
      child_report["construct_and_first_launch_us"].get<double>() / 1e3, process_ms,
      ok ? "PASS (no compile, no tuning, lookup < 1 ms / < 5 us)" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace kjit

int main(int argc, char** argv) {
  int64_t m = 2048, n = 2048, k = 2048;
  bool is_child = false;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--child")
      is_child = true;
    else if (arg == "--m" && i + 1 < argc)
      m = std::atoll(argv[++i]);
    else if (arg == "--n" && i + 1 < argc)
      n = std::atoll(argv[++i]);
    else if (arg == "--k" && i + 1 < argc)
      k = std::atoll(argv[++i]);
    else if (arg == "--out" && i + 1 < argc)
      out = argv[++i];
    else {
      std::cerr << "usage: tuned_start_bench [--m M --n N --k K] [--out FILE]\n";
      return 2;
    }
  }
  try {
    return is_child ? kjit::child(m, n, k) : kjit::parent(m, n, k, out);
  } catch (const std::exception& e) {
    std::cerr << "tuned_start_bench: " << e.what() << "\n";
    return 1;
  }
}
