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

// ---- TMA: fetch a tensor map's descriptor ahead of the first copy -----------------
// The copy engine reads the 128-byte map from memory the first time a copy names it;
// asked for at the kernel's start (one thread, before the mbarriers are set up), that
// fetch overlaps the set-up instead of delaying the main loop's first copy: a fixed
// cost that a short kernel (a decode-sized matmul, ~15 us) feels.
__device__ __forceinline__ void prefetch_tensor_map(const TensorMap& map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<unsigned long long>(&map))
               : "memory");
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

// ---- TMA: shared memory -> a box of a 3-D tensor (a bulk store) -----------------
// The copy engine reads the box from shared memory (laid out as a load of the same
// map would have left it: the map's swizzle) and writes it to global memory, clipped
// to the tensor's bounds, while the issuing warp goes on. Each store is one bulk
// async-group of the issuing thread (commit); that thread waits on its own groups:
// bulk_wait_read<N> returns once all but the N most recent have read their shared
// memory (the buffer may be written again), bulk_wait_all<0> once every write is done.
__device__ __forceinline__ void tma_store(const TensorMap& map, u32 src, int x, int y, int z) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group"
      " [%0, {%2, %3, %4}], [%1];" ::"l"(reinterpret_cast<unsigned long long>(&map)),
      "r"(src), "r"(x), "r"(y), "r"(z)
      : "memory");
}
// The same box added into global memory instead of stored over it: each element of
// the box in shared memory is added to its place in the tensor (the map's type: f32
// here), in L2, atomically per element, clipped to the tensor's bounds. A bulk
// async-group of the issuing thread, as tma_store.
__device__ __forceinline__ void tma_reduce_add(const TensorMap& map, u32 src, int x, int y, int z) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group"
      " [%0, {%2, %3, %4}], [%1];" ::"l"(reinterpret_cast<unsigned long long>(&map)),
      "r"(src), "r"(x), "r"(y), "r"(z)
      : "memory");
}
// The plain bulk store: `bytes` (a multiple of 16) from shared memory at src to
// global memory at dst, both 16-byte aligned, no tensor map and no box: one row's
// run of bytes. A bulk async-group of the issuing thread, as tma_store.
__device__ __forceinline__ void bulk_store(void* dst, u32 src, u32 bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                   reinterpret_cast<unsigned long long>(dst)),
               "r"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}
// Orders this thread's ordinary shared-memory writes before the copy engine's reads
// (the "async proxy") of a bulk store issued after a barrier.
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ---- thread-block clusters: barrier and distributed shared memory ---------------
// Every thread of every block of the cluster arrives; release/acquire order the
// shared-memory writes before the barrier with the reads of other blocks after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;" ::
          : "memory");
}
// The same barrier in two halves, the arrive relaxed: for a block that only has to
// stay until the others are done with its shared memory. Their arrives come after
// their reads have returned (the values were used), and nothing this block wrote
// needs to be visible to them, so no release: its global stores need not drain first.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}
// The address of this block's shared-memory byte `address` in the block of the
// cluster with rank `rank` (a shared::cluster address, for ld.shared::cluster).
__device__ __forceinline__ u32 cluster_address(u32 address, unsigned rank) {
  u32 out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(out) : "r"(address), "r"(rank));
  return out;
}
__device__ __forceinline__ float4 load_cluster_f32x4(u32 address) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(address)
               : "memory");
  return v;
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
// The thread's warpgroup (threadIdx.x / 128) through a shuffle from lane 0: the same
// number, but one ptxas knows is the same in every lane of the warp, so that the
// shared-memory descriptors built from it stay in uniform registers, where wgmma
// reads them. From threadIdx.x itself, each descriptor was built in the thread's
// registers and moved over (R2UR, two per descriptor: 52 of the 722 instructions a
// query tile of the dK/dV kernel's main loop took at D 128).
__device__ __forceinline__ int warpgroup_index() {
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
}
// A shared-memory matrix descriptor: start address, leading and stride byte
// offsets (all in 16-byte units) and the 128-byte swizzle mode (1 in bits 62-63).
__device__ __forceinline__ unsigned long long descriptor(u32 address, u32 leading, u32 stride) {
  return static_cast<unsigned long long>((address & 0x3FFFF) >> 4) |
         (static_cast<unsigned long long>(leading >> 4) << 16) |
         (static_cast<unsigned long long>(stride >> 4) << 32) | (1ull << 62);
}
// The descriptor of the matrix `bytes` (a multiple of 16) past `base`'s start: one
// add to the start field (bits 0-13, the shared-memory address over 16), where
// descriptor() of the moved address masks, shifts and ors again. The moved address
// is still in the block's shared memory, below 2^18 bytes, so the sum stays in bits
// 0-13 and the other fields keep their bits. Products that step through a tile k16
// step by k16 step build the tile's descriptor once and move it.
__device__ __forceinline__ unsigned long long advance(unsigned long long base, u32 bytes) {
  const u32 low = static_cast<u32>(base) + (bytes >> 4);
  return (base & 0xFFFFFFFF00000000ull) | low;
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
