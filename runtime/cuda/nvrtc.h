// NVRTC: CUDA C++ source -> cubin (and PTX), with ptxas' resource report parsed.
//
// Compiles for one exact architecture ("sm_90", or "sm_90a" for Hopper-only
// instructions). Needs no GPU and no driver. Thread-safe: each call owns its
// nvrtcProgram.
#pragma once

#include <string>
#include <vector>

namespace kjit::cuda {

struct SourceHeader {
  std::string name;  // the include name, e.g. "kjit/types.cuh"
  std::string content;
};

struct NvrtcOptions {
  std::string arch = "sm_90";
  bool lineinfo = false;
  std::vector<std::string> extra;  // more NVRTC options, passed through
};

// One kernel's resources, from `ptxas -v`.
struct KernelStats {
  std::string name;
  int registers = 0;
  int barriers = 0;
  int shared_bytes = 0;    // static shared memory
  int constant_bytes = 0;  // cmem[0]: kernel parameters and constants
  int stack_bytes = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
};

struct CompiledProgram {
  std::vector<char> cubin;
  std::string ptx;
  std::string log;  // NVRTC's log, ptxas' report included
  std::vector<KernelStats> kernels;
  std::vector<std::string> options;  // exactly what NVRTC was given
  double compile_ms = 0;
};

// Compiles `source` (named `file_name` in messages). Throws CompileError with the
// log and the offending source lines, or UserError for an unsupported arch.
CompiledProgram nvrtc_compile(const std::string& source, const std::string& file_name,
                              const NvrtcOptions& options,
                              const std::vector<SourceHeader>& headers = {});

// "13.0"
std::string nvrtc_version();
// e.g. {75, 80, ..., 90, 100, ...}
std::vector<int> nvrtc_supported_archs();
// Whether this NVRTC (12.9+) uses the driver's compute cache; kjit turns it off
// with --no-cache so every compile reports its resources.
bool nvrtc_has_driver_cache();
// Throws UserError listing the supported architectures when `arch` is not one.
void validate_arch(const std::string& arch);

// Parses ptxas' "-v" report in an NVRTC log.
std::vector<KernelStats> parse_ptxas_stats(const std::string& log);

// The log with each "file(line): error" followed by that source line and its number.
std::string annotate_log(const std::string& log, const std::string& source,
                         const std::string& file_name);

}  // namespace kjit::cuda
