// kjit/attention_backward.cuh — flash attention, backward: dQ, dK and dV from dO,
// recomputing P from the log-sum-exp the forward pass saved instead of storing the
// S_q x S_k matrix (memory O(S) instead of O(S²), paid for with the S = Q Kᵀ matmul
// done again).
//
// With P = softmax(scale · S), S = Q Kᵀ, O = P V, and D_i = Σ_d dO_id O_id:
//
//   dV = Pᵀ dO                 dP = dO Vᵀ
//   dS = P ∘ (dP − D)          (the softmax's Jacobian, row by row)
//   dQ = scale · dS K          dK = scale · dSᵀ Q
//
// and P is recomputed tile by tile as exp(scale · s − LSE): one FMA and one exp2,
// exact because LSE is the row's final normalizer. Three kernels, none of which
// adds into memory another block also adds into (no atomics), so every run gives
// the same bits:
//
//   1. FlashBackwardPrep: D_i per query row, and LSE · log2 e (+inf for a row that
//      saw no key, so every p of it is 0) in a workspace beside it
//   2. FlashBackwardKV:   one block per tile of BN keys of one K/V head; it streams
//      the query tiles of every query head sharing that K/V head (grouped-query
//      attention sums their contributions in registers) and accumulates dK and dV
//      of its keys. Per query tile, each warp with its 16 keys:
//        Sᵀ = K Qᵀ, Pᵀ = exp2(Sᵀ·scale·log2 e − LSE·log2 e), dV += Pᵀ dO,
//        dPᵀ = V dOᵀ, dSᵀ = Pᵀ ∘ (dPᵀ − D), dK += dSᵀ Q
//      Head dim 256 runs it twice, once for dV and once for dK (both sets of
//      accumulators would not fit in the 255 registers of a thread).
//   3. FlashBackwardQ:    one block per tile of BM queries, like the forward pass; it
//      streams K and V tiles and accumulates dQ: S = Q Kᵀ, P, dP = dO Vᵀ,
//      dS = P ∘ (dP − D), dQ += dS K
//
// Kernels 2 and 3 each recompute S and dP (seven matmuls in all, where the atomic
// formulation of FlashAttention-2 does five): the price of determinism without a
// serializing reduction. All products are mma.sync m16n8k16 with fp32 accumulators;
// P and dS are rounded to 16 bits only as the A operand of the next product, taken
// straight from the accumulator registers (their fragment layouts agree).
#pragma once

#include "kjit/attention.cuh"

