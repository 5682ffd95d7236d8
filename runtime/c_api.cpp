// The C API (include/kjit/kjit_c.h) over the C++ one: opaque handles, statuses
// and a per-thread last error; no exception crosses it.
#include "kjit/kjit_c.h"

#include <cxxabi.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "kjit/cache/key.h"
#include "kjit/cache/store.h"
#include "kjit/compiler/ir/parser.h"
#include "kjit/compiler/kernel_source.h"
#include "kjit/compiler/lowering/matmul_epilogue.h"
#include "kjit/runtime/attention.h"
#include "kjit/runtime/compile.h"
#include "kjit/runtime/cuda/context.h"
#include "kjit/runtime/cuda/driver.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/elementwise.h"
#include "kjit/runtime/matmul.h"
#include "kjit/runtime/runtime.h"
#include "kjit/support/error.h"
#include "kjit/support/log.h"
#include "kjit/tuner/attention_space.h"
#include "kjit/tuner/elementwise_space.h"
#include "kjit/tuner/matmul_space.h"

// Every kernel and buffer holds a reference to its runtime: kjit_runtime_destroy
// drops the caller's, and the runtime goes with the last handle made from it, so
// handles may be destroyed in any order (a kernel destroyed after its runtime used
// freed memory).
struct kjit_runtime {
  std::unique_ptr<kjit::Runtime> runtime;
  std::atomic<int> references{1};
};

namespace kjit_c {

void release(kjit_runtime* runtime) {
  if (runtime != nullptr && runtime->references.fetch_sub(1, std::memory_order_acq_rel) == 1)
    delete runtime;
}

// A handle's reference to its runtime; the first member of each handle, so that it
// goes after the kernel.
class Held {
 public:
  Held() = default;
  explicit Held(kjit_runtime* runtime) { hold(runtime); }
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  ~Held() { release(runtime_); }
  void hold(kjit_runtime* runtime) {
    runtime->references.fetch_add(1, std::memory_order_relaxed);
    runtime_ = runtime;
  }
  kjit_runtime* operator->() const { return runtime_; }
  kjit_runtime* get() const { return runtime_; }

 private:
  kjit_runtime* runtime_ = nullptr;
};

}  // namespace kjit_c

struct kjit_buffer {
  kjit_c::Held runtime;
  kjit::cuda::DeviceBuffer memory;
};
struct kjit_elementwise {
  kjit_c::Held runtime;
  std::unique_ptr<kjit::ElementwiseKernel> kernel;
  std::vector<std::string> input_names, output_names;
  std::vector<kjit_dtype> input_dtypes, output_dtypes;
};
struct kjit_matmul {
  kjit_c::Held runtime;
  std::unique_ptr<kjit::matmul::Matmul> matmul;
};

struct kjit_attention {
  kjit_c::Held runtime;
  std::unique_ptr<kjit::attention::Attention> attention;
  std::vector<kjit::attention::ModifierOperand> operands;  // the modifiers', launch order
};
struct kjit_attention_backward {
  kjit_c::Held runtime;
  std::unique_ptr<kjit::attention::AttentionBackward> backward;
  std::vector<kjit::attention::ModifierOperand> operands;
};

