// kjit lesson NAME [--dry-run] [--gpu h200] [--out DIR] [--plot] — an idea of the
// lecture measured on this GPU with kjit's own kernels: each lesson is a list of
// problems (family specs, as workload files hold them) and configs; it prints a
// table, writes NAME.csv and NAME.json under --out, and with --plot draws them
// (tools/lessons/plot.py, matplotlib).
//
//   kjit lesson --list
//   kjit lesson fusion             # measure (needs a GPU)
//   kjit lesson waves --dry-run    # the kernels and the model's predictions only
//
// Without a GPU a lesson says so and shows its dry run (exit 0).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <vector>

#include "kjit/runtime/tuning.h"
#include "kjit/support/error.h"
#include "kjit/tuner/family.h"
#include "kjit/tuner/measure.h"
#include "kjit/tuner/model.h"
#include "tools/cli/command.h"

namespace kjit::cli {

namespace {

// The plot script, in the sources this kjit was built from.
std::string plot_script() {
  return std::string(KJIT_SOURCE_DIR) + "/tools/lessons/plot.py";
}

// Runs `args` (args[0] found on PATH) without a shell, so that no argument (an --out
// path, say) is read as shell syntax; "" when it exits 0, else what went wrong.
std::string run_program(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (const int rc = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ); rc != 0)
    return fmt::format("{} could not start ({})", args[0], std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return fmt::format("waiting for {} failed ({})", args[0], std::strerror(errno));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  return WIFEXITED(status) ? fmt::format("{} exited with {}", args[0], WEXITSTATUS(status))
                           : fmt::format("{} ended by signal {}", args[0], WTERMSIG(status));
}

// `args` as one line a POSIX shell reads back as the same arguments.
std::string shell_quoted(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) {
    if (!out.empty()) out += ' ';
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

// One point of a lesson: a problem (a family spec), a config ("" = the tuner's
// choice), the series it belongs to and its x value.
struct Point {
  std::string series;
  double x = 0;
  nlohmann::json spec;
  std::string config;
};

struct Lesson {
  const char* name;
  const char* claim;     // the idea, one line
  const char* x_label;   // what x is; a point with x < 0 takes its arithmetic intensity
  const char* y_metric;  // "ms", "GB/s" or "TFLOP/s"
  std::vector<Point> (*points)();
  // An extra column computed from a point's problem (e.g. the memory a stored
  // S x S matrix would take), and its heading; null: none.
  double (*extra)(const nlohmann::json& spec) = nullptr;
  const char* extra_label = nullptr;
};

nlohmann::json elementwise(const std::string& expr, const std::string& dtype, int64_t n) {
  return {{"family", "elementwise"}, {"expr", expr}, {"dtype", dtype}, {"sizes", {{"n", n}}}};
}
nlohmann::json matmul(int64_t m, int64_t n, int64_t k, const std::string& dtype = "bf16") {
  return {{"family", "matmul"}, {"m", m}, {"n", n}, {"k", k}, {"dtype", dtype}};
}

// A chain of `ops` multiply-adds on x: fused, one kernel reads x and writes y once.
std::string chain(int ops) {
  std::string e = "x";
  for (int i = 0; i < ops; ++i) e = fmt::format("({} * 1.0001 + 0.5)", e);
  return "y = " + e;
}

std::vector<Point> fusion_points() {
  std::vector<Point> out;
  const int64_t n = int64_t{1} << 26;
  for (int ops : {1, 2, 4, 8, 16}) {
    out.push_back({"fused (one kernel)", double(ops), elementwise(chain(ops), "f32", n), ""});
    // Unfused: `ops` kernels of one op each; the lesson sums them (same x).
    for (int i = 0; i < ops; ++i)
      out.push_back({"one kernel per op", double(ops), elementwise(chain(1), "f32", n), ""});
  }
  return out;
}

// The same copy, y = x, reading x with unit stride, every k-th element, and as a
// transposed matrix: the useful bytes per second fall as a warp's 32 loads spread
// over more 32-byte sectors.
std::vector<Point> coalescing_points() {
  std::vector<Point> out;
  const int64_t n = int64_t{1} << 24;
  for (int64_t stride : {1, 2, 4, 8, 16, 32}) {
    nlohmann::json spec = elementwise("x:f32[n]; y = x", "f32", n);
    spec["strides"] = {{"x", {stride}}};
    out.push_back({"1-D copy reading every k-th float", double(stride), spec, ""});
  }
  const int64_t side = 4096;
  nlohmann::json transpose = {{"family", "elementwise"},
                              {"expr", "x:f32[m,n]; y = x"},
                              {"sizes", {{"m", side}, {"n", side}}},
                              {"strides", {{"x", {1, side}}}}};
  out.push_back({"4096 x 4096 transpose (x read column-wise)", double(side), transpose, ""});
  nlohmann::json straight = transpose;
  straight["strides"] = {{"x", {side, 1}}};
  out.push_back({"4096 x 4096 copy, strides given (row-wise)", 1, straight, ""});
  return out;
}

std::vector<Point> vectorization_points() {
  std::vector<Point> out;
  const int64_t n = int64_t{1} << 28;
  for (int vec : {1, 2, 4}) {  // f32: 4, 8, 16 bytes per access
    out.push_back(
        {"f32 copy", double(4 * vec), elementwise("y = x", "f32", n), fmt::format("vec={}", vec)});
  }
  for (int vec : {1, 2, 4, 8}) {  // bf16: 2 .. 16 bytes per access
    out.push_back({"bf16 copy", double(2 * vec), elementwise("y = x", "bf16", n),
                   fmt::format("vec={}", vec)});
  }
  return out;
}

std::vector<Point> waves_points() {
  std::vector<Point> out;
  for (int64_t n = 4096; n <= 4352; n += 32) {
    out.push_back({"fixed 128x256 tiles", double(n), matmul(4096, n, 4096),
                   "mma=wgmma,bm=128,bn=256,bk=64,stages=4"});
    out.push_back({"the tuner's choice", double(n), matmul(4096, n, 4096), ""});
  }
  return out;
}

std::vector<Point> tiling_points() {
  // Block tiles of the mma.sync engine, by area (bm x bn).
  const std::pair<int, const char*> tiles[] = {
      {64 * 64, "mma=sync,bm=64,bn=64,bk=32,warps=4,wm=2,stages=3"},
      {128 * 128, "mma=sync,bm=128,bn=128,bk=32,warps=8,wm=2,stages=3"},
      {128 * 256, "mma=sync,bm=128,bn=256,bk=32,warps=8,wm=2,stages=3"}};
  std::vector<Point> out;
  for (const auto& [area, config] : tiles)
    out.push_back({"mma.sync block tiles", double(area), matmul(4096, 4096, 4096), config});
  return out;
}

std::vector<Point> low_precision_points() {
  return {{"f32 (CUDA cores, exact)", 32, matmul(4096, 4096, 4096, "f32"), ""},
          {"tf32 (tensor cores)", 19, matmul(4096, 4096, 4096, "tf32"), ""},
          {"bf16 (tensor cores)", 16, matmul(4096, 4096, 4096, "bf16"), ""}};
}

std::vector<Point> padding_points() {
  return {{"N = 50257 (rows of 100514 bytes)", 50257, matmul(2048, 50257, 768), ""},
          {"N = 50304 (a multiple of 64)", 50304, matmul(2048, 50304, 768), ""}};
}

std::vector<Point> online_softmax_points() {
  std::vector<Point> out;
  for (int64_t s : {512, 1024, 2048, 4096, 8192, 16384}) {
    nlohmann::json spec = {{"family", "attention"},
                           {"batch", std::max<int64_t>(1, 16384 / s)},
                           {"heads", 16},
                           {"seq_q", s},
                           {"head_dim", 128}};
    out.push_back({"flash attention (S x S never stored)", double(s), spec, ""});
  }
  return out;
}

nlohmann::json attention_spec(int64_t s, bool backward) {
  nlohmann::json spec = {{"family", "attention"},
                         {"batch", std::max<int64_t>(1, 16384 / s)},
                         {"heads", 16},
                         {"seq_q", s},
                         {"head_dim", 128}};
  if (backward) spec["backward"] = true;
  return spec;
}

// The backward pass recomputes P = exp(scale · Q Kᵀ − LSE) tile by tile; storing P
// instead would take batch x heads x S² 16-bit values. Measured: the backward pass
// and, beside it, the forward pass — what recomputing S = Q Kᵀ costs at most (the
// forward does that product and P V).
std::vector<Point> recompute_points() {
  std::vector<Point> out;
  for (int64_t s : {512, 1024, 2048, 4096, 8192}) {
    out.push_back({"backward, P recomputed", double(s), attention_spec(s, true), ""});
    out.push_back({"forward (bounds the recompute)", double(s), attention_spec(s, false), ""});
  }
  return out;
}

// MB an S_q x S_k matrix of 16-bit values per (batch, head) would take.
double score_matrix_mb(const nlohmann::json& spec) {
  if (spec.value("family", "") != "attention") return 0;
  const double batch = spec.value("batch", 1), heads = spec.value("heads", 1);
  const double seq_q = spec.value("seq_q", 0), seq_k = spec.value("seq_k", seq_q);
  return batch * heads * seq_q * seq_k * 2 / 1e6;
}

// Kernels of all three families at their arithmetic intensity (FLOP per byte of
// DRAM traffic the model counts): short elementwise chains far left of the ridge,
// matmul and attention right of it.
std::vector<Point> roofline_points() {
  const int64_t n = int64_t{1} << 26;
  return {{"elementwise", -1, elementwise(chain(1), "f32", n), ""},
          {"elementwise", -1, elementwise(chain(16), "f32", n), ""},
          {"elementwise", -1, elementwise(chain(64), "f32", n), ""},
          {"matmul", -1, matmul(4096, 4096, 256), ""},
          {"matmul", -1, matmul(4096, 4096, 1024), ""},
          {"matmul", -1, matmul(8192, 8192, 8192), ""},
          {"attention", -1, attention_spec(512, false), ""},
          {"attention", -1, attention_spec(8192, false), ""}};
}

const std::vector<Lesson>& lessons() {
  static const std::vector<Lesson> all = {
      {"fusion", "a chain fused into one kernel moves its bytes once: time stays flat as ops grow",
       "ops in the chain", "ms", fusion_points},
      {"coalescing",
       "a warp's 32 loads of adjacent addresses are one transaction; strided ones are 32",
       "stride (elements)", "GB/s", coalescing_points},
      {"vectorization",
       "wider accesses (up to 16 bytes) reach the copy bandwidth with fewer instructions",
       "bytes per access", "GB/s", vectorization_points},
      {"roofline", "every kernel sits under min(peak FLOP/s, bandwidth x intensity)", "FLOP/B",
       "TFLOP/s", roofline_points},
      {"tiling",
       "bigger tiles re-read A and B less: less traffic per FLOP, until registers run out",
       "tile area (bm x bn)", "TFLOP/s", tiling_points},
      {"low-precision",
       "16-bit inputs with fp32 accumulation run on the tensor cores at many times the f32 rate",
       "mantissa+1 bits", "TFLOP/s", low_precision_points},
      {"padding",
       "rows that are not whole 16-byte chunks cost a copy or narrow loads; padding N costs "
       "nothing",
       "N", "TFLOP/s", padding_points},
      {"waves",
       "tiles / (SMs x resident blocks) rounds up: a shape just past a whole wave pays for one "
       "more",
       "N", "TFLOP/s", waves_points},
      {"online-softmax", "flash attention never stores the S x S scores: memory stays linear in S",
       "sequence length", "TFLOP/s", online_softmax_points, score_matrix_mb,
       "S x S would take (MB)"},
      {"recompute", "the backward pass recomputes P from the log-sum-exp instead of storing it",
       "sequence length", "ms", recompute_points, score_matrix_mb, "P would take (MB)"},
  };
  return all;
}

const Lesson& find_lesson(const std::string& name) {
  std::string names;
  for (const Lesson& l : lessons()) {
    if (name == l.name) return l;
    names += (names.empty() ? "" : ", ") + std::string(l.name);
  }
  throw UserError("no lesson named '" + name + "'", "the lessons are " + names);
}

struct Row {
  Point point;
  std::string family, signature, config, config_source;
  double predicted_ms = 0, measured_ms = 0;
  double flops = 0, bytes = 0;
  std::string error;
};

double metric(const Lesson& lesson, const Row& row, double ms) {
  if (!(ms > 0)) return 0;
  if (std::string(lesson.y_metric) == "GB/s") return row.bytes / (ms * 1e-3) / 1e9;
  if (std::string(lesson.y_metric) == "TFLOP/s") return row.flops / (ms * 1e-3) / 1e12;
  return ms;
}

struct LessonOptions {
  std::string name;
  bool list = false, dry_run = false, plot = false;
  std::string gpu, out = "lessons";
};

// Creates `folder` (and its parents) where it is missing; a UserError naming it when
// it cannot be made or is not a folder kjit may write into.
void prepare_output_folder(const std::string& folder) {
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  if (error)
    throw UserError(
        fmt::format("cannot create the output folder '{}': {}", folder, error.message()),
        "--out names a folder kjit may create or write into");
  if (!std::filesystem::is_directory(folder, error))
    throw UserError(fmt::format("the output path '{}' is not a folder", folder),
                    "--out names a folder; NAME.csv and NAME.json are written into it");
  if (access(folder.c_str(), W_OK | X_OK) != 0)
    throw UserError(
        fmt::format("cannot write into the output folder '{}': {}", folder, std::strerror(errno)),
        "--out names a folder kjit may write into");
}

void lesson_command(const LessonOptions& o) {
  if (o.list || o.name.empty()) {
    for (const Lesson& l : lessons()) std::cout << fmt::format("{:<15} {}\n", l.name, l.claim);
    if (o.name.empty() && !o.list)
      std::cout << "\nkjit lesson NAME runs one (--dry-run: without measuring)\n";
    return;
  }
  const Lesson& lesson = find_lesson(o.name);
  // The output folder first: a lesson's measurements are not thrown away because
  // the files cannot be written at the end.
  prepare_output_folder(o.out);
  std::string why;
  const bool measure = !o.dry_run && gpu_available(&why);
  if (!o.dry_run && !measure)
    std::cout << "kjit lesson " << lesson.name << " needs a GPU to measure (" << why
              << "); the dry run follows: the kernels and the model's predictions\n\n";
  const Target target = command_target("", measure ? "" : (o.gpu.empty() ? "h200" : o.gpu));
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<tuner::Chooser> planning;
  if (measure) {
    runtime = std::make_unique<Runtime>();
  } else {
    planning = make_chooser(target);
  }
  tuner::Chooser& chooser = runtime ? runtime->chooser() : *planning;

  std::vector<Row> rows;
  for (const Point& point : lesson.points()) {
    Row row;
    row.point = point;
    const std::unique_ptr<tuner::TuningProblem> problem = tuner::make_problem(point.spec);
    row.family = problem->family();
    row.signature = problem->signature();
    if (point.config.empty()) {
      const tuner::Choice choice = chooser.choose(*problem);
      row.config = choice.config;
      row.config_source = tuner::to_string(choice.source);
    } else {
      row.config = problem->canonical(point.config);
      row.config_source = "given";
    }
    const tuner::Prediction p =
        problem->predict(row.config, chooser.device(), *chooser.efficiencies());
    row.predicted_ms = p.ms;
    row.flops = p.work.flops;
    row.bytes = p.work.bytes;
    if (row.point.x < 0) row.point.x = p.work.bytes > 0 ? p.work.flops / p.work.bytes : 0;
    if (measure) {
      std::unique_ptr<tuner::Harness> harness = make_harness(*runtime, *problem);
      const std::vector<tuner::Measured> m =
          tuner::measure(*harness, {row.config}, runtime->device(), tuner::TimerOptions{});
      if (m.empty() || !m[0].ok()) {
        row.error = m.empty() ? "not measured" : m[0].error;
      } else {
        row.measured_ms = m[0].summary.median_ms;
      }
    }
    rows.push_back(std::move(row));
  }

  // Points of one series at one x add up (the unfused chain's kernels).
  struct Total {
    std::string series;
    double x = 0, predicted_ms = 0, measured_ms = 0, flops = 0, bytes = 0;
    std::string configs;
    double extra = 0;
  };
  std::vector<Total> totals;
  for (const Row& r : rows) {
    auto it = std::find_if(totals.begin(), totals.end(), [&](const Total& t) {
      return t.series == r.point.series && t.x == r.point.x;
    });
    if (it == totals.end()) {
      totals.push_back({r.point.series, r.point.x, 0, 0, 0, 0, r.config,
                        lesson.extra ? lesson.extra(r.point.spec) : 0.0});
      it = totals.end() - 1;
    } else if (it->configs != r.config) {
      it->configs += " + " + r.config;
    }
    it->predicted_ms += r.predicted_ms;
    it->measured_ms += r.measured_ms;
    it->flops += r.flops;
    it->bytes += r.bytes;
  }

  const std::string base = (std::filesystem::path(o.out) / lesson.name).string();
  std::ofstream csv(base + ".csv");
  // The metric's columns after the times, unless the metric is the time itself (the
  // header repeated predicted_ms and measured_ms). A time not measured (no GPU, a
  // dry run) is empty, not 0.
  const std::string metric_name = lesson.y_metric;
  const bool metric_columns = metric_name != "ms";
  csv << "series,x,predicted_ms,measured_ms"
      << (metric_columns ? ",predicted_" + metric_name + ",measured_" + metric_name : "")
      << ",config" << (lesson.extra ? ",extra" : "") << "\n";
  nlohmann::json json = {{"lesson", lesson.name},
                         {"claim", lesson.claim},
                         {"x", lesson.x_label},
                         {"metric", lesson.y_metric},
                         {"gpu", chooser.device().name},
                         {"measured", measure},
                         {"points", nlohmann::json::array()}};
  std::cout << fmt::format("lesson {}: {}\n{} ({})\n", lesson.name, lesson.claim, target.describe(),
                           measure ? "measured" : "the model's predictions");
  {
    const tuner::DeviceRates rates = tuner::rates_of(chooser.device());
    const double peak =
        rates.tensor_flops_per_sm_clock * rates.sm_clock_hz * chooser.device().sm_count;
    std::cout << fmt::format(
        "roofline of this GPU: {:.0f} TFLOP/s (16-bit tensor cores) and {:.2f} "
        "TB/s of DRAM: the ridge is at {:.0f} FLOP/B\n\n",
        peak / 1e12, rates.dram_bytes_per_s / 1e12, peak / rates.dram_bytes_per_s);
    json["peak_tflops"] = peak / 1e12;
    json["dram_tb_per_s"] = rates.dram_bytes_per_s / 1e12;
  }
  const std::string unit = lesson.y_metric;
  std::cout << fmt::format(
      "{:<40} {:>18} {:>20}{}{}  {}\n", "series", lesson.x_label, "predicted " + unit,
      measure ? fmt::format(" {:>20}", "measured " + unit) : "",
      lesson.extra ? fmt::format(" {:>22}", lesson.extra_label) : "", "config");
  for (const Total& t : totals) {
    Row as_row;
    as_row.flops = t.flops;
    as_row.bytes = t.bytes;
    const double predicted = metric(lesson, as_row, t.predicted_ms);
    const double measured = metric(lesson, as_row, t.measured_ms);
    std::cout << fmt::format("{:<40} {:>18.4g} {:>20.4g}{}{}  {}\n", t.series, t.x, predicted,
                             measure ? fmt::format(" {:>20.4g}", measured) : "",
                             lesson.extra ? fmt::format(" {:>22.4g}", t.extra) : "", t.configs);
    const std::string measured_ms = measure ? fmt::format("{}", t.measured_ms) : "";
    csv << fmt::format("\"{}\",{},{},{}{},\"{}\"{}\n", t.series, t.x, t.predicted_ms, measured_ms,
                       metric_columns ? fmt::format(",{},{}", predicted,
                                                    measure ? fmt::format("{}", measured) : "")
                                      : "",
                       t.configs, lesson.extra ? fmt::format(",{}", t.extra) : "");
    nlohmann::json point = {
        {"series", t.series},           {"x", t.x},         {"predicted_ms", t.predicted_ms},
        {"measured_ms", t.measured_ms}, {"flops", t.flops}, {"bytes", t.bytes},
        {"config", t.configs}};
    if (lesson.extra) point[lesson.extra_label] = t.extra;
    json["points"].push_back(point);
  }
  for (const Row& r : rows)
    if (!r.error.empty()) std::cout << "failed: " << r.point.series << ": " << r.error << "\n";
  std::ofstream json_file(base + ".json");
  json_file << json.dump(2) << "\n";
  csv.close();
  json_file.close();
  if (csv.fail() || json_file.fail())
    throw UserError(fmt::format("cannot write '{}.csv' and '{}.json'", base, base),
                    "is the disk full? --out names another folder");
  std::cout << fmt::format("\nwrote {}.csv and {}.json\n", base, base);
  if (o.plot) {
    std::vector<std::string> args = {"python3",      plot_script(), base + ".csv",
                                     "--title",      lesson.name,   "--x",
                                     lesson.x_label, "--y",         lesson.y_metric};
    if (std::string(lesson.name) == "roofline")
      for (std::string arg : {std::string("--log"), std::string("--roof"),
                              fmt::format("{},{}", json["peak_tflops"].get<double>(),
                                          json["dram_tb_per_s"].get<double>())})
        args.push_back(arg);
    if (const std::string failure = run_program(args); !failure.empty())
      std::cout << fmt::format(
          "no plot: {} (it needs Python 3 with matplotlib: pip install "
          "matplotlib); the command:\n  {}\n",
          failure, shell_quoted(args));
  }
}

void add_lesson_command(CLI::App& app) {
  auto options = std::make_shared<LessonOptions>();
  CLI::App* cmd = app.add_subcommand(
      "lesson",
      "Measure an idea of the lecture (fusion, waves, ...) on this GPU with kjit's "
      "kernels: a table, CSV and JSON, and a plot");
  cmd->add_option("NAME", options->name, "The lesson (kjit lesson --list shows them)");
  cmd->add_flag("--list", options->list, "List the lessons and what each shows");
  cmd->add_flag("--dry-run", options->dry_run,
                "Do not measure: the kernels each point runs and the model's predictions");
  cmd->add_option("--gpu", options->gpu, "Plan for this GPU in a dry run (h200, h100, a100)")
      ->check(CLI::IsMember({"h200", "h100", "a100"}));
  cmd->add_option("--out", options->out, "Where NAME.csv and NAME.json go (default lessons/)");
  cmd->add_flag("--plot", options->plot, "Draw NAME.png with tools/lessons/plot.py (matplotlib)");
  cmd->callback([options] { lesson_command(*options); });
}

}  // namespace

KJIT_REGISTER_COMMAND(75, add_lesson_command);

}  // namespace kjit::cli
