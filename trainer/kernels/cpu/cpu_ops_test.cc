// The shared CPU primitives against direct references (the layers' kernels are tested with
// their layers, trainer/layers/<family>/).
#include <gtest/gtest.h>

#include <random>

#include "trainer/kernels/cpu/column_sums.h"
#include "trainer/kernels/cpu/gemm.h"
#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::cpu {
namespace {

Tensor Random(Shape shape, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  Tensor t(std::move(shape));
  for (int64_t i = 0; i < t.size(); ++i) t[i] = u(rng);
  return t;
}

TEST(GemmTest, MatchesNaiveForEveryTranspose) {
  const int64_t m = 7, n = 5, k = 9;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = Random(ta ? Shape{k, m} : Shape{m, k}, 1);
      Tensor b = Random(tb ? Shape{n, k} : Shape{k, n}, 2);
      Tensor c = Random({m, n}, 3);
      Tensor want = c;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t l = 0; l < k; ++l) {
            s += static_cast<double>(ta ? a[l * m + i] : a[i * k + l]) *
                 (tb ? b[j * k + l] : b[l * n + j]);
          }
          want[i * n + j] = static_cast<float>(2.0 * s + 0.5 * c[i * n + j]);
        }
      }
      Gemm(ta, tb, m, n, k, 2.0f, a.data(), b.data(), 0.5f, c.data());
      for (int64_t i = 0; i < c.size(); ++i) EXPECT_NEAR(c[i], want[i], 1e-4) << ta << tb << i;
    }
  }
}

TEST(ColumnSumsTest, AddsEachColumnsSumToWhatIsThere) {
  const int64_t rows = 37, n = 13;  // odd sizes: no vector-width multiple
  Tensor src = Random({rows, n}, 4);
  Tensor dst = Random({n}, 5);
  Tensor want = dst;
  for (int64_t j = 0; j < n; ++j) {
    double s = want[j];
    for (int64_t r = 0; r < rows; ++r) s += src[r * n + j];
    want[j] = static_cast<float>(s);
  }
  AddColumnSums(src.data(), rows, n, dst.data());
  for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(dst[j], want[j], 1e-4) << j;
}

}  // namespace
}  // namespace lockstep::trainer::cpu
