// kjit emit|compile|run|bench attention --seq-q S [--seq-k S] [--batch B] [--heads H]
//   [--kv-heads G] [--head-dim 64|96|128|256] [--dtype bf16|f16] [--causal]
//   [--window L:R] [--scale X] [--config bm=..,bn=..,stages=..]
//   [--seqlens-q 1,7,300 [--seqlens-k ...]]   (a packed batch instead of --batch/--seq-q)
//   [--backward [--deterministic]]   (the backward pass: dQ, dK, dV; its kernels and
//                  its config; --deterministic: the same bits every run, no atomics)
//   [--score-mod IR] [--mask-mod IR]   (modifiers fused into every kernel; run and
//                  bench give their operands random values, make_host_attention)
//
//   emit     the generated CUDA source (the online softmax written out in comments)
//   compile  NVRTC for --arch (no GPU needed): registers, shared memory, spills
//   run      random Q, K, V on the GPU, O and LSE checked against the fp64 reference
//   bench    the median time of many runs and TFLOP/s (4 · B · H · S_q · S_k · D over
//            the pairs the masks leave; 2.5 times that for --backward); peers:
//            tools/device/peers/attention_torch.py
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <random>

#include "kjit/runtime/attention.h"
#include "kjit/runtime/attention_check.h"
#include "kjit/runtime/compile.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/stream.h"
#include "kjit/support/error.h"
#include "kjit/tuner/attention_space.h"
#include "kjit/tuner/timer.h"
#include "tools/cli/command.h"
#include "tools/cli/family.h"
#include "tools/cli/kernel_options.h"

namespace kjit::cli {

namespace {

using namespace kjit::attention;

// The modifiers as written, beside the problem's text (which names them by key only),
// so a JSON result says which modifiers it measured.
void add_modifiers(nlohmann::json& json, const attention::Problem& p) {
  if (!p.score_mod.empty()) json["score_mod"] = p.score_mod;
  if (!p.mask_mod.empty()) json["mask_mod"] = p.mask_mod;
}

// "L:R" -> window_left, window_right; each side a count of keys in [0, 2^31 - 1] or
// "inf" (-1).
std::pair<int64_t, int64_t> parse_window(const std::string& text) {
  const size_t colon = text.find(':');
  auto side = [&](const std::string& s) -> int64_t {
    if (s == "inf") return -1;
    constexpr long long kMost = 2147483647;
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || v < 0 || errno == ERANGE || v > kMost)
      throw UserError(fmt::format("--window '{}': '{}' is not a count of keys in [0, {}] or 'inf'",
                                  text, s, kMost),
                      "write L:R, e.g. 256:0 (256 keys before the diagonal, none after)");
    return v;
  };
  if (colon == std::string::npos)
    throw UserError("--window '" + text + "' is not L:R",
                    "write L:R, e.g. 256:0 (256 keys before the diagonal, none after)");
  return {side(text.substr(0, colon)), side(text.substr(colon + 1))};
}

// "1,7,300" -> {1, 7, 300}
std::vector<int64_t> parse_lengths(const std::string& text, const char* option) {
  std::vector<int64_t> lengths;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || errno == ERANGE)  // not clamped to 2^63 - 1
      throw UserError(
          std::string(option) + " '" + text + "': '" + item + "' is not a sequence length >= 1",
          "write the lengths separated by commas, e.g. 1,7,300,2049");
    lengths.push_back(v);
    start = comma + 1;
  }
  return lengths;
}

