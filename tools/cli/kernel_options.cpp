#include "tools/cli/kernel_options.h"

#include <fmt/format.h>

#include <cctype>
#include <exception>
#include <map>
#include <string>
#include <tuple>

#include "kjit/compiler/ir/parser.h"
#include "kjit/support/error.h"
#include "kjit/support/files.h"
#include "kjit/tuner/elementwise_space.h"

namespace kjit::cli {
namespace {

// Sizes and counts: at least 1 when given (not given is 0, the command's default).
const CLI::Validator kAtLeastOne(
    [](std::string& text) -> std::string {
      try {
        size_t used = 0;
        if (std::stoll(text, &used) >= 1 && used == text.size()) return "";
      } catch (const std::exception&) {
      }
      return "must be an integer >= 1, got '" + text + "'";
    },
    ">= 1");

// What reads an option: the elementwise expressions ("elementwise") and/or named
// families; and which verbs (none listed: every verb). An option given where it
// does not apply is an error: silently ignored, `--epilogue` on an expression
// looked like it had been fused.
struct OptionUse {
  const char* name;
  std::vector<std::string> kinds;
  std::vector<Verb> verbs;
};
const std::vector<OptionUse>& option_uses() {
  static const std::vector<OptionUse> uses = {
      {"--m", {"elementwise", "matmul"}, {}},
      {"--n", {"elementwise", "matmul"}, {}},
      {"--k", {"elementwise", "matmul"}, {}},
      {"--epilogue", {"matmul"}, {}},
      {"--layout", {"matmul"}, {}},
      {"--lda", {"matmul"}, {Verb::Run, Verb::Bench}},
      {"--ldb", {"matmul"}, {Verb::Run, Verb::Bench}},
      {"--ldc", {"matmul"}, {Verb::Run, Verb::Bench}},
      {"--batch", {"matmul", "attention"}, {}},
      {"--heads", {"attention"}, {}},
      {"--kv-heads", {"attention"}, {}},
      {"--seq-q", {"attention"}, {}},
      {"--seq-k", {"attention"}, {}},
      {"--head-dim", {"attention"}, {}},
      {"--causal", {"attention"}, {}},
      {"--backward", {"attention"}, {}},
      {"--deterministic", {"attention"}, {}},
      {"--window", {"attention"}, {}},
      {"--scale", {"attention"}, {}},
      {"--seqlens-q", {"attention"}, {}},
      {"--seqlens-k", {"attention"}, {}},
      {"--score-mod", {"attention"}, {}},
      {"--mask-mod", {"attention"}, {}},
      {"--input", {"elementwise"}, {Verb::Run}},
      {"--output", {"elementwise"}, {Verb::Run}},
      {"--repeats", {"elementwise", "matmul", "attention"}, {Verb::Bench}},
      // Planning options: tune measures this machine's GPUs (--gpus picks them) and
      // the configs of its space; run and bench build for the GPU they run on.
      {"--gpu", {"elementwise", "matmul", "attention"}, {Verb::Emit, Verb::Compile, Verb::Explain}},
      {"--arch",
       {"elementwise", "matmul", "attention"},
       {Verb::Emit, Verb::Compile, Verb::Explain}},
      {"--config",
       {"elementwise", "matmul", "attention"},
       {Verb::Emit, Verb::Compile, Verb::Explain, Verb::Run, Verb::Bench}},
  };
  return uses;
}

std::string joined(const std::vector<std::string>& items) {
  return fmt::format("{}", fmt::join(items, ", "));
}

// The symbolic dims of an expression's inputs ("n", "m"), or nothing when it
// does not parse (the handler then reports why).
std::set<std::string> expression_dims(const KernelCommandOptions& o) {
  ir::ParseOptions parse_options;
  if (std::optional<ir::DType> dtype = ir::parse_dtype(o.dtype))
    parse_options.default_dtype = *dtype;
  std::set<std::string> dims;
  try {
    ir::Graph graph = ir::parse(o.what, parse_options);
    for (int id : graph.inputs())
      for (const ir::Dim& dim : graph.node(id).shape)
        if (dim.is_symbolic()) dims.insert(dim.symbol);
  } catch (const UserError&) {
    dims = {"n", "m", "k"};  // no judgement on an expression that does not parse
  }
  return dims;
}

void check_options_apply(const KernelCommandOptions& o, bool is_family) {
  const std::string kind = is_family ? o.what : std::string("elementwise");
  for (const OptionUse& use : option_uses()) {
    if (!o.given.count(use.name)) continue;
    bool kind_reads = false;
    for (const std::string& k : use.kinds) kind_reads = kind_reads || k == kind;
    if (!kind_reads)
      throw UserError(fmt::format("{} does not apply to {}", use.name,
                                  is_family ? o.what : "an elementwise expression"),
                      fmt::format("{} is an option of {}", use.name, joined(use.kinds)));
    bool verb_reads = use.verbs.empty();
    for (Verb verb : use.verbs) verb_reads = verb_reads || verb == o.verb;
    if (!verb_reads) {
      std::vector<std::string> verbs;
      for (Verb verb : use.verbs) verbs.push_back(std::string("kjit ") + to_string(verb));
      throw UserError(fmt::format("{} does not apply to kjit {}", use.name, to_string(o.verb)),
                      fmt::format("{} is an option of {}", use.name, joined(verbs)));
    }
  }
  // An expression's sizes bind its symbolic dims by name: a size for a dim it
  // does not have would be ignored.
  if (!is_family && (o.given.count("--n") || o.given.count("--m") || o.given.count("--k"))) {
    std::set<std::string> dims = expression_dims(o);
    for (const char* dim : {"n", "m", "k"}) {
      if (!o.given.count(std::string("--") + dim) || dims.count(dim)) continue;
      throw UserError(
          fmt::format("--{} does not apply: the expression has no dim named {}", dim, dim),
          dims.empty()
              ? std::string("its shapes are all static")
              : fmt::format("its dims are {}; declare one, e.g. x:f32[{}]",
                            joined(std::vector<std::string>(dims.begin(), dims.end())), dim));
    }
  }
}

}  // namespace

void add_kernel_options(CLI::App* cmd, KernelCommandOptions& o) {
  // Each option records that it was given (see check_options_apply).
  auto noted = [&o](CLI::Option* option, const char* name) {
    return option->each([&o, name](const std::string&) { o.given.insert(name); });
  };
  cmd->add_option("WHAT", o.what,
                  "An elementwise expression (\"y = sin(x)^2 + cos(x)^2\") or a family name "
                  "(matmul, attention)");
  noted(cmd->add_option("-f,--file", o.file,
                        "Read the expression from FILE (WHAT is then not given); for expressions "
                        "longer than one command-line argument may be (128 KiB)")
            ->type_name("FILE"),
        "--file");
  noted(cmd->add_option("--dtype", o.dtype,
                        "Element type: f32, f16, bf16, i32, bool (default f32); matmul: bf16 "
                        "(default), f16, f32 (exact SIMT) or tf32 (f32 data on the tensor cores, "
                        "sm_90; f32 out); attention: bf16 (default) or f16"),
        "--dtype");
  noted(cmd->add_option(
            "--config", o.config,
            "key=value,... Elementwise: block=512,vec=0,unroll=2,prefetch=0|1,"
            "stream=0|1,per_sm=0 (auto),grid=waves|tiles|rows,align=auto|16|1. "
            "Matmul: bm=128,bn=128,bk=32,warps=8,wm=2,stages=3,splitk=1,raster=8,"
            "mma=sync|wgmma,schedule=tile|persistent|pingpong|streamk,load=async|"
            "narrow,pitch=any|line,swap=none|ab. Attention: bm=64,bn=64,stages=2,warp_rows=16 "
            "(mma.sync) or mma=wgmma,bm=128,bn=128,stages=2,pingpong=0|1,"
            "persistent=0|1 (--backward: dq=atomic with bm=64) (no --config: the "
            "tuner's choice: the store's tuning, the nearest tuned problem, or the "
            "model)"),
        "--config");
  noted(cmd->add_option("--arch", o.arch, "Target architecture (default: the GPU's, else sm_90)"),
        "--arch");
  noted(cmd->add_option("--gpu", o.gpu,
                        "Plan for this GPU (h200, h100, a100) from its datasheet instead of GPU 0")
            ->check(CLI::IsMember({"h200", "h100", "a100"})),
        "--gpu");
  cmd->add_flag("--json", o.json, "Print JSON");
  noted(cmd->add_option("--n", o.n, "Elements (elementwise), or N (matmul)")->check(kAtLeastOne),
        "--n");
  noted(cmd->add_option("--m", o.m, "Rows of a 2-D elementwise problem, or M (matmul)")
            ->check(kAtLeastOne),
        "--m");
  noted(cmd->add_option("--k", o.k, "K (matmul), or a dim named k")->check(kAtLeastOne), "--k");
  noted(cmd->add_option("--batch", o.batch, "Batch (matmul, attention)")->check(kAtLeastOne),
        "--batch");
  noted(
      cmd->add_option("--heads", o.heads, "Attention: query heads (default 1)")->check(kAtLeastOne),
      "--heads");
  noted(cmd->add_option("--kv-heads", o.kv_heads,
                        "Attention: K/V heads, dividing --heads (default: --heads; fewer is "
                        "grouped-query attention)")
            ->check(kAtLeastOne),
        "--kv-heads");
  noted(cmd->add_option("--seq-q", o.seq_q, "Attention: query sequence length")->check(kAtLeastOne),
        "--seq-q");
  noted(cmd->add_option("--seq-k", o.seq_k, "Attention: key sequence length (default: --seq-q)")
            ->check(kAtLeastOne),
        "--seq-k");
  noted(cmd->add_option("--head-dim", o.head_dim, "Attention: head dim, 64, 96, 128 or 256")
            ->check(kAtLeastOne),
        "--head-dim");
  noted(cmd->add_flag("--causal", o.causal,
                      "Attention: causal mask (bottom-right aligned when seq-q != seq-k)"),
        "--causal");
  noted(cmd->add_flag("--backward", o.backward,
                      "Attention: the backward pass, dQ, dK and dV from dO (recomputing P from "
                      "the forward's log-sum-exp)"),
        "--backward");
  noted(cmd->add_flag("--deterministic", o.deterministic,
                      "Attention --backward: the same bits on every run (dQ in a kernel of its "
                      "own: the tuner leaves out dq=atomic)"),
        "--deterministic");
  noted(cmd->add_option("--window", o.window,
                        "Attention: sliding window L:R, keys before and after the diagonal a "
                        "query sees (a side may be 'inf'), e.g. 256:0"),
        "--window");
  noted(cmd->add_option("--scale", o.scale, "Attention: softmax scale (default 1/sqrt(head dim))"),
        "--scale");
  noted(cmd->add_option("--seqlens-q", o.seqlens_q,
                        "Attention: a packed batch of sequences of these query lengths, e.g. "
                        "1,7,300,2049 (instead of --batch and --seq-q)"),
        "--seqlens-q");
  noted(cmd->add_option("--seqlens-k", o.seqlens_k,
                        "Attention: their key lengths (default: --seqlens-q)"),
        "--seqlens-k");
  noted(cmd->add_option("--score-mod", o.score_mod,
                        "Attention: score modifier in kjit's IR over s (the scaled score), q_idx, "
                        "kv_idx, head and operands, e.g. 'tanh(s / 50) * 50' or "
                        "'slope:f32[heads]; s - slope * abs(q_idx - kv_idx)'"),
        "--score-mod");
  noted(cmd->add_option("--mask-mod", o.mask_mod,
                        "Attention: mask modifier in kjit's IR over q_idx, kv_idx, head and "
                        "operands; keeps the scores where it is nonzero, e.g. "
                        "'(kv_idx <= q_idx) * (q_idx - kv_idx < 256)'"),
        "--mask-mod");
  noted(cmd->add_option("--layout", o.layout, "Matmul operand layout: nn, nt, tn, tt"), "--layout");
  for (auto [name, value, what] :
       {std::tuple{"--lda", &o.lda, "A"}, {"--ldb", &o.ldb, "B"}, {"--ldc", &o.ldc, "C"}})
    noted(cmd->add_option(name, *value,
                          fmt::format("Matmul run/bench: elements between rows of the stored {} "
                                      "(default: its row length; larger: padded rows)",
                                      what))
              ->check(kAtLeastOne),
          name);
  noted(cmd->add_option("--epilogue", o.epilogue, "Matmul epilogue: elementwise IR over acc, ..."),
        "--epilogue");
  noted(cmd->add_option("--input", o.inputs, "run: NAME=path.npy, an input's values")
            ->allow_extra_args(false)
            ->take_all(),
        "--input");
  noted(cmd->add_option("--output", o.outputs, "run: NAME=path.npy, where to save an output")
            ->allow_extra_args(false)
            ->take_all(),
        "--output");
  noted(
      cmd->add_option("--repeats", o.repeats, "bench: timed runs (default 20)")->check(kAtLeastOne),
      "--repeats");
  // --help lists the options under what reads them (option_uses()): one family's
  // options, or the verbs' that only some verbs read, after the common ones.
  for (const OptionUse& use : option_uses()) {
    CLI::Option* option = cmd->get_option_no_throw(use.name);
    if (option == nullptr) continue;
    if (!use.verbs.empty() && use.verbs.size() < 4) {
      std::vector<std::string> verbs;
      for (Verb verb : use.verbs) verbs.push_back(std::string("kjit ") + to_string(verb));
      option->group("Options of " + joined(verbs));
    } else if (use.kinds.size() == 1 && use.kinds[0] != "elementwise") {
      std::string family = use.kinds[0];
      family[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(family[0])));
      option->group(family + " options");
    }
  }
}

