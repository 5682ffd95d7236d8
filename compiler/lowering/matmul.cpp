#include "kjit/compiler/lowering/matmul.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <tuple>

#include "kjit/compiler/ir/dtype.h"
#include "kjit/compiler/lowering/wgmma.h"
#include "kjit/support/error.h"
#include "kjit/support/key_values.h"

namespace kjit::matmul {

// The matmul dtypes are stored as a subset of the IR's; names and sizes come from
// there (TF32 is stored as f32 and only named apart).
ir::DType to_ir(DType dtype) {
  switch (dtype) {
    case DType::F32:
    case DType::TF32:
      return ir::DType::F32;
    case DType::F16:
      return ir::DType::F16;
    case DType::BF16:
      return ir::DType::BF16;
  }
  return ir::DType::F32;
}

const char* to_string(DType dtype) {
  return dtype == DType::TF32 ? "tf32" : ir::to_string(to_ir(dtype));
}

int dtype_bytes(DType dtype) {
  return ir::size_bytes(to_ir(dtype));
}

DType parse_dtype(const std::string& text) {
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::TF32})
    if (text == to_string(d)) return d;
  throw UserError("matmul does not support dtype '" + text + "'",
                  "use one of bf16, f16 (tensor cores, f32 accumulation), f32 (exact SIMT) or "
                  "tf32 (f32 data on the tensor cores, sm_90)");
}

const char* to_string(OperandKind kind) {
  switch (kind) {
    case OperandKind::RowVector:
      return "row";
    case OperandKind::ColumnVector:
      return "col";
    case OperandKind::Tensor:
      return "tensor";
  }
  return "?";
}

std::string Problem::layout() const {
  return std::string(a_transposed ? "t" : "n") + (b_transposed ? "t" : "n");
}

void set_layout(Problem& problem, const std::string& layout) {
  if (layout.size() != 2 || (layout[0] != 'n' && layout[0] != 't') ||
      (layout[1] != 'n' && layout[1] != 't'))
    throw UserError("matmul layout '" + layout + "' is not one of nn, nt, tn, tt",
                    "the first letter is op(A), the second op(B); n = as stored (row-major), "
                    "t = transposed");
  problem.a_transposed = layout[0] == 't';
  problem.b_transposed = layout[1] == 't';
}

std::string Problem::kernel_class() const {
  std::string out =
      fmt::format("layout={},dtype={},out={},align={}", layout(), matmul::to_string(input),
                  matmul::to_string(output), aligned ? 16 : 1);
  if (!epilogue.function_name.empty()) {
    out += ",epilogue=" + (epilogue.text.empty() ? epilogue.function_name : epilogue.text);
    for (const EpilogueOperand& op : epilogue.operands)
      out += fmt::format(",{}:{}:{}", op.name, matmul::to_string(op.kind),
                         matmul::to_string(op.dtype));
  }
  return out;
}

std::string Problem::to_string() const {
  return fmt::format("m={},n={},k={},batch={},", m, n, k, batch) + kernel_class();
}

namespace {
const char* schedule_text(const Config& c) {
  return c.pingpong     ? ",schedule=pingpong"
         : c.streamk    ? ",schedule=streamk"
         : c.persistent ? ",schedule=persistent"
                        : "";
}
}  // namespace

std::string Config::to_string() const {
  return fmt::format("bm={},bn={},bk={},warps={},wm={},stages={},splitk={}{}{}{}{}{}{}", bm, bn, bk,
                     warps, warps_m, stages, splitk,
                     raster != 8 ? fmt::format(",raster={}", raster) : "",
                     wgmma ? ",mma=wgmma" : "", schedule_text(*this), narrow ? ",load=narrow" : "",
                     line_pitch ? ",pitch=line" : "", swap ? ",swap=ab" : "");
}

std::string Config::source_text() const {
  Config kernel = *this;
  kernel.streamk = false;  // a launch argument of the persistent kernel
  return fmt::format("bm={},bn={},bk={},warps={},wm={},stages={}{}{}{}{}", bm, bn, bk, warps,
                     warps_m, stages, wgmma ? ",mma=wgmma" : "", schedule_text(kernel),
                     narrow ? ",load=narrow" : "", swap ? ",swap=ab" : "");
}

StreamK streamk_split(int64_t tiles, int64_t blocks, int64_t k_tiles, int most) {
  StreamK s;
  if (blocks < 1 || tiles <= blocks || tiles % blocks == 0) return s;
  const int64_t last = tiles % blocks;
  const int64_t splits = std::min<int64_t>({most, blocks / last, k_tiles / 2});
  if (splits < 2) return s;
  s.tiles = last;
  s.splits = static_cast<int>(splits);
  return s;
}

bool pads_operands(const Problem& p, const Config& c) {
  return (!p.aligned || c.line_pitch) && p.input != DType::F32 && p.input != DType::TF32 &&
         !c.narrow;
}

bool pads_k(const Problem& p, const Config& c) {
  return !p.aligned && pads_operands(p, c);
}

bool reads_in_place(const Problem& p, const Config& c, int64_t pointer, int64_t ld,
                    int64_t batch_stride, bool mn_major) {
  const int64_t elem = dtype_bytes(p.input), per16 = 16 / elem;
  const bool k_whole = !pads_k(p, c) || p.k % c.bk == 0;
  const bool on_lines = pointer % kLineBytes == 0 && ld * elem % kLineBytes == 0 &&
                        (p.batch == 1 || batch_stride * elem % kLineBytes == 0);
  return pointer % 16 == 0 && ld % per16 == 0 && batch_stride % per16 == 0 && k_whole &&
         (!c.line_pitch || !mn_major || on_lines);
}

Config wgmma_config(int bm, int bn, int stages, int splitk, DType input, bool pingpong) {
  Config config;
  config.wgmma = true;
  config.persistent = config.pingpong = pingpong;
  config.bm = bm;
  config.bn = bn;
  config.bk = wgmma_bk(input);
  config.warps = pingpong ? 12 : 4 * (bm / 64 + 1);
  config.warps_m = bm / 64;
  config.stages = stages;
  config.splitk = splitk;
  return config;
}

