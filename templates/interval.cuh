// kjit/interval.cuh — interval arithmetic for a mask modifier over a whole tile.
//
// A mask modifier (compiler/lowering/attention_modifier.h) keeps the score of query
// q and key kv where its value is nonzero. Evaluated with every input replaced by
// the range it takes over a tile (q in [q_lo, q_hi], kv in [kv_lo, kv_hi]), each
// op giving a range that holds every value it can take there, the result says
// whether the mask keeps none of the tile's scores (the kernels then skip the tile:
// FlexAttention's block mask, without a pass over all the scores), all of them (no
// per-score test), or some. Sound, not exact: "some" is always a safe answer, and
// every op this file does not know gives an unbounded range.
//
// Ranges are doubles: int32 values are exact in them; an int result outside int32
// (where the device's arithmetic would wrap) becomes unbounded, and floating results
// are widened by a relative 2^-20 for the float rounding of the real evaluation, or
// become unbounded past the largest float (the device's value is then infinite). An
// i32 operand of a float op is widened for its conversion (exact up to 2^24 only),
// a cast to f16 or bf16 for its rounding, and an infinite or NaN input is unbounded.
// The same code runs on the host (define KJIT_INTERVAL_HOST first), where the tests
// check it against every score of random tiles.
#pragma once

#ifdef KJIT_INTERVAL_HOST
#include <cmath>
#define KJIT_INTERVAL_FN inline
#else
#define KJIT_INTERVAL_FN __device__ __forceinline__
#endif

