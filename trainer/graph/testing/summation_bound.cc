#include "trainer/graph/testing/summation_bound.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace lockstep::trainer::graph::testing {

double SummationBound(int64_t k, double magnitude) {
  const double u = std::numeric_limits<float>::epsilon() / 2;  // unit roundoff, 2^-24
  const double ku = static_cast<double>(k) * u;
  const double gamma = ku < 1 ? ku / (1 - ku) : std::numeric_limits<double>::infinity();
  return 2 * gamma * magnitude;
}

std::string SummationMismatch(const Tensor& got, const Tensor& want, const Tensor& magnitude,
                              int64_t k, double* worst_ratio) {
  if (got.shape() != want.shape() || got.shape() != magnitude.shape()) {
    return absl::StrCat("shapes differ: ", got.size(), " / ", want.size(), " / ", magnitude.size(),
                        " elements");
  }
  int64_t past = 0, worst = -1;
  double worst_excess = 0, ratio = 0;
  for (int64_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    const double bound = SummationBound(k, magnitude[i]);
    if (!(err <= bound)) {  // NaN fails too
      ++past;
      if (worst < 0 || !(err - bound <= worst_excess)) {
        worst = i;
        worst_excess = err - bound;
      }
    }
    if (bound > 0) ratio = std::max(ratio, err / bound);
  }
  if (worst_ratio != nullptr) *worst_ratio = ratio;
  if (past == 0) return "";
  return absl::StrCat(past, " of ", got.size(), " elements past the bound; worst: element ", worst,
                      " = ", got[worst], " against ", want[worst], " (|difference| ",
                      std::abs(static_cast<double>(got[worst]) - want[worst]), ", bound ",
                      SummationBound(k, magnitude[worst]), " for K = ", k,
                      ", sum |a*b| = ", magnitude[worst], ")");
}

}  // namespace lockstep::trainer::graph::testing
