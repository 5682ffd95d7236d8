// kjit/matmul.cuh — C = epilogue(alpha * op(A) * op(B) + beta * C0, extra operands)
// on tensor cores: mma.sync fed by ldmatrix from a multi-stage cp.async pipeline.
//
// The generated glue (compiler/lowering/matmul.cpp) defines the epilogue as a type
// with a static `apply(acc, batch, row, col, ops)` and instantiates
// TensorCoreMatmul<...>::run<Epilogue> in an extern "C" kernel. docs/matmul.md is
// the lecture; this file follows it stage by stage:
//
//   1. block -> output tile:  a BM x BN tile of C per thread block, grouped by
//      args.raster tile rows so that consecutive blocks share A and B tiles in L2
//   2. the pipeline:          STAGES shared-memory buffers of A (BM x BK) and
//      B (BK x BN); cp.async fills buffer s+STAGES-1 while the warps compute on s
//   3. the swizzle:           16-byte chunks XOR-permuted within rows, so that
//      ldmatrix's 8 row reads hit 8 different bank groups (no conflicts, no padding)
//   4. the warp tile:         WARPS_M x WARPS_N warps, each WTM x WTN of C, as
//      MT x NT mma tiles of 16 x 8; fragments double-buffered across the k16 steps
//   5. the epilogue:          the fp32 accumulators are staged through shared memory
//      (in row passes when the tile does not fit), then a rolled loop gives each
//      thread 16 bytes of consecutive outputs of one row: alpha, beta * C0 and the
//      fused function once per element, one 16-byte store where aligned
//   6. split-K:               blocks of one tile split the K range; each writes an
//      fp32 partial tile and the last to finish sums them in a fixed order
//      (finish_split)
//
// Edge tiles (M, N or K not a multiple of the tile) load with zero-filling cp.async;
// interior tiles run the same main loop with every mask compiled out (the MASKED
// template flag), so the hot loop has no predicates. The epilogue is shared by both:
// its loop checks the row and the chunk's columns at run time, once per 16 bytes.
#pragma once

#include "kjit/math.cuh"  // for epilogues: kjit::sin_f32 and friends
#include "kjit/mma.cuh"
#include "kjit/types.cuh"

