#include "kjit/runtime/tuning.h"

#include <poll.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>

#include "kjit/compiler/interpreter/interpreter.h"
#include "kjit/runtime/attention.h"
#include "kjit/runtime/attention_check.h"
#include "kjit/runtime/cuda/driver.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/stream.h"
#include "kjit/runtime/elementwise.h"
#include "kjit/runtime/matmul.h"
#include "kjit/runtime/matmul_check.h"
#include "kjit/support/checked_math.h"
#include "kjit/support/error.h"
#include "kjit/support/log.h"
#include "kjit/support/options.h"
#include "kjit/tuner/attention_space.h"
#include "kjit/tuner/elementwise_space.h"
#include "kjit/tuner/matmul_space.h"
#include "kjit/tuner/worker.h"

namespace kjit {

namespace {

// Input sets so that one pass over them is at least twice the L2 (at most 8, and
// at most 4 GiB in all): a launch then never finds its inputs in L2 from the last.
int input_sets_for(double bytes_per_set, int64_t l2_bytes) {
  if (bytes_per_set <= 0) return 1;
  const int wanted =
      static_cast<int>(std::ceil(2.0 * static_cast<double>(l2_bytes) / bytes_per_set));
  const int fit = static_cast<int>(std::max(1.0, 4294967296.0 / bytes_per_set));
  return std::max(1, std::min({wanted, 8, fit}));
}

uint64_t fresh_seed() {
  return std::random_device{}();
}

// ---- a family's kernel as a trial ------------------------------------------------

// What ptxas says of a kernel, as the model reads it.
tuner::KernelResources resources_of(const KernelSource& source, const cuda::KernelStats& stats) {
  tuner::KernelResources r;
  r.threads = source.block_threads;
  r.registers = stats.registers;
  r.shared_bytes = source.dynamic_shared_bytes + stats.shared_bytes;
  r.estimated = false;
  return r;
}
tuner::KernelResources resources_of(const matmul::Matmul& kernel) {
  return resources_of(kernel.source(), kernel.stats());
}
tuner::KernelResources resources_of(const attention::Attention& kernel) {
  return resources_of(kernel.source(), kernel.stats());
}
// The backward's dK/dV kernel: the longest of its three.
tuner::KernelResources resources_of(const attention::AttentionBackward& kernel) {
  const CompiledKernel& kv = kernel.kernel("kv");
  return resources_of(kv.source(), kv.stats());
}

// One config of a family's kernel class (Matmul, Attention, AttentionBackward), built
// with that fixed config and launched on the harness's input sets.
template <typename Kernel, typename Tensors>
class KernelTrial : public tuner::Trial {
 public:
  template <typename Problem, typename Config>
  KernelTrial(Runtime& runtime, const Problem& problem, const Config& config,
              const std::vector<Tensors>* sets)
      : kernel_(runtime, problem, config), sets_(sets) {}
  void launch(CUstream stream, int set) override {
    kernel_.launch((*sets_)[static_cast<size_t>(set)], stream);
  }
  tuner::KernelResources resources() const override { return resources_of(kernel_); }

