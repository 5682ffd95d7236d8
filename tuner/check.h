// One output check for the whole project: the CLI (`kjit run`), the GPU tests,
// the benchmarks and the tuner (no candidate wins before it passes) all compare
// with an fp64 reference through these functions.
//
//   relative L2 error = ||out - ref|| / ||ref||   over the checked elements
//
// NaN never passes: an output that is NaN or infinite where the reference is
// finite makes the error infinite. Where the reference itself is not finite (a
// log of 0, say) the output must be the same value (the same infinity, or NaN).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kjit/compiler/ir/dtype.h"

namespace kjit::tuner {

// ||got - want|| / ||want||; infinity when the sizes differ or an element breaks
// the NaN rule above; 0 when both are all zeros.
double relative_l2(const std::vector<double>& got, const std::vector<double>& want);

// The precision the arithmetic had, which sets the tolerance.
enum class Precision {
  Exact32,  // f32 (or i32, bool) all the way: 1e-5
  TF32,     // f32 data on the tensor cores with 10 mantissa bits: 5e-3
  Half,     // f16 / bf16 storage, f32 arithmetic: 1e-2 (reference rounded to the dtype)
};
double tolerance(Precision precision);
// The precision of a result stored as `dtype`: Half for f16/bf16, else Exact32.
Precision precision_of(ir::DType dtype);

struct CheckOutcome {
  double relative_l2 = 0;
  double tolerance = 0;
  int64_t checked = 0;  // elements compared
  std::string detail;   // e.g. the first element far off; empty when none
  bool passed() const { return relative_l2 <= tolerance; }
  // "relative L2 error 3.1e-03 over 4194304 outputs (tolerance 1e-02)" + detail
  std::string describe() const;
};

// relative_l2() against the tolerance of `precision`.
CheckOutcome check(const std::vector<double>& got, const std::vector<double>& want,
                   Precision precision);

}  // namespace kjit::tuner
