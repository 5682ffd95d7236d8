// kjit/demo.cuh — the smallest complete kjit kernel, used by `kjit demo` and the
// runtime tests: y[i] = a * x[i] + y[i] over n floats.
//
// One idea only: a grid-stride loop, so any grid size covers any n and a grid of
// whole waves (SM count × resident blocks) keeps every SM busy to the end.
#pragma once

namespace kjit {

__device__ __forceinline__ void saxpy_grid_stride(float a, const float* __restrict__ x,
                                                  float* __restrict__ y, long long n) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    y[i] = a * x[i] + y[i];
}

}  // namespace kjit

// Generated code instantiates templates; the demo kernel is written out once here.
extern "C" __global__ void kjit_demo_saxpy(float a, const float* __restrict__ x,
                                           float* __restrict__ y, long long n) {
  kjit::saxpy_grid_stride(a, x, y, n);
}
