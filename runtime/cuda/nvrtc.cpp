#include "kjit/runtime/cuda/nvrtc.h"

#include <fmt/format.h>
#include <nvrtc.h>

#include <chrono>
#include <memory>
#include <regex>
#include <set>
#include <sstream>

#include "kjit/runtime/cuda/device.h"
#include "kjit/support/error.h"

namespace kjit::cuda {

namespace {

void check_nvrtc(nvrtcResult result, const char* call) {
  if (result != NVRTC_SUCCESS)
    throw InternalError(std::string(call) + " failed: " + nvrtcGetErrorString(result));
}

struct ProgramDeleter {
  void operator()(nvrtcProgram* program) const {
    nvrtcDestroyProgram(program);
    delete program;
  }
};

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check_nvrtc(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<int> nvrtc_supported_archs() {
  int count = 0;
  check_nvrtc(nvrtcGetNumSupportedArchs(&count), "nvrtcGetNumSupportedArchs");
  std::vector<int> archs(static_cast<size_t>(count));
  check_nvrtc(nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs");
  return archs;
}

bool nvrtc_has_driver_cache() {
  static const bool has_cache = [] {
    int major = 0, minor = 0;
    check_nvrtc(nvrtcVersion(&major, &minor), "nvrtcVersion");
    return major > 12 || (major == 12 && minor >= 9);
  }();
  return has_cache;
}

void validate_arch(const std::string& arch) {
  std::vector<int> supported = nvrtc_supported_archs();
  bool ok = false;
  if (const std::optional<int> parsed = arch_number(arch)) {
    const int number = *parsed;
    for (int s : supported) ok = ok || s == number;
    // Architecture-specific ('a') targets begin at sm_90, family ('f') ones at sm_100:
    // NVRTC's "sm_80a" error names a flag, not the architecture.
    const char suffix = arch.back();
    if (ok && ((suffix == 'a' && number < 90) || (suffix == 'f' && number < 100)))
      throw UserError(
          fmt::format("GPU architecture '{}' does not exist: '{}' targets begin at "
                      "sm_{}",
                      arch, suffix, suffix == 'a' ? 90 : 100),
          fmt::format("use sm_{} (the 'a' and 'f' variants are for Hopper and later)", number));
  }
  if (ok) return;
  std::string list;
  for (int s : supported) list += (list.empty() ? "sm_" : ", sm_") + std::to_string(s);
  throw UserError(
      "unknown GPU architecture '" + arch + "'; NVRTC " + nvrtc_version() + " supports " + list,
      "append 'a' (sm_90a) for architecture-specific instructions such as wgmma");
}

std::vector<KernelStats> parse_ptxas_stats(const std::string& log) {
  // ptxas info    : Compiling entry function 'NAME' for 'sm_90'
  // ptxas info    : Function properties for NAME
  // ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
  // ptxas info    : Used 32 registers, used 1 barriers, 16 bytes smem, 368 bytes cmem[0]
  // Out-of-line device functions get "Function properties" too, with no "Compiling
  // entry function" line: they are not kernels, and are skipped.
  static const std::regex entry_re(R"(Compiling entry function '([^']+)')");
  static const std::regex function_re(R"(Function properties for (\S+))");
  static const std::regex frame_re(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used_re(R"(Used (\d+) registers)");
  static const std::regex barriers_re(R"(used (\d+) barriers)");
  static const std::regex smem_re(R"((\d+) bytes smem)");
  static const std::regex cmem_re(R"((\d+) bytes cmem\[0\])");
  std::vector<KernelStats> out;
  std::set<std::string> entries;
  std::smatch m;
  bool in_kernel = false;
  for (const std::string& line : split_lines(log)) {
    if (std::regex_search(line, m, entry_re)) {
      entries.insert(m[1].str());
    } else if (std::regex_search(line, m, function_re)) {
      in_kernel = entries.count(m[1].str()) > 0;
      if (in_kernel) out.push_back(KernelStats{m[1].str()});
    } else if (!in_kernel) {
      continue;
    } else if (std::regex_search(line, m, frame_re)) {
      out.back().stack_bytes = std::stoi(m[1]);
      out.back().spill_store_bytes = std::stoi(m[2]);
      out.back().spill_load_bytes = std::stoi(m[3]);
    } else if (std::regex_search(line, m, used_re)) {
      out.back().registers = std::stoi(m[1]);
      if (std::regex_search(line, m, barriers_re)) out.back().barriers = std::stoi(m[1]);
      if (std::regex_search(line, m, smem_re)) out.back().shared_bytes = std::stoi(m[1]);
      if (std::regex_search(line, m, cmem_re)) out.back().constant_bytes = std::stoi(m[1]);
    }
  }
  return out;
}

std::string annotate_log(const std::string& log, const std::string& source,
                         const std::string& file_name) {
  std::vector<std::string> source_lines = split_lines(source);
  const std::regex location(
      "^" + std::regex_replace(file_name, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
      R"(\((\d+)\): )");
  std::string out;
  std::smatch m;
  for (const std::string& line : split_lines(log)) {
    out += line + "\n";
    if (std::regex_search(line, m, location)) {
      size_t number = std::stoul(m[1]);
      if (number >= 1 && number <= source_lines.size())
        out += "  " + std::to_string(number) + " | " + source_lines[number - 1] + "\n";
    }
  }
  return out;
}

CompiledProgram nvrtc_compile(const std::string& source, const std::string& file_name,
                              const NvrtcOptions& options,
                              const std::vector<SourceHeader>& headers) {
  validate_arch(options.arch);
  auto started = std::chrono::steady_clock::now();

  std::vector<const char*> header_sources, header_names;
  for (const SourceHeader& h : headers) {
    header_sources.push_back(h.content.c_str());
    header_names.push_back(h.name.c_str());
  }
  std::unique_ptr<nvrtcProgram, ProgramDeleter> program(new nvrtcProgram{});
  check_nvrtc(nvrtcCreateProgram(program.get(), source.c_str(), file_name.c_str(),
                                 static_cast<int>(headers.size()), header_sources.data(),
                                 header_names.data()),
              "nvrtcCreateProgram");

  CompiledProgram out;
  out.options = {"--gpu-architecture=" + options.arch, "-std=c++17", "--ptxas-options=-v",
                 "-default-device"};
  // NVRTC 12.9+ keeps compiled programs in the driver's compute cache when a
  // driver is present, and a cached compile prints no ptxas report, so kernels
  // would come back without their register and spill counts (seen on the H200).
  // kjit has its own store (cache/), so NVRTC's is turned off.
  if (nvrtc_has_driver_cache()) out.options.push_back("--no-cache");
  if (options.lineinfo) out.options.push_back("-lineinfo");
  out.options.insert(out.options.end(), options.extra.begin(), options.extra.end());
  std::vector<const char*> argv;
  for (const std::string& o : out.options) argv.push_back(o.c_str());

  nvrtcResult result = nvrtcCompileProgram(*program, static_cast<int>(argv.size()), argv.data());
  size_t log_size = 0;
  check_nvrtc(nvrtcGetProgramLogSize(*program, &log_size), "nvrtcGetProgramLogSize");
  std::string log(log_size, '\0');
  check_nvrtc(nvrtcGetProgramLog(*program, log.data()), "nvrtcGetProgramLog");
  while (!log.empty() && log.back() == '\0') log.pop_back();

  if (result != NVRTC_SUCCESS) {
    std::string annotated = annotate_log(log, source, file_name);
    throw CompileError(
        "NVRTC could not compile " + file_name + " for " + options.arch + ":\n" + annotated, log,
        source, out.options);
  }

  size_t cubin_size = 0;
  check_nvrtc(nvrtcGetCUBINSize(*program, &cubin_size), "nvrtcGetCUBINSize");
  out.cubin.resize(cubin_size);
  check_nvrtc(nvrtcGetCUBIN(*program, out.cubin.data()), "nvrtcGetCUBIN");
  size_t ptx_size = 0;
  if (nvrtcGetPTXSize(*program, &ptx_size) == NVRTC_SUCCESS && ptx_size > 1) {
    out.ptx.resize(ptx_size);
    check_nvrtc(nvrtcGetPTX(*program, out.ptx.data()), "nvrtcGetPTX");
    while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  }
  out.log = log;
  out.kernels = parse_ptxas_stats(log);
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return out;
}

}  // namespace kjit::cuda
