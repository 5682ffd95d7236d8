// kjit emit|compile|run|bench matmul --m M --n N --k K [--dtype bf16|f16|f32|tf32]
//   [--layout nn|nt|tn|tt] [--batch B] [--epilogue 'gelu(acc + bias)'] [--config ...]
//   [--lda L --ldb L --ldc L]  (run, bench: operands stored with padded rows)
//
//   emit     the generated CUDA source (header: problem, config, generator)
//   compile  NVRTC for --arch (no GPU needed): registers, shared memory, spills
//   run      random inputs on the GPU, checked against the fp64 reference
//   bench    the median time of many runs, TFLOP/s (cuBLAS comparison: kjit_matmul_bench)
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <random>

#include "kjit/runtime/compile.h"
#include "kjit/runtime/cuda/context.h"
#include "kjit/runtime/cuda/device.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/stream.h"
#include "kjit/runtime/matmul.h"
#include "kjit/runtime/matmul_check.h"
#include "kjit/support/error.h"
#include "kjit/tuner/matmul_space.h"
#include "kjit/tuner/timer.h"
#include "tools/cli/command.h"
#include "tools/cli/cublaslt_peer.h"
#include "tools/cli/family.h"

namespace kjit::cli {

namespace {

using namespace kjit::matmul;

struct Setup {
  Problem problem;
  Config config;
  std::string config_source;  // "given (--config)", or the tuner's: store, nearest, model
  LoweredEpilogue epilogue;   // reference twin when an epilogue was given
};

// --lda, --ldb, --ldc (0: packed rows; resolve() checks them against the rows).
Tensors leading_dimensions(const KernelCommandOptions& o) {
  Tensors t;
  t.lda = o.lda, t.ldb = o.ldb, t.ldc = o.ldc;
  return t;
}

// `given`'s leading dimensions and the batch strides they imply, resolved; the
// pointers are 0 (16-byte aligned, as the allocator's are) until allocation. For
// resolve() they stand in laid back to back, each past the last one's packed bytes
// (256-byte aligned), as an allocator would place them: whatever the sizes, the
// stand-ins never overlap, so only the sizes and strides decide what it says.
Tensors resolve_stand_in(const Problem& p, Tensors given) {
  const int64_t a_rows = p.a_transposed ? p.k : p.m, a_cols = p.a_transposed ? p.m : p.k;
  const int64_t b_rows = p.b_transposed ? p.n : p.k, b_cols = p.b_transposed ? p.k : p.n;
  uint64_t next = 256;
  bool too_big = false;
  auto place = [&](int64_t rows, int64_t ld, int64_t cols, DType dtype) {
    const uint64_t at = next;
    uint64_t bytes = 0;
    too_big = too_big ||
              __builtin_mul_overflow(static_cast<uint64_t>(std::max<int64_t>(p.batch, 1)),
                                     static_cast<uint64_t>(std::max<int64_t>(rows, 1)), &bytes) ||
              __builtin_mul_overflow(bytes, static_cast<uint64_t>(std::max(ld, cols)), &bytes) ||
              __builtin_mul_overflow(bytes, static_cast<uint64_t>(dtype_bytes(dtype)), &bytes) ||
              __builtin_add_overflow(next, (bytes + 255) / 256 * 256, &next) ||
              next > static_cast<uint64_t>(INT64_MAX);
    return at;
  };
  given.a = place(a_rows, given.lda, a_cols, p.input);
  given.b = place(b_rows, given.ldb, b_cols, p.input);
  given.c = place(p.m, given.ldc, p.n, p.output);
  for (size_t i = 0; i < p.epilogue.operands.size(); ++i)
    given.extras.push_back({place(p.m, 0, p.n, p.output), 0, 0});
  if (too_big)
    throw UserError(fmt::format("A, B and C of {}x{}x{} (batch {}) hold more than 2^63 bytes "
                                "together",
                                p.m, p.n, p.k, p.batch),
                    "offsets are 64-bit byte counts; check the sizes and leading dimensions");
  Tensors t = resolve(p, given);
  t.a = t.b = t.c = 0;
  t.extras.clear();
  return t;
}

Problem problem_from(const KernelCommandOptions& o, LoweredEpilogue& epilogue) {
  Problem p;
  p.m = o.m;
  p.n = o.n;
  p.k = o.k;
  p.batch = o.batch;
  set_layout(p, o.layout);
  p.input = parse_dtype(o.dtype.empty() ? "bf16" : o.dtype);
  p.output = p.input == DType::TF32 ? DType::F32 : p.input;  // tf32 is an input type
  if (!o.epilogue.empty()) {
    epilogue = epilogue_from_ir(o.epilogue, p.input);
    p.epilogue = epilogue.epilogue;
  }
  // Tensors from the allocator (pointers 256-byte aligned): the class follows the
  // leading dimensions, packed or as given.
  validate_problem(p);  // the sizes and their limits, named, before the stand-ins
  p.aligned = is_aligned(p, resolve_stand_in(p, leading_dimensions(o)));
  return p;
}

// The config for a problem from problem_from() (validated there).
Setup setup(const KernelCommandOptions& o, tuner::Chooser& chooser, Problem problem,
            LoweredEpilogue epilogue) {
  Setup s;
  s.problem = std::move(problem);
  s.epilogue = std::move(epilogue);
  if (o.config.empty()) {
    const tuner::Choice choice = chooser.choose(tuner::MatmulTuning(s.problem, o.epilogue));
    s.config = Config::parse(choice.config);
    s.config_source = std::string(tuner::to_string(choice.source)) + ": " + choice.detail;
  } else {
    s.config = Config::parse(o.config);
    s.config_source = "given (--config)";
  }
  validate(s.problem, s.config);
  check_fits_device(s.problem, s.config, chooser.device());
  return s;
}

struct DeviceProblem {
  HostProblem host;
  cuda::DeviceBuffer a, b, c0, c;
  std::vector<cuda::DeviceBuffer> extras;
  Tensors tensors;
};

cuda::DeviceBuffer upload(const HostTensor& t) {
  const std::vector<unsigned char> bytes = t.bytes();
  cuda::DeviceBuffer buffer(std::max<size_t>(bytes.size(), 16));
  buffer.upload(bytes.data(), bytes.size());
  return buffer;
}

// Bytes of `count` rows of `cols` elements, `ld` apart in `stored`, packed (or the
// reverse when `pack` is false). Gaps stay as they are.
void copy_rows(std::vector<unsigned char>& packed, std::vector<unsigned char>& stored,
               int64_t count, int64_t cols, int64_t ld, int64_t element, bool pack) {
  for (int64_t r = 0; r < count; ++r) {
    unsigned char* p = packed.data() + r * cols * element;
    unsigned char* s = stored.data() + r * ld * element;
    pack ? std::copy(s, s + cols * element, p) : std::copy(p, p + cols * element, s);
  }
}

// Elements that `rows` rows of `cols`, `ld` apart, span: the last row ends at its
// last element (a lone row with a huge --lda takes its own length, not ld).
int64_t stored_elements(int64_t rows, int64_t cols, int64_t ld) {
  return rows < 1 ? 0 : (rows - 1) * ld + cols;
}

// An operand stored with `ld` elements per row (ld > cols: padded rows, filled
// with NaN bytes the kernels must not read).
cuda::DeviceBuffer upload_strided(const HostTensor& t, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<unsigned char> packed = t.bytes();
  const int64_t element = dtype_bytes(t.dtype);
  std::vector<unsigned char> stored(static_cast<size_t>(stored_elements(rows, cols, ld) * element),
                                    0xFF);
  copy_rows(packed, stored, rows, cols, ld, element, false);
  cuda::DeviceBuffer buffer(std::max<size_t>(stored.size(), 16));
  buffer.upload(stored.data(), stored.size());
  return buffer;
}

std::unique_ptr<DeviceProblem> make_device_problem(const Setup& s, const KernelCommandOptions& o,
                                                   uint64_t seed) {
  auto d = std::make_unique<DeviceProblem>();
  const Problem& p = s.problem;
  d->host = make_host_problem(p, seed, 1.0f, 0.0f, s.epilogue.reference);
  // Batches are stored back to back, each with its rows `ld` apart.
  d->tensors = resolve_stand_in(p, leading_dimensions(o));
  // Stored shapes: A is M x K, B is K x N, each transposed when its layout says "t".
  const int64_t a_rows = p.a_transposed ? p.k : p.m, a_cols = p.a_transposed ? p.m : p.k;
  const int64_t b_rows = p.b_transposed ? p.n : p.k, b_cols = p.b_transposed ? p.k : p.n;
  d->a = upload_strided(d->host.a, p.batch * a_rows, a_cols, d->tensors.lda);
  d->b = upload_strided(d->host.b, p.batch * b_rows, b_cols, d->tensors.ldb);
  d->c =
      cuda::DeviceBuffer(static_cast<size_t>(stored_elements(p.batch * p.m, p.n, d->tensors.ldc)) *
                         dtype_bytes(p.output));
  d->c.fill_bytes(0xFF);
  d->tensors.a = d->a.get();
  d->tensors.b = d->b.get();
  d->tensors.c = d->c.get();
  for (size_t i = 0; i < d->host.extras.size(); ++i) {
    d->extras.push_back(upload(d->host.extras[i]));
    const OperandKind kind = p.epilogue.operands[i].kind;
    const int64_t per_batch = kind == OperandKind::RowVector      ? p.m
                              : kind == OperandKind::ColumnVector ? p.n
                                                                  : p.m * p.n;
    d->tensors.extras.push_back({d->extras.back().get(), 0, p.batch > 1 ? per_batch : 0});
  }
  return d;
}

void matmul_command(const KernelCommandOptions& o) {
  const bool on_gpu = o.verb == Verb::Run || o.verb == Verb::Bench;
  // The input's errors first: they are the same with or without a GPU.
  LoweredEpilogue epilogue;
  Problem problem = problem_from(o, epilogue);
  if (on_gpu) require_gpu(std::string("kjit ") + to_string(o.verb) + " matmul");
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<tuner::Chooser> planning;
  Target target;
  if (on_gpu) {
    runtime = std::make_unique<Runtime>();
  } else {
    target = command_target(o.arch, o.gpu);
    planning = make_chooser(target);
  }
  tuner::Chooser& chooser = runtime ? runtime->chooser() : *planning;
  const Setup s = setup(o, chooser, std::move(problem), std::move(epilogue));
  const Problem& p = s.problem;
  const KernelSource source = lower(p, s.config);

  if (o.verb == Verb::Emit) {
    if (o.json) {
      print_json({{"family", "matmul"},
                  {"problem", source.problem},
                  {"config", s.config.to_string()},
                  {"config_source", s.config_source},
                  {"kernel", source.name},
                  {"block_threads", source.block_threads},
                  {"dynamic_shared_bytes", source.dynamic_shared_bytes},
                  {"source", source.source}});
    } else {
      const tuner::Prediction plan =
          tuner::MatmulTuning(p, o.epilogue)
              .predict(s.config, chooser.device(), *chooser.efficiencies(), nullptr);
      // The kernel's config line leaves out what is a launch argument (split-K,
      // stream-K): the launch's whole config, for the reader.
      print_emitted(
          source.source,
          plan_comment(chooser.device(), plan) + "// launched with: " + s.config.to_string() + "\n",
          o.templates);
    }
    return;
  }
  if (o.verb == Verb::Compile) {
    report_family_compile("matmul", p.to_string(), {source}, s.config.to_string(), s.config_source,
                          o.arch.empty() ? target.device.arch() : o.arch, o.json, o.ptx);
    return;
  }

  // run / bench
  Matmul matmul(*runtime, p, s.config);
  const uint64_t seed = std::random_device{}();
  std::unique_ptr<DeviceProblem> d = make_device_problem(s, o, seed);
  cuda::Stream stream;
  matmul.launch(d->tensors, stream.get());
  stream.synchronize();
  // C as stored, then its rows packed; the gaps of padded rows must be untouched.
  std::vector<unsigned char> stored(d->c.bytes());
  d->c.download(stored.data(), stored.size());
  const size_t count = static_cast<size_t>(p.batch * p.m * p.n);
  const int64_t element = dtype_bytes(p.output);
  std::vector<unsigned char> bytes(count * element);
  copy_rows(bytes, stored, p.batch * p.m, p.n, d->tensors.ldc, element, true);
  int64_t gap_writes = 0;  // (the last row has no gap after it)
  for (int64_t r = 0; r + 1 < p.batch * p.m; ++r)
    for (int64_t i = p.n * element; i < d->tensors.ldc * element; ++i)
      gap_writes += stored[r * d->tensors.ldc * element + i] != 0xFF;
  const CheckResult check =
      check_output(d->host, to_doubles(p.output, bytes, count), rows_to_check(p, seed));
  const double tolerance = check_tolerance(p.input);
  const bool ok = check.relative_l2 <= tolerance && gap_writes == 0;
  if (!ok) exit_code = 1;

  double median_ms = 0, peer_ms = 0, peer_check = 0;
  int repeats = 0;
  std::string peer_status;
  if (o.verb == Verb::Bench) {
    repeats = o.repeats > 0 ? o.repeats : 50;
    // The project's one timer: warm-up, L2 flushed before every run, median of
    // `repeats` runs (tuner/timer.h).
    tuner::Timer timer(stream.get(), runtime->device().l2_bytes);
    auto time = [&](const std::function<void()>& work) {
      return timer.time([&](int) { work(); }, repeats).median_ms;
    };
    median_ms = time([&] { matmul.launch(d->tensors, stream.get()); });
    // The peer, in this process: cuBLASLt on the same problem (the matmul only).
    std::string peer_reason;
    std::unique_ptr<CublasLtPeer> peer = CublasLtPeer::load(&peer_reason);
    if (!peer) {
      peer_status = "unavailable: " + peer_reason;
    } else {
      Problem plain = p;
      plain.epilogue = Epilogue();
      plain.output = p.input == DType::TF32 ? DType::F32 : p.input;
      peer->plan(plain, d->tensors.lda, d->tensors.ldb, d->tensors.ldc);
      cuda::DeviceBuffer c_peer(
          static_cast<size_t>(stored_elements(p.batch * p.m, p.n, d->tensors.ldc)) *
          dtype_bytes(p.input));
      peer->run(d->tensors.a, d->tensors.b, c_peer.get(), stream.get());
      stream.synchronize();
      peer_ms = time([&] { peer->run(d->tensors.a, d->tensors.b, c_peer.get(), stream.get()); });
      peer_status = p.epilogue.function_name.empty()
                        ? "cuBLASLt, same problem"
                        : "cuBLASLt, matmul only (without the epilogue)";
      if (p.epilogue.function_name.empty() && p.output == plain.output) {
        std::vector<unsigned char> peer_stored(c_peer.bytes()), peer_bytes(bytes.size());
        c_peer.download(peer_stored.data(), peer_stored.size());
        copy_rows(peer_bytes, peer_stored, p.batch * p.m, p.n, d->tensors.ldc, element, true);
        const std::vector<double> ours = to_doubles(p.output, bytes, count);
        const std::vector<double> theirs = to_doubles(plain.output, peer_bytes, count);
        double diff = 0, norm = 0;
        for (size_t i = 0; i < count; ++i) {
          diff += (ours[i] - theirs[i]) * (ours[i] - theirs[i]);
          norm += theirs[i] * theirs[i];
        }
        peer_check = norm > 0 ? std::sqrt(diff / norm) : 0;
      }
    }
  }
  const double flops = 2.0 * p.m * p.n * p.k * p.batch;
  const double tflops = median_ms > 0 ? flops / (median_ms * 1e-3) / 1e12 : 0;
  if (o.json) {
    nlohmann::json out = {{"problem", source.problem},
                          {"config", s.config.to_string()},
                          {"config_source", s.config_source},
                          {"kernel", source.name},
                          {"registers", matmul.stats().registers},
                          {"relative_l2", check.relative_l2},
                          {"checked", check.checked},
                          {"leading_dimensions",
                           {{"a", d->tensors.lda}, {"b", d->tensors.ldb}, {"c", d->tensors.ldc}}},
                          {"writes_past_rows", gap_writes},
                          {"pass", ok}};
    if (o.verb == Verb::Bench) {
      out["median_ms"] = median_ms;
      out["tflops"] = tflops;
      out["repeats"] = repeats;
      const double peer_tflops = peer_ms > 0 ? flops / (peer_ms * 1e-3) / 1e12 : 0;
      out["cublas"] = {{"status", peer_status},
                       {"median_ms", peer_ms},
                       {"tflops", peer_tflops},
                       {"kjit_vs_cublas_rel_l2", peer_check}};
      out["ratio"] = peer_tflops > 0 ? tflops / peer_tflops : 0;
    }
    return print_json(out);
  }
  std::cout << fmt::format("matmul {}\nconfig {} ({} registers; {})\ncheck: {} -> {}\n",
                           p.to_string(), s.config.to_string(), matmul.stats().registers,
                           s.config_source, check.describe(), ok ? "PASS" : "FAIL");
  if (gap_writes > 0)
    std::cout << fmt::format("{} bytes written past C's rows (ldc {} > n {}): FAIL\n", gap_writes,
                             d->tensors.ldc, p.n);
  if (o.verb == Verb::Bench) {
    std::cout << fmt::format("kjit: median {:.4f} ms over {} runs: {:.1f} TFLOP/s\n", median_ms,
                             repeats, tflops);
    if (peer_ms > 0)
      std::cout << fmt::format("{}: median {:.4f} ms: {:.1f} TFLOP/s; kjit / cuBLAS = {:.2f}x\n",
                               peer_status, peer_ms, flops / (peer_ms * 1e-3) / 1e12,
                               peer_ms / median_ms);
    else
      std::cout << "cuBLAS " << peer_status << "\n";
  }
}

}  // namespace

KJIT_REGISTER_FAMILY("matmul", matmul_command);

}  // namespace kjit::cli
