// kjit/attention_backward_sm90.cuh — flash attention, backward, on Hopper's engines:
// the same three steps as kjit/attention_backward.cuh (read that one first: the
// algebra, the prep kernel and the reasons for two gradient kernels without atomics
// are there), with the copy engine (TMA) bringing the tiles and wgmma running every
// product. Each kernel is laid out like kjit/attention_sm90.cuh's forward pass:
//
//   warpgroup 0 (producer):  thread 0 issues the copies, Q/dO (or K/V) of the block
//      once, then the streamed tiles into STAGES buffers, each refilled once both
//      consumers have released it (mbarriers full / empty per stage); in the dK/dV
//      kernel warps 1..3 copy each tile's LSE·log2 e and D beside it
//   warpgroups 1, 2 (consumers): 64 rows of the block each (keys for dK/dV, queries
//      for dQ), wgmma m64nNk16 with operands from shared memory through descriptors,
//      or A from registers when it is P or dS (the accumulator layout of the
//      product that made them, rounded to 16 bits, is wgmma's A fragment)
//
// dK/dV kernel, per query tile of BQ rows, for a consumer's 64 keys:
//   Sᵀ  = K Qᵀ        m64nBQ, K and Q K-major (the head dim is contiguous)
//   dPᵀ = V dOᵀ       m64nBQ, issued right behind Sᵀ
//   Pᵀ  = 2^(Sᵀ·scale·log2 e − LSE·log2 e), masked, to 16 bits
//   dV += Pᵀ dO       m64nD, Pᵀ from registers, dO MN-major (wgmma's transpose flag)
//   dSᵀ = Pᵀ ∘ (dPᵀ − D), to 16 bits
//   dK += dSᵀ Q       m64nD, dSᵀ from registers, Q MN-major
// dQ kernel, per key tile of BKT keys, for a consumer's 64 queries:
//   S = Q Kᵀ, dP = dO Vᵀ (m64nBKT), P, dS = P ∘ (dP − D), dQ += dS K (m64nD, K MN-major)
//
// Shared memory is 1024-byte aligned; every tile is D/64 column chunks of [rows][64]
// elements, 128 bytes per row in the 128-byte-swizzle layout TMA writes and wgmma
// reads. Packed variable-length batches read each sequence at its token offset;
// rows of a neighbouring sequence that a box brings along are masked (P = 0).
#pragma once

#include "kjit/attention_backward.cuh"
#include "kjit/sm90.cuh"

namespace kjit {
namespace attention {

// The two 16-bit values of a fragment register as floats (low half first).
template <typename T>
__device__ __forceinline__ void unpack2(u32 pair, float& a, float& b) {
  T lo, hi;
  lo.bits = static_cast<u16>(pair & 0xffffu);
  hi.bits = static_cast<u16>(pair >> 16);
  a = to_f32(lo);
  b = to_f32(hi);
}

// Keeps the compiler from reusing fragment registers an issued wgmma still reads.
template <int N>
__device__ __forceinline__ void fence_fragments(u32 (&f)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(f[i][r])::"memory");
}

// Accumulators acc[4j + e] (16-bit pairs 8kk .. 8kk + 7 per k16 step) -> the A
// fragments of the next product (see attention_sm90.cuh, rescale_and_keep_p).
template <typename T, int N>
__device__ __forceinline__ void to_fragments(const float (&acc)[N / 2], u32 (&f)[N / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) f[kk][r] = pack2<T>(acc[8 * kk + 2 * r], acc[8 * kk + 2 * r + 1]);
}

// A warp's 16 rows of a wgmma accumulator times `factor` (the thread's rows g and
// g + 8: acc[4j + 2h + e] at column 8j + 2t + e) to rows warp_row0 .. + 15 of `out`,
// those below `valid`. The accumulator layout gives a lane 4 bytes of each 8-column
// chunk, and 4-byte stores fill half of each 32-byte sector; so the rows go through
// shared memory this warp alone uses now (its 16 rows of `tile`: 128-byte lines per
// 64 columns, the chunks `chunk_stride` bytes apart, the copy engine's layout) and
// leave it 16 bytes a lane, consecutive lanes along a row. The 16-byte units of a
// line are XOR-swizzled by row (unit u of row r at u ^ r % 8), so that neither the
// 4-byte stores (8 rows x 4 lanes) nor the 16-byte loads (8 units of a row) meet in
// a bank. (In registers, with a quad's shuffles as for the forward's O, the tightest
// dK/dV kernels spilled.)
template <typename T, int D>
__device__ __forceinline__ void store_rows_through(T* out, long long row_stride, int warp_row0,
                                                   int valid, const float (&acc)[D / 2],
                                                   float factor, u32 tile, int chunk_stride) {
  // The thread's place, read here (volatile: not computed ahead, in the main loop,
  // where one more live register spilled the tightest dK/dV kernel).
  unsigned tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  const int lane = static_cast<int>(tid % 32), g = lane / 4, t = lane % 4;
  const u32 scratch = tile + (tid / 32 % 4 + 4 * (tid / 128 - 1)) * 16 * 128;
  auto at = [&](int row, int unit) {  // unit: 16 bytes, 8 columns
    return scratch + (unit / 8) * chunk_stride + row * 128 + (((unit % 8) ^ (row % 8)) << 4);
  };
  // The scratch's last readers (wgmma through the async proxy, or this warp's own
  // loads of an earlier call) are done before it is written.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncwarp();
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const u32 pair = pack2<T>(acc[4 * j + 2 * h] * factor, acc[4 * j + 2 * h + 1] * factor);
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(at(g + 8 * h, j) + 4 * t), "r"(pair) : "memory");
    }
  __syncwarp();
#pragma unroll
  for (int i = lane; i < 16 * D / 8; i += 32) {
    const int row = i / (D / 8), unit = i % (D / 8);
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(at(row, unit))
                 : "memory");
    if (warp_row0 + row < valid)
      *reinterpret_cast<uint4*>(out + (warp_row0 + row) * row_stride + 8 * unit) = v;
  }
}