namespace kjit {

// Kernel arguments, shared by every matmul kernel. Mirrored byte for byte by
// runtime/matmul.cpp (8-byte fields first, then 4-byte ones: no padding).
// All sizes, leading dimensions and strides in elements.
struct MatmulArgs {
  const void* a;       // op(A) is M x K
  const void* b;       // op(B) is K x N
  const void* c0;      // M x N, read when beta != 0 (type of C)
  void* c;             // M x N output
  float* workspace;    // split-K partials: [splits][batch][M][N] fp32
  unsigned* arrivals;  // split-K: per (batch, tile) how many splits are done; 0 between launches
  long long lda, ldb, ldc0, ldc;
  long long stride_a, stride_b, stride_c0, stride_c;  // batch strides
  int m, n, k, batch;
  int splits;           // 1: no split-K
  int k_per_split;      // a multiple of BK
  int c_pairs;          // 1: C and C0 take 2-element vector stores (the SIMT path; the
                        // tensor-core epilogue checks each 16-byte chunk's address)
  int raster;           // tile rows per group of the block order (>= 1; config raster)
  int splits_resident;  // split-K: 1 when every block is resident at once (a cooperative
                        // launch): a tile's splits wait for each other and share its sum
  int splits_cluster;   // split-K on sm_90: 1 when a tile's splits are one thread-block
                        // cluster (dims 1 x splits x 1): they sum each other's staged
                        // partials through distributed shared memory, no workspace
  int c_tma;            // sm90 persistent and ping-pong schedules: 1 when C takes bulk
                        // stores through the kernel's tensor map of C (map_c: 16-byte
                        // aligned pointer, rows and batch stride)
  int streamk_tiles;    // sm90 persistent schedule, stream-K: the last streamk_tiles
  int streamk_splits;   // tiles (past the last full wave) are split into streamk_splits
                        // K ranges, one work unit each (0 and 1: no split)
  float alpha, beta;
};

// Extra operands of the epilogue, read by the generated Epilogue type.
struct EpilogueOperands {
  const void* ptr[4];
  long long ld[4];            // full tensors: row stride
  long long batch_stride[4];  // 0: shared by every batch
};

namespace matmul {

// Consecutive blocks walk `group` tile rows down a column of tiles before moving
// right: a group of blocks in flight reads `group` A-tiles and a few B-tiles, all of
// which stay in L2 ("block rasterization"). The group is a launch argument (config
// raster, 8 by default), so the tuner tries several without compiling again.
__device__ __forceinline__ void tile_of_block(int block, int tiles_m, int tiles_n, int group,
                                              int& tile_m, int& tile_n) {
  const int blocks_per_group = group * tiles_n;
  const int first_m = block / blocks_per_group * group;
  const int group_rows = min(tiles_m - first_m, group);
  const int in_group = block % blocks_per_group;
  tile_m = first_m + in_group % group_rows;
  tile_n = in_group / group_rows;
}

// What one block computes, from its grid position (grid = (tiles_m * tiles_n,
// splits, batch)): its output tile (rasterized by tile_of_block), its split of K
// and its batch. Every engine starts here.
struct BlockWork {
  int tile_m, tile_n, split, batch, k_begin, k_end;
};
// m, n: the sizes the kernel tiles, args.m and args.n unless it computes the
// product transposed (WgmmaMatmul with SWAP: its rows walk N, its columns M).
template <int BM, int BN>
__device__ __forceinline__ BlockWork block_work(const MatmulArgs& args, int m, int n) {
  BlockWork w;
  tile_of_block(blockIdx.x, (m + BM - 1) / BM, (n + BN - 1) / BN, args.raster, w.tile_m, w.tile_n);
  w.split = blockIdx.y;
  w.batch = blockIdx.z;
  w.k_begin = w.split * args.k_per_split;
  w.k_end = min(args.k, w.k_begin + args.k_per_split);
  return w;
}
template <int BM, int BN>
__device__ __forceinline__ BlockWork block_work(const MatmulArgs& args) {
  return block_work<BM, BN>(args, args.m, args.n);
}

// ---- stores of two horizontally adjacent outputs --------------------------------
template <typename T>
struct Pair;
template <>
struct Pair<float> {
  __device__ __forceinline__ static void store(float* p, float v0, float v1) {
    struct __align__(8) F2 {
      float x, y;
    };
    F2 v;
    v.x = v0;
    v.y = v1;
    *reinterpret_cast<F2*>(p) = v;
  }
  __device__ __forceinline__ static void load(const float* p, float& v0, float& v1) {
    v0 = p[0];
    v1 = p[1];
  }
};
template <>
struct Pair<bf16> {
  __device__ __forceinline__ static u32 pack(float v0, float v1) { return pack_bf16x2(v0, v1); }
  __device__ __forceinline__ static void store(bf16* p, float v0, float v1) {
    *reinterpret_cast<u32*>(p) = pack(v0, v1);
  }
  __device__ __forceinline__ static void load(const bf16* p, float& v0, float& v1) {
    v0 = to_f32(p[0]);
    v1 = to_f32(p[1]);
  }
};
template <>
struct Pair<f16> {
  __device__ __forceinline__ static u32 pack(float v0, float v1) { return pack_f16x2(v0, v1); }
  __device__ __forceinline__ static void store(f16* p, float v0, float v1) {
    *reinterpret_cast<u32*>(p) = pack(v0, v1);
  }
  __device__ __forceinline__ static void load(const f16* p, float& v0, float& v1) {
    v0 = to_f32(p[0]);
    v1 = to_f32(p[1]);
  }
};

// alpha * acc + beta * c0 (c0 is not read when beta is 0).
__device__ __forceinline__ float scaled(float acc, float c0, const MatmulArgs& args) {
  const float v = args.alpha * acc;
  return args.beta != 0.0f ? fmaf(args.beta, c0, v) : v;
}

// The final value of one output: alpha * acc + beta * c0, then the epilogue.
template <typename TC, typename Epilogue>
__device__ __forceinline__ float finish(float acc, float c0, const MatmulArgs& args,
                                        long long batch, int row, int col,
                                        const EpilogueOperands& ops) {
  return Epilogue::apply(scaled(acc, c0, args), batch, row, col, ops);
}

// The same, with the epilogue's per-column operands already read (columns[k]: the
// value of column operand k at this output's column; see load_values).
template <typename TC, typename Epilogue>
__device__ __forceinline__ float finish(float acc, float c0, const MatmulArgs& args,
                                        long long batch, int row, int col,
                                        const float (&columns)[Epilogue::kColumnSlots],
                                        const EpilogueOperands& ops) {
  return Epilogue::apply_columns(scaled(acc, c0, args), batch, row, col, columns, ops);
}

// Writes outputs (row, col) and (row, col + 1) of batch `batch`. In split mode the
// raw accumulators go to the fp32 workspace instead; finish_split() finishes them.
// MASKED: the tile may cross M or N.
template <typename TC, typename Epilogue, bool MASKED>
__device__ __forceinline__ void store_two(const MatmulArgs& args, const EpilogueOperands& ops,
                                          long long batch, int split, int row, int col, float a0,
                                          float a1) {
  if (MASKED && row >= args.m) return;
  if (args.splits > 1) {
    float* w =
        args.workspace + ((static_cast<long long>(split) * args.batch + batch) * args.m + row) *
                             static_cast<long long>(args.n);
    if (!MASKED || col + 1 < args.n) {
      if ((args.n & 1) == 0) {
        Pair<float>::store(w + col, a0, a1);
      } else {
        w[col] = a0;
        w[col + 1] = a1;
      }
    } else if (col < args.n) {
      w[col] = a0;
    }
    return;
  }
  const TC* c0 = static_cast<const TC*>(args.c0) + batch * args.stride_c0 + row * args.ldc0;
  TC* c = static_cast<TC*>(args.c) + batch * args.stride_c + row * args.ldc;
  const bool both = !MASKED || col + 1 < args.n;
  if (both && args.c_pairs) {
    float c00 = 0.0f, c01 = 0.0f;
    if (args.beta != 0.0f) Pair<TC>::load(c0 + col, c00, c01);
    Pair<TC>::store(c + col, finish<TC, Epilogue>(a0, c00, args, batch, row, col, ops),
                    finish<TC, Epilogue>(a1, c01, args, batch, row, col + 1, ops));
    return;
  }
  if (!MASKED || col < args.n) {
    const float c00 = args.beta != 0.0f ? to_f32(c0[col]) : 0.0f;
    c[col] = from_f32<TC>(finish<TC, Epilogue>(a0, c00, args, batch, row, col, ops));
  }
  if (both) {
    const float c01 = args.beta != 0.0f ? to_f32(c0[col + 1]) : 0.0f;
    c[col + 1] = from_f32<TC>(finish<TC, Epilogue>(a1, c01, args, batch, row, col + 1, ops));
  }
}

// ---- 16 consecutive bytes of one output row (the staged epilogue) ---------------
// VEC = 16 / sizeof(T) outputs: 4 of f32, 8 of bf16 or f16. A chunk goes to global
// memory as one 16-byte access when it is whole and its address is 16-byte
// aligned, else as 2-element accesses where 2-element aligned, else element by
// element. The check is on the actual address, per chunk: a misaligned row
// (ldc = 4097) still takes the wide path on the rows that happen to be aligned.
struct __align__(16) F32x4 {
  float x, y, z, w;
};
struct __align__(16) U32x4 {
  u32 x, y, z, w;
};
template <typename T>
struct Chunk;
template <>
struct Chunk<float> {
  static constexpr int VEC = 4;
  __device__ __forceinline__ static void load16(const float* p, float (&v)[VEC]) {
    const F32x4 x = *reinterpret_cast<const F32x4*>(p);
    v[0] = x.x;
    v[1] = x.y;
    v[2] = x.z;
    v[3] = x.w;
  }
  __device__ __forceinline__ static void store16(float* p, const float (&v)[VEC]) {
    *reinterpret_cast<F32x4*>(p) = F32x4{v[0], v[1], v[2], v[3]};
  }
};
template <typename T16>  // bf16 or f16
struct Chunk16Bit {
  static constexpr int VEC = 8;
  __device__ __forceinline__ static void load16(const T16* p, float (&v)[VEC]) {
    const U32x4 x = *reinterpret_cast<const U32x4*>(p);
    const u32 words[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      T16 lo, hi;
      lo.bits = static_cast<u16>(words[i] & 0xffffu);
      hi.bits = static_cast<u16>(words[i] >> 16);
      v[2 * i] = to_f32(lo);
      v[2 * i + 1] = to_f32(hi);
    }
  }
  __device__ __forceinline__ static void store16(T16* p, const float (&v)[VEC]) {
    u32 words[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) words[i] = pack2(v[2 * i], v[2 * i + 1]);
    *reinterpret_cast<U32x4*>(p) = U32x4{words[0], words[1], words[2], words[3]};
  }
  __device__ __forceinline__ static u32 pack2(float a, float b);
};
template <>
__device__ __forceinline__ u32 Chunk16Bit<bf16>::pack2(float a, float b) {
  return pack_bf16x2(a, b);
}
template <>
__device__ __forceinline__ u32 Chunk16Bit<f16>::pack2(float a, float b) {
  return pack_f16x2(a, b);
}
template <>
struct Chunk<bf16> : Chunk16Bit<bf16> {};
template <>
struct Chunk<f16> : Chunk16Bit<f16> {};

__device__ __forceinline__ bool aligned_to(const void* p, unsigned bytes) {
  return (reinterpret_cast<unsigned long long>(p) & (bytes - 1)) == 0;
}

// Reads VEC elements at p into v: one 16-byte load, VEC / 2 pair loads or VEC
// scalar loads, whichever p's alignment allows.
template <typename T>
__device__ __forceinline__ void load_chunk(const T* p, float (&v)[Chunk<T>::VEC]) {
  constexpr int VEC = Chunk<T>::VEC;
  if (aligned_to(p, 16)) {
    Chunk<T>::load16(p, v);
  } else if (aligned_to(p, 2 * sizeof(T))) {
#pragma unroll
    for (int j = 0; j < VEC; j += 2) Pair<T>::load(p + j, v[j], v[j + 1]);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = to_f32(p[j]);
  }
}

// Writes v, rounded to T, to VEC elements at p (as wide as p's alignment allows).
template <typename T>
__device__ __forceinline__ void store_chunk(T* p, const float (&v)[Chunk<T>::VEC]) {
  constexpr int VEC = Chunk<T>::VEC;
  if (aligned_to(p, 16)) {
    Chunk<T>::store16(p, v);
  } else if (aligned_to(p, 2 * sizeof(T))) {
#pragma unroll
    for (int j = 0; j < VEC; j += 2) Pair<T>::store(p + j, v[j], v[j + 1]);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) p[j] = from_f32<T>(v[j]);
  }
}

// Writes v, rounded to T, to 4 consecutive elements at p: one store of 4 x
// sizeof(T) bytes when p is aligned for it, else pairs, else single elements.
template <typename T>
__device__ __forceinline__ void store_four(T* p, const float (&v)[4]) {
  if constexpr (sizeof(T) == 4) {
    if (aligned_to(p, 16)) {
      Chunk<T>::store16(p, v);
      return;
    }
  } else {
    if (aligned_to(p, 8)) {
      struct __align__(8) U32x2 {
        u32 x, y;
      };
      *reinterpret_cast<U32x2*>(p) =
          U32x2{Chunk<T>::pack2(v[0], v[1]), Chunk<T>::pack2(v[2], v[3])};
      return;
    }
  }
  if (aligned_to(p, 2 * sizeof(T))) {
    Pair<T>::store(p, v[0], v[1]);
    Pair<T>::store(p + 2, v[2], v[3]);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) p[j] = from_f32<T>(v[j]);
  }
}

