// The cache key of a compiled binary: everything that changes the code NVRTC
// produces or whether it may be reused.
#pragma once

#include <string>
#include <vector>

namespace kjit::cache {

// 32 lowercase hex digits: XXH3-128 over the length-prefixed parts (so "ab"+"c"
// and "a"+"bc" differ), preceded by a key-format tag that changes whenever the
// recipe below does. `options` are the NVRTC options beyond the architecture, in
// the order given (order can matter to NVRTC); `codegen_environment` is
// kjit::codegen_environment() — every variable that changes generated code.
std::string binary_key(const std::string& source, const std::vector<std::string>& options,
                       const std::string& arch, const std::string& nvrtc_version,
                       const std::string& generator_version,
                       const std::vector<std::string>& codegen_environment);

// The canonical name of a GPU model, the key of tunings and devices:
// "NVIDIA H200 cc9.0 132SM". Tunings depend on the SM count (wave quantization),
// so two parts that differ only in SM count are different models.
std::string gpu_model(const std::string& name, int cc_major, int cc_minor, int sm_count);

}  // namespace kjit::cache
