#include "kjit/runtime/attention_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>

namespace kjit::attention {

matmul::DType host_dtype(const Problem& p) {
  return p.dtype == ir::DType::F16 ? matmul::DType::F16 : matmul::DType::BF16;
}

HostAttention make_host_attention(const Problem& p, uint64_t seed, float spread) {
  HostAttention host;
  host.problem = p;
  const auto q_count = static_cast<size_t>(p.total_q() * p.heads * p.head_dim);
  const auto kv_count = static_cast<size_t>(p.total_k() * p.kv_heads * p.head_dim);
  host.q = matmul::random_tensor(host_dtype(p), q_count, seed, -spread, spread);
  host.k = matmul::random_tensor(host_dtype(p), kv_count, seed + 1, -spread, spread);
  host.v = matmul::random_tensor(host_dtype(p), kv_count, seed + 2, -1.0f, 1.0f);
  return host;
}

std::vector<Sample> samples_to_check(const Problem& p, uint64_t seed) {
  const double per_row = static_cast<double>(p.seq_k) * p.head_dim * 2;
  const double all_rows = static_cast<double>(p.total_q() * p.heads);
  std::vector<Sample> samples;
  if (all_rows * per_row <= 1e8) {
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t r = 0; r < p.seq_q_of(b); ++r) samples.push_back({b, h, r});
    return samples;
  }
  const auto budget = static_cast<int64_t>(std::max(16.0, 1e8 / per_row));
  std::mt19937_64 random(seed);
  std::set<std::tuple<int64_t, int64_t, int64_t>> chosen;
  auto add = [&](int64_t b, int64_t h, int64_t r) {
    if (r >= 0 && r < p.seq_q_of(b)) chosen.insert({b, h, r});
  };
  // Edges: the first and last rows of the first and last (batch, head), and rows
  // on both sides of every 64-row boundary near the start and the end.
  for (const int64_t b : {int64_t{0}, p.batch - 1}) {
    for (const int64_t h : {int64_t{0}, p.heads - 1}) {
      for (const int64_t r : {int64_t{0}, int64_t{1}, p.seq_q - 1, p.seq_q - 2, int64_t{15},
                              int64_t{16}, int64_t{63}, int64_t{64}, int64_t{127}, int64_t{128}})
        add(b, h, r);
    }
  }
  for (int64_t tries = 0; static_cast<int64_t>(chosen.size()) < budget &&
                          static_cast<double>(chosen.size()) < all_rows && tries < 16 * budget;
       ++tries) {
    const auto b = static_cast<int64_t>(random() % p.batch);
    add(b, static_cast<int64_t>(random() % p.heads),
        static_cast<int64_t>(random() % static_cast<uint64_t>(p.seq_q_of(b))));
  }
  for (const auto& [b, h, r] : chosen) samples.push_back({b, h, r});
  return samples;
}

void reference_row(const HostAttention& host, const Sample& s, double* o, double* lse) {
  const Problem& p = host.problem;
  const int64_t d = p.head_dim;
  const int64_t kv_head = s.head / (p.heads / p.kv_heads);
  const int64_t seq_q = p.seq_q_of(s.batch), seq_k = p.seq_k_of(s.batch);
  const int64_t offset = seq_k - seq_q;
  const int64_t left = p.window_left, right = p.right();
  const double scale = p.softmax_scale();
  // Tokens are [batch, seq, ...] or packed [tokens, ...]: the sequence's first token.
  const int64_t q_token0 = p.packed() ? p.cu_seqlens_q[s.batch] : s.batch * p.seq_q;
  const int64_t k_token0 = p.packed() ? p.cu_seqlens_k[s.batch] : s.batch * p.seq_k;
  const float* q = host.q.values.data() + ((q_token0 + s.row) * p.heads + s.head) * d;
  auto key_row = [&](const matmul::HostTensor& t, int64_t j) {
    return t.values.data() + ((k_token0 + j) * p.kv_heads + kv_head) * d;
  };
  std::vector<double> score(static_cast<size_t>(seq_k), 0.0);
  std::vector<char> visible(static_cast<size_t>(seq_k), 0);
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < seq_k; ++j) {
    const int64_t rel = j - s.row - offset;
    if ((right >= 0 && rel > right) || (left >= 0 && rel < -left)) continue;
    const float* k = key_row(host.k, j);
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * k[c];
    score[j] = dot * scale;
    visible[j] = 1;
    max = std::max(max, score[j]);
  }
  std::fill(o, o + d, 0.0);
  if (max == -std::numeric_limits<double>::infinity()) {
    *lse = max;
    return;
  }
  double sum = 0;
  for (int64_t j = 0; j < seq_k; ++j) {
    if (!visible[j]) continue;
    const double e = std::exp(score[j] - max);
    sum += e;
    const float* v = key_row(host.v, j);
    for (int64_t c = 0; c < d; ++c) o[c] += e * v[c];
  }
  for (int64_t c = 0; c < d; ++c) o[c] /= sum;
  *lse = max + std::log(sum);
}

std::string AttentionCheck::describe() const {
  std::string text = fmt::format("{} rows, relative L2 {:.3g}, LSE max error {:.3g}", rows,
                                 relative_l2, lse_max_error);
  if (nan_count > 0) text += fmt::format(", {} NaN", nan_count);
  if (lse_bad) text += ", LSE of a fully masked row is not -inf (or is NaN)";
  if (!first_bad.empty()) text += "; first bad: " + first_bad;
  return text;
}

AttentionCheck check_attention(const HostAttention& host, const std::vector<double>& o,
                               const Strides& os, const std::vector<float>& lse,
                               const std::vector<Sample>& samples) {
  const Problem& p = host.problem;
  const int64_t d = p.head_dim;
  AttentionCheck result;
  std::vector<double> ref(static_cast<size_t>(d));
  double error2 = 0, norm2 = 0;
  for (const Sample& s : samples) {
    double ref_lse = 0;
    reference_row(host, s, ref.data(), &ref_lse);
    const int64_t q_token0 = p.packed() ? p.cu_seqlens_q[s.batch] : 0;
    const int64_t base = s.batch * os.batch + (q_token0 + s.row) * os.seq + s.head * os.head;
    for (int64_t c = 0; c < d; ++c) {
      const double got = o[static_cast<size_t>(base + c)];
      if (std::isnan(got)) ++result.nan_count;
      const double diff = got - ref[c];
      error2 += diff * diff;
      norm2 += ref[c] * ref[c];
      if (result.first_bad.empty() && !(std::abs(diff) <= 0.05 * (std::abs(ref[c]) + 0.05)))
        result.first_bad = fmt::format("batch {} head {} row {} d {}: {:.5g} vs {:.5g}", s.batch,
                                       s.head, s.row, c, got, ref[c]);
    }
    if (!lse.empty()) {
      const int64_t index = p.packed() ? s.head * p.total_q() + q_token0 + s.row
                                       : (s.batch * p.heads + s.head) * p.seq_q + s.row;
      const double got = lse[static_cast<size_t>(index)];
      if (std::isnan(got)) {
        result.lse_bad = true;
      } else if (std::isinf(ref_lse)) {
        if (!(std::isinf(got) && got < 0)) result.lse_bad = true;
      } else {
        result.lse_max_error = std::max(result.lse_max_error, std::abs(got - ref_lse));
      }
    }
    ++result.rows;
  }
  result.relative_l2 = norm2 > 0 ? std::sqrt(error2 / norm2) : std::sqrt(error2);
  return result;
}

double check_tolerance(const Problem&) {
  return 1e-2;
}

}  // namespace kjit::attention
