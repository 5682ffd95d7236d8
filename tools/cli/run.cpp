// kjit run WHAT — run on the GPU on random (or given .npy) inputs; report the error against the
// fp64 reference.
#include <memory>

#include "tools/cli/command.h"
#include "tools/cli/kernel_options.h"

namespace kjit::cli {

namespace {
void add_run_command(CLI::App& app) {
  auto options = std::make_shared<KernelCommandOptions>();
  options->verb = Verb::Run;
  CLI::App* cmd = app.add_subcommand(
      "run", "Run on the GPU on random or .npy inputs and check against the fp64 reference");
  add_kernel_options(cmd, *options);
  cmd->callback([options] { run_kernel_command(*options); });
}
}  // namespace

KJIT_REGISTER_COMMAND(40, add_run_command);

}  // namespace kjit::cli
