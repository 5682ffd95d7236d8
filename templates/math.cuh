// kjit/math.cuh — f32 sine, cosine and gelu for generated kernels, written out, a
// cheaper gelu for results rounded to 16 bits, and the hardware's tanh for fast chains.
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
//   2. Approximate on [-pi/4, pi/4]: polynomials fitted to the relative error
//      (degree 7 for sin, 8 for cos: 4e-9 and 1e-10 before rounding, a term shorter
//      than the Taylor series of the same accuracy), by Horner's rule in FMAs.
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
  // 2. Polynomials on [-pi/4, pi/4]: sin r = r + r^3 P(r^2), cos r = 1 - r^2/2 + r^4 Q(r^2),
  //    P and Q of degree 2 fitted to the relative error (least squares at Chebyshev
  //    nodes: 4e-9 and 1e-10 before rounding), one term shorter each than Taylor.
  const float r2 = r * r;
  float sp = -1.95159487e-4f;          // ~ -1/7!
  sp = fmaf(sp, r2, 8.33216573e-3f);   // ~ 1/5!
  sp = fmaf(sp, r2, -1.66666547e-1f);  // ~ -1/3!
  const float sin_r = fmaf(sp * r2, r, r);
  float cp = 2.44358479e-5f;           // ~ 1/8!
  cp = fmaf(cp, r2, -1.38873415e-3f);  // ~ -1/6!
  cp = fmaf(cp, r2, 4.16666462e-2f);   // ~ 1/4!
  cp = fmaf(cp, r2, -0.5f);            // -1/2!
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

// ---- gelu(x) = x * Phi(x), Phi the standard normal CDF ------------------------
//
// Why not 0.5f * x * erfcf(-x / sqrt 2)? It is accurate, but erfcf costs about 45
// instructions (two reciprocals, an exponential, a long polynomial) and in a matmul
// epilogue every output pays them while the tensor cores wait (the epilogue's
// arithmetic is exposed time: docs/perf/2026-11-29-h200-matmul-wgmma.md). This
// version needs about 34, all full rate but one reciprocal and one exponential:
//
//   1. Symmetry: Phi(x) = 1 - Phi(-x). Compute q = Phi(-|x|) = erfc(|x|/sqrt 2) / 2,
//      which is at most 1/2, and take Phi = q for x < 0 and 1 - q otherwise: the
//      subtraction never cancels, so negative x keep their relative accuracy (the
//      tail matters there; 1 + erf(x/sqrt 2) would lose it).
//   2. q = exp(-x^2/2) * R(|x|) where R = erfcx(|x|/sqrt 2) / 2 is smooth: written
//      as t * P(t) with t = 1 / (1 + |x|/4) in (0, 1], P a degree-9 polynomial
//      (relative error 2e-8 on |x| <= 19, fitted by iteratively reweighted least
//      squares on the relative error, coefficients rounded to float).
//   3. exp(-x^2/2) without losing the bits of x^2: x * x = h + l exactly (l from one
//      FMA), exp(-h/2) from expf, times (1 - l/2). Rounding x^2 instead would cost up
//      to x^2/2 half-ulps (60 ulps at x = -11).
//   4. |x| is capped at 19, where exp(-19^2/2) is 0 in float (Phi(-x) underflows
//      from x = 14 on): gelu(-inf) = -0, the limit, gelu(inf) = inf, NaN stays NaN.
//
// Within 8 ulps of the exact value (subnormal results: of the smallest normal's
// spacing), most of it from rounding t, which R amplifies up to 3.2 times near x = 0
// (tests/unit/emulation/math_test.cpp checks every float; tests/gpu the device).
// erfcf's documented bound is 4 ulps, before the rounding of its argument x / sqrt 2
// (which costs up to x^2 half-ulps more in the tail).

// 1 / y by the hardware alone (1 ulp; rcp.approx.ftz: y must not be subnormal).
__device__ __forceinline__ float reciprocal_approx(float y) {
#ifdef __CUDA_ARCH__
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
  return r;
#else
  return 1.0f / y;           // host emulation: the correctly rounded value
#endif
}

// 1 / y for y in [1, 5.75]: the hardware's approximate reciprocal refined by one
// Newton step, which is the correctly rounded reciprocal on normal floats (the same
// two steps as the fast path of __frcp_rn, without its branch for extreme
// exponents, which 1 + |x|/4 never has).
__device__ __forceinline__ float reciprocal_of_moderate(float y) {
#ifdef __CUDA_ARCH__
  const float r = reciprocal_approx(y);
  return fmaf(r, fmaf(-y, r, 1.0f), r);
#else
  return 1.0f / y;           // host emulation: the correctly rounded value the device gets
#endif
}

