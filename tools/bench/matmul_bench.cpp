// kjit matmul, untuned and tuned, against cuBLASLt, bf16 in and out, fp32
// accumulation, in one process:
//
//   build/release/tools/bench/matmul_bench [--shapes 4096x4096x4096,...] [--configs "A;B"]
//                                          [--repeats 30] [--rounds 5] [--out results.json]
//                                          [--quick] [--gelu-bias]
//
// For each shape (layout nn, packed, so the alignment class follows N and K):
//   default  the model's choice with its priors (the tuner over an empty store):
//            what kjit runs on a machine where nothing was tuned
//   tuned    the runtime's choice: the store's tuning for this GPU model (else the
//            nearest tuned problem, else the model; the table says which)
//   --configs  more configs to time beside them (e.g. another tune's winners)
//   cuBLASLt with B stored K x N (nn) and N x K (nt); the faster is the peer
// --gelu-bias: every variant computes gelu(acc + bias) (bias a bf16 vector over N):
//   kjit's fused epilogue (erf gelu) against cuBLASLt's (CUBLASLT_EPILOGUE_GELU_BIAS,
//   tanh gelu), and beside them kjit's tuned config and cuBLASLt nn without the
//   epilogue, so each side's cost of the fused gelu is measured in the same rounds
// Every kjit config is checked against cuBLAS first (relative L2 <= 1e-2). Timing:
// the project's one timer (tuner/timer.h): L2 flushed before every run, all
// variants of a shape in interleaved rounds (--rounds, 5; each variant runs
// repeats / rounds times in a row a round: --rounds equal to --repeats alternates
// the variants run by run, as the tuner's finals do), median and 95% interval.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "kjit/compiler/lowering/matmul_epilogue.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/stream.h"
#include "kjit/runtime/matmul.h"
#include "kjit/runtime/matmul_check.h"
#include "kjit/support/half.h"
#include "kjit/tuner/check.h"
#include "kjit/tuner/matmul_space.h"
#include "kjit/tuner/timer.h"
#include "tools/cli/command.h"
#include "tools/cli/cublaslt_peer.h"