 private:
  Kernel kernel_;
  const std::vector<Tensors>* sets_;
};

// ---- matmul ------------------------------------------------------------------

class MatmulHarness : public tuner::Harness {
 public:
  MatmulHarness(Runtime& runtime, const tuner::MatmulTuning& problem)
      : runtime_(runtime), problem_(problem) {
    const matmul::Problem& p = problem_.problem();
    matmul::LoweredEpilogue epilogue;
    std::function<double(double, const std::vector<double>&)> twin;
    if (!p.epilogue.function_name.empty()) {
      const nlohmann::json spec = problem_.spec();
      if (!spec.contains("epilogue"))
        throw UserError("tuning a matmul needs its epilogue as IR text to check it");
      twin = matmul::epilogue_from_ir(spec["epilogue"].get<std::string>(), p.input).reference;
    }
    const uint64_t seed = fresh_seed();
    host_ = matmul::make_host_problem(p, seed, 1.0f, 0.0f, twin);
    reference_ = matmul::sample_reference(host_, matmul::rows_to_check(p, seed));
    const double set_bytes =
        static_cast<double>(host_.a.size() + host_.b.size()) * matmul::dtype_bytes(p.input);
    const int sets = input_sets_for(set_bytes, runtime.device().l2_bytes);
    const std::vector<unsigned char> a = host_.a.bytes(), b = host_.b.bytes();
    for (int s = 0; s < sets; ++s) {
      buffers_.emplace_back(std::max<size_t>(a.size(), 16));
      buffers_.back().upload(a.data(), a.size());
      const CUdeviceptr pa = buffers_.back().get();
      buffers_.emplace_back(std::max<size_t>(b.size(), 16));
      buffers_.back().upload(b.data(), b.size());
      const CUdeviceptr pb = buffers_.back().get();
      matmul::Tensors t;
      t.a = pa;
      t.b = pb;
      sets_.push_back(t);
    }
    out_bytes_ = static_cast<size_t>(p.batch * p.m * p.n) * matmul::dtype_bytes(p.output);
    c_ = cuda::DeviceBuffer(std::max<size_t>(out_bytes_, 16));
    for (size_t i = 0; i < host_.extras.size(); ++i) {
      const std::vector<unsigned char> bytes = host_.extras[i].bytes();
      extras_.emplace_back(std::max<size_t>(bytes.size(), 16));
      extras_.back().upload(bytes.data(), bytes.size());
      const matmul::OperandKind kind = p.epilogue.operands[i].kind;
      const int64_t per_batch = kind == matmul::OperandKind::RowVector      ? p.m
                                : kind == matmul::OperandKind::ColumnVector ? p.n
                                                                            : p.m * p.n;
      for (matmul::Tensors& t : sets_)
        t.extras.push_back({extras_.back().get(), 0, p.batch > 1 ? per_batch : 0});
    }
    for (matmul::Tensors& t : sets_) t.c = c_.get();
  }

  const tuner::TuningProblem& problem() const override { return problem_; }
  int input_sets() const override { return static_cast<int>(sets_.size()); }
  std::unique_ptr<tuner::Trial> prepare(const std::string& config) override {
    return std::make_unique<KernelTrial<matmul::Matmul, matmul::Tensors>>(
        runtime_, problem_.problem(), matmul::Config::parse(config), &sets_);
  }
  void poison(CUstream stream) override {
    KJIT_CU(cuMemsetD8Async, c_.get(), 0xFF, c_.bytes(), stream);
  }
  tuner::CheckOutcome check() override {
    const matmul::Problem& p = problem_.problem();
    const size_t elem = static_cast<size_t>(matmul::dtype_bytes(p.output));
    const size_t row_bytes = static_cast<size_t>(p.n) * elem;
    std::vector<unsigned char> rows(reference_.rows.size() * row_bytes *
                                    static_cast<size_t>(p.batch));
    size_t at = 0;
    for (int64_t batch = 0; batch < p.batch; ++batch)
      for (int64_t row : reference_.rows) {
        c_.download(rows.data() + at, row_bytes,
                    static_cast<size_t>((batch * p.m + row) * p.n) * elem);
        at += row_bytes;
      }
    const std::vector<double> values = matmul::to_doubles(p.output, rows, rows.size() / elem);
    const matmul::CheckResult r = matmul::check_rows(reference_, values);
    tuner::CheckOutcome out;
    out.relative_l2 = r.relative_l2;
    out.tolerance = matmul::check_tolerance(p.input);
    out.checked = r.checked;
    if (r.has_first_bad) out.detail = r.describe();
    return out;
  }

 private:
  Runtime& runtime_;
  const tuner::MatmulTuning& problem_;
  matmul::HostProblem host_;
  matmul::SampledReference reference_;
  std::vector<cuda::DeviceBuffer> buffers_, extras_;
  std::vector<matmul::Tensors> sets_;
  cuda::DeviceBuffer c_;
  size_t out_bytes_ = 0;
};

// ---- attention ---------------------------------------------------------------

// Random Q, K, V (packed BSHD, or packed tokens), O and LSE as scratch; the check
// compares O and the LSE on sampled rows with the fp64 reference.
class AttentionHarness : public tuner::Harness {
 public:
  AttentionHarness(Runtime& runtime, const tuner::AttentionTuning& problem)
      : runtime_(runtime), problem_(problem) {
    const attention::Problem& p = problem_.problem();
    const uint64_t seed = fresh_seed();
    host_ = attention::make_host_attention(p, seed);
    samples_ = attention::samples_to_check(p, seed);
    const std::vector<unsigned char> q = host_.q.bytes(), k = host_.k.bytes(), v = host_.v.bytes();
    const int sets = input_sets_for(static_cast<double>(q.size() + k.size() + v.size()),
                                    runtime.device().l2_bytes);
    auto upload = [this](const std::vector<unsigned char>& bytes) {
      buffers_.emplace_back(std::max<size_t>(bytes.size(), 16));
      buffers_.back().upload(bytes.data(), bytes.size());
      return buffers_.back().get();
    };
    o_count_ = static_cast<size_t>(p.total_q() * p.heads * p.head_dim);
    o_ = cuda::DeviceBuffer(o_count_ * 2);
    lse_ = cuda::DeviceBuffer(static_cast<size_t>(p.total_q() * p.heads) * 4);
    operands_ = attention::upload_operands(host_);  // the modifiers', shared by the sets
    for (int s = 0; s < sets; ++s) {
      attention::Tensors t;
      t.modifier_operands = operands_.pointers();
      t.q = upload(q);
      t.k = upload(k);
      t.v = upload(v);
      t.o = o_.get();
      t.lse = lse_.get();
      sets_.push_back(t);
    }
  }

