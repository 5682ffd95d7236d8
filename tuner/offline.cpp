#include "kjit/tuner/offline.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "kjit/cache/key.h"
#include "kjit/support/error.h"

namespace kjit::tuner {

OfflineResult tune_offline(const std::vector<const TuningProblem*>& problems,
                           std::shared_ptr<cache::Store> store, const OfflineOptions& options,
                           const std::function<void(const OfflineProgress&)>& progress) {
  const auto started = std::chrono::steady_clock::now();
  OfflineResult out;
  out.results.resize(problems.size());
  out.gpu_of.assign(problems.size(), -1);
  out.errors.assign(problems.size(), "");
  if (options.gpus.empty()) throw UserError("no GPU to tune on");
  std::atomic<size_t> next{0};
  std::atomic<int> starts{0};
  std::mutex progress_mutex;
  // Compiling on every core from each GPU's thread at once would oversubscribe
  // the CPU; share the cores among the GPUs' threads.
  TuneOptions tune_options = options.tune;
  tune_options.check_timeout_s = options.check_timeout_s;  // hung trials: retried past it
  if (tune_options.compile_threads <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    tune_options.compile_threads =
        std::max(1, cores / static_cast<int>(std::min(options.gpus.size(), problems.size())));
  }
  auto serve = [&](int gpu) {
    const cuda::DeviceProperties device = cuda::device_properties(gpu);
    Chooser chooser(
        store, cache::gpu_model(device.name, device.cc_major, device.cc_minor, device.sm_count),
        device);
    WorkerOptions worker_options;
    worker_options.argv = options.worker_argv(gpu);
    worker_options.check_timeout_s = options.check_timeout_s;
    auto worker = std::make_shared<MeasureWorker>(worker_options);
    const Measurer measurer =
        [worker](const TuningProblem& problem, const std::vector<std::string>& configs,
                 const TimerOptions& timer, double leader_ms, const MeasureListener& listener) {
          return worker->measure(problem.spec(), configs, timer, leader_ms, listener);
        };
    for (size_t i = next++; i < problems.size(); i = next++) {
      out.gpu_of[i] = gpu;
      try {
        out.results[i] =
            tune(*problems[i], chooser, measurer, tune_options, [&](const TuneProgress& p) {
              if (!progress) return;
              std::lock_guard<std::mutex> lock(progress_mutex);
              progress(OfflineProgress{static_cast<int>(i), static_cast<int>(problems.size()), gpu,
                                       problems[i]->signature(), p});
            });
      } catch (const Error& e) {
        out.errors[i] = e.what();
      }
    }
    starts += worker->starts();
  };
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> failures(options.gpus.size());
  for (size_t g = 0; g < options.gpus.size(); ++g)
    threads.emplace_back([&, g] {
      try {
        serve(options.gpus[g]);
      } catch (...) {
        failures[g] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& failure : failures)
    if (failure) std::rethrow_exception(failure);
  out.worker_starts = starts;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

}  // namespace kjit::tuner
