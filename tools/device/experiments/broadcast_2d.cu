// broadcast_2d.cu — an experiment, not part of kjit: what does the 2-D broadcast
// y = x * r + c (x bf16 [rows, cols], r per row [rows, 1], c per column [cols])
// need to pass torch.compile (Triton: one 16-byte vector per thread, 128 threads a
// block, the row and column by shifts of constant sizes, r and c loaded with
// evict_last)? kjit's kernel (1-D grid, one vector per thread, the row by a 32-bit
// division of the vector's index) measured 0.989x of it on the H200.
//
// Variants, each checked against the host on sampled rows, then timed in
// interleaved rounds (L2 flushed before every run, the median of 20 per round)
// against cudaMemcpy D2D of the same bytes:
//   1d       kjit's loop as generated (64-bit indices, 32-bit division)
//   1d32     the same in 32-bit indices
//   2d       a 2-D grid: blockIdx.y is the row (r read once per block, no division)
//   rowsR    a 2-D grid whose blocks walk R rows of a column strip: each thread
//            loads its vector of c once and keeps it in registers for R rows
//   +hints   x read with L1::no_allocate, the output stored with .cs
//
//   bash tools/device/experiments/run.sh broadcast_2d [ROWS COLS]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

constexpr int V = 8;  // bf16 per 16-byte vector

struct alignas(16) Vec8 {
  __nv_bfloat162 h[4];
};

__device__ __forceinline__ Vec8 load(const __nv_bfloat16* p) {
  return *reinterpret_cast<const Vec8*>(p);
}
__device__ __forceinline__ Vec8 load_no_l1(const __nv_bfloat16* p) {
  uint4 u;
  asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
               : "l"(p));
  return *reinterpret_cast<Vec8*>(&u);
}
__device__ __forceinline__ void store(__nv_bfloat16* p, const Vec8& v) {
  *reinterpret_cast<Vec8*>(p) = v;
}
__device__ __forceinline__ void store_cs(__nv_bfloat16* p, const Vec8& v) {
  const uint4 u = *reinterpret_cast<const uint4*>(&v);
  asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(u.x), "r"(u.y), "r"(u.z),
               "r"(u.w)
               : "memory");
}

__device__ __forceinline__ Vec8 fma8(const Vec8& x, float r, const Vec8& c) {
  Vec8 y;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 xf = __bfloat1622float2(x.h[e]);
    const float2 cf = __bfloat1622float2(c.h[e]);
    y.h[e] = __floats2bfloat162_rn(xf.x * r + cf.x, xf.y * r + cf.y);
  }
  return y;
}

// kjit's loop as generated today (grid=tiles: one vector per thread, no loop taken).
__global__ void __launch_bounds__(1024)
    k_1d(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ r,
         const __nv_bfloat16* __restrict__ c, __nv_bfloat16* __restrict__ y, long long n,
         long long cols) {
  const long long vectors = n / V;
  const long long step = (long long)gridDim.x * blockDim.x;
  const bool fits = n <= 0xffffffffLL;
  for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < vectors; v += step) {
    const long long i = v * V;
    const long long row = fits ? (long long)((unsigned)i / (unsigned)cols) : i / cols;
    const long long col = i - row * cols;
    const Vec8 xv = load(x + i);
    const float rv = __bfloat162float(r[row]);
    const Vec8 cv = load(c + col);
    store(y + i, fma8(xv, rv, cv));
  }
}

// The same in 32-bit indices (n < 2^32).
__global__ void __launch_bounds__(1024)
    k_1d32(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ r,
           const __nv_bfloat16* __restrict__ c, __nv_bfloat16* __restrict__ y, unsigned n,
           unsigned cols) {
  const unsigned v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= n / V) return;
  const unsigned i = v * V, row = i / cols, col = i - row * cols;
  store(y + i, fma8(load(x + i), __bfloat162float(r[row]), load(c + col)));
}

