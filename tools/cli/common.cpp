#include <algorithm>
#include <functional>
#include <iostream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "kjit/cache/key.h"
#include "kjit/cache/store.h"
#include "kjit/runtime/compile.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/runtime/cuda/driver.h"
#include "kjit/support/error.h"
#include "kjit/support/files.h"
#include "kjit/templates/embedded.h"
#include "tools/cli/command.h"

// KJIT_GIT_COMMIT, written at every build (cmake/GitCommit.cmake).
#include "kjit_git_commit.h"

namespace kjit::cli {

int exit_code = 0;

namespace {
std::vector<std::pair<int, AddCommand>>& registry() {
  static std::vector<std::pair<int, AddCommand>> commands;
  return commands;
}
}  // namespace

bool register_command(int order, AddCommand add) {
  registry().emplace_back(order, add);
  return true;
}

namespace {

// Integers on the command line are decimal. CLI11 reads them with strtoll's base 0,
// so "--m 010" was M = 8 (octal) and "--top 0x10" 16; an integer past 64 bits was
// clamped to the largest. This transform runs first on every integer option: it
// drops leading zeros and refuses anything but an optional '-' and digits.
// `largest`: the type's largest value, as digits ("9223372036854775807" for INT,
// "18446744073709551615" for UINT, which takes no '-').
CLI::Validator decimal(const std::string& largest, bool is_signed) {
  return CLI::Validator(
      [largest, is_signed](std::string& text) -> std::string {
        const size_t digits = is_signed && text.rfind('-', 0) == 0 ? 1 : 0;
        if (text.size() == digits ||
            text.find_first_not_of("0123456789", digits) != std::string::npos)
          return "must be a decimal integer" + std::string(is_signed ? "" : " >= 0") + ", got '" +
                 text + "'";
        const size_t first = std::min(text.find_first_not_of('0', digits), text.size() - 1);
        text = text.substr(0, digits) + text.substr(first);
        if (text == "-0") text = "0";
        if (text.size() - digits > largest.size() ||
            (text.size() - digits == largest.size() && text.substr(digits) > largest))
          return "'" + text + "' is past the largest integer, " + largest;
        return "";
      },
      "", "decimal");
}

// An option given an empty value ("--window ''", a script's unset variable) is an
// error: each read "" as "not given" and went on with its default without a word.
const CLI::Validator kNotEmpty(
    [](std::string& text) -> std::string {
      return text.empty() ? "is empty; give a value, or leave the option out for its default" : "";
    },
    "", "not empty");

// Checks every option's value as above, at every level of subcommands.
void check_option_values(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();  // "INT:>= 1" with a validator
    if (type.rfind("INT", 0) == 0) option->transform(decimal("9223372036854775807", true));
    if (type.rfind("UINT", 0) == 0) option->transform(decimal("18446744073709551615", false));
    if (option->nonpositional() && option->get_type_size() > 0) option->transform(kNotEmpty);
  }
  for (CLI::App* sub : app.get_subcommands({})) check_option_values(*sub);
}

}  // namespace

void add_registered_commands(CLI::App& app) {
  std::vector<std::pair<int, AddCommand>> commands = registry();
  std::stable_sort(commands.begin(), commands.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [order, add] : commands) add(app);
  check_option_values(app);
}

namespace {
std::vector<DemoEntry>& demo_registry() {
  static std::vector<DemoEntry> sections;
  return sections;
}
}  // namespace

bool register_demo_section(int order, const char* title, DemoSection section) {
  demo_registry().push_back({order, title, section});
  return true;
}

std::vector<DemoEntry> demo_sections() {
  std::vector<DemoEntry> sections = demo_registry();
  std::stable_sort(sections.begin(), sections.end(),
                   [](const DemoEntry& a, const DemoEntry& b) { return a.order < b.order; });
  return sections;
}

void require_gpu(const std::string& what) {
  std::string reason;
  if (!gpu_available(&reason))
    throw NoGpu(what + " needs a GPU: " + reason,
                "kjit emit, compile and explain work without one (--arch sm_90, --gpu h200)");
}

std::string default_arch() {
  return gpu_available() ? cuda::device_properties(0).arch() : "sm_90";
}

std::string version_text() {
  std::string driver;
  std::string reason;
  if (cuda::Driver::available(&reason))
    driver = "driver " + cuda::Driver::get().version_string();
  else
    driver = "no driver (kjit info says why)";
  return fmt::format("kjit {} (commit {}), generator {}, NVRTC {}, {}", KJIT_VERSION,
                     KJIT_GIT_COMMIT, kGeneratorVersion, cuda::nvrtc_version(), driver);
}

std::string Target::describe() const {
  return fmt::format("{} ({} SMs, {}){}", device.name, device.sm_count, device.arch(),
                     planned ? " - planned from its datasheet: no GPU measured" : "");
}

