#include "kjit/runtime/attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "kjit/runtime/cuda/driver.h"
#include "kjit/runtime/tuning.h"
#include "kjit/support/error.h"
#include "kjit/tuner/attention_space.h"

namespace kjit::attention {

namespace {

// Byte-for-byte mirror of kjit::AttentionArgs in templates/attention.cuh.
struct DeviceArgs {
  CUdeviceptr q, k, v, o, lse;
  CUdeviceptr cu_seqlens_q, cu_seqlens_k;
  long long q_batch, q_seq, q_head;
  long long k_batch, k_seq, k_head;
  long long v_batch, v_seq, v_head;
  long long o_batch, o_seq, o_head;
  int seq_q, seq_k;
  int heads, kv_group;
  float scale, scale_log2;
  int window_left, window_right;
  int total_q;
};
static_assert(sizeof(DeviceArgs) == 7 * 8 + 12 * 8 + 10 * 4,
              "DeviceArgs must mirror kjit::AttentionArgs");

constexpr double kLog2e = 1.4426950408889634;

// A 4-D tensor map (head dim, sequence, head, batch) of Q, K or V for the copy
// engine (the wgmma kernel): boxes of 64 head-dim elements (128 bytes, the swizzle
// span) by `box_rows` positions, 128-byte swizzle, zeros past the sequence.
CUtensorMap sequence_map(ir::DType dtype, CUdeviceptr base, int64_t head_dim, int64_t seq,
                         int64_t heads, int64_t batch, const Strides& strides, int box_rows) {
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(seq),
                              static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
  const cuuint64_t byte_strides[3] = {static_cast<cuuint64_t>(strides.seq * 2),
                                      static_cast<cuuint64_t>(strides.head * 2),
                                      static_cast<cuuint64_t>(strides.batch * 2)};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  KJIT_CU(
      cuTensorMapEncodeTiled, &map,
      dtype == ir::DType::F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
      4, reinterpret_cast<void*>(base), dims, byte_strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return map;
}

}  // namespace

Tensors resolve(const Problem& p, Tensors t) {
  const int64_t d = p.head_dim;
  auto fill = [&](const char* name, Strides& s, int64_t heads, int64_t seq) {
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
      s.batch = seq * s.seq;
    }
    // The kernel reads and writes rows of D contiguous elements in 16-byte chunks.
    for (const int64_t stride : {s.batch, s.seq, s.head}) {
      if (stride % 8 != 0)
        throw UserError(fmt::format("attention {} stride {} is not a multiple of 8 elements "
                                    "(16 bytes)",
                                    name, stride),
                        "pad the tensor's rows to 8 elements, or make it contiguous");
    }
  };
  fill("Q", t.q_strides, p.heads, p.seq_q);
  fill("K", t.k_strides, p.kv_heads, p.seq_k);
  fill("V", t.v_strides, p.kv_heads, p.seq_k);
  fill("O", t.o_strides, p.heads, p.seq_q);
  const struct {
    const char* name;
    CUdeviceptr pointer;
  } pointers[] = {{"Q", t.q}, {"K", t.k}, {"V", t.v}, {"O", t.o}};
  for (const auto& [name, pointer] : pointers) {
    if (pointer == 0) throw UserError(fmt::format("attention needs a device pointer for {}", name));
    if (pointer % 16 != 0)
      throw UserError(fmt::format("attention {} pointer 0x{:x} is not 16-byte aligned", name,
                                  static_cast<unsigned long long>(pointer)),
                      "the kernel loads 16-byte chunks; allocations from cuMemAlloc are aligned");
  }
  if (t.lse % 4 != 0)
    throw UserError(fmt::format("attention LSE pointer 0x{:x} is not 4-byte aligned",
                                static_cast<unsigned long long>(t.lse)));
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
                                config.to_string(), p.head_dim, shared, device.name,
                                device.shared_per_block_optin),
                    "use fewer stages or a smaller bn");
  if (device.max_threads_per_block > 0 && config.threads() > device.max_threads_per_block)
    throw UserError(fmt::format("attention config {} needs {} threads per block; {} allows {}",
                                config.to_string(), config.threads(), device.name,
                                device.max_threads_per_block));
}

