// Random expression trees in the text form, shared by the GPU test (generated
// kernels against the fp64 reference) and the pass tests (optimize() keeps values).
#pragma once

#include <random>
#include <string>
#include <vector>

namespace kjit::testing {

// Random expression trees over ops that stay finite for any finite operand. No
// floor/ceil and no comparisons of computed values: an f32 result a hair from an
// integer or a tie may round the other way than fp64, a true but unfair failure.
inline std::string random_expression(std::mt19937_64& rng, int depth,
                                     const std::vector<std::string>& leaves) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  if (depth == 0 || pick(4) == 0) {
    if (pick(5) == 0) return std::to_string(pick(7) - 3) + ".5";
    return leaves[static_cast<size_t>(pick(static_cast<int>(leaves.size())))];
  }
  auto sub = [&] { return random_expression(rng, depth - 1, leaves); };
  static const char* unary[] = {"neg",     "abs",  "sin",  "cos",       "tanh",
                                "sigmoid", "relu", "gelu", "gelu_tanh", "silu"};
  static const char* binary[] = {"+", "-", "*", "max", "min"};
  switch (pick(7)) {
    case 0:
    case 1:
      return std::string(unary[pick(10)]) + "(" + sub() + ")";
    case 2: {
      const char* op = binary[pick(5)];
      if (op[0] == '+' || op[0] == '-' || op[0] == '*')
        return "(" + sub() + " " + op + " " + sub() + ")";
      return std::string(op) + "(" + sub() + ", " + sub() + ")";
    }
    case 3:
      return "(" + sub() + " / (abs(" + sub() + ") + 1.0))";
    case 4:
      return "exp(tanh(" + sub() + ")) + log(abs(" + sub() + ") + 1.0) + sqrt(abs(" + sub() + "))";
    case 5: {
      auto leaf = [&] {
        return leaves[static_cast<size_t>(pick(static_cast<int>(leaves.size())))];
      };
      return "where(" + leaf() + " > " + leaf() + ", " + sub() + ", " + sub() + ")";
    }
    default:
      return "fma(" + sub() + ", tanh(" + sub() + "), softplus(" + sub() + "))";
  }
}

}  // namespace kjit::testing
