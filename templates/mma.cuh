// kjit/mma.cuh — the tensor-core building blocks of the matmul kernel, one PTX
// instruction each (sm_80 and later; Hopper runs them too).
//
//   cp.async      global -> shared copies of 16 bytes that bypass registers, so a
//                 tile for a later k-step streams in while the tensor cores work
//   ldmatrix      shared -> registers: four 8x8 tiles of 16-bit values per warp,
//                 already in the fragment layout mma.sync wants (.trans for the
//                 operand stored the other way round)
//   mma.sync      D(16x8, f32) += A(16x16, bf16|f16, row) * B(16x8, bf16|f16, col)
//
// Fragment layouts of mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"),
// with g = lane / 4 and t = lane % 4; each 32-bit register holds two 16-bit values,
// the lower index in the low half:
//   A (4 regs)  a0: (row g,   k 2t..2t+1)   a1: (row g+8, k 2t..2t+1)
//               a2: (row g,   k 2t+8..+9)   a3: (row g+8, k 2t+8..+9)
//   B (2 regs)  b0: (k 2t..2t+1, col g)     b1: (k 2t+8..2t+9, col g)
//   C (4 f32)   c0, c1: (row g, cols 2t, 2t+1)   c2, c3: (row g+8, cols 2t, 2t+1)
//
// ldmatrix.x4: lanes 8i..8i+7 give the addresses of the 8 rows (16 bytes each) of
// matrix i; every lane receives, in register i, row lane/4, elements 2(lane%4) and
// 2(lane%4)+1 of matrix i. With .trans it receives elements (2(lane%4), lane/4) and
// (2(lane%4)+1, lane/4): the same 8x8 tile, transposed.
#pragma once

#include "kjit/types.cuh"

namespace kjit {
namespace mma {

// A generic pointer into shared memory as the 32-bit shared-window address PTX wants.
__device__ __forceinline__ u32 shared_address(const void* pointer) {
  u32 address;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }"
      : "=r"(address)
      : "l"(pointer));
  return address;
}

// ---- cp.async: 16 bytes global -> shared, asynchronous -------------------------
// .cg caches in L2 only: tiles are reused through shared memory, not L1.
__device__ __forceinline__ void cp_async_16(u32 shared, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared), "l"(global));
}

// Copies the first `src_bytes` (0..16) bytes and zero-fills the rest of the 16:
// the masked load of an edge tile. With src_bytes == 0 nothing is read, but the
// address must still be a valid global address (callers pass the tensor's base).
__device__ __forceinline__ void cp_async_16_zfill(u32 shared, const void* global, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared), "l"(global),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---- ldmatrix ----------------------------------------------------------------
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// ---- mma.sync m16n8k16, f32 accumulators ---------------------------------------
template <typename T>
struct MmaM16N8K16;

template <>
struct MmaM16N8K16<bf16> {
  __device__ __forceinline__ static void run(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct MmaM16N8K16<f16> {
  __device__ __forceinline__ static void run(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// ---- C fragments out 16 bytes at a time ----------------------------------------
// Lane t of a quad (the 4 lanes of one row g) holds, for each of four 8-column chunks
// i, the packed pair of columns 2t, 2t + 1: a[i]. After this 4 x 4 transpose it holds
// the four pairs of chunk t, columns 0..7 in order: 16 contiguous bytes, stored at
// once (where four 4-byte stores fill half of each 32-byte sector). Two rounds of
// shuffles: with the lane one apart, keep the chunks of my parity and trade the
// others; with the lane two apart, keep chunk t and trade chunk t ^ 2. All 32 lanes
// must call it.
__device__ __forceinline__ uint4 quad_transpose(const u32 (&a)[4], int t) {
  const bool p = (t & 1) != 0, q = (t & 2) != 0;
  const u32 keep0 = p ? a[1] : a[0], keep1 = p ? a[3] : a[2];           // my chunks p, p + 2
  const u32 got0 = __shfl_xor_sync(0xffffffffu, p ? a[0] : a[1], 1);    // lane t ^ 1's chunk p
  const u32 got1 = __shfl_xor_sync(0xffffffffu, p ? a[2] : a[3], 1);    // ... and p + 2
  const u32 mine = q ? keep1 : keep0, partner = q ? got1 : got0;        // chunk t of t, t ^ 1
  const u32 far0 = __shfl_xor_sync(0xffffffffu, q ? keep0 : keep1, 2);  // of lane t ^ 2
  const u32 far1 = __shfl_xor_sync(0xffffffffu, q ? got0 : got1, 2);    // of lane t ^ 3
  // The pair of lane s goes to place s: lane t ^ x's pair is [mine, partner, far0, far1][x].
  const u32 c0 = p ? partner : mine, c1 = p ? mine : partner;
  const u32 c2 = p ? far1 : far0, c3 = p ? far0 : far1;
  return q ? make_uint4(c2, c3, c0, c1) : make_uint4(c0, c1, c2, c3);
}

}  // namespace mma
}  // namespace kjit