int wgmma_bk(DType input) {
  return 128 / dtype_bytes(input);  // one 128-byte swizzle line of K per row
}

int square_warps_m(int bm, int bn, int warps) {
  int best = 1;
  double best_ratio = 1e30;
  for (int wm = 1; wm <= warps; wm *= 2) {
    if (warps % wm != 0) continue;
    const double tile_m = static_cast<double>(bm) / wm;
    const double tile_n = static_cast<double>(bn) / (warps / wm);
    const double ratio = tile_m > tile_n ? tile_m / tile_n : tile_n / tile_m;
    if (ratio < best_ratio) {  // ties keep the smaller wm: wider warp tiles along N
      best_ratio = ratio;
      best = wm;
    }
  }
  return best;
}

Config Config::parse(const std::string& text) {
  static const char* kValidKeys =
      "valid keys: bm, bn, bk, warps, wm, stages, splitk, raster, mma, schedule, load, pitch, swap";
  Config config;
  bool warps_m_given = false, warps_given = false, bk_given = false;
  for (const auto& [key, value] :
       split_key_values(text, "matmul config",
                        std::string("write e.g. bm=128,bn=128,bk=32,warps=8,stages=3,splitk=1; ") +
                            kValidKeys)) {
    if (key == "mma") {
      if (value != "sync" && value != "wgmma")
        throw UserError("matmul config mma='" + value + "' is not sync or wgmma",
                        "mma=sync: mma.sync (sm_80 and later); mma=wgmma: TMA + wgmma (sm_90)");
      config.wgmma = value == "wgmma";
      continue;
    }
    if (key == "schedule") {
      if (value != "tile" && value != "persistent" && value != "pingpong" && value != "streamk")
        throw UserError(
            "matmul config schedule='" + value + "' is not tile, persistent, pingpong or streamk",
            "schedule=tile: one output tile per block; schedule=persistent: one or "
            "a few blocks per SM walk the tiles; schedule=pingpong: as persistent, "
            "two consumer warpgroups taking turns; schedule=streamk: as persistent, the "
            "last partial wave's tiles split along K over every SM (mma=wgmma only)");
      config.persistent = value != "tile";
      config.pingpong = value == "pingpong";
      config.streamk = value == "streamk";
      continue;
    }
    if (key == "load") {
      if (value != "async" && value != "narrow")
        throw UserError("matmul config load='" + value + "' is not async or narrow",
                        "load=async: cp.async from 16-byte-aligned (or padded) rows; "
                        "load=narrow: any alignment, through registers (mma.sync only)");
      config.narrow = value == "narrow";
      continue;
    }
    if (key == "pitch") {
      if (value != "any" && value != "line")
        throw UserError("matmul config pitch='" + value + "' is not any or line",
                        "pitch=any: operands read in place at any 16-byte pitch; pitch=line: "
                        "M/N-major operands whose rows are off the 128-byte lines copied first "
                        "(mma=wgmma only)");
      config.line_pitch = value == "line";
      continue;
    }
    if (key == "swap") {
      if (value != "none" && value != "ab")
        throw UserError("matmul config swap='" + value + "' is not none or ab",
                        "swap=ab: the product computed transposed (Cᵀ = Bᵀ Aᵀ: bm tiles N, bn "
                        "tiles M; mma=wgmma, schedule=tile); swap=none: as written");
      config.swap = value == "ab";
      continue;
    }
    // The integer keys, and the field each sets; any other key is unknown, whatever
    // its value (a word value must not read as a bad integer for a missing key).
    int* field = key == "bm"       ? &config.bm
                 : key == "bn"     ? &config.bn
                 : key == "bk"     ? &config.bk
                 : key == "warps"  ? &config.warps
                 : key == "wm"     ? &config.warps_m
                 : key == "stages" ? &config.stages
                 : key == "splitk" ? &config.splitk
                 : key == "raster" ? &config.raster
                                   : nullptr;
    if (field == nullptr) throw UserError("unknown matmul config key '" + key + "'", kValidKeys);
    char* end = nullptr;
    const long parsed = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || parsed < 1 || parsed > 1 << 20)
      throw UserError(
          "matmul config value '" + value + "' for '" + key + "' is not a positive integer",
          "e.g. bm=128");
    *field = static_cast<int>(parsed);
    bk_given |= field == &config.bk;
    warps_given |= field == &config.warps;
    warps_m_given |= field == &config.warps_m;
  }
  if (config.wgmma) {
    // bk, warps and wm follow from bm; given ones must agree (validate() says so).
    const Config derived = wgmma_config(config.bm, config.bn, config.stages, config.splitk,
                                        DType::BF16, config.pingpong);
    if (!bk_given) config.bk = derived.bk;
    if (!warps_given) config.warps = derived.warps;
    if (!warps_m_given) config.warps_m = derived.warps_m;
    return config;
  }
  if (!warps_m_given) config.warps_m = square_warps_m(config.bm, config.bn, config.warps);
  return config;
}

Config simt_config(int splitk) {
  Config config;
  config.bm = 64;
  config.bn = 64;
  config.bk = 16;
  config.warps = 8;
  config.warps_m = 2;
  config.stages = 1;
  config.splitk = splitk;
  return config;
}

namespace {

int pipeline_bytes(const Problem& problem, const Config& config) {
  return config.stages * (config.bm + config.bn) * config.bk * dtype_bytes(problem.input);
}

// Mirrors WgmmaMatmul::SHARED_BYTES: alignment slack, stages, 2 x stages mbarriers;
// and PERSISTENT_SHARED_BYTES: plus a write-out slab of 16 rows x 128 bytes per
// consumer warp.
int wgmma_shared_bytes(const Problem& problem, const Config& config) {
  const int slab = 16 * 128;
  const int slabs = config.pingpong     ? 2 * 8 + 8 * slab  // + the two turn mbarriers
                    : config.persistent ? config.bm / 64 * 4 * slab
                                        : 0;
  return 1024 + pipeline_bytes(problem, config) + 2 * config.stages * 8 + slabs;
}

// Bytes of one epilogue pass (mirrors TensorCoreMatmul::STAGED_BYTES).
int staged_bytes(const Config& config, int passes) {
  return config.bm / passes * (config.bn + 8) * 4;
}

}  // namespace

