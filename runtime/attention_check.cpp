#include "kjit/runtime/attention_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <thread>

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
  std::mt19937_64 random(seed + 3);
  for (const ModifierOperand& o : p.modifier_operands()) {
    HostOperand operand{o, {}, {}};
    const int64_t count = o.kind == ModifierOperandKind::PerHead    ? p.heads
                          : o.kind == ModifierOperandKind::PerQuery ? p.seq_q
                                                                    : p.seq_k;
    if (o.dtype == ir::DType::I32) {
      std::uniform_int_distribution<int32_t> position(
          0, static_cast<int32_t>(std::max(p.seq_q, p.seq_k)));
      std::vector<int32_t> values(static_cast<size_t>(count));
      for (int32_t& v : values) {
        v = position(random);
        operand.values.push_back(v);
      }
      const auto* raw = reinterpret_cast<const unsigned char*>(values.data());
      operand.bytes.assign(raw, raw + values.size() * sizeof(int32_t));
    } else {
      const matmul::DType dtype = o.dtype == ir::DType::F16    ? matmul::DType::F16
                                  : o.dtype == ir::DType::BF16 ? matmul::DType::BF16
                                                               : matmul::DType::F32;
      const matmul::HostTensor t =
          matmul::random_tensor(dtype, static_cast<size_t>(count), random(), 0.0f, 1.0f);
      operand.values.assign(t.values.begin(), t.values.end());
      operand.bytes = t.bytes();
    }
    host.operands.push_back(std::move(operand));
  }
  return host;
}

std::vector<CUdeviceptr> DeviceOperands::pointers() const {
  std::vector<CUdeviceptr> out;
  for (const cuda::DeviceBuffer& b : buffers) out.push_back(b.get());
  return out;
}

DeviceOperands upload_operands(const HostAttention& host) {
  DeviceOperands out;
  for (const HostOperand& o : host.operands)
    out.buffers.push_back(cuda::DeviceBuffer::from(o.bytes));
  return out;
}

HostModifiers::HostModifiers(const HostAttention& host) : host_(&host) {
  if (!host.problem.score_mod.empty()) score_ = cached_score_mod(host.problem.score_mod);
  if (!host.problem.mask_mod.empty()) mask_ = cached_mask_mod(host.problem.mask_mod);
}

ScorePoint HostModifiers::point(int64_t head, int64_t q_idx, int64_t kv_idx, double s, size_t first,
                                size_t count) const {
  ScorePoint point;
  point.s = s;
  point.q_idx = q_idx;
  point.kv_idx = kv_idx;
  point.head = head;
  for (size_t i = first; i < first + count; ++i) {
    const HostOperand& o = host_->operands[i];
    const int64_t index = o.operand.kind == ModifierOperandKind::PerHead    ? head
                          : o.operand.kind == ModifierOperandKind::PerQuery ? q_idx
                                                                            : kv_idx;
    point.operands.push_back(o.values[static_cast<size_t>(index)]);
  }
  return point;
}

bool HostModifiers::keeps(int64_t head, int64_t q_idx, int64_t kv_idx) const {
  if (!mask_) return true;
  const size_t first = score_ ? score_->operands.size() : 0;
  return mask_->reference(point(head, q_idx, kv_idx, 0, first, mask_->operands.size())) != 0;
}

double HostModifiers::score(int64_t head, int64_t q_idx, int64_t kv_idx, double s) const {
  if (!score_) return s;
  return score_->reference(point(head, q_idx, kv_idx, s, 0, score_->operands.size()));
}