namespace kjit {
namespace {

using namespace kjit::matmul;

struct Options {
  std::string out;
  std::vector<std::array<int64_t, 3>> shapes;
  std::vector<std::string> configs;
  int repeats = 30;
  int rounds = 5;
  bool gelu_bias = false;
};

// The benchmark shapes of the tuner issue (bf16 nn).
const std::vector<std::array<int64_t, 3>> kShapes = {
    {4096, 4096, 4096}, {8192, 8192, 8192}, {3072, 3072, 4096}, {4096, 11008, 4096},
    {16, 4096, 4096},   {4096, 128, 16384}, {32000, 4096, 768}, {2048, 50257, 768}};

// Uniform bf16 values in [-1, 1) from a fast generator (8192^2 operands).
std::vector<uint16_t> random_bf16(size_t count, uint64_t seed) {
  std::vector<uint16_t> out(count);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < count; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = f32_to_bf16(static_cast<float>((x >> 40) & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f);
  }
  return out;
}

std::vector<double> download(const cuda::DeviceBuffer& buffer, size_t count) {
  std::vector<unsigned char> bytes(count * 2);
  buffer.download(bytes.data(), bytes.size());
  return to_doubles(DType::BF16, bytes, count);
}

struct Variant {
  std::string label;   // "default", "tuned (store)", "config", "cuBLASLt nn"...
  std::string config;  // kjit's, or "" for cuBLAS
  std::unique_ptr<Matmul> matmul;
  bool transposed_b = false;  // cuBLAS nt
  bool plain = false;         // --gelu-bias: this one without the epilogue
  double check = 0;
  std::string error;
  tuner::Summary time;
};

void run(const Options& options) {
  std::string reason;
  if (!cli::gpu_available(&reason)) throw std::runtime_error("no GPU: " + reason);
  Runtime runtime;  // device 0: kernels through its map and store; configs from its tuner
  const cuda::DeviceProperties& device = runtime.device();
  tuner::Chooser untuned(cache::Store::disabled("the default: nothing tuned"), runtime.gpu_model(),
                         device);
  // Each cuBLASLt handle keeps one plan; the run holds one per layout and epilogue.
  auto load_peer = [&reason] {
    std::unique_ptr<cli::CublasLtPeer> peer = cli::CublasLtPeer::load(&reason);
    if (!peer) throw std::runtime_error("cuBLASLt: " + reason);
    return peer;
  };
  std::unique_ptr<cli::CublasLtPeer> cublas = load_peer();
  cuda::Stream stream;
  tuner::TimerOptions timer_options;
  timer_options.rounds = options.rounds;
  timer_options.runs_per_round = std::max(1, options.repeats / options.rounds);
  timer_options.hopeless = 0;  // time every variant fully
  tuner::Timer timer(stream.get(), device.l2_bytes, timer_options);
  std::cout << fmt::format("{} ({} SMs)\n", device.name, device.sm_count);

  nlohmann::json results = nlohmann::json::array();
  std::vector<std::string> table;
  for (const auto& [m, n, k] : options.shapes) {
    Problem p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.aligned = tuner::packed_operands_aligned(p);
    const std::string epilogue_ir = options.gelu_bias ? "gelu(acc + bias)" : "";
    Problem plain = p;
    if (options.gelu_bias) p.epilogue = epilogue_from_ir(epilogue_ir, DType::BF16).epilogue;
    const std::string name = fmt::format("{}x{}x{}", m, n, k);
    const double flops = 2.0 * m * n * k;
    auto tflops = [&](double ms) { return ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0; };

    const std::vector<uint16_t> host_a = random_bf16(static_cast<size_t>(m * k), m + 1);
    const std::vector<uint16_t> host_b = random_bf16(static_cast<size_t>(k * n), n + 2);
    std::vector<uint16_t> host_bt(host_b.size());  // N x K for cuBLAS nt
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t nn = 0; nn < n; ++nn) host_bt[nn * k + kk] = host_b[kk * n + nn];
    cuda::DeviceBuffer a = cuda::DeviceBuffer::from(host_a), b = cuda::DeviceBuffer::from(host_b),
                       bt = cuda::DeviceBuffer::from(host_bt);
    const size_t out_count = static_cast<size_t>(m * n);
    cuda::DeviceBuffer c(out_count * 2), c_ref(out_count * 2);
    // --gelu-bias: the bias, and the plain product's reference for the plain variants.
    cuda::DeviceBuffer bias = cuda::DeviceBuffer::from(random_bf16(static_cast<size_t>(n), n + 3));
    std::optional<cuda::DeviceBuffer> c_plain;
    const CUdeviceptr gelu_bias = options.gelu_bias ? bias.get() : 0;

    std::vector<Variant> variants;
    const tuner::MatmulTuning tuning(p, epilogue_ir);
    const tuner::Choice chosen = runtime.chooser().choose(tuning);
    const std::string gelu_label = options.gelu_bias ? " gelu" : "";
    variants.push_back({"default (model)", untuned.choose(tuning).config});
    variants.push_back(
        {std::string("tuned (") + tuner::to_string(chosen.source) + ")", chosen.config});
    for (const std::string& config : options.configs)
      variants.push_back({"config", tuning.canonical(config)});
    if (options.gelu_bias) {
      const tuner::MatmulTuning plain_tuning(plain);
      variants.push_back({"tuned, no epilogue", runtime.chooser().choose(plain_tuning).config,
                          nullptr, false, true});
      variants.push_back({"cuBLASLt nn, none", "", nullptr, false, true});
    }
    variants.push_back({"cuBLASLt" + gelu_label + " nn", ""});
    variants.push_back({"cuBLASLt" + gelu_label + " nt", "", nullptr, true});

    Problem plan_nn = plain, plan_nt = plain;
    plan_nt.b_transposed = true;
    // The references: cuBLAS nn, with the epilogue and (--gelu-bias) without it.
    std::vector<double> plain_reference;
    if (options.gelu_bias) {
      c_plain.emplace(out_count * 2);
      cublas->plan(plan_nn);
      cublas->run(a.get(), b.get(), c_plain->get(), stream.get());
      stream.synchronize();
      plain_reference = download(*c_plain, out_count);
    }
    cublas->plan(plan_nn, 0, 0, 0, gelu_bias);
    cublas->run(a.get(), b.get(), c_ref.get(), stream.get());
    stream.synchronize();
    const std::vector<double> reference = download(c_ref, out_count);
    Tensors t;
    t.a = a.get();
    t.b = b.get();
    t.c = c.get();
    Tensors t_plain = t;
    if (options.gelu_bias) t.extras = {{bias.get()}};
    for (Variant& v : variants) {
      if (v.config.empty()) continue;
      try {
        v.matmul = std::make_unique<Matmul>(runtime, v.plain ? plain : p, Config::parse(v.config));
        c.fill_bytes(0xFF);
        v.matmul->launch(v.plain ? t_plain : t, stream.get());
        stream.synchronize();
        // kjit's erf gelu against cuBLASLt's tanh gelu: they differ by < 1e-3 of the
        // values, far inside the bound.
        v.check = tuner::relative_l2(download(c, out_count), v.plain ? plain_reference : reference);
        if (!(v.check <= 1e-2))
          v.error = fmt::format("WRONG: relative L2 vs cuBLAS {:.3e}", v.check);
      } catch (const std::exception& e) {
        v.error = e.what();
      }
      if (!v.error.empty()) v.matmul.reset();
    }
    // Everything in interleaved rounds. cuBLAS needs its plan per layout: plan in the
    // work item when the layout changes (a host-side call, outside the timed events
    // only when consecutive runs use the same layout; the plans are kept per layout).
    auto peer_nn = load_peer(), peer_nt = load_peer();
    peer_nn->plan(plan_nn, 0, 0, 0, gelu_bias);
    peer_nt->plan(plan_nt, 0, 0, 0, gelu_bias);
    auto peer_plain = options.gelu_bias ? load_peer() : nullptr;
    if (peer_plain) peer_plain->plan(plan_nn);
    std::vector<tuner::Timer::Work> works;
    std::vector<Variant*> timed;
    for (Variant& v : variants) {
      if (!v.error.empty()) continue;
      if (v.matmul) {
        Matmul* mm = v.matmul.get();
        const Tensors* tensors = v.plain ? &t_plain : &t;
        works.push_back([mm, tensors, &stream](int) { mm->launch(*tensors, stream.get()); });
      } else {
        cli::CublasLtPeer* peer = v.plain          ? peer_plain.get()
                                  : v.transposed_b ? peer_nt.get()
                                                   : peer_nn.get();
        const CUdeviceptr operand = v.transposed_b ? bt.get() : b.get();
        works.push_back([peer, operand, &a, &c_ref, &stream](int) {
          peer->run(a.get(), operand, c_ref.get(), stream.get());
        });
      }
      timed.push_back(&v);
    }
    const std::vector<tuner::Timer::Result> times = timer.interleaved(works);
    for (size_t i = 0; i < timed.size(); ++i) timed[i]->time = times[i].summary;

    // The variants by what they are, not by their place in the list.
    auto find_variant = [&](auto is) -> const Variant& {
      return *std::find_if(variants.begin(), variants.end(), is);
    };
    const Variant& dflt = variants[0];
    const Variant& tuned = variants[1];
    const Variant& nn = find_variant(
        [](const Variant& v) { return v.config.empty() && !v.plain && !v.transposed_b; });
    const Variant& nt = find_variant([](const Variant& v) { return v.transposed_b; });
    const double peer_ms = std::min(nn.time.median_ms, nt.time.median_ms);
    nlohmann::json rows = nlohmann::json::array();
    std::cout << fmt::format("\n== {}{} (bf16 nn, alignment class {}) ==\n", name,
                             options.gelu_bias ? ", gelu(acc + bias)" : "", p.aligned ? 16 : 1);
    for (const Variant& v : variants) {
      std::cout << fmt::format(
          "  {:<18} {:<64} {}\n", v.label, v.config,
          v.error.empty()
              ? fmt::format("{} {:7.1f} TFLOP/s", v.time.to_string(), tflops(v.time.median_ms))
              : v.error);
      rows.push_back({{"label", v.label},
                      {"config", v.config},
                      {"median_ms", v.time.median_ms},
                      {"low_ms", v.time.low_ms},
                      {"high_ms", v.time.high_ms},
                      {"tflops", tflops(v.time.median_ms)},
                      {"check_rel_l2", v.check},
                      {"error", v.error}});
    }
    nlohmann::json costs;
    if (options.gelu_bias) {
      // What the fused gelu costs each side: time with it over time without it.
      const Variant& kjit_plain =
          find_variant([](const Variant& v) { return v.plain && !v.config.empty(); });
      const Variant& cublas_plain =
          find_variant([](const Variant& v) { return v.plain && v.config.empty(); });
      auto cost = [](const Variant& with, const Variant& without) {
        return with.time.median_ms > 0 && without.time.median_ms > 0
                   ? with.time.median_ms / without.time.median_ms - 1.0
                   : std::nan("");
      };
      const double kjit_cost = cost(tuned, kjit_plain), cublas_cost = cost(nn, cublas_plain);
      std::cout << fmt::format(
          "  the fused gelu costs kjit (tuned) {:+.1f}% over its tuned config without it, "
          "cuBLASLt nn {:+.1f}%\n",
          100 * kjit_cost, 100 * cublas_cost);
      costs = {{"epilogue", epilogue_ir},
               {"kjit_epilogue_cost", kjit_cost},
               {"cublas_epilogue_cost", cublas_cost}};
    }
    results.push_back({{"shape", name},
                       {"m", m},
                       {"n", n},
                       {"k", k},
                       {"alignment", p.aligned ? 16 : 1},
                       {"tuned_source", tuner::to_string(chosen.source)},
                       {"cublas_ms", peer_ms},
                       {"cublas_layout", nn.time.median_ms <= nt.time.median_ms ? "nn" : "nt"},
                       {"default_vs_cublas", peer_ms / dflt.time.median_ms},
                       {"tuned_vs_cublas", peer_ms / tuned.time.median_ms},
                       {"tuned_vs_default", dflt.time.median_ms / tuned.time.median_ms},
                       {"variants", rows}});
    if (!costs.is_null()) results.back().update(costs);
    table.push_back(fmt::format("{:<18} {:>8.1f} {:>8.1f} {:>8.1f} {:>7.2f}x {:>7.2f}x  {:<8} {}",
                                name, tflops(dflt.time.median_ms), tflops(tuned.time.median_ms),
                                tflops(peer_ms), peer_ms / dflt.time.median_ms,
                                peer_ms / tuned.time.median_ms, tuner::to_string(chosen.source),
                                tuned.config));
  }
  std::cout << fmt::format("\n{:<18} {:>8} {:>8} {:>8} {:>8} {:>8}  {:<8} {}\n", "shape", "default",
                           "tuned", "cuBLASLt", "dflt/cB", "tuned/cB", "from",
                           "tuned config (TFLOP/s; ratios of time, peer = faster cuBLASLt layout)");
  for (const std::string& line : table) std::cout << line << "\n";
  if (!options.out.empty()) {
    const nlohmann::json doc = {{"device", device.name},
                                {"gpu_model", runtime.gpu_model()},
                                {"sm_count", device.sm_count},
                                {"repeats", options.repeats},
                                {"results", results}};
    std::ofstream(options.out) << doc.dump(2) << "\n";
    std::cout << "wrote " << options.out << "\n";
  }
}

std::vector<std::array<int64_t, 3>> parse_shapes(const std::string& text) {
  std::vector<std::array<int64_t, 3>> out;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    std::array<int64_t, 3> s{};
    if (std::sscanf(item.c_str(), "%ldx%ldx%ld", &s[0], &s[1], &s[2]) != 3 || s[0] < 1 ||
        s[1] < 1 || s[2] < 1)
      throw std::runtime_error("--shapes: '" + item + "' is not MxNxK");
    out.push_back(s);
  }
  return out;
}

}  // namespace
}  // namespace kjit

