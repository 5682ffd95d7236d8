#include "kjit/compiler/ir/op_table.h"

#include <algorithm>
#include <cmath>

#include "kjit/support/error.h"

namespace kjit::ir {

namespace {

constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr double kSqrtTwoOverPi = 0.79788456080286535588;

// x * Phi(x) = x erfc(-x / sqrt 2) / 2 (erfc: no cancellation for negative x, even in
// fp64 where 1 + erf(x / sqrt 2) is 0 below x = -8.3); -inf gives the limit, -0.
double gelu(double x) {
  if (x == -INFINITY) return -0.0;
  return 0.5 * x * std::erfc(-x * kSqrtHalf);
}
// x / (1 + e^(-2u)), as the kernel computes it: 0.5 x (1 + tanh u) cancels for
// negative x (-0 at x = -8 instead of -3.1e-21).
double gelu_tanh(double x) {
  return x / (1.0 + std::exp(-2.0 * kSqrtTwoOverPi * (x + 0.044715 * x * x * x)));
}
// log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|).
double softplus(double x) {
  return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)));
}

// Wraps to 32 bits like the GPU's integer arithmetic. The kernels' i32 spellings add,
// subtract, multiply and negate as unsigned and convert back: signed overflow is
// undefined in C++, and NVVM folded on it ((x + 1) > x was always true).
int64_t wrap32(int64_t v) {
  return static_cast<int32_t>(static_cast<uint32_t>(v));
}