Attention::Attention(Runtime& runtime, Problem problem)
    : runtime_(&runtime), problem_(std::move(problem)) {
  validate_problem(problem_);
  const tuner::Choice choice = choose_config(runtime, tuner::AttentionTuning(problem_));
  config_ = Config::parse(choice.config);
  config_source_ = tuner::to_string(choice.source);
  load();
}

Attention::Attention(Runtime& runtime, Problem problem, Config config)
    : runtime_(&runtime), problem_(std::move(problem)), config_(config), config_source_("given") {
  validate(problem_, config_);
  load();
}

void Attention::load() {
  check_fits_device(problem_, config_, runtime_->device());
  if (problem_.packed()) {  // the offsets, as the kernel reads them (int32)
    std::vector<int32_t> offsets;
    for (const int64_t o : problem_.cu_seqlens_q) offsets.push_back(static_cast<int32_t>(o));
    for (const int64_t o : problem_.cu_seqlens_k) offsets.push_back(static_cast<int32_t>(o));
    offsets_ = cuda::DeviceBuffer::from(offsets);
  }
  source_ = lower(problem_, config_);
  kernel_ = runtime_->compile(source_);
  const cuda::DeviceProperties& device = runtime_->device();
  const int64_t registers = static_cast<int64_t>(kernel_->stats().registers) * config_.threads();
  if (device.registers_per_block > 0 && registers > device.registers_per_block)
    throw UserError(
        fmt::format("attention config {} needs {} registers per block; {} allows {}",
                    config_.to_string(), registers, device.name, device.registers_per_block),
        "use a smaller bm");
}

std::string Attention::kernel_origin() const {
  return to_string(kernel_->origin());
}

void Attention::launch(const Tensors& given, CUstream stream) {
  const Tensors t = resolve(problem_, given);
  const Problem& p = problem_;
  DeviceArgs args{};
  args.q = t.q;
  args.k = t.k;
  args.v = t.v;
  args.o = t.o;
  args.lse = t.lse;
  args.q_batch = t.q_strides.batch;
  args.q_seq = t.q_strides.seq;
  args.q_head = t.q_strides.head;
  args.k_batch = t.k_strides.batch;
  args.k_seq = t.k_strides.seq;
  args.k_head = t.k_strides.head;
  args.v_batch = t.v_strides.batch;
  args.v_seq = t.v_strides.seq;
  args.v_head = t.v_strides.head;
  args.o_batch = t.o_strides.batch;
  args.o_seq = t.o_strides.seq;
  args.o_head = t.o_strides.head;
  args.seq_q = static_cast<int>(p.seq_q);
  args.seq_k = static_cast<int>(p.seq_k);
  args.heads = static_cast<int>(p.heads);
  args.kv_group = static_cast<int>(p.heads / p.kv_heads);
  const double scale = p.softmax_scale();
  args.scale = static_cast<float>(scale);
  args.scale_log2 = static_cast<float>(scale * kLog2e);
  args.window_left = static_cast<int>(p.window_left);
  args.window_right = static_cast<int>(p.right());
  args.total_q = static_cast<int>(p.total_q());
  if (p.packed()) {
    args.cu_seqlens_q = offsets_.get();
    args.cu_seqlens_k = offsets_.get() + p.cu_seqlens_q.size() * sizeof(int32_t);
  }
  const auto tiles = static_cast<unsigned>((p.seq_q + config_.bm - 1) / config_.bm);
  const std::array<unsigned, 3> grid = {tiles, static_cast<unsigned>(p.heads),
                                        static_cast<unsigned>(p.batch)};
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

}  // namespace kjit::attention
