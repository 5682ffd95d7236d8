// Attention, forward: O = softmax(scale · Q Kᵀ + mask) V and the log-sum-exp of every
// row, lowered to glue that instantiates templates/attention.cuh (flash attention:
// tiles of keys streamed through shared memory, online softmax, S never stored).
//
//   Problem p{.batch = 4, .heads = 16, .kv_heads = 4, .seq_q = 2048, .seq_k = 2048,
//             .head_dim = 128, .causal = true};
//   KernelSource s = lower(p, Config{});  // readable CUDA C: kjit emit attention
//
// Sizes and strides are kernel arguments: one binary serves every shape of a
// kernel class (dtype, head dim and whether any mask is present).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kjit/compiler/ir/dtype.h"
#include "kjit/compiler/kernel_source.h"
#include "kjit/compiler/lowering/attention_modifier.h"

namespace kjit::attention {

// The most batch items (sequences of a packed batch) and heads: each is a grid
// dimension of the kernels.
inline constexpr int64_t kMaxBatch = 65535;

struct Problem {
  int64_t batch = 1, heads = 1, kv_heads = 1;  // kv_heads divides heads (GQA / MQA)
  int64_t seq_q = 0, seq_k = 0;                // S_q != S_k is fine
  int head_dim = 128;                          // 64, 96, 128 or 256
  ir::DType dtype = ir::DType::BF16;           // BF16 or F16; fp32 accumulation and softmax
  // Masks, aligned to the bottom-right corner when S_q != S_k: query i sees key j
  // when j - i - (S_k - S_q) lies in [-window_left, window_right]. causal is
  // window_right = 0; -1 means unbounded on that side.
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  double scale = 0;  // softmax scale; 0: 1 / sqrt(head_dim)
  // Score and mask modifiers written in kjit's IR (attention_modifier.h), fused into
  // every kernel of both passes; empty: none. The score modifier maps s = scale · q·k
  // to the score the softmax sees (O = softmax(score_mod(s) + masks) V); the mask
  // modifier keeps the scores where it is nonzero, beside causal and window. Their
  // operands are given per launch (Tensors::modifier_operands).
  std::string score_mod, mask_mod;
  // Which pass the kernels compute: false, O and LSE (Attention); true, dQ, dK and
  // dV from dO, O and LSE (AttentionBackward). Part of the tuning key.
  bool backward = false;
  // Backward: the same bits on every run. Then dQ has a kernel of its own (seven
  // products); otherwise the tuner may also pick the atomic dQ (Config::atomic_dq:
  // five products, f32 sums added in whatever order blocks finish). Part of the
  // tuning key.
  bool deterministic = false;
  // Packed variable-length batches (FlashAttention's "varlen"): when set, sequence b
  // is tokens [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of Q and O ([total_q, heads, D])
  // and [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of K and V; batch is their count and
  // seq_q / seq_k the longest. set_lengths() fills all of that in.
  std::vector<int64_t> cu_seqlens_q, cu_seqlens_k;

  bool packed() const { return !cu_seqlens_q.empty(); }
  // Batch, offsets and the longest lengths from per-sequence lengths (one per batch;
  // `k` empty: the same as `q`).
  void set_lengths(const std::vector<int64_t>& q, const std::vector<int64_t>& k = {});
  // Query (key) tokens in all: batch x seq_q (seq_k), or the packed total.
  int64_t total_q() const;
  int64_t total_k() const;
  // Sequence b's lengths (seq_q / seq_k unless packed).
  int64_t seq_q_of(int64_t b) const;
  int64_t seq_k_of(int64_t b) const;

