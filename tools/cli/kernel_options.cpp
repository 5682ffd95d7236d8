#include "tools/cli/kernel_options.h"

namespace kjit::cli {

void add_kernel_options(CLI::App* cmd, KernelCommandOptions& o) {
  cmd->add_option("what", o.what,
                  "An elementwise expression (\"y = sin(x)^2 + cos(x)^2\") or a family name "
                  "(matmul)")
      ->required();
  cmd->add_option("--dtype", o.dtype,
                  "Element type: f32, f16, bf16, i32, bool (default f32); matmul: bf16 "
                  "(default), f16, f32 (exact SIMT) or tf32 (f32 data on the tensor cores, sm_90; "
                  "f32 out)");
  cmd->add_option("--config", o.config,
                  "key=value,... Elementwise: block=512,vec=0,unroll=2,align=auto|16|1");
  cmd->add_option("--arch", o.arch, "Target architecture (default: the GPU's, else sm_90)");
  cmd->add_flag("--json", o.json, "Print JSON");
  cmd->add_option("--n", o.n, "Elements (elementwise), or N (matmul)");
  cmd->add_option("--m", o.m, "Rows of a 2-D elementwise problem, or M (matmul)");
  cmd->add_option("--k", o.k, "K (matmul)");
  cmd->add_option("--batch", o.batch, "Batch (matmul)");
  cmd->add_option("--layout", o.layout, "Matmul operand layout: nn, nt, tn, tt");
  cmd->add_option("--epilogue", o.epilogue, "Matmul epilogue: elementwise IR over acc, ...");
  cmd->add_option("--input", o.inputs, "run: NAME=path.npy, an input's values")
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_option("--output", o.outputs, "run: NAME=path.npy, where to save an output")
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_option("--repeats", o.repeats, "bench: timed runs (default 20)");
}

void run_kernel_command(const KernelCommandOptions& options) {
  if (FamilyHandler handler = find_family(options.what)) return handler(options);
  run_elementwise_command(options);
}

}  // namespace kjit::cli
