// kjit compile FILE.cu — compile CUDA source with NVRTC and report each kernel's
// registers, shared memory, stack and spills. Needs no GPU.
// kjit compile EXPR|FAMILY — the same for a generated kernel: WHAT is a family name,
// else a file when it ends in .cu/.cuh or names something that exists and is not
// a plain name (so `/tmp/dir` is refused as a directory, not parsed), else an
// expression.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "kjit/compiler/ir/graph.h"
#include "kjit/runtime/cuda/nvrtc.h"
#include "kjit/support/error.h"
#include "tools/cli/command.h"
#include "tools/cli/kernel_options.h"

namespace kjit::cli {

namespace {

struct CompileOptions {
  std::string file;
  std::string arch;
  bool ptx = false;
  bool json = false;
  bool lineinfo = false;
};

bool names_a_file(const std::string& what) {
  auto ends_with = [&](const std::string& suffix) {
    return what.size() >= suffix.size() &&
           what.compare(what.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with(".cu") || ends_with(".cuh")) return true;
  // A plain name (x, matmul) is an expression even when a file of that name is here.
  if (ir::is_identifier(what)) return false;
  std::error_code error;
  return std::filesystem::exists(what, error);
}

// The options of `kjit compile` that a .cu file reads.
void check_file_options(const KernelCommandOptions& o) {
  for (const std::string& option : o.given)
    if (option != "--arch")
      throw UserError(option + " does not apply to a .cu file",
                      "a .cu file takes --arch, --ptx, --json and --lineinfo");
}

}  // namespace

static void run_compile(const CompileOptions& o) {
  std::string source = read_source_file(o.file);
  cuda::NvrtcOptions nvrtc;
  nvrtc.arch = o.arch.empty() ? default_arch() : o.arch;
  nvrtc.lineinfo = o.lineinfo;
  cuda::CompiledProgram program = cuda::nvrtc_compile(source, o.file, nvrtc, template_headers());
  if (o.json) {
    nlohmann::json out = {{"file", o.file},
                          {"arch", nvrtc.arch},
                          {"nvrtc_version", cuda::nvrtc_version()},
                          {"compile_ms", program.compile_ms},
                          {"cubin_bytes", program.cubin.size()},
                          {"options", program.options},
                          {"kernels", nlohmann::json::array()}};
    for (const cuda::KernelStats& k : program.kernels) out["kernels"].push_back(stats_json(k));
    if (o.ptx) out["ptx"] = program.ptx;
    return print_json(out);
  }
  if (o.ptx) {
    std::cout << program.ptx;
    return;
  }
  std::cout << fmt::format("{}: compiled for {} in {:.1f} ms, cubin {} bytes\n", o.file, nvrtc.arch,
                           program.compile_ms, program.cubin.size());
  print_stats_table(program.kernels);
}

namespace {
void add_compile_command(CLI::App& app) {
  auto options = std::make_shared<KernelCommandOptions>();
  auto lineinfo = std::make_shared<bool>(false);
  options->verb = Verb::Compile;
  CLI::App* cmd = app.add_subcommand(
      "compile",
      "Compile a CUDA file, an expression or a kernel family with NVRTC and report registers, "
      "shared memory and spills");
  add_kernel_options(cmd, *options);
  cmd->add_flag("--ptx", options->ptx, "Print the PTX");
  cmd->add_flag("--lineinfo", *lineinfo, "Keep source line information (for profilers; files)");
  cmd->callback([options, lineinfo] {
    const bool file = options->file.empty() && find_family(options->what) == nullptr &&
                      names_a_file(options->what);
    if (!file) {
      if (*lineinfo)
        throw UserError("--lineinfo applies to .cu files only",
                        "for generated kernels set KJIT_LINEINFO=1 (it is part of the cache key)");
      return run_kernel_command(*options);
    }
    check_file_options(*options);
    run_compile(
        CompileOptions{options->what, options->arch, options->ptx, options->json, *lineinfo});
  });
}

}  // namespace

KJIT_REGISTER_COMMAND(30, add_compile_command);

}  // namespace kjit::cli
