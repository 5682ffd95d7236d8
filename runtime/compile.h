// KernelSource -> cubin, with kjit's templates as headers and the options that
// every generated kernel gets. Needs no GPU (used by `kjit compile --arch`).
#pragma once

#include <string>
#include <vector>

#include "kjit/cache/store.h"
#include "kjit/compiler/kernel_source.h"
#include "kjit/runtime/cuda/nvrtc.h"

namespace kjit {

// The embedded templates as NVRTC headers.
const std::vector<cuda::SourceHeader>& template_headers();

// The architecture `source` is compiled for on `arch`: "sm_90a" for an
// arch-specific source (wgmma) on "sm_90", else `arch` itself.
std::string target_arch(const KernelSource& source, const std::string& arch);

// The NVRTC options a KernelSource is compiled with for `arch` (without the
// architecture itself, which nvrtc_compile adds): the source's own options,
// then KJIT_NVRTC_EXTRA_OPTIONS (space separated) and -lineinfo under KJIT_LINEINFO=1.
cuda::NvrtcOptions nvrtc_options_for(const KernelSource& source, const std::string& arch);

// Compiles `source` for `arch` ("sm_90", "sm_90a").
cuda::CompiledProgram compile_for_arch(const KernelSource& source, const std::string& arch);

// The binary cache key (cache::binary_key): everything that changes the cubin or
// its validity — source, options, arch, NVRTC version, the generator version
// with a hash of the templates, and the codegen environment.
std::string binary_key(const KernelSource& source, const std::string& arch);

// A cubin from the store, or compiled now and stored. Needs no GPU: this is
// `kjit compile EXPR` and the first half of Runtime::compile.
struct CachedBinary {
  std::string key;
  std::vector<char> cubin;
  std::vector<cuda::KernelStats> kernels;  // empty on a store hit made without ptxas' report
  std::string ptx;                         // only when compiled now
  bool store_hit = false;
  double ms = 0;  // store lookup on a hit; lookup + NVRTC + store write on a miss
};
CachedBinary compile_cached(const KernelSource& source, const std::string& arch,
                            cache::Store& store);

// ptxas' report as the JSON text the store keeps, and back.
std::string ptxas_stats_json(const std::vector<cuda::KernelStats>& kernels);
std::vector<cuda::KernelStats> ptxas_stats_from_json(const std::string& text);

}  // namespace kjit