  const tuner::TuningProblem& problem() const override { return problem_; }
  int input_sets() const override { return static_cast<int>(sets_.size()); }
  std::unique_ptr<tuner::Trial> prepare(const std::string& config) override {
    return std::make_unique<KernelTrial<attention::Attention, attention::Tensors>>(
        runtime_, problem_.problem(), attention::Config::parse(config), &sets_);
  }
  void poison(CUstream stream) override {
    KJIT_CU(cuMemsetD8Async, o_.get(), 0xFF, o_.bytes(), stream);
    KJIT_CU(cuMemsetD8Async, lse_.get(), 0xFF, lse_.bytes(), stream);
  }
  tuner::CheckOutcome check() override {
    const attention::Problem& p = problem_.problem();
    const std::vector<double> o =
        matmul::to_doubles(attention::host_dtype(p), o_.to_host<unsigned char>(), o_count_);
    const attention::AttentionCheck c = attention::check_attention(
        host_, o, attention::resolve(p, sets_[0]).o_strides, lse_.to_host<float>(), samples_);
    tuner::CheckOutcome out;
    out.tolerance = attention::check_tolerance(p);
    // NaN, or a wrong LSE, fails whatever the error of O.
    out.relative_l2 =
        c.ok(out.tolerance) ? c.relative_l2 : std::max(c.relative_l2, 2 * out.tolerance + 1);
    out.checked = c.rows * p.head_dim;
    if (!c.ok(out.tolerance)) out.detail = c.describe();
    return out;
  }

 private:
  Runtime& runtime_;
  const tuner::AttentionTuning& problem_;
  attention::HostAttention host_;
  std::vector<attention::Sample> samples_;
  std::vector<cuda::DeviceBuffer> buffers_;
  std::vector<attention::Tensors> sets_;
  attention::DeviceOperands operands_;
  cuda::DeviceBuffer o_, lse_;
  size_t o_count_ = 0;
};

// The backward pass: random Q, K, V and dO per input set, O and LSE from the forward
// pass (the tuner's config) once per set; dQ, dK, dV as scratch, compared with the
// fp64 gradients of a few (batch, K/V head) groups.
class AttentionBackwardHarness : public tuner::Harness {
 public:
  AttentionBackwardHarness(Runtime& runtime, const tuner::AttentionTuning& problem)
      : runtime_(runtime), problem_(problem) {
    const attention::Problem& p = problem_.problem();
    const uint64_t seed = fresh_seed();
    host_ = attention::make_host_attention(p, seed);
    d_o_ = matmul::random_tensor(attention::host_dtype(p), host_.q.size(), seed + 7);
    groups_ = attention::gradient_groups_to_check(p, seed);
    const std::vector<unsigned char> q = host_.q.bytes(), k = host_.k.bytes(), v = host_.v.bytes(),
                                     g = d_o_.bytes();
    const int sets = input_sets_for(2.0 * static_cast<double>(q.size() + k.size() + v.size()),
                                    runtime.device().l2_bytes);
    auto buffer = [this](size_t bytes) {
      buffers_.emplace_back(std::max<size_t>(bytes, 16));
      return buffers_.back().get();
    };
    auto upload = [&](const std::vector<unsigned char>& bytes) {
      const CUdeviceptr at = buffer(bytes.size());
      buffers_.back().upload(bytes.data(), bytes.size());
      return at;
    };
    q_count_ = static_cast<size_t>(p.total_q() * p.heads * p.head_dim);
    kv_count_ = static_cast<size_t>(p.total_k() * p.kv_heads * p.head_dim);
    dq_ = cuda::DeviceBuffer(q_count_ * 2);
    dk_ = cuda::DeviceBuffer(kv_count_ * 2);
    dv_ = cuda::DeviceBuffer(kv_count_ * 2);
    attention::Problem forward_problem = p;
    forward_problem.backward = false;
    attention::Attention forward(runtime, forward_problem);
    cuda::Stream stream;
    operands_ = attention::upload_operands(host_);  // the modifiers', shared by the sets
    for (int s = 0; s < sets; ++s) {
      attention::BackwardTensors t;
      t.modifier_operands = operands_.pointers();
      t.q = upload(q);
      t.k = upload(k);
      t.v = upload(v);
      t.d_o = upload(g);
      t.o = buffer(q_count_ * 2);
      t.lse = buffer(static_cast<size_t>(p.total_q() * p.heads) * 4);
      t.dq = dq_.get();
      t.dk = dk_.get();
      t.dv = dv_.get();
      forward.launch({.q = t.q,
                      .k = t.k,
                      .v = t.v,
                      .o = t.o,
                      .lse = t.lse,
                      .modifier_operands = t.modifier_operands},
                     stream.get());
      sets_.push_back(t);
    }
    stream.synchronize();
  }

