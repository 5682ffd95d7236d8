#include "kjit/runtime/attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "kjit/runtime/cuda/driver.h"
#include "kjit/runtime/cuda/tensor_map.h"
#include "kjit/runtime/tuning.h"
#include "kjit/support/error.h"
#include "kjit/tuner/attention_space.h"

namespace kjit::attention {

namespace {

// Byte-for-byte mirror of kjit::AttentionArgs in templates/attention.cuh.
struct DeviceArgs {
  CUdeviceptr q, k, v, o, lse;
  CUdeviceptr cu_seqlens_q, cu_seqlens_k;
  CUdeviceptr modifier_operands[kMaxKernelModifierOperands];
  long long q_batch, q_seq, q_head;
  long long k_batch, k_seq, k_head;
  long long v_batch, v_seq, v_head;
  long long o_batch, o_seq, o_head;
  int seq_q, seq_k;
  int heads, kv_group;
  float scale, scale_log2;
  int window_left, window_right;
  int total_q;
  int batch;
};
// (ten 4-byte fields: no padding)
static_assert(sizeof(DeviceArgs) == (7 + kMaxKernelModifierOperands) * 8 + 12 * 8 + 10 * 4,
              "DeviceArgs must mirror kjit::AttentionArgs");

// Byte-for-byte mirror of kjit::AttentionBackwardArgs (templates/attention_backward.cuh).
struct BackwardDeviceArgs {
  DeviceArgs forward;
  CUdeviceptr d_o, dq, dk, dv;
  CUdeviceptr delta, lse_log2;
  long long do_batch, do_seq, do_head;
  long long dq_batch, dq_seq, dq_head;
  long long dk_batch, dk_seq, dk_head;
  long long dv_batch, dv_seq, dv_head;
  CUdeviceptr dq_accum;  // dq=atomic: the f32 sums of dQ; else 0
};
static_assert(sizeof(BackwardDeviceArgs) == sizeof(DeviceArgs) + 7 * 8 + 12 * 8,
              "BackwardDeviceArgs must mirror kjit::AttentionBackwardArgs");

constexpr double kLog2e = 1.4426950408889634;

// The kernel arguments every attention kernel shares, for resolved strides.
DeviceArgs forward_args(const Problem& p, CUdeviceptr q, CUdeviceptr k, CUdeviceptr v,
                        CUdeviceptr o, CUdeviceptr lse, const Strides& qs, const Strides& ks,
                        const Strides& vs, const Strides& os, const cuda::DeviceBuffer& offsets,
                        const std::vector<CUdeviceptr>& modifier_operands) {
  DeviceArgs args{};
  std::copy(modifier_operands.begin(), modifier_operands.end(), args.modifier_operands);
  args.q = q;
  args.k = k;
  args.v = v;
  args.o = o;
  args.lse = lse;
  args.q_batch = qs.batch;
  args.q_seq = qs.seq;
  args.q_head = qs.head;
  args.k_batch = ks.batch;
  args.k_seq = ks.seq;
  args.k_head = ks.head;
  args.v_batch = vs.batch;
  args.v_seq = vs.seq;
  args.v_head = vs.head;
  args.o_batch = os.batch;
  args.o_seq = os.seq;
  args.o_head = os.head;
  args.seq_q = static_cast<int>(p.seq_q);
  args.seq_k = static_cast<int>(p.seq_k);
  args.heads = static_cast<int>(p.heads);
  args.kv_group = static_cast<int>(p.heads / p.kv_heads);
  const double scale = p.softmax_scale();
  args.scale = static_cast<float>(scale);
  args.scale_log2 = static_cast<float>(scale * kLog2e);
  // A side as wide as the keys (left) or the queries (right) reach bounds nothing:
  // query i sees key j when j - i - (S_k - S_q) lies in [-left, right], which spans
  // [1 - S_k, S_q - 1]. It goes to the kernels as unbounded (-1): kept, a side near
  // 2^31 overflowed their 32-bit key ranges and masked every key (O = 0).
  args.window_left = p.window_left >= p.seq_k ? -1 : static_cast<int>(p.window_left);
  args.window_right = p.right() >= p.seq_q ? -1 : static_cast<int>(p.right());
  args.total_q = static_cast<int>(p.total_q());
  args.batch = static_cast<int>(p.batch);
  if (p.packed()) {
    args.cu_seqlens_q = offsets.get();
    args.cu_seqlens_k = offsets.get() + p.cu_seqlens_q.size() * sizeof(int32_t);
  }
  return args;
}

// The offsets of a packed problem, as the kernels read them (int32): cu_seqlens_q
// then cu_seqlens_k.
cuda::DeviceBuffer upload_offsets(const Problem& p) {
  if (!p.packed()) return {};
  std::vector<int32_t> offsets;
  for (const int64_t o : p.cu_seqlens_q) offsets.push_back(static_cast<int32_t>(o));
  for (const int64_t o : p.cu_seqlens_k) offsets.push_back(static_cast<int32_t>(o));
  return cuda::DeviceBuffer::from(offsets);
}

void check_registers(const Config& config, const CompiledKernel& kernel,
                     const cuda::DeviceProperties& device) {
  const int64_t registers =
      static_cast<int64_t>(kernel.stats().registers) * kernel.source().block_threads;
  if (device.registers_per_block > 0 && registers > device.registers_per_block)
    throw UserError(fmt::format("attention config {} needs {} registers per block in {}; {} "
                                "allows {}",
                                config.to_string(), registers, kernel.source().name, device.name,
                                device.registers_per_block),
                    "use a smaller bm");
}

// A 4-D tensor map (head dim, sequence, head, batch) of Q, K or V for the copy
// engine (the wgmma kernel): boxes of 64 head-dim elements (128 bytes, the swizzle
// span) by `box_rows` positions, 128-byte swizzle, zeros past the sequence.
CUtensorMap sequence_map(ir::DType dtype, CUdeviceptr base, int64_t head_dim, int64_t seq,
                         int64_t heads, int64_t batch, const Strides& strides, int box_rows) {
  const int64_t counts[] = {head_dim, seq, heads, batch};
  const int64_t steps[] = {strides.seq, strides.head, strides.batch};
  const uint32_t box[] = {64, static_cast<uint32_t>(box_rows), 1, 1};
  return cuda::tiled_map(
      dtype == ir::DType::F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
      2, base, counts, steps, box);
}

// The 3-D tensor map (head dim, row, plane) of the atomic dQ's f32 sums, [planes]
// [rows][head_dim] contiguous, for the copy engine's adds (cp.reduce.async.bulk.tensor):
// boxes of 32 floats (128 bytes, the swizzle span) by 64 rows, 128-byte swizzle;
// rows past `rows` are left out.
CUtensorMap sums_map(CUdeviceptr base, int64_t head_dim, int64_t rows, int64_t planes) {
  const int64_t counts[] = {head_dim, rows, planes};
  const int64_t steps[] = {head_dim, rows * head_dim};
  const uint32_t box[] = {32, 64, 1};
  return cuda::tiled_map(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, base, counts, steps, box);
}

}  // namespace

namespace {

// Fills packed-BSHD defaults into `s` and checks it (16-byte rows, no batch stride
// for packed problems).
void resolve_strides(const Problem& p, const char* name, Strides& s, int64_t heads, int64_t seq) {
  const int64_t d = p.head_dim;
  if (s.batch < 0 || s.seq < 0 || s.head < 0)
    throw UserError(fmt::format("attention {} has a negative stride (batch {}, seq {}, head {})",
                                name, s.batch, s.seq, s.head),
                    "strides are in elements, >= 0 (0: packed BSHD)");
  if (s.head == 0) s.head = d;
  if (s.seq == 0) s.seq = heads * d;
  if (p.packed()) {
    if (s.batch != 0)
      throw UserError(fmt::format("attention {} has a batch stride ({}) but the problem is "
                                  "packed",
                                  name, s.batch),
                      "packed sequences are [tokens, heads, D]: their offsets say where "
                      "each starts");
  } else if (s.batch == 0) {
    // Past the last position and the last head, whichever strides are given (a BHSD
    // tensor's seq stride alone would put batch 1 at head 1).
    s.batch = std::max(seq * s.seq, heads * s.head);
  }
  // The kernel reads and writes rows of D contiguous elements in 16-byte chunks.
  for (const int64_t stride : {s.batch, s.seq, s.head}) {
    if (stride % 8 != 0)
      throw UserError(fmt::format("attention {} stride {} is not a multiple of 8 elements "
                                  "(16 bytes)",
                                  name, stride),
                      "pad the tensor's rows to 8 elements, or make it contiguous");
  }
}

// Positions a query (key) tensor holds per batch: the sequence, or every packed token.
int64_t positions(const Problem& p, bool query) {
  if (p.packed()) return query ? p.total_q() : p.total_k();
  return query ? p.seq_q : p.seq_k;
}

// A tensor of `batches` x `seq` x `heads` rows of D elements (16-bit) at `s`: every
// byte offset the kernels form must fit 64 bits; and an output's rows must not share
// an element (two blocks would write it; which value is left depends on timing).
// Sorted by stride, each dimension must step past everything the smaller ones span.
void check_layout(const Problem& p, const char* name, CUdeviceptr pointer, const Strides& s,
                  int64_t heads, int64_t seq, bool output) {
  const int64_t batches = p.packed() ? 1 : p.batch;
  struct Dim {
    const char* what;
    int64_t count, stride;
  };
  Dim dims[] = {
      {"batch", batches, s.batch}, {"sequence position", seq, s.seq}, {"head", heads, s.head}};
  int64_t last = p.head_dim - 1, term = 0, bytes = 0, end = 0;
  for (const Dim& d : dims) {
    if (__builtin_mul_overflow(d.count - 1, d.stride, &term) ||
        __builtin_add_overflow(last, term, &last))
      last = -1;
    if (last < 0) break;
  }
  // (A pointer at or above 2^63 reads as negative and its end never overflows: it is
  // refused with the rest.)
  if (last < 0 || pointer > static_cast<CUdeviceptr>(std::numeric_limits<int64_t>::max()) ||
      __builtin_mul_overflow(last + 1, int64_t{2}, &bytes) ||
      __builtin_add_overflow(static_cast<int64_t>(pointer), bytes, &end))
    throw UserError(fmt::format("attention {} spans more than 2^63 bytes: {} batches of stride "
                                "{}, {} positions of stride {}, {} heads of stride {}",
                                name, batches, s.batch, seq, s.seq, heads, s.head),
                    "offsets are 64-bit byte counts; check the sizes and strides");
  if (!output) return;
  std::sort(std::begin(dims), std::end(dims),
            [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
  int64_t span = p.head_dim;  // elements the smaller dimensions cover, from the first
  const char* inner = "row of D elements";
  for (const Dim& d : dims) {
    if (d.count <= 1) continue;
    if (d.stride < span)
      throw UserError(
          fmt::format("attention output {}: its {} stride {} is less than the {} elements "
                      "one {} covers, so two {}s share elements",
                      name, d.what, d.stride, span, inner, d.what),
          "give each output row its own elements (packed BSHD: strides 0)");
    span += (d.count - 1) * d.stride;
    inner = d.what;
  }
}

// One launch tensor's elements: rows of D 16-bit elements at `pointer`, `batches` x
// `seq` x `heads` of them at strides `s` (resolved).
struct Extent {
  const char* name;
  CUdeviceptr pointer;
  Strides s;
  int64_t batches, seq, heads;
};

// Whether two tensors share an element. Their byte ranges must meet; then tensors of
// the same strides and counts may still interleave without sharing (Q, K and V of one
// fused [tokens, 3, heads, D] buffer): at some dimension whose stride every larger
// stride is a multiple of, the offset between them modulo that stride leaves room for
// what the smaller dimensions cover, on both sides.
// One past the last byte of a tensor (check_layout has kept it within 64 bits).
int64_t end_byte(const Problem& p, const Extent& e) {
  return static_cast<int64_t>(e.pointer) +
         2 * ((e.batches - 1) * e.s.batch + (e.seq - 1) * e.s.seq + (e.heads - 1) * e.s.head +
              p.head_dim);
}

// Whether the bytes [begin, end) meet tensor e's byte range.
bool meets(const Problem& p, const Extent& e, int64_t begin, int64_t end) {
  return begin < end_byte(p, e) && static_cast<int64_t>(e.pointer) < end;
}

bool share_elements(const Problem& p, const Extent& a, const Extent& b) {
  const auto a0 = static_cast<int64_t>(a.pointer), b0 = static_cast<int64_t>(b.pointer);
  if (end_byte(p, a) <= b0 || end_byte(p, b) <= a0) return false;
  if (a.s.batch != b.s.batch || a.s.seq != b.s.seq || a.s.head != b.s.head ||
      a.batches != b.batches || a.seq != b.seq || a.heads != b.heads || (a0 - b0) % 2 != 0)
    return true;
  const int64_t offset = std::abs(a0 - b0) / 2;  // elements
  struct Dim {
    int64_t count, stride;
  };
  std::vector<Dim> dims;
  for (const Dim d : {Dim{a.batches, a.s.batch}, Dim{a.seq, a.s.seq}, Dim{a.heads, a.s.head}})
    if (d.count > 1) dims.push_back(d);
  std::sort(dims.begin(), dims.end(),
            [](const Dim& x, const Dim& y) { return x.stride > y.stride; });
  for (size_t level = 0; level < dims.size(); ++level) {
    const int64_t stride = dims[level].stride;
    bool nested = stride > 0;
    for (size_t outer = 0; outer < level && nested; ++outer)
      nested = dims[outer].stride % stride == 0;
    int64_t inner = p.head_dim;  // what one index at this level covers
    for (size_t d = level + 1; d < dims.size(); ++d) inner += (dims[d].count - 1) * dims[d].stride;
    const int64_t shift = offset % std::max<int64_t>(stride, 1);
    if (nested && shift >= inner && stride - shift >= inner) return false;
  }
  return true;
}

// Outputs that share an element with another launch tensor: a block reads what
// another block has written (or two write one element), and which value is left
// depends on timing. The same tensor as Q for O (each block reads its own rows of Q
// before it writes them) is allowed.
void check_outputs_apart(const Problem& p, const std::vector<Extent>& outputs,
                         const std::vector<Extent>& inputs, bool o_may_be_q) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::vector<const Extent*> others;
    for (const Extent& in : inputs) others.push_back(&in);
    for (size_t j = i + 1; j < outputs.size(); ++j) others.push_back(&outputs[j]);
    for (const Extent* other : others) {
      const Extent& out = outputs[i];
      if (o_may_be_q && std::string(other->name) == "Q" && out.pointer == other->pointer &&
          out.s.batch == other->s.batch && out.s.seq == other->s.seq && out.s.head == other->s.head)
        continue;
      if (share_elements(p, out, *other))
        throw UserError(fmt::format("attention output {} shares elements with {} ({} at 0x{:x}, "
                                    "{} at 0x{:x})",
                                    out.name, other->name, out.name,
                                    static_cast<unsigned long long>(out.pointer), other->name,
                                    static_cast<unsigned long long>(other->pointer)),
                        "an output needs memory of its own: other blocks still read the "
                        "inputs (and write the other outputs) while it is written");
    }
  }
}

// The LSE's bytes (f32, heads x query rows) against tensors it must not meet.
void check_lse_apart(const Problem& p, CUdeviceptr lse, const std::vector<Extent>& tensors,
                     bool lse_is_output) {
  if (lse == 0) return;
  const auto l0 = static_cast<int64_t>(lse);
  int64_t l1 = 0;
  if (lse > static_cast<CUdeviceptr>(std::numeric_limits<int64_t>::max()) ||
      __builtin_add_overflow(l0, 4 * backward_workspace_rows(p), &l1))
    throw UserError(fmt::format("attention LSE at 0x{:x} ends past 2^63 bytes",
                                static_cast<unsigned long long>(lse)),
                    "offsets are 64-bit byte counts; pass a device pointer");
  for (const Extent& e : tensors) {
    if (meets(p, e, l0, l1))
      throw UserError(fmt::format("attention LSE (0x{:x}, {} bytes) overlaps {} (0x{:x})",
                                  static_cast<unsigned long long>(lse), l1 - l0, e.name,
                                  static_cast<unsigned long long>(e.pointer)),
                      lse_is_output ? "the LSE is an output: give it memory of its own"
                                    : "the gradients are written while the LSE is read: "
                                      "give them memory apart from it");
  }
}

void check_pointer(const char* name, CUdeviceptr pointer) {
  if (pointer == 0) throw UserError(fmt::format("attention needs a device pointer for {}", name));
  if (pointer % 16 != 0)
    throw UserError(fmt::format("attention {} pointer 0x{:x} is not 16-byte aligned", name,
                                static_cast<unsigned long long>(pointer)),
                    "the kernel loads 16-byte chunks; allocations from cuMemAlloc are aligned");
}

// The modifiers' operands: one device array per operand the problem's modifiers
// read, of its dtype and aligned to it.
void check_modifier_operands(const Problem& p, const std::vector<CUdeviceptr>& pointers) {
  const std::vector<ModifierOperand> operands = p.modifier_operands();
  if (pointers.size() != operands.size()) {
    std::string names;
    for (const ModifierOperand& o : operands) names += (names.empty() ? "" : ", ") + o.name;
    throw UserError(fmt::format("attention modifiers read {} operand{} ({}); the launch gives {}",
                                operands.size(), operands.size() == 1 ? "" : "s",
                                names.empty() ? "none" : names, pointers.size()),
                    "Tensors::modifier_operands holds one device pointer per operand, the "
                    "score modifier's first");
  }
  for (size_t i = 0; i < operands.size(); ++i) {
    const ModifierOperand& o = operands[i];
    const int bytes = ir::size_bytes(o.dtype);
    if (pointers[i] == 0 || pointers[i] % static_cast<CUdeviceptr>(bytes) != 0)
      throw UserError(
          fmt::format("attention modifier operand '{}' ({}, {}) has pointer 0x{:x}: "
                      "{}",
                      o.name, ir::to_string(o.dtype), to_string(o.kind),
                      static_cast<unsigned long long>(pointers[i]),
                      pointers[i] == 0 ? "null" : fmt::format("not {}-byte aligned", bytes)));
  }
}

// The modifiers' operand arrays against the outputs (and the forward's LSE): they
// are read while the outputs are written (an operand placed in O or in the LSE was
// accepted). An array holds one value per head, query position or key position
// (positions within a sequence: the longest).
void check_operands_apart(const Problem& p, const std::vector<CUdeviceptr>& pointers,
                          const std::vector<Extent>& outputs, CUdeviceptr output_lse) {
  const std::vector<ModifierOperand> operands = p.modifier_operands();
  for (size_t i = 0; i < operands.size() && i < pointers.size(); ++i) {
    const ModifierOperand& o = operands[i];
    const int64_t count = o.kind == ModifierOperandKind::PerHead    ? p.heads
                          : o.kind == ModifierOperandKind::PerQuery ? p.seq_q
                                                                    : p.seq_k;
    const auto a0 = static_cast<int64_t>(pointers[i]);
    const int64_t a1 = a0 + count * ir::size_bytes(o.dtype);
    auto refuse = [&](const char* what, CUdeviceptr at) {
      throw UserError(fmt::format("attention modifier operand '{}' (0x{:x}, {} bytes) overlaps "
                                  "the output {} (0x{:x})",
                                  o.name, static_cast<unsigned long long>(pointers[i]), a1 - a0,
                                  what, static_cast<unsigned long long>(at)),
                      "the operands are read while the outputs are written: give them "
                      "memory apart");
    };
    for (const Extent& e : outputs)
      if (meets(p, e, a0, a1)) refuse(e.name, e.pointer);
    if (output_lse != 0) {
      const auto l0 = static_cast<int64_t>(output_lse);
      if (a0 < l0 + 4 * backward_workspace_rows(p) && l0 < a1) refuse("LSE", output_lse);
    }
  }
}

}  // namespace

Tensors resolve(const Problem& p, Tensors t) {
  check_modifier_operands(p, t.modifier_operands);
  resolve_strides(p, "Q", t.q_strides, p.heads, p.seq_q);
  resolve_strides(p, "K", t.k_strides, p.kv_heads, p.seq_k);
  resolve_strides(p, "V", t.v_strides, p.kv_heads, p.seq_k);
  resolve_strides(p, "O", t.o_strides, p.heads, p.seq_q);
  check_pointer("Q", t.q);
  check_pointer("K", t.k);
  check_pointer("V", t.v);
  check_pointer("O", t.o);
  check_layout(p, "Q", t.q, t.q_strides, p.heads, positions(p, true), false);
  check_layout(p, "K", t.k, t.k_strides, p.kv_heads, positions(p, false), false);
  check_layout(p, "V", t.v, t.v_strides, p.kv_heads, positions(p, false), false);
  check_layout(p, "O", t.o, t.o_strides, p.heads, positions(p, true), true);
  if (t.lse % 4 != 0)
    throw UserError(fmt::format("attention LSE pointer 0x{:x} is not 4-byte aligned",
                                static_cast<unsigned long long>(t.lse)));
  const int64_t batches = p.packed() ? 1 : p.batch;
  const Extent q{"Q", t.q, t.q_strides, batches, positions(p, true), p.heads};
  const Extent k{"K", t.k, t.k_strides, batches, positions(p, false), p.kv_heads};
  const Extent v{"V", t.v, t.v_strides, batches, positions(p, false), p.kv_heads};
  const Extent o{"O", t.o, t.o_strides, batches, positions(p, true), p.heads};
  check_outputs_apart(p, {o}, {q, k, v}, /*o_may_be_q=*/true);
  check_lse_apart(p, t.lse, {q, k, v, o}, /*lse_is_output=*/true);
  check_operands_apart(p, t.modifier_operands, {o}, t.lse);
  return t;
}

BackwardTensors resolve(const Problem& p, BackwardTensors t) {
  check_modifier_operands(p, t.modifier_operands);
  const struct {
    const char* name;
    CUdeviceptr pointer;
    Strides* strides;
    int64_t heads, seq;
    bool query, output;
  } tensors[] = {
      {"Q", t.q, &t.q_strides, p.heads, p.seq_q, true, false},
      {"K", t.k, &t.k_strides, p.kv_heads, p.seq_k, false, false},
      {"V", t.v, &t.v_strides, p.kv_heads, p.seq_k, false, false},
      {"O", t.o, &t.o_strides, p.heads, p.seq_q, true, false},
      {"dO", t.d_o, &t.do_strides, p.heads, p.seq_q, true, false},
      {"dQ", t.dq, &t.dq_strides, p.heads, p.seq_q, true, true},
      {"dK", t.dk, &t.dk_strides, p.kv_heads, p.seq_k, false, true},
      {"dV", t.dv, &t.dv_strides, p.kv_heads, p.seq_k, false, true},
  };
  for (const auto& tensor : tensors) {
    resolve_strides(p, tensor.name, *tensor.strides, tensor.heads, tensor.seq);
    check_pointer(tensor.name, tensor.pointer);
    check_layout(p, tensor.name, tensor.pointer, *tensor.strides, tensor.heads,
                 positions(p, tensor.query), tensor.output);
  }
  if (t.lse == 0)
    throw UserError("attention backward needs the forward pass's LSE",
                    "pass the lse the forward launch wrote (f32, [batch, heads, seq_q])");
  if (t.lse % 4 != 0)
    throw UserError(fmt::format("attention LSE pointer 0x{:x} is not 4-byte aligned",
                                static_cast<unsigned long long>(t.lse)));
  const int64_t batches = p.packed() ? 1 : p.batch;
  std::vector<Extent> inputs, outputs;
  for (const auto& tensor : tensors)
    (tensor.output ? outputs : inputs)
        .push_back({tensor.name, tensor.pointer, *tensor.strides, batches,
                    positions(p, tensor.query), tensor.heads});
  check_outputs_apart(p, outputs, inputs, /*o_may_be_q=*/false);
  check_lse_apart(p, t.lse, outputs, /*lse_is_output=*/false);
  check_operands_apart(p, t.modifier_operands, outputs, 0);
  return t;
}

void check_fits_device(const Problem& p, const Config& config,
                       const cuda::DeviceProperties& device) {
  if (device.cc_major < 8)
    throw UserError(fmt::format("attention needs mma.sync on bf16/f16 (sm_80 or later); {} is {}",
                                device.name, device.arch()));
  if (config.wgmma && device.cc_major * 10 + device.cc_minor != 90)
    throw UserError(fmt::format("attention config {} uses TMA and wgmma, which need an sm_90 GPU "
                                "(Hopper); {} is {}",
                                config.to_string(), device.name, device.arch()),
                    "use mma=sync");
  const int shared = shared_bytes(p, config);
  if (shared > device.shared_per_block_optin)
    throw UserError(fmt::format("attention config {} needs {} bytes of shared memory per block "
                                "at head dim {}; {} allows at most {}",
                                config.to_string(), shared, p.head_dim, device.name,
                                device.shared_per_block_optin),
                    "use fewer stages or a smaller bn");
  if (device.max_threads_per_block > 0 && config.threads() > device.max_threads_per_block)
    throw UserError(fmt::format("attention config {} needs {} threads per block; {} allows {}",
                                config.to_string(), config.threads(), device.name,
                                device.max_threads_per_block));
}

namespace {

Problem with_pass(Problem problem, bool backward) {
  problem.backward = backward;
  return problem;
}

}  // namespace

Attention::Attention(Runtime& runtime, Problem problem)
    : runtime_(&runtime), problem_(with_pass(std::move(problem), false)) {
  validate_problem(problem_);
  const tuner::Choice choice = choose_config(runtime, tuner::AttentionTuning(problem_));
  config_ = Config::parse(choice.config);
  config_source_ = tuner::to_string(choice.source);
  load();
}

Attention::Attention(Runtime& runtime, Problem problem, Config config)
    : runtime_(&runtime),
      problem_(with_pass(std::move(problem), false)),
      config_(config),
      config_source_("given") {
  validate(problem_, config_);
  load();
}

void Attention::load() {
  check_fits_device(problem_, config_, runtime_->device());
  offsets_ = upload_offsets(problem_);
  source_ = lower(problem_, config_);
  kernel_ = runtime_->compile(source_);
  check_registers(config_, *kernel_, runtime_->device());
}

std::string Attention::kernel_origin() const {
  return to_string(kernel_->origin());
}

void Attention::launch(const Tensors& given, CUstream stream) {
  const Tensors t = resolve(problem_, given);
  const Problem& p = problem_;
  DeviceArgs args = forward_args(p, t.q, t.k, t.v, t.o, t.lse, t.q_strides, t.k_strides,
                                 t.v_strides, t.o_strides, offsets_, t.modifier_operands);
  const auto tiles = static_cast<unsigned>((p.seq_q + config_.bm - 1) / config_.bm);
  std::array<unsigned, 3> grid = {tiles, static_cast<unsigned>(p.heads),
                                  static_cast<unsigned>(p.batch)};
  if (config_.persistent) {  // one block per SM walks the items (at most one per item:
                             // pairs of query tiles, so an odd count has an empty one)
    const int64_t items = int64_t{(tiles + 1) / 2 * 2} * p.heads * p.batch;
    grid = {static_cast<unsigned>(std::min<int64_t>(items, runtime_->device().sm_count)), 1, 1};
  }
  if (!config_.wgmma) {
    void* params[] = {&args};
    kernel_->launch(grid, params, stream);
    return;
  }
  // Q in boxes of 64 rows (one per consumer warpgroup), K and V of bn keys.
  // Packed problems: one sequence of all the tokens (batch 1 of the map).
  const int64_t map_batch = p.packed() ? 1 : p.batch;
  const int64_t q_tokens = p.packed() ? p.total_q() : p.seq_q;
  const int64_t k_tokens = p.packed() ? p.total_k() : p.seq_k;
  Strides q_strides = t.q_strides, k_strides = t.k_strides, v_strides = t.v_strides;
  if (p.packed()) {  // the unused batch stride must still be a valid one
    q_strides.batch = q_tokens * q_strides.seq;
    k_strides.batch = k_tokens * k_strides.seq;
    v_strides.batch = k_tokens * v_strides.seq;
  }
  CUtensorMap map_q =
      sequence_map(p.dtype, t.q, p.head_dim, q_tokens, p.heads, map_batch, q_strides, 64);
  CUtensorMap map_k = sequence_map(p.dtype, t.k, p.head_dim, k_tokens, p.kv_heads, map_batch,
                                   k_strides, config_.bn);
  CUtensorMap map_v = sequence_map(p.dtype, t.v, p.head_dim, k_tokens, p.kv_heads, map_batch,
                                   v_strides, config_.bn);
  void* params[] = {&args, &map_q, &map_k, &map_v};
  kernel_->launch(grid, params, stream);
}

AttentionBackward::AttentionBackward(Runtime& runtime, Problem problem)
    : runtime_(&runtime), problem_(with_pass(std::move(problem), true)) {
  validate_problem(problem_);
  const tuner::Choice choice = choose_config(runtime, tuner::AttentionTuning(problem_));
  config_ = Config::parse(choice.config);
  config_source_ = tuner::to_string(choice.source);
  load();
}

AttentionBackward::AttentionBackward(Runtime& runtime, Problem problem, Config config)
    : runtime_(&runtime),
      problem_(with_pass(std::move(problem), true)),
      config_(config),
      config_source_("given") {
  validate(problem_, config_);
  load();
}

void AttentionBackward::load() {
  check_fits_device(problem_, config_, runtime_->device());
  offsets_ = upload_offsets(problem_);
  workspace_ = cuda::DeviceBuffer(static_cast<size_t>(backward_workspace_rows(problem_)) * 8);
  // The sums start as zeros (the prep kernel's), which compressible memory writes to
  // DRAM and reads back in a fraction of their bytes (113 MB written became 31 at 16k
  // tokens x 16 heads, and the dK/dV kernel read 100 MB less:
  // docs/perf/2026-12-04-h200-compressible-dq-sums.md).
  if (config_.atomic_dq)
    dq_accum_ = cuda::DeviceBuffer::compressible(
        static_cast<size_t>(backward_dq_accum_bytes(problem_, config_)));
  for (BackwardKernel& k : lower_backward(problem_, config_)) {
    std::shared_ptr<const CompiledKernel> kernel = runtime_->compile(k.source);
    check_registers(config_, *kernel, runtime_->device());
    kernels_.emplace_back(k.role, std::move(kernel));
  }
}

std::vector<KernelSource> AttentionBackward::sources() const {
  std::vector<KernelSource> out;
  for (const auto& [role, kernel] : kernels_) out.push_back(kernel->source());
  return out;
}

const CompiledKernel& AttentionBackward::kernel(const std::string& role) const {
  for (const auto& [name, kernel] : kernels_)
    if (name == role) return *kernel;
  throw UserError("attention backward has no kernel '" + role + "'", "the roles are prep, kv, q");
}

std::string AttentionBackward::kernel_origin() const {
  std::string out;
  for (const auto& [role, kernel] : kernels_) {
    const std::string origin = to_string(kernel->origin());
    if (out.find(origin) == std::string::npos) out += (out.empty() ? "" : "+") + origin;
  }
  return out;
}

void AttentionBackward::launch(const BackwardTensors& given, CUstream stream) {
  const BackwardTensors t = resolve(problem_, given);
  const Problem& p = problem_;
  BackwardDeviceArgs args{};
  args.forward = forward_args(p, t.q, t.k, t.v, t.o, t.lse, t.q_strides, t.k_strides, t.v_strides,
                              t.o_strides, offsets_, t.modifier_operands);
  args.d_o = t.d_o;
  args.dq = t.dq;
  args.dk = t.dk;
  args.dv = t.dv;
  args.delta = workspace_.get();
  args.lse_log2 = workspace_.get() + static_cast<size_t>(backward_workspace_rows(p)) * 4;
  args.dq_accum = config_.atomic_dq ? dq_accum_.get() : 0;
  args.do_batch = t.do_strides.batch;
  args.do_seq = t.do_strides.seq;
  args.do_head = t.do_strides.head;
  args.dq_batch = t.dq_strides.batch;
  args.dq_seq = t.dq_strides.seq;
  args.dq_head = t.dq_strides.head;
  args.dk_batch = t.dk_strides.batch;
  args.dk_seq = t.dk_strides.seq;
  args.dk_head = t.dk_strides.head;
  args.dv_batch = t.dv_strides.batch;
  args.dv_seq = t.dv_strides.seq;
  args.dv_head = t.dv_strides.head;
  const auto tiles = [](int64_t n, int64_t tile) {
    return static_cast<unsigned>((n + tile - 1) / tile);
  };
  const auto heads = static_cast<unsigned>(p.heads), kv_heads = static_cast<unsigned>(p.kv_heads),
             batch = static_cast<unsigned>(p.batch);
  // The wgmma kernels read Q, K, V and dO through tensor maps: boxes of `q_rows` query
  // and `k_rows` key positions (packed problems: one sequence of all the tokens).
  const int64_t map_batch = p.packed() ? 1 : p.batch;
  const int64_t q_tokens = p.packed() ? p.total_q() : p.seq_q;
  const int64_t k_tokens = p.packed() ? p.total_k() : p.seq_k;
  auto map_of = [&](CUdeviceptr pointer, const Strides& strides, int64_t map_heads, int64_t tokens,
                    int rows) {
    return sequence_map(p.dtype, pointer, p.head_dim, tokens, map_heads, map_batch, strides, rows);
  };
  void* params[] = {&args};
  for (const auto& [role, kernel] : kernels_) {
    if (config_.wgmma && (role == "kv" || (role == "q" && !config_.atomic_dq))) {
      const bool kv = role == "kv";
      const int q_rows = kv ? config_.bm : 64, k_rows = kv ? 64 : config_.bn;
      CUtensorMap map_q = map_of(t.q, t.q_strides, p.heads, q_tokens, q_rows);
      CUtensorMap map_k = map_of(t.k, t.k_strides, p.kv_heads, k_tokens, k_rows);
      CUtensorMap map_v = map_of(t.v, t.v_strides, p.kv_heads, k_tokens, k_rows);
      CUtensorMap map_do = map_of(t.d_o, t.do_strides, p.heads, q_tokens, q_rows);
      // The atomic dQ's sums (backward_workspace_rows): [heads][tokens] when packed,
      // else [batch x heads][seq_q]. (The other kernels take five parameters: the
      // driver reads as many as the kernel has.)
      CUtensorMap map_dq{};
      if (kv && config_.atomic_dq)
        map_dq =
            sums_map(args.dq_accum, p.head_dim, q_tokens, p.packed() ? p.heads : p.batch * p.heads);
      void* wgmma_params[] = {&args, &map_q, &map_k, &map_v, &map_do, &map_dq};
      const std::array<unsigned, 3> grid =
          kv ? std::array<unsigned, 3>{tiles(p.seq_k, 128), kv_heads, batch}
             : std::array<unsigned, 3>{tiles(p.seq_q, 128), heads, batch};
      kernel->launch(grid, wgmma_params, stream);
      continue;
    }
    std::array<unsigned, 3> grid{};
    if (role == "prep" || (role == "q" && config_.atomic_dq))  // 64 query rows a block
      grid = {tiles(p.seq_q, 64), heads, batch};
    else if (role == "kv")
      grid = {tiles(p.seq_k, config_.bn), kv_heads, batch};
    else
      grid = {tiles(p.seq_q, config_.bm), heads, batch};
    kernel->launch(grid, params, stream);
  }
}

}  // namespace kjit::attention