namespace kjit {

// Kernel arguments of the three backward kernels. Mirrored byte for byte by
// runtime/attention.cpp. Strides in elements, like AttentionArgs'.
struct AttentionBackwardArgs {
  AttentionArgs forward;  // Q, K, V, O and LSE (all read), lengths, masks, scale
  const void* d_o;        // [batch, seq_q, heads, D], Q's dtype
  void* dq;               // [batch, seq_q, heads, D]
  void* dk;               // [batch, seq_k, kv_heads, D]
  void* dv;               // [batch, seq_k, kv_heads, D]
  // Workspace, f32, each laid out like LSE: D_i = rowsum(dO ∘ O), and LSE · log2 e
  // (+inf where LSE = -inf). Written by FlashBackwardPrep, read by the other two.
  float* delta;
  float* lse_log2;
  long long do_batch, do_seq, do_head;
  long long dq_batch, dq_seq, dq_head;
  long long dk_batch, dk_seq, dk_head;
  long long dv_batch, dv_seq, dv_head;
  // The atomic dQ (attention_backward_sm90.cuh, config dq=atomic): f32, one row of D
  // per query row, laid out like LSE; zeroed by FlashBackwardPrep, summed into by the
  // dK/dV kernel's blocks, scaled and rounded into dQ by FlashBackwardDqFinish.
  // nullptr when dQ has its own kernel (FlashBackwardQ).
  float* dq_accum;
};

namespace attention {

__device__ __forceinline__ float plus_infinity() {
  return __int_as_float(0x7f800000u);
}

// Where head `head`'s LSE row starts, given head `first`'s (packed: rows of total_q).
__device__ __forceinline__ long long lse_row(const AttentionArgs& args, long long first_start,
                                             int heads_after_first) {
  const int row_length = args.cu_seqlens_q != nullptr ? args.total_q : args.seq_q;
  return first_start + static_cast<long long>(heads_after_first) * row_length;
}

// Tiles [begin, begin + count) of a sequence.
struct TileRange {
  int begin, count;
};

// The tiles of `tile` queries in which some query sees one of the keys [key0, key0 +
// keys) (clipped to seq_k): query i sees key j when j - i - (seq_k - seq_q) lies in
// [-window_left, window_right].
template <typename MOD>
__device__ __forceinline__ TileRange query_tiles_seeing(const AttentionArgs& f, int seq_q,
                                                        int seq_k, int key0, int keys, int tile,
                                                        int first_head) {
  const int offset = seq_k - seq_q, last_key = min(key0 + keys, seq_k) - 1;
  int begin = 0, end = seq_q;
  if (f.window_right >= 0) begin = max(0, key0 - offset - f.window_right);
  if (f.window_left >= 0) end = min(seq_q, last_key - offset + f.window_left + 1);
  const int first = begin / tile;
  TileRange range{first, end > begin ? (end + tile - 1) / tile - first : 0};
  if constexpr (MOD::kMask) {  // not the query tiles none of the heads sharing these keys keeps
    int past = range.begin + range.count;
    narrow_tiles<MOD>(f, false, key0, last_key, seq_q, tile, first_head, f.kv_group, range.begin,
                      past);
    range.count = past - range.begin;
  }
  return range;
}

// The tiles of `tile` keys that some query of [row0, row0 + rows) (clipped to seq_q)
// sees.
template <typename MOD>
__device__ __forceinline__ TileRange key_tiles_seen(const AttentionArgs& f, int seq_q, int seq_k,
                                                    int row0, int rows, int tile, int head) {
  const int offset = seq_k - seq_q, last_row = min(row0 + rows, seq_q) - 1;
  int end = seq_k, begin = 0;
  if (f.window_right >= 0) end = min(end, last_row + offset + f.window_right + 1);
  if (f.window_left >= 0) begin = max(0, row0 + offset - f.window_left);
  const int first = begin / tile;
  TileRange range{first, end > begin ? (end + tile - 1) / tile - first : 0};
  if constexpr (MOD::kMask) {  // not the key tiles the mask modifier keeps nothing of
    int past = range.begin + range.count;
    narrow_tiles<MOD>(f, true, row0, last_row, seq_k, tile, head, 1, range.begin, past);
    range.count = past - range.begin;
  }
  return range;
}

// Copies `ROWS` rows of D elements (row r at base + r * row_stride) into a shared
// tile of pitch D + 8 with cp.async; rows at or past `valid` are zero-filled.
template <typename T, int D, int ROWS, int THREADS>
__device__ __forceinline__ void load_rows(T* tile, const T* base, long long row_stride, int valid) {
  constexpr int kChunks = D / 8, kPitch = D + 8;
  for (int c = threadIdx.x; c < ROWS * kChunks; c += THREADS) {
    const int row = c / kChunks, chunk = c % kChunks;
    const u32 dst = shared_address(tile + row * kPitch + chunk * 8);
    if (row < valid) {
      cp_async_16(dst, base + row * row_stride + chunk * 8);
    } else {
      cp_async_16_zfill(dst, base, 0);
    }
  }
}

// acc[n] (n < N/8, 16 rows x 8 columns each) += A(16 x K) B(K x N) over K in steps of
// 16, for one warp. A: 16 rows of a shared tile (pitch D + 8), k along the row. B
// from a shared tile whose rows are B's columns (n) and k along the row — the
// "col" layout mma wants, read by ldmatrix as it is.
template <typename T, int K, int N, int PITCH>
__device__ __forceinline__ void product_abt(float (&acc)[N / 8][4], const T* a_rows,
                                            const T* b_rows, int lane) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    u32 a[4];
    ldmatrix_x4(a, shared_address(a_rows + (lane % 16) * PITCH + kk * 16 + (lane / 16) * 8));
#pragma unroll
    for (int n = 0; n < N / 8; n += 2) {
      u32 b[4];
      const int row = n * 8 + (lane / 16) * 8 + (lane % 8), c = kk * 16 + ((lane / 8) % 2) * 8;
      ldmatrix_x4(b, shared_address(b_rows + row * PITCH + c));
      mma::MmaM16N8K16<T>::run(acc[n], a, b[0], b[1]);
      mma::MmaM16N8K16<T>::run(acc[n + 1], a, b[2], b[3]);
    }
  }
}

