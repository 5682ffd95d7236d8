// Element types of the IR. Storage may be 16-bit; arithmetic on f16/bf16 is done
// in f32 (one rounding at the store), so every floating dtype computes as `float`.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kjit::ir {

enum class DType { F32, F16, BF16, I32, Bool };

// "f32", "f16", "bf16", "i32", "bool".
const char* to_string(DType dtype);
// Parses a name above; nullopt when unknown.
std::optional<DType> parse_dtype(std::string_view name);
// Every dtype name, for messages ("f32, f16, bf16, i32, bool").
std::string dtype_names();

int size_bytes(DType dtype);
bool is_floating(DType dtype);
// The CUDA type that holds one element in memory ("kjit::bf16", "float", ...).
const char* storage_type(DType dtype);
// The CUDA type a value of this dtype is computed in: float, int or bool.
const char* compute_type(DType dtype);
// The .npy descriptor of a dtype's storage ("<f4", "<f2", "<u2" for bf16's raw
// bits, since NumPy has no bf16, "<i4", "|b1").
const char* npy_descr(DType dtype);
// The result of mixing two dtypes in arithmetic: bool < i32 < {f16, bf16} < f32,
// and f16 with bf16 gives f32 (neither holds the other).
DType promote(DType a, DType b);

}  // namespace kjit::ir