  // The right edge of the window after `causal` (0 when causal, else window_right).
  int64_t right() const { return causal ? 0 : window_right; }
  double softmax_scale() const;
  // The modifiers' extra operands, the score modifier's first: what
  // Tensors::modifier_operands holds, in order. Empty without modifiers.
  std::vector<ModifierOperand> modifier_operands() const;
  // What a kernel is specialized on: "dtype=bf16,d=128" (",pass=backward" after it
  // for the backward pass; ",score_mod=KEY" and ",mask_mod=KEY" with modifiers, KEY
  // a hash of the modifier's canonical form).
  std::string kernel_class() const;
  // Every field, canonical, for logs and tuning keys:
  // "batch=..,heads=..,kv_heads=..,seq_q=..,seq_k=..,causal=0|1,window=L:R,scale=..",
  // then ",packed=q:1+7+300/k:1+7+300" when packed (a run of equal lengths as
  // "320x39"), then "," + kernel_class(), then
  // ",deterministic=1" for a deterministic backward pass.
  std::string to_string() const;
};

struct Config {
  int bm = 64;         // query rows per block (wgmma: 128)
  int bn = 64;         // keys per tile
  int stages = 2;      // K/V tiles in flight (cp.async, or TMA buffers)
  int warp_rows = 16;  // mma.sync: query rows per warp, 16 or 32 (each K/V fragment
                       // then feeds two mma); wgmma: 16 (64 per warpgroup)
  // The engine: mma.sync (templates/attention.cuh, sm_80 and later), or TMA + wgmma
  // (templates/attention_sm90.cuh, sm_90 only: 128 query rows per block in two
  // consumer warpgroups plus a producer warpgroup; head dims 64 and 128).
  bool wgmma = false;
  // wgmma: the two consumer warpgroups take turns issuing their products.
  bool pingpong = false;
  // wgmma forward: one block per SM walks the (query tile, head, batch) items, the
  // next item's loads overlapping this one's compute and write-out
  // (templates/attention_sm90.cuh); grid (min(items, SMs), 1, 1).
  bool persistent = false;
  // Backward, wgmma, bm 64, no ping-pong: the dK/dV kernel also computes dQ = dS K
  // and adds it into f32 sums with atomics (templates/attention_backward_sm90.cuh);
  // a last small kernel scales and rounds them. Not for problem.deterministic.
  bool atomic_dq = false;
  int warps() const { return bm / warp_rows; }
  // mma.sync: the warps; wgmma: the consumer warpgroups plus the producer's.
  int threads() const { return wgmma ? (bm / 64 + 1) * 128 : warps() * 32; }