// VEC consecutive elements of an epilogue operand at p as floats, the first `valid`
// of them (the rest 0): 16-byte loads when all VEC are valid and p is aligned for
// them, else pairs, else single elements. An operand of another width than the
// output (a bf16 bias of an f32 output) takes VEC * sizeof(T) bytes.
template <typename T, int VEC>
__device__ __forceinline__ void load_values(const T* p, int valid, float (&v)[VEC]) {
  constexpr int PER16 = 16 / static_cast<int>(sizeof(T));  // elements per 16 bytes
  if (valid == VEC && VEC % PER16 == 0 && aligned_to(p, 16)) {
#pragma unroll
    for (int q = 0; q < VEC; q += PER16) {
      float part[PER16];
      Chunk<T>::load16(p + q, part);
#pragma unroll
      for (int j = 0; j < PER16; ++j) v[q + j] = part[j];
    }
  } else if (valid == VEC && aligned_to(p, 2 * sizeof(T))) {
#pragma unroll
    for (int j = 0; j < VEC; j += 2) Pair<T>::load(p + j, v[j], v[j + 1]);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = j < valid ? to_f32(p[j]) : 0.0f;
  }
}

// Finishes and writes one chunk: outputs (row, col .. col + VEC - 1) of batch
// `batch`, of which the first `valid` (1..VEC) lie inside N; acc holds their fp32
// accumulators. Split mode writes the raw accumulators to the fp32 workspace
// instead (finish_split() finishes them). A whole chunk runs the epilogue on all
// VEC outputs at once (its operand addresses are one base plus constants); the
// last chunk of a row that crosses N goes element by element in a rolled loop
// (one more copy of the epilogue in the code, not VEC). `columns` holds the
// epilogue's per-column operands at these VEC columns (Epilogue::load_columns),
// read by the caller: a thread that writes the same columns of many rows reads
// them once.
template <typename TC, typename Epilogue>
__device__ __forceinline__ void write_chunk(
    const MatmulArgs& args, const EpilogueOperands& ops, long long batch, int split, int row,
    int col, int valid, float (&acc)[Chunk<TC>::VEC],
    const float (&columns)[Epilogue::kColumnSlots][Chunk<TC>::VEC]) {
  constexpr int VEC = Chunk<TC>::VEC;
  constexpr int SLOTS = Epilogue::kColumnSlots;
  if (args.splits > 1) {
    float* w = args.workspace +
               ((static_cast<long long>(split) * args.batch + batch) * args.m + row) *
                   static_cast<long long>(args.n) +
               col;
    if (valid == VEC && aligned_to(w, 16)) {
#pragma unroll
      for (int q = 0; q < VEC; q += 4)
        *reinterpret_cast<F32x4*>(w + q) = F32x4{acc[q], acc[q + 1], acc[q + 2], acc[q + 3]};
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        if (j < valid) w[j] = acc[j];
    }
    return;
  }
  const TC* c0 = static_cast<const TC*>(args.c0) + batch * args.stride_c0 + row * args.ldc0 + col;
  TC* c = static_cast<TC*>(args.c) + batch * args.stride_c + row * args.ldc + col;
  if (valid == VEC) {
    float c0v[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) c0v[j] = 0.0f;
    if (args.beta != 0.0f) load_chunk(c0, c0v);
    float out[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      float at_j[SLOTS];
#pragma unroll
      for (int k = 0; k < SLOTS; ++k) at_j[k] = columns[k][j];
      out[j] = finish<TC, Epilogue>(acc[j], c0v[j], args, batch, row, col + j, at_j, ops);
    }
    store_chunk(c, out);
    return;
  }
  // A copy to shift: the caller's columns serve its next rows too.
  float rest[SLOTS][VEC];
#pragma unroll
  for (int k = 0; k < SLOTS; ++k)
#pragma unroll
    for (int j = 0; j < VEC; ++j) rest[k][j] = columns[k][j];
#pragma unroll 1
  for (int j = 0; j < valid; ++j) {
    const float c0j = args.beta != 0.0f ? to_f32(c0[j]) : 0.0f;
    float at_j[SLOTS];
#pragma unroll
    for (int k = 0; k < SLOTS; ++k) at_j[k] = rest[k][0];
    c[j] = from_f32<TC>(finish<TC, Epilogue>(acc[0], c0j, args, batch, row, col + j, at_j, ops));
    // Next output to the front (constant indices only: the arrays stay in registers).
#pragma unroll
    for (int q = 0; q + 1 < VEC; ++q) {
      acc[q] = acc[q + 1];
#pragma unroll
      for (int k = 0; k < SLOTS; ++k) rest[k][q] = rest[k][q + 1];
    }
  }
}

// The same, reading the per-column operands of this chunk first (one wide load
// each instead of one load per output).
template <typename TC, typename Epilogue>
__device__ __forceinline__ void write_chunk(const MatmulArgs& args, const EpilogueOperands& ops,
                                            long long batch, int split, int row, int col, int valid,
                                            float (&acc)[Chunk<TC>::VEC]) {
  float columns[Epilogue::kColumnSlots][Chunk<TC>::VEC];
  if (args.splits == 1)
    Epilogue::template load_columns<Chunk<TC>::VEC>(columns, batch, col, valid, ops);
  write_chunk<TC, Epilogue>(args, ops, batch, split, row, col, valid, acc, columns);
}

// ---- split-K: a quad of summed partials becomes 4 outputs ---------------------------
// acc: the K sums of outputs (row, col .. col + 3), of which `valid` lie inside N;
// alpha, beta * C0 and the epilogue, then one 8- or 16-byte store where the row allows.
// Shared by both ways of finishing a split tile (finish_split below, and the sm_90
// cluster's WgmmaMatmul::finish_split_in_cluster).
template <typename TC, typename Epilogue>
__device__ __forceinline__ void finish_quad(const MatmulArgs& args, const EpilogueOperands& ops,
                                            long long batch, int row, int col, int valid,
                                            float (&acc)[4]) {
  const TC* c0 = static_cast<const TC*>(args.c0) + batch * args.stride_c0;
  TC* c = static_cast<TC*>(args.c) + batch * args.stride_c;
  // The epilogue once in the code, in a rolled loop: each pass finishes acc[0] and
  // shifts the quad's values one place (constant indices: registers only).
  float out[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 1
  for (int q = 0; q < 4; ++q) {
    const float c0q = args.beta != 0.0f && q < valid ? to_f32(c0[row * args.ldc0 + col + q]) : 0.0f;
    const float value =
        q < valid ? finish<TC, Epilogue>(acc[0], c0q, args, batch, row, col + q, ops) : 0.0f;
#pragma unroll
    for (int r = 0; r < 3; ++r) {
      out[r] = out[r + 1];
      acc[r] = acc[r + 1];
    }
    out[3] = value;
  }
  if (valid == 4) {
    store_four(c + row * args.ldc + col, out);
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q)
      if (q < valid) c[row * args.ldc + col + q] = from_f32<TC>(out[q]);
  }
}

// Spins until *counter reaches `count`, reading it with acquire semantics at GPU
// scope: what the blocks that counted themselves wrote before counting is visible
// to this thread afterwards (and, past a barrier, to its block).
__device__ __forceinline__ void wait_for_count(const unsigned* counter, unsigned count) {
  unsigned arrived;
  do {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(arrived) : "l"(counter) : "memory");
  } while (arrived < count);
}

// ---- split-K: the tile's splits finish it ---------------------------------------------
// Stage 6. Every split of a tile has written its fp32 partial to the workspace;
// now each block counts itself in the tile's arrival counter. The partials are
// summed in split order 0, 1, ..., S - 1, so the bits do not depend on which split
// finished first (deterministic); then the epilogue runs and C is written. One
// kernel: no second launch, and the partials are read back while they are still
// in L2. Called by every thread of the block. Two ways, chosen by the runtime:
//
//   - the last split sums the tile (any grid): the block that arrives last (every
//     other split is done) sums the whole tile and sets the counter back to 0 for
//     the next launch. The others leave at once.
//   - the splits share the sum (splits_resident: a cooperative launch, every block
//     resident at once, so waiting cannot deadlock): each block waits until all S
//     have arrived, then sums 1/S of the tile. The tail after the main loops is S
//     times shorter: one SM reading S partial tiles from L2 was the cost of the
//     first way (H200, 4096 x 128 x 16384, 4 splits of 128 x 128 tiles, 5 stages:
//     0.0603 ms with the last split summing, 0.0551 shared).
//     The counter counts arrivals and then departures (2S in all); the last to
//     leave resets it, when no block can still be waiting.
//
// Memory order (the "last block" pattern of the CUDA programming guide): every
// thread's partial stores are made visible GPU-wide (__threadfence) and the whole
// block has passed a barrier before thread 0 counts the block; the partials are
// read past L1 (ld.global.cg), which is not coherent with other SMs' writes.
//
// Each thread sums 4 consecutive columns at a time (16-byte loads where N allows)
// and issues the loads of SPLIT_LOADS splits before it adds any of them. (H200,
// 4096 x 128 x 16384, 128 x 128 tiles, 5 stages, 4 splits: the last split summing,
// one group a thread 0.0615 ms, four 0.0603; the splits sharing the sum, four
// 0.0551, one 0.0552.)

