// kjit/attention.cuh — flash attention, forward: O = softmax(scale · Q Kᵀ + mask) V and
// the log-sum-exp of every row, without ever materializing the S_q x S_k matrix.
//
// The generated glue (compiler/lowering/attention.cpp) instantiates
// FlashForward<T, D, BM, BN, WARPS, STAGES>::run in an extern "C" kernel. The
// algorithm, stage by stage (FlashAttention-2's forward pass, written for mma.sync):
//
//   1. block -> query tile:  one block per BM query rows of one (batch, head); each of
//      the WARPS warps owns 16 or 32 of those rows for the whole kernel (causal:
//      the longest tiles are handed out first)
//   2. the pipeline:         Q's tile is loaded once; K and V tiles of BN keys stream
//      through STAGES shared-memory buffers with cp.async, the next tiles loading while
//      the warps work on the current one, V waited for only after the scores (rows
//      padded by 16 bytes: ldmatrix's eight row reads then fall on different banks)
//   3. scores:               S = Q Kᵀ for the warp's rows x BN keys, fp32, in
//      registers (mma.sync m16n8k16; K's rows are already B's "col" layout)
//   4. masks:                keys past S_k, and outside the causal / sliding window
//      (bottom-right aligned: query i sees key j when j - i - (S_k - S_q) lies in
//      [-window_left, window_right]); tiles wholly outside are never visited, tiles
//      wholly inside skip the test
//   5. online softmax:       each row keeps its running max m and sum l. A new tile
//      with max m' rescales what came before by 2^((m - m')·scale·log2 e), then adds
//      its own exp2 terms: the softmax is exact at the end without a second pass
//   6. O += P V:             P (fp32 accumulators) is rounded to 16 bits and reused in
//      registers as the A operand (its fragment layout is the accumulator's); V
//      through ldmatrix.trans
//   7. the end:              O / l and LSE = m·scale + ln l per row; a row with every
//      key masked gives O = 0 and LSE = -inf, never NaN
//
// Q, K, V and O take any strides for batch, sequence and head (BSHD and BHSD both
// work); the head dimension is contiguous. Grouped-query attention: Q head h reads
// K/V head h / kv_group. Packed variable-length batches: each batch's sequences
// start at its cumulative offsets (cu_seqlens_q / _k) in [tokens, heads, D] tensors.
#pragma once

#include "kjit/math.cuh"  // kjit::exp2_approx: 2^x on the special-function unit
#include "kjit/mma.cuh"
#include "kjit/types.cuh"

