#include "runtime/matmul.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <thread>

#include "runtime/compile.h"
#include "runtime/cuda/driver.h"
#include "support/error.h"

namespace kjit::matmul {

namespace {

// Byte-for-byte mirror of kjit::MatmulArgs in templates/matmul.cuh.
struct DeviceArgs {
  CUdeviceptr a, b, c0, c, workspace;
  long long lda, ldb, ldc0, ldc;
  long long stride_a, stride_b, stride_c0, stride_c;
  int m, n, k, batch;
  int splits;
  int k_per_split;
  int c_pairs;
  float alpha, beta;
};
static_assert(sizeof(DeviceArgs) == 144, "DeviceArgs must mirror kjit::MatmulArgs");

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

// In-process caches: compiled programs (filled ahead of time by precompile(), no
// GPU needed) and loaded modules, keyed by the binary key. The modules belong to
// the context current at the first load; a process that releases its last
// context and makes a new one should use the Runtime constructor instead. The Runtime's cache
// (runtime/runtime.h) replaces these once the Runtime can hand out several kernels
// of one module.
std::mutex cache_mutex;
std::map<std::string, cuda::CompiledProgram>& program_cache() {
  static std::map<std::string, cuda::CompiledProgram> cache;
  return cache;
}

cuda::CompiledProgram compiled(const KernelSource& source, const std::string& arch) {
  const std::string key = binary_key(source, arch);
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = program_cache().find(key);
    if (it != program_cache().end()) return it->second;
  }
  cuda::CompiledProgram program = compile_source(source, arch);
  std::lock_guard<std::mutex> lock(cache_mutex);
  program_cache().emplace(key, program);
  return program;
}

std::shared_ptr<cuda::Module> load_cached(const KernelSource& source, const std::string& arch,
                                          cuda::KernelStats* stats) {
  static std::map<std::string, std::pair<std::shared_ptr<cuda::Module>, cuda::KernelStats>> modules;
  const std::string key = binary_key(source, arch);
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = modules.find(key);
    if (it != modules.end()) {
      if (stats) *stats = it->second.second;
      return it->second.first;
    }
  }
  const cuda::CompiledProgram program = compiled(source, arch);
  cuda::KernelStats main_stats;
  for (const cuda::KernelStats& k : program.kernels)
    if (k.name == source.name) main_stats = k;
  std::shared_ptr<cuda::Module> module = cuda::Module::load(program.cubin);
  std::lock_guard<std::mutex> lock(cache_mutex);
  modules[key] = {module, main_stats};
  if (stats) *stats = main_stats;
  return module;
}

