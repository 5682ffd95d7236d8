#include "kjit/compiler/lowering/elementwise_plan.h"

#include <fmt/format.h>

#include <map>

#include "kjit/support/checked_math.h"
#include "kjit/support/error.h"

namespace kjit::ir {

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

void check_pointer(const TensorArg& t, const std::string& what, int64_t elements) {
  if (elements == 0) return;
  if (t.data == 0) throw UserError(what + " is a null pointer");
  int size = ir::size_bytes(t.dtype);
  if (t.data % static_cast<uint64_t>(size) != 0)
    throw UserError(fmt::format("{} at 0x{:x} is not aligned to its element size ({} bytes)", what,
                                t.data, size));
}

}  // namespace

ElementwisePlan plan_elementwise(const Graph& graph, const std::string& ir_digest,
                                 const ElementwiseConfig& config,
                                 const std::vector<TensorArg>& inputs,
                                 const std::vector<TensorArg>& outputs, Alignment alignment) {
  std::vector<int> input_ids = graph.inputs();
  auto names = [&](bool want_inputs) {
    std::string out;
    if (want_inputs) {
      for (int id : input_ids) out += (out.empty() ? "" : ", ") + graph.node(id).name;
    } else {
      for (const auto& [name, id] : graph.outputs()) out += (out.empty() ? "" : ", ") + name;
    }
    return out;
  };
  if (inputs.size() != input_ids.size())
    throw UserError(fmt::format("the kernel takes {} input(s) ({}), got {}", input_ids.size(),
                                names(true), inputs.size()));
  if (outputs.size() != graph.outputs().size())
    throw UserError(fmt::format("the kernel writes {} output(s) ({}), got {}",
                                graph.outputs().size(), names(false), outputs.size()));
  // Bind symbolic dims, check dtypes and ranks.
  ir::Bindings bindings;
  std::map<std::string, std::string> bound_by;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Node& n = graph.node(input_ids[i]);
    const TensorArg& t = inputs[i];
    std::string what = "input '" + n.name + "'";
    if (t.dtype != n.dtype)
      throw UserError(fmt::format("{} is {}, the kernel takes {}", what, ir::to_string(t.dtype),
                                  ir::to_string(n.dtype)));
    if (t.shape.size() != n.shape.size())
      throw UserError(fmt::format("{} has shape {}, the kernel takes {}", what, shape_text(t.shape),
                                  ir::to_string(n.shape)));
    if (!t.strides.empty() && t.strides.size() != t.shape.size())
      throw UserError(
          fmt::format("{} has {} strides for {} dims", what, t.strides.size(), t.shape.size()));
    for (size_t d = 0; d < t.shape.size(); ++d) {
      const ir::Dim& dim = n.shape[d];
      if (t.shape[d] < 0) throw UserError(what + " has a negative size");
      if (!dim.is_symbolic()) {
        if (dim.size != t.shape[d])
          throw UserError(fmt::format("{} has shape {}, the kernel takes {}", what,
                                      shape_text(t.shape), ir::to_string(n.shape)));
        continue;
      }
      auto [it, inserted] = bindings.emplace(dim.symbol, t.shape[d]);
      if (inserted) {
        bound_by[dim.symbol] = n.name;
      } else if (it->second != t.shape[d]) {
        throw UserError(fmt::format("dim '{}' is {} in input '{}' but {} in {}", dim.symbol,
                                    it->second, bound_by[dim.symbol], t.shape[d], what));
      }
    }
  }
  std::vector<int64_t> out_shape = ir::concrete(graph.output_shape(), bindings);
  if (out_shape.size() > 2)
    throw UserError(
        "elementwise kernels take outputs of rank 2 at most; this one is " + shape_text(out_shape),
        "reshape the tensors to 2-D: [rows, cols]");
  ElementwisePlan plan;
  plan.n = ir::element_count(out_shape);
  plan.cols = out_shape.empty() ? 1 : out_shape.back();
  const int64_t rows = out_shape.size() == 2 ? out_shape[0] : 1;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const auto& [name, id] = graph.outputs()[k];
    const TensorArg& t = outputs[k];
    std::string what = "output '" + name + "'";
    if (t.dtype != graph.node(id).dtype)
      throw UserError(fmt::format("{} is {}, the kernel writes {}", what, ir::to_string(t.dtype),
                                  ir::to_string(graph.node(id).dtype)));
    if (t.shape != out_shape)
      throw UserError(fmt::format("{} has shape {}, the kernel writes {}", what,
                                  shape_text(t.shape), shape_text(out_shape)));
    if (!t.strides.empty() && t.strides != contiguous_strides(t.shape))
      throw UserError(what + " must be contiguous");
    check_pointer(t, what, plan.n);
  }
  // The kernels index in signed 64-bit elements and bytes: every tensor's bytes, and
  // all of them together, stay below 2^62, so that an index plus a grid's step never
  // wraps (docs/limits.md, "Sizes").
  constexpr int64_t kMaxBytes = int64_t{1} << 62;
  int64_t total = 0;
  auto count_bytes = [&](const TensorArg& t, const std::string& what) {
    const int64_t bytes = checked_size(t.shape, ir::size_bytes(t.dtype), what);
    if (bytes >= kMaxBytes || total + bytes >= kMaxBytes)
      throw UserError(
          fmt::format("{} of shape {} brings the kernel's tensors to {} bytes or more; "
                      "the limit is 2^62 bytes",
                      what, shape_text(t.shape), bytes >= kMaxBytes ? bytes : total + bytes),
          "indices are 64-bit; split the problem into several calls");
    total += bytes;
  };
  for (size_t i = 0; i < inputs.size(); ++i)
    count_bytes(inputs[i], "input '" + graph.node(input_ids[i]).name + "'");
  for (size_t k = 0; k < outputs.size(); ++k)
    count_bytes(outputs[k], "output '" + graph.outputs()[k].first + "'");
  // Access patterns over the [rows, cols] view.
  plan.problem.graph = graph;
  plan.problem.ir_digest = ir_digest;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorArg& t = inputs[i];
    std::string what = "input '" + graph.node(input_ids[i]).name + "'";
    int64_t count = ir::element_count(t.shape);
    check_pointer(t, what, plan.n == 0 ? 0 : count);
    std::vector<int64_t> strides = t.strides.empty() ? contiguous_strides(t.shape) : t.strides;
    // Right-align to two dims; a size-1 dim (broadcast) has stride 0.
    int64_t size2[2] = {1, 1}, stride2[2] = {0, 0};
    for (size_t d = 0; d < t.shape.size(); ++d) {
      size_t slot = 2 - t.shape.size() + d;
      size2[slot] = t.shape[d];
      stride2[slot] = t.shape[d] == 1 ? 0 : strides[d];
    }
    if (out_shape.size() < 2) {
      size2[0] = 1;
      stride2[0] = 0;
    }
    // A strided input's reach, not only its element count, must fit 64-bit offsets.
    for (size_t d = 0; d < t.shape.size(); ++d) {
      int64_t reach = 0, bytes = 0;
      if (t.shape[d] > 1 &&
          (__builtin_mul_overflow(t.shape[d] - 1, strides[d], &reach) ||
           __builtin_mul_overflow(reach, static_cast<int64_t>(ir::size_bytes(t.dtype)), &bytes) ||
           bytes >= kMaxBytes))
        throw UserError(fmt::format("{}: dim {} of {} elements at stride {} reaches past 2^62 "
                                    "bytes",
                                    what, d, t.shape[d], strides[d]),
                        "indices are 64-bit; check the strides");
    }
    bool full_rows = size2[0] == rows, full_cols = size2[1] == plan.cols;
    ir::Access access = ir::Access::Strided;
    if (count == 1) {
      access = ir::Access::Scalar;
    } else if (full_rows && full_cols && (stride2[1] == 1 || plan.cols == 1) &&
               (stride2[0] == plan.cols || rows == 1)) {
      access = ir::Access::Full;
    } else if (size2[0] == 1 && full_cols && stride2[1] == 1) {
      access = ir::Access::Row;
    } else if (size2[1] == 1 && full_rows && stride2[0] == 1) {
      access = ir::Access::Column;
    }
    plan.problem.access.push_back(access);
    plan.strides.emplace_back(stride2[0], stride2[1]);
  }
  // The alignment class: 16-byte pointers for everything moved as vectors, and sizes
  // that are whole vectors.
  plan.problem.aligned = true;
  const int V = ir::effective_vector_width(plan.problem, config);
  std::string why_not;
  auto aligned16 = [](const TensorArg& t) { return t.data % 16 == 0; };
  for (size_t i = 0; i < inputs.size() && why_not.empty(); ++i) {
    ir::Access a = plan.problem.access[i];
    if ((a == ir::Access::Full || a == ir::Access::Row) && !aligned16(inputs[i]))
      why_not = "input '" + graph.node(input_ids[i]).name + "' is not 16-byte aligned";
    if (a == ir::Access::Row || a == ir::Access::Column) {
      if (plan.cols % V != 0)
        why_not = fmt::format("cols = {} is not a multiple of {}", plan.cols, V);
    }
  }
  for (size_t k = 0; k < outputs.size() && why_not.empty(); ++k) {
    if (!aligned16(outputs[k]))
      why_not = "output '" + graph.outputs()[k].first + "' is not 16-byte aligned";
  }
  if (why_not.empty() && plan.n % V != 0)
    why_not = fmt::format("n = {} is not a multiple of the vector width {}", plan.n, V);
  if (alignment == Alignment::Aligned && !why_not.empty())
    throw UserError("the aligned kernel was requested but " + why_not,
                    "let kjit pick the alignment class, or pass aligned buffers and sizes");
  plan.problem.aligned = alignment != Alignment::Unaligned && why_not.empty();
  return plan;
}