KernelCommandOptions resolved(const KernelCommandOptions& given) {
  KernelCommandOptions options = given;
  if (!options.file.empty()) {
    if (!options.what.empty())
      throw UserError("give WHAT or -f FILE, not both (WHAT is '" + options.what + "')");
    options.what = read_regular_file(options.file, ir::kMaxTextBytes, "expression text");
  } else if (options.what.empty()) {
    throw UserError(
        "WHAT is required: an expression, a family name (matmul, attention), or -f FILE");
  }
  if (options.given.count("--dtype") && options.dtype.empty())
    throw UserError("--dtype is empty", "leave it out for the default, or name a dtype");
  // A --config of separators alone parsed as no keys, that is the fixed defaults: neither
  // what it says nor the tuner's choice that leaving it out gives.
  if (!options.config.empty() && options.config.find_first_not_of(", \t") == std::string::npos)
    throw UserError("--config '" + options.config + "' names no key=value",
                    "leave --config out for the tuner's choice, or give keys, e.g. block=256");
  const bool is_family = options.file.empty() && find_family(options.what) != nullptr;
  check_options_apply(options, is_family);
  return options;
}

void run_kernel_command(const KernelCommandOptions& given) {
  const KernelCommandOptions options = resolved(given);
  FamilyHandler handler = options.file.empty() ? find_family(options.what) : nullptr;
  if (handler) return handler(options);
  run_elementwise_command(options);
}

