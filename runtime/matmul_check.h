// Host-side helpers to check a matmul against an fp64 reference: random inputs
// rounded to their dtype (so the reference sees exactly what the GPU sees), the
// reference itself over sampled rows, and hand-written epilogues with their CPU
// twins. Used by the GPU tests, `kjit run|bench matmul`, the demo and the benchmark
// (a tuner checks each candidate the same way).
//
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kjit/compiler/lowering/matmul.h"
#include "kjit/compiler/lowering/matmul_epilogue.h"

namespace kjit::matmul {

// Values rounded to `dtype`, and the bytes to upload.
struct HostTensor {
  DType dtype = DType::BF16;
  std::vector<float> values;
  std::vector<unsigned char> bytes() const;
  size_t size() const { return values.size(); }
};

// Uniform in [lo, hi), never all zeros; rounded to dtype.
HostTensor random_tensor(DType dtype, size_t count, uint64_t seed, float lo = -1.0f,
                         float hi = 1.0f);
// Device bytes of `count` elements of `dtype` as doubles.
std::vector<double> to_doubles(DType dtype, const std::vector<unsigned char>& bytes, size_t count);

// Hand-written epilogues (device function and CPU twin), for tests and the
// benchmark: "acc + bias", "gelu(acc + bias)" (the tanh form with the hardware
// tanh), "relu(acc + bias)", "acc * scale + residual" (bias: per column, scale: per
// row, residual: M x N), operands of `dtype`. Their kernel class says
// "epilogue=builtin:...", apart from the IR epilogue of the same text.
// UserError for other text, listing these.
LoweredEpilogue builtin_epilogue(const std::string& text, DType dtype);
std::vector<std::string> builtin_epilogue_names();

// Packed (row-major, ld = row length, batch stride = matrix size) host operands.
struct HostProblem {
  Problem problem;
  HostTensor a, b, c0;             // c0 empty when beta == 0
  std::vector<HostTensor> extras;  // per Epilogue::operands (vectors: length M or N per batch)
  float alpha = 1.0f, beta = 0.0f;
  std::function<double(double, const std::vector<double>&)> epilogue;  // null: identity
};

// Fresh random operands for `problem` (with the given epilogue's CPU twin).
HostProblem make_host_problem(
    const Problem& problem, uint64_t seed, float alpha = 1.0f, float beta = 0.0f,
    const std::function<double(double, const std::vector<double>&)>& epilogue = nullptr);

// The fp64 reference of output (batch, row, col), rounded to the output dtype.
double reference_at(const HostProblem& host, int64_t batch, int64_t row, int64_t col);

// Rows to check: all when the work is small, else a spread sample (first, last, tile
// edges, random) sized to keep the reference under ~2e8 multiply-adds.
std::vector<int64_t> rows_to_check(const Problem& problem, uint64_t seed);

// The relative L2 error a result of `input` may have against the fp64 reference:
// 1e-5 for the exact f32 path, 5e-3 for tf32 (10 mantissa bits kept: ~1e-3), 1e-2
// for bf16/f16 inputs.
double check_tolerance(DType input);

struct CheckResult {
  double relative_l2 = 0;
  int64_t checked = 0;
  // The first element whose error is large (|out - ref| > 0.05 * (|ref| + rms(ref)) or NaN).
  bool has_first_bad = false;
  int64_t bad_batch = 0, bad_row = 0, bad_col = 0;
  double bad_out = 0, bad_ref = 0;
  std::string describe() const;
};

// Compares the packed output `out` (batch x M x N, as doubles) on the sampled rows.
CheckResult check_output(const HostProblem& host, const std::vector<double>& out,
                         const std::vector<int64_t>& rows);

// The reference on sampled rows, computed once and compared with many outputs (the
// tuner checks every candidate against one).
struct SampledReference {
  Problem problem;
  std::vector<int64_t> rows;
  std::vector<double> values;  // batch-major, then rows in order, then columns
};
SampledReference sample_reference(const HostProblem& host, const std::vector<int64_t>& rows);
// `out_rows`: the output's sampled rows only, in the same order as `values`.
CheckResult check_rows(const SampledReference& reference, const std::vector<double>& out_rows);

}  // namespace kjit::matmul
