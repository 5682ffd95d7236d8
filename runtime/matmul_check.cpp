#include "kjit/runtime/matmul_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <thread>

#include "kjit/support/error.h"
#include "kjit/support/half.h"
#include "kjit/tuner/check.h"

namespace kjit::matmul {

namespace {

float round_to(DType dtype, float x) {
  switch (dtype) {
    case DType::F32:
    case DType::TF32:  // stored as f32; the tensor cores drop the low bits
      return x;
    case DType::F16:
      return f16_to_f32(f32_to_f16(x));
    case DType::BF16:
      return bf16_to_f32(f32_to_bf16(x));
  }
  return x;
}

// The tanh form of GELU, 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), with
// the hardware's tanh (tanh.approx.f32: one MUFU operation, relative error about
// 2^-11) and three FMAs: 0.5 x tanh(u) + 0.5 x. The special-function unit does 16
// operations per clock per SM, an eighth of the FMA rate, and this epilogue has
// nothing to hide it behind: on the H200 at 4096^3 (bf16 out) it costs +3.5% over
// the plain matmul where the exact form x / (1 + 2^(-2u log2 e)) (an ex2 and a
// reciprocal) cost +6.4%. The error, at most about 2^-11 |x| / 2 absolute, is below
// half a bf16 ulp of the result for x > -1; the tanh form itself differs from the
// erf form by up to 5e-4 (the IR's gelu / gelu_tanh ops are the accurate ones).
constexpr const char* kGelu =
    "__device__ __forceinline__ float kjit_epilogue_fn(float acc, float bias) {\n"
    "  // gelu(x), tanh form: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)\n"
    "  // = x (0.7978846 + 0.0356774 x^2), with the hardware tanh (one MUFU op, ~2^-11)\n"
    "  const float x = acc + bias;\n"
    "  const float u = x * fmaf(0.0356774081f, x * x, 0.7978845608f);\n"
    "  float t;\n"
    "  asm(\"tanh.approx.f32 %0, %1;\" : \"=f\"(t) : \"f\"(u));\n"
    "  const float half_x = 0.5f * x;\n"
    "  return fmaf(half_x, t, half_x);\n"
    "}\n";

double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

}  // namespace

std::vector<unsigned char> HostTensor::bytes() const {
  std::vector<unsigned char> out(values.size() * dtype_bytes(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype_bytes(dtype) == 4) {
      std::memcpy(&out[i * 4], &values[i], 4);
    } else {
      const uint16_t h = dtype == DType::F16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

HostTensor random_tensor(DType dtype, size_t count, uint64_t seed, float lo, float hi) {
  HostTensor t;
  t.dtype = dtype;
  t.values.resize(count);
  // Counter-based (splitmix64 of seed and index), so that threads fill disjoint
  // ranges and the values do not depend on how many there are: a 8192^2 operand
  // takes milliseconds, not seconds.
  auto fill = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      uint64_t z = seed * 0x9E3779B97F4A7C15ull + (i + 1) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
      t.values[i] = round_to(dtype, lo + (hi - lo) * u);
    }
  };
  const size_t threads =
      count < (size_t{1} << 20) ? 1 : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (size_t w = 1; w < threads; ++w)
    pool.emplace_back(fill, count * w / threads, count * (w + 1) / threads);
  fill(0, count / threads);
  for (std::thread& th : pool) th.join();
  return t;
}

std::vector<double> to_doubles(DType dtype, const std::vector<unsigned char>& bytes, size_t count) {
  std::vector<double> out(count);
  for (size_t i = 0; i < count; ++i) {
    if (dtype_bytes(dtype) == 4) {
      float f;
      std::memcpy(&f, &bytes[i * 4], 4);
      out[i] = f;
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      out[i] = dtype == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  }
  return out;
}

std::vector<std::string> builtin_epilogue_names() {
  return {"acc + bias", "gelu(acc + bias)", "relu(acc + bias)", "acc * scale + residual"};
}

LoweredEpilogue builtin_epilogue(const std::string& text, DType dtype) {
  if (dtype == DType::TF32) dtype = DType::F32;  // operands of tf32 problems are f32
  LoweredEpilogue out;
  Epilogue& e = out.epilogue;
  // Marked apart from the IR epilogue of the same text (a different function: the
  // builtin GELU uses the hardware tanh), so the two never share a kernel or a tuning.
  e.text = "builtin:" + text;
  e.function_name = "kjit_epilogue_fn";
  if (text == "acc + bias") {
    e.function_source =
        "__device__ __forceinline__ float kjit_epilogue_fn(float acc, float bias) {\n"
        "  return acc + bias;\n}\n";
    e.operands = {{"bias", OperandKind::ColumnVector, dtype}};
    out.reference = [](double acc, const std::vector<double>& x) { return acc + x[0]; };
  } else if (text == "gelu(acc + bias)") {
    e.function_source = kGelu;
    e.operands = {{"bias", OperandKind::ColumnVector, dtype}};
    out.reference = [](double acc, const std::vector<double>& x) { return gelu(acc + x[0]); };
  } else if (text == "relu(acc + bias)") {
    e.function_source =
        "__device__ __forceinline__ float kjit_epilogue_fn(float acc, float bias) {\n"
        "  return fmaxf(acc + bias, 0.0f);\n}\n";
    e.operands = {{"bias", OperandKind::ColumnVector, dtype}};
    out.reference = [](double acc, const std::vector<double>& x) {
      return std::max(acc + x[0], 0.0);
    };
  } else if (text == "acc * scale + residual") {
    e.function_source =
        "__device__ __forceinline__ float kjit_epilogue_fn(float acc, float scale, float "
        "residual) {\n  return acc * scale + residual;\n}\n";
    e.operands = {{"scale", OperandKind::RowVector, dtype},
                  {"residual", OperandKind::Tensor, dtype}};
    out.reference = [](double acc, const std::vector<double>& x) { return acc * x[0] + x[1]; };
  } else {
    std::string names;
    for (const std::string& n : builtin_epilogue_names()) names += " '" + n + "'";
    throw UserError("unknown matmul epilogue '" + text + "'",
                    "until the elementwise IR is wired in, the built-in epilogues are:" + names);
  }
  return out;
}

HostProblem make_host_problem(
    const Problem& p, uint64_t seed, float alpha, float beta,
    const std::function<double(double, const std::vector<double>&)>& epilogue) {
  HostProblem h;
  h.problem = p;
  h.alpha = alpha;
  h.beta = beta;
  h.epilogue = epilogue;
  h.a = random_tensor(p.input, static_cast<size_t>(p.batch * p.m * p.k), seed * 7 + 1);
  h.b = random_tensor(p.input, static_cast<size_t>(p.batch * p.k * p.n), seed * 7 + 2);
  if (beta != 0.0f)
    h.c0 = random_tensor(p.output, static_cast<size_t>(p.batch * p.m * p.n), seed * 7 + 3);
  for (size_t i = 0; i < p.epilogue.operands.size(); ++i) {
    const EpilogueOperand& op = p.epilogue.operands[i];
    const int64_t per_batch = op.kind == OperandKind::RowVector      ? p.m
                              : op.kind == OperandKind::ColumnVector ? p.n
                                                                     : p.m * p.n;
    h.extras.push_back(
        random_tensor(op.dtype, static_cast<size_t>(per_batch * p.batch), seed * 7 + 4 + i));
  }
  return h;
}

namespace {

// alpha * acc + beta * C0, the epilogue, and the rounding to the output dtype.
double finish(const HostProblem& h, int64_t batch, int64_t row, int64_t col, double acc) {
  const Problem& p = h.problem;
  double v = h.alpha * acc;
  if (h.beta != 0.0f)
    v += h.beta * static_cast<double>(h.c0.values[(batch * p.m + row) * p.n + col]);
  if (h.epilogue) {
    std::vector<double> x;
    for (size_t i = 0; i < p.epilogue.operands.size(); ++i) {
      const EpilogueOperand& op = p.epilogue.operands[i];
      const std::vector<float>& values = h.extras[i].values;
      if (op.kind == OperandKind::RowVector)
        x.push_back(values[batch * p.m + row]);
      else if (op.kind == OperandKind::ColumnVector)
        x.push_back(values[batch * p.n + col]);
      else
        x.push_back(values[(batch * p.m + row) * p.n + col]);
    }
    v = h.epilogue(v, x);
  }
  return round_to(p.output, static_cast<float>(v));
}

// One row of op(A) op(B) in fp64, in the order that reads memory contiguously.
void accumulate_row(const HostProblem& h, int64_t batch, int64_t row, std::vector<double>& acc) {
  const Problem& p = h.problem;
  const float* a = h.a.values.data() + batch * p.m * p.k;
  const float* b = h.b.values.data() + batch * p.k * p.n;
  acc.assign(static_cast<size_t>(p.n), 0.0);
  if (p.b_transposed) {  // B stored N x K: a dot product per column
    for (int64_t col = 0; col < p.n; ++col) {
      double sum = 0;
      for (int64_t k = 0; k < p.k; ++k)
        sum += static_cast<double>(p.a_transposed ? a[k * p.m + row] : a[row * p.k + k]) *
               b[col * p.k + k];
      acc[static_cast<size_t>(col)] = sum;
    }
    return;
  }
  for (int64_t k = 0; k < p.k; ++k) {  // B stored K x N: rows of B, scaled
    const double av = p.a_transposed ? a[k * p.m + row] : a[row * p.k + k];
    const float* brow = b + k * p.n;
    for (int64_t col = 0; col < p.n; ++col) acc[static_cast<size_t>(col)] += av * brow[col];
  }
}

}  // namespace

double reference_at(const HostProblem& h, int64_t batch, int64_t row, int64_t col) {
  const Problem& p = h.problem;
  const float* a = h.a.values.data() + batch * p.m * p.k;
  const float* b = h.b.values.data() + batch * p.k * p.n;
  double acc = 0;
  for (int64_t k = 0; k < p.k; ++k) {
    const double av = p.a_transposed ? a[k * p.m + row] : a[row * p.k + k];
    const double bv = p.b_transposed ? b[col * p.k + k] : b[k * p.n + col];
    acc += av * bv;
  }
  return finish(h, batch, row, col, acc);
}

std::vector<int64_t> rows_to_check(const Problem& p, uint64_t seed) {
  const double work = static_cast<double>(p.n) * p.k * p.batch;
  const int64_t budget = std::max<int64_t>(8, static_cast<int64_t>(2e8 / std::max(work, 1.0)));
  if (p.m <= budget) {
    std::vector<int64_t> all(static_cast<size_t>(p.m));
    for (int64_t i = 0; i < p.m; ++i) all[static_cast<size_t>(i)] = i;
    return all;
  }
  std::set<int64_t> rows = {0, p.m - 1};
  for (int64_t edge : {63, 64, 127, 128, 255, 256})
    if (edge < p.m) rows.insert(edge);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, p.m - 1);
  while (static_cast<int64_t>(rows.size()) < budget) rows.insert(dist(rng));
  return {rows.begin(), rows.end()};
}

std::string CheckResult::describe() const {
  std::string s = fmt::format("relative L2 error {:.3e} over {} outputs", relative_l2, checked);
  if (has_first_bad)
    s += fmt::format("; first bad element: batch {} row {} col {}: got {:.6g}, expected {:.6g}",
                     bad_batch, bad_row, bad_col, bad_out, bad_ref);
  return s;
}

double check_tolerance(DType input) {
  return tuner::tolerance(input == DType::F32    ? tuner::Precision::Exact32
                          : input == DType::TF32 ? tuner::Precision::TF32
                                                 : tuner::Precision::Half);
}

SampledReference sample_reference(const HostProblem& h, const std::vector<int64_t>& rows) {
  const Problem& p = h.problem;
  SampledReference r;
  r.problem = p;
  r.rows = rows;
  const size_t per_row = static_cast<size_t>(p.n),
               count = rows.size() * static_cast<size_t>(p.batch);
  r.values.resize(count * per_row);
  // A row per task, on every core (the reference of an 8192^3 product's sampled
  // rows is half a billion multiply-adds).
  std::atomic<size_t> next{0};
  auto work = [&] {
    std::vector<double> acc;
    for (size_t task = next++; task < count; task = next++) {
      const int64_t batch = static_cast<int64_t>(task / rows.size()),
                    row = rows[task % rows.size()];
      accumulate_row(h, batch, row, acc);
      for (int64_t col = 0; col < p.n; ++col)
        r.values[task * per_row + static_cast<size_t>(col)] =
            finish(h, batch, row, col, acc[static_cast<size_t>(col)]);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < std::max(1u, std::thread::hardware_concurrency()); ++t)
    pool.emplace_back(work);
  work();
  for (std::thread& th : pool) th.join();
  return r;
}

CheckResult check_rows(const SampledReference& reference, const std::vector<double>& out_values) {
  const Problem& p = reference.problem;
  const std::vector<double>& ref_values = reference.values;
  CheckResult r;
  r.checked = static_cast<int64_t>(ref_values.size());
  r.relative_l2 = tuner::relative_l2(out_values, ref_values);
  if (out_values.size() != ref_values.size()) return r;
  double norm = 0;
  for (double v : ref_values) norm += v * v;
  const double rms = std::sqrt(norm / std::max<size_t>(ref_values.size(), 1));
  const size_t per_batch = reference.rows.size() * static_cast<size_t>(p.n);
  for (size_t i = 0; i < ref_values.size(); ++i) {
    const double err = std::abs(out_values[i] - ref_values[i]);
    if (!std::isfinite(out_values[i]) || err > 0.05 * (std::abs(ref_values[i]) + rms)) {
      r.has_first_bad = true;
      r.bad_batch = static_cast<int64_t>(i / per_batch);
      r.bad_row = reference.rows[(i % per_batch) / static_cast<size_t>(p.n)];
      r.bad_col = static_cast<int64_t>(i % static_cast<size_t>(p.n));
      r.bad_out = out_values[i];
      r.bad_ref = ref_values[i];
      break;
    }
  }
  return r;
}

CheckResult check_output(const HostProblem& h, const std::vector<double>& out,
                         const std::vector<int64_t>& rows) {
  const Problem& p = h.problem;
  std::vector<double> out_values;
  for (int64_t batch = 0; batch < p.batch; ++batch)
    for (int64_t row : rows)
      for (int64_t col = 0; col < p.n; ++col)
        out_values.push_back(out[static_cast<size_t>((batch * p.m + row) * p.n + col)]);
  return check_rows(sample_reference(h, rows), out_values);
}

}  // namespace kjit::matmul
