// Embedding kjit: fuse y = x * sigmoid(x) * g into one kernel and run it on your
// own buffers and stream. (This file is the README's example; a test builds and
// runs it against the installed package, and checks that the README shows it
// unchanged.)
#include <kjit/kjit.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  std::string why;
  if (!kjit::gpu_available(&why)) {
    std::fprintf(stderr, "no GPU: %s\n", why.c_str());
    return 1;
  }
  try {
    kjit::Runtime runtime;  // device 0; kernels cached in memory and in the SQLite store
    kjit::ElementwiseKernel kernel(runtime, kjit::ir::parse("y = x * sigmoid(x) * g"));

    const int64_t n = 1 << 20;
    std::vector<float> x(n), g(n);
    for (int64_t i = 0; i < n; ++i) x[i] = std::sin(0.001f * i), g[i] = std::cos(0.002f * i);
    auto dx = kjit::cuda::DeviceBuffer::from(x), dg = kjit::cuda::DeviceBuffer::from(g);
    kjit::cuda::DeviceBuffer dy(n * sizeof(float));

    kjit::cuda::Stream stream;
    kernel.launch({{dx.get(), kjit::ir::DType::F32, {n}}, {dg.get(), kjit::ir::DType::F32, {n}}},
                  {{dy.get(), kjit::ir::DType::F32, {n}}}, stream.get());
    stream.synchronize();

    std::vector<float> y = dy.to_host<float>();
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      double want = x[i] / (1 + std::exp(-double(x[i]))) * g[i];
      worst = std::max(worst, std::abs(y[i] - want));
    }
    std::printf("%s: max |error| %.2e\n", kernel.last_launch().kernel_name.c_str(), worst);
    return worst < 1e-5 ? 0 : 1;
  } catch (const kjit::UserError& e) {  // bad input: the message says how to fix it
    std::fprintf(stderr, "kjit: %s\n", e.what());
  } catch (const kjit::Error& e) {  // compile, CUDA or store failure
    std::fprintf(stderr, "kjit failed: %s\n", e.what());
  }
  return 1;
}