  // "bm=64,bn=64,stages=2,warp_rows=16", or "mma=wgmma,bm=128,bn=64,stages=2" (with
  // ",pingpong=1", ",persistent=1" and ",dq=atomic" when set)
  std::string to_string() const;
  // Parses "key=value,..." over the default; keys mma (sync|wgmma) bm bn stages
  // warp_rows pingpong (0|1) persistent (0|1) dq (separate|atomic) (mma=wgmma: bm defaults
  // to 128).
  // UserError for unknown keys or malformed values, naming the valid ones.
  static Config parse(const std::string& text);
  bool operator==(const Config&) const = default;
};

// The problem's own constraints: modifiers that parse (attention_modifier.h); sizes
// >= 1 (seq_q, seq_k) and within 32 bits, kv_heads dividing heads, a supported head dim and dtype,
// windows >= -1, a positive finite scale; packed offsets starting at 0, never decreasing, one more
// than batch, totals within 32 bits, seq_q / seq_k their longest. UserError naming the value and
// the supported set.
void validate_problem(const Problem& problem);
// Plus the config's. mma.sync: warp_rows 16 or 32, bm a multiple of it in [16,
// 128], bn in {16, 32, 64, 128}, stages 2..4. wgmma: head dim 64 or 128, bm 128, bn
// 64 or 128, stages 2..4. Backward: mma.sync, warp_rows 16, bm and bn in {16, 32,
// 64, 128}, stages 2..3; or mma=wgmma (head dims 64 and 128), bm and bn in {64, 128},
// stages 2..3, pingpong 0|1, and dq=atomic only with bm 64, without ping-pong, for a
// problem that is not deterministic.
void validate(const Problem& problem, const Config& config);
// The config's part of validate() alone, for a problem validate_problem() took.
void validate_config(const Problem& problem, const Config& config);

// FLOPs of one forward launch: 4 · heads · D · (query, key) pairs, over every
// sequence (the two matmuls; the softmax is not counted), as FlashAttention counts
// them: all S_q · S_k pairs, half of them for causal with S_q = S_k, and the pairs
// the masks leave otherwise. A mask modifier's pairs are counted by its tile
// analysis (boxes it keeps whole or drops are counted at once, the rest split down
// to single pairs, which are evaluated), once per problem. Where that cannot be
// done — the modifier reads operands, whose values come with the launch, or its
// analysis cannot decide boxes, so that the count would take over 2^21 analyses —
// its pairs are all counted: TFLOP/s are then those of the problem without it
// (compare times).
double forward_flops(const Problem& problem);
// The fraction of the (query tile, key tile) pairs a kernel with `rows` x `keys`
// tiles visits: per query tile, the key tiles from the first to the last that the
// masks may keep, as the kernels narrow their ranges. The built-in causal and window
// edges are exact (per sequence of a packed batch); the mask modifier's tile analysis
// narrows them further on the longest sequences and the first head, unless it reads
// per-head operands (their values are only known at launch). 1 without masks.
double visited_tile_fraction(const Problem& problem, int rows, int keys);

// What a launch of the problem's pass is credited with: forward_flops, times 2.5
// for the backward pass (its five products to the forward's two, as FlashAttention
// counts it; kjit's deterministic backward does seven: see attention_backward.cuh).
double flops(const Problem& problem);
// flops() of the problem without its masks (causal, window, mask modifier).
double unmasked_flops(const Problem& problem);
// What the kernels compute with `rows` x `keys` tiles: unmasked_flops times
// visited_tile_fraction (the tiles they visit; a tile that a mask cuts is computed
// whole).
double visited_flops(const Problem& problem, int rows, int keys);

// Dynamic shared memory of the kernel: the Q tile and `stages` K and V tiles (mma.sync:
// rows padded by 16 bytes; wgmma: swizzled rows, 1 KiB of alignment slack and the
// mbarriers). Backward: the most any of its kernels needs.
int shared_bytes(const Problem& problem, const Config& config);

// The forward kernel: extern "C" void name(kjit::AttentionArgs) (wgmma: then the
// tensor maps of Q, K and V, 4-D: head dim, sequence, head, batch), grid
// (ceil(seq_q / bm), heads, batch) (persistent: (min(that many blocks, SMs), 1, 1)),
// config.threads() threads, shared_bytes() of
// dynamic shared memory. Byte-identical for equal inputs.
KernelSource lower(const Problem& problem, const Config& config);

// The backward pass (problem.backward), in launch order:
//   "prep": D = rowsum(dO ∘ O) and LSE · log2 e per query row (and, dq=atomic, the dQ
//           sums zeroed); grid (ceil(seq_q / 64), heads, batch), 256 threads
//   "kv":   dK and dV (head dim 256: "kv" computes dV and a second "kv" dK); grid
//           (ceil(seq_k / bn), kv_heads, batch), bn / 16 warps (wgmma: 128 keys, 384
//           threads; dq=atomic: and the dQ sums)
//   "q":    dQ; grid (ceil(seq_q / bm), heads, batch), bm / 16 warps (wgmma: 128
//           queries, 384 threads; dq=atomic: the sums scaled and rounded, grid
//           (ceil(seq_q / 64), heads, batch), 256 threads)
// Each takes kjit::AttentionBackwardArgs (templates/attention_backward.cuh).
// `config`: bm queries per tile (the "kv" kernel's streamed tiles, the "q" kernel's
// block), bn keys per tile (the "kv" kernel's block, the "q" kernel's streamed
// tiles), stages, warp_rows 16.
struct BackwardKernel {
  std::string role;  // "prep", "kv" or "q"
  KernelSource source;
};
std::vector<BackwardKernel> lower_backward(const Problem& problem, const Config& config);
// Query heads' rows of f32 workspace the backward pass needs: D and LSE · log2 e,
// each batch x heads x seq_q (heads x total_q packed). Bytes: 8 per row, and with
// dq=atomic 4 · head_dim more (the dQ sums, backward_dq_accum_bytes).
int64_t backward_workspace_rows(const Problem& problem);
int64_t backward_dq_accum_bytes(const Problem& problem, const Config& config);

}  // namespace kjit::attention