nlohmann::json problem_spec(const KernelCommandOptions& o) {
  if (o.file.empty() && o.what == "attention") return attention_spec(o);
  if (o.file.empty() && o.what == "matmul") {
    if (o.m < 1 || o.n < 1 || o.k < 1)
      throw UserError("a matmul needs its sizes", "give --m, --n and --k");
    nlohmann::json spec = {{"family", "matmul"},
                           {"m", o.m},
                           {"n", o.n},
                           {"k", o.k},
                           {"batch", o.batch},
                           {"layout", o.layout},
                           {"dtype", o.dtype.empty() ? "bf16" : o.dtype}};
    if (!o.epilogue.empty()) spec["epilogue"] = o.epilogue;
    return spec;
  }
  // The defaults of the other elementwise verbs (tools/cli/elementwise.cpp), for
  // the dims the expression names (a spec's size that names none is refused).
  const std::map<std::string, int64_t> flags = {{"n", o.n > 0 ? o.n : int64_t{1} << 20},
                                                {"m", o.m > 0 ? o.m : 1024},
                                                {"k", o.k > 0 ? o.k : 1}};
  nlohmann::json sizes = nlohmann::json::object();
  for (const std::string& dim : tuner::symbolic_dims(ir::parse(o.what)))
    if (flags.count(dim)) sizes[dim] = flags.at(dim);
  nlohmann::json spec = {{"family", "elementwise"}, {"expr", o.what}, {"sizes", sizes}};
  if (!o.dtype.empty()) spec["dtype"] = o.dtype;
  return spec;
}

}  // namespace kjit::cli
