// experiment.cuh — what the experiments in this folder share: their input (2^28
// floats uniform in [-10, 10), the same on every run) and their timer (CUDA events
// around the call, 3 warm-up runs, the median of 20).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

namespace experiment {

// n floats in [-10, 10) from a fixed linear congruential sequence.
inline std::vector<float> inputs(long long n) {
  std::vector<float> h(n);
  unsigned s = 12345;
  for (long long i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    h[i] = ((s >> 8) * (1.0f / 16777216.0f)) * 20.f - 10.f;
  }
  return h;
}

class Timer {
 public:
  Timer() {
    cudaEventCreate(&start_);
    cudaEventCreate(&stop_);
  }
  ~Timer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  // The median of 20 timed calls of f (after 3 untimed), in ms.
  template <class F>
  float median_ms(F f) {
    std::vector<float> t;
    for (int r = 0; r < 3; ++r) f();
    for (int r = 0; r < 20; ++r) {
      cudaEventRecord(start_);
      f();
      cudaEventRecord(stop_);
      cudaEventSynchronize(stop_);
      float ms;
      cudaEventElapsedTime(&ms, start_, stop_);
      t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return t[10];
  }

 private:
  cudaEvent_t start_, stop_;
};

}  // namespace experiment