namespace {

thread_local std::string last_error;

// Records the message (`what`, then `more` when given) as the last error. Never
// throws: out of memory, the message is lost, not the status.
kjit_status fail(kjit_status status, const char* what, const std::string* more = nullptr) noexcept {
  try {
    last_error = what;
    if (more != nullptr) last_error += "\n" + *more;
  } catch (...) {
    last_error.clear();
  }
  return status;
}

// Runs `body`, turning every exception into a status and the last error; all but
// a thread's cancellation (glibc unwinds it as an exception that must go on: the
// Python interpreter ends its daemon threads so at exit, and one swallowed aborts
// the process).
template <class Body>
kjit_status guarded(Body&& body) {
  try {
    body();
    last_error.clear();
    return KJIT_OK;
  } catch (const kjit::UserError& e) {
    return fail(KJIT_ERROR_USER, e.what());
  } catch (const kjit::CompileError& e) {
    return fail(KJIT_ERROR_COMPILE, e.what(), &e.log());
  } catch (const kjit::CudaError& e) {
    return fail(KJIT_ERROR_CUDA, e.what());
  } catch (const kjit::CacheError& e) {
    return fail(KJIT_ERROR_CACHE, e.what());
  } catch (const std::exception& e) {
    return fail(KJIT_ERROR_INTERNAL, e.what());
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (...) {
    return fail(KJIT_ERROR_INTERNAL, "an exception that is no std::exception");
  }
}

// A kjit_dtype as the integer a C caller stored: loading an enum outside its values
// is undefined in C++ (UBSan: "load of value 9"), so it is read as its bytes.
int stored(const kjit_dtype& d) {
  std::underlying_type_t<kjit_dtype> value = 0;
  std::memcpy(&value, &d, sizeof value);
  return static_cast<int>(value);
}

kjit::DType to_ir(const kjit_dtype& dtype) {
  const int d = stored(dtype);
  switch (d) {
    case KJIT_F32:
      return kjit::DType::F32;
    case KJIT_F16:
      return kjit::DType::F16;
    case KJIT_BF16:
      return kjit::DType::BF16;
    case KJIT_I32:
      return kjit::DType::I32;
    case KJIT_BOOL:
      return kjit::DType::Bool;
  }
  throw kjit::UserError("unknown kjit_dtype " + std::to_string(d),
                        "use KJIT_F32, KJIT_F16, KJIT_BF16, KJIT_I32 or KJIT_BOOL");
}

kjit_dtype from_ir(kjit::DType d) {
  switch (d) {
    case kjit::DType::F32:
      return KJIT_F32;
    case kjit::DType::F16:
      return KJIT_F16;
    case kjit::DType::BF16:
      return KJIT_BF16;
    case kjit::DType::I32:
      return KJIT_I32;
    case kjit::DType::Bool:
      return KJIT_BOOL;
  }
  return KJIT_F32;
}

kjit::matmul::DType to_matmul(const kjit_dtype& dtype) {
  switch (stored(dtype)) {
    case KJIT_F32:
      return kjit::matmul::DType::F32;
    case KJIT_F16:
      return kjit::matmul::DType::F16;
    case KJIT_BF16:
      return kjit::matmul::DType::BF16;
    default:
      throw kjit::UserError("a matmul takes f32, f16 or bf16; kjit_dtype " +
                                std::to_string(stored(dtype)) + " is not one",
                            "use KJIT_F32, KJIT_F16 or KJIT_BF16");
  }
}

std::vector<kjit::TensorArg> tensors(const kjit_tensor* list, int count, const char* what) {
  if (count < 0 || (count > 0 && list == nullptr))
    throw kjit::UserError(std::string("no ") + what + " given (a NULL list)");
  std::vector<kjit::TensorArg> out;
  for (int i = 0; i < count; ++i) {
    const kjit_tensor& t = list[i];
    if (t.rank < 0 || t.rank > 8 || (t.rank > 0 && t.shape == nullptr))
      throw kjit::UserError(std::string(what) + " " + std::to_string(i) +
                            ": rank must be 0..8 with a shape");
    kjit::TensorArg a;
    a.data = t.data;
    a.dtype = to_ir(t.dtype);
    a.shape.assign(t.shape, t.shape + t.rank);
    if (t.strides) a.strides.assign(t.strides, t.strides + t.rank);
    out.push_back(std::move(a));
  }
  return out;
}

// The tuner's config for `problem` on `device` (without a runtime: the default
// store, as `kjit emit` and `kjit explain` choose).
std::string chosen_config(const kjit::tuner::TuningProblem& problem,
                          const kjit::cuda::DeviceProperties& device) {
  kjit::tuner::Chooser chooser(
      kjit::cache::Store::open_default(),
      kjit::cache::gpu_model(device.name, device.cc_major, device.cc_minor, device.sm_count),
      device);
  return chooser.choose(problem).config;
}

// The planned 1-D problem of an expression over n elements (kjit_emit, kjit_compile).
kjit::KernelSource planned_source(const char* expression, kjit_dtype dtype, int64_t n,
                                  const kjit::cuda::DeviceProperties& device) {
  if (expression == nullptr) throw kjit::UserError("no expression given (NULL)");
  if (n < 1)
    throw kjit::UserError(fmt::format("the expression's element count n is {}", n),
                          "n is at least 1 (the CLI's --n)");
  // n sizes the dim named n; an expression of fixed shapes has none (a size that
  // names no dim is refused, and a C caller could not leave it out).
  kjit::ir::ParseOptions parsing;
  parsing.default_dtype = to_ir(dtype);
  std::map<std::string, int64_t> sizes;
  if (kjit::tuner::symbolic_dims(kjit::ir::parse(expression, parsing)).count("n")) sizes["n"] = n;
  const kjit::tuner::ElementwiseTuning problem(expression, kjit::ir::to_string(to_ir(dtype)),
                                               sizes);
  return problem.sources(chosen_config(problem, device)).front();
}

kjit::attention::Strides strides(const kjit_attention_strides& s) {
  return kjit::attention::Strides{s.batch, s.seq, s.head};
}

std::vector<CUdeviceptr> modifier_operands(const uint64_t* pointers, int count) {
  if (count < 0 || (count > 0 && pointers == nullptr))
    throw kjit::UserError(fmt::format("attention: {} modifier operands at {}", count,
                                      static_cast<const void*>(pointers)),
                          "modifier_operands holds modifier_operand_count device pointers");
  return std::vector<CUdeviceptr>(pointers, pointers + count);
}

kjit::attention::Problem attention_problem(const kjit_attention_problem* c) {
  if (c == nullptr) throw kjit::UserError("the attention problem is NULL");
  // 0 means the default of a size; a negative one is an error, not a default. A
  // packed batch ignores batch, seq_q and seq_k (kjit_c.h), so they are not checked.
  const bool packed = c->seqlens_q != nullptr;
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"batch", packed ? 0 : c->batch},
                                    {"heads", c->heads},
                                    {"kv_heads", c->kv_heads},
                                    {"seq_q", packed ? 0 : c->seq_q},
                                    {"seq_k", packed ? 0 : c->seq_k}})
    if (value < 0)
      throw kjit::UserError(fmt::format("attention {} is {}", name, value),
                            "sizes are >= 1, or 0 for the default (kjit_c.h)");
  if (c->seqlens_q == nullptr && (c->sequences != 0 || c->seqlens_k != nullptr))
    throw kjit::UserError(
        fmt::format("attention: sequences is {} and seqlens_k is {}, but seqlens_q is NULL",
                    c->sequences, c->seqlens_k ? "given" : "NULL"),
        "a packed batch gives seqlens_q (and seqlens_k, or NULL for the same) with "
        "sequences; a padded one leaves all three 0");
  kjit::attention::Problem p;
  p.heads = c->heads > 0 ? c->heads : 1;
  p.kv_heads = c->kv_heads > 0 ? c->kv_heads : p.heads;
  p.head_dim = c->head_dim;
  // Read as the integer a C caller may have stored: loading a kjit_dtype outside the
  // enum's values is undefined in C++ (UBSan: "load of value 9").
  const int dtype = stored(c->dtype);
  if (dtype != KJIT_BF16 && dtype != KJIT_F16)
    throw kjit::UserError(fmt::format(
        "attention dtype is {}; it must be KJIT_BF16 ({}) or "
        "KJIT_F16 ({})",
        static_cast<int64_t>(dtype), static_cast<int>(KJIT_BF16), static_cast<int>(KJIT_F16)));
  p.dtype = dtype == KJIT_F16 ? kjit::ir::DType::F16 : kjit::ir::DType::BF16;
  p.causal = c->causal != 0;
  if (c->windowed) {
    p.window_left = c->window_left;
    p.window_right = c->window_right;
  }
  p.scale = c->scale;
  if (c->score_mod != nullptr) p.score_mod = c->score_mod;
  if (c->mask_mod != nullptr) p.mask_mod = c->mask_mod;
  p.deterministic = c->deterministic != 0;
  if (packed) {
    if (c->sequences < 1)
      throw kjit::UserError("attention: seqlens_q is given but sequences is " +
                            std::to_string(c->sequences));
    const std::vector<int64_t> q(c->seqlens_q, c->seqlens_q + c->sequences);
    const std::vector<int64_t> k =
        c->seqlens_k ? std::vector<int64_t>(c->seqlens_k, c->seqlens_k + c->sequences) : q;
    p.set_lengths(q, k);
  } else {
    p.batch = c->batch > 0 ? c->batch : 1;
    p.seq_q = c->seq_q;
    p.seq_k = c->seq_k > 0 ? c->seq_k : c->seq_q;
  }
  kjit::attention::validate_problem(p);
  return p;
}