namespace kjit {

// Kernel arguments. Mirrored byte for byte by runtime/attention.cpp (8-byte fields
// first, then 4-byte ones). Strides in elements.
struct AttentionArgs {
  const void* q;  // [batch, seq_q, heads, D] through the strides below
  const void* k;  // [batch, seq_k, kv_heads, D]
  const void* v;  // [batch, seq_k, kv_heads, D]
  void* o;        // [batch, seq_q, heads, D], Q's dtype
  float* lse;     // [batch, heads, seq_q] ([heads, total_q] packed), natural log; may be null
  // Packed variable-length batches (null: every sequence has seq_q / seq_k): batch b's
  // queries are tokens [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of Q and O, its keys
  // [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of K and V; batch strides are then 0.
  const int* cu_seqlens_q;
  const int* cu_seqlens_k;
  // The score and mask modifiers' extra operands (compiler/lowering/attention_modifier.h),
  // the score modifier's first, in the order the modifiers name them; null past them.
  const void* modifier_operands[8];
  long long q_batch, q_seq, q_head;
  long long k_batch, k_seq, k_head;
  long long v_batch, v_seq, v_head;
  long long o_batch, o_seq, o_head;
  int seq_q, seq_k;     // the (longest) sequence lengths
  int heads, kv_group;  // kv_group = heads / kv_heads
  float scale;          // softmax scale (usually 1 / sqrt(D))
  float scale_log2;     // scale · log2(e): exp(scale·x) = exp2(scale_log2·x)
  int window_left;      // keys before the diagonal a query sees; -1: all
  int window_right;     // keys after the diagonal; 0: causal, -1: all
  int total_q;          // packed: all query tokens (LSE's row length); else seq_q
  int batch;            // sequences (packed: entries of cu_seqlens_q less one)
};

namespace attention {

using mma::cp_async_16;
using mma::cp_async_16_zfill;
using mma::ldmatrix_x4;
using mma::ldmatrix_x4_trans;
using mma::shared_address;

// -inf without <math.h> (NVRTC has no INFINITY): the bits of an IEEE -inf.
__device__ __forceinline__ float minus_infinity() {
  return __int_as_float(0xff800000u);
}

// One block's sequence: its lengths, where its tokens start in the (packed) tensors,
// and where its head's LSE row starts.
struct BlockSequence {
  int seq_q, seq_k;
  long long q_start, k_start;  // first token (0 unless packed)
  long long lse_start;         // LSE index of query 0
};
__device__ __forceinline__ BlockSequence block_sequence(const AttentionArgs& args, int batch,
                                                        int head) {
  BlockSequence sequence;
  if (args.cu_seqlens_q != nullptr) {
    sequence.q_start = args.cu_seqlens_q[batch];
    sequence.k_start = args.cu_seqlens_k[batch];
    sequence.seq_q = args.cu_seqlens_q[batch + 1] - static_cast<int>(sequence.q_start);
    sequence.seq_k = args.cu_seqlens_k[batch + 1] - static_cast<int>(sequence.k_start);
    sequence.lse_start = static_cast<long long>(head) * args.total_q + sequence.q_start;
  } else {
    sequence.q_start = sequence.k_start = 0;
    sequence.seq_q = args.seq_q;
    sequence.seq_k = args.seq_k;
    sequence.lse_start = (static_cast<long long>(batch) * args.heads + head) * args.seq_q;
  }
  return sequence;
}

// Whether a query sees `key` (stage 4): inside the sequence (seq_k keys) and the
// window around `diagonal`, the query's row + S_k - S_q (bottom-right aligned).
__device__ __forceinline__ bool key_visible(const AttentionArgs& args, int seq_k, int key,
                                            int diagonal) {
  const int rel = key - diagonal;  // 0 on the diagonal
  return key < seq_k && (args.window_right < 0 || rel <= args.window_right) &&
         (args.window_left < 0 || rel >= -args.window_left);
}

// Which of a thread's 4 scores of an mma fragment the built-in masks keep, bit e for
// score e, found ahead of the scores so that each applies a select: tested per score
// between the exponentials, the test compiled to a branch each (the backward kernels,
// on tiles that cross an edge). position(e, key, query) sets score e's key and query;
// the query's diagonal key is query + offset.
template <typename Position>
__device__ __forceinline__ u32 visible_bits(const AttentionArgs& args, int seq_k, int offset,
                                            Position position) {
  u32 kept = 0u;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    int key, query;
    position(e, key, query);
    kept |= (key_visible(args, seq_k, key, query + offset) ? 1u : 0u) << e;
  }
  return kept;
}

// Whether rows [first_row, last_row] x keys [key0, key0 + bn) cross an edge of the
// built-in masks: the end of the keys, or a side of the window. Only such tiles test
// each score with key_visible.
__device__ __forceinline__ bool crosses_edge(const AttentionArgs& args, int seq_k, int offset,
                                             int first_row, int last_row, int key0, int bn) {
  const bool crosses_end = key0 + bn > seq_k;
  const bool crosses_right =
      args.window_right >= 0 && key0 + bn - 1 > first_row + offset + args.window_right;
  const bool crosses_left = args.window_left >= 0 && key0 < last_row + offset - args.window_left;
  return crosses_end || crosses_right || crosses_left;
}

// ---- score and mask modifiers ----
// FlexAttention's score_mod and mask_mod, written in kjit's IR: the generated glue
// defines a struct like this one around the fused functions
// (compiler/lowering/attention.cpp) and passes it to the kernels as MOD:
//   score(args, s, q, kv, head)       the modified score, from s = scale · q·k
//   score_grad(args, s, q, kv, head)  its derivative with respect to s (backward)
//   keep(args, q, kv, head)           whether the mask modifier keeps the score
// q and kv are positions in their sequences, head the query head. Without a score
// modifier the kernels fold the scale into the exponent; with one they apply it to
// s first, and the softmax then works on mod(s) in natural units.
struct NoModifiers {
  static constexpr bool kScore = false;  // a score modifier is applied
  static constexpr bool kMask = false;   // a mask modifier is tested
  // The score modifier reads the positions only as q - kv (ALiBi), exact in float for
  // this problem: the kernels call score_relative(args, s, float q - kv, head).
  static constexpr bool kRelative = false;
  // score_grad is a constant (no score modifier, or s plus a bias as ALiBi): the
  // backward kernels keep no mod' per score.
  static constexpr bool kConstantGrad = true;
  __device__ __forceinline__ static float score(const AttentionArgs&, float s, int, int, int) {
    return s;
  }
  __device__ __forceinline__ static float score_grad(const AttentionArgs&, float, int, int, int) {
    return 1.0f;
  }
  __device__ __forceinline__ static bool keep(const AttentionArgs&, int, int, int) { return true; }
  // The mask modifier over a whole tile (templates/interval.cuh): 0, it keeps no
  // score of queries [q_lo, q_hi] x keys [kv_lo, kv_hi]; 2, every one; 1, some.
  __device__ __forceinline__ static int tile(const AttentionArgs&, int, int, int, int, int) {
    return 2;
  }
};

// Narrows the tiles [begin, end) of `tile` positions along one axis (keys when
// `over_keys`, else queries; `length` positions in all) to those the mask modifier
// may keep for positions [fixed_lo, fixed_hi] on the other axis, for any of the
// heads [head0, head0 + heads): fully masked tiles at either end are never loaded.
// The 32 lanes of a warp test 32 tiles at once and a ballot finds the first and
// last kept (a tile-by-tile scan from both ends cost a fifth of a sliding-window
// kernel at 8k keys: the interval arithmetic is a chain of doubles). Every warp of
// the block computes the same range, so all its threads must call this together.
template <typename MOD>
__device__ __forceinline__ void narrow_tiles(const AttentionArgs& args, bool over_keys,
                                             int fixed_lo, int fixed_hi, int length, int tile,
                                             int head0, int heads, int& begin, int& end) {
  if constexpr (MOD::kMask) {
    const int lane = threadIdx.x & 31;
    int first = end, last = begin - 1;
    for (int base = begin; base < end; base += 32) {
      const int t = base + lane;
      bool kept = false;
      if (t < end) {
        const int lo = t * tile, hi = min(lo + tile, length) - 1;
        for (int h = head0; h < head0 + heads && !kept; ++h) {
          kept = (over_keys ? MOD::tile(args, fixed_lo, fixed_hi, lo, hi, h)
                            : MOD::tile(args, lo, hi, fixed_lo, fixed_hi, h)) != 0;
        }
      }
      const unsigned lanes = __ballot_sync(0xffffffffu, kept);
      if (lanes != 0) {
        if (first == end) first = base + __ffs(lanes) - 1;
        last = base + 31 - __clz(lanes);
      }
    }
    begin = first;
    end = last + 1 > first ? last + 1 : first;
  }
}

// The key tiles [first, first + 32) (those below `end`) whose every score of queries
// [q_lo, q_hi] the mask modifier keeps, as bits (bit j: tile first + j). Lane j
// analyses tile first + j, so a warp decides 32 tiles in the time of one: a kernel
// calls this once per 32 key tiles instead of analysing each tile as it comes. The
// analysis is a chain of doubles: done per tile, double-precision instructions held
// a seventh of a 256-key window forward's warp samples (Nsight Compute), and 32 at
// once made that kernel 1.04-1.06x faster (H100). All 32 lanes of the warp must call
// it together.
template <typename MOD>
__device__ __forceinline__ unsigned whole_tiles(const AttentionArgs& args, int q_lo, int q_hi,
                                                int first, int end, int tile, int length,
                                                int head) {
  if constexpr (!MOD::kMask) return 0;
  const int t = first + static_cast<int>(threadIdx.x & 31);
  bool whole = false;
  if (t < end) {
    const int lo = t * tile, hi = min(lo + tile, length) - 1;
    whole = MOD::tile(args, q_lo, q_hi, lo, hi, head) == 2;
  }
  return __ballot_sync(0xffffffffu, whole);
}

// The score modifier at scale · s for query q, key kv: over q - kv as a float
// (`q_minus_kv`, formed once per tile plus a constant per score) where it reads the
// positions only so and they are exact in float (MOD::kRelative), else over q and kv.
template <typename MOD>
__device__ __forceinline__ float modified_score(const AttentionArgs& args, float s,
                                                float q_minus_kv, int q, int kv, int head) {
  if constexpr (MOD::kRelative)
    return MOD::score_relative(args, s * args.scale, q_minus_kv, head);
  else
    return MOD::score(args, s * args.scale, q, kv, head);
}

// Whether the mask modifier keeps every score of queries [q_lo, q_hi] x keys
// [kv_lo, kv_hi] (then no score is tested). False without a mask modifier: there is
// nothing to test.
template <typename MOD>
__device__ __forceinline__ bool mask_keeps_all(const AttentionArgs& args, int q_lo, int q_hi,
                                               int kv_lo, int kv_hi, int head) {
  if constexpr (MOD::kMask) return MOD::tile(args, q_lo, q_hi, kv_lo, kv_hi, head) == 2;
  return false;
}

// The factor that takes a score the kernel holds (q·k, or mod(scale · q·k) with a
// score modifier) to the softmax's exponent in log2 units, and to natural units (the
// log-sum-exp's max term).
constexpr float kLog2e = 1.4426950408889634f;
template <typename MOD>
__device__ __forceinline__ float softmax_log2(const AttentionArgs& args) {
  return MOD::kScore ? kLog2e : args.scale_log2;
}
template <typename MOD>
__device__ __forceinline__ float softmax_units(const AttentionArgs& args) {
  return MOD::kScore ? 1.0f : args.scale;
}

template <typename T>
__device__ __forceinline__ u32 pack2(float a, float b);
template <>
__device__ __forceinline__ u32 pack2<bf16>(float a, float b) {
  return pack_bf16x2(a, b);
}
template <>
__device__ __forceinline__ u32 pack2<f16>(float a, float b) {
  return pack_f16x2(a, b);
}

// One row of an mma accumulator tile out to global memory, 16 bytes per lane. Lane
// t of the row's quad holds columns 8n + 2t, 8n + 2t + 1 of every 8-column chunk n:
// pair(n) packs them. Stored as they are, a warp's 4-byte stores would fill half of
// each 32-byte sector; instead, four chunks at a time, the quad trades its pairs
// (mma::quad_transpose) and lane t stores chunk 4k + t whole. Every lane of the warp
// must call it (shuffles); `inside`: whether this lane's row is stored. `row`'s
// address and D are multiples of 16 bytes (the API checks strides and pointers).
template <typename T, int D, typename Pair>
__device__ __forceinline__ void store_row(T* row, bool inside, int t, Pair pair) {
  static_assert(D % 32 == 0, "four 8-column chunks at a time");
#pragma unroll
  for (int k = 0; k < D / 32; ++k) {
    u32 pairs[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) pairs[i] = pair(4 * k + i);
    const uint4 chunk = mma::quad_transpose(pairs, t);
    if (inside) *reinterpret_cast<uint4*>(row + 8 * (4 * k + t)) = chunk;
  }
}

template <typename T, int D, int BM, int BN, int WARPS, int STAGES, typename MOD = NoModifiers>
struct FlashForward {
  // Each warp owns MT tiles of 16 query rows: with two, every K and V fragment
  // read from shared memory feeds two mma instructions (half the shared-memory
  // traffic per FLOP, which bounds this kernel), for twice the accumulators.
  static constexpr int MT = BM / (16 * WARPS);
  static_assert(BM == 16 * MT * WARPS && (MT == 1 || MT == 2), "16 or 32 query rows per warp");
  static_assert(D % 16 == 0 && BN % 16 == 0, "mma.sync k16 steps over D and over keys");
  static_assert(STAGES >= 2, "at least double buffering");
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kWarpRows = 16 * MT;
  static constexpr int kPitch = D + 8;          // elements per shared row: +16 bytes
  static constexpr int kChunks = D / 8;         // 16-byte chunks per row
  static constexpr int kQElems = BM * kPitch;   // the Q tile
  static constexpr int kKvElems = BN * kPitch;  // one K (or V) tile
  // Dynamic shared memory the launch must provide.
  static constexpr int kSharedBytes = (kQElems + 2 * STAGES * kKvElems) * 2;

