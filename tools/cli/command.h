// The `kjit` command line: one file per subcommand in this folder. Each file
// registers itself with KJIT_REGISTER_COMMAND(order, add_fn): `add_fn(CLI::App&)`
// adds the subcommand and its options and sets its callback; `order` places it
// in `kjit --help`. Adding a subcommand touches no other file. Callbacks return through `exit_code`
// and report errors by throwing kjit's typed errors; tools/kjit.cpp maps those to messages and exit
// codes:
//   0 success · 1 failure (compile error, CUDA error, a check failed) ·
//   2 bad usage or bad input · 3 internal error
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "kjit/compiler/kernel_source.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/runtime/cuda/nvrtc.h"
#include "kjit/runtime/runtime.h"
#include "kjit/tuner/choose.h"

namespace kjit::cli {

// Set by a subcommand's callback; the process exits with it.
extern int exit_code;

using AddCommand = void (*)(CLI::App&);
bool register_command(int order, AddCommand add);
// Adds every registered subcommand to `app`, in order.
void add_registered_commands(CLI::App& app);

#define KJIT_REGISTER_COMMAND(order, add) \
  static const bool kjit_registered_##add = ::kjit::cli::register_command(order, add)

// `kjit demo` runs every registered section in order; each kernel family adds
// one (tools/cli/demo_<family>.cpp). A section gets whether a GPU is usable,
// prints what it did and returns false when a check failed.
using DemoSection = bool (*)(bool have_gpu);
bool register_demo_section(int order, const char* title, DemoSection section);
#define KJIT_REGISTER_DEMO(order, title, section)    \
  static const bool kjit_demo_registered_##section = \
      ::kjit::cli::register_demo_section(order, title, section)
struct DemoEntry {
  int order;
  const char* title;
  DemoSection run;
};
std::vector<DemoEntry> demo_sections();

// `kjit --version`: kjit's version and git commit, the generator version, the NVRTC
// version and the driver's (or why there is none).
std::string version_text();

// The architecture to compile for when none is given: GPU 0's, else sm_90.
std::string default_arch();

// The GPU a command plans for (configs, waves, the model): `gpu` (h200, h100, a100)
// when given; else GPU 0 when one is usable and `arch` is empty or its own; else
// the datasheet device of `arch` (sm_90 when empty: an H200).
struct Target {
  cuda::DeviceProperties device;
  bool planned = false;   // no GPU measured: a datasheet device
  std::string gpu_model;  // the store's key of this GPU model
  // "NVIDIA H200 (132 SMs)", + " — planned: no GPU" when planned
  std::string describe() const;
};
Target command_target(const std::string& arch, const std::string& gpu = "");
// The tuner's chooser for `target` over the user's store.
std::unique_ptr<tuner::Chooser> make_chooser(const Target& target);
// Whether a driver and at least one GPU are usable (runtime/runtime.h).
using kjit::gpu_available;

// What a command that runs on a GPU throws when there is none: not bad usage (exit
// 2) but a failure to do what was asked (exit 1), with the reason and what works
// without a GPU.
class NoGpu : public std::runtime_error {
 public:
  NoGpu(const std::string& what, std::string hint)
      : std::runtime_error(what), hint_(std::move(hint)) {}
  const std::string& hint() const { return hint_; }

 private:
  std::string hint_;
};
// Throws NoGpu ("kjit run needs a GPU: <reason>") unless a GPU is usable.
void require_gpu(const std::string& what);
// Every embedded template, as NVRTC headers.
std::vector<cuda::SourceHeader> template_headers();
// ptxas statistics as a table (text) or objects (JSON).
void print_stats_table(const std::vector<cuda::KernelStats>& kernels);
nlohmann::json stats_json(const cuda::KernelStats& kernel);

// A kernel compiled for `arch` through the user's store (cache/): a hit skips
// NVRTC. With `want_ptx` the store is bypassed (it keeps cubins only).
struct StoreCompile {
  std::vector<char> cubin;
  std::vector<cuda::KernelStats> kernels;
  std::string ptx;
  // "hit", "miss", or "off" (KJIT_CACHE=off, an unusable or untrusted store, --ptx).
  std::string cache;
  double ms = 0;  // store lookup on a hit; NVRTC (and the store write) on a miss
};
StoreCompile compile_with_store(const KernelSource& source, const std::string& arch, bool want_ptx);

// The most CUDA source `kjit compile FILE.cu` reads: a generated kernel is tens
// of KiB, and NVRTC would take minutes over this much.
inline constexpr int64_t kMaxSourceBytes = int64_t{16} << 20;
// Reads a .cu file: a UserError names the path and the OS error, or what the
// path is when it is not a regular file (a directory, a FIFO, /dev/zero), or
// its size when it is above kMaxSourceBytes.
std::string read_source_file(const std::string& path);

// `kjit compile` of a family's kernel (matmul, attention): NVRTC for `arch` through
// the store, then the report — JSON (family, kernel, problem, config and where it
// came from, arch, NVRTC, cache, timings, ptxas' stats, PTX with `ptx`), the PTX
// alone with `ptx`, or text ("<family> <problem>\nconfig ..." and the stats table).
// Several sources (the attention backward's steps): one report over all of them
// (kernel names joined by ",", times and sizes summed, the largest shared memory,
// every kernel's stats; cache "hit" only when every one was). `extra` adds JSON
// fields (the elementwise expression); `note` comes first in the text report (why a
// chain was split).
void report_family_compile(const std::string& family, const std::string& problem,
                           const std::vector<KernelSource>& sources, const std::string& config,
                           const std::string& config_source, const std::string& arch, bool json,
                           bool ptx, const nlohmann::json& extra = nlohmann::json::object(),
                           const std::string& note = "");

// Prints a generated kernel for `kjit emit`: `plan` first (comment lines saying how
// this problem runs on the target GPU: tiles, waves, roofline; may be empty), the
// source, then with `templates` every kjit template it includes, transitively, each
// under a header line, in include order.
void print_emitted(const std::string& source, const std::string& plan, bool templates);
// The comment lines of a plan: "// on NVIDIA H200 (132 SMs): 2048 thread blocks, ...".
std::string plan_comment(const cuda::DeviceProperties& device, const tuner::Prediction& prediction);
// "memory-bound" or "compute-bound" by the roofline (intensity against the ridge),
// and the model's largest term where it is another.
std::string roofline_verdict(const tuner::Work& work, double ridge, const std::string& bound);

// Prints JSON, two-space indented, to stdout; bytes that are not UTF-8 become
// U+FFFD.
void print_json(const nlohmann::json& value);

}  // namespace kjit::cli
