#include "runtime/compile.h"

#include <sstream>

#include "support/hash.h"
#include "support/options.h"
#include "templates/embedded.h"

namespace kjit {

const std::vector<cuda::SourceHeader>& template_headers() {
  static const std::vector<cuda::SourceHeader> headers = [] {
    std::vector<cuda::SourceHeader> out;
    for (const TemplateHeader& t : embedded_templates()) out.push_back({t.name, t.content});
    return out;
  }();
  return headers;
}

cuda::NvrtcOptions nvrtc_options_for(const KernelSource& source, const std::string& arch) {
  cuda::NvrtcOptions options;
  options.arch = arch;
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
  // What does not change within a process is hashed once: the NVRTC version, the
  // generator version, the templates (part of the code though only included) and
  // the environment (read once, per STYLE).
  static const std::string process_part = [] {
    KeyHasher fixed;
    fixed.add(cuda::nvrtc_version()).add(kGeneratorVersion);
    for (const cuda::SourceHeader& header : template_headers())
      fixed.add(header.name).add(header.content);
    for (const std::string& variable : codegen_environment()) fixed.add(variable);
    return fixed.hex();
  }();
  KeyHasher key;
  key.add(process_part).add(source.source).add(arch);
  for (const std::string& option : source.options) key.add(option);
  return key.hex();
}

}  // namespace kjit