// acc (64 x N) = A Bᵀ over the head dim D, both K-major in shared memory as column
// chunks of 64 (128-byte swizzled rows): A is rows a_row0 .. a_row0 + 63 of a tile of
// A_ROWS rows, B a tile of N rows. D / 16 wgmma k steps, the first overwriting acc.
template <typename Wgmma, int D, int A_ROWS, int N>
__device__ __forceinline__ void product_k_major(float (&acc)[N / 2], u32 a_tile, int a_row0,
                                                u32 b_tile) {
  const unsigned long long a = sm90::descriptor(a_tile + a_row0 * 128, 16, 1024);
  const unsigned long long b = sm90::descriptor(b_tile, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const u32 chunk = kk / 4, step = (kk % 4) * 32;  // a k16 step is 32 bytes of a row
    Wgmma::run(acc, sm90::advance(a, chunk * A_ROWS * 128 + step),
               sm90::advance(b, chunk * N * 128 + step), kk > 0 ? 1 : 0);
  }
}

// acc (64 x D) += A B: A (64 x K) from registers, B a tile of K rows read MN-major (a
// k16 step is 16 rows, 2048 bytes; column chunks K * 128 bytes apart).
template <typename Wgmma, int K, int N>
__device__ __forceinline__ void product_registers_mn(float (&acc)[N / 2], u32 (&a)[K / 16][4],
                                                     u32 b_tile) {
  const unsigned long long b = sm90::descriptor(b_tile, K * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) Wgmma::run(acc, a[kk], sm90::advance(b, kk * 2048));
}

// Ping-pong between the two consumer warpgroups: each issues its products only in
// its turn (named barrier 1 + group) and then hands the turn over (2 - group), so
// that while one warpgroup's products run the other computes P or dS and the two
// do not sit idle together. Group 1 lets group 0 start; both take `rounds` turns.
template <bool ON>
struct Turns {
  int group, rounds, round;
  __device__ __forceinline__ void mine() {
    if (!ON) return;
    if (round == 0 && group == 1) sm90::named_barrier_arrive(1, 256);
    sm90::named_barrier_sync(1 + group, 256);
  }
  __device__ __forceinline__ void yours() {
    if (!ON) return;
    if (!(group == 1 && round == rounds - 1)) sm90::named_barrier_arrive(2 - group, 256);
    ++round;
  }
};

// The dK/dV kernel's dQ mode: SeparateDq, dQ has a kernel of its own
// (FlashBackwardQSm90: the same bits every run); otherwise the wgmma instruction
// of the atomic dQ's product (m64n64k16, A and B read MN-major from shared memory).
struct SeparateDq {};
template <typename WgmmaDQ>
struct AtomicDq {
  static constexpr bool value = true;
};
template <>
struct AtomicDq<SeparateDq> {
  static constexpr bool value = false;
};

// ---- dK and dV: 128 keys of one K/V head per block -----------------------------
// grid (ceil(seq_k / 128), kv_heads, batch), 384 threads. BQ: query rows per tile;
// WgmmaS: m64nBQk16, descriptors, accumulate flag; WgmmaKV: m64nDk16, A in
// registers, B transposed.
// MOD: the score and mask modifiers (attention.cuh): P from mod(scale · S), dS times
// mod'(scale · S).
// WgmmaDQ: SeparateDq, or the atomic dQ (config dq=atomic): the block also computes
// its keys' share of dQ = dS K for every query tile it streams, stores it to one of
// two f32 tiles in shared memory, and producer warp 1 adds it into the f32 sums
// args.dq_accum with the copy engine (cp.reduce.async.bulk.tensor .add over map_dq:
// blocks of other keys add into the same rows, in whatever order they come, so the
// sums' last bits vary from run to run). Five products per tile in all, where the
// separate dQ kernel recomputes S and dP: seven.
template <typename T, int D, int BQ, int STAGES, bool PINGPONG, typename WgmmaS, typename WgmmaKV,
          typename MOD = NoModifiers, typename WgmmaDQ = SeparateDq>
struct FlashBackwardKVSm90 {
  static constexpr int BK = 128;  // two consumer warpgroups of 64 keys
  static constexpr int kThreads = 384;
  static constexpr int kChunks = D / 64;
  static constexpr int kKvBytes = BK * D * 2;    // K (or V) of the block
  static constexpr int kTileBytes = BQ * D * 2;  // one Q (or dO) tile
  static constexpr bool kAtomicDq = AtomicDq<WgmmaDQ>::value;
  // The atomic dQ's dSᵀ tiles, two (a tile is written while the other warpgroup may
  // still read the previous one): [128 keys][64 queries], one 128-byte swizzled
  // line per key, as wgmma reads an MN-major A.
  static constexpr int kDsBytes = kAtomicDq ? BK * 128 : 0;
  // The atomic dQ's f32 tiles of a query tile, two: the consumers fill one while the
  // copy engine may still be reading the other. A tile is [64 queries][D floats] as
  // D / 32 column chunks of [64 rows][128 bytes], the 16-byte units of a row swizzled
  // by the row (unit u of row r at u ^ r % 8): the layout the copy engine's 128-byte
  // swizzle reads (map_dq), and one in which a warp's float2 stores of 8 rows spread
  // over all 32 banks. The consumers store their halves, producer warp 1 adds the
  // tile into args.dq_accum.
  static constexpr int kDqBytes = kAtomicDq ? 64 * D * 4 : 0;  // D = 128: 32 KiB
  static constexpr int kDqBuffers = 2;            // used in turn: use & 1, phase (use >> 1) & 1
  static constexpr int kDqChunkBytes = 64 * 128;  // 32 floats of 64 rows
  // Per stage: Q, dO, then LSE·log2 e and D of its BQ queries.
  static constexpr int kStageBytes = 2 * kTileBytes + 2 * BQ * 4;
  // mbarriers: kv_full, then full and empty per stage, then (the atomic dQ) dq_full
  // and dq_empty per dQ tile.
  static constexpr int kBarrierBytes = 8 * (1 + 2 * STAGES) + (kAtomicDq ? 16 * kDqBuffers : 0);
  static constexpr int kSharedBytes = 1024 + 2 * kKvBytes + 2 * kDsBytes + kDqBuffers * kDqBytes +
                                      STAGES * kStageBytes + kBarrierBytes;
  // Producer warps 1..3 copy LSE and D (the atomic dQ: warps 2 and 3; warp 1 adds
  // the dQ tiles into the sums).
  static constexpr int kLoaderFirst = kAtomicDq ? 64 : 32;
  static constexpr int kLoaders = 128 - kLoaderFirst;
  // The atomic dQ per warpgroup: 64 queries x D / 2 columns of the head dim (D / 4
  // accumulators a thread: columns kDqCols group ..), over all 128 keys of the block.
  static constexpr int kDqCols = D / 2;
  static_assert(D == 64 || D == 128, "whole 128-byte chunks of the head dim");
  static_assert(BQ % 16 == 0 && BQ <= 256, "wgmma N");
  static_assert(!kAtomicDq || (BQ == 64 && !PINGPONG),
                "the atomic dQ: 64-query tiles (one 128-byte line of dS per key), no ping-pong");