template <typename TC, typename Epilogue, int BM, int BN>
__device__ __forceinline__ void finish_split(const MatmulArgs& args, const EpilogueOperands& ops,
                                             const BlockWork& w) {
  // One group of 4 columns a thread at a time. Four at once (16 loads in flight)
  // spilled in 640-thread blocks (96 registers a thread) and made every kernel ~570
  // SASS instructions longer (4587 against 4015 for 64 x 64 tiles); with the splits
  // sharing the sum, they were no faster.
  constexpr int SPLIT_LOADS = 4;
  const int tiles_n = (args.n + BN - 1) / BN;
  const long long tiles = static_cast<long long>((args.m + BM - 1) / BM) * tiles_n;
  const unsigned splits = static_cast<unsigned>(args.splits);
  unsigned* counter =
      args.arrivals + w.batch * tiles + static_cast<long long>(w.tile_m) * tiles_n + w.tile_n;
  const int rows = min(BM, args.m - w.tile_m * BM), cols = min(BN, args.n - w.tile_n * BN);
  const int quads = (cols + 3) / 4;  // groups of 4 columns (quads) per row
  const int total = rows * quads;
  int begin = 0, end = total;  // the quads this block sums
  __threadfence();
  __syncthreads();
  if (args.splits_resident) {
    if (threadIdx.x == 0) {
      atomicAdd(counter, 1u);
      wait_for_count(counter, splits);
      if (atomicAdd(counter, 1u) == 2 * splits - 1) *counter = 0;  // the last to leave
    }
    __syncthreads();
    begin = static_cast<int>(static_cast<long long>(total) * w.split / args.splits);
    end = static_cast<int>(static_cast<long long>(total) * (w.split + 1) / args.splits);
  } else {
    int last = 0;
    if (threadIdx.x == 0) {
      last = atomicAdd(counter, 1u) == splits - 1;
      if (last) *counter = 0;  // every split has counted itself: ready for the next launch
    }
    if (!__syncthreads_or(last)) return;  // a barrier that also tells every thread
  }
  __threadfence();
  const long long per_split = static_cast<long long>(args.batch) * args.m * args.n;
  // 16-byte loads when every row of the workspace starts 16-byte aligned.
  const bool wide = args.n % 4 == 0;
  // Consecutive threads take consecutive quads (4 columns of a row): coalesced
  // reads of the partials and writes of C.
#pragma unroll 1
  for (int i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const int row = w.tile_m * BM + i / quads, col = w.tile_n * BN + 4 * (i % quads);
    const int valid = min(4, args.n - col);  // columns inside N
    const float* partial =
        args.workspace +
        (static_cast<long long>(w.batch) * args.m + row) * static_cast<long long>(args.n) + col;
    // In split order: acc = ((0 + P0) + P1) + ..., whatever the loads' timing.
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (wide) {
      // Every quad is whole (N % 4 == 0): 16-byte loads, SPLIT_LOADS splits at once.
#pragma unroll 1
      for (int s0 = 0; s0 < args.splits; s0 += SPLIT_LOADS) {
        float4 v[SPLIT_LOADS];
#pragma unroll
        for (int j = 0; j < SPLIT_LOADS; ++j)
          v[j] = s0 + j < args.splits
                     ? __ldcg(reinterpret_cast<const float4*>(partial + (s0 + j) * per_split))
                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int j = 0; j < SPLIT_LOADS; ++j)
          if (s0 + j < args.splits) {
            acc[0] += v[j].x;
            acc[1] += v[j].y;
            acc[2] += v[j].z;
            acc[3] += v[j].w;
          }
      }
    } else {
      // Rows of the workspace not 16-byte aligned (N % 4 != 0, rare for split-K):
      // element by element, one split at a time (less code, fewer loads in flight).
#pragma unroll 1
      for (int split = 0; split < args.splits; ++split) {
        float v[4];
#pragma unroll
        for (int q = 0; q < 4; ++q)
          v[q] = q < valid ? __ldcg(partial + split * per_split + q) : 0.0f;
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[q] += v[q];
      }
    }
    finish_quad<TC, Epilogue>(args, ops, w.batch, row, col, valid, acc);
  }
}

// VEC staged floats (16-byte aligned) -> v. A quarter-warp reads 8 consecutive
// chunks of one row with each 16-byte load; for VEC = 8 (32 bytes per chunk) the
// chunks 4..7 of each 8 read their second half first, so that the 8 lanes of a
// load cover 8 different 4-bank groups (no conflicts).
template <int VEC>
__device__ __forceinline__ void read_staged(const float* p, int chunk, float (&v)[VEC]) {
  if constexpr (VEC == 4) {
    Chunk<float>::load16(p, v);
  } else {
    static_assert(VEC == 8, "16-byte chunks hold 4 or 8 outputs");
    const int first = (chunk / 4) % 2;  // the half read first
    float x[4], y[4];
    Chunk<float>::load16(p + 4 * first, x);
    Chunk<float>::load16(p + 4 * (1 - first), y);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[j] = first ? y[j] : x[j];
      v[4 + j] = first ? x[j] : y[j];
    }
  }
}

// ---- one operand's shared-memory tile -------------------------------------------
// K_MAJOR: stored [ROWS][BK] (K contiguous: A row-major, B "t"), 16-byte chunks
//   XOR-swizzled by row: chunk' = chunk ^ ((row / (8 / CPR)) % CPR), CPR = BK / 8.
//   8 consecutive rows then cover all 8 bank groups of 128 bytes.
// MN-major: stored [BK][ROWS] (M or N contiguous: A "t", B row-major),
//   chunk' = chunk ^ (k % 8); needs ROWS >= 64 (8 chunks per row).
// ROWS is BM for A and BN for B.
template <int ROWS, int BK, bool K_MAJOR, int THREADS>
struct OperandTile {
  static constexpr int ELEMS = ROWS * BK;  // 16-bit elements per stage
  static constexpr int BYTES = ELEMS * 2;
  static constexpr int CHUNKS = ELEMS / 8;  // 16-byte chunks per stage
  static constexpr int CHUNKS_PER_ROW = K_MAJOR ? BK / 8 : ROWS / 8;
  static constexpr int LOADS = CHUNKS / THREADS;  // cp.async per thread per stage
  static_assert(CHUNKS % THREADS == 0,
                "tile chunks (ROWS*BK/8) must be a multiple of the block's threads");
  static_assert(!K_MAJOR || (BK == 32 || BK == 64),
                "K-major tiles swizzle 4 or 8 chunks per row: BK must be 32 or 64");
  static_assert(K_MAJOR || ROWS % 64 == 0,
                "M/N-major tiles swizzle 8 chunks: BM and BN must be multiples of 64");

  // Byte offset of 16-byte chunk `chunk` of stored row `row` within a stage.
  __device__ __forceinline__ static int offset(int row, int chunk) {
    if (K_MAJOR) {
      constexpr int ROWS_PER_LINE = 8 / CHUNKS_PER_ROW;  // rows sharing 128 bytes
      return row * (BK * 2) + ((chunk ^ ((row / ROWS_PER_LINE) % CHUNKS_PER_ROW)) * 16);
    }
    return row * (ROWS * 2) + ((chunk ^ (row % 8)) * 16);
  }
};