  const tuner::TuningProblem& problem() const override { return problem_; }
  int input_sets() const override { return static_cast<int>(sets_.size()); }
  std::unique_ptr<tuner::Trial> prepare(const std::string& config) override {
    return std::make_unique<KernelTrial<attention::AttentionBackward, attention::BackwardTensors>>(
        runtime_, problem_.problem(), attention::Config::parse(config), &sets_);
  }
  void poison(CUstream stream) override {
    for (cuda::DeviceBuffer* b : {&dq_, &dk_, &dv_})
      KJIT_CU(cuMemsetD8Async, b->get(), 0xFF, b->bytes(), stream);
  }
  tuner::CheckOutcome check() override {
    const attention::Problem& p = problem_.problem();
    const matmul::DType dtype = attention::host_dtype(p);
    const attention::BackwardCheck c = attention::check_backward(
        host_, d_o_, matmul::to_doubles(dtype, dq_.to_host<unsigned char>(), q_count_),
        matmul::to_doubles(dtype, dk_.to_host<unsigned char>(), kv_count_),
        matmul::to_doubles(dtype, dv_.to_host<unsigned char>(), kv_count_),
        attention::resolve(p, sets_[0]), groups_);
    tuner::CheckOutcome out;
    out.tolerance = attention::backward_tolerance(p);
    out.relative_l2 = c.ok(out.tolerance) ? c.worst() : std::max(c.worst(), 2 * out.tolerance + 1);
    out.checked = c.groups;
    if (!c.ok(out.tolerance)) out.detail = c.describe();
    return out;
  }

 private:
  Runtime& runtime_;
  const tuner::AttentionTuning& problem_;
  attention::HostAttention host_;
  matmul::HostTensor d_o_;
  std::vector<std::pair<int64_t, int64_t>> groups_;
  std::vector<cuda::DeviceBuffer> buffers_;
  std::vector<attention::BackwardTensors> sets_;
  attention::DeviceOperands operands_;
  cuda::DeviceBuffer dq_, dk_, dv_;
  size_t q_count_ = 0, kv_count_ = 0;
};

// ---- elementwise -------------------------------------------------------------

class ElementwiseTrial : public tuner::Trial {
 public:
  ElementwiseTrial(Runtime& runtime, const Graph& graph, const ir::ElementwiseConfig& config,
                   const std::vector<std::vector<TensorArg>>* inputs,
                   const std::vector<TensorArg>* outputs)
      : kernel_(runtime, graph, config), inputs_(inputs), outputs_(outputs) {}
  void launch(CUstream stream, int set) override {
    kernel_.launch((*inputs_)[static_cast<size_t>(set)], *outputs_, stream);
  }
  tuner::KernelResources resources() const override {
    const ElementwiseKernel::LaunchInfo info = kernel_.last_launch();
    tuner::KernelResources r;
    r.threads = info.block_threads;
    r.registers = info.registers;
    r.estimated = false;
    return r;
  }