namespace kjit {
namespace interval {

// Beyond any value a mask computes with; stands for "unbounded" without the NaNs
// that infinities give in inf - inf.
constexpr double kUnbounded = 1e300;

struct Range {
  double lo, hi;
};

KJIT_INTERVAL_FN Range exact(double v) {
  if (!(v > -kUnbounded && v < kUnbounded)) return {-kUnbounded, kUnbounded};  // inf, NaN
  return {v, v};
}
KJIT_INTERVAL_FN Range between(double lo, double hi) {
  return {lo, hi};
}
KJIT_INTERVAL_FN Range unknown() {
  return {-kUnbounded, kUnbounded};
}
KJIT_INTERVAL_FN double lesser(double a, double b) {
  return a < b ? a : b;
}
KJIT_INTERVAL_FN double greater(double a, double b) {
  return a > b ? a : b;
}
KJIT_INTERVAL_FN bool unbounded(const Range& r) {
  return !(r.lo > -kUnbounded && r.hi < kUnbounded);  // NaN counts as unbounded
}

// A value rounded to a float with `half_ulp` the relative rounding error (2^-24 for
// f32, 2^-11 for f16, 2^-8 for bf16) and `subnormal` the absolute one near 0, whose
// largest finite value is `largest`: unbounded where it may round to infinity.
KJIT_INTERVAL_FN Range rounded(Range a, double half_ulp, double largest, double subnormal) {
  if (unbounded(a) || a.lo < -largest || a.hi > largest) return unknown();
  const double slack_lo = (a.lo < 0 ? -a.lo : a.lo) * half_ulp + subnormal;
  const double slack_hi = (a.hi < 0 ? -a.hi : a.hi) * half_ulp + subnormal;
  return {a.lo - slack_lo, a.hi + slack_hi};
}
// An i32 converted to f32 for a float op: exact up to 2^24, rounded beyond.
KJIT_INTERVAL_FN Range to_float(Range a) {
  if (!unbounded(a) && a.lo >= -16777216.0 && a.hi <= 16777216.0) return a;
  return rounded(a, 5.9604644775390625e-8, 3.4028234663852886e38, 0);
}
KJIT_INTERVAL_FN Range to_f16(Range a) {
  return rounded(a, 4.8828125e-4, 65504.0, 2.98023223876953125e-8);
}
KJIT_INTERVAL_FN Range to_bf16(Range a) {
  return rounded(a, 3.90625e-3, 3.3895313892515355e38, 1e-38);
}

// The result of an op of dtype i32 (`integer`) or floating: ints outside int32
// wrap on the device, so their range is unknown; floats are widened by 2^-20 for
// rounding (several ops' worth of f32's 2^-24) and unknown where they may overflow.
KJIT_INTERVAL_FN Range result(Range r, bool integer) {
  if (unbounded(r)) return unknown();
  if (!integer) return rounded(r, 9.5367431640625e-7, 3.4028234663852886e38, 1e-30);
  if (r.lo < -2147483648.0 || r.hi > 2147483647.0) return unknown();
  return r;
}

KJIT_INTERVAL_FN Range neg(Range a) {
  return {-a.hi, -a.lo};
}
KJIT_INTERVAL_FN Range abs(Range a) {
  if (a.lo >= 0) return a;
  if (a.hi <= 0) return {-a.hi, -a.lo};
  return {0, greater(-a.lo, a.hi)};
}
KJIT_INTERVAL_FN Range add(Range a, Range b) {
  return {a.lo + b.lo, a.hi + b.hi};
}
KJIT_INTERVAL_FN Range sub(Range a, Range b) {
  return {a.lo - b.hi, a.hi - b.lo};
}
KJIT_INTERVAL_FN Range mul(Range a, Range b) {
  if (unbounded(a) || unbounded(b)) return unknown();
  const double p1 = a.lo * b.lo, p2 = a.lo * b.hi, p3 = a.hi * b.lo, p4 = a.hi * b.hi;
  return {lesser(lesser(p1, p2), lesser(p3, p4)), greater(greater(p1, p2), greater(p3, p4))};
}
// Division by a range that excludes 0 (else unknown); integer division truncates,
// which is monotone, so it applies to the corners.
KJIT_INTERVAL_FN Range div(Range a, Range b, bool integer) {
  if (unbounded(a) || unbounded(b) || (b.lo <= 0 && b.hi >= 0)) return unknown();
  double q[4] = {a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi};
  if (integer)
    for (int i = 0; i < 4; ++i) q[i] = q[i] < 0 ? -::floor(-q[i]) : ::floor(q[i]);
  return {lesser(lesser(q[0], q[1]), lesser(q[2], q[3])),
          greater(greater(q[0], q[1]), greater(q[2], q[3]))};
}
KJIT_INTERVAL_FN Range fma(Range a, Range b, Range c) {
  return add(mul(a, b), c);
}
KJIT_INTERVAL_FN Range max(Range a, Range b) {
  return {greater(a.lo, b.lo), greater(a.hi, b.hi)};
}
KJIT_INTERVAL_FN Range min(Range a, Range b) {
  return {lesser(a.lo, b.lo), lesser(a.hi, b.hi)};
}
KJIT_INTERVAL_FN Range relu(Range a) {
  return {greater(a.lo, 0), greater(a.hi, 0)};
}
KJIT_INTERVAL_FN Range floor(Range a) {
  return {::floor(a.lo), ::floor(a.hi)};
}
KJIT_INTERVAL_FN Range ceil(Range a) {
  return {::ceil(a.lo), ::ceil(a.hi)};
}

// Comparisons give a bool: [1, 1] true on the whole tile, [0, 0] false on all of
// it, [0, 1] either.
KJIT_INTERVAL_FN Range truth(bool always, bool never) {
  return always ? Range{1, 1} : never ? Range{0, 0} : Range{0, 1};
}
KJIT_INTERVAL_FN Range lt(Range a, Range b) {
  return truth(a.hi < b.lo, a.lo >= b.hi);
}
KJIT_INTERVAL_FN Range le(Range a, Range b) {
  return truth(a.hi <= b.lo, a.lo > b.hi);
}
KJIT_INTERVAL_FN Range gt(Range a, Range b) {
  return lt(b, a);
}
KJIT_INTERVAL_FN Range ge(Range a, Range b) {
  return le(b, a);
}
KJIT_INTERVAL_FN Range eq(Range a, Range b) {
  return truth(a.lo == a.hi && b.lo == b.hi && a.lo == b.lo, a.hi < b.lo || b.hi < a.lo);
}
KJIT_INTERVAL_FN Range ne(Range a, Range b) {
  const Range e = eq(a, b);
  return {1 - e.hi, 1 - e.lo};
}
// select(c, a, b): a where c is nonzero.
KJIT_INTERVAL_FN Range select(Range c, Range a, Range b) {
  if (c.lo > 0 || c.hi < 0) return a;    // never zero
  if (c.lo == 0 && c.hi == 0) return b;  // always zero
  return {lesser(a.lo, b.lo), greater(a.hi, b.hi)};
}
// Casts: to bool, nonzero; to i32, truncation (monotone); to a float, the same.
KJIT_INTERVAL_FN Range to_bool(Range a) {
  return truth(a.lo > 0 || a.hi < 0, a.lo == 0 && a.hi == 0);
}
KJIT_INTERVAL_FN Range to_int(Range a) {
  if (unbounded(a)) return unknown();
  return {a.lo < 0 ? -::floor(-a.lo) : ::floor(a.lo), a.hi < 0 ? -::floor(-a.hi) : ::floor(a.hi)};
}

// What a mask's range says about a tile: 0, it keeps no score; 2, every score; 1,
// some (or it cannot tell).
KJIT_INTERVAL_FN int tile_state(Range mask) {
  if (mask.lo == 0 && mask.hi == 0) return 0;
  if (mask.lo > 0 || mask.hi < 0) return 2;
  return 1;
}

}  // namespace interval
}  // namespace kjit
