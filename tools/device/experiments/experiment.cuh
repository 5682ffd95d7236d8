// experiment.cuh — what the experiments in this folder share: their input (2^28
// floats uniform in [-10, 10), the same on every run) and their timer (CUDA events
// around the call, 3 warm-up runs, the median of 20).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
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

// The in and out buffers of n floats on the device (in holding inputs(n)), and the
// SM count the grids are sized by.
struct Setup {
  long long n = 0;
  std::vector<float> host;
  float* in = nullptr;
  float* out = nullptr;
  int sms = 0;
};
inline Setup setup(long long n) {
  Setup s;
  s.n = n;
  s.host = inputs(n);
  cudaMalloc(&s.in, n * 4);
  cudaMalloc(&s.out, n * 4);
  cudaMemcpy(s.in, s.host.data(), n * 4, cudaMemcpyHostToDevice);
  cudaDeviceGetAttribute(&s.sms, cudaDevAttrMultiProcessorCount, 0);
  return s;
}

// Prints the copy line (the median of the rounds' cudaMemcpy times and every
// round) and returns that median.
inline float report_copy(std::vector<float> rounds) {
  std::sort(rounds.begin(), rounds.end());
  const float copy = rounds[rounds.size() / 2];
  printf("copy (cudaMemcpy D2D) %.4f ms  rounds:", copy);
  for (float c : rounds) printf(" %.4f", c);
  printf("\n");
  return copy;
}

// One variant's line: the median of its rounds, as a fraction of copy, and the
// fastest round; `extra` is appended.
inline void report_variant(const char* name, std::vector<float> rounds, float copy,
                           const char* extra = "") {
  std::sort(rounds.begin(), rounds.end());
  const float median = rounds[rounds.size() / 2];
  printf("%-52s %.4f ms  %5.1f%% of copy  (min round %.4f)%s\n", name, median, 100 * copy / median,
         rounds[0], extra);
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