Target command_target(const std::string& arch, const std::string& gpu) {
  Target t;
  if (!gpu.empty()) {
    t.device = cuda::planning_device(gpu);
    t.planned = true;
    if (!arch.empty() && arch != t.device.arch() && arch != t.device.arch() + "a")
      throw UserError(
          fmt::format("--arch {} does not match --gpu {}, an {} GPU", arch, gpu, t.device.arch()),
          "leave out --arch (it follows --gpu), or plan for a GPU of that "
          "architecture (--gpu h200 and h100: sm_90, a100: sm_80)");
  } else if (gpu_available() && (arch.empty() || arch == cuda::device_properties(0).arch() ||
                                 arch == cuda::device_properties(0).arch() + "a")) {
    t.device = cuda::device_properties(0);
  } else {
    t.device = cuda::planning_device_for_arch(arch.empty() ? "sm_90" : arch);
    t.planned = true;
  }
  t.gpu_model =
      cache::gpu_model(t.device.name, t.device.cc_major, t.device.cc_minor, t.device.sm_count);
  return t;
}

std::unique_ptr<tuner::Chooser> make_chooser(const Target& target) {
  return std::make_unique<tuner::Chooser>(cache::Store::open_default(), target.gpu_model,
                                          target.device);
}

namespace {

// The kjit templates `text` includes ("#include \"kjit/x.cuh\""), in order.
std::vector<std::string> included_templates(const std::string& text) {
  std::vector<std::string> names;
  size_t at = 0;
  while ((at = text.find("#include \"kjit/", at)) != std::string::npos) {
    const size_t start = at + std::string("#include \"").size();
    const size_t end = text.find('"', start);
    if (end == std::string::npos) break;
    names.push_back(text.substr(start, end - start));
    at = end;
  }
  return names;
}

}  // namespace

void report_family_compile(const std::string& family, const std::string& problem,
                           const std::vector<KernelSource>& sources, const std::string& config,
                           const std::string& config_source, const std::string& arch, bool json,
                           bool ptx, const nlohmann::json& extra, const std::string& note) {
  cuda::validate_arch(arch);
  std::vector<StoreCompile> programs;
  std::string names, ptx_text, cache = "hit";
  double ms = 0;
  size_t cubin_bytes = 0;
  int shared = 0;
  for (const KernelSource& source : sources) {
    programs.push_back(compile_with_store(source, arch, ptx));
    const StoreCompile& program = programs.back();
    names += (names.empty() ? "" : ",") + source.name;
    ptx_text += program.ptx;
    if (program.cache != "hit") cache = program.cache;
    ms += program.ms;
    cubin_bytes += program.cubin.size();
    shared = std::max(shared, source.dynamic_shared_bytes);
  }
  if (json) {
    nlohmann::json out = {{"family", family},
                          {"kernel", names},
                          {"problem", sources.front().problem},
                          {"config", config},
                          {"config_source", config_source},
                          {"arch", target_arch(sources.front(), arch)},
                          {"nvrtc_version", cuda::nvrtc_version()},
                          {"cache", cache},
                          {"compile_ms", ms},
                          {"cubin_bytes", cubin_bytes},
                          {"dynamic_shared_bytes", shared},
                          {"kernels", nlohmann::json::array()}};
    for (const StoreCompile& program : programs)
      for (const cuda::KernelStats& k : program.kernels) out["kernels"].push_back(stats_json(k));
    if (ptx) out["ptx"] = ptx_text;
    for (const auto& [key, value] : extra.items()) out[key] = value;
    return print_json(out);
  }
  if (ptx) {
    std::cout << ptx_text;
    return;
  }
  std::cout << note
            << fmt::format("{} {}\nconfig {} ({})\n", family, problem, config, config_source);
  for (size_t i = 0; i < sources.size(); ++i)
    std::cout << fmt::format("{}{} for {} in {:.0f} ms; {} B dynamic shared memory\n",
                             sources.size() > 1 ? sources[i].name + ": " : "",
                             programs[i].cache == "hit" ? "loaded from the store" : "compiled",
                             target_arch(sources[i], arch), programs[i].ms,
                             sources[i].dynamic_shared_bytes);
  std::vector<cuda::KernelStats> stats;
  for (const StoreCompile& program : programs)
    stats.insert(stats.end(), program.kernels.begin(), program.kernels.end());
  print_stats_table(stats);
}

void print_emitted(const std::string& source, const std::string& plan, bool templates) {
  std::cout << plan << source;
  if (!templates) return;
  std::map<std::string, std::string> available;
  for (const TemplateHeader& t : embedded_templates()) available[t.name] = t.content;
  // Depth first, each template once, a template before the ones that include it.
  std::set<std::string> printed;
  std::function<void(const std::string&)> visit = [&](const std::string& name) {
    if (!printed.insert(name).second) return;
    const auto found = available.find(name);
    if (found == available.end()) return;
    for (const std::string& inner : included_templates(found->second)) visit(inner);
    std::cout << "\n// ==== " << name << " (an embedded kjit template: templates/"
              << name.substr(name.find('/') + 1) << ") ====\n"
              << found->second;
  };
  for (const std::string& name : included_templates(source)) visit(name);
}