// 2-D grid: block (bx, row) covers vectors bx * blockDim.x + t of one row.
template <bool HINTS>
__global__ void __launch_bounds__(1024)
    k_2d(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ r,
         const __nv_bfloat16* __restrict__ c, __nv_bfloat16* __restrict__ y, unsigned cols) {
  const unsigned cv = blockIdx.x * blockDim.x + threadIdx.x;
  if (cv >= cols / V) return;
  const unsigned row = blockIdx.y;
  const size_t i = (size_t)row * cols + cv * V;
  const float rv = __bfloat162float(r[row]);
  const Vec8 xv = HINTS ? load_no_l1(x + i) : load(x + i);
  const Vec8 out = fma8(xv, rv, load(c + cv * V));
  if (HINTS)
    store_cs(y + i, out);
  else
    store(y + i, out);
}

// 2-D grid over row strips: block (bx, by) covers column vectors bx * blockDim.x + t
// of rows by * R .. by * R + R - 1; c's vector is loaded once, all R rows of x are
// loaded before any math.
template <int R, bool HINTS>
__global__ void __launch_bounds__(1024)
    k_rows(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ r,
           const __nv_bfloat16* __restrict__ c, __nv_bfloat16* __restrict__ y, unsigned rows,
           unsigned cols) {
  const unsigned cv = blockIdx.x * blockDim.x + threadIdx.x;
  if (cv >= cols / V) return;
  const unsigned row0 = blockIdx.y * R;
  const Vec8 cvec = load(c + cv * V);
  Vec8 xv[R];
  float rv[R];
#pragma unroll
  for (int k = 0; k < R; ++k) {
    if (row0 + k >= rows) break;
    const size_t i = (size_t)(row0 + k) * cols + cv * V;
    xv[k] = HINTS ? load_no_l1(x + i) : load(x + i);
    rv[k] = __bfloat162float(r[row0 + k]);
  }
#pragma unroll
  for (int k = 0; k < R; ++k) {
    if (row0 + k >= rows) break;
    const size_t i = (size_t)(row0 + k) * cols + cv * V;
    const Vec8 out = fma8(xv[k], rv[k], cvec);
    if (HINTS)
      store_cs(y + i, out);
    else
      store(y + i, out);
  }
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const unsigned rows = argc > 2 ? atoi(argv[1]) : 16384, cols = argc > 2 ? atoi(argv[2]) : 16384;
  const size_t n = (size_t)rows * cols;
  printf("y = x * r + c, bf16, x [%u, %u] (%zu elements)\n", rows, cols, n);
  std::vector<__nv_bfloat16> hx(n), hr(rows), hc(cols);
  unsigned s = 12345;
  auto rnd = [&] {
    s = s * 1664525u + 1013904223u;
    return __float2bfloat16(((s >> 8) * (1.0f / 16777216.0f)) * 2.f - 1.f);
  };
  for (auto& v : hx) v = rnd();
  for (auto& v : hr) v = rnd();
  for (auto& v : hc) v = rnd();
  __nv_bfloat16 *x, *r, *c, *y;
  check(cudaMalloc(&x, n * 2), "malloc");
  check(cudaMalloc(&y, n * 2), "malloc");
  check(cudaMalloc(&r, rows * 2), "malloc");
  check(cudaMalloc(&c, cols * 2), "malloc");
  cudaMemcpy(x, hx.data(), n * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(r, hr.data(), rows * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(c, hc.data(), cols * 2, cudaMemcpyHostToDevice);
  void* flush;
  const size_t flush_bytes = 256u << 20;
  check(cudaMalloc(&flush, flush_bytes), "malloc");

  struct Variant {
    std::string name;
    std::function<void()> run;
    std::vector<float> rounds;
  };
  std::vector<Variant> variants;
  variants.push_back(
      {"cudaMemcpy D2D", [&] { cudaMemcpyAsync(y, x, n * 2, cudaMemcpyDeviceToDevice); }});
  for (int block : {128, 256, 512}) {
    const unsigned vectors = n / V, grid = (vectors + block - 1) / block;
    variants.push_back(
        {"1d block " + std::to_string(block), [=] { k_1d<<<grid, block>>>(x, r, c, y, n, cols); }});
    variants.push_back({"1d32 block " + std::to_string(block),
                        [=] { k_1d32<<<grid, block>>>(x, r, c, y, n, cols); }});
    const dim3 g2((cols / V + block - 1) / block, rows);
    variants.push_back({"2d block " + std::to_string(block),
                        [=] { k_2d<false><<<g2, block>>>(x, r, c, y, cols); }});
    variants.push_back({"2d+hints block " + std::to_string(block),
                        [=] { k_2d<true><<<g2, block>>>(x, r, c, y, cols); }});
  }
  for (int block : {128, 256}) {
    const unsigned bx = (cols / V + block - 1) / block;
    variants.push_back({"rows2 block " + std::to_string(block), [=] {
                          k_rows<2, false>
                              <<<dim3(bx, (rows + 1) / 2), block>>>(x, r, c, y, rows, cols);
                        }});
    variants.push_back({"rows4 block " + std::to_string(block), [=] {
                          k_rows<4, false>
                              <<<dim3(bx, (rows + 3) / 4), block>>>(x, r, c, y, rows, cols);
                        }});
    variants.push_back({"rows4+hints block " + std::to_string(block), [=] {
                          k_rows<4, true>
                              <<<dim3(bx, (rows + 3) / 4), block>>>(x, r, c, y, rows, cols);
                        }});
    variants.push_back({"rows8 block " + std::to_string(block), [=] {
                          k_rows<8, false>
                              <<<dim3(bx, (rows + 7) / 8), block>>>(x, r, c, y, rows, cols);
                        }});
  }

  // Correctness: every kernel variant against the host on 64 sampled rows.
  std::vector<__nv_bfloat16> out(n);
  for (size_t v = 1; v < variants.size(); ++v) {
    cudaMemset(y, 0, n * 2);
    variants[v].run();
    check(cudaDeviceSynchronize(), variants[v].name.c_str());
    cudaMemcpy(out.data(), y, n * 2, cudaMemcpyDeviceToHost);
    size_t bad = 0;
    for (unsigned k = 0; k < 64; ++k) {
      const unsigned row = (unsigned)((k * 2654435761u) % rows);
      for (unsigned col = 0; col < cols; ++col) {
        const size_t i = (size_t)row * cols + col;
        const float want = __bfloat162float(__float2bfloat16(
            __bfloat162float(hx[i]) * __bfloat162float(hr[row]) + __bfloat162float(hc[col])));
        if (__bfloat162float(out[i]) != want) ++bad;
      }
    }
    if (bad) {
      printf("%s: %zu wrong\n", variants[v].name.c_str(), bad);
      return 1;
    }
  }
  printf("all variants correct on 64 sampled rows\n");

  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int round = 0; round < 5; ++round) {
    for (auto& v : variants) {
      std::vector<float> t;
      for (int rep = 0; rep < 23; ++rep) {
        cudaMemsetAsync(flush, rep, flush_bytes);
        cudaEventRecord(start);
        v.run();
        cudaEventRecord(stop);
        cudaEventSynchronize(stop);
        float ms;
        cudaEventElapsedTime(&ms, start, stop);
        if (rep >= 3) t.push_back(ms);
      }
      std::sort(t.begin(), t.end());
      v.rounds.push_back(t[t.size() / 2]);
    }
  }
  check(cudaGetLastError(), "timing");
  auto median = [](std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const float copy = median(variants[0].rounds);
  printf("%-28s %9s %8s %s\n", "variant", "ms", "TB/s", "% of copy  (rounds)");
  for (auto& v : variants) {
    const float ms = median(v.rounds);
    printf("%-28s %9.4f %8.3f %6.1f%%   (", v.name.c_str(), ms, 2.0 * n * 2 / ms / 1e9,
           100 * copy / ms);
    for (float t : v.rounds) printf(" %.4f", t);
    printf(" )\n");
  }
  return 0;
}
