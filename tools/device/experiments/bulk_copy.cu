// bulk_copy.cu — an experiment, not part of kjit: does moving memory with the
// Hopper bulk-copy engine (cp.async.bulk global <-> shared, completion through an
// mbarrier) get an elementwise kernel closer to cudaMemcpy's device-to-device
// bandwidth than kjit's load/compute/store grid-stride loop (copy_structure.cu:
// 92-93% of cudaMemcpy for a plain copy kernel)?
//
// Each block is persistent and walks chunks c = blockIdx.x, + gridDim.x, ... of
// CHUNK floats. One thread asks the copy engine for the next STAGES - 1 chunks
// ahead; all threads compute y = sin(x)^2 + cos(x)^2 (or nothing: a copy) in place
// in shared memory; one thread hands the chunk back to the copy engine
// (shared -> global), and refills a stage once the engine has read it.
//
//   bash tools/device/experiments/run.sh bulk_copy    (on the GPU machine; nvcc)
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <vector>
#include "experiment.cuh"
#include "kjit/math.cuh"

__device__ __forceinline__ unsigned smem(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void bar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile(
        "{ .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
}
template <int HINT>
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes,
                                          unsigned bar, unsigned long long policy) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
  if (HINT)
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
        "[%1], %2, [%3], %4;" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "l"(policy)
        : "memory");
  else
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
        "[%3];" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar)
        : "memory");
}
template <int HINT>
__device__ __forceinline__ void bulk_store(void* dst, unsigned src, unsigned bytes,
                                           unsigned long long policy) {
  if (HINT)
    asm volatile(
        "cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;" ::"l"(dst),
        "r"(src), "r"(bytes), "l"(policy)
        : "memory");
  else
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// MATH: 0 kjit::sincos_f32, 3 none (copy). STORE: 0 bulk store, 1 threads store
// (st.global.cs) straight from registers. HINT: L2 evict_first on both directions.
template <int MATH, int STORE, int HINT, int THREADS, int CHUNK, int STAGES>
__global__ void __launch_bounds__(THREADS)
    bulk(const float* __restrict__ in, float* __restrict__ out, long long n) {
  extern __shared__ __align__(128) float buf[];
  __shared__ __align__(8) unsigned long long full[STAGES];
  const long long chunks = n / CHUNK;  // n is a multiple of CHUNK here
  const unsigned bytes = CHUNK * 4;
  unsigned long long policy = 0;
  if (HINT) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) bar_init(smem(&full[s]), 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const long long mine =
      blockIdx.x < chunks ? (chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  if (threadIdx.x == 0)
    for (long long i = 0; i < STAGES && i < mine; ++i)
      bulk_load<HINT>(smem(buf + (i % STAGES) * CHUNK), in + (blockIdx.x + i * gridDim.x) * CHUNK,
                      bytes, smem(&full[i % STAGES]), policy);
  for (long long i = 0; i < mine; ++i) {
    const int s = static_cast<int>(i % STAGES);
    const long long c = blockIdx.x + i * gridDim.x;
    float* b = buf + s * CHUNK;
    bar_wait(smem(&full[s]), static_cast<unsigned>((i / STAGES) & 1));
    if (MATH == 0 || STORE == 1) {
#pragma unroll 2
      for (int j = threadIdx.x; j < CHUNK / 4; j += THREADS) {
        float4 v = reinterpret_cast<float4*>(b)[j];
        if (MATH == 0) {
          float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            float sn, cs;
            kjit::sincos_f32(e[q], &sn, &cs);
            e[q] = sn * sn + cs * cs;
          }
          v = make_float4(e[0], e[1], e[2], e[3]);
        }
        if (STORE == 0)
          reinterpret_cast<float4*>(b)[j] = v;
        else
          __stcs(reinterpret_cast<float4*>(out + c * CHUNK) + j, v);
      }
    }
    if (STORE == 0) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
      if (STORE == 0) {
        bulk_store<HINT>(out + c * CHUNK, smem(b), bytes, policy);
        // Chunk i - 1's stage is free once the engine has read it: refill it.
        asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        const long long next = i - 1 + STAGES;
        if (i >= 1 && next < mine)
          bulk_load<HINT>(smem(buf + ((i - 1) % STAGES) * CHUNK),
                          in + (blockIdx.x + next * gridDim.x) * CHUNK, bytes,
                          smem(&full[(i - 1) % STAGES]), policy);
      } else {
        const long long next = i + STAGES;
        if (next < mine)
          bulk_load<HINT>(smem(b), in + (blockIdx.x + next * gridDim.x) * CHUNK, bytes,
                          smem(&full[s]), policy);
      }
    }
  }
  if (STORE == 0 && threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

struct Variant {
  const char* name;
  void (*kernel)(const float*, float*, long long);
  int threads, smem_bytes, per_sm;
};
#define V(M, S, H, T, C, ST, PER)                                                      \
  {                                                                                    \
    "math" #M " store" #S " hint" #H " t" #T " chunk" #C " stages" #ST " per_sm" #PER, \
        bulk<M, S, H, T, C, ST>, T, C * 4 * ST, PER                                    \
  }

int main() {
  const experiment::Setup e = experiment::setup(1ll << 28);
  const long long n = e.n;
  float *in = e.in, *out = e.out;
  const int sms = e.sms;
  Variant vs[] = {
      V(3, 0, 0, 256, 4096, 4, 2), V(3, 0, 0, 256, 8192, 4, 1),  V(3, 0, 0, 256, 8192, 6, 1),
      V(3, 0, 1, 256, 8192, 4, 1), V(0, 0, 0, 256, 4096, 4, 2),  V(0, 0, 0, 512, 4096, 6, 2),
      V(0, 0, 0, 512, 8192, 4, 1), V(0, 0, 0, 512, 8192, 6, 1),  V(0, 0, 0, 1024, 8192, 6, 1),
      V(0, 0, 1, 512, 8192, 6, 1), V(0, 0, 0, 256, 2048, 8, 4),  V(0, 1, 0, 512, 8192, 6, 1),
      V(0, 1, 0, 512, 4096, 6, 2), V(0, 0, 0, 512, 16384, 3, 1), V(0, 0, 0, 512, 4096, 12, 1),
  };
  const int nv = sizeof(vs) / sizeof(vs[0]);
  for (int i = 0; i < nv; ++i) {
    const cudaError_t status = cudaFuncSetAttribute(
        vs[i].kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, vs[i].smem_bytes);
    if (status != cudaSuccess) printf("%s: %s\n", vs[i].name, cudaGetErrorString(status));
  }
  experiment::Timer timer;
  auto time = [&](auto f) { return timer.median_ms(f); };
  // Correctness first: every variant against the host (sin^2 + cos^2 ~ 1, copy exact).
  std::vector<float> got(n);
  for (int i = 0; i < nv; ++i) {
    cudaMemset(out, 0xFF, n * 4);
    vs[i].kernel<<<sms * vs[i].per_sm, vs[i].threads, vs[i].smem_bytes>>>(in, out, n);
    const cudaError_t status = cudaDeviceSynchronize();
    cudaMemcpy(got.data(), out, n * 4, cudaMemcpyDeviceToHost);
    long long bad = 0;
    const bool copy = vs[i].name[4] == '3';
    for (long long j = 0; j < n; ++j)
      if (copy ? got[j] != e.host[j] : !(std::abs(got[j] - 1.0f) < 1e-6f)) ++bad;
    printf("check %-52s %s, %lld wrong\n", vs[i].name, cudaGetErrorString(status), bad);
  }
  std::vector<std::vector<float>> res(nv);
  std::vector<float> copies;
  for (int round = 0; round < 3; ++round) {
    copies.push_back(time([&] { cudaMemcpyAsync(out, in, n * 4, cudaMemcpyDeviceToDevice); }));
    for (int i = 0; i < nv; ++i)
      res[i].push_back(time([&] {
        vs[i].kernel<<<sms * vs[i].per_sm, vs[i].threads, vs[i].smem_bytes>>>(in, out, n);
      }));
  }
  const float copy = experiment::report_copy(copies);
  for (int i = 0; i < nv; ++i) experiment::report_variant(vs[i].name, res[i], copy);
  return 0;
}