kjit::cuda::DeviceProperties device_for(const char* gpu) {
  if (gpu != nullptr) return kjit::cuda::planning_device(gpu);
  std::string reason;
  if (kjit::cuda::Driver::available(&reason) && kjit::cuda::device_count() > 0)
    return kjit::cuda::device_properties(0);
  return kjit::cuda::planning_device("h200");
}

void check_copy(const char* what, const kjit_buffer* buffer, const void* host, size_t bytes) {
  if (buffer == nullptr || (host == nullptr && bytes > 0))
    throw kjit::UserError(std::string(what) + ": buffer and host are required");
  if (bytes > buffer->memory.bytes())
    throw kjit::UserError(std::string(what) + ": " + std::to_string(bytes) +
                          " bytes do not fit the buffer's " +
                          std::to_string(buffer->memory.bytes()));
}

// Every entry point that does driver work runs in its runtime's context and gives
// the caller's back (cuda::ScopedContext).
const kjit::cuda::Context* context_of(const kjit_runtime* runtime) {
  return &runtime->runtime->context();
}

// Destroys a handle in its runtime's context (if that cannot be made current, the
// driver shutting down at exit, destroying it is all that is left to try).
template <class Handle>
void destroy_in_context(Handle* handle) {
  if (handle == nullptr) return;
  std::optional<kjit::cuda::ScopedContext> scope;
  guarded([&] { scope.emplace(context_of(handle->runtime.get())); });
  delete handle;
}

}  // namespace

