// Expressions shared by the round-trip and NVRTC corpus tests.
#pragma once

namespace kjit::ir {

// The corpus every round-trip and NVRTC test uses.
inline const char* const kCorpus[] = {
    "y = sin(x)^2 + cos(x)^2",
    "x:bf16[n]; g:bf16[n]; y = x * sigmoid(x) * g",
    "t = x * sigmoid(x); y = t * g",
    "a:f16[n]; b:f16[n]; c:f16[n]; y = a * b + c",
    "y = gelu(x) + gelu_tanh(x) - silu(x) * softplus(x)",
    "y = exp(x) + exp2(x) + log(abs(x) + 1.0) + log2(abs(x) + 2) + sqrt(abs(x)) + rsqrt(abs(x) + "
    "1)",
    "y = tanh(x) + relu(-x) + floor(x) + ceil(x) - max(x, 0.5) * min(x, -0.5)",
    "y = pow(abs(x), 1.5) / (1 + x * x)",
    "y = where(x > 0, x, 0.1 * x); z = x <= 0",
    "y = fma(x, 2.0, -1.0); z = cast(x, bf16); w = cast(x * 10, i32)",
    "i:i32[n]; y = i * 3 + abs(i) - max(i, 2); z = i == 2",
    "x:f32[m,n]; b:f32[n]; c:f32[m,1]; s:f32[]; y = (x + b) * c - s",
    "b:bool[n]; y = select(b, x, -x); z = b != (x > 0)",
    "a = sin(x); b = a * 2\nreturn a, b",
    "y = -x^2 - -3 + x - 2 - 1",
    "y = x\nz = 2.5",
    // cos before sin: one sincos where the cos was (it redeclared the cos's result).
    "y = cos(x) * 2 + sin(x)",
    "i:i32[n]; y = (i + 1) > i; z = -i * i - abs(i)",
};

}  // namespace kjit::ir
