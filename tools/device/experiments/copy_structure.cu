// copy_structure.cu — an experiment, not part of kjit: how close can a plain
// load/compute/store kernel get to cudaMemcpy's device-to-device bandwidth, and what
// moves it? Hand-written variants of the grid-stride loop that kjit generates for
// y = sin(x)^2 + cos(x)^2 (2^28 floats, kjit::sincos_f32 from templates/math.cuh),
// and the same loop with no math (a copy kernel), each timed against
// cudaMemcpyAsync D2D in the same process: 3 interleaved rounds, the median of 20
// runs per round. Knobs: the math, the load (ld.global.nc, .cs, .L2::256B), the
// store (st.global or st.global.cs), block size, vectors per thread, blocks per SM.
//
//   bash tools/device/experiments/run.sh copy_structure    (on the GPU machine; nvcc)
//
// docs/perf/2026-11-29-h200-elementwise.md has what it measured on the H200.
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <vector>
#include "experiment.cuh"
#include "kjit/math.cuh"

// MINIMAX: polynomials fitted to the relative error (kjit's since 3295b35), one
// term shorter each; else the Taylor series kjit used before.
template <bool MINIMAX = false>
__device__ __forceinline__ void sincos_fast(float x, float* s, float* c) {
  const float a = fabsf(x);
  const float magic = 0x1.8p23f;
  const float t = fmaf(a, 0x1.45f306p-1f, magic);
  const float j = t - magic;
  const unsigned quadrant = __float_as_uint(t);
  float r = fmaf(j, -0x1.921fb6p+0f, a);
  r = fmaf(j, 0x1.777a5cp-25f, r);
  r = fmaf(j, 0x1.ee59dap-50f, r);
  const float r2 = r * r;
  float sin_r, cos_r;
  if (MINIMAX) {
    float sp = -1.95159487e-4f;
    sp = fmaf(sp, r2, 8.33216573e-3f);
    sp = fmaf(sp, r2, -1.66666547e-1f);
    sin_r = fmaf(sp * r2, r, r);
    float cp = 2.44358479e-5f;
    cp = fmaf(cp, r2, -1.38873415e-3f);
    cp = fmaf(cp, r2, 4.16666462e-2f);
    cp = fmaf(cp, r2, -0.5f);
    cos_r = fmaf(cp, r2, 1.0f);
  } else {
    float sp = 2.7557319e-6f;
    sp = fmaf(sp, r2, -1.9841270e-4f);
    sp = fmaf(sp, r2, 8.3333333e-3f);
    sp = fmaf(sp, r2, -1.6666667e-1f);
    sin_r = fmaf(sp * r2, r, r);
    float cp = -2.7557319e-7f;
    cp = fmaf(cp, r2, 2.4801587e-5f);
    cp = fmaf(cp, r2, -1.3888889e-3f);
    cp = fmaf(cp, r2, 4.1666667e-2f);
    cp = fmaf(cp, r2, -0.5f);
    cos_r = fmaf(cp, r2, 1.0f);
  }
  const bool odd = (quadrant & 1u) != 0;
  const unsigned sin_sign = ((quadrant & 2u) << 30) ^ (__float_as_uint(x) & 0x80000000u);
  const unsigned cos_sign = ((quadrant + 1u) & 2u) << 30;
  *s = __uint_as_float(__float_as_uint(odd ? cos_r : sin_r) ^ sin_sign);
  *c = __uint_as_float(__float_as_uint(odd ? sin_r : cos_r) ^ cos_sign);
}

