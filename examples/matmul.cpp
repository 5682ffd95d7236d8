// Embedding kjit's matmul: C = gelu(A·B + bias) in bf16 with fp32 accumulation,
// the epilogue fused into the tensor-core kernel, the config from the tuner (the
// store's tuning for this GPU, else the nearest tuned shape, else the model).
// Checked against an fp64 reference on a sample of outputs.
#include <kjit/kjit.h>
#include <kjit/support/half.h>

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
    kjit::Runtime runtime;
    kjit::matmul::Problem problem;  // row-major A (M x K) and B (K x N): layout "nn"
    problem.m = 1000, problem.n = 1536, problem.k = 4096;  // any sizes; odd ones are padded
    problem.epilogue = kjit::matmul::epilogue_from_ir("gelu(acc + bias)", problem.input).epilogue;
    kjit::matmul::Matmul gemm(runtime, problem);

    auto random = [](size_t count, float scale) {
      std::vector<uint16_t> v(count);
      uint32_t state = 12345;
      for (auto& x : v) {
        state = state * 1664525u + 1013904223u;
        x = kjit::f32_to_bf16(scale * ((state >> 8) * (1.0f / 16777216.0f) - 0.5f));
      }
      return v;
    };
    const int64_t m = problem.m, n = problem.n, k = problem.k;
    std::vector<uint16_t> a = random(m * k, 1.0f), b = random(k * n, 1.0f), bias = random(n, 2.0f);
    auto da = kjit::cuda::DeviceBuffer::from(a), db = kjit::cuda::DeviceBuffer::from(b);
    auto dbias = kjit::cuda::DeviceBuffer::from(bias);
    kjit::cuda::DeviceBuffer dc(m * n * sizeof(uint16_t));

    kjit::cuda::Stream stream;
    kjit::matmul::Tensors tensors;
    tensors.a = da.get(), tensors.b = db.get(), tensors.c = dc.get();
    tensors.extras = {{dbias.get()}};  // one per epilogue operand, in Epilogue::operands order
    gemm.launch(tensors, stream.get());
    stream.synchronize();

    std::vector<uint16_t> c = dc.to_host<uint16_t>();
    double worst = 0;
    for (int64_t i = 0; i < m; i += 37) {
      for (int64_t j = 0; j < n; j += 41) {
        double acc = kjit::bf16_to_f32(bias[j]);
        for (int64_t p = 0; p < k; ++p)
          acc += double(kjit::bf16_to_f32(a[i * k + p])) * kjit::bf16_to_f32(b[p * n + j]);
        double want = 0.5 * acc * (1 + std::erf(acc / std::sqrt(2.0)));
        double got = kjit::bf16_to_f32(c[i * n + j]);
        worst = std::max(worst, std::abs(got - want) / (1 + std::abs(want)));
      }
    }
    std::printf("%s (%s): max relative error %.2e\n", gemm.source().name.c_str(),
                gemm.config().to_string().c_str(), worst);
    return worst < 2e-2 ? 0 : 1;
  } catch (const kjit::UserError& e) {
    std::fprintf(stderr, "kjit: %s\n", e.what());
  } catch (const kjit::Error& e) {
    std::fprintf(stderr, "kjit failed: %s\n", e.what());
  }
  return 1;
}