namespace {

// A tensor's stride along dim d (packed where it gives none, or too few: plan()
// refuses those after this has run, so this must not read past the list).
int64_t stride_of(const TensorArg& t, size_t d, int64_t packed) {
  return d < t.strides.size() && t.strides.size() == t.shape.size() ? t.strides[d] : packed;
}

// The bytes [first, last) a tensor's elements span (no allocation: this runs at every
// launch). A negative stride reaches below the pointer: a reversed view's span ran
// the other way, and an output over it was not seen to overlap.
std::pair<uint64_t, uint64_t> byte_range(const TensorArg& t) {
  int64_t low = 0, high = 0, stride = 1;
  for (size_t d = t.shape.size(); d-- > 0;) {
    if (t.shape[d] == 0) return {t.data, t.data};
    const int64_t reach = (t.shape[d] - 1) * stride_of(t, d, stride);
    (reach < 0 ? low : high) += reach;
    stride *= t.shape[d];
  }
  const int64_t bytes = static_cast<int64_t>(ir::size_bytes(t.dtype));
  return {t.data + static_cast<uint64_t>(low * bytes),
          t.data + static_cast<uint64_t>((high + 1) * bytes)};
}

bool contiguous(const TensorArg& t) {
  if (t.strides.empty()) return true;
  int64_t stride = 1;
  for (size_t d = t.shape.size(); d-- > 0;) {
    if (t.shape[d] > 1 && stride_of(t, d, stride) != stride) return false;
    stride *= t.shape[d];
  }
  return true;
}

}  // namespace

