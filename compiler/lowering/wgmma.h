// The inline-asm wrapper of one wgmma instruction (Hopper's warpgroup matrix
// multiply), generated per shape because its register list grows with N: the
// matmul's main loop and both products of the attention kernel use it.
//
//   WgmmaInstruction w{.name = "kjit_wgmma", .n = 128, .k = 16, .type = "bf16"};
//   std::string s = wgmma_struct(w);
//   // struct kjit_wgmma { static void run(float (&d)[64], u64 a, u64 b); };
#pragma once

#include <string>

namespace kjit {

struct WgmmaInstruction {
  std::string name;             // the struct's name
  int n = 128;                  // m64nNkK: N in [8, 256], a multiple of 8
  int k = 16;                   // 16 for 16-bit types, 8 for tf32
  std::string type;             // "bf16", "f16" or "tf32" (both operands)
  bool a_in_registers = false;  // A as four 32-bit registers (the mma.sync A fragment per warp)
  int transpose_a = 0;          // 1: A is MN-major in shared memory (16-bit types only)
  int transpose_b = 0;          // 1: B is MN-major (16-bit types only)
  // The accumulate flag as an argument (0 on a first k step: D = A B, no zeroing
  // needed); otherwise the wrapper always adds to D.
  bool accumulate_argument = false;
};

// "struct NAME { __device__ static void run(float (&d)[N / 2], <A>, unsigned long
// long b[, int accumulate]); };" where <A> is "unsigned long long a" (a descriptor)
// or "const unsigned (&a)[4]" (registers). tf32 has no transpose operands.
std::string wgmma_struct(const WgmmaInstruction& instruction);

}  // namespace kjit