  // Copies `rows` rows of D elements (row r at base + r * row_stride) into shared
  // memory at `tile`; rows at or past `valid` are zero-filled (nothing is read).
  template <int ROWS>
  __device__ __forceinline__ static void load_tile(T* tile, const T* base, long long row_stride,
                                                   int valid) {
    for (int c = threadIdx.x; c < ROWS * kChunks; c += kThreads) {
      const int row = c / kChunks, chunk = c % kChunks;
      const u32 dst = shared_address(tile + row * kPitch + chunk * 8);
      if (row < valid) {
        cp_async_16(dst, base + row * row_stride + chunk * 8);
      } else {
        cp_async_16_zfill(dst, base, 0);
      }
    }
  }

  __device__ static void run(const AttentionArgs& args) {
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    T* q_tile = reinterpret_cast<T*>(shared_bytes);
    T* k_tiles = q_tile + kQElems;             // STAGES K tiles
    T* v_tiles = k_tiles + STAGES * kKvElems;  // STAGES V tiles

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;  // fragment row group and column pair
    const int head = blockIdx.y, batch = blockIdx.z;
    const int kv_head = head / args.kv_group;
    // With a causal-style mask (no left edge, a right edge) later query tiles see
    // more keys: blocks take them longest first, so the short ones fill the tail
    // of the last wave instead of a long one running alone.
    const bool longest_first = args.window_left < 0 && args.window_right >= 0;
    const int tile_index = longest_first ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int row0 = tile_index * BM;  // first query row of this block
    const BlockSequence sequence = block_sequence(args, batch, head);
    const int seq_q = sequence.seq_q, seq_k = sequence.seq_k;
    if (row0 >= seq_q) return;  // a shorter sequence of a packed batch: nothing here

    const T* q = static_cast<const T*>(args.q) + batch * args.q_batch +
                 sequence.q_start * args.q_seq + head * args.q_head;
    const T* k = static_cast<const T*>(args.k) + batch * args.k_batch +
                 sequence.k_start * args.k_seq + kv_head * args.k_head;
    const T* v = static_cast<const T*>(args.v) + batch * args.v_batch +
                 sequence.k_start * args.v_seq + kv_head * args.v_head;

    // ---- which key tiles this block can see (stage 4, tile level) ----
    // Query i sees key j when j - i - offset is in [-window_left, window_right].
    const int offset = seq_k - seq_q;
    const int last_row = min(row0 + BM, seq_q) - 1;
    int key_end = seq_k;  // one past the last key any row of the block sees
    if (args.window_right >= 0) key_end = min(key_end, last_row + offset + args.window_right + 1);
    int key_begin = 0;
    if (args.window_left >= 0) key_begin = max(0, row0 + offset - args.window_left);
    int tile_begin = key_begin / BN;
    int tile_end = key_end > key_begin ? (key_end + BN - 1) / BN : tile_begin;
    narrow_tiles<MOD>(args, true, row0, last_row, seq_k, BN, head, 1, tile_begin, tile_end);

    // ---- stage 2: Q once, then the first K/V tiles ----
    // Commit groups, in order: Q, then K and V of each tile as two groups, so the
    // scores of a tile start as soon as its K has landed while V still streams.
    load_tile<BM>(q_tile, q + row0 * args.q_seq, args.q_seq, seq_q - row0);
    mma::cp_async_commit();
    auto load_k = [&](int tile, int stage) {
      const int key0 = tile * BN;
      load_tile<BN>(k_tiles + stage * kKvElems, k + key0 * args.k_seq, args.k_seq, seq_k - key0);
    };
    auto load_v = [&](int tile, int stage) {
      const int key0 = tile * BN;
      load_tile<BN>(v_tiles + stage * kKvElems, v + key0 * args.v_seq, args.v_seq, seq_k - key0);
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (tile_begin + s < tile_end) load_k(tile_begin + s, s);
      mma::cp_async_commit();  // (an empty group keeps the counting uniform)
      if (tile_begin + s < tile_end) load_v(tile_begin + s, s);
      mma::cp_async_commit();
    }

    // ---- per-thread state: rows g and g + 8 of each of the warp's MT row tiles ----
    float o_acc[MT][D / 8][4];  // O: D/8 mma tiles of 16 x 8 per row tile
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        o_acc[m][n][0] = o_acc[m][n][1] = o_acc[m][n][2] = o_acc[m][n][3] = 0.0f;
    float row_max[MT][2], row_sum[MT][2];  // m (unscaled score units) and l (this thread's share)
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row_max[m][h] = minus_infinity();
        row_sum[m][h] = 0.0f;
      }
    }
    // Scores to the exponent's log2 units: scale · log2 e (a score modifier: log2 e).
    const float scale_log2 = softmax_log2<MOD>(args);
    // The query row of accumulator rows g (h = 0) and g + 8 (h = 1) of row tile m.
    const int thread_row0 = row0 + warp * kWarpRows + g;
    auto my_row = [&](int m, int h) { return thread_row0 + m * 16 + 8 * h; };

