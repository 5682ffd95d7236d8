#include "kjit/tuner/attention_space.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>

#include "kjit/compiler/lowering/attention_modifier.h"
#include "kjit/support/error.h"
#include "kjit/tuner/signature_fields.h"

namespace kjit::tuner {

namespace {

// Registers a thread needs beyond its accumulators (addresses, the row state,
// fragments in flight), with a margin: ptxas's counts for the compiled space
// minus the accumulators (tests/unit/attention/compile_test.cpp checks that
// nothing kept spills).
constexpr int kOverheadRegisters = 110;

// O (head_dim / 2 floats per 16 rows) and the scores (bn / 2 per 16 rows).
int accumulator_registers(const attention::Problem& p, const attention::Config& c) {
  return c.warp_rows / 16 * (p.head_dim / 2 + c.bn / 2);
}

bool has_modifiers(const attention::Problem& p) {
  return !p.score_mod.empty() || !p.mask_mod.empty();
}

// Modifiers evaluated per score over 128-key tiles cost ~20 registers more (fitted
// to the compile test's spills, EveryConfigWithModifiersCompilesWithoutSpills).
constexpr int kWideTileModifierRegisters = 20;

int forward_registers(const attention::Problem& p, const attention::Config& c) {
  return accumulator_registers(p, c) + kOverheadRegisters +
         (has_modifiers(p) && c.bn >= 128 ? kWideTileModifierRegisters : 0);
}

bool fits_registers(const attention::Problem& p, const attention::Config& c) {
  return forward_registers(p, c) <= 255;
}

// wgmma: the producer warpgroup gives registers to the two consumers (setmaxnreg:
// 40 and 232 per thread); a consumer holds O (head_dim / 2), S (bn / 2) and P as
// 16-bit pairs (bn / 4), plus ~40 more.
constexpr int kWgmmaRegisterLimit = 232;
// What the launch asks for (384 threads share the register file: 65536 / 384,
// rounded down to ptxas' granule); setmaxnreg then moves them.
constexpr int kWgmmaLaunchRegisters = 168;
constexpr int kWgmmaOverheadRegisters = 40;
int wgmma_registers(const attention::Problem& p, const attention::Config& c) {
  return p.head_dim / 2 + c.bn / 2 + c.bn / 4 + kWgmmaOverheadRegisters;
}

// The backward kernels' accumulators per thread (attention_backward.cuh): the "kv"
// kernel holds dV and dK (head_dim / 2 floats each; head dim 256 runs them one at
// a time) and Pᵀ, dPᵀ over bm queries (bm / 2 each); the "q" kernel dQ and P, dP
// over bn keys.
constexpr int kBackwardOverheadRegisters = 72;
// Score and mask modifiers evaluated per score cost the backward kernels registers
// (ptxas keeps each score's positions and tests live across the products): more for
// more scores a thread holds (the dK/dV kernel's Pᵀ and dPᵀ over bm queries), and
// more with a third stage. Fitted on 2026-12-06 to 243 NVRTC compiles (head dims 64,
// 96, 128, 256; bm, bn 32, 64, 128; 2 and 3 stages; no modifier, soft-capping, and
// ALiBi with a window mask; sm_90 and sm_80) and the compile test's soft-capping with
// a window mask: every config the estimate admits compiles without spills. The flat
// margin of 40 before it left out the largest tiles that fit (bm 32 at head dims 128
// and 256: 160 + 72 + 15 + 8 = 255), and with them every config of the head dim 256
// backward with a modifier on the H200 and of the head dim 128 one on the A100: such
// problems were refused (docs/perf/2026-12-06-backward-modifier-registers.md). The
// compile tests keep the fit honest on both
// (EveryConfigWithModifiersCompilesWithoutSpills and its Ampere twin).
constexpr int kBackwardModifierRegisters = 15;
constexpr int kBackwardModifierRegistersPerQuery = 4;  // one more per 4 queries of bm
constexpr int kBackwardModifierStageRegisters = 16;
int backward_registers(const attention::Problem& p, const attention::Config& c) {
  const int kv = (p.head_dim > 128 ? 1 : 2) * p.head_dim / 2 + c.bm;
  const int q = p.head_dim / 2 + c.bn;
  const int modifiers = has_modifiers(p) ? kBackwardModifierRegisters +
                                               c.bm / kBackwardModifierRegistersPerQuery +
                                               (c.stages > 2 ? kBackwardModifierStageRegisters : 0)
                                         : 0;
  return std::max(kv, q) + kBackwardOverheadRegisters + modifiers;
}

// wgmma: a consumer of the dK/dV kernel holds dK and dV (head_dim / 2 floats each)
// and at most Pᵀ as 16-bit pairs (bm / 4) with dPᵀ (bm / 2); one of the dQ kernel dQ
// (head_dim / 2), S and dP (bn / 2 each).
constexpr int kWgmmaBackwardRegisterLimit = 232;
// Both wgmma backward kernels: a producer and two consumer warpgroups of 64 keys (or
// queries), whatever bm and bn stream (attention_backward_sm90.cuh's kThreads).
constexpr int kWgmmaBackwardThreads = 384;
constexpr int kWgmmaBackwardOverheadRegisters = 24;
// Modifiers need no margin here since the mask became a select per score (every
// config compiles without spills with soft-capping or ALiBi and a window mask:
// EveryConfigWithModifiersCompilesWithoutSpills); the margin they had (bn / 2 in dQ,
// bm / 4 in dK/dV) kept out bn = 128, 1-3% faster on the H200 (2026-12-01). A
// heavier modifier that spills is caught when tuning (tune.cpp refuses spills).
// dq=atomic: the dK/dV consumer also holds its share of dQ (32 floats), and there is
// no dQ kernel. (A score modifier's mod'(scale · Sᵀ) was counted as bm / 4 more, which
// kept dq=atomic out with modifiers at head dim 128; it compiles without spills with
// soft-capping and ALiBi, with and without a window mask: the compile test.)
int backward_wgmma_registers(const attention::Problem& p, const attention::Config& c) {
  const int kv = p.head_dim + 3 * c.bm / 4 + (c.atomic_dq ? 32 : 0);
  const int q = c.atomic_dq ? 0 : p.head_dim / 2 + c.bn;
  return std::max(kv, q) + kWgmmaBackwardOverheadRegisters;
}

// bm, bn in {32, 64, 128} x stages in {2, 3}, without what does not fit.
// The configs of `space` that attention::validate() takes; the others go to
// `pruned` with its message (a limit of the problem's size, such as the persistent
// schedule's 2^30 work items, that the engine's dimensions above do not see). The
// problem itself is validated once.
std::vector<attention::Config> keep_valid(const attention::Problem& problem,
                                          std::vector<attention::Config> space,
                                          std::vector<Pruned>* pruned) {
  attention::validate_problem(problem);
  std::vector<attention::Config> kept;
  for (const attention::Config& c : space) {
    try {
      attention::validate_config(problem, c);
      kept.push_back(c);
    } catch (const UserError& e) {
      if (pruned) pruned->push_back({c.to_string(), e.what()});
    }
  }
  return kept;
}

std::vector<attention::Config> backward_space(const attention::Problem& problem,
                                              const cuda::DeviceProperties& device,
                                              std::vector<Pruned>* pruned) {
  std::vector<attention::Config> space;
  for (int bm : {32, 64, 128}) {
    for (int bn : {32, 64, 128}) {
      for (int stages : {2, 3}) {
        const attention::Config c{bm, bn, stages, 16};
        const int shared = attention::shared_bytes(problem, c);
        std::string why;
        if (shared > device.shared_per_block_optin)
          why = fmt::format("{} B of shared memory > the device's {} B", shared,
                            device.shared_per_block_optin);
        else if (backward_registers(problem, c) > 255)
          why = fmt::format(
              "head dim {}, {} queries and {} keys per tile need ~{} registers per thread "
              "(> 255)",
              problem.head_dim, bm, bn, backward_registers(problem, c));
        if (why.empty())
          space.push_back(c);
        else if (pruned)
          pruned->push_back({c.to_string(), why});
      }
    }
  }
  // TMA + wgmma (sm_90, head dims 64 and 128): 128 keys (dK/dV) or queries (dQ) per
  // block; bm queries, bn keys per streamed tile. The atomic dQ (bm 64, no ping-pong,
  // not for a deterministic problem) has no dQ kernel, so no use for bn: once, as 128.
  for (int bm : {64, 128}) {
    for (int bn : {64, 128}) {
      for (int stages : {2, 3}) {
        for (int mode = 0; mode < 3; ++mode) {  // separate; with ping-pong; atomic dQ
          attention::Config c{bm, bn, stages, 16};
          c.wgmma = true;
          c.pingpong = mode == 1;
          c.atomic_dq = mode == 2;
          if (c.atomic_dq && (bm != 64 || bn != 128)) continue;
          std::string why;
          if (device.cc_major * 10 + device.cc_minor != 90)
            why = "wgmma and TMA need an sm_90 GPU; " + device.arch() + " has neither";
          else if (problem.head_dim != 64 && problem.head_dim != 128)
            why = fmt::format("the wgmma engine takes head dims 64 and 128, not {}",
                              problem.head_dim);
          else if (c.atomic_dq && problem.deterministic)
            why = "dq=atomic: the problem asks for the same bits every run";
          else if (attention::shared_bytes(problem, c) > device.shared_per_block_optin)
            why = fmt::format("{} B of shared memory > the device's {} B",
                              attention::shared_bytes(problem, c), device.shared_per_block_optin);
          else if (backward_wgmma_registers(problem, c) > kWgmmaBackwardRegisterLimit)
            why = fmt::format(
                "head dim {}, {} queries and {} keys per tile need ~{} registers per thread "
                "(> {} for 384 threads)",
                problem.head_dim, bm, bn, backward_wgmma_registers(problem, c),
                kWgmmaBackwardRegisterLimit);
          if (why.empty())
            space.push_back(c);
          else if (pruned)
            pruned->push_back({c.to_string(), why});
        }
      }
    }
  }
  return space;
}

}  // namespace

std::vector<attention::Config> attention_space(const attention::Problem& problem,
                                               const cuda::DeviceProperties& device,
                                               std::vector<Pruned>* pruned) {
  if (problem.backward) return keep_valid(problem, backward_space(problem, device, pruned), pruned);
  std::vector<attention::Config> space;
  for (int bm : {64, 128}) {
    for (int bn : {32, 64, 128}) {
      for (int stages : {2, 3}) {
        for (int warp_rows : {16, 32}) {
          const attention::Config c{bm, bn, stages, warp_rows};
          const int shared = attention::shared_bytes(problem, c);
          if (shared > device.shared_per_block_optin) {
            if (pruned)
              pruned->push_back(
                  {c.to_string(), fmt::format("{} B of shared memory > the device's {} B", shared,
                                              device.shared_per_block_optin)});
            continue;
          }
          if (!fits_registers(problem, c)) {
            if (pruned)
              pruned->push_back(
                  {c.to_string(),
                   fmt::format("head dim {}, {} keys per tile and {} rows per warp need ~{} "
                               "registers per thread (> 255)",
                               problem.head_dim, bn, warp_rows, forward_registers(problem, c))});
            continue;
          }
          space.push_back(c);
        }
      }
    }
  }
  // The TMA + wgmma engine (sm_90): 128 rows per block, 64 or 128 keys per tile, a
  // block per query tile or persistent blocks.
  for (int bn : {64, 128}) {
    for (int stages : {2, 3}) {
      for (bool pingpong : {false, true}) {
        for (bool persistent : {false, true}) {
          attention::Config c;
          c.wgmma = true;
          c.bm = 128;
          c.bn = bn;
          c.stages = stages;
          c.pingpong = pingpong;
          c.persistent = persistent;
          std::string why;
          if (device.cc_major * 10 + device.cc_minor != 90) {
            why = "wgmma and TMA need an sm_90 GPU; " + device.arch() + " has neither";
          } else if (problem.head_dim != 64 && problem.head_dim != 128) {
            why = fmt::format("the wgmma engine takes head dims 64 and 128, not {}",
                              problem.head_dim);
          } else if (attention::shared_bytes(problem, c) > device.shared_per_block_optin) {
            why = fmt::format("{} B of shared memory > the device's {} B",
                              attention::shared_bytes(problem, c), device.shared_per_block_optin);
          } else if (wgmma_registers(problem, c) > kWgmmaRegisterLimit) {
            why = fmt::format(
                "head dim {} and {} keys per tile need ~{} registers per thread (> {} "
                "for 384 threads)",
                problem.head_dim, bn, wgmma_registers(problem, c), kWgmmaRegisterLimit);
          }
          if (why.empty()) {
            space.push_back(c);
          } else if (pruned) {
            pruned->push_back({c.to_string(), why});
          }
        }
      }
    }
  }
  return keep_valid(problem, std::move(space), pruned);
}

namespace {

constexpr double kLaunchSeconds = 2.5e-6;
// Per query tile, not overlapped with its own main loop: Q's load and the first
// scores before the pipeline runs, and the write-out.
constexpr double kTileFillSeconds = 1.5e-6;
// Persistent blocks (wgmma forward): the next item's loads run under this one's
// compute; what is left per item is its softmax's last rows and the write-out.
constexpr double kPersistentItemSeconds = 0.4e-6;
// The wgmma backward's blocks (128 keys, or 128 queries), one per SM: K and V (or Q
// and dO) loaded before the first product, dK and dV (or dQ) written after the last,
// none of it under another block's products. Fitted on the H200 (ncu, 2026-12-04):
// the dK/dV kernel with the atomic dQ at D = 128 took 23.2 us a block slot with
// 5.6 query tiles of 64 (a 256-key window mask, S = 2k) and 48.2 us with 13.5 (a
// 1024-key one): 3.2 us a tile and 5.5 us a block
// (docs/perf/2026-12-04-h200-dq-sums-first-store.md).
constexpr double kBackwardBlockSeconds = 5.5e-6;

// The backward's memory-bound passes before and after its main kernels, which
// overlap nothing: the prep kernel reads O and dO and the LSE and writes D and
// LSE · log2 e per query row (and, dq=atomic, zeroes the f32 sums of dQ); with the
// atomic dQ the finishing kernel reads the sums and writes dQ. On the H200 at
// 16k tokens x 16 heads, D = 128: 68.7 and 46.9 us (ncu), against 61 and 45 us at
// the datasheet's DRAM rate.
double backward_pass_bytes(const attention::Problem& p, const attention::Config& c) {
  const double rows = static_cast<double>(p.total_q()) * static_cast<double>(p.heads);
  const double element = 2, d = p.head_dim;
  const double prep = rows * (2 * element * d + 4 + 8 + (c.atomic_dq ? 4 * d : 0));
  const double finish = c.atomic_dq ? rows * (4 * d + element * d) : 0;
  return prep + finish;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

const char* mask_kind(const attention::Problem& p) {
  if (p.window_left >= 0) return "window";
  if (p.right() >= 0) return "causal";
  return "none";
}

// The fraction of the tensor cores' peak a config reaches, before any trial: the
// H200's measurements (docs/perf/2026-11-30-h200-attention.md) over its wgmma peak.
// wgmma: 128 keys per tile, three buffers and ping-pong each add (0.66 for all three);
// mma.sync: ~0.2 of the wgmma peak on sm_90 (its own peak is half that), 32 rows per
// warp and wider tiles help; on other GPUs mma.sync is the peak's engine.
double efficiency_prior(const attention::Problem& p, const attention::Config& c,
                        const cuda::DeviceProperties& device) {
  const bool hopper = device.cc_major * 10 + device.cc_minor == 90;
  // dq=atomic: five products instead of seven, the f32 dQ tile added into the sums by
  // the copy engine (cp.reduce.async.bulk). H200, 2026-12-02, S = 2k: at D = 128
  // 378.0 TFLOP/s against 341.9 for the separate dQ (1.105x); at D = 64, each
  // warpgroup's half of the columns over all 128 keys, 232.4 against 222.3 (1.045x;
  // causal 200.9 against 188.7). Since 2026-12-04 the copy engine reads one of two
  // dQ tiles while the consumers fill the other, which the D = 64 kernel gained most
  // from (2.94 -> 2.40 ms at 8 x 2k tokens, 32 heads, where the separate dQ's best
  // config took 2.86 ms before; D = 128 1.73 -> 1.63 ms). The D = 64 factor, 1.27,
  // is fitted to the 2.40 ms (docs/perf/2026-12-04-h200-two-dq-tiles.md); the
  // D = 128 one, 1.16, takes in 5% of that 6% gain: with 1.105 the model predicted the
  // atomic dQ 3-5% slow (H200 1.671 ms for 1.626; H100, 2026-12-06, 1.721 for 1.647)
  // and the separate dQ 5-17% fast on the H100 (four masks at S = 2k and 8k), which
  // picked the separate dQ for a 256-key window, 1.11-1.13x slower there
  // (docs/perf/2026-12-06-h100-backward-dq-modes.md).
  // At D = 64 a tile's products are half as long against the same exponentials,
  // loads and waits: with the blocks' fixed costs and the passes apart, the H200 ran
  // the backward at 0.6x D = 128's rate (2026-12-04, every config measured at 8 x 2k
  // tokens, 32 heads: the atomic dQ 2.90 ms, causal 1.68 ms).
  const double backward_head_dim = p.head_dim >= 128 ? 1.0 : 0.6;
  // Since 0464dcf the dK/dV kernel tests the built-in masks' edges in a loop of its
  // own (a branch per score before), unless a score modifier keeps the test inline:
  // the atomic dQ's backward ran 1.06-1.30x faster on the H100. Fitted there to ten
  // problems (no mask, causal, windows, GQA, S 512 to 8k): 1.15 at D = 128 (measured
  // 0.97-1.04x the prediction), 1.4 at D = 64 (0.96-0.99x)
  // (docs/perf/2026-12-06-h100-backward-edge-select.md). A score modifier whose mod'
  // is a constant (ALiBi) takes the same loop since 2026-12-06: ALiBi's backward ran
  // 1.13-1.23x faster, and the prediction at 1.15 is 0.95-1.01x the measured
  // (docs/perf/2026-12-06-h100-alibi-backward-edge-loop.md).
  const bool varying_grad =
      !p.score_mod.empty() && !attention::cached_score_mod(p.score_mod)->constant_grad;
  const double edge_select = varying_grad ? 1.0 : p.head_dim >= 128 ? 1.15 : 1.4;
  // A score modifier whose mod' varies (soft-capping: a tanh and its derivative) is
  // evaluated with mod' at every score of the dK/dV kernel, and the separate dQ's
  // kernel evaluates both again. Fitted on the H100 at D = 128 (session 34: soft-capping
  // with the atomic dQ 6.3731 ms at S = 8k, 1.0603 causal at 2k; with the separate dQ
  // 2.1256 at 2k, where the model had predicted 1.637 and so picked it over the atomic
  // dQ, predicted 1.651): 0.93 for every wgmma backward, and 0.83 more for the separate dQ
  // (docs/perf/2026-12-06-h100-status-and-mma-edge-loop.md). Not measured at D = 64.
  const double varying_mod = varying_grad ? 0.93 : 1.0;
  const double dq_modifier_again = varying_grad ? 0.83 : 1.0;
  if (p.backward && c.wgmma && c.atomic_dq)
    return 0.4 * 1.02 * (p.head_dim >= 128 ? 1.16 : 1.27) * (c.stages >= 3 ? 0.98 : 1.0) *
           backward_head_dim * edge_select * varying_mod;
  // The separate dQ kernel finds which 4 scores the built-in masks keep ahead of them
  // since 2026-12-06 (a branch per score before): 1.12-1.13x faster backward on the
  // H100 at D = 128, S = 2k (deterministic, no mask and causal). Fitted there: 1.15
  // (the prediction 0.96-1.09x the measured for no mask, causal and a 255:0 window,
  // and each still slower than the atomic dQ, as measured: 1.02-1.05x; at 1.2 the
  // window's separate dQ came first)
  // (docs/perf/2026-12-06-h100-alibi-backward-edge-loop.md). D = 64 is not measured.
  const double dq_edge_bits = p.head_dim >= 128 ? 1.15 : 1.0;
  if (p.backward && c.wgmma)  // seven products for the credited five
    return 0.4 * (c.bm >= 128 ? 1.05 : 1.0) * (c.bn >= 128 ? 1.02 : 1.0) *
           (c.pingpong ? 0.95 : 1.0) * (c.stages >= 3 ? 0.98 : 1.0) * backward_head_dim *
           dq_edge_bits * varying_mod * dq_modifier_again;
  if (p.backward)
    return (hopper ? 0.12 : 0.3) * (c.bm >= 64 ? 1.05 : 1.0) * (c.bn >= 64 ? 1.05 : 1.0);
  // Persistent blocks: two buffers suffice (the next item's loads overlap this one's
  // compute); the saved prologues are the model's serial term (H200, D = 128, bn 128,
  // against the block per tile with 3 buffers: 1.04x at S = 2k without a mask, 1.12x
  // at S = 512, 1.11x with a 255:0 window; causal, with query tiles taken in pairs of
  // equal work, 1.06x at S = 512, 1.04x at 2k, 1.02x at 8k).
  if (c.wgmma)
    return 0.5 * (c.bn >= 128 ? 1.15 : 1.0) * (c.stages >= 3 || c.persistent ? 1.1 : 0.85) *
           (c.pingpong ? 1.05 : 1.0) * (p.head_dim >= 128 ? 1.0 : 0.75);
  return (hopper ? 0.2 : 0.5) * (c.warp_rows == 32 ? 1.2 : 1.0) *
         (c.bn >= 128  ? 1.04
          : c.bn >= 64 ? 1.0
                       : 0.95) *
         (c.bm >= 128 ? 1.05 : 1.0) * (c.stages >= 3 ? 0.99 : 1.0);
}

std::string efficiency_key(const attention::Problem& p, const attention::Config& c) {
  if (p.backward)
    return fmt::format("attention:backward:{}:d{}:{}x{}:s{}{}{}", c.wgmma ? "wgmma" : "sync",
                       p.head_dim, c.bm, c.bn, c.stages, c.pingpong ? ":pp1" : "",
                       c.atomic_dq ? ":dqa" : "");
  return c.wgmma ? fmt::format("attention:wgmma:d{}:bn{}:s{}:pp{}{}", p.head_dim, c.bn, c.stages,
                               c.pingpong ? 1 : 0, c.persistent ? ":ps1" : "")
                 : fmt::format("attention:sync:d{}:{}x{}:w{}:s{}", p.head_dim, c.bm, c.bn,
                               c.warp_rows, c.stages);
}

std::string window_side(int64_t v) {
  return v < 0 ? std::string("inf") : std::to_string(v);
}

// x rounded up to a quarter octave: x itself up to 8, then 10, 12, 14, 16, 20, 24,
// 28, 32, 40, ... (steps of at most 25%).
int64_t quarter_octave(int64_t x) {
  if (x <= 8) return x;
  int top = 63;
  while (!((x >> top) & 1)) --top;
  const int64_t step = int64_t{1} << (top - 2);
  return (x + step - 1) / step * step;
}

// The representative lengths of one side (queries or keys) of a packed batch of
// `count` sequences (count a quarter octave already): the longest first, the
// others at the mean length of the rest, both rounded up.
std::vector<int64_t> profile_lengths(const std::vector<int64_t>& cu, int64_t count) {
  const int64_t sequences = static_cast<int64_t>(cu.size()) - 1;
  int64_t longest = 0;
  for (size_t i = 1; i < cu.size(); ++i) longest = std::max(longest, cu[i] - cu[i - 1]);
  std::vector<int64_t> out(static_cast<size_t>(count), 0);
  // At least 1: a batch may hold empty sequences (offsets never decrease), but a
  // problem's lengths are positive (a mean of 0 made a representative that
  // set_lengths refused, so such a batch could not be planned).
  out[0] = std::max<int64_t>(1, quarter_octave(longest));
  if (count > 1) {
    // The rest's mean, rounded up; with a single sequence, the longest stands in.
    const int64_t rest =
        sequences > 1 ? (cu.back() - longest + sequences - 2) / (sequences - 1) : longest;
    std::fill(out.begin() + 1, out.end(), std::clamp<int64_t>(quarter_octave(rest), 1, out[0]));
  }
  return out;
}

}  // namespace

attention::Problem length_profile(const attention::Problem& problem) {
  if (!problem.packed()) return problem;
  // No more sequences than a grid dimension holds (57345..65535 rounded to 65536, a
  // batch the kernels refuse: such a batch could not be planned).
  const int64_t count = std::min<int64_t>(quarter_octave(problem.batch), attention::kMaxBatch);
  const std::vector<int64_t> q = profile_lengths(problem.cu_seqlens_q, count);
  const std::vector<int64_t> k = profile_lengths(problem.cu_seqlens_k, count);
  constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
  auto tokens = [](const std::vector<int64_t>& lengths) {
    double sum = 0;
    for (int64_t l : lengths) sum += static_cast<double>(l);
    return sum;
  };
  if (tokens(q) > kMaxTokens || tokens(k) > kMaxTokens) return problem;
  attention::Problem out = problem;
  out.set_lengths(q, k);
  return out;
}

AttentionTuning::AttentionTuning(attention::Problem problem)
    : problem_(std::move(problem)), profile_(length_profile(problem_)) {}

std::string AttentionTuning::signature() const {
  return profile_.to_string();
}

std::unique_ptr<TuningProblem> AttentionTuning::tuned_as() const {
  if (profile_.cu_seqlens_q == problem_.cu_seqlens_q &&
      profile_.cu_seqlens_k == problem_.cu_seqlens_k)
    return nullptr;
  return std::make_unique<AttentionTuning>(profile_);
}

std::string AttentionTuning::problem_class() const {
  return problem_.kernel_class() + ",mask=" + mask_kind(problem_) +
         (problem_.packed() ? ",packed" : "");
}

std::vector<double> AttentionTuning::sizes() const {
  const attention::Problem& p = problem_;
  // K/V heads: grouped-query attention reads each K/V tile for several Q heads.
  std::vector<double> out = {static_cast<double>(p.batch), static_cast<double>(p.heads),
                             static_cast<double>(p.kv_heads), static_cast<double>(p.seq_q),
                             static_cast<double>(p.seq_k)};
  // A window's width decides the work (a 64-key window at 8k sequences is about a
  // 64th of an 8k-key one): its sides, an unbounded one as wide as the keys
  // (+1, so that a side of 0 (causal) compares as a size).
  if (p.window_left >= 0) {
    auto side = [&](int64_t width) {
      return static_cast<double>((width < 0 ? p.seq_k : std::min(width, p.seq_k)) + 1);
    };
    out.push_back(side(p.window_left));
    out.push_back(side(p.right()));
  }
  return out;
}

nlohmann::json AttentionTuning::spec() const {
  const attention::Problem& p = problem_;
  nlohmann::json out = {{"family", "attention"},
                        {"heads", p.heads},
                        {"kv_heads", p.kv_heads},
                        {"head_dim", p.head_dim},
                        {"dtype", p.dtype == ir::DType::F16 ? "f16" : "bf16"},
                        {"causal", p.causal}};
  if (p.packed()) {
    std::vector<int64_t> q, k;
    for (size_t i = 1; i < p.cu_seqlens_q.size(); ++i) {
      q.push_back(p.cu_seqlens_q[i] - p.cu_seqlens_q[i - 1]);
      k.push_back(p.cu_seqlens_k[i] - p.cu_seqlens_k[i - 1]);
    }
    out["seqlens_q"] = q;
    out["seqlens_k"] = k;
  } else {
    out["batch"] = p.batch;
    out["seq_q"] = p.seq_q;
    out["seq_k"] = p.seq_k;
  }
  if (p.window_left >= 0 || p.window_right >= 0)
    out["window"] = window_side(p.window_left) + ":" + window_side(p.window_right);
  if (p.scale > 0) out["scale"] = p.scale;
  if (p.backward) out["backward"] = true;
  if (p.backward && p.deterministic) out["deterministic"] = true;
  if (!p.score_mod.empty()) out["score_mod"] = p.score_mod;
  if (!p.mask_mod.empty()) out["mask_mod"] = p.mask_mod;
  return out;
}

Space AttentionTuning::space(const cuda::DeviceProperties& device) const {
  Space space;
  for (const attention::Config& c : attention_space(problem_, device, &space.pruned))
    space.candidates.push_back(c.to_string());
  return space;
}

std::string AttentionTuning::canonical(const std::string& text) const {
  const attention::Config c = attention::Config::parse(text);
  attention::validate(problem_, c);
  return c.to_string();
}

std::vector<KernelSource> AttentionTuning::sources(const std::string& text) const {
  const attention::Config config = attention::Config::parse(text);
  if (!problem_.backward) return {attention::lower(problem_, config)};
  std::vector<KernelSource> out;
  for (attention::BackwardKernel& k : attention::lower_backward(problem_, config))
    out.push_back(std::move(k.source));
  return out;
}

Work AttentionTuning::work() const {
  const attention::Problem& p = problem_;
  Work w;
  w.flops = attention::flops(p);
  const double element = 2;
  // Forward: Q, K, V in, O out. Backward: Q, K, V, O, dO in, dQ, dK, dV out.
  const double query_tensors = p.backward ? 4.0 : 2.0, key_tensors = p.backward ? 4.0 : 2.0;
  w.bytes = element * p.head_dim *
                (query_tensors * static_cast<double>(p.total_q()) * p.heads +
                 key_tensors * static_cast<double>(p.total_k()) * p.kv_heads) +
            (p.backward ? 12.0 : 4.0) * static_cast<double>(p.total_q()) * p.heads;  // LSE, D
  return w;
}

Prediction AttentionTuning::predict(const std::string& text, const cuda::DeviceProperties& device,
                                    const Efficiencies& efficiencies,
                                    const KernelResources* resources) const {
  return predict(attention::Config::parse(text), device, efficiencies, resources);
}

Prediction AttentionTuning::predict(const attention::Config& c,
                                    const cuda::DeviceProperties& device,
                                    const Efficiencies& efficiencies,
                                    const KernelResources* resources) const {
  const attention::Problem& p = problem_;
  const DeviceRates rates = rates_of(device);
  Prediction out;
  out.work = work();
  if (resources && resources->threads > 0) {
    out.resources = *resources;
  } else {
    // The wgmma backward kernels are kWgmmaBackwardThreads at the launch's register
    // count, whatever bm and bn stream (an estimate from bn had them two blocks an SM).
    out.resources.threads =
        p.backward ? (c.wgmma ? kWgmmaBackwardThreads : c.bn / 16 * 32) : c.threads();
    out.resources.registers =
        p.backward ? (c.wgmma ? kWgmmaLaunchRegisters : std::min(255, backward_registers(p, c)))
        : c.wgmma  ? kWgmmaLaunchRegisters
                   : std::min(255, accumulator_registers(p, c) + kOverheadRegisters);
    out.resources.shared_bytes = attention::shared_bytes(p, c);
    out.resources.estimated = true;
  }
  out.occupancy = occupancy(out.resources, device);
  const int resident = std::max(out.occupancy.blocks_per_sm, 1);
  const int64_t sms = std::max(device.sm_count, 1);

  // Work units: query tiles of every (sequence, head); backward: also key tiles of
  // every (sequence, K/V head), the dK/dV kernel's blocks.
  // (The wgmma backward kernels' blocks are 128 rows; bm and bn are their streamed tiles.)
  const int query_block = p.backward && c.wgmma ? 128 : c.bm;
  const int key_block = p.backward && c.wgmma ? 128 : c.bn;
  int64_t tiles = 0;
  for (int64_t b = 0; b < (p.packed() ? p.batch : 1); ++b)
    tiles += ceil_div(p.seq_q_of(b), query_block);
  tiles *= p.heads * (p.packed() ? 1 : p.batch);
  if (p.backward && c.atomic_dq) tiles = 0;  // no dQ kernel: the dK/dV blocks do it all
  if (p.backward) {
    int64_t key_tiles = 0;
    for (int64_t b = 0; b < (p.packed() ? p.batch : 1); ++b)
      key_tiles += ceil_div(p.seq_k_of(b), key_block);
    tiles += key_tiles * p.kv_heads * (p.packed() ? 1 : p.batch);
  }
  out.waves = waves_of(tiles, sms * resident);
  if (c.persistent) out.persistent_blocks = std::min<int64_t>(tiles, sms * resident);

  out.efficiency_key = efficiency_key(p, c);
  out.group = fmt::format("{}:{}x{}",
                          p.backward ? "backward"
                          : c.wgmma  ? "wgmma"
                                     : "sync",
                          c.bm, c.bn);
  out.efficiency_fitted = efficiencies.fitted(out.efficiency_key);
  out.efficiency = efficiencies.get(out.efficiency_key, efficiency_prior(p, c, device));
  const double sm_rate = rates.tensor_flops_per_sm_clock * rates.sm_clock_hz * out.efficiency;
  // Masks: the kernels compute whole tiles, those between the built-in masks' edges
  // that the mask modifier's tile analysis does not let them skip (work() credits
  // only the pairs the masks keep). A 256-key window at S = 2k visits half again as
  // many pairs as it keeps with 128 x 128 tiles: counting the kept pairs predicted
  // its backward 25-44% short on the H100 (2026-12-06), where a mask modifier
  // spelling the same window, counted by its visited tiles, came within 2%.
  // (The fraction once: a mask modifier's tile analysis runs per tile.)
  const double visited = attention::visited_tile_fraction(p, query_block, c.bn);
  const double credited = out.work.flops;
  const double flops = attention::unmasked_flops(p) * visited;  // visited_flops
  out.work.flops = flops;  // what the kernel computes, for the roofline and TFLOP/s
  if (visited < 1.0)
    out.notes.push_back(fmt::format(
        "masks: {:.1f}% of the {}x{} tiles visited (the rest skipped), {:.0f}% of the pairs "
        "they compute kept",
        100.0 * visited, query_block, c.bn, 100.0 * credited / flops));
  const double tile_seconds = flops / static_cast<double>(std::max<int64_t>(tiles, 1)) / sm_rate;
  const int64_t tiles_per_sm = ceil_div(tiles, sms);
  const double compute = static_cast<double>(tiles_per_sm) * tile_seconds;
  const double fill = p.backward && c.wgmma ? kBackwardBlockSeconds : kTileFillSeconds;
  const double serial =
      c.persistent ? kTileFillSeconds + static_cast<double>(tiles_per_sm) * kPersistentItemSeconds
                   : static_cast<double>(tiles_per_sm) * fill / resident;

  // Memory: Q, K, V, O and the LSE once from DRAM; K and V once per query tile
  // through L2 (the keys each tile sees: the FLOPs say how many).
  const double kv_reads = flops / (4.0 * p.head_dim) / c.bm * 2.0 * p.head_dim * 2.0;
  const double memory =
      std::max(out.work.bytes / rates.dram_bytes_per_s, kv_reads / rates.l2_bytes_per_s);

  out.compute_ms = (compute + serial) * 1e3;
  out.memory_ms = memory * 1e3;
  out.overhead_ms = kLaunchSeconds * 1e3;
  if (p.backward) {
    const double pass_bytes = backward_pass_bytes(p, c);
    const int passes = c.atomic_dq ? 2 : 1;
    out.overhead_ms += (pass_bytes / rates.dram_bytes_per_s + passes * kLaunchSeconds) * 1e3;
    out.notes.push_back(fmt::format(
        "backward: {} {:.0f} MB, overlapping nothing: {:.4f} ms of the overheads",
        c.atomic_dq
            ? "the prep kernel before the dK/dV kernel and the dQ-finishing kernel after it move"
            : "the prep kernel before the dK/dV and dQ kernels moves",
        pass_bytes / 1e6, pass_bytes / rates.dram_bytes_per_s * 1e3));
  }
  out.ms = std::max(out.compute_ms, out.memory_ms) + out.overhead_ms;
  // A tie (on the DRAM floor, say) is broken by the term under it. A 256-key window
  // at 16k tokens ties four wgmma configs on the H100's floor; with the least compute,
  // 128 x 128 ping-pong ran 0.149 ms at S = 2k against 0.164 for the space's first
  // (128 x 64), and at 8k 0.151 against 0.152 for 128 x 128 without it (2026-12-06,
  // docs/perf/2026-12-06-h100-backward-dq-modes.md).
  out.tie_break = out.compute_ms + out.memory_ms;
  out.bound = out.overhead_ms > std::max(out.compute_ms, out.memory_ms) ? "latency"
              : out.compute_ms >= out.memory_ms                         ? "compute"
                                                                        : "memory";
  if (p.backward && c.atomic_dq)
    out.notes.push_back(fmt::format(
        "backward, TMA + wgmma: dK/dV blocks of 128 keys streaming {} queries per tile, {} "
        "stages, and their share of dQ added into f32 sums by the copy engine (five products; "
        "the last bits of dQ vary from run to run)",
        c.bm, c.stages));
  else if (p.backward && c.wgmma)
    out.notes.push_back(fmt::format(
        "backward, TMA + wgmma: dK/dV blocks of 128 keys streaming {} queries per tile, dQ "
        "blocks of 128 queries streaming {} keys, {} stages; seven products for the five "
        "credited",
        c.bm, c.bn, c.stages));
  else if (p.backward)
    out.notes.push_back(
        fmt::format("backward, mma.sync: dK/dV blocks of {} keys, dQ blocks of {} queries, {} "
                    "stages; seven products for the five credited",
                    c.bn, c.bm, c.stages));
  else if (c.wgmma)
    out.notes.push_back(
        fmt::format("TMA + wgmma: {} query tiles of {} rows, {} keys per tile, "
                    "{} buffers{}{}",
                    tiles, c.bm, c.bn, c.stages, c.pingpong ? ", consumers in ping-pong" : "",
                    c.persistent ? ", persistent blocks (one per SM) walking the tiles" : ""));
  else
    out.notes.push_back(
        fmt::format("mma.sync: {} query tiles of {} rows ({} warps of {}), {} "
                    "keys per tile",
                    tiles, c.bm, c.warps(), c.warp_rows, c.bn));
  return out;
}

attention::Config attention_default(const attention::Problem& problem,
                                    const cuda::DeviceProperties& device) {
  const AttentionTuning tuning(problem);
  const Efficiencies priors;  // nothing measured: the priors
  std::optional<attention::Config> best;
  Prediction best_prediction;
  for (const attention::Config& c : attention_space(problem, device)) {
    const Prediction prediction = tuning.predict(c, device, priors, nullptr);
    if (!best || predicted_faster(prediction, best_prediction)) {  // as Chooser::model_choice
      best = c;
      best_prediction = prediction;
    }
  }
  if (!best)
    throw UserError(
        fmt::format("no attention config fits {} for {}", device.name, problem.to_string()));
  return *best;
}

std::unique_ptr<AttentionTuning> attention_from_spec(const nlohmann::json& spec) {
  const SpecReader read(spec, "attention");
  read.only({"batch", "heads", "kv_heads", "seq_q", "seq_k", "head_dim", "dtype", "causal",
             "window", "scale", "seqlens_q", "seqlens_k", "backward", "deterministic", "score_mod",
             "mask_mod"});
  auto integer = [&](const char* key, int64_t fallback) {
    return read.positive(key, fallback,
                         "give seq_q (or seqlens_q), and optionally batch, heads, ...");
  };
  auto lengths = [&](const char* key) {
    const nlohmann::json& v = spec.at(key);
    std::vector<int64_t> out;
    if (v.is_array())
      for (const nlohmann::json& item : v)
        if (item.is_number_integer()) out.push_back(item.get<int64_t>());
    if (!v.is_array() || out.size() != v.size() || out.empty())
      throw UserError(
          fmt::format("attention spec: '{}' must be a list of lengths, got {}", key, v.dump()));
    return out;
  };
  attention::Problem p;
  p.heads = integer("heads", 1);
  p.kv_heads = integer("kv_heads", p.heads);
  // Checked before the cast: 2^32 + 128 was read as 128.
  const int64_t head_dim = integer("head_dim", 128);
  if (head_dim > 256)
    throw UserError(fmt::format("attention spec: head_dim {} is not supported", head_dim),
                    "64, 96, 128 or 256");
  p.head_dim = static_cast<int>(head_dim);
  const std::string dtype = read.text("dtype", "bf16");
  if (dtype != "bf16" && dtype != "f16")
    throw UserError("attention spec: dtype '" + dtype + "' is not supported", "bf16 or f16");
  p.dtype = dtype == "f16" ? ir::DType::F16 : ir::DType::BF16;
  if (spec.contains("causal")) {
    if (!spec.at("causal").is_boolean())
      throw UserError("attention spec: 'causal' must be true or false");
    p.causal = spec.at("causal").get<bool>();
  }
  if (spec.contains("backward")) {
    if (!spec.at("backward").is_boolean())
      throw UserError("attention spec: 'backward' must be true or false");
    p.backward = spec.at("backward").get<bool>();
  }
  if (spec.contains("deterministic")) {
    if (!spec.at("deterministic").is_boolean())
      throw UserError("attention spec: 'deterministic' must be true or false");
    p.deterministic = spec.at("deterministic").get<bool>();
    if (p.deterministic && !p.backward)
      throw UserError("attention spec: 'deterministic' applies to the backward pass",
                      "add \"backward\": true (the forward pass gives the same bits anyway)");
  }
  if (spec.contains("window")) {
    const std::string w = spec.at("window").is_string() ? spec.at("window").get<std::string>() : "";
    const size_t colon = w.find(':');
    auto side = [&](const std::string& text) -> int64_t {
      if (text == "inf") return -1;
      char* end = nullptr;
      const long long v = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || v < 0)
        throw UserError("attention spec: 'window' must be \"L:R\" (counts or inf), got " +
                        spec.at("window").dump());
      return v;
    };
    if (colon == std::string::npos)
      throw UserError("attention spec: 'window' must be \"L:R\", got " + spec.at("window").dump());
    p.window_left = side(w.substr(0, colon));
    p.window_right = side(w.substr(colon + 1));
  }
  p.score_mod = read.text("score_mod", "");
  p.mask_mod = read.text("mask_mod", "");
  if (spec.contains("scale")) {
    if (!spec.at("scale").is_number()) throw UserError("attention spec: 'scale' must be a number");
    p.scale = spec.at("scale").get<double>();
  }
  if (spec.contains("seqlens_q")) {
    if (spec.contains("batch") || spec.contains("seq_q") || spec.contains("seq_k"))
      throw UserError("attention spec: seqlens_q replaces batch, seq_q and seq_k");
    p.set_lengths(lengths("seqlens_q"),
                  spec.contains("seqlens_k") ? lengths("seqlens_k") : std::vector<int64_t>{});
  } else {
    if (spec.contains("seqlens_k"))  // it was ignored: the batch tuned was another
      throw UserError(
          "attention spec: seqlens_k needs seqlens_q (a packed batch names both, or "
          "the query lengths alone when they are the keys' too)");
    p.batch = integer("batch", 1);
    p.seq_q = integer("seq_q", 0);
    p.seq_k = integer("seq_k", p.seq_q);
  }
  attention::validate_problem(p);
  return std::make_unique<AttentionTuning>(std::move(p));
}

std::unique_ptr<AttentionTuning> attention_from_signature(const std::string& signature) {
  // batch=..,heads=..,kv_heads=..,seq_q=..,seq_k=..,causal=0|1,window=L:R,scale=..,
  // [packed=q:a+bxN/k:c+dxN,]dtype=bf16|f16,d=..[,pass=backward][,deterministic=1]
  namespace field = signature_fields;
  // A signature read from the store rebuilds at most this many packed sequences.
  constexpr int64_t kMaxRebuiltSequences = int64_t{1} << 20;
  const std::vector<std::string_view> fields = field::split(signature, ',');
  size_t next = 0;
  // The next field's value when it is KEY=value; nullopt (and no step) otherwise.
  auto take = [&](std::string_view key) -> std::optional<std::string_view> {
    if (next >= fields.size()) return std::nullopt;
    std::optional<std::string_view> value = field::value_of(fields[next], key);
    if (value) ++next;
    return value;
  };
  // "inf" (-1) or a count.
  auto side = [](std::string_view text) -> std::optional<int64_t> {
    if (text == "inf") return -1;
    return field::count(text);
  };
  // "1+7+320x39": lengths, a run of equal ones as LENGTHxCOUNT.
  auto lengths = [](std::string_view text) -> std::optional<std::vector<int64_t>> {
    std::vector<int64_t> out;
    for (std::string_view item : field::split(text, '+')) {
      const std::vector<std::string_view> run = field::split(item, 'x');
      const std::optional<int64_t> length = field::count(run[0]);
      const std::optional<int64_t> times = run.size() == 2 ? field::count(run[1]) : 1;
      if (run.size() > 2 || !length || !times || *times < 1 ||
          static_cast<int64_t>(out.size()) + *times > kMaxRebuiltSequences)
        return std::nullopt;
      out.insert(out.end(), static_cast<size_t>(*times), *length);
    }
    return out;
  };

  attention::Problem p;
  const std::optional<int64_t> batch = field::count(take("batch").value_or("")),
                               heads = field::count(take("heads").value_or("")),
                               kv_heads = field::count(take("kv_heads").value_or("")),
                               seq_q = field::count(take("seq_q").value_or("")),
                               seq_k = field::count(take("seq_k").value_or(""));
  const std::optional<std::string_view> causal = take("causal"), window = take("window"),
                                        scale = take("scale");
  if (!batch || !heads || !kv_heads || !seq_q || !seq_k || !causal ||
      (*causal != "0" && *causal != "1") || !window || !scale)
    return nullptr;
  const std::vector<std::string_view> window_sides = field::split(*window, ':');
  if (window_sides.size() != 2) return nullptr;
  const std::optional<int64_t> left = side(window_sides[0]), right = side(window_sides[1]);
  if (!left || !right) return nullptr;
  if (std::optional<std::string_view> packed = take("packed")) {
    const std::vector<std::string_view> sides = field::split(*packed, '/');
    if (sides.size() != 2 || sides[0].substr(0, 2) != "q:" || sides[1].substr(0, 2) != "k:")
      return nullptr;
    const std::optional<std::vector<int64_t>> q = lengths(sides[0].substr(2)),
                                              k = lengths(sides[1].substr(2));
    if (!q || !k) return nullptr;
    try {
      p.set_lengths(*q, *k);
    } catch (const UserError&) {
      return nullptr;
    }
  } else {
    p.batch = *batch;
    p.seq_q = *seq_q;
    p.seq_k = *seq_k;
  }
  const std::optional<std::string_view> dtype = take("dtype");
  const std::optional<int64_t> head_dim = field::count(take("d").value_or(""));
  if (!dtype || (*dtype != "bf16" && *dtype != "f16") || !head_dim || *head_dim > 4096)
    return nullptr;
  const std::optional<std::string_view> pass = take("pass"), deterministic = take("deterministic");
  if ((pass && *pass != "backward") || (deterministic && *deterministic != "1")) return nullptr;
  if (next != fields.size()) return nullptr;  // modifiers, or fields this version lacks
  p.backward = pass.has_value();
  p.deterministic = deterministic.has_value();
  p.heads = *heads;
  p.kv_heads = *kv_heads;
  p.causal = *causal == "1";
  p.window_left = *left;
  p.window_right = *right;
  p.dtype = *dtype == "f16" ? ir::DType::F16 : ir::DType::BF16;
  p.head_dim = static_cast<int>(*head_dim);
  try {
    size_t used = 0;
    p.scale = std::stod(std::string(*scale), &used);
    if (used != scale->size()) return nullptr;
    attention::validate_problem(p);
  } catch (const std::exception&) {
    return nullptr;
  }
  return std::make_unique<AttentionTuning>(std::move(p));
}

}  // namespace kjit::tuner
