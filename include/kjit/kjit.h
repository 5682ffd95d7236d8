// kjit's C++ API, in one include:
//
//   #include <kjit/kjit.h>           // link kjit::kjit (CMake) or `pkg-config kjit`
//
//   std::string why;
//   if (!kjit::gpu_available(&why)) { ... }          // no driver or no device: why
//   kjit::Runtime runtime;                            // device 0, the per-GPU store
//   kjit::ElementwiseKernel silu(runtime, kjit::ir::parse("y = x * sigmoid(x) * g"));
//   silu.launch(inputs, outputs, stream);             // one fused kernel, asynchronous
//
//   kjit::matmul::Problem p{.m = 4096, .n = 4096, .k = 4096};
//   p.epilogue = kjit::matmul::epilogue_from_ir("gelu(acc + bias)", p.input).epilogue;
//   kjit::matmul::Matmul gemm(runtime, p);            // config from the tuner
//   gemm.launch({.a = a, .b = b, .c = c, .extras = {{bias}}}, stream);
//
//   kjit::attention::Problem a{.batch = 4, .heads = 32, .kv_heads = 8, .seq_q = 4096,
//                              .seq_k = 4096, .head_dim = 128, .causal = true};
//   kjit::attention::Attention attn(runtime, a);       // flash attention, forward
//   attn.launch({.q = q, .k = k, .v = v, .o = o, .lse = lse}, stream);
//
// Every failure is a kjit::Error (support/error.h): UserError for bad input (the
// message says what and how to fix it), CompileError, CudaError, CacheError.
// Diagnostics go through kjit::set_log_sink (support/log.h). examples/ has
// complete programs (C++, C, Python); the README's Embedding section shows how to
// build against the installed package.
#pragma once

#include "kjit/compiler/ir/parser.h"
#include "kjit/compiler/lowering/matmul_epilogue.h"
#include "kjit/runtime/attention.h"
#include "kjit/runtime/cuda/memory.h"
#include "kjit/runtime/cuda/stream.h"
#include "kjit/runtime/elementwise.h"
#include "kjit/runtime/matmul.h"
#include "kjit/runtime/runtime.h"
#include "kjit/runtime/tuning.h"
#include "kjit/support/error.h"
#include "kjit/support/log.h"
