// kjit/math.cuh — f32 sine and cosine for generated kernels, written out.
//
// Why not sinf/cosf? They are accurate, but their argument reduction rounds x * 2/pi
// to an integer with two conversions (F2I, then I2F) that run at a quarter of the
// FMA rate or less, and `sin(x)^2 + cos(x)^2` over 2^28 floats sits right at the
// crossing of the roofline: every instruction saved is overlap gained. The same
// algorithm written with only full-rate instructions:
//
//   1. Reduce: |x| = j * (pi/2) + r with j an integer and |r| <= pi/4. j comes from one
//      FMA against the "magic" constant 1.5 * 2^23, whose addition leaves
//      round(x * 2/pi) in the low mantissa bits (so j's low bits are the quadrant
//      too, no conversion needed). pi/2 is split into three floats c1 + c2 + c3
//      (Cody and Waite) so that x - j * pi/2 keeps ~70 bits of pi/2: x - j*c1 is exact
//      (both are multiples of 2^-23 and the difference is below 1), the next two FMAs
//      add the rest.
//   2. Approximate on [-pi/4, pi/4]: Taylor series, long enough that the first
//      omitted term is below half an ulp (sin: r^11/11! < 2e-9 * |r|; cos: r^12/12! <
//      2e-10), evaluated by Horner's rule in FMAs.
//   3. Rotate by the quadrant j mod 4: sin(x) is s, c, -s, -c and cos(x) is c, -s,
//      -c, s; a swap and two sign flips.
//
// The reduction is only accurate for |x| <= kSinCosFastLimit (the range the CUDA math
// library uses for the same three-constant scheme, verified here exhaustively by
// tests/unit/emulation/math_test.cpp); above it, and for inf/NaN, the accurate
// library sincosf (Payne-Hanek reduction) runs instead, out of line so its registers
// and local array stay out of the hot loop.
#pragma once

namespace kjit {

// |x| up to which the three-constant reduction is accurate to 2 ulp.
constexpr float kSinCosFastLimit = 105615.0f;

// The accurate library routine, kept out of line (rarely taken). Returned by value
// (x = sin, y = cos) so that the caller's results never need an address.
__device__ __noinline__ float2 sincos_f32_slow(float x) {
  float2 out;
  sincosf(x, &out.x, &out.y);
  return out;
}

// sin(x) and cos(x) together (one shared reduction), within 2 ulp of the exact values.
__device__ __forceinline__ void sincos_f32(float x, float* s, float* c) {
  const float a = fabsf(x);        // sin is odd, cos even: reduce |x|, restore the sign at the end
  if (!(a <= kSinCosFastLimit)) {  // also inf and NaN
    const float2 both = sincos_f32_slow(x);
    *s = both.x;
    *c = both.y;
    return;
  }
  // 1. j = round(|x| * 2/pi); the magic constant's addition does the rounding.
  const float magic = 0x1.8p23f;                   // 1.5 * 2^23
  const float t = fmaf(a, 0x1.45f306p-1f, magic);  // 2/pi = 0.63661977
  const float j = t - magic;
  const unsigned quadrant = __float_as_uint(t);  // low bits: j mod 4
  float r = fmaf(j, -0x1.921fb6p+0f, a);         // c1 = 1.5707964
  r = fmaf(j, 0x1.777a5cp-25f, r);               // c2 = -4.3711388e-08
  r = fmaf(j, 0x1.ee59dap-50f, r);               // c3 = -1.7151245e-15
  // 2. Taylor series on [-pi/4, pi/4].
  const float r2 = r * r;
  float sp = 2.7557319e-6f;           // 1/9!
  sp = fmaf(sp, r2, -1.9841270e-4f);  // -1/7!
  sp = fmaf(sp, r2, 8.3333333e-3f);   // 1/5!
  sp = fmaf(sp, r2, -1.6666667e-1f);  // -1/3!
  const float sin_r = fmaf(sp * r2, r, r);
  float cp = -2.7557319e-7f;          // -1/10!
  cp = fmaf(cp, r2, 2.4801587e-5f);   // 1/8!
  cp = fmaf(cp, r2, -1.3888889e-3f);  // -1/6!
  cp = fmaf(cp, r2, 4.1666667e-2f);   // 1/4!
  cp = fmaf(cp, r2, -0.5f);           // -1/2!
  const float cos_r = fmaf(cp, r2, 1.0f);
  // 3. Rotate: odd quadrants swap sin and cos; the sign bits flip in quadrants 2, 3
  //    (sin) and 1, 2 (cos), and sin takes the sign of x.
  const bool odd = (quadrant & 1u) != 0;
  const unsigned sin_sign = ((quadrant & 2u) << 30) ^ (__float_as_uint(x) & 0x80000000u);
  const unsigned cos_sign = ((quadrant + 1u) & 2u) << 30;
  *s = __uint_as_float(__float_as_uint(odd ? cos_r : sin_r) ^ sin_sign);
  *c = __uint_as_float(__float_as_uint(odd ? sin_r : cos_r) ^ cos_sign);
}

__device__ __forceinline__ float sin_f32(float x) {
  float s, c;
  sincos_f32(x, &s, &c);
  return s;
}

__device__ __forceinline__ float cos_f32(float x) {
  float s, c;
  sincos_f32(x, &s, &c);
  return c;
}

}  // namespace kjit
