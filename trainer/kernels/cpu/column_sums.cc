#include "trainer/kernels/cpu/column_sums.h"

namespace lockstep::trainer::cpu {

void AddColumnSums(const float* src, int64_t rows, int64_t n, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * n;
    for (int64_t j = 0; j < n; ++j) dst[j] += s[j];
  }
}

}  // namespace lockstep::trainer::cpu