// Per-thread state of the global -> shared copies of one operand. Thread `tid`
// copies chunk (row r0 + i * ROW_STEP, column chunk c) for i < LOADS: one global
// pointer and one stride, so few registers stay live across the main loop.
template <typename T, typename Tile, bool K_MAJOR, int BK, int ROWS, int THREADS>
struct OperandLoader {
  static constexpr int ROW_STEP = THREADS / Tile::CHUNKS_PER_ROW;  // stored rows per i
  static_assert(THREADS % Tile::CHUNKS_PER_ROW == 0,
                "the block's threads must cover whole stored rows of a tile");
  const T* base;         // the operand (this batch), for masked-out chunks
  const T* src;          // chunk i = 0 of the next k-tile
  long long row_stride;  // elements between chunk i and i + 1
  long long tile_step;   // elements to advance per k-tile
  int dst[Tile::LOADS];  // byte offset in a stage
  int row0;              // K_MAJOR: M/N index of chunk 0; else its k offset in the tile
  int col0;              // K_MAJOR: k offset in the tile; else M/N index of the chunk

  __device__ __forceinline__ void init(const T* operand, long long ld, int first, int k_begin) {
    const int r = static_cast<int>(threadIdx.x) / Tile::CHUNKS_PER_ROW;
    const int c = static_cast<int>(threadIdx.x) % Tile::CHUNKS_PER_ROW;
    base = operand;
    row_stride = ROW_STEP * ld;
    tile_step = K_MAJOR ? BK : BK * ld;
#pragma unroll
    for (int i = 0; i < Tile::LOADS; ++i) dst[i] = Tile::offset(r + i * ROW_STEP, c);
    if (K_MAJOR) {
      row0 = first + r;
      col0 = c * 8;
      src = operand + static_cast<long long>(first + r) * ld + k_begin + c * 8;
    } else {
      row0 = r;
      col0 = first + c * 8;
      src = operand + static_cast<long long>(k_begin + r) * ld + first + c * 8;
    }
  }

  // Elements of chunk i (of the k-tile starting at k0) inside the operand: 0 to 8.
  __device__ __forceinline__ int valid_elements(int i, int k0, int k_end, int rows_total) const {
    if (K_MAJOR) return row0 + i * ROW_STEP < rows_total ? min(max(k_end - (k0 + col0), 0), 8) : 0;
    return k0 + row0 + i * ROW_STEP < k_end ? min(max(rows_total - col0, 0), 8) : 0;
  }

  // The main loop's interface (shared with NarrowLoader): issue() starts this
  // thread's copies of the k-tile starting at k0 into `stage` and advances to the
  // next k-tile; finish() completes them (nothing to do for cp.async: the
  // cp.async.wait_group and the barrier do it). MASKED: rows past rows_total and k
  // past k_end are zero-filled (partial chunks copy only their valid bytes).
  template <bool MASKED>
  __device__ __forceinline__ void issue(u32 stage, int k0, int k_end, int rows_total) {
#pragma unroll
    for (int i = 0; i < Tile::LOADS; ++i) {
      const T* chunk = src + i * row_stride;
      if (!MASKED) {
        mma::cp_async_16(stage + dst[i], chunk);
      } else {
        const int valid = valid_elements(i, k0, k_end, rows_total);
        mma::cp_async_16_zfill(stage + dst[i], valid > 0 ? chunk : base, valid * 2);
      }
    }
    src += tile_step;
  }
  __device__ __forceinline__ void finish() {}
};

// The narrow-load alternative to padding, for operands whose rows are not 16-byte
// aligned (an odd leading dimension of 16-bit values: every other row starts on a
// 2-byte boundary). cp.async copies only 4, 8 or 16 aligned bytes, so these chunks
// go through registers: issue() reads the same chunks as OperandLoader with the
// widest loads each chunk's address allows (one 16-byte, four 4-byte or eight
// 2-byte loads) and holds them; finish() stores them to shared memory. The main
// loop calls finish() one k-tile later (with 3 or more stages), so a k-tile of
// tensor-core work hides the loads' latency. MASKED: elements past the matrix or
// past K read as zero.
//
// Measured on the H200 (docs/matmul.md): at best 62-88 TFLOP/s on 4095^3, 4097^3 and
// 2048x50257x768, 3-8.4x slower than padding + wgmma at every size tried. The loads
// and packing cost more issue slots per k-tile than the tensor-core work they feed
// (one coalesced word per lane plus a shuffle to realign measured no better), and
// the wgmma engine needs aligned rows anyway. So padding is the default; this is a
// config (load=narrow) for a tuner to try.
template <typename T, typename Tile, bool K_MAJOR, int BK, int ROWS, int THREADS>
struct NarrowLoader : OperandLoader<T, Tile, K_MAJOR, BK, ROWS, THREADS> {
  U32x4 held[Tile::LOADS];  // the chunks of the k-tile in flight
  u32 target;               // the stage they go to

  template <bool MASKED>
  __device__ __forceinline__ void issue(u32 stage, int k0, int k_end, int rows_total) {
    target = stage;
#pragma unroll
    for (int i = 0; i < Tile::LOADS; ++i) {
      const int valid = MASKED ? this->valid_elements(i, k0, k_end, rows_total) : 8;
      held[i] = read_chunk(this->src + i * this->row_stride, valid);
    }
    this->src += this->tile_step;
  }

  __device__ __forceinline__ void finish() {
#pragma unroll
    for (int i = 0; i < Tile::LOADS; ++i)
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(target + this->dst[i]),
                   "r"(held[i].x), "r"(held[i].y), "r"(held[i].z), "r"(held[i].w)
                   : "memory");
  }

  // 8 elements at p, the first `valid` of them (the rest zero), packed in pairs.
  __device__ __forceinline__ static U32x4 read_chunk(const T* p, int valid) {
    if (valid == 8) {
      if (aligned_to(p, 16)) return *reinterpret_cast<const U32x4*>(p);
      if (aligned_to(p, 4)) {
        const u32* w = reinterpret_cast<const u32*>(p);
        return U32x4{w[0], w[1], w[2], w[3]};
      }
    }
    const u16* h = reinterpret_cast<const u16*>(p);
    u32 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const u32 lo = 2 * j < valid ? h[2 * j] : 0u;
      const u32 hi = 2 * j + 1 < valid ? h[2 * j + 1] : 0u;
      v[j] = lo | (hi << 16);
    }
    return U32x4{v[0], v[1], v[2], v[3]};
  }
};

// Per-lane ldmatrix addresses of one operand. A lane addresses row r8 + 8 * row_sel
// of a 16-row group and k chunk k_sel of a k16 step (A: row_sel = quad % 2,
// k_sel = quad / 2; B: the other way round; quad = lane / 8 picks the 8x8 matrix).
// The swizzle term is the same for every 16-row group, so it is computed once.
template <typename Tile, bool K_MAJOR, int ROWS, int BK>
struct FragmentAddress {
  static constexpr int ROW_BYTES = K_MAJOR ? BK * 2 : ROWS * 2;
  u32 lane_offset;
  int chunk0;  // K_MAJOR: k chunk within a k16 step; else M/N chunk of group 0
  int swizzle;

  __device__ __forceinline__ void init(int warp_row0, int lane, int row_sel, int k_sel) {
    const int r8 = lane % 8;
    if (K_MAJOR) {
      constexpr int ROWS_PER_LINE = 8 / Tile::CHUNKS_PER_ROW;
      lane_offset = static_cast<u32>((warp_row0 + r8 + row_sel * 8) * ROW_BYTES);
      swizzle = ((r8 + row_sel * 8) / ROWS_PER_LINE) % Tile::CHUNKS_PER_ROW;
      chunk0 = k_sel;
    } else {
      lane_offset = static_cast<u32>((r8 + k_sel * 8) * ROW_BYTES);
      swizzle = r8;
      chunk0 = warp_row0 / 8 + row_sel;
    }
  }
  // Byte offset in a stage for 16-row group `group` of the warp tile, k16 step kk.
  __device__ __forceinline__ u32 at(int group, int kk) const {
    if (K_MAJOR) return lane_offset + group * 16 * ROW_BYTES + (((kk * 2 + chunk0) ^ swizzle) << 4);
    return lane_offset + kk * 16 * ROW_BYTES + (((chunk0 + group * 2) ^ swizzle) << 4);
  }
};

