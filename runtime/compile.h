// KernelSource -> cubin, with kjit's templates as headers and the options that
// every generated kernel gets. Needs no GPU (used by `kjit compile --arch`).
#pragma once

#include <string>
#include <vector>

#include "compiler/kernel_source.h"
#include "runtime/cuda/nvrtc.h"

namespace kjit {

// The embedded templates as NVRTC headers.
const std::vector<cuda::SourceHeader>& template_headers();

// The NVRTC options a KernelSource is compiled with for `arch` (without the
// architecture itself, which nvrtc_compile adds): the source's own options,
// then KJIT_NVRTC_EXTRA_OPTIONS (space separated) and -lineinfo under KJIT_LINEINFO=1.
cuda::NvrtcOptions nvrtc_options_for(const KernelSource& source, const std::string& arch);

// Compiles `source` for `arch` ("sm_90", "sm_90a").
cuda::CompiledProgram compile_for_arch(const KernelSource& source, const std::string& arch);

// The binary cache key: everything that changes the cubin or its validity —
// source, options, arch, NVRTC version, generator version, codegen environment.
std::string binary_key(const KernelSource& source, const std::string& arch);

}  // namespace kjit