// gelu_tanh is written x / (1 + e^(-2u)), not 0.5 x (1 + tanh u): for negative x,
// 1 + tanh(..) cancels to a few bits (gelu(-3) lost 2e-5 of relative accuracy in f32
// when gelu had the same problem; a GPU test on a broadcast scalar of -3 caught it).
// gelu is kjit::gelu_f32 (templates/math.cuh: Phi(-|x|) from a polynomial and one
// exponential, with the symmetry Phi(x) = 1 - Phi(-x)).
// sigmoid, silu and gelu_tanh divide by 1 + e^(..) with __fdividef (2 ulps for
// divisors up to 2^126, and 0 beyond: for sigmoid that quotient is below the smallest
// normal float anyway; silu(x) and gelu_tanh(x) flush to -0 below x = -87.3, where the
// true value is under 1e-36 in magnitude): IEEE division leaves its fast path whenever the
// exponential overflows to infinity, which made gelu_tanh(acc + bias) cost 50% of a 4096^3 matmul
// on the H200 (accumulators of magnitude ~20 overflow e^(-2u) for most negative outputs). Float
// spellings use accurate math (expf, not __expf; sin, cos and gelu from templates/math.cuh, within
// a few ulps): the f32 error budget is a relative L2 of 1e-5 against fp64.
const std::vector<OpInfo> kTable = {
    {OpCode::Input, "input", 0, TypeRule::Leaf, nullptr, nullptr, "", nullptr, -2, 2,
     "a kernel argument"},
    {OpCode::Const, "const", 0, TypeRule::Leaf, nullptr, nullptr, "", nullptr, -2, 2, "a literal"},
    {OpCode::Neg, "neg", 1, TypeRule::Arithmetic, [](const double* a) { return -a[0]; },
     [](const int64_t* a) { return wrap32(-a[0]); }, "-{0}", "(int)(0u - (unsigned){0})", -3, 3,
     "-x"},
    {OpCode::Abs, "abs", 1, TypeRule::Arithmetic, [](const double* a) { return std::abs(a[0]); },
     [](const int64_t* a) { return wrap32(a[0] < 0 ? -a[0] : a[0]); }, "fabsf({0})",
     "(int)({0} < 0 ? 0u - (unsigned){0} : (unsigned){0})", -3, 3, "|x|"},
    {OpCode::Exp, "exp", 1, TypeRule::FloatMath, [](const double* a) { return std::exp(a[0]); },
     nullptr, "expf({0})", nullptr, -3, 3, "e^x"},
    {OpCode::Exp2, "exp2", 1, TypeRule::FloatMath, [](const double* a) { return std::exp2(a[0]); },
     nullptr, "exp2f({0})", nullptr, -3, 3, "2^x"},
    {OpCode::Log, "log", 1, TypeRule::FloatMath, [](const double* a) { return std::log(a[0]); },
     nullptr, "logf({0})", nullptr, 0.1, 4, "natural logarithm"},
    {OpCode::Log2, "log2", 1, TypeRule::FloatMath, [](const double* a) { return std::log2(a[0]); },
     nullptr, "log2f({0})", nullptr, 0.1, 4, "base-2 logarithm"},
    {OpCode::Sqrt, "sqrt", 1, TypeRule::FloatMath, [](const double* a) { return std::sqrt(a[0]); },
     nullptr, "sqrtf({0})", nullptr, 0.1, 4, "square root"},
    {OpCode::Rsqrt, "rsqrt", 1, TypeRule::FloatMath,
     [](const double* a) { return 1.0 / std::sqrt(a[0]); }, nullptr, "rsqrtf({0})", nullptr, 0.1, 4,
     "1 / sqrt(x)"},
    {OpCode::Sin, "sin", 1, TypeRule::FloatMath, [](const double* a) { return std::sin(a[0]); },
     nullptr, "kjit::sin_f32({0})", nullptr, -3, 3, "sine"},
    {OpCode::Cos, "cos", 1, TypeRule::FloatMath, [](const double* a) { return std::cos(a[0]); },
     nullptr, "kjit::cos_f32({0})", nullptr, -3, 3, "cosine"},
    {OpCode::Tanh, "tanh", 1, TypeRule::FloatMath, [](const double* a) { return std::tanh(a[0]); },
     nullptr, "tanhf({0})", nullptr, -3, 3, "hyperbolic tangent"},
    {OpCode::Sigmoid, "sigmoid", 1, TypeRule::FloatMath,
     [](const double* a) { return 1.0 / (1.0 + std::exp(-a[0])); }, nullptr,
     "__fdividef(1.0f, 1.0f + expf(-{0}))", nullptr, -4, 4, "1 / (1 + e^-x)"},
    {OpCode::Relu, "relu", 1, TypeRule::Arithmetic,
     [](const double* a) { return a[0] > 0 ? a[0] : 0.0; },
     [](const int64_t* a) { return a[0] > 0 ? a[0] : int64_t{0}; }, "fmaxf({0}, 0.0f)",
     "max({0}, 0)", -3, 3, "max(x, 0)"},
    {OpCode::Gelu, "gelu", 1, TypeRule::FloatMath, [](const double* a) { return gelu(a[0]); },
     nullptr, "kjit::gelu_f32({0})", nullptr, -3, 3, "x * Phi(x), the erf form"},
    {OpCode::GeluTanh, "gelu_tanh", 1, TypeRule::FloatMath,
     [](const double* a) { return gelu_tanh(a[0]); }, nullptr,
     "__fdividef({0}, 1.0f + expf(-1.5957691216057307f * ({0} + 0.044715f * {0} * {0} * {0})))",
     nullptr, -3, 3, "the tanh approximation of gelu"},
    {OpCode::Silu, "silu", 1, TypeRule::FloatMath,
     [](const double* a) { return a[0] / (1.0 + std::exp(-a[0])); }, nullptr,
     "__fdividef({0}, 1.0f + expf(-{0}))", nullptr, -4, 4, "x * sigmoid(x)"},
    {OpCode::Softplus, "softplus", 1, TypeRule::FloatMath,
     [](const double* a) { return softplus(a[0]); }, nullptr,
     "fmaxf({0}, 0.0f) + log1pf(expf(-fabsf({0})))", nullptr, -4, 4, "log(1 + e^x)"},
    {OpCode::Floor, "floor", 1, TypeRule::FloatMath,
     [](const double* a) { return std::floor(a[0]); }, nullptr, "floorf({0})", nullptr, -3, 3,
     "round down"},
    {OpCode::Ceil, "ceil", 1, TypeRule::FloatMath, [](const double* a) { return std::ceil(a[0]); },
     nullptr, "ceilf({0})", nullptr, -3, 3, "round up"},
    {OpCode::Add, "add", 2, TypeRule::Arithmetic, [](const double* a) { return a[0] + a[1]; },
     [](const int64_t* a) { return wrap32(a[0] + a[1]); }, "{0} + {1}",
     "(int)((unsigned){0} + (unsigned){1})", -3, 3, "a + b"},
    {OpCode::Sub, "sub", 2, TypeRule::Arithmetic, [](const double* a) { return a[0] - a[1]; },
     [](const int64_t* a) { return wrap32(a[0] - a[1]); }, "{0} - {1}",
     "(int)((unsigned){0} - (unsigned){1})", -3, 3, "a - b"},
    {OpCode::Mul, "mul", 2, TypeRule::Arithmetic, [](const double* a) { return a[0] * a[1]; },
     [](const int64_t* a) { return wrap32(a[0] * a[1]); }, "{0} * {1}",
     "(int)((unsigned){0} * (unsigned){1})", -3, 3, "a * b"},
    {OpCode::Div, "div", 2, TypeRule::FloatArith, [](const double* a) { return a[0] / a[1]; },
     nullptr, "{0} / {1}", nullptr, 0.5, 2, "a / b (true division)"},
    {OpCode::Pow, "pow", 2, TypeRule::FloatArith,
     [](const double* a) { return std::pow(a[0], a[1]); }, nullptr, "powf({0}, {1})", nullptr, 0.5,
     2, "a ^ b"},
    {OpCode::Max, "max", 2, TypeRule::Arithmetic,
     [](const double* a) { return std::fmax(a[0], a[1]); },
     [](const int64_t* a) { return std::max(a[0], a[1]); }, "fmaxf({0}, {1})", "max({0}, {1})", -3,
     3, "the larger"},
    {OpCode::Min, "min", 2, TypeRule::Arithmetic,
     [](const double* a) { return std::fmin(a[0], a[1]); },
     [](const int64_t* a) { return std::min(a[0], a[1]); }, "fminf({0}, {1})", "min({0}, {1})", -3,
     3, "the smaller"},
    {OpCode::Lt, "lt", 2, TypeRule::Compare,
     [](const double* a) { return a[0] < a[1] ? 1.0 : 0.0; }, nullptr, "{0} < {1}", nullptr, -3, 3,
     "a < b"},
    {OpCode::Le, "le", 2, TypeRule::Compare,
     [](const double* a) { return a[0] <= a[1] ? 1.0 : 0.0; }, nullptr, "{0} <= {1}", nullptr, -3,
     3, "a <= b"},
    {OpCode::Gt, "gt", 2, TypeRule::Compare,
     [](const double* a) { return a[0] > a[1] ? 1.0 : 0.0; }, nullptr, "{0} > {1}", nullptr, -3, 3,
     "a > b"},
    {OpCode::Ge, "ge", 2, TypeRule::Compare,
     [](const double* a) { return a[0] >= a[1] ? 1.0 : 0.0; }, nullptr, "{0} >= {1}", nullptr, -3,
     3, "a >= b"},
    {OpCode::Eq, "eq", 2, TypeRule::Compare,
     [](const double* a) { return a[0] == a[1] ? 1.0 : 0.0; }, nullptr, "{0} == {1}", nullptr, -3,
     3, "a == b"},
    {OpCode::Ne, "ne", 2, TypeRule::Compare,
     [](const double* a) { return a[0] != a[1] ? 1.0 : 0.0; }, nullptr, "{0} != {1}", nullptr, -3,
     3, "a != b"},
    {OpCode::Select, "select", 3, TypeRule::Select,
     [](const double* a) { return a[0] != 0 ? a[1] : a[2]; },
     [](const int64_t* a) { return a[0] != 0 ? a[1] : a[2]; }, "{0} ? {1} : {2}", "{0} ? {1} : {2}",
     -3, 3, "c ? a : b (also spelled where)"},
    {OpCode::Fma, "fma", 3, TypeRule::FloatArith,
     [](const double* a) { return a[0] * a[1] + a[2]; }, nullptr, "fmaf({0}, {1}, {2})", nullptr,
     -3, 3, "a * b + c, one rounding"},
    {OpCode::Cast, "cast", 1, TypeRule::Cast, [](const double* a) { return a[0]; }, nullptr, "{0}",
     nullptr, -3, 3, "convert to a dtype: cast(x, bf16)"},
};

}  // namespace

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

const std::vector<OpInfo>& op_table() {
  return kTable;
}

const OpInfo& op_info(OpCode code) {
  const OpInfo& info = kTable[static_cast<size_t>(code)];
  KJIT_CHECK(info.code == code, "op table out of OpCode order");
  return info;
}

const OpInfo* find_op(std::string_view name) {
  for (const OpInfo& info : kTable) {
    if (info.arity > 0 && name == info.name) return &info;
  }
  return nullptr;
}

std::vector<std::string> nearest_op_names(std::string_view name, size_t count) {
  std::vector<std::pair<size_t, std::string>> scored;
  for (const OpInfo& info : kTable) {
    if (info.arity == 0) continue;
    scored.emplace_back(edit_distance(name, info.name), info.name);
  }
  scored.emplace_back(edit_distance(name, "where"), "where");
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> names;
  for (size_t i = 0; i < scored.size() && names.size() < count; ++i)
    names.push_back(scored[i].second);
  return names;
}

}  // namespace kjit::ir
