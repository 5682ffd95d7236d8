#include "kjit/tuner/check.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace kjit::tuner {

double relative_l2(const std::vector<double>& got, const std::vector<double>& want) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (got.size() != want.size()) return kInf;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(want[i])) {
      const bool same = got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]));
      if (!same) return kInf;
      continue;
    }
    if (!std::isfinite(got[i])) return kInf;
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  if (norm == 0) return diff == 0 ? 0 : kInf;
  return std::sqrt(diff / norm);
}

double tolerance(Precision precision) {
  switch (precision) {
    case Precision::Exact32:
      return 1e-5;
    case Precision::TF32:
      return 5e-3;
    case Precision::Half:
      return 1e-2;
  }
  return 0;
}

Precision precision_of(ir::DType dtype) {
  return dtype == ir::DType::F16 || dtype == ir::DType::BF16 ? Precision::Half : Precision::Exact32;
}

std::string CheckOutcome::describe() const {
  std::string s = fmt::format("relative L2 error {:.3e} over {} outputs (tolerance {:.0e})",
                              relative_l2, checked, tolerance);
  if (!detail.empty()) s += "; " + detail;
  return s;
}

CheckOutcome check(const std::vector<double>& got, const std::vector<double>& want,
                   Precision precision) {
  CheckOutcome out;
  out.relative_l2 = relative_l2(got, want);
  out.tolerance = tolerance(precision);
  out.checked = static_cast<int64_t>(want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const bool bad = std::isfinite(want[i])
                         ? !std::isfinite(got[i])
                         : !(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])));
    if (bad) {
      out.detail = fmt::format("element {}: got {:.6g}, expected {:.6g}", i, got[i], want[i]);
      break;
    }
  }
  return out;
}

}  // namespace kjit::tuner