  // The atomic dQ, step 1: this thread's dSᵀ values (keys 64 group + 16 warp + g and
  // + 8, queries 8j + 2t and + 1; ds[kk][r] holds j = 2 kk + r / 2, key + 8 (r % 2))
  // into the tile, a 4-byte pair at a time: key row `key`, 16-byte unit j of it
  // swizzled as the copy engine would (j ^ key % 8). A warp's 32 stores hit 32
  // different banks.
  // Then it tells the other warpgroup, which reads this half, without waiting:
  // bar.arrive on this warpgroup's barrier for the item's parity, ds_barrier(group,
  // use). The generic-proxy stores must first be made visible to wgmma's
  // (async-proxy) reads.
  __device__ __forceinline__ static void store_ds(u32 ds_tile, const u32 (&ds)[BQ / 16][4], int use,
                                                  int group, int warp, int g, int t) {
#pragma unroll
    for (int kk = 0; kk < BQ / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int key = group * 64 + warp * 16 + g + 8 * (r % 2), j = 2 * kk + r / 2;
        const u32 at = ds_tile + key * 128 + ((j ^ (key % 8)) << 4) + 4 * t;
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(at), "r"(ds[kk][r]) : "memory");
      }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    sm90::named_barrier_arrive(ds_barrier(group, use), 256);
  }

  // Named barriers 3..6, one per (warpgroup, item parity): warpgroup `group`
  // arrives on its own after storing its half of item `use`'s dSᵀ, the other one
  // waits on it before reading (128 + 128 threads). Two parities, so a warpgroup
  // can never arrive twice on a barrier the other has not yet waited on: to reach
  // item use + 2 it must have waited for the other's item use + 1, stored after the
  // other's wait for item use. (1 and 2 are the ping-pong's turns.)
  __device__ __forceinline__ static int ds_barrier(int group, int use) {
    return 3 + 2 * (use & 1) + group;
  }

  // The atomic dQ, step 2: once every dSᵀ value it reads is in the tile, the
  // warpgroup computes its half of this query tile's dQ (64 queries x D / 2 columns):
  //   dQ[:, c0 ..] = dS (64 x 128 keys) K[:, c0 ..],  c0 = kDqCols group
  // A = dS read transposed from the dSᵀ tile (a k16 step is 16 key lines, 2048 bytes),
  // B = K MN-major (16 key rows a step) from column c0: 128-byte chunk c0 / 64 of the
  // K tile, (c0 % 64) * 2 bytes into its swizzled lines (D = 64: 64 bytes, a 16-byte
  // multiple inside the first line, so the descriptor's base offset stays 0). The
  // result goes to f32 dQ tile `use` % 2 (columns c0 ..), for producer warp 1 to add
  // into the sums (add_dq_tiles). `use` counts the tiles so far: the contents that
  // tile got two uses ago must have been read. Rows at or past `rows` (the queries
  // left in the sequence) are stored as 0: in a packed batch the copy engine adds
  // them into the next sequence's sums, and a score modifier's gradient there may
  // be anything.
  __device__ __forceinline__ static void add_dq(u32 ds_tile, u32 k_tile, u32 dq_tiles, u32 dq_full,
                                                u32 dq_empty, int use, int rows, int group,
                                                int warp, int g, int t) {
    // The other warpgroup's half: wait for its arrival (store_ds); the wait also
    // orders this warpgroup's own stores.
    sm90::named_barrier_sync(ds_barrier(1 - group, use), 256);
    const int c0 = kDqCols * group;
    const u32 b_start = k_tile + (c0 / 64) * BK * 128 + (c0 % 64) * 2;
    float dq[kDqCols / 2];
    sm90::fence_accumulators(dq);
    sm90::wgmma_fence();
    const unsigned long long a = sm90::descriptor(ds_tile, 64 * 128, 1024);
    const unsigned long long b = sm90::descriptor(b_start, BK * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk)
      WgmmaDQ::run(dq, sm90::advance(a, 16 * kk * 128), sm90::advance(b, 16 * kk * 128),
                   kk > 0 ? 1 : 0);
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::fence_accumulators(dq);
    // dq[4j + e]: query 16 warp + g + 8 (e / 2), column c0 + 8j + 2t + e % 2: in
    // the swizzled tile, chunk (c0 + 8j) / 32, 16-byte unit 2 (j % 4) + t / 2 of row
    // 16 warp + g + 8 (e / 2) (whose row % 8 is g), 8 bytes into it for odd t.
    const int buffer = use & 1;
    if (use >= kDqBuffers) sm90::barrier_wait(dq_empty + 8 * buffer, ((use >> 1) - 1) & 1);
    const u32 tile = dq_tiles + buffer * kDqBytes + (c0 / 32) * kDqChunkBytes + 8 * (t & 1);
    if (rows < 64) {  // a sequence's last tile only: one branch, not a select per value
#pragma unroll
      for (int j = 0; j < kDqCols / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (warp * 16 + g + 8 * (e / 2) >= rows) dq[4 * j + e] = 0.0f;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp * 16 + g + 8 * h;
#pragma unroll
      for (int j = 0; j < kDqCols / 8; ++j) {
        const u32 at =
            tile + (j / 4) * kDqChunkBytes + row * 128 + (((2 * (j % 4) + t / 2) ^ g) << 4);
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(at), "f"(dq[4 * j + 2 * h]),
                     "f"(dq[4 * j + 2 * h + 1])
                     : "memory");
      }
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // for the copy engine
    sm90::barrier_arrive(dq_full + 8 * buffer);
  }

  // A producer warp's walk over the block's items (head, from the block's first, x
  // tiles + tile), counted up rather than divided (the producer's registers are
  // few): the item's first query, and the LSE (and dQ sums) row of its head's query 0.
  struct ItemWalk {
    int tile_begin, tiles, tile;
    long long head_row;
    __device__ __forceinline__ int q0() const { return (tile_begin + tile) * BQ; }
    __device__ __forceinline__ void next(const AttentionArgs& f) {
      if (++tile == tiles) {  // the next head: lse_row(f, lse_start, heads after first)
        tile = 0;
        head_row += f.cu_seqlens_q != nullptr ? f.total_q : f.seq_q;
      }
    }
  };

  // Producer warp 1 of the atomic dQ (its lane 0): each query tile's f32 dQ tile,
  // as the consumers finish it, added into args.dq_accum by the copy engine
  // (cp.reduce.async.bulk.tensor .add over map_dq, f32 [planes][rows][D]: one box
  // of 64 rows x 32 floats per chunk, reduced in L2, rows past the map's end left
  // out). The tile is released once the copies have read it, one item late, so
  // that the copy engine reads one tile while the consumers fill the other. Items:
  // head (from the block's first) x tiles + tile, as the loaders count them; the
  // first item's sums are at row `row0` of plane `plane0`.
  __device__ __forceinline__ static void add_dq_tiles(const TensorMap& map_dq, u32 dq_tiles,
                                                      u32 dq_full, u32 dq_empty, int tile_begin,
                                                      int tiles, int items, int row0, int plane0) {
    int tile = 0, plane = plane0;
    for (int item = 0; item < items; ++item) {
      const int buffer = item & 1;
      sm90::barrier_wait(dq_full + 8 * buffer, (item >> 1) & 1);
      const u32 src = dq_tiles + buffer * kDqBytes;
      const int row = row0 + (tile_begin + tile) * BQ;
#pragma unroll
      for (int c = 0; c < D / 32; ++c)
        sm90::tma_reduce_add(map_dq, src + c * kDqChunkBytes, 32 * c, row, plane);
      sm90::bulk_commit();
      if (item > 0) {  // the previous item's tile is read: free for the consumers
        sm90::bulk_wait_read<1>();
        sm90::barrier_arrive(dq_empty + 8 * (buffer ^ 1));
      }
      if (++tile == tiles) {
        tile = 0;
        ++plane;
      }
    }
    sm90::bulk_wait_all<0>();  // the sums are written
  }

  // Which keys a block takes. Blocks are started in launch order (x fastest), and
  // the grid is (key blocks, K/V heads, batch). Without a causal mask every block has
  // the same work. With one (keys left of the diagonal see more queries) key block 0
  // of a head has the most, the last the least: launched head by head, the last
  // wave still holds heavy blocks of the last heads, and the SMs that drew them run
  // on alone. So a causal launch is cut into chunks of (batch, K/V head) pairs,
  // about 128 blocks a chunk, and a chunk's blocks go by key block: every pair's
  // block 0, then every pair's block 1, ... The last blocks started are light ones,
  // and a chunk's pairs share their Q and dO tiles in L2 as before. Only the atomic
  // dQ's kernel (measured there); in the others, whose registers a score modifier
  // fills, the order's few live values made ptxas spill.
  struct BlockOrder {
    int key_block, kv_head, batch;
  };
  __device__ __forceinline__ static BlockOrder block_order(const AttentionArgs& f) {
    if (!kAtomicDq || !(f.window_left < 0 && f.window_right >= 0))
      return {static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y),
              static_cast<int>(blockIdx.z)};
    const int blocks = gridDim.x, heads = gridDim.y, all_pairs = gridDim.y * gridDim.z;
    const int per_chunk = blocks >= 128 ? 1 : 128 / blocks;  // pairs a chunk
    const int linear = blockIdx.x + blocks * (blockIdx.y + heads * blockIdx.z);
    const int first_pair = linear / (blocks * per_chunk) * per_chunk;
    const int pairs = min(per_chunk, all_pairs - first_pair);  // the last chunk's fewer
    const int within = linear - first_pair * blocks;
    const int pair = first_pair + within % pairs;
    return {within / pairs, pair % heads, pair / heads};
  }

  // map_dq (the atomic dQ): args.dq_accum as f32 [planes][rows][D], rows the
  // sequence's queries (a packed batch's: all tokens), planes batch x heads (packed:
  // heads); boxes of 32 x 64, 128-byte swizzle.
  __device__ static void run(const AttentionBackwardArgs& args, const TensorMap& map_q,
                             const TensorMap& map_k, const TensorMap& map_v,
                             const TensorMap& map_do, const TensorMap* map_dq = nullptr) {
    const AttentionArgs& f = args.forward;
    extern __shared__ __align__(1024) unsigned char kjit_attention_shared[];
    const u32 base = mma::shared_address(kjit_attention_shared);
    const u32 k_tile = (base + 1023) & ~1023u;
    unsigned char* aligned = kjit_attention_shared + (k_tile - base);  // its generic address
    const u32 v_tile = k_tile + kKvBytes;
    const u32 ds_tiles = v_tile + kKvBytes;        // the atomic dQ's two dSᵀ tiles
    const u32 dq_tiles = ds_tiles + 2 * kDsBytes;  // and its two f32 dQ tiles
    const u32 stages = dq_tiles + kDqBuffers * kDqBytes;
    const u32 kv_full = stages + STAGES * kStageBytes;
    const u32 full = kv_full + 8, empty = full + 8 * STAGES;
    // The atomic dQ's, per dQ tile.
    const u32 dq_full = empty + 8 * STAGES, dq_empty = dq_full + 8 * kDqBuffers;
    auto stage_floats = [&](int s) {  // LSE·log2 e, then D, of stage s
      return reinterpret_cast<float*>(aligned + (stages - k_tile) + s * kStageBytes +
                                      2 * kTileBytes);
    };

    const BlockOrder order = block_order(f);
    const int kv_head = order.kv_head, batch = order.batch;
    const int first_head = kv_head * f.kv_group;
    const BlockSequence sequence = block_sequence(f, batch, first_head);
    const int seq_q = sequence.seq_q, seq_k = sequence.seq_k;
    const int key0 = order.key_block * BK;
    if (key0 >= seq_k) return;  // a shorter sequence of a packed batch
    const int q_token0 = static_cast<int>(sequence.q_start);
    const int k_token0 = static_cast<int>(sequence.k_start);
    const int map_batch = f.cu_seqlens_q != nullptr ? 0 : batch;

    // The query tiles that see any key of this block (attention_backward.cuh).
    const int offset = seq_k - seq_q;
    const TileRange range = query_tiles_seeing<MOD>(f, seq_q, seq_k, key0, BK, BQ, first_head);
    const int tile_begin = range.begin, tiles = range.count;
    const int items = tiles * f.kv_group;  // (query head, query tile), head-major
    auto item_head = [&](int item) { return first_head + item / tiles; };
    auto item_row0 = [&](int item) { return (tile_begin + item % tiles) * BQ; };

    if (threadIdx.x == 0) {
      sm90::barrier_init(kv_full, 1);
      for (int s = 0; s < STAGES; ++s) {
        sm90::barrier_init(full + 8 * s, 1 + kLoaders);  // TMA's arrive + the loaders'
        // Every consumer thread arrives: each reads the stage's LSE and D with its own
        // loads, and an arrive releases only the arriving thread's reads.
        sm90::barrier_init(empty + 8 * s, 256);
      }
      if (kAtomicDq) {
        for (int b = 0; b < kDqBuffers; ++b) {
          sm90::barrier_init(dq_full + 8 * b, 256);  // every consumer thread stored its share
          sm90::barrier_init(dq_empty + 8 * b, 1);   // warp 1's copies have read the tile
        }
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    const int group = sm90::warpgroup_index() - 1;  // -1: the producer
    if (group < 0) {
      asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
      if (threadIdx.x == 0) {
        // K and V of the block: per 64-key half and column chunk, one box.
        sm90::barrier_arrive_expect_bytes(kv_full, 2 * kKvBytes);
        for (int half = 0; half < 2; ++half)
          for (int c = 0; c < kChunks; ++c) {
            const u32 at = c * BK * 128 + half * 64 * 128;
            sm90::tma_load_4d(k_tile + at, map_k, kv_full, 64 * c, k_token0 + key0 + 64 * half,
                              kv_head, map_batch);
            sm90::tma_load_4d(v_tile + at, map_v, kv_full, 64 * c, k_token0 + key0 + 64 * half,
                              kv_head, map_batch);
          }
        for (int item = 0; item < items; ++item) {
          const int s = item % STAGES;
          sm90::barrier_wait(empty + 8 * s, ((item / STAGES) & 1) ^ 1);
          sm90::barrier_arrive_expect_bytes(full + 8 * s, 2 * kTileBytes);
          const u32 q_stage = stages + s * kStageBytes, do_stage = q_stage + kTileBytes;
          const int row = q_token0 + item_row0(item), head = item_head(item);
          for (int c = 0; c < kChunks; ++c) {
            sm90::tma_load_4d(q_stage + c * BQ * 128, map_q, full + 8 * s, 64 * c, row, head,
                              map_batch);
            sm90::tma_load_4d(do_stage + c * BQ * 128, map_do, full + 8 * s, 64 * c, row, head,
                              map_batch);
          }
        }
      } else if (kAtomicDq && threadIdx.x == 32) {  // warp 1
        const int plane0 = (f.cu_seqlens_q != nullptr ? 0 : batch * f.heads) + first_head;
        add_dq_tiles(*map_dq, dq_tiles, dq_full, dq_empty, tile_begin, tiles, items, q_token0,
                     plane0);
      } else if (threadIdx.x >= kLoaderFirst) {
        // LSE·log2 e and D of each tile's queries; rows past the sequence get +inf
        // and 0, so their P (and dS) is 0 whatever the copy brought.
        ItemWalk walk{tile_begin, tiles, 0, sequence.lse_start};
        for (int item = 0; item < items; ++item, walk.next(f)) {
          const int s = item % STAGES;
          sm90::barrier_wait(empty + 8 * s, ((item / STAGES) & 1) ^ 1);
          const int q0 = walk.q0();
          const long long lse0 = walk.head_row + q0;
          float* lse_log2 = stage_floats(s);
          for (int i = static_cast<int>(threadIdx.x) - kLoaderFirst; i < BQ; i += kLoaders) {
            const bool inside = q0 + i < seq_q;
            lse_log2[i] = inside ? args.lse_log2[lse0 + i] : plus_infinity();
            lse_log2[BQ + i] = inside ? args.delta[lse0 + i] : 0.0f;
          }
          sm90::barrier_arrive(full + 8 * s);
        }
      }
      return;
    }

    // ---- a consumer warpgroup: 64 keys ----
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int warp = (static_cast<int>(threadIdx.x) / 32) % 4, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int warp_key0 = key0 + group * 64 + warp * 16;  // this thread: + g and + g + 8
    const float scale_log2 = softmax_log2<MOD>(f);        // scores to log2 units
    float dv_acc[D / 2], dk_acc[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dv_acc[i] = dk_acc[i] = 0.0f;

    Turns<PINGPONG> turns{group, 3 * items, 0};  // three issue rounds per item
    sm90::barrier_wait(kv_full, 0);
    for (int item = 0; item < items; ++item) {
      const int s = item % STAGES;
      const u32 q_stage = stages + s * kStageBytes, do_stage = q_stage + kTileBytes;
      const float* lse_log2 = stage_floats(s);
      const float* delta = lse_log2 + BQ;
      const int q0 = item_row0(item);
      sm90::barrier_wait(full + 8 * s, (item / STAGES) & 1);

      // Sᵀ = K Qᵀ.
      float s_acc[BQ / 2];
      sm90::fence_accumulators(s_acc);
      turns.mine();
      sm90::wgmma_fence();
      product_k_major<WgmmaS, D, BK, BQ>(s_acc, k_tile, group * 64, q_stage);
      sm90::wgmma_commit();
      turns.yours();

      // Pᵀ: s_acc[4j + e] is key warp_key0 + g + 8 (e / 2), query q0 + 8j + 2t + e % 2.
      sm90::wgmma_wait<0>();
      sm90::fence_accumulators(s_acc);
      const bool crosses_right =
          f.window_right >= 0 && warp_key0 + 15 - q0 - offset > f.window_right;
      const bool crosses_left =
          f.window_left >= 0 && warp_key0 - (q0 + BQ - 1) - offset < -f.window_left;
      // Keys past the sequence: their dK and dV are never written, but the atomic dQ
      // sums over them (a packed batch's box brings the next sequence's keys): P = 0.
      const bool past_keys = kAtomicDq && warp_key0 + 15 >= seq_k;
      const int head = item_head(item);
      // A score modifier's mod'(scale · Sᵀ), kept as bf16 pairs in P's fragment
      // layout (half the registers of fp32; dSᵀ is rounded to 16 bits anyway).
      u32 slope_frag[MOD::kScore ? BQ / 16 : 1][4];
      // A modifier over q - kv (MOD::kRelative): q - kv of the thread's first score
      // of the item, then a constant per score (as in the forward kernels).
      auto query0_minus_key = [&] { return static_cast<float>(q0 + 2 * t - warp_key0 - g); };
      const bool crosses_edge = crosses_right || crosses_left || past_keys;
#pragma unroll
      for (int j = 0; j < BQ / 8; ++j) {
        const float2 l = *reinterpret_cast<const float2*>(lse_log2 + 8 * j + 2 * t);
        float slope[4];
        // With mod' kept per score (a score modifier whose mod' varies): which of the
        // 4 scores the built-in masks keep, a bit each, found ahead of them (one branch
        // per 4 scores) and applied as a select. (Tested per score between the
        // exponentials, it compiled to a branch per score; in the loop of their own
        // below, ptxas spilled: mod' is live across it.)
        // (visible_bits, as the dQ kernels, schedules this kernel differently: 24
        // instructions fewer at D 128, not yet measured on a GPU.)
        u32 kept = 0xfu;
        if (!MOD::kConstantGrad && crosses_edge) {
          kept = 0u;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = warp_key0 + g + 8 * (e / 2), query = q0 + 8 * j + 2 * t + (e % 2);
            kept |= (key_visible(f, seq_k, key, query + offset) ? 1u : 0u) << e;
          }
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = warp_key0 + g + 8 * (e / 2), query = q0 + 8 * j + 2 * t + (e % 2);
          float score = s_acc[4 * j + e];
          if constexpr (MOD::kScore) {
            slope[e] = MOD::score_grad(f, score * f.scale, query, key, head);
            score = modified_score<MOD>(
                f, score, query0_minus_key() + static_cast<float>(8 * j + e % 2 - 8 * (e / 2)),
                query, key, head);
          }
          float p = exp2_approx(fmaf(score, scale_log2, -(e % 2 == 0 ? l.x : l.y)));
          // A query past the sequence has LSE +inf, and mod(s) there may be +inf too
          // (s / (300 - q_idx) past 300 queries): 2^(inf - inf) is NaN, and the max
          // makes it 0 (a test of the query there made ptxas spill).
          if constexpr (MOD::kScore) p = fmaxf(p, 0.0f);
          if constexpr (!MOD::kConstantGrad) p = (kept >> e) & 1u ? p : 0.0f;
          if constexpr (MOD::kMask)  // a select, not a branch per score
            p = MOD::keep(f, query, key, head) ? p : 0.0f;
          s_acc[4 * j + e] = p;
        }
        if constexpr (MOD::kScore) {
          slope_frag[j / 2][2 * (j % 2)] = pack2<bf16>(slope[0], slope[1]);
          slope_frag[j / 2][2 * (j % 2) + 1] = pack2<bf16>(slope[2], slope[3]);
        }
      }
      // The built-in masks' edges in a loop of their own: one branch around it, a
      // select per score. (Tested in the loop above, each score's test compiled to a
      // branch of its own between the exponentials, and a 256-key --window ran this
      // kernel 6% longer than the mask modifier that spells it: H100, 2026-12-06.)
      // Without a score modifier, or with one whose mod' is a constant (ALiBi).
      if (MOD::kConstantGrad && crosses_edge) {
#pragma unroll
        for (int j = 0; j < BQ / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = warp_key0 + g + 8 * (e / 2), query = q0 + 8 * j + 2 * t + (e % 2);
            s_acc[4 * j + e] = key_visible(f, seq_k, key, query + offset) ? s_acc[4 * j + e] : 0.0f;
          }
      }
      u32 p_frag[BQ / 16][4];
      to_fragments<T, BQ>(s_acc, p_frag);

      // dPᵀ = V dOᵀ, then dV += Pᵀ dO (Pᵀ from registers; dO MN-major: a k16 step is
      // 16 query rows, 2048 bytes, column chunks BQ * 128 bytes apart): two groups.
      float dp_acc[BQ / 2];
      sm90::fence_accumulators(dp_acc);
      sm90::fence_accumulators(dv_acc);
      fence_fragments(p_frag);
      turns.mine();
      sm90::wgmma_fence();
      product_k_major<WgmmaS, D, BK, BQ>(dp_acc, v_tile, group * 64, do_stage);
      sm90::wgmma_commit();
      product_registers_mn<WgmmaKV, BQ, D>(dv_acc, p_frag, do_stage);
      sm90::wgmma_commit();
      turns.yours();

      // dSᵀ = Pᵀ ∘ (dPᵀ − D), P as rounded for dV.
      sm90::wgmma_wait<1>();  // dPᵀ (older than dV) is done; dV may still run
      sm90::fence_accumulators(dp_acc);
      fence_fragments(p_frag);
#pragma unroll
      for (int j = 0; j < BQ / 8; ++j) {
        const float2 d = *reinterpret_cast<const float2*>(delta + 8 * j + 2 * t);
        float p0, p1, p2, p3;
        unpack2<T>(p_frag[j / 2][2 * (j % 2)], p0, p1);
        unpack2<T>(p_frag[j / 2][2 * (j % 2) + 1], p2, p3);
        if constexpr (MOD::kScore) {  // the chain rule through the modifier
          float m0, m1, m2, m3;
          unpack2<bf16>(slope_frag[j / 2][2 * (j % 2)], m0, m1);
          unpack2<bf16>(slope_frag[j / 2][2 * (j % 2) + 1], m2, m3);
          // Where P is 0 so is dS, whatever mod' is there (a masked score's mod' may
          // be infinite: s / (q_idx - kv_idx) on the diagonal): mod' saturates at
          // +-3e38 (bf16's largest is 3.39e38), so 0 x mod' is 0, not 0 x inf = NaN.
          // (A select on P == 0 is exact but made the ping-pong kernels spill.)
          p0 *= fminf(fmaxf(m0, -3.0e38f), 3.0e38f);
          p1 *= fminf(fmaxf(m1, -3.0e38f), 3.0e38f);
          p2 *= fminf(fmaxf(m2, -3.0e38f), 3.0e38f);
          p3 *= fminf(fmaxf(m3, -3.0e38f), 3.0e38f);
        }
        dp_acc[4 * j + 0] = p0 * (dp_acc[4 * j + 0] - d.x);
        dp_acc[4 * j + 1] = p1 * (dp_acc[4 * j + 1] - d.y);
        dp_acc[4 * j + 2] = p2 * (dp_acc[4 * j + 2] - d.x);
        dp_acc[4 * j + 3] = p3 * (dp_acc[4 * j + 3] - d.y);
      }
      u32 ds_frag[BQ / 16][4];
      to_fragments<T, BQ>(dp_acc, ds_frag);
      const u32 ds_tile = ds_tiles + (item & 1) * kDsBytes;
      if constexpr (kAtomicDq) store_ds(ds_tile, ds_frag, item, group, warp, g, t);

      // dK += dSᵀ Q (scaled once at the end).
      sm90::fence_accumulators(dk_acc);
      fence_fragments(ds_frag);
      turns.mine();
      sm90::wgmma_fence();
      product_registers_mn<WgmmaKV, BQ, D>(dk_acc, ds_frag, q_stage);
      sm90::wgmma_commit();
      turns.yours();
      if constexpr (kAtomicDq) {
        // dK's product first: its dSᵀ fragments then free their registers for dQ's
        // accumulators (held together, ptxas spilled at 232 registers a thread).
        sm90::wgmma_wait<0>();
        sm90::fence_accumulators(dk_acc);
        fence_fragments(ds_frag);
        add_dq(ds_tile, k_tile, dq_tiles, dq_full, dq_empty, item, seq_q - q0, group, warp, g, t);
      }
      sm90::wgmma_wait<0>();
      sm90::fence_accumulators(dv_acc);
      sm90::fence_accumulators(dk_acc);
      fence_fragments(p_frag);
      fence_fragments(ds_frag);
      sm90::barrier_arrive(empty + 8 * s);  // this thread is done with the stage
    }

    // dK and dV of this thread's keys (rows past the sequence are not written; keys no
    // query sees get 0).
    const long long key_start = sequence.k_start;
    T* dv = static_cast<T*>(args.dv) + batch * args.dv_batch + key_start * args.dv_seq +
            kv_head * args.dv_head;
    T* dk = static_cast<T*>(args.dk) + batch * args.dk_batch + key_start * args.dk_seq +
            kv_head * args.dk_head;
    // Through this warp's rows of the V tile: only this warpgroup's products read them
    // (dPᵀ = V dOᵀ), and they are done.
    store_rows_through<T, D>(dv, args.dv_seq, warp_key0, seq_k, dv_acc, 1.0f, v_tile, BK * 128);
    store_rows_through<T, D>(dk, args.dk_seq, warp_key0, seq_k, dk_acc, f.scale, v_tile, BK * 128);
  }
};

// ---- dQ: 128 queries of one head per block --------------------------------------
// grid (ceil(seq_q / 128), heads, batch), 384 threads. BKT: keys per tile; WgmmaS:
// m64nBKTk16 (descriptors, accumulate flag); WgmmaQ: m64nDk16, A in registers, B
// transposed.
template <typename T, int D, int BKT, int STAGES, bool PINGPONG, typename WgmmaS, typename WgmmaQ,
          typename MOD = NoModifiers>
struct FlashBackwardQSm90 {
  static constexpr int BM = 128;  // two consumer warpgroups of 64 queries
  static constexpr int kThreads = 384;
  static constexpr int kChunks = D / 64;
  static constexpr int kRowsBytes = BM * D * 2;   // Q (or dO) of the block
  static constexpr int kTileBytes = BKT * D * 2;  // one K (or V) tile
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kBarrierBytes = 8 * (1 + 2 * STAGES);  // q_full, full and empty per stage
  static constexpr int kSharedBytes = 1024 + 2 * kRowsBytes + STAGES * kStageBytes + kBarrierBytes;
  static_assert(D == 64 || D == 128, "whole 128-byte chunks of the head dim");
  static_assert(BKT % 16 == 0 && BKT <= 256, "wgmma N");

  __device__ static void run(const AttentionBackwardArgs& args, const TensorMap& map_q,
                             const TensorMap& map_k, const TensorMap& map_v,
                             const TensorMap& map_do) {
    const AttentionArgs& f = args.forward;
    extern __shared__ __align__(1024) unsigned char kjit_attention_shared[];
    const u32 base = mma::shared_address(kjit_attention_shared);
    const u32 q_tile = (base + 1023) & ~1023u;
    const u32 do_tile = q_tile + kRowsBytes;
    const u32 stages = do_tile + kRowsBytes;
    const u32 q_full = stages + STAGES * kStageBytes;
    const u32 full = q_full + 8, empty = full + 8 * STAGES;

    const int head = blockIdx.y, batch = blockIdx.z;
    const int kv_head = head / f.kv_group;
    const bool longest_first = f.window_left < 0 && f.window_right >= 0;
    const int row0 = (longest_first ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BM;
    const BlockSequence sequence = block_sequence(f, batch, head);
    const int seq_q = sequence.seq_q, seq_k = sequence.seq_k;
    if (row0 >= seq_q) return;
    const int q_token0 = static_cast<int>(sequence.q_start) + row0;
    const int k_token0 = static_cast<int>(sequence.k_start);
    const int map_batch = f.cu_seqlens_q != nullptr ? 0 : batch;

    const int offset = seq_k - seq_q;
    const TileRange range = key_tiles_seen<MOD>(f, seq_q, seq_k, row0, BM, BKT, head);
    const int tile_begin = range.begin, tiles = range.count;

    if (threadIdx.x == 0) {
      sm90::barrier_init(q_full, 1);
      for (int s = 0; s < STAGES; ++s) {
        sm90::barrier_init(full + 8 * s, 1);
        sm90::barrier_init(empty + 8 * s, 8);
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    const int group = sm90::warpgroup_index() - 1;  // -1: the producer
    if (group < 0) {
      asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
      if (threadIdx.x == 0) {
        sm90::barrier_arrive_expect_bytes(q_full, 2 * kRowsBytes);
        for (int half = 0; half < 2; ++half)
          for (int c = 0; c < kChunks; ++c) {
            const u32 at = c * BM * 128 + half * 64 * 128;
            sm90::tma_load_4d(q_tile + at, map_q, q_full, 64 * c, q_token0 + 64 * half, head,
                              map_batch);
            sm90::tma_load_4d(do_tile + at, map_do, q_full, 64 * c, q_token0 + 64 * half, head,
                              map_batch);
          }
        for (int i = 0; i < tiles; ++i) {
          const int s = i % STAGES;
          const int key0 = (tile_begin + i) * BKT;
          sm90::barrier_wait(empty + 8 * s, ((i / STAGES) & 1) ^ 1);
          sm90::barrier_arrive_expect_bytes(full + 8 * s, kStageBytes);
          const u32 k_stage = stages + s * kStageBytes, v_stage = k_stage + kTileBytes;
          for (int c = 0; c < kChunks; ++c) {
            sm90::tma_load_4d(k_stage + c * BKT * 128, map_k, full + 8 * s, 64 * c, k_token0 + key0,
                              kv_head, map_batch);
            sm90::tma_load_4d(v_stage + c * BKT * 128, map_v, full + 8 * s, 64 * c, k_token0 + key0,
                              kv_head, map_batch);
          }
        }
      }
      return;
    }

    // ---- a consumer warpgroup: 64 queries ----
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int warp = (static_cast<int>(threadIdx.x) / 32) % 4, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int thread_row0 = row0 + group * 64 + warp * 16 + g;  // rows + 0 and + 8
    const int warp_first = row0 + group * 64 + warp * 16, warp_last = warp_first + 15;
    float lse_log2[2], delta[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = thread_row0 + 8 * h;
      const bool inside = row < seq_q;
      lse_log2[h] = inside ? args.lse_log2[sequence.lse_start + row] : plus_infinity();
      delta[h] = inside ? args.delta[sequence.lse_start + row] : 0.0f;
    }
    float dq_acc[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dq_acc[i] = 0.0f;

    Turns<PINGPONG> turns{group, 2 * tiles, 0};  // two issue rounds per key tile
    sm90::barrier_wait(q_full, 0);
    for (int i = 0; i < tiles; ++i) {
      const int s = i % STAGES;
      const u32 k_stage = stages + s * kStageBytes, v_stage = k_stage + kTileBytes;
      const int key0 = (tile_begin + i) * BKT;
      sm90::barrier_wait(full + 8 * s, (i / STAGES) & 1);

      // S = Q Kᵀ and dP = dO Vᵀ.
      float s_acc[BKT / 2], dp_acc[BKT / 2];
      sm90::fence_accumulators(s_acc);
      sm90::fence_accumulators(dp_acc);
      turns.mine();
      sm90::wgmma_fence();
      product_k_major<WgmmaS, D, BM, BKT>(s_acc, q_tile, group * 64, k_stage);
      sm90::wgmma_commit();
      product_k_major<WgmmaS, D, BM, BKT>(dp_acc, do_tile, group * 64, v_stage);
      sm90::wgmma_commit();
      turns.yours();

      // P: s_acc[4j + e] is row thread_row0 + 8 (e / 2), key key0 + 8j + 2t + e % 2.
      sm90::wgmma_wait<1>();
      sm90::fence_accumulators(s_acc);
      const bool crosses_end = key0 + BKT > seq_k;
      // A modifier over q - kv (MOD::kRelative): that of the thread's first score in
      // each row of the tile.
      auto row_minus_key0 = [&] { return static_cast<float>(thread_row0 - key0 - 2 * t); };
      const bool crosses_right =
          f.window_right >= 0 && key0 + BKT - 1 > warp_first + offset + f.window_right;
      const bool crosses_left = f.window_left >= 0 && key0 < warp_last + offset - f.window_left;
      // A score modifier: P from mod(scale · S), and P · mod'(scale · S) kept in its
      // place (dQ needs nothing else of P).
      const bool crosses = crosses_end || crosses_right || crosses_left;
#pragma unroll
      for (int j = 0; j < BKT / 8; ++j) {
        // Which of the 4 scores the built-in masks keep (one branch per 4 scores).
        const u32 kept =
            !crosses ? 0xfu : visible_bits(f, seq_k, offset, [&](int e, int& key, int& query) {
              key = key0 + 8 * j + 2 * t + (e % 2);
              query = thread_row0 + 8 * (e / 2);
            });
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          // (Positions computed where used: computed up front, they change the
          // unmodified kernel's code.)
          auto key = [&] { return key0 + 8 * j + 2 * t + (e % 2); };
          auto row = [&] { return thread_row0 + 8 * (e / 2); };
          float score = s_acc[4 * j + e], slope = 1.0f;
          if constexpr (MOD::kScore) {
            slope = MOD::score_grad(f, score * f.scale, row(), key(), head);
            score = modified_score<MOD>(
                f, score, row_minus_key0() + static_cast<float>(8 * (e / 2) - 8 * j - e % 2), row(),
                key(), head);
          }
          float p = exp2_approx(fmaf(score, softmax_log2<MOD>(f), -lse_log2[e / 2]));
          // P times mod' before the masks: a masked score's mod' may be infinite (s /
          // (q_idx - kv_idx) on the diagonal), and the selects leave 0, not 0 x inf.
          if constexpr (MOD::kScore) p *= slope;
          p = (kept >> e) & 1u ? p : 0.0f;
          if constexpr (MOD::kMask)  // a select, not a branch per score
            p = MOD::keep(f, row(), key(), head) ? p : 0.0f;
          s_acc[4 * j + e] = p;
        }
      }
      // dS = P ∘ (dP − D), then dQ += dS K (K MN-major: a k16 step is 16 keys).
      sm90::wgmma_wait<0>();
      sm90::fence_accumulators(dp_acc);
#pragma unroll
      for (int j = 0; j < BKT / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s_acc[4 * j + e] *= dp_acc[4 * j + e] - delta[e / 2];
      u32 ds_frag[BKT / 16][4];
      to_fragments<T, BKT>(s_acc, ds_frag);
      sm90::fence_accumulators(dq_acc);
      fence_fragments(ds_frag);
      turns.mine();
      sm90::wgmma_fence();
      product_registers_mn<WgmmaQ, BKT, D>(dq_acc, ds_frag, k_stage);
      sm90::wgmma_commit();
      turns.yours();
      sm90::wgmma_wait<0>();
      sm90::fence_accumulators(dq_acc);
      fence_fragments(ds_frag);
      if (lane == 0) sm90::barrier_arrive(empty + 8 * s);
    }

    T* dq = static_cast<T*>(args.dq) + batch * args.dq_batch + sequence.q_start * args.dq_seq +
            head * args.dq_head;
    // Through this warp's rows of the Q tile: only this warpgroup's products read them
    // (S = Q Kᵀ), and they are done.
    store_rows_through<T, D>(dq, args.dq_seq, warp_first, seq_q, dq_acc, f.scale, q_tile, BM * 128);
  }
};

}  // namespace attention
}  // namespace kjit
