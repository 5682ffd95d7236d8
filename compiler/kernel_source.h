// What lowering produces and the runtime consumes: one CUDA C++ translation unit
// with one extern "C" kernel, plus what is needed to compile and launch it.
// Every family (elementwise, matmul, attention) lowers to this type.
#pragma once

#include <string>
#include <vector>

namespace kjit {

struct KernelSource {
  std::string name;    // the extern "C" __global__ function, e.g. "kjit_ew_3f2a..."
  std::string source;  // complete CUDA C++; includes only "kjit/*.cuh" templates
  // NVRTC options beyond the architecture (which the runtime adds), e.g. "-DKJIT_X=1".
  std::vector<std::string> options;
  std::string family;   // "elementwise", "matmul", ...
  std::string problem;  // canonical text of the Problem (what is computed)
  std::string config;   // canonical text of the Config (how)
  int block_threads = 128;
  int dynamic_shared_bytes = 0;  // > 48 KiB needs the opt-in; the runtime sets it
  // Uses architecture-specific instructions (wgmma, setmaxnreg): compiled for
  // "sm_90a" rather than "sm_90", and runs on that architecture only.
  bool arch_specific = false;
};

// The generator's version: bump it whenever generated code changes for the same
// input, so cached binaries from older generators are never reused.
inline constexpr const char* kGeneratorVersion = "kjit-gen-2";

}  // namespace kjit
