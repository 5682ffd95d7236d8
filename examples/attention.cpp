// Embedding kjit's flash attention: O = softmax(Q Kᵀ / √D, causal) V for a
// grouped-query layer (32 query heads sharing 8 K/V heads), bf16 in packed BSHD
// tensors ([batch, seq, heads, D]), the config from the tuner (on an H200: the
// TMA + wgmma engine). A few output rows are checked against an fp64 reference.
#include <kjit/kjit.h>
#include <kjit/support/half.h>

#include <algorithm>
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
    kjit::attention::Problem problem;
    problem.batch = 2, problem.heads = 32, problem.kv_heads = 8;
    problem.seq_q = problem.seq_k = 1500;  // any lengths; not a multiple of a tile
    problem.head_dim = 128, problem.causal = true;
    kjit::attention::Attention attention(runtime, problem);

    auto random = [](size_t count, uint32_t seed) {
      std::vector<uint16_t> v(count);
      for (auto& x : v) {
        seed = seed * 1664525u + 1013904223u;
        x = kjit::f32_to_bf16((seed >> 8) * (2.0f / 16777216.0f) - 1.0f);
      }
      return v;
    };
    const int64_t b = problem.batch, s = problem.seq_q, h = problem.heads;
    const int64_t g = problem.kv_heads, d = problem.head_dim;
    std::vector<uint16_t> q = random(b * s * h * d, 1), k = random(b * s * g * d, 2),
                          v = random(b * s * g * d, 3);
    auto dq = kjit::cuda::DeviceBuffer::from(q), dk = kjit::cuda::DeviceBuffer::from(k),
         dv = kjit::cuda::DeviceBuffer::from(v);
    kjit::cuda::DeviceBuffer dout(q.size() * sizeof(uint16_t)), dlse(b * h * s * sizeof(float));

    kjit::cuda::Stream stream;
    attention.launch(
        {.q = dq.get(), .k = dk.get(), .v = dv.get(), .o = dout.get(), .lse = dlse.get()},
        stream.get());
    stream.synchronize();

    // Row r of (batch 1, head 21) reads K/V head 21 / (32 / 8) = 5, keys 0..r.
    const std::vector<uint16_t> out = dout.to_host<uint16_t>();
    const int64_t batch = 1, head = 21, kv_head = head / (h / g);
    double worst = 0;
    for (int64_t r : {int64_t{0}, int64_t{1}, int64_t{700}, s - 1}) {
      std::vector<double> score(r + 1), o(d, 0.0);
      double max = -1e300, sum = 0;
      for (int64_t j = 0; j <= r; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c)
          dot += double(kjit::bf16_to_f32(q[((batch * s + r) * h + head) * d + c])) *
                 kjit::bf16_to_f32(k[((batch * s + j) * g + kv_head) * d + c]);
        score[j] = dot / std::sqrt(double(d));
        max = std::max(max, score[j]);
      }
      for (int64_t j = 0; j <= r; ++j) {
        const double p = std::exp(score[j] - max);
        sum += p;
        for (int64_t c = 0; c < d; ++c)
          o[c] += p * kjit::bf16_to_f32(v[((batch * s + j) * g + kv_head) * d + c]);
      }
      for (int64_t c = 0; c < d; ++c) {
        const double got = kjit::bf16_to_f32(out[((batch * s + r) * h + head) * d + c]);
        worst = std::max(worst, std::abs(got - o[c] / sum));
      }
    }
    std::printf("%s (%s): max abs error %.2e\n", attention.source().name.c_str(),
                attention.config().to_string().c_str(), worst);
    return worst < 2e-2 ? 0 : 1;
  } catch (const kjit::UserError& e) {
    std::fprintf(stderr, "kjit: %s\n", e.what());
  } catch (const kjit::Error& e) {
    std::fprintf(stderr, "kjit failed: %s\n", e.what());
  }
  return 1;
}
