// Cases for the host emulation test: expression, inputs (shape, strides in
// elements, pointer offset in elements), output shape, alignment class (0 auto,
// 1 aligned, 2 unaligned) and config.
#pragma once
#include <map>
#include <string>
#include <vector>
struct EmuInput {
  std::string name;
  std::vector<long long> shape;
  std::vector<long long> strides;
  long long offset;
};
struct EmuCase {
  std::string text;
  std::vector<EmuInput> inputs;
  std::vector<long long> out_shape;
  int alignment;
  std::string config;
};
// alignment: 0 auto, 1 aligned, 2 unaligned
inline std::vector<EmuCase> emu_cases() {
  return {
      {"y = sin(x)^2 + cos(x)^2", {{"x", {4096}, {}, 0}}, {4096}, 1, ""},
      {"y = sin(x)^2 + cos(x)^2", {{"x", {1001}, {}, 0}}, {1001}, 2, ""},
      {"y = sin(x)^2 + cos(x)^2", {{"x", {4096}, {}, 1}}, {4096}, 2, ""},
      {"x:bf16[n]; g:bf16[n]; y = x * sigmoid(x) * g",
       {{"x", {8192}, {}, 0}, {"g", {8192}, {}, 0}},
       {8192},
       1,
       ""},
      {"x:bf16[n]; g:bf16[n]; y = x * sigmoid(x) * g",
       {{"x", {8192}, {}, 0}, {"g", {8192}, {}, 0}},
       {8192},
       1,
       "vec=16,unroll=2"},
      {"x:bf16[n]; g:bf16[n]; y = x * sigmoid(x) * g",
       {{"x", {8191}, {}, 0}, {"g", {8191}, {}, 0}},
       {8191},
       2,
       ""},
      {"x:f32[m,n]; b:bf16[n]; c:f16[m,1]; s:f32[]; y = gelu(x * b + c) - s; z = x > s",
       {{"x", {37, 1000}, {}, 0}, {"b", {1000}, {}, 0}, {"c", {37, 1}, {}, 0}, {"s", {}, {}, 0}},
       {37, 1000},
       1,
       ""},
      {"x:f32[m,n]; b:bf16[n]; c:f16[m,1]; s:f32[]; y = gelu(x * b + c) - s; z = x > s",
       {{"x", {37, 7}, {}, 0}, {"b", {7}, {}, 0}, {"c", {37, 1}, {}, 0}, {"s", {}, {}, 0}},
       {37, 7},
       2,
       ""},
      {"x:bf16[m,n]; w:f32[m,n]; y = x * sigmoid(w)",
       {{"x", {33, 77}, {1, 36}, 1}, {"w", {33, 77}, {82, 1}, 0}},
       {33, 77},
       0,
       ""},
      {"x:bf16[m,n]; w:f32[m,n]; y = x * sigmoid(w)",
       {{"x", {64, 1024}, {1, 64}, 0}, {"w", {64, 1024}, {}, 0}},
       {64, 1024},
       1,
       ""},
      {"x:bf16[n]; g:f32[n]; i:i32[n]; k:bool[n]; a = sin(x); b = cos(x) * g; c = x > 0; d = i * 3 "
       "- 1; e = cast(g, f16); f = where(k, x, g)",
       {{"x", {1040}, {}, 0}, {"g", {1040}, {}, 0}, {"i", {1040}, {}, 0}, {"k", {1040}, {}, 0}},
       {1040},
       1,
       ""},
      {"x:bf16[n]; g:f32[n]; i:i32[n]; k:bool[n]; a = sin(x); b = cos(x) * g; c = x > 0; d = i * 3 "
       "- 1; e = cast(g, f16); f = where(k, x, g)",
       {{"x", {1021}, {}, 0}, {"g", {1021}, {}, 0}, {"i", {1021}, {}, 0}, {"k", {1021}, {}, 0}},
       {1021},
       2,
       ""},
      {"i:i32[n]; y = cast(x * 4, i32) + i; z = cast(x, bool); w = cast(i, bf16) / 3",
       {{"i", {64}, {}, 0}, {"x", {64}, {}, 0}},
       {64},
       0,
       ""},
      {"y = x + 1.0", {{"x", {1}, {}, 0}}, {1}, 0, ""},
      // Software pipelining: the next iteration's loads before this one's math.
      {"y = sin(x)^2 + cos(x)^2", {{"x", {4096}, {}, 0}}, {4096}, 1, "prefetch=1"},
      {"y = sin(x)^2 + cos(x)^2", {{"x", {1001}, {}, 0}}, {1001}, 2, "prefetch=1,unroll=3"},
      {"x:f32[m,n]; b:bf16[n]; c:f16[m,1]; s:f32[]; y = gelu(x * b + c) - s; z = x > s",
       {{"x", {37, 1000}, {}, 0}, {"b", {1000}, {}, 0}, {"c", {37, 1}, {}, 0}, {"s", {}, {}, 0}},
       {37, 1000},
       1,
       "prefetch=1"},
      {"x:bf16[m,n]; w:f32[m,n]; y = x * sigmoid(w)",
       {{"x", {33, 77}, {1, 36}, 1}, {"w", {33, 77}, {82, 1}, 0}},
       {33, 77},
       0,
       "prefetch=1,unroll=1"},
  };
}