// ---- the tensor-core tile kernel ------------------------------------------------
// T: bf16 or f16 inputs; TC: output (and C0) type: float, bf16 or f16.
// A_K_MAJOR: A stored M x K row-major (layout "n"), else K x M ("t").
// B_K_MAJOR: B stored N x K (layout "t"), else K x N row-major ("n").
// EPILOGUE_PASSES: the fp32 tile is staged through shared memory in this many row
//   passes (chosen by the generator, epilogue_passes() in compiler/lowering/matmul.h,
//   so that one pass fits the pipeline's buffers).
template <typename T, typename TC, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES,
          bool A_K_MAJOR, bool B_K_MAJOR, int EPILOGUE_PASSES, bool NARROW = false>
struct TensorCoreMatmul {
  static constexpr int THREADS = WARPS_M * WARPS_N * 32;
  static constexpr int WTM = BM / WARPS_M;  // warp tile rows
  static constexpr int WTN = BN / WARPS_N;  // warp tile columns
  static constexpr int MT = WTM / 16;       // mma tiles per warp along M
  static constexpr int NT = WTN / 8;        // mma tiles per warp along N
  static constexpr int KSTEPS = BK / 16;    // k16 steps per k-tile

  typedef OperandTile<BM, BK, A_K_MAJOR, THREADS> TileA;
  typedef OperandTile<BN, BK, B_K_MAJOR, THREADS> TileB;
  static constexpr int STAGE_BYTES = TileA::BYTES + TileB::BYTES;
  // NARROW: operands of any alignment through registers (NarrowLoader), instead of
  // cp.async from 16-byte-aligned (or padded) rows.
  typedef typename Select<NARROW, NarrowLoader<T, TileA, A_K_MAJOR, BK, BM, THREADS>,
                          OperandLoader<T, TileA, A_K_MAJOR, BK, BM, THREADS>>::type LoaderA;
  typedef typename Select<NARROW, NarrowLoader<T, TileB, B_K_MAJOR, BK, BN, THREADS>,
                          OperandLoader<T, TileB, B_K_MAJOR, BK, BN, THREADS>>::type LoaderB;
  // Narrow loads land in shared memory one k-tile after they are issued, which the
  // pipeline allows when a refilled stage is read STAGES - 1 >= 2 k-tiles later.
  static constexpr bool DEFER_FINISH = STAGES >= 3;

  // Stage 5's staging buffer: one pass holds MT_PER_PASS mma rows of every warp,
  // BM / EPILOGUE_PASSES rows of C, as fp32 rows of BN + 8 floats. The 8 floats of
  // padding shift each row by 8 banks, so the 8 rows of one fragment store (lanes
  // g = 0..7, 2 floats at column 2t) cover all 32 banks in each half-warp.
  static constexpr int MT_PER_PASS = MT / EPILOGUE_PASSES;
  static constexpr int PASS_ROWS = BM / EPILOGUE_PASSES;
  static constexpr int STAGED_STRIDE = BN + 8;  // floats per staged row
  static constexpr int STAGED_BYTES = PASS_ROWS * STAGED_STRIDE * 4;
  static constexpr int VEC = Chunk<TC>::VEC;  // outputs per 16 bytes of C
  static constexpr int CHUNKS_PER_ROW = BN / VEC;
  static_assert(MT % EPILOGUE_PASSES == 0, "the epilogue passes split each warp's mma rows evenly");
  // Dynamic shared memory: the pipeline's buffers, reused by the epilogue (the
  // host's shared_bytes() computes the same).
  static constexpr int SHARED_BYTES =
      STAGES * STAGE_BYTES > STAGED_BYTES ? STAGES* STAGE_BYTES : STAGED_BYTES;

  static_assert(BM % (WARPS_M * 16) == 0, "BM must be a multiple of 16 * WARPS_M");
  static_assert(BN % (WARPS_N * 16) == 0, "BN must be a multiple of 16 * WARPS_N");
  static_assert(BK == 32 || BK == 64,
                "BK must be 32 or 64: the pipeline waits for the next k-tile at the last k16 "
                "step, after the first step's refill, and the fragments alternate between two "
                "register buffers (an even number of k16 steps)");
  static_assert(STAGES >= 2, "the cp.async pipeline needs at least 2 stages");
  static_assert(THREADS <= 1024, "at most 1024 threads per block");

  typedef FragmentAddress<TileA, A_K_MAJOR, BM, BK> AddressA;
  typedef FragmentAddress<TileB, B_K_MAJOR, BN, BK> AddressB;