// A 3-D tensor map of one stored operand for the copy engine (wgmma path): dims
// (inner, rows, batch), a box of 128 bytes of inner elements (the swizzle span: 64
// bf16/f16, 32 f32) by box_rows, 128-byte swizzle, zero fill outside the matrix.
CUtensorMap operand_map(DType dtype, CUdeviceptr base, int64_t inner, int64_t rows, int64_t ld,
                        int64_t batch_stride, int64_t batch, int box_rows) {
  const int64_t elem = dtype_bytes(dtype);
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[2] = {
      static_cast<cuuint64_t>(ld * elem),
      static_cast<cuuint64_t>((batch > 1 ? batch_stride : rows * ld) * elem)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(128 / elem), static_cast<cuuint32_t>(box_rows),
                             1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  // tf32 operands travel as plain f32 bits; the tensor cores read their top 19
  // (sign, exponent, 10 mantissa bits: the rest is truncated).
  const CUtensorMapDataType type = dtype == DType::BF16  ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : dtype == DType::F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                         : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  CUtensorMap map;
  KJIT_CU(cuTensorMapEncodeTiled, &map, type, 3, reinterpret_cast<void*>(base), dims, strides, box,
          element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return map;
}

struct Candidate {
  Config config;
  double efficiency;         // relative throughput of one SM on aligned problems (measured)
  double padded_efficiency;  // the same on the padded path (misaligned operands and C)
  int blocks_per_sm;         // resident blocks (from shared memory and registers)
};

Config make(int bm, int bn, int bk, int warps, int wm, int stages) {
  Config c;
  c.bm = bm;
  c.bn = bn;
  c.bk = bk;
  c.warps = warps;
  c.warps_m = wm;
  c.stages = stages;
  c.splitk = 1;
  return c;
}

Config with_narrow_loads(Config c) {
  c.narrow = true;
  return c;
}

// Misaligned 16-bit operands on the cp.async / TMA paths are first copied into
// 16-byte-aligned scratch (lower_pad); f32, tf32 (staged instead) and narrow loads
// read them in place.
bool pads_operands(const Problem& p, const Config& c) {
  return !p.aligned && p.input != DType::F32 && p.input != DType::TF32 && !c.narrow;
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
  if (t.stride_a == 0 && p.batch > 1) t.stride_a = a_rows(p) * t.lda;
  if (t.stride_b == 0 && p.batch > 1) t.stride_b = b_rows(p) * t.ldb;
  if (t.stride_c == 0 && p.batch > 1) t.stride_c = p.m * t.ldc;
  if (t.stride_c0 == 0 && p.batch > 1) t.stride_c0 = p.m * t.ldc0;
  if (p.batch > 1 && t.stride_c < p.m * t.ldc)
    throw UserError(fmt::format("C's batch stride {} is smaller than one M x ldc matrix ({})",
                                t.stride_c, p.m * t.ldc),
                    "batched outputs must not overlap");
  if (t.a == 0 || t.b == 0 || t.c == 0)
    throw UserError("matmul needs device pointers for A, B and C");
  if (t.beta != 0.0f && t.c0 == 0)
    throw UserError("beta != 0 but no C0 was given", "pass C0 (it may alias C) or set beta = 0");
  if (t.extras.size() != p.epilogue.operands.size())
    throw UserError(fmt::format("the epilogue takes {} extra operands but {} were given",
                                p.epilogue.operands.size(), t.extras.size()),
                    "pass one tensor per epilogue operand, in order");
  for (size_t i = 0; i < t.extras.size(); ++i) {
    if (t.extras[i].pointer == 0)
      throw UserError("epilogue operand '" + p.epilogue.operands[i].name + "' has no pointer");
    if (p.epilogue.operands[i].kind == OperandKind::Tensor) {
      if (t.extras[i].ld == 0) t.extras[i].ld = p.n;
      if (t.extras[i].ld < p.n)
        throw UserError(fmt::format("epilogue tensor '{}' has leading dimension {} < N = {}",
                                    p.epilogue.operands[i].name, t.extras[i].ld, p.n));
    }
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

std::vector<Config> default_space(DType input) {
  if (input == DType::F32) return {simt_config(1)};
  if (input == DType::TF32)  // the wgmma engine only; the same bytes per stage as bf16
    return {wgmma_config(128, 256, 4, 1, input), wgmma_config(128, 256, 3, 1, input),
            wgmma_config(128, 128, 3, 1, input), wgmma_config(64, 128, 4, 1, input)};
  return {
      make(128, 256, 32, 8, 2, 4),  // warp 64x64, 96 KiB: the large-problem workhorse
      make(128, 256, 32, 8, 2, 3),  // 72 KiB
      make(256, 128, 32, 8, 4, 4),  // warp 64x64, tall
      make(256, 128, 32, 8, 4, 3),  // 72 KiB
      make(128, 128, 32, 8, 2, 4),  // warp 64x32, 64 KiB
      make(128, 128, 32, 4, 2, 4),  // warp 64x64, 64 KiB, two blocks per SM
      make(128, 128, 64, 8, 2, 3),  // warp 64x32, 96 KiB, fewer barriers per FLOP
      make(64, 128, 32, 4, 2, 4),   // warp 32x64, 48 KiB: small problems
      make(64, 64, 64, 4, 2, 3),    // warp 32x32, 48 KiB: tiny problems
      // Misaligned operands read in place through registers (no padded copies; the
      // chunks held across a k-tile take 16-32 registers: 112-166 in all). Measured
      // 3-9x slower than padding on the H200, so never the default; for the tuner.
      with_narrow_loads(make(128, 128, 32, 8, 2, 4)),  // warp 64x32
      with_narrow_loads(make(64, 128, 32, 8, 2, 4)),   // warp 32x32
      with_narrow_loads(make(64, 64, 64, 4, 2, 3)),    // warp 32x32
      // Hopper (sm_90): TMA + wgmma, one producer and bm / 64 consumer warpgroups.
      wgmma_config(128, 256, 4),  // 193 KiB, one block per SM: the large-problem workhorse
      wgmma_config(128, 256, 3),  // 145 KiB
      wgmma_config(128, 128, 3),  // 97 KiB, two blocks per SM (one's epilogue hides)
      wgmma_config(64, 128, 4),   // 97 KiB, one consumer warpgroup: small problems
  };
}

Config default_config(const Problem& p, const cuda::DeviceProperties& device) {
  const int sms = std::max(device.sm_count, 1);
  Config best;
  if (p.input == DType::F32) {
    best = simt_config(1);
  } else {
    // Efficiencies measured on the H200 (bf16 nn, the first GPU run, before the
    // staged epilogue), TFLOP/s:
    //   aligned 4096^3 and 8192^3: 128x256 w8 s4 452-493, 256x128 w8 s4 441-486,
    //     128x128 w4 s4 449-463, 128x128 w8 s4 346-370, 64x128 w4 s4 346-362,
    //     64x64x64 w4 s3 307-322;
    //   padded 4095^3, 4097^3, 2048x50257x768: 128x128 w4 s4 348 / 301 / 203, best
    //     on all three; 128x256 w8 s4 281 / 269 / 196, 256x128 w8 s4 288 / 269 / 198,
    //     64x128 w4 s4 301 / 228 / 177, 128x128 w8 s4 277 / 243 / 184,
    //     64x64x64 275 / 206 / 177.
    // (Two resident blocks overlap one block's epilogue with the other's main loop,
    // which pays most where C's stores are narrow.) Residency: shared memory and
    // registers of an H100/H200-class SM (228 KiB, 64 K registers). The tuner
    // measures instead.
    const std::vector<Candidate> candidates = {
        {make(128, 256, 32, 8, 2, 4), 1.00, 0.89, 1}, {make(256, 128, 32, 8, 4, 4), 0.98, 0.90, 1},
        {make(128, 128, 32, 4, 2, 4), 0.97, 1.00, 2}, {make(128, 128, 32, 8, 2, 4), 0.76, 0.84, 1},
        {make(64, 128, 32, 4, 2, 4), 0.75, 0.83, 3},  {make(64, 64, 64, 4, 2, 3), 0.67, 0.78, 4},
    };
    // On sm_90 the wgmma engine replaces mma.sync (1.5-1.6x its TFLOP/s on every
    // shape below). Measured on the H200, TFLOP/s, 4096^3 / 8192^3 aligned and
    // 4095^3 / 4097^3 / 2048x50257x768 padded: 128x256 s4 732 / 771 and 559 / 429 /
    // 383 (best everywhere), 128x256 s3 693 / 738, 64x128 s4 513 / 451 and
    // 406 / 269 / 253, 128x128 s3 485 / 520 and 411 / 343 / 281.
    // tf32 uses the same tiles (a k-tile holds the same bytes); it has no other
    // engine, so off sm_90 the wgmma config stays and check_fits_device says why.
    const std::vector<Candidate> hopper = {
        {wgmma_config(128, 256, 4, 1, p.input), 1.00, 1.00, 1},
        {wgmma_config(128, 128, 3, 1, p.input), 0.66, 0.74, 2},
        {wgmma_config(64, 128, 4, 1, p.input), 0.70, 0.73, 2},
    };
    const bool sm90 = device.cc_major * 10 + device.cc_minor == 90 || p.input == DType::TF32;
    double best_cost = 1e300;
    for (const Candidate& c : sm90 ? hopper : candidates) {
      if (shared_bytes(p, c.config) > device.shared_per_block_optin) continue;
      if (p.a_transposed && c.config.bm % 64 != 0) continue;
      if (!p.b_transposed && c.config.bn % 64 != 0) continue;
      const int64_t tiles = ceil_div(p.m, c.config.bm) * ceil_div(p.n, c.config.bn) * p.batch;
      const int64_t slots = static_cast<int64_t>(sms) * c.blocks_per_sm;
      const int64_t waves = ceil_div(tiles, slots);
      // A wave lasts as long as one block's tile on an SM shared by blocks_per_sm.
      const double efficiency = p.aligned ? c.efficiency : c.padded_efficiency;
      const double cost =
          static_cast<double>(waves) * c.blocks_per_sm * c.config.bm * c.config.bn / efficiency;
      if (cost < best_cost * 0.999) {
        best_cost = cost;
        best = c.config;
      }
    }
  }
  // Split-K: too few tiles to fill half the SMs, and enough K to share out.
  const int64_t tiles = ceil_div(p.m, best.bm) * ceil_div(p.n, best.bn) * p.batch;
  if (tiles * 2 < sms && p.k >= 2048) {
    const int64_t splits = std::min<int64_t>({sms / tiles, p.k / 1024, 16});
    if (splits >= 2) best.splitk = static_cast<int>(splits);
  }
  return best;
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

cuda::CompiledProgram compile_source(const KernelSource& source, const std::string& arch) {
  return compile_for_arch(source, arch);
}

void precompile(const std::vector<std::pair<Problem, Config>>& work, const std::string& arch,
                int threads) {
  std::vector<KernelSource> sources;
  for (const auto& [problem, config] : work) {
    sources.push_back(lower(problem, config));
    if (config.splitk > 1) sources.push_back(lower_reduce(problem));
    if (pads_operands(problem, config)) sources.push_back(lower_pad(problem.input));
    if (problem.input == DType::TF32) sources.push_back(lower_stage_k_major());
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  std::exception_ptr failure;
  std::mutex failure_mutex;
  for (int t = 0; t < std::max(threads, 1); ++t)
    pool.emplace_back([&] {
      for (size_t i = next++; i < sources.size(); i = next++) {
        try {
          compiled(sources[i], arch);
        } catch (...) {
          std::lock_guard<std::mutex> lock(failure_mutex);
          if (!failure) failure = std::current_exception();
        }
      }
    });
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

Matmul::Matmul(Problem problem, Config config, const cuda::DeviceProperties& device)
    : problem_(std::move(problem)), config_(config), device_(device) {
  init([this](const KernelSource& source, cuda::KernelStats* stats) {
    return load_cached(source, device_.arch(), stats)->function(source.name);
  });
}

Matmul::Matmul(Problem problem, Config config, Runtime& runtime)
    : problem_(std::move(problem)), config_(config), device_(runtime.device()) {
  init([&runtime](const KernelSource& source, cuda::KernelStats* stats) {
    std::shared_ptr<const CompiledKernel> kernel = runtime.compile(source);
    if (stats) *stats = kernel->stats();
    return kernel->function();  // keeps its module loaded
  });
}

void Matmul::init(
    const std::function<cuda::Function(const KernelSource&, cuda::KernelStats*)>& load) {
  check_fits_device(problem_, config_, device_);
  source_ = lower(problem_, config_);
  main_ = load(source_, &stats_);
  const int threads = source_.block_threads;
  if (device_.registers_per_block > 0 &&
      static_cast<int64_t>(stats_.registers) * threads > device_.registers_per_block)
    throw UserError(fmt::format("matmul config {} needs {} registers x {} threads = {} per "
                                "block; {} allows {}",
                                config_.to_string(), stats_.registers, threads,
                                static_cast<int64_t>(stats_.registers) * threads, device_.name,
                                device_.registers_per_block),
                    "use fewer warps or a smaller warp tile");
  if (source_.dynamic_shared_bytes > 48 * 1024)
    main_.set_max_dynamic_shared(source_.dynamic_shared_bytes);
  if (config_.splitk > 1) reduce_ = load(lower_reduce(problem_), nullptr);
  if (pads_operands(problem_, config_)) pad_ = load(lower_pad(problem_.input), nullptr);
  if (problem_.input == DType::TF32) stage_ = load(lower_stage_k_major(), nullptr);
}

void Matmul::launch(const Tensors& given, CUstream stream) {
  const Problem& p = problem_;
  Tensors t = resolve(p, given);
  const bool aligned = is_aligned(p, t);
  const bool simt = p.input == DType::F32;
  const bool tf32 = p.input == DType::TF32;
  // load=narrow reads any alignment in place: no class to check, nothing to pad.
  const bool narrow = config_.narrow;
  if (!simt && !tf32 && !narrow && p.aligned && !aligned)
    throw UserError(
        "these tensors are not 16-byte aligned (pointers, leading dimensions or "
        "batch strides of A or B), but the matmul was built for the aligned class",
        "build the Matmul with problem.aligned = is_aligned(problem, tensors)");
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

  // The padding path: copy the misaligned operands into scratch with 16-byte rows
  // and K rounded up to a whole k-tile with zeros (every k-tile whole keeps the
  // interior blocks on the unmasked main loop), in one launch, then run the aligned
  // kernel. An operand that is already 16-byte aligned is read in place when K
  // needs no padding (e.g. A of 2048 x 50257 x 768: only B is copied).
  // The tf32 path: wgmma reads 32-bit operands K-major only, and the copy engine
  // needs 16-byte row strides. An operand stored M/N-major (A "t", B "n") is
  // transposed into K-major scratch, a misaligned K-major one copied with 16-byte
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
      job.ld_dst = round_up(p.k, 4);
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
      stage_.launch(launch, stage_args);
    }
  }

  if (pads_operands(p, config_)) {
    const int64_t k_padded = round_up(p.k, config_.bk);
    auto operand_aligned = [&](CUdeviceptr ptr, int64_t ld, int64_t stride) {
      const int64_t per16 = 16 / elem;
      return ptr % 16 == 0 && ld % per16 == 0 && stride % per16 == 0 && k_padded == p.k;
    };
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
      job.ld_dst = k_is_rows ? round_up(cols, 8) : k_padded;
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
    if (!operand_aligned(t.a, t.lda, t.stride_a)) {
      const DevicePadJob job =
          pad(scratch_a_, t.a, a_rows(p), a_cols(p), t.lda, t.stride_a, p.a_transposed);
      args.a = job.dst;
      args.lda = job.ld_dst;
      args.stride_a = job.rows_dst * job.ld_dst;
    }
    if (!operand_aligned(t.b, t.ldb, t.stride_b)) {
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
          1, int64_t(device_.sm_count) * 16 / (static_cast<int64_t>(jobs.size()) * p.batch));
      cuda::LaunchConfig launch;
      launch.block = {256, 1, 1};
      launch.grid = {
          static_cast<unsigned>(std::min<int64_t>(ceil_div(most_chunks, 256), blocks_per_matrix)),
          static_cast<unsigned>(p.batch), static_cast<unsigned>(jobs.size())};
      launch.stream = stream;
      DevicePadJob job0 = jobs[0], job1 = jobs.size() > 1 ? jobs[1] : jobs[0];
      void* pad_args[] = {&job0, &job1};
      pad_.launch(launch, pad_args);
    }
  }

  // Split-K: K ranges of whole k-tiles; the last split takes the remainder.
  const int bk = config_.bk;
  const int64_t k_per_split = round_up(ceil_div(args.k, config_.splitk), bk);
  const int64_t splits = ceil_div(args.k, k_per_split);
  args.k_per_split = static_cast<int>(k_per_split);
  args.splits = static_cast<int>(splits);
  if (splits > 1) {
    const size_t bytes = static_cast<size_t>(splits * p.batch * p.m * p.n * 4);
    if (workspace_.bytes() < bytes) workspace_ = cuda::DeviceBuffer(bytes);
    args.workspace = workspace_.get();
  }
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
  launch.grid = {static_cast<unsigned>(ceil_div(p.m, config_.bm) * ceil_div(p.n, config_.bn)),
                 static_cast<unsigned>(splits), static_cast<unsigned>(p.batch)};
  launch.block = {static_cast<unsigned>(source_.block_threads), 1, 1};
  launch.dynamic_shared_bytes = static_cast<unsigned>(source_.dynamic_shared_bytes);
  launch.stream = stream;
  void* kernel_args[] = {&args, &ops, nullptr, nullptr};
  CUtensorMap map_a, map_b;
  if (config_.wgmma) {
    // The copy engine reads A and B (after padding, if any) through tensor maps:
    // stored (inner, rows) = A: (K, M) or, transposed, (M, K); B: (N, K) or (K, N).
    map_a = p.a_transposed && !tf32
                ? operand_map(p.input, args.a, p.m, args.k, args.lda, args.stride_a, p.batch, 64)
                : operand_map(p.input, args.a, args.k, p.m, args.lda, args.stride_a, p.batch,
                              config_.bm);
    map_b = p.b_transposed || tf32
                ? operand_map(p.input, args.b, args.k, p.n, args.ldb, args.stride_b, p.batch,
                              config_.bn)
                : operand_map(p.input, args.b, p.n, args.k, args.ldb, args.stride_b, p.batch, 64);
    kernel_args[2] = &map_a;
    kernel_args[3] = &map_b;
  }
  main_.launch(launch, kernel_args);
  if (splits > 1) {
    cuda::LaunchConfig reduce;
    const int64_t total = p.batch * p.m * p.n;
    reduce.grid = {static_cast<unsigned>(
                       std::min<int64_t>(ceil_div(total, 256), int64_t(device_.sm_count) * 8)),
                   1, 1};
    reduce.block = {256, 1, 1};
    reduce.stream = stream;
    reduce_.launch(reduce, kernel_args);
  }
}

}  // namespace kjit::matmul