Problem problem_from(const KernelCommandOptions& o) {
  const bool packed = !o.seqlens_q.empty();
  if (!packed && !o.seqlens_k.empty())
    throw UserError("--seqlens-k needs --seqlens-q", "give the query lengths too");
  if (packed && (o.given.count("--seq-q") || o.given.count("--seq-k") || o.given.count("--batch")))
    throw UserError("--seqlens-q replaces --batch, --seq-q and --seq-k",
                    "a packed batch has one length per sequence");
  if (!packed && o.seq_q < 1) throw UserError("attention needs --seq-q", "e.g. --seq-q 2048");
  Problem p;
  p.batch = o.batch;
  p.heads = o.heads > 0 ? o.heads : 1;
  p.kv_heads = o.kv_heads > 0 ? o.kv_heads : p.heads;
  p.seq_q = o.seq_q;
  p.seq_k = o.seq_k > 0 ? o.seq_k : o.seq_q;
  p.head_dim = o.head_dim;
  const std::string dtype = o.dtype.empty() ? "bf16" : o.dtype;
  if (dtype == "bf16") {
    p.dtype = ir::DType::BF16;
  } else if (dtype == "f16") {
    p.dtype = ir::DType::F16;
  } else {
    throw UserError("attention dtype '" + dtype + "' is not supported", "use bf16 or f16");
  }
  p.causal = o.causal;
  if (!o.window.empty()) {
    const auto [left, right] = parse_window(o.window);
    p.window_left = left;
    p.window_right = right;
    if (p.causal && right > 0)
      throw UserError("--causal with --window " + o.window + ": the window's right side is not 0",
                      "give one of them (causal is --window inf:0)");
  }
  p.scale = o.scale;
  p.backward = o.backward;
  if (o.deterministic && !o.backward)
    throw UserError("--deterministic applies to --backward",
                    "the forward pass gives the same bits every run anyway");
  p.deterministic = o.deterministic;
  p.score_mod = o.score_mod;
  p.mask_mod = o.mask_mod;
  if (packed)
    p.set_lengths(
        parse_lengths(o.seqlens_q, "--seqlens-q"),
        o.seqlens_k.empty() ? std::vector<int64_t>{} : parse_lengths(o.seqlens_k, "--seqlens-k"));
  validate_problem(p);
  return p;
}

struct DeviceTensors {
  HostAttention host;
  cuda::DeviceBuffer q, k, v, o, lse;
  DeviceOperands operands;  // the modifiers' (random, as make_host_attention says)
  Tensors tensors;
};

// run / bench --backward: the forward pass (the tuner's config) writes O and LSE
// for random Q, K, V; then the backward pass, dQ, dK, dV checked against the fp64
// gradients of a few (batch, K/V head) groups, and timed.
void backward_command(const KernelCommandOptions& o, Runtime& runtime, const Problem& p,
                      const Config& config, const std::string& config_source) {
  Problem forward_problem = p;
  forward_problem.backward = false;
  Attention forward(runtime, forward_problem);
  AttentionBackward backward(runtime, p, config);
  const uint64_t seed = std::random_device{}();
  const HostAttention host = make_host_attention(p, seed);
  const matmul::HostTensor d_o = matmul::random_tensor(host_dtype(p), host.q.size(), seed + 7);
  cuda::DeviceBuffer q = cuda::DeviceBuffer::from(host.q.bytes()),
                     k = cuda::DeviceBuffer::from(host.k.bytes()),
                     v = cuda::DeviceBuffer::from(host.v.bytes()),
                     g = cuda::DeviceBuffer::from(d_o.bytes());
  const auto q_count = static_cast<size_t>(p.total_q() * p.heads * p.head_dim);
  const auto kv_count = static_cast<size_t>(p.total_k() * p.kv_heads * p.head_dim);
  cuda::DeviceBuffer out(q_count * 2), lse(static_cast<size_t>(p.total_q() * p.heads) * 4);
  cuda::DeviceBuffer dq(q_count * 2), dk(kv_count * 2), dv(kv_count * 2);
  for (cuda::DeviceBuffer* b : {&dq, &dk, &dv}) b->fill_bytes(0xFF);
  const DeviceOperands operands = upload_operands(host);
  const BackwardTensors t{.q = q.get(),
                          .k = k.get(),
                          .v = v.get(),
                          .o = out.get(),
                          .lse = lse.get(),
                          .d_o = g.get(),
                          .dq = dq.get(),
                          .dk = dk.get(),
                          .dv = dv.get(),
                          .modifier_operands = operands.pointers()};
  cuda::Stream stream;
  forward.launch({.q = t.q,
                  .k = t.k,
                  .v = t.v,
                  .o = t.o,
                  .lse = t.lse,
                  .modifier_operands = t.modifier_operands},
                 stream.get());
  backward.launch(t, stream.get());
  stream.synchronize();
  const BackwardCheck check = check_backward(
      host, d_o, matmul::to_doubles(host_dtype(p), dq.to_host<unsigned char>(), q_count),
      matmul::to_doubles(host_dtype(p), dk.to_host<unsigned char>(), kv_count),
      matmul::to_doubles(host_dtype(p), dv.to_host<unsigned char>(), kv_count), resolve(p, t),
      gradient_groups_to_check(p, seed));
  const bool ok = check.ok(backward_tolerance(p));
  if (!ok) exit_code = 1;
  double median_ms = 0;
  int repeats = 0;
  if (o.verb == Verb::Bench) {
    repeats = o.repeats > 0 ? o.repeats : 30;
    tuner::Timer timer(stream.get(), runtime.device().l2_bytes);
    median_ms = timer.time([&](int) { backward.launch(t, stream.get()); }, repeats).median_ms;
  }
  const double credited = flops(p);
  const double tflops = median_ms > 0 ? credited / (median_ms * 1e-3) / 1e12 : 0;
  std::string names;
  int registers = 0;
  for (const KernelSource& s : backward.sources()) names += (names.empty() ? "" : ",") + s.name;
  for (const char* role : {"kv", "q"})
    registers = std::max(registers, backward.kernel(role).stats().registers);
  if (o.json) {
    nlohmann::json json = {{"family", "attention"},
                           {"direction", "backward"},
                           {"problem", p.to_string()},
                           {"config", config.to_string()},
                           {"config_source", config_source},
                           {"kernel", names},
                           {"registers", registers},
                           {"dq_relative_l2", check.dq_relative_l2},
                           {"dk_relative_l2", check.dk_relative_l2},
                           {"dv_relative_l2", check.dv_relative_l2},
                           {"checked_groups", check.groups},
                           {"pass", ok}};
    add_modifiers(json, p);
    if (o.verb == Verb::Bench) {
      json["median_ms"] = median_ms;
      json["flops"] = credited;
      json["tflops"] = tflops;
      json["repeats"] = repeats;
    }
    return print_json(json);
  }
  std::cout << fmt::format(
      "attention backward {}\nconfig {} (at most {} registers; {})\ncheck: {} -> {}\n",
      p.to_string(), config.to_string(), registers, config_source, check.describe(),
      ok ? "PASS" : "FAIL");
  if (o.verb == Verb::Bench)
    std::cout << fmt::format(
        "kjit: median {:.4f} ms over {} runs: {:.1f} TFLOP/s (credited 2.5x "
        "the forward's FLOPs)\n",
        median_ms, repeats, tflops);
}