  // Stage 4: the warp's fragments for k16 step `kk` of the stage at `stage`.
  // A: matrices (m 0-7, k 0-7) (m 8-15, k 0-7) (m 0-7, k 8-15) (m 8-15, k 8-15) = a0..a3;
  //    stored [k][m] ("t"), the same tiles are transposed on the way out (.trans).
  // B: matrices (n 0-7, k 0-7) (n 0-7, k 8-15) (n 8-15, k 0-7) (n 8-15, k 8-15)
  //    = b0, b1 of n8 tile 2np and b0, b1 of tile 2np+1; stored [k][n] ("n"): .trans.
  __device__ __forceinline__ static void load_fragments(u32 stage, int kk, const AddressA& addr_a,
                                                        const AddressB& addr_b, u32 (&a)[MT][4],
                                                        u32 (&b)[NT][2]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if (A_K_MAJOR)
        mma::ldmatrix_x4(a[mt], stage + addr_a.at(mt, kk));
      else
        mma::ldmatrix_x4_trans(a[mt], stage + addr_a.at(mt, kk));
    }
    const u32 b_stage = stage + TileA::BYTES;
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      u32 r[4];
      if (B_K_MAJOR)
        mma::ldmatrix_x4(r, b_stage + addr_b.at(np, kk));
      else
        mma::ldmatrix_x4_trans(r, b_stage + addr_b.at(np, kk));
      b[2 * np][0] = r[0];
      b[2 * np][1] = r[1];
      b[2 * np + 1][0] = r[2];
      b[2 * np + 1][1] = r[3];
    }
  }

  // Stages 2-4: the block's fp32 accumulators of tile (tile_m, tile_n) over
  // k_begin .. k_end. Returns with every cp.async drained (the stages are free).
  template <bool MASKED>
  __device__ __forceinline__ static void mainloop(const MatmulArgs& args, unsigned char* shared,
                                                  int tile_m, int tile_n, int batch, int k_begin,
                                                  int k_end, float (&acc)[MT][NT][4]) {
    static_assert(NT % 2 == 0, "B fragments load two n8 tiles at a time: WTN % 16 == 0");
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    const int warp_m = warp / WARPS_N;
    const int warp_n = warp % WARPS_N;
    const int m0 = tile_m * BM;
    const int n0 = tile_n * BN;
    const T* a = static_cast<const T*>(args.a) + batch * args.stride_a;
    const T* b = static_cast<const T*>(args.b) + batch * args.stride_b;

    LoaderA load_a;
    LoaderB load_b;
    load_a.init(a, args.lda, m0, k_begin);
    load_b.init(b, args.ldb, n0, k_begin);
    const u32 smem = mma::shared_address(shared);
    const int k_tiles = (k_end - k_begin + BK - 1) / BK;

#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;
      }
    }

    // Stage 2, prologue: k-tiles 0 .. STAGES-2 in flight, one commit group each
    // (empty groups past the end keep the group arithmetic uniform).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < k_tiles) {
        const int k0 = k_begin + s * BK;
        load_a.template issue<MASKED>(smem + s * STAGE_BYTES, k0, k_end, args.m);
        load_b.template issue<MASKED>(smem + s * STAGE_BYTES + TileA::BYTES, k0, k_end, args.n);
        load_a.finish();
        load_b.finish();
      }
      mma::cp_async_commit();
    }
    mma::cp_async_wait<STAGES - 2>();  // k-tile 0 has landed (this thread's part)
    __syncthreads();                   // ... and everyone's

    u32 frag_a[2][MT][4];
    u32 frag_b[2][NT][2];
    AddressA addr_a;
    AddressB addr_b;
    addr_a.init(warp_m * WTM, lane, (lane / 8) % 2, lane / 16);
    addr_b.init(warp_n * WTN, lane, lane / 16, (lane / 8) % 2);
    load_fragments(smem, 0, addr_a, addr_b, frag_a[0], frag_b[0]);

    int read_stage = 0;            // stage holding k-tile kt
    int write_stage = STAGES - 1;  // stage receiving k-tile kt + STAGES - 1
    bool pending = false;          // narrow loads issued but not yet in shared memory
    auto finish_pending = [&] {
      if (!pending) return;
      load_a.finish();
      load_b.finish();
      pending = false;
    };
    for (int kt = 0; kt < k_tiles; ++kt) {
#pragma unroll
      for (int kk = 0; kk < KSTEPS; ++kk) {
        if (kk == KSTEPS - 1) {
          if (!DEFER_FINISH) finish_pending();  // 2 stages: before the barrier
          // The next k-tile must be resident before its first fragment is read.
          // This barrier also ends every read of k-tile kt's stage, which the
          // refill at kk == 0 of the next iteration overwrites.
          mma::cp_async_wait<STAGES - 2>();
          __syncthreads();
          read_stage = read_stage + 1 == STAGES ? 0 : read_stage + 1;
        }
        // Fragments for the next k16 step (the first of the next k-tile at the end).
        load_fragments(smem + read_stage * STAGE_BYTES, (kk + 1) % KSTEPS, addr_a, addr_b,
                       frag_a[(kk + 1) % 2], frag_b[(kk + 1) % 2]);
        if (kk == 0) {
          // Narrow loads of the previous refill (k-tile kt + STAGES - 2, read two or
          // more barriers from now) go to shared memory before the next are issued.
          if (DEFER_FINISH) finish_pending();
          // Refill the stage freed by k-tile kt-1 with k-tile kt + STAGES - 1.
          const int next = kt + STAGES - 1;
          if (next < k_tiles) {
            const int k0 = k_begin + next * BK;
            load_a.template issue<MASKED>(smem + write_stage * STAGE_BYTES, k0, k_end, args.m);
            load_b.template issue<MASKED>(smem + write_stage * STAGE_BYTES + TileA::BYTES, k0,
                                          k_end, args.n);
            pending = NARROW;
          }
          mma::cp_async_commit();
          write_stage = write_stage + 1 == STAGES ? 0 : write_stage + 1;
        }
        // The tensor cores: MT x NT mma tiles of 16 x 8 x 16.
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const int n = (mt % 2) ? NT - 1 - nt : nt;  // serpentine: reuse B registers
            mma::MmaM16N8K16<T>::run(acc[mt][n], frag_a[kk % 2][mt], frag_b[kk % 2][n][0],
                                     frag_b[kk % 2][n][1]);
          }
      }
    }
    mma::cp_async_wait<0>();
  }

  // Stage 5: the epilogue. Each pass (1) waits until every warp is done with the
  // shared memory it reuses, (2) writes this warp's accumulators of the pass in the
  // C fragment layout (rows g, g + 8; columns 2t, 2t + 1 of each 16 x 8 tile) to the
  // staging buffer, (3) waits for all warps, (4) walks the staged rows in a rolled
  // loop, each thread taking VEC consecutive outputs of one row per iteration:
  // coalesced 16-byte stores, and alpha, beta * C0 and the epilogue function
  // appear once in the code instead of once per accumulator.
  template <typename Epilogue>
  __device__ __forceinline__ static void epilogue(const MatmulArgs& args,
                                                  const EpilogueOperands& ops,
                                                  unsigned char* shared,
                                                  const float (&acc)[MT][NT][4], int tile_m,
                                                  int tile_n, int batch, int split) {
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    const int warp_m = warp / WARPS_N;
    const int warp_n = warp % WARPS_N;
    const int g = lane / 4;
    const int t = lane % 4;
    float* staged = reinterpret_cast<float*>(shared);
    // Staged row of a pass -> row of the tile: [warp_m][MT_PER_PASS * 16] rows.
    constexpr int WARP_PASS_ROWS = MT_PER_PASS * 16;
#pragma unroll 1
    for (int pass = 0; pass < EPILOGUE_PASSES; ++pass) {
      __syncthreads();  // pass 0: the main loop's last ldmatrix; later: the previous pass
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if (mt / MT_PER_PASS != pass) continue;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int row = warp_m * WARP_PASS_ROWS + (mt % MT_PER_PASS) * 16 + g + 8 * half;
            const int col = warp_n * WTN + nt * 8 + 2 * t;
            Pair<float>::store(staged + row * STAGED_STRIDE + col, acc[mt][nt][2 * half],
                               acc[mt][nt][2 * half + 1]);
          }
      }
      __syncthreads();
#pragma unroll 1
      for (int i = threadIdx.x; i < PASS_ROWS * CHUNKS_PER_ROW; i += THREADS) {
        const int staged_row = i / CHUNKS_PER_ROW;
        const int chunk = i % CHUNKS_PER_ROW;
        const int row = tile_m * BM + (staged_row / WARP_PASS_ROWS) * WTM + pass * WARP_PASS_ROWS +
                        staged_row % WARP_PASS_ROWS;
        const int col = tile_n * BN + chunk * VEC;
        if (row >= args.m || col >= args.n) continue;
        float v[VEC];
        read_staged<VEC>(staged + staged_row * STAGED_STRIDE + chunk * VEC, chunk, v);
        write_chunk<TC, Epilogue>(args, ops, batch, split, row, col, min(args.n - col, VEC), v);
      }
    }
  }

  // The kernel body: grid = (tiles_m * tiles_n, splits, batch).
  template <typename Epilogue>
  __device__ __forceinline__ static void run(const MatmulArgs& args, const EpilogueOperands& ops) {
    extern __shared__ __align__(128) unsigned char kjit_matmul_shared[];
    const BlockWork w = block_work<BM, BN>(args);
    const int tile_m = w.tile_m, tile_n = w.tile_n, split = w.split, batch = w.batch;
    const int k_begin = w.k_begin, k_end = w.k_end;
    const bool interior =
        (tile_m + 1) * BM <= args.m && (tile_n + 1) * BN <= args.n && (k_end - k_begin) % BK == 0;
    float acc[MT][NT][4];
    if (interior)
      mainloop<false>(args, kjit_matmul_shared, tile_m, tile_n, batch, k_begin, k_end, acc);
    else
      mainloop<true>(args, kjit_matmul_shared, tile_m, tile_n, batch, k_begin, k_end, acc);
    epilogue<Epilogue>(args, ops, kjit_matmul_shared, acc, tile_m, tile_n, batch, split);
    if (args.splits > 1) finish_split<TC, Epilogue, BM, BN>(args, ops, w);
  }
};

// ---- the padding path -------------------------------------------------------------
// One misaligned operand to copy: a rows x cols matrix (leading dimension ld_src,
// batch stride stride_src) -> scratch with leading dimension ld_dst (a multiple of
// 8: 16-byte rows) and rows_dst >= rows rows, zero-filled past rows and cols.
// Mirrored by runtime/matmul.cpp.
struct PadJob {
  const void* src;
  void* dst;
  long long rows, cols, ld_src, stride_src, rows_dst, ld_dst;
};

