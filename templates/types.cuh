// kjit/types.cuh — storage types and conversions for generated kernels.
//
// NVRTC ships no <cuda_fp16.h> or <cuda_bf16.h>, and kjit never needs the
// toolkit's headers at run time, so the 16-bit float types are defined here: a
// 16-bit payload plus conversions written as single PTX instructions. Arithmetic
// is always done in fp32 (the "low precision storage, fp32 math" idea); these
// types only load, store and convert.
#pragma once

namespace kjit {

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

// Select<C, A, B>::type is A when C holds, else B (NVRTC has no <type_traits>).
template <bool C, typename A, typename B>
struct Select {
  typedef A type;
};
template <typename A, typename B>
struct Select<false, A, B> {
  typedef B type;
};

// IEEE half: 1 sign, 5 exponent, 10 mantissa bits.
struct __align__(2) f16 {
  u16 bits;
};
// bfloat16: the top half of an fp32 (1 sign, 8 exponent, 7 mantissa bits).
struct __align__(2) bf16 {
  u16 bits;
};

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(f16 x) {
  float out;
  asm("cvt.f32.f16 %0, %1;" : "=f"(out) : "h"(x.bits));
  return out;
}
__device__ __forceinline__ float to_f32(bf16 x) {
  // Widening bf16 is exact: put the 16 bits on top of an fp32.
  return __uint_as_float(static_cast<u32>(x.bits) << 16);
}
__device__ __forceinline__ float to_f32(int x) {
  return static_cast<float>(x);
}
__device__ __forceinline__ float to_f32(bool x) {
  return x ? 1.0f : 0.0f;
}

// Narrowing: round to nearest even, the one rounding step of a kernel.
template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ f16 from_f32<f16>(float x) {
  f16 out;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(out.bits) : "f"(x));
  return out;
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) {
  bf16 out;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(out.bits) : "f"(x));
  return out;
}
template <>
__device__ __forceinline__ int from_f32<int>(float x) {
  return static_cast<int>(x);
}
template <>
__device__ __forceinline__ bool from_f32<bool>(float x) {
  return x != 0.0f;
}

// Rounds an f32 value to the precision of T and back: a cast inside an expression
// (an elementwise chain, a matmul epilogue, an attention modifier).
template <typename T>
__device__ __forceinline__ float round_through(float x) {
  return to_f32(from_f32<T>(x));
}

// Two fp32 values packed into one 32-bit register of two 16-bit floats (low = a).
__device__ __forceinline__ u32 pack_bf16x2(float a, float b) {
  u32 out;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(b), "f"(a));
  return out;
}
__device__ __forceinline__ u32 pack_f16x2(float a, float b) {
  u32 out;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(b), "f"(a));
  return out;
}

}  // namespace kjit