    for (int tile = tile_begin; tile < tile_end; ++tile) {
      const int stage = (tile - tile_begin) % STAGES;
      // Issue the loads STAGES - 1 tiles ahead, into the buffers freed last iteration.
      const int ahead = tile + STAGES - 1;
      if (ahead < tile_end) load_k(ahead, (ahead - tile_begin) % STAGES);
      mma::cp_async_commit();
      if (ahead < tile_end) load_v(ahead, (ahead - tile_begin) % STAGES);
      mma::cp_async_commit();
      // Behind this tile's K: its V and K, V of the STAGES - 1 tiles ahead.
      mma::cp_async_wait<2 * STAGES - 1>();  // Q and this K have landed (for this thread)
      __syncthreads();                       // ... and for every thread
      const T* k_tile = k_tiles + stage * kKvElems;
      const T* v_tile = v_tiles + stage * kKvElems;
      const int key0 = tile * BN;

      // ---- stage 3: S = Q Kᵀ, 16 MT rows x BN keys per warp ----
      float s[MT][BN / 8][4];
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) s[m][n][0] = s[m][n][1] = s[m][n][2] = s[m][n][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        // A: 16 query rows, d in [16 kk, 16 kk + 16). Matrix i of the ldmatrix.x4 is
        // rows (i % 2) * 8.., columns (i / 2) * 8.. (a0..a3's order).
        u32 a[MT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          const int r = warp * kWarpRows + m * 16 + (lane % 16), c = kk * 16 + (lane / 16) * 8;
          ldmatrix_x4(a[m], shared_address(q_tile + r * kPitch + c));
        }
#pragma unroll
        for (int n = 0; n < BN / 8; n += 2) {
          // B for key tiles n and n + 1: K rows are keys, columns d — exactly B's
          // "col" layout (b0 = keys g, d 2t..2t+1). Matrix i: keys (i / 2) * 8..,
          // d (i % 2) * 8.. -> b0, b1 of tile n, then b0, b1 of tile n + 1.
          u32 b[4];
          const int key = n * 8 + (lane / 16) * 8 + (lane % 8), c = kk * 16 + ((lane / 8) % 2) * 8;
          ldmatrix_x4(b, shared_address(k_tile + key * kPitch + c));
#pragma unroll
          for (int m = 0; m < MT; ++m) {
            mma::MmaM16N8K16<T>::run(s[m][n], a[m], b[0], b[1]);
            mma::MmaM16N8K16<T>::run(s[m][n + 1], a[m], b[2], b[3]);
          }
        }
      }

