// kjit bench WHAT — time on the GPU: median, GB/s, fraction of copy bandwidth, unfused time.
#include <memory>

#include "tools/cli/command.h"
#include "tools/cli/kernel_options.h"

namespace kjit::cli {

namespace {
void add_bench_command(CLI::App& app) {
  auto options = std::make_shared<KernelCommandOptions>();
  options->verb = Verb::Bench;
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time on the GPU against device copy bandwidth and the unfused chain");
  add_kernel_options(cmd, *options);
  cmd->callback([options] { run_kernel_command(*options); });
}
}  // namespace

KJIT_REGISTER_COMMAND(50, add_bench_command);

}  // namespace kjit::cli