void attention_command(const KernelCommandOptions& o) {
  const bool on_gpu = o.verb == Verb::Run || o.verb == Verb::Bench;
  const Problem p = problem_from(o);  // the input's errors first, with or without a GPU
  if (on_gpu) require_gpu(std::string("kjit ") + to_string(o.verb) + " attention");
  std::unique_ptr<Runtime> runtime;
  Target target;
  if (on_gpu) {
    runtime = std::make_unique<Runtime>();
    target.device = runtime->device();
  } else {
    target = command_target(o.arch, o.gpu);
  }
  // The config: given, or the tuner's choice (the store's tuning for this GPU model,
  // the nearest tuned problem, or the model).
  std::unique_ptr<tuner::Chooser> planning;
  if (!runtime) planning = make_chooser(target);
  tuner::Chooser& chooser = runtime ? runtime->chooser() : *planning;
  Config config;
  std::string config_source = "given (--config)";
  if (o.config.empty()) {
    const tuner::Choice choice = chooser.choose(tuner::AttentionTuning(p));
    config = Config::parse(choice.config);
    config_source = std::string(tuner::to_string(choice.source)) + ": " + choice.detail;
  } else {
    config = Config::parse(o.config);
  }
  validate(p, config);
  check_fits_device(p, config, target.device);
  // The forward pass is one kernel; the backward pass three (four at head dim 256),
  // printed and compiled in launch order.
  const std::vector<KernelSource> sources = tuner::AttentionTuning(p).sources(config.to_string());

  if (o.verb == Verb::Emit) {
    std::string text, names;
    int block_threads = 0, shared = 0;
    for (size_t i = 0; i < sources.size(); ++i) {
      if (sources.size() > 1)
        text += fmt::format("{}// ==== kernel {} of {}: {} ====\n", i > 0 ? "\n" : "", i + 1,
                            sources.size(), sources[i].name);
      text += sources[i].source;
      names += (names.empty() ? "" : ",") + sources[i].name;
      block_threads = std::max(block_threads, sources[i].block_threads);
      shared = std::max(shared, sources[i].dynamic_shared_bytes);
    }
    if (o.json) {
      print_json({{"family", "attention"},
                  {"problem", sources.front().problem},
                  {"config", config.to_string()},
                  {"config_source", config_source},
                  {"kernel", names},
                  {"block_threads", block_threads},
                  {"dynamic_shared_bytes", shared},
                  {"source", text}});
    } else {
      const tuner::Prediction plan = tuner::AttentionTuning(p).predict(
          config, chooser.device(), *chooser.efficiencies(), nullptr);
      print_emitted(text, plan_comment(chooser.device(), plan), o.templates);
    }
    return;
  }
  if (o.verb == Verb::Compile) {
    report_family_compile("attention", p.to_string(), sources, config.to_string(), config_source,
                          o.arch.empty() ? target.device.arch() : o.arch, o.json, o.ptx);
    return;
  }
  if (o.verb != Verb::Run && o.verb != Verb::Bench)
    throw UserError(std::string("kjit ") + to_string(o.verb) + " attention is not supported");
  if (p.backward) return backward_command(o, *runtime, p, config, config_source);
  const KernelSource& source = sources.front();

  // run / bench: random Q, K, V (packed BSHD), O poisoned so that a row never
  // written fails the check.
  Attention attention(*runtime, p, config);
  const uint64_t seed = std::random_device{}();
  DeviceTensors d;
  d.host = make_host_attention(p, seed);
  d.q = cuda::DeviceBuffer::from(d.host.q.bytes());
  d.k = cuda::DeviceBuffer::from(d.host.k.bytes());
  d.v = cuda::DeviceBuffer::from(d.host.v.bytes());
  const auto o_count = static_cast<size_t>(p.total_q() * p.heads * p.head_dim);
  d.o = cuda::DeviceBuffer(o_count * 2);
  d.o.fill_bytes(0xFF);
  d.lse = cuda::DeviceBuffer(static_cast<size_t>(p.total_q() * p.heads) * 4);
  d.operands = upload_operands(d.host);
  d.tensors = {.q = d.q.get(),
               .k = d.k.get(),
               .v = d.v.get(),
               .o = d.o.get(),
               .lse = d.lse.get(),
               .modifier_operands = d.operands.pointers()};
  cuda::Stream stream;
  attention.launch(d.tensors, stream.get());
  stream.synchronize();
  const std::vector<double> got =
      matmul::to_doubles(host_dtype(p), d.o.to_host<unsigned char>(), o_count);
  const AttentionCheck check = check_attention(d.host, got, resolve(p, d.tensors).o_strides,
                                               d.lse.to_host<float>(), samples_to_check(p, seed));
  const bool ok = check.ok(check_tolerance(p));
  if (!ok) exit_code = 1;

  double median_ms = 0;
  int repeats = 0;
  if (o.verb == Verb::Bench) {
    repeats = o.repeats > 0 ? o.repeats : 50;
    tuner::Timer timer(stream.get(), runtime->device().l2_bytes);
    median_ms =
        timer.time([&](int) { attention.launch(d.tensors, stream.get()); }, repeats).median_ms;
  }
  const double flops = forward_flops(p);
  const double tflops = median_ms > 0 ? flops / (median_ms * 1e-3) / 1e12 : 0;
  if (o.json) {
    nlohmann::json out = {{"family", "attention"},
                          {"problem", p.to_string()},
                          {"config", config.to_string()},
                          {"config_source", config_source},
                          {"kernel", source.name},
                          {"registers", attention.stats().registers},
                          {"spill_bytes", attention.stats().spill_store_bytes},
                          {"relative_l2", check.relative_l2},
                          {"lse_max_error", check.lse_max_error},
                          {"checked_rows", check.rows},
                          {"pass", ok}};
    add_modifiers(out, p);
    if (o.verb == Verb::Bench) {
      out["median_ms"] = median_ms;
      out["flops"] = flops;
      out["tflops"] = tflops;
      out["repeats"] = repeats;
    }
    return print_json(out);
  }
  std::cout << fmt::format("attention {}\nconfig {} ({} registers; {})\ncheck: {} -> {}\n",
                           p.to_string(), config.to_string(), attention.stats().registers,
                           config_source, check.describe(), ok ? "PASS" : "FAIL");
  if (o.verb == Verb::Bench)
    std::cout << fmt::format("kjit: median {:.4f} ms over {} runs: {:.1f} TFLOP/s\n", median_ms,
                             repeats, tflops);
}

}  // namespace

nlohmann::json attention_spec(const KernelCommandOptions& options) {
  return tuner::AttentionTuning(problem_from(options)).spec();
}

KJIT_REGISTER_FAMILY("attention", attention_command);

}  // namespace kjit::cli
