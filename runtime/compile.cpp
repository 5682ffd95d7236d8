#include "kjit/runtime/compile.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <limits>
#include <sstream>

#include "kjit/cache/key.h"

#include "kjit/support/hash.h"
#include "kjit/support/json.h"
#include "kjit/support/options.h"
#include "kjit/templates/embedded.h"

namespace kjit {

const std::vector<cuda::SourceHeader>& template_headers() {
  static const std::vector<cuda::SourceHeader> headers = [] {
    std::vector<cuda::SourceHeader> out;
    for (const TemplateHeader& t : embedded_templates()) out.push_back({t.name, t.content});
    return out;
  }();
  return headers;
}

std::string target_arch(const KernelSource& source, const std::string& arch) {
  if (!source.arch_specific || arch.empty() || arch.back() == 'a' || arch.back() == 'f')
    return arch;
  return arch + "a";
}

cuda::NvrtcOptions nvrtc_options_for(const KernelSource& source, const std::string& arch) {
  cuda::NvrtcOptions options;
  options.arch = target_arch(source, arch);
  options.extra = source.options;
  if (std::optional<std::string> extra = env("KJIT_NVRTC_EXTRA_OPTIONS")) {
    std::istringstream words(*extra);
    for (std::string word; words >> word;) options.extra.push_back(word);
  }
  options.lineinfo = env_flag("KJIT_LINEINFO");
  return options;
}

cuda::CompiledProgram compile_for_arch(const KernelSource& source, const std::string& arch) {
  return cuda::nvrtc_compile(source.source, source.name + ".cu", nvrtc_options_for(source, arch),
                             template_headers());
}

std::string binary_key(const KernelSource& source, const std::string& arch) {
  // What does not change within a process is computed once: the NVRTC version,
  // the generator version joined with a hash of every template (part of the code
  // though only included), and the environment (read once, per STYLE).
  struct ProcessPart {
    std::string nvrtc_version, generator_version;
    std::vector<std::string> environment;
  };
  static const ProcessPart fixed = [] {
    KeyHasher templates;
    for (const cuda::SourceHeader& header : template_headers())
      templates.add(header.name).add(header.content);
    return ProcessPart{cuda::nvrtc_version(),
                       std::string(kGeneratorVersion) + "+templates-" + templates.hex(),
                       codegen_environment()};
  }();
  return cache::binary_key(source.source, source.options, target_arch(source, arch),
                           fixed.nvrtc_version, fixed.generator_version, fixed.environment);
}

std::string ptxas_stats_json(const std::vector<cuda::KernelStats>& kernels) {
  nlohmann::json out = nlohmann::json::array();
  for (const cuda::KernelStats& k : kernels)
    out.push_back({{"name", k.name},
                   {"registers", k.registers},
                   {"barriers", k.barriers},
                   {"shared_bytes", k.shared_bytes},
                   {"constant_bytes", k.constant_bytes},
                   {"stack_bytes", k.stack_bytes},
                   {"spill_store_bytes", k.spill_store_bytes},
                   {"spill_load_bytes", k.spill_load_bytes}});
  return out.dump();
}

namespace {

// `object[name]` when it is an integer an int holds, else 0. The text comes from
// the store, where nothing vouches for it (the MAC covers the key and the cubin
// only): json::value() threw type_error for "registers": "32", and every hit of
// that binary ended kjit with an internal error.
int int_field(const nlohmann::json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || !it->is_number_integer()) return 0;
  const int64_t value = it->get<int64_t>();
  return value >= std::numeric_limits<int>::min() && value <= std::numeric_limits<int>::max()
             ? static_cast<int>(value)
             : 0;
}

}  // namespace

std::vector<cuda::KernelStats> ptxas_stats_from_json(const std::string& text) {
  std::vector<cuda::KernelStats> out;
  nlohmann::json parsed = parse_json(text, /*allow_exceptions=*/false);
  if (!parsed.is_array()) return out;
  for (const nlohmann::json& k : parsed) {
    if (!k.is_object()) continue;
    cuda::KernelStats stats;
    auto name = k.find("name");
    if (name != k.end() && name->is_string()) stats.name = name->get<std::string>();
    stats.registers = int_field(k, "registers");
    stats.barriers = int_field(k, "barriers");
    stats.shared_bytes = int_field(k, "shared_bytes");
    stats.constant_bytes = int_field(k, "constant_bytes");
    stats.stack_bytes = int_field(k, "stack_bytes");
    stats.spill_store_bytes = int_field(k, "spill_store_bytes");
    stats.spill_load_bytes = int_field(k, "spill_load_bytes");
    out.push_back(stats);
  }
  return out;
}

CachedBinary compile_cached(const KernelSource& source, const std::string& arch,
                            cache::Store& store) {
  auto started = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
        .count();
  };
  CachedBinary out;
  out.key = binary_key(source, arch);
  if (std::optional<cache::BinaryRecord> hit = store.find_binary(out.key)) {
    out.cubin = std::move(hit->cubin);
    out.kernels = ptxas_stats_from_json(hit->ptxas_stats);
    out.store_hit = true;
    out.ms = elapsed_ms();
    return out;
  }
  cuda::CompiledProgram program = compile_for_arch(source, arch);
  cache::BinaryRecord record;
  record.key = out.key;
  record.cubin = program.cubin;
  record.source = source.source;
  record.nvrtc_log = program.log;
  record.options = program.options;
  record.arch = target_arch(source, arch);
  record.nvrtc_version = cuda::nvrtc_version();
  record.generator_version = kGeneratorVersion;
  record.ptxas_stats = ptxas_stats_json(program.kernels);
  store.put_binary(record);
  out.cubin = std::move(program.cubin);
  out.kernels = std::move(program.kernels);
  out.ptx = std::move(program.ptx);
  out.ms = elapsed_ms();
  return out;
}

}  // namespace kjit