__device__ __forceinline__ float gelu_f32(float x) {
  const float a = fminf(fabsf(x), 19.0f);  // NaN -> 19; the result is NaN anyway
  // 2. R(a) = t * P(t), t = 1 / (1 + a/4), Horner from the highest power.
  const float t = reciprocal_of_moderate(fmaf(a, 0.25f, 1.0f));
  float p = 0x1.3715bap-6f;
  p = fmaf(p, t, -0x1.371d62p-4f);
  p = fmaf(p, t, 0x1.5349cep-4f);
  p = fmaf(p, t, -0x1.b9ad2ep-7f);
  p = fmaf(p, t, 0x1.882eb8p-5f);
  p = fmaf(p, t, 0x1.14ea34p-4f);
  p = fmaf(p, t, 0x1.4228f2p-4f);
  p = fmaf(p, t, 0x1.815406p-4f);
  p = fmaf(p, t, 0x1.983d9ap-4f);
  p = fmaf(p, t, 0x1.9887aap-4f);
  // 3. a^2 = h + l exactly; exp(-a^2/2) = exp(-h/2) * (1 - l/2) to float precision.
  //    x * Phi(-|x|) is formed as (x * R) * exp(..): where it is tiny, the exponential
  //    alone would already be subnormal and lose bits, the product need not.
  const float h = a * a;
  const float l = fmaf(a, a, -h);
  float xq = (copysignf(a, x) * (t * p)) * expf(-0.5f * h);
  xq *= fmaf(-0.5f, l, 1.0f);  // a product, not an FMA: -0 stays -0 where xq underflows
  // 1. x * Phi(x) from x * Phi(-|x|).
  return x < 0.0f ? xq : x - xq;
}

// ---- gelu for a result rounded to 16 bits ------------------------------------
//
// A matmul epilogue that writes bf16 or f16 keeps 8 or 11 bits of gelu(acc + bias);
// gelu_f32's 8 ulps are 2^-20 of the value, far finer than that, and its
// instructions are the exposed part of the epilogue (the tensor cores
// wait while they issue: docs/perf/2026-12-04-h200-shifted-rows-held-words.md).
// The same three steps with a coarser budget: 21 PTX instructions, against 39:
//
//   - t = 1 / (1 + a/4) from the hardware's approximate reciprocal alone (1 ulp,
//     no Newton step);
//   - R(a) = t * P(t) with P of degree 7, not 9 (relative error 6.5e-7, fitted the
//     same way);
//   - exp(-a^2/2) without the exact square: the hardware's 2^y, one MUFU.EX2 (a
//     few ulps), at y = -a^2 log2(e) / 4, squared. Half the exponent keeps 2^y
//     normal wherever the result is (a <= 18.7), so the flush to zero of the
//     approximate 2^y never loses a representable result; the product's last
//     rounding alone may be subnormal. Rounding a^2 (and its product with
//     log2(e)/4) costs about a^2/2 * 2^-23 of relative error: 2^-20 at |x| = 4,
//     2^-17 at |x| = 12, where results are below 1e-31.
//
// Relative error at most 2^-19 for |x| <= 4 (f16 holds negative results as normal
// numbers only there) and 2^-16.5 wherever the result is at least FLT_MIN
// (tests/unit/emulation/math_test.cpp on the CPU, every float; tests/gpu/math_test.cpp
// on the device; the worst measured on the H200: 2^-19.5 and 2^-16.9): a
// result rounded to bf16 or f16 differs from the correctly rounded one only where
// the exact value lies within 1/256 of an f16 ulp (1/2048 of a bf16 ulp) of a
// rounding boundary. Chosen by the lowering (ScalarMath::Rounded16) for matmul
// epilogues that write bf16 or f16; everything else keeps gelu_f32.

// 2^y by the hardware (MUFU.EX2); results below FLT_MIN flush to zero.
__device__ __forceinline__ float exp2_approx(float y) {
#ifdef __CUDA_ARCH__
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
  return r;
#else
  const float r = exp2f(y);  // host emulation, with the device's flush to zero
  return r < 0x1p-126f ? 0.0f : r;
#endif
}

__device__ __forceinline__ float gelu_for_16bit(float x) {
  const float a = fminf(fabsf(x), 19.0f);  // NaN -> 19; the result is NaN anyway
  const float t = reciprocal_approx(fmaf(a, 0.25f, 1.0f));
  float p = -0x1.14382p-5f;  // P(t), Horner from the highest power
  p = fmaf(p, t, 0x1.03321ep-4f);
  p = fmaf(p, t, 0x1.6c3a72p-5f);
  p = fmaf(p, t, 0x1.4ccca0p-5f);
  p = fmaf(p, t, 0x1.8ab996p-4f);
  p = fmaf(p, t, 0x1.6c077p-4f);
  p = fmaf(p, t, 0x1.9b4918p-4f);
  p = fmaf(p, t, 0x1.985bf8p-4f);
  // e = exp(-a^2/4) = 2^(-a^2 log2(e) / 4); exp(-a^2/2) = e * e.
  const float e = exp2_approx((a * -0x1.715476p-2f) * a);
  // |x| * Phi(-|x|) = a * R(a) * e * e, the last product alone possibly subnormal.
  const float m = (((a * t) * p) * e) * e;
  return x < 0.0f ? -m : x - m;  // x * Phi(x): Phi(-|x|) for x < 0, 1 - Phi(-|x|) else
}

// ---- tanh by the hardware (a score modifier's fast math) ------------------------
// One MUFU.TANH instruction (sm_75 on); relative error at most 2^-10.99 (PTX ISA,
// tanh.approx.f32), exact sign, tanh(+-inf) = +-1. Used where a chain runs once per
// attention score (compiler/lowering/elementwise.h, ScalarMath::Fast).
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace kjit