double HostModifiers::slope(int64_t head, int64_t q_idx, int64_t kv_idx, double s) const {
  if (!score_) return 1;
  return score_->gradient(point(head, q_idx, kv_idx, s, 0, score_->operands.size()));
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
  const HostModifiers modifiers(host);
  std::vector<double> score(static_cast<size_t>(seq_k), 0.0);
  std::vector<char> visible(static_cast<size_t>(seq_k), 0);
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < seq_k; ++j) {
    const int64_t rel = j - s.row - offset;
    if ((right >= 0 && rel > right) || (left >= 0 && rel < -left)) continue;
    if (!modifiers.keeps(s.head, s.row, j)) continue;
    const float* k = key_row(host.k, j);
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * k[c];
    score[j] = modifiers.score(s.head, s.row, j, dot * scale);
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

GradientReference reference_gradients(const HostAttention& host, const matmul::HostTensor& d_o,
                                      int64_t batch, int64_t kv_head) {
  const Problem& p = host.problem;
  const int64_t d = p.head_dim, group = p.heads / p.kv_heads;
  const int64_t seq_q = p.seq_q_of(batch), seq_k = p.seq_k_of(batch);
  const int64_t offset = seq_k - seq_q;
  const int64_t left = p.window_left, right = p.right();
  const double scale = p.softmax_scale();
  const int64_t q_token0 = p.packed() ? p.cu_seqlens_q[batch] : batch * p.seq_q;
  const int64_t k_token0 = p.packed() ? p.cu_seqlens_k[batch] : batch * p.seq_k;
  auto query_row = [&](const matmul::HostTensor& t, int64_t head, int64_t i) {
    return t.values.data() + ((q_token0 + i) * p.heads + head) * d;
  };
  auto key_row = [&](const matmul::HostTensor& t, int64_t j) {
    return t.values.data() + ((k_token0 + j) * p.kv_heads + kv_head) * d;
  };
  const HostModifiers modifiers(host);
  GradientReference out;
  out.batch = batch;
  out.kv_head = kv_head;
  out.dq.assign(static_cast<size_t>(group * seq_q * d), 0.0);
  out.dk.assign(static_cast<size_t>(seq_k * d), 0.0);
  out.dv.assign(static_cast<size_t>(seq_k * d), 0.0);

  // Rows (head, i) split over threads; each thread sums its own dK, dV.
  const int64_t rows = group * seq_q;
  const auto threads =
      static_cast<int64_t>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 32));
  std::vector<std::vector<double>> dk_parts(static_cast<size_t>(threads)),
      dv_parts(static_cast<size_t>(threads));
  auto work = [&](int64_t part) {
    std::vector<double>& dk = dk_parts[part];
    std::vector<double>& dv = dv_parts[part];
    dk.assign(out.dk.size(), 0.0);
    dv.assign(out.dv.size(), 0.0);
    std::vector<double> prob(static_cast<size_t>(seq_k)), dprob(static_cast<size_t>(seq_k));
    std::vector<double> slope(static_cast<size_t>(seq_k), 1.0);  // d mod(s) / ds
    std::vector<char> visible(static_cast<size_t>(seq_k));
    for (int64_t r = part; r < rows; r += threads) {
      const int64_t h = r / seq_q, i = r % seq_q, head = kv_head * group + h;
      const float* q = query_row(host.q, head, i);
      const float* g = query_row(d_o, head, i);
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < seq_k; ++j) {
        const int64_t rel = j - i - offset;
        visible[j] = !((right >= 0 && rel > right) || (left >= 0 && rel < -left)) &&
                     modifiers.keeps(head, i, j);
        if (!visible[j]) continue;
        const float* k = key_row(host.k, j);
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * k[c];
        prob[j] = modifiers.score(head, i, j, dot * scale);
        slope[j] = modifiers.slope(head, i, j, dot * scale);
        max = std::max(max, prob[j]);
      }
      if (max == -std::numeric_limits<double>::infinity()) continue;  // no key: all zero
      double sum = 0;
      for (int64_t j = 0; j < seq_k; ++j)
        if (visible[j]) sum += (prob[j] = std::exp(prob[j] - max));
      double delta = 0;  // D_i = sum_j P_ij dP_ij
      for (int64_t j = 0; j < seq_k; ++j) {
        if (!visible[j]) continue;
        prob[j] /= sum;
        const float* v = key_row(host.v, j);
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(g[c]) * v[c];
        dprob[j] = dot;
        delta += prob[j] * dot;
      }
      double* dq = out.dq.data() + r * d;  // rows of distinct threads never overlap
      for (int64_t j = 0; j < seq_k; ++j) {
        if (!visible[j]) continue;
        const double ds = prob[j] * (dprob[j] - delta) * slope[j];
        const float* k = key_row(host.k, j);
        double* dk_row = dk.data() + j * d;
        double* dv_row = dv.data() + j * d;
        for (int64_t c = 0; c < d; ++c) {
          dq[c] += scale * ds * k[c];
          dk_row[c] += scale * ds * q[c];
          dv_row[c] += prob[j] * g[c];
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) pool.emplace_back(work, t);
  for (std::thread& t : pool) t.join();
  for (int64_t t = 0; t < threads; ++t) {
    for (size_t e = 0; e < out.dk.size(); ++e) {
      out.dk[e] += dk_parts[t][e];
      out.dv[e] += dv_parts[t][e];
    }
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> gradient_groups_to_check(const Problem& p, uint64_t seed) {
  const int64_t group = p.heads / p.kv_heads;
  auto cost = [&](int64_t b) {
    return 4.0 * static_cast<double>(group) * static_cast<double>(p.seq_q_of(b)) *
           static_cast<double>(p.seq_k_of(b)) * p.head_dim;
  };
  std::vector<std::pair<int64_t, int64_t>> out;
  std::set<std::pair<int64_t, int64_t>> chosen;
  double spent = 0;
  auto add = [&](int64_t b, int64_t kv) {
    if (chosen.count({b, kv}) || (!out.empty() && spent + cost(b) > 2e9)) return;
    chosen.insert({b, kv});
    out.push_back({b, kv});
    spent += cost(b);
  };
  add(0, 0);
  add(p.batch - 1, p.kv_heads - 1);
  std::mt19937_64 random(seed);
  for (int tries = 0; tries < 64; ++tries)
    add(static_cast<int64_t>(random() % p.batch), static_cast<int64_t>(random() % p.kv_heads));
  return out;
}

std::string BackwardCheck::describe() const {
  std::string text = fmt::format(
      "{} (batch, kv head) groups, relative L2 dQ {:.3g} dK {:.3g} "
      "dV {:.3g}",
      groups, dq_relative_l2, dk_relative_l2, dv_relative_l2);
  if (nan_count > 0) text += fmt::format(", {} NaN", nan_count);
  if (!first_bad.empty()) text += "; first bad: " + first_bad;
  return text;
}

BackwardCheck check_backward(const HostAttention& host, const matmul::HostTensor& d_o,
                             const std::vector<double>& dq, const std::vector<double>& dk,
                             const std::vector<double>& dv, const BackwardTensors& t,
                             const std::vector<std::pair<int64_t, int64_t>>& groups) {
  const Problem& p = host.problem;
  const int64_t d = p.head_dim, group = p.heads / p.kv_heads;
  BackwardCheck result;
  double error2[3] = {0, 0, 0}, norm2[3] = {0, 0, 0};
  auto compare = [&](int which, const char* name, double got, double want,
                     const std::string& where) {
    if (std::isnan(got)) ++result.nan_count;
    const double diff = got - want;
    error2[which] += diff * diff;
    norm2[which] += want * want;
    if (result.first_bad.empty() && !(std::abs(diff) <= 0.1 * (std::abs(want) + 0.02)))
      result.first_bad = fmt::format("{} {}: {:.5g} vs {:.5g}", name, where, got, want);
  };
  for (const auto& [b, kv] : groups) {
    const GradientReference ref = reference_gradients(host, d_o, b, kv);
    const int64_t q_token0 = p.packed() ? p.cu_seqlens_q[b] : 0;
    const int64_t k_token0 = p.packed() ? p.cu_seqlens_k[b] : 0;
    for (int64_t h = 0; h < group; ++h) {
      const int64_t head = kv * group + h;
      for (int64_t i = 0; i < p.seq_q_of(b); ++i) {
        const int64_t base =
            b * t.dq_strides.batch + (q_token0 + i) * t.dq_strides.seq + head * t.dq_strides.head;
        for (int64_t c = 0; c < d; ++c)
          compare(0, "dQ", dq[static_cast<size_t>(base + c)],
                  ref.dq[static_cast<size_t>((h * p.seq_q_of(b) + i) * d + c)],
                  fmt::format("batch {} head {} row {} d {}", b, head, i, c));
      }
    }
    for (int64_t j = 0; j < p.seq_k_of(b); ++j) {
      const int64_t k_base =
          b * t.dk_strides.batch + (k_token0 + j) * t.dk_strides.seq + kv * t.dk_strides.head;
      const int64_t v_base =
          b * t.dv_strides.batch + (k_token0 + j) * t.dv_strides.seq + kv * t.dv_strides.head;
      for (int64_t c = 0; c < d; ++c) {
        const std::string where = fmt::format("batch {} kv head {} key {} d {}", b, kv, j, c);
        compare(1, "dK", dk[static_cast<size_t>(k_base + c)],
                ref.dk[static_cast<size_t>(j * d + c)], where);
        compare(2, "dV", dv[static_cast<size_t>(v_base + c)],
                ref.dv[static_cast<size_t>(j * d + c)], where);
      }
    }
    ++result.groups;
  }
  auto relative = [&](int which) {
    return norm2[which] > 0 ? std::sqrt(error2[which] / norm2[which]) : std::sqrt(error2[which]);
  };
  result.dq_relative_l2 = relative(0);
  result.dk_relative_l2 = relative(1);
  result.dv_relative_l2 = relative(2);
  return result;
}

double backward_tolerance(const Problem&) {
  return 2e-2;
}

}  // namespace kjit::attention
