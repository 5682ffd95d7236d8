// Host stand-in for kjit/types.cuh: lets generated kernels compile as plain C++ so
// tests/unit/emulation can run them on the CPU, one thread at a time, without a GPU.
// The 16-bit conversions are support/half.h's (the same rounding as cvt.rn).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include "kjit/support/half.h"
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(x)
#define __noinline__ __attribute__((noinline))
struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline Dim3 blockIdx, threadIdx, gridDim, blockDim;
struct uint4 {
  unsigned x, y, z, w;
};
struct float2 {
  float x, y;
};
struct uint2 {
  unsigned x, y;
};
inline int __float2int_rz(float x) {
  if (std::isnan(x)) return 0;
  if (x >= 2147483647.0f) return 2147483647;
  if (x <= -2147483648.0f) return (-2147483647 - 1);
  return static_cast<int>(x);
}
inline unsigned __float_as_uint(float x) {
  unsigned u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
// The device's fast division: 2 ulps, and 0 for |b| > 2^126 (like the device).
inline float __fdividef(float a, float b) {
  return std::fabs(b) > 0x1p126f ? a * 0.0f : a / b;
}
// st.global.cs on the device; a plain store here.
template <typename T>
inline void __stcs(T* p, T v) {
  *p = v;
}
using std::max;
using std::min;
// Written out: std::fmax may call ::fmaxf, which is this function (unoptimized
// builds recursed forever). NaN loses to a number, as on the device.
inline float fmaxf(float a, float b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  return a > b ? a : b;
}
inline float fminf(float a, float b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  return a < b ? a : b;
}
namespace kjit {
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;
struct f16 {
  u16 bits;
};
struct bf16 {
  u16 bits;
};
inline float to_f32(float x) {
  return x;
}
inline float to_f32(f16 x) {
  return f16_to_f32(x.bits);
}
inline float to_f32(bf16 x) {
  return bf16_to_f32(x.bits);
}
inline float to_f32(int x) {
  return static_cast<float>(x);
}
inline float to_f32(bool x) {
  return x ? 1.0f : 0.0f;
}
template <typename T>
T from_f32(float x);
template <>
inline float from_f32<float>(float x) {
  return x;
}
template <>
inline f16 from_f32<f16>(float x) {
  return f16{f32_to_f16(x)};
}
template <>
inline bf16 from_f32<bf16>(float x) {
  return bf16{f32_to_bf16(x)};
}
template <>
inline int from_f32<int>(float x) {
  return static_cast<int>(x);
}
template <>
inline bool from_f32<bool>(float x) {
  return x != 0.0f;
}
template <typename T>
inline float round_through(float x) {
  return to_f32(from_f32<T>(x));
}
}  // namespace kjit