int epilogue_passes(const Problem& problem, const Config& config) {
  if (problem.input == DType::F32 || config.wgmma) return 1;
  if (config.warps_m < 1) return 1;                      // invalid config; validate() says why
  const int mma_rows = config.bm / config.warps_m / 16;  // MT: mma rows per warp
  if (mma_rows < 1) return 1;
  for (int passes = 1; passes < mma_rows; ++passes)
    if (mma_rows % passes == 0 && staged_bytes(config, passes) <= pipeline_bytes(problem, config))
      return passes;
  return mma_rows;
}

bool splits_in_cluster(const Config& config, int64_t splits) {
  return config.wgmma && !config.persistent && splits > 1 && splits <= kMaxClusterSplits;
}

int shared_bytes(const Problem& problem, const Config& config) {
  if (problem.input == DType::F32) return 0;
  if (config.wgmma) return wgmma_shared_bytes(problem, config);
  return std::max(pipeline_bytes(problem, config),
                  staged_bytes(config, epilogue_passes(problem, config)));
}

void validate_problem(const Problem& problem) {
  if (problem.m < 1 || problem.n < 1 || problem.k < 1 || problem.batch < 1)
    throw UserError(fmt::format("matmul needs M, N, K and batch >= 1; got M={}, N={}, K={}, "
                                "batch={}",
                                problem.m, problem.n, problem.k, problem.batch),
                    "an empty matmul has nothing to compute; K = 0 would leave C undefined");
  // The kernels count tiles and K ranges in 32-bit ints: (M + BM - 1) / BM for tiles
  // of up to 256 rows, and each split's K range rounded up to whole k-tiles, whose end
  // may pass K by up to one range. Past these, M or N near 2^31 made the persistent
  // schedules' tile count negative (C never written) and K near 2^31 a split's range
  // INT_MIN (a zero product).
  constexpr int64_t kMaxMN = 2147483647 - 1023, kMaxK = int64_t{1} << 30;
  if (problem.m > kMaxMN || problem.n > kMaxMN || problem.k > kMaxK || problem.batch > 65535)
    throw UserError(fmt::format("matmul M and N must be at most {}, K at most {} and batch at "
                                "most 65535 (the kernels' 32-bit tile arithmetic); got M={}, "
                                "N={}, K={}, batch={}",
                                kMaxMN, kMaxK, problem.m, problem.n, problem.k, problem.batch),
                    "split the problem into several calls");
  // Every byte offset the kernels form is 64-bit: each packed operand must fit, and
  // the three together (they share one address space).
  int64_t total = 0;
  for (const auto& [name, rows, cols, dtype] :
       {std::tuple<const char*, int64_t, int64_t, DType>{"A", problem.m, problem.k, problem.input},
        {"B", problem.k, problem.n, problem.input},
        {"C", problem.m, problem.n, problem.output}}) {
    int64_t bytes = 0;
    if (__builtin_mul_overflow(rows, cols, &bytes) ||
        __builtin_mul_overflow(bytes, problem.batch, &bytes) ||
        __builtin_mul_overflow(bytes, static_cast<int64_t>(dtype_bytes(dtype)), &bytes))
      throw UserError(fmt::format("matmul {} of {} x {} ({} batches of {}-byte elements) holds "
                                  "more than 2^63 bytes",
                                  name, rows, cols, problem.batch, dtype_bytes(dtype)),
                      "offsets are 64-bit byte counts; split the problem into several calls");
    if (__builtin_add_overflow(total, bytes, &total))
      throw UserError(fmt::format("matmul A, B and C of {}x{}x{} (batch {}) hold more than 2^63 "
                                  "bytes together",
                                  problem.m, problem.n, problem.k, problem.batch),
                      "offsets are 64-bit byte counts; split the problem into several calls");
  }
  if (static_cast<int>(problem.epilogue.operands.size()) > Epilogue::kMaxOperands)
    throw UserError(fmt::format("the matmul epilogue takes at most {} extra operands, got {}",
                                Epilogue::kMaxOperands, problem.epilogue.operands.size()),
                    "fold constants into the expression, or split the epilogue");
  if (!problem.epilogue.function_name.empty() && problem.epilogue.function_source.empty())
    throw UserError("epilogue '" + problem.epilogue.function_name + "' has no source");
  if (problem.output == DType::TF32)
    throw UserError("tf32 is an input type; the output is f32, bf16 or f16",
                    "write --dtype tf32 --out f32");
}

