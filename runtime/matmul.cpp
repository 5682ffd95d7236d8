#include "kjit/runtime/matmul.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <limits>
#include <map>
#include <thread>
#include <tuple>

#include "kjit/runtime/compile.h"
#include "kjit/runtime/cuda/driver.h"
#include "kjit/runtime/cuda/tensor_map.h"
#include "kjit/runtime/tuning.h"
#include "kjit/support/error.h"
#include "kjit/support/log.h"
#include "kjit/tuner/matmul_space.h"

namespace kjit::matmul {

namespace {

// Byte-for-byte mirror of kjit::MatmulArgs in templates/matmul.cuh.
struct DeviceArgs {
  CUdeviceptr a, b, c0, c, workspace, arrivals;
  long long lda, ldb, ldc0, ldc;
  long long stride_a, stride_b, stride_c0, stride_c;
  int m, n, k, batch;
  int splits;
  int k_per_split;
  int c_pairs;
  int raster;
  int splits_resident;
  int splits_cluster;
  int c_tma;
  int streamk_tiles;
  int streamk_splits;
  float alpha, beta;
};
static_assert(sizeof(DeviceArgs) == 176, "DeviceArgs must mirror kjit::MatmulArgs");

// Mirror of kjit::EpilogueOperands.
struct DeviceOperands {
  CUdeviceptr ptr[Epilogue::kMaxOperands];
  long long ld[Epilogue::kMaxOperands];
  long long batch_stride[Epilogue::kMaxOperands];
};
static_assert(sizeof(DeviceOperands) == 96, "DeviceOperands must mirror kjit::EpilogueOperands");

// Mirror of kjit::matmul::StageJob.
struct DeviceStageJob {
  CUdeviceptr src, dst;
  long long rows, cols, ld_src, stride_src, ld_dst, transpose;
};
static_assert(sizeof(DeviceStageJob) == 64, "DeviceStageJob must mirror kjit::matmul::StageJob");

// Mirror of kjit::matmul::PadJob.
struct DevicePadJob {
  CUdeviceptr src, dst;
  long long rows, cols, ld_src, stride_src, rows_dst, ld_dst;
};
static_assert(sizeof(DevicePadJob) == 64, "DevicePadJob must mirror kjit::matmul::PadJob");

int64_t round_up(int64_t x, int64_t to) {
  return (x + to - 1) / to * to;
}
int64_t ceil_div(int64_t x, int64_t y) {
  return (x + y - 1) / y;
}

// Stored rows x columns of A and B.
int64_t a_cols(const Problem& p) {
  return p.a_transposed ? p.m : p.k;
}
int64_t a_rows(const Problem& p) {
  return p.a_transposed ? p.k : p.m;
}
int64_t b_cols(const Problem& p) {
  return p.b_transposed ? p.k : p.n;
}
int64_t b_rows(const Problem& p) {
  return p.b_transposed ? p.n : p.k;
}

// A 3-D tensor map of one stored operand for the copy engine (wgmma path): dims
// (inner, rows, batch), a box of 128 bytes of inner elements (the swizzle span: 64
// bf16/f16, 32 f32) by box_rows, 128-byte swizzle, zero fill outside the matrix.
CUtensorMap operand_map(DType dtype, CUdeviceptr base, int64_t inner, int64_t rows, int64_t ld,
                        int64_t batch_stride, int64_t batch, int box_rows) {
  const int64_t elem = dtype_bytes(dtype);
  // tf32 operands travel as plain f32 bits; the tensor cores read their top 19
  // (sign, exponent, 10 mantissa bits: the rest is truncated).
  const CUtensorMapDataType type = dtype == DType::BF16  ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : dtype == DType::F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                         : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  const int64_t counts[] = {inner, rows, batch};
  const int64_t strides[] = {ld, batch_stride};
  const uint32_t box[] = {static_cast<uint32_t>(128 / elem), static_cast<uint32_t>(box_rows), 1};
  return cuda::tiled_map(type, elem, base, counts, strides, box);
}

// One stored matrix of a batch: rows x cols elements, `ld` apart, `stride` between
// batches, `bytes` per element; `extent`: bytes from its first element to one past
// its last, over all batches (measured()).
struct Operand {
  const char* name;
  CUdeviceptr pointer;
  int64_t rows, cols, ld, stride, bytes;
  int64_t extent = 0;
};

// Bytes from an operand's first element to one past its last, over all batches;
// a UserError when that does not fit 64 bits.
int64_t extent_bytes(const Operand& x, int64_t batch) {
  int64_t last = 0, span = 0, bytes = 0;
  // (A pointer at or above 2^63 would read as negative here, and its end never
  // overflow: such a pointer is refused with the rest.)
  const bool overflow = x.pointer > static_cast<CUdeviceptr>(std::numeric_limits<int64_t>::max()) ||
                        __builtin_mul_overflow(batch - 1, x.stride, &last) ||
                        __builtin_mul_overflow(x.rows - 1, x.ld, &span) ||
                        __builtin_add_overflow(last, span, &last) ||
                        __builtin_add_overflow(last, x.cols, &last) ||
                        __builtin_mul_overflow(last, x.bytes, &bytes) ||
                        __builtin_add_overflow(static_cast<int64_t>(x.pointer), bytes, &span);
  if (overflow)
    throw UserError(fmt::format("{} spans more than 2^63 bytes: {} batches of stride {}, {} rows "
                                "of leading dimension {} ({} B elements)",
                                x.name, batch, x.stride, x.rows, x.ld, x.bytes),
                    "offsets are 64-bit byte counts; check the sizes, strides and leading "
                    "dimensions");
  return bytes;
}

Operand measured(Operand x, int64_t batch) {
  x.extent = extent_bytes(x, batch);
  return x;
}

// Whether C and an input share an element. Their byte ranges must overlap; then,
// for single matrices with the same leading dimension and element size (column
// blocks of one buffer), only where their column ranges meet within a row.
bool overlaps(const Operand& c, const Operand& x, int64_t batch) {
  const int64_t c0 = static_cast<int64_t>(c.pointer), x0 = static_cast<int64_t>(x.pointer);
  if (c0 + c.extent <= x0 || x0 + x.extent <= c0) return false;
  if (batch > 1 || c.ld != x.ld || c.bytes != x.bytes || (c0 - x0) % c.bytes != 0) return true;
  // C's first element sits `shift` columns into a row of x's (mod ld).
  const int64_t shift = (((c0 - x0) / c.bytes) % c.ld + c.ld) % c.ld;
  return shift < x.cols || shift + c.cols > c.ld;
}

}  // namespace

Tensors resolve(const Problem& p, Tensors t) {
  auto check_ld = [](const char* name, int64_t& ld, int64_t cols) {
    if (ld == 0) ld = cols;
    if (ld < cols)
      throw UserError(fmt::format("leading dimension of {} is {} but its stored rows have {} "
                                  "elements",
                                  name, ld, cols),
                      "the leading dimension must be at least the stored row length");
  };
  check_ld("A", t.lda, a_cols(p));
  check_ld("B", t.ldb, b_cols(p));
  check_ld("C", t.ldc, p.n);
  check_ld("C0", t.ldc0, p.n);
  // One stored matrix, rows x leading dimension elements: the packed batch stride.
  // (Unchecked, m = 2 and ldc = 2^62 made C's stride INT64_MIN, which the extent
  // check below then cancelled against the rows' span.)
  auto matrix_elements = [](const char* name, int64_t rows, int64_t ld) {
    int64_t elements = 0;
    if (__builtin_mul_overflow(rows, ld, &elements))
      throw UserError(fmt::format("{} has {} rows of leading dimension {}: more than 2^63 elements",
                                  name, rows, ld),
                      "offsets are 64-bit; check the sizes and leading dimensions");
    return elements;
  };
  const int64_t c_matrix = matrix_elements("C", p.m, t.ldc);
  if (p.batch > 1) {
    if (t.stride_a == 0) t.stride_a = matrix_elements("A", a_rows(p), t.lda);
    if (t.stride_b == 0) t.stride_b = matrix_elements("B", b_rows(p), t.ldb);
    if (t.stride_c == 0) t.stride_c = c_matrix;
    if (t.stride_c0 == 0) t.stride_c0 = matrix_elements("C0", p.m, t.ldc0);
  }
  if (p.batch > 1 && t.stride_c < c_matrix)
    throw UserError(fmt::format("C's batch stride {} is smaller than one M x ldc matrix ({})",
                                t.stride_c, c_matrix),
                    "batched outputs must not overlap");
  if (t.a == 0 || t.b == 0 || t.c == 0)
    throw UserError("matmul needs device pointers for A, B and C");
  // Every element the kernels touch is a whole, naturally aligned access (a bf16 at
  // an odd address faults on the GPU).
  for (const auto& [name, pointer, bytes] :
       {std::tuple<const char*, uint64_t, int64_t>{"A", t.a, dtype_bytes(p.input)},
        {"B", t.b, dtype_bytes(p.input)},
        {"C", t.c, dtype_bytes(p.output)},
        {"C0", t.c0, dtype_bytes(p.output)}})
    if (pointer % static_cast<uint64_t>(bytes) != 0)
      throw UserError(fmt::format("{}'s pointer 0x{:x} is not aligned to its {}-byte elements",
                                  name, pointer, bytes),
                      "pass a pointer to the first element of a tensor of this dtype");
  for (const auto& [name, stride] :
       {std::pair<const char*, int64_t>{"A", t.stride_a}, {"B", t.stride_b}, {"C0", t.stride_c0}})
    if (stride < 0)
      throw UserError(fmt::format("{}'s batch stride is {}; strides must be >= 0", name, stride),
                      "pass 0 for packed batches");
  // Every byte offset the kernels form must fit 64 bits, and C must not overlap A or
  // B (other tiles still read them while C is written; C0 and epilogue operands may
  // be C itself: each output reads its own element first).
  const Operand a =
      measured({"A", t.a, a_rows(p), a_cols(p), t.lda, t.stride_a, dtype_bytes(p.input)}, p.batch);
  const Operand b =
      measured({"B", t.b, b_rows(p), b_cols(p), t.ldb, t.stride_b, dtype_bytes(p.input)}, p.batch);
  const Operand c =
      measured({"C", t.c, p.m, p.n, t.ldc, t.stride_c, dtype_bytes(p.output)}, p.batch);
  for (const Operand* x : {&a, &b})
    if (overlaps(c, *x, p.batch))
      throw UserError(
          fmt::format("the output C overlaps the input {} (C at 0x{:x}, {} bytes; {} at "
                      "0x{:x}, {} bytes, same rows)",
                      x->name, c.pointer, c.extent, x->name, x->pointer, x->extent),
          "write C to a buffer that A and B do not use (C0 may alias C)");
  if (t.beta != 0.0f && t.c0 == 0)
    throw UserError("beta != 0 but no C0 was given", "pass C0 (it may alias C) or set beta = 0");
  if (t.extras.size() != p.epilogue.operands.size())
    throw UserError(fmt::format("the epilogue takes {} extra operands but {} were given",
                                p.epilogue.operands.size(), t.extras.size()),
                    "pass one tensor per epilogue operand, in order");
  for (size_t i = 0; i < t.extras.size(); ++i) {
    const EpilogueOperand& operand = p.epilogue.operands[i];
    Tensors::Extra& extra = t.extras[i];
    if (extra.pointer == 0)
      throw UserError("epilogue operand '" + operand.name + "' has no pointer");
    if (operand.kind == OperandKind::Tensor) {
      if (extra.ld == 0) extra.ld = p.n;
      if (extra.ld < p.n)
        throw UserError(fmt::format("epilogue tensor '{}' has leading dimension {} < N = {}",
                                    operand.name, extra.ld, p.n));
    }
    // Its elements: aligned to its dtype (a misaligned load faults), a batch stride
    // >= 0, every offset within 64 bits, and none of them written as C while other
    // tiles still read it. A tensor operand may be C itself (each output reads its own
    // element first), as C0 may.
    const int64_t bytes = dtype_bytes(operand.dtype);
    if (extra.pointer % static_cast<uint64_t>(bytes) != 0)
      throw UserError(
          fmt::format("epilogue operand '{}' pointer 0x{:x} is not aligned to its "
                      "{}-byte elements",
                      operand.name, extra.pointer, bytes));
    if (extra.batch_stride < 0)
      throw UserError(fmt::format("epilogue operand '{}' has batch stride {}; strides must be "
                                  ">= 0",
                                  operand.name, extra.batch_stride),
                      "0 shares one operand among all batches");
    const bool tensor = operand.kind == OperandKind::Tensor;
    const int64_t length = operand.kind == OperandKind::RowVector ? p.m : p.n;
    const Operand x =
        measured({operand.name.c_str(), extra.pointer, tensor ? p.m : 1, tensor ? p.n : length,
                  tensor ? extra.ld : length, extra.batch_stride, bytes},
                 extra.batch_stride > 0 ? p.batch : 1);
    const bool c_itself = tensor && extra.pointer == t.c && extra.ld == t.ldc &&
                          bytes == dtype_bytes(p.output) &&
                          (p.batch == 1 || extra.batch_stride == t.stride_c);
    if (!c_itself && overlaps(c, x, p.batch))
      throw UserError(fmt::format("epilogue operand '{}' (0x{:x}, {} bytes) overlaps the output "
                                  "C (0x{:x}, {} bytes)",
                                  operand.name, x.pointer, x.extent, c.pointer, c.extent),
                      "other tiles still read it while C is written; only a tensor operand "
                      "laid out exactly as C may be C itself");
  }
  // C0 likewise: C itself (same rows), or apart from it.
  if (t.beta != 0.0f) {
    const Operand c0 =
        measured({"C0", t.c0, p.m, p.n, t.ldc0, t.stride_c0, dtype_bytes(p.output)}, p.batch);
    const bool c_itself =
        t.c0 == t.c && t.ldc0 == t.ldc && (p.batch == 1 || t.stride_c0 == t.stride_c);
    if (!c_itself && overlaps(c, c0, p.batch))
      throw UserError(fmt::format("C0 (0x{:x}, {} bytes) overlaps the output C (0x{:x}, {} "
                                  "bytes) but is not C itself",
                                  c0.pointer, c0.extent, c.pointer, c.extent),
                      "pass C0 = C with the same leading dimension and batch stride, or a "
                      "buffer apart from C");
  }
  return t;
}

bool is_aligned(const Problem& p, const Tensors& t) {
  const int bytes = dtype_bytes(p.input);
  const int64_t per16 = 16 / bytes;
  auto ok = [&](CUdeviceptr ptr, int64_t ld, int64_t stride) {
    return ptr % 16 == 0 && ld % per16 == 0 && stride % per16 == 0;
  };
  return ok(t.a, t.lda, t.stride_a) && ok(t.b, t.ldb, t.stride_b);
}

void check_fits_device(const Problem& p, const Config& config,
                       const cuda::DeviceProperties& device) {
  if (config.wgmma && device.cc_major * 10 + device.cc_minor != 90)
    throw UserError(fmt::format("matmul config {} uses wgmma and TMA, which need an sm_90 GPU "
                                "(Hopper); {} is {}",
                                config.to_string(), device.name, device.arch()),
                    p.input == DType::TF32
                        ? "tf32 runs only on the wgmma engine here; use dtype f32 (exact SIMT) "
                          "or bf16/f16"
                        : "use mma=sync (the mma.sync path runs on sm_80 and later)");
  const int shared = shared_bytes(p, config);
  if (shared > device.shared_per_block_optin)
    throw UserError(
        fmt::format("matmul config {} needs {} bytes of shared memory per block; {} "
                    "allows at most {}",
                    config.to_string(), shared, device.name, device.shared_per_block_optin),
        "Reducing stages, bk or the block tile (bm, bn) may help");
  const int threads = p.input == DType::F32 ? 256 : config.threads();
  if (device.max_threads_per_block > 0 && threads > device.max_threads_per_block)
    throw UserError(
        fmt::format("matmul config {} needs {} threads per block; {} allows {}", config.to_string(),
                    threads, device.name, device.max_threads_per_block),
        "use fewer warps");
}

// One alignment class of a Matmul: its problem and config, and the loaded kernels.
struct Matmul::Variant {
  Problem problem;
  Config config;
  std::string source_of_config;  // "store", "nearest", "model" or "given"
  KernelSource source;
  cuda::KernelStats stats;
  std::shared_ptr<const CompiledKernel> main, pad, stage;  // hold the modules
  int resident = 1;  // blocks of `main` per SM (the persistent grid; split-K's co-residency)
  int clusters_at_once = -1;  // split-K clusters of `main` that run at once; -1: not asked yet
};

Matmul::Matmul(Runtime& runtime, Problem problem)
    : runtime_(&runtime), problem_(std::move(problem)) {
  validate_problem(problem_);
}

Matmul::Matmul(Runtime& runtime, Problem problem, Config config)
    : runtime_(&runtime), problem_(std::move(problem)), fixed_(true) {
  auto v = std::make_unique<Variant>();
  v->problem = problem_;
  v->config = config;
  v->source_of_config = "given";
  load(*v);
  last_ = v.get();
  variants_[problem_.aligned ? 1 : 0] = std::move(v);
}

Matmul::~Matmul() = default;

void Matmul::load(Variant& v) {
  const cuda::DeviceProperties& device = runtime_->device();
  check_fits_device(v.problem, v.config, device);
  v.source = lower(v.problem, v.config);
  v.main = runtime_->compile(v.source);
  v.stats = v.main->stats();
  const int threads = v.source.block_threads;
  if (device.registers_per_block > 0 &&
      static_cast<int64_t>(v.stats.registers) * threads > device.registers_per_block)
    throw UserError(fmt::format("matmul config {} needs {} registers x {} threads = {} per "
                                "block; {} allows {}",
                                v.config.to_string(), v.stats.registers, threads,
                                static_cast<int64_t>(v.stats.registers) * threads, device.name,
                                device.registers_per_block),
                    "use fewer warps or a smaller warp tile");
  if (v.config.persistent || v.config.splitk > 1)
    v.resident = std::max(1, v.main->function().max_active_blocks_per_sm(
                                 threads, static_cast<size_t>(v.source.dynamic_shared_bytes)));
  if (pads_operands(v.problem, v.config)) v.pad = runtime_->compile(lower_pad(v.problem.input));
  if (v.problem.input == DType::TF32) v.stage = runtime_->compile(lower_stage_k_major());
}

Matmul::Variant& Matmul::variant(bool aligned) {
  std::unique_ptr<Variant>& slot = variants_[aligned ? 1 : 0];
  if (slot) return *slot;
  if (fixed_)
    throw UserError(
        "these tensors are not 16-byte aligned (pointers, leading dimensions or "
        "batch strides of A or B), but the matmul was built for the aligned class",
        "build the Matmul with problem.aligned = is_aligned(problem, tensors), or let the "
        "tuner choose the config (Matmul(runtime, problem))");
  auto v = std::make_unique<Variant>();
  v->problem = problem_;
  v->problem.aligned = aligned;
  const tuner::Choice choice = choose_config(*runtime_, tuner::MatmulTuning(v->problem));
  v->config = Config::parse(choice.config);
  v->source_of_config = tuner::to_string(choice.source);
  load(*v);
  slot = std::move(v);
  return *slot;
}

const Problem& Matmul::problem() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_ ? last_->problem : problem_;
}
const Config& Matmul::config() const {
  return const_cast<Matmul*>(this)->current().config;
}
const KernelSource& Matmul::source() const {
  return const_cast<Matmul*>(this)->current().source;
}
const cuda::KernelStats& Matmul::stats() const {
  return const_cast<Matmul*>(this)->current().stats;
}
std::string Matmul::config_source() const {
  return const_cast<Matmul*>(this)->current().source_of_config;
}
std::string Matmul::kernel_origin() const {
  return to_string(const_cast<Matmul*>(this)->current().main->origin());
}
const char* Matmul::split_way() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return split_way_;
}