// acc[n] (n < N/8) += A(16 x K) B(K x N), A from the accumulator registers of an
// earlier product (a[kk / 2] pairs: the accumulator fragment of columns 16 kk ..
// 16 kk + 15 is the A fragment of those k, rounded to 16 bits here), B a shared tile
// stored k-major (row = k, N along the row), read by ldmatrix.trans.
template <typename T, int K, int N, int PITCH>
__device__ __forceinline__ void product_registers_b(float (&acc)[N / 8][4],
                                                    const float (&a_acc)[K / 8][4], const T* b_rows,
                                                    int lane) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    u32 a[4];
    a[0] = pack2<T>(a_acc[2 * kk][0], a_acc[2 * kk][1]);
    a[1] = pack2<T>(a_acc[2 * kk][2], a_acc[2 * kk][3]);
    a[2] = pack2<T>(a_acc[2 * kk + 1][0], a_acc[2 * kk + 1][1]);
    a[3] = pack2<T>(a_acc[2 * kk + 1][2], a_acc[2 * kk + 1][3]);
#pragma unroll
    for (int n = 0; n < N / 8; n += 2) {
      u32 b[4];
      const int row = kk * 16 + ((lane / 8) % 2) * 8 + (lane % 8), c = n * 8 + (lane / 16) * 8;
      ldmatrix_x4_trans(b, shared_address(b_rows + row * PITCH + c));
      mma::MmaM16N8K16<T>::run(acc[n], a, b[0], b[1]);
      mma::MmaM16N8K16<T>::run(acc[n + 1], a, b[2], b[3]);
    }
  }
}

template <int N>
__device__ __forceinline__ void zero(float (&acc)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

// Writes 16 accumulator rows (this thread's rows g and g + 8, columns 2t, 2t + 1 of
// every 8) times `factor` to rows first + g (+ 8) of `out`, those below `valid`
// (store_row: 16 bytes per lane; every lane of the warp calls it).
template <typename T, int D>
__device__ __forceinline__ void store_rows(T* out, long long row_stride, int first, int valid,
                                           const float (&acc)[D / 8][4], float factor, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = first + g + 8 * h;
    store_row<T, D>(out + row * row_stride, row < valid, t, [&](int n) {
      return pack2<T>(acc[n][2 * h] * factor, acc[n][2 * h + 1] * factor);
    });
  }
}

// ---- kernel 1: D_i = Σ_d dO_id · O_id, and LSE in log2 units, per query row ----
// grid (ceil(seq_q / kRows), heads, batch), kThreads threads. A row is D / 8 chunks
// of 16 bytes; a warp takes 32 / (D / 8) rows at a time where that divides (D = 64:
// 4 rows, 128: 2, 256: 1), so every lane has a load in flight, else one row (D = 96:
// 12 lanes of 32). This kernel is memory-bound: the loads in flight set its speed.
template <typename T, int D>
struct FlashBackwardPrep {
  static constexpr int kThreads = 256, kRows = 64;
  static constexpr int kLanesPerRow = 32 % (D / 8) == 0 ? D / 8 : 32;
  static constexpr int kRowsPerWarp = 32 / kLanesPerRow;