      // ---- the score modifier, if any: s = mod(scale · s) ----
      if constexpr (MOD::kScore && MOD::kRelative) {
        // q - kv of each row's first score, then a constant per score: one float add
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float row_minus_key0 = static_cast<float>(my_row(m, e / 2) - key0 - 2 * t);
#pragma unroll
            for (int n = 0; n < BN / 8; ++n)
              s[m][n][e] =
                  MOD::score_relative(args, s[m][n][e] * args.scale,
                                      row_minus_key0 - static_cast<float>(n * 8 + e % 2), head);
          }
      } else if constexpr (MOD::kScore) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int n = 0; n < BN / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              s[m][n][e] = MOD::score(args, s[m][n][e] * args.scale, my_row(m, e / 2),
                                      key0 + n * 8 + 2 * t + (e % 2), head);
      }

      // ---- stage 4: masks, only where the tile crosses a boundary (a mask
      // modifier: everywhere) ----
      const int warp_first = row0 + warp * kWarpRows, warp_last = warp_first + kWarpRows - 1;
      // A mask modifier is tested where it does not keep the warp's whole tile.
      const bool test_mask =
          MOD::kMask && !mask_keeps_all<MOD>(args, warp_first, min(warp_last, seq_q - 1), key0,
                                             min(key0 + BN, seq_k) - 1, head);
      if (crosses_edge(args, seq_k, offset, warp_first, warp_last, key0, BN)) {
#pragma unroll
        for (int m = 0; m < MT; ++m) {
#pragma unroll
          for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = key0 + n * 8 + 2 * t + (e % 2), row = my_row(m, e / 2);
              if (!key_visible(args, seq_k, key, row + offset)) s[m][n][e] = minus_infinity();
            }
          }
        }
      }
      // The mask modifier in a loop of its own: one branch around it and a select
      // per score (in the test above, short-circuit evaluation made a branch per
      // score; see attention_sm90.cuh).
      if (test_mask) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int n = 0; n < BN / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const bool keep =
                  MOD::keep(args, my_row(m, e / 2), key0 + n * 8 + 2 * t + (e % 2), head);
              s[m][n][e] = keep ? s[m][n][e] : minus_infinity();
            }
      }

      // ---- stage 5: the online softmax update, row by row ----
      // Each row's BN scores are spread over the 4 lanes of a quad (t = 0..3): the
      // tile's max is this thread's max, then the quad's (two shuffles).
