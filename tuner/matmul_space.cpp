#include "kjit/tuner/matmul_space.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>
#include <string_view>

#include "kjit/compiler/lowering/matmul_epilogue.h"
#include "kjit/support/error.h"
#include "kjit/support/key_values.h"
#include "kjit/tuner/signature_fields.h"

namespace kjit::tuner {

using matmul::Config;
using matmul::DType;
using matmul::Problem;

namespace {

int64_t ceil_div(int64_t x, int64_t y) {
  return (x + y - 1) / y;
}

// Launch overhead of one kernel in a stream of back-to-back launches, seconds.
constexpr double kLaunchSeconds = 2.5e-6;
// Latency from a block's start to its first tensor-core instruction (the pipeline
// fill: DRAM latency plus the first k-tiles), seconds.
constexpr double kFillSeconds = 1.0e-6;
// Split-K's finish after the last main loop, seconds, serial with everything before
// it: the splits meet (a cluster barrier, or a fence and an arrival counter) and read
// each other's partials. (H200: 64 x 11008 x 4096 ran 0.0435 ms with 4 splits in
// clusters against 0.0343 for its one-split tiles, where the model had them even.)
constexpr double kSplitFinishSeconds = 1.5e-6;
// The persistent schedule: the share of a tile's write-out that its consumers still
// spend (issuing the stores; the DRAM traffic drains under the next main loop).
constexpr double kPersistentWriteShare = 0.5;
// The ping-pong schedule: the share its warpgroups still spend with the tensor
// cores idle (the other warpgroup's main loop runs during the rest).
constexpr double kPingPongWriteShare = 0.1;
// Misaligned rows of C: each store instruction beyond one per 16-byte chunk costs
// this share of the tile's write-out time (kWriteBytesPerSmClock, model.h),
// serial with the main loop. Fitted on the H200 to 2048x50257x768 (2026-12-01,
// docs/perf/2026-12-01-h200-matmul-peers.md): the same 128x256 config wrote rows of
// 50257 in 0.065 ms more than rows of 50304 (one tile per block); the persistent
// schedule, whose consumer warps alone store, lost about 3.6x as much.
constexpr double kNarrowStoreTile = 0.36;
constexpr double kNarrowStorePersistent = 1.3;
// The persistent schedules' whole tiles of 16-bit outputs go out through the copy
// engine instead, from rows shifted to C's alignment (write_out_shifted: one bulk
// store per row and line, only a row's head and tail narrow): what that costs, in
// the same units. Fitted on the H200 to 2048x50257x768 against the same configs
// writing rows of 50264 through tensor-map stores (2026-12-04,
// docs/perf/2026-12-04-h200-shifted-bulk-stores.md): 128x256 0.3642 ms against
// 0.2910 (0.34), 256x128 0.3490 against 0.2912 (0.27).
constexpr double kNarrowStoreShifted = 0.30;
// An epilogue function (gelu, ...) runs once per output on the consumer warps,
// inlined in the write-out, serial with the tensor cores in every schedule; the
// ping-pong schedule's other warpgroup does not hide it (one warpgroup finishes a
// whole tile alone: twice the outputs per warp). Seconds per output of a unit,
// fitted on the H200 to gelu(acc + bias) (2026-12-01 and 2026-12-04): +5.3 us per
// 256x128 tile persistent at 4096^3 (0.0205 ms over 3.9 tiles an SM) and at
// 2048x50257x768 (0.130 ms over 23.9), +5.1 us one tile per block at 4096^3, +6.3
// us per 128x128 tile ping-pong at 2048x50257x768 (0.30 ms over 47.8). A cheaper
// function is charged as much: every schedule alike but ping-pong. Those fits were
// of gelu_f32, what an f32 C still gets.
constexpr double kFunctionSecondsPerOutput = 0.165e-9;
// The same into a bf16 or f16 C, whose gelu is kjit::gelu_for_16bit (21 PTX
// instructions against 39), fitted on the H200 to gelu(acc + bias) against no
// epilogue (2026-12-04, docs/perf/2026-12-04-h200-gelu-for-16bit.md): +3.0 us per
// 256x128 tile persistent at 4096^3 (0.0117 ms over 3.9 tiles an SM), +3.4 us at
// 2048x50257x768 (0.081 ms over 23.9), +3.2 us per 128x128 tile ping-pong there
// (0.152 ms over 47.8: twice the outputs per warp, as above).
constexpr double kFunctionSecondsPerOutput16 = 0.10e-9;
// DRAM latency under load that a pipeline's loads in flight must cover, seconds.
constexpr double kDramLatencySeconds = 2.5e-6;
// The time a load in flight takes to come back from L2, seconds. An SM with
// (stages - 1) stages in flight takes in at most that many bytes per round trip,
// which is this for L2 hits and kDramLatencySeconds for DRAM, weighted by how much
// of the operand traffic DRAM serves. Fitted on the H200 to 4096x128x16384, 64 x 128
// tiles, 2 splits, 128 blocks each bringing in 3.1 MB, a third of it from DRAM (so
// 1.35 us a round trip): 4 stages 0.0618 ms, 8 stages 0.0490
// (docs/perf/2026-12-03-h200-bulk-stores.md).
constexpr double kL2LatencySeconds = 0.75e-6;

// The values each dimension of the space takes.
constexpr int kTileSizes[] = {64, 128, 192, 256};
constexpr int kWgmmaStages[] = {2, 3, 4, 5, 6, 7, 8};
constexpr int kSwapStages[] = {4, 6, 8, 10, 12};
constexpr int kSplits[] = {1, 2, 3, 4, 6, 8};
constexpr int kRasters[] = {8, 16};

// mma.sync block shapes: bm, bn, bk, warps, wm, stages (measured on the H200 to
// cover large, tall, square and small problems; docs/matmul.md).
struct SyncShape {
  int bm, bn, bk, warps, wm, stages;
};
constexpr SyncShape kSyncShapes[] = {
    {128, 256, 32, 8, 2, 4}, {128, 256, 32, 8, 2, 3}, {256, 128, 32, 8, 4, 4},
    {256, 128, 32, 8, 4, 3}, {128, 128, 32, 8, 2, 4}, {128, 128, 32, 4, 2, 4},
    {128, 128, 64, 8, 2, 3}, {64, 128, 32, 4, 2, 4},  {64, 64, 64, 4, 2, 3},
};
// Narrow loads (misaligned operands read in place) on these shapes.
constexpr SyncShape kNarrowShapes[] = {
    {128, 128, 32, 8, 2, 4}, {64, 128, 32, 8, 2, 4}, {64, 64, 64, 4, 2, 3}};

Config sync_config(const SyncShape& s, bool narrow) {
  Config c;
  c.bm = s.bm;
  c.bn = s.bn;
  c.bk = s.bk;
  c.warps = s.warps;
  c.warps_m = s.wm;
  c.stages = s.stages;
  c.narrow = narrow;
  return c;
}

bool sm90(const cuda::DeviceProperties& d) {
  return d.cc_major == 9 && d.cc_minor == 0;
}

// Registers a thread needs, before ptxas says: the accumulators plus what the
// addressing and the pipeline hold (fitted to ptxas' reports of the default space).
// The space prunes a config whose need passes the launch's even share.
int estimated_registers(const Problem& p, const Config& c) {
  if (p.input == DType::F32) return 64;
  if (c.wgmma) return (c.pingpong ? c.bm / 64 : 1) * c.bn / 2 + 24;
  const int warps_n = c.warps / c.warps_m;
  const int accumulators = (c.bm / c.warps_m) * (c.bn / warps_n) / 32;
  return std::min(255, accumulators + 64 + (c.narrow ? 24 : 0));
}

// Registers a thread is launched with, for the occupancy: what it needs, except
// where the consumer warpgroups take registers from the producer's (setmaxnreg:
// the ping-pong schedule, and the persistent ones with two or more consumers).
// Those kernels are built at the launch's even share of the register file
// whatever the accumulators need (templates/matmul_sm90.cuh, LAUNCH_REGISTERS):
// 168 at 384 threads, one block a SM. (Estimated from the accumulators, a 64 x 64
// ping-pong tile was three blocks a SM, and the model's pick for short K.)
int launch_registers(const Problem& p, const Config& c) {
  if (p.input != DType::F32 && c.wgmma && (c.pingpong || (c.persistent && c.bm / 64 > 1)))
    return std::min(255, 65536 / c.threads() / 8 * 8);
  return estimated_registers(p, c);
}

// The most registers a thread may use at this block size (one block per SM).
int register_limit(const cuda::DeviceProperties& d, int threads) {
  const int64_t per_block = d.registers_per_block > 0 ? d.registers_per_block : 65536;
  return static_cast<int>(std::min<int64_t>(255, per_block / threads / 8 * 8));
}

// Clusters of `size` blocks that run at once. A cluster's blocks share one GPC and
// a GPC holds whole clusters only, so fewer than SMs x resident / size fit; how many
// depends on the GPCs' sizes, which no datasheet gives. The fractions of the SM
// slots that clusters of each size fill were measured on the H200 (132 SMs, one
// block a SM: 132, 66, 39, 30, 22, 17, 15 and 15 clusters of 1 to 8;
// tools/device/experiments/cluster_occupancy.cu) and stand for every sm_90 part
// here; with more blocks a SM the H200 fits a little more (two a SM: 79 clusters of
// 3, 62 of 4, 30 of 8), so this errs low. The runtime asks the driver instead
// (cuOccupancyMaxActiveClusters).
int64_t clusters_at_once(int64_t sms, int64_t resident, int64_t size) {
  // Of the H200's 132 SM slots, the blocks in clusters of 0 (unused), 1, ..., 8.
  constexpr int64_t kFilled[] = {0, 132, 132, 117, 120, 110, 102, 105, 120};
  if (size < 1 || size > 8) return 0;
  return sms * resident * kFilled[size] / (132 * size);
}

// Output tiles along M and along N: bm x bn, or bn x bm where the kernel computes
// Cᵀ = Bᵀ Aᵀ (swap=ab: its tile rows walk N). The kernel's own tile rows are the
// first with swap=ab's, the second without.
int64_t tiles_along_m(const Problem& p, const Config& c) {
  return ceil_div(p.m, c.swap ? c.bn : c.bm);
}
int64_t tiles_along_n(const Problem& p, const Config& c) {
  return ceil_div(p.n, c.swap ? c.bm : c.bn);
}

int64_t actual_splits(const Config& c, int64_t k) {
  const int64_t k_per_split = (ceil_div(k, c.splitk) + c.bk - 1) / c.bk * c.bk;
  return ceil_div(k, k_per_split);
}

// K as the kernel sees it: padded to whole k-tiles on a misaligned problem's padded path.
int64_t kernel_k(const Problem& p, const Config& c) {
  return matmul::pads_k(p, c) ? ceil_div(p.k, c.bk) * c.bk : p.k;
}

// Packed rows of an operand the copy engine reads M/N-major (A of layout "t?", B of
// "?n") that are 16-byte aligned but not a whole number of 128-byte lines: each
// one-line box row straddles two lines. On the H200 (2026-12-03,
// docs/perf/2026-12-03-h200-operand-pitch.md) B in rows of 4104 took 4096^3 from
// 0.179 to 0.224 ms with 128x256 persistent tiles, and the vocabulary product
// 2048x50264x768 from 0.245 to 0.298; a K-major A in rows of 4104 cost 1.5%.
bool off_line(const Problem& p, int64_t row_elements, bool mn_major) {
  const int64_t bytes = row_elements * matmul::dtype_bytes(p.input);
  return mn_major && bytes % 16 == 0 && bytes % 128 != 0;
}
bool a_off_line(const Problem& p) {
  return off_line(p, p.a_transposed ? p.m : p.k, p.a_transposed);
}
bool b_off_line(const Problem& p) {
  return off_line(p, p.b_transposed ? p.k : p.n, !p.b_transposed);
}
// How much longer the main loop runs with such an operand read in place (fitted to
// the B of 4096^3 above).
constexpr double kOffLineMainLoop = 0.25;

// Which packed operands the launch copies into scratch first, as the runtime
// decides (runtime/matmul.cpp): those with rows off 16 bytes, every one whose K is
// padded, and with pitch=line the M/N-major ones off the 128-byte lines.
struct Copied {
  bool a = false, b = false;
};
Copied copied_operands(const Problem& p, const Config& c) {
  Copied out;
  if (!matmul::pads_operands(p, c)) return out;
  const int64_t a_cols = p.a_transposed ? p.m : p.k, b_cols = p.b_transposed ? p.k : p.n;
  const int64_t a_rows = p.a_transposed ? p.k : p.m, b_rows = p.b_transposed ? p.n : p.k;
  out.a = !matmul::reads_in_place(p, c, 0, a_cols, a_rows * a_cols, p.a_transposed);
  out.b = !matmul::reads_in_place(p, c, 0, b_cols, b_rows * b_cols, !p.b_transposed);
  return out;
}

// Store instructions per 16-byte chunk of a packed C (ldc = N), averaged over its
// rows: store_chunk writes a chunk at once where the row's chunk starts on a 16-byte
// boundary, in pairs where it starts on a pair's, else one element at a time.
double stores_per_chunk(const Problem& p) {
  const int64_t bytes = matmul::dtype_bytes(p.output), per_chunk = 16 / bytes;
  double total = 0;
  for (int64_t row = 0; row < 16; ++row) {  // the pattern repeats every 16 rows at most
    const int64_t offset = row * p.n * bytes % 16;
    total += offset == 0 ? 1 : offset % (2 * bytes) == 0 ? per_chunk / 2 : per_chunk;
  }
  return total / 16;
}

}  // namespace

bool packed_operands_aligned(const Problem& p) {
  const int64_t per16 = 16 / matmul::dtype_bytes(p.input);
  const int64_t a_cols = p.a_transposed ? p.m : p.k;
  const int64_t b_cols = p.b_transposed ? p.k : p.n;
  return a_cols % per16 == 0 && b_cols % per16 == 0;
}

std::string matmul_efficiency_key(const Problem& p, const Config& c) {
  if (p.input == DType::F32) return "matmul:simt";
  const std::string type = p.input == DType::TF32 ? ":tf32" : "";
  // Split-K configs learn apart: their partial tiles and the reduction cost what
  // the model only estimates, and fitting them with the one-pass configs of the
  // same tile dragged those down (seen on the H200: 0.72 -> 0.52).
  // (Stream-K's main loops are the persistent schedule's: the model adds the rest.)
  const std::string split = c.splitk > 1 && !c.streamk ? ":splitk" : "";
  if (c.wgmma)
    return fmt::format("matmul:wgmma{}:{}x{}:s{}{}{}", type, c.bm, c.bn, c.stages,
                       c.pingpong     ? ":pingpong"
                       : c.persistent ? ":persistent"
                       : c.swap       ? ":swap"
                                      : "",
                       split);
  return fmt::format("matmul:sync:{}x{}x{}:w{}x{}:s{}{}{}", c.bm, c.bn, c.bk, c.warps_m,
                     c.warps / c.warps_m, c.stages, c.narrow ? ":narrow" : "", split);
}

double matmul_efficiency_prior(const Problem& p, const Config& c) {
  if (p.input == DType::F32) return 0.55;
  if (c.wgmma) {
    // Fitted to the exhaustive tunes of the benchmark shapes and the N sweep on the
    // H200 (2026-11-30; docs/perf/2026-11-30-h200-tuner.md): 0.77 of the model's
    // peak for tiles of 32768 outputs or more (128x256, 192x192, 256x128),
    // falling as the tile's area^0.45 below that (the tensor cores are fed from
    // more shared memory per FLOP, the fill and write-out weigh more); 64-wide N
    // tiles lose another 15%; 3 stages hide less latency, 2 hardly any.
    // Ping-pong (at most 16384 outputs per warpgroup) counts as a tile of twice its
    // area (its two warpgroups keep as many outputs in flight), whose main loop ran
    // at 0.92-0.99x the persistent 128x256's on the H200 (4096^3, 4096x11008x4096,
    // 16384x8192x1024, 32000x4096x768; docs/matmul.md): each warpgroup reads A and
    // B from shared memory for a tile half the size.
    const double area =
        std::min(1.0, static_cast<double>(c.bm) * c.bn * (c.pingpong ? 2 : 1) / 32768.0);
    const double by_schedule = c.pingpong ? 0.92 : 1.0;
    const double by_n = c.bn == 64 ? 0.85 : 1.0;
    const double by_stages = c.stages >= 4 ? 1.0 : c.stages == 3 ? 0.82 : 0.45;
    return 0.77 * std::pow(area, 0.45) * by_n * by_stages * by_schedule;
  }
  // mma.sync on the H200 (first GPU runs): 128x256 w8 ~0.45 of peak; the others
  // relative to it (docs/matmul.md, the heuristic's table).
  const int warps_n = c.warps / c.warps_m;
  const double warp_tile = static_cast<double>(c.bm / c.warps_m) * (c.bn / warps_n);
  const double by_warp_tile = warp_tile >= 4096 ? 1.0 : warp_tile >= 2048 ? 0.78 : 0.68;
  const double by_stages = c.stages >= 4 ? 1.0 : 0.95;
  return 0.45 * by_warp_tile * by_stages * (c.narrow ? 0.25 : 1.0);
}

MatmulTuning::MatmulTuning(Problem problem, std::string epilogue_ir)
    : problem_(std::move(problem)), epilogue_ir_(std::move(epilogue_ir)) {}

std::vector<double> MatmulTuning::sizes() const {
  return {static_cast<double>(problem_.m), static_cast<double>(problem_.n),
          static_cast<double>(problem_.k), static_cast<double>(problem_.batch)};
}

nlohmann::json MatmulTuning::spec() const {
  nlohmann::json out = {{"family", "matmul"},
                        {"m", problem_.m},
                        {"n", problem_.n},
                        {"k", problem_.k},
                        {"batch", problem_.batch},
                        {"layout", problem_.layout()},
                        {"dtype", matmul::to_string(problem_.input)},
                        {"out", matmul::to_string(problem_.output)},
                        {"align", problem_.aligned ? 16 : 1}};
  // The runtime's problems carry their epilogue's IR in the problem only (a worker
  // sent this spec tuned the product without its epilogue).
  if (!epilogue_ir_.empty())
    out["epilogue"] = epilogue_ir_;
  else if (!problem_.epilogue.function_name.empty())
    out["epilogue"] = problem_.epilogue.text;
  return out;
}

std::string MatmulTuning::canonical(const std::string& text) const {
  const Config c = Config::parse(text);
  matmul::validate(problem_, c);
  return c.to_string();
}

std::vector<KernelSource> MatmulTuning::sources(const std::string& text) const {
  const Config c = Config::parse(text);
  std::vector<KernelSource> out = {matmul::lower(problem_, c)};
  if (matmul::pads_operands(problem_, c)) out.push_back(matmul::lower_pad(problem_.input));
  if (problem_.input == DType::TF32) out.push_back(matmul::lower_stage_k_major());
  return out;
}

std::vector<std::string> MatmulTuning::run_time_twins(const std::string& text) const {
  Config c;
  try {
    c = Config::parse(text);
  } catch (const UserError&) {
    return {};  // a stored config this version does not read has no twins either
  }
  if (!c.wgmma) return {};
  c.line_pitch = !c.line_pitch;
  return {c.to_string()};
}

Work MatmulTuning::work() const {
  const Problem& p = problem_;
  Work w;
  w.flops = 2.0 * p.m * p.n * p.k * p.batch;
  const double in = matmul::dtype_bytes(p.input), out = matmul::dtype_bytes(p.output);
  w.bytes = p.batch * (in * (p.m * p.k + p.k * p.n) + out * p.m * p.n);
  for (const matmul::EpilogueOperand& op : p.epilogue.operands) {
    const double count = op.kind == matmul::OperandKind::RowVector      ? p.m
                         : op.kind == matmul::OperandKind::ColumnVector ? p.n
                                                                        : p.m * p.n;
    w.bytes += p.batch * count * matmul::dtype_bytes(op.dtype);
  }
  return w;
}

Space MatmulTuning::space(const cuda::DeviceProperties& device) const {
  const Problem& p = problem_;
  Space space;
  auto consider = [&](Config c) {
    std::string text = c.to_string();
    auto prune = [&](const std::string& reason) { space.pruned.push_back({text, reason}); };
    try {
      matmul::validate(p, c);
    } catch (const UserError& e) {
      return prune(e.what());
    }
    if (c.wgmma && !sm90(device))
      return prune("mma=wgmma needs an sm_90 GPU (TMA + wgmma); " + device.name + " is " +
                   device.arch());
    if (!c.wgmma && p.input != DType::F32 && device.cc_major < 8)
      return prune("mma.sync m16n8k16 needs sm_80 or later; " + device.name + " is " +
                   device.arch());
    const int shared = matmul::shared_bytes(p, c);
    if (shared > device.shared_per_block_optin)
      return prune(fmt::format("needs {} B of shared memory per block; {} allows {}", shared,
                               device.name, device.shared_per_block_optin));
    const int threads = p.input == DType::F32 ? 256 : c.threads();
    if (device.max_threads_per_block > 0 && threads > device.max_threads_per_block)
      return prune(fmt::format("needs {} threads per block; {} allows {}", threads, device.name,
                               device.max_threads_per_block));
    const int registers = estimated_registers(p, c), limit = register_limit(device, threads);
    if (registers > limit)
      return prune(
          fmt::format("needs about {} registers per thread ({} threads); at most {} fit "
                      "one block per SM",
                      registers, threads, limit));
    if (c.narrow && p.aligned)
      return prune("load=narrow reads misaligned operands in place; this problem is aligned");
    const int64_t tiles = tiles_along_m(p, c) * tiles_along_n(p, c) * p.batch;
    if (c.streamk) {
      // The last wave's tiles take exactly splitk splits, or this is another config.
      const int64_t resident =
          std::max(occupancy({threads, registers, shared, true}, device).blocks_per_sm, 1);
      const int64_t blocks = std::min<int64_t>(tiles, device.sm_count * resident);
      const int64_t k_tiles = ceil_div(kernel_k(p, c), c.bk);
      const matmul::StreamK sk = matmul::streamk_split(tiles, blocks, k_tiles, c.splitk);
      if (sk.splits != c.splitk)
        return prune(
            sk.splits < 2
                ? fmt::format("schedule=streamk: the {} tiles on {} blocks leave no last wave "
                              "of at most half the blocks to split ({} tiles, {} k-tiles each)",
                              tiles, blocks, tiles % blocks, k_tiles)
                : fmt::format("schedule=streamk: the last wave's {} tiles split {} ways at "
                              "most (on {} blocks, {} k-tiles each), not {}",
                              sk.tiles, sk.splits, blocks, k_tiles, c.splitk));
    } else if (c.splitk > 1) {
      const int64_t k = kernel_k(p, c);
      if (actual_splits(c, k) != c.splitk)
        return prune(
            fmt::format("K = {} in k-tiles of {} does not make {} splits", k, c.bk, c.splitk));
      if (k / c.splitk < 2 * c.bk)
        return prune(
            fmt::format("split-K: {} splits of K = {} leave under two k-tiles each", c.splitk, k));
      if (tiles >= 2 * device.sm_count)
        return prune(fmt::format("split-K: the {} tiles already fill {:.1f} waves of {} SMs", tiles,
                                 static_cast<double>(tiles) / device.sm_count, device.sm_count));
    }
    if (c.persistent && !c.streamk && tiles * actual_splits(c, kernel_k(p, c)) <= device.sm_count)
      return prune(
          fmt::format("schedule={}: the {} work units fit one wave of {} SMs, one per block "
                      "as with schedule=tile",
                      c.pingpong ? "pingpong" : "persistent",
                      tiles * actual_splits(c, kernel_k(p, c)), device.sm_count));
    // The kernel's tile rows and columns (swap=ab: rows along N).
    const int64_t tile_rows = c.swap ? tiles_along_n(p, c) : tiles_along_m(p, c);
    const int64_t tile_cols = c.swap ? tiles_along_m(p, c) : tiles_along_n(p, c);
    if (c.raster != 8 && (tile_rows <= 8 || tile_cols == 1))
      return prune(
          fmt::format("raster={} orders the blocks as raster=8 with {} tile rows and {} "
                      "tile columns",
                      c.raster, tile_rows, tile_cols));
    // swap=ab: correct on the H100 and H200 (2026-12-06), but the model has no
    // fitted efficiency for it, and its prior ties a dozen untimed swapped tiles.
    // Searched, not a default until it has passed a trial on this GPU model for a
    // problem of this class (Space::search_only).
    if (c.swap) space.search_only.push_back(text);
    space.candidates.push_back(std::move(text));
  };
  auto with_launch_dims = [&](Config c) {
    for (int splits : kSplits)
      for (int raster : kRasters) {
        c.splitk = splits;
        c.raster = raster;
        consider(c);
      }
  };
  if (p.input == DType::F32) {
    with_launch_dims(matmul::simt_config(1));
    return space;
  }
  // pitch=line where it changes what is copied: an M/N-major operand off the lines
  // that would be read in place (a misaligned K pads, and so copies, every operand).
  const bool k_padded = !p.aligned && p.k % matmul::wgmma_bk(p.input) != 0;
  const bool line_pitch_matters =
      p.input != DType::TF32 && !k_padded && (a_off_line(p) || b_off_line(p));
  for (int bm : kTileSizes)
    for (int bn : kTileSizes)
      for (int stages : kWgmmaStages)
        for (const char* schedule : {"tile", "persistent", "pingpong", "streamk"})
          for (bool line_pitch : {false, true}) {
            if (line_pitch && !line_pitch_matters) continue;
            const bool pingpong = schedule == std::string("pingpong");
            Config c = matmul::wgmma_config(bm, bn, stages, 1, p.input, pingpong);
            c.persistent = schedule != std::string("tile");
            c.streamk = schedule == std::string("streamk");
            c.line_pitch = line_pitch;
            with_launch_dims(c);
          }
  // swap=ab where M is short (a decode step, M <= 64): the kernel computes Cᵀ = Bᵀ Aᵀ
  // with M on wgmma's N side in one tile column of bn = M rounded up to 16, so no
  // tensor-core work or shared memory goes to rows of zeros, and its narrow stages
  // (bm + bn rows of 128 bytes) leave room for more of them.
  if (p.input != DType::TF32 && !p.a_transposed && p.m <= 64) {
    const int bn = static_cast<int>(ceil_div(p.m, 16) * 16);
    for (int bm : {64, 128, 256})
      for (int stages : kSwapStages) {
        Config c = matmul::wgmma_config(bm, bn, stages, 1, p.input, false);
        c.swap = true;
        with_launch_dims(c);
      }
  }
  if (p.input == DType::TF32) return space;  // the wgmma engine only
  for (const SyncShape& s : kSyncShapes) with_launch_dims(sync_config(s, false));
  for (const SyncShape& s : kNarrowShapes) with_launch_dims(sync_config(s, true));
  return space;
}

Prediction MatmulTuning::predict(const std::string& text, const cuda::DeviceProperties& device,
                                 const Efficiencies& efficiencies,
                                 const KernelResources* resources) const {
  return predict(Config::parse(text), device, efficiencies, resources);
}

Prediction MatmulTuning::predict(const Config& c, const cuda::DeviceProperties& device,
                                 const Efficiencies& efficiencies,
                                 const KernelResources* resources) const {
  const Problem& p = problem_;
  const DeviceRates rates = rates_of(device);
  Prediction out;
  out.work = work();
  if (resources && resources->threads > 0) {
    out.resources = *resources;
  } else {
    out.resources.threads = p.input == DType::F32 ? 256 : c.threads();
    out.resources.registers = launch_registers(p, c);
    out.resources.shared_bytes = matmul::shared_bytes(p, c);
    out.resources.estimated = true;
  }
  out.occupancy = occupancy(out.resources, device);
  const int resident = std::max(out.occupancy.blocks_per_sm, 1);
  const int64_t sms = std::max(device.sm_count, 1);

  // Work units: output tiles times K splits.
  const int64_t k = kernel_k(p, c);
  const int64_t splits = c.splitk > 1 && !c.streamk ? actual_splits(c, k) : 1;
  const int64_t k_per_split = ceil_div(ceil_div(k, splits), c.bk) * c.bk;
  const int64_t tiles_m = tiles_along_m(p, c), tiles_n = tiles_along_n(p, c);
  const int64_t tiles = tiles_m * tiles_n * p.batch;
  // Split-K on the wgmma tile grid: each tile's splits one cluster, when every
  // cluster of the grid runs at once (as the runtime decides); else the workspace.
  const bool cluster =
      matmul::splits_in_cluster(c, splits) && tiles <= clusters_at_once(sms, resident, splits);
  out.waves = waves_of(tiles * splits, sms * resident);
  if (c.wgmma && c.persistent) out.persistent_blocks = std::min<int64_t>(tiles, sms * resident);

  // Compute: one unit's multiply-adds at the SM's rate times the efficiency; the
  // busiest SM runs ceil(units / SMs) of them (resident blocks share its rate).
  out.efficiency_key = matmul_efficiency_key(p, c);
  out.group = fmt::format("{}:{}x{}{}",
                          c.wgmma                 ? "wgmma"
                          : p.input == DType::F32 ? "simt"
                                                  : "sync",
                          c.bm, c.bn,
                          c.narrow ? ":narrow"
                          : c.swap ? ":swap"
                                   : "");
  out.efficiency_fitted = efficiencies.fitted(out.efficiency_key);
  out.efficiency = efficiencies.get(out.efficiency_key, matmul_efficiency_prior(p, c));
  const double per_clock = p.input == DType::F32    ? rates.simt_flops_per_sm_clock
                           : p.input == DType::TF32 ? rates.tensor_flops_per_sm_clock / 2
                                                    : rates.tensor_flops_per_sm_clock;
  const double sm_rate = per_clock * rates.sm_clock_hz * out.efficiency;
  const double unit_seconds = 2.0 * c.bm * c.bn * k_per_split / sm_rate;
  int64_t units_per_sm = ceil_div(tiles * splits, sms);
  double compute = static_cast<double>(units_per_sm) * unit_seconds;
  // Stream-K: the whole tiles' waves, then 1 / S of a tile, and the meeting of the
  // splits: S - 1 partials written, then read by the tile's last split, at an SM's
  // share of L2 bandwidth; that split then writes the tile out.
  const matmul::StreamK sk =
      c.streamk ? matmul::streamk_split(tiles, std::min<int64_t>(tiles, sms * resident),
                                        ceil_div(k, c.bk), c.splitk)
                : matmul::StreamK{};
  if (sk.splits > 1) {
    units_per_sm = ceil_div(tiles - sk.tiles, sms) + 1;
    const double partial_seconds = 4.0 * c.bm * c.bn / (rates.l2_bytes_per_s / sms);
    compute = (static_cast<double>(units_per_sm - 1) + 1.0 / sk.splits) * unit_seconds +
              kSplitFinishSeconds + static_cast<double>(sk.splits) * partial_seconds;
  }

  // An M/N-major operand read in place from rows off the 128-byte lines.
  const Copied copied = copied_operands(p, c);
  const bool a_straddles = c.wgmma && a_off_line(p) && !copied.a;
  const bool b_straddles = c.wgmma && b_off_line(p) && !copied.b;
  if (a_straddles || b_straddles) {
    compute *= 1.0 + kOffLineMainLoop;
    out.notes.push_back(fmt::format(
        "{}'s rows of {} elements are read in place, not a whole number of 128-byte lines "
        "apart: every row of the copy engine's one-line boxes straddles two lines (modelled "
        "as a {:.2f}x main loop; pitch=line copies it first)",
        b_straddles ? "B" : "A", b_straddles ? (p.b_transposed ? p.k : p.n) : p.m,
        1.0 + kOffLineMainLoop));
  }

  // Per unit, serial with its own main loop: the pipeline fill and the write-out of
  // the tile (kWriteBytesPerSmClock: what an SM sends out, whatever the DRAM); another
  // resident block's main loop hides part of both.
  const double out_bytes = splits > 1 ? 4 : matmul::dtype_bytes(p.output);
  const double write_seconds =
      c.bm * c.bn * out_bytes / (kWriteBytesPerSmClock * rates.sm_clock_hz);
  // The persistent schedule fills its pipeline once: the producer loads the next
  // tile while the consumers write this one out, and the stores drain under the
  // next main loop.
  const double write_share = c.pingpong ? kPingPongWriteShare : kPersistentWriteShare;
  // Misaligned rows of C (outputs the kernel writes itself, not split-K partials)
  // take more store instructions per chunk. The ping-pong schedule did not hide the
  // warps' own narrow stores (measured: 2048x50257x768 0.478 ms against 0.535
  // persistent, 0.433 with one tile per block); with the shifted bulk stores it runs
  // as the cooperative one does (0.3663 ms for 128x128 against 0.3682 for 128x256
  // persistent, 2026-12-04), at the same rate.
  const double extra_stores = splits > 1 ? 0.0 : stores_per_chunk(p) - 1;
  const bool shifted = c.persistent && matmul::dtype_bytes(p.output) == 2;
  const double narrow_seconds = extra_stores * write_seconds *
                                (shifted        ? kNarrowStoreShifted
                                 : c.persistent ? kNarrowStorePersistent
                                                : kNarrowStoreTile);
  const double per_output =
      matmul::dtype_bytes(p.output) == 2 ? kFunctionSecondsPerOutput16 : kFunctionSecondsPerOutput;
  const double function_seconds =
      p.epilogue.function_name.empty() ? 0.0 : per_output * c.bm * c.bn * (c.pingpong ? 2.0 : 1.0);
  const double serial =
      c.persistent
          ? kFillSeconds + static_cast<double>(units_per_sm) *
                               (write_share * write_seconds + narrow_seconds + function_seconds) /
                               resident
          : static_cast<double>(units_per_sm) *
                (kFillSeconds + write_seconds + narrow_seconds + function_seconds) / resident;
  if (function_seconds > 0)
    out.notes.push_back(fmt::format(
        "epilogue function: run once per output by the consumer warps in the write-out, "
        "with the tensor cores idle: {:.1f} us per {}x{} tile{}",
        function_seconds * 1e6, c.bm, c.bn,
        c.pingpong ? " (ping-pong: one warpgroup finishes a whole tile, twice the time)" : ""));
  // (The shifted write-out is named by the persistent schedule's write-out note.)
  if (extra_stores > 0 && !shifted)
    out.notes.push_back(fmt::format(
        "C's rows of {} elements are not all 16-byte aligned: {:.2f} store instructions "
        "per 16-byte chunk on average (1 when aligned)",
        p.n, extra_stores + 1));

  // Memory: the fewest bytes from DRAM, and the tiles' re-reads of A and B through
  // L2. An SM pulls at most what its loads in flight allow (Little's law: the
  // pipeline's stages ahead x a stage's bytes x its resident blocks, over the DRAM
  // latency) and at most 4x its fair share; fewer busy SMs pull less in all.
  const double in = matmul::dtype_bytes(p.input);
  const int64_t active = std::min<int64_t>(tiles * splits, sms);
  const double stage_bytes = static_cast<double>(c.bm + c.bn) * c.bk * in;
  const double blocks_here = std::min<double>(
      resident, std::max(1.0, static_cast<double>(tiles * splits) / static_cast<double>(sms)));
  const double in_flight = std::max(1, c.stages - 1) * stage_bytes * blocks_here;
  const double per_sm =
      std::min(4.0 * rates.dram_bytes_per_s / sms, in_flight / kDramLatencySeconds);
  const double pull_bytes_per_s =
      std::min(rates.dram_bytes_per_s, per_sm * static_cast<double>(active));
  // Split-K partials through an fp32 workspace, unless the splits are a cluster
  // (wgmma, at most 8): then they stay in shared memory.
  double dram = out.work.bytes + (splits > 1 && !cluster ? 4.0 * splits * p.m * p.n * p.batch : 0);
  const double l2 =
      p.batch * in *
      (static_cast<double>(p.m) * k * tiles_n + static_cast<double>(k) * p.n * tiles_m);
  // Feed: an SM takes in every operand byte of its units (from DRAM or L2) through
  // the loads it keeps in flight, at most in_flight per round trip.
  const double operands_dram = p.batch * in * (static_cast<double>(p.m) * k + k * p.n);
  const double dram_share = std::min(1.0, operands_dram / std::max(l2, 1.0));
  const double round_trip =
      kL2LatencySeconds + dram_share * (kDramLatencySeconds - kL2LatencySeconds);
  const double unit_bytes = static_cast<double>(c.bm + c.bn) * k_per_split * in;
  const double feed =
      static_cast<double>(units_per_sm) * unit_bytes * round_trip / std::max(in_flight, 1.0);
  double memory = std::max({dram / pull_bytes_per_s, l2 / rates.l2_bytes_per_s, feed});

  // Kernels before: the padding copy, tf32 staging; the split-K reduction after.
  double extra = kLaunchSeconds;
  if (copied.a || copied.b) {
    const double copy = 2.0 * in * p.batch *
                        (static_cast<double>(copied.a ? p.m * k : 0) + (copied.b ? k * p.n : 0));
    extra += kLaunchSeconds + copy / rates.dram_bytes_per_s;
    out.notes.push_back(fmt::format(
        "padded path: {} copied into scratch with 128-byte rows first ({:.1f} MB read){}",
        copied.a && copied.b ? "A and B"
        : copied.a           ? "A"
                             : "B",
        copy / 2e6,
        c.line_pitch ? " (pitch=line: the copy engine's boxes then sit on lines)" : ""));
  }
  if (p.input == DType::TF32) {
    const double copy = 2.0 * 4 * p.batch * (p.m * p.k + p.k * p.n);
    extra += kLaunchSeconds + copy / rates.dram_bytes_per_s;
  }
  if (splits > 1) extra += kSplitFinishSeconds;
  if (splits > 1 && cluster) {
    // Summed in the same kernel after the main loops, each split of the cluster a
    // slice of the tile, from the splits' shared memory: only C leaves the SMs.
    extra += p.batch * p.m * p.n * matmul::dtype_bytes(p.output) / rates.dram_bytes_per_s;
    out.notes.push_back(fmt::format(
        "split-K: {} splits of {} (k-tiles of {}), each tile's splits one thread-block "
        "cluster ({} clusters; about {} clusters of {} blocks run at once): partials "
        "summed in split order through distributed shared memory",
        splits, k_per_split, c.bk, tiles, clusters_at_once(sms, resident, splits), splits));
  } else if (splits > 1) {
    const double partials = 4.0 * splits * p.m * p.n * p.batch;
    // Read back and summed in the same kernel (no launch) after the main loops: by
    // all of a tile's splits, a slice each, when the grid fits on the GPU at once
    // (a cooperative launch), else by each tile's last split.
    const bool shared = tiles * splits <= sms * resident;
    extra +=
        (partials + p.batch * p.m * p.n * matmul::dtype_bytes(p.output)) / rates.dram_bytes_per_s;
    out.notes.push_back(fmt::format(
        "split-K: {} splits of {} (k-tiles of {}), {:.1f} MB of fp32 partials summed in split "
        "order {}",
        splits, k_per_split, c.bk, partials / 1e6,
        shared ? "by the tile's splits together (the grid fits at once: a cooperative launch)"
               : "by each tile's last split"));
  }
  if (c.streamk && sk.splits > 1)
    out.notes.push_back(fmt::format(
        "schedule=streamk: {} blocks walk the {} whole tiles, then the last wave's {} tiles "
        "split {} ways along K ({} units of {} k-tiles or so, on every SM), each tile summed "
        "by its last split in split order (the same bits every run)",
        std::min<int64_t>(tiles, sms * resident), tiles - sk.tiles, sk.tiles, sk.splits,
        sk.tiles * sk.splits, ceil_div(k, c.bk) / sk.splits));
  else if (c.streamk)
    out.notes.push_back(fmt::format(
        "schedule=streamk: no last wave to split here ({} tiles on {} blocks), so it runs as "
        "schedule=persistent",
        tiles, std::min<int64_t>(tiles, sms * resident)));
  if (c.wgmma && c.pingpong)
    out.notes.push_back(fmt::format(
        "schedule=pingpong: {} blocks walk the {} tiles ({:.1f} each) through one pipeline, "
        "their two consumer warpgroups taking turns: one writes a tile out while the other's "
        "wgmma run",
        std::min<int64_t>(tiles, sms * resident), tiles,
        static_cast<double>(tiles) /
            static_cast<double>(std::min<int64_t>(tiles, sms * resident))));
  else if (c.wgmma && c.persistent)
    out.notes.push_back(fmt::format(
        "schedule=persistent: {} blocks walk the {} tiles ({:.1f} each) through one pipeline: "
        "it fills once per block, and the next tile's loads run during this one's write-out",
        std::min<int64_t>(tiles, sms * resident), tiles,
        static_cast<double>(tiles) /
            static_cast<double>(std::min<int64_t>(tiles, sms * resident))));
  if (c.wgmma && c.persistent)
    out.notes.push_back(
        p.n * matmul::dtype_bytes(p.output) % 16 == 0
            ? "write-out: whole tiles through TMA bulk stores (the consumer warps go on to the "
              "next tile while C drains), edge tiles by the warps' own 16-byte stores"
        : matmul::dtype_bytes(p.output) == 2
            ? fmt::format("write-out: rows of {} outputs are not 16-byte aligned (no tensor map "
                          "of C): whole tiles through plain bulk stores of rows shifted to C's "
                          "alignment, one per row and line, only a row's head and tail narrow; "
                          "edge tiles by the warps' own stores",
                          p.n)
            : fmt::format("write-out: by the consumer warps' own stores (rows of {} outputs "
                          "are not 16-byte aligned: no tensor map of C)",
                          p.n));
  if (c.swap)
    out.notes.push_back(fmt::format(
        "swap=ab: computed as C^T = B^T A^T: the block tile's {} rows walk N and its {} columns "
        "M ({} x {} tiles), so wgmma's N is {} and M = {} is not padded to 64 rows",
        c.bm, c.bn, tiles_n, tiles_m, c.bn, p.m));
  if (c.wgmma && !c.persistent && tiles * splits > sms)
    out.notes.push_back(fmt::format(
        "schedule=tile: one tile per block ({} blocks): each pays its pipeline fill and "
        "write-out with the tensor cores idle",
        tiles * splits));
  out.compute_ms = (compute + serial) * 1e3;
  out.memory_ms = memory * 1e3;
  out.overhead_ms = extra * 1e3;
  out.ms = std::max(out.compute_ms, out.memory_ms) + out.overhead_ms;
  out.bound = out.overhead_ms > std::max(out.compute_ms, out.memory_ms) ? "latency"
              : out.compute_ms >= out.memory_ms                         ? "compute"
                                                                        : "memory";
  (void)dram;
  return out;
}

std::unique_ptr<MatmulTuning> matmul_from_spec(const nlohmann::json& spec) {
  const SpecReader read(spec, "matmul");
  const char* hint = "give m, n and k (and optionally batch, layout, dtype, out, epilogue)";
  auto size = [&](const char* key, int64_t fallback) { return read.positive(key, fallback, hint); };
  read.only({"m", "n", "k", "batch", "layout", "dtype", "out", "epilogue", "align"});
  Problem p;
  p.m = size("m", 0);
  p.n = size("n", 0);
  p.k = size("k", 0);
  p.batch = size("batch", 1);
  matmul::set_layout(p, read.text("layout", "nn"));
  p.input = matmul::parse_dtype(read.text("dtype", "bf16"));
  p.output = matmul::parse_dtype(
      read.text("out", p.input == DType::TF32 ? "f32" : read.text("dtype", "bf16")));
  const std::string epilogue = read.text("epilogue", "");
  if (!epilogue.empty()) p.epilogue = matmul::epilogue_from_ir(epilogue, p.input).epilogue;
  if (spec.contains("align")) {
    const nlohmann::json& a = spec.at("align");
    // Read as int64: get<int>() cut 4294967297 to 1.
    if (!a.is_number_integer() || (a.get<int64_t>() != 1 && a.get<int64_t>() != 16))
      throw UserError("matmul spec: 'align' is 16 (aligned operands) or 1 (any), got " + a.dump());
    p.aligned = a.get<int64_t>() == 16;
    if (p.aligned && !packed_operands_aligned(p))
      throw UserError(
          "matmul spec: align 16 needs rows of whole 16-byte chunks; these packed "
          "operands have rows of " +
          std::to_string(p.a_transposed ? p.m : p.k) + " and " +
          std::to_string(p.b_transposed ? p.k : p.n) + " elements");
  } else {
    p.aligned = packed_operands_aligned(p);
  }
  matmul::validate_problem(p);
  return std::make_unique<MatmulTuning>(std::move(p), epilogue);
}

std::unique_ptr<MatmulTuning> matmul_from_signature(const std::string& signature) {
  // m=..,n=..,k=..,batch=..,layout=..,dtype=..,out=..,align=16|1[,epilogue=TEXT{,name:kind:dtype}]
  namespace field = signature_fields;
  const size_t epilogue_at = signature.find(",epilogue=");
  const std::vector<std::string_view> head =
      field::split(std::string_view(signature).substr(0, epilogue_at), ',');
  static const char* const keys[] = {"m", "n", "k", "batch", "layout", "dtype", "out", "align"};
  if (head.size() != std::size(keys)) return nullptr;
  std::string_view values[std::size(keys)];
  for (size_t i = 0; i < std::size(keys); ++i) {
    const std::optional<std::string_view> value = field::value_of(head[i], keys[i]);
    if (!value) return nullptr;
    values[i] = *value;
  }
  const std::optional<int64_t> m = field::count(values[0]), n = field::count(values[1]),
                               k = field::count(values[2]), batch = field::count(values[3]);
  const std::string_view layout = values[4], align = values[7];
  if (!m || !n || !k || !batch || layout.size() != 2 ||
      layout.find_first_not_of("nt") != std::string_view::npos || !field::is_word(values[5]) ||
      !field::is_word(values[6]) || (align != "16" && align != "1"))
    return nullptr;
  try {
    Problem p;
    p.m = *m;
    p.n = *n;
    p.k = *k;
    p.batch = *batch;
    matmul::set_layout(p, std::string(layout));
    p.input = matmul::parse_dtype(std::string(values[5]));
    p.output = matmul::parse_dtype(std::string(values[6]));
    p.aligned = align == "16";
    if (epilogue_at != std::string::npos) {
      // The operands close the text: ",name:kind:dtype" each, read from the end.
      std::string_view tail = std::string_view(signature).substr(epilogue_at);
      p.epilogue.function_name = "kjit_epilogue_fn";
      p.epilogue.function_source = "(from a signature)";
      for (size_t comma; (comma = tail.rfind(',')) != std::string_view::npos && comma > 0;) {
        const std::vector<std::string_view> operand = field::split(tail.substr(comma + 1), ':');
        if (operand.size() != 3 || !field::is_identifier(operand[0]) ||
            (operand[1] != "row" && operand[1] != "col" && operand[1] != "tensor") ||
            (operand[2] != "f32" && operand[2] != "f16" && operand[2] != "bf16"))
          break;
        const matmul::OperandKind kind = operand[1] == "row"   ? matmul::OperandKind::RowVector
                                         : operand[1] == "col" ? matmul::OperandKind::ColumnVector
                                                               : matmul::OperandKind::Tensor;
        p.epilogue.operands.insert(
            p.epilogue.operands.begin(),
            {std::string(operand[0]), kind, matmul::parse_dtype(std::string(operand[2]))});
        tail = tail.substr(0, comma);
      }
      p.epilogue.text = std::string(tail.substr(std::string_view(",epilogue=").size()));
    }
    // A stored row is checked like a spec: sizes whose products pass 64 bits would
    // overflow the model's arithmetic.
    matmul::validate_problem(p);
    return std::make_unique<MatmulTuning>(std::move(p));
  } catch (const UserError&) {
    return nullptr;
  }
}

}  // namespace kjit::tuner
