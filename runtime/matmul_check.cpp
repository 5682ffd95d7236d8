#include "runtime/matmul_check.h"

#include "compiler/interpreter/interpreter.h"
#include "compiler/ir/parser.h"
#include "compiler/lowering/elementwise.h"
#include "compiler/passes/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "support/error.h"
#include "support/half.h"

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
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (float& v : t.values) v = round_to(dtype, dist(rng));
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

BuiltinEpilogue builtin_epilogue(const std::string& text, DType dtype) {
  if (dtype == DType::TF32) dtype = DType::F32;  // operands of tf32 problems are f32
  BuiltinEpilogue out;
  Epilogue& e = out.epilogue;
  e.text = text;
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

namespace {

DType matmul_dtype(ir::DType dtype, const std::string& name) {
  switch (dtype) {
    case ir::DType::F32:
      return DType::F32;
    case ir::DType::F16:
      return DType::F16;
    case ir::DType::BF16:
      return DType::BF16;
    default:
      break;
  }
  throw UserError("epilogue operand '" + name + "' is " + ir::to_string(dtype) +
                      "; matmul epilogue operands are f32, f16 or bf16",
                  "declare it as " + name + ":bf16[n] (or f16, f32)");
}

OperandKind kind_of(const ir::Node& input) {
  const ir::Shape& shape = input.shape;
  auto is = [](const ir::Dim& d, const char* symbol) { return d.symbol == symbol; };
  if (shape.size() == 1 && is(shape[0], "n")) return OperandKind::ColumnVector;
  if (shape.size() == 2 && shape[0].is_one() && is(shape[1], "n")) return OperandKind::ColumnVector;
  if (shape.size() == 2 && is(shape[0], "m") && shape[1].is_one()) return OperandKind::RowVector;
  if (shape.size() == 2 && is(shape[0], "m") && is(shape[1], "n")) return OperandKind::Tensor;
  throw UserError("epilogue operand '" + input.name + "' has shape " + ir::to_string(shape) +
                      "; a matmul epilogue operand is [n] (per column), [m,1] (per row) or "
                      "[m,n] (a full tensor)",
                  "declare it, e.g. " + input.name + ":bf16[n]");
}

}  // namespace

BuiltinEpilogue epilogue_from_ir(const std::string& text, DType dtype) {
  // `acc` is declared first so that it is the device function's first parameter.
  ir::ParseOptions options;
  options.default_dtype = to_ir(dtype);
  options.default_shape = {ir::Dim::named("n")};
  options.inputs = {{"acc", ir::DType::F32, {ir::Dim::named("m"), ir::Dim::named("n")}}};
  const ir::Graph parsed = ir::parse(text, options);
  const ir::Graph graph = ir::optimize(parsed);
  if (graph.outputs().size() != 1)
    throw UserError("a matmul epilogue computes one output; '" + text + "' computes " +
                    std::to_string(graph.outputs().size()));
  const int acc_id = graph.inputs().empty() ? -1 : graph.inputs()[0];
  bool uses_acc = false;
  for (const ir::Node& node : graph.nodes())
    for (int operand : node.operands) uses_acc = uses_acc || operand == acc_id;
  for (const auto& output : graph.outputs()) uses_acc = uses_acc || output.second == acc_id;
  if (acc_id < 0 || graph.node(acc_id).name != "acc" || !uses_acc)
    throw UserError("the epilogue '" + text + "' does not use acc, the matmul's result",
                    "write it over acc, e.g. 'gelu(acc + bias)'");
  BuiltinEpilogue out;
  Epilogue& e = out.epilogue;
  e.text = text;
  e.function_name = "kjit_epilogue_fn";
  e.function_source = ir::emit_epilogue_function(graph, e.function_name);
  for (size_t i = 1; i < graph.inputs().size(); ++i) {
    const ir::Node& input = graph.node(graph.inputs()[i]);
    e.operands.push_back({input.name, kind_of(input), matmul_dtype(input.dtype, input.name)});
  }
  if (static_cast<int>(e.operands.size()) > Epilogue::kMaxOperands)
    throw UserError("the epilogue '" + text + "' reads " + std::to_string(e.operands.size()) +
                    " operands besides acc; at most " + std::to_string(Epilogue::kMaxOperands));
  // The fp64 twin: the graph's nodes in order, with the interpreter's semantics.
  out.reference = [graph](double acc, const std::vector<double>& operands) {
    std::vector<double> values(graph.nodes().size());
    size_t next_operand = 0;
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
      const ir::Node& node = graph.node(static_cast<int>(i));
      if (node.op == ir::OpCode::Input) {
        values[i] = node.name == "acc" ? acc : operands.at(next_operand++);
      } else if (node.op == ir::OpCode::Const) {
        values[i] = node.value;
      } else {
        double arguments[3] = {};
        for (size_t k = 0; k < node.operands.size() && k < 3; ++k)
          arguments[k] = values[static_cast<size_t>(node.operands[k])];
        values[i] = ir::evaluate_node(node, arguments);
      }
    }
    return values[static_cast<size_t>(graph.outputs()[0].second)];
  };
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
  return input == DType::F32 ? 1e-5 : input == DType::TF32 ? 5e-3 : 1e-2;
}

CheckResult check_output(const HostProblem& h, const std::vector<double>& out,
                         const std::vector<int64_t>& rows) {
  const Problem& p = h.problem;
  CheckResult r;
  std::vector<double> ref_values, out_values;
  struct Where {
    int64_t batch, row, col;
  };
  std::vector<Where> where;
  for (int64_t batch = 0; batch < p.batch; ++batch)
    for (int64_t row : rows)
      for (int64_t col = 0; col < p.n; ++col) {
        ref_values.push_back(reference_at(h, batch, row, col));
        out_values.push_back(out[static_cast<size_t>((batch * p.m + row) * p.n + col)]);
        where.push_back({batch, row, col});
      }
  double diff = 0, norm = 0;
  bool nan = false;
  for (size_t i = 0; i < ref_values.size(); ++i) {
    if (!std::isfinite(out_values[i])) nan = true;
    diff += (out_values[i] - ref_values[i]) * (out_values[i] - ref_values[i]);
    norm += ref_values[i] * ref_values[i];
  }
  const double rms = std::sqrt(norm / std::max<size_t>(ref_values.size(), 1));
  for (size_t i = 0; i < ref_values.size(); ++i) {
    const double err = std::abs(out_values[i] - ref_values[i]);
    if (!std::isfinite(out_values[i]) || err > 0.05 * (std::abs(ref_values[i]) + rms)) {
      r.has_first_bad = true;
      r.bad_batch = where[i].batch;
      r.bad_row = where[i].row;
      r.bad_col = where[i].col;
      r.bad_out = out_values[i];
      r.bad_ref = ref_values[i];
      break;
    }
  }
  r.checked = static_cast<int64_t>(ref_values.size());
  r.relative_l2 =
      nan ? INFINITY : (norm == 0 ? (diff == 0 ? 0 : INFINITY) : std::sqrt(diff / norm));
  return r;
}

}  // namespace kjit::matmul
