#include "kjit/tuner/tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "kjit/runtime/compile.h"
#include "kjit/support/error.h"
#include "kjit/support/log.h"

namespace kjit::tuner {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int split_count(const std::string& config) {
  static const std::regex splitk(R"((^|,)splitk=(\d+))");
  std::smatch m;
  return std::regex_search(config, m, splitk) ? std::stoi(m[2]) : 1;
}

cache::TrialRecord trial_record(const std::string& gpu_model, const std::string& signature,
                                const Measured& m) {
  cache::TrialRecord t;
  t.gpu_model = gpu_model;
  t.problem = signature;
  t.config = m.config;
  t.tuner_version = kTunerVersion;
  t.error = m.error;
  if (m.ok()) {
    t.measured.median_ms = m.summary.median_ms;
    t.measured.spread = m.summary.spread();
    t.measured.runs = m.summary.runs;
  }
  return t;
}

Measured from_trial(const cache::TrialRecord& t) {
  Measured m;
  m.config = t.config;
  m.error = t.error;
  if (t.error.empty() && t.measured.runs > 0)
    m.summary = from_stored(t.measured.median_ms, t.measured.spread, t.measured.runs);
  return m;
}

// Compiles every kernel of `configs` into the store on `threads` threads; returns
// the error of each config that does not compile or does not fit, by config.
std::map<std::string, std::string> compile_all(const TuningProblem& problem,
                                               const std::vector<std::string>& configs,
                                               const std::string& arch, cache::Store& store,
                                               const cuda::DeviceProperties& device, int threads,
                                               const std::function<void(int)>& compiled) {
  struct Job {
    KernelSource source;
    std::vector<std::string> configs;  // configs that run this kernel
    bool main = false;
  };
  std::vector<Job> jobs;
  std::map<std::string, size_t> by_name;
  std::map<std::string, std::string> errors;
  std::map<std::string, int> pending;  // kernels left per config
  for (const std::string& config : configs) {
    std::vector<KernelSource> sources;
    try {
      sources = problem.sources(config);
    } catch (const Error& e) {
      errors[config] = e.what();
      continue;
    }
    for (size_t i = 0; i < sources.size(); ++i) {
      const std::string key = sources[i].name + "\n" + sources[i].source;
      auto it = by_name.find(key);
      if (it == by_name.end()) {
        it = by_name.emplace(key, jobs.size()).first;
        jobs.push_back({sources[i], {}, i == 0});
      }
      jobs[it->second].configs.push_back(config);
      ++pending[config];
    }
  }
  std::mutex mutex;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      std::string error;
      try {
        const CachedBinary binary = compile_cached(jobs[i].source, arch, store);
        for (const cuda::KernelStats& k : binary.kernels) {
          if (k.name != jobs[i].source.name) continue;
          if (k.spill_store_bytes > 0 || k.spill_load_bytes > 0)
            error = fmt::format("{} spills {} bytes to local memory ({} registers)", k.name,
                                k.spill_store_bytes, k.registers);
          const int64_t registers = int64_t{k.registers} * jobs[i].source.block_threads;
          if (device.registers_per_block > 0 && registers > device.registers_per_block)
            error = fmt::format("{} needs {} registers x {} threads = {}; {} allows {} per block",
                                k.name, k.registers, jobs[i].source.block_threads, registers,
                                device.name, device.registers_per_block);
        }
      } catch (const Error& e) {
        error = e.what();
      }
      std::lock_guard<std::mutex> lock(mutex);
      for (const std::string& config : jobs[i].configs) {
        if (!error.empty() && !errors.count(config)) errors[config] = error;
        if (--pending[config] == 0 && compiled) compiled(1);
      }
    }
  };
  const int n = std::max(1, std::min<int>(threads, static_cast<int>(jobs.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return errors;
}

// The trials that passed and ran every round, fastest median first.
std::vector<const Measured*> fastest_first(const std::vector<Measured>& trials) {
  std::vector<const Measured*> passed;
  for (const Measured& m : trials)
    if (m.ok() && !m.stopped_early) passed.push_back(&m);
  std::sort(passed.begin(), passed.end(), [](const Measured* a, const Measured* b) {
    return a->summary.median_ms < b->summary.median_ms;
  });
  return passed;
}

// The trials the winner is picked from: the finalists' where the finals ran, every
// trial otherwise. The finals time their configs side by side; a config left out
// was measured more than 2% behind in a job of its own, at another clock, and its
// time there must not overturn them. (On an H100, 16384 x 8192 x 1024: the finals'
// times of ping-pong 128 x 128 came out behind a non-finalist's time of an earlier
// job at a lower clock, whose wide interval tied eight configs, and the model's
// prior then picked a config that no final had timed; it ran 0.96x cuBLASLt, a
// finalist 1.03x: docs/perf/2026-12-07-h100-finals-share-one-clock.md.) A
// finalist that failed in the finals drops out; where all did, every trial competes.
std::vector<Measured> finals_or_all(const TuneResult& result) {
  std::vector<Measured> finals;
  for (const Measured& m : result.trials)
    if (m.ok() && std::find(result.finalists.begin(), result.finalists.end(), m.config) !=
                      result.finalists.end())
      finals.push_back(m);
  return finals.empty() ? result.trials : finals;
}

}  // namespace

const char* to_string(Strategy strategy) {
  switch (strategy) {
    case Strategy::Model:
      return "model";
    case Strategy::Exhaustive:
      return "exhaustive";
    case Strategy::Random:
      return "random";
  }
  return "?";
}

Strategy parse_strategy(const std::string& text) {
  for (Strategy s : {Strategy::Model, Strategy::Exhaustive, Strategy::Random})
    if (text == to_string(s)) return s;
  throw UserError("unknown tuning strategy '" + text + "'",
                  "use model (the model's top k), exhaustive (the whole space) or random (k "
                  "configs at random)");
}

const Measured* pick_winner(const std::vector<Measured>& trials, const TuningProblem& problem,
                            const cuda::DeviceProperties& device, std::string* tie_break,
                            const std::string& incumbent) {
  const Measured* fastest = nullptr;
  for (const Measured& m : trials)
    if (m.ok() && !m.stopped_early &&
        (!fastest || m.summary.median_ms < fastest->summary.median_ms))
      fastest = &m;
  if (!fastest) return nullptr;
  // Tied: the intervals overlap and the median lies inside the fastest's interval. (A
  // config with bimodal times has a wide interval that overlaps the fastest's while
  // its median is well behind: on the H200 the 128 x 256 persistent tile at
  // 32000 x 4096 x 768, [0.308, 0.350] ms around a median of 0.350 against the
  // fastest's 0.330, won the tie-break on its prediction.)
  std::vector<const Measured*> tied;
  for (const Measured& m : trials)
    if (m.ok() && !m.stopped_early && overlaps(m.summary, fastest->summary) &&
        m.summary.median_ms <= fastest->summary.high_ms)
      tied.push_back(&m);
  if (tied.size() == 1) {
    if (tie_break) *tie_break = "fastest median, its interval apart from every other";
    return fastest;
  }
  // Deterministic among the statistically tied: the incumbent (the default) first,
  // then no split-K (no workspace, no waiting on other blocks), then the model's
  // prior prediction, then the config text.
  const Efficiencies priors;
  auto rank = [&](const Measured* m) {
    double predicted = 0;
    try {
      predicted = problem.predict(m->config, device, priors).ms;
    } catch (const Error&) {
      predicted = 1e30;
    }
    return std::make_tuple(incumbent.empty() || m->config != incumbent, split_count(m->config) > 1,
                           predicted, m->config);
  };
  const Measured* best = *std::min_element(tied.begin(), tied.end(),
                                           [&](auto* a, auto* b) { return rank(a) < rank(b); });
  if (tie_break)
    *tie_break = fmt::format(
        "{} configs within the fastest's 95% interval ({}: {}); picked by the rule: the default, "
        "then no split-K, then the model's prior prediction, then the config text",
        tied.size(), fastest->config, fastest->summary.to_string());
  return best;
}

TuneResult tune(const TuningProblem& problem, Chooser& chooser, const Measurer& measurer,
                const TuneOptions& options, const ProgressListener& progress) {
  if (std::unique_ptr<TuningProblem> as = problem.tuned_as())
    return tune(*as, chooser, measurer, options, progress);
  const auto started = std::chrono::steady_clock::now();
  const cuda::DeviceProperties& device = chooser.device();
  cache::Store& store = chooser.store();
  TuneResult result;
  result.family = problem.family();
  result.signature = problem.signature();
  result.gpu_model = chooser.gpu_model();
  result.default_config = chooser.choose(problem).config;

  const Space space = problem.space(device);
  result.pruned = space.pruned;
  result.ranking = chooser.rank(problem);
  if (result.ranking.empty()) chooser.choose(problem);  // throws: nothing runs
  // A tune keeps the board at its power cap, where the SM clock moves from one
  // moment to the next; a compute-bound problem's times follow it, so they are
  // compared at the peak clock (tuner/timer.h).
  TimerOptions timer = options.timer;
  timer.at_peak_clock |= result.ranking.front().second.bound == "compute";
  result.at_peak_clock = timer.at_peak_clock;
  const int top = std::max(1, options.top);

  // Trials the store has already (this tuner version): measured again only with
  // `force`, or where the check hung within a shorter limit than this tune's.
  std::map<std::string, Measured> stored;
  if (!options.force)
    for (const cache::TrialRecord& t : store.trials_for(result.gpu_model, result.signature)) {
      const double hung = hung_within(t.error);
      if (hung > 0 && hung < options.check_timeout_s) continue;
      if (t.tuner_version == kTunerVersion) stored[t.config] = from_trial(t);
    }

  TuneProgress state;
  std::mutex progress_mutex;
  auto report = [&](const std::string& phase) {
    state.phase = phase;
    state.elapsed_s = seconds_since(started);
    if (progress) progress(state);
  };
  auto note_best = [&](const Measured& m) {
    if (m.ok() && !m.stopped_early &&
        (state.best_config.empty() || m.summary.median_ms < state.best_ms)) {
      state.best_config = m.config;
      state.best_ms = m.summary.median_ms;
    }
  };
  const int threads = options.compile_threads > 0
                          ? options.compile_threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::string arch = options.arch.empty() ? device.arch() : options.arch;
  std::set<std::string> chosen;  // every candidate of this tune, in any phase

  // A trial's verdict goes to the store, where a failure replaces a pass
  // (cache::Store::put_trial); a config the measuring process never reached (it ended
  // on another's fault) has none and is not stored.
  auto store_verdict = [&](const Measured& m) {
    if (m.error != kNotMeasured)
      store.put_trial(trial_record(result.gpu_model, result.signature, m));
  };
  auto over_budget = [&] {
    return options.budget_s > 0 && seconds_since(started) > options.budget_s;
  };

  // One phase: the new candidates among `configs` are taken from the store's trials
  // or compiled (all first, in parallel) and measured in jobs of `batch`, each
  // job's trials stored as it ends.
  auto run_phase = [&](const std::vector<std::string>& configs) {
    std::vector<std::string> to_measure;
    for (const std::string& c : configs) {
      if (!chosen.insert(c).second) continue;
      ++state.total;
      auto it = stored.find(c);
      if (it != stored.end()) {
        result.trials.push_back(it->second);
        ++state.resumed;
        ++result.resumed;
        note_best(it->second);
      } else {
        to_measure.push_back(c);
      }
    }
    // The budget is checked before this phase compiles, not only between its jobs:
    // a phase begun with the budget spent compiled its candidates in vain.
    if (!result.budget_exhausted && !to_measure.empty() && over_budget())
      result.budget_exhausted = true;
    if (result.budget_exhausted || to_measure.empty()) return;
    report("compiling");
    const auto compile_started = std::chrono::steady_clock::now();
    const std::map<std::string, std::string> compile_errors =
        compile_all(problem, to_measure, arch, store, device, threads, [&](int n) {
          std::lock_guard<std::mutex> lock(progress_mutex);
          state.compiled += n;
          report("compiling");
        });
    result.compile_s += seconds_since(compile_started);
    std::vector<std::string> runnable;
    for (const std::string& c : to_measure) {
      auto it = compile_errors.find(c);
      if (it == compile_errors.end()) {
        runnable.push_back(c);
        continue;
      }
      Measured m;
      m.config = c;
      m.error = it->second;
      result.trials.push_back(m);
      store_verdict(m);
      ++state.failed;
    }
    const auto measure_started = std::chrono::steady_clock::now();
    const size_t batch = static_cast<size_t>(std::max(1, options.batch));
    for (size_t first = 0; first < runnable.size(); first += batch) {
      if (over_budget()) {
        result.budget_exhausted = true;
        break;
      }
      const size_t last = std::min(runnable.size(), first + batch);
      const std::vector<std::string> job(runnable.begin() + static_cast<std::ptrdiff_t>(first),
                                         runnable.begin() + static_cast<std::ptrdiff_t>(last));
      report("measuring");
      const std::vector<Measured> measured =
          measurer(problem, job, timer, state.best_ms, [&](const MeasureEvent& e) {
            if (e.phase == "failed") {
              ++state.failed;
              report("measuring");
            }
          });
      for (const Measured& m : measured) {
        result.trials.push_back(m);
        store_verdict(m);
        if (m.ok()) ++state.measured;
        if (m.error == kNotMeasured) ++state.failed;
        note_best(m);
        log_line("tune", fmt::format("{} {}: {}", result.signature, m.config,
                                     m.ok() ? m.summary.to_string() : m.error));
      }
      const double per_config = seconds_since(measure_started) / static_cast<double>(last);
      state.eta_s = per_config * static_cast<double>(runnable.size() - last);
      report("measuring");
    }
    result.measure_s += seconds_since(measure_started);
  };

  // What the runtime would run without this tune competes in the first phase, so a
  // tune never stores something slower than the default.
  std::vector<std::string> first;
  const bool default_runs = std::find(space.candidates.begin(), space.candidates.end(),
                                      result.default_config) != space.candidates.end();
  if (options.strategy == Strategy::Exhaustive) {
    for (const auto& [config, prediction] : result.ranking) first.push_back(config);
  } else if (options.strategy == Strategy::Random) {
    std::vector<std::string> all;
    for (const auto& [config, prediction] : result.ranking) all.push_back(config);
    std::mt19937_64 rng(options.seed);
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(std::min(all.size(), static_cast<size_t>(top)));
    first = all;
  } else {
    // The model, in two phases. 1: the best predicted config of each of the top k
    // groups (engine and block tile), so that the k measurements cover k different
    // kernels; of each schedule where the family names schedules the model cannot
    // rank (Prediction::schedule). 2: k more configs (stages, split-K, raster, grid)
    // of each of the two fastest groups, best predicted first.
    std::set<std::string> groups;
    std::map<std::string, int> per_schedule;
    for (const auto& [config, prediction] : result.ranking)
      if (per_schedule[prediction.schedule] < top && groups.insert(prediction.group).second) {
        first.push_back(config);
        ++per_schedule[prediction.schedule];
      }
  }
  if (default_runs) first.push_back(result.default_config);
  run_phase(first);
  if (options.strategy == Strategy::Model) {
    // The groups of the two fastest measured configs (one group's representative
    // may have had a poor split or stage count: the second guards against that),
    // and up to two more whose best is within 5% of the fastest: a representative
    // that close may not be its group's best. On the H200, 3072 x 3072 x 4096: the
    // 192 x 192 group's tiled representative measured 1.3% behind the fastest,
    // third, and its persistent variant, never measured, was 1.5% ahead of it. On an
    // H100, 8192^3 (the clock at 1361-1558 MHz from job to job): 128 x 256 tiled
    // measured 4.7% behind, and its persistent variant, never measured, was 6% ahead
    // of the pick in matmul_bench (docs/perf/2026-12-05-h100-review-fixes.md).
    const std::vector<const Measured*> passed = fastest_first(result.trials);
    std::map<std::string, std::string> group_of;
    for (const auto& [config, prediction] : result.ranking) group_of[config] = prediction.group;
    constexpr double kCloseGroups = 1.05;
    std::vector<std::string> best_groups;
    for (const Measured* m : passed) {
      const bool close = m->summary.median_ms <= passed.front()->summary.median_ms * kCloseGroups;
      if ((best_groups.size() < 2 || (close && best_groups.size() < 4)) &&
          std::find(best_groups.begin(), best_groups.end(), group_of[m->config]) ==
              best_groups.end())
        best_groups.push_back(group_of[m->config]);
    }
    std::vector<std::string> variants;
    for (const std::string& group : best_groups) {
      int taken = 0;
      for (const auto& [config, prediction] : result.ranking)
        if (prediction.group == group && !chosen.count(config) && taken < top) {
          variants.push_back(config);
          ++taken;
        }
    }
    run_phase(variants);
  }
  // A tune that measured nothing new (every trial resumed from the store) keeps the
  // tuning its finals decided. The stored trials keep each config's fastest time,
  // timed apart, and picking among them again undid the finals: a config measured
  // at 0.50 ms alone took the tuning from the default that beat it side by side.
  // Only where the stored trials could have been its finals' evidence: the finals
  // overturn what jobs timed apart differ by (a few percent, the clock moving
  // between them), not more. A stored tuning 4x behind a trial of an earlier tune
  // that stopped in its finals is out of date, and the finals run.
  constexpr double kFinalsOverturn = 1.10;
  std::optional<cache::TuningRecord> decided;
  if (state.measured == 0) decided = store.find_tuning(result.gpu_model, result.signature);
  if (decided) {
    const std::vector<const Measured*> passed = fastest_first(result.trials);
    const auto it = std::find_if(passed.begin(), passed.end(),
                                 [&](const Measured* m) { return m->config == decided->config; });
    if (it == passed.end() ||
        (*it)->summary.median_ms > passed.front()->summary.median_ms * kFinalsOverturn)
      decided.reset();  // a config this tune does not know, or one far behind: pick again
  }
  // The finals (see tune.h): when this tune measured something, or when nothing
  // has decided yet (a tune stopped during its finals); a resumed tune that has
  // every trial and its tuning costs no GPU time.
  // A budget that stopped a phase leaves the finals out (the fastest measured wins,
  // and a tune run again measures the rest and runs them). One spent only by the last
  // job does not: every candidate is measured, and the finals are what a stored
  // tuning stands on (a resumed tune keeps it as decided).
  if ((state.measured > 0 || !decided) && !result.budget_exhausted) {
    const std::vector<const Measured*> passed = fastest_first(result.trials);
    constexpr double kFinalists = 1.02;
    constexpr size_t kMaxFinalists = 4;
    std::vector<std::string> finalists;
    for (const Measured* m : passed)
      if (m->summary.median_ms <= passed.front()->summary.median_ms * kFinalists &&
          finalists.size() < kMaxFinalists && m->config != result.default_config)
        finalists.push_back(m->config);
    // The default runs in the finals however far behind it measured: jobs timed
    // seconds apart, each scaled to the peak clock, can put it several percent
    // behind a config it beats side by side (H200, 4096 x 11008 x 4096: ping-pong
    // 128 x 128 measured at ~1600 MHz 6% ahead of the default measured at ~1890;
    // side by side, the default was 6% faster). The finals are the evidence a tune
    // needs before it replaces what the runtime runs untuned.
    for (const Measured* m : passed)
      if (m->config == result.default_config) finalists.push_back(m->config);
    if (finalists.size() >= 2) {
      TimerOptions finals = timer;
      finals.rounds = timer.rounds * timer.runs_per_round;
      finals.runs_per_round = 1;
      finals.hopeless = 0;
      report("finals");
      const auto finals_started = std::chrono::steady_clock::now();
      const std::vector<Measured> measured = measurer(problem, finalists, finals, 0, nullptr);
      result.measure_s += seconds_since(finals_started);
      for (const Measured& m : measured) {
        for (Measured& t : result.trials)
          if (t.config == m.config) t = m;
        store_verdict(m);
        log_line("tune", fmt::format("{} {} (finals): {}", result.signature, m.config,
                                     m.ok() ? m.summary.to_string() : m.error));
      }
      result.finalists = finalists;
    }
  }
  result.candidates = state.total;
  for (const Measured& m : result.trials) {
    if (m.ok())
      ++result.measured;
    else
      ++result.failed;
  }
  const std::vector<Measured> contenders = finals_or_all(result);
  if (decided) {
    result.config = decided->config;
    result.summary.median_ms = result.summary.min_ms = decided->measured.median_ms;
    result.summary.low_ms = decided->measured.median_ms * (1 - decided->measured.spread / 2);
    result.summary.high_ms = decided->measured.median_ms * (1 + decided->measured.spread / 2);
    result.summary.runs = decided->measured.runs;
    result.tie_break = "the stored tuning, as its finals decided (--force measures again)";
  } else if (const Measured* winner = pick_winner(contenders, problem, device, &result.tie_break,
                                                  result.default_config)) {
    result.config = winner->config;
    result.summary = winner->summary;
    cache::TuningRecord tuning;
    tuning.gpu_model = result.gpu_model;
    tuning.problem = result.signature;
    tuning.config = winner->config;
    tuning.measured.median_ms = winner->summary.median_ms;
    tuning.measured.spread = winner->summary.spread();
    tuning.measured.runs = winner->summary.runs;
    tuning.tuner_version = kTunerVersion;
    store.put_tuning(tuning);
  }
  chooser.refresh();
  result.total_s = seconds_since(started);
  state.eta_s = 0;
  report("done");
  return result;
}

}  // namespace kjit::tuner