  __device__ static void run(const AttentionBackwardArgs& args) {
    const AttentionArgs& f = args.forward;
    const int head = blockIdx.y, batch = blockIdx.z;
    const BlockSequence sequence = block_sequence(f, batch, head);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int part = lane % kLanesPerRow;  // this lane's first chunk of its row
    const T* o = static_cast<const T*>(f.o) + batch * f.o_batch + sequence.q_start * f.o_seq +
                 head * f.o_head;
    const T* d_o = static_cast<const T*>(args.d_o) + batch * args.do_batch +
                   sequence.q_start * args.do_seq + head * args.do_head;
    for (int r = warp * kRowsPerWarp; r < kRows; r += kThreads / 32 * kRowsPerWarp) {
      const int row = blockIdx.x * kRows + r + lane / kLanesPerRow;
      const bool inside = row < sequence.seq_q;  // every lane still takes the shuffles
      float sum = 0.0f;
      for (int c = part; inside && c < D / 8; c += kLanesPerRow) {
        const uint4 o_chunk = *reinterpret_cast<const uint4*>(o + row * f.o_seq + c * 8);
        const uint4 do_chunk = *reinterpret_cast<const uint4*>(d_o + row * args.do_seq + c * 8);
        const T* oe = reinterpret_cast<const T*>(&o_chunk);
        const T* de = reinterpret_cast<const T*>(&do_chunk);
#pragma unroll
        for (int i = 0; i < 8; ++i) sum = fmaf(to_f32(oe[i]), to_f32(de[i]), sum);
      }
      // Sum over the row's lanes (aligned groups of kLanesPerRow).
#pragma unroll
      for (int width = kLanesPerRow / 2; width >= 1; width /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, width);
      if (!inside) continue;
      if (part == 0) {
        const long long at = sequence.lse_start + row;
        const float lse = f.lse[at];
        args.delta[at] = sum;
        // 1.4426950408889634 = log2 e. A row that saw no key (LSE = -inf) gets +inf:
        // exp2(s·scale·log2 e − inf) = 0 for every one of its scores.
        args.lse_log2[at] = lse == minus_infinity() ? plus_infinity() : lse * 1.4426950408889634f;
      }
      // The atomic dQ's row starts at zero (16-byte stores of 4 floats).
      if (args.dq_accum != nullptr) {
        float* accum = args.dq_accum + (sequence.lse_start + row) * D;
        for (int c = part; c < D / 4; c += kLanesPerRow)
          *reinterpret_cast<float4*>(accum + 4 * c) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
  }
};

// ---- the atomic dQ's last step: dQ = scale · Σ (dS K), rounded to T ----
// grid (ceil(seq_q / kRows), heads, batch), kThreads threads: one warp per row at a
// time, 4 values a lane (16-byte loads of the f32 sums, two 4-byte stores of dQ).
template <typename T, int D>
struct FlashBackwardDqFinish {
  static constexpr int kThreads = 256, kRows = 64;

  __device__ static void run(const AttentionBackwardArgs& args) {
    const AttentionArgs& f = args.forward;
    const int head = blockIdx.y, batch = blockIdx.z;
    const BlockSequence sequence = block_sequence(f, batch, head);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    T* dq = static_cast<T*>(args.dq) + batch * args.dq_batch + sequence.q_start * args.dq_seq +
            head * args.dq_head;
    for (int r = warp; r < kRows; r += kThreads / 32) {
      const int row = blockIdx.x * kRows + r;
      if (row >= sequence.seq_q) break;
      const float* accum = args.dq_accum + (sequence.lse_start + row) * D;
      for (int c = lane; c < D / 4; c += 32) {
        const float4 v = *reinterpret_cast<const float4*>(accum + 4 * c);
        u32* out = reinterpret_cast<u32*>(dq + row * args.dq_seq + 4 * c);
        out[0] = pack2<T>(v.x * f.scale, v.y * f.scale);
        out[1] = pack2<T>(v.z * f.scale, v.w * f.scale);
      }
    }
  }
};

// ---- kernel 2: dK and dV for BN keys of one K/V head ----
// grid (ceil(seq_k / BN), kv_heads, batch), BN / 16 warps of 16 keys each.
// OUTPUTS: 1 dV, 2 dK, 3 both.
// MOD: the score and mask modifiers (attention.cuh; NoModifiers when there are none).
// With a score modifier P is recomputed from mod(scale · S) and dS is scaled by
// mod'(scale · S), the chain rule through the modifier, before dK and dQ use it.
template <typename T, int D, int BM, int BN, int STAGES, int OUTPUTS, typename MOD = NoModifiers>
struct FlashBackwardKV {
  static constexpr int kWarps = BN / 16;
  static constexpr int kThreads = kWarps * 32;
  static constexpr bool kDV = (OUTPUTS & 1) != 0, kDK = (OUTPUTS & 2) != 0;
  static_assert(D % 16 == 0 && BM % 16 == 0 && BN % 16 == 0, "k16 steps");
  static_assert(STAGES >= 2, "at least double buffering");
  static constexpr int kPitch = D + 8;  // +16 bytes per row: conflict-free ldmatrix
  static constexpr int kKvElems = BN * kPitch, kQElems = BM * kPitch;
  // K and V of the block; per stage Q and dO tiles, then LSE·log2 e and D per query.
  static constexpr int kSharedBytes =
      (2 * kKvElems + 2 * STAGES * kQElems) * 2 + STAGES * 2 * BM * 4;

  __device__ static void run(const AttentionBackwardArgs& args) {
    const AttentionArgs& f = args.forward;
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    T* k_tile = reinterpret_cast<T*>(shared_bytes);
    T* v_tile = k_tile + kKvElems;
    T* q_tiles = v_tile + kKvElems;
    T* do_tiles = q_tiles + STAGES * kQElems;
    float* lse_tiles = reinterpret_cast<float*>(do_tiles + STAGES * kQElems);
    float* delta_tiles = lse_tiles + STAGES * BM;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int kv_head = blockIdx.y, batch = blockIdx.z;
    const int first_head = kv_head * f.kv_group;  // the query heads sharing this K/V head
    const BlockSequence sequence = block_sequence(f, batch, first_head);
    const int seq_q = sequence.seq_q, seq_k = sequence.seq_k;
    const int key0 = blockIdx.x * BN;
    if (key0 >= seq_k) return;  // a shorter sequence of a packed batch

    const T* k = static_cast<const T*>(f.k) + batch * f.k_batch + sequence.k_start * f.k_seq +
                 kv_head * f.k_head;
    const T* v = static_cast<const T*>(f.v) + batch * f.v_batch + sequence.k_start * f.v_seq +
                 kv_head * f.v_head;
    const T* q = static_cast<const T*>(f.q) + batch * f.q_batch + sequence.q_start * f.q_seq;
    const T* d_o =
        static_cast<const T*>(args.d_o) + batch * args.do_batch + sequence.q_start * args.do_seq;

    // ---- the query tiles that see any key of this block ----
    // Query i sees key j when j - i - offset is in [-window_left, window_right].
    const int offset = seq_k - seq_q;
    const TileRange range = query_tiles_seeing<MOD>(f, seq_q, seq_k, key0, BN, BM, first_head);
    const int tile_begin = range.begin, tiles = range.count;
    const int items = tiles * f.kv_group;  // (query head, query tile) pairs, head-major

    // ---- the pipeline: K and V once, then Q, dO, LSE and D per item ----
    load_rows<T, D, BN, kThreads>(k_tile, k + key0 * f.k_seq, f.k_seq, seq_k - key0);
    load_rows<T, D, BN, kThreads>(v_tile, v + key0 * f.v_seq, f.v_seq, seq_k - key0);
    mma::cp_async_commit();
    auto item_head = [&](int item) { return item / tiles; };  // after first_head
    auto item_row0 = [&](int item) { return (tile_begin + item % tiles) * BM; };
    auto issue = [&](int item, int stage) {
      const int h = item_head(item), q0 = item_row0(item);
      const long long head_offset_q = static_cast<long long>(first_head + h) * f.q_head;
      const long long head_offset_do = static_cast<long long>(first_head + h) * args.do_head;
      load_rows<T, D, BM, kThreads>(q_tiles + stage * kQElems, q + head_offset_q + q0 * f.q_seq,
                                    f.q_seq, seq_q - q0);
      load_rows<T, D, BM, kThreads>(do_tiles + stage * kQElems,
                                    d_o + head_offset_do + q0 * args.do_seq, args.do_seq,
                                    seq_q - q0);
      // Rows past the sequence: P = 0 (LSE +inf) and D = 0, so they add nothing.
      const long long lse0 = lse_row(f, sequence.lse_start, h) + q0;
      for (int i = threadIdx.x; i < BM; i += kThreads) {
        const bool inside = q0 + i < seq_q;
        lse_tiles[stage * BM + i] = inside ? args.lse_log2[lse0 + i] : plus_infinity();
        delta_tiles[stage * BM + i] = inside ? args.delta[lse0 + i] : 0.0f;
      }
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < items) issue(s, s);
      mma::cp_async_commit();
    }

    float dv_acc[D / 8][4], dk_acc[D / 8][4];  // this warp's 16 keys x D
    zero(dv_acc);
    zero(dk_acc);
    const int warp_key0 = key0 + warp * 16;         // this thread's keys: + g and + g + 8
    const float scale_log2 = softmax_log2<MOD>(f);  // scores to log2 units
    const T* warp_k = k_tile + warp * 16 * kPitch;
    const T* warp_v = v_tile + warp * 16 * kPitch;

    for (int item = 0; item < items; ++item) {
      const int stage = item % STAGES;
      const int ahead = item + STAGES - 1;
      if (ahead < items) issue(ahead, ahead % STAGES);
      mma::cp_async_commit();
      mma::cp_async_wait<STAGES - 1>();  // K, V and this item's tiles have landed
      __syncthreads();
      const T* q_tile = q_tiles + stage * kQElems;
      const T* do_tile = do_tiles + stage * kQElems;
      const float* lse_log2 = lse_tiles + stage * BM;
      const float* delta = delta_tiles + stage * BM;
      const int q0 = item_row0(item);

      // Sᵀ = K Qᵀ: this warp's 16 keys (rows) x BM queries (columns).
      float p[BM / 8][4];
      zero(p);
      product_abt<T, D, BM, kPitch>(p, warp_k, q_tile, lane);

      // Pᵀ = exp2(Sᵀ·scale·log2 e − LSE_q·log2 e); zero outside the mask. Only
      // warps whose keys x queries cross a window edge test each element (a mask
      // modifier: every warp). A score modifier: Pᵀ = exp2(mod(scale·Sᵀ)·log2 e −
      // LSE_q·log2 e), and mod'(scale·Sᵀ) kept for dSᵀ.
      const int head = first_head + item_head(item);
      const bool crosses_right =
          f.window_right >= 0 && warp_key0 + 15 - q0 - offset > f.window_right;
      const bool crosses_left =
          f.window_left >= 0 && warp_key0 - (q0 + BM - 1) - offset < -f.window_left;
      // Queries past the sequence, with a score modifier: their LSE (+inf) zeroes P
      // only where the modified score is finite, and mod(s) there may be anything.
      const bool past_queries = MOD::kScore && q0 + BM > seq_q;
      float slope[MOD::kScore ? BM / 8 : 1][4];  // mod'(scale·Sᵀ)
      // A modifier over q - kv (MOD::kRelative): q - kv of the thread's first score,
      // then a constant per score.
      auto query0_minus_key = [&] { return static_cast<float>(q0 + 2 * t - warp_key0 - g); };
#pragma unroll
      for (int n = 0; n < BM / 8; ++n) {
        const float2 l = *reinterpret_cast<const float2*>(lse_log2 + n * 8 + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = warp_key0 + g + 8 * (e / 2), query = q0 + n * 8 + 2 * t + (e % 2);
          float score = p[n][e];
          if constexpr (MOD::kScore) {
            slope[n][e] = MOD::score_grad(f, score * f.scale, query, key, head);
            score = modified_score<MOD>(
                f, score, query0_minus_key() + static_cast<float>(8 * n + e % 2 - 8 * (e / 2)),
                query, key, head);
          }
          float value = exp2f(fmaf(score, scale_log2, -(e % 2 == 0 ? l.x : l.y)));
          // With mod' kept per score, a branch per score here: as bits found ahead of
          // the scores, as the dQ kernel has them, ptxas spilled the head dim 128
          // kernels. Otherwise the edges are tested in a loop of their own below.
          if constexpr (!MOD::kConstantGrad) {
            if (crosses_right || crosses_left || past_queries) {
              if (!key_visible(f, seq_k, key, query + offset) || query >= seq_q) value = 0.0f;
            }
          }
          if constexpr (MOD::kMask)  // a select, not a branch per score
            value = MOD::keep(f, query, key, head) ? value : 0.0f;
          p[n][e] = value;
          // Where P is 0 so is dS, whatever mod' is there (a masked score's mod' may be
          // infinite: s / (q_idx - kv_idx) on the diagonal).
          // (A constant mod' is finite, so dS is 0 wherever P is: there is no mod' per
          // score to zero.)
          if constexpr (MOD::kScore && !MOD::kConstantGrad)
            slope[n][e] = value != 0.0f ? slope[n][e] : 0.0f;
        }
      }
      // Without a modifier, or with one whose mod' is a constant (ALiBi), the built-in
      // masks' edges in a loop of their own: one branch around it, a select per score
      // (as in the wgmma kernel).
      if (MOD::kConstantGrad && (crosses_right || crosses_left || past_queries)) {
#pragma unroll
        for (int n = 0; n < BM / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = warp_key0 + g + 8 * (e / 2), query = q0 + n * 8 + 2 * t + (e % 2);
            const bool visible = key_visible(f, seq_k, key, query + offset) && query < seq_q;
            p[n][e] = visible ? p[n][e] : 0.0f;
          }
      }

      // dV += Pᵀ dO (Pᵀ from registers, dO k-major in shared memory).
      if (kDV) product_registers_b<T, BM, D, kPitch>(dv_acc, p, do_tile, lane);

      if (kDK) {
        // dPᵀ = V dOᵀ, then dSᵀ = Pᵀ ∘ (dPᵀ − D_q), in place of Pᵀ.
        float dp[BM / 8][4];
        zero(dp);
        product_abt<T, D, BM, kPitch>(dp, warp_v, do_tile, lane);
#pragma unroll
        for (int n = 0; n < BM / 8; ++n) {
          const float2 d = *reinterpret_cast<const float2*>(delta + n * 8 + 2 * t);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            p[n][e] *= dp[n][e] - (e % 2 == 0 ? d.x : d.y);
            if constexpr (MOD::kScore) p[n][e] *= slope[n][e];
          }
        }
        // dK += dSᵀ Q (scaled once at the end).
        product_registers_b<T, BM, D, kPitch>(dk_acc, p, q_tile, lane);
      }
      __syncthreads();  // every warp is done with this stage before it is refilled
    }
    mma::cp_async_wait<0>();

    // Keys no query sees (items = 0) get dK = dV = 0.
    const long long key_start = sequence.k_start;
    if (kDV) {
      T* dv = static_cast<T*>(args.dv) + batch * args.dv_batch + key_start * args.dv_seq +
              kv_head * args.dv_head;
      store_rows<T, D>(dv, args.dv_seq, warp_key0, seq_k, dv_acc, 1.0f, lane);
    }
    if (kDK) {
      T* dk = static_cast<T*>(args.dk) + batch * args.dk_batch + key_start * args.dk_seq +
              kv_head * args.dk_head;
      store_rows<T, D>(dk, args.dk_seq, warp_key0, seq_k, dk_acc, f.scale, lane);
    }
  }
};

