// `kjit emit|compile|run|bench WHAT ...` — WHAT is an elementwise expression
// ("y = sin(x)^2 + cos(x)^2") or the name of a kernel family ("matmul"). The four
// verbs share one option set; a family registers a handler for its name and
// reads the options that concern it.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace kjit::cli {

enum class Verb { Emit, Compile, Run, Bench, Explain, Tune };
const char* to_string(Verb verb);

struct KernelCommandOptions {
  Verb verb = Verb::Emit;
  std::string what;    // expression, or a family name such as "matmul"
  std::string file;    // -f FILE: read the expression from FILE (WHAT is then absent)
  std::string dtype;   // empty: the family's default
  std::string config;  // "key=value,key=value"; empty: the tuner's choice
  std::string arch;    // empty: the GPU's, else sm_90
  std::string gpu;     // plan for this GPU instead (h200, h100, a100): no GPU needed
  bool json = false;
  bool ptx = false;        // compile: print PTX
  bool templates = false;  // emit: also print the templates the source includes
  // Sizes. Elementwise: --n is the element count. Matmul: M, N, K, batch.
  int64_t m = 0, n = 0, k = 0, batch = 1;
  std::string layout = "nn";  // matmul: op(A) op(B), n = row-major as given, t = transposed
  std::string epilogue;       // matmul: elementwise IR over acc and extra operands
  // Matmul run/bench: leading dimensions of the stored A, B, C (0: packed rows).
  int64_t lda = 0, ldb = 0, ldc = 0;
  // Attention: heads (0: 1), K/V heads (0: heads), sequence lengths (seq_k 0:
  // seq_q), head dim, masks ("L:R", each side keys or "inf"), softmax scale (0: 1/sqrt(D)).
  int64_t heads = 0, kv_heads = 0, seq_q = 0, seq_k = 0;
  int head_dim = 128;
  bool causal = false;
  bool backward = false;       // attention: the backward pass (dQ, dK, dV)
  bool deterministic = false;  // attention --backward: the same bits every run
  std::string window;
  double scale = 0;
  std::string seqlens_q, seqlens_k;  // packed variable-length batches: "1,7,300,2049"
  std::string score_mod, mask_mod;   // attention modifiers in kjit's IR
  std::vector<std::string> inputs;   // run: name=path.npy
  std::vector<std::string> outputs;  // run: name=path.npy
  int repeats = 0;                   // bench: timed runs (0: the default)
  // The options given on the command line ("--epilogue", ...), so that one that
  // does not apply to WHAT or to the verb is an error rather than ignored.
  std::set<std::string> given;
};

using FamilyHandler = void (*)(const KernelCommandOptions& options);
bool register_family(const char* name, FamilyHandler handler);
// The handler registered for `name`, or nullptr (then `what` is an expression).
FamilyHandler find_family(const std::string& name);

#define KJIT_REGISTER_FAMILY(name, handler) \
  static const bool kjit_family_registered_##handler = ::kjit::cli::register_family(name, handler)

}  // namespace kjit::cli