 private:
  ElementwiseKernel kernel_;
  const std::vector<std::vector<TensorArg>>* inputs_;
  const std::vector<TensorArg>* outputs_;
};

class ElementwiseHarness : public tuner::Harness {
 public:
  ElementwiseHarness(Runtime& runtime, const tuner::ElementwiseTuning& problem)
      : runtime_(runtime), problem_(problem) {
    const Graph& graph = problem_.plan().problem.graph;
    const std::vector<int> ids = graph.inputs();
    const uint64_t seed = fresh_seed();
    double set_bytes = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      host_.push_back(ir::random_input(graph, ids[i], problem_.inputs()[i].shape, seed + i));
      set_bytes += static_cast<double>(host_.back().data.size());
    }
    // The device bytes of each input: the values as they are, or for a strided input
    // scattered to their strided places (the elements between them zero).
    std::vector<std::vector<char>> device_bytes(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      const TensorArg& t = problem_.inputs()[i];
      if (t.strides.empty()) continue;
      const size_t elem = static_cast<size_t>(ir::size_bytes(t.dtype));
      int64_t extent = 1;  // elements the strided view spans
      for (size_t d = 0; d < t.shape.size(); ++d) extent += (t.shape[d] - 1) * t.strides[d];
      device_bytes[i].assign(static_cast<size_t>(extent) * elem, 0);
      std::vector<int64_t> index(t.shape.size(), 0);
      const int64_t count = static_cast<int64_t>(host_[i].data.size() / elem);
      for (int64_t e = 0; e < count; ++e) {  // row-major over the logical shape
        int64_t offset = 0;
        for (size_t d = 0; d < index.size(); ++d) offset += index[d] * t.strides[d];
        std::memcpy(device_bytes[i].data() + offset * elem, host_[i].data.data() + e * elem, elem);
        for (size_t d = index.size(); d-- > 0;) {
          if (++index[d] < t.shape[d]) break;
          index[d] = 0;
        }
      }
      set_bytes += static_cast<double>(device_bytes[i].size() - host_[i].data.size());
    }
    const int sets = input_sets_for(set_bytes, runtime.device().l2_bytes);
    for (int s = 0; s < sets; ++s) {
      std::vector<TensorArg> args = problem_.inputs();
      for (size_t i = 0; i < ids.size(); ++i) {
        const std::vector<char>& bytes = device_bytes[i].empty() ? host_[i].data : device_bytes[i];
        buffers_.emplace_back(std::max<size_t>(bytes.size(), 16));
        buffers_.back().upload(bytes.data(), bytes.size());
        args[i].data = buffers_.back().get();
      }
      inputs_.push_back(std::move(args));
    }
    outputs_ = problem_.outputs();
    for (TensorArg& t : outputs_) {
      const size_t bytes =
          static_cast<size_t>(checked_size(t.shape, ir::size_bytes(t.dtype), "an output"));
      out_buffers_.emplace_back(std::max<size_t>(bytes, 16));
      t.data = out_buffers_.back().get();
    }
    sample_reference();
  }

  const tuner::TuningProblem& problem() const override { return problem_; }
  int input_sets() const override { return static_cast<int>(inputs_.size()); }
  std::unique_ptr<tuner::Trial> prepare(const std::string& config) override {
    return std::make_unique<ElementwiseTrial>(runtime_, problem_.plan().problem.graph,
                                              ir::ElementwiseConfig::parse(config), &inputs_,
                                              &outputs_);
  }
  void poison(CUstream stream) override {
    for (cuda::DeviceBuffer& b : out_buffers_)
      KJIT_CU(cuMemsetD8Async, b.get(), 0xFF, b.bytes(), stream);
  }
  tuner::CheckOutcome check() override {
    const Graph& graph = problem_.plan().problem.graph;
    tuner::CheckOutcome worst;
    for (size_t k = 0; k < outputs_.size(); ++k) {
      const DType dtype = outputs_[k].dtype;
      const size_t elem = static_cast<size_t>(ir::size_bytes(dtype));
      NpyArray got{ir::npy_descr(dtype), {static_cast<int64_t>(samples_.size())}, {}};
      got.data.resize(samples_.size() * elem);
      for (const auto& [first, count] : runs_)
        out_buffers_[k].download(got.data.data() + run_offset_.at(first) * elem,
                                 static_cast<size_t>(count) * elem,
                                 static_cast<size_t>(first) * elem);
      const tuner::CheckOutcome c =
          tuner::check(npy_values(got), reference_[k], tuner::precision_of(dtype));
      if (k == 0 || c.relative_l2 > worst.relative_l2) worst = c;
      (void)graph;
    }
    return worst;
  }