// ---- kernel 3: dQ for BM queries of one head ----
// grid (ceil(seq_q / BM), heads, batch), WARPS warps of 16 queries each.
template <typename T, int D, int BM, int BN, int WARPS, int STAGES, typename MOD = NoModifiers>
struct FlashBackwardQ {
  static_assert(BM == 16 * WARPS, "16 query rows per warp");
  static_assert(D % 16 == 0 && BN % 16 == 0, "k16 steps");
  static_assert(STAGES >= 2, "at least double buffering");
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kPitch = D + 8;
  static constexpr int kQElems = BM * kPitch, kKvElems = BN * kPitch;
  // Q and dO of the block, then per stage a K and a V tile.
  static constexpr int kSharedBytes = (2 * kQElems + 2 * STAGES * kKvElems) * 2;

  __device__ static void run(const AttentionBackwardArgs& args) {
    const AttentionArgs& f = args.forward;
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    T* q_tile = reinterpret_cast<T*>(shared_bytes);
    T* do_tile = q_tile + kQElems;
    T* k_tiles = do_tile + kQElems;
    T* v_tiles = k_tiles + STAGES * kKvElems;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int head = blockIdx.y, batch = blockIdx.z;
    const int kv_head = head / f.kv_group;
    // Causal-style masks: the longest query tiles first (as in the forward pass).
    const bool longest_first = f.window_left < 0 && f.window_right >= 0;
    const int row0 = (longest_first ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BM;
    const BlockSequence sequence = block_sequence(f, batch, head);
    const int seq_q = sequence.seq_q, seq_k = sequence.seq_k;
    if (row0 >= seq_q) return;

    const T* q = static_cast<const T*>(f.q) + batch * f.q_batch + sequence.q_start * f.q_seq +
                 head * f.q_head;
    const T* d_o = static_cast<const T*>(args.d_o) + batch * args.do_batch +
                   sequence.q_start * args.do_seq + head * args.do_head;
    const T* k = static_cast<const T*>(f.k) + batch * f.k_batch + sequence.k_start * f.k_seq +
                 kv_head * f.k_head;
    const T* v = static_cast<const T*>(f.v) + batch * f.v_batch + sequence.k_start * f.v_seq +
                 kv_head * f.v_head;

    // The key tiles any row of the block sees (as in the forward pass).
    const int offset = seq_k - seq_q;
    const TileRange range = key_tiles_seen<MOD>(f, seq_q, seq_k, row0, BM, BN, head);
    const int tile_begin = range.begin, tile_end = range.begin + range.count;

    load_rows<T, D, BM, kThreads>(q_tile, q + row0 * f.q_seq, f.q_seq, seq_q - row0);
    load_rows<T, D, BM, kThreads>(do_tile, d_o + row0 * args.do_seq, args.do_seq, seq_q - row0);
    mma::cp_async_commit();
    auto issue = [&](int tile, int stage) {
      const int key0 = tile * BN;
      load_rows<T, D, BN, kThreads>(k_tiles + stage * kKvElems, k + key0 * f.k_seq, f.k_seq,
                                    seq_k - key0);
      load_rows<T, D, BN, kThreads>(v_tiles + stage * kKvElems, v + key0 * f.v_seq, f.v_seq,
                                    seq_k - key0);
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (tile_begin + s < tile_end) issue(tile_begin + s, s);
      mma::cp_async_commit();
    }

    // This thread's rows g and g + 8 of the warp's 16: LSE·log2 e and D.
    const int warp_row0 = row0 + warp * 16;
    float lse_log2[2], delta[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp_row0 + g + 8 * h;
      const bool inside = row < seq_q;
      lse_log2[h] = inside ? args.lse_log2[sequence.lse_start + row] : plus_infinity();
      delta[h] = inside ? args.delta[sequence.lse_start + row] : 0.0f;
    }
    float dq_acc[D / 8][4];
    zero(dq_acc);

    for (int tile = tile_begin; tile < tile_end; ++tile) {
      const int stage = (tile - tile_begin) % STAGES;
      const int ahead = tile + STAGES - 1;
      if (ahead < tile_end) issue(ahead, (ahead - tile_begin) % STAGES);
      mma::cp_async_commit();
      mma::cp_async_wait<STAGES - 1>();
      __syncthreads();
      const T* k_tile = k_tiles + stage * kKvElems;
      const T* v_tile = v_tiles + stage * kKvElems;
      const int key0 = tile * BN;

      // S = Q Kᵀ, then P = exp2(S·scale·log2 e − LSE·log2 e), zero outside the mask.
      float p[BN / 8][4];
      zero(p);
      product_abt<T, D, BN, kPitch>(p, q_tile + warp * 16 * kPitch, k_tile, lane);
      const bool crosses_end = key0 + BN > seq_k;
      const bool crosses_right =
          f.window_right >= 0 && key0 + BN - 1 > warp_row0 + offset + f.window_right;
      const bool crosses_left =
          f.window_left >= 0 && key0 < warp_row0 + 15 + offset - f.window_left;
      // A score modifier: P from mod(scale·S), and P·mod'(scale·S) kept in its place
      // (dQ needs nothing else of P: dS = P·mod'·(dP − D)).
      const bool crosses = crosses_end || crosses_right || crosses_left;
#pragma unroll
      for (int n = 0; n < BN / 8; ++n) {
        // Which of the 4 scores the built-in masks keep (one branch per 4 scores).
        const u32 kept =
            !crosses ? 0xfu : visible_bits(f, seq_k, offset, [&](int e, int& key, int& query) {
              key = key0 + n * 8 + 2 * t + (e % 2);
              query = warp_row0 + g + 8 * (e / 2);
            });
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          // (Positions computed where used: computed up front, they change the
          // unmodified kernel's code.)
          auto key = [&] { return key0 + n * 8 + 2 * t + (e % 2); };
          auto row = [&] { return warp_row0 + g + 8 * (e / 2); };
          float score = p[n][e], slope = 1.0f;
          if constexpr (MOD::kScore) {
            slope = MOD::score_grad(f, score * f.scale, row(), key(), head);
            // q - kv: that of the thread's first score in the row, plus a constant.
            score = modified_score<MOD>(f, score,
                                        static_cast<float>(warp_row0 + g - key0 - 2 * t) +
                                            static_cast<float>(8 * (e / 2) - 8 * n - e % 2),
                                        row(), key(), head);
          }
          float value = exp2f(fmaf(score, softmax_log2<MOD>(f), -lse_log2[e / 2]));
          // P times mod' before the masks: a masked score's mod' may be infinite (s /
          // (q_idx - kv_idx) on the diagonal), and the selects leave 0, not 0 x inf.
          if constexpr (MOD::kScore) value *= slope;
          value = (kept >> e) & 1u ? value : 0.0f;
          if constexpr (MOD::kMask)  // a select, not a branch per score
            value = MOD::keep(f, row(), key(), head) ? value : 0.0f;
          p[n][e] = value;
        }
      }

      // dP = dO Vᵀ, then dS = P ∘ (dP − D) in place of P.
      float dp[BN / 8][4];
      zero(dp);
      product_abt<T, D, BN, kPitch>(dp, do_tile + warp * 16 * kPitch, v_tile, lane);
#pragma unroll
      for (int n = 0; n < BN / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) p[n][e] *= dp[n][e] - delta[e / 2];

      // dQ += dS K (K k-major: keys are the rows; scaled once at the end).
      product_registers_b<T, BN, D, kPitch>(dq_acc, p, k_tile, lane);
      __syncthreads();
    }
    mma::cp_async_wait<0>();

    T* dq = static_cast<T*>(args.dq) + batch * args.dq_batch + sequence.q_start * args.dq_seq +
            head * args.dq_head;
    store_rows<T, D>(dq, args.dq_seq, warp_row0, seq_q, dq_acc, f.scale, lane);
  }
};

}  // namespace attention
}  // namespace kjit