// Eight 16-bit elements from s, which may sit at any even address, as one 16-byte
// chunk: the two aligned 16-byte chunks that hold them, loaded whole, and the eight
// picked out with funnel shifts (the start's word, then half a word where s is 2
// bytes past a word). The second chunk reaches up to 14 bytes past s + 7: the
// caller makes sure those bytes are inside the operand (compute-sanitizer checks
// reads against the allocation's bytes, not its pages).
__device__ __forceinline__ U32x4 load_chunk_at(const u16* s) {
  const unsigned long long address = reinterpret_cast<unsigned long long>(s);
  const int b = static_cast<int>(address & 15);  // even
  if (b == 0) return *reinterpret_cast<const U32x4*>(s);
  const U32x4* aligned = reinterpret_cast<const U32x4*>(address - b);
  const U32x4 lo = aligned[0], hi = aligned[1];
  const u32 w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  // Word k of the result starts at byte b + 4k: word q + k of w (q = b / 4), or its
  // high half and the next word's low half (b = 2 mod 4). Selects, not an index
  // into w (which would put it in local memory).
  const int q = b >> 2;
  u32 picked[5];
#pragma unroll
  for (int k = 0; k < 5; ++k)
    picked[k] = q == 0 ? w[k] : q == 1 ? w[k + 1] : q == 2 ? w[k + 2] : w[k + 3];
  const u32 shift = (b & 2) * 8;  // 0 or 16 bits
  return U32x4{
      __funnelshift_r(picked[0], picked[1], shift), __funnelshift_r(picked[1], picked[2], shift),
      __funnelshift_r(picked[2], picked[3], shift), __funnelshift_r(picked[3], picked[4], shift)};
}

// Grid: (x: blocks striding over one matrix's 16-byte chunks, y: batch, z: job).
// A and B are copied by one launch (z = 0, 1). Each thread writes two 16-byte chunks
// per iteration (both loaded before either is stored: more bytes in flight); a
// chunk's 8 source elements come from the two aligned 16-byte chunks that hold them
// (load_chunk_at): a row of 4097 bf16 values starts at every even address modulo 16
// in turn. Until 2026-12-04 they were read as four 4-byte or eight 2-byte loads,
// whichever the address allowed; on the H200 the whole product (copy and matmul)
// went from 0.2473 to 0.2454 ms at 4097^3 (192 x 128 stream-K) and from 0.3361 to
// 0.3334 at 2048 x 50257 x 768 (ping-pong 64 x 256) (docs/perf/2026-12-04-h200-pad-copy.md).
// Indices are 32-bit: the host checks that a matrix has fewer than 2^31 chunks (so
// i + 2 stride cannot wrap).
template <typename T>
__device__ __forceinline__ U32x4 pad_chunk(const PadJob& job, const T* src, unsigned r,
                                           unsigned c) {
  const u16* s = reinterpret_cast<const u16*>(src + r * job.ld_src + c);
  // Whole aligned chunks where the 8 bytes past the chunk are the row's or the
  // next row's (load_chunk_at reads up to 14 of them).
  if (r < job.rows && c + 8 <= job.cols && (c + 16 <= job.cols || r + 1 < job.rows))
    return load_chunk_at(s);
  // Element by element: the right or bottom edge (zeros past the matrix), and the
  // last row's last chunks.
  u16 v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = r < job.rows && c + j < job.cols ? s[j] : u16(0);
  return U32x4{v[0] | (static_cast<u32>(v[1]) << 16), v[2] | (static_cast<u32>(v[3]) << 16),
               v[4] | (static_cast<u32>(v[5]) << 16), v[6] | (static_cast<u32>(v[7]) << 16)};
}

template <typename T>
__device__ __forceinline__ void pad_copy(const PadJob job) {
  static_assert(sizeof(T) == 2, "the padded path copies 16-bit elements");
  const unsigned chunks_per_row = static_cast<unsigned>(job.ld_dst / 8);
  const unsigned chunks = static_cast<unsigned>(job.rows_dst) * chunks_per_row;
  const T* src = static_cast<const T*>(job.src) + blockIdx.y * job.stride_src;
  T* dst = static_cast<T*>(job.dst) + blockIdx.y * job.rows_dst * job.ld_dst;
  const unsigned stride = gridDim.x * blockDim.x;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < chunks; i += 2 * stride) {
    const unsigned j = i + stride;  // the second chunk, if inside the matrix
    const unsigned r0 = i / chunks_per_row, c0 = (i - r0 * chunks_per_row) * 8;
    const unsigned r1 = j / chunks_per_row, c1 = (j - r1 * chunks_per_row) * 8;
    const U32x4 first = pad_chunk(job, src, r0, c0);
    U32x4 second{};
    if (j < chunks) second = pad_chunk(job, src, r1, c1);
    *reinterpret_cast<U32x4*>(dst + static_cast<long long>(r0) * job.ld_dst + c0) = first;
    if (j < chunks)
      *reinterpret_cast<U32x4*>(dst + static_cast<long long>(r1) * job.ld_dst + c1) = second;
  }
}
// Job `index` of two, chosen field by field: selecting a whole kernel parameter by a
// run-time index would take its address and copy both to the stack.
__device__ __forceinline__ PadJob select_job(int index, const PadJob& job0, const PadJob& job1) {
  const bool first = index == 0;
  PadJob job;
  job.src = first ? job0.src : job1.src;
  job.dst = first ? job0.dst : job1.dst;
  job.rows = first ? job0.rows : job1.rows;
  job.cols = first ? job0.cols : job1.cols;
  job.ld_src = first ? job0.ld_src : job1.ld_src;
  job.stride_src = first ? job0.stride_src : job1.stride_src;
  job.rows_dst = first ? job0.rows_dst : job1.rows_dst;
  job.ld_dst = first ? job0.ld_dst : job1.ld_dst;
  return job;
}

// ---- the tf32 staging copy ----------------------------------------------------------
// wgmma reads 32-bit operands only K-major, and TMA needs 16-byte row strides. One
// f32 operand to stage: dst is [rows][ld_dst] (rows = M for A, N for B; ld_dst >=
// cols = K, a multiple of 4), per batch rows * ld_dst apart. The source element
// (r, k) is src[r * ld_src + k] (K-major) or, with `transpose`, src[k * ld_src + r]
// (M/N-major). Mirrored by runtime/matmul.cpp.
struct StageJob {
  const float* src;
  float* dst;
  long long rows, cols, ld_src, stride_src, ld_dst, transpose;
};

// Grid: (x: 32-column tiles of K, y: 32-row tiles, z: batch x jobs), 32 x 8
// threads; z = batch * jobs + job. A 32 x 32 tile goes through shared memory, so
// both the read (along the source's contiguous dimension) and the write (along K)
// are coalesced; the +1 column keeps the transposed reads off one bank. Columns
// between cols and ld_dst are not written (the copy engine zero-fills past K).
__device__ __forceinline__ void stage_k_major(const StageJob& job0, const StageJob& job1,
                                              int jobs) {
  __shared__ float tile[32][33];
  const bool first = static_cast<int>(blockIdx.z) % jobs == 0;
  const long long batch = static_cast<int>(blockIdx.z) / jobs;
  const float* src =
      (first ? job0.src : job1.src) + batch * (first ? job0.stride_src : job1.stride_src);
  const long long rows = first ? job0.rows : job1.rows, cols = first ? job0.cols : job1.cols;
  const long long ld_src = first ? job0.ld_src : job1.ld_src;
  const long long ld_dst = first ? job0.ld_dst : job1.ld_dst;
  const bool transpose = (first ? job0.transpose : job1.transpose) != 0;
  float* dst = (first ? job0.dst : job1.dst) + batch * rows * ld_dst;
  const long long r0 = static_cast<long long>(blockIdx.y) * 32;
  const long long k0 = static_cast<long long>(blockIdx.x) * 32;
  if (r0 >= rows || k0 >= cols) return;
  const int tx = static_cast<int>(threadIdx.x) % 32, ty = static_cast<int>(threadIdx.x) / 32;
#pragma unroll
  for (int j = 0; j < 32; j += 8) {
    if (transpose) {  // lanes walk r, the source's contiguous dimension
      const long long k = k0 + ty + j, r = r0 + tx;
      tile[ty + j][tx] = k < cols && r < rows ? src[k * ld_src + r] : 0.0f;
    } else {  // lanes walk k
      const long long r = r0 + ty + j, k = k0 + tx;
      tile[ty + j][tx] = r < rows && k < cols ? src[r * ld_src + k] : 0.0f;
    }
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < 32; j += 8) {
    const long long r = r0 + ty + j, k = k0 + tx;
    if (r < rows && k < cols) dst[r * ld_dst + k] = transpose ? tile[tx][ty + j] : tile[ty + j][tx];
  }
}

}  // namespace matmul
}  // namespace kjit
