// Host-side helpers to check a matmul against an fp64 reference: random inputs
// rounded to their dtype (so the reference sees exactly what the GPU sees), the
// reference itself over sampled rows, and hand-written epilogues with their CPU
// twins. Used by the GPU tests, `kjit run|bench matmul`, the demo and the benchmark
// (a tuner checks each candidate the same way).
//
// The epilogue table stands in for the elementwise IR's emitter: each entry is the
// CUDA device function the IR would emit for that expression, written by hand.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compiler/lowering/matmul.h"

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

// A hand-written epilogue: the device function and its CPU twin.
struct BuiltinEpilogue {
  Epilogue epilogue;
  std::function<double(double acc, const std::vector<double>& operands)> reference;
};
// "acc + bias", "gelu(acc + bias)", "relu(acc + bias)", "acc * scale + residual"
// (bias: per column, scale: per row, residual: M x N), operands of `dtype`.
// UserError for other text, listing these.
BuiltinEpilogue builtin_epilogue(const std::string& text, DType dtype);
std::vector<std::string> builtin_epilogue_names();

// An epilogue written in the elementwise IR's text form, over `acc` (the f32
// accumulator; always the first parameter) and extra operands whose kind follows
// their declared shape: [n] or [1,n] per column (a bias), [m,1] per row (a scale),
// [m,n] a full tensor (a residual); undeclared operands are per-column vectors.
// Operands default to `dtype`. The IR is optimized (fold, CSE, DCE) and lowered by
// the elementwise emitter into the device function; the reference evaluates the
// same graph in fp64 with the interpreter's op semantics.
//   epilogue_from_ir("gelu(acc + bias)", DType::BF16)
//   epilogue_from_ir("scale:f32[m,1]; r:bf16[m,n]; y = acc * scale + r", DType::BF16)
BuiltinEpilogue epilogue_from_ir(const std::string& text, DType dtype);

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

}  // namespace kjit::matmul