void check_outputs_apart(const Graph& graph, const std::vector<TensorArg>& inputs,
                         const std::vector<TensorArg>& outputs) {
  auto meet = [](std::pair<uint64_t, uint64_t> a, std::pair<uint64_t, uint64_t> b) {
    return a.first < b.second && b.first < a.second;
  };
  // Names are formed only for the error: this runs at every launch.
  auto output_name = [&](size_t k) {
    return k < graph.outputs().size() ? "output '" + graph.outputs()[k].first + "'"
                                      : std::string("an output");
  };
  for (size_t k = 0; k < outputs.size(); ++k) {
    const TensorArg& out = outputs[k];
    const auto out_range = byte_range(out);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const TensorArg& in = inputs[i];
      const bool itself = in.data == out.data && in.dtype == out.dtype && in.shape == out.shape &&
                          contiguous(in) && contiguous(out);
      if (!itself && meet(out_range, byte_range(in))) {
        const std::vector<int> input_ids = graph.inputs();
        throw UserError(
            fmt::format("{} (0x{:x}) overlaps input '{}' (0x{:x}) but is not that input itself",
                        output_name(k), out.data,
                        i < input_ids.size() ? graph.node(input_ids[i]).name : "?", in.data),
            "write each output apart from the inputs, or over one input element for element "
            "(same address, dtype and shape, contiguous)");
      }
    }
    for (size_t j = k + 1; j < outputs.size(); ++j)
      if (meet(out_range, byte_range(outputs[j])))
        throw UserError(fmt::format("{} and output '{}' overlap", output_name(k),
                                    j < graph.outputs().size() ? graph.outputs()[j].first : "?"),
                        "each output needs memory of its own");
  }
}

}  // namespace kjit::ir
