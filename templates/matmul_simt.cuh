// kjit/matmul_simt.cuh — the exact fp32 path: C = epilogue(alpha * op(A) * op(B) +
// beta * C0) with f32 inputs on the CUDA cores (one fmaf per multiply-add, no
// TF32 rounding), for users who need fp32 results bit-close to a CPU reference.
//
// Correctness first, simple tiling second: a 64 x 64 tile per block of 256 threads,
// BK = 16 per step through shared memory, each thread 4 rows x 4 columns (two
// column pairs, so the stores share store_two() with the tensor-core kernel).
// Any layout, any alignment: scalar loads, masked at every edge.
#pragma once

#include "kjit/matmul.cuh"

namespace kjit {
namespace matmul {

template <typename TC, bool A_K_MAJOR, bool B_K_MAJOR>
struct SimtMatmul {
  static constexpr int BM = 64, BN = 64, BK = 16, THREADS = 256;
  static constexpr int SHARED_BYTES = 0;  // static shared memory only

  // One operand's BK x ROWS slice into tile[k][row] (zeros past `rows` and k_end):
  // consecutive threads take consecutive addresses in the stored layout (K-major:
  // element (row, k) at p[row * ld + k], else at p[k * ld + row]).
  template <int ROWS, bool K_MAJOR>
  __device__ __forceinline__ static void load_tile(float (&tile)[BK][ROWS + 4], const float* p,
                                                   long long ld, int r0, int rows, int k0,
                                                   int k_end) {
#pragma unroll
    for (int i = 0; i < ROWS * BK / THREADS; ++i) {
      const int e = i * THREADS + static_cast<int>(threadIdx.x);
      const int rr = K_MAJOR ? e / BK : e % ROWS;
      const int kk = K_MAJOR ? e % BK : e / ROWS;
      const int row = r0 + rr, k = k0 + kk;
      float v = 0.0f;
      if (row < rows && k < k_end)
        v = K_MAJOR ? p[static_cast<long long>(row) * ld + k]
                    : p[static_cast<long long>(k) * ld + row];
      tile[kk][rr] = v;
    }
  }

  template <typename Epilogue>
  __device__ __forceinline__ static void run(const MatmulArgs& args, const EpilogueOperands& ops) {
    __shared__ float tile_a[BK][BM + 4];  // [k][m]; +4 keeps 16-byte rows, fewer conflicts
    __shared__ float tile_b[BK][BN + 4];  // [k][n]
    const BlockWork w = block_work<BM, BN>(args);
    const int tile_m = w.tile_m, tile_n = w.tile_n, split = w.split, batch = w.batch;
    const int k_begin = w.k_begin, k_end = w.k_end;
    const int m0 = tile_m * BM, n0 = tile_n * BN;
    const float* a = static_cast<const float*>(args.a) + batch * args.stride_a;
    const float* b = static_cast<const float*>(args.b) + batch * args.stride_b;
    const int tid = threadIdx.x;
    const int tx = tid % 16;  // columns n0 + 2 tx + 32 j + {0, 1}
    const int ty = tid / 16;  // rows m0 + ty + 16 i

    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
      load_tile<BM, A_K_MAJOR>(tile_a, a, args.lda, m0, args.m, k0, k_end);
      load_tile<BN, B_K_MAJOR>(tile_b, b, args.ldb, n0, args.n, k0, k_end);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        float av[4], bv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) av[i] = tile_a[kk][ty + 16 * i];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          bv[2 * j] = tile_b[kk][2 * tx + 32 * j];
          bv[2 * j + 1] = tile_b[kk][2 * tx + 32 * j + 1];
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
      __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        store_two<TC, Epilogue, true>(args, ops, batch, split, m0 + ty + 16 * i,
                                      n0 + 2 * tx + 32 * j, acc[i][2 * j], acc[i][2 * j + 1]);
    if (args.splits > 1) finish_split<TC, Epilogue, BM, BN>(args, ops, w);
  }
};

}  // namespace matmul
}  // namespace kjit