int main(int argc, char** argv) {
  kjit::Options options;
  options.shapes = kjit::kShapes;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--out" && i + 1 < argc) {
        options.out = argv[++i];
      } else if (arg == "--repeats" && i + 1 < argc) {
        options.repeats = std::max(5, std::atoi(argv[++i]));
      } else if (arg == "--rounds" && i + 1 < argc) {
        options.rounds = std::atoi(argv[++i]);
        if (options.rounds < 1 || options.rounds > 1000)
          throw std::runtime_error(std::string("--rounds: '") + argv[i] +
                                   "' is not a count of rounds from 1 to 1000");
      } else if (arg == "--shapes" && i + 1 < argc) {
        options.shapes = kjit::parse_shapes(argv[++i]);
      } else if (arg == "--configs" && i + 1 < argc) {
        std::stringstream list(argv[++i]);
        for (std::string c; std::getline(list, c, ';');)
          if (!c.empty()) options.configs.push_back(c);
      } else if (arg == "--gelu-bias") {
        options.gelu_bias = true;
      } else if (arg == "--quick") {
        options.shapes = {{1024, 1024, 1024}, {1023, 1023, 1023}};
      } else if (arg == "--help" || arg == "-h") {
        std::cout << "usage: matmul_bench [--shapes MxNxK,...] [--configs \"A;B\"] [--repeats N] "
                     "[--rounds R] [--out results.json] [--quick] [--gelu-bias]\n";
        return 0;
      } else {
        std::cerr << "usage: matmul_bench [--shapes MxNxK,...] [--configs \"A;B\"] [--repeats N] "
                     "[--rounds R] [--out results.json] [--quick] [--gelu-bias]\n";
        return 2;
      }
    }
    kjit::run(options);
  } catch (const std::exception& e) {
    std::cerr << "matmul_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
