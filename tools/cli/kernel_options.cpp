#include "tools/cli/kernel_options.h"

#include <exception>
#include <string>

namespace kjit::cli {
namespace {

// Sizes and counts: at least 1 when given (not given is 0, the command's default).
const CLI::Validator kAtLeastOne(
    [](std::string& text) -> std::string {
      try {
        size_t used = 0;
        if (std::stoll(text, &used) >= 1 && used == text.size()) return "";
      } catch (const std::exception&) {
      }
      return "must be an integer >= 1, got '" + text + "'";
    },
    ">= 1");

}  // namespace

void add_kernel_options(CLI::App* cmd, KernelCommandOptions& o) {
  cmd->add_option("WHAT", o.what,
                  "An elementwise expression (\"y = sin(x)^2 + cos(x)^2\") or a family name "
                  "(matmul)")
      ->required();
  cmd->add_option("--dtype", o.dtype,
                  "Element type: f32, f16, bf16, i32, bool (default f32); matmul: bf16 "
                  "(default), f16, f32 (exact SIMT) or tf32 (f32 data on the tensor cores, sm_90; "
                  "f32 out)");
  cmd->add_option(
      "--config", o.config,
      "key=value,... Elementwise: block=512,vec=0,unroll=2,prefetch=0|1,stream=0|1,"
      "per_sm=0 (auto),grid=waves|tiles,align=auto|16|1. Matmul: bm=128,bn=128,bk=32,warps=8,wm=2,"
      "stages=3,splitk=1,raster=8,mma=sync|wgmma,load=async|narrow (no --config: the "
      "tuner's choice: the store's tuning, the nearest tuned problem, or the model)");
  cmd->add_option("--arch", o.arch, "Target architecture (default: the GPU's, else sm_90)");
  cmd->add_option("--gpu", o.gpu,
                  "Plan for this GPU (h200, h100, a100) from its datasheet instead of GPU 0")
      ->check(CLI::IsMember({"h200", "h100", "a100"}));
  cmd->add_flag("--json", o.json, "Print JSON");
  cmd->add_option("--n", o.n, "Elements (elementwise), or N (matmul)")->check(kAtLeastOne);
  cmd->add_option("--m", o.m, "Rows of a 2-D elementwise problem, or M (matmul)")
      ->check(kAtLeastOne);
  cmd->add_option("--k", o.k, "K (matmul)")->check(kAtLeastOne);
  cmd->add_option("--batch", o.batch, "Batch (matmul)")->check(kAtLeastOne);
  cmd->add_option("--layout", o.layout, "Matmul operand layout: nn, nt, tn, tt");
  cmd->add_option("--epilogue", o.epilogue, "Matmul epilogue: elementwise IR over acc, ...");
  cmd->add_option("--input", o.inputs, "run: NAME=path.npy, an input's values")
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_option("--output", o.outputs, "run: NAME=path.npy, where to save an output")
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_option("--repeats", o.repeats, "bench: timed runs (default 20)")->check(kAtLeastOne);
}

void run_kernel_command(const KernelCommandOptions& options) {
  if (FamilyHandler handler = find_family(options.what)) return handler(options);
  run_elementwise_command(options);
}

}  // namespace kjit::cli