// A variant lives as long as the Matmul: the references the accessors return stay
// valid after the lock.
Matmul::Variant& Matmul::current() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (last_) return *last_;
  return variant(true);
}

void Matmul::launch(const Tensors& given, CUstream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  Tensors t = resolve(problem_, given);
  const bool aligned = is_aligned(problem_, t);
  Variant* v = nullptr;
  if (fixed_) {
    v = variants_[1] ? variants_[1].get() : variants_[0].get();
    // f32 (SIMT), tf32 (staged) and narrow loads read any alignment in place.
    const bool any_alignment =
        problem_.input == DType::F32 || problem_.input == DType::TF32 || v->config.narrow;
    if (v->problem.aligned && !aligned && !any_alignment)
      throw UserError(
          "these tensors are not 16-byte aligned (pointers, leading dimensions or "
          "batch strides of A or B), but the matmul was built for the aligned class",
          "build the Matmul with problem.aligned = is_aligned(problem, tensors), or let the "
          "tuner choose the config (Matmul(runtime, problem))");
  } else {
    v = &variant(aligned);
  }
  last_ = v;
  const Problem& p = v->problem;
  const Config& config = v->config;
  const cuda::DeviceProperties& device = runtime_->device();
  const bool tf32 = p.input == DType::TF32;
  const int elem = dtype_bytes(p.input);

  DeviceArgs args{};
  args.a = t.a;
  args.b = t.b;
  args.c0 = t.beta != 0.0f ? t.c0 : 0;
  args.c = t.c;
  args.lda = t.lda;
  args.ldb = t.ldb;
  args.ldc0 = t.ldc0;
  args.ldc = t.ldc;
  args.stride_a = t.stride_a;
  args.stride_b = t.stride_b;
  args.stride_c0 = t.stride_c0;
  args.stride_c = t.stride_c;
  args.m = static_cast<int>(p.m);
  args.n = static_cast<int>(p.n);
  args.k = static_cast<int>(p.k);
  args.batch = static_cast<int>(p.batch);
  args.alpha = t.alpha;
  args.beta = t.beta;

  // The padding path: copy the misaligned operands into scratch with 128-byte rows
  // and K rounded up to a whole k-tile with zeros (every k-tile whole keeps the
  // interior blocks on the unmasked main loop), in one launch, then run the aligned
  // kernel. An operand that is already 16-byte aligned is read in place when K
  // needs no padding (e.g. A of 2048 x 50257 x 768: only B is copied).
  // The tf32 path: wgmma reads 32-bit operands K-major only, and the copy engine
  // needs 16-byte row strides. An operand stored M/N-major (A "t", B "n") is
  // transposed into K-major scratch, a misaligned K-major one copied with 128-byte
  // rows; both in one launch. "nt" with aligned rows reads A and B in place.
  if (tf32) {
    std::vector<DeviceStageJob> jobs;
    auto stage = [&](cuda::DeviceBuffer& scratch, CUdeviceptr src, int64_t rows, int64_t ld,
                     int64_t stride, bool transpose) {
      DeviceStageJob job{};
      job.src = src;
      job.rows = rows;
      job.cols = p.k;
      job.ld_src = ld;
      job.stride_src = stride;
      job.ld_dst = round_up(p.k, kLineBytes / 4);  // 128-byte rows, as the padding path
      job.transpose = transpose ? 1 : 0;
      const size_t bytes = static_cast<size_t>(rows * job.ld_dst * p.batch * 4);
      if (scratch.bytes() < bytes) scratch = cuda::DeviceBuffer(bytes);
      job.dst = scratch.get();
      jobs.push_back(job);
      return job;
    };
    auto in_place = [&](CUdeviceptr ptr, int64_t ld, int64_t stride, bool k_major) {
      return k_major && ptr % 16 == 0 && ld % 4 == 0 && (p.batch == 1 || stride % 4 == 0);
    };
    if (!in_place(t.a, t.lda, t.stride_a, !p.a_transposed)) {
      const DeviceStageJob job = stage(scratch_a_, t.a, p.m, t.lda, t.stride_a, p.a_transposed);
      args.a = job.dst;
      args.lda = job.ld_dst;
      args.stride_a = p.m * job.ld_dst;
    }
    if (!in_place(t.b, t.ldb, t.stride_b, p.b_transposed)) {
      const DeviceStageJob job = stage(scratch_b_, t.b, p.n, t.ldb, t.stride_b, !p.b_transposed);
      args.b = job.dst;
      args.ldb = job.ld_dst;
      args.stride_b = p.n * job.ld_dst;
    }
    if (!jobs.empty()) {
      int64_t most_rows = 0;
      for (const DeviceStageJob& job : jobs) most_rows = std::max<int64_t>(most_rows, job.rows);
      const int64_t z = p.batch * static_cast<int64_t>(jobs.size());
      if (ceil_div(most_rows, 32) > 65535 || z > 65535)  // K fits 32 bits (validate())
        throw UserError(fmt::format("the tf32 staging copy of a {} x {} operand (batch {}) "
                                    "exceeds the launch grid",
                                    most_rows, p.k, p.batch),
                        "pass K-major operands (layout nt) with 16-byte-aligned rows, or split "
                        "the problem");
      cuda::LaunchConfig launch;
      launch.block = {256, 1, 1};
      launch.grid = {static_cast<unsigned>(ceil_div(p.k, 32)),
                     static_cast<unsigned>(ceil_div(most_rows, 32)), static_cast<unsigned>(z)};
      launch.stream = stream;
      DeviceStageJob job0 = jobs[0], job1 = jobs.size() > 1 ? jobs[1] : jobs[0];
      int count = static_cast<int>(jobs.size());
      void* stage_args[] = {&job0, &job1, &count};
      v->stage->function().launch(launch, stage_args);
    }
  }

  if (pads_operands(p, config)) {
    const int64_t k_padded = pads_k(p, config) ? round_up(p.k, config.bk) : p.k;
    std::vector<DevicePadJob> jobs;
    auto pad = [&](cuda::DeviceBuffer& scratch, CUdeviceptr src, int64_t rows, int64_t cols,
                   int64_t ld, int64_t stride, bool k_is_rows) {
      DevicePadJob job{};
      job.src = src;
      job.rows = rows;
      job.cols = cols;
      job.ld_src = ld;
      job.stride_src = stride;
      job.rows_dst = k_is_rows ? k_padded : rows;
      // Rows a whole number of 128-byte lines apart: the copy engine's boxes are one
      // 128-byte line wide, and a pitch 16 bytes off a line makes each box row straddle
      // two lines (on the H200, B of 4096^3 with 4104-element rows: 0.224 ms against
      // 0.179; docs/perf/2026-12-03-h200-operand-pitch.md).
      job.ld_dst = round_up(k_is_rows ? cols : k_padded, kLineBytes / elem);
      // The copy kernel indexes chunks with 32-bit unsigned integers, and its
      // grid-stride loop must not wrap: fewer than 2^31 chunks (32 GiB).
      if (job.rows_dst * (job.ld_dst / 8) >= (int64_t(1) << 31))
        throw UserError(fmt::format("the padded copy of a {} x {} operand has 2^31 or more "
                                    "16-byte chunks",
                                    rows, cols),
                        "pass 16-byte-aligned operands (leading dimensions a multiple of 8), "
                        "or split the problem");
      const size_t bytes = static_cast<size_t>(job.rows_dst * job.ld_dst * p.batch * elem);
      if (scratch.bytes() < bytes) scratch = cuda::DeviceBuffer(bytes);
      job.dst = scratch.get();
      jobs.push_back(job);
      return job;
    };
    if (!reads_in_place(p, config, static_cast<int64_t>(t.a), t.lda, t.stride_a, p.a_transposed)) {
      const DevicePadJob job =
          pad(scratch_a_, t.a, a_rows(p), a_cols(p), t.lda, t.stride_a, p.a_transposed);
      args.a = job.dst;
      args.lda = job.ld_dst;
      args.stride_a = job.rows_dst * job.ld_dst;
    }
    if (!reads_in_place(p, config, static_cast<int64_t>(t.b), t.ldb, t.stride_b, !p.b_transposed)) {
      const DevicePadJob job =
          pad(scratch_b_, t.b, b_rows(p), b_cols(p), t.ldb, t.stride_b, !p.b_transposed);
      args.b = job.dst;
      args.ldb = job.ld_dst;
      args.stride_b = job.rows_dst * job.ld_dst;
    }
    args.k = static_cast<int>(k_padded);
    if (!jobs.empty()) {
      int64_t most_chunks = 0;
      for (const DevicePadJob& job : jobs)
        most_chunks = std::max<int64_t>(most_chunks, job.rows_dst * job.ld_dst / 8);
      // About 16 blocks of 256 threads per SM in all, each striding over its matrix.
      const int64_t blocks_per_matrix = std::max<int64_t>(
          1, int64_t(device.sm_count) * 16 / (static_cast<int64_t>(jobs.size()) * p.batch));
      cuda::LaunchConfig launch;
      launch.block = {256, 1, 1};
      launch.grid = {
          static_cast<unsigned>(std::min<int64_t>(ceil_div(most_chunks, 256), blocks_per_matrix)),
          static_cast<unsigned>(p.batch), static_cast<unsigned>(jobs.size())};
      launch.stream = stream;
      DevicePadJob job0 = jobs[0], job1 = jobs.size() > 1 ? jobs[1] : jobs[0];
      void* pad_args[] = {&job0, &job1};
      v->pad->function().launch(launch, pad_args);
    }
  }

  // Split-K: K ranges of whole k-tiles; the last split takes the remainder. (With
  // schedule=streamk splitk splits only the last wave's tiles: below.)
  const int bk = config.bk;
  // Output tiles: bm x bn, or bn x bm where the kernel computes Cᵀ = Bᵀ Aᵀ (swap=ab).
  const int64_t tile_rows = config.swap ? config.bn : config.bm;
  const int64_t tile_cols = config.swap ? config.bm : config.bn;
  const int64_t k_per_split = round_up(ceil_div(args.k, config.streamk ? 1 : config.splitk), bk);
  const int64_t splits = ceil_div(args.k, k_per_split);
  args.k_per_split = static_cast<int>(k_per_split);
  args.raster = config.raster;
  args.splits = static_cast<int>(splits);
  // The fp32 partials and per-tile arrival counters of split-K through global memory
  // (not needed when the splits are a cluster: allocated if that launch is refused).
  auto use_workspace = [&] {
    const size_t bytes = static_cast<size_t>(splits * p.batch * p.m * p.n * 4);
    if (workspace_.bytes() < bytes) workspace_ = cuda::DeviceBuffer(bytes);
    args.workspace = workspace_.get();
    const size_t counters = static_cast<size_t>(p.batch * ceil_div(p.m, tile_rows) *
                                                ceil_div(p.n, tile_cols) * sizeof(unsigned));
    if (arrivals_.bytes() < counters) {
      arrivals_ = cuda::DeviceBuffer(counters);
      KJIT_CU(cuMemsetD32Async, arrivals_.get(), 0, counters / sizeof(unsigned), stream);
    }
    args.arrivals = arrivals_.get();
  };
  // Split-K on the wgmma tile grid: a tile's splits are one cluster when every
  // cluster of the grid runs at once. A GPC holds whole clusters only and the H200's
  // GPCs differ in size, so fewer clusters fit than SMs / size (the driver's
  // occupancy calculator knows); a grid of more runs in waves, and there the
  // workspace way was faster (H200, 4096 x 128 x 16384, 128 x 128 tiles, 4 splits:
  // 32 clusters of 4, 0.0768 ms against 0.0574).
  const int64_t tiles = ceil_div(p.m, tile_rows) * ceil_div(p.n, tile_cols);
  bool cluster = false;
  if (splits_in_cluster(config, splits)) {
    if (v->clusters_at_once < 0) {
      cuda::LaunchConfig probe;
      probe.grid = {1, static_cast<unsigned>(splits), 1};
      probe.block = {static_cast<unsigned>(v->source.block_threads), 1, 1};
      probe.dynamic_shared_bytes = static_cast<unsigned>(v->source.dynamic_shared_bytes);
      probe.cluster = {1, static_cast<unsigned>(splits), 1};
      v->clusters_at_once = v->main->function().max_active_clusters(probe);
    }
    cluster = tiles * p.batch <= v->clusters_at_once;
  }
  if (splits > 1 && !cluster) use_workspace();
  // Two-element stores need even leading dimensions and pair-aligned pointers.
  const int out_pair = 2 * dtype_bytes(p.output);
  const bool c0_pairs = args.c0 == 0 || (t.c0 % out_pair == 0 && t.ldc0 % 2 == 0 &&
                                         (p.batch == 1 || t.stride_c0 % 2 == 0));
  args.c_pairs =
      t.c % out_pair == 0 && t.ldc % 2 == 0 && (p.batch == 1 || t.stride_c % 2 == 0) && c0_pairs;

  DeviceOperands ops{};
  for (size_t i = 0; i < t.extras.size(); ++i) {
    ops.ptr[i] = t.extras[i].pointer;
    ops.ld[i] = t.extras[i].ld;
    ops.batch_stride[i] = t.extras[i].batch_stride;
  }

  cuda::LaunchConfig launch;
  bool streamk = false;
  if (config.persistent) {
    // As many blocks as fit on the GPU at once, each walking units (the tiles of
    // every batch; validate() refuses split-K here) blockIdx.x + i * gridDim.x.
    const int64_t units = tiles * p.batch;
    const int64_t blocks =
        std::min<int64_t>(units, static_cast<int64_t>(device.sm_count) * v->resident);
    launch.grid = {static_cast<unsigned>(blocks), 1, 1};
    // Stream-K: the last wave's tiles split along K over every block, summed by each
    // tile's last split, which waits for the others: every block must be resident
    // at once (a cooperative launch). Not while the stream is being captured into a
    // CUDA graph (a plain launch there: the persistent schedule).
    const StreamK sk = config.streamk
                           ? streamk_split(units, blocks, ceil_div(args.k, bk), config.splitk)
                           : StreamK{};
    if (sk.splits > 1) {
      CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
      KJIT_CU(cuStreamIsCapturing, stream, &capture);
      streamk = capture == CU_STREAM_CAPTURE_STATUS_NONE;
    }
    if (streamk) {
      args.streamk_tiles = static_cast<int>(sk.tiles);
      args.streamk_splits = sk.splits;
      // Splits 0 .. S - 2 of each split tile leave a bm x bn fp32 partial; one counter
      // a tile (0 between launches: the last split sets it back).
      const size_t bytes =
          static_cast<size_t>(sk.tiles * (sk.splits - 1) * config.bm * config.bn * 4);
      if (workspace_.bytes() < bytes) workspace_ = cuda::DeviceBuffer(bytes);
      args.workspace = workspace_.get();
      const size_t counters = static_cast<size_t>(sk.tiles) * sizeof(unsigned);
      if (arrivals_.bytes() < counters) {
        arrivals_ = cuda::DeviceBuffer(counters);
        KJIT_CU(cuMemsetD32Async, arrivals_.get(), 0, counters / sizeof(unsigned), stream);
      }
      args.arrivals = arrivals_.get();
      launch.cooperative = true;
    }
  } else {
    launch.grid = {static_cast<unsigned>(tiles), static_cast<unsigned>(splits),
                   static_cast<unsigned>(p.batch)};
    // Split-K on the wgmma engine (sm_90): a tile's splits are one thread-block
    // cluster and sum each other's partials through distributed shared memory
    // (WgmmaMatmul::finish_split_in_cluster): when all of the grid's clusters run at
    // once (above).
    if (cluster) {
      args.splits_cluster = 1;
      launch.cluster = {1, static_cast<unsigned>(splits), 1};
    }
    // Otherwise, on a grid that fits on the GPU at once: launched cooperatively (the
    // driver guarantees every block is resident), a tile's splits wait for each
    // other and each sums a slice of the tile, rather than the last one the whole.
    // Not while the stream is being captured into a CUDA graph: there the last
    // split sums, a plain launch that any graph holds and any replay runs.
    else if (splits > 1 &&
             tiles * splits * p.batch <= static_cast<int64_t>(device.sm_count) * v->resident) {
      CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
      KJIT_CU(cuStreamIsCapturing, stream, &capture);
      args.splits_resident = capture == CU_STREAM_CAPTURE_STATUS_NONE;
      launch.cooperative = args.splits_resident != 0;
    }
  }
  launch.block = {static_cast<unsigned>(v->source.block_threads), 1, 1};
  launch.dynamic_shared_bytes = static_cast<unsigned>(v->source.dynamic_shared_bytes);
  launch.stream = stream;
  void* kernel_args[] = {&args, &ops, nullptr, nullptr, nullptr};
  CUtensorMap map_a, map_b, map_c{};
  if (config.wgmma) {
    // The copy engine reads A and B (after padding, if any) through tensor maps:
    // stored (inner, rows) = A: (K, M) or, transposed, (M, K); B: (N, K) or (K, N).
    // A K-major operand's box is the tile's rows of it, an M/N-major one's 64-row chunks.
    // With swap=ab the kernel's A operand is B (boxes of bm rows of N) and its B
    // operand A (bn rows of M, K-major: validate() refuses A transposed).
    const int a_box = config.swap ? config.bn : config.bm;
    const int b_box = config.swap ? config.bm : config.bn;
    const CUtensorMap caller_a =
        p.a_transposed && !tf32
            ? operand_map(p.input, args.a, p.m, args.k, args.lda, args.stride_a, p.batch, 64)
            : operand_map(p.input, args.a, args.k, p.m, args.lda, args.stride_a, p.batch, a_box);
    const CUtensorMap caller_b =
        p.b_transposed || tf32
            ? operand_map(p.input, args.b, args.k, p.n, args.ldb, args.stride_b, p.batch, b_box)
            : operand_map(p.input, args.b, p.n, args.k, args.ldb, args.stride_b, p.batch, 64);
    map_a = config.swap ? caller_b : caller_a;
    map_b = config.swap ? caller_a : caller_b;
    kernel_args[2] = &map_a;
    kernel_args[3] = &map_b;
    // The persistent schedules store whole tiles of C through the copy engine where
    // C allows a tensor map (16-byte aligned pointer, rows and batch stride; else
    // their other write-out, map_c unused), in either alignment class of A and B
    // (the padded path may write an aligned C). Boxes of 8 rows of one 128-byte line:
    // half a consumer warp's slab (WgmmaMatmul::write_out_bulk).
    if (config.persistent) {
      const int64_t out = dtype_bytes(p.output);
      const int64_t strides_limit = int64_t{1} << 40;  // a tensor map's stride limit
      args.c_tma =
          t.c % 16 == 0 && (t.ldc * out) % 16 == 0 && t.ldc * out * p.m < strides_limit &&
          (p.batch == 1 || ((t.stride_c * out) % 16 == 0 && t.stride_c * out < strides_limit));
      if (args.c_tma) map_c = operand_map(p.output, t.c, p.n, p.m, t.ldc, t.stride_c, p.batch, 8);
      kernel_args[4] = &map_c;
    }
  }
  split_way_ = streamk                ? "streamk"
               : splits == 1          ? "none"
               : args.splits_cluster  ? "cluster"
               : args.splits_resident ? "together"
                                      : "last";
  if (log_enabled("launch"))
    log_line("launch",
             fmt::format("matmul {} config {}: grid {}x{}x{}, block {}, clusters of {}x{}x{}, {} B "
                         "shared, {}, split-K {}",
                         p.to_string(), config.to_string(), launch.grid[0], launch.grid[1],
                         launch.grid[2], launch.block[0], launch.cluster[0], launch.cluster[1],
                         launch.cluster[2], launch.dynamic_shared_bytes,
                         launch.cooperative ? "cooperative" : "not cooperative", split_way_));
  try {
    v->main->function().launch(launch, kernel_args);
  } catch (const CudaError& e) {
    // Fewer SMs than the device has (MPS, a green context): the cooperative grid
    // does not fit after all, or the device refuses a cluster of this size; the
    // last split of each tile sums it instead (the workspace way).
    if (!(launch.cooperative && e.code() == CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) &&
        !(cluster && e.code() == CUDA_ERROR_INVALID_CLUSTER_SIZE))
      throw;
    if (cluster) use_workspace();
    args.splits_resident = 0;
    args.splits_cluster = 0;
    args.streamk_tiles = 0;  // stream-K's splits cannot wait for each other: persistent
    args.streamk_splits = 0;
    launch.cooperative = false;
    launch.cluster = {1, 1, 1};
    split_way_ = streamk ? "none" : "last";
    v->main->function().launch(launch, kernel_args);
  }
}

}  // namespace kjit::matmul