void validate(const Problem& problem, const Config& config) {
  validate_problem(problem);
  if (config.splitk < 1 || config.splitk > 64)
    throw UserError(fmt::format("splitk={} is out of range", config.splitk),
                    "use 1 (no split) to 64");
  if (config.raster < 1 || config.raster > 64)
    throw UserError(fmt::format("raster={} is out of range", config.raster),
                    "use 1 (row by row) to 64 tile rows per group");
  if (problem.input == DType::TF32 && !config.wgmma)
    throw UserError("tf32 inputs run on the wgmma engine (TMA + wgmma, sm_90); config " +
                        config.to_string() + " is not a wgmma config",
                    "add mma=wgmma and bk=32 to the config, or leave the config out");
  if (problem.input == DType::F32) {
    Config simt = simt_config(config.splitk);
    simt.raster = config.raster;
    if (config != simt)
      throw UserError("the f32 SIMT matmul has one tile shape: " + simt.to_string() + ", got " +
                          config.to_string(),
                      "only splitk and raster can be chosen for f32 inputs");
    return;
  }
  const std::string hint = "Reducing or reshaping the block tile may help; see docs/matmul.md";
  const std::string schedule = "schedule=" + std::string(config.pingpong  ? "pingpong"
                                                         : config.streamk ? "streamk"
                                                                          : "persistent");
  if (config.persistent && !config.wgmma)
    throw UserError(schedule + " is a schedule of the wgmma engine; config " + config.to_string() +
                        " is an mma.sync config",
                    "add mma=wgmma, or drop " + schedule);
  if (config.pingpong && config.bm * config.bn > 16384)
    throw UserError(fmt::format("schedule=pingpong: a warpgroup holds a whole {}x{} tile, {} "
                                "accumulators per thread; at most 128 fit (bm x bn <= 16384)",
                                config.bm, config.bn, config.bm * config.bn / 128),
                    "use bm=64 with bn <= 256, or bm=128 with bn <= 128");
  if (config.persistent && !config.streamk && config.splitk > 1)
    throw UserError(fmt::format("{} writes whole output tiles; splitk={} needs schedule=tile "
                                "(or schedule=streamk, which splits the last wave's tiles)",
                                schedule, config.splitk),
                    "drop splitk, or drop " + schedule);
  if (config.streamk && config.splitk < 2)
    throw UserError(fmt::format("schedule=streamk splits each tile of the last wave into "
                                "splitk K ranges; splitk={} splits nothing",
                                config.splitk),
                    "add splitk=2 (or 3, 4, ...), or use schedule=persistent");
  if (config.line_pitch && (!config.wgmma || problem.input == DType::TF32))
    throw UserError(
        "pitch=line copies operands for the wgmma engine's 128-byte boxes; config " +
            config.to_string() + " is " +
            (config.wgmma ? "a tf32 one (staged into K-major rows instead)" : "not a wgmma config"),
        "drop pitch=line");
  if (config.narrow && config.wgmma)
    throw UserError(
        "load=narrow is a mode of the mma.sync engine; the wgmma engine's copy "
        "engine (TMA) needs 16-byte-aligned rows",
        "drop mma=wgmma (misaligned operands are padded for wgmma)");
  if (config.swap) {
    if (!config.wgmma || config.persistent)
      throw UserError(
          "swap=ab is a mode of the wgmma engine's one-tile-per-block schedule; "
          "config " +
              config.to_string() + " is " + (config.wgmma ? "persistent" : "not a wgmma config"),
          "use mma=wgmma without schedule=, or drop swap=ab");
    if (problem.input != DType::BF16 && problem.input != DType::F16)
      throw UserError(fmt::format("swap=ab needs 16-bit inputs (bf16, f16); got {}",
                                  matmul::to_string(problem.input)),
                      "wgmma reads tf32 operands K-major only; drop swap=ab");
    if (problem.a_transposed)
      throw UserError("swap=ab reads A as the kernel's K-major B operand: layout " +
                          problem.layout() + " stores A transposed (K x M, M-major)",
                      "use layout nn or nt with swap=ab, or drop swap=ab");
  }
  if (config.wgmma) {
    const Config derived = wgmma_config(config.bm, config.bn, config.stages, config.splitk,
                                        problem.input, config.pingpong);
    const bool bn_ok = config.swap ? config.bn % 16 == 0 && config.bn >= 16 && config.bn <= 256
                                   : config.bn % 64 == 0 && config.bn >= 64 && config.bn <= 256;
    if (config.bm % 64 != 0 || config.bm < 64 || config.bm > 256 || !bn_ok)
      throw UserError(
          fmt::format("mma=wgmma needs bm in 64, 128, 192, 256 and bn in {}; got bm={}, bn={}",
                      config.swap ? "16, 32, ..., 256 (swap=ab)" : "64, 128, 192, 256", config.bm,
                      config.bn),
          "each consumer warpgroup owns 64 rows; a wgmma is at most 256 wide");
    if (config.bk != derived.bk || config.warps != derived.warps ||
        config.warps_m != derived.warps_m)
      throw UserError(
          fmt::format("mma=wgmma with {} inputs fixes bk={} (128 bytes of K per "
                      "stage), warps={} and wm={} for bm={}; got bk={}, warps={}, "
                      "wm={}",
                      matmul::to_string(problem.input), derived.bk, derived.warps, derived.warps_m,
                      config.bm, config.bk, config.warps, config.warps_m),
          problem.input == DType::TF32 ? "write bk=32 and leave warps and wm out with mma=wgmma"
                                       : "leave bk, warps and wm out with mma=wgmma");
    // Swapped tiles are narrow (bn = 16 for decode): more of their stages fit.
    const int most_stages = config.swap ? 12 : 8;
    if (config.stages < 2 || config.stages > most_stages)
      throw UserError(fmt::format("stages={} is out of range: 2 to {}", config.stages, most_stages),
                      hint);
    // The persistent schedule writes from registers; the other stages the tile
    // (transposed with swap=ab: bn rows of bm + 4 floats).
    const int staged =
        config.swap ? config.bn * (config.bm + 4) * 4 : config.bm * (config.bn + 8) * 4;
    if (!config.persistent && staged > pipeline_bytes(problem, config))
      throw UserError(fmt::format("mma=wgmma stages the {}x{} fp32 tile through the pipeline's "
                                  "{} bytes, which is too small",
                                  config.bm, config.bn, pipeline_bytes(problem, config)),
                      "use more stages");
    return;
  }
  if (config.bk != 32 && config.bk != 64)
    throw UserError(fmt::format("bk={} is not supported: bk must be 32 or 64", config.bk), hint);
  // (Checked before any byte count: larger tiles never fit in shared memory, and
  // their sizes would overflow the arithmetic.)
  if (config.bm < 16 || config.bm > 256 || config.bn < 16 || config.bn > 256)
    throw UserError(fmt::format("mma.sync tiles are 16 to 256 rows and columns; got bm={}, bn={}",
                                config.bm, config.bn),
                    hint);
  if (config.warps < 1 || config.warps > 32 || config.warps % config.warps_m != 0)
    throw UserError(fmt::format("warps={} with wm={}: wm must divide warps, warps <= 32",
                                config.warps, config.warps_m),
                    hint);
  const int warps_n = config.warps / config.warps_m;
  if (config.bm % (16 * config.warps_m) != 0)
    throw UserError(
        fmt::format("bm={} must be a multiple of 16 * wm = {}", config.bm, 16 * config.warps_m),
        hint);
  if (config.bn % (16 * warps_n) != 0)
    throw UserError(
        fmt::format("bn={} must be a multiple of 16 * (warps / wm) = {}", config.bn, 16 * warps_n),
        hint);
  // M/N-major operands (A "t", B "n") swizzle 8 chunks per stored row.
  if ((problem.a_transposed && config.bm % 64 != 0) ||
      (!problem.b_transposed && config.bn % 64 != 0))
    throw UserError(fmt::format("layout {} stores an operand M/N-major: bm and bn must be "
                                "multiples of 64, got bm={}, bn={}",
                                problem.layout(), config.bm, config.bn),
                    hint);
  const int threads = config.threads();
  const int chunks_a = config.bm * config.bk / 8, chunks_b = config.bn * config.bk / 8;
  if (chunks_a % threads != 0 || chunks_b % threads != 0)
    throw UserError(fmt::format("the tile's 16-byte chunks (A: {}, B: {}) must be a multiple of "
                                "the {} threads",
                                chunks_a, chunks_b, threads),
                    "use fewer warps or a larger tile");
  if (config.stages < 2 || config.stages > 8)
    throw UserError(fmt::format("stages={} is out of range: 2 to 8", config.stages), hint);
}

