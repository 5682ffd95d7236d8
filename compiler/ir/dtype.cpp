#include "kjit/compiler/ir/dtype.h"

namespace kjit::ir {

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "f32";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::I32:
      return "i32";
    case DType::Bool:
      return "bool";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::Bool}) {
    if (name == to_string(d)) return d;
  }
  return std::nullopt;
}

std::string dtype_names() {
  return "f32, f16, bf16, i32, bool";
}

int size_bytes(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return 4;
    case DType::F16:
      return 2;
    case DType::BF16:
      return 2;
    case DType::I32:
      return 4;
    case DType::Bool:
      return 1;
  }
  return 0;
}

bool is_floating(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
}

const char* storage_type(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "float";
    case DType::F16:
      return "kjit::f16";
    case DType::BF16:
      return "kjit::bf16";
    case DType::I32:
      return "int";
    case DType::Bool:
      return "bool";
  }
  return "?";
}

const char* compute_type(DType dtype) {
  if (is_floating(dtype)) return "float";
  return dtype == DType::I32 ? "int" : "bool";
}

namespace {
int rank(DType d) {
  switch (d) {
    case DType::Bool:
      return 0;
    case DType::I32:
      return 1;
    case DType::F16:
      return 2;
    case DType::BF16:
      return 2;
    case DType::F32:
      return 3;
  }
  return 0;
}
}  // namespace

DType promote(DType a, DType b) {
  if (a == b) return a;
  if ((a == DType::F16 && b == DType::BF16) || (a == DType::BF16 && b == DType::F16))
    return DType::F32;
  return rank(a) >= rank(b) ? a : b;
}

const char* npy_descr(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "<f4";
    case DType::F16:
      return "<f2";
    case DType::BF16:
      return "<u2";
    case DType::I32:
      return "<i4";
    case DType::Bool:
      return "|b1";
  }
  return "";
}

}  // namespace kjit::ir