#pragma unroll
      for (int m = 0; m < MT; ++m) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // h = 0: row g (elements 0, 1); h = 1: row g + 8
          float tile_max = minus_infinity();
#pragma unroll
          for (int n = 0; n < BN / 8; ++n)
            tile_max = fmaxf(tile_max, fmaxf(s[m][n][2 * h], s[m][n][2 * h + 1]));
          tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
          tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
          const float new_max = fmaxf(row_max[m][h], tile_max);
          // Everything so far is rescaled by 2^((m - m')·scale·log2 e). While a row
          // has seen only masked keys (m' = -inf) nothing is rescaled and every p is 0.
          const float base = new_max == minus_infinity() ? 0.0f : new_max * scale_log2;
          const float rescale =
              row_max[m][h] == minus_infinity() ? 1.0f : exp2f(row_max[m][h] * scale_log2 - base);
          row_max[m][h] = new_max;
          row_sum[m][h] *= rescale;
#pragma unroll
          for (int n = 0; n < D / 8; ++n) {
            o_acc[m][n][2 * h] *= rescale;
            o_acc[m][n][2 * h + 1] *= rescale;
          }
          // p = exp(scale·(s - m')) = 2^(s·scale·log2 e - m'·scale·log2 e): one FMA
          // and one exp2 per score. l gathers this thread's share; the quad sums at
          // the end.