namespace {

const char* device_type(DType dtype) {
  return ir::storage_type(to_ir(dtype));
}

// The expression that reads extra operand `i` at (batch, row, col), as float.
std::string operand_read(const EpilogueOperand& op, int i) {
  const std::string pointer =
      fmt::format("static_cast<const {}*>(ops.ptr[{}])", device_type(op.dtype), i);
  const std::string batch = fmt::format("batch * ops.batch_stride[{}]", i);
  switch (op.kind) {
    case OperandKind::RowVector:
      return fmt::format("kjit::to_f32({}[{} + row])", pointer, batch);
    case OperandKind::ColumnVector:
      return fmt::format("kjit::to_f32({}[{} + col])", pointer, batch);
    case OperandKind::Tensor:
      return fmt::format("kjit::to_f32({}[{} + row * ops.ld[{}] + col])", pointer, batch, i);
  }
  return "0.0f";
}

// The epilogue: the elementwise function, then the adapter that reads its operands.
// The adapter has two entry points: apply() reads every operand itself (one output
// at a time: the register epilogue and the split-K reduction), apply_columns() takes
// the per-column operands (biases) from load_columns(), which the staged epilogue
// calls once per chunk of VEC columns, with wide loads, instead of once per output.
std::string epilogue_glue(const Epilogue& epi, DType output) {
  std::string s;
  s += "// ---- epilogue: " + (epi.function_name.empty() ? std::string("identity") : epi.text) +
       " ----\n";
  std::vector<int> column_operands;  // operand index -> its slot in `columns`
  std::string call, call_columns, loads;
  if (epi.function_name.empty()) {
    call = call_columns = "acc";
  } else {
    // A 16-bit C keeps 8 or 11 bits: the function written for that, where it differs.
    const bool rounded16 = (output == DType::BF16 || output == DType::F16) &&
                           !epi.function_source_16bit.empty() &&
                           epi.function_source_16bit != epi.function_source;
    const std::string& source = rounded16 ? epi.function_source_16bit : epi.function_source;
    if (rounded16)
      s += fmt::format(
          "// C is {}: the function's math is held to what a 16-bit result keeps "
          "(templates/math.cuh)\n",
          matmul::to_string(output));
    s += source;
    if (!source.empty() && source.back() != '\n') s += "\n";
    call = call_columns = epi.function_name + "(acc";
    for (size_t i = 0; i < epi.operands.size(); ++i) {
      const EpilogueOperand& op = epi.operands[i];
      static const char* kKindText[] = {"one per row", "one per column", "M x N tensor"};
      s += fmt::format("// operand {}: {}, {}, {}: ops.ptr[{}]\n", i, op.name,
                       kKindText[static_cast<int>(op.kind)], matmul::to_string(op.dtype), i);
      call += ",\n        " + operand_read(op, static_cast<int>(i));
      if (op.kind == OperandKind::ColumnVector) {
        const int slot = static_cast<int>(column_operands.size());
        column_operands.push_back(static_cast<int>(i));
        call_columns += fmt::format(",\n        columns[{}]", slot);
        loads += fmt::format(
            "    kjit::matmul::load_values<{0}, VEC>(\n"
            "        static_cast<const {0}*>(ops.ptr[{1}]) + batch * ops.batch_stride[{1}] + col, "
            "valid,\n        columns[{2}]);  // {3}\n",
            device_type(op.dtype), i, slot, op.name);
      } else {
        call_columns += ",\n        " + operand_read(op, static_cast<int>(i));
      }
    }
    call += ")";
    call_columns += ")";
  }
  const int slots = std::max<int>(1, static_cast<int>(column_operands.size()));
  const std::string unused = "    (void)batch; (void)row; (void)col; (void)ops;\n";
  s += "struct kjit_matmul_epilogue {\n";
  s += fmt::format(
      "  // per-column operands (read once per chunk of columns): {}\n"
      "  static constexpr int kColumnSlots = {};\n",
      column_operands.size(), slots);
  s += "  __device__ __forceinline__ static float apply(float acc, long long batch, int row, int "
       "col,\n";
  s += "                                                const kjit::EpilogueOperands& ops) {\n";
  if (epi.operands.empty()) s += unused;
  s += "    return " + call + ";\n  }\n";
  s += "  template <int VEC>\n";
  s += "  __device__ __forceinline__ static void load_columns(float "
       "(&columns)[kColumnSlots][VEC],\n";
  s += "                                                      long long batch, int col, int "
       "valid,\n";
  s += "                                                      const kjit::EpilogueOperands& ops) "
       "{\n";
  if (column_operands.empty())
    s += "    (void)batch; (void)col; (void)valid; (void)ops;\n"
         "    for (int j = 0; j < VEC; ++j) columns[0][j] = 0.0f;  // no column operands\n";
  s += loads + "  }\n";
  s += "  __device__ __forceinline__ static float apply_columns(float acc, long long batch, int "
       "row,\n";
  s += "                                                        int col,\n";
  s += "                                                        const float "
       "(&columns)[kColumnSlots],\n";
  s += "                                                        const kjit::EpilogueOperands& ops) "
       "{\n";
  s += "    (void)batch; (void)row; (void)col; (void)columns; (void)ops;\n";
  s += "    return " + call_columns + ";\n  }\n};\n\n";
  return s;
}

}  // namespace