// Block 0's thread 0 records SM clock cycles and the global timer at its start and
// end: the SM clock the kernel ran at.
__device__ unsigned long long g_clock[4];
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// MATH: 0 kjit::sincos_f32 (checked per element), 1 one range check per thread
// iteration, 2 unchecked fast path (bound), 3 no math (copy kernel), 4 libdevice sinf/cosf,
// 5 as 1 with the minimax polynomials
// LD: 0 ld.global.nc, 1 ld.global.cs ; ST: 0 st.global, 1 st.global.cs
// BLOCKED: each block walks its own contiguous share of the vectors instead of
// the grid striding over all of them together.
template <int MATH, int LD, int ST, int BLOCK, int U, int BLOCKED = 0>
__global__ void __launch_bounds__(BLOCK)
    k(const float* __restrict__ in, float* __restrict__ out, long long n) {
  long long vectors = n / 4;
  long long step = (long long)gridDim.x * BLOCK * U;
  long long begin = (long long)blockIdx.x * BLOCK * U;
  if (BLOCKED) {
    const long long share = (vectors + gridDim.x - 1) / gridDim.x;
    begin = blockIdx.x * share;
    vectors = min(vectors, begin + share);
    step = BLOCK * U;
  }
  const bool clocked = blockIdx.x == 0 && threadIdx.x == 0;
  if (clocked) {
    g_clock[0] = clock64();
    g_clock[1] = global_ns();
  }
  for (long long first = begin + threadIdx.x; first < vectors; first += step) {
    float4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long vec = first + (long long)u * BLOCK;
      if (vec >= vectors) break;
      if (LD == 0)
        v[u] = __ldg(reinterpret_cast<const float4*>(in) + vec);
      else if (LD == 1)
        v[u] = __ldcs(reinterpret_cast<const float4*>(in) + vec);
      else {
        const float4* p = reinterpret_cast<const float4*>(in) + vec;
        asm volatile("ld.global.nc.L2::256B.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(v[u].x), "=f"(v[u].y), "=f"(v[u].z), "=f"(v[u].w)
                     : "l"(p));
      }
    }
    bool all_fast = true;
    if (MATH == 1 || MATH == 5) {
      float m = 0.f;
#pragma unroll
      for (int u = 0; u < U; ++u)
        m = fmaxf(m,
                  fmaxf(fmaxf(fabsf(v[u].x), fabsf(v[u].y)), fmaxf(fabsf(v[u].z), fabsf(v[u].w))));
      all_fast = m <= kjit::kSinCosFastLimit;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long vec = first + (long long)u * BLOCK;
      if (vec >= vectors) break;
      float e[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
      float o[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        float s, c;
        if (MATH == 0)
          kjit::sincos_f32(e[q], &s, &c);
        else if (MATH == 1) {
          if (all_fast)
            sincos_fast(e[q], &s, &c);
          else
            kjit::sincos_f32(e[q], &s, &c);
        } else if (MATH == 2) {
          sincos_fast(e[q], &s, &c);
        } else if (MATH == 5) {
          if (all_fast)
            sincos_fast<true>(e[q], &s, &c);
          else
            kjit::sincos_f32(e[q], &s, &c);
        } else if (MATH == 4) {
          s = sinf(e[q]);
          c = cosf(e[q]);
        }
        if (MATH == 3)
          o[q] = e[q];
        else
          o[q] = s * s + c * c;
      }
      float4 w = make_float4(o[0], o[1], o[2], o[3]);
      if (ST == 0)
        reinterpret_cast<float4*>(out)[vec] = w;
      else
        __stcs(reinterpret_cast<float4*>(out) + vec, w);
    }
  }
  if (clocked) {
    g_clock[2] = clock64();
    g_clock[3] = global_ns();
  }
}

struct Variant {
  const char* name;
  void (*kernel)(const float*, float*, long long);
  int block;
  int per_sm = 0;
};
#define V(M, L, S, B, U) \
  { #M " ld" #L " st" #S " block" #B " u" #U, k < M, L, S, B, U>, B }
#define VB(M, L, S, B, U, PER) \
  { #M " ld" #L " st" #S " block" #B " u" #U " per_sm" #PER, k < M, L, S, B, U>, B, PER }
#define VK(M, L, S, B, U, PER)                                                                    \
  {                                                                                               \
#M " ld" #L " st" #S " block" #B " u" #U " per_sm" #PER " blocked", k < M, L, S, B, U, 1>, B, \
        PER                                                                                       \
  }

int main() {
  const experiment::Setup e = experiment::setup(1ll << 28);
  const long long n = e.n;
  float *in = e.in, *out = e.out;
  const int sms = e.sms;
  Variant vs[] = {
      V(3, 0, 1, 1024, 1),     VB(3, 0, 1, 512, 2, 2), V(0, 0, 0, 512, 2),  V(0, 0, 1, 1024, 1),
      V(1, 0, 1, 1024, 1),     V(5, 0, 1, 1024, 1),    V(5, 0, 0, 1024, 1), VB(5, 0, 1, 512, 2, 2),
      VB(5, 0, 1, 1024, 2, 1), V(2, 0, 1, 1024, 1),    V(4, 0, 1, 1024, 1),
  };

  experiment::Timer timer;
  auto time = [&](auto f) { return timer.median_ms(f); };
  const int nv = sizeof(vs) / sizeof(vs[0]);
  std::vector<std::vector<float>> res(nv);
  std::vector<float> copies;
  for (int round = 0; round < 3; ++round) {
    copies.push_back(time([&] { cudaMemcpyAsync(out, in, n * 4, cudaMemcpyDeviceToDevice); }));
    for (int i = 0; i < nv; ++i) {
      int per_sm;
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, vs[i].kernel, vs[i].block, 0);
      if (vs[i].per_sm) per_sm = vs[i].per_sm;
      res[i].push_back(time([&] { vs[i].kernel<<<sms * per_sm, vs[i].block>>>(in, out, n); }));
    }
  }
  std::vector<double> mhz(nv);
  for (int i = 0; i < nv; ++i) {
    int per_sm;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, vs[i].kernel, vs[i].block, 0);
    if (vs[i].per_sm) per_sm = vs[i].per_sm;
    vs[i].kernel<<<sms * per_sm, vs[i].block>>>(in, out, n);
    cudaDeviceSynchronize();
    unsigned long long c[4];
    cudaMemcpyFromSymbol(c, g_clock, sizeof c);
    mhz[i] = c[3] > c[1] ? 1e3 * double(c[2] - c[0]) / double(c[3] - c[1]) : 0;
  }
  const float copy = experiment::report_copy(copies);
  for (int i = 0; i < nv; ++i) {
    char clock[32];
    snprintf(clock, sizeof clock, "  SM clock %.0f MHz", mhz[i]);
    experiment::report_variant(vs[i].name, res[i], copy, clock);
  }
  return 0;
}