#pragma unroll
          for (int n = 0; n < BN / 8; ++n) {
            s[m][n][2 * h] = exp2f(fmaf(s[m][n][2 * h], scale_log2, -base));
            s[m][n][2 * h + 1] = exp2f(fmaf(s[m][n][2 * h + 1], scale_log2, -base));
            row_sum[m][h] += s[m][n][2 * h] + s[m][n][2 * h + 1];
          }
        }
      }

      // ---- stage 6: O += P V, once this tile's V has landed ----
      mma::cp_async_wait<2 * STAGES - 2>();
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        // P's accumulators for key tiles 2kk and 2kk + 1 are, element for element, the
        // A fragment of keys [16 kk, 16 kk + 16): a0 row g, a1 row g + 8, a2/a3 the
        // second tile. Rounded to 16 bits here (fp32 accumulation continues in O).
        u32 a[MT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          a[m][0] = pack2<T>(s[m][2 * kk][0], s[m][2 * kk][1]);
          a[m][1] = pack2<T>(s[m][2 * kk][2], s[m][2 * kk][3]);
          a[m][2] = pack2<T>(s[m][2 * kk + 1][0], s[m][2 * kk + 1][1]);
          a[m][3] = pack2<T>(s[m][2 * kk + 1][2], s[m][2 * kk + 1][3]);
        }