namespace {

// Whether the kernel's A and B operands are K-major in shared memory: the caller's A
// and B, or with swap=ab its B and A (validate() refuses A transposed there). tf32
// operands always are: the runtime stages M/N-major ones into K-major scratch.
struct KernelOperands {
  bool a_k_major, b_k_major;
};
KernelOperands kernel_operands(const Problem& problem, const Config& config) {
  const bool tf32 = problem.input == DType::TF32;
  const bool a = tf32 || !problem.a_transposed, b = tf32 || problem.b_transposed;
  return config.swap ? KernelOperands{b, a} : KernelOperands{a, b};
}

// The wgmma of one 32-byte k step as one inline-asm statement: m64nBNk16 for 16-bit
// inputs, m64nBNk8 for tf32. BN / 2 fp32 accumulators in and out, the two
// shared-memory descriptors, scale-d = 1 (add to the accumulators), and for 16-bit
// inputs the transpose flags of MN-major operands (tf32 has none: both operands are
// K-major).
std::string wgmma_wrapper(const Problem& problem, const Config& config) {
  const bool tf32 = problem.input == DType::TF32;
  const std::string type = matmul::to_string(problem.input);
  const int k = tf32 ? 8 : 16;
  // The kernel's MN-major operands are read transposed (16-bit types only).
  const KernelOperands operands = kernel_operands(problem, config);
  const int transpose_a = operands.a_k_major ? 0 : 1;
  const int transpose_b = operands.b_k_major ? 0 : 1;
  std::string s;
  if (tf32)
    s += fmt::format(
        "// acc(64 x {0}, f32) += A(64 x 8) * B(8 x {0}) for one warpgroup, both operands\n"
        "// K-major tf32 (f32 in shared memory; the tensor cores read 10 mantissa bits)\n"
        "// read from shared memory through descriptors.\n",
        config.bn);
  else
    s += fmt::format(
        "// acc(64 x {0}, f32) += A(64 x 16) * B(16 x {0}) for one warpgroup, both operands\n"
        "// read from shared memory through descriptors; transposed (MN-major): A {1}, B {2}.\n",
        config.bn, transpose_a, transpose_b);
  WgmmaInstruction instruction;
  instruction.name = "kjit_wgmma";
  instruction.n = config.bn;
  instruction.k = k;
  instruction.type = type;
  instruction.transpose_a = transpose_a;
  instruction.transpose_b = transpose_b;
  s += wgmma_struct(instruction);
  return s;
}

KernelSource lower_wgmma(const Problem& problem, const Config& config) {
  KernelSource out;
  out.family = "matmul";
  out.problem = problem.kernel_class();
  out.config = config.source_text();
  const bool tf32 = problem.input == DType::TF32;
  out.name = fmt::format("kjit_matmul_{}_{}_{}x{}x{}_wgmma_s{}{}", matmul::to_string(problem.input),
                         problem.layout(), config.bm, config.bn, config.bk, config.stages,
                         config.pingpong     ? "_pingpong"
                         : config.persistent ? "_persistent"
                         : config.swap       ? "_swapped"
                                             : "");
  out.block_threads = config.threads();
  out.dynamic_shared_bytes = shared_bytes(problem, config);
  out.arch_specific = true;

  std::string s;
  s += "// kjit matmul: C = epilogue(alpha * op(A) * op(B) + beta * C0, extra operands)\n";
  s += fmt::format("// generator: {} (compiler/lowering/matmul.cpp)\n", kGeneratorVersion);
  s += "// problem:   C[M,N] = op(A)[M,K] * op(B)[K,N] (x batch), " + out.problem + "\n";
  s += "// config:    " + out.config + "\n";
  const std::string warpgroups =
      config.pingpong ? "1 producer + 2 consumer warpgroups taking turns, each over whole tiles"
                      : fmt::format("1 producer + {} consumer warpgroups", config.bm / 64);
  s += fmt::format(
      "// path:      TMA + wgmma m64n{}k{} {} -> f32 (sm_90a); block tile {}x{}x{}, {}, "
      "{}-stage mbarrier pipeline, {} B dynamic shared memory\n",
      config.bn, tf32 ? 8 : 16, matmul::to_string(problem.input), config.bm, config.bn, config.bk,
      warpgroups, config.stages, out.dynamic_shared_bytes);
  if (config.swap)
    s += fmt::format(
        "// swap=ab:   computed transposed, C^T = B^T A^T: the kernel's A operand is B, its B\n"
        "//            operand A, so the block tile's {} rows walk N and its {} columns walk M\n"
        "//            (wgmma's N = {}: a short M is not padded to 64 rows). The fp32 tile is\n"
        "//            staged transposed, and C is written in its own rows as usual.\n",
        config.bm, config.bn, config.bn);
  s += "#include \"kjit/matmul_sm90.cuh\"\n\n";
  s += epilogue_glue(problem.epilogue, problem.output);
  s += wgmma_wrapper(problem, config);
  // tf32: wgmma reads 32-bit operands K-major only, so the runtime first copies an
  // M/N-major operand into K-major scratch (transposed); the kernel sees "nt".
  const bool a_k_major = tf32 || !problem.a_transposed;
  const bool b_k_major = tf32 || problem.b_transposed;
  if (tf32 && problem.layout() != "nt")
    s += "// layout " + problem.layout() +
         ": the runtime transposes the M/N-major operand(s) into K-major scratch first\n";
  s += "// A is " + std::string(a_k_major ? "M x K (K-major)" : "K x M (M-major)") + ", B is " +
       (b_k_major ? "N x K (K-major)" : "K x N (N-major)") +
       (config.swap ? ": the kernel's A operand is B, its B operand A" : "") + "\n";
  // C_ALIGNED picks the persistent schedules' write-out. For 16-bit outputs C's rows
  // count as 16-byte aligned where A and B are (the class) and a row of N outputs is
  // a whole number of 16-byte chunks; else (2048 x 50257 x 768 "nt": aligned
  // operands, rows of 50257) whole tiles go out from shifted rows. On the H100
  // (2026-12-07, 64 x 256 ping-pong) the aligned kernel's guarded stores into rows of
  // 50257 took 0.533 ms at N = 50256; the "nt" product from shifted rows takes 0.284.
  // (f32 outputs have no shifted write-out, and keep the class.) Either kernel is
  // correct for any C, and both store a C with aligned rows (a padded ldc) through
  // the copy engine.
  const int64_t out_bytes = matmul::dtype_bytes(problem.output);
  const bool c_aligned = problem.aligned && (out_bytes != 2 || problem.n * out_bytes % 16 == 0);
  s += fmt::format(
      "typedef kjit::sm90::WgmmaMatmul<{}, {}, {}, {}, {}, {}, {}, kjit_wgmma, {}{}> "
      "kjit_matmul_tile;  // ..., C_ALIGNED: C's rows {} 16-byte aligned{}\n\n",
      device_type(problem.input), device_type(problem.output), config.bm, config.bn, config.stages,
      kernel_operands(problem, config).a_k_major ? "true" : "false",
      kernel_operands(problem, config).b_k_major ? "true" : "false", c_aligned ? "true" : "false",
      config.swap ? ", true" : "", c_aligned ? "are" : "are not", config.swap ? "; SWAP" : "");
  s += fmt::format(
      "static_assert(kjit_matmul_tile::{} == {}, \"the runtime launches with {} bytes of "
      "dynamic shared memory\");\n\n",
      config.pingpong     ? "PINGPONG_SHARED_BYTES"
      : config.persistent ? "PERSISTENT_SHARED_BYTES"
                          : "SHARED_BYTES",
      out.dynamic_shared_bytes, out.dynamic_shared_bytes);
  s += config.pingpong
           ? "// grid: a few blocks per SM, each walking output tiles blockIdx.x, + gridDim.x,\n"
             "// ...; its two consumer warpgroups take turns (tiles 0, 2, 4, ... and 1, 3, 5,\n"
             "// ...): one writes a finished tile out while the other's wgmma run. The tensor\n"
             "// maps describe A and B for the copy engine (runtime/matmul.cpp encodes them)\n"
       : config.persistent
           ? "// grid: a few blocks per SM (the occupancy calculator's count), each walking\n"
             "// output tiles blockIdx.x, + gridDim.x, ...: the producer loads the next tile\n"
             "// while the consumers write this one from registers. The tensor maps describe\n"
             "// A and B for the copy engine (runtime/matmul.cpp encodes them)\n"
       : config.swap
           ? "// grid: (tiles of N x tiles of M, splits, batch), one output tile per block, or\n"
             "// with split-K one K range of it (blockIdx.y), the splits summed in split order;\n"
             "// map_a describes B and map_b A for the copy engine (runtime/matmul.cpp)\n"
           : "// grid: (tiles_m * tiles_n, splits, batch), one output tile per block, or with\n"
             "// split-K one K range of it (blockIdx.y), the splits summed in split order; the\n"
             "// tensor maps describe A and B for the copy engine (runtime/matmul.cpp encodes\n"
             "// them)\n";
  // The persistent schedules also take a map of C: where C is 16-byte aligned
  // (args.c_tma), whole tiles leave through the copy engine (bulk stores).
  s += config.persistent ? "// map_c: C for the copy engine's bulk stores (used when args.c_tma)\n"
                         : "";
  s += fmt::format(
      "extern \"C\" __global__ void __launch_bounds__({}, 1)\n{}(kjit::MatmulArgs args, "
      "kjit::EpilogueOperands ops,\n"
      "    const __grid_constant__ kjit::TensorMap map_a,\n"
      "    const __grid_constant__ kjit::TensorMap map_b{}) {{\n"
      "  kjit_matmul_tile::{}<kjit_matmul_epilogue>(args, ops, map_a, map_b{});\n}}\n\n",
      out.block_threads, out.name,
      config.persistent ? ",\n    const __grid_constant__ kjit::TensorMap map_c" : "",
      config.pingpong     ? "run_pingpong"
      : config.persistent ? "run_persistent"
                          : "run",
      config.persistent ? ", map_c" : "");
  out.source = std::move(s);
  return out;
}

}  // namespace

