// kjit emit WHAT — print the CUDA source kjit generates (no GPU needed).
#include <memory>

#include "kjit/support/error.h"
#include "tools/cli/command.h"
#include "tools/cli/kernel_options.h"

namespace kjit::cli {

namespace {
void add_emit_command(CLI::App& app) {
  auto options = std::make_shared<KernelCommandOptions>();
  options->verb = Verb::Emit;
  CLI::App* cmd = app.add_subcommand(
      "emit", "Print the generated CUDA source for an expression or a kernel family");
  add_kernel_options(cmd, *options);
  cmd->add_flag("--templates", options->templates,
                "Also print every kjit template the source includes (what NVRTC compiles with "
                "it), so the whole kernel can be read without the repository");
  cmd->callback([options] {
    // The JSON's "source" is the generated kernel alone: the templates were dropped
    // from it without a word.
    if (options->templates && options->json)
      throw UserError("--templates does not apply with --json",
                      "leave out --json to print the templates after the source");
    run_kernel_command(*options);
  });
}
}  // namespace

KJIT_REGISTER_COMMAND(20, add_emit_command);

}  // namespace kjit::cli