#pragma unroll
        for (int n = 0; n < D / 8; n += 2) {
          // B = V (keys x d), stored keys-major: ldmatrix.trans gives b0 = (keys 2t,
          // 2t+1; d g). Matrix i: keys 16 kk + (i % 2) * 8.., d (n + i / 2) * 8...
          u32 b[4];
          const int key = kk * 16 + ((lane / 8) % 2) * 8 + (lane % 8), c = n * 8 + (lane / 16) * 8;
          ldmatrix_x4_trans(b, shared_address(v_tile + key * kPitch + c));
#pragma unroll
          for (int m = 0; m < MT; ++m) {
            mma::MmaM16N8K16<T>::run(o_acc[m][n], a[m], b[0], b[1]);
            mma::MmaM16N8K16<T>::run(o_acc[m][n + 1], a[m], b[2], b[3]);
          }
        }
      }
      __syncthreads();  // every warp is done with this stage before it is refilled
    }
    mma::cp_async_wait<0>();

    // ---- stage 7: O / l, and the log-sum-exp ----
    T* o = static_cast<T*>(args.o) + batch * args.o_batch + sequence.q_start * args.o_seq +
           head * args.o_head;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float sum = row_sum[m][h];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const int row = my_row(m, h);
        const bool in_sequence = row < seq_q;
        const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;  // every key masked: O = 0
        store_row<T, D>(o + row * args.o_seq, in_sequence, t, [&](int n) {
          return pack2<T>(o_acc[m][n][2 * h] * inverse, o_acc[m][n][2 * h + 1] * inverse);
        });
        if (in_sequence && args.lse != nullptr && t == 0) {
          args.lse[sequence.lse_start + row] =
              sum > 0.0f ? row_max[m][h] * softmax_units<MOD>(args) + logf(sum) : minus_infinity();
        }
      }
    }
  }
};

}  // namespace attention
}  // namespace kjit