KernelSource lower(const Problem& problem, const Config& config) {
  validate(problem, config);
  if (config.wgmma) return lower_wgmma(problem, config);
  const bool simt = problem.input == DType::F32;
  KernelSource out;
  out.family = "matmul";
  out.problem = problem.kernel_class();  // sizes are arguments: one binary for all
  out.config = config.source_text();
  out.name = simt ? fmt::format("kjit_matmul_f32_{}_simt_64x64x16", problem.layout())
                  : fmt::format("kjit_matmul_{}_{}_{}x{}x{}_w{}x{}_s{}{}",
                                matmul::to_string(problem.input), problem.layout(), config.bm,
                                config.bn, config.bk, config.warps_m, config.warps / config.warps_m,
                                config.stages, config.narrow ? "_narrow" : "");
  out.block_threads = simt ? 256 : config.threads();
  out.dynamic_shared_bytes = shared_bytes(problem, config);

  const Epilogue& epi = problem.epilogue;
  std::string s;
  s += "// kjit matmul: C = epilogue(alpha * op(A) * op(B) + beta * C0, extra operands)\n";
  s += fmt::format("// generator: {} (compiler/lowering/matmul.cpp)\n", kGeneratorVersion);
  s += "// problem:   C[M,N] = op(A)[M,K] * op(B)[K,N] (x batch), " + out.problem + "\n";
  s += "// config:    " + out.config + "\n";
  if (simt) {
    s += "// path:      exact fp32 on the CUDA cores (templates/matmul_simt.cuh): one fixed\n"
         "//            64x64x16 block tile, 256 threads as 16 x 16 with 4 x 4 outputs each, no\n"
         "//            pipeline (the config above names that one shape; split-K is a launch\n"
         "//            argument)\n";
    s += "#include \"kjit/matmul_simt.cuh\"\n\n";
  } else {
    s += fmt::format(
        "// path:      mma.sync m16n8k16 {} -> f32; block tile {}x{}x{}, {} warps ({} along M) "
        "of {}x{}, {}-stage {} pipeline, {} B dynamic shared memory; epilogue staged "
        "through shared memory in {} pass(es) of {} rows\n",
        matmul::to_string(problem.input), config.bm, config.bn, config.bk, config.warps,
        config.warps_m, config.bm / config.warps_m, config.bn / (config.warps / config.warps_m),
        config.stages, config.narrow ? "narrow-load (through registers)" : "cp.async",
        out.dynamic_shared_bytes, epilogue_passes(problem, config),
        config.bm / epilogue_passes(problem, config));
    s += "#include \"kjit/matmul.cuh\"\n\n";
  }

  s += epilogue_glue(epi, problem.output);

  const std::string out_type = device_type(problem.output);
  const std::string a_k_major = problem.a_transposed ? "false" : "true";
  const std::string b_k_major = problem.b_transposed ? "true" : "false";
  if (simt) {
    s += fmt::format("typedef kjit::matmul::SimtMatmul<{}, {}, {}> kjit_matmul_tile;\n\n", out_type,
                     a_k_major, b_k_major);
  } else {
    s += "// A is " + std::string(problem.a_transposed ? "K x M (M-major)" : "M x K (K-major)") +
         ", B is " + (problem.b_transposed ? "N x K (K-major)" : "K x N (N-major)") + "\n";
    if (config.narrow)
      s += "// load=narrow: A and B of any alignment, read through registers with the widest\n"
           "// loads each 8-element chunk's address allows (no padded copies)\n";
    s += fmt::format(
        "typedef kjit::matmul::TensorCoreMatmul<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}{}>\n"
        "    kjit_matmul_tile;\n\n",
        device_type(problem.input), out_type, config.bm, config.bn, config.bk, config.warps_m,
        config.warps / config.warps_m, config.stages, a_k_major, b_k_major,
        epilogue_passes(problem, config), config.narrow ? ", true" : "");
  }
  s += "// grid: (tiles_m * tiles_n, splits, batch), one output tile per block, or with\n"
       "// split-K one K range of it (blockIdx.y), the splits summed in split order\n";
  s += fmt::format(
      "extern \"C\" __global__ void __launch_bounds__({}, 1)\n{}(kjit::MatmulArgs args, "
      "kjit::EpilogueOperands ops) {{\n"
      "  kjit_matmul_tile::run<kjit_matmul_epilogue>(args, ops);\n}}\n\n",
      out.block_threads, out.name);
  out.source = std::move(s);
  return out;
}

