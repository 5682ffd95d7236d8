// Host-side 16-bit float conversions (round to nearest even), matching the
// device's cvt.rn.{f16,bf16}.f32. Used by the CPU reference, .npy I/O and tests.
#pragma once

#include <cstdint>
#include <cstring>

namespace kjit {

inline uint32_t float_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
inline float bits_float(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

inline uint16_t f32_to_bf16(float x) {
  uint32_t b = float_bits(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40);  // quiet NaN
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}
inline float bf16_to_f32(uint16_t h) {
  return bits_float(static_cast<uint32_t>(h) << 16);
}

inline uint16_t f32_to_f16(float x) {
  uint32_t b = float_bits(x);
  uint32_t sign = (b >> 16) & 0x8000u;
  uint32_t magnitude = b & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (magnitude < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    if (magnitude < 0x33000000u) return static_cast<uint16_t>(sign);  // rounds to zero
    uint32_t exponent = magnitude >> 23;
    uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exponent;  // 14..24
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);
    // Subnormal: value = mantissa * 2^-24.
    float value = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -value : value;
  }
  if (exponent == 31) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

}  // namespace kjit
