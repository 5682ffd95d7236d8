// kjit/sm90.cuh — Hopper building blocks shared by the matmul and attention
// kernels: tensor maps for the copy engine (TMA), mbarriers, and wgmma's
// shared-memory descriptors, fences and group waits.
#pragma once

#include "kjit/mma.cuh"
#include "kjit/types.cuh"

namespace kjit {

// A CUtensorMap (cuTensorMapEncodeTiled's output): 128 opaque bytes, 64-byte
// aligned, passed by value as a __grid_constant__ kernel parameter.
struct __align__(64) TensorMap {
  unsigned long long opaque[16];
};

namespace sm90 {

// ---- mbarrier --------------------------------------------------------------------
__device__ __forceinline__ void barrier_init(u32 bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Arrives once and adds `bytes` to the transactions this phase waits for.
__device__ __forceinline__ void barrier_arrive_expect_bytes(u32 bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void barrier_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Waits until the phase with this parity has completed. A fresh barrier is in
// phase 0, so waiting for parity 1 returns at once (the "previous" phase).
__device__ __forceinline__ void barrier_wait(u32 bar, unsigned parity) {
  unsigned done = 0;
  while (!done) {
    asm volatile(
        "{ .reg .pred p;\n"
        "  mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "  selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}

// ---- TMA: a box of a 3-D tensor (inner dim, rows, batch) -> shared memory -------
__device__ __forceinline__ void tma_load(u32 dst, const TensorMap& map, u32 bar, int x, int y,
                                         int z) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(bar), "r"(x), "r"(y), "r"(z)
      : "memory");
}

// ---- TMA: a box of a 4-D tensor (inner dim, rows, heads, batch) -> shared memory
__device__ __forceinline__ void tma_load_4d(u32 dst, const TensorMap& map, u32 bar, int x, int y,
                                            int z, int w) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(bar), "r"(x), "r"(y), "r"(z), "r"(w)
      : "memory");
}

// ---- named barriers: a subset of the block's warps meets (id 1..15; 0 is
// __syncthreads). `threads` counts both sides: the warps that wait and those that
// only arrive.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- wgmma ---------------------------------------------------------------------
// A shared-memory matrix descriptor: start address, leading and stride byte
// offsets (all in 16-byte units) and the 128-byte swizzle mode (1 in bits 62-63).
__device__ __forceinline__ unsigned long long descriptor(u32 address, u32 leading, u32 stride) {
  return static_cast<unsigned long long>((address & 0x3FFFF) >> 4) |
         (static_cast<unsigned long long>(leading >> 4) << 16) |
         (static_cast<unsigned long long>(stride >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(PENDING) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the
// asynchronous wgmma (which reads and writes them behind its back).
template <int N>
__device__ __forceinline__ void fence_accumulators(float (&acc)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(acc[i])::"memory");
}
}  // namespace sm90
}  // namespace kjit