extern "C" {

const char* kjit_last_error(void) {
  return last_error.c_str();
}

const char* kjit_version(void) {
  static const std::string version =
      std::string(KJIT_VERSION) + " (" + kjit::kGeneratorVersion + ")";
  return version.c_str();
}

void kjit_set_log_topics(const char* topics) {
  guarded([&] { kjit::set_log_topics(topics ? topics : ""); });
}

void kjit_set_log_callback(kjit_log_callback callback, void* user) {
  guarded([&] {
    if (callback == nullptr) return kjit::set_log_sink(nullptr);
    kjit::set_log_sink([callback, user](const std::string& line) { callback(line.c_str(), user); });
  });
}

void kjit_free(void* pointer) {
  std::free(pointer);
}

kjit_status kjit_runtime_create(int device, kjit_runtime** out) {
  return guarded([&] {
    if (out != nullptr) *out = nullptr;  // NULL on failure: a cleanup path may destroy it
    if (out == nullptr) throw kjit::UserError("kjit_runtime_create: out is NULL");
    kjit::RuntimeOptions options;
    options.device = device;
    const kjit::cuda::ScopedContext scope(nullptr);  // the Runtime makes its own current
    auto handle = std::make_unique<kjit_runtime>();
    handle->runtime = std::make_unique<kjit::Runtime>(options);
    *out = handle.release();
  });
}

void kjit_runtime_destroy(kjit_runtime* runtime) {
  if (runtime == nullptr) return;
  std::optional<kjit::cuda::ScopedContext> scope;
  guarded([&] { scope.emplace(context_of(runtime)); });
  kjit_c::release(runtime);
}

kjit_status kjit_elementwise_create(kjit_runtime* runtime, const char* expression,
                                    kjit_dtype default_dtype, kjit_elementwise** out) {
  return guarded([&] {
    if (out != nullptr) *out = nullptr;  // NULL on failure: a cleanup path may destroy it
    if (runtime == nullptr || expression == nullptr || out == nullptr)
      throw kjit::UserError("kjit_elementwise_create: runtime, expression and out are required");
    kjit::ir::ParseOptions options;
    options.default_dtype = to_ir(default_dtype);
    const kjit::cuda::ScopedContext scope(context_of(runtime));
    auto handle = std::make_unique<kjit_elementwise>();
    handle->kernel = std::make_unique<kjit::ElementwiseKernel>(
        *runtime->runtime, kjit::ir::parse(expression, options));
    handle->runtime.hold(runtime);
    const kjit::Graph& graph = handle->kernel->graph();
    for (int id : graph.inputs()) {
      handle->input_names.push_back(graph.node(id).name);
      handle->input_dtypes.push_back(from_ir(graph.node(id).dtype));
    }
    for (const auto& [name, id] : graph.outputs()) {
      handle->output_names.push_back(name);
      handle->output_dtypes.push_back(from_ir(graph.node(id).dtype));
    }
    *out = handle.release();
  });
}

void kjit_elementwise_destroy(kjit_elementwise* kernel) {
  destroy_in_context(kernel);
}

int kjit_elementwise_inputs(const kjit_elementwise* k) {
  return k ? static_cast<int>(k->input_names.size()) : 0;
}
int kjit_elementwise_outputs(const kjit_elementwise* k) {
  return k ? static_cast<int>(k->output_names.size()) : 0;
}
const char* kjit_elementwise_input_name(const kjit_elementwise* k, int i) {
  return k && i >= 0 && i < kjit_elementwise_inputs(k) ? k->input_names[i].c_str() : nullptr;
}
const char* kjit_elementwise_output_name(const kjit_elementwise* k, int i) {
  return k && i >= 0 && i < kjit_elementwise_outputs(k) ? k->output_names[i].c_str() : nullptr;
}
kjit_dtype kjit_elementwise_input_dtype(const kjit_elementwise* k, int i) {
  return k && i >= 0 && i < kjit_elementwise_inputs(k) ? k->input_dtypes[i] : KJIT_F32;
}
kjit_dtype kjit_elementwise_output_dtype(const kjit_elementwise* k, int i) {
  return k && i >= 0 && i < kjit_elementwise_outputs(k) ? k->output_dtypes[i] : KJIT_F32;
}

kjit_status kjit_elementwise_launch(kjit_elementwise* kernel, const kjit_tensor* inputs,
                                    int input_count, const kjit_tensor* outputs, int output_count,
                                    void* stream) {
  return guarded([&] {
    if (kernel == nullptr) throw kjit::UserError("kjit_elementwise_launch: kernel is NULL");
    const kjit::cuda::ScopedContext scope(context_of(kernel->runtime.get()));
    kernel->kernel->launch(tensors(inputs, input_count, "input"),
                           tensors(outputs, output_count, "output"), static_cast<CUstream>(stream));
  });
}

kjit_status kjit_elementwise_launch_flat(kjit_elementwise* kernel, const uint64_t* pointers,
                                         int count, int64_t n, void* stream) {
  return guarded([&] {
    if (kernel == nullptr) throw kjit::UserError("kjit_elementwise_launch_flat: kernel is NULL");
    const size_t inputs = kernel->input_dtypes.size(), outputs = kernel->output_dtypes.size();
    if (pointers == nullptr || count < 0 || static_cast<size_t>(count) != inputs + outputs)
      throw kjit::UserError(fmt::format(
          "kjit_elementwise_launch_flat: {} pointers given; the kernel takes {} ({} inputs, then "
          "{} outputs)",
          pointers == nullptr ? 0 : count, inputs + outputs, inputs, outputs));
    if (n < 0) throw kjit::UserError(fmt::format("kjit_elementwise_launch_flat: n = {} < 0", n));
    // This thread's argument lists, reused: a call allocates nothing once they exist.
    // A call from a log callback inside this one (a first launch compiles, and logs)
    // gets lists of its own: it overwrote these, and this launch took its tensors.
    thread_local std::vector<kjit::TensorArg> reused_in, reused_out;
    thread_local int depth = 0;
    const struct Depth {
      Depth() { ++depth; }
      ~Depth() { --depth; }
    } level;
    std::vector<kjit::TensorArg> own_in, own_out;
    std::vector<kjit::TensorArg>& in = depth == 1 ? reused_in : own_in;
    std::vector<kjit::TensorArg>& out = depth == 1 ? reused_out : own_out;
    auto fill = [&](std::vector<kjit::TensorArg>& list, const std::vector<kjit_dtype>& dtypes,
                    const uint64_t* first) {
      list.resize(dtypes.size());
      for (size_t i = 0; i < dtypes.size(); ++i) {
        list[i].data = first[i];
        list[i].dtype = to_ir(dtypes[i]);
        list[i].shape.assign(1, n);
        list[i].strides.clear();
      }
    };
    fill(in, kernel->input_dtypes, pointers);
    fill(out, kernel->output_dtypes, pointers + inputs);
    const kjit::cuda::ScopedContext scope(context_of(kernel->runtime.get()));
    kernel->kernel->launch(in, out, static_cast<CUstream>(stream));
  });
}

kjit_status kjit_matmul_create(kjit_runtime* runtime, const kjit_matmul_problem* problem,
                               kjit_matmul** out) {
  return guarded([&] {
    if (out != nullptr) *out = nullptr;  // NULL on failure: a cleanup path may destroy it
    if (runtime == nullptr || problem == nullptr || out == nullptr)
      throw kjit::UserError("kjit_matmul_create: runtime, problem and out are required");
    kjit::matmul::Problem p;
    p.m = problem->m;
    p.n = problem->n;
    p.k = problem->k;
    if (problem->batch < 0)
      throw kjit::UserError(fmt::format("matmul batch is {}", problem->batch),
                            "a batch is >= 1, or 0 for 1 (kjit_c.h)");
    p.batch = problem->batch > 0 ? problem->batch : 1;
    kjit::matmul::set_layout(p, problem->layout ? problem->layout : "nn");
    p.input = to_matmul(problem->input);
    p.output = to_matmul(problem->output);
    if (problem->epilogue != nullptr && problem->epilogue[0] != '\0')
      p.epilogue = kjit::matmul::epilogue_from_ir(problem->epilogue, p.input).epilogue;
    const kjit::cuda::ScopedContext scope(context_of(runtime));
    auto handle = std::make_unique<kjit_matmul>();
    handle->matmul = std::make_unique<kjit::matmul::Matmul>(*runtime->runtime, p);
    handle->runtime.hold(runtime);
    *out = handle.release();
  });
}

void kjit_matmul_destroy(kjit_matmul* matmul) {
  destroy_in_context(matmul);
}

int kjit_matmul_operands(const kjit_matmul* matmul) {
  return matmul ? static_cast<int>(matmul->matmul->problem().epilogue.operands.size()) : 0;
}

const char* kjit_matmul_operand_name(const kjit_matmul* matmul, int index) {
  if (index < 0 || index >= kjit_matmul_operands(matmul)) return nullptr;
  return matmul->matmul->problem().epilogue.operands[index].name.c_str();
}

const char* kjit_matmul_operand_kind(const kjit_matmul* matmul, int index) {
  if (index < 0 || index >= kjit_matmul_operands(matmul)) return nullptr;
  switch (matmul->matmul->problem().epilogue.operands[index].kind) {
    case kjit::matmul::OperandKind::RowVector:
      return "row";
    case kjit::matmul::OperandKind::ColumnVector:
      return "column";
    case kjit::matmul::OperandKind::Tensor:
      return "tensor";
  }
  return nullptr;
}

kjit_dtype kjit_matmul_operand_dtype(const kjit_matmul* matmul, int index) {
  if (index < 0 || index >= kjit_matmul_operands(matmul)) return KJIT_F32;
  switch (matmul->matmul->problem().epilogue.operands[index].dtype) {
    case kjit::matmul::DType::F16:
      return KJIT_F16;
    case kjit::matmul::DType::BF16:
      return KJIT_BF16;
    case kjit::matmul::DType::F32:
    case kjit::matmul::DType::TF32:
      return KJIT_F32;
  }
  return KJIT_F32;
}

kjit_status kjit_matmul_launch(kjit_matmul* matmul, const kjit_matmul_args* args, void* stream) {
  return guarded([&] {
    if (matmul == nullptr || args == nullptr)
      throw kjit::UserError("kjit_matmul_launch: matmul and args are required");
    kjit::matmul::Tensors t;
    t.a = args->a;
    t.b = args->b;
    t.c = args->c;
    t.c0 = args->c0;
    t.lda = args->lda;
    t.ldb = args->ldb;
    t.ldc = args->ldc;
    t.ldc0 = args->ldc0;
    t.alpha = args->alpha == 0.0f ? 1.0f : args->alpha;
    t.beta = args->beta;
    if (args->extra_count > 0 && args->extras == nullptr)
      throw kjit::UserError("kjit_matmul_launch: extra_count > 0 but extras is NULL");
    for (int i = 0; i < args->extra_count; ++i) t.extras.push_back({args->extras[i], 0, 0});
    const kjit::cuda::ScopedContext scope(context_of(matmul->runtime.get()));
    matmul->matmul->launch(t, static_cast<CUstream>(stream));
  });
}

kjit_status kjit_attention_create(kjit_runtime* runtime, const kjit_attention_problem* problem,
                                  kjit_attention** out) {
  return guarded([&] {
    if (out != nullptr) *out = nullptr;  // NULL on failure: a cleanup path may destroy it
    if (runtime == nullptr || out == nullptr)
      throw kjit::UserError("kjit_attention_create: runtime and out are required");
    const kjit::attention::Problem p = attention_problem(problem);
    const kjit::cuda::ScopedContext scope(context_of(runtime));
    auto handle = std::make_unique<kjit_attention>();
    handle->attention = std::make_unique<kjit::attention::Attention>(*runtime->runtime, p);
    handle->runtime.hold(runtime);
    handle->operands = p.modifier_operands();
    *out = handle.release();
  });
}

void kjit_attention_destroy(kjit_attention* attention) {
  destroy_in_context(attention);
}

namespace {

// The modifiers' operand `index` of a handle (nullptr: no handle), or nullptr; its
// name, kind ("heads", "q", "kv") and dtype, as both handles' accessors give them.
const kjit::attention::ModifierOperand* operand_at(
    const std::vector<kjit::attention::ModifierOperand>* operands, int index) {
  if (operands == nullptr || index < 0 || index >= static_cast<int>(operands->size()))
    return nullptr;
  return &(*operands)[static_cast<size_t>(index)];
}

const char* operand_name(const kjit::attention::ModifierOperand* o) {
  return o ? o->name.c_str() : nullptr;
}

const char* operand_kind(const kjit::attention::ModifierOperand* o) {
  if (o == nullptr) return nullptr;
  switch (o->kind) {
    case kjit::attention::ModifierOperandKind::PerHead:
      return "heads";
    case kjit::attention::ModifierOperandKind::PerQuery:
      return "q";
    case kjit::attention::ModifierOperandKind::PerKey:
      return "kv";
  }
  return nullptr;
}

kjit_dtype operand_dtype(const kjit::attention::ModifierOperand* o) {
  return o ? from_ir(o->dtype) : KJIT_F32;
}

}  // namespace

int kjit_attention_operands(const kjit_attention* attention) {
  return attention ? static_cast<int>(attention->operands.size()) : 0;
}
const char* kjit_attention_operand_name(const kjit_attention* attention, int index) {
  return operand_name(operand_at(attention ? &attention->operands : nullptr, index));
}
const char* kjit_attention_operand_kind(const kjit_attention* attention, int index) {
  return operand_kind(operand_at(attention ? &attention->operands : nullptr, index));
}
kjit_dtype kjit_attention_operand_dtype(const kjit_attention* attention, int index) {
  return operand_dtype(operand_at(attention ? &attention->operands : nullptr, index));
}
int kjit_attention_backward_operands(const kjit_attention_backward* backward) {
  return backward ? static_cast<int>(backward->operands.size()) : 0;
}
const char* kjit_attention_backward_operand_name(const kjit_attention_backward* backward,
                                                 int index) {
  return operand_name(operand_at(backward ? &backward->operands : nullptr, index));
}
const char* kjit_attention_backward_operand_kind(const kjit_attention_backward* backward,
                                                 int index) {
  return operand_kind(operand_at(backward ? &backward->operands : nullptr, index));
}
kjit_dtype kjit_attention_backward_operand_dtype(const kjit_attention_backward* backward,
                                                 int index) {
  return operand_dtype(operand_at(backward ? &backward->operands : nullptr, index));
}

kjit_status kjit_attention_launch(kjit_attention* attention, const kjit_attention_args* args,
                                  void* stream) {
  return guarded([&] {
    if (attention == nullptr || args == nullptr)
      throw kjit::UserError("kjit_attention_launch: attention and args are required");
    kjit::attention::Tensors t;
    t.q = args->q;
    t.k = args->k;
    t.v = args->v;
    t.o = args->o;
    t.lse = args->lse;
    t.q_strides = strides(args->q_strides);
    t.k_strides = strides(args->k_strides);
    t.v_strides = strides(args->v_strides);
    t.o_strides = strides(args->o_strides);
    t.modifier_operands = modifier_operands(args->modifier_operands, args->modifier_operand_count);
    const kjit::cuda::ScopedContext scope(context_of(attention->runtime.get()));
    attention->attention->launch(t, static_cast<CUstream>(stream));
  });
}

kjit_status kjit_attention_backward_create(kjit_runtime* runtime,
                                           const kjit_attention_problem* problem,
                                           kjit_attention_backward** out) {
  return guarded([&] {
    if (out != nullptr) *out = nullptr;  // NULL on failure: a cleanup path may destroy it
    if (runtime == nullptr || out == nullptr)
      throw kjit::UserError("kjit_attention_backward_create: runtime and out are required");
    const kjit::attention::Problem p = attention_problem(problem);
    const kjit::cuda::ScopedContext scope(context_of(runtime));
    auto handle = std::make_unique<kjit_attention_backward>();
    handle->backward = std::make_unique<kjit::attention::AttentionBackward>(*runtime->runtime, p);
    handle->runtime.hold(runtime);
    handle->operands = p.modifier_operands();
    *out = handle.release();
  });
}

void kjit_attention_backward_destroy(kjit_attention_backward* backward) {
  destroy_in_context(backward);
}

kjit_status kjit_attention_backward_launch(kjit_attention_backward* backward,
                                           const kjit_attention_backward_args* args, void* stream) {
  return guarded([&] {
    if (backward == nullptr || args == nullptr)
      throw kjit::UserError("kjit_attention_backward_launch: backward and args are required");
    kjit::attention::BackwardTensors t;
    t.q = args->q;
    t.k = args->k;
    t.v = args->v;
    t.o = args->o;
    t.lse = args->lse;
    t.d_o = args->d_o;
    t.dq = args->dq;
    t.dk = args->dk;
    t.dv = args->dv;
    t.q_strides = strides(args->q_strides);
    t.k_strides = strides(args->k_strides);
    t.v_strides = strides(args->v_strides);
    t.o_strides = strides(args->o_strides);
    t.do_strides = strides(args->do_strides);
    t.dq_strides = strides(args->dq_strides);
    t.dk_strides = strides(args->dk_strides);
    t.dv_strides = strides(args->dv_strides);
    t.modifier_operands = modifier_operands(args->modifier_operands, args->modifier_operand_count);
    const kjit::cuda::ScopedContext scope(context_of(backward->runtime.get()));
    backward->backward->launch(t, static_cast<CUstream>(stream));
  });
}

kjit_status kjit_attention_emit(const kjit_attention_problem* problem, const char* gpu,
                                char** source) {
  return guarded([&] {
    if (source == nullptr) throw kjit::UserError("kjit_attention_emit: source is NULL");
    *source = nullptr;
    const kjit::attention::Problem p = attention_problem(problem);
    // The tuner's choice, as kjit would run it (it emitted the model's default,
    // whatever the store held).
    const kjit::attention::Config config = kjit::attention::Config::parse(
        chosen_config(kjit::tuner::AttentionTuning(p), device_for(gpu)));
    const std::string text = kjit::attention::lower(p, config).source;
    char* copy = static_cast<char*>(std::malloc(text.size() + 1));
    if (copy == nullptr) throw kjit::UserError("out of memory");
    std::memcpy(copy, text.c_str(), text.size() + 1);
    *source = copy;
  });
}

kjit_status kjit_emit(const char* expression, kjit_dtype default_dtype, int64_t n, const char* gpu,
                      char** source) {
  return guarded([&] {
    if (source == nullptr) throw kjit::UserError("kjit_emit: source is NULL");
    *source = nullptr;
    const std::string text = planned_source(expression, default_dtype, n, device_for(gpu)).source;
    char* copy = static_cast<char*>(std::malloc(text.size() + 1));
    if (copy == nullptr) throw kjit::UserError("out of memory");
    std::memcpy(copy, text.c_str(), text.size() + 1);
    *source = copy;
  });
}

kjit_status kjit_compile(const char* expression, kjit_dtype default_dtype, int64_t n,
                         const char* arch, int* registers, int* spill_bytes) {
  return guarded([&] {
    if (registers) *registers = 0;
    if (spill_bytes) *spill_bytes = 0;
    const std::string target = arch ? arch : "sm_90";
    kjit::cuda::validate_arch(target);
    const kjit::KernelSource source =
        planned_source(expression, default_dtype, n, kjit::cuda::planning_device_for_arch(target));
    const kjit::cuda::CompiledProgram program = kjit::compile_for_arch(source, target);
    for (const kjit::cuda::KernelStats& k : program.kernels)
      if (k.name == source.name) {
        if (registers) *registers = k.registers;
        if (spill_bytes) *spill_bytes = k.spill_store_bytes + k.spill_load_bytes;
        return;
      }
    throw kjit::Error(kjit::ErrorKind::Internal,
                      "kjit_compile: ptxas reported no kernel named " + source.name);
  });
}

kjit_status kjit_buffer_create(kjit_runtime* runtime, size_t bytes, kjit_buffer** out) {
  return guarded([&] {
    if (out != nullptr) *out = nullptr;  // NULL on failure: a cleanup path may destroy it
    if (runtime == nullptr || out == nullptr)
      throw kjit::UserError("kjit_buffer_create: runtime and out are required");
    if (bytes == 0) throw kjit::UserError("kjit_buffer_create: bytes must be positive");
    const kjit::cuda::ScopedContext scope(context_of(runtime));
    *out = new kjit_buffer{kjit_c::Held(runtime), kjit::cuda::DeviceBuffer(bytes)};
  });
}

void kjit_buffer_destroy(kjit_buffer* buffer) {
  destroy_in_context(buffer);
}

uint64_t kjit_buffer_pointer(const kjit_buffer* buffer) {
  return buffer ? buffer->memory.get() : 0;
}

kjit_status kjit_buffer_upload(kjit_buffer* buffer, const void* host, size_t bytes) {
  return guarded([&] {
    check_copy("kjit_buffer_upload", buffer, host, bytes);
    const kjit::cuda::ScopedContext scope(context_of(buffer->runtime.get()));
    buffer->memory.upload(host, bytes);
  });
}

kjit_status kjit_buffer_download(const kjit_buffer* buffer, void* host, size_t bytes) {
  return guarded([&] {
    check_copy("kjit_buffer_download", buffer, host, bytes);
    const kjit::cuda::ScopedContext scope(context_of(buffer->runtime.get()));
    buffer->memory.download(host, bytes);
  });
}

}  // extern "C"