 private:
  // The reference on a sample of output elements: 64 runs of up to 1024 consecutive
  // elements spread over the output (the first and the last included).
  void sample_reference() {
    const ElementwisePlan& plan = problem_.plan();
    const int64_t n = plan.n;
    const int64_t run = std::min<int64_t>(1024, n);
    const int64_t count = std::min<int64_t>(64, std::max<int64_t>(1, n / run));
    for (int64_t r = 0; r < count; ++r) {
      const int64_t first = count == 1 ? 0 : (n - run) * r / (count - 1);
      if (!runs_.empty() && first < runs_.back().first + runs_.back().second) continue;
      run_offset_[first] = static_cast<int64_t>(samples_.size());
      runs_.emplace_back(first, run);
      for (int64_t i = first; i < first + run; ++i) samples_.push_back(i);
    }
    const Graph& graph = plan.problem.graph;
    const std::vector<int> ids = graph.inputs();
    reference_.assign(graph.outputs().size(), {});
    std::vector<double> values(graph.nodes().size());
    for (int64_t i : samples_) {
      const int64_t row = i / plan.cols, col = i % plan.cols;
      size_t next_input = 0;
      for (size_t id = 0; id < graph.nodes().size(); ++id) {
        const ir::Node& node = graph.node(static_cast<int>(id));
        if (node.op == ir::OpCode::Input) {
          const size_t input = next_input++;
          const ir::Access access = plan.problem.access[input];
          const int64_t at = access == ir::Access::Scalar   ? 0
                             : access == ir::Access::Row    ? col
                             : access == ir::Access::Column ? row
                                                            : i;
          values[id] = element(host_[input], at);
        } else if (node.op == ir::OpCode::Const) {
          values[id] = node.value;
        } else {
          double operands[3] = {};
          for (size_t o = 0; o < node.operands.size() && o < 3; ++o)
            operands[o] = values[static_cast<size_t>(node.operands[o])];
          values[id] = ir::evaluate_node(node, operands);
        }
      }
      for (size_t k = 0; k < graph.outputs().size(); ++k) {
        const int id = graph.outputs()[k].second;
        reference_[k].push_back(
            ir::round_to(graph.node(id).dtype, values[static_cast<size_t>(id)]));
      }
    }
  }

  // Element `i` of an input as a double (the reference reads only the samples).
  static double element(const NpyArray& array, int64_t i) {
    const size_t size = static_cast<size_t>(npy_item_size(array.descr));
    NpyArray one{array.descr, {1}, {}};
    one.data.assign(array.data.begin() + static_cast<std::ptrdiff_t>(i * size),
                    array.data.begin() + static_cast<std::ptrdiff_t>((i + 1) * size));
    return npy_values(one)[0];
  }

  Runtime& runtime_;
  const tuner::ElementwiseTuning& problem_;
  std::vector<NpyArray> host_;
  std::vector<cuda::DeviceBuffer> buffers_, out_buffers_;
  std::vector<std::vector<TensorArg>> inputs_;
  std::vector<TensorArg> outputs_;
  std::vector<int64_t> samples_;
  std::vector<std::pair<int64_t, int64_t>> runs_;  // (first element, count)
  std::map<int64_t, int64_t> run_offset_;          // first element -> index in samples_
  std::vector<std::vector<double>> reference_;     // per output, per sample
};

}  // namespace

std::unique_ptr<tuner::Harness> make_harness(Runtime& runtime,
                                             const tuner::TuningProblem& problem) {
  runtime.context().make_current();
  if (auto* m = dynamic_cast<const tuner::MatmulTuning*>(&problem))
    return std::make_unique<MatmulHarness>(runtime, *m);
  if (auto* e = dynamic_cast<const tuner::ElementwiseTuning*>(&problem))
    return std::make_unique<ElementwiseHarness>(runtime, *e);
  if (auto* a = dynamic_cast<const tuner::AttentionTuning*>(&problem))
    return a->problem().backward
               ? std::unique_ptr<tuner::Harness>(
                     std::make_unique<AttentionBackwardHarness>(runtime, *a))
               : std::unique_ptr<tuner::Harness>(std::make_unique<AttentionHarness>(runtime, *a));
  throw UserError("no measuring harness for the " + problem.family() + " family");
}