std::string roofline_verdict(const tuner::Work& work, double ridge, const std::string& bound) {
  // The roofline's side of the ridge, and, where the model's largest term is
  // another (its compute term counts the efficiency the tiles reach, not the
  // peak), that too: a decode matmul of 16 FLOP/B is memory-bound by the
  // roofline whatever its tiles waste.
  const std::string side = work.intensity() < ridge ? "memory" : "compute";
  return side + "-bound" + (bound == side ? "" : "; the model's largest term: " + bound);
}

std::string plan_comment(const cuda::DeviceProperties& device, const tuner::Prediction& p) {
  const std::string& gpu = device.name;
  std::string s =
      p.persistent_blocks > 0
          ? fmt::format(
                "// on {}: {} persistent blocks ({} resident per SM, limited by {}) walk {} work "
                "items, {:.2f} each\n",
                gpu, p.persistent_blocks, p.occupancy.blocks_per_sm, p.occupancy.limiter,
                p.waves.units,
                static_cast<double>(p.waves.units) / static_cast<double>(p.persistent_blocks))
          : fmt::format(
                "// on {}: {} thread blocks, {} resident per SM (limited by {}) -> {:.2f} waves "
                "-> {}, the last {:.0f}% full\n",
                gpu, p.waves.units, p.occupancy.blocks_per_sm, p.occupancy.limiter,
                p.waves.slots > 0
                    ? static_cast<double>(p.waves.units) / static_cast<double>(p.waves.slots)
                    : 0.0,
                p.waves.waves, 100.0 * p.waves.last_fill);
  const double ridge = tuner::rates_of(device).ridge();
  s += fmt::format(
      "// roofline: {:.3g} GFLOP over {:.4g} MB = {:.0f} FLOP/B (the ridge is {:.0f}) -> {}\n"
      "// the model predicts {:.4f} ms (kjit explain says why)\n",
      p.work.flops / 1e9, p.work.bytes / 1e6, p.work.intensity(), ridge,
      roofline_verdict(p.work, ridge, p.bound), p.ms);
  return s;
}

std::vector<cuda::SourceHeader> template_headers() {
  std::vector<cuda::SourceHeader> headers;
  for (const TemplateHeader& t : embedded_templates()) headers.push_back({t.name, t.content});
  return headers;
}

nlohmann::json stats_json(const cuda::KernelStats& k) {
  return {{"name", k.name},
          {"registers", k.registers},
          {"shared_bytes", k.shared_bytes},
          {"stack_bytes", k.stack_bytes},
          {"spill_store_bytes", k.spill_store_bytes},
          {"spill_load_bytes", k.spill_load_bytes},
          {"barriers", k.barriers},
          {"constant_bytes", k.constant_bytes}};
}

void print_stats_table(const std::vector<cuda::KernelStats>& kernels) {
  std::cout << fmt::format("{:<40} {:>5} {:>8} {:>6} {:>13}\n", "kernel", "regs", "smem B", "stack",
                           "spills st/ld");
  for (const cuda::KernelStats& k : kernels)
    std::cout << fmt::format("{:<40} {:>5} {:>8} {:>6} {:>6}/{:<6}\n", k.name, k.registers,
                             k.shared_bytes, k.stack_bytes, k.spill_store_bytes,
                             k.spill_load_bytes);
}

StoreCompile compile_with_store(const KernelSource& source, const std::string& arch,
                                bool want_ptx) {
  StoreCompile out;
  std::unique_ptr<cache::Store> store = want_ptx ? nullptr : cache::Store::open_default();
  // A store whose binaries are not trusted (it warned why) is as good as none here.
  if (store && store->binaries_trusted()) {
    CachedBinary binary = compile_cached(source, arch, *store);
    out.cubin = std::move(binary.cubin);
    out.kernels = std::move(binary.kernels);
    out.cache = binary.store_hit ? "hit" : "miss";
    out.ms = binary.ms;
    return out;
  }
  cuda::CompiledProgram program = compile_for_arch(source, arch);
  out.cubin = std::move(program.cubin);
  out.kernels = std::move(program.kernels);
  out.ptx = std::move(program.ptx);
  out.cache = "off";
  out.ms = program.compile_ms;
  return out;
}

std::string read_source_file(const std::string& path) {
  std::string text = read_regular_file(path, kMaxSourceBytes, "CUDA source");
  // NVRTC takes the source as a C string: what follows a NUL byte would be dropped
  // without a word (an #error there compiled fine).
  if (const size_t nul = text.find('\0'); nul != std::string::npos) {
    const int64_t line =
        1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(nul), '\n');
    throw UserError(fmt::format("'{}' holds a NUL byte (line {}); CUDA source is text", path, line),
                    "NVRTC would read the source only up to it");
  }
  return text;
}

void print_json(const nlohmann::json& value) {
  // Text from the user (an expression, a file name) may hold bytes that are not
  // UTF-8, which JSON cannot carry: each becomes U+FFFD rather than an error.
  std::cout << value.dump(2, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace)
            << "\n";
}

}  // namespace kjit::cli
