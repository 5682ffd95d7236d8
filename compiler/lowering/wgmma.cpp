#include "kjit/compiler/lowering/wgmma.h"

#include <fmt/format.h>

#include <algorithm>

namespace kjit {

std::string wgmma_struct(const WgmmaInstruction& w) {
  const int acc = w.n / 2;  // 64 x N fp32 over 128 threads
  const bool tf32 = w.type == "tf32";
  // Operands after the accumulators: A (1 descriptor or 4 registers), B, then the
  // accumulate flag.
  const int a_operands = w.a_in_registers ? 4 : 1;
  const int b_index = acc + a_operands;
  const int flag_index = b_index + 1;
  std::string s = "struct " + w.name + " {\n";
  s += fmt::format("  __device__ __forceinline__ static void run(float (&d)[{}], {},\n", acc,
                   w.a_in_registers ? "const unsigned (&a)[4]" : "unsigned long long a");
  s += fmt::format("                                             unsigned long long b{}) {{\n",
                   w.accumulate_argument ? ", int accumulate" : "");
  s += "    asm volatile(\n";
  s += "        \"{ .reg .pred p;\\n\"\n";
  s += fmt::format("        \"  setp.ne.b32 p, %{}, 0;\\n\"\n", flag_index);
  s += fmt::format("        \"  wgmma.mma_async.sync.aligned.m64n{}k{}.f32.{}.{}\"\n", w.n, w.k,
                   w.type, w.type);
  for (int i = 0; i < acc; i += 16) {
    std::string line;
    for (int j = i; j < std::min(acc, i + 16); ++j)
      line += fmt::format("%{}{}", j, j + 1 < acc ? ", " : "");
    s += fmt::format("        \"{}{}\"\n", i == 0 ? " {" : " ", line);
  }
  const std::string a_text =
      w.a_in_registers ? fmt::format("{{%{}, %{}, %{}, %{}}}", acc, acc + 1, acc + 2, acc + 3)
                       : fmt::format("%{}", acc);
  if (tf32)
    s += fmt::format("        \"}}, {}, %{}, p, 1, 1; }}\\n\"\n", a_text, b_index);
  else if (w.a_in_registers)  // no transpose of a register operand
    s += fmt::format("        \"}}, {}, %{}, p, 1, 1, {}; }}\\n\"\n", a_text, b_index,
                     w.transpose_b);
  else
    s += fmt::format("        \"}}, {}, %{}, p, 1, 1, {}, {}; }}\\n\"\n", a_text, b_index,
                     w.transpose_a, w.transpose_b);
  for (int i = 0; i < acc; i += 8) {
    std::string line;
    for (int j = i; j < std::min(acc, i + 8); ++j)
      line += fmt::format("\"+f\"(d[{}]){}", j, j + 1 < acc ? ", " : "");
    s += fmt::format("        {}{}\n", i == 0 ? ": " : "  ", line);
  }
  const std::string a_inputs =
      w.a_in_registers ? "\"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3])" : "\"l\"(a)";
  s += fmt::format("        : {}, \"l\"(b), \"r\"({}));\n", a_inputs,
                   w.accumulate_argument ? "accumulate" : "1");
  s += "  }\n};\n\n";
  return s;
}

}  // namespace kjit