tuner::Measurer in_process_measurer(Runtime& runtime) {
  return [&runtime](const tuner::TuningProblem& problem, const std::vector<std::string>& configs,
                    const tuner::TimerOptions& timer, double leader_ms,
                    const tuner::MeasureListener& listener) {
    std::unique_ptr<tuner::Harness> harness = make_harness(runtime, problem);
    return tuner::measure(*harness, configs, runtime.device(), timer, leader_ms, listener);
  };
}

tuner::Measurer worker_measurer(std::shared_ptr<tuner::MeasureWorker> worker) {
  return [worker](const tuner::TuningProblem& problem, const std::vector<std::string>& configs,
                  const tuner::TimerOptions& timer, double leader_ms,
                  const tuner::MeasureListener& listener) {
    return worker->measure(problem.spec(), configs, timer, leader_ms, listener);
  };
}

tuner::Choice choose_config(Runtime& runtime, const tuner::TuningProblem& problem) {
  tuner::Chooser& chooser = runtime.chooser();
  tuner::Choice choice = chooser.choose(problem);
  if (choice.source == tuner::Choice::Source::Store || !runtime.tune_on_first_use()) return choice;
  // KJIT_TUNE=1: tune now (one problem at a time per process), then choose again.
  // Recursive: a tune logs, and a log callback may call kjit on this thread, whose
  // problem may need tuning too (it waits for no one but this thread).
  static std::recursive_mutex tuning;
  std::lock_guard<std::recursive_mutex> lock(tuning);
  choice = chooser.choose(problem);
  if (choice.source == tuner::Choice::Source::Store) return choice;
  tuner::TuneOptions options;
  options.arch = runtime.arch();
  tuner::Measurer measurer;
  std::optional<std::string> worker = env("KJIT_TUNE_WORKER");
  if (worker && problem.has_spec()) {
    tuner::WorkerOptions w;
    w.argv = {*worker, "__tune-worker", "--device", std::to_string(runtime.device().ordinal)};
    measurer = worker_measurer(std::make_shared<tuner::MeasureWorker>(w));
  } else {
    measurer = in_process_measurer(runtime);
  }
  log_line("config", "KJIT_TUNE=1: tuning " + problem.signature());
  tuner::tune(problem, chooser, measurer, options);
  return chooser.choose(problem);
}

int serve_tuning_worker(int device) {
  // The tune that started this process may be killed (Ctrl-C, SIGKILL) while a
  // kernel here hangs, and nothing would end this process: it held the GPU with
  // the tune gone. Its jobs come through a pipe on stdin; when the tune's end of
  // it is closed (it stopped this worker, or died), the pipe hangs up, and a
  // watchdog thread ends the process whatever the main thread is doing.
  std::thread([] {
    pollfd jobs{0, 0, 0};  // no events asked: poll reports only a hang-up or an error
    while (::poll(&jobs, 1, -1) < 0 && errno == EINTR) {
    }
    std::_Exit(0);
  }).detach();
  RuntimeOptions options;
  options.device = device;
  options.tune_on_first_use = false;
  Runtime runtime(options);
  // The protocol owns stdout; anything else printed goes to stderr.
  const int protocol = dup(1);
  dup2(2, 1);
  FILE* out_file = fdopen(protocol, "w");
  if (!out_file) return 2;
  struct FileBuf : std::streambuf {
    FILE* file;
    explicit FileBuf(FILE* f) : file(f) {}
    int overflow(int c) override { return c == EOF ? 0 : std::fputc(c, file); }
    std::streamsize xsputn(const char* s, std::streamsize n) override {
      return static_cast<std::streamsize>(std::fwrite(s, 1, static_cast<size_t>(n), file));
    }
    int sync() override { return std::fflush(file); }
  } buffer(out_file);
  std::ostream out(&buffer);
  std::vector<std::unique_ptr<tuner::TuningProblem>> problems;  // outlive their harnesses
  return tuner::serve_measurements(
      [&](const nlohmann::json& spec) {
        problems.push_back(tuner::make_problem(spec));
        return make_harness(runtime, *problems.back());
      },
      runtime.device(), std::cin, out);
}

}  // namespace kjit
