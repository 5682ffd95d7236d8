// kjit explain WHAT [sizes...] [--gpu h200] [--top N] [--json] — the config kjit
// would run and why: where it came from, the tile grid and its waves on this GPU's
// SMs, occupancy and its limiter, the roofline (FLOPs, bytes, intensity, the bound,
// predicted time; measured on a GPU), and the model's top candidates with their
// measured times where the store has trials. Without a GPU it explains for the
// datasheet device of --gpu / --arch (an H200 by default) and says so.
#include <fmt/format.h>

#include <algorithm>

#include <iostream>
#include <map>
#include <memory>

#include "kjit/runtime/compile.h"
#include "kjit/runtime/tuning.h"
#include "kjit/support/error.h"
#include "kjit/tuner/family.h"
#include "kjit/tuner/measure.h"
#include "tools/cli/command.h"
#include "tools/cli/kernel_options.h"

namespace kjit::cli {

namespace {

struct ExplainCommand {
  KernelCommandOptions kernel;
  int top = 5;
  bool no_measure = false;
};

std::string bytes_text(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.1f} KB", bytes / 1e3);
}

void explain_command(const ExplainCommand& c) {
  const KernelCommandOptions o = resolved(c.kernel);
  const std::unique_ptr<tuner::TuningProblem> problem = tuner::make_problem(problem_spec(o));
  const Target target = command_target(o.arch, o.gpu);
  std::unique_ptr<tuner::Chooser> chooser = make_chooser(target);
  const cuda::DeviceProperties& device = target.device;

  tuner::Choice choice;
  if (o.config.empty()) {
    choice = chooser->choose(*problem);
  } else {
    choice.config = problem->canonical(o.config);
    choice.detail = "given with --config";
  }
  // The compiled kernel's resources (ptxas), from the store or NVRTC now.
  tuner::KernelResources resources;
  // Of several kernels (split-K's reduction, the attention backward's steps), the
  // main one: the most shared memory (the tiled one), the first of equals.
  std::vector<KernelSource> sources = problem->sources(choice.config);
  const KernelSource& main = *std::max_element(
      sources.begin(), sources.end(), [](const KernelSource& a, const KernelSource& b) {
        return a.dynamic_shared_bytes < b.dynamic_shared_bytes;
      });
  const std::string arch = o.arch.empty() ? device.arch() : o.arch;
  const CachedBinary binary = compile_cached(main, arch, chooser->store());
  for (const cuda::KernelStats& k : binary.kernels)
    if (k.name == main.name) {
      resources.threads = main.block_threads;
      resources.registers = k.registers;
      resources.shared_bytes = main.dynamic_shared_bytes + k.shared_bytes;
      resources.estimated = false;
    }
  const tuner::Prediction p =
      problem->predict(choice.config, device, *chooser->efficiencies(), &resources);
  // A config given by hand may not launch at all there (emit and compile refuse it).
  if (p.occupancy.blocks_per_sm < 1)
    throw UserError(
        fmt::format("--config {} does not fit {}: {} threads, {} registers a thread and {} B of "
                    "shared memory a block leave no block resident on an SM (limited by {}; "
                    "{} B of shared memory a block at most)",
                    choice.config, device.name, p.resources.threads, p.resources.registers,
                    p.resources.shared_bytes, p.occupancy.limiter, device.shared_per_block_optin),
        "pick a smaller tile or fewer stages; `kjit explain` without --config shows what fits");
  const tuner::DeviceRates rates = tuner::rates_of(device);

  // Measured: on the GPU when there is one (and it is the target), else nothing.
  tuner::Summary measured;
  std::string measure_note;
  if (!target.planned && !c.no_measure) {
    Runtime runtime;
    std::unique_ptr<tuner::Harness> harness = make_harness(runtime, *problem);
    const std::vector<tuner::Measured> m =
        tuner::measure(*harness, {choice.config}, runtime.device(), tuner::TimerOptions());
    if (m[0].ok())
      measured = m[0].summary;
    else
      measure_note = m[0].error;
  }
  // Trials the store has for this problem on this GPU model.
  std::map<std::string, cache::TrialRecord> trials;
  if (chooser->store().enabled())
    for (const cache::TrialRecord& t :
         chooser->store().trials_for(target.gpu_model, problem->signature()))
      trials[t.config] = t;
  const auto ranking = chooser->rank(*problem);

  const tuner::Work& w = p.work;
  const double ridge = rates.ridge();
  if (o.json) {
    nlohmann::json top = nlohmann::json::array();
    for (size_t i = 0; i < ranking.size() && static_cast<int>(i) < c.top; ++i) {
      nlohmann::json t = {{"config", ranking[i].first}, {"predicted_ms", ranking[i].second.ms}};
      auto it = trials.find(ranking[i].first);
      if (it != trials.end() && it->second.error.empty())
        t["measured_ms"] = it->second.measured.median_ms;
      top.push_back(t);
    }
    nlohmann::json out = {{"family", problem->family()},
                          {"signature", problem->signature()},
                          {"gpu", device.name},
                          {"gpu_model", target.gpu_model},
                          {"sms", device.sm_count},
                          {"planned", target.planned},
                          {"config", choice.config},
                          {"source", o.config.empty() ? tuner::to_string(choice.source) : "given"},
                          {"detail", choice.detail},
                          {"work_units", p.waves.units},
                          {"slots", p.waves.slots},
                          {"waves", p.waves.waves},
                          {"last_wave_fill", p.waves.last_fill},
                          {"utilization", p.waves.utilization()},
                          {"threads", p.resources.threads},
                          {"registers", p.resources.registers},
                          {"shared_bytes", p.resources.shared_bytes},
                          {"blocks_per_sm", p.occupancy.blocks_per_sm},
                          {"limiter", p.occupancy.limiter},
                          {"flops", w.flops},
                          {"bytes", w.bytes},
                          {"intensity", w.intensity()},
                          {"ridge", ridge},
                          {"bound", p.bound},
                          {"predicted_ms", p.ms},
                          {"compute_ms", p.compute_ms},
                          {"memory_ms", p.memory_ms},
                          {"overhead_ms", p.overhead_ms},
                          {"efficiency_key", p.efficiency_key},
                          {"efficiency", p.efficiency},
                          {"efficiency_fitted", p.efficiency_fitted},
                          {"notes", p.notes},
                          {"top", top}};
    if (measured.runs > 0) {
      out["measured_ms"] = measured.median_ms;
      out["measured_low_ms"] = measured.low_ms;
      out["measured_high_ms"] = measured.high_ms;
    }
    if (!measure_note.empty()) out["measure_error"] = measure_note;
    if (problem->tuned_as()) out["tuned_as"] = problem->signature();
    return print_json(out);
  }

  // (An elementwise signature names its family already.)
  const std::string signature = problem->signature();
  std::cout << (signature.rfind(problem->family() + " ", 0) == 0
                    ? signature
                    : fmt::format("{} {}", problem->family(), signature))
            << "\n";
  if (problem->tuned_as())
    std::cout << "tuned as   the batch above, its length profile's representative; this batch "
                 "runs as given\n";
  std::cout << fmt::format("gpu        {}\n", target.describe());
  std::cout << fmt::format("config     {}\n", choice.config);
  if (!o.config.empty()) {
    std::cout << "  from     --config\n";
  } else if (choice.source == tuner::Choice::Source::Store) {
    std::cout << fmt::format("  from     the store: {} on this GPU model\n", choice.detail);
  } else if (choice.source == tuner::Choice::Source::Nearest) {
    std::cout << fmt::format("  from     the nearest tuned problem of its class: {}\n",
                             choice.detail);
  } else {
    std::cout << fmt::format("  from     the model ({}; kjit tune measures)\n", choice.detail);
  }
  std::cout << fmt::format(
      "work       {} work units ({}) over {} SMs x {} resident = {} slots\n", p.waves.units,
      problem->family() == "matmul" ? "output tiles x K splits" : "thread blocks", device.sm_count,
      p.occupancy.blocks_per_sm, p.waves.slots);
  std::cout << fmt::format(
      "waves      {:.2f} -> {} wave(s); the last {:.0f}% full, so {:.0f}% of the SM time does "
      "work\n",
      static_cast<double>(p.waves.units) / static_cast<double>(p.waves.slots), p.waves.waves,
      100 * p.waves.last_fill, 100 * p.waves.utilization());
  std::cout << fmt::format(
      "occupancy  {} threads, {} registers{}, {} B shared memory -> {} block(s)/SM, limited by "
      "{}\n",
      p.resources.threads, p.resources.registers, p.resources.estimated ? " (estimated)" : "",
      p.resources.shared_bytes, p.occupancy.blocks_per_sm, p.occupancy.limiter);
  std::cout << fmt::format(
      "roofline   {:.3g} GFLOP, {} moved at least: {:.1f} FLOP/B (the ridge is {:.0f} on this "
      "GPU) -> {}\n",
      w.flops / 1e9, bytes_text(w.bytes), w.intensity(), ridge,
      roofline_verdict(w, ridge, p.bound));
  std::cout << fmt::format(
      "           floors: compute {:.4f} ms at peak, DRAM {:.4f} ms at {:.2f} TB/s\n",
      w.flops / rates.tensor_peak() * 1e3, w.bytes / rates.dram_bytes_per_s * 1e3,
      rates.dram_bytes_per_s / 1e12);
  std::cout << fmt::format(
      "predicted  {:.4f} ms {} (compute {:.4f}, memory {:.4f}, overheads {:.4f} ms; efficiency "
      "{} = {:.2f}, {})\n",
      p.ms, tuner::throughput(*problem, p.ms), p.compute_ms, p.memory_ms, p.overhead_ms,
      p.efficiency_key, p.efficiency,
      p.efficiency_fitted ? "fitted to this GPU model's trials" : "the prior");
  for (const std::string& note : p.notes) std::cout << "           " << note << "\n";
  if (measured.runs > 0)
    std::cout << fmt::format("measured   {} {} (model/measured {:.2f})\n", measured.to_string(),
                             tuner::throughput(*problem, measured.median_ms),
                             p.ms / measured.median_ms);
  else if (!measure_note.empty())
    std::cout << "measured   failed: " << measure_note << "\n";
  else
    std::cout << fmt::format("measured   -{}\n", target.planned ? " (no GPU: planned only)" : "");
  std::cout << fmt::format(
      "top {} of {} configs by the model (measured where the store has a "
      "trial):\n",
      std::min<size_t>(c.top, ranking.size()), ranking.size());
  for (size_t i = 0; i < ranking.size() && static_cast<int>(i) < c.top; ++i) {
    auto it = trials.find(ranking[i].first);
    std::string m = "-";
    if (it != trials.end())
      m = it->second.error.empty() ? fmt::format("{:.4f} ms", it->second.measured.median_ms)
                                   : "failed";
    std::cout << fmt::format("  {:>2}. {:<66} {:.4f} ms  {}\n", i + 1, ranking[i].first,
                             ranking[i].second.ms, m);
  }
}

void add_explain_command(CLI::App& app) {
  auto c = std::make_shared<ExplainCommand>();
  c->kernel.verb = Verb::Explain;
  CLI::App* cmd = app.add_subcommand(
      "explain",
      "The config kjit would run for WHAT and why: waves, occupancy, roofline, the "
      "model's candidates");
  add_kernel_options(cmd, c->kernel);
  cmd->add_option("--top", c->top, "How many of the model's best configs to list (default 5)")
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--no-measure", c->no_measure, "Do not run the chosen config on the GPU");
  cmd->callback([c] { explain_command(*c); });
}

}  // namespace

KJIT_REGISTER_COMMAND(35, add_explain_command);

}  // namespace kjit::cli