namespace {

// A 256-thread helper kernel of the matmul family (operand copies before the tile
// kernel): its header comment, the templates, and one extern "C" entry point.
KernelSource helper_kernel(const std::string& name, const std::string& problem,
                           const std::string& what, const std::string& grid,
                           const std::string& parameters, const std::string& body) {
  KernelSource out;
  out.family = "matmul";
  out.problem = problem;
  out.name = name;
  out.block_threads = 256;
  std::string s = what;
  s += fmt::format("// generator: {} (compiler/lowering/matmul.cpp)\n", kGeneratorVersion);
  s += "#include \"kjit/matmul.cuh\"\n\n";
  s += grid;
  s += fmt::format("extern \"C\" __global__ void __launch_bounds__(256)\n{}({}) {{\n{}}}\n", name,
                   parameters, body);
  out.source = std::move(s);
  return out;
}

}  // namespace

KernelSource lower_stage_k_major() {
  return helper_kernel(
      "kjit_matmul_stage_k_major_f32", "stage,dtype=f32",
      "// kjit matmul staging (tf32): copies an f32 operand into K-major scratch with\n"
      "// 16-byte rows, transposing an M/N-major one through shared memory\n",
      "// grid: (32-column tiles of K, 32-row tiles, batch x jobs); block: 32 x 8 threads\n",
      "kjit::matmul::StageJob job0, kjit::matmul::StageJob job1, int jobs",
      "  kjit::matmul::stage_k_major(job0, job1, jobs);\n");
}

KernelSource lower_pad(DType dtype) {
  if (dtype == DType::F32 || dtype == DType::TF32)
    throw InternalError("the padded path is only for 16-bit inputs (f32 uses SIMT)");
  return helper_kernel(
      std::string("kjit_matmul_pad_") + to_string(dtype),
      std::string("pad,dtype=") + to_string(dtype),
      "// kjit matmul padding: copies a misaligned operand into 16-byte-aligned rows\n",
      "// grid: (blocks over one matrix, batch, 1 or 2 jobs): A and B in one launch\n",
      "kjit::matmul::PadJob job0, kjit::matmul::PadJob job1",
      fmt::format("  kjit::matmul::pad_copy<{}>(kjit::matmul::select_job(blockIdx.z, job0, "
                  "job1));\n",
                  device_type(dtype)));
}

}  // namespace kjit::matmul
